//! The provider transport against a scriptable fake provider: real HTTP on loopback replaying
//! the providers' byte streams, including a 429 with retry-after, 529s, and a connection
//! dropped mid-stream.

use std::time::Duration;

use baaaht_llm::model::{Block, Event, Message, Request, Role};
use baaaht_llm::provider::{self, Attempt, Endpoint, Failure, RetryPolicy, Wire};
use baaaht_tests::fake_provider::{self as fake, overloaded, Answer, FakeProvider, ANTHROPIC_HELLO, OPENAI_HELLO};

async fn start(script: Vec<Answer>) -> FakeProvider {
    FakeProvider::start(script, None).await.expect("the fake provider listens")
}

fn endpoint(fake: &FakeProvider, name: &str, wire: Wire) -> Endpoint {
    let fake_wire = match wire {
        Wire::Anthropic => fake::Wire::Anthropic,
        Wire::OpenAi => fake::Wire::OpenAi,
        other => panic!("the fake provider speaks Anthropic's and OpenAI's wire, not {other:?}"),
    };
    Endpoint {
        name: name.into(),
        wire,
        api_base: fake.api_base(fake_wire),
        api_key: Some("sk-test".into()),
        timeout: Duration::from_secs(10),
        max_output: None,
        cloud: Default::default(),
        signer: None,
        route: baaaht_llm::provider::Route::Direct,
    }
}

fn chain(endpoints: &[Endpoint]) -> Vec<Attempt<'_>> {
    endpoints.iter().map(|endpoint| Attempt { provider: endpoint, model: "test-model".into() }).collect()
}

fn request() -> Request {
    Request {
        model: "test-model".into(),
        messages: vec![Message { role: Role::User, content: vec![Block::Text("Hi".into())] }],
        ..Request::default()
    }
}

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
    let fake = start(vec![Answer::Stream { body: ANTHROPIC_HELLO.into(), cut: false }]).await;
    let mut events = vec![];
    provider::stream(&endpoint(&fake, "anthropic", Wire::Anthropic), &request(), &mut |e| events.push(e))
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
    let fake = start(vec![
        Answer::Status {
            code: 429,
            retry_after: Some("0".into()),
            body: "{\"error\":{\"message\":\"Rate limit reached\"}}".into(),
        },
        Answer::Stream { body: OPENAI_HELLO.into(), cut: false },
    ])
    .await;
    let mut events = vec![];
    let endpoints = [endpoint(&fake, "openai", Wire::OpenAi)];
    let answered = provider::stream_with_fallback(&chain(&endpoints), &request(), FAST, &mut |e| events.push(e)).await;
    assert_eq!(answered.expect("answers"), "openai");
    assert_eq!(texts(&events), "Hello");
    assert_eq!(fake.requests().len(), 2);
    assert!(fake.requests()[0].starts_with("POST /v1/chat/completions HTTP/1.1"));
    assert!(fake.requests()[0].to_ascii_lowercase().contains("authorization: bearer sk-test"));
}

#[tokio::test]
async fn three_529s_from_the_primary_fall_back_and_say_who_answered() {
    let primary = start(vec![overloaded(), overloaded(), overloaded()]).await;
    let fallback = start(vec![Answer::Stream { body: OPENAI_HELLO.into(), cut: false }]).await;
    let endpoints = [endpoint(&primary, "anthropic", Wire::Anthropic), endpoint(&fallback, "openrouter", Wire::OpenAi)];
    let mut events = vec![];
    let answered = provider::stream_with_fallback(&chain(&endpoints), &request(), FAST, &mut |e| events.push(e)).await;
    assert_eq!(answered.expect("the fallback answers"), "openrouter");
    assert_eq!(primary.requests().len(), 3);
    assert_eq!(texts(&events), "Hello");
}

#[tokio::test]
async fn a_connection_dropped_mid_stream_is_reported_and_not_replayed() {
    let half: String = ANTHROPIC_HELLO.split("event: content_block_stop").next().expect("first half").into();
    let fake = start(vec![
        Answer::Stream { body: half, cut: true },
        Answer::Stream { body: ANTHROPIC_HELLO.into(), cut: false },
    ])
    .await;
    let mut events = vec![];
    let endpoints = [endpoint(&fake, "anthropic", Wire::Anthropic)];
    let failure = provider::stream_with_fallback(&chain(&endpoints), &request(), FAST, &mut |e| events.push(e)).await;
    let failure = failure.expect_err("cut");
    assert!(matches!(failure, Failure::Dropped { .. }), "{failure:?}");
    assert_eq!(failure.to_string(), "anthropic closed the connection before the answer was complete");
    assert_eq!(texts(&events), "Hello", "what arrived was delivered once");
    assert_eq!(fake.requests().len(), 1, "a partly delivered answer is never retried");
}

#[tokio::test]
async fn an_error_event_mid_stream_becomes_a_typed_failure() {
    let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\",\"usage\":{}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let fake = start(vec![Answer::Stream { body: body.into(), cut: false }]).await;
    let failure = provider::stream(&endpoint(&fake, "anthropic", Wire::Anthropic), &request(), &mut |_| {}).await;
    let failure = failure.expect_err("error event");
    assert_eq!(failure.to_string(), "anthropic: overloaded error: Overloaded");
    assert!(failure.retryable());
}

#[tokio::test]
async fn the_daemons_answer_that_nothing_answers_on_the_host_is_a_network_failure_not_the_providers() {
    // What the daemon's relay answers for a model on the host that is not running: a failure of
    // the way there (its sentence says what to start), not the provider failing right now.
    let sentence = "nothing answers at 127.0.0.1:8080 on this host; start the model server";
    let body = serde_json::json!({"error": {"message": sentence, "type": provider::NOTHING_ANSWERS}}).to_string();
    let answer = Answer::Status { code: 502, retry_after: None, body };
    let fake = start(vec![answer.clone(), answer]).await;
    let endpoints = [endpoint(&fake, "local", Wire::OpenAi)];
    let policy = RetryPolicy { attempts: 2, ..FAST };
    let failure = provider::stream_with_fallback(&chain(&endpoints), &request(), policy, &mut |_| {}).await;
    let failure = failure.expect_err("nothing answers");
    assert_eq!(failure.to_string(), format!("local: {sentence}"));
    assert_eq!(provider::kind_of(&failure).as_str(), "network");
    assert_eq!(fake.requests().len(), 2, "tried again, as a connection refused is: the server may be starting");
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
        cloud: Default::default(),
        signer: None,
        route: baaaht_llm::provider::Route::Direct,
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
