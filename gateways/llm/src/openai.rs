//! OpenAI Chat Completions, also spoken by OpenRouter, Ollama, LM Studio, vLLM, Groq,
//! DeepSeek, xAI, Mistral and llama.cpp's server: the request body (usage requested through
//! `stream_options`) and the streamed chunks (text, tool call deltas by index, finish_reason,
//! the usage chunk, `[DONE]`) mapped to [`Event`]s.

use std::collections::BTreeSet;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::model::{thinking_as_text, Block, ErrorKind, Event, Request, Role, StreamError, Usage};
use crate::sse::SseEvent;

fn message_json(role: Role, content: &[Block]) -> Vec<Value> {
    let mut out = vec![];
    // Tool results are messages of their own in this format.
    for block in content {
        if let Block::ToolResult { tool_use_id, content, .. } = block {
            out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}));
        }
    }
    let parts: Vec<Value> = content
        .iter()
        .filter_map(|block| match block {
            Block::Text(text) => Some(json!({"type": "text", "text": text})),
            // Another provider's thinking is told as text; a compatible server's own reasoning
            // (unsigned) is not sent back, as those servers ask.
            Block::Thinking { thinking, signature } if !signature.is_empty() => {
                thinking_as_text(thinking).map(|text| json!({"type": "text", "text": text}))
            }
            Block::Image { media_type, data } => Some(json!({"type": "image_url", "image_url": {
                "url": format!("data:{media_type};base64,{}", base64::engine::general_purpose::STANDARD.encode(data)),
            }})),
            _ => None,
        })
        .collect();
    let calls: Vec<Value> = content
        .iter()
        .filter_map(|block| match block {
            Block::ToolUse { id, name, input } => Some(json!({
                "id": id, "type": "function", "function": {"name": name, "arguments": input.to_string()},
            })),
            _ => None,
        })
        .collect();
    let role = match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    if !parts.is_empty() || !calls.is_empty() {
        let mut message = json!({"role": role});
        // Plain text stays a string (its blocks a paragraph each): some compatible servers
        // accept nothing else.
        message["content"] = match parts.as_slice() {
            [] => Value::Null,
            texts if texts.iter().all(|part| part["type"] == "text") => {
                let texts: Vec<&str> = texts.iter().filter_map(|part| part["text"].as_str()).collect();
                json!(texts.join("\n\n"))
            }
            _ => json!(parts),
        };
        if !calls.is_empty() {
            message["tool_calls"] = json!(calls);
        }
        out.push(message);
    }
    out
}

/// The JSON body of `POST {api_base}/chat/completions` with `stream: true`; `max_output` is the
/// provider's cap on output tokens, if known.
pub fn request_body(request: &Request, max_output: Option<u32>) -> Value {
    let mut messages = vec![];
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for message in &request.messages {
        messages.extend(message_json(message.role, &message.content));
    }
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let max_tokens = request.max_tokens_within(max_output);
    if let Some(tokens) = max_tokens {
        body["max_tokens"] = json!(tokens);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| {
                json!({"type": "function", "function": {
                    "name": tool.name, "description": tool.description, "parameters": tool.parameters,
                }})
            })
            .collect();
    }
    if let Some(temperature) = request.temperature {
        body["temperature"] = json!(temperature);
    }
    if !request.stop.is_empty() {
        body["stop"] = json!(request.stop);
    }
    body
}

/// Maps an HTTP status of a failed request to what it means.
pub fn error_kind(status: u16) -> ErrorKind {
    match status {
        429 => ErrorKind::RateLimited,
        503 | 529 => ErrorKind::Overloaded,
        400 | 404 | 413 | 422 => ErrorKind::InvalidRequest,
        401 | 403 => ErrorKind::Authentication,
        _ => ErrorKind::Provider,
    }
}

/// Turns one stream into events; remembers which tool calls are open.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    started: bool,
    open_calls: BTreeSet<u32>,
    /// Set by `[DONE]`; nothing follows it.
    pub done: bool,
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    pub fn decode(&mut self, sse: &SseEvent) -> Result<Vec<Event>, StreamError> {
        if sse.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(vec![]);
        }
        let error =
            |reason: String| StreamError { provider: "openai", event: sse.data.chars().take(80).collect(), reason };
        let chunk: Value = serde_json::from_str(&sse.data).map_err(|e| error(e.to_string()))?;
        let mut events = vec![];
        if let Some(failure) = chunk.get("error") {
            let message = failure["message"].as_str().unwrap_or("error").to_string();
            let kind = match failure["code"].as_u64().or_else(|| failure["code"].as_str().and_then(|c| c.parse().ok()))
            {
                Some(code) => error_kind(code as u16),
                // OpenAI names it by a string code.
                None if failure["code"].as_str() == Some("context_length_exceeded") => ErrorKind::ContextExceeded,
                None => ErrorKind::Provider,
            };
            return Ok(vec![Event::Error { kind: kind.refined(&message), message }]);
        }
        if !self.started {
            self.started = true;
            let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
            events.push(Event::MessageStart {
                id: text(&chunk["id"]),
                model: text(&chunk["model"]),
                provider: String::new(),
            });
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            let delta = &choice["delta"];
            if let Some(text) = delta["content"].as_str().filter(|text| !text.is_empty()) {
                events.push(Event::TextDelta { index: 0, text: text.to_string() });
            }
            // Reasoning models served through compatible APIs stream their thinking here:
            // `reasoning_content` (DeepSeek, vLLM, LM Studio), `reasoning` (Ollama, OpenRouter).
            let reasoning = delta["reasoning_content"].as_str().or_else(|| delta["reasoning"].as_str());
            if let Some(thinking) = reasoning.filter(|text| !text.is_empty()) {
                events.push(Event::ThinkingDelta {
                    index: 0,
                    thinking: thinking.to_string(),
                    signature: String::new(),
                });
            }
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                let index = call["index"].as_u64().ok_or_else(|| error("a tool call without an index".into()))? as u32;
                if let Some(id) = call["id"].as_str() {
                    let name = call["function"]["name"].as_str().unwrap_or_default().to_string();
                    self.open_calls.insert(index);
                    events.push(Event::ToolCallStart { index, id: id.to_string(), name });
                }
                if let Some(arguments) = call["function"]["arguments"].as_str().filter(|a| !a.is_empty()) {
                    events.push(Event::ToolCallDelta { index, partial_json: arguments.to_string() });
                }
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                events
                    .extend(std::mem::take(&mut self.open_calls).into_iter().map(|index| Event::ToolCallEnd { index }));
                let stop_reason = match reason {
                    "stop" => "end_turn",
                    "tool_calls" | "function_call" => "tool_use",
                    "length" => "max_tokens",
                    other => other,
                };
                events.push(Event::MessageStop { stop_reason: stop_reason.to_string() });
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|usage| !usage.is_null()) {
            let read = |value: &Value| value.as_u64().unwrap_or(0);
            // OpenAI counts the cached part in prompt_tokens; Anthropic (and our usage) apart.
            // DeepSeek names it prompt_cache_hit_tokens.
            let cached = match &usage["prompt_tokens_details"]["cached_tokens"] {
                Value::Number(_) => read(&usage["prompt_tokens_details"]["cached_tokens"]),
                _ => read(&usage["prompt_cache_hit_tokens"]),
            };
            events.push(Event::Usage(Usage {
                input_tokens: read(&usage["prompt_tokens"]).saturating_sub(cached),
                output_tokens: read(&usage["completion_tokens"]),
                cache_read_tokens: cached,
                ..Usage::default()
            }));
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Message, Tool};
    use crate::sse::SseDecoder;

    fn decode(stream: &str) -> (Vec<Event>, bool) {
        let mut sse = SseDecoder::new();
        let mut decoder = StreamDecoder::new();
        let events = stream
            .as_bytes()
            .chunks(5)
            .flat_map(|chunk| sse.push(chunk))
            .flat_map(|event| decoder.decode(&event).expect("valid stream"))
            .collect();
        (events, decoder.done)
    }

    #[test]
    fn text_stream_with_usage() {
        let stream = concat!(
            "data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"system_fingerprint\":\"fp_44709d6fcb\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
            "data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"system_fingerprint\":\"fp_44709d6fcb\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
            "data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"system_fingerprint\":\"fp_44709d6fcb\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
            "data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"system_fingerprint\":\"fp_44709d6fcb\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n",
            "data: [DONE]\n\n",
        );
        let (events, done) = decode(stream);
        assert!(done);
        assert_eq!(
            events,
            vec![
                Event::MessageStart { id: "chatcmpl-123".into(), model: "gpt-4o-mini".into(), provider: String::new() },
                Event::TextDelta { index: 0, text: "Hello".into() },
                Event::MessageStop { stop_reason: "end_turn".into() },
                Event::Usage(Usage { input_tokens: 9, output_tokens: 12, ..Usage::default() }),
            ]
        );
    }

    #[test]
    fn a_compatible_servers_reasoning_is_read_as_thinking_before_the_answer() {
        // DeepSeek's reasoner (and vLLM and LM Studio serving reasoning models) streams its
        // thinking as `reasoning_content` deltas, then the answer as `content`; Ollama and
        // OpenRouter name the thinking `reasoning`.
        let stream = concat!(
            "data: {\"id\":\"r1\",\"model\":\"deepseek-reasoner\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"Tuesday is \"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"r1\",\"model\":\"deepseek-reasoner\",\"choices\":[{\"index\":0,\"delta\":{\"content\":null,\"reasoning_content\":\"free.\"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"r1\",\"model\":\"deepseek-reasoner\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Tuesday.\",\"reasoning_content\":null},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let (events, done) = decode(stream);
        assert!(done);
        let thinking = |text: &str| Event::ThinkingDelta { index: 0, thinking: text.into(), signature: String::new() };
        assert_eq!(
            events,
            vec![
                Event::MessageStart { id: "r1".into(), model: "deepseek-reasoner".into(), provider: String::new() },
                thinking("Tuesday is "),
                thinking("free."),
                Event::TextDelta { index: 0, text: "Tuesday.".into() },
                Event::MessageStop { stop_reason: "end_turn".into() },
            ]
        );
        let ollama = concat!(
            "data: {\"id\":\"o1\",\"model\":\"qwen3\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"reasoning\":\"Hmm.\"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"o1\",\"model\":\"qwen3\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Yes.\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let (events, _) = decode(ollama);
        assert_eq!(events[1], thinking("Hmm."), "{events:?}");
        assert_eq!(events[2], Event::TextDelta { index: 0, text: "Yes.".into() });
    }

    #[test]
    fn parallel_tool_calls_by_index() {
        let chunk = |delta: &str, finish: &str| {
            format!("data: {{\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n")
        };
        let stream = [
            chunk(r#"{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}"#, "null"),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"loc"}}]}"#, "null"),
            chunk(r#"{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{\"tz\":"}}]}"#, "null"),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"ation\":\"Paris\"}"}}]}"#, "null"),
            chunk(r#"{"tool_calls":[{"index":1,"function":{"arguments":"\"CET\"}"}}]}"#, "null"),
            chunk("{}", "\"tool_calls\""),
            "data: [DONE]\n\n".to_string(),
        ]
        .concat();
        let (events, _) = decode(&stream);
        let arguments = |wanted: u32| -> Value {
            let text: String = events
                .iter()
                .filter_map(|event| match event {
                    Event::ToolCallDelta { index, partial_json } if *index == wanted => Some(partial_json.as_str()),
                    _ => None,
                })
                .collect();
            serde_json::from_str(&text).expect("joined arguments are JSON")
        };
        assert_eq!(arguments(0), json!({"location": "Paris"}));
        assert_eq!(arguments(1), json!({"tz": "CET"}));
        assert!(events.contains(&Event::ToolCallStart { index: 1, id: "call_b".into(), name: "get_time".into() }));
        let tail: Vec<&Event> = events.iter().rev().take(3).collect();
        assert_eq!(tail[0], &Event::MessageStop { stop_reason: "tool_use".into() });
        assert!(tail.contains(&&Event::ToolCallEnd { index: 0 }) && tail.contains(&&Event::ToolCallEnd { index: 1 }));
    }

    #[test]
    fn an_error_chunk_and_http_statuses() {
        let (events, _) =
            decode("data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"requests\",\"code\":429}}\n\n");
        assert_eq!(events, vec![Event::Error { kind: ErrorKind::RateLimited, message: "Rate limit reached".into() }]);
        assert_eq!(error_kind(529), ErrorKind::Overloaded);
        assert_eq!(error_kind(401), ErrorKind::Authentication);
        assert!(!ErrorKind::Authentication.retryable());
    }

    #[test]
    fn request_body_for_compatible_servers() {
        let request = Request {
            model: "llama3.1".into(),
            system: "You are baaaht.".into(),
            messages: vec![
                Message { role: Role::User, content: vec![Block::Text("weather?".into())] },
                Message {
                    role: Role::Assistant,
                    content: vec![Block::ToolUse {
                        id: "c1".into(),
                        name: "get_weather".into(),
                        input: json!({"location": "Paris"}),
                    }],
                },
                Message {
                    role: Role::User,
                    content: vec![Block::ToolResult {
                        tool_use_id: "c1".into(),
                        content: "sunny".into(),
                        is_error: false,
                    }],
                },
            ],
            tools: vec![Tool {
                name: "get_weather".into(),
                description: "Weather".into(),
                parameters: json!({"type": "object"}),
            }],
            max_tokens: Some(100_000),
            ..Request::default()
        };
        let body = request_body(&request, Some(16_384));
        assert_eq!(body["max_tokens"], 16_384);
        // A request that asks for nothing still gets the provider's cap, and one without a
        // cap what it asked.
        assert_eq!(request_body(&Request { max_tokens: None, ..request.clone() }, Some(250))["max_tokens"], 250);
        assert!(request_body(&Request { max_tokens: None, ..request.clone() }, None).get("max_tokens").is_none());
        assert_eq!(request_body(&Request { max_tokens: Some(90), ..request.clone() }, Some(250))["max_tokens"], 90);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["messages"][0], json!({"role": "system", "content": "You are baaaht."}));
        assert_eq!(body["messages"][1], json!({"role": "user", "content": "weather?"}));
        assert_eq!(body["messages"][2]["tool_calls"][0]["function"]["arguments"], "{\"location\":\"Paris\"}");
        assert_eq!(body["messages"][2]["content"], Value::Null);
        assert_eq!(body["messages"][3], json!({"role": "tool", "tool_call_id": "c1", "content": "sunny"}));
        assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
        assert!(body.get("temperature").is_none());
        // Text alone stays one string, its blocks a paragraph each (the time the agent adds
        // after a person's words among them).
        let two = Request {
            messages: vec![Message {
                role: Role::User,
                content: vec![Block::Text("weather?".into()), Block::Text("(It is noon.)".into())],
            }],
            ..request
        };
        assert_eq!(
            request_body(&two, None)["messages"][1],
            json!({"role": "user", "content": "weather?\n\n(It is noon.)"})
        );
    }

    #[test]
    fn cached_prompt_tokens_are_counted_apart_from_fresh_ones() {
        let stream = concat!(
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4.1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4.1\",\"choices\":[],\"usage\":{\"prompt_tokens\":2006,\"completion_tokens\":300,\"total_tokens\":2306,\"prompt_tokens_details\":{\"cached_tokens\":1920}}}\n\n",
            "data: [DONE]\n\n",
        );
        let (events, _) = decode(stream);
        let usage = Usage { input_tokens: 86, output_tokens: 300, cache_read_tokens: 1920, ..Usage::default() };
        assert_eq!(events.last(), Some(&Event::Usage(usage)));
        // DeepSeek's names for the same.
        let deepseek = concat!(
            "data: {\"id\":\"d1\",\"object\":\"chat.completion.chunk\",\"model\":\"deepseek-chat\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"id\":\"d1\",\"object\":\"chat.completion.chunk\",\"model\":\"deepseek-chat\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":5,\"total_tokens\":105,\"prompt_cache_hit_tokens\":64,\"prompt_cache_miss_tokens\":36}}\n\n",
            "data: [DONE]\n\n",
        );
        let usage = Usage { input_tokens: 36, output_tokens: 5, cache_read_tokens: 64, ..Usage::default() };
        assert_eq!(decode(deepseek).0.last(), Some(&Event::Usage(usage)));
    }
}
