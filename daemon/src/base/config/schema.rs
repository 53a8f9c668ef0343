//! The schema of `config.yaml` (spec §16.1) with every default built in.
//!
//! Every struct denies unknown keys, and every value that can be wrong is checked while it is
//! deserialized, so a mistake is reported with the file, line and column it sits on.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub system: SystemConfig,
    pub container: ContainerConfig,
    pub orchestrator: OrchestratorConfig,
    pub agents: AgentsConfig,
    pub sessions: SessionsConfig,
    pub skills: SkillsConfig,
    pub scheduler: SchedulerConfig,
    pub tools: ToolsConfig,
    pub llm: LlmConfig,
    pub metrics: MetricsConfig,
    pub budgets: BudgetsConfig,
    pub audit: AuditConfig,
    pub otel: OtelConfig,
    pub secrets: SecretsConfig,
    pub egress: EgressConfig,
    pub memory: MemoryConfig,
    pub security: super::security::SecurityConfig,
    pub voice: super::VoiceConfig,
}

/// A context's long-term memory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// The most entries a user or group keeps: past it, the least important and oldest entry
    /// is forgotten to make room, and the person is told which.
    pub max_entries: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig { max_entries: 2000 }
    }
}

/// Tools' connections out (the rules themselves are in `egress.yaml` files).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EgressConfig {
    /// Seconds a connection waits for someone to allow it in chat before it is denied.
    pub approval_timeout: u64,
}

impl Default for EgressConfig {
    fn default() -> Self {
        EgressConfig { approval_timeout: 120 }
    }
}

/// Which secrets of the store (`baaahtd secrets set NAME`) users' and groups' own mcp.yaml
/// servers and skills may name. The system's own may name any; an LLM provider's key can
/// never be named by any of them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SecretsConfig {
    pub user_usable: Vec<String>,
}

/// Spending limits per user and per group (DESIGN.md §9.3): tokens and cost per day and per
/// month, counted from the providers' usage. A request that would pass a limit is refused before
/// it reaches a provider; at `soft_percent` of a limit the context is warned once.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetsConfig {
    /// Share of a limit (1-100) at which the context is warned, once per period.
    pub soft_percent: u32,
    /// Every user's limits unless `overrides` says otherwise.
    pub user: BudgetLimits,
    /// Every group's limits unless `overrides` says otherwise.
    pub group: BudgetLimits,
    /// Per context, `user:ID` or `group:ID`: the limits named replace the default's.
    pub overrides: BTreeMap<String, BudgetLimitsOverride>,
}

impl Default for BudgetsConfig {
    fn default() -> Self {
        BudgetsConfig {
            soft_percent: 80,
            user: BudgetLimits::default(),
            group: BudgetLimits::default(),
            overrides: BTreeMap::new(),
        }
    }
}

/// Limits; 0 means none.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetLimits {
    pub daily_tokens: u64,
    pub monthly_tokens: u64,
    /// US dollars.
    pub daily_cost: f64,
    pub monthly_cost: f64,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetLimitsOverride {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daily_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monthly_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daily_cost: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monthly_cost: Option<f64>,
}

impl BudgetLimits {
    /// These limits with `custom`'s on top.
    pub fn with(self, custom: &BudgetLimitsOverride) -> BudgetLimits {
        BudgetLimits {
            daily_tokens: custom.daily_tokens.unwrap_or(self.daily_tokens),
            monthly_tokens: custom.monthly_tokens.unwrap_or(self.monthly_tokens),
            daily_cost: custom.daily_cost.unwrap_or(self.daily_cost),
            monthly_cost: custom.monthly_cost.unwrap_or(self.monthly_cost),
        }
    }

    /// Whether any cost limit applies (then every model needs a price).
    pub fn limits_cost(&self) -> bool {
        self.daily_cost > 0.0 || self.monthly_cost > 0.0
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SystemConfig {
    /// This server's name, shown by `baaaht status` (several daemons on one network).
    pub name: String,
    /// IANA time zone used by the scheduler, e.g. "Europe/Berlin"; "UTC" by default.
    pub timezone: String,
    pub log_level: LogLevel,
    /// Per-component log levels, e.g. `{container: debug}`; keys are daemon module names.
    pub log_components: BTreeMap<String, LogLevel>,
    pub admin_users: Vec<String>,
}

impl Default for SystemConfig {
    fn default() -> Self {
        SystemConfig {
            name: "baaaht".into(),
            timezone: "UTC".into(),
            log_level: LogLevel::Info,
            log_components: BTreeMap::new(),
            admin_users: vec![],
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ContainerConfig {
    pub runtime: RuntimeChoice,
    /// Containers running at once (the LLM gateway aside); a start past it waits. `auto`: as
    /// many as the host's memory holds ([`ContainerCap`]).
    pub max_concurrent: ContainerCap,
    /// Seconds a start waits for a free slot (idle containers are removed to make room)
    /// before it is refused with a sentence.
    pub queue_timeout: u64,
    pub resource_limits: ResourceLimits,
    /// Per-role overrides of `resource_limits`, e.g. `{coder: {memory: 2g}}`.
    pub role_limits: BTreeMap<crate::base::auth::Role, ResourceLimitsOverride>,
    /// Per-role isolation tier, e.g. `{coder: gvisor, assistant: auto}`; a role not named
    /// gets [`IsolationChoice::default_for`] it.
    pub isolation: BTreeMap<crate::base::auth::Role, IsolationChoice>,
    /// Image every agent and tool container starts from.
    pub image: String,
    /// Folder holding `baaaht-agent`, mounted read-only into containers; empty: beside baaahtd.
    pub binaries_dir: String,
    /// The engine's socket; empty: try the usual places for `runtime`.
    pub socket: String,
    /// Seconds one engine call may take before the engine counts as hung (degraded mode).
    pub engine_timeout: u64,
    /// Warm pools per role: containers started ahead of demand, holding nothing of anyone
    /// until a new session claims one, e.g. `{assistant: {floor: 1, ceiling: 4}}`; a role not
    /// named gets [`PoolSize::default_for`] it.
    pub pools: BTreeMap<crate::base::auth::Role, PoolSize>,
}

/// How many containers of one role a warm pool keeps ready: as many as new sessions claimed in
/// the last minutes, at least `floor`, at most `ceiling` (and never past the container cap or
/// the host's free memory).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PoolSize {
    pub floor: u32,
    pub ceiling: u32,
}

/// `container.pools` with every pool empty (as JSON, for `BAAAHT__CONTAINER__POOLS`): what the
/// test daemons run with, so that what a test counts is what it made.
pub const NO_POOLS: &str = r#"{"assistant":{"floor":0,"ceiling":0},"worker":{"floor":0,"ceiling":0},"researcher":{"floor":0,"ceiling":0},"coder":{"floor":0,"ceiling":0},"memory":{"floor":0,"ceiling":0},"heartbeat":{"floor":0,"ceiling":0},"tool":{"floor":0,"ceiling":0}}"#;

impl PoolSize {
    /// The pool of `role` when `container.pools` does not name it: an Assistant and a Coder
    /// with its tool container ready for the next new conversation, the others on demand.
    pub fn default_for(role: crate::base::auth::Role) -> PoolSize {
        use crate::base::auth::Role;
        match role {
            Role::Assistant | Role::Tool => PoolSize { floor: 1, ceiling: 4 },
            Role::Coder => PoolSize { floor: 1, ceiling: 2 },
            Role::Worker | Role::Researcher | Role::Memory | Role::Heartbeat => PoolSize { floor: 0, ceiling: 2 },
            Role::LlmGateway | Role::Mcp | Role::Gateway | Role::Speech => PoolSize { floor: 0, ceiling: 0 },
        }
    }
}

impl Default for ContainerConfig {
    fn default() -> Self {
        ContainerConfig {
            runtime: RuntimeChoice::Auto,
            max_concurrent: ContainerCap::Auto,
            queue_timeout: 60,
            resource_limits: ResourceLimits::default(),
            role_limits: BTreeMap::new(),
            isolation: BTreeMap::new(),
            image: "baaaht/base:latest".into(),
            binaries_dir: String::new(),
            socket: String::new(),
            engine_timeout: 30,
            pools: BTreeMap::new(),
        }
    }
}

impl ContainerConfig {
    /// The warm pool of `role`: `pools`, else the role's default.
    pub fn pool_of(&self, role: crate::base::auth::Role) -> PoolSize {
        self.pools.get(&role).copied().unwrap_or_else(|| PoolSize::default_for(role))
    }

    /// The isolation tier asked for `role`: `isolation`, else the role's default.
    pub fn isolation_of(&self, role: crate::base::auth::Role) -> IsolationChoice {
        self.isolation.get(&role).copied().unwrap_or_else(|| IsolationChoice::default_for(role))
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeChoice {
    Auto,
    Docker,
    Podman,
}

/// Which kernel a role's containers run on (DESIGN.md §10.6).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum IsolationChoice {
    /// gVisor where the engine has a usable `runsc` runtime, else runc (and a log line).
    Auto,
    /// The host's kernel, behind namespaces, capabilities and seccomp.
    Runc,
    /// A second kernel (gVisor's Sentry) between the container and the host's; a container
    /// is refused, with the fix, when the engine has no usable `runsc`.
    Gvisor,
}

impl IsolationChoice {
    /// Roles that run code a model chose or a third party wrote (tools, the Coder, MCP
    /// servers) get gVisor where it is there; the others the host's kernel.
    pub fn default_for(role: crate::base::auth::Role) -> IsolationChoice {
        use crate::base::auth::Role;
        match role {
            Role::Tool | Role::Coder | Role::Mcp => IsolationChoice::Auto,
            _ => IsolationChoice::Runc,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            IsolationChoice::Auto => "auto",
            IsolationChoice::Runc => "runc",
            IsolationChoice::Gvisor => "gvisor",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ResourceLimits {
    pub cpu: CpuLimit,
    pub memory: ByteSize,
    pub disk: ByteSize,
    pub pids: u32,
    /// Size of the tmpfs mounted at /tmp.
    pub tmp: ByteSize,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        ResourceLimits {
            cpu: CpuLimit(1.0),
            memory: ByteSize(512 << 20),
            disk: ByteSize(1 << 30),
            pids: 256,
            tmp: ByteSize(64 << 20),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ResourceLimitsOverride {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuLimit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<ByteSize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<ByteSize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tmp: Option<ByteSize>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OrchestratorConfig {
    pub poll_intervals: PollIntervals,
    pub health_check: HealthCheckConfig,
    pub socket: SocketConfig,
    /// Seconds in-flight requests get to finish after SIGTERM before the daemon exits anyway.
    pub shutdown_timeout: u64,
    /// The data dir's disk, watched (spec §5.4).
    pub disk: DiskConfig,
}

impl Default for OrchestratorConfig {
    fn default() -> Self {
        OrchestratorConfig {
            poll_intervals: PollIntervals::default(),
            health_check: HealthCheckConfig::default(),
            socket: SocketConfig::default(),
            shutdown_timeout: 10,
            disk: DiskConfig::default(),
        }
    }
}

/// When the data dir's disk is nearly full (percent in use, as `df` says it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DiskConfig {
    /// From here the admins are told (log, metric, `baaaht status`, their preferred channel).
    pub warn_percent: u8,
    /// From here new conversations and uploads are refused and idle sessions archived at once.
    pub critical_percent: u8,
    /// Milliseconds between looks at the disk.
    pub check_interval: u64,
}

impl Default for DiskConfig {
    fn default() -> Self {
        DiskConfig { warn_percent: 90, critical_percent: 95, check_interval: 30_000 }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PollIntervals {
    /// Milliseconds between scheduler evaluations.
    pub scheduler: u64,
    /// Milliseconds between scans of file-IPC folders (results, messages and task requests;
    /// a message is also delivered as soon as the tool call that wrote it ends).
    pub ipc: u64,
}

impl Default for PollIntervals {
    fn default() -> Self {
        PollIntervals { scheduler: 60_000, ipc: 1000 }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HealthCheckConfig {
    /// Milliseconds between health probes.
    pub interval: u64,
    /// Milliseconds to wait for an answer.
    pub timeout: u64,
    pub failure_threshold: u32,
    pub notify_channel: NotifyChannel,
}

impl Default for HealthCheckConfig {
    fn default() -> Self {
        HealthCheckConfig { interval: 30_000, timeout: 5000, failure_threshold: 3, notify_channel: NotifyChannel::Log }
    }
}

/// How the admins are told what the daemon did on its own (`work::health::tell_admin`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NotifyChannel {
    /// The log, and each admin's inbox.
    Log,
    /// The log, and a Slack message to each admin a Slack gateway follows (the inbox for
    /// one it does not).
    Slack,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SocketConfig {
    /// A group whose members may use the host socket besides the daemon's own user; the
    /// socket is then owned by this group. Empty: only the daemon's user (and root).
    pub client_group: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AgentsConfig {
    /// The model of every role that names none of its own (`provider/model`); unset, each
    /// role has its built-in default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_model: Option<ModelName>,
    pub assistant: AgentConfig,
    pub worker: AgentConfig,
    pub researcher: AgentConfig,
    pub coder: AgentConfig,
    pub memory: AgentConfig,
    pub heartbeat: AgentConfig,
}

const BALANCED_MODEL: &str = "anthropic/claude-sonnet-4-20250514";
const FAST_MODEL: &str = "anthropic/claude-3-5-haiku-20241022";

impl Default for AgentsConfig {
    fn default() -> Self {
        let agent = |max_iterations, timeout, max_output_tokens| AgentConfig {
            model: None,
            max_iterations,
            temperature: None,
            timeout,
            vision: None,
            max_output_tokens,
            return_directly: None,
            thinking_budget: 0,
        };
        AgentsConfig {
            default_model: None,
            assistant: AgentConfig { temperature: Some(Temperature(0.7)), ..agent(20, 300, 8192) },
            worker: agent(15, 300, 8192),
            researcher: agent(50, 600, 8192),
            coder: agent(30, 600, 16384),
            memory: agent(10, 300, 4096),
            heartbeat: agent(15, 300, 4096),
        }
    }
}

/// Where a role's model comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelSource {
    /// `agents.{role}.model`.
    Own,
    /// `agents.default_model`.
    Default,
    /// The role's built-in default.
    BuiltIn,
}

impl fmt::Display for ModelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ModelSource::Own => "its own",
            ModelSource::Default => "agents.default_model",
            ModelSource::BuiltIn => "built in",
        })
    }
}

/// One role's settings with its model resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSettings {
    pub model: ModelName,
    pub source: ModelSource,
    pub max_iterations: u32,
    pub temperature: Option<Temperature>,
    pub timeout: u64,
    /// Whether the model takes images, when the configuration says.
    pub vision: Option<bool>,
    /// The most tokens one answer of its model may have.
    pub max_output_tokens: u32,
    /// Whether a delegation to it returns its answer to the user directly, unless the
    /// Assistant says otherwise.
    pub return_directly: bool,
    /// Tokens of thinking asked of its model (0: none).
    pub thinking_budget: u32,
}

impl AgentsConfig {
    /// The agent roles, by name, with their sections.
    pub fn roles(&self) -> [(crate::base::auth::Role, &AgentConfig); 6] {
        use crate::base::auth::Role;
        [
            (Role::Assistant, &self.assistant),
            (Role::Worker, &self.worker),
            (Role::Researcher, &self.researcher),
            (Role::Coder, &self.coder),
            (Role::Memory, &self.memory),
            (Role::Heartbeat, &self.heartbeat),
        ]
    }

    /// `role`'s settings: its own model, else `default_model`, else its built-in default (the
    /// Memory and Heartbeat agents a fast model, the others a balanced one). Roles without an
    /// agent (tool containers, the gateway) get the Assistant's.
    pub fn settings(&self, role: crate::base::auth::Role) -> AgentSettings {
        use crate::base::auth::Role;
        let section = self.roles().into_iter().find(|(r, _)| *r == role).map_or(&self.assistant, |(_, s)| s);
        let built_in = if matches!(role, Role::Memory | Role::Heartbeat) { FAST_MODEL } else { BALANCED_MODEL };
        let (model, source) = match (&section.model, &self.default_model) {
            (Some(own), _) => (own.clone(), ModelSource::Own),
            (None, Some(default)) => (default.clone(), ModelSource::Default),
            (None, None) => (ModelName(built_in.into()), ModelSource::BuiltIn),
        };
        AgentSettings {
            model,
            source,
            max_iterations: section.max_iterations,
            temperature: section.temperature,
            timeout: section.timeout,
            vision: section.vision,
            max_output_tokens: section.max_output_tokens,
            // The Worker's and the Coder's answers to a direct request usually are the reply;
            // a Researcher's or the Memory agent's are material for the Assistant.
            return_directly: section.return_directly.unwrap_or(matches!(role, Role::Worker | Role::Coder)),
            thinking_budget: section.thinking_budget,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// `provider/model`; unset: `agents.default_model`, else the role's built-in default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelName>,
    #[serde(default = "default_max_iterations")]
    pub max_iterations: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<Temperature>,
    /// Seconds a turn of this agent may take.
    #[serde(default = "default_agent_timeout")]
    pub timeout: u64,
    /// Whether its model takes images (shared pictures are shown to it); unset: known from the
    /// model's name (Claude, GPT-4o and later, Gemini, and models named for vision do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vision: Option<bool>,
    /// The most tokens one answer may have: what the daemon asks the provider for at most, and
    /// what a request's budget reservation counts on.
    #[serde(default = "default_max_output_tokens")]
    pub max_output_tokens: u32,
    /// Whether a delegation to this agent makes its final answer the turn's reply — streamed
    /// to the user as written, with no second request of the Assistant — unless the Assistant
    /// asks otherwise; unset: yes for the Worker and the Coder, no for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_directly: Option<bool>,
    /// Tokens of extended thinking asked of its model before it answers (Anthropic's thinking,
    /// Gemini's thinking budget, Claude's on Bedrock and Vertex); 0: none. At least 1024 and
    /// below `max_output_tokens`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub thinking_budget: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

fn default_max_iterations() -> u32 {
    15
}

fn default_max_output_tokens() -> u32 {
    8192
}

fn default_agent_timeout() -> u64 {
    300
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SessionsConfig {
    pub archival: ArchivalConfig,
    /// Seconds without a message after which an active session counts as idle.
    pub idle_after: u64,
    /// The largest file a user may share into a session's `uploads/` (bytes).
    pub max_upload_bytes: u64,
    pub undo: super::UndoConfig,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            archival: ArchivalConfig::default(),
            idle_after: 1800,
            max_upload_bytes: 25 * 1024 * 1024,
            undo: super::UndoConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ArchivalConfig {
    /// Seconds since the last user message after which a session is archived.
    pub inactivity_timeout: u64,
    pub memory_extraction: bool,
    pub archive_storage: ArchiveStorage,
}

impl Default for ArchivalConfig {
    fn default() -> Self {
        ArchivalConfig { inactivity_timeout: 86_400, memory_extraction: true, archive_storage: ArchiveStorage::Local }
    }
}

/// Where archived sessions are kept: `local` only (spec §14.4 names s3 and gcs as future).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(try_from = "String", into = "String")]
pub enum ArchiveStorage {
    Local,
}

impl TryFrom<String> for ArchiveStorage {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        match value.as_str() {
            "local" => Ok(ArchiveStorage::Local),
            other => Err(format!(
                "archive_storage `{other}`: only `local` is offered: an archived session stays in \
                 the data dir's sessions/ID/, marked archived in data/state/sessions.json"
            )),
        }
    }
}

impl From<ArchiveStorage> for String {
    fn from(_: ArchiveStorage) -> String {
        "local".into()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SkillsConfig {
    /// Extra folders of system-wide skills, besides the data dir's `skills/`.
    pub directories: Vec<String>,
    /// Always on: a user's and a group's own skills are found where install puts them.
    pub auto_discover: AutoDiscover,
}

impl Default for SkillsConfig {
    fn default() -> Self {
        SkillsConfig { directories: vec![], auto_discover: AutoDiscover }
    }
}

/// `skills.auto_discover`, which can only be `true` (spec §16.1): the skills of
/// `users/{id}/skills` and `groups/{id}/skills` are always found, so an installed skill is
/// offered at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "bool", into = "bool")]
pub struct AutoDiscover;

impl TryFrom<bool> for AutoDiscover {
    type Error = &'static str;

    fn try_from(value: bool) -> Result<Self, Self::Error> {
        if value {
            Ok(AutoDiscover)
        } else {
            Err("auto_discover: false is not offered: a user's and a group's own skills (users/ID/skills, \
                 groups/ID/skills) are always found, so a skill installed is there at once; add system folders with \
                 skills.directories, or remove the key")
        }
    }
}

impl From<AutoDiscover> for bool {
    fn from(_: AutoDiscover) -> bool {
        true
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    pub error_handling: SchedulerErrorHandling,
    /// Seconds a slot may be late and still run as on time; older slots are missed ones and
    /// follow their task's `catch_up`.
    pub grace: u64,
    pub retention: SchedulerRetention,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            error_handling: SchedulerErrorHandling::default(),
            grace: 90,
            retention: SchedulerRetention::default(),
        }
    }
}

/// How long the scheduler's records are kept (pruned daily by a system task).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerRetention {
    /// Days a run record is kept.
    pub run_days: u64,
    /// Runs kept per task, however recent.
    pub runs_per_task: usize,
    /// Days a finished container's logs (data/logs/{container}) are kept.
    pub log_days: u64,
}

impl Default for SchedulerRetention {
    fn default() -> Self {
        SchedulerRetention { run_days: 30, runs_per_task: 1000, log_days: 14 }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerErrorHandling {
    /// Relative to the data dir.
    pub log_file: String,
    pub max_consecutive_failures: u32,
    pub notify_channel: NotifyChannel,
}

impl Default for SchedulerErrorHandling {
    fn default() -> Self {
        SchedulerErrorHandling {
            log_file: "data/logs/scheduler-errors.log".into(),
            max_consecutive_failures: 5,
            notify_channel: NotifyChannel::Log,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// Seconds.
    pub default_timeout: u64,
    pub timeout_overrides: BTreeMap<ToolName, u64>,
    /// Extra `exec` patterns refused besides the built-in ones (spec §8.5).
    pub blocked_patterns: Vec<String>,
    pub web_proxy: WebProxyConfig,
    /// Seconds an idle warm tool container is kept before it is removed.
    pub warm_idle_timeout: u64,
    /// `warm` (a resident runner per session) or `cold` (a fresh container per call).
    pub mode: ToolMode,
    /// How a session's workspace is held to the tool role's `disk` limit: `filesystem` (a
    /// loop-mounted image per session; needs root), `checked` (by the tool runner after each
    /// call) or `auto` (a filesystem where the daemon can mount, else checked).
    pub workspace_limit: WorkspaceLimit,
    /// The `browser` tool: one Chromium per session in a tool container of its own.
    pub browser: BrowserConfig,
}

/// `tools.browser` (DESIGN.md §12).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BrowserConfig {
    /// False: no agent is offered the browser, and a call is refused with a sentence.
    pub enabled: bool,
    /// Memory of a session's browser container, every page of it together.
    pub memory: ByteSize,
    /// Pages (tabs and windows) open at once; a page opening more has them closed.
    pub pages: u32,
    /// The JavaScript heap one page may grow to; past it the page crashes, not the browser.
    pub page_memory: ByteSize,
    /// The most bytes one download may have.
    pub max_download: ByteSize,
    /// The most bytes a person's browser profile (logins, the sites' stored data) may hold on
    /// the host; past it the sites' stored data goes, the logins stay.
    pub max_profile: ByteSize,
    /// Seconds an unused browser is kept; its container then goes (its logins stay).
    pub idle_timeout: u64,
}

impl Default for BrowserConfig {
    fn default() -> Self {
        BrowserConfig {
            enabled: true,
            memory: ByteSize(1 << 30),
            pages: 4,
            page_memory: ByteSize(512 << 20),
            max_download: ByteSize(100 << 20),
            max_profile: ByteSize(256 << 20),
            idle_timeout: 300,
        }
    }
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            default_timeout: 60,
            timeout_overrides: BTreeMap::from([
                (ToolName::Exec, 60),
                (ToolName::WebSearch, 30),
                (ToolName::WebFetch, 30),
                (ToolName::Browser, 120),
            ]),
            blocked_patterns: vec![],
            web_proxy: WebProxyConfig::default(),
            warm_idle_timeout: 600,
            mode: ToolMode::Warm,
            workspace_limit: WorkspaceLimit::Auto,
            browser: BrowserConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceLimit {
    Auto,
    Filesystem,
    Checked,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ToolMode {
    Warm,
    Cold,
}

/// The tools' names, shared with the policy and the runner.
pub use baaaht_proto::ToolName;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WebProxyConfig {
    pub max_redirects: u32,
    pub max_content_size: ByteSize,
    /// Requests per minute per session.
    pub rate_limit: u32,
    /// Seconds for a whole request including redirects.
    pub timeout: u64,
    /// Hosts, `host:port`s or CIDRs that may be reached even though they are private.
    pub allow: Vec<String>,
    pub search: SearchConfig,
}

impl Default for WebProxyConfig {
    fn default() -> Self {
        WebProxyConfig {
            max_redirects: 5,
            max_content_size: ByteSize(1_000_000),
            rate_limit: 60,
            timeout: 30,
            allow: vec![],
            search: SearchConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    pub backend: SearchBackend,
    /// Base URL of a SearXNG instance (backend `searxng`).
    pub searxng_url: String,
    /// Name of the secret holding the Brave Search API key (backend `brave`).
    pub brave_api_key: String,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            backend: SearchBackend::None,
            searxng_url: String::new(),
            brave_api_key: "${BRAVE_API_KEY}".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SearchBackend {
    None,
    Searxng,
    Brave,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// Where `baaaht-llm-gateway` runs.
    pub gateway: GatewayMode,
    /// Attempts per provider before the next one in its fallback chain.
    pub retry_attempts: u32,
    /// Seconds a request waits while the gateway starts or restarts before it is refused.
    pub queue_timeout: u64,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig { gateway: GatewayMode::Container, retry_attempts: 3, queue_timeout: 60 }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum GatewayMode {
    /// In a hardened container with no network, reaching its providers' hosts only through the
    /// daemon's tunnel: the only one given provider keys.
    Container,
    /// A child process on the host, for machines without a container engine.
    Process,
}

impl fmt::Display for GatewayMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GatewayMode::Container => "container",
            GatewayMode::Process => "process",
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    pub enabled: bool,
    /// Must be a loopback address; port 0 picks a free port (shown by `baaaht status`).
    pub listen: LoopbackAddr,
    /// Also write every figure to the log once a minute, for deployments without Prometheus.
    pub log: bool,
    /// Seconds between samples of the engine's container stats, sessions and memory stores.
    pub sample_interval: u64,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            enabled: true,
            listen: LoopbackAddr(SocketAddr::from(([127, 0, 0, 1], 9479))),
            log: false,
            sample_interval: 15,
        }
    }
}

/// The audit log (`data/logs/audit/YYYY-MM-DD.jsonl`): security-relevant events, append-only.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    pub enabled: bool,
    /// Days a daily file is kept; 0 keeps them all.
    pub retention_days: u32,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig { enabled: true, retention_days: 90 }
    }
}

/// OpenTelemetry export of the daemon's spans (OTLP over gRPC), off unless `endpoint` is set.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OtelConfig {
    /// The collector's OTLP/gRPC address, e.g. `http://127.0.0.1:4317`.
    pub endpoint: Option<OtlpEndpoint>,
    /// `service.name` of the exported spans.
    pub service_name: String,
}

impl Default for OtelConfig {
    fn default() -> Self {
        OtelConfig { endpoint: None, service_name: "baaahtd".into() }
    }
}

// ---- value types checked while parsing ----

/// An OTLP/gRPC collector address: `http://`, a host, and a port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct OtlpEndpoint(pub String);

impl TryFrom<String> for OtlpEndpoint {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        let unusable = |why: &str| {
            format!(
                "otel endpoint `{value}` {why}: write the collector's OTLP/gRPC address, e.g. http://127.0.0.1:4317"
            )
        };
        let uri: http::Uri = value.parse().map_err(|_unparsable| unusable("is not a URL"))?; // silent-ok: the message names the input
        match uri.scheme_str() {
            Some("http") => {}
            // The exporter is built without TLS: a collector beside the daemon needs none.
            Some("https") => return Err(unusable("uses https, which the exporter does not speak (plain gRPC only)")),
            _ => return Err(unusable("is not http://")),
        }
        if uri.host().is_none_or(str::is_empty) || uri.port_u16().is_none() {
            return Err(unusable("has no host and port"));
        }
        Ok(OtlpEndpoint(value))
    }
}

impl From<OtlpEndpoint> for String {
    fn from(value: OtlpEndpoint) -> String {
        value.0
    }
}

/// `container.max_concurrent`: a number, or `auto`: as many containers as the host's memory
/// holds with each at `resource_limits.memory`, beside [`HOST_RESERVE`] for the host, at least
/// [`AUTO_CAP_FLOOR`] and at most [`AUTO_CAP_CEILING`] (10, the specification's example, where the
/// memory cannot be read). A host of 24 GiB with containers of 512 MiB runs 44.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "NumberOrText<u32>", into = "NumberOrText<u32>")]
pub enum ContainerCap {
    #[default]
    Auto,
    Fixed(u32),
}

/// What `auto` leaves to the host itself: the daemon, the engine, the page cache.
pub const HOST_RESERVE: u64 = 2 << 30;
pub const AUTO_CAP_FLOOR: u32 = 4;
pub const AUTO_CAP_CEILING: u32 = 256;

/// A setting written as a number or as text (YAML `10` or `"10"`, an environment variable's
/// text, a word such as `auto` or `512m`).
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum NumberOrText<N> {
    Number(N),
    Text(String),
}

impl TryFrom<NumberOrText<u32>> for ContainerCap {
    type Error = String;

    fn try_from(input: NumberOrText<u32>) -> Result<Self, Self::Error> {
        match input {
            NumberOrText::Number(count) => Ok(ContainerCap::Fixed(count)),
            NumberOrText::Text(text) if text.trim() == "auto" => Ok(ContainerCap::Auto),
            NumberOrText::Text(text) => {
                text.trim().parse().map(ContainerCap::Fixed).map_err(|_unparsable| {
                    format!("invalid container count `{text}`: write a number such as 10, or auto")
                })
            }
        }
    }
}

impl From<ContainerCap> for NumberOrText<u32> {
    fn from(cap: ContainerCap) -> NumberOrText<u32> {
        match cap {
            ContainerCap::Auto => NumberOrText::Text("auto".into()),
            ContainerCap::Fixed(count) => NumberOrText::Number(count),
        }
    }
}

impl ContainerCap {
    /// The number of containers it allows on a host of `memory` bytes (none: unknown) where
    /// each may take `each` bytes.
    pub fn resolve(self, memory: Option<u64>, each: u64) -> u32 {
        match (self, memory) {
            (ContainerCap::Fixed(count), _) => count,
            (ContainerCap::Auto, None) => 10,
            (ContainerCap::Auto, Some(memory)) => {
                let fits = memory.saturating_sub(HOST_RESERVE) / each.max(1);
                fits.clamp(u64::from(AUTO_CAP_FLOOR), u64::from(AUTO_CAP_CEILING)) as u32
            }
        }
    }
}

impl ContainerConfig {
    /// The container cap in force on this host (`max_concurrent`, `auto` resolved against its
    /// memory).
    pub fn cap(&self) -> u32 {
        self.max_concurrent.resolve(crate::base::host::meminfo("MemTotal"), self.resource_limits.memory.0)
    }
}

/// A byte count written as `512m`, `1g`, `1MB`, `64KiB` or a plain number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "NumberOrText<u64>", into = "String")]
pub struct ByteSize(pub u64);

impl TryFrom<NumberOrText<u64>> for ByteSize {
    type Error = String;

    fn try_from(input: NumberOrText<u64>) -> Result<Self, Self::Error> {
        match input {
            NumberOrText::Number(bytes) => Ok(ByteSize(bytes)),
            NumberOrText::Text(text) => text.parse(),
        }
    }
}

impl std::str::FromStr for ByteSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || format!("invalid size `{text}`: write a number with an optional unit, e.g. 512m, 1g, 1MB");
        let trimmed = text.trim();
        let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
        let (number, unit) = trimmed.split_at(split);
        let number: f64 = number.parse().map_err(|_unparsable| invalid())?; // silent-ok: the message names the input
        let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            "kb" => 1000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            _ => return Err(invalid()),
        };
        let bytes = number * multiplier as f64;
        if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
            return Err(invalid());
        }
        Ok(ByteSize(bytes as u64))
    }
}

impl From<ByteSize> for String {
    fn from(size: ByteSize) -> String {
        size.to_string()
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0;
        for (unit, shift) in [("g", 30), ("m", 20), ("k", 10)] {
            if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
                return write!(f, "{}{unit}", bytes >> shift);
            }
        }
        if bytes >= 1_000_000 && bytes.is_multiple_of(1_000_000) {
            return write!(f, "{}MB", bytes / 1_000_000);
        }
        write!(f, "{bytes}")
    }
}

/// CPUs a container may use, as a number or a string ("1.0", "0.5").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "NumberOrText<f64>", into = "f64")]
pub struct CpuLimit(pub f64);

impl TryFrom<NumberOrText<f64>> for CpuLimit {
    type Error = String;

    fn try_from(input: NumberOrText<f64>) -> Result<Self, Self::Error> {
        let value = match input {
            NumberOrText::Number(value) => value,
            NumberOrText::Text(text) => text.trim().parse().map_err(|_unparsable| {
                format!("invalid cpu limit `{text}`: write a number of CPUs such as 1.0 or 0.5")
            })?, // silent-ok: the message names the input
        };
        if !(value > 0.0 && value <= 1024.0) {
            return Err(format!("invalid cpu limit {value}: it must be above 0 and at most 1024"));
        }
        Ok(CpuLimit(value))
    }
}

impl From<CpuLimit> for f64 {
    fn from(limit: CpuLimit) -> f64 {
        limit.0
    }
}

/// Sampling temperature between 0 and 2.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Temperature(pub f64);

impl TryFrom<f64> for Temperature {
    type Error = String;

    fn try_from(value: f64) -> Result<Self, Self::Error> {
        if (0.0..=2.0).contains(&value) {
            Ok(Temperature(value))
        } else {
            Err(format!("invalid temperature {value}: it must be between 0 and 2"))
        }
    }
}

impl From<Temperature> for f64 {
    fn from(value: Temperature) -> f64 {
        value.0
    }
}

/// A model named `{provider}/{model}` (spec §7.2), or an alias of providers.yaml's `models:`
/// (one model several providers offer), written without a provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ModelName(pub String);

impl ModelName {
    /// The provider; empty for an alias.
    pub fn provider(&self) -> &str {
        self.0.split_once('/').map_or("", |(provider, _)| provider)
    }

    /// Whether the name is an alias (checked against providers.yaml when the files are read).
    pub fn is_alias(&self) -> bool {
        !self.0.contains('/')
    }
}

/// Whether `model` (`provider/model`) is written as a model can be: letters, digits and
/// `/-_.:@`, its last segment not `.` or `..` (it becomes part of a cloud's address).
pub fn is_model_id(model: &str) -> bool {
    !model.is_empty()
        && model.len() <= 200
        && model.chars().all(|c| c.is_ascii_alphanumeric() || "/-_.:@".contains(c))
        && !matches!(model.rsplit('/').next(), Some("" | "." | ".."))
}

/// Whether `name` may be a model alias: letters, digits, `.`, `_`, `-`, `:`, `@`.
pub fn is_alias_name(name: &str) -> bool {
    !matches!(name, "" | "." | "..")
        && name.len() <= 128
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '@'))
}

impl TryFrom<String> for ModelName {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        match value.split_once('/') {
            Some((provider, model)) if !provider.is_empty() && !matches!(model, "" | "." | "..") => {
                Ok(ModelName(value))
            }
            None if is_alias_name(&value) => Ok(ModelName(value)),
            _ => Err(format!(
                "invalid model `{value}`: write it as provider/model, e.g. anthropic/claude-sonnet-4-20250514, \
                 or name an alias of providers.yaml's `models:`"
            )),
        }
    }
}

impl From<ModelName> for String {
    fn from(value: ModelName) -> String {
        value.0
    }
}

/// A TCP address on the loopback interface: metrics are never exposed beyond this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LoopbackAddr(pub SocketAddr);

impl TryFrom<String> for LoopbackAddr {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        let address: SocketAddr = value
            .parse()
            .map_err(|_unparsable| format!("invalid address `{value}`: write ip:port, e.g. 127.0.0.1:9479"))?; // silent-ok: the message names the input
        if !address.ip().is_loopback() {
            return Err(format!(
                "address `{value}` is not a loopback address: metrics are served on 127.0.0.1 or [::1] only"
            ));
        }
        Ok(LoopbackAddr(address))
    }
}

impl From<LoopbackAddr> for String {
    fn from(value: LoopbackAddr) -> String {
        value.0.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes() {
        let cases: &[(&str, Option<u64>)] = &[
            ("512m", Some(512 << 20)),
            ("1g", Some(1 << 30)),
            ("1MB", Some(1_000_000)),
            ("64KiB", Some(64 << 10)),
            ("100", Some(100)),
            ("1.5g", Some(3 << 29)),
            ("12x", None),
            ("", None),
            ("m", None),
            ("-1m", None),
        ];
        for (text, expected) in cases {
            let parsed = text.parse::<ByteSize>().ok().map(|size| size.0);
            assert_eq!(parsed, *expected, "{text}");
        }
        for size in [512u64 << 20, 1 << 30, 1_000_000, 123] {
            assert_eq!(ByteSize(size).to_string().parse::<ByteSize>(), Ok(ByteSize(size)));
        }
    }

    #[test]
    fn models_and_addresses() {
        assert!(ModelName::try_from("openai/gpt-4o".to_string()).is_ok());
        assert!(ModelName::try_from("openrouter/meta-llama/llama-3.1-70b".to_string()).is_ok());
        // A name without a provider is an alias (checked against providers.yaml's `models:`).
        assert!(ModelName::try_from("claude-sonnet".to_string()).is_ok_and(|name| name.is_alias()));
        assert!(ModelName::try_from("two words".to_string()).is_err());
        assert!(ModelName::try_from("/x".to_string()).is_err());
        // A dot segment would climb out of the model's place in a cloud's address.
        for climbing in ["azure/..", "azure/.", "..", "."] {
            assert!(ModelName::try_from(climbing.to_string()).is_err(), "{climbing}");
        }
        assert!(LoopbackAddr::try_from("127.0.0.1:0".to_string()).is_ok());
        assert!(LoopbackAddr::try_from("[::1]:9000".to_string()).is_ok());
        assert!(LoopbackAddr::try_from("0.0.0.0:9479".to_string()).is_err());
        assert!(OtlpEndpoint::try_from("http://127.0.0.1:4317".to_string()).is_ok());
        assert!(OtlpEndpoint::try_from("http://otel.home.arpa:4317".to_string()).is_ok());
        let refused = OtlpEndpoint::try_from("https://otel.home.arpa:4317".to_string()).expect_err("no TLS");
        assert!(refused.contains("plain gRPC only"), "{refused}");
        let refused = OtlpEndpoint::try_from("127.0.0.1:4317".to_string()).expect_err("no scheme");
        assert!(refused.contains("e.g. http://127.0.0.1:4317"), "{refused}");
        assert!(OtlpEndpoint::try_from("http://collector".to_string()).is_err());
        assert!(LoopbackAddr::try_from("localhost".to_string()).is_err());
    }
}
