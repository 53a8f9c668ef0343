//! A task as a user or an agent asks for it (ScheduleTask, or a `tasks/{id}.json` request of a
//! tool container), checked field by field into a [`TaskRecord`].

use sha2::Digest as _;

use super::schedule::{self, ScheduleSpec};
use super::{
    execute, CatchUp, Concurrency, ContextMode, CreatedBy, Notification, Scheduler, SchedulerError, TaskKind,
    TaskRecord, TaskStatus, MOST_PROMPT,
};
use crate::base::auth::Context;

/// When a requested task runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Every {
    /// A 5-field cron expression.
    Cron(String),
    /// Seconds between runs.
    Seconds(u64),
    /// One run, at an RFC 3339 time.
    Once(String),
    /// hourly, daily, weekly, biweekly or monthly.
    Cadence(String),
}

/// A task as asked for, each field as written (empty: the default).
#[derive(Debug, Clone, Default)]
pub struct TaskRequest {
    /// `scheduled` (or empty); heartbeats and system tasks are refused.
    pub r#type: String,
    pub schedule: Option<Every>,
    pub agent: String,
    pub prompt: String,
    pub description: String,
    pub timezone: String,
    pub active_hours: String,
    pub context_mode: String,
    /// Channel, on success, on failure.
    pub notification: Option<(String, bool, bool)>,
    pub catch_up: String,
    pub concurrency: String,
    pub retry_interrupted: bool,
    pub timeout_seconds: u64,
}

/// A new task from a request, for `context`, as of `now`: every field checked,
/// each error naming its field and what would do.
pub fn new_task(
    definition: TaskRequest,
    context: &Context,
    now: jiff::Timestamp,
) -> Result<TaskRecord, SchedulerError> {
    match definition.r#type.as_str() {
        "" | "scheduled" => {}
        "heartbeat" => return Err(SchedulerError::HeartbeatType),
        "system" => return Err(SchedulerError::SystemType),
        other => return Err(SchedulerError::Type(other.to_string())),
    }
    let prompt = prompt_of(&definition.prompt)?;
    let timezone = timezone_of(&definition.timezone)?;
    let active_hours = match definition.active_hours.trim() {
        "" => None,
        text => Some(text.parse::<schedule::ActiveHours>()?.to_string()),
    };
    let spec = spec_of(definition.schedule.ok_or(SchedulerError::NoSchedule)?, active_hours, now)?;
    let context_mode = match definition.context_mode.as_str() {
        "" | "isolated" => ContextMode::Isolated,
        "session" => ContextMode::Session,
        "silent" => ContextMode::Silent,
        other => return Err(SchedulerError::ContextMode(other.to_string())),
    };
    let notification = match definition.notification {
        Some((channel, on_success, on_failure)) => {
            if !crate::store::profile::is_valid_channel(&channel) {
                return Err(SchedulerError::Channel(channel));
            }
            Notification { channel, on_success, on_failure }
        }
        None => Notification { channel: String::new(), on_success: true, on_failure: true },
    };
    let catch_up = CatchUp::try_from(definition.catch_up)?;
    let concurrency = match definition.concurrency.as_str() {
        "" | "forbid" => Concurrency::Forbid,
        "allow" => Concurrency::Allow,
        other => return Err(SchedulerError::Concurrency(other.to_string())),
    };
    let agent = if definition.agent.is_empty() { "worker".to_string() } else { definition.agent };
    let description = description_of(&definition.description, &prompt);
    let (user_id, group_id) = super::owner_ids(context);
    let task = TaskRecord {
        id: String::new(),
        kind: TaskKind::Scheduled,
        user_id,
        group_id,
        schedule: spec,
        timezone,
        agent,
        prompt,
        context_mode,
        notification,
        status: TaskStatus::Active,
        last_run: None,
        next_run: None,
        failure_count: 0,
        created_at: now,
        created_by: CreatedBy::User,
        description,
        catch_up,
        concurrency,
        retry_interrupted: definition.retry_interrupted,
        timeout: definition.timeout_seconds,
        section: None,
        system_job: None,
    };
    super::execute::role_of(&task)?;
    Ok(task)
}

/// A prompt as written, trimmed, if there is one and it is not too long.
fn prompt_of(text: &str) -> Result<String, SchedulerError> {
    let prompt = text.trim().to_string();
    if prompt.is_empty() {
        return Err(SchedulerError::NoPrompt);
    }
    if prompt.len() > MOST_PROMPT {
        return Err(SchedulerError::LongPrompt(prompt.len()));
    }
    Ok(prompt)
}

/// A time zone as written (empty: `system.timezone`), if it names one.
fn timezone_of(text: &str) -> Result<String, SchedulerError> {
    let timezone = text.trim().to_string();
    if !timezone.is_empty() {
        schedule::zone(&timezone)?;
    }
    Ok(timezone)
}

/// A description as written, else the prompt's first line.
fn description_of(text: &str, prompt: &str) -> String {
    match text.trim() {
        "" => super::ledger::shortened(prompt.lines().next().unwrap_or_default(), 80),
        text => super::ledger::shortened(text, 200),
    }
}

/// The schedule `every` stands for as of `now`; a cron's `active_hours` go with it.
fn spec_of(every: Every, active_hours: Option<String>, now: jiff::Timestamp) -> Result<ScheduleSpec, SchedulerError> {
    Ok(match every {
        Every::Cron(cron) => ScheduleSpec { cron: Some(cron), active_hours, ..ScheduleSpec::default() },
        Every::Seconds(every) => {
            let anchor = jiff::Timestamp::from_second(now.as_second()).unwrap_or(now);
            ScheduleSpec { interval: Some(every), anchor: Some(anchor), ..ScheduleSpec::default() }
        }
        Every::Once(text) => {
            let once: jiff::Timestamp = text
                .trim()
                .parse()
                .map_err(|source: jiff::Error| SchedulerError::Once { text: text.trim().to_string(), source })?;
            ScheduleSpec { once: Some(once), ..ScheduleSpec::default() }
        }
        Every::Cadence(text) => {
            let cadence: schedule::Cadence = text.parse()?;
            schedule::cadence_schedule(cadence, active_hours.as_deref(), &mut schedule::random_below)
        }
    })
}

/// A change to a scheduled task as asked for; a field left out stays as it is.
#[derive(Debug, Clone, Default)]
pub struct TaskChange {
    pub prompt: Option<String>,
    pub description: Option<String>,
    pub schedule: Option<Every>,
    /// Empty: `system.timezone`.
    pub timezone: Option<String>,
}

/// `task` as `change` leaves it, every changed field checked as a new task's is; stored by
/// [`Scheduler::update`]. Heartbeats change in HEARTBEAT.md, the daemon's own tasks not at
/// all, and a task that has run its course is scheduled anew.
pub fn changed_task(task: &TaskRecord, change: TaskChange, now: jiff::Timestamp) -> Result<TaskRecord, SchedulerError> {
    match task.kind {
        TaskKind::Scheduled => {}
        TaskKind::Heartbeat => return Err(SchedulerError::HeartbeatType),
        TaskKind::System => return Err(SchedulerError::SystemType),
    }
    if matches!(task.status, TaskStatus::Completed | TaskStatus::Failed) {
        let status = format!("{:?}", task.status).to_lowercase();
        return Err(SchedulerError::Finished { id: task.id.clone(), status });
    }
    if change.prompt.is_none() && change.description.is_none() && change.schedule.is_none() && change.timezone.is_none()
    {
        return Err(SchedulerError::Invalid(
            "nothing to change: give a new prompt, description, schedule or timezone".into(),
        ));
    }
    let mut changed = task.clone();
    if let Some(prompt) = change.prompt {
        changed.prompt = prompt_of(&prompt)?;
    }
    if let Some(description) = change.description {
        changed.description = description_of(&description, &changed.prompt);
    }
    if let Some(timezone) = change.timezone {
        changed.timezone = timezone_of(&timezone)?;
    }
    if let Some(every) = change.schedule {
        changed.schedule = spec_of(every, task.schedule.active_hours.clone(), now)?;
    }
    Ok(changed)
}

/// Schedules a task a container asked for through file IPC (`tasks/{id}.json`) for `context`;
/// the task's id is the request's, so a request seen twice (a crash before its file was
/// removed) schedules once. A refusal is told to the context's inbox, with why.
pub fn schedule_requested(
    scheduler: &Scheduler,
    inbox: &crate::store::inbox::Inbox,
    context: &Context,
    request: crate::work::ipc::TaskFile,
) -> Result<String, SchedulerError> {
    // The same request of the same context is one task; another context's never collides.
    let digest = sha2::Sha256::digest(format!("{context}\n{}", request.id).as_bytes());
    let id = format!("task-ipc-{}", &format!("{digest:x}")[..16]);
    if let Some(existing) = scheduler.get(&id) {
        return if existing.context().as_ref() == Some(context) {
            Ok(id)
        } else {
            Err(SchedulerError::OtherContext(id))
        };
    }
    let kinds: Vec<Every> =
        [request.cron.map(Every::Cron), request.interval_seconds.map(Every::Seconds), request.once.map(Every::Once)]
            .into_iter()
            .flatten()
            .collect();
    let definition = TaskRequest {
        r#type: "scheduled".into(),
        schedule: if kinds.len() == 1 { kinds.into_iter().next() } else { None },
        agent: request.agent,
        prompt: request.prompt,
        description: request.description,
        timezone: request.timezone,
        ..TaskRequest::default()
    };
    // Only the runners of the session's non-Coder tool containers write here: a task asked for
    // this way can do no more than a Worker.
    let scheduled = new_task(definition, context, scheduler.now())
        .and_then(|task| {
            let agent = execute::role_of(&task)?;
            crate::sandbox::policy::Policy::may_act_as(crate::base::auth::Role::Worker, agent)?;
            Ok(task)
        })
        .and_then(|task| scheduler.add(TaskRecord { id: id.clone(), ..task }));
    match scheduled {
        Ok(task) => {
            // Written by the container: taken only in an id's shape.
            let correlation_id = Some(request.correlation_id.as_str())
                .filter(|id| crate::base::auth::is_valid_correlation_id(id))
                .unwrap_or_default();
            tracing::info!(context = %context, task = %task.id, request = %request.id, correlation_id,
                "a task asked for through file IPC is scheduled");
            Ok(task.id)
        }
        Err(why) => {
            let content =
                format!("An agent asked to schedule a task (request {}), and it was refused: {why}", request.id);
            let item = crate::store::inbox::Item::new("A task was not scheduled", content, "", "");
            if let Err(error) = inbox.push(context, item) {
                tracing::warn!(context = %context, %error, "cannot tell of a refused task request");
            }
            Err(why)
        }
    }
}

/// Why an agent may not schedule a task.
#[derive(Debug, thiserror::Error)]
pub enum AgentScheduling {
    /// Its turn read untrusted content, so it schedules nothing (the sentence says so).
    #[error("{0}")]
    Refused(String),
    /// The task could do more than the agent that asks for it.
    #[error(transparent)]
    Beyond(crate::sandbox::policy::PolicyError),
    /// The task names no agent that can run it.
    #[error(transparent)]
    Invalid(SchedulerError),
}

/// Whether the agent of `identity` (working on `live`) may schedule `task`: a turn that read
/// untrusted content schedules nothing, and a task runs with at most the powers of the agent
/// that scheduled it (a refusal of that is audited as `caller`'s).
pub fn agent_may_schedule(
    task: &TaskRecord,
    identity: &crate::base::auth::ContainerIdentity,
    live: Option<&crate::base::auth::Live>,
    taints: &crate::net::taint::Taints,
    audit: &crate::guard::audit::Audit,
    caller: &crate::base::auth::Caller,
) -> Result<(), AgentScheduling> {
    if let Some(live) = live {
        taints.allow(live, crate::net::taint::Way::ScheduleTask).map_err(AgentScheduling::Refused)?;
    }
    let agent = super::execute::role_of(task).map_err(AgentScheduling::Invalid)?;
    if let Err(why) = crate::sandbox::policy::Policy::may_act_as(identity.role, agent) {
        let record = crate::guard::audit::Record::by(crate::guard::audit::Kind::Policy, caller, "refused");
        audit.record(record.detail("tool", "schedule_task").detail("reason", why.to_string()));
        return Err(AgentScheduling::Beyond(why));
    }
    Ok(())
}
