//! Which conversation a mail belongs to, kept in the gateway's state folder across restarts:
//! every Message-ID of a thread (the asking mails and the answers sent) names the session the
//! thread is and whose it is, so a reply to any of them from the same person goes on in that
//! session; another person's mail naming them (a Message-ID is no secret) starts its own, and
//! never changes whose the ids are. Mails taken but not yet answered are kept too: a gateway
//! stopped mid-answer tells their senders when it starts again, rather than leaving them
//! waiting.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The most Message-IDs kept (the oldest threads are forgotten first: a reply to one starts a
/// new conversation).
const MAX_IDS: usize = 20_000;

/// A mail taken whose answer has not gone out yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The raw mail, to answer it after a restart.
    pub raw: String,
    pub uid: u32,
    /// Whether its sender was authenticated (an answer quotes only those).
    #[serde(default)]
    pub verified: bool,
}

/// One Message-ID of a thread: the session, when it was seen (seconds since the epoch), and
/// whose thread it is (the channel identity; none for one kept before threads had owners,
/// which no one's mail goes on in).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum Kept {
    Owned { session: String, at: u64, owner: String },
    Unowned(String, u64),
}

impl Kept {
    fn at(&self) -> u64 {
        match self {
            Kept::Owned { at, .. } | Kept::Unowned(_, at) => *at,
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    /// Message-ID → its thread.
    #[serde(default)]
    threads: BTreeMap<String, Kept>,
    /// Message-ID → the mail taken.
    #[serde(default)]
    pending: BTreeMap<String, Pending>,
}

/// The threads file.
#[derive(Debug)]
pub struct Threads {
    path: PathBuf,
    file: File,
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs()
}

impl Threads {
    /// `threads.json` in `dir` (empty when there is none yet; refused when it is not ours).
    pub fn open(dir: &Path) -> Result<Threads, String> {
        std::fs::create_dir_all(dir).map_err(|error| format!("cannot make {}: {error}", dir.display()))?;
        let path = dir.join("threads.json");
        let file = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| {
                format!(
                    "{} is not the email gateway's threads file ({error}); move it away to start afresh",
                    path.display()
                )
            })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => File::default(),
            Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
        };
        Ok(Threads { path, file })
    }

    /// The session of `owner`'s thread any of `ids` is in.
    pub fn session_of(&self, ids: &[String], owner: &str) -> Option<String> {
        ids.iter().find_map(|id| match self.file.threads.get(id) {
            Some(Kept::Owned { session, owner: theirs, .. }) if theirs == owner => Some(session.clone()),
            _ => None,
        })
    }

    /// Puts `ids` in `owner`'s thread of `session`; an id that is someone else's stays theirs.
    pub fn remember(&mut self, ids: &[String], session: &str, owner: &str) -> Result<(), String> {
        let at = now();
        for id in ids {
            let theirs =
                matches!(self.file.threads.get(id), Some(Kept::Owned { owner: theirs, .. }) if theirs != owner);
            if !theirs {
                let kept = Kept::Owned { session: session.to_string(), at, owner: owner.to_string() };
                self.file.threads.insert(id.clone(), kept);
            }
        }
        if self.file.threads.len() > MAX_IDS {
            let mut ages: Vec<(u64, String)> =
                self.file.threads.iter().map(|(id, kept)| (kept.at(), id.clone())).collect();
            ages.sort();
            for (_, id) in ages.into_iter().take(self.file.threads.len() - MAX_IDS) {
                self.file.threads.remove(&id);
            }
        }
        self.save()
    }

    /// Whether the mail `id` was taken and its answer has not gone out.
    pub fn is_pending(&self, id: &str) -> bool {
        self.file.pending.contains_key(id)
    }

    /// Whether `owner`'s mail `id` was taken before (the same mail delivered again: a server's
    /// retry, a copy back into the inbox). Another's mail carrying the id is not: a Message-ID
    /// is no secret, and theirs starts its own thread.
    pub fn taken_before(&self, id: &str, owner: &str) -> bool {
        matches!(self.file.threads.get(id), Some(Kept::Owned { owner: theirs, .. }) if theirs == owner)
    }

    pub fn take(&mut self, id: &str, pending: Pending) -> Result<(), String> {
        self.file.pending.insert(id.to_string(), pending);
        self.save()
    }

    pub fn done(&mut self, id: &str) -> Result<(), String> {
        if self.file.pending.remove(id).is_some() {
            self.save()?;
        }
        Ok(())
    }

    /// The mails taken whose answers had not gone out when the gateway last stopped.
    pub fn unanswered(&self) -> Vec<(String, Pending)> {
        self.file.pending.iter().map(|(id, pending)| (id.clone(), pending.clone())).collect()
    }

    fn save(&self) -> Result<(), String> {
        let bytes =
            serde_json::to_vec(&self.file).map_err(|error| format!("cannot write the threads file: {error}"))?;
        baaaht_gateway_kit::state::write_atomic(&self.path, &bytes)
            .map_err(|error| format!("cannot write {}: {error}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_kept_before_threads_had_owners_is_no_ones() {
        let dir = std::env::temp_dir().join(format!("baaaht-email-threads-old-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("threads.json"), r#"{"threads":{"q1@x":["s-1",1700000000]},"pending":{}}"#)
            .expect("old");
        let threads = Threads::open(&dir).expect("an old file reads");
        assert_eq!(threads.session_of(&["q1@x".into()], "email:alice@family.test"), None);
        // silent-ok: cleaning up.
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_thread_is_found_by_any_of_its_ids_after_a_restart_and_pending_mail_is_kept() {
        let dir = std::env::temp_dir().join(format!("baaaht-email-threads-{}", std::process::id()));
        // silent-ok: a folder left by an earlier run, or none.
        let _ = std::fs::remove_dir_all(&dir);
        let mut threads = Threads::open(&dir).expect("open");
        let alice = "email:alice@family.test";
        threads.remember(&["q1@x".into(), "a1@y".into()], "s-1", alice).expect("remember");
        threads.take("q2@x", Pending { raw: "From: a@x\r\n\r\nhi".into(), uid: 4, verified: true }).expect("take");
        // Bob's mail naming Alice's thread: his own conversation; Alice's ids stay hers.
        threads.remember(&["b1@x".into(), "a1@y".into()], "s-bob", "email:bob@family.test").expect("remember");
        let threads = Threads::open(&dir).expect("reopen");
        assert_eq!(threads.session_of(&["zz@x".into(), "a1@y".into()], alice).as_deref(), Some("s-1"));
        assert_eq!(threads.session_of(&["a1@y".into()], "email:bob@family.test"), None);
        assert_eq!(threads.session_of(&["zz@x".into()], alice), None);
        assert!(threads.is_pending("q2@x"));
        assert_eq!(threads.unanswered().len(), 1);
        // Alice's mail delivered again was taken before; Bob's carrying its id was not.
        assert!(threads.taken_before("q1@x", alice));
        assert!(!threads.taken_before("q1@x", "email:bob@family.test"));
        assert!(!threads.taken_before("zz@x", alice));
        std::fs::write(dir.join("threads.json"), "{not json").expect("spoil");
        assert!(Threads::open(&dir).expect_err("spoiled").contains("move it away"));
        // silent-ok: cleaning up.
        let _ = std::fs::remove_dir_all(&dir);
    }
}
