//! The protocol's names for the domain's roles and contexts, in one place. The server converts
//! requests and answers here, and so do the subsystems that speak the protocol to agents
//! (orchestrator, ipc, tools); none of them imports the wire layer (`server/`) for it.

use baaaht_proto::v1;

use crate::auth::{Context, ContextKind, Role};

/// The protocol's reference to `context`.
pub fn context_ref(context: &Context) -> v1::ContextRef {
    let kind = match context.kind {
        ContextKind::User => v1::ContextType::User,
        ContextKind::Group => v1::ContextType::Group,
    };
    v1::ContextRef { r#type: kind as i32, id: context.id.clone() }
}

/// The context a protocol reference names; the error says what is wrong with it (the caller
/// adds the field's name).
pub fn context_of(reference: &v1::ContextRef) -> Result<Context, String> {
    let kind = match v1::ContextType::try_from(reference.r#type) {
        Ok(v1::ContextType::User) => ContextKind::User,
        Ok(v1::ContextType::Group) => ContextKind::Group,
        _ => return Err("type must be CONTEXT_TYPE_USER or CONTEXT_TYPE_GROUP".into()),
    };
    if !crate::auth::is_valid_context_id(&reference.id) {
        return Err(format!(
            "id `{}` is not a valid id: use 1-128 letters, digits, `.`, `_` or `-`",
            reference.id.escape_debug()
        ));
    }
    Ok(Context { kind, id: reference.id.clone() })
}

/// The protocol's name for `role`.
pub fn role_ref(role: Role) -> v1::AgentRole {
    match role {
        Role::Assistant => v1::AgentRole::Assistant,
        Role::Worker => v1::AgentRole::Worker,
        Role::Researcher => v1::AgentRole::Researcher,
        Role::Coder => v1::AgentRole::Coder,
        Role::Memory => v1::AgentRole::Memory,
        Role::Heartbeat => v1::AgentRole::Heartbeat,
        Role::Tool | Role::LlmGateway | Role::Mcp | Role::Gateway => v1::AgentRole::Tool,
    }
}

/// The role a protocol value names; `None` for "unspecified".
pub fn role_of(value: i32) -> Result<Option<Role>, String> {
    Ok(match v1::AgentRole::try_from(value) {
        Ok(v1::AgentRole::Unspecified) => None,
        Ok(v1::AgentRole::Assistant) => Some(Role::Assistant),
        Ok(v1::AgentRole::Worker) => Some(Role::Worker),
        Ok(v1::AgentRole::Researcher) => Some(Role::Researcher),
        Ok(v1::AgentRole::Coder) => Some(Role::Coder),
        Ok(v1::AgentRole::Memory) => Some(Role::Memory),
        Ok(v1::AgentRole::Heartbeat) => Some(Role::Heartbeat),
        Ok(v1::AgentRole::Tool) => Some(Role::Tool),
        Err(_) => return Err(format!("role {value} is not a known AgentRole")),
    })
}

/// A file shared with a message, as clients see it.
pub fn attachment(attachment: &crate::sessions::log::Attachment) -> v1::Attachment {
    v1::Attachment {
        filename: attachment.path.strip_prefix("uploads/").unwrap_or(&attachment.path).to_string(),
        mime_type: attachment.mime_type.clone(),
        path: attachment.path.clone(),
        size_bytes: attachment.size_bytes,
    }
}

/// The protocol's channel type for a channel's name (`tui`, `cli`, `web`, `slack`).
pub fn channel_ref(channel: Option<&str>) -> v1::ChannelType {
    match channel {
        Some("tui") => v1::ChannelType::Tui,
        Some("cli") => v1::ChannelType::Cli,
        Some("web") => v1::ChannelType::Web,
        Some("slack") => v1::ChannelType::Slack,
        _ => v1::ChannelType::Unspecified,
    }
}

/// A skill's entry in a manifest: name and description, and the whole body of an
/// always-loaded skill.
pub fn skill_summary(found: &crate::skills::Found) -> v1::SkillSummary {
    v1::SkillSummary {
        name: found.skill.name.clone(),
        description: found.skill.description.clone(),
        scope: found.scope.as_str().into(),
        always_loaded: found.skill.always_loaded,
        body: if found.skill.always_loaded { found.skill.body.clone() } else { String::new() },
    }
}

/// RegisterAgent's answer.
pub fn agent_config(setup: crate::agents::AgentSetup) -> v1::AgentConfig {
    v1::AgentConfig {
        role: role_ref(setup.role) as i32,
        model: setup.model,
        max_iterations: setup.max_iterations,
        temperature: setup.temperature.map(|t| t as f32),
        timeout_seconds: u32::try_from(setup.timeout.as_secs()).unwrap_or(u32::MAX),
        soul: setup.soul,
        identity: setup.identity,
        context_profile: setup.context_profile,
        memories: setup.memories,
        skills: Some(v1::SkillManifest { skills: setup.skills.iter().map(skill_summary).collect() }),
        tools: setup
            .tools
            .into_iter()
            .map(|name| v1::ToolDefinition { name: name.into(), ..v1::ToolDefinition::default() })
            .collect(),
        session_id: setup.session_id,
        context: Some(context_ref(&setup.context)),
    }
}

/// `at` in `zone` as RFC 3339 with its UTC offset (what people read: `2026-06-01T09:00:00+02:00`).
pub fn local_time(at: jiff::Timestamp, zone: &jiff::tz::TimeZone) -> String {
    at.to_zoned(zone.clone()).strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
}

/// A task as the protocol shows it, its times in its own time zone.
pub fn task_definition(task: &crate::scheduler::TaskRecord, zone: &jiff::tz::TimeZone) -> v1::TaskDefinition {
    use crate::scheduler::{ContextMode, CreatedBy, TaskKind, TaskStatus};
    let spec = &task.schedule;
    let kind = if let Some(cadence) = spec.cadence {
        Some(v1::task_schedule::Kind::Cadence(cadence.as_str().into()))
    } else if let Some(cron) = &spec.cron {
        Some(v1::task_schedule::Kind::Cron(cron.clone()))
    } else if let Some(every) = spec.interval {
        Some(v1::task_schedule::Kind::IntervalSeconds(every))
    } else {
        spec.once.map(|once| v1::task_schedule::Kind::Once(local_time(once, zone)))
    };
    v1::TaskDefinition {
        id: task.id.clone(),
        r#type: match task.kind {
            TaskKind::Heartbeat => "heartbeat",
            TaskKind::Scheduled => "scheduled",
            TaskKind::System => "system",
        }
        .into(),
        user_id: task.user_id.clone(),
        group_id: task.group_id.clone(),
        schedule: Some(v1::TaskSchedule { kind }),
        agent: task.agent.clone(),
        prompt: task.prompt.clone(),
        context_mode: match task.context_mode {
            ContextMode::Session => "session",
            ContextMode::Isolated => "isolated",
            ContextMode::Silent => "silent",
        }
        .into(),
        notification: Some(v1::TaskNotification {
            channel: task.notification.channel.clone(),
            on_success: task.notification.on_success,
            on_failure: task.notification.on_failure,
        }),
        status: match task.status {
            TaskStatus::Active => "active",
            TaskStatus::Paused => "paused",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
        }
        .into(),
        last_run: task.last_run.map(|at| local_time(at, zone)).unwrap_or_default(),
        next_run: task.next_run.map(|at| local_time(at, zone)).unwrap_or_default(),
        failure_count: task.failure_count,
        created_at: local_time(task.created_at, zone),
        created_by: match task.created_by {
            CreatedBy::User => "user",
            CreatedBy::System => "system",
        }
        .into(),
        description: task.description.clone(),
        timezone: task.timezone.clone(),
        catch_up: String::from(task.catch_up),
        concurrency: match task.concurrency {
            crate::scheduler::Concurrency::Forbid => "forbid",
            crate::scheduler::Concurrency::Allow => "allow",
        }
        .into(),
        retry_interrupted: task.retry_interrupted,
        active_hours: spec.active_hours.clone().unwrap_or_default(),
        timeout_seconds: task.timeout,
        section: task.section.clone().unwrap_or_default(),
    }
}

/// A run as the protocol shows it.
pub fn task_run(row: &crate::scheduler::RunRow, zone: &jiff::tz::TimeZone) -> v1::TaskRun {
    v1::TaskRun {
        run_id: row.run.clone(),
        slot: local_time(row.slot, zone),
        attempt: row.attempt,
        started: row.started.map(|at| local_time(at, zone)).unwrap_or_default(),
        ended: row.ended.map(|at| local_time(at, zone)).unwrap_or_default(),
        outcome: row.outcome.map(|outcome| outcome.as_str().to_string()).unwrap_or_default(),
        missed: row.missed,
        container: row.container.clone().unwrap_or_default(),
        session_id: row.session.clone().unwrap_or_default(),
        tokens: row.tokens,
        error: row.error.clone().unwrap_or_default(),
        result: row.result.clone().unwrap_or_default(),
    }
}

/// A new task from a ScheduleTask request, for `context`, as of `now`: every field checked,
/// each error naming its field and what would do.
pub fn new_task(
    definition: v1::TaskDefinition,
    context: &Context,
    now: jiff::Timestamp,
) -> Result<crate::scheduler::TaskRecord, String> {
    use crate::scheduler::schedule::{self, ScheduleSpec};
    use crate::scheduler::{
        CatchUp, Concurrency, ContextMode, CreatedBy, Notification, TaskKind, TaskRecord, TaskStatus, MOST_PROMPT,
    };
    match definition.r#type.as_str() {
        "" | "scheduled" => {}
        "heartbeat" => return Err("type: heartbeats come from HEARTBEAT.md; edit it instead".into()),
        "system" => return Err("type: system tasks are the daemon's own".into()),
        other => return Err(format!("type: `{other}` is not a task type; use scheduled")),
    }
    let prompt = definition.prompt.trim().to_string();
    if prompt.is_empty() {
        return Err("prompt: say what the agent should do when the task runs".into());
    }
    if prompt.len() > MOST_PROMPT {
        return Err(format!("prompt: {} bytes is too long; keep it under {MOST_PROMPT}", prompt.len()));
    }
    let timezone = definition.timezone.trim().to_string();
    if !timezone.is_empty() {
        schedule::zone(&timezone).map_err(|error| error.to_string())?;
    }
    let active_hours = match definition.active_hours.trim() {
        "" => None,
        text => Some(
            text.parse::<schedule::ActiveHours>()
                .map_err(|error: schedule::ScheduleError| error.to_string())?
                .to_string(),
        ),
    };
    let kind = definition.schedule.and_then(|schedule| schedule.kind).ok_or_else(|| {
        "schedule: give one of cron (\"0 9 * * 1\"), interval_seconds, once (RFC 3339 with offset) or cadence"
            .to_string()
    })?;
    let spec = match kind {
        v1::task_schedule::Kind::Cron(cron) => {
            ScheduleSpec { cron: Some(cron), active_hours: active_hours.clone(), ..ScheduleSpec::default() }
        }
        v1::task_schedule::Kind::IntervalSeconds(every) => {
            let anchor = jiff::Timestamp::from_second(now.as_second()).unwrap_or(now);
            ScheduleSpec { interval: Some(every), anchor: Some(anchor), ..ScheduleSpec::default() }
        }
        v1::task_schedule::Kind::Once(text) => {
            let once: jiff::Timestamp = text.trim().parse().map_err(|_unreadable: jiff::Error| {
                format!(
                    "schedule.once: `{}` is not an RFC 3339 time with its UTC offset (e.g. 2026-03-01T08:00:00+01:00 \
                     or 2026-03-01T07:00:00Z)",
                    text.trim()
                )
            })?;
            ScheduleSpec { once: Some(once), ..ScheduleSpec::default() }
        }
        v1::task_schedule::Kind::Cadence(text) => {
            let cadence: schedule::Cadence =
                text.parse().map_err(|error: schedule::ScheduleError| error.to_string())?;
            schedule::cadence_schedule(cadence, active_hours.as_deref(), &mut schedule::random_below)
        }
    };
    let context_mode = match definition.context_mode.as_str() {
        "" | "isolated" => ContextMode::Isolated,
        "session" => ContextMode::Session,
        "silent" => ContextMode::Silent,
        other => return Err(format!("context_mode: `{other}` is not session, isolated or silent")),
    };
    let notification = match definition.notification {
        Some(notification) => {
            if !crate::profile::is_valid_channel(&notification.channel) {
                return Err(format!(
                    "notification.channel: `{}` is not a channel; use tui, web, slack, slack/dm, slack/CHANNEL or none \
                     (empty: the user's preferred channel)",
                    notification.channel
                ));
            }
            Notification {
                channel: notification.channel,
                on_success: notification.on_success,
                on_failure: notification.on_failure,
            }
        }
        None => Notification { channel: String::new(), on_success: true, on_failure: true },
    };
    let catch_up = CatchUp::try_from(definition.catch_up)?;
    let concurrency = match definition.concurrency.as_str() {
        "" | "forbid" => Concurrency::Forbid,
        "allow" => Concurrency::Allow,
        other => return Err(format!("concurrency: `{other}` is not forbid or allow")),
    };
    let agent = if definition.agent.is_empty() { "worker".to_string() } else { definition.agent };
    let description = match definition.description.trim() {
        "" => crate::scheduler::ledger::shortened(prompt.lines().next().unwrap_or_default(), 80),
        text => crate::scheduler::ledger::shortened(text, 200),
    };
    let (user_id, group_id) = crate::scheduler::owner_ids(context);
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
    crate::scheduler::execute::role_of(&task)?;
    Ok(task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_and_contexts_round_trip() {
        for role in Role::AGENTS.iter().chain([&Role::Tool]) {
            assert_eq!(role_of(role_ref(*role) as i32), Ok(Some(*role)));
        }
        assert_eq!(role_of(0), Ok(None));
        assert!(role_of(99).is_err());
        for context in [Context::user("alice"), Context::group("family")] {
            assert_eq!(context_of(&context_ref(&context)), Ok(context));
        }
        let bad = v1::ContextRef { r#type: v1::ContextType::User as i32, id: "../x".into() };
        assert!(context_of(&bad).is_err());
    }
}
