//! Room for a container start that waits for a slot (`container.max_concurrent`): one idle
//! container removed, a pooled one first (it serves nobody yet), else an idle agent (it is
//! cheap to start again), else the tool container unused the longest, else the MCP server
//! unused the longest that answers no call.

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
            let removed = self.warm.evict_one().await
                || self.agents.evict_one().await
                || self.tools.evict_one().await
                || self.mcp.evict_one().await;
            if !removed {
                tracing::info!("no idle container to remove; the start waits for one to finish");
            }
        }
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
