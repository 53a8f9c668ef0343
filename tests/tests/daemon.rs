//! The real `baaahtd` and `baaaht` binaries on a temporary data dir: what a person running them
//! would see.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use baaaht_proto::client::{self, ConnectOptions};
use baaaht_proto::v1;
use baaaht_tests::{bin, DaemonOptions, TestDaemon};

fn baaaht(daemon: &TestDaemon, args: &[&str]) -> std::process::Output {
    Command::new(bin("baaaht")).args(args).env("BAAAHT_SOCKET", daemon.socket()).output().expect("run baaaht")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn status_over_the_socket() {
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let output = baaaht(&daemon, &["status"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    assert!(
        stdout.starts_with(&format!("baaahtd {} (pid {}), up ", env!("CARGO_PKG_VERSION"), daemon.pid())),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("data dir:    {}", daemon.data_dir.display())), "{stdout}");
    assert!(stdout.contains("engine:      "), "{stdout}");
    assert!(stdout.contains("sessions:    0 active, 0 idle, 0 archived"), "{stdout}");
    assert!(stdout.contains("containers:  0 running"), "{stdout}");

    let output = baaaht(&daemon, &["status", "--json"]);
    assert!(output.status.success());
    let stdout = text(&output.stdout);
    assert!(stdout.contains(&format!("\"pid\": {}", daemon.pid())), "{stdout}");
    assert!(stdout.contains("\"metrics_address\": \"127.0.0.1:"), "{stdout}");
}

#[test]
fn a_missing_daemon_is_one_clear_sentence() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("none.sock");
    let output = Command::new(bin("baaaht")).args(["status", "--socket"]).arg(&socket).output().expect("run");
    assert_eq!(output.status.code(), Some(69));
    let stderr = text(&output.stderr);
    assert_eq!(
        stderr.trim(),
        format!(
            "baaaht: daemon not running at {}; start it with `baaahtd` (or `scripts/up`, or `systemctl start baaaht`), \
             or point --socket / BAAAHT_SOCKET at its socket",
            socket.display()
        )
    );
}

#[test]
fn data_dir_is_private_and_the_socket_is_0660_or_stricter() {
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let mode = |path: &std::path::Path| std::fs::metadata(path).expect("stat").permissions().mode() & 0o777;
    let socket_mode = mode(&daemon.socket());
    assert_eq!(socket_mode & !0o660, 0, "socket mode {socket_mode:o}");
    assert_eq!(mode(&daemon.data_dir), 0o700);
    for sub in ["agents/assistant/SOUL.md", "agents/coder/IDENTITY.md", "skills/code-review/SKILL.md"] {
        assert!(daemon.data_dir.join(sub).is_file(), "{sub} was not installed");
    }
    for sub in ["users", "groups", "sessions", "data/ipc/system", "data/logs", "data/state", "config"] {
        assert!(daemon.data_dir.join(sub).is_dir(), "{sub} missing");
    }
}

#[test]
fn a_second_daemon_on_the_same_dir_refuses_to_start() {
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let output = Command::new(bin("baaahtd"))
        .env("BAAAHT_DATA", &daemon.data_dir)
        .env("BAAAHT__METRICS__LISTEN", "127.0.0.1:0")
        .output()
        .expect("run second daemon");
    assert_eq!(output.status.code(), Some(75));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "another baaahtd (pid {}) is already serving {}: stop it first",
            daemon.pid(),
            daemon.data_dir.display()
        )),
        "{stderr}"
    );
    // The first one is unharmed.
    assert!(baaaht(&daemon, &["status"]).status.success());
}

#[test]
fn sigterm_drains_exits_zero_and_removes_the_socket() {
    let mut daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let socket = daemon.socket();
    assert!(socket.exists());
    let started = std::time::Instant::now();
    daemon.signal("TERM").expect("SIGTERM");
    let status = daemon.wait_exit(Duration::from_secs(20)).expect("stops");
    assert_eq!(status.code(), Some(0));
    // The default drain deadline is 10 s; an idle daemon stops at once.
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert!(!socket.exists(), "socket left behind");
    // The audit log is on disk when the daemon has gone: its first record (the configuration
    // it started with) is there to read without it.
    let audit = daemon.data_dir.join("data/logs/audit");
    let days: Vec<String> = std::fs::read_dir(&audit)
        .expect("the audit folder")
        .flatten()
        .map(|entry| std::fs::read_to_string(entry.path()).expect("an audit day"))
        .collect();
    assert!(days.concat().contains("\"kind\":\"config\""), "{days:?}");
}

#[test]
fn a_stale_socket_from_a_crash_is_replaced() {
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let data_dir = daemon.data_dir.clone();
    let socket = daemon.socket();
    daemon.signal("KILL").expect("kill -9");
    let mut daemon = daemon;
    daemon.wait_exit(Duration::from_secs(10)).expect("dies");
    assert!(socket.exists(), "a killed daemon leaves its socket");
    let notify = daemon.temp.path().join("notify2");
    let datagram = std::os::unix::net::UnixDatagram::bind(&notify).expect("notify socket");
    datagram.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut child = baaaht_tests::daemon_command(&data_dir, &notify, &DaemonOptions::default())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("restart");
    let mut buffer = [0u8; 256];
    let n = datagram.recv(&mut buffer).expect("READY=1 after restart");
    assert!(text(&buffer[..n]).contains("READY=1"));
    let output = baaaht(&daemon, &["status"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    child.kill().expect("kill");
    child.wait().expect("reap");
}

#[test]
fn a_malformed_config_names_file_line_and_column() {
    let temp = tempfile::tempdir().expect("tempdir");
    let config = temp.path().join("bad.yaml");
    std::fs::write(&config, "system:\n  name: home\ncontainer:\n  runtime: dokcer\n").expect("write");
    let output = Command::new(bin("baaahtd"))
        .arg("--config")
        .arg(&config)
        .env("BAAAHT_DATA", temp.path().join("d"))
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(78));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!("{}:4:12: container.runtime: unknown variant `dokcer`", config.display())),
        "{stderr}"
    );
    assert!(stderr.contains("did you mean `docker`?"), "{stderr}");
    assert!(!temp.path().join("d").exists(), "a bad config must not create the data dir");

    // The same mistake in the data dir's own config.yaml.
    let data_dir = temp.path().join("d2");
    std::fs::create_dir_all(data_dir.join("config")).expect("mkdir");
    std::fs::write(data_dir.join("config/config.yaml"), "metrics:\n  enabeld: true\n").expect("write");
    let output = Command::new(bin("baaahtd")).env("BAAAHT_DATA", &data_dir).output().expect("run");
    assert_eq!(output.status.code(), Some(78));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("config/config.yaml:2:3: metrics: unknown field `enabeld`"), "{stderr}");
    assert!(stderr.contains("did you mean `enabled`?"), "{stderr}");
}

#[test]
fn env_overrides_change_the_effective_config() {
    let temp = tempfile::tempdir().expect("tempdir");
    let output = Command::new(bin("baaahtd"))
        .args(["config", "check"])
        .env("BAAAHT_DATA", temp.path())
        .env("BAAAHT__AGENTS__ASSISTANT__MODEL", "openai/gpt-4o")
        .env("BAAAHT__SYSTEM__ADMIN_USERS", r#"["billm","alice"]"#)
        .output()
        .expect("config check");
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(stdout.contains("model: openai/gpt-4o"), "{stdout}");
    assert!(stdout.contains("- billm\n") && stdout.contains("- alice\n"), "{stdout}");
    assert!(stdout.contains("# environment overrides: BAAAHT__AGENTS__ASSISTANT__MODEL, BAAAHT__SYSTEM__ADMIN_USERS"));

    // A running daemon honours them too: metrics switched off.
    let daemon = TestDaemon::start(DaemonOptions {
        env: vec![("BAAAHT__METRICS__ENABLED".into(), "false".into())],
        ..Default::default()
    })
    .expect("daemon starts");
    let stdout = text(&baaaht(&daemon, &["status"]).stdout);
    assert!(stdout.contains("metrics:     off"), "{stdout}");

    // A bad override is refused with the variable's name.
    let output = Command::new(bin("baaahtd"))
        .args(["config", "check"])
        .env("BAAAHT_DATA", temp.path())
        .env("BAAAHT__TOOLS__DEFAULT_TIMEOUT", "eighty")
        .output()
        .expect("config check");
    assert_eq!(output.status.code(), Some(78));
    assert!(text(&output.stderr).contains("environment variable BAAAHT__TOOLS__DEFAULT_TIMEOUT: invalid type"));
}

#[test]
fn the_specifications_settings_kept_elsewhere_are_refused_with_where_they_live_and_the_rest_work() {
    // Each refused with where it lives now, at its line, by the real binary.
    let cases = [
        (
            "channels:\n  slack:\n    enabled: true\n    workspaces:\n      - {name: home, bot_token: x, app_token: y, trigger_pattern: '^@baaaht'}\n",
            "config.yaml:1:1: unknown field `channels`",
            "baaahtd gateways add slack NAME --team ID -- --keyword WORD",
        ),
        ("container:\n  default_timeout: 300\n", "config.yaml:2:3:", "a turn's limit is agents.ROLE.timeout"),
        (
            "orchestrator:\n  poll_intervals:\n    messages: 2000\n",
            "config.yaml:3:5:",
            "set that instead, and remove poll_intervals.messages",
        ),
        ("skills:\n  auto_discover: false\n", "config.yaml:2:3:", "auto_discover: false is not offered"),
        ("sessions:\n  archival:\n    archive_storage: s3\n", "config.yaml:3:5:", "only `local` is offered"),
    ];
    for (config, place, sentence) in cases {
        let temp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(temp.path().join("config")).expect("mkdir");
        std::fs::write(temp.path().join("config/config.yaml"), config).expect("write");
        let output = Command::new(bin("baaahtd"))
            .args(["config", "check"])
            .env("BAAAHT_DATA", temp.path())
            .output()
            .expect("config check");
        let said = text(&output.stderr);
        assert_eq!(output.status.code(), Some(78), "{config}: {said}");
        assert!(said.contains(place) && said.contains(sentence), "{config}: {said}");
    }
    // The shipped example, every key at its default, is accepted as it is.
    let temp = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(temp.path().join("config")).expect("mkdir");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../config/config.yaml"),
        temp.path().join("config/config.yaml"),
    )
    .expect("copy");
    let output =
        Command::new(bin("baaahtd")).args(["config", "check"]).env("BAAAHT_DATA", temp.path()).output().expect("check");
    assert!(output.status.success(), "{}", text(&output.stderr));
    // The kept ones work: the server's name is shown by `baaaht status`.
    let daemon = TestDaemon::start(DaemonOptions {
        env: vec![("BAAAHT__SYSTEM__NAME".into(), "the-house".into())],
        ..Default::default()
    })
    .expect("daemon starts");
    let stdout = text(&baaaht(&daemon, &["status"]).stdout);
    assert!(stdout.contains("name:        the-house"), "{stdout}");
}

#[test]
fn config_check_refuses_bad_egress_rules_saying_where_and_why() {
    let temp = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(temp.path().join("users/alice")).expect("mkdir");
    std::fs::create_dir_all(temp.path().join("config")).expect("mkdir");
    std::fs::write(
        temp.path().join("users/alice/egress.yaml"),
        "rules:\n  - host: '*'\n    action: allow\n  - host: '*.com'\n    action: allow\n  - host: 169.254.169.254\n    action: allow\n  - host: pypi.org\n    action: allow\n",
    )
    .expect("write");
    std::fs::write(temp.path().join("config/egress.yaml"), "rules:\n  - host: github.com\n    action: alow\n")
        .expect("write");
    std::fs::write(
        temp.path().join("users/alice/credentials.yaml"),
        "credentials:\n  - name: GITHUB_TOKEN\n    hosts: ['*.com']\n  - name: lower_case\n    hosts: [github.com]\n",
    )
    .expect("write");
    let output =
        Command::new(bin("baaahtd")).args(["config", "check"]).env("BAAAHT_DATA", temp.path()).output().expect("run");
    assert_eq!(output.status.code(), Some(78), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    let config = temp.path().join("config/egress.yaml").display().to_string();
    let alice = temp.path().join("users/alice/egress.yaml").display().to_string();
    assert!(stderr.contains(&format!("{config}:3:13:")) && stderr.contains("unknown variant `alow`"), "{stderr}");
    assert!(stderr.contains(&format!("{alice}:2:11: `*`: `*` is allowed only as `*.domain`")), "{stderr}");
    assert!(
        stderr.contains(&format!("{alice}:4:11: `*.com` would cover every name under a top-level domain")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{alice}:6:11: `169.254.169.254` is never reachable from a container")),
        "{stderr}"
    );
    assert!(!stderr.contains("pypi.org"), "{stderr}");
    let credentials = temp.path().join("users/alice/credentials.yaml").display().to_string();
    assert!(stderr.contains(&format!("{credentials}:2: `*.com` would cover every name")), "{stderr}");
    assert!(stderr.contains(&format!("{credentials}:4: `lower_case` is not a credential's name")), "{stderr}");
    std::fs::write(
        temp.path().join("users/alice/credentials.yaml"),
        "credentials:\n  - name: GITHUB_TOKEN\n    hosts: [github.com, api.github.com]\n",
    )
    .expect("write");
    // Fixed, it passes.
    std::fs::write(temp.path().join("users/alice/egress.yaml"), "rules:\n  - host: pypi.org\n    action: allow\n")
        .expect("write");
    std::fs::write(temp.path().join("config/egress.yaml"), "rules:\n  - host: '*.github.com'\n    action: ask\n")
        .expect("write");
    let output =
        Command::new(bin("baaahtd")).args(["config", "check"]).env("BAAAHT_DATA", temp.path()).output().expect("run");
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[test]
fn config_check_redacts_secrets() {
    let temp = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(temp.path().join("config")).expect("mkdir");
    std::fs::write(
        temp.path().join("config/providers.yaml"),
        "providers:\n  anthropic:\n    api_key: sk-ant-secret-value\n    default: true\n  openai:\n    api_key: ${OPENAI_API_KEY}\n",
    )
    .expect("write");
    let output =
        Command::new(bin("baaahtd")).args(["config", "check"]).env("BAAAHT_DATA", temp.path()).output().expect("run");
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(!stdout.contains("sk-ant-secret-value"), "{stdout}");
    assert!(stdout.contains("api_key: <redacted>") && stdout.contains("${OPENAI_API_KEY}"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_unauthenticated_and_correlation_ids_round_trip() {
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let options = ConnectOptions { token: Some("not-a-real-token".into()), ..Default::default() };
    let mut client = client::connect(&daemon.socket(), options).await.expect("connect");
    let error = client.system.get_status(v1::StatusRequest::default()).await.expect_err("refused");
    assert_eq!(error.code(), tonic::Code::Unauthenticated, "{error:?}");
    assert_eq!(error.message(), "unknown or revoked container token");

    let options = ConnectOptions { correlation_id: Some("turn-1234".into()), ..Default::default() };
    let mut client = client::connect(&daemon.socket(), options).await.expect("connect");
    let response = client.system.get_status(v1::StatusRequest::default()).await.expect("status");
    let echoed = response.metadata().get("x-correlation-id").and_then(|v| v.to_str().ok());
    assert_eq!(echoed, Some("turn-1234"));

    // An agent-side RPC from a host client names what it is for.
    let error = client.agents.stream_llm(v1::LlmRequest::default()).await.expect_err("host cannot stream");
    assert_eq!(error.code(), tonic::Code::PermissionDenied);
    // A request that is not complete says what is missing, in a sentence.
    let task = v1::TaskDefinition { user_id: "alice".into(), ..Default::default() };
    let error = client.tasks.schedule_task(task).await.expect_err("no prompt");
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(error.message().starts_with("prompt: say what the agent should do"), "{}", error.message());

    // The refusal was logged with the caller's correlation id.
    let log = daemon.log_text();
    let refused = log.lines().find(|line| line.contains("unknown or revoked container token")).expect("logged");
    assert!(refused.contains("\"correlation_id\""), "{refused}");
}

#[test]
fn another_uid_is_refused() {
    assert!(
        std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).ok() == Some(0),
        "this test switches the client to uid 65534 (nobody) and must run as root, as scripts/test does"
    );
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    let as_nobody = |daemon: &TestDaemon| {
        Command::new(bin("baaaht"))
            .arg("status")
            .env("BAAAHT_SOCKET", daemon.socket())
            .uid(65534)
            .gid(65534)
            .output()
            .expect("run as nobody")
    };
    // Make the binary's folders reachable for nobody if they are not.
    let mut dir = bin("baaaht");
    while dir.pop() && dir != std::path::Path::new("/") {
        let mode = std::fs::metadata(&dir).expect("stat").permissions().mode();
        if mode & 0o001 == 0 {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode | 0o011)).expect("chmod");
        }
    }

    // First line of defence: the filesystem (data dir 0700, socket 0660).
    let output = as_nobody(&daemon);
    assert_eq!(output.status.code(), Some(77), "{}", text(&output.stderr));
    assert!(text(&output.stderr).contains("permission denied on"), "{}", text(&output.stderr));

    // Second: the daemon's own peer-credential check, even when the socket is reachable.
    for path in [
        daemon.temp.path(),
        daemon.data_dir.as_path(),
        &daemon.data_dir.join("data"),
        &daemon.data_dir.join("data/ipc"),
    ] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o711)).expect("chmod dir");
    }
    std::fs::set_permissions(daemon.socket(), std::fs::Permissions::from_mode(0o666)).expect("chmod socket");
    let output = as_nobody(&daemon);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(77), "{stderr}");
    assert!(stderr.contains("the daemon refused: uid 65534 may not use this socket: only root and uid 0"), "{stderr}");
}

#[test]
fn metrics_are_served_on_loopback() {
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon starts");
    assert!(baaaht(&daemon, &["status"]).status.success());
    let output = baaaht(&daemon, &["status", "--json"]);
    let json = text(&output.stdout);
    let address = json
        .lines()
        .find_map(|line| line.trim().strip_prefix("\"metrics_address\": \""))
        .and_then(|rest| rest.strip_suffix("\","))
        .expect("metrics address in status")
        .to_string();
    assert!(address.starts_with("127.0.0.1:"), "{address}");
    let mut stream = std::net::TcpStream::connect(&address).expect("connect to metrics");
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").expect("send");
    let mut body = String::new();
    stream.read_to_string(&mut body).expect("read");
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(body.contains("baaaht_uptime_seconds "), "{body}");
    assert!(body.contains("baaaht_rpc_requests_total{method=\"GetStatus\",code=\"0\"} 2"), "{body}");
    assert!(body.contains("baaaht_rpc_duration_seconds_count{method=\"GetStatus\"} 2"), "{body}");
}
