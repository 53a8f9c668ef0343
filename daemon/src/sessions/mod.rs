//! Sessions: the index `data/state/sessions.json` (spec §14.4, this file) and each session's
//! tree-structured log `sessions/{id}/session.jsonl` ([`log`]).
//!
//! The daemon is the only writer of this file. Until the session store exists this module
//! reads the index for status; it never rewrites an index it could not parse.

pub mod log;

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::state::{self, StateError};

pub const INDEX_FILE: &str = "sessions.json";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    Created,
    Active,
    Idle,
    Archived,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    pub id: String,
    pub user_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// "user" or "group".
    pub context_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    pub last_activity: String,
    pub status: SessionStatus,
    #[serde(default)]
    pub archived_at: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionIndex {
    pub sessions: Vec<SessionRecord>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionCounts {
    pub active: u32,
    pub idle: u32,
    pub archived: u32,
}

/// Counts sessions by state; created sessions count as active.
pub fn counts(state_dir: &Path) -> Result<SessionCounts, StateError> {
    let index: SessionIndex = state::read_json(&state_dir.join(INDEX_FILE))?.unwrap_or_default();
    let mut counts = SessionCounts::default();
    for session in &index.sessions {
        match session.status {
            SessionStatus::Created | SessionStatus::Active => counts.active += 1,
            SessionStatus::Idle => counts.idle += 1,
            SessionStatus::Archived => counts.archived += 1,
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_status() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(counts(dir.path()).expect("empty"), SessionCounts::default());
        std::fs::write(
            dir.path().join(INDEX_FILE),
            r#"{"sessions": [
                {"id": "a", "userId": "billm", "contextType": "user", "lastActivity": "2026-02-06T14:00:00Z", "status": "active", "archivedAt": null},
                {"id": "b", "userId": "billm", "contextType": "user", "lastActivity": "2026-02-06T14:00:00Z", "status": "idle"},
                {"id": "c", "userId": "billm", "groupId": "g", "contextType": "group", "lastActivity": "2026-02-01T10:00:00Z", "status": "archived", "archivedAt": "2026-02-02T10:00:00Z"}
            ]}"#,
        )
        .expect("write");
        assert_eq!(counts(dir.path()).expect("counts"), SessionCounts { active: 1, idle: 1, archived: 1 });
    }
}
