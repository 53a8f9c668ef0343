//! The events a context's channels receive (SubscribeEvents): one broadcast that every
//! subscriber filters by its context, so an event for context A never reaches B's channels.
//! The bus carries the daemon's own [`Event`]; `server/` turns each into its wire form.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::broadcast;

use crate::base::auth::{Context, Role};
use crate::store::sessions::log::Attachment;

/// One thing a context's channels are told, and the session and turn it belongs to (empty
/// when it belongs to none, as a scheduled task's notice).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub session: String,
    pub turn: String,
    pub correlation_id: String,
    pub kind: Kind,
    /// Its session holds it as entries already (a background task's result): its log does not
    /// keep it again as an activity.
    pub recorded: bool,
}

impl Event {
    /// `kind` for `session`'s turn `turn` (with its correlation id).
    pub fn of_turn(session: &str, turn: &str, correlation_id: &str, kind: Kind) -> Event {
        Event {
            session: session.to_string(),
            turn: turn.to_string(),
            correlation_id: correlation_id.to_string(),
            kind,
            recorded: false,
        }
    }

    /// This event, which its session holds as entries already.
    pub fn recorded(self) -> Event {
        Event { recorded: true, ..self }
    }

    /// `kind` for `session`, in no turn.
    pub fn of_session(session: &str, kind: Kind) -> Event {
        Event::of_turn(session, "", "", kind)
    }
}

/// What an [`Event`] tells.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A user's message as it entered the session, for every channel following it.
    UserMessage {
        entry_id: String,
        sender_id: String,
        sender_name: String,
        /// The channel it came from (`tui`, `web`, `slack/C123`…), if any.
        channel: Option<String>,
        content: String,
        attachments: Vec<Attachment>,
        /// Its words were heard from the sender's voice note.
        spoken: bool,
    },
    /// Text of the Assistant's answer as it is written.
    TextDelta { index: u32, text: String },
    /// The model's thinking as it is written.
    ThinkingDelta { index: u32, thinking: String, signature: String },
    /// A delegation `started`, `finished` or `failed`.
    Delegation { agent: Role, task: String, state: String, result: String },
    /// What an agent of the turn is doing before words come: `starting` (its container
    /// starts) or `thinking` (its model was asked).
    Phase { agent: Role, phase: &'static str },
    /// A tool call `finished` or `failed`.
    Tool { agent: Role, tool: String, state: String, duration_ms: u64 },
    /// The turn's answer, recorded as `entry_id`.
    Reply { entry_id: String, content: String },
    /// The turn failed; `for_users` when `message` is a sentence for the user who asked.
    TurnError { message: String, for_users: bool },
    /// A message for the context (an agent's `message`, a background result, a budget warning).
    Message {
        content: String,
        reply_to: String,
        metadata: BTreeMap<String, String>,
        /// Files sent with it, in the session's `sent/` ([`crate::store::sent`]).
        attachments: Vec<Attachment>,
    },
    /// A scheduled task's result or trouble.
    Notice(Notice),
    /// The conversation was moved to `leaf` by an undo or a redo (`text`: what was done).
    Moved { leaf: String, text: String },
    /// A tool's connection to `host:port` waits for someone of the context to allow it, a skill
    /// for its `review`, or an acting tool of a marked turn (`action`; host and port empty).
    ApprovalRequest {
        id: String,
        host: String,
        port: u16,
        agent: Role,
        asked_by: String,
        expires_in: u32,
        review: Option<Box<crate::store::sessions::log::SkillReview>>,
        action: Option<Box<crate::store::sessions::log::ActionReview>>,
    },
    /// It was answered (`by`; "nobody" when it timed out): `decision` once, session, always, deny
    /// (install, decline for a review).
    ApprovalSettled { id: String, decision: String, by: String },
    /// The turn read untrusted content (`source`: what, e.g. `web_fetch https://…`): some tools
    /// are paused until the next turn (DESIGN.md §10.3).
    Tainted { source: String, withheld: Vec<String> },
}

/// A scheduled task's result or trouble, for `channel` (empty: any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Notice {
    pub task_id: String,
    pub run_id: String,
    pub title: String,
    pub content: String,
    pub channel: String,
    pub is_error: bool,
    /// A heartbeat's finding, not a scheduled task's result.
    pub heartbeat: bool,
}

impl Kind {
    /// A plain message for the context.
    /// An approval request or its answer: shown to everyone following the context.
    pub fn is_approval(&self) -> bool {
        matches!(self, Kind::ApprovalRequest { .. } | Kind::ApprovalSettled { .. })
    }

    /// A memory written while reading content from outside waits for review: the text every
    /// channel can show (it names where a review is done), and the key and source in its
    /// metadata (`topic: memory-review`), from which a channel that offers the review itself
    /// (the web's settings, the TUI's /memory) says it its own way.
    pub fn memory_review(key: &str, source: &str) -> Kind {
        let content = format!(
            "A memory (`{key}`) was written while reading content from outside ({source}); it waits for your \
             review and is not used until you confirm it: in the web's settings, with /memory in the terminal \
             app, or `baaaht memory review` on the host."
        );
        let metadata = [("topic", "memory-review"), ("key", key), ("source", source)]
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        Kind::Message { content, reply_to: String::new(), metadata, attachments: vec![] }
    }

    /// A budget nearing its limit: `content` for every channel, and `topic: budget` in its
    /// metadata, for a channel that says it its own way (a push to the person's phone).
    pub fn budget_warning(content: String) -> Kind {
        let metadata = [("topic".to_string(), "budget".to_string())].into_iter().collect();
        Kind::Message { content, reply_to: String::new(), metadata, attachments: vec![] }
    }

    /// What a session's log keeps of this event, if anything: the approvals and messages (not
    /// the turn's own words, which are its entries, nor its progress and status, a turn read
    /// content from outside among them).
    pub fn activity(&self) -> Option<crate::store::sessions::log::Activity> {
        use crate::store::sessions::log::Activity;
        Some(match self {
            Kind::ApprovalRequest { id, host, port, agent, asked_by, expires_in, review, action } => {
                Activity::Approval {
                    approval: id.clone(),
                    host: host.clone(),
                    port: *port,
                    agent: agent.as_str().to_string(),
                    asked_by: asked_by.clone(),
                    expires_in: *expires_in,
                    review: review.clone(),
                    action: action.clone(),
                }
            }
            Kind::ApprovalSettled { id, decision, by } => {
                Activity::ApprovalSettled { approval: id.clone(), decision: decision.clone(), by: by.clone() }
            }
            Kind::Message { content, metadata, attachments, .. } => Activity::Message {
                content: content.clone(),
                metadata: metadata.clone(),
                attachments: attachments.clone(),
            },
            _ => return None,
        })
    }

    /// The event an activity kept in a session's log was made from.
    pub fn of_activity(activity: crate::store::sessions::log::Activity) -> Kind {
        use crate::store::sessions::log::Activity;
        match activity {
            Activity::Approval { approval, host, port, agent, asked_by, expires_in, review, action } => {
                Kind::ApprovalRequest {
                    id: approval,
                    host,
                    port,
                    agent: Role::named(&agent).unwrap_or(Role::Assistant),
                    asked_by,
                    expires_in,
                    review,
                    action,
                }
            }
            Activity::ApprovalSettled { approval, decision, by } => {
                Kind::ApprovalSettled { id: approval, decision, by }
            }
            Activity::Message { content, metadata, attachments } => {
                Kind::Message { content, reply_to: String::new(), metadata, attachments }
            }
        }
    }

    pub fn message(content: impl Into<String>) -> Kind {
        Kind::Message {
            content: content.into(),
            reply_to: String::new(),
            metadata: BTreeMap::new(),
            attachments: vec![],
        }
    }
}

/// Events queued per subscriber before a slow one starts missing them.
const BACKLOG: usize = 1024;

#[derive(Debug)]
pub struct EventBus {
    sender: broadcast::Sender<(Context, Event)>,
    /// Who follows each context now, by channel (`tui`, `web`, …): how many subscriptions.
    connected: Arc<Mutex<HashMap<(Context, String), usize>>>,
    /// The channel each context's user last wrote from.
    last_active: Mutex<HashMap<Context, String>>,
    /// What every event's text passes before a channel sees it.
    redact: Option<crate::guard::redact::Redact>,
    /// Keeps a session's approvals and notices in its log (set once the daemon has made it).
    keeper: std::sync::OnceLock<std::sync::Weak<dyn Keeper>>,
}

/// Keeps what a conversation's people are shown besides its messages ([`Kind::activity`]),
/// so that the conversation shows it again when it is opened anew.
pub trait Keeper: Send + Sync + std::fmt::Debug {
    fn keep(&self, context: &Context, session: &str, activity: crate::store::sessions::log::Activity);
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus {
            sender: broadcast::channel(BACKLOG).0,
            connected: Arc::default(),
            last_active: Mutex::default(),
            redact: None,
            keeper: std::sync::OnceLock::new(),
        }
    }
}

/// A channel following a context; it stops counting as connected when dropped.
#[derive(Debug)]
pub struct Connected {
    key: (Context, String),
    connected: Arc<Mutex<HashMap<(Context, String), usize>>>,
}

impl Drop for Connected {
    fn drop(&mut self) {
        let mut connected = self.connected.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = connected.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                connected.remove(&self.key);
            }
        }
    }
}

impl Kind {
    /// Every text a person reads, cleaned by `redact` (DESIGN.md §10.3).
    fn clean(&mut self, redact: &crate::guard::redact::Redact) {
        use crate::guard::redact::Place::Channel;
        let clean = |text: &mut String| *text = redact.clean_string(Channel, std::mem::take(text));
        match self {
            Kind::UserMessage { content, .. } => {
                clean(content);
            }
            Kind::TextDelta { text, .. } => clean(text),
            Kind::ThinkingDelta { thinking, .. } => clean(thinking),
            Kind::Delegation { task, result, .. } => {
                clean(task);
                clean(result);
            }
            Kind::Reply { content, .. } => clean(content),
            Kind::Message { content, metadata, .. } => {
                clean(content);
                metadata.values_mut().for_each(clean);
            }
            Kind::TurnError { message, .. } => clean(message),
            Kind::Notice(notice) => {
                clean(&mut notice.title);
                clean(&mut notice.content);
            }
            Kind::Tainted { source, .. } => clean(source),
            Kind::Moved { text, .. } => clean(text),
            // A command line, or a host a command made up, can carry a secret.
            Kind::ApprovalRequest { host, asked_by, review, action, .. } => {
                clean(host);
                clean(asked_by);
                review.iter_mut().flat_map(|review| review.texts_mut()).for_each(clean);
                action.iter_mut().flat_map(|action| action.texts_mut()).for_each(clean);
            }
            Kind::ApprovalSettled { by, .. } => clean(by),
            Kind::Tool { .. } | Kind::Phase { .. } => {}
        }
    }
}

impl EventBus {
    /// A bus whose events are cleaned by `redact` before any channel sees them.
    pub fn redacting(redact: crate::guard::redact::Redact) -> EventBus {
        EventBus { redact: Some(redact), ..EventBus::default() }
    }

    /// Gives `keeper` every session's approvals and notices from now on.
    pub fn kept_by(&self, keeper: std::sync::Weak<dyn Keeper>) {
        // silent-ok: the daemon sets it once; a second keeper is not taken.
        let _ = self.keeper.set(keeper);
    }

    /// Sends `event` to `context`'s subscribers; returns how many there are. An approval or a
    /// notice of a session is kept in its log first.
    pub fn publish(&self, context: &Context, mut event: Event) -> usize {
        if let Some(redact) = &self.redact {
            event.kind.clean(redact);
        }
        if let (false, false, Some(activity)) = (event.session.is_empty(), event.recorded, event.kind.activity()) {
            if let Some(keeper) = self.keeper.get().and_then(std::sync::Weak::upgrade) {
                keeper.keep(context, &event.session, activity);
            }
        }
        self.sender.send((context.clone(), event)).unwrap_or(0)
    }

    /// Counts `channel` as following `context` until the guard is dropped.
    pub fn connect(&self, context: &Context, channel: &str) -> Connected {
        let key = (context.clone(), channel.to_string());
        *self.connected.lock().unwrap_or_else(PoisonError::into_inner).entry(key.clone()).or_default() += 1;
        Connected { key, connected: self.connected.clone() }
    }

    /// Whether `channel` follows `context` now.
    pub fn is_connected(&self, context: &Context, channel: &str) -> bool {
        self.connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&(context.clone(), channel.to_string()))
    }

    /// The channels following `context` now.
    pub fn connected_channels(&self, context: &Context) -> Vec<String> {
        let connected = self.connected.lock().unwrap_or_else(PoisonError::into_inner);
        let mut channels: Vec<String> =
            connected.keys().filter(|(of, _)| of == context).map(|(_, channel)| channel.clone()).collect();
        channels.sort();
        channels
    }

    /// Notes that `context`'s user wrote from `channel`.
    pub fn note_activity(&self, context: &Context, channel: &str) {
        self.last_active.lock().unwrap_or_else(PoisonError::into_inner).insert(context.clone(), channel.to_string());
    }

    /// The channel `context`'s user last wrote from (since the daemon started).
    pub fn last_active(&self, context: &Context) -> Option<String> {
        self.last_active.lock().unwrap_or_else(PoisonError::into_inner).get(context).cloned()
    }

    /// Every event from now on; the subscriber filters by context.
    pub fn subscribe(&self) -> broadcast::Receiver<(Context, Event)> {
        self.sender.subscribe()
    }

    /// Follows `context`'s events (of `session` only, when one is named; an approval request
    /// for anyone following the context, whichever conversation they are in: it waits for
    /// whoever answers first) on `lifetime`'s tracker, until the receiver is dropped or the
    /// bus closes. What `keep` makes once the bus is subscribed to (a connected channel, a
    /// subscription's place) is held as long as it follows: nothing published once the channel
    /// counts as connected is missed.
    pub fn follow<K: Send + 'static>(
        &self,
        context: Context,
        session: String,
        lifetime: &crate::base::lifetime::Lifetime,
        keep: impl FnOnce() -> K,
    ) -> tokio::sync::mpsc::Receiver<Event> {
        let mut events = self.subscribe();
        let kept = keep();
        let (sender, receiver) = tokio::sync::mpsc::channel(256);
        lifetime.spawn(async move {
            let _kept = kept;
            loop {
                // A follower that went away is let go at once, not at its context's next event.
                let received = tokio::select! {
                    () = sender.closed() => return,
                    received = events.recv() => received,
                };
                let event = match received {
                    Ok((target, event))
                        if target == context
                            && (session.is_empty() || event.session == session || event.kind.is_approval()) =>
                    {
                        event
                    }
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, context = %context, "a slow subscriber missed events");
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                if sender.send(event).await.is_err() {
                    return;
                }
            }
        });
        receiver
    }
}
