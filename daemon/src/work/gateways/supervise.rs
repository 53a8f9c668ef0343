//! The daemon runs the gateways registered with `mode: container` or `mode: process`
//! (DESIGN.md §9.2): it starts each with a token of its own for that run (the registration's
//! token is not needed), waits for its health socket, probes it every
//! `orchestrator.health_check.interval`, and restarts it — at once after a good run, with a
//! growing pause when it keeps failing — when it exits or fails `failure_threshold` checks in a
//! row, telling the admins.
//!
//! In its container a gateway has no network. The gateway's folder (`data/gateways/{name}/`,
//! the daemon's alone) holds its daemon socket and the [`egress`](super::egress) socket that is
//! its only way out, each mounted read-only at `/gateway/`, and `run/`, the one folder the
//! gateway writes in, for the health socket it serves; the daemon connects to that socket
//! through a descriptor of it, never following what the gateway puts there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::egress::{self, hosts_of};
use super::{publish, GatewayKind, GatewayRecord, RunMode};
use crate::base::auth::{Context, Role};
use crate::base::config::HealthCheckConfig;
use crate::base::lifetime::Subsystem;
use crate::base::metrics::Metrics;
use crate::guard::audit::Audit;
use crate::net::egress::proxy::WebProxy;
use crate::sandbox::container::instance::Instance;
use crate::sandbox::container::manager::{ContainerError, ContainerManager, RunRequest, BINARIES_MOUNT};
use crate::sandbox::container::{Engine, MountSpec};
use crate::sandbox::sockets::{ListenerSet, GATEWAY_SOCKET_NAME};
use crate::work::health::Notifier;

/// The gateway's folder inside its container.
const MOUNT: &str = "/gateway";
/// The folder of the gateway's folder a run writes in: its health socket.
const RUN_FOLDER: &str = "run";
const HEALTH_SOCKET: &str = "health.sock";
/// The web gateway's site, in `run/`, when it runs in a container (see [`super::publish`]).
const HTTP_SOCKET: &str = "http.sock";
/// Where a web gateway's kept state is mounted in its container.
const STATE_MOUNT: &str = "/gateway/state";
const EGRESS_SOCKET: &str = "egress.sock";
/// How long a started gateway may take to serve its health socket.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a gateway's arguments are refused, or a run of it could not start: the run's reason is
/// what its state and the admins' notice show. Where the text always held the cause, it still
/// does.
///
/// Each message carries its cause's text, so none is a `source` (a chain would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error("{} --check did not answer within 10 s", .0.display())]
    CheckSilent(PathBuf),
    #[error("cannot run {}: {error}", binary.display())]
    CheckRun { binary: PathBuf, error: std::io::Error },
    /// What the gateway binary's `--check` said of the arguments.
    #[error("the gateway's arguments: {0}")]
    Arguments(String),
    #[error("gateway {0}'s socket is not served")]
    NotServed(String),
    #[error("{} is missing: build it or set container.binaries_dir", .0.display())]
    NoBinary(PathBuf),
    #[error("cannot prepare {}: {error}", path.display())]
    RunFolder { path: PathBuf, error: std::io::Error },
    #[error("cannot make a token: {0}")]
    Token(getrandom::Error),
    #[error(transparent)]
    Publish(#[from] publish::PublishError),
    #[error("cannot serve {}: {error}", path.display())]
    Egress { path: PathBuf, error: std::io::Error },
    #[error("cannot hand the sockets to the container: {0}")]
    ShareSockets(std::io::Error),
    #[error("cannot start {}: {error}", binary.display())]
    Spawn { binary: PathBuf, error: std::io::Error },
    #[error("the daemon is stopping it")]
    Stopping,
    #[error("the engine watcher stopped")]
    EngineWatcher,
    #[error("cannot prepare its state folder: {0}")]
    StateFolder(std::io::Error),
    #[error("cannot start the gateway's container: {0}")]
    Container(Box<ContainerError>),
    #[error("the gateway's health socket is unusable: {0}")]
    HealthSocket(std::io::Error),
    #[error("the gateway exited at start ({0}); its log says why")]
    ExitedAtStart(std::process::ExitStatus),
    #[error("the gateway did not serve its health within {} s", START_TIMEOUT.as_secs())]
    NoHealth,
    #[error("cannot connect to the gateway's health socket: {0}")]
    Connect(tonic::transport::Error),
    #[error("the gateway's health socket did not answer within 5 s")]
    ConnectSilent,
    #[error("the gateway serves its health but not its site")]
    NoSite,
    #[error("the gateway's site socket is unusable: {0}")]
    SiteSocket(std::io::Error),
}

/// What the daemon gives a gateway of `kind` beyond its sockets: the web gateway keeps its
/// signed-in sessions, the email gateway its threads' conversations, the Matrix gateway its
/// device and keys, and every chat gateway the chats it served (to send them what comes
/// between turns), in `state` (kept across the gateway's and the daemon's restarts, removed
/// with the gateway), so a restart signs nobody out and forgets no chat.
pub fn kind_args(kind: &GatewayKind, state: &Path) -> Vec<std::ffi::OsString> {
    match kind {
        GatewayKind::Web { .. } | GatewayKind::Slack { .. } | GatewayKind::Telegram { .. } => {
            vec!["--state-dir".into(), state.as_os_str().to_owned()]
        }
        GatewayKind::Email { address } => {
            vec!["--address".into(), address.into(), "--state-dir".into(), state.as_os_str().to_owned()]
        }
        GatewayKind::Matrix { homeserver } => {
            vec!["--homeserver".into(), homeserver.into(), "--state-dir".into(), state.as_os_str().to_owned()]
        }
    }
}

/// Where a `--ca-file` given to a gateway is in its container.
const CA_MOUNT: &str = "/gateway/ca.pem";

/// `args` with a `--ca-file PATH` (a host file) pointed at [`CA_MOUNT`], and the mount that
/// puts it there read-only.
fn ca_file_mounted(args: &[String]) -> (Vec<String>, Option<MountSpec>) {
    let mut out = Vec::with_capacity(args.len());
    let mut mount = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let path = match arg.strip_prefix("--ca-file=") {
            Some(path) => Some(path.to_string()),
            None if arg == "--ca-file" => args.next().cloned(),
            None => None,
        };
        match path {
            Some(path) => {
                mount = Some(MountSpec { host: PathBuf::from(path), target: CA_MOUNT.into(), read_only: true });
                out.extend(["--ca-file".to_string(), CA_MOUNT.to_string()]);
            }
            None => out.push(arg.clone()),
        }
    }
    (out, mount)
}

/// Where a gateway the daemon runs stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Starting,
    Running,
    /// Running, but its health says something fails (a web gateway whose sign-ins fail): what.
    Degraded(String),
    /// Down, restarting: why.
    Down(String),
}

impl State {
    /// `starting`, `running`, `degraded` or `down`, and why.
    pub fn describe(&self) -> (&'static str, String) {
        match self {
            State::Starting => ("starting", String::new()),
            State::Running => ("running", String::new()),
            State::Degraded(what) => ("degraded", what.clone()),
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
    /// Where each gateway's state is kept between runs (`{state_dirs}/{name}`).
    pub state_dirs: PathBuf,
    pub health: HealthCheckConfig,
    pub web: Arc<WebProxy>,
    pub audit: Audit,
    pub metrics: Arc<Metrics>,
    pub notifier: Arc<Notifier>,
    /// Stops every gateway: cancelled after the daemon's in-flight requests are drained, so
    /// answers being written reach Slack.
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

    /// Serves the socket of every registered gateway and starts supervising those the daemon
    /// runs (at start).
    pub fn serve_all(&self, registry: &super::Registry) {
        for gateway in registry.list() {
            let folder = registry.socket_folder(&gateway.name);
            match self.supervision.listeners.add_gateway(&gateway.name, &gateway.token_sha256, folder) {
                Ok(path) => {
                    tracing::info!(gateway = %gateway.name, socket = %path.display(), mode = gateway.mode.as_str(), "serving a gateway");
                    self.start(gateway);
                }
                Err(error) => tracing::error!(gateway = %gateway.name, %error, "cannot serve a gateway's socket"),
            }
        }
    }

    /// Stops every gateway (at shutdown, once requests are drained).
    pub fn stop_all(&self) {
        self.supervision.cancel.cancel();
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
    pub async fn check_args(&self, kind: &GatewayKind, args: &[String]) -> Result<(), SuperviseError> {
        let binary = self.supervision.binaries_dir.join(kind.binary());
        if !binary.is_file() {
            return Ok(());
        }
        let checked = tokio::process::Command::new(&binary)
            .arg("--check")
            .arg("--socket")
            .arg("/dev/null")
            .args(kind_args(kind, Path::new("/nonexistent")))
            .args(args)
            .env_clear()
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = match tokio::time::timeout(Duration::from_secs(10), checked).await {
            Ok(Ok(output)) => output,
            Ok(Err(error)) => return Err(SuperviseError::CheckRun { binary, error }),
            Err(_elapsed) => return Err(SuperviseError::CheckSilent(binary)),
        };
        if output.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let complaint = stderr.lines().find(|line| line.starts_with("error:")).unwrap_or(stderr.trim());
        Err(SuperviseError::Arguments(complaint.trim_start_matches("error: ").to_string()))
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

/// What one run holds, ended by [`Supervisor::end`] however the run went.
#[derive(Default)]
struct Run {
    instance: Option<Instance>,
    tunnels: Option<CancellationToken>,
    /// A web gateway's port, carried to its container.
    published: Option<CancellationToken>,
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
            let mut run = Run::default();
            let (reason, was_healthy) = match self.start(&mut run).await {
                Ok(channel) => {
                    self.state.send_replace(State::Running);
                    tracing::info!(startup_ms = started.elapsed().as_millis() as u64, "the gateway is running");
                    let (reason, why, was_healthy) = self.watch(channel, &mut run).await;
                    if !self.cancel.is_cancelled() {
                        self.supervision.metrics.record_restart(Role::Gateway.as_str(), why);
                        // Once per outage: a gateway that never got well is not announced again.
                        if was_healthy {
                            self.supervision.notifier.notify(
                                &format!("Gateway {} restarted", self.record.name),
                                &format!(
                                    "The gateway {} stopped ({reason}); the daemon restarts it.",
                                    self.record.name
                                ),
                            );
                        }
                    }
                    (reason, was_healthy)
                }
                Err(error) => (error.to_string(), false),
            };
            self.end(run).await;
            if self.cancel.is_cancelled() {
                break;
            }
            self.state.send_replace(State::Down(reason.clone()));
            // A gateway that was well restarts at once; one that keeps failing backs off.
            if was_healthy {
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

    /// Starts one run: a fresh `run/` folder, its token, its egress (a container's), the
    /// process or container, then its health socket. What it started is in `run` either way.
    async fn start(&self, run: &mut Run) -> Result<tonic::transport::Channel, SuperviseError> {
        let name = &self.record.name;
        let endpoint =
            self.supervision.listeners.gateway_endpoint(name).ok_or_else(|| SuperviseError::NotServed(name.clone()))?;
        let binary = self.supervision.binaries_dir.join(self.record.kind.binary());
        if !binary.is_file() {
            return Err(SuperviseError::NoBinary(binary));
        }
        let folder = self.folder();
        let container = self.record.mode == RunMode::Container;
        prepare_run_folder(&folder, container)
            .map_err(|error| SuperviseError::RunFolder { path: folder.join(RUN_FOLDER), error })?;
        let token = crate::base::auth::new_token().map_err(SuperviseError::Token)?;
        endpoint.set_run_token(Some(crate::base::auth::token_sha256(&token)));
        let env = vec![("BAAAHT_GATEWAY_TOKEN".to_string(), token), ("RUST_LOG".to_string(), "info".to_string())];
        // A web gateway's port is the daemon's while it runs in a container: bound first, so an
        // address in use says so at once.
        let web = matches!(self.record.kind, GatewayKind::Web { .. });
        let published = match (container, web) {
            (true, true) => {
                let tls = publish::tls_of(&self.record.args)?;
                Some((publish::bind(publish::listen_address(&self.record.args)?).await?, tls))
            }
            _ => None,
        };
        if container {
            run.tunnels = Some(self.open_egress(&folder).await?);
            share_sockets(&folder).map_err(SuperviseError::ShareSockets)?;
            run.instance = Some(Instance::Container(self.start_container(&binary, &folder, env).await?));
        } else {
            let mut command = tokio::process::Command::new(&binary);
            command
                .arg("--socket")
                .arg(folder.join(GATEWAY_SOCKET_NAME))
                .arg("--health-socket")
                .arg(folder.join(RUN_FOLDER).join(HEALTH_SOCKET))
                .arg("--parent")
                .arg(std::process::id().to_string())
                .args(kind_args(&self.record.kind, &self.supervision.state_dirs.join(&self.record.name)))
                .args(&self.record.args)
                // Nothing of the daemon's environment (which may hold keys) is inherited; its
                // log goes where the daemon's does.
                .env_clear()
                .envs(env)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .kill_on_drop(true);
            let child = command.spawn().map_err(|error| SuperviseError::Spawn { binary, error })?;
            run.instance = Some(Instance::Process(child));
        }
        let channel = self.connect(&folder, run).await?;
        if let Some((listener, tls)) = published {
            // The gateway serves its site before its health: the socket is there now.
            let socket = match open_run_socket(&folder, HTTP_SOCKET) {
                Ok(Some(socket)) => socket,
                Ok(None) => return Err(SuperviseError::NoSite),
                Err(error) => return Err(SuperviseError::SiteSocket(error)),
            };
            let cancel = self.cancel.child_token();
            publish::forward(name.clone(), listener, tls, socket, cancel.clone(), &self.supervision.tracker);
            run.published = Some(cancel);
        }
        Ok(channel)
    }

    /// Serves the container's egress socket; cancelled when the run ends. A web gateway's
    /// provider may keep its token and key endpoints on other hosts (Google does): their hosts
    /// are read from its discovery document, as the daemon reaches it.
    async fn open_egress(&self, folder: &Path) -> Result<CancellationToken, SuperviseError> {
        let path = folder.join(EGRESS_SOCKET);
        let mut hosts = hosts_of(&self.record);
        if let GatewayKind::Web { issuer, .. } = &self.record.kind {
            match crate::people::oidc::endpoint_hosts(&self.supervision.web, issuer).await {
                Ok(more) => hosts.extend(more.into_iter().filter(|host| !hosts.contains(host)).collect::<Vec<_>>()),
                Err(error) => {
                    tracing::warn!(%error, "cannot read the provider's discovery document: the gateway may reach its host only")
                }
            }
        }
        let cancel = self.cancel.child_token();
        let (web, audit) = (self.supervision.web.clone(), self.supervision.audit.clone());
        egress::serve(&self.record, hosts, web, audit, &path, cancel.clone(), &self.supervision.tracker)
            .map_err(|error| SuperviseError::Egress { path, error })?;
        Ok(cancel)
    }

    async fn start_container(
        &self,
        binary: &Path,
        folder: &Path,
        env: Vec<(String, String)>,
    ) -> Result<String, SuperviseError> {
        let mut engine = self.supervision.engine.clone();
        if engine.borrow().runtime.is_none() {
            self.state.send_replace(State::Down(
                "no container engine yet (or register the gateway with --mode process to run it on the host)".into(),
            ));
            while engine.borrow_and_update().runtime.is_none() {
                tokio::select! {
                    () = self.cancel.cancelled() => return Err(SuperviseError::Stopping),
                    changed = engine.changed() => if changed.is_err() {
                        return Err(SuperviseError::EngineWatcher);
                    },
                }
            }
        }
        let file = binary.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        let mut command = vec![
            format!("{BINARIES_MOUNT}/{file}"),
            "--socket".into(),
            format!("{MOUNT}/{GATEWAY_SOCKET_NAME}"),
            "--health-socket".into(),
            format!("{MOUNT}/{RUN_FOLDER}/{HEALTH_SOCKET}"),
            "--egress-socket".into(),
            format!("{MOUNT}/{EGRESS_SOCKET}"),
        ];
        // The daemon's two sockets, each on its own and read-only (the container cannot swap
        // them), and `run/`, the one folder the container writes in (its health socket).
        let socket =
            |name: &str| MountSpec { host: folder.join(name), target: format!("{MOUNT}/{name}"), read_only: true };
        let mut mounts = vec![];
        if let GatewayKind::Web { .. } = self.record.kind {
            // The site on a socket the daemon publishes, and its sign-ins kept across runs.
            let state = self.container_state_dir().map_err(SuperviseError::StateFolder)?;
            command.extend([
                "--listen-socket".into(),
                format!("{MOUNT}/{RUN_FOLDER}/{HTTP_SOCKET}"),
                "--state-dir".into(),
                STATE_MOUNT.into(),
            ]);
            // A household's own push service's authority, given to it read-only.
            let (args, ca_file) = ca_file_mounted(&publish::container_args(&self.record.args));
            command.extend(args);
            mounts.push(MountSpec { host: state, target: STATE_MOUNT.into(), read_only: false });
            mounts.extend(ca_file);
        } else {
            // Its kept state across runs (the chats served; an email gateway's threads, a
            // Matrix gateway's device and keys), and a household's own certificate authority
            // (a host file) given to it read-only.
            let state = self.container_state_dir().map_err(SuperviseError::StateFolder)?;
            let kind_args = kind_args(&self.record.kind, Path::new(STATE_MOUNT));
            command.extend(kind_args.iter().map(|arg| arg.to_string_lossy().into_owned()));
            let (args, ca_file) = ca_file_mounted(&self.record.args);
            command.extend(args);
            mounts.push(MountSpec { host: state, target: STATE_MOUNT.into(), read_only: false });
            mounts.extend(ca_file);
        }
        let request = RunRequest {
            role: Role::Gateway,
            session_id: "system".into(),
            context: Context::user("system"),
            command,
            mounts: [
                MountSpec { host: binary.to_path_buf(), target: format!("{BINARIES_MOUNT}/{file}"), read_only: true },
                socket(GATEWAY_SOCKET_NAME),
                socket(EGRESS_SOCKET),
                MountSpec { host: folder.join(RUN_FOLDER), target: format!("{MOUNT}/{RUN_FOLDER}"), read_only: false },
            ]
            .into_iter()
            .chain(mounts)
            .collect(),
            env,
            timeout: Duration::MAX,
            daemon_socket: false,
            working_dir: None,
            image: None,
            limits: None,
        };
        let handle = self
            .supervision
            .containers
            .start_detached(request)
            .await
            .map_err(|error| SuperviseError::Container(Box::new(error)))?;
        Ok(handle.name)
    }

    /// Waits for the health socket (or the process's exit, or a stop) and connects to it,
    /// through a descriptor of the socket itself: what the gateway puts in `run/` is never
    /// followed anywhere else.
    async fn connect(&self, folder: &Path, run: &mut Run) -> Result<tonic::transport::Channel, SuperviseError> {
        use std::os::fd::AsRawFd;
        let deadline = Instant::now() + START_TIMEOUT;
        let socket = loop {
            match open_run_socket(folder, HEALTH_SOCKET) {
                Ok(Some(socket)) => break socket,
                Ok(None) => {}
                Err(error) => return Err(SuperviseError::HealthSocket(error)),
            }
            if let Some(status) = exited_at_start(run) {
                return Err(SuperviseError::ExitedAtStart(status));
            }
            if self.cancel.is_cancelled() {
                return Err(SuperviseError::Stopping);
            }
            if Instant::now() > deadline {
                return Err(SuperviseError::NoHealth);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // The descriptor lives as long as the channel's connector: a reconnect never reaches a
        // socket that took its number.
        let socket = Arc::new(socket);
        let connector = tower::service_fn(move |_: tonic::codegen::http::Uri| {
            let socket = socket.clone();
            async move {
                let path = format!("/proc/self/fd/{}", socket.as_raw_fd());
                tokio::net::UnixStream::connect(path).await.map(hyper_util::rt::TokioIo::new)
            }
        });
        let endpoint = tonic::transport::Endpoint::from_static("http://gateway.health");
        loop {
            let connect = endpoint.connect_with_connector(connector.clone());
            match tokio::time::timeout(Duration::from_secs(5), connect).await {
                Ok(Ok(channel)) => return Ok(channel),
                // The socket is bound before it listens: refused in between, asked again.
                Ok(Err(_refused)) if Instant::now() < deadline && !self.cancel.is_cancelled() => {
                    if let Some(status) = exited_at_start(run) {
                        return Err(SuperviseError::ExitedAtStart(status));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Ok(Err(error)) => return Err(SuperviseError::Connect(error)),
                Err(_) => return Err(SuperviseError::ConnectSilent),
            }
        }
    }

    /// Watches the run until it exits, fails its checks or is stopped: why, as a sentence and
    /// as `unhealthy` or `exited`, and whether it was ever healthy.
    async fn watch(&self, channel: tonic::transport::Channel, run: &mut Run) -> (String, &'static str, bool) {
        let mut was_healthy = false;
        let Some(instance) = run.instance.as_mut() else {
            return ("the gateway is not running".into(), "exited", false);
        };
        let exited = instance.exited();
        let health = &self.supervision.health;
        let state = &self.state;
        let (reason, why) =
            crate::work::health::watch_service(channel, &self.record.name, health, exited, &self.cancel, |answer| {
                was_healthy |= answer.status == "healthy";
                let now = match answer.status.as_str() {
                    "degraded" => State::Degraded(answer.message.clone()),
                    "healthy" => State::Running,
                    // Unhealthy: counted by the watch, which says so when it gives up.
                    _ => return,
                };
                state.send_if_modified(|was| {
                    let changed = *was != now;
                    *was = now;
                    changed
                });
            })
            .await;
        (reason, why, was_healthy)
    }

    /// The gateway's state folder, the containers' to write in (made when missing).
    fn container_state_dir(&self) -> std::io::Result<PathBuf> {
        use crate::sandbox::shared_dirs::{ensure_dir, open_trusted, Owner};
        let dirs = &self.supervision.state_dirs;
        std::fs::create_dir_all(dirs)?;
        ensure_dir(open_trusted(dirs)?, std::ffi::OsStr::new(&self.record.name), Owner::Containers)?;
        Ok(dirs.join(&self.record.name))
    }

    /// Ends a run: the process or container, its port, its egress, its token.
    async fn end(&self, run: Run) {
        if let Some(published) = run.published {
            published.cancel();
        }
        if let Some(instance) = run.instance {
            instance.stop(&self.supervision.containers).await;
        }
        if let Some(tunnels) = run.tunnels {
            tunnels.cancel();
        }
        if let Some(endpoint) = self.supervision.listeners.gateway_endpoint(&self.record.name) {
            endpoint.set_run_token(None);
        }
    }
}

/// The socket `name` the gateway serves in `run/`, opened as a descriptor (never followed
/// elsewhere); `None` while it is not there.
fn open_run_socket(folder: &Path, name: &str) -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    let run = crate::sandbox::shared_dirs::open_trusted(&folder.join(RUN_FOLDER))?;
    crate::sandbox::shared_dirs::open_socket(&run, std::ffi::OsStr::new(name))
}

/// A fresh `run/` in the gateway's folder: the container's to write in (its health socket, and
/// a web gateway's site socket), or the daemon's for a host process. What a previous run left
/// there goes.
fn prepare_run_folder(folder: &Path, container: bool) -> std::io::Result<()> {
    use crate::sandbox::shared_dirs::{ensure_dir, open_trusted, remove, Owner};
    let parent = open_trusted(folder)?;
    let owner = if container { Owner::Containers } else { Owner::Daemon };
    let run = ensure_dir(&parent, std::ffi::OsStr::new(RUN_FOLDER), owner)?;
    if remove(&run, std::ffi::OsStr::new(HEALTH_SOCKET)).is_ok() {
        return Ok(());
    }
    // Something that is not a file where the socket goes (a folder the last run made): the
    // whole folder goes (std's removal never follows a link) and a new one is made.
    drop(run);
    std::fs::remove_dir_all(folder.join(RUN_FOLDER))?;
    ensure_dir(&parent, std::ffi::OsStr::new(RUN_FOLDER), owner).map(drop)
}

/// Lets the containers' uid connect to the daemon's two sockets in the gateway's folder (a
/// folder only the daemon writes in; the sockets are mounted into the container one by one).
fn share_sockets(folder: &Path) -> std::io::Result<()> {
    for socket in [GATEWAY_SOCKET_NAME, EGRESS_SOCKET] {
        crate::sandbox::shared_dirs::share_socket(&folder.join(socket))?;
    }
    Ok(())
}

impl Subsystem for Supervisors {
    fn name(&self) -> &'static str {
        "gateways"
    }

    /// The gateways the daemon runs stop once the requests in flight are done, so that their
    /// own tasks end with the rest.
    fn stopping(&self) {
        self.stop_all();
    }
}

/// The exit status of a gateway process that has already exited, if it has.
fn exited_at_start(run: &mut Run) -> Option<std::process::ExitStatus> {
    match &mut run.instance {
        Some(Instance::Process(child)) => child.try_wait().ok().flatten(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_on_the_host_is_mounted_read_only_where_the_gateway_is_told_to_look() {
        let args: Vec<String> = ["--imap", "m:993", "--ca-file", "/etc/home-ca.pem", "--allow", "@x.org"]
            .iter()
            .map(|arg| arg.to_string())
            .collect();
        let (rewritten, mount) = ca_file_mounted(&args);
        assert_eq!(rewritten, ["--imap", "m:993", "--ca-file", CA_MOUNT, "--allow", "@x.org"]);
        let mount = mount.expect("mounted");
        assert_eq!(
            (mount.host.as_path(), mount.target.as_str(), mount.read_only),
            (Path::new("/etc/home-ca.pem"), CA_MOUNT, true)
        );
        let (joined, mount) = ca_file_mounted(&["--ca-file=/srv/ca.pem".to_string()]);
        assert_eq!(
            (joined, mount.map(|m| m.host)),
            (vec!["--ca-file".to_string(), CA_MOUNT.to_string()], Some(PathBuf::from("/srv/ca.pem")))
        );
        assert_eq!(ca_file_mounted(&["--allow".into(), "@x.org".into()]).1, None);
        let kind = GatewayKind::Email { address: "a@b.example".into() };
        assert_eq!(kind_args(&kind, Path::new("/state")), ["--address", "a@b.example", "--state-dir", "/state"]);
    }
}
