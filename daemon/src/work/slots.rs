//! Room for a container start that waits for a slot (`container.max_concurrent`): one idle
//! container removed, a pooled one first (it serves nobody yet), else the one unused the
//! longest, whatever it is: an idle agent, a tool container, or an MCP server that answers no
//! call. An Assistant a person wrote to a minute ago stays; a tool container nobody called
//! for minutes goes.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::base::lifetime::{Subsystem, Work};
use crate::sandbox::container::manager::ContainerManager;
use crate::work::agents::AgentPool;
use crate::work::mcp::pool::McpPool;
use crate::work::tools::Runners;
use crate::work::warm::WarmPools;

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
    /// Whenever a start waits, removes one idle container, until `cancel`.
    async fn make_room(self: Arc<Self>, cancel: CancellationToken) {
        let mut pressure = self.containers.pressure();
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                changed = pressure.changed() => if changed.is_err() { return },
            }
            pressure.borrow_and_update();
            let removed = self.warm.evict_one().await || self.evict_longest_unused().await;
            if !removed {
                tracing::info!("no idle container to remove; the start waits for one to finish");
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
                Kind::Agent => self.agents.evict_one().await,
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
