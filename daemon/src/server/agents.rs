//! The `Agents` service: what agent containers and tool runners call, each on its own socket
//! (registration, turns, delegation, tools, web egress, the LLM proxy).

use super::*;
use super::{from_wire, llm, to_wire, tools};
use crate::net::egress::proxy::ProxyError;
use crate::net::egress::search::SearchError;
use crate::net::egress::web::{Asker, WebError};
use crate::work::tools::call::{MessageError, Outbound};

/// The `Agents` service.
#[derive(Debug, Clone)]
pub(super) struct AgentsService {
    pub(super) shared: Arc<Shared>,
}

#[tonic::async_trait]
impl v1::agents_server::Agents for AgentsService {
    async fn register_agent(
        &self,
        request: Request<v1::AgentRegistration>,
    ) -> Result<Response<v1::AgentConfig>, Status> {
        let caller = check(&self.shared, &request, Operation::RegisterAgent, None, None)?;
        let Caller::Container(identity) = caller else {
            return Err(Status::permission_denied("RegisterAgent is for agent containers"));
        };
        tracing::info!(container = %identity.name, role = identity.role.as_str(), version = %request.get_ref().runtime_version, "agent registered");
        let mut config = crate::server::to_wire::agent_config(crate::drive::orchestrator::agent_setup(
            &self.shared.orchestrator,
            &identity,
        ));
        config.tools.extend(tools::mcp_definitions(&self.shared, &identity).await);
        Ok(Response::new(config))
    }

    type TakeTurnsStream = BoxStream<v1::AgentTurn>;

    async fn take_turns(
        &self,
        request: Request<tonic::Streaming<v1::AgentReport>>,
    ) -> Result<Response<Self::TakeTurnsStream>, Status> {
        let caller = check(&self.shared, &request, Operation::TakeTurns, None, None)?;
        let Caller::Container(identity) = caller else {
            return Err(Status::permission_denied("TakeTurns is for agent containers"));
        };
        let reports = from_wire::ups(request.into_inner(), from_wire::agent_report);
        let turns = self.shared.agents.attach(&identity, reports);
        let turns = tokio_stream::wrappers::ReceiverStream::new(turns);
        // Each turn carries the tools offered now: a server or skill added since the agent
        // registered is there from its next turn.
        let shared = self.shared.clone();
        let turns = tokio_stream::StreamExt::then(turns, move |down| {
            let (shared, identity) = (shared.clone(), identity.clone());
            async move {
                let mut turn = to_wire::agent_turn(down);
                if turn.health_check.is_none() {
                    turn.tools = to_wire::tool_names(&crate::drive::orchestrator::role_tools(
                        &shared.orchestrator,
                        identity.role,
                    ));
                    turn.tools.extend(tools::mcp_definitions(&shared, &identity).await);
                    let skills =
                        crate::drive::orchestrator::role_skills(&shared.orchestrator, identity.role, &identity.context);
                    turn.skills =
                        Some(v1::SkillManifest { skills: skills.iter().map(to_wire::skill_summary).collect() });
                }
                Ok(turn)
            }
        });
        Ok(Response::new(until_shutdown(&self.shared, turns)))
    }

    async fn report_status(&self, request: Request<v1::AgentStatus>) -> Result<Response<v1::Ack>, Status> {
        let caller = check(&self.shared, &request, Operation::ReportStatus, None, None)?;
        let status = request.into_inner();
        if let Caller::Container(identity) = caller {
            tracing::info!(container = %identity.name, state = %status.state, message = %status.message, "agent status");
        }
        Ok(Response::new(v1::Ack { message: "noted".into() }))
    }

    async fn send_message(&self, request: Request<v1::OutboundMessage>) -> Result<Response<v1::Ack>, Status> {
        let context = context_of(request.get_ref().target_context.as_ref(), "target_context")?;
        let caller = check(&self.shared, &request, Operation::SendMessage, context.as_ref(), None)?;
        let Caller::Container(identity) = caller else {
            return Err(Status::permission_denied("SendMessage is for Worker and Heartbeat containers"));
        };
        let live = super::live_turn(&request);
        let message = request.into_inner();
        let outbound = Outbound {
            content: message.content,
            reply_to: message.reply_to_message_id,
            metadata: message.metadata.into_iter().collect(),
            attachments: message.attachments.len(),
        };
        let reached =
            self.shared.tool_calls.message(&identity, live.as_ref(), outbound).map_err(|error| match error {
                MessageError::Tainted(why) => Status::permission_denied(why),
                other => Status::invalid_argument(other.to_string()),
            })?;
        Ok(Response::new(v1::Ack { message: format!("sent to {reached} channel(s)") }))
    }

    async fn delegate_to_agent(
        &self,
        request: Request<v1::DelegateRequest>,
    ) -> Result<Response<v1::DelegateResponse>, Status> {
        let caller = check(&self.shared, &request, Operation::DelegateToAgent, None, None)?;
        let Caller::Container(identity) = caller else {
            return Err(Status::permission_denied("DelegateToAgent is for Assistant containers"));
        };
        let request = request.into_inner();
        let delegation = crate::drive::orchestrator::Delegation {
            agent: crate::server::from_wire::role_of(request.agent).ok().flatten(),
            background: request.priority == v1::DelegatePriority::Background as i32,
            task: request.task,
            context: request.context,
            response_format: request.response_format,
            return_directly: request.return_directly,
        };
        let done = crate::drive::orchestrator::delegate(&self.shared.orchestrator, &identity, delegation).await?;
        Ok(Response::new(v1::DelegateResponse {
            result: done.result,
            is_error: done.is_error,
            background: done.background,
            duration_ms: done.elapsed.as_millis() as u64,
            returned_directly: done.returned_directly,
        }))
    }

    async fn request_tool_execution(
        &self,
        request: Request<v1::ToolRequest>,
    ) -> Result<Response<v1::ToolResponse>, Status> {
        let caller = check(&self.shared, &request, Operation::RequestToolExecution, None, None)?;
        tools::request(&self.shared, caller, request).await
    }

    type ServeToolsStream = BoxStream<v1::ToolCall>;

    async fn serve_tools(
        &self,
        request: Request<tonic::Streaming<v1::RunnerMessage>>,
    ) -> Result<Response<Self::ServeToolsStream>, Status> {
        let caller = check(&self.shared, &request, Operation::ServeTools, None, None)?;
        let calls = tools::serve(&self.shared, caller, request)?.into_inner();
        Ok(Response::new(until_shutdown(&self.shared, calls)))
    }

    type RelayMcpStream = BoxStream<v1::McpDown>;

    async fn relay_mcp(
        &self,
        request: Request<tonic::Streaming<v1::McpUp>>,
    ) -> Result<Response<Self::RelayMcpStream>, Status> {
        let caller = check(&self.shared, &request, Operation::RelayMcp, None, None)?;
        let Caller::Container(identity) = caller else {
            return Err(Status::permission_denied("RelayMcp is for MCP server containers"));
        };
        let down = self.shared.mcp.attach(&identity, Box::new(from_wire::ups(request.into_inner(), from_wire::mcp_up)));
        let down = tokio_stream::wrappers::ReceiverStream::new(down);
        let stream = tokio_stream::StreamExt::map(down, |down| Ok(to_wire::mcp_down(down)));
        Ok(Response::new(until_shutdown(&self.shared, Box::pin(stream))))
    }

    async fn proxy_web_request(
        &self,
        request: Request<v1::WebProxyRequest>,
    ) -> Result<Response<v1::WebProxyResponse>, Status> {
        let caller = check(&self.shared, &request, Operation::ProxyWebRequest, None, None)?;
        let Caller::Container(identity) = &caller else {
            return Err(Status::permission_denied("ProxyWebRequest is for tool containers"));
        };
        let correlation_id = super::correlation_id(&request);
        let asker = Asker {
            caller: &caller,
            session: &identity.session_id,
            context: &identity.context,
            correlation_id: &correlation_id,
        };
        let answer = self.shared.web_road.request(&asker, from_wire::web_asked(request.into_inner())).await?;
        Ok(Response::new(to_wire::web_answer(answer)))
    }

    type StreamLLMStream = BoxStream<v1::LlmEvent>;

    async fn stream_llm(&self, request: Request<v1::LlmRequest>) -> Result<Response<Self::StreamLLMStream>, Status> {
        let caller = check(&self.shared, &request, Operation::StreamLlm, None, None)?;
        let live = super::live_turn(&request);
        llm::stream(&self.shared, caller, live, request).await
    }
}

impl From<WebError> for Status {
    fn from(error: WebError) -> Status {
        let text = error.to_string();
        match error {
            WebError::Search(SearchError::NoBackend | SearchError::NoSearxngUrl | SearchError::NoBraveKey(_)) => {
                Status::failed_precondition(text)
            }
            WebError::Search(other) => Status::unavailable(baaaht_proto::error_chain(&other)),
            WebError::Tainted(why) => Status::permission_denied(why),
            WebError::Proxy(ProxyError::Refused { .. } | ProxyError::MetadataName { .. }) => {
                Status::permission_denied(text)
            }
            WebError::Proxy(ProxyError::BadUrl { .. }) => Status::invalid_argument(text),
            WebError::Proxy(ProxyError::RateLimited { .. }) => Status::resource_exhausted(text),
            WebError::Proxy(ProxyError::Timeout { .. }) => Status::deadline_exceeded(text),
            WebError::Proxy(ProxyError::TooManyRedirects { .. }) => Status::failed_precondition(text),
            WebError::Proxy(other) => Status::unavailable(baaaht_proto::error_chain(&other)),
        }
    }
}
