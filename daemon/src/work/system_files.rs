//! The `system/` folder of each tool container's IPC slot (spec §12.4: "Orchestrator-maintained,
//! containers read"): `available_groups.json`, the groups the context's people can reach, and
//! `container_status.json`, the context's own containers. The spec draws one `data/ipc/system/`
//! for everyone; here each slot has its own, holding its context's only, because one shared
//! folder would show every household's groups and containers to every container (DESIGN.md's
//! tenancy invariant). The folder and its files are the daemon's: a container reads them and
//! cannot change them. Rewritten after each IPC pass where they changed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::json;

use crate::base::auth::{Context, ContextKind};
use crate::people::groups::Groups;
use crate::sandbox::container::manager::{ContainerManager, Inventory};
use crate::work::ipc::Ipc;

/// Keeps the slots' `system/` files current.
#[derive(Debug)]
pub struct SystemFiles {
    groups: Arc<Groups>,
    containers: Arc<ContainerManager>,
    /// What each slot's files hold now (`{slot}/{file}`), so unchanged ones are not rewritten.
    written: Mutex<HashMap<String, Vec<u8>>>,
}

impl SystemFiles {
    pub fn new(groups: Arc<Groups>, containers: Arc<ContainerManager>) -> SystemFiles {
        SystemFiles { groups, containers, written: Mutex::default() }
    }

    /// Writes the files of every slot a container holds where what they say changed.
    pub async fn refresh(&self, ipc: &Ipc) {
        let inventory = self.containers.inventory().await;
        let slots = ipc.held_slots();
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        written.retain(|key, _| slots.iter().any(|(slot, _)| key.starts_with(&format!("{slot}/"))));
        for (slot, context) in slots {
            let files = [
                ("available_groups.json", available_groups(&self.groups, &context)),
                ("container_status.json", container_status(&inventory, &context)),
            ];
            for (name, value) in files {
                let key = format!("{slot}/{name}");
                let bytes = format!("{value:#}\n").into_bytes();
                if written.get(&key) == Some(&bytes) {
                    continue;
                }
                match ipc.write_system(&slot, name, &bytes) {
                    Ok(()) => {
                        written.insert(key, bytes);
                    }
                    Err(error) => tracing::warn!(slot = %slot, file = name, %error, "cannot write an IPC system file"),
                }
            }
        }
    }
}

/// The groups `context`'s people can reach: a user's groups, or the group itself.
fn available_groups(groups: &Groups, context: &Context) -> serde_json::Value {
    let ids = match context.kind {
        ContextKind::User => groups.of_member(&context.id),
        ContextKind::Group => vec![context.id.clone()],
    };
    let listed: Vec<serde_json::Value> = ids
        .iter()
        .filter_map(|id| groups.get(id).map(|group| (id, group)))
        .map(|(id, group)| json!({"id": id, "name": group.name, "active": group.active}))
        .collect();
    json!({"version": 1, "context": context.to_string(), "groups": listed})
}

/// `context`'s own containers.
fn container_status(inventory: &Inventory, context: &Context) -> serde_json::Value {
    let own = context.to_string();
    let mut listed: Vec<serde_json::Value> = inventory
        .containers
        .iter()
        .filter(|entry| entry.context == own)
        .map(|entry| {
            json!({"name": entry.name, "role": entry.role, "sessionId": entry.session_id,
                "createdAt": crate::base::state::rfc3339(entry.created_at)})
        })
        .collect();
    listed.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    json!({"version": 1, "context": own, "containers": listed})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::container::manager::InventoryEntry;

    #[test]
    fn a_context_sees_its_own_groups_and_containers_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let groups = Groups::open(dir.path()).expect("groups");
        groups.create("family", "Family", &["alice".into(), "bob".into()], "admin").expect("family");
        groups.create("work", "Work", &["carol".into()], "admin").expect("work");
        let alice = available_groups(&groups, &Context::user("alice"));
        assert_eq!(alice["groups"], json!([{"id": "family", "name": "Family", "active": true}]));
        let carol = available_groups(&groups, &Context::group("work"));
        assert_eq!(carol["groups"][0]["id"], "work");
        assert_eq!(carol["groups"].as_array().map(Vec::len), Some(1));

        let entry = |name: &str, context: &str| InventoryEntry {
            id: format!("id-{name}"),
            name: name.into(),
            role: "tool".into(),
            session_id: "s-1".into(),
            context: context.into(),
            kind: crate::sandbox::container::ContainerKind::Service,
            token_sha256: String::new(),
            created_at: 1_764_000_000,
        };
        let inventory = Inventory { containers: vec![entry("b-tool", "user:alice"), entry("c-tool", "user:bob")] };
        let status = container_status(&inventory, &Context::user("alice"));
        let names: Vec<&str> =
            status["containers"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names, ["b-tool"]);
    }
}
