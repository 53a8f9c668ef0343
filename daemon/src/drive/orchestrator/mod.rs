//! Orchestration (spec §6, DESIGN.md §4): a user message becomes a turn of its session's
//! Assistant; the Assistant's `delegate` calls become tasks of Worker, Researcher, Coder or
//! Memory containers; the reply and every delegation land in the session log; every step is
//! published to the context's channels as it happens.
//!
//! Turns of one session run one after another. A turn in progress is recorded in
//! `data/state/turns.json`, so that a daemon killed during it ends the turn, on restart, with
//! a message in the session saying so (the user sees it, nothing is silently lost).
//!
//! By noun: this file holds the turn ledger and accepts messages; `turns.rs` runs a turn of the
//! Assistant, `history.rs` builds what the model sees and compacts, `delegation.rs` runs the
//! `delegate` tool, `archival.rs` archives sessions and supervises idling and expiry.

mod archival;
mod delegation;
mod history;
mod turns;
pub mod voice;

pub use archival::{archive, archive_quiet, supervise};
pub use delegation::Foreseer;
pub use delegation::{delegate, retold, run_alone, Delegated, Delegation};
use delegation::{run_task, Task};
pub use history::{compact, context_window, history, Images, PictureError};
use history::{message_chars, summarize};
use turns::run_turn;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::base::auth::Live;
use crate::base::auth::{ContainerIdentity, Context, ContextKind, Role};
use crate::base::config::LoadedConfig;
use crate::base::datadir::DataDir;
use crate::base::lifetime::Lifetime;
use crate::base::metrics::Metrics;
use crate::base::state;
use crate::model::llm::call::Calls;
use crate::model::llm::LlmGateway;
use crate::people::groups::Groups;
use crate::people::identities::Identities;
use crate::sandbox::container::manager::ContainerManager;
use crate::sandbox::workspace::Workspaces;
use crate::store::events::EventBus;
use crate::store::events::{Event, Kind};
use crate::store::sessions::SessionStore;
use crate::store::sessions::{Entry, NewEntry, SessionError, SessionRecord, SessionStatus};
use crate::work::agents::AgentPool;
use crate::work::agents::Work;
use crate::work::tools::Runners;

const TURNS_FILE: &str = "turns.json";

/// What the orchestrator works with, handed to it when the daemon is put together.
#[derive(Debug)]
pub struct Orchestrator {
    pub loaded: Arc<LoadedConfig>,
    pub data_dir: DataDir,
    pub metrics: Arc<Metrics>,
    /// Where each step of a turn is published to the context's channels.
    pub events: Arc<EventBus>,
    pub sessions: Arc<SessionStore>,
    /// The turn ledger (`turns.json`) and the places turns and delegations queue for.
    pub turns: Arc<Turns>,
    pub agents: Arc<AgentPool>,
    pub tools: Arc<Runners>,
    pub containers: Arc<ContainerManager>,
    pub workspaces: Arc<Workspaces>,
    /// The one road to the model (compaction, memory extraction).
    pub calls: Arc<Calls>,
    /// The configured models and their context windows.
    pub llm: Arc<LlmGateway>,
    /// Voice notes heard and answers spoken.
    pub speech: Arc<crate::model::speech::Speech>,
    pub groups: Arc<Groups>,
    pub identities: Arc<Identities>,
    pub lifetime: Lifetime,
    /// Turns that read untrusted content, and what they may no longer do.
    pub taints: Arc<crate::net::taint::Taints>,
    /// What a scheduled run's result passes before it is kept.
    pub redact: crate::guard::redact::Redact,
    /// What each turn changed in its folders, kept for its undo.
    pub undo: Arc<crate::store::undo::Undo>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct InFlightTurn {
    session: String,
    user_entry: String,
    correlation_id: String,
    started: String,
    /// The user message while it waits behind another turn of its session: it is appended
    /// when its own turn starts, so that it follows the reply before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queued: Option<Queued>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Queued {
    content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    channel: Option<String>,
    sender: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    attachments: Vec<crate::store::sessions::log::Attachment>,
}

impl Queued {
    fn entry(&self) -> NewEntry {
        NewEntry::Message {
            role: "user",
            content: self.content.clone(),
            channel: self.channel.clone(),
            sender: Some(self.sender.clone()),
            attachments: self.attachments.clone(),
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct InFlight {
    turns: BTreeMap<String, InFlightTurn>,
}

/// The turns in progress.
/// The most of a turn's streamed answer kept for the case it is stopped.
const MAX_WRITTEN: usize = 1 << 20;

#[derive(Debug)]
pub struct Turns {
    path: PathBuf,
    inflight: Mutex<InFlight>,
    /// Session → the lock its turns take one after another.
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// User turn → the entry its next delegation or reply hangs under.
    tails: Mutex<HashMap<String, String>>,
    /// User turn → what stops it and every agent working for it.
    cancels: Mutex<HashMap<String, CancellationToken>>,
    /// User turn → what its Assistant has written of the answer so far, kept when the turn is
    /// stopped (at most [`MAX_WRITTEN`] bytes).
    written: Mutex<HashMap<String, String>>,
    /// User turns whose Assistant was told by the provider that its request did not fit the
    /// model's context window.
    overflowed: Mutex<std::collections::HashSet<String>>,
    /// User turns whose word a delegate holds: its answer is the reply (one at a time).
    speaking: Mutex<std::collections::HashSet<String>>,
    /// Places for the containers work needs, one per container slot (see [`Places`]).
    places: Arc<Places>,
    /// How long a turn waits for its place (`container.queue_timeout`).
    patience: Duration,
}

/// A delegate's hold on its turn's word ([`Turns::give_word`]), given back when dropped (also
/// when the delegation's call goes away).
#[derive(Debug)]
pub struct Word<'a> {
    turns: &'a Turns,
    turn: String,
}

impl Drop for Word<'_> {
    fn drop(&mut self) {
        self.turns.speaking.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.turn);
    }
}

/// Places for the containers work needs, one per container slot: a turn's Assistant takes
/// one, and only while two more stay free; a delegation (its agent and tool container), or a
/// scheduled run, takes two. So the agents the running turns delegate to always find room,
/// and the Assistants never hold every slot while waiting for them. Waiters are not served in
/// order: a delegation needing two goes ahead of a turn waiting for three.
#[derive(Debug)]
pub struct Places {
    slots: u32,
    taken: Mutex<u32>,
    freed: tokio::sync::Notify,
}

/// What a turn waiting for its place ([`Turns::admit_turn`]) got.
#[derive(Debug)]
pub enum Admission {
    Place(Taken),
    /// The turn was stopped while it waited.
    Cancelled,
    /// No place came free in time: the sentence for the person who asked.
    Busy(String),
}

/// Places taken, given back when dropped.
#[derive(Debug)]
pub struct Taken {
    places: Arc<Places>,
    count: u32,
}

impl Drop for Taken {
    fn drop(&mut self) {
        let mut taken = self.places.taken.lock().unwrap_or_else(PoisonError::into_inner);
        *taken = taken.saturating_sub(self.count);
        drop(taken);
        self.places.freed.notify_waiters();
    }
}

impl Places {
    fn new(slots: u32) -> Arc<Places> {
        Arc::new(Places { slots: slots.max(1), taken: Mutex::new(0), freed: tokio::sync::Notify::new() })
    }

    /// Takes `count` places once `free` are free (at least `count`), or none when `cancel`
    /// fires first.
    async fn take(self: &Arc<Self>, count: u32, free: u32, cancel: &CancellationToken, what: &str) -> Option<Taken> {
        let free = free.min(self.slots).max(count);
        let mut told = false;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
                if *taken + free <= self.slots {
                    *taken += count;
                    return Some(Taken { places: self.clone(), count });
                }
            }
            if !told {
                told = true;
                tracing::info!(
                    slots = self.slots,
                    what,
                    "the container slots are spoken for; waiting for running work to end"
                );
            }
            tokio::select! {
                () = cancel.cancelled() => return None,
                () = freed => {}
            }
        }
    }
}

impl Turns {
    /// The turns recorded in `state_dir`, with `container_slots` container slots to share; a
    /// turn waits `patience` at most for its place.
    pub fn open(state_dir: &std::path::Path, container_slots: u32, patience: Duration) -> Turns {
        let path = state_dir.join(TURNS_FILE);
        let inflight = state::read_json_or_set_aside(&path, InFlight::default);
        Turns {
            path,
            inflight: Mutex::new(inflight),
            sessions: Mutex::default(),
            tails: Mutex::default(),
            cancels: Mutex::default(),
            written: Mutex::default(),
            overflowed: Mutex::default(),
            speaking: Mutex::default(),
            places: Places::new(container_slots),
            patience,
        }
    }

    /// Notes `text`, streamed by the Assistant of user turn `turn`, as written so far: while
    /// the turn runs (a delta still coming in after its end is not kept), up to
    /// [`MAX_WRITTEN`] (the rest is not).
    pub fn wrote(&self, turn: &str, text: &str) {
        if !self.cancels.lock().unwrap_or_else(PoisonError::into_inner).contains_key(turn) {
            return;
        }
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        // Looked up before it is made: no key is allocated per token.
        if !written.contains_key(turn) {
            written.insert(turn.to_string(), String::new());
        }
        let Some(so_far) = written.get_mut(turn) else { return };
        let room = MAX_WRITTEN.saturating_sub(so_far.len());
        let mut cut = text.len().min(room);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        so_far.push_str(&text[..cut]);
    }

    /// How much of `turn`'s answer has been written so far.
    pub fn written_len(&self, turn: &str) -> usize {
        self.written.lock().unwrap_or_else(PoisonError::into_inner).get(turn).map_or(0, String::len)
    }

    /// Gives a delegate of `turn` the word (its answer is the reply) until the [`Word`] is
    /// dropped, unless another delegate has it.
    pub fn give_word(&self, turn: &str) -> Option<Word<'_>> {
        let given = self.speaking.lock().unwrap_or_else(PoisonError::into_inner).insert(turn.to_string());
        given.then(|| Word { turns: self, turn: turn.to_string() })
    }

    /// What the Assistant of `turn` wrote, forgotten here.
    fn take_written(&self, turn: &str) -> String {
        self.written.lock().unwrap_or_else(PoisonError::into_inner).remove(turn).unwrap_or_default()
    }

    /// Forgets what the Assistant of `turn` wrote (it is tried again).
    fn wrote_nothing(&self, turn: &str) {
        self.written.lock().unwrap_or_else(PoisonError::into_inner).remove(turn);
    }

    /// Notes that the provider refused a request of `turn`'s Assistant as longer than the
    /// model's context window.
    pub fn context_exceeded(&self, turn: &str) {
        self.overflowed.lock().unwrap_or_else(PoisonError::into_inner).insert(turn.to_string());
    }

    /// Whether [`Turns::context_exceeded`] was noted for `turn`, forgotten here.
    fn take_context_exceeded(&self, turn: &str) -> bool {
        self.overflowed.lock().unwrap_or_else(PoisonError::into_inner).remove(turn)
    }

    /// A place for a turn's Assistant, taken when three are free (two stay free for the
    /// delegations of running turns), waiting no longer than `container.queue_timeout`.
    pub async fn admit_turn(&self, cancel: &CancellationToken) -> Admission {
        match tokio::time::timeout(self.patience, self.places.take(1, 3, cancel, "a turn")).await {
            Ok(Some(place)) => Admission::Place(place),
            Ok(None) => Admission::Cancelled,
            Err(_) => {
                tracing::warn!(slots = self.places.slots, waited_s = self.patience.as_secs(), "a turn found no place");
                Admission::Busy(format!(
                    "baaaht is busy: no room came free for your message in {} s while others' work ran. Your \
                     message is kept; ask again in a few minutes (the person who runs baaaht can raise \
                     container.max_concurrent, now {}).",
                    self.patience.as_secs(),
                    self.places.slots
                ))
            }
        }
    }

    /// Places for an agent and its tool container (a delegation, a scheduled run); none when
    /// `cancel` fires first.
    pub async fn admit_agent(&self, cancel: &CancellationToken) -> Option<Taken> {
        let count = 2.min(self.places.slots.saturating_sub(1)).max(1);
        self.places.take(count, count, cancel, "an agent").await
    }

    fn update(&self, change: impl FnOnce(&mut InFlight)) {
        let mut inflight = self.inflight.lock().unwrap_or_else(PoisonError::into_inner);
        change(&mut inflight);
        if let Err(error) = state::write_json(&self.path, &*inflight) {
            // The turn still runs; only its recovery after a crash is at stake.
            tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot record the turns in progress");
        }
    }

    fn session_lock(&self, session: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner).entry(session.to_string()).or_default().clone()
    }

    /// Holds `session` once no turn runs in it (none starts until the hold is dropped): waits
    /// up to `wait` for a turn that is ending (its answer is out, its upkeep not yet done); none
    /// when one still runs then.
    pub async fn hold_idle(
        &self,
        session: &str,
        wait: std::time::Duration,
    ) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        tokio::time::timeout(wait, self.session_lock(session).lock_owned()).await.ok()
    }

    fn tail(&self, turn: &str) -> Option<String> {
        self.tails.lock().unwrap_or_else(PoisonError::into_inner).get(turn).cloned()
    }

    fn set_tail(&self, turn: &str, entry: &str) {
        self.tails.lock().unwrap_or_else(PoisonError::into_inner).insert(turn.to_string(), entry.to_string());
    }

    /// What stops user turn `turn` (made when first asked for; dropped when the turn ends).
    fn cancel_token(&self, turn: &str) -> CancellationToken {
        self.cancels.lock().unwrap_or_else(PoisonError::into_inner).entry(turn.to_string()).or_default().clone()
    }

    /// What stops user turn `turn` while it is in progress; a turn that ended has none.
    fn running_token(&self, turn: &str) -> Option<CancellationToken> {
        self.cancels.lock().unwrap_or_else(PoisonError::into_inner).get(turn).cloned()
    }

    /// Cancels session `session`'s turn `turn` (every one of its turns when `turn` is empty);
    /// returns the turns cancelled.
    pub fn cancel(&self, session: &str, turn: &str) -> Vec<String> {
        let chosen: Vec<String> = self
            .inflight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .turns
            .iter()
            .filter(|(id, inflight)| inflight.session == session && (turn.is_empty() || id.as_str() == turn))
            .map(|(id, _)| id.clone())
            .collect();
        chosen
            .into_iter()
            .filter(|id| {
                let token = self.running_token(id);
                token.as_ref().inspect(|token| token.cancel()).is_some()
            })
            .collect()
    }

    /// The turns of session `session` in progress (queued ones included).
    pub fn running_in(&self, session: &str) -> Vec<String> {
        let inflight = self.inflight.lock().unwrap_or_else(PoisonError::into_inner);
        inflight.turns.iter().filter(|(_, turn)| turn.session == session).map(|(id, _)| id.clone()).collect()
    }

    /// Turns in progress, for status.
    pub fn count(&self) -> usize {
        self.inflight.lock().unwrap_or_else(PoisonError::into_inner).turns.len()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OrchestratorError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("{0}")]
    Invalid(String),
    #[error("DelegateToAgent: this agent is not working on a turn; delegate only while answering one")]
    NoTurn,
    #[error("the model could not write the summary: {0}")]
    Model(String),
    /// A spending limit of the context is reached (the sentence is for the user as it is).
    #[error("{0}")]
    Budget(String),
    #[error(transparent)]
    Group(#[from] crate::people::groups::GroupError),
}

/// What [`accept_user_message`] did.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub session: String,
    pub entry: String,
    pub turn: String,
    pub correlation_id: String,
    /// The message was a voice note: its answer may be spoken too.
    pub spoken: bool,
}

/// A user message for [`accept_user_message`].
#[derive(Debug, Clone)]
pub struct Incoming {
    pub context: Context,
    pub session: Option<String>,
    pub sender: String,
    pub channel: Option<String>,
    pub content: String,
    pub parent: Option<String>,
    /// Files shared with the message, stored in the session's `uploads/` by UploadFile.
    pub attachments: Vec<crate::store::sessions::log::Attachment>,
    /// Its words were heard from the sender's voice note.
    pub spoken: bool,
}

fn new_id(prefix: &str) -> String {
    let simple = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}{}", &simple[..12])
}

fn event(live: (&str, &str, &str), kind: Kind) -> Event {
    let (session, turn, correlation) = live;
    Event::of_turn(session, turn, correlation, kind)
}

/// Records a user message in its session (on disk before this returns) and starts its turn.
pub fn accept_user_message(
    orchestrator: &Arc<Orchestrator>,
    incoming: Incoming,
) -> Result<Accepted, OrchestratorError> {
    if incoming.content.trim().is_empty() {
        return Err(OrchestratorError::Invalid("content: the message is empty; write something".into()));
    }
    if incoming.context.kind == ContextKind::Group {
        orchestrator.groups.accepts_messages(&incoming.context.id)?;
    }
    if let Some(channel) = incoming.channel.as_deref() {
        orchestrator.events.note_activity(&incoming.context, channel);
    }
    let record = match &incoming.session {
        Some(id) => orchestrator.sessions.get_in(id, &incoming.context)?,
        None => orchestrator.sessions.active(&incoming.context, &incoming.sender)?,
    };
    if record.status == SessionStatus::Archived {
        return Err(SessionError::Archived(record.id).into());
    }
    orchestrator.metrics.record_message(incoming.channel.as_deref().unwrap_or_default());
    // Turns of a session run one after another. A message that arrives while one runs is
    // recorded in turns.json at once and appended when its turn starts, after the reply before it.
    let (incoming_sender, incoming_channel, incoming_content) =
        (incoming.sender.clone(), incoming.channel.clone(), incoming.content.clone());
    let incoming_attachments = incoming.attachments.clone();
    let queued = Queued {
        content: incoming.content,
        channel: incoming.channel,
        sender: incoming.sender,
        parent: incoming.parent,
        attachments: incoming.attachments,
    };
    let lock = orchestrator.turns.session_lock(&record.id);
    let entry = crate::store::sessions::new_entry_id();
    let (guard, queued) = match lock.try_lock_owned() {
        Ok(guard) => {
            orchestrator.sessions.append_as(
                &record.id,
                Some(entry.clone()),
                queued.parent.as_deref(),
                queued.entry(),
            )?;
            (Some(guard), None)
        }
        Err(_busy) => (None, Some(queued)),
    };
    // A session's tool container is warmed when it is first used or used again (once its turn
    // is admitted): a session made and never written to costs nothing.
    let warm = record.status != SessionStatus::Active || record.leaf.is_none();
    // A title is a convenience: a failure to save it costs the message nothing.
    if record.title.is_none() {
        if let Err(error) = orchestrator.sessions.title_from_first_message(&record.id, &incoming_content) {
            tracing::warn!(session = %record.id, %error, "cannot title the conversation");
        }
    }
    let turn = new_id("t-");
    let correlation_id = uuid::Uuid::new_v4().to_string();
    // Every channel following the context sees the message, the one it came from included.
    let sender_id = queued.as_ref().map_or(incoming_sender.clone(), |q| q.sender.clone());
    let entered = Kind::UserMessage {
        entry_id: entry.clone(),
        sender_name: sender_name(orchestrator, &sender_id),
        sender_id,
        channel: incoming_channel.clone(),
        content: incoming_content.clone(),
        attachments: incoming_attachments,
        spoken: incoming.spoken,
    };
    orchestrator.events.publish(&record.context(), event((&record.id, &turn, &correlation_id), entered));
    orchestrator.turns.update(|inflight| {
        inflight.turns.insert(
            turn.clone(),
            InFlightTurn {
                session: record.id.clone(),
                user_entry: entry.clone(),
                correlation_id: correlation_id.clone(),
                started: state::now_rfc3339(),
                queued: queued.clone(),
            },
        );
    });
    orchestrator.turns.cancel_token(&turn);
    let accepted = Accepted { session: record.id.clone(), entry, turn, correlation_id, spoken: incoming.spoken };
    let span = tracing::info_span!("turn", turn = %accepted.turn, correlation_id = %accepted.correlation_id, session = %accepted.session);
    orchestrator
        .lifetime
        .spawn(run_turn(orchestrator.clone(), record, accepted.clone(), guard, queued, warm).instrument(span));
    Ok(accepted)
}

/// The name the daemon knows `sender` (a channel identity or a user id) by; empty for a host
/// client or someone it does not know.
pub fn sender_name(orchestrator: &Orchestrator, sender: &str) -> String {
    orchestrator.identities.user(sender).map(|user| user.name).unwrap_or_default()
}

/// Starts the session's tool container ahead of its first tool call (issue 5's pre-warming),
/// in the background, when the turn of a message in a session new or resumed is admitted: one
/// that is being written in usually delegates soon.
pub fn prewarm(orchestrator: &Arc<Orchestrator>, record: &SessionRecord) {
    prewarm_tools(orchestrator, &record.id, &record.context(), false);
}

/// Whether a container may be started on a guess (ahead of the work that will want it): where
/// tools are warm and half the container slots are free (a guess is not worth a slot the
/// turns' own agents may need).
pub(super) fn room_for_a_guess(orchestrator: &Orchestrator) -> bool {
    orchestrator.loaded.config.tools.mode == crate::base::config::ToolMode::Warm
        && orchestrator.containers.slots_free() * 2 >= orchestrator.containers.cap() as usize
}

/// Starts `session`'s tool container (a Coder's with `coder`) in the background, where there is
/// [`room_for_a_guess`].
pub(super) fn prewarm_tools(orchestrator: &Arc<Orchestrator>, session: &str, context: &Context, coder: bool) {
    if !room_for_a_guess(orchestrator) {
        return;
    }
    let (session, context) = (session.to_string(), context.clone());
    let warming = orchestrator.clone();
    orchestrator.lifetime.spawn(async move {
        if let Err(error) = warming.tools.prewarm(&session, &context, coder).await {
            tracing::warn!(session, error = %baaaht_proto::error_chain(&error), "cannot pre-warm the tool container");
        }
    });
}

/// The date and time now in `system.timezone`, as agents see it with every turn.
fn now_for_agents(orchestrator: &Orchestrator) -> String {
    let name = &orchestrator.loaded.config.system.timezone;
    let zone = jiff::tz::TimeZone::get(name).unwrap_or(jiff::tz::TimeZone::UTC);
    jiff::Timestamp::now().to_zoned(zone).strftime("%A %Y-%m-%d %H:%M:%S %:z").to_string() + &format!(" ({name})")
}

fn agent_settings(orchestrator: &Orchestrator, role: Role) -> crate::base::config::AgentSettings {
    orchestrator.loaded.config.agents.settings(role)
}

/// Ends every turn a previous daemon left unfinished with a message in its session saying so.
pub fn recover(orchestrator: &Orchestrator) -> usize {
    let interrupted: Vec<(String, InFlightTurn)> = orchestrator
        .turns
        .inflight
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .turns
        .iter()
        .map(|(turn, inflight)| (turn.clone(), inflight.clone()))
        .collect();
    for (turn, inflight) in &interrupted {
        if let Some(queued) = &inflight.queued {
            let recorded = orchestrator
                .sessions
                .read(&inflight.session)
                .is_ok_and(|read| read.entries.iter().any(|entry| entry.id() == inflight.user_entry));
            if !recorded {
                let appended = orchestrator.sessions.append_as(
                    &inflight.session,
                    Some(inflight.user_entry.clone()),
                    queued.parent.as_deref(),
                    queued.entry(),
                );
                if let Err(error) = appended {
                    tracing::error!(turn, error = %baaaht_proto::error_chain(&error), "cannot record a queued message");
                }
            }
        }
        let content = format!(
            "The reply was interrupted: baaahtd stopped while it was being written (turn {turn}, started {}). \
             Send your message again.",
            inflight.started
        );
        let appended = orchestrator.sessions.append(
            &inflight.session,
            None,
            NewEntry::Message {
                role: "system",
                content: content.clone(),
                channel: None,
                sender: None,
                attachments: vec![],
            },
        );
        match appended {
            Ok(_) => tracing::warn!(turn, session = %inflight.session, "ended a turn interrupted by a restart"),
            Err(error) => {
                tracing::error!(turn, error = %baaaht_proto::error_chain(&error), "cannot end an interrupted turn")
            }
        }
        if let Some(record) = orchestrator.sessions.get(&inflight.session) {
            orchestrator.events.publish(
                &record.context(),
                event(
                    (&inflight.session, turn, &inflight.correlation_id),
                    Kind::TurnError { message: content, for_users: true },
                ),
            );
        }
    }
    if !interrupted.is_empty() {
        orchestrator.turns.update(|inflight| inflight.turns.clear());
        tracing::warn!(
            interrupted = interrupted.len(),
            "turns interrupted by the previous daemon were ended with a message"
        );
    }
    interrupted.len()
}

/// The tools `role` may call, by name (the policy's): the daemon's own and the runner's; the
/// browser only while `tools.browser.enabled`.
pub fn role_tools(orchestrator: &Orchestrator, role: Role) -> Vec<&'static str> {
    let browser = orchestrator.loaded.config.tools.browser.enabled;
    crate::sandbox::policy::Policy::agent_tools_of(role)
        .iter()
        .copied()
        .chain(
            crate::sandbox::policy::Policy::tools_of(role)
                .iter()
                .filter(|tool| browser || **tool != baaaht_proto::ToolName::Browser)
                .map(|tool| tool.as_str()),
        )
        .collect()
}

/// The skills `role` is offered in `context`: those installed now (none for the roles that
/// use none).
pub fn role_skills(orchestrator: &Orchestrator, role: Role, context: &Context) -> Vec<crate::work::skills::Found> {
    match role {
        Role::Assistant | Role::Worker | Role::Researcher | Role::Coder => crate::work::skills::manifest(
            orchestrator.data_dir.root(),
            &orchestrator.loaded.config.skills.directories,
            context,
        ),
        _ => vec![],
    }
}

/// What RegisterAgent answers: the role's settings, identity, context, memory and skills.
pub fn agent_setup(orchestrator: &Orchestrator, identity: &ContainerIdentity) -> crate::work::agents::AgentSetup {
    let role = identity.role;
    let settings = agent_settings(orchestrator, role);
    let read = |path: PathBuf| std::fs::read_to_string(path).unwrap_or_default();
    let agent_dir = orchestrator.data_dir.root().join("agents").join(role.as_str());
    let context = &identity.context;
    let own = orchestrator.data_dir.context_dir(context);
    let profile = match context.kind {
        ContextKind::User => "USER.md",
        ContextKind::Group => "GROUP.md",
    };
    let memories = if role == Role::Assistant { memories_of(&own.join("memory")) } else { vec![] };
    let memories = memories.iter().map(remembered).collect();
    let skills = role_skills(orchestrator, role, context);
    let tools = role_tools(orchestrator, role);
    let session_model = orchestrator.sessions.get(&identity.session_id).and_then(|record| record.model);
    crate::work::agents::AgentSetup {
        role,
        model: match (role, session_model) {
            (Role::Assistant, Some(model)) => model,
            _ => settings.model.0.clone(),
        },
        max_iterations: settings.max_iterations,
        temperature: settings.temperature.map(|t| t.0),
        timeout: Duration::from_secs(settings.timeout),
        soul: read(agent_dir.join("SOUL.md")),
        identity: read(agent_dir.join("IDENTITY.md")),
        context_profile: read(own.join(profile)),
        memories,
        skills,
        tools,
        session_id: identity.session_id.clone(),
        context: context.clone(),
    }
}

/// What the Assistant of `live`'s turn holds of its group's memory that is not the words of the
/// turn's asker, if anything (the source of a mark): what other members said. (An entry kept
/// from outside is in its context once its owner confirmed it; a search that finds one marks.)
pub(crate) fn foreign_memories(orchestrator: &Orchestrator, live: &Live) -> Option<String> {
    if live.context.kind != ContextKind::Group {
        return None;
    }
    let folder = orchestrator.data_dir.context_dir(&live.context).join("memory");
    let foreign: Vec<String> =
        memories_of(&folder).iter().filter_map(|entry| entry.foreign_to(true, live.asker.as_deref(), false)).collect();
    let first = foreign.first()?;
    Some(match foreign.len() {
        1 => first.clone(),
        more => format!("{first}, and {} more", more - 1),
    })
}

/// A memory as the Assistant is given it: one line, at most 500 characters.
fn remembered(entry: &crate::store::memory::MemoryEntry) -> String {
    const LONGEST: usize = 500;
    let mut content = entry.content.trim().replace('\n', " ");
    if content.len() > LONGEST {
        let mut cut = LONGEST;
        while !content.is_char_boundary(cut) {
            cut -= 1;
        }
        content.truncate(cut);
        content.push('…');
    }
    format!("{}: {content}", entry.key)
}

/// The most recent memories of a context, those the Assistant is given.
fn memories_of(folder: &std::path::Path) -> Vec<crate::store::memory::MemoryEntry> {
    const MOST: usize = 20;
    if !folder.is_dir() {
        return vec![];
    }
    let store = crate::store::memory::MemoryStore::new(folder.to_path_buf());
    let mut entries = match store.list(None) {
        Ok(entries) => entries,
        Err(error) => {
            tracing::warn!(error = %baaaht_proto::error_chain(&error), "cannot read memories");
            return vec![];
        }
    };
    entries.sort_by_key(|entry| std::cmp::Reverse(entry.updated_at));
    entries.truncate(MOST);
    entries
}

#[cfg(test)]
pub(crate) mod played_tests;

/// The model road tells the turn table what a turn's reply writes as it streams.
impl crate::model::llm::call::Reply for Turns {
    fn wrote(&self, turn: &str, text: &str) {
        Turns::wrote(self, turn, text);
    }

    fn context_exceeded(&self, turn: &str) {
        Turns::context_exceeded(self, turn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_turn_starts_only_while_a_delegation_still_finds_room() {
        let places = Places::new(6);
        let never = CancellationToken::new();
        let mut turns = vec![];
        for _ in 0..4 {
            turns.push(places.take(1, 3, &never, "a turn").await.expect("room for a turn"));
        }
        // A fifth turn waits (it would leave less than two free) ...
        let cancel = CancellationToken::new();
        let fifth = tokio::spawn({
            let (places, cancel) = (places.clone(), cancel.clone());
            async move { places.take(1, 3, &cancel, "a turn").await }
        });
        tokio::task::yield_now().await;
        // ... and a delegation of a running turn goes ahead of it.
        let delegation = places.take(2, 2, &never, "an agent").await.expect("room for a delegation");
        assert_eq!(*places.taken.lock().expect("lock"), 6);
        drop(delegation);
        drop(turns.pop());
        let _fifth = fifth.await.expect("task").expect("the waiting turn starts once there is room");
        assert_eq!(*places.taken.lock().expect("lock"), 4);
        // A cancelled wait takes nothing.
        cancel.cancel();
        assert!(places.take(2, 6, &cancel, "an agent").await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_that_finds_no_place_in_time_is_told_so() {
        let dir = tempfile::tempdir().expect("temp dir");
        let turns = Turns::open(dir.path(), 3, Duration::from_secs(60));
        let never = CancellationToken::new();
        let Admission::Place(first) = turns.admit_turn(&never).await else { panic!("room for the first turn") };
        // A second would leave less than two places for the first one's delegations.
        let Admission::Busy(sentence) = turns.admit_turn(&never).await else { panic!("no room for a second turn") };
        assert!(sentence.starts_with("baaaht is busy: no room came free for your message in 60 s"), "{sentence}");
        assert!(sentence.contains("Your message is kept"), "{sentence}");
        drop(first);
        assert!(matches!(turns.admit_turn(&never).await, Admission::Place(_)));
    }
}
