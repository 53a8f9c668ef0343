//! The daemon's lifetime as its subsystems see it: when it stops, and the tracker its shutdown
//! waits on; and [`every`], the one way a subsystem repeats work until then.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The daemon's lifetime as a subsystem sees it: the token cancelled when the daemon starts
/// shutting down, and the tracker shutdown waits on.
#[derive(Debug, Clone)]
pub struct Lifetime {
    pub shutdown: CancellationToken,
    pub tasks: TaskTracker,
}

impl Lifetime {
    /// Runs `work` on the daemon's tracker until it ends or the daemon stops. Stopped, it is
    /// dropped where it stands, as a crash would leave it: a turn stays in `turns.json` and is
    /// ended as interrupted at the next start.
    pub fn spawn(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        let stop = self.shutdown.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = work => {}
            }
        });
    }
}

/// Runs `work` at `first`, then every `period` until `cancel`; a late run delays the next
/// rather than bunching them.
pub async fn every<F, Fut>(first: tokio::time::Instant, period: Duration, cancel: &CancellationToken, mut work: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut ticks = tokio::time::interval_at(first, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => {}
        }
        work().await;
    }
}
