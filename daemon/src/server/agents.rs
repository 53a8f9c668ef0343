//! The `Agents` service: what agent containers and tool runners call, each on its own socket
//! (registration, turns, delegation, tools, web egress, the LLM proxy).

use super::*;
use super::{convert, llm, tools};
use crate::guard::audit::{Kind, Record};

/// The largest message a Worker or Heartbeat sends to the channels: the Agents service decodes
/// up to 32 MiB for StreamLLM's pictures, far more than a chat message should be.
const MAX_OUTBOUND_BYTES: usize = 256 * 1024;

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
        let mut config = crate::server::convert::agent_config(crate::drive::orchestrator::agent_setup(
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
        let reports = convert::ups(request.into_inner(), convert::agent_report);
        let turns = self.shared.agents.attach(&identity, reports);
        let turns = tokio_stream::wrappers::ReceiverStream::new(turns);
        // Each turn carries the tools offered now: a server or skill added since the agent
        // registered is there from its next turn.
        let shared = self.shared.clone();
        let turns = tokio_stream::StreamExt::then(turns, move |down| {
            let (shared, identity) = (shared.clone(), identity.clone());
            async move {
                let mut turn = convert::agent_turn(down);
                if turn.health_check.is_none() {
                    turn.tools = convert::tool_names(&crate::drive::orchestrator::role_tools(identity.role));
                    turn.tools.extend(tools::mcp_definitions(&shared, &identity).await);
                    let skills =
                        crate::drive::orchestrator::role_skills(&shared.orchestrator, identity.role, &identity.context);
                    turn.skills =
                        Some(v1::SkillManifest { skills: skills.iter().map(convert::skill_summary).collect() });
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
        let message = request.into_inner();
        if message.content.trim().is_empty() {
            return Err(Status::invalid_argument("content: the message is empty"));
        }
        if !message.attachments.is_empty() {
            return Err(Status::invalid_argument(
                "attachments: an agent sends files with the `message` tool's `files`, which the daemon keeps first",
            ));
        }
        if message.content.len() > MAX_OUTBOUND_BYTES {
            return Err(Status::invalid_argument(format!(
                "content: {} bytes is more than a message may be ({MAX_OUTBOUND_BYTES}); write a file and name it",
                message.content.len()
            )));
        }
        let live = self.shared.agents.live(&identity.name);
        if let Some(live) = &live {
            self.shared.taints.allow(live, crate::net::taint::Way::Message).map_err(Status::permission_denied)?;
        }
        let event = crate::store::events::Event {
            recorded: false,
            session: identity.session_id.clone(),
            turn: live.as_ref().map(|live| live.user_turn.clone()).unwrap_or_default(),
            correlation_id: live.map(|live| live.correlation_id).unwrap_or_default(),
            kind: crate::store::events::Kind::Message {
                content: message.content,
                reply_to: message.reply_to_message_id,
                metadata: message.metadata.into_iter().collect(),
                attachments: vec![],
            },
        };
        let reached = self.shared.events.publish(&identity.context, event);
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
            agent: crate::server::convert::role_of(request.agent).ok().flatten(),
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
        let down = self.shared.mcp.attach(&identity, Box::new(convert::ups(request.into_inner(), convert::mcp_up)));
        let down = tokio_stream::wrappers::ReceiverStream::new(down);
        let stream = tokio_stream::StreamExt::map(down, |down| Ok(convert::mcp_down(down)));
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
        let audit = |outcome: &str| Record::by(Kind::Egress, &caller, outcome).correlation(&correlation_id);
        let message = request.into_inner();
        if !message.search_query.is_empty() {
            use crate::net::egress::search::{self, SearchError};
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
            self.shared.audit.record(audit("allowed").detail("search_results", found.len()));
            let body = serde_json::to_vec(&found).map_err(|error| Status::internal(error.to_string()))?;
            // What the search engine answered shows the turn the addresses in it.
            let shown = String::from_utf8_lossy(&body);
            self.shared.taints.shown(&identity.session_id, None, &shown, &message.search_query);
            return Ok(Response::new(v1::WebProxyResponse {
                status: 200,
                headers: [("content-type".to_string(), "application/json".to_string())].into_iter().collect(),
                body,
                final_url: String::new(),
                truncated: false,
            }));
        }
        // The address as the proxy will read it to connect, for every check (one it cannot read
        // is refused by the proxy, which says why).
        let parsed = crate::net::egress::proxy::host_and_port(&message.url);
        let host = parsed.as_ref().map(|(host, _)| host.clone()).unwrap_or_default();
        if let Ok((host, port)) = parsed {
            // A turn that read untrusted content follows only the links it was shown, or hosts a
            // rule allows.
            let principal = crate::guard::audit::principal(&caller);
            let bare = host.trim_start_matches('[').trim_end_matches(']').to_string();
            let (data_dir, context, checked) = (self.shared.data_dir.clone(), identity.context.clone(), bare.clone());
            let allowed = tokio::task::spawn_blocking(move || {
                crate::net::egress::policy::decide(&data_dir, &context, &checked, port)
                    .is_some_and(|rule| rule.action == crate::net::egress::policy::Action::Allow)
            });
            let allowed = allowed.await.unwrap_or(false);
            let taints = &self.shared.taints;
            if let Err(why) = taints.may_fetch(&identity.session_id, &message.url, &bare, allowed, &principal) {
                self.shared.audit.record(audit("refused").detail("host", host.as_str()).detail("reason", why.as_str()));
                return Err(Status::permission_denied(why));
            }
        }
        let asked = format!("{} {}", message.url, String::from_utf8_lossy(&message.body));
        let fetch = crate::net::egress::proxy::FetchRequest {
            session: identity.session_id.clone(),
            method: message.method,
            url: message.url,
            headers: message.headers.into_iter().collect(),
            body: message.body,
            follow_redirects: self.shared.taints.of_session(&identity.session_id).is_none(),
        };
        let fetched = self.shared.web.fetch(fetch).await;
        let record = match &fetched {
            Ok(response) => audit("allowed")
                .detail("host", host.as_str())
                .detail("final_host", final_host(&response.final_url))
                .detail("status", response.status),
            Err(error) if error.is_refusal() => {
                audit("refused").detail("host", host.as_str()).detail("reason", error.to_string())
            }
            Err(error) => audit("failed").detail("host", host.as_str()).detail("reason", error.to_string()),
        };
        self.shared.audit.record(record);
        if let Ok(response) = &fetched {
            // The page shows the turn the addresses in it and where a redirect sent it; never
            // what it only echoes of the request (the model's own words).
            let location = response.headers.iter().find(|(name, _)| name == "location").map(|(_, to)| to.as_str());
            let text = format!(
                "{} {} {}",
                response.final_url,
                location.unwrap_or_default(),
                String::from_utf8_lossy(&response.body)
            );
            let (taints, session) = (self.shared.taints.clone(), identity.session_id.clone());
            tokio::task::spawn_blocking(move || taints.shown(&session, None, &text, &asked)).await.ok();
        }
        let response = fetched.map_err(|error| {
            use crate::net::egress::proxy::ProxyError;
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
        // No value of the secrets store reaches a container, whatever a page says.
        let known = self.shared.tool_calls.redact.shield().values();
        let mut response = response;
        let mut blotted = known.blot(&mut response.body);
        for (_, value) in response.headers.iter_mut() {
            let mut bytes = std::mem::take(value).into_bytes();
            blotted.extend(known.blot(&mut bytes));
            *value = String::from_utf8_lossy(&bytes).into_owned();
        }
        if !blotted.is_empty() {
            blotted.dedup();
            self.shared.audit.record(audit("blotted").detail("host", host.as_str()).detail("found", blotted));
        }
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
        let caller = check(&self.shared, &request, Operation::StreamLlm, None, None)?;
        llm::stream(&self.shared, caller, request).await
    }
}

/// The host `url` (an address the proxy fetched) leads to, for the audit line.
fn final_host(url: &str) -> String {
    // silent-ok: the proxy parsed it to fetch it; an address it could not is named by none.
    crate::net::egress::proxy::host_and_port(url).map(|(host, _)| host).unwrap_or_default()
}
