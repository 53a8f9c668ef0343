//! What moves a conversation: the orchestrator's turns, delegations, compaction and archival,
//! and the scheduler's heartbeats and tasks. It imports model/ and below.

pub mod orchestrator;
pub mod remember;
pub mod requests;
pub mod scheduler;

use std::sync::Arc;
use std::time::Duration;

use crate::base::Base;
use crate::guard::Guard;
use crate::model::Model;
use crate::net::Net;
use crate::people::People;
use crate::sandbox::Sandbox;
use crate::store::Store;
use crate::work::Workers;

/// The drive wing, opened.
#[derive(Debug)]
pub struct Drive {
    /// The turns in flight (`data/state/turns.json`).
    pub turns: Arc<orchestrator::Turns>,
    /// Turns, delegations, compaction and archival, over the subsystems they use.
    pub orchestrator: Arc<orchestrator::Orchestrator>,
    /// Heartbeats, scheduled tasks and the daemon's own upkeep.
    pub scheduler: Arc<scheduler::Scheduler>,
}

/// The wings the drive wing runs over.
#[derive(Debug, Clone, Copy)]
pub struct Below<'a> {
    pub guard: &'a Guard,
    pub sandbox: &'a Sandbox,
    pub store: &'a Store,
    pub net: &'a Net,
    pub people: &'a People,
    pub workers: &'a Workers,
    pub model: &'a Model,
}

impl Drive {
    pub fn open(base: &Base, below: Below<'_>) -> Result<Drive, scheduler::SchedulerError> {
        let (loaded, data_dir) = (&base.loaded, &base.data_dir);
        let settings = scheduler::Settings::from_config(&loaded.config);
        let scheduler = scheduler::Scheduler::open(&data_dir.state_dir(), settings, scheduler::Clock::System)?
            .redacting(below.guard.redact.clone());
        let turns = Arc::new(orchestrator::Turns::open(
            &data_dir.state_dir(),
            below.sandbox.containers.cap(),
            Duration::from_secs(loaded.config.container.queue_timeout),
        ));
        let reply: Arc<dyn crate::model::llm::call::Reply> = turns.clone();
        below.model.calls.replies_to(Arc::downgrade(&reply));
        let orchestrator = Arc::new(orchestrator::Orchestrator {
            loaded: loaded.clone(),
            data_dir: data_dir.clone(),
            metrics: base.metrics.clone(),
            events: below.store.events.clone(),
            sessions: below.store.sessions.clone(),
            turns: turns.clone(),
            agents: below.workers.agents.clone(),
            tools: below.workers.tools.clone(),
            containers: below.sandbox.containers.clone(),
            workspaces: below.sandbox.workspaces.clone(),
            calls: below.model.calls.clone(),
            llm: below.model.llm.clone(),
            speech: below.model.speech.clone(),
            groups: below.people.groups.clone(),
            identities: below.people.identities.clone(),
            lifetime: base.lifetime.clone(),
            taints: below.net.taints.clone(),
            redact: below.guard.redact.clone(),
            undo: below.store.undo.clone(),
        });
        below.model.calls.foresees(Arc::new(orchestrator::Foreseer(Arc::downgrade(&orchestrator))));
        Ok(Drive { turns, orchestrator, scheduler: Arc::new(scheduler) })
    }
}
