//! Gateway principals (DESIGN.md §9.1): a web or Slack gateway proves itself with its own socket
//! (`data/gateways/{name}/daemon.sock`) and a bearer token issued once by
//! `baaahtd gateways add`, kept here only as a SHA-256 (`data/state/gateways.json`). A gateway
//! acts for the end users of its own namespace only — `web:{issuer}#{sub}` for the OIDC issuer
//! it was registered with, `slack:{team}:{user}` for its Slack workspace — and is never an admin
//! by itself.
//!
//! The daemon runs a gateway itself (DESIGN.md §9.2): in a hardened container without a network
//! whose only way out is the daemon's [`egress`] tunnel to the hosts it needs (`container`, the
//! default), or as a host process (`process`), and restarts it after 3 failed health checks
//! ([`supervise`]). An `external` gateway is run by hand with the token printed at registration.

pub mod egress;
pub mod publish;
pub mod supervise;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::base::state::{self, StateError};

pub const GATEWAYS_FILE: &str = "gateways.json";
/// The socket file in a gateway's folder.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("gateway name `{0}` is not usable: use 1-64 lowercase letters, digits and `-`")]
    BadName(String),
    #[error("a gateway named {0} exists already: remove it first (baaahtd gateways rm {0})")]
    Exists(String),
    #[error("no gateway named {0}: `baaahtd gateways list` shows them")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    /// What a gateway asked of its channel is not for it (a web gateway's rooms, an email
    /// gateway's groups).
    #[error("{0}")]
    NotForIt(String),
    /// A credential the gateway needs is in neither the secrets store nor the environment.
    #[error("the {kind} gateway {gateway} needs {name} in the secrets store: run `baaahtd secrets set {name}`")]
    MissingSecret { kind: &'static str, gateway: String, name: String },
    #[error("cannot generate the gateway's token")]
    Token(#[source] getrandom::Error),
    #[error(transparent)]
    State(#[from] StateError),
}

/// The secrets store name of a gateway's credential `key`: `SLACK_APP_TOKEN_WORK` for the
/// Slack gateway `work`'s `app_token`, `WEB_CLIENT_SECRET_HOME` for the web gateway `home`'s
/// `client_secret`.
pub fn secret_name(record: &GatewayRecord, key: &str) -> String {
    let gateway: String =
        record.name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    format!("{}_{}_{gateway}", record.kind.as_str().to_ascii_uppercase(), key.to_ascii_uppercase())
}

/// What kind of gateway, with what its namespace is made of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum GatewayKind {
    /// Users signed in with OpenID Connect at `issuer`, for the client `audience`.
    Web { issuer: String, audience: String },
    /// Users of one Slack workspace.
    Slack { team: String },
    /// People writing to one Telegram bot.
    Telegram { bot: String },
    /// People writing to one mailbox, at `address`.
    Email { address: String },
    /// People of allowed homeservers writing to a bot account on `homeserver`.
    Matrix { homeserver: String },
}

impl GatewayKind {
    /// The binary that serves a gateway of this kind.
    pub fn binary(&self) -> &'static str {
        match self {
            GatewayKind::Web { .. } => "baaaht-web",
            GatewayKind::Slack { .. } => "baaaht-slack",
            GatewayKind::Telegram { .. } => "baaaht-telegram",
            GatewayKind::Email { .. } => "baaaht-email",
            GatewayKind::Matrix { .. } => "baaaht-matrix",
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            GatewayKind::Web { .. } => "web",
            GatewayKind::Slack { .. } => "slack",
            GatewayKind::Telegram { .. } => "telegram",
            GatewayKind::Email { .. } => "email",
            GatewayKind::Matrix { .. } => "matrix",
        }
    }

    /// The prefix every identity this gateway may name starts with.
    pub fn namespace(&self) -> String {
        match self {
            GatewayKind::Web { issuer, .. } => format!("web:{issuer}#"),
            GatewayKind::Slack { team } => format!("slack:{team}:"),
            GatewayKind::Telegram { bot } => format!("telegram:{bot}:"),
            // A sender is their address, whichever mailbox they wrote to.
            GatewayKind::Email { .. } => "email:".to_string(),
            // A Matrix user id names its homeserver: `matrix:@alice:home.example`.
            GatewayKind::Matrix { .. } => "matrix:".to_string(),
        }
    }
}

/// Who runs a gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunMode {
    /// The daemon, in a hardened container whose only way out is the daemon's egress tunnel.
    Container,
    /// The daemon, as a host process.
    Process,
    /// Whoever registered it, with its token (gateways registered before the daemon ran them).
    #[default]
    External,
}

impl RunMode {
    /// What `gateways add` uses when no mode is named: the daemon runs the gateway in a
    /// container. (A record without a mode predates the daemon running gateways: external.)
    pub const UNNAMED: RunMode = RunMode::Container;

    pub fn parse(text: &str) -> Option<RunMode> {
        match text {
            "container" => Some(RunMode::Container),
            "process" => Some(RunMode::Process),
            "external" => Some(RunMode::External),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunMode::Container => "container",
            RunMode::Process => "process",
            RunMode::External => "external",
        }
    }
}

/// The arguments the daemon gives a gateway itself; they are not the registrant's to set.
pub const DAEMON_ARGS: &[&str] = &[
    "--socket",
    "--token-file",
    "--health-socket",
    "--egress-socket",
    "--parent",
    "--check",
    "--state-dir",
    "--listen-socket",
];

/// A registered gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayRecord {
    pub name: String,
    #[serde(flatten)]
    pub kind: GatewayKind,
    pub token_sha256: String,
    pub created: String,
    /// Who runs it.
    #[serde(default)]
    pub mode: RunMode,
    /// The gateway binary's own arguments (`--keyword`, `--always`, `--api-url` …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
}

impl GatewayRecord {
    /// The value of the gateway argument `flag` (`--flag VALUE` or `--flag=VALUE`), if given.
    pub fn arg(&self, flag: &str) -> Option<&str> {
        arg_in(&self.args, flag)
    }

    /// Every value given for `flag` (it may be repeated, each a comma-separated list), trimmed.
    pub fn arg_values(&self, flag: &str) -> Vec<&str> {
        let mut values = vec![];
        let mut args = self.args.iter();
        while let Some(arg) = args.next() {
            let value = match arg.strip_prefix(flag) {
                Some("") => args.next().map(String::as_str),
                Some(rest) => rest.strip_prefix('='),
                None => None,
            };
            values
                .extend(value.into_iter().flat_map(|value| value.split(',')).map(str::trim).filter(|v| !v.is_empty()));
        }
        values
    }

    /// Whether `identity` (e.g. `slack:T0123:U0456`) is in this gateway's namespace: the
    /// prefix, then a non-empty id without the separators that could start another one.
    pub fn may_name(&self, identity: &str) -> bool {
        let shaped = identity.strip_prefix(&self.kind.namespace()).is_some_and(|rest| {
            !rest.is_empty()
                && rest.len() <= 256
                && !rest.contains(['#', ' ', '\n'])
                && !rest.chars().any(char::is_control)
        });
        // A Matrix gateway speaks for people of the homeservers it lets in only (as registered;
        // one run by someone else may not have told the daemon).
        let allowed_server = match &self.kind {
            GatewayKind::Matrix { .. } if !self.arg_values("--allow-server").is_empty() => {
                let servers = self.arg_values("--allow-server");
                // `matrix:@user:server`, the server perhaps with a port.
                let server = identity.strip_prefix("matrix:").and_then(|user| user.split_once(':'));
                server.is_some_and(|(_, server)| servers.iter().any(|allowed| allowed.eq_ignore_ascii_case(server)))
            }
            _ => true,
        };
        shaped && allowed_server
    }

    /// Whether this gateway lets `identity`, met for the first time, become a user by itself:
    /// a Telegram bot (anyone on Telegram can write to it) only those its `--allow` lists by
    /// Telegram user id; the others admit whom their own checks let through (a Slack
    /// workspace, an email allowlist and DKIM, allowed homeservers, an OpenID provider).
    pub fn admits(&self, identity: &str) -> bool {
        match &self.kind {
            GatewayKind::Telegram { bot } => {
                let user = identity.strip_prefix(&format!("telegram:{bot}:")).unwrap_or_default();
                !user.is_empty() && self.arg_values("--allow").contains(&user)
            }
            _ => true,
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct GatewaysFile {
    version: u32,
    #[serde(default)]
    gateways: Vec<GatewayRecord>,
}

/// The registered gateways.
#[derive(Debug)]
pub struct Registry {
    path: PathBuf,
    folder: PathBuf,
    file: Mutex<GatewaysFile>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
}

impl Registry {
    /// The registry in `state_dir`, gateway sockets under `gateways_dir`.
    pub fn open(state_dir: &Path, gateways_dir: PathBuf) -> Result<Registry, GatewayError> {
        let path = state_dir.join(GATEWAYS_FILE);
        let file = state::read_json(&path)?.unwrap_or(GatewaysFile { version: 1, gateways: vec![] });
        Ok(Registry { path, folder: gateways_dir, file: Mutex::new(file) })
    }

    fn file(&self) -> std::sync::MutexGuard<'_, GatewaysFile> {
        self.file.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn list(&self) -> Vec<GatewayRecord> {
        self.file().gateways.clone()
    }

    pub fn get(&self, name: &str) -> Option<GatewayRecord> {
        self.file().gateways.iter().find(|record| record.name == name).cloned()
    }

    /// The folder of gateway `name`'s socket.
    pub fn socket_folder(&self, name: &str) -> PathBuf {
        self.folder.join(name)
    }

    /// Registers a gateway run by `mode` with the gateway arguments `args`; returns it and its
    /// token, which exists nowhere else afterwards.
    pub fn add(
        &self,
        name: &str,
        kind: GatewayKind,
        mode: RunMode,
        args: Vec<String>,
    ) -> Result<(GatewayRecord, String), GatewayError> {
        if !valid_name(name) {
            return Err(GatewayError::BadName(name.to_string()));
        }
        check_run(&kind, mode, &args)?;
        match &kind {
            GatewayKind::Web { issuer, audience } => {
                if !(issuer.starts_with("https://") || issuer.starts_with("http://")) || issuer.contains('#') {
                    return Err(GatewayError::Invalid(format!(
                        "--issuer `{issuer}` must be the OIDC issuer's URL, e.g. https://accounts.example.com"
                    )));
                }
                if audience.trim().is_empty() {
                    return Err(GatewayError::Invalid(
                        "--audience: give the OIDC client id the web gateway uses".into(),
                    ));
                }
            }
            GatewayKind::Slack { team } => {
                if team.is_empty() || !team.chars().all(|c| c.is_ascii_alphanumeric()) {
                    return Err(GatewayError::Invalid(format!(
                        "--team `{team}` must be the Slack workspace id, e.g. T0123ABCD"
                    )));
                }
            }
            GatewayKind::Telegram { bot } => {
                if bot.is_empty() || bot.len() > 20 || !bot.chars().all(|c| c.is_ascii_digit()) {
                    return Err(GatewayError::Invalid(format!(
                        "--bot `{bot}` must be the bot's id: the digits before the `:` of the token BotFather gave"
                    )));
                }
            }
            GatewayKind::Email { address } => {
                let valid = address.split_once('@').is_some_and(|(user, domain)| {
                    !user.is_empty()
                        && !domain.is_empty()
                        && !address.chars().any(|c| c.is_whitespace() || c.is_control())
                });
                if !valid || address.len() > 254 {
                    return Err(GatewayError::Invalid(format!(
                        "--address `{address}` must be the assistant's mail address, e.g. assistant@home.example"
                    )));
                }
                // The daemon runs it with these (an external one is run with them by whoever runs it).
                for flag in ["--imap", "--smtp", "--allow"] {
                    if mode != RunMode::External && arg_in(&args, flag).is_none() {
                        return Err(GatewayError::Invalid(format!(
                            "an email gateway needs {flag} among its arguments (after `--`)"
                        )));
                    }
                }
            }
            GatewayKind::Matrix { homeserver } => {
                let valid = (homeserver.starts_with("https://") || homeserver.starts_with("http://"))
                    && homeserver.parse::<http::Uri>().is_ok_and(|uri| uri.host().is_some());
                if !valid {
                    return Err(GatewayError::Invalid(format!(
                        "--homeserver `{homeserver}` must be the homeserver's address, e.g. https://matrix.home.example"
                    )));
                }
                for flag in ["--user", "--allow-server"] {
                    if mode != RunMode::External && arg_in(&args, flag).is_none() {
                        return Err(GatewayError::Invalid(format!(
                            "a Matrix gateway needs {flag} among its arguments (after `--`)"
                        )));
                    }
                }
            }
        }
        let mut file = self.file();
        if file.gateways.iter().any(|record| record.name == name) {
            return Err(GatewayError::Exists(name.to_string()));
        }
        let token = crate::base::auth::new_token().map_err(GatewayError::Token)?;
        let record = GatewayRecord {
            name: name.to_string(),
            kind,
            token_sha256: crate::base::auth::token_sha256(&token),
            created: state::now_rfc3339(),
            mode,
            args,
        };
        file.gateways.push(record.clone());
        state::write_json(&self.path, &*file)?;
        tracing::info!(gateway = name, kind = record.kind.as_str(), "gateway registered");
        Ok((record, token))
    }

    /// Removes gateway `name`; its token stops working at once.
    pub fn remove(&self, name: &str) -> Result<GatewayRecord, GatewayError> {
        let mut file = self.file();
        let index = file
            .gateways
            .iter()
            .position(|record| record.name == name)
            .ok_or_else(|| GatewayError::NotFound(name.to_string()))?;
        let removed = file.gateways.remove(index);
        state::write_json(&self.path, &*file)?;
        tracing::info!(gateway = name, "gateway removed");
        Ok(removed)
    }
}

/// The value `args` give `flag` (`--flag VALUE` or `--flag=VALUE`), the first time.
pub fn arg_in<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == flag {
            return args.next().map(String::as_str);
        }
        if let Some(value) = arg.strip_prefix(flag).and_then(|rest| rest.strip_prefix('=')) {
            return Some(value);
        }
    }
    None
}

/// Refuses what cannot run: a mode the gateway kind has no binary for yet, an argument the
/// daemon sets itself, the Events API (a listening port) in a container without a network.
pub fn check_run(kind: &GatewayKind, mode: RunMode, args: &[String]) -> Result<(), GatewayError> {
    if mode == RunMode::External {
        return Ok(());
    }
    if let Some(taken) = args.iter().find(|arg| DAEMON_ARGS.iter().any(|flag| arg.split('=').next() == Some(flag))) {
        return Err(GatewayError::Invalid(format!(
            "`{taken}` is set by the daemon for a gateway it runs; leave it out"
        )));
    }
    if let Some(asked) = args.iter().find(|arg| ["-h", "--help", "-V", "--version"].contains(&arg.as_str())) {
        return Err(GatewayError::Invalid(format!(
            "`{asked}` would print and exit at every start; run `{} {asked}` yourself",
            kind.binary()
        )));
    }
    let events_http = args.windows(2).any(|pair| pair[0] == "--events" && pair[1] == "http")
        || args.iter().any(|arg| arg == "--events=http");
    if let (GatewayKind::Web { .. }, RunMode::Container) = (kind, mode) {
        publish::listen_address(args).map_err(|error| GatewayError::Invalid(error.to_string()))?;
        publish::tls_of(args).map_err(|error| GatewayError::Invalid(error.to_string()))?;
    }
    if mode == RunMode::Container && events_http {
        return Err(GatewayError::Invalid(
            "--events http needs a port on the host, which a gateway's container does not have: use --mode process, \
             or Socket Mode (the default)"
                .into(),
        ));
    }
    Ok(())
}

impl GatewayKind {
    /// The id of the group that follows `channel` (a Slack channel, a Telegram group chat, a
    /// Matrix room) of a gateway of this kind, or why it names none.
    pub fn channel_group(&self, channel: &str) -> Result<String, GatewayError> {
        let channel = channel.trim();
        let invalid = |what: &str| {
            GatewayError::Invalid(format!(
                "{what} `{}` is not {}",
                channel.escape_debug(),
                match self {
                    GatewayKind::Slack { .. } => "a Slack channel id",
                    GatewayKind::Telegram { .. } => "a Telegram chat id",
                    _ => "a Matrix room id",
                }
            ))
        };
        match self {
            GatewayKind::Slack { team } => {
                if channel.is_empty() || !channel.chars().all(|c| c.is_ascii_alphanumeric()) {
                    return Err(invalid("channel"));
                }
                Ok(format!("slack-{team}-{channel}"))
            }
            GatewayKind::Telegram { bot } => {
                // A group's chat id is negative: `-100…` for a supergroup.
                let digits = channel.strip_prefix('-').unwrap_or(channel);
                if digits.is_empty() || digits.len() > 20 || !digits.chars().all(|c| c.is_ascii_digit()) {
                    return Err(invalid("chat"));
                }
                Ok(format!("telegram-{bot}-{}", channel.replace('-', "n")))
            }
            GatewayKind::Web { .. } => {
                Err(GatewayError::NotForIt("a web gateway's rooms are made by an admin, not for a channel".into()))
            }
            GatewayKind::Email { .. } => {
                Err(GatewayError::NotForIt("an email gateway answers each sender in their own conversations".into()))
            }
            GatewayKind::Matrix { .. } => {
                // A room id: `!opaque:server`, or from room version 12 `!opaque`. The group's id
                // is a digest of it (ids stay short and plain).
                let valid = channel.starts_with('!') && channel.len() > 1 && channel.len() <= 255;
                if !valid || channel.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(invalid("room"));
                }
                use sha2::Digest as _;
                let digest = sha2::Sha256::digest(channel.as_bytes());
                let short: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
                Ok(format!("matrix-{short}"))
            }
        }
    }
}

/// The credentials gateway `record` signs in or listens with, from the secrets store (each read
/// audited as `caller`'s): a Slack app's tokens, a bot's token, a mailbox's or a Matrix
/// account's password; a web gateway's OIDC issuer and client (its secret when it is a
/// confidential client).
pub fn credentials(
    record: &GatewayRecord,
    secrets: &crate::guard::secrets::LiveSecrets,
    audit: &crate::guard::audit::Audit,
    caller: &crate::base::auth::Caller,
) -> Result<std::collections::HashMap<String, String>, GatewayError> {
    let mut found = std::collections::HashMap::new();
    let keys: &[(&str, bool)] = match &record.kind {
        GatewayKind::Slack { .. } => &[("app_token", true), ("bot_token", true), ("signing_secret", false)],
        GatewayKind::Telegram { .. } => &[("bot_token", true)],
        GatewayKind::Email { .. } | GatewayKind::Matrix { .. } => &[("password", true)],
        GatewayKind::Web { issuer, audience } => {
            found.insert("issuer".to_string(), issuer.clone());
            found.insert("client_id".to_string(), audience.clone());
            &[("client_secret", false)]
        }
    };
    let opened = secrets.current();
    for &(key, required) in keys {
        let name = secret_name(record, key);
        let reference = format!("${{{name}}}");
        match crate::guard::secrets::resolve_references(&reference, opened.as_deref(), |n| std::env::var(n).ok()) {
            Ok(value) => {
                found.insert(key.to_string(), value.to_string());
                let read = crate::guard::audit::Record::by(crate::guard::audit::Kind::Secret, caller, "read");
                audit.record(read.detail("name", name.as_str()));
            }
            Err(_) if !required => {}
            Err(_) => {
                let kind = match &record.kind {
                    GatewayKind::Slack { .. } => "Slack",
                    GatewayKind::Telegram { .. } => "Telegram",
                    GatewayKind::Email { .. } => "email",
                    GatewayKind::Matrix { .. } => "Matrix",
                    GatewayKind::Web { .. } => "web",
                };
                return Err(GatewayError::MissingSecret { kind, gateway: record.name.clone(), name });
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_kept_hashed_and_namespaces_hold() {
        let temp = tempfile::tempdir().expect("tempdir");
        let registry = Registry::open(temp.path(), temp.path().join("gateways")).expect("open");
        let (web, token) = registry
            .add(
                "home-web",
                GatewayKind::Web { issuer: "https://id.example.com".into(), audience: "baaaht".into() },
                RunMode::External,
                vec![],
            )
            .expect("web");
        let text = std::fs::read_to_string(temp.path().join(GATEWAYS_FILE)).expect("file");
        assert!(!text.contains(&token) && text.contains(&web.token_sha256), "{text}");
        assert!(crate::base::auth::tokens_equal(&web.token_sha256, &crate::base::auth::token_sha256(&token)));
        assert!(web.may_name("web:https://id.example.com#248289761001"));
        for other in [
            "web:https://evil.example.com#1",
            "web:https://id.example.com#",
            "slack:T1:U1",
            "web:https://id.example.com#a#b",
        ] {
            assert!(!web.may_name(other), "{other}");
        }
        let (slack, _) = registry
            .add("acme", GatewayKind::Slack { team: "T0123".into() }, RunMode::External, vec![])
            .expect("slack");
        assert!(slack.may_name("slack:T0123:U0456"));
        assert!(!slack.may_name("slack:T9999:U0456"));
        let (telegram, _) = registry
            .add("family", GatewayKind::Telegram { bot: "123456789".into() }, RunMode::External, vec![])
            .expect("telegram");
        assert!(telegram.may_name("telegram:123456789:42"));
        assert!(!telegram.may_name("telegram:987654321:42") && !telegram.may_name("slack:T0123:U0456"));
        for bad in ["", "12ab", "123456789:AAtoken"] {
            let refused = registry.add("tg", GatewayKind::Telegram { bot: bad.into() }, RunMode::External, vec![]);
            assert!(
                matches!(&refused, Err(GatewayError::Invalid(why)) if why.contains("the bot's id")),
                "{bad}: {refused:?}"
            );
        }
        // An email gateway: anyone's address is theirs to name; the daemon runs it only with
        // its servers named.
        let mailbox = || GatewayKind::Email { address: "assistant@home.example".into() };
        let (email, _) = registry.add("mail", mailbox(), RunMode::External, vec![]).expect("email");
        assert!(email.may_name("email:alice@family.example") && !email.may_name("telegram:1:2"));
        let unnamed = registry.add("mail2", mailbox(), RunMode::Container, vec!["--imap".into(), "m:993".into()]);
        assert!(matches!(&unnamed, Err(GatewayError::Invalid(why)) if why.contains("--smtp")), "{unnamed:?}");
        for bad in ["assistant", "@home.example", "a b@home.example"] {
            let refused = registry.add("mail3", GatewayKind::Email { address: bad.into() }, RunMode::External, vec![]);
            assert!(matches!(&refused, Err(GatewayError::Invalid(why)) if why.contains("--address")), "{bad}");
        }
        // A Matrix gateway: its homeserver an address; the daemon runs it only with its account
        // and allowed homeservers named.
        let homeserver = || GatewayKind::Matrix { homeserver: "https://matrix.home.example".into() };
        let (matrix, _) = registry.add("chat", homeserver(), RunMode::External, vec![]).expect("matrix");
        assert!(matrix.may_name("matrix:@alice:home.example") && !matrix.may_name("email:a@b.example"));
        let unnamed = registry.add("chat2", homeserver(), RunMode::Process, vec!["--user".into(), "@b:h".into()]);
        assert!(matches!(&unnamed, Err(GatewayError::Invalid(why)) if why.contains("--allow-server")), "{unnamed:?}");
        let refused = registry.add(
            "chat3",
            GatewayKind::Matrix { homeserver: "matrix.home.example".into() },
            RunMode::External,
            vec![],
        );
        assert!(matches!(&refused, Err(GatewayError::Invalid(why)) if why.contains("--homeserver")), "{refused:?}");
        assert!(matches!(
            registry.add("acme", GatewayKind::Slack { team: "T1".into() }, RunMode::External, vec![]),
            Err(GatewayError::Exists(_))
        ));
        assert!(matches!(
            registry.add("Bad Name", GatewayKind::Slack { team: "T1".into() }, RunMode::External, vec![]),
            Err(GatewayError::BadName(_))
        ));
        let reopened = Registry::open(temp.path(), temp.path().join("gateways")).expect("reopen");
        assert_eq!(reopened.list().len(), 5);
        reopened.remove("acme").expect("rm");
        assert!(reopened.get("acme").is_none());
    }

    #[test]
    fn a_gateway_the_daemon_runs_gets_only_arguments_it_can_use() {
        let temp = tempfile::tempdir().expect("tempdir");
        let registry = Registry::open(temp.path(), temp.path().join("gateways")).expect("open");
        let slack = || GatewayKind::Slack { team: "T1".into() };
        let args = |list: &[&str]| list.iter().map(|arg| arg.to_string()).collect::<Vec<_>>();
        let refused = |mode, list: &[&str]| match registry.add("s", slack(), mode, args(list)) {
            Err(GatewayError::Invalid(why)) => why,
            other => panic!("{other:?}"),
        };
        assert!(refused(RunMode::Process, &["--socket", "/tmp/x"]).contains("`--socket` is set by the daemon"));
        assert!(refused(RunMode::Container, &["--egress-socket=/x"]).contains("set by the daemon"));
        assert!(refused(RunMode::Container, &["--events", "http"]).contains("--mode process"));
        assert!(refused(RunMode::Process, &["--help"]).contains("would print and exit at every start"));
        let web = GatewayKind::Web { issuer: "https://id.example.com".into(), audience: "a".into() };
        match registry.add("w", web.clone(), RunMode::Container, args(&["--listen", "home-server"])) {
            Err(GatewayError::Invalid(why)) => {
                assert!(why.contains("--listen `home-server` is not an address"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        assert!(registry.add("w", web, RunMode::Container, args(&["--listen", "0.0.0.0:8443"])).is_ok());
        let (record, _) = registry
            .add("s", slack(), RunMode::Process, args(&["--events", "http", "--api-url=http://127.0.0.1:9/api"]))
            .expect("a process may serve the Events API");
        assert_eq!(record.arg("--events"), Some("http"));
        assert_eq!(record.arg("--api-url"), Some("http://127.0.0.1:9/api"));
        assert_eq!(record.arg("--keyword"), None);
        let text = std::fs::read_to_string(temp.path().join(GATEWAYS_FILE)).expect("file");
        assert!(text.contains("\"mode\": \"process\""), "{text}");
    }
}
