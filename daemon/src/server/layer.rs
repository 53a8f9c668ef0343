//! The layer every request passes through once, before any handler: it takes or makes the
//! correlation id, authenticates the caller from the socket the connection came in on (peer
//! credentials for the host socket, the bearer token for a container's or a gateway's socket;
//! for a gateway, the end user it names: in its namespace, proven by the ID token for the web
//! gateway, resolved to a canonical user), opens the request's tracing span and records the
//! RPC's metrics.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use http::{HeaderValue, Request, Response};
use tonic::Status;
use tracing::Instrument;

use super::Shared;
use crate::base::auth::{AuthError, Caller, EndUser, GatewayCaller, HostPolicy};
use crate::guard::audit::{Kind, Record};
use crate::sandbox::sockets::{Origin, PeerInfo};
use crate::work::gateways::{GatewayKind, GatewayRecord};
use baaaht_proto::CORRELATION_ID_HEADER;

/// The correlation id of the request being handled.
#[derive(Debug, Clone)]
pub struct CorrelationId(pub String);

/// What the layer needs to decide.
#[derive(Debug)]
pub struct Gate {
    pub host_policy: HostPolicy,
    pub shared: Arc<Shared>,
}

impl Gate {
    async fn authenticate(&self, peer: Option<PeerInfo>, headers: http::HeaderMap) -> Result<Caller, AuthError> {
        let peer = peer.ok_or(AuthError::NoPeerCredentials)?;
        let token = bearer_token(&headers);
        let listeners = &self.shared.listeners;
        match &peer.origin {
            Origin::Host => {
                if let Some(token) = token {
                    let known = listeners.find_token(token).is_some() || listeners.find_gateway_token(token).is_some();
                    return Err(if known { AuthError::TokenOnHostSocket } else { AuthError::InvalidToken });
                }
                let credentials = peer.credentials.ok_or(AuthError::NoPeerCredentials)?;
                let host = self.host_policy.check(credentials.uid(), credentials.gid(), credentials.pid())?;
                peer.authenticated.store(true, Ordering::Release);
                Ok(Caller::Host(host))
            }
            Origin::Container(endpoint) => {
                let token = token.ok_or(AuthError::MissingToken)?;
                if !endpoint.accepts(token) {
                    return Err(AuthError::InvalidToken);
                }
                peer.authenticated.store(true, Ordering::Release);
                // A pooled container's calls wait here until it is bound to a session.
                Ok(Caller::Container(endpoint.bound().await))
            }
            Origin::Gateway(endpoint) => {
                let token = token.ok_or(AuthError::MissingToken)?;
                if !endpoint.accepts(token) {
                    return Err(if listeners.find_gateway_token(token).is_some() {
                        AuthError::GatewayTokenElsewhere
                    } else {
                        AuthError::InvalidToken
                    });
                }
                // A gateway removed since it connected has its socket retired with it.
                let record = self.shared.gateways.get(&endpoint.name).ok_or(AuthError::InvalidToken)?;
                // The gateway proved itself; whether it may name its user is another matter.
                peer.authenticated.store(true, Ordering::Release);
                let user = self.end_user(&record, &headers).await?;
                Ok(Caller::Gateway(Arc::new(GatewayCaller {
                    gateway: record.name,
                    channel: record.kind.as_str(),
                    user,
                })))
            }
        }
    }

    /// The end user a gateway names (none when it names nobody): in its namespace, proven by
    /// the ID token for a web gateway, resolved to a canonical user (new on first contact).
    async fn end_user(&self, gateway: &GatewayRecord, headers: &http::HeaderMap) -> Result<Option<EndUser>, AuthError> {
        let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok()).map(str::trim);
        let Some(identity) = header(baaaht_proto::USER_HEADER).filter(|value| !value.is_empty()) else {
            return Ok(None);
        };
        if !gateway.may_name(identity) {
            return Err(AuthError::OutsideNamespace {
                gateway: gateway.name.clone(),
                namespace: gateway.kind.namespace(),
                named: identity.chars().take(200).collect(),
            });
        }
        let mut name = header(baaaht_proto::USER_NAME_HEADER).unwrap_or_default().to_string();
        if let GatewayKind::Web { issuer, audience } = &gateway.kind {
            let token = header(baaaht_proto::ID_TOKEN_HEADER).filter(|value| !value.is_empty()).ok_or_else(|| {
                AuthError::IdToken(format!("a web gateway's call must carry {}", baaaht_proto::ID_TOKEN_HEADER))
            })?;
            let subject = identity.strip_prefix(&gateway.kind.namespace()).unwrap_or_default();
            // A session the provider refreshed without a new ID token also carries its access
            // token, which the provider must confirm.
            let access = header(baaaht_proto::ACCESS_TOKEN_HEADER).filter(|value| !value.is_empty());
            let claims = self
                .shared
                .oidc
                .verify_session(token, access, issuer, audience, subject)
                .await
                .map_err(|error| AuthError::IdToken(error.to_string()))?;
            if name.is_empty() {
                name = claims.name.or(claims.email).unwrap_or_default();
            }
        }
        // Someone never met before is a user only when their gateway admits them, or an admin
        // did: else they wait, and the admins are told once.
        if self.shared.identities.lookup(identity).is_none() && !gateway.admits(identity) {
            self.waits(gateway, identity, &name);
            return Err(AuthError::NotAdmitted);
        }
        let resolved = self.shared.identities.resolve(identity, &name).map_err(|error| match error {
            crate::people::identities::IdentityError::BadIdentity(_) => AuthError::Unresolvable(error.to_string()),
            // A first contact not recorded: its caller reads a sentence, the log the detail.
            other => {
                tracing::error!(error = %baaaht_proto::error_chain(&other), "cannot record a first contact");
                AuthError::Unrecorded { disk_full: crate::base::state::is_disk_full(&other) }
            }
        })?;
        let admin = self.shared.loaded.config.system.admin_users.contains(&resolved.user);
        let groups = self.shared.groups.of_member(&resolved.user);
        Ok(Some(EndUser { identity: identity.to_string(), id: resolved.user, admin, groups }))
    }
}

impl Gate {
    /// `identity` (named `name`) wrote to `gateway` and waits to be admitted: the admins are
    /// told the first time, in their inbox and on their connected channels.
    fn waits(&self, gateway: &GatewayRecord, identity: &str, name: &str) {
        let first = match self.shared.admissions.ask(identity, name, &gateway.name) {
            Ok(first) => first,
            Err(error) => {
                tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot keep who waits to be admitted");
                false
            }
        };
        tracing::info!(%identity, gateway = %gateway.name, first, "a first contact waits to be admitted");
        if !first {
            return;
        }
        let shown = crate::people::identities::clean_name(name);
        let shown = if shown.is_empty() { identity.to_string() } else { format!("{shown} ({identity})") };
        let text = format!(
            "{shown} wrote to the {} gateway {} for the first time and waits to be let in. To admit them: \
             `baaaht users admit {identity}`; `baaaht users list` shows who waits.",
            gateway.kind.as_str(),
            gateway.name
        );
        self.shared.notifier.ask("Someone asks to use baaaht", &text);
    }
}

fn bearer_token(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer "))?;
    Some(token.trim())
}

/// A correlation id we accept from a caller: short, printable, no separators that could forge
/// log structure.
fn acceptable_correlation_id(value: &HeaderValue) -> Option<String> {
    let text = value.to_str().ok()?;
    crate::base::auth::is_valid_correlation_id(text).then(|| text.to_string())
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
        crate::guard::telemetry::adopt_parent(&span, request.headers());
        // The clone that was made ready is the one to call (tower's readiness contract).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let gate = self.gate.clone();
        let (peer, headers) = (request.extensions().get::<PeerInfo>().cloned(), request.headers().clone());
        let admin = request.uri().path().starts_with("/baaaht.v1.Admin/");
        Box::pin(async move {
            let unauthenticated = unauthenticated_principal(peer.as_ref());
            let authenticated = gate.authenticate(peer, headers).await;
            let (mut response, caller) = match authenticated {
                Ok(caller) => {
                    span.record("caller", tracing::field::display(&caller));
                    // A container's call is for the turn its agent is working on now, if any:
                    // resolved once, here, for every handler.
                    if let Caller::Container(identity) = &caller {
                        if let Some(live) = gate.shared.agents.live(&identity.name) {
                            request.extensions_mut().insert(LiveTurn(live));
                        }
                    }
                    request.extensions_mut().insert(caller.clone());
                    (inner.call(request).instrument(span.clone()).await?, Some(caller))
                }
                Err(error) => {
                    span.in_scope(|| tracing::warn!(%error, "request refused"));
                    let record = Record::new(Kind::Auth, unauthenticated, "unauthenticated")
                        .correlation(&correlation_id)
                        .detail("method", method.as_str())
                        .detail("reason", error.to_string());
                    gate.shared.audit.record(record);
                    (Status::from(error).into_http(), None)
                }
            };
            let code =
                response.headers().get("grpc-status").and_then(|value| value.to_str().ok()).unwrap_or("0").to_string();
            gate.shared.metrics.record_rpc(&method, &code, started.elapsed());
            if let Some(caller) = &caller {
                audit_call(&gate.shared.audit, caller, admin, &method, &code, &correlation_id, &response);
            }
            if code != "0" {
                span.in_scope(|| tracing::debug!(code = %code, elapsed_us = started.elapsed().as_micros() as u64, "request failed"));
            }
            response.headers_mut().insert(CORRELATION_ID_HEADER, header);
            Ok(response)
        })
    }
}

/// The turn a container's agent was working on when its request came in.
#[derive(Debug, Clone)]
pub struct LiveTurn(pub crate::base::auth::Live);

/// What is known of a peer that did not authenticate.
fn unauthenticated_principal(peer: Option<&PeerInfo>) -> String {
    let uid = peer.and_then(|peer| peer.credentials).map_or("unknown".to_string(), |c| c.uid().to_string());
    match peer.map(|peer| &peer.origin) {
        Some(Origin::Container(endpoint)) => format!("unauthenticated:container-socket:{}", endpoint.name),
        Some(Origin::Gateway(endpoint)) => format!("unauthenticated:gateway-socket:{}", endpoint.name),
        Some(Origin::Host) => format!("unauthenticated:host:uid={uid}"),
        None => "unauthenticated:unknown".to_string(),
    }
}

/// Audits an authenticated call the handler refused for want of rights, and every admin request.
/// Tool calls and web requests are audited by their handlers, with what they were.
fn audit_call(
    audit: &crate::guard::audit::Audit,
    caller: &Caller,
    admin: bool,
    method: &str,
    code: &str,
    correlation_id: &str,
    response: &Response<tonic::body::Body>,
) {
    const PERMISSION_DENIED: &str = "7";
    const UNAUTHENTICATED: &str = "16";
    let audited_by_handler = matches!(method, "RequestToolExecution" | "ProxyWebRequest");
    let message =
        || Status::from_header_map(response.headers()).map(|status| status.message().to_string()).unwrap_or_default();
    if (code == PERMISSION_DENIED || code == UNAUTHENTICATED) && !audited_by_handler {
        let record = Record::by(Kind::Auth, caller, "denied").correlation(correlation_id);
        audit.record(record.detail("method", method).detail("reason", message()));
    } else if admin {
        let outcome = if code == "0" { "ok" } else { "failed" };
        let mut record = Record::by(Kind::Admin, caller, outcome).correlation(correlation_id).detail("method", method);
        if code != "0" {
            record = record.detail("reason", message());
        }
        audit.record(record);
    }
}
