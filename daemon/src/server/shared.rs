//! What the gRPC handlers reach: the daemon's subsystems, wired together by the crate root.

use std::sync::Arc;

/// The daemon's subsystems, for the gRPC handlers at the edge and for wiring them together
/// in `Daemon`. Subsystems themselves are handed what they use (the orchestrator its
/// [`crate::drive::orchestrator::Orchestrator`], the scheduler its executor), never this.
#[derive(Debug)]
pub struct Shared {
    pub loaded: Arc<crate::base::config::LoadedConfig>,
    pub data_dir: crate::base::datadir::DataDir,
    pub metrics: Arc<crate::base::metrics::Metrics>,
    /// The data dir's disk as last read.
    pub disk: Arc<crate::base::disk::DiskGate>,
    pub audit: crate::guard::audit::Audit,
    /// The last health verdict on each probed container.
    pub health: Arc<crate::work::health::Board>,
    /// Tells the admins what the daemon did on its own (restarts).
    pub notifier: Arc<crate::work::health::Notifier>,
    pub engine: tokio::sync::watch::Receiver<crate::sandbox::container::Engine>,
    pub listeners: Arc<crate::sandbox::sockets::ListenerSet>,
    pub metrics_address: Option<std::net::SocketAddr>,
    pub policy: Arc<crate::sandbox::policy::Policy>,
    pub containers: Arc<crate::sandbox::container::manager::ContainerManager>,
    pub llm: Arc<crate::model::llm::LlmGateway>,
    pub speech: Arc<crate::model::speech::Speech>,
    /// The one road to the model: every model call the daemon makes or brokers.
    pub calls: Arc<crate::model::llm::call::Calls>,
    pub web: Arc<crate::net::egress::proxy::WebProxy>,
    pub tools: Arc<crate::work::tools::Runners>,
    /// The one road to a tool: every call an agent asks for.
    pub tool_calls: Arc<crate::work::tools::call::Calls>,
    pub mcp: Arc<crate::work::mcp::pool::McpPool>,
    pub ipc: Arc<crate::work::ipc::Ipc>,
    pub workspaces: Arc<crate::sandbox::workspace::Workspaces>,
    /// The road of a tool's web requests (ProxyWebRequest).
    pub web_road: Arc<crate::net::egress::web::Road>,
    pub events: Arc<crate::store::events::EventBus>,
    pub sessions: Arc<crate::store::sessions::SessionStore>,
    pub agents: Arc<crate::work::agents::AgentPool>,
    /// Containers started ahead of demand (`container.pools`).
    pub warm: Arc<crate::work::warm::WarmPools>,
    pub turns: Arc<crate::drive::orchestrator::Turns>,
    /// Turns, delegations, compaction and archival, over the subsystems they use.
    pub orchestrator: Arc<crate::drive::orchestrator::Orchestrator>,
    /// Every context's memory store.
    pub memory: Arc<crate::store::memory::Memories>,
    /// Every context's search index over its memory and its sessions' messages.
    pub recall: Arc<crate::store::recall::Recall>,
    /// The tainted turns and what they may no longer do.
    pub taints: Arc<crate::net::taint::Taints>,
    /// The secrets store, when it could be opened (read again when it changes): skills'
    /// `addons.env`, MCP servers' `env` and gateways' credentials come from it.
    pub secrets: Arc<crate::guard::secrets::LiveSecrets>,
    /// When the daemon stops, and what shutdown waits for ([`crate::base::lifetime::Lifetime::spawn`]).
    pub lifetime: crate::base::lifetime::Lifetime,
    /// The registered gateways (web, Slack).
    pub gateways: Arc<crate::work::gateways::Registry>,
    /// Connections waiting for someone to allow them in chat.
    pub approvals: Arc<crate::net::egress::approvals::Approvals>,
    /// The gateways the daemon runs itself.
    pub supervisors: Arc<crate::work::gateways::supervise::Supervisors>,
    /// Channel identities → canonical users.
    pub identities: Arc<crate::people::identities::Identities>,
    /// People waiting to be admitted.
    pub admissions: Arc<crate::people::admissions::Admissions>,
    pub groups: Arc<crate::people::groups::Groups>,
    /// Verifies the web gateway's ID tokens.
    pub oidc: Arc<crate::people::oidc::Verifier>,
    /// Spending limits per user and group.
    pub budgets: Arc<crate::model::budgets::Budgets>,
    /// Heartbeats, scheduled tasks and the daemon's own upkeep.
    pub scheduler: Arc<crate::drive::scheduler::Scheduler>,
    /// What was kept for contexts while none of their channels was there.
    pub inbox: Arc<crate::store::inbox::Inbox>,
    /// What every turn changed in its folders, and the undo of turns.
    pub undo: Arc<crate::store::undo::Undo>,
    /// What callers may hold at once and how often they may act.
    pub limits: crate::guard::limits::Limits,
}
