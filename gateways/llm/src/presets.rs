//! The providers baaaht knows by name (spec §7.2, §16.2): their wire format, where they listen
//! and the most output tokens they accept. `providers.yaml` names a preset and adds a key; an
//! `api_base` or `max_output_tokens` there overrides the preset's.

use crate::provider::Wire;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    pub name: &'static str,
    pub wire: Wire,
    /// Empty where each account has its own.
    pub api_base: &'static str,
    /// Cloud providers refuse requests without a key; local servers take none (nor do the clouds
    /// that sign in otherwise).
    pub needs_key: bool,
    /// Requests asking for more output tokens are clamped to this; `None` leaves it to the server.
    pub max_output: Option<u32>,
}

const fn preset(name: &'static str, wire: Wire, api_base: &'static str, max_output: Option<u32>) -> Preset {
    let needs_key = !matches!(api_base.as_bytes(), [b'h', b't', b't', b'p', b':', ..]);
    Preset { name, wire, api_base, needs_key, max_output }
}

/// A cloud whose address is its account's (an Azure resource; Bedrock's and Vertex AI's follow
/// from a region) and whose credentials are its own kind, checked where they are configured.
const fn account(name: &'static str, wire: Wire, max_output: Option<u32>) -> Preset {
    Preset { name, wire, api_base: "", needs_key: false, max_output }
}

pub const PRESETS: &[Preset] = &[
    preset("anthropic", Wire::Anthropic, "https://api.anthropic.com", Some(crate::anthropic::MAX_OUTPUT_TOKENS)),
    preset("openai", Wire::OpenAi, "https://api.openai.com/v1", Some(32_768)),
    preset("openrouter", Wire::OpenAi, "https://openrouter.ai/api/v1", Some(32_768)),
    preset("ollama", Wire::OpenAi, "http://localhost:11434/v1", None),
    preset("lmstudio", Wire::OpenAi, "http://localhost:1234/v1", None),
    preset("vllm", Wire::OpenAi, "http://localhost:8000/v1", None),
    preset("groq", Wire::OpenAi, "https://api.groq.com/openai/v1", Some(32_768)),
    preset("deepseek", Wire::OpenAi, "https://api.deepseek.com/v1", Some(8_192)),
    preset("xai", Wire::OpenAi, "https://api.x.ai/v1", Some(32_768)),
    preset("mistral", Wire::OpenAi, "https://api.mistral.ai/v1", Some(32_768)),
    preset("google", Wire::Gemini, crate::provider::prepare::GEMINI_BASE, Some(65_536)),
    account("azure", Wire::Azure, Some(32_768)),
    account("bedrock", Wire::Bedrock, None),
    account("vertex", Wire::Vertex, Some(65_536)),
];

/// The preset named `name`, if baaaht has one.
pub fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|preset| preset.name == name)
}

impl Wire {
    pub fn as_str(self) -> &'static str {
        match self {
            Wire::Anthropic => "anthropic",
            Wire::OpenAi => "openai",
            Wire::Gemini => "gemini",
            Wire::Azure => "azure",
            Wire::Bedrock => "bedrock",
            Wire::Vertex => "vertex",
        }
    }

    pub fn parse(text: &str) -> Option<Wire> {
        match text {
            "anthropic" => Some(Wire::Anthropic),
            "openai" => Some(Wire::OpenAi),
            "gemini" => Some(Wire::Gemini),
            "azure" => Some(Wire::Azure),
            "bedrock" => Some(Wire::Bedrock),
            "vertex" => Some(Wire::Vertex),
            _ => None,
        }
    }
}

/// Models known not to call tools (spec §7.4: "required for agents"), by name prefix after
/// their provider, with one of the same provider that does — as their providers document it.
const WITHOUT_TOOLS: &[(&str, &[&str], &str)] = &[
    ("openai", &["o1-mini", "o1-preview", "gpt-3.5-turbo-instruct", "davinci", "babbage"], "gpt-4.1-mini"),
    ("azure", &["o1-mini", "o1-preview", "gpt-35-turbo-instruct"], "a deployment of gpt-4o or gpt-4.1"),
    (
        "bedrock",
        &[
            "amazon.titan-text",
            "meta.llama2",
            "meta.llama3-8b-instruct-v1",
            "meta.llama3-70b-instruct-v1",
            "mistral.mistral-7b-instruct",
            "mistral.mixtral-8x7b-instruct",
            "ai21.j2",
            "cohere.command-text",
            "cohere.command-light-text",
        ],
        "anthropic.claude-3-5-haiku-20241022-v1:0",
    ),
    ("google", &["gemini-2.0-flash-thinking", "gemma-"], "gemini-2.5-flash"),
    ("vertex", &["gemini-2.0-flash-thinking", "gemma"], "gemini-2.5-flash"),
    (
        "ollama",
        &["llama2", "codellama", "gemma", "llava", "phi3", "phi-2", "tinyllama", "orca-mini", "vicuna", "starcoder"],
        "qwen3",
    ),
];

/// Whether `provider`'s `model` is known not to call tools: a model of the same provider that
/// does, to name instead.
pub fn cannot_call_tools(provider: &str, model: &str) -> Option<&'static str> {
    let model = model.to_ascii_lowercase();
    WITHOUT_TOOLS
        .iter()
        .find(|(name, prefixes, _)| *name == provider && prefixes.iter().any(|prefix| model.starts_with(prefix)))
        .map(|(_, _, instead)| *instead)
}

/// Splits `{provider}/{model}`; a name without a provider goes to `default`. Only the first `/`
/// separates: OpenRouter's own model names contain one (`openrouter/anthropic/claude-…`).
pub fn split_model<'a>(name: &'a str, default: &'a str) -> (&'a str, &'a str) {
    match name.split_once('/') {
        Some((provider, model)) if !provider.is_empty() && !model.is_empty() => (provider, model),
        _ => (default, name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_the_providers_addresses() {
        let names: Vec<&str> = PRESETS.iter().map(|preset| preset.name).collect();
        assert_eq!(
            names,
            [
                "anthropic",
                "openai",
                "openrouter",
                "ollama",
                "lmstudio",
                "vllm",
                "groq",
                "deepseek",
                "xai",
                "mistral",
                "google",
                "azure",
                "bedrock",
                "vertex"
            ]
        );
        assert_eq!(find("groq").map(|p| p.api_base), Some("https://api.groq.com/openai/v1"));
        assert!(find("anthropic").is_some_and(|p| p.needs_key && p.wire == Wire::Anthropic));
        assert!(find("ollama").is_some_and(|p| !p.needs_key && p.max_output.is_none()));
        assert!(find("llama-server").is_none());
    }

    #[test]
    fn models_that_cannot_call_tools_are_known_with_one_that_can() {
        assert_eq!(cannot_call_tools("openai", "o1-mini-2024-09-12"), Some("gpt-4.1-mini"));
        assert_eq!(cannot_call_tools("ollama", "gemma3:4b"), Some("qwen3"));
        assert_eq!(
            cannot_call_tools("bedrock", "meta.llama3-8b-instruct-v1:0"),
            Some("anthropic.claude-3-5-haiku-20241022-v1:0")
        );
        assert_eq!(cannot_call_tools("bedrock", "meta.llama3-1-70b-instruct-v1:0"), None, "Llama 3.1 calls tools");
        assert_eq!(cannot_call_tools("openai", "gpt-4o"), None);
        assert_eq!(cannot_call_tools("anthropic", "claude-sonnet-4"), None);
    }

    #[test]
    fn model_names_split_at_the_first_slash() {
        assert_eq!(split_model("anthropic/claude-sonnet-4", "openai"), ("anthropic", "claude-sonnet-4"));
        assert_eq!(split_model("openrouter/meta/llama-3", "x"), ("openrouter", "meta/llama-3"));
        assert_eq!(split_model("gpt-4o", "openai"), ("openai", "gpt-4o"));
        assert_eq!(split_model("/gpt", "openai"), ("openai", "/gpt"));
    }
}
