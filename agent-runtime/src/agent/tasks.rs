//! The task tools (spec §15.4, §15.9): the user's reminders and recurring jobs, scheduled,
//! listed, changed, paused, resumed and cancelled by asking, answered by the daemon for this
//! container's own context (which decides what the agent may do).

use baaaht_proto::client::Client;
use baaaht_proto::v1;
use serde_json::{json, Value};

use super::{with_correlation, Hop};

/// The names of the task tools.
const TASK_TOOLS: &[&str] = &["schedule_task", "list_tasks", "change_task", "pause_task", "resume_task", "cancel_task"];

/// Whether `name` is one of the task tools.
pub(super) fn is_task_tool(name: &str) -> bool {
    TASK_TOOLS.contains(&name)
}

/// The schedule fields `schedule_task` and `change_task` take.
fn schedule_properties() -> Value {
    json!({
        "cron": {"type": "string", "description": "5 fields: minute hour day-of-month month day-of-week, e.g. '0 9 * * 1' for Mondays at 09:00"},
        "interval_seconds": {"type": "integer", "minimum": 60},
        "once": {"type": "string", "description": "RFC 3339 time with its UTC offset, e.g. 2026-03-01T08:00:00+01:00"},
        "timezone": {"type": "string", "description": "IANA zone if not the user's, e.g. Europe/Berlin"},
    })
}

/// An object schema: `properties` plus the schedule's when `with_schedule`.
fn parameters(required: &[&str], mut properties: Value, with_schedule: bool) -> Value {
    if with_schedule {
        if let (Some(fields), Value::Object(schedule)) = (properties.as_object_mut(), schedule_properties()) {
            fields.extend(schedule);
        }
    }
    json!({"type": "object", "required": required, "additionalProperties": false, "properties": properties})
}

/// The task tools as the model sees them.
pub(super) fn task_definitions() -> Vec<crate::tools::Definition> {
    let by_id = || {
        parameters(&["id"], json!({"id": {"type": "string", "description": "the task's id, from list_tasks"}}), false)
    };
    vec![
        crate::tools::Definition {
            name: "schedule_task",
            description: "Schedule something to be done later or again and again (\"remind me every Monday at 9\", \
                          \"tomorrow at 8am check the build\"). Give exactly one of cron, interval_seconds or once. \
                          Times are the user's local time unless once carries another offset. The answer lists the \
                          next runs: tell the user when it will happen.",
            parameters: parameters(
                &["prompt"],
                json!({
                    "prompt": {"type": "string", "description": "what the agent should do when it runs, in full sentences"},
                    "description": {"type": "string", "description": "a short name for the task, e.g. 'Monday PR summary'"},
                    "agent": {"type": "string", "enum": ["worker", "researcher", "coder"], "description": "who does it (default worker)"},
                }),
                true,
            ),
        },
        crate::tools::Definition {
            name: "list_tasks",
            description: "List the user's scheduled tasks and heartbeats: id, status (active or paused), name and \
                          next runs.",
            parameters: parameters(&[], json!({}), false),
        },
        crate::tools::Definition {
            name: "change_task",
            description: "Change one of the user's scheduled tasks in place: what it does (prompt), its name \
                          (description) or when it runs (one of cron, interval_seconds or once; timezone). Give only \
                          what changes. The answer lists the next runs: tell the user.",
            parameters: parameters(
                &["id"],
                json!({
                    "id": {"type": "string", "description": "the task's id, from list_tasks"},
                    "prompt": {"type": "string", "description": "what the agent should do when it runs, in full sentences"},
                    "description": {"type": "string", "description": "a short name for the task"},
                }),
                true,
            ),
        },
        crate::tools::Definition {
            name: "pause_task",
            description: "Pause one of the user's scheduled tasks or heartbeats: it does not run until resumed.",
            parameters: by_id(),
        },
        crate::tools::Definition {
            name: "resume_task",
            description: "Resume a paused task from now on (runs missed while paused are not made up).",
            parameters: by_id(),
        },
        crate::tools::Definition {
            name: "cancel_task",
            description: "Cancel (delete) one of the user's scheduled tasks by its id (from list_tasks).",
            parameters: by_id(),
        },
    ]
}

/// The schedule `params` give, if any; more than one is an error.
fn schedule_of(params: &Value) -> Result<Option<v1::TaskSchedule>, String> {
    use v1::task_schedule::Kind;
    let text = |name: &str| params.get(name).and_then(Value::as_str).unwrap_or_default().trim().to_string();
    let mut kinds = vec![];
    if !text("cron").is_empty() {
        kinds.push(Kind::Cron(text("cron")));
    }
    if let Some(every) = params.get("interval_seconds").and_then(Value::as_u64) {
        kinds.push(Kind::IntervalSeconds(every));
    }
    if !text("once").is_empty() {
        kinds.push(Kind::Once(text("once")));
    }
    match kinds.len() {
        0 => Ok(None),
        1 => Ok(Some(v1::TaskSchedule { kind: kinds.pop() })),
        _ => Err("give only one of cron, interval_seconds or once".into()),
    }
}

/// What to tell the model of a task scheduled or changed.
fn told(done: &str, scheduled: v1::ScheduledTask) -> String {
    let task = scheduled.task.unwrap_or_default();
    let status = if task.status == "paused" { " It stays paused until resumed." } else { "" };
    format!(
        "{done} task {} (\"{}\"). Next runs: {}.{status}",
        task.id,
        task.description,
        scheduled.next_runs.join(", ")
    )
}

/// A task tool, answered by the daemon for this container's own context.
pub(super) async fn call(mut client: Client, tool: &str, params: &Value, hop: Hop<'_>) -> (String, bool) {
    let text = |name: &str| params.get(name).and_then(Value::as_str).unwrap_or_default().trim().to_string();
    let given = |name: &str| params.get(name).and_then(Value::as_str).map(|text| text.trim().to_string());
    match tool {
        "schedule_task" => {
            let schedule = match schedule_of(params) {
                Ok(Some(schedule)) => schedule,
                Ok(None) => return ("give one of cron, interval_seconds or once".into(), true),
                Err(why) => return (why, true),
            };
            let request = v1::TaskDefinition {
                r#type: "scheduled".into(),
                schedule: Some(schedule),
                agent: text("agent"),
                prompt: text("prompt"),
                description: text("description"),
                timezone: text("timezone"),
                ..v1::TaskDefinition::default()
            };
            match client.tasks.schedule_task(with_correlation(request, hop)).await {
                Ok(scheduled) => (told("Scheduled", scheduled.into_inner()), false),
                Err(status) => (format!("the task was not scheduled: {}", status.message()), true),
            }
        }
        "change_task" => {
            let schedule = match schedule_of(params) {
                Ok(schedule) => schedule,
                Err(why) => return (why, true),
            };
            let request = v1::TaskChange {
                id: text("id"),
                prompt: given("prompt"),
                description: given("description"),
                schedule,
                timezone: given("timezone"),
            };
            match client.tasks.update_task(with_correlation(request, hop)).await {
                Ok(scheduled) => (told("Changed", scheduled.into_inner()), false),
                Err(status) => (format!("the task was not changed: {}", status.message()), true),
            }
        }
        "list_tasks" => list(client, hop).await,
        _ => {
            let request = v1::TaskId { id: text("id") };
            let (done, verb) = match tool {
                "pause_task" => (client.tasks.pause_task(with_correlation(request, hop)).await, "paused"),
                "resume_task" => (client.tasks.resume_task(with_correlation(request, hop)).await, "resumed"),
                _ => (client.tasks.cancel_task(with_correlation(request, hop)).await, "cancelled"),
            };
            match done {
                Ok(ack) => (ack.into_inner().message, false),
                Err(status) => (format!("the task was not {verb}: {}", status.message()), true),
            }
        }
    }
}

/// `list_tasks`: the context's tasks with their next runs.
async fn list(mut client: Client, hop: Hop<'_>) -> (String, bool) {
    let request = v1::TaskFilter { count: 3, ..v1::TaskFilter::default() };
    let listed = client.tasks.list_tasks(with_correlation(request.clone(), hop)).await;
    let next = client.tasks.get_next_runs(with_correlation(request, hop)).await;
    match (listed, next) {
        (Ok(listed), Ok(next)) => {
            let next = next.into_inner().runs;
            let lines: Vec<String> = listed
                .into_inner()
                .tasks
                .iter()
                .map(|task| {
                    let runs = next.iter().find(|run| run.task_id == task.id).map(|run| run.runs.join(", "));
                    format!(
                        "- {} [{} {}] \"{}\" next: {}",
                        task.id,
                        task.r#type,
                        task.status,
                        task.description,
                        runs.filter(|runs| !runs.is_empty()).unwrap_or_else(|| "none".into())
                    )
                })
                .collect();
            if lines.is_empty() {
                ("No tasks.".into(), false)
            } else {
                (lines.join("\n"), false)
            }
        }
        (Err(status), _) | (_, Err(status)) => (format!("cannot list the tasks: {}", status.message()), true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_is_one_of_cron_interval_or_once() {
        assert_eq!(schedule_of(&json!({})).expect("none"), None);
        let cron = schedule_of(&json!({"cron": "0 9 * * 1"})).expect("reads").expect("a cron");
        assert_eq!(cron.kind, Some(v1::task_schedule::Kind::Cron("0 9 * * 1".into())));
        let twice = schedule_of(&json!({"cron": "0 9 * * 1", "interval_seconds": 600}));
        assert_eq!(twice.expect_err("two"), "give only one of cron, interval_seconds or once");
    }

    #[test]
    fn every_task_tool_is_defined_and_known() {
        let names: Vec<&str> = task_definitions().iter().map(|definition| definition.name).collect();
        assert_eq!(names, TASK_TOOLS);
        for definition in task_definitions() {
            assert_eq!(definition.parameters["type"], "object", "{}", definition.name);
        }
    }
}
