//! `baaaht tasks`.

use baaaht_proto::v1;

use crate::args::TasksCommand;
use crate::terminal::clean;
use crate::CliError;

/// The user or group a task command names, as the protocol's user_id/group_id.
fn task_owner(user: Option<String>, group: Option<String>) -> (String, String) {
    (user.unwrap_or_default(), group.unwrap_or_default())
}

/// The schedule one of --cron, --every or --at gives (clap lets only one through).
fn schedule_kind(when: crate::args::When) -> Option<v1::task_schedule::Kind> {
    use v1::task_schedule::Kind;
    match (when.cron, when.every, when.at) {
        (Some(cron), None, None) => Some(Kind::Cron(cron)),
        (None, Some(every), None) => Some(Kind::IntervalSeconds(every)),
        (None, None, Some(at)) => Some(Kind::Once(at)),
        _ => None,
    }
}

pub(crate) async fn tasks(
    client: &mut baaaht_proto::client::Client,
    socket: &std::path::Path,
    command: TasksCommand,
) -> Result<(), CliError> {
    use crate::tasks as text;
    let status = |status| CliError::from_status(status, socket);
    match command {
        TasksCommand::List { user, group, kind, status: wanted } => {
            let (user_id, group_id) = task_owner(user, group);
            let filter = v1::TaskFilter {
                user_id,
                group_id,
                r#type: kind.unwrap_or_default(),
                status: wanted.unwrap_or_default(),
                count: 0,
            };
            let list = client.tasks.list_tasks(filter).await.map_err(status)?.into_inner();
            print!("{}", clean(&text::list_text(&list)));
        }
        TasksCommand::Show { id } => {
            let task = client.tasks.get_task(v1::TaskId { id: id.clone() }).await.map_err(status)?.into_inner();
            let filter = v1::TaskFilter {
                user_id: task.user_id.clone(),
                group_id: task.group_id.clone(),
                count: 5,
                ..v1::TaskFilter::default()
            };
            let next = client.tasks.get_next_runs(filter).await.map_err(status)?.into_inner();
            let runs = next.runs.into_iter().find(|run| run.task_id == id).map(|run| run.runs).unwrap_or_default();
            print!("{}", clean(&text::show_text(&task, &runs)));
        }
        TasksCommand::Runs { id, limit } => {
            let runs = client
                .tasks
                .list_task_runs(v1::TaskRunsRequest { task_id: id, limit })
                .await
                .map_err(status)?
                .into_inner();
            print!("{}", clean(&text::runs_text(&runs)));
        }
        TasksCommand::Next { user, group, count } => {
            let (user_id, group_id) = task_owner(user, group);
            let filter = v1::TaskFilter { user_id, group_id, count, ..v1::TaskFilter::default() };
            let next = client.tasks.get_next_runs(filter).await.map_err(status)?.into_inner();
            print!("{}", clean(&text::next_text(&next)));
        }
        TasksCommand::Add {
            prompt,
            user,
            group,
            when,
            description,
            timezone,
            agent,
            mode,
            channel,
            catch_up,
            allow_overlap,
            retry_interrupted,
        } => {
            let Some(kind) = schedule_kind(when) else {
                return Err(CliError::Usage("give exactly one of --cron, --every or --at".into()));
            };
            let env = |key: &str| std::env::var(key).ok();
            let (user_id, group_id) = match (user, group) {
                (None, None) => (crate::chat::login(env), String::new()),
                (user, group) => task_owner(user, group),
            };
            let definition = v1::TaskDefinition {
                r#type: "scheduled".into(),
                user_id,
                group_id,
                schedule: Some(v1::TaskSchedule { kind: Some(kind) }),
                agent,
                prompt,
                context_mode: mode,
                notification: Some(v1::TaskNotification { channel, on_success: true, on_failure: true }),
                description: description.unwrap_or_default(),
                timezone: timezone.unwrap_or_default(),
                catch_up,
                concurrency: if allow_overlap { "allow" } else { "forbid" }.into(),
                retry_interrupted,
                ..v1::TaskDefinition::default()
            };
            let scheduled = client.tasks.schedule_task(definition).await.map_err(status)?.into_inner();
            let task = scheduled.task.unwrap_or_default();
            print!("{}", clean(&text::show_text(&task, &scheduled.next_runs)));
        }
        TasksCommand::Change { id, prompt, description, when, timezone } => {
            let schedule = schedule_kind(when).map(|kind| v1::TaskSchedule { kind: Some(kind) });
            let change = v1::TaskChange { id, prompt, description, schedule, timezone };
            let changed = client.tasks.update_task(change).await.map_err(status)?.into_inner();
            print!("{}", clean(&text::show_text(&changed.task.unwrap_or_default(), &changed.next_runs)));
        }
        TasksCommand::Pause { id } => {
            println!(
                "{}",
                clean(&client.tasks.pause_task(v1::TaskId { id }).await.map_err(status)?.into_inner().message)
            );
        }
        TasksCommand::Resume { id } => {
            println!(
                "{}",
                clean(&client.tasks.resume_task(v1::TaskId { id }).await.map_err(status)?.into_inner().message)
            );
        }
        TasksCommand::Cancel { id } => {
            println!(
                "{}",
                clean(&client.tasks.cancel_task(v1::TaskId { id }).await.map_err(status)?.into_inner().message)
            );
        }
    }
    Ok(())
}
