//! What containers ask through their IPC folders (DESIGN.md §1, file-based IPC): messages to
//! deliver to their context's channels and tasks to schedule; after each pass the slots'
//! `system/` files are brought up to date. Taken every
//! `orchestrator.poll_intervals.ipc` milliseconds and whenever a call asks
//! ([`Ipc::flush`]), until the daemon stops; once every container is gone, what they queued
//! last is taken and their folders are let go.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::base::lifetime::{Subsystem, Work};
use crate::drive::scheduler::{self, Scheduler};
use crate::net::taint::{self, Taints};
use crate::sandbox::workspace::Workspaces;
use crate::store::events::EventBus;
use crate::store::inbox::Inbox;
use crate::work::ipc::Ipc;

/// What the requests are delivered and scheduled with.
#[derive(Debug)]
pub struct Requests {
    pub ipc: Arc<Ipc>,
    pub events: Arc<EventBus>,
    pub workspaces: Arc<Workspaces>,
    pub taints: Arc<Taints>,
    pub scheduler: Arc<Scheduler>,
    pub inbox: Arc<Inbox>,
    /// The slots' `system/` files, kept current after each pass.
    pub system: Arc<crate::work::system_files::SystemFiles>,
    /// Between two looks when no call asks.
    pub every: Duration,
}

impl Requests {
    /// Delivers the messages and schedules the tasks containers queued in their IPC folders;
    /// `sent` remembers what was delivered, so a message is delivered once.
    fn pass(&self, sent: &mut BTreeMap<String, Vec<u64>>) {
        self.ipc.deliver_messages(&self.events, &self.workspaces, sent);
        self.ipc.take_task_requests(&mut |context, session, request| {
            let principal = format!("ipc:{context}/{session}");
            self.taints.allow_session(session, taint::Way::ScheduleTask, &principal)?;
            scheduler::schedule_requested(&self.scheduler, &self.inbox, context, request).map_err(|why| why.to_string())
        });
    }

    async fn take(self: Arc<Self>, cancel: CancellationToken) {
        let mut sent = BTreeMap::new();
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(self.every) => {}
                () = self.ipc.woken() => {}
            }
            let requests = self.clone();
            self.ipc.pass_begins();
            let delivery = tokio::task::spawn_blocking(move || {
                requests.pass(&mut sent);
                // What no container holds any more goes, now that what it queued was taken.
                requests.ipc.sweep();
                requests.ipc.pass_ended();
                sent
            });
            match delivery.await {
                Ok(kept) => sent = kept,
                Err(error) => {
                    tracing::error!(%error, "message delivery failed");
                    sent = BTreeMap::new();
                }
            }
            self.system.refresh(&self.ipc).await;
        }
    }
}

impl Subsystem for Requests {
    fn name(&self) -> &'static str {
        "ipc"
    }

    fn run_until(self: Arc<Self>, shutdown: CancellationToken) -> Work {
        Box::pin(self.take(shutdown))
    }

    /// The containers are gone: what they queued is taken, then their folders go.
    fn drain(self: Arc<Self>) -> Work {
        Box::pin(async move {
            self.pass(&mut BTreeMap::new());
            self.ipc.let_go_all();
        })
    }
}
