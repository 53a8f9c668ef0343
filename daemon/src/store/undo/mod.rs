//! Undo: what every turn changed in the folders it can write (the session's workspace, the
//! project folders mounted read-write for its Coder), kept so that `/undo` can take the turn
//! back, files and conversation together (DESIGN.md §undo, docs/undo.md).
//!
//! This host's filesystems have no copy-on-write (ext4: no reflinks), and a command can write a
//! file in place, so the bytes a turn overwrites must be kept before it runs. Each folder has
//! an index (path → size, times, inode, the SHA-256 of its content) kept in memory; every
//! content in it is kept once, compressed, in the context's store ([`objects`]). Before the
//! first writing call of a turn the folder is looked at again (what the person changed since is
//! kept: it is what the turn's undo must give back); after each writing call only what changed
//! is read (the path a `write_file` named, or a walk after a command), kept, and recorded with
//! its content before and after in the session's `undo.jsonl`. A folder's first look keeps all
//! of it, once per daemon start (contents already kept are not written again).
//!
//! An undo ([`restore`]) puts back, for the last N turns of the branch, each file's content
//! before the first of them, when the file is still as the turn left it (a file changed since by
//! someone else is kept and named), then moves the conversation to the entry before them. It is
//! written down first (`undo.pending.json`) and finished on the next start if the daemon dies.

pub mod objects;
mod restore;
mod retention;
pub mod tree;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::base::auth::Context;
use crate::base::config::UndoConfig;
use crate::base::state;
use objects::Objects;
use tree::Meta;

pub use restore::{Done, FileStep, Plan, Skipped};

/// A session's undo records, in its folder.
pub const RECORDS: &str = "undo.jsonl";
/// An undo written down before it is done.
pub const PENDING: &str = "undo.pending.json";

/// A folder a turn can write: its name in the container and where it is on the host.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Root {
    /// `/workspace`, `/project/site`.
    pub name: String,
    pub host: PathBuf,
}

/// The turn a writing call belongs to.
#[derive(Debug, Clone)]
pub struct Turn {
    pub session: String,
    pub context: Context,
    /// The message the turn answers (its entry in the session's log).
    pub entry: String,
    pub user_turn: String,
    pub correlation: String,
}

/// A file's content as kept: its name in the store, and what it is restored with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub hash: String,
    pub size: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Stamp {
    fn meta(&self) -> Meta {
        Meta { size: self.size, mtime: 0, ctime: 0, ino: 0, mode: self.mode, uid: self.uid, gid: self.gid }
    }
}

/// One file a call changed: its content before and after (none: not there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub root: String,
    pub host: PathBuf,
    pub path: String,
    pub before: Option<Stamp>,
    pub after: Option<Stamp>,
}

/// A file a call changed whose content could not be kept, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotKept {
    pub root: String,
    pub path: String,
    pub why: String,
}

/// A line of a session's `undo.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// What one writing call of a turn changed.
    Call {
        entry: String,
        turn: String,
        correlation: String,
        tool: String,
        at: u64,
        changes: Vec<Change>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        not_kept: Vec<NotKept>,
    },
    /// Turns taken back: the conversation moved from `from_leaf` to `to_leaf`, and the files
    /// were put back (`before`: as they were, `after`: as put).
    Undone { entries: Vec<String>, from_leaf: String, to_leaf: String, at: u64, restored: Vec<Change> },
    /// An undo taken back in turn.
    Redone { from_leaf: String, to_leaf: String, at: u64, restored: Vec<Change> },
    /// The changes of these turns were let go (oldest first, to keep within the settings).
    Dropped { entries: Vec<String>, why: String, at: u64 },
}

/// Why a turn's changes could not be kept, or an undo could not be done: a sentence for the
/// person.
#[derive(Debug, thiserror::Error)]
pub enum UndoError {
    #[error("{0}")]
    Said(String),
    #[error("cannot keep what the turn changed in {folder}: {source}")]
    Folder {
        folder: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot keep the turn's record")]
    Record(#[source] state::StateError),
    #[error(
        "the undo store is on a full disk: this turn's file changes cannot be undone; free space on the data disk"
    )]
    DiskFull,
}

/// A file of a folder's index: what it was when last looked at, and its content kept (none:
/// too big or unreadable, said when a turn changes it).
#[derive(Debug, Clone)]
struct Indexed {
    meta: Meta,
    stamp: Option<Stamp>,
    /// Changed so recently when looked at that a change within the same clock tick would not
    /// show in its times: read again at the next look (as git does with a "racy" file).
    racy: bool,
}

/// How recent a change must be for a file's times not to be trusted (a coarse clock tick, with
/// room to spare).
const RACY_NANOS: i128 = 2_000_000_000;

fn now_nanos() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_nanos() as i128)
        .unwrap_or(0)
}

type Index = BTreeMap<String, Indexed>;

/// A folder's index, by its context and host path.
type Indexes = HashMap<(Context, PathBuf), Arc<Mutex<Index>>>;

/// A running turn: its session, its context, and the folders it looked at since it began.
type Begun = (String, Context, HashSet<PathBuf>);

/// Every turn's file changes and their undo.
#[derive(Debug)]
pub struct Undo {
    data: PathBuf,
    sessions_dir: PathBuf,
    config: UndoConfig,
    /// Each folder's index, by its context and host path.
    indexes: Mutex<Indexes>,
    /// The folders each running turn looked at since it began, with its session and context.
    begun: Mutex<HashMap<String, Begun>>,
    /// The bytes each context's store takes, once read.
    sizes: Mutex<HashMap<Context, u64>>,
    /// Held while a session's records are appended to or rewritten.
    writing: Mutex<()>,
    /// What each folder's last walk found and did not keep (links, devices, names not UTF-8).
    left_out: Mutex<HashMap<PathBuf, HashSet<String>>>,
    /// Turns (their message's entry) whose changes could not all be kept, and why (until the
    /// daemon stops: a full disk keeps nothing).
    incomplete: Mutex<HashMap<String, (String, bool)>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn disk_full(error: &std::io::Error) -> bool {
    matches!(error.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
}

impl Undo {
    /// `data` is the data dir's root; sessions' folders are in `data/sessions`.
    pub fn new(data: &Path, config: UndoConfig) -> Undo {
        Undo {
            data: data.to_path_buf(),
            sessions_dir: data.join("sessions"),
            config,
            indexes: Mutex::default(),
            begun: Mutex::default(),
            sizes: Mutex::default(),
            writing: Mutex::default(),
            left_out: Mutex::default(),
            incomplete: Mutex::default(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    pub fn config(&self) -> &UndoConfig {
        &self.config
    }

    fn context_dir(&self, context: &Context) -> PathBuf {
        self.data.join("undo").join(crate::base::datadir::folder_of(context))
    }

    /// `context`'s store of kept contents.
    pub fn objects(&self, context: &Context) -> Objects {
        Objects::at(self.context_dir(context).join("objects"))
    }

    /// The contents of `context`'s folders as last looked at (needed by the next turn's undo).
    fn present_hashes(&self, context: &Context) -> HashSet<String> {
        let indexes: Vec<Arc<Mutex<Index>>> =
            lock(&self.indexes).iter().filter(|((of, _), _)| of == context).map(|(_, index)| index.clone()).collect();
        let mut present = HashSet::new();
        for index in indexes {
            present.extend(
                lock(&index).values().filter_map(|indexed| indexed.stamp.as_ref()).map(|stamp| stamp.hash.clone()),
            );
        }
        present
    }

    fn records_path(&self, session: &str) -> PathBuf {
        self.sessions_dir.join(session).join(RECORDS)
    }

    fn index(&self, context: &Context, host: &Path) -> Arc<Mutex<Index>> {
        lock(&self.indexes).entry((context.clone(), host.to_path_buf())).or_default().clone()
    }

    /// Before a writing call of `turn` in `roots`: a folder the turn has not looked at yet is
    /// looked at, and what changed in it since (the person's own edits) is kept. Blocking.
    pub fn before(&self, turn: &Turn, roots: &[Root]) -> Result<(), UndoError> {
        if !self.config.enabled {
            return Ok(());
        }
        self.noting(turn, self.look_before(turn, roots))
    }

    /// `result` of keeping `turn`'s changes, noted when it failed (its undo then says so).
    fn noting<T>(&self, turn: &Turn, result: Result<T, UndoError>) -> Result<T, UndoError> {
        if let Err(error) = &result {
            lock(&self.incomplete).entry(turn.entry.clone()).or_insert_with(|| (error.to_string(), false));
        }
        result
    }

    fn look_before(&self, turn: &Turn, roots: &[Root]) -> Result<(), UndoError> {
        let fresh: Vec<&Root> = {
            let mut begun = lock(&self.begun);
            let (_, _, seen) = begun
                .entry(turn.user_turn.clone())
                .or_insert_with(|| (turn.session.clone(), turn.context.clone(), HashSet::new()));
            roots.iter().filter(|root| seen.insert(root.host.clone())).collect()
        };
        if fresh.is_empty() {
            return Ok(());
        }
        let objects = self.objects(&turn.context);
        for root in fresh {
            self.look(&objects, turn, root, None).map(drop)?;
        }
        Ok(())
    }

    /// After a writing call of `turn` (`tool`, naming `path` when it names one): what it
    /// changed in `roots` is kept and recorded. Answers the changes. Blocking.
    pub fn after(&self, turn: &Turn, tool: &str, path: Option<&str>, roots: &[Root]) -> Result<Vec<Change>, UndoError> {
        if !self.config.enabled {
            return Ok(vec![]);
        }
        self.noting(turn, self.look_after(turn, tool, path, roots))
    }

    fn look_after(
        &self,
        turn: &Turn,
        tool: &str,
        path: Option<&str>,
        roots: &[Root],
    ) -> Result<Vec<Change>, UndoError> {
        let objects = self.objects(&turn.context);
        let named = path.and_then(|path| named_in(path, roots));
        let (mut changes, mut not_kept) = (vec![], vec![]);
        for root in roots {
            let only = match &named {
                Some((named_root, rel)) if named_root.host == root.host => Some(rel.as_str()),
                Some(_) => continue,
                None => None,
            };
            let (found, missed) = self.look(&objects, turn, root, only)?;
            changes.extend(found);
            not_kept.extend(missed);
        }
        if changes.is_empty() && not_kept.is_empty() {
            return Ok(changes);
        }
        if !self.records_path(&turn.session).exists() {
            self.note_session(&turn.context, &turn.session)?;
        }
        let record = Record::Call {
            entry: turn.entry.clone(),
            turn: turn.user_turn.clone(),
            correlation: turn.correlation.clone(),
            tool: tool.to_string(),
            at: state::now_seconds(),
            changes: changes.clone(),
            not_kept,
        };
        self.append(&turn.session, &record)?;
        Ok(changes)
    }

    /// The turn `user_turn` ended: its folders are looked at again from the next turn's first
    /// writing call, and what is kept is brought within the settings. Blocking.
    pub fn ended(&self, user_turn: &str) {
        let Some((session, context, _)) = lock(&self.begun).remove(user_turn) else { return };
        if let Err(error) = self.keep_within(&session, &context) {
            tracing::warn!(error = %baaaht_proto::error_chain(&error), session, "cannot let go of the oldest turns' file changes");
        }
    }

    fn append(&self, session: &str, record: &Record) -> Result<(), UndoError> {
        let mut line = serde_json::to_vec(record).map_err(|error| UndoError::Said(error.to_string()))?;
        line.push(b'\n');
        let _writing = lock(&self.writing);
        state::append_synced(&self.records_path(session), &line).map_err(|error| match state::is_disk_full(&error) {
            true => UndoError::DiskFull,
            false => UndoError::Record(error),
        })
    }

    /// Session `session`'s records, in order (a line that cannot be read is skipped).
    pub fn records(&self, session: &str) -> Vec<Record> {
        let Ok(text) = std::fs::read_to_string(self.records_path(session)) else { return vec![] };
        text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
    }

    /// Why some of the changes of the turn answering `entry` were not kept, if they were not.
    fn incomplete(&self, entry: &str) -> Option<String> {
        lock(&self.incomplete).get(entry).map(|(why, _)| why.clone())
    }

    /// Whether the failure to keep the changes of the turn answering `entry` is told now (once
    /// a turn).
    pub fn tell_once(&self, entry: &str) -> bool {
        lock(&self.incomplete).get_mut(entry).is_some_and(|(_, told)| !std::mem::replace(told, true))
    }

    fn io_error(&self, folder: &str, source: std::io::Error) -> UndoError {
        match disk_full(&source) {
            true => UndoError::DiskFull,
            false => UndoError::Folder { folder: folder.to_string(), source },
        }
    }

    /// Looks at `root` (only `only` in it, when given) against its index: what changed is kept
    /// and the index brought up to date. Answers the changes and what could not be kept.
    fn look(
        &self,
        objects: &Objects,
        turn: &Turn,
        root: &Root,
        only: Option<&str>,
    ) -> Result<(Vec<Change>, Vec<NotKept>), UndoError> {
        let index = self.index(&turn.context, &root.host);
        let mut index = lock(&index);
        let folder = match crate::sandbox::shared_dirs::open_trusted(&root.host) {
            Ok(folder) => folder,
            // Not there (a workspace not made yet): nothing in it to keep.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok((vec![], vec![])),
            Err(source) => return Err(self.io_error(&root.name, source)),
        };
        let mut not_kept = vec![];
        let now: BTreeMap<String, Meta> = match only {
            Some(path) => {
                let found = tree::stat(&folder, path).map_err(|source| self.io_error(&root.name, source))?;
                found.map(|meta| (path.to_string(), meta)).into_iter().collect()
            }
            None => {
                let known = |path: &str, folder: bool| match folder {
                    true => {
                        let prefix = format!("{path}/");
                        index.range(prefix.clone()..).next().is_some_and(|(known, _)| known.starts_with(&prefix))
                    }
                    false => index.contains_key(path),
                };
                let walked = tree::walk(&folder, self.config.max_files, &known)
                    .map_err(|source| self.io_error(&root.name, source))?;
                if walked.stopped {
                    tracing::warn!(folder = %root.name, most = self.config.max_files, "a folder has more files than undo looks at; the rest is not kept");
                    let why = format!(
                        "the folder holds more than {} files (sessions.undo.max_files): what lies beyond them was not looked at",
                        self.config.max_files
                    );
                    not_kept.push(NotKept { root: root.name.clone(), path: String::new(), why });
                }
                // What a walk leaves out is said once, when it first shows (a link the turn made).
                let mut left = lock(&self.left_out);
                let seen = left.entry(root.host.clone()).or_default();
                let found: HashSet<String> = walked.left_out.iter().map(|(path, _)| path.clone()).collect();
                for (path, why) in &walked.left_out {
                    if !seen.contains(path) {
                        not_kept.push(NotKept {
                            root: root.name.clone(),
                            path: path.clone(),
                            why: format!("{why}; undo does not take it back"),
                        });
                    }
                }
                *seen = found;
                drop(left);
                let mut files = walked.files;
                // What the walk did not reach is not taken for gone.
                if walked.stopped {
                    for (path, indexed) in index.iter() {
                        files.entry(path.clone()).or_insert(indexed.meta);
                    }
                }
                files
            }
        };
        let mut gone: Vec<String> = index
            .keys()
            .filter(|path| only.is_none_or(|only| only == path.as_str()) && !now.contains_key(*path))
            .cloned()
            .collect();
        let mut changes = vec![];
        let racy_since = now_nanos() - RACY_NANOS;
        for (path, meta) in &now {
            let before = index.get(path);
            if before.is_some_and(|before| before.meta == *meta && !before.racy) {
                continue;
            }
            let full = self.size(&turn.context) >= self.config.max_size.0;
            let read = match full {
                // Past the store's size within a turn: nothing more is kept until the turn's end
                // lets the oldest go.
                true => Err(std::io::Error::other(format!(
                    "the undo store is at its size ({}, sessions.undo.max_size)",
                    self.config.max_size
                ))),
                false => tree::read(&folder, path, self.config.max_file_size.0),
            };
            let kept = match read {
                Ok(Some((bytes, read_meta))) => match objects.put(&bytes) {
                    Ok((hash, took)) => {
                        self.grew(&turn.context, took);
                        Some(Indexed {
                            meta: read_meta,
                            racy: read_meta.mtime.max(read_meta.ctime) >= racy_since,
                            stamp: Some(Stamp {
                                hash,
                                size: read_meta.size,
                                mode: read_meta.mode,
                                uid: read_meta.uid,
                                gid: read_meta.gid,
                            }),
                        })
                    }
                    Err(error) if disk_full(&error) => return Err(UndoError::DiskFull),
                    Err(source) => return Err(UndoError::Folder { folder: "the undo store".into(), source }),
                },
                Ok(None) => {
                    gone.push(path.clone());
                    continue;
                }
                Err(error) => {
                    not_kept.push(NotKept { root: root.name.clone(), path: path.clone(), why: error.to_string() });
                    Some(Indexed { meta: *meta, stamp: None, racy: false })
                }
            };
            let Some(kept) = kept else { continue };
            match (before, &kept.stamp) {
                // Not kept now: said above.
                (_, None) => {}
                (Some(before), Some(_)) if before.stamp.is_none() => not_kept.push(NotKept {
                    root: root.name.clone(),
                    path: path.clone(),
                    why: "its content before the turn was not kept".into(),
                }),
                (Some(before), Some(now)) if before.stamp.as_ref() == Some(now) => {}
                (before, Some(now)) => changes.push(Change {
                    root: root.name.clone(),
                    host: root.host.clone(),
                    path: path.clone(),
                    before: before.and_then(|before| before.stamp.clone()),
                    after: Some(now.clone()),
                }),
            }
            index.insert(path.clone(), kept);
        }
        for path in gone {
            match index.remove(&path) {
                Some(Indexed { stamp: Some(stamp), .. }) => changes.push(Change {
                    root: root.name.clone(),
                    host: root.host.clone(),
                    path: path.clone(),
                    before: Some(stamp),
                    after: None,
                }),
                Some(Indexed { stamp: None, .. }) => not_kept.push(NotKept {
                    root: root.name.clone(),
                    path,
                    why: "it was removed, and its content was not kept".into(),
                }),
                None => {}
            }
        }
        Ok((changes, not_kept))
    }

    /// Forgets a folder's index (its next look reads it whole again), e.g. after it was
    /// restored by hand.
    pub fn forget(&self, context: &Context, host: &Path) {
        lock(&self.indexes).remove(&(context.clone(), host.to_path_buf()));
    }

    /// Sets the index entries of files an undo put back, so that the next look does not take
    /// them for the person's edits.
    fn restored(&self, context: &Context, changes: &[Change]) {
        for change in changes {
            let index = self.index(context, &change.host);
            let mut index = lock(&index);
            let Ok(folder) = crate::sandbox::shared_dirs::open_trusted(&change.host) else { continue };
            match (&change.after, tree::stat(&folder, &change.path)) {
                (Some(stamp), Ok(Some(meta))) => {
                    index.insert(change.path.clone(), Indexed { meta, stamp: Some(stamp.clone()), racy: true });
                }
                _ => {
                    index.remove(&change.path);
                }
            }
        }
    }
}

/// The folder and the path in it that a call's `path` names (absolute in the container, or
/// relative to `/workspace`); none when it names no folder's file plainly.
fn named_in(path: &str, roots: &[Root]) -> Option<(Root, String)> {
    let absolute = match path.starts_with('/') {
        true => path.to_string(),
        false => format!("/workspace/{path}"),
    };
    let (root, rel) = roots
        .iter()
        .filter_map(|root| absolute.strip_prefix(&format!("{}/", root.name)).map(|rel| (root, rel)))
        .max_by_key(|(root, _)| root.name.len())?;
    let plain = !rel.is_empty() && rel.split('/').all(|part| !part.is_empty() && part != "." && part != "..");
    plain.then(|| (root.clone(), rel.to_string()))
}

#[cfg(test)]
mod tests;
