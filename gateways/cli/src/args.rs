//! What `baaaht` takes on its command line: every command and its arguments (clap).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Talk to your baaaht daemon.
#[derive(Debug, Parser)]
#[command(name = "baaaht", version)]
pub struct Cli {
    /// The daemon's socket [default: $BAAAHT_DATA/data/ipc/orchestrator.sock]
    #[arg(long, env = "BAAAHT_SOCKET", global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the daemon's version, uptime, data dir, container engine, sessions and containers
    Status {
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
        /// Also each container's CPU and memory (takes about a second)
        #[arg(long)]
        containers: bool,
    },
    /// Check that containers are confined: run the self-test in a fresh hardened container
    Doctor {
        /// The role whose container to check
        #[arg(long, default_value = "tool", value_parser = ["assistant", "worker", "researcher", "coder", "memory", "heartbeat", "tool"])]
        role: String,
        /// An IP:PORT on this machine that must not be reachable from inside
        #[arg(long, value_name = "IP:PORT")]
        probe: Option<String>,
        /// Also stream a short completion from this model (provider/model) from inside the
        /// container: checks the agent → daemon → LLM gateway → provider path
        #[arg(long, value_name = "MODEL")]
        llm: Option<String>,
        /// The session the container belongs to (default: self-test)
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Keep the container this many seconds after the report, for inspection
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=600))]
        linger: u32,
        /// Print the raw JSON report
        #[arg(long)]
        json: bool,
    },
    /// Send one message and stream the answer (the context's active session, or --session)
    Chat {
        /// The message
        prompt: String,
        /// Talk as this user [default: $USER]
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Talk in this group's conversation
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        /// Who writes, in a group [default: $USER]; with --user the sender is that user
        #[arg(long = "as", value_name = "ID", requires = "group", conflicts_with = "user")]
        sender: Option<String>,
        /// Continue this session instead of the active one
        #[arg(long, value_name = "ID", conflicts_with = "new")]
        session: Option<String>,
        /// Start a new session
        #[arg(long)]
        new: bool,
        /// Give up waiting for the reply after this many seconds (the turn goes on)
        #[arg(long, default_value_t = 600)]
        wait: u64,
    },
    /// List, show, start, resume, fork and archive sessions, or switch their model
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
    },
    /// List, read and install skills, and answer a skill's review
    Skills {
        #[command(subcommand)]
        command: SkillsCommand,
    },
    /// MCP servers: list them, their tools, test one, add or remove one
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// Which hosts tools may reach: list the rules, allow, deny or ask about a host, revoke a rule
    Egress {
        #[command(subcommand)]
        command: EgressCommand,
    },
    /// What is remembered, where each entry came from, and what waits for your review
    Memory {
        #[command(subcommand)]
        command: MemoryCommand,
    },
    /// Users and the channel identities that act as them (web, Slack)
    Users {
        #[command(subcommand)]
        command: UsersCommand,
    },
    /// Groups: shared contexts with members
    Groups {
        #[command(subcommand)]
        command: GroupsCommand,
    },
    /// The terminal client: the context's conversation, live
    Tui {
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        /// Who writes, in a group [default: $USER]
        #[arg(long = "as", value_name = "ID", requires = "group")]
        sender: Option<String>,
        /// Colours for a dark or a light terminal [default: asks the terminal]
        #[arg(long, value_enum, default_value_t)]
        theme: crate::tui::theme::Choice,
    },
    /// Scheduled tasks and heartbeats: list, show, runs, next, add, pause, resume, cancel
    Tasks {
        #[command(subcommand)]
        command: TasksCommand,
    },
    /// What the daemon kept for you while no channel was there (task results, paused tasks)
    Inbox {
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        /// Also the items read before
        #[arg(long)]
        all: bool,
    },
    /// The audit log: commands run, egress, refusals, sign-in failures, secrets read, admin actions
    Audit {
        /// Only records this recent (90s, 15m, 1h, 2d, 1w) or since an RFC 3339 time
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Only records by or about this user
        #[arg(long, value_name = "ID")]
        user: Option<String>,
        /// Only this kind: exec, egress, policy, auth, secret, skill, mcp, config, budget, admin, limit, redaction, taint
        #[arg(long, value_name = "KIND")]
        kind: Option<String>,
        /// The newest this many [default: 1000]
        #[arg(long, value_name = "N", default_value_t = 1000)]
        limit: u32,
        /// One JSON object per line, as the log keeps them
        #[arg(long)]
        json: bool,
    },
    /// Tokens and cost against the budget, today and this month
    Usage {
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        /// Only this month's figures
        #[arg(long)]
        month: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// A context's tasks (with no --user/--group: every task, for the host)
    List {
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        #[arg(long = "type", value_parser = ["heartbeat", "scheduled", "system"])]
        kind: Option<String>,
        #[arg(long, value_parser = ["active", "paused", "completed", "failed"])]
        status: Option<String>,
    },
    /// One task in full, with its next runs
    Show {
        id: String,
    },
    /// A task's runs, newest first: slot, start, end, outcome, container, tokens, error
    Runs {
        id: String,
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// The next runs of a context's tasks
    Next {
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        /// Runs per task
        #[arg(long, default_value_t = 3)]
        count: u32,
    },
    /// Schedule a task: exactly one of --cron, --every or --at
    Add {
        /// What the agent should do when it runs
        prompt: String,
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        #[command(flatten)]
        when: When,
        /// A short name for it in lists and notices
        #[arg(long)]
        description: Option<String>,
        /// IANA time zone [default: system.timezone]
        #[arg(long)]
        timezone: Option<String>,
        #[arg(long, default_value = "worker", value_parser = ["worker", "researcher", "coder"])]
        agent: String,
        /// session, isolated or silent
        #[arg(long, default_value = "isolated", value_parser = ["session", "isolated", "silent"])]
        mode: String,
        /// Where results go: tui, web, slack, slack/dm, slack/CHANNEL, telegram, matrix, email, none
        /// [default: preferred]
        #[arg(long, default_value = "")]
        channel: String,
        /// once, skip, or "within: 2h": what runs for slots missed while baaahtd was down
        #[arg(long, default_value = "once")]
        catch_up: String,
        /// Run beside a previous run still going (default: skip that slot)
        #[arg(long)]
        allow_overlap: bool,
        /// Run again, once, a run a crash interrupted
        #[arg(long)]
        retry_interrupted: bool,
    },
    /// Change a scheduled task in place: what it does, its name, or when it runs
    Change {
        id: String,
        /// What the agent should do when it runs
        #[arg(long)]
        prompt: Option<String>,
        /// A short name for it in lists and notices
        #[arg(long)]
        description: Option<String>,
        #[command(flatten)]
        when: When,
        /// IANA time zone ("" for system.timezone)
        #[arg(long)]
        timezone: Option<String>,
    },
    Pause {
        id: String,
    },
    /// Resume a task from now on; its failure count starts again
    Resume {
        id: String,
    },
    Cancel {
        id: String,
    },
}

/// When a task runs: one of --cron, --every or --at.
#[derive(Debug, clap::Args)]
pub struct When {
    /// 5-field cron: minute hour day-of-month month day-of-week, e.g. "0 9 * * 1"
    #[arg(long, conflicts_with_all = ["every", "at"])]
    pub cron: Option<String>,
    /// Seconds between runs (at least 60)
    #[arg(long, value_name = "SECONDS", conflicts_with = "at")]
    pub every: Option<u64>,
    /// Once, at this RFC 3339 time with its offset, e.g. 2026-03-01T08:00:00+01:00
    #[arg(long, value_name = "TIME")]
    pub at: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Every user with its identities and groups
    List,
    /// One user, by id (u-…) or by one of its identities
    Show { user: String },
    /// Make identity SECOND act as the user of identity FIRST (one context, one session)
    Link { first: String, second: String },
    /// Give an identity back the user it was created with
    Unlink { identity: String },
    /// Let someone in: make a user of a channel identity that waits to be admitted (see
    /// `users list`), or of one you expect (a Telegram user id: telegram:BOT:USER)
    Admit {
        identity: String,
        /// The name they go by (default: the one their channel gave)
        #[arg(long)]
        name: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum GroupsCommand {
    /// Make a group (its id: letters, digits, `.`, `_`, `-`)
    Create {
        id: String,
        /// Its name as people see it
        #[arg(long)]
        name: Option<String>,
        /// A member (user id or identity); repeat for more
        #[arg(long = "member", value_name = "USER")]
        members: Vec<String>,
    },
    List,
    Show {
        id: String,
    },
    AddMember {
        id: String,
        member: String,
    },
    RemoveMember {
        id: String,
        member: String,
    },
    /// Refuse new messages to a group; its sessions, memory and skills stay
    Deactivate {
        id: String,
        #[arg(long, default_value = "")]
        reason: String,
    },
    Reactivate {
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// The skills a user or group sees (the system's and its own)
    List {
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
    /// Print a skill's SKILL.md, or another file of it
    Show {
        name: String,
        /// A file inside the skill's folder
        file: Option<String>,
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
    /// Install a skill from a git repository into a user's or group's skills: an https:// URL
    /// (fetched through the daemon's egress filter), or with --local a repository in a folder
    /// on the daemon's host
    Install {
        /// The https:// URL of the repository
        #[arg(required_unless_present = "local", conflicts_with = "local")]
        source: Option<String>,
        /// A git repository in a folder on the daemon's host (the host's own clients only)
        #[arg(long, value_name = "FOLDER")]
        local: Option<std::path::PathBuf>,
        /// The folder inside the repository holding SKILL.md
        #[arg(long, value_name = "PATH", default_value = "")]
        path: String,
        /// A branch or tag
        #[arg(long = "ref", value_name = "REF", default_value = "")]
        git_ref: String,
        /// Replace an installed skill of the same name
        #[arg(long)]
        replace: bool,
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
    /// Answer the review of a skill an agent asked to install (its id is in the prompt):
    /// install it, or decline it
    Answer {
        /// The review's id (a-…)
        id: String,
        #[arg(value_enum)]
        decision: SkillAnswer,
    },
}

/// The answers to a skill's review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SkillAnswer {
    /// Install the skill as it was reviewed
    Install,
    /// Install nothing of it
    Decline,
}

impl SkillAnswer {
    /// The decision the daemon is sent.
    pub fn decision(self) -> &'static str {
        match self {
            SkillAnswer::Install => "install",
            SkillAnswer::Decline => "decline",
        }
    }
}

/// Whose egress rules a command means: a user's or group's own (the caller's by default), or
/// everyone's.
#[derive(Debug, Clone, clap::Args)]
pub struct EgressScope {
    /// This user's own rules (their id)
    #[arg(long, value_name = "ID", conflicts_with_all = ["group", "system"])]
    pub user: Option<String>,
    /// This group's own rules (its id)
    #[arg(long, value_name = "ID", conflicts_with = "system")]
    pub group: Option<String>,
    /// Everyone's rules (config/egress.yaml)
    #[arg(long)]
    pub system: bool,
}

#[derive(Debug, Subcommand)]
pub enum EgressCommand {
    /// The rules a user's or group's tools go by: everyone's, then its own
    List {
        #[command(flatten)]
        scope: EgressScope,
    },
    /// Let tools reach HOST (a host, *.domain or host:port)
    Allow {
        host: String,
        #[command(flatten)]
        scope: EgressScope,
    },
    /// Never let tools reach HOST; or, given an approval's id, refuse that connection
    Deny {
        host: String,
        #[command(flatten)]
        scope: EgressScope,
    },
    /// Ask in chat each time tools want HOST
    Ask {
        host: String,
        #[command(flatten)]
        scope: EgressScope,
    },
    /// Remove the rule for HOST
    Revoke {
        host: String,
        #[command(flatten)]
        scope: EgressScope,
    },
    /// Allow a connection waiting for approval (its id is in the prompt): once, for the
    /// session, or always (a rule)
    Approve {
        id: String,
        /// Allow it for this session only
        #[arg(long, conflicts_with = "always")]
        session: bool,
        /// Allow it from now on: a rule is written
        #[arg(long)]
        always: bool,
    },
    /// Hosts allowed once, three times or more: rules worth writing
    Suggest {
        #[command(flatten)]
        scope: EgressScope,
    },
    /// Secrets swapped in at the edge for the hosts they are bound to (tools see a placeholder)
    #[command(subcommand)]
    Credential(CredentialCommand),
}

/// Whose memory: yours (`$USER`), a user's or a group's.
#[derive(Debug, Clone, clap::Args)]
pub struct MemoryScope {
    /// This user's memory (their id)
    #[arg(long, value_name = "ID", conflicts_with = "group")]
    pub user: Option<String>,
    /// This group's memory (its id)
    #[arg(long, value_name = "ID")]
    pub group: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// What is remembered, newest first, with whose words each entry is
    List {
        /// Only entries matching these words, best first
        query: Option<String>,
        /// Only entries with this tag
        #[arg(long)]
        tag: Option<String>,
        #[command(flatten)]
        scope: MemoryScope,
    },
    /// Search what is remembered: words (any of them, the best matches first), "a phrase", or
    /// a prefix*
    Search {
        query: String,
        /// Only entries with this tag
        #[arg(long)]
        tag: Option<String>,
        /// Only entries updated at or after this time (RFC 3339, e.g. 2026-11-01T00:00:00Z)
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// Only entries updated before this time (RFC 3339)
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
        #[arg(long, default_value_t = 10)]
        limit: u32,
        #[command(flatten)]
        scope: MemoryScope,
    },
    /// One entry whole: its text, tags, importance, and every time it was told
    Show {
        key: String,
        #[command(flatten)]
        scope: MemoryScope,
    },
    /// Entries written while reading content from outside wait here, never used until
    /// confirmed: list them (on a terminal, confirm or drop each), or confirm or drop one
    Review {
        /// Remember this entry from now on
        #[arg(long, value_name = "KEY", conflicts_with = "drop")]
        confirm: Option<String>,
        /// Drop this entry
        #[arg(long, value_name = "KEY")]
        drop: Option<String>,
        #[command(flatten)]
        scope: MemoryScope,
    },
    /// Forget a remembered entry
    Forget {
        key: String,
        #[command(flatten)]
        scope: MemoryScope,
    },
}

#[derive(Debug, Subcommand)]
pub enum CredentialCommand {
    /// Bind the secret NAME (from the store) to hosts: commands find a placeholder in $NAME,
    /// and the daemon sends the value to these hosts only, over https
    Add {
        name: String,
        /// A host (or *.domain, host:port) the secret is sent to; once or more
        #[arg(long = "host", value_name = "HOST", required = true)]
        hosts: Vec<String>,
        #[command(flatten)]
        scope: EgressScope,
    },
    /// Unbind the secret NAME
    Remove {
        name: String,
        #[command(flatten)]
        scope: EgressScope,
    },
}

// Parsed once per run: the size of `Add` beside the others costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// The MCP servers a user or group sees (the system's and its own)
    List {
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
    /// A server's tools as agents are offered them (started to list them if it never was)
    Tools {
        server: String,
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
    /// Start a server afresh and list its tools with their schemas
    Test {
        server: String,
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
    /// Add (or replace) a server: the system's, or with --user/--group that context's own
    Add {
        /// The server's name: its tools are offered as mcp__NAME__TOOL
        name: String,
        /// The program that speaks MCP on its standard input and output
        #[arg(long, value_name = "PROGRAM")]
        command: String,
        /// One argument of the command (repeat for more)
        #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
        args: Vec<String>,
        /// A package for the server's layer: pip:NAME, npm:NAME or apt:NAME (repeatable)
        #[arg(long, value_name = "SOURCE:NAME")]
        install: Vec<String>,
        /// An image that has the command, instead of the base image with --install
        #[arg(long, value_name = "IMAGE")]
        image: Option<String>,
        /// NAME=VALUE for the server alone; write ${SECRET} to take a value from the secrets store
        #[arg(long, value_name = "NAME=VALUE")]
        env: Vec<String>,
        /// A host the server may reach (repeatable); none: no network
        #[arg(long, value_name = "HOST")]
        egress: Vec<String>,
        /// A role whose agents get its tools (repeatable) [default: worker, researcher, coder]
        #[arg(long, value_name = "ROLE")]
        role: Vec<String>,
        /// Seconds unused before its container stops [default: 600]
        #[arg(long, value_name = "SECONDS")]
        idle_timeout: Option<u64>,
        /// Seconds one call may take [default: 60]
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<u64>,
        /// A host folder it sees, read-only, or read-write with `:rw` (repeatable); each must be
        /// in mount-allowlist.json, and it appears where the allowlist puts it for a Coder
        #[arg(long = "mount", value_name = "HOST_PATH[:rw]")]
        mounts: Vec<String>,
        /// A folder of its own that outlives its container, at /state (MCP_STATE_DIR)
        #[arg(long)]
        state: bool,
        /// It sees the workspace of the session that calls it, at /workspace (one container per
        /// session)
        #[arg(long)]
        workspace: bool,
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
    /// Remove a server: the system's, or with --user/--group that context's own
    Rm {
        name: String,
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List sessions, most recently active first
    List {
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        /// Only sessions in this state
        #[arg(long, value_parser = ["created", "active", "idle", "archived"])]
        status: Option<String>,
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
    /// Search everything said in a user's or group's sessions (archived too): words (any of
    /// them, the best matches first), "a phrase", or a prefix*
    Search {
        query: String,
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        /// Only this session's messages
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Only messages written at or after this time (RFC 3339, e.g. 2026-11-01T00:00:00Z)
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// Only messages written before this time (RFC 3339)
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
        #[arg(long, default_value_t = 10)]
        limit: u32,
    },
    /// Print a session's entries (or one branch, root to --leaf)
    Show {
        id: String,
        /// The entry the branch ends at [default: the session's last]
        #[arg(long, value_name = "ENTRY")]
        leaf: Option<String>,
    },
    /// Start a new session
    New {
        /// Act in this user's context (their id)
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        /// Act in this group's context (its id)
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        /// Its title [default: its first message]
        #[arg(long)]
        title: Option<String>,
    },
    /// Make an idle or archived session active again
    Resume { id: String },
    /// Start a new session from a session's branch ending at --entry (default: its last entry)
    Fork {
        id: String,
        /// The entry the new session's branch ends at
        #[arg(long, value_name = "ENTRY")]
        entry: Option<String>,
    },
    /// Archive a session (its Memory agent first saves what is worth keeping)
    Archive { id: String },
    /// Replace a session's history, for the model, with a summary (the entries stay in the log)
    Compact { id: String },
    /// Switch the model a session's Assistant uses
    Model { id: String, model: String },
    /// Take a session's last turns back, the files they changed and the conversation: shows
    /// what it would do; --yes does it
    Undo {
        id: String,
        /// How many turns back
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
        turns: u32,
        /// Bring the last undo back instead (while nobody wrote in the session since)
        #[arg(long, conflicts_with = "turns")]
        redo: bool,
        /// Do it (without: only show what it would do)
        #[arg(long)]
        yes: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn a_skill_review_is_answered_install_or_decline_and_nothing_else() {
        let cli = Cli::try_parse_from(["baaaht", "skills", "answer", "a-0123456789ab", "decline"]).expect("parsed");
        let Command::Skills { command: SkillsCommand::Answer { id, decision } } = cli.command else {
            panic!("{:?}", cli.command)
        };
        assert_eq!((id.as_str(), decision.decision()), ("a-0123456789ab", "decline"));
        assert!(Cli::try_parse_from(["baaaht", "skills", "answer", "a-0123456789ab", "once"]).is_err());
    }
}
