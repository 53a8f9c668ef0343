//! Sessions: the index `data/state/sessions.json` (spec §14.4) and each session's
//! tree-structured log `sessions/{id}/session.jsonl` ([`log`]).
//!
//! [`SessionStore`] is the only writer of both. Every change to the index is written
//! atomically; every entry is fsynced before the call that appended it returns. An index that
//! cannot be parsed is kept aside (never overwritten) and a fresh one started.

pub mod log;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::base::auth::{Context, ContextKind};
use crate::base::state::{self, StateError};

pub use log::{Entry, LogError, Read, SessionLog};

pub const INDEX_FILE: &str = "sessions.json";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    Created,
    Active,
    Idle,
    Archived,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Created => "created",
            SessionStatus::Active => "active",
            SessionStatus::Idle => "idle",
            SessionStatus::Archived => "archived",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    pub id: String,
    pub user_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// "user" or "group".
    pub context_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    pub last_activity: String,
    pub status: SessionStatus,
    #[serde(default)]
    pub archived_at: Option<String>,
    #[serde(default)]
    pub created: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The model chosen with SwitchModel; none: the Assistant's configured model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The entry new messages hang under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf: Option<String>,
    /// `last_activity` as seconds since the epoch, for idling and archival.
    #[serde(default)]
    pub last_activity_seconds: u64,
    /// The session and entry this one was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<log::ForkPoint>,
    /// A scheduled run's own session ([`log::Header::run`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub run: bool,
}

impl SessionRecord {
    /// The user or group whose data the session is.
    pub fn context(&self) -> Context {
        match &self.group_id {
            Some(group) => Context::group(group.clone()),
            None => Context::user(self.user_id.clone()),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionIndex {
    pub sessions: Vec<SessionRecord>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionCounts {
    pub active: u32,
    pub idle: u32,
    pub archived: u32,
}

impl SessionCounts {
    fn of(sessions: &[SessionRecord]) -> SessionCounts {
        let mut counts = SessionCounts::default();
        for session in sessions {
            match session.status {
                SessionStatus::Created | SessionStatus::Active => counts.active += 1,
                SessionStatus::Idle => counts.idle += 1,
                SessionStatus::Archived => counts.archived += 1,
            }
        }
        counts
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no session `{0}`: `baaaht sessions list` shows the sessions there are")]
    NotFound(String),
    #[error("session {0} is archived: resume it first (`baaaht sessions resume {0}`)")]
    Archived(String),
    /// Said without naming whose it is: a refusal never shows another person's user id.
    #[error("session {session} is not one of {asked}'s")]
    OtherContext { session: String, owner: String, asked: String },
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("cannot write the session index")]
    Index(#[source] StateError),
    /// The data disk is past its critical mark (the sentence says so).
    #[error("{0}")]
    DiskCritical(String),
}

/// What a new entry says; the store gives it its id, parent and time.
#[derive(Debug, Clone)]
pub enum NewEntry {
    Message {
        role: &'static str,
        content: String,
        channel: Option<String>,
        sender: Option<String>,
        attachments: Vec<log::Attachment>,
    },
    Delegate {
        agent: String,
        task: String,
        result: String,
        is_error: bool,
        /// Its answer is the turn's reply.
        returned: bool,
    },
    Compaction {
        summary: String,
        compacted: Vec<String>,
        /// Whose messages it summarises.
        senders: Vec<String>,
    },
    ModelChange {
        previous: String,
        new: String,
    },
}

/// A filter for [`SessionStore::list`]; empty fields match everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub context: Option<Context>,
    pub user_id: Option<String>,
    pub status: Option<SessionStatus>,
    pub created_after: Option<String>,
    pub created_before: Option<String>,
}

#[derive(Debug, Default)]
struct Inner {
    index: SessionIndex,
    /// Logs opened so far, by session id.
    logs: HashMap<String, SessionLog>,
}

/// What is told of every entry appended (the search index, the daemon's `recall`), after it is on
/// disk and outside the store's lock.
pub trait EntrySink: Send + Sync {
    fn appended(&self, record: &SessionRecord, entry: &Entry);
}

impl crate::store::events::Keeper for SessionStore {
    fn keep(&self, context: &Context, session: &str, activity: log::Activity) {
        match SessionStore::keep(self, context, session, activity) {
            Ok(()) | Err(SessionError::NotFound(_)) => {}
            Err(error) => tracing::warn!(
                session,
                error = %baaaht_proto::error_chain(&error),
                "an approval or notice is shown but not kept in the conversation"
            ),
        }
    }
}

/// The approvals and notices a conversation keeps at most ([`SessionStore::keep`]).
pub const MOST_ACTIVITIES: usize = 1000;
/// The most of a message's text a conversation keeps (the rest was shown as it came).
const MOST_KEPT_TEXT: usize = 16 * 1024;

/// Every session of the data dir.
pub struct SessionStore {
    sessions_dir: PathBuf,
    index_path: PathBuf,
    inner: Mutex<Inner>,
    /// What every entry's text passes before it is written.
    redact: Option<crate::guard::redact::Redact>,
    /// Told of every entry appended (set once the daemon has made it).
    sink: std::sync::OnceLock<std::sync::Weak<dyn EntrySink>>,
    /// Closed while the data disk is nearly full: no new session starts.
    disk: Option<std::sync::Arc<crate::base::disk::DiskGate>>,
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStore").field("sessions_dir", &self.sessions_dir).finish_non_exhaustive()
    }
}

/// A fresh entry id, e.g. for a message recorded before it is appended.
pub fn new_entry_id() -> String {
    new_id("e-")
}

/// A fresh id: `prefix` and 12 hex digits.
fn new_id(prefix: &str) -> String {
    let simple = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}{}", &simple[..12])
}

impl SessionStore {
    /// Opens the store of the data dir at `root`.
    pub fn open(root: &Path) -> SessionStore {
        let index_path = root.join("data/state").join(INDEX_FILE);
        let index = state::read_json_or_set_aside(&index_path, SessionIndex::default);
        SessionStore {
            sessions_dir: root.join("sessions"),
            index_path,
            inner: Mutex::new(Inner { index, logs: HashMap::new() }),
            redact: None,
            sink: std::sync::OnceLock::new(),
            disk: None,
        }
    }

    /// Tells `sink` of every entry appended from now on.
    pub fn told(&self, sink: std::sync::Weak<dyn EntrySink>) {
        // silent-ok: the daemon sets it once; a second sink is not taken.
        let _ = self.sink.set(sink);
    }

    /// This store, every entry's text cleaned by `redact` before it is written.
    pub fn redacting(self, redact: crate::guard::redact::Redact) -> SessionStore {
        SessionStore { redact: Some(redact), ..self }
    }

    /// Starts no session while `disk` is past its critical mark.
    pub fn gated_by(self, disk: std::sync::Arc<crate::base::disk::DiskGate>) -> SessionStore {
        SessionStore { disk: Some(disk), ..self }
    }

    /// `entry` with no secret left in its text.
    /// `text` as the store may keep it outside an entry (a title).
    fn cleaned_text<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        match &self.redact {
            Some(redact) => redact.clean(crate::guard::redact::Place::SessionLog, text),
            None => std::borrow::Cow::Borrowed(text),
        }
    }

    fn cleaned(&self, mut entry: NewEntry) -> NewEntry {
        let Some(redact) = &self.redact else { return entry };
        let clean = |text: &mut String| {
            *text = redact.clean_string(crate::guard::redact::Place::SessionLog, std::mem::take(text));
        };
        match &mut entry {
            NewEntry::Message { content, .. } => clean(content),
            NewEntry::Delegate { task, result, .. } => {
                clean(task);
                clean(result);
            }
            NewEntry::Compaction { summary, .. } => clean(summary),
            NewEntry::ModelChange { .. } => {}
        }
        entry
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `sessions/{id}`: the session's folder (its log and `data/`).
    pub fn folder(&self, id: &str) -> PathBuf {
        self.sessions_dir.join(id)
    }

    fn save(&self, inner: &Inner) -> Result<(), SessionError> {
        state::write_json(&self.index_path, &inner.index).map_err(SessionError::Index)
    }

    pub fn counts(&self) -> SessionCounts {
        SessionCounts::of(&self.lock().index.sessions)
    }

    /// The counts of the sessions `keep` says are someone's.
    pub fn counts_of(&self, keep: impl Fn(&SessionRecord) -> bool) -> SessionCounts {
        let sessions: Vec<SessionRecord> = self.lock().index.sessions.iter().filter(|s| keep(s)).cloned().collect();
        SessionCounts::of(&sessions)
    }

    pub fn get(&self, id: &str) -> Option<SessionRecord> {
        self.lock().index.sessions.iter().find(|session| session.id == id).cloned()
    }

    /// `id`, which must belong to `context`.
    pub fn get_in(&self, id: &str, context: &Context) -> Result<SessionRecord, SessionError> {
        let record = self.get(id).ok_or_else(|| SessionError::NotFound(id.to_string()))?;
        if record.context() != *context {
            return Err(SessionError::OtherContext {
                session: id.to_string(),
                owner: record.context().to_string(),
                asked: context.to_string(),
            });
        }
        Ok(record)
    }

    /// Sessions matching `filter`, most recently active first.
    pub fn list(&self, filter: &Filter) -> Vec<SessionRecord> {
        let mut found: Vec<SessionRecord> = self
            .lock()
            .index
            .sessions
            .iter()
            .filter(|s| filter.context.as_ref().is_none_or(|context| s.context() == *context))
            .filter(|s| filter.user_id.as_ref().is_none_or(|user| s.user_id == *user))
            .filter(|s| filter.status.is_none_or(|status| s.status == status))
            .filter(|s| filter.created_after.as_ref().is_none_or(|after| s.created.as_str() > after.as_str()))
            .filter(|s| filter.created_before.as_ref().is_none_or(|before| s.created.as_str() < before.as_str()))
            .cloned()
            .collect();
        found.sort_by(|a, b| b.last_activity_seconds.cmp(&a.last_activity_seconds).then(b.id.cmp(&a.id)));
        found
    }

    /// Starts a session for `context`, opened by `user_id`.
    pub fn create(
        &self,
        context: &Context,
        user_id: &str,
        title: Option<String>,
    ) -> Result<SessionRecord, SessionError> {
        self.create_as(context, user_id, title, false)
    }

    /// Starts a scheduled run's own session for `context` (its task's owner `user_id`): one a
    /// person's message goes to only when it names it (a reply to the run's notice), never as
    /// the context's [`SessionStore::active`] one, though it is the newest.
    pub fn create_for_run(
        &self,
        context: &Context,
        user_id: &str,
        title: String,
    ) -> Result<SessionRecord, SessionError> {
        self.create_as(context, user_id, Some(title), true)
    }

    fn create_as(
        &self,
        context: &Context,
        user_id: &str,
        title: Option<String>,
        run: bool,
    ) -> Result<SessionRecord, SessionError> {
        if let Some(why) = self.disk.as_ref().and_then(|disk| disk.refusal("A new conversation")) {
            return Err(SessionError::DiskCritical(why));
        }
        let title = title.map(|title| self.cleaned_text(&title).into_owned());
        let now = state::now_seconds();
        let mut inner = self.lock();
        let id = loop {
            let id = new_id("s-");
            if !self.folder(&id).exists() {
                break id;
            }
        };
        // A user's own session belongs to that user, whoever is named as writing.
        let user_id = if context.kind == ContextKind::User { context.id.as_str() } else { user_id };
        let header = log::Header {
            version: log::VERSION,
            id: id.clone(),
            created: state::rfc3339(now),
            user_id: user_id.to_string(),
            group_id: (context.kind == ContextKind::Group).then(|| context.id.clone()),
            context_type: context_type(context).into(),
            title: title.clone(),
            forked_from: None,
            run,
        };
        let log = SessionLog::create(&self.folder(&id), header.clone())?;
        let record = record_of(&header, now);
        inner.logs.insert(id.clone(), log);
        inner.index.sessions.push(record.clone());
        self.save(&inner)?;
        tracing::info!(session = %id, context = %context, "session created");
        Ok(record)
    }

    /// The context's session new messages go to: the most recently active one that is not
    /// archived (nor a scheduled run's own), or a new one.
    pub fn active(&self, context: &Context, user_id: &str) -> Result<SessionRecord, SessionError> {
        let current = self
            .lock()
            .index
            .sessions
            .iter()
            .filter(|s| s.context() == *context && s.status != SessionStatus::Archived && !s.run)
            .max_by_key(|s| s.last_activity_seconds)
            .cloned();
        match current {
            Some(record) => Ok(record),
            None => self.create(context, user_id, None),
        }
    }

    fn with_log<T>(
        &self,
        inner: &mut Inner,
        id: &str,
        action: impl FnOnce(&mut SessionLog) -> Result<T, LogError>,
    ) -> Result<T, SessionError> {
        if !inner.logs.contains_key(id) {
            let (log, read) = SessionLog::open(&self.folder(id))?;
            for corrupt in &read.corrupt {
                tracing::warn!(session = id, line = corrupt.line, reason = %corrupt.reason, "skipping a line of the session log");
            }
            inner.logs.insert(id.to_string(), log);
        }
        let log = inner.logs.get_mut(id).ok_or_else(|| SessionError::NotFound(id.to_string()))?;
        Ok(action(log)?)
    }

    /// Appends `entry` to session `id` under `parent` (none: the session's leaf) and makes it
    /// the leaf; returns its id. The entry is on disk when this returns.
    pub fn append(&self, id: &str, parent: Option<&str>, entry: NewEntry) -> Result<String, SessionError> {
        self.append_as(id, None, parent, entry)
    }

    /// As [`SessionStore::append`], with the id given out before (see [`new_entry_id`]).
    pub fn append_as(
        &self,
        id: &str,
        entry_id: Option<String>,
        parent: Option<&str>,
        entry: NewEntry,
    ) -> Result<String, SessionError> {
        let entry = self.cleaned(entry);
        let now = state::now_seconds();
        let mut inner = self.lock();
        let record =
            inner.index.sessions.iter().find(|s| s.id == id).ok_or_else(|| SessionError::NotFound(id.into()))?;
        if record.status == SessionStatus::Archived {
            return Err(SessionError::Archived(id.into()));
        }
        let parent = parent.map(str::to_string).or_else(|| record.leaf.clone()).unwrap_or_else(|| id.to_string());
        let entry_id = entry_id.unwrap_or_else(new_entry_id);
        let timestamp = state::rfc3339(now);
        let entry = match entry {
            NewEntry::Message { role, content, channel, sender, attachments } => Entry::Message {
                id: entry_id.clone(),
                parent,
                timestamp,
                message: log::Message {
                    role: role.into(),
                    content,
                    channel_type: channel,
                    sender_id: sender,
                    attachments,
                },
            },
            NewEntry::Delegate { agent, task, result, is_error, returned } => {
                Entry::Delegate { id: entry_id.clone(), parent, timestamp, agent, task, result, is_error, returned }
            }
            NewEntry::Compaction { summary, compacted, senders } => Entry::Compaction {
                id: entry_id.clone(),
                parent,
                timestamp,
                summary,
                compacted_entry_ids: compacted,
                senders,
            },
            NewEntry::ModelChange { previous, new } => {
                Entry::ModelChange { id: entry_id.clone(), parent, timestamp, previous_model: previous, new_model: new }
            }
        };
        self.with_log(&mut inner, id, |log| log.append(&entry))?;
        let mut told = None;
        if let Some(record) = inner.index.sessions.iter_mut().find(|s| s.id == id) {
            record.leaf = Some(entry_id.clone());
            touch(record, now);
            told = Some(record.clone());
        }
        // The entry is in its log, durably: the index (its leaf and times, kept in memory) is
        // saved with the next change that can be. Failing here would tell the caller it was
        // not kept, and a retry would record it twice.
        if let Err(error) = self.save(&inner) {
            tracing::error!(session = id, error = %baaaht_proto::error_chain(&error), "cannot save the session index after an entry; it is in the log");
        }
        drop(inner);
        if let (Some(record), Some(sink)) = (told, self.sink.get().and_then(std::sync::Weak::upgrade)) {
            sink.appended(&record, &entry);
        }
        Ok(entry_id)
    }

    /// Moves session `id` to `leaf` (an entry of its log, or the session's own id: before its
    /// first message): new messages hang under it. The branch it leaves stays in the log.
    pub fn set_leaf(&self, id: &str, leaf: &str) -> Result<(), SessionError> {
        let mut inner = self.lock();
        let known = self.with_log(&mut inner, id, |log| Ok(log.takes_children(leaf)))?;
        if !known {
            return Err(SessionError::Log(LogError::UnknownEntry(leaf.to_string())));
        }
        let record =
            inner.index.sessions.iter_mut().find(|s| s.id == id).ok_or_else(|| SessionError::NotFound(id.into()))?;
        record.leaf = Some(leaf.to_string());
        self.save(&inner)
    }

    /// Keeps `activity` in session `id` of `context`, after the end of its branch (which it
    /// does not move): the conversation shows it again when it is opened anew. Refused for a
    /// session of another context.
    pub fn keep(&self, context: &Context, id: &str, mut activity: log::Activity) -> Result<(), SessionError> {
        if let log::Activity::Message { content, .. } = &mut activity {
            if content.len() > MOST_KEPT_TEXT {
                let whole = content.len();
                let mut end = MOST_KEPT_TEXT;
                while !content.is_char_boundary(end) {
                    end -= 1;
                }
                content.truncate(end);
                content.push_str(&format!("\n\n(Kept in the conversation up to here: the message was {whole} bytes.)"));
            }
        }
        if let Some(redact) = &self.redact {
            let clean = |text: &mut String| {
                *text = redact.clean_string(crate::guard::redact::Place::SessionLog, std::mem::take(text));
            };
            match &mut activity {
                log::Activity::Approval { host, asked_by, review, .. } => {
                    clean(host);
                    clean(asked_by);
                    review.iter_mut().flat_map(|review| review.texts_mut()).for_each(clean);
                }
                log::Activity::ApprovalSettled { by, .. } => clean(by),
                log::Activity::Message { content, metadata, .. } => {
                    clean(content);
                    metadata.values_mut().for_each(clean);
                }
            }
        }
        let mut inner = self.lock();
        let record =
            inner.index.sessions.iter().find(|s| s.id == id).ok_or_else(|| SessionError::NotFound(id.into()))?;
        if record.context() != *context {
            return Err(SessionError::NotFound(id.into()));
        }
        let after = record.leaf.clone().unwrap_or_else(|| id.to_string());
        let entry = |activity| Entry::Activity {
            id: new_entry_id(),
            after: after.clone(),
            timestamp: state::rfc3339(state::now_seconds()),
            activity,
        };
        self.with_log(&mut inner, id, |log| match log.activities() {
            // A conversation's record of its notices has an end: a flood of them (a model's
            // messages, say) never grows its log without bound. The last one says so.
            kept if kept + 1 < MOST_ACTIVITIES => log.append(&entry(activity)),
            kept if kept + 1 == MOST_ACTIVITIES => log.append(&entry(log::Activity::Message {
                content: format!(
                    "This conversation keeps no more notices or approvals: it holds {MOST_ACTIVITIES}. Those \
                     to come are shown as they happen, not kept."
                ),
                metadata: Default::default(),
                attachments: vec![],
            })),
            _ => Ok(()),
        })
    }

    /// Everything in session `id`'s log.
    pub fn read(&self, id: &str) -> Result<Read, SessionError> {
        if self.get(id).is_none() {
            return Err(SessionError::NotFound(id.to_string()));
        }
        Ok(log::read(&self.folder(id).join(log::FILE_NAME))?)
    }

    /// A new session holding the branch of `id` that ends at `entry`.
    pub fn fork(&self, id: &str, entry: &str) -> Result<SessionRecord, SessionError> {
        if let Some(why) = self.disk.as_ref().and_then(|disk| disk.refusal("A new conversation")) {
            return Err(SessionError::DiskCritical(why));
        }
        let source = self.read(id)?;
        let now = state::now_seconds();
        let mut inner = self.lock();
        let original = inner.index.sessions.iter().find(|s| s.id == id).cloned();
        let original = original.ok_or_else(|| SessionError::NotFound(id.to_string()))?;
        let new = loop {
            let new = new_id("s-");
            if !self.folder(&new).exists() {
                break new;
            }
        };
        let mut header = source.header().cloned().ok_or_else(|| SessionError::NotFound(id.to_string()))?;
        header.id = new.clone();
        header.created = state::rfc3339(now);
        // A fork is a person's conversation, even of a run's.
        header.run = false;
        let log = log::fork(&source, entry, &self.folder(&new), header.clone())?;
        let mut record = record_of(&header, now);
        record.forked_from = Some(log::ForkPoint { session_id: id.to_string(), entry_id: entry.to_string() });
        record.model = original.model.clone();
        record.leaf = Some(if entry == id { new.clone() } else { entry.to_string() });
        inner.logs.insert(new.clone(), log);
        inner.index.sessions.push(record.clone());
        self.save(&inner)?;
        tracing::info!(session = %new, from = id, entry, "session forked");
        Ok(record)
    }

    /// Sets session `id`'s status (archiving records when).
    pub fn set_status(&self, id: &str, status: SessionStatus) -> Result<SessionRecord, SessionError> {
        let now = state::now_seconds();
        let mut inner = self.lock();
        let record =
            inner.index.sessions.iter_mut().find(|s| s.id == id).ok_or_else(|| SessionError::NotFound(id.into()))?;
        record.status = status;
        match status {
            SessionStatus::Archived => record.archived_at = Some(state::rfc3339(now)),
            SessionStatus::Active => {
                record.archived_at = None;
                touch(record, now);
            }
            _ => {}
        }
        let record = record.clone();
        if status == SessionStatus::Archived {
            inner.logs.remove(id);
        }
        self.save(&inner)?;
        Ok(record)
    }

    /// Gives session `id` a title made from its first message, when it has none yet: the first
    /// line, at most 60 characters, cut at a word. Returns whether it did.
    pub fn title_from_first_message(&self, id: &str, message: &str) -> Result<bool, SessionError> {
        let message = self.cleaned_text(message);
        let Some(title) = title_of(&message) else { return Ok(false) };
        let mut inner = self.lock();
        let record =
            inner.index.sessions.iter_mut().find(|s| s.id == id).ok_or_else(|| SessionError::NotFound(id.into()))?;
        if record.title.is_some() {
            return Ok(false);
        }
        record.title = Some(title);
        self.save(&inner)?;
        Ok(true)
    }

    /// Records the model session `id` uses from now on.
    pub fn set_model(&self, id: &str, model: &str) -> Result<(), SessionError> {
        let mut inner = self.lock();
        let record =
            inner.index.sessions.iter_mut().find(|s| s.id == id).ok_or_else(|| SessionError::NotFound(id.into()))?;
        record.model = Some(model.to_string());
        self.save(&inner)
    }

    /// Active sessions without activity for `idle_after` seconds become idle; idle or active
    /// ones without activity for `archive_after` seconds are returned for archival.
    pub fn sweep(
        &self,
        now: u64,
        idle_after: u64,
        archive_after: u64,
    ) -> Result<(Vec<String>, Vec<String>), SessionError> {
        let mut inner = self.lock();
        let (mut idled, mut due) = (vec![], vec![]);
        for record in &mut inner.index.sessions {
            let quiet = now.saturating_sub(record.last_activity_seconds);
            if record.status == SessionStatus::Archived {
                continue;
            }
            if archive_after > 0 && quiet >= archive_after {
                due.push(record.id.clone());
            } else if idle_after > 0 && quiet >= idle_after && record.status != SessionStatus::Idle {
                record.status = SessionStatus::Idle;
                idled.push(record.id.clone());
            }
        }
        if !idled.is_empty() {
            self.save(&inner)?;
        }
        Ok((idled, due))
    }
}

fn context_type(context: &Context) -> &'static str {
    match context.kind {
        ContextKind::User => "user",
        ContextKind::Group => "group",
    }
}

fn record_of(header: &log::Header, now: u64) -> SessionRecord {
    SessionRecord {
        id: header.id.clone(),
        user_id: header.user_id.clone(),
        group_id: header.group_id.clone(),
        context_type: header.context_type.clone(),
        container_id: None,
        last_activity: state::rfc3339(now),
        status: SessionStatus::Created,
        archived_at: None,
        created: header.created.clone(),
        title: header.title.clone(),
        model: None,
        leaf: None,
        last_activity_seconds: now,
        forked_from: header.forked_from.clone(),
        run: header.run,
    }
}

fn touch(record: &mut SessionRecord, now: u64) {
    record.last_activity = state::rfc3339(now);
    record.last_activity_seconds = now;
    record.status = SessionStatus::Active;
}

/// A title for a conversation that begins with `message`: its first line, at most 60
/// characters, cut at a word; none for a message without words.
pub fn title_of(message: &str) -> Option<String> {
    // The daemon's notes of attached files are not what the conversation is about.
    let line = message
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with(crate::store::uploads::MENTION_START))?;
    if line.chars().count() <= 60 {
        return Some(line.to_string());
    }
    let cut: String = line.chars().take(60).collect();
    let cut = cut.rsplit_once(' ').map_or(cut.as_str(), |(words, _)| words).trim_end();
    Some(format!("{cut}…"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(content: &str) -> NewEntry {
        NewEntry::Message {
            role: "user",
            content: content.into(),
            channel: None,
            sender: Some("alice".into()),
            attachments: vec![],
        }
    }

    #[test]
    fn appends_forks_archives_and_survives_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("data/state")).expect("state");
        let store = SessionStore::open(dir.path());
        let alice = Context::user("alice");
        let session = store.active(&alice, "alice").expect("created");
        assert_eq!(store.active(&alice, "alice").expect("again").id, session.id, "one active session");
        let first = store.append(&session.id, None, message("hello")).expect("first");
        let second = store.append(&session.id, None, message("again")).expect("second");
        let sibling = store.append(&session.id, Some(&first), message("instead")).expect("sibling");
        let read = store.read(&session.id).expect("read");
        assert_eq!(read.entries.len(), 4);
        assert_eq!(read.branch(&second).expect("branch").len(), 3);
        let mut leaves = read.leaves();
        leaves.sort_unstable();
        let mut expected = vec![second.as_str(), sibling.as_str()];
        expected.sort_unstable();
        assert_eq!(leaves, expected);

        let fork = store.fork(&session.id, &first).expect("fork");
        let forked = store.read(&fork.id).expect("read fork");
        assert_eq!(forked.entries.len(), 2, "header and the first message");
        store.append(&fork.id, None, message("on the fork")).expect("append to fork");
        assert_eq!(store.read(&session.id).expect("source").entries.len(), 4, "the source is unchanged");

        store.set_status(&session.id, SessionStatus::Archived).expect("archive");
        assert!(matches!(store.append(&session.id, None, message("x")), Err(SessionError::Archived(_))));
        assert!(matches!(store.get_in(&session.id, &Context::user("bob")), Err(SessionError::OtherContext { .. })));

        let reopened = SessionStore::open(dir.path());
        let again = reopened.get(&session.id).expect("in the index");
        assert_eq!(again.status, SessionStatus::Archived);
        reopened.set_status(&session.id, SessionStatus::Active).expect("resume");
        let third = reopened.append(&session.id, None, message("resumed")).expect("append after resume");
        let branch = reopened.read(&session.id).expect("read").branch(&third).expect("branch");
        assert_eq!(branch.len(), 4, "the resumed session continues from its leaf, the last entry written");
        assert_eq!(reopened.counts(), SessionCounts { active: 2, idle: 0, archived: 0 });
    }

    #[test]
    fn a_conversation_keeps_its_own_contexts_notices_cut_and_up_to_a_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("data/state")).expect("state");
        let store = SessionStore::open(dir.path());
        let alice = Context::user("alice");
        let session = store.active(&alice, "alice").expect("created");
        let first = store.append(&session.id, None, message("hello")).expect("first");
        let said =
            |content: String| log::Activity::Message { content, metadata: Default::default(), attachments: vec![] };
        let refused = store.keep(&Context::user("mallory"), &session.id, said("from elsewhere".into()));
        assert!(matches!(refused, Err(SessionError::NotFound(_))), "another context's notice is not kept");
        store.keep(&alice, &session.id, said("é".repeat(MOST_KEPT_TEXT))).expect("kept");
        for n in 0..MOST_ACTIVITIES + 5 {
            store.keep(&alice, &session.id, said(format!("notice {n}"))).expect("kept or passed over");
        }
        let read = store.read(&session.id).expect("read");
        let kept: Vec<&log::Activity> = read
            .entries
            .iter()
            .filter_map(|entry| match entry {
                Entry::Activity { after, activity, .. } if after == &first => Some(activity),
                _ => None,
            })
            .collect();
        assert_eq!(kept.len(), MOST_ACTIVITIES, "a flood is not kept without end");
        let text = |activity: &log::Activity| match activity {
            log::Activity::Message { content, .. } => content.clone(),
            other => panic!("{other:?}"),
        };
        let long = text(kept[0]);
        assert!(long.len() < MOST_KEPT_TEXT + 200, "cut: {}", long.len());
        assert!(
            long.ends_with(&format!("the message was {} bytes.)", 2 * MOST_KEPT_TEXT)),
            "{}",
            &long[long.len() - 80..]
        );
        assert!(text(kept[MOST_ACTIVITIES - 1]).starts_with("This conversation keeps no more notices"));
        assert_eq!(store.get(&session.id).and_then(|record| record.leaf), Some(first), "the leaf stays");
    }

    #[test]
    fn a_message_naming_no_session_never_goes_to_a_scheduled_runs_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("data/state")).expect("state");
        let store = SessionStore::open(dir.path());
        let family = Context::group("family");
        let chat = store.active(&family, "alice").expect("created");
        store.append(&chat.id, None, message("hello")).expect("append");
        // A task's run starts its own session after it, the newest, and is at work in it ...
        let run = store.create_for_run(&family, "alice", "task: the weather".into()).expect("run");
        store.append(&run.id, None, message("Heartbeat")).expect("append to the run");
        // ... and a member's message still goes on in their conversation, also once reopened,
        // and in a fork of the run's (a person's).
        assert_eq!(store.active(&family, "bob").expect("active").id, chat.id);
        let reopened = SessionStore::open(dir.path());
        assert_eq!(reopened.active(&family, "bob").expect("active").id, chat.id);
        let fork = reopened.fork(&run.id, &run.id).expect("fork");
        assert_eq!(reopened.active(&family, "bob").expect("active").id, fork.id);
    }

    #[test]
    fn a_conversation_is_titled_by_its_first_message() {
        assert_eq!(title_of("\n  Plan the trip to Lyon \nin June").as_deref(), Some("Plan the trip to Lyon"));
        let long = "Which of these seven recipes would be quickest to cook on a weekday evening for four";
        assert_eq!(title_of(long).as_deref(), Some("Which of these seven recipes would be quickest to cook on a…"));
        assert_eq!(title_of(" \n "), None);
        assert_eq!(title_of("[attached: uploads/a.png (image/png, 3 KB) in the session's workspace]"), None);
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("data/state")).expect("state");
        let store = SessionStore::open(dir.path());
        let record = store.create(&Context::user("alice"), "alice", None).expect("create");
        assert!(store.title_from_first_message(&record.id, "hello there").expect("title"));
        assert!(!store.title_from_first_message(&record.id, "second").expect("kept"));
        assert_eq!(store.get(&record.id).expect("record").title.as_deref(), Some("hello there"));
    }

    #[test]
    fn sweeps_idle_and_due_sessions() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("data/state")).expect("state");
        let store = SessionStore::open(dir.path());
        let session = store.create(&Context::group("family"), "alice", None).expect("create");
        let now = session.last_activity_seconds;
        assert_eq!(store.sweep(now + 10, 60, 3600).expect("sweep"), (vec![], vec![]));
        assert_eq!(store.sweep(now + 61, 60, 3600).expect("sweep"), (vec![session.id.clone()], vec![]));
        assert_eq!(store.sweep(now + 3601, 60, 3600).expect("sweep"), (vec![], vec![session.id.clone()]));
    }

    #[test]
    fn reads_the_specs_index_format_and_counts_by_status() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("data/state")).expect("state");
        assert_eq!(SessionStore::open(dir.path()).counts(), SessionCounts::default());
        std::fs::write(
            dir.path().join("data/state").join(INDEX_FILE),
            r#"{"sessions": [
                {"id": "a", "userId": "billm", "contextType": "user", "lastActivity": "2026-02-06T14:00:00Z", "status": "active", "archivedAt": null},
                {"id": "b", "userId": "billm", "contextType": "user", "lastActivity": "2026-02-06T14:00:00Z", "status": "idle"},
                {"id": "c", "userId": "billm", "groupId": "g", "contextType": "group", "lastActivity": "2026-02-01T10:00:00Z", "status": "archived", "archivedAt": "2026-02-02T10:00:00Z"}
            ]}"#,
        )
        .expect("write");
        let store = SessionStore::open(dir.path());
        assert_eq!(store.counts(), SessionCounts { active: 1, idle: 1, archived: 1 });
        assert_eq!(store.get("c").expect("c").context(), Context::group("g"));
    }
}
