//! What carries an MCP server's relay stream: its stdin and stdout to and from rmcp's pipe, its
//! stderr lines to the log (at most 100 every 10 s) and its connections out to the tunnels (at
//! most 120 a minute).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::task::TaskTracker;

use super::relay::{Attached, Down, Up, MAX_MESSAGE};
use super::stderr::Stderr;
use super::tunnels::{down_close, Egress, RelayTunnels};
use crate::health::ProbeSlot;

/// At most `limit` of something per `period`, counting what was turned away.
pub(super) struct Rate {
    limit: u32,
    period: Duration,
    since: Instant,
    used: u32,
    refused: u64,
}

impl Rate {
    pub(super) fn new(limit: u32, period: Duration) -> Rate {
        Rate { limit, period, since: Instant::now(), used: 0, refused: 0 }
    }

    /// Whether one more fits; when a new period begins, how many the last one turned away.
    pub(super) fn take(&mut self) -> (bool, u64) {
        self.take_at(Instant::now())
    }

    fn take_at(&mut self, now: Instant) -> (bool, u64) {
        let mut turned_away = 0;
        if now.duration_since(self.since) >= self.period {
            turned_away = std::mem::take(&mut self.refused);
            self.since = now;
            self.used = 0;
        }
        if self.used < self.limit {
            self.used += 1;
            (true, turned_away)
        } else {
            self.refused += 1;
            (false, turned_away)
        }
    }
}

/// Carries bytes between the relay's stream and `theirs` (the far end of rmcp's pipe); the
/// server's stderr lines go to the log (at most 100 every 10 s) and the last of them to
/// `stderr`, and its connections out are opened (at most 120 a minute).
pub(super) fn pump(
    attached: Attached,
    probe: Arc<ProbeSlot>,
    theirs: tokio::io::DuplexStream,
    egress: Egress,
    stderr: Stderr,
    tracker: &TaskTracker,
) {
    let Attached { down, mut up, identity } = attached;
    let (server, container) = (egress.server.name.clone(), identity.name.clone());
    let egress = Arc::new(egress);
    let tunnels = RelayTunnels::default();
    let (mut from_client, mut to_client) = tokio::io::split(theirs);
    let stdin = down.clone();
    tracker.spawn(async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            match from_client.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if stdin.send(Down::Stdin(buffer[..n].to_vec())).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let opening = tracker.clone();
    tracker.spawn(async move {
        use tokio_stream::StreamExt as _;
        let mut log_lines = Rate::new(100, Duration::from_secs(10));
        let mut opens = Rate::new(120, Duration::from_secs(60));
        // A message longer than the client takes is answered with its beginning at once.
        let mut lines = super::limits::Lines::new(MAX_MESSAGE);
        while let Some(message) = up.next().await {
            match message {
                Ok(Up::Stdout(bytes)) => {
                    let whole = lines.push(&bytes);
                    if !whole.is_empty() && to_client.write_all(&whole).await.is_err() {
                        break;
                    }
                }
                Ok(Up::Health(answer)) => probe.answer(answer),
                Ok(Up::Open { id, host, port }) => {
                    let (fits, turned_away) = opens.take();
                    if turned_away > 0 {
                        tracing::warn!(server = %server, container = %container, turned_away, "an MCP server opened more than 120 connections a minute; the rest were refused");
                    }
                    if !fits {
                        let refused = "more than 120 connections a minute; try again later".to_string();
                        if down.send(Down::Opened { id, refused }).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    let (egress, identity, down, tunnels) =
                        (egress.clone(), identity.clone(), down.clone(), tunnels.clone());
                    let writers = opening.clone();
                    opening.spawn(async move { egress.open((id, host, port), &identity, down, tunnels, &writers).await });
                }
                Ok(Up::Data { id, data }) => {
                    if !tunnels.data(id, data) && down.send(down_close(id, false)).await.is_err() {
                        break;
                    }
                }
                Ok(Up::Close { id, write_only }) => tunnels.closed(id, write_only),
                Ok(Up::Stderr(line)) => {
                    let line = stderr.push(&line);
                    let (fits, turned_away) = log_lines.take();
                    if turned_away > 0 {
                        tracing::warn!(server = %server, container = %container, turned_away, "an MCP server wrote more than 100 log lines in 10 s; the rest were not logged");
                    }
                    if fits {
                        tracing::info!(server = %server, container = %container, line = %line, "MCP server log");
                    }
                }
                Ok(Up::Exited { code, signal }) => {
                    let _ = stderr.push(&match signal.as_str() {
                        "" => format!("(it exited with code {code})"),
                        signal => format!("(it was ended by {signal})"),
                    });
                    tracing::warn!(server = %server, container = %container, code, %signal, "MCP server exited");
                    break;
                }
                Ok(Up::Other) => {}
                Err(error) => {
                    tracing::warn!(server = %server, container = %container, %error, "MCP relay stream broke");
                    break;
                }
            }
        }
        // The server is gone: so are its connections.
        stderr.ended();
        tunnels.clear();
        // rmcp sees the end of the server's output.
        // silent-ok: the pipe may already be closed.
        let _ = to_client.shutdown().await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_counts_what_it_turned_away() {
        let mut rate = Rate::new(2, Duration::from_secs(10));
        let start = rate.since;
        let mut at = |seconds| rate.take_at(start + Duration::from_secs(seconds));
        assert_eq!([at(0), at(1), at(2), at(9)], [(true, 0), (true, 0), (false, 0), (false, 0)]);
        assert_eq!([at(10), at(11)], [(true, 2), (true, 0)]);
    }
}
