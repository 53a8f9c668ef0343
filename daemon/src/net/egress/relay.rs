//! A container's connections out through the daemon (an MCP server's, a tool command's): the
//! container's own proxy (`baaaht-agent`'s `egress.rs`) opens each as a tunnel over the
//! container's stream; here a [`Gate`] decides whether it may be made (an MCP server's
//! `egress` list, a context's egress policy), the web proxy's address filter checks where it
//! leads and connects, and the bytes are carried both ways. One audit record per connection:
//! who, where, the decision, who approved it, and the bytes each way.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use baaaht_proto::egress::{byte_queue, Acks, ByteReceiver, ByteSender, Window, TUNNEL_CHUNK, TUNNEL_WINDOW};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::guard::audit::{Audit, Record};
use crate::net::egress::proxy::WebProxy;

/// What a container's proxy sends up about a tunnel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TunnelUp {
    /// A connection to `host:port`; `asked_by`: what in the container asked, as it says.
    Open {
        id: u64,
        host: String,
        port: u32,
        asked_by: String,
    },
    Data {
        id: u64,
        data: Vec<u8>,
    },
    /// The end of a connection: with `write_only`, no more bytes come from this side.
    Close {
        id: u64,
        write_only: bool,
    },
    /// The container wrote on `bytes` of what the daemon sent it (its client took them).
    Ack {
        id: u64,
        bytes: u64,
    },
}

/// What the daemon sends a container's proxy about a tunnel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TunnelDown {
    /// The answer to an open: empty `refused` when it is connected.
    Opened {
        id: u64,
        refused: String,
    },
    Data {
        id: u64,
        data: Vec<u8>,
    },
    Close {
        id: u64,
        write_only: bool,
    },
    /// The daemon wrote on `bytes` of what the container sent (the far end took them).
    Ack {
        id: u64,
        bytes: u64,
    },
}

/// Where a tunnel's bytes come from: the edge's side, or the far end once the edge hands it over.
type FarReader = Box<dyn tokio::io::AsyncRead + Unpin + Send>;

/// What the writing side of a tunnel takes over when the edge hands the far end on: the far
/// end's writing half, and the edge's side with what the edge had not read.
type FarWriter = (tokio::net::tcp::OwnedWriteHalf, tokio::io::DuplexStream);

/// Where the container's bytes of a tunnel go: the edge's side until the edge hands the far end
/// over (see [`Handed`]), then the far end itself.
struct Onward {
    writer: Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
    handed: Option<oneshot::Receiver<FarWriter>>,
}

/// What the writing side of a tunnel does next: write the container's bytes, or take over the
/// far end the edge handed on.
enum Step {
    Write(Vec<u8>),
    Switch(FarWriter),
}

impl Onward {
    /// The far end's writing half with the edge's side, once the edge hands them over; pending
    /// for ever when it has, or never will.
    async fn hand(handed: &mut Option<oneshot::Receiver<FarWriter>>) -> Option<FarWriter> {
        let Some(receiver) = handed.as_mut() else { return std::future::pending().await };
        let got = receiver.await.ok();
        *handed = None;
        got
    }

    /// Writes from now on to the far end itself: first what the edge had not read of what was
    /// written to its side (that side ends, so the edge's copy reads to its end).
    async fn switch(&mut self, (mut far, mut edge): FarWriter) -> std::io::Result<()> {
        self.writer.shutdown().await?;
        tokio::io::copy(&mut edge, &mut far).await?;
        self.writer = Box::new(far);
        Ok(())
    }

    /// Writes all of `bytes`, switching to the far end when it is handed over meanwhile (the
    /// edge's side may be full, with the edge no longer reading it).
    async fn write_all(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            let Onward { writer, handed } = &mut *self;
            tokio::select! {
                written = writer.write(bytes) => match written? {
                    0 => return Err(std::io::ErrorKind::WriteZero.into()),
                    n => bytes = &bytes[n..],
                },
                Some(far) = Onward::hand(handed) => self.switch(far).await?,
            }
        }
        Ok(())
    }

    /// The container has no more: the far end reads the end (once handed over, if it is).
    async fn end(mut self) {
        // silent-ok: the far end may be gone.
        let _ = self.writer.shutdown().await;
        if self.handed.is_none() {
            return;
        }
        if let Some(far) = Onward::hand(&mut self.handed).await {
            if self.switch(far).await.is_ok() {
                // silent-ok: as above.
                let _ = self.writer.shutdown().await;
            }
        }
    }
}

/// What stands between a container and a host (the edge, `egress::edge`): every connection
/// passes it.
#[async_trait::async_trait]
pub trait Between: Send + Sync + 'static {
    /// Takes the connection to `host:port` (`far`, connected), carrying it on `tracker`: the
    /// container's side to use.
    async fn take(&self, host: &str, port: u16, far: tokio::net::TcpStream, tracker: &TaskTracker) -> Taken;
}

/// The container's side of a connection the edge carries, and how the edge ended it: cleanly,
/// or given up (a far end that failed, a refusal) — the container's client then gets a reset,
/// not the clean end of a shorter answer. The verdict comes as the edge's side ends.
pub struct Taken {
    pub near: tokio::io::DuplexStream,
    /// Meaningless once the connection is handed over (see `handed`).
    pub clean: oneshot::Receiver<bool>,
    /// The far end itself, when the edge passes the connection on as it is: the relay carries
    /// it from then on and says how it ended (no message: the edge carries it to the end).
    pub handed: oneshot::Receiver<Handed>,
}

/// A connection the edge passes on as it is: the far end (what the edge read of the command's
/// first bytes already written to it), and the edge's side of `near`, holding what the command
/// sent that the edge had not read.
pub struct Handed {
    pub far: tokio::net::TcpStream,
    pub near: tokio::io::DuplexStream,
}

/// How long the relay waits, at the end of a connection, for the edge to say how it ended.
const VERDICT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether a connection may be made, and who said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `by`: the rule or the person that allowed it.
    Allow { by: String },
    /// Why not, in a sentence the container's program shows.
    Refuse(String),
}

/// Decides the connections of one container.
#[async_trait::async_trait]
pub trait Gate: Send + Sync + 'static {
    async fn decide(&self, host: &str, port: u16, asked_by: &str) -> Verdict;
}

/// The daemon's end of one tunnel: bytes for its connection's writer (none once the container
/// has no more), the window of what it sent the container, what tears it down, and which open
/// it belongs to.
struct Tunnel {
    bytes: Option<ByteSender>,
    sent: Arc<Window>,
    closed: CancellationToken,
    generation: u64,
}

/// One container's tunnels, by the container's id (apart from `egress::tunnel::Tunnels`, the
/// CONNECT front-end of gateways and skill installs).
#[derive(Clone, Default)]
struct RelayTunnels(Arc<Mutex<(u64, HashMap<u64, Tunnel>)>>);

/// The most tunnels one container may have open at once.
const MAX_TUNNELS: usize = 32;
/// Connections a container may open a minute.
const OPENS_PER_MINUTE: u32 = 120;

/// Why a tunnel's id could not be reserved (told to the container's proxy).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ReserveError {
    #[error("tunnel {id} is already open")]
    AlreadyOpen { id: u64 },
    #[error("{most} connections are open; close one first")]
    Full { most: usize },
}

impl RelayTunnels {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, HashMap<u64, Tunnel>)> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reserves `id` before its connection is made; why not, when it cannot be.
    fn reserve(&self, id: u64) -> Result<Reserved, ReserveError> {
        let mut state = self.lock();
        let (generation, open) = &mut *state;
        if open.contains_key(&id) {
            return Err(ReserveError::AlreadyOpen { id });
        }
        if open.len() >= MAX_TUNNELS {
            return Err(ReserveError::Full { most: MAX_TUNNELS });
        }
        *generation += 1;
        let (bytes, received) = byte_queue(TUNNEL_WINDOW);
        let (sent, closed) = (Window::new(TUNNEL_WINDOW), CancellationToken::new());
        open.insert(
            id,
            Tunnel { bytes: Some(bytes), sent: sent.clone(), closed: closed.clone(), generation: *generation },
        );
        Ok(Reserved { generation: *generation, received, sent, closed })
    }

    /// Forgets tunnel `id` if it is still the one of `generation`, and tears it down.
    fn end(&self, id: u64, generation: u64) {
        let mut state = self.lock();
        if state.1.get(&id).is_some_and(|tunnel| tunnel.generation == generation) {
            if let Some(tunnel) = state.1.remove(&id) {
                tunnel.closed.cancel();
            }
        }
    }

    /// Bytes from the container for tunnel `id`; false when they do not fit its window (the
    /// container broke the flow control: the tunnel is then torn down).
    fn data(&self, id: u64, data: Vec<u8>) -> bool {
        let mut state = self.lock();
        let Some(Tunnel { bytes: Some(bytes), closed, .. }) = state.1.get(&id) else { return true };
        if bytes.try_send(data) {
            return true;
        }
        closed.cancel();
        state.1.remove(&id);
        false
    }

    /// The container wrote on `bytes` of what tunnel `id` sent it: room for as many more.
    fn acked(&self, id: u64, bytes: u64) {
        if let Some(tunnel) = self.lock().1.get(&id) {
            tunnel.sent.acked(bytes);
        }
    }

    /// The container's end of tunnel `id`: no more bytes (`write_only`), or gone.
    fn closed(&self, id: u64, write_only: bool) {
        let mut state = self.lock();
        if write_only {
            if let Some(tunnel) = state.1.get_mut(&id) {
                tunnel.bytes.take();
            }
        } else if let Some(tunnel) = state.1.remove(&id) {
            tunnel.closed.cancel();
        }
    }

    /// The container is gone: so are its tunnels.
    fn clear(&self) {
        for (_, tunnel) in self.lock().1.drain() {
            tunnel.closed.cancel();
        }
    }
}

/// A tunnel's id reserved: its open's generation, the bytes from the container, the window of
/// what goes to it, and what tears it down.
struct Reserved {
    generation: u64,
    received: ByteReceiver,
    sent: Arc<Window>,
    closed: CancellationToken,
}

/// The tunnels of one connected container: what decides, where the down messages go (`D`, its
/// stream's message), and the base of each audit record (who, for what).
pub struct Relay<D> {
    gate: Arc<dyn Gate>,
    web: Arc<WebProxy>,
    audit: Audit,
    record: Record,
    /// Named in the log: `MCP server notes`, `tools of session …`.
    what: String,
    edge: Arc<dyn Between>,
    down: mpsc::Sender<D>,
    tunnels: RelayTunnels,
    opens: Mutex<crate::guard::limits::Allowance>,
    tracker: TaskTracker,
}

/// What a [`Relay`] is made of.
pub struct Setup<D> {
    pub gate: Arc<dyn Gate>,
    pub web: Arc<WebProxy>,
    pub audit: Audit,
    /// Each record starts as this (its principal and what it is about); the relay adds the
    /// host, port, decision and bytes.
    pub record: Record,
    pub what: String,
    /// What every connection passes: the name it uses checked, a session's credential
    /// placeholders swapped, no secret value either way.
    pub edge: Arc<dyn Between>,
    pub down: mpsc::Sender<D>,
    pub tracker: TaskTracker,
}

impl<D: From<TunnelDown> + Send + 'static> Relay<D> {
    pub fn new(setup: Setup<D>) -> Arc<Relay<D>> {
        let Setup { gate, web, audit, record, what, edge, down, tracker } = setup;
        let opens =
            Mutex::new(crate::guard::limits::Allowance::new(OPENS_PER_MINUTE, std::time::Duration::from_secs(60)));
        let tunnels = RelayTunnels::default();
        Arc::new(Relay { gate, web, audit, record, what, edge, down, tunnels, opens, tracker })
    }

    /// Takes what the container's proxy sent; false when the container's stream is gone.
    pub async fn take(self: &Arc<Self>, up: TunnelUp) -> bool {
        match up {
            TunnelUp::Open { id, host, port, asked_by } => {
                let (fits, turned_away) = self.opens.lock().unwrap_or_else(PoisonError::into_inner).take();
                if turned_away > 0 {
                    tracing::warn!(what = %self.what, turned_away, "more than {OPENS_PER_MINUTE} connections a minute; the rest were refused");
                }
                if !fits {
                    let refused = format!("more than {OPENS_PER_MINUTE} connections a minute; try again later");
                    return self.down.send(D::from(TunnelDown::Opened { id, refused })).await.is_ok();
                }
                let relay = self.clone();
                self.tracker.spawn(async move { relay.open(id, host, port, asked_by).await });
                true
            }
            TunnelUp::Data { id, data } => {
                if self.tunnels.data(id, data) {
                    return true;
                }
                tracing::warn!(what = %self.what, id, "a container sent past its tunnel's window; the tunnel was torn down");
                self.down.send(D::from(TunnelDown::Close { id, write_only: false })).await.is_ok()
            }
            TunnelUp::Ack { id, bytes } => {
                self.tunnels.acked(id, bytes);
                true
            }
            TunnelUp::Close { id, write_only } => {
                self.tunnels.closed(id, write_only);
                true
            }
        }
    }

    /// The container is gone: so are its connections.
    pub fn clear(&self) {
        self.tunnels.clear();
    }

    async fn send(&self, down: TunnelDown) -> bool {
        self.down.send(D::from(down)).await.is_ok()
    }

    /// Opens tunnel `id` when the gate allows it and the proxy's address checks pass; the
    /// answer goes down, then the connection's bytes. One audit record each.
    async fn open(self: Arc<Self>, id: u64, host: String, asked_port: u32, asked_by: String) {
        // The container's proxy checked it, but the container is not trusted: a name as DNS
        // writes it, one spelling (lower case, no final dot), or an address.
        let host = host.to_ascii_lowercase().trim_end_matches('.').to_string();
        let named = !host.is_empty()
            && host.len() <= 253
            && host.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:".contains(&b))
            && !host.starts_with(['-', '.']);
        if !named {
            let refused = "the host is not a host name or an address".to_string();
            self.send(TunnelDown::Opened { id, refused }).await;
            return;
        }
        let mut record = self.record.clone().at_now().detail("host", host.as_str()).detail("port", asked_port);
        if !asked_by.is_empty() {
            record = record.detail("asked_by", asked_by.as_str());
        }
        let Reserved { generation, mut received, sent: window, closed } = match self.tunnels.reserve(id) {
            Ok(reserved) => reserved,
            Err(why) => {
                self.send(TunnelDown::Opened { id, refused: why.to_string() }).await;
                return;
            }
        };
        let port = u16::try_from(asked_port).unwrap_or(0);
        let gave_up = || (false, "the container gave up on the connection".to_string());
        // What the filter refuses at sight (loopback, metadata) is refused before anyone is asked.
        let decided = match (port, self.web.refused_at_sight(&host, port)) {
            (0, _) => Err((false, format!("port {asked_port} is not a TCP port"))),
            (_, Some(refused)) => Err((true, refused.to_string())),
            _ => tokio::select! {
                verdict = self.gate.decide(&host, port, &asked_by) => match verdict {
                    Verdict::Allow { by } => Ok(by),
                    Verdict::Refuse(why) => Err((true, why)),
                },
                () = closed.cancelled() => Err(gave_up()),
            },
        };
        let connected = match decided {
            Ok(by) => tokio::select! {
                connected = self.web.connect_checked(&host, port) => {
                    connected.map(|stream| (stream, by)).map_err(|error| (error.is_refusal(), error.to_string()))
                }
                () = closed.cancelled() => Err(gave_up()),
            },
            Err(refused) => Err(refused),
        };
        let (stream, by) = match connected {
            Ok(connected) => connected,
            Err((refused, why)) => {
                self.tunnels.end(id, generation);
                let outcome = if refused { "refused" } else { "failed" };
                self.audit.record(Record { outcome: outcome.into(), ..record }.detail("reason", why.as_str()));
                tracing::warn!(what = %self.what, %host, port, %why, "a connection out was not opened");
                self.send(TunnelDown::Opened { id, refused: why }).await;
                return;
            }
        };
        let record = record.detail("allowed_by", by.as_str());
        let (sent, received_bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        // The edge carries the connection.
        let Taken { near, mut clean, handed } = self.edge.take(&host, port, stream, &self.tracker).await;
        let (reader, writer) = tokio::io::split(near);
        let mut reader: FarReader = Box::new(reader);
        if !self.send(TunnelDown::Opened { id, refused: String::new() }).await {
            self.tunnels.end(id, generation);
            return self.audit_end(record, &sent, &received_bytes);
        }
        let (to_writer, writer_handed) = oneshot::channel();
        let mut onward = Onward { writer: Box::new(writer), handed: Some(writer_handed) };
        let (writing, counted, down) = (closed.clone(), sent.clone(), self.down.clone());
        let (tunnels, what) = (self.tunnels.clone(), self.what.clone());
        self.tracker.spawn(async move {
            let mut acks = Acks::default();
            loop {
                let step = tokio::select! {
                    bytes = received.recv() => match bytes {
                        Some(bytes) => Step::Write(bytes),
                        // None: the container has no more; the far end reads the end.
                        None => break,
                    },
                    Some(far) = Onward::hand(&mut onward.handed) => Step::Switch(far),
                    () = writing.cancelled() => return,
                };
                let (written, wrote) = match step {
                    Step::Write(bytes) => {
                        counted.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        tokio::select! {
                            written = onward.write_all(&bytes) => (written.is_ok(), bytes.len()),
                            () = writing.cancelled() => return,
                        }
                    }
                    // What the command sent that the edge had not read must reach the far end
                    // now: the far end may be waiting for it to answer.
                    Step::Switch(far) => tokio::select! {
                        switched = onward.switch(far) => (switched.is_ok(), 0),
                        () = writing.cancelled() => return,
                    },
                };
                if !written {
                    // The far end stopped taking what the container sends (it answered early and
                    // closed): the tunnel ends both ways, or the container would wait for room.
                    tracing::debug!(what = %what, id, "the far end stopped reading; the tunnel ends");
                    tunnels.end(id, generation);
                    // silent-ok: the container's stream may be gone too.
                    let _ = down.send(D::from(TunnelDown::Close { id, write_only: false })).await;
                    return;
                }
                if wrote == 0 {
                    continue;
                }
                if let Some(n) = acks.wrote(wrote, !received.is_empty()) {
                    if down.send(D::from(TunnelDown::Ack { id, bytes: n })).await.is_err() {
                        return;
                    }
                }
            }
            tokio::select! {
                () = onward.end() => {}
                () = writing.cancelled() => {}
            }
        });
        let mut buffer = vec![0u8; TUNNEL_CHUNK];
        // The far end itself, once the edge hands it over: its end is then the verdict.
        let (mut handed, mut to_writer, mut direct) = (Some(handed), Some(to_writer), false);
        let whole = loop {
            let n = tokio::select! {
                () = closed.cancelled() => return self.audit_end(record, &sent, &received_bytes),
                got = async {
                    match handed.as_mut() {
                        Some(receiver) => receiver.await.ok(),
                        None => std::future::pending().await,
                    }
                } => {
                    handed = None;
                    // None: the edge carries the connection to its end itself.
                    let Some(to_writer) = to_writer.take() else { continue };
                    if let Some(Handed { far, near }) = got {
                        let (far_reader, far_writer) = far.into_split();
                        reader = Box::new(far_reader);
                        direct = true;
                        // silent-ok: the writing task ended with the tunnel.
                        let _ = to_writer.send((far_writer, near));
                    }
                    continue;
                }
                read = async {
                    // What the container has not written on yet holds the far end back.
                    window.room(TUNNEL_CHUNK).await;
                    reader.read(&mut buffer).await
                } => match read {
                    // The far end's clean end, unless the edge gave the connection up.
                    Ok(0) if direct => break true,
                    Ok(0) => break matches!(tokio::time::timeout(VERDICT_WAIT, &mut clean).await, Ok(Ok(true))),
                    Err(_) => break false,
                    Ok(n) => n,
                },
            };
            window.spend(n);
            received_bytes.fetch_add(n as u64, Ordering::Relaxed);
            if !self.send(TunnelDown::Data { id, data: buffer[..n].to_vec() }).await {
                self.tunnels.end(id, generation);
                return self.audit_end(record, &sent, &received_bytes);
            }
        };
        if whole {
            // The far end is done sending; the container's side may still be, until it closes.
            self.send(TunnelDown::Close { id, write_only: true }).await;
            closed.cancelled().await;
        } else {
            self.tunnels.end(id, generation);
            self.send(TunnelDown::Close { id, write_only: false }).await;
        }
        self.audit_end(record, &sent, &received_bytes);
    }

    /// The record of a connection that was made, once it ends: its bytes each way.
    fn audit_end(&self, record: Record, sent: &AtomicU64, received: &AtomicU64) {
        let record = Record { outcome: "allowed".into(), ..record }
            .detail("bytes_out", sent.load(Ordering::Relaxed))
            .detail("bytes_in", received.load(Ordering::Relaxed));
        self.audit.record(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tunnel_id_is_reserved_once_and_ended_by_its_own_open_only() {
        let tunnels = RelayTunnels::default();
        let Reserved { generation: first, closed, .. } = tunnels.reserve(7).expect("reserved");
        let taken = tunnels.reserve(7).map(drop).expect_err("taken");
        assert_eq!(taken, ReserveError::AlreadyOpen { id: 7 });
        assert_eq!(taken.to_string(), "tunnel 7 is already open");
        // The relay closes it; a new open takes the id; the old open's end leaves it alone.
        tunnels.closed(7, false);
        assert!(closed.is_cancelled());
        let Reserved { generation: second, closed: reopened, .. } = tunnels.reserve(7).expect("reserved again");
        tunnels.end(7, first);
        assert!(!reopened.is_cancelled());
        tunnels.end(7, second);
        assert!(reopened.is_cancelled());
        for id in 0..MAX_TUNNELS as u64 {
            tunnels.reserve(id).expect("room");
        }
        let full = tunnels.reserve(99).map(drop).expect_err("full");
        assert_eq!(full.to_string(), format!("{MAX_TUNNELS} connections are open; close one first"));
    }

    /// A far end on loopback: ours to write on, and the server's side that reads it.
    async fn far_pair() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let far = tokio::net::TcpStream::connect(listener.local_addr().expect("address")).await.expect("connect");
        (far, listener.accept().await.expect("accept").0)
    }

    /// A writer on the edge's side of a 1 KiB duplex: it, the edge's side, and the hand-over.
    fn beside_the_edge() -> (Onward, tokio::io::DuplexStream, oneshot::Sender<FarWriter>) {
        let (near, edge) = tokio::io::duplex(1024);
        let (_reader, writer) = tokio::io::split(near);
        let (hand, handed) = oneshot::channel();
        (Onward { writer: Box::new(writer), handed: Some(handed) }, edge, hand)
    }

    /// Polls `future` once: whether it is still waiting.
    async fn waits<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> bool {
        let mut future = future;
        std::future::poll_fn(|cx| std::task::Poll::Ready(future.as_mut().poll(cx).is_pending())).await
    }

    #[tokio::test]
    async fn what_the_edge_had_not_read_reaches_the_far_end_first_when_it_is_handed_over() {
        let (far, mut server) = far_pair().await;
        let reading = tokio::spawn(async move {
            let mut got = vec![];
            server.read_to_end(&mut got).await.map(|_| got)
        });
        let (mut onward, edge, hand) = beside_the_edge();
        onward.write_all(&[1; 1000]).await.expect("into the edge's side");
        {
            // The edge's side holds 1,024 bytes and nobody reads it: this waits for the far end.
            let mut second = std::pin::pin!(onward.write_all(&[2; 3000]));
            assert!(waits(second.as_mut()).await, "the second write waits for room");
            hand.send((far.into_split().1, edge)).map_err(drop).expect("handed over");
            second.await.expect("on, once handed over");
        }
        onward.write_all(&[3; 10]).await.expect("to the far end");
        onward.end().await;
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), reading)
            .await
            .expect("the far end reads the end")
            .expect("the reader")
            .expect("read");
        assert_eq!(got, [vec![1; 1000], vec![2; 3000], vec![3; 10]].concat());
    }

    #[tokio::test]
    async fn a_container_done_before_the_hand_over_ends_the_far_end_after_it_and_an_edge_that_keeps_it_ends_it_there() {
        // Handed over after the container's end: what it sent, then the end.
        let (far, mut server) = far_pair().await;
        let (mut onward, edge, hand) = beside_the_edge();
        onward.write_all(b"GET / HTTP/1.1\r\n\r\n").await.expect("written");
        let mut ending = std::pin::pin!(onward.end());
        assert!(waits(ending.as_mut()).await, "the end waits for the hand-over");
        hand.send((far.into_split().1, edge)).map_err(drop).expect("handed over");
        ending.await;
        let mut got = vec![];
        server.read_to_end(&mut got).await.expect("read");
        assert_eq!(got, b"GET / HTTP/1.1\r\n\r\n");
        // Never handed over (the edge reads the connection itself): the end is the edge's to read.
        let (mut onward, mut edge, hand) = beside_the_edge();
        onward.write_all(b"hello").await.expect("written");
        drop(hand);
        onward.end().await;
        let mut got = vec![];
        edge.read_to_end(&mut got).await.expect("read");
        assert_eq!(got, b"hello");
    }

    #[test]
    fn a_tunnel_sent_past_its_window_is_cut_off() {
        let tunnels = RelayTunnels::default();
        let Reserved { closed, received: _unread, .. } = tunnels.reserve(1).expect("reserved");
        // Counted in bytes: many small chunks are welcome until they add up.
        for _ in 0..TUNNEL_WINDOW / 1024 {
            assert!(tunnels.data(1, vec![0; 1024]));
        }
        assert!(!tunnels.data(1, vec![0; 8]));
        assert!(closed.is_cancelled());
    }
}
