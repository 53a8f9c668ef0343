//! Health checks of the long-running containers (spec §18.3): every
//! `orchestrator.health_check.interval` the daemon probes each connected agent and tool runner
//! over its own stream (the probe travels beside the work, so a busy container still answers;
//! only a stuck one fails), counts failures in a row, and after `failure_threshold` of them
//! restarts the container and tells the admins (their inbox, and the log). The LLM gateway and
//! the web and Slack gateways are probed by their supervisors (`llm.rs`, `gateways/supervise.rs`)
//! through the ContainerHealth service ([`watch_service`]).

pub mod monitor;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baaaht_proto::v1;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::base::auth::{Context, Role};
use crate::base::config::NotifyChannel;
use crate::store::inbox::{Inbox, Item};

static NEXT_PROBE: AtomicU64 = AtomicU64::new(1);

/// Probes a service's ContainerHealth on `channel` every `config.interval` until
/// `config.failure_threshold` probes in a row fail, `exited` resolves (with why), or `cancel`;
/// returns why it stopped watching, as a sentence and as `unhealthy` or `exited`. Every answer
/// is shown to `on_answer` (e.g. for metrics it carries).
pub async fn watch_service(
    channel: tonic::transport::Channel,
    what: &str,
    config: &crate::base::config::HealthCheckConfig,
    exited: impl std::future::Future<Output = String>,
    cancel: &CancellationToken,
    mut on_answer: impl FnMut(&v1::HealthCheckResponse),
) -> (String, &'static str) {
    let mut client = v1::container_health_client::ContainerHealthClient::new(channel);
    let interval = Duration::from_millis(config.interval.max(10));
    let timeout = Duration::from_millis(config.timeout.max(10));
    let threshold = config.failure_threshold.max(1);
    let mut failures = 0;
    let mut exited = std::pin::pin!(exited);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return ("the daemon is stopping".into(), "exited"),
            reason = &mut exited => return (reason, "exited"),
            () = tokio::time::sleep(interval) => {}
        }
        let probe = probe_request(what);
        let check = client.health_check(v1::HealthCheckRequest { container_id: probe.container, probe: probe.probe });
        let problem = match tokio::time::timeout(timeout, check).await {
            Ok(Ok(response)) => {
                let response = response.into_inner();
                on_answer(&response);
                (response.status == "unhealthy").then(|| format!("health check failed: {}", response.message))
            }
            Ok(Err(status)) => Some(format!("health check failed: {}", status.message())),
            Err(_) => Some(format!("health check got no answer within {} ms", timeout.as_millis())),
        };
        match problem {
            None => failures = 0,
            Some(problem) => {
                failures += 1;
                tracing::warn!(failures, threshold, %problem, service = what, "a health check failed");
                if failures >= threshold {
                    return (format!("{problem} ({failures} checks in a row)"), "unhealthy");
                }
            }
        }
    }
}

/// A health probe of a container, numbered so that a late answer is not taken for the next
/// probe's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub container: String,
    pub probe: u64,
}

/// Why a probe of a container failed: what the health board shows and the admins are told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error("it is no longer connected")]
    Gone,
    #[error("its stream is closed")]
    Closed,
    #[error("no answer within {} ms", .0.as_millis())]
    NoAnswer(Duration),
    /// It answered `unhealthy`, with its message.
    #[error("it reports: {0}")]
    Unhealthy(String),
    #[error("it went away")]
    WentAway,
}

/// A container's answer to a [`Probe`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    pub probe: u64,
    /// `healthy`, `degraded` or `unhealthy`.
    pub status: String,
    pub message: String,
}

/// A fresh probe for `container`.
pub fn probe_request(container: &str) -> Probe {
    Probe { container: container.to_string(), probe: NEXT_PROBE.fetch_add(1, Ordering::Relaxed) }
}

/// The outstanding probe of one connection and who waits for its answer.
#[derive(Debug, Default)]
pub struct ProbeSlot(Mutex<Option<(u64, oneshot::Sender<Answer>)>>);

impl ProbeSlot {
    /// Completes the waiting probe if `response` answers it; a late answer to an older probe is
    /// dropped.
    pub fn answer(&self, response: Answer) {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_some_and(|(probe, _)| *probe == response.probe) {
            if let Some((_, waiter)) = slot.take() {
                // silent-ok: the prober may have given up.
                let _ = waiter.send(response);
            }
        }
    }

    /// Sends `message` (carrying `probe`) on `stream` and waits up to `timeout` for the answer.
    pub async fn ask<T>(
        &self,
        stream: &mpsc::Sender<T>,
        message: T,
        probe: u64,
        timeout: Duration,
    ) -> Result<Answer, ProbeError> {
        let (waiter, answer) = oneshot::channel();
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some((probe, waiter));
        let deadline = tokio::time::Instant::now() + timeout;
        match tokio::time::timeout_at(deadline, stream.send(message)).await {
            Ok(Ok(())) => {}
            Ok(Err(_closed)) => return Err(ProbeError::Closed),
            Err(_) => return Err(ProbeError::NoAnswer(timeout)),
        }
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(Ok(response)) if response.status == "unhealthy" => Err(ProbeError::Unhealthy(response.message)),
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_dropped)) => Err(ProbeError::WentAway),
            Err(_) => Err(ProbeError::NoAnswer(timeout)),
        }
    }
}

/// A container the monitor probes.
#[derive(Debug, Clone)]
pub struct Probed {
    pub name: String,
    pub role: Role,
    pub session: String,
    pub context: Context,
}

impl From<&crate::base::auth::ContainerIdentity> for Probed {
    fn from(identity: &crate::base::auth::ContainerIdentity) -> Probed {
        Probed {
            name: identity.name.clone(),
            role: identity.role,
            session: identity.session_id.clone(),
            context: identity.context.clone(),
        }
    }
}

/// Probes `container` over its work `stream` (found by the caller, `None` when it is no longer
/// connected), wrapping the probe into a message with `wrap`.
pub async fn probe_over<T>(
    found: Option<(mpsc::Sender<T>, Arc<ProbeSlot>)>,
    container: &str,
    wrap: impl FnOnce(Probe) -> T,
    timeout: Duration,
) -> Result<Answer, ProbeError> {
    let (stream, slot) = found.ok_or(ProbeError::Gone)?;
    let request = probe_request(container);
    let probe = request.probe;
    slot.ask(&stream, wrap(request), probe, timeout).await
}

/// The last verdict on each probed container, for `baaaht status`.
#[derive(Debug, Default)]
pub struct Board(Mutex<HashMap<String, Verdict>>);

#[derive(Debug, Clone)]
struct Verdict {
    failures: u32,
    problem: String,
}

impl Board {
    /// `healthy`, `failing (N checks): why`, or `unchecked` for a container not probed yet.
    pub fn health_of(&self, container: &str) -> String {
        match self.0.lock().unwrap_or_else(PoisonError::into_inner).get(container) {
            None => "unchecked".into(),
            Some(verdict) if verdict.failures == 0 => "healthy".into(),
            Some(verdict) => format!("failing ({} checks): {}", verdict.failures, verdict.problem),
        }
    }

    /// Records a probe's outcome; returns the failures in a row.
    pub fn record(&self, container: &str, outcome: &Result<Answer, ProbeError>) -> u32 {
        let mut board = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let verdict = board.entry(container.to_string()).or_insert(Verdict { failures: 0, problem: String::new() });
        match outcome {
            Ok(_) => *verdict = Verdict { failures: 0, problem: String::new() },
            Err(problem) => {
                verdict.failures += 1;
                verdict.problem = problem.to_string();
            }
        }
        verdict.failures
    }

    fn keep_only(&self, names: &[String]) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).retain(|name, _| names.contains(name));
    }
}

/// Tells the admins (`system.admin_users`) what the daemon did on its own, or what waits for
/// them: in their inbox (or on Slack, as `orchestrator.health_check.notify_channel` says), and
/// in the log for when none is configured.
#[derive(Debug)]
pub struct Notifier {
    inbox: Arc<Inbox>,
    events: Arc<crate::store::events::EventBus>,
    admins: Vec<String>,
    channel: NotifyChannel,
    /// Where the admins' profiles say their notices go.
    data_dir: crate::base::datadir::DataDir,
}

impl Notifier {
    pub fn new(
        inbox: Arc<Inbox>,
        events: Arc<crate::store::events::EventBus>,
        admins: Vec<String>,
        channel: NotifyChannel,
        data_dir: crate::base::datadir::DataDir,
    ) -> Notifier {
        Notifier { inbox, events, admins, channel, data_dir }
    }

    /// What the admins must act on before it hurts (a disk nearly full): on each one's
    /// preferred channel (else the one they last wrote from, while it is connected), else in
    /// their inbox.
    pub fn warn(&self, title: &str, content: &str) {
        use crate::store::inbox::{channel_for, tell};
        for admin in &self.admins {
            let admin = Context::user(admin);
            let channel = channel_for(&self.data_dir, &self.events, &admin, "");
            let notice = crate::store::events::Notice {
                title: title.to_string(),
                content: content.to_string(),
                is_error: true,
                ..Default::default()
            };
            tell(&self.inbox, &self.events, &admin, channel.as_deref(), notice, None);
        }
    }

    /// What the daemon did on its own (a restart, a gateway given up on).
    pub fn notify(&self, title: &str, content: &str) {
        tracing::error!(title, content, "notice for the admins");
        for admin in &self.admins {
            tell_admin(&self.inbox, &self.events, &Context::user(admin), self.channel, title, content, "");
        }
    }

    /// What waits for the admins (someone asking to be let in): in their inbox, and at once on
    /// the channels they have open.
    pub fn ask(&self, title: &str, content: &str) {
        self.keep(title, content);
        for admin in &self.admins {
            let said = crate::store::events::Kind::message(content.to_string());
            self.events.publish(&Context::user(admin), crate::store::events::Event::of_turn("", "", "", said));
        }
    }

    fn keep(&self, title: &str, content: &str) {
        for admin in &self.admins {
            if let Err(error) = self.inbox.push(&Context::user(admin), Item::new(title, content, "", "")) {
                tracing::error!(admin, error = %baaaht_proto::error_chain(&error), "cannot tell an admin");
            }
        }
    }
}

/// Tells `admin` a notice (`title`, `content`, about `task` if any) by `channel`: on Slack while
/// a Slack gateway follows them (it writes to the chat it last answered them in), else in their
/// inbox, which `log` always uses (the log line is the caller's).
pub fn tell_admin(
    inbox: &Inbox,
    events: &crate::store::events::EventBus,
    admin: &Context,
    channel: NotifyChannel,
    title: &str,
    content: &str,
    task: &str,
) {
    use crate::store::events::{Event, Kind, Notice};
    if channel == NotifyChannel::Slack && events.is_connected(admin, "slack") {
        let notice = Notice {
            task_id: task.to_string(),
            run_id: String::new(),
            title: title.to_string(),
            content: content.to_string(),
            channel: "slack".into(),
            is_error: true,
            heartbeat: false,
        };
        events.publish(admin, Event::of_session("", Kind::Notice(notice)));
        tracing::info!(admin = %admin, "notice for an admin sent to Slack");
        return;
    }
    if let Err(error) = inbox.push(admin, Item::new(title, content, task, "")) {
        tracing::error!(admin = %admin, error = %baaaht_proto::error_chain(&error), "cannot tell an admin");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_admin_is_told_on_slack_when_a_slack_gateway_follows_them_else_in_the_inbox() {
        let dir = tempfile::tempdir().expect("tempdir");
        let inbox = Inbox::new(dir.path().to_path_buf());
        let events = crate::store::events::EventBus::default();
        let (alice, bob) = (Context::user("alice"), Context::user("bob"));
        let _following = events.connect(&alice, "slack");
        let mut heard = events.subscribe();
        for admin in [&alice, &bob] {
            tell_admin(&inbox, &events, admin, NotifyChannel::Slack, "Gateway given up", "slack-home stopped", "");
        }
        let (to, event) = heard.recv().await.expect("a notice");
        assert_eq!(to, alice);
        match event.kind {
            crate::store::events::Kind::Notice(notice) => {
                assert_eq!((notice.channel.as_str(), notice.content.as_str()), ("slack", "slack-home stopped"))
            }
            other => panic!("not a notice: {other:?}"),
        }
        assert!(inbox.list(&alice, false, false).expect("inbox").is_empty(), "told on Slack, not kept twice");
        assert_eq!(inbox.list(&bob, false, false).expect("inbox").len(), 1, "no Slack follows bob: his inbox");
        // `log`: the inbox, whoever follows.
        tell_admin(&inbox, &events, &alice, NotifyChannel::Log, "Restarted", "the gateway restarted", "");
        assert_eq!(inbox.list(&alice, false, false).expect("inbox").len(), 1);
    }

    #[tokio::test]
    async fn a_late_answer_is_not_taken_for_the_next_probe() {
        let slot = Arc::new(ProbeSlot::default());
        let (stream, mut sent) = mpsc::channel::<u64>(4);
        let first = probe_request("c1").probe;
        let outcome = slot.ask(&stream, first, first, Duration::from_millis(20)).await;
        assert_eq!(outcome.expect_err("no answer").to_string(), "no answer within 20 ms");
        assert_eq!(sent.recv().await, Some(first));
        let second = probe_request("c1").probe;
        let answering = {
            let slot = slot.clone();
            tokio::spawn(async move {
                let probe = sent.recv().await.expect("probe sent");
                // The answer to the first probe arrives late, then the right one.
                slot.answer(Answer { probe: first, status: "unhealthy".into(), ..Default::default() });
                slot.answer(Answer { probe, status: "healthy".into(), ..Default::default() });
            })
        };
        let outcome = slot.ask(&stream, second, second, Duration::from_secs(5)).await;
        answering.await.expect("answered");
        assert_eq!(outcome.expect("healthy").probe, second);
    }

    #[test]
    fn the_board_counts_failures_in_a_row() {
        let board = Board::default();
        assert_eq!(board.health_of("c1"), "unchecked");
        let silent: Result<Answer, ProbeError> = Err(ProbeError::NoAnswer(Duration::from_millis(5)));
        assert_eq!(board.record("c1", &silent), 1);
        assert_eq!(board.record("c1", &silent), 2);
        assert_eq!(board.health_of("c1"), "failing (2 checks): no answer within 5 ms");
        assert_eq!(board.record("c1", &Ok(Answer::default())), 0);
        assert_eq!(board.health_of("c1"), "healthy");
        board.keep_only(&[]);
        assert_eq!(board.health_of("c1"), "unchecked");
    }
}
