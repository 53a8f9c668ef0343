//! Configuration: `config.yaml`, `providers.yaml` and `mount-allowlist.json` (spec §16, §13.6),
//! every default built in, `BAAAHT__A__B=value` environment overrides (spec §16.3).
//!
//! Loading never binds, spawns or writes anything. Every mistake is a [`ConfigError`] that names
//! the file, line and column (or the environment variable) and, for a misspelt key or value,
//! the nearest valid one.

mod allowlist;
mod diagnostics;
pub mod exec;
mod overrides;
mod providers;
pub mod references;
mod schema;
mod security;
mod undo;
mod voice;

use std::path::{Path, PathBuf};

pub use allowlist::{
    forbidden_mount, AllowedMount, MountAllowlist, MountKind, MountMode, MountOwner, BUILT_IN_BLOCKED_PATTERNS,
    ENGINE_SOCKETS, RUNTIME_DIR,
};
pub use providers::{
    expand_home, is_built_in, CustomProvider, EntraApp, Price, ProviderEntry, Providers, ProvidersConfig,
};
pub use schema::*;
pub use security::*;
pub use undo::UndoConfig;
pub use voice::{SpokenAnswers, VoiceConfig};

use diagnostics::{find_yaml_key, nearest, strip_yaml_location, with_suggestion};

pub const CONFIG_FILE: &str = "config.yaml";
pub const PROVIDERS_FILE: &str = "providers.yaml";
pub const ALLOWLIST_FILE: &str = "mount-allowlist.json";

/// The configuration the daemon runs with, and where each part came from.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedConfig {
    /// The data dir these files configure.
    pub data_dir: PathBuf,
    pub config: Config,
    pub providers: ProvidersConfig,
    pub allowlist: MountAllowlist,
    pub sources: Sources,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Sources {
    pub config: Source,
    pub providers: Source,
    pub allowlist: Source,
    /// Names of the `BAAAHT__…` variables that were applied.
    pub env_overrides: Vec<String>,
    /// `config.yaml` as it was read, so that a check made after loading points at its line.
    pub config_text: Option<String>,
    /// `providers.yaml` as it was read, for the same.
    pub providers_text: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    BuiltIn,
    File(PathBuf),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::BuiltIn => f.write_str("built-in defaults"),
            Source::File(path) => write!(f, "{}", path.display()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}", path.display())]
    Parse { path: PathBuf, line: usize, column: usize, message: String },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error("environment variable {variable}: {message}")]
    Env { variable: String, message: String },
}

/// Where to look for the three files.
#[derive(Debug, Clone)]
pub struct ConfigPaths {
    /// `--config FILE`; when absent, `{config_dir}/config.yaml` if it exists.
    pub config_file: Option<PathBuf>,
    /// The data dir's `config/` folder.
    pub config_dir: PathBuf,
    /// The data dir itself (no container may mount it or anything in or above it).
    pub data_dir: PathBuf,
}

/// Loads and checks the configuration; `env` is the process environment (a parameter so tests
/// can pass their own).
pub fn load(paths: &ConfigPaths, env: impl IntoIterator<Item = (String, String)>) -> Result<LoadedConfig, ConfigError> {
    let (config_text, config_source) = match &paths.config_file {
        Some(path) => (Some(read(path)?), Source::File(path.clone())),
        None => read_optional(&paths.config_dir.join(CONFIG_FILE))?,
    };
    let config: Config = match (&config_text, &config_source) {
        (Some(text), Source::File(path)) => parse_yaml(path, text)?,
        _ => Config::default(),
    };
    let (config, env_overrides) = overrides::apply(config, env)?;

    let (providers_text, providers_source) = read_optional(&paths.config_dir.join(PROVIDERS_FILE))?;
    let providers: ProvidersConfig = match (&providers_text, &providers_source) {
        (Some(text), Source::File(path)) => parse_yaml(path, text)?,
        _ => ProvidersConfig::default(),
    };

    let (allowlist_text, allowlist_source) = read_optional(&paths.config_dir.join(ALLOWLIST_FILE))?;
    let allowlist: MountAllowlist = match (&allowlist_text, &allowlist_source) {
        (Some(text), Source::File(path)) => parse_json(path, text)?,
        _ => MountAllowlist::default(),
    };
    let allowlist = allowlist.with_built_in_patterns();

    let loaded = LoadedConfig {
        data_dir: paths.data_dir.clone(),
        config,
        providers,
        allowlist,
        sources: Sources {
            config: config_source,
            providers: providers_source,
            allowlist: allowlist_source,
            env_overrides,
            config_text: config_text.clone(),
            providers_text: providers_text.clone(),
        },
    };
    check_providers(&loaded, providers_text.as_deref())?;
    check_agents(&loaded, config_text.as_deref())?;
    check_limits(&loaded, config_text.as_deref())?;
    check_disk(&loaded, config_text.as_deref())?;
    check_undo(&loaded, config_text.as_deref())?;
    check_voice(&loaded, config_text.as_deref())?;
    check_isolation(&loaded, config_text.as_deref())?;
    check_pools(&loaded, config_text.as_deref())?;
    check_budgets(&loaded, config_text.as_deref())?;
    check_secrets(&loaded, config_text.as_deref())?;
    check_allowlist(&loaded)?;
    Ok(loaded)
}

/// One of the configuration's files in `config_dir` as it is written (none when there is none),
/// for setup to edit and write back; the daemon reads its configuration with [`load`].
pub fn text_of(config_dir: &Path, name: &str) -> Result<Option<String>, ConfigError> {
    read_optional(&config_dir.join(name)).map(|(text, _)| text)
}

/// `providers.yaml`'s `text` (from `path`) as its settings, or where it does not parse.
pub fn parse_providers(path: &Path, text: &str) -> Result<ProvidersConfig, ConfigError> {
    parse_yaml(path, text)
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })
}

fn read_optional(path: &Path) -> Result<(Option<String>, Source), ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok((Some(text), Source::File(path.to_path_buf()))),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok((None, Source::BuiltIn)),
        Err(source) => Err(ConfigError::Read { path: path.to_path_buf(), source }),
    }
}

fn parse_yaml<T: serde::de::DeserializeOwned + Default>(path: &Path, text: &str) -> Result<T, ConfigError> {
    // A file holding only comments means "all defaults".
    let only_comments = text.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#') || line == "---"
    });
    if only_comments {
        return Ok(T::default());
    }
    serde_yaml::from_str(text).map_err(|error| {
        let message = with_suggestion(strip_yaml_location(&error.to_string()));
        match error.location() {
            Some(location) => ConfigError::Parse {
                path: path.to_path_buf(),
                line: location.line(),
                column: location.column(),
                message,
            },
            None => ConfigError::Invalid { path: path.to_path_buf(), message },
        }
    })
}

fn parse_json<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    serde_json::from_str(text).map_err(|error| {
        let full = error.to_string();
        let message = match full.rfind(" at line ") {
            Some(index) => full[..index].to_string(),
            None => full,
        };
        ConfigError::Parse {
            path: path.to_path_buf(),
            line: error.line(),
            column: error.column(),
            message: with_suggestion(&message),
        }
    })
}

/// An error at a key found in `text` (if the file exists), else naming the file only.
impl LoadedConfig {
    /// The error for a setting of `config.yaml` at `key_path` that a check outside this module
    /// refuses (the egress rules check their own), pointing at its line when the file has it.
    pub fn invalid_setting(&self, key_path: &[&str], message: String) -> ConfigError {
        invalid_at(&self.sources.config, self.sources.config_text.as_deref(), key_path, message)
    }
}

fn invalid_at(source: &Source, text: Option<&str>, key_path: &[&str], message: String) -> ConfigError {
    let path = match source {
        Source::File(path) => path.clone(),
        Source::BuiltIn => PathBuf::from("(built-in defaults)"),
    };
    match text.and_then(|text| find_yaml_key(text, key_path)) {
        Some((line, column)) => ConfigError::Parse { path, line, column, message },
        None => ConfigError::Invalid { path, message },
    }
}

fn is_valid_provider_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn check_providers(loaded: &LoadedConfig, text: Option<&str>) -> Result<(), ConfigError> {
    let source = &loaded.sources.providers;
    let providers = &loaded.providers;
    for (index, custom) in providers.providers.custom.iter().enumerate() {
        if !is_valid_provider_name(&custom.name) {
            return Err(invalid_at(
                source,
                text,
                &["providers", "custom"],
                format!("providers.custom[{index}].name `{}`: use lowercase letters, digits and `-` only", custom.name),
            ));
        }
        if is_built_in(&custom.name) {
            return Err(invalid_at(
                source,
                text,
                &["providers", "custom"],
                format!(
                    "providers.custom[{index}].name `{}` is a built-in provider; configure it under providers.{} instead",
                    custom.name, custom.name
                ),
            ));
        }
    }
    let configured = providers.providers.configured();
    let names: Vec<&str> = configured.iter().map(|(name, _)| *name).collect();
    let defaults: Vec<&str> = configured.iter().filter(|(_, entry)| entry.default).map(|(name, _)| *name).collect();
    if defaults.len() > 1 {
        return Err(invalid_at(
            source,
            text,
            &["providers", defaults[1], "default"],
            format!("providers {} are all marked default: keep `default: true` on one", defaults.join(", ")),
        ));
    }
    for (name, entry) in &configured {
        if let Some((setting, message)) = entry.misshapen(name) {
            return Err(invalid_at(source, text, &["providers", name, setting], message));
        }
        let Some(wire) = provider_wire(name, entry) else { continue };
        if let Some((_, message)) = entry.missing(name, wire) {
            // A setting left out is told at its provider's line.
            return Err(invalid_at(source, text, &["providers", name], message));
        }
        if let Some(setting) = entry.foreign_settings(wire).first() {
            let takers = match *setting {
                "region" | "credentials_file" => "bedrock and vertex",
                "project" | "service_account" => "vertex",
                "api_version" | "entra" => "azure",
                "api_key" => "the providers that sign in with a key (not bedrock or vertex)",
                _ => "bedrock",
            };
            return Err(invalid_at(
                source,
                text,
                &["providers", name, setting],
                format!("providers.{name}.{setting}: only {takers} take `{setting}`; remove it from providers.{name}"),
            ));
        }
    }
    // A link may name a built-in provider not configured (yet): it is skipped until it is, as the
    // specification's own example does with `bedrock`.
    let known = |name: &str| names.contains(&name) || is_built_in(name);
    for (from, chain) in &providers.fallback_chains {
        // A link is a provider, or `provider/model` for a model of its own.
        let links = chain.iter().map(|link| link.split_once('/').map_or(link.as_str(), |(provider, _)| provider));
        for name in std::iter::once(from.as_str()).chain(links) {
            if !known(name) {
                let hint = match nearest(name, names.iter().copied()) {
                    Some(best) => format!("; did you mean `{best}`?"),
                    None => format!("; configured providers: {}", names.join(", ")),
                };
                return Err(invalid_at(
                    source,
                    text,
                    &["fallback_chains", from],
                    format!("fallback_chains.{from}: provider `{name}` is not configured under providers{hint}"),
                ));
            }
        }
    }
    for (alias, targets) in &providers.models {
        let problem = if !is_alias_name(alias) {
            Some(format!("models.{alias}: an alias is letters, digits, `.`, `_`, `-`, `:` or `@`, without a `/`"))
        } else if targets.is_empty() {
            Some(format!("models.{alias} names no model: list `provider/model`s that serve it"))
        } else {
            targets.iter().find_map(|target| match target.split_once('/') {
                _ if !is_model_id(target) => Some(format!(
                    "models.{alias}: `{target}` is not provider/model (letters, digits and `/-_.:@`, not ending in \
                     `.` or `..`)"
                )),
                Some((provider, model)) if !model.is_empty() && names.contains(&provider) => None,
                Some((provider, model)) if !model.is_empty() => Some(format!(
                    "models.{alias}: `{target}` names provider `{provider}`, which is not configured under providers \
                     (configured: {})",
                    names.join(", ")
                )),
                _ => Some(format!("models.{alias}: `{target}` is not provider/model")),
            })
        };
        if let Some(message) = problem {
            return Err(invalid_at(source, text, &["models", alias], message));
        }
    }
    Ok(())
}

/// The API a configured provider speaks (as the gateway will be told), if it is known.
/// `config check`'s look at the key files `providers.yaml` names (Bedrock's and Vertex AI's
/// `credentials_file`), as the person running it sees the disk (`home`: their `$HOME`). Not
/// part of loading: the daemon may run as another user, and tells a file it cannot read itself.
pub fn check_key_files(loaded: &LoadedConfig, home: Option<&str>) -> Result<(), ConfigError> {
    for (name, entry) in &loaded.providers.providers.configured() {
        let Some(wire) = provider_wire(name, entry) else { continue };
        if let Some(message) = entry.key_file_missing(name, wire, home) {
            let text = loaded.sources.providers_text.as_deref();
            return Err(invalid_at(&loaded.sources.providers, text, &["providers", name, "credentials_file"], message));
        }
    }
    Ok(())
}

fn provider_wire(name: &str, entry: &ProviderEntry) -> Option<baaaht_llm::provider::Wire> {
    match (baaaht_llm::presets::find(name), entry.openai_compatible) {
        (_, Some(true)) | (None, _) => Some(baaaht_llm::provider::Wire::OpenAi),
        (Some(preset), _) => Some(preset.wire),
    }
}

fn check_agents(loaded: &LoadedConfig, text: Option<&str>) -> Result<(), ConfigError> {
    let agents = &loaded.config.agents;
    let configured: Vec<&str> = loaded.providers.providers.configured().iter().map(|(name, _)| *name).collect();
    for (role, _) in agents.roles() {
        let settings = agents.settings(role);
        let provider = settings.model.provider();
        if settings.model.is_alias() && !loaded.providers.models.contains_key(&settings.model.0) {
            let key = match settings.source {
                ModelSource::Own => vec!["agents", role.as_str(), "model"],
                _ => vec!["agents", "default_model"],
            };
            let aliases: Vec<&str> = loaded.providers.models.keys().map(String::as_str).collect();
            let known = if aliases.is_empty() { "none".to_string() } else { aliases.join(", ") };
            return Err(invalid_at(
                &loaded.sources.config,
                text,
                &key,
                format!(
                    "model `{}` names no provider and is not an alias of providers.yaml's `models:` (aliases: {known}); \
                     write it as provider/model",
                    settings.model.0
                ),
            ));
        }
        // Every agent calls tools (spec §7.4): a model that cannot is refused before a turn fails on it.
        let served_by: Vec<String> = match loaded.providers.models.get(&settings.model.0) {
            Some(models) => models.clone(),
            None => vec![settings.model.0.clone()],
        };
        for model in &served_by {
            let Some((provider, bare)) = model.split_once('/') else { continue };
            if let Some(instead) = baaaht_llm::presets::cannot_call_tools(provider, bare) {
                let key = match settings.source {
                    ModelSource::Own => vec!["agents", role.as_str(), "model"],
                    _ => vec!["agents", "default_model"],
                };
                return Err(invalid_at(
                    &loaded.sources.config,
                    text,
                    &key,
                    format!(
                        "the {role}'s model `{model}` cannot call tools, which every agent needs: pick one that can, \
                         e.g. {provider}/{instead}"
                    ),
                ));
            }
        }
        let budget = settings.thinking_budget;
        if budget > 0 && (budget < 1024 || budget >= settings.max_output_tokens) {
            return Err(invalid_at(
                &loaded.sources.config,
                text,
                &["agents", role.as_str(), "thinking_budget"],
                format!(
                    "agents.{role}.thinking_budget {budget}: give 0 (no thinking) or at least 1024 tokens and fewer \
                     than its max_output_tokens ({}), which the thinking is part of",
                    settings.max_output_tokens
                ),
            ));
        }
        if !settings.model.is_alias() && !configured.contains(&provider) {
            let (key, keys): (String, Vec<&str>) = match settings.source {
                ModelSource::Own => (format!("agents.{role}.model"), vec!["agents", role.as_str(), "model"]),
                ModelSource::Default => ("agents.default_model".into(), vec!["agents", "default_model"]),
                ModelSource::BuiltIn => (format!("agents.{role}.model (built in)"), vec!["agents"]),
            };
            let hint = match settings.source {
                ModelSource::BuiltIn => {
                    "; set agents.default_model to a model of a configured provider (or run `baaahtd setup`)"
                }
                _ => "",
            };
            return Err(invalid_at(
                &loaded.sources.config,
                text,
                &keys,
                format!(
                    "{key} `{}` uses provider `{provider}`, which providers.yaml ({}) does not configure; \
                     add it there or pick a model of: {}{hint}",
                    settings.model.0,
                    loaded.sources.providers,
                    configured.join(", ")
                ),
            ));
        }
    }
    if let Err(error) = exec::compile(&loaded.config.tools.blocked_patterns) {
        return Err(invalid_at(
            &loaded.sources.config,
            text,
            &["tools", "blocked_patterns"],
            format!("tools.blocked_patterns: {error}"),
        ));
    }
    for user in &loaded.config.system.admin_users {
        if !crate::base::auth::is_valid_context_id(user) {
            return Err(invalid_at(
                &loaded.sources.config,
                text,
                &["system", "admin_users"],
                format!("system.admin_users: `{user}` is not a valid user id (letters, digits, `.`, `_`, `-`)"),
            ));
        }
    }
    Ok(())
}

/// Zero limits would make every container fail (or mean "unlimited" to an engine): refused.
fn check_limits(loaded: &LoadedConfig, text: Option<&str>) -> Result<(), ConfigError> {
    let container = &loaded.config.container;
    let zero = |limits: &ResourceLimitsOverride| -> Option<(&'static str, &'static str)> {
        [
            ("memory", limits.memory.is_some_and(|size| size.0 == 0), "a size such as 512m"),
            ("disk", limits.disk.is_some_and(|size| size.0 == 0), "a size such as 1g"),
            ("tmp", limits.tmp.is_some_and(|size| size.0 == 0), "a size such as 64m"),
            ("pids", limits.pids == Some(0), "a number such as 256"),
        ]
        .into_iter()
        .find_map(|(name, is_zero, hint)| is_zero.then_some((name, hint)))
    };
    let base = &container.resource_limits;
    let base = ResourceLimitsOverride {
        cpu: Some(base.cpu),
        memory: Some(base.memory),
        disk: Some(base.disk),
        pids: Some(base.pids),
        tmp: Some(base.tmp),
    };
    let mut found: Option<(Vec<String>, &str)> =
        zero(&base).map(|(name, hint)| (vec!["container".into(), "resource_limits".into(), name.into()], hint));
    for (role, limits) in &container.role_limits {
        if found.is_none() {
            found = zero(limits).map(|(name, hint)| {
                (vec!["container".into(), "role_limits".into(), role.as_str().into(), name.into()], hint)
            });
        }
    }
    if found.is_none() && container.max_concurrent == ContainerCap::Fixed(0) {
        found = Some((vec!["container".into(), "max_concurrent".into()], "a number such as 10, or auto"));
    }
    let Some((key, hint)) = found else { return Ok(()) };
    let keys: Vec<&str> = key.iter().map(String::as_str).collect();
    Err(invalid_at(
        &loaded.sources.config,
        text,
        &keys,
        format!("{}: 0 would let no container run (there is no \"unlimited\"); give {hint}", keys.join(".")),
    ))
}

/// `orchestrator.disk`: a warning before the critical mark, both within 1..=100, and a look at
/// least every second.
fn check_disk(loaded: &LoadedConfig, text: Option<&str>) -> Result<(), ConfigError> {
    let disk = &loaded.config.orchestrator.disk;
    let (key, message) = if !(1..=100).contains(&disk.critical_percent) {
        ("critical_percent", format!("{}: give a percent from 1 to 100 (95 if left out)", disk.critical_percent))
    } else if disk.warn_percent == 0 || disk.warn_percent >= disk.critical_percent {
        (
            "warn_percent",
            format!(
                "{}: give a percent below critical_percent ({}), so the admins are told before work is refused",
                disk.warn_percent, disk.critical_percent
            ),
        )
    } else if disk.check_interval < 1000 {
        ("check_interval", format!("{} ms: look at most once a second (30000 if left out)", disk.check_interval))
    } else {
        return Ok(());
    };
    let keys = ["orchestrator", "disk", key];
    Err(invalid_at(&loaded.sources.config, text, &keys, format!("orchestrator.disk.{key} {message}")))
}

/// `voice`: a language code, a plain voice name, and limits that can be kept.
fn check_voice(loaded: &LoadedConfig, text: Option<&str>) -> Result<(), ConfigError> {
    let Some((key, message)) = loaded.config.voice.problem() else { return Ok(()) };
    Err(invalid_at(&loaded.sources.config, text, &["voice", key], format!("voice.{key} {message}")))
}

/// `sessions.undo`: at least one turn kept, a store that holds at least one file, and files
/// looked at.
fn check_undo(loaded: &LoadedConfig, text: Option<&str>) -> Result<(), ConfigError> {
    let undo = &loaded.config.sessions.undo;
    let (key, message) = if undo.turns == 0 {
        ("turns", "0: keep at least one turn (50 if left out), or set enabled: false".to_string())
    } else if undo.max_file_size.0 == 0 || undo.max_size.0 < undo.max_file_size.0 {
        (
            "max_size",
            format!(
                "{} bytes is less than max_file_size ({} bytes): the store must hold at least one file",
                undo.max_size.0, undo.max_file_size.0
            ),
        )
    } else if undo.max_files == 0 {
        ("max_files", "0: look at least at one file (200000 if left out)".to_string())
    } else {
        return Ok(());
    };
    let keys = ["sessions", "undo", key];
    Err(invalid_at(&loaded.sources.config, text, &keys, format!("sessions.undo.{key} {message}")))
}

/// `container.isolation`: the LLM gateway and the chat gateways run on the host's kernel.
/// They run no code a model chose, and the LLM gateway needs the engine's network, which
/// the `runsc` runtime is registered without.
fn check_isolation(loaded: &LoadedConfig, text: Option<&str>) -> Result<(), ConfigError> {
    use crate::base::auth::Role;
    let Some((role, choice)) =
        loaded.config.container.isolation.iter().find(|(role, choice)| {
            matches!(role, Role::LlmGateway | Role::Gateway) && **choice != IsolationChoice::Runc
        })
    else {
        return Ok(());
    };
    let keys = ["container", "isolation", role.as_str()];
    Err(invalid_at(
        &loaded.sources.config,
        text,
        &keys,
        format!(
            "container.isolation.{}: {} is not offered for gateways (they run no code a model chose, and \
             the LLM gateway needs the network the runsc runtime is registered without); remove the key \
             or set it to runc",
            role.as_str(),
            choice.as_str()
        ),
    ))
}

/// `container.pools`: agents and tool containers are pooled, no gateway or MCP server (those
/// start once, named by configuration), and a floor is not above its ceiling.
fn check_pools(loaded: &LoadedConfig, text: Option<&str>) -> Result<(), ConfigError> {
    use crate::base::auth::Role;
    for (role, size) in &loaded.config.container.pools {
        let keys = ["container", "pools", role.as_str()];
        let message = if matches!(role, Role::LlmGateway | Role::Gateway | Role::Mcp | Role::Speech) {
            format!(
                "container.pools.{}: only agents and tool containers are pooled (assistant, worker, researcher, \
                 coder, memory, heartbeat, tool); gateways and MCP servers start once, as their configuration \
                 names them; remove the key",
                role.as_str()
            )
        } else if size.floor > size.ceiling {
            format!(
                "container.pools.{}: the floor ({}) is above the ceiling ({}); the pool keeps at least floor and at \
                 most ceiling containers ready",
                role.as_str(),
                size.floor,
                size.ceiling
            )
        } else {
            continue;
        };
        return Err(invalid_at(&loaded.sources.config, text, &keys, message));
    }
    Ok(())
}

/// `budgets`: a share of 1-100, no negative limit, overrides of `user:ID` or `group:ID`.
fn check_budgets(loaded: &LoadedConfig, text: Option<&str>) -> Result<(), ConfigError> {
    let budgets = &loaded.config.budgets;
    let at = |keys: &[&str], message: String| Err(invalid_at(&loaded.sources.config, text, keys, message));
    if !(1..=100).contains(&budgets.soft_percent) {
        return at(
            &["budgets", "soft_percent"],
            format!("budgets.soft_percent: {} is not a share of 1 to 100", budgets.soft_percent),
        );
    }
    let negative = |limits: &BudgetLimits| limits.daily_cost < 0.0 || limits.monthly_cost < 0.0;
    for (name, limits) in [("user", &budgets.user), ("group", &budgets.group)] {
        if negative(limits) {
            return at(&["budgets", name], format!("budgets.{name}: a cost limit cannot be negative (0 means none)"));
        }
    }
    for (key, custom) in &budgets.overrides {
        let valid = key
            .split_once(':')
            .is_some_and(|(kind, id)| matches!(kind, "user" | "group") && crate::base::auth::is_valid_context_id(id));
        if !valid {
            return at(
                &["budgets", "overrides"],
                format!("budgets.overrides: `{key}` names no context: write user:ID or group:ID"),
            );
        }
        if custom.daily_cost.is_some_and(|c| c < 0.0) || custom.monthly_cost.is_some_and(|c| c < 0.0) {
            return at(&["budgets", "overrides"], format!("budgets.overrides.{key}: a cost limit cannot be negative"));
        }
    }
    for (model, price) in &loaded.providers.prices {
        let negative = price.input < 0.0
            || price.output < 0.0
            || price.cache_read.is_some_and(|p| p < 0.0)
            || price.cache_write.is_some_and(|p| p < 0.0);
        if !model.contains('/') || negative {
            return Err(invalid_at(
                &loaded.sources.providers,
                None,
                &["prices"],
                format!("prices.{model}: name the model as provider/model, with prices of 0 or more (USD per million tokens)"),
            ));
        }
    }
    Ok(())
}

/// `secrets.user_usable`: secret names, none an LLM provider's key.
fn check_secrets(loaded: &LoadedConfig, text: Option<&str>) -> Result<(), ConfigError> {
    let provider_keys = references::provider_key_names(&loaded.providers);
    for (index, name) in loaded.config.secrets.user_usable.iter().enumerate() {
        let problem = if !references::is_valid_name(name) {
            Some(format!("`{name}` is not a secret name (letters, digits, `_`, `.`, `-`)"))
        } else if provider_keys.contains(name) {
            Some(format!("`{name}` is an LLM provider's key; it never leaves the daemon, so no user may name it"))
        } else {
            None
        };
        if let Some(problem) = problem {
            let message = format!("secrets.user_usable[{index}]: {problem}");
            return Err(invalid_at(&loaded.sources.config, text, &["secrets", "user_usable"], message));
        }
    }
    Ok(())
}

fn check_allowlist(loaded: &LoadedConfig) -> Result<(), ConfigError> {
    let path = match &loaded.sources.allowlist {
        Source::File(path) => path.clone(),
        Source::BuiltIn => return Ok(()),
    };
    for (index, mount) in loaded.allowlist.allowed_mounts.iter().enumerate() {
        let problem = if !mount.host_path.starts_with('/') {
            Some(format!("hostPath `{}` must be an absolute path", mount.host_path))
        } else if !mount.container_path.starts_with('/') {
            Some(format!("containerPath `{}` must be an absolute path", mount.container_path))
        } else if [&mount.host_path, &mount.container_path]
            .iter()
            .any(|p| p.split('/').any(|segment| segment == "..") || p.contains('\0'))
        {
            Some("paths may not contain `..` or null bytes".to_string())
        } else if mount.kind == MountKind::Reference && mount.options == MountMode::Rw {
            Some(
                "a `reference` folder is read-only: write `\"options\": \"ro\"`, or make it `\"type\": \"project\"` \
                 for a Coder to write in"
                    .to_string(),
            )
        } else {
            forbidden_mount(Path::new(&mount.host_path), &loaded.data_dir, &loaded.config.container.socket)
                .map(|why| format!("hostPath `{}` can never be mounted: {why}", mount.host_path))
        };
        if let Some(problem) = problem {
            return Err(ConfigError::Invalid { path, message: format!("allowedMounts[{index}]: {problem}") });
        }
    }
    Ok(())
}

/// The effective configuration as YAML, with secret values replaced by `<redacted>`.
/// References such as `${ANTHROPIC_API_KEY}` are shown as written: they hold no secret.
pub fn effective_yaml(loaded: &LoadedConfig) -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    out.push_str(&format!(
        "# config.yaml: {}\n# providers.yaml: {}\n# mount-allowlist.json: {}\n",
        loaded.sources.config, loaded.sources.providers, loaded.sources.allowlist
    ));
    if !loaded.sources.env_overrides.is_empty() {
        out.push_str(&format!("# environment overrides: {}\n", loaded.sources.env_overrides.join(", ")));
    }
    out.push_str("# effective models:");
    for (role, _) in loaded.config.agents.roles() {
        let settings = loaded.config.agents.settings(role);
        out.push_str(&format!(" {role} {} ({}),", settings.model.0, settings.source));
    }
    out.pop();
    out.push('\n');
    out.push_str(&serde_yaml::to_string(&effective_document(loaded)?)?);
    Ok(out)
}

/// The effective configuration (`config`, `providers`, `mount_allowlist`), secret values
/// replaced by `<redacted>`.
pub fn effective_document(loaded: &LoadedConfig) -> Result<serde_yaml::Value, serde_yaml::Error> {
    let mut document = serde_yaml::Mapping::new();
    document.insert("config".into(), serde_yaml::to_value(&loaded.config)?);
    document.insert("providers".into(), serde_yaml::to_value(&loaded.providers)?);
    document.insert("mount_allowlist".into(), serde_yaml::to_value(&loaded.allowlist)?);
    let mut document = serde_yaml::Value::Mapping(document);
    redact(&mut document, false);
    Ok(document)
}

fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["secret", "token", "api_key", "password", "passphrase", "service_account", "access_key"]
        .iter()
        .any(|word| key.contains(word))
}

fn redact(value: &mut serde_yaml::Value, secret: bool) {
    match value {
        serde_yaml::Value::Mapping(map) => {
            for (key, child) in map.iter_mut() {
                let child_secret = secret || key.as_str().is_some_and(is_secret_key);
                redact(child, child_secret);
            }
        }
        serde_yaml::Value::Sequence(items) => items.iter_mut().for_each(|item| redact(item, secret)),
        serde_yaml::Value::String(text) if secret => {
            let is_reference = text.starts_with("${") && text.ends_with('}');
            if !is_reference && !text.is_empty() {
                *text = "<redacted>".into();
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
