//! Agent containers (spec §6, DESIGN.md §4): each runs `baaaht-agent agent`, registers, and
//! takes turns over `TakeTurns` — a user turn for a session's Assistant, a task for a delegated
//! Worker, Researcher, Coder or Memory agent. A container serves one turn at a time and, once
//! done, waits idle for the next turn of the same session and role: the Assistant for
//! `sessions.idle_after`, the others for a keep-warm window (60 s). Idle containers beyond
//! that are removed; none is ever shared between sessions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baaaht_llm::model::Message;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::base::auth::{ContainerIdentity, Context, Live, Role};
use crate::sandbox::container::manager::{ContainerManager, RunRequest, BINARIES_MOUNT};
use crate::sandbox::container::ContainerKind;
use crate::work::health::{ProbeError, Probed};
use crate::work::peers::{Connected, Down, StreamError, Up};
use crate::work::warm::WarmPools;

/// How long a new agent may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a claimed pooled agent, connected already, may take to take turns.
const CLAIMED_CONNECT: Duration = Duration::from_secs(5);
/// How long a delegated agent's container waits for another task of its session.
pub const KEEP_WARM: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot start the {role} container: {reason}")]
    Start { role: Role, reason: String },
    /// The container could not start for want of space in the data dir (the operator's log
    /// has the error).
    #[error("cannot start the {role} container: {full}", role = .0, full = crate::base::state::DISK_FULL_WORK)]
    DiskFull(Role),
    /// The container engine is away: none, down, restarting or hung (the operator's log says).
    #[error("cannot start the {0} container: the container engine is not answering")]
    EngineDown(Role),
    #[error("the {role} agent did not connect within {} s; see the daemon log", CONNECT_TIMEOUT.as_secs(), role = .0)]
    NoAgent(Role),
    #[error("the {0} agent stopped during the turn")]
    Lost(Role),
    #[error("the {role} agent gave no answer within {} s", limit.as_secs())]
    Timeout { role: Role, limit: Duration },
    #[error("the {0}'s work was cancelled")]
    Cancelled(Role),
}

/// A turn (or a task) for an agent: the conversation it sees, ending with the new message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    pub turn_id: String,
    pub correlation_id: String,
    pub messages: Vec<Message>,
    /// The session's model, after SwitchModel; empty: the role's.
    pub model: String,
    /// The date and time now where the user is, for "tomorrow at 8".
    pub now: String,
    /// The W3C trace context of the turn; empty when tracing is off.
    pub traceparent: String,
}

/// What an agent answered a [`Turn`] with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnOutcome {
    /// Every text the model wrote in the turn, in order.
    pub content: String,
    pub is_error: bool,
    /// Model calls the turn took.
    pub steps: u32,
    /// The daemon refused the turn (a budget's limit, a full disk, no container engine, no
    /// room): `content` is its sentence for the person who asked.
    pub refused: bool,
    /// Input and output tokens of every model call of the turn.
    pub tokens: u64,
}

impl TurnOutcome {
    /// The daemon's own sentence instead of an answer (a budget's limit, a full disk, no room):
    /// what the person who asked reads.
    pub fn refusal(content: String) -> TurnOutcome {
        TurnOutcome { content, is_error: true, refused: true, ..TurnOutcome::default() }
    }
}

/// An idle agent container.
#[derive(Debug)]
struct Idle {
    container: String,
    since: Instant,
}

/// What an agent container is told when it registers (RegisterAgent): its role's settings,
/// its identity, its context's profile and memories, the skills it sees and its tools.
#[derive(Debug, Clone)]
pub struct AgentSetup {
    pub role: Role,
    pub model: String,
    pub max_iterations: u32,
    pub temperature: Option<f64>,
    pub timeout: Duration,
    pub soul: String,
    pub identity: String,
    pub context_profile: String,
    pub memories: Vec<String>,
    pub skills: Vec<crate::work::skills::Found>,
    pub tools: Vec<&'static str>,
    pub session_id: String,
    pub context: Context,
}

/// One piece of work for [`AgentPool::run`].
#[derive(Debug)]
pub struct Work {
    pub live: Live,
    pub turn: Turn,
    pub timeout: Duration,
    /// Stops the work: the container is stopped mid-turn and the answer is [`AgentError::Cancelled`].
    pub cancel: CancellationToken,
}

/// The container of an agent of `role` for `session_id` in `context` (a pooled one: neither).
pub fn agent_request(role: Role, session_id: &str, context: &Context) -> RunRequest {
    RunRequest {
        role,
        session_id: session_id.to_string(),
        context: context.clone(),
        command: vec![format!("{BINARIES_MOUNT}/baaaht-agent"), "agent".into()],
        // Identity, context and skills arrive with RegisterAgent: nothing of the host is
        // mounted into an agent container.
        mounts: vec![],
        env: vec![],
        timeout: Duration::MAX,
        daemon_socket: true,
        working_dir: None,
        image: None,
        limits: None,
    }
}

/// A start ahead of a delegation ([`AgentPool::foresee`]): dropped, however it ended, its
/// entry goes, then its sender, which wakes a delegation that waits for it.
struct Foreseen {
    pool: Arc<AgentPool>,
    key: (String, Role),
    started: tokio::sync::watch::Sender<()>,
}

impl Drop for Foreseen {
    fn drop(&mut self) {
        self.pool.forget_foreseen(&self.key, &self.started.subscribe());
    }
}

/// Every agent container of the daemon.
pub struct AgentPool {
    containers: Arc<ContainerManager>,
    /// Agents started ahead of demand, claimed for a new container of a session.
    warm: Arc<WarmPools>,
    assistant_idle: Duration,
    /// (session, role) → containers waiting for work.
    idle: Mutex<HashMap<(String, Role), Vec<Idle>>>,
    connected: Arc<Connected<Turn, TurnOutcome>>,
    /// Container name → the turn it works on.
    live: Mutex<HashMap<String, Live>>,
    /// (session, role) → an agent starting ahead of the delegation that will take it
    /// ([`AgentPool::foresee`]); its sender is dropped once the agent waits idle (or did not
    /// start), which wakes a delegation that came meanwhile.
    foreseen: Mutex<HashMap<(String, Role), tokio::sync::watch::Receiver<()>>>,
    /// Holds each connection's reader, so shutdown waits for it.
    tracker: TaskTracker,
}

impl std::fmt::Debug for AgentPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentPool").field("assistant_idle", &self.assistant_idle).finish_non_exhaustive()
    }
}

impl AgentPool {
    pub fn new(
        containers: Arc<ContainerManager>,
        warm: Arc<WarmPools>,
        assistant_idle: Duration,
        tracker: TaskTracker,
    ) -> AgentPool {
        for role in Role::AGENTS {
            // An agent's pooled container holds nothing beside itself.
            let starter: crate::work::warm::Starter = Arc::new(|role| {
                let request = agent_request(role, "", &Context::user(String::new()));
                Box::pin(async move { Ok((request, Box::new(()) as crate::work::warm::Held)) })
            });
            warm.starts(*role, starter);
        }
        AgentPool {
            containers,
            warm,
            assistant_idle,
            idle: Mutex::default(),
            connected: Arc::new(Connected::new("agent")),
            live: Mutex::default(),
            foreseen: Mutex::default(),
            tracker,
        }
    }

    /// The turn `container` is working on, if any.
    pub fn live(&self, container: &str) -> Option<Live> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner).get(container).cloned()
    }

    /// Agent containers working or waiting, for status and benchmarks.
    pub fn count(&self) -> usize {
        self.connected.len()
    }

    fn keep_warm(&self, role: Role) -> Duration {
        if role == Role::Assistant {
            self.assistant_idle
        } else {
            KEEP_WARM
        }
    }

    /// An agent container for `session`/`role`, claimed from its warm pool or started, once
    /// it takes turns; with `ahead` (a start ahead of need), only in a slot free now.
    async fn start(&self, session: &str, context: &Context, role: Role, ahead: bool) -> Result<String, AgentError> {
        let mut changes = self.connected.changes();
        // Not adopted after a daemon crash: its turn died with the daemon.
        if let Some((name, _nothing, _handover)) = self.warm.claim(role, session, context, ContainerKind::Task).await {
            // It waits connected: it takes turns at once, or it went away meanwhile.
            let deadline = tokio::time::Instant::now() + CLAIMED_CONNECT;
            if self.connected.wait_for(&mut changes, &name, deadline).await {
                tracing::info!(session, role = role.as_str(), container = %name, "agent ready");
                return Ok(name);
            }
            tracing::warn!(container = %name, "a claimed pooled agent did not take turns; starting one");
            self.remove(&name).await;
        }
        let name = self.start_cold(session, context, role, ahead).await?;
        let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
        if !self.connected.wait_for(&mut changes, &name, deadline).await {
            tracing::warn!(container = %name, "the agent did not connect; removing its container");
            self.remove(&name).await;
            return Err(AgentError::NoAgent(role));
        }
        tracing::info!(session, role = role.as_str(), container = %name, "agent ready");
        Ok(name)
    }

    /// Starts an agent container for `session`/`role`.
    async fn start_cold(
        &self,
        session: &str,
        context: &Context,
        role: Role,
        ahead: bool,
    ) -> Result<String, AgentError> {
        let request = agent_request(role, session, context);
        let started = if ahead {
            self.containers.start_detached_if_room(request).await
        } else {
            self.containers.start_detached(request).await
        };
        let handle = started.map_err(|error| {
            if crate::base::state::is_disk_full(&error) {
                tracing::error!(error = %baaaht_proto::error_chain(&error), "the data dir's disk is full");
                return AgentError::DiskFull(role);
            }
            if error.engine_away() {
                tracing::warn!(error = %baaaht_proto::error_chain(&error), "no container engine for an agent");
                return AgentError::EngineDown(role);
            }
            AgentError::Start { role, reason: baaaht_proto::error_chain(&error) }
        })?;
        Ok(handle.name)
    }

    async fn remove(&self, container: &str) {
        if let Err(error) = self.containers.stop_service(container).await {
            tracing::warn!(container, %error, "cannot remove an agent container");
        }
    }

    /// The start of an agent of `role` for `session` ahead of the delegation its Assistant is
    /// still writing, for the caller to run (it stops with the daemon): the agent waits idle,
    /// and the delegation takes it (one that comes while it starts waits for it). None when one
    /// waits or starts already. It starts only in a slot free now.
    pub fn foresee(
        self: &Arc<Self>,
        session: &str,
        context: &Context,
        role: Role,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let key = (session.to_string(), role);
        let (started, starting) = tokio::sync::watch::channel(());
        {
            let mut foreseen = self.foreseen.lock().unwrap_or_else(PoisonError::into_inner);
            if foreseen.contains_key(&key) || self.waiting(session, role) {
                return None;
            }
            foreseen.insert(key.clone(), starting);
        }
        // However the start ends (done, failed, or dropped at shutdown), its entry goes, then
        // its sender: a delegation waiting on it looks again.
        let entry = Foreseen { pool: self.clone(), key, started };
        let context = context.clone();
        Some(async move {
            let (session, role) = (entry.key.0.as_str(), entry.key.1);
            match entry.pool.start(session, &context, role, true).await {
                Ok(container) => {
                    tracing::debug!(session, role = role.as_str(), %container, "an agent waits for its delegation");
                    entry.pool.give_back(session, role, container);
                }
                Err(error) => tracing::info!(session, role = role.as_str(), %error, "no agent started ahead"),
            }
        })
    }

    /// Removes the entry of a start ahead at `key`, if it is the one `starting` watches.
    fn forget_foreseen(&self, key: &(String, Role), starting: &tokio::sync::watch::Receiver<()>) {
        let mut foreseen = self.foreseen.lock().unwrap_or_else(PoisonError::into_inner);
        if foreseen.get(key).is_some_and(|entry| entry.same_channel(starting)) {
            foreseen.remove(key);
        }
    }

    /// An idle connected container of `session`/`role` (one started ahead of this delegation
    /// waited for), or a new one.
    async fn take(&self, session: &str, context: &Context, role: Role) -> Result<String, AgentError> {
        let key = (session.to_string(), role);
        loop {
            let starting = self.foreseen.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned();
            if let Some(mut starting) = starting {
                // silent-ok: it ends with its sender dropped, the agent waiting idle or not started.
                let _ = starting.changed().await;
                // Its entry went before its sender; one left behind is not waited on again.
                self.forget_foreseen(&key, &starting);
            }
            let candidate = self.idle.lock().unwrap_or_else(PoisonError::into_inner).get_mut(&key).and_then(Vec::pop);
            match candidate {
                Some(idle) if self.connected.contains(&idle.container) => return Ok(idle.container),
                Some(gone) => self.remove(&gone.container).await,
                None => return self.start(session, context, role, false).await,
            }
        }
    }

    /// Whether an agent of `role` waits idle for `session`'s next turn (else one starts for it).
    pub fn waiting(&self, session: &str, role: Role) -> bool {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(session.to_string(), role))
            .is_some_and(|idle| !idle.is_empty())
    }

    fn give_back(&self, session: &str, role: Role, container: String) {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((session.to_string(), role))
            .or_default()
            .push(Idle { container, since: Instant::now() });
    }

    /// Runs one turn in a container of its session and role and returns the agent's answer.
    pub async fn run(&self, work: Work) -> Result<TurnOutcome, AgentError> {
        self.run_named(work).await.map(|(result, _)| result)
    }

    /// [`AgentPool::run`], also naming the container that did the work.
    pub async fn run_named(&self, work: Work) -> Result<(TurnOutcome, String), AgentError> {
        let Work { live, turn, timeout, cancel } = work;
        let role = live.role;
        let container = self.take(&live.session, &live.context, role).await?;
        let peer = self.connected.get(&container);
        let Some(peer) = peer else { return Err(AgentError::Lost(role)) };
        let session = live.session.clone();
        self.live.lock().unwrap_or_else(PoisonError::into_inner).insert(container.clone(), live);
        let outcome = async {
            let id = turn.turn_id.clone();
            let answer = peer.send(&id, turn).await.map_err(|_lost| AgentError::Lost(role))?;
            tokio::select! {
                answered = tokio::time::timeout(timeout, answer) => match answered {
                    Ok(Ok(result)) => Ok(result),
                    Ok(Err(_dropped)) => Err(AgentError::Lost(role)),
                    Err(_) => Err(AgentError::Timeout { role, limit: timeout }),
                },
                () = cancel.cancelled() => Err(AgentError::Cancelled(role)),
            }
        }
        .await;
        self.live.lock().unwrap_or_else(PoisonError::into_inner).remove(&container);
        match &outcome {
            Ok(_) => self.give_back(&session, role, container.clone()),
            // An agent that lost its turn is not trusted with the next one.
            Err(_) => self.remove(&container).await,
        }
        outcome.map(|result| (result, container))
    }

    /// Registers an agent that connected over TakeTurns and returns the stream of its turns;
    /// answers arriving on `reports` complete the pending turns.
    pub fn attach(
        self: &Arc<Self>,
        identity: &ContainerIdentity,
        reports: impl tokio_stream::Stream<Item = Result<Up<TurnOutcome>, StreamError>> + Unpin + Send + 'static,
    ) -> mpsc::Receiver<Down<Turn>> {
        self.connected.attach(identity, 2, reports, &self.tracker)
    }

    /// The connected agents, for the health monitor.
    pub fn probe_targets(&self) -> Vec<Probed> {
        self.connected.probe_targets()
    }

    /// Asks the agent in `container` whether it is well, over its own turn stream.
    pub async fn probe(&self, container: &str, timeout: Duration) -> Result<crate::work::health::Answer, ProbeError> {
        self.connected.probe(container, timeout).await
    }

    /// Replaces an agent that failed its health checks: its container is removed (a turn it
    /// was working on fails and says so) and a session's idle Assistant is started afresh.
    pub async fn restart(&self, target: &Probed) -> Result<String, AgentError> {
        let was_idle = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            let waiting = idle.get_mut(&(target.session.clone(), target.role));
            let found = waiting.as_ref().is_some_and(|waiting| waiting.iter().any(|e| e.container == target.name));
            if let Some(waiting) = waiting {
                waiting.retain(|entry| entry.container != target.name);
            }
            found
        };
        self.connected.forget(&target.name);
        self.remove(&target.name).await;
        if was_idle && target.role == Role::Assistant {
            let container = self.start(&target.session, &target.context, target.role, false).await?;
            self.give_back(&target.session, target.role, container.clone());
            return Ok(format!("it was removed and {container} waits in its place"));
        }
        Ok("it was removed; the next turn starts a new one".into())
    }

    /// Since when the container [`AgentPool::evict_one`] would remove has waited.
    pub fn longest_idle(&self) -> Option<Instant> {
        let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        idle.values().filter_map(|waiting| waiting.first().map(|entry| entry.since)).min()
    }

    /// Removes the idle container that has waited longest, if it has for `idle_for` at least,
    /// to free its slot for new work; false when none has.
    pub async fn evict_one(&self, idle_for: Duration) -> bool {
        let oldest = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            let key = idle
                .iter()
                .filter_map(|(key, waiting)| waiting.first().map(|entry| (entry.since, key.clone())))
                .filter(|(since, _)| since.elapsed() >= idle_for)
                .min()
                .map(|(_, key)| key);
            let taken = key.as_ref().and_then(|key| {
                let waiting = idle.get_mut(key)?;
                Some(waiting.remove(0))
            });
            idle.retain(|_, waiting| !waiting.is_empty());
            taken
        };
        let Some(entry) = oldest else { return false };
        tracing::info!(container = %entry.container, "removing an idle agent container to free a slot");
        self.remove(&entry.container).await;
        true
    }

    /// Removes idle containers past their keep-warm window, and those of `sessions_gone`.
    pub async fn reap_idle(&self, sessions_gone: &[String]) {
        let mut expired = vec![];
        {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            for ((session, role), waiting) in idle.iter_mut() {
                let limit = self.keep_warm(*role);
                let gone = sessions_gone.contains(session);
                waiting.retain(|entry| {
                    let keep = !gone && entry.since.elapsed() <= limit;
                    if !keep {
                        expired.push(entry.container.clone());
                    }
                    keep
                });
            }
            idle.retain(|_, waiting| !waiting.is_empty());
        }
        for container in expired {
            tracing::info!(%container, "removing an idle agent container");
            self.remove(&container).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::container::fake::FakeRuntime;
    use crate::sandbox::container::ContainerSpec;
    use crate::work::peers::Up;

    /// An agent pool over the fake engine, on a temporary data dir.
    struct Pool {
        pool: Arc<AgentPool>,
        fake: Arc<FakeRuntime>,
        starts: mpsc::UnboundedReceiver<ContainerSpec>,
        _temp: tempfile::TempDir,
    }

    fn pool() -> Pool {
        let temp = tempfile::tempdir().expect("tempdir");
        let data_dir = crate::base::datadir::DataDir::new(temp.path().join("d"));
        data_dir.create_layout().expect("the data dir's layout");
        let paths = crate::base::config::ConfigPaths {
            config_file: None,
            config_dir: data_dir.config_dir(),
            data_dir: data_dir.root().to_path_buf(),
        };
        let loaded =
            crate::base::config::load(&paths, Vec::<(String, String)>::new()).expect("the default configuration");
        let (tracker, cancel) = (TaskTracker::new(), CancellationToken::new());
        let metrics = Arc::new(crate::base::metrics::Metrics::off());
        let audit = crate::guard::audit::Audit::open(data_dir.logs_dir().join("audit"), false, 1, metrics);
        let limits = crate::sandbox::sockets::ConnectionLimits::for_descriptors(1024);
        let (listeners, _incoming) = crate::sandbox::sockets::ListenerSet::new(
            data_dir.container_sockets_dir(),
            limits,
            audit,
            cancel,
            tracker.clone(),
        );
        let (fake, starts) = FakeRuntime::new();
        let engine = Arc::new(tokio::sync::watch::channel(fake.engine()).0);
        let policy = Arc::new(crate::sandbox::policy::Policy::new(&loaded).expect("policy"));
        let slots = crate::sandbox::container::manager::Slots::new(8, Duration::from_secs(5));
        let containers = ContainerManager::new(
            engine,
            policy,
            listeners,
            data_dir,
            "baaaht/base:latest".into(),
            "/opt/baaaht-agent".into(),
            slots,
        )
        .expect("container manager");
        let containers = Arc::new(containers);
        let warm = Arc::new(WarmPools::new(containers.clone(), []));
        let pool = Arc::new(AgentPool::new(containers, warm, Duration::from_secs(60), tracker));
        Pool { pool, fake, starts, _temp: temp }
    }

    /// How a played agent answers a turn.
    enum Reply {
        Say(String),
        /// Its stream breaks.
        Break,
        /// It never answers.
        Hold,
    }

    /// What a container the pool started would do: connect as an agent and answer each turn
    /// as `answer` says.
    fn play(pool: &Arc<AgentPool>, spec: &ContainerSpec, answer: fn(&Turn) -> Reply) {
        let identity = ContainerIdentity {
            name: spec.name.clone(),
            role: Role::named(&spec.labels.role).expect("a role"),
            session_id: spec.labels.session_id.clone(),
            context: Context::named(&spec.labels.context).expect("a context"),
        };
        let (ups, reports) = mpsc::unbounded_channel();
        let mut turns = pool.attach(&identity, tokio_stream::wrappers::UnboundedReceiverStream::new(reports));
        tokio::spawn(async move {
            while let Some(down) = turns.recv().await {
                let Down::Work(turn) = down else { continue };
                let up = match answer(&turn) {
                    Reply::Say(content) => Ok(Up::Answer {
                        id: turn.turn_id.clone(),
                        answer: TurnOutcome { content, steps: 1, ..TurnOutcome::default() },
                    }),
                    Reply::Break => Err(StreamError("the agent's stream broke".to_string())),
                    Reply::Hold => continue,
                };
                if ups.send(up).is_err() {
                    return;
                }
            }
        });
    }

    fn work(session: &str, role: Role, turn: &str, text: &str) -> Work {
        Work {
            live: Live {
                session: session.into(),
                context: Context::user("alice"),
                role,
                turn_id: turn.into(),
                correlation_id: "c".into(),
                user_turn: turn.into(),
                entry: String::new(),
                asker: None,
                speaks: role == Role::Assistant,
            },
            turn: Turn { turn_id: turn.into(), messages: vec![Message::user(text)], ..Turn::default() },
            timeout: Duration::from_secs(10),
            cancel: CancellationToken::new(),
        }
    }

    fn echo(turn: &Turn) -> Reply {
        match turn.messages.last().map(|message| &message.content[0]) {
            Some(baaaht_llm::model::Block::Text(text)) => Reply::Say(format!("echo: {text}")),
            _ => Reply::Break,
        }
    }

    #[tokio::test]
    async fn a_sessions_agent_takes_its_turns_one_container_per_session_and_role() {
        let Pool { pool, fake, mut starts, _temp } = pool();
        let serving = {
            let pool = pool.clone();
            tokio::spawn(async move {
                while let Some(spec) = starts.recv().await {
                    play(&pool, &spec, echo);
                }
            })
        };
        let first = pool.run(work("s1", Role::Assistant, "t1", "hello")).await.expect("answered");
        assert_eq!(first.content, "echo: hello");
        assert!(pool.live(&fake.running()[0]).is_none(), "no turn is live once answered");
        // The next turn of the session is the waiting container's; another session gets its own.
        let (second, by) = pool.run_named(work("s1", Role::Assistant, "t2", "again")).await.expect("answered");
        assert_eq!(second.content, "echo: again");
        assert_eq!(fake.running(), std::slice::from_ref(&by), "one container served both turns");
        let (_, other) = pool.run_named(work("s2", Role::Assistant, "t3", "hi")).await.expect("answered");
        assert_ne!(other, by);
        assert_eq!(fake.running().len(), 2);
        serving.abort();
    }

    #[tokio::test]
    async fn an_agent_that_goes_away_mid_turn_loses_it_and_its_container_and_a_cancel_stops_one() {
        let Pool { pool, fake, mut starts, _temp } = pool();
        let serving = {
            let pool = pool.clone();
            tokio::spawn(async move {
                while let Some(spec) = starts.recv().await {
                    play(&pool, &spec, |turn| match turn.turn_id.split('-').next() {
                        Some("break") => Reply::Break,
                        Some("hold") => Reply::Hold,
                        _ => Reply::Say("ok".into()),
                    });
                }
            })
        };
        let lost = pool.run(work("s1", Role::Worker, "break-1", "x")).await.expect_err("its stream broke");
        assert!(matches!(lost, AgentError::Lost(Role::Worker)), "{lost:?}");
        assert!(fake.running().is_empty(), "an agent that lost its turn is not trusted with the next one");
        // A turn cancelled while its agent works ends at once, and its container with it.
        let held = work("s1", Role::Worker, "hold-1", "x");
        held.cancel.cancel();
        let outcome = pool.run(held).await;
        assert!(matches!(outcome, Err(AgentError::Cancelled(Role::Worker))), "{outcome:?}");
        assert!(fake.running().is_empty());
        // An agent that never answers gives the turn up at its timeout.
        let mut slow = work("s2", Role::Worker, "hold-2", "x");
        slow.timeout = Duration::from_millis(100);
        let outcome = pool.run(slow).await;
        assert!(matches!(outcome, Err(AgentError::Timeout { role: Role::Worker, .. })), "{outcome:?}");
        serving.abort();
    }
}
