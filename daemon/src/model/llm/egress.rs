//! The LLM gateway's only way out, in its container: `egress.sock` in its folder, where it asks
//! for a tunnel with `CONNECT host:port HTTP/1.1` (as a chat gateway does, `gateways/egress.rs`).
//! The daemon opens one only to the hosts of the providers `providers.yaml` names (those on
//! the host's loopback go through their [`super::relay`] instead), through the address filter
//! with those hosts allowed whatever their address (an Ollama on the home network), never a
//! link-local or metadata address nor this machine's own (a name resolving to loopback is not
//! the provider it names); each tunnel is audited as `llm-gateway`. The container has
//! no network of its own: the gateway that holds every provider key reaches nothing else.

use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

use crate::guard::audit::Audit;
use crate::net::egress::proxy::WebProxy;
use crate::net::egress::tunnel::{Listener, Reach, Tunnels};

/// The socket, in the gateway's folder.
pub const EGRESS_SOCKET: &str = "egress.sock";
/// The most tunnels the gateway holds open at once (one per request in flight).
const MAX_TUNNELS: usize = 64;

/// The hosts (`host:port`) of the providers at `api_bases`, but for those on the host's
/// loopback, which are relayed.
pub fn provider_hosts<'a>(api_bases: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut hosts: Vec<String> = api_bases
        .into_iter()
        .filter(|api_base| super::relay::loopback_target(api_base).is_none())
        .filter_map(crate::people::oidc::host_port)
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// The tunnels of the LLM gateway: to `hosts` only, through `web` (the daemon's filter with
/// those hosts allowed), audited.
pub struct WayOut {
    tunnels: Arc<Tunnels>,
    tracker: TaskTracker,
}

impl WayOut {
    pub fn new(hosts: Vec<String>, web: WebProxy, audit: Audit, tracker: TaskTracker) -> WayOut {
        let web = Arc::new(web.allowing(&hosts).refusing_loopback());
        let mut tunnels =
            Tunnels::new("llm-gateway".into(), "the LLM gateway".into(), Reach::Listed(hosts), web, audit);
        tunnels.max_open = MAX_TUNNELS;
        WayOut { tunnels: Arc::new(tunnels), tracker }
    }

    /// Serves the egress socket in `folder` (made fresh for this start) until the guard is
    /// dropped.
    pub fn open(&self, folder: &Path) -> std::io::Result<DropGuard> {
        let path = folder.join(EGRESS_SOCKET);
        let listener = tokio::net::UnixListener::bind(&path)?;
        crate::sandbox::shared_dirs::share_socket(&path)?;
        let cancel = CancellationToken::new();
        self.tunnels.clone().serve(Listener::Unix(listener), cancel.clone(), &self.tracker);
        Ok(cancel.drop_guard())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_reaches_its_providers_hosts_and_the_loopback_ones_by_their_relay() {
        let api_bases = [
            "https://api.anthropic.com",
            "https://openrouter.ai/api/v1",
            "http://192.168.1.20:11434/v1",
            "http://127.0.0.1:8080/v1",
            "http://[::1]:8080/v1",
            "https://api.anthropic.com/v1",
        ];
        assert_eq!(
            provider_hosts(api_bases),
            ["192.168.1.20:11434", "api.anthropic.com:443", "openrouter.ai:443"].map(String::from)
        );
    }
}
