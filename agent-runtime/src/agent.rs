//! `baaaht-agent agent`: the agent loop (spec §6.3) of an Assistant, Worker, Researcher,
//! Coder, Memory or Heartbeat container. It registers with its token, then takes turns from
//! the daemon one at a time: the model (StreamLLM, with the role's tools) → tool calls (all of
//! one step at once: RequestToolExecution, or DelegateToAgent for the Assistant's `delegate`)
//! → results back to the model → … until a final answer or the role's step limit.
//!
//! The container holds no key and writes nothing: the daemon records the session and
//! publishes what the model writes as it streams through it.

use std::path::Path;

use baaaht_proto::client::{connect, Backoff, Client, ConnectOptions};
use baaaht_proto::v1;
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// Why a model call gave no answer.
#[derive(Debug)]
enum Failed {
    /// The daemon refused it (a budget limit), with a sentence for the user.
    Refused(String),
    Other(String),
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{} is not set: the daemon starts agents with their token", baaaht_proto::CONTAINER_TOKEN_ENV)]
    NoToken,
    #[error("cannot reach the daemon: {0}")]
    Connect(#[from] baaaht_proto::client::ConnectError),
    #[error("{call} failed: {message}")]
    Rpc { call: &'static str, message: String },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

fn rpc(call: &'static str) -> impl Fn(tonic::Status) -> AgentError {
    move |status| AgentError::Rpc { call, message: status.message().to_string() }
}

/// Serves turns until the daemon closes the stream.
pub fn run(socket: &Path) -> Result<(), AgentError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(AgentError::Runtime)?;
    runtime.block_on(serve(socket))
}

async fn serve(socket: &Path) -> Result<(), AgentError> {
    let token = std::env::var(baaaht_proto::CONTAINER_TOKEN_ENV).map_err(|_unset| AgentError::NoToken)?;
    let options = ConnectOptions { token: Some(token), correlation_id: None, backoff: Backoff::PERSISTENT };
    let mut client = connect(socket, options).await?;
    let hello = v1::AgentRegistration { role: 0, runtime_version: env!("CARGO_PKG_VERSION").into() };
    let config = client.agents.register_agent(hello.clone()).await.map_err(rpc("RegisterAgent"))?.into_inner();
    let agent = Agent::new(config, client.clone());
    let (reports, outgoing) = mpsc::channel(4);
    // silent-ok: the receiver is the request stream below, alive until take_turns returns.
    let _ = reports.send(v1::AgentReport { kind: Some(v1::agent_report::Kind::Hello(hello)) }).await;
    let mut turns = client
        .agents
        .take_turns(tokio_stream::wrappers::ReceiverStream::new(outgoing))
        .await
        .map_err(rpc("TakeTurns"))?
        .into_inner();
    // Turns run one at a time while the reader goes on, so a health probe is answered even
    // in the middle of a long turn: only a stuck process fails it.
    let (work, mut queue) = mpsc::channel::<v1::AgentTurn>(4);
    let busy = crate::health::Busy::default();
    let read = async {
        let health = |health| v1::AgentReport { kind: Some(v1::agent_report::Kind::Health(health)) };
        let probe_of = |turn: &mut v1::AgentTurn| turn.health_check.take();
        match crate::health::read_beside(&mut turns, probe_of, health, &reports, work, &busy).await {
            Err(crate::health::ReadError::Stream(status)) => Err(rpc("TakeTurns")(status)),
            Ok(()) | Err(crate::health::ReadError::RepliesClosed) => Ok(()),
        }
    };
    let serve = async {
        while let Some(turn) = queue.recv().await {
            busy.working(true);
            let result = agent.take(turn).await;
            busy.working(false);
            if reports.send(v1::AgentReport { kind: Some(v1::agent_report::Kind::Result(result)) }).await.is_err() {
                break;
            }
        }
    };
    let (read, ()) = tokio::join!(read, serve);
    read
}

/// The `delegate` tool of the Assistant (spec §6.1).
pub fn delegate_definition() -> crate::tools::Definition {
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
pub fn memory_definitions() -> Vec<crate::tools::Definition> {
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
pub fn read_skill_definition() -> crate::tools::Definition {
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

/// The task tools (spec §15.4): the user's reminders and recurring jobs, answered by the
/// daemon for this container's own context.
pub fn task_definitions() -> Vec<crate::tools::Definition> {
    vec![
        crate::tools::Definition {
            name: "schedule_task",
            description: "Schedule something to be done later or again and again (\"remind me every Monday at 9\",                           \"tomorrow at 8am check the build\"). Give exactly one of cron, interval_seconds or once.                           Times are the user's local time unless once carries another offset. The answer lists the                           next runs: tell the user when it will happen.",
            parameters: json!({"type": "object", "required": ["prompt"], "additionalProperties": false, "properties": {
                "prompt": {"type": "string", "description": "what the agent should do when it runs, in full sentences"},
                "description": {"type": "string", "description": "a short name for the task, e.g. 'Monday PR summary'"},
                "cron": {"type": "string", "description": "5 fields: minute hour day-of-month month day-of-week, e.g. '0 9 * * 1' for Mondays at 09:00"},
                "interval_seconds": {"type": "integer", "minimum": 60},
                "once": {"type": "string", "description": "RFC 3339 time with its UTC offset, e.g. 2026-03-01T08:00:00+01:00"},
                "timezone": {"type": "string", "description": "IANA zone if not the user's, e.g. Europe/Berlin"},
                "agent": {"type": "string", "enum": ["worker", "researcher", "coder"], "description": "who does it (default worker)"},
            }}),
        },
        crate::tools::Definition {
            name: "list_tasks",
            description: "List the user's scheduled tasks and heartbeats, with their next runs.",
            parameters: json!({"type": "object", "additionalProperties": false, "properties": {}}),
        },
        crate::tools::Definition {
            name: "cancel_task",
            description: "Cancel one of the user's scheduled tasks by its id (from list_tasks).",
            parameters: json!({"type": "object", "required": ["id"], "additionalProperties": false, "properties": {
                "id": {"type": "string"},
            }}),
        },
    ]
}

/// A task tool, answered by the daemon for this container's own context.
async fn task_tool(mut client: Client, tool: &str, params: &Value, hop: Hop<'_>) -> (String, bool) {
    let text = |name: &str| params.get(name).and_then(Value::as_str).unwrap_or_default().trim().to_string();
    match tool {
        "schedule_task" => {
            use v1::task_schedule::Kind;
            let mut kinds = vec![];
            if !text("cron").is_empty() {
                kinds.push(Kind::Cron(text("cron")));
            }
            if let Some(every) = params.get("interval_seconds").and_then(Value::as_u64) {
                kinds.push(Kind::IntervalSeconds(every));
            }
            if !text("once").is_empty() {
                kinds.push(Kind::Once(text("once")));
            }
            if kinds.len() != 1 {
                return ("give exactly one of cron, interval_seconds or once".into(), true);
            }
            let request = v1::TaskDefinition {
                r#type: "scheduled".into(),
                schedule: Some(v1::TaskSchedule { kind: kinds.pop() }),
                agent: text("agent"),
                prompt: text("prompt"),
                description: text("description"),
                timezone: text("timezone"),
                ..v1::TaskDefinition::default()
            };
            match client.tasks.schedule_task(with_correlation(request, hop)).await {
                Ok(scheduled) => {
                    let scheduled = scheduled.into_inner();
                    let task = scheduled.task.unwrap_or_default();
                    (
                        format!(
                            "Scheduled task {} (\"{}\"). Next runs: {}.",
                            task.id,
                            task.description,
                            scheduled.next_runs.join(", ")
                        ),
                        false,
                    )
                }
                Err(status) => (format!("the task was not scheduled: {}", status.message()), true),
            }
        }
        "list_tasks" => {
            let request = v1::TaskFilter { count: 3, ..v1::TaskFilter::default() };
            let listed = client.tasks.list_tasks(with_correlation(request.clone(), hop)).await;
            let next = client.tasks.get_next_runs(with_correlation(request, hop)).await;
            match (listed, next) {
                (Ok(listed), Ok(next)) => {
                    let next = next.into_inner().runs;
                    let lines: Vec<String> = listed
                        .into_inner()
                        .tasks
                        .iter()
                        .map(|task| {
                            let runs = next.iter().find(|run| run.task_id == task.id).map(|run| run.runs.join(", "));
                            format!(
                                "- {} [{} {}] \"{}\" next: {}",
                                task.id,
                                task.r#type,
                                task.status,
                                task.description,
                                runs.filter(|runs| !runs.is_empty()).unwrap_or_else(|| "none".into())
                            )
                        })
                        .collect();
                    if lines.is_empty() {
                        ("No tasks.".into(), false)
                    } else {
                        (lines.join("\n"), false)
                    }
                }
                (Err(status), _) | (_, Err(status)) => (format!("cannot list the tasks: {}", status.message()), true),
            }
        }
        _ => {
            let request = v1::TaskId { id: text("id") };
            match client.tasks.cancel_task(with_correlation(request, hop)).await {
                Ok(ack) => (ack.into_inner().message, false),
                Err(status) => (format!("the task was not cancelled: {}", status.message()), true),
            }
        }
    }
}

/// One tool call the model asked for.
#[derive(Debug, Clone, Default)]
struct Call {
    id: String,
    name: String,
    input: String,
}

/// One model answer, assembled from its stream.
#[derive(Debug, Default)]
struct Answer {
    text: String,
    /// Input and output tokens the provider reported for this answer.
    tokens: u64,
    thinking: Vec<v1::ThinkingBlock>,
    calls: Vec<Call>,
}

struct Agent {
    config: v1::AgentConfig,
    client: Client,
    system: String,
    tools: Vec<v1::ToolDefinition>,
}

fn text_block(text: String) -> v1::ContentBlock {
    v1::ContentBlock { block: Some(v1::content_block::Block::Text(text)) }
}

/// What every call made for a turn carries: its correlation id and, when the daemon traces,
/// its W3C trace context, so the daemon's spans of the call join the turn's trace.
#[derive(Debug, Clone, Copy)]
struct Hop<'a> {
    correlation: &'a str,
    traceparent: &'a str,
}

impl<'a> From<&'a v1::AgentTurn> for Hop<'a> {
    fn from(turn: &'a v1::AgentTurn) -> Hop<'a> {
        Hop { correlation: &turn.correlation_id, traceparent: &turn.traceparent }
    }
}

fn with_correlation<T>(message: T, hop: Hop<'_>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Ok(value) = hop.correlation.parse() {
        request.metadata_mut().insert(baaaht_proto::CORRELATION_ID_HEADER, value);
    }
    match hop.traceparent.parse() {
        Ok(value) if !hop.traceparent.is_empty() => {
            request.metadata_mut().insert(baaaht_proto::TRACEPARENT_HEADER, value);
        }
        _ => {}
    }
    request
}

/// A tool call id the daemon accepts as a result file name, unique to this turn.
fn call_id(turn: &str, id: &str) -> String {
    let clean: String =
        format!("{turn}-{id}").chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    clean.chars().take(128).collect()
}

impl Agent {
    fn new(config: v1::AgentConfig, client: Client) -> Agent {
        let known = crate::tools::definitions();
        let memory = memory_definitions();
        let tasks = task_definitions();
        let tools = config
            .tools
            .iter()
            .filter_map(|tool| {
                let definition = if tool.name == "delegate" {
                    Some(delegate_definition())
                } else if tool.name == "read_skill" {
                    Some(read_skill_definition())
                } else {
                    known.iter().chain(&memory).chain(&tasks).find(|known| known.name == tool.name).cloned()
                };
                match definition {
                    Some(d) => Some(v1::ToolDefinition {
                        name: d.name.into(),
                        description: d.description.into(),
                        parameters_json: d.parameters.to_string(),
                    }),
                    // A tool the daemon describes itself (an MCP server's), called through it.
                    None if !tool.parameters_json.is_empty() => Some(tool.clone()),
                    None => None,
                }
            })
            .collect();
        let system = system_prompt(&config);
        Agent { config, client, system, tools }
    }

    /// Runs one turn to its end.
    async fn take(&self, turn: v1::AgentTurn) -> v1::TurnResult {
        let mut result = self.run(&turn).await;
        result.turn_id = turn.turn_id;
        result
    }

    async fn run(&self, turn: &v1::AgentTurn) -> v1::TurnResult {
        let model = if turn.model.is_empty() { self.config.model.clone() } else { turn.model.clone() };
        let mut messages = turn.messages.clone();
        let mut texts: Vec<String> = vec![];
        let mut tokens = 0;
        let limit = self.config.max_iterations.max(1);
        for step in 1..=limit {
            // The time goes after the cached system prompt: it changes every turn.
            let system_tail = if turn.now.is_empty() {
                String::new()
            } else {
                format!("# Now\nIt is {} where the user is.", turn.now)
            };
            let request = v1::LlmRequest {
                model: model.clone(),
                system: self.system.clone(),
                system_tail,
                messages: messages.clone(),
                tools: self.tools.clone(),
                temperature: self.config.temperature,
                ..v1::LlmRequest::default()
            };
            let answer = match self.complete(request, Hop::from(turn)).await {
                Ok(answer) => answer,
                Err(Failed::Refused(sentence)) => {
                    return v1::TurnResult {
                        content: sentence,
                        is_error: true,
                        refused: true,
                        steps: step,
                        tokens,
                        ..Default::default()
                    }
                }
                Err(Failed::Other(message)) => {
                    return v1::TurnResult {
                        content: message,
                        is_error: true,
                        steps: step,
                        tokens,
                        ..Default::default()
                    }
                }
            };
            tokens += answer.tokens;
            let mut content: Vec<v1::ContentBlock> = answer
                .thinking
                .into_iter()
                .map(|thinking| v1::ContentBlock { block: Some(v1::content_block::Block::Thinking(thinking)) })
                .collect();
            if !answer.text.is_empty() {
                content.push(text_block(answer.text.clone()));
                texts.push(answer.text);
            }
            for call in &answer.calls {
                content.push(v1::ContentBlock {
                    block: Some(v1::content_block::Block::ToolUse(v1::ToolUseBlock {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        input_json: if call.input.trim().is_empty() { "{}".into() } else { call.input.clone() },
                    })),
                });
            }
            if answer.calls.is_empty() {
                return v1::TurnResult {
                    content: texts.join("\n\n"),
                    is_error: false,
                    steps: step,
                    tokens,
                    ..Default::default()
                };
            }
            messages.push(v1::LlmMessage { role: "assistant".into(), content });
            let (results, reply) = self.execute_all(&answer.calls, turn).await;
            // A delegate's answer given to the user as the reply ends the turn: no second
            // request re-writes it.
            if let Some(reply) = reply {
                texts.push(reply);
                return v1::TurnResult {
                    content: texts.join("\n\n"),
                    is_error: false,
                    steps: step,
                    tokens,
                    ..Default::default()
                };
            }
            messages.push(v1::LlmMessage {
                role: "user".into(),
                content: results
                    .into_iter()
                    .map(|result| v1::ContentBlock { block: Some(v1::content_block::Block::ToolResult(result)) })
                    .collect(),
            });
        }
        let mut content = format!("Stopped after {limit} steps without a final answer (the step limit of this agent).");
        if let Some(last) = texts.last() {
            content.push_str(&format!(" The last thing it wrote: {last}"));
        }
        v1::TurnResult { content, is_error: true, steps: limit, tokens, ..Default::default() }
    }

    /// Streams one model answer.
    async fn complete(&self, request: v1::LlmRequest, hop: Hop<'_>) -> Result<Answer, Failed> {
        let mut client = self.client.clone();
        let mut events = client
            .agents
            .stream_llm(with_correlation(request, hop))
            .await
            .map_err(|status| match status.code() {
                // A budget limit: the daemon's sentence is for the user as it is.
                tonic::Code::ResourceExhausted => Failed::Refused(status.message().to_string()),
                _ => Failed::Other(format!("the model could not be asked: {}", status.message())),
            })?
            .into_inner();
        let mut answer = Answer::default();
        let mut stopped = false;
        let mut by_index: std::collections::BTreeMap<u32, Call> = std::collections::BTreeMap::new();
        let mut thinking: std::collections::BTreeMap<u32, v1::ThinkingBlock> = std::collections::BTreeMap::new();
        loop {
            let event = match events.message().await {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(status) => {
                    return Err(Failed::Other(format!("the model's answer broke off: {}", status.message())))
                }
            };
            use v1::llm_event::Event;
            match event.event {
                Some(Event::TextDelta(delta)) => answer.text.push_str(&delta.text),
                Some(Event::ThinkingDelta(delta)) => {
                    let block = thinking.entry(delta.index).or_default();
                    block.thinking.push_str(&delta.thinking);
                    block.signature.push_str(&delta.signature);
                }
                Some(Event::ToolCallStart(start)) => {
                    by_index.insert(start.index, Call { id: start.id, name: start.name, input: String::new() });
                }
                Some(Event::ToolCallDelta(delta)) => {
                    if let Some(call) = by_index.get_mut(&delta.index) {
                        call.input.push_str(&delta.partial_json);
                    }
                }
                Some(Event::MessageStop(_)) => stopped = true,
                Some(Event::Usage(usage)) => answer.tokens += usage.input_tokens + usage.output_tokens,
                Some(Event::Error(error)) => {
                    return Err(Failed::Other(format!("the model failed ({}): {}", error.kind, error.message)));
                }
                _ => {}
            }
        }
        if !stopped {
            return Err(Failed::Other("the model's answer ended without its stop event".into()));
        }
        answer.calls = by_index.into_values().collect();
        answer.thinking = thinking.into_values().collect();
        Ok(answer)
    }

    /// Runs the calls of one step at once; results come back in the calls' order, with the
    /// answer of a delegation returned directly to the user (only a step's single call may be).
    async fn execute_all(&self, calls: &[Call], turn: &v1::AgentTurn) -> (Vec<v1::ToolResultBlock>, Option<String>) {
        let mut set = tokio::task::JoinSet::new();
        let alone = calls.len() == 1;
        for (index, call) in calls.iter().enumerate() {
            let (client, call, turn) = (self.client.clone(), call.clone(), turn.clone());
            let allowed = self.tools.iter().any(|tool| tool.name == call.name);
            set.spawn(async move {
                let (content, is_error, returned) = if !allowed {
                    (format!("there is no tool `{}` here", call.name), true, false)
                } else if call.name == "delegate" {
                    delegate(client, &call, &turn, alone).await
                } else {
                    let (content, is_error) = execute(client, &call, &turn).await;
                    (content, is_error, false)
                };
                (index, v1::ToolResultBlock { tool_use_id: call.id, content, is_error }, returned)
            });
        }
        let mut results: Vec<Option<v1::ToolResultBlock>> = vec![None; calls.len()];
        let mut reply = None;
        while let Some(joined) = set.join_next().await {
            if let Ok((index, result, returned)) = joined {
                if returned && alone {
                    reply = Some(result.content.clone());
                }
                results[index] = Some(result);
            }
        }
        let results = results
            .into_iter()
            .zip(calls)
            .map(|(result, call)| {
                result.unwrap_or_else(|| v1::ToolResultBlock {
                    tool_use_id: call.id.clone(),
                    content: "the call was lost".into(),
                    is_error: true,
                })
            })
            .collect();
        (results, reply)
    }
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
async fn delegate(mut client: Client, call: &Call, turn: &v1::AgentTurn, alone: bool) -> (String, bool, bool) {
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
    let asked = params.get("returnDirectly").and_then(Value::as_bool);
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
async fn execute(mut client: Client, call: &Call, turn: &v1::AgentTurn) -> (String, bool) {
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
    if matches!(call.name.as_str(), "schedule_task" | "list_tasks" | "cancel_task") {
        return task_tool(client, &call.name, &params, Hop::from(turn)).await;
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

/// The system prompt: identity, personality, whom it serves, what it remembers, its skills.
fn system_prompt(config: &v1::AgentConfig) -> String {
    let mut parts: Vec<String> = vec![];
    for text in [&config.soul, &config.identity] {
        if !text.trim().is_empty() {
            parts.push(text.trim().to_string());
        }
    }
    if !config.context_profile.trim().is_empty() {
        let whom = match config.context.as_ref().map(|c| c.r#type) {
            Some(t) if t == v1::ContextType::Group as i32 => "the group you serve",
            _ => "the person you serve",
        };
        parts.push(format!("# About {whom}\n{}", config.context_profile.trim()));
    }
    if !config.memories.is_empty() {
        let lines: Vec<String> = config.memories.iter().map(|memory| format!("- {memory}")).collect();
        parts.push(format!("# What you remember\n{}", lines.join("\n")));
    }
    if let Some(manifest) = config.skills.as_ref().filter(|m| !m.skills.is_empty()) {
        let mut text = String::from(
            "# Skills\nInstructions for these tasks exist; read one with read_skill when it applies. A skill's \
             scripts are in /skills/NAME/scripts/: run one with exec's `script` and `args` (not through a shell \
             command), so it gets the secrets its skill declares.\n",
        );
        for skill in &manifest.skills {
            text.push_str(&format!("- {}: {}\n", skill.name, skill.description.trim()));
        }
        for skill in manifest.skills.iter().filter(|s| s.always_loaded && !s.body.trim().is_empty()) {
            text.push_str(&format!("\n## {}\n{}\n", skill.name, skill.body.trim()));
        }
        parts.push(text.trim_end().to_string());
    }
    parts.join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_are_file_names_unique_to_the_turn() {
        assert_eq!(call_id("t-1", "toolu_01.A"), "t-1-toolu_01_A");
        assert_eq!(call_id("t", &"x".repeat(300)).len(), 128);
    }

    #[test]
    fn the_system_prompt_carries_identity_context_memory_and_skills() {
        let config = v1::AgentConfig {
            soul: "Warm.".into(),
            identity: "You are the Assistant.".into(),
            context_profile: "Alice, likes tea.".into(),
            memories: vec!["cat: Miso".into()],
            skills: Some(v1::SkillManifest {
                skills: vec![v1::SkillSummary {
                    name: "summarize".into(),
                    description: "Summaries.".into(),
                    always_loaded: true,
                    body: "Be brief.".into(),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        };
        let prompt = system_prompt(&config);
        for part in [
            "Warm.",
            "You are the Assistant.",
            "Alice, likes tea.",
            "- cat: Miso",
            "- summarize: Summaries.",
            "Be brief.",
        ] {
            assert!(prompt.contains(part), "{part} missing from {prompt}");
        }
    }
}
