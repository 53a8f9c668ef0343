//! Operations (spec §18): the metrics a real Prometheus parser reads after a turn with a
//! delegation and a tool call, the audit trail of what happened, health checks that restart a
//! hung LLM gateway or Assistant and tell the admins, a turn exported as one OpenTelemetry
//! trace, systemd's watchdog and unit, and a data disk filling up (a loop-mounted one).

use std::time::{Duration, Instant};

use baaaht_proto::v1;
use baaaht_tests::scenario::{self, coder_brain, message, user};
use baaaht_tests::DaemonOptions;

fn baaaht(daemon: &baaaht_tests::TestDaemon, args: &[&str]) -> (String, String) {
    let output = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(args)
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht runs");
    (String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// Options for a daemon whose config.yaml is `config`.
fn with_config(config: String) -> DaemonOptions {
    DaemonOptions { files: vec![("config/config.yaml".into(), config)], ..DaemonOptions::default() }
}

/// The families and samples of an OpenMetrics text, as Python's `prometheus_client` parser
/// reads it: `{family: {"type": …, "samples": [[name, labels, value], …]}}`.
fn parse_with_prometheus_client(text: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("scrape.txt");
    std::fs::write(&path, text).expect("write");
    let script = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
families = {}
for family in text_string_to_metric_families(open(sys.argv[1]).read()):
    families[family.name] = {"type": family.type, "samples": [[s.name, s.labels, s.value] for s in family.samples]}
print(json.dumps(families))
"#;
    let output = std::process::Command::new("python3").args(["-c", script]).arg(&path).output().expect("python3 runs");
    assert!(
        output.status.success(),
        "the prometheus_client parser refused the scrape (scripts/test installs it with pip):\n{}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

/// The sum of the samples of `family` named `sample`.
fn total(families: &serde_json::Value, family: &str, sample: &str) -> f64 {
    let samples = families[family]["samples"].as_array().unwrap_or_else(|| panic!("no family {family}: {families}"));
    samples.iter().filter(|s| s[0] == sample).map(|s| s[2].as_f64().unwrap_or(0.0)).sum()
}

#[test]
fn a_turn_with_a_delegation_and_a_tool_call_shows_in_the_metrics_and_the_audit_log() {
    let rt = baaaht_tests::runtime();
    let config =
        "metrics:\n  listen: 127.0.0.1:0\n  sample_interval: 1\norchestrator:\n  health_check:\n    interval: 300\n"
            .to_string();
    let options = with_config(config);
    let (_fake, daemon) = scenario::start(&rt, coder_brain(), options).expect("fake provider and daemon");
    let turn = scenario::turn_on(&rt, &daemon, message(user("alice"), "alice", "Write hello.sh and run it, please."));
    assert!(turn.reply.is_some(), "{:?}\n{}", turn.error, daemon.log_text());

    // The engine's stats are sampled every second: wait for the Assistant's to arrive.
    let deadline = Instant::now() + Duration::from_secs(20);
    let scrape = loop {
        let scrape = daemon.metrics().expect("metrics");
        if scrape.contains("baaaht_container_memory_bytes{role=\"assistant\"}") || Instant::now() > deadline {
            break scrape;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let body = scrape.split_once("\r\n\r\n").map_or(scrape.as_str(), |(_, body)| body);
    assert!(scrape.contains("application/openmetrics-text"), "{scrape}");
    let families = parse_with_prometheus_client(body);
    // Every figure of spec §18.2, with a value that fits the turn.
    assert!(
        total(&families, "baaaht_container_spawn_duration_seconds", "baaaht_container_spawn_duration_seconds_count")
            >= 3.0
    );
    assert!(total(&families, "baaaht_containers", "baaaht_containers") >= 1.0, "{families}");
    assert!(total(&families, "baaaht_container_memory_bytes", "baaaht_container_memory_bytes") > 1e5, "{families}");
    assert!(families["baaaht_container_cpu_cores"]["samples"].as_array().is_some_and(|s| !s.is_empty()));
    assert_eq!(total(&families, "baaaht_llm_requests", "baaaht_llm_requests_total"), 5.0, "{families}");
    assert_eq!(
        total(&families, "baaaht_llm_request_duration_seconds", "baaaht_llm_request_duration_seconds_count"),
        5.0
    );
    assert!(
        total(&families, "baaaht_llm_time_to_first_token_seconds", "baaaht_llm_time_to_first_token_seconds_count")
            >= 2.0
    );
    assert!(total(&families, "baaaht_llm_tokens", "baaaht_llm_tokens_total") > 0.0, "{families}");
    assert_eq!(total(&families, "baaaht_llm_requests_in_flight", "baaaht_llm_requests_in_flight"), 0.0);
    assert_eq!(total(&families, "baaaht_llm_gateway_up", "baaaht_llm_gateway_up"), 1.0);
    let tools = &families["baaaht_tool_duration_seconds"]["samples"];
    let tool_count = |tool: &str| {
        tools
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s[0] == "baaaht_tool_duration_seconds_count" && s[1]["tool"] == tool)
            .map(|s| s[2].as_f64().unwrap_or(0.0))
            .sum::<f64>()
    };
    assert_eq!((tool_count("write_file"), tool_count("exec")), (1.0, 1.0), "{tools}");
    let delegations = &families["baaaht_delegation_duration_seconds"]["samples"];
    assert!(
        delegations.as_array().into_iter().flatten().any(|s| s[0] == "baaaht_delegation_duration_seconds_count"
            && s[1]["agent"] == "coder"
            && s[1]["outcome"] == "ok"
            && s[2] == 1.0),
        "{delegations}"
    );
    assert_eq!(total(&families, "baaaht_messages", "baaaht_messages_total"), 1.0, "{families}");
    let sessions = &families["baaaht_sessions"]["samples"];
    assert!(sessions.as_array().into_iter().flatten().any(|s| s[1]["status"] == "active" && s[2] == 1.0), "{sessions}");
    assert!(families["baaaht_memory_store_bytes"]["samples"].as_array().is_some_and(|s| s.len() == 2), "{families}");
    // Task runs by outcome appear once a task ran (tests/scheduler.rs reads them).
    let queue = &families["baaaht_llm_queue_depth"]["samples"];
    assert!(queue.as_array().into_iter().flatten().any(|s| s[1]["provider"] == "anthropic" && s[2] == 0.0), "{queue}");
    // No label carries a user or session id.
    assert!(!body.contains("alice") && !body.contains(&turn_session(&daemon)), "{body}");

    // The audit log: the Coder's command, once, with who ran it and where.
    let (found, stderr) = baaaht(&daemon, &["audit", "--kind", "exec", "--json"]);
    let records: Vec<serde_json::Value> = found.lines().map(|line| serde_json::from_str(line).expect("JSON")).collect();
    assert_eq!(records.len(), 1, "{found}{stderr}");
    assert_eq!(records[0]["detail"]["command"], "sh hello.sh");
    assert_eq!(records[0]["detail"]["exit_code"], 0);
    assert_eq!(records[0]["outcome"], "ok");
    assert_eq!(records[0]["context"], "user:alice");
    assert!(records[0]["principal"].as_str().is_some_and(|p| p.starts_with("container:coder:")), "{found}");
    assert!(!records[0]["correlation_id"].as_str().unwrap_or_default().is_empty(), "{found}");

    // A caller with a wrong token on a container's socket: refused, and audited once.
    let socket = std::fs::read_dir(daemon.data_dir.join("data/run"))
        .expect("container sockets")
        .flatten()
        .map(|entry| entry.path().join("daemon.sock"))
        .find(|path| path.exists())
        .expect("a live container's socket");
    rt.block_on(async {
        let options =
            baaaht_proto::client::ConnectOptions { token: Some("not-the-token".into()), ..Default::default() };
        let mut intruder = baaaht_proto::client::connect(&socket, options).await.expect("connect");
        let refused = intruder.system.get_status(v1::StatusRequest::default()).await.expect_err("refused");
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    });
    let (found, _) = baaaht(&daemon, &["audit", "--kind", "auth", "--since", "10m"]);
    assert_eq!(found.lines().count(), 1, "{found}");
    assert!(found.contains("unauthenticated:container-socket:") && found.contains("method=\"GetStatus\""), "{found}");
    let (found, _) = baaaht(&daemon, &["audit", "--user", "bob"]);
    assert_eq!(found, "no audit records match\n");
    let (_, stderr) = baaaht(&daemon, &["audit", "--since", "yesterday"]);
    assert!(stderr.contains("since `yesterday`: write a duration like 90s"), "{stderr}");
}

fn turn_session(daemon: &baaaht_tests::TestDaemon) -> String {
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(daemon.data_dir.join("data/state/sessions.json")).expect("session index"),
    )
    .expect("JSON");
    index["sessions"][0]["id"].as_str().expect("a session").to_string()
}

#[test]
fn a_hung_llm_gateway_is_restarted_after_the_threshold_and_the_admin_is_told() {
    let rt = baaaht_tests::runtime();
    let config = "system:\n  admin_users: [root-admin]\norchestrator:\n  health_check:\n    interval: 200\n    timeout: 200\n    failure_threshold: 3\nmetrics:\n  listen: 127.0.0.1:0\n".to_string();
    let options = with_config(config);
    let (_fake, daemon) = scenario::start(&rt, coder_brain(), options).expect("fake provider and daemon");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !baaaht(&daemon, &["status"]).0.contains("llm:         ready") {
        assert!(Instant::now() < deadline, "the LLM gateway is not ready\n{}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let gateway = gateway_pid(daemon.pid()).expect("the LLM gateway runs as the daemon's child");
    // Stopped, not killed: the process is there but answers nothing, as a hung one would.
    let stopped = std::process::Command::new("kill").args(["-STOP", &gateway.to_string()]).status().expect("kill");
    assert!(stopped.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let (inbox, restarted) = loop {
        let (inbox, _) = baaaht(&daemon, &["inbox", "--user", "root-admin", "--all"]);
        let restarted = gateway_pid(daemon.pid()).is_some_and(|pid| pid != gateway);
        if (inbox.contains("LLM gateway restarted") && restarted) || Instant::now() > deadline {
            break (inbox, restarted);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(restarted, "a new gateway process runs\n{}", daemon.log_text());
    assert!(inbox.contains("3 checks in a row"), "{inbox}\n{}", daemon.log_text());
    assert!(!std::path::Path::new(&format!("/proc/{gateway}")).exists() || is_zombie(gateway), "the hung one is gone");
    let metrics = daemon.metrics().expect("metrics");
    assert!(
        metrics.contains("baaaht_container_restarts_total{role=\"llm_gateway\",reason=\"unhealthy\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("baaaht_health_check_failures_total")
            || metrics.contains("baaaht_llm_gateway_restarts_total 1")
    );
    // And the next answer comes from the new gateway.
    let turn = scenario::turn_on(&rt, &daemon, message(user("alice"), "alice", "Hello again."));
    assert!(turn.reply.is_some(), "{:?}\n{}", turn.error, daemon.log_text());
}

#[test]
fn a_hung_assistant_is_restarted_after_the_threshold_and_the_admin_is_told() {
    let rt = baaaht_tests::runtime();
    let config = "system:\n  admin_users: [root-admin]\norchestrator:\n  health_check:\n    interval: 200\n    timeout: 200\n    failure_threshold: 3\nmetrics:\n  listen: 127.0.0.1:0\n".to_string();
    let options = with_config(config);
    let (_fake, daemon) = scenario::start(&rt, scenario::echo_brain(), options).expect("fake provider and daemon");
    let first = scenario::turn_on(&rt, &daemon, message(user("alice"), "alice", "Hello."));
    assert!(first.reply.is_some(), "{:?}", first.error);
    let assistants = || {
        let listed = baaaht_tests::docker(&[
            "ps",
            "--filter",
            &format!("label=baaaht.session={}", first.session),
            "--filter",
            "name=^baaaht-assistant-",
            "--format",
            "{{.Names}}",
        ])
        .expect("docker ps");
        listed.lines().map(str::to_string).collect::<Vec<_>>()
    };
    let waiting = assistants();
    assert_eq!(waiting.len(), 1, "the session's Assistant waits for the next turn: {waiting:?}");
    // Paused: the container is there, its agent answers nothing, as a hung one would.
    baaaht_tests::docker(&["pause", &waiting[0]]).expect("docker pause");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (inbox, now) = loop {
        let (inbox, _) = baaaht(&daemon, &["inbox", "--user", "root-admin", "--all"]);
        let now = assistants();
        let replaced = now.len() == 1 && now[0] != waiting[0];
        if (inbox.contains("assistant container restarted") && replaced) || Instant::now() > deadline {
            break (inbox, now);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(now.len() == 1 && now[0] != waiting[0], "a new Assistant waits: {now:?}\n{}", daemon.log_text());
    assert!(
        inbox.contains(&waiting[0]) && inbox.contains("failed 3 health checks in a row"),
        "{inbox}\n{}",
        daemon.log_text()
    );
    let metrics = daemon.metrics().expect("metrics");
    assert!(
        metrics.contains("baaaht_container_restarts_total{role=\"assistant\",reason=\"unhealthy\"} 1"),
        "{metrics}"
    );
    // The session goes on with the new one.
    let mut hello = message(user("alice"), "alice", "Still there?");
    hello.session_id.clone_from(&first.session);
    let again = scenario::turn_on(&rt, &daemon, hello);
    assert_eq!(again.reply.map(|r| r.content).as_deref(), Some("echo: Still there?"), "{:?}", again.error);
    assert_eq!(again.session, first.session);
}

/// An OTLP/gRPC trace collector on loopback, built from the OpenTelemetry protocol's own
/// service definition: it keeps every span it is sent.
mod collector {
    use std::sync::{Arc, Mutex, PoisonError};

    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
    use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
    use opentelemetry_proto::tonic::trace::v1::Span;

    /// The text of a string attribute.
    pub(crate) fn text(value: Option<&AnyValue>) -> Option<String> {
        match value?.value.as_ref()? {
            any_value::Value::StringValue(text) => Some(text.clone()),
            _ => None,
        }
    }

    #[derive(Clone, Default)]
    pub(crate) struct Collector {
        spans: Arc<Mutex<Vec<(String, Span)>>>,
    }

    impl Collector {
        /// A collector serving on a free loopback port, and the endpoint to give the daemon.
        pub(crate) fn started(rt: &tokio::runtime::Runtime) -> (Collector, String) {
            let collector = Collector::default();
            let endpoint = rt.block_on(collector.start());
            (collector, endpoint)
        }

        async fn start(&self) -> String {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let address = listener.local_addr().expect("address");
            let service = TraceServiceServer::new(self.clone());
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(service)
                    .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
            );
            format!("http://{address}")
        }

        /// (service.name, span) of every span received.
        pub(crate) fn spans(&self) -> Vec<(String, Span)> {
            self.spans.lock().unwrap_or_else(PoisonError::into_inner).clone()
        }
    }

    #[tonic::async_trait]
    impl TraceService for Collector {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            let mut kept = self.spans.lock().unwrap_or_else(PoisonError::into_inner);
            for resource in request.into_inner().resource_spans {
                let service = resource
                    .resource
                    .iter()
                    .flat_map(|r| &r.attributes)
                    .find(|a| a.key == "service.name")
                    .and_then(|a| text(a.value.as_ref()))
                    .unwrap_or_default();
                for scope in resource.scope_spans {
                    kept.extend(scope.spans.into_iter().map(|span| (service.clone(), span)));
                }
            }
            Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
        }
    }
}

#[test]
fn a_turn_is_one_trace_from_the_clients_request_through_the_agents_to_the_llm_and_the_tool() {
    use opentelemetry_proto::tonic::trace::v1::Span;
    let rt = baaaht_tests::runtime();
    let (collector, endpoint) = collector::Collector::started(&rt);
    let config = format!("otel:\n  endpoint: {endpoint}\n  service_name: baaaht-home\n");
    let options = with_config(config);
    let (_fake, daemon) = scenario::start(&rt, coder_brain(), options).expect("fake provider and daemon");
    let turn = scenario::turn_on(&rt, &daemon, message(user("alice"), "alice", "Write hello.sh and run it."));
    assert!(turn.reply.is_some(), "{:?}", turn.error);
    let name = |span: &Span| span.name.clone();
    let attribute = |span: &Span, key: &str| {
        span.attributes.iter().find(|a| a.key == key).and_then(|a| collector::text(a.value.as_ref()))
    };
    // The batch exporter sends within seconds of a span's end.
    let deadline = Instant::now() + Duration::from_secs(30);
    let spans = loop {
        let spans = collector.spans();
        let count = |name: &str| spans.iter().filter(|(_, span)| span.name == name).count();
        let root = spans.iter().any(|(_, span)| {
            span.parent_span_id.is_empty() && attribute(span, "method").as_deref() == Some("SendUserMessage")
        });
        if (count("tool") >= 2 && count("llm") >= 5 && count("turn") == 1 && root) || Instant::now() > deadline {
            break spans;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let names: Vec<String> = spans.iter().map(|(_, span)| name(span)).collect();
    assert!(spans.iter().all(|(service, _)| service == "baaaht-home"), "service.name: {spans:?}");
    let turn_span = &spans.iter().find(|(_, span)| span.name == "turn").unwrap_or_else(|| panic!("{names:?}")).1;
    let in_trace: Vec<&Span> =
        spans.iter().map(|(_, span)| span).filter(|span| span.trace_id == turn_span.trace_id).collect();
    // Up from a span to the root of its trace.
    let ancestry = |span: &Span| {
        let mut chain = vec![span.name.clone()];
        let mut parent = span.parent_span_id.clone();
        while let Some(up) = in_trace.iter().find(|s| !parent.is_empty() && s.span_id == parent) {
            chain.push(up.name.clone());
            parent = up.parent_span_id.clone();
        }
        (chain, parent.is_empty())
    };
    // The root: the client's SendUserMessage as the daemon received it.
    let (chain, rooted) = ancestry(turn_span);
    assert!(rooted, "the turn's trace reaches its root: {chain:?} {names:?}");
    let root = in_trace.iter().find(|s| s.parent_span_id.is_empty()).expect("a root span");
    assert_eq!(attribute(root, "method").as_deref(), Some("SendUserMessage"), "{root:?}");
    // The Coder's tool calls: tool ← rpc RequestToolExecution ← delegation ← rpc DelegateToAgent ← turn.
    let tools: Vec<&&Span> = in_trace.iter().filter(|s| s.name == "tool").collect();
    assert_eq!(tools.len(), 2, "write_file and exec, in the turn's trace: {names:?}");
    for tool in tools {
        let (chain, rooted) = ancestry(tool);
        assert!(rooted, "{chain:?}");
        assert_eq!(chain, ["tool", "rpc", "delegation", "rpc", "turn", "rpc"], "{chain:?}");
    }
    // Every model call of the Assistant and the Coder: its hop to the LLM gateway.
    let llm: Vec<&&Span> = in_trace.iter().filter(|s| s.name == "llm").collect();
    assert_eq!(llm.len(), 5, "{names:?}");
    assert!(llm.iter().all(|s| attribute(s, "provider").as_deref() == Some("anthropic")), "{llm:?}");
    assert!(llm.iter().all(|s| ancestry(s).0.last().map(String::as_str) == Some("rpc") && ancestry(s).1));
}

#[test]
fn a_scheduled_run_is_one_trace_from_its_task_to_its_model_call() {
    let rt = baaaht_tests::runtime();
    let (collector, endpoint) = collector::Collector::started(&rt);
    let config = format!("otel:\n  endpoint: {endpoint}\n");
    let options = with_config(config);
    let (_fake, daemon) = scenario::start(&rt, scenario::echo_brain(), options).expect("fake provider and daemon");
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let task = scenario::task_once("alice", 1, "Say hello.");
        client.tasks.schedule_task(task).await.expect("scheduled");
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let (task, llm, spans) = loop {
        let spans = collector.spans().into_iter().map(|(_, span)| span).collect::<Vec<_>>();
        // Other model calls (not the run's) may be exported first, and other tasks run (the
        // daemon's own jobs, each minute): the task whose trace holds a model call.
        let found = spans.iter().filter(|span| span.name == "task").find_map(|task| {
            let llm = spans.iter().find(|span| span.name == "llm" && span.trace_id == task.trace_id)?;
            Some((task.clone(), llm.clone()))
        });
        if let Some((task, llm)) = found {
            break (task, llm, spans);
        }
        let names: Vec<&str> = spans.iter().map(|span| span.name.as_str()).collect();
        assert!(
            Instant::now() < deadline,
            "no task span with a model call in its trace: {names:?}\n{}",
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // llm ← rpc StreamLLM ← task.
    let rpc = spans.iter().find(|span| span.span_id == llm.parent_span_id).expect("the model call's parent");
    assert_eq!((rpc.name.as_str(), &rpc.parent_span_id), ("rpc", &task.span_id), "{rpc:?}");
}

#[test]
fn a_collector_that_is_not_there_is_reported_in_the_log_and_the_daemon_serves_on() {
    // A loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port();
    let config = format!("otel:\n  endpoint: http://127.0.0.1:{port}\n");
    let options = with_config(config);
    let daemon = baaaht_tests::TestDaemon::start(options).expect("daemon");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(baaaht(&daemon, &["status"]).0.contains("engine:"), "the daemon answers");
        if daemon.log_text().contains("cannot export traces to the OTLP collector") {
            break;
        }
        assert!(Instant::now() < deadline, "no word of the failed export:\n{}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(daemon.log_text().contains("exporting traces over OTLP"));
    // https is refused before the daemon starts, with what to write instead.
    let checked = std::process::Command::new(baaaht_tests::bin("baaahtd"))
        .args(["config", "check"])
        .env("BAAAHT_DATA", &daemon.data_dir)
        .env("BAAAHT__OTEL__ENDPOINT", "https://127.0.0.1:4317")
        .output()
        .expect("config check");
    let said = String::from_utf8_lossy(&checked.stderr);
    assert!(!checked.status.success() && said.contains("plain gRPC only"), "{said}");
}

/// The pid of the daemon's `baaaht-llm-gateway` child.
fn gateway_pid(daemon: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        let (name, rest) = stat.split_once(") ")?;
        let parent: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
        let state = rest.split_whitespace().next()?;
        (parent == daemon && name.ends_with("(baaaht-llm-gate") && state != "Z").then_some(pid)
    })
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.split_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(true)
}

#[test]
fn the_daemon_pings_the_systemd_watchdog_with_its_status() {
    let options = DaemonOptions { env: vec![("WATCHDOG_USEC".into(), "200000".into())], ..DaemonOptions::default() };
    let mut daemon = baaaht_tests::TestDaemon::start(options).expect("daemon");
    let messages = daemon.notifications(Duration::from_secs(2)).expect("notifications");
    let pings: Vec<&String> = messages.iter().filter(|m| m.lines().any(|line| line == "WATCHDOG=1")).collect();
    assert!(pings.len() >= 5, "about ten pings in two seconds at a 200 ms watchdog: {messages:?}");
    assert!(pings[0].contains("STATUS=serving on ") && pings[0].contains("active sessions"), "{messages:?}");
}

#[test]
fn the_systemd_unit_verifies() {
    let unit = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/baaaht.service");
    let text = std::fs::read_to_string(&unit).expect("unit");
    assert!(text.contains("Type=notify") && text.contains("WatchdogSec="), "{text}");
    // The unit names /usr/local/bin/baaahtd: verify a copy pointing at this build's binary.
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("baaaht.service");
    let binary = baaaht_tests::bin("baaahtd");
    std::fs::write(&copy, text.replace("/usr/local/bin/baaahtd", &binary.display().to_string())).expect("write");
    let output = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .expect("systemd-analyze runs (scripts/test installs systemd for it)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let problems: Vec<&str> = stderr
        .lines()
        // The machine this runs on has no docker.service or baaaht user of its own.
        .filter(|line| !line.contains("docker.service") && !line.contains("podman.socket") && !line.trim().is_empty())
        .collect();
    assert!(output.status.success() && problems.is_empty(), "{stderr}");
}

/// `baaaht status` as host user `uid` (holding `groups`), with `args` before the command.
fn as_host_user(cli: &std::path::Path, uid: &str, groups: Option<&str>, socket: &std::path::Path) -> (bool, String) {
    let mut command = std::process::Command::new("setpriv");
    command.args(["--reuid", uid, "--regid", uid, "--inh-caps=-all"]);
    match groups {
        Some(groups) => command.args(["--groups", groups]),
        None => command.arg("--clear-groups"),
    };
    let output = command.arg("--").arg(cli).arg("--socket").arg(socket).arg("status").output().expect("setpriv runs");
    (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// With the shipped unit the data dir is 0700 and the host socket is served in systemd's
/// runtime directory (0755), linked from the data dir: a member of the client group reaches
/// the daemon there, someone outside the group is told to ask for it, and a member who looks
/// in the data dir is told where the socket is.
#[test]
fn a_member_of_the_client_group_reaches_the_service_socket_and_others_are_told_what_to_do() {
    use std::os::unix::fs::PermissionsExt;
    let open = tempfile::tempdir().expect("tempdir");
    let runtime = open.path().join("run");
    std::fs::create_dir(&runtime).expect("runtime directory");
    let cli = open.path().join("baaaht");
    std::fs::copy(baaaht_tests::bin("baaaht"), &cli).expect("a copy of the CLI others may run");
    for path in [open.path(), &runtime, &cli] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    // `users` (gid 100) is Debian's; the test makes no group of its own.
    let daemon = baaaht_tests::TestDaemon::start(DaemonOptions {
        env: vec![
            ("RUNTIME_DIRECTORY".into(), runtime.display().to_string()),
            ("BAAAHT__ORCHESTRATOR__SOCKET__CLIENT_GROUP".into(), "users".into()),
        ],
        ..DaemonOptions::default()
    })
    .expect("daemon");
    let served = runtime.join("orchestrator.sock");
    let mode = std::fs::metadata(&served).expect("the served socket").permissions().mode();
    assert_eq!(mode & 0o777, 0o660, "{mode:o}");
    let data_dir_mode = std::fs::metadata(&daemon.data_dir).expect("data dir").permissions().mode();
    assert_eq!(data_dir_mode & 0o777, 0o700, "the data dir stays closed");
    // The daemon's own user finds it where it always did.
    let (stdout, stderr) = baaaht(&daemon, &["status"]);
    assert!(stderr.is_empty() && !stdout.is_empty(), "{stdout}\n{stderr}");
    let (reached, stderr) = as_host_user(&cli, "4242", Some("100"), &served);
    assert!(reached, "a member of the client group: {stderr}");
    let (reached, stderr) = as_host_user(&cli, "4243", None, &served);
    assert!(
        !reached && stderr.contains("the socket is open to group users only: ask the admin to add you"),
        "{stderr}"
    );
    let (reached, stderr) = as_host_user(&cli, "4242", Some("100"), &daemon.socket());
    assert!(!reached, "the data dir is closed to the group");
    let closed = format!("a folder on the way to it is closed to you ({})", daemon.data_dir.display());
    assert!(stderr.contains(&closed) && stderr.contains("pass --socket /run/baaaht/orchestrator.sock"), "{stderr}");
    drop(daemon);
    assert!(!served.exists(), "the daemon takes its socket away when it stops");
}

/// A small ext4 filesystem of its own, loop-mounted (the test runs as root), unmounted when
/// dropped.
struct LoopDisk {
    point: std::path::PathBuf,
}

impl LoopDisk {
    fn new(dir: &std::path::Path, mib: u64) -> LoopDisk {
        let run = |program: &str, args: &[&std::ffi::OsStr]| {
            let output = std::process::Command::new(program).args(args).output().expect(program);
            assert!(output.status.success(), "{program}: {}", String::from_utf8_lossy(&output.stderr));
        };
        let image = dir.join("disk.img");
        std::fs::File::create(&image).and_then(|file| file.set_len(mib << 20)).expect("the image");
        run("mkfs.ext4", &["-q".as_ref(), "-F".as_ref(), "-m".as_ref(), "0".as_ref(), image.as_os_str()]);
        let point = dir.join("data");
        std::fs::create_dir(&point).expect("the mount point");
        run("mount", &["-o".as_ref(), "loop".as_ref(), image.as_os_str(), point.as_os_str()]);
        LoopDisk { point }
    }

    /// Makes `fill` (a file on it) as big as it takes for `percent` of the disk to be in use.
    fn fill_to(&self, percent: u64) {
        let fill = self.point.join("fill");
        // silent-ok: there is no fill yet the first time.
        let _ = std::fs::remove_file(&fill);
        let df = std::process::Command::new("df")
            .args(["-B1", "--output=used,avail"])
            .arg(&self.point)
            .output()
            .expect("df");
        let text = String::from_utf8_lossy(&df.stdout);
        let figures: Vec<u64> =
            text.lines().nth(1).expect("df's line").split_whitespace().map(|n| n.parse().expect("a number")).collect();
        let (used, available) = (figures[0], figures[1]);
        let wanted = (used + available) * percent / 100 + (1 << 20);
        let size = wanted.saturating_sub(used).to_string();
        let output =
            std::process::Command::new("fallocate").args(["-l", &size]).arg(&fill).output().expect("fallocate");
        assert!(output.status.success(), "fallocate: {}", String::from_utf8_lossy(&output.stderr));
    }

    fn empty(&self) {
        std::fs::remove_file(self.point.join("fill")).expect("the fill goes");
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        // silent-ok: the daemon's harness unmounts what is below its data dir, this too.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.point)
            .stderr(std::process::Stdio::null())
            .status();
    }
}

#[test]
fn a_data_disk_at_90_percent_warns_the_admins_and_at_95_refuses_new_conversations_and_uploads() {
    use tonic::Code;
    let rt = baaaht_tests::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = LoopDisk::new(dir.path(), 160);
    let config = "system:\n  admin_users: [u-admin]\norchestrator:\n  disk:\n    check_interval: 1000\nsessions:\n  \
                  idle_after: 2\n";
    let mut options = with_config(config.into());
    // The marks the harness raises for the host's disk, back to their defaults on this one.
    options.env.push(("BAAAHT__ORCHESTRATOR__DISK__WARN_PERCENT".into(), "90".into()));
    options.env.push(("BAAAHT__ORCHESTRATOR__DISK__CRITICAL_PERCENT".into(), "95".into()));
    options.data_dir = Some(disk.point.clone());
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), options).expect("daemon");
    let status = || daemon.cli(&["status"]);
    let wait = |what: &str, check: &dyn Fn() -> bool| {
        let started = Instant::now();
        while !check() {
            assert!(started.elapsed() < Duration::from_secs(30), "{what}: {}\n{}", status(), daemon.log_text());
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let mut host = rt.block_on(scenario::host_client(&daemon)).expect("host");
    let bob = rt
        .block_on(host.sessions.new_session(v1::NewSessionRequest { context: Some(user("bob")), title: "old".into() }))
        .expect("bob's session")
        .into_inner()
        .id;

    // 91%: the admins are told, status and the metrics say it, and work goes on.
    disk.fill_to(91);
    wait("the warning", &|| status().contains("% full (") && status().contains("past the critical mark"));
    let inbox = daemon.cli(&["inbox", "--user", "u-admin", "--all"]);
    assert!(
        inbox.contains("The data disk is 9") && inbox.contains("At 95% new conversations and uploads are refused"),
        "{inbox}"
    );
    let metrics = daemon.metrics().expect("metrics");
    assert!(metrics.lines().any(|line| line.starts_with("baaaht_disk_used_ratio 0.9")), "{metrics}");
    assert!(metrics.contains("baaaht_disk_available_bytes "), "{metrics}");
    let sent = rt.block_on(host.sessions.send_user_message(message(user("carol"), "carol", "hello")));
    assert!(sent.is_ok(), "work goes on at 91%: {sent:?}");

    // 96%: a new conversation and an upload are refused with a sentence; idle ones are archived.
    disk.fill_to(96);
    wait("the critical mark", &|| status().contains("new conversations and uploads are refused until there is room"));
    let refused = rt
        .block_on(host.sessions.send_user_message(message(user("dave"), "dave", "hello")))
        .expect_err("no new conversation");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().starts_with("A new conversation cannot start now: the disk baaaht keeps its data on is 9"),
        "{refused:?}"
    );
    let (sender, receiver) = tokio::sync::mpsc::channel(2);
    let start = v1::UploadChunk {
        part: Some(v1::upload_chunk::Part::Start(v1::UploadStart {
            context: Some(user("carol")),
            filename: "notes.txt".into(),
            ..Default::default()
        })),
    };
    rt.block_on(sender.send(start)).expect("start");
    drop(sender);
    let refused = rt
        .block_on(host.sessions.upload_file(tokio_stream::wrappers::ReceiverStream::new(receiver)))
        .expect_err("no upload");
    assert!(refused.message().starts_with("An upload cannot start now"), "{refused:?}");
    let inbox = daemon.cli(&["inbox", "--user", "u-admin", "--all"]);
    assert!(inbox.contains("new conversations are refused"), "{inbox}");
    wait("bob's idle session archived", &|| {
        let list = v1::SessionFilter { user_id: "bob".into(), ..Default::default() };
        let mut host = host.clone();
        let sessions = rt.block_on(host.sessions.list_sessions(list)).expect("list").into_inner().sessions;
        sessions.iter().any(|session| session.id == bob && session.status == "archived")
    });

    // Room again: nothing is degraded and a new conversation starts.
    disk.empty();
    wait("room again", &|| !status().contains("disk:"));
    let sent = rt.block_on(host.sessions.send_user_message(message(user("dave"), "dave", "hello again")));
    assert!(sent.is_ok(), "{sent:?}");
    drop(daemon);
}
