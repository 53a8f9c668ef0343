//! The user's scheduled tasks in the settings (spec §15.9): their own and their rooms', each
//! with when it runs next, how its last run went, and buttons to pause, resume or cancel it.
//! The daemon decides what the user may see and do; a room's task is any member's to manage,
//! as it is from a chat in that room.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use baaaht_proto::v1;
use serde_json::{json, Value};

use crate::app::{answer, api_error, error, App, User};

/// `GET /api/tasks`: the user's tasks, then each of their rooms', soonest first within each.
pub async fn list(State(app): State<Arc<App>>, user: User) -> Response {
    let me = match app.profile(&user.session, std::time::Duration::ZERO).await {
        Ok(me) => me,
        Err(status) => return api_error(&status),
    };
    let mut daemon = app.daemon.clone();
    let names: Vec<(String, String)> =
        match daemon.admin.list_groups(app.as_user(&user.session, v1::ListGroupsRequest {})).await {
            Ok(groups) => groups.into_inner().groups.into_iter().map(|group| (group.id, group.name)).collect(),
            Err(status) => return api_error(&status),
        };
    let mut places = vec![(String::new(), "you".to_string())];
    for group in &me.groups {
        let name = names.iter().find(|(id, _)| id == group).map_or(group.as_str(), |(_, name)| name.as_str());
        places.push((group.clone(), if name.is_empty() { group.clone() } else { name.to_string() }));
    }
    let mut shown = vec![];
    for (group_id, owner) in places {
        let filter = v1::TaskFilter { group_id: group_id.clone(), ..v1::TaskFilter::default() };
        let tasks = match daemon.tasks.list_tasks(app.as_user(&user.session, filter)).await {
            Ok(list) => list.into_inner().tasks,
            Err(status) => return api_error(&status),
        };
        for task in tasks {
            let runs = v1::TaskRunsRequest { task_id: task.id.clone(), limit: 1 };
            // silent-ok: a task without a readable run shows none.
            let last = daemon.tasks.list_task_runs(app.as_user(&user.session, runs)).await.ok();
            let last = last.and_then(|runs| runs.into_inner().runs.into_iter().next());
            shown.push(shown_task(&task, &owner, &group_id, last.as_ref()));
        }
    }
    Json(json!({"tasks": shown})).into_response()
}

/// What the page shows of a task.
fn shown_task(task: &v1::TaskDefinition, owner: &str, room: &str, last: Option<&v1::TaskRun>) -> Value {
    let schedule = match task.schedule.as_ref().and_then(|schedule| schedule.kind.as_ref()) {
        Some(v1::task_schedule::Kind::Cron(cron)) => format!("cron {cron}"),
        Some(v1::task_schedule::Kind::IntervalSeconds(seconds)) => format!("every {}", every(*seconds)),
        Some(v1::task_schedule::Kind::Once(at)) => format!("once, {at}"),
        Some(v1::task_schedule::Kind::Cadence(cadence)) => cadence.clone(),
        None => String::new(),
    };
    json!({
        "id": task.id,
        "name": if task.description.is_empty() { &task.prompt } else { &task.description },
        "kind": task.r#type,
        "status": task.status,
        "schedule": schedule,
        "next_run": task.next_run,
        "owner": owner,
        "room": room,
        "last": last.map(|run| json!({"outcome": run.outcome, "ended": run.ended, "error": run.error})),
    })
}

/// Seconds as a person says them.
fn every(seconds: u64) -> String {
    match seconds {
        s if s % 86_400 == 0 => format!("{} day(s)", s / 86_400),
        s if s % 3600 == 0 => format!("{} hour(s)", s / 3600),
        s if s % 60 == 0 => format!("{} minute(s)", s / 60),
        s => format!("{s} seconds"),
    }
}

/// `POST /api/tasks/{id}/{pause|resume|cancel}`: the daemon's sentence on what was done.
pub async fn act(State(app): State<Arc<App>>, user: User, Path((id, action)): Path<(String, String)>) -> Response {
    let mut daemon = app.daemon.clone();
    let request = app.as_user(&user.session, v1::TaskId { id });
    let done = match action.as_str() {
        "pause" => daemon.tasks.pause_task(request).await,
        "resume" => daemon.tasks.resume_task(request).await,
        "cancel" => daemon.tasks.cancel_task(request).await,
        other => return error(StatusCode::NOT_FOUND, &format!("`{other}`: a task is paused, resumed or cancelled")),
    };
    answer(done, |ack| json!({"message": ack.message}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_read_as_a_person_says_them() {
        assert_eq!(every(86_400 * 2), "2 day(s)");
        assert_eq!(every(7200), "2 hour(s)");
        assert_eq!(every(600), "10 minute(s)");
        assert_eq!(every(90), "90 seconds");
    }
}
