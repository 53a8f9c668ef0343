//! What the browser follows: each signed-in user's events (their context's, from the daemon's
//! SubscribeEvents), numbered and kept in a ring of the latest [`KEPT`], so an SSE connection
//! that comes back with `Last-Event-ID` — a blip, a reload — gets what it missed and nothing
//! twice. A turn runs in the daemon whatever the browser does (DESIGN §9.5).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use baaaht_gateway_kit::backoff::Backoff;
use baaaht_gateway_kit::said::{said, Said};
use baaaht_gateway_kit::watch::{watch, Flow, Lost, Watch};
use baaaht_proto::client::Client;
use baaaht_proto::v1;
use tokio::sync::watch;

/// Events kept per user for a connection that comes back.
pub const KEPT: usize = 4096;

/// One user's numbered events.
#[derive(Debug)]
pub struct Feed {
    kept: Mutex<VecDeque<(u64, String)>>,
    /// The number of the newest event.
    newest: watch::Sender<u64>,
    /// The daemon's stream ended: connections close, and the browser's reconnection follows
    /// the daemon anew.
    ended: std::sync::atomic::AtomicBool,
    /// Browsers following it now, and when the last one left.
    listeners: Mutex<(usize, std::time::Instant)>,
}

/// One browser following a feed, counted while it lives.
#[derive(Debug)]
pub struct Listening(Arc<Feed>);

impl Drop for Listening {
    fn drop(&mut self) {
        let mut listeners = self.0.listeners.lock().unwrap_or_else(PoisonError::into_inner);
        *listeners = (listeners.0.saturating_sub(1), std::time::Instant::now());
    }
}

impl Feed {
    fn push(&self, json: String) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let id = kept.back().map_or(1, |(id, _)| id + 1);
        kept.push_back((id, json));
        while kept.len() > KEPT {
            kept.pop_front();
        }
        self.newest.send_replace(id);
    }

    /// The events after `after`, in order.
    pub fn after(&self, after: u64) -> Vec<(u64, String)> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.iter().filter(|(id, _)| *id > after).cloned().collect()
    }

    pub fn changes(&self) -> watch::Receiver<u64> {
        self.newest.subscribe()
    }

    /// The number of the newest event (0: none yet).
    pub fn newest(&self) -> u64 {
        *self.newest.borrow()
    }

    /// Whether the daemon's stream behind it ended.
    pub fn ended(&self) -> bool {
        self.ended.load(std::sync::atomic::Ordering::Acquire)
    }

    fn end(&self) {
        self.ended.store(true, std::sync::atomic::Ordering::Release);
        self.newest.send_modify(|_| {});
    }

    fn new() -> Feed {
        Feed {
            kept: Mutex::default(),
            newest: watch::channel(0).0,
            ended: std::sync::atomic::AtomicBool::new(false),
            listeners: Mutex::new((0, std::time::Instant::now())),
        }
    }

    /// Counts a browser following the feed until the guard is dropped.
    pub fn listen(self: &Arc<Self>) -> Listening {
        self.listeners.lock().unwrap_or_else(PoisonError::into_inner).0 += 1;
        Listening(self.clone())
    }

    /// Whether no browser has followed it for `idle`.
    fn idle_for(&self, idle: std::time::Duration) -> bool {
        let listeners = self.listeners.lock().unwrap_or_else(PoisonError::into_inner);
        listeners.0 == 0 && listeners.1.elapsed() >= idle
    }
}

/// A user's feed and the task that fills it from the daemon.
type Followed = (Arc<Feed>, Option<tokio::task::JoinHandle<()>>);

/// The user a feed or a transcript is for: their channel identity and canonical id, either of
/// which may be a message's sender.
#[derive(Debug, Clone)]
pub struct Me {
    pub identity: String,
    pub id: String,
}

impl Me {
    /// Whether `sender` is this user.
    pub fn wrote(&self, sender: &str) -> bool {
        !sender.is_empty() && (sender == self.identity || sender == self.id)
    }
}

/// The feeds, by user.
#[derive(Debug, Default)]
pub struct Hub {
    feeds: Mutex<HashMap<String, Followed>>,
    /// The approvals waiting for each user, as their pages and devices saw them asked.
    pub waiting: Arc<Waiting>,
}

/// Approvals asked and not yet answered, by user (channel identity): what the app's
/// "Approvals" shortcut opens. Kept from the events their pages and devices follow; one
/// expired is dropped when it is next looked at.
#[derive(Debug, Default)]
pub struct Waiting(Mutex<HashMap<String, Vec<Asked>>>);

/// One approval waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub id: String,
    pub session: String,
    until: std::time::Instant,
}

/// The most approvals kept waiting per user (the daemon asks at most a few at once).
const MOST_WAITING: usize = 64;

impl Waiting {
    /// Notes what `event` (followed for `identity`) says of an approval.
    pub fn note(&self, identity: &str, event: &v1::OrchestratorEvent) {
        use v1::orchestrator_event::Event;
        // Every event of a feed comes by: only an approval's take the lock.
        if !matches!(&event.event, Some(Event::Approval(_) | Event::ApprovalSettled(_))) {
            return;
        }
        let mut waiting = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match &event.event {
            Some(Event::Approval(request)) => {
                let asked = waiting.entry(identity.to_string()).or_default();
                asked.retain(|asked| asked.id != request.id && asked.until > std::time::Instant::now());
                if asked.len() >= MOST_WAITING {
                    asked.remove(0);
                }
                let lasts = std::time::Duration::from_secs(u64::from(request.expires_in_seconds));
                asked.push(Asked {
                    id: request.id.clone(),
                    session: event.session_id.clone(),
                    until: std::time::Instant::now() + lasts,
                });
            }
            Some(Event::ApprovalSettled(settled)) => {
                for asked in waiting.values_mut() {
                    asked.retain(|asked| asked.id != settled.id);
                }
                waiting.retain(|_, asked| !asked.is_empty());
            }
            _ => {}
        }
    }

    /// The approvals waiting for `identity`, the newest last.
    pub fn of(&self, identity: &str) -> Vec<Asked> {
        let mut waiting = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(asked) = waiting.get_mut(identity) else { return vec![] };
        asked.retain(|asked| asked.until > std::time::Instant::now());
        asked.clone()
    }
}

impl Hub {
    /// The feed of `user`, following the daemon through `subscribe` (a request made as the
    /// user) while it is not already.
    pub fn feed(
        &self,
        user: &str,
        me: Me,
        daemon: &Client,
        subscribe: tonic::Request<v1::EventSubscription>,
    ) -> Arc<Feed> {
        let mut feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = feeds.entry(user.to_string()).or_insert_with(|| (Arc::new(Feed::new()), None));
        let following = entry.1.as_ref().is_some_and(|task| !task.is_finished());
        if !following {
            let (feed, mut daemon) = (entry.0.clone(), daemon.clone());
            feed.ended.store(false, std::sync::atomic::Ordering::Release);
            let waiting = self.waiting.clone();
            entry.1 = Some(tokio::spawn(async move {
                follow(&feed, &me, &mut daemon, subscribe, &waiting).await;
                feed.end();
            }));
        }
        entry.0.clone()
    }
}

impl Hub {
    /// Whether a page of `identity`'s is open now (any of their feeds has a browser).
    pub fn watched_by(&self, identity: &str) -> bool {
        let feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        let prefix = format!("{identity}\n");
        feeds.iter().any(|(key, (feed, _))| {
            key.starts_with(&prefix) && feed.listeners.lock().unwrap_or_else(PoisonError::into_inner).0 > 0
        })
    }

    /// Stops following the users no browser has followed for `idle`: the daemon then no longer
    /// counts this channel as there (what it has for them goes to their inbox), and their
    /// events are let go. Returns how many were retired.
    pub fn retire_idle(&self, idle: std::time::Duration) -> usize {
        let mut feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        let before = feeds.len();
        feeds.retain(|_, (feed, task)| {
            let keep = !feed.idle_for(idle);
            if !keep {
                if let Some(task) = task.take() {
                    task.abort();
                }
            }
            keep
        });
        before - feeds.len()
    }
}

/// Fills `feed` from the daemon's events until they end (the browser's reconnection then
/// follows anew).
async fn follow(
    feed: &Feed,
    me: &Me,
    daemon: &mut Client,
    subscribe: tonic::Request<v1::EventSubscription>,
    waiting: &Waiting,
) {
    let mut watcher = Fed { feed, me, daemon, subscribe: Some(subscribe), waiting };
    watch(&mut watcher, Backoff::default()).await;
}

/// A user's feed as it follows their context: subscribed once, each event as the page reads it.
struct Fed<'a> {
    feed: &'a Feed,
    me: &'a Me,
    daemon: &'a mut Client,
    subscribe: Option<tonic::Request<v1::EventSubscription>>,
    waiting: &'a Waiting,
}

impl Watch for Fed<'_> {
    async fn subscribe(&mut self) -> Result<tonic::Streaming<v1::OrchestratorEvent>, Lost> {
        let subscribe = self.subscribe.take().ok_or(Lost::Unwanted)?;
        Ok(self.daemon.sessions.subscribe_events(subscribe).await.map_err(Lost::Refused)?.into_inner())
    }

    async fn take(&mut self, event: v1::OrchestratorEvent) -> Flow {
        self.waiting.note(&self.me.identity, &event);
        if let Some(json) = to_json(&event, self.me) {
            self.feed.push(json.to_string());
        }
        Flow::Go
    }

    async fn lost(&mut self, lost: Lost) -> Flow {
        match lost {
            Lost::Ended => {}
            Lost::Refused(status) => tracing::warn!(message = %status.message(), "cannot follow a user's events"),
            lost => tracing::warn!(message = %lost.reason(), "a user's event stream ended"),
        }
        Flow::Stop
    }
}

/// An event as `me`'s page reads it, read as every client reads it ([`said`]); none for what
/// it does not show.
pub fn to_json(event: &v1::OrchestratorEvent, me: &Me) -> Option<serde_json::Value> {
    use baaaht_gateway_kit::sentences;
    use serde_json::json;
    let (session, turn) = (&event.session_id, &event.turn_id);
    Some(match said(event)? {
        Said::Words(text) => json!({"type": "delta", "session": session, "turn": turn, "text": text}),
        Said::Answered { entry, text } => {
            json!({"type": "reply", "session": session, "turn": turn, "entry": entry, "text": text})
        }
        Said::Entered(message) => json!({"type": "user", "session": session, "turn": turn,
            "entry": message.entry_id, "mine": me.wrote(&message.sender_id), "name": message.sender_name, "text": message.content,
            "attachments": attachments_json(&message.attachments)}),
        Said::Delegation { agent, task, state } => json!({"type": "delegation", "session": session, "turn": turn,
            "agent": agent, "task": task, "state": state}),
        Said::Tool { agent, tool, state, ms } => json!({"type": "tool", "session": session, "turn": turn,
            "agent": agent, "tool": tool, "state": state, "ms": ms}),
        // A failure inside baaaht is the plain sentence; its detail is in the daemon's log.
        Said::Failed { sentence, .. } => json!({"type": "error", "session": session, "turn": turn, "text": sentence}),
        // A memory waiting for review is reviewed here, in the settings.
        Said::Sent(message) if message.metadata.get("topic").is_some_and(|topic| topic == "memory-review") => {
            let said = |name: &str| message.metadata.get(name).map_or("", String::as_str).to_string();
            let text = format!(
                "A memory (`{}`) was written while reading content from outside ({}). It is not used until you \
                 confirm it: open Settings (⚙), Memory waiting for your review.",
                said("key"),
                said("source")
            );
            json!({"type": "message", "session": session, "text": text, "files": []})
        }
        Said::Sent(message) => json!({"type": "message", "session": session, "text": message.content,
            "files": message.attachments.iter().map(|file| json!({"name": file.filename, "path": file.path,
                "type": file.mime_type, "size": file.size_bytes})).collect::<Vec<_>>()}),
        Said::Notice(notice) => json!({"type": "notice", "session": session, "text": notice.content}),
        Said::Moved { leaf, text } => json!({"type": "moved", "session": session, "leaf": leaf, "text": text}),
        // A card with the answers as buttons, whichever conversation is open; a skill's review
        // with what it is, would run and reach, and what its scan found.
        Said::Approval(request) => {
            let (text, review) = match &request.skill_review {
                Some(review) => (sentences::review_asked(&request), Some(review_json(review))),
                None => (sentences::approval_asked(&request), None),
            };
            let action = request.action.as_ref().map(|action| {
                json!({"tool": action.tool, "server": action.server,
                "lines": sentences::action_lines(action)})
            });
            let text = if action.is_some() { sentences::review_asked(&request) } else { text };
            let mut card = json!({"type": "approval", "session": session, "id": request.id,
                "agent": sentences::agent(request.agent), "host": request.host, "port": request.port,
                "asked_by": request.asked_by, "expires_in": request.expires_in_seconds,
                "expires_text": sentences::expires_text(&request), "text": text,
                "choices": sentences::choices(&request)});
            if let Some(review) = review {
                card["review"] = review;
            }
            if let Some(action) = action {
                card["action"] = action;
            }
            card
        }
        Said::Settled(settled) => json!({"type": "settled", "session": session, "id": settled.id,
            "decision": settled.decision, "by": settled.by, "text": sentences::settled(&settled.decision, &settled.by)}),
        // The status line of a turn that read untrusted content.
        Said::Tainted { source, withheld } => json!({"type": "tainted", "session": session, "turn": turn,
            "source": source, "withheld": withheld}),
        // What the turn's agent does before its words (the answer's "working" line).
        Said::Phase { agent, phase, said } => json!({"type": "phase", "session": session, "turn": turn,
            "agent": agent, "phase": phase, "said": said}),
        // The model's thinking, shown folded above its answer.
        Said::Thinking(text) => json!({"type": "thinking", "session": session, "turn": turn, "text": text}),
    })
}

/// A skill's review as the page shows it: what the daemon sent (strings from the skill's
/// repository, which the page writes as text, never markup), and the kit's lines of it: its
/// facts, and what its scan found (`scan`, then each of `found`).
fn review_json(review: &v1::SkillReview) -> serde_json::Value {
    use baaaht_gateway_kit::sentences;
    let (scan, found) = sentences::review_scan(review);
    serde_json::json!({"name": review.name, "description": review.description, "source": review.source,
        "commit": review.commit, "installs_for": review.installs_for, "replaces": review.replaces,
        "files": review.files, "bytes": review.bytes,
        "scripts": review.scripts.iter().map(|script| serde_json::json!({"path": script.path,
            "size_bytes": script.size_bytes})).collect::<Vec<_>>(),
        "packages": review.packages, "secrets": review.secrets, "hosts": review.hosts,
        "findings": review.findings,
        "facts": sentences::review_facts(review), "scan": scan, "found": found})
}

/// Files shared with a message, as the page shows them (and sends them again on a retry).
pub fn attachments_json(attachments: &[v1::Attachment]) -> serde_json::Value {
    attachments
        .iter()
        .map(|attachment| {
            serde_json::json!({"filename": attachment.filename, "mime_type": attachment.mime_type, "path": attachment.path,
                "size_bytes": attachment.size_bytes})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feed_gives_what_came_after_and_keeps_the_latest() {
        let feed = Feed::new();
        for n in 0..(KEPT + 10) {
            feed.push(format!("{n}"));
        }
        assert_eq!(feed.newest(), (KEPT + 10) as u64);
        let after = feed.after((KEPT + 8) as u64);
        assert_eq!(
            after,
            [((KEPT + 9) as u64, format!("{}", KEPT + 8)), ((KEPT + 10) as u64, format!("{}", KEPT + 9))]
        );
        assert_eq!(feed.after(0).len(), KEPT, "only the latest are kept");
    }

    #[test]
    fn a_memory_waiting_for_review_is_sent_to_the_settings_not_to_a_command() {
        let metadata = [("topic", "memory-review"), ("key", "bank"), ("source", "web_fetch https://x.example/")]
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        let message = v1::OutboundMessage {
            content: "… `baaaht memory review` on the host.".into(),
            metadata,
            ..v1::OutboundMessage::default()
        };
        let event = v1::OrchestratorEvent {
            session_id: "s-1".into(),
            event: Some(v1::orchestrator_event::Event::Message(message)),
            ..v1::OrchestratorEvent::default()
        };
        let shown = to_json(&event, &Me { identity: String::new(), id: String::new() }).expect("shown");
        let text = shown["text"].as_str().expect("text");
        assert!(text.contains("`bank`") && text.contains("open Settings (⚙)"), "{text}");
        assert!(!text.contains("baaaht memory review"), "no command the web cannot run: {text}");
    }

    #[test]
    fn a_skill_review_is_a_card_with_its_review_and_two_answers() {
        let review = v1::SkillReview {
            name: "forecast".into(),
            installs_for: "you".into(),
            scripts: vec![v1::SkillScript { path: "scripts/forecast.sh".into(), size_bytes: 812 }],
            findings: vec!["scripts/forecast.sh:3: <img src=x onerror=alert(1)>".into()],
            ..Default::default()
        };
        let request = v1::ApprovalRequest {
            id: "a-1".into(),
            agent: v1::AgentRole::Worker as i32,
            expires_in_seconds: 300,
            skill_review: Some(review),
            ..Default::default()
        };
        let event = v1::OrchestratorEvent {
            session_id: "s-1".into(),
            event: Some(v1::orchestrator_event::Event::Approval(request)),
            ..v1::OrchestratorEvent::default()
        };
        let card = to_json(&event, &Me { identity: String::new(), id: String::new() }).expect("shown");
        assert_eq!(card["text"], "The worker asks to install the skill forecast for you.");
        assert_eq!(card["expires_text"], "Declined in 300 s if nobody answers.");
        assert_eq!(card["choices"], serde_json::json!([["install", "Install"], ["decline", "Decline"]]));
        let review = &card["review"];
        assert_eq!(review["scripts"][0]["size_bytes"], 812);
        assert!(review["facts"]
            .as_array()
            .expect("facts")
            .iter()
            .any(|fact| fact == "Scripts: scripts/forecast.sh (812 bytes)."));
        assert_eq!(review["scan"], "⚠ The scan found:");
        // As the repository wrote it: the page writes it as text.
        assert_eq!(review["found"][0], "scripts/forecast.sh:3: <img src=x onerror=alert(1)>");
    }

    #[test]
    fn a_feed_nobody_follows_is_retired() {
        let hub = Hub::default();
        let (followed, idle) = (Arc::new(Feed::new()), Arc::new(Feed::new()));
        let listening = followed.listen();
        {
            let mut feeds = hub.feeds.lock().expect("lock");
            feeds.insert("u-1".into(), (followed.clone(), None));
            feeds.insert("u-2".into(), (idle, None));
        }
        assert_eq!(hub.retire_idle(std::time::Duration::ZERO), 1, "u-2 has no browser");
        assert_eq!(hub.retire_idle(std::time::Duration::ZERO), 0, "u-1 has one");
        drop(listening);
        assert_eq!(hub.retire_idle(std::time::Duration::from_secs(3600)), 0, "u-1's browser left just now");
        assert_eq!(hub.retire_idle(std::time::Duration::ZERO), 1);
    }
}
