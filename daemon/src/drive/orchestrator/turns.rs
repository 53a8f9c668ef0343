//! One turn of a session's Assistant: the user message (queued behind the turn before it, if
//! any) → the Assistant's answer → the reply in the session and on every channel.

use super::*;

/// What the session records, and its channels show, for a turn the user stopped.
pub(super) const CANCELLED: &str = "The turn was cancelled.";
/// What a person is told when their Assistant cannot start because the container engine is
/// away (none, stopped, restarting or hung; the operator's log says which).
const ENGINE_DOWN_TURN: &str = "baaaht could not answer: the container engine it runs its assistants in is not \
                                answering. Your message is kept; ask again in a few minutes, or tell the person \
                                who runs baaaht.";

/// Why a turn has no answer: what follows "The reply failed: " in the session.
#[derive(Debug, thiserror::Error)]
enum ReplyError {
    #[error("{CANCELLED}")]
    Cancelled,
    #[error("{}", crate::base::state::DISK_FULL)]
    DiskFull,
    /// The why is said in the message and is no source: a chain printed would say it twice.
    #[error("the message could not be recorded: {0}")]
    Unrecorded(SessionError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Agent(#[from] crate::work::agents::AgentError),
    #[error("the conversation no longer fits the model's context window, and compacting it failed: {0}")]
    Compaction(OrchestratorError),
}

pub(super) async fn run_turn(
    orchestrator: Arc<Orchestrator>,
    record: SessionRecord,
    accepted: Accepted,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    queued: Option<Queued>,
    warm: bool,
) {
    let _one_at_a_time = match guard {
        Some(guard) => guard,
        None => orchestrator.turns.session_lock(&accepted.session).lock_owned().await,
    };
    let started = Instant::now();
    let cancel = orchestrator.turns.cancel_token(&accepted.turn);
    let (shared_ref, record_ref, accepted_ref) = (&orchestrator, &record, &accepted);
    let answer = |cancel: CancellationToken| async move {
        let _place = match shared_ref.turns.admit_turn(&cancel).await {
            super::Admission::Place(place) => place,
            super::Admission::Cancelled => return Err(ReplyError::Cancelled),
            super::Admission::Busy(sentence) => return Ok(crate::work::agents::TurnOutcome::refusal(sentence)),
        };
        if cancel.is_cancelled() {
            return Err(ReplyError::Cancelled);
        }
        if warm {
            prewarm(shared_ref, record_ref);
        }
        assistant_turn(shared_ref, record_ref, accepted_ref, cancel).await
    };
    let outcome = match queued {
        None => answer(cancel.clone()).await,
        Some(queued) => {
            match orchestrator.sessions.append_as(
                &accepted.session,
                Some(accepted.entry.clone()),
                queued.parent.as_deref(),
                queued.entry(),
            ) {
                Ok(_) => {
                    orchestrator.turns.update(|inflight| {
                        if let Some(turn) = inflight.turns.get_mut(&accepted.turn) {
                            turn.queued = None;
                        }
                    });
                    answer(cancel.clone()).await
                }
                Err(error) if crate::base::state::is_disk_full(&error) => Err(ReplyError::DiskFull),
                Err(error) => Err(ReplyError::Unrecorded(error)),
            }
        }
    };
    let tail = orchestrator.turns.tail(&accepted.turn);
    orchestrator.turns.tails.lock().unwrap_or_else(PoisonError::into_inner).remove(&accepted.turn);
    let ids = (accepted.session.as_str(), accepted.turn.as_str(), accepted.correlation_id.as_str());
    let context = record.context();
    let written = orchestrator.turns.take_written(&accepted.turn);
    orchestrator.turns.take_context_exceeded(&accepted.turn);
    // Whether a failure's sentence is for the user (else it is the operator's detail).
    let (role, content, failed, for_users) = match outcome {
        // What was written before the stop stays in the session, marked as stopped (the
        // channels, which showed it as it came, are told the turn was cancelled).
        _ if cancel.is_cancelled() && !written.trim().is_empty() => {
            ("assistant", format!("{}\n\n{}", written.trim_end(), baaaht_proto::STOPPED_MARK), true, true)
        }
        _ if cancel.is_cancelled() => ("system", CANCELLED.to_string(), true, true),
        Ok(result) if !result.is_error => ("assistant", result.content, false, false),
        // The daemon's refusal (a budget's limit, a full disk, no engine, no room): its sentence
        // is what the user reads.
        Ok(result) if result.refused => ("system", result.content, true, true),
        Ok(result) => ("system", format!("The reply failed: {}", result.content), true, false),
        Err(message) => ("system", format!("The reply failed: {message}"), true, false),
    };
    let appended = orchestrator.sessions.append(
        &accepted.session,
        tail.as_deref(),
        NewEntry::Message { role, content: content.clone(), channel: None, sender: None, attachments: vec![] },
    );
    // The turn is over before anyone hears of it: a transcript read after its answer never
    // lists it as running.
    orchestrator.turns.update(|inflight| {
        inflight.turns.remove(&accepted.turn);
    });
    orchestrator.turns.cancels.lock().unwrap_or_else(PoisonError::into_inner).remove(&accepted.turn);
    // What came in between is not kept (the turn no longer runs, so nothing more is).
    orchestrator.turns.wrote_nothing(&accepted.turn);
    match appended {
        Ok(entry_id) if !failed => {
            tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "turn answered");
            let aloud = crate::drive::orchestrator::voice::answers_aloud(&orchestrator, accepted.spoken);
            let spoken = aloud.then(|| content.clone());
            orchestrator.events.publish(&context, event(ids, Kind::Reply { entry_id, content }));
            if let Some(content) = spoken {
                crate::drive::orchestrator::voice::speak_answer(&orchestrator, context.clone(), ids, content);
            }
        }
        Ok(_) => {
            let content = if cancel.is_cancelled() { CANCELLED.to_string() } else { content };
            tracing::warn!(%content, "turn failed");
            orchestrator.events.publish(&context, event(ids, Kind::TurnError { message: content, for_users }));
        }
        Err(error) => {
            tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot record the reply");
            let (message, for_users) = if crate::base::state::is_disk_full(&error) {
                (crate::base::state::DISK_FULL_REPLY.to_string(), true)
            } else {
                (format!("the reply could not be recorded: {error}"), false)
            };
            orchestrator.events.publish(&context, event(ids, Kind::TurnError { message, for_users }));
        }
    }
    // Its folders are looked at anew by the next turn that writes, and what undo keeps is
    // brought within its settings (still under the session's lock: no undo meanwhile).
    let (undo, turn) = (orchestrator.undo.clone(), accepted.turn.clone());
    // silent-ok: a blocking task that panicked has logged why.
    let _ = tokio::task::spawn_blocking(move || undo.ended(&turn)).await;
}

/// Reads the pictures the turn shows the model ([`wanted_images`]): the copies kept when they
/// were shared (never the workspace, which the agents write in); for one that cannot be shown
/// the model is told why.
async fn read_images(orchestrator: &Arc<Orchestrator>, session: &str, branch: &[Entry]) -> Images {
    use super::history::PictureError;
    use crate::store::uploads::{MAX_PICTURE_BYTES, PICTURE_TYPES};
    let wanted = super::history::wanted_images(branch);
    if wanted.is_empty() {
        return Images::new();
    }
    let (workspaces, session) = (orchestrator.workspaces.clone(), session.to_string());
    let read = tokio::task::spawn_blocking(move || {
        let mut images = Images::new();
        for attachment in wanted {
            let stored_in = if attachment.session.is_empty() { &session } else { &attachment.session };
            let shown = match workspaces.shared(
                stored_in,
                crate::sandbox::workspace::Kept::Picture,
                &attachment.path,
                MAX_PICTURE_BYTES,
            ) {
                Ok(Some(bytes)) => match infer::get(&bytes).map(|kind| kind.mime_type()) {
                    Some(sniffed) if PICTURE_TYPES.contains(&sniffed) => Ok((sniffed.to_string(), bytes)),
                    _ => Err(PictureError::NotAPicture),
                },
                Ok(None) => Err(PictureError::TooLarge),
                Err(error) => {
                    tracing::warn!(path = %attachment.path, %error, "cannot read a kept picture");
                    Err(PictureError::Unreadable)
                }
            };
            if let Err(why) = &shown {
                let why = why.to_string();
                tracing::info!(path = %attachment.path, why, "an attached picture is not shown to the model");
            }
            images.insert(attachment.path, shown);
        }
        images
    });
    read.await.unwrap_or_else(|error| {
        tracing::warn!(%error, "reading the attached pictures failed");
        Images::new()
    })
}

async fn assistant_turn(
    orchestrator: &Arc<Orchestrator>,
    record: &SessionRecord,
    accepted: &Accepted,
    cancel: CancellationToken,
) -> Result<crate::work::agents::TurnOutcome, ReplyError> {
    orchestrator.turns.set_tail(&accepted.turn, &accepted.entry);
    orchestrator.taints.begin(&accepted.session, &accepted.turn);
    let read = orchestrator.sessions.read(&accepted.session)?;
    for corrupt in &read.corrupt {
        tracing::warn!(line = corrupt.line, reason = %corrupt.reason, "session log line skipped");
    }
    let branch = read.branch(&accepted.entry).map_err(SessionError::from)?;
    let live = Live {
        session: accepted.session.clone(),
        context: record.context(),
        role: Role::Assistant,
        turn_id: accepted.turn.clone(),
        correlation_id: accepted.correlation_id.clone(),
        user_turn: accepted.turn.clone(),
        entry: accepted.entry.clone(),
        asker: super::history::asker(&branch, &accepted.entry),
        speaks: true,
    };
    // In a group, other members' messages (and what they shared, and a summary of them) are
    // not the asker's words.
    if let Some(others) = super::history::other_senders(&branch, &accepted.entry).filter(|_| record.group_id.is_some())
    {
        let names = super::history::sender_names(orchestrator);
        let named: Vec<String> = others.iter().map(|sender| names(sender)).collect();
        let source = format!("messages and files of other members ({})", named.join(", "));
        orchestrator.taints.taint(&live, &source);
    }
    // Nor is what was said after a message whose turn read content from outside: the replies
    // and results of that turn are on the branch (or in the summary of it), with what they read.
    let earlier = branch.iter().map(Entry::id).filter(|id| *id != accepted.entry);
    if let Some(source) = orchestrator.taints.carried(earlier) {
        orchestrator.taints.taint(&live, &format!("{}{source}", crate::net::taint::EARLIER));
    }
    // Nor is what the Assistant remembers of others, or of content from outside.
    if let Some(source) = super::foreign_memories(orchestrator, &live) {
        orchestrator.taints.taint(&live, &source);
    }
    let names = super::history::sender_names(orchestrator);
    let group = record.group_id.is_some().then_some(&names as &(dyn Fn(&str) -> String + Sync));
    let current = orchestrator.sessions.get(&accepted.session).unwrap_or_else(|| record.clone());
    let settings = agent_settings(orchestrator, Role::Assistant);
    let model = current.model.clone().unwrap_or_else(|| settings.model.0.clone());
    // agents.assistant.vision speaks of the configured model, not of one the session switched to.
    let configured = current.model.as_deref().is_none_or(|chosen| chosen == settings.model.0);
    let vision = settings.vision.filter(|_| configured).unwrap_or_else(|| super::history::sees_images(&model));
    let images = if vision { read_images(orchestrator, &accepted.session, &branch).await } else { Images::new() };
    let mut messages = history(&branch, group, &images);
    // Near the model's context window (as its server or providers.yaml says, else its name):
    // what came before this message becomes a summary first.
    let window = super::history::window_of(orchestrator, &model).await;
    let estimate: usize = messages.iter().map(message_chars).sum::<usize>() / 4;
    if estimate > history_limit(window) {
        tracing::info!(estimated_tokens = estimate, window, model = %model, "compacting the session before the turn");
        match compact_before(orchestrator, record, accepted, &branch, &model, window).await {
            Ok(compacted) => messages = history(&compacted, group, &images),
            Err(error) => tracing::warn!(%error, "automatic compaction failed; the turn goes on uncompacted"),
        }
    }
    let answer = |messages: Vec<baaaht_llm::model::Message>| {
        let turn = crate::work::agents::Turn {
            now: super::now_for_agents(orchestrator),
            turn_id: accepted.turn.clone(),
            correlation_id: accepted.correlation_id.clone(),
            messages,
            model: current.model.clone().unwrap_or_default(),
            traceparent: crate::guard::telemetry::traceparent(),
        };
        let work =
            Work { live: live.clone(), turn, timeout: Duration::from_secs(settings.timeout), cancel: cancel.clone() };
        // The channels hear at once when the Assistant must start first (its words then take
        // seconds more); "thinking" follows when it asks its model.
        if !orchestrator.agents.waiting(&accepted.session, Role::Assistant) {
            let starting = Kind::Phase { agent: Role::Assistant, phase: "starting" };
            let ids = (accepted.session.as_str(), accepted.turn.as_str(), accepted.correlation_id.as_str());
            orchestrator.events.publish(&record.context(), super::event(ids, starting));
        }
        async move {
            match orchestrator.agents.run(work).await {
                // Said to the person as the daemon's sentence, as a budget's refusal is.
                Err(crate::work::agents::AgentError::DiskFull(_)) => {
                    Ok(crate::work::agents::TurnOutcome::refusal(crate::base::state::DISK_FULL_TURN.to_string()))
                }
                Err(crate::work::agents::AgentError::EngineDown(_)) => {
                    Ok(crate::work::agents::TurnOutcome::refusal(ENGINE_DOWN_TURN.to_string()))
                }
                ran => ran.map_err(ReplyError::from),
            }
        }
    };
    let sent: usize = messages.iter().map(message_chars).sum::<usize>() / 4;
    let result = answer(messages).await;
    // The provider said the history does not fit its window after all (a window no one told,
    // a long answer): compacted, the turn is tried once more, so the session never stays stuck.
    let failed = result.as_ref().map_or(true, |result| result.is_error);
    if !failed || !orchestrator.turns.take_context_exceeded(&accepted.turn) || cancel.is_cancelled() {
        return result;
    }
    // The window is smaller than was thought: no more than most of what was just refused.
    let window = window.min(sent * 7 / 10).max(256);
    tracing::info!(model = %model, window, "the provider's context window was exceeded: compacting and trying again");
    let compacted = compact_before(orchestrator, record, accepted, &branch, &model, window)
        .await
        .map_err(ReplyError::Compaction)?;
    orchestrator.turns.wrote_nothing(&accepted.turn);
    answer(history(&compacted, group, &images)).await
}

/// How many tokens of history a turn sends a model with a context `window` before what came
/// before is compacted: most of the window, less room for the instructions, the tools and the
/// answer, and never less than a quarter of it.
fn history_limit(window: usize) -> usize {
    (window * 8 / 10).saturating_sub(1000).max(window / 4)
}

/// Compacts what came before the turn's message on `branch` (a summary by `model`, of at
/// most what fits its `window`) and hangs the message's turn under it: the branch the model
/// then sees, ending with the message.
async fn compact_before(
    orchestrator: &Arc<Orchestrator>,
    record: &SessionRecord,
    accepted: &Accepted,
    branch: &[Entry],
    model: &str,
    window: usize,
) -> Result<Vec<Entry>, OrchestratorError> {
    let before = &branch[..branch.len().saturating_sub(1)];
    let summary = summarize(orchestrator, record, before, model, &accepted.correlation_id, window).await?;
    let compacted = before.iter().skip(1).map(|entry| entry.id().to_string()).collect();
    let entry = NewEntry::Compaction { summary, compacted, senders: super::history::senders(before) };
    let id = orchestrator.sessions.append(&accepted.session, Some(&accepted.entry), entry)?;
    orchestrator.turns.set_tail(&accepted.turn, &id);
    let read = orchestrator.sessions.read(&accepted.session)?;
    read.branch(&id).map_err(|error| SessionError::from(error).into())
}
