//! `data/state/containers.json`: every container the daemon owns, recorded as it starts and
//! forgotten as it goes; after a restart, running services are adopted and everything else
//! carrying this data dir's owner label is removed.

use std::sync::PoisonError;

use serde::{Deserialize, Serialize};

use super::{ContainerError, ContainerManager};
use crate::base::auth::{ContainerIdentity, Context, Role};
use crate::base::state;
use crate::sandbox::container::{ContainerKind, LABEL_BAAAHT, LABEL_OWNER};

pub(super) const INVENTORY_FILE: &str = "containers.json";

/// One container the daemon owns, as recorded in `data/state/containers.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InventoryEntry {
    pub id: String,
    pub name: String,
    pub role: String,
    pub session_id: String,
    pub context: String,
    pub kind: ContainerKind,
    /// SHA-256 of the container's token, to re-adopt it after a restart.
    pub token_sha256: String,
    pub created_at: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    pub containers: Vec<InventoryEntry>,
}

/// What [`ContainerManager::reconcile`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    pub adopted: Vec<String>,
    pub removed: Vec<String>,
    /// Inventory entries whose container no longer exists.
    pub forgotten: Vec<String>,
}

impl ContainerManager {
    pub(super) async fn save_inventory(&self, inventory: &Inventory) -> Result<(), ContainerError> {
        state::write_json(&self.data_dir.state_dir().join(INVENTORY_FILE), inventory).map_err(ContainerError::Inventory)
    }

    pub(super) async fn record(&self, entry: InventoryEntry) -> Result<(), ContainerError> {
        let mut inventory = self.inventory.lock().await;
        inventory.containers.push(entry);
        self.save_inventory(&inventory).await
    }

    pub(super) async fn forget(&self, name: &str) -> Result<(), ContainerError> {
        let mut inventory = self.inventory.lock().await;
        inventory.containers.retain(|entry| entry.name != name);
        self.save_inventory(&inventory).await
    }

    pub async fn inventory(&self) -> Inventory {
        self.inventory.lock().await.clone()
    }

    /// Adopts running services of this data dir that the inventory knows, removes every other
    /// container carrying this data dir's owner label, and forgets inventory entries whose
    /// container is gone.
    pub async fn reconcile(&self) -> Result<ReconcileReport, ContainerError> {
        let runtime = self.runtime().await?;
        let found = self.check(runtime.list_by_label(&[(LABEL_BAAAHT, "1"), (LABEL_OWNER, &self.owner)]).await)?;
        let mut inventory = self.inventory.lock().await;
        let mut report = ReconcileReport::default();
        let mut kept = vec![];
        let started_here = self.started_here.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let awaited = self.awaited.lock().unwrap_or_else(PoisonError::into_inner).clone();
        for container in &found {
            let known = inventory.containers.iter().find(|entry| entry.id == container.id).cloned();
            // A container of this process's that has ended (dockerd restarted under it, say)
            // is dead, unless a run waits to read its logs: removed, and its slot freed.
            let dead = container.ended && !awaited.contains(&container.id);
            if (started_here.contains(&container.id) || started_here.contains(&container.name)) && !dead {
                // Started by this process while the reconcile ran: in use, not an orphan.
                kept.extend(known);
                continue;
            }
            let adoptable = known.as_ref().filter(|entry| entry.kind == ContainerKind::Service && container.running);
            if let Some(entry) = adoptable {
                if let Some(identity) = identity_of(entry) {
                    match self.listeners.adopt_container(identity, entry.token_sha256.clone()) {
                        Ok(_) => {
                            // It runs, so it counts (past the limit if it must: it is there).
                            self.slots.hold(&entry.name, self.slots.semaphore.clone().try_acquire_owned().ok());
                            tracing::info!(container = %entry.name, "adopted a running container after a restart");
                            report.adopted.push(entry.name.clone());
                            kept.push(entry.clone());
                            continue;
                        }
                        Err(error) => {
                            tracing::warn!(container = %entry.name, %error, "cannot adopt a container; removing it")
                        }
                    }
                }
            }
            match self.check(runtime.remove(&container.id).await) {
                Ok(()) => {
                    tracing::info!(container = %container.name, known = known.is_some(), dead, "removed an orphaned container");
                    self.listeners.remove_container(&container.name);
                    self.slots.release(&container.name);
                    if dead {
                        let mut started_here = self.started_here.lock().unwrap_or_else(PoisonError::into_inner);
                        started_here.remove(&container.id);
                        started_here.remove(&container.name);
                    }
                    report.removed.push(container.name.clone());
                }
                Err(error) => {
                    tracing::warn!(container = %container.name, %error, "cannot remove an orphaned container");
                    if let Some(entry) = known {
                        kept.push(entry);
                    }
                }
            }
        }
        for entry in &inventory.containers {
            if !found.iter().any(|container| container.id == entry.id) {
                if started_here.contains(&entry.id) || started_here.contains(&entry.name) {
                    // Created after the engine was listed: it is starting, and its run folder is
                    // about to be mounted.
                    kept.push(entry.clone());
                    continue;
                }
                report.forgotten.push(entry.name.clone());
                self.listeners.remove_container(&entry.name);
                self.slots.release(&entry.name);
            }
        }
        inventory.containers = kept;
        self.save_inventory(&inventory).await?;
        self.listeners.remove_stale_folders();
        Ok(report)
    }
}

fn identity_of(entry: &InventoryEntry) -> Option<ContainerIdentity> {
    let role = Role::named(&entry.role).filter(|role| *role != Role::Gateway)?;
    let context = Context::named(&entry.context)?;
    Some(ContainerIdentity { name: entry.name.clone(), role, session_id: entry.session_id.clone(), context })
}
