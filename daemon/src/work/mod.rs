//! The workers and their supervision: the agent pool and its peers, tool calls and tool
//! containers, MCP servers, skills, the file-based IPC folders and their system files,
//! container health, and the
//! gateways the daemon runs. It imports people/ and below.

pub mod agents;
pub mod gateways;
pub mod health;
pub mod ipc;
pub mod mcp;
pub mod peers;
pub mod skills;
pub mod slots;
pub mod system_files;
pub mod tools;
pub mod warm;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::base::auth::Role;
use crate::base::{datadir, Base};
use crate::guard::{secrets, Guard};
use crate::net::Net;
use crate::sandbox::{workspace, Sandbox};
use crate::store::Store;

#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    #[error("cannot open the file-IPC folder {}", path.display())]
    Ipc {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Gateways(#[from] gateways::GatewayError),
}

/// The work wing, opened.
#[derive(Debug)]
pub struct Workers {
    pub ipc: Arc<ipc::Ipc>,
    pub tools: Arc<tools::Runners>,
    /// The one road to a tool: every call an agent asks for.
    pub tool_calls: Arc<tools::call::Calls>,
    pub mcp: Arc<mcp::pool::McpPool>,
    pub agents: Arc<agents::AgentPool>,
    /// Containers started ahead of demand, for new sessions to claim.
    pub warm: Arc<warm::WarmPools>,
    /// The last health verdict on each probed container.
    pub health: Arc<health::Board>,
    /// Tells the admins what the daemon did on its own (restarts).
    pub notifier: Arc<health::Notifier>,
    /// The registered gateways (web, Slack, …).
    pub gateways: Arc<gateways::Registry>,
    /// The gateways the daemon runs itself.
    pub supervisors: Arc<gateways::supervise::Supervisors>,
}

impl Workers {
    pub fn open(base: &Base, guard: &Guard, sandbox: &Sandbox, store: &Store, net: &Net) -> Result<Workers, WorkError> {
        let (loaded, data_dir, tracker) = (&base.loaded, &base.data_dir, &base.lifetime.tasks);
        // Where workspaces get a filesystem of their own, so do the IPC folders.
        let filesystems = sandbox.workspaces.enforcement() == workspace::Enforcement::Filesystem;
        let ipc = ipc::Ipc::open(data_dir.ipc_dir(), &data_dir.state_dir(), filesystems)
            .map_err(|source| WorkError::Ipc { path: data_dir.ipc_dir(), source })?;
        ipc.redact_with(guard.redact.clone());
        let ipc = Arc::new(ipc);
        let pools = &loaded.config.container;
        let sizes = Role::AGENTS.iter().chain([&Role::Tool]).map(|role| (*role, pools.pool_of(*role)));
        let warm = Arc::new(warm::WarmPools::new(sandbox.containers.clone(), sizes));
        // What pooled tool containers of an earlier daemon held (the containers themselves go
        // at the reconcile).
        sandbox.workspaces.clear_pool();
        let tools = Arc::new(tools::Runners::new(tools::Setup {
            containers: sandbox.containers.clone(),
            policy: sandbox.policy.clone(),
            ipc: ipc.clone(),
            workspaces: sandbox.workspaces.clone(),
            data_dir: data_dir.clone(),
            skill_dirs: loaded.config.skills.directories.clone(),
            idle: Duration::from_secs(loaded.config.tools.warm_idle_timeout),
            web: net.web.clone(),
            audit: guard.audit.clone(),
            inbox: store.inbox.clone(),
            approvals: net.approvals.clone(),
            taints: net.taints.clone(),
            edge: net.edge.clone(),
            values: guard.redact.shield().clone(),
            tracker: tracker.clone(),
            warm: warm.clone(),
            browser: loaded.config.tools.browser.clone(),
        }));
        tools.fill_pool();
        let mcp = Arc::new(mcp::pool::McpPool::new(mcp::pool::Setup {
            containers: sandbox.containers.clone(),
            web: net.web.clone(),
            audit: guard.audit.clone(),
            state_dir: data_dir.state_dir(),
            policy: sandbox.policy.clone(),
            states: sandbox.mcp_states.clone(),
            workspaces: sandbox.workspaces.clone(),
            tracker: tracker.clone(),
        }));
        let idle_after = Duration::from_secs(loaded.config.sessions.idle_after.max(60));
        let agents =
            Arc::new(agents::AgentPool::new(sandbox.containers.clone(), warm.clone(), idle_after, tracker.clone()));
        let tool_calls = Arc::new(tools::call::Calls {
            runners: tools.clone(),
            mcp: mcp.clone(),
            policy: sandbox.policy.clone(),
            ipc: ipc.clone(),
            secrets: secrets::Handout::new(guard.secrets.clone(), secrets::Rules::of(loaded), guard.audit.clone()),
            audit: guard.audit.clone(),
            metrics: base.metrics.clone(),
            loaded: loaded.clone(),
            data_dir: data_dir.clone(),
            events: store.events.clone(),
            agents: agents.clone(),
            taints: net.taints.clone(),
            approvals: net.approvals.clone(),
            redact: guard.redact.clone(),
            undo: store.undo.clone(),
        });
        let admins = loaded.config.system.admin_users.clone();
        let notifier = Arc::new(health::Notifier::new(
            store.inbox.clone(),
            store.events.clone(),
            admins,
            loaded.config.orchestrator.health_check.notify_channel,
            data_dir.clone(),
        ));
        let gateways = Arc::new(gateways::Registry::open(&data_dir.state_dir(), data_dir.gateways_dir())?);
        let supervisors = Arc::new(gateways::supervise::Supervisors::new(gateways::supervise::Supervision {
            containers: sandbox.containers.clone(),
            listeners: sandbox.listeners.clone(),
            engine: sandbox.engine.subscribe(),
            binaries_dir: base.binaries.clone(),
            gateways_dir: data_dir.gateways_dir(),
            state_dirs: data_dir.state_dir().join(datadir::GATEWAY_STATE),
            health: loaded.config.orchestrator.health_check.clone(),
            web: net.web.clone(),
            audit: guard.audit.clone(),
            metrics: base.metrics.clone(),
            notifier: notifier.clone(),
            cancel: CancellationToken::new(),
            tracker: tracker.clone(),
        }));
        Ok(Workers {
            ipc,
            tools,
            tool_calls,
            mcp,
            agents,
            warm,
            health: Arc::default(),
            notifier,
            gateways,
            supervisors,
        })
    }
}
