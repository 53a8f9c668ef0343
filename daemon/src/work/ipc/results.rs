//! Results: what a runner wrote of a call that may change something, collected once into
//! the daemon's own folder, asked for again by its call id; files that are not what they should
//! be, kept aside with the reason.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use serde::Deserialize;

use super::{is_valid_call_id, slot_name, Found, Ipc, KEPT_PER_CONTEXT};
use crate::base::auth::Context;
use crate::base::datadir::folder_of;
use crate::base::state::{self, StateError};
use crate::sandbox::shared_dirs;

/// Results recorded between two prunings of a context's folder.
const PRUNE_EVERY: u64 = 64;
/// The largest result file read (a result's content is capped far below this by the runner).
const MAX_RESULT_BYTES: u64 = 16 << 20;
/// A rejected file larger than this is deleted, not kept.
const MAX_REJECTED_BYTES: u64 = 1 << 20;
/// Rejected files kept per context (the newest).
pub(super) const KEPT_REJECTED: usize = 100;

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
    /// The request's (spec §18.1); absent in a file written before it was kept.
    #[serde(default)]
    #[allow(dead_code)] // Part of the record on disk; read by people, not by the daemon.
    correlation_id: String,
}

/// What a tool call answered: as its runner sent it, or wrote it (`results/{call_id}.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolAnswer {
    pub content: String,
    pub is_error: bool,
    pub duration_ms: u64,
    pub metadata: std::collections::HashMap<String, String>,
}

impl ResultFile {
    fn response(self) -> ToolAnswer {
        ToolAnswer {
            content: self.content,
            is_error: self.is_error,
            duration_ms: self.duration_ms,
            metadata: self.metadata.into_iter().collect(),
        }
    }
}

impl Ipc {
    pub(super) fn record_path(&self, folder: &str, call_id: &str) -> PathBuf {
        self.records.join(folder).join(format!("{call_id}.json"))
    }

    /// The result of `call_id` in `context`, if it was collected before.
    pub fn recorded(&self, context: &Context, call_id: &str) -> Option<ToolAnswer> {
        let bytes = std::fs::read(self.record_path(&folder_of(context), call_id)).ok()?;
        serde_json::from_slice::<ResultFile>(&bytes).ok().map(ResultFile::response)
    }

    /// Collects the result file of `call_id` from the tool container of `session` in `context`
    /// (a Coder's when `coder`) if there is one; returns the result collected now or before.
    /// Results are cleaned by `redact` before they are recorded, from now on.
    pub fn redact_with(&self, redact: crate::guard::redact::Redact) {
        // silent-ok: set once, when the daemon is put together.
        let _ = self.redact.set(redact);
    }

    pub fn collect(&self, context: &Context, session: &str, coder: bool, call_id: &str) -> Option<ToolAnswer> {
        let folder = folder_of(context);
        let slot = slot_name(session, coder);
        let results = shared_dirs::open_dir(&self.root_fd, format!("{folder}/{slot}/results"));
        match results {
            Ok(Some(dir)) => {
                self.collect_file(&folder, &slot, &dir, OsStr::new(&format!("{call_id}.json")));
            }
            Ok(None) => {}
            Err(error) => tracing::warn!(context = %context, slot = %slot, %error, "cannot open an IPC results folder"),
        }
        self.recorded(context, call_id)
    }

    /// Collects every result file in every container folder (at start, after a crash).
    pub fn collect_all(&self) -> usize {
        let mut collected = 0;
        for (folder, slot, dir) in self.container_folders("results", true) {
            for name in Self::json_files(&dir) {
                if self.collect_file(&folder, &slot, &dir, &name) {
                    collected += 1;
                }
            }
        }
        if collected > 0 {
            tracing::info!(collected, "collected tool results left from before a restart");
        }
        collected
    }

    /// Moves `name` out of a container's folder into `data/state/ipc-rejected/{folder}/{slot}/`
    /// (the entry itself, whatever it is; nothing is followed or read).
    pub(super) fn reject(&self, found: &Found<'_>, sub: &str, reason: &str) {
        let shown = found.shown(sub);
        let target = self.rejected.join(found.context).join(found.slot);
        // Only a small regular file is worth keeping for a person to look at.
        let small =
            rustix::fs::statat(found.dir, found.name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|stat| {
                rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::RegularFile
                    && (stat.st_size as u64) <= MAX_REJECTED_BYTES
            });
        let unlink = || rustix::fs::unlinkat(found.dir, found.name, rustix::fs::AtFlags::empty());
        let moved = if small {
            std::fs::create_dir_all(&target).and_then(|()| shared_dirs::open_trusted(&target)).and_then(|into| {
                rustix::fs::renameat(found.dir, found.name, &into, found.name).or_else(|errno| {
                    if errno == rustix::io::Errno::XDEV {
                        // Another filesystem (a memory one): it is not worth a copy.
                        unlink()
                    } else {
                        Err(errno)
                    }
                })?;
                Ok(())
            })
        } else {
            unlink().map_err(std::io::Error::from)
        };
        match moved {
            Ok(()) => {
                tracing::warn!(file = %shown, moved_to = %target.display(), reason, "a malformed IPC file was set aside");
                self.prune_rejected(found.context);
            }
            Err(error) => tracing::warn!(file = %shown, reason, %error, "a malformed IPC file cannot be set aside"),
        }
    }

    /// Keeps the newest [`KEPT_REJECTED`] files set aside for the context folder `folder`.
    pub(super) fn prune_rejected(&self, folder: &str) {
        let Ok(slots) = std::fs::read_dir(self.rejected.join(folder)) else { return };
        let mut kept: Vec<(std::time::SystemTime, PathBuf)> = slots
            .flatten()
            .filter_map(|slot| std::fs::read_dir(slot.path()).ok())
            .flat_map(|files| files.flatten())
            .filter_map(|file| Some((file.metadata().ok()?.modified().ok()?, file.path())))
            .collect();
        if kept.len() <= KEPT_REJECTED {
            return;
        }
        kept.sort();
        for (_, path) in &kept[..kept.len() - KEPT_REJECTED] {
            if let Err(error) = std::fs::remove_file(path) {
                tracing::warn!(file = %path.display(), %error, "cannot prune a rejected IPC file");
            }
        }
    }

    /// Records one result file of a container's `results/` folder (`dir`); a file whose call
    /// was recorded before is only removed. True when the call is recorded.
    pub(super) fn collect_file(&self, folder: &str, slot: &str, dir: &OwnedFd, name: &OsStr) -> bool {
        let found = Found { context: folder, slot, dir, name };
        let bytes = match shared_dirs::read_regular(dir, name, MAX_RESULT_BYTES) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return false,
            Err(error) => {
                self.reject(&found, "results", &format!("not a result file: {error}"));
                return false;
            }
        };
        let file: ResultFile = match serde_json::from_slice(&bytes) {
            Ok(file) => file,
            Err(error) => {
                self.reject(&found, "results", &format!("not a result: {error}"));
                return false;
            }
        };
        let expected = name.to_string_lossy();
        let expected = expected.strip_suffix(".json").unwrap_or_default();
        if !is_valid_call_id(&file.call_id) || file.call_id != expected {
            self.reject(&found, "results", "its callId does not match its file name");
            return false;
        }
        let record = self.record_path(folder, &file.call_id);
        // No secret is kept: the result as the redactor leaves it.
        let bytes = match (self.redact.get(), serde_json::from_slice::<serde_json::Value>(&bytes)) {
            (Some(redact), Ok(mut value)) => {
                redact.clean_json(crate::guard::redact::Place::ToolResult, &mut value);
                serde_json::to_vec(&value).unwrap_or(bytes)
            }
            _ => bytes,
        };
        // The record is written from the bytes read here, never by moving the container's
        // file: what is recorded is what was checked.
        let recorded = record.exists()
            || record
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .map_err(|source| StateError::Write { path: record.clone(), source })
                .and_then(|()| state::write_atomic(&record, &bytes, 0o600))
                .map_err(|error| {
                    tracing::error!(file = %found.shown("results"), %error, "cannot record a tool result; its file is kept for the next try")
                })
                .is_ok();
        if !recorded {
            return false;
        }
        self.remove(&found, "results");
        if self.recorded_since_prune.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            self.prune(folder);
        }
        true
    }

    /// Keeps the newest [`KEPT_PER_CONTEXT`] results of a context.
    pub(super) fn prune(&self, folder: &str) {
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
            if let Err(error) = std::fs::remove_file(path) {
                tracing::warn!(file = %path.display(), %error, "cannot prune a recorded tool result");
            }
        }
    }
}
