//! What a model with a small context window is sent: each tool's description cut to its first
//! sentence and its parameters' descriptions left out. A local model with a 4,096-token window
//! otherwise spends more than half of it on the tools before the person's first word. The cut
//! is the same for every request, so a local server's prompt cache (llama.cpp, Ollama) still
//! finds the same prefix from one request, and one conversation, to the next.

use serde_json::Value;

/// The largest window whose requests are cut.
pub const SMALL_WINDOW: usize = 8192;

/// A tool as a request carries it: its description and its parameters' JSON schema.
pub struct ToolText<'a> {
    pub description: &'a mut String,
    pub parameters_json: &'a mut String,
}

/// Cuts `tools` for a model whose context window is `window` tokens, when it is small.
pub fn fit<'a>(tools: impl IntoIterator<Item = ToolText<'a>>, window: usize) {
    if window > SMALL_WINDOW {
        return;
    }
    for tool in tools {
        *tool.description = first_sentence(tool.description);
        if let Ok(mut schema) = serde_json::from_str::<Value>(tool.parameters_json) {
            drop_descriptions(&mut schema);
            *tool.parameters_json = schema.to_string();
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

    fn tool() -> (String, String) {
        let parameters = serde_json::json!({"type": "object", "properties": {
            "task": {"type": "string", "description": "what to do, in full sentences"},
            "description": {"type": "string", "description": "a line about it"},
            "when": {"type": "array", "items": {"type": "string", "description": "a time"}},
        }});
        ("Hand a task to an agent. worker: searches; coder: code.".into(), parameters.to_string())
    }

    fn cut(window: usize) -> (String, String) {
        let (mut description, mut parameters_json) = tool();
        fit([ToolText { description: &mut description, parameters_json: &mut parameters_json }], window);
        (description, parameters_json)
    }

    #[test]
    fn a_small_window_gets_the_first_sentence_and_no_parameter_descriptions() {
        let (description, parameters_json) = cut(4096);
        assert_eq!(description, "Hand a task to an agent.");
        let schema: Value = serde_json::from_str(&parameters_json).expect("json");
        assert_eq!(schema["properties"]["task"], serde_json::json!({"type": "string"}));
        assert_eq!(
            schema["properties"]["description"],
            serde_json::json!({"type": "string"}),
            "a property so named stays"
        );
        assert_eq!(schema["properties"]["when"]["items"], serde_json::json!({"type": "string"}));
        assert_eq!(cut(4096), (description, parameters_json), "the same cut every time: a prompt cache still matches");
    }

    #[test]
    fn a_large_window_gets_everything() {
        assert_eq!(cut(128_000), tool());
    }
}
