//! The `System` service: status, and the confinement self-test in a fresh container.

use super::*;
use super::{from_wire, to_wire};
use crate::base::auth::{Caller, Context};
use crate::ops::selftest::SelfTestError;

/// The `System` service.
#[derive(Debug, Clone)]
pub(super) struct SystemService {
    pub(super) shared: Arc<Shared>,
}

#[tonic::async_trait]
impl v1::system_server::System for SystemService {
    async fn get_status(&self, request: Request<v1::StatusRequest>) -> Result<Response<v1::StatusResponse>, Status> {
        let caller = check(&self.shared, &request, Operation::GetStatus, None, None)?;
        let inventory = self.shared.containers.inventory().await.containers;
        let mut full = status_response(&self.shared, inventory.len());
        // A user who is not an admin (or a gateway by itself) sees their own sessions and
        // containers, the model and the container count: nothing of the host.
        let limited = match &caller {
            Caller::Gateway(call) if !call.user.as_ref().is_some_and(|user| user.admin) => Some(call),
            _ => None,
        };
        if request.get_ref().containers {
            let visible = inventory.into_iter().filter(|entry| limited.is_none_or(|call| sees(call, entry))).collect();
            full.containers = self.usage_of(visible).await;
        }
        Ok(Response::new(match limited {
            None => full,
            Some(call) => self.as_user_sees_it(full, call),
        }))
    }

    async fn run_self_test(
        &self,
        request: Request<v1::SelfTestRequest>,
    ) -> Result<Response<v1::SelfTestResponse>, Status> {
        check(&self.shared, &request, Operation::RunSelfTest, None, None)?;
        let test = from_wire::self_test(request.into_inner())?;
        let containers = &self.shared.containers;
        let checked = crate::ops::selftest::run_beside_gvisor(containers, &self.shared.sessions, test).await.map_err(
            |error| match error {
                SelfTestError::OthersConversation { .. } => Status::failed_precondition(error.to_string()),
                SelfTestError::Container(error) => error.into(),
            },
        )?;
        let mut response = to_wire::self_test_response(checked, containers.tiers());
        let undo = self.shared.undo.clone();
        let (said, ok) = tokio::task::spawn_blocking(move || undo.said()).await.unwrap_or_default();
        (response.undo, response.undo_ok) = (said, ok);
        Ok(Response::new(response))
    }
}

/// Whether the user `call` names may see `entry`: a container of theirs or of a group of theirs.
fn sees(call: &crate::base::auth::GatewayCaller, entry: &crate::sandbox::container::manager::InventoryEntry) -> bool {
    call.user.as_ref().is_some_and(|user| {
        entry.context == Context::user(user.id.clone()).to_string()
            || user.groups.iter().any(|group| entry.context == Context::group(group.clone()).to_string())
    })
}

impl SystemService {
    /// `visible` containers with their usage and health, as `baaaht status --containers` lists.
    async fn usage_of(
        &self,
        visible: Vec<crate::sandbox::container::manager::InventoryEntry>,
    ) -> Vec<v1::ContainerUsage> {
        let used = self.shared.containers.usage(&visible).await;
        used.into_iter()
            .map(|(entry, usage)| v1::ContainerUsage {
                health: health_of(&self.shared, &entry),
                name: entry.name,
                role: entry.role,
                session_id: entry.session_id,
                context: entry.context,
                cpu_percent: usage.cpu_percent,
                memory_bytes: usage.memory_bytes,
                memory_limit_bytes: usage.memory_limit_bytes,
                uptime_seconds: crate::base::state::now_seconds().saturating_sub(entry.created_at),
            })
            .collect()
    }

    /// The status as a user who is not an admin sees it: their sessions, the model, the
    /// containers they may see and their count.
    fn as_user_sees_it(&self, full: v1::StatusResponse, call: &crate::base::auth::GatewayCaller) -> v1::StatusResponse {
        let counts = match &call.user {
            Some(user) => self.shared.sessions.counts_of(|record| user.owns(&record.context())),
            None => crate::store::sessions::SessionCounts::default(),
        };
        let model = self.shared.loaded.config.agents.settings(crate::base::auth::Role::Assistant).model.0;
        v1::StatusResponse {
            version: full.version,
            name: full.name,
            uptime_seconds: full.uptime_seconds,
            sessions_active: counts.active,
            sessions_idle: counts.idle,
            sessions_archived: counts.archived,
            containers_running: full.containers_running,
            containers: full.containers,
            llm: full.llm.map(|llm| v1::LlmGatewayStatus {
                state: llm.state,
                message: format!("model {model}"),
                ..Default::default()
            }),
            ..v1::StatusResponse::default()
        }
    }
}

fn status_response(shared: &Shared, containers: usize) -> v1::StatusResponse {
    let mut degraded = vec![];
    let engine_status = shared.engine.borrow().status.clone();
    if let Some(reason) = engine_status.degraded_reason() {
        degraded.push(reason);
    }
    degraded.extend(shared.containers.problems());
    degraded.extend(shared.disk.degraded());
    let engine = to_wire::engine_status(&engine_status);
    let llm = shared.llm.summary();
    if matches!(llm.state, "off" | "down") {
        degraded.push(format!("llm: {}", llm.message));
    }
    let counts = shared.sessions.counts();
    v1::StatusResponse {
        version: env!("CARGO_PKG_VERSION").into(),
        name: shared.loaded.config.system.name.clone(),
        uptime_seconds: shared.metrics.uptime().as_secs(),
        data_dir: shared.data_dir.root().display().to_string(),
        engine: Some(engine),
        sessions_active: counts.active,
        sessions_idle: counts.idle,
        sessions_archived: counts.archived,
        containers_running: u32::try_from(containers).unwrap_or(u32::MAX),
        metrics_address: shared.metrics_address.map(|address| address.to_string()).unwrap_or_default(),
        llm: Some(v1::LlmGatewayStatus {
            mode: llm.mode.to_string(),
            state: llm.state.into(),
            message: llm.message,
            providers: llm.providers,
        }),
        pid: std::process::id(),
        degraded,
        containers: vec![],
        pools: shared
            .warm
            .ready()
            .into_iter()
            .map(|(role, ready)| v1::WarmPool {
                role: role.as_str().into(),
                ready: u32::try_from(ready).unwrap_or(u32::MAX),
            })
            .collect(),
    }
}

/// A container's health as `baaaht status` shows it: the LLM gateway's from its supervisor, the
/// others' from the health monitor's last verdict.
fn health_of(shared: &Shared, entry: &crate::sandbox::container::manager::InventoryEntry) -> String {
    if entry.role != crate::base::auth::Role::LlmGateway.as_str() {
        return shared.health.health_of(&entry.name);
    }
    let summary = shared.llm.summary();
    match summary.state {
        "ready" => "healthy".into(),
        "down" => format!("failing: {}", summary.message),
        other => other.into(),
    }
}
