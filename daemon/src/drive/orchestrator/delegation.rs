//! The Assistant's `delegate` tool: a task for a Worker, Researcher, Coder or Memory container
//! of the same session, answered at once or, in the background, later as a new message.

use super::*;
use crate::work::agents::{Turn, TurnOutcome};
use baaaht_llm::model::Message;

/// What an Assistant's `delegate` call asks.
#[derive(Debug, Clone, Default)]
pub struct Delegation {
    /// The role named (`None`: none, or one the protocol does not know).
    pub agent: Option<Role>,
    pub task: String,
    pub context: String,
    pub response_format: String,
    /// Whether it runs in the background and answers later as a new message.
    pub background: bool,
    /// Whether its answer is the turn's reply; `None`: the role's default.
    pub return_directly: Option<bool>,
}

/// What a `delegate` call answers: the agent's answer, or for a background task only that it
/// was started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegated {
    pub result: String,
    pub is_error: bool,
    pub background: bool,
    pub elapsed: Duration,
    /// Whether `result` went to the user as the turn's reply.
    pub returned_directly: bool,
}

/// The `delegate` tool of an Assistant (its container `identity`): runs the task in a
/// container of the target role of the same session and returns its answer; a background
/// task answers at once and delivers its result later as a new message.
pub async fn delegate(
    orchestrator: &Arc<Orchestrator>,
    identity: &ContainerIdentity,
    request: Delegation,
) -> Result<Delegated, OrchestratorError> {
    let live = orchestrator.agents.live(&identity.name).ok_or(OrchestratorError::NoTurn)?;
    let role = match request.agent {
        Some(role @ (Role::Worker | Role::Researcher | Role::Coder | Role::Memory)) => role,
        _ => {
            return Err(OrchestratorError::Invalid(
                "agent: delegate to the worker, researcher, coder or memory agent".into(),
            ))
        }
    };
    if request.task.trim().is_empty() {
        return Err(OrchestratorError::Invalid("task: describe what the agent should do".into()));
    }
    // The agent with a shell is not for a turn that read untrusted content.
    if role == Role::Coder {
        if let Err(why) = orchestrator.taints.allow(&live, crate::net::taint::Way::DelegateCoder) {
            return Ok(Delegated {
                result: why,
                is_error: true,
                background: request.background,
                elapsed: Duration::ZERO,
                returned_directly: false,
            });
        }
    }
    let mut text = format!("Task: {}", request.task.trim());
    if !request.context.trim().is_empty() {
        text.push_str(&format!("\n\nContext: {}", request.context.trim()));
    }
    if !request.response_format.trim().is_empty() {
        text.push_str(&format!("\n\nAnswer in this form: {}", request.response_format.trim()));
    }
    let background = request.background;
    // The agent's answer is the reply, streamed as it writes it: never for work that answers
    // later, and for one delegation of a turn at a time (the daemon holds that, whatever an
    // Assistant asks).
    let wanted = !background && request.return_directly.unwrap_or(agent_settings(orchestrator, role).return_directly);
    let word = if wanted { orchestrator.turns.give_word(&live.user_turn) } else { None };
    let speaks = word.is_some();
    let ids = (live.session.clone(), live.turn_id.clone(), live.correlation_id.clone());
    let progress = |state: &str, result: &str| {
        let kind =
            Kind::Delegation { agent: role, task: request.task.clone(), state: state.into(), result: result.into() };
        orchestrator.events.publish(&live.context, event((&ids.0, &ids.1, &ids.2), kind));
    };
    progress("started", "");
    tracing::info!(agent = role.as_str(), background, speaks, "delegating");
    let task = Task { live: Live { speaks, ..live.clone() }, role, text, summary: request.task.clone() };
    if background {
        let working = orchestrator.clone();
        // Its own span, not the call's: the DelegateToAgent call ends now, the work goes on.
        let span = tracing::info_span!(parent: None, "background delegation", agent = role.as_str());
        span.follows_from(tracing::Span::current());
        orchestrator.lifetime.spawn(
            async move {
                let (result, is_error, _) = run_task(&working, &task).await;
                finish_background(&working, &task, result, is_error);
            }
            .instrument(span),
        );
        return Ok(Delegated {
            result: format!(
                "The {role} is working on it in the background; its result will arrive as a new message in this \
                 conversation. Tell the user so."
            ),
            is_error: false,
            background: true,
            elapsed: Duration::ZERO,
            returned_directly: false,
        });
    }
    let written_before = orchestrator.turns.written_len(&live.user_turn);
    let (result, is_error, elapsed) = run_task(orchestrator, &task).await;
    let returned = speaks && !is_error;
    drop(word);
    if speaks {
        // It failed after some words: the Assistant answers after them, a paragraph on.
        if is_error && orchestrator.turns.written_len(&live.user_turn) > written_before {
            let parted = Kind::TextDelta { index: 0, text: "\n\n".into() };
            orchestrator.turns.wrote(&live.user_turn, "\n\n");
            orchestrator.events.publish(&live.context, event((&ids.0, &live.user_turn, &ids.2), parted));
        }
    }
    let parent = orchestrator.turns.tail(&live.user_turn);
    let entry = NewEntry::Delegate {
        agent: role.as_str().into(),
        task: request.task.clone(),
        result: result.clone(),
        is_error,
        returned,
    };
    match orchestrator.sessions.append(&live.session, parent.as_deref(), entry) {
        Ok(id) => orchestrator.turns.set_tail(&live.user_turn, &id),
        Err(error) => tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot record a delegation"),
    }
    progress(if is_error { "failed" } else { "finished" }, &result);
    Ok(Delegated { result, is_error, background: false, elapsed, returned_directly: returned })
}

/// Runs `text` as a task of a `role` container of session `record`, outside any user turn
/// (the scheduler's runs): its answer and the container that gave it. The answer is kept in
/// the session as `entry` (empty: not kept), which a mark of the run stays on.
pub async fn run_alone(
    orchestrator: &Arc<Orchestrator>,
    record: &SessionRecord,
    role: Role,
    (text, entry): (String, String),
    timeout: Option<Duration>,
) -> Result<(TurnOutcome, String), crate::work::agents::AgentError> {
    alone(orchestrator, record, role, (text, entry), timeout, role == Role::Assistant).await
}

/// The Assistant of session `record` puts what an unattended run found (`text`, the run's
/// answer kept as `entry`) into its own words, speaking to nobody: its answer is delivered
/// as the run's result. A mark on the run (it read content from outside) goes with it.
pub async fn retold(
    orchestrator: &Arc<Orchestrator>,
    record: &SessionRecord,
    (text, entry): (String, String),
    timeout: Option<Duration>,
) -> Result<TurnOutcome, crate::work::agents::AgentError> {
    alone(orchestrator, record, Role::Assistant, (text, entry), timeout, false).await.map(|(outcome, _)| outcome)
}

async fn alone(
    orchestrator: &Arc<Orchestrator>,
    record: &SessionRecord,
    role: Role,
    (text, entry): (String, String),
    timeout: Option<Duration>,
    speaks: bool,
) -> Result<(TurnOutcome, String), crate::work::agents::AgentError> {
    // Its agent and tool container wait for their places, as a delegation's do.
    let Some(_places) = orchestrator.turns.admit_agent(&orchestrator.lifetime.shutdown).await else {
        return Err(crate::work::agents::AgentError::Cancelled(role));
    };
    let settings = agent_settings(orchestrator, role);
    let turn_id = new_id("k-");
    let correlation_id = uuid::Uuid::new_v4().to_string();
    let live = Live {
        session: record.id.clone(),
        context: record.context(),
        role,
        turn_id: turn_id.clone(),
        correlation_id: correlation_id.clone(),
        user_turn: turn_id.clone(),
        entry,
        asker: None,
        speaks,
    };
    if let Some(source) = orchestrator.taints.carried([live.entry.as_str()]) {
        orchestrator.taints.taint(&live, &format!("{}{source}", crate::net::taint::EARLIER));
    }
    let work = Work {
        live,
        turn: Turn {
            now: super::now_for_agents(orchestrator),
            turn_id,
            correlation_id,
            messages: vec![Message::user(text)],
            model: String::new(),
            traceparent: crate::guard::telemetry::traceparent(),
        },
        timeout: timeout.unwrap_or(Duration::from_secs(settings.timeout)),
        cancel: CancellationToken::new(),
    };
    orchestrator.agents.run_named(work).await
}

#[derive(Debug, Clone)]
pub(super) struct Task {
    pub(super) live: Live,
    pub(super) role: Role,
    pub(super) text: String,
    pub(super) summary: String,
}

/// Starts the agent an Assistant's answer delegates to (`agent`, named by the call the model is
/// still writing) and a Coder's tool container, so that they run when the delegation comes: only
/// what the delegation would start, where there is [`super::room_for_a_guess`], in a slot free
/// now (a guess never waits for one, nor removes an idle container for one).
fn foresee(orchestrator: &Arc<Orchestrator>, live: &Live, agent: &str) {
    let Some(role @ (Role::Worker | Role::Researcher | Role::Coder | Role::Memory)) = Role::named(agent) else {
        return;
    };
    if !super::room_for_a_guess(orchestrator) {
        return;
    }
    if role == Role::Coder && !orchestrator.taints.would_allow(live, crate::net::taint::Way::DelegateCoder) {
        return;
    }
    let Some(start) = orchestrator.agents.foresee(&live.session, &live.context, role) else { return };
    orchestrator.lifetime.spawn(start);
    if role == Role::Coder {
        super::prewarm_tools(orchestrator, &live.session, &live.context, true);
    }
}

/// The model road tells the orchestrator which agent an Assistant's answer delegates to.
#[derive(Debug)]
pub struct Foreseer(pub std::sync::Weak<Orchestrator>);

impl crate::model::llm::call::Foresight for Foreseer {
    fn delegating(&self, live: &Live, agent: &str) {
        if let Some(orchestrator) = self.0.upgrade() {
            foresee(&orchestrator, live, agent);
        }
    }
}

#[tracing::instrument(name = "delegation", skip_all, fields(agent = task.role.as_str()))]
pub(super) async fn run_task(orchestrator: &Arc<Orchestrator>, task: &Task) -> (String, bool, Duration) {
    let started = Instant::now();
    let settings = agent_settings(orchestrator, task.role);
    let turn_id = new_id("d-");
    let work = Work {
        live: Live { role: task.role, turn_id: turn_id.clone(), ..task.live.clone() },
        turn: Turn {
            now: super::now_for_agents(orchestrator),
            turn_id,
            correlation_id: task.live.correlation_id.clone(),
            messages: vec![Message::user(task.text.clone())],
            model: String::new(),
            traceparent: crate::guard::telemetry::traceparent(),
        },
        timeout: Duration::from_secs(settings.timeout),
        // Cancelling the user's turn stops the agents working for it; a background task
        // outliving its turn runs on.
        cancel: orchestrator.turns.running_token(&task.live.user_turn).unwrap_or_default(),
    };
    let Some(_places) = orchestrator.turns.admit_agent(&work.cancel).await else {
        return (format!("the {}'s work was cancelled", task.role), true, started.elapsed());
    };
    if task.role == Role::Coder {
        // Its tool container starts beside it: the Coder's first call does not wait for one.
        super::prewarm_tools(orchestrator, &task.live.session, &task.live.context, true);
    }
    let (result, is_error) = match orchestrator.agents.run(work).await {
        Ok(answer) => (answer.content, answer.is_error),
        Err(error) => (format!("the {} could not finish: {error}", task.role), true),
    };
    tracing::info!(
        agent = task.role.as_str(),
        is_error,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "delegation done"
    );
    orchestrator.metrics.record_delegation(task.role.as_str(), !is_error, started.elapsed());
    (result, is_error, started.elapsed())
}

/// A background delegation's result: a delegate entry and a message in the session, sent to
/// the context's channels.
fn finish_background(orchestrator: &Arc<Orchestrator>, task: &Task, result: String, is_error: bool) {
    let live = &task.live;
    let entry = NewEntry::Delegate {
        agent: task.role.as_str().into(),
        task: task.summary.clone(),
        result: result.clone(),
        is_error,
        returned: false,
    };
    let content = if is_error {
        format!("The background task for the {} failed: {result}", task.role)
    } else {
        format!("The {} finished the background task \"{}\":\n\n{result}", task.role, task.summary)
    };
    let recorded = orchestrator.sessions.append(&live.session, None, entry).and_then(|_| {
        orchestrator.sessions.append(
            &live.session,
            None,
            NewEntry::Message {
                role: "assistant",
                content: content.clone(),
                channel: None,
                sender: None,
                attachments: vec![],
            },
        )
    });
    if let Err(error) = recorded {
        tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot record a background result");
    }
    let message = Kind::Message {
        content,
        reply_to: String::new(),
        metadata: [("background".to_string(), task.role.as_str().to_string())].into_iter().collect(),
        attachments: vec![],
    };
    // The session holds it as its entries (above) already.
    let told = event((&live.session, &live.turn_id, &live.correlation_id), message).recorded();
    orchestrator.events.publish(&live.context, told);
}
