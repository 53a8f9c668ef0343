//! Who may become a user (DESIGN.md §9.1): the first message of someone the daemon has never
//! met makes them a user only when their gateway admits them — its own allowlist, or for a
//! gateway that has none of its own (a Telegram bot: anyone on Telegram can write to it) its
//! `--allow` list — or an administrator did. Anyone else's first contact is refused with a
//! sentence, kept here as waiting (`data/state/admissions.json`, written atomically, at most
//! [`MOST_WAITING`], a week each), and the administrators are told once, in their inbox and on
//! their connected channels, with the command that admits them (`baaaht users admit`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::base::state::{self, StateError};

const FILE: &str = "admissions.json";
/// The most people waiting at once (the oldest go first).
const MOST_WAITING: usize = 1_000;
/// How long a wait is kept.
const KEPT_SECONDS: u64 = 7 * 24 * 3600;

/// Someone waiting to be admitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// The name their channel gave.
    pub name: String,
    /// The gateway they wrote to.
    pub gateway: String,
    /// When they first asked (seconds since the epoch).
    pub since: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    version: u32,
    /// Identity → their wait.
    waiting: BTreeMap<String, Waiting>,
}

/// The people waiting to be admitted.
#[derive(Debug)]
pub struct Admissions {
    path: PathBuf,
    file: Mutex<File>,
    /// What a name passes before it is kept (none in tests).
    redact: Option<crate::guard::redact::Redact>,
}

impl Admissions {
    pub fn open(state_dir: &Path) -> Admissions {
        let path = state_dir.join(FILE);
        let mut file: File = state::read_json_or_set_aside(&path, File::default);
        let now = state::now_seconds();
        file.waiting.retain(|_, waiting| waiting.since + KEPT_SECONDS > now);
        Admissions { path, file: Mutex::new(file), redact: None }
    }

    /// These admissions, every name cleaned by `redact` before it is kept.
    pub fn redacting(self, redact: crate::guard::redact::Redact) -> Admissions {
        Admissions { redact: Some(redact), ..self }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, File> {
        self.file.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `identity` (named `name`, writing to `gateway`) asks to be let in: whether this is the
    /// first time (the administrators are then told).
    pub fn ask(&self, identity: &str, name: &str, gateway: &str) -> Result<bool, StateError> {
        let mut file = self.lock();
        if file.waiting.contains_key(identity) {
            return Ok(false);
        }
        if file.waiting.len() >= MOST_WAITING {
            let oldest =
                file.waiting.iter().min_by_key(|(_, waiting)| waiting.since).map(|(identity, _)| identity.clone());
            if let Some(oldest) = oldest {
                file.waiting.remove(&oldest);
            }
        }
        let name = crate::guard::redact::state_field(self.redact.as_ref(), crate::people::identities::clean_name(name));
        let waiting = Waiting { name, gateway: gateway.to_string(), since: state::now_seconds() };
        file.waiting.insert(identity.to_string(), waiting);
        state::write_json(&self.path, &*file)?;
        Ok(true)
    }

    /// Everyone waiting, oldest first.
    pub fn waiting(&self) -> Vec<(String, Waiting)> {
        let mut waiting: Vec<(String, Waiting)> =
            self.lock().waiting.iter().map(|(identity, waiting)| (identity.clone(), waiting.clone())).collect();
        waiting.sort_by_key(|(_, waiting)| waiting.since);
        waiting
    }

    /// `identity` was admitted (or refused): it waits no more.
    pub fn settled(&self, identity: &str) -> Result<(), StateError> {
        let mut file = self.lock();
        if file.waiting.remove(identity).is_some() {
            state::write_json(&self.path, &*file)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stranger_waits_once_across_a_restart_until_settled() {
        let dir = tempfile::tempdir().expect("tempdir");
        let admissions = Admissions::open(dir.path());
        assert!(admissions.ask("telegram:1:42", "Mallory\n", "tg").expect("asked"));
        assert!(!admissions.ask("telegram:1:42", "Mallory", "tg").expect("again"), "told once");
        let again = Admissions::open(dir.path());
        let waiting = again.waiting();
        assert_eq!(waiting.len(), 1);
        assert_eq!((waiting[0].0.as_str(), waiting[0].1.name.as_str()), ("telegram:1:42", "Mallory"));
        again.settled("telegram:1:42").expect("settled");
        assert!(Admissions::open(dir.path()).waiting().is_empty());
    }
}
