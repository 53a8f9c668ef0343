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

use std::sync::Arc;

use crate::daemon::{context_of, upload, File, Person, Place};
use crate::follow::{read_sent, Follower};
use crate::said::{said, Said, Step, Turn};
use crate::sentences::{self, for_users};

pub use crate::said::{Trouble, Writing, TURN_LIMIT};

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

    /// A message the agents sent to this chat while answering (the `message` tool), with the
    /// files it sent.
    fn message(&self, text: &str, files: Vec<File>) -> impl Future<Output = Result<(), String>> + Send;

    /// An approval request or its answer, for whoever is in this chat.
    fn approval(&self, event: &v1::orchestrator_event::Event) -> impl Future<Output = ()> + Send;

    /// The daemon took the message.
    fn accepted(&self) {}

    /// The channel's "typing…" sign, where it has one: sent when the turn starts and again
    /// every [`TYPING_EVERY`] until the first words (Telegram's lasts 5 s, Matrix's 4 s).
    fn typing(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// How often a channel's "typing…" sign is sent again while no words have come.
pub const TYPING_EVERY: Duration = Duration::from_secs(4);

/// A message from a chat.
#[derive(Debug, Clone)]
pub struct Message {
    /// The chat it came from (its id in the channel), where what comes between turns goes.
    pub chat: String,
    pub person: Person,
    pub place: Place,
    pub text: String,
    pub files: Vec<File>,
    pub channel: v1::ChannelType,
    /// The session it goes to, resumed if archived (empty: the context's active one, made when
    /// there is none).
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

/// What an answer's message shows before its first words.
pub const PLACEHOLDER: &str = "…";

/// What an answer's message shows while it is written: its text so far (cleaned, at most
/// `limit` characters) and the status line.
pub fn live(writing: &Writing, limit: usize) -> String {
    let text: String = crate::text::clean(&writing.text).chars().take(limit).collect();
    match (text.trim().is_empty(), writing.status.is_empty()) {
        (true, true) if !writing.phase.is_empty() => format!("{}…", writing.phase),
        (true, true) => PLACEHOLDER.into(),
        (true, false) => format!("{}…", writing.status),
        (false, true) => format!("{text} …"),
        (false, false) => format!("{text} …\n\n({})", writing.status),
    }
}

/// The whole answer as its channel writes it last: its text, and what went wrong when it did
/// not finish.
pub fn whole(text: &str, trouble: Option<Trouble>) -> String {
    match trouble {
        None if text.trim().is_empty() => sentences::NO_ANSWER.to_string(),
        None => text.to_string(),
        Some(trouble) if text.trim().is_empty() => format!("⚠️ {}", trouble.sentence()),
        Some(trouble) => format!("{text}\n\n⚠️ {}", trouble.sentence()),
    }
}

/// The words an approval's answer may start with, where a channel has no buttons (email,
/// Matrix), and the decision each is.
const DECISIONS: &[(&str, &str)] = &[
    ("once", "once"),
    ("allow", "once"),
    ("yes", "once"),
    ("session", "session"),
    ("conversation", "session"),
    ("always", "always"),
    ("deny", "deny"),
    ("no", "deny"),
];

/// The words an answer to a skill's review may start with, and the decision each is.
const REVIEW_DECISIONS: &[(&str, &str)] = &[
    ("install", "install"),
    ("yes", "install"),
    ("allow", "install"),
    ("decline", "decline"),
    ("no", "decline"),
    ("deny", "decline"),
];

/// An approval request a channel without buttons posted, kept for the reply to it: the
/// request's id, and whether it is a skill's review (answered install or decline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub id: String,
    pub review: bool,
}

impl Asked {
    /// `request` as kept for the reply to it.
    pub fn of(request: &v1::ApprovalRequest) -> Asked {
        Asked { id: request.id.clone(), review: request.skill_review.is_some() }
    }
}

/// The decision the first word of `said` is, for a skill's review when `review` is set; none
/// when it is no decision.
pub fn decision_of(said: &str, review: bool) -> Option<&'static str> {
    let word = said.split_whitespace().next().unwrap_or_default().to_lowercase();
    let word = word.trim_matches(|c: char| !c.is_alphanumeric());
    let words = if review { REVIEW_DECISIONS } else { DECISIONS };
    words.iter().find(|(known, _)| *known == word).map(|(_, decision)| *decision)
}

/// Answers the approval request `asked` as `person` with the first word of `said`. Taken,
/// nothing is said here: the daemon's settlement of the request tells the chat what was decided
/// and by whom ([`sentences::settled`]), as it does however the request was answered. Else the
/// sentence that says why not.
pub async fn answer_by_word(daemon: &Client, person: &Person, asked: &Asked, said: &str) -> Option<String> {
    let Some(decision) = decision_of(said, asked.review) else {
        let sentence = if asked.review { sentences::REVIEW_NOT_UNDERSTOOD } else { sentences::NOT_UNDERSTOOD };
        return Some(format!("⚠️ {sentence}"));
    };
    let answer = v1::ApprovalAnswer { id: asked.id.clone(), decision: decision.to_string() };
    let mut daemon = daemon.clone();
    match daemon.sessions.answer_approval(person.request(answer)).await {
        Ok(_) => None,
        Err(status) => {
            tracing::info!(approval = %asked.id, message = %status.message(), "an approval's answer was refused");
            Some(format!("⚠️ {}", for_users(&status)))
        }
    }
}

/// What a chat message asks of linking, when that is all it is: `/link` a code for this
/// person (None), `/link CODE` (or `link CODE`) to confirm one made on another channel.
fn link_command(text: &str) -> Option<Option<String>> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let command = |word: &str| {
        let word = word.split('@').next().unwrap_or(word);
        word.eq_ignore_ascii_case("/link")
    };
    // A code's alphabet: letters and digits without look-alikes, eight of them.
    let code = |word: &str| {
        word.len() == 8 && word.bytes().all(|byte| byte.is_ascii_alphanumeric() && !b"01ILOilo".contains(&byte))
    };
    match words.as_slice() {
        [first] if command(first) => Some(None),
        [first, given] if (command(first) || first.eq_ignore_ascii_case("link")) && code(given) => {
            Some(Some(given.to_ascii_uppercase()))
        }
        _ => None,
    }
}

/// Whether a chat message only asks for a new conversation (`/new`, `/new@bot`).
fn new_command(text: &str) -> bool {
    let mut words = text.split_whitespace();
    let first = words.next().map(|word| word.split('@').next().unwrap_or(word));
    first.is_some_and(|word| word.eq_ignore_ascii_case("/new")) && words.next().is_none()
}

/// Starts a new conversation in `context` (the next message goes to it): the sentence that
/// says so.
async fn new_conversation(daemon: &Client, person: &Person, context: v1::ContextRef) -> String {
    let mut daemon = daemon.clone();
    let request = v1::NewSessionRequest { context: Some(context), title: String::new() };
    match daemon.sessions.new_session(person.request(request)).await {
        Ok(_) => sentences::NEW_CONVERSATION.into(),
        Err(status) => format!("⚠️ {}", for_users(&status)),
    }
}

/// Links the person's channels as `code` asks (a new code, or one confirmed): the sentence
/// that tells them what was done.
async fn link(daemon: &Client, person: &Person, place: &Place, code: Option<String>) -> String {
    if matches!(place, Place::Shared { .. }) {
        return sentences::LINK_IN_PRIVATE.into();
    }
    let mut daemon = daemon.clone();
    match code {
        None => match daemon.gateways.start_link(person.request(v1::StartLinkRequest {})).await {
            Ok(made) => {
                let made = made.into_inner();
                format!(
                    "Your link code is {code}. Within {minutes} minutes, send `/link {code}` to me from your other \
                     channel (Telegram, Matrix, Slack, or a mail whose text is just that line): both become one \
                     person here, with the same conversations, memory and files. Share the code with no one.",
                    code = made.code,
                    minutes = made.valid_seconds / 60
                )
            }
            Err(status) => format!("⚠️ {}", for_users(&status)),
        },
        Some(code) => {
            let request = v1::ConfirmLinkRequest { code };
            match daemon.gateways.confirm_link(person.request(request)).await {
                Ok(linked) => format!(
                    "Linked: this channel is now {}'s, with their conversations, memory and files.",
                    linked.into_inner().name
                ),
                Err(status) => format!("⚠️ {}", for_users(&status)),
            }
        }
    }
}

/// Answers with the gateway's own `sentence` (no turn).
async fn say<S: Surface>(surface: &S, sentence: String) -> Result<(), TurnError> {
    let answer = surface.open().await.map_err(TurnError::Channel)?;
    let writing = Writing { text: sentence, ..Writing::default() };
    surface.close(answer, &writing, None).await.map_err(TurnError::Channel)
}

/// Runs `message`'s turn, its answer shown on `surface`; its chat is kept by `follower`, for
/// what comes after the turn. A message that only asks to link channels (`/link`), for a new
/// conversation (`/new`) or for an undo (`/undo`, `/redo`) is answered by the gateway itself.
pub async fn run<S: Surface>(
    daemon: &Client,
    follower: &Arc<Follower>,
    message: Message,
    surface: &S,
) -> Result<(), TurnError> {
    let sentence = |status: tonic::Status| TurnError::Daemon(for_users(&status));
    let Message { chat, person, place, text, files, channel, session_id } = message;
    if let Some(code) = link_command(&text).filter(|_| files.is_empty()) {
        return say(surface, link(daemon, &person, &place, code).await).await;
    }
    let context = context_of(daemon, &person, &place).await.map_err(sentence)?;
    // A chat has one conversation at a time; `/new` starts the next (a channel that names its
    // conversations, a mail thread, starts one with each new thread).
    if new_command(&text) && files.is_empty() && session_id.is_empty() {
        return say(surface, new_conversation(daemon, &person, context).await).await;
    }
    // `/undo`, `/redo`: the plan first, done on `yes`.
    if let Some(command) = crate::undo::command(&text).filter(|_| files.is_empty()) {
        let place = (chat.as_str(), context, session_id.as_str());
        return say(surface, crate::undo::answer(daemon, follower.undos(), &person, place, command).await).await;
    }
    follower.served(&chat, &person, &context);
    let mut daemon = daemon.clone();
    // A conversation the channel names (a mail thread) is the person's to go on with: archived
    // since (quiet for a day, or a scheduled run's that ended), their reply resumes it.
    if !session_id.is_empty() {
        let session = v1::SessionRef { session_id: session_id.clone() };
        daemon.sessions.resume_session(person.request(session)).await.map_err(sentence)?;
    }
    // Shared files go first into the session's uploads; the message names them.
    let (mut session_id, mut attachments) = (session_id, vec![]);
    let voice = files.iter().any(|file| file.voice);
    for file in files {
        let (session, attachment) = upload(&daemon, &person, &context, &session_id, file).await.map_err(sentence)?;
        session_id = session;
        attachments.push(attachment);
    }
    let subscription = v1::EventSubscription {
        context: Some(context.clone()),
        session_id: String::new(),
        channel: channel as i32,
        notifies: false,
    };
    let mut events =
        daemon.sessions.subscribe_events(person.request(subscription)).await.map_err(sentence)?.into_inner();
    let user_message = v1::UserMessage {
        context: Some(context),
        sender_id: person.identity.clone(),
        channel: channel as i32,
        content: text,
        session_id,
        attachments,
        voice,
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
    // What the agents send to this conversation while it answers is the turn's to show.
    let in_turn = follower.in_turn(&sent.session_id);
    let every = surface.update_every();
    let mut turn = Turn::new(&sent.session_id, &sent.turn_id);
    // The first words show as soon as they come; then at most one update per interval.
    let mut last_update = Instant::now().checked_sub(every).unwrap_or_else(Instant::now);
    let mut last_typing = Instant::now();
    let deadline = tokio::time::Instant::now() + TURN_LIMIT;
    let trouble = loop {
        if turn.writing.text.is_empty() && last_typing.elapsed() >= TYPING_EVERY {
            // A courtesy: a channel that throttles it never holds the turn up.
            let _ = tokio::time::timeout(Duration::from_secs(2), surface.typing()).await; // silent-ok: as above
            last_typing = Instant::now();
        }
        let next = tokio::time::timeout(every.min(TYPING_EVERY), events.message());
        let event = match tokio::time::timeout_at(deadline, next).await {
            Err(_) => break Some(Trouble::TooLong),
            Ok(Err(_)) => None,
            Ok(Ok(Ok(Some(event)))) => Some(event),
            Ok(Ok(Ok(None))) | Ok(Ok(Err(_))) => break Some(Trouble::Failed(sentences::LOST.into())),
        };
        if let Some((event, said)) = event.as_ref().and_then(|event| Some((event, said(event)?))) {
            match &said {
                // A connection waiting for approval, whichever turn asked: the channel's buttons.
                Said::Approval(_) | Said::Settled(_) => {
                    if let Some(asked) = event.event.as_ref() {
                        surface.approval(asked).await;
                    }
                }
                // What the agents sent to this conversation meanwhile (the `message` tool), with its files.
                Said::Sent(message) if event.session_id == turn.session => {
                    let (text, files) = read_sent(&daemon, &person, &turn.session, message).await;
                    if let Err(error) = surface.message(&text, files).await {
                        tracing::warn!(%error, "the channel refused a message the agents sent");
                    }
                }
                _ => {}
            }
            if turn.owns(event) {
                if let Step::Ended(trouble) = turn.take(&said) {
                    break trouble;
                }
            }
        }
        // The interval counts from an update sent, so the first words go at once.
        if last_update.elapsed() >= every {
            match surface.show(&mut answer, &turn.writing).await {
                Ok(true) => last_update = Instant::now(),
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, "the channel refused an update; the answer is written when it is done");
                    last_update = Instant::now();
                }
            }
        }
    };
    drop(in_turn);
    surface.close(answer, &turn.writing, trouble).await.map_err(TurnError::Channel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_word_is_the_decision_of_its_request_kind() {
        let cases: &[(&str, bool, Option<&str>)] = &[
            ("Yes please", false, Some("once")),
            ("session.", false, Some("session")),
            ("NO", false, Some("deny")),
            ("install", false, None),
            ("Install!", true, Some("install")),
            ("yes", true, Some("install")),
            ("decline", true, Some("decline")),
            ("no thanks", true, Some("decline")),
            ("always", true, None),
            ("session", true, None),
            ("", true, None),
        ];
        for (said, review, decision) in cases {
            assert_eq!(decision_of(said, *review), *decision, "{said:?}, review: {review}");
        }
    }

    #[test]
    fn only_a_message_that_is_just_new_asks_for_a_new_conversation() {
        for new in ["/new", " /NEW@baaaht_bot "] {
            assert!(new_command(new), "{new}");
        }
        for not in ["new", "/new please", "/newer", "what is /new"] {
            assert!(!new_command(not), "{not}");
        }
    }

    #[test]
    fn only_a_message_that_is_just_a_link_command_is_one() {
        assert_eq!(link_command("/link"), Some(None));
        assert_eq!(link_command(" /LINK@baaaht_bot "), Some(None));
        assert_eq!(link_command("/link abcd2345"), Some(Some("ABCD2345".into())));
        assert_eq!(link_command("link ABCD2345"), Some(Some("ABCD2345".into())));
        for not in ["link", "link me to the docs", "/link ABCD234", "/link ABCD1234", "please /link"] {
            assert_eq!(link_command(not), None, "{not}");
        }
    }

    #[test]
    fn an_answer_shows_its_words_and_status_while_written_and_what_failed_at_the_end() {
        let writing =
            Writing { text: "Hello \u{1b}[2J there".into(), status: "worker started".into(), ..Writing::default() };
        assert_eq!(live(&writing, 8), "Hello ^[ …\n\n(worker started)");
        assert_eq!(live(&Writing::default(), 100), PLACEHOLDER);
        // Before the words, what the agent does; the words take its place.
        let thinking = Writing { phase: "thinking".into(), ..Writing::default() };
        assert_eq!(live(&thinking, 100), "thinking…");
        assert_eq!(live(&Writing { text: "Hi".into(), ..thinking }, 100), "Hi …");
        assert_eq!(
            live(&Writing { status: "exec running (3 ms)".into(), ..Writing::default() }, 100),
            "exec running (3 ms)…"
        );
        assert_eq!(whole("Done.", None), "Done.");
        assert_eq!(whole("  ", None), "(no answer)");
        assert_eq!(whole("", Some(Trouble::Failed("The budget is used up.".into()))), "⚠️ The budget is used up.");
        assert!(whole("Half", Some(Trouble::TooLong)).starts_with("Half\n\n⚠️ No answer after 15 minutes"));
    }
}
