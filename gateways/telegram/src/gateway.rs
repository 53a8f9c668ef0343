//! The gateway: updates by long polling in, the daemon's turns out, each answer one message
//! (a reply to the one that asked) edited as it is written — at most once a second per chat,
//! within Telegram's limits — then cut into more messages past Telegram's 4096 characters.
//! An update seen before (the same `update_id` after a restart or a lost answer) is dropped.
//! Approval requests (a connection to allow, a skill's review) are messages with inline
//! buttons; a press is answered as the person who pressed it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baaaht_gateway_kit::backoff::Backoff;
use baaaht_gateway_kit::daemon::{File, Person, Place};
use baaaht_gateway_kit::follow::{Delivery, Follower};
use baaaht_gateway_kit::health::Health;
use baaaht_gateway_kit::seen::Seen;
use baaaht_gateway_kit::sentences::{self, for_users};
use baaaht_gateway_kit::text::clean;
use baaaht_gateway_kit::turn::{self, Surface, Trouble, TurnError, Writing, PLACEHOLDER};
use baaaht_proto::client::Client;
use baaaht_proto::v1;
use serde_json::{json, Value};

use crate::api::Api;
use crate::route::{route, Bot, Press, Route, Update};

/// How often the answer being written is edited.
const UPDATE_EVERY: Duration = Duration::from_millis(1000);
/// The most characters of one message (Telegram takes 4096).
const MESSAGE_LIMIT: usize = 4000;
/// How long a long poll waits at Telegram.
const POLL_WAIT: Duration = Duration::from_secs(25);
/// The buttons' data start with this; then the decision and the request's id.
const ACTION: &str = "a:";

/// What the gateway knows for its whole life.
pub struct Gateway {
    pub daemon: Client,
    pub api: Api,
    pub bot: Bot,
    /// The largest file taken from a chat.
    pub max_file_bytes: u64,
    /// The chats served, followed for what comes between turns.
    pub follower: Arc<Follower>,
    seen: Mutex<Seen>,
    /// Approval requests posted, by id: where their message is, and until when it is kept.
    asked: Mutex<HashMap<String, (i64, i64, Instant)>>,
}

impl Gateway {
    /// Asks Telegram who the bot is.
    pub async fn new(
        daemon: Client,
        api: Api,
        max_file_bytes: u64,
        follower: Arc<Follower>,
    ) -> Result<Gateway, String> {
        let me =
            api.call("getMe", &json!({})).await.map_err(|error| format!("getMe with the bot token failed: {error}"))?;
        let bot = Bot {
            id: me["id"].as_i64().ok_or("getMe answered no id")?,
            username: me["username"].as_str().unwrap_or_default().to_string(),
        };
        tracing::info!(bot = bot.id, username = %bot.username, "signed in to Telegram");
        Ok(Gateway {
            daemon,
            api,
            bot,
            max_file_bytes,
            follower,
            seen: Mutex::new(Seen::new(Duration::from_secs(24 * 3600), 10_000)),
            asked: Mutex::default(),
        })
    }

    fn person(&self, user: i64, name: &str) -> Person {
        Person { identity: format!("telegram:{}:{user}", self.bot.id), name: Some(name.to_string()) }
    }

    /// Polls for updates until the process ends, answering each (a message's turn runs on its
    /// own task; the next poll does not wait for it).
    pub async fn run(self: Arc<Self>, health: Arc<Health>) {
        let mut offset: i64 = 0;
        let mut backoff = Backoff::default();
        loop {
            let params = json!({"offset": offset, "timeout": POLL_WAIT.as_secs(),
                "allowed_updates": ["message", "callback_query"]});
            let updates = match self.api.call_waiting("getUpdates", &params, POLL_WAIT).await {
                Ok(updates) => {
                    health.up();
                    backoff.reset();
                    updates
                }
                Err(error) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(%error, retry_in_ms = wait.as_millis() as u64, "getUpdates failed");
                    health.down(&error.to_string());
                    tokio::time::sleep(wait).await;
                    continue;
                }
            };
            for update in updates.as_array().into_iter().flatten() {
                let Some(id) = update["update_id"].as_i64() else { continue };
                offset = offset.max(id + 1);
                if !self.seen.lock().unwrap_or_else(PoisonError::into_inner).first(&id.to_string(), Instant::now()) {
                    tracing::info!(update = id, "an update seen before is dropped");
                    continue;
                }
                match route(update, &self.bot) {
                    Some(Update::Message(route)) => {
                        let gateway = self.clone();
                        tokio::spawn(async move { gateway.answer(route).await });
                    }
                    Some(Update::Press(press)) => {
                        let gateway = self.clone();
                        tokio::spawn(async move { gateway.pressed(press).await });
                    }
                    Some(Update::Left { chat, user }) => {
                        let gateway = self.clone();
                        tokio::spawn(async move { gateway.left(chat, user).await });
                    }
                    None => tracing::debug!(update = id, "not for the bot"),
                }
            }
        }
    }

    /// `user` left the group chat `chat`: they leave its group (and its memory and history).
    async fn left(&self, chat: i64, user: i64) {
        let person = self.person(user, "");
        let request = v1::EnsureChannelGroupRequest { channel: chat.to_string(), name: String::new(), left: true };
        let mut daemon = self.daemon.clone();
        match daemon.gateways.ensure_channel_group(person.request(request)).await {
            Ok(_) => tracing::info!(chat, user, "someone left the chat: the group follows"),
            // Someone never met, or a chat that never had a group: nothing to leave.
            Err(status) => tracing::info!(chat, user, message = %status.message(), "someone left a chat"),
        }
    }

    /// Answers `route`: the turn in its context, the answer a reply to its message.
    pub async fn answer(&self, route: Route) {
        // "typing…" while the turn starts (Telegram shows it for five seconds; the turn sends it
        // again until the first words).
        self.typing(route.chat).await;
        let ran = match self.message_of(&route).await {
            Ok(message) => {
                turn::run(&self.daemon, &self.follower, message, &Answering { gateway: self, route: &route }).await
            }
            Err(sentence) => Err(TurnError::Daemon(sentence)),
        };
        if let Err(error) = ran {
            tracing::warn!(chat = route.chat, %error, "a turn from Telegram failed");
            let text = match error {
                TurnError::Daemon(sentence) => format!("⚠️ {sentence}"),
                TurnError::Channel(_) => "⚠️ Telegram did not take the answer; try again.".into(),
            };
            if let Err(error) = self.api.send(route.chat, &text, Some(route.message), None).await {
                tracing::warn!(%error, "cannot tell the Telegram user what went wrong");
            }
        }
    }

    /// "typing…" in `chat` for the next five seconds.
    async fn typing(&self, chat: i64) {
        let typing = json!({"chat_id": chat, "action": "typing"});
        if let Err(error) = self.api.call("sendChatAction", &typing).await {
            tracing::debug!(%error, "sendChatAction failed");
        }
    }

    /// The turn's message: who wrote it, where, and the files they shared (fetched from
    /// Telegram); a sentence for them when a file cannot be fetched.
    async fn message_of(&self, route: &Route) -> Result<turn::Message, String> {
        let mut files = vec![];
        for shared in &route.files {
            if shared.size > self.max_file_bytes {
                return Err(format!(
                    "{} is larger than the {} this gateway takes.",
                    clean(&shared.name),
                    baaaht_proto::human_size(self.max_file_bytes)
                ));
            }
            let found = self
                .api
                .call("getFile", &json!({"file_id": shared.file_id}))
                .await
                .map_err(|error| format!("Telegram did not give the file: {error}"))?;
            let path = found["file_path"].as_str().ok_or("Telegram gave no path for the file; try again.")?;
            let bytes = self.api.download(path, self.max_file_bytes).await?;
            files.push(File {
                name: shared.name.clone(),
                mime_type: shared.mime_type.clone(),
                bytes,
                voice: shared.voice,
            });
        }
        Ok(turn::Message {
            chat: route.chat.to_string(),
            person: self.person(route.user, &route.name),
            place: if route.group { Place::Shared { chat: route.chat.to_string() } } else { Place::Own },
            text: route.text.clone(),
            files,
            channel: v1::ChannelType::Telegram,
            session_id: String::new(),
        })
    }

    /// Sends `text` and `files` to `chat`, each file its own message.
    async fn post(&self, chat: i64, text: &str, files: &[File]) -> Result<(), String> {
        // A voice note (a spoken answer) comes without words.
        if !text.trim().is_empty() {
            for part in messages(&clean(text)) {
                self.api.send(chat, &part, None, None).await.map_err(|e| e.to_string())?;
            }
        }
        for file in files {
            self.api.send_file(chat, file).await.map_err(|e| format!("{}: {e}", file.name))?;
        }
        Ok(())
    }

    /// Sends what comes between turns (a scheduled task's result, a later message) until the
    /// follower ends.
    pub async fn deliver(self: Arc<Self>, mut deliveries: tokio::sync::mpsc::Receiver<Delivery>) {
        while let Some(delivery) = deliveries.recv().await {
            let Ok(chat) = delivery.chat.parse::<i64>() else { continue };
            if let Err(error) = self.post(chat, &delivery.text, &delivery.files).await {
                tracing::warn!(chat, %error, "Telegram did not take what came between turns");
            }
        }
    }

    /// A press of an approval's button, answered as the person who pressed it.
    async fn pressed(&self, press: Press) {
        let mut told = String::new();
        if let Some((decision, id)) = press.data.strip_prefix(ACTION).and_then(|rest| rest.split_once(':')) {
            let answer = v1::ApprovalAnswer { id: id.to_string(), decision: decision.to_string() };
            let mut daemon = self.daemon.clone();
            if let Err(status) =
                daemon.sessions.answer_approval(self.person(press.user, &press.name).request(answer)).await
            {
                tracing::info!(approval = %id, message = %status.message(), "an approval's answer was refused");
                told = for_users(&status);
            }
        }
        let mut params = json!({"callback_query_id": press.id});
        if !told.is_empty() {
            params["text"] = json!(told.chars().take(190).collect::<String>());
            params["show_alert"] = json!(true);
        }
        if let Err(error) = self.api.call("answerCallbackQuery", &params).await {
            tracing::warn!(%error, "answerCallbackQuery failed");
        }
    }

    /// Shows an approval request (a message with its buttons) or its answer (the message
    /// edited, without buttons).
    async fn approval_event(&self, event: &v1::orchestrator_event::Event, chat: i64) {
        use v1::orchestrator_event::Event;
        match event {
            Event::Approval(request) => {
                {
                    let mut asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
                    asked.retain(|_, (.., until)| *until > Instant::now());
                    if asked.contains_key(&request.id) || asked.len() >= 256 {
                        return;
                    }
                }
                let (text, keyboard) = approval_message(request);
                match self.api.send(chat, &text, None, Some(keyboard)).await {
                    Ok(message) => {
                        let until = Instant::now() + Duration::from_secs(u64::from(request.expires_in_seconds) + 60);
                        self.asked
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert(request.id.clone(), (chat, message, until));
                    }
                    Err(error) => tracing::warn!(%error, "an approval request could not be posted"),
                }
            }
            Event::ApprovalSettled(settled) => {
                let posted = self.asked.lock().unwrap_or_else(PoisonError::into_inner).remove(&settled.id);
                let Some((chat, message, _)) = posted else { return };
                let text = sentences::settled(&settled.decision, &settled.by);
                if let Err(error) = self.api.edit(chat, message, &text, None).await {
                    tracing::warn!(%error, "an approval's answer could not be shown");
                }
            }
            _ => {}
        }
    }
}

/// An approval request as a message: its text (a skill's review or an action whole, within a
/// message) and
/// its answers as buttons, two a row.
fn approval_message(request: &v1::ApprovalRequest) -> (String, Value) {
    let expires = sentences::expires_text(request);
    let text = match sentences::is_review(request) {
        true => sentences::review_text(request, &expires, MESSAGE_LIMIT),
        false => format!("{} {expires}", sentences::approval_asked(request)),
    };
    let buttons: Vec<Value> = sentences::choices(request)
        .iter()
        .map(|(decision, label)| json!({"text": label, "callback_data": format!("{ACTION}{decision}:{}", request.id)}))
        .collect();
    let rows: Vec<Vec<Value>> = buttons.chunks(2).map(<[Value]>::to_vec).collect();
    (clean(&text).into_owned(), json!({"inline_keyboard": rows}))
}

/// The answer's message: its id and what it shows.
pub struct Shown {
    message: i64,
    text: String,
}

/// One turn's answer in Telegram: a reply to the message that asked.
struct Answering<'a> {
    gateway: &'a Gateway,
    route: &'a Route,
}

/// What the message shows while the answer is written (within one message).
fn live(writing: &Writing) -> String {
    turn::live(writing, MESSAGE_LIMIT - 200)
}

/// `text` in messages of at most [`MESSAGE_LIMIT`] characters, cut at a line where one is near.
fn messages(text: &str) -> Vec<String> {
    let mut out = vec![];
    let mut rest: Vec<char> = text.chars().collect();
    while rest.len() > MESSAGE_LIMIT {
        let window: String = rest[..MESSAGE_LIMIT].iter().collect();
        let cut = window.rfind('\n').filter(|at| *at > MESSAGE_LIMIT / 2).map(|at| window[..at].chars().count() + 1);
        let cut = cut.unwrap_or(MESSAGE_LIMIT);
        out.push(rest[..cut].iter().collect());
        rest.drain(..cut);
    }
    out.push(rest.into_iter().collect());
    out
}

impl Surface for Answering<'_> {
    type Answer = Shown;

    fn update_every(&self) -> Duration {
        UPDATE_EVERY
    }

    async fn typing(&self) {
        self.gateway.typing(self.route.chat).await;
    }

    async fn open(&self) -> Result<Shown, String> {
        let api = &self.gateway.api;
        let message =
            api.send(self.route.chat, PLACEHOLDER, Some(self.route.message), None).await.map_err(|e| e.to_string())?;
        Ok(Shown { message, text: PLACEHOLDER.into() })
    }

    async fn show(&self, answer: &mut Shown, writing: &Writing) -> Result<bool, String> {
        let live = live(writing);
        if live == answer.text {
            return Ok(false);
        }
        self.gateway.api.edit(self.route.chat, answer.message, &live, None).await.map_err(|e| e.to_string())?;
        answer.text = live;
        Ok(true)
    }

    async fn close(&self, answer: Shown, writing: &Writing, trouble: Option<Trouble>) -> Result<(), String> {
        let whole = turn::whole(&clean(&writing.text), trouble);
        let api = &self.gateway.api;
        let mut parts = messages(&whole).into_iter();
        let first = parts.next().unwrap_or_default();
        api.edit(self.route.chat, answer.message, &first, None).await.map_err(|e| e.to_string())?;
        let mut after = answer.message;
        for part in parts {
            after = api.send(self.route.chat, &part, Some(after), None).await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    async fn message(&self, text: &str, files: Vec<File>) -> Result<(), String> {
        self.gateway.post(self.route.chat, text, &files).await
    }

    async fn approval(&self, event: &v1::orchestrator_event::Event) {
        self.gateway.approval_event(event, self.route.chat).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_answer_is_cut_into_messages_at_lines_and_a_live_one_shows_its_status() {
        let line = "x".repeat(99);
        let text = format!("{line}\n").repeat(90);
        let parts = messages(&text);
        assert_eq!(parts.len(), 3);
        assert!(
            parts.iter().all(|part| part.chars().count() <= MESSAGE_LIMIT),
            "{:?}",
            parts.iter().map(|p| p.len()).collect::<Vec<_>>()
        );
        assert!(parts[0].ends_with('\n'), "cut after a line");
        assert_eq!(parts.concat(), text);
        assert_eq!(messages("short"), ["short"]);
        let writing = Writing { text: "Hello \u{1b}[2J".into(), status: "worker started".into(), ..Writing::default() };
        assert_eq!(live(&writing), "Hello ^[[2J …\n\n(worker started)");
        assert_eq!(live(&Writing::default()), PLACEHOLDER);
    }

    #[test]
    fn an_approval_is_a_message_with_its_answers_two_a_row() {
        let request = v1::ApprovalRequest {
            id: "a-0123456789ab".into(),
            agent: v1::AgentRole::Coder as i32,
            host: "pypi.org".into(),
            port: 443,
            expires_in_seconds: 120,
            ..Default::default()
        };
        let (text, keyboard) = approval_message(&request);
        assert_eq!(text, "The coder's tools want to reach pypi.org:443. Denied in 120 s without an answer.");
        let rows = keyboard["inline_keyboard"].as_array().expect("rows");
        assert_eq!(rows.iter().map(|row| row.as_array().map_or(0, Vec::len)).collect::<Vec<_>>(), [2, 2]);

        let review = v1::SkillReview {
            name: "forecast".into(),
            installs_for: "you".into(),
            scripts: vec![v1::SkillScript { path: "scripts/forecast.sh".into(), size_bytes: 812 }],
            findings: (0..20).map(|n| format!("SKILL.md:{n}: {}", "y".repeat(290))).collect(),
            ..Default::default()
        };
        let review = v1::ApprovalRequest { expires_in_seconds: 300, skill_review: Some(review), ..request };
        let (text, keyboard) = approval_message(&review);
        assert!(text.starts_with("The coder asks to install the skill forecast for you.\n\n"), "{text}");
        assert!(text.contains("Scripts: scripts/forecast.sh (812 bytes)."), "{text}");
        assert!(text.ends_with("more lines)\n\nDeclined in 300 s if nobody answers."), "{text}");
        assert!(text.chars().count() <= MESSAGE_LIMIT, "{}", text.chars().count());
        let rows = keyboard["inline_keyboard"].as_array().expect("rows");
        assert_eq!(rows.len(), 1, "{keyboard}");
        let data: Vec<&str> =
            rows[0].as_array().into_iter().flatten().filter_map(|b| b["callback_data"].as_str()).collect();
        assert_eq!(data, ["a:install:a-0123456789ab", "a:decline:a-0123456789ab"]);
    }
}
