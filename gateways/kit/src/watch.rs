//! Following a context's stream for as long as a client wants it: subscribe, take each event,
//! and after a lost stream wait longer each time before subscribing again. The kit's
//! between-turns follower and the TUI follow a context this way; each says what it does with
//! what comes ([`Watch`]).

use std::future::Future;

use baaaht_proto::v1;

use crate::backoff::Backoff;

/// Why a stream of events was lost.
#[derive(Debug)]
pub enum Lost {
    /// Nobody wants it any more (the watch ends without a word).
    Unwanted,
    /// The daemon refused the subscription.
    Refused(tonic::Status),
    /// The client could not get as far as subscribing (its reason).
    Failed(String),
    /// The daemon ended the stream.
    Ended,
    /// The stream broke.
    Broke(tonic::Status),
}

impl Lost {
    /// Why, in a few words (for a log or a status line).
    pub fn reason(&self) -> String {
        match self {
            Lost::Unwanted => "nobody follows it any more".into(),
            Lost::Refused(status) | Lost::Broke(status) => status.message().to_string(),
            Lost::Failed(why) => why.clone(),
            Lost::Ended => "the daemon closed the stream".into(),
        }
    }
}

/// Whether to go on following.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Go,
    Stop,
}

/// What a client does with a context's stream.
pub trait Watch: Send {
    /// Subscribes to the context's events (and does what the client does once connected).
    fn subscribe(&mut self) -> impl Future<Output = Result<tonic::Streaming<v1::OrchestratorEvent>, Lost>> + Send;

    /// Takes one event.
    fn take(&mut self, event: v1::OrchestratorEvent) -> impl Future<Output = Flow> + Send;

    /// The stream was lost (not [`Lost::Unwanted`]): whether to subscribe again after a pause.
    fn lost(&mut self, lost: Lost) -> impl Future<Output = Flow> + Send;
}

/// Follows `watcher`'s stream until it stops, subscribing again after each loss with the
/// pauses of `backoff` (back to the first once a subscription was taken).
pub async fn watch(watcher: &mut impl Watch, mut backoff: Backoff) {
    loop {
        let lost = match watcher.subscribe().await {
            Ok(mut events) => {
                backoff.reset();
                loop {
                    match events.message().await {
                        Ok(Some(event)) => {
                            if watcher.take(event).await == Flow::Stop {
                                return;
                            }
                        }
                        Ok(None) => break Lost::Ended,
                        Err(status) => break Lost::Broke(status),
                    }
                }
            }
            Err(Lost::Unwanted) => return,
            Err(lost) => lost,
        };
        if watcher.lost(lost).await == Flow::Stop {
            return;
        }
        tokio::time::sleep(backoff.next_wait()).await;
    }
}
