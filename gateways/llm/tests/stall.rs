//! A provider that stalls is given up after the endpoint's timeout, whether it never answers
//! the request at all or stops in the middle of its answer: the turn ends with a failure the
//! gateway can fall back from, never waits for ever (the household soak found the first).

use std::time::{Duration, Instant};

use baaaht_llm::model::{Block, Message, Request, Role};
use baaaht_llm::provider::{self, Endpoint, Failure, Wire};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Serves one connection: reads the request, writes `then` (maybe nothing) and holds the
/// connection open without another byte.
async fn stalling_server(then: &'static str) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(async move {
        let Ok((mut tcp, _)) = listener.accept().await else { return };
        let mut buffer = [0u8; 8192];
        let _ = tcp.read(&mut buffer).await;
        let _ = tcp.write_all(then.as_bytes()).await;
        tokio::time::sleep(Duration::from_secs(600)).await;
    });
    port
}

fn endpoint(port: u16) -> Endpoint {
    Endpoint {
        name: "local".into(),
        wire: Wire::OpenAi,
        api_base: format!("http://127.0.0.1:{port}/v1"),
        api_key: None,
        timeout: Duration::from_secs(1),
        max_output: None,
        cloud: Default::default(),
        signer: None,
        route: baaaht_llm::provider::Route::Direct,
    }
}

fn request() -> Request {
    Request {
        model: "m".into(),
        messages: vec![Message { role: Role::User, content: vec![Block::Text("Hi".into())] }],
        ..Request::default()
    }
}

async fn given_up(then: &'static str) -> (Failure, Duration) {
    let port = stalling_server(then).await;
    let started = Instant::now();
    let (endpoint, request, mut ignore) = (endpoint(port), request(), |_| {});
    let stream = provider::stream(&endpoint, &request, &mut ignore);
    // The backstop: the test itself must not hang when the gateway does.
    let failure = tokio::time::timeout(Duration::from_secs(30), stream).await.expect("given up").expect_err("stalled");
    (failure, started.elapsed())
}

#[tokio::test]
async fn a_provider_that_never_answers_the_request_is_given_up() {
    let (failure, _) = given_up("").await;
    assert!(matches!(failure, Failure::Timeout { .. }), "{failure:?}");
    assert_eq!(failure.to_string(), "local sent nothing for 1 s");
    assert!(failure.retryable(), "another provider may answer");
}

#[tokio::test]
async fn a_provider_that_stops_in_the_middle_of_its_answer_is_given_up() {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n\
                data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n";
    let (failure, _) = given_up(head).await;
    assert!(matches!(failure, Failure::Timeout { .. }), "{failure:?}");
}
