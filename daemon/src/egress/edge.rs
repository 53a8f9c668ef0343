//! Credentials swapped in at the edge (DESIGN.md §10.2): the daemon's own certificate
//! authority ([`Authority`]), and what happens to a tool command's connection in a session
//! that holds placeholders ([`Crossing`]).
//!
//! For a host a secret is bound to (`egress::credentials`), the daemon terminates the
//! command's TLS with a certificate of its own authority (which the tool containers trust),
//! connects onward with full verification against the daemon's trusted roots, and in each
//! request puts the secret's value in place of its placeholder: in any header, inside an
//! `Authorization: Basic` (as git sends it) and in the URL. A placeholder on its way anywhere
//! else is refused with a sentence and audited; in plain HTTP the daemon sees it whatever the
//! host, and a secret never goes out in plain HTTP. TLS to a host no secret is bound to is
//! not opened: the daemon cannot see a placeholder in it, and a placeholder is worth nothing
//! away from the edge.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use base64::Engine as _;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite};
use zeroize::Zeroizing;

use crate::audit::{Audit, Record};
use crate::auth::{Caller, Context};
use crate::datadir::DataDir;
use crate::egress::credentials::{self, Binding, Placeholders};
use crate::secrets::Handout;

/// The authority's key (0600) and certificate, and the bundle tool containers trust (the
/// daemon's own trusted roots and the authority), in `data/state/`.
pub const KEY_FILE: &str = "egress-ca.key";
pub const CERT_FILE: &str = "egress-ca.pem";
pub const TRUST_FILE: &str = "egress-trust.pem";
/// Where tool containers find the bundle: in place of Debian's, so every program trusts it.
pub const TRUST_IN_CONTAINER: &str = "/etc/ssl/certs/ca-certificates.crt";
/// A certificate the authority issues is made again after this many days (it is valid for 90).
const REISSUE_DAYS: i64 = 30;
/// The most certificates kept at once.
const MAX_ISSUED: usize = 256;

/// The daemon's certificate authority: made once, its key never leaving `data/state/`.
pub struct Authority {
    key: KeyPair,
    certificate: rcgen::Certificate,
    trust: PathBuf,
    issued: Mutex<HashMap<String, (jiff::Timestamp, Arc<rustls::ServerConfig>)>>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").field("trust", &self.trust).finish_non_exhaustive()
    }
}

/// The authority's own certificate: the same name and key each time it is made, so the
/// certificates it issues chain to the one written down the first time.
fn authority_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::OrganizationName, "baaaht");
    params.distinguished_name.push(DnType::CommonName, "baaaht egress authority");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2045, 1, 1);
    params
}

/// `params` valid from the day before `now` for 90 days.
fn valid_from(params: &mut CertificateParams, now: jiff::Timestamp) {
    let day = |timestamp: jiff::Timestamp| {
        let date = timestamp.to_zoned(jiff::tz::TimeZone::UTC).date();
        (i32::from(date.year()), date.month() as u8, date.day() as u8)
    };
    let (from, until) =
        (day(now - jiff::SignedDuration::from_hours(24)), day(now + jiff::SignedDuration::from_hours(90 * 24)));
    params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
    params.not_after = rcgen::date_time_ymd(until.0, until.1, until.2);
}

impl Authority {
    /// The authority of the data dir whose state folder is `state`: made and written down the
    /// first time; the trust bundle written afresh from the daemon's trusted roots.
    pub fn open(state: &Path) -> Result<Authority, String> {
        std::fs::create_dir_all(state).map_err(|error| format!("cannot make {}: {error}", state.display()))?;
        let key_path = state.join(KEY_FILE);
        let key = match std::fs::read_to_string(&key_path) {
            Ok(pem) => {
                KeyPair::from_pem(&pem).map_err(|error| format!("{} is not a key: {error}", key_path.display()))?
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let key = KeyPair::generate().map_err(|error| error.to_string())?;
                let pem = Zeroizing::new(key.serialize_pem());
                crate::state::write_atomic(&key_path, pem.as_bytes(), 0o600).map_err(|error| error.to_string())?;
                tracing::info!(key = %key_path.display(), "made the egress certificate authority");
                key
            }
            Err(error) => return Err(format!("cannot read {}: {error}", key_path.display())),
        };
        let certificate = authority_params().self_signed(&key).map_err(|error| error.to_string())?;
        let cert_path = state.join(CERT_FILE);
        let pem = match std::fs::read_to_string(&cert_path) {
            Ok(pem) => pem,
            Err(_) => {
                let pem = certificate.pem();
                crate::state::write_atomic(&cert_path, pem.as_bytes(), 0o644).map_err(|error| error.to_string())?;
                pem
            }
        };
        let mut bundle = String::new();
        for root in rustls_native_certs::load_native_certs().certs {
            bundle.push_str(&pem_of("CERTIFICATE", root.as_ref()));
        }
        bundle.push_str(&pem);
        let trust = state.join(TRUST_FILE);
        crate::state::write_atomic(&trust, bundle.as_bytes(), 0o644).map_err(|error| error.to_string())?;
        Ok(Authority { key, certificate, trust, issued: Mutex::default() })
    }

    /// The bundle tool containers trust.
    pub fn trust(&self) -> &Path {
        &self.trust
    }

    /// A TLS server configuration presenting a certificate for `host`, issued now or lately.
    fn server_for(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, String> {
        let now = jiff::Timestamp::now();
        {
            let issued = self.issued.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((at, config)) = issued.get(host) {
                if now.duration_since(*at).as_secs() < REISSUE_DAYS * 86_400 {
                    return Ok(config.clone());
                }
            }
        }
        // Made outside the lock: a key takes a while.
        let key = KeyPair::generate().map_err(|error| error.to_string())?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, host);
        params.subject_alt_names = vec![match host.parse::<std::net::IpAddr>() {
            Ok(address) => rcgen::SanType::IpAddress(address),
            Err(_) => rcgen::SanType::DnsName(host.try_into().map_err(|error| format!("{host}: {error}"))?),
        }];
        valid_from(&mut params, now);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        let leaf = params.signed_by(&key, &self.certificate, &self.key).map_err(|error| error.to_string())?;
        let chain = vec![leaf.der().clone(), self.certificate.der().clone()];
        let private = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| error.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(|error| error.to_string())?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        let mut issued = self.issued.lock().unwrap_or_else(PoisonError::into_inner);
        // A bound `*.domain` covers names without end: the oldest certificate makes room.
        if issued.len() >= MAX_ISSUED && !issued.contains_key(host) {
            let oldest = issued.iter().min_by_key(|(_, (at, _))| *at).map(|(host, _)| host.clone());
            if let Some(oldest) = oldest {
                issued.remove(&oldest);
            }
        }
        issued.insert(host.to_string(), (now, config.clone()));
        Ok(config)
    }
}

/// `der` as PEM text under `label`.
fn pem_of(label: &str, der: &[u8]) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    let mut text = format!("-----BEGIN {label}-----\n");
    for line in encoded.as_bytes().chunks(64) {
        text.push_str(std::str::from_utf8(line).unwrap_or_default());
        text.push('\n');
    }
    text.push_str(&format!("-----END {label}-----\n"));
    text
}

/// The daemon's edge: its authority, the sessions' placeholders, and what the values are
/// read from.
pub struct Edge {
    pub authority: Arc<Authority>,
    pub placeholders: Placeholders,
    data_dir: DataDir,
    secrets: Handout,
    audit: Audit,
}

impl std::fmt::Debug for Edge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Edge").field("authority", &self.authority).finish_non_exhaustive()
    }
}

impl Edge {
    pub fn new(authority: Arc<Authority>, data_dir: DataDir, secrets: Handout, audit: Audit) -> Edge {
        Edge { authority, placeholders: Placeholders::default(), data_dir, secrets, audit }
    }

    /// What the tool commands of `session` (in `context`) find in the variables of the secrets
    /// bound for it: a placeholder each, by the variable's name.
    pub fn placeholders_for(&self, context: &Context, session: &str) -> HashMap<String, String> {
        let names: Vec<String> = credentials::bindings(&self.data_dir, context).into_iter().map(|b| b.name).collect();
        if names.is_empty() {
            return HashMap::new();
        }
        self.placeholders.of(session, names)
    }
}

/// One session's connections at the edge: whose they are, for the audit log and the secrets'
/// rules.
#[derive(Clone)]
pub struct Crossing {
    pub edge: Arc<Edge>,
    pub context: Context,
    pub session: String,
    pub caller: Caller,
    /// The base of each audit record.
    pub record: Record,
}

/// What one connection carries through the edge: the session's placeholders (placeholder →
/// name) and the bindings that cover its host.
pub struct Plan {
    made: HashMap<String, String>,
    bound: Vec<Binding>,
}

/// A connection's stream, whatever it is.
trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

type Body = BoxBody<Bytes, hyper::Error>;

/// The daemon's roots, offering HTTP/1.1 only (what the edge speaks).
fn onward_tls() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut config = (*baaaht_llm::provider::tls_config()?).clone();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
}

/// Chunks of bytes buffered between the relay and the edge.
const BETWEEN_BUFFER: usize = 128 * 1024;

#[async_trait::async_trait]
impl crate::egress::relay::Between for Crossing {
    async fn take(
        &self,
        host: &str,
        port: u16,
        far: tokio::net::TcpStream,
        tracker: &tokio_util::task::TaskTracker,
    ) -> Result<tokio::io::DuplexStream, tokio::net::TcpStream> {
        let Some(plan) = self.plan(host, port).await else { return Err(far) };
        let (near, edge_side) = tokio::io::duplex(BETWEEN_BUFFER);
        tracker.spawn(self.clone().carry(edge_side, far, (host.to_string(), port), plan));
        Ok(near)
    }
}

impl Crossing {
    /// What a connection to `host:port` must go through; none: nothing (the session holds no
    /// placeholder), its bytes pass as they are.
    async fn plan(&self, host: &str, port: u16) -> Option<Plan> {
        let made = self.edge.placeholders.made(&self.session);
        if made.is_empty() {
            return None;
        }
        let (data_dir, context) = (self.edge.data_dir.clone(), self.context.clone());
        let bindings = tokio::task::spawn_blocking(move || credentials::bindings(&data_dir, &context)).await.ok()?;
        let bound = bindings.into_iter().filter(|binding| binding.covers(host, port)).collect();
        Some(Plan { made, bound })
    }

    /// Carries one connection between the command (`near`) and the far end (`far`, connected
    /// and checked), by `plan`: HTTP in plain text is read (a placeholder in it refused), TLS to
    /// a bound host terminated and its requests swapped; anything else passes as it is.
    async fn carry(
        self,
        near: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
        mut far: tokio::net::TcpStream,
        (host, port): (String, u16),
        plan: Plan,
    ) {
        let mut near = tokio::io::BufReader::new(near);
        // What the client sends first: a protocol whose server speaks first sends nothing.
        let head = match tokio::time::timeout(SNIFF, near.fill_buf()).await {
            Ok(Ok(bytes)) => bytes.iter().take(8).copied().collect::<Vec<u8>>(),
            _ => vec![],
        };
        let tls = head.first() == Some(&0x16);
        let http = HTTP_METHODS.iter().any(|method| head.starts_with(method));
        if (tls && plan.bound.is_empty()) || (!tls && !http) {
            // silent-ok: either end may hang up; the relay records the connection.
            let _ = tokio::io::copy_bidirectional(&mut near, &mut far).await;
            return;
        }
        let exchange =
            Arc::new(Exchange { crossing: self, host: host.clone(), port, plan, tls, values: Mutex::default() });
        if !tls {
            return exchange.serve(near, Ok(far)).await;
        }
        let accepted = match exchange.crossing.edge.authority.server_for(&host) {
            Ok(config) => tokio_rustls::TlsAcceptor::from(config).accept(near).await,
            Err(why) => {
                tracing::warn!(%host, %why, "no certificate for a bound host");
                return;
            }
        };
        let Ok(near) = accepted else { return };
        let onward = async {
            let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|error| error.to_string())?;
            tokio_rustls::TlsConnector::from(onward_tls()?).connect(name, far).await.map_err(|error| error.to_string())
        };
        let far = onward.await.map_err(|why| format!("{host}'s TLS certificate could not be verified: {why}"));
        exchange.serve(near, far).await;
    }
}

/// How long the edge waits for a client's first bytes before passing the connection on as it is.
const SNIFF: std::time::Duration = std::time::Duration::from_secs(5);
/// How an HTTP/1 request starts.
const HTTP_METHODS: &[&[u8]] =
    &[b"GET ", b"POST ", b"PUT ", b"HEAD ", b"DELETE ", b"PATCH ", b"OPTIONS ", b"TRACE ", b"CONNECT "];
/// The request headers a placeholder is swapped in: where APIs take a token. Anywhere else (the
/// URL, a header a server may echo back) it is refused.
const CREDENTIAL_HEADERS: &[&str] = &["authorization", "x-api-key", "private-token", "x-auth-token"];

/// One connection's requests through the edge.
struct Exchange {
    crossing: Crossing,
    /// Where the tunnel leads: every request in it must name this host and port.
    host: String,
    port: u16,
    plan: Plan,
    tls: bool,
    /// The values read for this connection, by name.
    values: Mutex<HashMap<String, Zeroizing<String>>>,
}

impl Exchange {
    /// Serves the command's requests on `near`, each sent on to `far` (or answered with why it
    /// cannot be).
    async fn serve(self: Arc<Self>, near: impl Io, far: Result<impl Io, String>) {
        let mut driving = tokio::task::JoinSet::new();
        let sender = match far {
            Ok(far) => match hyper::client::conn::http1::handshake(TokioIo::new(far)).await {
                Ok((sender, driver)) => {
                    driving.spawn(driver);
                    Ok(tokio::sync::Mutex::new(sender))
                }
                Err(error) => Err(format!("{} did not speak HTTP: {error}", self.host)),
            },
            Err(why) => Err(why),
        };
        let sender = Arc::new(sender);
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let (exchange, sender) = (self.clone(), sender.clone());
            async move { Ok::<_, std::convert::Infallible>(exchange.forward(request, &sender).await) }
        });
        let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(near), service);
        tokio::pin!(connection);
        // silent-ok (both): a command that hangs up mid-request ends its connection, nothing more.
        tokio::select! {
            _ = connection.as_mut() => {}
            // The far end closed its connection (an idle keep-alive timed out): this one closes
            // after the request in progress, so the command connects again.
            Some(_) = driving.join_next() => {
                connection.as_mut().graceful_shutdown();
                let _ = connection.await;
            }
        }
        driving.abort_all();
    }

    async fn forward(
        &self,
        request: hyper::Request<Incoming>,
        sender: &Result<tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Incoming>>, String>,
    ) -> hyper::Response<Body> {
        let (mut parts, body) = request.into_parts();
        if let Err(why) = self.aimed(&mut parts).and_then(|()| self.swap(&mut parts)) {
            return answer(hyper::StatusCode::FORBIDDEN, &why);
        }
        let sender = match sender {
            Ok(sender) => sender,
            Err(why) => return answer(hyper::StatusCode::BAD_GATEWAY, why),
        };
        let mut sender = sender.lock().await;
        if sender.ready().await.is_err() {
            return answer(hyper::StatusCode::BAD_GATEWAY, &format!("{} closed the connection", self.host));
        }
        match sender.send_request(hyper::Request::from_parts(parts, body)).await {
            Ok(mut response) => {
                self.scrub(response.headers_mut());
                response.map(BodyExt::boxed)
            }
            Err(error) => answer(hyper::StatusCode::BAD_GATEWAY, &format!("{} did not answer: {error}", self.host)),
        }
    }

    /// Checks that the request names the tunnel's own host and port (its `Host` and, in
    /// absolute form, its URL), so that nothing sent through a tunnel to a bound host is meant
    /// for another; then writes its URL in origin form.
    fn aimed(&self, parts: &mut http::request::Parts) -> Result<(), String> {
        let default = if self.tls { 443 } else { 80 };
        let same = |host: &str, port: Option<u16>| {
            let host = host.trim_start_matches('[').trim_end_matches(']').trim_end_matches('.');
            host.eq_ignore_ascii_case(&self.host) && port.unwrap_or(default) == self.port
        };
        let named = parts.headers.get(http::header::HOST).and_then(|value| value.to_str().ok());
        let named = named.and_then(|value| value.parse::<http::uri::Authority>().ok());
        let aimed = named.is_some_and(|named| same(named.host(), named.port_u16()))
            && parts.uri.authority().is_none_or(|authority| same(authority.host(), authority.port_u16()));
        if !aimed {
            return Err(format!(
                "a request in a connection to {}:{} must name that host (its Host header and URL) and no other",
                self.host, self.port
            ));
        }
        let path = parts.uri.path_and_query().map_or("/", |path| path.as_str()).to_string();
        parts.uri = path.parse().map_err(|error| format!("the request's path is not a path: {error}"))?;
        Ok(())
    }

    /// Puts the bound secrets' values in place of their placeholders in the headers APIs take
    /// tokens in ([`CREDENTIAL_HEADERS`], inside `Authorization: Basic` too); why not, when a
    /// placeholder goes where its secret may not (another host, plain http, the URL, another
    /// header, a TRACE).
    fn swap(&self, parts: &mut http::request::Parts) -> Result<(), String> {
        let anywhere = |text: &str| text.contains(credentials::PREFIX);
        if anywhere(parts.uri.to_string().as_str()) {
            return Err(self.refused(&parts.uri.to_string(), "the URL: put it in the Authorization header"));
        }
        let method = parts.method.clone();
        for (name, value) in parts.headers.iter_mut() {
            let Ok(text) = value.to_str() else { continue };
            let (basic, text) = match text.strip_prefix("Basic ").or_else(|| text.strip_prefix("basic ")) {
                Some(encoded) => match base64::engine::general_purpose::STANDARD.decode(encoded.trim()) {
                    Ok(decoded) => (true, String::from_utf8_lossy(&decoded).into_owned()),
                    Err(_) => (false, text.to_string()),
                },
                None => (false, text.to_string()),
            };
            if !anywhere(&text) {
                continue;
            }
            if !CREDENTIAL_HEADERS.contains(&name.as_str()) {
                return Err(self.refused(&text, &format!("the header {name}: it goes only in Authorization")));
            }
            if method == http::Method::TRACE {
                return Err(self.refused(&text, "a TRACE, which echoes it back"));
            }
            let Some(swapped) = self.swapped(&text)? else { continue };
            let swapped = Zeroizing::new(if basic {
                format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(swapped.as_bytes()))
            } else {
                swapped.to_string()
            });
            let mut header = http::HeaderValue::from_str(&swapped)
                .map_err(|_holds_the_value| "a credential cannot go in a header".to_string())?;
            header.set_sensitive(true);
            *value = header;
        }
        Ok(())
    }

    /// Refuses (and audits) the placeholder found in `text`, which is on its way to `where_`.
    fn refused(&self, text: &str, where_: &str) -> String {
        let name = self.plan.made.iter().find(|(placeholder, _)| text.contains(placeholder.as_str()));
        let name = name.map_or("a credential", |(_, name)| name.as_str());
        self.refuse(name, format!("the placeholder of {name} is not sent in {where_}"))
    }

    /// Audits and logs refusing `name`'s placeholder; the sentence, for the command.
    fn refuse(&self, name: &str, why: String) -> String {
        let crossing = &self.crossing;
        let record = crossing.record.clone().detail("host", self.host.as_str()).detail("credential", name);
        crossing.edge.audit.record(Record { outcome: "refused".into(), ..record }.detail("reason", why.as_str()));
        tracing::warn!(session = %crossing.session, host = %self.host, credential = name, "{why}");
        why
    }

    /// Puts each value read for this connection back in place of where it shows in the
    /// answer's headers (a server echoing a header, a redirect to a URL with it), so the
    /// command never sees it.
    fn scrub(&self, headers: &mut http::HeaderMap) {
        let values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        if values.is_empty() {
            return;
        }
        for value in headers.values_mut() {
            let Ok(text) = value.to_str() else { continue };
            let mut text = text.to_string();
            let mut changed = false;
            for (name, secret) in values.iter() {
                if secret.is_empty() || !text.contains(secret.as_str()) {
                    continue;
                }
                let placeholder = self.plan.made.iter().find(|(_, made)| *made == name).map(|(p, _)| p.as_str());
                text = text.replace(secret.as_str(), placeholder.unwrap_or("[credential]"));
                changed = true;
            }
            if changed {
                if let Ok(scrubbed) = http::HeaderValue::from_str(&text) {
                    *value = scrubbed;
                }
            }
        }
    }

    /// `text` with each placeholder in it replaced by its value (none: no placeholder in it),
    /// or why a placeholder may not go here.
    fn swapped(&self, text: &str) -> Result<Option<Zeroizing<String>>, String> {
        if !text.contains(credentials::PREFIX) {
            return Ok(None);
        }
        let mut out = Zeroizing::new(text.to_string());
        let mut found = false;
        for (placeholder, name) in &self.plan.made {
            if !out.contains(placeholder.as_str()) {
                continue;
            }
            found = true;
            let value = self.value(name)?;
            *out = out.replace(placeholder.as_str(), &value);
        }
        Ok(found.then_some(out))
    }

    /// The value of the secret `name` for this connection's host, or why it is not sent there.
    fn value(&self, name: &str) -> Result<Zeroizing<String>, String> {
        let crossing = &self.crossing;
        let refuse = |why: String| self.refuse(name, why);
        let Some(binding) = self.plan.bound.iter().find(|binding| binding.name == name) else {
            return Err(refuse(format!(
                "the placeholder of {name} was sent to {}, which {name} is not bound to; it is swapped for the secret \
                 only on its way to the hosts it is bound to (`baaaht egress credential add {name} --host {}`)",
                self.host, self.host
            )));
        };
        if !self.tls {
            return Err(refuse(format!(
                "{name} is sent only over https, never in plain http: use https://{}",
                self.host
            )));
        }
        if let Some(value) = self.values.lock().unwrap_or_else(PoisonError::into_inner).get(name) {
            return Ok(value.clone());
        }
        let asker = crate::secrets::Asker {
            caller: &crossing.caller,
            correlation_id: "",
            consumer: ("egress_host", self.host.as_str()),
        };
        let value = crossing
            .edge
            .secrets
            .resolve(asker, binding.referrer, &format!("${{{name}}}"))
            .map_err(|why| refuse(format!("{name} could not be read for {}: {why}", self.host)))?;
        self.values.lock().unwrap_or_else(PoisonError::into_inner).insert(name.to_string(), value.clone());
        Ok(value)
    }
}

/// An answer of the edge itself: `status` and a sentence.
fn answer(status: hyper::StatusCode, why: &str) -> hyper::Response<Body> {
    let body = Full::new(Bytes::from(format!("baaaht: {why}\n"))).map_err(|never| match never {}).boxed();
    let mut response = hyper::Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
    response.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject as _;

    /// A TLS handshake with a server of `authority` for `host`, by a client trusting only
    /// `root`; the client's error, if any.
    async fn handshake(authority: &Authority, host: &str, root: &str) -> Result<(), String> {
        let mut roots = rustls::RootCertStore::empty();
        let root = rustls::pki_types::CertificateDer::from_pem_slice(root.as_bytes()).expect("pem");
        roots.add(root).expect("root");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let (near, far) = tokio::io::duplex(64 * 1024);
        let server = tokio_rustls::TlsAcceptor::from(authority.server_for(host)?);
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).expect("name");
        let (served, connected) =
            tokio::join!(server.accept(far), tokio_rustls::TlsConnector::from(Arc::new(client)).connect(name, near));
        connected.map_err(|error| error.to_string())?;
        served.map_err(|error| error.to_string())?;
        Ok(())
    }

    #[tokio::test]
    async fn the_authority_is_made_once_and_its_certificates_chain_to_what_it_wrote() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        drop(Authority::open(dir.path()).expect("made"));
        let key = std::fs::metadata(dir.path().join(KEY_FILE)).expect("key");
        assert_eq!(key.permissions().mode() & 0o777, 0o600);
        let written = std::fs::read_to_string(dir.path().join(CERT_FILE)).expect("certificate");
        // Opened again: the same key, so what it issues verifies against the certificate
        // written the first time, for names and addresses alike.
        let again = Authority::open(dir.path()).expect("opened");
        assert!(std::fs::read_to_string(again.trust()).expect("bundle").ends_with(&written));
        handshake(&again, "git.example.com", &written).await.expect("a name");
        handshake(&again, "10.1.2.3", &written).await.expect("an address");
        let kept = again.server_for("git.example.com").expect("kept");
        assert!(Arc::ptr_eq(&kept, &again.server_for("git.example.com").expect("kept")));
        // Another authority's certificates are not trusted in its place.
        let other = tempfile::tempdir().expect("tempdir");
        let stranger = Authority::open(other.path()).expect("another");
        let refused = handshake(&stranger, "git.example.com", &written).await.expect_err("another authority");
        assert!(refused.contains("UnknownIssuer") || refused.contains("invalid peer certificate"), "{refused}");
    }
}
