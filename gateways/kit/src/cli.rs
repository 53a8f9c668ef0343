//! The options every chat gateway takes from the daemon that runs it (or from whoever runs it
//! by hand): its socket and token, the health socket the daemon probes, the egress socket that
//! is a container's only way out, and the daemon's pid to stop with.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
    /// Seconds without the channel's service before the gateway calls itself unhealthy (120 s,
    /// Slack's 60 s, when not given)
    #[arg(long, value_name = "SECONDS")]
    pub unhealthy_after: Option<u64>,
    /// Only check these arguments and exit (0: usable)
    #[arg(long)]
    pub check: bool,
}

/// A chat gateway's `main`: TLS by ring, logs to stderr, `run` on a tokio runtime, and the
/// process's exit code from what it returned (an error's sentence printed as `name: …`).
pub fn main<F>(name: &str, run: impl FnOnce() -> F) -> std::process::ExitCode
where
    F: std::future::Future<Output = Result<(), String>>,
{
    baaaht_proto::lifecycle::use_ring_for_tls();
    baaaht_proto::lifecycle::log_to_stderr();
    let outcome = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(run()),
        Err(error) => Err(format!("cannot start the async runtime: {error}")),
    };
    baaaht_proto::lifecycle::exit(name, outcome)
}

impl Supervised {
    /// The gateway's health: unhealthy after `--unhealthy-after` seconds (else `default`)
    /// without `service`.
    pub fn health(&self, service: &str, default: Duration) -> Arc<crate::health::Health> {
        crate::health::Health::new(service, self.unhealthy_after.map_or(default, Duration::from_secs))
    }

    /// Where the gateway's connections go.
    pub fn egress(&self) -> Egress {
        match &self.egress_socket {
            Some(path) => Egress::Tunnel(Arc::new(path.clone())),
            None => Egress::Direct,
        }
    }
}

impl Supervised {
    /// Serves the gateway's health on `--health-socket` (when given), then connects to the
    /// daemon and takes the credential `key` from its secrets store: the client and the value,
    /// or `missing` (a sentence saying what to store) when there is none.
    pub async fn start(
        &self,
        health: &Arc<crate::health::Health>,
        key: &str,
        missing: &str,
    ) -> Result<(baaaht_proto::client::Client, String), String> {
        if let Some(path) = &self.health_socket {
            baaaht_proto::lifecycle::serve_health(health.clone(), path)?;
        }
        let mut daemon = baaaht_proto::client::connect_gateway(&self.socket, self.token_file.as_deref()).await?;
        let secrets = daemon
            .gateways
            .get_gateway_secrets(baaaht_proto::v1::GatewaySecretsRequest {})
            .await
            .map_err(|status| format!("the daemon gave no {key}: {}", status.message()))?
            .into_inner()
            .secrets;
        match secrets.get(key).filter(|value| !value.is_empty()) {
            Some(value) => Ok((daemon, value.clone())),
            None => Err(missing.to_string()),
        }
    }

    /// Runs `work` until the gateway is asked to stop (a signal, or its parent gone).
    pub async fn run_until_stopped(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        let running = tokio::spawn(work);
        let why = baaaht_proto::lifecycle::stop_requested(self.parent).await;
        tracing::info!(why, "stopping");
        running.abort();
    }
}
