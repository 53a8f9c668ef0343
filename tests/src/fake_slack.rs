//! A fake Slack workspace (the Slack seam's test double): the Web API methods the gateway calls,
//! over HTTP on loopback, and Socket Mode over a WebSocket (`/link`) on the same port. Its wire format is proved
//! by driving it with Slack's official Python SDK (`tests/tests/slack.rs`), so it is not just
//! agreeing with our own client.
//!
//! It records every Web API call (method, parameters, token) and every Socket Mode ack, lets a
//! test push events (as Slack's `events_api` envelopes), ask the client to reconnect
//! (`disconnect`), answer a method once with 429 and `Retry-After`, and serve shared files.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baaaht_proto::v1;
use futures_util::{SinkExt as _, StreamExt as _};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::Message;

use crate::{DaemonOptions, TestDaemon};

/// The fake app's ids.
pub const APP_ID: &str = "A0FAKEAPP";
pub const BOT_USER: &str = "UBOT";

/// One Web API call as the fake received it.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    /// The parameters, from a JSON body, a form body or the query string.
    pub params: Value,
    /// The bearer token it carried.
    pub token: String,
    /// Whether it was answered with 429.
    pub limited: bool,
    /// What the fake answered (for a message posted: its `ts`).
    pub answer: Value,
    /// When it arrived.
    pub at: std::time::Instant,
    /// When it arrived on the fake provider's clock ([`crate::fake_provider::clock_nanos`]).
    pub nanos: u64,
}

#[derive(Default)]
struct State {
    team: String,
    api: String,
    socket_mode: String,
    calls: Mutex<Vec<Call>>,
    acks: Mutex<Vec<Value>>,
    /// The open Socket Mode connections, newest last.
    connections: Mutex<Vec<mpsc::UnboundedSender<Message>>>,
    opened: AtomicU64,
    limited: Mutex<HashMap<String, u64>>,
    files: Mutex<HashMap<String, Vec<u8>>>,
    /// Files the bot uploads: id → its name (files.getUploadURLExternal) and its bytes.
    uploads: Mutex<HashMap<String, (String, Vec<u8>)>>,
    /// Whether the workspace has Slack's streaming API (chat.startStream …).
    streaming: std::sync::atomic::AtomicBool,
    /// Whether Socket Mode is down: connections closed, apps.connections.open refused.
    offline: std::sync::atomic::AtomicBool,
    next: AtomicU64,
    changes: Option<watch::Sender<u64>>,
}

impl State {
    fn changed(&self) {
        if let Some(changes) = &self.changes {
            changes.send_modify(|count| *count += 1);
        }
    }

    /// A message timestamp, unique and increasing, as Slack writes them.
    fn ts(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        format!("1760000000.{n:06}")
    }
}

/// A file the bot shared: its name and bytes, where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedFile {
    pub name: String,
    pub bytes: Vec<u8>,
    pub channel: String,
    pub thread: Option<String>,
}

/// A running fake workspace.
#[derive(Clone)]
pub struct FakeSlack {
    state: Arc<State>,
    changes: watch::Receiver<u64>,
}

impl std::fmt::Debug for FakeSlack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeSlack").field("api", &self.state.api).finish_non_exhaustive()
    }
}

impl FakeSlack {
    /// Starts a workspace `team` on a loopback port (the Web API under `/api`, Socket Mode at
    /// `/link`).
    pub async fn start(team: &str) -> std::io::Result<FakeSlack> {
        let api = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let (sender, changes) = watch::channel(0);
        let state = Arc::new(State {
            team: team.into(),
            api: format!("http://{}/api", api.local_addr()?),
            socket_mode: format!("ws://{}/link", api.local_addr()?),
            changes: Some(sender),
            ..State::default()
        });
        tokio::spawn(serve_api(api, state.clone()));
        Ok(FakeSlack { state, changes })
    }

    /// The Web API's base, without a trailing slash: `http://127.0.0.1:PORT/api`.
    pub fn api_url(&self) -> String {
        self.state.api.clone()
    }

    pub fn team(&self) -> String {
        self.state.team.clone()
    }

    /// Every Web API call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.state.calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The calls after the first `since`.
    pub fn calls_since(&self, since: usize) -> Vec<Call> {
        self.state.calls.lock().unwrap_or_else(PoisonError::into_inner).iter().skip(since).cloned().collect()
    }

    /// How many calls so far.
    pub fn call_count(&self) -> usize {
        self.state.calls.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The calls of `method` so far.
    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        self.calls().into_iter().filter(|call| call.method == method).collect()
    }

    /// Every Socket Mode ack so far (`{"envelope_id": …}`).
    pub fn acks(&self) -> Vec<Value> {
        self.state.acks.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many Socket Mode connections were opened so far.
    pub fn connections_opened(&self) -> u64 {
        self.state.opened.load(Ordering::SeqCst)
    }

    /// Waits until `check` holds, up to `limit`; false when it never did.
    pub async fn wait_for(&self, limit: Duration, check: impl Fn(&FakeSlack) -> bool) -> bool {
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

    /// Sends `frame` on the newest Socket Mode connection; false when none is open.
    pub fn send(&self, frame: &Value) -> bool {
        let connections = self.state.connections.lock().unwrap_or_else(PoisonError::into_inner);
        connections.last().is_some_and(|connection| connection.send(Message::text(frame.to_string())).is_ok())
    }

    /// Delivers `event` as an `events_api` envelope with `event_id`; the envelope's id.
    pub fn push_event(&self, event: Value, event_id: &str, retry_attempt: u32) -> Option<String> {
        let envelope_id = format!("env-{}", self.state.next.fetch_add(1, Ordering::SeqCst) + 1);
        let frame = json!({
            "envelope_id": envelope_id,
            "payload": {
                "token": "verification-token",
                "team_id": self.state.team,
                "api_app_id": APP_ID,
                "event": event,
                "type": "event_callback",
                "event_id": event_id,
                "event_time": 1_760_000_000,
                "authorizations": [{"team_id": self.state.team, "user_id": BOT_USER, "is_bot": true}],
            },
            "type": "events_api",
            "accepts_response_payload": false,
            "retry_attempt": retry_attempt,
            "retry_reason": if retry_attempt > 0 { "timeout" } else { "" },
        });
        self.send(&frame).then_some(envelope_id)
    }

    /// How many Socket Mode connections are open now.
    pub fn open_connections(&self) -> usize {
        self.state.connections.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Takes Socket Mode down (every connection closed, none opened) or, with `false`, up again.
    pub fn set_offline(&self, offline: bool) {
        self.state.offline.store(offline, Ordering::SeqCst);
        if offline {
            let connections = self.state.connections.lock().unwrap_or_else(PoisonError::into_inner);
            for connection in connections.iter() {
                // silent-ok: a connection already gone needs no close.
                let _ = connection.send(Message::Close(None));
            }
        }
    }

    /// Asks the client to reconnect, as Slack does before it recycles a connection.
    pub fn disconnect(&self, reason: &str) -> bool {
        self.send(&json!({"type": "disconnect", "reason": reason, "debug_info": {"host": "fake-applink"}}))
    }

    /// Gives the workspace Slack's streaming API; without it `chat.startStream` is refused as
    /// a workspace without the app's AI features refuses it.
    pub fn offer_streaming(&self) {
        self.state.streaming.store(true, Ordering::SeqCst);
    }

    /// The text a streamed message `ts` got, chunk after chunk (appendStream and stopStream).
    pub fn streamed_text(&self, ts: &str) -> String {
        let calls = self.calls();
        let mut text = String::new();
        for call in calls.iter().filter(|call| {
            matches!(call.method.as_str(), "chat.appendStream" | "chat.stopStream") && call.params["ts"] == ts
        }) {
            text.push_str(call.params["markdown_text"].as_str().unwrap_or_default());
            for chunk in call.params["chunks"].as_array().into_iter().flatten() {
                if chunk["type"] == "markdown_text" {
                    text.push_str(chunk["text"].as_str().unwrap_or_default());
                }
            }
        }
        text
    }

    /// Answers the next call of `method` with 429 and `Retry-After: seconds`.
    pub fn rate_limit_once(&self, method: &str, seconds: u64) {
        self.state.limited.lock().unwrap_or_else(PoisonError::into_inner).insert(method.into(), seconds);
    }

    /// The files the bot shared (files.completeUploadExternal), in order.
    pub fn shared_files(&self) -> Vec<SharedFile> {
        let uploads = self.state.uploads.lock().unwrap_or_else(PoisonError::into_inner).clone();
        self.calls_of("files.completeUploadExternal")
            .into_iter()
            .flat_map(|call| {
                let files = match &call.params["files"] {
                    Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
                    other => other.clone(),
                };
                let channel = call.params["channel_id"].as_str().unwrap_or_default().to_string();
                let thread = call.params["thread_ts"].as_str().map(str::to_string);
                files
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|file| uploads.get(file["id"].as_str()?).cloned())
                    .map(|(name, bytes)| SharedFile { name, bytes, channel: channel.clone(), thread: thread.clone() })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// A file shared in the workspace: its object as events carry it, served to bot tokens.
    pub fn add_file(&self, id: &str, name: &str, mimetype: &str, bytes: Vec<u8>) -> Value {
        let size = bytes.len();
        self.state.files.lock().unwrap_or_else(PoisonError::into_inner).insert(id.into(), bytes);
        json!({
            "id": id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": name.rsplit('.').next().unwrap_or_default(),
            "size": size,
            "url_private": format!("{}/files/{id}/{}", self.state.api, name.replace(' ', "%20")),
            "url_private_download": format!("{}/files/{id}/download/{}", self.state.api, name.replace(' ', "%20")),
        })
    }
}

async fn serve_api(listener: tokio::net::TcpListener, state: Arc<State>) {
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
                .with_upgrades()
                .await;
        });
    }
}

type Response = hyper::Response<Full<Bytes>>;

fn respond(status: u16, body: Value) -> Response {
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json; charset=utf-8")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap_or_default()
}

/// `a=b&c=d` with `+` and `%XX` decoded (a form body or a query string), each field a string.
pub(crate) fn form(text: &str) -> Value {
    let decode = |part: &str| {
        let bytes = part.replace('+', " ").into_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
                (b'%', Some(byte)) => {
                    out.push(byte);
                    i += 3;
                }
                (byte, _) => {
                    out.push(byte);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    let mut params = serde_json::Map::new();
    for pair in text.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        params.insert(decode(key), Value::String(decode(value)));
    }
    Value::Object(params)
}

/// Records a call made to a file's address (a download, an upload), not to a Web API method.
fn record_file_call(state: &State, method: String, params: Value, token: &str) {
    let (at, nanos) = (std::time::Instant::now(), crate::fake_provider::clock_nanos());
    let call = Call { method, params, token: token.to_string(), limited: false, answer: Value::Null, at, nanos };
    state.calls.lock().unwrap_or_else(PoisonError::into_inner).push(call);
    state.changed();
}

async fn answer(state: &Arc<State>, mut request: hyper::Request<hyper::body::Incoming>) -> Response {
    let path = request.uri().path().to_string();
    if path == "/link" {
        let Some(key) = request.headers().get("sec-websocket-key").cloned() else {
            return respond(400, json!({"ok": false, "error": "not a WebSocket handshake"}));
        };
        let upgrade = hyper::upgrade::on(&mut request);
        let state = state.clone();
        tokio::spawn(async move {
            let Ok(upgraded) = upgrade.await else { return };
            let socket = tokio_tungstenite::WebSocketStream::from_raw_socket(
                hyper_util::rt::TokioIo::new(upgraded),
                tokio_tungstenite::tungstenite::protocol::Role::Server,
                None,
            )
            .await;
            socket_mode_session(socket, state).await;
        });
        return hyper::Response::builder()
            .status(101)
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header(
                "sec-websocket-accept",
                tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()),
            )
            .body(Full::new(Bytes::new()))
            .unwrap_or_default();
    }
    let query = request.uri().query().unwrap_or_default().to_string();
    let token = request
        .headers()
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string();
    let json_body = request
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    let body = request.into_body().collect().await.map(|body| body.to_bytes()).unwrap_or_default();
    // An upload address files.getUploadURLExternal gave: the file's bytes, as Slack takes them.
    if let Some(id) = path.strip_prefix("/upload/") {
        record_file_call(state, format!("upload/{id}"), json!({"bytes": body.len()}), &token);
        let mut uploads = state.uploads.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((_, bytes)) = uploads.get_mut(id) else {
            return respond(404, json!({"ok": false, "error": "invalid_upload_url"}));
        };
        *bytes = body.to_vec();
        drop(uploads);
        state.changed();
        return hyper::Response::builder()
            .status(200)
            .header("content-type", "text/plain; charset=utf-8")
            .body(Full::new(Bytes::from(format!("OK - {}", body.len()))))
            .unwrap_or_default();
    }
    if let Some(file) = path.strip_prefix("/api/files/") {
        let id = file.split('/').next().unwrap_or_default();
        record_file_call(state, format!("files/{id}"), Value::Null, &token);
        if !token.starts_with("xoxb-") {
            return respond(403, json!({"ok": false, "error": "not_authed"}));
        }
        let found = state.files.lock().unwrap_or_else(PoisonError::into_inner).get(id).cloned();
        return match found {
            Some(bytes) => hyper::Response::builder()
                .status(200)
                .header("content-type", "application/octet-stream")
                .body(Full::new(Bytes::from(bytes)))
                .unwrap_or_default(),
            None => respond(404, json!({"ok": false, "error": "file_not_found"})),
        };
    }
    let Some(method) = path.strip_prefix("/api/").map(str::to_string) else {
        return respond(404, json!({"ok": false, "error": "unknown_method"}));
    };
    let mut params = form(&query);
    let from_body = if json_body {
        serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null)
    } else {
        form(&String::from_utf8_lossy(&body))
    };
    if let (Some(params), Value::Object(more)) = (params.as_object_mut(), from_body) {
        params.extend(more);
    }
    let limited = state.limited.lock().unwrap_or_else(PoisonError::into_inner).remove(&method);
    let record = |answer: &Value| {
        let (method, params, token) = (method.clone(), params.clone(), token.clone());
        let at = std::time::Instant::now();
        let nanos = crate::fake_provider::clock_nanos();
        let call = Call { method, params, token, limited: limited.is_some(), answer: answer.clone(), at, nanos };
        state.calls.lock().unwrap_or_else(PoisonError::into_inner).push(call);
        state.changed();
    };
    if let Some(seconds) = limited {
        record(&json!({"ok": false, "error": "ratelimited"}));
        return hyper::Response::builder()
            .status(429)
            .header("retry-after", seconds.to_string())
            .header("content-type", "application/json; charset=utf-8")
            .body(Full::new(Bytes::from(json!({"ok": false, "error": "ratelimited"}).to_string())))
            .unwrap_or_default();
    }
    let wanted = if method == "apps.connections.open" { "xapp-" } else { "xoxb-" };
    if !token.starts_with(wanted) {
        let refused = json!({"ok": false, "error": "invalid_auth"});
        record(&refused);
        return respond(200, refused);
    }
    let text = |key: &str| params[key].as_str().unwrap_or_default().to_string();
    let channel = text("channel");
    let body = match method.as_str() {
        "apps.connections.open" if state.offline.load(Ordering::SeqCst) => {
            json!({"ok": false, "error": "internal_error"})
        }
        "apps.connections.open" => {
            json!({"ok": true, "url": format!("{}?ticket={}", state.socket_mode, state.ts())})
        }
        "auth.test" => json!({
            "ok": true, "url": "https://fake.slack.test/", "team": "Fake", "user": "baaaht",
            "team_id": state.team, "user_id": BOT_USER, "bot_id": "BBOT", "is_enterprise_install": false,
        }),
        "chat.startStream" if !state.streaming.load(Ordering::SeqCst) => {
            json!({"ok": false, "error": "not_allowed_token_type"})
        }
        "chat.postMessage" | "chat.startStream" => {
            let ts = state.ts();
            json!({"ok": true, "channel": channel, "ts": ts, "message": {"type": "message", "text": text("text"), "ts": ts, "user": BOT_USER}})
        }
        "chat.update" | "chat.appendStream" | "chat.stopStream" => {
            let ts = text("ts");
            json!({"ok": true, "channel": channel, "ts": ts, "text": text("text"),
                "message": {"type": "message", "text": text("text"), "ts": ts, "user": BOT_USER}})
        }
        "assistant.threads.setStatus" | "reactions.add" => json!({"ok": true}),
        "files.getUploadURLExternal" if text("filename").is_empty() || text("length").parse::<u64>().is_err() => {
            json!({"ok": false, "error": "invalid_arguments"})
        }
        "files.getUploadURLExternal" => {
            let id = format!("F{}", state.next.fetch_add(1, Ordering::SeqCst) + 1);
            state.uploads.lock().unwrap_or_else(PoisonError::into_inner).insert(id.clone(), (text("filename"), vec![]));
            let base = state.api.trim_end_matches("/api");
            json!({"ok": true, "upload_url": format!("{base}/upload/{id}"), "file_id": id})
        }
        "files.completeUploadExternal" => {
            let files = match &params["files"] {
                Value::String(listed) => serde_json::from_str(listed).unwrap_or(Value::Null),
                other => other.clone(),
            };
            let uploads = state.uploads.lock().unwrap_or_else(PoisonError::into_inner);
            let known = files.as_array().is_some_and(|files| {
                !files.is_empty()
                    && files.iter().all(|file| file["id"].as_str().is_some_and(|id| uploads.contains_key(id)))
            });
            if known {
                json!({"ok": true, "files": files})
            } else {
                json!({"ok": false, "error": "file_not_found"})
            }
        }
        "users.info" => {
            let user = text("user");
            json!({"ok": true, "user": {"id": user, "team_id": state.team, "name": user.to_lowercase(),
                "real_name": format!("User {user}"), "is_bot": false,
                "profile": {"display_name": format!("user-{}", user.to_lowercase()), "real_name": format!("User {user}")}}})
        }
        "conversations.info" => json!({"ok": true, "channel": {
            "id": channel, "name": format!("channel-{}", channel.to_lowercase()),
            "is_channel": !channel.starts_with('D'), "is_im": channel.starts_with('D'), "is_private": false,
        }}),
        _ => json!({"ok": false, "error": "unknown_method"}),
    };
    record(&body);
    respond(200, body)
}

/// One Socket Mode connection: hello, then the frames the test sends; acks are recorded.
async fn socket_mode_session<S>(socket: tokio_tungstenite::WebSocketStream<S>, state: Arc<State>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut sink, mut source) = socket.split();
    let (outgoing, mut queued) = mpsc::unbounded_channel::<Message>();
    let hello = json!({
        "type": "hello", "num_connections": 1, "connection_info": {"app_id": APP_ID},
        "debug_info": {"host": "fake-applink", "build_number": 1, "approximate_connection_time": 18060},
    });
    if sink.send(Message::text(hello.to_string())).await.is_err() {
        return;
    }
    state.connections.lock().unwrap_or_else(PoisonError::into_inner).push(outgoing.clone());
    state.opened.fetch_add(1, Ordering::SeqCst);
    state.changed();
    loop {
        tokio::select! {
            frame = queued.recv() => match frame {
                Some(frame) => if sink.send(frame).await.is_err() { break },
                None => break,
            },
            incoming = source.next() => match incoming {
                Some(Ok(Message::Text(text))) => {
                    if let Ok(ack) = serde_json::from_str::<Value>(&text) {
                        if ack.get("envelope_id").is_some() {
                            state.acks.lock().unwrap_or_else(PoisonError::into_inner).push(ack);
                            state.changed();
                        }
                    }
                }
                Some(Ok(Message::Ping(payload))) => {
                    if sink.send(Message::Pong(payload)).await.is_err() { break }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
        }
    }
    state.connections.lock().unwrap_or_else(PoisonError::into_inner).retain(|open| !open.same_channel(&outgoing));
    state.changed();
}

// The real gateway against the fake: what the e2e tests and `baaaht-bench slack` share.

/// A running `baaaht-slack`, stopped on drop.
pub struct SlackGateway {
    process: crate::Running,
    /// The gateway's socket and token, for calls the test makes as the gateway.
    pub socket: String,
    pub token: String,
}

impl SlackGateway {
    pub fn log_text(&self) -> String {
        self.process.log_text()
    }
}

/// Registers the Slack gateway `work` for the fake's workspace (its tokens in the daemon's
/// environment, as the secrets store's fallback) and starts `baaaht-slack` for it.
pub fn gateway_for(rt: &tokio::runtime::Runtime, daemon: &TestDaemon, fake: &FakeSlack) -> SlackGateway {
    gateway_with(rt, daemon, fake, &[])
}

/// [`gateway_for`] with more of `baaaht-slack`'s options.
pub fn gateway_with(
    rt: &tokio::runtime::Runtime,
    daemon: &TestDaemon,
    fake: &FakeSlack,
    args: &[&str],
) -> SlackGateway {
    let request =
        v1::AddGatewayRequest { kind: "slack".into(), name: "work".into(), team: fake.team(), ..Default::default() };
    let api = fake.api_url();
    let args: Vec<&str> = ["--api-url", api.as_str()].into_iter().chain(args.iter().copied()).collect();
    let (process, gateway) = crate::gateway::run_external(rt, daemon, request, "baaaht-slack", &args);
    SlackGateway { process, socket: gateway.socket.display().to_string(), token: gateway.token }
}

/// The texts the bot wrote in `channel` (posted or updated; refused calls left out).
pub fn shown_in(fake: &FakeSlack, channel: &str) -> Vec<String> {
    fake.calls()
        .into_iter()
        .filter(|call| {
            let written = matches!(call.method.as_str(), "chat.postMessage" | "chat.update");
            written && !call.limited && call.params["channel"] == channel
        })
        .map(|call| call.params["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The signing secret of the gateway `work` in [`slack_options`].
pub const SIGNING_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

pub fn slack_options() -> DaemonOptions {
    DaemonOptions {
        env: vec![
            ("SLACK_APP_TOKEN_WORK".into(), "xapp-1-work".into()),
            ("SLACK_BOT_TOKEN_WORK".into(), "xoxb-1-work".into()),
            ("SLACK_SIGNING_SECRET_WORK".into(), SIGNING_SECRET.into()),
        ],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_are_decoded() {
        assert_eq!(form("channel=C1&text=hello+there%21&x"), json!({"channel": "C1", "text": "hello there!", "x": ""}));
    }
}
