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
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::base::config::LoadedConfig;
use crate::base::datadir::DataDir;
use crate::base::lifetime::{Lifetime, Subsystem};
use crate::base::{config, datadir, metrics, systemd, Base};
use crate::drive::{orchestrator, scheduler, Drive};
use crate::guard::{limits, Guard};
use crate::model::{llm, Model};
use crate::net::Net;
use crate::ops::{defaults, disk, sampler};
use crate::people::People;
use crate::sandbox::container::{self, Engine};
use crate::sandbox::{Incoming, Sandbox};
use crate::server::bind::Bound;
use crate::server::Shared;
use crate::store::Store;
use crate::work::{health, system_files, Workers};

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
    Guard(#[from] guard::GuardError),
    #[error(transparent)]
    Sandbox(#[from] sandbox::SandboxError),
    #[error(transparent)]
    Net(#[from] net::NetError),
    #[error(transparent)]
    People(#[from] people::PeopleError),
    #[error(transparent)]
    Work(#[from] work::WorkError),
    #[error(transparent)]
    Gateways(#[from] work::gateways::GatewayError),
    #[error("cannot open the scheduler (data/state/scheduler.json)")]
    Scheduler(#[source] drive::scheduler::SchedulerError),
}

/// A daemon ready to serve.
pub struct Daemon {
    shared: Arc<Shared>,
    lifetime: Lifetime,
    listeners: server::bind::Listeners,
    incoming: Incoming,
    engine: Arc<watch::Sender<Engine>>,
    bound: Bound,
}

impl Daemon {
    /// Prepares the daemon on `bound`, opening the wings from the bottom up; must be called
    /// inside the tokio runtime.
    pub fn new(loaded: LoadedConfig, data_dir: DataDir, mut bound: Bound) -> Result<Daemon, DaemonError> {
        let listeners = bound.listeners(&loaded)?;
        let base = Base::new(loaded, data_dir);
        let guard = Guard::open(&base)?;
        let (sandbox, incoming) = Sandbox::open(&base, &guard)?;
        // A start that got this far records what changed in the configuration since the last.
        guard.audit.config_changed(&base.loaded, &base.data_dir.state_dir());
        let store = Store::open(&base, &guard);
        let net = Net::open(&base, &guard, &store)?;
        let people = People::open(&base, &guard, &net)?;
        let workers = Workers::open(&base, &guard, &sandbox, &store, &net)?;
        let model = Model::open(&base, &guard, &sandbox, &store, &workers)?;
        let below = drive::Below {
            guard: &guard,
            sandbox: &sandbox,
            store: &store,
            net: &net,
            people: &people,
            workers: &workers,
            model: &model,
        };
        let drive = Drive::open(&base, below).map_err(DaemonError::Scheduler)?;
        let engine = sandbox.engine.clone();
        let shared = Arc::new(Shared {
            loaded: base.loaded,
            data_dir: base.data_dir,
            metrics: base.metrics,
            disk: base.disk,
            audit: guard.audit,
            health: workers.health,
            notifier: workers.notifier,
            engine: sandbox.engine.subscribe(),
            listeners: sandbox.listeners,
            metrics_address: listeners.metrics_address,
            policy: sandbox.policy,
            containers: sandbox.containers,
            llm: model.llm,
            speech: model.speech,
            web: net.web,
            tools: workers.tools,
            tool_calls: workers.tool_calls,
            mcp: workers.mcp,
            ipc: workers.ipc,
            workspaces: sandbox.workspaces,
            web_road: net.road,
            events: store.events,
            calls: model.calls,
            sessions: store.sessions,
            agents: workers.agents,
            warm: workers.warm,
            turns: drive.turns,
            orchestrator: drive.orchestrator,
            memory: store.memory,
            recall: store.recall,
            taints: net.taints,
            secrets: guard.secrets,
            lifetime: base.lifetime.clone(),
            approvals: net.approvals,
            gateways: workers.gateways,
            supervisors: workers.supervisors,
            identities: people.identities,
            admissions: people.admissions,
            groups: people.groups,
            oidc: people.oidc,
            budgets: model.budgets,
            scheduler: drive.scheduler,
            inbox: store.inbox,
            undo: store.undo,
            limits: limits::Limits::default(),
        });
        Ok(Daemon { shared, lifetime: base.lifetime, listeners, incoming, engine, bound })
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
        // Skills a daemon stopped in the middle of installing (or of reviewing) are dropped.
        crate::work::skills::install::sweep(shared.data_dir.root());
        // An undo a stop cut short is finished before any turn runs (its workspace mounted).
        for session in shared.undo.pending() {
            let mounted = shared.workspaces.has(&session) && shared.workspaces.acquire(&session).is_ok();
            if let Some(done) = shared.undo.recover(&shared.sessions, &session) {
                shared.taints.put_back(&session, done.marked);
            }
            if mounted {
                shared.workspaces.release(&session);
            }
        }
        // Results written while no daemon ran (or just before one crashed).
        shared.ipc.collect_all();
        orchestrator::recover(&shared.orchestrator);
        shared.scheduler.count_runs_in(shared.metrics.clone());
        if let Err(error) = shared.scheduler.ensure_system(&scheduler::SYSTEM_JOBS) {
            tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot set up the system tasks");
        }
        shared.listeners.serve_host(listeners.host);
        shared.supervisors.serve_all(&shared.gateways);
        let (scanned, first_scan) = tokio::sync::oneshot::channel();
        let socket = bound.socket_path().display().to_string();
        let subsystems = subsystems(&shared, &lifetime, engine, listeners.metrics, scanned);
        lifetime.start(&subsystems);
        // Every HEARTBEAT.md is read before the daemon serves: the first `tasks list` shows them.
        // silent-ok: a watch that stopped before its first scan logged why.
        let _ = first_scan.await;
        let server = server::serve(&shared, bound.client_group(), incoming, lifetime.shutdown.clone());
        let mut server = std::pin::pin!(server);
        systemd::notify(&format!("READY=1\nSTATUS=serving on {socket}"));
        // The watchdog's pings and the status line begin once systemd heard READY.
        lifetime.start(&[keep_alive(&shared, socket.clone())]);
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

/// systemd's watchdog pinged, and its status line kept saying how the daemon does.
fn keep_alive(shared: &Arc<Shared>, socket: String) -> Arc<dyn Subsystem> {
    let shared = shared.clone();
    let status = move || {
        let counts = shared.sessions.counts();
        let (agents, problems) = (shared.agents.count(), shared.containers.problems());
        let health = if problems.is_empty() { "healthy".to_string() } else { problems.join("; ") };
        format!("serving on {socket}: {} active sessions, {agents} agents; {health}", counts.active)
    };
    Arc::new(systemd::KeepAlive { status: Box::new(status) })
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
) -> Vec<Arc<dyn Subsystem>> {
    let config = &shared.loaded.config;
    let executor: Arc<dyn scheduler::Execute> = Arc::new(scheduler::execute::Daemon {
        orchestrator: shared.orchestrator.clone(),
        scheduler: shared.scheduler.clone(),
        memory: shared.memory.clone(),
        inbox: shared.inbox.clone(),
        approvals: shared.approvals.clone(),
    });
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
            system: Arc::new(system_files::SystemFiles::new(shared.groups.clone(), shared.containers.clone())),
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
        Arc::new(crate::model::speech::Upkeep { speech: shared.speech.clone() }),
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
        shared.warm.clone(),
        Arc::new(work::slots::Slots {
            containers: shared.containers.clone(),
            warm: shared.warm.clone(),
            agents: shared.agents.clone(),
            tools: shared.tools.clone(),
            mcp: shared.mcp.clone(),
        }),
        shared.supervisors.clone(),
        Arc::new(disk::DiskWatch {
            gate: shared.disk.clone(),
            settings: config.orchestrator.disk.clone(),
            metrics: shared.metrics.clone(),
            notifier: shared.notifier.clone(),
            orchestrator: shared.orchestrator.clone(),
        }),
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
