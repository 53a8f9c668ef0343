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
use tokio::sync::mpsc;

mod calls;
mod tasks;
use calls::{
    delegate, delegate_definition, execute, install_skill_definition, memory_definitions, read_skill_definition,
};
use tasks::task_definitions;

/// Why a model call gave no answer.
#[derive(Debug)]
enum Failed {
    /// The daemon refused it (a budget limit), or the provider failed for now: a sentence for
    /// the user.
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

/// The tools the daemon `listed` (by name), described: the runtime's own with their
/// descriptions and schemas, an MCP server's as the daemon described them.
fn described(listed: &[v1::ToolDefinition]) -> Vec<v1::ToolDefinition> {
    let known = crate::tools::definitions();
    let memory = memory_definitions();
    let tasks = task_definitions();
    listed
        .iter()
        .filter_map(|tool| {
            let definition = if tool.name == "delegate" {
                Some(delegate_definition())
            } else if tool.name == "read_skill" {
                Some(read_skill_definition())
            } else if tool.name == "install_skill" {
                Some(install_skill_definition())
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
        .collect()
}

impl Agent {
    fn new(config: v1::AgentConfig, client: Client) -> Agent {
        let tools = described(&config.tools);
        let system = system_prompt(&config);
        Agent { config, client, system, tools }
    }

    /// The tools of `turn`: those the daemon lists with it (what is offered now: a server added
    /// since this agent started is among them), else those of the agent's configuration.
    fn offered(&self, turn: &v1::AgentTurn) -> Vec<v1::ToolDefinition> {
        if turn.tools.is_empty() {
            self.tools.clone()
        } else {
            described(&turn.tools)
        }
    }

    /// The system prompt of `turn`: the agent's, or, when the skills installed now are not
    /// those it started with, the same with the skills of now (a skill added mid-conversation
    /// is offered from the next turn; the prompt, a cached prefix, changes only then).
    fn system_of(&self, turn: &v1::AgentTurn) -> String {
        match &turn.skills {
            Some(skills) if Some(skills) != self.config.skills.as_ref() => {
                system_prompt(&v1::AgentConfig { skills: Some(skills.clone()), ..self.config.clone() })
            }
            _ => self.system.clone(),
        }
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
        // The time now follows the turn's new message, not the system prompt: what changes
        // every turn comes after the prefix a provider caches (tools, system prompt, history).
        if let Some(asked) = messages.last_mut().filter(|message| message.role == "user" && !turn.now.is_empty()) {
            asked.content.push(text_block(baaaht_proto::time_note(&turn.now)));
        }
        let mut texts: Vec<String> = vec![];
        let mut tokens = 0;
        let (tools, system) = (self.offered(turn), self.system_of(turn));
        let limit = self.config.max_iterations.max(1);
        for step in 1..=limit {
            let request = v1::LlmRequest {
                model: model.clone(),
                system: system.clone(),
                messages: messages.clone(),
                tools: tools.clone(),
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
            let answered = |texts: &[String]| v1::TurnResult {
                content: texts.join("\n\n"),
                is_error: false,
                steps: step,
                tokens,
                ..Default::default()
            };
            if answer.calls.is_empty() {
                return answered(&texts);
            }
            messages.push(v1::LlmMessage { role: "assistant".into(), content });
            let (results, reply) = self.execute_all(&answer.calls, turn).await;
            // A delegate's answer given to the user as the reply ends the turn: no second
            // request re-writes it.
            if let Some(reply) = reply {
                texts.push(reply);
                return answered(&texts);
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
                    return Err(match passing_trouble(&error) {
                        Some(sentence) => Failed::Refused(sentence),
                        None => Failed::Other(format!("the model failed ({}): {}", error.kind, error.message)),
                    });
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
        let offered = self.offered(turn);
        for (index, call) in calls.iter().enumerate() {
            let (client, call, turn) = (self.client.clone(), call.clone(), turn.clone());
            let allowed = offered.iter().any(|tool| tool.name == call.name);
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

/// What the person who asked reads when the model's provider fails in a way that passes (its
/// detail is in the daemon's log, where the daemon's side of every model call logs a failure):
/// the kinds of `baaaht-llm`'s `ErrorKind`, after its retries and fallbacks. A provider's server
/// error passes too (the gateway marks it retryable); a people's channel would otherwise show
/// only its plain "something went wrong". A `network` failure keeps its words: for a model on
/// the host, the daemon's relay says there where nothing answers and what to start; so does a
/// `provider` failure that trying again cannot mend (a base URL the gateway does not support).
/// A refused sign-in passes too, without the provider's words (they may repeat what was sent).
/// Worded for every reader: a person's turn, a scheduled run's result, an agent that delegated.
fn passing_trouble(error: &v1::LlmError) -> Option<String> {
    Some(match error.kind.as_str() {
        "rate_limited" | "overloaded" => {
            "The model is busy: its provider is turning requests away for now. Try again in a minute.".into()
        }
        "timeout" => "The model did not answer in time. Try again in a minute.".into(),
        // The words of a refused sign-in may repeat what was sent: they are the operator's only.
        "authentication" => match error.provider.trim() {
            "" => "The model's provider did not accept baaaht's credentials. Tell the person who runs baaaht \
                   (`baaaht doctor --llm` says why)."
                .into(),
            provider => format!(
                "The model's provider ({provider}) did not accept baaaht's credentials. Tell the person who runs \
                 baaaht (`baaaht doctor --llm` says why)."
            ),
        },
        "provider" if error.retryable => match error.provider.trim() {
            "" => "The model's provider is failing right now. Try again in a few minutes.".into(),
            provider => format!("The model's provider ({provider}) is failing right now. Try again in a few minutes."),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_failing_for_now_is_told_in_a_sentence_without_its_detail() {
        let failure = |kind: &str, retryable: bool| v1::LlmError {
            kind: kind.into(),
            message: "anthropic answered 500: /srv/provider/trace.log".into(),
            provider: "anthropic".into(),
            retryable,
        };
        for kind in ["rate_limited", "overloaded", "timeout"] {
            let sentence = passing_trouble(&failure(kind, true)).unwrap_or_else(|| panic!("{kind} has no sentence"));
            assert!(
                sentence.ends_with("Try again in a minute.") && !sentence.contains(&format!("({kind})")),
                "{kind}: {sentence}"
            );
        }
        // A server error after the gateway's retries: the provider's name, never its words.
        assert_eq!(
            passing_trouble(&failure("provider", true)).as_deref(),
            Some("The model's provider (anthropic) is failing right now. Try again in a few minutes.")
        );
        let unnamed = v1::LlmError { provider: String::new(), ..failure("provider", true) };
        assert_eq!(
            passing_trouble(&unnamed).as_deref(),
            Some("The model's provider is failing right now. Try again in a few minutes.")
        );
        // These are not passing: the operator's detail stays in the reply's failure.
        let refused = passing_trouble(&failure("authentication", false)).expect("a sentence");
        assert!(refused.starts_with("The model's provider (anthropic) did not accept"), "{refused}");
        assert!(!refused.contains("trace.log"), "{refused}");
        for kind in ["provider", "network", "invalid_request", "context_exceeded"] {
            assert_eq!(passing_trouble(&failure(kind, false)), None, "{kind}");
        }
        assert_eq!(passing_trouble(&failure("network", true)), None, "a host model's relay says what to start");
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
