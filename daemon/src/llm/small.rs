//! What a model with a small context window is sent: each tool's description cut to its first
//! sentence and its parameters' descriptions left out. A local model with a 4,096-token window
//! otherwise spends more than half of it on the tools before the person's first word. The cut
//! is the same for every request, so a local server's prompt cache (llama.cpp, Ollama) still
//! finds the same prefix from one request, and one conversation, to the next.

use baaaht_proto::v1;
use serde_json::Value;

/// The largest window whose requests are cut.
pub const SMALL_WINDOW: usize = 8192;

/// Cuts `request`'s tools for a model whose context window is `window` tokens, when it is small.
pub fn fit(request: &mut v1::LlmRequest, window: usize) {
    if window > SMALL_WINDOW {
        return;
    }
    for tool in &mut request.tools {
        tool.description = first_sentence(&tool.description);
        if let Ok(mut schema) = serde_json::from_str::<Value>(&tool.parameters_json) {
            drop_descriptions(&mut schema);
            tool.parameters_json = schema.to_string();
        }
    }
}

/// `text` up to the end of its first sentence (all of it when it has one sentence).
fn first_sentence(text: &str) -> String {
    let text = text.trim();
    match text.find(". ").or_else(|| text.find(".\n")) {
        Some(end) => text[..=end].to_string(),
        None => text.to_string(),
    }
}

/// Leaves out every description in a JSON schema (a string under `description`; a property
/// named `description` is a schema, an object, and stays).
fn drop_descriptions(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            if object.get("description").is_some_and(Value::is_string) {
                object.remove("description");
            }
            object.values_mut().for_each(drop_descriptions);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_descriptions),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> v1::LlmRequest {
        let parameters = serde_json::json!({"type": "object", "properties": {
            "task": {"type": "string", "description": "what to do, in full sentences"},
            "description": {"type": "string", "description": "a line about it"},
            "when": {"type": "array", "items": {"type": "string", "description": "a time"}},
        }});
        v1::LlmRequest {
            tools: vec![v1::ToolDefinition {
                name: "delegate".into(),
                description: "Hand a task to an agent. worker: searches; coder: code.".into(),
                parameters_json: parameters.to_string(),
            }],
            ..v1::LlmRequest::default()
        }
    }

    #[test]
    fn a_small_window_gets_the_first_sentence_and_no_parameter_descriptions() {
        let mut cut = request();
        fit(&mut cut, 4096);
        let tool = &cut.tools[0];
        assert_eq!(tool.description, "Hand a task to an agent.");
        let schema: Value = serde_json::from_str(&tool.parameters_json).expect("json");
        assert_eq!(schema["properties"]["task"], serde_json::json!({"type": "string"}));
        assert_eq!(
            schema["properties"]["description"],
            serde_json::json!({"type": "string"}),
            "a property so named stays"
        );
        assert_eq!(schema["properties"]["when"]["items"], serde_json::json!({"type": "string"}));
        let mut again = request();
        fit(&mut again, 4096);
        assert_eq!(again, cut, "the same cut every time: a prompt cache still matches");
    }

    #[test]
    fn a_large_window_gets_everything() {
        let mut whole = request();
        fit(&mut whole, 128_000);
        assert_eq!(whole, request());
    }
}
