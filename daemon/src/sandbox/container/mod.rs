//! Container engines: which one is reachable, and (with the container runtime) everything the
//! daemon does with containers. Only this module talks to the engine.
//!
//! The daemon serves without an engine: status then reports "degraded: no container engine at
//! …" and container work is refused with that sentence, until a probe finds one.

pub mod docker;
#[cfg(test)]
pub mod fake;
pub mod gvisor;
pub mod images;
pub mod instance;
pub mod manager;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::base::config::RuntimeChoice;
use crate::base::lifetime::{Subsystem, Work};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    Docker,
    Podman,
}

impl EngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Docker => "docker",
            EngineKind::Podman => "podman",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineInfo {
    pub kind: EngineKind,
    pub socket: PathBuf,
    pub version: String,
    /// The Engine API version negotiated with the engine (1.41 for Debian's dockerd 20.10).
    pub api_version: String,
    /// The name of the engine's runtime that runs gVisor as baaaht needs it, or why there is
    /// none (found in `docker info` at each probe).
    pub gvisor: Result<String, GvisorError>,
    /// The program of that runtime, and the engine's data root (`docker info`): where
    /// [`gvisor::cause`] looks when a sandbox does not start.
    pub gvisor_program: Option<PathBuf>,
    pub data_root: Option<PathBuf>,
}

/// Why the engine has no runtime that runs gVisor as baaaht needs it, or why a role set to
/// `gvisor` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GvisorError {
    #[error("gVisor is offered on Docker only (Podman runs its containers with runc here)")]
    Podman,
    #[error("the engine has no runsc runtime registered")]
    NoRunsc,
    /// Each runsc runtime registered, with the flags it lacks.
    #[error("the engine's runsc cannot run baaaht's containers: {}", .0.join("; "))]
    Lacking(Vec<String>),
    /// `container.isolation` asks for gVisor where the engine has none (the why inside).
    #[error(
        "container.isolation asks for gVisor, but {0}; install Debian's runsc and register it with the engine \
         (scripts/up does; see README \"Isolation tiers\"), or set the role's container.isolation to auto or runc"
    )]
    Required(Box<GvisorError>),
}

/// Which kernel a container runs on: the tier [`crate::base::config::IsolationChoice`] resolved
/// against what the engine has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    #[default]
    Runc,
    Gvisor,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Runc => "runc",
            Isolation::Gvisor => "gvisor",
        }
    }

    /// The tier `choice` gets on `engine`: `auto` falls back to runc where gVisor is not
    /// there; `gvisor` without it is refused with the sentence naming the fix.
    pub fn resolve(
        choice: crate::base::config::IsolationChoice,
        engine: &EngineInfo,
    ) -> Result<Isolation, GvisorError> {
        use crate::base::config::IsolationChoice;
        match (choice, &engine.gvisor) {
            (IsolationChoice::Runc, _) | (IsolationChoice::Auto, Err(_)) => Ok(Isolation::Runc),
            (IsolationChoice::Auto | IsolationChoice::Gvisor, Ok(_)) => Ok(Isolation::Gvisor),
            (IsolationChoice::Gvisor, Err(why)) => Err(GvisorError::Required(Box::new(why.clone()))),
        }
    }
}

/// Roles whose containers take an isolation tier: the agents, tools and MCP servers.
pub const ISOLATED_ROLES: [crate::base::auth::Role; 8] = {
    use crate::base::auth::Role;
    [Role::Assistant, Role::Worker, Role::Researcher, Role::Coder, Role::Memory, Role::Heartbeat, Role::Tool, Role::Mcp]
};

/// What one role asks for and gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    pub role: crate::base::auth::Role,
    pub asked: crate::base::config::IsolationChoice,
    /// None: its containers are refused.
    pub tier: Option<Isolation>,
    /// Why `auto` fell back to runc, or why `gvisor` is refused; empty otherwise.
    pub reason: String,
}

/// What each of [`ISOLATED_ROLES`] asks for in `config` and gets on `engine`.
pub fn tiers(config: &crate::base::config::ContainerConfig, engine: &EngineInfo) -> Vec<Tier> {
    use crate::base::config::IsolationChoice;
    ISOLATED_ROLES
        .iter()
        .map(|role| {
            let asked = config.isolation_of(*role);
            let (tier, reason) = match (Isolation::resolve(asked, engine), &engine.gvisor) {
                (Ok(Isolation::Runc), Err(why)) if asked == IsolationChoice::Auto => {
                    (Some(Isolation::Runc), why.to_string())
                }
                (Ok(tier), _) => (Some(tier), String::new()),
                (Err(why), _) => (None, why.to_string()),
            };
            Tier { role: *role, asked, tier, reason }
        })
        .collect()
}

/// The log line of the tiers, once per engine that became ready: which roles run where and,
/// when `auto` fell back to runc, why.
fn log_tiers(config: &crate::base::config::ContainerConfig, engine: &EngineInfo) {
    let tiers = tiers(config, engine);
    let named = |wanted: Option<Isolation>| -> String {
        let roles: Vec<&str> = tiers.iter().filter(|t| t.tier == wanted).map(|t| t.role.as_str()).collect();
        if roles.is_empty() {
            "none".into()
        } else {
            roles.join(", ")
        }
    };
    let (gvisor, runc, refused) = (named(Some(Isolation::Gvisor)), named(Some(Isolation::Runc)), named(None));
    match &engine.gvisor {
        Ok(runtime) => tracing::info!(%gvisor, %runc, %runtime, "container isolation tiers"),
        Err(why) if tiers.iter().any(|t| !t.reason.is_empty()) => tracing::warn!(
            %runc,
            %refused,
            "gVisor is not available ({why}): roles set to auto run under runc, those set to gvisor are \
             refused; see README \"Isolation tiers\""
        ),
        Err(_) => tracing::info!(%runc, "container isolation tiers"),
    }
}

/// Flags a registered `runsc` must be given for baaaht's containers: the daemon's socket is
/// a host Unix socket they connect to, and our seccomp profile must apply inside the sandbox.
const GVISOR_FLAGS: [&[&str]; 2] = [
    &["host-uds=open", "host-uds=all", "fsgofer-host-uds", "fsgofer-host-uds=true"],
    &["oci-seccomp", "oci-seccomp=true"],
];

/// The runtime among `runtimes` (name, program path, arguments) that runs gVisor as baaaht
/// needs it; `runsc` itself is preferred when several do.
pub fn find_gvisor(kind: EngineKind, runtimes: &[(String, String, Vec<String>)]) -> Result<String, GvisorError> {
    if kind == EngineKind::Podman {
        return Err(GvisorError::Podman);
    }
    let mut candidates: Vec<&(String, String, Vec<String>)> = runtimes
        .iter()
        .filter(|(_, path, _)| Path::new(path).file_name().is_some_and(|name| name == "runsc"))
        .collect();
    candidates.sort_by_key(|(name, _, _)| (name != "runsc", name.clone()));
    if candidates.is_empty() {
        return Err(GvisorError::NoRunsc);
    }
    let mut problems = vec![];
    for (name, _, args) in &candidates {
        let given = normalize_flags(args);
        let missing: Vec<String> = GVISOR_FLAGS
            .iter()
            .filter(|accepted| !accepted.iter().any(|flag| given.iter().any(|g| g == flag)))
            .map(|accepted| format!("--{}", accepted[0]))
            .collect();
        if missing.is_empty() {
            return Ok(name.clone());
        }
        problems.push(format!("its runtime `{name}` lacks {}", missing.join(" and ")));
    }
    Err(GvisorError::Lacking(problems))
}

/// `--flag value`, `-flag=value` and `--flag=value` all as `flag=value`.
fn normalize_flags(args: &[String]) -> Vec<String> {
    let mut out = vec![];
    let mut iter = args.iter().peekable();
    while let Some(arg) = iter.next() {
        let bare = arg.trim_start_matches('-');
        if bare.contains('=') || !arg.starts_with('-') {
            out.push(bare.to_string());
        } else if let Some(value) = iter.next_if(|next| !next.starts_with('-')) {
            out.push(format!("{bare}={value}"));
        } else {
            out.push(bare.to_string());
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineStatus {
    /// The first probe has not finished yet.
    Probing,
    Ready(EngineInfo),
    Unavailable {
        reason: String,
    },
}

impl EngineStatus {
    /// The sentence shown in status and given to callers whose container work is refused.
    pub fn degraded_reason(&self) -> Option<String> {
        match self {
            EngineStatus::Ready(_) => None,
            EngineStatus::Probing => Some("container engine: still probing".into()),
            EngineStatus::Unavailable { reason } => Some(format!("degraded: {reason}")),
        }
    }
}

/// What a container is for; every container carries it as labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerLabels {
    pub role: String,
    pub session_id: String,
    pub context: String,
    /// The data dir this daemon serves, so daemons on different data dirs sharing one engine
    /// never touch each other's containers.
    pub owner: String,
    /// `task` (runs to completion) or `service` (long-lived, adopted after a restart).
    pub kind: ContainerKind,
}

impl ContainerLabels {
    /// The labels a container carries, by their names on the engine.
    pub fn pairs(&self) -> [(String, String); 6] {
        [
            (LABEL_BAAAHT.to_string(), "1".to_string()),
            (LABEL_ROLE.to_string(), self.role.clone()),
            (LABEL_SESSION.to_string(), self.session_id.clone()),
            (LABEL_CONTEXT.to_string(), self.context.clone()),
            (LABEL_OWNER.to_string(), self.owner.clone()),
            (LABEL_KIND.to_string(), self.kind.as_str().to_string()),
        ]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerKind {
    Task,
    Service,
}

impl ContainerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerKind::Task => "task",
            ContainerKind::Service => "service",
        }
    }
}

pub const LABEL_BAAAHT: &str = "baaaht";
pub const LABEL_ROLE: &str = "baaaht.role";
pub const LABEL_SESSION: &str = "baaaht.session";
pub const LABEL_CONTEXT: &str = "baaaht.context";
pub const LABEL_OWNER: &str = "baaaht.owner";
pub const LABEL_KIND: &str = "baaaht.kind";

/// A host path mounted into a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    pub host: PathBuf,
    pub target: String,
    pub read_only: bool,
}

/// Resource limits of one container.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub cpus: f64,
    pub memory_bytes: u64,
    pub pids: u32,
    pub tmp_bytes: u64,
    /// A session's workspace; held by `workspace.rs` (a filesystem of this size, or the tool
    /// runner's check), not by the engine.
    pub disk_bytes: u64,
}

/// Everything a container is made from. The hardening (uid 1000, read-only root, no
/// capabilities, no-new-privileges, the seccomp profile, never privileged, no network: every
/// way out is a socket of the daemon's) is not part of the spec: the runtime applies it to
/// every container, always.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub labels: ContainerLabels,
    pub mounts: Vec<MountSpec>,
    pub env: Vec<(String, String)>,
    pub limits: Limits,
    pub command: Vec<String>,
    pub working_dir: Option<String>,
    pub isolation: Isolation,
}

/// How a container ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    pub code: i64,
    pub oom_killed: bool,
}

/// A container found by label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    pub id: String,
    pub name: String,
    pub running: bool,
    /// It ran and exited (or died), as opposed to created and not yet started.
    pub ended: bool,
    pub labels: std::collections::BTreeMap<String, String>,
}

/// A container's health as the engine sees it (spec §5.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthStatus {
    /// "healthy", "unhealthy", "starting" or "none".
    pub status: String,
    pub failing_streak: i64,
    pub last_output: String,
    pub running: bool,
}

/// What a running container uses, as the engine measures it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Usage {
    /// Of one CPU: 200 is two CPUs busy.
    pub cpu_percent: f64,
    pub memory_bytes: u64,
    /// The container's memory limit (the host's memory when it has none).
    pub memory_limit_bytes: u64,
}

/// Output of a container or an exec, each stream capped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// True when more was produced than was kept.
    pub truncated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    pub exit_code: i64,
    pub output: Output,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("the container engine refused to {operation}: {message}")]
    Engine { operation: &'static str, message: String },
    #[error("no container {0}")]
    NotFound(String),
    #[error("the container engine did not answer {operation} within {seconds} s")]
    Hung { operation: &'static str, seconds: u64 },
    /// Its socket cannot be connected to: the engine is down or restarting.
    #[error(
        "the container engine cannot be reached to {operation} ({message}): start it (dockerd, or podman.socket); \
         baaaht goes on when it answers"
    )]
    Unreachable { operation: &'static str, message: String },
    #[error("cannot {operation}")]
    Io {
        operation: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Container lifecycle operations (spec §5.6) over domain types; [`docker::DockerRuntime`]
/// implements it for Docker and for Podman's Docker-compatible API.
#[async_trait::async_trait]
pub trait ContainerRuntime: Send + Sync + std::fmt::Debug {
    fn engine(&self) -> &EngineInfo;
    /// Creates a hardened container and returns its id.
    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError>;
    async fn start(&self, id: &str) -> Result<(), RuntimeError>;
    /// SIGTERM, then SIGKILL after `grace`.
    async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError>;
    async fn kill(&self, id: &str) -> Result<(), RuntimeError>;
    /// Removes the container, running or not.
    async fn remove(&self, id: &str) -> Result<(), RuntimeError>;
    /// Waits for the container to exit.
    async fn wait(&self, id: &str) -> Result<ExitInfo, RuntimeError>;
    async fn list_by_label(&self, labels: &[(&str, &str)]) -> Result<Vec<ContainerInfo>, RuntimeError>;
    async fn inspect_health(&self, id: &str) -> Result<HealthStatus, RuntimeError>;
    /// CPU and memory now (the engine samples for about a second).
    async fn usage(&self, id: &str) -> Result<Usage, RuntimeError>;
    /// Everything the container wrote so far, each stream capped at `cap` bytes (the tail).
    async fn logs(&self, id: &str, cap: usize) -> Result<Output, RuntimeError>;
    /// Runs `command` in a running container (health probes, diagnostics).
    async fn exec(&self, id: &str, command: &[String]) -> Result<ExecResult, RuntimeError>;
    async fn image_exists(&self, image: &str) -> Result<bool, RuntimeError>;
    /// Builds `tag` from `dockerfile` alone (no other context), with the engine's default
    /// network so that package managers reach their registries.
    async fn build_image(&self, tag: &str, dockerfile: &str) -> Result<(), RuntimeError>;
}

/// The engine sockets to try for `choice`, in order (issue #3's runtime selection).
pub fn candidate_sockets(choice: RuntimeChoice, env: impl Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut out = vec![];
    let docker_host = env("DOCKER_HOST").and_then(|host| host.strip_prefix("unix://").map(PathBuf::from));
    let podman_user = env("XDG_RUNTIME_DIR").map(|dir| Path::new(&dir).join("podman/podman.sock"));
    if matches!(choice, RuntimeChoice::Auto | RuntimeChoice::Docker) {
        out.extend(docker_host);
        out.push(PathBuf::from("/var/run/docker.sock"));
    }
    if matches!(choice, RuntimeChoice::Auto | RuntimeChoice::Podman) {
        out.push(PathBuf::from("/run/podman/podman.sock"));
        out.extend(podman_user);
    }
    let mut seen = vec![];
    out.retain(|path| {
        let new = !seen.contains(path);
        seen.push(path.clone());
        new
    });
    out
}

/// The engine as the rest of the daemon sees it: its status, and the runtime when it is usable.
#[derive(Debug, Clone)]
pub struct Engine {
    pub status: EngineStatus,
    pub runtime: Option<std::sync::Arc<dyn ContainerRuntime>>,
}

impl Engine {
    pub fn probing() -> Engine {
        Engine { status: EngineStatus::Probing, runtime: None }
    }
}

/// Connects to the first candidate that answers, negotiating the API version.
pub async fn probe(choice: RuntimeChoice) -> Engine {
    probe_sockets(candidate_sockets(choice, |key| std::env::var(key).ok()), docker::ENGINE_CALL_TIMEOUT).await
}

/// [`probe`] for `container.socket` when it is set, else for `container.runtime`.
pub async fn probe_config(config: &crate::base::config::ContainerConfig) -> Engine {
    let limit = Duration::from_secs(config.engine_timeout.max(1));
    let candidates = if config.socket.is_empty() {
        candidate_sockets(config.runtime, |key| std::env::var(key).ok())
    } else {
        vec![PathBuf::from(&config.socket)]
    };
    probe_sockets(candidates, limit).await
}

async fn probe_sockets(candidates: Vec<PathBuf>, limit: Duration) -> Engine {
    let mut problems = vec![];
    for socket in &candidates {
        if !socket.exists() {
            continue;
        }
        match docker::DockerRuntime::connect(socket, limit).await {
            Ok(runtime) => {
                return Engine {
                    status: EngineStatus::Ready(runtime.engine().clone()),
                    runtime: Some(std::sync::Arc::new(runtime)),
                }
            }
            Err(error) => problems.push(format!("{}: {error}", socket.display())),
        }
    }
    let tried: Vec<String> = candidates.iter().map(|path| path.display().to_string()).collect();
    let mut reason = format!(
        "no container engine at {}; start dockerd (or podman.socket) or set container.runtime",
        tried.join(", ")
    );
    if !problems.is_empty() {
        reason.push_str(&format!(" ({})", problems.join("; ")));
    }
    Engine { status: EngineStatus::Unavailable { reason }, runtime: None }
}

/// Marks the engine unusable after a call hung or could not reach it; the watcher then
/// re-probes with backoff, and the container manager reconciles once it answers again.
pub fn report_hung(engine: &watch::Sender<Engine>, error: &RuntimeError) {
    if engine.borrow().runtime.is_none() {
        return;
    }
    let reason = format!("{error}; retrying");
    tracing::warn!(%reason, "container engine not answering: degraded until it answers again");
    engine.send_modify(|engine| {
        engine.status = EngineStatus::Unavailable { reason };
        engine.runtime = None;
    });
}

/// Probes at start; then every 60 s while the engine answers, and with backoff from 2 s to
/// 30 s while it does not (including right after a call reported it hung).
pub async fn watch_engine(
    config: crate::base::config::ContainerConfig,
    engine: std::sync::Arc<watch::Sender<Engine>>,
    cancel: CancellationToken,
) {
    let mut changes = engine.subscribe();
    let mut backoff = Duration::from_secs(2);
    // The first engine found is the daemon's for as long as it runs: its containers, images
    // and inventory are that engine's. While dockerd restarts, Podman's socket may answer;
    // switching to it would strand everything dockerd holds.
    let mut found: Option<PathBuf> = None;
    loop {
        let current = match &found {
            Some(socket) => {
                probe_sockets(vec![socket.clone()], Duration::from_secs(config.engine_timeout.max(1))).await
            }
            None => probe_config(&config).await,
        };
        if let EngineStatus::Ready(info) = &current.status {
            found.get_or_insert_with(|| info.socket.clone());
        }
        let changed = engine.borrow().status != current.status;
        if changed {
            match &current.status {
                EngineStatus::Ready(info) => {
                    tracing::info!(
                        engine = info.kind.as_str(),
                        socket = %info.socket.display(),
                        version = %info.version,
                        api_version = %info.api_version,
                        "container engine ready"
                    );
                    log_tiers(&config, info);
                }
                other => {
                    tracing::warn!(reason = other.degraded_reason().unwrap_or_default(), "container engine unavailable")
                }
            }
        }
        let ready = current.runtime.is_some();
        if changed || engine.borrow().runtime.is_none() {
            engine.send_replace(current);
        }
        changes.mark_unchanged();
        let pause = if ready {
            backoff = Duration::from_secs(2);
            Duration::from_secs(60)
        } else {
            let pause = backoff;
            backoff = (backoff * 2).min(Duration::from_secs(30));
            pause
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
            // Someone reported the engine hung: probe again soon.
            Ok(()) = changes.changed(), if ready => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// The engine's watcher ([`watch_engine`]) as a subsystem.
#[derive(Debug)]
pub struct EngineWatch {
    pub config: crate::base::config::ContainerConfig,
    pub engine: std::sync::Arc<watch::Sender<Engine>>,
}

impl Subsystem for EngineWatch {
    fn name(&self) -> &'static str {
        "engine"
    }

    fn run_until(self: std::sync::Arc<Self>, shutdown: CancellationToken) -> Work {
        Box::pin(watch_engine(self.config.clone(), self.engine.clone(), shutdown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A start that failed for want of space is told as the full disk, never by the socket or
    /// the file it was writing; anything else keeps its causes.
    #[test]
    fn a_start_on_a_full_disk_is_told_without_the_file_it_was_writing() {
        use crate::sandbox::sockets::ListenerError;
        use manager::ContainerError;
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let path = PathBuf::from("/srv/baaaht/ipc/c.sock");
        let socket = ContainerError::Socket(ListenerError::Create { path, source: full });
        assert_eq!(socket.told(), crate::base::state::DISK_FULL_WORK);
        let busy = ContainerError::Busy { max: 2, waited: Duration::from_secs(30) };
        assert_eq!(busy.told(), busy.to_string());
    }

    fn runtime(name: &str, path: &str, args: &[&str]) -> (String, String, Vec<String>) {
        (name.into(), path.into(), args.iter().map(|arg| arg.to_string()).collect())
    }

    #[test]
    fn gvisor_is_found_only_with_what_baaaht_needs() {
        let ready = ["--platform=ptrace", "--network=none", "--host-uds=open", "--oci-seccomp"];
        let docker = EngineKind::Docker;
        assert_eq!(find_gvisor(docker, &[runtime("runc", "runc", &[])]), Err(GvisorError::NoRunsc));
        assert_eq!(find_gvisor(docker, &[runtime("gv", "/usr/bin/runsc", &ready)]), Ok("gv".into()));
        // `runsc` itself first; separate values and single dashes read the same.
        let both = [
            runtime("zz", "/usr/bin/runsc", &ready),
            runtime("runsc", "/usr/bin/runsc", &["-host-uds", "all", "-oci-seccomp"]),
        ];
        assert_eq!(find_gvisor(docker, &both), Ok("runsc".into()));
        let lacking =
            find_gvisor(docker, &[runtime("runsc", "/usr/bin/runsc", &["--platform=ptrace", "--network=none"])]);
        assert_eq!(
            lacking.map_err(|error| error.to_string()),
            Err("the engine's runsc cannot run baaaht's containers: its runtime `runsc` lacks --host-uds=open and --oci-seccomp".into())
        );
        assert!(find_gvisor(EngineKind::Podman, &[runtime("runsc", "/usr/bin/runsc", &ready)]).is_err());
    }

    #[test]
    fn auto_falls_back_and_gvisor_is_refused_with_the_fix() {
        use crate::base::config::IsolationChoice;
        let mut engine = EngineInfo {
            kind: EngineKind::Docker,
            socket: PathBuf::from("/var/run/docker.sock"),
            version: "20.10".into(),
            api_version: "1.41".into(),
            gvisor: Err(GvisorError::NoRunsc),
            gvisor_program: None,
            data_root: None,
        };
        assert_eq!(Isolation::resolve(IsolationChoice::Auto, &engine), Ok(Isolation::Runc));
        assert_eq!(Isolation::resolve(IsolationChoice::Runc, &engine), Ok(Isolation::Runc));
        let refused = Isolation::resolve(IsolationChoice::Gvisor, &engine).expect_err("refused").to_string();
        assert!(refused.contains("no runsc runtime") && refused.contains("install Debian's runsc"), "{refused}");
        let config = crate::base::config::ContainerConfig::default();
        let fell_back: Vec<&str> =
            tiers(&config, &engine).into_iter().filter(|t| !t.reason.is_empty()).map(|t| t.role.as_str()).collect();
        assert_eq!(fell_back, ["coder", "tool", "mcp"]);
        engine.gvisor = Ok("runsc".into());
        assert_eq!(Isolation::resolve(IsolationChoice::Auto, &engine), Ok(Isolation::Gvisor));
        let gvisor: Vec<&str> = tiers(&config, &engine)
            .into_iter()
            .filter(|t| t.tier == Some(Isolation::Gvisor))
            .map(|t| t.role.as_str())
            .collect();
        assert_eq!(gvisor, ["coder", "tool", "mcp"]);
    }

    #[test]
    fn candidates_per_choice() {
        let env = |key: &str| match key {
            "DOCKER_HOST" => Some("unix:///custom/docker.sock".to_string()),
            "XDG_RUNTIME_DIR" => Some("/run/user/1000".to_string()),
            _ => None,
        };
        let paths = |choice| -> Vec<String> {
            candidate_sockets(choice, env).iter().map(|p| p.display().to_string()).collect()
        };
        assert_eq!(
            paths(RuntimeChoice::Auto),
            [
                "/custom/docker.sock",
                "/var/run/docker.sock",
                "/run/podman/podman.sock",
                "/run/user/1000/podman/podman.sock"
            ]
        );
        assert_eq!(paths(RuntimeChoice::Docker), ["/custom/docker.sock", "/var/run/docker.sock"]);
        assert_eq!(paths(RuntimeChoice::Podman), ["/run/podman/podman.sock", "/run/user/1000/podman/podman.sock"]);
        let tcp = |key: &str| (key == "DOCKER_HOST").then(|| "tcp://10.0.0.1:2375".to_string());
        assert_eq!(candidate_sockets(RuntimeChoice::Docker, tcp), [PathBuf::from("/var/run/docker.sock")]);
    }
}
