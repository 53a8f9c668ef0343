//! Isolation tiers (`container.isolation`): which tier a role's containers get on the engine
//! now, and gVisor's health: a sandbox it could not make keeps roles set to `auto` on runc
//! until a probe (a bare sandbox running `true`) starts again.

use std::time::{Duration, Instant};

use super::{ContainerError, ContainerManager, RunRequest, GVISOR_COMPAT};
use crate::base::auth::{Context, Role};
use crate::sandbox::container::{ContainerKind, ContainerRuntime, Isolation, RuntimeError};

/// The refusal of a container whose role must run under gVisor while gVisor does not start
/// sandboxes: the cause, and what else the person can do.
pub(super) fn gvisor_refused(role: Role) -> ContainerError {
    ContainerError::Isolation(format!(
        "{role} containers must run under gVisor (container.isolation.{role} is gvisor), but gVisor does not start \
         sandboxes now: `baaaht doctor` on the host says why and what to fix. Or set container.isolation.{role} to \
         auto to run them under runc until it does",
        role = role.as_str()
    ))
}

impl ContainerManager {
    /// The tier a container of `role` gets now, without using up gVisor's retry (a pooled
    /// container of another tier is not claimed); none without an engine or a tier.
    pub async fn tier(&self, role: Role) -> Option<Isolation> {
        let runtime = self.runtime().await.ok()?;
        let asked = self.policy.container_config().isolation_of(role);
        let tier = Isolation::resolve(asked, runtime.engine()).ok()?;
        if tier == Isolation::Gvisor && self.gvisor.down().is_some() {
            return (asked == crate::base::config::IsolationChoice::Auto).then_some(Isolation::Runc);
        }
        Some(tier)
    }

    /// What every role that takes a tier gets on the engine now (none while there is none).
    pub fn tiers(&self) -> Vec<crate::sandbox::container::Tier> {
        use crate::base::config::IsolationChoice;
        let mut tiers = match &self.engine.borrow().status {
            crate::sandbox::container::EngineStatus::Ready(info) => {
                crate::sandbox::container::tiers(self.policy.container_config(), info)
            }
            _ => vec![],
        };
        if let Some(cause) = self.gvisor.down() {
            for tier in tiers.iter_mut().filter(|tier| tier.tier == Some(Isolation::Gvisor)) {
                tier.reason = format!("gVisor stopped starting sandboxes: {cause}");
                tier.tier = (tier.asked == IsolationChoice::Auto).then_some(Isolation::Runc);
            }
        }
        tiers
    }

    /// Why gVisor does not start sandboxes now (found by a start that failed), if it does not.
    pub fn gvisor_down(&self) -> Option<String> {
        self.gvisor.down()
    }

    /// The tier `role`'s containers get on `runtime`'s engine (`container.isolation`).
    pub fn isolation(&self, runtime: &dyn ContainerRuntime, role: Role) -> Result<Isolation, ContainerError> {
        let asked = self.policy.container_config().isolation_of(role);
        let mut tier = Isolation::resolve(asked, runtime.engine())
            .map_err(|why| ContainerError::Isolation(format!("{} containers: {why}", role.as_str())))?;
        // gVisor registered but not starting sandboxes: `auto` stays on runc until a retry is
        // due; `gvisor` is refused with the cause until then.
        if tier == Isolation::Gvisor && !self.gvisor.try_now() {
            if asked != crate::base::config::IsolationChoice::Auto {
                return Err(gvisor_refused(role));
            }
            tier = Isolation::Runc;
        }
        let compat = self.agent_binary.with_file_name(GVISOR_COMPAT);
        if tier == Isolation::Gvisor && !compat.is_file() {
            return Err(ContainerError::Isolation(format!(
                "{} containers run under gVisor, which needs {} beside baaaht-agent: build it with \
                 `cargo build -p baaaht-gvisor-compat` (scripts/up does), or set container.isolation.{} to runc",
                role.as_str(),
                compat.display(),
                role.as_str()
            )));
        }
        Ok(tier)
    }

    /// Starts a sandbox under gVisor running `true` and waits for it to end (`baaaht doctor`): its time, or
    /// the cause found when it does not start (which also keeps roles set to `auto` on runc
    /// until it does, as a failed start of theirs would). None where the engine has no gVisor.
    pub async fn probe_gvisor(&self) -> Option<Result<Duration, ContainerError>> {
        let runtime = self.runtime().await.ok()?;
        runtime.engine().gvisor.as_ref().ok()?;
        Some(match self.bare_sandbox(&*runtime).await {
            Ok(took) => {
                if self.gvisor.worked() {
                    tracing::info!("gVisor starts sandboxes again: roles set to auto are back on it");
                }
                Ok(took)
            }
            Err(Ok(error)) => Err(ContainerError::GvisorDown(self.gvisor_failed(&*runtime, &error))),
            Err(Err(why)) => Err(why),
        })
    }

    /// Starts a bare sandbox under gVisor running `true` (no mounts of anyone's, no socket, the
    /// base image) and waits for it to end: its time; else the engine's error when gVisor
    /// could not make it (`Err(Ok)`), or what else went wrong (`Err(Err)`).
    pub(super) async fn bare_sandbox(
        &self,
        runtime: &dyn ContainerRuntime,
    ) -> Result<Duration, Result<RuntimeError, ContainerError>> {
        let request = RunRequest::system_check("gvisor-probe", Context::user("baaaht-self-test"), vec!["true".into()]);
        // No slot: it lives a second, and a doctor filling the slots must count only its own.
        let (_, _, mut spec) =
            self.prepare(&request, ContainerKind::Task, (false, false), Isolation::Gvisor).map_err(Err)?;
        // Named for what it is: never taken for a session's tool container.
        spec.name = spec.name.replacen("baaaht-tool-", "baaaht-gvisor-probe-", 1);
        let name = spec.name.clone();
        let started = Instant::now();
        match self.create_and_start(runtime, &spec, String::new()).await {
            Ok(id) => {
                let ended = tokio::time::timeout(Duration::from_secs(60), runtime.wait(&id))
                    .await
                    .unwrap_or(Err(RuntimeError::Hung { operation: "wait for a sandbox running `true`", seconds: 60 }));
                self.cleanup(runtime, &id, &name).await;
                match ended {
                    Ok(exit) if exit.code == 0 => Ok(started.elapsed()),
                    Ok(exit) => Err(Err(ContainerError::ProbeExit(exit.code))),
                    Err(error) => Err(Err(ContainerError::ProbeWait(error))),
                }
            }
            Err(error) if crate::sandbox::container::gvisor::is_sandbox_failure(&error) => Err(Ok(error)),
            Err(error) => Err(Err(error.into())),
        }
    }

    /// A sandbox gVisor could not make: its cause, found on the host, told to the health
    /// record (and logged once when gVisor was working until now).
    pub(super) fn gvisor_failed(&self, runtime: &dyn ContainerRuntime, error: &RuntimeError) -> String {
        let engine = runtime.engine();
        let message = error.to_string();
        let cause = crate::sandbox::container::gvisor::cause(
            &message,
            engine.gvisor_program.as_deref(),
            engine.data_root.as_deref(),
        );
        if self.gvisor.failed(&cause) {
            tracing::warn!(
                %cause,
                error = %message,
                "gVisor stopped starting sandboxes: roles set to auto run under runc until it works again (tried \
                 again every {} s); those set to gvisor are refused; see `baaaht doctor`",
                crate::sandbox::container::gvisor::RETRY.as_secs()
            );
        }
        cause
    }
}
