//! Keeps each context's heartbeat tasks in step with its `HEARTBEAT.md`: all of them when the
//! daemon starts, then the one that changed, on inotify's word (`notify`), within moments of
//! the edit; a slow rescan catches what a watcher can miss (an editor's rename dance on a
//! network file system).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::Digest as _;
use tokio_util::sync::CancellationToken;

use super::heartbeat;
use super::Scheduler;
use crate::base::auth::Context;
use crate::base::datadir::DataDir;
use crate::base::lifetime::{Subsystem, Work};

pub const FILE: &str = "HEARTBEAT.md";

/// What the watch works with: the context folders it reads and the scheduler it updates.
#[derive(Debug, Clone)]
pub struct Heartbeats {
    pub data_dir: DataDir,
    pub scheduler: Arc<Scheduler>,
}
/// Between two full rescans.
const RESCAN: Duration = Duration::from_secs(300);
/// Edits arriving together (an editor writes, renames, touches) are read once.
const SETTLE: Duration = Duration::from_millis(100);

/// The context a `users/{id}/HEARTBEAT.md` or `groups/{id}/HEARTBEAT.md` belongs to; also
/// that of a context folder itself (`users/{id}`): a folder made with its HEARTBEAT.md inside
/// may hold the file before the watcher sees into it.
fn context_of(root: &Path, path: &Path) -> Option<Context> {
    let relative = path.strip_prefix(root).ok()?;
    let parts: Vec<&str> = relative.iter().filter_map(|part| part.to_str()).collect();
    let (kind, id) = match parts.as_slice() {
        [kind, id, file] if *file == FILE => (kind, id),
        [kind, id] => (kind, id),
        _ => return None,
    };
    crate::base::datadir::context_in(kind, id)
}

/// Reads `context`'s HEARTBEAT.md and brings its heartbeat tasks in line with it.
pub fn sync_context(heartbeats: &Heartbeats, context: &Context) {
    let path = heartbeats.data_dir.context_dir(context).join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot read a HEARTBEAT.md; its heartbeats stay as they were");
            return;
        }
    };
    let hash = format!("sha256:{:x}", sha2::Sha256::digest(text.as_bytes()));
    if heartbeats.scheduler.heartbeat_hash(context).as_deref() == Some(hash.as_str()) {
        return;
    }
    let parsed = heartbeat::parse(&text);
    for warning in &parsed.warnings {
        tracing::warn!(file = %path.display(), line = warning.line, "{}; the section is skipped", warning.message);
    }
    match heartbeats.scheduler.sync_heartbeats(context, &hash, &parsed.sections, &mut super::schedule::random_below) {
        Ok(changes) => tracing::info!(
            context = %context,
            added = changes.added,
            updated = changes.updated,
            removed = changes.removed,
            kept = changes.kept,
            skipped = parsed.warnings.len(),
            "heartbeats in step with HEARTBEAT.md"
        ),
        Err(error) => {
            tracing::error!(context = %context, error = %baaaht_proto::error_chain(&error), "cannot update heartbeats")
        }
    }
}

/// Every context that has a HEARTBEAT.md or had heartbeats.
fn all_contexts(heartbeats: &Heartbeats) -> BTreeSet<Context> {
    let mut contexts = BTreeSet::new();
    for kind in crate::base::datadir::CONTEXT_KINDS {
        let Ok(entries) = std::fs::read_dir(heartbeats.data_dir.contexts_dir(kind)) else { continue };
        for entry in entries.flatten() {
            let Some(id) = entry.file_name().to_str().map(str::to_string) else { continue };
            if crate::base::auth::is_valid_context_id(&id) && entry.path().join(FILE).is_file() {
                contexts.insert(Context { kind, id });
            }
        }
    }
    let filter = super::Filter { kind: Some(super::TaskKind::Heartbeat), ..super::Filter::default() };
    contexts.extend(heartbeats.scheduler.list(&filter).iter().filter_map(super::TaskRecord::context));
    contexts
}

/// Watches every HEARTBEAT.md until `cancel`; `scanned` is told once every one was read at
/// start.
pub async fn watch(heartbeats: Heartbeats, cancel: CancellationToken, scanned: tokio::sync::oneshot::Sender<()>) {
    use notify::Watcher as _;
    let root: PathBuf = heartbeats.data_dir.root().to_path_buf();
    let (sender, mut changed) = tokio::sync::mpsc::channel::<PathBuf>(1024);
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        let folder_made = matches!(event.kind, notify::EventKind::Create(_));
        for path in event.paths {
            if path.file_name().is_some_and(|name| name == FILE) || folder_made {
                // silent-ok: when the queue is full a rescan is coming anyway.
                drop(sender.try_send(path));
            }
        }
    });
    let mut watcher = match watcher {
        Ok(watcher) => Some(watcher),
        Err(error) => {
            tracing::error!(%error, "cannot watch HEARTBEAT.md files; edits are picked up by the rescan every 5 minutes");
            None
        }
    };
    if let Some(watcher) = watcher.as_mut() {
        for kind in crate::base::datadir::CONTEXT_KINDS {
            let folder = root.join(crate::base::datadir::context_folder(kind));
            if let Err(error) = std::fs::create_dir_all(&folder) {
                tracing::warn!(folder = %folder.display(), %error, "cannot create a folder to watch");
            }
            if let Err(error) = watcher.watch(&folder, notify::RecursiveMode::Recursive) {
                tracing::error!(folder = %folder.display(), %error, "cannot watch for HEARTBEAT.md edits");
            }
        }
    }
    // After the watch is set, so that no edit falls in between.
    let rescan = |heartbeats: &Heartbeats| {
        for context in all_contexts(heartbeats) {
            sync_context(heartbeats, &context);
        }
    };
    rescan(&heartbeats);
    // silent-ok: a daemon that stopped waiting has nothing to be told.
    let _ = scanned.send(());
    loop {
        let first = tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(RESCAN) => {
                rescan(&heartbeats);
                continue;
            }
            path = changed.recv() => match path {
                Some(path) => path,
                None => return,
            },
        };
        tokio::time::sleep(SETTLE).await;
        let mut contexts: BTreeSet<Context> = context_of(&root, &first).into_iter().collect();
        while let Ok(path) = changed.try_recv() {
            contexts.extend(context_of(&root, &path));
        }
        for context in contexts {
            sync_context(&heartbeats, &context);
        }
    }
}

/// The watch of every HEARTBEAT.md ([`watch`]) as a subsystem; `scanned` is told once every one
/// was read at start.
#[derive(Debug)]
pub struct Watch {
    pub heartbeats: Heartbeats,
    pub scanned: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl Subsystem for Watch {
    fn name(&self) -> &'static str {
        "heartbeats"
    }

    fn run_until(self: Arc<Self>, shutdown: CancellationToken) -> Work {
        let scanned = self.scanned.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        Box::pin(async move {
            if let Some(scanned) = scanned {
                watch(self.heartbeats.clone(), shutdown, scanned).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_contexts_own_heartbeat_file_counts() {
        let root = Path::new("/data");
        assert_eq!(context_of(root, Path::new("/data/users/alice/HEARTBEAT.md")), Some(Context::user("alice")));
        assert_eq!(context_of(root, Path::new("/data/groups/family/HEARTBEAT.md")), Some(Context::group("family")));
        assert_eq!(context_of(root, Path::new("/data/users/alice/memory/HEARTBEAT.md")), None);
        assert_eq!(context_of(root, Path::new("/data/sessions/s-1/HEARTBEAT.md")), None);
        assert_eq!(context_of(root, Path::new("/data/users/../HEARTBEAT.md")), None);
        assert_eq!(context_of(root, Path::new("/data/users/bob")), Some(Context::user("bob")), "a new folder");
        assert_eq!(context_of(root, Path::new("/data/users/bob/USER.md")), None);
    }
}
