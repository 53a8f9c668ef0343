//! An MCP server's connections out: its relay listens for HTTP CONNECT in the server's
//! container and opens a tunnel for each over the relay's stream; the daemon checks each
//! against the server's `egress` list and the web proxy's address filter, connects, and
//! carries the bytes both ways. One audit record per connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::Server;
use super::relay::Down;
use crate::audit::{Audit, Kind, Record};
use crate::auth::{Caller, ContainerIdentity};
use crate::egress::proxy::WebProxy;

/// What a relay's tunnels need: the server (its egress list), the proxy that checks and opens
/// connections, and the audit log.
pub(super) struct Egress {
    pub(super) server: Server,
    pub(super) web: Arc<WebProxy>,
    pub(super) audit: Audit,
}

/// The daemon's end of one tunnel: bytes for its connection's writer (none once the relay has
/// no more), what tears it down, and which open it belongs to.
struct Tunnel {
    bytes: Option<mpsc::Sender<Vec<u8>>>,
    closed: CancellationToken,
    generation: u64,
}

/// One relay's tunnels, by the relay's id (apart from `egress::tunnel::Tunnels`, the CONNECT
/// front-end of gateways and skill installs).
#[derive(Clone, Default)]
pub(super) struct RelayTunnels(Arc<Mutex<(u64, HashMap<u64, Tunnel>)>>);

/// The most tunnels one server may have open at once.
const MAX_TUNNELS: usize = 32;
/// Chunks buffered toward one tunnel's far end; a far end that does not read is cut off.
const TUNNEL_BUFFER: usize = 64;

impl RelayTunnels {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, HashMap<u64, Tunnel>)> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reserves `id` before its connection is made; why not, when it cannot be.
    fn reserve(&self, id: u64) -> Result<(u64, mpsc::Receiver<Vec<u8>>, CancellationToken), String> {
        let mut state = self.lock();
        let (generation, open) = &mut *state;
        if open.contains_key(&id) {
            return Err(format!("tunnel {id} is already open"));
        }
        if open.len() >= MAX_TUNNELS {
            return Err(format!("the server has {MAX_TUNNELS} connections open; close one first"));
        }
        *generation += 1;
        let (bytes, received) = mpsc::channel(TUNNEL_BUFFER);
        let closed = CancellationToken::new();
        open.insert(id, Tunnel { bytes: Some(bytes), closed: closed.clone(), generation: *generation });
        Ok((*generation, received, closed))
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

    /// Bytes from the relay for tunnel `id`; false when its far end does not keep up (the
    /// tunnel is then torn down).
    pub(super) fn data(&self, id: u64, data: Vec<u8>) -> bool {
        let mut state = self.lock();
        let Some(Tunnel { bytes: Some(bytes), closed, .. }) = state.1.get(&id) else { return true };
        if bytes.try_send(data).is_ok() {
            return true;
        }
        closed.cancel();
        state.1.remove(&id);
        false
    }

    /// The relay's end of tunnel `id`: no more bytes (`write_only`), or gone.
    pub(super) fn closed(&self, id: u64, write_only: bool) {
        let mut state = self.lock();
        if write_only {
            if let Some(tunnel) = state.1.get_mut(&id) {
                tunnel.bytes.take();
            }
        } else if let Some(tunnel) = state.1.remove(&id) {
            tunnel.closed.cancel();
        }
    }

    /// The relay is gone: so are its tunnels.
    pub(super) fn clear(&self) {
        for (_, tunnel) in self.lock().1.drain() {
            tunnel.closed.cancel();
        }
    }
}

pub(super) fn down_close(id: u64, write_only: bool) -> Down {
    Down::Close { id, write_only }
}

impl Egress {
    /// Opens the tunnel `open` when the server's `egress` names its host and the proxy's address
    /// checks pass; the answer goes down, then the connection's bytes. One audit record each.
    pub(super) async fn open(
        &self,
        (id, host, asked_port): (u64, String, u32),
        identity: &ContainerIdentity,
        down: mpsc::Sender<Down>,
        tunnels: RelayTunnels,
        tracker: &TaskTracker,
    ) {
        let host = host.to_ascii_lowercase();
        let record = Record::by(Kind::Egress, &Caller::Container(Arc::new(identity.clone())), "")
            .detail("mcp_server", self.server.name.as_str())
            .detail("host", host.as_str())
            .detail("port", asked_port);
        let reply = |refused: String| Down::Opened { id, refused };
        let (generation, mut received, closed) = match tunnels.reserve(id) {
            Ok(reserved) => reserved,
            Err(why) => {
                // silent-ok: the relay may be gone.
                let _ = down.send(reply(why)).await;
                return;
            }
        };
        let port = u16::try_from(asked_port).unwrap_or(0);
        let connected = if port == 0 {
            Err((false, format!("port {asked_port} is not a TCP port")))
        } else if !self.server.egress_allows(&host, port) {
            let listed =
                if self.server.config.egress.is_empty() { "none".into() } else { self.server.config.egress.join(", ") };
            Err((
                true,
                format!("{host}:{port} is not in the egress list of MCP server `{}` ({listed})", self.server.name),
            ))
        } else {
            tokio::select! {
                connected = self.web.connect_checked(&host, port) => {
                    connected.map_err(|error| (error.is_refusal(), error.to_string()))
                }
                () = closed.cancelled() => Err((false, "the server gave up on the connection".into())),
            }
        };
        let stream = match connected {
            Ok(stream) => stream,
            Err((refused, why)) => {
                tunnels.end(id, generation);
                let outcome = if refused { "refused" } else { "failed" };
                self.audit.record(Record { outcome: outcome.into(), ..record }.detail("reason", why.as_str()));
                tracing::warn!(server = %self.server.name, %host, port, %why, "an MCP server's connection was not opened");
                // silent-ok: the relay may be gone.
                let _ = down.send(reply(why)).await;
                return;
            }
        };
        self.audit.record(Record { outcome: "allowed".into(), ..record });
        let (mut reader, mut writer) = stream.into_split();
        if down.send(reply(String::new())).await.is_err() {
            return tunnels.end(id, generation);
        }
        let writing = closed.clone();
        tracker.spawn(async move {
            loop {
                tokio::select! {
                    bytes = received.recv() => match bytes {
                        Some(bytes) => if writer.write_all(&bytes).await.is_err() { break },
                        // The relay has no more: the far end reads the end.
                        None => break,
                    },
                    () = writing.cancelled() => return,
                }
            }
            // silent-ok: the far end may be gone.
            let _ = writer.shutdown().await;
        });
        let mut buffer = vec![0u8; 32 * 1024];
        let whole = loop {
            let n = tokio::select! {
                () = closed.cancelled() => return,
                read = reader.read(&mut buffer) => match read {
                    Ok(0) => break true,
                    Err(_) => break false,
                    Ok(n) => n,
                },
            };
            let data = Down::Data { id, data: buffer[..n].to_vec() };
            if down.send(data).await.is_err() {
                return tunnels.end(id, generation);
            }
        };
        if whole {
            // The far end is done sending; the relay's side may still be, until it closes.
            // silent-ok: the relay may be gone.
            let _ = down.send(down_close(id, true)).await;
            closed.cancelled().await;
        } else {
            tunnels.end(id, generation);
            // silent-ok: as above.
            let _ = down.send(down_close(id, false)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tunnel_id_is_reserved_once_and_ended_by_its_own_open_only() {
        let tunnels = RelayTunnels::default();
        let (first, _bytes, closed) = tunnels.reserve(7).expect("reserved");
        assert_eq!(tunnels.reserve(7).map(drop), Err("tunnel 7 is already open".to_string()));
        // The relay closes it; a new open takes the id; the old open's end leaves it alone.
        tunnels.closed(7, false);
        assert!(closed.is_cancelled());
        let (second, _bytes, reopened) = tunnels.reserve(7).expect("reserved again");
        tunnels.end(7, first);
        assert!(!reopened.is_cancelled());
        tunnels.end(7, second);
        assert!(reopened.is_cancelled());
        for id in 0..MAX_TUNNELS as u64 {
            tunnels.reserve(id).expect("room");
        }
        assert!(tunnels.reserve(99).expect_err("full").contains("connections open"));
    }

    #[test]
    fn a_tunnel_whose_far_end_does_not_read_is_cut_off() {
        let tunnels = RelayTunnels::default();
        let (_, _unread, closed) = tunnels.reserve(1).expect("reserved");
        for _ in 0..TUNNEL_BUFFER {
            assert!(tunnels.data(1, vec![0; 8]));
        }
        assert!(!tunnels.data(1, vec![0; 8]));
        assert!(closed.is_cancelled());
    }
}
