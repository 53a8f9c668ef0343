//! The domain's types in the protocol's forms: what the daemon sends (rust-analyzer's
//! `to_proto`). Only `server/` speaks the wire format; `from_wire.rs` is the other way.

use baaaht_proto::v1;

use crate::base::auth::{Context, ContextKind, Role};
use crate::net::egress::relay::TunnelDown;
use crate::store::sessions::{Entry, SessionRecord};
use crate::work::mcp::config::Scope;

/// The protocol's reference to `context`.
pub(crate) fn context_ref(context: &Context) -> v1::ContextRef {
    let kind = match context.kind {
        ContextKind::User => v1::ContextType::User,
        ContextKind::Group => v1::ContextType::Group,
    };
    v1::ContextRef { r#type: kind as i32, id: context.id.clone() }
}

/// The protocol's name for `role` (the daemon's own roles are all a tool's to agents).
pub(crate) fn role_ref(role: Role) -> v1::AgentRole {
    baaaht_proto::role_named(role.as_str()).unwrap_or(v1::AgentRole::Tool)
}

/// A file shared with a message, as clients see it.
pub(crate) fn attachment(attachment: &crate::store::sessions::log::Attachment) -> v1::Attachment {
    v1::Attachment {
        filename: attachment.path.rsplit('/').next().unwrap_or(&attachment.path).to_string(),
        mime_type: attachment.mime_type.clone(),
        path: attachment.path.clone(),
        size_bytes: attachment.size_bytes,
        voice: crate::store::sent::is_voice_note(&attachment.path, &attachment.mime_type),
    }
}

/// The protocol's channel type for a channel's name (`tui`, `cli`, `web`, `slack`).
pub(crate) fn channel_ref(channel: Option<&str>) -> v1::ChannelType {
    match channel {
        Some("tui") => v1::ChannelType::Tui,
        Some("cli") => v1::ChannelType::Cli,
        Some("web") => v1::ChannelType::Web,
        Some("slack") => v1::ChannelType::Slack,
        Some("telegram") => v1::ChannelType::Telegram,
        Some("email") => v1::ChannelType::Email,
        Some("matrix") => v1::ChannelType::Matrix,
        _ => v1::ChannelType::Unspecified,
    }
}

/// The wire form of `event`, which the bus carried to `context`'s channels.
pub(crate) fn event(context: &Context, event: crate::store::events::Event) -> v1::OrchestratorEvent {
    use crate::store::events::Kind;
    use v1::orchestrator_event::Event as Out;
    let kind = match event.kind {
        Kind::UserMessage { entry_id, sender_id, sender_name, channel, content, attachments, spoken } => {
            Out::UserMessage(v1::UserMessageEntered {
                entry_id,
                sender_id,
                channel: channel_ref(channel.as_deref()) as i32,
                content,
                sender_name,
                attachments: attachments.iter().map(attachment).collect(),
                spoken,
            })
        }
        Kind::TextDelta { index, text } => Out::TextDelta(v1::TextDelta { index, text }),
        Kind::ThinkingDelta { index, thinking, signature } => {
            Out::ThinkingDelta(v1::ThinkingDelta { index, thinking, signature })
        }
        Kind::Delegation { agent, task, state, result } => {
            Out::Delegation(v1::DelegationProgress { agent: role_ref(agent) as i32, task, state, result })
        }
        Kind::Phase { agent, phase } => {
            Out::Phase(v1::TurnPhase { agent: role_ref(agent) as i32, phase: phase.into() })
        }
        Kind::Tool { agent, tool, state, duration_ms } => {
            Out::Tool(v1::ToolProgress { agent: role_ref(agent) as i32, tool, state, duration_ms })
        }
        Kind::Reply { entry_id, content } => Out::Reply(v1::ReplyComplete { entry_id, content }),
        Kind::TurnError { message, for_users } => Out::Error(v1::TurnError { message, for_users }),
        Kind::Message { content, reply_to, metadata, attachments } => Out::Message(v1::OutboundMessage {
            target_context: Some(context_ref(context)),
            content,
            reply_to_message_id: reply_to,
            metadata: metadata.into_iter().collect(),
            attachments: attachments.iter().map(attachment).collect(),
        }),
        Kind::Notice(notice) => Out::Notice(v1::TaskNotice {
            task_id: notice.task_id,
            run_id: notice.run_id,
            title: notice.title,
            content: notice.content,
            channel: notice.channel,
            is_error: notice.is_error,
            heartbeat: notice.heartbeat,
        }),
        Kind::Moved { leaf, text } => Out::Moved(v1::SessionMoved { leaf_entry_id: leaf, text }),
        Kind::ApprovalRequest { id, host, port, agent, asked_by, expires_in, review, action } => {
            Out::Approval(v1::ApprovalRequest {
                id,
                host,
                port: u32::from(port),
                agent: role_ref(agent) as i32,
                asked_by,
                expires_in_seconds: expires_in,
                skill_review: review.map(|review| skill_review(*review)),
                action: action.map(|action| v1::ActionReview {
                    server: action.server,
                    tool: action.tool,
                    effects: action.effects,
                    arguments: action
                        .arguments
                        .into_iter()
                        .map(|(name, value)| v1::ActionArgument { name, value })
                        .collect(),
                    source: action.source,
                }),
            })
        }
        Kind::ApprovalSettled { id, decision, by } => Out::ApprovalSettled(v1::ApprovalSettled { id, decision, by }),
        Kind::Tainted { source, withheld } => Out::Tainted(v1::TurnTainted { source, withheld }),
    };
    v1::OrchestratorEvent {
        session_id: event.session,
        turn_id: event.turn,
        correlation_id: event.correlation_id,
        event: Some(kind),
    }
}

/// The wire form of a health probe.
pub(crate) fn probe(probe: crate::work::health::Probe) -> v1::HealthCheckRequest {
    v1::HealthCheckRequest { container_id: probe.container, probe: probe.probe }
}

/// What the daemon sends an agent over TakeTurns.
pub(crate) fn agent_turn(down: crate::work::peers::Down<crate::work::agents::Turn>) -> v1::AgentTurn {
    match down {
        crate::work::peers::Down::Work(turn) => v1::AgentTurn {
            turn_id: turn.turn_id,
            correlation_id: turn.correlation_id,
            messages: turn.messages.into_iter().map(baaaht_llm::convert::message_to_proto).collect(),
            model: turn.model,
            now: turn.now,
            health_check: None,
            traceparent: turn.traceparent,
            // Filled by TakeTurns with what is offered now.
            tools: vec![],
            skills: None,
        },
        crate::work::peers::Down::Probe(request) => {
            v1::AgentTurn { health_check: Some(probe(request)), ..v1::AgentTurn::default() }
        }
    }
}

/// What the daemon sends a tool runner over ServeTools.
pub(crate) fn tool_call(down: crate::work::peers::Down<crate::work::tools::RunnerWork>) -> v1::ToolCall {
    use crate::work::tools::RunnerWork;
    match down {
        crate::work::peers::Down::Work(RunnerWork::Call(call)) => v1::ToolCall {
            call_id: call.call_id,
            tool: call.tool,
            params_json: call.params_json,
            timeout_seconds: call.timeout.as_secs().min(u64::from(u32::MAX)) as u32,
            env: call.env,
            placeholders: call.placeholders,
            correlation_id: call.correlation_id,
            session: call.session,
            ..v1::ToolCall::default()
        },
        crate::work::peers::Down::Work(RunnerWork::Tunnel(tunnel)) => match tunnel {
            TunnelDown::Opened { id, refused } => {
                v1::ToolCall { egress_opened: Some(v1::EgressOpened { id, refused }), ..v1::ToolCall::default() }
            }
            TunnelDown::Data { id, data } => {
                v1::ToolCall { egress_data: Some(v1::EgressData { id, data }), ..v1::ToolCall::default() }
            }
            TunnelDown::Close { id, write_only } => {
                v1::ToolCall { egress_close: Some(v1::EgressClose { id, write_only }), ..v1::ToolCall::default() }
            }
            TunnelDown::Ack { id, bytes } => {
                v1::ToolCall { egress_ack: Some(v1::EgressAck { id, bytes }), ..v1::ToolCall::default() }
            }
        },
        crate::work::peers::Down::Probe(request) => {
            v1::ToolCall { health_check: Some(probe(request)), ..v1::ToolCall::default() }
        }
    }
}

/// The wire form of a tool call's answer.
pub(crate) fn tool_response(answer: crate::work::tools::ToolAnswer) -> v1::ToolResponse {
    v1::ToolResponse {
        content: answer.content,
        is_error: answer.is_error,
        duration_ms: answer.duration_ms,
        metadata: answer.metadata,
    }
}

/// What the daemon sends an MCP server's relay over RelayMcp.
pub(crate) fn mcp_down(down: crate::work::mcp::relay::Down) -> v1::McpDown {
    use crate::work::mcp::relay::Down;
    use v1::mcp_down::Kind;
    let kind = match down {
        Down::Launch(launch) => Kind::Launch(v1::McpLaunch {
            command: launch.command,
            args: launch.args,
            env: launch.env,
            egress: launch.egress,
        }),
        Down::Stdin(bytes) => Kind::Stdin(bytes),
        Down::Probe(request) => Kind::HealthCheck(probe(request)),
        Down::Tunnel(TunnelDown::Opened { id, refused }) => Kind::EgressOpened(v1::EgressOpened { id, refused }),
        Down::Tunnel(TunnelDown::Data { id, data }) => Kind::EgressData(v1::EgressData { id, data }),
        Down::Tunnel(TunnelDown::Close { id, write_only }) => Kind::EgressClose(v1::EgressClose { id, write_only }),
        Down::Tunnel(TunnelDown::Ack { id, bytes }) => Kind::EgressAck(v1::EgressAck { id, bytes }),
    };
    v1::McpDown { kind: Some(kind) }
}

/// A skill's entry in a manifest: name and description, and the whole body of an
/// always-loaded skill.
pub(crate) fn skill_summary(found: &crate::work::skills::Found) -> v1::SkillSummary {
    v1::SkillSummary {
        name: found.skill.name.clone(),
        description: found.skill.description.clone(),
        scope: found.scope.as_str().into(),
        always_loaded: found.skill.always_loaded,
        body: if found.skill.always_loaded { found.skill.body.clone() } else { String::new() },
    }
}

/// RegisterAgent's answer.
pub(crate) fn agent_config(setup: crate::work::agents::AgentSetup) -> v1::AgentConfig {
    v1::AgentConfig {
        role: role_ref(setup.role) as i32,
        model: setup.model,
        max_iterations: setup.max_iterations,
        temperature: setup.temperature.map(|t| t as f32),
        timeout_seconds: u32::try_from(setup.timeout.as_secs()).unwrap_or(u32::MAX),
        soul: setup.soul,
        identity: setup.identity,
        context_profile: setup.context_profile,
        memories: setup.memories,
        skills: Some(v1::SkillManifest { skills: setup.skills.iter().map(skill_summary).collect() }),
        tools: tool_names(&setup.tools),
        session_id: setup.session_id,
        context: Some(context_ref(&setup.context)),
    }
}

/// `at` in `zone` as RFC 3339 with its UTC offset (what people read: `2026-06-01T09:00:00+02:00`).
pub(crate) fn local_time(at: jiff::Timestamp, zone: &jiff::tz::TimeZone) -> String {
    at.to_zoned(zone.clone()).strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
}

/// A task as the protocol shows it, its times in its own time zone.
pub(crate) fn task_definition(
    task: &crate::drive::scheduler::TaskRecord,
    zone: &jiff::tz::TimeZone,
) -> v1::TaskDefinition {
    use crate::drive::scheduler::{ContextMode, CreatedBy, TaskKind, TaskStatus};
    let spec = &task.schedule;
    let kind = if let Some(cadence) = spec.cadence {
        Some(v1::task_schedule::Kind::Cadence(cadence.as_str().into()))
    } else if let Some(cron) = &spec.cron {
        Some(v1::task_schedule::Kind::Cron(cron.clone()))
    } else if let Some(every) = spec.interval {
        Some(v1::task_schedule::Kind::IntervalSeconds(every))
    } else {
        spec.once.map(|once| v1::task_schedule::Kind::Once(local_time(once, zone)))
    };
    v1::TaskDefinition {
        id: task.id.clone(),
        r#type: match task.kind {
            TaskKind::Heartbeat => "heartbeat",
            TaskKind::Scheduled => "scheduled",
            TaskKind::System => "system",
        }
        .into(),
        user_id: task.user_id.clone(),
        group_id: task.group_id.clone(),
        schedule: Some(v1::TaskSchedule { kind }),
        agent: task.agent.clone(),
        prompt: task.prompt.clone(),
        context_mode: match task.context_mode {
            ContextMode::Session => "session",
            ContextMode::Isolated => "isolated",
            ContextMode::Silent => "silent",
        }
        .into(),
        notification: Some(v1::TaskNotification {
            channel: task.notification.channel.clone(),
            on_success: task.notification.on_success,
            on_failure: task.notification.on_failure,
        }),
        status: match task.status {
            TaskStatus::Active => "active",
            TaskStatus::Paused => "paused",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
        }
        .into(),
        last_run: task.last_run.map(|at| local_time(at, zone)).unwrap_or_default(),
        next_run: task.next_run.map(|at| local_time(at, zone)).unwrap_or_default(),
        failure_count: task.failure_count,
        created_at: local_time(task.created_at, zone),
        created_by: match task.created_by {
            CreatedBy::User => "user",
            CreatedBy::System => "system",
        }
        .into(),
        description: task.description.clone(),
        timezone: task.timezone.clone(),
        catch_up: String::from(task.catch_up),
        concurrency: match task.concurrency {
            crate::drive::scheduler::Concurrency::Forbid => "forbid",
            crate::drive::scheduler::Concurrency::Allow => "allow",
        }
        .into(),
        retry_interrupted: task.retry_interrupted,
        active_hours: spec.active_hours.clone().unwrap_or_default(),
        timeout_seconds: task.timeout,
        section: task.section.clone().unwrap_or_default(),
    }
}

/// A run as the protocol shows it.
pub(crate) fn task_run(row: &crate::drive::scheduler::RunRow, zone: &jiff::tz::TimeZone) -> v1::TaskRun {
    v1::TaskRun {
        run_id: row.run.clone(),
        slot: local_time(row.slot, zone),
        attempt: row.attempt,
        started: row.started.map(|at| local_time(at, zone)).unwrap_or_default(),
        ended: row.ended.map(|at| local_time(at, zone)).unwrap_or_default(),
        outcome: row.outcome.map(|outcome| outcome.as_str().to_string()).unwrap_or_default(),
        missed: row.missed,
        container: row.container.clone().unwrap_or_default(),
        session_id: row.session.clone().unwrap_or_default(),
        tokens: row.tokens,
        error: row.error.clone().unwrap_or_default(),
        result: row.result.clone().unwrap_or_default(),
    }
}

/// Tools named only (the agent's runtime describes its own).
pub(crate) fn tool_names(names: &[&str]) -> Vec<v1::ToolDefinition> {
    names.iter().map(|name| v1::ToolDefinition { name: (*name).into(), ..v1::ToolDefinition::default() }).collect()
}

pub(super) fn web_answer(answer: crate::net::egress::web::Answer) -> v1::WebProxyResponse {
    v1::WebProxyResponse {
        status: u32::from(answer.status),
        headers: answer.headers,
        body: answer.body,
        final_url: answer.final_url,
        truncated: answer.truncated,
    }
}

pub(super) fn self_test_response(
    checked: crate::ops::selftest::Checked,
    tiers: Vec<crate::sandbox::container::Tier>,
) -> v1::SelfTestResponse {
    let (outcome, probe) = (checked.outcome, checked.gvisor);
    v1::SelfTestResponse {
        ok: outcome.problems.is_empty(),
        problems: outcome.problems,
        gvisor_probed: probe.is_some(),
        gvisor_problem: probe
            .as_ref()
            .and_then(|probe| probe.as_ref().err().map(ToString::to_string))
            .unwrap_or_default(),
        gvisor_probe_ms: probe.and_then(Result::ok).map_or(0, |took| took.as_millis() as u64),
        // Filled by the handler, which holds undo's store.
        undo: String::new(),
        undo_ok: true,
        report_json: outcome.report_json,
        container: outcome.container,
        status: outcome.status.to_string(),
        duration_ms: outcome.duration.as_millis() as u64,
        stderr_tail: outcome.stderr_tail,
        isolation: outcome.isolation.as_str().into(),
        tiers: tiers
            .into_iter()
            .map(|tier| v1::IsolationTier {
                role: tier.role.as_str().into(),
                asked: tier.asked.as_str().into(),
                tier: tier.tier.map(|tier| tier.as_str().to_string()).unwrap_or_default(),
                reason: tier.reason,
            })
            .collect(),
    }
}

pub(crate) fn upload_result(session_id: String, stored: crate::store::uploads::Stored) -> v1::UploadResult {
    v1::UploadResult {
        session_id,
        attachment: Some(v1::Attachment {
            path: stored.path(),
            filename: stored.name,
            mime_type: stored.mime_type,
            size_bytes: stored.size,
            voice: false,
        }),
    }
}

pub(super) fn header(record: &SessionRecord) -> v1::SessionHeader {
    let context_type = if record.group_id.is_some() { v1::ContextType::Group } else { v1::ContextType::User };
    v1::SessionHeader {
        id: record.id.clone(),
        version: crate::store::sessions::log::VERSION,
        user_id: record.user_id.clone(),
        group_id: record.group_id.clone().unwrap_or_default(),
        context_type: context_type as i32,
        created: record.created.clone(),
        title: record.title.clone().unwrap_or_default(),
        status: record.status.as_str().into(),
        last_activity: record.last_activity.clone(),
        model: record.model.clone().unwrap_or_default(),
        archived_at: record.archived_at.clone().unwrap_or_default(),
        forked_from_session: record.forked_from.as_ref().map(|fork| fork.session_id.clone()).unwrap_or_default(),
        forked_from_entry: record.forked_from.as_ref().map(|fork| fork.entry_id.clone()).unwrap_or_default(),
        scheduled_run: record.run,
    }
}

fn role_of_name(name: &str) -> v1::AgentRole {
    use crate::base::auth::Role;
    Role::AGENTS
        .iter()
        .find(|role| role.as_str() == name)
        .map_or(v1::AgentRole::Unspecified, |role| super::role_ref(*role))
}

/// A log entry of `record` as the protocol shows it; the header is the transcript's, not an
/// entry.
pub(super) fn entry(record: &crate::store::sessions::SessionRecord, entry: &Entry) -> Option<v1::SessionEntry> {
    use v1::session_entry::Entry as Kind;
    let (id, parent, timestamp, kind) = match entry {
        Entry::Header(_) => return None,
        Entry::Activity { id, after, timestamp, activity } => {
            let kind = crate::store::events::Kind::of_activity(activity.clone());
            let event = crate::server::to_wire::event(
                &record.context(),
                crate::store::events::Event::of_session(&record.id, kind),
            );
            let kind = Kind::Activity(v1::ActivityEntry { after: after.clone(), event: Some(event) });
            return Some(v1::SessionEntry {
                id: id.clone(),
                parent: String::new(),
                timestamp: timestamp.clone(),
                entry: Some(kind),
            });
        }
        Entry::Message { id, parent, timestamp, message } => (
            id,
            parent,
            timestamp,
            Kind::Message(v1::MessageEntry {
                role: message.role.clone(),
                content: message.content.clone(),
                channel: crate::server::to_wire::channel_ref(message.channel_type.as_deref()) as i32,
                sender_id: message.sender_id.clone().unwrap_or_default(),
                sender_name: String::new(),
                attachments: message.attachments.iter().map(crate::server::to_wire::attachment).collect(),
            }),
        ),
        Entry::Delegate { id, parent, timestamp, agent, task, result, .. } => (
            id,
            parent,
            timestamp,
            Kind::Delegate(v1::DelegateEntry {
                agent: role_of_name(agent) as i32,
                task: task.clone(),
                result: result.clone(),
            }),
        ),
        Entry::Compaction { id, parent, timestamp, summary, compacted_entry_ids, .. } => (
            id,
            parent,
            timestamp,
            Kind::Compaction(v1::CompactionEntry {
                summary: summary.clone(),
                compacted_entry_ids: compacted_entry_ids.clone(),
            }),
        ),
        Entry::ModelChange { id, parent, timestamp, previous_model, new_model } => (
            id,
            parent,
            timestamp,
            Kind::ModelChange(v1::ModelChangeEntry {
                previous_model: previous_model.clone(),
                new_model: new_model.clone(),
            }),
        ),
    };
    Some(v1::SessionEntry { id: id.clone(), parent: parent.clone(), timestamp: timestamp.clone(), entry: Some(kind) })
}

/// `context`'s spending this day and month against its limits, its memory and its search index
/// (`kept`: memory entries, indexed messages, the index's bytes).
pub(crate) fn usage_report(
    context: &Context,
    report: crate::model::budgets::Report,
    memory_limit: usize,
    kept: (u64, u64, u64),
) -> v1::UsageReport {
    let figures = |spent: crate::model::budgets::Spent, tokens: u64, cost: f64, ends: &jiff::Zoned, period: &str| {
        v1::UsageFigures {
            tokens: spent.tokens,
            cost_usd: spent.cost_micros as f64 / 1e6,
            token_limit: tokens,
            cost_limit_usd: cost,
            resets: ends.timestamp().to_string(),
            period: period.to_string(),
        }
    };
    let (limits, periods) = (report.limits, report.periods);
    let (memory_entries, indexed_messages, index_bytes) = kept;
    v1::UsageReport {
        memory_entries,
        memory_limit: memory_limit as u64,
        indexed_messages,
        index_bytes,
        context: Some(context_ref(context)),
        today: Some(figures(report.today, limits.daily_tokens, limits.daily_cost, &periods.day_ends, &periods.day)),
        month: Some(figures(
            report.month,
            limits.monthly_tokens,
            limits.monthly_cost,
            &periods.month_ends,
            &periods.month,
        )),
        requests_refused: report.month.refused,
    }
}

/// The container engine as `baaaht status` shows it.
pub(crate) fn engine_status(engine: &crate::sandbox::container::EngineStatus) -> v1::EngineStatus {
    match engine {
        crate::sandbox::container::EngineStatus::Ready(info) => v1::EngineStatus {
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
    }
}

/// An MCP server as `baaaht mcp list` shows it: what it runs, what it mounts (or why not), whether it
/// runs.
pub(crate) fn mcp_server_info(
    server: &crate::work::mcp::config::Server,
    running: &[String],
    policy: &crate::sandbox::policy::Policy,
) -> v1::McpServerInfo {
    // A context's server mounts what is shared with its context; the system's, as named.
    let context = match &server.scope {
        Scope::System => None,
        Scope::Context(context) => Some(context),
    };
    v1::McpServerInfo {
        name: server.name.clone(),
        scope: match &server.scope {
            Scope::System => "system".into(),
            Scope::Context(context) => context.to_string(),
        },
        file: server.file.display().to_string(),
        command: server.config.command.clone(),
        args: server.config.args.clone(),
        install: server
            .config
            .install
            .iter()
            .map(|package| format!("{}:{}", format!("{:?}", package.source).to_lowercase(), package.name))
            .collect(),
        image: server.config.image.clone().unwrap_or_default(),
        env: server.config.env.keys().cloned().collect(),
        egress: server.config.egress.clone(),
        roles: server.roles.iter().map(|role| role.as_str().to_string()).collect(),
        running: running.contains(&server.name),
        mounts: server
            .config
            .mounts
            .iter()
            .map(|mount| {
                match policy.validate_entry_mounts(&[mount.requested()], context).map(|mut specs| specs.pop()) {
                    Ok(Some(spec)) => {
                        let mode = if spec.read_only { "ro" } else { "rw" };
                        format!("{} -> {} ({mode})", mount.host, spec.target)
                    }
                    Ok(None) => mount.host.clone(),
                    Err(why) => format!("{}: not mounted: {why}", mount.host),
                }
            })
            .collect(),
        state: server.config.state,
        workspace: server.config.workspace,
    }
}

/// A file an agent sent, at `path` (`sent/NAME`), as a download: its attachment (name, type by
/// its name and bytes, size), then its bytes in chunks of `chunk`.
pub(crate) fn file_chunks(path: String, bytes: &[u8], chunk: usize) -> Vec<v1::FileChunk> {
    let filename = path.rsplit('/').next().unwrap_or(&path).to_string();
    let mime_type = crate::store::sent::mime_of(&filename, bytes);
    let voice = crate::store::sent::is_voice_note(&path, &mime_type);
    let attachment = v1::Attachment { mime_type, filename, path, size_bytes: bytes.len() as u64, voice };
    std::iter::once(v1::file_chunk::Part::Attachment(attachment))
        .chain(bytes.chunks(chunk).map(|chunk| v1::file_chunk::Part::Data(chunk.to_vec())))
        .map(|part| v1::FileChunk { part: Some(part) })
        .collect()
}

/// A skill's review as the wire carries it.
fn skill_review(review: crate::store::sessions::log::SkillReview) -> v1::SkillReview {
    v1::SkillReview {
        name: review.name,
        description: review.description,
        source: review.source,
        commit: review.commit,
        installs_for: review.installs_for,
        replaces: review.replaces,
        files: review.files,
        bytes: review.bytes,
        scripts: review.scripts.into_iter().map(|(path, size_bytes)| v1::SkillScript { path, size_bytes }).collect(),
        packages: review.packages,
        secrets: review.secrets,
        hosts: review.hosts,
        findings: review.findings,
        always_loaded: review.always_loaded,
        hides_system_skill: review.hides_system_skill,
    }
}
