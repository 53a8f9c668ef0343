//! RequestToolExecution (an agent asks for a tool call) and ServeTools (a tool container's
//! runner takes calls).

use std::time::Duration;

use baaaht_proto::v1;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument as _;

use super::convert;
use crate::audit::{Kind, Record};
use crate::auth::{Caller, ContainerIdentity, Role};
use crate::config::{ToolMode, ToolName};
use crate::policy::Policy;
use crate::tools::ToolsError;
use crate::Shared;

impl From<ToolsError> for Status {
    fn from(error: ToolsError) -> Status {
        match error {
            ToolsError::Timeout(_) => Status::deadline_exceeded(error.to_string()),
            ToolsError::Workspace(crate::workspace::WorkspaceError::TooMany(_)) => {
                Status::resource_exhausted(baaaht_proto::error_chain(&error))
            }
            ToolsError::Workspace(_) | ToolsError::Ipc { .. } => Status::internal(baaaht_proto::error_chain(&error)),
            _ => Status::unavailable(error.to_string()),
        }
    }
}

/// The timeout of `tool`: its override, else the default, lowered by the request.
fn timeout_of(shared: &Shared, tool: &str, requested: u32) -> Duration {
    let tools = &shared.loaded.config.tools;
    let configured = serde_json::from_value::<ToolName>(serde_json::Value::String(tool.to_string()))
        .ok()
        .and_then(|name| tools.timeout_overrides.get(&name).copied())
        .unwrap_or(tools.default_timeout);
    let seconds = if requested > 0 { u64::from(requested).min(configured) } else { configured };
    Duration::from_secs(seconds.max(1))
}

pub(super) async fn request(
    shared: &Shared,
    caller: Caller,
    request: Request<v1::ToolRequest>,
) -> Result<Response<v1::ToolResponse>, Status> {
    let Caller::Container(identity) = &caller else {
        return Err(Status::permission_denied("RequestToolExecution is for agent containers"));
    };
    let correlation_id = crate::server::correlation_id(&request);
    let message = request.into_inner();
    let tool = message.tool.as_str();
    let audit = |kind: Kind, outcome: &str| Record::by(kind, &caller, outcome).correlation(&correlation_id);
    if let Some(named) = tool.strip_prefix("mcp__") {
        return mcp_call(shared, &caller, &correlation_id, named, &message).await.map(Response::new);
    }
    if !Policy::tools_of(identity.role).contains(&tool) {
        let allowed = Policy::tools_of(identity.role).join(", ");
        let reason = format!("the {} role may not use `{tool}`; its tools are: {allowed}", identity.role);
        shared.audit.record(audit(Kind::Policy, "refused").detail("tool", tool).detail("reason", reason.as_str()));
        return Err(Status::permission_denied(reason));
    }
    let mut env = std::collections::HashMap::new();
    let mut command = None;
    if tool == "exec" {
        let params: serde_json::Value = serde_json::from_str(&message.params_json)
            .map_err(|error| Status::invalid_argument(format!("params_json is not JSON: {error}")))?;
        // A shell command, or a skill's script by itself (which alone gets its skill's secrets).
        let script = params["script"].as_str();
        let text = match script {
            Some(script) => {
                let args = params["args"].as_array().into_iter().flatten().filter_map(|arg| arg.as_str());
                std::iter::once(script).chain(args).collect::<Vec<_>>().join(" ")
            }
            None => params["command"].as_str().unwrap_or_default().to_string(),
        };
        if let Err(error) = shared.policy.validate_exec_command(&text) {
            let record = audit(Kind::Policy, "refused").detail("tool", tool).detail("command", text.as_str());
            shared.audit.record(record.detail("reason", error.to_string()));
            return Err(Status::permission_denied(error.to_string()));
        }
        if let Some(script) = script {
            env = skill_env(shared, &caller, &correlation_id, script);
        }
        command = Some(text);
    }
    debug_assert_ne!(identity.role, Role::Tool);
    let timeout = timeout_of(shared, tool, message.timeout_seconds);
    let call_id = if message.tool_call_id.is_empty() {
        uuid::Uuid::new_v4().simple().to_string()
    } else if crate::ipc::is_valid_call_id(&message.tool_call_id) {
        message.tool_call_id.clone()
    } else {
        return Err(Status::invalid_argument("tool_call_id must be 1-128 letters, digits, `-` or `_`"));
    };
    // Asked again (e.g. after a daemon restart): the recorded result, never a second run.
    let coder = identity.role == Role::Coder;
    if let Some(recorded) = shared.ipc.collect(&identity.context, &identity.session_id, coder, &call_id) {
        tracing::info!(tool, call_id = %call_id, "answered with a result collected before");
        return Ok(Response::new(convert::tool_response(recorded)));
    }
    let received = std::time::Instant::now();
    let (session, context) = (&identity.session_id, &identity.context);
    let call = crate::tools::Call {
        session,
        context,
        coder,
        call_id: call_id.clone(),
        tool,
        params_json: message.params_json,
        timeout,
        env,
    };
    let span = tracing::info_span!("tool", tool = %tool);
    let response = if shared.loaded.config.tools.mode == ToolMode::Cold {
        shared.tools.call_cold(call).instrument(span).await?
    } else {
        shared.tools.call(call).instrument(span).await?
    };
    // The runner also wrote the result to the context's IPC folder: record it for an agent that
    // asks again, off the answer's path (a crash before then leaves the file for the next start).
    let (ipc, recorded_context, recorded_session) = (shared.ipc.clone(), context.clone(), session.clone());
    tokio::task::spawn_blocking(move || ipc.collect(&recorded_context, &recorded_session, coder, &call_id));
    let mut response = response;
    // Request in → result out, as the daemon saw it (baaaht-bench tools reads it).
    response.metadata.insert("daemon_us".into(), received.elapsed().as_micros().to_string());
    shared.metrics.record_tool(tool, !response.is_error, received.elapsed());
    if let Some(command) = command {
        let exit_code = response.metadata.get("exit_code").cloned().unwrap_or_else(|| "none".into());
        let record = audit(Kind::Exec, if response.is_error { "failed" } else { "ok" })
            .detail("command", command)
            .detail("exit_code", exit_code.parse::<i64>().map_or(serde_json::Value::from(exit_code), Into::into))
            .detail("duration_ms", response.duration_ms);
        shared.audit.record(record);
    }
    tracing::info!(
        tool,
        session = %identity.session_id,
        is_error = response.is_error,
        duration_ms = response.duration_ms,
        "tool call"
    );
    publish_progress(shared, identity, tool, response.is_error, response.duration_ms);
    Ok(Response::new(convert::tool_response(response)))
}

/// Tells the turn's watchers that `tool` finished (or failed) for the agent `identity`.
fn publish_progress(shared: &Shared, identity: &ContainerIdentity, tool: &str, is_error: bool, duration_ms: u64) {
    if let Some(live) = shared.agents.live(&identity.name) {
        let progress = crate::events::Kind::Tool {
            agent: identity.role,
            tool: tool.to_string(),
            state: if is_error { "failed" } else { "finished" }.into(),
            duration_ms,
        };
        let event = crate::events::Event::of_turn(&live.session, &live.user_turn, &live.correlation_id, progress);
        shared.events.publish(&live.context, event);
    }
}

/// The environment of `server`'s container: its `env` with `${NAME}` taken from the secrets
/// store (or the daemon's environment), each secret read audited.
pub(super) fn mcp_env(
    shared: &Shared,
    caller: &Caller,
    correlation_id: &str,
    server: &crate::mcp::config::Server,
) -> Result<Vec<(String, String)>, Status> {
    let mut env = vec![];
    let rules = crate::secrets::Rules::of(&shared.loaded);
    let referrer = match server.scope {
        crate::mcp::config::Scope::System => crate::secrets::Referrer::System,
        crate::mcp::config::Scope::Context(_) => crate::secrets::Referrer::Context,
    };
    for (name, reference) in &server.config.env {
        let refused =
            |why: String| Status::failed_precondition(format!("MCP server `{}`: env {name}: {why}", server.name));
        for secret in crate::secrets::reference_names(reference) {
            if let Err(why) = rules.check(secret, referrer) {
                let record = Record::by(Kind::Secret, caller, "refused").correlation(correlation_id);
                let record = record.detail("name", secret).detail("mcp_server", server.name.as_str());
                shared.audit.record(record.detail("reason", why.as_str()));
                return Err(refused(why));
            }
        }
        let resolved = crate::secrets::resolve_references(reference, shared.secrets.current().as_deref(), |n| {
            std::env::var(n).ok()
        });
        let value = resolved.map_err(|error| refused(error.to_string()))?;
        for secret in crate::secrets::reference_names(reference) {
            let record = Record::by(Kind::Secret, caller, "read").correlation(correlation_id);
            shared.audit.record(record.detail("name", secret).detail("mcp_server", server.name.as_str()));
        }
        env.push((name.clone(), value.to_string()));
    }
    Ok(env)
}

/// How long an agent's registration waits for MCP servers to list their tools.
const OFFER_WAIT: Duration = Duration::from_secs(20);

/// The MCP tools offered to the agent `identity`, as `mcp__{server}__{tool}` with their
/// descriptions and schemas: those of the servers its context sees and its role may use. A
/// server that has not listed its tools before is started to list them; one that cannot be is
/// left out (and logged).
pub(super) async fn mcp_definitions(
    shared: &std::sync::Arc<Shared>,
    identity: &ContainerIdentity,
) -> Vec<v1::ToolDefinition> {
    if !crate::auth::Operation::RequestToolExecution.container_roles().contains(&identity.role) {
        return vec![];
    }
    let (servers, problems) = crate::mcp::config::servers_for(shared.data_dir.root(), &identity.context);
    for problem in problems {
        tracing::warn!(%problem, "skipping an mcp.yaml");
    }
    let mut asked = tokio::task::JoinSet::new();
    for (index, server) in servers.into_iter().filter(|server| server.offered_to(identity.role)).enumerate() {
        let (shared, identity) = (shared.clone(), identity.clone());
        asked.spawn(async move {
            // What it listed before, without its secrets; else it is started to list it.
            let offer = match shared.mcp.known_offer(&identity.context, &server) {
                Some(offer) => Ok(offer),
                None => {
                    let caller = Caller::Container(std::sync::Arc::new(identity.clone()));
                    match mcp_env(&shared, &caller, "", &server) {
                        Ok(env) => shared.mcp.offer(&identity.context, &server, env).await.map_err(|e| e.to_string()),
                        Err(status) => Err(status.message().to_string()),
                    }
                }
            };
            let offer = match offer {
                Ok(offer) => offer,
                Err(error) => {
                    tracing::warn!(server = %server.name, %error, "an MCP server's tools are not offered");
                    return (index, vec![]);
                }
            };
            let definitions = offer
                .definitions(&server)
                .into_iter()
                .filter_map(|(tool, description, schema)| {
                    let name = server.tool_name(&tool);
                    let name_ok = name.len() <= crate::mcp::config::MAX_TOOL_NAME
                        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                    if !name_ok {
                        tracing::warn!(server = %server.name, tool = %tool, "an MCP tool's name is too long or not [A-Za-z0-9_-]: not offered");
                    }
                    name_ok.then(|| v1::ToolDefinition { name, description, parameters_json: schema.to_string() })
                })
                .collect();
            (index, definitions)
        });
    }
    // An agent must register within its connect timeout: a server still starting (its layer
    // being built) is left out of this agent's tools, and keeps starting for the next.
    let deadline = tokio::time::Instant::now() + OFFER_WAIT;
    let mut found = vec![];
    loop {
        match tokio::time::timeout_at(deadline, asked.join_next()).await {
            Ok(Some(Ok(done))) => found.push(done),
            Ok(Some(Err(error))) => tracing::warn!(%error, "listing an MCP server's tools failed"),
            Ok(None) => break,
            Err(_) => {
                tracing::warn!(
                    servers = asked.len(),
                    "MCP servers still starting are not offered to this agent; the next one gets their tools"
                );
                asked.detach_all();
                break;
            }
        }
    }
    found.sort_by_key(|(index, _)| *index);
    found.into_iter().flat_map(|(_, definitions)| definitions).collect()
}

/// The `addons.env` of the skill whose script `script` is (`/skills/{name}/scripts/…`, a skill
/// `context` sees), the secrets its skill's scope may name (`secrets::Rules`), from the
/// secrets store or else the daemon's environment. The runner gives them to that script's run
/// only: a shell command never gets any.
fn skill_env(
    shared: &Shared,
    caller: &Caller,
    correlation_id: &str,
    script: &str,
) -> std::collections::HashMap<String, String> {
    let Caller::Container(identity) = caller else { return std::collections::HashMap::new() };
    let context = &identity.context;
    let mut env = std::collections::HashMap::new();
    let Some(name) = baaaht_proto::skill_of_script(script) else { return env };
    let skills = crate::skills::manifest(shared.data_dir.root(), &shared.loaded.config.skills.directories, context);
    let Some(found) = skills.iter().find(|found| found.skill.name == name) else { return env };
    let rules = crate::secrets::Rules::of(&shared.loaded);
    let referrer = match found.scope {
        crate::skills::Scope::System => crate::secrets::Referrer::System,
        crate::skills::Scope::User | crate::skills::Scope::Group => crate::secrets::Referrer::Context,
    };
    for variable in &found.skill.addons.env {
        if let Err(why) = rules.check(variable, referrer) {
            tracing::warn!(skill = %name, variable = %variable, %why, "a skill's addons.env variable is not given");
            let record = Record::by(Kind::Secret, caller, "refused").correlation(correlation_id);
            shared.audit.record(record.detail("name", variable.as_str()).detail("skill", name).detail("reason", why));
            continue;
        }
        let reference = format!("${{{variable}}}");
        match crate::secrets::resolve_references(&reference, shared.secrets.current().as_deref(), |n| {
            std::env::var(n).ok()
        }) {
            Ok(value) => {
                env.insert(variable.clone(), value.to_string());
                let record = Record::by(Kind::Secret, caller, "read").correlation(correlation_id);
                shared.audit.record(record.detail("name", variable.as_str()).detail("skill", name));
            }
            Err(_) => tracing::warn!(
                skill = %name,
                variable = %variable,
                "a skill's addons.env variable is not in the secrets store: run `baaahtd secrets set {variable}`"
            ),
        }
    }
    env
}

/// The most text an MCP tool's answer gives the model, as the built-in tools.
const MAX_MCP_OUTPUT: usize = 64 << 10;

/// A call of `named` (`{server}__{tool}`, from `mcp__{server}__{tool}`): the caller's context's
/// server, if its role may use it, with the server's environment resolved from the secrets.
async fn mcp_call(
    shared: &Shared,
    caller: &Caller,
    correlation_id: &str,
    named: &str,
    message: &v1::ToolRequest,
) -> Result<v1::ToolResponse, Status> {
    let received = std::time::Instant::now();
    let Caller::Container(identity) = caller else {
        return Err(Status::permission_denied("RequestToolExecution is for agent containers"));
    };
    let Some((server_name, tool)) = named.split_once("__") else {
        return Err(Status::invalid_argument("an MCP tool is named mcp__{server}__{tool}"));
    };
    let audit = |kind: Kind, outcome: &str| Record::by(kind, caller, outcome).correlation(correlation_id);
    let (servers, problems) = crate::mcp::config::servers_for(shared.data_dir.root(), &identity.context);
    for problem in problems {
        tracing::warn!(%problem, "skipping an mcp.yaml");
    }
    let Some(server) = servers.iter().find(|server| server.name == server_name) else {
        return Err(Status::not_found(format!("no MCP server `{server_name}` is configured for {}", identity.context)));
    };
    if !server.offered_to(identity.role) {
        let reason = format!("the {} role may not use the MCP server `{server_name}`", identity.role);
        let record = audit(Kind::Policy, "refused").detail("tool", message.tool.as_str());
        shared.audit.record(record.detail("reason", reason.as_str()));
        return Err(Status::permission_denied(reason));
    }
    let arguments = match serde_json::from_str::<serde_json::Value>(&message.params_json) {
        Ok(serde_json::Value::Object(arguments)) => arguments,
        Ok(serde_json::Value::Null) => serde_json::Map::new(),
        _ => return Err(Status::invalid_argument("params_json of an MCP tool is a JSON object")),
    };
    let env = mcp_env(shared, caller, correlation_id, server)?;
    let mut timeout = Duration::from_secs(server.config.timeout);
    if message.timeout_seconds > 0 {
        timeout = timeout.min(Duration::from_secs(u64::from(message.timeout_seconds)));
    }
    let started = std::time::Instant::now();
    let answer = shared.mcp.call(&identity.context, server, &identity.session_id, env, tool, arguments, timeout).await;
    let elapsed = started.elapsed();
    shared.metrics.record_tool(&message.tool, answer.as_ref().is_ok_and(|a| !a.is_error), elapsed);
    let (mut content, is_error) = match answer {
        Ok(answer) => (answer.text, answer.is_error),
        Err(error) => (error.to_string(), true),
    };
    if content.len() > MAX_MCP_OUTPUT {
        let mut cut = MAX_MCP_OUTPUT;
        while !content.is_char_boundary(cut) {
            cut -= 1;
        }
        let dropped = content.len() - cut;
        content.truncate(cut);
        content.push_str(&format!("\n[truncated: {dropped} more bytes not shown]"));
    }
    let duration_ms = elapsed.as_millis() as u64;
    tracing::info!(tool = %message.tool, session = %identity.session_id, is_error, duration_ms, "MCP tool call");
    // Every call, as an exec is: which server and tool, how it ended, how long it took.
    let record = audit(Kind::Mcp, if is_error { "failed" } else { "ok" })
        .detail("server", server.name.as_str())
        .detail("tool", tool)
        .detail("duration_ms", duration_ms);
    shared.audit.record(record);
    publish_progress(shared, identity, &message.tool, is_error, duration_ms);
    // Request in → result out, as the daemon saw it (baaaht-bench mcp reads it).
    let metadata = [("daemon_us".to_string(), received.elapsed().as_micros().to_string())].into_iter().collect();
    Ok(v1::ToolResponse { content, is_error, duration_ms, metadata })
}

pub(super) fn serve(
    shared: &Shared,
    caller: Caller,
    request: Request<Streaming<v1::RunnerMessage>>,
) -> Result<Response<BoxStream<v1::ToolCall>>, Status> {
    let Caller::Container(identity) = caller else {
        return Err(Status::permission_denied("ServeTools is for tool containers"));
    };
    let results = convert::ups(request.into_inner(), convert::runner_message);
    let calls = shared.tools.attach(&identity, results);
    let stream = tokio_stream::wrappers::ReceiverStream::new(calls);
    Ok(Response::new(Box::pin(tokio_stream::StreamExt::map(stream, |down| Ok(convert::tool_call(down))))))
}
