//! The running MCP servers: one container per context and server, started on first use. Its
//! relay (`baaaht-agent mcp`, the container's init) connects over RelayMcp; the daemon sends it
//! the launch (command, arguments, the server's environment with secrets resolved) and then
//! speaks MCP (`rmcp`) over the relayed stdio.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, ClientConfig, ContentBlock, GetPromptRequestParams, Implementation, ProtocolVersion,
    ReadResourceRequestParams,
};
use rmcp::service::RunningService;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{RoleClient, ServiceExt as _};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;
use tokio::sync::{mpsc, watch};

use super::config::Server;
use super::pump::pump;
use super::relay::{Attached, Down, Launch, Ups, MAX_MESSAGE};
use super::stderr::Stderr;
use crate::base::auth::{ContainerIdentity, Context, Role};
use crate::base::lifetime::{Subsystem, Work};
use crate::guard::audit::Audit;
use crate::net::egress::proxy::WebProxy;
use crate::sandbox::container::manager::{ContainerManager, RunRequest};
use crate::sandbox::workspace::WorkspaceError;
use crate::work::health::{ProbeError, ProbeSlot, Probed};

/// The tool through which an agent lists and reads a server's resources.
pub const RESOURCES_TOOL: &str = "read_resource";
/// The tool through which an agent lists and fetches a server's prompts.
pub const PROMPTS_TOOL: &str = "get_prompt";

/// How long a started container has to connect its relay, and the server to answer
/// `initialize`.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server must have run for its death not to count toward the backoff.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// The longest message a server may send (one line of JSON).
/// The most tools of one server offered to agents.
const MAX_TOOLS: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// `why` ends with the last lines the server wrote on stderr, when it wrote any.
    #[error("MCP server `{server}` could not be started: {why}")]
    Start { server: String, why: String },
    #[error("MCP server `{server}` has no tool `{tool}`")]
    NoTool { server: String, tool: String },
    #[error("MCP server `{server}` did not answer within {seconds} s")]
    Timeout { server: String, seconds: u64 },
    #[error("MCP server `{server}` stopped while it was asked ({why})")]
    Gone { server: String, why: String },
    #[error("MCP server `{server}` refused the call: {why}")]
    Refused { server: String, why: String },
    #[error("MCP server `{server}` failed {failures} times in a row; it is tried again in {seconds} s (`baaaht mcp test {server}` shows why)")]
    Backoff { server: String, failures: u32, seconds: u64 },
}

/// Why the folders a server mounts cannot be had: said as [`McpError::Start`]'s why. A
/// workspace's failure shows its whole chain, as it always did.
///
/// Each message carries its cause's text, so none is a `source` (a chain would say it twice).
#[derive(Debug, thiserror::Error)]
enum MountsError {
    #[error("mounts: {0}")]
    Refused(crate::sandbox::policy::PolicyError),
    #[error(transparent)]
    Join(tokio::task::JoinError),
    #[error("the session's workspace: {}", baaaht_proto::error_chain(.0))]
    Workspace(WorkspaceError),
    #[error("its own folder: {}", baaaht_proto::error_chain(.0))]
    OwnFolder(WorkspaceError),
    #[error(
        "its own folder {} holds {}, past its cap of {}: an admin must make room in it",
        path.display(),
        baaaht_proto::human_size(*used),
        baaaht_proto::human_size(*cap)
    )]
    OverCap { path: PathBuf, used: u64, cap: u64 },
}

/// What a server offers, as it listed it when it last started (kept in the daemon's state so
/// an agent is told a server's tools without starting it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    pub tools: Vec<rmcp::model::Tool>,
    pub resources: bool,
    pub prompts: bool,
}

impl Offer {
    /// The tools an agent sees, by the server's own names: its tools the filter lets through,
    /// then `read_resource` and `get_prompt` when it has resources or prompts (and no tool of
    /// that name), each with its description and JSON schema.
    pub fn definitions(&self, server: &Server) -> Vec<(String, String, serde_json::Value)> {
        let mut offered: Vec<(String, String, serde_json::Value)> = self
            .tools
            .iter()
            .filter(|tool| self.offers(server, &tool.name))
            .map(|tool| {
                let description = tool.description.as_deref().unwrap_or_default().to_string();
                (tool.name.to_string(), description, serde_json::Value::Object((*tool.input_schema).clone()))
            })
            .collect();
        let added = |name: &str| !self.tools.iter().any(|tool| tool.name == name) && self.offers(server, name);
        if added(RESOURCES_TOOL) {
            offered.push((
                RESOURCES_TOOL.into(),
                format!("Lists the resources of the MCP server `{}` (no uri), or reads the one at `uri`.", server.name),
                serde_json::json!({"type": "object", "properties": {"uri": {"type": "string", "description": "The resource's URI; leave out to list them."}}}),
            ));
        }
        if added(PROMPTS_TOOL) {
            offered.push((
                PROMPTS_TOOL.into(),
                format!("Lists the prompts of the MCP server `{}` (no name), or fetches the one named, filled with `arguments`.", server.name),
                serde_json::json!({"type": "object", "properties": {
                    "name": {"type": "string", "description": "The prompt's name; leave out to list them."},
                    "arguments": {"type": "object", "additionalProperties": {"type": "string"}}
                }}),
            ));
        }
        super::limits::capped(&server.name, offered)
    }

    /// Whether agents are offered `name`: one of the server's tools, or `read_resource` /
    /// `get_prompt` when it has resources / prompts, if the tool filter lets it through.
    pub fn offers(&self, server: &Server, name: &str) -> bool {
        let own = self.tools.iter().any(|tool| tool.name == name);
        let added = (name == RESOURCES_TOOL && self.resources) || (name == PROMPTS_TOOL && self.prompts);
        (own || added) && server.config.tools.offers(name)
    }
}

/// How long a server that failed `failures` times in a row waits before the next start: the
/// first restart is at once, then 1, 2, 4 … seconds up to a minute.
pub fn backoff(failures: u32) -> Duration {
    match failures {
        0 | 1 => Duration::ZERO,
        n => Duration::from_secs(1u64 << (n - 2).min(6)).min(Duration::from_secs(60)),
    }
}

/// A server's failures in a row and when the last one was.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
}

/// How long after its last use (or its handing to a caller) a server is spared when a slot is
/// wanted: the next call of the same turn comes soon after one.
const SPARED_AFTER_USE: Duration = Duration::from_secs(10);

/// A started server's relay, for the health monitor.
struct Relay {
    down: mpsc::Sender<Down>,
    probe: Arc<ProbeSlot>,
    identity: Probed,
}

/// A server that runs: its MCP session and what it offers.
pub struct Running {
    pub container: String,
    pub offer: Offer,
    /// The digest of the configuration it was started with: another one starts it afresh.
    digest: String,
    started: Instant,
    idle_timeout: Duration,
    client: RunningService<RoleClient, ClientConfig>,
    used: Mutex<Instant>,
    /// Calls being answered: a server is never idle while it answers one.
    in_flight: std::sync::atomic::AtomicUsize,
}

impl Running {
    fn alive(&self) -> bool {
        !self.client.is_transport_closed()
    }

    fn touch(&self) {
        *self.used.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    fn idle(&self) -> bool {
        self.in_flight.load(std::sync::atomic::Ordering::SeqCst) == 0
            && self.used.lock().unwrap_or_else(PoisonError::into_inner).elapsed() >= self.idle_timeout
    }

    /// Its last use, if it may be stopped to free a slot: it answers no call and was not used
    /// (or handed to a caller) in the last [`SPARED_AFTER_USE`].
    fn spared_since(&self) -> Option<Instant> {
        let used = *self.used.lock().unwrap_or_else(PoisonError::into_inner);
        (self.in_flight.load(std::sync::atomic::Ordering::SeqCst) == 0 && used.elapsed() >= SPARED_AFTER_USE)
            .then_some(used)
    }
}

/// One call in flight on a server; its end counts as the server's last use.
struct InFlight(Arc<Running>);

impl InFlight {
    fn new(running: Arc<Running>) -> InFlight {
        running.in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InFlight(running)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

type Key = (Context, String);

/// One server's place for one context: whoever starts or replaces the server holds its lock,
/// so a slow start blocks only callers of that server in that context.
type Slot = Arc<tokio::sync::Mutex<Option<Arc<Running>>>>;
/// A [`Slot`] held.
type HeldSlot = tokio::sync::OwnedMutexGuard<Option<Arc<Running>>>;

/// The digest of everything in `server`'s configuration that decides what it runs and offers.
/// The server an instance (`name`, or `name@session` for one per session) is of.
fn server_of(instance: &str) -> &str {
    instance.split_once('@').map_or(instance, |(name, _)| name)
}

fn digest_of(server: &Server) -> String {
    let digest = sha2::Sha256::digest(format!("{}\0{:?}", server.name, server.config).as_bytes());
    digest.iter().take(16).map(|byte| format!("{byte:02x}")).collect()
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").field("container", &self.container).field("tools", &self.offer.tools.len()).finish()
    }
}

/// What a call answered, as an agent reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub text: String,
    pub is_error: bool,
}

pub struct McpPool {
    containers: Arc<ContainerManager>,
    web: Arc<WebProxy>,
    audit: Audit,
    /// Where each server's last [`Offer`] is kept, by a digest of its configuration.
    offers: PathBuf,
    failures: Mutex<HashMap<Key, Failures>>,
    attached: Mutex<HashMap<String, Attached>>,
    relays: Mutex<HashMap<String, Relay>>,
    changes: watch::Sender<u64>,
    running: Mutex<HashMap<Key, Slot>>,
    /// Checks the host folders a server mounts, as a Coder's are checked.
    policy: Arc<crate::sandbox::policy::Policy>,
    /// The servers' own folders (`state: true`), capped as session workspaces are.
    states: Arc<crate::sandbox::workspace::Workspaces>,
    /// The sessions' workspaces, which a `workspace: true` server sees.
    workspaces: Arc<crate::sandbox::workspace::Workspaces>,
    /// Container → the folders it holds (its own, a session's workspace).
    holding: Mutex<HashMap<String, Held>>,
    tracker: tokio_util::task::TaskTracker,
}

/// Folders taken for a server's start, given back when dropped before a container holds them.
struct Unheld {
    held: Option<Held>,
    states: Arc<crate::sandbox::workspace::Workspaces>,
    workspaces: Arc<crate::sandbox::workspace::Workspaces>,
}

impl Drop for Unheld {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else { return };
        if let Some(name) = held.state {
            self.states.release(&name);
        }
        if let Some(session) = held.session {
            self.workspaces.release(&session);
        }
    }
}

/// The folders one server's container holds, given back when it stops.
#[derive(Debug, Default)]
struct Held {
    /// The name of its own folder (`state: true`).
    state: Option<String>,
    /// The session whose workspace it sees (`workspace: true`).
    session: Option<String>,
}

impl std::fmt::Debug for McpPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpPool").finish_non_exhaustive()
    }
}

/// What the pool is built with.
#[derive(Debug)]
pub struct Setup {
    pub containers: Arc<ContainerManager>,
    pub web: Arc<WebProxy>,
    pub audit: Audit,
    /// Where the offers of servers are kept (`mcp/`).
    pub state_dir: PathBuf,
    /// Checks what a server mounts.
    pub policy: Arc<crate::sandbox::policy::Policy>,
    /// The servers' own folders (`state: true`).
    pub states: Arc<crate::sandbox::workspace::Workspaces>,
    /// The sessions' workspaces (`workspace: true`).
    pub workspaces: Arc<crate::sandbox::workspace::Workspaces>,
    /// Holds each relay's pumps and tunnels, so shutdown waits for them.
    pub tracker: tokio_util::task::TaskTracker,
}

impl McpPool {
    pub fn new(setup: Setup) -> McpPool {
        let Setup { containers, web, audit, state_dir, policy, states, workspaces, tracker } = setup;
        McpPool {
            containers,
            web,
            audit,
            offers: state_dir.join("mcp"),
            failures: Mutex::default(),
            attached: Mutex::default(),
            relays: Mutex::default(),
            changes: watch::channel(0).0,
            running: Mutex::default(),
            policy,
            states,
            workspaces,
            holding: Mutex::default(),
            tracker,
        }
    }

    /// Which instance of `server` serves `context` (and, for a server that sees the calling
    /// session's workspace, `session`): one per context, or one per session.
    fn key(context: &Context, server: &Server, session: Option<&str>) -> Key {
        match (server.config.workspace, session) {
            (true, Some(session)) => (context.clone(), format!("{}@{session}", server.name)),
            _ => (context.clone(), server.name.clone()),
        }
    }

    /// The name of `server`'s own folder for `context` (a folder name: all parts are plain):
    /// a system server's and a context's own of the same name never share one.
    fn state_name(context: &Context, server: &Server) -> String {
        let scope = match server.scope {
            super::config::Scope::System => "system",
            super::config::Scope::Context(_) => "own",
        };
        format!("{}.{scope}.{}", context.to_string().replace(':', "-"), server.name)
    }

    /// The folders `server` mounts: its allowlisted `mounts`, and its own folder when it keeps
    /// `state` (taken for `container`'s run, given back by [`McpPool::stop`]); and what its
    /// environment gains.
    async fn mounts_of(
        &self,
        context: &Context,
        server: &Server,
        session: Option<&str>,
    ) -> Result<(Vec<crate::sandbox::container::MountSpec>, Held), MountsError> {
        let requested: Vec<_> = server.config.mounts.iter().map(super::config::ServerMount::requested).collect();
        let mut mounts = self.policy.validate_entry_mounts(&requested, Some(context)).map_err(MountsError::Refused)?;
        let mut held = Held::default();
        if let (true, Some(session)) = (server.config.workspace, session) {
            let (workspaces, taken) = (self.workspaces.clone(), session.to_string());
            let prepared = tokio::task::spawn_blocking(move || workspaces.acquire(&taken))
                .await
                .map_err(MountsError::Join)?
                .map_err(MountsError::Workspace)?;
            mounts.push(crate::sandbox::container::MountSpec {
                host: prepared.path,
                target: super::config::WORKSPACE_MOUNT.into(),
                read_only: false,
            });
            held.session = Some(session.to_string());
        }
        if !server.config.state {
            return Ok((mounts, held));
        }
        let (states, name) = (self.states.clone(), Self::state_name(context, server));
        let taken = name.clone();
        let acquired = tokio::task::spawn_blocking(move || states.acquire(&taken)).await;
        let acquired =
            acquired.map_err(MountsError::Join).and_then(|acquired| acquired.map_err(MountsError::OwnFolder));
        let prepared = match acquired {
            Ok(prepared) => prepared,
            Err(why) => {
                self.let_go(held).await;
                return Err(why);
            }
        };
        if let Some(cap) = prepared.checked_cap {
            // No filesystem of its own here: a folder already past its cap is not used again.
            let used = crate::sandbox::shared_dirs::size_below(&prepared.path).unwrap_or(0);
            if used > cap {
                self.states.release(&name);
                self.let_go(held).await;
                return Err(MountsError::OverCap { path: prepared.path, used, cap });
            }
        }
        mounts.push(crate::sandbox::container::MountSpec {
            host: prepared.path,
            target: super::config::STATE_MOUNT.into(),
            read_only: false,
        });
        held.state = Some(name);
        Ok((mounts, held))
    }

    /// Gives back the folders `held` took.
    async fn let_go(&self, held: Held) {
        let (states, workspaces) = (self.states.clone(), self.workspaces.clone());
        // silent-ok: release logs what it cannot unmount.
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(name) = held.state {
                states.release(&name);
            }
            if let Some(session) = held.session {
                workspaces.release(&session);
            }
        })
        .await;
    }

    /// Unmounts the servers' own folders (at shutdown, after the containers went).
    pub fn shutdown(&self) {
        self.states.shutdown();
    }

    /// Whether a folder `container` holds (its own, or the session's workspace) is past its cap
    /// where no filesystem holds it to it: then the sentence that says so. Off the runtime's
    /// threads: the folder is walked.
    async fn over_cap(&self, container: &str) -> Option<String> {
        let (state, session) = {
            let holding = self.holding.lock().unwrap_or_else(PoisonError::into_inner);
            let held = holding.get(container)?;
            (held.state.clone(), held.session.clone())
        };
        let checked: Vec<(&'static str, crate::sandbox::workspace::Prepared)> = [
            ("the server's own folder", state.and_then(|name| self.states.peek(&name))),
            ("the session's workspace", session.and_then(|session| self.workspaces.peek(&session))),
        ]
        .into_iter()
        .filter_map(|(what, prepared)| prepared.filter(|prepared| prepared.checked_cap.is_some()).map(|p| (what, p)))
        .collect();
        if checked.is_empty() {
            return None;
        }
        let walked = tokio::task::spawn_blocking(move || {
            checked.into_iter().find_map(|(what, prepared)| {
                let cap = prepared.checked_cap?;
                let used = crate::sandbox::shared_dirs::size_below(&prepared.path).ok()?;
                (used > cap).then(|| {
                    format!(
                        "{what} holds {}, past its cap of {}; the server is stopped",
                        baaaht_proto::human_size(used),
                        baaaht_proto::human_size(cap)
                    )
                })
            })
        });
        walked.await.ok().flatten()
    }

    /// Takes the relay of `identity` (from its RelayMcp call); the stream it returns carries
    /// the daemon's messages down to it.
    pub fn attach(&self, identity: &ContainerIdentity, up: Ups) -> mpsc::Receiver<Down> {
        let (down, receiver) = mpsc::channel(64);
        let attached = Attached { down, up, identity: identity.clone() };
        self.attached.lock().unwrap_or_else(PoisonError::into_inner).insert(identity.name.clone(), attached);
        self.changes.send_modify(|count| *count += 1);
        receiver
    }

    fn slot(&self, key: &Key) -> Slot {
        self.running.lock().unwrap_or_else(PoisonError::into_inner).entry(key.clone()).or_default().clone()
    }

    /// The running instance of `key` when nobody is starting or replacing it.
    fn peek(&self, key: &Key) -> Option<Arc<Running>> {
        let slot = self.running.lock().unwrap_or_else(PoisonError::into_inner).get(key).cloned()?;
        let held = slot.try_lock().ok()?;
        held.clone()
    }

    /// The running `server` of `context`, started (and its tools listed) when it is not, or
    /// when its configuration changed since it was.
    pub async fn get(
        &self,
        context: &Context,
        server: &Server,
        session: Option<&str>,
        env: Vec<(String, String)>,
    ) -> Result<Arc<Running>, McpError> {
        let key = Self::key(context, server, session);
        let digest = digest_of(server);
        let slot = self.slot(&key);
        let mut held = slot.lock().await;
        if let Some(found) = held.as_ref().filter(|found| found.alive() && found.digest == digest) {
            found.touch();
            return Ok(found.clone());
        }
        if let Some(gone) = held.take() {
            self.stop(&gone.container).await;
            // One that died counts toward the backoff, unless it had run long enough; one whose
            // configuration changed is simply replaced.
            if !gone.alive() {
                if gone.started.elapsed() < HEALTHY_AFTER {
                    self.failed(&key);
                } else {
                    self.recovered(&key);
                }
            }
        }
        let failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner).get(&key).copied();
        if let Some(failures) = failures {
            let wait = backoff(failures.count).saturating_sub(failures.last.elapsed());
            if !wait.is_zero() {
                return Err(McpError::Backoff {
                    server: server.name.clone(),
                    failures: failures.count,
                    seconds: wait.as_secs_f64().ceil() as u64,
                });
            }
        }
        match self.start(context, server, session, env, digest).await {
            Ok(started) => {
                *held = Some(started.clone());
                Ok(started)
            }
            Err(error) => {
                self.failed(&key);
                Err(error)
            }
        }
    }

    fn failed(&self, key: &Key) {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = failures.entry(key.clone()).or_insert(Failures { count: 0, last: Instant::now() });
        entry.count = entry.count.saturating_add(1);
        entry.last = Instant::now();
    }

    fn recovered(&self, key: &Key) {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
    }

    /// What `server` offers without starting it: from its running instance, else from what it
    /// listed when it last started with this configuration.
    pub fn known_offer(&self, context: &Context, server: &Server) -> Option<Offer> {
        let key = (context.clone(), server.name.clone());
        let digest = digest_of(server);
        match self.peek(&key).filter(|found| found.alive() && found.digest == digest) {
            Some(found) => Some(found.offer.clone()),
            None => self.kept_offer(server),
        }
    }

    /// What `server` offers `context`'s agents, for a person who asks: started to list it when
    /// it has not been before, or afresh when `restart`; says whether this started it, and in
    /// how long.
    pub async fn listed(
        &self,
        context: &Context,
        server: &Server,
        env: Vec<(String, String)>,
        restart: bool,
    ) -> Result<(Offer, Option<std::time::Duration>), McpError> {
        let was_running = self.running_in(context).contains(&server.name);
        if restart {
            self.stop_server(context, &server.name).await;
        }
        let started = std::time::Instant::now();
        let offer = if restart {
            self.get(context, server, None, env).await.map(|running| running.offer.clone())?
        } else {
            self.offer(context, server, env).await?
        };
        let now_running = self.running_in(context).contains(&server.name);
        let started_now = restart || (!was_running && now_running);
        Ok((offer, started_now.then(|| started.elapsed())))
    }

    /// What `server` offers: as [`McpPool::known_offer`], else it is started to list it.
    pub async fn offer(
        &self,
        context: &Context,
        server: &Server,
        env: Vec<(String, String)>,
    ) -> Result<Offer, McpError> {
        match self.known_offer(context, server) {
            Some(offer) => Ok(offer),
            None => Ok(self.get(context, server, None, env).await?.offer.clone()),
        }
    }

    /// The file of `server`'s offer: named by a digest of everything that decides what the
    /// server lists.
    fn offer_file(&self, server: &Server) -> PathBuf {
        self.offers.join(format!("{}.json", digest_of(server)))
    }

    fn kept_offer(&self, server: &Server) -> Option<Offer> {
        let text = std::fs::read(self.offer_file(server)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    fn keep_offer(&self, server: &Server, offer: &Offer) {
        let file = self.offer_file(server);
        let written = std::fs::create_dir_all(&self.offers)
            .map_err(|error| error.to_string())
            .and_then(|()| serde_json::to_vec(offer).map_err(|error| error.to_string()))
            .and_then(|bytes| {
                crate::base::state::write_atomic(&file, &bytes, 0o600).map_err(|error| error.to_string())
            });
        if let Err(error) = written {
            tracing::warn!(server = %server.name, file = %file.display(), %error, "cannot keep an MCP server's tool list");
        }
    }

    async fn start(
        &self,
        context: &Context,
        server: &Server,
        session: Option<&str>,
        env: Vec<(String, String)>,
        digest: String,
    ) -> Result<Arc<Running>, McpError> {
        let fail = |why: String| McpError::Start { server: server.name.clone(), why };
        let layer = crate::work::skills::layer(self.containers.image(), &server.config.install);
        let image = match layer.map_err(|error| fail(error.to_string()))? {
            None => server.config.image.clone(),
            Some((tag, dockerfile)) => {
                self.containers.ensure_image(&tag, &dockerfile).await.map_err(|error| fail(error.told()))?;
                Some(tag)
            }
        };
        let (mounts, held) = self.mounts_of(context, server, session).await.map_err(|error| fail(error.to_string()))?;
        // Given back if this start is given up before its container holds them (the caller
        // went away meanwhile: nothing else would).
        let mut held = Unheld { held: Some(held), states: self.states.clone(), workspaces: self.workspaces.clone() };
        let mut env = env;
        if held.held.as_ref().is_some_and(|held| held.state.is_some()) {
            env.push((super::config::STATE_ENV.into(), super::config::STATE_MOUNT.into()));
        }
        let request = RunRequest {
            role: Role::Mcp,
            session_id: format!("mcp-{}", server.name),
            context: context.clone(),
            command: vec![format!("{}/baaaht-agent", crate::sandbox::container::manager::BINARIES_MOUNT), "mcp".into()],
            mounts,
            env: vec![],
            timeout: Duration::MAX,
            daemon_socket: true,
            working_dir: Some("/tmp".into()),
            image,
            limits: None,
        };
        let mut changes = self.changes.subscribe();
        let handle = self.containers.start_detached(request).await.map_err(|error| fail(error.told()))?;
        if let Some(held) = held.held.take() {
            self.holding.lock().unwrap_or_else(PoisonError::into_inner).insert(handle.name.clone(), held);
        }
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        let attached = loop {
            let taken = self.attached.lock().unwrap_or_else(PoisonError::into_inner).remove(&handle.name);
            if let Some(attached) = taken {
                break attached;
            }
            if tokio::time::timeout_at(deadline, changes.changed()).await.is_err() {
                self.stop(&handle.name).await;
                return Err(fail(format!("its relay did not connect within {} s", START_TIMEOUT.as_secs())));
            }
        };
        // The values its environment was given (secrets among them) never reach anyone through
        // what the server writes on stderr.
        let hidden: Vec<String> = env.iter().map(|(_, value)| value.clone()).filter(|value| value.len() >= 6).collect();
        let launch = Launch {
            command: server.config.command.clone(),
            args: server.config.args.clone(),
            env: env.into_iter().collect(),
            egress: !server.config.egress.is_empty(),
        };
        let sent = attached.down.send(Down::Launch(launch)).await;
        if sent.is_err() {
            self.stop(&handle.name).await;
            return Err(fail("its relay hung up before the launch".into()));
        }
        let (ours, theirs) = tokio::io::duplex(256 * 1024);
        let probe = Arc::new(ProbeSlot::default());
        let relay =
            Relay { down: attached.down.clone(), probe: probe.clone(), identity: Probed::from(&attached.identity) };
        self.relays.lock().unwrap_or_else(PoisonError::into_inner).insert(handle.name.clone(), relay);
        let caller = crate::base::auth::Caller::Container(Arc::new(attached.identity.clone()));
        let record = crate::guard::audit::Record::by(crate::guard::audit::Kind::Egress, &caller, "")
            .detail("mcp_server", server.name.as_str());
        let tunnels = crate::net::egress::relay::Relay::new(crate::net::egress::relay::Setup {
            gate: Arc::new(EgressList(server.clone())),
            web: self.web.clone(),
            audit: self.audit.clone(),
            record: record.clone(),
            what: format!("MCP server {}", server.name),
            // An MCP server's secrets are in its own environment (`env:`): neither swapped here
            // nor kept from its requests; the name each connection uses is checked.
            edge: Arc::new(crate::net::egress::edge::Crossing {
                swap: None,
                values: None,
                other_protocols: true,
                audit: self.audit.clone(),
                record,
            }),
            down: attached.down.clone(),
            tracker: self.tracker.clone(),
        });
        let stderr = Stderr::hiding(hidden);
        pump(attached, probe, theirs, (server.name.clone(), tunnels), stderr.clone(), &self.tracker);
        // What went wrong, with the server's own last words.
        let fail = |why: String| {
            let stderr = stderr.clone();
            async move { fail(stderr.explain(why).await) }
        };
        let (reader, writer) = tokio::io::split(ours);
        let config = ClientConfig::new(Default::default(), Implementation::new("baaahtd", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
        // A server's message is one line: a line longer than this is dropped, not buffered.
        let transport = AsyncRwTransport::new_client(reader, writer).with_max_line_length(MAX_MESSAGE);
        let client = match tokio::time::timeout(START_TIMEOUT, config.serve(transport)).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                // Its last words first: its container still runs to send them.
                let failed = fail(format!("it did not answer `initialize`: {error}")).await;
                self.stop(&handle.name).await;
                return Err(failed);
            }
            Err(_) => {
                // Its last words first: its container still runs to send them.
                let failed = fail(format!("it did not answer `initialize` within {} s", START_TIMEOUT.as_secs())).await;
                self.stop(&handle.name).await;
                return Err(failed);
            }
        };
        let tools = match tokio::time::timeout(START_TIMEOUT, client.list_all_tools()).await {
            Ok(Ok(listed)) => {
                // A name listed twice is refused (its calls would be ambiguous), and a server
                // offers at most MAX_TOOLS.
                let mut tools: Vec<rmcp::model::Tool> = vec![];
                for tool in listed {
                    if tools.iter().any(|kept| kept.name == tool.name) {
                        tracing::warn!(server = %server.name, tool = %tool.name, "the MCP server lists a tool twice: the second is not offered");
                    } else if tools.len() == MAX_TOOLS {
                        tracing::warn!(server = %server.name, tool = %tool.name, "the MCP server lists more than {MAX_TOOLS} tools: the rest are not offered");
                        break;
                    } else {
                        tools.push(tool);
                    }
                }
                tools
            }
            Ok(Err(error)) => {
                // Its last words first: its container still runs to send them.
                let failed = fail(format!("it did not list its tools: {error}")).await;
                self.stop(&handle.name).await;
                return Err(failed);
            }
            Err(_) => {
                // Its last words first: its container still runs to send them.
                let failed = fail("it did not list its tools in time".into()).await;
                self.stop(&handle.name).await;
                return Err(failed);
            }
        };
        let capabilities = client.peer_info().map(|info| info.capabilities.clone()).unwrap_or_default();
        let offer =
            Offer { tools, resources: capabilities.resources.is_some(), prompts: capabilities.prompts.is_some() };
        self.keep_offer(server, &offer);
        tracing::info!(server = %server.name, context = %context, container = %handle.name, tools = offer.tools.len(), "MCP server started");
        Ok(Arc::new(Running {
            container: handle.name,
            offer,
            digest,
            started: Instant::now(),
            idle_timeout: Duration::from_secs(server.config.idle_timeout),
            client,
            used: Mutex::new(Instant::now()),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
        }))
    }

    /// Stops the servers unused for longer than their `idle_timeout`, and those whose stdio
    /// closed (a server that exited), every second until `cancel`.
    pub async fn supervise(self: Arc<Self>, cancel: tokio_util::sync::CancellationToken) {
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            let slots: Vec<(Key, Slot)> = {
                let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
                // A slot nobody holds and that has no server is forgotten.
                running.retain(|_, slot| {
                    Arc::strong_count(slot) > 1 || slot.try_lock().map_or(true, |held| held.is_some())
                });
                running.iter().map(|(key, slot)| (key.clone(), slot.clone())).collect()
            };
            for (key, slot) in slots {
                // A slot being started or replaced is its holder's business.
                let Ok(mut held) = slot.try_lock() else { continue };
                let Some(server) = held.take_if(|server| !server.alive() || server.idle()) else { continue };
                drop(held);
                let (context, name) = &key;
                if server.alive() {
                    tracing::info!(server = %name, context = %context, container = %server.container, "stopping an idle MCP server");
                } else {
                    tracing::warn!(server = %name, context = %context, container = %server.container, "removing an MCP server that stopped");
                    if server.started.elapsed() < HEALTHY_AFTER {
                        self.failed(&key);
                    }
                }
                self.stop(&server.container).await;
            }
        }
    }

    /// Since when the server [`McpPool::evict_one`] would stop has been unused.
    pub fn longest_idle(&self) -> Option<Instant> {
        let slots = self.slots();
        slots.iter().filter_map(|(_, slot)| slot.try_lock().ok().and_then(|held| held.as_deref()?.spared_since())).min()
    }

    fn slots(&self) -> Vec<(Key, Slot)> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running.iter().map(|(key, slot)| (key.clone(), slot.clone())).collect()
    }

    /// Stops the server unused the longest that answers no call and was not used (or handed to
    /// a caller) in the last [`SPARED_AFTER_USE`], to free a container slot for a start that
    /// waits for one; whether there was one.
    pub async fn evict_one(&self) -> bool {
        let mut oldest: Option<(Instant, Key, HeldSlot)> = None;
        for (key, slot) in self.slots() {
            // A slot being started or replaced is its holder's business.
            let Ok(held) = slot.try_lock_owned() else { continue };
            let Some(used) = held.as_deref().and_then(Running::spared_since) else { continue };
            if oldest.as_ref().is_none_or(|(best, ..)| used < *best) {
                oldest = Some((used, key, held));
            }
        }
        let Some((_, (context, name), mut held)) = oldest else { return false };
        let Some(server) = held.take() else { return false };
        drop(held);
        tracing::info!(server = %name, context = %context, container = %server.container, "stopping an MCP server that answers no call to free a slot");
        self.stop(&server.container).await;
        true
    }

    /// The names of the servers whose containers run for `context`.
    pub fn running_in(&self, context: &Context) -> Vec<String> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let mut names: Vec<String> = running
            .iter()
            .filter(|((owner, _), slot)| owner == context && slot.try_lock().is_ok_and(|held| held.is_some()))
            .map(|((_, instance), _)| server_of(instance).to_string())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Stops `context`'s instances of the server `name` (one, or one per session), if they
    /// run, and forgets their failures.
    pub async fn stop_server(&self, context: &Context, name: &str) {
        let mut keys: Vec<Key> = {
            let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            running
                .keys()
                .filter(|(owner, instance)| owner == context && server_of(instance) == name)
                .cloned()
                .collect()
        };
        keys.push((context.clone(), name.to_string()));
        keys.dedup();
        for key in keys {
            let slot = self.slot(&key);
            let stopped = slot.lock().await.take();
            self.recovered(&key);
            if let Some(stopped) = stopped {
                self.stop(&stopped.container).await;
            }
        }
    }

    /// Stops every context's instance of the server `name` (a system server that changed).
    pub async fn stop_named(&self, name: &str) {
        let contexts: Vec<Context> = {
            let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            running.keys().filter(|(_, instance)| server_of(instance) == name).map(|(c, _)| c.clone()).collect()
        };
        for context in contexts {
            self.stop_server(&context, name).await;
        }
    }

    /// The started servers' containers, for the health monitor.
    pub fn probe_targets(&self) -> Vec<Probed> {
        let relays = self.relays.lock().unwrap_or_else(PoisonError::into_inner);
        relays.values().map(|relay| relay.identity.clone()).collect()
    }

    /// Asks the relay in `container` whether its server runs.
    pub async fn probe(&self, container: &str, timeout: Duration) -> Result<crate::work::health::Answer, ProbeError> {
        let found = {
            let relays = self.relays.lock().unwrap_or_else(PoisonError::into_inner);
            relays.get(container).map(|relay| (relay.down.clone(), relay.probe.clone()))
        };
        let wrap = Down::Probe;
        crate::work::health::probe_over(found, container, wrap, timeout).await
    }

    /// Removes a server's container that failed its health checks; the next call starts one.
    pub async fn restart(&self, target: &Probed) -> Result<String, McpError> {
        let slots: Vec<Slot> = self.running.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect();
        for slot in slots {
            // One being started is not the hung one.
            if let Ok(mut held) = slot.try_lock() {
                held.take_if(|running| running.container == target.name);
            }
        }
        self.stop(&target.name).await;
        Ok("it was removed; the next call starts a new one".into())
    }

    async fn stop(&self, container: &str) {
        self.relays.lock().unwrap_or_else(PoisonError::into_inner).remove(container);
        self.attached.lock().unwrap_or_else(PoisonError::into_inner).remove(container);
        if let Err(error) = self.containers.stop_service(container).await {
            tracing::warn!(container, %error, "cannot remove an MCP server's container");
        }
        // The folders it held are let go with it (unmounted once no container holds them).
        let held = self.holding.lock().unwrap_or_else(PoisonError::into_inner).remove(container);
        if let Some(held) = held {
            self.let_go(held).await;
        }
    }

    /// `outcome` of a call of `container`, unless the call took a folder it holds past its cap
    /// (where no filesystem holds it there): then the server is stopped, and the answer says so.
    async fn within_cap(
        &self,
        context: &Context,
        server: &Server,
        container: &str,
        outcome: Result<Answer, McpError>,
    ) -> Result<Answer, McpError> {
        let Some(why) = self.over_cap(container).await else { return outcome };
        tracing::warn!(server = %server.name, %context, %why, "an MCP server's folder is past its cap");
        self.stop_server(context, &server.name).await;
        match outcome {
            Ok(mut answer) => {
                answer.is_error = true;
                answer.text.push_str(&format!("\nerror: {why}"));
                Ok(answer)
            }
            Err(error) => Err(McpError::Refused { server: server.name.clone(), why: format!("{error}; {why}") }),
        }
    }

    /// Calls `tool` of `server` for `context` (asked from `session`) with `arguments`; a server
    /// that died is started again and asked once more, unless the tool acts (`acts`): it may have
    /// acted before it died, and a person allowed it once.
    #[allow(clippy::too_many_arguments)]
    pub async fn call(
        &self,
        context: &Context,
        server: &Server,
        session: &str,
        env: Vec<(String, String)>,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        timeout: Duration,
        acts: bool,
    ) -> Result<Answer, McpError> {
        let attempts = if acts { 1 } else { 2 };
        for attempt in 0..attempts {
            let running = self.get(context, server, Some(session), env.clone()).await?;
            if !running.offer.offers(server, tool) {
                return Err(McpError::NoTool { server: server.name.clone(), tool: tool.into() });
            }
            let own = running.offer.tools.iter().any(|offered| offered.name == tool);
            let flight = InFlight::new(running.clone());
            let asked = tokio::time::timeout(timeout, ask(&running.client, own, tool, &arguments)).await;
            drop(flight);
            match asked {
                Ok(Ok(answer)) => {
                    self.recovered(&Self::key(context, server, Some(session)));
                    return self.within_cap(context, server, &running.container, Ok(answer)).await;
                }
                Ok(Err(rmcp::ServiceError::McpError(error))) => {
                    let refused = McpError::Refused { server: server.name.clone(), why: error.message.to_string() };
                    return self.within_cap(context, server, &running.container, Err(refused)).await;
                }
                Ok(Err(error)) if attempt + 1 < attempts && running.client.is_transport_closed() => {
                    tracing::warn!(server = %server.name, %error, "the MCP server died; starting it again");
                }
                Ok(Err(error)) => return Err(McpError::Gone { server: server.name.clone(), why: error.to_string() }),
                Err(_) => {
                    let late = McpError::Timeout { server: server.name.clone(), seconds: timeout.as_secs() };
                    return self.within_cap(context, server, &running.container, Err(late)).await;
                }
            }
        }
        Err(McpError::Gone { server: server.name.clone(), why: "it died twice".into() })
    }
}

/// Asks the server: a call of its own `tool`, or a resource or prompt through the tools
/// baaaht adds for them.
async fn ask(
    client: &RunningService<RoleClient, ClientConfig>,
    own: bool,
    tool: &str,
    arguments: &serde_json::Map<String, serde_json::Value>,
) -> Result<Answer, rmcp::ServiceError> {
    let text_of = |key: &str| arguments.get(key).and_then(serde_json::Value::as_str).map(str::to_string);
    let lines = |lines: Vec<String>, none: &str| if lines.is_empty() { none.to_string() } else { lines.join("\n") };
    if own {
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments.clone());
        let result = client.call_tool(params).await?;
        let text = result.content.iter().map(describe).collect::<Vec<_>>().join("\n");
        return Ok(Answer { text, is_error: result.is_error.unwrap_or(false) });
    }
    if tool == RESOURCES_TOOL {
        if let Some(uri) = text_of("uri") {
            let read = client.read_resource(ReadResourceRequestParams::new(uri)).await?;
            let text = read.contents.into_iter().map(|contents| describe(&ContentBlock::resource(contents)));
            return Ok(Answer { text: text.collect::<Vec<_>>().join("\n"), is_error: false });
        }
        let mut listed: Vec<String> = client
            .list_all_resources()
            .await?
            .into_iter()
            .map(|resource| {
                let about = resource.description.clone().unwrap_or_default();
                format!(
                    "{} ({}){}",
                    resource.uri,
                    resource.name,
                    if about.is_empty() { String::new() } else { format!(": {about}") }
                )
            })
            .collect();
        // A server may offer templates only.
        if let Ok(templates) = client.list_all_resource_templates().await {
            listed.extend(
                templates
                    .into_iter()
                    .map(|template| format!("{} (template, {})", template.uri_template, template.name)),
            );
        }
        return Ok(Answer { text: lines(listed, "The server lists no resources."), is_error: false });
    }
    if let Some(name) = text_of("name") {
        let mut params = GetPromptRequestParams::new(name);
        if let Some(serde_json::Value::Object(given)) = arguments.get("arguments") {
            params = params.with_arguments(given.clone());
        }
        let prompt = client.get_prompt(params).await?;
        let messages = prompt.messages.into_iter().map(|message| {
            let role = match message.role {
                rmcp::model::Role::User => "user",
                rmcp::model::Role::Assistant => "assistant",
            };
            format!("[{role}] {}", describe(&message.content))
        });
        return Ok(Answer { text: messages.collect::<Vec<_>>().join("\n"), is_error: false });
    }
    let listed = client
        .list_all_prompts()
        .await?
        .into_iter()
        .map(|prompt| {
            let arguments: Vec<String> = prompt
                .arguments
                .unwrap_or_default()
                .into_iter()
                .map(|argument| format!("{}{}", argument.name, if argument.required == Some(true) { "" } else { "?" }))
                .collect();
            format!("{}({}): {}", prompt.name, arguments.join(", "), prompt.description.unwrap_or_default())
        })
        .collect();
    Ok(Answer { text: lines(listed, "The server lists no prompts."), is_error: false })
}

/// One block of a tool's answer as text for the model.
fn describe(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => format!("[image {}, {} bytes as base64]", image.mime_type, image.data.len()),
        ContentBlock::Resource(resource) => match &resource.resource {
            rmcp::model::ResourceContents::TextResourceContents { uri, text, .. } => {
                format!("[resource {uri}]\n{text}")
            }
            rmcp::model::ResourceContents::BlobResourceContents { uri, blob, .. } => {
                format!("[resource {uri}, {} bytes as base64]", blob.len())
            }
            _ => "[resource]".into(),
        },
        ContentBlock::ResourceLink(link) => format!("[resource link {}]", link.uri),
        _ => "[content of a kind baaaht does not show]".into(),
    }
}

/// An MCP server's connections out: those its `egress` list names.
struct EgressList(Server);

#[async_trait::async_trait]
impl crate::net::egress::relay::Gate for EgressList {
    async fn decide(&self, host: &str, port: u16, _asked_by: &str) -> crate::net::egress::relay::Verdict {
        let server = &self.0;
        if server.egress_allows(host, port) {
            return crate::net::egress::relay::Verdict::Allow { by: "its egress list".into() };
        }
        let listed = if server.config.egress.is_empty() { "none".into() } else { server.config.egress.join(", ") };
        crate::net::egress::relay::Verdict::Refuse(format!(
            "{host}:{port} is not in the egress list of MCP server `{}` ({listed})",
            server.name
        ))
    }
}

impl Subsystem for McpPool {
    fn name(&self) -> &'static str {
        "mcp"
    }

    fn run_until(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) -> Work {
        Box::pin(self.supervise(shutdown))
    }

    fn drain(self: Arc<Self>) -> Work {
        Box::pin(async move { self.shutdown() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_from_the_second() {
        let waits: Vec<u64> = (0..10).map(|failures| backoff(failures).as_secs()).collect();
        assert_eq!(waits, [0, 0, 1, 2, 4, 8, 16, 32, 60, 60]);
    }

    fn server(config: &str) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("mcp.yaml");
        std::fs::write(&file, format!("servers:\n  s:\n{config}")).expect("write");
        crate::work::mcp::config::read(&file, &crate::work::mcp::config::Scope::System).expect("read").remove(0)
    }

    #[test]
    fn the_tool_filter_covers_resources_and_prompts() {
        let tool = rmcp::model::Tool::new("search", "Searches", Arc::new(serde_json::Map::new()));
        let offer = Offer { tools: vec![tool], resources: true, prompts: true };
        let names =
            |server: &Server| offer.definitions(server).into_iter().map(|(name, _, _)| name).collect::<Vec<_>>();
        assert_eq!(names(&server("    command: x\n")), ["search", RESOURCES_TOOL, PROMPTS_TOOL]);
        assert_eq!(names(&server("    command: x\n    tools: {allow: [search]}\n")), ["search"]);
        assert_eq!(names(&server("    command: x\n    tools: {deny: [get_prompt]}\n")), ["search", RESOURCES_TOOL]);
    }
}
