//! Groups (spec §17.3 "Group Lifecycle"): shared contexts with members, in
//! `data/state/groups.json`. Admins create, deactivate and reactivate them and manage members;
//! a Slack gateway creates its channel's group on the first mention and adds the people who
//! talk there. A deactivated group keeps its sessions, memory and skills, and refuses new
//! messages with the reason.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::base::state::{self, StateError};

pub const GROUPS_FILE: &str = "groups.json";

#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error("group id `{0}` is not usable: use 1-128 letters, digits, `.`, `_` or `-`")]
    BadId(String),
    #[error("a group {0} exists already")]
    Exists(String),
    #[error("no group {0}: `baaaht groups list` shows them")]
    NotFound(String),
    #[error("group {0} is deactivated{1}; its sessions stay readable, and an admin can reactivate it")]
    Deactivated(String, String),
    #[error(transparent)]
    State(#[from] StateError),
}

/// One group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupRecord {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Canonical user ids (or host user names).
    #[serde(default)]
    pub members: Vec<String>,
    pub active: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub deactivated_reason: String,
    /// Who made it: `admin`, or the gateway that made it for a channel.
    pub origin: String,
    pub created: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct GroupsFile {
    version: u32,
    #[serde(default)]
    groups: BTreeMap<String, GroupRecord>,
}

/// Every group.
#[derive(Debug)]
pub struct Groups {
    path: PathBuf,
    file: Mutex<GroupsFile>,
    /// What a name or a reason passes before it is kept (none in tests).
    redact: Option<crate::guard::redact::Redact>,
}

impl Groups {
    pub fn open(state_dir: &Path) -> Result<Groups, GroupError> {
        let path = state_dir.join(GROUPS_FILE);
        let file = state::read_json(&path)?.unwrap_or(GroupsFile { version: 1, groups: BTreeMap::new() });
        Ok(Groups { path, file: Mutex::new(file), redact: None })
    }

    /// These groups, every name and reason cleaned by `redact` before it is kept.
    pub fn redacting(self, redact: crate::guard::redact::Redact) -> Groups {
        Groups { redact: Some(redact), ..self }
    }

    /// `text` as groups.json may keep it: no control character, at most `most` characters,
    /// no secret.
    fn kept(&self, text: &str, most: usize) -> String {
        let text: String = text.chars().filter(|c| !c.is_control()).take(most).collect();
        crate::guard::redact::state_field(self.redact.as_ref(), text)
    }

    fn file(&self) -> std::sync::MutexGuard<'_, GroupsFile> {
        self.file.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn change<T>(&self, id: &str, change: impl FnOnce(&mut GroupRecord) -> T) -> Result<(T, GroupRecord), GroupError> {
        let mut file = self.file();
        let record = file.groups.get_mut(id).ok_or_else(|| GroupError::NotFound(id.to_string()))?;
        let out = change(record);
        let record = record.clone();
        state::write_json(&self.path, &*file)?;
        Ok((out, record))
    }

    pub fn get(&self, id: &str) -> Option<GroupRecord> {
        self.file().groups.get(id).cloned()
    }

    pub fn list(&self) -> Vec<(String, GroupRecord)> {
        self.file().groups.iter().map(|(id, record)| (id.clone(), record.clone())).collect()
    }

    /// The groups `user` belongs to.
    pub fn of_member(&self, user: &str) -> Vec<String> {
        self.file()
            .groups
            .iter()
            .filter(|(_, g)| g.members.iter().any(|m| m == user))
            .map(|(id, _)| id.clone())
            .collect()
    }

    pub fn create(&self, id: &str, name: &str, members: &[String], origin: &str) -> Result<GroupRecord, GroupError> {
        if !crate::base::auth::is_valid_context_id(id) {
            return Err(GroupError::BadId(id.to_string()));
        }
        let mut file = self.file();
        if file.groups.contains_key(id) {
            return Err(GroupError::Exists(id.to_string()));
        }
        let mut unique: Vec<String> = vec![];
        for member in members {
            if !unique.contains(member) {
                unique.push(member.clone());
            }
        }
        let record = GroupRecord {
            name: self.kept(name, 100),
            members: unique,
            active: true,
            deactivated_reason: String::new(),
            origin: origin.to_string(),
            created: state::now_rfc3339(),
        };
        file.groups.insert(id.to_string(), record.clone());
        state::write_json(&self.path, &*file)?;
        tracing::info!(group = id, origin, "group created");
        Ok(record)
    }

    /// The group `id` made by `origin` (a gateway for its channel), created now if it is new,
    /// with `member` added.
    pub fn ensure(&self, id: &str, name: &str, member: &str, origin: &str) -> Result<GroupRecord, GroupError> {
        if self.get(id).is_none() {
            match self.create(id, name, &[member.to_string()], origin) {
                Ok(record) => return Ok(record),
                Err(GroupError::Exists(_)) => {}
                Err(error) => return Err(error),
            }
        }
        self.add_member(id, member)
    }

    pub fn add_member(&self, id: &str, member: &str) -> Result<GroupRecord, GroupError> {
        Ok(self
            .change(id, |record| {
                if !record.members.iter().any(|m| m == member) {
                    record.members.push(member.to_string());
                }
            })?
            .1)
    }

    pub fn remove_member(&self, id: &str, member: &str) -> Result<GroupRecord, GroupError> {
        Ok(self.change(id, |record| record.members.retain(|m| m != member))?.1)
    }

    pub fn deactivate(&self, id: &str, reason: &str) -> Result<GroupRecord, GroupError> {
        let reason = self.kept(reason, 200);
        let record = self
            .change(id, |record| {
                record.active = false;
                record.deactivated_reason = reason;
            })?
            .1;
        tracing::info!(group = id, "group deactivated");
        Ok(record)
    }

    pub fn reactivate(&self, id: &str) -> Result<GroupRecord, GroupError> {
        let record = self
            .change(id, |record| {
                record.active = true;
                record.deactivated_reason.clear();
            })?
            .1;
        tracing::info!(group = id, "group reactivated");
        Ok(record)
    }

    /// Refuses a new message to a deactivated group, with its reason.
    pub fn accepts_messages(&self, id: &str) -> Result<(), GroupError> {
        match self.get(id) {
            Some(record) if !record.active => {
                let reason = if record.deactivated_reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", record.deactivated_reason)
                };
                Err(GroupError::Deactivated(id.to_string(), reason))
            }
            _ => Ok(()),
        }
    }
}

impl Groups {
    /// The group that follows a chat, as `member` comes in (made or joined, named `name`) or
    /// leaves it (`left`: membership follows who is in the chat); none when a chat left has no
    /// group.
    pub fn follow_chat(
        &self,
        id: &str,
        name: &str,
        member: &str,
        left: bool,
        origin: &str,
    ) -> Result<Option<GroupRecord>, GroupError> {
        if !left {
            return self.ensure(id, name, member, origin).map(Some);
        }
        let Some(group) = self.get(id) else { return Ok(None) };
        if !group.members.iter().any(|m| m == member) {
            return Ok(Some(group));
        }
        let group = self.remove_member(id, member)?;
        tracing::info!(group = %id, user = %member, "a member left the chat, so the group");
        Ok(Some(group))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_deactivation_and_reactivation_survive_a_restart() {
        let temp = tempfile::tempdir().expect("tempdir");
        let groups = Groups::open(temp.path()).expect("open");
        groups.create("family", "The family", &["u-1".into(), "u-1".into(), "u-2".into()], "admin").expect("create");
        assert!(matches!(groups.create("family", "", &[], "admin"), Err(GroupError::Exists(_))));
        assert!(matches!(groups.create("../x", "", &[], "admin"), Err(GroupError::BadId(_))));
        groups.add_member("family", "u-3").expect("add");
        groups.remove_member("family", "u-1").expect("remove");
        assert_eq!(groups.of_member("u-3"), vec!["family".to_string()]);
        groups.deactivate("family", "moved to another server").expect("deactivate");
        let refused = groups.accepts_messages("family").expect_err("deactivated");
        assert!(refused.to_string().contains("deactivated (moved to another server)"), "{refused}");
        let reopened = Groups::open(temp.path()).expect("reopen");
        assert_eq!(reopened.get("family").expect("kept").members, vec!["u-2".to_string(), "u-3".to_string()]);
        reopened.reactivate("family").expect("reactivate");
        reopened.accepts_messages("family").expect("active again");
        let made = reopened.ensure("slack-T1-C1", "#general", "u-9", "gateway:acme").expect("ensure");
        assert_eq!((made.members.len(), made.origin.as_str()), (1, "gateway:acme"));
        reopened.ensure("slack-T1-C1", "#general", "u-8", "gateway:acme").expect("ensure again");
        assert_eq!(reopened.get("slack-T1-C1").expect("group").members.len(), 2);
    }
}
