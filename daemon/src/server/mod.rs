//! The gRPC surface of the daemon: the `Orchestrator` service on every socket.
//!
//! Handlers are thin: convert the request to domain types, authorize it, call a subsystem,
//! convert back. Only this module (and its children) sees tonic and prost types. RPCs whose
//! subsystem is not built yet authorize first, then answer UNIMPLEMENTED with a sentence.

pub mod layer;
pub mod listeners;

use std::sync::Arc;

use baaaht_proto::v1;
use baaaht_proto::v1::orchestrator_server::Orchestrator;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use crate::auth::{authorize, AuthError, Caller, Context, ContextKind, Operation, Target};
use crate::container::EngineStatus;
use crate::Shared;

impl From<AuthError> for Status {
    fn from(error: AuthError) -> Status {
        if error.is_unauthenticated() {
            Status::unauthenticated(error.to_string())
        } else {
            Status::permission_denied(error.to_string())
        }
    }
}

/// The `Orchestrator` service.
#[derive(Debug, Clone)]
pub struct OrchestratorService {
    shared: Arc<Shared>,
}

impl OrchestratorService {
    pub fn new(shared: Arc<Shared>) -> OrchestratorService {
        OrchestratorService { shared }
    }
}

fn caller<T>(request: &Request<T>) -> Result<Caller, Status> {
    // The layer authenticates every request before it gets here.
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::internal("request reached a handler without an authenticated caller"))
}

fn context_of(reference: Option<&v1::ContextRef>, field: &str) -> Result<Option<Context>, Status> {
    let Some(reference) = reference else { return Ok(None) };
    let kind = match v1::ContextType::try_from(reference.r#type) {
        Ok(v1::ContextType::User) => ContextKind::User,
        Ok(v1::ContextType::Group) => ContextKind::Group,
        _ => {
            return Err(Status::invalid_argument(format!(
                "{field}.type must be CONTEXT_TYPE_USER or CONTEXT_TYPE_GROUP"
            )))
        }
    };
    if !crate::auth::is_valid_context_id(&reference.id) {
        return Err(Status::invalid_argument(format!(
            "{field}.id `{}` is not a valid id: use 1-128 letters, digits, `.`, `_` or `-`",
            reference.id.escape_debug()
        )));
    }
    Ok(Some(Context { kind, id: reference.id.clone() }))
}

/// Authorizes `operation` for the caller of `request` on what it names.
fn check<T>(
    request: &Request<T>,
    operation: Operation,
    context: Option<&Context>,
    session_id: Option<&str>,
) -> Result<Caller, Status> {
    let caller = caller(request)?;
    authorize(&caller, operation, Target { context, session_id }).map_err(|error| {
        tracing::warn!(%error, operation = operation.name(), "request denied");
        Status::from(error)
    })?;
    Ok(caller)
}

fn not_built(operation: Operation, missing: &str) -> Status {
    Status::unimplemented(format!(
        "{} is not available in baaahtd {} yet: {missing}",
        operation.name(),
        env!("CARGO_PKG_VERSION")
    ))
}

const NO_AGENTS: &str = "the agent runtime and orchestration are not built yet";
const NO_TOOLS: &str = "tool execution and the web egress proxy are not built yet";
const NO_LLM: &str = "the LLM gateway is not built yet";
const NO_SCHEDULER: &str = "the task scheduler is not built yet";
const NO_SKILLS: &str = "the skill store is not built yet";
const NO_SESSIONS: &str = "the session store and channel streaming are not built yet";

#[tonic::async_trait]
impl Orchestrator for OrchestratorService {
    async fn register_agent(
        &self,
        request: Request<v1::AgentRegistration>,
    ) -> Result<Response<v1::AgentConfig>, Status> {
        check(&request, Operation::RegisterAgent, None, None)?;
        Err(not_built(Operation::RegisterAgent, NO_AGENTS))
    }

    async fn report_status(&self, request: Request<v1::AgentStatus>) -> Result<Response<v1::Ack>, Status> {
        check(&request, Operation::ReportStatus, None, None)?;
        Err(not_built(Operation::ReportStatus, NO_AGENTS))
    }

    async fn send_message(&self, request: Request<v1::OutboundMessage>) -> Result<Response<v1::Ack>, Status> {
        let context = context_of(request.get_ref().target_context.as_ref(), "target_context")?;
        check(&request, Operation::SendMessage, context.as_ref(), None)?;
        Err(not_built(Operation::SendMessage, NO_TOOLS))
    }

    async fn route_to_agent(
        &self,
        request: Request<v1::AgentRoutingRequest>,
    ) -> Result<Response<v1::AgentRoutingResponse>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        check(&request, Operation::RouteToAgent, context.as_ref(), Some(&request.get_ref().session_id))?;
        Err(not_built(Operation::RouteToAgent, NO_AGENTS))
    }

    async fn delegate_to_agent(
        &self,
        request: Request<v1::DelegateRequest>,
    ) -> Result<Response<v1::DelegateResponse>, Status> {
        check(&request, Operation::DelegateToAgent, None, None)?;
        Err(not_built(Operation::DelegateToAgent, NO_AGENTS))
    }

    async fn request_tool_execution(
        &self,
        request: Request<v1::ToolRequest>,
    ) -> Result<Response<v1::ToolResponse>, Status> {
        check(&request, Operation::RequestToolExecution, None, None)?;
        Err(not_built(Operation::RequestToolExecution, NO_TOOLS))
    }

    async fn proxy_web_request(
        &self,
        request: Request<v1::WebProxyRequest>,
    ) -> Result<Response<v1::WebProxyResponse>, Status> {
        check(&request, Operation::ProxyWebRequest, None, None)?;
        Err(not_built(Operation::ProxyWebRequest, NO_TOOLS))
    }

    type StreamLLMStream = BoxStream<v1::LlmEvent>;

    async fn stream_llm(&self, request: Request<v1::LlmRequest>) -> Result<Response<Self::StreamLLMStream>, Status> {
        check(&request, Operation::StreamLlm, None, None)?;
        Err(not_built(Operation::StreamLlm, NO_LLM))
    }

    async fn schedule_task(&self, request: Request<v1::TaskDefinition>) -> Result<Response<v1::TaskId>, Status> {
        let context = task_context(&request.get_ref().user_id, &request.get_ref().group_id)?;
        check(&request, Operation::ScheduleTask, context.as_ref(), None)?;
        Err(not_built(Operation::ScheduleTask, NO_SCHEDULER))
    }

    async fn list_tasks(&self, request: Request<v1::TaskFilter>) -> Result<Response<v1::TaskList>, Status> {
        let context = task_context(&request.get_ref().user_id, &request.get_ref().group_id)?;
        check(&request, Operation::ListTasks, context.as_ref(), None)?;
        Err(not_built(Operation::ListTasks, NO_SCHEDULER))
    }

    async fn get_task(&self, request: Request<v1::TaskId>) -> Result<Response<v1::TaskDefinition>, Status> {
        check(&request, Operation::GetTask, None, None)?;
        Err(not_built(Operation::GetTask, NO_SCHEDULER))
    }

    async fn pause_task(&self, request: Request<v1::TaskId>) -> Result<Response<v1::Ack>, Status> {
        check(&request, Operation::PauseTask, None, None)?;
        Err(not_built(Operation::PauseTask, NO_SCHEDULER))
    }

    async fn resume_task(&self, request: Request<v1::TaskId>) -> Result<Response<v1::Ack>, Status> {
        check(&request, Operation::ResumeTask, None, None)?;
        Err(not_built(Operation::ResumeTask, NO_SCHEDULER))
    }

    async fn cancel_task(&self, request: Request<v1::TaskId>) -> Result<Response<v1::Ack>, Status> {
        check(&request, Operation::CancelTask, None, None)?;
        Err(not_built(Operation::CancelTask, NO_SCHEDULER))
    }

    async fn get_next_runs(&self, request: Request<v1::TaskFilter>) -> Result<Response<v1::NextRunList>, Status> {
        let context = task_context(&request.get_ref().user_id, &request.get_ref().group_id)?;
        check(&request, Operation::GetNextRuns, context.as_ref(), None)?;
        Err(not_built(Operation::GetNextRuns, NO_SCHEDULER))
    }

    async fn get_skill_manifest(
        &self,
        request: Request<v1::SkillManifestRequest>,
    ) -> Result<Response<v1::SkillManifest>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        check(&request, Operation::GetSkillManifest, context.as_ref(), None)?;
        Err(not_built(Operation::GetSkillManifest, NO_SKILLS))
    }

    async fn get_skill_content(
        &self,
        request: Request<v1::SkillContentRequest>,
    ) -> Result<Response<v1::SkillContent>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        check(&request, Operation::GetSkillContent, context.as_ref(), None)?;
        Err(not_built(Operation::GetSkillContent, NO_SKILLS))
    }

    type SubscribeEventsStream = BoxStream<v1::OrchestratorEvent>;

    async fn subscribe_events(
        &self,
        request: Request<v1::EventSubscription>,
    ) -> Result<Response<Self::SubscribeEventsStream>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        check(&request, Operation::SubscribeEvents, context.as_ref(), Some(&request.get_ref().session_id))?;
        Err(not_built(Operation::SubscribeEvents, NO_SESSIONS))
    }

    async fn publish_event(&self, request: Request<v1::ChannelEvent>) -> Result<Response<v1::Ack>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        check(&request, Operation::PublishEvent, context.as_ref(), None)?;
        Err(not_built(Operation::PublishEvent, NO_SESSIONS))
    }

    async fn get_status(&self, request: Request<v1::StatusRequest>) -> Result<Response<v1::StatusResponse>, Status> {
        check(&request, Operation::GetStatus, None, None)?;
        Ok(Response::new(status_response(&self.shared)))
    }

    async fn send_user_message(
        &self,
        request: Request<v1::UserMessage>,
    ) -> Result<Response<v1::SendUserMessageResponse>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        check(&request, Operation::SendUserMessage, context.as_ref(), Some(&request.get_ref().session_id))?;
        Err(not_built(Operation::SendUserMessage, NO_SESSIONS))
    }

    async fn list_sessions(&self, request: Request<v1::SessionFilter>) -> Result<Response<v1::SessionList>, Status> {
        check(&request, Operation::ListSessions, None, None)?;
        Err(not_built(Operation::ListSessions, NO_SESSIONS))
    }

    async fn read_session(
        &self,
        request: Request<v1::ReadSessionRequest>,
    ) -> Result<Response<v1::SessionTranscript>, Status> {
        check(&request, Operation::ReadSession, None, Some(&request.get_ref().session_id))?;
        Err(not_built(Operation::ReadSession, NO_SESSIONS))
    }

    async fn new_session(
        &self,
        request: Request<v1::NewSessionRequest>,
    ) -> Result<Response<v1::SessionHeader>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        check(&request, Operation::NewSession, context.as_ref(), None)?;
        Err(not_built(Operation::NewSession, NO_SESSIONS))
    }

    async fn resume_session(&self, request: Request<v1::SessionRef>) -> Result<Response<v1::SessionHeader>, Status> {
        check(&request, Operation::ResumeSession, None, Some(&request.get_ref().session_id))?;
        Err(not_built(Operation::ResumeSession, NO_SESSIONS))
    }

    async fn fork_session(
        &self,
        request: Request<v1::ForkSessionRequest>,
    ) -> Result<Response<v1::SessionHeader>, Status> {
        check(&request, Operation::ForkSession, None, Some(&request.get_ref().session_id))?;
        Err(not_built(Operation::ForkSession, NO_SESSIONS))
    }

    async fn archive_session(&self, request: Request<v1::SessionRef>) -> Result<Response<v1::Ack>, Status> {
        check(&request, Operation::ArchiveSession, None, Some(&request.get_ref().session_id))?;
        Err(not_built(Operation::ArchiveSession, NO_SESSIONS))
    }

    async fn compact_session(&self, request: Request<v1::SessionRef>) -> Result<Response<v1::Ack>, Status> {
        check(&request, Operation::CompactSession, None, Some(&request.get_ref().session_id))?;
        Err(not_built(Operation::CompactSession, NO_SESSIONS))
    }

    async fn switch_model(&self, request: Request<v1::SwitchModelRequest>) -> Result<Response<v1::Ack>, Status> {
        check(&request, Operation::SwitchModel, None, Some(&request.get_ref().session_id))?;
        Err(not_built(Operation::SwitchModel, NO_SESSIONS))
    }
}

/// The context a task request names: its group when set, else its user.
fn task_context(user_id: &str, group_id: &str) -> Result<Option<Context>, Status> {
    let (kind, id, field) = match (user_id.is_empty(), group_id.is_empty()) {
        (_, false) => (v1::ContextType::Group, group_id, "group_id"),
        (false, true) => (v1::ContextType::User, user_id, "user_id"),
        (true, true) => return Ok(None),
    };
    context_of(Some(&v1::ContextRef { r#type: kind as i32, id: id.to_string() }), field)
}

fn status_response(shared: &Shared) -> v1::StatusResponse {
    let mut degraded = vec![];
    let engine_status = shared.engine.borrow().clone();
    if let Some(reason) = engine_status.degraded_reason() {
        degraded.push(reason);
    }
    let engine = match &engine_status {
        EngineStatus::Ready(info) => v1::EngineStatus {
            kind: info.kind.as_str().into(),
            endpoint: info.socket.display().to_string(),
            version: info.version.clone(),
            healthy: true,
            message: format!("Engine API {}", info.api_version),
        },
        other => v1::EngineStatus {
            kind: "none".into(),
            endpoint: String::new(),
            version: String::new(),
            healthy: false,
            message: other.degraded_reason().unwrap_or_default(),
        },
    };
    let counts = match crate::sessions::counts(&shared.data_dir.state_dir()) {
        Ok(counts) => counts,
        Err(error) => {
            tracing::warn!(%error, "cannot read the session index");
            degraded.push(format!("sessions: {error}"));
            crate::sessions::SessionCounts::default()
        }
    };
    v1::StatusResponse {
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_seconds: shared.metrics.uptime().as_secs(),
        data_dir: shared.data_dir.root().display().to_string(),
        engine: Some(engine),
        sessions_active: counts.active,
        sessions_idle: counts.idle,
        sessions_archived: counts.archived,
        containers_running: u32::try_from(shared.listeners.container_count()).unwrap_or(u32::MAX),
        metrics_address: shared.metrics_address.map(|address| address.to_string()).unwrap_or_default(),
        pid: std::process::id(),
        degraded,
    }
}
