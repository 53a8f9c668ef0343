//! The options every chat gateway takes from the daemon that runs it (or from whoever runs it
//! by hand): its socket and token, the health socket the daemon probes, the egress socket that
//! is a container's only way out, and the daemon's pid to stop with.

use std::path::PathBuf;
use std::sync::Arc;

use crate::egress::Egress;

#[derive(Debug, Clone, clap::Args)]
pub struct Supervised {
    /// The gateway's socket (data/gateways/{name}/daemon.sock)
    #[arg(long, env = "BAAAHT_GATEWAY_SOCKET", value_name = "PATH")]
    pub socket: PathBuf,
    /// A file holding the gateway's token (printed once by `baaahtd gateways add`); else
    /// $BAAAHT_GATEWAY_TOKEN
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// Serve the gateway's health (ContainerHealth) on this Unix socket, for the daemon that
    /// supervises it
    #[arg(long, value_name = "PATH")]
    pub health_socket: Option<PathBuf>,
    /// Reach the channel's service through the daemon's egress socket (CONNECT host:port)
    /// instead of directly: how the gateway runs in its container, which has no network
    #[arg(long, value_name = "PATH")]
    pub egress_socket: Option<PathBuf>,
    /// Stop when this process is no longer the parent (a host child of a daemon that died)
    #[arg(long, value_name = "PID")]
    pub parent: Option<u32>,
    /// Only check these arguments and exit (0: usable)
    #[arg(long)]
    pub check: bool,
}

impl Supervised {
    /// Where the gateway's connections go.
    pub fn egress(&self) -> Egress {
        match &self.egress_socket {
            Some(path) => Egress::Tunnel(Arc::new(path.clone())),
            None => Egress::Direct,
        }
    }
}
