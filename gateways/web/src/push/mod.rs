//! Notifications on a person's devices (Web Push, RFC 8030/8291/8292): the devices and what
//! each person chose ([`devices`]), what an event tells them ([`notify`]), the messages
//! ([`message`]) and their sending ([`send`]); the page's API for it ([`api`]).
//!
//! The gateway follows every person with a device, as that person: with the sign-in the
//! newest of their devices was allowed in (refreshed like a browser's), on a subscription that
//! notifies (`EventSubscription.notifies`): the daemon then asks them approvals while no page
//! of theirs is open, and still keeps a scheduled result in their inbox. An approval's answer
//! from a notification is the service worker's request as the signed-in person, as from the
//! page.

pub mod api;
pub mod devices;
pub mod message;
pub mod notify;
pub mod send;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use baaaht_gateway_kit::backoff::Backoff;
use baaaht_gateway_kit::said::{said, Said};
use baaaht_proto::v1;

use crate::app::{App, Place};
use devices::{Device, Devices};
use notify::{Moment, Notification};
use send::{Sender, Sent};

/// How often who is followed is checked against the devices (a change wakes it at once).
const RECHECK: std::time::Duration = std::time::Duration::from_secs(30);
/// Turns remembered per person as started by them on the web (their answers may be told).
const TURNS_KEPT: usize = 256;

/// The push side of the gateway.
pub struct Push {
    pub devices: Devices,
    pub sender: Sender,
    /// Wakes [`run`] when devices change.
    changed: tokio::sync::Notify,
    /// Each followed person's task, by channel identity.
    followers: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
    /// How the last pushes went (`[delivered, gone, failed]`), for the health and the tests.
    pub counts: Mutex<[u64; 3]>,
}

impl std::fmt::Debug for Push {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Push").field("devices", &self.devices).finish_non_exhaustive()
    }
}

impl Push {
    pub fn new(devices: Devices, sender: Sender) -> Push {
        Push {
            devices,
            sender,
            changed: tokio::sync::Notify::new(),
            followers: Mutex::default(),
            counts: Mutex::default(),
        }
    }

    /// Wakes [`run`]: a device was added or removed.
    pub fn changed(&self) {
        self.changed.notify_one();
    }

    /// The sign-in kept under `key` ended: the devices allowed in it are told no more.
    pub fn signed_out(&self, key: &str) {
        match self.devices.signed_out(key) {
            Ok(true) => self.changed(),
            Ok(false) => {}
            Err(error) => tracing::error!(%error, "cannot remove the devices of a sign-in that ended"),
        }
    }

    /// Sends `notification` to every device of `person`, each in a task of its own; a device
    /// its service says is gone is removed.
    pub fn tell(self: &Arc<Self>, person: &str, devices: Vec<Device>, notification: Notification) {
        for device in devices {
            let (push, notification, person) = (self.clone(), notification.clone(), person.to_string());
            tokio::spawn(async move {
                let sent = push.sender.send(&device, &notification).await;
                let mut counts = push.counts.lock().unwrap_or_else(PoisonError::into_inner);
                match sent {
                    Sent::Delivered => {
                        counts[0] += 1;
                        tracing::info!(device = %device.id, kind = ?notification.shown.kind, "a notification was pushed");
                    }
                    Sent::Gone => {
                        counts[1] += 1;
                        drop(counts);
                        tracing::info!(device = %device.id, "the push service says the device is gone; it is removed");
                        if let Err(error) = push.devices.gone(&device.endpoint) {
                            tracing::error!(%error, "cannot remove a device");
                        }
                        push.changed();
                    }
                    Sent::Failed(why) => {
                        counts[2] += 1;
                        tracing::warn!(device = %device.id, person, why, "a notification was not pushed");
                    }
                }
            });
        }
    }
}

/// Follows every person with a device for as long as the gateway runs: one task each, started
/// when their first device is added, ended when their last is removed.
pub async fn run(app: Arc<App>, push: Arc<Push>) {
    loop {
        let people: Vec<String> = push.devices.people().into_iter().map(|(person, _)| person).collect();
        {
            let mut followers = push.followers.lock().unwrap_or_else(PoisonError::into_inner);
            followers.retain(|person, task| {
                let keep = people.contains(person) && !task.is_finished();
                if !keep {
                    task.abort();
                }
                keep
            });
            for person in people {
                if let std::collections::hash_map::Entry::Vacant(entry) = followers.entry(person) {
                    let task = tokio::spawn(follow(app.clone(), push.clone(), entry.key().clone()));
                    entry.insert(task);
                }
            }
        }
        tokio::select! {
            () = push.changed.notified() => {}
            () = tokio::time::sleep(RECHECK) => {}
        }
    }
}

/// Follows `person`'s events as them, while they have a device whose sign-in lives.
async fn follow(app: Arc<App>, push: Arc<Push>, person: String) {
    let mut backoff = Backoff::default();
    let mut turns: VecDeque<String> = VecDeque::new();
    let mut asked: VecDeque<String> = VecDeque::new();
    loop {
        let devices = push.devices.of(&person).devices;
        if devices.is_empty() {
            return;
        }
        // The newest device's sign-in that still lives.
        let mut newest = None;
        for device in devices.iter().rev() {
            if let Some(session) = app.session_at(&device.session).await {
                newest = Some(session);
                break;
            }
        }
        let Some(session) = newest else {
            tracing::info!(person, "no sign-in of this person's devices lives: their notifications wait for the next");
            tokio::time::sleep(RECHECK).await;
            continue;
        };
        let me = match app.me(&session).await {
            Ok(me) => me,
            Err(status) => {
                tracing::warn!(person, message = %status.message(), "cannot follow a person for their notifications");
                tokio::time::sleep(backoff.next_wait()).await;
                continue;
            }
        };
        let context = match app.context(&session, &Place::default()).await {
            Ok(context) => context,
            Err(status) => {
                tracing::warn!(person, message = %status.message(), "cannot follow a person for their notifications");
                tokio::time::sleep(backoff.next_wait()).await;
                continue;
            }
        };
        let subscription = v1::EventSubscription {
            context: Some(context),
            session_id: String::new(),
            channel: v1::ChannelType::Web as i32,
            notifies: true,
        };
        let mut daemon = app.daemon.clone();
        let mut events = match daemon.sessions.subscribe_events(app.as_user(&session, subscription)).await {
            Ok(events) => events.into_inner(),
            Err(status) => {
                tracing::warn!(person, message = %status.message(), "cannot follow a person for their notifications");
                tokio::time::sleep(backoff.next_wait()).await;
                continue;
            }
        };
        tracing::info!(person, "following a person for their notifications");
        backoff.reset();
        loop {
            let event = match events.message().await {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(status) => {
                    tracing::info!(person, message = %status.message(), "a person's notifications stream ended");
                    break;
                }
            };
            app.hub.waiting.note(&me.identity, &event);
            let Some(said) = said(&event) else { continue };
            let theirs = match &said {
                Said::Entered(entered) => {
                    if entered.channel == v1::ChannelType::Web as i32 && me.wrote(&entered.sender_id) {
                        remember(&mut turns, event.turn_id.clone());
                    }
                    continue;
                }
                Said::Answered { .. } => forget(&mut turns, &event.turn_id),
                Said::Approval(request) => {
                    remember(&mut asked, request.id.clone());
                    false
                }
                // Only an approval its devices were told of is closed on them.
                Said::Settled(settled) if !forget(&mut asked, &settled.id) => continue,
                Said::Settled(_) | Said::Notice(_) | Said::Sent(_) => false,
                // An answer's words, its tools and phases: nothing any device is told of.
                _ => continue,
            };
            let person_now = push.devices.of(&person);
            if person_now.devices.is_empty() {
                return;
            }
            let settings = &person_now.settings;
            let moment = Moment {
                quiet: settings.quiet.as_ref().is_some_and(|quiet| quiet.holds(jiff::Timestamp::now())),
                away: !app.hub.watched_by(&me.identity),
            };
            if let Some(told) = notify::notification(&said, &event.session_id, settings, moment, theirs) {
                push.tell(&person, signed_in(&app, &push, person_now.devices).await, told);
            }
        }
        tokio::time::sleep(backoff.next_wait()).await;
    }
}

/// Those of `devices` whose own sign-in lives (refreshed when due): a device is told only
/// while the sign-in that allowed it does, so a shared browser signed out, signed over or
/// expired shows nobody's notifications. A device whose sign-in is gone is removed.
pub async fn signed_in(app: &Arc<App>, push: &Push, devices: Vec<Device>) -> Vec<Device> {
    let mut live = Vec::with_capacity(devices.len());
    for device in devices {
        if app.session_at(&device.session).await.is_some() {
            live.push(device);
        } else if app.store.get_at(&device.session).is_none() {
            tracing::info!(device = %device.id, "a device whose sign-in has ended is removed");
            push.signed_out(&device.session);
        }
    }
    live
}

/// Remembers `id` among the latest [`TURNS_KEPT`].
fn remember(kept: &mut VecDeque<String>, id: String) {
    if kept.len() >= TURNS_KEPT {
        kept.pop_front();
    }
    kept.push_back(id);
}

/// Forgets `id`; whether it was remembered.
fn forget(kept: &mut VecDeque<String>, id: &str) -> bool {
    match kept.iter().position(|kept| kept == id) {
        Some(at) => {
            kept.remove(at);
            true
        }
        None => false,
    }
}
