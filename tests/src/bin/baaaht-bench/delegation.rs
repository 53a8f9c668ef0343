//! `baaaht-bench delegation`: a user turn in which the Assistant delegates to the Worker,
//! without model time (the fake provider answers at once): the delegation's round trip as the
//! client sees it (DelegationProgress started → finished) and the whole turn (message sent →
//! reply), warm (containers of the session already running) and cold (a new session: new
//! Assistant and Worker containers), beside raw `docker run --rm` measured in the same run;
//! then the daemon's resident memory with 50 active sessions and an agent process's.

use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use baaaht_proto::client::Client;
use baaaht_proto::v1;
use baaaht_tests::fake_provider::FakeProvider;
use baaaht_tests::scenario::{self, user};
use baaaht_tests::{DaemonOptions, TestDaemon};

use crate::{header, Row};

/// (delegation started → finished, message sent → reply), in ms, of one turn.
async fn turn(client: &mut Client, session: &str) -> Result<(f64, f64)> {
    let mut turn = crate::Following::send(client, session, "Ask the worker.").await?;
    let mut started = None;
    let mut delegation = None;
    loop {
        use v1::orchestrator_event::Event;
        match turn.next().await? {
            Event::Delegation(d) if d.state == "started" => started = Some(Instant::now()),
            Event::Delegation(d) if d.state == "finished" => {
                delegation = started.map(|at| at.elapsed().as_secs_f64() * 1e3)
            }
            Event::Delegation(d) => bail!("the delegation failed: {}", d.result),
            Event::Reply(_) => break,
            Event::Error(error) => bail!("the turn failed: {}", error.message),
            _ => {}
        }
    }
    let whole = turn.sent_at.elapsed().as_secs_f64() * 1e3;
    Ok((delegation.context("no delegation events")?, whole))
}

/// A new session of user `bench`.
pub(crate) async fn new_session(client: &mut Client) -> Result<String> {
    let request = v1::NewSessionRequest { context: Some(user("bench")), title: String::new() };
    Ok(client.sessions.new_session(request).await?.into_inner().id)
}

/// Resident memory (MiB) of every `baaaht-agent agent` process on this machine.
fn agent_rss() -> Vec<f64> {
    let mut found = vec![];
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_agent =
            args.first().is_some_and(|a| a.ends_with(b"/baaaht-agent")) && args.get(1) == Some(&&b"agent"[..]);
        if is_agent {
            if let Ok(kib) = baaaht_tests::rss_kib(pid) {
                found.push(kib as f64 / 1024.0);
            }
        }
    }
    found
}

pub(crate) fn run(runs: usize, sessions: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeProvider::start(vec![], Some(scenario::worker_brain())))?;
    // Sessions are archived after their cold turn only to release their containers: no Memory
    // agent run in between the measurements.
    let options = DaemonOptions {
        env: vec![("BAAAHT__SESSIONS__ARCHIVAL__MEMORY_EXTRACTION".into(), "false".into())],
        ..DaemonOptions::default()
    };
    let daemon = scenario::daemon_with(&fake, options)?;
    let mut rows = [
        Row {
            name: "warm: delegation Assistant → Worker → result (started → finished)".into(),
            unit: "ms",
            values: vec![],
        },
        Row { name: "warm: whole turn, message sent → reply (3 model calls)".into(), unit: "ms", values: vec![] },
        Row {
            name: "cold: delegation, new Worker container (started → finished)".into(), unit: "ms", values: vec![]
        },
        Row {
            name: "cold: whole turn in a new session (Assistant + Worker started)".into(),
            unit: "ms",
            values: vec![],
        },
        Row { name: "baseline: docker run --rm IMAGE true".into(), unit: "ms", values: vec![] },
    ];
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await?;
        let warm_session = new_session(&mut client).await?;
        // The first turn starts the session's containers; the rest find them warm.
        turn(&mut client, &warm_session).await?;
        for _ in 0..runs {
            let (delegation, whole) = turn(&mut client, &warm_session).await?;
            rows[0].values.push(delegation);
            rows[1].values.push(whole);
        }
        for _ in 0..runs {
            let session = new_session(&mut client).await?;
            let (delegation, whole) = turn(&mut client, &session).await?;
            rows[2].values.push(delegation);
            rows[3].values.push(whole);
            // Cold runs must not pile up: the archived session's agents go at once.
            client.sessions.archive_session(v1::SessionRef { session_id: session }).await?;
        }
        anyhow::Ok(())
    })?;
    for _ in 0..runs {
        let started = Instant::now();
        let status = Command::new("docker")
            .args(["run", "--rm", "--network", "none", "baaaht/base:latest", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("docker run failed: {status}");
        }
        rows[4].values.push(started.elapsed().as_secs_f64() * 1e3);
    }
    drop(daemon);

    // Memory: a fresh daemon with `sessions` active sessions, each with its Assistant running.
    let echo = rt.block_on(FakeProvider::start(vec![], Some(scenario::echo_brain())))?;
    let daemon: TestDaemon = scenario::daemon_with(&echo, DaemonOptions::default())?;
    let idle_rss = daemon.rss_kib()? as f64 / 1024.0;
    rt.block_on(crate::active_sessions(&daemon, sessions))?;
    let busy_rss = daemon.rss_kib()? as f64 / 1024.0;
    let mut agents =
        Row { name: "agent-runtime process (baaaht-agent agent) resident".into(), unit: "MiB", values: agent_rss() };
    if agents.values.is_empty() {
        bail!("no baaaht-agent agent process found");
    }

    println!(
        "baaaht-bench delegation: {runs} warm and {runs} cold turns (Assistant delegates to the Worker; the fake \
         provider answers at once), beside docker run --rm in the same run\n"
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().map(Row::print).collect();
    let agent_p50 = agents.print();
    println!("{:<72} {:>10.2}  MiB", "baaahtd resident, idle", idle_rss);
    println!("{:<72} {:>10.2}  MiB", format!("baaahtd resident, {sessions} active sessions"), busy_rss);
    let (warm, cold, docker_run) = (p50[0], p50[2], p50[4]);
    println!(
        "\nwarm delegation {warm:.1} ms (target ≤ 20); cold {:.2}× docker run (target ≤ 1.3); daemon with {sessions} \
         sessions {busy_rss:.1} MiB (target ≤ 50); agent {agent_p50:.1} MiB (target ≤ 15)",
        cold / docker_run
    );
    println!(
        "RESULT warm_delegation_p50_ms={warm:.2} warm_turn_p50_ms={:.2} cold_delegation_p50_ms={cold:.1} \
         cold_turn_p50_ms={:.1} docker_run_p50_ms={docker_run:.1} cold_vs_run={:.2} daemon_rss_idle_mib={idle_rss:.1} \
         daemon_rss_{sessions}_sessions_mib={busy_rss:.1} agent_rss_p50_mib={agent_p50:.1}",
        p50[1],
        p50[3],
        cold / docker_run
    );
    Ok(())
}
