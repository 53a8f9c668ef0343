//! The scheduler end to end on the real binaries, a real engine and the fake provider as every
//! model: a Worker schedules what a user asks for, HEARTBEAT.md edits become tasks at once, a
//! run happens exactly once across `kill -9`, and its result reaches the user's inbox.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baaaht_proto::v1;
use baaaht_tests::fake_provider::{anthropic_answer, Answer, Asked, FakeProvider, Responder, Wire};
use baaaht_tests::scenario::{self, message, user};
use baaaht_tests::{DaemonOptions, TestDaemon};
use serde_json::json;

/// The Assistant hands "remind me" to the Worker; the Worker calls schedule_task; scheduled
/// runs answer at once, or, the first time a prompt says "slowly", over a minute.
fn scheduling_brain() -> Answer {
    let slow_once: Arc<std::sync::Mutex<std::collections::HashSet<String>>> = Arc::default();
    Answer::Respond(Responder(Arc::new(move |request| {
        let asked = Asked::of(request);
        if asked.offers("delegate") {
            return match asked.results.last() {
                None => anthropic_answer(
                    "",
                    &[(
                        "toolu_delegate_1",
                        "delegate",
                        json!({"agent": "worker", "task": "Schedule a reminder every Monday at 9:00: check the build.", "returnDirectly": false}),
                    )],
                ),
                Some(result) => anthropic_answer(&format!("Done. {result}"), &[]),
            };
        }
        if asked.first.starts_with("Scheduled task") || asked.first.starts_with("Heartbeat") {
            let first_time =
                slow_once.lock().expect("seen").insert(asked.first.lines().last().unwrap_or_default().into());
            if asked.first.contains("slowly") && first_time {
                return baaaht_tests::fake_provider::token_stream(Wire::Anthropic, 120, Duration::from_millis(500));
            }
            return anthropic_answer(&format!("ran: {}", asked.first.lines().last().unwrap_or_default()), &[]);
        }
        if asked.offers("schedule_task") {
            return match asked.results.last() {
                None => anthropic_answer(
                    "",
                    &[(
                        "toolu_schedule_1",
                        "schedule_task",
                        json!({"cron": "0 9 * * 1", "prompt": "Remind the user to check the build.", "description": "check the build"}),
                    )],
                ),
                Some(result) => anthropic_answer(result, &[]),
            };
        }
        anthropic_answer("I was not expecting to be asked.", &[])
    })))
}

fn options() -> DaemonOptions {
    DaemonOptions { env: vec![("BAAAHT__SYSTEM__TIMEZONE".into(), "Europe/Berlin".into())], ..DaemonOptions::default() }
}

/// A one-shot task for alice `seconds` from now, doing `prompt`.
fn once_in(seconds: i64, prompt: &str, retry_interrupted: bool) -> v1::TaskDefinition {
    v1::TaskDefinition { retry_interrupted, ..scenario::task_once("alice", seconds, prompt) }
}

/// How many scheduled runs the fake model was asked for with `needle` in the task.
fn runs_asked(fake: &FakeProvider, needle: &str) -> usize {
    fake.requests()
        .iter()
        .filter(|request| {
            let asked = Asked::of(request);
            asked.first.starts_with("Scheduled task") && asked.first.contains(needle)
        })
        .count()
}

fn wait_for(limit: Duration, what: &str, daemon: &TestDaemon, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what} did not happen within {limit:?}\n{}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_worker_asked_to_remind_every_monday_at_9_creates_the_task_and_the_reply_states_its_next_runs() {
    let rt = baaaht_tests::runtime();
    let (_fake, daemon) = scenario::start(&rt, scheduling_brain(), options()).expect("fake provider and daemon");
    let reply = rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let turn = scenario::turn(
            &mut client,
            message(user("alice"), "alice", "Remind me every Monday at 9 to check the build."),
            Duration::from_secs(120),
        )
        .await
        .unwrap_or_else(|error| panic!("{error:#}\n{}", daemon.log_text()));
        turn.reply.unwrap_or_else(|| panic!("no reply: {:?}\n{}", turn.error, daemon.log_text())).content
    });
    assert!(reply.contains("Scheduled task task-") && reply.contains("Next runs:"), "{reply}");
    let first = reply.split("Next runs: ").nth(1).and_then(|runs| runs.split(", ").next()).expect("a next run");
    let zoned: jiff::Zoned = format!("{first}[Europe/Berlin]").parse().unwrap_or_else(|e| panic!("{first}: {e}"));
    assert_eq!((zoned.weekday(), zoned.hour(), zoned.minute()), (jiff::civil::Weekday::Monday, 9, 0), "{reply}");
    let listed = daemon.cli(&["tasks", "list", "--user", "alice"]);
    assert!(
        listed.contains("scheduled") && listed.contains("check the build") && listed.contains("cron 0 9 * * 1"),
        "{listed}"
    );
    let id = listed.split_whitespace().next().expect("an id").to_string();
    let shown = daemon.cli(&["tasks", "show", &id]);
    assert!(shown.contains("Remind the user to check the build.") && shown.contains("next runs"), "{shown}");
    // Bob sees none of alice's tasks; a bad schedule is refused naming its field.
    assert!(daemon.cli(&["tasks", "list", "--user", "bob"]).contains("no tasks"));
    let output = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(["tasks", "add", "x", "--user", "alice", "--cron", "0 9 * * 8"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht runs");
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && error.contains("the day-of-week field `8`"), "{error}");
}

#[test]
fn editing_heartbeat_md_regenerates_that_contexts_tasks_within_a_second_and_no_others() {
    let heartbeat = "## Mail\n- Cadence: daily\n- Prompt: Anything urgent in my mail?\n";
    let daemon = TestDaemon::start(DaemonOptions {
        files: vec![("users/bob/HEARTBEAT.md".into(), heartbeat.into())],
        ..options()
    })
    .expect("daemon");
    let bob_before = daemon.cli(&["tasks", "list", "--user", "bob", "--type", "heartbeat"]);
    assert!(bob_before.contains("Mail (from HEARTBEAT.md)"), "bob's HEARTBEAT.md is read at start: {bob_before}");
    let alice = daemon.data_dir.join("users/alice");
    std::fs::create_dir_all(&alice).expect("alice's folder");
    let list = || daemon.cli(&["tasks", "list", "--user", "alice", "--type", "heartbeat"]);
    let edited = Instant::now();
    std::fs::write(
        alice.join("HEARTBEAT.md"),
        "# mine\n## News\n- Cadence: hourly\n- Active hours: 08:00-20:00\n- Prompt: Any news?\n## Broken\n- Prompt: no cadence\n",
    )
    .expect("write");
    while !list().contains("News (from HEARTBEAT.md)") {
        assert!(edited.elapsed() < Duration::from_secs(1), "not regenerated within a second\n{}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(list().contains("hourly, 08:00-20:00"), "{}", list());
    assert!(daemon.log_text().contains("has no `Cadence:` line"), "the broken section is named in the log");
    let edited = Instant::now();
    std::fs::write(alice.join("HEARTBEAT.md"), "## Weather\n- Cadence: daily\n- Prompt: Rain today?\n").expect("edit");
    loop {
        let listed = list();
        if listed.contains("Weather") && !listed.contains("News") {
            break;
        }
        assert!(edited.elapsed() < Duration::from_secs(1), "not regenerated within a second: {listed}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(daemon.cli(&["tasks", "list", "--user", "bob", "--type", "heartbeat"]), bob_before, "bob's untouched");
}

#[test]
fn a_run_in_flight_at_kill_9_is_interrupted_never_repeated_and_retried_once_when_the_task_asks() {
    let rt = baaaht_tests::runtime();
    let (fake, mut daemon) = scenario::start(&rt, scheduling_brain(), options()).expect("fake provider and daemon");
    let (plain, retried) = rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let plain = client.tasks.schedule_task(once_in(2, "Think this through slowly (plain).", false)).await;
        let retried = client.tasks.schedule_task(once_in(2, "Think this through slowly (retried).", true)).await;
        let id = |scheduled: Result<tonic::Response<v1::ScheduledTask>, tonic::Status>| {
            scheduled.expect("scheduled").into_inner().task.expect("task").id
        };
        (id(plain), id(retried))
    });
    wait_for(Duration::from_secs(90), "both runs reaching the model", &daemon, || {
        runs_asked(&fake, "slowly (plain)") == 1 && runs_asked(&fake, "slowly (retried)") == 1
    });
    daemon.signal("KILL").expect("kill -9");
    daemon.wait_exit(Duration::from_secs(10)).expect("dies");
    let restarted =
        TestDaemon::start(DaemonOptions { data_dir: Some(daemon.data_dir.clone()), ..scenario::options_for(&fake) })
            .expect("restarts");
    let plain_runs = restarted.cli(&["tasks", "runs", &plain]);
    assert!(plain_runs.contains("interrupted"), "{plain_runs}");
    assert!(restarted.cli(&["tasks", "show", &plain]).contains("failed"), "a one-shot cut short did not complete");
    wait_for(Duration::from_secs(120), "the retry", &restarted, || {
        restarted.cli(&["tasks", "runs", &retried]).contains("(attempt 2)")
    });
    wait_for(Duration::from_secs(120), "the retry's end", &restarted, || {
        let runs = restarted.cli(&["tasks", "runs", &retried]);
        runs.lines().next().is_some_and(|line| !line.contains("running"))
    });
    // Exactly once each: the plain run never again, the retried one once more; both one-shots
    // are over, so nothing of either is left to run.
    assert!(restarted.cli(&["tasks", "show", &retried]).contains("completed"));
    assert_eq!(runs_asked(&fake, "slowly (plain)"), 1, "{}", restarted.log_text());
    assert_eq!(runs_asked(&fake, "slowly (retried)"), 2);
}

#[test]
fn a_run_due_while_the_daemon_is_dead_happens_once_after_the_restart_and_lands_in_the_inbox() {
    let rt = baaaht_tests::runtime();
    let (fake, mut daemon) = scenario::start(&rt, scheduling_brain(), options()).expect("fake provider and daemon");
    let (id, slot) = rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let scheduled = client.tasks.schedule_task(once_in(3, "Water the plants.", false)).await.expect("scheduled");
        let task = scheduled.into_inner().task.expect("task");
        let slot: jiff::Timestamp = task.next_run.parse().expect("next run");
        (task.id, slot)
    });
    daemon.signal("KILL").expect("kill -9");
    daemon.wait_exit(Duration::from_secs(10)).expect("dies");
    // The daemon stays dead until its run's slot has passed.
    let until_past = jiff::Timestamp::now().duration_until(slot) + jiff::SignedDuration::from_millis(500);
    std::thread::sleep(Duration::try_from(until_past).unwrap_or(Duration::ZERO));
    let restarted =
        TestDaemon::start(DaemonOptions { data_dir: Some(daemon.data_dir.clone()), ..scenario::options_for(&fake) })
            .expect("restarts");
    wait_for(Duration::from_secs(120), "the missed run", &restarted, || {
        restarted.cli(&["tasks", "runs", &id]).contains(" ok")
    });
    let runs = restarted.cli(&["tasks", "runs", &id]);
    assert_eq!(runs.lines().filter(|line| line.starts_with("run-")).count(), 1, "{runs}");
    assert!(runs.contains("tokens") && runs.contains("container baaaht-worker-"), "{runs}");
    assert_eq!(runs_asked(&fake, "Water the plants."), 1);
    let metrics = restarted.metrics().expect("metrics");
    assert!(metrics.contains("baaaht_task_runs_total{type=\"scheduled\",outcome=\"ok\"} 1"), "{metrics}");
    // No channel was there: the result waits in alice's inbox, shown once.
    wait_for(Duration::from_secs(10), "the inbox item", &restarted, || {
        restarted.cli(&["inbox", "--user", "alice", "--all"]).contains("ran: Water the plants.")
    });
    let inbox = restarted.cli(&["inbox", "--user", "alice"]);
    assert!(inbox.contains("the inbox is empty"), "read once: {inbox}");
    assert!(restarted.cli(&["tasks", "show", &id]).contains("completed"));
}

#[test]
fn a_channel_connected_for_the_user_gets_the_result_at_once_instead_of_the_inbox() {
    let rt = baaaht_tests::runtime();
    let (_fake, daemon) = scenario::start(&rt, scheduling_brain(), options()).expect("fake provider and daemon");
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let mut events = client
            .sessions
            .subscribe_events(v1::EventSubscription {
                context: Some(user("alice")),
                session_id: String::new(),
                channel: v1::ChannelType::Tui as i32,
                notifies: false,
            })
            .await
            .expect("subscribe")
            .into_inner();
        client.tasks.schedule_task(once_in(2, "Say hello.", false)).await.expect("scheduled");
        let notice = loop {
            let event = tokio::time::timeout(Duration::from_secs(90), events.message())
                .await
                .unwrap_or_else(|_| panic!("no notice\n{}", daemon.log_text()))
                .expect("stream")
                .expect("event");
            if let Some(v1::orchestrator_event::Event::Notice(notice)) = event.event {
                break notice;
            }
        };
        assert!(notice.content.contains("ran: Say hello."), "{notice:?}");
        assert_eq!(notice.channel, "tui", "the channel alice is connected on");
        let inbox = client
            .sessions
            .list_inbox(v1::InboxRequest { context: Some(user("alice")), unread_only: true, mark_read: false })
            .await
            .expect("inbox")
            .into_inner();
        assert!(inbox.items.is_empty(), "delivered, not kept: {inbox:?}");
    });
}

/// A Worker (no exec) cannot buy itself exec by scheduling a Coder's task, through the RPC or
/// through the file IPC of its tool container; it may schedule what it could do itself.
#[test]
fn a_task_an_agent_schedules_can_do_no_more_than_the_agent() {
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon");
    let worker = daemon.lingering_agent("worker", None, &[]).expect("worker");
    rt.block_on(async {
        let mut agent = baaaht_proto::client::connect(&worker.socket, worker.options()).await.expect("connect");
        let task = |agent_role: &str| v1::TaskDefinition {
            agent: agent_role.into(),
            schedule: Some(v1::TaskSchedule { kind: Some(v1::task_schedule::Kind::Cron("0 9 * * 1".into())) }),
            prompt: "Run the build.".into(),
            ..v1::TaskDefinition::default()
        };
        let refused = agent.tasks.schedule_task(task("coder")).await.expect_err("a coder's task");
        assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
        assert!(refused.message().contains("a coder can use edit_file, exec, which a worker cannot"), "{refused:?}");
        assert!(refused.message().contains("ask the user to schedule it"), "{refused:?}");
        agent.tasks.schedule_task(task("researcher")).await.expect("a researcher's task is the worker's to give");
        // A tool call starts the session's tool container, and with it its IPC folder.
        let list = v1::ToolRequest { tool: "list_dir".into(), params_json: "{}".into(), ..Default::default() };
        agent.agents.request_tool_execution(list).await.expect("list_dir");
    });
    // The same through the file IPC of the session's tool container: set aside, the owner told.
    let ipc = daemon.data_dir.join("data/ipc/user-baaaht-self-test");
    let slot = std::fs::read_dir(&ipc)
        .expect("the context's IPC folder")
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.file_name().is_some_and(|name| name.to_string_lossy().starts_with("tools-")))
        .expect("the tool container's IPC folder");
    std::fs::write(
        slot.join("tasks/t9.json"),
        r#"{"id":"t9","prompt":"Run the build.","cron":"0 9 * * 1","agent":"coder"}"#,
    )
    .expect("write a task request");
    let deadline = Instant::now() + Duration::from_secs(20);
    while slot.join("tasks/t9.json").exists() {
        assert!(Instant::now() < deadline, "the request was never taken");
        // Polling the folder against a deadline: the daemon announces nothing else.
        std::thread::sleep(Duration::from_millis(50));
    }
    rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await.expect("host");
        let filter = v1::TaskFilter { user_id: "baaaht-self-test".into(), ..Default::default() };
        let tasks = host.tasks.list_tasks(filter).await.expect("list").into_inner().tasks;
        let agents: Vec<&str> = tasks.iter().map(|task| task.agent.as_str()).collect();
        assert_eq!(agents, ["researcher"], "{tasks:?}");
        let request = v1::InboxRequest { context: Some(user("baaaht-self-test")), ..Default::default() };
        let inbox = host.sessions.list_inbox(request).await.expect("inbox").into_inner().items;
        assert!(
            inbox.iter().any(|item| item.content.contains("a coder can use edit_file, exec, which a worker cannot")),
            "the owner is told: {inbox:?}"
        );
    });
    drop(worker);
}

/// The Assistant, asked to resume a task, lists the tasks, resumes the paused one it finds
/// and says what the daemon said; anything else it echoes.
fn resuming_brain() -> Answer {
    Answer::Respond(Responder(Arc::new(|request| {
        let asked = Asked::of(request);
        if !scenario::last_user_text(&asked).contains("resume") {
            return anthropic_answer(&format!("echo: {}", scenario::last_user_text(&asked)), &[]);
        }
        match asked.turn_results.as_slice() {
            [] => anthropic_answer("", &[("toolu_list_1", "list_tasks", json!({}))]),
            [listed] => {
                let paused = listed.lines().find(|line| line.contains(" paused]")).unwrap_or_default();
                let id = paused.trim_start_matches("- ").split(' ').next().unwrap_or_default();
                anthropic_answer("", &[("toolu_resume_1", "resume_task", json!({"id": id}))])
            }
            [.., done] => anthropic_answer(&format!("Done: {done}"), &[]),
        }
    })))
}

#[test]
fn a_task_paused_in_the_web_settings_is_resumed_by_asking_on_slack() {
    use baaaht_tests::fake_slack::{gateway_for, slack_options, FakeSlack};
    use baaaht_tests::web::{self, click, screenshot, site_and_provider, text_of, until};
    use fantoccini::Locator;

    let rt = baaaht_tests::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let (web_port, site, provider) = site_and_provider(dir.path(), 3600);
    let slack = rt.block_on(FakeSlack::start("T0FAKE")).expect("fake slack");
    // Alice signs in on the web and writes on Slack: one person, one context.
    let web_alice = format!("web:{}#alice", provider.issuer);
    let identities =
        scenario::linked_identities(&[(&web_alice, "alice", "Alice"), ("slack:T0FAKE:U7", "alice", "Alice")]);
    let (_fake, daemon) = web::daemon_for(&rt, &provider, resuming_brain(), slack_options().env, vec![identities]);
    let (site_gateway, driver) = web::site_for(&rt, dir.path(), &daemon, &provider, web_port);
    let slack_gateway = gateway_for(&rt, &daemon, &slack);
    let logs = || format!("{}\n{}\n{}", site_gateway.log_text(), slack_gateway.log_text(), daemon.log_text());
    rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await.expect("host");
        let task = v1::TaskDefinition {
            user_id: "alice".into(),
            schedule: Some(v1::TaskSchedule { kind: Some(v1::task_schedule::Kind::Cron("0 9 * * *".into())) }),
            prompt: "Check the build and tell me if it is red.".into(),
            description: "Morning build check".into(),
            ..v1::TaskDefinition::default()
        };
        let id = host.tasks.schedule_task(task).await.expect("scheduled").into_inner().task.expect("task").id;
        let status = |host: &mut baaaht_proto::client::Client| {
            let mut host = host.clone();
            let id = id.clone();
            async move { host.tasks.get_task(v1::TaskId { id }).await.expect("task").into_inner().status }
        };

        // The web settings list it with its next run, and pause it.
        let alice = driver.browser(1280).await.expect("browser");
        web::sign_in(&alice, &site, "alice").await.unwrap_or_else(|error| panic!("{error:#}\n{}", logs()));
        click(&alice, "#settings-open").await;
        let row = format!("#task-list .task[data-id='{id}']");
        let listed = until(Duration::from_secs(20), || async {
            text_of(&alice, "#task-list").await.contains("Morning build check")
        })
        .await;
        assert!(listed, "{}\n{}", text_of(&alice, "#settings").await, logs());
        let shown = text_of(&alice, &row).await;
        assert!(shown.contains("yours · cron 0 9 * * * · active · next "), "{shown}");
        screenshot(&alice, dir.path(), "tasks-in-settings").await;
        click(&alice, &format!("{row} button[data-action=pause]")).await;
        let paused = until(Duration::from_secs(20), || async {
            alice.find(Locator::Css(&format!("{row}[data-status=paused] button[data-action=resume]"))).await.is_ok()
        })
        .await;
        assert!(paused, "{}\n{}", text_of(&alice, "#settings").await, logs());
        assert!(text_of(&alice, "#settings-status").await.contains(&format!("task {id} paused")));
        assert_eq!(status(&mut host).await, "paused");

        // On Slack she asks the assistant to resume it: it does, and says when it runs next.
        assert!(slack.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 1).await, "{}", logs());
        let dm = json!({"type": "message", "channel": "DU7", "channel_type": "im", "user": "U7",
            "text": "please resume my build check", "ts": "1760000400.000100"});
        slack.push_event(dm, "EvTask1", 0).expect("sent");
        let said = || baaaht_tests::fake_slack::shown_in(&slack, "DU7");
        let resumed = slack
            .wait_for(Duration::from_secs(120), |_| {
                said().iter().any(|text| text.contains(&format!("task {id} resumed")))
            })
            .await;
        assert!(resumed, "{:#?}\n{}", said(), logs());
        assert!(said().iter().any(|text| text.contains("next run")), "{:#?}", said());
        assert_eq!(status(&mut host).await, "active");

        // The settings show it running again.
        click(&alice, "#settings-close").await;
        click(&alice, "#settings-open").await;
        let active = until(Duration::from_secs(20), || async {
            alice.find(Locator::Css(&format!("{row}[data-status=active] button[data-action=pause]"))).await.is_ok()
        })
        .await;
        assert!(active, "{}", text_of(&alice, "#task-list").await);
        screenshot(&alice, dir.path(), "tasks-resumed").await;
    });
}

/// The Heartbeat agent finds that the school trip moved; the Assistant, asked to tell it,
/// tells it in its own words; anything else it echoes.
fn retelling_brain() -> Answer {
    Answer::Respond(Responder(Arc::new(|request| {
        let asked = Asked::of(request);
        let text = scenario::last_user_text(&asked);
        if text.starts_with("Heartbeat \"School mail\"") {
            anthropic_answer("school-mail: trip moved to friday (bus 08:10)", &[])
        } else if text.starts_with("Your heartbeat check \"School mail\"") && text.contains("trip moved to friday") {
            anthropic_answer("Hi Alice! Quick one: the school trip is on Friday now, bus at 08:10.", &[])
        } else {
            anthropic_answer(&format!("echo: {text}"), &[])
        }
    })))
}

#[test]
fn a_heartbeats_finding_reaches_slack_in_the_assistants_words() {
    use baaaht_tests::fake_slack::{gateway_for, slack_options, FakeSlack};

    let rt = baaaht_tests::runtime();
    let slack = rt.block_on(FakeSlack::start("T0FAKE")).expect("fake slack");
    let heartbeat = "## School mail\n- Cadence: hourly\n- Prompt: Check the school's mail for anything new.\n";
    let options = |fake: &FakeProvider, data_dir: Option<std::path::PathBuf>| {
        let mut options = scenario::options_for(fake);
        options.env.extend(slack_options().env);
        options.data_dir = data_dir;
        options.files.push(scenario::linked_identities(&[("slack:T0FAKE:U7", "alice", "Alice")]));
        options.files.push(("users/alice/HEARTBEAT.md".into(), heartbeat.into()));
        options.files.push(("users/alice/USER.md".into(), "# Alice\npreferred_channel: slack/dm\n".into()));
        options
    };
    let fake = rt.block_on(FakeProvider::start(vec![], Some(retelling_brain()))).expect("fake provider");
    let mut first = TestDaemon::start(options(&fake, None)).expect("daemon");
    let listed = || first.cli(&["tasks", "list", "--user", "alice", "--type", "heartbeat"]);
    wait_for(Duration::from_secs(10), "the heartbeat task", &first, || listed().contains("School mail"));
    first.signal("KILL").expect("kill -9");
    first.wait_exit(Duration::from_secs(10)).expect("dies");
    // Its drawn minute is up to an hour away: the test brings it to 40 s after the restart.
    let state = first.data_dir.join("data/state/scheduler.json");
    let mut book: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state).expect("scheduler.json")).expect("json");
    let soon = jiff::Timestamp::now().checked_add(jiff::SignedDuration::from_secs(40)).expect("a time");
    for task in book["tasks"].as_array_mut().into_iter().flatten() {
        if task["type"] == "heartbeat" {
            task["nextRun"] = json!(soon.to_string());
        }
    }
    std::fs::write(&state, serde_json::to_vec(&book).expect("json")).expect("write");
    let daemon = TestDaemon::start(options(&fake, Some(first.data_dir.clone()))).expect("restarts");
    let gateway = gateway_for(&rt, &daemon, &slack);
    let logs = || format!("{}\n{}", gateway.log_text(), daemon.log_text());
    let said = || baaaht_tests::fake_slack::shown_in(&slack, "DU7");
    rt.block_on(async {
        assert!(slack.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 1).await, "{}", logs());
        // Alice writes to the bot once: the gateway follows her from then on.
        let dm = json!({"type": "message", "channel": "DU7", "channel_type": "im", "user": "U7", "text": "hello",
            "ts": "1760000400.000100"});
        slack.push_event(dm, "EvHb1", 0).expect("sent");
        let answered =
            slack.wait_for(Duration::from_secs(60), |_| said().iter().any(|text| text == "echo: hello")).await;
        assert!(answered, "{:#?}\n{}", said(), logs());
        let told = slack
            .wait_for(Duration::from_secs(120), |_| {
                said().iter().any(|text| text.contains("the school trip is on Friday now, bus at 08:10"))
            })
            .await;
        assert!(told, "{:#?}\n{}", said(), logs());
    });
    // What reached her is the Assistant's message, not the Heartbeat agent's note.
    assert!(!said().iter().any(|text| text.contains("school-mail: trip moved")), "{:#?}", said());
    let runs = daemon.cli(&["tasks", "list", "--user", "alice", "--type", "heartbeat"]);
    assert!(runs.contains("School mail"), "{runs}");
}
