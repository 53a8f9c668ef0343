//! `baaaht sessions` and the session commands.

use baaaht_proto::v1;

use crate::args::SessionsCommand;
use crate::terminal::clean;
use crate::CliError;

pub(crate) async fn sessions(
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
                print!("{}", clean(&crate::chat::sessions_text(&list)));
            }
        }
        SessionsCommand::Search { query, user, group, session, since, until, limit } => {
            let request = v1::SessionQuery {
                context: Some(crate::chat::context(user, group, env)),
                query,
                session_id: session.unwrap_or_default(),
                since: since.unwrap_or_default(),
                until: until.unwrap_or_default(),
                limit,
            };
            let hits = client.sessions.search_sessions(request).await.map_err(status)?.into_inner().hits;
            if hits.is_empty() {
                println!("Nothing said in these sessions matches.");
            }
            for hit in &hits {
                print!("{}", hit_text(hit));
            }
        }
        SessionsCommand::Show { id, leaf } => {
            let request = v1::ReadSessionRequest { session_id: id, leaf_entry_id: leaf.unwrap_or_default() };
            let transcript = client.sessions.read_session(request).await.map_err(status)?.into_inner();
            print!("{}", clean(&crate::chat::transcript_text(&transcript)));
        }
        SessionsCommand::New { user, group, title } => {
            let context = crate::chat::context(user, group, env);
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
        SessionsCommand::Undo { id, turns, redo, yes } => {
            let request = v1::UndoRequest { session_id: id.clone(), turns, redo, ..Default::default() };
            let plan = client.sessions.undo(request).await.map_err(status)?.into_inner();
            if !yes {
                let how = if redo { "--redo --yes".to_string() } else { format!("--turns {turns} --yes") };
                println!("{}\n\nRun `baaaht sessions undo {id} {how}` to do it.", clean(&plan.text));
                return Ok(());
            }
            let request = v1::UndoRequest {
                session_id: id,
                turns,
                redo,
                apply: true,
                expect_leaf_entry_id: plan.from_entry_id,
                context: None,
                expect_digest: plan.digest,
            };
            println!("{}", clean(&client.sessions.undo(request).await.map_err(status)?.into_inner().text));
        }
        SessionsCommand::Model { id, model } => {
            let request = v1::SwitchModelRequest { session_id: id, model };
            println!("{}", clean(&client.sessions.switch_model(request).await.map_err(status)?.into_inner().message));
        }
    }
    Ok(())
}

/// A message a search found: its session, entry, who said it and when, then its text.
pub(crate) fn hit_text(hit: &v1::SessionHit) -> String {
    let title = if hit.session_title.is_empty() { "untitled" } else { hit.session_title.as_str() };
    let mut text = format!(
        "{} “{}” · {} · {} · {}\n",
        clean(&hit.session_id),
        clean(title),
        clean(&hit.entry_id),
        clean(&hit.role),
        clean(&hit.at)
    );
    for line in hit.content.lines() {
        text.push_str(&format!("    {}\n", clean(line)));
    }
    text
}
