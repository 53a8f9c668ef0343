//! The run ledger (DESIGN.md §9.4): `data/state/runs/{task}.jsonl`, one line per event of a
//! run, appended and fsynced. A run is claimed here before its agent starts, so a run is
//! started at most once; after a crash a claim without its end is marked interrupted.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::base::state::StateError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunEvent {
    /// The slot is taken: its agent starts after this line is on disk.
    Claimed,
    /// The run ended (see `outcome`).
    Finished,
    /// A slot that got no run (catch-up policy, or the previous run still going).
    Skipped,
    /// A claimed run that a previous daemon never finished.
    Interrupted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    Failed,
    TimedOut,
    StartFailed,
    Interrupted,
    Skipped,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::StartFailed => "start_failed",
            Outcome::Interrupted => "interrupted",
            Outcome::Skipped => "skipped",
        }
    }
}

/// One line of a task's ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub task: String,
    pub run: String,
    pub event: RunEvent,
    /// The schedule slot this run is for.
    pub slot: Timestamp,
    pub attempt: u32,
    /// When this line was written.
    pub at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// Earlier slots this run stands for (catch-up), or skipped slots.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub missed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The start of the result, for `baaaht tasks runs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl RunRecord {
    pub fn new(task: &str, run: &str, event: RunEvent, slot: Timestamp, attempt: u32, at: Timestamp) -> RunRecord {
        RunRecord {
            task: task.to_string(),
            run: run.to_string(),
            event,
            slot,
            attempt,
            at,
            outcome: None,
            missed: 0,
            container: None,
            session: None,
            tokens: 0,
            error: None,
            result: None,
        }
    }
}

/// A run as `ListTaskRuns` shows it: its claim and its end folded together.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub run: String,
    pub slot: Timestamp,
    pub attempt: u32,
    pub started: Option<Timestamp>,
    pub ended: Option<Timestamp>,
    /// None while it runs.
    pub outcome: Option<Outcome>,
    pub missed: u64,
    pub container: Option<String>,
    pub session: Option<String>,
    pub tokens: u64,
    pub error: Option<String>,
    pub result: Option<String>,
}

/// The ledgers' folder.
#[derive(Debug)]
pub struct Ledger {
    dir: PathBuf,
    /// Held by whatever writes a ledger, so that a pruning rewrite never drops a line appended
    /// meanwhile.
    writing: std::sync::Mutex<()>,
}

/// The longest result kept in a record.
const MOST_RESULT: usize = 500;

/// `text` cut to at most `most` bytes on a character boundary, with `…` when cut.
pub fn shortened(text: &str, most: usize) -> String {
    if text.len() <= most {
        return text.to_string();
    }
    let mut cut = most;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}

impl Ledger {
    pub fn new(dir: PathBuf) -> Ledger {
        Ledger { dir, writing: std::sync::Mutex::new(()) }
    }

    fn path(&self, task: &str) -> PathBuf {
        self.dir.join(format!("{task}.jsonl"))
    }

    /// Appends `records` to their task's ledger; on disk (fsync) when this returns.
    pub fn append(&self, records: &[RunRecord]) -> Result<(), StateError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut by_task: std::collections::BTreeMap<String, Vec<u8>> = std::collections::BTreeMap::new();
        for record in records {
            let mut record = record.clone();
            record.result = record.result.map(|result| shortened(&result, MOST_RESULT));
            let line = by_task.entry(record.task.clone()).or_default();
            // silent-ok: a record of plain strings and numbers always serializes.
            line.extend(serde_json::to_vec(&record).unwrap_or_default());
            line.push(b'\n');
        }
        if by_task.is_empty() {
            return Ok(());
        }
        let _writing = self.writing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        std::fs::create_dir_all(&self.dir).map_err(|source| StateError::Write { path: self.dir.clone(), source })?;
        // One ledger: its own fsync. Several (a tick claiming many tasks): each written, then one
        // syncfs for them all, which costs one journal commit instead of one per file.
        let several = by_task.len() > 1;
        let mut last = None;
        for (task, bytes) in by_task {
            let path = self.path(&task);
            let write_error = |source| StateError::Write { path: path.clone(), source };
            let mut file =
                std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&path).map_err(write_error)?;
            file.write_all(&bytes).map_err(write_error)?;
            if !several {
                file.sync_data().map_err(write_error)?;
            }
            last = Some((file, path));
        }
        if let (true, Some((file, path))) = (several, last) {
            rustix::fs::syncfs(&file).map_err(|errno| StateError::Write { path, source: errno.into() })?;
        }
        Ok(())
    }

    /// Every record of `task`, oldest first; a line that does not parse (a torn last line after
    /// a crash) is skipped with a warning.
    pub fn read(&self, task: &str) -> Vec<RunRecord> {
        let path = self.path(task);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return vec![],
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read a run ledger");
                return vec![];
            }
        };
        text.lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .filter_map(|(index, line)| match serde_json::from_str(line) {
                Ok(record) => Some(record),
                Err(error) => {
                    tracing::warn!(path = %path.display(), line = index + 1, %error, "skipping a line of a run ledger");
                    None
                }
            })
            .collect()
    }

    /// The runs of `task`, newest first, at most `limit`.
    pub fn rows(&self, task: &str, limit: usize) -> Vec<RunRow> {
        rows(&self.read(task), limit)
    }

    /// Keeps the records of `task` written after `after`, and of those the newest `most`;
    /// rewrites the ledger atomically. Returns how many records went.
    pub fn prune(&self, task: &str, after: Timestamp, most: usize) -> Result<usize, StateError> {
        let _writing = self.writing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let records = self.read(task);
        let mut kept: Vec<&RunRecord> = records.iter().filter(|record| record.at > after).collect();
        if kept.len() > most {
            kept.drain(..kept.len() - most);
        }
        let removed = records.len() - kept.len();
        if removed == 0 {
            return Ok(0);
        }
        let mut bytes = vec![];
        for record in kept {
            // silent-ok: see `append`.
            bytes.extend(serde_json::to_vec(record).unwrap_or_default());
            bytes.push(b'\n');
        }
        crate::base::state::write_atomic(&self.path(task), &bytes, 0o600)?;
        Ok(removed)
    }

    /// Removes the ledger of a task that is gone.
    pub fn remove(&self, task: &str) {
        let _writing = self.writing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let path = self.path(task);
        if let Err(error) = std::fs::remove_file(&path) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %path.display(), %error, "cannot remove a run ledger");
            }
        }
    }

    /// The tasks that have a ledger.
    pub fn tasks(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return vec![] };
        entries
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".jsonl").map(str::to_string)
            })
            .collect()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Folds a task's records into runs, newest first, at most `limit`.
pub fn rows(records: &[RunRecord], limit: usize) -> Vec<RunRow> {
    let mut rows: Vec<RunRow> = vec![];
    for record in records {
        let position = rows.iter().position(|row| row.run == record.run);
        let row = match position {
            Some(index) => &mut rows[index],
            None => {
                rows.push(RunRow {
                    run: record.run.clone(),
                    slot: record.slot,
                    attempt: record.attempt,
                    started: None,
                    ended: None,
                    outcome: None,
                    missed: 0,
                    container: None,
                    session: None,
                    tokens: 0,
                    error: None,
                    result: None,
                });
                rows.last_mut().expect("just pushed")
            }
        };
        match record.event {
            RunEvent::Claimed => row.started = Some(record.at),
            RunEvent::Finished | RunEvent::Interrupted | RunEvent::Skipped => {
                row.ended = Some(record.at);
                row.outcome = record.outcome.or(match record.event {
                    RunEvent::Interrupted => Some(Outcome::Interrupted),
                    RunEvent::Skipped => Some(Outcome::Skipped),
                    _ => None,
                });
            }
        }
        row.missed = row.missed.max(record.missed);
        row.container = record.container.clone().or(row.container.take());
        row.session = record.session.clone().or(row.session.take());
        row.tokens = row.tokens.max(record.tokens);
        row.error = record.error.clone().or(row.error.take());
        row.result = record.result.clone().or(row.result.take());
    }
    rows.reverse();
    rows.truncate(limit);
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_and_ends_fold_into_runs_and_prune_keeps_the_newest() {
        let temp = tempfile::tempdir().expect("temp");
        let ledger = Ledger::new(temp.path().join("runs"));
        let slot: Timestamp = "2026-06-01T09:00:00Z".parse().expect("slot");
        let at = |seconds: i64| Timestamp::from_second(slot.as_second() + seconds).expect("at");
        let mut finished = RunRecord::new("t1", "r1", RunEvent::Finished, slot, 1, at(5));
        finished.outcome = Some(Outcome::Ok);
        finished.result = Some("x".repeat(2000));
        ledger
            .append(&[
                RunRecord::new("t1", "r1", RunEvent::Claimed, slot, 1, at(0)),
                finished,
                RunRecord::new("t1", "r2", RunEvent::Claimed, at(3600), 1, at(3600)),
            ])
            .expect("append");
        std::fs::OpenOptions::new()
            .append(true)
            .open(temp.path().join("runs/t1.jsonl"))
            .and_then(|mut file| file.write_all(b"{\"torn"))
            .expect("torn line");
        let rows = ledger.rows("t1", 10);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].run.as_str(), rows[0].outcome), ("r2", None));
        assert_eq!((rows[1].run.as_str(), rows[1].outcome), ("r1", Some(Outcome::Ok)));
        assert_eq!(rows[1].result.as_ref().map(String::len), Some(MOST_RESULT + '…'.len_utf8()));
        assert_eq!(ledger.prune("t1", at(1), 10).expect("prune"), 1);
        assert_eq!(ledger.read("t1").len(), 2);
        assert_eq!(ledger.prune("t1", slot, 1).expect("prune"), 1);
        assert_eq!(ledger.rows("t1", 10)[0].run, "r2");
    }
}
