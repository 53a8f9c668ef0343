//! What keeps one principal from exhausting what the others need (ARCHITECTURE.md's
//! invariant): [`Quota`], a count of things held at once (uploads in flight, event
//! subscriptions) under several keys each with its own maximum, released when the [`Held`]
//! guard drops; and [`Rate`], how many times a key may act within a window (sessions
//! created, web requests). The connection caps of the sockets are in `sockets.rs`.
//!
//! Neither ever blocks: a caller past a limit is refused at once with a sentence that says
//! which limit and when to try again.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::base::auth::Caller;

/// Why a caller is turned away at once: which limit, and when to try again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("{shown} {} {max} {what} open already; close one, or try again when one ends", have_or_has(.shown))]
    Full { shown: String, max: usize, what: &'static str },
    #[error("{SESSIONS_PER_MINUTE} new conversations a minute is the most anyone may start; {}", again_in(*.wait))]
    NewSessions { wait: Duration },
}

/// The verb for a key's words: "you have", "gateway web has".
fn have_or_has(shown: &str) -> &'static str {
    if shown == "you" {
        "have"
    } else {
        "has"
    }
}

/// One key of a [`Quota::take`]: what is counted (`gateway:web/user:u-1`) and how many it may
/// hold at once, with the words for it ("you", "gateway web").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub name: String,
    pub max: usize,
    pub shown: String,
}

impl Key {
    pub fn new(name: impl Into<String>, max: usize, shown: impl Into<String>) -> Key {
        Key { name: name.into(), max, shown: shown.into() }
    }
}

/// Things held at once, counted per key.
#[derive(Debug)]
pub struct Quota {
    /// As in "{shown} has {max} {what} open already".
    what: &'static str,
    counts: Mutex<HashMap<String, usize>>,
}

/// A place in a [`Quota`], given back when dropped.
#[derive(Debug)]
pub struct Held {
    quota: Arc<Quota>,
    keys: Vec<String>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut counts = self.quota.counts.lock().unwrap_or_else(PoisonError::into_inner);
        for key in &self.keys {
            if let Some(count) = counts.get_mut(key) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    counts.remove(key);
                }
            }
        }
    }
}

impl Quota {
    pub fn new(what: &'static str) -> Arc<Quota> {
        Arc::new(Quota { what, counts: Mutex::default() })
    }

    /// One place under every key, or none when a key holds its maximum already (the sentence
    /// names the first such key).
    pub fn take(self: &Arc<Self>, keys: &[Key]) -> Result<Held, LimitError> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(full) = keys.iter().find(|key| counts.get(&key.name).copied().unwrap_or(0) >= key.max) {
            return Err(LimitError::Full { shown: full.shown.clone(), max: full.max, what: self.what });
        }
        for key in keys {
            *counts.entry(key.name.clone()).or_default() += 1;
        }
        Ok(Held { quota: self.clone(), keys: keys.iter().map(|key| key.name.clone()).collect() })
    }

    /// How many places `key` holds.
    pub fn held(&self, key: &str) -> usize {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner).get(key).copied().unwrap_or(0)
    }
}

/// At most `limit` of something per `period`, counting what was turned away.
pub struct Allowance {
    limit: u32,
    period: Duration,
    since: Instant,
    used: u32,
    refused: u64,
}

impl Allowance {
    pub fn new(limit: u32, period: Duration) -> Allowance {
        Allowance { limit, period, since: Instant::now(), used: 0, refused: 0 }
    }

    /// Whether one more fits; when a new period begins, how many the last one turned away.
    pub fn take(&mut self) -> (bool, u64) {
        self.take_at(Instant::now())
    }

    fn take_at(&mut self, now: Instant) -> (bool, u64) {
        let mut turned_away = 0;
        if now.duration_since(self.since) >= self.period {
            turned_away = std::mem::take(&mut self.refused);
            self.since = now;
            self.used = 0;
        }
        if self.used < self.limit {
            self.used += 1;
            (true, turned_away)
        } else {
            self.refused += 1;
            (false, turned_away)
        }
    }
}

/// How often each key may act within a window.
#[derive(Debug)]
pub struct Rate {
    per_window: usize,
    window: Duration,
    recent: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl Rate {
    /// `per_window` times each `window`; 0: no limit.
    pub fn new(per_window: usize, window: Duration) -> Rate {
        Rate { per_window, window, recent: Mutex::default() }
    }

    /// Counts one act of `key`; when it has acted `per_window` times within the window, how
    /// long until it may again.
    pub fn take(&self, key: &str) -> Result<(), Duration> {
        self.take_at(key, Instant::now())
    }

    fn take_at(&self, key: &str, now: Instant) -> Result<(), Duration> {
        if self.per_window == 0 {
            return Ok(());
        }
        let window = self.window;
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.retain(|_, times| times.back().is_some_and(|last| now.duration_since(*last) < window));
        let times = recent.entry(key.to_string()).or_default();
        while times.front().is_some_and(|first| now.duration_since(*first) >= window) {
            times.pop_front();
        }
        if times.len() >= self.per_window {
            let first = times.front().copied().unwrap_or(now);
            return Err(window.saturating_sub(now.duration_since(first)));
        }
        times.push_back(now);
        Ok(())
    }
}

/// Raises the soft limit of open descriptors to the hard one (systemd's default soft limit,
/// 1024, is low for a daemon that holds a connection per container and gateway, and the hard
/// one is what the admin allows); the limit now in force.
pub fn raise_descriptor_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    match limit.maximum {
        Some(hard) if hard > soft => {
            match setrlimit(Resource::Nofile, rustix::process::Rlimit { current: Some(hard), maximum: Some(hard) }) {
                Ok(()) => {
                    tracing::info!(from = soft, to = hard, "raised the limit of open files to the hard limit");
                    hard
                }
                Err(error) => {
                    tracing::warn!(soft, hard, %error, "cannot raise the limit of open files; set LimitNOFILE in the unit");
                    soft
                }
            }
        }
        _ => soft,
    }
}

/// "try again in N s": at least one second.
pub fn again_in(wait: Duration) -> String {
    format!("try again in {} s", wait.as_secs().max(1))
}

/// Uploads one gateway user may send at once, and one gateway for all its users.
const UPLOADS_PER_USER: usize = 4;
const UPLOADS_PER_GATEWAY: usize = 32;
/// Event subscriptions one gateway user may hold, and one gateway for all its users.
const SUBSCRIPTIONS_PER_USER: usize = 16;
const SUBSCRIPTIONS_PER_GATEWAY: usize = 1024;
/// Sessions a caller that is not a host client may create a minute.
pub const SESSIONS_PER_MINUTE: usize = 10;

/// The daemon's limits on what callers hold and how often they act.
#[derive(Debug)]
pub struct Limits {
    pub uploads: Arc<Quota>,
    pub subscriptions: Arc<Quota>,
    pub new_sessions: Rate,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            uploads: Quota::new("uploads"),
            subscriptions: Quota::new("event subscriptions"),
            new_sessions: Rate::new(SESSIONS_PER_MINUTE, Duration::from_secs(60)),
        }
    }
}

impl Limits {
    /// The keys an upload of `caller`'s counts under: its user and its gateway (a host
    /// client's and a container's are not counted: the host is trusted, and a container's
    /// connections are capped).
    pub fn upload_keys(caller: &Caller) -> Vec<Key> {
        gateway_keys(caller, UPLOADS_PER_USER, UPLOADS_PER_GATEWAY)
    }

    pub fn subscription_keys(caller: &Caller) -> Vec<Key> {
        gateway_keys(caller, SUBSCRIPTIONS_PER_USER, SUBSCRIPTIONS_PER_GATEWAY)
    }

    /// Counts a session `caller` creates; refused past [`SESSIONS_PER_MINUTE`] for anyone but
    /// a host client.
    pub fn new_session(&self, caller: &Caller) -> Result<(), LimitError> {
        if matches!(caller, Caller::Host(_)) {
            return Ok(());
        }
        let key = crate::guard::audit::principal(caller);
        self.new_sessions.take(&key).map_err(|wait| LimitError::NewSessions { wait })
    }
}

fn gateway_keys(caller: &Caller, per_user: usize, per_gateway: usize) -> Vec<Key> {
    let Caller::Gateway(call) = caller else { return vec![] };
    let gateway = format!("gateway:{}", call.gateway);
    let mut keys = vec![Key::new(gateway.clone(), per_gateway, format!("gateway {}", call.gateway))];
    if let Some(user) = &call.user {
        keys.insert(0, Key::new(format!("{gateway}/user:{}", user.id), per_user, "you"));
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allowance_counts_what_it_turned_away() {
        let mut rate = Allowance::new(2, Duration::from_secs(10));
        let start = rate.since;
        let mut at = |seconds| rate.take_at(start + Duration::from_secs(seconds));
        assert_eq!([at(0), at(1), at(2), at(9)], [(true, 0), (true, 0), (false, 0), (false, 0)]);
        assert_eq!([at(10), at(11)], [(true, 2), (true, 0)]);
    }

    #[test]
    fn a_quota_holds_each_key_to_its_maximum_and_gives_back_on_drop() {
        let quota = Quota::new("uploads");
        let alice = [Key::new("gw/alice", 2, "you"), Key::new("gw", 3, "gateway gw")];
        let bob = [Key::new("gw/bob", 2, "you"), Key::new("gw", 3, "gateway gw")];
        let first = quota.take(&alice).expect("first");
        let _second = quota.take(&alice).expect("second");
        let refused = quota.take(&alice).expect_err("a third");
        assert_eq!(refused.to_string(), "you have 2 uploads open already; close one, or try again when one ends");
        let _bobs = quota.take(&bob).expect("bob");
        let refused = quota.take(&bob).expect_err("the gateway is full");
        assert!(refused.to_string().starts_with("gateway gw has 3 uploads open already"), "{refused}");
        assert_eq!(quota.held("gw/bob"), 1, "a refusal holds nothing");
        drop(first);
        assert_eq!(quota.held("gw"), 2);
        quota.take(&bob).expect("room again");
    }

    #[test]
    fn a_rate_counts_within_its_window_per_key() {
        let rate = Rate::new(2, Duration::from_secs(60));
        let start = Instant::now();
        rate.take_at("a", start).expect("1");
        rate.take_at("a", start + Duration::from_secs(10)).expect("2");
        let wait = rate.take_at("a", start + Duration::from_secs(20)).expect_err("3");
        assert_eq!(wait, Duration::from_secs(40));
        rate.take_at("b", start + Duration::from_secs(20)).expect("another key");
        rate.take_at("a", start + Duration::from_secs(61)).expect("the first left the window");
        assert!(Rate::new(0, Duration::from_secs(60)).take("a").is_ok(), "0 is no limit");
        assert_eq!(again_in(Duration::from_millis(200)), "try again in 1 s");
    }
}
