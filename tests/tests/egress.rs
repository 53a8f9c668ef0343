//! ProxyWebRequest on the real daemon, called with a real tool container's socket and token: an
//! allowed loopback server is fetched (a 2 MB body cut at 1 MB), private and metadata addresses
//! are refused, a host client is refused, and each request leaves one audit line. The only
//! server reached is the test's own, on loopback.

use baaaht_proto::client::{self, ConnectOptions};
use baaaht_proto::v1;
use baaaht_tests::{DaemonOptions, TestDaemon};
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
    let audit = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(["audit", "--kind", "egress", "--json"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht audit");
    let records: Vec<serde_json::Value> =
        String::from_utf8_lossy(&audit.stdout).lines().map(|line| serde_json::from_str(line).expect("JSON")).collect();
    let of = |outcome: &str| records.iter().filter(|r| r["outcome"] == outcome).collect::<Vec<_>>();
    assert_eq!(of("allowed").len(), 2, "{records:?}");
    let refused = of("refused");
    let metadata: Vec<_> = refused.iter().filter(|r| r["detail"]["host"] == "169.254.169.254").collect();
    assert_eq!(metadata.len(), 1, "{records:?}");
    assert!(metadata[0]["detail"]["reason"].as_str().is_some_and(|r| r.contains("cloud metadata endpoint")));
    assert!(metadata[0]["principal"].as_str().is_some_and(|p| p.starts_with("container:tool:")), "{records:?}");
    assert_eq!(metadata[0]["context"], "user:baaaht-self-test", "{records:?}");
    assert!(!String::from_utf8_lossy(&audit.stdout).contains("latest/meta-data"), "paths are never recorded");
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
