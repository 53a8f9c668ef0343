//! The events a context's channels receive (SubscribeEvents): one broadcast that every
//! subscriber filters by its context, so an event for context A never reaches B's channels.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use baaaht_proto::v1;
use tokio::sync::broadcast;

use crate::auth::Context;

/// Events queued per subscriber before a slow one starts missing them.
const BACKLOG: usize = 1024;

#[derive(Debug)]
pub struct EventBus {
    sender: broadcast::Sender<(Context, v1::OrchestratorEvent)>,
    /// Who follows each context now, by channel (`tui`, `web`, …): how many subscriptions.
    connected: Arc<Mutex<HashMap<(Context, String), usize>>>,
    /// The channel each context's user last wrote from.
    last_active: Mutex<HashMap<Context, String>>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus { sender: broadcast::channel(BACKLOG).0, connected: Arc::default(), last_active: Mutex::default() }
    }
}

/// A channel following a context; it stops counting as connected when dropped.
#[derive(Debug)]
pub struct Connected {
    key: (Context, String),
    connected: Arc<Mutex<HashMap<(Context, String), usize>>>,
}

impl Drop for Connected {
    fn drop(&mut self) {
        let mut connected = self.connected.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = connected.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                connected.remove(&self.key);
            }
        }
    }
}

impl EventBus {
    /// Sends `event` to `context`'s subscribers; returns how many there are.
    pub fn publish(&self, context: &Context, event: v1::OrchestratorEvent) -> usize {
        self.sender.send((context.clone(), event)).unwrap_or(0)
    }

    /// Counts `channel` as following `context` until the guard is dropped.
    pub fn connect(&self, context: &Context, channel: &str) -> Connected {
        let key = (context.clone(), channel.to_string());
        *self.connected.lock().unwrap_or_else(PoisonError::into_inner).entry(key.clone()).or_default() += 1;
        Connected { key, connected: self.connected.clone() }
    }

    /// Whether `channel` follows `context` now.
    pub fn is_connected(&self, context: &Context, channel: &str) -> bool {
        self.connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&(context.clone(), channel.to_string()))
    }

    /// The channels following `context` now.
    pub fn connected_channels(&self, context: &Context) -> Vec<String> {
        let connected = self.connected.lock().unwrap_or_else(PoisonError::into_inner);
        let mut channels: Vec<String> =
            connected.keys().filter(|(of, _)| of == context).map(|(_, channel)| channel.clone()).collect();
        channels.sort();
        channels
    }

    /// Notes that `context`'s user wrote from `channel`.
    pub fn note_activity(&self, context: &Context, channel: &str) {
        self.last_active.lock().unwrap_or_else(PoisonError::into_inner).insert(context.clone(), channel.to_string());
    }

    /// The channel `context`'s user last wrote from (since the daemon started).
    pub fn last_active(&self, context: &Context) -> Option<String> {
        self.last_active.lock().unwrap_or_else(PoisonError::into_inner).get(context).cloned()
    }

    /// Every event from now on; the subscriber filters by context.
    pub fn subscribe(&self) -> broadcast::Receiver<(Context, v1::OrchestratorEvent)> {
        self.sender.subscribe()
    }
}
