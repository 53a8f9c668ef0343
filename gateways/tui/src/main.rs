//! `baaaht`: the command-line client of the baaaht daemon.

use std::path::PathBuf;
use std::process::ExitCode;

use baaaht_cli::terminal::clean;
use baaaht_cli::{status, CliError};
use baaaht_proto::v1;
use clap::{Parser, Subcommand};

/// Talk to your baaaht daemon.
#[derive(Debug, Parser)]
#[command(name = "baaaht", version)]
struct Cli {
    /// The daemon's socket [default: $BAAAHT_DATA/data/ipc/orchestrator.sock]
    #[arg(long, env = "BAAAHT_SOCKET", global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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
    /// List, read and install skills
    Skills {
        #[command(subcommand)]
        command: SkillsCommand,
    },
    /// MCP servers: list them, their tools, test one, add or remove one
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
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
    /// The terminal client: the context's conversation, live (in progress: issue 16)
    Tui {
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        /// Who writes, in a group [default: $USER]
        #[arg(long = "as", value_name = "ID", requires = "group")]
        sender: Option<String>,
        /// Colours for a dark or a light terminal [default: asks the terminal]
        #[arg(long, value_enum, default_value_t)]
        theme: baaaht_cli::tui::theme::Choice,
    },
    /// Scheduled tasks and heartbeats: list, show, runs, next, add, pause, resume, cancel
    Tasks {
        #[command(subcommand)]
        command: TasksCommand,
    },
    /// What the daemon kept for you while no channel was there (task results, paused tasks)
    Inbox {
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
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
        /// Only this kind: exec, egress, policy, auth, secret, skill, mcp, config, budget, admin
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
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        /// Only this month's figures
        #[arg(long)]
        month: bool,
    },
}

#[derive(Debug, Subcommand)]
enum TasksCommand {
    /// A context's tasks (with no --user/--group: every task, for the host)
    List {
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
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
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
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
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        /// 5-field cron: minute hour day-of-month month day-of-week, e.g. "0 9 * * 1"
        #[arg(long, conflicts_with_all = ["every", "at"])]
        cron: Option<String>,
        /// Seconds between runs (at least 60)
        #[arg(long, value_name = "SECONDS", conflicts_with = "at")]
        every: Option<u64>,
        /// Once, at this RFC 3339 time with its offset, e.g. 2026-03-01T08:00:00+01:00
        #[arg(long, value_name = "TIME")]
        at: Option<String>,
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
        /// Where results go: tui, web, slack, slack/dm, slack/CHANNEL, none [default: preferred]
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

#[derive(Debug, Subcommand)]
enum UsersCommand {
    /// Every user with its identities and groups
    List,
    /// One user, by id (u-…) or by one of its identities
    Show { user: String },
    /// Make identity SECOND act as the user of identity FIRST (one context, one session)
    Link { first: String, second: String },
    /// Give an identity back the user it was created with
    Unlink { identity: String },
}

#[derive(Debug, Subcommand)]
enum GroupsCommand {
    /// Make a group (its id: letters, digits, `.`, `_`, `-`)
    Create {
        id: String,
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
enum SkillsCommand {
    /// The skills a user or group sees (the system's and its own)
    List {
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
    /// Print a skill's SKILL.md, or another file of it
    Show {
        name: String,
        /// A file inside the skill's folder
        file: Option<String>,
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
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
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
}

// Parsed once per run: the size of `Add` beside the others costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum McpCommand {
    /// The MCP servers a user or group sees (the system's and its own)
    List {
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
    /// A server's tools as agents are offered them (started to list them if it never was)
    Tools {
        server: String,
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
    /// Start a server afresh and list its tools with their schemas
    Test {
        server: String,
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
    /// Add (or replace) a server: the system's, or with --user/--group that context's own
    Add {
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
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
    /// Remove a server: the system's, or with --user/--group that context's own
    Rm {
        name: String,
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum SessionsCommand {
    /// List sessions, most recently active first
    List {
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        /// Only sessions in this state
        #[arg(long, value_parser = ["created", "active", "idle", "archived"])]
        status: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Print a session's entries (or one branch, root to --leaf)
    Show {
        id: String,
        #[arg(long, value_name = "ENTRY")]
        leaf: Option<String>,
    },
    /// Start a new session
    New {
        #[arg(long, value_name = "ID", conflicts_with = "group")]
        user: Option<String>,
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        #[arg(long)]
        title: Option<String>,
    },
    /// Make an idle or archived session active again
    Resume { id: String },
    /// Start a new session from a session's branch ending at --entry (default: its last entry)
    Fork {
        id: String,
        #[arg(long, value_name = "ENTRY")]
        entry: Option<String>,
    },
    /// Archive a session (its Memory agent first saves what is worth keeping)
    Archive { id: String },
    /// Replace a session's history, for the model, with a summary (the entries stay in the log)
    Compact { id: String },
    /// Switch the model a session's Assistant uses
    Model { id: String, model: String },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("baaaht: cannot start the async runtime: {error}");
            return ExitCode::from(71);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("baaaht: {}", clean(&error.to_string()));
            ExitCode::from(error.exit_code())
        }
    }
}

async fn run(cli: Cli) -> Result<(), CliError> {
    let socket = cli.socket.unwrap_or_else(|| baaaht_cli::default_socket(|key| std::env::var(key).ok()));
    match cli.command {
        Command::Status { json, containers } => {
            let mut client = baaaht_cli::connect(&socket).await?;
            let response = client
                .system
                .get_status(v1::StatusRequest { containers })
                .await
                .map_err(|status| CliError::from_status(status, &socket))?
                .into_inner();
            if json {
                let text = serde_json::to_string_pretty(&status::to_json(&response)).map_err(CliError::Json)?;
                println!("{}", clean(&text));
            } else {
                print!("{}", clean(&status::to_text(&response)));
            }
            Ok(())
        }
        Command::Doctor { role, probe, llm, session, linger, json } => {
            let mut client = baaaht_cli::connect(&socket).await?;
            let request = v1::SelfTestRequest {
                role: role_number(&role),
                probe_address: probe.unwrap_or_default(),
                linger_seconds: linger,
                llm_model: llm.unwrap_or_default(),
                session_id: session.unwrap_or_default(),
            };
            let response = client
                .system
                .run_self_test(request)
                .await
                .map_err(|status| CliError::from_status(status, &socket))?
                .into_inner();
            if json {
                println!("{}", clean(&response.report_json));
            } else {
                print!("{}", clean(&baaaht_cli::doctor::to_text(&role, &response)));
            }
            if response.ok {
                Ok(())
            } else {
                Err(CliError::SelfTestFailed(response.problems.join("; ")))
            }
        }
        Command::Chat { prompt, user, group, sender, session, new, wait } => {
            let mut client = baaaht_cli::connect(&socket).await?;
            chat(&mut client, &socket, Chat { prompt, user, group, sender, session, new, wait }).await
        }
        Command::Skills { command } => {
            let mut client = baaaht_cli::connect(&socket).await?;
            skills(&mut client, &socket, command).await
        }
        Command::Sessions { command } => {
            let mut client = baaaht_cli::connect(&socket).await?;
            sessions(&mut client, &socket, command).await
        }
        Command::Mcp { command } => {
            let mut client = baaaht_cli::connect(&socket).await?;
            mcp(&mut client, &socket, command).await
        }
        Command::Users { command } => {
            let mut client = baaaht_cli::connect(&socket).await?;
            users(&mut client, &socket, command).await
        }
        Command::Groups { command } => {
            let mut client = baaaht_cli::connect(&socket).await?;
            groups(&mut client, &socket, command).await
        }
        Command::Tui { user, group, sender, theme } => {
            let env = |key: &str| std::env::var(key).ok();
            let in_group = group.is_some();
            let context = baaaht_cli::chat::context(user, group, env);
            let sender = match sender {
                Some(sender) => sender,
                None if in_group => baaaht_cli::chat::login(env),
                None => context.id.clone(),
            };
            baaaht_cli::tui::run::run(baaaht_cli::tui::run::Target { socket, context, sender, theme }).await
        }
        Command::Tasks { command } => {
            let mut client = baaaht_cli::connect(&socket).await?;
            tasks(&mut client, &socket, command).await
        }
        Command::Inbox { user, group, all } => {
            let mut client = baaaht_cli::connect(&socket).await?;
            let env = |key: &str| std::env::var(key).ok();
            let context = baaaht_cli::chat::context(user, group, env);
            let list = client
                .sessions
                .list_inbox(v1::InboxRequest { context: Some(context), unread_only: !all, mark_read: true })
                .await
                .map_err(|status| CliError::from_status(status, &socket))?
                .into_inner();
            print!("{}", clean(&baaaht_cli::tasks::inbox_text(&list)));
            Ok(())
        }
        Command::Audit { since, user, kind, limit, json } => {
            let mut client = baaaht_cli::connect(&socket).await?;
            let query = v1::AuditQuery {
                since: since.unwrap_or_default(),
                user: user.unwrap_or_default(),
                kind: kind.unwrap_or_default(),
                limit,
            };
            let found = client
                .admin
                .search_audit(query)
                .await
                .map_err(|status| CliError::from_status(status, &socket))?
                .into_inner();
            let text =
                if json { baaaht_cli::people::audit_json(&found) } else { baaaht_cli::people::audit_text(&found) };
            print!("{}", clean(&text));
            Ok(())
        }
        Command::Usage { user, group, month } => {
            let mut client = baaaht_cli::connect(&socket).await?;
            let env = |key: &str| std::env::var(key).ok();
            let context = baaaht_cli::chat::context(user, group, env);
            let report = client
                .admin
                .get_usage(v1::UsageRequest { context: Some(context) })
                .await
                .map_err(|status| CliError::from_status(status, &socket))?
                .into_inner();
            print!("{}", clean(&baaaht_cli::people::usage_text(&report, month)));
            Ok(())
        }
    }
}

async fn users(
    client: &mut baaaht_proto::client::Client,
    socket: &std::path::Path,
    command: UsersCommand,
) -> Result<(), CliError> {
    use baaaht_cli::people::{user_text, users_text};
    let status = |status| CliError::from_status(status, socket);
    let text = match command {
        UsersCommand::List => {
            users_text(&client.admin.list_users(v1::ListUsersRequest {}).await.map_err(status)?.into_inner())
        }
        UsersCommand::Show { user } => {
            user_text(&client.admin.show_user(v1::UserRef { user }).await.map_err(status)?.into_inner())
        }
        UsersCommand::Link { first, second } => user_text(
            &client.admin.link_identities(v1::LinkRequest { first, second }).await.map_err(status)?.into_inner(),
        ),
        UsersCommand::Unlink { identity } => {
            user_text(&client.admin.unlink_identity(v1::UnlinkRequest { identity }).await.map_err(status)?.into_inner())
        }
    };
    print!("{}", clean(&text));
    Ok(())
}

async fn groups(
    client: &mut baaaht_proto::client::Client,
    socket: &std::path::Path,
    command: GroupsCommand,
) -> Result<(), CliError> {
    use baaaht_cli::people::{group_text, groups_text};
    let status = |status| CliError::from_status(status, socket);
    let admin = &mut client.admin;
    let group = match command {
        GroupsCommand::List => {
            let list = admin.list_groups(v1::ListGroupsRequest {}).await.map_err(status)?.into_inner();
            print!("{}", clean(&groups_text(&list)));
            return Ok(());
        }
        GroupsCommand::Create { id, name, members } => {
            let request = v1::CreateGroupRequest { id, name: name.unwrap_or_default(), members };
            admin.create_group(request).await
        }
        GroupsCommand::Show { id } => admin.show_group(v1::GroupRef { id }).await,
        GroupsCommand::AddMember { id, member } => {
            admin.add_group_member(v1::GroupMemberRequest { group: id, member }).await
        }
        GroupsCommand::RemoveMember { id, member } => {
            admin.remove_group_member(v1::GroupMemberRequest { group: id, member }).await
        }
        GroupsCommand::Deactivate { id, reason } => {
            admin.deactivate_group(v1::DeactivateGroupRequest { id, reason }).await
        }
        GroupsCommand::Reactivate { id } => admin.reactivate_group(v1::GroupRef { id }).await,
    }
    .map_err(status)?
    .into_inner();
    print!("{}", clean(&group_text(&group)));
    Ok(())
}

/// The user or group a task command names, as the protocol's user_id/group_id.
fn task_owner(user: Option<String>, group: Option<String>) -> (String, String) {
    (user.unwrap_or_default(), group.unwrap_or_default())
}

async fn tasks(
    client: &mut baaaht_proto::client::Client,
    socket: &std::path::Path,
    command: TasksCommand,
) -> Result<(), CliError> {
    use baaaht_cli::tasks as text;
    let status = |status| CliError::from_status(status, socket);
    match command {
        TasksCommand::List { user, group, kind, status: wanted } => {
            let (user_id, group_id) = task_owner(user, group);
            let filter = v1::TaskFilter {
                user_id,
                group_id,
                r#type: kind.unwrap_or_default(),
                status: wanted.unwrap_or_default(),
                count: 0,
            };
            let list = client.tasks.list_tasks(filter).await.map_err(status)?.into_inner();
            print!("{}", clean(&text::list_text(&list)));
        }
        TasksCommand::Show { id } => {
            let task = client.tasks.get_task(v1::TaskId { id: id.clone() }).await.map_err(status)?.into_inner();
            let filter = v1::TaskFilter {
                user_id: task.user_id.clone(),
                group_id: task.group_id.clone(),
                count: 5,
                ..v1::TaskFilter::default()
            };
            let next = client.tasks.get_next_runs(filter).await.map_err(status)?.into_inner();
            let runs = next.runs.into_iter().find(|run| run.task_id == id).map(|run| run.runs).unwrap_or_default();
            print!("{}", clean(&text::show_text(&task, &runs)));
        }
        TasksCommand::Runs { id, limit } => {
            let runs = client
                .tasks
                .list_task_runs(v1::TaskRunsRequest { task_id: id, limit })
                .await
                .map_err(status)?
                .into_inner();
            print!("{}", clean(&text::runs_text(&runs)));
        }
        TasksCommand::Next { user, group, count } => {
            let (user_id, group_id) = task_owner(user, group);
            let filter = v1::TaskFilter { user_id, group_id, count, ..v1::TaskFilter::default() };
            let next = client.tasks.get_next_runs(filter).await.map_err(status)?.into_inner();
            print!("{}", clean(&text::next_text(&next)));
        }
        TasksCommand::Add {
            prompt,
            user,
            group,
            cron,
            every,
            at,
            description,
            timezone,
            agent,
            mode,
            channel,
            catch_up,
            allow_overlap,
            retry_interrupted,
        } => {
            use v1::task_schedule::Kind;
            let kind = match (cron, every, at) {
                (Some(cron), None, None) => Kind::Cron(cron),
                (None, Some(every), None) => Kind::IntervalSeconds(every),
                (None, None, Some(at)) => Kind::Once(at),
                _ => return Err(CliError::Usage("give exactly one of --cron, --every or --at".into())),
            };
            let env = |key: &str| std::env::var(key).ok();
            let (user_id, group_id) = match (user, group) {
                (None, None) => (baaaht_cli::chat::login(env), String::new()),
                (user, group) => task_owner(user, group),
            };
            let definition = v1::TaskDefinition {
                r#type: "scheduled".into(),
                user_id,
                group_id,
                schedule: Some(v1::TaskSchedule { kind: Some(kind) }),
                agent,
                prompt,
                context_mode: mode,
                notification: Some(v1::TaskNotification { channel, on_success: true, on_failure: true }),
                description: description.unwrap_or_default(),
                timezone: timezone.unwrap_or_default(),
                catch_up,
                concurrency: if allow_overlap { "allow" } else { "forbid" }.into(),
                retry_interrupted,
                ..v1::TaskDefinition::default()
            };
            let scheduled = client.tasks.schedule_task(definition).await.map_err(status)?.into_inner();
            let task = scheduled.task.unwrap_or_default();
            print!("{}", clean(&text::show_text(&task, &scheduled.next_runs)));
        }
        TasksCommand::Pause { id } => {
            println!(
                "{}",
                clean(&client.tasks.pause_task(v1::TaskId { id }).await.map_err(status)?.into_inner().message)
            );
        }
        TasksCommand::Resume { id } => {
            println!(
                "{}",
                clean(&client.tasks.resume_task(v1::TaskId { id }).await.map_err(status)?.into_inner().message)
            );
        }
        TasksCommand::Cancel { id } => {
            println!(
                "{}",
                clean(&client.tasks.cancel_task(v1::TaskId { id }).await.map_err(status)?.into_inner().message)
            );
        }
    }
    Ok(())
}

async fn chat(client: &mut baaaht_proto::client::Client, socket: &std::path::Path, chat: Chat) -> Result<(), CliError> {
    use baaaht_cli::chat::{show, Ending};
    let env = |key: &str| std::env::var(key).ok();
    let in_group = chat.group.is_some();
    let context = baaaht_cli::chat::context(chat.user, chat.group, env);
    // In a user's own conversation the sender is that user; --as names who writes in a group.
    let sender = match chat.sender {
        Some(sender) => sender,
        None if in_group => baaaht_cli::chat::login(env),
        None => context.id.clone(),
    };
    let status = |status| CliError::from_status(status, socket);
    let session = if chat.new {
        let header = client
            .sessions
            .new_session(v1::NewSessionRequest { context: Some(context.clone()), title: String::new() })
            .await
            .map_err(status)?
            .into_inner();
        header.id
    } else {
        chat.session.unwrap_or_default()
    };
    let mut events = client
        .sessions
        .subscribe_events(v1::EventSubscription {
            context: Some(context.clone()),
            session_id: String::new(),
            channel: v1::ChannelType::Cli as i32,
        })
        .await
        .map_err(status)?
        .into_inner();
    // What was kept while no channel was there comes first.
    let inbox = client
        .sessions
        .list_inbox(v1::InboxRequest { context: Some(context.clone()), unread_only: true, mark_read: true })
        .await
        .map_err(status)?
        .into_inner();
    if !inbox.items.is_empty() {
        eprint!("{}", clean(&format!("while you were away:\n{}", baaaht_cli::tasks::inbox_text(&inbox))));
    }
    let message = v1::UserMessage {
        context: Some(context),
        session_id: session,
        sender_id: sender,
        channel: v1::ChannelType::Cli as i32,
        content: chat.prompt,
        ..v1::UserMessage::default()
    };
    let sent = client.sessions.send_user_message(message).await.map_err(status)?.into_inner();
    // Ctrl-C from here on stops this message's turn rather than the client alone.
    let mut interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|error| CliError::Usage(format!("cannot take Ctrl-C: {error}")))?;
    // A turn already running in the session answers first: say so rather than wait silently.
    let transcript = v1::ReadSessionRequest { session_id: sent.session_id.clone(), leaf_entry_id: String::new() };
    if let Ok(transcript) = client.sessions.read_session(transcript).await {
        if transcript.get_ref().running_turns.iter().any(|turn| *turn != sent.turn_id) {
            eprintln!("waiting for the answer in progress in this session; Ctrl-C withdraws this message");
        }
    }
    let (mut out, mut note) = (std::io::stdout(), std::io::stderr());
    // Something moves on a terminal until the first token: the model may take a while.
    let mut spinner = std::io::IsTerminal::is_terminal(&note).then(baaaht_cli::chat::Spinner::default);
    let mut ticks = tokio::time::interval(std::time::Duration::from_millis(100));
    let mut deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(chat.wait);
    let mut stopping = false;
    let ending = loop {
        let next = tokio::select! {
            next = tokio::time::timeout_at(deadline, events.message()) => next,
            _ = ticks.tick(), if spinner.is_some() => {
                if let Some(spinner) = spinner.as_mut() {
                    spinner.tick(&mut note);
                }
                continue;
            }
            _ = interrupts.recv() => {
                if stopping {
                    // A second Ctrl-C: gone at once (the turn was asked to stop already).
                    break Err(CliError::Interrupted { session: sent.session_id.clone() });
                }
                stopping = true;
                if let Some(spinner) = spinner.as_mut() {
                    spinner.clear(&mut note);
                }
                eprintln!("\nstopping the turn (Ctrl-C again to leave at once)");
                let cancel = v1::CancelTurnRequest { session_id: sent.session_id.clone(), turn_id: sent.turn_id.clone() };
                if let Err(refused) = client.sessions.cancel_turn(cancel).await {
                    // It ended meanwhile: its answer is on its way.
                    eprintln!("{}", clean(refused.message()));
                }
                // Its end comes as an event; a daemon that never says is not waited on long.
                deadline = deadline.min(tokio::time::Instant::now() + std::time::Duration::from_secs(10));
                continue;
            }
        };
        let next = match next {
            Err(_elapsed) if stopping => break Err(CliError::Interrupted { session: sent.session_id.clone() }),
            next => next,
        };
        let next = next.map_err(|_elapsed| {
            CliError::TurnFailed(format!(
                "no reply within {} s; it will be in the session: baaaht sessions show {}",
                chat.wait, sent.session_id
            ))
        });
        let event = match next.and_then(|next| next.map_err(status)) {
            Ok(Some(event)) => event,
            Ok(None) => break Err(CliError::StreamEnded),
            Err(error) => break Err(error),
        };
        if let Some(v1::orchestrator_event::Event::Notice(notice)) = &event.event {
            eprint!("{}", clean(&baaaht_cli::tasks::notice_text(notice)));
            continue;
        }
        if event.turn_id != sent.turn_id {
            continue;
        }
        if let Some(spinner) = spinner.as_mut() {
            spinner.clear(&mut note);
        }
        if matches!(event.event, Some(v1::orchestrator_event::Event::TextDelta(_))) {
            spinner = None;
        }
        match show(&event, &mut out, &mut note) {
            Some(Ending::Reply) => break Ok(()),
            Some(Ending::Failed(_)) if stopping => {
                break Err(CliError::Interrupted { session: sent.session_id.clone() })
            }
            Some(Ending::Failed(message)) => break Err(CliError::TurnFailed(message)),
            None => {}
        }
    };
    if let Some(spinner) = spinner.as_mut() {
        spinner.clear(&mut note);
    }
    // After the answer, on a line of its own, where it does not mix with the text.
    eprintln!("(session {})", sent.session_id);
    ending
}

struct Chat {
    prompt: String,
    user: Option<String>,
    group: Option<String>,
    sender: Option<String>,
    session: Option<String>,
    new: bool,
    wait: u64,
}

async fn sessions(
    client: &mut baaaht_proto::client::Client,
    socket: &std::path::Path,
    command: SessionsCommand,
) -> Result<(), CliError> {
    let status = |status| CliError::from_status(status, socket);
    let env = |key: &str| std::env::var(key).ok();
    let header_line = |h: &v1::SessionHeader| format!("{}  {}", h.id, h.status);
    match command {
        SessionsCommand::List { user, group, status: state, json } => {
            let filter = v1::SessionFilter {
                user_id: user.clone().unwrap_or_default(),
                group_id: group.unwrap_or_default(),
                context_type: if user.is_some() { v1::ContextType::User as i32 } else { 0 },
                status: state.unwrap_or_default(),
                ..v1::SessionFilter::default()
            };
            let list = client.sessions.list_sessions(filter).await.map_err(status)?.into_inner();
            if json {
                let rows: Vec<serde_json::Value> = list
                    .sessions
                    .iter()
                    .map(|s| {
                        serde_json::json!({"id": s.id, "status": s.status, "userId": s.user_id, "groupId": s.group_id,
                            "created": s.created, "lastActivity": s.last_activity, "title": s.title, "model": s.model})
                    })
                    .collect();
                println!("{}", clean(&serde_json::to_string_pretty(&rows).map_err(CliError::Json)?));
            } else {
                print!("{}", clean(&baaaht_cli::chat::sessions_text(&list)));
            }
        }
        SessionsCommand::Show { id, leaf } => {
            let request = v1::ReadSessionRequest { session_id: id, leaf_entry_id: leaf.unwrap_or_default() };
            let transcript = client.sessions.read_session(request).await.map_err(status)?.into_inner();
            print!("{}", clean(&baaaht_cli::chat::transcript_text(&transcript)));
        }
        SessionsCommand::New { user, group, title } => {
            let context = baaaht_cli::chat::context(user, group, env);
            let request = v1::NewSessionRequest { context: Some(context), title: title.unwrap_or_default() };
            println!(
                "{}",
                clean(&header_line(&client.sessions.new_session(request).await.map_err(status)?.into_inner()))
            );
        }
        SessionsCommand::Resume { id } => {
            let header =
                client.sessions.resume_session(v1::SessionRef { session_id: id }).await.map_err(status)?.into_inner();
            println!("{}", clean(&header_line(&header)));
        }
        SessionsCommand::Fork { id, entry } => {
            let request = v1::ForkSessionRequest { session_id: id, entry_id: entry.unwrap_or_default() };
            println!(
                "{}",
                clean(&header_line(&client.sessions.fork_session(request).await.map_err(status)?.into_inner()))
            );
        }
        SessionsCommand::Archive { id } => {
            let archived = client.sessions.archive_session(v1::SessionRef { session_id: id }).await.map_err(status)?;
            println!("{}", clean(&archived.into_inner().message));
        }
        SessionsCommand::Compact { id } => {
            let compacted = client.sessions.compact_session(v1::SessionRef { session_id: id }).await.map_err(status)?;
            println!("{}", clean(&compacted.into_inner().message));
        }
        SessionsCommand::Model { id, model } => {
            let request = v1::SwitchModelRequest { session_id: id, model };
            println!("{}", clean(&client.sessions.switch_model(request).await.map_err(status)?.into_inner().message));
        }
    }
    Ok(())
}

async fn mcp(
    client: &mut baaaht_proto::client::Client,
    socket: &std::path::Path,
    command: McpCommand,
) -> Result<(), CliError> {
    let status = |status| CliError::from_status(status, socket);
    let env = |key: &str| std::env::var(key).ok();
    // A context for list/tools/test (the caller's own by default); add/rm touch the system's
    // servers unless a context is named.
    let named = |user: Option<String>, group: Option<String>| {
        (user.is_some() || group.is_some()).then(|| baaaht_cli::chat::context(user, group, env))
    };
    let text = match command {
        McpCommand::List { user, group } => {
            let request = v1::McpServerRequest {
                context: Some(baaaht_cli::chat::context(user, group, env)),
                ..Default::default()
            };
            baaaht_cli::mcp::servers_text(&client.admin.list_mcp_servers(request).await.map_err(status)?.into_inner())
        }
        McpCommand::Tools { server, user, group } => {
            let context = Some(baaaht_cli::chat::context(user, group, env));
            let request = v1::McpServerRequest { context, server, ..Default::default() };
            baaaht_cli::mcp::tools_text(
                &client.admin.list_mcp_tools(request).await.map_err(status)?.into_inner(),
                false,
            )
        }
        McpCommand::Test { server, user, group } => {
            let context = Some(baaaht_cli::chat::context(user, group, env));
            let request = v1::McpServerRequest { context, server, restart: true, ..Default::default() };
            baaaht_cli::mcp::tools_text(&client.admin.list_mcp_tools(request).await.map_err(status)?.into_inner(), true)
        }
        McpCommand::Add {
            name,
            command,
            args,
            install,
            image,
            env: pairs,
            egress,
            role,
            idle_timeout,
            timeout,
            mounts,
            state,
            workspace,
            user,
            group,
        } => {
            let server = baaaht_cli::mcp::NewServer {
                command,
                args,
                install,
                image,
                env: pairs,
                egress,
                roles: role,
                idle_timeout,
                timeout,
                mounts,
                state,
                workspace,
            };
            let yaml = server.yaml().map_err(CliError::Usage)?;
            let flags = match (&user, &group) {
                (Some(user), _) => format!(" --user {user}"),
                (_, Some(group)) => format!(" --group {group}"),
                _ => String::new(),
            };
            let context = named(user, group);
            let request = v1::PutMcpServerRequest { system: context.is_none(), context, name: name.clone(), yaml };
            let listed = client.admin.put_mcp_server(request).await.map_err(status)?.into_inner();
            let file = listed.servers.iter().find(|s| s.name == name).map(|s| s.file.clone()).unwrap_or_default();
            format!("added {name} to {file}; `baaaht mcp test {name}{flags}` starts it and lists its tools\n")
        }
        McpCommand::Rm { name, user, group } => {
            let context = named(user, group);
            let request =
                v1::McpServerRequest { system: context.is_none(), context, server: name.clone(), ..Default::default() };
            client.admin.remove_mcp_server(request).await.map_err(status)?;
            format!("removed {name}\n")
        }
    };
    print!("{}", clean(&text));
    Ok(())
}

async fn skills(
    client: &mut baaaht_proto::client::Client,
    socket: &std::path::Path,
    command: SkillsCommand,
) -> Result<(), CliError> {
    let status = |status| CliError::from_status(status, socket);
    let env = |key: &str| std::env::var(key).ok();
    match command {
        SkillsCommand::List { user, group } => {
            let context = baaaht_cli::chat::context(user, group, env);
            let manifest = client
                .skills
                .get_skill_manifest(v1::SkillManifestRequest { context: Some(context) })
                .await
                .map_err(status)?
                .into_inner();
            for skill in &manifest.skills {
                let always = if skill.always_loaded { ", always loaded" } else { "" };
                println!("{}", clean(&format!("{} ({}{always}): {}", skill.name, skill.scope, skill.description)));
            }
        }
        SkillsCommand::Show { name, file, user, group } => {
            let context = baaaht_cli::chat::context(user, group, env);
            let request =
                v1::SkillContentRequest { context: Some(context), skill: name, path: file.unwrap_or_default() };
            print!("{}", clean(&client.skills.get_skill_content(request).await.map_err(status)?.into_inner().content));
        }
        SkillsCommand::Install { source, local, path, git_ref, replace, user, group } => {
            let context = baaaht_cli::chat::context(user, group, env);
            // The daemon reads the folder: a relative one means the caller's working folder.
            let local_folder = match local {
                Some(folder) => std::path::absolute(&folder)
                    .map_err(|error| CliError::Usage(format!("--local {}: {error}", folder.display())))?
                    .to_string_lossy()
                    .into_owned(),
                None => String::new(),
            };
            let source = source.unwrap_or_default();
            let request =
                v1::InstallSkillRequest { context: Some(context), source, path, git_ref, replace, local_folder };
            let installed = client.skills.install_skill(request).await.map_err(status)?.into_inner();
            let commit: String = installed.commit.chars().take(12).collect();
            let line = format!(
                "installed {} into {} (commit {commit}): {}",
                installed.name, installed.installed_to, installed.description
            );
            println!("{}", clean(&line));
        }
    }
    Ok(())
}

fn role_number(role: &str) -> i32 {
    let role = match role {
        "assistant" => v1::AgentRole::Assistant,
        "worker" => v1::AgentRole::Worker,
        "researcher" => v1::AgentRole::Researcher,
        "coder" => v1::AgentRole::Coder,
        "memory" => v1::AgentRole::Memory,
        "heartbeat" => v1::AgentRole::Heartbeat,
        _ => v1::AgentRole::Tool,
    };
    role as i32
}
