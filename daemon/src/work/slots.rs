//! Room for a container start that waits for a slot (`container.max_concurrent`): one idle
//! container removed, a pooled one first (it serves nobody yet), else the one unused the
//! longest, whatever it is: an idle agent, a tool container, or an MCP server that answers no
//! call. An Assistant a person wrote to a minute ago stays; a tool container nobody called
//! for minutes goes.
//!
//! Near the cap, a few slots are also kept free ahead of the starts that would wait
//! (`ContainerManager::kept_free`: a sixteenth of a cap of 16 or more): after a container
//! takes a slot, while fewer are free, the agent that has waited longest between turns goes if
//! it has for [`IDLE_AHEAD`], so that a person's next turn starts at once instead of waiting
//! for a removal. Only agents between turns go ahead of need (their session is on disk, and
//! nothing of theirs is lost); a tool container (its processes and files outside the
//! workspace), an MCP server or a pooled container goes only when a start waits.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::base::lifetime::{Subsystem, Work};
use crate::sandbox::container::manager::ContainerManager;
use crate::work::agents::AgentPool;
use crate::work::mcp::pool::McpPool;
use crate::work::tools::Runners;
use crate::work::warm::WarmPools;

/// How long an agent must have waited between turns before it is removed ahead of a start.
pub const IDLE_AHEAD: Duration = Duration::from_secs(30);

/// The pools whose idle containers may go.
#[derive(Debug)]
pub struct Slots {
    pub containers: Arc<ContainerManager>,
    pub warm: Arc<WarmPools>,
    pub agents: Arc<AgentPool>,
    pub tools: Arc<Runners>,
    pub mcp: Arc<McpPool>,
}

impl Slots {
    /// Until `cancel`: whenever a start waits, removes one idle container; whenever a
    /// container takes a slot, keeps [`ContainerManager::kept_free`] free ahead.
    async fn make_room(self: Arc<Self>, cancel: CancellationToken) {
        let mut pressure = self.containers.pressure();
        let mut taken = self.containers.slots_taken();
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                changed = pressure.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    pressure.borrow_and_update();
                    let removed = self.warm.evict_one().await || self.evict_longest_unused().await;
                    if !removed {
                        tracing::info!("no idle container to remove; the start waits for one to finish");
                    }
                }
                changed = taken.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    taken.borrow_and_update();
                    self.keep_free_ahead().await;
                }
            }
        }
    }

    /// Removes agents that have waited [`IDLE_AHEAD`] between turns, longest first, until
    /// enough slots are free; stops when a removal frees none (the engine away, or a start
    /// took it: the next slot taken looks again).
    async fn keep_free_ahead(&self) {
        let ahead = self.containers.kept_free();
        loop {
            let free = self.containers.slots_free();
            if free >= ahead || !self.agents.evict_one(IDLE_AHEAD).await || self.containers.slots_free() <= free {
                return;
            }
        }
    }
}

impl Slots {
    /// Removes the idle container unused the longest of every kind; if it went in the
    /// meantime, the next oldest.
    async fn evict_longest_unused(&self) -> bool {
        #[derive(Clone, Copy)]
        enum Kind {
            Agent,
            Tool,
            Mcp,
        }
        let mut kinds = [
            (self.agents.longest_idle(), Kind::Agent),
            (self.tools.longest_idle(), Kind::Tool),
            (self.mcp.longest_idle(), Kind::Mcp),
        ];
        kinds.sort_by_key(|(since, _)| *since);
        for (since, kind) in kinds {
            if since.is_none() {
                continue;
            }
            let removed = match kind {
                Kind::Agent => self.agents.evict_one(Duration::ZERO).await,
                Kind::Tool => self.tools.evict_one().await,
                Kind::Mcp => self.mcp.evict_one().await,
            };
            if removed {
                return true;
            }
        }
        false
    }
}

impl Subsystem for Slots {
    fn name(&self) -> &'static str {
        "slots"
    }

    fn run_until(self: Arc<Self>, shutdown: CancellationToken) -> Work {
        Box::pin(self.make_room(shutdown))
    }
}
