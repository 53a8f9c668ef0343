//! Recall (DESIGN.md §10.5): a searchable index per context over its memory entries and every
//! message of its sessions (archived ones too), in `{users,groups}/{id}/index/recall.sqlite`
//! ([`index`]; ranking and near duplicates in [`query`]).
//!
//! The memory files and the session logs stay the truth. A context's index is opened on its
//! first use after the daemon starts: made when missing, rebuilt from the files when it is
//! damaged or of another schema (the old one kept aside), and brought up to date with them —
//! a memory written or forgotten, or a message appended, while the daemon was stopped or
//! before a crash let it reach the index is put in then. While the daemon runs, every memory
//! write and message append reaches the index as it happens ([`MemoryIndex`] and
//! [`EntrySink`]); one that fails is logged, and the context's index is checked against the
//! files again at its next use.

pub mod index;
pub mod query;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::base::auth::Context;
use crate::store::memory::{Memories, MemoryEntry, MemoryIndex};
use crate::store::sessions::{Entry, EntrySink, SessionRecord, SessionStore};

use index::Index;
pub use index::{Filter, Found, IndexError, MemoryDoc, MessageDoc};

/// The index's folder in a context's folder, and its file.
pub const FOLDER: &str = "index";
pub const FILE: &str = "recall.sqlite";

/// Every context's index.
pub struct Recall {
    data_dir: crate::base::datadir::DataDir,
    sessions: Arc<SessionStore>,
    memories: Arc<Memories>,
    /// The indexes opened (and brought up to date) since the daemon started.
    open: Mutex<HashMap<Context, Arc<Mutex<Index>>>>,
}

impl std::fmt::Debug for Recall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recall").field("data_dir", &self.data_dir).finish_non_exhaustive()
    }
}

/// A memory entry as the index keeps it.
fn memory_doc(entry: &MemoryEntry) -> MemoryDoc {
    let metadata = &entry.metadata;
    MemoryDoc {
        key: entry.key.clone(),
        body: entry.content.clone(),
        tags: metadata.tags.clone(),
        importance: metadata.importance.unwrap_or(0.0),
        origin: metadata.origin.map(|origin| origin.as_str().to_string()).unwrap_or_default(),
        session: metadata.session_id.clone().unwrap_or_default(),
        created: entry.created_at,
        updated: entry.updated_at,
    }
}

/// The messages of a session's log entry worth finding again: what the people and the
/// assistant said (not system prompts, delegations' inner work, or summaries).
fn message_doc(session: &str, entry: &Entry) -> Option<MessageDoc> {
    let Entry::Message { id, timestamp, message, .. } = entry else { return None };
    if !matches!(message.role.as_str(), "user" | "assistant") || message.content.trim().is_empty() {
        return None;
    }
    let at = timestamp.parse::<jiff::Timestamp>().map(|at| at.as_second().max(0) as u64).unwrap_or(0);
    Some(MessageDoc {
        entry: id.clone(),
        session: session.to_string(),
        role: message.role.clone(),
        body: message.content.clone(),
        at,
    })
}

impl Recall {
    pub fn new(
        data_dir: crate::base::datadir::DataDir,
        sessions: Arc<SessionStore>,
        memories: Arc<Memories>,
    ) -> Recall {
        Recall { data_dir, sessions, memories, open: Mutex::default() }
    }

    fn path(&self, context: &Context) -> PathBuf {
        self.data_dir.context_dir(context).join(FOLDER).join(FILE)
    }

    /// `context`'s index, opened (rebuilt when it has to be) and up to date with the files.
    fn index(&self, context: &Context) -> Result<Arc<Mutex<Index>>, IndexError> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(index) = open.get(context) {
            return Ok(index.clone());
        }
        let index = self.opened(context)?;
        let index = Arc::new(Mutex::new(index));
        open.insert(context.clone(), index.clone());
        Ok(index)
    }

    /// Opens `context`'s index from its file — set aside and made anew when it cannot be used
    /// — and puts in what the files hold and it does not.
    fn opened(&self, context: &Context) -> Result<Index, IndexError> {
        let path = self.path(context);
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder).map_err(|error| IndexError::Damaged {
                path: path.clone(),
                why: format!("its folder cannot be made: {error}"),
            })?;
        }
        let mut index = match Index::open(&path) {
            Ok(index) => index,
            Err(error @ (IndexError::Damaged { .. } | IndexError::Schema { .. })) => {
                let aside = path.with_extension(format!("sqlite.old-{}", crate::base::state::now_seconds()));
                tracing::warn!(context = %context, error = %error, aside = %aside.display(), "the search index is rebuilt from the memory files and session logs");
                std::fs::rename(&path, &aside).map_err(|source| IndexError::Damaged {
                    path: path.clone(),
                    why: format!("it cannot be set aside: {source}"),
                })?;
                for sidecar in ["-wal", "-shm"] {
                    let file = PathBuf::from(format!("{}{sidecar}", path.display()));
                    if let Err(error) = std::fs::remove_file(&file) {
                        if error.kind() != std::io::ErrorKind::NotFound {
                            tracing::warn!(file = %file.display(), %error, "cannot remove the old index's journal");
                        }
                    }
                }
                Index::open(&path)?
            }
            Err(other) => return Err(other),
        };
        self.catch_up(context, &mut index)?;
        Ok(index)
    }

    /// Puts in `index` the memories and messages of `context`'s files it does not hold.
    fn catch_up(&self, context: &Context, index: &mut Index) -> Result<(), IndexError> {
        let started = std::time::Instant::now();
        // Memories: the files' entries, each as new as its file; none the files do not hold.
        let entries = match self.memories.store(context).list(None) {
            Ok(entries) => entries,
            Err(error) => {
                tracing::warn!(context = %context, error = %baaaht_proto::error_chain(&error), "cannot read the memory files to index them");
                vec![]
            }
        };
        let known: HashMap<String, u64> = index.memory_times()?.into_iter().collect();
        let changed: Vec<MemoryDoc> =
            entries.iter().filter(|entry| known.get(&entry.key) != Some(&entry.updated_at)).map(memory_doc).collect();
        let memories = changed.len();
        index.put_memories(&changed)?;
        let kept: std::collections::HashSet<&str> = entries.iter().map(|entry| entry.key.as_str()).collect();
        for key in known.keys().filter(|key| !kept.contains(key.as_str())) {
            index.forget_memory(key)?;
        }
        // Messages: each log that grew since it was last read whole.
        let filter = crate::store::sessions::Filter { context: Some(context.clone()), ..Default::default() };
        let sessions = self.sessions.list(&filter);
        let (mut read, mut messages) = (0, 0);
        for (at, session) in sessions.iter().enumerate() {
            let log = self.sessions.folder(&session.id).join(crate::store::sessions::log::FILE_NAME);
            let bytes = std::fs::metadata(&log).map(|meta| meta.len()).unwrap_or(0);
            if bytes == 0 || index.log_bytes(&session.id)? == bytes {
                continue;
            }
            let entries = match self.sessions.read(&session.id) {
                Ok(read) => read.entries,
                Err(error) => {
                    tracing::warn!(session = %session.id, error = %baaaht_proto::error_chain(&error), "cannot read a session log to index it");
                    continue;
                }
            };
            let docs: Vec<MessageDoc> = entries.iter().filter_map(|entry| message_doc(&session.id, entry)).collect();
            messages += docs.len();
            index.put_messages(&docs, Some((&session.id, bytes)))?;
            read += 1;
            if read % 100 == 0 {
                tracing::info!(context = %context, sessions = at + 1, of = sessions.len(), "indexing the session logs");
            }
        }
        if memories + read > 0 {
            tracing::info!(context = %context, memories, sessions = read, messages, ms = started.elapsed().as_millis() as u64, "the search index is up to date with the files");
        }
        Ok(())
    }

    /// Runs `action` on `context`'s index; on failure the index is looked at again at its
    /// next use (the files hold what it missed).
    fn with<T>(
        &self,
        context: &Context,
        action: impl FnOnce(&mut Index) -> Result<T, IndexError>,
    ) -> Result<T, IndexError> {
        let index = self.index(context)?;
        let mut index = index.lock().unwrap_or_else(PoisonError::into_inner);
        let done = action(&mut index);
        if done.is_err() {
            self.open.lock().unwrap_or_else(PoisonError::into_inner).remove(context);
        }
        done
    }

    /// `context`'s memories matching `text`, best first.
    pub fn search_memories(
        &self,
        context: &Context,
        text: &str,
        filter: &Filter,
        limit: usize,
    ) -> Result<Vec<Found<MemoryDoc>>, IndexError> {
        let now = crate::base::state::now_seconds();
        self.with(context, |index| index.search_memories(text, filter, limit, now))
    }

    /// `context`'s messages matching `text`, best first.
    pub fn search_messages(
        &self,
        context: &Context,
        text: &str,
        filter: &Filter,
        limit: usize,
    ) -> Result<Vec<Found<MessageDoc>>, IndexError> {
        let now = crate::base::state::now_seconds();
        self.with(context, |index| index.search_messages(text, filter, limit, now))
    }

    /// How many memories and messages `context`'s index holds, and its size in bytes.
    pub fn size(&self, context: &Context) -> Result<(u64, u64, u64), IndexError> {
        self.with(context, |index| index.size())
    }
}

impl MemoryIndex for Recall {
    fn same_fact(&self, context: &Context, content: &str) -> Option<String> {
        match self.with(context, |index| index.same_fact(content)) {
            Ok(key) => key,
            Err(error) => {
                tracing::warn!(context = %context, error = %baaaht_proto::error_chain(&error), "cannot look for the same memory");
                None
            }
        }
    }

    fn kept(&self, context: &Context, entry: &MemoryEntry) {
        if let Err(error) = self.with(context, |index| index.put_memory(&memory_doc(entry))) {
            tracing::warn!(context = %context, key = %entry.key, error = %baaaht_proto::error_chain(&error), "a memory is not in the search index yet");
        }
    }

    fn forgotten(&self, context: &Context, key: &str) {
        if let Err(error) = self.with(context, |index| index.forget_memory(key)) {
            tracing::warn!(context = %context, key, error = %baaaht_proto::error_chain(&error), "a forgotten memory is still in the search index");
        }
    }
}

impl EntrySink for Recall {
    fn appended(&self, record: &SessionRecord, entry: &Entry) {
        let Some(doc) = message_doc(&record.id, entry) else { return };
        let context = record.context();
        if let Err(error) = self.with(&context, |index| index.put_messages(std::slice::from_ref(&doc), None)) {
            tracing::warn!(session = %record.id, error = %baaaht_proto::error_chain(&error), "a message is not in the search index yet");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::{Kept, Metadata};
    use crate::store::sessions::NewEntry;

    /// A daemon's stores over `root`, with the index told of every change.
    fn stores(root: &std::path::Path) -> (Arc<SessionStore>, Arc<Memories>, Arc<Recall>) {
        std::fs::create_dir_all(root.join("data/state")).expect("the state folder");
        let data_dir = crate::base::datadir::DataDir::new(root);
        let sessions = Arc::new(SessionStore::open(root));
        let memories = Arc::new(Memories::new(data_dir.clone()));
        let recall = Arc::new(Recall::new(data_dir, sessions.clone(), memories.clone()));
        let sink: Arc<dyn EntrySink> = recall.clone();
        sessions.told(Arc::downgrade(&sink));
        let index: Arc<dyn MemoryIndex> = recall.clone();
        memories.indexed_by(Arc::downgrade(&index));
        (sessions, memories, recall)
    }

    fn said(sessions: &SessionStore, session: &str, role: &'static str, text: &str) {
        let entry = NewEntry::Message { role, content: text.into(), channel: None, sender: None, attachments: vec![] };
        sessions.append(session, None, entry).expect("append");
    }

    fn told(session: &str, message: &str) -> Metadata {
        Metadata { session_id: Some(session.into()), message_id: Some(message.into()), ..Metadata::default() }
    }

    /// What a search finds for `context`: memory keys, then message texts.
    fn found(recall: &Recall, context: &Context, text: &str) -> (Vec<String>, Vec<String>) {
        let memories = recall.search_memories(context, text, &Filter::default(), 5).expect("memories");
        let messages = recall.search_messages(context, text, &Filter::default(), 5).expect("messages");
        (
            memories.into_iter().map(|found| found.doc.key).collect(),
            messages.into_iter().map(|found| found.doc.body).collect(),
        )
    }

    #[test]
    fn a_context_finds_its_own_memories_and_messages_and_never_anothers() {
        let dir = tempfile::tempdir().expect("dir");
        let (sessions, memories, recall) = stores(dir.path());
        let (alice, bob) = (Context::user("alice"), Context::user("bob"));
        let session = sessions.create(&alice, "alice", None).expect("session").id;
        said(&sessions, &session, "user", "We fly to Lisbon on the fourth of May.");
        said(&sessions, &session, "assistant", "Noted: Lisbon, the fourth of May.");
        memories.write(&alice, "trip", "Alice flies to Lisbon in May.", told(&session, "e1")).expect("write");
        let bobs = sessions.create(&bob, "bob", None).expect("session").id;
        said(&sessions, &bobs, "user", "My Lisbon cousin visits in June.");
        let (keys, texts) = found(&recall, &alice, "When do we go to Lisbon?");
        assert_eq!(keys, ["trip"]);
        assert_eq!(texts.len(), 2, "{texts:?}");
        assert!(texts.iter().all(|text| !text.contains("cousin")), "bob's words: {texts:?}");
        let (keys, texts) = found(&recall, &bob, "Lisbon");
        assert!(keys.is_empty());
        assert_eq!(texts, ["My Lisbon cousin visits in June."]);
        // Forgetting takes it out of the index too.
        assert!(memories.delete(&alice, "trip").expect("forget"));
        assert!(found(&recall, &alice, "Lisbon").0.is_empty());
    }

    #[test]
    fn the_same_fact_told_three_ways_is_one_entry_with_three_sources() {
        let dir = tempfile::tempdir().expect("dir");
        let (_sessions, memories, recall) = stores(dir.path());
        let alice = Context::user("alice");
        let first = memories.write(&alice, "coffee", "Alice takes her coffee black.", told("s1", "e1")).expect("1");
        assert_eq!(first, Kept::New);
        let second = memories.write(&alice, "coffee-order", "alice takes coffee black", told("s2", "e7")).expect("2");
        assert_eq!(second, Kept::SameAs("coffee".into()));
        let third = Metadata { importance: Some(0.9), tags: vec!["food".into()], ..told("s3", "e2") };
        let third = memories.write(&alice, "drinks", "Alice's coffee: she takes it black!", third).expect("3");
        assert_eq!(third, Kept::SameAs("coffee".into()));
        let entries = memories.store(&alice).list(None).expect("list");
        assert_eq!(entries.len(), 1, "{entries:?}");
        let entry = &entries[0];
        assert_eq!(entry.content, "Alice takes her coffee black.", "the first words stay");
        assert_eq!(entry.metadata.sources, ["session:s1/message:e1", "session:s2/message:e7", "session:s3/message:e2"]);
        assert_eq!((entry.metadata.importance, entry.metadata.tags.as_slice()), (Some(0.9), &["food".to_string()][..]));
        // Another fact is another entry.
        let other = memories.write(&alice, "car", "Alice's car is black.", told("s4", "e1")).expect("car");
        assert_eq!(other, Kept::New);
        assert_eq!(found(&recall, &alice, "black").0.len(), 2);
    }

    #[test]
    fn a_missing_damaged_or_older_index_is_rebuilt_from_the_files_and_finds_the_same() {
        let dir = tempfile::tempdir().expect("dir");
        let alice = Context::user("alice");
        let before = {
            let (sessions, memories, recall) = stores(dir.path());
            for n in 0..30 {
                let session = sessions.create(&alice, "alice", None).expect("session").id;
                said(&sessions, &session, "user", &format!("Note {n}: the blue folder holds receipt number {n}."));
                memories
                    .write(&alice, &format!("fact-{n}"), &format!("Fact {n} is about topic{n}."), told(&session, "e"))
                    .expect("write");
            }
            let before = found(&recall, &alice, "topic7 7");
            assert!(!before.0.is_empty() && !before.1.is_empty(), "{before:?}");
            before
        };
        let path = dir.path().join("users/alice").join(FOLDER).join(FILE);
        let wal = PathBuf::from(format!("{}-wal", path.display()));
        let again = |what: &str| {
            let (_sessions, _memories, recall) = stores(dir.path());
            assert_eq!(found(&recall, &alice, "topic7 7"), before, "after the index was {what}");
            assert_eq!(recall.size(&alice).expect("size").0, 30);
        };
        let forget_wal = || {
            if wal.exists() {
                std::fs::remove_file(&wal).expect("the journal");
            }
        };
        std::fs::remove_file(&path).expect("delete");
        forget_wal();
        again("deleted");
        std::fs::write(&path, vec![0x5a; 8192]).expect("garble");
        forget_wal();
        again("garbled");
        {
            let db = rusqlite::Connection::open(&path).expect("open");
            db.execute("UPDATE meta SET value = '0' WHERE key = 'schema'", []).expect("downgrade");
        }
        again("of an older schema");
        // What the files hold and the index missed (a crash between the two) is put in.
        {
            let db = rusqlite::Connection::open(&path).expect("open");
            db.execute("DELETE FROM memories WHERE key = 'fact-7'", []).expect("lose one");
            db.execute("DELETE FROM logs", []).expect("lose the logs' marks");
            db.execute("DELETE FROM messages WHERE body LIKE 'Note 7:%'", []).expect("lose one");
        }
        again("missing what a crash lost");
        let kept_aside = std::fs::read_dir(path.parent().expect("folder"))
            .expect("list")
            .filter(|entry| entry.as_ref().is_ok_and(|entry| entry.file_name().to_string_lossy().contains(".old-")))
            .count();
        assert!(kept_aside >= 1, "the unusable index is kept aside");
    }
}
