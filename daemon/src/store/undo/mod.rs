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

mod feed;
mod look;
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

/// The session's workspace, as a container names it.
pub const WORKSPACE: &str = "/workspace";
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
    /// What the turn read from outside, when it did (its taint mark's first source): the
    /// contents it writes stay marked when an undo or a redo puts them back.
    pub marked: Option<String>,
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
        /// What the turn had read from outside by then, if anything.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        marked: Option<String>,
    },
    /// Turns taken back: the conversation moved from `from_leaf` to `to_leaf`, and the files
    /// were put back (`before`: as they were, `after`: as put).
    Undone { entries: Vec<String>, from_leaf: String, to_leaf: String, at: u64, restored: Vec<Change> },
    /// An undo taken back in turn.
    Redone { from_leaf: String, to_leaf: String, at: u64, restored: Vec<Change> },
    /// The changes of these turns were let go (oldest first, to keep within the settings). What
    /// they wrote stays known: the contents marked turns wrote (hash, what the turn read), and
    /// the `.gitignore` contents (which never hold).
    Dropped {
        entries: Vec<String>,
        why: String,
        at: u64,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        marked: Vec<(String, String)>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ignores: Vec<String>,
    },
    /// Some of the changes of the turn answering `entry` could not be kept, and why (said by
    /// its undo, after a restart too).
    Incomplete { entry: String, why: String, at: u64 },
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

/// A running turn: its session, its context, the folders it looked at since it began, and the
/// `.gitignore` files of each as they were then.
type Begun = (String, Context, HashSet<PathBuf>, HashMap<PathBuf, tree::Frozen>);

/// Every turn's file changes and their undo.
#[derive(Debug)]
pub struct Undo {
    data: PathBuf,
    sessions_dir: PathBuf,
    config: UndoConfig,
    /// Each folder's index, by its context and host path.
    indexes: Mutex<Indexes>,
    /// What changed in each folder since its last look (taken after a folder's lock, never
    /// before it).
    feed: Mutex<feed::Feed>,
    /// The folders each running turn looked at since it began, with its session and context.
    begun: Mutex<HashMap<String, Begun>>,
    /// The bytes each context's store takes, once read.
    sizes: Mutex<HashMap<Context, u64>>,
    /// Where an undo or a redo is told, so that every page and terminal showing the
    /// conversation shows where it is now.
    events: Option<Arc<crate::store::events::EventBus>>,
    /// The contents of the `.gitignore` files each context's turns wrote: they never hold.
    ignores_written: Mutex<HashMap<Context, HashSet<String>>>,
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
            feed: Mutex::new(feed::Feed::new()),
            begun: Mutex::default(),
            sizes: Mutex::default(),
            writing: Mutex::default(),
            ignores_written: Mutex::default(),
            events: None,
            left_out: Mutex::default(),
            incomplete: Mutex::default(),
        }
    }

    /// As [`Undo::new`], on a host without a change feed: every look walks its folder whole.
    #[cfg(test)]
    fn without_feed(data: &Path, config: UndoConfig) -> Undo {
        Undo { feed: Mutex::new(feed::Feed::none()), ..Undo::new(data, config) }
    }

    /// Tells `events` of every undo and redo done.
    pub fn telling(mut self, events: Arc<crate::store::events::EventBus>) -> Undo {
        self.events = Some(events);
        self
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
            let first = {
                let mut incomplete = lock(&self.incomplete);
                let first = !incomplete.contains_key(&turn.entry);
                incomplete.entry(turn.entry.clone()).or_insert_with(|| (error.to_string(), false));
                first
            };
            if first {
                let record =
                    Record::Incomplete { entry: turn.entry.clone(), why: error.to_string(), at: state::now_seconds() };
                // Kept in memory anyway (on a full disk the record cannot be written either).
                if let Err(error) = self.append(&turn.session, &record) {
                    tracing::warn!(error = %baaaht_proto::error_chain(&error), session = %turn.session, "cannot note that a turn's changes were not all kept");
                }
            }
        }
        result
    }

    fn look_before(&self, turn: &Turn, roots: &[Root]) -> Result<(), UndoError> {
        let fresh: Vec<&Root> = {
            let mut begun = lock(&self.begun);
            let (_, _, seen, _) = begun
                .entry(turn.user_turn.clone())
                .or_insert_with(|| (turn.session.clone(), turn.context.clone(), HashSet::new(), HashMap::new()));
            roots.iter().filter(|root| seen.insert(root.host.clone())).collect()
        };
        if fresh.is_empty() {
            return Ok(());
        }
        let objects = self.objects(&turn.context);
        for root in fresh {
            self.look(&objects, turn, root, None, true).map(drop)?;
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
            let (found, missed) = self.look(&objects, turn, root, only, false)?;
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
            marked: turn.marked.clone(),
        };
        self.append(&turn.session, &record)?;
        self.wrote_ignores(&turn.context, &changes);
        Ok(changes)
    }

    /// The turn `user_turn` ended: its folders are looked at again from the next turn's first
    /// writing call, and what is kept is brought within the settings. Blocking.
    pub fn ended(&self, user_turn: &str) {
        let Some((session, context, _, _)) = lock(&self.begun).remove(user_turn) else { return };
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
