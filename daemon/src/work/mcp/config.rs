//! `mcp.yaml`: the MCP servers of the whole system (`config/mcp.yaml`), of a user
//! (`users/{id}/mcp.yaml`) and of a group (`groups/{id}/mcp.yaml`). A context sees the
//! system's servers and its own; its own replace a system server of the same name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::base::auth::{Context, Role};
use crate::guard::secrets::SecretsError;
use crate::work::skills::{LayerError, Package};

/// One `mcp.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpFile {
    #[serde(default)]
    pub servers: BTreeMap<String, ServerConfig>,
}

/// How one stdio MCP server is run, and who may use it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The program that speaks MCP on its standard input and output, e.g. `mcp-server-time`.
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Packages installed into a cached layer on the base image (as skill addons are).
    #[serde(default)]
    pub install: Vec<Package>,
    /// An image to run instead of the base image with `install` (it must have the command).
    #[serde(default)]
    pub image: Option<String>,
    /// Environment of the server's container only; `${NAME}` takes a value from the secrets
    /// store.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Hosts (`example.com`, `api.example.com:8443`, `*.example.com`) the server may reach
    /// through the daemon's proxy; empty: no network at all.
    #[serde(default)]
    pub egress: Vec<String>,
    /// Roles whose agents are offered the server's tools.
    #[serde(default = "default_roles")]
    pub roles: Vec<String>,
    #[serde(default)]
    pub tools: ToolFilter,
    /// Seconds a server's container waits unused before it is stopped.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout: u64,
    /// Seconds one tool call may take.
    #[serde(default = "default_call_timeout")]
    pub timeout: u64,
    /// Folders of the host the server sees: each an entry of `mount-allowlist.json` as written
    /// there (never a folder below one), at the container path the allowlist gives it (where a
    /// Coder sees it), read-only unless `read_write` and the entry is a project marked `rw`.
    #[serde(default)]
    pub mounts: Vec<ServerMount>,
    /// A folder of its own that outlives its container: one per context and server, at
    /// [`STATE_MOUNT`] (named by `MCP_STATE_DIR`), read-write, capped at the MCP role's disk
    /// limit.
    #[serde(default)]
    pub state: bool,
    /// It sees the workspace of the session that calls it, at [`WORKSPACE_MOUNT`]
    /// (read-write, as the session's tools do): then one container runs per session.
    #[serde(default)]
    pub workspace: bool,
    /// Its answers are the operator's own data, not content from outside (DESIGN.md §10.3):
    /// reading them does not taint the turn. Off unless said.
    #[serde(default)]
    pub trusted: bool,
    /// Which of its tools only read and which act, over what the tools say of themselves
    /// ([`super::effects`]): a turn that read content from outside asks a person before an
    /// acting tool runs.
    #[serde(default)]
    pub effects: super::effects::Effects,
}

/// Where a `workspace: true` server sees the calling session's workspace.
pub const WORKSPACE_MOUNT: &str = "/workspace";

/// Where a server's own folder (`state: true`) is mounted, and the variable that names it.
pub const STATE_MOUNT: &str = "/state";
pub const STATE_ENV: &str = "MCP_STATE_DIR";

/// A host folder an MCP server sees.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerMount {
    pub host: String,
    #[serde(default)]
    pub read_write: bool,
}

impl ServerMount {
    /// The mount as the policy checks it (against the allowlist, as a Coder's).
    pub fn requested(&self) -> crate::sandbox::policy::RequestedMount {
        crate::sandbox::policy::RequestedMount { host: self.host.clone(), read_write: self.read_write }
    }
}

/// Which of a server's tools are offered: all but `deny`, or only `allow` when it is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFilter {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
}

impl ToolFilter {
    pub fn offers(&self, tool: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|name| name == tool)) && !self.deny.iter().any(|n| n == tool)
    }
}

fn default_roles() -> Vec<String> {
    vec!["worker".into(), "researcher".into(), "coder".into()]
}

fn default_idle_timeout() -> u64 {
    600
}

fn default_call_timeout() -> u64 {
    60
}

/// Where a server was configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    System,
    Context(Context),
}

/// A checked server as a context sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    pub name: String,
    pub scope: Scope,
    pub file: PathBuf,
    pub config: ServerConfig,
    pub roles: Vec<Role>,
}

impl Server {
    /// The name an agent calls one of this server's tools by.
    pub fn tool_name(&self, tool: &str) -> String {
        format!("mcp__{}__{tool}", self.name)
    }

    pub fn offered_to(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    /// The environment of the server's container: its `env`, each `${NAME}` handed out by
    /// `secrets` (a system server's file may name any secret but a provider's key, a context's
    /// own only those users may use), each read audited for `caller`. Why not, in a sentence.
    pub fn env(
        &self,
        secrets: &crate::guard::secrets::Handout,
        caller: &crate::base::auth::Caller,
        correlation_id: &str,
    ) -> Result<Vec<(String, String)>, McpEnvError> {
        let referrer = match self.scope {
            Scope::System => crate::guard::secrets::Referrer::System,
            Scope::Context(_) => crate::guard::secrets::Referrer::Context,
        };
        let asker = crate::guard::secrets::Asker { caller, correlation_id, consumer: ("mcp_server", &self.name) };
        let mut env = vec![];
        for (name, reference) in &self.config.env {
            let value = secrets.resolve(asker, referrer, reference).map_err(|error| McpEnvError {
                server: self.name.clone(),
                variable: name.clone(),
                error,
            })?;
            env.push((name.clone(), value.to_string()));
        }
        Ok(env)
    }

    /// Whether the server's `egress` names `host`:`port` (`*.example.com` covers the names
    /// under example.com, not example.com itself).
    pub fn egress_allows(&self, host: &str, port: u16) -> bool {
        // Checked when read (check_host): a host and maybe a port.
        crate::net::egress::filter::listed(self.config.egress.iter().map(String::as_str), host, port)
    }
}

/// A secret a server's `env` names that it cannot be given. The message holds the cause, as
/// the caller and the agent were always told it.
///
/// The message carries its cause's text, so the cause is no `source` (a chain would say it twice).
#[derive(Debug, thiserror::Error)]
#[error("MCP server `{server}`: env {variable}: {error}")]
pub struct McpEnvError {
    pub server: String,
    pub variable: String,
    pub error: SecretsError,
}

/// What is wrong with one server's settings in an `mcp.yaml`, said after its name.
#[derive(Debug, thiserror::Error)]
pub enum McpSettingsError {
    #[error("a server's name is 1-32 lowercase letters, digits or `-` (it becomes part of its tools' names)")]
    BadName,
    #[error("`command` is empty: name the program that speaks MCP on stdio, e.g. mcp-server-time")]
    NoCommand,
    #[error("an argument holds a NUL byte")]
    NulArgument,
    #[error("`image: {0}` is not an image reference")]
    BadImage(String),
    #[error(transparent)]
    Install(#[from] LayerError),
    #[error("env `{0}`: names are upper-case letters, digits and `_`")]
    BadEnvName(String),
    #[error("env `{0}` holds a NUL byte")]
    NulEnv(String),
    #[error("egress `{host}`: {why}")]
    BadHost { host: String, why: &'static str },
    #[error(
        "mounts: `{}` is not an absolute path without `..`: name a folder of mount-allowlist.json",
        .0.escape_debug()
    )]
    BadMount(String),
    /// `known`: the roles that may be named, listed.
    #[error("role `{role}` is not one of {known}")]
    BadRole { role: String, known: String },
    #[error("tools: `{0}` is not a tool name")]
    BadTool(String),
    #[error("`timeout` and `idle_timeout` are seconds, at least 1")]
    ZeroTimeout,
    #[error("effects: `{0}` is named under both `reads` and `acts`: name it under one")]
    EffectTwice(String),
}

/// What was wrong with an `mcp.yaml`, with the file and the server it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {what}", file.display())]
pub struct McpConfigError {
    pub file: PathBuf,
    pub what: String,
    pub kind: Problem,
}

/// What kind of problem an [`McpConfigError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Problem {
    /// What the file says (or would say) is wrong.
    #[default]
    Invalid,
    /// The server named is not in the file.
    NoServer,
    /// The file could not be read or written.
    Io,
}

/// Edits of mcp.yaml files, one at a time (each reads, changes and writes a whole file).
static EDITS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The longest tool name the model providers accept (`^[a-zA-Z0-9_-]{1,64}$`).
pub const MAX_TOOL_NAME: usize = 64;

/// Reads and checks `file`; a missing file has no servers.
pub fn read(file: &Path, scope: &Scope) -> Result<Vec<Server>, McpConfigError> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(error) => {
            return Err(McpConfigError {
                file: file.to_path_buf(),
                what: format!("cannot be read: {error}"),
                kind: Problem::Io,
            })
        }
    };
    parse(&text, file, scope)
}

/// Checks `text` as the `mcp.yaml` at `file`.
fn parse(text: &str, file: &Path, scope: &Scope) -> Result<Vec<Server>, McpConfigError> {
    let fail = |what: String| McpConfigError { file: file.to_path_buf(), what, kind: Problem::Invalid };
    if text.trim().is_empty() {
        return Ok(vec![]);
    }
    let parsed: McpFile = serde_yaml::from_str(text).map_err(|error| {
        fail(format!("{error} (see config/mcp.yaml for the form: servers: {{NAME: {{command: …, args: […]}}}})"))
    })?;
    parsed
        .servers
        .into_iter()
        .map(|(name, config)| {
            let roles = check(&name, &config).map_err(|what| fail(format!("server `{name}`: {what}")))?;
            // A user's or group's own server that sees the host's folders must not also
            // reach the network: what it reads could leave with it.
            let sees_files = !config.mounts.is_empty() || config.workspace;
            if matches!(scope, Scope::Context(_)) && sees_files && !config.egress.is_empty() {
                return Err(fail(format!(
                    "server `{name}`: a user's or group's own server may mount folders or reach the network \
                     (egress), not both; an admin can configure such a server in config/mcp.yaml"
                )));
            }
            Ok(Server { name, scope: scope.clone(), file: file.to_path_buf(), config, roles })
        })
        .collect()
}

/// The `mcp.yaml` of `scope` under `data_root`.
pub fn file_of(data_root: &Path, scope: &Scope) -> PathBuf {
    match scope {
        Scope::System => data_root.join("config/mcp.yaml"),
        Scope::Context(context) => {
            let kind = match context.kind {
                crate::base::auth::ContextKind::User => "users",
                crate::base::auth::ContextKind::Group => "groups",
            };
            data_root.join(kind).join(&context.id).join("mcp.yaml")
        }
    }
}

/// Adds or replaces the server `name` in `file` with `settings` (a YAML mapping); the whole
/// file is checked before it is written (atomically), and the other servers are kept.
pub fn put(file: &Path, scope: &Scope, name: &str, settings: &str) -> Result<Server, McpConfigError> {
    let fail = |what: String| McpConfigError { file: file.to_path_buf(), what, kind: Problem::Invalid };
    let settings: serde_yaml::Value =
        serde_yaml::from_str(settings).map_err(|error| fail(format!("server `{name}`: {error}")))?;
    if !settings.is_mapping() {
        return Err(fail(format!("server `{name}`: the settings are a mapping (command: …, args: […])")));
    }
    edit(file, scope, |servers| {
        servers.insert(serde_yaml::Value::String(name.into()), settings);
        Ok(())
    })?
    .into_iter()
    .find(|server| server.name == name)
    .ok_or_else(|| fail(format!("server `{name}` was not written")))
}

/// Removes the server `name` from `file`; the rest is kept.
pub fn remove(file: &Path, scope: &Scope, name: &str) -> Result<Vec<Server>, McpConfigError> {
    edit(file, scope, |servers| match servers.remove(serde_yaml::Value::String(name.into())) {
        Some(_) => Ok(()),
        None => Err(McpConfigError {
            file: file.to_path_buf(),
            what: format!("there is no server `{name}` here"),
            kind: Problem::NoServer,
        }),
    })
}

/// Changes the servers of `file` with `change` (whose error is the edit's), checking the file
/// before and after.
fn edit(
    file: &Path,
    scope: &Scope,
    change: impl FnOnce(&mut serde_yaml::Mapping) -> Result<(), McpConfigError>,
) -> Result<Vec<Server>, McpConfigError> {
    let fail = |what: String| McpConfigError { file: file.to_path_buf(), what, kind: Problem::Invalid };
    let io = |what: String| McpConfigError { file: file.to_path_buf(), what, kind: Problem::Io };
    let _one_at_a_time = EDITS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(io(format!("cannot be read: {error}"))),
    };
    // The file as it is must be sound: a change never writes over a mistake it cannot see.
    parse(&text, file, scope)?;
    let mut document: serde_yaml::Value = if text.trim().is_empty() {
        serde_yaml::Value::Mapping(serde_yaml::Mapping::new())
    } else {
        serde_yaml::from_str(&text).map_err(|error| fail(error.to_string()))?
    };
    let root = document.as_mapping_mut().ok_or_else(|| fail("is not a mapping".into()))?;
    let servers = root
        .entry(serde_yaml::Value::String("servers".into()))
        .or_insert_with(|| serde_yaml::Value::Mapping(serde_yaml::Mapping::new()));
    if servers.is_null() {
        *servers = serde_yaml::Value::Mapping(serde_yaml::Mapping::new());
    }
    let servers = servers.as_mapping_mut().ok_or_else(|| fail("`servers` is not a mapping".into()))?;
    change(servers)?;
    let written = serde_yaml::to_string(&document).map_err(|error| fail(error.to_string()))?;
    let checked = parse(&written, file, scope)?;
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|error| io(format!("cannot create its folder: {error}")))?;
    }
    crate::base::state::write_atomic(file, written.as_bytes(), 0o600).map_err(|error| io(error.to_string()))?;
    Ok(checked)
}

/// The servers `context` sees: the system's, then its own (which replace a system server of
/// the same name); and the files that could not be used, which are left out.
pub fn servers_for(data_root: &Path, context: &Context) -> (Vec<Server>, Vec<McpConfigError>) {
    let files = [Scope::System, Scope::Context(context.clone())].map(|scope| (file_of(data_root, &scope), scope));
    let mut found: BTreeMap<String, Server> = BTreeMap::new();
    let mut problems = vec![];
    for (file, scope) in files {
        match read(&file, &scope) {
            Ok(servers) => found.extend(servers.into_iter().map(|server| (server.name.clone(), server))),
            Err(error) => problems.push(error),
        }
    }
    (found.into_values().collect(), problems)
}

/// Checks one server's settings; its roles when they are all known.
fn check(name: &str, config: &ServerConfig) -> Result<Vec<Role>, McpSettingsError> {
    let name_ok = !name.is_empty()
        && name.len() <= 32
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-');
    if !name_ok {
        return Err(McpSettingsError::BadName);
    }
    if config.command.trim().is_empty() || config.command.contains('\0') {
        return Err(McpSettingsError::NoCommand);
    }
    if config.args.iter().any(|arg| arg.contains('\0')) {
        return Err(McpSettingsError::NulArgument);
    }
    if let Some(image) = &config.image {
        let image_ok = !image.is_empty()
            && !image.starts_with('-')
            && image.chars().all(|c| c.is_ascii_alphanumeric() || "._-/:@".contains(c));
        if !image_ok {
            return Err(McpSettingsError::BadImage(image.clone()));
        }
    }
    // The same checks as a skill's addons: only names that are package names reach a Dockerfile.
    crate::work::skills::layer("baaaht/base:latest", &config.install)?;
    for (key, value) in &config.env {
        let key_ok = key.bytes().next().is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
            && key.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !key_ok {
            return Err(McpSettingsError::BadEnvName(key.clone()));
        }
        if value.contains('\0') {
            return Err(McpSettingsError::NulEnv(key.clone()));
        }
    }
    for host in &config.egress {
        check_host(host).map_err(|why| McpSettingsError::BadHost { host: host.clone(), why })?;
    }
    for mount in &config.mounts {
        let path = Path::new(&mount.host);
        let plain = !mount.host.contains('\0')
            && path.is_absolute()
            && !path.components().any(|part| part == std::path::Component::ParentDir);
        if !plain {
            return Err(McpSettingsError::BadMount(mount.host.clone()));
        }
    }
    let mut roles = vec![];
    for role in &config.roles {
        // The roles that call tools (RequestToolExecution); the Assistant delegates instead.
        let callers = crate::base::auth::Operation::RequestToolExecution.container_roles();
        match Role::named(role).filter(|role| callers.contains(role)) {
            Some(found) => roles.push(found),
            None => {
                let known: Vec<&str> = callers.iter().map(|role| role.as_str()).collect();
                return Err(McpSettingsError::BadRole { role: role.clone(), known: known.join(", ") });
            }
        }
    }
    for tool in config.tools.allow.iter().chain(&config.tools.deny).chain(config.effects.named()) {
        let tool_ok = !tool.is_empty() && tool.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !tool_ok {
            return Err(McpSettingsError::BadTool(tool.clone()));
        }
    }
    if let Some(tool) = config.effects.named_twice() {
        return Err(McpSettingsError::EffectTwice(tool.to_string()));
    }
    if config.timeout == 0 || config.idle_timeout == 0 {
        return Err(McpSettingsError::ZeroTimeout);
    }
    Ok(roles)
}

/// `host`, `host:port` or `*.domain`: no scheme, path or address range.
fn check_host(entry: &str) -> Result<(), &'static str> {
    if entry.contains("://") || entry.contains('/') {
        return Err("write the host alone, e.g. api.example.com (no scheme, no path)");
    }
    let (host, port) =
        crate::net::egress::filter::split_host_port(entry).ok_or("the port is not a number from 1 to 65535")?;
    if port == Some(0) {
        return Err("the port is not a number from 1 to 65535");
    }
    let name = host.strip_prefix("*.").unwrap_or(host);
    let name_ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
        });
    if !name_ok {
        return Err("not a host name");
    }
    Ok(())
}

/// Why an entry written for `scope` is refused before it is kept (both checked again at each
/// start): a folder it mounts that the allowlist does not let in, or a secret its env names that
/// its file may not name.
#[derive(Debug, thiserror::Error)]
pub enum EntryRefused {
    #[error("mounts: {0}")]
    Mounts(#[source] crate::sandbox::policy::PolicyError),
    #[error("env {variable}: {why}")]
    Env { variable: String, why: String },
}

/// Checks an entry's `yaml` for `scope` as [`EntryRefused`] says; one that does not parse is
/// [`put`]'s to refuse, with where.
pub fn check_entry(
    yaml: &str,
    scope: &Scope,
    policy: &crate::sandbox::policy::Policy,
    rules: &crate::guard::secrets::Rules,
) -> Result<(), EntryRefused> {
    let Ok(server) = serde_yaml::from_str::<ServerConfig>(yaml) else { return Ok(()) };
    let mounts: Vec<_> = server.mounts.iter().map(ServerMount::requested).collect();
    let (context, referrer) = match scope {
        Scope::System => (None, crate::guard::secrets::Referrer::System),
        Scope::Context(context) => (Some(context), crate::guard::secrets::Referrer::Context),
    };
    policy.validate_entry_mounts(&mounts, context).map_err(EntryRefused::Mounts)?;
    for (variable, reference) in &server.env {
        for name in crate::guard::secrets::reference_names(reference) {
            rules
                .check(name, referrer)
                .map_err(|why| EntryRefused::Env { variable: variable.clone(), why: why.to_string() })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, relative: &str, text: &str) -> PathBuf {
        let path = dir.join(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write");
        path
    }

    /// The example in `config/mcp.yaml`, uncommented, is a file the daemon takes, with every
    /// setting it shows.
    #[test]
    fn the_example_in_config_mcp_yaml_is_taken() {
        let shipped = include_str!("../../../../config/mcp.yaml");
        let example: String = shipped
            .lines()
            .skip_while(|line| *line != "# servers:")
            .take_while(|line| line.starts_with('#'))
            .map(|line| format!("{}\n", line.strip_prefix("# ").unwrap_or("")))
            .collect();
        let servers = parse(&example, Path::new("mcp.yaml"), &Scope::System).expect("the example is taken");
        let everything = servers.iter().find(|server| server.name == "everything").expect("everything");
        assert_eq!(everything.config.effects.acts, ["sampleLLM"]);
        assert_eq!(everything.config.effects.default, Some(super::super::effects::Effect::Acts));
        assert_eq!(servers.len(), 2);
    }

    #[test]
    fn a_context_sees_the_systems_servers_and_its_own_which_win() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            "config/mcp.yaml",
            "servers:\n  time:\n    command: mcp-server-time\n    install: [{source: pip, name: mcp-server-time}]\n  \
             fetch:\n    command: mcp-server-fetch\n    egress: [example.com]\n",
        );
        write(
            dir.path(),
            "users/alice/mcp.yaml",
            "servers:\n  time:\n    command: mcp-server-time\n    args: [--local-timezone, Europe/Berlin]\n    \
             roles: [coder]\n    env: {API_KEY: '${ALICE_KEY}'}\n",
        );
        let (servers, problems) = servers_for(dir.path(), &Context::user("alice"));
        assert!(problems.is_empty(), "{problems:?}");
        let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["fetch", "time"]);
        let time = &servers[1];
        assert_eq!(time.scope, Scope::Context(Context::user("alice")));
        assert_eq!(time.config.args, ["--local-timezone", "Europe/Berlin"]);
        assert!(time.offered_to(Role::Coder) && !time.offered_to(Role::Worker));
        assert_eq!(time.tool_name("get_current_time"), "mcp__time__get_current_time");
        // Bob sees only the system's.
        let (bobs, _) = servers_for(dir.path(), &Context::user("bob"));
        assert_eq!(bobs.iter().find(|s| s.name == "time").map(|s| &s.scope), Some(&Scope::System));
        assert!(bobs[0].offered_to(Role::Worker) && !bobs[0].offered_to(Role::Assistant), "default roles");
    }

    #[test]
    fn mistakes_name_the_file_the_server_and_what_to_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (yaml, says) in [
            ("servers:\n  Time:\n    command: x\n", "server `Time`: a server's name is 1-32 lowercase"),
            ("servers:\n  t:\n    command: ''\n", "`command` is empty"),
            ("servers:\n  t:\n    command: x\n    roles: [admin]\n", "role `admin` is not one of worker, researcher"),
            ("servers:\n  t:\n    command: x\n    egress: ['https://x.org/a']\n", "no scheme, no path"),
            ("servers:\n  t:\n    command: x\n    egress: ['x.org:0']\n", "port is not a number"),
            ("servers:\n  t:\n    command: x\n    env: {api-key: v}\n", "env `api-key`: names are upper-case"),
            ("servers:\n  t:\n    command: x\n    install: [{source: pip, name: '-e .'}]\n", "is not a package name"),
            ("servers:\n  t:\n    command: x\n    tools: {allow: ['a b']}\n", "tools: `a b` is not a tool name"),
            ("servers:\n  t:\n    comand: x\n", "unknown field `comand`"),
        ] {
            let file = write(dir.path(), "config/mcp.yaml", yaml);
            let error = read(&file, &Scope::System).expect_err(yaml);
            let text = error.to_string();
            assert!(text.starts_with(&file.display().to_string()) && text.contains(says), "{yaml}: {text}");
        }
        // A broken user file leaves the system's servers usable.
        write(dir.path(), "config/mcp.yaml", "servers:\n  time:\n    command: mcp-server-time\n");
        write(dir.path(), "users/alice/mcp.yaml", "servers: [oops]\n");
        let (servers, problems) = servers_for(dir.path(), &Context::user("alice"));
        assert_eq!((servers.len(), problems.len()), (1, 1), "{problems:?}");
    }

    #[test]
    fn the_tool_filter_offers_allowed_and_not_denied() {
        let all = ToolFilter::default();
        assert!(all.offers("echo"));
        let some = ToolFilter { allow: vec!["echo".into(), "add".into()], deny: vec!["add".into()] };
        assert!(some.offers("echo") && !some.offers("add") && !some.offers("other"));
    }

    #[test]
    fn put_and_remove_keep_the_other_servers_and_refuse_a_bad_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = write(dir.path(), "config/mcp.yaml", "servers:\n  time:\n    command: mcp-server-time\n");
        let added =
            put(&file, &Scope::System, "fetch", "command: mcp-server-fetch\negress: [example.com]\n").expect("put");
        assert_eq!(added.config.egress, ["example.com"]);
        let names = |servers: Vec<Server>| servers.into_iter().map(|s| s.name).collect::<Vec<_>>();
        assert_eq!(names(read(&file, &Scope::System).expect("read")), ["fetch", "time"]);
        let bad = put(&file, &Scope::System, "broken", "command: x\nroles: [assistant]\n").expect_err("bad role");
        assert!(bad.what.contains("server `broken`: role `assistant`"), "{bad}");
        assert_eq!(names(read(&file, &Scope::System).expect("read")), ["fetch", "time"], "nothing written");
        assert_eq!(names(remove(&file, &Scope::System, "time").expect("remove")), ["fetch"]);
        let missing = remove(&file, &Scope::System, "time").expect_err("gone");
        assert!(missing.what.contains("no server `time`"), "{missing}");
        // A new context file and its folder are made.
        let context = Context { kind: crate::base::auth::ContextKind::User, id: "alice".into() };
        let scope = Scope::Context(context);
        let own = file_of(dir.path(), &scope);
        put(&own, &scope, "notes", "command: notes-mcp\n").expect("put");
        assert_eq!(names(read(&own, &scope).expect("read")), ["notes"]);
    }

    #[test]
    fn egress_names_hosts_ports_and_subdomains() {
        let config =
            "servers:\n  s:\n    command: x\n    egress: [api.example.com, 'db.example.org:5432', '*.example.net']\n";
        let dir = tempfile::tempdir().expect("temp dir");
        let file = write(dir.path(), "mcp.yaml", config);
        let server = read(&file, &Scope::System).expect("read").remove(0);
        assert!(server.egress_allows("api.example.com", 443));
        assert!(server.egress_allows("API.Example.com.", 80));
        assert!(!server.egress_allows("example.com", 443));
        assert!(!server.egress_allows("evil-api.example.com", 443));
        assert!(server.egress_allows("db.example.org", 5432));
        assert!(!server.egress_allows("db.example.org", 443));
        assert!(server.egress_allows("a.b.example.net", 443));
        assert!(!server.egress_allows("example.net", 443));
        assert!(!server.egress_allows("badexample.net", 443));
    }

    #[test]
    fn hosts() {
        for good in ["example.com", "api.example.com:8443", "*.example.com", "localhost"] {
            assert_eq!(check_host(good), Ok(()), "{good}");
        }
        for bad in ["", "http://x.org", "x.org/path", "x..org", "-x.org", "x.org:99999", "*.", "a b"] {
            assert!(check_host(bad).is_err(), "{bad}");
        }
    }
}
