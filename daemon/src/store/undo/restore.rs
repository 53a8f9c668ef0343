//! Taking turns back (and an undo back again): the plan shown first, then done in one step,
//! written down before it starts so that a daemon killed half way finishes it on its next
//! start. Each file is put back whole or not at all; one that is no longer as the turn left it
//! is kept and named.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{tree, Change, Record, Stamp, Undo, UndoError, PENDING};
use crate::base::auth::Context;
use crate::base::state;
use crate::store::sessions::log::Entry;
use crate::store::sessions::SessionStore;

/// The most bytes of a text compared for a file's short diff summary.
const MOST_COMPARED: usize = 1 << 20;

/// One file an undo puts back: `change.before` is what must be there now, `change.after` what
/// is put (none: the file is removed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStep {
    pub change: Change,
    /// "+3 −1 lines", "removed", "made again".
    pub summary: String,
}

/// A file an undo leaves as it is, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub root: String,
    pub path: String,
    pub why: String,
}

/// What an undo (or a redo) will do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub session: String,
    /// Whose it is (`user:ID`, `group:ID`).
    pub context: String,
    pub redo: bool,
    /// The turns taken back (or brought back), oldest first: the message each answered.
    pub turns: Vec<String>,
    /// The first line of each of those messages.
    pub asked: Vec<String>,
    /// Who sent each of them (none: not said).
    pub senders: Vec<Option<String>>,
    pub from_leaf: String,
    pub to_leaf: String,
    pub files: Vec<FileStep>,
    pub skipped: Vec<Skipped>,
    /// The turns' correlation ids, for what they did outside the files (the audit's records).
    pub correlations: Vec<String>,
}

impl Plan {
    /// What the plan would do, digested (a confirmation names it: what was shown is what is
    /// done).
    pub fn digest(&self) -> String {
        use sha2::Digest as _;
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        let digest = sha2::Sha256::digest(&bytes);
        digest.iter().take(16).map(|byte| format!("{byte:02x}")).collect()
    }
}

/// A file's folder name, its content before the first change of the turns and after the last.
type FirstAndLast = (String, Option<Stamp>, Option<Stamp>);

/// What an undo did.
#[derive(Debug, Clone, Default)]
pub struct Done {
    pub restored: Vec<Change>,
    pub skipped: Vec<Skipped>,
    /// Files of the workspace put back with a content a marked turn wrote (DESIGN.md §10.3),
    /// with what that turn read: they are marked again.
    pub marked: Vec<(String, String)>,
}

impl Done {
    /// What was done, in a sentence for the screens that did not ask for it.
    fn said(&self, plan: &Plan) -> String {
        let what = match (plan.redo, plan.turns.len()) {
            (true, _) => "Redone: the undone turns are back".to_string(),
            (false, 1) => "Undone: the last turn".to_string(),
            (false, n) => format!("Undone: the last {n} turns"),
        };
        let files = |n: usize| if n == 1 { "1 file".to_string() } else { format!("{n} files") };
        format!("{what} ({} put back, {} left as they are).", files(self.restored.len()), files(self.skipped.len()))
    }
}

fn said(text: impl Into<String>) -> UndoError {
    UndoError::Said(text.into())
}

fn first_line(text: &str) -> String {
    let line = text.lines().find(|line| !line.trim().is_empty()).unwrap_or_default().trim();
    match line.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

/// How `from` becomes `to`, in a few words.
fn summary(from: Option<&[u8]>, to: Option<&[u8]>) -> String {
    match (from, to) {
        (None, None) => "unchanged".into(),
        (Some(_), None) => "removed (the turn made it)".into(),
        (None, Some(_)) => "made again (the turn removed it)".into(),
        (Some(from), Some(to)) => {
            let texts = (std::str::from_utf8(from), std::str::from_utf8(to));
            match texts {
                (Ok(from), Ok(to)) if from.len() <= MOST_COMPARED && to.len() <= MOST_COMPARED => {
                    let mut counts: HashMap<&str, i64> = HashMap::new();
                    for line in from.lines() {
                        *counts.entry(line).or_default() -= 1;
                    }
                    for line in to.lines() {
                        *counts.entry(line).or_default() += 1;
                    }
                    let added: i64 = counts.values().filter(|n| **n > 0).sum();
                    let removed: i64 = -counts.values().filter(|n| **n < 0).sum::<i64>();
                    match (added, removed) {
                        (0, 0) => "only its mode or line ends".into(),
                        _ => format!("+{added} −{removed} lines"),
                    }
                }
                _ => format!("{} → {} bytes", from.len(), to.len()),
            }
        }
    }
}

impl Undo {
    fn pending_path(&self, session: &str) -> PathBuf {
        self.sessions_dir.join(session).join(PENDING)
    }

    /// What undoing the last `turns` turns of `session`'s branch would do.
    pub fn plan(&self, sessions: &SessionStore, session: &str, turns: usize) -> Result<Plan, UndoError> {
        let record = sessions.get(session).ok_or_else(|| said(format!("no conversation `{session}`")))?;
        let leaf = record.leaf.clone().unwrap_or_else(|| session.to_string());
        let read = sessions.read(session).map_err(|error| said(error.to_string()))?;
        let branch = read.branch(&leaf).unwrap_or_default();
        let asked: Vec<(&str, &str, String, Option<String>)> = branch
            .iter()
            .filter_map(|entry| match entry {
                Entry::Message { id, parent, message, .. } if message.role == "user" => {
                    Some((id.as_str(), parent.as_str(), first_line(&message.content), message.sender_id.clone()))
                }
                _ => None,
            })
            .collect();
        if asked.is_empty() {
            return Err(said("There is nothing to undo in this conversation yet."));
        }
        let taken = &asked[asked.len().saturating_sub(turns.max(1))..];
        let entries: HashSet<&str> = taken.iter().map(|(id, _, _, _)| *id).collect();
        let mut skipped = vec![];
        let records = self.records(session);
        let noted = |entry: &str| {
            records.iter().find_map(|record| match record {
                Record::Incomplete { entry: of, why, .. } if of == entry => Some(why.clone()),
                _ => None,
            })
        };
        for (entry, _, line, _) in taken {
            if let Some(why) = self.incomplete(entry).or_else(|| noted(entry)) {
                let why =
                    format!("some of the files \"{line}\" changed were not kept, so not all are put back ({why})");
                skipped.push(Skipped { root: String::new(), path: entry.to_string(), why });
            }
        }
        // Per file, in the order the calls changed it: first before, last after.
        let mut files: BTreeMap<(PathBuf, String), FirstAndLast> = BTreeMap::new();
        let mut correlations = vec![];
        for record in records {
            if let Record::Dropped { entries: dropped, why, .. } = &record {
                for (entry, _, line, _) in taken.iter().filter(|(entry, ..)| dropped.iter().any(|d| d == entry)) {
                    let why = format!("the files \"{line}\" changed cannot be put back: {why}");
                    skipped.push(Skipped { root: String::new(), path: entry.to_string(), why });
                }
            }
            let Record::Call { entry, correlation, changes, not_kept, .. } = record else { continue };
            if !entries.contains(entry.as_str()) {
                continue;
            }
            if !correlations.contains(&correlation) {
                correlations.push(correlation);
            }
            for change in changes {
                files
                    .entry((change.host.clone(), change.path.clone()))
                    .and_modify(|(_, _, after)| *after = change.after.clone())
                    .or_insert((change.root.clone(), change.before.clone(), change.after.clone()));
            }
            for missed in not_kept {
                skipped.push(Skipped { root: missed.root, path: missed.path, why: missed.why });
            }
        }
        let changes = files
            .into_iter()
            .map(|((host, path), (root, first, last))| Change { root, host, path, before: last, after: first })
            .collect();
        let (steps, more_skipped) = self.steps(&record.context(), changes);
        skipped.extend(more_skipped);
        Ok(Plan {
            session: session.to_string(),
            context: record.context().to_string(),
            redo: false,
            turns: taken.iter().map(|(id, _, _, _)| id.to_string()).collect(),
            asked: taken.iter().map(|(_, _, line, _)| line.clone()).collect(),
            senders: taken.iter().map(|(_, _, _, sender)| sender.clone()).collect(),
            from_leaf: leaf,
            to_leaf: taken[0].1.to_string(),
            files: steps,
            skipped,
            correlations,
        })
    }

    /// What redoing the last undo of `session` would do: only while the conversation is still
    /// where that undo left it.
    pub fn plan_redo(&self, sessions: &SessionStore, session: &str) -> Result<Plan, UndoError> {
        let record = sessions.get(session).ok_or_else(|| said(format!("no conversation `{session}`")))?;
        let leaf = record.leaf.clone().unwrap_or_else(|| session.to_string());
        let mut undone = vec![];
        for record in self.records(session) {
            match record {
                Record::Undone { entries, from_leaf, to_leaf, restored, .. } => {
                    undone.push((entries, from_leaf, to_leaf, restored))
                }
                Record::Redone { .. } => {
                    undone.pop();
                }
                Record::Call { .. } | Record::Dropped { .. } | Record::Incomplete { .. } => {}
            }
        }
        let Some((entries, from_leaf, to_leaf, restored)) = undone.pop() else {
            return Err(said("There is no undo to redo in this conversation."));
        };
        if to_leaf != leaf {
            return Err(said(
                "The conversation went on after the undo, so it cannot be redone; its earlier branch is still in the tree (/tree).",
            ));
        }
        let changes: Vec<Change> = restored
            .into_iter()
            .map(|change| Change { before: change.after, after: change.before, ..change })
            .collect();
        // Who asked the turns brought back: in a group, only they (or an admin) may.
        let read = sessions.read(session).map_err(|error| said(error.to_string()))?;
        let senders = entries
            .iter()
            .map(|id| {
                read.entries.iter().find_map(|entry| match entry {
                    Entry::Message { id: found, message, .. } if found == id => message.sender_id.clone(),
                    _ => None,
                })
            })
            .collect();
        let (files, skipped) = self.steps(&record.context(), changes);
        Ok(Plan {
            session: session.to_string(),
            context: record.context().to_string(),
            redo: true,
            turns: entries,
            asked: vec![],
            senders,
            from_leaf: leaf,
            to_leaf: from_leaf,
            files,
            skipped,
            correlations: vec![],
        })
    }

    /// Each change (`before`: what must be there now, `after`: what is put) checked against
    /// the file as it is: a step with its summary, or a file skipped with why.
    fn steps(&self, context: &Context, changes: Vec<Change>) -> (Vec<FileStep>, Vec<Skipped>) {
        let objects = self.objects(context);
        let cap = self.config.max_file_size.0;
        let (mut steps, mut skipped) = (vec![], vec![]);
        for change in changes {
            let skip = |why: String| Skipped { root: change.root.clone(), path: change.path.clone(), why };
            // What is there now; a link (or a device…) where the file was counts as nothing,
            // and is replaced; a folder on the way that is something else now, too.
            let now = crate::sandbox::shared_dirs::open_trusted(&change.host).and_then(|folder| {
                let replaced = match tree::look_at(&folder, &change.path)? {
                    tree::Found::Other(what) => Some(what.trim_start_matches("it is ").to_string()),
                    _ => None,
                };
                let way = match change.after {
                    Some(_) => tree::in_the_way(&folder, &change.path)?,
                    None => None,
                };
                let read = match replaced {
                    Some(_) => None,
                    None => tree::read(&folder, &change.path, cap)?,
                };
                Ok((read.map(|(bytes, _)| bytes), replaced, way))
            });
            let (now, replaced, way) = match now {
                Ok(now) => now,
                Err(error) => {
                    skipped.push(skip(format!("it cannot be read ({error})")));
                    continue;
                }
            };
            let now_hash = now.as_deref().map(super::objects::hash_of);
            if now_hash.as_deref() == change.after.as_ref().map(|stamp| stamp.hash.as_str()) {
                // Already as it should be.
                continue;
            }
            if now_hash.as_deref() != change.before.as_ref().map(|stamp| stamp.hash.as_str()) {
                let why = match now {
                    Some(_) => "it was changed since the assistant's turn (not by it); it is kept as it is",
                    None => "it was removed since the assistant's turn (not by it); it is left removed",
                };
                skipped.push(skip(why.into()));
                continue;
            }
            let to = match &change.after {
                Some(stamp) => match objects.get(&stamp.hash, cap) {
                    Ok(bytes) => Some(bytes),
                    Err(error) => {
                        skipped.push(skip(format!("its earlier content is not in the undo store ({error})")));
                        continue;
                    }
                },
                None => None,
            };
            let mut said = summary(now.as_deref(), to.as_deref());
            if let (Some(what), Some(_)) = (replaced, &change.after) {
                said = format!("{said}; {what} is there now and is replaced");
            }
            if let Some(way) = way {
                said = format!("{said}; {way} is not a folder now (a file or a link) and is replaced by it");
            }
            steps.push(FileStep { summary: said, change });
        }
        (steps, skipped)
    }

    /// Does `plan`: written down first, then each file put back (one whose content is not as
    /// planned any more is skipped and named), then the conversation moved, then recorded.
    pub fn apply(&self, sessions: &SessionStore, plan: &Plan) -> Result<Done, UndoError> {
        let bytes = serde_json::to_vec_pretty(plan).map_err(|error| said(error.to_string()))?;
        state::write_atomic(&self.pending_path(&plan.session), &bytes, 0o600).map_err(
            |error| match state::is_disk_full(&error) {
                true => UndoError::DiskFull,
                false => UndoError::Record(error),
            },
        )?;
        self.finish(sessions, plan)
    }

    fn finish(&self, sessions: &SessionStore, plan: &Plan) -> Result<Done, UndoError> {
        let context = Context::named(&plan.context)
            .ok_or_else(|| said(format!("the undo names no user or group (`{}`)", plan.context)))?;
        let changes = plan.files.iter().map(|step| step.change.clone()).collect();
        // Checked again: the plan may be older than what is there now.
        let (steps, mut skipped) = self.steps(&context, changes);
        let objects = self.objects(&context);
        let cap = self.config.max_file_size.0;
        let mut restored = vec![];
        for step in steps {
            let change = step.change;
            let put = crate::sandbox::shared_dirs::open_trusted(&change.host).and_then(|folder| match &change.after {
                Some(stamp) => {
                    let bytes = objects.get(&stamp.hash, cap)?;
                    tree::write(&folder, &change.path, &bytes, &stamp.meta())
                }
                None => tree::remove(&folder, &change.path),
            });
            match put {
                Ok(()) => restored.push(change),
                Err(error) => skipped.push(Skipped {
                    root: change.root,
                    path: change.path,
                    why: format!("it could not be put back ({error})"),
                }),
            }
        }
        // Files the plan found already as they should be count as restored.
        for step in &plan.files {
            let done = restored.iter().any(|change| change.host == step.change.host && change.path == step.change.path);
            let left = skipped.iter().any(|skip| skip.root == step.change.root && skip.path == step.change.path);
            if !done && !left {
                restored.push(step.change.clone());
            }
        }
        sessions.set_leaf(&plan.session, &plan.to_leaf).map_err(|error| said(error.to_string()))?;
        let at = state::now_seconds();
        let record = match plan.redo {
            false => Record::Undone {
                entries: plan.turns.clone(),
                from_leaf: plan.from_leaf.clone(),
                to_leaf: plan.to_leaf.clone(),
                at,
                restored: restored.clone(),
            },
            true => Record::Redone {
                from_leaf: plan.from_leaf.clone(),
                to_leaf: plan.to_leaf.clone(),
                at,
                restored: restored.clone(),
            },
        };
        self.append(&plan.session, &record)?;
        self.restored(&context, &restored);
        let pending = self.pending_path(&plan.session);
        if let Err(error) = std::fs::remove_file(&pending) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(%error, session = %plan.session, "cannot remove a finished undo's note; it is done again, harmlessly, at the next start");
            }
        }
        skipped.extend(plan.skipped.iter().cloned());
        let marked = self.marked(&plan.session, &restored);
        let done = Done { restored, skipped, marked };
        if let Some(events) = &self.events {
            use crate::store::events::{Event, Kind};
            let moved = Kind::Moved { leaf: plan.to_leaf.clone(), text: done.said(plan) };
            events.publish(&context, Event::of_session(&plan.session, moved));
        }
        Ok(done)
    }

    /// The workspace's files among `restored` whose content a marked turn of `session` wrote
    /// (whichever file it wrote it to), with what that turn read.
    fn marked(&self, session: &str, restored: &[Change]) -> Vec<(String, String)> {
        let mut by_content: HashMap<String, String> = HashMap::new();
        for record in self.records(session) {
            match record {
                Record::Call { changes, marked: Some(source), .. } => {
                    for stamp in changes.into_iter().filter_map(|change| change.after) {
                        by_content.entry(stamp.hash).or_insert_with(|| source.clone());
                    }
                }
                // Turns let go keep what their marked contents were.
                Record::Dropped { marked, .. } => {
                    for (hash, source) in marked {
                        by_content.entry(hash).or_insert(source);
                    }
                }
                _ => {}
            }
        }
        restored
            .iter()
            .filter(|change| change.root == super::WORKSPACE)
            .filter_map(|change| {
                let source = by_content.get(&change.after.as_ref()?.hash)?;
                Some((change.path.clone(), source.clone()))
            })
            .collect()
    }

    /// The sessions with an undo a stopped daemon left half done.
    pub fn pending(&self) -> Vec<String> {
        let Ok(folders) = std::fs::read_dir(&self.sessions_dir) else { return vec![] };
        let mut found: Vec<String> = folders
            .flatten()
            .filter(|folder| folder.path().join(PENDING).is_file())
            .map(|folder| folder.file_name().to_string_lossy().into_owned())
            .collect();
        found.sort();
        found
    }

    /// Finishes the undo a stopped daemon left half done in `session` (at start, before any
    /// turn, with the session's workspace mounted).
    pub fn recover(&self, sessions: &SessionStore, session: &str) -> Option<Done> {
        let pending = self.pending_path(session);
        let bytes = std::fs::read(&pending).ok()?;
        let plan: Plan = match serde_json::from_slice(&bytes) {
            Ok(plan) => plan,
            Err(error) => {
                // Written atomically, so never torn: a note from another version.
                tracing::warn!(%error, path = %pending.display(), "an unfinished undo's note cannot be read; it is set aside");
                // silent-ok: set aside or not, it is not read again as a plan.
                let _ = std::fs::rename(&pending, pending.with_extension("json.unreadable"));
                return None;
            }
        };
        match self.finish(sessions, &plan) {
            Ok(done) => {
                tracing::info!(
                    session,
                    restored = done.restored.len(),
                    skipped = done.skipped.len(),
                    "an undo cut short by a stop is finished"
                );
                Some(done)
            }
            Err(error) => {
                tracing::error!(session, %error, "an undo cut short by a stop cannot be finished");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_counts_the_lines_that_come_and_go() {
        assert_eq!(summary(Some(b"a\nb\nc\n"), Some(b"a\nc\nd\ne\n")), "+2 −1 lines");
        assert_eq!(summary(Some(b"a\n"), None), "removed (the turn made it)");
        assert_eq!(summary(None, Some(b"a")), "made again (the turn removed it)");
        assert_eq!(summary(Some(&[0xff, 0]), Some(&[0xfe])), "2 → 1 bytes");
        assert_eq!(first_line("\n  Please fix the build\nand more"), "Please fix the build");
    }
}
