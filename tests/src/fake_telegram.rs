//! A fake Telegram Bot API (the Telegram seam's test double): the methods the gateway calls,
//! over HTTP on loopback, at `/bot{token}/{method}`, and files at `/file/bot{token}/{path}`.
//! Its wire format is proved by driving it with python-telegram-bot, Telegram's most used
//! library (`tests/tests/telegram.rs`), so it is not just agreeing with our own client.
//!
//! It records every call (method and parameters), keeps the updates a test pushes for
//! `getUpdates` (long polling, `offset` confirming what was taken, as Telegram does), can answer
//! a method once with 429 and `retry_after`, can deliver an update again (as Telegram does when
//! the bot did not confirm it), and serves files.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use serde_json::{json, Value};
use tokio::sync::watch;

/// The fake bot.
pub const BOT_ID: i64 = 7_000_001;
pub const BOT_USERNAME: &str = "baaaht_test_bot";
pub const TOKEN: &str = "7000001:AAFakeTokenForTheTestsOnly_0123456789";

/// One call as the fake received it.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub params: Value,
    /// Whether it was answered with 429.
    pub limited: bool,
    /// What it answered (for a message sent: the message).
    pub answer: Value,
    pub at: std::time::Instant,
    /// When it arrived on the fake provider's clock ([`crate::fake_provider::clock_nanos`]).
    pub nanos: u64,
}

#[derive(Default)]
struct State {
    base: String,
    calls: Mutex<Vec<Call>>,
    /// Updates not yet confirmed by an `offset` past them.
    updates: Mutex<Vec<Value>>,
    /// Updates delivered once more whatever the offset says (a confirmation Telegram lost).
    again: Mutex<Vec<Value>>,
    next_update: AtomicI64,
    next_message: AtomicI64,
    limited: Mutex<HashMap<String, u64>>,
    files: Mutex<HashMap<String, (String, Vec<u8>)>>,
    /// Files the bot sent (sendDocument, sendPhoto, sendVoice): the method, the file's name and bytes.
    sent_files: Mutex<Vec<SentFile>>,
    /// Whether the Bot API is down: every call answered 502.
    offline: std::sync::atomic::AtomicBool,
    changes: Option<watch::Sender<u64>>,
}

impl State {
    fn changed(&self) {
        if let Some(changes) = &self.changes {
            changes.send_modify(|count| *count += 1);
        }
    }
}

/// A file the bot sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentFile {
    pub method: String,
    pub chat: i64,
    pub name: String,
    pub content_type: String,
    pub bytes: Vec<u8>,
}

/// A running fake Bot API.
#[derive(Clone)]
pub struct FakeTelegram {
    state: Arc<State>,
    changes: watch::Receiver<u64>,
}

impl FakeTelegram {
    pub async fn start() -> std::io::Result<FakeTelegram> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let (sender, changes) = watch::channel(0);
        let state = Arc::new(State {
            base: format!("http://{}", listener.local_addr()?),
            changes: Some(sender),
            next_update: AtomicI64::new(500),
            next_message: AtomicI64::new(100),
            ..State::default()
        });
        tokio::spawn(serve(listener, state.clone()));
        Ok(FakeTelegram { state, changes })
    }

    /// The Bot API's address, as `--api-url` takes it: `http://127.0.0.1:PORT`.
    pub fn api_url(&self) -> String {
        self.state.base.clone()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        self.calls().into_iter().filter(|call| call.method == method).collect()
    }

    /// Waits until `check` holds, up to `limit`; false when it never did.
    pub async fn wait_for(&self, limit: Duration, check: impl Fn(&FakeTelegram) -> bool) -> bool {
        let mut changes = self.changes.clone();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if check(self) {
                return true;
            }
            if tokio::time::timeout_at(deadline, changes.changed()).await.is_err() {
                return check(self);
            }
        }
    }

    /// Queues `update` (its `update_id` given here); its id.
    pub fn push(&self, mut update: Value) -> i64 {
        let id = self.state.next_update.fetch_add(1, Ordering::SeqCst);
        update["update_id"] = json!(id);
        self.state.updates.lock().unwrap_or_else(PoisonError::into_inner).push(update);
        self.state.changed();
        id
    }

    /// Delivers `update` once more with the id it has, whatever offset the bot confirmed, as
    /// Telegram does when a confirmation was lost.
    pub fn redeliver(&self, update: Value) {
        self.state.again.lock().unwrap_or_else(PoisonError::into_inner).push(update);
        self.state.changed();
    }

    /// A text message from user `user` (`name`) in `chat` (`kind`: private, group,
    /// supergroup), as an update's `message`; its message id is fresh.
    pub fn message(&self, chat: i64, kind: &str, user: i64, name: &str, text: &str) -> Value {
        let id = self.state.next_message.fetch_add(1, Ordering::SeqCst);
        let chat = if kind == "private" {
            json!({"id": chat, "type": kind, "first_name": name})
        } else {
            json!({"id": chat, "type": kind, "title": "The family"})
        };
        json!({"message": {"message_id": id, "date": 1_760_000_000, "chat": chat,
            "from": {"id": user, "is_bot": false, "first_name": name, "language_code": "en"}, "text": text}})
    }

    /// `update` (a [`FakeTelegram::message`]) as a voice note of OGG/Opus `bytes`, `seconds` long,
    /// instead of its text; the fake serves its file under `file_id`.
    pub fn voice(&self, mut update: Value, file_id: &str, bytes: Vec<u8>, seconds: u32) -> Value {
        let size = bytes.len();
        self.add_file(file_id, &format!("voice/{file_id}.oga"), bytes);
        if let Some(message) = update["message"].as_object_mut() {
            message.remove("text");
            message.insert(
                "voice".into(),
                json!({"file_id": file_id, "file_unique_id": format!("u{file_id}"), "duration": seconds,
                    "mime_type": "audio/ogg", "file_size": size}),
            );
        }
        update
    }

    /// The last message with buttons the bot sent to `chat`: its params and its answer.
    pub fn asked_in(&self, chat: i64) -> Option<Call> {
        self.calls_of("sendMessage")
            .into_iter()
            .rev()
            .find(|call| call.params["chat_id"] == chat && call.params["reply_markup"]["inline_keyboard"].is_array())
    }

    /// `user` (`name`) presses the button of the last question with buttons in `chat` whose
    /// `callback_data` starts with `a:{decision}:`, as Telegram sends the press, and waits for
    /// the bot to answer it (`answerCallbackQuery`, which Telegram needs to stop the button's
    /// spinner); that answer's params.
    pub async fn press(&self, chat: i64, user: i64, name: &str, decision: &str) -> Result<Value, String> {
        let Some(asked) = self.asked_in(chat) else { return Err("no message with buttons in the chat".into()) };
        let buttons: Vec<&Value> = asked.params["reply_markup"]["inline_keyboard"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|row| row.as_array().into_iter().flatten())
            .collect();
        let data = buttons.iter().filter_map(|button| button["callback_data"].as_str());
        let Some(data) = data.clone().find(|data| data.starts_with(&format!("a:{decision}:"))) else {
            return Err(format!("no `{decision}` button: {buttons:?}"));
        };
        if data.len() > 64 {
            return Err(format!("Telegram takes 64 bytes of callback data, not {}: {data}", data.len()));
        }
        let message = asked.answer["message_id"].clone();
        let kind = if chat == user { "private" } else { "group" };
        let press = format!("cq-{message}-{user}-{decision}");
        self.push(json!({"callback_query": {"id": press, "chat_instance": "ci",
            "from": {"id": user, "is_bot": false, "first_name": name}, "data": data,
            "message": {"message_id": message, "date": 1_760_000_000, "chat": {"id": chat, "type": kind},
                "text": "approval"}}}));
        let answer = |fake: &FakeTelegram| {
            fake.calls_of("answerCallbackQuery")
                .into_iter()
                .find(|call| call.params["callback_query_id"] == press.as_str())
                .map(|call| call.params)
        };
        match self.wait_for(Duration::from_secs(30), |fake| answer(fake).is_some()).await {
            true => answer(self).ok_or_else(|| "the press's answer vanished".into()),
            false => Err("the press was never answered (answerCallbackQuery)".into()),
        }
    }

    /// A file the fake serves: its `file_id`.
    pub fn add_file(&self, id: &str, path: &str, bytes: Vec<u8>) {
        self.state.files.lock().unwrap_or_else(PoisonError::into_inner).insert(id.into(), (path.into(), bytes));
    }

    /// The files the bot sent, in order.
    pub fn sent_files(&self) -> Vec<SentFile> {
        self.state.sent_files.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Answers the next call of `method` with 429 and `retry_after: seconds`.
    pub fn rate_limit_once(&self, method: &str, seconds: u64) {
        self.state.limited.lock().unwrap_or_else(PoisonError::into_inner).insert(method.into(), seconds);
    }

    /// Takes the Bot API down (every call answered 502 Bad Gateway) or, with `false`, up again.
    pub fn set_offline(&self, offline: bool) {
        self.state.offline.store(offline, Ordering::SeqCst);
        self.state.changed();
    }

    /// The text of message `id` in `chat` now: sent, then edited.
    pub fn text_of(&self, chat: i64, id: i64) -> Option<String> {
        let mut text = None;
        for call in self.calls() {
            let answer = &call.answer;
            match call.method.as_str() {
                "sendMessage" if answer["message_id"] == id && answer["chat"]["id"] == chat => {
                    text = answer["text"].as_str().map(str::to_string)
                }
                "editMessageText" if call.params["message_id"] == id && call.params["chat_id"] == chat => {
                    text = call.params["text"].as_str().map(str::to_string)
                }
                _ => {}
            }
        }
        text
    }

    /// Every text message `id` showed, in order.
    pub fn texts_of(&self, chat: i64, id: i64) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter_map(|call| match call.method.as_str() {
                "sendMessage" if call.answer["message_id"] == id && call.answer["chat"]["id"] == chat => {
                    call.answer["text"].as_str().map(str::to_string)
                }
                "editMessageText" if call.params["message_id"] == id && call.params["chat_id"] == chat => {
                    call.params["text"].as_str().map(str::to_string)
                }
                _ => None,
            })
            .collect()
    }

    /// The bot's messages in `chat` sent as replies to `to`: their ids.
    pub fn replies_to(&self, chat: i64, to: i64) -> Vec<i64> {
        self.calls_of("sendMessage")
            .into_iter()
            .filter(|call| {
                call.params["chat_id"] == chat
                    && (call.params["reply_parameters"]["message_id"] == to || call.params["reply_to_message_id"] == to)
            })
            .filter_map(|call| call.answer["message_id"].as_i64())
            .collect()
    }
}

async fn serve(listener: tokio::net::TcpListener, state: Arc<State>) {
    while let Ok((stream, _)) = listener.accept().await {
        let state = state.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(answer(&state, request).await) }
            });
            // silent-ok: a client that hangs up ends its connection.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

fn reply(status: u16, body: Value) -> hyper::Response<Full<Bytes>> {
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a response")
}

/// The parameters of a call: a JSON body, a form body, or the query string.
fn params_of(query: &str, content_type: &str, body: &[u8]) -> Value {
    if content_type.starts_with("application/json") && !body.is_empty() {
        return serde_json::from_slice(body).unwrap_or(Value::Null);
    }
    let form = if body.is_empty() { query.to_string() } else { String::from_utf8_lossy(body).into_owned() };
    let mut params = crate::fake_slack::form(&form);
    // Telegram's libraries send objects (reply_markup, allowed_updates) as JSON text.
    if let Some(fields) = params.as_object_mut() {
        for value in fields.values_mut() {
            let parsed = value.as_str().and_then(|text| serde_json::from_str::<Value>(text).ok());
            if let Some(parsed) = parsed.filter(|parsed| parsed.is_object() || parsed.is_array()) {
                *value = parsed;
            }
        }
    }
    params
}

async fn answer(state: &Arc<State>, request: hyper::Request<hyper::body::Incoming>) -> hyper::Response<Full<Bytes>> {
    // python-telegram-bot quotes a file's path (the token's `:` as `%3A`); Telegram decodes it.
    let path = request.uri().path().replace("%3A", ":").replace("%3a", ":");
    let query = request.uri().query().unwrap_or_default().to_string();
    let content_type =
        request.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    if state.offline.load(Ordering::SeqCst) {
        return reply(502, json!({"ok": false, "error_code": 502, "description": "Bad Gateway"}));
    }
    if let Some(rest) = path.strip_prefix(&format!("/file/bot{TOKEN}/")) {
        let files = state.files.lock().unwrap_or_else(PoisonError::into_inner);
        return match files.values().find(|(file_path, _)| file_path == rest) {
            Some((_, bytes)) => hyper::Response::new(Full::new(Bytes::from(bytes.clone()))),
            None => reply(404, json!({"ok": false, "error_code": 404, "description": "Not Found"})),
        };
    }
    let Some(method) = path.strip_prefix(&format!("/bot{TOKEN}/")).map(str::to_string) else {
        return reply(401, json!({"ok": false, "error_code": 401, "description": "Unauthorized"}));
    };
    let body = request.into_body().collect().await.map(|body| body.to_bytes()).unwrap_or_default();
    let (params, files) = match content_type.split_once("boundary=") {
        Some((form, boundary)) if form.starts_with("multipart/form-data") => {
            multipart(&body, boundary.trim_matches('"'))
        }
        _ => (params_of(&query, &content_type, &body), vec![]),
    };
    let chat = params["chat_id"].as_i64().or_else(|| params["chat_id"].as_str().and_then(|s| s.parse().ok()));
    for (_, name, content_type, bytes) in files {
        let sent = SentFile { method: method.clone(), chat: chat.unwrap_or_default(), name, content_type, bytes };
        state.sent_files.lock().unwrap_or_else(PoisonError::into_inner).push(sent);
    }
    let limited = state.limited.lock().unwrap_or_else(PoisonError::into_inner).remove(&method);
    let (status, answer) = match limited {
        Some(seconds) => (
            429,
            json!({"ok": false, "error_code": 429, "description": format!("Too Many Requests: retry after {seconds}"),
                "parameters": {"retry_after": seconds}}),
        ),
        None => match method.as_str() {
            "getUpdates" => (200, get_updates(state, &params).await),
            other => (200, call(state, other, &params)),
        },
    };
    let result = answer.get("result").cloned().unwrap_or(Value::Null);
    state.calls.lock().unwrap_or_else(PoisonError::into_inner).push(Call {
        method,
        params,
        limited: limited.is_some(),
        answer: result,
        at: std::time::Instant::now(),
        nanos: crate::fake_provider::clock_nanos(),
    });
    state.changed();
    reply(status, answer)
}

/// A multipart/form-data body: its fields (a file as its name, type and size) and its files
/// (field, name, type, bytes).
type FormFile = (String, String, String, Vec<u8>);
fn multipart(body: &[u8], boundary: &str) -> (Value, Vec<FormFile>) {
    let (mut fields, mut files) = (serde_json::Map::new(), vec![]);
    let delimiter = format!("--{boundary}");
    let find = |haystack: &[u8], needle: &[u8], from: usize| {
        haystack.get(from..)?.windows(needle.len()).position(|window| window == needle).map(|at| at + from)
    };
    let mut at = find(body, delimiter.as_bytes(), 0).map(|start| start + delimiter.len());
    while let Some(start) = at {
        if body.get(start..start + 2) == Some(b"--") {
            break;
        }
        let Some(end) = find(body, format!("\r\n{delimiter}").as_bytes(), start) else { break };
        let part = &body[start..end];
        let part = part.strip_prefix(b"\r\n").unwrap_or(part);
        let Some(split) = find(part, b"\r\n\r\n", 0) else { break };
        let headers = String::from_utf8_lossy(&part[..split]).to_string();
        let content = part[split + 4..].to_vec();
        let quoted = |key: &str| {
            let (_, rest) = headers.split_once(&format!("{key}=\""))?;
            rest.split_once('"').map(|(value, _)| value.to_string())
        };
        let content_type = headers
            .lines()
            .find_map(|line| {
                line.to_ascii_lowercase().strip_prefix("content-type:").map(|value| value.trim().to_string())
            })
            .unwrap_or_default();
        if let Some(name) = quoted("name") {
            match quoted("filename") {
                Some(file) => {
                    fields.insert(
                        name.clone(),
                        json!({"filename": file, "content_type": content_type, "size": content.len()}),
                    );
                    files.push((name, file, content_type, content));
                }
                None => {
                    fields.insert(name, Value::String(String::from_utf8_lossy(&content).into_owned()));
                }
            }
        }
        at = Some(end + 2 + delimiter.len());
    }
    (Value::Object(fields), files)
}

/// `getUpdates`: confirms what `offset` is past, then answers the rest, waiting up to
/// `timeout` seconds (at most 2 here, so a test's updates are never held long) for one.
async fn get_updates(state: &Arc<State>, params: &Value) -> Value {
    let offset = params["offset"].as_i64().or_else(|| params["offset"].as_str().and_then(|s| s.parse().ok()));
    let wait = params["timeout"].as_u64().or_else(|| params["timeout"].as_str().and_then(|s| s.parse().ok()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait.unwrap_or(0).min(2));
    let mut changes = state.changes.as_ref().map(watch::Sender::subscribe);
    loop {
        let pending: Vec<Value> = {
            let mut updates = state.updates.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(offset) = offset {
                updates.retain(|update| update["update_id"].as_i64().unwrap_or(0) >= offset);
            }
            let mut again = state.again.lock().unwrap_or_else(PoisonError::into_inner);
            again.drain(..).chain(updates.iter().cloned()).collect()
        };
        if !pending.is_empty() || tokio::time::Instant::now() >= deadline {
            return json!({"ok": true, "result": pending});
        }
        match changes.as_mut() {
            Some(changes) => {
                // silent-ok: a deadline passed is the answer "nothing new".
                let _ = tokio::time::timeout_at(deadline, changes.changed()).await;
            }
            None => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Every other method.
fn call(state: &Arc<State>, method: &str, params: &Value) -> Value {
    let int = |value: &Value| value.as_i64().or_else(|| value.as_str().and_then(|s| s.parse().ok()));
    match method {
        "getMe" => json!({"ok": true, "result": {"id": BOT_ID, "is_bot": true, "first_name": "baaaht",
            "username": BOT_USERNAME, "can_join_groups": true, "can_read_all_group_messages": false,
            "supports_inline_queries": false}}),
        "sendMessage" => {
            let Some(chat) = int(&params["chat_id"]) else {
                return json!({"ok": false, "error_code": 400, "description": "Bad Request: chat_id is empty"});
            };
            let text = params["text"].as_str().unwrap_or_default();
            if text.is_empty() || text.chars().count() > 4096 {
                return json!({"ok": false, "error_code": 400, "description": "Bad Request: message text is empty or too long"});
            }
            let id = state.next_message.fetch_add(1, Ordering::SeqCst);
            let mut message = json!({"message_id": id, "date": 1_760_000_000, "text": text,
                "chat": {"id": chat, "type": if chat > 0 { "private" } else { "supergroup" }},
                "from": {"id": BOT_ID, "is_bot": true, "first_name": "baaaht", "username": BOT_USERNAME}});
            if params.get("reply_markup").is_some() {
                message["reply_markup"] = params["reply_markup"].clone();
            }
            json!({"ok": true, "result": message})
        }
        "editMessageText" => {
            let (Some(chat), Some(id)) = (int(&params["chat_id"]), int(&params["message_id"])) else {
                return json!({"ok": false, "error_code": 400, "description": "Bad Request: message to edit not found"});
            };
            let text = params["text"].as_str().unwrap_or_default();
            json!({"ok": true, "result": {"message_id": id, "date": 1_760_000_000, "edit_date": 1_760_000_001,
                "text": text, "chat": {"id": chat, "type": if chat > 0 { "private" } else { "supergroup" }},
                "from": {"id": BOT_ID, "is_bot": true, "first_name": "baaaht"}}})
        }
        "getFile" => {
            let id = params["file_id"].as_str().unwrap_or_default();
            let files = state.files.lock().unwrap_or_else(PoisonError::into_inner);
            match files.get(id) {
                Some((path, bytes)) => json!({"ok": true, "result": {"file_id": id, "file_unique_id": format!("u{id}"),
                    "file_size": bytes.len(), "file_path": path}}),
                None => json!({"ok": false, "error_code": 400, "description": "Bad Request: invalid file_id"}),
            }
        }
        "sendDocument" | "sendPhoto" | "sendVoice" => {
            let field = match method {
                "sendPhoto" => "photo",
                "sendVoice" => "voice",
                _ => "document",
            };
            let (Some(chat), Some(size)) = (int(&params["chat_id"]), params[field]["size"].as_u64()) else {
                return json!({"ok": false, "error_code": 400, "description": format!("Bad Request: there is no {field} in the request")});
            };
            let id = state.next_message.fetch_add(1, Ordering::SeqCst);
            let file_id = format!("sent-{id}");
            let mut message = json!({"message_id": id, "date": 1_760_000_000,
                "chat": {"id": chat, "type": if chat > 0 { "private" } else { "supergroup" }},
                "from": {"id": BOT_ID, "is_bot": true, "first_name": "baaaht", "username": BOT_USERNAME}});
            message[field] = if method == "sendPhoto" {
                json!([{"file_id": file_id, "file_unique_id": format!("u{file_id}"), "width": 1, "height": 1, "file_size": size}])
            } else if method == "sendVoice" {
                json!({"file_id": file_id, "file_unique_id": format!("u{file_id}"), "duration": int(&params["duration"]).unwrap_or(0),
                    "mime_type": params[field]["content_type"], "file_size": size})
            } else {
                json!({"file_id": file_id, "file_unique_id": format!("u{file_id}"), "file_name": params[field]["filename"],
                    "mime_type": params[field]["content_type"], "file_size": size})
            };
            json!({"ok": true, "result": message})
        }
        "answerCallbackQuery" | "sendChatAction" | "deleteWebhook" => json!({"ok": true, "result": true}),
        other => json!({"ok": false, "error_code": 404, "description": format!("Not Found: method {other}")}),
    }
}

/// The Telegram gateway `home` for the fake's bot, run by the test (its token in the daemon's
/// environment, as the secrets store's fallback).
pub fn gateway_for(rt: &tokio::runtime::Runtime, daemon: &crate::TestDaemon, fake: &FakeTelegram) -> crate::Running {
    gateway_and_registration_for(rt, daemon, fake).0
}

/// The Telegram users the test bot's gateway lets in (`--allow`): the tests' people (1, 7, 42,
/// 43) and the benchmark's (1000 to 1099). Anyone else waits for an admin.
pub fn allowed() -> String {
    let mut allowed = vec!["1".to_string(), "7".into(), "42".into(), "43".into()];
    allowed.extend((1000..1100).map(|user: u32| user.to_string()));
    allowed.join(",")
}

/// The test bot's gateway, `home`, as the host registers it.
/// Its `--allow` is in the registration, where the daemon reads who it admits.
fn registration() -> baaaht_proto::v1::AddGatewayRequest {
    baaaht_proto::v1::AddGatewayRequest {
        kind: "telegram".into(),
        name: "home".into(),
        bot: BOT_ID.to_string(),
        args: vec!["--allow".into(), allowed()],
        ..Default::default()
    }
}

/// [`gateway_for`], with the gateway's registration (its socket and token), to call the daemon
/// as it does.
pub fn gateway_and_registration_for(
    rt: &tokio::runtime::Runtime,
    daemon: &crate::TestDaemon,
    fake: &FakeTelegram,
) -> (crate::Running, crate::gateway::Gateway) {
    let (api, allowed) = (fake.api_url(), allowed());
    crate::gateway::run_external(
        rt,
        daemon,
        registration(),
        "baaaht-telegram",
        &["--api-url", &api, "--allow", &allowed],
    )
}

/// [`gateway_and_registration_for`], the gateway keeping the chats it served in `state` (as it
/// does in the daemon's care); started again by [`restart_gateway`].
pub fn gateway_keeping_chats(
    rt: &tokio::runtime::Runtime,
    daemon: &crate::TestDaemon,
    fake: &FakeTelegram,
    state: &std::path::Path,
) -> (crate::Running, crate::gateway::Gateway) {
    let (api, state, allowed) = (fake.api_url(), state.display().to_string(), allowed());
    let args = ["--api-url", api.as_str(), "--state-dir", state.as_str(), "--allow", allowed.as_str()];
    crate::gateway::run_external(rt, daemon, registration(), "baaaht-telegram", &args)
}

/// The gateway of [`gateway_keeping_chats`] started again (logging to `baaaht-telegram-2.log`).
pub fn restart_gateway(
    daemon: &crate::TestDaemon,
    registered: &crate::gateway::Gateway,
    fake: &FakeTelegram,
    state: &std::path::Path,
) -> crate::Running {
    let (api, state, allowed) = (fake.api_url(), state.display().to_string(), allowed());
    let args = ["--api-url", api.as_str(), "--state-dir", state.as_str(), "--allow", allowed.as_str()];
    crate::gateway::start_external(daemon, registered, "baaaht-telegram", &args, "baaaht-telegram-2.log")
}

/// What a daemon needs for [`gateway_for`]: the bot's token.
pub fn telegram_options() -> crate::DaemonOptions {
    crate::DaemonOptions { env: vec![("TELEGRAM_BOT_TOKEN_HOME".into(), TOKEN.into())], ..Default::default() }
}
