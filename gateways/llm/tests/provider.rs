//! The provider transport against a scriptable fake provider: real HTTP on loopback replaying
//! the providers' byte streams, including a 429 with retry-after, 529s, and a connection
//! dropped mid-stream.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baaaht_llm::model::{Block, Event, Message, Request, Role};
use baaaht_llm::provider::{self, Endpoint, Failure, RetryPolicy, Wire};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One scripted answer.
#[derive(Clone)]
enum Answer {
    Status {
        code: u16,
        retry_after: Option<&'static str>,
        body: &'static str,
    },
    /// Sends these bytes; with `cut`, closes the connection without finishing.
    Stream {
        body: String,
        cut: bool,
    },
}

/// A fake provider on 127.0.0.1 answering requests from its script in order; records each
/// request's head and body.
struct FakeProvider {
    address: String,
    requests: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeProvider {
    async fn start(script: Vec<Answer>) -> FakeProvider {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        let requests = Arc::new(Mutex::new(vec![]));
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else { return };
                let mut buffer = vec![];
                let mut chunk = [0u8; 8192];
                // Read the head, then the body by content-length.
                let (head, body_start) = loop {
                    let n = stream.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break (String::new(), 0);
                    }
                    buffer.extend_from_slice(&chunk[..n]);
                    if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                        break (String::from_utf8_lossy(&buffer[..end]).into_owned(), end + 4);
                    }
                };
                let length: usize = head
                    .lines()
                    .find_map(|line| {
                        line.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
                    })
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                while buffer.len() < body_start + length {
                    let n = stream.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buffer.extend_from_slice(&chunk[..n]);
                }
                recorded.lock().expect("lock").push(String::from_utf8_lossy(&buffer).into_owned());
                let answer = script.lock().expect("lock").pop_front();
                let response = match answer {
                    Some(Answer::Status { code, retry_after, body }) => {
                        let extra = retry_after.map(|s| format!("retry-after: {s}\r\n")).unwrap_or_default();
                        format!("HTTP/1.1 {code} Error\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
                    }
                    Some(Answer::Stream { body, cut }) => {
                        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                        if cut {
                            let _ = stream.write_all(head.as_bytes()).await;
                            let _ = stream.write_all(body.as_bytes()).await;
                            continue; // drop the connection mid-answer
                        }
                        format!("{head}{body}")
                    }
                    None => "HTTP/1.1 500 Internal\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string(),
                };
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            }
        });
        FakeProvider { address, requests, task }
    }

    fn endpoint(&self, name: &str, wire: Wire) -> Endpoint {
        let api_base = match wire {
            Wire::Anthropic => format!("http://{}", self.address),
            Wire::OpenAi => format!("http://{}/v1", self.address),
        };
        Endpoint {
            name: name.into(),
            wire,
            api_base,
            api_key: Some("sk-test".into()),
            timeout: Duration::from_secs(10),
            max_output: None,
        }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("lock").clone()
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn request() -> Request {
    Request {
        model: "test-model".into(),
        messages: vec![Message { role: Role::User, content: vec![Block::Text("Hi".into())] }],
        ..Request::default()
    }
}

const ANTHROPIC_HELLO: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"test-model\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

const OPENAI_HELLO: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"test-model\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hello\"},\"finish_reason\":null}]}\n\ndata: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"test-model\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

fn texts(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|event| match event {
            Event::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

const FAST: RetryPolicy =
    RetryPolicy { attempts: 3, base_delay: Duration::from_millis(10), max_delay: Duration::from_millis(50) };

#[tokio::test]
async fn anthropic_stream_over_http_with_its_headers() {
    let fake = FakeProvider::start(vec![Answer::Stream { body: ANTHROPIC_HELLO.into(), cut: false }]).await;
    let mut events = vec![];
    provider::stream(&fake.endpoint("anthropic", Wire::Anthropic), &request(), &mut |e| events.push(e))
        .await
        .expect("answers");
    assert_eq!(texts(&events), "Hello");
    let sent = &fake.requests()[0];
    assert!(sent.starts_with("POST /v1/messages HTTP/1.1"), "{sent}");
    let lower = sent.to_ascii_lowercase();
    assert!(lower.contains("x-api-key: sk-test") && lower.contains("anthropic-version: 2023-06-01"), "{sent}");
    assert!(sent.contains("\"stream\":true"), "{sent}");
}

#[tokio::test]
async fn a_429_with_retry_after_is_retried_then_answered() {
    let fake = FakeProvider::start(vec![
        Answer::Status { code: 429, retry_after: Some("0"), body: "{\"error\":{\"message\":\"Rate limit reached\"}}" },
        Answer::Stream { body: OPENAI_HELLO.into(), cut: false },
    ])
    .await;
    let mut events = vec![];
    let chain = [fake.endpoint("openai", Wire::OpenAi)];
    let answered = provider::stream_with_fallback(&chain, &request(), FAST, &mut |e| events.push(e)).await;
    assert_eq!(answered.expect("answers"), "openai");
    assert_eq!(texts(&events), "Hello");
    assert_eq!(fake.requests().len(), 2);
    assert!(fake.requests()[0].starts_with("POST /v1/chat/completions HTTP/1.1"));
    assert!(fake.requests()[0].to_ascii_lowercase().contains("authorization: bearer sk-test"));
}

#[tokio::test]
async fn three_529s_from_the_primary_fall_back_and_say_who_answered() {
    let overloaded = Answer::Status {
        code: 529,
        retry_after: None,
        body: "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}",
    };
    let primary = FakeProvider::start(vec![overloaded.clone(), overloaded.clone(), overloaded]).await;
    let fallback = FakeProvider::start(vec![Answer::Stream { body: OPENAI_HELLO.into(), cut: false }]).await;
    let chain = [primary.endpoint("anthropic", Wire::Anthropic), fallback.endpoint("openrouter", Wire::OpenAi)];
    let mut events = vec![];
    let answered = provider::stream_with_fallback(&chain, &request(), FAST, &mut |e| events.push(e)).await;
    assert_eq!(answered.expect("the fallback answers"), "openrouter");
    assert_eq!(primary.requests().len(), 3);
    assert_eq!(texts(&events), "Hello");
}

#[tokio::test]
async fn a_connection_dropped_mid_stream_is_reported_and_not_replayed() {
    let half: String = ANTHROPIC_HELLO.split("event: content_block_stop").next().expect("first half").into();
    let fake = FakeProvider::start(vec![
        Answer::Stream { body: half, cut: true },
        Answer::Stream { body: ANTHROPIC_HELLO.into(), cut: false },
    ])
    .await;
    let mut events = vec![];
    let chain = [fake.endpoint("anthropic", Wire::Anthropic)];
    let failure = provider::stream_with_fallback(&chain, &request(), FAST, &mut |e| events.push(e)).await;
    let failure = failure.expect_err("cut");
    assert!(matches!(failure, Failure::Dropped { .. }), "{failure:?}");
    assert_eq!(failure.to_string(), "anthropic closed the connection before the answer was complete");
    assert_eq!(texts(&events), "Hello", "what arrived was delivered once");
    assert_eq!(fake.requests().len(), 1, "a partly delivered answer is never retried");
}

#[tokio::test]
async fn an_error_event_mid_stream_becomes_a_typed_failure() {
    let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\",\"usage\":{}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let fake = FakeProvider::start(vec![Answer::Stream { body: body.into(), cut: false }]).await;
    let failure = provider::stream(&fake.endpoint("anthropic", Wire::Anthropic), &request(), &mut |_| {}).await;
    let failure = failure.expect_err("error event");
    assert_eq!(failure.to_string(), "anthropic: overloaded error: Overloaded");
    assert!(failure.retryable());
}

#[tokio::test]
async fn bad_bases_are_refused_with_a_sentence() {
    let endpoint = Endpoint {
        name: "anthropic".into(),
        wire: Wire::Anthropic,
        api_base: "ftp://x".into(),
        api_key: None,
        timeout: Duration::from_secs(1),
        max_output: None,
    };
    let failure = provider::stream(&endpoint, &request(), &mut |_| {}).await.expect_err("ftp");
    assert!(failure.to_string().contains("write it as https://host[:port]/path"), "{failure}");
    assert!(!failure.retryable());
}

#[test]
fn delays_honour_retry_after_within_the_cap() {
    let status =
        |retry_after| Failure::Status { provider: "p".into(), status: 429, retry_after, message: String::new() };
    let base = Duration::from_secs(1);
    let max = Duration::from_secs(30);
    assert_eq!(status(Some(Duration::from_secs(7))).delay(1, base, max), Duration::from_secs(7));
    assert_eq!(status(Some(Duration::from_secs(600))).delay(1, base, max), max);
    assert_eq!(status(None).delay(1, base, max), Duration::from_secs(1));
    assert_eq!(status(None).delay(3, base, max), Duration::from_secs(4));
    assert_eq!(provider::parse_retry_after("2.5"), Some(Duration::from_millis(2500)));
    assert_eq!(provider::parse_retry_after("soon"), None);
}
