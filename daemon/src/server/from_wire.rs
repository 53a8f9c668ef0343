//! The protocol's messages as the domain's types: what the daemon is sent, checked as it is
//! converted (rust-analyzer's `from_proto`). Only `server/` speaks the wire format; `to_wire.rs`
//! is the other way.

use baaaht_proto::v1;
use tonic::Status;

use super::valid_id;
use crate::base::auth::{Caller, Context, ContextKind, Role};
use crate::net::egress::relay::TunnelUp;
use crate::store::sessions::{Filter, SessionStatus};

/// A field of a message that does not read as the domain's type; a caller makes it a
/// `Status::invalid_argument`, with the field's name before it where the message lacks it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WireError {
    #[error("type must be CONTEXT_TYPE_USER or CONTEXT_TYPE_GROUP")]
    ContextType,
    #[error("id `{}` is not a valid id: use 1-128 letters, digits, `.`, `_` or `-`", .0.escape_debug())]
    ContextId(String),
    #[error("role {0} is not a known AgentRole")]
    Role(i32),
    #[error("since `{0}`: write a duration like 90s, 15m, 1h, 2d or 1w, or an RFC 3339 time")]
    Since(String),
}

/// The context a protocol reference names; the error says what is wrong with it (the caller
/// adds the field's name).
pub(crate) fn context_of(reference: &v1::ContextRef) -> Result<Context, WireError> {
    let kind = match v1::ContextType::try_from(reference.r#type) {
        Ok(v1::ContextType::User) => ContextKind::User,
        Ok(v1::ContextType::Group) => ContextKind::Group,
        _ => return Err(WireError::ContextType),
    };
    if !crate::base::auth::is_valid_context_id(&reference.id) {
        return Err(WireError::ContextId(reference.id.clone()));
    }
    Ok(Context { kind, id: reference.id.clone() })
}

/// The role a protocol value names; `None` for "unspecified".
pub(crate) fn role_of(value: i32) -> Result<Option<Role>, WireError> {
    if value == v1::AgentRole::Unspecified as i32 {
        return Ok(None);
    }
    baaaht_proto::role_name(value).and_then(Role::named).map(Some).ok_or(WireError::Role(value))
}

/// The daemon's form of a container's answer to a probe.
pub(crate) fn health_answer(answer: v1::HealthCheckResponse) -> crate::work::health::Answer {
    crate::work::health::Answer { probe: answer.probe, status: answer.status, message: answer.message }
}

/// What an agent sends back over TakeTurns.
pub(crate) fn agent_report(report: v1::AgentReport) -> crate::work::peers::Up<crate::work::agents::TurnOutcome> {
    use crate::work::peers::Up;
    match report.kind {
        Some(v1::agent_report::Kind::Result(result)) => Up::Answer {
            id: result.turn_id,
            answer: crate::work::agents::TurnOutcome {
                content: result.content,
                is_error: result.is_error,
                steps: result.steps,
                refused: result.refused,
                tokens: result.tokens,
            },
        },
        Some(v1::agent_report::Kind::Health(answer)) => Up::Health(health_answer(answer)),
        Some(v1::agent_report::Kind::Hello(_)) | None => Up::Other,
    }
}

/// What a tool runner sends back over ServeTools.
pub(crate) fn runner_message(message: v1::RunnerMessage) -> crate::work::tools::RunnerUp {
    use crate::work::peers::Up;
    use crate::work::tools::RunnerUp;
    use v1::runner_message::Kind;
    match message.kind {
        Some(Kind::Result(result)) => {
            let response = result.response.unwrap_or_default();
            RunnerUp::Peer(Up::Answer { id: result.call_id, answer: tool_answer(response) })
        }
        Some(Kind::Health(answer)) => RunnerUp::Peer(Up::Health(health_answer(answer))),
        Some(Kind::EgressOpen(open)) => RunnerUp::Tunnel(tunnel_open(open)),
        Some(Kind::EgressData(data)) => RunnerUp::Tunnel(TunnelUp::Data { id: data.id, data: data.data }),
        Some(Kind::EgressClose(close)) => {
            RunnerUp::Tunnel(TunnelUp::Close { id: close.id, write_only: close.write_only })
        }
        Some(Kind::EgressAck(ack)) => RunnerUp::Tunnel(TunnelUp::Ack { id: ack.id, bytes: ack.bytes }),
        Some(Kind::Hello(_)) | None => RunnerUp::Peer(Up::Other),
    }
}

fn tool_answer(response: v1::ToolResponse) -> crate::work::tools::ToolAnswer {
    crate::work::tools::ToolAnswer {
        content: response.content,
        is_error: response.is_error,
        duration_ms: response.duration_ms,
        metadata: response.metadata,
    }
}

/// The daemon's form of a stream a container sends up: each message converted with `up`, a
/// broken stream its status's message.
pub(crate) fn ups<T, U>(
    stream: tonic::Streaming<T>,
    up: fn(T) -> U,
) -> impl tokio_stream::Stream<Item = Result<U, crate::work::peers::StreamError>> + Unpin + Send + 'static
where
    T: Send + 'static,
    U: Send + 'static,
{
    tokio_stream::StreamExt::map(stream, move |message| match message {
        Ok(message) => Ok(up(message)),
        Err(status) => Err(crate::work::peers::StreamError(status.message().to_string())),
    })
}

/// A connection a container's proxy opens (an MCP relay's, a tool runner's).
fn tunnel_open(open: v1::EgressOpen) -> TunnelUp {
    TunnelUp::Open { id: open.id, host: open.host, port: open.port, asked_by: open.asked_by }
}

/// What an MCP server's relay sends up over RelayMcp.
pub(crate) fn mcp_up(up: v1::McpUp) -> crate::work::mcp::relay::Up {
    use crate::work::mcp::relay::Up;
    use v1::mcp_up::Kind;
    match up.kind {
        Some(Kind::Stdout(bytes)) => Up::Stdout(bytes),
        Some(Kind::Stderr(line)) => Up::Stderr(line),
        Some(Kind::Exited(exit)) => Up::Exited { code: exit.code, signal: exit.signal },
        Some(Kind::Health(answer)) => Up::Health(health_answer(answer)),
        Some(Kind::EgressOpen(open)) => Up::Tunnel(tunnel_open(open)),
        Some(Kind::EgressData(data)) => Up::Tunnel(TunnelUp::Data { id: data.id, data: data.data }),
        Some(Kind::EgressClose(close)) => Up::Tunnel(TunnelUp::Close { id: close.id, write_only: close.write_only }),
        Some(Kind::EgressAck(ack)) => Up::Tunnel(TunnelUp::Ack { id: ack.id, bytes: ack.bytes }),
        Some(Kind::Hello(_)) | None => Up::Other,
    }
}

/// The domain's form of a ScheduleTask request (checked by the scheduler).
pub(crate) fn task_request(definition: v1::TaskDefinition) -> crate::drive::scheduler::TaskRequest {
    crate::drive::scheduler::TaskRequest {
        r#type: definition.r#type,
        schedule: every(definition.schedule),
        agent: definition.agent,
        prompt: definition.prompt,
        description: definition.description,
        timezone: definition.timezone,
        active_hours: definition.active_hours,
        context_mode: definition.context_mode,
        notification: definition.notification.map(|n| (n.channel, n.on_success, n.on_failure)),
        catch_up: definition.catch_up,
        concurrency: definition.concurrency,
        retry_interrupted: definition.retry_interrupted,
        timeout_seconds: definition.timeout_seconds,
    }
}

/// When a task runs, as the wire says it (none: not said).
fn every(schedule: Option<v1::TaskSchedule>) -> Option<crate::drive::scheduler::Every> {
    use crate::drive::scheduler::Every;
    schedule.and_then(|schedule| schedule.kind).map(|kind| match kind {
        v1::task_schedule::Kind::Cron(cron) => Every::Cron(cron),
        v1::task_schedule::Kind::IntervalSeconds(seconds) => Every::Seconds(seconds),
        v1::task_schedule::Kind::Once(at) => Every::Once(at),
        v1::task_schedule::Kind::Cadence(cadence) => Every::Cadence(cadence),
    })
}

/// A change to a task as asked for.
pub(crate) fn task_change(change: v1::TaskChange) -> crate::drive::scheduler::TaskChange {
    crate::drive::scheduler::TaskChange {
        prompt: change.prompt,
        description: change.description,
        schedule: every(change.schedule),
        timezone: change.timezone,
    }
}

/// A tool's web request: a search when it names a query, else a fetch.
pub(super) fn web_asked(message: v1::WebProxyRequest) -> crate::net::egress::web::Asked {
    use crate::net::egress::web::Asked;
    if !message.search_query.is_empty() {
        return Asked::Search { query: message.search_query, count: message.search_count as usize };
    }
    Asked::Fetch {
        method: message.method,
        url: message.url,
        headers: message.headers.into_iter().collect(),
        body: message.body,
    }
}

/// A self-test as `baaaht doctor` asks for it (a tool container in the `self-test` session by
/// default), or which field is wrong.
pub(super) fn self_test(message: v1::SelfTestRequest) -> Result<crate::ops::selftest::SelfTest, Status> {
    let role = super::role_of(message.role)?.unwrap_or(Role::Tool);
    let probe = match message.probe_address.as_str() {
        "" => None,
        text => Some(
            text.parse::<std::net::SocketAddr>()
                .map_err(|_unparsable| Status::invalid_argument(format!("probe_address `{text}` is not IP:PORT")))?,
        ),
    };
    let llm_model = match message.llm_model.as_str() {
        "" => None,
        model if model.len() <= 200 && model.chars().all(|c| c.is_ascii_alphanumeric() || "/-_.:@".contains(c)) => {
            Some(model.to_string())
        }
        model => {
            return Err(Status::invalid_argument(format!(
                "llm_model `{}` is not a model name such as anthropic/claude-sonnet-4-20250514",
                model.escape_debug()
            )))
        }
    };
    let session = if message.session_id.is_empty() { "self-test".to_string() } else { message.session_id };
    if !crate::base::auth::is_valid_context_id(&session) {
        return Err(Status::invalid_argument(format!(
            "session_id `{}` is not a valid id: use 1-128 letters, digits, `.`, `_` or `-`",
            session.escape_debug()
        )));
    }
    Ok(crate::ops::selftest::SelfTest { role, probe, llm_model, session, linger: message.linger_seconds })
}

/// A user's message as a request carries it.
pub(super) struct Written<'a> {
    pub(super) sender_id: &'a str,
    pub(super) channel: i32,
    pub(super) session_id: String,
    pub(super) parent_entry_id: String,
    pub(super) content: String,
    pub(super) attachments: Vec<v1::Attachment>,
}

/// A message for the orchestrator: its session id checked (`field` names it in the error), the
/// sender one the caller may write as, the channel the caller's.
pub(super) fn incoming(
    caller: &Caller,
    context: Context,
    written: Written<'_>,
    field: &str,
) -> Result<crate::drive::orchestrator::Incoming, Status> {
    if !written.session_id.is_empty() {
        valid_id(&written.session_id, field)?;
    }
    let sender = sender_of(caller, &context, written.sender_id)?;
    let mut content = written.content;
    if !written.attachments.is_empty() && written.session_id.is_empty() {
        return Err(Status::invalid_argument(format!(
            "{field}: a message with attachments names the session UploadFile stored them in"
        )));
    }
    for (index, attachment) in written.attachments.iter().enumerate() {
        if !crate::store::uploads::is_upload_path(&attachment.path) {
            return Err(Status::invalid_argument(format!(
                "attachments[{index}].path: `{}` is not an upload; give the path UploadFile answered (uploads/NAME)",
                attachment.path
            )));
        }
        if !content.is_empty() {
            content.push_str("\n\n");
        }
        content.push_str(&crate::store::uploads::mention(
            &attachment.path,
            &attachment.mime_type,
            attachment.size_bytes,
        ));
    }
    let stored_in = written.session_id.clone();
    let attachments = written
        .attachments
        .into_iter()
        .map(|attachment| crate::store::sessions::log::Attachment {
            session: stored_in.clone(),
            path: attachment.path,
            mime_type: attachment.mime_type,
            size_bytes: attachment.size_bytes,
        })
        .collect();
    Ok(crate::drive::orchestrator::Incoming {
        context,
        session: (!written.session_id.is_empty()).then_some(written.session_id),
        sender,
        channel: channel_of(caller, written.channel),
        content,
        parent: (!written.parent_entry_id.is_empty()).then_some(written.parent_entry_id),
        attachments,
        spoken: false,
    })
}

pub(super) fn channel_name(channel: i32) -> Option<String> {
    match v1::ChannelType::try_from(channel) {
        Ok(v1::ChannelType::Tui) => Some("tui".into()),
        Ok(v1::ChannelType::Web) => Some("web".into()),
        Ok(v1::ChannelType::Slack) => Some("slack".into()),
        Ok(v1::ChannelType::Telegram) => Some("telegram".into()),
        Ok(v1::ChannelType::Email) => Some("email".into()),
        Ok(v1::ChannelType::Matrix) => Some("matrix".into()),
        Ok(v1::ChannelType::Cli) => Some("cli".into()),
        _ => None,
    }
}

pub(super) fn filter(request: &v1::SessionFilter) -> Result<Filter, Status> {
    let context = match (request.group_id.is_empty(), request.user_id.is_empty()) {
        (false, _) => Some(Context::group(request.group_id.clone())),
        (true, false) if request.context_type == v1::ContextType::User as i32 => {
            Some(Context::user(request.user_id.clone()))
        }
        _ => None,
    };
    let status = match request.status.as_str() {
        "" => None,
        "created" => Some(SessionStatus::Created),
        "active" => Some(SessionStatus::Active),
        "idle" => Some(SessionStatus::Idle),
        "archived" => Some(SessionStatus::Archived),
        other => {
            return Err(Status::invalid_argument(format!(
                "status `{}` is not one of created, active, idle, archived",
                other.escape_debug()
            )))
        }
    };
    let nonempty = |text: &str| (!text.is_empty()).then(|| text.to_string());
    Ok(Filter {
        context,
        user_id: nonempty(&request.user_id).filter(|_| request.group_id.is_empty()),
        status,
        created_after: nonempty(&request.created_after),
        created_before: nonempty(&request.created_before),
    })
}

/// Checks an id a client sent before it is used as a folder name.
/// Who writes a message: a gateway's user, always that user; in a user's own conversation that
/// user (another `sender_id` is refused, so a message never lands in someone else's session);
/// in a group the given `sender_id`, else the group itself.
pub(super) fn sender_of(caller: &Caller, context: &crate::base::auth::Context, given: &str) -> Result<String, Status> {
    if let Caller::Gateway(call) = caller {
        return call.user.as_ref().map(|user| user.id.clone()).ok_or_else(|| Status::unauthenticated("no end user"));
    }
    if context.kind == crate::base::auth::ContextKind::User {
        if !given.is_empty() && given != context.id {
            return Err(Status::invalid_argument(format!(
                "sender_id `{}` is not {context}: in a user's own conversation the sender is that user; \
                 sender_id names who writes in a group",
                given.escape_debug()
            )));
        }
        return Ok(context.id.clone());
    }
    let sender = if given.is_empty() { context.id.clone() } else { given.to_string() };
    valid_id(&sender, "sender_id")?;
    Ok(sender)
}

/// The channel a message came from: a gateway's own (whatever it says), else what the client
/// says.
pub(super) fn channel_of(caller: &Caller, requested: i32) -> Option<String> {
    match caller {
        Caller::Gateway(call) => Some(call.channel.to_string()),
        _ => channel_name(requested),
    }
}

/// The kind of gateway `added` names (its identity namespace) and how the daemon runs it.
pub(crate) fn gateway_run(
    added: &v1::AddGatewayRequest,
) -> Result<(crate::work::gateways::GatewayKind, crate::work::gateways::RunMode), Status> {
    use crate::work::gateways::GatewayKind;
    let kind = match added.kind.as_str() {
        "web" => GatewayKind::Web { issuer: added.issuer.clone(), audience: added.audience.clone() },
        "slack" => GatewayKind::Slack { team: added.team.clone() },
        "telegram" => GatewayKind::Telegram { bot: added.bot.clone() },
        "email" => GatewayKind::Email { address: added.address.trim().to_ascii_lowercase() },
        "matrix" => GatewayKind::Matrix { homeserver: added.homeserver.trim().trim_end_matches('/').to_string() },
        other => {
            return Err(Status::invalid_argument(format!(
                "kind `{other}`: a gateway is web, slack, telegram, email or matrix"
            )))
        }
    };
    let mode = match added.mode.as_str() {
        "" => crate::work::gateways::RunMode::UNNAMED,
        text => crate::work::gateways::RunMode::parse(text)
            .ok_or_else(|| Status::invalid_argument(format!("mode `{text}`: use container, process or external")))?,
    };
    Ok((kind, mode))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::to_wire::{context_ref, role_ref};

    #[test]
    fn roles_and_contexts_round_trip() {
        for role in Role::AGENTS.iter().chain([&Role::Tool]) {
            assert_eq!(role_of(role_ref(*role) as i32), Ok(Some(*role)));
        }
        assert_eq!(role_of(0), Ok(None));
        assert!(role_of(99).is_err());
        for context in [Context::user("alice"), Context::group("family")] {
            assert_eq!(context_of(&context_ref(&context)), Ok(context));
        }
        let bad = v1::ContextRef { r#type: v1::ContextType::User as i32, id: "../x".into() };
        assert!(context_of(&bad).is_err());
    }
}
