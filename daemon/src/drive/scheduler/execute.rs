//! A task's run in the daemon (spec §15.5): the prompt, the session its context mode asks for,
//! the agent (the Heartbeat agent for heartbeats, else the task's), a heartbeat's finding told
//! by the user's Assistant, the result to the user's preferred channel (DESIGN.md §9.4), and
//! the system jobs.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument as _;

use super::{
    Claim, ContextMode, Delivery, Execute, Failure, RunOutcome, SchedulerError, SystemJob, TaskKind, TaskRecord,
};
use crate::base::auth::{Context, ContextKind, Role};
use crate::drive::orchestrator::Orchestrator;
use crate::store::events::Notice;
use crate::store::inbox::Inbox;
use crate::store::memory::Memories;
use crate::store::sessions::{NewEntry, SessionStatus};
use crate::work::agents::AgentError;

/// What a heartbeat answers when there is nothing to tell.
pub const NOTHING: &str = "NOTHING";

/// The daemon's executor: task runs go through the orchestrator; the system jobs reach the
/// memory stores and the scheduler's own records; results wait in the inbox.
#[derive(Debug)]
pub struct Daemon {
    pub orchestrator: Arc<Orchestrator>,
    pub scheduler: Arc<super::Scheduler>,
    pub memory: Arc<Memories>,
    pub inbox: Arc<Inbox>,
    /// A run's connections out have nobody to ask: they are refused, and the inbox says how
    /// to allow them.
    pub approvals: Arc<crate::net::egress::approvals::Approvals>,
}

/// The role a task's `agent` names; heartbeats always use the Heartbeat agent.
pub fn role_of(task: &TaskRecord) -> Result<Role, SchedulerError> {
    if task.kind == TaskKind::Heartbeat {
        return Ok(Role::Heartbeat);
    }
    match Role::named(task.agent.as_str()) {
        _ if task.agent.is_empty() => Ok(Role::Worker),
        Some(role @ (Role::Worker | Role::Researcher | Role::Coder | Role::Heartbeat)) => Ok(role),
        _ => Err(SchedulerError::Agent(task.agent.clone())),
    }
}

impl Daemon {
    async fn system(&self, job: SystemJob) -> RunOutcome {
        match job {
            SystemJob::ArchiveSessions => {
                let (idled, archived) = crate::drive::orchestrator::archive_quiet(&self.orchestrator, false).await;
                RunOutcome::ok(format!("{idled} session(s) idled, {archived} archived"))
            }
            SystemJob::ExpireMemories => {
                let memory = self.memory.clone();
                match tokio::task::spawn_blocking(move || memory.expire_all()).await {
                    Ok(removed) => RunOutcome::ok(format!("{removed} memor(ies) expired")),
                    Err(error) => RunOutcome::failed(Failure::Error(format!("memory expiry failed: {error}"))),
                }
            }
            SystemJob::PruneRecords => {
                let retention = self.orchestrator.loaded.config.scheduler.retention.clone();
                let (scheduler, logs) = (self.scheduler.clone(), self.orchestrator.data_dir.logs_dir());
                let pruned = tokio::task::spawn_blocking(move || {
                    let runs = scheduler.prune_runs(retention.run_days, retention.runs_per_task);
                    let logs = prune_logs(&logs, retention.log_days);
                    (runs, logs)
                })
                .await;
                match pruned {
                    Ok((runs, logs)) => {
                        RunOutcome::ok(format!("{runs} run record(s) and {logs} container log(s) pruned"))
                    }
                    Err(error) => RunOutcome::failed(Failure::Error(format!("pruning failed: {error}"))),
                }
            }
        }
    }

    /// Runs an agent for `claim` in the session its context mode asks for.
    async fn agent(&self, claim: &Claim) -> RunOutcome {
        let task = &claim.task;
        let Some(context) = task.context() else {
            return RunOutcome::failed(Failure::Error("the task belongs to no user or group".into()));
        };
        if context.kind == ContextKind::Group {
            if let Err(error) = self.orchestrator.groups.accepts_messages(&context.id) {
                return RunOutcome::failed(Failure::Error(error.to_string()));
            }
        }
        let role = match role_of(task) {
            Ok(role) => role,
            Err(error) => return RunOutcome::failed(Failure::Error(error.to_string())),
        };
        let owner = if task.user_id.is_empty() { "scheduler" } else { task.user_id.as_str() };
        let session = match task.context_mode {
            ContextMode::Session => self.orchestrator.sessions.active(&context, owner),
            ContextMode::Isolated | ContextMode::Silent => {
                self.orchestrator.sessions.create_for_run(&context, owner, format!("task: {}", task.description))
            }
        };
        let record = match session {
            Ok(record) => record,
            Err(error) => return RunOutcome::failed(Failure::Start(format!("no session for the run: {error}"))),
        };
        let local = claim.slot.to_zoned(self.scheduler.display_zone(task)).strftime("%A %Y-%m-%d %H:%M %Z").to_string();
        let text = match task.kind {
            TaskKind::Heartbeat => format!(
                "Heartbeat \"{}\" ({local}). {}\n\nIf nothing needs the user's attention, answer with the single word \
                 {NOTHING}.",
                task.section.as_deref().unwrap_or(&task.description),
                task.prompt
            ),
            _ => format!(
                "Scheduled task \"{}\" ({local}). Do it now and answer with what the user should hear:\n\n{}",
                task.description, task.prompt
            ),
        };
        let timeout = (task.timeout > 0).then(|| Duration::from_secs(task.timeout));
        self.approvals.unattended(&record.id, true);
        let kept_as = result_entry(&claim.run);
        let ran =
            crate::drive::orchestrator::run_alone(&self.orchestrator, &record, role, (text, kept_as.clone()), timeout)
                .await;
        self.approvals.unattended(&record.id, false);
        let session = Some(record.id.clone());
        let outcome = match ran {
            Ok((result, container)) => {
                let content = result.content.trim().to_string();
                let outcome = if result.is_error {
                    Err(Failure::Error(content))
                } else if content == NOTHING || content.trim_end_matches('.') == NOTHING {
                    Ok(String::new())
                } else {
                    Ok(content)
                };
                RunOutcome { result: outcome, container: Some(container), session, tokens: result.tokens }
            }
            Err(error) => {
                let failure = match &error {
                    AgentError::Start { .. }
                    | AgentError::DiskFull(_)
                    | AgentError::EngineDown(_)
                    | AgentError::NoAgent(_) => Failure::Start(error.to_string()),
                    AgentError::Timeout { .. } => Failure::Timeout(error.to_string()),
                    AgentError::Lost(_) | AgentError::Cancelled(_) => Failure::Error(error.to_string()),
                };
                RunOutcome { result: Err(failure), container: None, session, tokens: 0 }
            }
        };
        let outcome = match task.kind {
            TaskKind::Heartbeat => self.retold(task, &record, outcome, (&local, kept_as.clone()), timeout).await,
            _ => outcome,
        };
        if task.context_mode != ContextMode::Session {
            // The run's own session keeps what it found (as a session-mode run's conversation
            // does), so a reply to its notice (an answer to its mail) goes on from it; then it
            // ends with the run (no memory extraction: nobody wrote in it).
            let found = outcome.result.as_ref().ok().filter(|content| !content.is_empty());
            if let Some(content) = found.filter(|_| task.context_mode == ContextMode::Isolated) {
                let entry = NewEntry::Message {
                    role: "assistant",
                    content: format!("{}\n\n{content}", task.description),
                    channel: None,
                    sender: None,
                    attachments: vec![],
                };
                if let Err(error) = self.orchestrator.sessions.append_as(&record.id, Some(kept_as), None, entry) {
                    tracing::warn!(session = %record.id, error = %baaaht_proto::error_chain(&error), "cannot record a task's result");
                }
            }
            if let Err(error) = self.orchestrator.sessions.set_status(&record.id, SessionStatus::Archived) {
                tracing::warn!(session = %record.id, error = %baaaht_proto::error_chain(&error), "cannot archive a task's session");
            }
            self.orchestrator.agents.reap_idle(std::slice::from_ref(&record.id)).await;
            self.orchestrator.tools.release(&record.id).await;
        }
        outcome
    }

    /// A heartbeat's finding as the user hears it (spec §15.3): their Assistant, in the
    /// session the heartbeat ran in, tells it in its own words; when it cannot (it does not
    /// start, fails or says nothing), the Heartbeat agent's own words go. Nothing found is
    /// nothing to tell.
    async fn retold(
        &self,
        task: &TaskRecord,
        record: &crate::store::sessions::SessionRecord,
        outcome: RunOutcome,
        (local, kept_as): (&str, String),
        timeout: Option<Duration>,
    ) -> RunOutcome {
        let found = match &outcome.result {
            Ok(found) if !found.is_empty() => found.clone(),
            _ => return outcome,
        };
        let title = task.section.as_deref().unwrap_or(&task.description);
        let text = format!(
            "Your heartbeat check \"{title}\" ran ({local}) and found what follows. Tell the user what they need to \
             know, briefly and in your own words, as a message to them; answer with that message only.\n\n---\n{found}"
        );
        match crate::drive::orchestrator::retold(&self.orchestrator, record, (text, kept_as), timeout).await {
            Ok(told) if !told.is_error && !told.content.trim().is_empty() => RunOutcome {
                result: Ok(told.content.trim().to_string()),
                tokens: outcome.tokens + told.tokens,
                ..outcome
            },
            Ok(told) => {
                tracing::warn!(task = %task.id, answer = %told.content, "the Assistant did not retell a heartbeat; its own words go");
                outcome
            }
            Err(error) => {
                tracing::warn!(task = %task.id, error = %baaaht_proto::error_chain(&error),
                    "the Assistant could not retell a heartbeat; its own words go");
                outcome
            }
        }
    }

    /// Appends a line to `scheduler.error_handling.log_file`, synced (a journal's line at a
    /// time), in a folder of the daemon's own.
    fn log_failure(&self, claim: &Claim, failure: &Failure) {
        let configured = &self.orchestrator.loaded.config.scheduler.error_handling.log_file;
        let path = self.orchestrator.data_dir.root().join(configured);
        let line = serde_json::json!({
            "at": crate::base::state::now_rfc3339(),
            "task": claim.task.id,
            "run": claim.run,
            "slot": claim.slot.to_string(),
            "attempt": claim.attempt,
            "error": failure.message(),
        });
        let folder = path.parent().map_or(Ok(()), crate::base::state::private_dir);
        let written = folder
            .map_err(|source| crate::base::state::StateError::Write { path: path.clone(), source })
            .and_then(|()| crate::base::state::append_synced(&path, format!("{line}\n").as_bytes()));
        if let Err(error) = written {
            let error = baaaht_proto::error_chain(&error);
            tracing::warn!(path = %path.display(), %error, "cannot write the scheduler's error log");
        }
    }

    /// Tells `context` `notice` on `channel` when it is connected, else in its inbox.
    fn tell(&self, context: &Context, channel: Option<&str>, notice: Notice, session: Option<&str>) {
        crate::store::inbox::tell(&self.inbox, &self.orchestrator.events, context, channel, notice, session);
    }

    /// Where `task`'s notices go: its own channel, else where `context`'s go.
    fn channel_for(&self, task: &TaskRecord, context: &Context) -> Option<String> {
        let (data_dir, events) = (&self.orchestrator.data_dir, &self.orchestrator.events);
        crate::store::inbox::channel_for(data_dir, events, context, &task.notification.channel)
    }
}

impl Daemon {
    /// Leaves a notice in every admin's inbox (`system.admin_users`), but `besides`'s.
    fn tell_admins(&self, besides: Option<&Context>, title: &str, content: &str, task: &str) {
        let admins = &self.orchestrator.loaded.config.system.admin_users;
        if admins.is_empty() {
            tracing::error!(task, "{content} (no system.admin_users to tell)");
        }
        let channel = self.orchestrator.loaded.config.scheduler.error_handling.notify_channel;
        for admin in admins {
            let admin = Context::user(admin);
            if Some(&admin) == besides {
                continue;
            }
            crate::work::health::tell_admin(
                &self.inbox,
                &self.orchestrator.events,
                &admin,
                channel,
                title,
                content,
                task,
            );
        }
    }
}

/// Removes container log folders under `dir` older than `days`; returns how many went.
fn prune_logs(dir: &std::path::Path, days: u64) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let limit = Duration::from_secs(days.saturating_mul(86_400));
    let mut removed = 0;
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        // Only the containers' folders; the scheduler's error log and others stay.
        if !meta.is_dir() {
            continue;
        }
        let old = meta.modified().ok().and_then(|at| at.elapsed().ok()).is_some_and(|age| age > limit);
        if old {
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => removed += 1,
                Err(error) => tracing::warn!(path = %entry.path().display(), %error, "cannot prune a container's logs"),
            }
        }
    }
    removed
}

#[async_trait::async_trait]
impl Execute for Daemon {
    async fn run(&self, claim: &Claim) -> RunOutcome {
        let span = tracing::info_span!("task", task = %claim.task.id, run = %claim.run, slot = %claim.slot);
        span.in_scope(|| tracing::info!(attempt = claim.attempt, "task run starting"));
        // The run's agents carry the span's trace context: a scheduled run is one trace.
        let mut outcome = match claim.task.system_job {
            Some(job) => self.system(job).instrument(span).await,
            None => self.agent(claim).instrument(span).await,
        };
        // What the ledger keeps and the channels are told carries no secret.
        if let Ok(result) = &mut outcome.result {
            let redact = &self.orchestrator.redact;
            *result = redact.clean_string(crate::guard::redact::Place::TaskResult, std::mem::take(result));
        }
        if let Err(failure) = &outcome.result {
            self.log_failure(claim, failure);
        }
        tracing::info!(task = %claim.task.id, run = %claim.run, ok = outcome.result.is_ok(), "task run done");
        outcome
    }

    async fn deliver(&self, task: &TaskRecord, delivery: Delivery) {
        let Some(context) = task.context() else {
            // The daemon's own task: only its admins can do something about it.
            if let Delivery::Paused { failures, error } = delivery {
                let content = format!(
                    "The system task \"{}\" ({}) was paused after {failures} failures in a row; the last: {error}. \
                     Resume it with `baaaht tasks resume {}` once the cause is fixed.",
                    task.description, task.id, task.id
                );
                self.tell_admins(None, &format!("{}: paused", task.description), &content, &task.id);
            }
            return;
        };
        let channel = self.channel_for(task, &context);
        let channel = channel.as_deref().filter(|channel| *channel != "none");
        let title = task.description.clone();
        match delivery {
            Delivery::Result { run, content, session } => {
                // In session mode the result joins the conversation it was run in.
                if task.context_mode == ContextMode::Session {
                    if let Some(session) = &session {
                        let entry = NewEntry::Message {
                            role: "assistant",
                            content: format!("{title}\n\n{content}"),
                            channel: channel.map(|channel| crate::store::inbox::family(channel).to_string()),
                            sender: None,
                            attachments: vec![],
                        };
                        let kept_as = Some(result_entry(&run));
                        if let Err(error) = self.orchestrator.sessions.append_as(session, kept_as, None, entry) {
                            tracing::warn!(session, error = %baaaht_proto::error_chain(&error), "cannot record a task's result");
                        }
                    }
                }
                let heartbeat = task.kind == TaskKind::Heartbeat;
                let notice =
                    Notice { task_id: task.id.clone(), run_id: run, title, content, heartbeat, ..Notice::default() };
                self.tell(&context, channel, notice, session.as_deref());
            }
            Delivery::Failed { run, error } => {
                let notice = Notice {
                    task_id: task.id.clone(),
                    run_id: run,
                    title: format!("{title}: failed"),
                    content: format!("The task \"{title}\" failed: {error}"),
                    is_error: true,
                    ..Notice::default()
                };
                self.tell(&context, channel, notice, None);
            }
            Delivery::Paused { failures, error } => {
                let content = format!(
                    "The task \"{title}\" ({}) was paused after {failures} failures in a row; the last: {error}. \
                     Resume it with `baaaht tasks resume {}` once the cause is fixed.",
                    task.id, task.id
                );
                let notice = Notice {
                    task_id: task.id.clone(),
                    title: format!("{title}: paused"),
                    content,
                    is_error: true,
                    ..Notice::default()
                };
                self.tell(&context, channel, notice.clone(), None);
                // And every admin's inbox (spec §15.7: notify admin).
                self.tell_admins(Some(&context), &format!("{} of {context}", notice.title), &notice.content, &task.id);
            }
        }
    }
}

/// The entry a run's result is kept as in its session: a mark of the run (it read content from
/// outside) stays on it, for the turns that read it after.
fn result_entry(run: &str) -> String {
    format!("e-{run}")
}
