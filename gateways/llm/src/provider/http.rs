//! The HTTP under every provider: a connection by the endpoint's [`Route`] (straight, the
//! daemon's relay, or its tunnel), TLS on top for `https://` (rustls, the system's trusted
//! certificates), one HTTP/1 request, and its answer read as it streams through the format's
//! decoder; and the small JSON exchanges beside it (a server's `/props`, a token endpoint).

use std::sync::{Arc, OnceLock};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use super::prepare::{Decoder, Prepared};
use super::target::Target;
use super::{Endpoint, Failure, Route, NOTHING_ANSWERS};
use crate::model::Event;

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

/// An open connection to a provider, whatever it runs over.
trait Connection: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Connection for T {}

/// Opens a connection to `target` by `route`; TLS on top when the target is `https://`.
async fn open(
    provider: &str,
    route: &Route,
    timeout: std::time::Duration,
    target: &Target,
) -> Result<Box<dyn Connection>, Failure> {
    let address = target.address();
    let timed_out = |_elapsed| Failure::Timeout { provider: provider.to_string(), timeout };
    let connect_failed = |address: String| {
        let provider = provider.to_string();
        move |source| Failure::Connect { provider, address, source }
    };
    let plain: Box<dyn Connection> = match route {
        Route::Relay(relay) => {
            let connected = tokio::time::timeout(timeout, tokio::net::UnixStream::connect(relay));
            let through = format!("{address} (through the daemon's relay {})", relay.display());
            Box::new(connected.await.map_err(timed_out)?.map_err(connect_failed(through))?)
        }
        route => {
            let egress = match route {
                Route::Tunnel(socket) => baaaht_proto::egress::Egress::Tunnel(socket.clone()),
                _ => baaaht_proto::egress::Egress::Direct,
            };
            let connected = tokio::time::timeout(timeout, egress.dial(&target.host, target.port));
            Box::new(connected.await.map_err(timed_out)?.map_err(connect_failed(address))?)
        }
    };
    if !target.tls {
        return Ok(plain);
    }
    let tls_error =
        |message: String| Failure::Tls { provider: provider.to_string(), host: target.host.clone(), message };
    let config = tls_config().map_err(tls_error)?;
    let name = rustls::pki_types::ServerName::try_from(target.host.clone())
        .map_err(|error| tls_error(format!("`{}` is not a valid server name: {error}", target.host)))?;
    let handshake = tokio_rustls::TlsConnector::from(config).connect(name, plain);
    let tls = tokio::time::timeout(timeout, handshake).await.map_err(timed_out)?;
    Ok(Box::new(tls.map_err(|error| tls_error(error.to_string()))?))
}

/// One small exchange read as JSON (at most 1 MiB, within `timeout`): `GET` when `body` is
/// `None`, else `POST` of a form.
async fn small_exchange(
    provider: &str,
    route: &Route,
    timeout: std::time::Duration,
    target: &Target,
    headers: &[(&str, &str)],
    form: Option<String>,
) -> Result<serde_json::Value, Failure> {
    let http = |message: String| Failure::Http { provider: provider.to_string(), message };
    let work = async {
        let connection = open(provider, route, timeout, target).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(connection)).await.map_err(|e| http(e.to_string()))?;
        let driven = tokio::spawn(connection);
        let method = if form.is_some() { http::Method::POST } else { http::Method::GET };
        let mut builder = hyper::Request::builder()
            .method(method)
            .uri(&target.path)
            .header(http::header::HOST, target.host_header())
            .header(http::header::ACCEPT, "application/json");
        if form.is_some() {
            builder = builder.header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        }
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request =
            builder.body(Full::new(Bytes::from(form.unwrap_or_default()))).map_err(|e| http(e.to_string()))?;
        let response = sender.send_request(request).await.map_err(|e| http(e.to_string()))?;
        let status = response.status().as_u16();
        let body = http_body_util::Limited::new(response.into_body(), 1 << 20);
        let bytes = body.collect().await.map_err(|e| http(e.to_string()))?.to_bytes();
        driven.abort();
        if status != 200 {
            let parsed: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default(); // silent-ok: a non-JSON error body is shown as text
            let message =
                error_message(&parsed).unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(300).collect());
            return Err(Failure::Status { provider: provider.to_string(), status, retry_after: None, message });
        }
        serde_json::from_slice(&bytes).map_err(|e| http(format!("{} is not JSON: {e}", target.path)))
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or_else(|_elapsed| Err(Failure::Timeout { provider: provider.to_string(), timeout }))
}

/// `GET path` (from the server's root, e.g. `/props`) of `endpoint`'s server, read as JSON
/// (at most 1 MiB, within the endpoint's timeout): what a server tells of itself.
pub async fn get_json(endpoint: &Endpoint, path: &str) -> Result<serde_json::Value, Failure> {
    let target = Target { path: path.to_string(), ..Target::parse(&endpoint.name, &endpoint.api_base)? };
    let bearer = endpoint.api_key.as_ref().map(|key| format!("Bearer {key}"));
    let headers: Vec<(&str, &str)> = bearer.iter().map(|value| ("authorization", value.as_str())).collect();
    small_exchange(&endpoint.name, &endpoint.route, endpoint.timeout, &target, &headers, None).await
}

/// `POST url` of a form (a token endpoint's), read as JSON.
pub async fn post_form(
    provider: &str,
    route: &Route,
    timeout: std::time::Duration,
    url: &str,
    form: &[(&str, zeroize::Zeroizing<String>)],
) -> Result<serde_json::Value, Failure> {
    let target = Target::parse(provider, url)?;
    let encoded = zeroize::Zeroizing::new(
        form.iter()
            .map(|(name, value)| {
                let value = percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC);
                format!("{name}={value}")
            })
            .collect::<Vec<_>>()
            .join("&"),
    );
    small_exchange(provider, route, timeout, &target, &[], Some(encoded.to_string())).await
}

/// The message of a provider's JSON error body, in any of the providers' shapes: `error.message`
/// (Anthropic, OpenAI, Google, Azure), `message` (Bedrock), `error_description` (OAuth 2).
fn error_message(parsed: &serde_json::Value) -> Option<String> {
    let text = |value: &serde_json::Value| value.as_str().filter(|text| !text.is_empty()).map(str::to_string);
    text(&parsed["error"]["message"])
        .or_else(|| text(&parsed["message"]))
        .or_else(|| text(&parsed["Message"]))
        .or_else(|| text(&parsed["error_description"]))
        .or_else(|| text(&parsed["error"]))
}

/// The most bytes of one answer read: far more than any model's longest answer in any format,
/// so that a provider that streams without end (or a frame that claims gigabytes, a line that
/// never ends) cannot fill the gateway's memory, which every person's requests share.
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// Sends a prepared request to its provider and streams its answer to `on_event`.
pub(crate) async fn send(
    endpoint: &Endpoint,
    prepared: Prepared,
    on_event: &mut (dyn FnMut(Event) + Send),
) -> Result<(), Failure> {
    let target = Target::parse(&endpoint.name, &prepared.url)?;
    let connection = open(&endpoint.name, &endpoint.route, endpoint.timeout, &target).await?;
    let io = TokioIo::new(connection);
    let http = |error: hyper::Error| Failure::Http { provider: endpoint.name.clone(), message: error.to_string() };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.map_err(http)?;
    let Prepared { headers, body, decoder, .. } = prepared;
    // The connection is driven alongside the request below and dropped with it.
    let exchange = async {
        let mut builder = hyper::Request::post(&target.path)
            .header(http::header::HOST, target.host_header())
            .header(http::header::CONTENT_TYPE, "application/json");
        for (name, value) in &headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let request = builder
            .body(Full::new(Bytes::from(body)))
            .map_err(|error| Failure::Http { provider: endpoint.name.clone(), message: error.to_string() })?;
        // A provider that takes the request and never answers (its head, then each frame of
        // the body, below) is given up after the endpoint's timeout, as one that never connects.
        let response = tokio::time::timeout(endpoint.timeout, sender.send_request(request))
            .await
            .map_err(|_elapsed| Failure::Timeout { provider: endpoint.name.clone(), timeout: endpoint.timeout })?
            .map_err(http)?;
        read_response(endpoint, response, decoder, on_event).await
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
    mut decoder: Decoder,
    on_event: &mut (dyn FnMut(Event) + Send),
) -> Result<(), Failure> {
    let provider = endpoint.name.clone();
    let status = response.status().as_u16();
    let retry_after =
        response.headers().get("retry-after").and_then(|value| value.to_str().ok()).and_then(super::parse_retry_after);
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
        let message =
            error_message(&parsed).unwrap_or_else(|| String::from_utf8_lossy(&text).chars().take(300).collect());
        if parsed["error"]["type"] == NOTHING_ANSWERS {
            return Err(Failure::NothingAnswers { provider, message });
        }
        return Err(Failure::Status { provider, status, retry_after, message });
    }
    let mut finished = false;
    let mut received = 0usize;
    loop {
        let frame = match tokio::time::timeout(endpoint.timeout, body.frame()).await {
            Err(_) => return Err(Failure::Timeout { provider, timeout: endpoint.timeout }),
            Ok(None) => break,
            Ok(Some(Err(_cut))) => break, // a cut connection: judged below by whether the answer finished
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else { continue };
        received += data.len();
        if received > MAX_ANSWER_BYTES {
            return Err(Failure::Provider {
                provider,
                kind: "provider",
                message: format!(
                    "the answer ran past {} MiB, more than any model writes: it was stopped",
                    MAX_ANSWER_BYTES >> 20
                ),
            });
        }
        for mut event in decoder.push(&data)? {
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
    if finished {
        Ok(())
    } else {
        Err(Failure::Dropped { provider })
    }
}
