//! `baaaht-bench pool`: what the warm pools save a new conversation. The first tool turn of a
//! new session (the Assistant delegates to the Worker, whose `write_file` runs in the session's
//! tool container; the fake model answers at once) and a new session's first tool call
//! (`write_file` through RequestToolExecution), with the pools on (the daemon's defaults,
//! sized so that each new session finds its containers ready) and off, beside the same turn and
//! call in a session whose containers run (warm) and `docker run --rm`, all in the same run;
//! then the memory the pooled containers hold while they wait.

use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use baaaht_proto::client::{self, Client};
use baaaht_proto::v1;
use baaaht_tests::fake_provider::{anthropic_answer, Answer, Asked, FakeProvider, Responder};
use baaaht_tests::scenario;
use baaaht_tests::{DaemonOptions, TestDaemon};
use serde_json::json;

use crate::delegation::new_session;
use crate::tools::{docker_run_cat, request};
use crate::{header, Following, Row};

/// Pools of two for the roles a tool turn uses (Assistant, Worker, the session's tool
/// container); as many as a new session needs while the last one's are replaced.
const POOLS_ON: &str = r#"{"assistant":{"floor":2,"ceiling":2},"worker":{"floor":2,"ceiling":2},"tool":{"floor":2,"ceiling":2},"coder":{"floor":0,"ceiling":0},"researcher":{"floor":0,"ceiling":0},"memory":{"floor":0,"ceiling":0},"heartbeat":{"floor":0,"ceiling":0}}"#;

/// The Assistant delegates to the Worker, which writes `note.txt` and says so.
fn brain() -> Answer {
    Answer::Respond(Responder(std::sync::Arc::new(|request| {
        let asked = Asked::of(request);
        let done = asked.turn_results.len();
        if asked.offers("delegate") {
            return match done {
                0 => {
                    let task = json!({"agent": "worker", "task": "Write the note.", "returnDirectly": false});
                    anthropic_answer("", &[("toolu_d0", "delegate", task)])
                }
                _ => anthropic_answer("Written.", &[]),
            };
        }
        match done {
            0 => anthropic_answer("", &[("toolu_w0", "write_file", json!({"path": "note.txt", "content": "noted"}))]),
            _ => anthropic_answer("The note is written.", &[]),
        }
    })))
}

/// Message sent → reply of one turn in `session`, in ms.
async fn turn(client: &mut Client, session: &str) -> Result<f64> {
    let mut turn = Following::send(client, session, "Write the note.").await?;
    loop {
        use v1::orchestrator_event::Event;
        match turn.next().await? {
            Event::Reply(_) => return Ok(turn.sent_at.elapsed().as_secs_f64() * 1e3),
            Event::Error(error) => bail!("the turn failed: {}", error.message),
            _ => {}
        }
    }
}

/// Waits up to two minutes until `daemon`'s pools hold what [`POOLS_ON`] asks for.
fn pools_full(daemon: &TestDaemon) -> Result<()> {
    daemon.wait_for_pools(&[("assistant", 2), ("worker", 2), ("tool", 2)], Duration::from_secs(120))
}

/// One `write_file` through RequestToolExecution as `client`: the daemon's time, in ms.
async fn write_once(client: &mut Client) -> Result<f64> {
    let params = json!({"path": "kib.txt", "content": "x".repeat(1023) + "\n"});
    let response = client.agents.request_tool_execution(request("write_file", params)).await?.into_inner();
    if response.is_error {
        bail!("write_file failed: {}", response.content);
    }
    let daemon_us: f64 = response.metadata.get("daemon_us").context("daemon_us in the metadata")?.parse()?;
    Ok(daemon_us / 1e3)
}

/// `runs` new sessions on `daemon`: (first tool turns, first tool calls), in ms; with `pooled`,
/// each waits for the pools to be full before it starts.
fn new_sessions(
    rt: &tokio::runtime::Runtime,
    daemon: &TestDaemon,
    runs: usize,
    pooled: bool,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let (mut turns, mut calls) = (vec![], vec![]);
    for run in 0..runs {
        if pooled {
            pools_full(daemon)?;
        }
        turns.push(rt.block_on(async {
            let mut client = scenario::host_client(daemon).await?;
            let session = new_session(&mut client).await?;
            let took = turn(&mut client, &session).await?;
            // Its containers go, so that runs do not pile up.
            client.sessions.archive_session(v1::SessionRef { session_id: session }).await?;
            anyhow::Ok(took)
        })?);
        if pooled {
            pools_full(daemon)?;
        }
        // A Worker of a session of its own, started ahead (not measured): its first call.
        let session = format!("bench-first-call-{run}");
        let worker = daemon.lingering_agent("worker", Some(&session), &[])?;
        calls.push(rt.block_on(async {
            let mut client = client::connect(&worker.socket, worker.options()).await?;
            write_once(&mut client).await
        })?);
    }
    Ok((turns, calls))
}

pub(crate) fn run(runs: usize, warm_runs: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeProvider::start(vec![], Some(brain())))?;
    let options = |pools: &str| DaemonOptions {
        env: vec![
            ("BAAAHT__CONTAINER__POOLS".into(), pools.into()),
            ("BAAAHT__SESSIONS__ARCHIVAL__MEMORY_EXTRACTION".into(), "false".into()),
            // Room for the pools beside the first calls' tool containers, which wait out their
            // idle time (the pools leave two slots free).
            ("BAAAHT__CONTAINER__MAX_CONCURRENT".into(), "32".into()),
        ],
        ..DaemonOptions::default()
    };
    let mut rows = [
        Row {
            name: "pools on: first tool turn of a new session (message → reply)".into(), unit: "ms", values: vec![]
        },
        Row { name: "pools off: the same turn, every container started for it".into(), unit: "ms", values: vec![] },
        Row { name: "warm: the same turn in a session whose containers run".into(), unit: "ms", values: vec![] },
        Row {
            name: "pools on: a new session's first tool call (daemon in → out)".into(), unit: "ms", values: vec![]
        },
        Row { name: "pools off: the same call, its tool container started for it".into(), unit: "ms", values: vec![] },
        Row { name: "warm: a later call in a running tool container".into(), unit: "ms", values: vec![] },
        Row { name: "baseline: docker run --rm IMAGE cat FILE".into(), unit: "ms", values: vec![] },
    ];

    let on = scenario::daemon_with(&fake, options(POOLS_ON))?;
    let (turns, calls) = new_sessions(&rt, &on, runs, true)?;
    (rows[0].values, rows[3].values) = (turns, calls);
    pools_full(&on)?;
    let idle_pool_mib = on.pooled_memory_mib()?;
    let pooled_count = on.pooled_containers("baaaht-").len();
    rt.block_on(async {
        let mut client = scenario::host_client(&on).await?;
        let session = new_session(&mut client).await?;
        turn(&mut client, &session).await?;
        for _ in 0..warm_runs {
            rows[2].values.push(turn(&mut client, &session).await?);
        }
        anyhow::Ok(())
    })?;
    let worker = on.lingering_agent("worker", Some("bench-warm"), &[])?;
    rt.block_on(async {
        let mut client = client::connect(&worker.socket, worker.options()).await?;
        write_once(&mut client).await?;
        for _ in 0..warm_runs {
            rows[5].values.push(write_once(&mut client).await?);
        }
        anyhow::Ok(())
    })?;
    let workspace = on.data_dir.join("sessions/bench-warm/data");
    for _ in 0..runs {
        rows[6].values.push(docker_run_cat(&workspace, "runc")?);
    }
    drop(worker);
    let handover = Handover::read(&on.log)?;
    drop(on);

    let off = scenario::daemon_with(&fake, options(baaaht_tests::NO_POOLS))?;
    let (turns, calls) = new_sessions(&rt, &off, runs, false)?;
    (rows[1].values, rows[4].values) = (turns, calls);
    drop(off);

    println!(
        "baaaht-bench pool: {runs} new sessions with the pools on and {runs} with them off (the Assistant delegates \
         to the Worker, whose write_file runs in the session's tool container; the fake model answers at once), \
         {warm_runs} warm turns and calls, beside docker run --rm in the same run\n"
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().map(Row::print).collect();
    println!("{:<72} {:>10.1}  MiB", format!("{pooled_count} pooled containers waiting, memory in use"), idle_pool_mib);
    handover.print();
    let (turn_on, turn_off, turn_warm, call_on, call_off, call_warm, run) =
        (p50[0], p50[1], p50[2], p50[3], p50[4], p50[5], p50[6]);
    println!(
        "\nfirst tool turn {turn_on:.1} ms with the pools, {:.2}× without them (target ≤ 30 ms); first tool call \
         {call_on:.1} ms, {:.2}× without them (target ≤ 10 ms); pooled containers hold {idle_pool_mib:.1} MiB",
        turn_on / turn_off,
        call_on / call_off
    );
    println!(
        "RESULT first_turn_p50_ms={turn_on:.1} first_turn_pools_off_p50_ms={turn_off:.1} warm_turn_p50_ms={turn_warm:.1} \
         first_call_p50_ms={call_on:.2} first_call_pools_off_p50_ms={call_off:.1} warm_call_p50_ms={call_warm:.2} \
         docker_run_p50_ms={run:.1} turn_ratio={:.2} call_ratio={:.2} pool_idle_mib={idle_pool_mib:.1}",
        turn_on / turn_off,
        call_on / call_off
    );
    Ok(())
}

/// Where a first call's time goes, from the daemon's log: the claim of a pooled tool container
/// (the socket bound to the session), its folders moved into the session's places, its runner
/// ready; and the runner's own time for the call (whole ms), first calls beside warm ones.
struct Handover {
    checked: Row,
    claimed: Row,
    adopted: Row,
    ready: Row,
    first_daemon: Row,
    warm_daemon: Row,
    first_runner: Row,
    warm_runner: Row,
}

impl Handover {
    fn read(log: &std::path::Path) -> Result<Handover> {
        let row = |name: &str, unit| Row { name: name.into(), unit, values: vec![] };
        let mut handover = Handover {
            checked: row("  of which: may the session take one (its skills, its layer)", "ms"),
            claimed: row("  of which: the claim (socket bound to the session)", "ms"),
            adopted: row("  of which: the folders moved into the session's places", "ms"),
            ready: row("  of which: claim → runner ready", "ms"),
            first_daemon: row("the daemon's time, a first call (request in → result out)", "ms"),
            warm_daemon: row("the daemon's time, a warm call", "ms"),
            first_runner: row("  the runner's own time, a first call (whole ms)", "ms"),
            warm_runner: row("  the runner's own time, a warm call (whole ms)", "ms"),
        };
        let text = std::fs::read_to_string(log).with_context(|| format!("read {}", log.display()))?;
        for line in text.lines() {
            let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else { continue };
            let number = |key: &str| entry.get(key).and_then(serde_json::Value::as_f64);
            let session = entry.get("session").and_then(serde_json::Value::as_str).unwrap_or("");
            match entry.get("message").and_then(serde_json::Value::as_str) {
                Some("tool runner ready (from the pool)") if session.starts_with("bench-first-call-") => {
                    for (row, key) in [
                        (&mut handover.checked, "checked_us"),
                        (&mut handover.claimed, "claimed_us"),
                        (&mut handover.adopted, "adopted_us"),
                        (&mut handover.ready, "connected_us"),
                    ] {
                        row.values.extend(number(key).map(|us| us / 1e3));
                    }
                }
                Some("tool call") if session.starts_with("bench-first-call-") => {
                    handover.first_daemon.values.extend(number("daemon_us").map(|us| us / 1e3));
                    handover.first_runner.values.extend(number("duration_ms"));
                }
                Some("tool call") if session == "bench-warm" => {
                    handover.warm_daemon.values.extend(number("daemon_us").map(|us| us / 1e3));
                    handover.warm_runner.values.extend(number("duration_ms"));
                }
                _ => {}
            }
        }
        Ok(handover)
    }

    fn print(mut self) {
        if self.claimed.values.is_empty() {
            println!("(the daemon's log names no pooled hand-over of a first call)");
            return;
        }
        println!("a first call from the pool, from the daemon's log:");
        let rows = [
            &mut self.first_daemon,
            &mut self.checked,
            &mut self.claimed,
            &mut self.adopted,
            &mut self.ready,
            &mut self.first_runner,
            &mut self.warm_daemon,
            &mut self.warm_runner,
        ];
        for row in rows {
            if !row.values.is_empty() {
                row.print();
            }
        }
    }
}
