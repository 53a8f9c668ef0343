//! Streaming one request to a provider and reading its events as they arrive, retrying what a
//! provider asks to retry (429 with retry-after, 503, 529, a connection refused before anything
//! was said) and falling back along a chain. HTTPS (rustls, the system's trusted certificates,
//! which `SSL_CERT_FILE` can replace) for cloud providers; plain HTTP for local servers such as
//! Ollama, LM Studio, vLLM or llama.cpp's server.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use crate::model::{ErrorKind, Event, Request, StreamError};
use crate::sse::SseDecoder;
use crate::{anthropic, openai};

/// Which wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Anthropic,
    OpenAi,
}

/// One configured provider.
#[derive(Clone)]
pub struct Endpoint {
    pub name: String,
    pub wire: Wire,
    /// e.g. `http://127.0.0.1:11434/v1` (OpenAI wire) or `http://host:port` (Anthropic wire).
    pub api_base: String,
    pub api_key: Option<String>,
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

struct Target {
    host: String,
    port: u16,
    path: String,
    tls: bool,
}

fn target(endpoint: &Endpoint) -> Result<Target, Failure> {
    let bad = |reason: &str| Failure::BadBase {
        provider: endpoint.name.clone(),
        api_base: endpoint.api_base.clone(),
        reason: reason.into(),
    };
    let (tls, rest) = if let Some(rest) = endpoint.api_base.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = endpoint.api_base.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err(bad("write it as https://host[:port]/path (or http:// for a local server)"));
    };
    let (authority, prefix) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, port.parse().map_err(|_not_a_port| bad("the port is not a number"))?),
        None => (authority, if tls { 443 } else { 80 }),
    };
    let prefix = prefix.trim_end_matches('/');
    let suffix = match endpoint.wire {
        Wire::Anthropic => "v1/messages",
        Wire::OpenAi => "chat/completions",
    };
    let path = if prefix.is_empty() { format!("/{suffix}") } else { format!("/{prefix}/{suffix}") };
    Ok(Target { host: host.trim_matches(['[', ']']).to_string(), port, path, tls })
}

/// The client configuration for HTTPS: the system's trusted certificates (or `SSL_CERT_FILE`),
/// read once per process. Also the daemon's web egress proxy's.
pub fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls_native_certs::load_native_certs().certs {
                // silent-ok: one unusable certificate in the system store must not stop the rest.
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err("no trusted certificates found: install ca-certificates, or set SSL_CERT_FILE".into());
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|error| error.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
}

/// Streams `request` to `endpoint`, calling `on_event` for each event as it arrives.
pub async fn stream(
    endpoint: &Endpoint,
    request: &Request,
    on_event: &mut (dyn FnMut(Event) + Send),
) -> Result<(), Failure> {
    let target = target(endpoint)?;
    let body = match endpoint.wire {
        Wire::Anthropic => match (endpoint.max_output, request.max_tokens) {
            (Some(cap), Some(asked)) if asked > cap => {
                anthropic::request_body(&Request { max_tokens: Some(cap), ..request.clone() })
            }
            _ => anthropic::request_body(request),
        },
        Wire::OpenAi => openai::request_body(request, endpoint.max_output),
    };
    let address = format!("{}:{}", target.host, target.port);
    let connection = open(endpoint, &target, &address).await?;
    exchange(endpoint, &target, &address, body, TokioIo::new(connection), on_event).await
}

/// An open connection to a provider, whatever it runs over.
trait Connection: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Connection for T {}

/// Opens a connection to `target` (at `address`) by the endpoint's [`Route`]; TLS on top
/// when the target is `https://`.
async fn open(endpoint: &Endpoint, target: &Target, address: &str) -> Result<Box<dyn Connection>, Failure> {
    let provider = endpoint.name.clone();
    let timeout = |_elapsed| Failure::Timeout { provider: provider.clone(), timeout: endpoint.timeout };
    let connect_failed = |address: String| {
        let provider = provider.clone();
        move |source| Failure::Connect { provider, address, source }
    };
    let plain: Box<dyn Connection> = match &endpoint.route {
        Route::Relay(relay) => {
            let connected = tokio::time::timeout(endpoint.timeout, tokio::net::UnixStream::connect(relay));
            let through = format!("{address} (through the daemon's relay {})", relay.display());
            Box::new(connected.await.map_err(timeout)?.map_err(connect_failed(through))?)
        }
        route => {
            let egress = match route {
                Route::Tunnel(socket) => baaaht_proto::egress::Egress::Tunnel(socket.clone()),
                _ => baaaht_proto::egress::Egress::Direct,
            };
            let connected = tokio::time::timeout(endpoint.timeout, egress.dial(&target.host, target.port));
            Box::new(connected.await.map_err(timeout)?.map_err(connect_failed(address.to_string()))?)
        }
    };
    if !target.tls {
        return Ok(plain);
    }
    let tls_error = |message: String| Failure::Tls { provider: provider.clone(), host: target.host.clone(), message };
    let config = tls_config().map_err(tls_error)?;
    let name = rustls::pki_types::ServerName::try_from(target.host.clone())
        .map_err(|error| tls_error(format!("`{}` is not a valid server name: {error}", target.host)))?;
    let handshake = tokio_rustls::TlsConnector::from(config).connect(name, plain);
    let tls = tokio::time::timeout(endpoint.timeout, handshake).await.map_err(timeout)?;
    Ok(Box::new(tls.map_err(|error| tls_error(error.to_string()))?))
}

/// `GET path` (from the server's root, e.g. `/props`) of `endpoint`'s server, read as JSON
/// (at most 1 MiB, within the endpoint's timeout): what a server tells of itself.
pub async fn get_json(endpoint: &Endpoint, path: &str) -> Result<serde_json::Value, Failure> {
    let provider = endpoint.name.clone();
    let target = Target { path: path.to_string(), ..target(endpoint)? };
    let address = format!("{}:{}", target.host, target.port);
    let http = |message: String| Failure::Http { provider: provider.clone(), message };
    let work = async {
        let connection = open(endpoint, &target, &address).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(connection)).await.map_err(|e| http(e.to_string()))?;
        let driven = tokio::spawn(connection);
        let mut builder = hyper::Request::get(&target.path)
            .header(http::header::HOST, &address)
            .header(http::header::ACCEPT, "application/json");
        if let Some(key) = &endpoint.api_key {
            builder = builder.header(http::header::AUTHORIZATION, format!("Bearer {key}"));
        }
        let request = builder.body(Full::new(Bytes::new())).map_err(|e| http(e.to_string()))?;
        let response = sender.send_request(request).await.map_err(|e| http(e.to_string()))?;
        let status = response.status().as_u16();
        let body = http_body_util::Limited::new(response.into_body(), 1 << 20);
        let bytes = body.collect().await.map_err(|e| http(e.to_string()))?.to_bytes();
        driven.abort();
        if status != 200 {
            let message = String::from_utf8_lossy(&bytes).chars().take(300).collect();
            return Err(Failure::Status { provider: provider.clone(), status, retry_after: None, message });
        }
        serde_json::from_slice(&bytes).map_err(|e| http(format!("{path} is not JSON: {e}")))
    };
    tokio::time::timeout(endpoint.timeout, work)
        .await
        .unwrap_or_else(|_elapsed| Err(Failure::Timeout { provider: provider.clone(), timeout: endpoint.timeout }))
}

/// One HTTP/1 exchange over an open connection, plain or TLS.
async fn exchange<IO>(
    endpoint: &Endpoint,
    target: &Target,
    address: &str,
    body: serde_json::Value,
    io: IO,
    on_event: &mut (dyn FnMut(Event) + Send),
) -> Result<(), Failure>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let http = |error: hyper::Error| Failure::Http { provider: endpoint.name.clone(), message: error.to_string() };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.map_err(http)?;
    // The connection is driven alongside the request below and dropped with it.
    let exchange = async {
        let mut builder = hyper::Request::post(&target.path)
            .header(http::header::HOST, address)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "text/event-stream");
        match endpoint.wire {
            Wire::Anthropic => {
                builder = builder.header("anthropic-version", "2023-06-01");
                if let Some(key) = &endpoint.api_key {
                    builder = builder.header("x-api-key", key);
                }
            }
            Wire::OpenAi => {
                if let Some(key) = &endpoint.api_key {
                    builder = builder.header(http::header::AUTHORIZATION, format!("Bearer {key}"));
                }
            }
        }
        let request = builder
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|error| Failure::Http { provider: endpoint.name.clone(), message: error.to_string() })?;
        // A provider that takes the request and never answers (its head, then each frame of
        // the body, below) is given up after the endpoint's timeout, as one that never connects.
        let response = tokio::time::timeout(endpoint.timeout, sender.send_request(request))
            .await
            .map_err(|_elapsed| Failure::Timeout { provider: endpoint.name.clone(), timeout: endpoint.timeout })?
            .map_err(http)?;
        read_response(endpoint, response, on_event).await
    };
    tokio::pin!(exchange);
    tokio::select! {
        biased;
        result = &mut exchange => result,
        // A close-delimited body ends with the connection; what it delivered is still to be
        // read, and whether the answer finished is judged there.
        result = connection => match result {
            Ok(()) => exchange.await,
            Err(error) => Err(http(error)),
        },
    }
}

async fn read_response(
    endpoint: &Endpoint,
    response: hyper::Response<hyper::body::Incoming>,
    on_event: &mut (dyn FnMut(Event) + Send),
) -> Result<(), Failure> {
    let provider = endpoint.name.clone();
    let status = response.status().as_u16();
    let retry_after =
        response.headers().get("retry-after").and_then(|value| value.to_str().ok()).and_then(parse_retry_after);
    let mut body = response.into_body();
    if status != 200 {
        let mut text = Vec::new();
        while let Ok(Some(Ok(frame))) = tokio::time::timeout(endpoint.timeout, body.frame()).await {
            if let Ok(data) = frame.into_data() {
                text.extend_from_slice(&data);
            }
            if text.len() > 64 << 10 {
                break;
            }
        }
        let parsed: serde_json::Value = serde_json::from_slice(&text).unwrap_or_default(); // silent-ok: a non-JSON error body is shown as text below
        let message = parsed["error"]["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| String::from_utf8_lossy(&text).chars().take(300).collect());
        if parsed["error"]["type"] == NOTHING_ANSWERS {
            return Err(Failure::NothingAnswers { provider, message });
        }
        return Err(Failure::Status { provider, status, retry_after, message });
    }
    let mut sse = SseDecoder::new();
    let mut anthropic_decoder = anthropic::StreamDecoder::new();
    let mut openai_decoder = openai::StreamDecoder::new();
    let mut finished = false;
    loop {
        let frame = match tokio::time::timeout(endpoint.timeout, body.frame()).await {
            Err(_) => return Err(Failure::Timeout { provider, timeout: endpoint.timeout }),
            Ok(None) => break,
            Ok(Some(Err(_cut))) => break, // a cut connection: judged below by whether the answer finished
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else { continue };
        for event in sse.push(&data) {
            let events = match endpoint.wire {
                Wire::Anthropic => anthropic_decoder.decode(&event)?,
                Wire::OpenAi => openai_decoder.decode(&event)?,
            };
            for mut event in events {
                if let Event::MessageStart { provider: answering, .. } = &mut event {
                    answering.clone_from(&provider);
                }
                if let Event::Error { kind, message } = &event {
                    return Err(Failure::Provider { provider, kind: kind.as_str(), message: message.clone() });
                }
                finished |= matches!(event, Event::MessageStop { .. });
                on_event(event);
            }
        }
    }
    if finished {
        Ok(())
    } else {
        Err(Failure::Dropped { provider })
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
        for attempt in 1..=policy.attempts {
            let mut delivered = false;
            let mut forward = |event: Event| {
                delivered = true;
                on_event(event);
            };
            match link.provider.stream(request, &mut forward).await {
                Ok(()) => return Ok(link.provider.name().to_string()),
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
