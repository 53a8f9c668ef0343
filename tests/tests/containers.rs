//! The real `baaahtd` and `baaaht` with a real container engine: `baaaht doctor`, and a daemon
//! killed with SIGKILL while its containers run leaves none of them unaccounted for.

use std::process::Command;
use std::time::{Duration, Instant};

use baaaht_proto::client::{self, ConnectOptions};
use baaaht_proto::v1;
use baaaht_tests::{bin, DaemonOptions, TestDaemon};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Names of the containers carrying `label`, running or not, from the engine itself.
fn containers_with(label: &str) -> Vec<String> {
    let output = Command::new("docker")
        .args(["ps", "-a", "--filter", &format!("label={label}"), "--format", "{{.Names}}"])
        .output()
        .expect("the docker CLI runs (scripts/test installs the engine)");
    assert!(output.status.success(), "docker ps failed: {}", text(&output.stderr));
    text(&output.stdout).lines().map(str::to_string).collect()
}

#[test]
fn doctor_reports_a_confined_container() {
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let output = Command::new(bin("baaaht"))
        .args(["doctor", "--role", "coder"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("doctor");
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}\n{}", text(&output.stderr), daemon.log_text());
    assert!(stdout.starts_with("self-test of a coder container (baaaht-coder-"), "{stdout}");
    for line in [
        "[ok  ] runs as 1000:1000",
        "[ok  ] no capabilities",
        "[ok  ] seccomp filter",
        "[ok  ] read-only root filesystem",
        "[ok  ] network interfaces: lo",
        "[ok  ] ptrace refused",
        "[ok  ] its own daemon socket answers",
        "confined as designed",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in\n{stdout}");
    }
}

#[test]
fn a_killed_daemon_leaves_no_container_unaccounted_for() {
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let runtime = baaaht_tests::runtime();
    // Three self-tests that linger, so their containers run when the daemon dies.
    let socket = daemon.socket();
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let socket = socket.clone();
            runtime.spawn(async move {
                let mut client = client::connect(&socket, ConnectOptions::default()).await?;
                let request = v1::SelfTestRequest { linger_seconds: 300, ..v1::SelfTestRequest::default() };
                client.system.run_self_test(request).await.map(|_| ()).map_err(anyhow::Error::from)
            })
        })
        .collect();
    let inventory = daemon.data_dir.join("data/state/containers.json");
    let deadline = Instant::now() + Duration::from_secs(60);
    let names: Vec<String> = loop {
        let recorded: Vec<String> = std::fs::read_to_string(&inventory)
            .ok()
            .and_then(|text| serde_json_names(&text))
            .unwrap_or_default()
            .into_iter()
            .filter(|name| name.starts_with("baaaht-tool-"))
            .collect();
        let running = containers_with("baaaht.session=self-test");
        if recorded.len() >= 3 && recorded.iter().all(|name| running.contains(name)) {
            break recorded;
        }
        assert!(Instant::now() < deadline, "containers did not start: {recorded:?}\n{}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(50));
    };

    daemon.signal("KILL").expect("kill -9");
    let mut daemon = daemon;
    daemon.wait_exit(Duration::from_secs(10)).expect("dies");
    for call in calls {
        call.abort();
    }
    let alive = containers_with("baaaht.session=self-test");
    assert!(names.iter().all(|name| alive.contains(name)), "containers died with the daemon: {alive:?}");

    // Restart on the same data dir: every container of the dead daemon is removed.
    let restarted = TestDaemon::start(DaemonOptions { data_dir: Some(daemon.data_dir.clone()), ..Default::default() })
        .expect("restarts");
    // The daemon removes an orphan's container, then its socket folder: both go, in that order.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left: Vec<String> =
            containers_with("baaaht.session=self-test").into_iter().filter(|name| names.contains(name)).collect();
        let folders: Vec<&String> =
            names.iter().filter(|name| daemon.data_dir.join("data/run").join(name).exists()).collect();
        if left.is_empty() && folders.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left unaccounted for: {left:?}, socket folders left behind: {folders:?}\n{}",
            restarted.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = restarted.log_text();
    assert!(log.contains("removed an orphaned container"), "{log}");
    let recorded =
        std::fs::read_to_string(&inventory).ok().and_then(|text| serde_json_names(&text)).unwrap_or_default();
    assert!(recorded.iter().all(|name| !names.contains(name)), "still recorded: {recorded:?}");
    assert!(restarted.stop().expect("stops").success());
}

/// The `name` fields of a containers.json inventory.
fn serde_json_names(text: &str) -> Option<Vec<String>> {
    let names = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("\"name\": \""))
        .filter_map(|rest| rest.strip_suffix("\","))
        .map(str::to_string)
        .collect();
    Some(names)
}

#[test]
fn without_an_engine_the_daemon_serves_degraded_and_refuses_container_work_with_a_sentence() {
    let daemon = TestDaemon::start(DaemonOptions {
        env: vec![("BAAAHT__CONTAINER__SOCKET".into(), "/nonexistent/engine.sock".into())],
        ..Default::default()
    })
    .expect("daemon starts without an engine");
    let status =
        Command::new(bin("baaaht")).arg("status").env("BAAAHT_SOCKET", daemon.socket()).output().expect("status");
    let stdout = text(&status.stdout);
    assert!(status.status.success(), "{stdout}");
    assert!(
        stdout.contains("engine:      none (degraded: no container engine at /nonexistent/engine.sock;"),
        "{stdout}"
    );
    assert!(stdout.contains("health:      degraded: no container engine at /nonexistent/engine.sock;"), "{stdout}");
    let doctor =
        Command::new(bin("baaaht")).arg("doctor").env("BAAAHT_SOCKET", daemon.socket()).output().expect("doctor");
    assert_eq!(doctor.status.code(), Some(70));
    let stderr = text(&doctor.stderr);
    assert!(stderr.contains("degraded: no container engine at /nonexistent/engine.sock; start dockerd"), "{stderr}");
    // A person writing meanwhile is told in a sentence, their message kept.
    let rt = baaaht_tests::runtime();
    let hello = baaaht_tests::scenario::message(baaaht_tests::scenario::user("alice"), "alice", "hello");
    let turn = baaaht_tests::scenario::turn_on(&rt, &daemon, hello);
    let said = turn.error.expect("the turn is refused");
    assert!(
        said.starts_with("baaaht could not answer: the container engine it runs its assistants in is not answering."),
        "{said}"
    );
    assert!(said.contains("Your message is kept"), "{said}");
}

#[test]
fn the_hosts_address_on_a_network_is_found_without_an_ipam_gateway() {
    // A network made without --gateway: the engine records no gateway in its IPAM config (as
    // Debian's dockerd does for the default bridge on a fresh start).
    let name = format!("baaaht-test-nogw-{}", std::process::id());
    baaaht_tests::docker(&["network", "create", "--subnet", "10.252.173.0/24", &name]).expect("network create");
    let ipam = baaaht_tests::docker(&["network", "inspect", &name, "--format", "{{json .IPAM.Config}}"]);
    let found = baaaht_tests::network_host_address(&name);
    let removed = baaaht_tests::docker(&["network", "rm", &name]);
    let ipam = ipam.expect("inspect");
    assert!(!ipam.contains("Gateway"), "the engine recorded a gateway after all: {ipam}");
    assert_eq!(found.expect("found"), "10.252.173.1".parse::<std::net::IpAddr>().expect("ip"));
    removed.expect("network rm");
    // The default bridge, whatever this engine records for it.
    let bridge = baaaht_tests::bridge_address().expect("the default bridge's address");
    assert!(!bridge.is_loopback() && !bridge.is_unspecified(), "{bridge}");
}
