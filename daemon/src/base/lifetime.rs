//! The daemon's lifetime as its subsystems see it: when it stops, and the tracker its shutdown
//! waits on; [`Subsystem`], the one shape of a long-lived part (started once, drained once);
//! and [`every`], the one way a subsystem repeats work until then.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The daemon's lifetime as a subsystem sees it: the token cancelled when the daemon starts
/// shutting down, and the tracker shutdown waits on.
#[derive(Debug, Clone)]
pub struct Lifetime {
    pub shutdown: CancellationToken,
    pub tasks: TaskTracker,
}

/// What a subsystem runs or drains: a future of its own, on the daemon's tracker.
pub type Work = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// One long-lived part of the daemon as its lifetime sees it. [`Lifetime::start`] runs every
/// subsystem's loop on the tracker, in order; [`Lifetime::stop`] cancels them all, waits for
/// the loops, then drains each in the reverse order, so what started first (the sockets, the
/// audit log) is tidied last.
pub trait Subsystem: Send + Sync {
    /// Its name, in its span and the log.
    fn name(&self) -> &'static str;

    /// Its loop, until `shutdown` is cancelled; none by default (a subsystem that only drains).
    fn run_until(self: Arc<Self>, shutdown: CancellationToken) -> Work {
        drop(shutdown);
        Box::pin(async {})
    }

    /// Told that the daemon stops, once the requests in flight are done and before the loops
    /// are waited for (what runs on its own token ends here); nothing by default.
    fn stopping(&self) {}

    /// What it leaves tidy once every loop stopped (containers removed, files let go, the log
    /// on disk); nothing by default.
    fn drain(self: Arc<Self>) -> Work {
        Box::pin(async {})
    }
}

/// How long the loops have to end once the daemon stops, before the drains go ahead anyway.
const LOOPS_STOP_WITHIN: Duration = Duration::from_secs(2);

impl Default for Lifetime {
    fn default() -> Lifetime {
        Lifetime::new()
    }
}

impl Lifetime {
    pub fn new() -> Lifetime {
        Lifetime { shutdown: CancellationToken::new(), tasks: TaskTracker::new() }
    }

    /// Starts every subsystem's loop on the tracker, in order.
    pub fn start(&self, subsystems: &[Arc<dyn Subsystem>]) {
        for subsystem in subsystems {
            let span = tracing::info_span!("subsystem", name = subsystem.name());
            self.tasks.spawn(subsystem.clone().run_until(self.shutdown.clone()).instrument(span));
        }
    }

    /// Stops the daemon: cancels every loop, tells each subsystem, waits for the loops (at most
    /// [`LOOPS_STOP_WITHIN`]), then drains the subsystems in the reverse order of `subsystems`.
    pub async fn stop(&self, subsystems: &[Arc<dyn Subsystem>]) {
        self.shutdown.cancel();
        for subsystem in subsystems {
            subsystem.stopping();
        }
        self.tasks.close();
        if tokio::time::timeout(LOOPS_STOP_WITHIN, self.tasks.wait()).await.is_err() {
            tracing::warn!("background tasks did not stop within {} s", LOOPS_STOP_WITHIN.as_secs());
        }
        for subsystem in subsystems.iter().rev() {
            let span = tracing::info_span!("drain", name = subsystem.name());
            subsystem.clone().drain().instrument(span).await;
        }
    }

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
