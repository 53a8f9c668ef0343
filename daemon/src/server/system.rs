//! The `System` service: status, and the confinement self-test in a fresh container.

use super::*;

/// The `System` service.
#[derive(Debug, Clone)]
pub(super) struct SystemService {
    pub(super) shared: Arc<Shared>,
}

#[tonic::async_trait]
impl v1::system_server::System for SystemService {
    async fn get_status(&self, request: Request<v1::StatusRequest>) -> Result<Response<v1::StatusResponse>, Status> {
        check(&request, Operation::GetStatus, None, None)?;
        let containers = self.shared.containers.inventory().await.containers.len();
        Ok(Response::new(status_response(&self.shared, containers)))
    }

    async fn run_self_test(
        &self,
        request: Request<v1::SelfTestRequest>,
    ) -> Result<Response<v1::SelfTestResponse>, Status> {
        check(&request, Operation::RunSelfTest, None, None)?;
        let message = request.into_inner();
        let role = role_of(message.role)?.unwrap_or(crate::auth::Role::Tool);
        let mut command = vec![format!("{BINARIES_MOUNT}/baaaht-agent"), "self-test".into()];
        if !message.probe_address.is_empty() {
            let address: std::net::SocketAddr = message.probe_address.parse().map_err(|_unparsable| {
                Status::invalid_argument(format!("probe_address `{}` is not IP:PORT", message.probe_address))
            })?;
            command.extend(["--probe".into(), address.to_string()]);
        }
        if !message.llm_model.is_empty() {
            let valid = message.llm_model.len() <= 200
                && message.llm_model.chars().all(|c| c.is_ascii_alphanumeric() || "/-_.:@".contains(c));
            if !valid {
                return Err(Status::invalid_argument(format!(
                    "llm_model `{}` is not a model name such as anthropic/claude-sonnet-4-20250514",
                    message.llm_model.escape_debug()
                )));
            }
            command.extend(["--llm".into(), message.llm_model.clone()]);
        }
        let session = if message.session_id.is_empty() { "self-test".to_string() } else { message.session_id.clone() };
        if !crate::auth::is_valid_context_id(&session) {
            return Err(Status::invalid_argument(format!(
                "session_id `{}` is not a valid id: use 1-128 letters, digits, `.`, `_` or `-`",
                session.escape_debug()
            )));
        }
        let linger = message.linger_seconds.min(600);
        command.extend(["--linger".into(), linger.to_string()]);
        let run = RunRequest {
            role,
            session_id: session,
            context: Context::user("baaaht-self-test"),
            command,
            mounts: vec![],
            env: vec![],
            timeout: std::time::Duration::from_secs(u64::from(linger) + 60),
            daemon_socket: true,
            working_dir: None,
            image: None,
        };
        let outcome = self.shared.containers.run(run).await.map_err(|error| {
            tracing::warn!(error = %baaaht_proto::error_chain(&error), "self-test container failed");
            Status::from(error)
        })?;
        let stdout = String::from_utf8_lossy(&outcome.output.stdout);
        let report_json = stdout.lines().find(|line| line.starts_with('{')).unwrap_or("").to_string();
        let mut problems = match serde_json::from_str::<baaaht_proto::selftest::SelfTestReport>(&report_json) {
            Ok(report) => {
                let mut problems = report.problems;
                if !report.daemon_socket {
                    problems.push("the container could not reach its daemon socket".into());
                }
                problems
            }
            Err(error) => vec![format!("no self-test report ({error}); the container {}", outcome.status)],
        };
        if !matches!(outcome.status, crate::container::manager::RunStatus::Exited(0 | 3)) {
            problems.push(format!("the self-test container {}", outcome.status));
        }
        Ok(Response::new(v1::SelfTestResponse {
            ok: problems.is_empty(),
            problems,
            report_json,
            container: outcome.name.clone(),
            status: outcome.status.to_string(),
            duration_ms: outcome.duration.as_millis() as u64,
            stderr_tail: outcome.stderr_tail(5),
        }))
    }
}

fn status_response(shared: &Shared, containers: usize) -> v1::StatusResponse {
    let mut degraded = vec![];
    let engine_status = shared.engine.borrow().status.clone();
    if let Some(reason) = engine_status.degraded_reason() {
        degraded.push(reason);
    }
    degraded.extend(shared.containers.problems());
    let engine = match &engine_status {
        EngineStatus::Ready(info) => v1::EngineStatus {
            kind: info.kind.as_str().into(),
            endpoint: info.socket.display().to_string(),
            version: info.version.clone(),
            healthy: true,
            message: format!("Engine API {}", info.api_version),
        },
        other => v1::EngineStatus {
            kind: "none".into(),
            endpoint: String::new(),
            version: String::new(),
            healthy: false,
            message: other.degraded_reason().unwrap_or_default(),
        },
    };
    let llm = shared.llm.summary();
    if matches!(llm.state, "off" | "down") {
        degraded.push(format!("llm: {}", llm.message));
    }
    let counts = shared.sessions.counts();
    v1::StatusResponse {
        version: env!("CARGO_PKG_VERSION").into(),
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
    }
}
