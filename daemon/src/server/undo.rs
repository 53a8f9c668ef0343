//! Undo (and redo) of a conversation's last turns: the plan as a person reads it, and the undo
//! itself, done while no turn runs in the conversation.

use std::collections::HashSet;

use baaaht_proto::v1;
use tonic::{Request, Response, Status};

use super::{check, Shared};
use crate::base::auth::{Caller, Operation};
use crate::guard::audit::{Kind, Query};
use crate::store::sessions::log::{Activity, Entry};
use crate::store::undo::{Plan, UndoError};

/// The most things a plan lists that cannot be taken back.
const MOST_EFFECTS: usize = 12;

impl From<UndoError> for Status {
    fn from(error: UndoError) -> Status {
        match error {
            UndoError::Said(text) => Status::failed_precondition(text),
            UndoError::DiskFull => Status::resource_exhausted(error.to_string()),
            other => {
                tracing::error!(error = %baaaht_proto::error_chain(&other), "an undo failed");
                Status::internal(baaaht_proto::error_chain(&other))
            }
        }
    }
}

pub(super) async fn undo(shared: &Shared, request: Request<v1::UndoRequest>) -> Result<Response<v1::UndoPlan>, Status> {
    let named = super::context_of(request.get_ref().context.as_ref(), "context")?;
    let caller = check(shared, &request, Operation::Undo, named.as_ref(), Some(&request.get_ref().session_id))?;
    // A person's to ask (an agent never takes turns back).
    let asker = match &caller {
        Caller::Container(_) => return Err(Status::permission_denied("an agent cannot undo turns")),
        Caller::Host(_) => None,
        Caller::Gateway(call) if call.user.as_ref().is_some_and(|user| user.admin) => None,
        Caller::Gateway(call) => call.user.as_ref().map(|user| user.id.clone()),
    };
    let asked = request.into_inner();
    let session = match asked.session_id.is_empty() {
        false => asked.session_id.clone(),
        true => {
            let context = super::own_context(&caller, named)?;
            shared.sessions.active(&context, asker.as_deref().unwrap_or(&context.id))?.id
        }
    };
    super::valid_id(&session, "session_id")?;
    let record = shared.sessions.get(&session).ok_or_else(|| Status::not_found(format!("no session `{session}`")))?;
    if record.status == crate::store::sessions::SessionStatus::Archived {
        return Err(Status::failed_precondition(format!(
            "session {session} is archived: resume it first (`baaaht sessions resume {session}`)"
        )));
    }
    // No turn runs meanwhile, and none starts until the undo is done.
    let _no_turn = shared.turns.hold_idle(&session, std::time::Duration::from_secs(3)).await.ok_or_else(|| {
        Status::failed_precondition(
            "A turn is running in this conversation: stop it (Ctrl+C, /stop) or wait for its answer, then undo.",
        )
    })?;
    let undo = shared.undo.clone();
    let sessions = shared.sessions.clone();
    let workspaces = shared.workspaces.clone();
    let group = record.group_id.is_some();
    let expect = asked.expect_leaf_entry_id.clone();
    let expect_digest = asked.expect_digest.clone();
    let turns = asked.turns.max(1) as usize;
    let (plan, done) = tokio::task::spawn_blocking(move || {
        // The workspace's files are there while it is mounted (its filesystem, when it has
        // one, is mounted only while a tool container holds it).
        let _mounted = match workspaces.has(&session) {
            true => Some(Mounted::take(&workspaces, &session)?),
            false => None,
        };
        let plan = match asked.redo {
            true => undo.plan_redo(&sessions, &session)?,
            false => undo.plan(&sessions, &session, turns)?,
        };
        // In a group, a member takes back only their own turns (an admin any).
        if let (Some(asker), true) = (&asker, group) {
            if plan.senders.iter().any(|sender| sender.as_deref() != Some(asker.as_str())) {
                return Err(UndoError::Said(
                    "Only the person who asked a turn (or an admin) can undo it, and one of these turns is someone else's in the group.".into(),
                ));
            }
        }
        if !asked.apply {
            return Ok::<_, UndoError>((plan, None));
        }
        if !expect.is_empty() && expect != plan.from_leaf {
            return Err(UndoError::Said(
                "The conversation moved on since the undo was shown: ask for it again to see what it would do now.".into(),
            ));
        }
        if expect_digest.is_empty() {
            return Err(UndoError::Said(
                "An undo is done only as it was shown: ask for its plan first, then confirm it (expect_digest is the plan's digest).".into(),
            ));
        }
        if expect_digest != plan.digest() {
            return Err(UndoError::Said(
                "What the undo would do changed since it was shown (a file was changed or put back meanwhile): ask for it again to see what it would do now.".into(),
            ));
        }
        let done = undo.apply(&sessions, &plan)?;
        Ok((plan, Some(done)))
    })
    .await
    .map_err(|_panicked| Status::internal("the undo stopped unexpectedly; the daemon's log says why"))??;
    let effects = if plan.redo { vec![] } else { effects(shared, &plan) };
    if let Some(done) = &done {
        shared.taints.put_back(&plan.session, done.marked.clone());
        tracing::info!(
            session = %plan.session,
            redo = plan.redo,
            turns = plan.turns.len(),
            restored = done.restored.len(),
            skipped = done.skipped.len(),
            "turns undone on request"
        );
    }
    Ok(Response::new(to_wire(&plan, done.as_ref(), effects, shared.undo.enabled())))
}

/// A session's workspace held mounted for an undo.
struct Mounted {
    workspaces: std::sync::Arc<crate::sandbox::workspace::Workspaces>,
    session: String,
}

impl Mounted {
    fn take(
        workspaces: &std::sync::Arc<crate::sandbox::workspace::Workspaces>,
        session: &str,
    ) -> Result<Mounted, UndoError> {
        workspaces
            .acquire(session)
            .map_err(|error| UndoError::Said(format!("The conversation's files cannot be opened now: {error}.")))?;
        Ok(Mounted { workspaces: workspaces.clone(), session: session.to_string() })
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.workspaces.release(&self.session);
    }
}

/// What the plan's turns did outside the files, which an undo cannot take back: from the
/// audit (the web reached, MCP tools called) and the conversation (messages sent).
fn effects(shared: &Shared, plan: &Plan) -> Vec<String> {
    let mut said = vec![];
    let mut seen = HashSet::new();
    let mut add = |line: String| {
        if seen.insert(line.clone()) {
            said.push(line);
        }
    };
    let correlations: HashSet<&str> = plan.correlations.iter().map(String::as_str).collect();
    if let Ok(read) = shared.sessions.read(&plan.session) {
        let branch = read.branch(&plan.from_leaf).unwrap_or_default();
        let first = plan.turns.first().map(String::as_str).unwrap_or_default();
        let undone: HashSet<&str> = branch.iter().map(Entry::id).skip_while(|id| *id != first).collect();
        for entry in &read.entries {
            if let Entry::Activity { after, activity: Activity::Message { content, .. }, .. } = entry {
                if undone.contains(after.as_str()) {
                    let line = content.lines().find(|line| !line.trim().is_empty()).unwrap_or_default();
                    let line: String = line.chars().take(60).collect();
                    add(format!("a message sent to the conversation (\"{line}\")"));
                }
            }
        }
        let since = branch.iter().find(|entry| entry.id() == first).and_then(|entry| match entry {
            Entry::Message { timestamp, .. } => timestamp.parse::<jiff::Timestamp>().ok(),
            _ => None,
        });
        let query = Query { since, user: None, kind: None, limit: 10_000 };
        for record in shared.audit.search(&query).unwrap_or_default() {
            if record.session != plan.session || !correlations.contains(record.correlation_id.as_str()) {
                continue;
            }
            let text =
                |key: &str| record.detail.get(key).and_then(|value| value.as_str()).unwrap_or_default().to_string();
            match (record.kind, record.outcome.as_str()) {
                (Kind::Egress, "allowed") if record.detail.contains_key("search_results") => add("a web search".into()),
                (Kind::Egress, "allowed") if !text("host").is_empty() => {
                    add(format!("a request to {} on the web", text("host")))
                }
                (Kind::Mcp, "ok") => add(format!("{} of the MCP server {}", text("tool"), text("server"))),
                _ => {}
            }
        }
    }
    if said.len() > MOST_EFFECTS {
        let more = said.len() - MOST_EFFECTS;
        said.truncate(MOST_EFFECTS);
        said.push(format!("and {more} more"));
    }
    said
}

fn to_wire(plan: &Plan, done: Option<&crate::store::undo::Done>, effects: Vec<String>, kept: bool) -> v1::UndoPlan {
    let file = |step: &crate::store::undo::FileStep| v1::UndoFile {
        folder: step.change.root.clone(),
        path: step.change.path.clone(),
        summary: step.summary.clone(),
    };
    let skipped = |skip: &crate::store::undo::Skipped| v1::UndoSkipped {
        folder: skip.root.clone(),
        path: skip.path.clone(),
        why: skip.why.clone(),
    };
    let (files, skipped): (Vec<v1::UndoFile>, Vec<v1::UndoSkipped>) = match done {
        Some(done) => (
            plan.files
                .iter()
                .filter(|step| done.restored.iter().any(|c| c.host == step.change.host && c.path == step.change.path))
                .map(file)
                .collect(),
            done.skipped.iter().map(skipped).collect(),
        ),
        None => (plan.files.iter().map(file).collect(), plan.skipped.iter().map(skipped).collect()),
    };
    let mut wire = v1::UndoPlan {
        session_id: plan.session.clone(),
        redo: plan.redo,
        turns: plan.turns.len() as u32,
        asked: plan.asked.clone(),
        files,
        skipped,
        not_undoable: effects,
        applied: done.is_some(),
        from_entry_id: plan.from_leaf.clone(),
        to_entry_id: plan.to_leaf.clone(),
        files_kept: kept,
        text: String::new(),
        digest: plan.digest(),
    };
    wire.text = text(&wire);
    wire
}

/// The plan (or what was done) in sentences, the same on every channel.
fn text(plan: &v1::UndoPlan) -> String {
    let quoted: Vec<String> = plan.asked.iter().map(|line| format!("\"{}\"", shown(line))).collect();
    let turns = match (plan.redo, plan.turns) {
        (true, _) => "the last undo".to_string(),
        (false, 1) => format!("the last turn ({})", quoted.join(", ")),
        (false, n) => format!("the last {n} turns ({})", quoted.join(", ")),
    };
    let mut lines = vec![match plan.applied {
        true if plan.redo => "Redone: the undone turns are back.".to_string(),
        true => format!("Undone: {turns}."),
        false if plan.redo => "Redo the last undo?".to_string(),
        false => format!("Undo {turns}?"),
    }];
    let where_to = |path: &str, folder: &str| match folder {
        "/workspace" => shown(path),
        folder => shown(&format!("{folder}/{path}")),
    };
    if !plan.files.is_empty() {
        let verb = if plan.applied { "Put back" } else { "Files put back" };
        lines.push(format!("{verb} ({}):", plan.files.len()));
        lines.extend(
            plan.files.iter().map(|file| format!("  {} — {}", where_to(&file.path, &file.folder), file.summary)),
        );
    } else if plan.files_kept {
        lines.push("No files to put back.".into());
    } else {
        lines.push("Files are not kept for undo on this server (sessions.undo.enabled is false): only the conversation goes back.".into());
    }
    if !plan.skipped.is_empty() {
        lines.push(format!("Left as they are ({}):", plan.skipped.len()));
        lines.extend(plan.skipped.iter().map(|skip| match skip.folder.is_empty() {
            // A whole turn's files, not one file.
            true => format!("  {}", shown(&skip.why)),
            false if skip.path.is_empty() => format!("  {} — {}", shown(&skip.folder), shown(&skip.why)),
            false => format!("  {} — {}", where_to(&skip.path, &skip.folder), shown(&skip.why)),
        }));
    }
    if !plan.not_undoable.is_empty() {
        lines.push("Cannot be taken back:".into());
        lines.extend(plan.not_undoable.iter().map(|effect| format!("  {}", shown(effect))));
    }
    if plan.files_kept && !plan.redo {
        lines.push("Never taken back: git's history in .git (git keeps it; its config and hooks are taken back), what a .gitignore named before the turn, links.".into());
    }
    lines.push(match (plan.applied, plan.redo) {
        (true, false) => {
            "The conversation is back before that message; /redo brings it back while you have not written since."
                .into()
        }
        (true, true) => "The conversation is where it was before the undo.".into(),
        (false, false) => "The conversation goes back to before that message.".into(),
        (false, true) => "The conversation goes back to where it was before the undo.".into(),
    });
    lines.join("\n")
}

/// A name a container or a server chose (a file's path, an MCP tool's), shown as it is: every
/// control character (a newline too: it would start a line of its own in the plan), and every
/// character that reorders or hides text, named by its code.
fn shown(name: &str) -> String {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c,
                '\u{00ad}' | '\u{061c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}' | '\u{e0000}'..='\u{e0fff}')
    };
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match hidden(c) {
            true => out.push_str(&format!("<U+{:04X}>", c as u32)),
            false => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_shows_names_as_they_are_and_no_name_can_forge_a_line() {
        let plan = v1::UndoPlan {
            turns: 1,
            asked: vec!["Fix it".into()],
            files: vec![v1::UndoFile {
                folder: "/project/site".into(),
                path: "a.txt — +1 −1 lines\n  /project/site/b\u{202e}txt.exe".into(),
                summary: "+1 −1 lines".into(),
            }],
            files_kept: true,
            ..Default::default()
        };
        let text = text(&plan);
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(text.contains("a.txt — +1 −1 lines<U+000A>  /project/site/b<U+202E>txt.exe — +1 −1 lines"), "{text}");
        assert!(text.starts_with("Undo the last turn (\"Fix it\")?"), "{text}");
    }
}
