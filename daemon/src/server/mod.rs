//! The gRPC surface of the daemon: the `Orchestrator` service on every socket.
//!
//! Handlers are thin: convert the request to domain types, authorize it, call a subsystem,
//! convert back. Only this module (and its children) sees tonic and prost types. RPCs whose
//! subsystem is not built yet authorize first, then answer UNIMPLEMENTED with a sentence.

pub mod layer;
mod llm;
pub mod memory;
mod sessions;
mod tools;

use std::sync::Arc;

use baaaht_proto::v1;
use baaaht_proto::v1::orchestrator_server::Orchestrator;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use crate::auth::{authorize, AuthError, Caller, Context, Operation, Target};
use crate::container::manager::{ContainerError, RunRequest, BINARIES_MOUNT};
use crate::container::EngineStatus;
use crate::Shared;

impl From<ContainerError> for Status {
    fn from(error: ContainerError) -> Status {
        match error {
            ContainerError::Unavailable(reason) => Status::unavailable(reason),
            ContainerError::StartFailed { .. } => Status::failed_precondition(error.to_string()),
            other => Status::internal(baaaht_proto::error_chain(&other)),
        }
    }
}

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

pub use crate::convert::{context_ref, role_ref};

fn context_of(reference: Option<&v1::ContextRef>, field: &str) -> Result<Option<Context>, Status> {
    let Some(reference) = reference else { return Ok(None) };
    crate::convert::context_of(reference).map(Some).map_err(|why| Status::invalid_argument(format!("{field}.{why}")))
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

/// A long-lived stream (an agent's turns, a runner's calls, a client's events) that ends the
/// moment the daemon starts shutting down: only calls that are really in flight are drained.
fn until_shutdown<T, S>(shared: &Shared, stream: S) -> BoxStream<T>
where
    S: tokio_stream::Stream<Item = Result<T, Status>> + Send + 'static,
    T: Send + 'static,
{
    Box::pin(UntilShutdown { stream: Box::pin(stream), shutdown: Box::pin(shared.shutdown.clone().cancelled_owned()) })
}

/// See [`until_shutdown`].
struct UntilShutdown<T> {
    stream: BoxStream<T>,
    shutdown: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
}

impl<T> tokio_stream::Stream for UntilShutdown<T> {
    type Item = Result<T, Status>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if std::future::Future::poll(self.shutdown.as_mut(), cx).is_ready() {
            return std::task::Poll::Ready(None);
        }
        self.stream.as_mut().poll_next(cx)
    }
}

fn not_built(operation: Operation, missing: &str) -> Status {
    Status::unimplemented(format!(
        "{} is not available in baaahtd {} yet: {missing}",
        operation.name(),
        env!("CARGO_PKG_VERSION")
    ))
}

const NO_SCHEDULER: &str = "the task scheduler is not built yet";

#[tonic::async_trait]
impl Orchestrator for OrchestratorService {
    async fn register_agent(
        &self,
        request: Request<v1::AgentRegistration>,
    ) -> Result<Response<v1::AgentConfig>, Status> {
        let caller = check(&request, Operation::RegisterAgent, None, None)?;
        let Caller::Container(identity) = caller else {
            return Err(Status::permission_denied("RegisterAgent is for agent containers"));
        };
        tracing::info!(container = %identity.name, role = identity.role.as_str(), version = %request.get_ref().runtime_version, "agent registered");
        Ok(Response::new(crate::convert::agent_config(crate::orchestrator::agent_setup(&self.shared, &identity))))
    }

    type TakeTurnsStream = BoxStream<v1::AgentTurn>;

    async fn take_turns(
        &self,
        request: Request<tonic::Streaming<v1::AgentReport>>,
    ) -> Result<Response<Self::TakeTurnsStream>, Status> {
        let caller = check(&request, Operation::TakeTurns, None, None)?;
        let Caller::Container(identity) = caller else {
            return Err(Status::permission_denied("TakeTurns is for agent containers"));
        };
        let turns = self.shared.agents.attach(&identity, request.into_inner());
        let turns = tokio_stream::StreamExt::map(tokio_stream::wrappers::ReceiverStream::new(turns), Ok);
        Ok(Response::new(until_shutdown(&self.shared, turns)))
    }

    async fn report_status(&self, request: Request<v1::AgentStatus>) -> Result<Response<v1::Ack>, Status> {
        let caller = check(&request, Operation::ReportStatus, None, None)?;
        let status = request.into_inner();
        if let Caller::Container(identity) = caller {
            tracing::info!(container = %identity.name, state = %status.state, message = %status.message, "agent status");
        }
        Ok(Response::new(v1::Ack { message: "noted".into() }))
    }

    async fn send_message(&self, request: Request<v1::OutboundMessage>) -> Result<Response<v1::Ack>, Status> {
        let context = context_of(request.get_ref().target_context.as_ref(), "target_context")?;
        let caller = check(&request, Operation::SendMessage, context.as_ref(), None)?;
        let Caller::Container(identity) = caller else {
            return Err(Status::permission_denied("SendMessage is for Worker and Heartbeat containers"));
        };
        let message = request.into_inner();
        if message.content.trim().is_empty() {
            return Err(Status::invalid_argument("content: the message is empty"));
        }
        let live = self.shared.agents.live(&identity.name);
        let event = v1::OrchestratorEvent {
            session_id: identity.session_id.clone(),
            turn_id: live.as_ref().map(|live| live.user_turn.clone()).unwrap_or_default(),
            correlation_id: live.map(|live| live.correlation_id).unwrap_or_default(),
            event: Some(v1::orchestrator_event::Event::Message(v1::OutboundMessage {
                target_context: Some(context_ref(&identity.context)),
                ..message
            })),
        };
        let reached = self.shared.events.publish(&identity.context, event);
        Ok(Response::new(v1::Ack { message: format!("sent to {reached} channel(s)") }))
    }

    async fn route_to_agent(
        &self,
        request: Request<v1::AgentRoutingRequest>,
    ) -> Result<Response<v1::AgentRoutingResponse>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        check(&request, Operation::RouteToAgent, context.as_ref(), Some(&request.get_ref().session_id))?;
        let context = context.ok_or_else(|| Status::invalid_argument("context: name the user or group"))?;
        let message = request.into_inner();
        if !message.session_id.is_empty() {
            sessions::valid_id(&message.session_id, "session_id")?;
        }
        let incoming = crate::orchestrator::Incoming {
            sender: context.id.clone(),
            context,
            session: (!message.session_id.is_empty()).then_some(message.session_id),
            channel: None,
            content: message.content,
            parent: None,
        };
        let accepted = crate::orchestrator::accept_user_message(&self.shared, incoming)?;
        Ok(Response::new(v1::AgentRoutingResponse { session_id: accepted.session, turn_id: accepted.turn }))
    }

    async fn delegate_to_agent(
        &self,
        request: Request<v1::DelegateRequest>,
    ) -> Result<Response<v1::DelegateResponse>, Status> {
        let caller = check(&request, Operation::DelegateToAgent, None, None)?;
        let Caller::Container(identity) = caller else {
            return Err(Status::permission_denied("DelegateToAgent is for Assistant containers"));
        };
        let response = crate::orchestrator::delegate(&self.shared, &identity, request.into_inner()).await?;
        Ok(Response::new(response))
    }

    async fn request_tool_execution(
        &self,
        request: Request<v1::ToolRequest>,
    ) -> Result<Response<v1::ToolResponse>, Status> {
        let caller = check(&request, Operation::RequestToolExecution, None, None)?;
        tools::request(&self.shared, caller, request).await
    }

    type ServeToolsStream = BoxStream<v1::ToolCall>;

    async fn serve_tools(
        &self,
        request: Request<tonic::Streaming<v1::RunnerMessage>>,
    ) -> Result<Response<Self::ServeToolsStream>, Status> {
        let caller = check(&request, Operation::ServeTools, None, None)?;
        let calls = tools::serve(&self.shared, caller, request)?.into_inner();
        Ok(Response::new(until_shutdown(&self.shared, calls)))
    }

    async fn proxy_web_request(
        &self,
        request: Request<v1::WebProxyRequest>,
    ) -> Result<Response<v1::WebProxyResponse>, Status> {
        let caller = check(&request, Operation::ProxyWebRequest, None, None)?;
        let Caller::Container(identity) = caller else {
            return Err(Status::permission_denied("ProxyWebRequest is for tool containers"));
        };
        let message = request.into_inner();
        if !message.search_query.is_empty() {
            use crate::egress::search::{self, SearchError};
            let count = if message.search_count == 0 { 5 } else { message.search_count as usize };
            let web = &self.shared.web;
            let found = search::search(web, &self.shared.search, &identity.session_id, &message.search_query, count)
                .await
                .map_err(|error| match error {
                    SearchError::NoBackend | SearchError::NoSearxngUrl | SearchError::NoBraveKey(_) => {
                        Status::failed_precondition(error.to_string())
                    }
                    other => Status::unavailable(baaaht_proto::error_chain(&other)),
                })?;
            let body = serde_json::to_vec(&found).map_err(|error| Status::internal(error.to_string()))?;
            return Ok(Response::new(v1::WebProxyResponse {
                status: 200,
                headers: [("content-type".to_string(), "application/json".to_string())].into_iter().collect(),
                body,
                final_url: String::new(),
                truncated: false,
            }));
        }
        let fetch = crate::egress::proxy::FetchRequest {
            session: identity.session_id.clone(),
            method: message.method,
            url: message.url,
            headers: message.headers.into_iter().collect(),
            body: message.body,
        };
        let response = self.shared.web.fetch(fetch).await.map_err(|error| {
            use crate::egress::proxy::ProxyError;
            let text = error.to_string();
            match error {
                ProxyError::Refused { .. } | ProxyError::MetadataName { .. } => Status::permission_denied(text),
                ProxyError::BadUrl { .. } => Status::invalid_argument(text),
                ProxyError::RateLimited { .. } => Status::resource_exhausted(text),
                ProxyError::Timeout { .. } => Status::deadline_exceeded(text),
                ProxyError::TooManyRedirects { .. } => Status::failed_precondition(text),
                _ => Status::unavailable(baaaht_proto::error_chain(&error)),
            }
        })?;
        let mut headers = std::collections::HashMap::<String, String>::new();
        for (name, value) in response.headers {
            headers
                .entry(name)
                .and_modify(|joined| {
                    joined.push_str(", ");
                    joined.push_str(&value);
                })
                .or_insert(value);
        }
        Ok(Response::new(v1::WebProxyResponse {
            status: u32::from(response.status),
            headers,
            body: response.body,
            final_url: response.final_url,
            truncated: response.truncated,
        }))
    }

    type StreamLLMStream = BoxStream<v1::LlmEvent>;

    async fn stream_llm(&self, request: Request<v1::LlmRequest>) -> Result<Response<Self::StreamLLMStream>, Status> {
        let caller = check(&request, Operation::StreamLlm, None, None)?;
        llm::stream(&self.shared, caller, request).await
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
        let caller = check(&request, Operation::GetSkillManifest, context.as_ref(), None)?;
        let context = own_context(&caller, context)?;
        let skills = crate::skills::manifest(
            self.shared.data_dir.root(),
            &self.shared.loaded.config.skills.directories,
            &context,
        );
        Ok(Response::new(v1::SkillManifest { skills: skills.iter().map(crate::convert::skill_summary).collect() }))
    }

    async fn get_skill_content(
        &self,
        request: Request<v1::SkillContentRequest>,
    ) -> Result<Response<v1::SkillContent>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&request, Operation::GetSkillContent, context.as_ref(), None)?;
        let context = own_context(&caller, context)?;
        let message = request.into_inner();
        let (path, content) = crate::skills::content(
            self.shared.data_dir.root(),
            &self.shared.loaded.config.skills.directories,
            &context,
            &message.skill,
            &message.path,
        )
        .map_err(|error| {
            use crate::skills::ContentError;
            let text = error.to_string();
            match error {
                ContentError::NoSkill(_) | ContentError::NotFound(_) => Status::not_found(text),
                ContentError::Refused { .. } => Status::permission_denied(text),
                ContentError::TooLarge { .. } => Status::failed_precondition(text),
                ContentError::Io { .. } => Status::internal(text),
            }
        })?;
        Ok(Response::new(v1::SkillContent { skill: message.skill, path, content }))
    }

    async fn install_skill(
        &self,
        request: Request<v1::InstallSkillRequest>,
    ) -> Result<Response<v1::InstallSkillResponse>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        check(&request, Operation::InstallSkill, context.as_ref(), None)?;
        let context =
            context.ok_or_else(|| Status::invalid_argument("context: name the user or group to install for"))?;
        let message = request.into_inner();
        let install = crate::skills::install::InstallRequest {
            context,
            source: message.source,
            path: message.path,
            git_ref: message.git_ref,
            replace: message.replace,
        };
        let installed = crate::skills::install::install(self.shared.data_dir.root(), &self.shared.containers, install)
            .await
            .map_err(|error| {
                use crate::skills::install::InstallError;
                let text = error.to_string();
                match error {
                    InstallError::BadSource(_) | InstallError::BadArgument(_) => Status::invalid_argument(text),
                    InstallError::Exists { .. } => Status::already_exists(text),
                    InstallError::Io { .. } => Status::internal(baaaht_proto::error_chain(&error)),
                    _ => Status::failed_precondition(text),
                }
            })?;
        Ok(Response::new(v1::InstallSkillResponse {
            name: installed.name,
            description: installed.description,
            installed_to: installed.installed_to,
            commit: installed.commit,
        }))
    }

    async fn write_memory(&self, request: Request<v1::WriteMemoryRequest>) -> Result<Response<v1::Ack>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&request, Operation::WriteMemory, context.as_ref(), None)?;
        let context = own_context(&caller, context)?;
        memory::write(&self.shared, &caller, context, request.into_inner())
    }

    async fn search_memory(&self, request: Request<v1::MemoryQuery>) -> Result<Response<v1::MemoryList>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&request, Operation::SearchMemory, context.as_ref(), None)?;
        let context = own_context(&caller, context)?;
        memory::search(&self.shared, &context, request.into_inner())
    }

    async fn delete_memory(&self, request: Request<v1::MemoryKey>) -> Result<Response<v1::Ack>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&request, Operation::DeleteMemory, context.as_ref(), None)?;
        let context = own_context(&caller, context)?;
        memory::delete(&self.shared, &context, &request.into_inner().key)
    }

    type SubscribeEventsStream = BoxStream<v1::OrchestratorEvent>;

    async fn subscribe_events(
        &self,
        request: Request<v1::EventSubscription>,
    ) -> Result<Response<Self::SubscribeEventsStream>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        check(&request, Operation::SubscribeEvents, context.as_ref(), Some(&request.get_ref().session_id))?;
        let context = context.ok_or_else(|| Status::invalid_argument("context: name the user or group to follow"))?;
        let session = request.into_inner().session_id;
        let mut events = self.shared.events.subscribe();
        let (sender, receiver) = tokio::sync::mpsc::channel(256);
        tokio::spawn(async move {
            loop {
                let event = match events.recv().await {
                    Ok((target, event)) if target == context && (session.is_empty() || event.session_id == session) => {
                        event
                    }
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, context = %context, "a slow subscriber missed events");
                        continue;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                if sender.send(Ok(event)).await.is_err() {
                    return; // The subscriber went away.
                }
            }
        });
        Ok(Response::new(until_shutdown(&self.shared, tokio_stream::wrappers::ReceiverStream::new(receiver))))
    }

    async fn publish_event(&self, request: Request<v1::ChannelEvent>) -> Result<Response<v1::Ack>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        check(&request, Operation::PublishEvent, context.as_ref(), None)?;
        let context = context.ok_or_else(|| Status::invalid_argument("context: name the user or group"))?;
        let event = request.into_inner();
        match event.event {
            Some(v1::channel_event::Event::UserMessage(message)) => {
                let sender = sessions::sender_of(&context, &event.sender_id)?;
                if !message.session_id.is_empty() {
                    sessions::valid_id(&message.session_id, "user_message.session_id")?;
                }
                let incoming = crate::orchestrator::Incoming {
                    context,
                    session: (!message.session_id.is_empty()).then_some(message.session_id),
                    sender,
                    channel: sessions::channel_name(event.channel),
                    content: message.content,
                    parent: (!message.parent_entry_id.is_empty()).then_some(message.parent_entry_id),
                };
                let accepted = crate::orchestrator::accept_user_message(&self.shared, incoming)?;
                Ok(Response::new(v1::Ack {
                    message: format!("turn {} in session {}", accepted.turn, accepted.session),
                }))
            }
            Some(v1::channel_event::Event::Typing(_)) => Ok(Response::new(v1::Ack { message: "noted".into() })),
            None => Err(Status::invalid_argument("event: send a user_message or typing")),
        }
    }

    async fn get_status(&self, request: Request<v1::StatusRequest>) -> Result<Response<v1::StatusResponse>, Status> {
        check(&request, Operation::GetStatus, None, None)?;
        let containers = self.shared.containers.inventory().await.containers.len();
        Ok(Response::new(status_response(&self.shared, containers)))
    }

    async fn send_user_message(
        &self,
        request: Request<v1::UserMessage>,
    ) -> Result<Response<v1::SendUserMessageResponse>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        check(&request, Operation::SendUserMessage, context.as_ref(), Some(&request.get_ref().session_id))?;
        let context = context.ok_or_else(|| Status::invalid_argument("context: name the user or group who writes"))?;
        let message = request.into_inner();
        if !message.session_id.is_empty() {
            sessions::valid_id(&message.session_id, "session_id")?;
        }
        let sender = sessions::sender_of(&context, &message.sender_id)?;
        let incoming = crate::orchestrator::Incoming {
            context,
            session: (!message.session_id.is_empty()).then_some(message.session_id),
            sender,
            channel: sessions::channel_name(message.channel),
            content: message.content,
            parent: (!message.parent_entry_id.is_empty()).then_some(message.parent_entry_id),
        };
        let accepted = crate::orchestrator::accept_user_message(&self.shared, incoming)?;
        Ok(Response::new(v1::SendUserMessageResponse {
            session_id: accepted.session,
            entry_id: accepted.entry,
            turn_id: accepted.turn,
            correlation_id: accepted.correlation_id,
        }))
    }

    async fn list_sessions(&self, request: Request<v1::SessionFilter>) -> Result<Response<v1::SessionList>, Status> {
        check(&request, Operation::ListSessions, None, None)?;
        let filter = sessions::filter(request.get_ref())?;
        let found = self.shared.sessions.list(&filter);
        Ok(Response::new(v1::SessionList { sessions: found.iter().map(sessions::header).collect() }))
    }

    async fn read_session(
        &self,
        request: Request<v1::ReadSessionRequest>,
    ) -> Result<Response<v1::SessionTranscript>, Status> {
        check(&request, Operation::ReadSession, None, Some(&request.get_ref().session_id))?;
        let message = request.into_inner();
        sessions::valid_id(&message.session_id, "session_id")?;
        let record = self
            .shared
            .sessions
            .get(&message.session_id)
            .ok_or_else(|| Status::from(crate::sessions::SessionError::NotFound(message.session_id.clone())))?;
        let read = self.shared.sessions.read(&message.session_id)?;
        let entries = if message.leaf_entry_id.is_empty() {
            read.entries.clone()
        } else {
            read.branch(&message.leaf_entry_id).map_err(crate::sessions::SessionError::from)?
        };
        Ok(Response::new(v1::SessionTranscript {
            header: Some(sessions::header(&record)),
            entries: entries.iter().filter_map(sessions::entry).collect(),
            problems: read.corrupt.iter().map(|c| format!("line {}: {}", c.line, c.reason)).collect(),
        }))
    }

    async fn new_session(
        &self,
        request: Request<v1::NewSessionRequest>,
    ) -> Result<Response<v1::SessionHeader>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        check(&request, Operation::NewSession, context.as_ref(), None)?;
        let context = context.ok_or_else(|| Status::invalid_argument("context: name the user or group"))?;
        let message = request.into_inner();
        let title = (!message.title.trim().is_empty()).then(|| message.title.trim().to_string());
        let record = self.shared.sessions.create(&context, &context.id, title)?;
        crate::orchestrator::prewarm(&self.shared, &record);
        Ok(Response::new(sessions::header(&record)))
    }

    async fn resume_session(&self, request: Request<v1::SessionRef>) -> Result<Response<v1::SessionHeader>, Status> {
        check(&request, Operation::ResumeSession, None, Some(&request.get_ref().session_id))?;
        let id = request.into_inner().session_id;
        sessions::valid_id(&id, "session_id")?;
        let record = self.shared.sessions.set_status(&id, crate::sessions::SessionStatus::Active)?;
        crate::orchestrator::prewarm(&self.shared, &record);
        tracing::info!(session = %id, "session resumed");
        Ok(Response::new(sessions::header(&record)))
    }

    async fn fork_session(
        &self,
        request: Request<v1::ForkSessionRequest>,
    ) -> Result<Response<v1::SessionHeader>, Status> {
        check(&request, Operation::ForkSession, None, Some(&request.get_ref().session_id))?;
        let message = request.into_inner();
        sessions::valid_id(&message.session_id, "session_id")?;
        let entry = if message.entry_id.is_empty() {
            self.shared
                .sessions
                .get(&message.session_id)
                .and_then(|record| record.leaf)
                .unwrap_or_else(|| message.session_id.clone())
        } else {
            message.entry_id
        };
        let record = self.shared.sessions.fork(&message.session_id, &entry)?;
        Ok(Response::new(sessions::header(&record)))
    }

    async fn archive_session(&self, request: Request<v1::SessionRef>) -> Result<Response<v1::Ack>, Status> {
        check(&request, Operation::ArchiveSession, None, Some(&request.get_ref().session_id))?;
        let id = request.into_inner().session_id;
        sessions::valid_id(&id, "session_id")?;
        crate::orchestrator::archive(&self.shared, &id).await?;
        tracing::info!(session = %id, "session archived on request");
        Ok(Response::new(v1::Ack { message: format!("session {id} archived") }))
    }

    async fn compact_session(&self, request: Request<v1::SessionRef>) -> Result<Response<v1::Ack>, Status> {
        check(&request, Operation::CompactSession, None, Some(&request.get_ref().session_id))?;
        let id = request.into_inner().session_id;
        sessions::valid_id(&id, "session_id")?;
        let entry = crate::orchestrator::compact(&self.shared, &id).await?;
        Ok(Response::new(v1::Ack { message: format!("session {id} compacted into entry {entry}") }))
    }

    async fn switch_model(&self, request: Request<v1::SwitchModelRequest>) -> Result<Response<v1::Ack>, Status> {
        check(&request, Operation::SwitchModel, None, Some(&request.get_ref().session_id))?;
        let message = request.into_inner();
        sessions::valid_id(&message.session_id, "session_id")?;
        let valid = !message.model.is_empty()
            && message.model.len() <= 200
            && message.model.chars().all(|c| c.is_ascii_alphanumeric() || "/-_.:@".contains(c));
        if !valid {
            return Err(Status::invalid_argument(format!(
                "model `{}` is not a model name such as anthropic/claude-sonnet-4-20250514",
                message.model.escape_debug()
            )));
        }
        let record = self
            .shared
            .sessions
            .get(&message.session_id)
            .ok_or_else(|| Status::from(crate::sessions::SessionError::NotFound(message.session_id.clone())))?;
        let previous = record
            .model
            .unwrap_or_else(|| self.shared.loaded.config.agents.settings(crate::auth::Role::Assistant).model.0);
        self.shared.sessions.append(
            &message.session_id,
            None,
            crate::sessions::NewEntry::ModelChange { previous: previous.clone(), new: message.model.clone() },
        )?;
        self.shared.sessions.set_model(&message.session_id, &message.model)?;
        Ok(Response::new(v1::Ack {
            message: format!("session {} now uses {} (was {previous})", message.session_id, message.model),
        }))
    }

    async fn run_self_test(
        &self,
        request: Request<v1::SelfTestRequest>,
    ) -> Result<Response<v1::SelfTestResponse>, Status> {
        check(&request, Operation::RunSelfTest, None, None)?;
        let message = request.into_inner();
        let role = role_of(message.role)?.unwrap_or(crate::auth::Role::Tool);
        let mut command = vec![format!("{BINARIES_MOUNT}/baaaht-agent"), "self-test".into()];
        if !message.probe_address.is_empty() {
            let address: std::net::SocketAddr = message.probe_address.parse().map_err(|_unparsable| {
                Status::invalid_argument(format!("probe_address `{}` is not IP:PORT", message.probe_address))
            })?;
            command.extend(["--probe".into(), address.to_string()]);
        }
        if !message.llm_model.is_empty() {
            let valid = message.llm_model.len() <= 200
                && message.llm_model.chars().all(|c| c.is_ascii_alphanumeric() || "/-_.:@".contains(c));
            if !valid {
                return Err(Status::invalid_argument(format!(
                    "llm_model `{}` is not a model name such as anthropic/claude-sonnet-4-20250514",
                    message.llm_model.escape_debug()
                )));
            }
            command.extend(["--llm".into(), message.llm_model.clone()]);
        }
        let session = if message.session_id.is_empty() { "self-test".to_string() } else { message.session_id.clone() };
        if !crate::auth::is_valid_context_id(&session) {
            return Err(Status::invalid_argument(format!(
                "session_id `{}` is not a valid id: use 1-128 letters, digits, `.`, `_` or `-`",
                session.escape_debug()
            )));
        }
        let linger = message.linger_seconds.min(600);
        command.extend(["--linger".into(), linger.to_string()]);
        let run = RunRequest {
            role,
            session_id: session,
            context: Context::user("baaaht-self-test"),
            command,
            mounts: vec![],
            env: vec![],
            timeout: std::time::Duration::from_secs(u64::from(linger) + 60),
            daemon_socket: true,
            working_dir: None,
            image: None,
        };
        let outcome = self.shared.containers.run(run).await.map_err(|error| {
            tracing::warn!(error = %baaaht_proto::error_chain(&error), "self-test container failed");
            Status::from(error)
        })?;
        let stdout = String::from_utf8_lossy(&outcome.output.stdout);
        let report_json = stdout.lines().find(|line| line.starts_with('{')).unwrap_or("").to_string();
        let mut problems = match serde_json::from_str::<baaaht_proto::selftest::SelfTestReport>(&report_json) {
            Ok(report) => {
                let mut problems = report.problems;
                if !report.daemon_socket {
                    problems.push("the container could not reach its daemon socket".into());
                }
                problems
            }
            Err(error) => vec![format!("no self-test report ({error}); the container {}", outcome.status)],
        };
        if !matches!(outcome.status, crate::container::manager::RunStatus::Exited(0 | 3)) {
            problems.push(format!("the self-test container {}", outcome.status));
        }
        Ok(Response::new(v1::SelfTestResponse {
            ok: problems.is_empty(),
            problems,
            report_json,
            container: outcome.name.clone(),
            status: outcome.status.to_string(),
            duration_ms: outcome.duration.as_millis() as u64,
            stderr_tail: outcome.stderr_tail(5),
        }))
    }
}

/// The context a skill request is about: a container's own (whatever it named, which
/// `check` already matched), or the one a host client names.
fn own_context(caller: &Caller, named: Option<Context>) -> Result<Context, Status> {
    match (caller, named) {
        (Caller::Container(identity), _) => Ok(identity.context.clone()),
        (Caller::Host(_), Some(context)) => Ok(context),
        (Caller::Host(_), None) => Err(Status::invalid_argument("context: name the user or group")),
    }
}

fn role_of(value: i32) -> Result<Option<crate::auth::Role>, Status> {
    crate::convert::role_of(value).map_err(Status::invalid_argument)
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

fn status_response(shared: &Shared, containers: usize) -> v1::StatusResponse {
    let mut degraded = vec![];
    let engine_status = shared.engine.borrow().status.clone();
    if let Some(reason) = engine_status.degraded_reason() {
        degraded.push(reason);
    }
    degraded.extend(shared.containers.problems());
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
    let llm = shared.llm.summary();
    if matches!(llm.state, "off" | "down") {
        degraded.push(format!("llm: {}", llm.message));
    }
    let counts = shared.sessions.counts();
    v1::StatusResponse {
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_seconds: shared.metrics.uptime().as_secs(),
        data_dir: shared.data_dir.root().display().to_string(),
        engine: Some(engine),
        sessions_active: counts.active,
        sessions_idle: counts.idle,
        sessions_archived: counts.archived,
        containers_running: u32::try_from(containers).unwrap_or(u32::MAX),
        metrics_address: shared.metrics_address.map(|address| address.to_string()).unwrap_or_default(),
        llm: Some(v1::LlmGatewayStatus {
            mode: llm.mode.to_string(),
            state: llm.state.into(),
            message: llm.message,
            providers: llm.providers,
        }),
        pid: std::process::id(),
        degraded,
    }
}
