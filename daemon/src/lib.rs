//! baaahtd, the trusted host daemon: it serves the gRPC API on a Unix socket, brokers every
//! container's access, and is the single writer of the data dir's state.
//!
//! [`bind`] acquires the data dir and binds every listener; [`Daemon::run`] serves until the
//! shutdown future resolves, then drains within `orchestrator.shutdown_timeout`. Subsystems are
//! modules named after the nouns of DESIGN.md.

pub mod base;
pub mod cli;
pub mod drive;
pub mod guard;
pub mod model;
pub mod net;
pub mod ops;
pub mod people;
pub mod sandbox;
pub mod server;
pub mod store;
pub mod work;

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::base::auth::HostPolicy;
use crate::base::config::LoadedConfig;
use crate::base::datadir::{current_uid, DaemonLock, DataDir, MAX_SOCKET_PATH};
use crate::base::lifetime::Lifetime;
use crate::base::metrics::Metrics;
use crate::base::{auth, config, datadir, metrics, state, systemd};
use crate::drive::{orchestrator, scheduler};
use crate::guard::{audit, limits, redact, secrets};
use crate::model::{budgets, llm};
use crate::net::{egress, taint};
use crate::ops::{defaults, sampler};
use crate::people::{admissions, groups, identities, oidc};
use crate::sandbox::container::manager::ContainerManager;
use crate::sandbox::container::Engine;
use crate::sandbox::policy::Policy;
use crate::sandbox::sockets::{Conn, ListenerSet};
use crate::sandbox::{container, policy, sockets, workspace};
use crate::server::layer::{Gate, RequestLayer};
use crate::server::Shared;
use crate::store::{events, inbox, memory, recall, sessions};
use crate::work::{agents, gateways, health, ipc, mcp, tools};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    DataDir(#[from] datadir::DataDirError),
    #[error("socket path {} is {len} bytes, more than the {MAX_SOCKET_PATH} the kernel allows: use a shorter data dir", path.display())]
    SocketPathTooLong { path: PathBuf, len: usize },
    #[error("cannot bind the daemon socket {}", path.display())]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("orchestrator.socket.client_group: no group named `{0}` in /etc/group; create it or clear the setting")]
    NoSuchGroup(String),
    #[error(
        "cannot serve metrics on {address}: set metrics.listen to a free loopback port, or metrics.enabled: false"
    )]
    MetricsBind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot install default identities and skills")]
    Defaults(#[from] defaults::DefaultsError),
    #[error("the gRPC server failed")]
    Serve(#[source] tonic::transport::Error),
    #[error(transparent)]
    Policy(#[from] policy::PolicyError),
    #[error("cannot set up the web egress proxy: {0}")]
    WebProxy(String),
    #[error("security.redact.extra_patterns: {0}")]
    Redact(String),
    #[error(transparent)]
    Container(#[from] container::manager::ContainerError),
    #[error(transparent)]
    Gateways(#[from] gateways::GatewayError),
    #[error(transparent)]
    Identities(#[from] identities::IdentityError),
    #[error(transparent)]
    Groups(#[from] groups::GroupError),
    #[error("cannot open the scheduler (data/state/scheduler.json)")]
    Scheduler(#[source] scheduler::SchedulerError),
    #[error("cannot open the file-IPC folder {}", path.display())]
    Ipc {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Requests one connection may have in flight at once.
const MAX_STREAMS_PER_CONNECTION: u32 = 2048;

/// The listeners and the lock, acquired before the runtime serves anything.
#[derive(Debug)]
pub struct Bound {
    socket: std::os::unix::net::UnixListener,
    /// Where the host socket is served.
    socket_path: PathBuf,
    /// The link to it in the data dir, when it is served elsewhere.
    socket_link: Option<PathBuf>,
    metrics: Option<std::net::TcpListener>,
    client_group: Option<(String, u32)>,
    _lock: DaemonLock,
}

impl Bound {
    pub fn socket_path(&self) -> &std::path::Path {
        &self.socket_path
    }
}

/// Where the host socket is served: in systemd's runtime directory when the unit gives one
/// (`RuntimeDirectory=baaaht`: `/run/baaaht`, 0755, so that members of the client group reach
/// it while the data dir stays 0700), else in the data dir.
fn served_socket(data_dir: &DataDir, runtime_directory: Option<String>) -> PathBuf {
    match runtime_directory.filter(|value| value.starts_with('/')) {
        // systemd may pass several colon-separated folders; ours is the first.
        Some(folders) => Path::new(folders.split(':').next().unwrap_or(&folders)).join("orchestrator.sock"),
        None => data_dir.socket_path(),
    }
}

/// Removes what a daemon that died left at `path` (we hold the lock, so nothing serves it).
fn remove_stale(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {
            tracing::info!(socket = %path.display(), "replaced a stale socket left by a previous daemon");
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

/// Creates the data dir layout, takes the daemon lock, replaces a stale socket left by a crash
/// and binds the host socket (0660) and the metrics listener. A socket served outside the data
/// dir ([`served_socket`]) is linked from the data dir's usual place, where the daemon's own
/// tools and the CLI of its user look for it.
pub fn bind(data_dir: &DataDir, loaded: &LoadedConfig) -> Result<Bound, DaemonError> {
    data_dir.create_layout()?;
    let lock = data_dir.lock()?;
    let path = served_socket(data_dir, std::env::var("RUNTIME_DIRECTORY").ok());
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(DaemonError::SocketPathTooLong { path, len });
    }
    let bind_error = |source| DaemonError::Bind { path: path.clone(), source };
    let link = (path != data_dir.socket_path()).then(|| data_dir.socket_path());
    for stale in std::iter::once(&path).chain(&link) {
        remove_stale(stale).map_err(|source| DaemonError::Bind { path: stale.clone(), source })?;
    }
    let socket = std::os::unix::net::UnixListener::bind(&path).map_err(bind_error)?;
    socket.set_nonblocking(true).map_err(bind_error)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660)).map_err(bind_error)?;
    if let Some(link) = &link {
        std::os::unix::fs::symlink(&path, link).map_err(|source| DaemonError::Bind { path: link.clone(), source })?;
    }
    let group_name = &loaded.config.orchestrator.socket.client_group;
    let client_group = if group_name.is_empty() {
        None
    } else {
        let gid = baaaht_proto::host::group_named(group_name)
            .ok_or_else(|| DaemonError::NoSuchGroup(group_name.clone()))?
            .gid;
        std::os::unix::fs::chown(&path, None, Some(gid)).map_err(bind_error)?;
        if let Some(folder) = baaaht_proto::host::folder_closed_to_group(&path, gid) {
            tracing::warn!(
                socket = %path.display(),
                "members of group {group_name} cannot reach the socket: {} is closed to them; run under the \
                 shipped unit (it serves the socket in /run/baaaht), or open that folder to the group",
                folder.display()
            );
        }
        Some((group_name.clone(), gid))
    };
    let metrics = if loaded.config.metrics.enabled {
        let address = loaded.config.metrics.listen.0;
        let listener =
            std::net::TcpListener::bind(address).map_err(|source| DaemonError::MetricsBind { address, source })?;
        listener.set_nonblocking(true).map_err(|source| DaemonError::MetricsBind { address, source })?;
        Some(listener)
    } else {
        None
    };
    Ok(Bound { socket, socket_path: path, socket_link: link, metrics, client_group, _lock: lock })
}

/// The folder of baaaht's other binaries (`baaaht-agent`, `baaaht-llm-gateway`): from
/// `container.binaries_dir`, else beside the daemon's own executable.
fn binaries_dir(configured: &str) -> PathBuf {
    if configured.is_empty() {
        // silent-ok: whoever needs a binary reports it missing by its path
        std::env::current_exe().ok().and_then(|exe| exe.parent().map(PathBuf::from)).unwrap_or_default()
    } else {
        PathBuf::from(configured)
    }
}

/// A daemon ready to serve.
pub struct Daemon {
    shared: Arc<Shared>,
    cancel: CancellationToken,
    tracker: TaskTracker,
    host: tokio::net::UnixListener,
    incoming: tokio_stream::wrappers::ReceiverStream<std::io::Result<Conn>>,
    metrics_listener: Option<tokio::net::TcpListener>,
    engine: Arc<watch::Sender<Engine>>,
    bound: Bound,
}

impl Daemon {
    /// Prepares the daemon on `bound`; must be called inside the tokio runtime.
    pub fn new(loaded: LoadedConfig, data_dir: DataDir, mut bound: Bound) -> Result<Daemon, DaemonError> {
        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        let bind_error = |source| DaemonError::Bind { path: bound.socket_path.clone(), source };
        let host_std = bound.socket.try_clone().map_err(bind_error)?;
        let host = tokio::net::UnixListener::from_std(host_std).map_err(bind_error)?;
        let (metrics_listener, metrics_address) = match bound.metrics.take() {
            Some(listener) => {
                let address = listener
                    .local_addr()
                    .map_err(|source| DaemonError::MetricsBind { address: loaded.config.metrics.listen.0, source })?;
                let listener = tokio::net::TcpListener::from_std(listener)
                    .map_err(|source| DaemonError::MetricsBind { address, source })?;
                (Some(listener), Some(address))
            }
            None => (None, None),
        };
        let read = loaded.config.metrics.enabled || loaded.config.metrics.log;
        let metrics = Arc::new(if read { Metrics::default() } else { Metrics::off() });
        let audit = audit::Audit::open(
            data_dir.logs_dir().join("audit"),
            loaded.config.audit.enabled,
            loaded.config.audit.retention_days,
            metrics.clone(),
        );
        let connection_limits = sockets::ConnectionLimits::for_descriptors(limits::raise_descriptor_limit());
        let (listeners, incoming) = ListenerSet::new(
            data_dir.container_sockets_dir(),
            connection_limits,
            audit.clone(),
            cancel.clone(),
            tracker.clone(),
        );
        let (engine, engine_rx) = watch::channel(Engine::probing());
        let engine = Arc::new(engine);
        let policy = Arc::new(Policy::new(&loaded)?);
        let binaries = binaries_dir(&loaded.config.container.binaries_dir);
        let containers = Arc::new(
            ContainerManager::new(
                engine.clone(),
                policy.clone(),
                listeners.clone(),
                data_dir.clone(),
                loaded.config.container.image.clone(),
                binaries.join("baaaht-agent"),
                container::manager::Slots::new(
                    loaded.config.container.max_concurrent,
                    Duration::from_secs(loaded.config.container.queue_timeout),
                ),
            )?
            .with_metrics(metrics.clone()),
        );
        audit_config_change(&audit, &loaded, &data_dir.state_dir());
        let secrets = llm::open_secrets(&data_dir.config_dir());
        let settings = llm::gateway_settings(&loaded, secrets.as_ref(), |name| std::env::var(name).ok());
        if let Some(store) = &secrets {
            for (provider, entry) in loaded.providers.providers.configured() {
                let reference = entry.api_key.as_deref().unwrap_or_default();
                for name in secrets::reference_names(reference).filter(|name| store.get(name).is_some()) {
                    let record = audit::Record::new(audit::Kind::Secret, "daemon", "read");
                    audit.record(record.detail("name", name).detail("for", format!("LLM provider {provider}")));
                }
            }
        }
        let search = egress::search::Backend::from_config(&loaded.config.tools.web_proxy.search, |reference| {
            secrets::resolve_references(reference, secrets.as_ref(), |name| std::env::var(name).ok())
                .map(|key| key.to_string())
                .map_err(|error| match error {
                    secrets::SecretsError::Unresolved { name } => {
                        format!("${{{name}}} is neither in the secrets store nor in the environment: run `baaahtd secrets set {name}`")
                    }
                    other => other.to_string(),
                })
        });
        // Kept for the skills' `addons.env` (resolved per call, see `server/tools.rs`).
        let secrets = Arc::new(secrets::LiveSecrets::new(&data_dir.config_dir(), secrets));
        // The one redactor (DESIGN.md §10.3): the store's values, gitleaks' rules (compiled
        // now, beside the start), the operator's patterns; the audit cleans its records with it.
        let shield = Arc::new(
            redact::Shield::new(Some(secrets.clone()), &loaded.config.security.redact.patterns())
                .map_err(DaemonError::Redact)?,
        );
        let warming = shield.clone();
        tracker.spawn_blocking(move || warming.warm());
        audit.shield_with(shield.clone());
        let redact = redact::Redact::new(shield, audit.clone());
        redact::for_log_lines(&redact);
        let llm = Arc::new(llm::LlmGateway::new(&loaded, settings, &data_dir, &binaries, metrics.clone()));
        let web_proxy = || {
            egress::proxy::WebProxy::new(
                &loaded.config.tools.web_proxy,
                Arc::new(egress::proxy::SystemResolver),
                Arc::new(egress::proxy::TcpConnector),
            )
            .map_err(DaemonError::WebProxy)
        };
        let web = Arc::new(web_proxy()?);
        // The gateway in its container has no network: its providers' hosts only, by tunnel.
        let hosts = llm.provider_hosts();
        llm.reach_out_through(llm::egress::WayOut::new(hosts, web_proxy()?, audit.clone(), tracker.clone()));
        let workspaces = Arc::new(workspace::Workspaces::new(
            data_dir.root().join("sessions"),
            policy.resource_limits(auth::Role::Tool).disk_bytes,
            loaded.config.tools.workspace_limit,
            // Tool containers hold at most a slot each; uploads in flight are few per gateway.
            (loaded.config.container.max_concurrent as usize * 4).max(64),
        ));
        // Where workspaces get a filesystem of their own, so do the IPC folders.
        let filesystems = workspaces.enforcement() == workspace::Enforcement::Filesystem;
        let ipc = Arc::new(
            ipc::Ipc::open(data_dir.ipc_dir(), &data_dir.state_dir(), filesystems)
                .map_err(|source| DaemonError::Ipc { path: data_dir.ipc_dir(), source })?,
        );
        let inbox = Arc::new(inbox::Inbox::new(data_dir.state_dir().join("inbox")).redacting(redact.clone()));
        ipc.redact_with(redact.clone());
        let events = Arc::new(events::EventBus::redacting(redact.clone()));
        let taints = Arc::new(taint::Taints::open(
            &data_dir.state_dir(),
            loaded.config.security.taint.clone(),
            audit.clone(),
            events.clone(),
            redact.clone(),
        ));
        let approvals = Arc::new(egress::approvals::Approvals::new(
            events.clone(),
            Duration::from_secs(loaded.config.egress.approval_timeout.max(1)),
        ));
        // The edge's authority, made once; without it tools still run, and no secret is swapped.
        let edge = match egress::authority::Authority::open(&data_dir.state_dir()) {
            Ok(authority) => Some(Arc::new(egress::edge::Edge::new(
                Arc::new(authority),
                data_dir.clone(),
                secrets::Handout::new(secrets.clone(), secrets::Rules::of(&loaded), audit.clone()),
            ))),
            Err(why) => {
                tracing::error!(%why, "the egress certificate authority could not be made; credentials are not swapped in");
                None
            }
        };
        let tools = Arc::new(tools::Runners::new(tools::Setup {
            containers: containers.clone(),
            policy: policy.clone(),
            ipc: ipc.clone(),
            workspaces: workspaces.clone(),
            data_dir: data_dir.clone(),
            skill_dirs: loaded.config.skills.directories.clone(),
            idle: Duration::from_secs(loaded.config.tools.warm_idle_timeout),
            web: web.clone(),
            audit: audit.clone(),
            inbox: inbox.clone(),
            approvals: approvals.clone(),
            taints: taints.clone(),
            edge: edge.clone(),
            values: redact.shield().clone(),
            tracker: tracker.clone(),
        }));
        // The MCP servers' own folders (`state: true`), capped at the MCP role's disk limit as
        // workspaces are at the tool role's.
        let mcp_states = Arc::new(workspace::Workspaces::new(
            data_dir.root().join("data/mcp-state"),
            policy.resource_limits(auth::Role::Mcp).disk_bytes,
            loaded.config.tools.workspace_limit,
            (loaded.config.container.max_concurrent as usize).max(16),
        ));
        let mcp = Arc::new(mcp::pool::McpPool::new(mcp::pool::Setup {
            containers: containers.clone(),
            web: web.clone(),
            audit: audit.clone(),
            state_dir: data_dir.state_dir(),
            policy: policy.clone(),
            states: mcp_states,
            workspaces: workspaces.clone(),
            tracker: tracker.clone(),
        }));
        let data_dir_root = &data_dir.root().to_path_buf();
        let data_dir_for_memory = data_dir.clone();
        let gateways = Arc::new(gateways::Registry::open(&data_dir.state_dir(), data_dir.gateways_dir())?);
        let identities = Arc::new(
            identities::Identities::open(&data_dir.state_dir(), data_dir.contexts_dir(auth::ContextKind::User))?
                .redacting(redact.clone())?,
        );
        let groups = Arc::new(groups::Groups::open(&data_dir.state_dir())?.redacting(redact.clone()));
        let oidc = Arc::new(oidc::Verifier::new(web.clone()));
        let budgets = Arc::new(budgets::Budgets::new(
            &data_dir.state_dir(),
            loaded.config.budgets.clone(),
            loaded.providers.prices.clone(),
            &loaded.config.system.timezone,
            metrics.clone(),
        ));
        let state_dir = data_dir.state_dir();
        let scheduler = Arc::new(
            scheduler::Scheduler::open(
                &state_dir,
                scheduler::Settings::from_config(&loaded.config),
                scheduler::Clock::System,
            )
            .map_err(DaemonError::Scheduler)?
            .redacting(redact.clone()),
        );
        let containers_for_agents = containers.clone();
        let loaded_idle_after = loaded.config.sessions.idle_after;
        let loaded_max_concurrent = loaded.config.container.max_concurrent;
        let notifier = Arc::new(health::Notifier::new(inbox.clone(), loaded.config.system.admin_users.clone()));
        llm.tell_admins_through(notifier.clone());
        let supervisors = Arc::new(gateways::supervise::Supervisors::new(gateways::supervise::Supervision {
            containers: containers.clone(),
            listeners: listeners.clone(),
            engine: engine_rx.clone(),
            binaries_dir: binaries.clone(),
            gateways_dir: data_dir.gateways_dir(),
            state_dirs: data_dir.state_dir().join(datadir::GATEWAY_STATE),
            health: loaded.config.orchestrator.health_check.clone(),
            web: web.clone(),
            audit: audit.clone(),
            metrics: metrics.clone(),
            notifier: notifier.clone(),
            cancel: CancellationToken::new(),
            tracker: tracker.clone(),
        }));
        let loaded = Arc::new(loaded);
        let calls = Arc::new(llm::call::Calls::new(
            llm.clone(),
            budgets.clone(),
            audit.clone(),
            events.clone(),
            loaded.clone(),
        ));
        let lifetime = Lifetime { shutdown: cancel.clone(), tasks: tracker.clone() };
        let sessions = Arc::new(sessions::SessionStore::open(data_dir_root).redacting(redact.clone()));
        // A conversation keeps the approvals and notices its people were shown.
        let keeper: Arc<dyn events::Keeper> = sessions.clone();
        events.kept_by(Arc::downgrade(&keeper));
        let memory = Arc::new(
            memory::Memories::new(data_dir_for_memory)
                .redacting(redact.clone())
                .keeping(loaded.config.memory.max_entries),
        );
        // The search index hears of every message and memory as it is written.
        let recall = Arc::new(recall::Recall::new(data_dir.clone(), sessions.clone(), memory.clone()));
        let recall_sink: Arc<dyn sessions::EntrySink> = recall.clone();
        sessions.told(Arc::downgrade(&recall_sink));
        let recall_index: Arc<dyn memory::MemoryIndex> = recall.clone();
        memory.indexed_by(Arc::downgrade(&recall_index));
        let agents = Arc::new(agents::AgentPool::new(
            containers_for_agents,
            Duration::from_secs(loaded_idle_after.max(60)),
            tracker.clone(),
        ));
        let turns = Arc::new(orchestrator::Turns::open(
            &state_dir,
            loaded_max_concurrent,
            Duration::from_secs(loaded.config.container.queue_timeout),
        ));
        let orchestrator = Arc::new(orchestrator::Orchestrator {
            loaded: loaded.clone(),
            data_dir: data_dir.clone(),
            metrics: metrics.clone(),
            events: events.clone(),
            sessions: sessions.clone(),
            turns: turns.clone(),
            agents: agents.clone(),
            tools: tools.clone(),
            containers: containers.clone(),
            workspaces: workspaces.clone(),
            calls: calls.clone(),
            llm: llm.clone(),
            groups: groups.clone(),
            identities: identities.clone(),
            lifetime: lifetime.clone(),
            taints: taints.clone(),
            redact: redact.clone(),
        });
        let tool_calls = Arc::new(tools::call::Calls {
            runners: tools.clone(),
            mcp: mcp.clone(),
            policy: policy.clone(),
            ipc: ipc.clone(),
            secrets: secrets::Handout::new(secrets.clone(), secrets::Rules::of(&loaded), audit.clone()),
            audit: audit.clone(),
            metrics: metrics.clone(),
            loaded: loaded.clone(),
            data_dir: data_dir.clone(),
            events: events.clone(),
            agents: agents.clone(),
            taints: taints.clone(),
            redact: redact.clone(),
        });
        let admissions = Arc::new(admissions::Admissions::open(&data_dir.state_dir()).redacting(redact.clone()));
        let shared = Arc::new(Shared {
            loaded,
            data_dir,
            metrics,
            audit,
            health: Arc::default(),
            notifier,
            engine: engine_rx,
            listeners,
            metrics_address,
            policy,
            containers,
            llm,
            web,
            tools,
            tool_calls,
            mcp,
            ipc,
            workspaces,
            search,
            events,
            calls,
            sessions,
            agents,
            turns,
            orchestrator,
            memory,
            recall,
            taints,
            secrets,
            lifetime,
            approvals,
            gateways,
            supervisors,
            identities,
            admissions,
            groups,
            oidc,
            budgets,
            scheduler,
            inbox,
            limits: limits::Limits::default(),
        });
        Ok(Daemon { shared, cancel, tracker, host, incoming, metrics_listener, engine, bound })
    }

    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// The token and tracker of every background task, so an in-process test can stop them
    /// the way a crash would, without the cleanup of a clean shutdown.
    pub fn lifetime(&self) -> (CancellationToken, TaskTracker) {
        (self.cancel.clone(), self.tracker.clone())
    }

    /// Serves until `shutdown` resolves, then drains in-flight requests for at most
    /// `orchestrator.shutdown_timeout` seconds, removes every socket and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), DaemonError> {
        let Daemon { shared, cancel, tracker, host, incoming, metrics_listener, engine, bound } = self;
        let config = &shared.loaded.config;
        let report = defaults::install(shared.data_dir.root())?;
        tracing::info!(
            installed = report.installed,
            updated = report.updated,
            kept_user_edits = report.kept,
            "default identities and skills checked"
        );

        // Results written while no daemon ran (or just before one crashed).
        shared.ipc.collect_all();
        let interrupted = orchestrator::recover(&shared.orchestrator);
        if interrupted > 0 {
            tracing::warn!(interrupted, "turns interrupted by the previous daemon were ended with a message");
        }
        shared.listeners.serve_host(host);
        for gateway in shared.gateways.list() {
            let folder = shared.gateways.socket_folder(&gateway.name);
            let name = gateway.name.clone();
            match shared.listeners.add_gateway(&gateway.name, &gateway.token_sha256, folder) {
                Ok(path) => {
                    tracing::info!(gateway = %name, socket = %path.display(), mode = gateway.mode.as_str(), "serving a gateway");
                    shared.supervisors.start(gateway);
                }
                Err(error) => tracing::error!(gateway = %name, %error, "cannot serve a gateway's socket"),
            }
        }
        tracker.spawn(
            container::watch_engine(config.container.clone(), engine, cancel.clone())
                .instrument(tracing::info_span!("engine")),
        );
        tracker
            .spawn(shared.containers.clone().supervise(cancel.clone()).instrument(tracing::info_span!("containers")));
        tracker.spawn(
            shared
                .llm
                .clone()
                .run(shared.containers.clone(), shared.engine.clone(), cancel.clone())
                .instrument(tracing::info_span!("llm gateway")),
        );
        tracker.spawn(shared.tools.clone().supervise(cancel.clone()).instrument(tracing::info_span!("tools")));
        tracker.spawn(shared.mcp.clone().supervise(cancel.clone()).instrument(tracing::info_span!("mcp")));
        let monitor = Arc::new(health::monitor::Monitor {
            settings: config.orchestrator.health_check.clone(),
            agents: shared.agents.clone(),
            tools: shared.tools.clone(),
            mcp: shared.mcp.clone(),
            board: shared.health.clone(),
            metrics: shared.metrics.clone(),
            notifier: shared.notifier.clone(),
        });
        tracker.spawn(health::monitor::monitor(monitor, cancel.clone()).instrument(tracing::info_span!("health")));
        tracker.spawn(
            orchestrator::supervise(shared.orchestrator.clone(), cancel.clone())
                .instrument(tracing::info_span!("sessions")),
        );
        tracker.spawn(take_ipc_requests(shared.clone(), cancel.clone()).instrument(tracing::info_span!("ipc")));
        shared.scheduler.count_runs_in(shared.metrics.clone());
        if let Err(error) = shared.scheduler.ensure_system(&scheduler::SYSTEM_JOBS) {
            tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot set up the system tasks");
        }
        let executor: Arc<dyn scheduler::Execute> = Arc::new(scheduler::execute::Daemon {
            orchestrator: shared.orchestrator.clone(),
            scheduler: shared.scheduler.clone(),
            memory: shared.memory.clone(),
            inbox: shared.inbox.clone(),
            approvals: shared.approvals.clone(),
        });
        tracker.spawn(
            shared
                .scheduler
                .clone()
                .run(executor, cancel.clone(), tracker.clone())
                .instrument(tracing::info_span!("scheduler")),
        );
        let (scanned, first_scan) = tokio::sync::oneshot::channel();
        tracker.spawn(
            scheduler::watch::watch(
                scheduler::watch::Heartbeats { data_dir: shared.data_dir.clone(), scheduler: shared.scheduler.clone() },
                cancel.clone(),
                scanned,
            )
            .instrument(tracing::info_span!("heartbeats")),
        );
        // Every HEARTBEAT.md is read before the daemon serves: the first `tasks list` shows them.
        // silent-ok: a watch that stopped before its first scan logged why.
        let _ = first_scan.await;
        tracker.spawn(make_room(shared.clone(), cancel.clone()).instrument(tracing::info_span!("slots")));
        if let Some(listener) = metrics_listener {
            tracker.spawn(
                metrics::serve(listener, shared.metrics.clone(), cancel.clone())
                    .instrument(tracing::info_span!("metrics")),
            );
        }
        if shared.metrics.recording() {
            let sampler = Arc::new(sampler::Sampler {
                containers: shared.containers.clone(),
                sessions: shared.sessions.clone(),
                data_dir: shared.data_dir.clone(),
                metrics: shared.metrics.clone(),
                every: Duration::from_secs(config.metrics.sample_interval.max(1)),
            });
            tracker.spawn(sampler::run(sampler, cancel.clone()).instrument(tracing::info_span!("metrics")));
        }
        if shared.loaded.config.metrics.log {
            let (metrics, every) = (shared.metrics.clone(), Duration::from_secs(60));
            tracker
                .spawn(metrics::log_every(metrics, every, cancel.clone()).instrument(tracing::info_span!("metrics")));
        }
        let gate = Arc::new(Gate {
            host_policy: HostPolicy { daemon_uid: current_uid(), client_group: bound.client_group.clone() },
            shared: shared.clone(),
        });
        let server = tonic::transport::Server::builder()
            // What one connection may have in flight at once (a gateway's users share one).
            .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
            // Room for a tunnel's bytes in flight (a download through a tool's proxy), in larger
            // frames: fewer window updates and frames a megabyte.
            .initial_stream_window_size(Some(baaaht_proto::client::STREAM_WINDOW))
            .initial_connection_window_size(Some(baaaht_proto::client::CONNECTION_WINDOW))
            .max_frame_size(Some(baaaht_proto::client::MAX_FRAME))
            .layer(RequestLayer::new(gate))
            .add_routes(server::routes(&shared))
            .serve_with_incoming_shutdown(incoming, cancel.clone().cancelled_owned());
        let mut server = std::pin::pin!(server);

        let socket = bound.socket_path.display().to_string();
        systemd::notify(&format!("READY=1\nSTATUS=serving on {socket}"));
        let status = {
            let (shared, socket) = (shared.clone(), socket.clone());
            move || {
                let counts = shared.sessions.counts();
                let (agents, problems) = (shared.agents.count(), shared.containers.problems());
                let health = if problems.is_empty() { "healthy".to_string() } else { problems.join("; ") };
                format!("serving on {socket}: {} active sessions, {agents} agents; {health}", counts.active)
            }
        };
        tracker.spawn(systemd::keep_alive(status, cancel.clone()).instrument(tracing::info_span!("systemd")));
        tracing::info!(
            socket = %socket,
            data_dir = %shared.data_dir.root().display(),
            metrics = shared.metrics_address.map(|a| a.to_string()).unwrap_or_else(|| "off".into()),
            version = env!("CARGO_PKG_VERSION"),
            "serving"
        );

        let mut outcome = Ok(());
        tokio::select! {
            result = &mut server => {
                tracing::error!("the gRPC server stopped by itself");
                outcome = result.map_err(DaemonError::Serve);
            }
            () = shutdown => {
                let deadline = Duration::from_secs(config.orchestrator.shutdown_timeout);
                tracing::info!(deadline_s = deadline.as_secs(), "shutting down: draining in-flight requests");
                systemd::notify("STOPPING=1\nSTATUS=draining");
                cancel.cancel();
                match tokio::time::timeout(deadline, &mut server).await {
                    Ok(Ok(())) => tracing::info!("the requests in flight are done"),
                    Ok(Err(error)) => outcome = Err(DaemonError::Serve(error)),
                    Err(_) => tracing::warn!(deadline_s = deadline.as_secs(), "requests still running at the deadline were cut off"),
                }
            }
        }
        cancel.cancel();
        shared.supervisors.stop_all();
        tracker.close();
        if tokio::time::timeout(Duration::from_secs(2), tracker.wait()).await.is_err() {
            tracing::warn!("background tasks did not stop within 2 s");
        }
        shared.containers.shutdown().await;
        shared.workspaces.shutdown();
        shared.mcp.shutdown();
        // The containers are gone: what they queued is taken, then their folders go.
        ipc_pass(&shared, &mut std::collections::BTreeMap::new());
        shared.ipc.let_go_all();
        shared.listeners.remove_all();
        for path in std::iter::once(&bound.socket_path).chain(&bound.socket_link) {
            if let Err(error) = std::fs::remove_file(path) {
                tracing::warn!(socket = %path.display(), %error, "cannot remove the socket");
            }
        }
        tracing::info!("stopped");
        drop(bound);
        outcome
    }
}

/// Takes what containers queue in their IPC folders (messages to deliver, tasks to schedule),
/// every `orchestrator.poll_intervals.ipc` milliseconds and when a call asks ([`ipc::Ipc::flush`]),
/// until `cancel`.
async fn take_ipc_requests(shared: Arc<Shared>, cancel: CancellationToken) {
    let every = Duration::from_millis(shared.loaded.config.orchestrator.poll_intervals.ipc.max(50));
    let mut sent = std::collections::BTreeMap::new();
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(every) => {}
            () = shared.ipc.woken() => {}
        }
        let pass = shared.clone();
        shared.ipc.pass_begins();
        let delivery = tokio::task::spawn_blocking(move || {
            ipc_pass(&pass, &mut sent);
            // What no container holds any more goes, now that what it queued was taken.
            pass.ipc.sweep();
            pass.ipc.pass_ended();
            sent
        });
        match delivery.await {
            Ok(kept) => sent = kept,
            Err(error) => {
                tracing::error!(%error, "message delivery failed");
                sent = std::collections::BTreeMap::new();
            }
        }
    }
}

/// Delivers the messages and schedules the tasks containers queued in their IPC folders.
fn ipc_pass(shared: &Shared, sent: &mut std::collections::BTreeMap<String, Vec<u64>>) {
    shared.ipc.deliver_messages(&shared.events, &shared.workspaces, sent);
    shared.ipc.take_task_requests(&mut |context, session, request| {
        let principal = format!("ipc:{context}/{session}");
        shared.taints.allow_session(session, taint::Way::ScheduleTask, &principal)?;
        scheduler::schedule_requested(&shared.scheduler, &shared.inbox, context, request)
    });
}

/// Whenever a container start waits for a slot (`container.max_concurrent`), removes one idle
/// container: an idle agent first (it is cheap to start again), else the tool container unused
/// the longest, else the MCP server unused the longest that answers no call.
async fn make_room(shared: Arc<Shared>, cancel: CancellationToken) {
    let mut pressure = shared.containers.pressure();
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            changed = pressure.changed() => if changed.is_err() { return },
        }
        pressure.borrow_and_update();
        if !shared.agents.evict_one().await && !shared.tools.evict_one().await && !shared.mcp.evict_one().await {
            tracing::info!("no idle container to remove; the start waits for one to finish");
        }
    }
}

/// Builds the daemon on `bound` and serves until `shutdown` resolves.
pub async fn run(
    loaded: LoadedConfig,
    data_dir: DataDir,
    bound: Bound,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    Daemon::new(loaded, data_dir, bound)?.run(shutdown).await
}

/// Records in the audit log that the configuration changed since the last start, naming the
/// sections that did (the last one is kept in `data/state/config-last.json`, beside the rest of
/// the daemon's state; the log holds section names only, never values).
fn audit_config_change(audit: &audit::Audit, loaded: &LoadedConfig, state_dir: &std::path::Path) {
    let path = state_dir.join("config-last.json");
    let Ok(now) = serde_json::to_value(&loaded.config) else { return };
    let before: Option<serde_json::Value> = match state::read_json(&path) {
        Ok(before) => before,
        Err(error) => {
            tracing::warn!(error = %baaaht_proto::error_chain(&error), "cannot read the last configuration");
            None
        }
    };
    let changed: Vec<String> = match (&before, &now) {
        (Some(serde_json::Value::Object(before)), serde_json::Value::Object(now)) => {
            now.iter().filter(|(key, value)| before.get(*key) != Some(value)).map(|(key, _)| key.clone()).collect()
        }
        _ => vec!["all (first start)".to_string()],
    };
    if changed.is_empty() {
        return;
    }
    audit.record(audit::Record::new(audit::Kind::Config, "daemon", "changed").detail("sections", changed));
    if let Err(error) = state::write_json(&path, &now) {
        tracing::warn!(error = %baaaht_proto::error_chain(&error), "cannot keep the configuration for the next start");
    }
}
