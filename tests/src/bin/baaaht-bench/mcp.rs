//! `baaaht-bench mcp`: a warm MCP tool call through the daemon — an agent's
//! RequestToolExecution, the relay in the server's container, the real `mcp-server-time` from
//! PyPI — beside the same call made directly on the server's stdio (`docker run -i` of the same
//! image, spoken to with the same MCP client), and a server's cold start (container, relay,
//! `initialize`, `tools/list`) beside the same start done directly.

use std::process::Stdio;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use baaaht_proto::v1;
use baaaht_tests::DaemonOptions;
use rmcp::model::{CallToolRequestParams, ClientConfig, Implementation, ProtocolVersion};
use rmcp::ServiceExt as _;

use crate::{coder, header, Row};

const MCP: &str = "servers:\n  time:\n    command: mcp-server-time\n    \
                   install: [{source: pip, name: mcp-server-time==2026.10.19}]\n    roles: [coder]\n";

fn arguments() -> serde_json::Map<String, serde_json::Value> {
    let mut arguments = serde_json::Map::new();
    arguments.insert("timezone".into(), "UTC".into());
    arguments
}

/// The server run directly: `docker run -i` of `image`, an MCP client on its stdio.
struct Direct {
    client: rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
    child: tokio::process::Child,
}

async fn start_direct(image: &str) -> Result<Direct> {
    let mut child = tokio::process::Command::new("docker")
        .args(["run", "-i", "--rm", "--network", "none", image, "mcp-server-time"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let (stdin, stdout) = (child.stdin.take().context("stdin")?, child.stdout.take().context("stdout")?);
    let config = ClientConfig::new(Default::default(), Implementation::new("baaaht-bench", "1"))
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
    let client = config.serve((stdout, stdin)).await?;
    Ok(Direct { client, child })
}

pub(crate) fn run(calls: usize, starts: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let files = vec![("config/mcp.yaml".into(), MCP.into())];
    let mut agent = rt.block_on(coder(DaemonOptions { files, ..Default::default() }))?;
    let call = || v1::ToolRequest {
        tool: "mcp__time__get_current_time".into(),
        params_json: r#"{"timezone": "UTC"}"#.into(),
        ..v1::ToolRequest::default()
    };
    let mut rows = [
        Row { name: "warm MCP call through the daemon, agent round trip".into(), unit: "ms", values: vec![] },
        Row { name: "warm MCP call, daemon request in → result out".into(), unit: "ms", values: vec![] },
        Row {
            name: "baseline: the same call on the server's stdio (docker run -i)".into(),
            unit: "ms",
            values: vec![],
        },
        Row {
            name: "cold start through the daemon (container, relay, initialize, tools/list)".into(),
            unit: "ms",
            values: vec![],
        },
        Row { name: "baseline: docker run -i + initialize + tools/list".into(), unit: "ms", values: vec![] },
    ];
    rt.block_on(async {
        // The first call builds the server's layer (once) and starts it.
        let first = agent.client.agents.request_tool_execution(call()).await?.into_inner();
        if first.is_error || !first.content.contains("UTC") {
            bail!("the first call failed: {}", first.content);
        }
        anyhow::Ok(())
    })?;
    let container = agent
        .daemon
        .recorded_containers()
        .into_iter()
        .find(|name| name.starts_with("baaaht-mcp-"))
        .context("the MCP server's container")?;
    let image = baaaht_tests::docker(&["inspect", "-f", "{{.Config.Image}}", &container])?.trim().to_string();
    rt.block_on(async {
        let mut direct = start_direct(&image).await?;
        // Interleaved, so both paths see the same machine.
        for _ in 0..calls {
            let started = Instant::now();
            let answer = agent.client.agents.request_tool_execution(call()).await?.into_inner();
            rows[0].values.push(started.elapsed().as_secs_f64() * 1e3);
            if answer.is_error {
                bail!("the call failed: {}", answer.content);
            }
            let daemon_us: f64 = answer.metadata.get("daemon_us").context("daemon_us")?.parse()?;
            rows[1].values.push(daemon_us / 1e3);
            let started = Instant::now();
            let params = CallToolRequestParams::new("get_current_time").with_arguments(arguments());
            let result = direct.client.call_tool(params).await?;
            rows[2].values.push(started.elapsed().as_secs_f64() * 1e3);
            if result.is_error == Some(true) {
                bail!("the direct call failed: {result:?}");
            }
        }
        direct.client.cancel().await?;
        // silent-ok: the container may have ended with its input.
        let _ = direct.child.kill().await;

        let mut host = baaaht_tests::scenario::host_client(&agent.daemon).await?;
        for _ in 0..starts {
            let request = v1::McpServerRequest {
                context: Some(baaaht_tests::scenario::user("bench")),
                server: "time".into(),
                restart: true,
                ..Default::default()
            };
            let started = Instant::now();
            let listed = host.admin.list_mcp_tools(request).await?.into_inner();
            rows[3].values.push(started.elapsed().as_secs_f64() * 1e3);
            if listed.tools.is_empty() {
                bail!("the restarted server listed no tools");
            }
            let started = Instant::now();
            let mut direct = start_direct(&image).await?;
            let tools = direct.client.list_all_tools().await?;
            rows[4].values.push(started.elapsed().as_secs_f64() * 1e3);
            if tools.is_empty() {
                bail!("the direct server listed no tools");
            }
            direct.client.cancel().await?;
            // silent-ok: as above.
            let _ = direct.child.kill().await;
        }
        anyhow::Ok(())
    })?;
    println!(
        "baaaht-bench mcp: mcp-server-time's get_current_time, {calls} warm calls interleaved with the same call \
         on the server's stdio, and {starts} cold starts of each\n"
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().map(Row::print).collect();
    let p99: Vec<f64> = rows.iter_mut().map(|row| baaaht_tests::percentile(&mut row.values, 99.0)).collect();
    let added = p50[0] - p50[2];
    println!(
        "\nthrough the daemon: {added:+.2} ms p50 over the direct call ({:.2}×); cold start {:.2}× the direct start",
        p50[0] / p50[2],
        p50[3] / p50[4]
    );
    println!(
        "RESULT warm_p50_ms={:.3} warm_p99_ms={:.3} daemon_p50_ms={:.3} direct_p50_ms={:.3} direct_p99_ms={:.3} \
         added_p50_ms={added:.3} warm_vs_direct={:.2} cold_start_p50_ms={:.1} direct_start_p50_ms={:.1} cold_vs_direct={:.2}",
        p50[0],
        p99[0],
        p50[1],
        p50[2],
        p99[2],
        p50[0] / p50[2],
        p50[3],
        p50[4],
        p50[3] / p50[4]
    );
    Ok(())
}
