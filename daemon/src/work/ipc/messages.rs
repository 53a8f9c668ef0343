//! Messages and tasks: what the `message` tool queues in `messages/`, delivered once (its id in
//! the ledger before the file goes), and what a container writes to `tasks/` to schedule one.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::sync::PoisonError;

use serde::{Deserialize, Serialize};

use super::{context_of_folder, is_valid_call_id, slot_of, Found, Ipc, KEPT_PER_CONTEXT};
use crate::base::auth::Context;
use crate::base::state::now_seconds;
use crate::sandbox::shared_dirs;

/// The largest message file read (its content may be 64 KiB, escaped in JSON).
const MAX_MESSAGE_BYTES: u64 = 512 << 10;

/// Message ids delivered per context folder, with when (seconds since the epoch).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Ledger {
    pub(super) version: u32,
    #[serde(default)]
    pub(super) messages: BTreeMap<String, BTreeMap<String, u64>>,
}

/// What the `message` tool writes to `messages/{id}.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MessageFile {
    id: String,
    content: String,
    /// `user:ID` or `group:ID`; only the folder's own context is accepted.
    #[serde(default)]
    target_context: Option<String>,
    /// Written by the runner; the slot's own session is what counts.
    #[serde(default)]
    #[allow(dead_code)]
    session_id: String,
    /// Files sent with it, copied by the runner into `{id}.files/` beside it ([`crate::store::sent`]).
    #[serde(default)]
    files: Vec<String>,
    /// The request of the call that queued it (spec §18.1): its delivery carries it.
    #[serde(default)]
    correlation_id: String,
}

/// What a container writes to `tasks/{id}.json` to schedule a task (spec §12.4).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskFile {
    pub id: String,
    pub prompt: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub cron: Option<String>,
    #[serde(default)]
    pub interval_seconds: Option<u64>,
    #[serde(default)]
    pub once: Option<String>,
    #[serde(default)]
    pub timezone: String,
    #[serde(default)]
    pub agent: String,
    /// The request of the command that wrote it (spec §18.1), for the log of its scheduling.
    #[serde(default)]
    pub correlation_id: String,
}

/// Messages one context may send per minute.
pub const MESSAGES_PER_MINUTE: usize = 30;

impl Ipc {
    /// Delivers the messages tool containers queued: each file once, to its own folder's
    /// context and its slot's session (the folder is its authority), only from a `tools-` slot
    /// (a Coder's has no `message` tool), at most [`MESSAGES_PER_MINUTE`] per context (the rest
    /// wait for the next minute), logging each delivery. Returns how many were delivered.
    pub fn deliver_messages(
        &self,
        bus: &crate::store::events::EventBus,
        workspaces: &crate::sandbox::workspace::Workspaces,
        sent: &mut BTreeMap<String, Vec<u64>>,
    ) -> usize {
        let mut delivered = 0;
        let now = now_seconds();
        for (folder, slot, dir) in self.container_folders("messages", false) {
            let (Some(context), Some((session, _))) = (context_of_folder(&folder), slot_of(&slot)) else { continue };
            for name in Self::json_files(&dir) {
                let recent = sent.entry(folder.clone()).or_default();
                recent.retain(|at| now.saturating_sub(*at) < 60);
                if recent.len() >= MESSAGES_PER_MINUTE {
                    tracing::warn!(context = %context, "message rate limit reached; the rest wait for the next minute");
                    break;
                }
                let found = Found { context: &folder, slot: &slot, dir: &dir, name: &name };
                let delivered_now = self.deliver_message(&found, &context, session, bus, workspaces);
                // Its files went with it, or go with it refused.
                let files = format!("{}.files", name.to_string_lossy().trim_end_matches(".json"));
                if let Err(error) = shared_dirs::remove_tree(&dir, OsStr::new(&files)) {
                    tracing::warn!(file = %found.shown("messages"), %error, "cannot remove a message's files");
                }
                if delivered_now {
                    delivered += 1;
                    sent.entry(folder.clone()).or_default().push(now);
                }
            }
        }
        delivered
    }

    pub(super) fn deliver_message(
        &self,
        found: &Found<'_>,
        context: &Context,
        session: &str,
        bus: &crate::store::events::EventBus,
        workspaces: &crate::sandbox::workspace::Workspaces,
    ) -> bool {
        let Some(mut message) = self.read_request::<MessageFile>(found, "messages", "message", |m| &m.id) else {
            return false;
        };
        if message.target_context.as_deref().is_some_and(|target| target != context.to_string()) {
            self.reject(found, "messages", "an agent may message only its own context");
            return false;
        }
        if message.content.trim().is_empty() || message.content.len() > 64 << 10 {
            self.reject(found, "messages", "the content is empty or longer than 64 KiB");
            return false;
        }
        {
            let mut ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
            let seen = ledger.messages.entry(found.context.to_string()).or_default();
            if seen.contains_key(&message.id) {
                drop(ledger);
                self.remove(found, "messages");
                return false;
            }
            let attachments = if message.files.is_empty() {
                vec![]
            } else {
                let files = format!("{}.files", message.id);
                let kept = match shared_dirs::open_dir(found.dir, &files) {
                    Ok(Some(dir)) => {
                        let kept = crate::store::sent::keep(workspaces, session, dir, &message.files);
                        kept.map_err(|why| why.to_string())
                    }
                    Ok(None) => Err(format!("its files are not in {files}/")),
                    Err(error) => Err(format!("its files in {files}/ cannot be read: {error}")),
                };
                match kept {
                    Ok(attachments) => attachments,
                    Err(why) => {
                        drop(ledger);
                        self.reject(found, "messages", &why);
                        return false;
                    }
                }
            };
            let kind = crate::store::events::Kind::Message {
                content: message.content.clone(),
                reply_to: String::new(),
                metadata: BTreeMap::new(),
                attachments,
            };
            // Written by the container: taken only in an id's shape.
            if !crate::base::auth::is_valid_correlation_id(&message.correlation_id) {
                message.correlation_id.clear();
            }
            let event = crate::store::events::Event::of_turn(session, "", &message.correlation_id, kind);
            let channels = bus.publish(context, event);
            seen.insert(message.id.clone(), now_seconds());
            if seen.len() > KEPT_PER_CONTEXT {
                let oldest = seen.iter().min_by_key(|(_, at)| **at).map(|(id, _)| id.clone());
                if let Some(oldest) = oldest {
                    seen.remove(&oldest);
                }
            }
            if let Err(error) = self.save(&ledger) {
                tracing::error!(%error, "cannot record a delivered message");
            }
            tracing::info!(context = %context, session, id = %message.id, correlation_id = %message.correlation_id, channels,
                bytes = message.content.len(), "message delivered");
        }
        self.remove(found, "messages");
        true
    }

    /// Hands every task request queued in a `tools-` slot's `tasks/` folder to `schedule`
    /// (with the folder's context and the slot's session: the folder is its authority), then
    /// removes it; a request `schedule` refuses, or one that does not parse, is set aside with
    /// the reason. `schedule` answers the task's id, or why not (its own error: the scheduler is
    /// a wing above). Returns how many were taken.
    pub fn take_task_requests<E: std::fmt::Display>(
        &self,
        schedule: &mut dyn FnMut(&Context, &str, TaskFile) -> Result<String, E>,
    ) -> usize {
        let mut taken = 0;
        for (folder, slot, dir) in self.container_folders("tasks", false) {
            let (Some(context), Some((session, _))) = (context_of_folder(&folder), slot_of(&slot)) else { continue };
            for name in Self::json_files(&dir) {
                let found = Found { context: &folder, slot: &slot, dir: &dir, name: &name };
                let Some(request) = self.read_request::<TaskFile>(&found, "tasks", "task request", |r| &r.id) else {
                    continue;
                };
                match schedule(&context, session, request) {
                    Ok(task) => {
                        tracing::info!(context = %context, session, task, "task scheduled through file IPC");
                        self.remove(&found, "tasks");
                        taken += 1;
                    }
                    Err(why) => self.reject(&found, "tasks", &why.to_string()),
                }
            }
        }
        taken
    }

    /// A container's request file (a message, a task request): read as a regular file and
    /// parsed, its id the file's name; anything else is set aside with the reason.
    pub(super) fn read_request<T: serde::de::DeserializeOwned>(
        &self,
        found: &Found<'_>,
        sub: &str,
        what: &str,
        id: impl Fn(&T) -> &str,
    ) -> Option<T> {
        let request: T = match shared_dirs::read_regular(found.dir, found.name, MAX_MESSAGE_BYTES) {
            Ok(Some(bytes)) => match serde_json::from_slice(&bytes) {
                Ok(request) => request,
                Err(error) => {
                    self.reject(found, sub, &format!("not a {what}: {error}"));
                    return None;
                }
            },
            Ok(None) => return None,
            Err(error) => {
                self.reject(found, sub, &format!("not a {what} file: {error}"));
                return None;
            }
        };
        let stem = found.name.to_string_lossy();
        if !is_valid_call_id(id(&request)) || Some(id(&request)) != stem.strip_suffix(".json") {
            self.reject(found, sub, "its id does not match its file name");
            return None;
        }
        Some(request)
    }
}
