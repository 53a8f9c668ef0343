//! Tool calls (spec §8, DESIGN.md §1): each active session has one tool container whose
//! resident runner is connected over ServeTools; a call is a message to that runner, not a new
//! container. The container is created on the first call, recreated if it dies, removed after
//! `tools.warm_idle_timeout` without calls, and never shared between sessions. Calls of one
//! session run one at a time (the runner kills every process after each call).

pub mod acting;
pub mod browser;
pub mod call;
mod idle;
mod pooled;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::task::TaskTracker;

use crate::base::auth::{ContainerIdentity, Context, Role};
use crate::base::datadir::DataDir;
use crate::base::lifetime::{Subsystem, Work};
use crate::net::egress::relay::{Relay, TunnelDown, TunnelUp};
use crate::sandbox::container::manager::{ContainerManager, RunRequest, BINARIES_MOUNT};
use crate::sandbox::container::MountSpec;
use crate::work::health::{ProbeError, Probed};
use crate::work::peers::{Connected, Down, StreamError, Up};

/// Where a session's data folder is mounted in its tool container.
pub const WORKSPACE: &str = "/workspace";
/// Where its context's IPC folder (`data/ipc/{context}`) is mounted.
pub const IPC_MOUNT: &str = "/ipc";
/// Where the skills' `scripts/` folders are mounted, read-only, one per skill.
pub use baaaht_proto::SKILLS_MOUNT;
/// How long a new runner may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ToolsError {
    #[error(transparent)]
    Workspace(#[from] crate::sandbox::workspace::WorkspaceError),
    #[error("cannot prepare the tool container's IPC folder {}: {source}", path.display())]
    Ipc {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The workspace could not be made ready (its task panicked).
    #[error("cannot prepare the session's workspace: {0}")]
    Prepare(String),
    #[error("cannot start the session's tool container: {0}")]
    Container(#[source] crate::sandbox::container::manager::ContainerError),
    /// The tool container could not start for want of space in the data dir (the operator's
    /// log has the error).
    #[error("cannot start the session's tool container: {}", crate::base::state::DISK_FULL_WORK)]
    DiskFull,
    /// The container engine is away: none, down, restarting or hung (the operator's log says).
    #[error(
        "cannot start the session's tool container: the container engine is not answering; try again in a few minutes"
    )]
    EngineDown,
    #[error("the tool runner did not connect within {} s; see the daemon log", CONNECT_TIMEOUT.as_secs())]
    NoRunner,
    #[error("the tool runner stopped during the call; it is restarted on the next call")]
    RunnerLost,
    #[error("the call did not finish within {} s", .0.as_secs())]
    Timeout(Duration),
    /// The session's tool container runs for another context (a session id claimed twice).
    #[error("session {0}'s tool container is another user's or group's: this call is refused")]
    NotYours(String),
}

/// `error`, or [`ToolsError::DiskFull`] when it is a write that failed for want of space, or
/// [`ToolsError::EngineDown`] when the engine is away (what a model relays to a person then
/// names no file nor socket; the operator's log has the error).
fn worded(error: ToolsError) -> ToolsError {
    if crate::base::state::is_disk_full(&error) {
        tracing::error!(error = %baaaht_proto::error_chain(&error), "the data dir's disk is full");
        return ToolsError::DiskFull;
    }
    if matches!(&error, ToolsError::Container(container) if container.engine_away()) {
        tracing::warn!(error = %baaaht_proto::error_chain(&error), "no container engine for a tool container");
        return ToolsError::EngineDown;
    }
    error
}

/// The key of `session`'s tool container: a Coder's (with the project mounts) is its own, the
/// others never see them.
fn key(session: &str, coder: bool) -> String {
    if coder {
        format!("{session}/coder")
    } else {
        session.to_string()
    }
}

/// Each skill's script folder of `mounts` and its inode: a skill replaced in place (a new folder
/// under the old name) is told apart from the one a container mounts.
fn skills_found(mounts: &[MountSpec]) -> Vec<(PathBuf, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    mounts.iter().map(|mount| (mount.host.clone(), std::fs::metadata(&mount.host).map_or(0, |m| m.ino()))).collect()
}

/// One tool call for [`Runners::call`].
#[derive(Debug)]
pub struct Call<'a> {
    pub session: &'a str,
    pub context: &'a Context,
    /// The person whose message the turn answers (none: a scheduled run): whose browser.
    pub asker: Option<&'a str>,
    /// The caller is a Coder: its container also mounts the allowlisted projects.
    pub coder: bool,
    /// The file name of its result (spec §12.4).
    pub call_id: String,
    pub tool: &'a str,
    pub params_json: String,
    pub timeout: Duration,
    /// Environment for this call's command only (a skill's `addons.env`).
    pub env: HashMap<String, String>,
    /// The session's credential placeholders, by variable name (`egress::edge`).
    pub placeholders: HashMap<String, String>,
    /// The request's correlation id (spec §18.1).
    pub correlation_id: &'a str,
}

impl From<Call<'_>> for ToolCall {
    fn from(call: Call<'_>) -> ToolCall {
        let Call { session, call_id, tool, params_json, timeout, env, placeholders, correlation_id, .. } = call;
        ToolCall {
            session: session.to_string(),
            call_id,
            tool: tool.to_string(),
            params_json,
            timeout,
            env,
            placeholders,
            correlation_id: correlation_id.to_string(),
        }
    }
}

/// One call as its runner gets it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCall {
    /// The file name of its result (spec §12.4), and the id its answer comes back under.
    pub call_id: String,
    pub tool: String,
    /// Parameters as a JSON object.
    pub params_json: String,
    pub timeout: Duration,
    /// Environment for this call's command only (a skill's `addons.env`).
    pub env: HashMap<String, String>,
    /// The session's credential placeholders, by variable name.
    pub placeholders: HashMap<String, String>,
    /// The request's correlation id, written into its result and message files.
    pub correlation_id: String,
    /// The session it is for (a pooled runner learns its session from its first call).
    pub session: String,
}

pub use crate::work::ipc::ToolAnswer;

/// What goes down to a runner: a call, or the daemon's side of a connection out.
#[derive(Debug, Clone, PartialEq)]
pub enum RunnerWork {
    Call(ToolCall),
    Tunnel(TunnelDown),
}

impl From<TunnelDown> for Down<RunnerWork> {
    fn from(tunnel: TunnelDown) -> Down<RunnerWork> {
        Down::Work(RunnerWork::Tunnel(tunnel))
    }
}

/// What a runner sends up: for its peer (answers, probes), or about a connection out.
#[derive(Debug, Clone, PartialEq)]
pub enum RunnerUp {
    Peer(Up<ToolAnswer>),
    Tunnel(TunnelUp),
}

/// Pieces of work and tunnel chunks waiting for one runner.
const RUNNER_QUEUE: usize = 64;

/// What a tool container holds: its workspace, its IPC folder and the folders it mounts.
struct Holding<'a> {
    workspace: &'a crate::sandbox::workspace::Prepared,
    ipc: &'a crate::work::ipc::Lease,
    /// Project folders (a Coder's) and skills' scripts.
    projects: Vec<MountSpec>,
    coder: bool,
    /// Serves one call (`tools.mode: cold`).
    cold: bool,
}

/// A session's tool container.
#[derive(Debug)]
struct Runner {
    session: String,
    container: String,
    /// Whose it is: no other context's call reaches it.
    context: Context,
    last_used: Instant,
    /// Whether a call has used it: one started on a guess ([`Runners::prewarm`]) that no call
    /// came for is kept [`idle::GUESS_KEPT`], not `tools.warm_idle_timeout`.
    called: bool,
    /// The skills' script folders it mounts, as found then ([`skills_found`]): one installed,
    /// replaced or removed since is not as it has them.
    skills: Vec<(PathBuf, u64)>,
    /// How long it is kept unused, when not `tools.warm_idle_timeout` (a browser's).
    idle: Option<Duration>,
    /// Its IPC folder, let go when the runner is (a browser has none).
    _ipc: Option<crate::work::ipc::Lease>,
}

/// The warm runners of every session.
pub struct Runners {
    containers: Arc<ContainerManager>,
    policy: Arc<crate::sandbox::policy::Policy>,
    ipc: Arc<crate::work::ipc::Ipc>,
    workspaces: Arc<crate::sandbox::workspace::Workspaces>,
    data_dir: DataDir,
    /// `skills.directories`: more system skills, whose packages count for the layer.
    skill_dirs: Vec<String>,
    idle: Duration,
    /// Session id → its runner, behind a per-session lock held for a whole call.
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Runner>>>>>,
    /// Container name → its connected runner.
    connected: Arc<Connected<RunnerWork, ToolAnswer>>,
    /// Checks and opens the runners' connections out.
    web: Arc<crate::net::egress::proxy::WebProxy>,
    audit: crate::guard::audit::Audit,
    refusals: crate::net::egress::policy::Refusals,
    approvals: Arc<crate::net::egress::approvals::Approvals>,
    taints: Arc<crate::net::taint::Taints>,
    /// Swaps credentials in at the edge; its authority's bundle is what tool containers trust.
    pub edge: Option<Arc<crate::net::egress::edge::Edge>>,
    /// The store's values, which the edge keeps from crossing either way.
    values: Arc<crate::guard::redact::Shield>,
    /// Holds each connection's reader and each cold container's removal, so shutdown waits
    /// for them.
    tracker: TaskTracker,
    /// Where a session's first tool container comes from when one is ready ([`pooled`]).
    warm: Arc<crate::work::warm::WarmPools>,
    /// `tools.browser`.
    browser: crate::base::config::BrowserConfig,
}

impl std::fmt::Debug for Runners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runners").field("idle", &self.idle).finish_non_exhaustive()
    }
}

/// What the runners are built with: the handles they use, and their settings.
#[derive(Debug)]
pub struct Setup {
    pub containers: Arc<ContainerManager>,
    pub policy: Arc<crate::sandbox::policy::Policy>,
    pub ipc: Arc<crate::work::ipc::Ipc>,
    pub workspaces: Arc<crate::sandbox::workspace::Workspaces>,
    pub data_dir: DataDir,
    /// `skills.directories`.
    pub skill_dirs: Vec<String>,
    /// `tools.warm_idle_timeout`.
    pub idle: Duration,
    /// The web proxy, whose address filter the runners' connections out pass.
    pub web: Arc<crate::net::egress::proxy::WebProxy>,
    pub audit: crate::guard::audit::Audit,
    /// Where a context hears of hosts its tools were refused.
    pub inbox: Arc<crate::store::inbox::Inbox>,
    /// Where hosts no rule names are asked about.
    pub approvals: Arc<crate::net::egress::approvals::Approvals>,
    /// A turn that read untrusted content is not asked about new hosts.
    pub taints: Arc<crate::net::taint::Taints>,
    /// None when the daemon's certificate authority could not be made (no credential is then
    /// swapped in).
    pub edge: Option<Arc<crate::net::egress::edge::Edge>>,
    /// The store's values, which the edge keeps from crossing either way.
    pub values: Arc<crate::guard::redact::Shield>,
    pub tracker: TaskTracker,
    /// The warm pools, whose tool containers' pool the runners fill ([`Runners::fill_pool`]).
    pub warm: Arc<crate::work::warm::WarmPools>,
    /// `tools.browser`.
    pub browser: crate::base::config::BrowserConfig,
}

impl Runners {
    /// The sessions' workspaces the runners mount.
    pub fn workspaces(&self) -> &Arc<crate::sandbox::workspace::Workspaces> {
        &self.workspaces
    }

    pub fn new(setup: Setup) -> Runners {
        let Setup {
            containers,
            policy,
            ipc,
            workspaces,
            data_dir,
            skill_dirs,
            idle,
            web,
            audit,
            inbox,
            approvals,
            taints,
            edge,
            values,
            tracker,
            warm,
            browser,
        } = setup;
        Runners {
            containers,
            policy,
            ipc,
            workspaces,
            data_dir,
            skill_dirs,
            idle,
            sessions: Mutex::default(),
            connected: Arc::new(Connected::new("tool runner")),
            web,
            audit,
            refusals: crate::net::egress::policy::Refusals::new(inbox),
            approvals,
            taints,
            edge,
            values,
            tracker,
            warm,
            browser,
        }
    }

    /// Removes a tool container of `session` and gives back its hold on the workspace.
    async fn remove(&self, session: &str, container: &str, why: &str) {
        if let Err(error) = self.containers.stop_service(container).await {
            tracing::warn!(container, %error, why, "cannot remove a tool container");
        }
        self.let_go_workspace(session).await;
    }

    /// Holds `session`'s workspace for a container about to start ([`Runners::let_go_workspace`]
    /// when it does not).
    async fn hold_workspace(&self, session: &str) -> Result<crate::sandbox::workspace::Prepared, ToolsError> {
        let (workspaces, held) = (self.workspaces.clone(), session.to_string());
        tokio::task::spawn_blocking(move || workspaces.acquire(&held))
            .await
            .map_err(|error| ToolsError::Prepare(error.to_string()))?
            .map_err(|error| worded(error.into()))
    }

    /// Lets go of `session`'s workspace, held for a container that went or never started.
    async fn let_go_workspace(&self, session: &str) {
        let (workspaces, held) = (self.workspaces.clone(), session.to_string());
        if let Err(error) = tokio::task::spawn_blocking(move || workspaces.release(&held)).await {
            tracing::warn!(session, %error, "cannot release a workspace");
        }
    }

    /// Waits until the runner of the container `name` connects (`changes` taken before it
    /// started); one that does not within [`CONNECT_TIMEOUT`] has its container stopped.
    async fn runner_connected(
        &self,
        changes: &mut tokio::sync::watch::Receiver<u64>,
        name: &str,
        what: &str,
    ) -> Result<(), ToolsError> {
        let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
        if self.connected.wait_for(changes, name, deadline).await {
            tracing::info!(container = name, what, "tool runner ready");
            return Ok(());
        }
        tracing::warn!(container = name, what, "the tool runner did not connect; removing its container");
        if let Err(error) = self.containers.stop_service(name).await {
            tracing::warn!(container = name, %error, "cannot remove the container of {what}");
        }
        Err(ToolsError::NoRunner)
    }

    /// The `scripts/` folders of the skills `context` sees: the system's (`skills/`) and its
    /// own (`users/{id}/skills/` or `groups/{id}/skills/`, which win over a system skill of the
    /// same name), each mounted read-only at `/skills/{name}/scripts`; the system's only
    /// without a context.
    fn skill_scripts(&self, context: Option<&Context>) -> Vec<MountSpec> {
        let own = context.map(|context| self.data_dir.context_dir(context).join("skills"));
        let mut found: std::collections::BTreeMap<String, PathBuf> = std::collections::BTreeMap::new();
        for root in std::iter::once(self.data_dir.root().join("skills")).chain(own) {
            let Ok(entries) = std::fs::read_dir(&root) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let scripts = entry.path().join("scripts");
                // A symlinked folder could point anywhere on the host: only real folders count.
                let real = std::fs::symlink_metadata(&scripts).is_ok_and(|m| m.is_dir())
                    && std::fs::symlink_metadata(entry.path()).is_ok_and(|m| m.is_dir());
                if real && crate::base::auth::is_valid_context_id(&name) {
                    found.insert(name, scripts);
                }
            }
        }
        found
            .into_iter()
            .map(|(name, host)| MountSpec { host, target: format!("{SKILLS_MOUNT}/{name}/scripts"), read_only: true })
            .collect()
    }

    /// The skill layer the tool containers of `context` use: the packages of every skill it
    /// sees, on the base image (built if missing); none when no skill needs a package, or when
    /// the layer cannot be had (the base image then, with a warning).
    async fn layer_for(&self, context: &Context) -> Option<String> {
        let skills = crate::work::skills::manifest(self.data_dir.root(), &self.skill_dirs, context);
        let packages = skills.iter().flat_map(|found| found.skill.addons.packages.iter());
        match crate::work::skills::layer(self.containers.image(), packages) {
            Ok(None) => None,
            Ok(Some((tag, dockerfile))) => match self.containers.ensure_image(&tag, &dockerfile).await {
                Ok(_) => Some(tag),
                Err(error) => {
                    tracing::warn!(context = %context, image = %tag, %error, "no skill layer; using the base image");
                    None
                }
            },
            Err(problem) => {
                tracing::warn!(context = %context, %problem, "no skill layer; using the base image");
                None
            }
        }
    }

    /// Starts a tool container for `session` (a new session's first comes from the warm pool
    /// when one is ready); a `cold` one serves one call and is not kept. A Coder's also mounts
    /// the allowlisted project folders.
    async fn start(&self, session: &str, context: &Context, coder: bool, cold: bool) -> Result<Runner, ToolsError> {
        if !coder && !cold {
            if let Some(runner) = self.claim_pooled(session, context).await {
                return Ok(runner);
            }
        }
        let workspace = self.hold_workspace(session).await?;
        let started = self.start_holding(session, context, coder, cold, workspace).await.map_err(worded);
        if started.is_err() {
            self.let_go_workspace(session).await;
        }
        started
    }

    async fn start_holding(
        &self,
        session: &str,
        context: &Context,
        coder: bool,
        cold: bool,
        workspace: crate::sandbox::workspace::Prepared,
    ) -> Result<Runner, ToolsError> {
        let ipc = self
            .ipc
            .prepare(context, session, coder)
            .map_err(|source| ToolsError::Ipc { path: self.data_dir.ipc_dir(), source })?;
        let mut projects = if coder { self.policy.coder_mounts(context) } else { vec![] };
        let skills = self.skill_scripts(Some(context));
        let found = skills_found(&skills);
        projects.extend(skills);
        let image = self.layer_for(context).await;
        let holding = Holding { workspace: &workspace, ipc: &ipc, projects, coder, cold };
        let request = self.request(holding, session, context, image);
        let mut changes = self.connected.changes();
        let started = if cold {
            // Not adopted after a daemon crash: the next daemon removes it.
            self.containers.start_detached(request).await
        } else {
            self.containers.start_service(request).await
        };
        let handle = started.map_err(ToolsError::Container)?;
        self.runner_connected(&mut changes, &handle.name, "a tool container").await?;
        Ok(Runner {
            session: session.to_string(),
            container: handle.name,
            context: context.clone(),
            last_used: Instant::now(),
            called: false,
            skills: found,
            idle: None,
            _ipc: Some(ipc),
        })
    }

    /// The request of a tool container holding `holding`, for `session` in `context` (none yet
    /// for a pooled one), on `image` (the base image without one).
    fn request(&self, holding: Holding<'_>, session: &str, context: &Context, image: Option<String>) -> RunRequest {
        let Holding { workspace, ipc, projects, coder, cold } = holding;
        let mut command = vec![
            format!("{BINARIES_MOUNT}/baaaht-agent"),
            "runner".into(),
            "--mount".into(),
            WORKSPACE.into(),
            "--results".into(),
            format!("{IPC_MOUNT}/results"),
        ];
        if !coder {
            // Only this container's runner may queue messages (the `message` tool).
            command.extend(["--messages".into(), format!("{IPC_MOUNT}/messages")]);
        }
        if let Some(cap) = workspace.checked_cap {
            command.extend(["--workspace-cap".into(), cap.to_string()]);
        }
        match ipc.checked_cap {
            Some(cap) => command.extend(["--ipc-cap".into(), cap.to_string()]),
            // The IPC folder is a memory filesystem of its own: nothing in it outlives the host.
            None => command.push("--results-in-memory".into()),
        }
        for project in &projects {
            command.push("--mount".into());
            command.push(if project.read_only { format!("{}:ro", project.target) } else { project.target.clone() });
        }
        if cold {
            command.push("--once".into());
        }
        RunRequest {
            role: Role::Tool,
            session_id: session.to_string(),
            context: context.clone(),
            command,
            mounts: [
                MountSpec { host: workspace.path.clone(), target: WORKSPACE.into(), read_only: false },
                MountSpec { host: ipc.path.clone(), target: IPC_MOUNT.into(), read_only: false },
            ]
            .into_iter()
            .chain(projects)
            .chain(self.trust_mount())
            .collect(),
            env: vec![],
            timeout: Duration::MAX,
            daemon_socket: true,
            working_dir: Some(WORKSPACE.into()),
            image,
            limits: None,
        }
    }

    /// What a tool container's programs trust: the daemon's roots and its authority (for hosts
    /// a credential is bound to), mounted over the system's bundle; none without an edge.
    fn trust_mount(&self) -> Option<MountSpec> {
        self.edge.as_ref().map(|edge| MountSpec {
            host: edge.authority.trust().to_path_buf(),
            target: crate::net::egress::edge::TRUST_IN_CONTAINER.into(),
            read_only: true,
        })
    }

    /// Runs one call in a fresh tool container that is removed after it (`tools.mode: cold`).
    pub async fn call_cold(self: &Arc<Self>, call: Call<'_>) -> Result<ToolAnswer, ToolsError> {
        let runner = self.start(call.session, call.context, call.coder, true).await?;
        let result = self.send(&runner.container, call.into()).await;
        // The caller has its result; the container goes in the background.
        let runners = self.clone();
        self.tracker.spawn(async move {
            runners.remove(&runner.session, &runner.container, "a cold tool container").await;
        });
        result
    }

    /// The lock on `session`'s tool container (a Coder's with `coder`).
    fn slot(&self, session: &str, coder: bool) -> Arc<tokio::sync::Mutex<Option<Runner>>> {
        self.slot_of(key(session, coder))
    }

    /// The lock on the tool container of `key`.
    fn slot_of(&self, key: String) -> Arc<tokio::sync::Mutex<Option<Runner>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner).entry(key).or_default().clone()
    }

    /// Runs one call in the session's tool container (the browser's, for `browser`), starting
    /// (or restarting) it if needed.
    pub async fn call(&self, call: Call<'_>) -> Result<ToolAnswer, ToolsError> {
        let (session, context, coder) = (call.session, call.context, call.coder);
        let browser =
            (call.tool == baaaht_proto::ToolName::Browser.as_str()).then(|| browser::person(context, call.asker));
        let slot = match &browser {
            Some(person) => self.slot_of(browser::key(session, person)),
            None => self.slot(session, coder),
        };
        let mut runner = slot.lock().await;
        if runner.as_ref().is_some_and(|r| r.context != *context) {
            tracing::warn!(session, context = %context, "a call for a session whose tool container is another context's; refused");
            return Err(ToolsError::NotYours(session.to_string()));
        }
        if let Some(current) = runner.as_ref().filter(|r| !self.connected.contains(&r.container)) {
            tracing::warn!(session, container = %current.container, "the tool runner is gone; starting a new one");
            self.remove(session, &current.container, "the old tool container").await;
            *runner = None;
        }
        // A call naming a skill's folder finds the scripts of a skill installed mid-conversation:
        // the container is started anew with them (its workspace stays).
        if let Some(current) = runner.as_ref().filter(|r| {
            call.params_json.contains(SKILLS_MOUNT) && r.skills != skills_found(&self.skill_scripts(Some(context)))
        }) {
            tracing::info!(session, container = %current.container, "the skills changed; starting the tool container anew with their scripts");
            self.remove(session, &current.container, "a tool container without the new skills").await;
            *runner = None;
        }
        if runner.is_none() {
            *runner = Some(match &browser {
                Some(person) => self.start_browser(session, context, person).await?,
                None => self.start(session, context, coder, false).await?,
            });
        }
        let Some(current) = runner.as_mut() else { return Err(ToolsError::NoRunner) };
        current.last_used = Instant::now();
        current.called = true;
        let response = self.send(&current.container, call.into()).await;
        current.last_used = Instant::now();
        response
    }

    /// Starts `session`'s tool container (a Coder's with `coder`) ahead of its first call,
    /// unless it has one, or no container slot is free now (a guess never waits in line before
    /// the work that needs one), or the pool will serve its first call (a claim takes
    /// milliseconds, and a guess claimed now would have the pool start another for nothing).
    pub async fn prewarm(&self, session: &str, context: &Context, coder: bool) -> Result<(), ToolsError> {
        if self.containers.slots_free() == 0 || (!coder && self.pool_serves(session, context).await) {
            return Ok(());
        }
        let slot = self.slot(session, coder);
        let mut runner = slot.lock().await;
        if runner.as_ref().is_some_and(|current| self.connected.contains(&current.container)) {
            return Ok(());
        }
        if let Some(gone) = runner.take() {
            self.remove(session, &gone.container, "the old tool container").await;
        }
        *runner = Some(self.start(session, context, coder, false).await?);
        Ok(())
    }

    /// Sends one call to the runner of `container` and waits for its result.
    async fn send(&self, container: &str, call: ToolCall) -> Result<ToolAnswer, ToolsError> {
        let peer = self.connected.get(container);
        let peer = peer.ok_or(ToolsError::RunnerLost)?;
        let (id, timeout) = (call.call_id.clone(), call.timeout);
        let result = peer.send(&id, RunnerWork::Call(call)).await.map_err(|_lost| ToolsError::RunnerLost)?;
        // The runner enforces the tool's own timeout; this one catches a runner that hangs.
        let limit = timeout + Duration::from_secs(10);
        match tokio::time::timeout(limit, result).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_dropped)) => Err(ToolsError::RunnerLost),
            Err(_) => {
                // A runner that does not answer is replaced on the next call.
                self.connected.forget(container);
                Err(ToolsError::Timeout(limit))
            }
        }
    }

    /// Registers a runner that connected over ServeTools and returns the stream of its calls;
    /// answers arriving on `results` complete the pending calls, and the connections its
    /// commands open go through the context's egress policy and the address filter.
    pub fn attach(
        self: &Arc<Self>,
        identity: &ContainerIdentity,
        mut results: impl tokio_stream::Stream<Item = Result<RunnerUp, StreamError>> + Unpin + Send + 'static,
    ) -> mpsc::Receiver<Down<RunnerWork>> {
        use tokio_stream::StreamExt as _;
        let (answers, ups) = mpsc::channel(16);
        let receiver = self.connected.attach(identity, RUNNER_QUEUE, ReceiverStream::new(ups), &self.tracker);
        // Gone already: its stream ended before it was registered.
        let Some(peer) = self.connected.get(&identity.name) else { return receiver };
        let caller = crate::base::auth::Caller::Container(Arc::new(identity.clone()));
        // Each connection's audit record starts as this, at the relay and at the edge alike.
        let record = crate::guard::audit::Record::by(crate::guard::audit::Kind::Egress, &caller, "")
            .detail("session", identity.session_id.as_str());
        let relay = Relay::new(crate::net::egress::relay::Setup {
            gate: Arc::new(crate::net::egress::policy::Policy {
                data_dir: self.data_dir.clone(),
                context: identity.context.clone(),
                session: identity.session_id.clone(),
                refusals: self.refusals.clone(),
                approvals: self.approvals.clone(),
                taints: self.taints.clone(),
            }),
            web: self.web.clone(),
            audit: self.audit.clone(),
            record: record.clone(),
            what: format!("the tools of session {}", identity.session_id),
            edge: Arc::new(crate::net::egress::edge::Crossing {
                swap: self.edge.as_ref().map(|edge| crate::net::egress::edge::Swap {
                    edge: edge.clone(),
                    context: identity.context.clone(),
                    session: identity.session_id.clone(),
                    caller: caller.clone(),
                }),
                values: Some(self.values.clone()),
                other_protocols: false,
                audit: self.audit.clone(),
                record: record.clone(),
            }),
            down: peer.down(),
            tracker: self.tracker.clone(),
        });
        self.tracker.spawn(async move {
            while let Some(up) = results.next().await {
                let went = match up {
                    Ok(RunnerUp::Tunnel(tunnel)) => relay.take(tunnel).await,
                    Ok(RunnerUp::Peer(up)) => answers.send(Ok(up)).await.is_ok(),
                    Err(why) => {
                        // silent-ok: the pump may be gone already.
                        let _ = answers.send(Err(why)).await;
                        false
                    }
                };
                if !went {
                    break;
                }
            }
            relay.clear();
        });
        receiver
    }

    /// The connected runners, for the health monitor.
    pub fn probe_targets(&self) -> Vec<Probed> {
        self.connected.probe_targets()
    }

    /// Asks the runner in `container` whether it is well, over its own call stream.
    pub async fn probe(&self, container: &str, timeout: Duration) -> Result<crate::work::health::Answer, ProbeError> {
        self.connected.probe(container, timeout).await
    }

    /// Replaces a runner that failed its health checks: its container is removed (a call in
    /// progress fails and says so) and the session's next call starts a new one.
    pub async fn restart(&self, target: &Probed) -> Result<String, ToolsError> {
        self.connected.forget(&target.name);
        self.remove(&target.session, &target.name, "an unhealthy tool container").await;
        Ok("it was removed; the session's next tool call starts a new one".into())
    }

    /// Removes the tool containers of `session` (it was archived), waiting for a call in
    /// progress to end.
    pub async fn release(&self, session: &str) {
        let slots: Vec<Arc<tokio::sync::Mutex<Option<Runner>>>> = {
            let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            let browsers = browser::prefix(session);
            let keys: Vec<String> = [key(session, false), key(session, true)]
                .into_iter()
                .chain(sessions.keys().filter(|key| key.starts_with(&browsers)).cloned())
                .collect();
            keys.iter().filter_map(|key| sessions.remove(key)).collect()
        };
        for slot in slots {
            if let Some(runner) = slot.lock().await.take() {
                tracing::info!(session, container = %runner.container, "removing the tool container of an archived session");
                self.remove(session, &runner.container, "an archived session's tool container").await;
            }
        }
        if let Some(edge) = &self.edge {
            edge.placeholders.forget(session);
        }
    }
}

impl Subsystem for Runners {
    fn name(&self) -> &'static str {
        "tools"
    }

    fn run_until(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) -> Work {
        Box::pin(self.supervise(shutdown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::container::manager::ContainerError;
    use crate::sandbox::sockets::ListenerError;

    #[test]
    fn a_tool_container_that_cannot_start_on_a_full_disk_says_so_without_the_operators_detail() {
        let socket = |errno| {
            ToolsError::Container(ContainerError::Socket(ListenerError::Create {
                path: "/var/lib/baaaht/run/c-1/daemon.sock".into(),
                source: std::io::Error::from_raw_os_error(errno),
            }))
        };
        let said = worded(socket(28)).to_string();
        assert!(said.contains("disk baaaht keeps its data on is full"), "{said}");
        assert!(!said.contains("/var/lib") && !said.contains("os error"), "{said}");
        // Any other failure keeps its detail.
        assert!(matches!(worded(socket(13)), ToolsError::Container(_)));
    }
}
