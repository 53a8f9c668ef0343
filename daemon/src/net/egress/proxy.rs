//! ProxyWebRequest (spec §13.3): the one way a tool reaches the web. http and https only; the
//! host is resolved once and every address is checked ([`super::filter`]) before the proxy
//! connects to exactly the address it checked, so a second resolution cannot swap it; each
//! redirect (at most `max_redirects`) is checked the same way; bodies are cut at
//! `max_content_size`; each session may send `rate_limit` requests a minute; the whole request
//! has `timeout` seconds; one audit line is logged per request. `tools.web_proxy.allow` is the
//! only way to a private address.
//!
//! Name resolution and outbound connections go through [`Resolver`] and [`Connector`], so the
//! tests can check every refusal without sending a packet anywhere.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use super::filter::{
    in_network, is_metadata_name, parse_allowed, parse_ip_host, refusal, AllowError, Allowed, Refusal,
};
use crate::base::config::WebProxyConfig;

/// Resolves host names (the seam the tests replace with a table).
#[async_trait::async_trait]
pub trait Resolver: Send + Sync {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<IpAddr>>;
}

/// The system resolver.
#[derive(Debug, Default)]
pub struct SystemResolver;

#[async_trait::async_trait]
impl Resolver for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<IpAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.map(|address| address.ip()).collect())
    }
}

/// Opens outbound connections (the seam the tests replace with a recorder).
#[async_trait::async_trait]
pub trait Connector: Send + Sync {
    async fn connect(&self, address: SocketAddr) -> std::io::Result<tokio::net::TcpStream>;
}

/// Plain TCP.
#[derive(Debug, Default)]
pub struct TcpConnector;

#[async_trait::async_trait]
impl Connector for TcpConnector {
    async fn connect(&self, address: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
        tokio::net::TcpStream::connect(address).await
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("`{url}` is not a URL the proxy can fetch: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("{host} is {why} ({address}); the proxy reaches public addresses only (an entry in tools.web_proxy.allow permits a private one)")]
    Refused { host: String, address: IpAddr, why: Refusal },
    #[error("{host} is a cloud metadata endpoint; the proxy never reaches one")]
    MetadataName { host: String },
    #[error("cannot resolve {host}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{host} resolves to no address")]
    NoAddress { host: String },
    #[error("cannot connect to {address}")]
    Connect {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("more than {max} redirects")]
    TooManyRedirects { max: u32 },
    #[error("this session sent {per_minute} web requests in the last minute; try again in {} s", retry_after.as_secs().max(1))]
    RateLimited { per_minute: u32, retry_after: Duration },
    #[error("no complete answer within {} s", limit.as_secs())]
    Timeout { limit: Duration },
    #[error("{host}: {message}")]
    Http { host: String, message: String },
    #[error("{host}: TLS failed: {message}")]
    Tls { host: String, message: String },
}

/// Why the proxy cannot be built from `tools.web_proxy`: the setting, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum ProxyConfigError {
    #[error("tools.web_proxy.allow[{index}]: {error}")]
    Allow { index: usize, error: AllowError },
    #[error("tools.web_proxy.search.searxng_url: {error}")]
    SearxngUrl { error: ProxyError },
}

impl ProxyError {
    /// Whether the request was refused by policy (as opposed to failing on the way).
    pub fn is_refusal(&self) -> bool {
        matches!(self, ProxyError::Refused { .. } | ProxyError::MetadataName { .. } | ProxyError::BadUrl { .. })
    }
}

/// A request to fetch.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// Who asks: rate limits and audit lines are per session.
    pub session: String,
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Whether redirects are followed (a turn that read untrusted content gets them as they
    /// are: where one leads is checked as any address it asks for).
    pub follow_redirects: bool,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub final_url: String,
    /// The body was longer than `max_content_size` and was cut there.
    pub truncated: bool,
}

/// A URL split into what the proxy needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    tls: bool,
    host: String,
    port: u16,
    path: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target, ProxyError> {
        let bad =
            |reason: &str| ProxyError::BadUrl { url: redacted(url).chars().take(200).collect(), reason: reason.into() };
        if url.len() > 8192 {
            return Err(bad("longer than 8,192 bytes"));
        }
        // One reading of a URL for every check and the connection: a character that readers
        // take differently (a backslash is `/` to a browser, part of the user to others) is
        // refused, not guessed at.
        if let Some(odd) = url
            .chars()
            .find(|c| !c.is_ascii_graphic() || matches!(c, '\\' | '"' | '<' | '>' | '^' | '`' | '{' | '}' | '|'))
        {
            return Err(bad(&format!("it holds {odd:?}, which is not written plainly in a URL (percent-encode it)")));
        }
        match url.split_once("://").map(|(scheme, _)| scheme.to_ascii_lowercase()) {
            Some(scheme) if scheme == "http" || scheme == "https" => {}
            Some(scheme) => return Err(bad(&format!("the scheme `{scheme}` is not http or https"))),
            None => return Err(bad("write it with http:// or https://")),
        }
        let uri: http::Uri = url.parse().map_err(|_unparsable| bad("it does not parse"))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            Some(other) => return Err(bad(&format!("the scheme `{other}` is not http or https"))),
            None => return Err(bad("write it with http:// or https://")),
        };
        let authority = uri.authority().ok_or_else(|| bad("it names no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad("credentials in the URL are not forwarded"));
        }
        let host = authority.host().to_ascii_lowercase();
        if host.is_empty() {
            return Err(bad("it names no host"));
        }
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let path = uri.path_and_query().map_or("/".to_string(), |p| p.as_str().to_string());
        Ok(Target { tls, host, port, path })
    }

    fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        let default_port = if self.tls { 443 } else { 80 };
        if self.port == default_port {
            format!("{scheme}://{}{}", self.host, self.path)
        } else {
            format!("{scheme}://{}:{}{}", self.host, self.port, self.path)
        }
    }

    /// The target a `Location` header points to, relative to this one.
    fn follow(&self, location: &str) -> Result<Target, ProxyError> {
        if let Some(scheme) = scheme_of(location) {
            if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") {
                return Target::parse(location);
            }
            return Err(ProxyError::BadUrl {
                url: redacted(location),
                reason: format!("a redirect to the scheme `{scheme}` is refused: only http and https are followed"),
            });
        }
        let scheme = if self.tls { "https" } else { "http" };
        if let Some(rest) = location.strip_prefix("//") {
            return Target::parse(&format!("{scheme}://{rest}"));
        }
        let path = if location.starts_with('/') {
            location.to_string()
        } else {
            let base = self.path.split('?').next().unwrap_or("/");
            let folder = &base[..base.rfind('/').map_or(0, |i| i + 1)];
            format!("{}{location}", if folder.is_empty() { "/" } else { folder })
        };
        Target::parse(&format!("{scheme}://{}:{}{path}", self.host, self.port))
    }
}

/// The host (lowercase, an IPv6 address in brackets) and port `url` leads to, as the proxy
/// reads it to connect: every check of an address reads it so too.
pub fn host_and_port(url: &str) -> Result<(String, u16), ProxyError> {
    Target::parse(url).map(|target| (target.host, target.port))
}

/// The scheme of an absolute URI reference (RFC 3986: a letter, then letters, digits, `+`,
/// `-`, `.`, up to the first `:`); `None` for a relative one.
fn scheme_of(reference: &str) -> Option<&str> {
    let (scheme, _) = reference.split_once(':')?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|first| first.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(scheme)
}

/// `url` without the credentials its authority may carry (`user:pass@`), at most 500
/// characters: what logs and error messages show.
pub fn redacted(url: &str) -> String {
    let shown = match url.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            match rest[..end].rfind('@') {
                Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
                None => url.to_string(),
            }
        }
        None => url.to_string(),
    };
    shown.chars().take(500).collect()
}

/// The proxy.
pub struct WebProxy {
    max_redirects: u32,
    max_body: usize,
    per_minute: u32,
    timeout: Duration,
    allowed: Vec<Allowed>,
    resolver: Arc<dyn Resolver>,
    connector: Arc<dyn Connector>,
    recent: crate::guard::limits::Rate,
    /// This machine's loopback and the unspecified address are refused whatever is allowed.
    loopback_refused: bool,
}

impl std::fmt::Debug for WebProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebProxy").field("allowed", &self.allowed).finish_non_exhaustive()
    }
}

/// Headers the proxy sets itself or that only concern one connection.
const DROPPED_HEADERS: &[&str] =
    &["host", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "content-length"];

impl WebProxy {
    /// Builds the proxy from `tools.web_proxy`; a bad `allow` entry is named.
    pub fn new(
        config: &WebProxyConfig,
        resolver: Arc<dyn Resolver>,
        connector: Arc<dyn Connector>,
    ) -> Result<WebProxy, ProxyConfigError> {
        let mut allowed = config
            .allow
            .iter()
            .enumerate()
            .map(|(index, entry)| parse_allowed(entry).map_err(|error| ProxyConfigError::Allow { index, error }))
            .collect::<Result<Vec<_>, _>>()?;
        // The configured SearXNG instance is usually on the home network: it is allowed.
        let search = &config.search;
        if search.backend == crate::base::config::SearchBackend::Searxng && !search.searxng_url.is_empty() {
            let target = Target::parse(&search.searxng_url).map_err(|error| ProxyConfigError::SearxngUrl { error })?;
            allowed.push(Allowed::Host { name: target.host, port: Some(target.port) });
        }
        Ok(WebProxy {
            max_redirects: config.max_redirects,
            max_body: usize::try_from(config.max_content_size.0).unwrap_or(usize::MAX),
            per_minute: config.rate_limit,
            timeout: Duration::from_secs(config.timeout.max(1)),
            allowed,
            resolver,
            connector,
            recent: crate::guard::limits::Rate::new(config.rate_limit as usize, Duration::from_secs(60)),
            loopback_refused: false,
        })
    }

    /// This proxy, never reaching this machine's loopback or the unspecified address (which is
    /// this machine too), whatever is allowed and whatever an allowed name resolves to: for a
    /// way out that reaches the host's own services otherwise (the LLM gateway's, whose
    /// providers on the host's loopback are relayed).
    pub fn refusing_loopback(self) -> WebProxy {
        WebProxy { loopback_refused: true, ..self }
    }

    /// Whether `why` refuses an address whatever is allowed.
    fn refuses_always(&self, why: Refusal) -> bool {
        why.is_absolute() || (self.loopback_refused && matches!(why, Refusal::Loopback | Refusal::Unspecified))
    }

    /// This proxy, also reaching `entries` (`host:port`, as `tools.web_proxy.allow` names
    /// them) whatever their address, short of those always refused (link-local, metadata): the
    /// hosts an administrator wrote elsewhere in the configuration (the LLM providers').
    pub fn allowing(mut self, entries: &[String]) -> WebProxy {
        for entry in entries {
            match parse_allowed(entry) {
                Ok(allowed) => self.allowed.push(allowed),
                Err(why) => tracing::warn!(entry, %why, "not allowed through the address filter"),
            }
        }
        self
    }

    fn allows(&self, host: &str, port: u16, address: IpAddr) -> bool {
        self.allowed.iter().any(|entry| match entry {
            Allowed::Host { name, port: wanted } => name == host && wanted.is_none_or(|p| p == port),
            Allowed::Network { base, prefix, port: wanted } => {
                in_network(address, *base, *prefix) && wanted.is_none_or(|p| p == port)
            }
        })
    }

    fn take_slot(&self, session: &str) -> Result<(), ProxyError> {
        self.recent
            .take(session)
            .map_err(|retry_after| ProxyError::RateLimited { per_minute: self.per_minute, retry_after })
    }

    /// The address to connect to for `target`: resolved once, every candidate checked.
    async fn checked_address(&self, target: &Target) -> Result<SocketAddr, ProxyError> {
        if is_metadata_name(&target.host) {
            return Err(ProxyError::MetadataName { host: target.host.clone() });
        }
        let candidates = match parse_ip_host(&target.host) {
            Some(address) => vec![address],
            None => self
                .resolver
                .resolve(&target.host, target.port)
                .await
                .map_err(|source| ProxyError::Resolve { host: target.host.clone(), source })?,
        };
        let mut first_refusal = None;
        for address in candidates {
            // An IPv4-mapped IPv6 answer is the IPv4 address it carries.
            let address = match address {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
                v4 => v4,
            };
            match refusal(address) {
                Some(why) if self.refuses_always(why) || !self.allows(&target.host, target.port, address) => {
                    first_refusal.get_or_insert(ProxyError::Refused { host: target.host.clone(), address, why });
                }
                _ => return Ok(SocketAddr::new(address, target.port)),
            }
        }
        Err(first_refusal.unwrap_or(ProxyError::NoAddress { host: target.host.clone() }))
    }

    /// Why a tunnel to `host`:`port` is refused, when that is known without asking DNS: a
    /// metadata name, `localhost`, or an address (in any spelling) the filter refuses. Checked
    /// before anyone is asked about the host, so no one is asked about one the filter refuses
    /// anyway; a name is not resolved before its rule or its person allows it (a lookup of a
    /// name made up of data would carry that data out).
    pub fn refused_at_sight(&self, host: &str, port: u16) -> Option<ProxyError> {
        let host = host.to_ascii_lowercase();
        if is_metadata_name(&host) {
            return Some(ProxyError::MetadataName { host });
        }
        let address = match parse_ip_host(&host) {
            Some(address) => address,
            None if host == "localhost" || host.ends_with(".localhost") => IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            None => return None,
        };
        let address = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
            v4 => v4,
        };
        match refusal(address) {
            Some(why) if self.refuses_always(why) || !self.allows(&host, port, address) => {
                Some(ProxyError::Refused { host, address, why })
            }
            _ => None,
        }
    }

    /// A TCP connection to `host`:`port` for a tunnel (an MCP server's CONNECT): the host is
    /// resolved once and the address checked as a fetch's is, then connected to.
    pub async fn connect_checked(&self, host: &str, port: u16) -> Result<tokio::net::TcpStream, ProxyError> {
        let target = Target { tls: false, host: host.to_ascii_lowercase(), port, path: String::new() };
        let connect = async {
            let address = self.checked_address(&target).await?;
            self.connector.connect(address).await.map_err(|source| ProxyError::Connect { address, source })
        };
        // The name's resolution and the connection have `timeout` between them.
        tokio::time::timeout(self.timeout, connect).await.unwrap_or(Err(ProxyError::Timeout { limit: self.timeout }))
    }

    /// Fetches `request`, following redirects; logs one audit line.
    pub async fn fetch(&self, request: FetchRequest) -> Result<FetchResponse, ProxyError> {
        let started = Instant::now();
        let outcome = match self.take_slot(&request.session) {
            Ok(()) => match tokio::time::timeout(self.timeout, self.follow(&request)).await {
                Ok(outcome) => outcome,
                Err(_) => Err(ProxyError::Timeout { limit: self.timeout }),
            },
            Err(error) => Err(error),
        };
        let url = redacted(&request.url);
        let duration_ms = started.elapsed().as_millis() as u64;
        match &outcome {
            Ok((response, redirects)) => tracing::info!(
                target: "baaaht_daemon::egress::audit",
                session = %request.session,
                method = %request.method,
                url = %url,
                final_url = %redacted(&response.final_url),
                status = response.status,
                bytes = response.body.len(),
                truncated = response.truncated,
                redirects,
                duration_ms,
                "web request served"
            ),
            Err(error) => tracing::warn!(
                target: "baaaht_daemon::egress::audit",
                session = %request.session,
                method = %request.method,
                url = %url,
                refused = error.is_refusal(),
                error = %error,
                duration_ms,
                "web request not served"
            ),
        }
        outcome.map(|(response, _)| response)
    }

    async fn follow(&self, request: &FetchRequest) -> Result<(FetchResponse, u32), ProxyError> {
        let method = match request.method.to_ascii_uppercase().as_str() {
            "" | "GET" => http::Method::GET,
            "HEAD" => http::Method::HEAD,
            "POST" => http::Method::POST,
            other => {
                return Err(ProxyError::BadUrl {
                    url: redacted(&request.url),
                    reason: format!("the method `{other}` is not GET, HEAD or POST"),
                })
            }
        };
        let mut target = Target::parse(&request.url)?;
        let mut method = method;
        let mut body = request.body.clone();
        let mut redirects = 0;
        loop {
            let address = self.checked_address(&target).await?;
            let response = self.exchange(&target, address, &method, &request.headers, &body).await?;
            let location = response.headers.iter().find(|(name, _)| name == "location").map(|(_, v)| v.clone());
            match (response.status, location) {
                (301 | 302 | 303 | 307 | 308, Some(location)) if request.follow_redirects => {
                    redirects += 1;
                    if redirects > self.max_redirects {
                        return Err(ProxyError::TooManyRedirects { max: self.max_redirects });
                    }
                    if matches!(response.status, 301..=303) && method != http::Method::HEAD {
                        method = http::Method::GET;
                        body.clear();
                    }
                    target = target.follow(&location)?;
                }
                _ => return Ok((response, redirects)),
            }
        }
    }

    async fn exchange(
        &self,
        target: &Target,
        address: SocketAddr,
        method: &http::Method,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<FetchResponse, ProxyError> {
        let tcp = self.connector.connect(address).await.map_err(|source| ProxyError::Connect { address, source })?;
        if !target.tls {
            return self.send(target, TokioIo::new(tcp), method, headers, body).await;
        }
        let tls_error = |message: String| ProxyError::Tls { host: target.host.clone(), message };
        let config = baaaht_llm::provider::tls_config().map_err(tls_error)?;
        let name = rustls::pki_types::ServerName::try_from(target.host.clone())
            .map_err(|error| tls_error(format!("not a valid server name: {error}")))?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|error| tls_error(error.to_string()))?;
        self.send(target, TokioIo::new(tls), method, headers, body).await
    }

    async fn send<IO>(
        &self,
        target: &Target,
        io: IO,
        method: &http::Method,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<FetchResponse, ProxyError>
    where
        IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let http_error =
            |error: &dyn std::fmt::Display| ProxyError::Http { host: target.host.clone(), message: error.to_string() };
        let (mut sender, driver) = hyper::client::conn::http1::handshake(io).await.map_err(|e| http_error(&e))?;
        // Driven beside the exchange, and dropped with it (the connection with it).
        let mut connection = tokio::task::JoinSet::new();
        connection.spawn(driver);
        let host_header = if target.port == if target.tls { 443 } else { 80 } {
            target.host.clone()
        } else {
            format!("{}:{}", target.host, target.port)
        };
        let mut builder =
            hyper::Request::builder().method(method.clone()).uri(&target.path).header(http::header::HOST, host_header);
        let mut has_agent = false;
        for (name, value) in headers {
            let lower = name.to_ascii_lowercase();
            if DROPPED_HEADERS.contains(&lower.as_str()) {
                continue;
            }
            has_agent |= lower == "user-agent";
            builder = builder.header(name.as_str(), value.as_str());
        }
        if !has_agent {
            builder = builder.header(http::header::USER_AGENT, concat!("baaaht/", env!("CARGO_PKG_VERSION")));
        }
        let request = builder.body(Full::new(Bytes::copy_from_slice(body))).map_err(|e| http_error(&e))?;
        let response = sender.send_request(request).await.map_err(|e| http_error(&e))?;
        let status = response.status().as_u16();
        let response_headers = response
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str().to_string(), value.to_str().ok()?.to_string())))
            .collect();
        let mut stream = response.into_body();
        let mut collected = Vec::new();
        let mut truncated = false;
        while let Some(frame) = stream.frame().await {
            let frame = frame.map_err(|e| http_error(&e))?;
            if let Ok(data) = frame.into_data() {
                let room = self.max_body - collected.len();
                if data.len() > room {
                    collected.extend_from_slice(&data[..room]);
                    truncated = true;
                    break;
                }
                collected.extend_from_slice(&data);
            }
        }
        // The rest of a cut body is not read: the connection goes with it.
        connection.abort_all();
        Ok(FetchResponse { status, headers: response_headers, body: collected, final_url: target.url(), truncated })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::base::config::ByteSize;
    use std::sync::{Mutex, PoisonError};

    /// A resolver answering from a table; any other name does not exist.
    struct Table(Vec<(&'static str, IpAddr)>);

    #[async_trait::async_trait]
    impl Resolver for Table {
        async fn resolve(&self, host: &str, _port: u16) -> std::io::Result<Vec<IpAddr>> {
            let found: Vec<IpAddr> = self.0.iter().filter(|(name, _)| *name == host).map(|(_, ip)| *ip).collect();
            if found.is_empty() {
                return Err(std::io::Error::new(std::io::ErrorKind::NotFound, "no such host"));
            }
            Ok(found)
        }
    }

    /// Records every connection attempt; connects only to loopback test servers when allowed.
    #[derive(Default)]
    struct Recorder {
        attempts: Mutex<Vec<SocketAddr>>,
        loopback_allowed: bool,
    }

    #[async_trait::async_trait]
    impl Connector for Recorder {
        async fn connect(&self, address: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
            self.attempts.lock().unwrap_or_else(PoisonError::into_inner).push(address);
            if self.loopback_allowed && address.ip().is_loopback() {
                return tokio::net::TcpStream::connect(address).await;
            }
            Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the test connector reaches no other address",
            ))
        }
    }

    fn proxy(allow: &[&str], resolver: Table, connector: Arc<Recorder>) -> WebProxy {
        let config = WebProxyConfig {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            max_content_size: ByteSize(1_000_000),
            ..WebProxyConfig::default()
        };
        WebProxy::new(&config, Arc::new(resolver), connector).expect("valid config")
    }

    fn get(url: &str) -> FetchRequest {
        FetchRequest {
            session: "s1".into(),
            method: "GET".into(),
            url: url.into(),
            headers: vec![],
            body: vec![],
            follow_redirects: true,
        }
    }

    /// A loopback HTTP server answering every request with `respond(path)`.
    pub(crate) async fn server(respond: fn(&str, u16) -> String) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else { return };
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 4096];
                    let n = stream.read(&mut buffer).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&buffer[..n]).into_owned();
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                    // silent-ok: the client may hang up early (a cut body).
                    let _ = stream.write_all(respond(&path, port).as_bytes()).await;
                });
            }
        });
        port
    }

    #[test]
    fn credentials_never_reach_a_log_line() {
        assert_eq!(redacted("https://user:secret@example.com/a?b=c"), "https://example.com/a?b=c");
        assert_eq!(redacted("http://tok@host:8080"), "http://host:8080");
        assert_eq!(redacted("https://example.com/a@b"), "https://example.com/a@b");
        let error = Target::parse("http://user:pw@example.com/").expect_err("refused").to_string();
        assert!(!error.contains("pw"), "{error}");
    }

    #[tokio::test]
    async fn the_ssrf_matrix_is_refused_without_a_connection_attempt() {
        let recorder = Arc::new(Recorder::default());
        let resolver = Table(vec![
            ("rebind.test", "127.0.0.1".parse().expect("ip")),
            ("mixed.test", "10.0.0.5".parse().expect("ip")),
            ("mapped.test", "::ffff:192.168.0.1".parse().expect("ip")),
        ]);
        let proxy = proxy(&[], resolver, recorder.clone());
        for url in [
            "http://127.0.0.1/",
            "http://127.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0177.0.0.1/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://169.254.169.254/latest/meta-data/",
            "http://metadata.google.internal/computeMetadata/v1/",
            "http://10.0.0.1/",
            "http://100.64.0.1/",
            "http://rebind.test/",
            "http://mixed.test/",
            "http://mapped.test/",
            "https://127.0.0.1:8443/",
        ] {
            let error = proxy.fetch(get(url)).await.expect_err(url);
            assert!(error.is_refusal(), "{url}: {error}");
        }
        for (url, reason) in [
            ("ftp://example.com/", "the scheme `ftp` is not http or https"),
            ("file:///etc/passwd", "the scheme `file` is not http or https"),
            ("http:///etc/passwd", "it does not parse"),
            ("http://user:pw@example.com/", "credentials in the URL are not forwarded"),
            ("example.com", "write it with http:// or https://"),
            ("http://127.0.0.1:28801\\@loop.example/", "it holds '\\\\'"),
            ("http://example.com/a b", "it holds ' '"),
        ] {
            let error = proxy.fetch(get(url)).await.expect_err(url).to_string();
            assert!(error.contains(reason), "{url}: {error}");
        }
        assert!(recorder.attempts.lock().expect("lock").is_empty(), "a refused request opened a connection");
        assert_eq!(host_and_port("http://Loop.Example:8080/x").expect("read"), ("loop.example".to_string(), 8080));
        assert_eq!(host_and_port("https://[::1]/").expect("read"), ("[::1]".to_string(), 443));
        let message = proxy.fetch(get("http://rebind.test/")).await.expect_err("refused").to_string();
        assert_eq!(
            message,
            "rebind.test is a loopback address (127.0.0.1); the proxy reaches public addresses only \
             (an entry in tools.web_proxy.allow permits a private one)"
        );
    }

    #[tokio::test]
    async fn an_allowed_server_is_served_and_its_redirect_to_a_private_address_refused() {
        let port = server(|path, port| match path {
            "/big" => {
                let body = "x".repeat(2_000_000);
                format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len())
            }
            // The allowed entries name this server's port; the redirect leaves them.
            "/escape" => "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1/admin\r\ncontent-length: 0\r\n\r\n".into(),
            "/hop" => {
                format!("HTTP/1.1 301 Moved\r\nlocation: http://allowed.test:{port}/page\r\ncontent-length: 0\r\n\r\n")
            }
            "/loop" => "HTTP/1.1 302 Found\r\nlocation: /loop\r\ncontent-length: 0\r\n\r\n".into(),
            "/file" => "HTTP/1.1 302 Found\r\nlocation: file:///etc/passwd\r\ncontent-length: 0\r\n\r\n".into(),
            "/gopher" => "HTTP/1.1 302 Found\r\nlocation: GOPHER://x:70/_\r\ncontent-length: 0\r\n\r\n".into(),
            _ => "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 12\r\n\r\n<p>hello</p>".into(),
        })
        .await;
        let recorder = Arc::new(Recorder { loopback_allowed: true, ..Recorder::default() });
        let resolver = Table(vec![("allowed.test", "127.0.0.1".parse().expect("ip"))]);
        let allowed = format!("allowed.test:{port}");
        let proxy = proxy(&[allowed.as_str(), &format!("127.0.0.1:{port}")], resolver, recorder.clone());

        let page = proxy.fetch(get(&format!("http://allowed.test:{port}/hop"))).await.expect("served");
        assert_eq!((page.status, page.final_url.as_str()), (200, format!("http://allowed.test:{port}/page").as_str()));
        assert_eq!(page.body, b"<p>hello</p>".to_vec());

        let big = proxy.fetch(get(&format!("http://127.0.0.1:{port}/big"))).await.expect("served");
        assert_eq!((big.body.len(), big.truncated), (1_000_000, true));

        let error = proxy.fetch(get(&format!("http://allowed.test:{port}/escape"))).await.expect_err("refused");
        assert!(matches!(error, ProxyError::Refused { why: Refusal::Loopback, .. }), "{error}");
        let error = proxy.fetch(get(&format!("http://allowed.test:{port}/loop"))).await.expect_err("loops");
        assert_eq!(error.to_string(), "more than 5 redirects");
        for (path, scheme) in [("/file", "file"), ("/gopher", "GOPHER")] {
            let error = proxy.fetch(get(&format!("http://allowed.test:{port}{path}"))).await.expect_err("refused");
            let text = error.to_string();
            assert!(text.contains(&format!("a redirect to the scheme `{scheme}` is refused")), "{text}");
        }
        let attempts = recorder.attempts.lock().expect("lock").clone();
        assert!(attempts.iter().all(|a| a.port() == port && a.ip().is_loopback()), "{attempts:?}");
        assert!(!attempts.iter().any(|a| a.port() == 80), "the redirect target was never connected to: {attempts:?}");
    }

    #[tokio::test]
    async fn a_way_out_refusing_loopback_refuses_it_whatever_a_listed_name_resolves_to() {
        let recorder = Arc::new(Recorder { loopback_allowed: true, ..Recorder::default() });
        let resolver = Table(vec![
            ("api.provider.test", "127.0.0.1".parse().expect("ip")),
            ("zero.provider.test", "0.0.0.0".parse().expect("ip")),
            ("ollama.lan", "192.168.1.20".parse().expect("ip")),
        ]);
        let hosts =
            ["api.provider.test:443", "zero.provider.test:443", "ollama.lan:11434", "127.0.0.1:8080"].map(String::from);
        let proxy = proxy(&[], resolver, recorder.clone()).allowing(&hosts).refusing_loopback();
        for host in ["api.provider.test", "zero.provider.test"] {
            let error = proxy.connect_checked(host, 443).await.expect_err("refused");
            assert!(matches!(error, ProxyError::Refused { .. }), "{host}: {error}");
        }
        // Written as an address, too, even listed.
        assert!(proxy.refused_at_sight("127.0.0.1", 8080).is_some());
        assert!(proxy.refused_at_sight("[::]", 443).is_some());
        // A private address of a listed name is still the provider on the home network.
        assert!(!matches!(proxy.connect_checked("ollama.lan", 11434).await, Err(ProxyError::Refused { .. })));
        let attempts = recorder.attempts.lock().expect("lock").clone();
        assert!(attempts.iter().all(|a| !a.ip().is_loopback() && !a.ip().is_unspecified()), "{attempts:?}");
    }

    #[tokio::test]
    async fn each_session_has_its_own_rate_limit() {
        let config = WebProxyConfig { rate_limit: 2, ..WebProxyConfig::default() };
        let proxy =
            WebProxy::new(&config, Arc::new(Table(vec![])), Arc::new(Recorder::default())).expect("valid config");
        for _ in 0..2 {
            assert!(!matches!(proxy.fetch(get("http://10.0.0.1/")).await, Err(ProxyError::RateLimited { .. })));
        }
        let error = proxy.fetch(get("http://10.0.0.1/")).await.expect_err("limited");
        assert!(error.to_string().starts_with("this session sent 2 web requests in the last minute"), "{error}");
        let other = FetchRequest { session: "s2".into(), ..get("http://10.0.0.1/") };
        assert!(!matches!(proxy.fetch(other).await, Err(ProxyError::RateLimited { .. })));
    }

    #[test]
    fn a_bad_allow_entry_is_named_by_its_place() {
        let config = WebProxyConfig { allow: vec!["ok.lan".into(), "10.0.0.0/33".into()], ..WebProxyConfig::default() };
        let error = WebProxy::new(&config, Arc::new(Table(vec![])), Arc::new(Recorder::default())).expect_err("bad");
        assert!(matches!(error, ProxyConfigError::Allow { index: 1, .. }), "{error}");
        assert_eq!(error.to_string(), "tools.web_proxy.allow[1]: `/33` is not a prefix length of 0 to 32");
    }

    #[test]
    fn relative_redirects_resolve_against_the_page() {
        let page = Target::parse("https://example.com:8443/a/b?q=1").expect("url");
        assert_eq!(page.follow("c").expect("follows").url(), "https://example.com:8443/a/c");
        assert_eq!(page.follow("/d").expect("follows").url(), "https://example.com:8443/d");
        assert_eq!(page.follow("//other.org/e").expect("follows").url(), "https://other.org/e");
        assert_eq!(page.follow("http://x.org/").expect("follows").url(), "http://x.org/");
    }
}
