//! Agents end to end on the real binaries, a real engine and the fake provider as the model:
//! a user's message reaches the session's Assistant, which delegates to the Coder, whose tool
//! calls run in the session's tool container; the reply streams to the client and the session
//! log records the turn as a tree.

use std::time::Duration;

use baaaht_proto::v1;
use baaaht_tests::fake_provider::FakeProvider;
use baaaht_tests::scenario::{self, coder_brain, message, user, HELLO};
use baaaht_tests::DaemonOptions;
use serde_json::json;

#[test]
fn the_assistant_delegates_to_the_coder_and_the_reply_streams_back() {
    let rt = baaaht_tests::runtime();
    let (_fake, daemon) =
        scenario::start(&rt, coder_brain(), DaemonOptions::default()).expect("fake provider and daemon");
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let turn = scenario::turn(
            &mut client,
            message(user("alice"), "alice", "Write hello.sh and run it, please."),
            Duration::from_secs(120),
        )
        .await
        .unwrap_or_else(|error| panic!("{error:#}\n{}", daemon.log_text()));
        let reply = turn.reply.clone().unwrap_or_else(|| panic!("no reply: {:?}\n{}", turn.error, daemon.log_text()));
        assert!(reply.content.contains(HELLO), "{reply:?}");
        assert!(turn.streamed.contains("I'll ask the coder.") && turn.streamed.contains(HELLO), "{}", turn.streamed);

        use v1::orchestrator_event::Event;
        let delegations: Vec<&v1::DelegationProgress> = turn
            .events
            .iter()
            .filter_map(|e| match &e.event {
                Some(Event::Delegation(d)) => Some(d),
                _ => None,
            })
            .collect();
        assert_eq!(delegations.iter().map(|d| d.state.as_str()).collect::<Vec<_>>(), ["started", "finished"]);
        assert!(delegations.iter().all(|d| d.agent == v1::AgentRole::Coder as i32));
        let tools: Vec<&str> = turn
            .events
            .iter()
            .filter_map(|e| match &e.event {
                Some(Event::Tool(t)) => Some(t.tool.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(tools, ["write_file", "exec"]);
        let correlations: std::collections::BTreeSet<&str> =
            turn.events.iter().map(|e| e.correlation_id.as_str()).collect();
        assert_eq!(correlations.len(), 1, "one correlation id for the whole turn: {correlations:?}");

        // The session log: user message → delegate → reply, one branch.
        let transcript = client
            .sessions
            .read_session(v1::ReadSessionRequest {
                session_id: turn.session.clone(),
                leaf_entry_id: reply.entry_id.clone(),
            })
            .await
            .expect("ReadSession")
            .into_inner();
        assert!(transcript.problems.is_empty(), "{:?}", transcript.problems);
        let kinds: Vec<String> = transcript
            .entries
            .iter()
            .map(|entry| match &entry.entry {
                Some(v1::session_entry::Entry::Message(m)) => format!("message:{}", m.role),
                Some(v1::session_entry::Entry::Delegate(d)) => {
                    assert!(d.result.contains(HELLO), "{d:?}");
                    "delegate".into()
                }
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(kinds, ["message:user", "delegate", "message:assistant"]);
        let mut parent = turn.session.clone();
        for entry in &transcript.entries {
            assert_eq!(entry.parent, parent, "each entry hangs under the one before");
            parent = entry.id.clone();
        }
        let header = transcript.header.expect("header");
        assert_eq!((header.user_id.as_str(), header.status.as_str()), ("alice", "active"));
    });
    let script = daemon.data_dir.join("sessions").join(session_of(&daemon)).join("data/hello.sh");
    assert_eq!(
        std::fs::read_to_string(&script).expect("the coder's file is in the session's data folder"),
        format!("echo {HELLO}\n")
    );
}

fn session_of(daemon: &baaaht_tests::TestDaemon) -> String {
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(daemon.data_dir.join("data/state/sessions.json")).expect("session index"),
    )
    .expect("JSON");
    index["sessions"][0]["id"].as_str().expect("a session").to_string()
}

/// The last request to `fake` that contains `needle` (other agents, e.g. the Memory agent at
/// archival, may ask in between).
fn asked_with(fake: &FakeProvider, needle: &str) -> String {
    fake.requests()
        .into_iter()
        .rev()
        .find(|request| request.contains(needle))
        .unwrap_or_else(|| panic!("no request with {needle}"))
}

fn baaaht(daemon: &baaaht_tests::TestDaemon, args: &[&str]) -> std::process::Output {
    std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(args)
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht runs")
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn a_user_chats_as_themselves_and_the_terminal_obeys_nothing_the_model_writes() {
    let rt = baaaht_tests::runtime();
    let (_fake, daemon) =
        scenario::start(&rt, scenario::echo_brain(), DaemonOptions::default()).expect("fake provider and daemon");
    // The echo brain repeats what it is told: the reply carries OSC 52 (clipboard), OSC 0
    // (title), a screen clear and a carriage return that would rewrite the line.
    let hostile = "hi \x1b]52;c;aGVsbG8=\x07\x1b]0;pwned\x07\x1b[2J done\r\x1b[2Kforged";
    let chat = baaaht(&daemon, &["chat", "--user", "erin", hostile]);
    let (out, err) = (stdout(&chat), String::from_utf8_lossy(&chat.stderr).into_owned());
    assert!(chat.status.success(), "{out}{err}\n{}", daemon.log_text());
    assert!(!out.contains('\x1b') && !out.contains('\r') && !out.contains('\x07'), "{out:?}");
    assert_eq!(out, "echo: hi ^[]52;c;aGVsbG8=^G^[]0;pwned^G^[[2J done^M^[[2Kforged\n");
    assert!(!err.contains('\x1b'), "{err:?}");
    // --user alone is "as that user": the session is erin's.
    let listed = stdout(&baaaht(&daemon, &["sessions", "list", "--user", "erin"]));
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(listed.contains("user:erin"), "{listed}");
    let transcript = stdout(&baaaht(&daemon, &["sessions", "show", listed.split_whitespace().next().expect("id")]));
    assert!(transcript.contains("user (erin): hi ^[]52") && !transcript.contains('\x1b'), "{transcript}");
    // --as names who writes in a group, never another user.
    let refused = baaaht(&daemon, &["chat", "--user", "erin", "--as", "bob", "hello"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stdout(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

#[test]
fn a_group_talks_forks_archives_resumes_and_switches_model_from_the_cli() {
    let rt = baaaht_tests::runtime();
    let (fake, daemon) =
        scenario::start(&rt, scenario::echo_brain(), DaemonOptions::default()).expect("fake provider and daemon");

    // Two people in one group conversation.
    let first = baaaht(&daemon, &["chat", "--group", "family", "--as", "alice", "who is cooking tonight?"]);
    assert!(
        first.status.success(),
        "{}{}\n{}",
        stdout(&first),
        String::from_utf8_lossy(&first.stderr),
        daemon.log_text()
    );
    assert_eq!(stdout(&first), "echo: alice: who is cooking tonight?\n");
    let second = baaaht(&daemon, &["chat", "--group", "family", "--as", "bob", "I am"]);
    assert_eq!(stdout(&second), "echo: bob: I am\n", "{}", String::from_utf8_lossy(&second.stderr));
    let asked = fake.requests();
    assert!(
        asked.last().is_some_and(|r| r.contains("alice: who is cooking tonight?") && r.contains("bob: I am")),
        "the second turn sees the whole group conversation"
    );

    let list = stdout(&baaaht(&daemon, &["sessions", "list", "--group", "family"]));
    let session = list.split_whitespace().next().expect("one session").to_string();
    assert_eq!(list.lines().count(), 1, "{list}");
    // The session's tool container was started when it became active, before any tool call.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let running = baaaht_tests::docker(&[
            "ps",
            "--filter",
            &format!("label=baaaht.session={session}"),
            "--format",
            "{{.Names}}",
        ])
        .expect("docker ps");
        if running.lines().any(|name| name.starts_with("baaaht-tool-")) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no pre-warmed tool container: {running}\n{}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let shown = stdout(&baaaht(&daemon, &["sessions", "show", &session]));
    assert!(shown.contains("user (alice): who is cooking tonight?") && shown.contains("user (bob): I am"), "{shown}");

    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let read = |client: &mut baaaht_proto::client::Client, id: &str, leaf: &str| {
            let request = v1::ReadSessionRequest { session_id: id.into(), leaf_entry_id: leaf.into() };
            let mut client = client.clone();
            async move { client.sessions.read_session(request).await.expect("ReadSession").into_inner() }
        };
        let all = read(&mut client, &session, "").await;
        assert_eq!(all.entries.len(), 4, "{:#?}", all.entries);
        let first_reply = all.entries[1].id.clone();

        // A branch read and a fork from the first reply: the fork holds that branch only.
        assert_eq!(read(&mut client, &session, &first_reply).await.entries.len(), 2);
        let fork = client
            .sessions
            .fork_session(v1::ForkSessionRequest { session_id: session.clone(), entry_id: first_reply.clone() })
            .await
            .expect("fork")
            .into_inner();
        assert_ne!(fork.id, session);
        let forked = read(&mut client, &fork.id, "").await;
        assert_eq!(forked.entries.len(), 2);
        assert_eq!(forked.entries[0].parent, fork.id, "the branch hangs under the fork's header");
        let mut in_fork = message(scenario::group("family"), "carol", "what about tomorrow?");
        in_fork.session_id = fork.id.clone();
        let turn = scenario::turn(&mut client, in_fork, Duration::from_secs(60)).await.expect("turn in the fork");
        assert_eq!(turn.reply.expect("reply").content, "echo: carol: what about tomorrow?");
        let in_fork = asked_with(&fake, "what about tomorrow?");
        assert!(
            in_fork.contains("alice: who is cooking") && !in_fork.contains("bob: I am"),
            "the fork's turn sees its own branch only"
        );
        assert_eq!(read(&mut client, &session, "").await.entries.len(), 4, "the original is untouched");

        // Archive, refused while archived, resume, and the conversation continues.
        client.sessions.archive_session(v1::SessionRef { session_id: session.clone() }).await.expect("archive");
        let mut late = message(scenario::group("family"), "bob", "still there?");
        late.session_id = session.clone();
        let refused = client.sessions.send_user_message(late.clone()).await.expect_err("archived");
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
        assert!(refused.message().contains("archived: resume it first"), "{}", refused.message());
        let resumed =
            client.sessions.resume_session(v1::SessionRef { session_id: session.clone() }).await.expect("resume");
        assert_eq!(resumed.into_inner().status, "active");

        // A model switch is recorded and used from the next turn on.
        let switched = client
            .sessions
            .switch_model(v1::SwitchModelRequest { session_id: session.clone(), model: "anthropic/other-model".into() })
            .await
            .expect("switch");
        assert!(switched.into_inner().message.contains("anthropic/other-model"));
        let turn = scenario::turn(&mut client, late, Duration::from_secs(60)).await.expect("turn after resume");
        assert_eq!(turn.reply.expect("reply").content, "echo: bob: still there?");
        assert!(asked_with(&fake, "still there?").contains("\"model\":\"other-model\""), "the new model is asked");
        let all = read(&mut client, &session, "").await;
        let kinds: Vec<&str> = all
            .entries
            .iter()
            .map(|e| match &e.entry {
                Some(v1::session_entry::Entry::Message(m)) => m.role.as_str(),
                Some(v1::session_entry::Entry::ModelChange(_)) => "model_change",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["user", "assistant", "user", "assistant", "model_change", "user", "assistant"]);

        // Compaction: the branch becomes a summary for the model; the entries stay in the log.
        let compacted =
            client.sessions.compact_session(v1::SessionRef { session_id: session.clone() }).await.expect("compact");
        assert!(compacted.into_inner().message.contains("compacted"));
        let all = read(&mut client, &session, "").await;
        assert_eq!(all.entries.len(), 8, "nothing is removed");
        let Some(v1::session_entry::Entry::Compaction(compaction)) = &all.entries[7].entry else {
            panic!("the last entry is the compaction: {:?}", all.entries[7]);
        };
        assert_eq!(compaction.compacted_entry_ids.len(), 7);
        let mut after = message(scenario::group("family"), "alice", "and now?");
        after.session_id = session.clone();
        let turn = scenario::turn(&mut client, after, Duration::from_secs(60)).await.expect("turn after compaction");
        assert!(turn.reply.is_some(), "{:?}", turn.error);
        let last = asked_with(&fake, "and now?");
        assert!(last.contains("(A summary of the earlier conversation.)"), "the summary replaces the history: {last}");
        assert!(!last.contains("who is cooking tonight?"), "the compacted messages are not sent again");
    });
    let bad = baaaht(&daemon, &["sessions", "show", "../etc"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("is not a valid id"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// A client following alice's context, having sent "Ask the worker." (see `slow_worker_brain`).
async fn ask_the_worker(
    daemon: &baaaht_tests::TestDaemon,
) -> (baaaht_proto::client::Client, tonic::Streaming<v1::OrchestratorEvent>, v1::SendUserMessageResponse) {
    let mut client = scenario::host_client(daemon).await.expect("connect");
    let events = client
        .sessions
        .subscribe_events(v1::EventSubscription { context: Some(user("alice")), ..Default::default() })
        .await
        .expect("subscribe")
        .into_inner();
    let sent = client
        .sessions
        .send_user_message(message(user("alice"), "alice", "Ask the worker."))
        .await
        .expect("send")
        .into_inner();
    (client, events, sent)
}

/// Waits until the worker has asked the model (its slow answer is streaming); returns the
/// deadline the rest of the test keeps to.
async fn worker_asks_the_model(fake: &FakeProvider) -> tokio::time::Instant {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while fake.requests().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the worker never asked the model");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    deadline
}

#[test]
fn a_daemon_killed_during_a_delegation_ends_the_turn_with_a_message_and_leaves_no_container() {
    let rt = baaaht_tests::runtime();
    let (fake, mut daemon) = scenario::start(&rt, scenario::slow_worker_brain(), DaemonOptions::default())
        .expect("fake provider and daemon");
    let (session, agents) = rt.block_on(async {
        let (_client, mut events, sent) = ask_the_worker(&daemon).await;
        loop {
            let event = tokio::time::timeout(Duration::from_secs(60), events.message())
                .await
                .expect("the delegation starts")
                .expect("stream")
                .expect("event");
            if matches!(&event.event, Some(v1::orchestrator_event::Event::Delegation(d)) if d.state == "started") {
                break;
            }
        }
        // The worker is streaming its (slow) answer when the daemon dies.
        worker_asks_the_model(&fake).await;
        let agents: Vec<String> = daemon
            .recorded_containers()
            .into_iter()
            .filter(|name| name.starts_with("baaaht-assistant-") || name.starts_with("baaaht-worker-"))
            .collect();
        (sent.session_id, agents)
    });
    assert_eq!(agents.len(), 2, "an assistant and a worker: {agents:?}");
    daemon.signal("KILL").expect("kill -9");
    daemon.wait_exit(Duration::from_secs(10)).expect("dies");

    let restarted = baaaht_tests::TestDaemon::start(DaemonOptions {
        data_dir: Some(daemon.data_dir.clone()),
        ..scenario::options_for(&fake)
    })
    .expect("restarts");
    let shown = stdout(&baaaht(&restarted, &["sessions", "show", &session]));
    assert!(!shown.contains("unreadable"), "the session file is intact: {shown}");
    let last = shown.lines().last().unwrap_or_default();
    assert!(last.contains("system: The reply was interrupted: baaahtd stopped"), "{shown}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for name in &agents {
        while baaaht_tests::docker(&["ps", "-aq", "--filter", &format!("name=^{name}$")])
            .is_ok_and(|ids| !ids.trim().is_empty())
        {
            assert!(std::time::Instant::now() < deadline, "{name} was left behind:\n{}", restarted.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

const SECRET_SKILL: &str =
    "---\nname: secret-notes\ndescription: Alice's private notes.\n---\nThe safe's code is 4711.\n";

#[test]
fn another_users_agents_and_tools_cannot_reach_alices_session_files_or_skills() {
    let rt = baaaht_tests::runtime();
    let options = DaemonOptions {
        files: vec![("users/alice/skills/secret-notes/SKILL.md".into(), SECRET_SKILL.into())],
        ..DaemonOptions::default()
    };
    let (_fake, daemon) = scenario::start(&rt, coder_brain(), options).expect("fake provider and daemon");
    let alices = rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let turn =
            scenario::turn(&mut client, message(user("alice"), "alice", "hello.sh please"), Duration::from_secs(120))
                .await
                .expect("alice's turn");
        assert!(turn.reply.is_some(), "{:?}", turn.error);
        let manifest = client
            .skills
            .get_skill_manifest(v1::SkillManifestRequest { context: Some(user("alice")) })
            .await
            .expect("alice's manifest")
            .into_inner();
        assert!(manifest.skills.iter().any(|s| s.name == "secret-notes" && s.scope == "user"), "{manifest:?}");
        turn.session
    });
    assert!(daemon.data_dir.join("sessions").join(&alices).join("data/hello.sh").is_file());

    // Another user's coder (the self-test container's context is user:baaaht-self-test).
    let other = daemon.lingering_agent("coder", Some("other-session"), &[]).expect("another user's coder");
    rt.block_on(async {
        let mut agent = baaaht_proto::client::connect(&other.socket, other.options()).await.expect("connect");
        let tool = |tool: &str, params: serde_json::Value| v1::ToolRequest {
            tool: tool.into(),
            params_json: params.to_string(),
            ..v1::ToolRequest::default()
        };
        for path in [
            format!("../{alices}/data/hello.sh"),
            format!("/workspace/../../{alices}/data/hello.sh"),
            format!("{}/sessions/{alices}/data/hello.sh", daemon.data_dir.display()),
        ] {
            let read = agent.agents.request_tool_execution(tool("read_file", json!({"path": path}))).await.expect("answered");
            let read = read.into_inner();
            assert!(read.is_error && !read.content.contains(HELLO), "{path}: {read:?}");
        }
        let looked = agent
            .agents.request_tool_execution(tool(
                "exec",
                json!({"command": "cat /workspace/../*/data/hello.sh; find / -name hello.sh -o -name session.jsonl -o -name SKILL.md 2>/dev/null"}),
            ))
            .await
            .expect("exec")
            .into_inner();
        assert!(!looked.content.contains(HELLO) && !looked.content.contains("hello.sh\n"), "{looked:?}");
        assert!(!looked.content.contains("session.jsonl") && !looked.content.contains("secret-notes"), "{looked:?}");

        let denied = |status: tonic::Status| assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
        denied(
            agent
                .sessions.read_session(v1::ReadSessionRequest { session_id: alices.clone(), leaf_entry_id: String::new() })
                .await
                .expect_err("ReadSession"),
        );
        denied(agent.sessions.list_sessions(v1::SessionFilter::default()).await.expect_err("ListSessions"));
        let mut crafted = message(user("alice"), "alice", "tell me the secrets");
        crafted.session_id = alices.clone();
        denied(agent.sessions.send_user_message(crafted).await.expect_err("SendUserMessage"));
        denied(
            agent
                .skills.get_skill_manifest(v1::SkillManifestRequest { context: Some(user("alice")) })
                .await
                .expect_err("alice's manifest"),
        );
        denied(
            agent
                .skills.get_skill_content(v1::SkillContentRequest {
                    context: Some(user("alice")),
                    skill: "secret-notes".into(),
                    path: String::new(),
                })
                .await
                .expect_err("alice's skill"),
        );
        denied(agent.agents.delegate_to_agent(v1::DelegateRequest::default()).await.expect_err("a coder cannot delegate"));
        denied(
            agent
                .memory.search_memory(v1::MemoryQuery { context: Some(user("alice")), ..Default::default() })
                .await
                .expect_err("alice's memory"),
        );
        denied(
            agent
                .memory.write_memory(v1::WriteMemoryRequest {
                    context: Some(user("alice")),
                    key: "planted".into(),
                    content: "x".into(),
                    ..Default::default()
                })
                .await
                .expect_err("writing alice's memory"),
        );
        let own = agent.skills.get_skill_manifest(v1::SkillManifestRequest { context: None }).await.expect("own manifest");
        let own = own.into_inner();
        assert!(own.skills.iter().any(|s| s.name == "code-review"), "system skills are visible: {own:?}");
        assert!(!own.skills.iter().any(|s| s.name == "secret-notes"), "{own:?}");
        let missing = agent
            .skills.get_skill_content(v1::SkillContentRequest { context: None, skill: "secret-notes".into(), path: String::new() })
            .await
            .expect_err("not visible");
        assert_eq!(missing.code(), tonic::Code::NotFound);
        let escape = agent
            .skills.get_skill_content(v1::SkillContentRequest {
                context: None,
                skill: "code-review".into(),
                path: "../../users/alice/skills/secret-notes/SKILL.md".into(),
            })
            .await
            .expect_err("escape");
        assert_eq!(escape.code(), tonic::Code::PermissionDenied, "{escape:?}");
        let fine = agent
            .skills.get_skill_content(v1::SkillContentRequest { context: None, skill: "code-review".into(), path: String::new() })
            .await
            .expect("a visible skill's SKILL.md")
            .into_inner();
        assert!(fine.content.contains("name: code-review"));
    });
    drop(other);
}

#[test]
fn archiving_a_session_has_the_memory_agent_remember_and_the_next_session_knows() {
    let rt = baaaht_tests::runtime();
    let (fake, daemon) =
        scenario::start(&rt, scenario::memory_brain(), DaemonOptions::default()).expect("fake provider and daemon");
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let first = scenario::turn(
            &mut client,
            message(user("alice"), "alice", "I like jasmine tea."),
            Duration::from_secs(60),
        )
        .await
        .expect("first turn");
        assert!(first.reply.is_some(), "{:?}", first.error);
        client.sessions.archive_session(v1::SessionRef { session_id: first.session.clone() }).await.expect("archive");

        let memory = daemon.data_dir.join("users/alice/memory/favourite-tea.md");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !memory.is_file() {
            assert!(tokio::time::Instant::now() < deadline, "nothing remembered:\n{}", daemon.log_text());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The archived session's containers go (its pre-warmed tool container included).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let left =
                baaaht_tests::docker(&["ps", "-q", "--filter", &format!("label=baaaht.session={}", first.session)])
                    .expect("docker ps");
            if left.trim().is_empty() {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "containers of the archived session remain");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let text = std::fs::read_to_string(&memory).expect("memory file");
        assert!(text.contains("Alice likes jasmine tea."), "{text}");
        assert!(text.contains(&format!("sessionId: {}", first.session)) && text.contains("userId: alice"), "{text}");
        assert!(text.contains("source: agent:memory"), "{text}");

        let found = client
            .memory
            .search_memory(v1::MemoryQuery {
                context: Some(user("alice")),
                query: "jasmine".into(),
                ..Default::default()
            })
            .await
            .expect("search")
            .into_inner();
        assert_eq!(found.entries.len(), 1);
        assert_eq!(found.entries[0].session_id, first.session);
        let bobs = client
            .memory
            .search_memory(v1::MemoryQuery {
                context: Some(user("bob")),
                query: "jasmine".into(),
                ..Default::default()
            })
            .await
            .expect("search bob")
            .into_inner();
        assert!(bobs.entries.is_empty(), "another user's memory is their own");

        // A new session's Assistant knows.
        let second =
            scenario::turn(&mut client, message(user("alice"), "alice", "What do I like?"), Duration::from_secs(60))
                .await
                .expect("second turn");
        assert_ne!(second.session, first.session, "the archived session is not reused");
        let last = asked_with(&fake, "What do I like?");
        assert!(last.contains("favourite-tea: Alice likes jasmine tea."), "the memory is in the Assistant's context");
    });
}

#[test]
fn a_background_delegation_answers_at_once_and_its_result_arrives_later_as_a_message() {
    let rt = baaaht_tests::runtime();
    let (_fake, daemon) =
        scenario::start(&rt, scenario::background_brain(), DaemonOptions::default()).expect("fake provider and daemon");
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let mut events = client
            .sessions
            .subscribe_events(v1::EventSubscription { context: Some(user("alice")), ..Default::default() })
            .await
            .expect("subscribe")
            .into_inner();
        let turn = scenario::turn(
            &mut client,
            message(user("alice"), "alice", "Find out, no hurry."),
            Duration::from_secs(60),
        )
        .await
        .expect("turn");
        let reply = turn.reply.unwrap_or_else(|| panic!("{:?}", turn.error));
        assert!(
            reply.content.starts_with("I'll get back to you. The worker is working on it in the background"),
            "{reply:?}"
        );
        let later = loop {
            let event = tokio::time::timeout(Duration::from_secs(60), events.message())
                .await
                .expect("the result arrives")
                .expect("stream")
                .expect("event");
            if let Some(v1::orchestrator_event::Event::Message(message)) = event.event {
                break message;
            }
        };
        assert!(
            later.content.contains("The worker finished the background task") && later.content.contains("t0 t1 t2"),
            "{later:?}"
        );
        let transcript = client
            .sessions
            .read_session(v1::ReadSessionRequest { session_id: turn.session.clone(), leaf_entry_id: String::new() })
            .await
            .expect("read")
            .into_inner();
        let last = transcript.entries.last().expect("entries");
        let Some(v1::session_entry::Entry::Message(last)) = &last.entry else { panic!("{last:?}") };
        assert_eq!((last.role.as_str(), last.content.as_str()), ("assistant", later.content.as_str()));
        assert!(
            transcript.entries.iter().any(
                |e| matches!(&e.entry, Some(v1::session_entry::Entry::Delegate(d)) if d.result.contains("t0 t1 t2"))
            ),
            "the delegation is recorded"
        );
    });
}

#[test]
fn an_agent_reads_a_skill_it_sees_in_its_manifest() {
    let rt = baaaht_tests::runtime();
    let (fake, daemon) =
        scenario::start(&rt, scenario::skill_brain(), DaemonOptions::default()).expect("fake provider and daemon");
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let turn = scenario::turn(
            &mut client,
            message(user("alice"), "alice", "Summarise this page."),
            Duration::from_secs(60),
        )
        .await
        .expect("turn");
        let reply = turn.reply.unwrap_or_else(|| panic!("{:?}", turn.error));
        assert_eq!(reply.content, "The skill says name: summarize");
        let first = asked_with(&fake, "Summarise this page.");
        assert!(first.contains("- summarize: Summarises a web page"), "the manifest is in the system prompt");
        assert!(first.contains("\"name\":\"read_skill\""), "read_skill is offered");
    });
}

#[test]
fn a_message_sent_during_a_turn_waits_and_follows_that_turns_reply() {
    let rt = baaaht_tests::runtime();
    let (fake, daemon) =
        scenario::start(&rt, scenario::slow_echo_brain(), DaemonOptions::default()).expect("fake provider and daemon");
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let first = client
            .sessions
            .send_user_message(message(user("alice"), "alice", "first"))
            .await
            .expect("first")
            .into_inner();
        let mut second = message(user("alice"), "alice", "second");
        second.session_id = first.session_id.clone();
        let turn = scenario::turn(&mut client, second, Duration::from_secs(60)).await.expect("second turn");
        assert_eq!(turn.reply.expect("reply").content, "echo: second");
        let asked = asked_with(&fake, "second");
        assert!(asked.contains("echo: first"), "the second turn sees the first reply: {asked}");
        let transcript = client
            .sessions
            .read_session(v1::ReadSessionRequest { session_id: first.session_id.clone(), leaf_entry_id: String::new() })
            .await
            .expect("read")
            .into_inner();
        let contents: Vec<String> = transcript
            .entries
            .iter()
            .filter_map(|e| match &e.entry {
                Some(v1::session_entry::Entry::Message(m)) => Some(m.content.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(contents, ["first", "echo: first", "second", "echo: second"]);
        let mut parent = first.session_id.clone();
        for entry in &transcript.entries {
            assert_eq!(entry.parent, parent, "one chain, in order");
            parent = entry.id.clone();
        }
        assert_eq!(transcript.entries[2].id, turn.entry, "the id given out at once is the entry's");
    });
}

#[test]
fn sigterm_with_five_active_sessions_closes_their_streams_and_exits_at_once() {
    let rt = baaaht_tests::runtime();
    // Room for every session's Assistant and pre-warmed tool container (a pre-warm takes a slot
    // only while half of them are free).
    let options = DaemonOptions {
        files: vec![("config/config.yaml".into(), "container:\n  max_concurrent: 20\n".into())],
        ..DaemonOptions::default()
    };
    let (_fake, mut daemon) = scenario::start(&rt, scenario::echo_brain(), options).expect("fake provider and daemon");
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        // A client following events, as a terminal would.
        let _events = client
            .sessions
            .subscribe_events(v1::EventSubscription { context: Some(user("user-0")), ..Default::default() })
            .await
            .expect("subscribe")
            .into_inner();
        for index in 0..5 {
            let id = format!("user-{index}");
            let turn = scenario::turn(&mut client, message(user(&id), &id, "hello"), Duration::from_secs(120))
                .await
                .expect("a turn");
            assert!(turn.reply.is_some(), "{:?}", turn.error);
        }
    });
    // Each session's Assistant waits for its next turn, its tool container is warm.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while daemon.recorded_containers().iter().filter(|name| name.starts_with("baaaht-tool-")).count() < 5 {
        assert!(std::time::Instant::now() < deadline, "the tool containers did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let containers = daemon.recorded_containers();
    assert!(containers.len() >= 10, "{containers:?}");
    let started = std::time::Instant::now();
    daemon.signal("TERM").expect("SIGTERM");
    let status = daemon.wait_exit(Duration::from_secs(20)).expect("exits");
    let took = started.elapsed();
    println!("SIGTERM to exit with 5 active sessions ({} containers): {} ms", containers.len(), took.as_millis());
    assert!(status.success(), "{status}\n{}", daemon.log_text());
    assert!(!daemon.log_text().contains("cut off"), "a stream held the drain:\n{}", daemon.log_text());
    for name in &containers {
        let left = baaaht_tests::docker(&["ps", "-aq", "--filter", &format!("name=^{name}$")]).expect("docker ps");
        assert!(left.trim().is_empty(), "{name} is left");
    }
    assert!(!daemon.socket().exists(), "the socket is left");
    let sockets: Vec<_> = std::fs::read_dir(daemon.data_dir.join("data/run")).expect("run folder").collect();
    assert!(sockets.is_empty(), "container sockets are left: {sockets:?}");
}

#[test]
fn a_turn_cancelled_during_a_delegation_stops_its_agents_and_the_session_says_so() {
    let rt = baaaht_tests::runtime();
    let (fake, daemon) = scenario::start(&rt, scenario::slow_worker_brain(), DaemonOptions::default())
        .expect("fake provider and daemon");
    rt.block_on(async {
        let (mut client, mut events, sent) = ask_the_worker(&daemon).await;
        let deadline = worker_asks_the_model(&fake).await;
        // Status shows the turn's containers with what the engine measures of them.
        let status =
            client.system.get_status(v1::StatusRequest { containers: true }).await.expect("status").into_inner();
        let worker = status.containers.iter().find(|c| c.role == "worker").expect("the worker's container is listed");
        assert_eq!((worker.session_id.as_str(), worker.context.as_str()), (sent.session_id.as_str(), "user:alice"));
        assert!(worker.memory_bytes > 0 && worker.memory_limit_bytes >= worker.memory_bytes, "{worker:?}");
        let cancel = v1::CancelTurnRequest { session_id: sent.session_id.clone(), turn_id: sent.turn_id.clone() };
        let ack = client.sessions.cancel_turn(cancel.clone()).await.expect("cancel").into_inner();
        assert_eq!(ack.message, format!("cancelled {}", sent.turn_id));
        // The turn ends at once (the worker had a minute of answer left), with the reason.
        let ended = loop {
            let event = tokio::time::timeout(Duration::from_secs(20), events.message())
                .await
                .expect("the turn ends soon after its cancellation")
                .expect("stream")
                .expect("event");
            match event.event {
                Some(v1::orchestrator_event::Event::Error(error)) => break error.message,
                Some(v1::orchestrator_event::Event::Reply(reply)) => panic!("a reply after cancelling: {reply:?}"),
                _ => {}
            }
        };
        assert_eq!(ended, "The turn was cancelled.");
        // Its agents are stopped: the worker's answer is abandoned half way.
        while fake.abandoned() == 0 {
            assert!(tokio::time::Instant::now() < deadline, "the worker's model call went on");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for prefix in ["baaaht-assistant-", "baaaht-worker-"] {
            for name in daemon.recorded_containers().into_iter().filter(|name| name.starts_with(prefix)) {
                while baaaht_tests::docker(&["ps", "-q", "--filter", &format!("name=^{name}$")])
                    .is_ok_and(|ids| !ids.trim().is_empty())
                {
                    assert!(tokio::time::Instant::now() < deadline, "{name} still runs");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        let shown = stdout(&baaaht(&daemon, &["sessions", "show", &sent.session_id]));
        assert!(shown.lines().last().unwrap_or_default().contains("system: The turn was cancelled."), "{shown}");
        // Nothing is left to cancel.
        let again = client.sessions.cancel_turn(cancel).await.expect_err("the turn is over");
        assert_eq!(again.code(), tonic::Code::FailedPrecondition);
        assert!(again.message().contains("has finished"), "{}", again.message());
    });
}

/// Fourteen people ask at once for what needs a Coder and its tool container, at a cap of six
/// containers: every turn is answered (turns wait for a place before their Assistant starts,
/// so the Assistants never hold every slot while their Coders queue). The queue waits long
/// enough for seven rounds of turns on a loaded host: what is tested is that none is stuck.
#[test]
fn at_the_container_cap_every_turn_of_many_at_once_is_answered() {
    let rt = baaaht_tests::runtime();
    let config = "container:\n  max_concurrent: 6\n  queue_timeout: 180\n";
    let options =
        DaemonOptions { files: vec![("config/config.yaml".into(), config.into())], ..DaemonOptions::default() };
    let (_fake, daemon) = scenario::start(&rt, coder_brain(), options).expect("fake provider and daemon");
    let outcomes = rt.block_on(async {
        let mut asked = tokio::task::JoinSet::new();
        for n in 0..14 {
            let socket = daemon.socket();
            asked.spawn(async move {
                let mut client = baaaht_proto::client::connect(&socket, Default::default()).await.expect("connect");
                let who = format!("person{n}");
                let message = message(user(&who), &who, "Write hello.sh and run it, please.");
                scenario::turn(&mut client, message, Duration::from_secs(240)).await
            });
        }
        let mut outcomes = vec![];
        while let Some(joined) = asked.join_next().await {
            outcomes.push(joined.expect("the turn's task"));
        }
        outcomes
    });
    let answered = outcomes
        .iter()
        .filter(|outcome| {
            outcome.as_ref().is_ok_and(|turn| turn.reply.as_ref().is_some_and(|r| r.content.contains(HELLO)))
        })
        .count();
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            Ok(turn) if turn.reply.as_ref().is_some_and(|r| r.content.contains(HELLO)) => None,
            Ok(turn) => Some(format!("{:?} {:?}", turn.error, turn.reply)),
            Err(error) => Some(format!("{error:#}")),
        })
        .collect();
    assert_eq!(answered, 14, "{failed:?}\n{}", daemon.log_text());
}

/// A daemon whose every agent uses `custom/fake-model` on `fake` (llama.cpp's wire), answering
/// each request with 300 words (about 450 tokens as the fake counts them); the gateway a host
/// child.
fn small_local_model(
    rt: &tokio::runtime::Runtime,
    tokens: usize,
    tells: bool,
) -> (FakeProvider, baaaht_tests::TestDaemon) {
    use baaaht_tests::fake_provider::{words_stream, Wire};
    let answer = "lorem ".repeat(300);
    let fake = rt
        .block_on(FakeProvider::start(vec![], Some(words_stream(Wire::OpenAi, &answer, Duration::ZERO))))
        .expect("fake provider");
    fake.limit_context(tokens, tells);
    let providers =
        format!("providers:\n  custom:\n    - name: custom\n      api_base: {}\n", fake.api_base(Wire::OpenAi));
    let daemon = baaaht_tests::TestDaemon::start(DaemonOptions {
        env: vec![("BAAAHT__LLM__GATEWAY".into(), "process".into())],
        files: vec![
            ("config/providers.yaml".into(), providers),
            ("config/config.yaml".into(), "agents:\n  default_model: custom/fake-model\n".into()),
        ],
        ..DaemonOptions::default()
    })
    .expect("daemon starts");
    (fake, daemon)
}

/// Sends `count` messages in one session of alice's; every one must be answered. The session.
async fn converse(daemon: &baaaht_tests::TestDaemon, count: usize) -> (baaaht_proto::client::Client, String) {
    let mut client = scenario::host_client(daemon).await.expect("connect");
    let mut session = String::new();
    for index in 0..count {
        let mut next = message(user("alice"), "alice", &format!("tell me more, part {index}"));
        next.session_id = session.clone();
        let turn = scenario::turn(&mut client, next, Duration::from_secs(120))
            .await
            .unwrap_or_else(|error| panic!("{error:#}\n{}", daemon.log_text()));
        assert!(turn.reply.is_some(), "message {index} was not answered: {:?}\n{}", turn.error, daemon.log_text());
        session = turn.session;
    }
    (client, session)
}

/// The compactions in `session`'s log.
async fn compactions(client: &mut baaaht_proto::client::Client, session: &str) -> usize {
    let all = client
        .sessions
        .read_session(v1::ReadSessionRequest { session_id: session.into(), leaf_entry_id: String::new() })
        .await
        .expect("read")
        .into_inner();
    all.entries.iter().filter(|e| matches!(e.entry, Some(v1::session_entry::Entry::Compaction(_)))).count()
}

#[test]
fn a_small_local_models_window_is_learnt_from_its_server_and_the_session_compacted_in_time() {
    let rt = baaaht_tests::runtime();
    // llama.cpp's server with a 3000-token context, which it tells at /props; by its name alone
    // the model would be taken for one of 32,000.
    let (fake, daemon) = small_local_model(&rt, 3000, true);
    rt.block_on(async {
        let (mut client, session) = converse(&daemon, 5).await;
        assert!(
            compactions(&mut client, &session).await >= 1,
            "compacted before the window filled\n{}",
            daemon.log_text()
        );
    });
    assert_eq!(fake.refused_as_too_long(), 0, "no request was ever too long for the server");
    assert!(fake.requests().iter().any(|request| request.starts_with("GET /props ")), "the server was asked");
}

#[test]
fn a_session_whose_history_outgrows_an_unknown_window_is_compacted_and_answered_never_stuck() {
    let rt = baaaht_tests::runtime();
    // A server that refuses what does not fit its 1200 tokens and does not say so beforehand.
    let (fake, daemon) = small_local_model(&rt, 1200, false);
    rt.block_on(async {
        let (mut client, session) = converse(&daemon, 6).await;
        assert!(compactions(&mut client, &session).await >= 1, "{}", daemon.log_text());
    });
    assert!(fake.refused_as_too_long() >= 1, "the server did refuse a request as too long");
}

/// `baaaht chat ARGS` started against `daemon`, its standard output gathered as it comes.
fn chat_in_background(
    daemon: &baaaht_tests::TestDaemon,
    args: &[&str],
) -> (std::process::Child, std::sync::Arc<std::sync::Mutex<String>>) {
    use std::io::Read as _;
    let mut child = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .arg("chat")
        .args(args)
        .env("BAAAHT_SOCKET", daemon.socket())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("baaaht chat");
    let shown = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (mut out, gathered) = (child.stdout.take().expect("stdout"), shown.clone());
    std::thread::spawn(move || {
        let mut buffer = [0u8; 256];
        while let Ok(read) = out.read(&mut buffer) {
            if read == 0 {
                break;
            }
            gathered.lock().expect("gathered").push_str(&String::from_utf8_lossy(&buffer[..read]));
        }
    });
    (child, shown)
}

/// Waits up to `limit` for `condition`, else panics with `what`.
fn wait_until(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ctrl_c_in_baaaht_chat_stops_the_turn_and_the_session_keeps_what_was_written() {
    use baaaht_tests::fake_provider::{words_stream, Wire};
    let rt = baaaht_tests::runtime();
    // The model writes forty words, a word every 250 ms: ten seconds to the end.
    let story: String = (1..=40).map(|n| format!("word{n} ")).collect();
    let (fake, daemon) = scenario::start(
        &rt,
        words_stream(Wire::Anthropic, &story, Duration::from_millis(250)),
        DaemonOptions::default(),
    )
    .expect("fake provider and daemon");
    let (mut first, shown) = chat_in_background(&daemon, &["--user", "alice", "--new", "tell me a story"]);
    wait_until(Duration::from_secs(60), "the answer began", || shown.lock().expect("shown").contains("word3 "));
    // Meanwhile a second message in the same session is told what it waits for.
    let session = {
        let listed = stdout(&baaaht(&daemon, &["sessions", "list", "--user", "alice"]));
        listed.split_whitespace().next().expect("a session").to_string()
    };
    let (mut second, _) = chat_in_background(&daemon, &["--user", "alice", "--session", &session, "and then?"]);
    std::process::Command::new("kill").args(["-INT", &first.id().to_string()]).status().expect("kill -INT");
    let started = std::time::Instant::now();
    let ended = first.wait().expect("the first chat ends");
    let mut said = String::new();
    std::io::Read::read_to_string(&mut first.stderr.take().expect("stderr"), &mut said).expect("stderr");
    assert_eq!(ended.code(), Some(130), "{said}");
    assert!(started.elapsed() < Duration::from_secs(8), "it stopped at once, not at the answer's end");
    assert!(said.contains("stopping the turn") && said.contains(&format!("baaaht sessions show {session}")), "{said}");
    // The model was let go half way, and the session keeps what was written, marked.
    wait_until(Duration::from_secs(10), "the model's answer was abandoned", || fake.abandoned() > 0);
    let log = stdout(&baaaht(&daemon, &["sessions", "show", &session]));
    assert!(log.contains("assistant: word1 word2 word3") && log.contains("\n[stopped]\n"), "{log}");
    assert!(!log.contains("word40") && !log.contains("The turn was cancelled."), "{log}");
    // The second message's turn then runs, and was told it waited.
    let ended = second.wait().expect("the second chat ends");
    let mut said = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().expect("stderr"), &mut said).expect("stderr");
    assert!(
        said.contains("waiting for the answer in progress in this session; Ctrl-C withdraws this message"),
        "{said}"
    );
    assert!(ended.success(), "{said}\n{}", daemon.log_text());
}

#[test]
fn archiving_a_group_session_keeps_its_memory_in_the_groups_memory_waiting_for_review() {
    let rt = baaaht_tests::runtime();
    let (_fake, daemon) =
        scenario::start(&rt, scenario::memory_brain(), DaemonOptions::default()).expect("fake provider and daemon");
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let family = v1::CreateGroupRequest {
            id: "family".into(),
            name: "Family".into(),
            members: vec!["alice".into(), "bob".into()],
        };
        client.admin.create_group(family).await.expect("the family group");
        let group = scenario::group("family");
        let first = scenario::turn(
            &mut client,
            message(group.clone(), "alice", "We like jasmine tea."),
            Duration::from_secs(60),
        )
        .await
        .expect("alice's turn");
        assert!(first.reply.is_some(), "{:?}", first.error);
        let second =
            scenario::turn(&mut client, message(group.clone(), "bob", "And green tea."), Duration::from_secs(60))
                .await
                .expect("bob's turn");
        assert_eq!(second.session, first.session, "one conversation of the group");
        client.sessions.archive_session(v1::SessionRef { session_id: first.session.clone() }).await.expect("archive");

        // Kept by the group, not by either member; written from every member's words, so it
        // waits for review before the group's Assistant uses it.
        let waiting = daemon.data_dir.join("groups/family/memory/quarantine/favourite-tea.md");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !waiting.is_file() {
            assert!(tokio::time::Instant::now() < deadline, "nothing remembered:\n{}", daemon.log_text());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let text = std::fs::read_to_string(&waiting).expect("memory file");
        assert!(text.contains("Alice likes jasmine tea.") && text.contains("origin: untrusted"), "{text}");
        assert!(text.contains(&format!("sessionId: {}", first.session)), "{text}");
        for member in ["alice", "bob"] {
            let own = daemon.data_dir.join(format!("users/{member}/memory"));
            let kept: Vec<_> = std::fs::read_dir(&own).map(|dir| dir.flatten().collect()).unwrap_or_default();
            assert!(
                kept.iter().all(|entry| !entry.file_name().to_string_lossy().contains("tea")),
                "{member}: {kept:?}"
            );
        }
        let query = |quarantined| v1::MemoryQuery {
            context: Some(group.clone()),
            limit: 10,
            quarantined,
            ..Default::default()
        };
        let used = client.memory.search_memory(query(false)).await.expect("search").into_inner().entries;
        assert!(used.is_empty(), "not used before review: {used:?}");
        let waiting = client.memory.search_memory(query(true)).await.expect("search").into_inner().entries;
        assert_eq!(waiting.len(), 1, "{waiting:?}");
    });
}
