//! The calls of an agent's tools, all through the daemon: their definitions as the model sees
//! them, `delegate` (DelegateToAgent), `read_skill`, the memory tools (the task tools are in `tasks`), and every
//! other tool (RequestToolExecution, run in the session's tool container).

use baaaht_proto::client::Client;
use baaaht_proto::v1;
use serde_json::{json, Value};

use super::{with_correlation, Call, Hop};

/// The `delegate` tool of the Assistant (spec §6.1).
pub(super) fn delegate_definition() -> crate::tools::Definition {
    crate::tools::Definition {
        name: "delegate",
        description: "Hand a task to a specialised agent and get its answer. worker: web searches, reading files, \
                      sending messages, simple lookups; researcher: deep research over many sources; coder: \
                      reading, writing and running code in the session's workspace; memory: remembering or \
                      recalling something for the user. The agent sees only what you pass in task and context.",
        parameters: json!({"type": "object", "required": ["agent", "task"], "additionalProperties": false, "properties": {
            "agent": {"type": "string", "enum": ["worker", "researcher", "coder", "memory"]},
            "task": {"type": "string", "description": "what the agent should do, in full sentences"},
            "context": {"type": "string", "description": "everything from the conversation the agent needs: names, paths, decisions"},
            "responseFormat": {"type": "string", "description": "how the answer should be shaped"},
            "priority": {"type": "string", "enum": ["normal", "background"], "description": "background: answer the user at once; the result arrives later as a new message"},
            "returnDirectly": {"type": "boolean", "description": "true: the agent's answer is your reply, shown to the user as it is written, and you are not asked again; false: you get the answer and write the reply. Unset: the household's setting for that agent (out of the box true for worker and coder). Set false when you must combine, check or add to the answer."},
        }}),
    }
}

/// The Memory agent's tools, answered by the daemon from its context's memory store.
pub(super) fn memory_definitions() -> Vec<crate::tools::Definition> {
    let key = json!({"type": "string", "description": "1-128 lowercase letters, digits, - or _, e.g. favourite-tea"});
    vec![
        crate::tools::Definition {
            name: "memory_write",
            description: "Remember one fact about the user or group under a key (replacing what the key held).",
            parameters: json!({"type": "object", "required": ["key", "content"], "additionalProperties": false, "properties": {
                "key": key,
                "content": {"type": "string", "description": "the fact, in a sentence or two"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "ttlSeconds": {"type": "integer", "minimum": 0, "description": "forget it after this long; 0: keep"},
                "importance": {"type": "number", "minimum": 0, "maximum": 1},
            }}),
        },
        crate::tools::Definition {
            name: "memory_search",
            description: "Search what is remembered about the user or group (ranked: matching words, importance, \
                          recency); an empty query lists the most recent. Words match any of them; \"a phrase\"; prefix*. \
                          Each result names its key, so it can be quoted.",
            parameters: json!({"type": "object", "additionalProperties": false, "properties": {
                "query": {"type": "string"},
                "tag": {"type": "string", "description": "only entries with this tag"},
                "since": {"type": "string", "description": "only entries updated at or after this time (RFC 3339)"},
                "until": {"type": "string", "description": "only entries updated before this time (RFC 3339)"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200},
            }}),
        },
        crate::tools::Definition {
            name: "session_search",
            description: "Search everything said in past conversations with the user or group (archived ones too), \
                          best matches first. Words match any of them; \"a phrase\"; prefix*. Each result names its \
                          conversation and message, so it can be quoted.",
            parameters: json!({"type": "object", "required": ["query"], "additionalProperties": false, "properties": {
                "query": {"type": "string"},
                "sessionId": {"type": "string", "description": "only this conversation"},
                "since": {"type": "string", "description": "only messages written at or after this time (RFC 3339)"},
                "until": {"type": "string", "description": "only messages written before this time (RFC 3339)"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200},
            }}),
        },
        crate::tools::Definition {
            name: "memory_delete",
            description: "Forget what is remembered under a key.",
            parameters: json!({"type": "object", "required": ["key"], "additionalProperties": false, "properties": {"key": key}}),
        },
    ]
}

/// Reads a skill's instructions (its SKILL.md) or another file of it, through the daemon.
pub(super) fn read_skill_definition() -> crate::tools::Definition {
    crate::tools::Definition {
        name: "read_skill",
        description: "Read the full instructions of one of your skills (its SKILL.md), or another file of the \
                      skill named in them. Do this before a task a skill covers.",
        parameters: json!({"type": "object", "required": ["skill"], "additionalProperties": false, "properties": {
            "skill": {"type": "string", "description": "the skill's name, as listed under Skills"},
            "path": {"type": "string", "description": "a file inside the skill's folder; empty: SKILL.md"},
        }}),
    }
}

/// Installs a skill from a git repository by asking: the person sees its review on their
/// channel and answers install or decline (the call waits for the answer).
pub(super) fn install_skill_definition() -> crate::tools::Definition {
    crate::tools::Definition {
        name: "install_skill",
        description: "Install a skill (a folder with a SKILL.md) from an https:// git repository for the people of \
                      this conversation. They are shown what it holds and what a scan found, and answer install or \
                      decline; this call waits for their answer. An installed skill is offered from the next message.",
        parameters: json!({"type": "object", "required": ["url"], "additionalProperties": false, "properties": {
            "url": {"type": "string", "description": "the https:// URL of the git repository"},
            "path": {"type": "string", "description": "the folder inside the repository that holds SKILL.md; empty: its root"},
            "ref": {"type": "string", "description": "a branch or tag; empty: the default branch"},
            "replace": {"type": "boolean", "description": "replace an installed skill of the same name"},
        }}),
    }
}

/// What an install by asking came to, for the model.
async fn install_skill(mut client: Client, params: &Value, hop: Hop<'_>) -> (String, bool) {
    let text = |name: &str| params.get(name).and_then(Value::as_str).unwrap_or_default().to_string();
    let request = v1::InstallSkillRequest {
        context: None,
        source: text("url"),
        path: text("path"),
        git_ref: text("ref"),
        replace: params.get("replace").and_then(Value::as_bool).unwrap_or(false),
        local_folder: String::new(),
    };
    match client.skills.install_skill(with_correlation(request, hop)).await {
        Ok(installed) => {
            let installed = installed.into_inner();
            let mut told = format!(
                "Installed the skill {} ({}) at commit {}; it is offered from the next message.",
                installed.name, installed.description, installed.commit
            );
            if !installed.findings.is_empty() {
                told.push_str(&format!(
                    " The scan found {} things the person approved anyway.",
                    installed.findings.len()
                ));
            }
            (told, false)
        }
        Err(status) => (format!("install_skill failed: {}", status.message()), true),
    }
}

/// A tool call id the daemon accepts as a result file name, unique to this turn.
fn call_id(turn: &str, id: &str) -> String {
    let clean: String =
        format!("{turn}-{id}").chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    clean.chars().take(128).collect()
}

/// A call's arguments: a JSON object, or why not.
fn arguments(call: &Call) -> Result<Value, String> {
    let input = if call.input.trim().is_empty() { "{}" } else { call.input.as_str() };
    match serde_json::from_str(input) {
        Ok(params @ Value::Object(_)) => Ok(params),
        Ok(_) => Err("the arguments must be a JSON object".into()),
        Err(error) => Err(format!("the arguments are not valid JSON: {error}")),
    }
}

/// A `delegate` call through the daemon: the agent's answer, whether it is an error, and
/// whether it went to the user as the reply. A call beside others in its step never returns
/// directly (the Assistant brings their results together).
pub(super) async fn delegate(
    mut client: Client,
    call: &Call,
    turn: &v1::AgentTurn,
    alone: bool,
) -> (String, bool, bool) {
    let params = match arguments(call) {
        Ok(params) => params,
        Err(why) => return (why, true, false),
    };
    let text = |name: &str| params.get(name).and_then(Value::as_str).unwrap_or_default().to_string();
    let agent = match baaaht_proto::role_named(&text("agent")) {
        Some(
            role @ (v1::AgentRole::Worker | v1::AgentRole::Researcher | v1::AgentRole::Coder | v1::AgentRole::Memory),
        ) => role,
        _ => {
            let other = text("agent");
            return (format!("agent `{other}` is not one of worker, researcher, coder, memory"), true, false);
        }
    };
    let priority = match text("priority").as_str() {
        "background" => v1::DelegatePriority::Background,
        _ => v1::DelegatePriority::Normal,
    };
    // A model may write the flag as a string.
    let asked = match params.get("returnDirectly") {
        Some(Value::Bool(asked)) => Some(*asked),
        Some(Value::String(asked)) if asked.eq_ignore_ascii_case("true") => Some(true),
        Some(Value::String(asked)) if asked.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    };
    let request = v1::DelegateRequest {
        agent: agent as i32,
        task: text("task"),
        context: text("context"),
        response_format: text("responseFormat"),
        priority: priority as i32,
        tool_call_id: call.id.clone(),
        return_directly: if alone { asked } else { Some(false) },
    };
    match client.agents.delegate_to_agent(with_correlation(request, Hop::from(turn))).await {
        Ok(response) => {
            let response = response.into_inner();
            (response.result, response.is_error, response.returned_directly)
        }
        Err(status) => (format!("the delegation failed: {}", status.message()), true, false),
    }
}

/// One tool call through the daemon.
pub(super) async fn execute(mut client: Client, call: &Call, turn: &v1::AgentTurn) -> (String, bool) {
    let params = match arguments(call) {
        Ok(params) => params,
        Err(why) => return (why, true),
    };
    if call.name == "read_skill" {
        let text = |name: &str| params.get(name).and_then(Value::as_str).unwrap_or_default().to_string();
        let request = v1::SkillContentRequest { context: None, skill: text("skill"), path: text("path") };
        return match client.skills.get_skill_content(with_correlation(request, Hop::from(turn))).await {
            Ok(content) => (content.into_inner().content, false),
            Err(status) => (format!("read_skill failed: {}", status.message()), true),
        };
    }
    if super::tasks::is_task_tool(&call.name) {
        return super::tasks::call(client, &call.name, &params, Hop::from(turn)).await;
    }
    if call.name == "install_skill" {
        return install_skill(client, &params, Hop::from(turn)).await;
    }
    if call.name.starts_with("memory_") || call.name == "session_search" {
        return memory(client, &call.name, &params, Hop::from(turn)).await;
    }
    let request = v1::ToolRequest {
        tool: call.name.clone(),
        params_json: params.to_string(),
        tool_call_id: call_id(&turn.turn_id, &call.id),
        timeout_seconds: 0,
    };
    match client.agents.request_tool_execution(with_correlation(request, Hop::from(turn))).await {
        Ok(response) => {
            let response = response.into_inner();
            (response.content, response.is_error)
        }
        Err(status) => (format!("the tool could not run: {}", status.message()), true),
    }
}

/// A memory tool, answered by the daemon for this container's own context.
async fn memory(mut client: Client, tool: &str, params: &Value, hop: Hop<'_>) -> (String, bool) {
    let text = |name: &str| params.get(name).and_then(Value::as_str).unwrap_or_default().to_string();
    let outcome = match tool {
        "memory_write" => {
            let request = v1::WriteMemoryRequest {
                context: None,
                key: text("key"),
                content: text("content"),
                tags: params
                    .get("tags")
                    .and_then(Value::as_array)
                    .map(|tags| tags.iter().filter_map(|t| t.as_str().map(str::to_string)).collect())
                    .unwrap_or_default(),
                ttl_seconds: params.get("ttlSeconds").and_then(Value::as_u64).unwrap_or(0),
                importance: params.get("importance").and_then(Value::as_f64).unwrap_or(0.0),
                message_id: String::new(),
            };
            client.memory.write_memory(with_correlation(request, hop)).await.map(|ack| ack.into_inner().message)
        }
        "memory_search" => {
            let limit = params.get("limit").and_then(Value::as_u64).unwrap_or(10).min(200) as u32;
            let request = v1::MemoryQuery {
                context: None,
                query: text("query"),
                tag: text("tag"),
                limit,
                quarantined: false,
                since: text("since"),
                until: text("until"),
                key: String::new(),
            };
            client.memory.search_memory(with_correlation(request, hop)).await.map(|found| {
                let found = found.into_inner().entries;
                if found.is_empty() {
                    return "nothing remembered matches".to_string();
                }
                let line = |entry: &v1::MemoryRecord| {
                    let tags =
                        if entry.tags.is_empty() { String::new() } else { format!(" [{}]", entry.tags.join(", ")) };
                    format!("- {}{tags} (updated {}): {}", entry.key, entry.updated_at, entry.content)
                };
                found.iter().map(line).collect::<Vec<_>>().join("\n")
            })
        }
        "session_search" => {
            let limit = params.get("limit").and_then(Value::as_u64).unwrap_or(10).min(200) as u32;
            let request = v1::SessionQuery {
                context: None,
                query: text("query"),
                session_id: text("sessionId"),
                since: text("since"),
                until: text("until"),
                limit,
            };
            client.sessions.search_sessions(with_correlation(request, hop)).await.map(|found| {
                let hits = found.into_inner().hits;
                if hits.is_empty() {
                    return "nothing said in past conversations matches".to_string();
                }
                let line = |hit: &v1::SessionHit| {
                    let title = if hit.session_title.is_empty() {
                        String::new()
                    } else {
                        format!(" “{}”", hit.session_title)
                    };
                    format!(
                        "- conversation {}{title}, message {} ({}, {}): {}",
                        hit.session_id, hit.entry_id, hit.role, hit.at, hit.content
                    )
                };
                hits.iter().map(line).collect::<Vec<_>>().join("\n")
            })
        }
        _ => {
            let request = v1::MemoryKey { context: None, key: text("key"), quarantined: false };
            client.memory.delete_memory(with_correlation(request, hop)).await.map(|ack| ack.into_inner().message)
        }
    };
    match outcome {
        Ok(text) => (text, false),
        Err(status) => (format!("{tool} failed: {}", status.message()), true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_are_file_names_unique_to_the_turn() {
        assert_eq!(call_id("t-1", "toolu_01.A"), "t-1-toolu_01_A");
        assert_eq!(call_id("t", &"x".repeat(300)).len(), 128);
    }
}
