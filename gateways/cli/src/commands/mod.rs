//! What each `baaaht` command does: [`run`] picks the command's handler, one module per noun.

mod chat;
mod egress;
mod mcp;
pub(crate) mod memory;
mod people;
pub(crate) mod sessions;
mod skills;
mod tasks;

use baaaht_proto::v1;

use crate::args::{Cli, Command};
use crate::terminal::clean;
use crate::{status, CliError};

/// Runs the command `cli` names against the daemon.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    let socket = cli.socket.unwrap_or_else(|| crate::default_socket(|key| std::env::var(key).ok()));
    match cli.command {
        Command::Status { json, containers } => {
            let mut client = crate::connect(&socket).await?;
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
            let mut client = crate::connect(&socket).await?;
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
                print!("{}", clean(&crate::doctor::to_text(&role, &response)));
            }
            if response.ok {
                Ok(())
            } else {
                Err(CliError::SelfTestFailed(response.problems.join("; ")))
            }
        }
        Command::Chat { prompt, user, group, sender, session, new, wait } => {
            let mut client = crate::connect(&socket).await?;
            chat::chat(&mut client, &socket, chat::Chat { prompt, user, group, sender, session, new, wait }).await
        }
        Command::Skills { command } => {
            let mut client = crate::connect(&socket).await?;
            skills::skills(&mut client, &socket, command).await
        }
        Command::Sessions { command } => {
            let mut client = crate::connect(&socket).await?;
            sessions::sessions(&mut client, &socket, command).await
        }
        Command::Mcp { command } => {
            let mut client = crate::connect(&socket).await?;
            mcp::mcp(&mut client, &socket, command).await
        }
        Command::Egress { command } => {
            let mut client = crate::connect(&socket).await?;
            egress::egress(&mut client, &socket, command).await
        }
        Command::Memory { command } => {
            let mut client = crate::connect(&socket).await?;
            memory::memory(&mut client, &socket, command).await
        }
        Command::Users { command } => {
            let mut client = crate::connect(&socket).await?;
            people::users(&mut client, &socket, command).await
        }
        Command::Groups { command } => {
            let mut client = crate::connect(&socket).await?;
            people::groups(&mut client, &socket, command).await
        }
        Command::Tui { user, group, sender, theme } => {
            let env = |key: &str| std::env::var(key).ok();
            let in_group = group.is_some();
            let context = crate::chat::context(user, group, env);
            let sender = match sender {
                Some(sender) => sender,
                None if in_group => crate::chat::login(env),
                None => context.id.clone(),
            };
            crate::tui::run::run(crate::tui::run::Target { socket, context, sender, theme, undos: Default::default() })
                .await
        }
        Command::Tasks { command } => {
            let mut client = crate::connect(&socket).await?;
            tasks::tasks(&mut client, &socket, command).await
        }
        Command::Inbox { user, group, all } => {
            let mut client = crate::connect(&socket).await?;
            let env = |key: &str| std::env::var(key).ok();
            let context = crate::chat::context(user, group, env);
            let list = client
                .sessions
                .list_inbox(v1::InboxRequest { context: Some(context), unread_only: !all, mark_read: true })
                .await
                .map_err(|status| CliError::from_status(status, &socket))?
                .into_inner();
            print!("{}", clean(&crate::tasks::inbox_text(&list)));
            Ok(())
        }
        Command::Audit { since, user, kind, limit, json } => {
            let mut client = crate::connect(&socket).await?;
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
            let text = if json { crate::people::audit_json(&found) } else { crate::people::audit_text(&found) };
            print!("{}", clean(&text));
            Ok(())
        }
        Command::Usage { user, group, month } => {
            let mut client = crate::connect(&socket).await?;
            let env = |key: &str| std::env::var(key).ok();
            let context = crate::chat::context(user, group, env);
            let report = client
                .admin
                .get_usage(v1::UsageRequest { context: Some(context) })
                .await
                .map_err(|status| CliError::from_status(status, &socket))?
                .into_inner();
            print!("{}", clean(&crate::people::usage_text(&report, month)));
            Ok(())
        }
    }
}

fn role_number(role: &str) -> i32 {
    baaaht_proto::role_named(role).unwrap_or(v1::AgentRole::Tool) as i32
}
