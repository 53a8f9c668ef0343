//! Streaming one request to a provider and reading its events as they arrive, retrying what a
//! provider asks to retry (429 with retry-after, 503, 529, a connection refused before anything
//! was said) and falling back along a chain. HTTPS (rustls, the system's trusted certificates,
//! which `SSL_CERT_FILE` can replace) for cloud providers; plain HTTP for local servers such as
//! Ollama, LM Studio, vLLM or llama.cpp's server. [`prepare`] makes each provider's request,
//! [`http`] sends it.

pub mod http;
pub mod prepare;
mod target;
pub mod tokens;

use std::sync::Arc;
use std::time::Duration;

pub use http::{get_json, tls_config};

use crate::bedrock::AwsKeys;
use crate::model::{ErrorKind, Event, Request, StreamError};
use crate::openai;
use tokens::TokenSource;

/// Which API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Anthropic's Messages API.
    Anthropic,
    /// OpenAI's Chat Completions and the servers compatible with it.
    OpenAi,
    /// Google's Generative Language API (Gemini).
    Gemini,
    /// Azure OpenAI: Chat Completions at a resource's deployments.
    Azure,
    /// Amazon Bedrock's Converse API.
    Bedrock,
    /// Google Vertex AI: Gemini, and Anthropic's models by `rawPredict`.
    Vertex,
}

/// Where a cloud account's models are: what Bedrock, Vertex AI and Azure need besides an address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cloud {
    /// AWS's region (Bedrock) or Google Cloud's location (Vertex AI).
    pub region: String,
    /// Google Cloud's project (Vertex AI).
    pub project: String,
    /// Azure OpenAI's `api-version` (`v1` for its v1 API); empty: [`prepare::AZURE_API_VERSION`].
    pub api_version: String,
}

/// How a request is signed in, besides a key.
#[derive(Debug, Clone)]
pub enum Signer {
    /// AWS SigV4 with these keys (Bedrock).
    Aws(Arc<AwsKeys>),
    /// A bearer token from this source (Vertex AI's service account, Azure's Entra ID).
    Tokens(Arc<TokenSource>),
}

/// One configured provider.
#[derive(Clone)]
pub struct Endpoint {
    pub name: String,
    pub wire: Wire,
    /// e.g. `http://127.0.0.1:11434/v1` (OpenAI wire) or `http://host:port` (Anthropic wire);
    /// empty for Gemini, Bedrock and Vertex AI: their address follows from [`Cloud`].
    pub api_base: String,
    pub api_key: Option<String>,
    /// Region, project, API version.
    pub cloud: Cloud,
    pub signer: Option<Signer>,
    /// The longest wait for the next bytes of an answer.
    pub timeout: Duration,
    pub max_output: Option<u32>,
    /// How a connection to the provider is made.
    pub route: Route,
}

/// How the gateway reaches a provider.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Route {
    /// Straight to `api_base`'s host (a gateway on the host).
    #[default]
    Direct,
    /// The daemon's relay socket, carried to the provider on the host's loopback (a gateway
    /// in its container, where 127.0.0.1 is its own).
    Relay(std::path::PathBuf),
    /// A tunnel to `api_base`'s host asked of the daemon's egress socket (a gateway in its
    /// container, which has no network: the daemon opens only its providers' hosts).
    Tunnel(std::sync::Arc<std::path::PathBuf>),
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if let Some(key) = &mut self.api_key {
            zeroize::Zeroize::zeroize(key);
        }
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("name", &self.name).field("api_base", &self.api_base).finish_non_exhaustive()
    }
}

/// The error type of the daemon's answer for a provider on the host's loopback that nothing
/// answers at (`daemon/src/llm/relay.rs`), in a gateway in its container.
pub const NOTHING_ANSWERS: &str = "relay_unreachable";

#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error("{provider} answered {status}: {message}")]
    Status { provider: String, status: u16, retry_after: Option<Duration>, message: String },
    #[error("cannot reach {provider} at {address}")]
    Connect {
        provider: String,
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{provider}: {message}")]
    Http { provider: String, message: String },
    #[error("{provider} sent nothing for {} s", timeout.as_secs())]
    Timeout { provider: String, timeout: Duration },
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error("{provider} closed the connection before the answer was complete")]
    Dropped { provider: String },
    #[error("{provider}: `{api_base}` is not supported: {reason}")]
    BadBase { provider: String, api_base: String, reason: String },
    #[error("{provider}: TLS with {host} failed: {message}")]
    Tls { provider: String, host: String, message: String },
    #[error("{provider}: {kind} error: {message}")]
    Provider { provider: String, kind: &'static str, message: String },
    #[error("{provider} cannot be used: {reason}")]
    Unusable { provider: String, reason: String },
    /// The daemon's relay answered for a provider on the host that nothing answers at: its
    /// sentence says where and what to start (a network failure, not the provider's).
    #[error("{provider}: {message}")]
    NothingAnswers { provider: String, message: String },
    #[error("{message}")]
    Route { message: String },
}

impl Failure {
    /// Whether trying again (or the next provider) may help.
    pub fn retryable(&self) -> bool {
        match self {
            Failure::Status { status, .. } => matches!(status, 429 | 500 | 502 | 503 | 504 | 529),
            Failure::Connect { .. }
            | Failure::NothingAnswers { .. }
            | Failure::Timeout { .. }
            | Failure::Dropped { .. } => true,
            Failure::Provider { kind, .. } => matches!(*kind, "rate_limited" | "overloaded" | "provider"),
            Failure::Http { .. }
            | Failure::Stream(_)
            | Failure::BadBase { .. }
            | Failure::Tls { .. }
            | Failure::Unusable { .. }
            | Failure::Route { .. } => false,
        }
    }

    /// The failure with every one of `secrets` (raw or percent-encoded) in its words replaced.
    pub fn scrubbed(mut self, secrets: &[String]) -> Failure {
        let scrub = |text: &mut String| {
            for secret in secrets.iter().filter(|secret| secret.len() >= 6) {
                let encoded =
                    percent_encoding::utf8_percent_encode(secret, percent_encoding::NON_ALPHANUMERIC).to_string();
                for form in [secret.as_str(), encoded.as_str()] {
                    if text.contains(form) {
                        *text = text.replace(form, "[redacted]");
                    }
                }
            }
        };
        match &mut self {
            Failure::Status { message, .. }
            | Failure::Http { message, .. }
            | Failure::Tls { message, .. }
            | Failure::Provider { message, .. }
            | Failure::NothingAnswers { message, .. }
            | Failure::Route { message } => scrub(message),
            Failure::Unusable { reason, .. } | Failure::BadBase { reason, .. } => scrub(reason),
            Failure::Stream(error) => {
                scrub(&mut error.event);
                scrub(&mut error.reason);
            }
            Failure::Connect { .. } | Failure::Timeout { .. } | Failure::Dropped { .. } => {}
        }
        self
    }

    /// A request refused as malformed (400, not for its length or a key) or an answer that
    /// does not parse: tried once more.
    pub fn is_format_error(&self) -> bool {
        match self {
            Failure::Stream(_) => true,
            Failure::Status { status: 400, message, .. } => {
                !crate::model::context_exceeded(message) && !message.contains("API key not valid")
            }
            _ => false,
        }
    }

    /// How long to wait before attempt `attempt` (1-based): the provider's retry-after when it
    /// gave one, else exponential from `base`; never more than `max`.
    pub fn delay(&self, attempt: u32, base: Duration, max: Duration) -> Duration {
        let backoff = base.saturating_mul(1 << attempt.saturating_sub(1).min(10));
        match self {
            Failure::Status { retry_after: Some(wait), .. } => (*wait).min(max),
            _ => backoff.min(max),
        }
    }
}

/// How a chain of providers is tried.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts per provider.
    pub attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { attempts: 3, base_delay: Duration::from_secs(1), max_delay: Duration::from_secs(60) }
    }
}

/// Something that streams one request: an [`Endpoint`], or one wrapped with a rate limit.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    fn name(&self) -> &str;

    /// Streams `request`, calling `on_event` for each event as it arrives.
    async fn stream(&self, request: &Request, on_event: &mut (dyn FnMut(Event) + Send)) -> Result<(), Failure>;
}

#[async_trait::async_trait]
impl Provider for Endpoint {
    fn name(&self) -> &str {
        &self.name
    }

    async fn stream(&self, request: &Request, on_event: &mut (dyn FnMut(Event) + Send)) -> Result<(), Failure> {
        stream(self, request, on_event).await
    }
}

/// Streams `request` to `endpoint`, calling `on_event` for each event as it arrives.
pub async fn stream(
    endpoint: &Endpoint,
    request: &Request,
    on_event: &mut (dyn FnMut(Event) + Send),
) -> Result<(), Failure> {
    let prepared = prepare::prepare(endpoint, request).await?;
    let secrets = prepared.secrets();
    // A provider (or a proxy on the way) that echoes the request must not pass on what signed it.
    let result = http::send(endpoint, prepared, on_event).await.map_err(|failure| failure.scrubbed(&secrets));
    // A token refused is not kept: the next request fetches a new one.
    if let (Err(Failure::Status { status: 401, .. }), Some(Signer::Tokens(source))) = (&result, &endpoint.signer) {
        source.forget().await;
    }
    result
}

/// One link of a fallback chain: a provider and the model name it knows the request's model by.
pub struct Attempt<'a> {
    pub provider: &'a dyn Provider,
    pub model: String,
}

/// Tries `chain` in order, each provider up to `policy.attempts` times, until one answers;
/// returns the name of the provider that answered. Once events have been delivered nothing is
/// retried: an answer is never replayed twice.
pub async fn stream_with_fallback(
    chain: &[Attempt<'_>],
    request: &Request,
    policy: RetryPolicy,
    on_event: &mut (dyn FnMut(Event) + Send),
) -> Result<String, Failure> {
    let mut last = None;
    for link in chain {
        let renamed;
        let request = if link.model == request.model {
            request
        } else {
            renamed = Request { model: link.model.clone(), ..request.clone() };
            &renamed
        };
        // A request refused as malformed, or an answer that does not parse, is sent once more
        // (spec §7.5): a provider's passing fault, not the request's, is cured by that.
        let mut format_retry = true;
        let mut attempt = 0;
        while attempt < policy.attempts {
            attempt += 1;
            let mut delivered = false;
            let mut forward = |event: Event| {
                delivered = true;
                on_event(event);
            };
            match link.provider.stream(request, &mut forward).await {
                Ok(()) => return Ok(link.provider.name().to_string()),
                Err(failure) if failure.is_format_error() && !delivered && format_retry => {
                    tracing::info!(provider = link.provider.name(), %failure, "a format error: sent once more");
                    format_retry = false;
                    attempt -= 1;
                    last = Some(failure);
                }
                // A provider without its key is skipped at once; the next one may answer.
                Err(failure @ Failure::Unusable { .. }) => {
                    last = Some(failure);
                    break;
                }
                Err(failure) if failure.retryable() && !delivered => {
                    if attempt < policy.attempts {
                        tokio::time::sleep(failure.delay(attempt, policy.base_delay, policy.max_delay)).await;
                    }
                    last = Some(failure);
                }
                Err(failure) => return Err(failure),
            }
        }
    }
    Err(last.unwrap_or(Failure::Http { provider: "none".into(), message: "the fallback chain is empty".into() }))
}

/// Parses a `retry-after` header: seconds (HTTP dates are not sent by LLM providers).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0).map(Duration::from_secs_f64)
}

/// Kinds of failures as the unified error event names them.
pub fn kind_of(failure: &Failure) -> ErrorKind {
    match failure {
        // Google answers a wrong key with a 400.
        Failure::Status { status: 400, message, .. } if message.contains("API key not valid") => {
            ErrorKind::Authentication
        }
        Failure::Status { status, message, .. } => openai::error_kind(*status).refined(message),
        Failure::Unusable { .. } => ErrorKind::Authentication,
        Failure::Route { .. } => ErrorKind::InvalidRequest,
        Failure::Provider { kind, message, .. } => match *kind {
            "rate_limited" => ErrorKind::RateLimited,
            "overloaded" => ErrorKind::Overloaded,
            "invalid_request" => ErrorKind::InvalidRequest.refined(message),
            "context_exceeded" => ErrorKind::ContextExceeded,
            "authentication" => ErrorKind::Authentication,
            _ => ErrorKind::Provider,
        },
        Failure::Timeout { .. } => ErrorKind::Timeout,
        Failure::Connect { .. }
        | Failure::NothingAnswers { .. }
        | Failure::Dropped { .. }
        | Failure::Http { .. }
        | Failure::Tls { .. } => ErrorKind::Network,
        Failure::Stream(_) | Failure::BadBase { .. } => ErrorKind::Provider,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::*;

    /// The events a scripted answer delivers, then how its stream ends.
    type Outcome = (Vec<Event>, Result<(), Failure>);

    /// A provider that answers each request with the next of its scripted outcomes.
    struct Scripted {
        outcomes: Mutex<VecDeque<Outcome>>,
        asked: std::sync::atomic::AtomicUsize,
    }

    impl Scripted {
        fn new(outcomes: Vec<Outcome>) -> Scripted {
            Scripted { outcomes: Mutex::new(outcomes.into()), asked: std::sync::atomic::AtomicUsize::new(0) }
        }
    }

    #[async_trait::async_trait]
    impl Provider for Scripted {
        fn name(&self) -> &str {
            "scripted"
        }

        async fn stream(&self, _: &Request, on_event: &mut (dyn FnMut(Event) + Send)) -> Result<(), Failure> {
            self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (events, end) = self.outcomes.lock().expect("lock").pop_front().expect("a request more than scripted");
            events.into_iter().for_each(&mut *on_event);
            end
        }
    }

    fn garbled() -> Failure {
        Failure::Stream(StreamError {
            provider: "scripted",
            event: "{\"type\": \"content_block_delta\", \"delta\":".into(),
            reason: "EOF while parsing an object".into(),
        })
    }

    fn text(text: &str) -> Event {
        Event::TextDelta { index: 0, text: text.into() }
    }

    async fn run(provider: &Scripted) -> (Result<String, Failure>, Vec<Event>) {
        let chain = [Attempt { provider, model: String::new() }];
        let policy = RetryPolicy { attempts: 3, base_delay: Duration::ZERO, max_delay: Duration::ZERO };
        let mut seen = vec![];
        let result = stream_with_fallback(&chain, &Request::default(), policy, &mut |event| seen.push(event)).await;
        (result, seen)
    }

    #[tokio::test]
    async fn an_answer_that_does_not_parse_is_asked_once_more_before_anything_was_delivered() {
        let provider = Scripted::new(vec![(vec![], Err(garbled())), (vec![text("hello")], Ok(()))]);
        let (result, seen) = run(&provider).await;
        assert_eq!(result.expect("answered the second time"), "scripted");
        assert_eq!(seen, vec![text("hello")]);
        assert_eq!(provider.asked.load(std::sync::atomic::Ordering::SeqCst), 2);

        // Once, not again: a second garbled answer is the failure told.
        let provider = Scripted::new(vec![(vec![], Err(garbled())), (vec![], Err(garbled()))]);
        let (result, _) = run(&provider).await;
        assert!(matches!(result, Err(Failure::Stream(_))), "{result:?}");
        assert_eq!(provider.asked.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_answer_that_stops_parsing_after_its_first_words_is_not_asked_again() {
        // Asking again would show its first words twice.
        let provider = Scripted::new(vec![(vec![text("hel")], Err(garbled()))]);
        let (result, seen) = run(&provider).await;
        assert!(matches!(result, Err(Failure::Stream(_))), "{result:?}");
        assert_eq!(seen, vec![text("hel")]);
        assert_eq!(provider.asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
