//! `baaaht-bench tools`: the overhead of a tool call — `read_file` of a 1 KiB file — in the
//! session's warm tool container and in a fresh (cold) one, beside the raw baselines measured
//! in the same run: `docker exec` into the warm container and `docker run --rm`.

use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use baaaht_proto::client::Client;
use baaaht_proto::v1;
use baaaht_tests::DaemonOptions;

use crate::{coder, header, Coder, Row};

async fn agent(mode: &str) -> Result<Coder> {
    coder(DaemonOptions { env: vec![("BAAAHT__TOOLS__MODE".into(), mode.into())], ..Default::default() }).await
}

pub(crate) fn request(tool: &str, params: serde_json::Value) -> v1::ToolRequest {
    v1::ToolRequest { tool: tool.into(), params_json: params.to_string(), ..v1::ToolRequest::default() }
}

/// One read_file call: (daemon in → out, client round trip), in ms.
pub(crate) async fn read_once(client: &mut Client) -> Result<(f64, f64)> {
    let started = Instant::now();
    let response =
        client.agents.request_tool_execution(request("read_file", serde_json::json!({"path": "kib.txt"}))).await?;
    let round_trip = started.elapsed().as_secs_f64() * 1e3;
    let response = response.into_inner();
    if response.is_error {
        bail!("read_file failed: {}", response.content);
    }
    let daemon_us: f64 = response.metadata.get("daemon_us").context("daemon_us in the metadata")?.parse()?;
    Ok((daemon_us / 1e3, round_trip))
}

pub(crate) fn timed(command: &mut Command) -> Result<f64> {
    let started = Instant::now();
    let status = command.stdout(Stdio::null()).stderr(Stdio::null()).status()?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(started.elapsed().as_secs_f64() * 1e3)
}

/// `docker run --rm` of the base image under `runtime`, reading `kib.txt` from `workspace`
/// (mounted read-only): the cold baseline, in ms.
pub(crate) fn docker_run_cat(workspace: &std::path::Path, runtime: &str) -> Result<f64> {
    let mount = format!("{}:/workspace:ro", workspace.display());
    let runtime = format!("--runtime={runtime}");
    let mut command = Command::new("docker");
    command.args(["run", "--rm", &runtime, "--network", "none", "-v", &mount, "baaaht/base:latest"]);
    timed(command.args(["cat", "/workspace/kib.txt"]))
}

pub(crate) fn run(warm_calls: usize, cold_calls: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let kib = "x".repeat(1023) + "\n";
    let mut warm = rt.block_on(agent("warm"))?;
    let mut cold = rt.block_on(agent("cold"))?;
    let mut rows = [
        Row { name: "warm: read_file 1 KiB, daemon request in → result out".into(), unit: "ms", values: vec![] },
        Row { name: "warm: read_file 1 KiB, agent round trip".into(), unit: "ms", values: vec![] },
        Row { name: "cold: read_file 1 KiB, daemon request in → result out".into(), unit: "ms", values: vec![] },
        Row { name: "baseline: docker exec CONTAINER cat FILE (CLI)".into(), unit: "ms", values: vec![] },
        Row { name: "baseline: docker run --rm IMAGE cat FILE, the tool's tier".into(), unit: "ms", values: vec![] },
        Row { name: "baseline: docker run --rm IMAGE cat FILE, runc".into(), unit: "ms", values: vec![] },
    ];
    rt.block_on(async {
        for agent in [&mut warm, &mut cold] {
            let wrote = agent
                .client
                .agents
                .request_tool_execution(request("write_file", serde_json::json!({"path": "kib.txt", "content": kib})))
                .await?;
            if wrote.get_ref().is_error {
                bail!("write_file failed: {}", wrote.get_ref().content);
            }
        }
        // The first warm call started the container; these are all warm.
        for _ in 0..warm_calls {
            let (daemon, round_trip) = read_once(&mut warm.client).await?;
            rows[0].values.push(daemon);
            rows[1].values.push(round_trip);
        }
        for _ in 0..cold_calls {
            rows[2].values.push(read_once(&mut cold.client).await?.0);
        }
        anyhow::Ok(())
    })?;
    let tool_container = warm
        .daemon
        .recorded_containers()
        .into_iter()
        .find(|name| name.starts_with("baaaht-tool-"))
        .context("the warm tool container")?;
    for _ in 0..cold_calls.max(20) {
        rows[3].values.push(timed(Command::new("docker").args([
            "exec",
            &tool_container,
            "cat",
            "/workspace/kib.txt",
        ]))?);
    }
    // The baseline is the same container started bare: under the tier the daemon gives tool
    // containers (gVisor by default, where it runs), and under runc beside it.
    let tier = baaaht_tests::docker(&["inspect", "-f", "{{.HostConfig.Runtime}}", &tool_container])?;
    let tier = tier.trim().to_string();
    rows[4].name = format!("baseline: docker run --rm --runtime={tier} IMAGE cat FILE (the tool's tier)");
    let workspace = warm.daemon.data_dir.join("sessions/self-test/data");
    for _ in 0..cold_calls {
        rows[4].values.push(docker_run_cat(&workspace, &tier)?);
        rows[5].values.push(docker_run_cat(&workspace, "runc")?);
    }
    println!(
        "baaaht-bench tools: read_file of a 1 KiB file through RequestToolExecution, {warm_calls} warm and \
         {cold_calls} cold calls, beside docker exec and docker run --rm in the same run\n"
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().map(Row::print).collect();
    let warm_p99 = baaaht_tests::percentile(&mut rows[0].values, 99.0);
    let (warm_p50, cold_p50, exec_p50, run_p50, runc_p50) = (p50[0], p50[2], p50[3], p50[4], p50[5]);
    println!(
        "\nwarm: {:.1}× faster than docker exec (target ≤ 2 ms p50, ≥ 25×); cold: {:.2}× docker run --rm under the \
         same tier ({tier}; target ≤ 1.0), {:.2}× under runc",
        exec_p50 / warm_p50,
        cold_p50 / run_p50,
        cold_p50 / runc_p50
    );
    println!(
        "RESULT warm_p50_ms={warm_p50:.3} warm_p99_ms={warm_p99:.3} agent_round_trip_p50_ms={:.3} cold_p50_ms={cold_p50:.1} \
         docker_exec_p50_ms={exec_p50:.1} tier={tier} docker_run_p50_ms={run_p50:.1} docker_run_runc_p50_ms={runc_p50:.1} \
         warm_vs_exec={:.1} cold_vs_run={:.2} cold_vs_runc={:.2}",
        p50[1],
        exec_p50 / warm_p50,
        cold_p50 / run_p50,
        cold_p50 / runc_p50
    );
    Ok(())
}
