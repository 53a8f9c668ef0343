//! Orchestration (spec §6, DESIGN.md §4): a user message becomes a turn of its session's
//! Assistant; the Assistant's `delegate` calls become tasks of Worker, Researcher, Coder or
//! Memory containers; the reply and every delegation land in the session log; every step is
//! published to the context's channels as it happens.
//!
//! Turns of one session run one after another. A turn in progress is recorded in
//! `data/state/turns.json`, so that a daemon killed during it ends the turn, on restart, with
//! a message in the session saying so (the user sees it, nothing is silently lost).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baaaht_proto::v1;
use serde::{Deserialize, Serialize};
use tracing::Instrument as _;

use crate::agents::{Live, Work};
use crate::auth::{ContainerIdentity, Context, ContextKind, Role};
use crate::sessions::{Entry, NewEntry, SessionError, SessionRecord, SessionStatus};
use crate::{state, Shared};

const TURNS_FILE: &str = "turns.json";

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
}

impl Queued {
    fn entry(&self) -> NewEntry {
        NewEntry::Message {
            role: "user",
            content: self.content.clone(),
            channel: self.channel.clone(),
            sender: Some(self.sender.clone()),
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct InFlight {
    turns: BTreeMap<String, InFlightTurn>,
}

/// The turns in progress.
#[derive(Debug)]
pub struct Turns {
    path: PathBuf,
    inflight: Mutex<InFlight>,
    /// Session → the lock its turns take one after another.
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// User turn → the entry its next delegation or reply hangs under.
    tails: Mutex<HashMap<String, String>>,
}

impl Turns {
    pub fn open(state_dir: &std::path::Path) -> Turns {
        let path = state_dir.join(TURNS_FILE);
        let inflight = state::read_json_or_set_aside(&path, InFlight::default);
        Turns { path, inflight: Mutex::new(inflight), sessions: Mutex::default(), tails: Mutex::default() }
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

    fn tail(&self, turn: &str) -> Option<String> {
        self.tails.lock().unwrap_or_else(PoisonError::into_inner).get(turn).cloned()
    }

    fn set_tail(&self, turn: &str, entry: &str) {
        self.tails.lock().unwrap_or_else(PoisonError::into_inner).insert(turn.to_string(), entry.to_string());
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
}

/// What [`accept_user_message`] did.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub session: String,
    pub entry: String,
    pub turn: String,
    pub correlation_id: String,
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
}

fn new_id(prefix: &str) -> String {
    let simple = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}{}", &simple[..12])
}

fn event(live: (&str, &str, &str), kind: v1::orchestrator_event::Event) -> v1::OrchestratorEvent {
    let (session, turn, correlation) = live;
    v1::OrchestratorEvent {
        session_id: session.to_string(),
        turn_id: turn.to_string(),
        correlation_id: correlation.to_string(),
        event: Some(kind),
    }
}

/// Records a user message in its session (on disk before this returns) and starts its turn.
pub fn accept_user_message(shared: &Arc<Shared>, incoming: Incoming) -> Result<Accepted, OrchestratorError> {
    if incoming.content.trim().is_empty() {
        return Err(OrchestratorError::Invalid("content: the message is empty; write something".into()));
    }
    let record = match &incoming.session {
        Some(id) => shared.sessions.get_in(id, &incoming.context)?,
        None => shared.sessions.active(&incoming.context, &incoming.sender)?,
    };
    if record.status == SessionStatus::Archived {
        return Err(SessionError::Archived(record.id).into());
    }
    // Turns of a session run one after another. A message that arrives while one runs is
    // recorded in turns.json at once and appended when its turn starts, after the reply before it.
    let queued = Queued {
        content: incoming.content,
        channel: incoming.channel,
        sender: incoming.sender,
        parent: incoming.parent,
    };
    let lock = shared.turns.session_lock(&record.id);
    let entry = crate::sessions::new_entry_id();
    let (guard, queued) = match lock.try_lock_owned() {
        Ok(guard) => {
            shared.sessions.append_as(&record.id, Some(entry.clone()), queued.parent.as_deref(), queued.entry())?;
            (Some(guard), None)
        }
        Err(_busy) => (None, Some(queued)),
    };
    if record.status != SessionStatus::Active {
        prewarm(shared, &record);
    }
    let turn = new_id("t-");
    let correlation_id = uuid::Uuid::new_v4().to_string();
    shared.turns.update(|inflight| {
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
    let accepted = Accepted { session: record.id.clone(), entry, turn, correlation_id };
    let span = tracing::info_span!("turn", turn = %accepted.turn, correlation_id = %accepted.correlation_id, session = %accepted.session);
    tokio::spawn(run_turn(shared.clone(), record, accepted.clone(), guard, queued).instrument(span));
    Ok(accepted)
}

/// Starts the session's tool container ahead of its first tool call (issue 5's pre-warming),
/// in the background: a session that becomes active usually delegates soon.
pub fn prewarm(shared: &Arc<Shared>, record: &SessionRecord) {
    if shared.loaded.config.tools.mode != crate::config::ToolMode::Warm {
        return;
    }
    let shared = shared.clone();
    let (session, context) = (record.id.clone(), record.context());
    tokio::spawn(async move {
        if let Err(error) = shared.tools.prewarm(&session, &context).await {
            tracing::warn!(session, error = %baaaht_proto::error_chain(&error), "cannot pre-warm the tool container");
        }
    });
}

async fn run_turn(
    shared: Arc<Shared>,
    record: SessionRecord,
    accepted: Accepted,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    queued: Option<Queued>,
) {
    let _one_at_a_time = match guard {
        Some(guard) => guard,
        None => shared.turns.session_lock(&accepted.session).lock_owned().await,
    };
    let started = Instant::now();
    let outcome = match queued {
        None => assistant_turn(&shared, &record, &accepted).await,
        Some(queued) => {
            match shared.sessions.append_as(
                &accepted.session,
                Some(accepted.entry.clone()),
                queued.parent.as_deref(),
                queued.entry(),
            ) {
                Ok(_) => {
                    shared.turns.update(|inflight| {
                        if let Some(turn) = inflight.turns.get_mut(&accepted.turn) {
                            turn.queued = None;
                        }
                    });
                    assistant_turn(&shared, &record, &accepted).await
                }
                Err(error) => Err(format!("the message could not be recorded: {error}")),
            }
        }
    };
    let tail = shared.turns.tail(&accepted.turn);
    shared.turns.tails.lock().unwrap_or_else(PoisonError::into_inner).remove(&accepted.turn);
    let ids = (accepted.session.as_str(), accepted.turn.as_str(), accepted.correlation_id.as_str());
    let context = record.context();
    let (role, content, failed) = match outcome {
        Ok(result) if !result.is_error => ("assistant", result.content, false),
        Ok(result) => ("system", format!("The reply failed: {}", result.content), true),
        Err(message) => ("system", format!("The reply failed: {message}"), true),
    };
    let appended = shared.sessions.append(
        &accepted.session,
        tail.as_deref(),
        NewEntry::Message { role, content: content.clone(), channel: None, sender: None },
    );
    match appended {
        Ok(entry_id) if !failed => {
            tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "turn answered");
            shared.events.publish(
                &context,
                event(ids, v1::orchestrator_event::Event::Reply(v1::ReplyComplete { entry_id, content })),
            );
        }
        Ok(_) => {
            tracing::warn!(%content, "turn failed");
            shared.events.publish(
                &context,
                event(ids, v1::orchestrator_event::Event::Error(v1::TurnError { message: content })),
            );
        }
        Err(error) => {
            let message = format!("the reply could not be recorded: {error}");
            tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot record the reply");
            shared
                .events
                .publish(&context, event(ids, v1::orchestrator_event::Event::Error(v1::TurnError { message })));
        }
    }
    shared.turns.update(|inflight| {
        inflight.turns.remove(&accepted.turn);
    });
}

async fn assistant_turn(
    shared: &Arc<Shared>,
    record: &SessionRecord,
    accepted: &Accepted,
) -> Result<v1::TurnResult, String> {
    shared.turns.set_tail(&accepted.turn, &accepted.entry);
    let read = shared.sessions.read(&accepted.session).map_err(|error| error.to_string())?;
    for corrupt in &read.corrupt {
        tracing::warn!(line = corrupt.line, reason = %corrupt.reason, "session log line skipped");
    }
    let branch = read.branch(&accepted.entry).map_err(|error| error.to_string())?;
    let group = record.group_id.is_some();
    let mut messages = history(&branch, group);
    let current = shared.sessions.get(&accepted.session).unwrap_or_else(|| record.clone());
    let model = current.model.clone().unwrap_or_else(|| agent_settings(shared, Role::Assistant).model.0);
    // Near the model's context window: what came before this message becomes a summary first.
    let estimate: usize = messages.iter().map(message_chars).sum::<usize>() / 4;
    if estimate > context_window(&model) * 8 / 10 {
        tracing::info!(estimated_tokens = estimate, model = %model, "compacting the session before the turn");
        let before: Vec<Entry> = branch[..branch.len().saturating_sub(1)].to_vec();
        match summarize(shared, record, &before, &model, &accepted.correlation_id).await {
            Ok(summary) => {
                let compacted = before.iter().skip(1).map(|entry| entry.id().to_string()).collect();
                let entry = NewEntry::Compaction { summary, compacted };
                let id = shared
                    .sessions
                    .append(&accepted.session, Some(&accepted.entry), entry)
                    .map_err(|e| e.to_string())?;
                shared.turns.set_tail(&accepted.turn, &id);
                let read = shared.sessions.read(&accepted.session).map_err(|error| error.to_string())?;
                messages = history(&read.branch(&id).map_err(|error| error.to_string())?, group);
            }
            Err(error) => tracing::warn!(%error, "automatic compaction failed; the turn goes on uncompacted"),
        }
    }
    let turn = v1::AgentTurn {
        turn_id: accepted.turn.clone(),
        correlation_id: accepted.correlation_id.clone(),
        messages,
        model: current.model.unwrap_or_default(),
    };
    let config = agent_settings(shared, Role::Assistant);
    let work = Work {
        live: Live {
            session: accepted.session.clone(),
            context: record.context(),
            role: Role::Assistant,
            turn_id: accepted.turn.clone(),
            correlation_id: accepted.correlation_id.clone(),
            user_turn: accepted.turn.clone(),
        },
        turn,
        timeout: Duration::from_secs(config.timeout),
    };
    shared.agents.run(work).await.map_err(|error| error.to_string())
}

fn message_chars(message: &v1::LlmMessage) -> usize {
    message
        .content
        .iter()
        .map(|block| match &block.block {
            Some(v1::content_block::Block::Text(text)) => text.len(),
            _ => 0,
        })
        .sum()
}

/// The context window (tokens) of `model` ("provider/model"), as far as the name tells.
pub fn context_window(model: &str) -> usize {
    let name = model.rsplit('/').next().unwrap_or(model);
    if name.starts_with("claude") {
        200_000
    } else if name.starts_with("gpt-4.1") {
        1_000_000
    } else if name.starts_with("gpt-") || name.starts_with("o1") || name.starts_with("o3") || name.starts_with("o4") {
        128_000
    } else if name.starts_with("gemini") {
        1_000_000
    } else {
        32_000
    }
}

const SUMMARY_REQUEST: &str = "Summarize the conversation so far for your own later use: who said what that still \
    matters, facts learnt, decisions, open questions and tasks in progress, names, paths and numbers. Write the \
    summary only, in plain sentences.";

/// Asks `model` (through the LLM gateway) for a summary of `branch`.
async fn summarize(
    shared: &Arc<Shared>,
    record: &SessionRecord,
    branch: &[Entry],
    model: &str,
    correlation_id: &str,
) -> Result<String, OrchestratorError> {
    let mut messages = history(branch, record.group_id.is_some());
    if messages.is_empty() {
        return Err(OrchestratorError::Invalid("the session has nothing to compact yet".into()));
    }
    let ask = v1::ContentBlock { block: Some(v1::content_block::Block::Text(SUMMARY_REQUEST.into())) };
    match messages.last_mut() {
        Some(last) if last.role == "user" => last.content.push(ask),
        _ => messages.push(v1::LlmMessage { role: "user".into(), content: vec![ask] }),
    }
    let request = v1::LlmRequest {
        model: model.to_string(),
        system: "You write faithful, compact summaries of conversations.".into(),
        messages,
        max_tokens: Some(2048),
        ..v1::LlmRequest::default()
    };
    let completion = v1::LlmCompletionRequest {
        request: Some(request),
        session_id: record.id.clone(),
        user_id: record.context().to_string(),
        correlation_id: correlation_id.to_string(),
    };
    let (mut client, _) = shared.llm.client(None).await.map_err(|error| OrchestratorError::Model(error.to_string()))?;
    let mut events = client
        .stream_completion(completion)
        .await
        .map_err(|status| OrchestratorError::Model(status.message().to_string()))?
        .into_inner();
    let mut summary = String::new();
    while let Some(event) =
        events.message().await.map_err(|status| OrchestratorError::Model(status.message().to_string()))?
    {
        use v1::llm_event::Event;
        match event.event.and_then(|event| event.event) {
            Some(Event::TextDelta(delta)) => summary.push_str(&delta.text),
            Some(Event::Error(error)) => return Err(OrchestratorError::Model(error.message)),
            _ => {}
        }
    }
    if summary.trim().is_empty() {
        return Err(OrchestratorError::Model("the summary came back empty".into()));
    }
    Ok(summary.trim().to_string())
}

/// Compacts session `id` on request: its current branch becomes a summary (a compaction
/// entry; the history stays in the tree). Waits for a turn in progress to end.
pub async fn compact(shared: &Arc<Shared>, id: &str) -> Result<String, OrchestratorError> {
    let record = shared.sessions.get(id).ok_or_else(|| SessionError::NotFound(id.to_string()))?;
    if record.status == SessionStatus::Archived {
        return Err(SessionError::Archived(id.to_string()).into());
    }
    let _no_turn_meanwhile = shared.turns.session_lock(id).lock_owned().await;
    let record = shared.sessions.get(id).unwrap_or(record);
    let leaf = record
        .leaf
        .clone()
        .ok_or_else(|| OrchestratorError::Invalid("the session has nothing to compact yet".into()))?;
    let branch = shared.sessions.read(id)?.branch(&leaf).map_err(SessionError::from)?;
    let model = record.model.clone().unwrap_or_else(|| agent_settings(shared, Role::Assistant).model.0);
    let summary = summarize(shared, &record, &branch, &model, &uuid::Uuid::new_v4().to_string()).await?;
    let compacted = branch.iter().skip(1).map(|entry| entry.id().to_string()).collect();
    let entry = shared.sessions.append(id, Some(&leaf), NewEntry::Compaction { summary, compacted })?;
    tracing::info!(session = id, entry = %entry, "session compacted");
    Ok(entry)
}

fn agent_settings(shared: &Shared, role: Role) -> crate::config::AgentSettings {
    shared.loaded.config.agents.settings(role)
}

/// The conversation the Assistant sees for a branch (root → the new user message): user
/// messages, its own replies and its delegations (task and result, never the delegated
/// agent's own steps). A compaction on the branch replaces what it summarised.
pub fn history(branch: &[Entry], group: bool) -> Vec<v1::LlmMessage> {
    let compaction = branch.iter().rev().find_map(|entry| match entry {
        Entry::Compaction { summary, compacted_entry_ids, .. } => Some((summary.clone(), compacted_entry_ids.clone())),
        _ => None,
    });
    let mut turns: Vec<(&'static str, String)> = vec![];
    let skipped = compaction.as_ref().map(|(_, ids)| ids.as_slice()).unwrap_or_default();
    if let Some((summary, _)) = &compaction {
        turns.push(("user", format!("(A summary of the earlier conversation.)\n{summary}")));
    }
    for entry in branch {
        if skipped.iter().any(|id| id == entry.id()) {
            continue;
        }
        match entry {
            Entry::Message { message, .. } if message.role == "user" => {
                let text = match (&message.sender_id, group) {
                    (Some(sender), true) => format!("{sender}: {}", message.content),
                    _ => message.content.clone(),
                };
                turns.push(("user", text));
            }
            Entry::Message { message, .. } if message.role == "assistant" => {
                turns.push(("assistant", message.content.clone()))
            }
            Entry::Delegate { agent, task, result, is_error, .. } => {
                let outcome = if *is_error { "failed" } else { "answered" };
                turns.push((
                    "assistant",
                    format!("(I delegated to the {agent}: {task})\n(The {agent} {outcome}: {result})"),
                ));
            }
            _ => {}
        }
    }
    // Consecutive texts of one side become one message; the model sees user first and last.
    let mut messages: Vec<v1::LlmMessage> = vec![];
    for (role, text) in turns {
        let block = v1::ContentBlock { block: Some(v1::content_block::Block::Text(text)) };
        if messages.is_empty() && role == "assistant" {
            continue;
        }
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.push(block),
            _ => messages.push(v1::LlmMessage { role: role.into(), content: vec![block] }),
        }
    }
    messages
}

/// The `delegate` tool of an Assistant (its container `identity`): runs the task in a
/// container of the target role of the same session and returns its answer; a background
/// task answers at once and delivers its result later as a new message.
pub async fn delegate(
    shared: &Arc<Shared>,
    identity: &ContainerIdentity,
    request: v1::DelegateRequest,
) -> Result<v1::DelegateResponse, OrchestratorError> {
    let live = shared.agents.live(&identity.name).ok_or(OrchestratorError::NoTurn)?;
    let role = match crate::convert::role_of(request.agent) {
        Ok(Some(role @ (Role::Worker | Role::Researcher | Role::Coder | Role::Memory))) => role,
        _ => {
            return Err(OrchestratorError::Invalid(
                "agent: delegate to the worker, researcher, coder or memory agent".into(),
            ))
        }
    };
    if request.task.trim().is_empty() {
        return Err(OrchestratorError::Invalid("task: describe what the agent should do".into()));
    }
    let mut text = format!("Task: {}", request.task.trim());
    if !request.context.trim().is_empty() {
        text.push_str(&format!("\n\nContext: {}", request.context.trim()));
    }
    if !request.response_format.trim().is_empty() {
        text.push_str(&format!("\n\nAnswer in this form: {}", request.response_format.trim()));
    }
    let background = request.priority == v1::DelegatePriority::Background as i32;
    let ids = (live.session.clone(), live.turn_id.clone(), live.correlation_id.clone());
    let progress = |state: &str, result: &str| {
        let kind = v1::orchestrator_event::Event::Delegation(v1::DelegationProgress {
            agent: crate::convert::role_ref(role) as i32,
            task: request.task.clone(),
            state: state.into(),
            result: result.into(),
        });
        shared.events.publish(&live.context, event((&ids.0, &ids.1, &ids.2), kind));
    };
    progress("started", "");
    tracing::info!(agent = role.as_str(), background, "delegating");
    let task = Task { live: live.clone(), role, text, summary: request.task.clone() };
    if background {
        let shared = shared.clone();
        let span = tracing::Span::current();
        tokio::spawn(
            async move {
                let (result, is_error, _) = run_task(&shared, &task).await;
                finish_background(&shared, &task, result, is_error);
            }
            .instrument(span),
        );
        return Ok(v1::DelegateResponse {
            result: format!(
                "The {role} is working on it in the background; its result will arrive as a new message in this \
                 conversation. Tell the user so."
            ),
            is_error: false,
            background: true,
            duration_ms: 0,
        });
    }
    let (result, is_error, elapsed) = run_task(shared, &task).await;
    let parent = shared.turns.tail(&live.user_turn);
    let entry = NewEntry::Delegate {
        agent: role.as_str().into(),
        task: request.task.clone(),
        result: result.clone(),
        is_error,
    };
    match shared.sessions.append(&live.session, parent.as_deref(), entry) {
        Ok(id) => shared.turns.set_tail(&live.user_turn, &id),
        Err(error) => tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot record a delegation"),
    }
    progress(if is_error { "failed" } else { "finished" }, &result);
    Ok(v1::DelegateResponse { result, is_error, background: false, duration_ms: elapsed.as_millis() as u64 })
}

#[derive(Debug, Clone)]
struct Task {
    live: Live,
    role: Role,
    text: String,
    summary: String,
}

async fn run_task(shared: &Arc<Shared>, task: &Task) -> (String, bool, Duration) {
    let started = Instant::now();
    let settings = agent_settings(shared, task.role);
    let turn_id = new_id("d-");
    let work = Work {
        live: Live { role: task.role, turn_id: turn_id.clone(), ..task.live.clone() },
        turn: v1::AgentTurn {
            turn_id,
            correlation_id: task.live.correlation_id.clone(),
            messages: vec![v1::LlmMessage {
                role: "user".into(),
                content: vec![v1::ContentBlock { block: Some(v1::content_block::Block::Text(task.text.clone())) }],
            }],
            model: String::new(),
        },
        timeout: Duration::from_secs(settings.timeout),
    };
    let (result, is_error) = match shared.agents.run(work).await {
        Ok(answer) => (answer.content, answer.is_error),
        Err(error) => (format!("the {} could not finish: {error}", task.role), true),
    };
    tracing::info!(
        agent = task.role.as_str(),
        is_error,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "delegation done"
    );
    (result, is_error, started.elapsed())
}

/// A background delegation's result: a delegate entry and a message in the session, sent to
/// the context's channels.
fn finish_background(shared: &Arc<Shared>, task: &Task, result: String, is_error: bool) {
    let live = &task.live;
    let entry = NewEntry::Delegate {
        agent: task.role.as_str().into(),
        task: task.summary.clone(),
        result: result.clone(),
        is_error,
    };
    let content = if is_error {
        format!("The background task for the {} failed: {result}", task.role)
    } else {
        format!("The {} finished the background task \"{}\":\n\n{result}", task.role, task.summary)
    };
    let recorded = shared.sessions.append(&live.session, None, entry).and_then(|_| {
        shared.sessions.append(
            &live.session,
            None,
            NewEntry::Message { role: "assistant", content: content.clone(), channel: None, sender: None },
        )
    });
    if let Err(error) = recorded {
        tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot record a background result");
    }
    let message = v1::OutboundMessage {
        target_context: Some(crate::convert::context_ref(&live.context)),
        content,
        reply_to_message_id: String::new(),
        metadata: [("background".to_string(), task.role.as_str().to_string())].into_iter().collect(),
    };
    shared.events.publish(
        &live.context,
        event((&live.session, &live.turn_id, &live.correlation_id), v1::orchestrator_event::Event::Message(message)),
    );
}

/// Ends every turn a previous daemon left unfinished with a message in its session saying so.
pub fn recover(shared: &Shared) -> usize {
    let interrupted: Vec<(String, InFlightTurn)> = shared
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
            let recorded = shared
                .sessions
                .read(&inflight.session)
                .is_ok_and(|read| read.entries.iter().any(|entry| entry.id() == inflight.user_entry));
            if !recorded {
                let appended = shared.sessions.append_as(
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
        let appended = shared.sessions.append(
            &inflight.session,
            None,
            NewEntry::Message { role: "system", content: content.clone(), channel: None, sender: None },
        );
        match appended {
            Ok(_) => tracing::warn!(turn, session = %inflight.session, "ended a turn interrupted by a restart"),
            Err(error) => {
                tracing::error!(turn, error = %baaaht_proto::error_chain(&error), "cannot end an interrupted turn")
            }
        }
        if let Some(record) = shared.sessions.get(&inflight.session) {
            shared.events.publish(
                &record.context(),
                event(
                    (&inflight.session, turn, &inflight.correlation_id),
                    v1::orchestrator_event::Event::Error(v1::TurnError { message: content }),
                ),
            );
        }
    }
    if !interrupted.is_empty() {
        shared.turns.update(|inflight| inflight.turns.clear());
    }
    interrupted.len()
}

/// What RegisterAgent answers: the role's settings, identity, context, memory and skills.
pub fn agent_config(shared: &Shared, identity: &ContainerIdentity) -> v1::AgentConfig {
    let role = identity.role;
    let settings = agent_settings(shared, role);
    let root = shared.data_dir.root();
    let read = |path: PathBuf| std::fs::read_to_string(path).unwrap_or_default();
    let agent_dir = root.join("agents").join(role.as_str());
    let context = &identity.context;
    let (own, profile) = match context.kind {
        ContextKind::User => (root.join("users").join(&context.id), "USER.md"),
        ContextKind::Group => (root.join("groups").join(&context.id), "GROUP.md"),
    };
    let memories = if role == Role::Assistant { memories_of(&own.join("memory")) } else { vec![] };
    let skills = match role {
        Role::Assistant | Role::Worker | Role::Researcher | Role::Coder => {
            crate::skills::manifest(root, &shared.loaded.config.skills.directories, context)
                .into_iter()
                .map(|found| found.summary())
                .collect()
        }
        _ => vec![],
    };
    let tools: Vec<&str> = crate::policy::Policy::agent_tools_of(role)
        .iter()
        .chain(crate::policy::Policy::tools_of(role))
        .copied()
        .collect();
    let session_model = shared.sessions.get(&identity.session_id).and_then(|record| record.model);
    v1::AgentConfig {
        role: crate::convert::role_ref(role) as i32,
        model: match (role, session_model) {
            (Role::Assistant, Some(model)) => model,
            _ => settings.model.0.clone(),
        },
        max_iterations: settings.max_iterations,
        temperature: settings.temperature.map(|t| t.0 as f32),
        timeout_seconds: u32::try_from(settings.timeout).unwrap_or(u32::MAX),
        soul: read(agent_dir.join("SOUL.md")),
        identity: read(agent_dir.join("IDENTITY.md")),
        context_profile: read(own.join(profile)),
        memories,
        skills: Some(v1::SkillManifest { skills }),
        tools: tools
            .into_iter()
            .map(|name| v1::ToolDefinition { name: name.into(), ..v1::ToolDefinition::default() })
            .collect(),
        session_id: identity.session_id.clone(),
        context: Some(crate::convert::context_ref(context)),
    }
}

/// The most recent memories of a context, one line each, for the Assistant's context.
fn memories_of(folder: &std::path::Path) -> Vec<String> {
    const MOST: usize = 20;
    const LONGEST: usize = 500;
    if !folder.is_dir() {
        return vec![];
    }
    let store = crate::memory::MemoryStore::new(folder.to_path_buf());
    let mut entries = match store.list(None) {
        Ok(entries) => entries,
        Err(error) => {
            tracing::warn!(error = %baaaht_proto::error_chain(&error), "cannot read memories");
            return vec![];
        }
    };
    entries.sort_by_key(|entry| std::cmp::Reverse(entry.updated_at));
    entries
        .into_iter()
        .take(MOST)
        .map(|entry| {
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
        })
        .collect()
}

/// Archives session `id`: no new message is taken from now on; then, with
/// `sessions.archival.memory_extraction`, the context's Memory agent reads the conversation and
/// saves what is worth keeping (in the background); the session's agent containers go.
pub async fn archive(shared: &Arc<Shared>, id: &str) -> Result<SessionRecord, SessionError> {
    let record = shared.sessions.set_status(id, SessionStatus::Archived)?;
    if shared.loaded.config.sessions.archival.memory_extraction {
        let (shared, record) = (shared.clone(), record.clone());
        let span = tracing::info_span!("archival", session = %record.id);
        tokio::spawn(
            async move {
                extract_memories(&shared, &record).await;
                shared.agents.reap_idle(std::slice::from_ref(&record.id)).await;
                shared.tools.release(&record.id).await;
            }
            .instrument(span),
        );
    } else {
        shared.agents.reap_idle(std::slice::from_ref(&record.id)).await;
        shared.tools.release(&record.id).await;
    }
    Ok(record)
}

/// The most of a conversation the Memory agent reads at archival (its end is kept).
const MOST_TRANSCRIPT: usize = 100 * 1024;

async fn extract_memories(shared: &Arc<Shared>, record: &SessionRecord) {
    let read = match shared.sessions.read(&record.id) {
        Ok(read) => read,
        Err(error) => {
            tracing::warn!(error = %baaaht_proto::error_chain(&error), "cannot read the session for memory extraction");
            return;
        }
    };
    let branch = match &record.leaf {
        Some(leaf) => read.branch(leaf).unwrap_or_else(|_| read.entries.clone()),
        None => read.entries.clone(),
    };
    let mut transcript = String::new();
    for entry in &branch {
        match entry {
            Entry::Message { id, message, .. } if message.role != "system" => {
                let who = match &message.sender_id {
                    Some(sender) if message.role == "user" => format!("{} ({sender})", message.role),
                    _ => message.role.clone(),
                };
                transcript.push_str(&format!("[{id}] {who}: {}\n", message.content));
            }
            Entry::Delegate { agent, task, result, .. } => {
                transcript.push_str(&format!("(the assistant asked the {agent}: {task} → {result})\n"));
            }
            _ => {}
        }
    }
    let said_something =
        branch.iter().any(|entry| matches!(entry, Entry::Message { message, .. } if message.role == "user"));
    if !said_something {
        return;
    }
    if transcript.len() > MOST_TRANSCRIPT {
        let mut cut = transcript.len() - MOST_TRANSCRIPT;
        while !transcript.is_char_boundary(cut) {
            cut += 1;
        }
        transcript = format!("(earlier part left out)\n{}", &transcript[cut..]);
    }
    let whom = if record.group_id.is_some() { "group" } else { "user" };
    let text = format!(
        "This conversation is being archived. Save what is worth remembering long-term about the {whom} — \
         preferences, facts, decisions, ongoing projects — with memory_write, one fact per key. Search first \
         (memory_search) so that you do not repeat what is remembered already. Save nothing if nothing is \
         worth keeping. Answer with one line saying what you saved.\n\nThe conversation:\n{transcript}"
    );
    let correlation_id = uuid::Uuid::new_v4().to_string();
    let task = Task {
        live: Live {
            session: record.id.clone(),
            context: record.context(),
            role: Role::Memory,
            turn_id: String::new(),
            correlation_id,
            user_turn: format!("archive-{}", record.id),
        },
        role: Role::Memory,
        text,
        summary: "memory extraction at archival".into(),
    };
    let (result, is_error, elapsed) = run_task(shared, &task).await;
    if is_error {
        tracing::warn!(%result, "memory extraction failed");
    } else {
        tracing::info!(%result, elapsed_ms = elapsed.as_millis() as u64, "memories extracted");
    }
}

/// Idles and archives quiet sessions and removes agent containers past their keep-warm
/// window, until `cancel`.
pub async fn supervise(shared: Arc<Shared>, cancel: tokio_util::sync::CancellationToken) {
    let every = Duration::from_secs(5);
    let mut ticks: u64 = 0;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let sessions = &shared.loaded.config.sessions;
        let swept =
            shared.sessions.sweep(state::now_seconds(), sessions.idle_after, sessions.archival.inactivity_timeout);
        let due = match swept {
            Ok((idled, due)) => {
                for session in &idled {
                    tracing::info!(session, "session idle");
                }
                due
            }
            Err(error) => {
                tracing::warn!(error = %baaaht_proto::error_chain(&error), "cannot update session states");
                vec![]
            }
        };
        for session in &due {
            match archive(&shared, session).await {
                Ok(_) => tracing::info!(session, "session archived after inactivity"),
                Err(error) => tracing::warn!(session, error = %baaaht_proto::error_chain(&error), "cannot archive"),
            }
        }
        shared.agents.reap_idle(&[]).await;
        ticks += 1;
        if ticks.is_multiple_of(12) {
            let memory = shared.memory.clone();
            if let Err(error) = tokio::task::spawn_blocking(move || memory.expire_all()).await {
                tracing::error!(%error, "memory expiry failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sessions::log::Message;

    fn message(id: &str, parent: &str, role: &str, content: &str, sender: Option<&str>) -> Entry {
        Entry::Message {
            id: id.into(),
            parent: parent.into(),
            timestamp: "t".into(),
            message: Message {
                role: role.into(),
                content: content.into(),
                channel_type: None,
                sender_id: sender.map(str::to_string),
            },
        }
    }

    fn texts(messages: &[v1::LlmMessage]) -> Vec<(String, Vec<String>)> {
        messages
            .iter()
            .map(|m| {
                let texts = m
                    .content
                    .iter()
                    .filter_map(|b| match &b.block {
                        Some(v1::content_block::Block::Text(text)) => Some(text.clone()),
                        _ => None,
                    })
                    .collect();
                (m.role.clone(), texts)
            })
            .collect()
    }

    #[test]
    fn history_keeps_delegations_and_names_group_senders() {
        let branch = vec![
            message("m1", "s", "user", "fix the build", Some("alice")),
            Entry::Delegate {
                id: "d1".into(),
                parent: "m1".into(),
                timestamp: "t".into(),
                agent: "coder".into(),
                task: "fix it".into(),
                result: "fixed".into(),
                is_error: false,
            },
            message("m2", "d1", "assistant", "Done.", None),
            message("x", "m2", "system", "The reply was interrupted", None),
            message("m3", "x", "user", "thanks", Some("bob")),
        ];
        let got = texts(&history(&branch, true));
        assert_eq!(
            got,
            vec![
                ("user".to_string(), vec!["alice: fix the build".to_string()]),
                (
                    "assistant".to_string(),
                    vec![
                        "(I delegated to the coder: fix it)\n(The coder answered: fixed)".to_string(),
                        "Done.".to_string()
                    ]
                ),
                ("user".to_string(), vec!["bob: thanks".to_string()]),
            ]
        );
    }

    #[test]
    fn history_starts_from_the_last_compaction() {
        let branch = vec![
            message("m1", "s", "user", "old question", None),
            message("m2", "m1", "assistant", "old answer", None),
            Entry::Compaction {
                id: "c1".into(),
                parent: "m2".into(),
                timestamp: "t".into(),
                summary: "they talked about old things".into(),
                compacted_entry_ids: vec!["m1".into(), "m2".into()],
            },
            message("m3", "c1", "user", "new question", None),
        ];
        let got = texts(&history(&branch, false));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1.len(), 2);
        assert!(got[0].1[0].contains("they talked about old things"));
        assert_eq!(got[0].1[1], "new question");
    }
}
