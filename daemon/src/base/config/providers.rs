//! The schema of `providers.yaml` (spec §16.2): which LLM providers exist, how to reach them,
//! and where a request goes when its provider fails.
//!
//! Values such as `api_key: "${ANTHROPIC_API_KEY}"` are kept as written here; they are resolved
//! from the secrets store (then the environment) only inside the process that needs them.

use std::collections::BTreeMap;

use baaaht_llm::provider::Wire;
use serde::{Deserialize, Serialize};

/// Whether baaaht knows provider `name` (an adapter or an OpenAI-compatible preset).
pub fn is_built_in(name: &str) -> bool {
    baaaht_llm::presets::find(name).is_some()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ProvidersConfig {
    pub providers: Providers,
    /// Provider → the providers to try, in order, when it fails.
    pub fallback_chains: BTreeMap<String, Vec<String>>,
    /// `provider/model` → its price, for budgets; built in for the presets' common models.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, Price>,
    /// An alias → one model as several providers offer it (`provider/model` each): a request
    /// for the alias goes to the cheapest healthy one by the price table (spec §7.3).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, Vec<String>>,
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
            models: BTreeMap::new(),
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
    /// Gemini on the Generative Language API (a Google AI Studio key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub google: Option<ProviderEntry>,
    /// Azure OpenAI: a resource's deployments, named as models (`azure/{deployment}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub azure: Option<ProviderEntry>,
    /// Amazon Bedrock in a region.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bedrock: Option<ProviderEntry>,
    /// Google Vertex AI in a project and region: Gemini, and Anthropic's models.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vertex: Option<ProviderEntry>,
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
            ("google", &self.google),
            ("azure", &self.azure),
            ("bedrock", &self.bedrock),
            ("vertex", &self.vertex),
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
    /// Bedrock: the AWS region; Vertex AI: the Google Cloud location (`us-central1`, `global`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Vertex AI: the Google Cloud project.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Azure OpenAI: the `api-version` of its deployment URLs, or `v1` for its v1 API.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Vertex AI: a service account's JSON key file. Bedrock: an AWS credentials file (default
    /// `~/.aws/credentials`), read for `profile`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials_file: Option<String>,
    /// Bedrock: the profile of the AWS credentials file (`default` unless named).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Bedrock: an AWS access key, e.g. `${AWS_ACCESS_KEY_ID}`, with its secret and, for
    /// temporary credentials, its session token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_access_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_token: Option<String>,
    /// Vertex AI: the service account's JSON key as a secret, e.g. `${VERTEX_SERVICE_ACCOUNT}`
    /// (instead of `credentials_file`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    /// Azure OpenAI signed in with Microsoft Entra ID instead of `api_key`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entra: Option<EntraApp>,
}

/// An Entra ID app registration allowed to use an Azure OpenAI resource.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EntraApp {
    pub tenant_id: String,
    pub client_id: String,
    /// e.g. `${AZURE_CLIENT_SECRET}`.
    pub client_secret: String,
    /// Where to sign in; default `https://login.microsoftonline.com` (another for national clouds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority: Option<String>,
}

impl ProviderEntry {
    /// The first setting a provider of `wire` cannot go without that this entry leaves out
    /// (Bedrock's region; Vertex AI's project, region and key; Azure's endpoint and sign-in):
    /// `(the setting, or "" for the entry itself; what to write)`.
    pub fn missing(&self, name: &str, wire: Wire) -> Option<(&'static str, String)> {
        let absent = |value: &Option<String>| value.as_deref().is_none_or(|value| value.trim().is_empty());
        let not_set =
            |what: &'static str| Some((what, format!("providers.{name}.{what} is not set: {}", hint(wire, what))));
        let no_credentials =
            || Some(("", format!("providers.{name} has no credentials: {}", hint(wire, "credentials"))));
        match wire {
            Wire::Bedrock if absent(&self.region) => not_set("region"),
            Wire::Vertex if absent(&self.project) => not_set("project"),
            Wire::Vertex if absent(&self.region) => not_set("region"),
            Wire::Vertex if self.service_account.is_none() && absent(&self.credentials_file) => no_credentials(),
            Wire::Azure if absent(&self.api_base) => not_set("api_base"),
            Wire::Azure if self.api_key.is_none() && self.entra.is_none() => no_credentials(),
            _ => None,
        }
    }

    /// The key file a Bedrock or Vertex AI entry names (`credentials_file`), if it is not there
    /// for whoever asks, with what to write; `home` is their `$HOME`, for a file named `~/…`.
    /// Asked by `config check` only: the daemon may run as another user, and says so itself
    /// when it reads the file.
    pub fn key_file_missing(&self, name: &str, wire: Wire, home: Option<&str>) -> Option<String> {
        if !matches!(wire, Wire::Bedrock | Wire::Vertex) {
            return None;
        }
        let file = self.credentials_file.as_deref().map(str::trim).filter(|file| !file.is_empty())?;
        let path = expand_home(file, home);
        let what = if wire == Wire::Bedrock {
            "name the AWS credentials file that holds its profile, or leave it out for ~/.aws/credentials"
        } else {
            "name the service account's JSON key file (downloaded from the Google Cloud console)"
        };
        (!path.exists()).then(|| format!("providers.{name}.credentials_file {} does not exist: {what}", path.display()))
    }

    /// Every value of the entry that may name secrets as `${NAME}`.
    pub fn secret_references(&self) -> Vec<&str> {
        let entra = self.entra.as_ref().map(|app| app.client_secret.as_str());
        [
            self.api_key.as_deref(),
            self.api_base.as_deref(),
            self.access_key_id.as_deref(),
            self.secret_access_key.as_deref(),
            self.session_token.as_deref(),
            self.service_account.as_deref(),
            entra,
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// A setting whose shape a provider cannot use, and why: a region, project, tenant or API
    /// version that is not a plain name (each becomes part of a URL), an Entra authority that is
    /// not an https:// address of its own, a number that would mean nothing (a timeout or an
    /// answer's most of 0), `openai_compatible: false` (no provider speaks another API by it), a
    /// credentials file that is not a file, or two ways to sign in given at once.
    pub fn misshapen(&self, name: &str) -> Option<(&'static str, String)> {
        let plain = |value: &str, dots: bool| {
            !value.is_empty()
                && value.len() <= 128
                && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || (dots && c == '.'))
        };
        // A value is quoted short: a sentence is not the place for a pasted file.
        let quoted = |value: &str| match value.char_indices().nth(60) {
            Some((end, _)) => format!("{}…", &value[..end]),
            None => value.to_string(),
        };
        let tenant = self.entra.as_ref().map(|app| app.tenant_id.as_str());
        for (setting, value, dots) in [
            ("region", self.region.as_deref(), false),
            ("project", self.project.as_deref(), false),
            ("entra", tenant, false),
            ("api_version", self.api_version.as_deref(), true),
        ] {
            if let Some(value) = value.filter(|value| !plain(value, dots)) {
                let allowed = if dots { "letters, digits, `-`, `_` and `.`" } else { "letters, digits, `-` and `_`" };
                return Some((
                    setting,
                    format!("providers.{name}.{setting} `{}` is not a name: {allowed} only", quoted(value)),
                ));
            }
        }
        if let Some(authority) = self.entra.as_ref().and_then(|app| app.authority.as_deref()) {
            let problem = match baaaht_llm::provider::tokens::token_endpoint(authority) {
                Err(why) => Some(why),
                Ok(_) if authority.contains(['?', '#']) => Some("authority has a query or a fragment".to_string()),
                Ok(_) => None,
            };
            if let Some(why) = problem {
                return Some((
                    "entra",
                    format!(
                        "providers.{name}.entra.authority: its {why}; write the sign-in address alone, e.g. \
                         https://login.microsoftonline.com"
                    ),
                ));
            }
        }
        if self.timeout == Some(0) {
            return Some((
                "timeout",
                format!("providers.{name}.timeout is 0: write the seconds to wait for an answer's next bytes (at least 1; 120 if left out)"),
            ));
        }
        if self.max_output_tokens == Some(0) {
            return Some((
                "max_output_tokens",
                format!("providers.{name}.max_output_tokens is 0: write the most tokens an answer may have, or leave it out"),
            ));
        }
        if self.openai_compatible == Some(false) {
            return Some((
                "openai_compatible",
                format!(
                    "providers.{name}.openai_compatible: false changes nothing (a built-in provider speaks its own API, \
                     a custom one OpenAI's): remove it"
                ),
            ));
        }
        if let Some(file) = self.credentials_file.as_deref() {
            let path = std::path::Path::new(file);
            if path.is_absolute() && path.exists() && !path.is_file() {
                return Some((
                    "credentials_file",
                    format!("providers.{name}.credentials_file {file} is not a regular file: name the key file itself"),
                ));
            }
        }
        if self.secret_access_key.is_some() != self.access_key_id.is_some() {
            return Some((
                if self.access_key_id.is_some() { "access_key_id" } else { "secret_access_key" },
                format!(
                    "providers.{name} needs both access_key_id and secret_access_key (or neither, to read a profile of \
                     the AWS credentials file)"
                ),
            ));
        }
        if self.access_key_id.is_some() && (self.profile.is_some() || self.credentials_file.is_some()) {
            return Some((
                "profile",
                format!(
                    "providers.{name}: give access_key_id and secret_access_key, or profile/credentials_file, not both"
                ),
            ));
        }
        if self.session_token.is_some() && self.access_key_id.is_none() {
            return Some((
                "session_token",
                format!("providers.{name}.session_token goes with access_key_id and secret_access_key (a profile has its own)"),
            ));
        }
        if self.api_key.is_some() && self.entra.is_some() {
            return Some(("entra", format!("providers.{name}: give api_key or entra, not both")));
        }
        if self.service_account.is_some() && self.credentials_file.is_some() {
            return Some((
                "service_account",
                format!("providers.{name}: give service_account or credentials_file, not both"),
            ));
        }
        None
    }

    /// The settings given that a provider of `wire` does not take, by name.
    pub fn foreign_settings(&self, wire: baaaht_llm::provider::Wire) -> Vec<&'static str> {
        use baaaht_llm::provider::Wire;
        let given = [
            ("region", self.region.is_some(), &[Wire::Bedrock, Wire::Vertex][..]),
            ("project", self.project.is_some(), &[Wire::Vertex]),
            ("api_version", self.api_version.is_some(), &[Wire::Azure]),
            ("credentials_file", self.credentials_file.is_some(), &[Wire::Bedrock, Wire::Vertex]),
            ("profile", self.profile.is_some(), &[Wire::Bedrock]),
            ("access_key_id", self.access_key_id.is_some(), &[Wire::Bedrock]),
            ("secret_access_key", self.secret_access_key.is_some(), &[Wire::Bedrock]),
            ("session_token", self.session_token.is_some(), &[Wire::Bedrock]),
            ("service_account", self.service_account.is_some(), &[Wire::Vertex]),
            ("entra", self.entra.is_some(), &[Wire::Azure]),
            ("api_key", self.api_key.is_some(), &[Wire::Anthropic, Wire::OpenAi, Wire::Gemini, Wire::Azure]),
        ];
        given.into_iter().filter(|(_, set, takers)| *set && !takers.contains(&wire)).map(|(name, ..)| name).collect()
    }
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
            ..ProviderEntry::default()
        }
    }
}

/// A path of `providers.yaml` as read: `~/…` under `home` (`/root` when it is not known).
pub fn expand_home(path: &str, home: Option<&str>) -> std::path::PathBuf {
    match path.strip_prefix("~/") {
        Some(rest) => std::path::Path::new(home.unwrap_or("/root")).join(rest),
        None => std::path::PathBuf::from(path),
    }
}

/// What to write for a missing setting of a provider of `wire`.
fn hint(wire: Wire, what: &str) -> &'static str {
    match (wire, what) {
        (Wire::Bedrock, "region") => "write the AWS region its models are in, e.g. `region: us-east-1`",
        (Wire::Vertex, "project") => "write the Google Cloud project, e.g. `project: my-project`",
        (Wire::Vertex, "region") => "write the location of its models, e.g. `region: us-central1` (or `global`)",
        (Wire::Vertex, _) => {
            "set `credentials_file:` to a service account's JSON key file, or `service_account: \
             ${VERTEX_SERVICE_ACCOUNT}` with the key in the secrets store"
        }
        (Wire::Azure, "api_base") => {
            "write the resource's endpoint, e.g. `api_base: https://my-resource.openai.azure.com`"
        }
        (Wire::Azure, _) => {
            "set `api_key: ${AZURE_API_KEY}`, or `entra:` with tenant_id, client_id and client_secret of an app \
             registration"
        }
        _ => "see docs/providers.md",
    }
}
