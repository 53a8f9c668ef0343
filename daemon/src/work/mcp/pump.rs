//! What carries an MCP server's relay stream: its stdin and stdout to and from rmcp's pipe, its
//! stderr lines to the log (at most 100 every 10 s) and its connections out to the tunnels (at
//! most 120 a minute).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::task::TaskTracker;

use super::relay::{Attached, Down, Up, MAX_MESSAGE};
use super::stderr::Stderr;
use crate::guard::limits::Allowance;
use crate::net::egress::relay::Relay;
use crate::work::health::ProbeSlot;

/// Carries bytes between the relay's stream and `theirs` (the far end of rmcp's pipe); the
/// server's stderr lines go to the log (at most 100 every 10 s) and the last of them to
/// `stderr`, and its connections out are opened (at most 120 a minute).
pub(super) fn pump(
    attached: Attached,
    probe: Arc<ProbeSlot>,
    theirs: tokio::io::DuplexStream,
    (server, relay): (String, Arc<Relay<Down>>),
    stderr: Stderr,
    tracker: &TaskTracker,
) {
    let Attached { down, mut up, identity } = attached;
    let container = identity.name.clone();
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
    tracker.spawn(async move {
        use tokio_stream::StreamExt as _;
        let mut log_lines = Allowance::new(100, Duration::from_secs(10));
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
                Ok(Up::Tunnel(tunnel)) => {
                    if !relay.take(tunnel).await {
                        break;
                    }
                }
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
        relay.clear();
        // rmcp sees the end of the server's output.
        // silent-ok: the pipe may already be closed.
        let _ = to_client.shutdown().await;
    });
}
