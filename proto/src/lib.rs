//! baaaht's wire protocol (package `baaaht.v1`) and the shared Unix-socket client.
//!
//! The generated types live in [`v1`]. [`client`] connects to a daemon socket, attaches the
//! container token and a correlation id to every call, and reconnects with exponential backoff.
//! This crate owns no policy: it never decides who may call what.

pub mod client;
pub mod egress;
pub mod files;
pub mod git;
pub mod host;
pub mod lifecycle;
pub mod selftest;
pub mod tls;
pub mod transcript;

/// Generated protobuf types and tonic stubs for `baaaht.v1`.
#[allow(unreachable_pub, clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("baaaht.v1");
}

/// Each agent role's protocol value and its name, as configuration, tools, commands and people
/// write it: the one table every crate reads.
pub const ROLES: [(v1::AgentRole, &str); 7] = [
    (v1::AgentRole::Assistant, "assistant"),
    (v1::AgentRole::Worker, "worker"),
    (v1::AgentRole::Researcher, "researcher"),
    (v1::AgentRole::Coder, "coder"),
    (v1::AgentRole::Memory, "memory"),
    (v1::AgentRole::Heartbeat, "heartbeat"),
    (v1::AgentRole::Tool, "tool"),
];

/// The name of the role a protocol value names; `None` for one unset or unknown.
pub fn role_name(value: i32) -> Option<&'static str> {
    ROLES.iter().find(|(role, _)| *role as i32 == value).map(|(_, name)| *name)
}

/// The role `name` names.
pub fn role_named(name: &str) -> Option<v1::AgentRole> {
    ROLES.iter().find(|(_, known)| *known == name).map(|(role, _)| *role)
}

/// The push services browsers subscribe with (Chrome's, Firefox's, Safari's, Edge's), on 443:
/// the only addresses a web gateway sends notifications to, besides a push service its
/// registrant names (`--push-service`). The gateway refuses a device naming another; the
/// daemon's tunnel opens no other.
pub const PUSH_SERVICES: &[&str] =
    &["fcm.googleapis.com", "updates.push.services.mozilla.com", "web.push.apple.com", "*.notify.windows.com"];

/// How the browser's requests are named in an approval question (the runner writes it before
/// the action and its address; no other tool's name begins so): "the browser: open https://…".
pub const BROWSER_ASKED: &str = "the browser: ";

/// How a note of the time now begins: an agent adds one after a turn's new message (where the
/// prefix a provider caches ends), never to the session.
pub const TIME_NOTE: &str = "(The time now, where the user is:";

/// The note of the time `now` an agent adds after a turn's new message.
pub fn time_note(now: &str) -> String {
    format!("{TIME_NOTE} {now}.)")
}

/// What a channel says a turn's agent is doing before its words ([`v1::TurnPhase`]), e.g.
/// "starting the assistant", "thinking", "the coder is thinking".
pub fn phase_said(phase: &v1::TurnPhase) -> String {
    let agent = role_name(phase.agent).unwrap_or("agent");
    match (phase.phase.as_str(), agent) {
        ("starting", agent) => format!("starting the {agent}"),
        (_, "assistant") => "thinking".into(),
        (_, agent) => format!("the {agent} is thinking"),
    }
}

/// A tool a tool container's runner runs, by the name the model, the configuration
/// (`tools.timeout_overrides`), the policy and the runner all use: the one list every crate
/// reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolName {
    ReadFile,
    WriteFile,
    EditFile,
    ListDir,
    Grep,
    Find,
    Exec,
    WebSearch,
    WebFetch,
    Message,
    Browser,
}

impl ToolName {
    pub const ALL: [ToolName; 11] = [
        ToolName::ReadFile,
        ToolName::WriteFile,
        ToolName::EditFile,
        ToolName::ListDir,
        ToolName::Grep,
        ToolName::Find,
        ToolName::Exec,
        ToolName::WebSearch,
        ToolName::WebFetch,
        ToolName::Message,
        ToolName::Browser,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ToolName::ReadFile => "read_file",
            ToolName::WriteFile => "write_file",
            ToolName::EditFile => "edit_file",
            ToolName::ListDir => "list_dir",
            ToolName::Grep => "grep",
            ToolName::Find => "find",
            ToolName::Exec => "exec",
            ToolName::WebSearch => "web_search",
            ToolName::WebFetch => "web_fetch",
            ToolName::Message => "message",
            ToolName::Browser => "browser",
        }
    }

    /// A call that only reads the workspace: run again, it changes nothing, so its result is
    /// not written to the IPC folder to be collected after a restart (spec §12.4 keeps a
    /// result so that a call never runs twice; these may).
    pub fn only_reads(self) -> bool {
        matches!(self, ToolName::ReadFile | ToolName::ListDir | ToolName::Grep | ToolName::Find)
    }

    /// The tool `name` names, if it is one of the runner's.
    pub fn named(name: &str) -> Option<ToolName> {
        ToolName::ALL.into_iter().find(|tool| tool.as_str() == name)
    }
}

impl std::fmt::Display for ToolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The largest message any baaaht service or client decodes (tonic's default is 4 MiB): a
/// turn's conversation carries the pictures shared in it (up to 4 of 3.75 MB each).
pub const MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;

/// The most files one `message` may send, and the most bytes they may have together (the
/// runner copies them into its IPC folder, a memory filesystem of 16 MiB; chat services take
/// this much).
pub const SENT_FILES_MAX: usize = 5;
pub const SENT_FILE_MAX_BYTES: u64 = 10 << 20;

/// What follows the part of an answer written before its turn was stopped, in the session and
/// on screen.
pub const STOPPED_MARK: &str = "[stopped]";

/// About what a provider bills for one picture, in input tokens (Anthropic: about 1,600 for
/// one at its 1568 px limit): what budgets, compaction and usage estimates count an image as.
pub const IMAGE_TOKENS: usize = 1600;

/// gRPC metadata key carrying the correlation id of a turn through every hop.
pub const CORRELATION_ID_HEADER: &str = "x-correlation-id";

/// gRPC metadata key carrying the W3C trace context of a hop when the daemon exports traces.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// gRPC metadata a gateway names its end user with: the channel identity
/// (`web:{issuer}#{sub}`, `slack:{team}:{user}`).
pub const USER_HEADER: &str = "x-baaaht-user";
/// The end user's display name, used when the user is met for the first time.
pub const USER_NAME_HEADER: &str = "x-baaaht-user-name";
/// The web gateway's user's OpenID Connect ID token, which the daemon verifies itself.
pub const ID_TOKEN_HEADER: &str = "x-baaaht-id-token";
/// A web gateway's user's access token, sent beside an ID token that has expired when the
/// provider refreshed the session without a new one; the daemon asks the provider's userinfo
/// endpoint whether it still names the user.
pub const ACCESS_TOKEN_HEADER: &str = "x-baaaht-access-token";

/// Environment variable through which a container receives its bearer token.
pub const CONTAINER_TOKEN_ENV: &str = "BAAAHT_CONTAINER_TOKEN";

/// Where a tool container finds the skills' scripts: `/skills/{skill}/scripts/…`, read-only.
pub const SKILLS_MOUNT: &str = "/skills";

/// The skill whose script `path` is — `/skills/{skill}/scripts/{file…}`, with no empty, `.` or
/// `..` part — if it is one. The daemon gives a run of that path its skill's secrets; the
/// tool runner runs exactly that path.
pub fn skill_of_script(path: &str) -> Option<&str> {
    let rest = path.strip_prefix(SKILLS_MOUNT)?.strip_prefix('/')?;
    let mut parts = rest.split('/');
    let skill = parts.next()?;
    if parts.next()? != "scripts" {
        return None;
    }
    let file: Vec<&str> = parts.collect();
    let plain = |part: &str| !part.is_empty() && part != "." && part != ".." && !part.contains('\0');
    (plain(skill) && !file.is_empty() && file.iter().all(|part| plain(part))).then_some(skill)
}

/// A size as people read it, in decimal units: `512 bytes`, `12.3 KB`, `4.0 MB` (what the
/// daemon and the gateways tell users of files).
pub fn human_size(bytes: u64) -> String {
    match bytes {
        0..1_000 => format!("{bytes} bytes"),
        1_000..1_000_000 => format!("{:.1} KB", bytes as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", bytes as f64 / 1e6),
        _ => format!("{:.1} GB", bytes as f64 / 1e9),
    }
}

/// An error and its causes as one line, "outer: inner: root", for the single place each
/// program prints an error.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_tools_name_reads_back_as_itself_in_code_and_in_configuration() {
        for tool in super::ToolName::ALL {
            assert_eq!(super::ToolName::named(tool.as_str()), Some(tool));
            let written = serde_json::to_value(tool).expect("serialize");
            assert_eq!(written, serde_json::Value::String(tool.as_str().into()));
        }
        assert_eq!(super::ToolName::named("delegate"), None);
    }

    #[test]
    fn a_skill_script_is_a_plain_path_under_its_skills_scripts() {
        assert_eq!(super::skill_of_script("/skills/weather/scripts/show.sh"), Some("weather"));
        assert_eq!(super::skill_of_script("/skills/weather/scripts/lib/util.py"), Some("weather"));
        for not in [
            "/skills/weather/show.sh",
            "/skills/weather/scripts/",
            "/skills/weather/scripts/../../etc/passwd",
            "/skills/../workspace/scripts/x.sh",
            "/skills//scripts/x.sh",
            "skills/weather/scripts/x.sh",
            "/skillsx/weather/scripts/x.sh",
            "/workspace/x.sh",
        ] {
            assert_eq!(super::skill_of_script(not), None, "{not}");
        }
    }
}
