//! ProxyWebRequest on the real daemon, called with a real tool container's socket and token: an
//! allowed loopback server is fetched (a 2 MB body cut at 1 MB), private and metadata addresses
//! are refused, a host client is refused, and each request leaves one audit line. The only
//! server reached is the test's own, on loopback.

use baaaht_proto::client::{self, ConnectOptions};
use baaaht_proto::v1;
use baaaht_tests::{DaemonOptions, TestDaemon};
use base64::Engine as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a SearXNG instance answers to `/search?q=rust%20lang&format=json`.
const SEARXNG_ANSWER: &str = r#"{"query":"rust lang","number_of_results":2,"results":[{"url":"https://www.rust-lang.org/","title":"Rust Programming Language","content":"A language empowering everyone.","engine":"duckduckgo"},{"url":"https://doc.rust-lang.org/book/","title":"The Book","content":"","engine":"bing"}]}"#;

async fn test_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 4096];
                let n = stream.read(&mut buffer).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buffer[..n]).into_owned();
                let (body, kind) = if head.starts_with("GET /big ") {
                    ("x".repeat(2_000_000), "text/html")
                } else if head.starts_with("GET /search?q=rust%20lang&format=json ") {
                    (SEARXNG_ANSWER.to_string(), "application/json")
                } else {
                    ("<p>hello</p>".to_string(), "text/html")
                };
                let response =
                    format!("HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\n\r\n{body}", body.len());
                // silent-ok: the proxy hangs up once it has 1 MB.
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    port
}

/// A daemon whose web proxy may reach the test server on `port`.
fn allowing(port: u16) -> TestDaemon {
    TestDaemon::start(DaemonOptions {
        env: vec![("BAAAHT__TOOLS__WEB_PROXY__ALLOW".into(), format!("[\"127.0.0.1:{port}\"]"))],
        ..Default::default()
    })
    .expect("daemon starts")
}

fn fetch(url: &str) -> v1::WebProxyRequest {
    v1::WebProxyRequest { url: url.into(), method: "GET".into(), ..v1::WebProxyRequest::default() }
}

#[test]
fn a_tool_container_fetches_an_allowed_server_and_nothing_private() {
    let rt = baaaht_tests::runtime();
    let port = rt.block_on(test_server());
    let daemon = allowing(port);
    let agent = daemon.lingering_agent("tool", None, &[]).expect("tool container");

    rt.block_on(async {
        let mut tool = client::connect(&agent.socket, agent.options()).await.expect("connect as the tool");
        let page = tool.agents.proxy_web_request(fetch(&format!("http://127.0.0.1:{port}/"))).await.expect("served");
        let page = page.into_inner();
        assert_eq!((page.status, page.body.as_slice()), (200, &b"<p>hello</p>"[..]));
        assert_eq!(page.headers.get("content-type").map(String::as_str), Some("text/html"));
        let big = tool.agents.proxy_web_request(fetch(&format!("http://127.0.0.1:{port}/big"))).await.expect("served");
        let big = big.into_inner();
        assert_eq!((big.body.len(), big.truncated), (1_000_000, true));

        for (url, says) in [
            ("http://169.254.169.254/latest/meta-data/", "is a cloud metadata endpoint"),
            ("http://0x7f000001/", "is a loopback address"),
            ("http://[::ffff:10.0.0.1]/", "is a private address"),
            ("http://100.64.0.1/", "carrier-grade NAT"),
            ("http://127.0.0.1:1/", "is a loopback address"),
        ] {
            let status = tool.agents.proxy_web_request(fetch(url)).await.expect_err(url);
            assert_eq!(status.code(), tonic::Code::PermissionDenied, "{url}: {status:?}");
            assert!(status.message().contains(says), "{url}: {}", status.message());
        }
        let status = tool.agents.proxy_web_request(fetch("gopher://example.com/")).await.expect_err("scheme");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");

        let mut host = client::connect(&daemon.socket(), ConnectOptions::default()).await.expect("connect");
        let status =
            host.agents.proxy_web_request(fetch(&format!("http://127.0.0.1:{port}/"))).await.expect_err("host");
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    });
    let log = daemon.log_text();
    assert_eq!(log.matches("web request served").count(), 2, "{log}");
    assert_eq!(log.matches("web request not served").count(), 6, "{log}");

    // The audit trail: each request once, by the tool container, host and reason only.
    let records = daemon.audit_records("egress");
    let of = |outcome: &str| records.iter().filter(|r| r["outcome"] == outcome).collect::<Vec<_>>();
    assert_eq!(of("allowed").len(), 2, "{records:?}");
    let refused = of("refused");
    let metadata: Vec<_> = refused.iter().filter(|r| r["detail"]["host"] == "169.254.169.254").collect();
    assert_eq!(metadata.len(), 1, "{records:?}");
    assert!(metadata[0]["detail"]["reason"].as_str().is_some_and(|r| r.contains("cloud metadata endpoint")));
    assert!(metadata[0]["principal"].as_str().is_some_and(|p| p.starts_with("container:tool:")), "{records:?}");
    assert_eq!(metadata[0]["context"], "user:baaaht-self-test", "{records:?}");
    assert!(
        !serde_json::Value::from(records.clone()).to_string().contains("latest/meta-data"),
        "paths are never recorded"
    );
    drop(agent);
}

#[test]
fn a_workers_web_fetch_reads_an_allowed_page_as_text_through_the_proxy() {
    let rt = baaaht_tests::runtime();
    let port = rt.block_on(test_server());
    let daemon = allowing(port);
    let agent = daemon.lingering_agent("worker", None, &[]).expect("worker container");
    rt.block_on(async {
        let mut worker = client::connect(&agent.socket, agent.options()).await.expect("connect as the worker");
        let fetch = |url: String| v1::ToolRequest {
            tool: "web_fetch".into(),
            params_json: serde_json::json!({"url": url}).to_string(),
            ..v1::ToolRequest::default()
        };
        let page =
            worker.agents.request_tool_execution(fetch(format!("http://127.0.0.1:{port}/"))).await.expect("served");
        let page = page.into_inner();
        assert!(!page.is_error, "{}", page.content);
        assert_eq!(page.content, format!("http://127.0.0.1:{port}/ (HTTP 200, text/html)\n\nhello"));
        let refused =
            worker.agents.request_tool_execution(fetch("http://169.254.169.254/".into())).await.expect("answered");
        let refused = refused.into_inner();
        assert!(refused.is_error && refused.content.contains("cloud metadata endpoint"), "{}", refused.content);
    });
    drop(agent);
}

#[test]
fn web_search_asks_the_configured_searxng_instance() {
    let rt = baaaht_tests::runtime();
    let port = rt.block_on(test_server());
    let daemon = TestDaemon::start(DaemonOptions {
        env: vec![
            ("BAAAHT__TOOLS__WEB_PROXY__SEARCH__BACKEND".into(), "searxng".into()),
            ("BAAAHT__TOOLS__WEB_PROXY__SEARCH__SEARXNG_URL".into(), format!("http://127.0.0.1:{port}")),
        ],
        ..Default::default()
    })
    .expect("daemon starts");
    let agent = daemon.lingering_agent("researcher", None, &[]).expect("researcher container");
    rt.block_on(async {
        let mut researcher = client::connect(&agent.socket, agent.options()).await.expect("connect as the researcher");
        let request = v1::ToolRequest {
            tool: "web_search".into(),
            params_json: serde_json::json!({"query": "rust lang", "count": 5}).to_string(),
            ..v1::ToolRequest::default()
        };
        let found = researcher.agents.request_tool_execution(request).await.expect("answered").into_inner();
        assert!(!found.is_error, "{}", found.content);
        assert_eq!(
            found.content,
            "1. Rust Programming Language\n   https://www.rust-lang.org/\n   A language empowering everyone.\n\
             2. The Book\n   https://doc.rust-lang.org/book/\n"
        );
    });
    drop(agent);
}

/// A Coder's commands reach the network only through the tool runner's proxy, which the
/// daemon opens per the context's egress policy and the address filter: a plain http request
/// (absolute form, rewritten for the server) and a CONNECT tunnel to an allowed host work; a
/// host the policy does not name is refused with the rule that would allow it; git over ssh
/// and a raw connection say what works instead; each connection is audited with its bytes.
#[test]
fn a_coders_commands_reach_allowed_hosts_through_the_proxy_and_nothing_else() {
    let rt = baaaht_tests::runtime();
    let (bridge, port) = baaaht_tests::bridge_server();
    let (_, other) = baaaht_tests::bridge_server();
    // Both are private addresses the admin lets through the filter; only one is in the policy.
    let config = format!("tools:\n  web_proxy:\n    allow: ['{bridge}:{port}', '{bridge}:{other}']\n");
    let policy = format!("rules:\n  - host: '{bridge}:{port}'\n    action: allow\n");
    let daemon = TestDaemon::start(DaemonOptions {
        files: vec![("config/config.yaml".into(), config), ("users/baaaht-self-test/egress.yaml".into(), policy)],
        ..Default::default()
    })
    .expect("daemon");
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    let run = |command: String| exec(&rt, &daemon, &coder, &command);
    let fetch = |url: String| {
        run(format!(
            "python3 -c \"import urllib.request, urllib.error\ntry: print(urllib.request.urlopen('{url}', timeout=20).read().decode())\nexcept urllib.error.HTTPError as e: print(e.code, e.read().decode())\""
        ))
    };
    let plain = fetch(format!("http://{bridge}:{port}/hello?x=1"));
    assert!(
        plain.contains("arrived: GET /hello?x=1 HTTP/1.1"),
        "plain http in origin form: {plain}\n{}",
        daemon.log_text()
    );
    let tunnelled = run(format!(
        "python3 -c \"import http.client, os\nc = http.client.HTTPConnection('127.0.0.1', int(os.environ['HTTPS_PROXY'].rsplit(':', 1)[1]), timeout=20)\nc.set_tunnel('{bridge}', {port})\nc.request('GET', '/through')\nprint(c.getresponse().read().decode())\""
    ));
    assert!(tunnelled.contains("arrived: GET /through HTTP/1.1"), "CONNECT: {tunnelled}");
    let refused = fetch(format!("http://{bridge}:{other}/"));
    assert!(
        refused.contains("403")
            && refused.contains(&format!("{bridge}:{other} is not allowed for"))
            && refused.contains(&format!("- host: {bridge}\n    action: allow")),
        "an unnamed host: {refused}"
    );
    // The user hears of it in the inbox, with the command that allows it (once, however often
    // it is refused within the hour).
    fetch(format!("http://{bridge}:{other}/twice"));
    let inbox = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(["inbox", "--user", "baaaht-self-test"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht inbox");
    let inbox = String::from_utf8_lossy(&inbox.stdout).into_owned();
    assert_eq!(inbox.matches("was refused to your tools").count(), 1, "{inbox}");
    assert!(inbox.contains(&format!("`baaaht egress allow {bridge} --user baaaht-self-test`")), "{inbox}");
    // The host's admin allows it for this user: the next connection goes through, the rule is
    // in the user's file with who wrote it, and revoked it is refused again.
    let egress = |args: &[&str]| {
        let output = std::process::Command::new(baaaht_tests::bin("baaaht"))
            .arg("egress")
            .args(args)
            .env("BAAAHT_SOCKET", daemon.socket())
            .output()
            .expect("baaaht egress");
        assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let target = format!("{bridge}:{other}");
    let allowed = egress(&["allow", &target, "--user", "baaaht-self-test"]);
    assert!(allowed.starts_with(&format!("{target} is now: allow\n")), "{allowed}");
    let listed = egress(&["list", "--user", "baaaht-self-test"]);
    assert!(
        listed.contains(&format!("{bridge}:{port}")) && listed.contains(&target) && listed.contains("own"),
        "{listed}"
    );
    let written = std::fs::read_to_string(daemon.data_dir.join("users/baaaht-self-test/egress.yaml")).expect("rules");
    assert!(written.contains(&format!("  - host: '{target}'\n    action: allow  # by host:uid=")), "{written}");
    let now = fetch(format!("http://{target}/now"));
    assert!(now.contains("arrived: GET /now HTTP/1.1"), "allowed now: {now}");
    egress(&["revoke", &target, "--user", "baaaht-self-test"]);
    let again = fetch(format!("http://{target}/again"));
    assert!(again.contains("403") && again.contains("is not allowed for"), "revoked: {again}");
    let ssh = run(format!("git clone git@{bridge}:owner/repo.git /tmp/repo"));
    assert!(ssh.contains("ssh is not offered. Use the https URL"), "{ssh}");
    let raw = run(format!("bash -c 'exec 3<>/dev/tcp/{bridge}/{port}'"));
    assert!(
        // runc's kernel says "Network is unreachable", gVisor's "No route to host".
        (raw.contains("Network is unreachable") || raw.contains("No route to host"))
            && raw.contains("note: this container has no network of its own"),
        "{raw}"
    );
    // One record per connection: the allowed ones with their bytes, the refused one with why.
    let records = daemon.audit_records("egress");
    let ours: Vec<&serde_json::Value> =
        records.iter().filter(|record| record["detail"]["session"] == "self-test").collect();
    let outcomes: Vec<(String, u64)> = ours
        .iter()
        .map(|record| {
            (record["outcome"].as_str().unwrap_or_default().to_string(), record["detail"]["port"].as_u64().unwrap_or(0))
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("allowed".to_string(), u64::from(port)),
            ("allowed".into(), u64::from(port)),
            ("refused".into(), u64::from(other)),
            ("refused".into(), u64::from(other)),
            ("allowed".into(), u64::from(other)),
            ("refused".into(), u64::from(other)),
        ],
        "{ours:#?}"
    );
    assert!(
        ours[0]["detail"]["bytes_in"].as_u64().unwrap_or(0) > 0
            && ours[0]["detail"]["bytes_out"].as_u64().unwrap_or(0) > 0
    );
    assert!(ours[0]["detail"]["asked_by"].as_str().unwrap_or_default().starts_with("exec: python3"), "{:?}", ours[0]);
    // Each carries the time its own connection was asked for (not the container's first), and
    // `baaaht audit` shows them in that order, though a connection is written once it closes.
    let times: Vec<jiff::Timestamp> =
        ours.iter().map(|record| record["time"].as_str().unwrap_or_default().parse().expect("a time")).collect();
    assert!(times.windows(2).all(|pair| pair[0] < pair[1]), "{times:?}");
    // The metrics count the same connections by outcome and what allowed them, never by host.
    let metrics = daemon.metrics().expect("metrics");
    for counted in [
        "baaaht_egress_connections_total{outcome=\"allowed\",by=\"rule\"} 3",
        "baaaht_egress_connections_total{outcome=\"refused\",by=\"none\"} 3",
    ] {
        assert!(metrics.contains(counted), "{counted}:\n{metrics}");
    }
    assert!(metrics.contains("baaaht_egress_bytes_total{direction=\"in\"}"), "{metrics}");
    assert!(!metrics.contains(&bridge.to_string()), "no host is a label");
    // A client that shows only the status (git: "CONNECT tunnel failed, response 403") is not
    // left guessing: the command's result says what was refused and why, and so does a header.
    let cloned = run(format!("git clone https://{bridge}:{other}/repo.git /tmp/repo"));
    assert!(cloned.contains("response 403"), "{cloned}");
    assert!(
        cloned.contains("--- refused by baaaht's egress proxy ---")
            && cloned.contains(&format!("{bridge}:{other}: {bridge}:{other} is not allowed for")),
        "the reason in the tool's result: {cloned}"
    );
    let headers = run(format!("curl -s -o /dev/null -D - -p -x \"$HTTPS_PROXY\" https://{bridge}:{other}/"));
    assert!(headers.contains(&format!("X-Baaaht-Reason: {bridge}:{other} is not allowed for")), "{headers}");
}

/// A host no rule names is asked about on every channel following the context, and the first
/// answer decides: once (asked again next time), for the session (not asked again), always (a
/// rule in the user's file), deny; nobody answering in time denies; each answer audited.
#[test]
fn an_unnamed_host_is_asked_about_in_chat_and_the_first_answer_decides() {
    use tokio_stream::StreamExt as _;
    let rt = baaaht_tests::runtime();
    let (bridge, port) = baaaht_tests::bridge_server();
    let (_, second) = baaaht_tests::bridge_server();
    let (_, third) = baaaht_tests::bridge_server();
    let (_, fourth) = baaaht_tests::bridge_server();
    let allow: Vec<String> = [port, second, third, fourth].iter().map(|p| format!("'{bridge}:{p}'")).collect();
    let config = format!("tools:\n  web_proxy:\n    allow: [{}]\negress:\n  approval_timeout: 3\n", allow.join(", "));
    let daemon =
        TestDaemon::start(DaemonOptions { files: vec![("config/config.yaml".into(), config)], ..Default::default() })
            .expect("daemon");
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    // The user follows her conversation in a terminal.
    let mut events = rt.block_on(async {
        let mut host = client::connect(&daemon.socket(), ConnectOptions::default()).await.expect("connect");
        let context = v1::ContextRef { r#type: v1::ContextType::User as i32, id: "baaaht-self-test".into() };
        let subscription = v1::EventSubscription {
            context: Some(context),
            channel: v1::ChannelType::Tui as i32,
            ..Default::default()
        };
        host.sessions.subscribe_events(subscription).await.expect("subscribe").into_inner()
    });
    let fetch_in_background = |target: String| baaaht_tests::fetch_in_background(&coder, target);
    let next_request = |events: &mut tonic::Streaming<v1::OrchestratorEvent>| {
        rt.block_on(async {
            loop {
                let event = tokio::time::timeout(std::time::Duration::from_secs(30), events.next())
                    .await
                    .expect("an approval request within 30 s")
                    .expect("the stream")
                    .expect("an event");
                if let Some(v1::orchestrator_event::Event::Approval(request)) = event.event {
                    return request;
                }
            }
        })
    };
    let answer = |id: &str, how: &[&str]| {
        let output = std::process::Command::new(baaaht_tests::bin("baaaht"))
            .args(["egress"])
            .args(how)
            .arg(id)
            .env("BAAAHT_SOCKET", daemon.socket())
            .output()
            .expect("baaaht egress");
        assert!(output.status.success(), "{how:?}: {}", String::from_utf8_lossy(&output.stderr));
    };
    // An address the filter refuses anyway (loopback) is refused at once: nobody is asked.
    let refused = fetch_in_background("127.0.0.1:9".into()).join().expect("fetch");
    assert!(refused.contains("403") && refused.contains("loopback"), "{refused}");
    // Once: allowed, and asked again the next time (the first request asked is this one).
    let fetching = fetch_in_background(format!("{bridge}:{port}"));
    let request = next_request(&mut events);
    assert_eq!((request.host.as_str(), request.port), (bridge.to_string().as_str(), u32::from(port)));
    assert!(request.asked_by.starts_with("exec: python3"), "{request:?}");
    answer(&request.id, &["approve"]);
    assert!(fetching.join().expect("fetch").contains("arrived: GET /x"), "allowed once");
    // Allowed once three times: suggested as a rule.
    for _ in 0..2 {
        let fetching = fetch_in_background(format!("{bridge}:{port}"));
        answer(&next_request(&mut events).id, &["approve"]);
        assert!(fetching.join().expect("fetch").contains("arrived: GET /x"));
    }
    let suggested = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(["egress", "suggest", "--user", "baaaht-self-test"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht egress suggest");
    let suggested = String::from_utf8_lossy(&suggested.stdout).into_owned();
    assert!(
        suggested.contains(&format!("{bridge}:{port}"))
            && suggested.contains("allowed once 3 times")
            && suggested.contains(&format!("baaaht egress allow {bridge}:{port} --user baaaht-self-test")),
        "{suggested}"
    );
    // For the session: allowed now and next time without asking.
    let fetching = fetch_in_background(format!("{bridge}:{port}"));
    let request = next_request(&mut events);
    answer(&request.id, &["approve", "--session"]);
    assert!(fetching.join().expect("fetch").contains("arrived: GET /x"));
    let again = fetch_in_background(format!("{bridge}:{port}")).join().expect("fetch");
    assert!(again.contains("arrived: GET /x"), "not asked again in the session: {again}");
    // Deny, and nobody answering.
    let fetching = fetch_in_background(format!("{bridge}:{third}"));
    let request = next_request(&mut events);
    answer(&request.id, &["deny"]);
    let denied = fetching.join().expect("fetch");
    assert!(denied.contains("403") && denied.contains("was denied by root at the host"), "{denied}");
    // A host denied is not asked about again in the session.
    let again = fetch_in_background(format!("{bridge}:{third}")).join().expect("fetch");
    assert!(again.contains("403") && again.contains("an earlier answer in this conversation"), "{again}");
    let fetching = fetch_in_background(format!("{bridge}:{fourth}"));
    next_request(&mut events);
    let unanswered = fetching.join().expect("fetch");
    assert!(unanswered.contains("403") && unanswered.contains("nobody answered within 3 s"), "{unanswered}");
    // Always: a rule in the user's own file, for that host and port.
    let fetching = fetch_in_background(format!("{bridge}:{second}"));
    let request = next_request(&mut events);
    answer(&request.id, &["approve", "--always"]);
    assert!(fetching.join().expect("fetch").contains("arrived: GET /x"));
    let rules = std::fs::read_to_string(daemon.data_dir.join("users/baaaht-self-test/egress.yaml")).expect("rules");
    assert!(
        rules.contains(&format!("  - host: '{bridge}:{second}'\n    action: allow  # by root at the host")),
        "{rules}"
    );
    let answers: Vec<String> = daemon
        .audit_records("egress")
        .iter()
        .filter(|record| record["outcome"] == "answered")
        .map(|record| record["detail"]["decision"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(answers, ["once", "once", "once", "session", "deny", "always"]);
}

/// A secret bound to a host is swapped in at the edge: the Coder's commands see only a
/// placeholder; a real `git clone` over https (git's Basic auth after the server's 401) and an
/// https request with a bearer header reach the local git server with the real value; the
/// placeholder on its way to another host is refused and audited; and the value is nowhere in
/// the container, the data dir or the daemon's log.
#[test]
fn a_bound_secret_reaches_its_host_only_and_the_container_sees_a_placeholder() {
    const TOKEN: &str = "ghp_s3cr3t-value-only-the-daemon-knows";
    let rt = baaaht_tests::runtime();
    let temp = tempfile::tempdir().expect("tempdir");
    let bridge = baaaht_tests::bridge_address().expect("bridge address");
    let (ca, cert, key) = baaaht_tests::web::issued_for(temp.path(), &bridge.to_string()).expect("certificates");
    // A repository on the local forge, which demands the token as git sends it.
    let root = temp.path().join("repos");
    bare_repository(temp.path(), &root, "cloned through the edge\n");
    let auth = format!("x-access-token:{TOKEN}");
    let bind = bridge.to_string();
    let (forge, port) = baaaht_tests::git_server(
        &root,
        (&cert, &key),
        None,
        &temp.path().join("forge.log"),
        &[("BIND", bind.as_str()), ("AUTH", auth.as_str())],
    );
    let (_, other) = baaaht_tests::bridge_server();
    let passphrase = temp.path().join("passphrase");
    std::fs::write(&passphrase, "correct horse battery staple\n").expect("passphrase");
    let config = format!(
        "tools:\n  web_proxy:\n    allow: ['{bridge}:{port}', '{bridge}:{other}']\nsecrets:\n  user_usable: [GIT_TOKEN]\n"
    );
    let policy = format!("rules:\n  - host: '{bridge}'\n    action: allow\n");
    let daemon = TestDaemon::start(DaemonOptions {
        // The daemon trusts the forge's authority, as it would a public one.
        env: vec![
            ("SSL_CERT_FILE".into(), ca.display().to_string()),
            ("BAAAHT_PASSPHRASE_FILE".into(), passphrase.display().to_string()),
        ],
        files: vec![("config/config.yaml".into(), config), ("users/baaaht-self-test/egress.yaml".into(), policy)],
        ..Default::default()
    })
    .expect("daemon");
    let mut set = std::process::Command::new(baaaht_tests::bin("baaahtd"))
        .args(["secrets", "set", "GIT_TOKEN"])
        .env("BAAAHT_DATA", &daemon.data_dir)
        .env("BAAAHT_PASSPHRASE_FILE", &passphrase)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("secrets set");
    std::io::Write::write_all(&mut set.stdin.take().expect("stdin"), TOKEN.as_bytes()).expect("value");
    assert!(set.wait().expect("set").success());
    let bound = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(["egress", "credential", "add", "GIT_TOKEN", "--host", &format!("{bridge}:{port}")])
        .args(["--user", "baaaht-self-test"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht egress credential add");
    let said = String::from_utf8_lossy(&bound.stdout).into_owned();
    assert!(bound.status.success(), "{said}{}", String::from_utf8_lossy(&bound.stderr));
    assert!(said.contains("GIT_TOKEN is swapped in") && said.contains("credential GIT_TOKEN"), "{said}");

    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    let run = |command: &str| exec(&rt, &daemon, &coder, command);
    // What the command prints of it comes back redacted (a placeholder is not for the model);
    // its first characters show it is one.
    let seen = run("echo \"GIT_TOKEN=$GIT_TOKEN\"; printf '%s' \"$GIT_TOKEN\" | cut -c1-19");
    assert!(seen.contains("GIT_TOKEN=[redacted: baaaht-placeholder]") && !seen.contains(TOKEN), "{seen}");
    assert!(seen.contains("\nbaaaht-placeholder-"), "{seen}");

    let cloned = run(&format!(
        "git clone -q https://x-access-token:$GIT_TOKEN@{bridge}:{port}/repo.git /workspace/repo && cat /workspace/repo/README"
    ));
    assert!(cloned.contains("cloned through the edge"), "{cloned}\n{}\n{}", forge.log_text(), daemon.log_text());
    // A request with the token, as any API client sends it; the server echoes it back, and the
    // command sees its placeholder there, not the value.
    let request = |headers: &str| {
        run(&format!(
            "python3 -c \"import os, urllib.request, urllib.error\nt = os.environ['GIT_TOKEN']\nr = urllib.request.Request('https://{bridge}:{port}/echo', headers={headers})\ntry:\n  a = urllib.request.urlopen(r, timeout=20)\n  print(a.status, a.headers.get('X-Echo'), a.read().decode())\nexcept urllib.error.HTTPError as e: print(e.code, e.read().decode())\""
        ))
    };
    let bearer = request("{'Authorization': 'Bearer ' + t}");
    assert!(
        bearer.contains(&format!("200 Bearer {} ok", "*".repeat(TOKEN.len()))) && !bearer.contains(TOKEN),
        "the value echoed back is blotted: {bearer}"
    );
    // An echoing endpoint that sends it back in every form, in headers (one with a byte that is
    // not text before it) and in a body cut in three-byte chunks: the command keeps what it
    // got in a file, which never holds the value in any form.
    let saved = run(&format!(
        "python3 -c \"import os, urllib.request\nr = urllib.request.Request('https://{bridge}:{port}/echo-all', headers={{'Authorization': 'Bearer ' + os.environ['GIT_TOKEN']}})\na = urllib.request.urlopen(r, timeout=20)\nopen('/workspace/echoed', 'wb').write(str(a.headers).encode('latin-1') + a.read())\nprint('saved', a.status)\""
    ));
    assert!(saved.contains("saved 200"), "{saved}\n{}", daemon.log_text());
    let echoed =
        std::fs::read(daemon.data_dir.join("sessions/self-test/data/echoed")).expect("the echo kept in the workspace");
    let echoed = String::from_utf8_lossy(&echoed).into_owned();
    let bearer_value = format!("Bearer {TOKEN}");
    let standard = base64::engine::general_purpose::STANDARD.encode(&bearer_value);
    let url_safe = base64::engine::general_purpose::URL_SAFE.encode(format!("xBearer {TOKEN}"));
    let hex: String = bearer_value.bytes().map(|byte| format!("{byte:02x}")).collect();
    let every_byte: String = TOKEN.bytes().map(|byte| format!("%{byte:02X}")).collect();
    let base32 = data_encoding::BASE32.encode(bearer_value.as_bytes());
    let mime = base64::engine::general_purpose::STANDARD.encode(format!("Authorization: {bearer_value}"));
    for (form, value) in [
        ("raw", TOKEN.to_string()),
        ("base64", standard[12..40].to_string()),
        ("base64url", url_safe[12..40].to_string()),
        ("hex", hex[14..60].to_string()),
        ("percent", TOKEN.replace('-', "%2D")),
        ("every byte percent-encoded", every_byte),
        ("reversed", TOKEN.chars().rev().collect()),
        ("base32", base32[16..48].to_string()),
        ("json \\u", TOKEN.bytes().map(|byte| format!("\\u{byte:04x}")).collect()),
        ("html", TOKEN.bytes().map(|byte| format!("&#{byte};")).collect()),
        ("cut short", TOKEN[..TOKEN.len() - 2].to_string()),
        ("base64 in lines", mime[28..76].to_string()),
    ] {
        assert!(!echoed.contains(&value), "the {form} value reached the container: {echoed}");
    }
    assert!(echoed.contains("\"authorization\": \"Bearer ****"), "{echoed}");
    // In its status line and a trailer, asking for the answer compressed under `chunked`: the
    // server is not asked (TE goes no further), and an answer compressed anyway is refused.
    let edges = |query: &str| {
        run(&format!(
            "curl -s -i --raw --suppress-connect-headers -H \"Authorization: Bearer $GIT_TOKEN\" -H 'TE: gzip, trailers' \
             -o /workspace/edges https://{bridge}:{port}/echo-edges{query}; echo curl $?"
        ));
        let kept = std::fs::read(daemon.data_dir.join("sessions/self-test/data/edges")).expect("the answer kept");
        String::from_utf8_lossy(&kept).into_owned()
    };
    let raw = edges("");
    assert!(raw.starts_with("HTTP/1.1 200 OK\r\n") && !raw.contains(TOKEN), "{raw}");
    assert!(raw.contains(&format!("body: Bearer {}", "*".repeat(TOKEN.len()))), "{raw}");
    assert!(raw.to_ascii_lowercase().contains(&format!("x-echo-trailer: bearer {}", "*".repeat(TOKEN.len()))), "{raw}");
    let compressed = edges("?gzip");
    assert!(compressed.contains("502") && compressed.contains("answered compressed"), "{compressed}");
    assert!(!forge.log_text().contains("te gzip"), "{}", forge.log_text());
    let blotted = daemon.audit_records("egress");
    assert!(
        blotted.iter().any(|r| r["outcome"] == "blotted" && r["detail"]["place"] == "response_body"),
        "{blotted:#?}"
    );
    // Inside a tunnel to the bound host, a request naming another host, a placeholder in a
    // header a server might echo, or in the URL, is refused before anything is sent.
    let elsewhere_host = request("{'Authorization': 'Bearer ' + t, 'Host': 'attacker.example'}");
    assert!(elsewhere_host.contains("403") && elsewhere_host.contains("must name that host"), "{elsewhere_host}");
    let other_header = request("{'X-Request-Id': t}");
    assert!(other_header.contains("403") && other_header.contains("it goes only in Authorization"), "{other_header}");
    let received = forge.log_text();
    assert!(received.contains(&format!("basic x-access-token:{TOKEN}")), "git's Basic auth: {received}");
    assert!(received.contains(&format!("authorization Bearer {TOKEN}")), "the bearer header: {received}");
    assert!(!received.contains("baaaht-placeholder-"), "no placeholder reached the forge: {received}");

    // The placeholder sent anywhere else is refused, and the refusal audited.
    let elsewhere = run(&format!(
        "python3 -c \"import os, urllib.request, urllib.error\nr = urllib.request.Request('http://{bridge}:{other}/leak', headers={{'Authorization': 'token ' + os.environ['GIT_TOKEN']}})\ntry: print(urllib.request.urlopen(r, timeout=20).read().decode())\nexcept urllib.error.HTTPError as e: print(e.code, e.read().decode())\""
    ));
    assert!(elsewhere.contains("403") && elsewhere.contains("which GIT_TOKEN is not bound to"), "{elsewhere}");
    let records = daemon.audit_records("egress");
    assert!(
        records.iter().any(|r| r["outcome"] == "refused" && r["detail"]["credential"] == "GIT_TOKEN"),
        "{records:#?}"
    );
    let reads = daemon.audit_records("secret");
    assert!(reads.iter().any(|r| r["detail"]["name"] == "GIT_TOKEN" && r["outcome"] == "read"), "{reads:#?}");

    // The value is nowhere but the encrypted store: not in the container, the data dir or the log.
    // (Written in two halves, so the command's own audit line does not hold the value.)
    let (head, tail) = TOKEN.split_at(4);
    let inside = run(&format!("grep -rl -- '{head}''{tail}' /workspace /tmp /etc 2>/dev/null; echo searched"));
    assert!(inside.trim_end().ends_with("--- stdout ---\nsearched"), "files holding the value: {inside}");
    let found =
        std::process::Command::new("grep").args(["-rl", "--", TOKEN]).arg(&daemon.data_dir).output().expect("grep");
    assert!(found.stdout.is_empty(), "{}", String::from_utf8_lossy(&found.stdout));
    assert!(!daemon.log_text().contains(TOKEN));
    drop(coder);
}

/// In the TUI an approval request is a prompt over the editor, and one key answers it: `s`
/// allows the host for the session (not asked again), `d` refuses the next one. All stay in
/// the conversation: the TUI started again shows them, and prompts again for one still waiting.
#[test]
fn the_tui_prompts_for_an_approval_and_one_key_answers_it() {
    use baaaht_tests::tmux::{shell_quote, Tmux};
    let wait = std::time::Duration::from_secs(30);
    let (bridge, port) = baaaht_tests::bridge_server();
    let (_, other) = baaaht_tests::bridge_server();
    let (_, third) = baaaht_tests::bridge_server();
    let config =
        format!("tools:\n  web_proxy:\n    allow: ['{bridge}:{port}', '{bridge}:{other}', '{bridge}:{third}']\n");
    let daemon =
        TestDaemon::start(DaemonOptions { files: vec![("config/config.yaml".into(), config)], ..Default::default() })
            .expect("daemon");
    // The conversation the TUI attaches to is the one the Coder's tools ask for.
    let created = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(["sessions", "new", "--user", "baaaht-self-test"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("sessions new");
    let created = String::from_utf8_lossy(&created.stdout).to_string();
    let session = created.split_whitespace().next().expect("a session id").to_string();
    let coder = daemon.lingering_agent("coder", Some(&session), &[]).expect("coder");
    let terminal = Tmux::start(120, 30, &[("BAAAHT_SOCKET", daemon.socket().display().to_string())]).expect("tmux");
    let tui =
        format!("{} tui --user baaaht-self-test", shell_quote(&baaaht_tests::bin("baaaht").display().to_string()));
    terminal.type_text(&tui).expect("type");
    terminal.press(&["Enter"]).expect("enter");
    terminal.wait_for("● connected · user:baaaht-self-test", wait).expect("the TUI attaches");

    let fetching = baaaht_tests::fetch_in_background(&coder, format!("{bridge}:{port}"));
    let prompt = format!(
        "? [o] once  [s] this session  [a] always  [d] deny  The coder's tools want to reach {bridge}:{port} for `exec"
    );
    terminal.wait_for(&prompt, wait).unwrap_or_else(|error| panic!("{error:?}\n{}", daemon.log_text()));
    terminal.press(&["s"]).expect("s");
    let fetched = fetching.join().expect("fetch");
    assert!(fetched.contains("arrived: GET /x"), "{fetched}");
    let screen = terminal.wait_for("Allowed for this conversation, by root at the host.", wait).expect("settled");
    assert!(!screen.contains("[o] once"), "the prompt is gone: {screen}");
    // Not asked again in this session.
    assert!(baaaht_tests::fetch_in_background(&coder, format!("{bridge}:{port}"))
        .join()
        .expect("fetch")
        .contains("arrived: GET /x"));
    // Another host, refused with d; what was typed meanwhile would not have answered.
    let fetching = baaaht_tests::fetch_in_background(&coder, format!("{bridge}:{other}"));
    terminal
        .wait_for(&format!("[d] deny  The coder's tools want to reach {bridge}:{other}"), wait)
        .expect("the second prompt");
    terminal.press(&["d"]).expect("d");
    let refused = fetching.join().expect("fetch");
    assert!(refused.contains("403") && refused.contains("was denied by root at the host"), "{refused}");
    terminal.wait_for("Denied, by root at the host.", wait).expect("settled");

    // A third asks; the TUI is left while it waits, and started again.
    let fetching = baaaht_tests::fetch_in_background(&coder, format!("{bridge}:{third}"));
    terminal
        .wait_for(&format!("[d] deny  The coder's tools want to reach {bridge}:{third}"), wait)
        .expect("the third prompt");
    terminal.type_text("/quit").expect("type");
    terminal.press(&["Enter"]).expect("quit");
    terminal.wait_for("baaaht: left session", wait).expect("the TUI ends");
    terminal.type_text("clear").expect("type");
    terminal.press(&["Enter"]).expect("enter");
    terminal.type_text(&tui).expect("type");
    terminal.press(&["Enter"]).expect("enter");
    let screen = terminal
        .wait_until(
            |screen| {
                screen.contains("● connected")
                    && screen.contains("Allowed for this conversation, by root at the host.")
                    && screen.contains("Denied, by root at the host.")
            },
            wait,
        )
        .unwrap_or_else(|error| panic!("the conversation keeps its approvals: {error:?}"));
    assert!(screen.contains(&format!("The coder's tools want to reach {bridge}:{other}")), "{screen}");
    terminal
        .wait_for(&format!("[d] deny  The coder's tools want to reach {bridge}:{third}"), wait)
        .expect("the one still waiting is asked again");
    terminal.press(&["o"]).expect("o");
    let fetched = fetching.join().expect("fetch");
    assert!(fetched.contains("arrived: GET /x"), "answered from the TUI started again: {fetched}");
    terminal.wait_for("Allowed once, by root at the host.", wait).expect("settled");
    drop(coder);
}

/// A scheduled run has nobody to ask: a host no rule names is refused at once (even with the
/// user connected), and the inbox says how to allow it.
#[test]
fn a_scheduled_run_reaching_an_unnamed_host_is_refused_at_once_and_the_inbox_says_how_to_allow_it() {
    use baaaht_tests::fake_provider::{anthropic_answer, Answer, Asked, Responder};
    use baaaht_tests::scenario;
    let rt = baaaht_tests::runtime();
    let (bridge, port) = baaaht_tests::bridge_server();
    let target = format!("{bridge}:{port}");
    let command = format!(
        "python3 -c \"import urllib.request, urllib.error\ntry: print(urllib.request.urlopen('http://{target}/x', timeout=30).read().decode())\nexcept urllib.error.HTTPError as e: print(e.code, e.read().decode())\""
    );
    // The Coder, run by the scheduler, fetches the host and reports what it got.
    let brain = Answer::Respond(Responder(std::sync::Arc::new(move |request| {
        let asked = Asked::of(request);
        match asked.results.last() {
            None if asked.offers("exec") => {
                anthropic_answer("", &[("toolu_exec_1", "exec", serde_json::json!({"command": command}))])
            }
            Some(result) => anthropic_answer(&format!("fetched: {result}"), &[]),
            None => anthropic_answer("I was not expecting to be asked.", &[]),
        }
    })));
    let options = DaemonOptions {
        files: vec![("config/config.yaml".into(), format!("tools:\n  web_proxy:\n    allow: ['{target}']\n"))],
        ..Default::default()
    };
    let (_fake, daemon) = scenario::start(&rt, brain, options).expect("daemon");
    let id = rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await.expect("connect");
        // Alice is connected: an interactive turn would ask her; a scheduled run does not.
        let context = v1::ContextRef { r#type: v1::ContextType::User as i32, id: "alice".into() };
        let subscription = v1::EventSubscription {
            context: Some(context),
            channel: v1::ChannelType::Tui as i32,
            ..Default::default()
        };
        let events = host.sessions.subscribe_events(subscription).await.expect("subscribe").into_inner();
        std::mem::forget(events);
        let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1);
        let task = v1::TaskDefinition {
            user_id: "alice".into(),
            agent: "coder".into(),
            description: "fetch the report".into(),
            schedule: Some(v1::TaskSchedule { kind: Some(v1::task_schedule::Kind::Once(at.to_string())) }),
            prompt: "Fetch the report.".into(),
            ..v1::TaskDefinition::default()
        };
        host.tasks.schedule_task(task).await.expect("scheduled").into_inner().task.expect("task").id
    });
    let baaaht = |args: &[&str]| {
        let output = std::process::Command::new(baaaht_tests::bin("baaaht"))
            .args(args)
            .env("BAAAHT_SOCKET", daemon.socket())
            .output()
            .expect("baaaht");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let runs = loop {
        let runs = baaaht(&["tasks", "runs", &id]);
        if runs.contains(" ok") || runs.contains("failed") {
            break runs;
        }
        assert!(std::time::Instant::now() < deadline, "the run did not end: {runs}\n{}", daemon.log_text());
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(runs.contains(" ok"), "{runs}");
    // (The run's own result went to her connected channel; the refusal waits in her inbox.)
    let inbox = baaaht(&["inbox", "--user", "alice", "--all"]);
    assert!(inbox.contains(&format!("{bridge} was refused to your tools")), "{inbox}");
    assert!(inbox.contains(&format!("`baaaht egress allow {bridge} --user alice`")), "{inbox}");
    let records = daemon.audit_records("egress");
    assert!(records.iter().all(|record| record["outcome"] != "answered"), "nobody was asked: {records:#?}");
    let refused: Vec<_> =
        records.iter().filter(|record| record["outcome"] == "refused" && record["context"] == "user:alice").collect();
    assert_eq!(refused.len(), 1, "{records:#?}");
    let reason = refused[0]["detail"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("nobody can be asked during a scheduled run"), "{reason}");
}

/// Writes a package index under `root`: `/simple/demo-pkg/` listing a real wheel of
/// `demo_pkg` 1.0 in `/files/`.
fn package_index(root: &std::path::Path) {
    let script = r#"
import base64, hashlib, os, sys, zipfile
root = sys.argv[1]
os.makedirs(os.path.join(root, "files"), exist_ok=True)
os.makedirs(os.path.join(root, "simple", "demo-pkg"), exist_ok=True)
name = "demo_pkg-1.0-py3-none-any.whl"
files = {
    "demo_pkg/__init__.py": "GREETING = 'installed through the proxy'\n",
    "demo_pkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
    "demo_pkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for path, text in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(text.encode())}")
record.append("demo_pkg-1.0.dist-info/RECORD,,")
files["demo_pkg-1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
wheel = os.path.join(root, "files", name)
with zipfile.ZipFile(wheel, "w") as archive:
    for path, text in files.items():
        archive.writestr(path, text)
digest = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
with open(os.path.join(root, "simple", "demo-pkg", "index.html"), "w") as index:
    index.write(f'<!DOCTYPE html><html><body><a href="/files/{name}#sha256={digest}">{name}</a></body></html>\n')
"#;
    let status = std::process::Command::new("python3").args(["-c", script]).arg(root).status().expect("python3");
    assert!(status.success(), "the package index was not written");
}

/// A Coder's real `pip download` from a local package index over https, `curl` to the same
/// host, and a `git clone` over https, all through the runner's proxy: the daemon's roots
/// (here a test authority) are what the commands trust, and nothing else is reached.
#[test]
fn pip_curl_and_git_in_a_coders_container_reach_a_local_https_server_through_the_proxy() {
    let rt = baaaht_tests::runtime();
    let temp = tempfile::tempdir().expect("tempdir");
    let bridge = baaaht_tests::bridge_address().expect("bridge address");
    let (ca, cert, key) = baaaht_tests::web::issued_for(temp.path(), &bridge.to_string()).expect("certificates");
    let root = temp.path().join("served");
    std::fs::create_dir_all(&root).expect("root");
    package_index(&root);
    bare_repository(temp.path(), &root, "a repository on the local forge\n");
    let (bind, served) = (bridge.to_string(), root.display().to_string());
    let (server, port) = baaaht_tests::git_server(
        &root,
        (&cert, &key),
        None,
        &temp.path().join("server.log"),
        &[("BIND", bind.as_str()), ("STATIC", served.as_str())],
    );
    let daemon = TestDaemon::start(DaemonOptions {
        env: vec![("SSL_CERT_FILE".into(), ca.display().to_string())],
        files: vec![
            ("config/config.yaml".into(), format!("tools:\n  web_proxy:\n    allow: ['{bridge}:{port}']\n")),
            (
                "users/baaaht-self-test/egress.yaml".into(),
                format!("rules:\n  - host: '{bridge}'\n    action: allow\n  - host: localhost\n    action: allow\n"),
            ),
        ],
        ..Default::default()
    })
    .expect("daemon");
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    let run = |command: String| exec(&rt, &daemon, &coder, &command);
    let index = format!("https://{bridge}:{port}/simple/");
    let pip = run(format!(
        "PIP_DISABLE_PIP_VERSION_CHECK=1 pip download --no-deps --no-cache-dir -d /workspace/dl --index-url {index} demo-pkg \
         && ls /workspace/dl"
    ));
    assert!(pip.contains("demo_pkg-1.0-py3-none-any.whl"), "{pip}\n{}\n{}", server.log_text(), daemon.log_text());
    let curl = run(format!("curl -sS https://{bridge}:{port}/echo"));
    assert!(curl.contains("ok"), "{curl}");
    let git =
        run(format!("git clone -q https://{bridge}:{port}/repo.git /workspace/repo && cat /workspace/repo/README"));
    assert!(git.contains("a repository on the local forge"), "{git}");
    // A name the rules allow but that resolves to loopback is refused by the address filter.
    let loopback = run(format!("curl -sS http://localhost:{port}/echo"));
    assert!(loopback.contains("is a loopback address"), "{loopback}");
    let log = server.log_text();
    assert!(log.contains("request GET /simple/demo-pkg/") && log.contains("request GET /files/demo_pkg-1.0"), "{log}");
    // Each went through the daemon, by the user's rule, with what asked for it. A connection's
    // record is written when it ends, which may come after the command's answer.
    let programs = ["exec: PIP_DISABLE_PIP_VERSION_CHECK=1 pip download", "exec: curl", "exec: git clone"];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let records = daemon.audit_records("egress");
        let asked: Vec<&str> = records
            .iter()
            .filter(|record| record["outcome"] == "allowed")
            .filter_map(|record| record["detail"]["asked_by"].as_str())
            .collect();
        let missing: Vec<&str> =
            programs.into_iter().filter(|program| !asked.iter().any(|by| by.starts_with(program))).collect();
        if missing.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no record of {missing:?} within 30 s: {asked:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drop(coder);
}

/// What a client in a tool container sends through its own egress proxy, byte for byte: a
/// CONNECT to `ADDRESS`, then `PLAN` — `tls NAME` (a TLS handshake naming NAME), or lines to
/// send as they are (`\\r\\n` ends a line; `pause N` waits N seconds between pieces); what
/// comes back until the connection closes is printed (a request that is served asks for it
/// with `Connection: close`: the client does not half-close, which gVisor's network stack does
/// not always pass on).
const RAW_CLIENT: &str = r#"
import os, socket, ssl, sys, time
proxy = os.environ["HTTPS_PROXY"].split("//")[1].rstrip("/")
host, port = proxy.rsplit(":", 1)
address, plan = sys.argv[1], sys.argv[2:]
s = socket.create_connection((host, int(port)), timeout=20)
s.sendall(f"CONNECT {address} HTTP/1.1\r\nHost: {address}\r\n\r\n".encode())
said = b""
while b"\r\n\r\n" not in said:
    said += s.recv(1)
print("proxy:", said.split(b"\r\n")[0].decode())
if plan[0] == "tls":
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        context.wrap_socket(s, server_hostname=plan[1]).do_handshake()
        print("handshake: done")
    except Exception as error:
        print("handshake: failed", type(error).__name__)
    sys.exit(0)
for piece in plan:
    if piece.startswith("pause "):
        time.sleep(float(piece[6:]))
        continue
    s.sendall(piece.replace("\\r\\n", "\r\n").encode())
got = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    got += chunk
print(got.decode(errors="replace"))
"#;

/// The egress edge reads every connection a tool command opens (DESIGN.md §10.2, §5.11, §5.14):
/// TLS must name the host it was allowed for (SNI), and plain HTTP is read with one real parser,
/// request by request — one `Host` naming that host, every request of a kept-alive connection;
/// a placeholder never goes out in plain HTTP, however the request is spelt or paced. Played
/// through the real runner's proxy with a raw client, against servers on the container bridge.
#[test]
fn a_connection_reaches_only_the_name_it_was_allowed_for_and_plain_http_is_read_strictly() {
    let rt = baaaht_tests::runtime();
    let temp = tempfile::tempdir().expect("tempdir");
    let bridge = baaaht_tests::bridge_address().expect("bridge address");
    let (_ca, cert, key) = baaaht_tests::web::issued_for(temp.path(), &bridge.to_string()).expect("certificates");
    let root = temp.path().join("repos");
    std::fs::create_dir_all(&root).expect("root");
    let bind = bridge.to_string();
    let (forge, tls_port) = baaaht_tests::git_server(
        &root,
        (&cert, &key),
        None,
        &temp.path().join("forge.log"),
        &[("BIND", bind.as_str())],
    );
    let (_, plain_port) = baaaht_tests::keep_alive_bridge_server();
    let passphrase = temp.path().join("passphrase");
    std::fs::write(&passphrase, "correct horse battery staple\n").expect("passphrase");
    let config = format!(
        "tools:\n  web_proxy:\n    allow: ['{bridge}:{tls_port}', '{bridge}:{plain_port}']\nsecrets:\n  user_usable: [API_TOKEN]\n"
    );
    let policy = format!("rules:\n  - host: '{bridge}'\n    action: allow\n");
    let daemon = TestDaemon::start(DaemonOptions {
        env: vec![("BAAAHT_PASSPHRASE_FILE".into(), passphrase.display().to_string())],
        files: vec![("config/config.yaml".into(), config), ("users/baaaht-self-test/egress.yaml".into(), policy)],
        ..Default::default()
    })
    .expect("daemon");
    let mut set = std::process::Command::new(baaaht_tests::bin("baaahtd"))
        .args(["secrets", "set", "API_TOKEN"])
        .env("BAAAHT_DATA", &daemon.data_dir)
        .env("BAAAHT_PASSPHRASE_FILE", &passphrase)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("secrets set");
    std::io::Write::write_all(&mut set.stdin.take().expect("stdin"), b"tok-value-only-the-daemon-knows")
        .expect("value");
    assert!(set.wait().expect("set").success());
    let bound = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(["egress", "credential", "add", "API_TOKEN", "--host", &format!("{bridge}:{tls_port}")])
        .args(["--user", "baaaht-self-test"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht egress credential add");
    assert!(bound.status.success(), "{}", String::from_utf8_lossy(&bound.stderr));
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    // Each piece in double quotes: `$API_TOKEN` is the command's own placeholder (the daemon
    // redacts a placeholder written into a command, so it is named, not written).
    let client = |address: String, plan: &[&str]| {
        let plan: Vec<String> = plan.iter().map(|piece| format!("\"{piece}\"")).collect();
        let command =
            format!("cat > /tmp/raw.py <<'EOF'\n{RAW_CLIENT}\nEOF\npython3 /tmp/raw.py '{address}' {}", plan.join(" "));
        exec(&rt, &daemon, &coder, &command)
    };
    let (tls, plain) = (format!("{bridge}:{tls_port}"), format!("{bridge}:{plain_port}"));

    // TLS naming its own host (none, for an address) is carried; naming another is cut off.
    assert!(client(tls.clone(), &["tls", &bind]).contains("handshake: done"), "{}", daemon.log_text());
    let fronted = client(tls.clone(), &["tls", "hidden.rt3.test"]);
    assert!(fronted.contains("proxy: HTTP/1.1 200") && fronted.contains("handshake: failed"), "{fronted}");

    // Plain HTTP: one Host naming the host, on every request of a kept-alive connection.
    let good = format!("GET /first HTTP/1.1\\r\\nHost: {plain}\\r\\nConnection: close\\r\\n\\r\\n");
    let served = client(plain.clone(), &[&good]);
    assert!(served.contains("arrived: GET /first HTTP/1.1"), "{served}\n{}", daemon.log_text());
    let other = client(plain.clone(), &["GET /x HTTP/1.1\\r\\nHost: hidden.rt3.test\\r\\n\\r\\n"]);
    assert!(other.contains("403") && other.contains("must name that host once"), "{other}");
    let twice = format!("GET /x HTTP/1.1\\r\\nHost: {plain}\\r\\nHost: hidden.rt3.test\\r\\n\\r\\n");
    assert!(client(plain.clone(), &[&twice]).contains("must name that host once"));
    let kept_alive = format!(
        "GET /one HTTP/1.1\\r\\nHost: {plain}\\r\\n\\r\\nGET /two HTTP/1.1\\r\\nHost: hidden.rt3.test\\r\\n\\r\\n"
    );
    let kept_alive = client(plain.clone(), &[&kept_alive]);
    assert!(kept_alive.contains("must name that host once") && !kept_alive.contains("GET /two"), "{kept_alive}");
    // A placeholder in plain HTTP: refused however the request is spelt or paced.
    let placeholder = "$API_TOKEN";
    for (spelt, plan) in [
        (
            "a lower-case method",
            vec![format!("get /leak HTTP/1.1\\r\\nHost: {plain}\\r\\nAuthorization: Bearer {placeholder}\\r\\n\\r\\n")],
        ),
        (
            "an unusual method",
            vec![format!(
                "PURGE /leak HTTP/1.1\\r\\nHost: {plain}\\r\\nAuthorization: Bearer {placeholder}\\r\\n\\r\\n"
            )],
        ),
        (
            "in pieces, slowly",
            vec![
                "G".to_string(),
                "pause 7".into(),
                format!("ET /leak HTTP/1.1\\r\\nHost: {plain}\\r\\nAuthorization: Bearer {placeholder}\\r\\n\\r\\n"),
            ],
        ),
    ] {
        let plan: Vec<&str> = plan.iter().map(String::as_str).collect();
        let said = client(plain.clone(), &plan);
        assert!(
            said.contains("403") && said.contains("never in plain http") || said.contains("not bound to"),
            "{spelt}: {said}\n{}",
            daemon.log_text()
        );
        assert!(!said.contains("arrived:"), "{spelt} reached the server: {said}");
    }
    let records = daemon.audit_records("egress");
    let refused: Vec<String> = records
        .iter()
        .filter(|r| r["outcome"] == "refused")
        .filter_map(|r| r["detail"]["reason"].as_str().map(str::to_string))
        .collect();
    assert!(refused.iter().any(|why| why.contains("named hidden.rt3.test (SNI)")), "{refused:#?}");
    assert!(!forge.log_text().contains("request "), "nothing reached the TLS server: {}", forge.log_text());
    drop(coder);
}

/// Runs `command` in `coder`'s container; what it printed.
fn exec(
    rt: &tokio::runtime::Runtime,
    daemon: &TestDaemon,
    coder: &baaaht_tests::LingeringAgent,
    command: &str,
) -> String {
    rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
        let request = v1::ToolRequest {
            tool: "exec".into(),
            params_json: serde_json::json!({ "command": command, "timeout": 120 }).to_string(),
            ..v1::ToolRequest::default()
        };
        let answer = agent.agents.request_tool_execution(request).await;
        answer.unwrap_or_else(|status| panic!("{status:?}\n{}", daemon.log_text())).into_inner().content
    })
}

/// A bare repository `root/repo.git` with one commit of a README saying `readme` (made in
/// `scratch/work`).
fn bare_repository(scratch: &std::path::Path, root: &std::path::Path, readme: &str) {
    let work = scratch.join("work");
    std::fs::create_dir_all(&work).expect("work");
    std::fs::write(work.join("README"), readme).expect("readme");
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["-c", "user.name=t", "-c", "user.email=t@example.com", "add", "README"],
        &["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "first"],
    ] {
        let status = std::process::Command::new("git").args(args).current_dir(&work).status().expect("git");
        assert!(status.success(), "git {args:?}");
    }
    std::fs::create_dir_all(root).expect("root");
    let status = std::process::Command::new("git")
        .args(["clone", "-q", "--bare"])
        .arg(&work)
        .arg(root.join("repo.git"))
        .status()
        .expect("git clone --bare");
    assert!(status.success());
}
