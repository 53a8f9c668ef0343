//! Between the protocol's `LLMRequest`/`LLMEvent` (baaaht.v1) and the adapters' model.

use baaaht_proto::v1;
use serde_json::Value;

use crate::model::{Block, Event, Message, Request, Role, Tool};
use crate::provider::{kind_of, Failure};

/// A request field that is not what the protocol allows, as a sentence naming the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {problem}")]
pub struct BadRequest {
    pub field: String,
    pub problem: String,
}

fn json_field(text: &str, field: String, empty: Value) -> Result<Value, BadRequest> {
    if text.trim().is_empty() {
        return Ok(empty);
    }
    serde_json::from_str(text).map_err(|error| BadRequest { field, problem: format!("not JSON ({error})") })
}

/// The model request of a protocol request; the model name keeps its `{provider}/` prefix.
pub fn request_from_proto(request: v1::LlmRequest) -> Result<Request, BadRequest> {
    if request.model.trim().is_empty() {
        return Err(BadRequest { field: "model".into(), problem: "empty: name a model as provider/model".into() });
    }
    let mut messages = Vec::with_capacity(request.messages.len());
    for (m, message) in request.messages.into_iter().enumerate() {
        let role = match message.role.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(BadRequest {
                    field: format!("messages[{m}].role"),
                    problem: format!("`{other}` is neither `user` nor `assistant`"),
                })
            }
        };
        let mut content = Vec::with_capacity(message.content.len());
        for (b, block) in message.content.into_iter().enumerate() {
            let field = |name: &str| format!("messages[{m}].content[{b}].{name}");
            let block = match block.block {
                Some(v1::content_block::Block::Text(text)) => Block::Text(text),
                Some(v1::content_block::Block::Image(image)) => {
                    Block::Image { media_type: image.media_type, data: image.data }
                }
                Some(v1::content_block::Block::ToolUse(tool_use)) => Block::ToolUse {
                    input: json_field(
                        &tool_use.input_json,
                        field("tool_use.input_json"),
                        Value::Object(Default::default()),
                    )?,
                    id: tool_use.id,
                    name: tool_use.name,
                },
                Some(v1::content_block::Block::ToolResult(result)) => Block::ToolResult {
                    tool_use_id: result.tool_use_id,
                    content: result.content,
                    is_error: result.is_error,
                },
                Some(v1::content_block::Block::Thinking(thinking)) => {
                    Block::Thinking { thinking: thinking.thinking, signature: thinking.signature }
                }
                None => return Err(BadRequest { field: field("block"), problem: "empty content block".into() }),
            };
            content.push(block);
        }
        messages.push(Message { role, content });
    }
    let mut tools = Vec::with_capacity(request.tools.len());
    for (t, tool) in request.tools.into_iter().enumerate() {
        let empty_schema = serde_json::json!({"type": "object", "properties": {}});
        tools.push(Tool {
            parameters: json_field(&tool.parameters_json, format!("tools[{t}].parameters_json"), empty_schema)?,
            name: tool.name,
            description: tool.description,
        });
    }
    Ok(Request {
        model: request.model,
        system: request.system,
        messages,
        tools,
        max_tokens: request.max_tokens,
        temperature: request.temperature,
        thinking_budget: request.thinking_budget,
        stop: request.stop,
    })
}

/// The protocol message of a model message (what a request built in the daemon is sent as);
/// taken whole, so a picture's bytes are moved, not copied.
pub fn message_to_proto(message: Message) -> v1::LlmMessage {
    use v1::content_block::Block as B;
    let content = message
        .content
        .into_iter()
        .map(|block| {
            let block = match block {
                Block::Text(text) => B::Text(text),
                Block::Image { media_type, data } => B::Image(v1::ImageBlock { media_type, data }),
                Block::ToolUse { id, name, input } => {
                    B::ToolUse(v1::ToolUseBlock { id, name, input_json: input.to_string() })
                }
                Block::ToolResult { tool_use_id, content, is_error } => {
                    B::ToolResult(v1::ToolResultBlock { tool_use_id, content, is_error })
                }
                Block::Thinking { thinking, signature } => B::Thinking(v1::ThinkingBlock { thinking, signature }),
            };
            v1::ContentBlock { block: Some(block) }
        })
        .collect();
    let role = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    v1::LlmMessage { role: role.into(), content }
}

/// The protocol request of a model request (the model keeps its `{provider}/` prefix).
pub fn request_to_proto(request: Request) -> v1::LlmRequest {
    v1::LlmRequest {
        model: request.model,
        system: request.system,
        messages: request.messages.into_iter().map(message_to_proto).collect(),
        tools: request
            .tools
            .into_iter()
            .map(|tool| v1::ToolDefinition {
                name: tool.name,
                description: tool.description,
                parameters_json: tool.parameters.to_string(),
            })
            .collect(),
        max_tokens: request.max_tokens,
        temperature: request.temperature,
        thinking_budget: request.thinking_budget,
        stop: request.stop,
    }
}

/// The protocol event of a model event.
pub fn event_to_proto(event: Event) -> v1::LlmEvent {
    use v1::llm_event::Event as E;
    let event = match event {
        Event::MessageStart { id, model, provider } => E::MessageStart(v1::MessageStart { id, model, provider }),
        Event::TextDelta { index, text } => E::TextDelta(v1::TextDelta { index, text }),
        Event::ThinkingDelta { index, thinking, signature } => {
            E::ThinkingDelta(v1::ThinkingDelta { index, thinking, signature })
        }
        Event::ToolCallStart { index, id, name } => E::ToolCallStart(v1::ToolCallStart { index, id, name }),
        Event::ToolCallDelta { index, partial_json } => E::ToolCallDelta(v1::ToolCallDelta { index, partial_json }),
        Event::ToolCallEnd { index } => E::ToolCallEnd(v1::ToolCallEnd { index }),
        Event::Usage(usage) => E::Usage(v1::Usage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            estimated: usage.estimated,
        }),
        Event::MessageStop { stop_reason } => E::MessageStop(v1::MessageStop { stop_reason }),
        Event::Error { kind, message } => E::Error(v1::LlmError {
            kind: kind.as_str().into(),
            message,
            provider: String::new(),
            retryable: kind.retryable(),
        }),
    };
    v1::LlmEvent { event: Some(event) }
}

/// The typed error event that ends a stream the providers could not answer.
pub fn failure_to_proto(failure: &Failure) -> v1::LlmEvent {
    let kind = kind_of(failure);
    let provider = match failure {
        Failure::Status { provider, .. }
        | Failure::Connect { provider, .. }
        | Failure::Http { provider, .. }
        | Failure::Timeout { provider, .. }
        | Failure::Dropped { provider }
        | Failure::BadBase { provider, .. }
        | Failure::Tls { provider, .. }
        | Failure::Provider { provider, .. }
        | Failure::Unusable { provider, .. }
        | Failure::NothingAnswers { provider, .. } => provider.clone(),
        Failure::Stream(error) => error.provider.to_string(),
        Failure::Route { .. } => String::new(),
    };
    v1::LlmEvent {
        event: Some(v1::llm_event::Event::Error(v1::LlmError {
            kind: kind.as_str().into(),
            message: failure.to_string(),
            provider,
            retryable: failure.retryable(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_block(text: &str) -> v1::ContentBlock {
        v1::ContentBlock { block: Some(v1::content_block::Block::Text(text.into())) }
    }

    #[test]
    fn a_request_converts_with_its_tools_and_tool_blocks() {
        let request = v1::LlmRequest {
            model: "anthropic/claude".into(),
            system: "be brief".into(),
            messages: vec![
                v1::LlmMessage { role: "user".into(), content: vec![text_block("hi")] },
                v1::LlmMessage {
                    role: "assistant".into(),
                    content: vec![v1::ContentBlock {
                        block: Some(v1::content_block::Block::ToolUse(v1::ToolUseBlock {
                            id: "t1".into(),
                            name: "read_file".into(),
                            input_json: r#"{"path":"a"}"#.into(),
                        })),
                    }],
                },
            ],
            tools: vec![v1::ToolDefinition {
                name: "read_file".into(),
                description: "reads".into(),
                parameters_json: String::new(),
            }],
            max_tokens: Some(100),
            ..v1::LlmRequest::default()
        };
        let converted = request_from_proto(request).expect("valid");
        assert_eq!(converted.model, "anthropic/claude");
        assert_eq!(
            converted.messages[1].content[0],
            Block::ToolUse { id: "t1".into(), name: "read_file".into(), input: serde_json::json!({"path": "a"}) }
        );
        assert_eq!(converted.tools[0].parameters["type"], "object");
        assert_eq!(converted.max_tokens, Some(100));
        // And back: what the daemon builds reaches the gateway as it was.
        assert_eq!(request_from_proto(request_to_proto(converted.clone())), Ok(converted));
    }

    #[test]
    fn bad_fields_are_named() {
        let bad_role = v1::LlmRequest {
            model: "m".into(),
            messages: vec![v1::LlmMessage { role: "system".into(), content: vec![] }],
            ..v1::LlmRequest::default()
        };
        assert_eq!(
            request_from_proto(bad_role).err().map(|e| e.to_string()).as_deref(),
            Some("messages[0].role: `system` is neither `user` nor `assistant`")
        );
        let bad_json = v1::LlmRequest {
            model: "m".into(),
            messages: vec![v1::LlmMessage {
                role: "assistant".into(),
                content: vec![v1::ContentBlock {
                    block: Some(v1::content_block::Block::ToolUse(v1::ToolUseBlock {
                        input_json: "{oops".into(),
                        ..v1::ToolUseBlock::default()
                    })),
                }],
            }],
            ..v1::LlmRequest::default()
        };
        let error = request_from_proto(bad_json).expect_err("bad json");
        assert_eq!(error.field, "messages[0].content[0].tool_use.input_json");
        assert!(request_from_proto(v1::LlmRequest::default()).is_err(), "a model is required");
    }
}
