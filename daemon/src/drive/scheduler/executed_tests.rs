//! The daemon's executor over the fake engine (`container/fake.rs`, the agents played as in
//! `orchestrator/played_tests.rs`): a task's run in a session of its own that ends with it,
//! a heartbeat with nothing to tell, a result left in the inbox when no channel is there, and
//! a run refused with its reason in the error log. No Docker, no model.

use std::sync::Arc;

use jiff::Timestamp;

use super::execute::Daemon;
use super::tests::{cron, task};
use super::{Claim, ContextMode, Delivery, Execute as _, Failure, TaskKind};
use crate::base::auth::Context;
use crate::drive::orchestrator::played_tests::{house, House};
use crate::store::sessions::SessionStatus;

fn executor(house: &House) -> Daemon {
    let shared = house.daemon.shared();
    Daemon {
        orchestrator: house.orchestrator.clone(),
        scheduler: shared.scheduler.clone(),
        memory: shared.memory.clone(),
        inbox: shared.inbox.clone(),
        approvals: shared.approvals.clone(),
    }
}

fn claim(task: super::TaskRecord) -> Claim {
    Claim { task, run: "run-1".into(), slot: Timestamp::UNIX_EPOCH, attempt: 1 }
}

#[tokio::test]
async fn a_task_runs_its_agent_in_a_session_of_its_own_that_ends_with_the_run() {
    let house = house();
    let executor = executor(&house);
    let outcome = executor.run(&claim(task(cron("0 7 * * *")))).await;
    let result = outcome.result.expect("the run's result");
    assert!(result.starts_with("the worker did it: Scheduled task \"build check\""), "{result}");
    assert!(result.ends_with("check the build"), "{result}");
    assert!(outcome.container.is_some(), "the run names its container");
    let session = outcome.session.expect("the run's session");
    let record = house.orchestrator.sessions.get(&session).expect("the session is kept");
    assert_eq!(record.context(), Context::user("alice"));
    assert_eq!(record.status, SessionStatus::Archived, "an isolated run's session ends with it");
}

#[tokio::test]
async fn a_heartbeat_with_nothing_to_tell_gives_no_result_and_a_result_waits_in_the_inbox() {
    let house = house();
    let executor = executor(&house);
    let mut heartbeat = task(cron("*/30 * * * *"));
    heartbeat.kind = TaskKind::Heartbeat;
    heartbeat.context_mode = ContextMode::Silent;
    let outcome = executor.run(&claim(heartbeat)).await;
    assert_eq!(outcome.result, Ok(String::new()), "NOTHING is no result");

    // No channel of alice's is connected: the result is kept for her.
    let scheduled = task(cron("0 7 * * *"));
    let content = "the build is green".to_string();
    executor
        .deliver(&scheduled, Delivery::Result { run: "run-2".into(), content: content.clone(), session: None })
        .await;
    let shared = house.daemon.shared();
    let kept = shared.inbox.list(&Context::user("alice"), true, false).expect("alice's inbox");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!((kept[0].title.as_str(), kept[0].content.as_str()), ("build check", content.as_str()));
    assert_eq!(kept[0].run_id, "run-2");
}

#[tokio::test]
async fn a_task_naming_an_agent_that_cannot_run_tasks_fails_with_the_reason_in_the_error_log() {
    let house = house();
    let executor = executor(&house);
    let mut asked = task(cron("0 7 * * *"));
    asked.agent = "assistant".into();
    let outcome = executor.run(&claim(asked)).await;
    let Err(Failure::Error(reason)) = &outcome.result else { panic!("refused: {:?}", outcome.result) };
    assert!(reason.contains("`assistant` cannot run tasks; use worker"), "{reason}");
    assert!(outcome.session.is_none(), "no session was made for it");
    let orchestrator: &Arc<crate::drive::orchestrator::Orchestrator> = &house.orchestrator;
    let configured = &orchestrator.loaded.config.scheduler.error_handling.log_file;
    let log = std::fs::read_to_string(orchestrator.data_dir.root().join(configured)).expect("the error log");
    assert!(log.contains("\"run\":\"run-1\"") && log.contains("cannot run tasks"), "{log}");
}

#[tokio::test]
async fn a_heartbeats_finding_is_told_in_the_assistants_words_in_the_session_it_ran_in() {
    let house = house();
    let executor = executor(&house);
    let mut heartbeat = task(cron("0 * * * *"));
    heartbeat.kind = TaskKind::Heartbeat;
    heartbeat.context_mode = ContextMode::Session;
    heartbeat.section = Some("School mail".into());
    heartbeat.prompt = "Check the school's mail. tell: the trip is moved to Friday".into();
    let outcome = executor.run(&claim(heartbeat)).await;
    let told = outcome.result.expect("the run's result");
    // The played Assistant echoes what it is asked: the finding, to tell in its own words.
    assert!(told.starts_with("echo: Your heartbeat check \"School mail\" ran"), "{told}");
    assert!(told.ends_with("---\nthe trip is moved to Friday"), "{told}");
    let session = outcome.session.expect("the session it ran in");
    let record = house.orchestrator.sessions.get(&session).expect("kept");
    assert_ne!(record.status, SessionStatus::Archived, "a heartbeat runs in the user's conversation");

    // An Assistant with nothing to say leaves the Heartbeat agent's own words.
    let mut heartbeat = task(cron("0 * * * *"));
    heartbeat.kind = TaskKind::Heartbeat;
    heartbeat.context_mode = ContextMode::Session;
    heartbeat.prompt = "tell: the bin goes out tonight (say nothing)".into();
    let outcome = executor.run(&claim(heartbeat)).await;
    assert_eq!(outcome.result.expect("the run's result"), "the bin goes out tonight (say nothing)");
}
