//! A hostile model inside the sandbox, on the real daemon and engine: what a Coder's `exec` can
//! do to the daemon through the folders it shares with the host (its IPC folder, the
//! workspace), to the container's process table and disk, and what the configuration must
//! never allow.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use baaaht_proto::client::{self, Client};
use baaaht_proto::v1;
use baaaht_tests::{bin, docker, DaemonOptions, LingeringAgent, TestDaemon};
use serde_json::json;

/// The kernel the tool, Coder and MCP containers of a test run on: every test of this suite
/// that starts containers runs once under each (the `runc` and `gvisor` modules below).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Runc,
    Gvisor,
}

impl Tier {
    /// `options` with `container.isolation` set for this tier. gVisor is asked for by name, not
    /// `auto`: without a usable runsc its tests fail, they never fall back to runc.
    fn options(self, mut options: DaemonOptions) -> DaemonOptions {
        let tier = match self {
            Tier::Runc => "runc",
            Tier::Gvisor => "gvisor",
        };
        let isolation = json!({"tool": tier, "coder": tier, "mcp": tier});
        options.env.push(("BAAAHT__CONTAINER__ISOLATION".into(), isolation.to_string()));
        options
    }
}

/// One `#[test]` per tier for each named test function (which takes the [`Tier`]).
macro_rules! on_both_tiers {
    ($($name:ident),* $(,)?) => {
        mod runc {
            $(#[test]
            fn $name() {
                super::$name(super::Tier::Runc)
            })*
        }
        mod gvisor {
            $(#[test]
            fn $name() {
                super::$name(super::Tier::Gvisor)
            })*
        }
    };
}

on_both_tiers!(
    the_daemon_never_follows_a_link_in_a_container_writable_folder,
    zombies_and_a_fork_bomb_leave_later_calls_working,
    a_container_flooding_its_socket_is_held_at_its_cap_and_everyone_else_is_served,
    a_write_past_the_workspace_cap_fails_and_the_host_keeps_within_it,
    a_coder_filling_its_ipc_folder_takes_at_most_its_cap_and_the_folder_goes_with_its_container,
    special_files_are_refused_at_once,
    container_max_concurrent_queues_then_refuses_with_a_sentence,
    the_kernel_inside_is_the_tiers_and_the_seccomp_profile_holds_there,
);

fn request(tool: &str, params: serde_json::Value, call_id: &str) -> v1::ToolRequest {
    v1::ToolRequest {
        tool: tool.into(),
        params_json: params.to_string(),
        tool_call_id: call_id.into(),
        ..v1::ToolRequest::default()
    }
}

async fn run(agent: &mut Client, tool: &str, params: serde_json::Value) -> v1::ToolResponse {
    call(agent, tool, params, "").await
}

async fn call(agent: &mut Client, tool: &str, params: serde_json::Value, call_id: &str) -> v1::ToolResponse {
    agent
        .agents
        .request_tool_execution(request(tool, params, call_id))
        .await
        .unwrap_or_else(|status| panic!("{tool}: {status:?}"))
        .into_inner()
}

fn agent(daemon: &TestDaemon, rt: &tokio::runtime::Runtime, role: &str) -> (LingeringAgent, Client) {
    let lingering = daemon.lingering_agent(role, None, &[]).unwrap_or_else(|error| panic!("{role} container: {error}"));
    let client = rt.block_on(client::connect(&lingering.socket, lingering.options())).expect("connect as the agent");
    (lingering, client)
}

/// Everything a person would notice about a host folder: owner, mode, names and contents.
fn snapshot(folder: &Path) -> (u32, u32, u32, Vec<(String, Vec<u8>)>) {
    let meta = std::fs::symlink_metadata(folder).expect("stat");
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(folder)
        .expect("list")
        .map(|entry| {
            let entry = entry.expect("entry");
            (entry.file_name().to_string_lossy().into_owned(), std::fs::read(entry.path()).unwrap_or_default())
        })
        .collect();
    files.sort();
    (meta.uid(), meta.gid(), meta.mode(), files)
}

/// A host folder an attacker would like the daemon to touch: root's, 0700, holding what
/// would pass for a result and a message.
fn victim(root: &Path) -> PathBuf {
    let folder = root.join("victim");
    std::fs::create_dir_all(&folder).expect("mkdir");
    std::fs::write(folder.join("m1.json"), r#"{"id":"m1","content":"planted by a link"}"#).expect("write");
    std::fs::write(folder.join("t-1.json"), r#"{"callId":"t-1","tool":"exec","content":"planted","isError":false}"#)
        .expect("write");
    std::fs::write(folder.join("keep.txt"), "the host's own file\n").expect("write");
    std::fs::set_permissions(&folder, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    folder
}

fn replace_with_link(folder: &Path, target: &Path) {
    if folder.is_dir() {
        std::fs::remove_dir_all(folder).expect("remove the folder");
    }
    std::os::unix::fs::symlink(target, folder).expect("symlink");
}

/// Subscribes to `context`'s events and collects every message that arrives within `limit`.
async fn watch_messages(client: &Client, context: &str, limit: Duration) -> tokio::task::JoinHandle<Vec<String>> {
    let mut client = client.clone();
    let mut events = client
        .sessions
        .subscribe_events(v1::EventSubscription {
            context: Some(v1::ContextRef { r#type: v1::ContextType::User as i32, id: context.into() }),
            session_id: String::new(),
            channel: 0,
            notifies: false,
        })
        .await
        .expect("subscribe")
        .into_inner();
    tokio::spawn(async move {
        let mut seen = vec![];
        let deadline = tokio::time::Instant::now() + limit;
        while let Ok(Ok(Some(event))) = tokio::time::timeout_at(deadline, events.message()).await {
            if let Some(v1::orchestrator_event::Event::Message(message)) = event.event {
                seen.push(message.content);
            }
        }
        seen
    })
}

/// Waits until the daemon's log says `line` at least `times` times.
fn wait_for_log(daemon: &TestDaemon, line: &str, times: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while daemon.log_text().matches(line).count() < times {
        assert!(Instant::now() < deadline, "the log never said `{line}`:\n{}", daemon.log_text());
        // Polling the log against a deadline: the daemon announces nothing else.
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn the_daemon_never_follows_a_link_in_a_container_writable_folder(tier: Tier) {
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(tier.options(DaemonOptions::default())).expect("daemon starts");
    let target = victim(daemon.temp.path());
    let before = snapshot(&target);
    let (coder_container, mut coder) = agent(&daemon, &rt, "coder");
    let ipc = daemon.data_dir.join("data/ipc/user-baaaht-self-test");

    rt.block_on(async {
        // From inside: the Coder's IPC folder is its own, with no messages folder, and nothing
        // in it can be swapped for a link.
        let tried = run(
            &mut coder,
            "exec",
            json!({"command": format!(
                "cd /ipc; ls -a; mv results results.orig; ln -s {t} results; ln -s {t} messages; ln -s /nonexistent/x messages; \
                 echo '{{\"id\":\"m9\",\"content\":\"from a coder\"}}' > messages/m9.json; ls -a",
                t = target.display()
            )}),
        )
        .await;
        assert!(tried.content.contains("Permission denied") || tried.content.contains("Read-only"), "{}", tried.content);
        assert!(!tried.content.contains("messages\n"), "a Coder has no messages folder: {}", tried.content);
        // Links and a FIFO where results go: refused when collected, never followed or waited on.
        let planted = run(
            &mut coder,
            "exec",
            json!({"command": format!("ln -s {t}/t-1.json /ipc/results/t-1.json; mkfifo /ipc/results/t-2.json; echo planted", t = target.display())}),
        )
        .await;
        assert!(planted.content.contains("planted"), "{}", planted.content);
        for call_id in ["t-1", "t-2"] {
            let started = Instant::now();
            let answer = call(&mut coder, "exec", json!({"command": "echo ran for real"}), call_id).await;
            assert_eq!(answer.content, "exit code 0\n--- stdout ---\nran for real\n", "{call_id}");
            assert!(started.elapsed() < Duration::from_secs(20), "{call_id} waited on something");
        }
    });
    assert!(daemon.log_text().contains("a malformed IPC file was set aside"), "{}", daemon.log_text());

    // As if a container could swap its folders anyway (say the daemon ran as uid 1000): the
    // daemon still follows no link. The Coder's results, the Worker's messages and another
    // context's messages all point at the victim.
    let (worker_container, mut worker) = agent(&daemon, &rt, "worker");
    rt.block_on(async {
        let hello = run(&mut worker, "message", json!({"content": "hello from the worker"})).await;
        assert!(!hello.is_error, "{}", hello.content);
    });
    replace_with_link(&ipc.join("coder-self-test/results"), &target);
    std::fs::create_dir_all(daemon.data_dir.join("data/ipc/user-alice/tools-s-alice")).expect("mkdir");
    replace_with_link(&daemon.data_dir.join("data/ipc/user-alice/tools-s-alice/messages"), &target);
    let host = rt.block_on(baaaht_tests::scenario::host_client(&daemon)).expect("host client");
    let alice = rt.block_on(watch_messages(&host, "alice", Duration::from_secs(6)));
    // The next tool container of the Coder's session is started on its IPC folder.
    let disconnected = daemon.log_text().matches("tool runner disconnected").count();
    docker(&["rm", "-f", &tool_container(&daemon, "coder")]).expect("remove the tool container");
    wait_for_log(&daemon, "tool runner disconnected", disconnected + 1);
    rt.block_on(async {
        let answer = call(&mut coder, "exec", json!({"command": "ls /ipc"}), "t-3").await;
        // Its results and (once the daemon has written them) its read-only system files.
        let listed: Vec<&str> = answer.content.lines().filter(|name| *name != "system").collect();
        assert_eq!(listed, ["exit code 0", "--- stdout ---", "results"], "{answer:?}");
        assert!(std::fs::symlink_metadata(ipc.join("coder-self-test/results")).expect("stat").is_dir());
        // The Worker's message still goes to its own context only.
        let mine = watch_messages(&host, "baaaht-self-test", Duration::from_secs(4)).await;
        let sent = run(&mut worker, "message", json!({"content": "second message"})).await;
        assert!(!sent.is_error, "{}", sent.content);
        let mine = mine.await.expect("join");
        assert!(mine.iter().any(|m| m == "second message"), "{mine:?}");
        assert_eq!(alice.await.expect("join"), Vec::<String>::new(), "nothing reached alice");
    });
    // A dangling link where the results folder belongs does not stop the next container.
    replace_with_link(&ipc.join("coder-self-test/results"), Path::new("/nonexistent/results"));
    let disconnected = daemon.log_text().matches("tool runner disconnected").count();
    docker(&["rm", "-f", &tool_container(&daemon, "coder")]).expect("remove the tool container");
    wait_for_log(&daemon, "tool runner disconnected", disconnected + 1);
    let answer = rt.block_on(call(&mut coder, "exec", json!({"command": "echo started again"}), "t-4"));
    assert_eq!(answer.content, "exit code 0\n--- stdout ---\nstarted again\n", "{answer:?}");
    assert_eq!(snapshot(&target), before, "the link's target was touched");
    drop((coder_container, worker_container));
}

/// The running tool container of this daemon's self-test session (a Coder's when `coder`).
fn tool_container(daemon: &TestDaemon, which: &str) -> String {
    let listed = docker(&["ps", "--format", "{{.Names}} {{.Command}}", "--no-trunc"]).expect("docker ps");
    let recorded = daemon.recorded_containers();
    listed
        .lines()
        .filter_map(|line| line.split_once(' '))
        .find(|(name, command)| {
            name.starts_with("baaaht-tool-")
                && recorded.iter().any(|r| r == name)
                && command.contains("/ipc/messages") == (which != "coder")
        })
        .map(|(name, _)| name.to_string())
        .unwrap_or_else(|| panic!("no {which} tool container in:\n{listed}"))
}

fn zombies_and_a_fork_bomb_leave_later_calls_working(tier: Tier) {
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(tier.options(DaemonOptions::default())).expect("daemon starts");
    let (lingering, mut coder) = agent(&daemon, &rt, "coder");
    rt.block_on(async {
        for round in 0..12 {
            let spawned =
                run(&mut coder, "exec", json!({"command": "for i in $(seq 20); do sleep 300 & done; echo spawned"}))
                    .await;
            assert!(spawned.content.contains("spawned"), "round {round}: {}", spawned.content);
        }
        let left = run(
            &mut coder,
            "exec",
            json!({"command": "grep -l '^State:.Z' /proc/[0-9]*/status | wc -l; ls -d /proc/[0-9]* | wc -l"}),
        )
        .await;
        let counts: Vec<&str> = left.content.lines().skip(2).collect();
        assert_eq!(counts.first().copied(), Some("0"), "zombies left: {}", left.content);
        let bomb = json!({"command": "b(){ b|b& }; b; sleep 2; echo lit", "timeout": 10});
        match (tier, coder.agents.request_tool_execution(request("exec", bomb, "")).await) {
            (_, Ok(answer)) => {
                let answer = answer.into_inner();
                assert!(
                    answer.content.contains("exit code") || answer.content.contains("killed"),
                    "{}",
                    answer.content
                );
            }
            // Under gVisor's ptrace platform each process in the sandbox costs host threads:
            // the bomb reaches the container's cgroup pids limit, and the sandbox dies, not
            // the host. The caller is told, and the next call gets a new runner.
            (Tier::Gvisor, Err(status)) => {
                assert!(status.message().contains("it is restarted on the next call"), "{status:?}")
            }
            (Tier::Runc, Err(status)) => panic!("the runner died of a fork bomb under runc: {status:?}"),
        }
        // Under gVisor's ptrace platform the engine tears the bombed sandbox down, thousands of
        // traced threads, and on these two cores beside the other sandbox tests that has held
        // dockerd past the 30 s engine timeout (twice in CI): the caller is then told the
        // engine is not answering, in the sentence a person reads, and a later call works.
        let still = json!({"command": "echo still working; ls -d /proc/[0-9]* | wc -l"});
        if tier == Tier::Gvisor {
            let deadline = Instant::now() + Duration::from_secs(180);
            loop {
                match coder.agents.request_tool_execution(request("exec", still.clone(), "")).await {
                    Ok(_) => break,
                    Err(status) if status.message().contains("the container engine is not answering; try again") => {
                        assert!(Instant::now() < deadline, "the engine did not come back: {status:?}");
                        tokio::time::sleep(Duration::from_secs(2)).await;
                    }
                    Err(status) => panic!("after the bomb: {status:?}"),
                }
            }
        }
        for _ in 0..3 {
            let after = run(&mut coder, "exec", still.clone()).await;
            assert!(after.content.starts_with("exit code 0\n--- stdout ---\nstill working\n"), "{}", after.content);
        }
    });
    drop(lingering);
}

/// Four processes, each opening a thousand connections to the daemon's socket and holding
/// them for `hold` seconds; prints how many connected.
fn flood(hold: u32) -> String {
    let script = format!(
        "import socket, time\nheld = []\nfor _ in range(1000):\n    s = socket.socket(socket.AF_UNIX)\n    \
         s.settimeout(0.2)\n    try:\n        s.connect('/run/baaaht/daemon.sock'); held.append(s)\n    \
         except OSError:\n        s.close()\ntime.sleep({hold})\nprint(len(held))\n"
    );
    format!("for i in 1 2 3 4; do python3 -c \"{script}\" & done; wait; echo flooded")
}

fn a_container_flooding_its_socket_is_held_at_its_cap_and_everyone_else_is_served(tier: Tier) {
    let rt = baaaht_tests::runtime();
    // As under systemd's default soft limit, with no LimitNOFILE.
    let daemon =
        TestDaemon::start_with_descriptors(tier.options(DaemonOptions::default()), 1024).expect("daemon starts");
    let (lingering, mut coder) = agent(&daemon, &rt, "coder");
    rt.block_on(async {
        // The tool container starts with the first call.
        run(&mut coder, "exec", json!({"command": "true"})).await;
        let mut flooding = coder.clone();
        let flood =
            tokio::spawn(async move { run(&mut flooding, "exec", json!({"command": flood(12), "timeout": 60})).await });
        // The daemon tells of the flood: its socket is at its cap.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let records = daemon.audit("limit");
            if records.iter().any(|r| r["principal"].as_str().is_some_and(|p| p.starts_with("container:tool:"))) {
                break;
            }
            assert!(Instant::now() < deadline, "the flood was never noticed: {records:?}\n{}", daemon.log_text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // While it lasts, the host's clients and the other containers are served, and the
        // daemon holds few descriptors.
        let status = std::process::Command::new(bin("baaaht"))
            .arg("status")
            .env("BAAAHT_SOCKET", daemon.socket())
            .output()
            .expect("baaaht status");
        assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
        let skills = coder.skills.get_skill_manifest(v1::SkillManifestRequest::default()).await;
        assert!(skills.is_ok(), "the Coder's own socket answers: {skills:?}");
        let open = daemon.open_descriptors();
        assert!(open < 300, "the daemon holds {open} descriptors during the flood");
        let flooded = flood.await.expect("flood");
        assert!(flooded.content.contains("flooded"), "{}", flooded.content);
        // After it, the container's calls work again.
        let after = run(&mut coder, "exec", json!({"command": "echo still working"})).await;
        assert!(after.content.contains("still working"), "{}", after.content);
    });
    drop(lingering);
}

/// The bytes a file takes on disk.
fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).map(|meta| meta.blocks() * 512).unwrap_or(0)
}

/// Bytes every file under `folder` takes on disk (links not followed).
fn allocated_under(folder: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(folder) else { return 0 };
    entries
        .flatten()
        .map(|entry| {
            let meta = std::fs::symlink_metadata(entry.path()).expect("stat");
            meta.blocks() * 512 + if meta.is_dir() { allocated_under(&entry.path()) } else { 0 }
        })
        .sum()
}

const CAP: u64 = 64 << 20;

fn capped(limit: &str) -> DaemonOptions {
    let config =
        format!("container:\n  role_limits:\n    tool:\n      disk: 64m\ntools:\n  workspace_limit: {limit}\n");
    DaemonOptions { files: vec![("config/config.yaml".into(), config)], ..DaemonOptions::default() }
}

fn a_write_past_the_workspace_cap_fails_and_the_host_keeps_within_it(tier: Tier) {
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(tier.options(capped("filesystem"))).expect("daemon starts");
    let (lingering, mut coder) = agent(&daemon, &rt, "coder");
    let session = daemon.data_dir.join("sessions/self-test");
    rt.block_on(async {
        let filled = run(&mut coder, "exec", json!({"command": "dd if=/dev/zero of=big bs=1M count=200"})).await;
        assert!(filled.is_error, "{}", filled.content);
        assert!(filled.content.contains("No space left on device"), "{}", filled.content);
        let refused = run(&mut coder, "write_file", json!({"path": "more.txt", "content": "x".repeat(1 << 20)})).await;
        assert!(refused.is_error && refused.content.contains("the workspace is full"), "{}", refused.content);
        assert!(allocated(&session.join("workspace.img")) <= CAP, "the image took more than the cap");
        let freed = run(&mut coder, "exec", json!({"command": "rm big && echo freed"})).await;
        assert!(freed.content.contains("freed"), "{}", freed.content);
        let wrote = run(&mut coder, "write_file", json!({"path": "more.txt", "content": "fits now"})).await;
        assert!(!wrote.is_error, "{}", wrote.content);
    });
    assert_eq!(std::fs::read_to_string(session.join("data/more.txt")).expect("on the host"), "fits now");
    drop(lingering);
    drop(daemon);

    // Where the daemon cannot give the workspace a filesystem, the runner holds the cap.
    let daemon = TestDaemon::start(capped("checked")).expect("daemon starts");
    let (lingering, mut coder) = agent(&daemon, &rt, "coder");
    let data = daemon.data_dir.join("sessions/self-test/data");
    rt.block_on(async {
        let kept = run(&mut coder, "write_file", json!({"path": "notes.txt", "content": "from an earlier call"})).await;
        assert!(!kept.is_error, "{}", kept.content);
        let filled = run(
            &mut coder,
            "exec",
            json!({"command": "dd if=/dev/zero of=big bs=1M count=100 2>/dev/null; echo wrote"}),
        )
        .await;
        assert!(filled.is_error, "{}", filled.content);
        assert!(
            filled.content.contains("went past its cap of 64 MiB") && filled.content.contains("/workspace/big"),
            "{}",
            filled.content
        );
    });
    assert!(!data.join("big").exists(), "the excess was removed");
    assert_eq!(std::fs::read_to_string(data.join("notes.txt")).expect("kept"), "from an earlier call");
    assert!(allocated_under(&data) <= CAP, "{} bytes", allocated_under(&data));
    assert!(!daemon.data_dir.join("sessions/self-test/workspace.img").exists());
    drop(lingering);
}

/// The IPC folder of the self-test session's Coder tool container, on the host.
fn coder_ipc(daemon: &TestDaemon) -> PathBuf {
    daemon.data_dir.join("data/ipc/user-baaaht-self-test/coder-self-test")
}

fn a_coder_filling_its_ipc_folder_takes_at_most_its_cap_and_the_folder_goes_with_its_container(tier: Tier) {
    let rt = baaaht_tests::runtime();
    // Tool containers idle for 2 s are removed: the folder must go with them.
    let config = "tools:\n  warm_idle_timeout: 2\n";
    let daemon = TestDaemon::start(tier.options(DaemonOptions {
        files: vec![("config/config.yaml".into(), config.into())],
        ..DaemonOptions::default()
    }))
    .expect("daemon starts");
    let (lingering, mut coder) = agent(&daemon, &rt, "coder");
    let folder = coder_ipc(&daemon);
    rt.block_on(async {
        let filled = run(
            &mut coder,
            "exec",
            json!({"command": "dd if=/dev/zero of=/ipc/results/big.bin bs=1M count=1500; head -c 3000000 /dev/zero > /ipc/results/junk.json; ls /ipc/results"}),
        )
        .await;
        assert!(filled.content.contains("No space left on device"), "{}", filled.content);
        // What the container wrote is in memory of the folder's size, not on the host's disk.
        let parent = std::fs::metadata(folder.parent().expect("parent")).expect("stat").dev();
        assert_ne!(std::fs::metadata(&folder).expect("stat").dev(), parent, "the folder is a filesystem of its own");
        assert!(allocated_under(&folder) <= 16 << 20, "{} bytes", allocated_under(&folder));
    });
    // The container goes when idle, and its folder after it; nothing big was kept aside.
    let deadline = Instant::now() + Duration::from_secs(60);
    while folder.exists() {
        assert!(Instant::now() < deadline, "the IPC folder outlived its container\n{}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let rejected = daemon.data_dir.join("data/state/ipc-rejected");
    assert!(allocated_under(&rejected) < 1 << 20, "{} bytes kept aside", allocated_under(&rejected));
    drop(lingering);

    // Where the daemon cannot mount, the runner holds the folder to its cap.
    let daemon = TestDaemon::start(capped("checked")).expect("daemon starts");
    let (lingering, mut coder) = agent(&daemon, &rt, "coder");
    let folder = coder_ipc(&daemon);
    rt.block_on(async {
        let filled = run(
            &mut coder,
            "exec",
            json!({"command": "dd if=/dev/zero of=/ipc/results/big.bin bs=1M count=40 2>/dev/null; echo wrote"}),
        )
        .await;
        assert!(filled.is_error, "{}", filled.content);
        assert!(filled.content.contains("the IPC folder went past its cap of 16 MiB"), "{}", filled.content);
    });
    assert!(!folder.join("results/big.bin").exists(), "the excess was removed");
    drop(lingering);
}

fn special_files_are_refused_at_once(tier: Tier) {
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(tier.options(DaemonOptions::default())).expect("daemon starts");
    let (lingering, mut coder) = agent(&daemon, &rt, "coder");
    rt.block_on(async {
        run(&mut coder, "exec", json!({"command": "mkfifo pipe && mkdir tree && mkfifo tree/.gitignore"})).await;
        let started = Instant::now();
        let read = run(&mut coder, "read_file", json!({"path": "pipe"})).await;
        assert!(read.is_error && read.content.contains("not a regular file but a FIFO"), "{}", read.content);
        for tool in ["grep", "find"] {
            let walked = run(&mut coder, tool, json!({"pattern": "x"})).await;
            assert!(walked.is_error && walked.content.contains("tree/.gitignore"), "{tool}: {}", walked.content);
        }
        assert!(started.elapsed() < Duration::from_secs(5), "a call waited on a FIFO: {:?}", started.elapsed());
    });
    drop(lingering);
}

fn container_max_concurrent_queues_then_refuses_with_a_sentence(tier: Tier) {
    let options = DaemonOptions {
        files: vec![("config/config.yaml".into(), "container:\n  max_concurrent: 2\n  queue_timeout: 8\n".into())],
        ..DaemonOptions::default()
    };
    let daemon = TestDaemon::start(tier.options(options)).expect("daemon starts");
    let first = daemon.lingering_agent("coder", Some("one"), &[]).expect("first");
    let second = daemon.lingering_agent("coder", Some("two"), &[]).expect("second");
    let doctor = |session: &str| {
        std::process::Command::new(bin("baaaht"))
            .args(["doctor", "--role", "worker", "--session", session])
            .env("BAAAHT_SOCKET", daemon.socket())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run baaaht doctor")
    };
    const WAITING: &str = "every container slot is busy; waiting for one";
    let refused = doctor("three").wait_with_output().expect("doctor");
    let said = format!("{}{}", String::from_utf8_lossy(&refused.stderr), String::from_utf8_lossy(&refused.stdout));
    assert!(!refused.status.success(), "{said}");
    assert!(said.contains("all 2 container slots (container.max_concurrent) stayed busy for 8 s"), "{said}");
    let running = docker(&["ps", "--filter", "label=baaaht.session=three", "-q"]).expect("docker ps");
    assert!(running.trim().is_empty(), "a third container ran: {running}");
    // A slot that frees up while a start waits is taken.
    let queued = doctor("four");
    wait_for_log(&daemon, WAITING, 2);
    drop(first);
    let served = queued.wait_with_output().expect("doctor");
    assert!(served.status.success(), "{}", String::from_utf8_lossy(&served.stderr));
    drop(second);
}

#[test]
fn config_check_refuses_what_would_open_the_sandbox() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("config")).expect("mkdir");
    let check = |file: &str, text: &str| {
        std::fs::write(data.join("config").join(file), text).expect("write");
        let output = std::process::Command::new(bin("baaahtd"))
            .args(["config", "check"])
            .env("BAAAHT_DATA", &data)
            .output()
            .expect("run baaahtd config check");
        std::fs::remove_file(data.join("config").join(file)).expect("remove");
        (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let cases = [
        ("config.yaml", "tools:\n  web_proxy:\n    allow: [\"169.254.169.254\"]\n".to_string(), "can never be allowed"),
        (
            "config.yaml",
            "container:\n  resource_limits:\n    memory: 0\n".to_string(),
            "memory: 0 would let no container run",
        ),
        (
            "config.yaml",
            "container:\n  resource_limits:\n    pids: 0\n".to_string(),
            "pids: 0 would let no container run",
        ),
        (
            "mount-allowlist.json",
            r#"{"allowedMounts": [{"hostPath": "/var/run/docker.sock", "containerPath": "/project/d"}]}"#.to_string(),
            "the container engine's socket",
        ),
        (
            "mount-allowlist.json",
            format!(
                r#"{{"allowedMounts": [{{"hostPath": "{}", "containerPath": "/project/d"}}]}}"#,
                dir.path().display()
            ),
            "the data dir",
        ),
    ];
    let system = [
        ("/proc", "/proc"),
        ("/sys/fs/cgroup", "/sys"),
        ("/dev", "/dev"),
        ("/etc", "/etc"),
        ("/var/lib/docker/volumes", "/var/lib/docker"),
        ("/var/lib", "/var/lib/docker"),
        ("/run/containerd/containerd.sock", "/run"),
    ]
    .map(|(host, says)| {
        (
            "mount-allowlist.json",
            format!(r#"{{"allowedMounts": [{{"hostPath": "{host}", "containerPath": "/project/d"}}]}}"#),
            says,
        )
    });
    let cases = cases.into_iter().chain(system);
    for (file, text, says) in cases {
        let (code, stderr) = check(file, &text);
        assert_eq!(code, Some(78), "{file}: {text}: {stderr}");
        assert!(stderr.contains(says), "{file}: {text}: {stderr}");
    }
}

/// From inside a Coder's tool container: the kernel is the host's under runc and gVisor's
/// under gVisor (`uname -r`, /proc/version), a system call our seccomp profile forbids is
/// refused with its EPERM in both (under gVisor, by the profile applied inside the sandbox:
/// without it gVisor's kernel answers EINVAL), and `baaaht doctor` says the same.
fn the_kernel_inside_is_the_tiers_and_the_seccomp_profile_holds_there(tier: Tier) {
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(tier.options(DaemonOptions::default())).expect("daemon starts");
    let (lingering, mut coder) = agent(&daemon, &rt, "coder");
    let host_kernel = std::fs::read_to_string("/proc/version").expect("the host's /proc/version");
    let probe = "uname -r; head -n 1 /proc/version; python3 -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); \
                 r = libc.personality(0xffffffff); print(\"personality\", r, os.strerror(ctypes.get_errno())); \
                 r = libc.ptrace(0, 0, None, None); print(\"ptrace\", r, os.strerror(ctypes.get_errno()))'; ls -l /proc/version";
    let inside = rt.block_on(run(&mut coder, "exec", json!({"command": probe})));
    assert!(inside.content.starts_with("exit code 0\n"), "{}", inside.content);
    let gvisor_kernel = inside.content.contains("Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016");
    match tier {
        Tier::Runc => {
            assert!(!gvisor_kernel, "{}", inside.content);
            assert!(inside.content.contains(host_kernel.trim()), "not the host's kernel: {}", inside.content);
        }
        Tier::Gvisor => {
            assert!(gvisor_kernel, "not gVisor's kernel: {}", inside.content);
            assert!(!inside.content.contains(host_kernel.trim()), "{}", inside.content);
        }
    }
    assert!(inside.content.contains("personality -1 Operation not permitted"), "{}", inside.content);
    assert!(inside.content.contains("ptrace -1 Operation not permitted"), "{}", inside.content);
    let said = daemon.cli(&["doctor", "--role", "coder"]);
    let expected = match tier {
        Tier::Runc => "[ok  ] started under runc, runs on the host's kernel",
        Tier::Gvisor => "[ok  ] started under gvisor, runs on gVisor's kernel",
    };
    assert!(said.contains(expected) && said.contains("confined as designed"), "{said}");
    drop(lingering);
}
