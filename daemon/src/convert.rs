//! The protocol's names for the domain's roles and contexts, in one place. The server converts
//! requests and answers here, and so do the subsystems that speak the protocol to agents
//! (orchestrator, ipc, tools); none of them imports the wire layer (`server/`) for it.

use baaaht_proto::v1;

use crate::auth::{Context, ContextKind, Role};

/// The protocol's reference to `context`.
pub fn context_ref(context: &Context) -> v1::ContextRef {
    let kind = match context.kind {
        ContextKind::User => v1::ContextType::User,
        ContextKind::Group => v1::ContextType::Group,
    };
    v1::ContextRef { r#type: kind as i32, id: context.id.clone() }
}

/// The context a protocol reference names; the error says what is wrong with it (the caller
/// adds the field's name).
pub fn context_of(reference: &v1::ContextRef) -> Result<Context, String> {
    let kind = match v1::ContextType::try_from(reference.r#type) {
        Ok(v1::ContextType::User) => ContextKind::User,
        Ok(v1::ContextType::Group) => ContextKind::Group,
        _ => return Err("type must be CONTEXT_TYPE_USER or CONTEXT_TYPE_GROUP".into()),
    };
    if !crate::auth::is_valid_context_id(&reference.id) {
        return Err(format!(
            "id `{}` is not a valid id: use 1-128 letters, digits, `.`, `_` or `-`",
            reference.id.escape_debug()
        ));
    }
    Ok(Context { kind, id: reference.id.clone() })
}

/// The protocol's name for `role`.
pub fn role_ref(role: Role) -> v1::AgentRole {
    match role {
        Role::Assistant => v1::AgentRole::Assistant,
        Role::Worker => v1::AgentRole::Worker,
        Role::Researcher => v1::AgentRole::Researcher,
        Role::Coder => v1::AgentRole::Coder,
        Role::Memory => v1::AgentRole::Memory,
        Role::Heartbeat => v1::AgentRole::Heartbeat,
        Role::Tool | Role::LlmGateway => v1::AgentRole::Tool,
    }
}

/// The role a protocol value names; `None` for "unspecified".
pub fn role_of(value: i32) -> Result<Option<Role>, String> {
    Ok(match v1::AgentRole::try_from(value) {
        Ok(v1::AgentRole::Unspecified) => None,
        Ok(v1::AgentRole::Assistant) => Some(Role::Assistant),
        Ok(v1::AgentRole::Worker) => Some(Role::Worker),
        Ok(v1::AgentRole::Researcher) => Some(Role::Researcher),
        Ok(v1::AgentRole::Coder) => Some(Role::Coder),
        Ok(v1::AgentRole::Memory) => Some(Role::Memory),
        Ok(v1::AgentRole::Heartbeat) => Some(Role::Heartbeat),
        Ok(v1::AgentRole::Tool) => Some(Role::Tool),
        Err(_) => return Err(format!("role {value} is not a known AgentRole")),
    })
}

/// The protocol's channel type for a channel's name (`tui`, `cli`, `web`, `slack`).
pub fn channel_ref(channel: Option<&str>) -> v1::ChannelType {
    match channel {
        Some("tui") => v1::ChannelType::Tui,
        Some("cli") => v1::ChannelType::Cli,
        Some("web") => v1::ChannelType::Web,
        Some("slack") => v1::ChannelType::Slack,
        _ => v1::ChannelType::Unspecified,
    }
}

/// A skill's entry in a manifest: name and description, and the whole body of an
/// always-loaded skill.
pub fn skill_summary(found: &crate::skills::Found) -> v1::SkillSummary {
    v1::SkillSummary {
        name: found.skill.name.clone(),
        description: found.skill.description.clone(),
        scope: found.scope.as_str().into(),
        always_loaded: found.skill.always_loaded,
        body: if found.skill.always_loaded { found.skill.body.clone() } else { String::new() },
    }
}

/// RegisterAgent's answer.
pub fn agent_config(setup: crate::agents::AgentSetup) -> v1::AgentConfig {
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
        tools: setup
            .tools
            .into_iter()
            .map(|name| v1::ToolDefinition { name: name.into(), ..v1::ToolDefinition::default() })
            .collect(),
        session_id: setup.session_id,
        context: Some(context_ref(&setup.context)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
