//! The confinement self-test (`baaaht doctor`): `baaaht-agent self-test` in a fresh hardened
//! container of a role, its report read back with the problems it found and any the run itself
//! shows (no report, no daemon socket, an unexpected exit).

use std::time::Duration;

use crate::base::auth::{Context, Role};
use crate::sandbox::container::manager::{ContainerError, ContainerManager, RunRequest, RunStatus, BINARIES_MOUNT};
use crate::sandbox::container::Isolation;

/// What to test.
#[derive(Debug, Clone)]
pub struct SelfTest {
    pub role: Role,
    /// A host address that must be unreachable from the container.
    pub probe: Option<std::net::SocketAddr>,
    /// Also stream a short completion from this model through the daemon.
    pub llm_model: Option<String>,
    pub session: String,
    /// Seconds the container stays after its report (at most 600).
    pub linger: u32,
}

/// What the test found.
#[derive(Debug, Clone)]
pub struct SelfTestOutcome {
    pub problems: Vec<String>,
    pub report_json: String,
    pub container: String,
    pub status: RunStatus,
    pub duration: Duration,
    pub stderr_tail: String,
    /// The tier the container was started under.
    pub isolation: Isolation,
}

/// The context every self-test container runs in.
pub fn context() -> Context {
    Context::user("baaaht-self-test")
}

/// Runs `test` in a container of the self-test context.
pub async fn run(containers: &ContainerManager, test: SelfTest) -> Result<SelfTestOutcome, ContainerError> {
    let mut command = vec![format!("{BINARIES_MOUNT}/baaaht-agent"), "self-test".into()];
    if let Some(address) = test.probe {
        command.extend(["--probe".into(), address.to_string()]);
    }
    if let Some(model) = &test.llm_model {
        command.extend(["--llm".into(), model.clone()]);
    }
    let linger = test.linger.min(600);
    command.extend(["--linger".into(), linger.to_string()]);
    let run = RunRequest {
        role: test.role,
        session_id: test.session,
        context: context(),
        command,
        mounts: vec![],
        env: vec![],
        timeout: Duration::from_secs(u64::from(linger) + 60),
        daemon_socket: true,
        working_dir: None,
        image: None,
        limits: None,
    };
    let outcome = containers.run(run).await.inspect_err(|error| {
        tracing::warn!(error = %baaaht_proto::error_chain(error), "self-test container failed");
    })?;
    let isolation = outcome.isolation;
    let stdout = String::from_utf8_lossy(&outcome.output.stdout);
    let report_json = stdout.lines().find(|line| line.starts_with('{')).unwrap_or("").to_string();
    let mut problems = match serde_json::from_str::<baaaht_proto::selftest::SelfTestReport>(&report_json) {
        Ok(report) => {
            let mut problems = report.problems.clone();
            if !report.daemon_socket {
                problems.push("the container could not reach its daemon socket".into());
            }
            match (isolation, report.in_gvisor()) {
                (Isolation::Gvisor, false) => problems.push(format!(
                    "the container was started under gVisor but its kernel is not gVisor's ({:?}, kernel log {:?})",
                    report.kernel, report.kernel_log
                )),
                (Isolation::Runc, true) => {
                    problems.push("the container was started under runc but runs on gVisor's kernel".into())
                }
                _ => {}
            }
            problems
        }
        Err(error) => vec![format!("no self-test report ({error}); the container {}", outcome.status)],
    };
    if !matches!(outcome.status, RunStatus::Exited(0 | 3)) {
        problems.push(format!("the self-test container {}", outcome.status));
    }
    Ok(SelfTestOutcome {
        problems,
        report_json,
        container: outcome.name.clone(),
        status: outcome.status,
        duration: outcome.duration,
        stderr_tail: outcome.stderr_tail(5),
        isolation,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum SelfTestError {
    /// A conversation of someone else's is not the test's to join: its tool container and
    /// workspace are theirs.
    #[error(
        "session `{session}` is a conversation of {owner}: a self-test runs in its own session (leave --session \
         out, or name one of the self-test user's)"
    )]
    OthersConversation { session: String, owner: String },
    #[error(transparent)]
    Container(#[from] ContainerError),
}

/// A self-test and gVisor's own probe: whether a bare sandbox under gVisor started, and in how
/// long (none: gVisor is not offered here).
#[derive(Debug)]
pub struct Checked {
    pub outcome: SelfTestOutcome,
    pub gvisor: Option<Result<Duration, ContainerError>>,
}

/// Runs `test` beside a bare sandbox under gVisor, which falls back (or is refused) by itself
/// when gVisor fails; after gVisor failed, the probe goes first: its start is what brings the
/// roles set to `auto` back to gVisor. A problem of gVisor's is one of the test's.
pub async fn run_beside_gvisor(
    containers: &ContainerManager,
    sessions: &crate::store::sessions::SessionStore,
    test: SelfTest,
) -> Result<Checked, SelfTestError> {
    if let Some(record) = sessions.get(&test.session).filter(|record| record.context() != context()) {
        return Err(SelfTestError::OthersConversation { session: test.session, owner: record.context().to_string() });
    }
    let (gvisor, outcome) = if containers.gvisor_down().is_some() {
        let gvisor = containers.probe_gvisor().await;
        (gvisor, run(containers, test).await)
    } else {
        tokio::join!(containers.probe_gvisor(), run(containers, test))
    };
    let mut outcome = outcome?;
    if let Some(Err(cause)) = &gvisor {
        outcome.problems.push(format!("gVisor does not start sandboxes: {cause}"));
    }
    Ok(Checked { outcome, gvisor })
}
