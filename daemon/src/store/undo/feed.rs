//! The change feed of the folders undo keeps: one inotify instance for the daemon, a watch on
//! every folder of every kept tree (added as the walk opens the folder, before it reads it, so
//! no change after that read is missed), and for each tree what changed since its last look:
//! the files named in an event, the folders made, moved or removed there (walked again), or
//! the whole tree (the kernel's queue ran over, the tree itself went). A look then reads only
//! those instead of walking every file twice a turn; a tree whose folders could not all be
//! watched (the host's `fs.inotify.max_user_watches`) is walked whole at every look, as before.
//!
//! The feed only names paths: every read still goes by descriptor beneath the tree's root
//! ([`super::tree`]), so a name a container chose is never followed anywhere. A watch is added
//! through `/proc/self/fd/N` of the folder the walk opened, never through its path. A
//! `.gitignore` changed during a turn takes effect from the next turn (and one a turn wrote
//! never does, [`super::tree::Ignores`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

use super::tree::Rules;
use crate::base::auth::Context;

/// A kept tree: its context and its root on the host.
pub(super) type Key = (Context, PathBuf);

/// What changed in a tree since its last look.
#[derive(Debug, Default)]
pub(super) struct Changed {
    /// Files named in an event, with the `.gitignore` rules of their folder.
    pub(super) files: BTreeMap<String, Rules>,
    /// Folders made, moved or removed, with the rules above them: each walked again.
    pub(super) folders: BTreeMap<String, Rules>,
}

/// How a tree is to be looked at.
#[derive(Debug)]
pub(super) enum Look {
    /// Only what changed since its last look.
    Changed(Changed),
    /// Whole: walked, each folder watched as it is opened.
    Whole,
    /// Whole, without watching (there is no feed on this host, or it could not watch this tree).
    Unwatched,
}

#[derive(Debug, Default)]
struct Tree {
    /// Each watched folder (`""`: the root) and its `.gitignore` rules.
    folders: BTreeMap<String, (i32, Rules)>,
    changed: Changed,
    /// Watched whole since its last whole look, with nothing missed since.
    live: bool,
    /// A `.gitignore` changed: the next turn's first look walks it whole under the new rules.
    rules_changed: bool,
    /// A folder of it could not be watched: it is walked whole at every look.
    unwatched: bool,
}

#[derive(Debug)]
pub(super) struct Feed {
    inotify: Option<OwnedFd>,
    /// The trees and folders each watch is for (two trees can hold one folder).
    by_watch: HashMap<i32, Vec<(Key, String)>>,
    trees: HashMap<Key, Tree>,
}

const MASK: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR)
    .union(WatchFlags::EXCL_UNLINK);

fn joined(folder: &str, name: &str) -> String {
    match folder.is_empty() {
        true => name.to_string(),
        false => format!("{folder}/{name}"),
    }
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(folder, _)| folder)
}

pub(super) fn beneath(path: &str, folder: &str) -> bool {
    folder.is_empty() || path == folder || path.strip_prefix(folder).is_some_and(|rest| rest.starts_with('/'))
}

impl Feed {
    pub(super) fn new() -> Feed {
        let inotify = match inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC) {
            Ok(fd) => Some(fd),
            Err(errno) => {
                tracing::warn!(error = %errno, "no inotify: undo walks every kept folder at each look");
                None
            }
        };
        Feed { inotify, by_watch: HashMap::new(), trees: HashMap::new() }
    }

    /// No feed: every look walks its tree whole (as on a host without inotify).
    #[cfg(test)]
    pub(super) fn none() -> Feed {
        Feed { inotify: None, by_watch: HashMap::new(), trees: HashMap::new() }
    }

    /// How `key`'s tree is to be looked at now (`turn_start`: the first look of a turn;
    /// `only`: the one file a call named), after reading every event the kernel holds. What
    /// changed is handed over: the look reads it (with `only`, that file alone; the rest waits
    /// for the next look).
    pub(super) fn take(&mut self, key: &Key, turn_start: bool, only: Option<&str>) -> Look {
        self.drain();
        if self.inotify.is_none() {
            return Look::Unwatched;
        }
        let tree = self.trees.entry(key.clone()).or_default();
        if tree.unwatched {
            return Look::Unwatched;
        }
        if !tree.live || (turn_start && tree.rules_changed) {
            tree.changed = Changed::default();
            tree.rules_changed = false;
            tree.live = false;
            return Look::Whole;
        }
        let Some(only) = only else { return Look::Changed(std::mem::take(&mut tree.changed)) };
        let rules = tree
            .changed
            .files
            .remove(only)
            .unwrap_or_else(|| tree.folders.get(parent(only)).map(|(_, rules)| rules.clone()).unwrap_or_default());
        Look::Changed(Changed { files: BTreeMap::from([(only.to_string(), rules)]), folders: BTreeMap::new() })
    }

    /// Watches the folder `path` of `key`'s tree, opened as `folder`, under `rules`. A folder
    /// that cannot be watched leaves the tree unwatched (walked whole from then on).
    pub(super) fn watch(&mut self, key: &Key, path: &str, folder: &OwnedFd, rules: &Rules) {
        let Some(inotify) = &self.inotify else { return };
        if self.trees.get(key).is_some_and(|tree| tree.unwatched) {
            return;
        }
        let by_fd = format!("/proc/self/fd/{}", folder.as_raw_fd());
        match inotify::add_watch(inotify, by_fd.as_str(), MASK) {
            Ok(watch) => {
                let tree = self.trees.entry(key.clone()).or_default();
                if let Some((old, _)) = tree.folders.insert(path.to_string(), (watch, rules.clone())) {
                    if old != watch {
                        self.let_go(old, key, path);
                    }
                }
                let holders = self.by_watch.entry(watch).or_default();
                if !holders.iter().any(|(held, at)| held == key && at == path) {
                    holders.push((key.clone(), path.to_string()));
                }
            }
            Err(errno) => {
                tracing::warn!(
                    error = %errno,
                    folder = %key.1.display(),
                    "cannot watch every folder of a kept tree (fs.inotify.max_user_watches?): undo walks it whole at each look"
                );
                self.unwatch(key);
                self.trees.entry(key.clone()).or_default().unwatched = true;
            }
        }
    }

    /// After a walk of `key`'s tree beneath `at` (`""`: whole) that opened `entered`: folders
    /// watched before and not there now are let go; a whole walk that reached everything makes
    /// the tree live.
    pub(super) fn walked(&mut self, key: &Key, at: &str, entered: &BTreeSet<String>, complete: bool) {
        let Some(tree) = self.trees.get_mut(key) else { return };
        let stale: Vec<(String, i32)> = tree
            .folders
            .iter()
            .filter(|(path, _)| beneath(path, at) && !entered.contains(*path))
            .map(|(path, (watch, _))| (path.clone(), *watch))
            .collect();
        for (path, _) in &stale {
            tree.folders.remove(path);
        }
        if !complete {
            tree.live = false;
        } else if at.is_empty() && !tree.unwatched {
            tree.live = true;
        }
        for (path, watch) in stale {
            self.let_go(watch, key, &path);
        }
    }

    /// A `.gitignore` of `key`'s tree holds only from the next turn: its first look walks the
    /// tree whole under it.
    pub(super) fn rules_waiting(&mut self, key: &Key) {
        if let Some(tree) = self.trees.get_mut(key) {
            tree.rules_changed = true;
        }
    }

    /// Stops watching `key`'s tree (it is forgotten, or could not be watched whole).
    pub(super) fn unwatch(&mut self, key: &Key) {
        let Some(tree) = self.trees.remove(key) else { return };
        for (path, (watch, _)) in tree.folders {
            self.let_go(watch, key, &path);
        }
    }

    /// `key`'s tree no longer holds the watch `watch` for `path`; the kernel's watch goes when
    /// no tree holds it.
    fn let_go(&mut self, watch: i32, key: &Key, path: &str) {
        let Some(holders) = self.by_watch.get_mut(&watch) else { return };
        holders.retain(|(held, at)| !(held == key && at == path));
        if holders.is_empty() {
            self.by_watch.remove(&watch);
            if let Some(inotify) = &self.inotify {
                // silent-ok: the folder may be gone already, which removed the watch.
                let _ = inotify::remove_watch(inotify, watch);
            }
        }
    }

    /// Reads every event the kernel holds into the trees' changes.
    fn drain(&mut self) {
        let Some(inotify) = &self.inotify else { return };
        let mut buffer = [std::mem::MaybeUninit::<u8>::uninit(); 16 * 1024];
        let mut reader = inotify::Reader::new(inotify, &mut buffer);
        let mut events = vec![];
        let failed = loop {
            match reader.next() {
                Ok(event) => events.push((
                    event.wd(),
                    event.events(),
                    event.file_name().map(|name| name.to_bytes().to_vec()).filter(|name| !name.is_empty()),
                )),
                Err(Errno::AGAIN) => break None,
                Err(Errno::INTR) => continue,
                Err(errno) => break Some(errno),
            }
        };
        for (watch, flags, name) in events {
            self.event(watch, flags, name);
        }
        if let Some(errno) = failed {
            tracing::warn!(error = %errno, "cannot read undo's change feed: kept folders are walked whole");
            self.trees.values_mut().for_each(|tree| tree.live = false);
        }
    }

    fn event(&mut self, watch: i32, flags: ReadFlags, name: Option<Vec<u8>>) {
        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
            self.trees.values_mut().for_each(|tree| tree.live = false);
            return;
        }
        let Some(holders) = self.by_watch.get(&watch).cloned() else { return };
        if flags.contains(ReadFlags::IGNORED) {
            // The folder went (or was let go): its parent's event names it; a root that went
            // is walked whole.
            self.by_watch.remove(&watch);
            for (key, path) in holders {
                if let Some(tree) = self.trees.get_mut(&key) {
                    if tree.folders.get(&path).is_some_and(|(held, _)| *held == watch) {
                        tree.folders.remove(&path);
                    }
                    if path.is_empty() {
                        tree.live = false;
                    }
                }
            }
            return;
        }
        let Some(name) = name else {
            // The folder itself moved or went: a root is walked whole; any other folder, its
            // parent's event names.
            for (key, path) in holders {
                if let (true, Some(tree)) = (path.is_empty(), self.trees.get_mut(&key)) {
                    tree.live = false;
                }
            }
            return;
        };
        let name = String::from_utf8_lossy(&name).into_owned();
        for (key, folder) in holders {
            let Some(tree) = self.trees.get_mut(&key) else { continue };
            let rules = tree.folders.get(&folder).map(|(_, rules)| rules.clone()).unwrap_or_default();
            if name.contains(char::REPLACEMENT_CHARACTER) {
                // A name that is not UTF-8: the folder's walk says it is not kept.
                tree.changed.folders.insert(folder.clone(), rules_above(tree, &folder));
                continue;
            }
            let path = joined(&folder, &name);
            if flags.contains(ReadFlags::ISDIR) {
                if flags.intersects(ReadFlags::MOVED_FROM | ReadFlags::DELETE) {
                    let gone: Vec<(String, i32)> = tree
                        .folders
                        .iter()
                        .filter(|(at, _)| beneath(at, &path))
                        .map(|(at, (held, _))| (at.clone(), *held))
                        .collect();
                    for (at, _) in &gone {
                        tree.folders.remove(at);
                    }
                    tree.changed.folders.insert(path, rules);
                    for (at, held) in gone {
                        self.let_go(held, &key, &at);
                    }
                } else {
                    tree.changed.folders.insert(path, rules);
                }
                continue;
            }
            if name == ".gitignore" {
                tree.rules_changed = true;
            }
            tree.changed.files.insert(path, rules);
        }
    }
}

/// The rules above the folder `path` of `tree` (its parent's).
fn rules_above(tree: &Tree, path: &str) -> Rules {
    match path.is_empty() {
        true => Rules::new(),
        false => tree.folders.get(parent(path)).map(|(_, rules)| rules.clone()).unwrap_or_default(),
    }
}
