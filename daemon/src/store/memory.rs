//! A context's long-term memory (spec §14.3), on the filesystem: one markdown file per entry
//! (`{key}.md`, metadata as YAML front matter) in the context's `memory/` folder, with a JSON
//! index (`index.json`) of keys, metadata and times. Search ranks entries by how often the
//! query's words occur, boosted by importance. Expired entries (TTL) are removed by
//! [`MemoryStore::expire`]. Only the daemon writes here; every file is written atomically.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::base::state::{self, StateError};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Metadata {
    /// Where it came from, e.g. `session:s1/message:m4` or `user:alice`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Seconds it lives; 0 or absent: for ever.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub importance: Option<f64>,
    /// The session, message and user it was learnt from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Whose words it is (DESIGN.md §10.3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// For an untrusted origin: what it came from (an address, a file, a server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub came_from: Option<String>,
    /// Who confirmed an entry that waited in quarantine, and when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmed_by: Option<String>,
    /// Every time it was told, where (its first source and each near duplicate since, see
    /// [`Kept::SameAs`]); empty while it was told once.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
}

impl Metadata {
    /// Where this was told: its session and message, else its source.
    pub fn provenance(&self) -> String {
        match (&self.session_id, &self.message_id, &self.source) {
            (Some(session), Some(message), _) => format!("session:{session}/message:{message}"),
            (Some(session), None, Some(source)) => format!("session:{session} ({source})"),
            (Some(session), None, None) => format!("session:{session}"),
            (None, Some(message), Some(source)) => format!("{source}, message {message}"),
            (None, _, Some(source)) => source.clone(),
            (None, _, None) => "unknown".into(),
        }
    }
}

/// What a write did.
#[derive(Debug, Clone, PartialEq)]
pub enum Kept {
    /// A new entry under its key.
    New,
    /// The key's entry, replaced.
    Replaced,
    /// The same fact was kept already, under this key: that entry was updated (its importance,
    /// time and sources) instead of another added.
    SameAs(String),
    /// A new entry; the store was full, so this one (the least important, the oldest of those)
    /// was forgotten to make room.
    MadeRoom(Box<MemoryEntry>),
}

/// The search index over a context's memory (the daemon's `recall`), told of every change; it finds
/// a fact kept already.
pub trait MemoryIndex: Send + Sync {
    /// The key of the entry that says what `content` says, if one does.
    fn same_fact(&self, context: &crate::base::auth::Context, content: &str) -> Option<String>;
    fn kept(&self, context: &crate::base::auth::Context, entry: &MemoryEntry);
    fn forgotten(&self, context: &crate::base::auth::Context, key: &str);
}

/// Where a memory entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// The user said it, or wrote it themselves (the CLI, a gateway).
    User,
    /// An agent inferred it from the user's messages.
    Inferred,
    /// An agent wrote it in a turn that read content from outside.
    Untrusted,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::User => "user",
            Origin::Inferred => "inferred",
            Origin::Untrusted => "untrusted",
        }
    }
}

/// The most entries one context keeps by default (`memory.max_entries`): past it, the least
/// important and oldest entry is forgotten to make room for a new one, and the person told.
/// Its quarantine holds as many, and refuses more.
pub fn most_entries() -> usize {
    crate::base::config::MemoryConfig::default().max_entries
}

/// The folder, inside a context's memory folder, where quarantined entries wait.
const QUARANTINE: &str = "quarantine";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexEntry {
    pub metadata: Metadata,
    /// Seconds since the epoch.
    pub created_at: u64,
    pub updated_at: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MemoryEntry {
    pub key: String,
    pub content: String,
    pub metadata: Metadata,
    pub created_at: u64,
    pub updated_at: u64,
}

impl MemoryEntry {
    /// Why this entry is not the words of `asker` (DESIGN.md §10.3), if it is not: with
    /// `outside`, it was kept from content from outside (its owner confirmed it, so it is in
    /// use, but a search that finds it reads that content again); in a group (`group`), it
    /// was kept from another member's words or from the group's as a whole (no one's alone).
    pub fn foreign_to(&self, group: bool, asker: Option<&str>, outside: bool) -> Option<String> {
        if outside && self.metadata.origin == Some(Origin::Untrusted) {
            let from = self.metadata.came_from.as_deref().unwrap_or("content from outside");
            return Some(format!("the memory `{}`, kept from {from}", self.key));
        }
        let theirs = self.metadata.user_id.as_deref();
        if group && (asker.is_none() || theirs != asker) {
            return Some(format!("the memory `{}`, kept from other members' words", self.key));
        }
        None
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Index {
    version: u32,
    entries: BTreeMap<String, IndexEntry>,
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("memory key `{0}` is not valid: use 1-128 lowercase letters, digits, `-` or `_`")]
    BadKey(String),
    #[error("memory content is empty or larger than 64 KiB")]
    BadContent,
    #[error(transparent)]
    State(#[from] StateError),
    #[error("cannot encode memory metadata: {0}")]
    Encode(String),
    #[error("memory is full: {0} entries are kept, the most there may be; forget some (memory_delete, or `baaaht memory forget KEY`) before remembering more")]
    Full(usize),
    #[error("no entry `{0}` waits for review")]
    NotQuarantined(String),
    #[error("a memory key must not hold a secret (the key names a file and shows in every list): name the fact, e.g. `github-token-location`, and keep no secret in memory")]
    SecretKey,
}

/// Whether `key` can name a memory file.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 128
        && key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| w.len() > 1).map(str::to_lowercase).collect()
}

/// One context's memory folder.
#[derive(Debug)]
pub struct MemoryStore {
    folder: PathBuf,
}

impl MemoryStore {
    /// The store in `folder` (e.g. `users/{id}/memory`); created on the first write.
    pub fn new(folder: PathBuf) -> MemoryStore {
        MemoryStore { folder }
    }

    fn index_path(&self) -> PathBuf {
        self.folder.join("index.json")
    }

    fn index(&self) -> Result<Index, MemoryError> {
        Ok(state::read_json(&self.index_path())?.unwrap_or(Index { version: 1, ..Index::default() }))
    }

    fn file(&self, key: &str) -> PathBuf {
        self.folder.join(format!("{key}.md"))
    }

    /// Writes (or replaces) `key`; `now` is seconds since the epoch.
    pub fn write(&self, key: &str, content: &str, metadata: Metadata, now: u64) -> Result<(), MemoryError> {
        if !valid_key(key) {
            return Err(MemoryError::BadKey(key.to_string()));
        }
        if content.trim().is_empty() || content.len() > 64 << 10 {
            return Err(MemoryError::BadContent);
        }
        std::fs::create_dir_all(&self.folder)
            .map_err(|source| StateError::Write { path: self.folder.clone(), source })?;
        let mut index = self.index()?;
        let created_at = index.entries.get(key).map_or(now, |entry| entry.created_at);
        let front = serde_yaml::to_string(&metadata).map_err(|error| MemoryError::Encode(error.to_string()))?;
        let document = format!("---\n{front}---\n{content}\n");
        state::write_atomic(&self.file(key), document.as_bytes(), 0o600)?;
        index.entries.insert(key.to_string(), IndexEntry { metadata, created_at, updated_at: now });
        state::write_json(&self.index_path(), &index)?;
        Ok(())
    }

    /// The entry `key`, if it exists.
    pub fn read(&self, key: &str) -> Result<Option<MemoryEntry>, MemoryError> {
        if !valid_key(key) {
            return Err(MemoryError::BadKey(key.to_string()));
        }
        let index = self.index()?;
        let Some(entry) = index.entries.get(key) else { return Ok(None) };
        let text = match std::fs::read_to_string(self.file(key)) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StateError::Read { path: self.file(key), source }.into()),
        };
        // The content follows the front matter's closing line.
        let content = text
            .strip_prefix("---\n")
            .and_then(|rest| rest.split_once("\n---\n").map(|(_, body)| body))
            .unwrap_or(&text)
            .trim_end_matches('\n')
            .to_string();
        Ok(Some(MemoryEntry {
            key: key.to_string(),
            content,
            metadata: entry.metadata.clone(),
            created_at: entry.created_at,
            updated_at: entry.updated_at,
        }))
    }

    /// Every entry, optionally only those carrying `tag`, newest first.
    pub fn list(&self, tag: Option<&str>) -> Result<Vec<MemoryEntry>, MemoryError> {
        let index = self.index()?;
        let mut entries = vec![];
        for (key, entry) in &index.entries {
            if tag.is_some_and(|tag| !entry.metadata.tags.iter().any(|t| t == tag)) {
                continue;
            }
            if let Some(found) = self.read(key)? {
                entries.push(found);
            }
        }
        entries.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.key.cmp(&b.key)));
        Ok(entries)
    }

    /// Entries matching `query`'s words, best first: occurrences in content, tags and key,
    /// times (1 + importance); at most `limit`.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<MemoryEntry>, MemoryError> {
        let wanted = words(query);
        if wanted.is_empty() {
            return Ok(vec![]);
        }
        let mut scored = vec![];
        for entry in self.list(None)? {
            let haystack = words(&format!(
                "{} {} {}",
                entry.key.replace(['-', '_'], " "),
                entry.metadata.tags.join(" "),
                entry.content
            ));
            let hits: usize = wanted.iter().map(|w| haystack.iter().filter(|h| *h == w).count()).sum();
            let matched = wanted.iter().filter(|w| haystack.contains(w)).count();
            if hits == 0 {
                continue;
            }
            // Entries matching more of the words rank first, then by frequency and importance.
            let score = (matched as f64) * 1000.0 + hits as f64 * (1.0 + entry.metadata.importance.unwrap_or(0.0));
            scored.push((score, entry));
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.key.cmp(&b.1.key)));
        Ok(scored.into_iter().take(limit).map(|(_, entry)| entry).collect())
    }

    /// Deletes `key`; true when it existed.
    pub fn delete(&self, key: &str) -> Result<bool, MemoryError> {
        if !valid_key(key) {
            return Err(MemoryError::BadKey(key.to_string()));
        }
        let mut index = self.index()?;
        let existed = index.entries.remove(key).is_some();
        if existed {
            state::write_json(&self.index_path(), &index)?;
        }
        match std::fs::remove_file(self.file(key)) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(existed),
            Err(source) => Err(StateError::Write { path: self.file(key), source }.into()),
        }
    }

    /// Removes entries whose TTL has passed at `now`; returns their keys.
    pub fn expire(&self, now: u64) -> Result<Vec<String>, MemoryError> {
        let index = self.index()?;
        let expired: Vec<String> = index
            .entries
            .iter()
            .filter(|(_, entry)| entry.metadata.ttl.is_some_and(|ttl| ttl > 0 && entry.updated_at + ttl <= now))
            .map(|(key, _)| key.clone())
            .collect();
        for key in &expired {
            self.delete(key)?;
        }
        Ok(expired)
    }

    pub fn folder(&self) -> &Path {
        &self.folder
    }
}

/// Whether `store` has room for `key` (it is there already, or fewer than `most` are).
fn room_for(store: &MemoryStore, key: &str, most: usize) -> Result<(), MemoryError> {
    let index = store.index()?;
    if index.entries.len() >= most && !index.entries.contains_key(key) {
        return Err(MemoryError::Full(index.entries.len()));
    }
    Ok(())
}

/// Every context's memory: where each store is, and the one lock writers take (each store's
/// index is rewritten whole, so two writers at once would lose an entry).
pub struct Memories {
    data_dir: crate::base::datadir::DataDir,
    writes: std::sync::Mutex<()>,
    /// What an entry's text passes before it is kept.
    redact: Option<crate::guard::redact::Redact>,
    /// The search index, told of every change (set once the daemon has made it).
    index: std::sync::OnceLock<std::sync::Weak<dyn MemoryIndex>>,
    /// The most entries a context keeps.
    most: usize,
}

impl std::fmt::Debug for Memories {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memories").field("data_dir", &self.data_dir).finish_non_exhaustive()
    }
}

impl Memories {
    pub fn new(data_dir: crate::base::datadir::DataDir) -> Memories {
        Memories {
            data_dir,
            writes: std::sync::Mutex::new(()),
            redact: None,
            index: std::sync::OnceLock::new(),
            most: most_entries(),
        }
    }

    /// These stores, each keeping at most `most` entries.
    pub fn keeping(self, most: usize) -> Memories {
        Memories { most: most.max(1), ..self }
    }

    /// Tells `index` of every change from now on.
    pub fn indexed_by(&self, index: std::sync::Weak<dyn MemoryIndex>) {
        // silent-ok: the daemon sets it once; a second index is not taken.
        let _ = self.index.set(index);
    }

    fn index(&self) -> Option<std::sync::Arc<dyn MemoryIndex>> {
        self.index.get().and_then(std::sync::Weak::upgrade)
    }

    /// These stores, every entry cleaned by `redact` before it is kept.
    pub fn redacting(self, redact: crate::guard::redact::Redact) -> Memories {
        Memories { redact: Some(redact), ..self }
    }

    /// The store of `context`: `users/{id}/memory` or `groups/{id}/memory`.
    pub fn store(&self, context: &crate::base::auth::Context) -> MemoryStore {
        MemoryStore::new(self.data_dir.context_dir(context).join("memory"))
    }

    fn writing(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The entries of `context` that wait for its owner's review (DESIGN.md §10.3): written in
    /// turns that read untrusted content, never loaded into an agent's context.
    pub fn quarantine(&self, context: &crate::base::auth::Context) -> MemoryStore {
        MemoryStore::new(self.data_dir.context_dir(context).join("memory").join(QUARANTINE))
    }

    fn cleaned(&self, content: &str) -> String {
        match &self.redact {
            Some(redact) => redact.clean(crate::guard::redact::Place::Memory, content).into_owned(),
            None => content.to_string(),
        }
    }

    /// `metadata` with no secret in its words (tags and where it came from), and `key` checked
    /// to hold none: a key is a file's name, so it is refused rather than changed.
    fn checked(&self, key: &str, mut metadata: Metadata) -> Result<Metadata, MemoryError> {
        let Some(redact) = &self.redact else { return Ok(metadata) };
        if let std::borrow::Cow::Owned(_) = redact.clean(crate::guard::redact::Place::Memory, key) {
            return Err(MemoryError::SecretKey);
        }
        let clean = |text: String| redact.clean_string(crate::guard::redact::Place::Memory, text);
        metadata.tags = std::mem::take(&mut metadata.tags).into_iter().map(clean).collect();
        metadata.sources = std::mem::take(&mut metadata.sources).into_iter().map(clean).collect();
        metadata.source = metadata.source.take().map(clean);
        metadata.came_from = metadata.came_from.take().map(clean);
        Ok(metadata)
    }

    /// Writes `key` in `context`'s store (no secret in it); refused when the store is full
    /// and `key` is new. A new key whose content says what another entry says already
    /// updates that entry instead ([`Kept::SameAs`]).
    pub fn write(
        &self,
        context: &crate::base::auth::Context,
        key: &str,
        content: &str,
        metadata: Metadata,
    ) -> Result<Kept, MemoryError> {
        let metadata = self.checked(key, metadata)?;
        let content = self.cleaned(content);
        let store = self.store(context);
        let _one_writer = self.writing();
        let index = self.index();
        if store.read(key)?.is_some() {
            store.write(key, &content, metadata, crate::base::state::now_seconds())?;
            self.tell_kept(index.as_deref(), context, &store, key);
            return Ok(Kept::Replaced);
        }
        let same = index.as_deref().and_then(|index| index.same_fact(context, &content));
        if let Some(existing) = same.and_then(|same| store.read(&same).ok().flatten()) {
            let mut merged = existing.metadata.clone();
            if merged.sources.is_empty() {
                merged.sources.push(existing.metadata.provenance());
            }
            let told = metadata.provenance();
            if !merged.sources.contains(&told) {
                merged.sources.push(told);
            }
            merged.importance = match (existing.metadata.importance, metadata.importance) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            for tag in metadata.tags {
                if !merged.tags.contains(&tag) {
                    merged.tags.push(tag);
                }
            }
            store.write(&existing.key, &existing.content, merged, crate::base::state::now_seconds())?;
            self.tell_kept(index.as_deref(), context, &store, &existing.key);
            return Ok(Kept::SameAs(existing.key));
        }
        // Full: the least important entry, the oldest of those, makes room.
        let entries = store.index()?.entries;
        let forgot = if entries.len() >= self.most {
            let importance = |entry: &IndexEntry| entry.metadata.importance.unwrap_or(0.0);
            let least = entries
                .iter()
                .min_by(|(_, a), (_, b)| importance(a).total_cmp(&importance(b)).then(a.updated_at.cmp(&b.updated_at)))
                .map(|(key, _)| key.clone());
            match least.map(|least| store.read(&least)).transpose()?.flatten() {
                Some(gone) => {
                    store.delete(&gone.key)?;
                    if let Some(index) = &index {
                        index.forgotten(context, &gone.key);
                    }
                    tracing::info!(context = %context, key = %gone.key, most = self.most, "memory forgotten to make room");
                    Some(gone)
                }
                None => None,
            }
        } else {
            None
        };
        store.write(key, &content, metadata, crate::base::state::now_seconds())?;
        self.tell_kept(index.as_deref(), context, &store, key);
        Ok(match forgot {
            Some(gone) => Kept::MadeRoom(Box::new(gone)),
            None => Kept::New,
        })
    }

    /// The most entries a context keeps.
    pub fn most(&self) -> usize {
        self.most
    }

    /// Tells `index` that `key` of `context` is as `store` holds it now.
    fn tell_kept(
        &self,
        index: Option<&dyn MemoryIndex>,
        context: &crate::base::auth::Context,
        store: &MemoryStore,
        key: &str,
    ) {
        let Some(index) = index else { return };
        match store.read(key) {
            Ok(Some(entry)) => index.kept(context, &entry),
            Ok(None) => index.forgotten(context, key),
            Err(error) => {
                tracing::warn!(context = %context, key, error = %baaaht_proto::error_chain(&error), "cannot read a memory back to index it")
            }
        }
    }

    /// Writes `key` in `store`, cleaned, under the one writer lock, if there is room.
    fn keep(&self, store: MemoryStore, key: &str, content: &str, metadata: Metadata) -> Result<(), MemoryError> {
        let metadata = self.checked(key, metadata)?;
        let content = self.cleaned(content);
        let _one_writer = self.writing();
        room_for(&store, key, self.most)?;
        store.write(key, &content, metadata, crate::base::state::now_seconds())
    }

    /// Keeps `key` aside in `context`'s quarantine until its owner confirms or drops it.
    pub fn put_aside(
        &self,
        context: &crate::base::auth::Context,
        key: &str,
        content: &str,
        metadata: Metadata,
    ) -> Result<(), MemoryError> {
        self.keep(self.quarantine(context), key, content, metadata)
    }

    /// Moves `key` out of `context`'s quarantine into its memory, confirmed `by`.
    pub fn confirm(
        &self,
        context: &crate::base::auth::Context,
        key: &str,
        by: &str,
    ) -> Result<MemoryEntry, MemoryError> {
        let _one_writer = self.writing();
        let quarantine = self.quarantine(context);
        let mut entry = quarantine.read(key)?.ok_or_else(|| MemoryError::NotQuarantined(key.to_string()))?;
        let store = self.store(context);
        room_for(&store, key, self.most)?;
        entry.metadata.confirmed_by = Some(format!("{by} at {}", crate::base::state::now_rfc3339()));
        store.write(key, &entry.content, entry.metadata.clone(), crate::base::state::now_seconds())?;
        quarantine.delete(key)?;
        self.tell_kept(self.index().as_deref(), context, &store, key);
        Ok(entry)
    }

    /// Drops `key` from `context`'s quarantine.
    pub fn drop_quarantined(&self, context: &crate::base::auth::Context, key: &str) -> Result<(), MemoryError> {
        let _one_writer = self.writing();
        if self.quarantine(context).delete(key)? {
            Ok(())
        } else {
            Err(MemoryError::NotQuarantined(key.to_string()))
        }
    }

    /// Deletes `key` from `context`'s store; false when there was none.
    pub fn delete(&self, context: &crate::base::auth::Context, key: &str) -> Result<bool, MemoryError> {
        let _one_writer = self.writing();
        let deleted = self.store(context).delete(key)?;
        if let Some(index) = self.index() {
            index.forgotten(context, key);
        }
        Ok(deleted)
    }

    /// Removes expired memories of every context; returns how many.
    pub fn expire_all(&self) -> usize {
        let mut removed = 0;
        for kind in crate::base::datadir::CONTEXT_KINDS {
            let Ok(contexts) = std::fs::read_dir(self.data_dir.contexts_dir(kind)) else { continue };
            for context in contexts.flatten() {
                let folder = context.path().join("memory");
                if !folder.is_dir() {
                    continue;
                }
                let _one_writer = self.writing();
                match MemoryStore::new(folder.clone()).expire(crate::base::state::now_seconds()) {
                    Ok(keys) => {
                        let id = context.file_name().to_string_lossy().into_owned();
                        let index = self.index();
                        for key in &keys {
                            tracing::info!(folder = %folder.display(), key, "memory expired");
                            if let Some(index) = &index {
                                index.forgotten(&crate::base::auth::Context { kind, id: id.clone() }, key);
                            }
                        }
                        removed += keys.len();
                    }
                    Err(error) => tracing::warn!(
                        folder = %folder.display(),
                        error = %baaaht_proto::error_chain(&error),
                        "cannot expire memories"
                    ),
                }
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn store() -> (tempfile::TempDir, MemoryStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = MemoryStore::new(dir.path().join("users/alice/memory"));
        (dir, store)
    }

    fn tagged(tags: &[&str]) -> Metadata {
        Metadata { tags: tags.iter().map(|t| t.to_string()).collect(), ..Metadata::default() }
    }

    #[test]
    fn write_read_list_delete() {
        let (_dir, store) = store();
        let origin = Metadata {
            source: Some("session:s1".into()),
            session_id: Some("s1".into()),
            message_id: Some("m4".into()),
            user_id: Some("alice".into()),
            ..tagged(&["food"])
        };
        store.write("coffee", "Alice takes her coffee black.", origin.clone(), 100).expect("write");
        store.write("coffee", "Alice takes her coffee black, no sugar.", origin, 200).expect("rewrite");
        let entry = store.read("coffee").expect("read").expect("exists");
        assert_eq!(
            (entry.content.as_str(), entry.created_at, entry.updated_at),
            ("Alice takes her coffee black, no sugar.", 100, 200)
        );
        assert_eq!(entry.metadata.message_id.as_deref(), Some("m4"));
        let file = std::fs::read_to_string(store.folder().join("coffee.md")).expect("markdown file");
        assert!(file.starts_with("---\n") && file.contains("sessionId: s1"), "{file}");
        store.write("team", "Works with Bob on the website.", tagged(&["work"]), 150).expect("write");
        assert_eq!(store.list(Some("work")).expect("list").len(), 1);
        assert_eq!(store.list(None).expect("list")[0].key, "coffee", "newest first");
        assert!(store.delete("coffee").expect("delete"));
        assert!(store.read("coffee").expect("read").is_none());
        assert!(matches!(store.write("../x", "y", Metadata::default(), 1), Err(MemoryError::BadKey(_))));
    }

    #[test]
    fn search_ranks_by_words_matched_then_frequency_and_importance() {
        let (_dir, store) = store();
        store.write("a", "coffee coffee coffee", Metadata::default(), 1).expect("write");
        store.write("b", "coffee and tea", Metadata::default(), 1).expect("write");
        store.write("c", "tea only", Metadata { importance: Some(5.0), ..Metadata::default() }, 1).expect("write");
        store.write("d", "nothing relevant", Metadata::default(), 1).expect("write");
        let keys: Vec<String> = store.search("coffee tea", 10).expect("search").into_iter().map(|e| e.key).collect();
        assert_eq!(keys, ["b", "c", "a"]);
        assert!(store.search("  ", 10).expect("search").is_empty());
    }

    #[test]
    fn no_secret_is_kept_in_a_key_a_tag_or_a_source() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = crate::guard::audit::Audit::open(
            dir.path().join("audit"),
            false,
            1,
            Arc::new(crate::base::metrics::Metrics::off()),
        );
        let shield = Arc::new(crate::guard::redact::Shield::with_values(&[("WIFI", "hunter2-correct-horse")]));
        let memories = Memories::new(crate::base::datadir::DataDir::new(dir.path().to_path_buf()))
            .redacting(crate::guard::redact::Redact::new(shield, audit));
        let alice = crate::base::auth::Context::user("alice");
        let told = Metadata {
            tags: vec!["wifi".into(), "hunter2-correct-horse".into()],
            source: Some("https://example.test/?k=hunter2-correct-horse".into()),
            ..Metadata::default()
        };
        let refused = memories.write(&alice, "hunter2-correct-horse", "the wifi", told.clone());
        assert!(matches!(refused, Err(MemoryError::SecretKey)), "{refused:?}");
        assert!(matches!(
            memories.put_aside(&alice, "hunter2-correct-horse", "x", told.clone()),
            Err(MemoryError::SecretKey)
        ));
        memories.write(&alice, "wifi", "the wifi password is hunter2-correct-horse", told).expect("kept");
        let kept = memories.store(&alice).read("wifi").expect("read").expect("there");
        assert_eq!(kept.metadata.tags, vec!["wifi".to_string(), "[redacted: WIFI]".to_string()]);
        assert_eq!(kept.metadata.source.as_deref(), Some("https://example.test/?k=[redacted: WIFI]"));
        assert_eq!(kept.content, "the wifi password is [redacted: WIFI]");
    }

    #[test]
    fn expired_entries_are_removed() {
        let (_dir, store) = store();
        store.write("short", "gone soon", Metadata { ttl: Some(60), ..Metadata::default() }, 1000).expect("write");
        store.write("forever", "stays", Metadata { ttl: Some(0), ..Metadata::default() }, 1000).expect("write");
        assert!(store.expire(1059).expect("expire").is_empty());
        assert_eq!(store.expire(1060).expect("expire"), ["short"]);
        assert_eq!(store.list(None).expect("list").len(), 1);
    }
}
