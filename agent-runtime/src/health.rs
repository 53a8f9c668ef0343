//! Answers to the daemon's health probes (spec §18.3), for the agent loop and the tool runner:
//! the probes arrive on the same stream as the work, and a reader answers them beside the work
//! so a busy container still answers; only a stuck one fails.

use std::cell::Cell;
use std::time::Instant;

use baaaht_proto::v1;
use tokio::sync::mpsc;

/// Since when the container runs and whether it is working: what a probe's answer tells.
#[derive(Debug)]
pub struct Busy {
    started: Instant,
    since: Cell<Option<Instant>>,
}

impl Default for Busy {
    fn default() -> Self {
        Busy { started: Instant::now(), since: Cell::new(None) }
    }
}

impl Busy {
    /// Marks the start (`true`) or the end (`false`) of one piece of work.
    pub fn working(&self, working: bool) {
        self.since.set(working.then(Instant::now));
    }

    /// The answer to `probe`.
    pub fn answer(&self, probe: v1::HealthCheckRequest) -> v1::HealthCheckResponse {
        let mut metrics = std::collections::HashMap::new();
        let message = match self.since.get() {
            Some(since) => {
                let seconds = since.elapsed().as_secs();
                metrics.insert("busy_seconds".to_string(), seconds.to_string());
                format!("working for {seconds} s")
            }
            None => "idle".to_string(),
        };
        v1::HealthCheckResponse {
            status: "healthy".into(),
            message,
            uptime_seconds: self.started.elapsed().as_secs() as i64,
            metrics,
            probe: probe.probe,
        }
    }
}

/// How [`read_beside`] ended early.
#[derive(Debug)]
pub enum ReadError {
    /// The daemon's stream broke.
    Stream(tonic::Status),
    /// The stream of answers back to the daemon is closed.
    RepliesClosed,
}

/// Reads `incoming` until it ends: a probe (taken out of a message by `probe_of`) is answered
/// at once on `replies` (wrapped by `wrap`); every other message goes to `work`, which the
/// caller serves one at a time beside this.
pub async fn read_beside<T, R>(
    incoming: &mut tonic::Streaming<T>,
    probe_of: impl Fn(&mut T) -> Option<v1::HealthCheckRequest>,
    wrap: impl Fn(v1::HealthCheckResponse) -> R,
    replies: &mpsc::Sender<R>,
    work: mpsc::Sender<T>,
    busy: &Busy,
) -> Result<(), ReadError> {
    while let Some(mut message) = incoming.message().await.map_err(ReadError::Stream)? {
        if let Some(probe) = probe_of(&mut message) {
            replies.send(wrap(busy.answer(probe))).await.map_err(|_closed| ReadError::RepliesClosed)?;
        } else if work.send(message).await.is_err() {
            break;
        }
    }
    Ok(())
}
