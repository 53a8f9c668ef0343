//! `baaaht-bench ops`: what metrics and the audit log cost. A tool call (`exec true`, which
//! is audited) through RequestToolExecution on two daemons run side by side, one with metrics
//! and audit on and one with both off, their calls interleaved; the same records made
//! in-process, on and off, to show the cost the end-to-end noise hides; and the time of a
//! scrape of the daemon's metrics with 50 active sessions beside the same daemon's idle scrape.

use std::io::{Read as _, Write as _};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use baaaht_daemon::base::metrics::Metrics;
use baaaht_daemon::guard::audit::{Audit, Kind, Record};
use baaaht_proto::client::Client;
use baaaht_proto::v1;
use baaaht_tests::fake_provider::FakeProvider;
use baaaht_tests::scenario;
use baaaht_tests::{DaemonOptions, TestDaemon};

use crate::{active_sessions, coder, header, Coder, Row};

const ON: &str = "metrics:\n  listen: 127.0.0.1:0\naudit:\n  enabled: true\n";
const OFF: &str = "metrics:\n  enabled: false\naudit:\n  enabled: false\n";

async fn with_config(config: &str) -> Result<Coder> {
    coder(DaemonOptions { files: vec![("config/config.yaml".into(), config.to_string())], ..Default::default() }).await
}

/// One `exec true` as the Coder: the round trip in µs.
async fn exec_once(client: &mut Client) -> Result<f64> {
    let request = v1::ToolRequest {
        tool: "exec".into(),
        params_json: serde_json::json!({"command": "true"}).to_string(),
        ..v1::ToolRequest::default()
    };
    let started = Instant::now();
    let response = client.agents.request_tool_execution(request).await?.into_inner();
    let elapsed = started.elapsed().as_secs_f64() * 1e6;
    if response.is_error {
        bail!("exec failed: {}", response.content);
    }
    Ok(elapsed)
}

/// ns per tool call of what the daemon records for one: the RPC and the tool's metrics, and
/// an exec audit record (sent to the audit writer thread, which writes and fsyncs it).
fn records_ns(metrics: &Metrics, audit: &Audit, calls: usize) -> f64 {
    let started = Instant::now();
    for _ in 0..calls {
        metrics.record_rpc("/baaaht.v1.AgentService/RequestToolExecution", "0", Duration::from_micros(700));
        metrics.record_tool("exec", true, Duration::from_micros(650));
        let record = Record::new(Kind::Exec, "container:coder:baaaht-coder-0123456789ab (user:bench)", "ok")
            .correlation("0c3daa07-76ba-49d4-a798-8bf66202a9ba")
            .detail("command", "true")
            .detail("exit_code", 0)
            .detail("duration_ms", 1);
        audit.record(record);
    }
    started.elapsed().as_secs_f64() * 1e9 / calls as f64
}

/// One scrape of `address` over a new connection, in ms, and the body's size in bytes.
fn scrape(address: &str) -> Result<(f64, usize)> {
    let started = Instant::now();
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
    let mut text = Vec::with_capacity(64 * 1024);
    stream.read_to_end(&mut text)?;
    let elapsed = started.elapsed().as_secs_f64() * 1e3;
    if !text.starts_with(b"HTTP/1.1 200") {
        bail!("the scrape failed: {}", String::from_utf8_lossy(&text[..text.len().min(200)]));
    }
    Ok((elapsed, text.len()))
}

fn metrics_address(daemon: &TestDaemon) -> Result<String> {
    let output = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(["status", "--json"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()?;
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).context("status --json is JSON")?;
    Ok(status["metrics_address"].as_str().context("metrics are served")?.to_string())
}

pub(crate) fn run(calls: usize, sessions: usize, scrapes: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let mut on = rt.block_on(with_config(ON))?;
    let mut off = rt.block_on(with_config(OFF))?;
    let mut rows = [
        Row { name: "exec true as the Coder, round trip: metrics + audit on".into(), unit: "µs", values: vec![] },
        Row { name: "exec true as the Coder, round trip: metrics + audit off".into(), unit: "µs", values: vec![] },
        Row { name: "records of one tool call in-process: metrics + audit on".into(), unit: "ns", values: vec![] },
        Row { name: "records of one tool call in-process: off (baseline)".into(), unit: "ns", values: vec![] },
        Row { name: format!("scrape /metrics, {sessions} active sessions"), unit: "ms", values: vec![] },
        Row { name: "scrape /metrics, idle (baseline, same daemon)".into(), unit: "ms", values: vec![] },
    ];
    rt.block_on(async {
        // The first calls start each session's tool container; not timed.
        exec_once(&mut on.client).await?;
        exec_once(&mut off.client).await?;
        // Interleaved, so both see the same machine.
        for _ in 0..calls {
            rows[0].values.push(exec_once(&mut on.client).await?);
            rows[1].values.push(exec_once(&mut off.client).await?);
        }
        anyhow::Ok(())
    })?;
    let audited = std::fs::read_dir(on.daemon.data_dir.join("data/logs/audit"))?
        .flatten()
        .map(|entry| std::fs::read_to_string(entry.path()).unwrap_or_default().lines().count())
        .sum::<usize>();
    if audited < calls {
        bail!("the audit log of the daemon with audit on has {audited} records for {calls} calls");
    }
    if off.daemon.data_dir.join("data/logs/audit").read_dir().is_ok_and(|mut dir| dir.next().is_some()) {
        bail!("the daemon with audit off wrote an audit log");
    }
    drop((on, off));

    let temp = tempfile::tempdir()?;
    let recording = Arc::new(Metrics::default());
    let audit_on = Audit::open(temp.path().join("on"), true, 0, recording.clone());
    let silent = Arc::new(Metrics::off());
    let audit_off = Audit::open(temp.path().join("off"), false, 0, silent.clone());
    for _ in 0..21 {
        rows[2].values.push(records_ns(&recording, &audit_on, 2_000));
        rows[3].values.push(records_ns(&silent, &audit_off, 2_000));
    }
    audit_on.flush();

    let echo = rt.block_on(FakeProvider::start(vec![], Some(scenario::echo_brain())))?;
    let options = DaemonOptions {
        files: vec![("config/config.yaml".into(), "metrics:\n  listen: 127.0.0.1:0\n  sample_interval: 1\n".into())],
        ..Default::default()
    };
    let daemon = scenario::daemon_with(&echo, options)?;
    let address = metrics_address(&daemon)?;
    scrape(&address)?;
    let mut idle_bytes = 0;
    for _ in 0..scrapes {
        let (ms, bytes) = scrape(&address)?;
        rows[5].values.push(ms);
        idle_bytes = bytes;
    }
    rt.block_on(active_sessions(&daemon, sessions))?;
    // The sampler has seen every session and its running Assistant.
    let deadline = Instant::now() + Duration::from_secs(30);
    let wanted = format!("baaaht_sessions{{status=\"active\"}} {sessions}");
    while !daemon.metrics()?.contains(&wanted) {
        if Instant::now() > deadline {
            bail!("the sampler never counted {sessions} active sessions");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut busy_bytes = 0;
    for _ in 0..scrapes {
        let (ms, bytes) = scrape(&address)?;
        rows[4].values.push(ms);
        busy_bytes = bytes;
    }

    println!(
        "baaaht-bench ops: {calls} interleaved `exec true` calls on two daemons (metrics and audit on / off), \
         the same records in-process, and {scrapes} scrapes idle and with {sessions} active sessions\n"
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().map(Row::print).collect();
    let added_us = p50[0] - p50[1];
    let added_ns = p50[2] - p50[3];
    println!(
        "\nadded per tool call: {added_us:.0} µs end to end ({:.3}× off; the noise of two daemons), {added_ns:.0} ns \
         in-process; scrape {idle_bytes} B idle, {busy_bytes} B with {sessions} sessions ({:.2}× idle)",
        p50[0] / p50[1],
        p50[4] / p50[5]
    );
    println!(
        "RESULT tool_call_on_p50_us={:.0} tool_call_off_p50_us={:.0} added_p50_us={added_us:.0} on_vs_off={:.3} \
         records_on_ns={:.0} records_off_ns={:.0} scrape_{sessions}_sessions_p50_ms={:.2} scrape_idle_p50_ms={:.2} \
         scrape_vs_idle={:.2}",
        p50[0],
        p50[1],
        p50[0] / p50[1],
        p50[2],
        p50[3],
        p50[4],
        p50[5],
        p50[4] / p50[5]
    );
    Ok(())
}
