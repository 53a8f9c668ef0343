//! Browser sessions, kept on the server: a signed-in session's cookie is a random id, and what
//! it stands for — who signed in, their ID token for the daemon, when it ends — lives here, in
//! one JSON file written atomically (temp file, fsync, rename), so a restart of the gateway
//! signs nobody out. Only a SHA-256 of each id is kept: the file alone lets nobody in.
//!
//! A sign-in in progress (state, nonce, PKCE verifier) is kept in memory only, for ten
//! minutes: a restart in the middle of one just asks to sign in again.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::Digest as _;

/// How long a sign-in may take from the redirect to the provider to its answer.
pub const PENDING_FOR: Duration = Duration::from_secs(600);
/// The most sign-ins in progress kept (the oldest go first): anyone may start one.
const MAX_PENDING: usize = 10_000;

/// Who is signed in with a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedIn {
    /// `sub` at the issuer.
    pub subject: String,
    pub name: String,
    pub email: String,
    /// The ID token, which the daemon verifies itself on every call.
    pub id_token: String,
    /// Seconds since the epoch when the ID token expires: the session ends then, unless a
    /// refresh brings a new one.
    pub expires: u64,
    /// The token that protects this session's state-changing requests.
    pub csrf: String,
    /// What gets a fresh ID token from the provider (empty: it gave none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refresh_token: String,
    /// The access token of a refresh that brought no new ID token (the provider may do so):
    /// sent to the daemon beside the expired ID token, for it to confirm at the provider.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub access_token: String,
}

/// A sign-in in progress.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The SHA-256 of the sign-in cookie of the browser that started it: the answer counts
    /// only in that browser (no one signs a victim into their own account).
    binding: String,
    pub nonce: String,
    pub pkce_verifier: String,
    /// Where to go once signed in (a path of this site).
    pub next: String,
    started: std::time::Instant,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    version: u32,
    /// By the SHA-256 of the session id.
    sessions: HashMap<String, SignedIn>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{} is not a session file ({source}); move it away and sign in again", path.display())]
    Corrupt { path: PathBuf, source: serde_json::Error },
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot make a random id: {0}")]
    Random(#[from] getrandom::Error),
}

/// The sessions.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    file: Mutex<File>,
    pending: Mutex<HashMap<String, Pending>>,
}

/// A random id, URL-safe.
pub fn random_id() -> Result<String, getrandom::Error> {
    use base64::Engine as _;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// What a session is kept under: the SHA-256 of its id (the cookie's value), so the file
/// alone lets nobody in. A device that notifies is tied to the session that allowed it by it.
pub fn key(id: &str) -> String {
    hashed(id)
}

fn hashed(id: &str) -> String {
    sha2::Sha256::digest(id.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect()
}

pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|since| since.as_secs()).unwrap_or_default()
}

impl Store {
    /// The sessions in `dir/sessions.json` (made when the first one is).
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        let path = dir.join("sessions.json");
        let file = match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|source| StoreError::Corrupt { path: path.clone(), source })?
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => File { version: 1, ..File::default() },
            Err(source) => return Err(StoreError::Read { path, source }),
        };
        Ok(Store { path, file: Mutex::new(file), pending: Mutex::default() })
    }

    /// Keeps a sign-in started with `state` until its answer comes back.
    pub fn begin_with(
        &self,
        state: &str,
        binding: &str,
        nonce: String,
        pkce_verifier: String,
        next: String,
    ) -> Result<(), StoreError> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.retain(|_, started| started.started.elapsed() < PENDING_FOR);
        while pending.len() >= MAX_PENDING {
            let oldest = pending.iter().min_by_key(|(_, found)| found.started).map(|(state, _)| state.clone());
            match oldest {
                Some(state) => pending.remove(&state),
                None => break,
            };
        }
        let binding = hashed(binding);
        pending.insert(
            state.to_string(),
            Pending { binding, nonce, pkce_verifier, next, started: std::time::Instant::now() },
        );
        Ok(())
    }

    /// Takes the sign-in `state` stands for, once, if the browser answering is the one that
    /// started it (its sign-in cookie is `binding`): a replayed, unknown or foreign state gets none.
    pub fn take_pending(&self, state: &str, binding: Option<&str>) -> Option<Pending> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let found = pending.remove(state)?;
        let same_browser = binding.is_some_and(|binding| hashed(binding) == found.binding);
        (same_browser && found.started.elapsed() < PENDING_FOR).then_some(found)
    }

    /// Keeps a signed-in session; its id (the cookie's value).
    pub fn sign_in(&self, signed_in: SignedIn) -> Result<String, StoreError> {
        let id = random_id()?;
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        let now = now();
        // An expired session is kept a day, so signing out still ends it at the provider; one
        // the provider may refresh, a month (its refresh token decides how long it lives).
        file.sessions.retain(|_, session| {
            let kept = if session.refresh_token.is_empty() { 86_400 } else { 30 * 86_400 };
            session.expires + kept > now
        });
        file.sessions.insert(hashed(&id), signed_in);
        self.save(&file)?;
        Ok(id)
    }

    /// The live session `id` stands for.
    pub fn get(&self, id: &str) -> Option<SignedIn> {
        self.get_even_expired(id).filter(|session| session.expires > now())
    }

    /// The session `id` stands for, live or expired (to sign it out at the provider too).
    pub fn get_even_expired(&self, id: &str) -> Option<SignedIn> {
        self.get_at(&key(id))
    }

    /// The session kept under `key` ([`key`] of its id), live or expired.
    pub fn get_at(&self, key: &str) -> Option<SignedIn> {
        let file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        file.sessions.get(key).cloned()
    }

    /// Session `key` with the fresh ID token of `refreshed` (and the provider's next refresh
    /// token, when it rotates them); what it is now.
    pub fn refreshed(&self, key: &str, refreshed: crate::oidc::Identity) -> Result<Option<SignedIn>, StoreError> {
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(session) = file.sessions.get_mut(key) else { return Ok(None) };
        // A refresh without an ID token keeps the one the session has, and its access token
        // stands in for it until it expires.
        if refreshed.id_token.is_empty() {
            session.access_token = refreshed.access_token;
        } else {
            session.id_token = refreshed.id_token;
            session.access_token.clear();
        }
        session.expires = refreshed.expires;
        if let Some(next) = refreshed.refresh_token {
            session.refresh_token = next;
        }
        let session = session.clone();
        self.save(&file)?;
        Ok(Some(session))
    }

    /// Session `key` without its refresh token (the provider will not take it again): it ends
    /// with its ID token.
    pub fn spent(&self, key: &str) -> Result<(), StoreError> {
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(session) = file.sessions.get_mut(key) else { return Ok(()) };
        session.refresh_token.clear();
        self.save(&file)
    }

    /// Ends session `key`; what it was.
    pub fn sign_out(&self, key: &str) -> Result<Option<SignedIn>, StoreError> {
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        let removed = file.sessions.remove(key);
        if removed.is_some() {
            self.save(&file)?;
        }
        Ok(removed)
    }

    fn save(&self, file: &File) -> Result<(), StoreError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let write = |source| StoreError::Write { path: self.path.clone(), source };
        let temp = self.path.with_extension("json.tmp");
        let bytes = serde_json::to_vec_pretty(file).map_err(|error| write(std::io::Error::other(error)))?;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)
            .map_err(write)?;
        out.write_all(&bytes).map_err(write)?;
        out.sync_all().map_err(write)?;
        std::fs::rename(&temp, &self.path).map_err(write)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir).and_then(|dir| dir.sync_all()).map_err(write)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice(expires: u64) -> SignedIn {
        SignedIn {
            refresh_token: String::new(),
            access_token: String::new(),
            subject: "alice".into(),
            name: "Alice".into(),
            email: "alice@example.test".into(),
            id_token: "eyJ.x.y".into(),
            expires,
            csrf: "c".into(),
        }
    }

    #[test]
    fn sessions_survive_a_restart_and_the_file_holds_no_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let id = store.sign_in(alice(now() + 3600)).expect("sign in");
        let text = std::fs::read_to_string(dir.path().join("sessions.json")).expect("file");
        assert!(!text.contains(&id), "{text}");
        let reopened = Store::open(dir.path()).expect("reopen");
        assert_eq!(reopened.get(&id).map(|s| s.subject), Some("alice".into()));
        assert_eq!(reopened.sign_out(&key(&id)).expect("sign out").map(|s| s.subject), Some("alice".into()));
        assert!(reopened.get(&id).is_none());
        let expired = reopened.sign_in(alice(now() - 1)).expect("sign in");
        assert!(reopened.get(&expired).is_none(), "an expired session lets nobody in");
    }

    #[test]
    fn a_sign_in_state_works_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let state = random_id().expect("state");
        store.begin_with(&state, "browser", "n".into(), "v".into(), "/".into()).expect("begin");
        assert!(store.take_pending("forged", Some("browser")).is_none());
        assert_eq!(store.take_pending(&state, Some("browser")).map(|p| p.nonce), Some("n".into()));
        assert!(store.take_pending(&state, Some("browser")).is_none(), "a replayed state is refused");
        let other = random_id().expect("state");
        store.begin_with(&other, "attacker", "n".into(), "v".into(), "/".into()).expect("begin");
        assert!(store.take_pending(&other, Some("victim")).is_none(), "another browser's sign-in is refused");
        assert!(store.take_pending(&other, Some("attacker")).is_none(), "and is gone");
    }
}
