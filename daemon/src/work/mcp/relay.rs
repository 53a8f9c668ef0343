//! An MCP server's relay (`baaaht-agent mcp`, its container's init), as the daemon speaks to
//! it over RelayMcp: the launch goes down, then the bytes of the server's stdin; its stdout,
//! stderr lines, exit and connections out come up. `server/` turns these into the wire's
//! `McpDown`/`McpUp`.

use std::collections::HashMap;

use tokio::sync::mpsc;

use crate::base::auth::ContainerIdentity;
use crate::net::egress::relay::{TunnelDown, TunnelUp};
use crate::work::health;
use crate::work::peers::StreamError;

/// The longest message from a server the daemon takes.
pub(super) const MAX_MESSAGE: usize = 4 << 20;

/// What the daemon sends a relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Down {
    /// Start the server.
    Launch(Launch),
    /// Bytes for the server's standard input (newline-delimited JSON-RPC).
    Stdin(Vec<u8>),
    Probe(health::Probe),
    /// About a connection the server opened.
    Tunnel(TunnelDown),
}

impl From<TunnelDown> for Down {
    fn from(tunnel: TunnelDown) -> Down {
        Down::Tunnel(tunnel)
    }
}

/// How a relay starts its server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub command: String,
    pub args: Vec<String>,
    /// The server's whole environment besides PATH and HOME (secrets resolved).
    pub env: HashMap<String, String>,
    /// Whether the server may reach the network (through the relay's tunnels).
    pub egress: bool,
}

/// What a relay sends the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Up {
    /// Bytes of the server's standard output.
    Stdout(Vec<u8>),
    /// One line of its standard error (its log).
    Stderr(String),
    /// It ended: its exit code (-1 for a signal) and the signal's name.
    Exited {
        code: i32,
        signal: String,
    },
    Health(health::Answer),
    /// About a connection the server opens.
    Tunnel(TunnelUp),
    /// Anything else it says (its greeting).
    Other,
}

/// What a relay sends up, as the daemon reads it: a broken stream is why it broke.
pub type Ups = Box<dyn tokio_stream::Stream<Item = Result<Up, StreamError>> + Unpin + Send>;

/// A relay that connected and waits to be claimed by the start that made its container.
pub(super) struct Attached {
    pub(super) down: mpsc::Sender<Down>,
    pub(super) up: Ups,
    pub(super) identity: ContainerIdentity,
}
