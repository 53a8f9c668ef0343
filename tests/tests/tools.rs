//! Tool calls on the real daemon with a real engine: an agent container (a lingering coder
//! self-test container, with its own socket and token) calls RequestToolExecution; the daemon
//! runs the calls in the session's warm tool container through its resident runner.

use std::time::Duration;

use baaaht_proto::client::{self, Client};
use baaaht_proto::v1;
use baaaht_tests::{docker, DaemonOptions, LingeringAgent, TestDaemon};
use serde_json::json;

fn call(tool: &str, params: serde_json::Value) -> v1::ToolRequest {
    v1::ToolRequest { tool: tool.into(), params_json: params.to_string(), ..v1::ToolRequest::default() }
}

async fn run(agent: &mut Client, tool: &str, params: serde_json::Value) -> v1::ToolResponse {
    agent
        .agents
        .request_tool_execution(call(tool, params))
        .await
        .unwrap_or_else(|status| panic!("{tool}: {status:?}"))
        .into_inner()
}

#[test]
fn a_coders_calls_run_in_its_sessions_warm_tool_container_and_stay_there() {
    let rt = baaaht_tests::runtime();
    // A server on the host's bridge address that no tool may reach.
    let (listener, accepted) = rt.block_on(async {
        let listener =
            tokio::net::TcpListener::bind((baaaht_tests::bridge_address().expect("the bridge network exists"), 0))
                .await
                .expect("bind");
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        (listener, accepted)
    });
    let probe = listener.local_addr().expect("address");
    let counter = accepted.clone();
    rt.spawn(async move {
        while listener.accept().await.is_ok() {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder container");

    rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect as the coder");

        // Write, run and read back, in the session's data folder.
        let wrote = run(&mut agent, "write_file", json!({"path": "src/hello.py", "content": "print('hello from the tool container')\n"})).await;
        assert!(!wrote.is_error, "{}", wrote.content);
        let ran = run(&mut agent, "exec", json!({"command": "python3 src/hello.py && id -u"})).await;
        assert_eq!(ran.content, "exit code 0\n--- stdout ---\nhello from the tool container\n1000\n", "{ran:?}");
        let read = run(&mut agent, "read_file", json!({"path": "/workspace/src/hello.py"})).await;
        assert_eq!(read.content, "     1\tprint('hello from the tool container')\n");
        let on_host = daemon.data_dir.join("sessions/self-test/data/src/hello.py");
        assert!(on_host.is_file(), "{} is missing", on_host.display());

        // A call that changes something is kept for an agent that asks again; one that only
        // reads is not (run again, it changes nothing).
        for (tool, id, params) in [
            ("write_file", "toolu_kept_1", json!({"path": "kept.txt", "content": "kept\n"})),
            ("read_file", "toolu_read_1", json!({"path": "kept.txt"})),
        ] {
            let asked = v1::ToolRequest { tool_call_id: id.into(), ..call(tool, params) };
            let answer = agent.agents.request_tool_execution(asked).await.expect(tool).into_inner();
            assert!(!answer.is_error, "{}", answer.content);
        }
        let records = daemon.data_dir.join("data/state/tool-results/user-baaaht-self-test");
        let results = daemon.data_dir.join("data/ipc/user-baaaht-self-test/coder-self-test/results");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !records.join("toolu_kept_1.json").is_file() {
            assert!(std::time::Instant::now() < deadline, "the write's result was not recorded");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!records.join("toolu_read_1.json").exists() && !results.join("toolu_read_1.json").exists());

        // Nothing a call starts outlives it, however it detaches.
        let started = run(&mut agent, "exec", json!({"command": "sleep 301 & setsid sleep 302 & nohup sleep 303 >/dev/null 2>&1 & echo started"})).await;
        assert!(started.content.contains("started"), "{started:?}");
        let left = run(&mut agent, "exec", json!({"command": "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"})).await;
        assert!(!left.content.contains("sleep 30"), "a process outlived its call:\n{}", left.content);

        // A command cannot read the runner's credentials or environment (written so that the
        // blocked patterns do not catch it: the container itself must refuse).
        let snoop = run(&mut agent, "exec", json!({"command": "f=/proc/1/en; cat ${f}viron; echo \"[$BAAAHT_CONTAINER_TOKEN]\"; ls -l /proc/1/fd 2>&1 | head -3"})).await;
        // Under runc the runner's /proc entries are closed (non-dumpable); gVisor's kernel shows
        // its environment, which no longer holds the token (the runner started itself again
        // without it). Either way no command sees the token.
        assert!(!snoop.content.contains(baaaht_proto::CONTAINER_TOKEN_ENV), "{}", snoop.content);
        assert!(snoop.content.contains("[]"), "{}", snoop.content);
        let gvisor = daemon.log_text().contains(r#""gvisor":"coder, tool, mcp""#);
        assert!(gvisor || snoop.content.contains("Permission denied"), "{}", snoop.content);

        // Escapes are refused, also through a symlink the tool itself made.
        run(&mut agent, "exec", json!({"command": "ln -s / root-link"})).await;
        for (params, says) in [
            (json!({"path": "../../etc/passwd"}), "`..` is not allowed"),
            (json!({"path": "/etc/passwd"}), "outside the mounted folders"),
            (json!({"path": "root-link/etc/passwd"}), "leads outside the mounted folders"),
        ] {
            let refused = run(&mut agent, "read_file", params).await;
            assert!(refused.is_error && refused.content.contains(says), "{}", refused.content);
        }

        // No network, even from code that avoids the blocked patterns.
        let script = format!("import socket\ntry:\n    socket.create_connection(('{}', {}), 3)\n    print('connected')\nexcept OSError as error:\n    print('refused', error)\n", probe.ip(), probe.port());
        run(&mut agent, "write_file", json!({"path": "probe.py", "content": script})).await;
        let probed = run(&mut agent, "exec", json!({"command": "python3 probe.py"})).await;
        assert!(probed.content.contains("refused"), "{}", probed.content);

        // Policy: blocked commands and other roles' tools.
        let status = agent.agents.request_tool_execution(call("exec", json!({"command": "nc example.com 80"}))).await.expect_err("blocked");
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
        let status = agent.agents.request_tool_execution(call("web_fetch", json!({"url": "http://example.com"}))).await.expect_err("not a coder tool");
        assert!(status.message().contains("the coder role may not use `web_fetch`"), "{status:?}");
    });
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0, "a tool reached the host");
    // One warm tool container served every call of the session.
    let tool_containers: Vec<String> =
        daemon.recorded_containers().into_iter().filter(|name| name.starts_with("baaaht-tool-")).collect();
    assert_eq!(tool_containers.len(), 1, "{tool_containers:?}");
    drop(coder);
}

#[test]
fn in_cold_mode_each_call_gets_a_fresh_container_that_is_removed() {
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(DaemonOptions {
        env: vec![("BAAAHT__TOOLS__MODE".into(), "cold".into())],
        ..Default::default()
    })
    .expect("daemon starts");
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder container");
    rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect as the coder");
        let wrote =
            run(&mut agent, "write_file", json!({"path": "cold.txt", "content": "kept in the session\n"})).await;
        assert!(!wrote.is_error, "{}", wrote.content);
        let ran = run(&mut agent, "exec", json!({"command": "cat cold.txt; sleep 300 &"})).await;
        assert_eq!(ran.content, "exit code 0\n--- stdout ---\nkept in the session\n", "{ran:?}");
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while daemon.recorded_containers().iter().any(|name| name.starts_with("baaaht-tool-")) {
        assert!(std::time::Instant::now() < deadline, "cold tool containers were not removed");
        // Polling the inventory against a deadline: removal happens after the answer.
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(daemon.log_text().matches("tool runner ready").count(), 2, "one container per call");
    drop(coder);
}

/// A lingering coder container and a client that calls as it.
fn coder(daemon: &TestDaemon, rt: &tokio::runtime::Runtime) -> (LingeringAgent, Client) {
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder container");
    let agent = rt.block_on(client::connect(&coder.socket, coder.options())).expect("connect as the coder");
    (coder, agent)
}

#[test]
fn a_result_written_while_the_daemon_was_down_is_delivered_once_after_a_restart() {
    let rt = baaaht_tests::runtime();
    let mut daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let (first, mut agent) = coder(&daemon, &rt);
    let first_name = first.name.clone();
    let request = v1::ToolRequest {
        tool: "exec".into(),
        params_json: json!({"command": "echo run >> runs.txt; sleep 3; echo finished"}).to_string(),
        tool_call_id: "toolu_crash_1".into(),
        ..v1::ToolRequest::default()
    };
    let pending = {
        let request = request.clone();
        let mut agent = agent.clone();
        rt.spawn(async move { agent.agents.request_tool_execution(request).await })
    };
    let runs = daemon.data_dir.join("sessions/self-test/data/runs.txt");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !runs.exists() {
        assert!(std::time::Instant::now() < deadline, "the call did not start:\n{}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    // The daemon dies while the call runs; the runner still writes its result.
    daemon.signal("KILL").expect("kill -9");
    daemon.wait_exit(Duration::from_secs(10)).expect("dies");
    assert!(rt.block_on(pending).expect("join").is_err(), "the caller saw the daemon go");
    let result = daemon.data_dir.join("data/ipc/user-baaaht-self-test/coder-self-test/results/toolu_crash_1.json");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !result.exists() {
        assert!(std::time::Instant::now() < deadline, "no result file was written");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(first);

    let restarted = TestDaemon::start(DaemonOptions { data_dir: Some(daemon.data_dir.clone()), ..Default::default() })
        .expect("restarts");
    assert!(
        restarted.log_text().contains("collected tool results left from before a restart"),
        "{}",
        restarted.log_text()
    );
    assert!(!result.exists(), "the result file was collected");
    // The dead daemon's self-test container is removed by the new one's reconcile.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while docker(&["ps", "-aq", "--filter", &format!("name=^{first_name}$")]).is_ok_and(|ids| !ids.trim().is_empty()) {
        assert!(std::time::Instant::now() < deadline, "{first_name} was not removed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (second, agent_again) = coder(&restarted, &rt);
    agent = agent_again;
    for _ in 0..2 {
        let answer = rt.block_on(agent.agents.request_tool_execution(request.clone())).expect("answered").into_inner();
        assert_eq!(answer.content, "exit code 0\n--- stdout ---\nfinished\n");
        assert_eq!(std::fs::read_to_string(&runs).expect("runs"), "run\n", "the command ran once");
    }
    drop(second);
}

#[test]
fn a_session_never_sees_another_sessions_workspace() {
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let mut agents = vec![];
    let mut names: Vec<String> = vec![];
    for session in ["session-a", "session-b"] {
        let lingering = daemon.lingering_agent("coder", Some(session), &names).expect("coder container");
        let client = rt.block_on(client::connect(&lingering.socket, lingering.options())).expect("connect");
        names.push(lingering.name.clone());
        agents.push((lingering, client));
    }
    rt.block_on(async {
        let (a, b) = agents.split_at_mut(1);
        let (alice, bob) = (&mut a[0].1, &mut b[0].1);
        run(alice, "write_file", json!({"path": "secret.txt", "content": "session A only\n"})).await;
        for (tool, params) in [
            ("read_file", json!({"path": "secret.txt"})),
            ("read_file", json!({"path": "../../session-a/data/secret.txt"})),
            ("read_file", json!({"path": "/workspace/../../session-a/data/secret.txt"})),
            ("grep", json!({"pattern": "session A", "path": "/"})),
            ("find", json!({"pattern": "secret.txt"})),
            (
                "exec",
                json!({"command": "cat secret.txt /workspace/secret.txt; ls -R / 2>/dev/null | grep -c secret.txt"}),
            ),
        ] {
            let seen = run(bob, tool, params.clone()).await;
            assert!(!seen.content.contains("session A only"), "{tool} {params}: {}", seen.content);
            if tool == "find" {
                assert!(seen.content.starts_with("no file"), "{}", seen.content);
            }
        }
        let own = run(alice, "read_file", json!({"path": "secret.txt"})).await;
        assert_eq!(own.content, "     1\tsession A only\n");
    });
    let tool_containers: Vec<String> =
        daemon.recorded_containers().into_iter().filter(|name| name.starts_with("baaaht-tool-")).collect();
    assert_eq!(tool_containers.len(), 2, "one tool container per session: {tool_containers:?}");
    drop(agents);
}

#[test]
fn a_coder_gets_the_allowlisted_projects_and_no_one_else_does() {
    let rt = baaaht_tests::runtime();
    let projects = baaaht_tests::Projects::new().expect("the projects");
    let (site, reference) = (&projects.site, &projects.reference);
    let daemon = TestDaemon::start(DaemonOptions {
        files: vec![("config/mount-allowlist.json".into(), projects.allowlist.clone())],
        ..Default::default()
    })
    .expect("daemon starts");
    let (coder_container, mut coder_agent) = coder(&daemon, &rt);
    let worker_container = daemon.lingering_agent("worker", None, &[]).expect("worker container");
    let mut worker = rt
        .block_on(client::connect(&worker_container.socket, worker_container.options()))
        .expect("connect as the worker");
    rt.block_on(async {
        let read = run(&mut coder_agent, "read_file", json!({"path": "/project/site/index.html"})).await;
        assert_eq!(read.content, "     1\t<h1>site</h1>\n");
        let wrote = run(
            &mut coder_agent,
            "write_file",
            json!({"path": "/project/site/new.txt", "content": "from the coder\n"}),
        )
        .await;
        assert!(!wrote.is_error, "{}", wrote.content);
        let refused =
            run(&mut coder_agent, "write_file", json!({"path": "/project/reference/x.txt", "content": "x"})).await;
        assert!(refused.is_error && refused.content.contains("read-only"), "{}", refused.content);
        let outside = run(&mut worker, "read_file", json!({"path": "/project/site/index.html"})).await;
        assert!(outside.is_error && outside.content.contains("outside the mounted folders"), "{}", outside.content);
    });
    assert_eq!(std::fs::read_to_string(site.join("new.txt")).expect("written on the host"), "from the coder\n");
    assert!(!reference.join("x.txt").exists());
    drop((coder_container, worker_container));
}

/// Spec §11.3 through the real binaries and a scripted model: a family member's Coder mounts
/// only the folders that are theirs or shared with them, and a shared project read-only; the
/// administrator's Coder writes in it.
#[test]
fn a_family_members_coder_never_writes_the_administrators_projects() {
    use baaaht_tests::fake_provider::{anthropic_answer, Answer, Asked, Responder};
    use baaaht_tests::scenario;
    let rt = baaaht_tests::runtime();
    let projects = baaaht_tests::Projects::new().expect("the projects");
    let allowlist = json!({"allowedMounts": [
        {"hostPath": projects.site, "containerPath": "/project/site", "options": "rw", "type": "project", "owner": "user:alice"},
        {"hostPath": projects.shared, "containerPath": "/project/shared", "options": "rw", "type": "project", "owner": "everyone"},
    ]});
    // Each Coder looks at /project, reads the administrator's site and writes in the shared one.
    let brain = Answer::Respond(Responder(std::sync::Arc::new(|request| {
        let asked = Asked::of(request);
        let done = asked.turn_results.clone();
        if asked.offers("delegate") {
            let who = if scenario::last_user_text(&asked).contains("bob") { "bob" } else { "alice" };
            let task =
                json!({"agent": "coder", "task": format!("Work on the projects for {who}."), "returnDirectly": false});
            return match done.len() {
                0 => anthropic_answer("", &[("toolu_d0", "delegate", task)]),
                _ => anthropic_answer(&done.join("\n"), &[]),
            };
        }
        let who = if asked.first.contains("bob") { "bob" } else { "alice" };
        let steps = [
            ("list_dir", json!({"path": "/project"})),
            ("read_file", json!({"path": "/project/site/index.html"})),
            ("write_file", json!({"path": format!("/project/shared/{who}.txt"), "content": "hello\n"})),
        ];
        match steps.get(done.len()) {
            Some((tool, params)) => anthropic_answer("", &[(&format!("toolu_c{}", done.len()), tool, params.clone())]),
            None => anthropic_answer(&done.join("\n===\n"), &[]),
        }
    })));
    let options = DaemonOptions {
        files: vec![("config/mount-allowlist.json".into(), allowlist.to_string())],
        env: vec![("BAAAHT__SYSTEM__ADMIN_USERS".into(), "[\"alice\"]".into())],
        ..Default::default()
    };
    let (_fake, daemon) = scenario::start(&rt, brain, options).expect("daemon starts");
    let reply = |who: &str| {
        let turn = scenario::turn_on(&rt, &daemon, scenario::message(scenario::user(who), who, &format!("{who} asks")));
        turn.reply.map(|reply| reply.content).unwrap_or_default()
    };
    let bobs = reply("bob");
    let looked = bobs.split("===").next().unwrap_or_default();
    assert!(looked.contains("shared") && !looked.contains("site"), "Bob sees only what is shared: {bobs}");
    assert!(!bobs.contains("<h1>site</h1>"), "Bob cannot read Alice's project: {bobs}");
    assert!(bobs.contains("read-only"), "the shared project is read-only for Bob: {bobs}");
    let alices = reply("alice");
    assert!(alices.contains("<h1>site</h1>"), "{alices}");
    assert!(projects.shared.join("alice.txt").exists(), "the administrator writes in the shared project: {alices}");
    assert!(!projects.shared.join("bob.txt").exists() && !projects.site.join("bob.txt").exists());
}

#[test]
fn a_message_reaches_its_own_contexts_channels_and_no_other() {
    use baaaht_proto::client::ConnectOptions;
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(DaemonOptions {
        env: vec![("BAAAHT__ORCHESTRATOR__POLL_INTERVALS__IPC".into(), "100".into())],
        ..Default::default()
    })
    .expect("daemon starts");
    let worker = daemon.lingering_agent("worker", None, &[]).expect("worker container");
    let subscribe = |id: &str| v1::EventSubscription {
        context: Some(v1::ContextRef { r#type: v1::ContextType::User as i32, id: id.into() }),
        ..v1::EventSubscription::default()
    };
    let first_event = |stream: &mut tonic::Streaming<v1::OrchestratorEvent>| {
        let next = rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), stream.message()).await });
        next.ok().map(|event| event.expect("stream").expect("open"))
    };
    let content = |event: Option<v1::OrchestratorEvent>| {
        event.and_then(|event| event.event).and_then(|event| match event {
            v1::orchestrator_event::Event::Message(message) => Some(message.content),
            _ => None,
        })
    };
    let first_message = |stream: &mut tonic::Streaming<v1::OrchestratorEvent>| content(first_event(stream));
    let (mut mine, mut bobs) = rt.block_on(async {
        let mut host = client::connect(&daemon.socket(), ConnectOptions::default()).await.expect("connect");
        let mine =
            host.sessions.subscribe_events(subscribe("baaaht-self-test")).await.expect("subscribes").into_inner();
        let bobs = host.sessions.subscribe_events(subscribe("bob")).await.expect("subscribes").into_inner();
        // The call names its request (spec §18.1): the message's delivery carries it.
        let options = ConnectOptions { correlation_id: Some("c-build-42".into()), ..worker.options() };
        let mut agent = client::connect(&worker.socket, options).await.expect("connect as the worker");
        let queued = run(&mut agent, "message", json!({"content": "the build finished"})).await;
        assert!(queued.content.starts_with("message queued for delivery"), "{queued:?}");
        (mine, bobs)
    });
    let delivered = first_event(&mut mine).expect("the message");
    assert_eq!(delivered.correlation_id, "c-build-42", "{delivered:?}");
    assert_eq!(content(Some(delivered)).as_deref(), Some("the build finished"));

    // A file in bob's folder acts for bob, whatever it claims.
    let bob = daemon.data_dir.join("data/ipc/user-bob/tools-s-bob/messages");
    std::fs::create_dir_all(&bob).expect("bob's folder");
    std::fs::write(bob.join("m1.json"), r#"{"id":"m1","content":"forged","targetContext":"user:baaaht-self-test"}"#)
        .expect("write");
    std::fs::write(bob.join("m2.json"), r#"{"id":"m2","content":"for bob"}"#).expect("write");
    assert_eq!(first_message(&mut bobs).as_deref(), Some("for bob"));
    // The file goes right after the delivery.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while bob.join("m2.json").exists() {
        assert!(std::time::Instant::now() < deadline, "a delivered message is removed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let rejected = daemon.data_dir.join("data/state/ipc-rejected/user-bob/tools-s-bob/m1.json");
    assert!(rejected.exists(), "the forged message was set aside");
    let log = daemon.log_text();
    assert!(log.contains("an agent may message only its own context"), "{log}");
    assert_eq!(log.matches("message delivered").count(), 2, "{log}");
    drop(worker);
}

#[test]
fn skill_scripts_are_mounted_read_only_and_only_the_contexts_own() {
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(DaemonOptions {
        files: vec![
            ("skills/demo/SKILL.md".into(), "---\nname: demo\ndescription: A demo.\n---\n".into()),
            ("skills/demo/scripts/hello.sh".into(), "echo hello from the demo skill\n".into()),
            ("users/baaaht-self-test/skills/mine/scripts/run.sh".into(), "echo mine\n".into()),
            ("users/bob/skills/bobs/scripts/run.sh".into(), "echo bob's\n".into()),
        ],
        ..Default::default()
    })
    .expect("daemon starts");
    let (coder, mut agent) = coder(&daemon, &rt);
    rt.block_on(async {
        let ran = run(&mut agent, "exec", json!({"command": "sh /skills/demo/scripts/hello.sh && ls /skills"})).await;
        assert_eq!(ran.content, "exit code 0\n--- stdout ---\nhello from the demo skill\ndemo\nmine\n", "{ran:?}");
        let changed = run(&mut agent, "exec", json!({"command": "echo x >> /skills/demo/scripts/hello.sh"})).await;
        assert!(changed.is_error, "{}", changed.content);
        let mounts =
            run(&mut agent, "exec", json!({"command": "grep ' /skills/demo/scripts ' /proc/self/mounts"})).await;
        assert!(mounts.content.contains(" ro,"), "mounted read-only: {}", mounts.content);
        let wrote = run(&mut agent, "write_file", json!({"path": "/skills/mine/scripts/run.sh", "content": "x"})).await;
        assert!(wrote.is_error && wrote.content.contains("read-only"), "{}", wrote.content);
        let read = run(&mut agent, "read_file", json!({"path": "/skills/mine/scripts/run.sh"})).await;
        assert_eq!(read.content, "     1\techo mine\n");
    });
    drop(coder);
}

#[test]
fn a_tool_container_reads_its_contexts_system_files_and_cannot_change_them() {
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let (lingering, mut agent) = coder(&daemon, &rt);
    rt.block_on(async {
        let mut status = String::new();
        for _ in 0..50 {
            status = run(&mut agent, "exec", json!({"command": "cat /ipc/system/container_status.json"})).await.content;
            if status.contains("baaaht-tool-") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Its own context's containers: the tool container it runs in among them.
        assert!(status.contains("\"containers\"") && status.contains("baaaht-tool-"), "{status}");
        let groups = run(&mut agent, "exec", json!({"command": "cat /ipc/system/available_groups.json"})).await;
        assert!(groups.content.contains("\"groups\": []"), "{}", groups.content);
        let changed = run(
            &mut agent,
            "exec",
            json!({"command": "echo lie > /ipc/system/available_groups.json || echo refused; rm -f /ipc/system/container_status.json || echo kept; ls /ipc/system"}),
        )
        .await;
        assert!(changed.content.contains("refused") && changed.content.contains("kept"), "{}", changed.content);
        assert!(changed.content.contains("available_groups.json") && changed.content.contains("container_status.json"));
    });
    drop(lingering);
}
