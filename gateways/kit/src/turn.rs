//! A turn from a chat: the person's files into the session's uploads, their message to the
//! daemon, and its answer shown as it is written — one message edited at most once per the
//! channel's update interval, with a status line while agents delegate and tools run — then
//! written whole. Approval requests for the context are handed to the channel as they come.
//! What differs per channel (how an answer is opened, edited and closed; how buttons look) is
//! its [`Surface`].

use std::future::Future;
use std::time::{Duration, Instant};

use baaaht_proto::client::Client;
use baaaht_proto::v1;

use crate::daemon::{context_of, for_users, upload, File, Person, Place, INTERNAL};

/// How long a turn may take before the gateway stops following it.
pub const TURN_LIMIT: Duration = Duration::from_secs(900);

/// The answer being written: its text so far (markdown) and what the agents are doing.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Writing {
    pub text: String,
    pub status: String,
}

/// Why an answer did not finish, as its channel tells the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trouble {
    /// Something failed: the sentence says what (already fit for the person).
    Failed(String),
    /// No answer within [`TURN_LIMIT`].
    TooLong,
}

impl Trouble {
    pub fn sentence(&self) -> String {
        match self {
            Trouble::Failed(sentence) => sentence.clone(),
            Trouble::TooLong => format!(
                "No answer after {} minutes; the gateway stopped waiting. Ask again, or read the conversation in \
                 another baaaht client later.",
                TURN_LIMIT.as_secs() / 60
            ),
        }
    }
}

/// What a channel does with one turn's answer.
pub trait Surface: Sync {
    /// The answer's message (an id, and what it shows).
    type Answer: Send;

    /// How often the answer's message may be edited (the channel's rate limit).
    fn update_every(&self) -> Duration;

    /// Puts the answer's message up before the first words (they then never wait for it).
    fn open(&self) -> impl Future<Output = Result<Self::Answer, String>> + Send;

    /// Shows what is new of `writing`; whether anything was sent.
    fn show(&self, answer: &mut Self::Answer, writing: &Writing) -> impl Future<Output = Result<bool, String>> + Send;

    /// Writes the whole answer, and `trouble` when it did not finish.
    fn close(
        &self,
        answer: Self::Answer,
        writing: &Writing,
        trouble: Option<Trouble>,
    ) -> impl Future<Output = Result<(), String>> + Send;

    /// An approval request or its answer, for whoever is in this chat.
    fn approval(&self, event: &v1::orchestrator_event::Event) -> impl Future<Output = ()> + Send;

    /// The daemon took the message.
    fn accepted(&self) {}
}

/// A message from a chat.
#[derive(Debug, Clone)]
pub struct Message {
    pub person: Person,
    pub place: Place,
    pub text: String,
    pub files: Vec<File>,
    pub channel: v1::ChannelType,
    /// The session it goes to (empty: the context's active one, made when there is none).
    pub session_id: String,
}

/// Why a turn could not be answered at all (before its answer's message was up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnError {
    /// The daemon refused or failed: a sentence for the person.
    Daemon(String),
    /// The channel did not take the answer (its detail).
    Channel(String),
}

impl std::fmt::Display for TurnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TurnError::Daemon(sentence) => write!(f, "the daemon: {sentence}"),
            TurnError::Channel(detail) => write!(f, "the channel: {detail}"),
        }
    }
}

impl std::error::Error for TurnError {}

/// The agent a delegation went to, as a status line names it.
pub fn agent_name(agent: i32) -> &'static str {
    match baaaht_proto::role_name(agent) {
        Some(name @ ("worker" | "researcher" | "coder" | "memory")) => name,
        _ => "agent",
    }
}

/// Runs `message`'s turn, its answer shown on `surface`.
pub async fn run<S: Surface>(daemon: &Client, message: Message, surface: &S) -> Result<(), TurnError> {
    let sentence = |status: tonic::Status| TurnError::Daemon(for_users(&status));
    let Message { person, place, text, files, channel, session_id } = message;
    let context = context_of(daemon, &person, &place).await.map_err(sentence)?;
    let mut daemon = daemon.clone();
    // Shared files go first into the session's uploads; the message names them.
    let (mut session_id, mut attachments) = (session_id, vec![]);
    for file in files {
        let (session, attachment) = upload(&daemon, &person, &context, &session_id, file).await.map_err(sentence)?;
        session_id = session;
        attachments.push(attachment);
    }
    let subscription =
        v1::EventSubscription { context: Some(context.clone()), session_id: String::new(), channel: channel as i32 };
    let mut events =
        daemon.sessions.subscribe_events(person.request(subscription)).await.map_err(sentence)?.into_inner();
    let user_message = v1::UserMessage {
        context: Some(context),
        sender_id: person.identity.clone(),
        channel: channel as i32,
        content: text,
        session_id,
        attachments,
        ..v1::UserMessage::default()
    };
    // The answer's message goes up while the daemon takes the message.
    let (sent, answer) = tokio::join!(daemon.sessions.send_user_message(person.request(user_message)), surface.open());
    let mut answer = answer.map_err(TurnError::Channel)?;
    let sent = match sent {
        Ok(sent) => sent.into_inner(),
        Err(status) => {
            // The answer's message is up already: it says what went wrong.
            let trouble = Some(Trouble::Failed(for_users(&status)));
            return surface.close(answer, &Writing::default(), trouble).await.map_err(TurnError::Channel);
        }
    };
    surface.accepted();
    let every = surface.update_every();
    let mut writing = Writing::default();
    // The first words show as soon as they come; then at most one update per interval.
    let mut last_update = Instant::now().checked_sub(every).unwrap_or_else(Instant::now);
    let deadline = tokio::time::Instant::now() + TURN_LIMIT;
    let trouble = loop {
        let next = tokio::time::timeout(every, events.message());
        let event = match tokio::time::timeout_at(deadline, next).await {
            Err(_) => break Some(Trouble::TooLong),
            Ok(Err(_)) => None,
            Ok(Ok(Ok(Some(event)))) => Some(event),
            Ok(Ok(Ok(None))) | Ok(Ok(Err(_))) => {
                break Some(Trouble::Failed("Lost the daemon while answering; try again.".into()))
            }
        };
        // A connection waiting for approval, whichever turn asked: the channel's buttons.
        if let Some(asked) = event.as_ref().and_then(|event| event.event.as_ref()) {
            if matches!(
                asked,
                v1::orchestrator_event::Event::Approval(_) | v1::orchestrator_event::Event::ApprovalSettled(_)
            ) {
                surface.approval(asked).await;
            }
        }
        if let Some(event) = event.filter(|event| event.turn_id == sent.turn_id) {
            use v1::orchestrator_event::Event;
            match event.event {
                Some(Event::TextDelta(delta)) => writing.text.push_str(&delta.text),
                Some(Event::Delegation(delegation)) => {
                    writing.status = format!("{} {}", agent_name(delegation.agent), delegation.state);
                }
                Some(Event::Tool(tool)) => {
                    writing.status = format!("{} {} ({} ms)", tool.tool, tool.state, tool.duration_ms);
                }
                Some(Event::Reply(reply)) => {
                    writing.text = reply.content;
                    break None;
                }
                Some(Event::Error(error)) if error.for_users => break Some(Trouble::Failed(error.message)),
                Some(Event::Error(error)) => {
                    tracing::warn!(message = %error.message, "the turn failed");
                    break Some(Trouble::Failed(INTERNAL.into()));
                }
                _ => {}
            }
        }
        // The interval counts from an update sent, so the first words go at once.
        if last_update.elapsed() >= every {
            match surface.show(&mut answer, &writing).await {
                Ok(true) => last_update = Instant::now(),
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, "the channel refused an update; the answer is written when it is done");
                    last_update = Instant::now();
                }
            }
        }
    };
    surface.close(answer, &writing, trouble).await.map_err(TurnError::Channel)
}
