//! Each person's minutes of voice notes heard today (`voice.minutes_per_day`), kept in
//! `data/state/voice-minutes.json` (written whole, atomically) so a restart forgets nothing.
//! A day is the system time zone's (`system.timezone`), as budgets count days.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::base::auth::Context;

#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
struct Ledger {
    /// The day the seconds are of (`YYYY-MM-DD`).
    day: String,
    /// Seconds heard that day, by context (`user:u-…`).
    seconds: BTreeMap<String, f32>,
}

/// The minutes ledger.
#[derive(Debug)]
pub struct Minutes {
    path: PathBuf,
    per_day: u32,
    tz: jiff::tz::TimeZone,
    ledger: Mutex<Ledger>,
}

impl Minutes {
    /// The ledger in `state_dir`; an unreadable one is started anew (and said in the log).
    pub fn open(state_dir: &std::path::Path, per_day: u32, tz_name: &str) -> Minutes {
        let path = state_dir.join("voice-minutes.json");
        let ledger = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|error| {
                tracing::warn!(path = %path.display(), %error, "the voice minutes cannot be read; counting today anew");
                Ledger::default()
            }),
            Err(_missing) => Ledger::default(),
        };
        let tz = jiff::tz::TimeZone::get(tz_name).unwrap_or(jiff::tz::TimeZone::UTC);
        Minutes { path, per_day, tz, ledger: Mutex::new(ledger) }
    }

    fn today(&self) -> String {
        jiff::Timestamp::now().to_zoned(self.tz.clone()).date().to_string()
    }

    /// Seconds `person` may still have heard today (unbounded when there is no limit).
    pub fn left(&self, person: &Context) -> f32 {
        if self.per_day == 0 {
            return f32::INFINITY;
        }
        let ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        let used = if ledger.day == self.today() {
            ledger.seconds.get(&person.to_string()).copied().unwrap_or(0.0)
        } else {
            0.0
        };
        (self.per_day as f32 * 60.0 - used).max(0.0)
    }

    /// Counts `seconds` heard for `person` today.
    pub fn spend(&self, person: &Context, seconds: f32) {
        let today = self.today();
        let mut ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        if ledger.day != today {
            *ledger = Ledger { day: today, seconds: BTreeMap::new() };
        }
        *ledger.seconds.entry(person.to_string()).or_default() += seconds.max(0.0);
        let bytes = serde_json::to_vec_pretty(&*ledger).unwrap_or_default();
        if let Err(error) = crate::base::state::write_atomic(&self.path, &bytes, 0o600) {
            tracing::warn!(%error, "cannot save the voice minutes; they count in memory until the next restart");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_are_counted_per_person_and_survive_a_restart() {
        let dir = tempfile::tempdir().expect("temp");
        let (alice, bob) = (Context::user("u-alice"), Context::user("u-bob"));
        let minutes = Minutes::open(dir.path(), 2, "UTC");
        assert_eq!(minutes.left(&alice), 120.0);
        minutes.spend(&alice, 100.0);
        assert_eq!(minutes.left(&alice), 20.0);
        assert_eq!(minutes.left(&bob), 120.0);
        let again = Minutes::open(dir.path(), 2, "UTC");
        assert_eq!(again.left(&alice), 20.0);
        again.spend(&alice, 50.0);
        assert_eq!(again.left(&alice), 0.0);
        assert_eq!(Minutes::open(dir.path(), 0, "UTC").left(&alice), f32::INFINITY);
    }

    #[test]
    fn another_days_seconds_are_not_counted() {
        let dir = tempfile::tempdir().expect("temp");
        let old = Ledger { day: "2001-01-01".into(), seconds: [("user:u-alice".to_string(), 9999.0)].into() };
        std::fs::write(dir.path().join("voice-minutes.json"), serde_json::to_vec(&old).expect("json")).expect("write");
        assert_eq!(Minutes::open(dir.path(), 1, "UTC").left(&Context::user("u-alice")), 60.0);
    }
}
