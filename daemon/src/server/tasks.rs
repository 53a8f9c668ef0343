//! The `Tasks` service: scheduled tasks of a context.

use super::*;

/// Why the task RPCs answer UNIMPLEMENTED.
const NO_SCHEDULER: &str = "the task scheduler is not built yet";

/// The `Tasks` service.
#[derive(Debug, Clone)]
pub(super) struct TasksService {
    pub(super) shared: Arc<Shared>,
}

#[tonic::async_trait]
impl v1::tasks_server::Tasks for TasksService {
    async fn schedule_task(&self, request: Request<v1::TaskDefinition>) -> Result<Response<v1::TaskId>, Status> {
        let context = task_context(&request.get_ref().user_id, &request.get_ref().group_id)?;
        check(&self.shared, &request, Operation::ScheduleTask, context.as_ref(), None)?;
        Err(not_built(Operation::ScheduleTask, NO_SCHEDULER))
    }

    async fn list_tasks(&self, request: Request<v1::TaskFilter>) -> Result<Response<v1::TaskList>, Status> {
        let context = task_context(&request.get_ref().user_id, &request.get_ref().group_id)?;
        check(&self.shared, &request, Operation::ListTasks, context.as_ref(), None)?;
        Err(not_built(Operation::ListTasks, NO_SCHEDULER))
    }

    async fn get_task(&self, request: Request<v1::TaskId>) -> Result<Response<v1::TaskDefinition>, Status> {
        check(&self.shared, &request, Operation::GetTask, None, None)?;
        Err(not_built(Operation::GetTask, NO_SCHEDULER))
    }

    async fn pause_task(&self, request: Request<v1::TaskId>) -> Result<Response<v1::Ack>, Status> {
        check(&self.shared, &request, Operation::PauseTask, None, None)?;
        Err(not_built(Operation::PauseTask, NO_SCHEDULER))
    }

    async fn resume_task(&self, request: Request<v1::TaskId>) -> Result<Response<v1::Ack>, Status> {
        check(&self.shared, &request, Operation::ResumeTask, None, None)?;
        Err(not_built(Operation::ResumeTask, NO_SCHEDULER))
    }

    async fn cancel_task(&self, request: Request<v1::TaskId>) -> Result<Response<v1::Ack>, Status> {
        check(&self.shared, &request, Operation::CancelTask, None, None)?;
        Err(not_built(Operation::CancelTask, NO_SCHEDULER))
    }

    async fn get_next_runs(&self, request: Request<v1::TaskFilter>) -> Result<Response<v1::NextRunList>, Status> {
        let context = task_context(&request.get_ref().user_id, &request.get_ref().group_id)?;
        check(&self.shared, &request, Operation::GetNextRuns, context.as_ref(), None)?;
        Err(not_built(Operation::GetNextRuns, NO_SCHEDULER))
    }
}
