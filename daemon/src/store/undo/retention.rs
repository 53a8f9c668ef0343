//! What undo lets go, oldest first: a session's turns past `sessions.undo.turns`, and a
//! context's turns while its kept contents take more than `sessions.undo.max_size`. A turn let
//! go is named in its session's records (`dropped`), so that its undo says its files cannot be
//! put back instead of finding nothing to do.

use std::collections::{HashMap, HashSet};

use super::{lock, Record, Undo, UndoError};
use crate::base::auth::Context;
use crate::base::state;

/// The sessions a context kept changes for: `undo/{context}/sessions`, one id a line.
const SESSIONS: &str = "sessions";

impl Undo {
    fn sessions_list(&self, context: &Context) -> std::path::PathBuf {
        self.context_dir(context).join(SESSIONS)
    }

    /// Notes that `session` keeps changes in `context`'s store (once per session).
    pub(super) fn note_session(&self, context: &Context, session: &str) -> Result<(), UndoError> {
        if self.sessions_of(context).iter().any(|known| known == session) {
            return Ok(());
        }
        let path = self.sessions_list(context);
        state::private_dir(path.parent().unwrap_or(&path)).map_err(|source| self.io_error("the undo store", source))?;
        state::append_synced(&path, format!("{session}\n").as_bytes()).map_err(UndoError::Record)
    }

    pub(super) fn sessions_of(&self, context: &Context) -> Vec<String> {
        let text = std::fs::read_to_string(self.sessions_list(context)).unwrap_or_default();
        text.lines().filter(|line| !line.is_empty()).map(str::to_string).collect()
    }

    /// The bytes `context`'s store takes (read once, then kept up to date).
    pub(super) fn size(&self, context: &Context) -> u64 {
        if let Some(size) = lock(&self.sizes).get(context) {
            return *size;
        }
        let size = self.objects(context).list().map(|listed| listed.iter().map(|(_, size)| size).sum()).unwrap_or(0);
        *lock(&self.sizes).entry(context.clone()).or_insert(size)
    }

    pub(super) fn grew(&self, context: &Context, bytes: u64) {
        if bytes > 0 {
            if let Some(size) = lock(&self.sizes).get_mut(context) {
                *size += bytes;
            }
        }
    }

    /// After a turn of `session` in `context` ended: its oldest turns past the number kept,
    /// then the context's oldest turns while the store is past its size, are let go.
    pub fn keep_within(&self, session: &str, context: &Context) -> Result<(), UndoError> {
        let entries = turns_of(&self.records(session));
        if entries.len() > self.config.turns {
            let oldest = &entries[..entries.len() - self.config.turns];
            let why = format!("only the last {} turns of a conversation keep their file changes", self.config.turns);
            self.let_go(session, oldest, &why)?;
        }
        if self.size(context) > self.config.max_size.0 {
            self.shrink(context)?;
        }
        Ok(())
    }

    /// Rewrites `session`'s records without the changes of the turns `entries`, noting why.
    fn let_go(&self, session: &str, entries: &[String], why: &str) -> Result<(), UndoError> {
        let _writing = lock(&self.writing);
        let (gone, mut records): (Vec<Record>, Vec<Record>) = self
            .records(session)
            .into_iter()
            .partition(|record| matches!(record, Record::Call { entry, .. } if entries.contains(entry)));
        let (mut marked, mut ignores) = (vec![], vec![]);
        for record in gone {
            if let Record::Call { changes, marked: source, .. } = record {
                ignores.extend(super::look::ignore_contents(&changes));
                if let Some(source) = source {
                    let written = changes.into_iter().filter_map(|change| change.after);
                    marked.extend(written.map(|stamp| (stamp.hash, source.clone())));
                }
            }
        }
        records.push(Record::Dropped {
            entries: entries.to_vec(),
            why: why.to_string(),
            at: state::now_seconds(),
            marked,
            ignores,
        });
        let mut text = vec![];
        for record in &records {
            text.extend(serde_json::to_vec(record).map_err(|error| UndoError::Said(error.to_string()))?);
            text.push(b'\n');
        }
        state::write_atomic(&self.records_path(session), &text, 0o600).map_err(UndoError::Record)?;
        tracing::info!(session, turns = entries.len(), why, "undo let go of the oldest turns' file changes");
        Ok(())
    }

    /// Lets go of `context`'s oldest turns until what the rest needs (with every folder's
    /// present content) fits in nine tenths of the store's size, then removes what nothing
    /// needs any more.
    fn shrink(&self, context: &Context) -> Result<(), UndoError> {
        let objects = self.objects(context);
        let sizes: HashMap<String, u64> =
            objects.list().map_err(|source| self.io_error("the undo store", source))?.into_iter().collect();
        let sessions = self.sessions_of(context);
        // Every turn with changes, oldest first: (when, session, entry).
        let mut turns: Vec<(u64, String, String)> = vec![];
        for session in &sessions {
            let mut seen = HashSet::new();
            for record in self.records(session) {
                if let Record::Call { entry, at, .. } = record {
                    if seen.insert(entry.clone()) {
                        turns.push((at, session.clone(), entry));
                    }
                }
            }
        }
        turns.sort();
        let present = self.present_hashes(context);
        let goal = self.config.max_size.0 / 10 * 9;
        let mut dropped: HashMap<String, Vec<String>> = HashMap::new();
        loop {
            let needed = self.needed(&sessions, &dropped, &present);
            let size: u64 = needed.iter().filter_map(|hash| sizes.get(hash)).sum();
            if size <= goal || turns.is_empty() {
                break;
            }
            let (_, session, entry) = turns.remove(0);
            dropped.entry(session).or_default().push(entry);
        }
        let why = format!(
            "the oldest changes were let go to keep the undo store within {} (sessions.undo.max_size)",
            self.config.max_size
        );
        for (session, entries) in &dropped {
            self.let_go(session, entries, &why)?;
        }
        let needed = self.needed(&sessions, &HashMap::new(), &present);
        let (count, bytes) = objects.sweep(&needed).map_err(|source| self.io_error("the undo store", source))?;
        let size = self.size(context).saturating_sub(bytes);
        lock(&self.sizes).insert(context.clone(), size);
        if size > self.config.max_size.0 {
            tracing::warn!(%context, size, max = self.config.max_size.0, "the folders' present contents alone take more than the undo store may; raise sessions.undo.max_size or keep fewer files in the projects");
        }
        tracing::info!(%context, removed = count, bytes, "undo store shrunk");
        Ok(())
    }

    /// The contents the records of `sessions` still need (leaving out the turns `dropped`),
    /// with `present`.
    fn needed(
        &self,
        sessions: &[String],
        dropped: &HashMap<String, Vec<String>>,
        present: &HashSet<String>,
    ) -> HashSet<String> {
        let mut needed = present.clone();
        for session in sessions {
            let gone = dropped.get(session);
            for record in self.records(session) {
                let changes = match record {
                    Record::Call { entry, .. } if gone.is_some_and(|gone| gone.contains(&entry)) => continue,
                    Record::Call { changes, .. } => changes,
                    Record::Undone { restored, .. } | Record::Redone { restored, .. } => restored,
                    Record::Dropped { .. } | Record::Incomplete { .. } => continue,
                };
                for change in changes {
                    needed.extend(change.before.into_iter().chain(change.after).map(|stamp| stamp.hash));
                }
            }
        }
        needed
    }
}

impl Undo {
    /// What undo keeps, in a sentence for `doctor`, and whether every store is within its size.
    pub fn said(&self) -> (String, bool) {
        if !self.config.enabled {
            return (
                "undo keeps no file changes (sessions.undo.enabled is false): /undo moves the conversation only".into(),
                true,
            );
        }
        let (turns, most) = (self.config.turns, self.config.max_size);
        let mut largest: Option<(String, u64)> = None;
        for folder in std::fs::read_dir(self.data.join("undo")).into_iter().flatten().flatten() {
            let name = folder.file_name().to_string_lossy().into_owned();
            let objects = super::objects::Objects::at(folder.path().join("objects"));
            let size: u64 = objects.list().map(|listed| listed.iter().map(|(_, size)| size).sum()).unwrap_or(0);
            if largest.as_ref().is_none_or(|(_, most)| size > *most) {
                largest = Some((name, size));
            }
        }
        let mib = |bytes: u64| format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64);
        match largest {
            None => (format!("undo keeps the last {turns} turns of each conversation, at most {most} per person; nothing kept yet"), true),
            Some((name, size)) => (
                format!("undo keeps the last {turns} turns of each conversation, at most {most} per person; the largest store is {name}'s, {}", mib(size)),
                size <= most.0,
            ),
        }
    }
}

/// The turns with changes in `records`, oldest first.
pub(super) fn turns_of(records: &[Record]) -> Vec<String> {
    let mut turns: Vec<String> = vec![];
    for record in records {
        if let Record::Call { entry, .. } = record {
            if !turns.contains(entry) {
                turns.push(entry.clone());
            }
        }
    }
    turns
}
