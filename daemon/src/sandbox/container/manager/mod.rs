//! Container lifecycle (spec §5.4): every container the daemon runs goes through here.
//!
//! A run creates a hardened container (retrying a failed start once), gives it its own daemon
//! socket, waits with a timeout (killing it when the timeout passes and keeping what it wrote),
//! keeps its logs under `data/logs/{container-id}/`, and removes it. `data/state/containers.json`
//! lists every container the daemon owns; after a restart, running services are adopted and
//! everything else carrying this data dir's owner label is removed, so nothing is left
//! unaccounted for.
//!
//! Here: a run and its logs, a start and its retry. Beside it: long-lived and pooled
//! containers (`services`), the container cap (`slots`), the inventory (`inventory`), the
//! isolation tiers and gVisor's health (`tiers`), and what each can fail with (`error`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{
    report_hung, ContainerKind, ContainerLabels, ContainerRuntime, ContainerSpec, Engine, Isolation, MountSpec, Output,
    RuntimeError,
};
use crate::base::auth::{ContainerIdentity, Context, Role};
use crate::base::datadir::DataDir;
use crate::base::lifetime::{Subsystem, Work};
use crate::base::state::{self, now_seconds, StateError};
use crate::sandbox::policy::Policy;
use crate::sandbox::sockets::{ContainerSocket, ListenerSet};

mod error;
mod inventory;
mod services;
mod slots;
mod tiers;

pub use error::ContainerError;
use inventory::INVENTORY_FILE;
pub use inventory::{Inventory, InventoryEntry, ReconcileReport};
use slots::Slot;
pub use slots::Slots;
use tiers::gvisor_refused;

/// Where a container finds the daemon's socket (its folder is mounted here, read-only).
pub const SOCKET_MOUNT: &str = "/run/baaaht";
/// Where baaaht's own binaries are mounted, read-only.
pub const BINARIES_MOUNT: &str = "/opt/baaaht/bin";
/// The LLM gateway's binary, beside `baaaht-agent`; mounted only into the gateway's container.
pub const GATEWAY_BINARY: &str = "baaaht-llm-gateway";
/// The library preloaded into containers under gVisor (`agent-runtime/gvisor-compat`), beside
/// `baaaht-agent`, and where it is mounted.
pub const GVISOR_COMPAT: &str = "libbaaaht_gvisor_compat.so";
const GVISOR_COMPAT_MOUNT: &str = "/opt/baaaht/lib/gvisor-compat.so";
/// The most of each output stream kept in memory and in the log files.
const OUTPUT_CAP: usize = 1 << 20;

impl Engine {
    /// The runtime, or the sentence that says why there is none.
    pub fn runtime(&self) -> Result<Arc<dyn ContainerRuntime>, ContainerError> {
        self.runtime.clone().ok_or_else(|| {
            let reason = self.status.degraded_reason().unwrap_or_else(|| "no container engine".into());
            ContainerError::Unavailable(reason)
        })
    }
}

/// One container to run to completion.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub role: Role,
    pub session_id: String,
    pub context: Context,
    pub command: Vec<String>,
    /// Mounts already checked by the policy engine.
    pub mounts: Vec<MountSpec>,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// Give the container its own daemon socket at /run/baaaht/daemon.sock.
    pub daemon_socket: bool,
    pub working_dir: Option<String>,
    /// Another image than the base, e.g. a skill layer built on it; none: the base.
    pub image: Option<String>,
    /// Other limits than its role's (a session's browser); none: the role's.
    pub limits: Option<crate::sandbox::container::Limits>,
}

impl RunRequest {
    /// A one-off container of the system's own (a check of the image, of gVisor): a tool
    /// container's limits, nothing mounted, no daemon socket, a minute at most.
    pub fn system_check(session_id: &str, context: Context, command: Vec<String>) -> RunRequest {
        RunRequest {
            role: Role::Tool,
            session_id: session_id.into(),
            context,
            command,
            mounts: vec![],
            env: vec![],
            timeout: Duration::from_secs(60),
            daemon_socket: false,
            working_dir: None,
            image: None,
            limits: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Exited(i64),
    /// Killed at the timeout.
    TimedOut(Duration),
    /// Killed by the kernel for exceeding its memory limit.
    OutOfMemory {
        limit_bytes: u64,
    },
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunStatus::Exited(code) => write!(f, "exited with code {code}"),
            RunStatus::TimedOut(limit) => write!(f, "killed at its timeout of {} s", limit.as_secs()),
            RunStatus::OutOfMemory { limit_bytes } => {
                write!(f, "killed: out of memory (limit {} MiB)", limit_bytes >> 20)
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub container_id: String,
    pub name: String,
    pub status: RunStatus,
    pub output: Output,
    pub duration: Duration,
    pub attempts: u32,
    /// The tier it ran under (runc when gVisor stopped starting sandboxes and its role is `auto`).
    pub isolation: Isolation,
}

impl RunOutcome {
    pub fn succeeded(&self) -> bool {
        self.status == RunStatus::Exited(0)
    }

    /// The last `lines` lines of stderr, for error messages.
    pub fn stderr_tail(&self, lines: usize) -> String {
        let text = String::from_utf8_lossy(&self.output.stderr);
        let kept: Vec<&str> = text.lines().rev().take(lines).collect();
        kept.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

/// A running service container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceHandle {
    pub id: String,
    pub name: String,
}

pub struct ContainerManager {
    engine: Arc<watch::Sender<Engine>>,
    slots: Slots,
    policy: Arc<Policy>,
    listeners: Arc<ListenerSet>,
    data_dir: DataDir,
    owner: String,
    image: String,
    agent_binary: PathBuf,
    inventory: tokio::sync::Mutex<Inventory>,
    problems: Mutex<Vec<String>>,
    /// Ids and names of containers this process created (or is creating) and has not removed: a
    /// reconcile running at the same time leaves them alone.
    started_here: Mutex<std::collections::HashSet<String>>,
    /// Containers whose exit a [`ContainerManager::run`] is waiting for, to read their logs:
    /// ended, they are still in use until it removes them.
    awaited: Mutex<std::collections::HashSet<String>>,
    metrics: Arc<crate::base::metrics::Metrics>,
    /// Whether gVisor starts sandboxes, as the last starts under it found.
    gvisor: super::gvisor::Health,
}

impl std::fmt::Debug for ContainerManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerManager")
            .field("owner", &self.owner)
            .field("image", &self.image)
            .finish_non_exhaustive()
    }
}

/// The owner label of a data dir: containers of other data dirs on the same engine are never
/// touched.
pub fn owner_id(data_dir: &DataDir) -> String {
    use sha2::Digest;
    let path = std::fs::canonicalize(data_dir.root()).unwrap_or_else(|_| data_dir.root().to_path_buf()); // silent-ok: the root exists once the daemon runs; the raw path is a stable fallback
    let digest = sha2::Sha256::digest(path.as_os_str().as_encoded_bytes());
    digest.iter().take(8).map(|byte| format!("{byte:02x}")).collect()
}

impl ContainerManager {
    pub fn new(
        engine: Arc<watch::Sender<Engine>>,
        policy: Arc<Policy>,
        listeners: Arc<ListenerSet>,
        data_dir: DataDir,
        image: String,
        agent_binary: PathBuf,
        slots: Slots,
    ) -> Result<ContainerManager, ContainerError> {
        let inventory = state::read_json(&data_dir.state_dir().join(INVENTORY_FILE))
            .map_err(ContainerError::Inventory)?
            .unwrap_or_default();
        Ok(ContainerManager {
            engine,
            slots,
            policy,
            owner: owner_id(&data_dir),
            listeners,
            data_dir,
            image,
            agent_binary,
            inventory: tokio::sync::Mutex::new(inventory),
            problems: Mutex::default(),
            started_here: Mutex::default(),
            awaited: Mutex::default(),
            metrics: Arc::default(),
            gvisor: super::gvisor::Health::default(),
        })
    }

    /// Records container starts in `metrics` (a manager of its own keeps them to itself).
    pub fn with_metrics(mut self, metrics: Arc<crate::base::metrics::Metrics>) -> ContainerManager {
        self.metrics = metrics;
        self
    }

    pub fn image(&self) -> &str {
        &self.image
    }

    /// Bumped each time a container start waits for a slot: time to remove an idle one.
    pub fn pressure(&self) -> watch::Receiver<u64> {
        self.slots.pressure.subscribe()
    }

    /// Slots kept free ahead of starts that would wait ([`Slots::kept_free`]).
    pub fn kept_free(&self) -> usize {
        self.slots.kept_free()
    }

    /// Bumped each time a container takes a slot: time to see whether enough stay free.
    pub fn slots_taken(&self) -> watch::Receiver<u64> {
        self.slots.taken.subscribe()
    }

    /// The container cap in force (`container.max_concurrent`, `auto` resolved).
    pub fn cap(&self) -> u32 {
        self.slots.max
    }

    /// Container slots in use (`container.max_concurrent`).
    pub fn slots_in_use(&self) -> usize {
        self.slots.in_use()
    }

    /// Container slots free now.
    pub fn slots_free(&self) -> usize {
        self.slots.semaphore.available_permits()
    }

    /// The memory limit of a container of `role`, in bytes.
    pub fn memory_limit(&self, role: Role) -> u64 {
        self.policy.resource_limits(role).memory_bytes
    }

    /// Waits until the pooled container `name` is up: one of its calls waits for its binding.
    /// False when it has no socket (it was removed).
    pub async fn pooled_ready(&self, name: &str) -> bool {
        let Some(endpoint) = self.listeners.container_endpoint(name) else { return false };
        endpoint.ready().await;
        true
    }

    /// Whether a call of the pooled container `name` waits for its binding now (its process is
    /// alive and connected).
    pub fn pooled_waiting(&self, name: &str) -> bool {
        self.listeners.container_endpoint(name).is_some_and(|endpoint| endpoint.waiting())
    }

    /// Problems that make container work fail although the engine answers (image missing,
    /// binaries that do not run in it), as sentences for status.
    pub fn problems(&self) -> Vec<String> {
        self.problems.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The runtime; right after start, waits up to 10 s for the first probe to answer.
    /// Runs on `engine` from now on (tests: the fake engine).
    #[cfg(test)]
    pub fn use_engine(&self, engine: super::Engine) {
        self.engine.send_replace(engine);
    }

    async fn runtime(&self) -> Result<Arc<dyn ContainerRuntime>, ContainerError> {
        let mut changes = self.engine.subscribe();
        let first_probe = changes.wait_for(|engine| engine.status != super::EngineStatus::Probing);
        // silent-ok: after the wait, the current state says why there is no runtime.
        let _ = tokio::time::timeout(Duration::from_secs(10), first_probe).await;
        let engine = self.engine.borrow().clone();
        engine.runtime()
    }

    /// Reports a hung engine to the watcher before passing the error on.
    fn check<T>(&self, result: Result<T, RuntimeError>) -> Result<T, RuntimeError> {
        if let Err(error) = &result {
            self.note_hung(error);
        }
        result
    }

    fn note_hung(&self, error: &RuntimeError) {
        // Either way the engine is not there: degraded until it answers again, and reconciled
        // when it does (what it ran may be gone, and their slots with them).
        if matches!(error, RuntimeError::Hung { .. } | RuntimeError::Unreachable { .. }) {
            report_hung(&self.engine, error);
        }
    }

    /// What each of `containers` uses now, sampled together; a container the engine cannot
    /// measure (gone meanwhile) is left out.
    pub async fn usage(&self, containers: &[InventoryEntry]) -> Vec<(InventoryEntry, super::Usage)> {
        let Ok(runtime) = self.runtime().await else { return vec![] };
        let mut samples = tokio::task::JoinSet::new();
        for (index, entry) in containers.iter().enumerate() {
            let (runtime, id) = (runtime.clone(), entry.id.clone());
            samples.spawn(async move { (index, runtime.usage(&id).await) });
        }
        let mut measured: Vec<(usize, super::Usage)> = vec![];
        while let Some(joined) = samples.join_next().await {
            if let Ok((index, Ok(usage))) = joined {
                measured.push((index, usage));
            }
        }
        measured.sort_by_key(|(index, _)| *index);
        measured.into_iter().map(|(index, usage)| (containers[index].clone(), usage)).collect()
    }

    fn spec(
        &self,
        request: &RunRequest,
        name: &str,
        kind: ContainerKind,
        socket: Option<&PathBuf>,
        token: Option<&str>,
        isolation: Isolation,
    ) -> ContainerSpec {
        let role = request.role;
        let mut mounts = vec![MountSpec {
            host: self.agent_binary.clone(),
            target: format!("{BINARIES_MOUNT}/baaaht-agent"),
            read_only: true,
        }];
        if role == Role::LlmGateway {
            mounts.push(MountSpec {
                host: self.agent_binary.with_file_name(GATEWAY_BINARY),
                target: format!("{BINARIES_MOUNT}/{GATEWAY_BINARY}"),
                read_only: true,
            });
        }
        if let Some(folder) = socket {
            mounts.push(MountSpec { host: folder.clone(), target: SOCKET_MOUNT.into(), read_only: true });
        }
        mounts.extend(request.mounts.iter().cloned());
        let mut env = request.env.clone();
        if isolation == Isolation::Gvisor {
            mounts.push(MountSpec {
                host: self.agent_binary.with_file_name(GVISOR_COMPAT),
                target: GVISOR_COMPAT_MOUNT.into(),
                read_only: true,
            });
            env.push(("LD_PRELOAD".into(), GVISOR_COMPAT_MOUNT.into()));
        }
        if let Some(token) = token {
            env.push((baaaht_proto::CONTAINER_TOKEN_ENV.into(), token.into()));
            env.push(("BAAAHT_SOCKET".into(), format!("{SOCKET_MOUNT}/daemon.sock")));
        }
        ContainerSpec {
            name: name.into(),
            image: request.image.clone().unwrap_or_else(|| self.image.clone()),
            labels: ContainerLabels {
                role: request.role.as_str().into(),
                session_id: request.session_id.clone(),
                context: request.context.to_string(),
                owner: self.owner.clone(),
                kind,
            },
            mounts,
            env,
            limits: request.limits.unwrap_or_else(|| self.policy.resource_limits(role)),
            command: request.command.clone(),
            working_dir: request.working_dir.clone(),
            isolation,
        }
    }

    /// A fresh name, the container's own daemon socket when `with_socket` (bound to nobody
    /// when `pooled`), and its spec.
    fn prepare(
        &self,
        request: &RunRequest,
        kind: ContainerKind,
        (with_socket, pooled): (bool, bool),
        isolation: Isolation,
    ) -> Result<(String, Option<ContainerSocket>, ContainerSpec), ContainerError> {
        let name = format!("baaaht-{}-{}", request.role.as_str(), &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let socket = match (with_socket, pooled) {
            (false, _) => None,
            (true, true) => Some(self.listeners.add_unbound(&name, request.role).map_err(ContainerError::Socket)?),
            (true, false) => {
                let identity = ContainerIdentity {
                    name: name.clone(),
                    role: request.role,
                    session_id: request.session_id.clone(),
                    context: request.context.clone(),
                };
                Some(self.listeners.add_container(identity).map_err(ContainerError::Socket)?)
            }
        };
        let mut spec = self.spec(
            request,
            &name,
            kind,
            socket.as_ref().map(|s| &s.folder),
            socket.as_ref().map(|s| s.token.as_str()),
            isolation,
        );
        if pooled {
            // Nobody's: the inventory says whom it serves once it is claimed.
            spec.labels.session_id = String::new();
            spec.labels.context = String::new();
        }
        Ok((name, socket, spec))
    }

    /// Runs `request` to completion in a fresh hardened container (spec §5.4).
    pub async fn run(&self, request: RunRequest) -> Result<RunOutcome, ContainerError> {
        let runtime = self.runtime().await?;
        let isolation = self.isolation(&*runtime, request.role)?;
        let _slot = self.slots.take(request.role).await?;
        let started = Instant::now();
        let (name, socket, spec) =
            self.prepare(&request, ContainerKind::Task, (request.daemon_socket, false), isolation)?;
        let result = self.run_spec(&*runtime, &request, &spec, socket.as_ref().map(|s| s.token_sha256.clone())).await;
        if socket.is_some() {
            self.listeners.remove_container(&name);
        }
        let (id, status, output, attempts, isolation) = result?;
        let outcome =
            RunOutcome { container_id: id, name, status, output, duration: started.elapsed(), attempts, isolation };
        tracing::info!(
            container = %outcome.name,
            container_id = %outcome.container_id,
            role = request.role.as_str(),
            status = %outcome.status,
            duration_ms = outcome.duration.as_millis() as u64,
            attempts = outcome.attempts,
            "container finished"
        );
        Ok(outcome)
    }

    async fn run_spec(
        &self,
        runtime: &dyn ContainerRuntime,
        request: &RunRequest,
        spec: &ContainerSpec,
        token_sha256: Option<String>,
    ) -> Result<(String, RunStatus, Output, u32, Isolation), ContainerError> {
        let (id, attempts, isolation) = self.start_with_retry(runtime, spec, token_sha256.unwrap_or_default()).await?;
        self.awaited.lock().unwrap_or_else(PoisonError::into_inner).insert(id.clone());
        let result = self.wait_and_keep(runtime, request, spec, &id).await;
        self.awaited.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
        self.cleanup(runtime, &id, &spec.name).await;
        let (status, output) = result?;
        Ok((id, status, output, attempts, isolation))
    }

    /// Waits for container `id` of `spec` to exit (killing it at the request's timeout) and
    /// keeps what it wrote.
    async fn wait_and_keep(
        &self,
        runtime: &dyn ContainerRuntime,
        request: &RunRequest,
        spec: &ContainerSpec,
        id: &str,
    ) -> Result<(RunStatus, Output), ContainerError> {
        let id = id.to_string();
        let waited = tokio::time::timeout(request.timeout, runtime.wait(&id)).await;
        let status = match waited {
            Ok(Ok(exit)) if exit.oom_killed => RunStatus::OutOfMemory { limit_bytes: spec.limits.memory_bytes },
            Ok(Ok(exit)) => RunStatus::Exited(exit.code),
            Ok(Err(error)) => {
                self.note_hung(&error);
                return Err(ContainerError::Runtime(error));
            }
            Err(_) => {
                if let Err(error) = self.check(runtime.kill(&id).await) {
                    tracing::warn!(container = %spec.name, %error, "cannot kill a container at its timeout");
                }
                RunStatus::TimedOut(request.timeout)
            }
        };
        // Keep what it wrote, also when it was killed.
        let output = match self.check(runtime.logs(&id, OUTPUT_CAP).await) {
            Ok(output) => output,
            Err(error) => {
                tracing::warn!(container = %spec.name, %error, "cannot read container logs");
                Output::default()
            }
        };
        if let Err(error) = self.keep_logs(&id, spec, &status, &output) {
            tracing::warn!(container = %spec.name, error = %error, "cannot keep container logs");
        }
        Ok((status, output))
    }

    /// Creates and starts `spec`, retrying once (spec §5.4); a hung or unreachable engine or a
    /// full disk is not retried.
    /// Creates and starts `spec`, once more when the first try fails. A sandbox gVisor cannot
    /// make (it stopped working) is told to [`super::gvisor::Health`]; the role's container
    /// then starts under runc when its tier is `auto`, and is refused with the cause when it is
    /// `gvisor`. Returns the id, the attempts and the tier it runs under.
    async fn start_with_retry(
        &self,
        runtime: &dyn ContainerRuntime,
        spec: &ContainerSpec,
        token_sha256: String,
    ) -> Result<(String, u32, Isolation), ContainerError> {
        let mut attempts = 0;
        let started = Instant::now();
        let mut fallback: Option<ContainerSpec> = None;
        loop {
            attempts += 1;
            let trying = fallback.as_ref().unwrap_or(spec);
            match self.create_and_start(runtime, trying, token_sha256.clone()).await {
                Ok(id) => {
                    let role = crate::base::auth::Role::named(&spec.labels.role)
                        .map_or("other", crate::base::auth::Role::as_str);
                    self.metrics.record_spawn(role, started.elapsed());
                    if trying.isolation == Isolation::Gvisor && self.gvisor.worked() {
                        tracing::info!("gVisor starts sandboxes again: roles set to auto are back on it");
                    }
                    return Ok((id, attempts, trying.isolation));
                }
                // A full disk or an engine away (hung, unreachable) is told as such, not retried:
                // a retry cannot help.
                Err(error)
                    if crate::base::state::is_disk_full(&error)
                        || matches!(error, RuntimeError::Hung { .. } | RuntimeError::Unreachable { .. }) =>
                {
                    return Err(ContainerError::Runtime(error))
                }
                Err(error) if trying.isolation == Isolation::Gvisor && super::gvisor::is_sandbox_failure(&error) => {
                    let message = error.to_string();
                    // gVisor's fault only when a bare sandbox does not start either: a container
                    // whose own start fails (its mounts, its image) never sends others to runc.
                    if self.bare_sandbox(runtime).await.is_ok() {
                        tracing::warn!(container = %spec.name, error = %message, "a container did not start under gVisor, which starts sandboxes: its own failure");
                        return Err(ContainerError::StartFailed { attempts, message });
                    }
                    let cause = self.gvisor_failed(runtime, &error);
                    let role = crate::base::auth::Role::named(&spec.labels.role);
                    let asked = role.map(|role| self.policy.container_config().isolation_of(role));
                    match (role, asked) {
                        (_, Some(crate::base::config::IsolationChoice::Auto)) => {
                            let mut runc = spec.clone();
                            runc.isolation = Isolation::Runc;
                            runc.mounts.retain(|mount| mount.target != GVISOR_COMPAT_MOUNT);
                            runc.env.retain(|(name, value)| !(name == "LD_PRELOAD" && value == GVISOR_COMPAT_MOUNT));
                            fallback = Some(runc);
                        }
                        (Some(role), _) => {
                            tracing::warn!(role = role.as_str(), %cause, "refused: the role must run under gVisor");
                            return Err(gvisor_refused(role));
                        }
                        (None, _) => return Err(ContainerError::StartFailed { attempts, message }),
                    }
                }
                Err(error) if attempts < 2 => {
                    tracing::warn!(container = %spec.name, %error, "container failed to start; retrying once");
                }
                Err(error) => return Err(ContainerError::StartFailed { attempts, message: error.to_string() }),
            }
        }
    }

    async fn create_and_start(
        &self,
        runtime: &dyn ContainerRuntime,
        spec: &ContainerSpec,
        token_sha256: String,
    ) -> Result<String, RuntimeError> {
        // Marked by name before it exists: a reconcile listing the engine between the create and
        // the line below must not take it for an orphan.
        self.started_here.lock().unwrap_or_else(PoisonError::into_inner).insert(spec.name.clone());
        let created = self.check(runtime.create(spec).await);
        let id = match created {
            Ok(id) => id,
            Err(error) => {
                self.started_here.lock().unwrap_or_else(PoisonError::into_inner).remove(&spec.name);
                return Err(error);
            }
        };
        self.started_here.lock().unwrap_or_else(PoisonError::into_inner).insert(id.clone());
        let entry = InventoryEntry {
            id: id.clone(),
            name: spec.name.clone(),
            role: spec.labels.role.clone(),
            session_id: spec.labels.session_id.clone(),
            context: spec.labels.context.clone(),
            kind: spec.labels.kind,
            token_sha256,
            created_at: now_seconds(),
        };
        if let Err(error) = self.record(entry).await {
            // Without a record it would be an orphan; remove it now rather than later.
            self.cleanup(runtime, &id, &spec.name).await;
            // A full disk stays known as one (the caller words it for people).
            let kind = if crate::base::state::is_disk_full(&error) {
                std::io::ErrorKind::StorageFull
            } else {
                std::io::ErrorKind::Other
            };
            return Err(RuntimeError::Io {
                operation: "record the container",
                source: std::io::Error::new(kind, baaaht_proto::error_chain(&error)),
            });
        }
        if let Err(error) = self.check(runtime.start(&id).await) {
            self.cleanup(runtime, &id, &spec.name).await;
            return Err(error);
        }
        Ok(id)
    }

    async fn cleanup(&self, runtime: &dyn ContainerRuntime, id: &str, name: &str) {
        match self.check(runtime.remove(id).await) {
            Ok(()) => {
                self.slots.release(name);
                {
                    let mut started_here = self.started_here.lock().unwrap_or_else(PoisonError::into_inner);
                    started_here.remove(id);
                    started_here.remove(name);
                }
                if let Err(error) = self.forget(name).await {
                    tracing::warn!(container = %name, %error, "cannot update the container inventory");
                }
            }
            // Still recorded: the next reconcile removes it.
            Err(error) => tracing::warn!(container = %name, %error, "cannot remove a container"),
        }
    }

    fn keep_logs(
        &self,
        id: &str,
        spec: &ContainerSpec,
        status: &RunStatus,
        output: &Output,
    ) -> Result<(), ContainerError> {
        let dir = self.data_dir.logs_dir().join(id);
        let logs_error = |source| ContainerError::Logs { path: dir.clone(), source };
        std::fs::create_dir_all(&dir).map_err(|source| logs_error(StateError::Write { path: dir.clone(), source }))?;
        state::write_atomic(&dir.join("stdout.log"), &output.stdout, 0o600).map_err(logs_error)?;
        state::write_atomic(&dir.join("stderr.log"), &output.stderr, 0o600).map_err(logs_error)?;
        let summary = serde_json::json!({
            "name": spec.name,
            "role": spec.labels.role,
            "session": spec.labels.session_id,
            "context": spec.labels.context,
            "image": spec.image,
            "command": spec.command,
            "status": status.to_string(),
            "truncated": output.truncated,
            "finishedAt": now_seconds(),
        });
        state::write_json(&dir.join("run.json"), &summary).map_err(logs_error)
    }

    /// Builds `tag` from `dockerfile` unless the engine has it already.
    pub async fn ensure_image(&self, tag: &str, dockerfile: &str) -> Result<bool, ContainerError> {
        let runtime = self.runtime().await?;
        if self.check(runtime.image_exists(tag).await)? {
            return Ok(false);
        }
        tracing::info!(image = tag, "building a skill layer");
        self.check(runtime.build_image(tag, dockerfile).await)?;
        Ok(true)
    }

    /// Checks once that the image exists and that baaaht's binaries run inside it.
    pub async fn check_image(&self) {
        let problem = self.probe_image().await.err();
        if let Some(problem) = &problem {
            tracing::warn!(%problem, "containers cannot run yet");
        }
        *self.problems.lock().unwrap_or_else(PoisonError::into_inner) =
            problem.iter().map(ToString::to_string).collect();
    }

    async fn probe_image(&self) -> Result<(), ContainerError> {
        let runtime = self.runtime().await?;
        if !self.check(runtime.image_exists(&self.image).await)? {
            return Err(ContainerError::ImageMissing(self.image.clone()));
        }
        if !self.agent_binary.is_file() {
            return Err(ContainerError::AgentMissing(self.agent_binary.clone()));
        }
        let command = vec![format!("{BINARIES_MOUNT}/baaaht-agent"), "--version".into()];
        let request = RunRequest::system_check("system", Context::user("system"), command);
        let outcome = self.run(request).await?;
        if outcome.succeeded() {
            return Ok(());
        }
        let (binary, image, status) = (self.agent_binary.clone(), self.image.clone(), outcome.status);
        Err(ContainerError::AgentFails { binary, image, status, stderr: outcome.stderr_tail(3) })
    }

    /// Whenever the engine becomes usable: reconcile, then check the image.
    pub async fn supervise(self: Arc<Self>, cancel: CancellationToken) {
        let mut changes = self.engine.subscribe();
        loop {
            let ready = changes.borrow_and_update().runtime.is_some();
            if ready {
                match self.reconcile().await {
                    Ok(report) => tracing::info!(
                        adopted = report.adopted.len(),
                        removed = report.removed.len(),
                        forgotten = report.forgotten.len(),
                        "container inventory reconciled"
                    ),
                    Err(error) => tracing::warn!(%error, "cannot reconcile containers"),
                }
                self.check_image().await;
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return },
            }
            // Only a transition to usable needs work.
            while changes.borrow().runtime.is_some() == ready {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    changed = changes.changed() => if changed.is_err() { return },
                }
            }
        }
    }

    /// Removes every container this daemon owns (clean shutdown: their sockets go too).
    pub async fn shutdown(self: &Arc<Self>) {
        let Ok(runtime) = self.runtime().await else { return };
        let entries = self.inventory.lock().await.containers.clone();
        let started = Instant::now();
        tracing::info!(containers = entries.len(), "removing the containers");
        // All at once: each removal is mostly the engine waiting for a kill.
        let mut removals = tokio::task::JoinSet::new();
        for entry in entries {
            let (manager, runtime) = (self.clone(), runtime.clone());
            removals.spawn(async move { manager.cleanup(&*runtime, &entry.id, &entry.name).await });
        }
        while let Some(done) = removals.join_next().await {
            if let Err(error) = done {
                tracing::warn!(%error, "a container removal failed");
            }
        }
        tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "the containers are removed");
    }
}

impl Subsystem for ContainerManager {
    fn name(&self) -> &'static str {
        "containers"
    }

    fn run_until(self: Arc<Self>, shutdown: CancellationToken) -> Work {
        Box::pin(self.supervise(shutdown))
    }

    /// Every container this daemon owns is removed (a clean shutdown).
    fn drain(self: Arc<Self>) -> Work {
        Box::pin(async move { self.shutdown().await })
    }
}
