//! The page's JSON API: conversations (list, read, new, resume, archive, fork, compact, model,
//! stop, export), rooms, and uploads. Every call is made to the daemon as the signed-in user,
//! which decides what they may see and do; every state-changing call needs the session's CSRF
//! token in `x-csrf-token` ([`User`]). The daemon's text reaches the browser only where it is
//! about what the user asked ([`api_error`]).

use std::sync::Arc;

use axum::body::{Body, BodyDataStream};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use baaaht_proto::v1;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc::Sender;

use crate::app::{answer, api_error, error, App, Place, User};

/// What the page shows of the user the daemon knows.
pub fn profile_json(me: &v1::UserProfile) -> Value {
    json!({"id": me.id, "name": me.name, "admin": me.admin, "preferred_channel": me.preferred_channel})
}

#[derive(Debug, Deserialize)]
pub struct Settings {
    name: Option<String>,
    preferred_channel: Option<String>,
}

/// `POST /api/settings`: the user's display name and preferred channel, kept by the daemon
/// (a field left out stays as it is).
pub async fn settings(State(app): State<Arc<App>>, user: User, Json(settings): Json<Settings>) -> Response {
    let request = v1::ProfileUpdate { name: settings.name, preferred_channel: settings.preferred_channel };
    answer(app.daemon.clone().gateways.update_profile(app.as_user(&user.session, request)).await, |me| {
        app.keep_profile(&user.session, &me);
        profile_json(&me)
    })
}

/// A session as the page lists it.
fn session_json(header: &v1::SessionHeader) -> Value {
    let room = (header.context_type == v1::ContextType::Group as i32).then_some(header.group_id.as_str());
    json!({
        "id": header.id, "title": header.title, "status": header.status, "created": header.created,
        "last_activity": header.last_activity, "model": header.model, "room": room.unwrap_or_default(),
        "forked_from": header.forked_from_session, "forked_at": header.forked_from_entry,
    })
}

/// An entry of a transcript as the page shows it (to `me`: whether a message is theirs, not
/// who else's it is but by name).
fn entry_json(entry: &v1::SessionEntry, me: &crate::events::Me) -> Option<Value> {
    use v1::session_entry::Entry;
    let base = json!({"id": entry.id, "parent": entry.parent, "time": entry.timestamp});
    let agent = baaaht_gateway_kit::sentences::agent;
    let details = match entry.entry.as_ref()? {
        Entry::Message(message) => json!({"kind": "message", "role": message.role, "text": message.content,
            "mine": me.wrote(&message.sender_id), "name": message.sender_name,
            "attachments": crate::events::attachments_json(&message.attachments)}),
        Entry::Delegate(delegate) => json!({"kind": "delegation", "agent": agent(delegate.agent),
            "task": delegate.task, "result": delegate.result}),
        Entry::Compaction(compaction) => json!({"kind": "compaction", "text": compaction.summary}),
        Entry::ModelChange(change) => {
            json!({"kind": "model", "from": change.previous_model, "to": change.new_model})
        }
        // An approval or a notice, as the event that showed it (the page shows it the same way).
        Entry::Activity(activity) => {
            json!({"kind": "activity", "after": activity.after,
                "event": crate::events::to_json(activity.event.as_ref()?, me)?})
        }
    };
    let (Value::Object(mut base), Value::Object(details)) = (base, details) else { return None };
    base.extend(details);
    Some(Value::Object(base))
}

/// `GET /api/sessions`: the user's own conversations and their rooms', newest first (an
/// admin's list too: the daemon would show them everyone's, which is the admin tools' job).
pub async fn list(State(app): State<Arc<App>>, user: User) -> Response {
    let mut daemon = app.daemon.clone();
    let me = match app.profile(&user.session, std::time::Duration::ZERO).await {
        Ok(me) => me,
        Err(status) => return api_error(&status),
    };
    match daemon.sessions.list_sessions(app.as_user(&user.session, v1::SessionFilter::default())).await {
        Ok(list) => {
            let mut sessions = list.into_inner().sessions;
            sessions.retain(|session| {
                if session.context_type == v1::ContextType::Group as i32 {
                    me.groups.contains(&session.group_id)
                } else {
                    session.user_id == me.id
                }
            });
            sessions.sort_by(|a, b| b.last_activity.cmp(&a.last_activity).then_with(|| b.created.cmp(&a.created)));
            Json(json!({"sessions": sessions.iter().map(session_json).collect::<Vec<_>>()})).into_response()
        }
        Err(status) => api_error(&status),
    }
}

#[derive(Debug, Deserialize)]
pub struct NewSession {
    #[serde(default)]
    room: String,
    #[serde(default)]
    title: String,
}

/// `POST /api/sessions`: a new conversation, in the user's context or a room's.
pub async fn create(State(app): State<Arc<App>>, user: User, Json(new): Json<NewSession>) -> Response {
    let context = match app.context(&user.session, &Place { room: new.room }).await {
        Ok(context) => context,
        Err(status) => return api_error(&status),
    };
    let mut daemon = app.daemon.clone();
    let request = v1::NewSessionRequest { context: Some(context), title: new.title };
    answer(daemon.sessions.new_session(app.as_user(&user.session, request)).await, |header| session_json(&header))
}

#[derive(Debug, Deserialize)]
pub struct ReadQuery {
    #[serde(default)]
    leaf: String,
}

/// `GET /api/sessions/{id}`: a conversation, every entry (the page draws the tree) or the
/// branch that ends at `leaf`.
pub async fn read(
    State(app): State<Arc<App>>,
    user: User,
    Path(id): Path<String>,
    Query(query): Query<ReadQuery>,
) -> Response {
    let me = match app.me(&user.session).await {
        Ok(me) => me,
        Err(status) => return api_error(&status),
    };
    let mut daemon = app.daemon.clone();
    let request = v1::ReadSessionRequest { session_id: id, leaf_entry_id: query.leaf };
    answer(daemon.sessions.read_session(app.as_user(&user.session, request)).await, |transcript| {
        let header = transcript.header.as_ref().map(session_json).unwrap_or_default();
        let entries: Vec<Value> = transcript.entries.iter().filter_map(|entry| entry_json(entry, &me)).collect();
        json!({"session": header, "entries": entries, "running": transcript.running_turns})
    })
}

/// `POST /api/sessions/{id}/resume`.
pub async fn resume(State(app): State<Arc<App>>, user: User, Path(id): Path<String>) -> Response {
    let target = app.as_user(&user.session, v1::SessionRef { session_id: id });
    answer(app.daemon.clone().sessions.resume_session(target).await, |header| session_json(&header))
}

/// `POST /api/sessions/{id}/archive`.
pub async fn archive(State(app): State<Arc<App>>, user: User, Path(id): Path<String>) -> Response {
    let target = app.as_user(&user.session, v1::SessionRef { session_id: id });
    answer(app.daemon.clone().sessions.archive_session(target).await, |_| json!({}))
}

/// `POST /api/sessions/{id}/compact`.
pub async fn compact(State(app): State<Arc<App>>, user: User, Path(id): Path<String>) -> Response {
    let target = app.as_user(&user.session, v1::SessionRef { session_id: id });
    answer(app.daemon.clone().sessions.compact_session(target).await, |_| json!({}))
}

#[derive(Debug, Deserialize)]
pub struct Fork {
    #[serde(default)]
    entry: String,
}

/// `POST /api/sessions/{id}/fork`: a new conversation with this one's branch up to `entry`.
pub async fn fork(State(app): State<Arc<App>>, user: User, Path(id): Path<String>, Json(fork): Json<Fork>) -> Response {
    let mut daemon = app.daemon.clone();
    let request = v1::ForkSessionRequest { session_id: id, entry_id: fork.entry };
    answer(daemon.sessions.fork_session(app.as_user(&user.session, request)).await, |header| session_json(&header))
}

#[derive(Debug, Deserialize)]
pub struct Undo {
    #[serde(default)]
    turns: u32,
    #[serde(default)]
    redo: bool,
    #[serde(default)]
    apply: bool,
    /// With `apply`: the plan's `from` and `digest`, as shown.
    #[serde(default)]
    expect: String,
    #[serde(default)]
    digest: String,
}

/// `POST /api/sessions/{id}/undo`: the plan of taking the last `turns` turns back (files and
/// conversation), or, with `apply`, the undo itself.
pub async fn undo(State(app): State<Arc<App>>, user: User, Path(id): Path<String>, Json(undo): Json<Undo>) -> Response {
    let mut daemon = app.daemon.clone();
    let request = v1::UndoRequest {
        session_id: id,
        turns: undo.turns,
        redo: undo.redo,
        apply: undo.apply,
        expect_leaf_entry_id: undo.expect,
        context: None,
        expect_digest: undo.digest,
    };
    answer(daemon.sessions.undo(app.as_user(&user.session, request)).await, |plan| {
        json!({
            "text": plan.text,
            "applied": plan.applied,
            "from": plan.from_entry_id,
            "to": plan.to_entry_id,
            "digest": plan.digest,
            "files": plan.files.iter().map(|file| json!({"folder": file.folder, "path": file.path, "summary": file.summary})).collect::<Vec<_>>(),
            "skipped": plan.skipped.iter().map(|skip| json!({"folder": skip.folder, "path": skip.path, "why": skip.why})).collect::<Vec<_>>(),
            "notUndoable": plan.not_undoable,
        })
    })
}

#[derive(Debug, Deserialize)]
pub struct Model {
    model: String,
}

/// `POST /api/sessions/{id}/model`: the model the conversation's next turns use.
pub async fn model(
    State(app): State<Arc<App>>,
    user: User,
    Path(id): Path<String>,
    Json(model): Json<Model>,
) -> Response {
    let mut daemon = app.daemon.clone();
    let request = v1::SwitchModelRequest { session_id: id, model: model.model.trim().to_string() };
    answer(daemon.sessions.switch_model(app.as_user(&user.session, request)).await, |_| json!({}))
}

#[derive(Debug, Deserialize)]
pub struct Stop {
    #[serde(default)]
    turn: String,
}

/// `POST /api/sessions/{id}/stop`: cancels the turn (every turn of the conversation when none
/// is named).
pub async fn stop(State(app): State<Arc<App>>, user: User, Path(id): Path<String>, Json(stop): Json<Stop>) -> Response {
    let mut daemon = app.daemon.clone();
    let request = v1::CancelTurnRequest { session_id: id, turn_id: stop.turn };
    answer(daemon.sessions.cancel_turn(app.as_user(&user.session, request)).await, |_| json!({}))
}

#[derive(Debug, Deserialize)]
pub struct Answer {
    decision: String,
}

/// `POST /api/approvals/{id}`: answers a connection waiting for approval (once, session,
/// always or deny); the first answer anywhere wins.
pub async fn approve(
    State(app): State<Arc<App>>,
    user: User,
    Path(id): Path<String>,
    Json(given): Json<Answer>,
) -> Response {
    let mut daemon = app.daemon.clone();
    let request = v1::ApprovalAnswer { id, decision: given.decision };
    answer(daemon.sessions.answer_approval(app.as_user(&user.session, request)).await, |_| json!({}))
}

/// `GET /api/memory/review`: the user's memory entries written while reading content from
/// outside, waiting for them (never used until confirmed), each with where it came from.
pub async fn memory_review(State(app): State<Arc<App>>, user: User) -> Response {
    memory_list(&app, &user, true, 200).await
}

/// `GET /api/memory`: what the assistant remembers of the user (confirmed, in use).
pub async fn memories(State(app): State<Arc<App>>, user: User) -> Response {
    memory_list(&app, &user, false, 500).await
}

/// The user's memory entries, those waiting for review or those in use, `limit` at most.
async fn memory_list(app: &App, user: &User, quarantined: bool, limit: u32) -> Response {
    let mut daemon = app.daemon.clone();
    let query = v1::MemoryQuery { context: None, limit, quarantined, ..v1::MemoryQuery::default() };
    answer(daemon.memory.search_memory(app.as_user(&user.session, query)).await, |list| {
        let entries: Vec<serde_json::Value> = list
            .entries
            .iter()
            .map(|entry| {
                let mut item = json!({"key": entry.key, "content": entry.content, "updated": entry.updated_at});
                if quarantined {
                    item["came_from"] = json!(entry.came_from);
                }
                item
            })
            .collect();
        json!({"entries": entries})
    })
}

/// `POST /api/memory/{key}/forget`: the assistant forgets it.
pub async fn forget_memory(State(app): State<Arc<App>>, user: User, Path(key): Path<String>) -> Response {
    let mut daemon = app.daemon.clone();
    let request = v1::MemoryKey { context: None, key, quarantined: false };
    answer(
        daemon.memory.delete_memory(app.as_user(&user.session, request)).await,
        |ack| json!({"message": ack.message}),
    )
}

/// `POST /api/memory/review/{key}` with `{"decision": "confirm" | "drop"}`.
pub async fn settle_memory(
    State(app): State<Arc<App>>,
    user: User,
    Path(key): Path<String>,
    Json(given): Json<Answer>,
) -> Response {
    let mut daemon = app.daemon.clone();
    let request = v1::MemoryKey { context: None, key, quarantined: true };
    let done = match given.decision.as_str() {
        "confirm" => daemon.memory.confirm_memory(app.as_user(&user.session, request)).await,
        "drop" => daemon.memory.delete_memory(app.as_user(&user.session, request)).await,
        other => return error(StatusCode::BAD_REQUEST, &format!("decision `{other}`: choose confirm or drop")),
    };
    answer(done, |ack| json!({"message": ack.message}))
}

#[derive(Debug, Deserialize)]
pub struct ExportQuery {
    #[serde(default)]
    format: String,
    #[serde(default)]
    leaf: String,
}

/// `GET /api/sessions/{id}/export?format=md|html`: the conversation's branch as a file.
pub async fn export(
    State(app): State<Arc<App>>,
    user: User,
    Path(id): Path<String>,
    Query(query): Query<ExportQuery>,
) -> Response {
    let html = match query.format.as_str() {
        "html" => true,
        "md" | "markdown" | "" => false,
        other => {
            return error(StatusCode::BAD_REQUEST, &format!("format `{other}`: choose md or html"));
        }
    };
    let mut daemon = app.daemon.clone();
    let request = v1::ReadSessionRequest { session_id: id.clone(), leaf_entry_id: query.leaf };
    let transcript = match daemon.sessions.read_session(app.as_user(&user.session, request)).await {
        Ok(transcript) => transcript.into_inner(),
        Err(status) => return api_error(&status),
    };
    // Without a leaf, the conversation as it stands: the branch to its newest entry.
    let entries = baaaht_proto::transcript::branch(&transcript.entries, None);
    let title = transcript.header.as_ref().map(|header| header.title.clone()).filter(|t| !t.is_empty());
    let title = title.unwrap_or_else(|| format!("Conversation {id}"));
    let markdown = crate::export::markdown(&title, &entries);
    let (body, kind, extension) = if html {
        (crate::export::html(&title, &markdown), "text/html; charset=utf-8", "html")
    } else {
        (markdown, "text/markdown; charset=utf-8", "md")
    };
    let name = crate::export::file_name(&title, extension);
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
        .unwrap_or_else(|_| HeaderValue::from_static("attachment"));
    ([(header::CONTENT_TYPE, HeaderValue::from_static(kind)), (header::CONTENT_DISPOSITION, disposition)], body)
        .into_response()
}

/// `GET /api/rooms`: the rooms the user is in (an admin sees every room, and may create them).
pub async fn rooms(State(app): State<Arc<App>>, user: User) -> Response {
    let mut daemon = app.daemon.clone();
    let me = match app.profile(&user.session, std::time::Duration::ZERO).await {
        Ok(me) => me,
        Err(status) => return api_error(&status),
    };
    match daemon.admin.list_groups(app.as_user(&user.session, v1::ListGroupsRequest {})).await {
        Ok(groups) => {
            let rooms: Vec<Value> = groups
                .into_inner()
                .groups
                .iter()
                .map(|group| {
                    json!({"id": group.id, "name": group.name, "active": group.active,
                        "member": me.groups.contains(&group.id), "members": group.members.len(),
                        "why": group.deactivated_reason})
                })
                .collect();
            Json(json!({"rooms": rooms, "admin": me.admin})).into_response()
        }
        Err(status) => api_error(&status),
    }
}

#[derive(Debug, Deserialize)]
pub struct NewRoom {
    id: String,
    #[serde(default)]
    name: String,
    /// Members by email address, channel identity or user id.
    #[serde(default)]
    members: Vec<String>,
}

/// `POST /api/rooms`: a new room (admins only; the daemon decides), with its first members.
pub async fn create_room(State(app): State<Arc<App>>, user: User, Json(room): Json<NewRoom>) -> Response {
    let mut members = vec![app.identity(&user.session)];
    members.extend(room.members.iter().map(|member| app.member(member.trim())).filter(|member| !member.is_empty()));
    members.dedup();
    let mut daemon = app.daemon.clone();
    let request =
        v1::CreateGroupRequest { id: room.id.trim().to_string(), name: room.name.trim().to_string(), members };
    answer(
        daemon.admin.create_group(app.as_user(&user.session, request)).await,
        |group| json!({"id": group.id, "name": group.name, "members": group.members.len()}),
    )
}

#[derive(Debug, Deserialize)]
pub struct NewMember {
    member: String,
}

/// `POST /api/rooms/{id}/members`: adds someone to a room (admins only; the daemon decides).
pub async fn add_member(
    State(app): State<Arc<App>>,
    user: User,
    Path(id): Path<String>,
    Json(new): Json<NewMember>,
) -> Response {
    let member = app.member(new.member.trim());
    if member.is_empty() {
        return error(StatusCode::BAD_REQUEST, "member: name who to add (their sign-in name or user id)");
    }
    let mut daemon = app.daemon.clone();
    let request = v1::GroupMemberRequest { group: id, member };
    answer(
        daemon.admin.add_group_member(app.as_user(&user.session, request)).await,
        |group| json!({"members": group.members.len()}),
    )
}

impl App {
    /// Who `named` is to the daemon: a user id (`u-…`) or channel identity as given, else a
    /// subject at this site's issuer (`web:{issuer}#{named}`).
    fn member(&self, named: &str) -> String {
        if named.is_empty() || named.starts_with("u-") || named.starts_with("web:") || named.starts_with("slack:") {
            named.to_string()
        } else {
            format!("web:{}#{named}", self.issuer)
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct UploadQuery {
    #[serde(default)]
    session: String,
    #[serde(default)]
    room: String,
    name: String,
}

/// The size of the chunks an upload is sent to the daemon in.
const CHUNK: usize = 64 * 1024;

/// `POST /api/uploads?name=N&session=S[&room=R]`, the file as the body: stored in the
/// session's uploads by the daemon, which names it safely, sniffs its type and holds its own
/// size limit; the answer is the attachment the message then names.
pub async fn upload(
    State(app): State<Arc<App>>,
    user: User,
    headers: HeaderMap,
    Query(query): Query<UploadQuery>,
    body: Body,
) -> Response {
    let context = match app.context(&user.session, &Place { room: query.room }).await {
        Ok(context) => context,
        Err(status) => return api_error(&status),
    };
    let max = app.max_upload;
    let declared_size = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared_size.is_some_and(|size| size > max) {
        tokio::spawn(linger(body.into_data_stream()));
        return error(StatusCode::PAYLOAD_TOO_LARGE, "The file is larger than this site takes.");
    }
    let declared = headers.get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok()).unwrap_or_default();
    let start = v1::UploadStart {
        context: Some(context),
        session_id: query.session,
        filename: query.name,
        mime_type: declared.to_string(),
        sender_id: app.identity(&user.session),
        // The daemon refuses one past its own limit before the bytes are sent.
        size_bytes: declared_size.unwrap_or_default(),
    };
    let (sender, receiver) = tokio::sync::mpsc::channel(4);
    let (failed, failure) = tokio::sync::oneshot::channel::<(StatusCode, &'static str)>();
    let _ = sender.try_send(v1::UploadChunk { part: Some(v1::upload_chunk::Part::Start(start)) });
    // The body goes on to the daemon as it arrives, in chunks. Past the limit, or when the
    // browser's upload breaks, the daemon is sent a chunk with no part, which ends the upload
    // unstored (an upload merely ended would be stored, cut short), and removes what it had.
    // Whatever ends it early, the rest of the body is read and dropped for a while, so the
    // browser reads the answer instead of a reset connection.
    tokio::spawn(async move {
        let mut stream = body.into_data_stream();
        match pump(&mut stream, &sender, max).await {
            Pumped::All => return,
            Pumped::Refused(status, sentence) => {
                // The browser's answer first (so the daemon's refusal never stands in for it).
                // silent-ok: a request already answered has no one to tell.
                let _ = failed.send((status, sentence));
                // silent-ok: a daemon that answered already has stored nothing either.
                let _ = sender.send(v1::UploadChunk { part: None }).await;
            }
            Pumped::Answered => {}
        }
        drop(sender);
        linger(stream).await;
    });
    let mut daemon = app.daemon.clone();
    let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
    let upload = daemon.sessions.upload_file(app.as_user(&user.session, stream));
    tokio::pin!(upload);
    let stored = tokio::select! {
        biased;
        Ok((status, sentence)) = failure => {
            // The call is not dropped: dropped, it could reach the daemon as an upload merely
            // ended, stored cut short. Its ending chunk follows; the daemon's refusal is awaited.
            // silent-ok: the browser is told below; the daemon's refusal is the expected one.
            let _ = tokio::time::timeout(UPLOAD_SETTLES, &mut upload).await;
            return error(status, sentence);
        }
        stored = &mut upload => stored,
    };
    match stored {
        Ok(stored) => {
            let stored = stored.into_inner();
            let Some(attachment) = stored.attachment else {
                return error(StatusCode::BAD_GATEWAY, "The file was not stored; try again.");
            };
            Json(json!({"session": stored.session_id, "attachment": {"filename": attachment.filename,
                "mime_type": attachment.mime_type, "path": attachment.path, "size_bytes": attachment.size_bytes}}))
            .into_response()
        }
        Err(status) => api_error(&status),
    }
}

/// How an upload's body went to the daemon.
enum Pumped {
    /// All of it.
    All,
    /// Not all: past the site's limit, or broken off by the browser.
    Refused(StatusCode, &'static str),
    /// Not all: the daemon answered first (it may refuse from the declared size).
    Answered,
}

/// Sends the body in `stream` to the daemon through `sender`, in chunks of [`CHUNK`], while
/// it stays within `max` bytes.
async fn pump(stream: &mut BodyDataStream, sender: &Sender<v1::UploadChunk>, max: u64) -> Pumped {
    use futures_util::StreamExt;
    let (mut total, mut pending) = (0u64, Vec::with_capacity(CHUNK));
    while let Some(bytes) = stream.next().await {
        let Ok(bytes) = bytes else {
            return Pumped::Refused(StatusCode::BAD_REQUEST, "The upload was interrupted; try again.");
        };
        total += bytes.len() as u64;
        if total > max {
            return Pumped::Refused(StatusCode::PAYLOAD_TOO_LARGE, "The file is larger than this site takes.");
        }
        pending.extend_from_slice(&bytes);
        while pending.len() >= CHUNK {
            let rest = pending.split_off(CHUNK);
            let chunk = std::mem::replace(&mut pending, rest);
            if sender.send(v1::UploadChunk { part: Some(v1::upload_chunk::Part::Data(chunk)) }).await.is_err() {
                return Pumped::Answered;
            }
        }
    }
    if !pending.is_empty()
        && sender.send(v1::UploadChunk { part: Some(v1::upload_chunk::Part::Data(pending)) }).await.is_err()
    {
        return Pumped::Answered;
    }
    Pumped::All
}

/// How long a refused upload's call may take to end at the daemon.
const UPLOAD_SETTLES: std::time::Duration = std::time::Duration::from_secs(10);

/// How long the rest of an upload answered early is read (and dropped) for.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads and drops what is left of a request's body for up to [`LINGER`]. An answer given
/// before the whole body was read (a 413 for a file too large) otherwise reaches the browser
/// as a reset: the server would close with the browser's bytes unread.
async fn linger(mut stream: BodyDataStream) {
    use futures_util::StreamExt;
    // silent-ok: what is dropped here was refused already; its end is not news.
    let _ = tokio::time::timeout(LINGER, async { while let Some(Ok(_)) = stream.next().await {} }).await;
}

#[derive(Debug, Deserialize)]
pub struct AttachmentJson {
    filename: String,
    mime_type: String,
    path: String,
    #[serde(default)]
    size_bytes: u64,
}

#[derive(Debug, Deserialize)]
pub struct Outgoing {
    content: String,
    #[serde(default)]
    session_id: String,
    /// The entry to answer under (a branch of the tree); empty: the conversation's newest.
    #[serde(default)]
    parent: String,
    #[serde(default)]
    room: String,
    #[serde(default)]
    attachments: Vec<AttachmentJson>,
}

/// `POST /api/messages`: a message into a conversation; its answer streams on `/api/events`.
pub async fn send(State(app): State<Arc<App>>, user: User, Json(outgoing): Json<Outgoing>) -> Response {
    let context = match app.context(&user.session, &Place { room: outgoing.room }).await {
        Ok(context) => context,
        Err(status) => return api_error(&status),
    };
    let attachments = outgoing
        .attachments
        .into_iter()
        .map(|attachment| v1::Attachment {
            filename: attachment.filename,
            mime_type: attachment.mime_type,
            path: attachment.path,
            size_bytes: attachment.size_bytes,
            voice: false,
        })
        .collect();
    let message = v1::UserMessage {
        context: Some(context),
        sender_id: app.identity(&user.session),
        channel: v1::ChannelType::Web as i32,
        content: outgoing.content,
        session_id: outgoing.session_id,
        parent_entry_id: outgoing.parent,
        attachments,
        voice: false,
    };
    let mut daemon = app.daemon.clone();
    answer(
        daemon.sessions.send_user_message(app.as_user(&user.session, message)).await,
        |sent| json!({"session": sent.session_id, "turn": sent.turn_id, "entry": sent.entry_id}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_carry_what_the_page_draws() {
        use v1::session_entry::Entry;
        let message = v1::SessionEntry {
            id: "e2".into(),
            parent: "e1".into(),
            timestamp: "2026-11-23T10:00:00Z".into(),
            entry: Some(Entry::Message(v1::MessageEntry {
                role: "user".into(),
                content: "hi".into(),
                sender_id: "web:https://id#alice".into(),
                sender_name: "Alice".into(),
                ..Default::default()
            })),
        };
        let alice = crate::events::Me { identity: "web:https://id#alice".into(), id: "u-alice".into() };
        let json = entry_json(&message, &alice).expect("shown");
        assert_eq!(json["id"], "e2");
        assert_eq!(json["parent"], "e1");
        assert_eq!(json["kind"], "message");
        assert_eq!(json["name"], "Alice");
        assert_eq!(json["mine"], true);
        let bob = crate::events::Me { identity: "web:https://id#bob".into(), id: "u-bob".into() };
        let json = entry_json(&message, &bob).expect("shown");
        assert_eq!(json["mine"], false);
        assert!(!json.to_string().contains("web:"), "nobody's ids reach another's page: {json}");
        let change = v1::SessionEntry {
            entry: Some(Entry::ModelChange(v1::ModelChangeEntry { previous_model: "a".into(), new_model: "b".into() })),
            ..Default::default()
        };
        assert_eq!(entry_json(&change, &alice).expect("shown")["to"], "b");
        assert!(entry_json(&v1::SessionEntry::default(), &alice).is_none());
    }

    #[test]
    fn a_room_session_names_its_room() {
        let header = v1::SessionHeader {
            id: "s-1".into(),
            group_id: "family".into(),
            context_type: v1::ContextType::Group as i32,
            ..Default::default()
        };
        assert_eq!(session_json(&header)["room"], "family");
        let own =
            v1::SessionHeader { id: "s-2".into(), context_type: v1::ContextType::User as i32, ..Default::default() };
        assert_eq!(session_json(&own)["room"], "");
    }
}
