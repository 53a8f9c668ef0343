//! The layer every request passes through once, before any handler: it takes or makes the
//! correlation id, authenticates the caller from the socket the connection came in on (peer
//! credentials for the host socket, the bearer token for a container's socket), opens the
//! request's tracing span and records the RPC's metrics.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use http::{HeaderValue, Request, Response};
use tonic::Status;
use tracing::Instrument;

use crate::auth::{AuthError, Caller, HostPolicy};
use crate::metrics::Metrics;
use crate::sockets::{ListenerSet, Origin, PeerInfo};
use baaaht_proto::CORRELATION_ID_HEADER;

/// The correlation id of the request being handled.
#[derive(Debug, Clone)]
pub struct CorrelationId(pub String);

/// What the layer needs to decide.
#[derive(Debug)]
pub struct Gate {
    pub host_policy: HostPolicy,
    pub listeners: Arc<ListenerSet>,
    pub metrics: Arc<Metrics>,
}

impl Gate {
    fn authenticate<B>(&self, request: &Request<B>) -> Result<Caller, AuthError> {
        let peer = request.extensions().get::<PeerInfo>().ok_or(AuthError::NoPeerCredentials)?;
        let token = bearer_token(request);
        match &peer.origin {
            Origin::Host => {
                if let Some(token) = token {
                    return Err(match self.listeners.find_token(token) {
                        Some(_) => AuthError::TokenOnHostSocket,
                        None => AuthError::InvalidToken,
                    });
                }
                let credentials = peer.credentials.ok_or(AuthError::NoPeerCredentials)?;
                let peer = self.host_policy.check(credentials.uid(), credentials.gid(), credentials.pid())?;
                Ok(Caller::Host(peer))
            }
            Origin::Container(endpoint) => {
                let token = token.ok_or(AuthError::MissingToken)?;
                if !endpoint.accepts(token) {
                    return Err(AuthError::InvalidToken);
                }
                Ok(Caller::Container(endpoint.identity.clone()))
            }
        }
    }
}

fn bearer_token<B>(request: &Request<B>) -> Option<&str> {
    let value = request.headers().get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer "))?;
    Some(token.trim())
}

/// A correlation id we accept from a caller: short, printable, no separators that could forge
/// log structure.
fn acceptable_correlation_id(value: &HeaderValue) -> Option<String> {
    let text = value.to_str().ok()?;
    let ok = !text.is_empty()
        && text.len() <= 128
        && text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
    ok.then(|| text.to_string())
}

#[derive(Debug, Clone)]
pub struct RequestLayer {
    gate: Arc<Gate>,
}

impl RequestLayer {
    pub fn new(gate: Arc<Gate>) -> RequestLayer {
        RequestLayer { gate }
    }
}

impl<S> tower::Layer<S> for RequestLayer {
    type Service = RequestService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestService { inner, gate: self.gate.clone() }
    }
}

#[derive(Debug, Clone)]
pub struct RequestService<S> {
    inner: S,
    gate: Arc<Gate>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<Request<B>> for RequestService<S>
where
    S: tower::Service<Request<B>, Response = Response<tonic::body::Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let started = Instant::now();
        let method = request.uri().path().rsplit('/').next().unwrap_or("unknown").to_string();
        let correlation_id = request
            .headers()
            .get(CORRELATION_ID_HEADER)
            .and_then(acceptable_correlation_id)
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let header = HeaderValue::from_str(&correlation_id).unwrap_or_else(|_| HeaderValue::from_static("invalid")); // silent-ok: ids are checked ASCII above
        request.headers_mut().insert(CORRELATION_ID_HEADER, header.clone());
        request.extensions_mut().insert(CorrelationId(correlation_id.clone()));
        let span = tracing::info_span!("rpc", method = %method, correlation_id = %correlation_id, caller = tracing::field::Empty);
        let authenticated = self.gate.authenticate(&request);
        // The clone that was made ready is the one to call (tower's readiness contract).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let gate = self.gate.clone();
        Box::pin(async move {
            let mut response = match authenticated {
                Ok(caller) => {
                    span.record("caller", tracing::field::display(&caller));
                    request.extensions_mut().insert(caller);
                    inner.call(request).instrument(span.clone()).await?
                }
                Err(error) => {
                    span.in_scope(|| tracing::warn!(%error, "request refused"));
                    Status::from(error).into_http()
                }
            };
            let code =
                response.headers().get("grpc-status").and_then(|value| value.to_str().ok()).unwrap_or("0").to_string();
            gate.metrics.record_rpc(&method, &code, started.elapsed());
            if code != "0" {
                span.in_scope(|| tracing::debug!(code = %code, elapsed_us = started.elapsed().as_micros() as u64, "request failed"));
            }
            response.headers_mut().insert(CORRELATION_ID_HEADER, header);
            Ok(response)
        })
    }
}
