//! The schema of `providers.yaml` (spec §16.2): which LLM providers exist, how to reach them,
//! and where a request goes when its provider fails.
//!
//! Values such as `api_key: "${ANTHROPIC_API_KEY}"` are kept as written here; they are resolved
//! from the secrets store (then the environment) only inside the process that needs them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Providers with a built-in adapter or an OpenAI-compatible preset.
pub const BUILT_IN_PROVIDERS: &[&str] =
    &["anthropic", "openai", "openrouter", "ollama", "lmstudio", "vllm", "groq", "deepseek", "xai", "mistral"];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ProvidersConfig {
    pub providers: Providers,
    /// Provider → the providers to try, in order, when it fails.
    pub fallback_chains: BTreeMap<String, Vec<String>>,
    /// `provider/model` → its price, for budgets; built in for the presets' common models.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, Price>,
}

/// What a model costs, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Cached input read (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// Cached input written (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

impl Default for ProvidersConfig {
    fn default() -> Self {
        let keyed =
            |variable: &str| ProviderEntry { api_key: Some(format!("${{{variable}}}")), ..ProviderEntry::default() };
        ProvidersConfig {
            providers: Providers {
                anthropic: Some(ProviderEntry { default: true, ..keyed("ANTHROPIC_API_KEY") }),
                openai: Some(keyed("OPENAI_API_KEY")),
                ..Providers::default()
            },
            fallback_chains: BTreeMap::new(),
            prices: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Providers {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anthropic: Option<ProviderEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub openai: Option<ProviderEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub openrouter: Option<ProviderEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ollama: Option<ProviderEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lmstudio: Option<ProviderEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vllm: Option<ProviderEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groq: Option<ProviderEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deepseek: Option<ProviderEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xai: Option<ProviderEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mistral: Option<ProviderEntry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub custom: Vec<CustomProvider>,
}

impl Providers {
    /// Every configured provider by name, built-in ones first.
    pub fn configured(&self) -> Vec<(&str, ProviderEntry)> {
        let built_in = [
            ("anthropic", &self.anthropic),
            ("openai", &self.openai),
            ("openrouter", &self.openrouter),
            ("ollama", &self.ollama),
            ("lmstudio", &self.lmstudio),
            ("vllm", &self.vllm),
            ("groq", &self.groq),
            ("deepseek", &self.deepseek),
            ("xai", &self.xai),
            ("mistral", &self.mistral),
        ];
        let mut out: Vec<(&str, ProviderEntry)> =
            built_in.into_iter().filter_map(|(name, entry)| entry.clone().map(|entry| (name, entry))).collect();
        out.extend(self.custom.iter().map(|custom| (custom.name.as_str(), custom.entry())));
        out
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderEntry {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_base: Option<String>,
    /// The provider used for models named without a provider.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub openai_compatible: Option<bool>,
    /// Seconds before a request to this provider is abandoned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Requests per minute this deployment may send.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// The context window of its models in tokens, when neither its server (llama.cpp's
    /// `/props`) nor the model's name tells it right.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u32>,
    /// Models offered in the channels' model pickers besides the agents' own, as the provider
    /// names them (`claude-haiku-4-5`, not `anthropic/claude-haiku-4-5`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
}

/// An OpenAI-compatible endpoint of the user's own, e.g. llama.cpp's llama-server or vLLM.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CustomProvider {
    /// Lowercase letters, digits and `-`; models are then named `{name}/{model}`.
    pub name: String,
    pub api_base: String,
    /// Local servers usually need none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    #[serde(default = "yes")]
    pub openai_compatible: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u32>,
    /// As [`ProviderEntry::models`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
}

fn yes() -> bool {
    true
}

impl CustomProvider {
    pub fn entry(&self) -> ProviderEntry {
        ProviderEntry {
            api_key: self.api_key.clone(),
            api_base: Some(self.api_base.clone()),
            default: false,
            openai_compatible: Some(self.openai_compatible),
            timeout: self.timeout,
            rate_limit: self.rate_limit,
            max_output_tokens: self.max_output_tokens,
            context_window: self.context_window,
            models: self.models.clone(),
        }
    }
}
