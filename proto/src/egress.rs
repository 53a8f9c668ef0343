//! Where a gateway's connections go. As a host process it dials out itself; in its container
//! it has no network, and every connection (Slack's Web API and Socket Mode, an OpenID
//! provider's token and key endpoints) is a tunnel through the daemon's egress socket
//! (`CONNECT host:port` over a Unix socket), which opens only the hosts that gateway needs
//! (DESIGN.md §9.2).
//!
//! The same dialer serves hyper (TLS by hyper-rustls on top, in the gateway) and
//! tokio-tungstenite (TLS by tokio-tungstenite on top).

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// The longest answer head the daemon's egress socket sends.
const MAX_HEAD: usize = 8 * 1024;

/// How the gateway reaches the outside.
#[derive(Debug, Clone)]
pub enum Egress {
    /// Straight out (a host process).
    Direct,
    /// Through the daemon's egress socket at this path (a container).
    Tunnel(Arc<PathBuf>),
}

/// One outbound connection.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Tunnel(UnixStream),
}

impl Egress {
    /// A connection to `host`:`port`; a refusal by the daemon says which host and why.
    pub async fn dial(&self, host: &str, port: u16) -> io::Result<Stream> {
        match self {
            Egress::Direct => {
                let stream = TcpStream::connect((host, port)).await?;
                stream.set_nodelay(true)?;
                Ok(Stream::Tcp(stream))
            }
            Egress::Tunnel(socket) => {
                let stream = UnixStream::connect(socket.as_path()).await.map_err(|error| {
                    io::Error::new(error.kind(), format!("the daemon's egress socket {}: {error}", socket.display()))
                })?;
                tunnel(stream, host, port).await.map(Stream::Tunnel)
            }
        }
    }
}

/// Asks for a tunnel to `host`:`port` on `stream` and reads the answer's head, not a byte more.
async fn tunnel(mut stream: UnixStream, host: &str, port: u16) -> io::Result<UnixStream> {
    let authority = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    let request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    // One byte at a time through a one-byte buffer: what follows the head is the tunnel's.
    let mut reader = BufReader::with_capacity(1, &mut stream);
    let mut status_line = String::new();
    let mut read = reader.read_line(&mut status_line).await?;
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).await?;
        read += n;
        if n == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        if read > MAX_HEAD {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "the egress socket's answer is too long"));
        }
    }
    let status = status_line.trim_end();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!("the daemon did not open {authority}: {status}"),
        ));
    }
    Ok(stream)
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(stream) => Pin::new(stream).poll_read(cx, buf),
            Stream::Tunnel(stream) => Pin::new(stream).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(stream) => Pin::new(stream).poll_write(cx, buf),
            Stream::Tunnel(stream) => Pin::new(stream).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(stream) => Pin::new(stream).poll_flush(cx),
            Stream::Tunnel(stream) => Pin::new(stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(stream) => Pin::new(stream).poll_shutdown(cx),
            Stream::Tunnel(stream) => Pin::new(stream).poll_shutdown(cx),
        }
    }
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

/// hyper's connector: the URI's host and port (80 or 443 by scheme when absent).
impl tower::Service<http::Uri> for Egress {
    type Response = TokioIo<Stream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<Stream>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let egress = self.clone();
        Box::pin(async move {
            let (host, port) = host_and_port(&uri)?;
            egress.dial(&host, port).await.map(TokioIo::new)
        })
    }
}

/// The host (without IPv6 brackets) and port of `uri`.
pub fn host_and_port(uri: &http::Uri) -> io::Result<(String, u16)> {
    let host = uri
        .host()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("`{uri}` has no host")))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
        Some("https" | "wss") => 443,
        _ => 80,
    });
    Ok((host, port))
}

/// Bytes waiting for one tunnel's writer, bounded by their size rather than their number: a
/// server that writes three bytes at a time is as welcome as one that writes 64 KiB. The sender
/// keeps within the tunnel's [`Window`], so `most` (the window) bytes never wait unless the
/// other side broke the flow control (the container's relay and the daemon's then tear that
/// tunnel down).
pub fn byte_queue(most: usize) -> (ByteSender, ByteReceiver) {
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    let waiting = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    (ByteSender { sender, waiting: waiting.clone(), most }, ByteReceiver { receiver, waiting })
}

/// The writing end of a [`byte_queue`].
#[derive(Debug)]
pub struct ByteSender {
    sender: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    waiting: Arc<std::sync::atomic::AtomicUsize>,
    most: usize,
}

impl ByteSender {
    /// Queues `bytes`; false when the reader is gone or `most` bytes would be waiting. An empty
    /// chunk carries nothing and is not queued (a flood of them would cost memory for free).
    pub fn try_send(&self, bytes: Vec<u8>) -> bool {
        use std::sync::atomic::Ordering;
        let n = bytes.len();
        if n == 0 {
            return !self.sender.is_closed();
        }
        if self.waiting.fetch_add(n, Ordering::Relaxed) + n > self.most || self.sender.send(bytes).is_err() {
            self.waiting.fetch_sub(n, Ordering::Relaxed);
            return false;
        }
        true
    }
}

/// The reading end of a [`byte_queue`].
#[derive(Debug)]
pub struct ByteReceiver {
    receiver: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    waiting: Arc<std::sync::atomic::AtomicUsize>,
}

impl ByteReceiver {
    /// The next bytes; none once every sender is gone and nothing waits.
    pub async fn recv(&mut self) -> Option<Vec<u8>> {
        let bytes = self.receiver.recv().await?;
        self.waiting.fetch_sub(bytes.len(), std::sync::atomic::Ordering::Relaxed);
        Some(bytes)
    }

    /// Whether nothing waits now (the writer then acknowledges what it wrote at once).
    pub fn is_empty(&self) -> bool {
        self.receiver.is_empty()
    }
}

/// One direction of a tunnel as its sender sees it: how many bytes it sent that the other side
/// has not yet written on ([`v1::EgressAck`](crate::v1::EgressAck) gives them back). The sender
/// reads its socket only while the window has room, so a reader that does not keep up holds
/// back its own tunnel (and, through TCP, its own server), never another tunnel on the shared
/// stream, and never makes a buffer between grow past the window.
#[derive(Debug)]
pub struct Window {
    in_flight: tokio::sync::watch::Sender<usize>,
    most: usize,
}

impl Window {
    pub fn new(most: usize) -> Arc<Window> {
        Arc::new(Window { in_flight: tokio::sync::watch::channel(0).0, most })
    }

    /// Waits until `n` more bytes fit in the window (the one sender then reads at most `n`).
    pub async fn room(&self, n: usize) {
        let most = self.most;
        // silent-ok: the sender is `self`, alive while this waits.
        let _ = self.in_flight.subscribe().wait_for(|in_flight| in_flight + n <= most).await;
    }

    /// `n` bytes sent.
    pub fn spend(&self, n: usize) {
        self.in_flight.send_modify(|in_flight| *in_flight += n);
    }

    /// `n` bytes written on by the other side (more than are in flight counts as all of them:
    /// the other side is not trusted to count).
    pub fn acked(&self, n: u64) {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        self.in_flight.send_modify(|in_flight| *in_flight = in_flight.saturating_sub(n));
    }

    /// Waits until every byte sent has been written on by the other side.
    pub async fn drained(&self) {
        // silent-ok: the sender is `self`, alive while this waits.
        let _ = self.in_flight.subscribe().wait_for(|in_flight| *in_flight == 0).await;
    }
}

/// Bytes in flight per tunnel and direction (sent, not yet written on by the other side): the
/// window each side of a container's tunnel keeps to, and so the most that waits in a tunnel's
/// buffer.
pub const TUNNEL_WINDOW: usize = 2 * 1024 * 1024;

/// The most bytes one message of a tunnel carries, either way: larger chunks, fewer messages
/// (and, in a gVisor sandbox, fewer system calls, each a round trip to the host) per MB.
pub const TUNNEL_CHUNK: usize = 256 * 1024;

/// How a tunnel's writer acknowledges what it wrote: in batches of [`ACK_EVERY`] bytes, or at
/// once when nothing more waits (so a small answer is never held up for want of an ack).
#[derive(Debug, Default)]
pub struct Acks {
    written: u64,
}

/// The bytes a writer acknowledges at most at once while more wait.
pub const ACK_EVERY: u64 = 256 * 1024;

impl Acks {
    /// `n` bytes written; the bytes to acknowledge now, if it is time.
    pub fn wrote(&mut self, n: usize, more_waiting: bool) -> Option<u64> {
        self.written += n as u64;
        (self.written >= ACK_EVERY || !more_waiting).then(|| std::mem::take(&mut self.written))
    }
}

/// A CONNECT proxy on the process's own loopback in front of `egress`, for a library that
/// takes a proxy's address but no connector of ours (matrix-sdk's HTTP client, git in the
/// skill fetch's container): its
/// `http://127.0.0.1:{port}`, or `None` when connections go straight out. Only HTTPS goes
/// through it (a tunnel per connection, to the hosts the daemon lets the process reach).
pub async fn local_proxy(egress: Egress) -> std::io::Result<Option<String>> {
    use tokio::io::AsyncReadExt as _;
    if matches!(egress, Egress::Direct) {
        return Ok(None);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let mut client = match listener.accept().await {
                Ok((client, _)) => client,
                Err(error) => {
                    tracing::warn!(%error, "the local proxy cannot take a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let egress = egress.clone();
            tokio::spawn(async move {
                // The request's head: `CONNECT host:port HTTP/1.1`, headers, an empty line.
                let mut head = Vec::with_capacity(512);
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                    match client.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let line = String::from_utf8_lossy(&head);
                let target = line.lines().next().and_then(|first| first.strip_prefix("CONNECT ")).and_then(|rest| {
                    let authority = rest.split_whitespace().next()?;
                    let (host, port) = authority.rsplit_once(':')?;
                    Some((host.trim_start_matches('[').trim_end_matches(']').to_string(), port.parse::<u16>().ok()?))
                });
                let Some((host, port)) = target else {
                    // silent-ok: a client that did not ask for a tunnel is told and dropped.
                    let _ = client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n").await;
                    return;
                };
                match egress.dial(&host, port).await {
                    Ok(mut upstream) => {
                        if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_ok() {
                            // silent-ok: either side closing ends the tunnel.
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, host, port, "the daemon's egress refused a tunnel");
                        // silent-ok: the client learns of the refusal from the status, if it still listens.
                        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                    }
                }
            });
        }
    });
    Ok(Some(format!("http://{address}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_tunnel_reads_the_head_and_leaves_the_rest_to_the_caller() {
        let folder = tempfile::tempdir().expect("tempdir");
        let path = folder.path().join("egress.sock");
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        let server = tokio::spawn(async move {
            for answer in ["HTTP/1.1 200 Connection established\r\n\r\nhello", "HTTP/1.1 403 Forbidden\r\n\r\n"] {
                let (mut stream, _) = listener.accept().await.expect("accept");
                let mut head = vec![0; 256];
                let n = stream.read(&mut head).await.expect("read");
                assert!(String::from_utf8_lossy(&head[..n]).starts_with("CONNECT slack.com:443 HTTP/1.1\r\n"));
                stream.write_all(answer.as_bytes()).await.expect("write");
            }
        });
        let egress = Egress::Tunnel(Arc::new(path));
        let mut stream = egress.dial("slack.com", 443).await.expect("tunnel");
        let mut rest = String::new();
        stream.read_to_string(&mut rest).await.expect("read");
        assert_eq!(rest, "hello");
        let refused = egress.dial("slack.com", 443).await.expect_err("refused");
        assert_eq!(refused.to_string(), "the daemon did not open slack.com:443: HTTP/1.1 403 Forbidden");
        server.await.expect("server");
    }

    #[test]
    fn ports_follow_the_scheme() {
        let of = |uri: &str| host_and_port(&uri.parse().expect("uri")).expect("host");
        assert_eq!(of("https://slack.com/api"), ("slack.com".into(), 443));
        assert_eq!(of("wss://wss-primary.slack.com/link"), ("wss-primary.slack.com".into(), 443));
        assert_eq!(of("http://127.0.0.1:4000/api"), ("127.0.0.1".into(), 4000));
        assert_eq!(of("ws://[::1]:9/link"), ("::1".into(), 9));
    }

    #[tokio::test]
    async fn a_queue_counts_bytes_not_messages() {
        let (sender, mut receiver) = byte_queue(10);
        // Ten one-byte messages fit where a single eleven-byte one does not.
        assert!((0..10u8).all(|byte| sender.try_send(vec![byte])));
        assert!(!sender.try_send(vec![0]));
        assert_eq!(receiver.recv().await, Some(vec![0]));
        assert!(sender.try_send(vec![10]));
        drop(sender);
        let mut rest = vec![];
        while let Some(bytes) = receiver.recv().await {
            rest.extend(bytes);
        }
        assert_eq!(rest, (1..=10).collect::<Vec<u8>>());
        let (sender, receiver) = byte_queue(100);
        drop(receiver);
        assert!(!sender.try_send(vec![1]));
    }

    // The local proxy's test.

    /// An egress socket that opens a tunnel to `allowed` only, and echoes what comes through.
    fn daemon_egress(path: std::path::PathBuf, allowed: &'static str) {
        let listener = tokio::net::UnixListener::bind(path).expect("bind");
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = vec![];
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        stream.read_exact(&mut byte).await.expect("head");
                        head.push(byte[0]);
                    }
                    if !String::from_utf8_lossy(&head).starts_with(&format!("CONNECT {allowed} ")) {
                        stream.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").await.expect("refuse");
                        return;
                    }
                    stream.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.expect("open");
                    let mut buffer = [0u8; 64];
                    while let Ok(read) = stream.read(&mut buffer).await {
                        if read == 0 || stream.write_all(&buffer[..read]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
    }

    async fn ask(proxy: &str, request: &str) -> (String, tokio::net::TcpStream) {
        let mut stream = tokio::net::TcpStream::connect(proxy.trim_start_matches("http://")).await.expect("connect");
        stream.write_all(request.as_bytes()).await.expect("ask");
        let mut head = vec![];
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.expect("answer") == 1 {
            head.push(byte[0]);
        }
        (String::from_utf8_lossy(&head).into_owned(), stream)
    }

    #[tokio::test]
    async fn the_local_proxy_tunnels_through_the_daemons_egress_and_nothing_else() {
        assert_eq!(local_proxy(Egress::Direct).await.expect("direct"), None, "no proxy on a host");
        let folder = std::env::temp_dir().join(format!("baaaht-kit-proxy-{}", std::process::id()));
        // silent-ok: a folder left by an earlier run, or none.
        let _ = std::fs::remove_dir_all(&folder);
        std::fs::create_dir_all(&folder).expect("folder");
        let socket = folder.join("egress.sock");
        daemon_egress(socket.clone(), "matrix.home.example:443");
        let proxy = local_proxy(Egress::Tunnel(std::sync::Arc::new(socket))).await.expect("proxy").expect("an address");
        assert!(proxy.starts_with("http://127.0.0.1:"), "{proxy}");
        let (head, mut tunnel) = ask(&proxy, "CONNECT matrix.home.example:443 HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        tunnel.write_all(b"ping").await.expect("write");
        let mut echoed = [0u8; 4];
        tunnel.read_exact(&mut echoed).await.expect("echo");
        assert_eq!(&echoed, b"ping", "bytes go both ways through the tunnel");
        let (refused, _) = ask(&proxy, "CONNECT evil.example:443 HTTP/1.1\r\n\r\n").await;
        assert!(refused.starts_with("HTTP/1.1 502"), "the daemon's refusal is a refusal: {refused}");
        let (plain, _) = ask(&proxy, "GET http://matrix.home.example/ HTTP/1.1\r\n\r\n").await;
        assert!(plain.starts_with("HTTP/1.1 405"), "only tunnels: {plain}");
        // silent-ok: cleaning up.
        let _ = std::fs::remove_dir_all(&folder);
    }
}
