//! A newcomer's first steps on the real binaries: `baaahtd setup` against a local
//! OpenAI-compatible server on the host's loopback (the fake provider), `config check`, and the
//! first chat with the defaults a newcomer gets: the LLM gateway in its container, reaching the
//! host's loopback through the daemon's relay.

use std::process::Command;
use std::time::Duration;

use baaaht_tests::fake_provider::{token_stream, FakeProvider, Wire};
use baaaht_tests::{bin, DaemonOptions, TestDaemon};

fn baaahtd(data: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(bin("baaahtd"))
        .args(args)
        .env("BAAAHT_DATA", data)
        .env_remove("BAAAHT_PASSPHRASE_FILE")
        .output()
        .expect("run baaahtd");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

#[test]
fn setup_against_a_local_server_writes_a_config_that_answers_the_first_chat() {
    let rt = baaaht_tests::runtime();
    let fake = rt
        .block_on(FakeProvider::start(vec![], Some(token_stream(Wire::OpenAi, 3, Duration::ZERO))))
        .expect("fake provider");
    let temp = tempfile::tempdir().expect("tempdir");
    let data = temp.path().join("d");
    let api_base = fake.api_base(Wire::OpenAi);

    let (code, _, said) =
        baaahtd(&data, &["setup", "--non-interactive", "--provider", "custom", "--api-base", &api_base]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("custom/fake-model answered in"), "the key and model were checked: {said}");
    assert!(said.contains("every agent now uses custom/fake-model"), "{said}");
    let port = fake.address.port();
    for folder in [data.clone(), data.join("config")] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&folder).expect("made").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{} holds secrets: only its owner may enter it", folder.display());
    }
    assert!(said.contains(&format!("baaahtd relays its connections to 127.0.0.1:{port} on this host")), "{said}");
    assert!(
        fake.requests().iter().any(|request| request.starts_with("POST /v1/chat/completions")),
        "one check request was sent"
    );

    let (code, shown, said) = baaahtd(&data, &["config", "check"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(shown.contains("# effective models: assistant custom/fake-model (agents.default_model),"), "{shown}");
    assert!(shown.contains("heartbeat custom/fake-model (agents.default_model)"), "{shown}");
    let (code, _, said) = baaahtd(&data, &["setup", "--check"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains(&format!("custom/fake-model at 127.0.0.1:{port} (the LLM gateway runs in a container")),
        "{said}"
    );

    // Running it again never loses a configuration: a change is shown and needs --yes.
    let config = std::fs::read_to_string(data.join("config/config.yaml")).expect("config.yaml");
    let (code, _, said) = baaahtd(
        &data,
        &["setup", "--non-interactive", "--provider", "custom", "--api-base", &api_base, "--model", "other-model"],
    );
    assert_eq!(code, Some(75), "{said}");
    assert!(said.contains("- ") && said.contains("+   default_model: custom/other-model"), "{said}");
    assert!(said.contains("run again with --yes"), "{said}");
    assert_eq!(std::fs::read_to_string(data.join("config/config.yaml")).expect("config.yaml"), config);

    // Without a key and no provider configured, setup --check says what to run.
    let empty = temp.path().join("empty");
    let (code, _, said) = baaahtd(&empty, &["setup", "--check"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("run `baaahtd setup`"), "{said}");

    // The daemon on that data dir, as it comes (the LLM gateway in its container), answers the
    // first chat from the server on the host's loopback.
    let daemon = TestDaemon::start(DaemonOptions { data_dir: Some(data.clone()), ..DaemonOptions::default() })
        .expect("daemon starts");
    let chat = |text: &str| {
        let chat = Command::new(bin("baaaht"))
            .args(["chat", text])
            .env("BAAAHT_SOCKET", daemon.socket())
            .output()
            .expect("baaaht chat");
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        (chat.status.success(), text(&chat.stdout), text(&chat.stderr))
    };
    let (answered, out, err) = chat("hello");
    assert!(answered, "{out}{err}\n{}", daemon.log_text());
    assert_eq!(out, "t0 t1 t2 \n");
    assert!(err.lines().last().is_some_and(|line| line.starts_with("(session s-")), "{err}");
    assert!(
        daemon.recorded_containers().iter().any(|name| name.starts_with("baaaht-llm_gateway-")),
        "the gateway ran in its container"
    );

    // With the server gone, the chat and the check say where nothing answers and what to do.
    drop(fake);
    let (answered, out, err) = chat("hello again");
    assert!(!answered, "{out}{err}");
    assert!(
        err.contains(&format!("nothing answers at 127.0.0.1:{port} on this host"))
            && err.contains("start the model server"),
        "{out}{err}\n{}",
        daemon.log_text()
    );
    let (code, _, said) = baaahtd(&data, &["setup", "--check"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("nothing answers there: start the model server"), "{said}");
}

#[test]
fn scripts_up_builds_a_missing_image_says_what_to_run_and_serves() {
    let image = format!("baaaht/up-test-{}:latest", std::process::id());
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let binaries = bin("baaahtd").parent().expect("the binaries' folder").to_path_buf();
    // The speech model is the one this test run made: scripts/up makes it only when it is missing.
    let model = baaaht_tests::voice::model().display().to_string();
    let env = vec![("BAAAHT__CONTAINER__IMAGE".into(), image.clone()), ("BAAAHT__VOICE__MODEL".into(), model)];
    let options = DaemonOptions { env, ..DaemonOptions::default() };
    let started = std::time::Instant::now();
    let daemon = TestDaemon::start_via(options, Duration::from_secs(600), |data_dir, notify, options| {
        // What `scripts/up` runs, with the binaries this test run built, on a fresh data dir.
        let mut command = Command::new(root.join("scripts/up"));
        baaaht_tests::daemon_environment(&mut command, data_dir, notify, options);
        command.current_dir(&root).env("BAAAHT_BIN_DIR", &binaries);
        command
    });
    let removed = baaaht_tests::docker(&["rmi", "-f", &image]);
    let daemon = daemon.expect("scripts/up serves");
    println!("scripts/up with the image missing, to serving: {:.1} s", started.elapsed().as_secs_f64());
    let log = daemon.log_text();
    assert!(log.contains("building the base image once"), "{log}");
    assert!(log.contains(&format!("{image}: built")), "{log}");
    assert!(log.contains("No model provider is usable yet") && log.contains("baaahtd setup && scripts/up"), "{log}");
    let status =
        Command::new(bin("baaaht")).arg("status").env("BAAAHT_SOCKET", daemon.socket()).output().expect("status");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    drop(daemon);
    removed.expect("the test image is removed");
}

#[test]
fn scripts_up_with_a_typo_in_the_configuration_says_so_before_anything_else() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let binaries = bin("baaahtd").parent().expect("the binaries' folder").to_path_buf();
    let temp = tempfile::tempdir().expect("tempdir");
    let data = temp.path().join("d");
    std::fs::create_dir_all(data.join("config")).expect("config folder");
    std::fs::write(data.join("config/config.yaml"), "agents:\n  defualt_model: custom/x\n").expect("config.yaml");
    let output = Command::new(root.join("scripts/up"))
        .current_dir(&root)
        .env("BAAAHT_BIN_DIR", &binaries)
        .env("BAAAHT_DATA", &data)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("scripts/up");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{said}");
    assert!(said.contains("defualt_model") && said.contains("default_model"), "the error and its fix: {said}");
    assert!(said.contains("fix the configuration (above), then run scripts/up again"), "{said}");
    assert!(!said.contains("base image"), "nothing else was started: {said}");
}

/// Whether the Podman service answers on the socket `scripts/lib.sh` starts it on.
fn podman_answers() -> bool {
    Command::new("curl")
        .args(["-sf", "--max-time", "5", "--unix-socket", "/run/podman/podman.sock", "http://d/_ping"])
        .output()
        .is_ok_and(|output| output.status.success())
}

/// The Ctrl-C that stops a script stops only what the script runs in the foreground: a
/// service it started (the Podman service here, started as `scripts/up` starts `dockerd`, by
/// the same `start_service`) goes on answering, in a session of its own.
#[test]
fn a_service_a_script_started_outlives_the_scripts_ctrl_c() {
    use std::os::unix::process::CommandExt as _;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // The service as this run started it goes; the script starts it again.
    let _ = Command::new("pkill").args(["-f", "podman system service"]).status(); // silent-ok: may be down
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while podman_answers() {
        assert!(std::time::Instant::now() < deadline, "the Podman service did not stop");
        std::thread::sleep(Duration::from_millis(200));
    }
    // As a terminal's script: SIGINT at its default, whatever this test's runner inherited (a
    // job started in the background of a non-interactive shell ignores it, and so would bash).
    let mut script = Command::new("env")
        .args(["--default-signal=INT", "bash", "-c", ". scripts/lib.sh && ensure_podman && exec sleep 300"])
        .current_dir(&root)
        .process_group(0)
        .spawn()
        .expect("bash");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !podman_answers() {
        assert!(std::time::Instant::now() < deadline, "ensure_podman did not start the service");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Ctrl-C: SIGINT to the terminal's foreground process group, the script's.
    let group = format!("-{}", script.id());
    assert!(Command::new("kill").args(["-INT", "--", &group]).status().expect("kill").success());
    let ended = script.wait().expect("the script ends");
    assert!(!ended.success(), "the script was interrupted: {ended:?}");
    // A service hit by the signal stops within moments: it answers all along the next seconds.
    for _ in 0..10 {
        assert!(podman_answers(), "the Podman service went down with the script's Ctrl-C");
        std::thread::sleep(Duration::from_millis(300));
    }
    let service = Command::new("pgrep").args(["-f", "podman system service"]).output().expect("pgrep");
    let service = String::from_utf8_lossy(&service.stdout).lines().next().unwrap_or_default().trim().to_string();
    let session = Command::new("ps").args(["-o", "sid=", "-p", &service]).output().expect("ps");
    let session = String::from_utf8_lossy(&session.stdout).trim().to_string();
    assert_eq!(session, service, "the service leads its own session");
}

/// The first command a newcomer runs makes the data dir: only its owner may enter it, nor any
/// folder made in it (the daemon would otherwise warn of what the quickstart itself did).
#[test]
fn a_data_dir_made_by_any_command_is_its_owners_alone() {
    use std::os::unix::fs::PermissionsExt as _;
    let temp = tempfile::tempdir().expect("tempdir");
    for args in [&["images", "build"][..], &["config", "check"], &["setup", "--check"]] {
        let data = temp.path().join(args.join("-"));
        let (code, _, said) = baaahtd(&data, args);
        if !data.exists() {
            continue;
        }
        let mut folders = vec![data.clone()];
        while let Some(folder) = folders.pop() {
            let mode = std::fs::metadata(&folder).expect("folder").permissions().mode() & 0o777;
            assert_eq!(
                mode,
                0o700,
                "`baaahtd {}` ({code:?}: {said}) made {} {mode:o}",
                args.join(" "),
                folder.display()
            );
            for entry in std::fs::read_dir(&folder).expect("read").flatten() {
                if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                    folders.push(entry.path());
                }
            }
        }
    }
    assert!(temp.path().join("images-build").is_dir(), "images build keeps its work in the data dir");
}

/// What a newcomer reads first says what each thing is: no command or argument undescribed,
/// no note of work in progress, every kind of gateway named.
#[test]
fn the_help_a_newcomer_reads_describes_everything_and_nothing_stale() {
    let help = |binary: &str, args: &[&str]| {
        let output = Command::new(bin(binary)).args(args).output().expect("help");
        assert!(output.status.success(), "{binary} {args:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let daemon = help("baaahtd", &["--help"]);
    assert!(daemon.starts_with("The baaaht daemon"), "a one-line description first: {daemon}");
    assert!(daemon.contains("(web, Slack, Telegram,"), "{daemon}");
    let client = help("baaaht", &["--help"]);
    assert!(!client.contains("in progress") && client.contains("The terminal client"), "{client}");
    let add = help("baaaht", &["mcp", "add", "--help"]).split_whitespace().collect::<Vec<_>>().join(" ");
    for described in [
        "its tools are offered as mcp__NAME__TOOL",
        "--user <ID> Act in this user's context",
        "--group <ID> Act in this group's context",
    ] {
        assert!(add.contains(described), "`{described}` in: {add}");
    }
    // Every argument of every command has its line.
    let commands = [
        &["mcp", "list"][..],
        &["tasks", "add"],
        &["memory", "list"],
        &["sessions", "list"],
        &["sessions", "new"],
        &["egress", "allow"],
        &["egress", "approve"],
        &["groups", "create"],
    ];
    for command in commands {
        let shown = help("baaaht", &[command, &["--help"]].concat());
        for line in shown.lines().filter(|line| line.trim_start().starts_with("--")) {
            let described = line.trim().split_once("  ").is_some_and(|(_, rest)| !rest.trim().is_empty());
            assert!(described, "`baaaht {}`: {line}", command.join(" "));
        }
    }
}

/// A daemon started before any provider was set up says to set one up (never a key the person
/// did not choose), and `setup` then says plainly that the running daemon must be restarted.
#[test]
fn a_daemon_started_before_setup_says_to_set_one_up_and_setup_says_to_restart_it() {
    let rt = baaaht_tests::runtime();
    let fake = rt
        .block_on(FakeProvider::start(vec![], Some(token_stream(Wire::OpenAi, 3, Duration::ZERO))))
        .expect("fake provider");
    let daemon = TestDaemon::start(DaemonOptions::default()).expect("daemon");
    let chat = Command::new(bin("baaaht"))
        .args(["chat", "hello"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht chat");
    let said = format!("{}{}", String::from_utf8_lossy(&chat.stdout), String::from_utf8_lossy(&chat.stderr));
    assert!(said.contains("run `baaahtd setup`") && !said.contains("API_KEY"), "{said}\n{}", daemon.log_text());
    let api_base = fake.api_base(Wire::OpenAi);
    let setup = ["setup", "--non-interactive", "--provider", "custom", "--api-base", &api_base];
    let (code, _, said) = baaahtd(&daemon.data_dir, &setup);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("restart it for this to take effect"), "{said}");
    assert!(!said.contains("every agent now uses"), "the running daemon does not: {said}");
}
