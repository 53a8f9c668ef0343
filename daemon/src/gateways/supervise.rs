//! The daemon runs the gateways registered with `mode: container` or `mode: process`
//! (DESIGN.md §9.2): it starts each with a token of its own for that run (the registration's
//! token is not needed), waits for its health socket, probes it every
//! `orchestrator.health_check.interval`, and restarts it — at once after a good run, with a
//! growing pause when it keeps failing — when it exits or fails `failure_threshold` checks in a
//! row, telling the admins.
//!
//! In its container a gateway has no network: the gateway's folder (`data/gateways/{name}/`,
//! mounted at `/gateway`) holds its daemon socket, the [`egress`](super::egress) socket that is
//! its only way out, and the health socket it serves.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baaaht_proto::client::Backoff;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::egress::{hosts_of, Tunnels};
use super::{GatewayKind, GatewayRecord, RunMode, GATEWAY_SOCKET_NAME};
use crate::audit::Audit;
use crate::auth::{Context, Role, CONTAINER_UID};
use crate::config::HealthCheckConfig;
use crate::container::instance::Instance;
use crate::container::manager::{ContainerManager, RunRequest, BINARIES_MOUNT};
use crate::container::{Engine, MountSpec};
use crate::egress::proxy::WebProxy;
use crate::health::Notifier;
use crate::metrics::Metrics;
use crate::sockets::ListenerSet;

/// The gateway's folder inside its container.
const MOUNT: &str = "/gateway";
const HEALTH_SOCKET: &str = "health.sock";
const EGRESS_SOCKET: &str = "egress.sock";
/// How long a started gateway may take to serve its health socket.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The binary of a gateway kind.
pub fn binary_of(kind: &GatewayKind) -> &'static str {
    match kind {
        GatewayKind::Web { .. } => "baaaht-web",
        GatewayKind::Slack { .. } => "baaaht-slack",
    }
}

/// Where a gateway the daemon runs stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Starting,
    Running,
    /// Down, restarting: why.
    Down(String),
}

impl State {
    /// `starting`, `running` or `down`, and why.
    pub fn describe(&self) -> (&'static str, String) {
        match self {
            State::Starting => ("starting", String::new()),
            State::Running => ("running", String::new()),
            State::Down(why) => ("down", why.clone()),
        }
    }
}

/// What every supervisor needs.
pub struct Supervision {
    pub containers: Arc<ContainerManager>,
    pub listeners: Arc<ListenerSet>,
    pub engine: watch::Receiver<Engine>,
    pub binaries_dir: PathBuf,
    pub gateways_dir: PathBuf,
    pub health: HealthCheckConfig,
    pub web: Arc<WebProxy>,
    pub audit: Audit,
    pub metrics: Arc<Metrics>,
    pub notifier: Arc<Notifier>,
    pub cancel: CancellationToken,
    pub tracker: tokio_util::task::TaskTracker,
}

struct Supervised {
    cancel: CancellationToken,
    state: watch::Receiver<State>,
    done: tokio::task::JoinHandle<()>,
}

/// The supervisors of the gateways the daemon runs.
pub struct Supervisors {
    supervision: Arc<Supervision>,
    running: Mutex<HashMap<String, Supervised>>,
}

impl std::fmt::Debug for Supervisors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let running: Vec<String> =
            self.running.lock().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect();
        f.debug_struct("Supervisors").field("running", &running).finish_non_exhaustive()
    }
}

impl Supervisors {
    pub fn new(supervision: Supervision) -> Supervisors {
        Supervisors { supervision: Arc::new(supervision), running: Mutex::default() }
    }

    /// Starts supervising `record` (nothing for an external gateway).
    pub fn start(&self, record: GatewayRecord) {
        if record.mode == RunMode::External {
            return;
        }
        let name = record.name.clone();
        let cancel = self.supervision.cancel.child_token();
        let (state, receiver) = watch::channel(State::Starting);
        let supervisor = Supervisor { record, supervision: self.supervision.clone(), state, cancel: cancel.clone() };
        let span = tracing::info_span!(parent: None, "gateway", gateway = %name);
        let done = self.supervision.tracker.spawn(tracing::Instrument::instrument(supervisor.run(), span));
        let replaced = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, Supervised { cancel, state: receiver, done });
        if let Some(old) = replaced {
            old.cancel.cancel();
        }
    }

    /// Stops gateway `name` and waits until it is gone.
    pub async fn stop(&self, name: &str) {
        let supervised = self.running.lock().unwrap_or_else(PoisonError::into_inner).remove(name);
        if let Some(supervised) = supervised {
            supervised.cancel.cancel();
            // silent-ok: a supervisor that panicked has nothing left to stop.
            let _ = supervised.done.await;
        }
    }

    /// Asks the gateway binary of `kind` whether it takes `args` (`--check`); its complaint
    /// when not. Without the binary there is nothing to ask: the run says what is missing.
    pub async fn check_args(&self, kind: &GatewayKind, args: &[String]) -> Result<(), String> {
        let binary = self.supervision.binaries_dir.join(binary_of(kind));
        if !binary.is_file() {
            return Ok(());
        }
        let checked = tokio::process::Command::new(&binary)
            .arg("--check")
            .arg("--socket")
            .arg("/dev/null")
            .args(args)
            .env_clear()
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(10), checked)
            .await
            .map_err(|_elapsed| format!("{} --check did not answer within 10 s", binary.display()))?
            .map_err(|error| format!("cannot run {}: {error}", binary.display()))?;
        if output.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let complaint = stderr.lines().find(|line| line.starts_with("error:")).unwrap_or(stderr.trim());
        Err(format!("the gateway's arguments: {}", complaint.trim_start_matches("error: ")))
    }

    /// Where gateway `name` stands, when the daemon runs it.
    pub fn state(&self, name: &str) -> Option<State> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner).get(name).map(|s| s.state.borrow().clone())
    }
}

struct Supervisor {
    record: GatewayRecord,
    supervision: Arc<Supervision>,
    state: watch::Sender<State>,
    cancel: CancellationToken,
}

impl Supervisor {
    fn folder(&self) -> PathBuf {
        self.supervision.gateways_dir.join(&self.record.name)
    }

    async fn run(self) {
        tracing::info!(mode = self.record.mode.as_str(), "starting the gateway");
        let mut delay = Duration::from_secs(1);
        loop {
            let started = Instant::now();
            let outcome = tokio::select! {
                () = self.cancel.cancelled() => break,
                outcome = self.start() => outcome,
            };
            let reason = match outcome {
                Ok((mut instance, channel, tunnels)) => {
                    self.state.send_replace(State::Running);
                    tracing::info!(startup_ms = started.elapsed().as_millis() as u64, "the gateway is running");
                    let (reason, why) = self.watch(channel, &mut instance).await;
                    if !self.cancel.is_cancelled() {
                        self.supervision.metrics.record_restart(Role::Gateway.as_str(), why);
                        self.supervision.notifier.notify(
                            &format!("Gateway {} restarted", self.record.name),
                            &format!("The gateway {} stopped ({reason}); the daemon restarts it.", self.record.name),
                        );
                    }
                    self.stop(instance, tunnels).await;
                    reason
                }
                Err((instance, tunnels, reason)) => {
                    if let Some(instance) = instance {
                        self.stop(instance, tunnels).await;
                    }
                    reason
                }
            };
            if self.cancel.is_cancelled() {
                break;
            }
            self.state.send_replace(State::Down(reason.clone()));
            if started.elapsed() > Duration::from_secs(60) {
                delay = Duration::from_secs(1);
            }
            tracing::warn!(%reason, retry_in_ms = delay.as_millis() as u64, "restarting the gateway");
            tokio::select! {
                () = self.cancel.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(Duration::from_secs(30));
        }
        tracing::info!("the gateway is stopped");
    }

    /// Starts one run: its token, its egress (a container's), the process or container, then
    /// its health socket.
    #[allow(clippy::type_complexity)]
    async fn start(
        &self,
    ) -> Result<
        (Instance, tonic::transport::Channel, Option<CancellationToken>),
        (Option<Instance>, Option<CancellationToken>, String),
    > {
        let fail = |reason: String| (None, None, reason);
        let name = &self.record.name;
        let endpoint = self
            .supervision
            .listeners
            .gateway_endpoint(name)
            .ok_or_else(|| fail(format!("gateway {name}'s socket is not served")))?;
        let binary = self.supervision.binaries_dir.join(binary_of(&self.record.kind));
        if !binary.is_file() {
            return Err(fail(format!("{} is missing: build it or set container.binaries_dir", binary.display())));
        }
        let folder = self.folder();
        let health = folder.join(HEALTH_SOCKET);
        remove_stale(&health).map_err(fail)?;
        let token = crate::auth::new_token().map_err(|error| fail(format!("cannot make a token: {error}")))?;
        endpoint.set_run_token(Some(crate::sockets::token_sha256(&token)));
        let env = vec![("BAAAHT_GATEWAY_TOKEN".to_string(), token), ("RUST_LOG".to_string(), "info".to_string())];
        let (instance, tunnels) = match self.record.mode {
            RunMode::Process | RunMode::External => {
                let mut command = tokio::process::Command::new(&binary);
                command
                    .arg("--socket")
                    .arg(folder.join(GATEWAY_SOCKET_NAME))
                    .arg("--health-socket")
                    .arg(&health)
                    .arg("--parent")
                    .arg(std::process::id().to_string())
                    .args(&self.record.args)
                    // Nothing of the daemon's environment (which may hold keys) is inherited.
                    .env_clear()
                    .envs(env)
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .kill_on_drop(true);
                let child =
                    command.spawn().map_err(|error| fail(format!("cannot start {}: {error}", binary.display())))?;
                (Instance::Process(child), None)
            }
            RunMode::Container => {
                let tunnels = self.open_egress(&folder).map_err(fail)?;
                match self.start_container(&binary, &folder, env).await {
                    Ok(name) => (Instance::Container(name), Some(tunnels)),
                    Err(reason) => return Err((None, Some(tunnels), reason)),
                }
            }
        };
        let mut instance = instance;
        match self.connect(&health, &mut instance).await {
            Ok(channel) => Ok((instance, channel, tunnels)),
            Err(reason) => Err((Some(instance), tunnels, reason)),
        }
    }

    /// Serves the container's egress socket; cancelled when the run ends.
    fn open_egress(&self, folder: &Path) -> Result<CancellationToken, String> {
        let path = folder.join(EGRESS_SOCKET);
        let tunnels = Tunnels {
            gateway: self.record.name.clone(),
            hosts: hosts_of(&self.record),
            web: self.supervision.web.clone(),
            audit: self.supervision.audit.clone(),
        };
        let cancel = self.cancel.child_token();
        tunnels.serve(&path, cancel.clone()).map_err(|error| format!("cannot serve {}: {error}", path.display()))?;
        Ok(cancel)
    }

    async fn start_container(
        &self,
        binary: &Path,
        folder: &Path,
        env: Vec<(String, String)>,
    ) -> Result<String, String> {
        let mut engine = self.supervision.engine.clone();
        if engine.borrow().runtime.is_none() {
            self.state.send_replace(State::Down(
                "no container engine yet (or register the gateway with --mode process to run it on the host)".into(),
            ));
            while engine.borrow_and_update().runtime.is_none() {
                if engine.changed().await.is_err() {
                    return Err("the engine watcher stopped".into());
                }
            }
        }
        hand_over(folder).map_err(|error| format!("cannot hand {} to the container: {error}", folder.display()))?;
        let file = binary.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        let mut command = vec![
            format!("{BINARIES_MOUNT}/{file}"),
            "--socket".into(),
            format!("{MOUNT}/{GATEWAY_SOCKET_NAME}"),
            "--health-socket".into(),
            format!("{MOUNT}/{HEALTH_SOCKET}"),
            "--egress-socket".into(),
            format!("{MOUNT}/{EGRESS_SOCKET}"),
        ];
        command.extend(self.record.args.iter().cloned());
        let request = RunRequest {
            role: Role::Gateway,
            session_id: "system".into(),
            context: Context::user("system"),
            command,
            mounts: vec![
                MountSpec { host: binary.to_path_buf(), target: format!("{BINARIES_MOUNT}/{file}"), read_only: true },
                MountSpec { host: folder.to_path_buf(), target: MOUNT.into(), read_only: false },
            ],
            env,
            timeout: Duration::MAX,
            daemon_socket: false,
            working_dir: None,
            image: None,
        };
        let handle = self
            .supervision
            .containers
            .start_detached(request)
            .await
            .map_err(|error| format!("cannot start the gateway's container: {error}"))?;
        Ok(handle.name)
    }

    /// Waits for the health socket (or the process's exit) and connects to it.
    async fn connect(&self, health: &Path, instance: &mut Instance) -> Result<tonic::transport::Channel, String> {
        let deadline = Instant::now() + START_TIMEOUT;
        while !health.exists() {
            if let Instance::Process(child) = instance {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("the gateway exited at start ({status}); its log says why"));
                }
            }
            if Instant::now() > deadline {
                return Err(format!("the gateway did not serve its health within {} s", START_TIMEOUT.as_secs()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let backoff = Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(500),
            give_up_after: Duration::from_secs(5),
        };
        baaaht_proto::client::channel(health, backoff)
            .await
            .map_err(|error| format!("cannot connect to the gateway's health socket: {error}"))
    }

    async fn watch(&self, channel: tonic::transport::Channel, instance: &mut Instance) -> (String, &'static str) {
        let exited = instance.exited();
        crate::health::watch_service(channel, &self.record.name, &self.supervision.health, exited, &self.cancel, |_| {})
            .await
    }

    /// Ends a run: the process or container, its egress, its token.
    async fn stop(&self, instance: Instance, tunnels: Option<CancellationToken>) {
        instance.stop(&self.supervision.containers).await;
        if let Some(tunnels) = tunnels {
            tunnels.cancel();
        }
        if let Some(endpoint) = self.supervision.listeners.gateway_endpoint(&self.record.name) {
            endpoint.set_run_token(None);
        }
    }
}

fn remove_stale(path: &Path) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("cannot remove {}: {error}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Gives the gateway's folder and the daemon's sockets in it to the containers' uid (or, without
/// root, opens the sockets to the daemon's group, which the folder already keeps to itself).
fn hand_over(folder: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    crate::shared_dirs::hand_over(crate::shared_dirs::open_trusted(folder)?)?;
    for socket in [GATEWAY_SOCKET_NAME, EGRESS_SOCKET] {
        let path = folder.join(socket);
        if std::os::unix::fs::chown(&path, Some(CONTAINER_UID), Some(CONTAINER_UID)).is_ok() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        } else {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660))?;
        }
    }
    Ok(())
}
