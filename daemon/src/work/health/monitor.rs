//! The daemon's health monitor (spec §18.3): every `orchestrator.health_check.interval` it
//! probes each agent, tool runner and MCP server over its own stream; one that fails
//! `failure_threshold` probes in a row is restarted and the admins are told.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{Board, Notifier, Probed};
use crate::base::lifetime::{Subsystem, Work};

/// Which pool a probed container belongs to.
#[derive(Debug, Clone, Copy)]
enum Pool {
    Agents,
    Tools,
    Mcp,
}

/// What the monitor works with: the pools it probes and restarts, where it keeps its
/// verdicts and whom it tells.
#[derive(Debug)]
pub struct Monitor {
    pub settings: crate::base::config::HealthCheckConfig,
    pub agents: Arc<crate::work::agents::AgentPool>,
    pub tools: Arc<crate::work::tools::Runners>,
    pub mcp: Arc<crate::work::mcp::pool::McpPool>,
    pub board: Arc<Board>,
    pub metrics: Arc<crate::base::metrics::Metrics>,
    pub notifier: Arc<Notifier>,
}

/// Probes the agents, tool runners and MCP servers until `cancel`.
pub async fn monitor(monitor: Arc<Monitor>, cancel: CancellationToken) {
    let settings = &monitor.settings;
    let interval = Duration::from_millis(settings.interval.max(10));
    let timeout = Duration::from_millis(settings.timeout.max(10));
    let threshold = settings.failure_threshold.max(1);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        let targets: Vec<(Probed, Pool)> = (monitor.agents.probe_targets().into_iter().map(|t| (t, Pool::Agents)))
            .chain(monitor.tools.probe_targets().into_iter().map(|t| (t, Pool::Tools)))
            .chain(monitor.mcp.probe_targets().into_iter().map(|t| (t, Pool::Mcp)))
            .collect();
        let names: Vec<String> = targets.iter().map(|(target, _)| target.name.clone()).collect();
        monitor.board.keep_only(&names);
        let mut probes = tokio::task::JoinSet::new();
        for (target, pool) in targets {
            let monitor = monitor.clone();
            probes.spawn(async move {
                let started = Instant::now();
                let outcome = match pool {
                    Pool::Agents => monitor.agents.probe(&target.name, timeout).await,
                    Pool::Tools => monitor.tools.probe(&target.name, timeout).await,
                    Pool::Mcp => monitor.mcp.probe(&target.name, timeout).await,
                };
                (target, pool, outcome, started.elapsed())
            });
        }
        while let Some(joined) = probes.join_next().await {
            let Ok((target, pool, outcome, elapsed)) = joined else { continue };
            let failures = monitor.board.record(&target.name, &outcome);
            let Err(problem) = outcome else {
                tracing::trace!(container = %target.name, elapsed_us = elapsed.as_micros() as u64, "healthy");
                continue;
            };
            monitor.metrics.record_health_failure(target.role.as_str());
            tracing::warn!(container = %target.name, role = target.role.as_str(), failures, threshold, %problem, "a container failed a health check");
            if failures < threshold {
                continue;
            }
            monitor.metrics.record_restart(target.role.as_str(), "unhealthy");
            let restarted = match pool {
                Pool::Agents => monitor.agents.restart(&target).await.map_err(|error| error.to_string()),
                Pool::Tools => monitor.tools.restart(&target).await.map_err(|error| error.to_string()),
                Pool::Mcp => monitor.mcp.restart(&target).await.map_err(|error| error.to_string()),
            };
            let what = format!(
                "the {} container {} of {} (session {})",
                target.role, target.name, target.context, target.session
            );
            let content = match restarted {
                Ok(how) => format!("{what} failed {failures} health checks in a row ({problem}); {how}."),
                Err(error) => format!(
                    "{what} failed {failures} health checks in a row ({problem}) and could not be restarted: {error}."
                ),
            };
            monitor.notifier.notify(&format!("{} container restarted", target.role), &content);
        }
    }
}

impl Subsystem for Monitor {
    fn name(&self) -> &'static str {
        "health"
    }

    fn run_until(self: Arc<Self>, shutdown: CancellationToken) -> Work {
        Box::pin(monitor(self, shutdown))
    }
}
