//! `container.max_concurrent`'s slots: how many containers run at once, and the pressure a
//! start that waits for one puts on the pools (`work::slots` removes an idle container).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use super::ContainerError;
use crate::base::auth::Role;

/// `container.max_concurrent`: how many containers run at once (the LLM gateway aside). A
/// start past it waits up to `container.queue_timeout` for a slot, and says so on `pressure`,
/// so that the pools remove an idle container to make room.
#[derive(Debug)]
pub struct Slots {
    pub(super) semaphore: Arc<tokio::sync::Semaphore>,
    pub(super) max: u32,
    wait: Duration,
    /// Container name → the slot it holds.
    held: Mutex<std::collections::HashMap<String, tokio::sync::OwnedSemaphorePermit>>,
    /// Bumped each time a start has to wait.
    pub(super) pressure: watch::Sender<u64>,
    /// Bumped each time a slot is taken (the pools keep some free ahead of starts).
    pub(super) taken: watch::Sender<u64>,
}

impl Slots {
    pub fn new(max: u32, wait: Duration) -> Slots {
        Slots {
            semaphore: Arc::new(tokio::sync::Semaphore::new(max as usize)),
            max,
            wait,
            held: Mutex::default(),
            pressure: watch::channel(0).0,
            taken: watch::channel(0).0,
        }
    }

    /// Slots kept free ahead of starts that would wait: a sixteenth of the cap, at most 4;
    /// none under a cap below 16 (a test's, or a small host's: every slot goes to work).
    pub fn kept_free(&self) -> usize {
        (self.max as usize / 16).min(4)
    }

    /// Slots in use.
    pub fn in_use(&self) -> usize {
        (self.max as usize).saturating_sub(self.semaphore.available_permits())
    }

    /// A slot for a container of `role`; the LLM gateway needs none (everything waits on it),
    /// nor do the web and Slack gateways (the way in).
    pub(super) async fn take(&self, role: Role) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ContainerError> {
        if let Ok(permit) = self.try_take(role) {
            return Ok(permit);
        }
        tracing::info!(max = self.max, role = role.as_str(), "every container slot is busy; waiting for one");
        // Asked again every second while it waits: a slot freed for this start may go to one
        // that waited longer, and then another idle container must make room.
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            self.pressure.send_modify(|count| *count += 1);
            let next = (tokio::time::Instant::now() + Duration::from_secs(1)).min(deadline);
            match tokio::time::timeout_at(next, self.semaphore.clone().acquire_owned()).await {
                Ok(Ok(permit)) => {
                    self.taken.send_modify(|count| *count += 1);
                    return Ok(Some(permit));
                }
                Ok(Err(_closed)) => break,
                Err(_) if next >= deadline => break,
                Err(_) => {}
            }
        }
        Err(ContainerError::Busy { max: self.max, waited: self.wait })
    }

    /// A slot for a container of `role` if one is free now (a pooled start never waits ahead
    /// of work; the pools start one only while more than the slots kept free ahead are free,
    /// so that one never makes room for itself).
    pub(super) fn try_take(&self, role: Role) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ContainerError> {
        if matches!(role, Role::LlmGateway | Role::Gateway | Role::Speech) {
            return Ok(None);
        }
        match self.semaphore.clone().try_acquire_owned() {
            Ok(permit) => {
                self.taken.send_modify(|count| *count += 1);
                Ok(Some(permit))
            }
            Err(_) => Err(ContainerError::Busy { max: self.max, waited: Duration::ZERO }),
        }
    }

    pub(super) fn hold(&self, name: &str, permit: Option<tokio::sync::OwnedSemaphorePermit>) {
        if let Some(permit) = permit {
            self.held.lock().unwrap_or_else(PoisonError::into_inner).insert(name.to_string(), permit);
        }
    }

    pub(super) fn release(&self, name: &str) {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).remove(name);
    }
}

/// How a long-lived container's start takes its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// Waits for one (idle containers are removed to make room).
    Waits,
    /// A warm pool's: only a free one; the container is bound to nobody until claimed.
    Pooled,
    /// Only a free one (a start ahead of need).
    IfFree,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sixteenth_of_the_cap_is_kept_free_ahead_and_none_under_a_small_cap() {
        let kept = |cap| Slots::new(cap, Duration::from_secs(1)).kept_free();
        assert_eq!(kept(2), 0, "a test's or a tiny host's cap keeps every slot for work");
        assert_eq!(kept(15), 0);
        assert_eq!(kept(16), 1);
        assert_eq!(kept(43), 2, "this host's auto cap");
        assert_eq!(kept(256), 4);
    }
}
