//! The edge (DESIGN.md §10.2): what every connection a container's own proxy opens (a tool
//! command's, an MCP server's) passes on its way out, once the relay has allowed and connected
//! it ([`Crossing`], the relay's [`Between`]).
//!
//! - **The name it uses is the name it was allowed for.** A rule names a host; the connection
//!   goes to that host's address, which may serve many names (a CDN). TLS must name the host
//!   in its ClientHello (SNI, read with rustls); each HTTP request must name it in exactly one
//!   `Host` header (and in its URL, in absolute form), every request of a kept-alive
//!   connection alike. Anything else — another name, none, a protocol that is neither TLS nor
//!   HTTP/1, a CONNECT or an upgrade inside the tunnel — is refused with a sentence and audited.
//! - **Credentials at the edge.** For a host a secret is bound to (`egress::credentials`), the
//!   daemon terminates the command's TLS with a certificate of its own authority
//!   (`egress::authority`), connects onward with full verification, and in each request puts
//!   the secret's value in place of its placeholder: in a credential header, inside an
//!   `Authorization: Basic` (as git sends it). A placeholder on its way anywhere else is
//!   refused and audited.
//! - **No secret value either way.** In a tool command's connection the edge reads (plain
//!   HTTP, and TLS it terminated), the store's values in every form they travel in
//!   (`redact::Known`: raw, hex, base64 at every alignment, percent, JSON) are refused in a
//!   request's URL and headers, blotted in its body, and blotted in the answer's headers and
//!   body as it streams (same length, so its framing holds), across chunk boundaries; answers
//!   are asked for uncompressed, and a compressed one is refused, since it cannot be read.
//!   TLS to a host no secret is bound to is not opened: nothing of the store goes in there.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context as TaskContext, Poll};

use base64::Engine as _;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::{Bytes, Frame, Incoming};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, DuplexStream, ReadBuf};
use tokio::sync::oneshot;
use zeroize::Zeroizing;

use crate::base::auth::{Caller, Context};
use crate::base::datadir::DataDir;
use crate::guard::audit::{Audit, Record};
use crate::guard::redact::{Known, Scrubbing, Shield};
use crate::guard::secrets::Handout;
use crate::net::egress::authority::Authority;
use crate::net::egress::credentials::{self, Binding, Placeholders};
use crate::net::egress::refusal::{EdgeRefusal, HelloRefusal, Misplaced, OnwardError, OnwardTlsError};
use crate::net::egress::relay::{Between, Handed, Taken};

pub use crate::net::egress::authority::TRUST_IN_CONTAINER;

mod exchange;
use exchange::Exchange;

/// The daemon's edge: its authority, the sessions' placeholders, and what the values are
/// read from.
pub struct Edge {
    pub authority: Arc<Authority>,
    pub placeholders: Placeholders,
    data_dir: DataDir,
    secrets: Handout,
}

impl std::fmt::Debug for Edge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Edge").field("authority", &self.authority).finish_non_exhaustive()
    }
}

impl Edge {
    pub fn new(authority: Arc<Authority>, data_dir: DataDir, secrets: Handout) -> Edge {
        Edge { authority, placeholders: Placeholders::default(), data_dir, secrets }
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

/// A session's credentials at the edge: whose connections they are, for the secrets' rules.
#[derive(Clone)]
pub struct Swap {
    pub edge: Arc<Edge>,
    pub context: Context,
    pub session: String,
    pub caller: Caller,
}

/// One container's connections at the edge.
#[derive(Clone)]
pub struct Crossing {
    /// Where a tool command's placeholders are swapped (none for an MCP server, whose secrets
    /// are in its own environment, or when the authority could not be made).
    pub swap: Option<Swap>,
    /// The store's values, which never cross (a tool command's connections; none for an MCP
    /// server, whose own secrets travel in its requests).
    pub values: Option<Arc<Shield>>,
    /// Whether a protocol that is neither TLS nor HTTP passes (an MCP server's: a database, a
    /// mail server; it names no host to check), or is refused (a tool command's).
    pub other_protocols: bool,
    pub audit: Audit,
    /// The base of each audit record.
    pub record: Record,
}

/// What one connection carries through the edge: the session's placeholders (placeholder →
/// name) and the bindings that cover its host.
struct Plan {
    made: HashMap<String, String>,
    bound: Vec<Binding>,
}

/// A connection's stream, whatever it is.
trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

type Body = BoxBody<Bytes, hyper::Error>;

/// What records the names of secrets blotted somewhere in a connection.
type Report = Arc<dyn Fn(&[String]) + Send + Sync>;

/// The daemon's roots, offering HTTP/1.1 only (what the edge speaks). Read once: `tls_config`
/// keeps the roots, or why there are none.
fn onward_tls() -> Result<Arc<rustls::ClientConfig>, OnwardTlsError> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    if let Some(config) = CONFIG.get() {
        return Ok(config.clone());
    }
    let mut config = (*baaaht_llm::provider::tls_config().map_err(OnwardTlsError::Roots)?).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(CONFIG.get_or_init(|| Arc::new(config)).clone())
}

/// Chunks of bytes buffered between the relay and the edge.
const BETWEEN_BUFFER: usize = 128 * 1024;
/// What a connection passed on as it is reads at once, each way (tokio's default is 8 KiB: a
/// download was a system call and a tunnel message every 8 KiB).
const PASS_BUFFER: usize = 64 * 1024;
/// How long the edge waits for a client's first bytes (a protocol whose server speaks first is
/// not offered: nothing could say which name it uses).
const FIRST_BYTES: std::time::Duration = std::time::Duration::from_secs(60);
/// The largest TLS ClientHello read (post-quantum key shares make them a few KiB).
const MOST_HELLO: usize = 64 * 1024;
/// The request headers a placeholder is swapped in: where APIs take a token. Anywhere else (the
/// URL, a header a server may echo back) it is refused.
const CREDENTIAL_HEADERS: &[&str] = &["authorization", "x-api-key", "private-token", "x-auth-token"];

#[async_trait::async_trait]
impl Between for Crossing {
    async fn take(
        &self,
        host: &str,
        port: u16,
        far: tokio::net::TcpStream,
        tracker: &tokio_util::task::TaskTracker,
    ) -> Taken {
        let (near, edge_side) = tokio::io::duplex(BETWEEN_BUFFER);
        let (verdict, clean) = oneshot::channel();
        let (hand, handed) = oneshot::channel();
        let carried = self.clone().carry(edge_side, far, (host.to_string(), port), hand);
        tracker.spawn(async move {
            // silent-ok: the relay may have gone first.
            let _ = verdict.send(carried.await);
        });
        Taken { near, clean, handed }
    }
}

/// `host` as compared: lower case, without a final dot or an IPv6 address's brackets.
fn plain(host: &str) -> String {
    host.trim_start_matches('[').trim_end_matches(']').trim_end_matches('.').to_ascii_lowercase()
}

/// Bytes read already, then the rest of the stream: what a peeked-at connection is carried on.
struct Replayed<T> {
    head: Vec<u8>,
    at: usize,
    inner: T,
}

impl<T: AsyncRead + Unpin> AsyncRead for Replayed<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.at < self.head.len() {
            let n = (self.head.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.head[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Replayed<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The command's side of a connection as the edge's HTTP server reads it. After each flush it
/// looks at the read side once (keeping what it finds, waking the server when there is
/// something): a client that stopped writing while its request was being answered would
/// otherwise never be noticed, as the server (hyper, half-closed connections allowed) does not
/// read again by itself then, and the connection would wait for ever.
struct Watched<T> {
    inner: T,
    kept: Vec<u8>,
    ended: bool,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.kept.is_empty() {
            let n = self.kept.len().min(buf.remaining());
            buf.put_slice(&self.kept[..n]);
            self.kept.drain(..n);
            return Poll::Ready(Ok(()));
        }
        if self.ended {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        if !self.ended && self.kept.is_empty() {
            let mut looked = [0u8; 4096];
            let mut buf = ReadBuf::new(&mut looked);
            match Pin::new(&mut self.inner).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) => {
                    match buf.filled() {
                        [] => self.ended = true,
                        read => self.kept.extend_from_slice(read),
                    }
                    cx.waker().wake_by_ref();
                }
                Poll::Ready(Err(_)) => {
                    // silent-ok: the next read meets it again.
                    cx.waker().wake_by_ref();
                }
                // Waiting: its end wakes the server.
                Poll::Pending => {}
            }
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The name a TLS ClientHello at the start of `head` gives (SNI), reading more of `near` into
/// `head` until the hello is whole; why not, when it is not a hello.
async fn client_hello(head: &mut Vec<u8>, near: &mut (impl AsyncRead + Unpin)) -> Result<Option<String>, HelloRefusal> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut fed = 0;
    loop {
        while fed < head.len() {
            match acceptor.read_tls(&mut &head[fed..]) {
                Ok(0) => break,
                Ok(n) => fed += n,
                Err(error) => return Err(HelloRefusal::NotTls { error }),
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => return Ok(accepted.client_hello().server_name().map(str::to_string)),
            Ok(None) => {}
            Err((error, _alert)) => return Err(HelloRefusal::Unreadable { error }),
        }
        if head.len() > MOST_HELLO {
            return Err(HelloRefusal::TooLong { most: MOST_HELLO });
        }
        let mut more = [0u8; 8192];
        let n = match tokio::time::timeout(FIRST_BYTES, near.read(&mut more)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return Err(HelloRefusal::Stopped),
        };
        head.extend_from_slice(&more[..n]);
    }
}

impl Crossing {
    /// Refuses (audits and logs) a connection to `host:port` for `why`; false: the connection did
    /// not end cleanly.
    fn refuse(&self, (host, port): (&str, u16), why: &str) -> bool {
        let record = self.record.clone().at_now().detail("host", host).detail("port", port);
        self.audit.record(Record { outcome: "refused".into(), ..record }.detail("reason", why));
        tracing::warn!(%host, port, %why, "the edge refused a connection");
        false
    }

    /// What a connection to `host:port` carries through: none when the session holds no
    /// placeholder.
    async fn plan(&self, host: &str, port: u16) -> Option<Plan> {
        let swap = self.swap.as_ref()?;
        let made = swap.edge.placeholders.made(&swap.session);
        if made.is_empty() {
            return None;
        }
        let (data_dir, context) = (swap.edge.data_dir.clone(), swap.context.clone());
        let bindings = tokio::task::spawn_blocking(move || credentials::bindings(&data_dir, &context)).await.ok()?;
        let bound = bindings.into_iter().filter(|binding| binding.covers(host, port)).collect();
        Some(Plan { made, bound })
    }

    /// Carries one connection between the command (`near`) and the far end (`far`, connected
    /// and checked): TLS passes on when it names `host` (terminated and its requests read when
    /// a secret is bound to `host`); anything else is read as HTTP/1, request by request. True
    /// when it ended cleanly: each side closed, nothing failed or was refused.
    async fn carry(
        self,
        mut near: DuplexStream,
        far: tokio::net::TcpStream,
        (host, port): (String, u16),
        hand: oneshot::Sender<Handed>,
    ) -> bool {
        let mut head = vec![0u8; 8192];
        let mut peeked = [0u8; 1];
        // Who speaks first: the client (TLS, HTTP), or the server (a protocol that is neither).
        let first = tokio::select! {
            read = near.read(&mut head) => Some(read),
            _ = far.peek(&mut peeked) => None,
            () = tokio::time::sleep(FIRST_BYTES) => Some(Err(std::io::ErrorKind::TimedOut.into())),
        };
        let n = match first {
            Some(Ok(n)) if n > 0 => n,
            Some(Ok(_)) => return true,
            None if self.other_protocols => return pass(near, far, vec![], hand).await,
            None | Some(Err(_)) => {
                let why = format!(
                    "the client sent nothing first (the server spoke, or {}s passed): only HTTP and HTTPS go out, \
                     and the client speaks first in both",
                    FIRST_BYTES.as_secs()
                );
                return self.refuse((&host, port), &why);
            }
        };
        head.truncate(n);
        let tls = head[0] == 0x16;
        if !tls && self.other_protocols {
            // What is neither TLS nor HTTP names no host to check: it passes as it is.
            match http_request_line(&mut head, &mut near).await {
                Some(true) => {}
                Some(false) => return pass(near, far, head, hand).await,
                None => return true,
            }
        }
        if tls {
            let named = match client_hello(&mut head, &mut near).await {
                Ok(named) => named,
                Err(why) => {
                    return self
                        .refuse((&host, port), &format!("a connection to {host}:{port} that began as TLS: {why}"))
                }
            };
            let address = host.parse::<std::net::IpAddr>().is_ok()
                || host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().is_ok();
            match named {
                Some(name) if plain(&name) == plain(&host) => {}
                None if address => {}
                None => {
                    let why = format!("a TLS connection to {host} must name it (SNI); this one names no host");
                    return self.refuse((&host, port), &why);
                }
                Some(name) => {
                    let why = format!(
                        "a TLS connection to {host} named {name} (SNI): a connection reaches only the host it was \
                         allowed for, whatever else shares its address"
                    );
                    return self.refuse((&host, port), &why);
                }
            }
        }
        let plan = self.plan(&host, port).await;
        let bound = plan.as_ref().is_some_and(|plan| !plan.bound.is_empty());
        if tls && !bound {
            // TLS this edge does not open: the bytes pass as they are, the hello first.
            return pass(near, far, head, hand).await;
        }
        let plan = plan.unwrap_or(Plan { made: HashMap::new(), bound: vec![] });
        let near = Replayed { head, at: 0, inner: near };
        let exchange =
            Arc::new(Exchange { crossing: self, host: host.clone(), port, plan, tls, values: Mutex::default() });
        if !tls {
            return exchange.serve(near, Ok(far)).await;
        }
        let accepted = match exchange.crossing.swap.as_ref().map(|swap| swap.edge.authority.server_for(&host)) {
            Some(Ok(config)) => tokio_rustls::TlsAcceptor::from(config).accept(near).await,
            Some(Err(why)) => {
                tracing::warn!(%host, %why, "no certificate for a bound host");
                return false;
            }
            None => return false,
        };
        let Ok(near) = accepted else { return false };
        let onward = async {
            let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(OnwardTlsError::Name)?;
            tokio_rustls::TlsConnector::from(onward_tls()?).connect(name, far).await.map_err(OnwardTlsError::Handshake)
        };
        let far = onward.await.map_err(|why| OnwardError::Unverified { host: host.clone(), why });
        exchange.serve(near, far).await
    }
}

/// Passes the connection on as it is, `head` (read already) first: handed to the relay, which
/// carries it on without the edge between (two copies and a task fewer a chunk; what the
/// command sent that the edge had not read goes first), or copied here when no relay takes it.
/// True when both ends closed cleanly (said by the relay once it is handed).
async fn pass(
    near: DuplexStream,
    mut far: tokio::net::TcpStream,
    head: Vec<u8>,
    hand: oneshot::Sender<Handed>,
) -> bool {
    // Either end may hang up; the relay records the connection, and a failure resets the client.
    if far.write_all(&head).await.is_err() {
        return false;
    }
    let Err(Handed { mut far, mut near }) = hand.send(Handed { far, near }) else { return true };
    tokio::io::copy_bidirectional_with_sizes(&mut near, &mut far, PASS_BUFFER, PASS_BUFFER).await.is_ok()
}

/// Whether `head` begins with an HTTP/1 request line (`METHOD TARGET HTTP/1.x`), reading more of
/// `near` into it until its first line is whole; none when the client stops first.
async fn http_request_line(head: &mut Vec<u8>, near: &mut (impl AsyncRead + Unpin)) -> Option<bool> {
    loop {
        if let Some(end) = head.iter().position(|byte| *byte == b'\n') {
            let line = String::from_utf8_lossy(&head[..end]);
            let words: Vec<&str> = line.trim_end_matches('\r').split(' ').collect();
            let token = |word: &str| !word.is_empty() && word.bytes().all(|byte| byte.is_ascii_graphic());
            return Some(words.len() == 3 && token(words[0]) && token(words[1]) && words[2].starts_with("HTTP/1."));
        }
        // A request line is short; this long without one, it is something else.
        if head.len() > 8192 || !head.iter().all(|byte| byte.is_ascii_graphic() || *byte == b' ' || *byte == b'\r') {
            return Some(false);
        }
        let mut more = [0u8; 4096];
        match tokio::time::timeout(FIRST_BYTES, near.read(&mut more)).await {
            Ok(Ok(n)) if n > 0 => head.extend_from_slice(&more[..n]),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback server that keeps its connections: each request answered with its request
    /// line and `body` (what an echoing API answers), the next one read on.
    async fn keep_alive(body: &'static str) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                tokio::spawn(async move {
                    use tokio::io::AsyncBufReadExt as _;
                    let mut stream = tokio::io::BufReader::new(stream);
                    loop {
                        let mut first = String::new();
                        if stream.read_line(&mut first).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let mut line = String::new();
                        while stream.read_line(&mut line).await.is_ok_and(|n| n > 2) {
                            line.clear();
                        }
                        let text = format!("arrived: {} {body}", first.trim());
                        let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{text}", text.len());
                        if stream.get_mut().write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    fn crossing(dir: &std::path::Path, values: Option<Arc<Shield>>) -> Crossing {
        let audit = Audit::open(dir.join("audit"), false, 1, Arc::new(crate::base::metrics::Metrics::off()));
        let record = Record::new(crate::guard::audit::Kind::Egress, "test", "");
        Crossing { swap: None, values, other_protocols: false, audit, record }
    }

    /// What comes back through the edge for `sent` (the client then stops writing).
    async fn through(crossing: &Crossing, port: u16, pieces: &[&[u8]]) -> String {
        through_ended(crossing, port, pieces).await.0
    }

    /// What comes back through the edge for `sent`, and whether the edge said it failed.
    async fn through_ended(crossing: &Crossing, port: u16, pieces: &[&[u8]]) -> (String, bool) {
        let far = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
        let tracker = tokio_util::task::TaskTracker::new();
        let Taken { mut near, clean, .. } = crossing.take("127.0.0.1", port, far, &tracker).await;
        for piece in pieces {
            near.write_all(piece).await.expect("send");
        }
        near.shutdown().await.expect("stop writing");
        let mut got = vec![];
        tokio::time::timeout(std::time::Duration::from_secs(10), near.read_to_end(&mut got))
            .await
            .expect("an answer within 10 s")
            .expect("read");
        (String::from_utf8_lossy(&got).into_owned(), !clean.await.unwrap_or(false))
    }

    #[tokio::test]
    async fn an_answer_the_far_end_cuts_short_is_a_failure_and_a_whole_one_is_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let crossing = crossing(dir.path(), None);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        tokio::spawn(async move {
            for cut in [true, false] {
                let Ok((mut stream, _)) = listener.accept().await else { return };
                let mut head = [0u8; 1024];
                // silent-ok: the request's head is all the test sends.
                let _ = stream.read(&mut head).await;
                let answer: &[u8] = if cut {
                    b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten b"
                } else {
                    b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nall ten by"
                };
                stream.write_all(answer).await.expect("answer");
                if cut {
                    stream.set_zero_linger().expect("linger");
                }
            }
        });
        let request = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
        let (said, failed) = through_ended(&crossing, port, &[request.as_bytes()]).await;
        assert!(failed, "a cut answer: {said}");
        let (said, failed) = through_ended(&crossing, port, &[request.as_bytes()]).await;
        assert!(!failed && said.ends_with("all ten by"), "a whole answer: {said}");
    }

    #[tokio::test]
    async fn every_request_must_name_the_host_it_was_allowed_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let crossing = crossing(dir.path(), None);
        let port = keep_alive("ok").await;
        let host = format!("127.0.0.1:{port}");
        let good = format!("GET /first HTTP/1.1\r\nHost: {host}\r\n\r\n");
        for _ in 0..20 {
            let said = through(&crossing, port, &[good.as_bytes()]).await;
            assert!(said.contains("arrived: GET /first HTTP/1.1 ok"), "{said}");
        }
        for request in [
            "GET /x HTTP/1.1\r\nHost: hidden.example\r\n\r\n".to_string(),
            format!("GET /x HTTP/1.1\r\nHost: {host}\r\nHost: hidden.example\r\n\r\n"),
            format!("GET http://hidden.example/x HTTP/1.1\r\nHost: {host}\r\n\r\n"),
            format!("GET /x HTTP/1.1\r\nHost: user@{host}\r\n\r\n"),
            "GET /x HTTP/1.0\r\n\r\n".to_string(),
        ] {
            let said = through(&crossing, port, &[request.as_bytes()]).await;
            assert!(said.contains(" 403 Forbidden") && said.contains("must name that host once"), "{request}: {said}");
        }
        let kept =
            format!("GET /one HTTP/1.1\r\nHost: {host}\r\n\r\nGET /two HTTP/1.1\r\nHost: hidden.example\r\n\r\n");
        let said = through(&crossing, port, &[kept.as_bytes()]).await;
        assert!(said.contains("arrived: GET /one") && said.contains("must name that host once"), "{said}");
        assert!(!said.contains("/two"), "{said}");
        let tunnel = format!("CONNECT hidden.example:443 HTTP/1.1\r\nHost: {host}\r\n\r\n");
        assert!(through(&crossing, port, &[tunnel.as_bytes()]).await.contains("a CONNECT inside the connection"));
        // Slowly, in pieces, in lower case: read the same way.
        let slow =
            through(&crossing, port, &[b"g", format!("et /slow HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes()]).await;
        assert!(slow.contains("arrived: get /slow"), "{slow}");
        // A placeholder in plain HTTP, however spelt.
        for method in ["GET", "get", "PURGE"] {
            let leak = format!("{method} /leak HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer baaaht-placeholder-0123456789abcdef0123456789abcdef\r\n\r\n");
            let said = through(&crossing, port, &[leak.as_bytes()]).await;
            assert!(said.contains(" 403 ") && !said.contains("arrived"), "{method}: {said}");
        }
        // Not HTTP at all: nothing reaches the server.
        assert!(!through(&crossing, port, &[b"\x00\x01binary\r\n\r\n"]).await.contains("arrived"));
    }

    #[tokio::test]
    async fn an_mcp_servers_other_protocols_pass_and_its_http_is_read_as_strictly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mcp = Crossing { other_protocols: true, ..crossing(dir.path(), None) };
        // A server that speaks first, then echoes a line.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let raw = listener.local_addr().expect("address").port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    use tokio::io::AsyncBufReadExt as _;
                    let _ = stream.write_all(b"220 hello\r\n").await;
                    let mut reader = tokio::io::BufReader::new(stream);
                    let mut line = String::new();
                    let _ = reader.read_line(&mut line).await;
                    let _ = reader.get_mut().write_all(format!("echo {line}").as_bytes()).await;
                });
            }
        });
        let said = through(&mcp, raw, &[b"ping\r\n"]).await;
        assert_eq!(said, "220 hello\r\necho ping\r\n");
        let port = keep_alive("ok").await;
        let fronted = through(&mcp, port, &[b"GET /x HTTP/1.1\r\nHost: hidden.example\r\n\r\n"]).await;
        assert!(fronted.contains(" 403 ") && !fronted.contains("arrived"), "{fronted}");
        // A tool command's: the server speaking first is refused.
        let tools = crossing(dir.path(), None);
        assert_eq!(through(&tools, raw, &[]).await, "");
    }

    #[tokio::test]
    async fn a_secrets_value_never_crosses_either_way() {
        const VALUE: &str = "ghp_Secr3tValue-only-the-store-knows";
        let dir = tempfile::tempdir().expect("tempdir");
        let shield = Arc::new(Shield::with_values(&[("GITHUB_TOKEN", VALUE)]));
        let crossing = crossing(dir.path(), Some(shield));
        let port = keep_alive(
            "Bearer ghp_Secr3tValue-only-the-store-knows and Z2hwX1NlY3IzdFZhbHVlLW9ubHktdGhlLXN0b3JlLWtub3dz",
        )
        .await;
        let host = format!("127.0.0.1:{port}");
        let asked = format!("GET /echo HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let said = through(&crossing, port, &[asked.as_bytes()]).await;
        assert!(said.contains("arrived: GET /echo HTTP/1.1 Bearer ****") && !said.contains(VALUE), "{said}");
        assert!(!said.contains("LW9ubHktdGhlLXN0b3JlLWtub3dz"), "base64 too: {said}");
        // A short answer, shorter than what is kept back to find a value across chunks.
        let short = keep_alive("").await;
        for _ in 0..20 {
            let asked = format!("GET /s HTTP/1.1\r\nHost: 127.0.0.1:{short}\r\n\r\n");
            let said = through(&crossing, short, &[asked.as_bytes()]).await;
            assert!(said.contains("arrived: GET /s HTTP/1.1"), "{said}");
        }
        let carrying = format!("GET /leak?t={VALUE} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let said = through(&crossing, port, &[carrying.as_bytes()]).await;
        assert!(said.starts_with("HTTP/1.1 403") && said.contains("carries the value of GITHUB_TOKEN"), "{said}");
    }
}
