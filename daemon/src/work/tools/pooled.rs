//! The tool containers' warm pool (`container.pools.tool`): a session's first tool container
//! comes ready, so its first call does not wait for a sandbox to start.
//!
//! A pooled tool container is born with a workspace and an IPC folder of its own that belong
//! to nobody: `sessions/@pool/{id}/data` (a filesystem of its own where workspaces have one)
//! and `data/ipc/pool/{id}` (a memory filesystem where the daemon can mount), which no IPC pass
//! reads. It mounts the system's skill scripts (the same for everyone) and nothing of anyone's;
//! its runner waits, answered by nothing, until a session claims it. At the claim the daemon
//! binds its socket to the session, then moves both folders into the session's places,
//! `sessions/{session}/data` and `data/ipc/{context}/tools-{session}`, never over one that is
//! there: a plain folder is renamed; a filesystem (and a workspace's image) is mounted in place
//! and let go of at the pool's. The container keeps its own mounts of
//! both, so from its first call it writes where the session's are. The runner learns its session
//! from each call.
//!
//! Only a session that has no workspace yet, in a context with no skills of its own and no skill
//! layer, takes a pooled container; any other starts one of its own (as does a Coder's, which
//! mounts project folders, and one for `tools.mode: cold`).

use std::sync::Arc;

use crate::base::auth::{Context, Role};
use crate::sandbox::container::manager::RunRequest;
use crate::sandbox::container::ContainerKind;
use crate::sandbox::workspace::PooledWorkspace;
use crate::work::ipc::Lease;
use crate::work::warm::{Held, Starter};

use super::{skills_found, Holding, Runner, Runners, CONNECT_TIMEOUT};

/// What a pooled tool container holds.
struct PooledTool {
    /// Its folders' name in the pool's.
    id: String,
    workspace: PooledWorkspace,
    ipc: Lease,
    /// The skills' script folders it mounts, as found then.
    skills: Vec<(std::path::PathBuf, u64)>,
}

impl Runners {
    /// Fills the tool containers' warm pool from now on.
    pub fn fill_pool(self: &Arc<Self>) {
        // The pools outlive no daemon: a starter that finds the runners gone makes nothing.
        let runners = Arc::downgrade(self);
        let starter: Starter = Arc::new(move |_role| {
            let runners = runners.clone();
            Box::pin(async move {
                match runners.upgrade() {
                    Some(runners) => runners.pooled_request().await,
                    None => Err("the daemon is stopping".to_string()),
                }
            })
        });
        self.warm.starts(Role::Tool, starter);
    }

    /// A pooled tool container's request, with its own workspace and IPC folder.
    async fn pooled_request(&self) -> Result<(RunRequest, Held), String> {
        let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        let (workspaces, ipc) = (self.workspaces.clone(), self.ipc.clone());
        let named = id.clone();
        let made = tokio::task::spawn_blocking(move || {
            let workspace = workspaces.pooled(&id).map_err(|error| baaaht_proto::error_chain(&error))?;
            let lease = ipc.pooled(&id).map_err(|error| format!("cannot make a pooled IPC folder: {error}"))?;
            Ok::<_, String>((workspace, lease))
        })
        .await;
        let (workspace, ipc) = made.map_err(|error| error.to_string())??;
        let projects = self.skill_scripts(None);
        let skills = skills_found(&projects);
        let holding = Holding { workspace: &workspace.prepared, ipc: &ipc, projects, coder: false, cold: false };
        let request = self.request(holding, "", &Context::user(String::new()), None);
        Ok((request, Box::new(PooledTool { id: named, workspace, ipc, skills })))
    }

    /// Whether `session` may take a pooled tool container: it has no workspace yet, and its
    /// context no skills of its own nor a skill layer; then the skills' scripts a container has.
    async fn poolable(&self, session: &str, context: &Context) -> Option<Vec<(std::path::PathBuf, u64)>> {
        let scripts = skills_found(&self.skill_scripts(Some(context)));
        if self.workspaces.has(session) || scripts != skills_found(&self.skill_scripts(None)) {
            return None;
        }
        if self.layer_for(context).await.is_some() {
            return None;
        }
        Some(scripts)
    }

    /// Whether `session`'s first call will find its container in the pool: a start ahead of
    /// it would only take one sooner, and leave the pool to start another for a guess.
    pub(super) async fn pool_serves(&self, session: &str, context: &Context) -> bool {
        self.warm.pools(Role::Tool)
            && self.warm.has_ready(Role::Tool)
            && self.poolable(session, context).await.is_some()
    }

    /// `session`'s first tool container from the warm pool, bound to it and holding its
    /// workspace and IPC folder, if the session may take one and one is ready.
    pub(super) async fn claim_pooled(&self, session: &str, context: &Context) -> Option<Runner> {
        // With the tool pool off, a start reads no skills twice.
        if !self.warm.pools(Role::Tool) {
            return None;
        }
        let entered = std::time::Instant::now();
        let scripts = self.poolable(session, context).await?;
        let mut changes = self.connected.changes();
        let started = std::time::Instant::now();
        let checked = started - entered;
        let (name, held, _handover) = self.warm.claim(Role::Tool, session, context, ContainerKind::Service).await?;
        let claimed = started.elapsed();
        let pooled = match held.downcast::<PooledTool>() {
            Ok(pooled) => *pooled,
            Err(held) => {
                self.discard(&name, held).await;
                return None;
            }
        };
        if pooled.skills != scripts {
            // A skill's scripts changed since it started.
            self.discard(&name, Box::new(pooled)).await;
            return None;
        }
        let id = pooled.id.clone();
        let (workspaces, ipc, owner, whose) =
            (self.workspaces.clone(), self.ipc.clone(), session.to_string(), context.clone());
        let adopted = tokio::task::spawn_blocking(move || {
            let PooledTool { id, workspace, ipc: pooled_ipc, .. } = pooled;
            match workspaces.adopt(workspace, &owner) {
                Ok(Some(_)) => {}
                Ok(None) => return Ok(None),
                Err(error) => return Err(baaaht_proto::error_chain(&error)),
            }
            match ipc.adopt(pooled_ipc, &whose, &owner) {
                Ok(Some(lease)) => Ok(Some(lease)),
                failed => {
                    // The session keeps the (empty) workspace; the pool's mount of it goes.
                    workspaces.release(&owner);
                    workspaces.let_go_pooled(&id);
                    failed.map_err(|error| format!("cannot give the session a pooled IPC folder: {error}"))
                }
            }
        })
        .await;
        let lease = match adopted {
            Ok(Ok(Some(lease))) => lease,
            failed => {
                if let Ok(Err(why)) | Err(why) = failed.map_err(|error| error.to_string()) {
                    tracing::warn!(session, container = %name, %why, "cannot hand a pooled tool container over; starting one");
                }
                self.discard(&name, Box::new(())).await;
                return None;
            }
        };
        let adopted = started.elapsed();
        // What the pool's side keeps of the folders goes off the call's path.
        let (workspaces, ipc) = (self.workspaces.clone(), self.ipc.clone());
        self.tracker.spawn(async move {
            let left = tokio::task::spawn_blocking(move || {
                workspaces.let_go_pooled(&id);
                ipc.let_go_pooled(&id);
            });
            if let Err(error) = left.await {
                tracing::warn!(%error, "cannot let go of a pooled tool container's folders");
            }
        });
        let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT.min(std::time::Duration::from_secs(5));
        if !self.connected.wait_for(&mut changes, &name, deadline).await {
            tracing::warn!(session, container = %name, "a claimed tool runner did not connect; starting one");
            drop(lease);
            self.remove(session, &name, "a claimed tool container that did not connect").await;
            return None;
        }
        tracing::info!(
            session,
            container = %name,
            checked_us = checked.as_micros() as u64,
            claimed_us = claimed.as_micros() as u64,
            adopted_us = adopted.as_micros() as u64,
            connected_us = started.elapsed().as_micros() as u64,
            "tool runner ready (from the pool)"
        );
        Some(Runner {
            session: session.to_string(),
            container: name,
            context: context.clone(),
            last_used: std::time::Instant::now(),
            called: false,
            skills: scripts,
            idle: None,
            _ipc: Some(lease),
        })
    }

    /// Removes a claimed container that will not serve, then what it held.
    async fn discard(&self, name: &str, held: Held) {
        if let Err(error) = self.containers.stop_service(name).await {
            tracing::warn!(container = name, %error, "cannot remove a pooled tool container");
        }
        crate::work::warm::let_go(held).await;
    }
}
