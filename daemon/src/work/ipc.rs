//! File-based IPC, container → daemon (spec §12.4). Each tool container has its own folder,
//! `data/ipc/{context}/{slot}`, mounted at `/ipc`: `tools-{session}` for a session's tool
//! container and `coder-{session}` for a Coder's. Its runner writes the result of every call
//! that may change something (not of `read_file`, `list_dir`, `grep`, `find`) to
//! `results/{call}.json` atomically; the `message` tool queues `messages/{id}.json`, and only a
//! `tools-` slot has a `messages/` folder: a Coder (whose `exec` runs anything) has no `message`
//! tool, so its folder can deliver nothing. The folder a file sits in is its only authority: a
//! file in context A's folder acts for A, in the session its slot names.
//!
//! A container can write anything in its `results/` and `messages/`, links included, but it
//! cannot change its slot folder (the daemon's, mode 0755) or see any other. The daemon never
//! follows a link here: it opens every folder beneath `data/ipc` with `RESOLVE_NO_SYMLINKS`
//! and reads, moves and removes files by descriptor ([`crate::sandbox::shared_dirs`]).
//!
//! A result is collected once into `data/state/tool-results/{context}/` (the daemon's own
//! folder; a file already recorded is only removed), also after a restart, so a call whose
//! answer was lost with a crashed daemon is answered when the agent asks again with the same
//! tool_call_id and never runs twice. A message is delivered once: its id goes into
//! `data/state/ipc-messages.json` before the file is removed. A file that is not what it should
//! be (does not parse, is not a regular file) is moved to `data/state/ipc-rejected/` with the
//! reason in the log (at most [`MAX_REJECTED_BYTES`] a file and [`KEPT_REJECTED`] files a
//! context; a larger or older one is deleted).
//!
//! The one way the other way is `system/` in each slot, the daemon's (0755), which its
//! container reads and cannot change: what the context's people can reach and the context's
//! containers, kept current by `system_files.rs`.
//!
//! A container can write [`SLOT_CAP`] bytes in its folder at most: where the daemon can mount,
//! the folder is a memory filesystem of that size (a write past it fails in the container and
//! the host's disk is never touched), else the runner checks after each call (`--ipc-cap`). A
//! tool container holds its folder through a [`Lease`]; once none does, the next pass of the
//! IPC loop, after delivering what was queued there, collects the results left, unmounts the
//! folder and removes it. Folders found at start are let go the same way.

use std::collections::BTreeMap;
use std::collections::{BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::base::auth::Context;
use crate::base::datadir::folder_of;
use crate::base::state::{self, now_seconds, StateError};
use crate::sandbox::shared_dirs::{self, Owner};

/// Results and message ids kept per context for agents that ask again.
const KEPT_PER_CONTEXT: usize = 500;
/// Results recorded between two prunings of a context's folder.
const PRUNE_EVERY: u64 = 64;
/// The largest result file read (a result's content is capped far below this by the runner).
const MAX_RESULT_BYTES: u64 = 16 << 20;
/// The largest message file read (its content may be 64 KiB, escaped in JSON).
const MAX_MESSAGE_BYTES: u64 = 512 << 10;
/// What one container's IPC folder may hold.
pub const SLOT_CAP: u64 = 16 << 20;
/// The folder of the pooled tool containers' slots (no context's folder: those are
/// `user-{id}` and `group-{id}`).
const POOL: &str = "pool";
/// A rejected file larger than this is deleted, not kept.
const MAX_REJECTED_BYTES: u64 = 1 << 20;
/// Rejected files kept per context (the newest).
const KEPT_REJECTED: usize = 100;

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

/// The context a folder name stands for (`user-alice` → user `alice`).
pub fn context_of_folder(folder: &str) -> Option<Context> {
    let (kind, id) = folder.split_once('-')?;
    if !crate::base::auth::is_valid_context_id(id) {
        return None;
    }
    match kind {
        "user" => Some(Context::user(id)),
        "group" => Some(Context::group(id)),
        _ => None,
    }
}

/// The IPC folder of one tool container: `tools-{session}` for a session's tool container,
/// `coder-{session}` for a Coder's.
pub fn slot_name(session: &str, coder: bool) -> String {
    format!("{}-{session}", if coder { "coder" } else { "tools" })
}

/// The session and kind (Coder or not) a slot folder stands for.
fn slot_of(name: &str) -> Option<(&str, bool)> {
    let (session, coder) = match name.split_once('-')? {
        ("tools", session) => (session, false),
        ("coder", session) => (session, true),
        _ => return None,
    };
    crate::base::auth::is_valid_context_id(session).then_some((session, coder))
}

/// Whether `id` can name a result file (what tool call ids from providers look like).
pub fn is_valid_call_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// A file of a container's folder, for messages.
struct Found<'a> {
    context: &'a str,
    slot: &'a str,
    dir: &'a OwnedFd,
    name: &'a OsStr,
}

impl Found<'_> {
    fn shown(&self, sub: &str) -> String {
        format!("data/ipc/{}/{}/{sub}/{}", self.context, self.slot, self.name.to_string_lossy())
    }
}

/// The daemon's side of file IPC.
#[derive(Debug)]
pub struct Ipc {
    root: PathBuf,
    /// `data/ipc`, opened once: every container folder is reached beneath it.
    root_fd: OwnedFd,
    records: PathBuf,
    rejected: PathBuf,
    ledger_path: PathBuf,
    ledger: Mutex<Ledger>,
    recorded_since_prune: AtomicU64,
    /// The IPC loop's passes: how many began and how many ended, and what wakes it early
    /// ([`Ipc::flush`]).
    passes_begun: AtomicU64,
    passes_ended: tokio::sync::watch::Sender<u64>,
    wake: tokio::sync::Notify,
    /// Whether a container folder gets a memory filesystem of [`SLOT_CAP`] (else the runner
    /// checks the cap).
    filesystem: bool,
    /// `{context folder}/{slot}` → the leases held on it; folders held by none, to let go.
    slots: Mutex<Slots>,
    /// What a result passes before it is recorded (set once the daemon has it).
    redact: std::sync::OnceLock<crate::guard::redact::Redact>,
}

#[derive(Debug, Default)]
struct Slots {
    held: HashMap<String, usize>,
    idle: BTreeSet<String>,
}

/// A tool container's hold on its IPC folder (see the module's text).
#[derive(Debug)]
pub struct Lease {
    ipc: Arc<Ipc>,
    key: String,
    /// The folder to mount at `/ipc`.
    pub path: PathBuf,
    /// The cap the runner must check, when no filesystem holds the folder to it.
    pub checked_cap: Option<u64>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut slots = self.ipc.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = slots.held.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                slots.held.remove(&self.key);
                slots.idle.insert(self.key.clone());
            }
        }
    }
}

impl Ipc {
    /// Opens `data/ipc` and the message ledger; a ledger that does not parse is kept aside,
    /// never lost.
    /// `filesystem`: give each container folder a memory filesystem (the daemon can mount).
    pub fn open(ipc_dir: PathBuf, state_dir: &Path, filesystem: bool) -> std::io::Result<Ipc> {
        let ledger_path = state_dir.join("ipc-messages.json");
        let ledger = state::read_json_or_set_aside(&ledger_path, || Ledger { version: 1, ..Ledger::default() });
        let ipc = Ipc {
            root_fd: shared_dirs::open_trusted(&ipc_dir)?,
            root: ipc_dir,
            records: state_dir.join("tool-results"),
            rejected: state_dir.join("ipc-rejected"),
            ledger_path,
            ledger: Mutex::new(ledger),
            recorded_since_prune: AtomicU64::new(0),
            passes_begun: AtomicU64::new(0),
            passes_ended: tokio::sync::watch::Sender::new(0),
            wake: tokio::sync::Notify::new(),
            filesystem,
            slots: Mutex::default(),
            redact: std::sync::OnceLock::new(),
        };
        // Folders left by an earlier daemon are let go once what they hold is taken; a pooled
        // container's at once (it never served anyone).
        let mut left: BTreeSet<String> =
            ipc.container_folders("", true).into_iter().map(|(folder, slot, _)| format!("{folder}/{slot}")).collect();
        left.extend(ipc.pooled_folders().into_iter().map(|name| format!("{POOL}/{name}")));
        ipc.slots.lock().unwrap_or_else(PoisonError::into_inner).idle = left;
        Ok(ipc)
    }

    /// The IPC folder of a tool container of `session` in `context` (a Coder's when `coder`),
    /// ready to be mounted at `/ipc`, held until the lease drops: the slot is the daemon's
    /// (0755; a memory filesystem of [`SLOT_CAP`] where the daemon can mount), `results/` (and,
    /// unless `coder`, `messages/`) the container's. Whatever a container left in place of
    /// those folders (a link, a file) is removed, never followed.
    pub fn prepare(self: &Arc<Self>, context: &Context, session: &str, coder: bool) -> std::io::Result<Lease> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let lease = self.prepare_slot(&mut slots, &folder_of(context), &slot_name(session, coder), coder)?;
        if coder {
            // A Coder may not message: whatever is there is not a messages folder of ours.
            let slot_dir = shared_dirs::open_dir(&self.root_fd, &lease.key)?;
            if slot_dir.map(|dir| shared_dirs::open_dir(&dir, "messages")).transpose()?.flatten().is_some() {
                tracing::warn!(context = %context, slot = %lease.key, "a Coder's IPC folder has a messages folder; it is never read");
            }
        }
        Ok(lease)
    }

    /// The IPC folder of a pooled tool container, `pool/{name}`, made as a session's tool
    /// container's is: given to the session that claims the container ([`Ipc::adopt`]), let go
    /// when the lease drops unadopted. No pass reads it while it is the pool's.
    pub fn pooled(self: &Arc<Self>, name: &str) -> std::io::Result<Lease> {
        if !crate::base::auth::is_valid_context_id(name) {
            return Err(std::io::Error::other(format!("`{name}` cannot name a pooled IPC folder")));
        }
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        self.prepare_slot(&mut slots, POOL, name, false)
    }

    /// Gives the pooled folder `pooled` to the tool container of `session` in `context` (not a
    /// Coder's), if it has no folder yet: its memory filesystem is mounted in place too (what is
    /// left at the pool's is [`Ipc::let_go_pooled`]'s), or a plain folder renamed, never over
    /// another. None: the slot is there already, and `pooled` is let go. Blocking.
    pub fn adopt(self: &Arc<Self>, pooled: Lease, context: &Context, session: &str) -> std::io::Result<Option<Lease>> {
        let (folder, slot) = (folder_of(context), slot_name(session, false));
        let key = format!("{folder}/{slot}");
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(name) = pooled.key.strip_prefix(&format!("{POOL}/")).map(str::to_string) else { return Ok(None) };
        let pool =
            shared_dirs::open_dir(&self.root_fd, POOL)?.ok_or_else(|| std::io::Error::other("no pool folder"))?;
        let from = shared_dirs::open_dir(&pool, &name)?.ok_or_else(|| std::io::Error::other("no pooled folder"))?;
        let context_dir = shared_dirs::ensure_dir(&self.root_fd, OsStr::new(&folder), Owner::Daemon)?;
        if slots.held.contains_key(&key)
            || slots.idle.contains(&key)
            || shared_dirs::open_dir(&context_dir, &slot)?.is_some()
        {
            return Ok(None);
        }
        // Nothing runs in a pooled container before its claim: a folder that holds anything
        // but its empty results/, messages/ and tasks/ is not handed on (nothing queued in it
        // reaches the session).
        if !Self::as_made(&from)? {
            tracing::warn!(pooled = %name, "a pooled IPC folder is not as it was made; it is not handed on");
            return Ok(None);
        }
        if crate::sandbox::workspace::is_mount_point(&pool, &from)? {
            drop(from);
            let (source, target) = (self.root.join(&pooled.key), self.root.join(&key));
            let made = shared_dirs::ensure_dir(&context_dir, OsStr::new(&slot), Owner::DaemonReadable)?;
            drop(made);
            if let Err(error) = rustix::mount::mount_bind(&source, &target) {
                // silent-ok: the empty folder just made; the error is what matters.
                let _ = rustix::fs::unlinkat(&context_dir, slot.as_str(), rustix::fs::AtFlags::REMOVEDIR);
                return Err(error.into());
            }
        } else {
            drop(from);
            rustix::fs::renameat_with(
                &pool,
                name.as_str(),
                &context_dir,
                slot.as_str(),
                rustix::fs::RenameFlags::NOREPLACE,
            )?;
        }
        // The pool's lease is spent: its folder is gone, nothing of it is let go.
        slots.held.remove(&pooled.key);
        slots.idle.remove(&pooled.key);
        *slots.held.entry(key.clone()).or_default() += 1;
        drop(slots);
        self.wake.notify_one();
        let checked_cap = pooled.checked_cap;
        Ok(Some(Lease { ipc: self.clone(), path: self.root.join(&key), key, checked_cap }))
    }

    /// Whether slot folder `slot` holds only its empty `results/`, `messages/` and `tasks/`.
    fn as_made(slot: &OwnedFd) -> std::io::Result<bool> {
        for entry in shared_dirs::names(slot)? {
            let Some(name) = entry.to_str().filter(|name| ["results", "messages", "tasks"].contains(name)) else {
                return Ok(false);
            };
            let empty = shared_dirs::open_dir(slot, name)?.map(|dir| shared_dirs::names(&dir)).transpose()?;
            if !empty.is_some_and(|names| names.is_empty()) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Lets go of what a session's taking of pooled folder `name` left at the pool's: the
    /// filesystem's mount there (the session's stays) and the empty folder. Blocking.
    pub fn let_go_pooled(&self, name: &str) {
        let left = crate::sandbox::workspace::let_go_mount(&self.root.join(POOL).join(name)).and_then(|()| {
            match shared_dirs::open_dir(&self.root_fd, POOL)? {
                Some(pool) => crate::sandbox::workspace::remove_empty(&pool, name),
                None => Ok(()),
            }
        });
        if let Err(error) = left {
            tracing::warn!(pooled = name, %error, "cannot let go of a pooled IPC folder");
        }
    }

    /// Makes slot `{folder}/{slot}` ready and holds it: the slot is the daemon's (0755; a memory
    /// filesystem of [`SLOT_CAP`] where the daemon can mount), `results/` (and, unless `coder`,
    /// `messages/` and `tasks/`) the container's. Whatever a container left in place of those
    /// folders (a link, a file) is removed, never followed.
    fn prepare_slot(
        self: &Arc<Self>,
        slots: &mut Slots,
        folder: &str,
        slot: &str,
        coder: bool,
    ) -> std::io::Result<Lease> {
        let key = format!("{folder}/{slot}");
        let context_dir = shared_dirs::ensure_dir(&self.root_fd, OsStr::new(folder), Owner::Daemon)?;
        let mut slot_dir = shared_dirs::ensure_dir(&context_dir, OsStr::new(slot), Owner::DaemonReadable)?;
        let mut checked_cap = (!self.filesystem).then_some(SLOT_CAP);
        if self.filesystem && !crate::sandbox::workspace::is_mount_point(&context_dir, &slot_dir)? {
            let path = self.root.join(folder).join(slot);
            match crate::sandbox::workspace::mount_tmpfs(&path, SLOT_CAP) {
                Ok(()) => {
                    slot_dir = shared_dirs::open_dir(&context_dir, slot)?
                        .ok_or_else(|| std::io::Error::other("the mounted IPC folder is not a folder"))?;
                }
                Err(message) => {
                    tracing::warn!(folder = %path.display(), %message, "no filesystem for an IPC folder; the runner checks its cap");
                    checked_cap = Some(SLOT_CAP);
                }
            }
        }
        shared_dirs::ensure_dir(&slot_dir, OsStr::new("results"), Owner::Containers)?;
        if !coder {
            shared_dirs::ensure_dir(&slot_dir, OsStr::new("messages"), Owner::Containers)?;
            shared_dirs::ensure_dir(&slot_dir, OsStr::new("tasks"), Owner::Containers)?;
        }
        *slots.held.entry(key.clone()).or_default() += 1;
        slots.idle.remove(&key);
        // The next pass writes its `system/` files.
        self.wake.notify_one();
        Ok(Lease { ipc: self.clone(), path: self.root.join(&key), key, checked_cap })
    }

    /// The slots containers hold now, each with the context it acts for.
    pub fn held_slots(&self) -> Vec<(String, Context)> {
        let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots
            .held
            .keys()
            .filter_map(|key| {
                let (folder, _) = key.split_once('/')?;
                Some((key.clone(), context_of_folder(folder)?))
            })
            .collect()
    }

    /// Writes `name` into the `system/` folder of slot `key` (the daemon's, which its container
    /// reads and cannot change; written by `system_files.rs`).
    pub fn write_system(&self, key: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let gone = || std::io::Error::new(std::io::ErrorKind::NotFound, format!("no IPC folder {key}"));
        let (folder, slot) = key.split_once('/').ok_or_else(gone)?;
        let context_dir = shared_dirs::open_dir(&self.root_fd, folder)?.ok_or_else(gone)?;
        let slot_dir = shared_dirs::open_dir(&context_dir, slot)?.ok_or_else(gone)?;
        let system = shared_dirs::ensure_dir(&slot_dir, OsStr::new("system"), Owner::DaemonReadable)?;
        shared_dirs::write_readable(&system, name, bytes)
    }

    /// Lets go of every folder no container holds any more: the results left in it are
    /// collected, its filesystem unmounted and the folder removed. Call it after delivering
    /// what the folders queued (the IPC loop does), so nothing queued is lost.
    pub fn sweep(&self) {
        let idle: Vec<String> =
            self.slots.lock().unwrap_or_else(PoisonError::into_inner).idle.iter().cloned().collect();
        for key in idle {
            let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            if slots.held.contains_key(&key) {
                continue;
            }
            let Some((folder, slot)) = key.split_once('/') else { continue };
            if let Err(error) = self.let_go(folder, slot) {
                tracing::warn!(folder = %key, %error, "cannot let an IPC folder go");
            }
            drop(slots);
            self.slots.lock().unwrap_or_else(PoisonError::into_inner).idle.remove(&key);
        }
    }

    /// Lets go of every folder, held or not (at shutdown, once the containers are gone and
    /// what they queued was taken).
    pub fn let_go_all(&self) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let pooled = self.pooled_folders().into_iter().map(|name| (POOL.to_string(), name));
        let folders = self.container_folders("", true).into_iter().map(|(folder, slot, _)| (folder, slot));
        for (folder, slot) in folders.chain(pooled) {
            if let Err(error) = self.let_go(&folder, &slot) {
                tracing::warn!(folder = %format!("{folder}/{slot}"), %error, "cannot let an IPC folder go");
            }
        }
        slots.held.clear();
        slots.idle.clear();
    }

    /// The names of the pooled containers' folders (`pool/{name}`).
    fn pooled_folders(&self) -> Vec<String> {
        let Ok(Some(pool)) = shared_dirs::open_dir(&self.root_fd, POOL) else { return vec![] };
        let names = shared_dirs::names(&pool).unwrap_or_default();
        names.into_iter().filter_map(|name| name.into_string().ok()).collect()
    }

    fn let_go(&self, folder: &str, slot: &str) -> std::io::Result<()> {
        let Some(context_dir) = shared_dirs::open_dir(&self.root_fd, folder)? else { return Ok(()) };
        let Some(slot_dir) = shared_dirs::open_dir(&context_dir, slot)? else { return Ok(()) };
        // A pooled container's folder never held anyone's results.
        let results = if folder == POOL { None } else { shared_dirs::open_dir(&slot_dir, "results")? };
        if let Some(results) = results {
            for name in Self::json_files(&results) {
                self.collect_file(folder, slot, &results, &name);
            }
        }
        if crate::sandbox::workspace::is_mount_point(&context_dir, &slot_dir)? {
            drop(slot_dir);
            let at = self.root.join(folder).join(slot);
            crate::sandbox::workspace::unmount(&at);
            // A pooled folder's filesystem may be a session's too: never removed through a
            // mount that is still there.
            let still = shared_dirs::open_dir(&context_dir, slot)?;
            if still.is_some_and(|dir| crate::sandbox::workspace::is_mount_point(&context_dir, &dir).unwrap_or(true)) {
                return Err(std::io::Error::other(format!("{} is still mounted", at.display())));
            }
        } else {
            drop(slot_dir);
        }
        shared_dirs::remove_tree(&context_dir, OsStr::new(slot))
    }

    fn record_path(&self, folder: &str, call_id: &str) -> PathBuf {
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

    /// Every `(context folder, slot, open folder)` of a container folder named `sub`.
    fn container_folders(&self, sub: &str, coder_too: bool) -> Vec<(String, String, OwnedFd)> {
        let mut found = vec![];
        let contexts = match shared_dirs::names(&self.root_fd) {
            Ok(names) => names,
            Err(error) => {
                tracing::warn!(%error, "cannot list data/ipc");
                return found;
            }
        };
        for context in contexts {
            let Some(context) = context.to_str().filter(|name| context_of_folder(name).is_some()) else { continue };
            let Ok(Some(context_dir)) = shared_dirs::open_dir(&self.root_fd, context) else { continue };
            let Ok(slots) = shared_dirs::names(&context_dir) else { continue };
            for slot in slots {
                let Some(slot) = slot.to_str() else { continue };
                match slot_of(slot) {
                    Some((_, coder)) if coder_too || !coder => {}
                    _ => continue,
                }
                let relative = if sub.is_empty() { slot.to_string() } else { format!("{slot}/{sub}") };
                if let Ok(Some(dir)) = shared_dirs::open_dir(&context_dir, relative) {
                    found.push((context.to_string(), slot.to_string(), dir));
                }
            }
        }
        found
    }

    /// The `.json` files of a container folder, sorted (temp files start with `.`).
    fn json_files(dir: &OwnedFd) -> Vec<OsString> {
        let mut names: Vec<OsString> = shared_dirs::names(dir)
            .unwrap_or_default() // silent-ok: a folder that cannot be listed has nothing to collect now
            .into_iter()
            .filter(|name| {
                let name = name.to_string_lossy();
                !name.starts_with('.') && name.ends_with(".json")
            })
            .collect();
        names.sort();
        names
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
    fn reject(&self, found: &Found<'_>, sub: &str, reason: &str) {
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
    fn prune_rejected(&self, folder: &str) {
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
    fn collect_file(&self, folder: &str, slot: &str, dir: &OwnedFd, name: &OsStr) -> bool {
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

    /// Notes that the IPC loop begins a pass over the folders.
    pub fn pass_begins(&self) {
        self.passes_begun.fetch_add(1, Ordering::SeqCst);
    }

    /// Notes that the IPC loop ended a pass.
    pub fn pass_ended(&self) {
        self.passes_ended.send_modify(|ended| *ended += 1);
    }

    /// Waits for the IPC loop to wake early.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Has the IPC loop pass over the folders now, and waits (up to `within`) until a pass that
    /// began after this call has ended: what a container queued before is then delivered (a
    /// `message` reaches the channels before the turn that sent it ends).
    pub async fn flush(&self, within: std::time::Duration) {
        let target = self.passes_begun.load(Ordering::SeqCst) + 1;
        let mut ended = self.passes_ended.subscribe();
        self.wake.notify_one();
        // silent-ok: past `within` the next regular pass delivers it.
        let _ = tokio::time::timeout(within, ended.wait_for(|ended| *ended >= target)).await;
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
            if let Err(error) = std::fs::remove_file(path) {
                tracing::warn!(file = %path.display(), %error, "cannot prune a recorded tool result");
            }
        }
    }

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

    fn deliver_message(
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
    fn read_request<T: serde::de::DeserializeOwned>(
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

    fn remove(&self, found: &Found<'_>, sub: &str) {
        if let Err(error) = shared_dirs::remove(found.dir, found.name) {
            tracing::warn!(file = %found.shown(sub), %error, "cannot remove a collected IPC file");
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

    fn open(temp: &tempfile::TempDir) -> (Arc<Ipc>, PathBuf, PathBuf) {
        let (ipc_dir, state_dir) = (temp.path().join("ipc"), temp.path().join("state"));
        std::fs::create_dir_all(&state_dir).expect("state");
        std::fs::create_dir_all(&ipc_dir).expect("ipc");
        (Arc::new(Ipc::open(ipc_dir.clone(), &state_dir, false).expect("open")), ipc_dir, state_dir)
    }

    fn workspaces(temp: &tempfile::TempDir) -> crate::sandbox::workspace::Workspaces {
        std::fs::create_dir_all(temp.path().join("sessions")).expect("sessions");
        crate::sandbox::workspace::Workspaces::new(
            temp.path().join("sessions"),
            1 << 20,
            crate::base::config::WorkspaceLimit::Checked,
            1,
        )
    }

    #[test]
    fn a_messages_files_are_kept_in_its_session_and_named_by_its_event_and_a_bad_one_refuses_it() {
        let temp = tempfile::tempdir().expect("tempdir");
        let (ipc, _, state_dir) = open(&temp);
        let workspaces = workspaces(&temp);
        let alice = Context::user("alice");
        let lease = ipc.prepare(&alice, "s1", false).expect("prepare");
        let messages = lease.path.join("messages");
        write(&messages.join("m1.files/chart.png"), "\u{89}PNG");
        write(
            &messages.join("m1.json"),
            r#"{"id":"m1","content":"the chart","files":["chart.png"],"correlationId":"c-4f2a"}"#,
        );
        write(&messages.join("m2.json"), r#"{"id":"m2","content":"a missing file","files":["gone.pdf"]}"#);
        write(&messages.join("m3.files/x"), "x");
        std::os::unix::fs::symlink("/etc/hostname", messages.join("m3.files/host.txt")).expect("link");
        write(&messages.join("m3.json"), r#"{"id":"m3","content":"a link","files":["host.txt"]}"#);
        let bus = crate::store::events::EventBus::default();
        let mut events = bus.subscribe();
        assert_eq!(ipc.deliver_messages(&bus, &workspaces, &mut BTreeMap::new()), 1);
        let (_, event) = events.try_recv().expect("one event");
        assert_eq!(event.correlation_id, "c-4f2a", "the delivery names the request the message came from");
        let crate::store::events::Kind::Message { content, attachments, .. } = event.kind else { panic!("a message") };
        assert_eq!(content, "the chart");
        assert_eq!(attachments.len(), 1);
        assert_eq!((attachments[0].path.as_str(), attachments[0].session.as_str()), ("sent/chart.png", "s1"));
        assert_eq!(workspaces.sent("s1", "chart.png", 100).expect("read").as_deref(), Some("\u{89}PNG".as_bytes()));
        assert!(events.try_recv().is_err(), "the others were refused");
        for gone in ["m1.json", "m1.files", "m2.json", "m3.json", "m3.files"] {
            assert!(!messages.join(gone).exists(), "{gone} was collected");
        }
        let rejected = std::fs::read_dir(state_dir.join("ipc-rejected/user-alice")).expect("rejected").count();
        assert!(rejected >= 1, "the refused messages were set aside");
    }

    #[test]
    fn a_pooled_folder_is_nobodys_until_a_session_takes_it_and_never_replaces_a_slot() {
        let temp = tempfile::tempdir().expect("tempdir");
        let (ipc, ipc_dir, _) = open(&temp);
        let workspaces = workspaces(&temp);
        let bus = crate::store::events::EventBus::default();
        let pooled = ipc.pooled("p1").expect("pooled");
        assert_eq!(pooled.path, ipc_dir.join("pool/p1"));
        // No pass reads the pool's folders, and one that holds anything is not handed on.
        write(&pooled.path.join("messages/m1.json"), r#"{"id":"m1","content":"nobody's"}"#);
        assert_eq!(ipc.deliver_messages(&bus, &workspaces, &mut BTreeMap::new()), 0);
        let alice = Context::user("alice");
        assert!(ipc.adopt(pooled, &alice, "s0").expect("adopt").is_none());
        ipc.sweep();
        assert!(!ipc_dir.join("pool/p1").exists() && !ipc_dir.join("user-alice/tools-s0").exists());
        let pooled = ipc.pooled("p1").expect("pooled");

        let lease = ipc.adopt(pooled, &alice, "s1").expect("adopt").expect("a new session takes it");
        assert_eq!(lease.path, ipc_dir.join("user-alice/tools-s1"));
        assert!(!ipc_dir.join("pool/p1").exists());
        assert_eq!(ipc.held_slots(), vec![("user-alice/tools-s1".to_string(), alice.clone())]);
        write(&lease.path.join("messages/m2.json"), r#"{"id":"m2","content":"hers"}"#);
        let mut events = bus.subscribe();
        assert_eq!(ipc.deliver_messages(&bus, &workspaces, &mut BTreeMap::new()), 1);
        assert_eq!(events.try_recv().expect("delivered").1.session, "s1");

        // A slot that is there stays its session's: the pooled folder is let go instead.
        let second = ipc.pooled("p2").expect("pooled");
        assert!(ipc.adopt(second, &alice, "s1").expect("adopt").is_none());
        ipc.sweep();
        assert!(!ipc_dir.join("pool/p2").exists());
        assert!(lease.path.join("results").is_dir());
        assert!(ipc.pooled("../p3").is_err());
    }

    #[test]
    fn results_are_collected_once_and_survive_a_restart() {
        let temp = tempfile::tempdir().expect("tempdir");
        let (ipc, ipc_dir, state_dir) = open(&temp);
        let alice = Context::user("alice");
        let lease = ipc.prepare(&alice, "s1", true).expect("prepare");
        assert_eq!(lease.checked_cap, Some(SLOT_CAP), "without a filesystem the runner checks the cap");
        let results = lease.path.join("results");
        let file = results.join("toolu_1.json");
        write(&file, r#"{"callId":"toolu_1","tool":"exec","content":"exit code 0","isError":false,"durationMs":5}"#);
        write(&results.join("bad.json"), "{not json");
        write(&results.join("other.json"), r#"{"callId":"toolu_9","tool":"x","content":"","isError":false}"#);

        assert_eq!(ipc.collect_all(), 1);
        assert!(!file.exists(), "a collected file is removed");
        let rejected = state_dir.join("ipc-rejected/user-alice/coder-s1");
        assert!(rejected.join("bad.json").exists());
        assert!(rejected.join("other.json").exists(), "a file naming another call is rejected");
        assert_eq!(ipc.recorded(&alice, "toolu_1").map(|r| r.content).as_deref(), Some("exit code 0"));
        assert!(ipc.recorded(&Context::user("bob"), "toolu_1").is_none(), "the folder is the authority");

        // A file recorded but not removed before a crash is only removed the next time.
        write(&file, r#"{"callId":"toolu_1","tool":"exec","content":"a second run","isError":false}"#);
        let reopened = Ipc::open(ipc_dir, &state_dir, false).expect("reopen");
        assert_eq!(reopened.collect_all(), 1);
        assert_eq!(reopened.recorded(&alice, "toolu_1").map(|r| r.content).as_deref(), Some("exit code 0"));
        assert!(!file.exists());
    }

    #[test]
    fn links_a_container_leaves_are_never_followed() {
        let temp = tempfile::tempdir().expect("tempdir");
        let (ipc, ipc_dir, state_dir) = open(&temp);
        let host = temp.path().join("host");
        write(&host.join("keep.json"), r#"{"callId":"keep","tool":"x","content":"","isError":false}"#);
        let alice = Context::user("alice");
        let lease = ipc.prepare(&alice, "s1", false).expect("prepare");
        let slot = lease.path.clone();
        for sub in ["results", "messages"] {
            std::fs::remove_dir(slot.join(sub)).expect("rmdir");
            std::os::unix::fs::symlink(&host, slot.join(sub)).expect("symlink");
        }
        assert_eq!(ipc.collect_all(), 0);
        let bus = crate::store::events::EventBus::default();
        assert_eq!(ipc.deliver_messages(&bus, &workspaces(&temp), &mut BTreeMap::new()), 0);
        assert!(host.join("keep.json").exists(), "nothing was moved out of the link's target");
        assert!(!state_dir.join("ipc-rejected").exists());
        // The next container start makes real folders again.
        let _again = ipc.prepare(&alice, "s1", false).expect("prepare again");
        for sub in ["results", "messages"] {
            assert!(std::fs::symlink_metadata(slot.join(sub)).expect("stat").is_dir(), "{sub}");
        }
        assert!(host.join("keep.json").exists());
        assert!(ipc_dir.join("user-alice").is_dir());
    }

    #[test]
    fn only_a_sessions_tool_container_delivers_messages_to_its_own_context_and_session() {
        let temp = tempfile::tempdir().expect("tempdir");
        let (ipc, _, _) = open(&temp);
        let alice = Context::user("alice");
        let (tools_lease, coder_lease) =
            (ipc.prepare(&alice, "s1", false).expect("prepare"), ipc.prepare(&alice, "s1", true).expect("prepare"));
        let (tools, coder) = (tools_lease.path.clone(), coder_lease.path.clone());
        assert!(!coder.join("messages").exists(), "a Coder gets no messages folder");
        write(&coder.join("messages/m1.json"), r#"{"id":"m1","content":"from the coder"}"#);
        write(&tools.join("messages/m2.json"), r#"{"id":"m2","content":"hello","sessionId":"s-other"}"#);
        let bus = crate::store::events::EventBus::default();
        let mut events = bus.subscribe();
        assert_eq!(ipc.deliver_messages(&bus, &workspaces(&temp), &mut BTreeMap::new()), 1);
        let (context, event) = events.try_recv().expect("one event");
        assert_eq!((context, event.session.as_str()), (alice, "s1"));
        assert!(events.try_recv().is_err(), "nothing from the coder's folder");
        assert!(coder.join("messages/m1.json").exists());
    }

    #[test]
    fn task_requests_of_a_sessions_tool_container_schedule_once_for_its_own_context() {
        let temp = tempfile::tempdir().expect("tempdir");
        let (ipc, _, state_dir) = open(&temp);
        let alice = Context::user("alice");
        let (tools_lease, coder_lease) =
            (ipc.prepare(&alice, "s1", false).expect("prepare"), ipc.prepare(&alice, "s1", true).expect("prepare"));
        let (tools, coder) = (tools_lease.path.clone(), coder_lease.path.clone());
        assert!(!coder.join("tasks").exists(), "a Coder gets no tasks folder");
        let settings = crate::drive::scheduler::Settings {
            timezone: "UTC".into(),
            max_failures: 5,
            poll: std::time::Duration::from_secs(60),
            grace: std::time::Duration::from_secs(90),
        };
        let scheduler =
            crate::drive::scheduler::Scheduler::open(&state_dir, settings, crate::drive::scheduler::Clock::System)
                .expect("scheduler");
        let inbox = crate::store::inbox::Inbox::new(state_dir.join("inbox"));
        write(&tools.join("tasks/t1.json"), r#"{"id":"t1","prompt":"water the plants","cron":"0 9 * * 1"}"#);
        write(&tools.join("tasks/t2.json"), r#"{"id":"t2","prompt":"x","cron":"0 25 * * *"}"#);
        write(&tools.join("tasks/t3.json"), r#"{"id":"other","prompt":"x","cron":"0 9 * * *"}"#);
        let take = |ipc: &Ipc| {
            ipc.take_task_requests(&mut |context, _, request| {
                crate::drive::scheduler::schedule_requested(&scheduler, &inbox, context, request)
            })
        };
        assert_eq!(take(&ipc), 1);
        let listed = scheduler.list(&crate::drive::scheduler::Filter::default());
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].user_id.as_str(), listed[0].prompt.as_str()), ("alice", "water the plants"));
        let told = inbox.list(&alice, true, false).expect("inbox");
        assert_eq!(told.len(), 1, "the refused request is told");
        assert!(told[0].content.contains("the hour field `25`"), "{}", told[0].content);
        // The same request again (a crash before its file went) schedules nothing new.
        write(&tools.join("tasks/t1.json"), r#"{"id":"t1","prompt":"water the plants","cron":"0 9 * * 1"}"#);
        assert_eq!(take(&ipc), 1);
        assert_eq!(scheduler.count(), 1);
        assert!(std::fs::read_dir(tools.join("tasks")).expect("tasks").next().is_none(), "every file handled");
        // Bob's request with the same id is bob's own task.
        let bob_lease = ipc.prepare(&Context::user("bob"), "s2", false).expect("prepare");
        let bob = bob_lease.path.clone();
        write(&bob.join("tasks/t1.json"), r#"{"id":"t1","prompt":"feed the cat","cron":"0 8 * * *"}"#);
        assert_eq!(take(&ipc), 1);
        let bobs = scheduler
            .list(&crate::drive::scheduler::Filter { context: Some(Context::user("bob")), ..Default::default() });
        assert_eq!(bobs.iter().map(|task| task.prompt.as_str()).collect::<Vec<_>>(), ["feed the cat"]);
    }

    #[test]
    fn a_folder_no_container_holds_goes_once_what_it_queued_was_taken() {
        let temp = tempfile::tempdir().expect("tempdir");
        let (ipc, ipc_dir, state_dir) = open(&temp);
        let alice = Context::user("alice");
        let first = ipc.prepare(&alice, "s1", false).expect("prepare");
        let second = ipc.prepare(&alice, "s1", false).expect("a second container of the session");
        let slot = first.path.clone();
        write(
            &slot.join("results/toolu_7.json"),
            r#"{"callId":"toolu_7","tool":"x","content":"late","isError":false}"#,
        );
        write(&slot.join("results/junk/deep/file.bin"), "junk");
        // A big malformed file is deleted, not kept.
        write(&slot.join("results/big.json"), &"x".repeat(2 << 20));
        drop(first);
        ipc.sweep();
        assert!(slot.is_dir(), "a folder still held stays");
        drop(second);
        ipc.sweep();
        assert!(!slot.exists(), "the folder went");
        assert_eq!(ipc.recorded(&alice, "toolu_7").map(|r| r.content).as_deref(), Some("late"), "its result first");
        assert!(!state_dir.join("ipc-rejected/user-alice/tools-s1/big.json").exists());
        // Folders left by an earlier daemon go at its first sweep.
        let left = ipc.prepare(&alice, "s2", true).expect("prepare");
        std::mem::forget(left);
        let reopened = Ipc::open(ipc_dir.clone(), &state_dir, false).expect("reopen");
        reopened.sweep();
        assert!(!ipc_dir.join("user-alice/coder-s2").exists());
    }

    #[test]
    fn set_aside_files_are_kept_to_a_hundred_a_context() {
        let temp = tempfile::tempdir().expect("tempdir");
        let (ipc, _, state_dir) = open(&temp);
        let lease = ipc.prepare(&Context::user("alice"), "s1", true).expect("prepare");
        for n in 0..130 {
            write(&lease.path.join(format!("results/bad{n}.json")), "{");
        }
        ipc.collect_all();
        let kept = std::fs::read_dir(state_dir.join("ipc-rejected/user-alice/coder-s1")).expect("kept").count();
        assert_eq!(kept, KEPT_REJECTED);
    }

    #[test]
    fn call_ids_are_file_names() {
        assert!(is_valid_call_id("toolu_01A09q90qw90lq917835lq9"));
        assert!(is_valid_call_id("call_abc-123"));
        assert!(!is_valid_call_id("../x"));
        assert!(!is_valid_call_id(""));
        assert!(!is_valid_call_id(&"a".repeat(129)));
        assert_eq!(slot_of("tools-s-1.x"), Some(("s-1.x", false)));
        assert_eq!(slot_of("coder-s1"), Some(("s1", true)));
        assert_eq!(slot_of("results"), None);
        assert_eq!(slot_of("tools-.."), None);
    }
}
