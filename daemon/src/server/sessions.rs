//! The client side of sessions: SendUserMessage, List/Read/New/Resume/Fork/Archive sessions,
//! SwitchModel — conversions between the session store and the protocol.

use baaaht_proto::v1;
use tonic::Status;

use crate::auth::Context;
use crate::orchestrator::OrchestratorError;
use crate::sessions::{Entry, Filter, SessionError, SessionRecord, SessionStatus};

impl From<SessionError> for Status {
    fn from(error: SessionError) -> Status {
        let text = error.to_string();
        match error {
            SessionError::NotFound(_) => Status::not_found(text),
            SessionError::Archived(_) => Status::failed_precondition(text),
            SessionError::OtherContext { .. } => Status::permission_denied(text),
            SessionError::Log(
                crate::sessions::LogError::UnknownEntry(_) | crate::sessions::LogError::UnknownParent { .. },
            ) => Status::invalid_argument(text),
            other => Status::internal(baaaht_proto::error_chain(&other)),
        }
    }
}

impl From<OrchestratorError> for Status {
    fn from(error: OrchestratorError) -> Status {
        match error {
            OrchestratorError::Session(error) => error.into(),
            OrchestratorError::Invalid(text) => Status::invalid_argument(text),
            OrchestratorError::NoTurn => Status::failed_precondition(error.to_string()),
            OrchestratorError::Model(_) => Status::unavailable(error.to_string()),
        }
    }
}

pub(super) fn header(record: &SessionRecord) -> v1::SessionHeader {
    let context_type = if record.group_id.is_some() { v1::ContextType::Group } else { v1::ContextType::User };
    v1::SessionHeader {
        id: record.id.clone(),
        version: crate::sessions::log::VERSION,
        user_id: record.user_id.clone(),
        group_id: record.group_id.clone().unwrap_or_default(),
        context_type: context_type as i32,
        created: record.created.clone(),
        title: record.title.clone().unwrap_or_default(),
        status: record.status.as_str().into(),
        last_activity: record.last_activity.clone(),
        model: record.model.clone().unwrap_or_default(),
        archived_at: record.archived_at.clone().unwrap_or_default(),
    }
}

fn role_of_name(name: &str) -> v1::AgentRole {
    use crate::auth::Role;
    Role::AGENTS
        .iter()
        .find(|role| role.as_str() == name)
        .map_or(v1::AgentRole::Unspecified, |role| super::role_ref(*role))
}

fn channel_of_name(name: Option<&str>) -> v1::ChannelType {
    match name {
        Some("tui") => v1::ChannelType::Tui,
        Some("web") => v1::ChannelType::Web,
        Some("slack") => v1::ChannelType::Slack,
        Some("cli") => v1::ChannelType::Cli,
        _ => v1::ChannelType::Unspecified,
    }
}

pub(super) fn channel_name(channel: i32) -> Option<String> {
    match v1::ChannelType::try_from(channel) {
        Ok(v1::ChannelType::Tui) => Some("tui".into()),
        Ok(v1::ChannelType::Web) => Some("web".into()),
        Ok(v1::ChannelType::Slack) => Some("slack".into()),
        Ok(v1::ChannelType::Cli) => Some("cli".into()),
        _ => None,
    }
}

/// A log entry as the protocol shows it; the header is the transcript's, not an entry.
pub(super) fn entry(entry: &Entry) -> Option<v1::SessionEntry> {
    use v1::session_entry::Entry as Kind;
    let (id, parent, timestamp, kind) = match entry {
        Entry::Header(_) => return None,
        Entry::Message { id, parent, timestamp, message } => (
            id,
            parent,
            timestamp,
            Kind::Message(v1::MessageEntry {
                role: message.role.clone(),
                content: message.content.clone(),
                channel: channel_of_name(message.channel_type.as_deref()) as i32,
                sender_id: message.sender_id.clone().unwrap_or_default(),
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
        Entry::Compaction { id, parent, timestamp, summary, compacted_entry_ids } => (
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
/// Who writes a message: in a user's own conversation that user (another `sender_id` is
/// refused, so a message never lands in someone else's session); in a group the given
/// `sender_id`, else the group itself.
pub(super) fn sender_of(context: &crate::auth::Context, given: &str) -> Result<String, Status> {
    if context.kind == crate::auth::ContextKind::User {
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

pub(super) fn valid_id(id: &str, field: &str) -> Result<(), Status> {
    if crate::auth::is_valid_context_id(id) {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "{field} `{}` is not a valid id: use 1-128 letters, digits, `.`, `_` or `-`",
            id.escape_debug()
        )))
    }
}
