//! Token accounting (spec §7): every answer's usage, as the provider reported it or as the
//! gateway estimated it, added up per user context and per session in
//! `data/state/usage.json` (written atomically) and exposed as metrics.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::base::metrics::TokenCounts;
use crate::base::state::{self, StateError};

/// Totals of one user context or session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Totals {
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// Answers whose usage the provider did not report (counted from the text).
    pub estimated_requests: u64,
}

impl Totals {
    fn add(&mut self, tokens: TokenCounts, estimated: bool) {
        self.requests += 1;
        self.input_tokens = self.input_tokens.saturating_add(tokens.input);
        self.output_tokens = self.output_tokens.saturating_add(tokens.output);
        self.cache_read_tokens = self.cache_read_tokens.saturating_add(tokens.cache_read);
        self.cache_write_tokens = self.cache_write_tokens.saturating_add(tokens.cache_write);
        self.estimated_requests += u64::from(estimated);
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UsageFile {
    pub version: u32,
    /// `user:ID` or `group:ID` → totals.
    pub contexts: BTreeMap<String, Totals>,
    /// Session id → totals.
    pub sessions: BTreeMap<String, Totals>,
}

/// The usage ledger; one writer (the daemon).
#[derive(Debug)]
pub struct UsageBook {
    path: PathBuf,
    file: Mutex<UsageFile>,
}

impl UsageBook {
    /// Opens `data/state/usage.json`; a file that does not parse is kept aside, never lost.
    pub fn open(state_dir: &std::path::Path) -> UsageBook {
        let path = state_dir.join("usage.json");
        let file = state::read_json_or_set_aside(&path, || UsageFile { version: 1, ..UsageFile::default() });
        UsageBook { path, file: Mutex::new(file) }
    }

    /// Adds one answer and writes the ledger.
    pub fn record(&self, context: &str, session: &str, tokens: TokenCounts, estimated: bool) -> Result<(), StateError> {
        let snapshot = {
            let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
            file.contexts.entry(context.to_string()).or_default().add(tokens, estimated);
            file.sessions.entry(session.to_string()).or_default().add(tokens, estimated);
            file.clone()
        };
        state::write_json(&self.path, &snapshot)
    }

    pub fn snapshot(&self) -> UsageFile {
        self.file.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_and_survive_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let book = UsageBook::open(dir.path());
        let tokens = TokenCounts { input: 10, output: 5, cache_read: 2, cache_write: 0 };
        book.record("user:alice", "s1", tokens, false).expect("write");
        book.record("user:alice", "s2", tokens, true).expect("write");
        let reopened = UsageBook::open(dir.path()).snapshot();
        let alice = &reopened.contexts["user:alice"];
        assert_eq!((alice.requests, alice.input_tokens, alice.output_tokens, alice.estimated_requests), (2, 20, 10, 1));
        assert_eq!(reopened.sessions["s1"].input_tokens, 10);
    }

    #[test]
    fn a_corrupt_ledger_is_kept_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("usage.json"), "{not json").expect("write");
        let book = UsageBook::open(dir.path());
        assert!(book.snapshot().contexts.is_empty());
        let kept = std::fs::read_dir(dir.path())
            .expect("list")
            .flatten()
            .any(|entry| entry.file_name().to_string_lossy().starts_with("usage.json.corrupt-"));
        assert!(kept, "the unreadable ledger is kept");
    }
}
