//! Warm pools on the real binaries and a real engine: a new session's Assistant (and the Coder
//! it delegates to) comes from a pool, holding nothing of anyone until it is claimed; a
//! container that served one person never serves another (a file it was left, a process left
//! running, stay with it); and a daemon that crashes with a full pool leaves no container
//! behind once it is back.

use std::time::{Duration, Instant};

use baaaht_tests::scenario::{self, coder_brain, message, user, HELLO};
use baaaht_tests::{docker, DaemonOptions, TestDaemon};

/// Pools of `size` Assistants, Coders and tool containers, no others.
fn pools(size: u32) -> DaemonOptions {
    let pools = format!(
        r#"{{"assistant":{{"floor":{size},"ceiling":{size}}},"coder":{{"floor":{size},"ceiling":{size}}},"worker":{{"floor":0,"ceiling":0}},"researcher":{{"floor":0,"ceiling":0}},"memory":{{"floor":0,"ceiling":0}},"heartbeat":{{"floor":0,"ceiling":0}},"tool":{{"floor":{size},"ceiling":{size}}}}}"#
    );
    DaemonOptions { env: vec![("BAAAHT__CONTAINER__POOLS".into(), pools)], ..DaemonOptions::default() }
}

/// Waits up to a minute until `daemon`'s pools have `count` ready containers of each of
/// `roles` (as `baaaht status` says); the names of the pooled ones starting with `prefix`.
fn pooled(daemon: &TestDaemon, roles: &[&str], count: u64, prefix: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status: serde_json::Value = serde_json::from_str(&daemon.cli(&["status", "--json"])).expect("JSON");
        if roles.iter().all(|role| status["pools"][role].as_u64().unwrap_or(0) >= count) {
            return daemon.pooled_containers(prefix);
        }
        assert!(Instant::now() < deadline, "the pools did not fill within 60 s: {status}\n{}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The session the inventory says container `name` serves.
fn session_of(daemon: &TestDaemon, name: &str) -> String {
    let text = std::fs::read_to_string(daemon.data_dir.join("data/state/containers.json")).expect("inventory");
    let inventory: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    inventory["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|entry| entry["name"] == name)
        .and_then(|entry| entry["sessionId"].as_str())
        .unwrap_or("(not in the inventory)")
        .to_string()
}

/// One turn of `person`'s (a new session each): the reply's session.
fn chat(rt: &tokio::runtime::Runtime, daemon: &TestDaemon, person: &str) -> String {
    rt.block_on(async {
        let mut client = scenario::host_client(daemon).await.expect("connect");
        let said = message(user(person), person, "Write hello.sh and run it, please.");
        let turn = scenario::turn(&mut client, said, Duration::from_secs(120))
            .await
            .unwrap_or_else(|error| panic!("{error:#}\n{}", daemon.log_text()));
        let reply = turn.reply.clone().unwrap_or_else(|| panic!("no reply: {:?}\n{}", turn.error, daemon.log_text()));
        assert!(reply.content.contains(HELLO), "{reply:?}");
        turn.session
    })
}

#[test]
fn a_new_session_claims_pooled_agents_that_held_nothing_and_never_go_back() {
    let rt = baaaht_tests::runtime();
    let (_fake, daemon) = scenario::start(&rt, coder_brain(), pools(1)).expect("fake provider and daemon");
    let assistant = pooled(&daemon, &["assistant", "coder"], 1, "baaaht-assistant-").remove(0);
    let coder = daemon.pooled_containers("baaaht-coder-").remove(0);

    // Nobody's: no session or context in its labels, nothing mounted but the agent binary and
    // its own socket folder, nothing in its environment but how to reach the daemon.
    let inspect = docker(&["inspect", &assistant]).expect("inspect");
    let inspect: serde_json::Value = serde_json::from_str(&inspect).expect("JSON");
    let labels = &inspect[0]["Config"]["Labels"];
    assert_eq!((labels["baaaht.session"].as_str(), labels["baaaht.context"].as_str()), (Some(""), Some("")));
    let mounts: Vec<&str> =
        inspect[0]["Mounts"].as_array().expect("mounts").iter().filter_map(|m| m["Destination"].as_str()).collect();
    assert!(
        mounts.iter().all(|at| at.starts_with("/opt/baaaht") || at.starts_with("/run/baaaht")),
        "a pooled agent mounts nothing of anyone's: {mounts:?}"
    );
    let env: Vec<&str> =
        inspect[0]["Config"]["Env"].as_array().expect("env").iter().filter_map(|e| e.as_str()).collect();
    assert!(
        env.iter().all(|pair| ["PATH=", "BAAAHT_CONTAINER_TOKEN=", "BAAAHT_SOCKET=", "LD_PRELOAD=", "HOME=", "LANG="]
            .iter()
            .any(|known| pair.starts_with(known))),
        "{env:?}"
    );

    let alices = chat(&rt, &daemon, "alice");
    assert_eq!(session_of(&daemon, &assistant), alices, "alice's Assistant came from the pool");
    assert_eq!(session_of(&daemon, &coder), alices, "and so did her Coder");
    // What alice's container was left stays in it.
    docker(&["exec", &assistant, "sh", "-c", "echo secret > /tmp/alices; (sleep 600 &)"]).expect("exec");

    // The pools fill again, with new containers: alice's never goes back.
    let next = pooled(&daemon, &["assistant", "coder"], 1, "baaaht-assistant-").remove(0);
    assert_ne!(next, assistant);
    let bobs = chat(&rt, &daemon, "bob");
    assert_eq!(session_of(&daemon, &next), bobs, "bob's Assistant came from the pool");
    assert_eq!(session_of(&daemon, &assistant), alices, "alice's container still serves alice only");
    let seen = docker(&["exec", &next, "sh", "-c", "cat /tmp/alices 2>&1; ps -eo args"]).expect("exec");
    assert!(!seen.contains("secret") && !seen.contains("sleep 600"), "{seen}");
    assert!(!daemon.pooled_containers("baaaht-").contains(&assistant));
}

#[test]
fn a_delegations_agent_starts_while_the_model_is_still_writing_the_call() {
    use baaaht_tests::fake_provider::{anthropic_answer, anthropic_call_in_pieces, Answer, Asked, Responder};
    // The Assistant's delegate call names the Worker, then pauses before it writes the task.
    let brain = Answer::Respond(Responder(std::sync::Arc::new(|request| {
        let asked = Asked::of(request);
        if !asked.offers("delegate") {
            return anthropic_answer("done", &[]);
        }
        match asked.turn_results.last() {
            Some(result) => anthropic_answer(&format!("Worker: {result}"), &[]),
            None => anthropic_call_in_pieces(
                "toolu_delegate_1",
                "delegate",
                &[r#"{"agent": "worker", "task": ""#, r#"Say done.", "returnDirectly": false}"#],
                Duration::from_secs(10),
            ),
        }
    })));
    let rt = baaaht_tests::runtime();
    // No pools: the Worker starts cold, which is what starting it early saves.
    let (fake, daemon) = scenario::start(&rt, brain, pools(0)).expect("fake provider and daemon");
    let workers = |daemon: &TestDaemon| {
        daemon.inventory_names(|entry| entry["name"].as_str().is_some_and(|name| name.starts_with("baaaht-worker-")))
    };
    let answered_before = fake.completed();
    let reply = std::thread::scope(|scope| {
        let chatting = scope.spawn(|| {
            rt.block_on(async {
                let mut client = scenario::host_client(&daemon).await.expect("connect");
                let said = message(user("alice"), "alice", "Ask the worker to say done.");
                scenario::turn(&mut client, said, Duration::from_secs(120)).await.expect("the turn")
            })
        });
        // The Worker runs while the Assistant's answer is still being written.
        let deadline = Instant::now() + Duration::from_secs(60);
        while workers(&daemon).is_empty() {
            assert!(Instant::now() < deadline, "no Worker started:\n{}", daemon.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            fake.completed(),
            answered_before,
            "the Worker waited for the whole delegate call:\n{}",
            daemon.log_text()
        );
        chatting.join().expect("the turn's thread")
    });
    let answer = reply.reply.unwrap_or_else(|| panic!("no reply: {:?}\n{}", reply.error, daemon.log_text()));
    assert_eq!(answer.content, "Worker: done");
    // The delegation took the Worker started for it: one Worker served the session.
    let theirs: Vec<String> =
        workers(&daemon).into_iter().filter(|name| session_of(&daemon, name) == reply.session).collect();
    assert_eq!(theirs.len(), 1, "{theirs:?}\n{}", daemon.log_text());
}

#[test]
fn a_daemon_that_crashes_with_a_full_pool_leaves_no_container_behind() {
    let mut daemon = TestDaemon::start(pools(2)).expect("daemon");
    let full = pooled(&daemon, &["assistant", "coder", "tool"], 2, "baaaht-");
    let owner = baaaht_daemon::sandbox::container::manager::owner_id(&baaaht_daemon::base::datadir::DataDir::new(
        &daemon.data_dir,
    ));
    daemon.crash().expect("kill -9");
    // Back without pools: what the crashed daemon pooled is removed, nothing takes its place.
    let back = TestDaemon::start(DaemonOptions { data_dir: Some(daemon.data_dir.clone()), ..DaemonOptions::default() })
        .expect("restarts");
    let deadline = Instant::now() + Duration::from_secs(60);
    for name in &full {
        while docker(&["ps", "-aq", "--filter", &format!("name=^{name}$")]).is_ok_and(|ids| !ids.trim().is_empty()) {
            assert!(Instant::now() < deadline, "{name} was left behind:\n{}", back.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    back.stop().expect("stops");
    let left = docker(&["ps", "-a", "--filter", &format!("label=baaaht.owner={owner}"), "--format", "{{.Names}}"])
        .expect("docker ps");
    assert!(left.trim().is_empty(), "left behind: {left}");
    assert_no_pooled_folder_or_mount(&daemon.data_dir);
}

/// Nothing a pooled tool container held is left in `data_dir`: no folder, no mount.
fn assert_no_pooled_folder_or_mount(data_dir: &std::path::Path) {
    let pooled_left = |folder: &str| std::fs::read_dir(data_dir.join(folder)).map_or(0, |entries| entries.count());
    assert_eq!((pooled_left("sessions/@pool"), pooled_left("data/ipc/pool")), (0, 0));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let data_dir = data_dir.display().to_string();
    assert!(!mounts.lines().any(|line| line.contains(&data_dir)), "left mounted:\n{mounts}");
}

/// A pool of `tools` tool containers, no agents'.
fn tool_pool(tools: u32) -> DaemonOptions {
    let pools = baaaht_daemon::base::config::NO_POOLS
        .replace(r#""tool":{"floor":0,"ceiling":0}"#, &format!(r#""tool":{{"floor":{tools},"ceiling":{tools}}}"#));
    DaemonOptions { env: vec![("BAAAHT__CONTAINER__POOLS".into(), pools)], ..DaemonOptions::default() }
}

/// Where container `name` mounts `target` from.
fn mount_source(name: &str, target: &str) -> String {
    let inspect: serde_json::Value = serde_json::from_str(&docker(&["inspect", name]).expect("inspect")).expect("JSON");
    let mounts = inspect[0]["Mounts"].as_array().expect("mounts");
    let found = mounts.iter().find(|m| m["Destination"] == target).unwrap_or_else(|| panic!("no {target}: {mounts:?}"));
    found["Source"].as_str().expect("source").to_string()
}

/// Waits up to a minute for `path` to hold `bytes`.
fn wait_for_file(daemon: &TestDaemon, path: &std::path::Path, bytes: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read(path).ok().as_deref() != Some(bytes) {
        assert!(Instant::now() < deadline, "{} never held what was sent:\n{}", path.display(), daemon.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_new_sessions_first_tool_container_comes_from_the_pool_and_serves_that_session_only() {
    let rt = baaaht_tests::runtime();
    let brain = scenario::report_sending_brain(scenario::echo_brain());
    let (_fake, daemon) = scenario::start(&rt, brain, tool_pool(1)).expect("fake provider and daemon");
    let first = pooled(&daemon, &["tool"], 1, "baaaht-tool-").remove(0);
    // Nobody's: its workspace and IPC folder are the pool's own, fresh.
    let workspace = mount_source(&first, "/workspace");
    assert!(workspace.contains("/sessions/@pool/"), "{workspace}");
    assert!(mount_source(&first, "/ipc").contains("/data/ipc/pool/"));
    assert_eq!(docker(&["exec", &first, "ls", "-A", "/workspace"]).expect("ls").trim(), "");

    let asked = |person: &str| {
        let said = message(user(person), person, scenario::ASK_FOR_REPORT);
        let turn = scenario::turn_on(&rt, &daemon, said);
        let reply = turn.reply.clone().unwrap_or_else(|| panic!("no reply: {:?}\n{}", turn.error, daemon.log_text()));
        assert_eq!(reply.content, scenario::REPORT_SENT);
        turn.session
    };
    let alices = asked("alice");
    assert_eq!(session_of(&daemon, &first), alices, "alice's first tool container came from the pool");
    // What its first call wrote is in alice's workspace, and what it sent went to alice's
    // session (the IPC folder is hers now).
    let sessions = daemon.data_dir.join("sessions");
    let report = format!("out/{}", scenario::REPORT_NAME);
    assert_eq!(
        std::fs::read(sessions.join(&alices).join("data").join(&report)).expect("in her workspace"),
        scenario::REPORT
    );
    wait_for_file(&daemon, &sessions.join(&alices).join("sent").join(scenario::REPORT_NAME), scenario::REPORT);
    assert!(daemon.data_dir.join("data/ipc/user-alice").join(format!("tools-{alices}")).is_dir());
    docker(&["exec", &first, "sh", "-c", "echo secret > /workspace/alices; (sleep 600 &)"]).expect("exec");

    // The pool fills again with a new one: bob's holds nothing of alice's.
    let next = pooled(&daemon, &["tool"], 1, "baaaht-tool-").remove(0);
    assert_ne!(next, first);
    let bobs = asked("bob");
    assert_eq!(session_of(&daemon, &next), bobs, "bob's first tool container came from the pool");
    assert_eq!(session_of(&daemon, &first), alices, "alice's still serves alice only");
    let seen = docker(&["exec", &next, "sh", "-c", "ls -A /workspace /workspace/out; ps -eo args"]).expect("exec");
    assert!(!seen.contains("alices") && !seen.contains("sleep 600"), "{seen}");
    assert_eq!(
        std::fs::read(sessions.join(&bobs).join("data").join(&report)).expect("in his workspace"),
        scenario::REPORT
    );

    // A clean stop leaves no pooled folder and nothing mounted under the data dir.
    let data_dir = daemon.data_dir.clone();
    daemon.stop().expect("stops");
    assert_no_pooled_folder_or_mount(&data_dir);
}
