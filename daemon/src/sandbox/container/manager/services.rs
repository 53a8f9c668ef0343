//! Long-lived containers: a session's services (tool runners, agents), detached tasks, the
//! warm pools' containers bound to nobody and their claim by a session, and their removal.

use std::sync::Arc;

use super::{ContainerError, ContainerManager, RunRequest, ServiceHandle, Slot};
use crate::base::auth::{ContainerIdentity, Context};
use crate::sandbox::container::{ContainerKind, Isolation};

impl ContainerManager {
    /// Starts a long-lived container (e.g. a session's tool runner) with its own daemon socket.
    /// It runs until [`ContainerManager::stop_service`]; after a daemon crash it is adopted.
    pub async fn start_service(&self, request: RunRequest) -> Result<ServiceHandle, ContainerError> {
        self.start_long_running(request, ContainerKind::Service, Slot::Waits).await.map(|(handle, _)| handle)
    }

    /// Starts a long-lived container that is not adopted after a daemon crash (the next daemon
    /// removes it and starts its own), e.g. the LLM gateway. With `request.daemon_socket` it
    /// gets its own daemon socket. Stopped with [`ContainerManager::stop_service`].
    pub async fn start_detached(&self, request: RunRequest) -> Result<ServiceHandle, ContainerError> {
        self.start_long_running(request, ContainerKind::Task, Slot::Waits).await.map(|(handle, _)| handle)
    }

    /// [`ContainerManager::start_detached`], only if a container slot is free now: a start
    /// ahead of need never waits for one, nor makes room by removing an idle container.
    pub async fn start_detached_if_room(&self, request: RunRequest) -> Result<ServiceHandle, ContainerError> {
        self.start_long_running(request, ContainerKind::Task, Slot::IfFree).await.map(|(handle, _)| handle)
    }

    /// Starts a container for a warm pool: `request` with its own daemon socket bound to
    /// nobody (its `session_id` and `context` are not used), holding no one's files, its calls
    /// waiting until [`ContainerManager::claim`] binds it. Not adopted after a daemon crash (the
    /// next daemon removes it) until it is claimed as a service. Also the tier it runs under.
    pub async fn start_pooled(&self, request: RunRequest) -> Result<(ServiceHandle, Isolation), ContainerError> {
        self.start_long_running(request, ContainerKind::Task, Slot::Pooled).await
    }

    /// Binds pooled container `name` to `session_id` and `context` (its waiting calls go on as
    /// theirs; once only), recorded as `kind` (a service is adopted after a crash).
    pub async fn claim(
        &self,
        name: &str,
        session_id: &str,
        context: &Context,
        kind: ContainerKind,
    ) -> Result<Arc<ContainerIdentity>, ContainerError> {
        {
            let mut inventory = self.inventory.lock().await;
            let entry = inventory.containers.iter_mut().find(|entry| entry.name == name);
            let Some(entry) = entry else {
                return Err(ContainerError::Claim(format!(
                    "container {name} is not in the inventory (it was removed)"
                )));
            };
            entry.session_id = session_id.to_string();
            entry.context = context.to_string();
            entry.kind = kind;
            self.save_inventory(&inventory).await?;
        }
        self.listeners.bind(name, session_id, context).map_err(|error| ContainerError::Claim(error.to_string()))
    }

    async fn start_long_running(
        &self,
        request: RunRequest,
        kind: ContainerKind,
        slot: Slot,
    ) -> Result<(ServiceHandle, Isolation), ContainerError> {
        let runtime = self.runtime().await?;
        let isolation = self.isolation(&*runtime, request.role)?;
        let pooled = slot == Slot::Pooled;
        let slot = match slot {
            Slot::Waits => self.slots.take(request.role).await?,
            Slot::Pooled | Slot::IfFree => self.slots.try_take(request.role)?,
        };
        let with_socket = request.daemon_socket || kind == ContainerKind::Service || pooled;
        let (name, socket, spec) = self.prepare(&request, kind, (with_socket, pooled), isolation)?;
        let token_sha256 = socket.as_ref().map(|s| s.token_sha256.clone()).unwrap_or_default();
        match self.start_with_retry(&*runtime, &spec, token_sha256).await {
            Ok((id, _attempts, isolation)) => {
                self.slots.hold(&name, slot);
                tracing::info!(container = %name, container_id = %id, role = request.role.as_str(), pooled, "service container started");
                Ok((ServiceHandle { id, name }, isolation))
            }
            Err(error) => {
                self.listeners.remove_container(&name);
                Err(error)
            }
        }
    }

    /// Stops and removes a service container and its socket.
    pub async fn stop_service(&self, name: &str) -> Result<(), ContainerError> {
        let runtime = self.runtime().await?;
        let entry = self.inventory.lock().await.containers.iter().find(|entry| entry.name == name).cloned();
        if let Some(entry) = entry {
            self.cleanup(&*runtime, &entry.id, &entry.name).await;
        }
        self.listeners.remove_container(name);
        Ok(())
    }
}
