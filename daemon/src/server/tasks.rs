//! The `Tasks` service: a context's scheduled tasks (spec §15.9). A user manages their own
//! context's (and their groups') tasks; admins and the host any; agents their own context's.

use super::*;
use crate::base::auth::ContextKind;
use crate::drive::scheduler::{agent_may_schedule, changed_task, AgentScheduling};
use crate::drive::scheduler::{Filter, SchedulerError, TaskKind, TaskRecord, TaskStatus};

/// The `Tasks` service.
#[derive(Debug, Clone)]
pub(super) struct TasksService {
    pub(super) shared: Arc<Shared>,
}

fn status_of(error: SchedulerError) -> Status {
    match error {
        SchedulerError::Invalid(_)
        | SchedulerError::Schedule(_)
        | SchedulerError::HeartbeatType
        | SchedulerError::SystemType
        | SchedulerError::Type(_)
        | SchedulerError::NoPrompt
        | SchedulerError::LongPrompt(_)
        | SchedulerError::NoSchedule
        | SchedulerError::Once { .. }
        | SchedulerError::ContextMode(_)
        | SchedulerError::Channel(_)
        | SchedulerError::Concurrency(_)
        | SchedulerError::Agent(_)
        | SchedulerError::OtherContext(_) => Status::invalid_argument(error.to_string()),
        SchedulerError::Policy(_) => Status::permission_denied(error.to_string()),
        SchedulerError::NotFound(_) => Status::not_found(error.to_string()),
        SchedulerError::TooMany(_) => Status::resource_exhausted(error.to_string()),
        SchedulerError::Over { .. }
        | SchedulerError::Finished { .. }
        | SchedulerError::RanAlready { .. }
        | SchedulerError::Unreadable { .. }
        | SchedulerError::NoSlot { .. } => Status::failed_precondition(error.to_string()),
        SchedulerError::State(_) => Status::internal(error.to_string()),
    }
}

impl TasksService {
    fn zone_of(&self, task: &TaskRecord) -> jiff::tz::TimeZone {
        self.shared.scheduler.display_zone(task)
    }

    fn definition(&self, task: &TaskRecord) -> v1::TaskDefinition {
        crate::server::to_wire::task_definition(task, &self.zone_of(task))
    }

    /// The task `id` names, if the caller may `operation` it: its context's, or (a system
    /// task) the host's and admins'.
    fn authorized<T>(&self, request: &Request<T>, operation: Operation, id: &str) -> Result<TaskRecord, Status> {
        valid_id(id, "id")?;
        let task = self.shared.scheduler.get(id).ok_or_else(|| status_of(SchedulerError::NotFound(id.to_string())))?;
        let context = task.context();
        let caller = check(&self.shared, request, operation, context.as_ref(), None)?;
        if context.is_none() && matches!(caller, Caller::Container(_)) {
            // Tasks of no context (the system's) are nobody's agent's business.
            return Err(Status::permission_denied(format!(
                "{}: an agent manages its own context's tasks",
                operation.name()
            )));
        }
        Ok(task)
    }

    /// Whether the caller, if an agent, may have `task` run: not from a turn that read
    /// untrusted content, and no task that could do more than itself.
    fn agent_may_schedule(
        &self,
        task: &TaskRecord,
        caller: &Caller,
        live: Option<&crate::base::auth::Live>,
    ) -> Result<(), Status> {
        let Caller::Container(identity) = caller else { return Ok(()) };
        let (taints, audit) = (&self.shared.taints, &self.shared.audit);
        agent_may_schedule(task, identity, live, taints, audit, caller).map_err(|error| match error {
            AgentScheduling::Refused(why) => Status::permission_denied(why),
            AgentScheduling::Beyond(why) => Status::permission_denied(why.to_string()),
            AgentScheduling::Invalid(why) => Status::invalid_argument(why.to_string()),
        })
    }

    /// An agent pauses, resumes or cancels a task only from a turn that read nothing from
    /// outside: each is a change of what will run for the person, as scheduling is.
    fn agent_may_change<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let (Caller::Container(_), Some(live)) = (caller(request)?, super::live_turn(request)) else { return Ok(()) };
        self.shared.taints.allow(&live, crate::net::taint::Way::ScheduleTask).map_err(Status::permission_denied)
    }

    /// `task` as the caller sees it scheduled, with its next five runs.
    fn scheduled(&self, task: &TaskRecord) -> Result<Response<v1::ScheduledTask>, Status> {
        let zone = self.zone_of(task);
        let next_runs = self
            .shared
            .scheduler
            .upcoming(&task.id, 5)
            .map_err(status_of)?
            .into_iter()
            .map(|at| crate::server::to_wire::local_time(at, &zone))
            .collect();
        Ok(Response::new(v1::ScheduledTask { task: Some(self.definition(task)), next_runs }))
    }

    /// The filter a list request stands for: the context it names (or the caller's own, for
    /// agents and gateways); the host and admins see every task when none is named.
    fn filter<T>(&self, request: &Request<T>, operation: Operation, filter: &v1::TaskFilter) -> Result<Filter, Status> {
        let named = task_context(&filter.user_id, &filter.group_id)?;
        let context = match (named, caller(request)?) {
            (Some(context), _) => Some(context),
            (None, Caller::Host(_)) => None,
            // Agents and gateways' users mean their own; an admin naming nobody sees all.
            (None, caller) => own_context(&caller, None).ok(),
        };
        check(&self.shared, request, operation, context.as_ref(), None)?;
        let kind = match filter.r#type.as_str() {
            "" => None,
            "heartbeat" => Some(TaskKind::Heartbeat),
            "scheduled" => Some(TaskKind::Scheduled),
            "system" => Some(TaskKind::System),
            other => {
                return Err(Status::invalid_argument(format!("type: `{other}` is not heartbeat, scheduled or system")))
            }
        };
        let status = match filter.status.as_str() {
            "" => None,
            "active" => Some(TaskStatus::Active),
            "paused" => Some(TaskStatus::Paused),
            "completed" => Some(TaskStatus::Completed),
            "failed" => Some(TaskStatus::Failed),
            other => {
                return Err(Status::invalid_argument(format!(
                    "status: `{other}` is not active, paused, completed or failed"
                )))
            }
        };
        Ok(Filter { context, kind, status })
    }
}

#[tonic::async_trait]
impl v1::tasks_server::Tasks for TasksService {
    async fn schedule_task(&self, request: Request<v1::TaskDefinition>) -> Result<Response<v1::ScheduledTask>, Status> {
        let named = task_context(&request.get_ref().user_id, &request.get_ref().group_id)?;
        let context = own_context(&caller(&request)?, named)?;
        check(&self.shared, &request, Operation::ScheduleTask, Some(&context), None)?;
        if context.kind == ContextKind::Group {
            self.shared
                .groups
                .accepts_messages(&context.id)
                .map_err(|error| Status::failed_precondition(error.to_string()))?;
        }
        let now = self.shared.scheduler.now();
        let (caller, live) = (caller(&request)?, super::live_turn(&request));
        let task = crate::drive::scheduler::new_task(
            crate::server::from_wire::task_request(request.into_inner()),
            &context,
            now,
        )
        .map_err(|error| Status::invalid_argument(error.to_string()))?;
        self.agent_may_schedule(&task, &caller, live.as_ref())?;
        let task = self.shared.scheduler.add(task).map_err(status_of)?;
        self.scheduled(&task)
    }

    async fn update_task(&self, request: Request<v1::TaskChange>) -> Result<Response<v1::ScheduledTask>, Status> {
        let task = self.authorized(&request, Operation::UpdateTask, &request.get_ref().id)?;
        let (caller, live) = (caller(&request)?, super::live_turn(&request));
        let change = crate::server::from_wire::task_change(request.into_inner());
        let changed = changed_task(&task, change, self.shared.scheduler.now()).map_err(status_of)?;
        // A changed prompt is a new order: an agent changes only what it could schedule.
        self.agent_may_schedule(&changed, &caller, live.as_ref())?;
        let task = self.shared.scheduler.update(changed).map_err(status_of)?;
        self.scheduled(&task)
    }

    async fn list_tasks(&self, request: Request<v1::TaskFilter>) -> Result<Response<v1::TaskList>, Status> {
        let filter = self.filter(&request, Operation::ListTasks, request.get_ref())?;
        let tasks = self.shared.scheduler.list(&filter).iter().map(|task| self.definition(task)).collect();
        Ok(Response::new(v1::TaskList { tasks }))
    }

    async fn get_task(&self, request: Request<v1::TaskId>) -> Result<Response<v1::TaskDefinition>, Status> {
        let task = self.authorized(&request, Operation::GetTask, &request.get_ref().id)?;
        Ok(Response::new(self.definition(&task)))
    }

    async fn pause_task(&self, request: Request<v1::TaskId>) -> Result<Response<v1::Ack>, Status> {
        let task = self.authorized(&request, Operation::PauseTask, &request.get_ref().id)?;
        self.agent_may_change(&request)?;
        self.shared.scheduler.pause(&task.id).map_err(status_of)?;
        Ok(Response::new(v1::Ack { message: format!("task {} paused", task.id) }))
    }

    async fn resume_task(&self, request: Request<v1::TaskId>) -> Result<Response<v1::Ack>, Status> {
        let task = self.authorized(&request, Operation::ResumeTask, &request.get_ref().id)?;
        self.agent_may_change(&request)?;
        let resumed = self.shared.scheduler.resume(&task.id).map_err(status_of)?;
        let next = resumed
            .next_run
            .map(|at| crate::server::to_wire::local_time(at, &self.zone_of(&resumed)))
            .unwrap_or_default();
        Ok(Response::new(v1::Ack { message: format!("task {} resumed; next run {next}", task.id) }))
    }

    async fn cancel_task(&self, request: Request<v1::TaskId>) -> Result<Response<v1::Ack>, Status> {
        let task = self.authorized(&request, Operation::CancelTask, &request.get_ref().id)?;
        self.agent_may_change(&request)?;
        if task.kind == TaskKind::Heartbeat {
            return Err(Status::failed_precondition(format!(
                "task {} is a heartbeat from HEARTBEAT.md: remove its section there (or pause it)",
                task.id
            )));
        }
        if task.kind == TaskKind::System {
            return Err(Status::failed_precondition(format!("task {} is the daemon's own; pause it instead", task.id)));
        }
        self.shared.scheduler.cancel(&task.id).map_err(status_of)?;
        Ok(Response::new(v1::Ack { message: format!("task {} cancelled", task.id) }))
    }

    async fn get_next_runs(&self, request: Request<v1::TaskFilter>) -> Result<Response<v1::NextRunList>, Status> {
        let filter = self.filter(&request, Operation::GetNextRuns, request.get_ref())?;
        let count = (request.get_ref().count as usize).clamp(1, 50);
        let mut runs = vec![];
        for task in self.shared.scheduler.list(&filter) {
            let zone = self.zone_of(&task);
            // silent-ok: a task cancelled meanwhile has no runs to come.
            let upcoming = self.shared.scheduler.upcoming(&task.id, count).unwrap_or_default();
            runs.push(v1::NextRun {
                task_id: task.id.clone(),
                description: task.description.clone(),
                runs: upcoming.into_iter().map(|at| crate::server::to_wire::local_time(at, &zone)).collect(),
            });
        }
        Ok(Response::new(v1::NextRunList { runs }))
    }

    async fn list_task_runs(&self, request: Request<v1::TaskRunsRequest>) -> Result<Response<v1::TaskRunList>, Status> {
        let id = request.get_ref().task_id.clone();
        let limit = match request.get_ref().limit {
            0 => 20,
            limit => (limit as usize).min(1000),
        };
        // A cancelled task's runs stay readable by the host and admins (its context is gone).
        let zone = match self.shared.scheduler.get(&id) {
            Some(_) => {
                let task = self.authorized(&request, Operation::ListTaskRuns, &id)?;
                self.zone_of(&task)
            }
            None => {
                valid_id(&id, "task_id")?;
                if let Caller::Container(_) = check(&self.shared, &request, Operation::ListTaskRuns, None, None)? {
                    return Err(status_of(SchedulerError::NotFound(id)));
                }
                self.shared.scheduler.default_zone().clone()
            }
        };
        let rows = self.shared.scheduler.runs(&id, limit);
        if rows.is_empty() && self.shared.scheduler.get(&id).is_none() {
            return Err(status_of(SchedulerError::NotFound(id)));
        }
        Ok(Response::new(v1::TaskRunList {
            runs: rows.iter().map(|row| crate::server::to_wire::task_run(row, &zone)).collect(),
        }))
    }
}
