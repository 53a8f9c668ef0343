//! The events a context's channels receive (SubscribeEvents): one broadcast that every
//! subscriber filters by its context, so an event for context A never reaches B's channels.

use baaaht_proto::v1;
use tokio::sync::broadcast;

use crate::auth::Context;

/// Events queued per subscriber before a slow one starts missing them.
const BACKLOG: usize = 1024;

#[derive(Debug)]
pub struct EventBus {
    sender: broadcast::Sender<(Context, v1::OrchestratorEvent)>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus { sender: broadcast::channel(BACKLOG).0 }
    }
}

impl EventBus {
    /// Sends `event` to `context`'s subscribers; returns how many there are.
    pub fn publish(&self, context: &Context, event: v1::OrchestratorEvent) -> usize {
        self.sender.send((context.clone(), event)).unwrap_or(0)
    }

    /// Every event from now on; the subscriber filters by context.
    pub fn subscribe(&self) -> broadcast::Receiver<(Context, v1::OrchestratorEvent)> {
        self.sender.subscribe()
    }
}
