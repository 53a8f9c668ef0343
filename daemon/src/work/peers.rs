//! A container on the far end of a reverse stream: an agent (TakeTurns) or a tool runner
//! (ServeTools) connects to the daemon, and the daemon sends it work down the stream the RPC
//! answers with. Each piece of work carries an id; the answer that comes back up under that id
//! completes its waiter. Health probes travel beside the work, so a busy container still
//! answers and only a stuck one fails.
//!
//! The agent pool and the tool runners each keep their connected containers in a
//! [`Connected`], a [`Peer`] each; `server/` turns what goes down into the wire's messages and
//! what comes up into [`Up`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::task::TaskTracker;

use crate::base::auth::ContainerIdentity;
use crate::work::health::{self, ProbeError, ProbeSlot, Probed};

/// What the daemon sends a peer: work, or a health probe.
#[derive(Debug, Clone, PartialEq)]
pub enum Down<W> {
    Work(W),
    Probe(health::Probe),
}

/// What a peer sends back: the answer to the work with `id`, or to a probe.
#[derive(Debug, Clone, PartialEq)]
pub enum Up<A> {
    Answer {
        id: String,
        answer: A,
    },
    Health(health::Answer),
    /// Anything else it says (a greeting), which asks for nothing.
    Other,
}

/// The peer went away before it answered (or could be sent the work).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the container went away")]
pub struct Lost;

/// Why a peer's stream broke: the message of the status it ended with, as the wire gave it
/// (there is nothing in it to take apart; it goes to the log).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StreamError(pub String);

/// One connected container: where its work goes down and who waits for its answers.
#[derive(Debug)]
pub struct Peer<W, A> {
    pub identity: ContainerIdentity,
    down: mpsc::Sender<Down<W>>,
    pending: Arc<Mutex<HashMap<String, oneshot::Sender<A>>>>,
    probe: Arc<ProbeSlot>,
}

impl<W, A> Clone for Peer<W, A> {
    fn clone(&self) -> Self {
        Peer {
            identity: self.identity.clone(),
            down: self.down.clone(),
            pending: self.pending.clone(),
            probe: self.probe.clone(),
        }
    }
}

impl<W: Send + 'static, A: Send + 'static> Peer<W, A> {
    /// A peer for `identity`, and what to send it (at most `queue` pieces waiting).
    pub fn new(identity: &ContainerIdentity, queue: usize) -> (Peer<W, A>, mpsc::Receiver<Down<W>>) {
        let (down, receiver) = mpsc::channel(queue);
        let peer =
            Peer { identity: identity.clone(), down, pending: Arc::default(), probe: Arc::new(ProbeSlot::default()) };
        (peer, receiver)
    }

    /// Sends `work`, answered under `id`; the answer arrives on what this returns, or the
    /// waiter is dropped when the peer goes away.
    pub async fn send(&self, id: &str, work: W) -> Result<oneshot::Receiver<A>, Lost> {
        let (done, answer) = oneshot::channel();
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_string(), done);
        if self.down.send(Down::Work(work)).await.is_err() {
            self.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
            return Err(Lost);
        }
        Ok(answer)
    }

    /// Asks the peer whether it is well, waiting up to `timeout`.
    pub async fn probe(&self, timeout: Duration) -> Result<health::Answer, ProbeError> {
        let found = Some((self.down.clone(), self.probe.clone()));
        health::probe_over(found, &self.identity.name, Down::Probe, timeout).await
    }

    /// Where its work goes down, for what is sent beside the work (a tunnel's bytes).
    pub fn down(&self) -> mpsc::Sender<Down<W>> {
        self.down.clone()
    }

    /// The peer as the health monitor names it.
    pub fn probed(&self) -> Probed {
        Probed::from(&self.identity)
    }

    /// Reads what the peer sends until its stream ends or breaks, completing the waiters;
    /// returns why it ended when it broke. Every waiter still pending is then dropped (its
    /// work is lost).
    pub async fn pump(
        &self,
        mut ups: impl tokio_stream::Stream<Item = Result<Up<A>, StreamError>> + Unpin,
    ) -> Option<StreamError> {
        use tokio_stream::StreamExt as _;
        let broke = loop {
            match ups.next().await {
                Some(Ok(Up::Answer { id, answer })) => {
                    let waiter = self.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
                    match waiter {
                        // silent-ok: the caller may have given up (a timeout, a cancelled call).
                        Some(waiter) => drop(waiter.send(answer)),
                        None => tracing::warn!(container = %self.identity.name, id, "an answer to nothing pending"),
                    }
                }
                Some(Ok(Up::Health(answer))) => self.probe.answer(answer),
                Some(Ok(Up::Other)) => {}
                Some(Err(why)) => break Some(why),
                None => break None,
            }
        };
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).clear();
        broke
    }
}

/// The containers of one kind connected now (`what`: "agent", "tool runner"), by container
/// name, and a signal each time one comes or goes.
#[derive(Debug)]
pub struct Connected<W, A> {
    what: &'static str,
    peers: Mutex<HashMap<String, Peer<W, A>>>,
    changes: watch::Sender<u64>,
}

impl<W: Send + 'static, A: Send + 'static> Connected<W, A> {
    pub fn new(what: &'static str) -> Connected<W, A> {
        Connected { what, peers: Mutex::default(), changes: watch::channel(0).0 }
    }

    fn peers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Peer<W, A>>> {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn contains(&self, container: &str) -> bool {
        self.peers().contains_key(container)
    }

    pub fn len(&self) -> usize {
        self.peers().len()
    }

    pub fn is_empty(&self) -> bool {
        self.peers().is_empty()
    }

    pub fn get(&self, container: &str) -> Option<Peer<W, A>> {
        self.peers().get(container).cloned()
    }

    /// Forgets `container` (it is being removed); its stream ends on its own.
    pub fn forget(&self, container: &str) {
        self.peers().remove(container);
    }

    /// What tells of the next arrival or departure: take it before starting a container,
    /// then [`Connected::wait_for`] it.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Whether `container` connected before `deadline`.
    pub async fn wait_for(
        &self,
        changes: &mut watch::Receiver<u64>,
        container: &str,
        deadline: tokio::time::Instant,
    ) -> bool {
        while !self.contains(container) {
            if tokio::time::timeout_at(deadline, changes.changed()).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Registers the container `identity`, connected now, and returns what to send it (at
    /// most `queue` pieces waiting); what it sends up on `ups` completes its waiters, pumped
    /// on `tracker` until its stream ends, when it is forgotten.
    pub fn attach(
        self: &Arc<Self>,
        identity: &ContainerIdentity,
        queue: usize,
        ups: impl tokio_stream::Stream<Item = Result<Up<A>, StreamError>> + Unpin + Send + 'static,
        tracker: &TaskTracker,
    ) -> mpsc::Receiver<Down<W>> {
        let (peer, receiver) = Peer::new(identity, queue);
        let name = identity.name.clone();
        self.peers().insert(name.clone(), peer.clone());
        self.changes.send_modify(|count| *count += 1);
        let connected = self.clone();
        tracker.spawn(async move {
            if let Some(error) = peer.pump(ups).await {
                tracing::warn!(container = %name, %error, "the {}'s stream broke", connected.what);
            }
            connected.peers().remove(&name);
            connected.changes.send_modify(|count| *count += 1);
            tracing::info!(container = %name, "{} disconnected", connected.what);
        });
        receiver
    }

    /// The connected containers, for the health monitor.
    pub fn probe_targets(&self) -> Vec<Probed> {
        self.peers().values().map(Peer::probed).collect()
    }

    /// Asks `container` whether it is well, over its own stream.
    pub async fn probe(&self, container: &str, timeout: Duration) -> Result<health::Answer, ProbeError> {
        let peer = self.get(container).ok_or(ProbeError::Gone)?;
        peer.probe(timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::auth::{Context, Role};

    fn identity() -> ContainerIdentity {
        ContainerIdentity {
            name: "baaaht-tool-1".into(),
            role: Role::Tool,
            session_id: "s1".into(),
            context: Context::user("alice"),
        }
    }

    #[tokio::test]
    async fn answers_complete_their_own_waiters_and_a_broken_stream_drops_the_rest() {
        let (peer, mut down) = Peer::<String, String>::new(&identity(), 4);
        let first = peer.send("a", "work a".into()).await.expect("sent");
        let second = peer.send("b", "work b".into()).await.expect("sent");
        assert_eq!(down.recv().await, Some(Down::Work("work a".into())));
        assert_eq!(down.recv().await, Some(Down::Work("work b".into())));
        let ups = tokio_stream::iter(vec![
            Ok(Up::Other),
            Ok(Up::Answer { id: "a".into(), answer: "done a".into() }),
            Ok(Up::Answer { id: "zz".into(), answer: "for no one".into() }),
            Err(StreamError("the stream broke".into())),
        ]);
        assert_eq!(peer.pump(ups).await, Some(StreamError("the stream broke".into())));
        assert_eq!(first.await, Ok("done a".to_string()));
        assert!(second.await.is_err(), "b's waiter is dropped: its work is lost");
    }

    #[tokio::test]
    async fn a_probe_is_answered_beside_the_work() {
        let (peer, mut down) = Peer::<String, String>::new(&identity(), 4);
        let (ups, stream) = mpsc::channel(4);
        let pumping = {
            let peer = peer.clone();
            tokio::spawn(async move { peer.pump(tokio_stream::wrappers::ReceiverStream::new(stream)).await })
        };
        let answering = tokio::spawn(async move {
            let Some(Down::Probe(probe)) = down.recv().await else { panic!("a probe") };
            assert_eq!(probe.container, "baaaht-tool-1");
            let answer = health::Answer { probe: probe.probe, status: "healthy".into(), message: String::new() };
            ups.send(Ok(Up::Health(answer))).await.expect("answered");
        });
        let answer = peer.probe(Duration::from_secs(5)).await.expect("healthy");
        assert_eq!(answer.status, "healthy");
        answering.await.expect("the peer");
        pumping.abort();
    }

    #[tokio::test]
    async fn work_for_a_peer_that_is_gone_is_lost() {
        let (peer, down) = Peer::<String, String>::new(&identity(), 1);
        drop(down);
        assert_eq!(peer.send("a", "work".into()).await.err(), Some(Lost));
        assert!(peer.pending.lock().expect("pending").is_empty(), "nothing is left waiting");
    }

    #[tokio::test]
    async fn a_connection_is_known_while_its_stream_lasts_and_waiters_hear_of_it() {
        let connected = Arc::new(Connected::<String, String>::new("tool runner"));
        let tracker = TaskTracker::new();
        let mut changes = connected.changes();
        let soon = tokio::time::Instant::now() + Duration::from_millis(50);
        assert!(!connected.wait_for(&mut changes, "baaaht-tool-1", soon).await, "nobody connected");
        let (ups, stream) = mpsc::channel::<Result<Up<String>, StreamError>>(4);
        let mut down = connected.attach(&identity(), 4, tokio_stream::wrappers::ReceiverStream::new(stream), &tracker);
        let later = tokio::time::Instant::now() + Duration::from_secs(5);
        assert!(connected.wait_for(&mut changes, "baaaht-tool-1", later).await);
        assert_eq!(connected.probe_targets().len(), 1);
        let peer = connected.get("baaaht-tool-1").expect("connected");
        let answer = peer.send("c1", "work".into()).await.expect("sent");
        assert_eq!(down.recv().await, Some(Down::Work("work".to_string())));
        ups.send(Ok(Up::Answer { id: "c1".into(), answer: "done".into() })).await.expect("up");
        assert_eq!(answer.await.expect("answered"), "done");
        changes.mark_unchanged();
        drop(ups);
        changes.changed().await.expect("told of the departure");
        assert!(!connected.contains("baaaht-tool-1") && connected.is_empty());
        let gone = connected.probe("baaaht-tool-1", Duration::from_millis(10)).await;
        assert_eq!(gone.expect_err("gone").to_string(), "it is no longer connected");
        tracker.close();
        tracker.wait().await;
    }
}
