//! Container lifecycle (spec §5.4): every container the daemon runs goes through here.
//!
//! A run creates a hardened container (retrying a failed start once), gives it its own daemon
//! socket, waits with a timeout (killing it when the timeout passes and keeping what it wrote),
//! keeps its logs under `data/logs/{container-id}/`, and removes it. `data/state/containers.json`
//! lists every container the daemon owns; after a restart, running services are adopted and
//! everything else carrying this data dir's owner label is removed, so nothing is left
//! unaccounted for.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{
    report_hung, ContainerKind, ContainerLabels, ContainerRuntime, ContainerSpec, Engine, Isolation, MountSpec, Output,
    RuntimeError, LABEL_BAAAHT, LABEL_OWNER,
};
use crate::base::auth::{ContainerIdentity, Context, Role};
use crate::base::datadir::DataDir;
use crate::base::lifetime::{Subsystem, Work};
use crate::base::state::{self, now_seconds, StateError};
use crate::sandbox::policy::Policy;
use crate::sandbox::sockets::{ContainerSocket, ListenerError, ListenerSet};

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
const INVENTORY_FILE: &str = "containers.json";

#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// The sentence callers get while no engine is usable.
    #[error("{0}")]
    Unavailable(String),
    /// `container.isolation` asks for a tier the engine does not have.
    #[error("{0}")]
    Isolation(String),
    #[error("the container did not start after {attempts} attempts: {message}")]
    StartFailed { attempts: u32, message: String },
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("cannot give the container its daemon socket")]
    Socket(#[source] ListenerError),
    /// A pooled container could not be bound to the session that claimed it.
    #[error("cannot hand a pooled container to its session: {0}")]
    Claim(String),
    #[error("cannot record the container inventory")]
    Inventory(#[source] StateError),
    #[error("cannot keep the container's logs in {}", path.display())]
    Logs {
        path: PathBuf,
        #[source]
        source: StateError,
    },
    #[error(
        "all {max} container slots (container.max_concurrent) stayed busy for {} s; try again when a session \
         finishes, or raise container.max_concurrent",
        waited.as_secs()
    )]
    Busy { max: u32, waited: Duration },
    /// gVisor could not make a sandbox: the cause found on the host (see `gvisor::cause`).
    #[error("{0}")]
    GvisorDown(String),
    #[error("a sandbox started but `true` in it exited with code {0}")]
    ProbeExit(i64),
    /// The why is said in the message and is no source: a chain printed would say it twice.
    #[error("a sandbox started but could not be waited for: {0}")]
    ProbeWait(RuntimeError),
    #[error("image {0} is missing: run `baaahtd images build`")]
    ImageMissing(String),
    #[error(
        "{} is missing: build it (cargo build --release -p baaaht-agent) or set container.binaries_dir",
        .0.display()
    )]
    AgentMissing(PathBuf),
    #[error("{} does not run in {image} ({status}: {stderr}); {}", binary.display(), agent_hint(stderr))]
    AgentFails { binary: PathBuf, image: String, status: RunStatus, stderr: String },
}

/// What to do about baaaht's binaries that do not run in the image, by what they wrote.
fn agent_hint(stderr: &str) -> &'static str {
    if stderr.contains("GLIBC") {
        "the binaries were built against a newer glibc than the image has: build baaaht on Debian 12 (bookworm), \
         or rebuild the image from a newer base (baaahtd images build)"
    } else {
        "check that the binaries were built for this machine"
    }
}

impl ContainerError {
    /// Whether the engine is away: none, unreachable or hung (not the container's fault).
    pub fn engine_away(&self) -> bool {
        matches!(
            self,
            ContainerError::Unavailable(_)
                | ContainerError::Runtime(RuntimeError::Unreachable { .. } | RuntimeError::Hung { .. })
        )
    }

    /// The error as a caller passes it on (an MCP server's or a skill layer's start, the LLM
    /// gateway's), its causes in the log (they name the data dir's files): a full disk as the
    /// daemon's sentence, anything else in its own words.
    pub fn told(&self) -> String {
        if crate::base::state::is_disk_full(self) {
            tracing::error!(error = %baaaht_proto::error_chain(self), "the data dir's disk is full");
            return crate::base::state::DISK_FULL_WORK.to_string();
        }
        tracing::warn!(error = %baaaht_proto::error_chain(self), "a container did not start");
        self.to_string()
    }
}

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

/// One container the daemon owns, as recorded in `data/state/containers.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InventoryEntry {
    pub id: String,
    pub name: String,
    pub role: String,
    pub session_id: String,
    pub context: String,
    pub kind: ContainerKind,
    /// SHA-256 of the container's token, to re-adopt it after a restart.
    pub token_sha256: String,
    pub created_at: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    pub containers: Vec<InventoryEntry>,
}

/// What [`ContainerManager::reconcile`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    pub adopted: Vec<String>,
    pub removed: Vec<String>,
    /// Inventory entries whose container no longer exists.
    pub forgotten: Vec<String>,
}

/// `container.max_concurrent`: how many containers run at once (the LLM gateway aside). A
/// start past it waits up to `container.queue_timeout` for a slot, and says so on `pressure`,
/// so that the pools remove an idle container to make room.
#[derive(Debug)]
pub struct Slots {
    semaphore: Arc<tokio::sync::Semaphore>,
    max: u32,
    wait: Duration,
    /// Container name → the slot it holds.
    held: Mutex<std::collections::HashMap<String, tokio::sync::OwnedSemaphorePermit>>,
    /// Bumped each time a start has to wait.
    pressure: watch::Sender<u64>,
}

impl Slots {
    pub fn new(max: u32, wait: Duration) -> Slots {
        Slots {
            semaphore: Arc::new(tokio::sync::Semaphore::new(max as usize)),
            max,
            wait,
            held: Mutex::default(),
            pressure: watch::channel(0).0,
        }
    }

    /// Slots in use.
    pub fn in_use(&self) -> usize {
        (self.max as usize).saturating_sub(self.semaphore.available_permits())
    }

    /// A slot for a container of `role`; the LLM gateway needs none (everything waits on it),
    /// nor do the web and Slack gateways (the way in).
    async fn take(&self, role: Role) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ContainerError> {
        if let Ok(permit) = self.try_take(role) {
            return Ok(permit);
        }
        tracing::info!(max = self.max, role = role.as_str(), "every container slot is busy; waiting for one");
        // Asked again every second while it waits: a slot freed for this start may go to one
        // that waited longer, and then another idle container must make room.
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            self.pressure.send_modify(|count| *count += 1);
            let next = (tokio::time::Instant::now() + Duration::from_secs(1)).min(deadline);
            match tokio::time::timeout_at(next, self.semaphore.clone().acquire_owned()).await {
                Ok(Ok(permit)) => return Ok(Some(permit)),
                Ok(Err(_closed)) => break,
                Err(_) if next >= deadline => break,
                Err(_) => {}
            }
        }
        Err(ContainerError::Busy { max: self.max, waited: self.wait })
    }

    /// A slot for a container of `role` if one is free now (a pooled start never waits ahead
    /// of work, nor makes room for itself).
    fn try_take(&self, role: Role) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ContainerError> {
        if matches!(role, Role::LlmGateway | Role::Gateway) {
            return Ok(None);
        }
        match self.semaphore.clone().try_acquire_owned() {
            Ok(permit) => Ok(Some(permit)),
            Err(_) => Err(ContainerError::Busy { max: self.max, waited: Duration::ZERO }),
        }
    }

    fn hold(&self, name: &str, permit: Option<tokio::sync::OwnedSemaphorePermit>) {
        if let Some(permit) = permit {
            self.held.lock().unwrap_or_else(PoisonError::into_inner).insert(name.to_string(), permit);
        }
    }

    fn release(&self, name: &str) {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).remove(name);
    }
}

/// How a long-lived container's start takes its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Waits for one (idle containers are removed to make room).
    Waits,
    /// A warm pool's: only a free one; the container is bound to nobody until claimed.
    Pooled,
    /// Only a free one (a start ahead of need).
    IfFree,
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

/// The refusal of a container whose role must run under gVisor while gVisor does not start
/// sandboxes: the cause, and what else the person can do.
fn gvisor_refused(role: Role) -> ContainerError {
    ContainerError::Isolation(format!(
        "{role} containers must run under gVisor (container.isolation.{role} is gvisor), but gVisor does not start \
         sandboxes now: `baaaht doctor` on the host says why and what to fix. Or set container.isolation.{role} to \
         auto to run them under runc until it does",
        role = role.as_str()
    ))
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

    /// The tier a container of `role` gets now, without using up gVisor's retry (a pooled
    /// container of another tier is not claimed); none without an engine or a tier.
    pub async fn tier(&self, role: Role) -> Option<Isolation> {
        let runtime = self.runtime().await.ok()?;
        let asked = self.policy.container_config().isolation_of(role);
        let tier = Isolation::resolve(asked, runtime.engine()).ok()?;
        if tier == Isolation::Gvisor && self.gvisor.down().is_some() {
            return (asked == crate::base::config::IsolationChoice::Auto).then_some(Isolation::Runc);
        }
        Some(tier)
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

    async fn save_inventory(&self, inventory: &Inventory) -> Result<(), ContainerError> {
        state::write_json(&self.data_dir.state_dir().join(INVENTORY_FILE), inventory).map_err(ContainerError::Inventory)
    }

    async fn record(&self, entry: InventoryEntry) -> Result<(), ContainerError> {
        let mut inventory = self.inventory.lock().await;
        inventory.containers.push(entry);
        self.save_inventory(&inventory).await
    }

    async fn forget(&self, name: &str) -> Result<(), ContainerError> {
        let mut inventory = self.inventory.lock().await;
        inventory.containers.retain(|entry| entry.name != name);
        self.save_inventory(&inventory).await
    }

    pub async fn inventory(&self) -> Inventory {
        self.inventory.lock().await.clone()
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
            limits: self.policy.resource_limits(role),
            command: request.command.clone(),
            working_dir: request.working_dir.clone(),
            isolation,
        }
    }

    /// What every role that takes a tier gets on the engine now (none while there is none).
    pub fn tiers(&self) -> Vec<super::Tier> {
        use crate::base::config::IsolationChoice;
        let mut tiers = match &self.engine.borrow().status {
            super::EngineStatus::Ready(info) => super::tiers(self.policy.container_config(), info),
            _ => vec![],
        };
        if let Some(cause) = self.gvisor.down() {
            for tier in tiers.iter_mut().filter(|tier| tier.tier == Some(Isolation::Gvisor)) {
                tier.reason = format!("gVisor stopped starting sandboxes: {cause}");
                tier.tier = (tier.asked == IsolationChoice::Auto).then_some(Isolation::Runc);
            }
        }
        tiers
    }

    /// Why gVisor does not start sandboxes now (found by a start that failed), if it does not.
    pub fn gvisor_down(&self) -> Option<String> {
        self.gvisor.down()
    }

    /// The tier `role`'s containers get on `runtime`'s engine (`container.isolation`).
    pub fn isolation(&self, runtime: &dyn ContainerRuntime, role: Role) -> Result<Isolation, ContainerError> {
        let asked = self.policy.container_config().isolation_of(role);
        let mut tier = Isolation::resolve(asked, runtime.engine())
            .map_err(|why| ContainerError::Isolation(format!("{} containers: {why}", role.as_str())))?;
        // gVisor registered but not starting sandboxes: `auto` stays on runc until a retry is
        // due; `gvisor` is refused with the cause until then.
        if tier == Isolation::Gvisor && !self.gvisor.try_now() {
            if asked != crate::base::config::IsolationChoice::Auto {
                return Err(gvisor_refused(role));
            }
            tier = Isolation::Runc;
        }
        let compat = self.agent_binary.with_file_name(GVISOR_COMPAT);
        if tier == Isolation::Gvisor && !compat.is_file() {
            return Err(ContainerError::Isolation(format!(
                "{} containers run under gVisor, which needs {} beside baaaht-agent: build it with \
                 `cargo build -p baaaht-gvisor-compat` (scripts/up does), or set container.isolation.{} to runc",
                role.as_str(),
                compat.display(),
                role.as_str()
            )));
        }
        Ok(tier)
    }

    /// Starts a sandbox under gVisor running `true` and waits for it to end (`baaaht doctor`): its time, or
    /// the cause found when it does not start (which also keeps roles set to `auto` on runc
    /// until it does, as a failed start of theirs would). None where the engine has no gVisor.
    pub async fn probe_gvisor(&self) -> Option<Result<Duration, ContainerError>> {
        let runtime = self.runtime().await.ok()?;
        runtime.engine().gvisor.as_ref().ok()?;
        Some(match self.bare_sandbox(&*runtime).await {
            Ok(took) => {
                if self.gvisor.worked() {
                    tracing::info!("gVisor starts sandboxes again: roles set to auto are back on it");
                }
                Ok(took)
            }
            Err(Ok(error)) => Err(ContainerError::GvisorDown(self.gvisor_failed(&*runtime, &error))),
            Err(Err(why)) => Err(why),
        })
    }

    /// Starts a bare sandbox under gVisor running `true` (no mounts of anyone's, no socket, the
    /// base image) and waits for it to end: its time; else the engine's error when gVisor
    /// could not make it (`Err(Ok)`), or what else went wrong (`Err(Err)`).
    async fn bare_sandbox(
        &self,
        runtime: &dyn ContainerRuntime,
    ) -> Result<Duration, Result<RuntimeError, ContainerError>> {
        let request = RunRequest {
            role: Role::Tool,
            session_id: "gvisor-probe".into(),
            context: Context::user("baaaht-self-test"),
            command: vec!["true".into()],
            mounts: vec![],
            env: vec![],
            timeout: Duration::from_secs(60),
            daemon_socket: false,
            working_dir: None,
            image: None,
        };
        // No slot: it lives a second, and a doctor filling the slots must count only its own.
        let (_, _, mut spec) =
            self.prepare(&request, ContainerKind::Task, (false, false), Isolation::Gvisor).map_err(Err)?;
        // Named for what it is: never taken for a session's tool container.
        spec.name = spec.name.replacen("baaaht-tool-", "baaaht-gvisor-probe-", 1);
        let name = spec.name.clone();
        let started = Instant::now();
        match self.create_and_start(runtime, &spec, String::new()).await {
            Ok(id) => {
                let ended = tokio::time::timeout(Duration::from_secs(60), runtime.wait(&id))
                    .await
                    .unwrap_or(Err(RuntimeError::Hung { operation: "wait for a sandbox running `true`", seconds: 60 }));
                self.cleanup(runtime, &id, &name).await;
                match ended {
                    Ok(exit) if exit.code == 0 => Ok(started.elapsed()),
                    Ok(exit) => Err(Err(ContainerError::ProbeExit(exit.code))),
                    Err(error) => Err(Err(ContainerError::ProbeWait(error))),
                }
            }
            Err(error) if super::gvisor::is_sandbox_failure(&error) => Err(Ok(error)),
            Err(error) => Err(Err(error.into())),
        }
    }

    /// A sandbox gVisor could not make: its cause, found on the host, told to the health
    /// record (and logged once when gVisor was working until now).
    fn gvisor_failed(&self, runtime: &dyn ContainerRuntime, error: &RuntimeError) -> String {
        let engine = runtime.engine();
        let message = error.to_string();
        let cause = super::gvisor::cause(&message, engine.gvisor_program.as_deref(), engine.data_root.as_deref());
        if self.gvisor.failed(&cause) {
            tracing::warn!(
                %cause,
                error = %message,
                "gVisor stopped starting sandboxes: roles set to auto run under runc until it works again (tried \
                 again every {} s); those set to gvisor are refused; see `baaaht doctor`",
                super::gvisor::RETRY.as_secs()
            );
        }
        cause
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

    /// Starts a long-lived container (e.g. a session's tool runner) with its own daemon socket.
    /// It runs until [`ContainerManager::stop_service`]; after a daemon crash it is adopted.
    pub async fn start_service(&self, request: RunRequest) -> Result<ServiceHandle, ContainerError> {
        self.start_long_running(request, ContainerKind::Service, Slot::Waits).await.map(|(handle, _)| handle)
    }

    /// Starts a long-lived container that is not adopted after a daemon crash (the next daemon
    /// removes it and starts its own), e.g. the LLM gateway. With `request.daemon_socket` it
    /// gets its own daemon socket. Stopped with [`ContainerManager::stop_service`].
    pub async fn start_detached(&self, request: RunRequest) -> Result<ServiceHandle, ContainerError> {
        self.start_long_running(request, ContainerKind::Task, Slot::Waits).await.map(|(handle, _)| handle)
    }

    /// [`ContainerManager::start_detached`], only if a container slot is free now: a start
    /// ahead of need never waits for one, nor makes room by removing an idle container.
    pub async fn start_detached_if_room(&self, request: RunRequest) -> Result<ServiceHandle, ContainerError> {
        self.start_long_running(request, ContainerKind::Task, Slot::IfFree).await.map(|(handle, _)| handle)
    }

    /// Starts a container for a warm pool: `request` with its own daemon socket bound to
    /// nobody (its `session_id` and `context` are not used), holding no one's files, its calls
    /// waiting until [`ContainerManager::claim`] binds it. Not adopted after a daemon crash (the
    /// next daemon removes it) until it is claimed as a service. Also the tier it runs under.
    pub async fn start_pooled(&self, request: RunRequest) -> Result<(ServiceHandle, Isolation), ContainerError> {
        self.start_long_running(request, ContainerKind::Task, Slot::Pooled).await
    }

    /// Binds pooled container `name` to `session_id` and `context` (its waiting calls go on as
    /// theirs; once only), recorded as `kind` (a service is adopted after a crash).
    pub async fn claim(
        &self,
        name: &str,
        session_id: &str,
        context: &Context,
        kind: ContainerKind,
    ) -> Result<Arc<ContainerIdentity>, ContainerError> {
        {
            let mut inventory = self.inventory.lock().await;
            let entry = inventory.containers.iter_mut().find(|entry| entry.name == name);
            let Some(entry) = entry else {
                return Err(ContainerError::Claim(format!(
                    "container {name} is not in the inventory (it was removed)"
                )));
            };
            entry.session_id = session_id.to_string();
            entry.context = context.to_string();
            entry.kind = kind;
            self.save_inventory(&inventory).await?;
        }
        self.listeners.bind(name, session_id, context).map_err(|error| ContainerError::Claim(error.to_string()))
    }

    async fn start_long_running(
        &self,
        request: RunRequest,
        kind: ContainerKind,
        slot: Slot,
    ) -> Result<(ServiceHandle, Isolation), ContainerError> {
        let runtime = self.runtime().await?;
        let isolation = self.isolation(&*runtime, request.role)?;
        let pooled = slot == Slot::Pooled;
        let slot = match slot {
            Slot::Waits => self.slots.take(request.role).await?,
            Slot::Pooled | Slot::IfFree => self.slots.try_take(request.role)?,
        };
        let with_socket = request.daemon_socket || kind == ContainerKind::Service || pooled;
        let (name, socket, spec) = self.prepare(&request, kind, (with_socket, pooled), isolation)?;
        let token_sha256 = socket.as_ref().map(|s| s.token_sha256.clone()).unwrap_or_default();
        match self.start_with_retry(&*runtime, &spec, token_sha256).await {
            Ok((id, _attempts, isolation)) => {
                self.slots.hold(&name, slot);
                tracing::info!(container = %name, container_id = %id, role = request.role.as_str(), pooled, "service container started");
                Ok((ServiceHandle { id, name }, isolation))
            }
            Err(error) => {
                self.listeners.remove_container(&name);
                Err(error)
            }
        }
    }

    /// Stops and removes a service container and its socket.
    pub async fn stop_service(&self, name: &str) -> Result<(), ContainerError> {
        let runtime = self.runtime().await?;
        let entry = self.inventory.lock().await.containers.iter().find(|entry| entry.name == name).cloned();
        if let Some(entry) = entry {
            self.cleanup(&*runtime, &entry.id, &entry.name).await;
        }
        self.listeners.remove_container(name);
        Ok(())
    }

    /// Adopts running services of this data dir that the inventory knows, removes every other
    /// container carrying this data dir's owner label, and forgets inventory entries whose
    /// container is gone.
    pub async fn reconcile(&self) -> Result<ReconcileReport, ContainerError> {
        let runtime = self.runtime().await?;
        let found = self.check(runtime.list_by_label(&[(LABEL_BAAAHT, "1"), (LABEL_OWNER, &self.owner)]).await)?;
        let mut inventory = self.inventory.lock().await;
        let mut report = ReconcileReport::default();
        let mut kept = vec![];
        let started_here = self.started_here.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let awaited = self.awaited.lock().unwrap_or_else(PoisonError::into_inner).clone();
        for container in &found {
            let known = inventory.containers.iter().find(|entry| entry.id == container.id).cloned();
            // A container of this process's that has ended (dockerd restarted under it, say)
            // is dead, unless a run waits to read its logs: removed, and its slot freed.
            let dead = container.ended && !awaited.contains(&container.id);
            if (started_here.contains(&container.id) || started_here.contains(&container.name)) && !dead {
                // Started by this process while the reconcile ran: in use, not an orphan.
                kept.extend(known);
                continue;
            }
            let adoptable = known.as_ref().filter(|entry| entry.kind == ContainerKind::Service && container.running);
            if let Some(entry) = adoptable {
                if let Some(identity) = identity_of(entry) {
                    match self.listeners.adopt_container(identity, entry.token_sha256.clone()) {
                        Ok(_) => {
                            // It runs, so it counts (past the limit if it must: it is there).
                            self.slots.hold(&entry.name, self.slots.semaphore.clone().try_acquire_owned().ok());
                            tracing::info!(container = %entry.name, "adopted a running container after a restart");
                            report.adopted.push(entry.name.clone());
                            kept.push(entry.clone());
                            continue;
                        }
                        Err(error) => {
                            tracing::warn!(container = %entry.name, %error, "cannot adopt a container; removing it")
                        }
                    }
                }
            }
            match self.check(runtime.remove(&container.id).await) {
                Ok(()) => {
                    tracing::info!(container = %container.name, known = known.is_some(), dead, "removed an orphaned container");
                    self.listeners.remove_container(&container.name);
                    self.slots.release(&container.name);
                    if dead {
                        let mut started_here = self.started_here.lock().unwrap_or_else(PoisonError::into_inner);
                        started_here.remove(&container.id);
                        started_here.remove(&container.name);
                    }
                    report.removed.push(container.name.clone());
                }
                Err(error) => {
                    tracing::warn!(container = %container.name, %error, "cannot remove an orphaned container");
                    if let Some(entry) = known {
                        kept.push(entry);
                    }
                }
            }
        }
        for entry in &inventory.containers {
            if !found.iter().any(|container| container.id == entry.id) {
                if started_here.contains(&entry.id) || started_here.contains(&entry.name) {
                    // Created after the engine was listed: it is starting, and its run folder is
                    // about to be mounted.
                    kept.push(entry.clone());
                    continue;
                }
                report.forgotten.push(entry.name.clone());
                self.listeners.remove_container(&entry.name);
                self.slots.release(&entry.name);
            }
        }
        inventory.containers = kept;
        self.save_inventory(&inventory).await?;
        self.listeners.remove_stale_folders();
        Ok(report)
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
        let request = RunRequest {
            role: Role::Tool,
            session_id: "system".into(),
            context: Context::user("system"),
            command: vec![format!("{BINARIES_MOUNT}/baaaht-agent"), "--version".into()],
            mounts: vec![],
            env: vec![],
            timeout: Duration::from_secs(60),
            daemon_socket: false,
            working_dir: None,
            image: None,
        };
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

fn identity_of(entry: &InventoryEntry) -> Option<ContainerIdentity> {
    let role = Role::named(&entry.role).filter(|role| *role != Role::Gateway)?;
    let context = Context::named(&entry.context)?;
    Some(ContainerIdentity { name: entry.name.clone(), role, session_id: entry.session_id.clone(), context })
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
