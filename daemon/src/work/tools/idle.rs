//! When a session's tool container goes: idle past `tools.warm_idle_timeout` (or
//! [`GUESS_KEPT`] when it was started ahead of a call that did not come), or removed to free a
//! slot when it is the one unused the longest (`work/slots.rs` asks every pool).

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use super::{Runner, Runners};

/// How long a tool container started ahead of a call that did not come is kept: a turn that
/// needed it would have called by then.
pub(super) const GUESS_KEPT: Duration = Duration::from_secs(60);

impl Runners {
    /// Since when the container [`Runners::evict_one`] would remove has been unused.
    pub fn longest_idle(&self) -> Option<Instant> {
        let slots = self.slots();
        // A session in the middle of a call keeps its container.
        slots
            .iter()
            .filter_map(|slot| slot.try_lock().ok().and_then(|runner| runner.as_ref().map(|r| r.last_used)))
            .min()
    }

    fn slots(&self) -> Vec<Arc<tokio::sync::Mutex<Option<Runner>>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect()
    }

    /// Removes the tool container unused the longest (none in a call), to free its slot for
    /// new work; false when there is none.
    pub async fn evict_one(&self) -> bool {
        let mut oldest: Option<(Instant, tokio::sync::OwnedMutexGuard<Option<Runner>>)> = None;
        for slot in self.slots() {
            // A session in the middle of a call keeps its container.
            let Ok(runner) = slot.try_lock_owned() else { continue };
            let Some(used) = runner.as_ref().map(|r| r.last_used) else { continue };
            if oldest.as_ref().is_none_or(|(best, _)| used < *best) {
                oldest = Some((used, runner));
            }
        }
        let Some((_, mut runner)) = oldest else { return false };
        let Some(current) = runner.take() else { return false };
        tracing::info!(session = %current.session, container = %current.container, "removing an idle tool container to free a slot");
        self.remove(&current.session, &current.container, "an idle tool container").await;
        true
    }

    /// Removes tool containers idle for longer than `tools.warm_idle_timeout`.
    pub async fn reap_idle(&self) {
        let slots: Vec<(String, Arc<tokio::sync::Mutex<Option<Runner>>>)> = self
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(session, slot)| (session.clone(), slot.clone()))
            .collect();
        for (session, slot) in slots {
            // A session in the middle of a call is not idle.
            let Ok(mut runner) = slot.try_lock() else { continue };
            let kept = |runner: &Runner| match runner.idle {
                Some(idle) => idle,
                None if runner.called => self.idle,
                None => self.idle.min(GUESS_KEPT),
            };
            if let Some(current) = runner.as_ref().filter(|r| r.last_used.elapsed() > kept(r)) {
                tracing::info!(session, container = %current.container, "removing an idle tool container");
                self.remove(&current.session, &current.container, "an idle tool container").await;
                *runner = None;
            }
        }
    }

    /// Checks for idle runners every few seconds until `cancel`.
    pub async fn supervise(self: Arc<Self>, cancel: tokio_util::sync::CancellationToken) {
        let every = (self.idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(30));
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(every) => self.reap_idle().await,
            }
        }
    }
}
