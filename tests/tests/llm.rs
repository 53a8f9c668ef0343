//! The LLM path end to end on the real binaries and a real engine: an agent container streams a
//! completion through `baaahtd` and `baaaht-llm-gateway` from the scripted fake provider; a
//! stream dropped mid-answer stops the upstream request; callers without an agent's token are
//! refused; a provider failing with server errors is told in a sentence a gateway shows as it
//! is; a hung gateway is restarted and the request waiting for it is served; and with the
//! gateway in its own container, no provider key reaches an agent container.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use baaaht_proto::client::{self, ConnectOptions};
use baaaht_proto::selftest::SelfTestReport;
use baaaht_proto::v1;
use baaaht_tests::fake_provider::{self as fake, overloaded, Answer, FakeProvider, ANTHROPIC_HELLO, OPENAI_HELLO};
use baaaht_tests::{bin, docker, DaemonOptions, TestDaemon};

const KEY: &str = "sk-ant-e2e-5f1c9a7d3b";

fn hello() -> Answer {
    Answer::Stream { body: ANTHROPIC_HELLO.into(), cut: false }
}

/// A daemon whose `anthropic` provider is `fake`, its key `${TEST_ANTHROPIC_KEY}` from the
/// environment, the gateway running as `mode`.
fn daemon_for(fake: &FakeProvider, mode: &str, extra_yaml: &str, env: &[(&str, &str)]) -> TestDaemon {
    let providers = format!(
        "providers:\n  anthropic:\n    api_key: ${{TEST_ANTHROPIC_KEY}}\n    api_base: {}\n    default: true\n{extra_yaml}",
        fake.api_base(fake::Wire::Anthropic)
    );
    let mut vars = vec![
        ("BAAAHT__LLM__GATEWAY".to_string(), mode.to_string()),
        ("TEST_ANTHROPIC_KEY".to_string(), KEY.to_string()),
    ];
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    TestDaemon::start(DaemonOptions {
        env: vars,
        files: vec![("config/providers.yaml".into(), providers)],
        ..Default::default()
    })
    .expect("daemon starts")
}

fn doctor(daemon: &TestDaemon, args: &[&str]) -> std::process::Child {
    Command::new(bin("baaaht"))
        .args(["doctor", "--role", "assistant"])
        .args(args)
        .env("BAAAHT_SOCKET", daemon.socket())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("doctor runs")
}

fn llm_request(model: &str) -> v1::LlmRequest {
    v1::LlmRequest {
        model: model.into(),
        messages: vec![v1::LlmMessage {
            role: "user".into(),
            content: vec![v1::ContentBlock { block: Some(v1::content_block::Block::Text("Hi".into())) }],
        }],
        ..v1::LlmRequest::default()
    }
}

/// Waits up to `limit` for `condition`.
fn eventually(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "{what} did not happen within {limit:?}");
        // Polling a condition against a deadline.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Pids of the daemon's `baaaht-llm-gateway` children.
fn gateway_pids(daemon: &TestDaemon) -> Vec<u32> {
    let mut pids = vec![];
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some((head, rest)) = stat.rsplit_once(')') else { continue };
        let parent = rest.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok());
        if head.ends_with("(baaaht-llm-gate") && parent == Some(daemon.pid()) {
            pids.push(pid);
        }
    }
    pids
}

fn texts(events: &[v1::LlmEvent]) -> String {
    events
        .iter()
        .filter_map(|event| match &event.event {
            Some(v1::llm_event::Event::TextDelta(delta)) => Some(delta.text.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn an_agent_container_streams_a_completion_through_the_daemon_and_the_gateway() {
    let rt = baaaht_tests::runtime();
    let primary = rt.block_on(FakeProvider::start(vec![hello()], None)).expect("fake provider");
    let daemon = daemon_for(&primary, "process", "", &[]);
    let output = doctor(&daemon, &["--llm", "anthropic/test-model"]).wait_with_output().expect("doctor");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}\n{}", String::from_utf8_lossy(&output.stderr), daemon.log_text());
    assert!(
        stdout.contains("[ok  ] anthropic answered through the daemon: \"Hello\" (3 in / 2 out tokens)"),
        "{stdout}"
    );
    // The provider got the key and the model without its provider prefix.
    let sent = primary.requests();
    assert_eq!(sent.len(), 1);
    assert!(sent[0].to_ascii_lowercase().contains(&format!("x-api-key: {KEY}")), "{}", sent[0]);
    assert!(sent[0].contains("\"model\":\"test-model\""), "{}", sent[0]);
    // Accounted per context and session, and as metrics.
    let ledger: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(daemon.data_dir.join("data/state/usage.json")).expect("usage ledger"),
    )
    .expect("JSON");
    assert_eq!(ledger["contexts"]["user:baaaht-self-test"]["inputTokens"], 3, "{ledger}");
    assert_eq!(ledger["sessions"]["self-test"]["outputTokens"], 2, "{ledger}");
    let metrics = daemon.metrics().expect("metrics");
    // Tokens by provider and model; never by user or session (those live in the ledger).
    let output = metrics.lines().find(|line| {
        line.starts_with("baaaht_llm_tokens_total{provider=\"anthropic\",model=") && line.contains("kind=\"output\"")
    });
    assert!(output.is_some_and(|line| line.ends_with(" 2")), "{metrics}");
    assert!(!metrics.contains("baaaht-self-test"), "no context as a label: {metrics}");
    for line in ["baaaht_llm_requests_total{provider=\"anthropic\",outcome=\"ok\"} 1", "baaaht_llm_gateway_up 1"] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }
}

#[test]
fn a_providers_error_reaches_the_agent_as_a_typed_event_with_its_message() {
    let rt = baaaht_tests::runtime();
    let refusal = Answer::Status {
        code: 400,
        retry_after: None,
        body: "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"max_tokens: 64 > 32\"}}"
            .into(),
    };
    let provider = rt.block_on(FakeProvider::start(vec![refusal.clone(), refusal], None)).expect("fake provider");
    let daemon = daemon_for(&provider, "process", "", &[]);
    let output = doctor(&daemon, &["--llm", "anthropic/test-model"]).wait_with_output().expect("doctor");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("[FAIL] anthropic/test-model: anthropic answered 400: max_tokens: 64 > 32 (invalid_request)"),
        "{stdout}"
    );
    assert_eq!(provider.requests().len(), 2, "a request refused as malformed is sent once more (spec §7.5), not again");
    let metrics = daemon.metrics().expect("metrics");
    assert!(metrics.contains("baaaht_llm_requests_total{provider=\"anthropic\",outcome=\"error\"} 1"), "{metrics}");
}

#[test]
fn a_provider_failing_with_server_errors_is_told_in_a_sentence_every_channel_shows() {
    use baaaht_tests::scenario;
    let rt = baaaht_tests::runtime();
    let failing = Answer::Status {
        code: 500,
        retry_after: None,
        body: "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"shard 7 is down\"}}".into(),
    };
    let provider = rt.block_on(FakeProvider::start(vec![failing.clone(), failing], None)).expect("fake provider");
    let daemon = daemon_for(&provider, "process", "", &[("BAAAHT__LLM__RETRY_ATTEMPTS", "2")]);
    let seen = scenario::turn_on(&rt, &daemon, scenario::message(scenario::user("alice"), "alice", "hello"));
    // The sentence is for users, so a gateway shows it as it is (not its plain "something went
    // wrong"); the provider's own words stay in the daemon's log.
    let error = seen
        .events
        .iter()
        .find_map(|event| match &event.event {
            Some(v1::orchestrator_event::Event::Error(error)) => Some(error.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no error: {:?}", seen.reply));
    assert_eq!(error.message, "The model's provider (anthropic) is failing right now. Try again in a few minutes.");
    assert!(error.for_users, "{error:?}");
    assert_eq!(provider.requests().len(), 2, "both attempts went to the provider");
    assert!(daemon.log_text().contains("shard 7 is down"), "the detail is the operator's, in the log");
}

#[test]
fn three_overloaded_answers_fall_back_and_the_answer_says_who_answered() {
    let rt = baaaht_tests::runtime();
    let primary =
        rt.block_on(FakeProvider::start(vec![overloaded(), overloaded(), overloaded()], None)).expect("primary");
    let fallback = rt
        .block_on(FakeProvider::start(vec![Answer::Stream { body: OPENAI_HELLO.into(), cut: false }], None))
        .expect("fallback");
    let extra = format!(
        "  custom:\n    - name: backup\n      api_base: {}\nfallback_chains:\n  anthropic: [backup]\n",
        fallback.api_base(fake::Wire::OpenAi)
    );
    let daemon = daemon_for(&primary, "process", &extra, &[]);
    let output = doctor(&daemon, &["--llm", "anthropic/test-model"]).wait_with_output().expect("doctor");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}\n{}", String::from_utf8_lossy(&output.stderr), daemon.log_text());
    assert!(stdout.contains("[ok  ] backup answered through the daemon: \"Hello\""), "{stdout}");
    assert!(stdout.contains("estimated)"), "OpenAI-compatible servers may send no usage: {stdout}");
    assert_eq!(primary.requests().len(), 3, "three attempts at the primary");
    assert_eq!(fallback.requests().len(), 1);
}

#[test]
fn a_dropped_stream_cancels_upstream_and_only_an_agents_token_may_stream() {
    let rt = baaaht_tests::runtime();
    let long = fake::token_stream(fake::Wire::Anthropic, 100_000, Duration::from_millis(5));
    let provider = rt.block_on(FakeProvider::start(vec![long], None)).expect("fake provider");
    let daemon = daemon_for(&provider, "process", "", &[]);
    let agent = daemon.lingering_agent("assistant", None, &[]).expect("agent container");
    let (socket, token) = (agent.socket.clone(), agent.token.clone());

    rt.block_on(async {
        let options = ConnectOptions { token: Some(token.clone()), ..ConnectOptions::default() };
        let mut agent = client::connect(&socket, options).await.expect("connect as the agent");
        let mut stream = agent.agents.stream_llm(llm_request("anthropic/test-model")).await.expect("streams").into_inner();
        let mut events = vec![];
        while texts(&events).split_whitespace().count() < 5 {
            events.push(stream.message().await.expect("event").expect("not ended"));
        }
        assert!(matches!(events[0].event, Some(v1::llm_event::Event::MessageStart(ref start)) if start.provider == "anthropic"));
        drop(stream);

        let wrong = ConnectOptions { token: Some("f".repeat(64)), ..ConnectOptions::default() };
        let mut stranger = client::connect(&socket, wrong).await.expect("connect");
        let status = stranger.agents.stream_llm(llm_request("anthropic/test-model")).await.expect_err("refused");
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
        let mut host = client::connect(&daemon.socket(), ConnectOptions::default()).await.expect("connect");
        let status = host.agents.stream_llm(llm_request("anthropic/test-model")).await.expect_err("refused");
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    });
    eventually(Duration::from_secs(10), "the upstream request being cancelled", || provider.abandoned() == 1);
    assert_eq!(provider.completed(), 0);
    assert_eq!(provider.requests().len(), 1, "the refused callers never reached the provider");
    eventually(Duration::from_secs(5), "the cancelled stream being counted", || {
        daemon
            .metrics()
            .is_ok_and(|m| m.contains("baaaht_llm_requests_total{provider=\"anthropic\",outcome=\"cancelled\"} 1"))
    });
    drop(agent);
}

#[test]
fn a_hung_gateway_is_restarted_after_three_failed_checks_and_the_waiting_request_is_served() {
    let rt = baaaht_tests::runtime();
    let provider = rt.block_on(FakeProvider::start(vec![], Some(hello()))).expect("fake provider");
    let health = [
        ("BAAAHT__ORCHESTRATOR__HEALTH_CHECK__INTERVAL", "200"),
        ("BAAAHT__ORCHESTRATOR__HEALTH_CHECK__TIMEOUT", "200"),
    ];
    let daemon = daemon_for(&provider, "process", "", &health);
    let agent = daemon.lingering_agent("assistant", None, &[]).expect("agent container");
    let (socket, token) = (agent.socket.clone(), agent.token.clone());
    eventually(Duration::from_secs(10), "the gateway starting", || gateway_pids(&daemon).len() == 1);
    let first = gateway_pids(&daemon)[0];

    // Freeze the gateway: it neither answers nor exits, as a hung process would.
    assert!(Command::new("kill").args(["-STOP", &first.to_string()]).status().expect("kill").success());
    let started = Instant::now();
    let events = rt.block_on(async {
        let options = ConnectOptions { token: Some(token), ..ConnectOptions::default() };
        let mut agent = client::connect(&socket, options).await.expect("connect");
        let mut stream =
            agent.agents.stream_llm(llm_request("anthropic/test-model")).await.expect("served").into_inner();
        let mut events = vec![];
        while let Some(event) = stream.message().await.expect("event") {
            events.push(event);
        }
        events
    });
    assert_eq!(texts(&events), "Hello", "{events:?}\n{}", daemon.log_text());
    // The stopped gateway is reaped and one new one runs (read from /proc, which may lag).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let replaced = gateway_pids(&daemon);
        if replaced.len() == 1 && replaced[0] != first {
            break;
        }
        let states: Vec<String> = replaced
            .iter()
            .map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
            .collect();
        assert!(Instant::now() < deadline, "gateway {first} not replaced: {states:?}\n{}", daemon.log_text());
        // Polling /proc against a deadline.
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(started.elapsed() >= Duration::from_millis(600), "served before three checks could fail");
    let log = daemon.log_text();
    assert!(log.contains("restarting the LLM gateway"), "{log}");
    assert!(log.contains("3 checks in a row"), "{log}");
    let metrics = daemon.metrics().expect("metrics");
    assert!(metrics.contains("baaaht_llm_gateway_restarts_total 1"), "{metrics}");
    drop(agent);
}

#[test]
fn with_the_gateway_in_its_container_no_provider_key_reaches_an_agent_container_and_it_has_no_network() {
    let rt = baaaht_tests::runtime();
    let address = std::net::SocketAddr::new(baaaht_tests::bridge_address().expect("the bridge network exists"), 0);
    let provider = rt.block_on(FakeProvider::start_on(address, vec![], Some(hello()))).expect("fake provider");
    let temp = tempfile::tempdir().expect("tempdir");
    let data_dir = temp.path().join("d");
    let passphrase = temp.path().join("passphrase");
    std::fs::write(&passphrase, "correct horse battery staple\n").expect("passphrase");
    let mut set = Command::new(bin("baaahtd"))
        .args(["secrets", "set", "ANTHROPIC_API_KEY"])
        .env("BAAAHT_DATA", &data_dir)
        .env("BAAAHT_PASSPHRASE_FILE", &passphrase)
        .stdin(Stdio::piped())
        .spawn()
        .expect("secrets set");
    set.stdin.take().expect("stdin").write_all(KEY.as_bytes()).expect("value");
    assert!(set.wait().expect("set").success());
    let providers = format!(
        "providers:\n  anthropic:\n    api_key: ${{ANTHROPIC_API_KEY}}\n    api_base: {}\n    default: true\n",
        provider.api_base(fake::Wire::Anthropic)
    );
    std::fs::write(data_dir.join("config/providers.yaml"), providers).expect("providers.yaml");
    let daemon = TestDaemon::start(DaemonOptions {
        env: vec![
            ("BAAAHT__LLM__GATEWAY".into(), "container".into()),
            ("BAAAHT_PASSPHRASE_FILE".into(), passphrase.display().to_string()),
        ],
        data_dir: Some(data_dir),
        ..Default::default()
    })
    .expect("daemon starts");

    let lingering = doctor(&daemon, &["--llm", "anthropic/test-model", "--linger", "120", "--json"]);
    let agent = daemon.wait_for_self_test("baaaht-assistant-", Duration::from_secs(60)).expect("agent container");
    eventually(Duration::from_secs(60), "the completion reaching the provider", || provider.requests().len() == 1);
    assert!(
        provider.requests()[0].to_ascii_lowercase().contains(&format!("x-api-key: {KEY}")),
        "the gateway used the key"
    );

    // What could carry a key into the agent container: every process's environment, and every
    // file under what is mounted into it (the image was built before any key existed).
    let seen = docker(&[
        "exec",
        &agent,
        "sh",
        "-c",
        "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null; \
         for m in $(awk '$5 != \"/\" {print $5}' /proc/self/mountinfo | grep -v -e ^/proc -e ^/sys -e ^/dev); do \
           echo \"scanned $m\"; grep -rsl -- \"$0\" \"$m\"; \
         done; true",
        KEY,
    ])
    .expect("inspect the agent container");
    assert!(!seen.contains(KEY), "the key is visible in the agent container:\n{seen}");
    assert!(seen.contains(baaaht_proto::CONTAINER_TOKEN_ENV), "the scan read the agent's environment:\n{seen}");
    assert!(seen.contains("scanned /run/baaaht"), "the scan read the mounts:\n{seen}");
    // The gateway container got its key over its socket, not in its configuration.
    let gateway = daemon
        .recorded_containers()
        .into_iter()
        .find(|name| name.starts_with("baaaht-llm_gateway-"))
        .expect("a gateway container is recorded");
    let inspected = docker(&["inspect", &gateway]).expect("inspect the gateway container");
    assert!(!inspected.contains(KEY), "the key is in the gateway container's configuration");
    // It has no network: the provider (on the bridge, as a hosted one would be out there) was
    // reached through a tunnel the daemon opened, and the daemon opens no other host.
    assert!(inspected.contains("\"NetworkMode\": \"none\""), "the gateway has a network: {inspected}");
    let refused = baaaht_tests::gateway::egress_from_inside(&gateway, "/run/baaaht-llm/egress.sock");
    assert!(refused.starts_with("HTTP/1.1 403 Forbidden"), "{refused}");
    assert!(refused.contains("example.com:443"), "{refused}");
    let dial = format!(
        "import socket\ntry:\n  socket.create_connection(('{host}', {port}), 3)\n  print('connected')\nexcept OSError as e:\n  print('refused', e)",
        host = address.ip(),
        port = provider.api_base(fake::Wire::Anthropic).rsplit(':').next().unwrap_or_default(),
    );
    let reached = docker(&["exec", &gateway, "python3", "-c", &dial]).expect("a connection from inside");
    assert!(reached.starts_with("refused"), "the gateway reached the bridge by itself: {reached}");
    // What `baaaht audit --kind KIND --json` lists.
    let audited = |kind: &str| {
        let audit = Command::new(bin("baaaht"))
            .args(["audit", "--kind", kind, "--json"])
            .env("BAAAHT_SOCKET", daemon.socket())
            .output()
            .expect("baaaht audit");
        String::from_utf8_lossy(&audit.stdout).into_owned()
    };
    let tunnels = audited("egress");
    let of_the_gateway = |outcome: &str, host: &str| {
        tunnels
            .lines()
            .any(|line| line.contains("\"principal\":\"llm-gateway\"") && line.contains(outcome) && line.contains(host))
    };
    assert!(of_the_gateway("\"allowed\"", &address.ip().to_string()), "{tunnels}");
    assert!(of_the_gateway("\"refused\"", "example.com"), "{tunnels}");

    docker(&["kill", &agent]).expect("end the lingering container");
    let output = lingering.wait_with_output().expect("doctor ends");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: SelfTestReport = serde_json::from_str(stdout.trim()).expect("report JSON");
    let llm = report.llm.expect("an LLM check");
    assert_eq!((llm.provider.as_str(), llm.text.as_str(), llm.error.as_str()), ("anthropic", "Hello", ""));

    // The key was read by name, and its value is in no file the daemon wrote: logs, audit,
    // state, sessions (the store itself is encrypted).
    let found = audited("secret");
    assert!(
        found
            .lines()
            .any(|line| line.contains("\"name\":\"ANTHROPIC_API_KEY\"") && line.contains("LLM provider anthropic")),
        "{found}"
    );
    let holding = Command::new("grep")
        .args(["-rlF", "-D", "skip", "--", KEY])
        .arg(&daemon.data_dir)
        .output()
        .expect("grep the data folder");
    assert_eq!(String::from_utf8_lossy(&holding.stdout), "", "files holding the key's value");
    assert!(!daemon.log_text().contains(KEY), "the key's value is in the log");
}
