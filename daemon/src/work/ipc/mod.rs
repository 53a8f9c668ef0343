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
//! reason in the log (at most `MAX_REJECTED_BYTES` a file and `KEPT_REJECTED` files a
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

use std::collections::{BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::base::auth::Context;
use crate::base::datadir::folder_of;
use crate::base::state::{self, StateError};
use crate::sandbox::shared_dirs::{self, Owner};

mod messages;
mod results;
#[cfg(test)]
mod tests;

use messages::Ledger;
pub use messages::{TaskFile, MESSAGES_PER_MINUTE};
pub use results::ToolAnswer;

/// Results and message ids kept per context for agents that ask again.
const KEPT_PER_CONTEXT: usize = 500;
/// What one container's IPC folder may hold.
pub const SLOT_CAP: u64 = 16 << 20;
/// The folder of the pooled tool containers' slots (no context's folder: those are
/// `user-{id}` and `group-{id}`).
const POOL: &str = "pool";

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

    fn remove(&self, found: &Found<'_>, sub: &str) {
        if let Err(error) = shared_dirs::remove(found.dir, found.name) {
            tracing::warn!(file = %found.shown(sub), %error, "cannot remove a collected IPC file");
        }
    }

    fn save(&self, ledger: &Ledger) -> Result<(), StateError> {
        state::write_json(&self.ledger_path, ledger)
    }
}
