//! Anthropic's Messages API: the request body (with prompt caching on the stable system prompt
//! and tool definitions) and the streamed events (message_start, content_block_start/delta/
//! stop with text, input_json, thinking and signature deltas, message_delta, message_stop,
//! ping, error) mapped to [`Event`]s.

use base64::Engine as _;
use serde_json::{json, Value};

use crate::model::{signed_by_anthropic, thinking_as_text, Block, ErrorKind, Event, Request, Role, StreamError, Usage};
use crate::sse::SseEvent;

/// The largest `max_tokens` Anthropic accepts for the models we run; higher asks are clamped.
pub const MAX_OUTPUT_TOKENS: u32 = 64_000;
/// Anthropic requires `max_tokens`; used when the request leaves it unset.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// A block as Anthropic takes it; thinking another provider made becomes `<thinking>` text, or
/// nothing when it is a signature alone.
fn block(block: &Block) -> Option<Value> {
    Some(match block {
        Block::Text(text) => json!({"type": "text", "text": text}),
        Block::Image { media_type, data } => json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": base64::engine::general_purpose::STANDARD.encode(data)},
        }),
        Block::ToolUse { id, name, input } => json!({"type": "tool_use", "id": id, "name": name, "input": input}),
        Block::ToolResult { tool_use_id, content, is_error } => {
            json!({"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error})
        }
        Block::Thinking { thinking, signature } if signed_by_anthropic(signature) => {
            json!({"type": "thinking", "thinking": thinking, "signature": signature})
        }
        Block::Thinking { thinking, .. } => json!({"type": "text", "text": thinking_as_text(thinking)?}),
    })
}

/// Anthropic takes at most four cache breakpoints a request.
const CACHE_BREAKPOINTS: usize = 4;

/// The JSON body of `POST /v1/messages` with `stream: true`, with prompt caching: breakpoints
/// at the end of the tools, of the system prompt's stable part, and of the conversation (its
/// last message, and the user message before it), so each request reads what the one before
/// wrote — the next step of a turn, and the next turn up to its previous message.
pub fn request_body(request: &Request) -> Value {
    let max_tokens = request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS).min(MAX_OUTPUT_TOKENS);
    let mut body = json!({
        "model": request.model,
        "max_tokens": max_tokens,
        "stream": true,
        "messages": request.messages.iter().map(|message| json!({
            "role": match message.role { Role::User => "user", Role::Assistant => "assistant" },
            "content": message.content.iter().filter_map(block).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    // The system prompt and tools are the stable prefix: mark the end of each for caching.
    let mut breakpoints = 0;
    let mut system = vec![];
    if !request.system.is_empty() {
        system.push(json!({"type": "text", "text": request.system, "cache_control": {"type": "ephemeral"}}));
        breakpoints += 1;
    }
    if !system.is_empty() {
        body["system"] = Value::Array(system);
    }
    if !request.tools.is_empty() {
        let count = request.tools.len();
        body["tools"] = request
            .tools
            .iter()
            .enumerate()
            .map(|(index, tool)| {
                let mut definition =
                    json!({"name": tool.name, "description": tool.description, "input_schema": tool.parameters});
                if index + 1 == count {
                    definition["cache_control"] = json!({"type": "ephemeral"});
                }
                definition
            })
            .collect();
        breakpoints += 1;
    }
    mark_history(&mut body["messages"], CACHE_BREAKPOINTS - breakpoints);
    // Anthropic takes no temperature of its own with thinking on.
    if let Some(temperature) = request.temperature.filter(|_| request.thinking_budget == 0) {
        body["temperature"] = json!(temperature);
    }
    if !request.stop.is_empty() {
        body["stop_sequences"] = json!(request.stop);
    }
    if request.thinking_budget > 0 {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": request.thinking_budget});
    }
    body
}

/// Marks for caching the last block of the last message and of the user message before it (a
/// thinking block cannot carry a mark: the block before it does), at most `left` marks.
fn mark_history(messages: &mut Value, left: usize) {
    let Some(messages) = messages.as_array_mut() else { return };
    let mut marked = 0;
    let mut last = true;
    for message in messages.iter_mut().rev() {
        if marked == left {
            break;
        }
        if !last && message["role"] != "user" {
            continue;
        }
        let blocks = message["content"].as_array_mut().into_iter().flatten();
        if let Some(block) = blocks.rev().find(|block| block["type"] != "thinking") {
            block["cache_control"] = json!({"type": "ephemeral"});
            marked += 1;
        }
        if !last {
            break;
        }
        last = false;
    }
}

/// Maps Anthropic's error types to what they mean for a caller.
pub fn error_kind(error_type: &str) -> ErrorKind {
    match error_type {
        "rate_limit_error" => ErrorKind::RateLimited,
        "overloaded_error" => ErrorKind::Overloaded,
        "invalid_request_error" | "not_found_error" | "request_too_large" => ErrorKind::InvalidRequest,
        "authentication_error" | "permission_error" => ErrorKind::Authentication,
        _ => ErrorKind::Provider,
    }
}

/// Turns one stream into events; keeps which content blocks are tool calls.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    tool_blocks: Vec<u32>,
    usage: Usage,
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    pub fn decode(&mut self, sse: &SseEvent) -> Result<Vec<Event>, StreamError> {
        let error = |reason: String| StreamError { provider: "anthropic", event: sse.event.clone(), reason };
        let data: Value = serde_json::from_str(&sse.data).map_err(|e| error(e.to_string()))?;
        let kind = data["type"].as_str().unwrap_or(sse.event.as_str());
        let index = || data["index"].as_u64().map(|i| i as u32).ok_or_else(|| error("no index".into()));
        let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
        Ok(match kind {
            "message_start" => {
                let message = &data["message"];
                self.read_usage(&message["usage"]);
                vec![Event::MessageStart {
                    id: text(&message["id"]),
                    model: text(&message["model"]),
                    provider: String::new(),
                }]
            }
            "content_block_start" => {
                let block = &data["content_block"];
                let index = index()?;
                match block["type"].as_str() {
                    Some("tool_use") => {
                        self.tool_blocks.push(index);
                        vec![Event::ToolCallStart { index, id: text(&block["id"]), name: text(&block["name"]) }]
                    }
                    Some("text") if !text(&block["text"]).is_empty() => {
                        vec![Event::TextDelta { index, text: text(&block["text"]) }]
                    }
                    _ => vec![],
                }
            }
            "content_block_delta" => {
                let delta = &data["delta"];
                let index = index()?;
                match delta["type"].as_str() {
                    Some("text_delta") => vec![Event::TextDelta { index, text: text(&delta["text"]) }],
                    Some("input_json_delta") => {
                        vec![Event::ToolCallDelta { index, partial_json: text(&delta["partial_json"]) }]
                    }
                    Some("thinking_delta") => {
                        vec![Event::ThinkingDelta {
                            index,
                            thinking: text(&delta["thinking"]),
                            signature: String::new(),
                        }]
                    }
                    Some("signature_delta") => {
                        vec![Event::ThinkingDelta {
                            index,
                            thinking: String::new(),
                            signature: text(&delta["signature"]),
                        }]
                    }
                    other => return Err(error(format!("unknown delta type {other:?}"))),
                }
            }
            "content_block_stop" => {
                let index = index()?;
                if self.tool_blocks.contains(&index) {
                    vec![Event::ToolCallEnd { index }]
                } else {
                    vec![]
                }
            }
            "message_delta" => {
                self.read_usage(&data["usage"]);
                let mut events = vec![Event::Usage(self.usage)];
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    events.push(Event::MessageStop { stop_reason: reason.to_string() });
                }
                events
            }
            "message_stop" | "ping" => vec![],
            "error" => {
                let error_type = data["error"]["type"].as_str().unwrap_or("api_error");
                let message = text(&data["error"]["message"]);
                vec![Event::Error { kind: error_kind(error_type).refined(&message), message }]
            }
            other => return Err(error(format!("unknown event type {other:?}"))),
        })
    }

    fn read_usage(&mut self, usage: &Value) {
        let read = |key: &str| usage[key].as_u64();
        if let Some(tokens) = read("input_tokens") {
            self.usage.input_tokens = tokens;
        }
        if let Some(tokens) = read("output_tokens") {
            self.usage.output_tokens = tokens;
        }
        if let Some(tokens) = read("cache_read_input_tokens") {
            self.usage.cache_read_tokens = tokens;
        }
        if let Some(tokens) = read("cache_creation_input_tokens") {
            self.usage.cache_write_tokens = tokens;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Message, Tool};
    use crate::sse::SseDecoder;

    fn decode(stream: &str) -> Vec<Event> {
        let mut sse = SseDecoder::new();
        let mut decoder = StreamDecoder::new();
        // Feed in small uneven chunks, as a network would.
        stream
            .as_bytes()
            .chunks(7)
            .flat_map(|chunk| sse.push(chunk))
            .flat_map(|event| decoder.decode(&event).expect("valid stream"))
            .collect()
    }

    /// The text example of Anthropic's streaming documentation.
    const TEXT: &str = "event: message_start\ndata: {\"type\": \"message_start\", \"message\": {\"id\": \"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY\", \"type\": \"message\", \"role\": \"assistant\", \"content\": [], \"model\": \"claude-sonnet-4-20250514\", \"stop_reason\": null, \"stop_sequence\": null, \"usage\": {\"input_tokens\": 25, \"output_tokens\": 1}}}\n\nevent: content_block_start\ndata: {\"type\": \"content_block_start\", \"index\": 0, \"content_block\": {\"type\": \"text\", \"text\": \"\"}}\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\nevent: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": \"Hello\"}}\n\nevent: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": \"!\"}}\n\nevent: content_block_stop\ndata: {\"type\": \"content_block_stop\", \"index\": 0}\n\nevent: message_delta\ndata: {\"type\": \"message_delta\", \"delta\": {\"stop_reason\": \"end_turn\", \"stop_sequence\":null}, \"usage\": {\"output_tokens\": 15}}\n\nevent: message_stop\ndata: {\"type\": \"message_stop\"}\n\n";

    #[test]
    fn text_stream() {
        let usage = Usage { input_tokens: 25, output_tokens: 15, ..Usage::default() };
        assert_eq!(
            decode(TEXT),
            vec![
                Event::MessageStart {
                    id: "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY".into(),
                    model: "claude-sonnet-4-20250514".into(),
                    provider: String::new()
                },
                Event::TextDelta { index: 0, text: "Hello".into() },
                Event::TextDelta { index: 0, text: "!".into() },
                Event::Usage(usage),
                Event::MessageStop { stop_reason: "end_turn".into() },
            ]
        );
    }

    #[test]
    fn tool_use_split_across_many_deltas_and_thinking() {
        let stream = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_014p7gG3wDgGV9EUtLvnow3U\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-20250514\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"output_tokens\":2,\"cache_read_input_tokens\":400},\"content\":[],\"stop_reason\":null}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"The user wants weather.\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCgIYAhIM1gbcDa9GJwZA2b3h\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"get_weather\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"location\\\":\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\" \\\"San Fra\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"ncisco, CA\\\"}\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let events = decode(stream);
        let json: String = events
            .iter()
            .filter_map(|event| match event {
                Event::ToolCallDelta { index: 1, partial_json } => Some(partial_json.as_str()),
                _ => None,
            })
            .collect();
        let input: Value = serde_json::from_str(&json).expect("the joined deltas are JSON");
        assert_eq!(input, json!({"location": "San Francisco, CA"}));
        assert!(events.contains(&Event::ToolCallStart {
            index: 1,
            id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
            name: "get_weather".into()
        }));
        assert!(events.contains(&Event::ToolCallEnd { index: 1 }));
        assert!(!events.contains(&Event::ToolCallEnd { index: 0 }), "a thinking block is not a tool call");
        assert!(events.contains(&Event::ThinkingDelta {
            index: 0,
            thinking: "The user wants weather.".into(),
            signature: String::new()
        }));
        assert!(events.contains(&Event::ThinkingDelta {
            index: 0,
            thinking: String::new(),
            signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3h".into()
        }));
        assert!(events.contains(&Event::Usage(Usage {
            input_tokens: 472,
            output_tokens: 89,
            cache_read_tokens: 400,
            ..Usage::default()
        })));
        assert_eq!(events.last(), Some(&Event::MessageStop { stop_reason: "tool_use".into() }));
    }

    #[test]
    fn an_error_event_mid_stream() {
        let stream = concat!(
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n",
            "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n",
        );
        let events = decode(stream);
        assert_eq!(events[1], Event::Error { kind: ErrorKind::Overloaded, message: "Overloaded".into() });
        assert!(ErrorKind::Overloaded.retryable());
        let mut decoder = StreamDecoder::new();
        let broken = SseEvent { event: "content_block_delta".into(), data: "{not json".into() };
        assert!(decoder
            .decode(&broken)
            .expect_err("invalid")
            .to_string()
            .starts_with("anthropic sent an event that does not parse"));
    }

    #[test]
    fn request_body_caches_the_stable_prefix_and_clamps() {
        let request = Request {
            model: "claude-sonnet-4-20250514".into(),
            system: "You are baaaht.".into(),
            messages: vec![
                Message {
                    role: Role::User,
                    content: vec![
                        Block::Text("weather?".into()),
                        Block::Image { media_type: "image/png".into(), data: vec![1, 2, 3] },
                    ],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![Block::ToolUse {
                        id: "t1".into(),
                        name: "get_weather".into(),
                        input: json!({"location": "Paris"}),
                    }],
                },
                Message {
                    role: Role::User,
                    content: vec![Block::ToolResult {
                        tool_use_id: "t1".into(),
                        content: "sunny".into(),
                        is_error: false,
                    }],
                },
            ],
            tools: vec![
                Tool { name: "a".into(), description: "A".into(), parameters: json!({"type": "object"}) },
                Tool {
                    name: "get_weather".into(),
                    description: "Weather".into(),
                    parameters: json!({"type": "object"}),
                },
            ],
            max_tokens: Some(1_000_000),
            temperature: Some(0.5),
            thinking_budget: 2048,
            stop: vec!["END".into()],
        };
        let body = request_body(&request);
        assert_eq!(body["max_tokens"], MAX_OUTPUT_TOKENS);
        assert_eq!(body["stream"], true);
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        assert!(body["tools"][0].get("cache_control").is_none());
        assert_eq!(body["tools"][1]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["tools"][1]["input_schema"]["type"], "object");
        assert_eq!(body["messages"][0]["content"][1]["source"]["data"], "AQID");
        assert_eq!(body["messages"][1]["content"][0]["input"]["location"], "Paris");
        assert_eq!(body["messages"][2]["content"][0]["tool_use_id"], "t1");
        assert_eq!(body["thinking"]["budget_tokens"], 2048);
        assert_eq!(body["stop_sequences"][0], "END");
    }

    #[test]
    fn request_body_marks_tools_the_stable_system_and_the_conversation_for_caching_and_nothing_else() {
        let user = |text: &str| Message { role: Role::User, content: vec![Block::Text(text.into())] };
        let request = Request {
            model: "claude-sonnet-4-20250514".into(),
            system: "You are baaaht.".into(),
            messages: vec![
                user("first"),
                Message { role: Role::Assistant, content: vec![Block::Text("one".into())] },
                user("second"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        Block::Thinking { thinking: "hm".into(), signature: "sig".into() },
                        Block::ToolUse { id: "t1".into(), name: "exec".into(), input: json!({"command": "ls"}) },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![Block::ToolResult {
                        tool_use_id: "t1".into(),
                        content: "a.txt".into(),
                        is_error: false,
                    }],
                },
            ],
            tools: vec![Tool { name: "exec".into(), description: "Run".into(), parameters: json!({"type": "object"}) }],
            max_tokens: Some(100),
            ..Request::default()
        };
        let expected = r##"{
            "model": "claude-sonnet-4-20250514", "max_tokens": 100, "stream": true,
            "system": [{"type": "text", "text": "You are baaaht.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "exec", "description": "Run", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "first"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "one"}]},
                {"role": "user", "content": [{"type": "text", "text": "second", "cache_control": {"type": "ephemeral"}}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "sig"},
                    {"type": "tool_use", "id": "t1", "name": "exec", "input": {"command": "ls"}}
                ]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt", "is_error": false, "cache_control": {"type": "ephemeral"}}]}
            ]
        }"##;
        let expected: Value = serde_json::from_str(expected).expect("JSON");
        assert_eq!(request_body(&request), expected);
        // Four marks at most: with no tools the conversation still gets two, never more.
        let bare = Request { tools: vec![], ..request.clone() };
        let marks = request_body(&bare).to_string().matches("cache_control").count();
        assert_eq!(marks, 3);
        // A single message is marked once; a thinking block is never marked.
        let one = Request {
            messages: vec![Message {
                role: Role::User,
                content: vec![Block::Text("q".into()), Block::Thinking { thinking: "t".into(), signature: "s".into() }],
            }],
            ..request
        };
        let body = request_body(&one);
        assert_eq!(body["messages"][0]["content"][0]["cache_control"]["type"], "ephemeral");
        assert!(body["messages"][0]["content"][1].get("cache_control").is_none());
        assert_eq!(body.to_string().matches("cache_control").count(), 3);
    }
}
