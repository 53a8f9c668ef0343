//! A container's egress proxy (an MCP relay's, a tool runner's): the container has no network;
//! this listens on its loopback for HTTP `CONNECT host:port` (https) and absolute-form plain
//! HTTP (`GET http://host/…`), and opens each connection as a tunnel over the container's
//! stream to the daemon, which decides whether it may be made and makes it. Bytes then go both
//! ways over the stream until either side closes. Anything else is answered with a sentence.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baaaht_proto::egress::{byte_queue, Acks, ByteReceiver, ByteSender, Window, TUNNEL_CHUNK, TUNNEL_WINDOW};
use baaaht_proto::v1;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// What a tunnel sends up the container's stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Tunneled {
    Open(v1::EgressOpen),
    Data(v1::EgressData),
    Close(v1::EgressClose),
    /// Bytes of the daemon's written on to the client.
    Ack(v1::EgressAck),
}

/// Where a container's tunnels send up: its stream's sender, and how a [`Tunneled`] is put in
/// that stream's message (`McpUp`, `RunnerMessage`).
pub struct Upstream<M> {
    pub sender: mpsc::Sender<M>,
    pub wrap: fn(Tunneled) -> M,
}

impl<M> Clone for Upstream<M> {
    fn clone(&self) -> Self {
        Upstream { sender: self.sender.clone(), wrap: self.wrap }
    }
}

impl<M> Upstream<M> {
    /// Sends `tunneled` up; false when the stream is gone.
    async fn send(&self, tunneled: Tunneled) -> bool {
        self.sender.send((self.wrap)(tunneled)).await.is_ok()
    }

    pub async fn close(&self, id: u64, write_only: bool) -> bool {
        self.send(Tunneled::Close(v1::EgressClose { id, write_only })).await
    }
}

/// A container's tunnels through the daemon, by id.
#[derive(Clone, Default)]
pub struct Tunnels(Arc<Mutex<TunnelState>>);

impl std::fmt::Debug for Tunnels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnels").field("open", &self.lock().open.len()).finish()
    }
}

#[derive(Default)]
struct TunnelState {
    next: u64,
    /// What the daemon refused since a command last asked (`host:port: why`), at most
    /// [`MOST_REFUSALS`]: a command's client shows only a status, so its tool result says why.
    refused: Vec<String>,
    /// A tunnel waiting for the daemon's answer to its open.
    pending: HashMap<u64, oneshot::Sender<String>>,
    open: HashMap<u64, Open>,
}

/// An open tunnel: its bytes from the daemon (none once the daemon has no more), the window of
/// what it sent up, what tears it down, and what says the daemon's end is gone (the client gets
/// what came before it, then a reset).
struct Open {
    bytes: Option<ByteSender>,
    sent: Arc<Window>,
    aborted: CancellationToken,
    gone: CancellationToken,
}

/// A tunnel just begun: its id, the daemon's answer to come, its bytes, the window of what it
/// sends up, what tears it down and what says the daemon's end is gone.
struct Begun {
    id: u64,
    answered: oneshot::Receiver<String>,
    received: ByteReceiver,
    sent: Arc<Window>,
    aborted: CancellationToken,
    gone: CancellationToken,
}

/// The most tunnels a container may have open at once.
const MAX_TUNNELS: usize = 32;
/// The longest request head a client may send the egress proxy.
const MAX_HEAD: usize = 16 * 1024;
/// How long a reset waits for what was written to leave the socket.
const RESET_WAIT: Duration = Duration::from_secs(30);
/// How long a tunnel's end waits for the daemon to write on what the client sent last.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an open waits for the daemon: longer than an approval asked in chat may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(150);

/// The most refusals kept for the tool result of one command.
const MOST_REFUSALS: usize = 10;

impl Tunnels {
    /// The refusals since the last call, and none kept after.
    pub fn take_refused(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().refused)
    }

    fn refused(&self, host: &str, port: u16, why: &str) {
        let mut state = self.lock();
        if state.refused.len() < MOST_REFUSALS {
            state.refused.push(format!("{host}:{port}: {why}"));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TunnelState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new tunnel; none when [`MAX_TUNNELS`] are open.
    fn begin(&self) -> Option<Begun> {
        let (answer, answered) = oneshot::channel();
        let (bytes, received) = byte_queue(TUNNEL_WINDOW);
        let sent = Window::new(TUNNEL_WINDOW);
        let (aborted, gone) = (CancellationToken::new(), CancellationToken::new());
        let mut state = self.lock();
        if state.open.len() >= MAX_TUNNELS {
            return None;
        }
        state.next += 1;
        let id = state.next;
        state.pending.insert(id, answer);
        state
            .open
            .insert(id, Open { bytes: Some(bytes), sent: sent.clone(), aborted: aborted.clone(), gone: gone.clone() });
        Some(Begun { id, answered, received, sent, aborted, gone })
    }

    /// The daemon's answer to an open.
    pub fn opened(&self, opened: v1::EgressOpened) {
        if let Some(answer) = self.lock().pending.remove(&opened.id) {
            // silent-ok: the client may have given up.
            let _ = answer.send(opened.refused);
        }
    }

    /// Bytes from the daemon for tunnel `id`. The daemon keeps within the tunnel's window, so
    /// they always fit; a tunnel they do not fit is torn down (the answer is whether it was).
    pub fn data(&self, data: v1::EgressData) -> bool {
        let mut state = self.lock();
        let id = data.id;
        let Some(Open { bytes: Some(bytes), aborted, .. }) = state.open.get(&id) else { return false };
        if bytes.try_send(data.data) {
            return false;
        }
        aborted.cancel();
        state.open.remove(&id);
        eprintln!("baaaht: tunnel {id}: the daemon sent past the tunnel's window; the connection was reset");
        true
    }

    /// The daemon wrote on `ack.bytes` of what tunnel `ack.id` sent up: room for as many more.
    pub fn acked(&self, ack: v1::EgressAck) {
        if let Some(open) = self.lock().open.get(&ack.id) {
            open.sent.acked(ack.bytes);
        }
    }

    /// The daemon's end of tunnel `id`: it has no more bytes (`write_only`), or it is gone (its
    /// far end failed). Either way the client still gets the bytes that came before (they wait in
    /// the tunnel's buffer); then a clean end, or a reset when it is gone.
    pub fn closed(&self, close: v1::EgressClose) {
        let mut state = self.lock();
        state.pending.remove(&close.id);
        if close.write_only {
            if let Some(open) = state.open.get_mut(&close.id) {
                open.bytes.take();
            }
        } else if let Some(open) = state.open.remove(&close.id) {
            open.gone.cancel();
        }
    }

    fn forget(&self, id: u64) {
        let mut state = self.lock();
        state.pending.remove(&id);
        state.open.remove(&id);
    }
}

/// What the egress proxy tells the daemon each connection was asked by (a tool runner: the
/// call running); empty when the container knows no more than the daemon does.
pub type AskedBy = Arc<Mutex<String>>;

/// Whether a connection to `host:port` is one the container's work asked for (a browser's
/// pages); one that is not is refused here, the daemon never asked. Chromium's own traffic
/// (sign-in, time, updates) is not its pages', and no person should be asked about it.
pub type Admit =
    Arc<dyn Fn(String, u16) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> + Send + Sync>;

/// Opens the proxy on the container's loopback (a port of its choosing) and serves it until the
/// process ends; returns the port.
pub async fn listen<M: Send + 'static>(
    tunnels: Tunnels,
    upstream: Upstream<M>,
    asked_by: AskedBy,
    admit: Option<Admit>,
) -> Result<u16, String> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|error| format!("cannot open the egress proxy on the container's loopback: {error}"))?;
    let port = listener.local_addr().map_err(|error| error.to_string())?.port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let asked = asked_by.lock().unwrap_or_else(PoisonError::into_inner).clone();
            tokio::spawn(tunnel(stream, tunnels.clone(), upstream.clone(), asked, admit.clone()));
        }
    });
    Ok(port)
}

/// What a process in the container needs to take the proxy on `port`: the proxy variables
/// (curl, pip, Python's requests, Node with `NODE_USE_ENV_PROXY`), git's and npm's own
/// settings, and an ssh for git that says why it cannot be used.
pub fn proxy_env(port: u16) -> Vec<(&'static str, String)> {
    let proxy = format!("http://127.0.0.1:{port}");
    let mut env: Vec<(&'static str, String)> =
        ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
            .into_iter()
            .map(|name| (name, proxy.clone()))
            .collect();
    env.extend([
        ("NO_PROXY", String::new()),
        ("no_proxy", String::new()),
        // Node's own fetch takes the proxy variables only when asked to.
        ("NODE_USE_ENV_PROXY", "1".into()),
        ("npm_config_proxy", proxy.clone()),
        ("npm_config_https_proxy", proxy.clone()),
        ("PIP_PROXY", proxy.clone()),
        // git reads these as `git config http.proxy …`, whatever config files say.
        ("GIT_CONFIG_COUNT", "1".into()),
        ("GIT_CONFIG_KEY_0", "http.proxy".into()),
        ("GIT_CONFIG_VALUE_0", proxy),
        ("GIT_SSH_COMMAND", format!("f() {{ echo \"{NO_SSH}\" >&2; exit 128; }}; f")),
    ]);
    // The daemon's trust bundle (its roots and its own authority, for hosts a credential is
    // bound to) is mounted in place of the system's; programs with their own stores are
    // pointed at it too.
    env.extend(
        ["SSL_CERT_FILE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "REQUESTS_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS"]
            .map(|name| (name, TRUST.to_string())),
    );
    env
}

/// Where the daemon mounts what tool commands trust (the system's bundle on Debian).
pub const TRUST: &str = "/etc/ssl/certs/ca-certificates.crt";

/// What git over ssh (`git@host:owner/repo`) says here.
pub const NO_SSH: &str = "baaaht: this container reaches the network only over HTTP(S) through its proxy; ssh is not \
                          offered. Use the https URL (https://HOST/OWNER/REPO.git)";

/// One client connection: its CONNECT (or plain-HTTP request) is opened through the daemon,
/// which decides, and the bytes are relayed both ways; each side's end is passed on, and the
/// tunnel ends when both sides have ended or either tears it down.
async fn tunnel<M: Send + 'static>(
    mut stream: tokio::net::TcpStream,
    tunnels: Tunnels,
    upstream: Upstream<M>,
    asked_by: String,
    admit: Option<Admit>,
) {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        if head.len() > MAX_HEAD {
            return answer(&mut stream, "431 Request Header Fields Too Large", "the request head is too long").await;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    };
    // A CONNECT's tunnel begins once it is answered; a plain request is sent on, in origin
    // form, as the tunnel's first bytes.
    let (host, port, first, connect) = match (connect_target(&head[..end]), http_target(&head[..end])) {
        (Some((host, port)), _) => (host, port, head[end..].to_vec(), true),
        (None, Some((host, port, mut rewritten))) => {
            rewritten.extend_from_slice(&head[end..]);
            (host, port, rewritten, false)
        }
        (None, None) => {
            let why = "baaaht's egress proxy carries HTTP: CONNECT host:port for https, or a request for an \
                       http:// URL; other protocols are not offered";
            return answer(&mut stream, "405 Method Not Allowed", why).await;
        }
    };
    if let Some(admit) = admit {
        if !admit(host.clone(), port).await {
            return answer(&mut stream, "403 Forbidden", "no page asked for this host").await;
        }
    }
    let Some(Begun { id, answered, received: mut from_daemon, sent, aborted, gone }) = tunnels.begin() else {
        let why = format!("{MAX_TUNNELS} connections are open; close one first");
        return answer(&mut stream, "503 Service Unavailable", &why).await;
    };
    let open = v1::EgressOpen { id, host: host.clone(), port: u32::from(port), asked_by };
    if !upstream.send(Tunneled::Open(open)).await {
        return tunnels.forget(id);
    }
    match tokio::time::timeout(OPEN_TIMEOUT, answered).await {
        Ok(Ok(refused)) if refused.is_empty() => {}
        Ok(Ok(refused)) => {
            tunnels.forget(id);
            tunnels.refused(&host, port, &refused);
            return answer(&mut stream, "403 Forbidden", &refused).await;
        }
        _ => {
            tunnels.forget(id);
            upstream.close(id, false).await;
            return answer(&mut stream, "504 Gateway Timeout", "the daemon did not open the connection in time").await;
        }
    }
    if connect && stream.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
        tunnels.forget(id);
        upstream.close(id, false).await;
        return;
    }
    let (mut reader, mut writer) = stream.into_split();
    let outward = {
        let (upstream, sent) = (upstream.clone(), sent.clone());
        async move {
            sent.spend(first.len());
            if !first.is_empty() && !upstream.send(Tunneled::Data(v1::EgressData { id, data: first })).await {
                return;
            }
            let mut buffer = vec![0u8; TUNNEL_CHUNK];
            loop {
                // What the daemon has not written on yet holds the client back, not the stream.
                sent.room(TUNNEL_CHUNK).await;
                match reader.read(&mut buffer).await {
                    Ok(0) => {
                        // The client is done sending; its answer may still come.
                        upstream.close(id, true).await;
                        return;
                    }
                    Err(_) => return,
                    Ok(n) => {
                        sent.spend(n);
                        let data = v1::EgressData { id, data: buffer[..n].to_vec() };
                        if !upstream.send(Tunneled::Data(data)).await {
                            return;
                        }
                    }
                }
            }
        }
    };
    let inward = {
        let (upstream, aborted, gone) = (upstream.clone(), aborted.clone(), gone.clone());
        async move {
            let mut acks = Acks::default();
            let whole = loop {
                let bytes = tokio::select! {
                    bytes = from_daemon.recv() => bytes,
                    () = aborted.cancelled() => break false,
                };
                let Some(bytes) = bytes else { break !gone.is_cancelled() };
                let written = tokio::select! {
                    written = writer.write_all(&bytes) => written.is_ok(),
                    () = aborted.cancelled() => false,
                };
                if !written {
                    break false;
                }
                if let Some(n) = acks.wrote(bytes.len(), !from_daemon.is_empty()) {
                    upstream.send(Tunneled::Ack(v1::EgressAck { id, bytes: n })).await;
                }
            };
            if whole {
                // silent-ok: the client may be gone.
                let _ = writer.shutdown().await;
            } else {
                reset(writer).await;
            }
            whole
        }
    };
    // Nothing more goes out once the daemon's end is gone; what came before it still comes in.
    let outward = {
        let (gone, aborted) = (gone.clone(), aborted.clone());
        async move {
            tokio::select! {
                () = outward => {}
                () = gone.cancelled() => {}
                () = aborted.cancelled() => {}
            }
        }
    };
    let ((), whole) = tokio::join!(outward, inward);
    if whole {
        // The tunnel ends when what the client sent has reached the far end (or the daemon's end
        // is gone): a request sent just before the end is not cut short.
        tokio::select! {
            () = sent.drained() => {}
            () = gone.cancelled() => {}
            () = tokio::time::sleep(DRAIN_TIMEOUT) => {}
        }
    }
    tunnels.forget(id);
    // The daemon may already have closed it.
    upstream.close(id, false).await;
}

/// Ends a client's connection with a reset, not a clean end: a download cut short shows as an
/// error (`curl: (56) Recv failure: Connection reset by peer`), never as a whole, shorter file.
/// The reset waits until what was written has left the socket (a reset drops what has not, and
/// the client would miss the end of what came before), at most [`RESET_WAIT`].
async fn reset(writer: tokio::net::tcp::OwnedWriteHalf) {
    // Writable now means nothing waits unsent.
    if socket2::SockRef::from(writer.as_ref()).set_tcp_notsent_lowat(1).is_ok() {
        let deadline = tokio::time::Instant::now() + RESET_WAIT;
        while !all_sent(writer.as_ref()) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    // silent-ok: the socket may already be gone.
    let _ = writer.as_ref().set_zero_linger();
    // Dropped without its shutdown: the socket closes with the reader, with the reset.
    writer.forget();
}

/// Whether nothing written to `stream` waits unsent (with `TCP_NOTSENT_LOWAT` at 1).
fn all_sent(stream: &tokio::net::TcpStream) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(stream, PollFlags::OUT)];
    let now = Timespec { tv_sec: 0, tv_nsec: 0 };
    poll(&mut fds, Some(&now)).is_ok_and(|ready| ready == 1) && fds[0].revents().contains(PollFlags::OUT)
}

/// A host as a request may name one: a DNS name, an IPv4 address or a bracketless IPv6 one.
fn plain_host(host: &str) -> bool {
    !host.is_empty() && host.len() <= 253 && host.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:".contains(&b))
}

/// The host and port of a `CONNECT host:port HTTP/1.x` request head.
pub fn connect_target(head: &[u8]) -> Option<(String, u16)> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end();
    let mut words = line.split(' ');
    let (method, target, version) = (words.next()?, words.next()?, words.next()?);
    if method != "CONNECT" || !version.starts_with("HTTP/1.") || words.next().is_some() {
        return None;
    }
    let (host, port) = target.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port.parse().ok().filter(|port| *port != 0)?;
    plain_host(host).then(|| (host.to_string(), port))
}

/// The host and port of a plain-HTTP proxy request (`GET http://host[:port]/path HTTP/1.x`),
/// and its head as the server should get it: the request line in origin form, the proxy's own
/// headers dropped, and `Connection: close` (the next request may be for another host).
pub fn http_target(head: &[u8]) -> Option<(String, u16, Vec<u8>)> {
    let text = std::str::from_utf8(head).ok()?;
    let (line, rest) = text.split_once("\r\n")?;
    let mut words = line.split(' ');
    let (method, target, version) = (words.next()?, words.next()?, words.next()?);
    let token = |word: &str| !word.is_empty() && word.bytes().all(|b| b.is_ascii_uppercase());
    if !token(method) || method == "CONNECT" || !version.starts_with("HTTP/1.") || words.next().is_some() {
        return None;
    }
    let after = target.strip_prefix("http://")?;
    let (authority, path) = match after.find(['/', '?']) {
        Some(at) => (&after[..at], &after[at..]),
        None => (after, "/"),
    };
    if authority.contains('@') {
        return None;
    }
    let (host, port) = match authority.rsplit_once(':').filter(|(_, port)| !port.contains(']')) {
        Some((host, port)) => (host, port.parse::<u16>().ok().filter(|port| *port != 0)?),
        None => (authority, 80),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if !plain_host(host) {
        return None;
    }
    let path = if path.starts_with('?') { format!("/{path}") } else { path.to_string() };
    let mut rewritten = format!("{method} {path} {version}\r\n");
    for header in rest.split("\r\n").filter(|header| !header.is_empty()) {
        let name = header.split(':').next().unwrap_or_default().trim().to_ascii_lowercase();
        if !matches!(name.as_str(), "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive") {
            rewritten.push_str(header);
            rewritten.push_str("\r\n");
        }
    }
    rewritten.push_str("Connection: close\r\n\r\n");
    Some((host.to_ascii_lowercase(), port, rewritten.into_bytes()))
}

/// Answers a request the proxy does not carry: `why` in the body, and in `X-Baaaht-Reason`
/// (one line of printable ASCII) for a client that shows headers but not a body.
async fn answer(stream: &mut tokio::net::TcpStream, status: &str, why: &str) {
    let body = format!("{why}\n");
    let reason: String =
        why.chars().map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).take(512).collect();
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nX-Baaaht-Reason: \
         {reason}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    // silent-ok: the client may be gone.
    let _ = stream.write_all(text.as_bytes()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connect_to_host_and_port_is_a_tunnel() {
        let target = |head: &str| connect_target(head.as_bytes());
        assert_eq!(
            target("CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(("api.example.com".into(), 443))
        );
        assert_eq!(target("CONNECT [::1]:8443 HTTP/1.1\r\n\r\n"), Some(("::1".into(), 8443)));
        assert_eq!(target("GET / HTTP/1.1\r\n\r\n"), None);
        assert_eq!(target("CONNECT example.com HTTP/1.1\r\n\r\n"), None);
        assert_eq!(target("CONNECT example.com:0 HTTP/1.1\r\n\r\n"), None);
        assert_eq!(target("CONNECT a b:1 HTTP/1.1\r\n\r\n"), None);
        assert_eq!(target("CONNECT ex\u{0}mple.com:443 HTTP/1.1\r\n\r\n"), None);
    }

    #[test]
    fn a_plain_http_request_goes_on_in_origin_form_and_closes_after_its_answer() {
        let head = "GET http://Files.Example:8080/simple/pkg/?x=1 HTTP/1.1\r\nHost: files.example:8080\r\n\
                    Proxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n";
        let (host, port, rewritten) = http_target(head.as_bytes()).expect("a proxy request");
        assert_eq!((host.as_str(), port), ("files.example", 8080));
        assert_eq!(
            String::from_utf8(rewritten).expect("text"),
            "GET /simple/pkg/?x=1 HTTP/1.1\r\nHost: files.example:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let (host, port, rewritten) = http_target(b"HEAD http://example.org HTTP/1.0\r\n\r\n").expect("no path");
        assert_eq!((host.as_str(), port), ("example.org", 80));
        assert!(rewritten.starts_with(b"HEAD / HTTP/1.0\r\n"));
        for not in [
            "GET /local HTTP/1.1\r\n\r\n",
            "GET https://example.org/ HTTP/1.1\r\n\r\n",
            "GET http://user@example.org/ HTTP/1.1\r\n\r\n",
            "GET ftp://example.org/ HTTP/1.1\r\n\r\n",
            "SSH-2.0-OpenSSH_9.2\r\n\r\n",
            "get http://example.org/ HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(http_target(not.as_bytes()).map(|(host, ..)| host), None, "{not}");
        }
    }

    /// The byte at offset `at` of a test download: a shift, a drop or a repeat shows.
    fn byte_at(at: usize) -> u8 {
        (at % 251) as u8
    }

    /// A proxy on the loopback whose daemon is this test: its tunnels, and what the proxy sends up.
    async fn proxy() -> (Tunnels, mpsc::Receiver<Tunneled>, u16) {
        let tunnels = Tunnels::default();
        let (sender, up) = mpsc::channel(4);
        let port = listen(tunnels.clone(), Upstream { sender, wrap: |tunneled| tunneled }, AskedBy::default(), None)
            .await
            .expect("listens");
        (tunnels, up, port)
    }

    /// A client of the proxy on `port` that opens a tunnel and then reads, `slowly` or not,
    /// checking every byte: how many arrived, and how the connection ended.
    fn client(port: u16, slowly: bool) -> tokio::task::JoinHandle<(usize, std::io::Result<()>)> {
        tokio::task::spawn_blocking(move || {
            use std::io::{Read as _, Write as _};
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connects");
            stream.write_all(b"CONNECT files.example:443 HTTP/1.1\r\n\r\n").expect("asks");
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                stream.read_exact(&mut byte).expect("the answer's head");
                head.push(byte[0]);
            }
            assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
            let (mut buffer, mut at) = (vec![0u8; 64 * 1024], 0);
            loop {
                match stream.read(&mut buffer) {
                    Ok(0) => return (at, Ok(())),
                    Ok(n) => {
                        for (offset, byte) in buffer[..n].iter().enumerate() {
                            assert_eq!(*byte, byte_at(at + offset), "byte {}", at + offset);
                        }
                        at += n;
                    }
                    Err(error) => return (at, Err(error)),
                }
                if slowly {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        })
    }

    /// Plays the daemon's side of one tunnel: answers its open, then sends `total` bytes keeping
    /// to the tunnel's window (as the daemon's relay does), then ends it (`whole`: cleanly).
    async fn daemon(tunnels: Tunnels, mut up: mpsc::Receiver<Tunneled>, total: usize, whole: bool) {
        let id = match up.recv().await {
            Some(Tunneled::Open(open)) => open.id,
            other => panic!("an open first, not {other:?}"),
        };
        tunnels.opened(v1::EgressOpened { id, refused: String::new() });
        let window = Window::new(TUNNEL_WINDOW);
        let acking = window.clone();
        tokio::spawn(async move {
            while let Some(message) = up.recv().await {
                if let Tunneled::Ack(ack) = message {
                    acking.acked(ack.bytes);
                }
            }
        });
        let mut at = 0;
        while at < total {
            window.room(TUNNEL_CHUNK).await;
            let data: Vec<u8> = (at..(at + TUNNEL_CHUNK).min(total)).map(byte_at).collect();
            window.spend(data.len());
            at += data.len();
            assert!(!tunnels.data(v1::EgressData { id, data }), "the tunnel was torn down at {at}");
        }
        tunnels.closed(v1::EgressClose { id, write_only: whole });
    }

    #[tokio::test]
    async fn a_client_slower_than_the_daemon_gets_every_byte_in_order_and_a_clean_end() {
        let (tunnels, up, port) = proxy().await;
        let total = 24 * 1024 * 1024;
        let reading = client(port, true);
        daemon(tunnels, up, total, true).await;
        let (arrived, ended) = reading.await.expect("the client");
        assert_eq!(arrived, total);
        ended.expect("a clean end");
    }

    #[tokio::test]
    async fn a_tunnel_whose_far_end_failed_resets_its_client_after_what_came_before() {
        let (tunnels, up, port) = proxy().await;
        let reading = client(port, false);
        daemon(tunnels, up, 1024 * 1024, false).await;
        let (arrived, ended) = reading.await.expect("the client");
        assert_eq!(arrived, 1024 * 1024);
        let error = ended.expect_err("a reset, not the clean end of a shorter answer");
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset, "{error}");
    }

    #[tokio::test]
    async fn what_a_client_sends_keeps_to_the_window_the_daemon_acknowledges() {
        let (tunnels, mut up, port) = proxy().await;
        let total = 16 * 1024 * 1024;
        let sending = tokio::task::spawn_blocking(move || {
            use std::io::{Read as _, Write as _};
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connects");
            stream.write_all(b"CONNECT files.example:443 HTTP/1.1\r\n\r\n").expect("asks");
            let mut head = [0u8; 39];
            stream.read_exact(&mut head).expect("the answer");
            let body: Vec<u8> = (0..total).map(byte_at).collect();
            stream.write_all(&body).expect("sends");
            stream.shutdown(std::net::Shutdown::Write).expect("ends");
        });
        let id = match up.recv().await {
            Some(Tunneled::Open(open)) => open.id,
            other => panic!("an open first, not {other:?}"),
        };
        tunnels.opened(v1::EgressOpened { id, refused: String::new() });
        let (mut received, mut unacked, mut most) = (0, 0, 0);
        loop {
            match up.recv().await.expect("the proxy's messages") {
                Tunneled::Data(data) => {
                    assert!(data.data.iter().enumerate().all(|(at, byte)| *byte == byte_at(received + at)));
                    received += data.data.len();
                    unacked += data.data.len();
                    most = most.max(unacked);
                    // A far end slower than the client: acknowledged in half windows, late.
                    if unacked >= TUNNEL_WINDOW / 2 {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        tunnels.acked(v1::EgressAck { id, bytes: unacked as u64 });
                        unacked = 0;
                    }
                }
                Tunneled::Close(close) => {
                    assert!(close.write_only, "the client's end is a half-close");
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        sending.await.expect("the client");
        assert_eq!(received, total);
        assert!(most <= TUNNEL_WINDOW, "{most} bytes were in flight, more than the window");
    }

    #[test]
    fn tools_in_the_container_are_pointed_at_the_proxy_and_ssh_says_why_not() {
        let env: HashMap<&str, String> = proxy_env(4711).into_iter().collect();
        for name in ["HTTPS_PROXY", "http_proxy", "ALL_PROXY", "npm_config_https_proxy", "GIT_CONFIG_VALUE_0"] {
            assert_eq!(env[name], "http://127.0.0.1:4711", "{name}");
        }
        assert_eq!(env["GIT_CONFIG_KEY_0"], "http.proxy");
        let ssh = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{} git@github.com git-upload-pack 'owner/repo.git'", env["GIT_SSH_COMMAND"]))
            .output()
            .expect("sh");
        assert_eq!(ssh.status.code(), Some(128));
        assert!(String::from_utf8_lossy(&ssh.stderr).contains("Use the https URL"), "{ssh:?}");
    }
}
