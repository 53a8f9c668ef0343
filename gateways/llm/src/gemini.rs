//! Google's Gemini `generateContent` API, as the Generative Language API and Vertex AI both
//! speak it: the request body (system instruction, contents of `user` and `model` turns with
//! text, inline images, function calls and responses, thought parts with their signatures,
//! function declarations as JSON Schema, generation and thinking config) and the streamed
//! answer of `streamGenerateContent?alt=sse` (one `GenerateContentResponse` per event) mapped to
//! [`Event`]s.

use std::collections::HashMap;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::model::{thinking_as_text, Block, ErrorKind, Event, Request, Role, StreamError, Usage, GEMINI_SIGNATURE};
use crate::sse::SseEvent;

/// The signature Gemini gave, as the history keeps it, if `signature` is Gemini's.
fn gemini_signature(signature: &str) -> Option<&str> {
    signature.strip_prefix(GEMINI_SIGNATURE).filter(|signature| !signature.is_empty())
}

/// The parts of one turn. Gemini's own thoughts go back as thought parts with their signature
/// (unsigned ones are not sent back, as Gemini asks); a signature Gemini put on a function call
/// or a text (kept as a thinking block of its own, before the turn's other blocks) goes back on
/// the first function call, else on the last text; anyone else's thinking as `<thinking>` text.
fn parts(content: &[Block], names: &HashMap<&str, &str>) -> Vec<Value> {
    let mut parts = vec![];
    let mut signatures: Vec<&str> = vec![];
    for block in content {
        let part = match block {
            Block::Text(text) => json!({"text": text}),
            Block::Image { media_type, data } => json!({"inlineData": {
                "mimeType": media_type,
                "data": base64::engine::general_purpose::STANDARD.encode(data),
            }}),
            Block::ToolUse { id, name, input } => json!({"functionCall": {"id": id, "name": name, "args": input}}),
            Block::ToolResult { tool_use_id, content, is_error } => {
                let name = names.get(tool_use_id.as_str()).copied().unwrap_or("tool");
                let outcome = if *is_error { "error" } else { "result" };
                json!({"functionResponse": {"id": tool_use_id, "name": name, "response": {outcome: content}}})
            }
            Block::Thinking { thinking, signature } if signature.starts_with(GEMINI_SIGNATURE) => {
                match (gemini_signature(signature), thinking.is_empty()) {
                    (Some(signature), true) => {
                        signatures.push(signature);
                        continue;
                    }
                    (Some(signature), false) => {
                        json!({"text": thinking, "thought": true, "thoughtSignature": signature})
                    }
                    (None, _) => continue,
                }
            }
            Block::Thinking { thinking, .. } => match thinking_as_text(thinking) {
                Some(text) => json!({"text": text}),
                None => continue,
            },
        };
        parts.push(part);
    }
    let mut anchors: Vec<usize> = (0..parts.len()).filter(|&i| parts[i].get("functionCall").is_some()).collect();
    if anchors.is_empty() {
        anchors.extend(
            (0..parts.len()).rev().find(|&i| parts[i].get("text").is_some() && parts[i].get("thought").is_none()),
        );
    }
    for (anchor, signature) in anchors.into_iter().zip(signatures) {
        parts[anchor]["thoughtSignature"] = json!(signature);
    }
    parts
}

/// The JSON body of `…:streamGenerateContent?alt=sse` (the model is named in the path).
pub fn request_body(request: &Request, max_output: Option<u32>) -> Value {
    // A function response names its function: found by the id of the call it answers.
    let names: HashMap<&str, &str> = request
        .messages
        .iter()
        .flat_map(|message| &message.content)
        .filter_map(|block| match block {
            Block::ToolUse { id, name, .. } => Some((id.as_str(), name.as_str())),
            _ => None,
        })
        .collect();
    let contents: Vec<Value> = request
        .messages
        .iter()
        .filter_map(|message| {
            let parts = parts(&message.content, &names);
            let role = match message.role {
                Role::User => "user",
                Role::Assistant => "model",
            };
            (!parts.is_empty()).then(|| json!({"role": role, "parts": parts}))
        })
        .collect();
    let mut body = json!({"contents": contents});
    if !request.system.is_empty() {
        body["systemInstruction"] = json!({"parts": [{"text": request.system}]});
    }
    if !request.tools.is_empty() {
        let declarations: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({"name": tool.name, "description": tool.description, "parametersJsonSchema": tool.parameters})
            })
            .collect();
        body["tools"] = json!([{"functionDeclarations": declarations}]);
    }
    let mut config = json!({});
    let max_tokens = request.max_tokens_within(max_output);
    if let Some(tokens) = max_tokens {
        config["maxOutputTokens"] = json!(tokens);
    }
    if let Some(temperature) = request.temperature {
        config["temperature"] = json!(temperature);
    }
    if !request.stop.is_empty() {
        config["stopSequences"] = json!(request.stop);
    }
    if request.thinking_budget > 0 {
        config["thinkingConfig"] = json!({"thinkingBudget": request.thinking_budget, "includeThoughts": true});
    }
    if config.as_object().is_some_and(|config| !config.is_empty()) {
        body["generationConfig"] = config;
    }
    body
}

/// What Google's canonical error status means for a caller.
pub fn error_kind(status: &str) -> ErrorKind {
    match status {
        "RESOURCE_EXHAUSTED" => ErrorKind::RateLimited,
        "UNAVAILABLE" => ErrorKind::Overloaded,
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "NOT_FOUND" | "OUT_OF_RANGE" => ErrorKind::InvalidRequest,
        "UNAUTHENTICATED" | "PERMISSION_DENIED" => ErrorKind::Authentication,
        "DEADLINE_EXCEEDED" => ErrorKind::Timeout,
        _ => ErrorKind::Provider,
    }
}

/// What the block being streamed is, so consecutive parts of one kind continue it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    None,
    Text,
    Thought,
}

/// Turns one stream into events. Gemini sends whole parts (a function call complete in one),
/// no indexes and no ids of its own: indexes are counted here, and a call without an id gets
/// one unique in the answer.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    started: bool,
    index: u32,
    open: Option<Open>,
    calls: u32,
    response_id: String,
    usage: Usage,
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// The index of a part of kind `kind`: the open block's when it continues it, else the next.
    fn index_for(&mut self, kind: Open) -> u32 {
        match self.open {
            Some(open) if open == kind && kind != Open::None => self.index,
            None => {
                self.open = Some(kind);
                self.index
            }
            Some(_) => {
                self.index += 1;
                self.open = Some(kind);
                self.index
            }
        }
    }

    pub fn decode(&mut self, sse: &SseEvent) -> Result<Vec<Event>, StreamError> {
        let error =
            |reason: String| StreamError { provider: "gemini", event: sse.data.chars().take(80).collect(), reason };
        let chunk: Value = serde_json::from_str(&sse.data).map_err(|e| error(e.to_string()))?;
        if let Some(failure) = chunk.get("error") {
            let message = failure["message"].as_str().unwrap_or("error").to_string();
            let kind = error_kind(failure["status"].as_str().unwrap_or_default());
            return Ok(vec![Event::Error { kind: kind.refined(&message), message }]);
        }
        let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
        let mut events = vec![];
        if !self.started {
            self.started = true;
            self.response_id = text(&chunk["responseId"]);
            events.push(Event::MessageStart {
                id: self.response_id.clone(),
                model: text(&chunk["modelVersion"]),
                provider: String::new(),
            });
        }
        if let Some(reason) = chunk["promptFeedback"]["blockReason"].as_str() {
            let message = format!("the provider refused the request ({reason})");
            return Ok(vec![Event::Error { kind: ErrorKind::InvalidRequest, message }]);
        }
        if let Some(usage) = chunk.get("usageMetadata") {
            let read = |key: &str| usage[key].as_u64().unwrap_or(0);
            // The prompt count includes the cached part; our usage keeps it apart.
            let cached = read("cachedContentTokenCount");
            self.usage = Usage {
                input_tokens: read("promptTokenCount").saturating_sub(cached),
                output_tokens: read("candidatesTokenCount").saturating_add(read("thoughtsTokenCount")),
                cache_read_tokens: cached,
                ..Usage::default()
            };
        }
        let Some(candidate) = chunk["candidates"].get(0) else { return Ok(events) };
        for part in candidate["content"]["parts"].as_array().into_iter().flatten() {
            let signature = part["thoughtSignature"].as_str().filter(|s| !s.is_empty());
            if part["thought"].as_bool() == Some(true) {
                let opened = self.open != Some(Open::Thought);
                let index = self.index_for(Open::Thought);
                // The block's signature is marked Gemini's once, at its start; deltas add to it.
                let mark = if opened { GEMINI_SIGNATURE } else { "" };
                events.push(Event::ThinkingDelta {
                    index,
                    thinking: text(&part["text"]),
                    signature: format!("{mark}{}", signature.unwrap_or_default()),
                });
                continue;
            }
            // A signature on another part is kept as a thinking block of its own, just before it.
            if let Some(signature) = signature {
                let index = self.index_for(Open::None);
                events.push(Event::ThinkingDelta {
                    index,
                    thinking: String::new(),
                    signature: format!("{GEMINI_SIGNATURE}{signature}"),
                });
                self.open = Some(Open::None);
            }
            if let Some(call) = part.get("functionCall") {
                let index = self.index_for(Open::None);
                self.open = Some(Open::None);
                self.calls += 1;
                let id = match call["id"].as_str().filter(|id| !id.is_empty()) {
                    Some(id) => id.to_string(),
                    None => format!("call_{}_{}", short(&self.response_id), self.calls),
                };
                let arguments = if call["args"].is_null() { json!({}) } else { call["args"].clone() };
                events.push(Event::ToolCallStart { index, id, name: text(&call["name"]) });
                events.push(Event::ToolCallDelta { index, partial_json: arguments.to_string() });
                events.push(Event::ToolCallEnd { index });
            } else if let Some(words) = part["text"].as_str().filter(|words| !words.is_empty()) {
                let index = self.index_for(Open::Text);
                events.push(Event::TextDelta { index, text: words.to_string() });
            }
        }
        if let Some(reason) = candidate["finishReason"].as_str() {
            let stop_reason = match reason {
                "STOP" if self.calls > 0 => "tool_use".to_string(),
                "STOP" => "end_turn".to_string(),
                "MAX_TOKENS" => "max_tokens".to_string(),
                other => other.to_ascii_lowercase(),
            };
            events.push(Event::Usage(self.usage));
            events.push(Event::MessageStop { stop_reason });
        }
        Ok(events)
    }
}

/// A few characters of a response id, to tell one answer's calls from another's.
fn short(id: &str) -> String {
    let kept: String = id.chars().filter(char::is_ascii_alphanumeric).take(8).collect();
    if kept.is_empty() {
        format!(
            "{:08x}",
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos())
        )
    } else {
        kept
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
        stream
            .as_bytes()
            .chunks(7)
            .flat_map(|chunk| sse.push(chunk))
            .flat_map(|event| decoder.decode(&event).expect("valid stream"))
            .collect()
    }

    #[test]
    fn thoughts_text_and_a_function_call_with_its_signature() {
        let stream = concat!(
            "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Weighing it\", \"thought\": true}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 12,\"totalTokenCount\": 12},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"abc123\"}\r\n\r\n",
            "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Let me look.\"}],\"role\": \"model\"},\"index\": 0}],\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"abc123\"}\r\n\r\n",
            "data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": {\"name\": \"read_file\",\"args\": {\"path\": \"a.txt\"}},\"thoughtSignature\": \"c2ln\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 12,\"candidatesTokenCount\": 9,\"thoughtsTokenCount\": 4,\"cachedContentTokenCount\": 2,\"totalTokenCount\": 25},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"abc123\"}\r\n\r\n",
        );
        let events = decode(stream);
        assert_eq!(
            events,
            [
                Event::MessageStart { id: "abc123".into(), model: "gemini-2.5-flash".into(), provider: String::new() },
                Event::ThinkingDelta { index: 0, thinking: "Weighing it".into(), signature: "gemini:".into() },
                Event::TextDelta { index: 1, text: "Let me look.".into() },
                Event::ThinkingDelta { index: 2, thinking: String::new(), signature: "gemini:c2ln".into() },
                Event::ToolCallStart { index: 3, id: "call_abc123_1".into(), name: "read_file".into() },
                Event::ToolCallDelta { index: 3, partial_json: r#"{"path":"a.txt"}"#.into() },
                Event::ToolCallEnd { index: 3 },
                Event::Usage(Usage { input_tokens: 10, output_tokens: 13, cache_read_tokens: 2, ..Usage::default() }),
                Event::MessageStop { stop_reason: "tool_use".into() },
            ]
        );
    }

    #[test]
    fn an_error_in_the_stream_and_a_blocked_prompt() {
        let error = "data: {\"error\": {\"code\": 429, \"message\": \"Resource has been exhausted\", \"status\": \"RESOURCE_EXHAUSTED\"}}\n\n";
        assert_eq!(
            decode(error),
            [Event::Error { kind: ErrorKind::RateLimited, message: "Resource has been exhausted".into() }]
        );
        let blocked = "data: {\"promptFeedback\": {\"blockReason\": \"SAFETY\"}, \"responseId\": \"r\"}\n\n";
        assert!(matches!(decode(blocked).last(), Some(Event::Error { kind: ErrorKind::InvalidRequest, .. })));
    }

    #[test]
    fn the_request_carries_tools_results_thoughts_and_config() {
        let request = Request {
            model: "gemini-2.5-flash".into(),
            system: "be brief".into(),
            messages: vec![
                Message::user("read a.txt"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        Block::Thinking { thinking: "hm".into(), signature: "gemini:AAA".into() },
                        Block::Thinking { thinking: String::new(), signature: "gemini:BBB".into() },
                        Block::Thinking { thinking: "unsigned, Gemini's".into(), signature: "gemini:".into() },
                        Block::Thinking { thinking: "Claude's".into(), signature: "EqQB".into() },
                        Block::ToolUse { id: "c1".into(), name: "read_file".into(), input: json!({"path": "a.txt"}) },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        Block::ToolResult { tool_use_id: "c1".into(), content: "hello".into(), is_error: false },
                        Block::Image { media_type: "image/png".into(), data: vec![1, 2, 3] },
                    ],
                },
            ],
            tools: vec![Tool {
                name: "read_file".into(),
                description: "reads".into(),
                parameters: json!({"type": "object", "additionalProperties": false}),
            }],
            max_tokens: Some(9000),
            temperature: Some(0.5),
            thinking_budget: 1024,
            stop: vec!["END".into()],
        };
        let body = request_body(&request, Some(8192));
        assert_eq!(body["systemInstruction"], json!({"parts": [{"text": "be brief"}]}));
        assert_eq!(
            body["contents"][1]["parts"],
            json!([
                {"text": "hm", "thought": true, "thoughtSignature": "AAA"},
                {"text": "<thinking>\nClaude's\n</thinking>"},
                {"functionCall": {"id": "c1", "name": "read_file", "args": {"path": "a.txt"}}, "thoughtSignature": "BBB"},
            ])
        );
        assert_eq!(body["contents"][1]["role"], "model");
        assert_eq!(
            body["contents"][2]["parts"],
            json!([
                {"functionResponse": {"id": "c1", "name": "read_file", "response": {"result": "hello"}}},
                {"inlineData": {"mimeType": "image/png", "data": "AQID"}},
            ])
        );
        assert_eq!(body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"]["additionalProperties"], false);
        assert_eq!(
            body["generationConfig"],
            json!({"maxOutputTokens": 8192, "temperature": 0.5, "stopSequences": ["END"],
                   "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": true}})
        );
    }
}
