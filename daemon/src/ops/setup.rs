//! `baaahtd setup`: from nothing to a model provider the daemon can use, in one step. It picks a
//! provider (Anthropic, OpenAI, an OpenAI-compatible service, or a server on this machine —
//! Ollama on 127.0.0.1:11434 and llama.cpp on 127.0.0.1:8080 are looked for), stores its key in
//! the secrets store (and, if wanted, a passphrase file the daemon reads at start), checks with
//! one small request that the key and model answer, and writes `providers.yaml` and
//! `agents.default_model` in `config.yaml`, which every role uses unless it names its own.
//!
//! It never loses a configuration: the files it would change are shown as a diff and replaced
//! only when the user says so (`--yes` without a terminal), the old ones kept as
//! `{file}.before-setup`; everything is checked with `config::load` before anything is written.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use crate::base::config::{self, ConfigPaths, CustomProvider, ProviderEntry, ProvidersConfig};
use crate::base::datadir::DataDir;
use crate::base::state;
use crate::guard::secrets::{self, Passphrase, SecretStore};

/// Ollama's and llama.cpp's usual local addresses.
const OLLAMA: &str = "http://127.0.0.1:11434/v1";
const LLAMA_CPP: &str = "http://127.0.0.1:8080/v1";

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{0}")]
    Usage(String),
    #[error("the provider did not answer the check: {0}; fix it, or run again with --no-probe to save it anyway")]
    Probe(String),
    #[error("{file} would change (shown above) and was left as it is: run again with --yes to replace it (the old one is kept as {file}.before-setup)")]
    NotConfirmed { file: String },
    #[error("the configuration setup would write does not load: {0}")]
    Invalid(#[source] config::ConfigError),
    #[error(transparent)]
    Secrets(#[from] secrets::SecretsError),
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    State(#[from] state::StateError),
    #[error("cannot ask on the terminal")]
    Terminal(#[source] std::io::Error),
    #[error(transparent)]
    DataDir(#[from] crate::base::datadir::DataDirError),
    #[error("the assistant's model {model} cannot be used: {why}")]
    Unusable { model: String, why: String },
    #[error("the assistant's model {model} uses provider {provider}, which is not configured")]
    NoProvider { model: String, provider: String },
    #[error(
        "the assistant's model {model} is served at {api_base} and nothing answers there: start the model server \
         (e.g. `llama-server --port {port}` or `ollama serve`), or correct api_base in providers.yaml"
    )]
    NotServing { model: String, api_base: String, port: String },
}

/// What the command line asked for.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Ask on the terminal for whatever the flags leave open.
    pub interactive: bool,
    /// anthropic, openai, openrouter, groq, deepseek, xai, mistral, ollama, llamacpp or custom.
    pub provider: Option<String>,
    pub api_base: Option<String>,
    /// The model, without its provider (e.g. `gpt-4o-mini`).
    pub model: Option<String>,
    /// Read the API key from this environment variable (else asked on the terminal).
    pub api_key_env: Option<String>,
    /// Bedrock's region, Vertex AI's location.
    pub region: Option<String>,
    /// Vertex AI's project.
    pub project: Option<String>,
    /// Vertex AI's service account key file, or Bedrock's AWS credentials file.
    pub credentials_file: Option<String>,
    /// Bedrock's profile of the AWS credentials file.
    pub profile: Option<String>,
    /// Write `config/passphrase` (0600) so the daemon opens the secrets store at start.
    pub passphrase_file: bool,
    /// Skip the check request.
    pub no_probe: bool,
    /// Replace changed files without asking.
    pub yes: bool,
}

/// A provider as setup configures it.
#[derive(Debug, Clone, PartialEq)]
struct Choice {
    /// The name in providers.yaml and in model names (`{name}/{model}`).
    name: String,
    /// Whether it is a built-in provider (else a `custom` entry).
    built_in: bool,
    wire: baaaht_llm::provider::Wire,
    api_base: String,
    /// The secret holding its key, if it takes one.
    key_name: Option<String>,
    suggested_model: Option<&'static str>,
    /// A cloud account's settings (region, project, credentials file, profile).
    account: ProviderEntry,
}

fn choice(provider: &str, api_base: Option<&str>) -> Result<Choice, SetupError> {
    use baaaht_llm::provider::Wire;
    let suggested = |name: &str| match name {
        "anthropic" => Some("claude-sonnet-4-20250514"),
        "openai" => Some("gpt-4o-mini"),
        "openrouter" => Some("anthropic/claude-sonnet-4"),
        "groq" => Some("llama-3.3-70b-versatile"),
        "deepseek" => Some("deepseek-chat"),
        "xai" => Some("grok-3-mini"),
        "mistral" => Some("mistral-large-latest"),
        "google" => Some("gemini-2.5-flash"),
        _ => None,
    };
    let key_name = |name: &str| Some(format!("{}_API_KEY", name.to_ascii_uppercase()));
    match provider {
        "anthropic" | "openai" | "google" | "openrouter" | "groq" | "deepseek" | "xai" | "mistral" => {
            let preset = baaaht_llm::presets::find(provider)
                .ok_or_else(|| SetupError::Usage(format!("no preset for {provider}")))?;
            Ok(Choice {
                name: provider.into(),
                built_in: true,
                wire: preset.wire,
                api_base: api_base.unwrap_or(preset.api_base).trim_end_matches('/').into(),
                key_name: key_name(provider),
                suggested_model: suggested(provider),
                account: ProviderEntry::default(),
            })
        }
        "azure" => {
            let Some(base) = api_base.filter(|base| base.starts_with("https://")) else {
                return Err(SetupError::Usage(
                    "--provider azure needs --api-base, the resource's endpoint, e.g. https://my-resource.openai.azure.com"
                        .into(),
                ));
            };
            Ok(Choice {
                name: "azure".into(),
                built_in: true,
                wire: Wire::Azure,
                api_base: base.trim_end_matches('/').into(),
                key_name: key_name("azure"),
                suggested_model: None,
                account: ProviderEntry::default(),
            })
        }
        "bedrock" | "vertex" => Ok(Choice {
            name: provider.into(),
            built_in: true,
            wire: if provider == "bedrock" { Wire::Bedrock } else { Wire::Vertex },
            api_base: String::new(),
            key_name: None,
            suggested_model: Some(if provider == "bedrock" {
                "anthropic.claude-3-5-haiku-20241022-v1:0"
            } else {
                "gemini-2.5-flash"
            }),
            account: ProviderEntry::default(),
        }),
        "ollama" => Ok(Choice {
            name: "ollama".into(),
            built_in: true,
            wire: Wire::OpenAi,
            api_base: api_base.unwrap_or(OLLAMA).trim_end_matches('/').into(),
            key_name: None,
            suggested_model: None,
            account: ProviderEntry::default(),
        }),
        "llamacpp" | "custom" => {
            let api_base = match (provider, api_base) {
                (_, Some(base)) => base,
                ("llamacpp", None) => LLAMA_CPP,
                _ => {
                    return Err(SetupError::Usage(
                        "--provider custom needs --api-base, e.g. http://127.0.0.1:8000/v1".into(),
                    ))
                }
            };
            if !api_base.starts_with("http://") && !api_base.starts_with("https://") {
                return Err(SetupError::Usage(format!("--api-base `{api_base}` must start with http:// or https://")));
            }
            Ok(Choice {
                name: provider.into(),
                built_in: false,
                wire: Wire::OpenAi,
                api_base: api_base.trim_end_matches('/').into(),
                key_name: None,
                suggested_model: None,
                account: ProviderEntry::default(),
            })
        }
        other => Err(SetupError::Usage(format!(
            "unknown provider `{other}`: use anthropic, openai, google, azure, bedrock, vertex, openrouter, groq, \
             deepseek, xai, mistral, ollama, llamacpp or custom"
        ))),
    }
}

/// The models an OpenAI-compatible server lists at `{api_base}/models` (loopback servers
/// answer at once; anything else gets two seconds).
pub fn list_models(api_base: &str) -> Option<Vec<String>> {
    let rest = api_base.strip_prefix("http://")?;
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let (host, port) = authority.rsplit_once(':').map_or((authority, "80"), |(h, p)| (h, p));
    let port: u16 = port.parse().ok()?;
    let address = std::net::ToSocketAddrs::to_socket_addrs(&(host, port)).ok()?.next()?;
    let limit = if address.ip().is_loopback() { Duration::from_millis(500) } else { Duration::from_secs(2) };
    let mut stream = std::net::TcpStream::connect_timeout(&address, limit).ok()?;
    stream.set_read_timeout(Some(limit)).ok()?;
    // HTTP/1.0: the answer comes whole, never chunked.
    let request = format!(
        "GET /{}{}models HTTP/1.0\r\nHost: {authority}\r\nAccept: application/json\r\n\r\n",
        path,
        if path.is_empty() || path.ends_with('/') { "" } else { "/" }
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    std::io::Read::read_to_end(&mut stream, &mut answer).ok()?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n")?;
    if head.split_whitespace().nth(1).is_none_or(|status| status != "200") {
        return None;
    }
    let listed: serde_json::Value = serde_json::from_str(body).ok()?;
    let ids: Vec<String> =
        listed["data"].as_array()?.iter().filter_map(|model| model["id"].as_str().map(str::to_string)).collect();
    Some(ids)
}

/// Asks the provider for one short answer with `model`; the time it took.
async fn probe(choice: &Choice, model: &str, key: Option<&str>) -> Result<Duration, SetupError> {
    use baaaht_llm::model::{Block, Event, Message, Request, Role};
    let endpoint = baaaht_llm::provider::Endpoint {
        name: choice.name.clone(),
        wire: choice.wire,
        api_base: choice.api_base.clone(),
        api_key: key.map(str::to_string),
        timeout: Duration::from_secs(30),
        max_output: None,
        cloud: Default::default(),
        signer: None,
        route: baaaht_llm::provider::Route::Direct,
    };
    let request = Request {
        model: model.to_string(),
        messages: vec![Message { role: Role::User, content: vec![Block::Text("Reply with the word ok.".into())] }],
        max_tokens: Some(16),
        ..Request::default()
    };
    let started = Instant::now();
    let mut failed = None;
    let mut answered = false;
    let mut on_event = |event: Event| match event {
        Event::Error { message, .. } => failed = Some(message),
        Event::TextDelta { .. } | Event::MessageStop { .. } => answered = true,
        _ => {}
    };
    baaaht_llm::provider::stream(&endpoint, &request, &mut on_event)
        .await
        .map_err(|failure| SetupError::Probe(baaaht_proto::error_chain(&failure)))?;
    match (failed, answered) {
        (Some(message), _) => Err(SetupError::Probe(message)),
        (None, false) => Err(SetupError::Probe("the answer was empty".into())),
        (None, true) => Ok(started.elapsed()),
    }
}

/// `providers.yaml` with `choice` configured (and the default among the built-in ones); other
/// providers already there stay.
fn providers_yaml(existing: Option<&str>, choice: &Choice) -> Result<String, SetupError> {
    let mut providers: ProvidersConfig = match existing {
        Some(text) if !text.trim().is_empty() => config::parse_providers(Path::new(config::PROVIDERS_FILE), text)
            .map_err(|error| {
                SetupError::Usage(format!("{error}; fix providers.yaml or move it aside, then run setup again"))
            })?,
        _ => ProvidersConfig {
            providers: config::Providers::default(),
            fallback_chains: Default::default(),
            prices: Default::default(),
            models: Default::default(),
        },
    };
    let key = choice.key_name.as_ref().map(|name| format!("${{{name}}}"));
    if choice.built_in {
        let list = &mut providers.providers;
        for entry in [
            &mut list.anthropic,
            &mut list.openai,
            &mut list.openrouter,
            &mut list.ollama,
            &mut list.lmstudio,
            &mut list.vllm,
            &mut list.groq,
            &mut list.deepseek,
            &mut list.xai,
            &mut list.mistral,
            &mut list.google,
            &mut list.azure,
            &mut list.bedrock,
            &mut list.vertex,
        ]
        .into_iter()
        .flatten()
        {
            entry.default = false;
        }
        let preset_base = baaaht_llm::presets::find(&choice.name).map(|preset| preset.api_base.trim_end_matches('/'));
        let entry = ProviderEntry {
            api_key: key,
            api_base: (!choice.api_base.is_empty() && preset_base != Some(choice.api_base.as_str()))
                .then(|| choice.api_base.clone()),
            default: true,
            ..choice.account.clone()
        };
        let slot = match choice.name.as_str() {
            "anthropic" => &mut list.anthropic,
            "openai" => &mut list.openai,
            "openrouter" => &mut list.openrouter,
            "ollama" => &mut list.ollama,
            "groq" => &mut list.groq,
            "deepseek" => &mut list.deepseek,
            "xai" => &mut list.xai,
            "google" => &mut list.google,
            "azure" => &mut list.azure,
            "bedrock" => &mut list.bedrock,
            "vertex" => &mut list.vertex,
            _ => &mut list.mistral,
        };
        *slot = Some(entry);
    } else {
        providers.providers.custom.retain(|custom| custom.name != choice.name);
        providers.providers.custom.push(CustomProvider {
            name: choice.name.clone(),
            api_base: choice.api_base.clone(),
            api_key: key,
            openai_compatible: true,
            timeout: None,
            rate_limit: None,
            max_output_tokens: None,
            context_window: None,
            models: vec![],
        });
    }
    let body = serde_yaml::to_string(&providers).map_err(|error| SetupError::Usage(error.to_string()))?;
    Ok(format!(
        "# Model providers (spec §16.2), written by `baaahtd setup`. Keys are `${{NAME}}` references to the\n\
         # secrets store (`baaahtd secrets list`) or the environment; never write a key here.\n{body}"
    ))
}

/// `config.yaml` with `agents.default_model: model`, everything else (comments included) kept.
fn config_yaml(existing: Option<&str>, model: &str) -> Result<String, SetupError> {
    let line = format!("default_model: {model}");
    let Some(text) = existing.filter(|text| !text.trim().is_empty()) else {
        return Ok(format!(
            "# baaaht's configuration; every key and its default: config/config.yaml in the source.\n\
             agents:\n  # every role's model unless it names its own (baaahtd setup)\n  {line}\n"
        ));
    };
    let lines: Vec<&str> = text.lines().collect();
    let is_top_level = |l: &str| !l.is_empty() && !l.starts_with([' ', '\t', '#']) && l != "---";
    let Some(agents) = lines.iter().position(|l| l.starts_with("agents:")) else {
        let mut out = text.trim_end_matches('\n').to_string();
        out.push_str(&format!("\n\nagents:\n  {line}\n"));
        return Ok(out);
    };
    let after = lines[agents]["agents:".len()..].trim();
    if !after.is_empty() && !after.starts_with('#') && after != "{}" {
        return Err(SetupError::Usage(format!(
            "config.yaml writes `agents:` on one line; add `{line}` under it by hand"
        )));
    }
    let end = lines[agents + 1..].iter().position(|l| is_top_level(l)).map_or(lines.len(), |i| agents + 1 + i);
    let indent = lines[agents + 1..end]
        .iter()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map_or("  ".to_string(), |l| l[..l.len() - l.trim_start().len()].to_string());
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    if after == "{}" {
        out[agents] = "agents:".into();
    }
    let existing_line = (agents + 1..end).find(|&i| {
        let trimmed = lines[i].trim_start();
        trimmed.starts_with("default_model:") && lines[i].len() - trimmed.len() == indent.len()
    });
    match existing_line {
        // A comment after the old value stays.
        Some(i) => {
            let comment =
                lines[i].find(" #").map(|at| &lines[i][lines[i][..at].trim_end().len()..]).unwrap_or_default();
            out[i] = format!("{indent}{line}{comment}");
        }
        None => out.insert(agents + 1, format!("{indent}{line}")),
    }
    Ok(out.join("\n") + "\n")
}

/// A line diff of `old` → `new` (longest common subsequence), `-`/`+` marked, with a little
/// context; empty when they are equal.
pub fn diff(old: &str, new: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let mut marked = vec![];
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            marked.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            marked.push(('-', a[i]));
            i += 1;
        } else {
            marked.push(('+', b[j]));
            j += 1;
        }
    }
    let near_change =
        |k: usize| marked[k.saturating_sub(2)..(k + 3).min(marked.len())].iter().any(|(mark, _)| *mark != ' ');
    let mut out = String::new();
    let mut skipped = false;
    for (k, (mark, line)) in marked.iter().enumerate() {
        if near_change(k) {
            if skipped {
                out.push_str("  …\n");
                skipped = false;
            }
            out.push_str(&format!("{mark} {line}\n"));
        } else {
            skipped = true;
        }
    }
    if marked.iter().all(|(mark, _)| *mark == ' ') {
        return String::new();
    }
    out
}

/// The questions an interactive setup asks.
pub trait Asker {
    /// A line of text; `default` when the answer is empty.
    fn ask(&mut self, question: &str, default: &str) -> Result<String, SetupError>;
    /// A secret, not echoed.
    fn secret(&mut self, question: &str) -> Result<Zeroizing<String>, SetupError>;
    fn say(&mut self, text: &str);
}

/// Questions on the terminal: standard input for answers, stderr for everything said.
#[derive(Debug, Default)]
pub struct Terminal;

impl Asker for Terminal {
    fn ask(&mut self, question: &str, default: &str) -> Result<String, SetupError> {
        let shown = if default.is_empty() { String::new() } else { format!(" [{default}]") };
        eprint!("{question}{shown}: ");
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer).map_err(SetupError::Terminal)?;
        let answer = answer.trim();
        Ok(if answer.is_empty() { default.to_string() } else { answer.to_string() })
    }

    fn secret(&mut self, question: &str) -> Result<Zeroizing<String>, SetupError> {
        rpassword::prompt_password(format!("{question}: ")).map(Zeroizing::new).map_err(SetupError::Terminal)
    }

    fn say(&mut self, text: &str) {
        eprintln!("{text}");
    }
}

fn yes(answer: &str) -> bool {
    matches!(answer.to_ascii_lowercase().as_str(), "y" | "yes")
}

/// The provider to set up, asked when the flags do not say.
fn pick(options: &Options, asker: &mut dyn Asker) -> Result<Choice, SetupError> {
    if let Some(provider) = &options.provider {
        return choice(provider, options.api_base.as_deref());
    }
    if !options.interactive {
        return Err(SetupError::Usage(
            "without a terminal, say which provider: --provider anthropic|openai|google|azure|bedrock|vertex|\
             openrouter|groq|deepseek|xai|mistral|ollama|llamacpp|custom (custom and azure with --api-base URL; \
             bedrock with --region and --profile; vertex with --project, --region and --credentials-file)"
                .into(),
        ));
    }
    let ollama = list_models(OLLAMA);
    let llama_cpp = list_models(LLAMA_CPP);
    let found = |models: &Option<Vec<String>>, at: &str| match models {
        Some(models) if !models.is_empty() => format!("running at {at}: {}", models.join(", ")),
        Some(_) => format!("running at {at}, no model pulled yet"),
        None => "not running here".into(),
    };
    asker.say("baaaht needs a model provider. Which one?");
    asker.say("  1) Anthropic (Claude), with an API key");
    asker.say("  2) OpenAI, with an API key");
    asker.say("  3) another OpenAI-compatible service: openrouter, groq, deepseek, xai or mistral, with an API key");
    asker.say(&format!("  4) Ollama on this machine ({})", found(&ollama, "127.0.0.1:11434")));
    asker.say(&format!("  5) llama.cpp's server on this machine ({})", found(&llama_cpp, "127.0.0.1:8080")));
    asker.say("  6) another OpenAI-compatible server (you give its URL)");
    asker.say("  7) a cloud account: Google Gemini (a key), Azure OpenAI, Amazon Bedrock or Google Vertex AI");
    let default = if ollama.is_some() {
        "4"
    } else if llama_cpp.is_some() {
        "5"
    } else {
        "1"
    };
    loop {
        let picked = match asker.ask("choice", default)?.as_str() {
            "1" => choice("anthropic", None),
            "2" => choice("openai", None),
            "3" => {
                let name = asker.ask("which service (openrouter, groq, deepseek, xai, mistral)", "openrouter")?;
                choice(&name, None)
            }
            "4" => choice("ollama", None),
            "5" => choice("llamacpp", None),
            "6" => {
                let base = asker.ask("its API address, e.g. http://192.168.1.20:8000/v1", "")?;
                choice("custom", Some(&base))
            }
            "7" => {
                let name = asker.ask("which (google, azure, bedrock, vertex)", "google")?;
                let base = if name == "azure" {
                    Some(asker.ask("the resource's endpoint, e.g. https://my-resource.openai.azure.com", "")?)
                } else {
                    None
                };
                choice(&name, base.as_deref())
            }
            other => Err(SetupError::Usage(format!("`{other}` is not one of 1-7"))),
        };
        match picked {
            Ok(choice) => return Ok(choice),
            Err(error) => asker.say(&format!("{error}; try again")),
        }
    }
}

/// What a cloud account needs besides a key: Bedrock's region and profile (of an AWS
/// credentials file), Vertex AI's project, region and service account key file.
fn account(choice: &Choice, options: &Options, asker: &mut dyn Asker) -> Result<ProviderEntry, SetupError> {
    let mut given = |value: &Option<String>, question: &str, default: &str, flag: &str| -> Result<String, SetupError> {
        match (value, options.interactive) {
            (Some(value), _) => Ok(value.clone()),
            (None, true) => asker.ask(question, default),
            (None, false) if !default.is_empty() => Ok(default.to_string()),
            (None, false) => Err(SetupError::Usage(format!("--provider {} needs {flag}", choice.name))),
        }
    };
    Ok(match choice.name.as_str() {
        "bedrock" => ProviderEntry {
            region: Some(given(&options.region, "AWS region", "us-east-1", "--region")?),
            profile: Some(given(&options.profile, "profile of ~/.aws/credentials", "default", "--profile")?),
            credentials_file: options.credentials_file.clone(),
            ..ProviderEntry::default()
        },
        "vertex" => ProviderEntry {
            project: Some(given(&options.project, "Google Cloud project", "", "--project")?),
            region: Some(given(&options.region, "location of its models", "us-central1", "--region")?),
            credentials_file: Some(given(
                &options.credentials_file,
                "the service account's JSON key file",
                "",
                "--credentials-file",
            )?),
            ..ProviderEntry::default()
        },
        _ => ProviderEntry::default(),
    })
}

/// What setup did, for the closing lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub model: String,
    pub written: Vec<PathBuf>,
    pub probe: Option<Duration>,
}

/// Runs setup on `data_dir` (the caller runs it inside a tokio runtime).
pub async fn run(data_dir: &DataDir, options: &Options, asker: &mut dyn Asker) -> Result<Report, SetupError> {
    let config_dir = data_dir.config_dir();
    let mut choice = pick(options, asker)?;
    choice.account = account(&choice, options, asker)?;
    // The key, if the provider takes one (a custom server may take one or none).
    let key: Option<Zeroizing<String>> = match (&options.api_key_env, &choice.key_name) {
        (Some(variable), _) => Some(Zeroizing::new(std::env::var(variable).map_err(|_unset| {
            SetupError::Usage(format!("--api-key-env {variable}: the environment has no {variable}"))
        })?)),
        (None, Some(name)) if options.interactive => Some(asker.secret(&format!("{name} (not shown)"))?),
        (None, Some(name)) => {
            return Err(SetupError::Usage(format!(
                "{} needs an API key: pass --api-key-env VARIABLE naming the environment variable that holds it \
                 (e.g. --api-key-env {name})",
                choice.name
            )))
        }
        (None, None) if options.interactive && choice.name == "custom" => {
            Some(asker.secret("its API key (empty if it takes none)")?).filter(|key| !key.is_empty())
        }
        (None, None) => None,
    };
    let key = key.filter(|key| !key.trim().is_empty());
    let choice = Choice {
        key_name: match (&choice.key_name, &key) {
            (Some(name), _) => Some(name.clone()),
            (None, Some(_)) => Some(format!("{}_API_KEY", choice.name.to_ascii_uppercase())),
            (None, None) => None,
        },
        ..choice
    };
    // The model: named, else the server's first, else the provider's usual one.
    let listed = if choice.wire == baaaht_llm::provider::Wire::OpenAi && choice.api_base.starts_with("http://") {
        list_models(&choice.api_base).unwrap_or_default()
    } else {
        vec![]
    };
    let suggested = listed.first().map(String::as_str).or(choice.suggested_model).unwrap_or_default().to_string();
    let model = match (&options.model, options.interactive) {
        (Some(model), _) => model.clone(),
        (None, true) => asker.ask(&format!("model of {}", choice.name), &suggested)?,
        (None, false) if !suggested.is_empty() => suggested,
        (None, false) => {
            return Err(SetupError::Usage(format!(
                "{} lists no model at {}/models: name one with --model",
                choice.name, choice.api_base
            )))
        }
    };
    if model.trim().is_empty() {
        return Err(SetupError::Usage("no model named: give one with --model".into()));
    }
    let full_model = format!("{}/{model}", choice.name);

    // Bedrock and Vertex AI sign in with their files: checked by the configuration check below
    // and when the daemon reads them (`baaahtd setup --check`).
    let probed = if options.no_probe
        || matches!(choice.wire, baaaht_llm::provider::Wire::Bedrock | baaaht_llm::provider::Wire::Vertex)
    {
        None
    } else {
        asker.say(&format!("checking {full_model} at {} …", choice.api_base));
        match probe(&choice, &model, key.as_deref().map(String::as_str)).await {
            Ok(took) => {
                asker.say(&format!("{full_model} answered in {} ms", took.as_millis()));
                Some(took)
            }
            Err(error) if options.interactive => {
                asker.say(&error.to_string());
                if !yes(&asker.ask("save it anyway? (y/N)", "")?) {
                    return Err(error);
                }
                None
            }
            Err(error) => return Err(error),
        }
    };

    // The data dir as the daemon makes it (0700: it will hold secrets), before anything in it.
    data_dir.create_layout()?;
    // The files, checked together before anything is written.
    let providers_path = config_dir.join(config::PROVIDERS_FILE);
    let config_path = config_dir.join(config::CONFIG_FILE);
    let read = |name: &str| config::text_of(&config_dir, name).map_err(SetupError::Invalid);
    let (old_providers, old_config) = (read(config::PROVIDERS_FILE)?, read(config::CONFIG_FILE)?);
    let new_providers = providers_yaml(old_providers.as_deref(), &choice)?;
    let new_config = config_yaml(old_config.as_deref(), &full_model)?;
    let gateway_mode = check_loads(data_dir, &new_providers, &new_config)?;
    if let Some(relayed) = relayed_from(gateway_mode, &choice.api_base) {
        asker.say(&relayed);
    }
    let mut planned = vec![];
    for (path, old, new) in [(&providers_path, &old_providers, new_providers), (&config_path, &old_config, new_config)]
    {
        let file = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        match old {
            Some(old) if *old == new => continue,
            Some(old) => {
                asker.say(&format!("{} would change:\n{}", path.display(), diff(old, &new)));
                let confirmed =
                    options.yes || (options.interactive && yes(&asker.ask(&format!("replace {file}? (y/N)"), "")?));
                if !confirmed {
                    return Err(SetupError::NotConfirmed { file });
                }
            }
            None => {}
        }
        planned.push((path.clone(), old.clone(), new));
    }

    if let (Some(name), Some(key)) = (&choice.key_name, key) {
        let passphrase = passphrase(&config_dir, options, asker)?;
        state::private_dir(&config_dir).map_err(|source| SetupError::Write { path: config_dir.clone(), source })?;
        SecretStore::new(&config_dir).set(&passphrase, name, key)?;
        asker.say(&format!("{name} stored in {}", config_dir.join(secrets::SECRETS_FILE).display()));
    }
    let mut written = vec![];
    state::private_dir(&config_dir).map_err(|source| SetupError::Write { path: config_dir.clone(), source })?;
    for (path, old, new) in planned {
        if let Some(old) = old {
            let kept = path.with_file_name(format!(
                "{}.before-setup",
                path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default()
            ));
            state::write_atomic(&kept, old.as_bytes(), 0o600)?;
        }
        state::write_atomic(&path, new.as_bytes(), 0o600)?;
        written.push(path);
    }
    Ok(Report { model: full_model, written, probe: probed })
}

/// What a user is told of a provider on this host's loopback when the LLM gateway runs in
/// a container (where 127.0.0.1 is the container's own): the daemon relays to it.
fn relayed_from(mode: config::GatewayMode, api_base: &str) -> Option<String> {
    let (target, _) = crate::model::llm::relay::loopback_target(api_base)?;
    (mode == config::GatewayMode::Container).then(|| {
        format!(
            "the LLM gateway runs in a container (llm.gateway: container), where 127.0.0.1 is its own: \
             baaahtd relays its connections to {target} on this host"
        )
    })
}

/// Whether the Assistant's model can be used, for `baaahtd setup --check`: its provider's key
/// resolves (or it needs none), and a server on this host's loopback answers where the
/// gateway's connections go. `Ok` describes it; `Err` says why not and what to do.
pub fn check(loaded: &config::LoadedConfig, data_dir: &DataDir) -> Result<String, SetupError> {
    let secrets = crate::guard::secrets::open_unattended(&data_dir.config_dir());
    let settings = crate::model::llm::gateway_settings(loaded, secrets.as_ref(), |name| std::env::var(name).ok());
    let model = loaded.config.agents.settings(crate::base::auth::Role::Assistant).model;
    // An alias is checked at the provider it goes to first.
    let first = loaded.providers.models.get(&model.0).and_then(|models| models.first()).cloned();
    let provider = first.as_deref().unwrap_or(&model.0).split_once('/').map_or("", |(provider, _)| provider);
    let found = settings.config().providers.iter().find(|configured| configured.name == provider);
    let configured = match found {
        Some(configured) if configured.unusable.is_empty() => configured,
        Some(configured) => {
            return Err(SetupError::Unusable { model: model.0.clone(), why: configured.unusable.clone() })
        }
        None => return Err(SetupError::NoProvider { model: model.0.clone(), provider: provider.to_string() }),
    };
    let Some((target, plain)) = crate::model::llm::relay::loopback_target(&configured.api_base) else {
        return Ok(model.0.clone());
    };
    // A local server: asked for its models (free, and what the gateway's connections reach).
    if plain && configured.wire == "openai" && list_models(&configured.api_base).is_none() {
        return Err(SetupError::NotServing {
            model: model.0.clone(),
            api_base: configured.api_base.clone(),
            port: target.rsplit_once(':').map_or("8080", |(_, port)| port).to_string(),
        });
    }
    let relayed = relayed_from(loaded.config.llm.gateway, &configured.api_base);
    Ok(match relayed {
        Some(relayed) => format!("{} at {target} ({relayed})", model.0),
        None => format!("{} at {target}", model.0),
    })
}

/// Loads the configuration as it would be, from a scratch folder: where it runs the LLM
/// gateway.
fn check_loads(data_dir: &DataDir, providers: &str, config_text: &str) -> Result<config::GatewayMode, SetupError> {
    let scratch = tempfile_dir(&data_dir.config_dir())?;
    let write = |name: &str, text: &str| {
        std::fs::write(scratch.join(name), text)
            .map_err(|source| SetupError::Write { path: scratch.join(name), source })
    };
    let result = (|| {
        write(config::PROVIDERS_FILE, providers)?;
        write(config::CONFIG_FILE, config_text)?;
        let allowlist = config::text_of(&data_dir.config_dir(), config::ALLOWLIST_FILE).map_err(SetupError::Invalid)?;
        if let Some(allowlist) = allowlist {
            write(config::ALLOWLIST_FILE, &allowlist)?;
        }
        let paths =
            ConfigPaths { config_file: None, config_dir: scratch.clone(), data_dir: data_dir.root().to_path_buf() };
        let loaded = config::load(&paths, std::iter::empty()).map_err(SetupError::Invalid)?;
        crate::net::egress::filter::check_config(&loaded).map_err(SetupError::Invalid)?;
        crate::guard::telemetry::check_config(&loaded).map_err(SetupError::Invalid)?;
        Ok(loaded.config.llm.gateway)
    })();
    // silent-ok: a scratch folder left behind is harmless and named as such.
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn tempfile_dir(near: &Path) -> Result<PathBuf, SetupError> {
    let parent = near.parent().unwrap_or(near);
    state::private_dir(parent).map_err(|source| SetupError::Write { path: parent.to_path_buf(), source })?;
    let mut suffix = [0u8; 6];
    getrandom::fill(&mut suffix)
        .map_err(|error| SetupError::Write { path: parent.to_path_buf(), source: std::io::Error::other(error) })?;
    let suffix: String = suffix.iter().map(|b| format!("{b:02x}")).collect();
    let dir = parent.join(format!(".setup-check-{suffix}"));
    std::fs::create_dir(&dir).map_err(|source| SetupError::Write { path: dir.clone(), source })?;
    Ok(dir)
}

/// The secrets store's passphrase: from where the daemon reads it, else a new one in
/// `config/passphrase` (0600) when wanted, else asked.
fn passphrase(config_dir: &Path, options: &Options, asker: &mut dyn Asker) -> Result<Passphrase, SetupError> {
    let store = SecretStore::new(config_dir);
    if secrets::passphrase_file(config_dir).is_some() {
        return Ok(secrets::passphrase_from(config_dir, false)?);
    }
    let wanted = options.passphrase_file
        || (options.interactive && {
            asker.say(
                "The key is stored encrypted with a passphrase. The daemon can read the passphrase at start from\n\
                 config/passphrase (readable only by you): convenient on a home server, but anyone who can read\n\
                 your files then has the key too.",
            );
            let answer = asker.ask("write config/passphrase? (Y/n)", "")?;
            answer.is_empty() || yes(&answer)
        });
    if !wanted {
        if !options.interactive {
            return Err(SetupError::Usage(
                "storing the key needs the secrets store's passphrase: set BAAAHT_PASSPHRASE_FILE, or pass \
                 --passphrase-file to let setup write config/passphrase"
                    .into(),
            ));
        }
        return Ok(secrets::passphrase_from(config_dir, !store.exists())?);
    }
    if store.exists() {
        // The store has a passphrase already: it is asked once and kept.
        let passphrase = secrets::passphrase_from(config_dir, false)?;
        store.open(&passphrase)?;
        write_passphrase(config_dir, passphrase.expose())?;
        return Ok(passphrase);
    }
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).map_err(|error| SetupError::Write {
        path: config_dir.join(secrets::PASSPHRASE_FILE),
        source: std::io::Error::other(error),
    })?;
    let text: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    write_passphrase(config_dir, &text)?;
    Ok(Passphrase::new(text)?)
}

fn write_passphrase(config_dir: &Path, text: &str) -> Result<(), SetupError> {
    state::private_dir(config_dir).map_err(|source| SetupError::Write { path: config_dir.to_path_buf(), source })?;
    state::write_atomic(&config_dir.join(secrets::PASSPHRASE_FILE), text.as_bytes(), 0o600)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_yaml_gets_default_model_and_keeps_the_rest() {
        let fresh = config_yaml(None, "openai/gpt-4o-mini").expect("fresh");
        assert!(fresh.contains("\n  default_model: openai/gpt-4o-mini\n"), "{fresh}");
        let cases: &[(&str, &str)] = &[
            (
                "# mine\nsystem:\n  name: home\n",
                "# mine\nsystem:\n  name: home\n\nagents:\n  default_model: ollama/llama3.1\n",
            ),
            (
                "agents:\n    worker:\n        max_iterations: 3\nsessions:\n  idle_after: 60\n",
                "agents:\n    default_model: ollama/llama3.1\n    worker:\n        max_iterations: 3\nsessions:\n  idle_after: 60\n",
            ),
            (
                "agents:   # roles\n  default_model: anthropic/x   # old\n  coder:\n    default_model_note: 1\n",
                "agents:   # roles\n  default_model: ollama/llama3.1   # old\n  coder:\n    default_model_note: 1\n",
            ),
            ("agents: {}\n", "agents:\n  default_model: ollama/llama3.1\n"),
        ];
        for (before, after) in cases {
            assert_eq!(config_yaml(Some(before), "ollama/llama3.1").expect(before), *after, "{before}");
        }
        assert!(config_yaml(Some("agents: {coder: {}}\n"), "x/y").is_err());
    }

    #[test]
    fn providers_yaml_adds_the_choice_and_keeps_the_others() {
        let existing = "providers:\n  anthropic:\n    api_key: ${ANTHROPIC_API_KEY}\n    default: true\n";
        let openai = choice("openai", None).expect("openai");
        let text = providers_yaml(Some(existing), &openai).expect("yaml");
        let parsed: ProvidersConfig = serde_yaml::from_str(&text).expect("parses");
        assert!(parsed.providers.anthropic.as_ref().is_some_and(|entry| !entry.default));
        let entry = parsed.providers.openai.expect("openai");
        assert_eq!((entry.api_key.as_deref(), entry.default, entry.api_base), (Some("${OPENAI_API_KEY}"), true, None));
        let custom = choice("custom", Some("http://10.0.0.5:8000/v1/")).expect("custom");
        let parsed: ProvidersConfig =
            serde_yaml::from_str(&providers_yaml(None, &custom).expect("yaml")).expect("parses");
        assert_eq!(parsed.providers.custom[0].api_base, "http://10.0.0.5:8000/v1");
        assert!(choice("custom", None).is_err());
        assert!(choice("nonsense", None).is_err());
    }

    #[test]
    fn each_cloud_is_offered_with_the_fields_it_needs() {
        let options = Options {
            interactive: false,
            provider: Some("vertex".into()),
            api_base: None,
            model: None,
            api_key_env: None,
            region: Some("us-east5".into()),
            project: Some("my-project".into()),
            credentials_file: Some("/etc/baaaht/sa.json".into()),
            profile: None,
            passphrase_file: false,
            no_probe: true,
            yes: true,
        };
        struct Silent;
        impl Asker for Silent {
            fn ask(&mut self, question: &str, _: &str) -> Result<String, SetupError> {
                Err(SetupError::Usage(format!("asked {question}")))
            }
            fn secret(&mut self, question: &str) -> Result<Zeroizing<String>, SetupError> {
                Err(SetupError::Usage(format!("asked {question}")))
            }
            fn say(&mut self, _: &str) {}
        }
        let mut vertex = choice("vertex", None).expect("vertex");
        vertex.account = account(&vertex, &options, &mut Silent).expect("every field given");
        let parsed: ProvidersConfig =
            serde_yaml::from_str(&providers_yaml(None, &vertex).expect("yaml")).expect("parses");
        let entry = parsed.providers.vertex.expect("vertex");
        assert_eq!(
            (entry.project.as_deref(), entry.region.as_deref(), entry.credentials_file.as_deref(), entry.default),
            (Some("my-project"), Some("us-east5"), Some("/etc/baaaht/sa.json"), true)
        );
        let bedrock = choice("bedrock", None).expect("bedrock");
        let without = Options { region: None, profile: None, ..options };
        let entry = account(&bedrock, &without, &mut Silent).expect("defaults");
        assert_eq!((entry.region.as_deref(), entry.profile.as_deref()), (Some("us-east-1"), Some("default")));
        let vertex = choice("vertex", None).expect("vertex");
        let error = account(&vertex, &Options { project: None, ..without }, &mut Silent).expect_err("no project");
        assert!(error.to_string().contains("--provider vertex needs --project"), "{error}");
        assert!(choice("azure", None).is_err_and(|error| error.to_string().contains("the resource's endpoint")));
        assert_eq!(choice("google", None).expect("google").key_name.as_deref(), Some("GOOGLE_API_KEY"));
    }

    #[test]
    fn diffs_show_what_changes() {
        assert_eq!(diff("a\nb\n", "a\nb\n"), "");
        assert_eq!(diff("a\nb\nc\n", "a\nx\nc\n"), "  a\n- b\n+ x\n  c\n");
    }
}
