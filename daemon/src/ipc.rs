//! File-based IPC, container → daemon (spec §12.4): `data/ipc/{context}/results/{call}.json`,
//! written atomically by a tool container's runner for every call, and
//! `data/ipc/{context}/messages/{id}.json`, queued by the `message` tool. The folder a file sits
//! in is its only authority: a file in context A's folder acts for A.
//!
//! A result is collected once by renaming it into `data/state/tool-results/{context}/` (the
//! daemon's own folder; a file already recorded is only removed), also after a restart, so a
//! call whose answer was lost with a crashed daemon is answered when the agent asks again with
//! the same tool_call_id and never runs twice. A message is delivered once: its id goes into
//! `data/state/ipc-messages.json` before the file is removed. A file that does not parse is
//! moved to `rejected/` with the reason in the log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use baaaht_proto::v1;
use serde::{Deserialize, Serialize};

use crate::auth::{Context, ContextKind};
use crate::state::{self, now_seconds, StateError};

/// Results and message ids kept per context for agents that ask again.
const KEPT_PER_CONTEXT: usize = 500;
/// Results recorded between two prunings of a context's folder.
const PRUNE_EVERY: u64 = 64;

/// What a runner writes, and what is kept once collected.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResultFile {
    call_id: String,
    #[allow(dead_code)] // Part of the record on disk; read by people, not by the daemon.
    tool: String,
    content: String,
    is_error: bool,
    #[serde(default)]
    duration_ms: u64,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

impl ResultFile {
    fn response(self) -> v1::ToolResponse {
        v1::ToolResponse {
            content: self.content,
            is_error: self.is_error,
            duration_ms: self.duration_ms,
            metadata: self.metadata.into_iter().collect(),
        }
    }
}

/// Message ids delivered per context folder, with when (seconds since the epoch).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Ledger {
    version: u32,
    #[serde(default)]
    messages: BTreeMap<String, BTreeMap<String, u64>>,
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
    #[serde(default)]
    session_id: String,
}

/// Messages one context may send per minute.
pub const MESSAGES_PER_MINUTE: usize = 30;

/// The context a folder name stands for (`user-alice` → user `alice`).
pub fn context_of_folder(folder: &str) -> Option<Context> {
    let (kind, id) = folder.split_once('-')?;
    if !crate::auth::is_valid_context_id(id) {
        return None;
    }
    match kind {
        "user" => Some(Context::user(id)),
        "group" => Some(Context::group(id)),
        _ => None,
    }
}

/// The folder name of a context: `user-alice`, `group-family`.
pub fn folder_of(context: &Context) -> String {
    let kind = match context.kind {
        ContextKind::User => "user",
        ContextKind::Group => "group",
    };
    format!("{kind}-{}", context.id)
}

/// Whether `id` can name a result file (what tool call ids from providers look like).
pub fn is_valid_call_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The daemon's side of file IPC.
#[derive(Debug)]
pub struct Ipc {
    root: PathBuf,
    records: PathBuf,
    ledger_path: PathBuf,
    ledger: Mutex<Ledger>,
    recorded_since_prune: AtomicU64,
}

impl Ipc {
    /// Opens the message ledger; one that does not parse is kept aside, never lost.
    pub fn open(ipc_dir: PathBuf, state_dir: &Path) -> Ipc {
        let ledger_path = state_dir.join("ipc-messages.json");
        let ledger = state::read_json_or_set_aside(&ledger_path, || Ledger { version: 1, ..Ledger::default() });
        Ipc {
            root: ipc_dir,
            records: state_dir.join("tool-results"),
            ledger_path,
            ledger: Mutex::new(ledger),
            recorded_since_prune: AtomicU64::new(0),
        }
    }

    /// `data/ipc/{context}`, with `results/` and `messages/` writable by the container's uid.
    pub fn prepare(&self, context: &Context) -> std::io::Result<PathBuf> {
        let folder = self.root.join(folder_of(context));
        for sub in ["results", "messages"] {
            let path = folder.join(sub);
            std::fs::create_dir_all(&path)?;
            state::hand_to_containers(&folder)?;
            state::hand_to_containers(&path)?;
        }
        Ok(folder)
    }

    fn record_path(&self, folder: &str, call_id: &str) -> PathBuf {
        self.records.join(folder).join(format!("{call_id}.json"))
    }

    /// The result of `call_id` in `context`, if it was collected before.
    pub fn recorded(&self, context: &Context, call_id: &str) -> Option<v1::ToolResponse> {
        let bytes = std::fs::read(self.record_path(&folder_of(context), call_id)).ok()?;
        serde_json::from_slice::<ResultFile>(&bytes).ok().map(ResultFile::response)
    }

    /// Collects the result file of `call_id` in `context` if there is one; returns the result
    /// collected now or before.
    pub fn collect(&self, context: &Context, call_id: &str) -> Option<v1::ToolResponse> {
        let folder = folder_of(context);
        let path = self.root.join(&folder).join("results").join(format!("{call_id}.json"));
        if path.exists() {
            self.collect_file(&folder, &path);
        }
        self.recorded(context, call_id)
    }

    /// Collects every result file in every context folder (at start, after a crash).
    pub fn collect_all(&self) -> usize {
        let Ok(contexts) = std::fs::read_dir(&self.root) else { return 0 };
        let mut collected = 0;
        for context in contexts.flatten() {
            let folder = context.file_name().to_string_lossy().into_owned();
            let Ok(files) = std::fs::read_dir(context.path().join("results")) else { continue };
            for file in files.flatten() {
                let path = file.path();
                let name = file.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') || !name.ends_with(".json") {
                    continue;
                }
                if self.collect_file(&folder, &path) {
                    collected += 1;
                }
            }
        }
        if collected > 0 {
            tracing::info!(collected, "collected tool results left from before a restart");
        }
        collected
    }

    fn reject(&self, path: &Path, reason: &str) {
        let Some(parent) = path.parent() else { return };
        let rejected = parent.join("rejected");
        let target = rejected.join(path.file_name().unwrap_or_default());
        let moved = std::fs::create_dir_all(&rejected).and_then(|()| std::fs::rename(path, &target));
        match moved {
            Ok(()) => {
                tracing::warn!(file = %path.display(), moved_to = %target.display(), reason, "a malformed IPC file was set aside")
            }
            Err(error) => {
                tracing::warn!(file = %path.display(), reason, %error, "a malformed IPC file cannot be set aside")
            }
        }
    }

    /// Records one result file by renaming it into the daemon's folder; a file whose call was
    /// recorded before is only removed. True when the call is recorded.
    fn collect_file(&self, folder: &str, path: &Path) -> bool {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::warn!(file = %path.display(), %error, "cannot read an IPC result");
                return false;
            }
        };
        let file: ResultFile = match serde_json::from_slice(&bytes) {
            Ok(file) => file,
            Err(error) => {
                self.reject(path, &format!("not a result: {error}"));
                return false;
            }
        };
        let expected = path.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_default();
        if !is_valid_call_id(&file.call_id) || file.call_id != expected {
            self.reject(path, "its callId does not match its file name");
            return false;
        }
        let record = self.record_path(folder, &file.call_id);
        if record.exists() {
            // Recorded before the file could be removed (a crash in between): remove it now.
            self.remove(path);
            return true;
        }
        let recorded = record
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::rename(path, &record))
            .or_else(|error| {
                if record.exists() {
                    return Ok(()); // Collected at the same moment by another caller.
                }
                if error.kind() != std::io::ErrorKind::CrossesDevices {
                    return Err(error);
                }
                // Another filesystem: a durable copy, then the original goes.
                state::write_atomic(&record, &bytes, 0o600).map_err(std::io::Error::other)?;
                std::fs::remove_file(path)
            })
            .and_then(|()| record.parent().map_or(Ok(()), |dir| std::fs::File::open(dir)?.sync_all()));
        if let Err(error) = recorded {
            tracing::error!(file = %path.display(), %error, "cannot record a tool result; its file is kept for the next try");
            return record.exists();
        }
        if self.recorded_since_prune.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            self.prune(folder);
        }
        true
    }

    /// Keeps the newest [`KEPT_PER_CONTEXT`] results of a context.
    fn prune(&self, folder: &str) {
        let Ok(entries) = std::fs::read_dir(self.records.join(folder)) else { return };
        let mut records: Vec<(std::time::SystemTime, PathBuf)> = entries
            .flatten()
            .filter_map(|entry| Some((entry.metadata().ok()?.modified().ok()?, entry.path())))
            .collect();
        if records.len() <= KEPT_PER_CONTEXT {
            return;
        }
        records.sort();
        for (_, path) in &records[..records.len() - KEPT_PER_CONTEXT] {
            self.remove(path);
        }
    }

    /// Delivers the messages containers queued: each file once, to its own folder's context
    /// (the folder is its authority), at most [`MESSAGES_PER_MINUTE`] per context (the rest wait
    /// for the next minute), logging each delivery. Returns how many were delivered.
    pub fn deliver_messages(&self, bus: &crate::events::EventBus, sent: &mut BTreeMap<String, Vec<u64>>) -> usize {
        let Ok(contexts) = std::fs::read_dir(&self.root) else { return 0 };
        let mut delivered = 0;
        let now = now_seconds();
        for folder_entry in contexts.flatten() {
            let folder = folder_entry.file_name().to_string_lossy().into_owned();
            let Some(context) = context_of_folder(&folder) else { continue };
            let Ok(files) = std::fs::read_dir(folder_entry.path().join("messages")) else { continue };
            let mut names: Vec<PathBuf> = files
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| {
                    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    !name.starts_with('.') && name.ends_with(".json")
                })
                .collect();
            names.sort();
            for path in names {
                let recent = sent.entry(folder.clone()).or_default();
                recent.retain(|at| now.saturating_sub(*at) < 60);
                if recent.len() >= MESSAGES_PER_MINUTE {
                    tracing::warn!(context = %context, "message rate limit reached; the rest wait for the next minute");
                    break;
                }
                if self.deliver_message(&folder, &context, &path, bus) {
                    delivered += 1;
                    sent.entry(folder.clone()).or_default().push(now);
                }
            }
        }
        delivered
    }

    fn deliver_message(&self, folder: &str, context: &Context, path: &Path, bus: &crate::events::EventBus) -> bool {
        let message: MessageFile = match std::fs::read(path).map(|bytes| serde_json::from_slice(&bytes)) {
            Ok(Ok(message)) => message,
            Ok(Err(error)) => {
                self.reject(path, &format!("not a message: {error}"));
                return false;
            }
            Err(error) => {
                tracing::warn!(file = %path.display(), %error, "cannot read an IPC message");
                return false;
            }
        };
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if !is_valid_call_id(&message.id) || message.id != stem {
            self.reject(path, "its id does not match its file name");
            return false;
        }
        if message.target_context.as_deref().is_some_and(|target| target != context.to_string()) {
            self.reject(path, "an agent may message only its own context");
            return false;
        }
        if message.content.trim().is_empty() || message.content.len() > 64 << 10 {
            self.reject(path, "the content is empty or longer than 64 KiB");
            return false;
        }
        {
            let mut ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
            let seen = ledger.messages.entry(folder.to_string()).or_default();
            if seen.contains_key(&message.id) {
                drop(ledger);
                self.remove(path);
                return false;
            }
            let channels = bus.publish(
                context,
                v1::OrchestratorEvent {
                    session_id: message.session_id.clone(),
                    event: Some(v1::orchestrator_event::Event::Message(v1::OutboundMessage {
                        target_context: Some(crate::server::context_ref(context)),
                        content: message.content.clone(),
                        ..v1::OutboundMessage::default()
                    })),
                    ..v1::OrchestratorEvent::default()
                },
            );
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
            tracing::info!(context = %context, id = %message.id, channels, bytes = message.content.len(), "message delivered");
        }
        self.remove(path);
        true
    }

    fn remove(&self, path: &Path) {
        if let Err(error) = std::fs::remove_file(path) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(file = %path.display(), %error, "cannot remove a collected IPC result");
            }
        }
    }

    fn save(&self, ledger: &Ledger) -> Result<(), StateError> {
        state::write_json(&self.ledger_path, ledger)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("folder")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    #[test]
    fn results_are_collected_once_and_survive_a_restart() {
        let temp = tempfile::tempdir().expect("tempdir");
        let (ipc_dir, state_dir) = (temp.path().join("ipc"), temp.path().join("state"));
        std::fs::create_dir_all(&state_dir).expect("state");
        let alice = Context::user("alice");
        let file = ipc_dir.join("user-alice/results/toolu_1.json");
        write(&file, r#"{"callId":"toolu_1","tool":"exec","content":"exit code 0","isError":false,"durationMs":5}"#);
        write(&ipc_dir.join("user-alice/results/bad.json"), "{not json");
        write(
            &ipc_dir.join("user-alice/results/other.json"),
            r#"{"callId":"toolu_9","tool":"x","content":"","isError":false}"#,
        );

        let ipc = Ipc::open(ipc_dir.clone(), &state_dir);
        assert_eq!(ipc.collect_all(), 1);
        assert!(!file.exists(), "a collected file is removed");
        assert!(ipc_dir.join("user-alice/results/rejected/bad.json").exists());
        assert!(
            ipc_dir.join("user-alice/results/rejected/other.json").exists(),
            "a file naming another call is rejected"
        );
        assert_eq!(ipc.recorded(&alice, "toolu_1").map(|r| r.content).as_deref(), Some("exit code 0"));
        assert!(ipc.recorded(&Context::user("bob"), "toolu_1").is_none(), "the folder is the authority");

        // A file recorded but not removed before a crash is only removed the next time.
        write(&file, r#"{"callId":"toolu_1","tool":"exec","content":"a second run","isError":false}"#);
        let reopened = Ipc::open(ipc_dir, &state_dir);
        assert_eq!(reopened.collect_all(), 1);
        assert_eq!(reopened.recorded(&alice, "toolu_1").map(|r| r.content).as_deref(), Some("exit code 0"));
        assert!(!file.exists());
    }

    #[test]
    fn call_ids_are_file_names() {
        assert!(is_valid_call_id("toolu_01A09q90qw90lq917835lq9"));
        assert!(is_valid_call_id("call_abc-123"));
        assert!(!is_valid_call_id("../x"));
        assert!(!is_valid_call_id(""));
        assert!(!is_valid_call_id(&"a".repeat(129)));
    }
}
