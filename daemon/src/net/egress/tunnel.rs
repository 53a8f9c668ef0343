//! CONNECT tunnels through the web proxy's address filter: the way out for a process the
//! daemon lets reach the network on someone's behalf (a gateway container, the `git` of a
//! skill install). A client sends `CONNECT host:port HTTP/1.1`; the daemon checks the target
//! against the tunnel's [`Reach`], resolves it once and checks every address
//! ([`WebProxy::connect_checked`]: public addresses only unless `tools.web_proxy.allow` names
//! one), connects to exactly that address, answers `200` and then copies bytes both ways.
//! Each request is audited under the tunnel's principal; at most [`Tunnels::max_open`] are
//! open at once; a client that names no target within [`HEAD_TIMEOUT`] is cut off.
//!
//! This module never reads or writes what flows through an open tunnel.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::guard::audit::{Audit, Kind, Record};
use crate::net::egress::proxy::WebProxy;

/// The longest request head taken.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client has to send its request.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a tunnel may lead, before the address filter has its say.
#[derive(Debug, Clone)]
pub enum Reach {
    /// Only these hosts: `host:port` or `*.domain:port` (see [`crate::net::egress::filter::listed`]).
    Listed(Vec<String>),
    /// Any host, on any port (an https client: what it sends is TLS anyway).
    AnyHost,
}

impl Reach {
    fn allows(&self, host: &str, port: u16) -> bool {
        match self {
            Reach::Listed(hosts) => crate::net::egress::filter::listed(hosts.iter().map(String::as_str), host, port),
            Reach::AnyHost => true,
        }
    }

    fn describe(&self) -> String {
        match self {
            Reach::Listed(hosts) => hosts.join(", "),
            Reach::AnyHost => "any public host".into(),
        }
    }
}

/// Something a tunnel's client connects on.
pub enum Listener {
    Unix(tokio::net::UnixListener),
    Tcp(tokio::net::TcpListener),
}

/// A client's connection, whatever it came in on.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

impl Listener {
    async fn accept(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(match self {
            Listener::Unix(listener) => Box::new(listener.accept().await?.0),
            Listener::Tcp(listener) => Box::new(listener.accept().await?.0),
        })
    }
}

/// The tunnels of one client: who it is (for the audit log and refusals), where it may go,
/// and the `Proxy-Authorization` it must send when its listener is one others can reach.
pub struct Tunnels {
    /// As the audit log names it: `gateway:work`, `host:uid=0`, `gateway:web/user:u-…`.
    pub principal: String,
    /// Added to every audit record (a context, a purpose).
    pub record: Record,
    /// Shown in refusals: "gateway work", "the skill install".
    pub who: String,
    pub reach: Reach,
    /// The exact `Proxy-Authorization` value a request must carry; none: no check.
    pub credential: Option<String>,
    pub max_open: usize,
    pub web: Arc<WebProxy>,
    pub audit: Audit,
    /// The first request refused or failed, in words: what a caller whose client only says
    /// "failed" can tell its user.
    first_problem: Mutex<Option<String>>,
}

impl Tunnels {
    pub fn new(principal: String, who: String, reach: Reach, web: Arc<WebProxy>, audit: Audit) -> Tunnels {
        Tunnels {
            record: Record::new(Kind::Egress, principal.as_str(), ""),
            principal,
            who,
            reach,
            credential: None,
            max_open: 64,
            web,
            audit,
            first_problem: Mutex::default(),
        }
    }

    /// The first refusal or failure, if any request had one.
    pub fn first_problem(&self) -> Option<String> {
        self.first_problem.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn note_problem(&self, why: &str) {
        self.first_problem.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert_with(|| why.to_string());
    }

    /// Serves tunnels on `listener` (each connection a task on `tracker`) until `cancel`.
    pub fn serve(
        self: Arc<Self>,
        listener: Listener,
        cancel: CancellationToken,
        tracker: &TaskTracker,
    ) -> tokio::task::JoinHandle<()> {
        let open = Arc::new(tokio::sync::Semaphore::new(self.max_open));
        let tasks = tracker.clone();
        tracker.spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = cancel.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                match accepted {
                    Ok(mut stream) => {
                        let Ok(slot) = open.clone().try_acquire_owned() else {
                            let why = format!("{} has {} connections open already", self.who, self.max_open);
                            tracing::warn!(principal = %self.principal, "a tunnel was refused: too many open");
                            tasks.spawn(async move { answer(&mut stream, "503 Service Unavailable", &why, &[]).await });
                            continue;
                        };
                        let tunnels = self.clone();
                        let cancel = cancel.clone();
                        tasks.spawn(async move {
                            tokio::select! {
                                () = cancel.cancelled() => {}
                                () = tunnels.tunnel(stream) => {}
                            }
                            drop(slot);
                        });
                    }
                    Err(error) => {
                        // Out of descriptors and the like: back off instead of spinning.
                        tracing::warn!(principal = %self.principal, %error, "cannot accept a tunnel");
                        tokio::select! {
                            () = cancel.cancelled() => return,
                            () = tokio::time::sleep(Duration::from_millis(100)) => {}
                        }
                    }
                }
            }
        })
    }

    /// One tunnel: the request, the checks, the answer, then the bytes both ways.
    async fn tunnel(&self, mut stream: Box<dyn Stream>) {
        let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
            Ok(Ok(head)) => head,
            Ok(Err(why)) => return answer(&mut stream, "400 Bad Request", &why.to_string(), &[]).await,
            Err(_) => return answer(&mut stream, "408 Request Timeout", "no request within 10 s", &[]).await,
        };
        if let Some(expected) = &self.credential {
            let presented = head.proxy_authorization.as_deref().unwrap_or_default();
            if !crate::base::auth::tokens_equal(expected, presented) {
                tracing::warn!(principal = %self.principal, "a tunnel request without the right credential was refused");
                let challenge = [("Proxy-Authenticate", "Basic realm=\"baaaht\"")];
                return answer(&mut stream, "407 Proxy Authentication Required", "wrong proxy credential", &challenge)
                    .await;
            }
        }
        let (host, port) = (head.host, head.port);
        let record = self.record.clone().at_now().detail("host", host.as_str()).detail("port", port);
        if !self.reach.allows(&host, port) {
            let why = format!("{host}:{port} is not a host {} needs ({})", self.who, self.reach.describe());
            tracing::warn!(principal = %self.principal, %why, "a tunnel was refused");
            self.note_problem(&why);
            self.audit.record(Record { outcome: "refused".into(), ..record }.detail("reason", why.as_str()));
            return answer(&mut stream, "403 Forbidden", &why, &[]).await;
        }
        let mut upstream = match self.web.connect_checked(&host, port).await {
            Ok(upstream) => upstream,
            Err(error) => {
                let outcome = if error.is_refusal() { "refused" } else { "failed" };
                let why = error.to_string();
                tracing::warn!(principal = %self.principal, %why, "a tunnel was not opened");
                self.note_problem(&why);
                self.audit.record(Record { outcome: outcome.into(), ..record }.detail("reason", why.as_str()));
                let status = if error.is_refusal() { "403 Forbidden" } else { "502 Bad Gateway" };
                return answer(&mut stream, status, &why, &[]).await;
            }
        };
        self.audit.record(Record { outcome: "allowed".into(), ..record });
        if stream.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
            return;
        }
        // silent-ok: either end hanging up ends the tunnel.
        let _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream).await;
    }
}

/// What a CONNECT request asked for.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    host: String,
    port: u16,
    proxy_authorization: Option<String>,
}

/// Why a CONNECT request's head is not one (answered `400 Bad Request`).
#[derive(Debug, thiserror::Error)]
enum HeadError {
    #[error(transparent)]
    Read(#[from] std::io::Error),
    #[error("the request head ended early or is longer than 8 KiB")]
    Cut,
    #[error("expected `CONNECT host:port HTTP/1.1`, got `{line}`")]
    NotConnect { line: String },
    #[error("`{authority}` is not host:port")]
    NotHostPort { authority: String },
}

/// Reads `CONNECT host:port HTTP/1.1` and the head after it.
async fn read_head(stream: &mut (impl AsyncRead + Unpin)) -> Result<Head, HeadError> {
    use tokio::io::AsyncReadExt as _;
    // One byte at a time, at most MAX_HEAD: nothing past the head may be taken from the tunnel.
    let mut reader = BufReader::with_capacity(1, stream.take(MAX_HEAD as u64));
    let mut request_line = String::new();
    reader.read_line(&mut request_line).await?;
    let mut proxy_authorization = None;
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).await?;
        if line == "\r\n" || line == "\n" {
            break;
        }
        if n == 0 || !line.ends_with('\n') {
            return Err(HeadError::Cut);
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.trim().eq_ignore_ascii_case("proxy-authorization") {
                proxy_authorization = Some(value.trim().to_string());
            }
        }
    }
    let mut parts = request_line.split_whitespace();
    let (Some("CONNECT"), Some(authority)) = (parts.next(), parts.next()) else {
        return Err(HeadError::NotConnect { line: request_line.trim_end().to_string() });
    };
    match crate::net::egress::filter::split_host_port(authority) {
        Some((host, Some(port))) if !host.is_empty() && port != 0 => {
            Ok(Head { host: host.to_ascii_lowercase(), port, proxy_authorization })
        }
        _ => Err(HeadError::NotHostPort { authority: authority.to_string() }),
    }
}

async fn answer(stream: &mut (impl AsyncWrite + Unpin), status: &str, why: &str, headers: &[(&str, &str)]) {
    let body = format!("{why}\n");
    let extra: String = headers.iter().map(|(name, value)| format!("{name}: {value}\r\n")).collect();
    let head =
        format!("HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{extra}\r\n", body.len());
    // silent-ok: the client may be gone; the refusal is logged and audited.
    let _ = stream.write_all(format!("{head}{body}").as_bytes()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn heads_are_read_with_their_credential_and_bad_ones_refused() {
        let read = |text: &'static str| async move { read_head(&mut text.as_bytes()).await };
        assert_eq!(
            read("CONNECT Example.com:443 HTTP/1.1\r\nHost: example.com\r\nProxy-Authorization: Basic eDp5\r\n\r\n")
                .await
                .expect("a head"),
            Head { host: "example.com".into(), port: 443, proxy_authorization: Some("Basic eDp5".into()) }
        );
        assert_eq!(read("CONNECT [::1]:80 HTTP/1.1\r\n\r\n").await.expect("a head").port, 80);
        let get = read("GET / HTTP/1.1\r\n\r\n").await.expect_err("not a CONNECT");
        assert_eq!(get.to_string(), "expected `CONNECT host:port HTTP/1.1`, got `GET / HTTP/1.1`");
        let no_port = read("CONNECT example.com HTTP/1.1\r\n\r\n").await.expect_err("no port");
        assert!(matches!(no_port, HeadError::NotHostPort { .. }), "{no_port}");
        let cut = read("CONNECT example.com:443 HTTP/1.1\r\nHost: x").await.expect_err("cut");
        assert!(matches!(cut, HeadError::Cut), "{cut}");
    }

    #[test]
    fn reach_lists_hosts_or_lets_the_filter_decide() {
        let listed = Reach::Listed(vec!["slack.com:443".into(), "*.slack.com:443".into()]);
        assert!(listed.allows("files.slack.com", 443) && !listed.allows("slack.com", 80));
        assert!(Reach::AnyHost.allows("example.com", 8443));
    }
}
