//! Who is calling, and what they may do (DESIGN.md §9.1, spec §17.3).
//!
//! Four kinds of principal: host clients (CLI, TUI), identified by their socket's peer
//! credentials and trusted as admin; containers, by the socket they connect on (each container
//! gets its own, see `sockets.rs`) *and* a bearer token that must match that socket, acting for
//! their own role, session and context only; gateways, by their own socket and token, never
//! admin by themselves; and the end users a gateway names on each call, resolved to canonical
//! users, who act in their own context and their groups' unless they are admins
//! (`system.admin_users`). [`authorize`] holds the privilege table of spec §17.3 for all of
//! them. This module decides; it never touches sockets and never sees tonic types.

use std::fmt;
use std::sync::Arc;

/// The uid every container process runs as (DESIGN.md §5.4).
pub const CONTAINER_UID: u32 = 1000;

/// Container roles, also the keys of `container.role_limits` in config.yaml.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Assistant,
    Worker,
    Researcher,
    Coder,
    Memory,
    Heartbeat,
    /// The resident tool runner of a session's tool container.
    Tool,
    /// The LLM gateway: served by the daemon's requests, it calls no RPC itself.
    LlmGateway,
    /// An MCP server's container: its relay carries the server's stdio over RelayMcp.
    Mcp,
    /// A web or Slack gateway's container: it calls the daemon on its gateway socket, as the
    /// gateway, never with a container token.
    Gateway,
    /// The speech container: served by the daemon's requests (voice notes heard, answers
    /// spoken), it calls no RPC itself.
    Speech,
}

impl Role {
    pub const AGENTS: &'static [Role] =
        &[Role::Assistant, Role::Worker, Role::Researcher, Role::Coder, Role::Memory, Role::Heartbeat];
    pub const ALL: &'static [Role] = &[
        Role::Assistant,
        Role::Worker,
        Role::Researcher,
        Role::Coder,
        Role::Memory,
        Role::Heartbeat,
        Role::Tool,
        Role::LlmGateway,
        Role::Mcp,
        Role::Gateway,
        Role::Speech,
    ];

    /// The role whose [`Role::as_str`] is `name` (as in a container's labels).
    pub fn named(name: &str) -> Option<Role> {
        Role::ALL.iter().copied().find(|role| role.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Assistant => "assistant",
            Role::Worker => "worker",
            Role::Researcher => "researcher",
            Role::Coder => "coder",
            Role::Memory => "memory",
            Role::Heartbeat => "heartbeat",
            Role::Tool => "tool",
            Role::LlmGateway => "llm_gateway",
            Role::Mcp => "mcp",
            Role::Gateway => "gateway",
            Role::Speech => "speech",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContextKind {
    User,
    Group,
}

/// A user or a group: the unit of data isolation (spec §17).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Context {
    pub kind: ContextKind,
    pub id: String,
}

impl Context {
    pub fn user(id: impl Into<String>) -> Context {
        Context { kind: ContextKind::User, id: id.into() }
    }

    pub fn group(id: impl Into<String>) -> Context {
        Context { kind: ContextKind::Group, id: id.into() }
    }
}

impl Context {
    /// The context `text` names as it is written (`user:alice`, `group:family`; its `Display`).
    pub fn named(text: &str) -> Option<Context> {
        match text.split_once(':')? {
            ("user", id) => Some(Context::user(id)),
            ("group", id) => Some(Context::group(id)),
            _ => None,
        }
    }
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ContextKind::User => "user",
            ContextKind::Group => "group",
        };
        write!(f, "{kind}:{}", self.id)
    }
}

/// User, group, session and container ids become folder names: they must never be able to
/// name another folder.
pub fn is_valid_context_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id != "."
        && id != ".."
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// A correlation id taken from a caller or a container's file: short, printable, no separators
/// that could forge a log line's structure.
pub fn is_valid_correlation_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

/// What a container is, fixed when its socket is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerIdentity {
    /// Container name, also the name of its socket folder.
    pub name: String,
    pub role: Role,
    pub session_id: String,
    pub context: Context,
}

/// The authenticated caller of one request.
#[derive(Debug, Clone)]
pub enum Caller {
    Host(HostPeer),
    Container(Arc<ContainerIdentity>),
    Gateway(Arc<GatewayCaller>),
}

/// A gateway, and the end user it names on this call (if any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayCaller {
    /// The gateway's registered name.
    pub gateway: String,
    /// `web` or `slack`: the channel its users' messages come from.
    pub channel: &'static str,
    pub user: Option<EndUser>,
}

/// An end user, resolved from the channel identity a gateway named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndUser {
    /// The channel identity, e.g. `slack:T0123:U0456`.
    pub identity: String,
    /// The canonical user id, `u-…`: the user's context is `user:{id}`.
    pub id: String,
    /// Listed in `system.admin_users`.
    pub admin: bool,
    /// The groups the user is a member of.
    pub groups: Vec<String>,
}

impl EndUser {
    /// Whether `context` is the user's own or one of their groups'.
    pub fn owns(&self, context: &Context) -> bool {
        match context.kind {
            ContextKind::User => context.id == self.id,
            ContextKind::Group => self.groups.contains(&context.id),
        }
    }

    pub fn context(&self) -> Context {
        Context::user(self.id.clone())
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Caller::Host(peer) => write!(f, "host uid {}", peer.uid),
            Caller::Container(identity) => {
                write!(f, "{} container {} ({})", identity.role, identity.name, identity.context)
            }
            Caller::Gateway(call) => match &call.user {
                Some(user) => write!(f, "gateway {} for user {}", call.gateway, user.id),
                None => write!(f, "gateway {}", call.gateway),
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostPeer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
}

/// What a person is told when who they are could not be recorded (the detail is in the log).
pub const NOT_RECORDED: &str = "baaaht could not record who you are; the daemon's log says why";
/// What a person is told on their first contact while they wait to be admitted.
pub const WAITING: &str = "You are not known to this assistant yet: the people who run it have been asked to let you \
                           in. Write again once they have.";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing bearer token: containers must send `authorization: Bearer $BAAAHT_CONTAINER_TOKEN`")]
    MissingToken,
    #[error("unknown or revoked container token")]
    InvalidToken,
    #[error("bearer tokens are only accepted on the socket of the container they were issued to")]
    TokenOnHostSocket,
    #[error("the peer's credentials could not be read, so the connection is refused")]
    NoPeerCredentials,
    #[error("uid {uid} may not use this socket: only {allowed}")]
    PeerNotAllowed { uid: u32, allowed: String },
    #[error("{operation} is for {expected}; a {role} container may not call it")]
    RoleNotAllowed { operation: &'static str, role: Role, expected: String },
    #[error("{operation} is for containers; host clients have their own RPCs")]
    ContainerOnly { operation: &'static str },
    #[error("context {target} is outside this container's context {own}")]
    OtherContext { own: String, target: String },
    #[error("session {target} is outside this container's session {own}")]
    OtherSession { own: String, target: String },
    #[error("a gateway token is valid only on its own gateway's socket")]
    GatewayTokenElsewhere,
    #[error("gateway {gateway} may only name users of its own namespace ({namespace}…), not `{named}`")]
    OutsideNamespace { gateway: String, namespace: String, named: String },
    #[error("{operation} needs the end user: send the x-baaaht-user metadata")]
    NoEndUser { operation: &'static str },
    #[error("{operation} is for host clients (the daemon's own machine)")]
    HostOnly { operation: &'static str },
    #[error("{operation} is for agent containers, not gateways")]
    NotForGateways { operation: &'static str },
    #[error("{operation} needs an admin ({what}); ask one, or be listed in system.admin_users")]
    AdminOnly { operation: &'static str, what: &'static str },
    /// Said without naming whose it is: a refusal never shows another person's user id.
    #[error("that is not yours: you may {what} in your own context and your groups' only")]
    NotYours { context: String, what: &'static str },
    #[error("the ID token is refused: {0}")]
    IdToken(String),
    #[error("{0}")]
    Unresolvable(String),
    /// A first contact that could not be recorded (the detail is in the log).
    #[error("{}", NOT_RECORDED)]
    Unrecorded { disk_full: bool },
    /// A first contact its gateway does not admit: waiting for an admin.
    #[error("{}", WAITING)]
    NotAdmitted,
}

impl AuthError {
    /// True for errors that mean "who are you?" rather than "you may not".
    pub fn is_unauthenticated(&self) -> bool {
        matches!(
            self,
            AuthError::MissingToken
                | AuthError::InvalidToken
                | AuthError::TokenOnHostSocket
                | AuthError::GatewayTokenElsewhere
                | AuthError::IdToken(_)
        )
    }
}

/// Which host users may use the host socket.
#[derive(Debug, Clone)]
pub struct HostPolicy {
    pub daemon_uid: u32,
    /// `orchestrator.socket.client_group`, resolved.
    pub client_group: Option<(String, u32)>,
}

impl HostPolicy {
    /// Root, the daemon's own user, and members of the client group are allowed.
    pub fn check(&self, uid: u32, gid: u32, pid: Option<i32>) -> Result<HostPeer, AuthError> {
        let peer = HostPeer { uid, gid, pid };
        if uid == 0 || uid == self.daemon_uid {
            return Ok(peer);
        }
        if let Some((_, group)) = &self.client_group {
            if gid == *group
                || pid.is_some_and(|pid| baaaht_proto::host::process_groups(&pid.to_string()).contains(group))
            {
                return Ok(peer);
            }
        }
        let mut allowed = format!("root and uid {}", self.daemon_uid);
        if let Some((name, _)) = &self.client_group {
            allowed.push_str(&format!(" and members of group {name}"));
        } else {
            allowed.push_str(" (set orchestrator.socket.client_group to admit a group)");
        }
        Err(AuthError::PeerNotAllowed { uid, allowed })
    }
}

/// Every RPC, for authorization and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    RegisterAgent,
    ReportStatus,
    TakeTurns,
    SendMessage,
    RouteToAgent,
    DelegateToAgent,
    RequestToolExecution,
    ProxyWebRequest,
    ServeTools,
    RelayMcp,
    StreamLlm,
    ScheduleTask,
    ListTasks,
    GetTask,
    PauseTask,
    ResumeTask,
    CancelTask,
    UpdateTask,
    GetNextRuns,
    ListTaskRuns,
    ListInbox,
    GetSkillManifest,
    GetSkillContent,
    InstallSkill,
    /// InstallSkill from a folder on the host (the host's own clients only).
    InstallSkillFromFolder,
    WriteMemory,
    SearchMemory,
    DeleteMemory,
    /// Moves an entry out of quarantine (a context's people, never an agent).
    ConfirmMemory,
    SubscribeEvents,
    PublishEvent,
    GetStatus,
    SendUserMessage,
    UploadFile,
    ListSessions,
    /// Full-text search over a context's sessions' messages.
    SearchSessions,
    ReadSession,
    /// A file an agent sent to a conversation.
    DownloadFile,
    NewSession,
    ResumeSession,
    ForkSession,
    /// Undo or redo of a conversation's last turns.
    Undo,
    ArchiveSession,
    CompactSession,
    SwitchModel,
    ListModelChoices,
    CancelTurn,
    AnswerApproval,
    RunSelfTest,
    WhoAmI,
    UpdateProfile,
    StartLink,
    ConfirmLink,
    EnsureChannelGroup,
    GetGatewaySecrets,
    ListUsers,
    ShowUser,
    LinkIdentities,
    UnlinkIdentity,
    AdmitIdentity,
    CreateGroup,
    ListGroups,
    ShowGroup,
    AddGroupMember,
    RemoveGroupMember,
    DeactivateGroup,
    ReactivateGroup,
    GetUsage,
    GetConfig,
    RestartContainers,
    AddGateway,
    ListGateways,
    RemoveGateway,
    RestartGateway,
    SearchAudit,
    ListMcpServers,
    ListMcpTools,
    PutMcpServer,
    RemoveMcpServer,
    ListEgressRules,
    ChangeEgressRule,
}

use Role::{Assistant, Coder, Heartbeat, Memory, Researcher, Tool, Worker};

/// The rows of spec §17.3's privilege table: what a user may do, and whether on their own
/// context (and their groups') or only as an admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    SendMessages,
    ReadSessions,
    WriteSessions,
    ReadMemory,
    WriteMemory,
    InstallUserSkills,
    InstallGroupSkills,
    ManageOwnTasks,
    ManageAllTasks,
    ManageMountAllowlist,
    RegisterGroups,
    DeactivateGroups,
    ManageProviders,
    ModifyConfig,
    RestartContainers,
    ViewStatus,
    /// Users and their identities (beyond the table: an admin's, like groups).
    ManageUsers,
}

impl Capability {
    /// Whether only an admin has it (else a user has it in their own contexts).
    pub fn admin_only(self) -> bool {
        matches!(
            self,
            Capability::InstallGroupSkills
                | Capability::ManageAllTasks
                | Capability::ManageMountAllowlist
                | Capability::RegisterGroups
                | Capability::DeactivateGroups
                | Capability::ManageProviders
                | Capability::ModifyConfig
                | Capability::RestartContainers
                | Capability::ManageUsers
        )
    }

    /// As in "you may {what}".
    pub fn what(self) -> &'static str {
        match self {
            Capability::SendMessages => "send messages",
            Capability::ReadSessions => "read sessions",
            Capability::WriteSessions => "change sessions",
            Capability::ReadMemory => "read memory",
            Capability::WriteMemory => "write memory",
            Capability::InstallUserSkills => "install skills",
            Capability::InstallGroupSkills => "install group skills",
            Capability::ManageOwnTasks => "manage tasks",
            Capability::ManageAllTasks => "manage every task",
            Capability::ManageMountAllowlist => "manage the mount allowlist",
            Capability::RegisterGroups => "register groups",
            Capability::DeactivateGroups => "deactivate groups",
            Capability::ManageProviders => "manage providers",
            Capability::ModifyConfig => "change the system configuration",
            Capability::RestartContainers => "restart containers",
            Capability::ViewStatus => "view the status",
            Capability::ManageUsers => "manage users",
        }
    }
}

impl Operation {
    pub fn name(self) -> &'static str {
        match self {
            Operation::RegisterAgent => "RegisterAgent",
            Operation::ReportStatus => "ReportStatus",
            Operation::TakeTurns => "TakeTurns",
            Operation::SendMessage => "SendMessage",
            Operation::RouteToAgent => "RouteToAgent",
            Operation::DelegateToAgent => "DelegateToAgent",
            Operation::RequestToolExecution => "RequestToolExecution",
            Operation::ProxyWebRequest => "ProxyWebRequest",
            Operation::ServeTools => "ServeTools",
            Operation::RelayMcp => "RelayMcp",
            Operation::StreamLlm => "StreamLLM",
            Operation::ScheduleTask => "ScheduleTask",
            Operation::ListTasks => "ListTasks",
            Operation::GetTask => "GetTask",
            Operation::PauseTask => "PauseTask",
            Operation::ResumeTask => "ResumeTask",
            Operation::CancelTask => "CancelTask",
            Operation::UpdateTask => "UpdateTask",
            Operation::GetNextRuns => "GetNextRuns",
            Operation::ListTaskRuns => "ListTaskRuns",
            Operation::ListInbox => "ListInbox",
            Operation::GetSkillManifest => "GetSkillManifest",
            Operation::GetSkillContent => "GetSkillContent",
            Operation::InstallSkill => "InstallSkill",
            Operation::InstallSkillFromFolder => "InstallSkill (from a folder on the host)",
            Operation::WriteMemory => "WriteMemory",
            Operation::SearchMemory => "SearchMemory",
            Operation::SearchSessions => "SearchSessions",
            Operation::DeleteMemory => "DeleteMemory",
            Operation::ConfirmMemory => "ConfirmMemory",
            Operation::SubscribeEvents => "SubscribeEvents",
            Operation::PublishEvent => "PublishEvent",
            Operation::GetStatus => "GetStatus",
            Operation::SendUserMessage => "SendUserMessage",
            Operation::UploadFile => "UploadFile",
            Operation::ListSessions => "ListSessions",
            Operation::ReadSession => "ReadSession",
            Operation::DownloadFile => "DownloadFile",
            Operation::NewSession => "NewSession",
            Operation::ResumeSession => "ResumeSession",
            Operation::ForkSession => "ForkSession",
            Operation::Undo => "Undo",
            Operation::ArchiveSession => "ArchiveSession",
            Operation::CompactSession => "CompactSession",
            Operation::SwitchModel => "SwitchModel",
            Operation::ListModelChoices => "ListModelChoices",
            Operation::CancelTurn => "CancelTurn",
            Operation::AnswerApproval => "AnswerApproval",
            Operation::RunSelfTest => "RunSelfTest",
            Operation::WhoAmI => "WhoAmI",
            Operation::UpdateProfile => "UpdateProfile",
            Operation::StartLink => "StartLink",
            Operation::ConfirmLink => "ConfirmLink",
            Operation::EnsureChannelGroup => "EnsureChannelGroup",
            Operation::GetGatewaySecrets => "GetGatewaySecrets",
            Operation::ListUsers => "ListUsers",
            Operation::ShowUser => "ShowUser",
            Operation::LinkIdentities => "LinkIdentities",
            Operation::AdmitIdentity => "AdmitIdentity",
            Operation::UnlinkIdentity => "UnlinkIdentity",
            Operation::CreateGroup => "CreateGroup",
            Operation::ListGroups => "ListGroups",
            Operation::ShowGroup => "ShowGroup",
            Operation::AddGroupMember => "AddGroupMember",
            Operation::RemoveGroupMember => "RemoveGroupMember",
            Operation::DeactivateGroup => "DeactivateGroup",
            Operation::ReactivateGroup => "ReactivateGroup",
            Operation::GetUsage => "GetUsage",
            Operation::GetConfig => "GetConfig",
            Operation::RestartContainers => "RestartContainers",
            Operation::AddGateway => "AddGateway",
            Operation::ListGateways => "ListGateways",
            Operation::RemoveGateway => "RemoveGateway",
            Operation::RestartGateway => "RestartGateway",
            Operation::SearchAudit => "SearchAudit",
            Operation::ListMcpServers => "ListMcpServers",
            Operation::ListMcpTools => "ListMcpTools",
            Operation::PutMcpServer => "PutMcpServer",
            Operation::RemoveMcpServer => "RemoveMcpServer",
            Operation::ListEgressRules => "ListEgressRules",
            Operation::ChangeEgressRule => "ChangeEgressRule",
        }
    }

    /// The container roles that may call this operation (spec §6.1, §9.1.1, §13.3).
    pub fn container_roles(self) -> &'static [Role] {
        match self {
            Operation::RegisterAgent | Operation::ReportStatus | Operation::TakeTurns | Operation::StreamLlm => {
                Role::AGENTS
            }
            Operation::SendMessage => &[Worker, Heartbeat],
            Operation::DelegateToAgent => &[Assistant],
            Operation::RequestToolExecution => &[Worker, Researcher, Coder, Memory, Heartbeat],
            Operation::ProxyWebRequest | Operation::ServeTools => &[Tool],
            Operation::RelayMcp => &[Role::Mcp],
            operation if operation.is_task() => &[Assistant, Worker],
            Operation::GetSkillManifest | Operation::GetSkillContent => &[Assistant, Worker, Researcher, Coder],
            // By asking: the turn's people answer its review (`work::skills::asked`).
            Operation::InstallSkill => &[Worker],
            Operation::WriteMemory | Operation::DeleteMemory => &[Memory],
            Operation::SearchMemory | Operation::SearchSessions => &[Assistant, Memory],
            _ => &[],
        }
    }

    /// The Tasks service's RPCs.
    fn is_task(self) -> bool {
        matches!(
            self,
            Operation::ScheduleTask
                | Operation::ListTasks
                | Operation::GetTask
                | Operation::PauseTask
                | Operation::ResumeTask
                | Operation::CancelTask
                | Operation::UpdateTask
                | Operation::GetNextRuns
                | Operation::ListTaskRuns
        )
    }

    /// Whether host clients may call it; the agent-side RPCs need a container identity.
    pub fn host_allowed(self) -> bool {
        !matches!(
            self,
            Operation::RegisterAgent
                | Operation::ReportStatus
                | Operation::TakeTurns
                | Operation::DelegateToAgent
                | Operation::RequestToolExecution
                | Operation::ProxyWebRequest
                | Operation::ServeTools
                | Operation::RelayMcp
                | Operation::StreamLlm
                | Operation::WhoAmI
                | Operation::UpdateProfile
                | Operation::StartLink
                | Operation::ConfirmLink
                | Operation::EnsureChannelGroup
                | Operation::GetGatewaySecrets
        )
    }

    /// What it means in the privilege table for a user; `None` for what no end user calls
    /// (the agents' side, the gateways' own, the host's).
    pub fn capability(self, target: &Target<'_>) -> Option<Capability> {
        let group_target = target.context.is_some_and(|context| context.kind == ContextKind::Group);
        Some(match self {
            Operation::SendUserMessage
            | Operation::UploadFile
            | Operation::RouteToAgent
            | Operation::PublishEvent
            | Operation::CancelTurn
            | Operation::AnswerApproval => Capability::SendMessages,
            Operation::ListSessions
            | Operation::SearchSessions
            | Operation::ReadSession
            | Operation::DownloadFile
            | Operation::SubscribeEvents
            | Operation::ListInbox
            | Operation::ListModelChoices => Capability::ReadSessions,
            Operation::NewSession
            | Operation::ResumeSession
            | Operation::ForkSession
            | Operation::Undo
            | Operation::ArchiveSession
            | Operation::CompactSession
            | Operation::SwitchModel => Capability::WriteSessions,
            Operation::SearchMemory | Operation::GetSkillManifest | Operation::GetSkillContent => {
                Capability::ReadMemory
            }
            Operation::WriteMemory | Operation::DeleteMemory | Operation::ConfirmMemory => Capability::WriteMemory,
            Operation::InstallSkill if group_target => Capability::InstallGroupSkills,
            Operation::InstallSkill => Capability::InstallUserSkills,
            // Tasks of a context are its own to manage; tasks of no named context are everyone's.
            operation if operation.is_task() && target.context.is_some() => Capability::ManageOwnTasks,
            operation if operation.is_task() => Capability::ManageAllTasks,
            Operation::GetConfig => match target.config_section {
                Some("allowlist") => Capability::ManageMountAllowlist,
                Some("providers") => Capability::ManageProviders,
                _ => Capability::ModifyConfig,
            },
            Operation::CreateGroup => Capability::RegisterGroups,
            Operation::DeactivateGroup | Operation::ReactivateGroup => Capability::DeactivateGroups,
            Operation::RestartContainers | Operation::RunSelfTest => Capability::RestartContainers,
            Operation::GetStatus => Capability::ViewStatus,
            Operation::GetUsage | Operation::ListGroups | Operation::ShowGroup | Operation::ShowUser => {
                Capability::ReadSessions
            }
            Operation::ListUsers
            | Operation::LinkIdentities
            | Operation::AdmitIdentity
            | Operation::UnlinkIdentity
            | Operation::AddGroupMember
            | Operation::RemoveGroupMember => Capability::ManageUsers,
            _ => return None,
        })
    }
}

/// What a request touches, when it names it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Target<'a> {
    pub context: Option<&'a Context>,
    pub session_id: Option<&'a str>,
    /// The context of the session `session_id` names, as the server looked it up.
    pub session_context: Option<&'a Context>,
    /// For GetConfig: which part (`config`, `providers`, `allowlist`).
    pub config_section: Option<&'a str>,
}

/// Decides whether `caller` may perform `operation` on `target` (spec §17.3 for users).
pub fn authorize(caller: &Caller, operation: Operation, target: Target<'_>) -> Result<(), AuthError> {
    match caller {
        // Host clients are trusted by the host (spec §17.2: TUI access implies host trust).
        Caller::Host(_) if operation.host_allowed() => Ok(()),
        Caller::Host(_) => Err(AuthError::ContainerOnly { operation: operation.name() }),
        Caller::Container(identity) => authorize_container(identity, operation, target),
        Caller::Gateway(call) => authorize_gateway(call, operation, target),
    }
}

fn authorize_container(
    identity: &ContainerIdentity,
    operation: Operation,
    target: Target<'_>,
) -> Result<(), AuthError> {
    let roles = operation.container_roles();
    if !roles.contains(&identity.role) {
        let expected = if roles.is_empty() {
            "host clients".to_string()
        } else {
            let names: Vec<&str> = roles.iter().map(|role| role.as_str()).collect();
            format!("{} containers", names.join("/"))
        };
        return Err(AuthError::RoleNotAllowed { operation: operation.name(), role: identity.role, expected });
    }
    if let Some(context) = target.context {
        if *context != identity.context {
            return Err(AuthError::OtherContext { own: identity.context.to_string(), target: context.to_string() });
        }
    }
    if let Some(session) = target.session_id.filter(|session| !session.is_empty()) {
        if session != identity.session_id {
            return Err(AuthError::OtherSession { own: identity.session_id.clone(), target: session.to_string() });
        }
    }
    Ok(())
}

fn authorize_gateway(call: &GatewayCaller, operation: Operation, target: Target<'_>) -> Result<(), AuthError> {
    let name = operation.name();
    match operation {
        // What a gateway asks for its user.
        // Its own credentials: the gateway's, whoever it names.
        Operation::GetGatewaySecrets => return Ok(()),
        Operation::WhoAmI
        | Operation::UpdateProfile
        | Operation::StartLink
        | Operation::ConfirmLink
        | Operation::EnsureChannelGroup => {
            return call.user.as_ref().map(drop).ok_or(AuthError::NoEndUser { operation: name });
        }
        // Registering gateways, reading the audit log and the host's folders are the host's alone.
        Operation::AddGateway
        | Operation::InstallSkillFromFolder
        | Operation::ListGateways
        | Operation::RemoveGateway
        | Operation::RestartGateway
        | Operation::SearchAudit
        | Operation::ListMcpServers
        | Operation::ListMcpTools
        | Operation::PutMcpServer
        | Operation::RemoveMcpServer
        | Operation::ListEgressRules
        | Operation::ChangeEgressRule => {
            return Err(AuthError::HostOnly { operation: name });
        }
        _ => {}
    }
    let Some(capability) = operation.capability(&target) else {
        return Err(AuthError::NotForGateways { operation: name });
    };
    let Some(user) = &call.user else {
        // A gateway by itself may see the status (its health check), nothing else.
        return if capability == Capability::ViewStatus {
            Ok(())
        } else {
            Err(AuthError::NoEndUser { operation: name })
        };
    };
    if user.admin {
        return Ok(());
    }
    if capability.admin_only() {
        return Err(AuthError::AdminOnly { operation: name, what: capability.what() });
    }
    for context in [target.context, target.session_context].into_iter().flatten() {
        if !user.owns(context) {
            return Err(AuthError::NotYours { context: context.to_string(), what: capability.what() });
        }
    }
    Ok(())
}

/// A fresh 256-bit bearer token, hex encoded.
pub fn new_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// Hex SHA-256 of a token.
pub fn token_sha256(token: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Compares two tokens in time independent of where they differ.
pub fn tokens_equal(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The turn a container is working on, for the events its calls produce.
#[derive(Debug, Clone)]
pub struct Live {
    pub session: String,
    pub context: Context,
    pub role: Role,
    pub turn_id: String,
    pub correlation_id: String,
    /// The user turn this work belongs to (a delegated task's is its Assistant's turn).
    pub user_turn: String,
    /// The message that turn answers (its entry in the session's log; empty for a scheduled
    /// run or an archival): a mark of the turn stays on it, for the turns after it.
    pub entry: String,
    /// The user whose message the turn answers (none: a scheduled run, an archival): in a
    /// group, everyone else's words are not theirs (DESIGN.md §10.3).
    pub asker: Option<String>,
    /// Whether what this agent writes is the turn's reply, streamed to the context's channels
    /// as written (the Assistant's; a delegate's whose answer returns directly).
    pub speaks: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(role: Role, context: Context) -> Caller {
        Caller::Container(Arc::new(ContainerIdentity {
            name: "c1".into(),
            role,
            session_id: "s-alice".into(),
            context,
        }))
    }

    #[test]
    fn authorization_table() {
        let alice = Context::user("alice");
        let bob = Context::user("bob");
        let host = Caller::Host(HostPeer { uid: 1000, gid: 1000, pid: None });
        // (caller, operation, target context, target session, allowed?)
        type Case<'a> = (Caller, Operation, Option<&'a Context>, Option<&'a str>, bool);
        let family = Context::group("family");
        let cases: Vec<Case<'_>> = vec![
            (host.clone(), Operation::GetStatus, None, None, true),
            (host.clone(), Operation::ListSessions, Some(&bob), None, true),
            (host.clone(), Operation::StreamLlm, None, None, false),
            (host.clone(), Operation::RequestToolExecution, None, None, false),
            (container(Assistant, alice.clone()), Operation::DelegateToAgent, None, None, true),
            (container(Worker, alice.clone()), Operation::DelegateToAgent, None, None, false),
            (container(Coder, alice.clone()), Operation::RequestToolExecution, None, Some("s-alice"), true),
            (container(Coder, alice.clone()), Operation::RequestToolExecution, None, Some("s-bob"), false),
            (container(Assistant, alice.clone()), Operation::RequestToolExecution, None, None, false),
            (container(Tool, alice.clone()), Operation::ProxyWebRequest, None, None, true),
            (container(Tool, alice.clone()), Operation::StreamLlm, None, None, false),
            (container(Worker, alice.clone()), Operation::GetSkillManifest, Some(&alice), None, true),
            (container(Worker, alice.clone()), Operation::GetSkillManifest, Some(&bob), None, false),
            (container(Memory, alice.clone()), Operation::GetSkillManifest, Some(&alice), None, false),
            (container(Worker, alice.clone()), Operation::ScheduleTask, Some(&alice), None, true),
            (container(Worker, alice.clone()), Operation::GetStatus, None, None, false),
            (container(Worker, alice.clone()), Operation::SubscribeEvents, Some(&alice), None, false),
            (container(Worker, Context::group("alice")), Operation::ListTasks, Some(&alice), None, false),
            // An agent installs a skill only by asking, and only for its own context.
            (container(Worker, alice.clone()), Operation::InstallSkill, Some(&alice), None, true),
            (container(Worker, alice.clone()), Operation::InstallSkill, Some(&bob), None, false),
            (container(Worker, family.clone()), Operation::InstallSkill, Some(&family), None, true),
            (container(Assistant, alice.clone()), Operation::InstallSkill, Some(&alice), None, false),
            (container(Coder, alice.clone()), Operation::InstallSkill, Some(&alice), None, false),
        ];
        for (caller, operation, context, session_id, allowed) in cases {
            let result = authorize(&caller, operation, Target { context, session_id, ..Target::default() });
            assert_eq!(result.is_ok(), allowed, "{caller} {operation:?} {context:?} {session_id:?}: {result:?}");
        }
    }

    #[test]
    fn mcp_servers_and_the_hosts_folders_are_for_the_host_alone() {
        let host = Caller::Host(HostPeer { uid: 1000, gid: 1000, pid: None });
        let admin = EndUser { identity: "web:root-admin".into(), id: "u-admin".into(), admin: true, groups: vec![] };
        let gateway =
            Caller::Gateway(Arc::new(GatewayCaller { gateway: "web".into(), channel: "web", user: Some(admin) }));
        let operations = [
            Operation::ListMcpServers,
            Operation::ListMcpTools,
            Operation::PutMcpServer,
            Operation::RemoveMcpServer,
            Operation::ListEgressRules,
            Operation::ChangeEgressRule,
            Operation::InstallSkillFromFolder,
        ];
        for operation in operations {
            assert!(authorize(&host, operation, Target::default()).is_ok(), "{operation:?}");
            let by_gateway = authorize(&gateway, operation, Target::default());
            assert!(matches!(by_gateway, Err(AuthError::HostOnly { .. })), "{operation:?}: {by_gateway:?}");
            for role in Role::ALL {
                let by_container = authorize(&container(*role, Context::user("alice")), operation, Target::default());
                assert!(by_container.is_err(), "{role:?} {operation:?}");
            }
        }
    }

    #[test]
    fn host_policy() {
        let policy = HostPolicy { daemon_uid: 1000, client_group: None };
        assert!(policy.check(0, 0, None).is_ok());
        assert!(policy.check(1000, 1000, None).is_ok());
        let error = policy.check(65534, 65534, None).expect_err("nobody");
        assert!(error.to_string().starts_with("uid 65534 may not use this socket"), "{error}");
        let policy = HostPolicy { daemon_uid: 1000, client_group: Some(("baaaht".into(), 990)) };
        assert!(policy.check(1001, 990, None).is_ok());
        assert!(policy.check(1001, 100, None).is_err());
    }

    #[test]
    fn context_ids() {
        for good in ["alice", "U012AB3CD", "a.b-c_d", "0"] {
            assert!(is_valid_context_id(good), "{good}");
        }
        let long = "x".repeat(129);
        for bad in ["", ".", "..", "a/b", "../x", "a b", "a\0b", "é", long.as_str()] {
            assert!(!is_valid_context_id(bad), "{bad:?}");
        }
        // A correlation id a container writes into a file: an id's shape, or dropped.
        assert!(is_valid_correlation_id("turn-1234:c.5_x"));
        for forged in ["", "a\nlevel=ERROR", "a b", "\"}", long.as_str()] {
            assert!(!is_valid_correlation_id(forged), "{forged:?}");
        }
    }

    #[test]
    fn tokens() {
        let a = new_token().expect("token");
        let b = new_token().expect("token");
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(tokens_equal(&a, &a.clone()));
        assert!(!tokens_equal(&a, &b));
        assert!(!tokens_equal(&a, &a[..63]));
    }
}
