//! `baaaht tasks` and `baaaht inbox`: scheduled tasks, heartbeats and their runs, and what the
//! daemon kept while no channel was there, as a person reads them.

use std::fmt::Write as _;

use baaaht_proto::v1;

/// A task's schedule in words: `cron 0 9 * * 1`, `every 3600 s`, `once 2026-…`, `daily (17 9 * * *)`.
pub fn schedule_text(task: &v1::TaskDefinition) -> String {
    use v1::task_schedule::Kind;
    match task.schedule.as_ref().and_then(|schedule| schedule.kind.as_ref()) {
        Some(Kind::Cron(cron)) => format!("cron {cron}"),
        Some(Kind::IntervalSeconds(every)) => format!("every {every} s"),
        Some(Kind::Once(at)) => format!("once {at}"),
        Some(Kind::Cadence(cadence)) if task.active_hours.is_empty() => cadence.clone(),
        Some(Kind::Cadence(cadence)) => format!("{cadence}, {}", task.active_hours),
        None => "no schedule".into(),
    }
}

/// One line per task.
pub fn list_text(list: &v1::TaskList) -> String {
    if list.tasks.is_empty() {
        return "no tasks: ask the assistant (\"remind me every Monday at 9 …\"), write HEARTBEAT.md, or `baaaht tasks add`\n"
            .into();
    }
    let mut text = String::new();
    for task in &list.tasks {
        let owner = if !task.group_id.is_empty() {
            format!("group:{}", task.group_id)
        } else if !task.user_id.is_empty() {
            format!("user:{}", task.user_id)
        } else {
            "system".into()
        };
        let next = if task.next_run.is_empty() { "-".to_string() } else { task.next_run.clone() };
        let _ = writeln!(
            text,
            "{:<24} {:<9} {:<9} {:<16} next {:<25} {}  [{}]",
            task.id,
            task.r#type,
            task.status,
            owner,
            next,
            task.description,
            schedule_text(task)
        );
    }
    text
}

/// A task in full.
pub fn show_text(task: &v1::TaskDefinition, next: &[String]) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "{}  \"{}\"", task.id, task.description);
    let mut field = |name: &str, value: &str| {
        if !value.is_empty() {
            let _ = writeln!(text, "  {name:<18}{value}");
        }
    };
    field("type", &task.r#type);
    field("status", &task.status);
    field("user", &task.user_id);
    field("group", &task.group_id);
    field("schedule", &schedule_text(task));
    field("time zone", if task.timezone.is_empty() { "(system)" } else { &task.timezone });
    field("agent", &task.agent);
    field("context mode", &task.context_mode);
    field("catch up", &task.catch_up);
    field("concurrency", &task.concurrency);
    if task.retry_interrupted {
        field("retry interrupted", "yes");
    }
    if task.timeout_seconds > 0 {
        field("timeout", &format!("{} s", task.timeout_seconds));
    }
    if let Some(notification) = &task.notification {
        let channel = if notification.channel.is_empty() { "(preferred)" } else { notification.channel.as_str() };
        let when = match (notification.on_success, notification.on_failure) {
            (true, true) => "results and failures",
            (true, false) => "results",
            (false, true) => "failures",
            (false, false) => "nothing",
        };
        field("tells", &format!("{when} on {channel}"));
    }
    field("last run", &task.last_run);
    field("failures in a row", &task.failure_count.to_string());
    field("created", &format!("{} by {}", task.created_at, task.created_by));
    if !next.is_empty() {
        field("next runs", &next.join("\n                    "));
    }
    if !task.prompt.is_empty() {
        let _ = writeln!(text, "  prompt:\n    {}", task.prompt.replace('\n', "\n    "));
    }
    text
}

/// A task's runs, newest first.
pub fn runs_text(list: &v1::TaskRunList) -> String {
    if list.runs.is_empty() {
        return "no runs yet\n".into();
    }
    let mut text = String::new();
    for run in &list.runs {
        let outcome = if run.outcome.is_empty() { "running" } else { run.outcome.as_str() };
        let attempt = if run.attempt > 1 { format!(" (attempt {})", run.attempt) } else { String::new() };
        let missed = if run.missed > 0 { format!(", {} slot(s) missed", run.missed) } else { String::new() };
        let _ = writeln!(text, "{}  slot {}  {outcome}{attempt}{missed}", run.run_id, run.slot);
        if !run.started.is_empty() {
            let ended = if run.ended.is_empty() { "…".to_string() } else { run.ended.clone() };
            let _ = writeln!(text, "    {} → {}", run.started, ended);
        }
        let mut details = vec![];
        if !run.container.is_empty() {
            details.push(format!("container {}", run.container));
        }
        if !run.session_id.is_empty() {
            details.push(format!("session {}", run.session_id));
        }
        if run.tokens > 0 {
            details.push(format!("{} tokens", run.tokens));
        }
        if !details.is_empty() {
            let _ = writeln!(text, "    {}", details.join(", "));
        }
        if !run.error.is_empty() {
            let _ = writeln!(text, "    error: {}", run.error);
        }
        if !run.result.is_empty() {
            let _ = writeln!(text, "    result: {}", run.result.replace('\n', " "));
        }
    }
    text
}

pub fn next_text(list: &v1::NextRunList) -> String {
    if list.runs.is_empty() {
        return "no tasks\n".into();
    }
    let mut text = String::new();
    for task in &list.runs {
        let _ = writeln!(text, "{}  {}", task.task_id, task.description);
        if task.runs.is_empty() {
            let _ = writeln!(text, "    (no run to come)");
        }
        for run in &task.runs {
            let _ = writeln!(text, "    {run}");
        }
    }
    text
}

/// Inbox items, oldest first.
pub fn inbox_text(list: &v1::InboxList) -> String {
    if list.items.is_empty() {
        return "the inbox is empty\n".into();
    }
    let mut text = String::new();
    for item in &list.items {
        let unread = if item.read { " " } else { "*" };
        let _ = writeln!(text, "{unread} {}  {}", item.at, item.title);
        let _ = writeln!(text, "    {}", item.content.trim().replace('\n', "\n    "));
    }
    text
}

/// A task notice as a chat shows it.
pub fn notice_text(notice: &v1::TaskNotice) -> String {
    let mark = if notice.is_error { "!" } else { "⏰" };
    format!("{mark} {}\n{}\n", notice.title, notice.content.trim())
}
