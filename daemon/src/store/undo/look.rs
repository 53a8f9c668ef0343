//! A look at a kept folder against its index: what changed since the last look is read, kept
//! in the store and answered as the turn's changes. With the change feed ([`super::feed`]) only
//! what its events name is looked at; without it (or at a tree's first look) the folder is
//! walked whole.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::feed::{beneath, Changed, Key, Look};
use super::objects::Objects;
use super::tree::{self, Found, Frozen, Git, Meta, Rules, Walked};
use super::{lock, now_nanos, Change, Index, Indexed, NotKept, Root, Stamp, Turn, Undo, UndoError, RACY_NANOS};

/// What a look covered: the index entries in it that were not found are gone.
enum Scope {
    All,
    Some { files: BTreeSet<String>, folders: Vec<String> },
}

impl Scope {
    fn holds(&self, path: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Some { files, folders } => {
                files.contains(path) || folders.iter().any(|folder| beneath(path, folder))
            }
        }
    }

    /// The index's paths this scope covers.
    fn covered<'a>(&'a self, index: &'a Index) -> Vec<&'a String> {
        match self {
            Scope::All => index.keys().collect(),
            Scope::Some { files, folders } => {
                let mut covered: BTreeSet<&String> = files.iter().filter(|path| index.contains_key(*path)).collect();
                for folder in folders {
                    // A file where the folder is now was covered too.
                    covered.extend(index.get_key_value(folder).map(|(path, _)| path));
                    let prefix = format!("{folder}/");
                    covered.extend(
                        index
                            .range(prefix.clone()..)
                            .map(|(path, _)| path)
                            .take_while(|path| path.starts_with(&prefix)),
                    );
                }
                covered.into_iter().collect()
            }
        }
    }
}

/// The folder a look is at: its tree, opened, its root, its index, and the `.gitignore` files
/// that hold during the turn (none: at its start, all of them as they are).
struct At<'a> {
    key: &'a Key,
    folder: &'a std::os::fd::OwnedFd,
    root: &'a Root,
    index: &'a Index,
    ignores: &'a tree::Ignores<'a>,
}

/// What a look found: the files there now (in its scope), and what it found and does not keep.
struct Seen {
    now: BTreeMap<String, Meta>,
    scope: Scope,
    left_out: Vec<(String, &'static str)>,
    not_kept: Vec<NotKept>,
}

/// Whether `path` (a folder when `folder`) was looked at before: a `.gitignore` does not hide
/// what was kept.
fn known(index: &Index, path: &str, folder: bool) -> bool {
    match folder {
        true => {
            let prefix = format!("{path}/");
            index.range(prefix.clone()..).next().is_some_and(|(known, _)| known.starts_with(&prefix))
        }
        false => index.contains_key(path),
    }
}

impl Undo {
    fn too_many(&self, root: &Root) -> NotKept {
        tracing::warn!(folder = %root.name, most = self.config.max_files, "a folder has more files than undo looks at; the rest is not kept");
        let why = format!(
            "the folder holds more than {} files (sessions.undo.max_files): what lies beyond them was not looked at",
            self.config.max_files
        );
        NotKept { root: root.name.clone(), path: String::new(), why }
    }

    /// Walks `path` beneath the folder (`""`: whole), watching each folder it opens when
    /// `watching`.
    fn walk(&self, at: &At<'_>, path: &str, above: &Rules, most: usize, watching: bool) -> std::io::Result<Walked> {
        let (key, index) = (at.key, at.index);
        let mut entered = BTreeSet::new();
        let known = |path: &str, folder: bool| known(index, path, folder);
        let walked =
            tree::walk_beneath(at.folder, path, above, most, &known, at.ignores, &mut |opened, path, rules| {
                if watching {
                    lock(&self.feed).watch(key, path, opened, rules);
                    entered.insert(path.to_string());
                }
            })?;
        if watching {
            let mut feed = lock(&self.feed);
            feed.walked(key, path, &entered, !walked.stopped);
            if walked.rules_waiting {
                feed.rules_waiting(key);
            }
        }
        Ok(walked)
    }

    /// The whole folder (or only `only` in it, without a feed).
    fn look_whole(&self, at: &At<'_>, only: Option<&str>, watching: bool) -> std::io::Result<Seen> {
        let (folder, root, index) = (at.folder, at.root, at.index);
        let mut found = Seen { now: BTreeMap::new(), scope: Scope::All, left_out: vec![], not_kept: vec![] };
        if let (Some(path), false) = (only, watching) {
            if let Some(meta) = tree::stat(folder, path)? {
                found.now.insert(path.to_string(), meta);
            }
            found.scope = Scope::Some { files: BTreeSet::from([path.to_string()]), folders: vec![] };
            return Ok(found);
        }
        let walked = self.walk(at, "", &Rules::new(), self.config.max_files, watching)?;
        found.now = walked.files;
        found.left_out = walked.left_out;
        if walked.stopped {
            found.not_kept.push(self.too_many(root));
            // What the walk did not reach is not taken for gone.
            for (path, indexed) in index.iter() {
                found.now.entry(path.clone()).or_insert(indexed.meta);
            }
        }
        Ok(found)
    }

    /// Only what the feed says changed: the folders it names walked again, the files looked at.
    fn look_changed(&self, at: &At<'_>, changed: Changed) -> std::io::Result<Seen> {
        let (folder, root, index) = (at.folder, at.root, at.index);
        let mut found = Seen { now: BTreeMap::new(), scope: Scope::All, left_out: vec![], not_kept: vec![] };
        let mut walked_folders: Vec<String> = vec![];
        let mut budget = self.config.max_files.saturating_sub(index.len());
        for (path, rules) in &changed.folders {
            // A folder beneath another one walked is walked with it.
            if walked_folders.iter().any(|outer| beneath(path, outer)) {
                continue;
            }
            walked_folders.push(path.clone());
            let git = tree::git_part(path, true);
            let left = match git {
                Git::History => true,
                Git::Kept => false,
                Git::Outside => tree::ignored(rules, path, true) && !known(index, path, true),
            };
            if left {
                continue;
            }
            let walked = self.walk(at, path, rules, budget, true)?;
            budget = budget.saturating_sub(walked.files.len());
            if walked.stopped {
                found.not_kept.push(self.too_many(root));
                let prefix = format!("{path}/");
                for (known, indexed) in
                    index.range(prefix.clone()..).take_while(|(known, _)| known.starts_with(&prefix))
                {
                    found.now.entry(known.clone()).or_insert(indexed.meta);
                }
            }
            found.now.extend(walked.files);
            found.left_out.extend(walked.left_out);
        }
        let mut files = BTreeSet::new();
        for (path, rules) in changed.files {
            // A file where a folder walked was (or the other way round) is looked at itself.
            if walked_folders.iter().any(|outer| *outer != path && beneath(&path, outer)) {
                continue;
            }
            let skipped = match tree::git_part(&path, false) {
                Git::History => true,
                Git::Kept => false,
                Git::Outside => !index.contains_key(&path) && tree::ignored(&rules, &path, false),
            };
            match tree::look_at(folder, &path)? {
                Found::File(meta) if !skipped => {
                    found.now.insert(path.clone(), meta);
                }
                Found::Other(why) if !skipped => found.left_out.push((path.clone(), why)),
                _ => {}
            }
            files.insert(path);
        }
        found.scope = Scope::Some { files, folders: walked_folders };
        Ok(found)
    }

    /// Looks at `root` against its index (only `only` in it, when given and there is no
    /// feed; `turn_start`: the turn's first look): what changed is kept and the index brought
    /// up to date. Answers the changes and what could not be kept.
    pub(super) fn look(
        &self,
        objects: &Objects,
        turn: &Turn,
        root: &Root,
        only: Option<&str>,
        turn_start: bool,
    ) -> Result<(Vec<Change>, Vec<NotKept>), UndoError> {
        let key: Key = (turn.context.clone(), root.host.clone());
        let index = self.index(&turn.context, &root.host);
        let mut index = lock(&index);
        let folder = match crate::sandbox::shared_dirs::open_trusted(&root.host) {
            Ok(folder) => folder,
            // Not there (a workspace not made yet): nothing in it to keep.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok((vec![], vec![])),
            Err(source) => return Err(self.io_error(&root.name, source)),
        };
        // During a turn, only the `.gitignore` files as they were at its start hold.
        let frozen: Option<Frozen> = match turn_start {
            true => None,
            false => Some(
                lock(&self.begun)
                    .get(&turn.user_turn)
                    .and_then(|(_, _, _, frozen)| frozen.get(&root.host).cloned())
                    .unwrap_or_default(),
            ),
        };
        let written = self.ignores_written(&turn.context);
        let ignores = tree::Ignores { frozen: frozen.as_ref(), written: Some(&written) };
        let how = lock(&self.feed).take(&key, turn_start, only);
        let at = At { key: &key, folder: &folder, root, index: &index, ignores: &ignores };
        let found = match how {
            Look::Changed(changed) => self.look_changed(&at, changed),
            Look::Whole => self.look_whole(&at, only, true),
            Look::Unwatched => self.look_whole(&at, only, false),
        };
        let Seen { now, scope, left_out, mut not_kept } = match found {
            Ok(found) => found,
            Err(source) => {
                // What was not looked at is looked at whole next time.
                lock(&self.feed).unwatch(&key);
                return Err(self.io_error(&root.name, source));
            }
        };
        // What a look leaves out is said once, when it first shows (a link the turn made).
        {
            let mut left = lock(&self.left_out);
            let seen = left.entry(root.host.clone()).or_default();
            for (path, why) in &left_out {
                if !seen.contains(path) {
                    not_kept.push(NotKept {
                        root: root.name.clone(),
                        path: path.clone(),
                        why: format!("{why}; undo does not take it back"),
                    });
                }
            }
            seen.retain(|path| !scope.holds(path));
            seen.extend(left_out.into_iter().map(|(path, _)| path));
        }
        let mut gone: Vec<String> =
            scope.covered(&index).into_iter().filter(|path| !now.contains_key(*path)).cloned().collect();
        let mut changes = vec![];
        let racy_since = now_nanos() - RACY_NANOS;
        for (path, meta) in &now {
            let before = index.get(path);
            if before.is_some_and(|before| before.meta == *meta && !before.racy) {
                continue;
            }
            let kept = match self.keep(objects, turn, &folder, path, racy_since)? {
                Kept::Content(kept) => kept,
                Kept::Gone => {
                    gone.push(path.clone());
                    continue;
                }
                Kept::Not(why) => {
                    not_kept.push(NotKept { root: root.name.clone(), path: path.clone(), why });
                    Indexed { meta: *meta, stamp: None, racy: false }
                }
            };
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
        let gone: HashSet<String> = gone.into_iter().collect();
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
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        if turn_start {
            let ignores: Frozen = index
                .iter()
                .filter(|(path, _)| *path == ".gitignore" || path.ends_with("/.gitignore"))
                .filter_map(|(path, indexed)| Some((path.clone(), indexed.stamp.as_ref()?.hash.clone())))
                .filter(|(_, hash)| !written.contains(hash))
                .collect();
            if let Some((_, _, _, frozen)) = lock(&self.begun).get_mut(&turn.user_turn) {
                frozen.insert(root.host.clone(), ignores);
            }
        }
        Ok((changes, not_kept))
    }

    /// The contents of the `.gitignore` files turns in `context` wrote (read from its
    /// sessions' records once, then kept up to date).
    fn ignores_written(&self, context: &crate::base::auth::Context) -> HashSet<String> {
        let mut written = lock(&self.ignores_written);
        if let Some(known) = written.get(context) {
            return known.clone();
        }
        let mut found = HashSet::new();
        for session in self.sessions_of(context) {
            for record in self.records(&session) {
                match record {
                    super::Record::Call { changes, .. } => found.extend(ignore_contents(&changes)),
                    super::Record::Dropped { ignores, .. } => found.extend(ignores),
                    _ => {}
                }
            }
        }
        written.insert(context.clone(), found.clone());
        found
    }

    /// `changes` a turn made: the `.gitignore` contents among them never hold.
    pub(super) fn wrote_ignores(&self, context: &crate::base::auth::Context, changes: &[Change]) {
        let contents: Vec<String> = ignore_contents(changes).collect();
        if !contents.is_empty() {
            self.ignores_written(context);
            lock(&self.ignores_written).entry(context.clone()).or_default().extend(contents);
        }
    }

    /// Reads the file `path` and keeps its content in the store.
    fn keep(
        &self,
        objects: &Objects,
        turn: &Turn,
        folder: &std::os::fd::OwnedFd,
        path: &str,
        racy_since: i128,
    ) -> Result<Kept, UndoError> {
        if self.size(&turn.context) >= self.config.max_size.0 {
            // Past the store's size within a turn: nothing more is kept until the turn's end
            // lets the oldest go.
            return Ok(Kept::Not(format!(
                "the undo store is at its size ({}, sessions.undo.max_size)",
                self.config.max_size
            )));
        }
        let (bytes, meta) = match tree::read(folder, path, self.config.max_file_size.0) {
            Ok(Some(read)) => read,
            Ok(None) => return Ok(Kept::Gone),
            Err(error) => return Ok(Kept::Not(error.to_string())),
        };
        let (hash, took) = objects.put(&bytes).map_err(|source| match super::disk_full(&source) {
            true => UndoError::DiskFull,
            false => UndoError::Folder { folder: "the undo store".into(), source },
        })?;
        self.grew(&turn.context, took);
        Ok(Kept::Content(Indexed {
            meta,
            racy: meta.mtime.max(meta.ctime) >= racy_since,
            stamp: Some(Stamp { hash, size: meta.size, mode: meta.mode, uid: meta.uid, gid: meta.gid }),
        }))
    }
}

/// The contents of the `.gitignore` files among `changes`, as they were written.
pub(super) fn ignore_contents(changes: &[Change]) -> impl Iterator<Item = String> + '_ {
    changes
        .iter()
        .filter(|change| change.path == ".gitignore" || change.path.ends_with("/.gitignore"))
        .filter_map(|change| Some(change.after.as_ref()?.hash.clone()))
}

/// A file's content, kept or not.
enum Kept {
    Content(Indexed),
    /// Gone since it was looked at.
    Gone,
    /// Not kept, and why.
    Not(String),
}
