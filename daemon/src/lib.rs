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
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::base::config::LoadedConfig;
use crate::base::datadir::DataDir;
use crate::base::lifetime::{Lifetime, Subsystem};
use crate::base::metrics::Metrics;
use crate::base::{auth, config, datadir, metrics, systemd};
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
use crate::server::bind::Bound;
use crate::server::Shared;
use crate::store::{events, inbox, memory, recall, sessions};
use crate::work::{agents, gateways, health, ipc, mcp, tools};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    DataDir(#[from] datadir::DataDirError),
    #[error(transparent)]
    Bind(#[from] server::bind::BindError),
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

/// A daemon ready to serve.
pub struct Daemon {
    shared: Arc<Shared>,
    lifetime: Lifetime,
    listeners: server::bind::Listeners,
    incoming: tokio_stream::wrappers::ReceiverStream<std::io::Result<Conn>>,
    engine: Arc<watch::Sender<Engine>>,
    bound: Bound,
}

impl Daemon {
    /// Prepares the daemon on `bound`; must be called inside the tokio runtime.
    pub fn new(loaded: LoadedConfig, data_dir: DataDir, mut bound: Bound) -> Result<Daemon, DaemonError> {
        let lifetime = Lifetime::new();
        let (cancel, tracker) = (lifetime.shutdown.clone(), lifetime.tasks.clone());
        let listeners_bound = bound.listeners(&loaded)?;
        let metrics_address = listeners_bound.metrics_address;
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
        let binaries = datadir::binaries_dir(&loaded.config.container.binaries_dir);
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
        audit.config_changed(&loaded, &data_dir.state_dir());
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
        scheduler.count_runs_in(metrics.clone());
        if let Err(error) = scheduler.ensure_system(&scheduler::SYSTEM_JOBS) {
            tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot set up the system tasks");
        }
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
            lifetime: lifetime.clone(),
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
        Ok(Daemon { shared, lifetime, listeners: listeners_bound, incoming, engine, bound })
    }

    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// The token and tracker of every background task, so an in-process test can stop them
    /// the way a crash would, without the cleanup of a clean shutdown.
    pub fn lifetime(&self) -> (CancellationToken, TaskTracker) {
        (self.lifetime.shutdown.clone(), self.lifetime.tasks.clone())
    }

    /// Serves until `shutdown` resolves, then drains in-flight requests for at most
    /// `orchestrator.shutdown_timeout` seconds, stops every subsystem, removes every socket and
    /// returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), DaemonError> {
        let Daemon { shared, lifetime, listeners, incoming, engine, bound } = self;
        defaults::install(shared.data_dir.root())?;
        // Results written while no daemon ran (or just before one crashed).
        shared.ipc.collect_all();
        orchestrator::recover(&shared.orchestrator);
        shared.listeners.serve_host(listeners.host);
        shared.supervisors.serve_all(&shared.gateways);
        let (scanned, first_scan) = tokio::sync::oneshot::channel();
        let socket = bound.socket_path().display().to_string();
        let subsystems = subsystems(&shared, &lifetime, engine, listeners.metrics, scanned, socket.clone());
        lifetime.start(&subsystems);
        // Every HEARTBEAT.md is read before the daemon serves: the first `tasks list` shows them.
        // silent-ok: a watch that stopped before its first scan logged why.
        let _ = first_scan.await;
        let server = server::serve(&shared, bound.client_group(), incoming, lifetime.shutdown.clone());
        let mut server = std::pin::pin!(server);
        systemd::notify(&format!("READY=1\nSTATUS=serving on {socket}"));
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
                let deadline = Duration::from_secs(shared.loaded.config.orchestrator.shutdown_timeout);
                tracing::info!(deadline_s = deadline.as_secs(), "shutting down: draining in-flight requests");
                systemd::notify("STOPPING=1\nSTATUS=draining");
                lifetime.shutdown.cancel();
                match tokio::time::timeout(deadline, &mut server).await {
                    Ok(Ok(())) => tracing::info!("the requests in flight are done"),
                    Ok(Err(error)) => outcome = Err(DaemonError::Serve(error)),
                    Err(_) => tracing::warn!(deadline_s = deadline.as_secs(), "requests still running at the deadline were cut off"),
                }
            }
        }
        lifetime.stop(&subsystems).await;
        bound.remove();
        tracing::info!("stopped");
        outcome
    }
}

/// The daemon's long-lived parts, in the order they start. They drain in the reverse order: the
/// containers are removed before the IPC folders are read a last time and let go, and the
/// sockets and the audit log are tidied last.
fn subsystems(
    shared: &Arc<Shared>,
    lifetime: &Lifetime,
    engine: Arc<watch::Sender<Engine>>,
    metrics_listener: Option<tokio::net::TcpListener>,
    scanned: tokio::sync::oneshot::Sender<()>,
    socket: String,
) -> Vec<Arc<dyn Subsystem>> {
    let config = &shared.loaded.config;
    let executor: Arc<dyn scheduler::Execute> = Arc::new(scheduler::execute::Daemon {
        orchestrator: shared.orchestrator.clone(),
        scheduler: shared.scheduler.clone(),
        memory: shared.memory.clone(),
        inbox: shared.inbox.clone(),
        approvals: shared.approvals.clone(),
    });
    let status = {
        let shared = shared.clone();
        move || {
            let counts = shared.sessions.counts();
            let (agents, problems) = (shared.agents.count(), shared.containers.problems());
            let health = if problems.is_empty() { "healthy".to_string() } else { problems.join("; ") };
            format!("serving on {socket}: {} active sessions, {agents} agents; {health}", counts.active)
        }
    };
    let mut subsystems: Vec<Arc<dyn Subsystem>> = vec![
        Arc::new(shared.audit.clone()),
        shared.listeners.clone(),
        Arc::new(drive::requests::Requests {
            ipc: shared.ipc.clone(),
            events: shared.events.clone(),
            workspaces: shared.workspaces.clone(),
            taints: shared.taints.clone(),
            scheduler: shared.scheduler.clone(),
            inbox: shared.inbox.clone(),
            every: Duration::from_millis(config.orchestrator.poll_intervals.ipc.max(50)),
        }),
        shared.mcp.clone(),
        shared.workspaces.clone(),
        shared.containers.clone(),
        Arc::new(container::EngineWatch { config: config.container.clone(), engine }),
        Arc::new(llm::Upkeep {
            gateway: shared.llm.clone(),
            containers: shared.containers.clone(),
            engine: shared.engine.clone(),
        }),
        shared.tools.clone(),
        Arc::new(health::monitor::Monitor {
            settings: config.orchestrator.health_check.clone(),
            agents: shared.agents.clone(),
            tools: shared.tools.clone(),
            mcp: shared.mcp.clone(),
            board: shared.health.clone(),
            metrics: shared.metrics.clone(),
            notifier: shared.notifier.clone(),
        }),
        shared.orchestrator.clone(),
        Arc::new(scheduler::Running { scheduler: shared.scheduler.clone(), executor, tracker: lifetime.tasks.clone() }),
        Arc::new(scheduler::watch::Watch {
            heartbeats: scheduler::watch::Heartbeats {
                data_dir: shared.data_dir.clone(),
                scheduler: shared.scheduler.clone(),
            },
            scanned: std::sync::Mutex::new(Some(scanned)),
        }),
        Arc::new(work::slots::Slots {
            containers: shared.containers.clone(),
            agents: shared.agents.clone(),
            tools: shared.tools.clone(),
            mcp: shared.mcp.clone(),
        }),
        shared.supervisors.clone(),
        Arc::new(systemd::KeepAlive { status: Box::new(status) }),
    ];
    if let Some(listener) = metrics_listener {
        let metrics = shared.metrics.clone();
        subsystems.push(Arc::new(metrics::Endpoint { listener: std::sync::Mutex::new(Some(listener)), metrics }));
    }
    if shared.metrics.recording() {
        subsystems.push(Arc::new(sampler::Sampler {
            containers: shared.containers.clone(),
            sessions: shared.sessions.clone(),
            data_dir: shared.data_dir.clone(),
            metrics: shared.metrics.clone(),
            every: Duration::from_secs(config.metrics.sample_interval.max(1)),
        }));
    }
    if config.metrics.log {
        subsystems.push(Arc::new(metrics::Log { metrics: shared.metrics.clone(), every: Duration::from_secs(60) }));
    }
    subsystems
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
