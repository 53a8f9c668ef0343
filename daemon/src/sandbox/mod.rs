//! Where untrusted code runs: the container engines and the manager of every container, the
//! hardening policy each gets, the workspaces and shared folders it may see, and the sockets
//! through which a container (or a gateway) reaches the daemon. It imports guard/ and base/.

pub mod container;
pub mod policy;
pub mod shared_dirs;
pub mod sockets;
pub mod workspace;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::base::auth::Role;
use crate::base::Base;
use crate::guard::Guard;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(transparent)]
    Policy(#[from] policy::PolicyError),
    #[error(transparent)]
    Container(#[from] container::manager::ContainerError),
}

/// Every socket's connections, tagged with where they came in, for the gRPC server.
pub type Incoming = tokio_stream::wrappers::ReceiverStream<std::io::Result<sockets::Conn>>;

/// The sandbox wing, opened.
#[derive(Debug)]
pub struct Sandbox {
    pub listeners: Arc<sockets::ListenerSet>,
    /// The container engine as last probed (the watcher sends, everyone else reads).
    pub engine: Arc<watch::Sender<container::Engine>>,
    pub policy: Arc<policy::Policy>,
    pub containers: Arc<container::manager::ContainerManager>,
    /// Sessions' workspaces, capped at the tool role's disk limit.
    pub workspaces: Arc<workspace::Workspaces>,
    /// The MCP servers' own folders (`state: true`), capped at the MCP role's disk limit.
    pub mcp_states: Arc<workspace::Workspaces>,
}

impl Sandbox {
    /// The socket set (and the connections it takes), the hardening policy, the container
    /// manager (waiting for the engine's first probe) and the workspaces.
    pub fn open(base: &Base, guard: &Guard) -> Result<(Sandbox, Incoming), SandboxError> {
        let (loaded, data_dir) = (&base.loaded, &base.data_dir);
        let container = &loaded.config.container;
        let limits = sockets::ConnectionLimits::for_descriptors(crate::guard::limits::raise_descriptor_limit());
        let (listeners, incoming) = sockets::ListenerSet::new(
            data_dir.container_sockets_dir(),
            limits,
            guard.audit.clone(),
            base.lifetime.shutdown.clone(),
            base.lifetime.tasks.clone(),
        );
        let engine = Arc::new(watch::channel(container::Engine::probing()).0);
        let policy = Arc::new(policy::Policy::new(loaded)?);
        let cap = container.cap();
        tracing::info!(cap, asked = ?container.max_concurrent, "container cap");
        let slots = container::manager::Slots::new(cap, Duration::from_secs(container.queue_timeout));
        let containers = container::manager::ContainerManager::new(
            engine.clone(),
            policy.clone(),
            listeners.clone(),
            data_dir.clone(),
            container.image.clone(),
            base.binaries.join("baaaht-agent"),
            slots,
        )?;
        let containers = Arc::new(containers.with_metrics(base.metrics.clone()));
        let workspaces = Arc::new(workspace::Workspaces::new(
            data_dir.root().join("sessions"),
            policy.resource_limits(Role::Tool).disk_bytes,
            loaded.config.tools.workspace_limit,
            // Tool containers hold at most a slot each; uploads in flight are few per gateway.
            (cap as usize * 4).max(64),
        ));
        let mcp_states = Arc::new(workspace::Workspaces::new(
            data_dir.root().join("data/mcp-state"),
            policy.resource_limits(Role::Mcp).disk_bytes,
            loaded.config.tools.workspace_limit,
            (cap as usize).max(16),
        ));
        Ok((Sandbox { listeners, engine, policy, containers, workspaces, mcp_states }, incoming))
    }
}
