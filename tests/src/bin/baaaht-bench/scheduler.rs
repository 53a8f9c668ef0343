//! `baaaht-bench scheduler` (issue 13): the scheduler's tick over 10,000 active tasks and its
//! resident memory (in process, simulated minutes, every due slot claimed in its ledger with
//! the fsync that makes a run happen at most once); the time from a HEARTBEAT.md edit to the
//! regenerated tasks being served (the real daemon, its inotify watcher); and the time from a
//! run's claim to its agent asking the model (the real daemon, a cold Worker container, the
//! fake provider), beside `docker run --rm` in the same run.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context as _, Result};
use baaaht_daemon::drive::scheduler::schedule::{self, Cadence, ScheduleSpec};
use baaaht_daemon::drive::scheduler::{
    CatchUp, Clock, Concurrency, ContextMode, CreatedBy, Notification, Scheduler, Settings, TaskKind, TaskRecord,
    TaskStatus,
};
use baaaht_proto::client::{self, ConnectOptions};
use baaaht_proto::v1;
use baaaht_tests::fake_provider::{anthropic_answer, Answer, Asked, FakeProvider, Responder};
use baaaht_tests::{DaemonOptions, TestDaemon};
use jiff::{SignedDuration, Timestamp};

use crate::{header, Row};

/// `count` tasks over `count / 5` users: 60 % daily and 30 % hourly heartbeats (jitter drawn
/// as the daemon draws it), 10 % weekday cron tasks; all of them due from `start` on.
fn tasks(count: usize, start: Timestamp) -> Result<Vec<TaskRecord>> {
    let zone = schedule::zone("Europe/Berlin")?;
    let mut tasks = Vec::with_capacity(count);
    for index in 0..count {
        let (kind, spec) = match index % 10 {
            0 => {
                let cron = format!("{} {} * * 1-5", schedule::random_below(60), 6 + schedule::random_below(16));
                (TaskKind::Scheduled, ScheduleSpec { cron: Some(cron), ..ScheduleSpec::default() })
            }
            1..=3 => {
                (TaskKind::Heartbeat, schedule::cadence_schedule(Cadence::Hourly, None, &mut schedule::random_below))
            }
            _ => (TaskKind::Heartbeat, schedule::cadence_schedule(Cadence::Daily, None, &mut schedule::random_below)),
        };
        let next_run = schedule::Schedule::new(&spec, zone.clone())?.next_after(start);
        tasks.push(TaskRecord {
            id: format!("t-{index:05}"),
            kind,
            user_id: format!("u-{:04}", index / 5),
            group_id: String::new(),
            schedule: spec,
            timezone: String::new(),
            agent: if kind == TaskKind::Heartbeat { "heartbeat" } else { "worker" }.into(),
            prompt: "Check on things and tell me what matters.".into(),
            context_mode: ContextMode::Session,
            notification: Notification { channel: String::new(), on_success: true, on_failure: false },
            status: TaskStatus::Active,
            last_run: None,
            next_run,
            failure_count: 0,
            created_at: start,
            created_by: CreatedBy::System,
            description: format!("task {index}"),
            catch_up: CatchUp::Once,
            // The bench claims and never finishes runs: overlap allowed, so every slot claims.
            concurrency: Concurrency::Allow,
            retry_interrupted: false,
            timeout: 0,
            section: Some(format!("section {index}")),
            system_job: None,
        });
    }
    Ok(tasks)
}

struct Ticks {
    claiming: Row,
    idle: Row,
    save: Row,
    fsync: Row,
    claimed: usize,
    rss_mib: f64,
    load_ms: f64,
}

fn ticks(count: usize, minutes: usize) -> Result<Ticks> {
    let temp = tempfile::tempdir()?;
    let state = temp.path().join("state");
    std::fs::create_dir_all(&state)?;
    let start: Timestamp = "2026-06-01T04:00:00Z".parse()?;
    let file = serde_json::json!({"version": 1, "tasks": tasks(count, start)?, "heartbeatHashes": {}});
    std::fs::write(state.join("scheduler.json"), serde_json::to_vec(&file)?)?;
    drop(file);
    let rss_before = baaaht_tests::rss_kib(std::process::id())?;
    let settings = Settings {
        timezone: "Europe/Berlin".into(),
        max_failures: 5,
        poll: Duration::from_secs(60),
        grace: Duration::from_secs(90),
    };
    let loading = Instant::now();
    let scheduler = Scheduler::open(&state, settings, Clock::System)?;
    let load_ms = loading.elapsed().as_secs_f64() * 1e3;
    if scheduler.count() != count {
        bail!("{} tasks loaded of {count}", scheduler.count());
    }
    let rss_mib = (baaaht_tests::rss_kib(std::process::id())?.saturating_sub(rss_before)) as f64 / 1024.0;
    let mut claiming =
        Row { name: format!("tick, {count} active tasks, due slots claimed (fsync)"), unit: "ms", values: vec![] };
    let mut idle = Row { name: format!("tick, {count} active tasks, nothing due"), unit: "ms", values: vec![] };
    let mut save =
        Row { name: format!("save scheduler.json after a tick ({count} tasks, atomic)"), unit: "ms", values: vec![] };
    let mut claimed = 0;
    for minute in 0..minutes {
        let now = start.checked_add(SignedDuration::from_mins(minute as i64 + 1))?;
        let started = Instant::now();
        let claims = scheduler.tick(now);
        let elapsed = started.elapsed().as_secs_f64() * 1e3;
        if claims.is_empty() {
            idle.values.push(elapsed);
        } else {
            claimed += claims.len();
            claiming.values.push(elapsed);
            if save.values.len() < 20 {
                let started = Instant::now();
                scheduler.save_after_tick();
                save.values.push(started.elapsed().as_secs_f64() * 1e3);
            }
        }
        // The same second again: nothing is due twice.
        let started = Instant::now();
        if !scheduler.tick(now).is_empty() {
            bail!("a slot was claimed twice at {now}");
        }
        idle.values.push(started.elapsed().as_secs_f64() * 1e3);
    }
    // The floor of a claim: one line appended to a file and fsynced.
    let mut fsync = Row { name: "baseline: append one line to a file + fsync".into(), unit: "ms", values: vec![] };
    let path = temp.path().join("floor.jsonl");
    for _ in 0..200 {
        use std::io::Write as _;
        let started = Instant::now();
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
        file.write_all(b"{\"event\":\"claimed\"}\n")?;
        file.sync_data()?;
        fsync.values.push(started.elapsed().as_secs_f64() * 1e3);
    }
    Ok(Ticks { claiming, idle, save, fsync, claimed, rss_mib, load_ms })
}

/// HEARTBEAT.md edits → the new section served by ListTasks, `edits` times.
fn heartbeat_edits(edits: usize) -> Result<(Row, Row)> {
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(DaemonOptions::default())?;
    let folder = daemon.data_dir.join("users/alice");
    std::fs::create_dir_all(&folder)?;
    let mut regenerated =
        Row { name: "HEARTBEAT.md written → its new task served (ListTasks)".into(), unit: "ms", values: vec![] };
    let mut floor = Row { name: "baseline: one ListTasks round trip".into(), unit: "ms", values: vec![] };
    rt.block_on(async {
        let mut client = client::connect(&daemon.socket(), ConnectOptions::default()).await?;
        let filter = v1::TaskFilter { user_id: "alice".into(), r#type: "heartbeat".into(), ..Default::default() };
        for edit in 0..edits {
            let title = format!("Check {edit}");
            let written = Instant::now();
            std::fs::write(folder.join("HEARTBEAT.md"), format!("## {title}\n- Cadence: daily\n- Prompt: look\n"))?;
            loop {
                let asked = Instant::now();
                let tasks = client.tasks.list_tasks(filter.clone()).await?.into_inner().tasks;
                floor.values.push(asked.elapsed().as_secs_f64() * 1e3);
                if tasks.iter().any(|task| task.section == title) {
                    break;
                }
                if written.elapsed() > Duration::from_secs(10) {
                    bail!("edit {edit} was not picked up within 10 s:\n{}", daemon.log_text());
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            regenerated.values.push(written.elapsed().as_secs_f64() * 1e3);
        }
        anyhow::Ok(())
    })?;
    Ok((regenerated, floor))
}

/// One-shot tasks, `runs` of them in turn: claim (the ledger's time) → the Worker's first model
/// request; beside `docker run --rm IMAGE true`.
fn claim_to_agent(runs: usize) -> Result<(Row, Row)> {
    let rt = baaaht_tests::runtime();
    let asked: Arc<Mutex<Vec<(String, SystemTime)>>> = Arc::default();
    let seen = asked.clone();
    let brain = Answer::Respond(Responder(Arc::new(move |request| {
        let question = Asked::of(request);
        if question.first.starts_with("Scheduled task") {
            let prompt = question.first.lines().last().unwrap_or_default().to_string();
            seen.lock().expect("asked").push((prompt, SystemTime::now()));
        }
        anthropic_answer("done", &[])
    })));
    let fake = rt.block_on(FakeProvider::start(vec![], Some(brain)))?;
    let daemon = baaaht_tests::scenario::daemon_with(&fake, DaemonOptions::default())?;
    let mut latency =
        Row { name: "claim → the Worker's first model request (cold container)".into(), unit: "ms", values: vec![] };
    let mut docker = Row { name: "baseline: docker run --rm baaaht/base true".into(), unit: "ms", values: vec![] };
    rt.block_on(async {
        let mut client = client::connect(&daemon.socket(), ConnectOptions::default()).await?;
        for run in 0..runs {
            let prompt = format!("Bench run {run}.");
            let at = Timestamp::now().checked_add(SignedDuration::from_millis(1500))?;
            let task = v1::TaskDefinition {
                user_id: "alice".into(),
                schedule: Some(v1::TaskSchedule { kind: Some(v1::task_schedule::Kind::Once(at.to_string())) }),
                prompt: prompt.clone(),
                ..Default::default()
            };
            let id = client.tasks.schedule_task(task).await?.into_inner().task.context("task")?.id;
            let deadline = Instant::now() + Duration::from_secs(120);
            let asked_at = loop {
                if let Some((_, at)) = asked.lock().expect("asked").iter().find(|(p, _)| *p == prompt) {
                    break *at;
                }
                if Instant::now() > deadline {
                    bail!("run {run} never reached the model:\n{}", daemon.log_text());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            let ledger = std::fs::read_to_string(daemon.data_dir.join(format!("data/state/runs/{id}.jsonl")))?;
            let claimed: Timestamp = ledger
                .lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .find(|record| record["event"] == "claimed")
                .and_then(|record| record["at"].as_str()?.parse().ok())
                .context("the claim in the ledger")?;
            let asked_at = Timestamp::try_from(asked_at)?;
            latency.values.push(asked_at.duration_since(claimed).as_secs_f64() * 1e3);

            let started = Instant::now();
            let status = Command::new("docker")
                .args(["run", "--rm", "baaaht/base:latest", "true"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?;
            if !status.success() {
                bail!("docker run failed: {status}");
            }
            docker.values.push(started.elapsed().as_secs_f64() * 1e3);
        }
        anyhow::Ok(())
    })?;
    Ok((latency, docker))
}

pub(crate) fn run(count: usize, minutes: usize, edits: usize, runs: usize) -> Result<()> {
    let mut ticks = ticks(count, minutes)?;
    let (mut regenerated, mut floor) = heartbeat_edits(edits)?;
    let (mut latency, mut docker) = claim_to_agent(runs)?;
    println!(
        "baaaht-bench scheduler: {count} active tasks over {} simulated minutes ({} runs claimed, each in its \
         ledger before it starts), loaded in {:.0} ms; {edits} HEARTBEAT.md edits on the real daemon; {runs} \
         scheduled runs on the real daemon with a cold Worker container\n",
        minutes, ticks.claimed, ticks.load_ms
    );
    header();
    let tick_p50 = ticks.claiming.print();
    let tick_p99 = percentile(&mut ticks.claiming.values);
    let idle_p50 = ticks.idle.print();
    let save_p50 = ticks.save.print();
    let fsync_p50 = ticks.fsync.print();
    let edit_p50 = regenerated.print();
    let floor_p50 = floor.print();
    let claim_p50 = latency.print();
    let docker_p50 = docker.print();
    println!(
        "\ntick: {tick_p50:.2} ms p50, {tick_p99:.2} ms p99 with {:.0} claims per claiming tick ({:.1}× one fsync; \
         target ≤ 5 ms); resident memory for {count} tasks: {:.1} MiB; a HEARTBEAT.md edit is served in \
         {edit_p50:.0} ms; claim → agent: {:.2}× docker run --rm",
        ticks.claimed as f64 / ticks.claiming.values.len().max(1) as f64,
        tick_p50 / fsync_p50,
        ticks.rss_mib,
        claim_p50 / docker_p50
    );
    println!(
        "RESULT tasks={count} tick_p50_ms={tick_p50:.3} tick_p99_ms={tick_p99:.3} idle_tick_p50_ms={idle_p50:.3} \
         save_p50_ms={save_p50:.1} fsync_p50_ms={fsync_p50:.3} rss_mib={:.1} heartbeat_edit_p50_ms={edit_p50:.1} \
         list_tasks_p50_ms={floor_p50:.2} claim_to_agent_p50_ms={claim_p50:.0} docker_run_p50_ms={docker_p50:.0} \
         claim_vs_docker_run={:.2}",
        ticks.rss_mib,
        claim_p50 / docker_p50
    );
    Ok(())
}

fn percentile(values: &mut [f64]) -> f64 {
    baaaht_tests::percentile(values, 99.0)
}
