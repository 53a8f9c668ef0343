//! `baaaht-bench isolation`: what the gVisor tier costs a tool call. Under runc and under
//! gVisor, in the same run: a warm call (`read_file` of 1 KiB in the session's resident
//! runner), a cold one (a fresh container per call), a `grep` over 1,000 files and
//! `python3 -c pass` through `exec`, beside `docker run --rm` with each runtime.

use anyhow::{bail, Context as _, Result};
use baaaht_proto::client::Client;
use baaaht_tests::DaemonOptions;

use crate::tools::{docker_run_cat, read_once, request};
use crate::{coder, header, Coder, Row};

const TIERS: [(&str, &str); 2] = [("runc", "runc"), ("gvisor", "runsc")];

/// A Coder whose tool containers run under `tier`, in `mode` (warm or cold).
async fn agent(tier: &str, mode: &str) -> Result<Coder> {
    let isolation = serde_json::json!({"tool": tier, "coder": tier}).to_string();
    coder(DaemonOptions {
        env: vec![("BAAAHT__TOOLS__MODE".into(), mode.into()), ("BAAAHT__CONTAINER__ISOLATION".into(), isolation)],
        ..Default::default()
    })
    .await
}

/// One call of `tool`; the daemon's time for it (request in → result out), in ms.
async fn call(client: &mut Client, tool: &str, params: serde_json::Value) -> Result<f64> {
    let response = client.agents.request_tool_execution(request(tool, params)).await?.into_inner();
    if response.is_error {
        bail!("{tool} failed: {}", response.content);
    }
    let daemon_us: f64 = response.metadata.get("daemon_us").context("daemon_us in the metadata")?.parse()?;
    Ok(daemon_us / 1e3)
}

/// The rows of one tier: warm, cold, grep, python, and its `docker run --rm` baseline.
fn measure(tier: &str, runtime: &str, warm_calls: usize, cold_calls: usize) -> Result<Vec<Row>> {
    let rt = baaaht_tests::runtime();
    let mut warm = rt.block_on(agent(tier, "warm"))?;
    let mut cold = rt.block_on(agent(tier, "cold"))?;
    let mut rows = vec![
        Row::new(format!("{tier}: warm read_file 1 KiB (daemon in → out)"), "ms"),
        Row::new(format!("{tier}: cold read_file 1 KiB (a container per call)"), "ms"),
        Row::new(format!("{tier}: warm grep over 1,000 files"), "ms"),
        Row::new(format!("{tier}: warm exec python3 -c pass"), "ms"),
        Row::new(format!("{tier}: baseline docker run --rm --runtime={runtime} IMAGE cat FILE"), "ms"),
    ];
    let kib = "x".repeat(1023) + "\n";
    rt.block_on(async {
        for agent in [&mut warm, &mut cold] {
            call(&mut agent.client, "write_file", serde_json::json!({"path": "kib.txt", "content": kib})).await?;
        }
        let files =
            "mkdir -p tree && for i in $(seq 1000); do echo \"line $i of a file with a needle\" > tree/f$i.txt; done";
        call(&mut warm.client, "exec", serde_json::json!({"command": files})).await?;
        for _ in 0..warm_calls {
            rows[0].values.push(read_once(&mut warm.client).await?.0);
        }
        for _ in 0..cold_calls {
            rows[1].values.push(read_once(&mut cold.client).await?.0);
        }
        for _ in 0..warm_calls / 4 {
            let params = serde_json::json!({"pattern": "needle", "path": "tree"});
            rows[2].values.push(call(&mut warm.client, "grep", params).await?);
        }
        for _ in 0..warm_calls / 4 {
            let params = serde_json::json!({"command": "python3 -c pass"});
            rows[3].values.push(call(&mut warm.client, "exec", params).await?);
        }
        anyhow::Ok(())
    })?;
    let workspace = warm.daemon.data_dir.join("sessions/self-test/data");
    for _ in 0..cold_calls {
        rows[4].values.push(docker_run_cat(&workspace, runtime)?);
    }
    Ok(rows)
}

pub(crate) fn run(warm_calls: usize, cold_calls: usize) -> Result<()> {
    let mut tiers = vec![];
    for (tier, runtime) in TIERS {
        tiers.push(measure(tier, runtime, warm_calls, cold_calls)?);
    }
    println!(
        "baaaht-bench isolation: tool calls under runc and gVisor (runsc, ptrace platform), {warm_calls} warm \
         read_file calls, {} grep and python3 calls, {cold_calls} cold calls and docker runs per tier, \
         in the same run\n",
        warm_calls / 4
    );
    header();
    let mut p50 = vec![];
    for rows in &mut tiers {
        p50.push(rows.iter_mut().map(Row::print).collect::<Vec<f64>>());
    }
    let (runc, gvisor) = (&p50[0], &p50[1]);
    println!("\n{:<40} {:>10} {:>10} {:>8}", "p50, ms", "runc", "gvisor", "ratio");
    let names = ["warm read_file", "cold read_file", "grep 1,000 files", "python3 -c pass", "docker run --rm"];
    for (index, name) in names.iter().enumerate() {
        println!("{name:<40} {:>10.2} {:>10.2} {:>7.2}×", runc[index], gvisor[index], gvisor[index] / runc[index]);
    }
    println!(
        "\ngVisor: warm call {:.2} ms p50 (target ≤ 2 ms); cold {:.2}× docker run --runtime=runsc (target ≤ 1.0)",
        gvisor[0],
        gvisor[1] / gvisor[4]
    );
    println!(
        "RESULT gvisor_warm_p50_ms={:.3} runc_warm_p50_ms={:.3} gvisor_cold_p50_ms={:.1} runc_cold_p50_ms={:.1} \
         gvisor_cold_vs_docker_run_runsc={:.2} runc_cold_vs_docker_run={:.2} gvisor_grep_p50_ms={:.1} \
         runc_grep_p50_ms={:.1} gvisor_python_p50_ms={:.1} runc_python_p50_ms={:.1}",
        gvisor[0],
        runc[0],
        gvisor[1],
        runc[1],
        gvisor[1] / gvisor[4],
        runc[1] / runc[4],
        gvisor[2],
        runc[2],
        gvisor[3],
        runc[3]
    );
    Ok(())
}
