//! What the daemon keeps for people: conversations (sessions and their logs), memory and the
//! search index over both, uploads and files sent, profiles, the event bus that carries what
//! happens to the channels, and the inbox kept while no channel is there. It imports sandbox/,
//! guard/ and base/.

pub mod events;
pub mod inbox;
pub mod memory;
pub mod profile;
pub mod recall;
pub mod sent;
pub mod sessions;
pub mod undo;
pub mod uploads;

use std::sync::Arc;

use crate::base::Base;
use crate::guard::Guard;

/// The store wing, opened.
#[derive(Debug)]
pub struct Store {
    pub events: Arc<events::EventBus>,
    pub sessions: Arc<sessions::SessionStore>,
    /// Every context's memory store.
    pub memory: Arc<memory::Memories>,
    /// Every context's search index over its memory and its sessions' messages.
    pub recall: Arc<recall::Recall>,
    /// What was kept for contexts while none of their channels was there.
    pub inbox: Arc<inbox::Inbox>,
    /// What every turn changed in its folders, and the undo of turns.
    pub undo: Arc<undo::Undo>,
}

impl Store {
    /// Opens the conversations, memory, the search index and the inbox, each redacting what it
    /// keeps; a conversation keeps the approvals and notices its people were shown, and the
    /// search index hears of every message and memory as it is written.
    pub fn open(base: &Base, guard: &Guard) -> Store {
        let (data_dir, redact) = (&base.data_dir, &guard.redact);
        let inbox = Arc::new(inbox::Inbox::new(data_dir.state_dir().join("inbox")).redacting(redact.clone()));
        let events = Arc::new(events::EventBus::redacting(redact.clone()));
        let sessions = Arc::new(
            sessions::SessionStore::open(data_dir.root()).redacting(redact.clone()).gated_by(base.disk.clone()),
        );
        let keeper: Arc<dyn events::Keeper> = sessions.clone();
        events.kept_by(Arc::downgrade(&keeper));
        let memory = Arc::new(
            memory::Memories::new(data_dir.clone())
                .redacting(redact.clone())
                .keeping(base.loaded.config.memory.max_entries),
        );
        let recall = Arc::new(recall::Recall::new(data_dir.clone(), sessions.clone(), memory.clone()));
        let recall_sink: Arc<dyn sessions::EntrySink> = recall.clone();
        sessions.told(Arc::downgrade(&recall_sink));
        let recall_index: Arc<dyn memory::MemoryIndex> = recall.clone();
        memory.indexed_by(Arc::downgrade(&recall_index));
        let undo = Arc::new(
            undo::Undo::new(data_dir.root(), base.loaded.config.sessions.undo.clone()).telling(events.clone()),
        );
        Store { events, sessions, memory, recall, inbox, undo }
    }
}
