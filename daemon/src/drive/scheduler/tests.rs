//! The scheduler's loop under tokio's paused clock: days pass in milliseconds, and a recording
//! executor stands in for the agents (the daemon's real one is tested end to end).

use super::*;

#[derive(Default)]
struct Recorder {
    runs: Mutex<Vec<(String, Timestamp, u32)>>,
    deliveries: Mutex<Vec<Delivery>>,
    /// Failures to answer with, first ones first; then success.
    failures: Mutex<Vec<Failure>>,
    /// How long each run takes.
    takes: Duration,
}

#[async_trait::async_trait]
impl Execute for Recorder {
    async fn run(&self, claim: &Claim) -> RunOutcome {
        self.runs.lock().expect("runs").push((claim.task.id.clone(), claim.slot, claim.attempt));
        if !self.takes.is_zero() {
            tokio::time::sleep(self.takes).await;
        }
        let failure = {
            let mut failures = self.failures.lock().expect("failures");
            (!failures.is_empty()).then(|| failures.remove(0))
        };
        match failure {
            Some(failure) => RunOutcome::failed(failure),
            None => RunOutcome::ok(format!("done {}", claim.slot)),
        }
    }

    async fn deliver(&self, _task: &TaskRecord, delivery: Delivery) {
        self.deliveries.lock().expect("deliveries").push(delivery);
    }
}

fn settings() -> Settings {
    Settings {
        timezone: "Europe/Berlin".into(),
        max_failures: 5,
        poll: Duration::from_secs(60),
        grace: Duration::from_secs(90),
    }
}

pub(super) fn task(schedule: ScheduleSpec) -> TaskRecord {
    TaskRecord {
        id: String::new(),
        kind: TaskKind::Scheduled,
        user_id: "alice".into(),
        group_id: String::new(),
        schedule,
        timezone: String::new(),
        agent: "worker".into(),
        prompt: "check the build".into(),
        context_mode: ContextMode::Isolated,
        notification: Notification { channel: String::new(), on_success: true, on_failure: true },
        status: TaskStatus::Active,
        last_run: None,
        next_run: None,
        failure_count: 0,
        created_at: Timestamp::UNIX_EPOCH,
        created_by: CreatedBy::User,
        description: "build check".into(),
        catch_up: CatchUp::Once,
        concurrency: Concurrency::Forbid,
        retry_interrupted: false,
        timeout: 0,
        section: None,
        system_job: None,
    }
}

pub(super) fn cron(expression: &str) -> ScheduleSpec {
    ScheduleSpec { cron: Some(expression.into()), ..ScheduleSpec::default() }
}

fn start_at() -> Timestamp {
    "2026-06-01T06:00:00Z".parse().expect("start")
}

/// A scheduler on `dir` whose clock reads `wall` now, running with `executor` until the
/// token is cancelled.
fn running(dir: &Path, wall: Timestamp, executor: Arc<Recorder>) -> (Arc<Scheduler>, CancellationToken, TaskTracker) {
    let scheduler = Arc::new(Scheduler::open(dir, settings(), Clock::tokio(wall)).expect("open"));
    let (cancel, tracker) = (CancellationToken::new(), TaskTracker::new());
    tracker.spawn(scheduler.clone().run(executor, cancel.clone(), tracker.clone()));
    (scheduler, cancel, tracker)
}

async fn stop(cancel: CancellationToken, tracker: TaskTracker) {
    cancel.cancel();
    tracker.close();
    tracker.wait().await;
}

fn slots_run(recorder: &Recorder, id: &str) -> Vec<Timestamp> {
    recorder.runs.lock().expect("runs").iter().filter(|(task, _, _)| task == id).map(|(_, slot, _)| *slot).collect()
}

#[tokio::test(start_paused = true)]
async fn a_cron_task_fires_once_per_slot() {
    let temp = tempfile::tempdir().expect("temp");
    let recorder = Arc::new(Recorder::default());
    let (scheduler, cancel, tracker) = running(temp.path(), start_at(), recorder.clone());
    let id = scheduler.add(task(cron("*/15 * * * *"))).expect("add").id;
    // Three hours: 12 slots, each once, none twice although the loop wakes in between.
    tokio::time::sleep(Duration::from_secs(3 * 3600 + 30)).await;
    stop(cancel, tracker).await;
    let slots = slots_run(&recorder, &id);
    assert_eq!(slots.len(), 12, "{slots:?}");
    for pair in slots.windows(2) {
        assert_eq!(pair[1].as_second() - pair[0].as_second(), 15 * 60);
    }
    let runs = scheduler.runs(&id, 100);
    assert_eq!(runs.len(), 12);
    assert!(runs.iter().all(|run| run.outcome == Some(Outcome::Ok)));
    assert_eq!(recorder.deliveries.lock().expect("deliveries").len(), 12);
}

#[tokio::test(start_paused = true)]
async fn an_interval_task_does_not_drift_over_a_thousand_runs() {
    let temp = tempfile::tempdir().expect("temp");
    // Each run takes 7 s: a scheduler that counted from the end of a run would drift 7000 s.
    let recorder = Arc::new(Recorder { takes: Duration::from_secs(7), ..Recorder::default() });
    let (scheduler, cancel, tracker) = running(temp.path(), start_at(), recorder.clone());
    let anchor = start_at();
    let spec = ScheduleSpec { interval: Some(600), anchor: Some(anchor), ..ScheduleSpec::default() };
    let id = scheduler.add(task(spec)).expect("add").id;
    tokio::time::sleep(Duration::from_secs(1000 * 600 + 60)).await;
    stop(cancel, tracker).await;
    let slots = slots_run(&recorder, &id);
    assert_eq!(slots.len(), 1000);
    for (index, slot) in slots.iter().enumerate() {
        assert_eq!(slot.as_second(), anchor.as_second() + 600 * (index as i64 + 1), "run {index}");
    }
    let last = scheduler.runs(&id, 1).remove(0);
    let started = last.started.expect("started");
    assert!(started.as_second() - last.slot.as_second() <= 1, "run 1000 started {started}, its slot {}", last.slot);
}

#[tokio::test(start_paused = true)]
async fn five_failures_in_a_row_pause_the_task_and_tell() {
    let temp = tempfile::tempdir().expect("temp");
    let failures = (0..5).map(|n| Failure::Error(format!("boom {n}"))).collect();
    let recorder = Arc::new(Recorder { failures: Mutex::new(failures), ..Recorder::default() });
    let (scheduler, cancel, tracker) = running(temp.path(), start_at(), recorder.clone());
    let id = scheduler.add(task(cron("0 * * * *"))).expect("add").id;
    tokio::time::sleep(Duration::from_secs(10 * 3600)).await;
    stop(cancel, tracker).await;
    assert_eq!(slots_run(&recorder, &id).len(), 5, "no run after the pause");
    let stored = scheduler.get(&id).expect("task");
    assert_eq!((stored.status, stored.failure_count), (TaskStatus::Paused, 5));
    let deliveries = recorder.deliveries.lock().expect("deliveries").clone();
    assert_eq!(deliveries.iter().filter(|d| matches!(d, Delivery::Failed { .. })).count(), 5);
    assert_eq!(deliveries.last(), Some(&Delivery::Paused { failures: 5, error: "boom 4".into() }));
    // Resumed: counts from zero again and runs.
    scheduler.resume(&id).expect("resume");
    assert_eq!(scheduler.get(&id).expect("task").failure_count, 0);
}

#[tokio::test(start_paused = true)]
async fn a_start_failure_is_retried_once_at_once() {
    let temp = tempfile::tempdir().expect("temp");
    let failures = vec![Failure::Start("no engine".into()), Failure::Start("no engine".into())];
    let recorder = Arc::new(Recorder { failures: Mutex::new(failures), ..Recorder::default() });
    let (scheduler, cancel, tracker) = running(temp.path(), start_at(), recorder.clone());
    let id = scheduler.add(task(cron("0 * * * *"))).expect("add").id;
    tokio::time::sleep(Duration::from_secs(2 * 3600 + 60)).await;
    stop(cancel, tracker).await;
    let attempts: Vec<u32> = recorder.runs.lock().expect("runs").iter().map(|(_, _, attempt)| *attempt).collect();
    assert_eq!(attempts, [1, 2, 1], "the first slot tried twice, the second once");
    let runs = scheduler.runs(&id, 10);
    let outcomes: Vec<_> = runs.iter().map(|run| run.outcome).collect();
    assert_eq!(outcomes, [Some(Outcome::Ok), Some(Outcome::StartFailed), Some(Outcome::StartFailed)]);
    assert_eq!(scheduler.get(&id).expect("task").failure_count, 0);
}

#[tokio::test(start_paused = true)]
async fn a_slot_due_while_the_previous_run_goes_is_skipped_unless_overlap_is_allowed() {
    let temp = tempfile::tempdir().expect("temp");
    let recorder = Arc::new(Recorder { takes: Duration::from_secs(25 * 60), ..Recorder::default() });
    let (scheduler, cancel, tracker) = running(temp.path(), start_at(), recorder.clone());
    let forbid = scheduler.add(task(cron("*/10 * * * *"))).expect("add").id;
    let allow =
        scheduler.add(TaskRecord { concurrency: Concurrency::Allow, ..task(cron("*/10 * * * *")) }).expect("add").id;
    tokio::time::sleep(Duration::from_secs(60 * 60 + 30)).await;
    stop(cancel, tracker).await;
    assert_eq!(slots_run(&recorder, &allow).len(), 6);
    // 25-minute runs every 10 minutes, no overlap: slots 0, 30 run; 10, 20, 40, 50 skipped.
    assert_eq!(slots_run(&recorder, &forbid).len(), 2);
    let skipped = scheduler.runs(&forbid, 100).iter().filter(|run| run.outcome == Some(Outcome::Skipped)).count();
    assert_eq!(skipped, 4);
}

/// A task added at 06:00 UTC, a scheduler that stops, three days of downtime, a restart.
async fn after_three_days_down(catch_up: CatchUp) -> (Vec<Timestamp>, Vec<RunRow>, Option<Timestamp>) {
    let temp = tempfile::tempdir().expect("temp");
    let recorder = Arc::new(Recorder::default());
    let (scheduler, cancel, tracker) = running(temp.path(), start_at(), recorder.clone());
    let id = scheduler.add(TaskRecord { catch_up, ..task(cron("0 */6 * * *")) }).expect("add").id;
    tokio::time::sleep(Duration::from_secs(30)).await;
    stop(cancel, tracker).await;
    drop(scheduler);
    // Down from 06:00:30 until three days later at 07:00 (slots at 12:00, 18:00, 00:00… missed).
    let restart = start_at().checked_add(SignedDuration::from_hours(72 + 1)).expect("restart");
    let (scheduler, cancel, tracker) = running(temp.path(), restart, recorder.clone());
    tokio::time::sleep(Duration::from_secs(60)).await;
    stop(cancel, tracker).await;
    (slots_run(&recorder, &id), scheduler.runs(&id, 100), scheduler.get(&id).and_then(|t| t.next_run))
}

#[tokio::test(start_paused = true)]
async fn catch_up_after_three_days_down() {
    // Slots at 00, 06, 12, 18 in Berlin (22, 04, 10, 16 UTC); down from 06:00 UTC on June 1st
    // to 07:00 UTC on June 4th: 12 slots missed, the last (04:00 UTC) 3 h before the restart.
    let next: Timestamp = "2026-06-04T10:00:00Z".parse().expect("next");
    let (slots, runs, next_run) = after_three_days_down(CatchUp::Once).await;
    assert_eq!(slots, ["2026-06-04T04:00:00Z".parse::<Timestamp>().expect("last missed")], "one run for all");
    assert_eq!(runs[0].missed, 11);
    assert_eq!(next_run, Some(next));

    let (slots, runs, next_run) = after_three_days_down(CatchUp::Skip).await;
    assert!(slots.is_empty(), "nothing made up: {slots:?}");
    assert_eq!((runs[0].outcome, runs[0].missed), (Some(Outcome::Skipped), 12));
    assert!(runs[0].error.as_deref().is_some_and(|e| e.contains("catch_up: skip")), "{:?}", runs[0].error);
    assert_eq!(next_run, Some(next));

    let (slots, _, _) = after_three_days_down(CatchUp::Within(4 * 3600)).await;
    assert_eq!(slots.len(), 1, "the last missed slot is 3 h old, within 4 h");
    let (slots, _, _) = after_three_days_down(CatchUp::Within(3600)).await;
    assert!(slots.is_empty(), "the last missed slot is 3 h old, not within 1 h");
}

#[tokio::test(start_paused = true)]
async fn a_claim_without_its_end_is_interrupted_never_run_twice_and_retried_once_when_asked() {
    let temp = tempfile::tempdir().expect("temp");
    let recorder = Arc::new(Recorder { takes: Duration::from_secs(3600), ..Recorder::default() });
    let (scheduler, cancel, tracker) = running(temp.path(), start_at(), recorder.clone());
    let plain = scheduler.add(task(cron("0 9 * * *"))).expect("add").id;
    let retried = scheduler.add(TaskRecord { retry_interrupted: true, ..task(cron("0 9 * * *")) }).expect("add").id;
    // 09:00 Berlin is 07:00 UTC: an hour after the start both are claimed and running.
    tokio::time::sleep(Duration::from_secs(3600 + 60)).await;
    // A crash: the runs never finish (nothing of a clean stop runs).
    cancel.cancel();
    drop(tracker);
    drop(scheduler);
    let later = start_at().checked_add(SignedDuration::from_hours(2)).expect("later");
    let quick = Arc::new(Recorder::default());
    let (scheduler, cancel, tracker) = running(temp.path(), later, quick.clone());
    tokio::time::sleep(Duration::from_secs(60)).await;
    stop(cancel, tracker).await;
    assert!(slots_run(&quick, &plain).is_empty(), "the interrupted run is not run again");
    let outcomes: Vec<_> = scheduler.runs(&plain, 10).iter().map(|run| run.outcome).collect();
    assert_eq!(outcomes, [Some(Outcome::Interrupted)]);
    assert_eq!(quick.runs.lock().expect("runs").iter().filter(|(id, _, a)| *id == retried && *a == 2).count(), 1);
    let outcomes: Vec<_> = scheduler.runs(&retried, 10).iter().map(|run| run.outcome).collect();
    assert_eq!(outcomes, [Some(Outcome::Ok), Some(Outcome::Interrupted)]);
    let next: Timestamp = "2026-06-02T07:00:00Z".parse().expect("next");
    assert_eq!(scheduler.get(&plain).and_then(|t| t.next_run), Some(next));
}

#[tokio::test(start_paused = true)]
async fn a_claim_whose_next_run_was_not_saved_is_not_run_again() {
    let temp = tempfile::tempdir().expect("temp");
    let recorder = Arc::new(Recorder::default());
    let (scheduler, cancel, tracker) = running(temp.path(), start_at(), recorder.clone());
    let id = scheduler.add(task(cron("0 9 * * *"))).expect("add").id;
    stop(cancel, tracker).await;
    let before_claim = std::fs::read(temp.path().join(SCHEDULER_FILE)).expect("scheduler.json");
    let (scheduler, cancel, tracker) = running(temp.path(), start_at(), recorder.clone());
    tokio::time::sleep(Duration::from_secs(3600 + 60)).await;
    stop(cancel, tracker).await;
    drop(scheduler);
    assert_eq!(slots_run(&recorder, &id).len(), 1);
    // The daemon died after the claim, before scheduler.json moved nextRun on.
    std::fs::write(temp.path().join(SCHEDULER_FILE), before_claim).expect("restore");
    let later = start_at().checked_add(SignedDuration::from_hours(1)).expect("later");
    let (scheduler, cancel, tracker) =
        running(temp.path(), later.checked_add(SignedDuration::from_mins(2)).expect("t"), recorder.clone());
    tokio::time::sleep(Duration::from_secs(120)).await;
    stop(cancel, tracker).await;
    assert_eq!(slots_run(&recorder, &id).len(), 1, "the slot in the ledger does not run again");
    assert_eq!(scheduler.runs(&id, 10).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn heartbeats_keep_their_jitter_until_their_cadence_changes_and_other_contexts_are_untouched() {
    let temp = tempfile::tempdir().expect("temp");
    let scheduler = Scheduler::open(temp.path(), settings(), Clock::tokio(start_at())).expect("open");
    let parse = |text: &str| heartbeat::parse(text).sections;
    let alice = Context::user("alice");
    let bob = Context::user("bob");
    let mut draw = |bound: u32| schedule::random_below(bound);
    let first = parse("## Mail\n- Cadence: daily\n- Prompt: mail\n## News\n- Cadence: hourly\n- Prompt: news");
    let changes = scheduler.sync_heartbeats(&alice, "sha256:1", &first, &mut draw).expect("sync");
    assert_eq!(changes, HeartbeatChanges { added: 2, ..HeartbeatChanges::default() });
    scheduler.sync_heartbeats(&bob, "sha256:b", &first[..1], &mut draw).expect("sync bob");
    let bob_before = scheduler.list(&Filter { context: Some(bob.clone()), ..Filter::default() });
    let mail_before = scheduler.list(&Filter { context: Some(alice.clone()), ..Filter::default() });
    // The same hash: nothing changes.
    assert_eq!(
        scheduler.sync_heartbeats(&alice, "sha256:1", &[], &mut draw).expect("same"),
        HeartbeatChanges::default()
    );
    let second =
        parse("## Mail\n- Cadence: daily\n- Prompt: mail, urgent only\n## Digest\n- Cadence: weekly\n- Prompt: digest");
    let changes = scheduler.sync_heartbeats(&alice, "sha256:2", &second, &mut draw).expect("sync");
    assert_eq!(changes, HeartbeatChanges { added: 1, updated: 1, removed: 1, kept: 0 });
    let after = scheduler.list(&Filter { context: Some(alice.clone()), ..Filter::default() });
    let mail =
        |tasks: &[TaskRecord]| tasks.iter().find(|t| t.section.as_deref() == Some("Mail")).cloned().expect("mail");
    assert_eq!(mail(&after).schedule, mail(&mail_before).schedule, "the jitter stays");
    assert_eq!(mail(&after).prompt, "mail, urgent only");
    assert_eq!(scheduler.list(&Filter { context: Some(bob), ..Filter::default() }), bob_before);
    // Reopened: the jitter is where it was.
    drop(scheduler);
    let reopened = Scheduler::open(temp.path(), settings(), Clock::tokio(start_at())).expect("open");
    assert_eq!(
        mail(&reopened.list(&Filter { context: Some(alice), ..Filter::default() })).schedule,
        mail(&after).schedule
    );
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_keeps_no_secret_and_a_synced_one_stays_as_it_was() {
    let temp = tempfile::tempdir().expect("temp");
    let audit = crate::guard::audit::Audit::open(
        temp.path().join("audit"),
        false,
        1,
        Arc::new(crate::base::metrics::Metrics::off()),
    );
    let shield = Arc::new(crate::guard::redact::Shield::with_values(&[("MAIL_PASSWORD", "s3cret-mail-pass-42")]));
    let scheduler = Scheduler::open(temp.path(), settings(), Clock::tokio(start_at()))
        .expect("open")
        .redacting(crate::guard::redact::Redact::new(shield, audit));
    let alice = Context::user("alice");
    let mut draw = |bound: u32| schedule::random_below(bound);
    let sections = heartbeat::parse("## Mail\n- Cadence: daily\n- Prompt: log in with s3cret-mail-pass-42").sections;
    scheduler.sync_heartbeats(&alice, "sha256:1", &sections, &mut draw).expect("sync");
    let tasks = scheduler.list(&Filter { context: Some(alice.clone()), ..Filter::default() });
    assert_eq!(tasks[0].prompt, "log in with [redacted: MAIL_PASSWORD]");
    // The same sections again (a new hash): the cleaned prompt is the one kept, nothing changes.
    let changes = scheduler.sync_heartbeats(&alice, "sha256:2", &sections, &mut draw).expect("sync");
    assert_eq!(changes, HeartbeatChanges { kept: 1, ..HeartbeatChanges::default() });
    let saved = std::fs::read_to_string(temp.path().join(SCHEDULER_FILE)).expect("scheduler.json");
    assert!(!saved.contains("s3cret-mail-pass-42"), "{saved}");
}

#[test]
fn catch_up_reads_and_writes_its_forms() {
    assert_eq!(CatchUp::try_from("within: 2h".to_string()), Ok(CatchUp::Within(7200)));
    assert_eq!(CatchUp::try_from("Within 30m".to_string()), Ok(CatchUp::Within(1800)));
    assert_eq!(CatchUp::try_from("".to_string()), Ok(CatchUp::Once));
    assert_eq!(String::from(CatchUp::Within(7200)), "within: 2h");
    let error = CatchUp::try_from("sometimes".to_string()).expect_err("bad");
    assert!(error.to_string().contains("not once, skip or within"), "{error}");
    let error = CatchUp::try_from("within: soon".to_string()).expect_err("bad");
    assert!(error.to_string().contains("`soon` is not a duration"), "{error}");
    assert_eq!(CatchUp::try_from("within: 1d".to_string()), Ok(CatchUp::Within(86_400)));
    let error = CatchUp::try_from("within: 500ms".to_string()).expect_err("too short");
    assert!(error.to_string().contains("shorter than a second"), "{error}");
    // What is written reads back.
    for catch_up in [CatchUp::Once, CatchUp::Skip, CatchUp::Within(1), CatchUp::Within(90_061)] {
        assert_eq!(CatchUp::try_from(String::from(catch_up)), Ok(catch_up));
    }
}

#[tokio::test(start_paused = true)]
async fn a_stored_task_that_does_not_read_costs_that_task_only_and_is_kept() {
    let temp = tempfile::tempdir().expect("temp");
    let scheduler = Scheduler::open(temp.path(), settings(), Clock::tokio(start_at())).expect("open");
    let id = scheduler.add(task(cron("0 9 * * *"))).expect("add").id;
    drop(scheduler);
    let path = temp.path().join(SCHEDULER_FILE);
    let mut file: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
    file["tasks"].as_array_mut().expect("tasks").push(serde_json::json!({"id": "mangled", "type": "nonsense"}));
    std::fs::write(&path, serde_json::to_vec(&file).expect("json")).expect("write");
    let scheduler = Scheduler::open(temp.path(), settings(), Clock::tokio(start_at())).expect("open");
    assert!(scheduler.get(&id).is_some(), "the good task survives the bad one");
    assert_eq!(scheduler.count(), 1);
    scheduler.pause(&id).expect("a change saves the file");
    let saved = std::fs::read_to_string(&path).expect("read");
    assert!(saved.contains("\"mangled\""), "the record that does not read is kept for a person to mend");
}

#[tokio::test(start_paused = true)]
async fn a_one_shot_in_the_past_is_refused_and_one_to_come_runs_once_then_completes() {
    let temp = tempfile::tempdir().expect("temp");
    let recorder = Arc::new(Recorder::default());
    let (scheduler, cancel, tracker) = running(temp.path(), start_at(), recorder.clone());
    let past = ScheduleSpec { once: Some("2026-05-01T00:00:00Z".parse().expect("t")), ..ScheduleSpec::default() };
    let error = scheduler.add(task(past)).expect_err("past").to_string();
    assert!(error.contains("schedule.once: 2026-05-01T00:00:00Z is in the past"), "{error}");
    let soon = ScheduleSpec { once: Some("2026-06-01T06:30:00Z".parse().expect("t")), ..ScheduleSpec::default() };
    let id = scheduler.add(task(soon)).expect("add").id;
    tokio::time::sleep(Duration::from_secs(3 * 3600)).await;
    stop(cancel, tracker).await;
    assert_eq!(slots_run(&recorder, &id).len(), 1);
    let stored = scheduler.get(&id).expect("task");
    assert_eq!((stored.status, stored.next_run), (TaskStatus::Completed, None));
}

#[tokio::test(start_paused = true)]
async fn a_changed_task_keeps_its_id_and_status_and_runs_on_its_new_schedule_from_then_on() {
    let temp = tempfile::tempdir().expect("temp");
    let recorder = Arc::new(Recorder::default());
    let (scheduler, cancel, tracker) = running(temp.path(), start_at(), recorder.clone());
    let id = scheduler.add(task(cron("0 * * * *"))).expect("add").id;
    let hourly = scheduler.get(&id).expect("task");
    let change = TaskChange {
        prompt: Some("check the build and the docs".into()),
        schedule: Some(Every::Cron("*/30 * * * *".into())),
        ..TaskChange::default()
    };
    let changed = changed_task(&hourly, change, scheduler.now()).expect("changed");
    let stored = scheduler.update(changed).expect("update");
    assert_eq!((stored.id.as_str(), stored.status), (id.as_str(), TaskStatus::Active));
    assert_eq!(stored.prompt, "check the build and the docs");
    assert_eq!(stored.description, "build check", "a description not given stays");
    tokio::time::sleep(Duration::from_secs(2 * 3600 + 30)).await;
    stop(cancel, tracker).await;
    assert_eq!(slots_run(&recorder, &id).len(), 4, "every half hour from the change on");

    // Nothing to change, a schedule that does not read, and a heartbeat are each told.
    let error = changed_task(&stored, TaskChange::default(), scheduler.now()).expect_err("nothing").to_string();
    assert!(error.starts_with("nothing to change"), "{error}");
    let bad = TaskChange { schedule: Some(Every::Cron("every monday".into())), ..TaskChange::default() };
    let error = scheduler.update(changed_task(&stored, bad, scheduler.now()).expect("reads")).expect_err("cron");
    assert!(error.to_string().contains("cron"), "{error}");
    let heartbeat = TaskRecord { kind: TaskKind::Heartbeat, ..stored.clone() };
    let prompt = TaskChange { prompt: Some("x".into()), ..TaskChange::default() };
    assert!(matches!(changed_task(&heartbeat, prompt, scheduler.now()), Err(SchedulerError::HeartbeatType)));
}

#[tokio::test(start_paused = true)]
async fn a_paused_task_changed_stays_paused_and_one_that_ran_its_course_is_not_changed() {
    let temp = tempfile::tempdir().expect("temp");
    let scheduler = Scheduler::open(temp.path(), settings(), Clock::tokio(start_at())).expect("open");
    let id = scheduler.add(task(cron("0 9 * * *"))).expect("add").id;
    let paused = scheduler.pause(&id).expect("pause");
    let change = TaskChange { description: Some("morning build".into()), ..TaskChange::default() };
    let stored = scheduler.update(changed_task(&paused, change, scheduler.now()).expect("changed")).expect("update");
    assert_eq!((stored.status, stored.description.as_str()), (TaskStatus::Paused, "morning build"));
    let done = TaskRecord { status: TaskStatus::Completed, ..stored };
    let prompt = TaskChange { prompt: Some("again".into()), ..TaskChange::default() };
    let error = changed_task(&done, prompt, scheduler.now()).expect_err("completed").to_string();
    assert!(error.contains("is completed and will not run again; schedule a new task"), "{error}");
}
