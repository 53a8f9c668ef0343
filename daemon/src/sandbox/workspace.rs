//! Session workspaces: `sessions/{id}/data`, mounted at `/workspace` in the session's tool
//! containers, each capped at the tool role's `disk` limit (`container.resource_limits.disk`,
//! or `container.role_limits.tool.disk`).
//!
//! Where the daemon can mount (root, in the host's mount namespace, so that the engine sees
//! the mount), a workspace is a filesystem of its own: a sparse ext4 image
//! `sessions/{id}/workspace.img` of the cap's size, loop-mounted on `data` while the session has
//! a tool container. A write past the cap then fails in the container with "No space left on
//! device", and the host's disk holds at most the cap ([`Enforcement::Filesystem`]). Elsewhere,
//! e.g. under the shipped systemd unit, which runs the daemon unprivileged, the tool runner
//! adds up the workspace after each call, fails a call that took it past the cap and removes
//! the files that call wrote ([`Enforcement::Checked`]). A session whose plain folder already
//! holds files (made before workspaces had a filesystem) keeps its folder, checked.
//!
//! Every folder here is opened without following links ([`crate::sandbox::shared_dirs`]); `data` is
//! the container's, its parent `sessions/{id}` only the daemon's.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};

use crate::base::config::WorkspaceLimit;
use crate::sandbox::shared_dirs::{self, Owner};

use crate::base::lifetime::{Subsystem, Work};

/// The folder beside a session's `data/` where the daemon keeps the pictures shared in it.
/// What the daemon keeps of a shared file, beside the workspace a container can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// A picture shown to the models.
    Picture,
    /// A recording heard as a voice note.
    Recording,
}

impl Kept {
    fn folder(self) -> &'static str {
        match self {
            Kept::Picture => "pictures",
            Kept::Recording => "recordings",
        }
    }
}

/// The folder beside a session's `data/` where the daemon keeps the files agents sent to people.
pub const SENT: &str = "sent";
/// The browser profiles of a session's people, beside `data/` (`browser/{person}`): mounted
/// into that person's browser container only, never into another tool's.
pub const BROWSER_PROFILES: &str = "browser";

/// The image's file name in `sessions/{id}/`.
pub const IMAGE: &str = "workspace.img";
/// The most entries of a workspace looked at to find what a command changed.
const MOST_WALKED: usize = 20_000;

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("cannot prepare the session's data folder {}", path.display())]
    Folder {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The why is said in the message and is no source: a chain printed would say it twice.
    #[error("cannot {action} the workspace image {}: {why}", path.display())]
    Image { action: &'static str, path: PathBuf, why: MountError },
    #[error(
        "{0} conversations have their workspace in use at once, the most this host allows; try again when one goes idle"
    )]
    TooMany(usize),
}

/// Why the daemon cannot mount here, or a mount tool (`mount`, `umount`, `mkfs.ext4`) failed.
///
/// Each message carries its cause's text, so none is a `source` (a chain would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("the daemon does not run as root")]
    NotRoot,
    #[error("cannot read /proc/self/ns/mnt: {0}")]
    Namespace(std::io::Error),
    #[error("the daemon runs in a mount namespace of its own, which the engine does not see")]
    OwnNamespace,
    #[error("`{0}` is not installed")]
    Missing(&'static str),
    #[error("cannot run {program}: {error}")]
    Spawn { program: String, error: std::io::Error },
    /// The tool ran and failed: its exit status and what it wrote to stderr.
    #[error("{program} {status}: {stderr}")]
    Failed { program: String, status: std::process::ExitStatus, stderr: String },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// How a workspace's cap is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    /// A loop-mounted filesystem of the cap's size: writes past it fail.
    Filesystem,
    /// The runner checks after each call (the daemon cannot mount here).
    Checked,
}

impl std::fmt::Display for Enforcement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Enforcement::Filesystem => "a filesystem of its own (loop-mounted ext4)",
            Enforcement::Checked => "checked by the tool runner after each call",
        })
    }
}

/// The folder in `sessions/` of the pooled tool containers' workspaces (no session id has an
/// `@`).
const POOL: &str = "@pool";

/// A workspace made for a pooled tool container ([`Workspaces::pooled`]): removed when
/// dropped, unless a session adopted it.
#[derive(Debug)]
pub struct PooledWorkspace {
    workspaces: Arc<Workspaces>,
    name: Option<String>,
    pub prepared: Prepared,
}

impl Drop for PooledWorkspace {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            self.workspaces.discard_pooled(&name);
        }
    }
}

/// A workspace ready to be mounted into a tool container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    pub path: PathBuf,
    /// The cap the runner must check, when no filesystem enforces it.
    pub checked_cap: Option<u64>,
}

/// Mounted workspaces and how many tool containers use each.
#[derive(Debug, Default)]
struct Mounted {
    users: HashMap<String, usize>,
}

/// The workspaces of every session.
#[derive(Debug)]
pub struct Workspaces {
    sessions: PathBuf,
    cap: u64,
    /// Filesystems mounted at once (each a loop device) at most.
    max_mounted: usize,
    limit: WorkspaceLimit,
    enforcement: Enforcement,
    mounted: Mutex<Mounted>,
}

impl Workspaces {
    /// `sessions_dir` is the data dir's `sessions/`; `cap` the tool role's disk limit; at most
    /// `max_mounted` filesystems are mounted at once.
    pub fn new(sessions_dir: PathBuf, cap: u64, limit: WorkspaceLimit, max_mounted: usize) -> Workspaces {
        let enforcement = match limit {
            WorkspaceLimit::Checked => Enforcement::Checked,
            WorkspaceLimit::Filesystem => Enforcement::Filesystem,
            WorkspaceLimit::Auto => match can_mount() {
                Ok(()) => Enforcement::Filesystem,
                Err(why) => {
                    let why = why.to_string();
                    tracing::info!(why, "session workspaces are checked by the tool runner after each call");
                    Enforcement::Checked
                }
            },
        };
        tracing::info!(cap_bytes = cap, enforcement = %enforcement, "session workspace cap");
        Workspaces { sessions: sessions_dir, cap, max_mounted, limit, enforcement, mounted: Mutex::default() }
    }

    pub fn enforcement(&self) -> Enforcement {
        self.enforcement
    }

    pub fn cap(&self) -> u64 {
        self.cap
    }

    fn mounted(&self) -> std::sync::MutexGuard<'_, Mounted> {
        self.mounted.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `session`'s workspace ready for one more tool container (mounting its filesystem
    /// if this is the first); each call is matched by one [`Workspaces::release`]. Blocking.
    pub fn acquire(&self, session: &str) -> Result<Prepared, WorkspaceError> {
        // One at a time: two containers of a session must not both mount it.
        let mut mounted = self.mounted();
        let folder_error = |source| WorkspaceError::Folder { path: self.sessions.clone(), source };
        std::fs::create_dir_all(&self.sessions).map_err(folder_error)?;
        let sessions = shared_dirs::open_trusted(&self.sessions).map_err(folder_error)?;
        self.prepare(&mut mounted, &sessions, Path::new(session))
    }

    /// Makes the workspace `{key}/data` (in `sessions`, the folder of [`Workspaces::sessions`])
    /// ready for one more container, counted under `key`.
    fn prepare(&self, mounted: &mut Mounted, sessions: &OwnedFd, key: &Path) -> Result<Prepared, WorkspaceError> {
        let session_path = self.sessions.join(key);
        let path = session_path.join("data");
        let folder_error = |source| WorkspaceError::Folder { path: path.clone(), source };
        let mut session_dir = sessions.try_clone().map_err(folder_error)?;
        for part in key.iter() {
            session_dir = shared_dirs::ensure_dir(&session_dir, part, Owner::Daemon).map_err(folder_error)?;
        }
        let data =
            shared_dirs::ensure_dir(&session_dir, OsStr::new("data"), Owner::Containers).map_err(folder_error)?;
        let checked = Prepared { path: path.clone(), checked_cap: Some(self.cap) };
        if self.enforcement == Enforcement::Checked {
            return Ok(checked);
        }
        let session = key.to_string_lossy().into_owned();
        if let Some(users) = mounted.users.get_mut(&session) {
            *users += 1;
            return Ok(Prepared { path, checked_cap: None });
        }
        if !is_mount_point(&session_dir, &data).map_err(folder_error)? {
            if mounted.users.len() >= self.max_mounted {
                return Err(WorkspaceError::TooMany(self.max_mounted));
            }
            let image = session_path.join(IMAGE);
            let fresh = !image.exists();
            if fresh {
                let empty = shared_dirs::names(&data).map_err(folder_error)?.is_empty();
                if !empty {
                    // Files from before workspaces had a filesystem stay where they are.
                    tracing::info!(session, "this session's workspace predates its filesystem; its cap is checked");
                    return Ok(checked);
                }
                make_image(&image, self.cap)?;
            }
            match mount(&image, &path) {
                Ok(()) => {}
                Err(error) if fresh && self.limit == WorkspaceLimit::Auto => {
                    // Nothing is in the new image yet: the runner's check does instead.
                    tracing::warn!(session, %error, "no workspace filesystem; its cap is checked by the tool runner");
                    // silent-ok: an unused image only takes its metadata's blocks.
                    let _ = std::fs::remove_file(&image);
                    return Ok(checked);
                }
                Err(error) => return Err(error),
            }
            let root = shared_dirs::open_dir(&session_dir, "data")
                .map_err(folder_error)?
                .ok_or_else(|| folder_error(std::io::Error::other("the mounted workspace is not a folder")))?;
            shared_dirs::hand_over(&root).map_err(folder_error)?;
            // mkfs's lost+found would only puzzle the agents.
            // silent-ok: it is gone already, or holds something fsck put there.
            let _ = rustix::fs::unlinkat(&root, "lost+found", rustix::fs::AtFlags::REMOVEDIR);
            tracing::info!(session, cap_bytes = self.cap, "workspace filesystem mounted");
        }
        mounted.users.insert(session, 1);
        Ok(Prepared { path, checked_cap: None })
    }

    /// A workspace born with a pooled tool container, `sessions/@pool/{name}/data`, made as a
    /// session's is and held by the container until a session adopts it
    /// ([`Workspaces::adopt`]); dropped unadopted, it is removed. Blocking.
    pub fn pooled(self: &Arc<Self>, name: &str) -> Result<PooledWorkspace, WorkspaceError> {
        if !crate::base::auth::is_valid_context_id(name) {
            let source = std::io::Error::other(format!("`{name}` cannot name a pooled workspace"));
            return Err(WorkspaceError::Folder { path: self.sessions.join(POOL), source });
        }
        let mut mounted = self.mounted();
        let folder_error = |source| WorkspaceError::Folder { path: self.sessions.clone(), source };
        std::fs::create_dir_all(&self.sessions).map_err(folder_error)?;
        let sessions = shared_dirs::open_trusted(&self.sessions).map_err(folder_error)?;
        let prepared = self.prepare(&mut mounted, &sessions, &Path::new(POOL).join(name))?;
        drop(mounted);
        if prepared.checked_cap.is_none() {
            // What making it wrote (the filesystem's layout, its root handed over) goes to disk
            // now: else the first write a session syncs there carries all of it.
            let synced = shared_dirs::open_dir(&sessions, Path::new(POOL).join(name).join("data"))
                .and_then(|root| root.ok_or_else(|| std::io::Error::other("the pooled workspace is gone")))
                .and_then(|root| rustix::fs::syncfs(root).map_err(std::io::Error::from));
            if let Err(error) = synced {
                tracing::debug!(pooled = name, %error, "cannot sync a pooled workspace's filesystem");
            }
        }
        Ok(PooledWorkspace { workspaces: self.clone(), name: Some(name.to_string()), prepared })
    }

    /// Gives `pooled` to `session` as its workspace, if the session has none yet: its `data`
    /// goes to `sessions/{session}/data`, never over one that is there (a plain folder renamed;
    /// a filesystem's image renamed and the filesystem mounted in place too), counted as one
    /// container's. What is left at the pool's is [`Workspaces::let_go_pooled`]'s (off the
    /// claim's path: letting go of a mount waits on the kernel). None: the session has a
    /// workspace, and `pooled` is removed. Blocking.
    pub fn adopt(&self, mut pooled: PooledWorkspace, session: &str) -> Result<Option<Prepared>, WorkspaceError> {
        let Some(name) = pooled.name.take() else { return Ok(None) };
        let mut mounted = self.mounted();
        let moved = if mounted.users.contains_key(session) || !crate::base::auth::is_valid_context_id(session) {
            Ok(false)
        } else {
            self.move_in(&name, session)
        };
        let key = format!("{POOL}/{name}");
        match moved {
            Ok(true) => {
                if let Some(users) = mounted.users.remove(&key) {
                    mounted.users.insert(session.to_string(), users);
                }
            }
            Ok(false) => {
                drop(mounted);
                self.discard_pooled(&name);
                return Ok(None);
            }
            Err(source) => {
                drop(mounted);
                self.discard_pooled(&name);
                return Err(WorkspaceError::Folder { path: self.sessions.join(session), source });
            }
        }
        drop(mounted);
        tracing::debug!(session, pooled = %name, "a session took a pooled workspace");
        let path = self.sessions.join(session).join("data");
        Ok(Some(Prepared { path, checked_cap: pooled.prepared.checked_cap }))
    }

    /// Moves pooled workspace `name` in as `session`'s; false when the session has one.
    fn move_in(&self, name: &str, session: &str) -> std::io::Result<bool> {
        let sessions = shared_dirs::open_trusted(&self.sessions)?;
        let from = shared_dirs::open_dir(&sessions, Path::new(POOL).join(name))?
            .ok_or_else(|| std::io::Error::other("the pooled workspace is gone"))?;
        let data = shared_dirs::open_dir(&from, "data")?.ok_or_else(|| std::io::Error::other("no pooled data"))?;
        let session_dir = shared_dirs::ensure_dir(&sessions, OsStr::new(session), Owner::Daemon)?;
        let taken =
            |entry: &str| rustix::fs::statat(&session_dir, entry, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok();
        if taken("data") || taken(IMAGE) {
            return Ok(false);
        }
        // Nothing runs in a pooled container before its claim: a workspace that is not as it
        // was made is not handed on.
        if !shared_dirs::names(&data)?.is_empty() {
            tracing::warn!(pooled = name, "a pooled workspace is not empty; it is not handed on");
            return Ok(false);
        }
        let no_replace = rustix::fs::RenameFlags::NOREPLACE;
        if !is_mount_point(&from, &data)? {
            drop(data);
            rustix::fs::renameat_with(&from, "data", &session_dir, "data", no_replace)?;
            return Ok(true);
        }
        drop(data);
        // The loop device holds the image by its inode: renamed, it goes on.
        rustix::fs::renameat_with(&from, IMAGE, &session_dir, IMAGE, no_replace)?;
        shared_dirs::ensure_dir(&session_dir, OsStr::new("data"), Owner::Containers)?;
        let source = self.sessions.join(POOL).join(name).join("data");
        if let Err(error) = rustix::mount::mount_bind(&source, self.sessions.join(session).join("data")) {
            // Back as it was: the session has no workspace, the pool's is removed.
            // silent-ok: each undoes what was just made; the error is what matters.
            let _ = rustix::fs::unlinkat(&session_dir, "data", rustix::fs::AtFlags::REMOVEDIR);
            let _ = rustix::fs::renameat_with(&session_dir, IMAGE, &from, IMAGE, no_replace);
            return Err(error.into());
        }
        Ok(true)
    }

    /// Lets go of what a session's taking of pooled workspace `name` left at the pool's: the
    /// filesystem's mount there (the session's stays) and the empty folders. Only empty folders
    /// are removed: a mount that cannot be let go of keeps what it holds (the next start clears
    /// it). Blocking.
    pub fn let_go_pooled(&self, name: &str) {
        let folder = self.sessions.join(POOL).join(name);
        let left = let_go_mount(&folder.join("data")).and_then(|()| {
            let pool = shared_dirs::open_trusted(&self.sessions.join(POOL))?;
            if let Some(from) = shared_dirs::open_dir(&pool, name)? {
                remove_empty(&from, "data")?;
            }
            remove_empty(&pool, name)
        });
        if let Err(error) = left {
            tracing::warn!(pooled = name, %error, "cannot let go of a pooled workspace's folder");
        }
    }

    /// Removes pooled workspace `name`: its filesystem unmounted, its folder gone. Blocking.
    fn discard_pooled(&self, name: &str) {
        let key = format!("{POOL}/{name}");
        if self.mounted().users.remove(&key).is_some() {
            unmount(&self.sessions.join(&key).join("data"));
        }
        let removed = shared_dirs::open_trusted(&self.sessions)
            .and_then(|sessions| shared_dirs::open_dir(&sessions, POOL))
            .and_then(|pool| match pool {
                Some(pool) => shared_dirs::remove_tree(&pool, OsStr::new(name)),
                None => Ok(()),
            });
        if let Err(error) = removed {
            tracing::warn!(pooled = name, %error, "cannot remove a pooled workspace");
        }
    }

    /// Removes the pooled workspaces a daemon that stopped without removing them left (at
    /// start, before any is made). Blocking.
    pub fn clear_pool(&self) {
        let Ok(sessions) = shared_dirs::open_trusted(&self.sessions) else { return };
        let Ok(Some(pool)) = shared_dirs::open_dir(&sessions, POOL) else { return };
        for name in shared_dirs::names(&pool).unwrap_or_default() {
            let data = shared_dirs::open_dir(&pool, Path::new(&name).join("data"));
            let folder = shared_dirs::open_dir(&pool, &name);
            if let (Ok(Some(folder)), Ok(Some(data))) = (folder, data) {
                if is_mount_point(&folder, &data).unwrap_or(false) {
                    drop(data);
                    let at = self.sessions.join(POOL).join(&name).join("data");
                    // A session may have taken this filesystem before the crash: only a
                    // folder no longer mounted is removed, never through the mount.
                    if let Err(error) = let_go_mount(&at) {
                        tracing::warn!(folder = %at.display(), %error, "cannot let go of a pooled workspace's mount");
                        continue;
                    }
                }
            }
            if let Err(error) = shared_dirs::remove_tree(&pool, &name) {
                tracing::warn!(pooled = %name.to_string_lossy(), %error, "cannot remove a pooled workspace");
            }
        }
    }

    /// Keeps the file `name` shared in `session` (its bytes as sent, a picture for the models or
    /// a recording to be heard) in the session's `pictures/` or `recordings/`, which only the
    /// daemon reads and no container mounts.
    pub fn keep_shared(&self, session: &str, kept: Kept, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let sessions = shared_dirs::open_trusted(&self.sessions)?;
        let session_dir = shared_dirs::ensure_dir(&sessions, OsStr::new(session), Owner::Daemon)?;
        shared_dirs::ensure_dir(&session_dir, OsStr::new(kept.folder()), Owner::Daemon)?;
        let path = self.sessions.join(session).join(kept.folder()).join(name);
        crate::base::state::write_atomic(&path, bytes, 0o600).map_err(std::io::Error::other)
    }

    /// The file an attachment (`uploads/NAME`) of `session` names, as it was shared, if it was
    /// kept as `kept` and is at most `cap` bytes; none when it was not kept.
    pub fn shared(&self, session: &str, kept: Kept, attachment: &str, cap: u64) -> std::io::Result<Option<Vec<u8>>> {
        let Some(name) = attachment.strip_prefix("uploads/") else { return Ok(None) };
        let sessions = shared_dirs::open_trusted(&self.sessions)?;
        let Some(folder) = shared_dirs::open_dir(&sessions, Path::new(session).join(kept.folder()))? else {
            return Ok(None);
        };
        shared_dirs::read_regular(&folder, OsStr::new(name), cap)
    }

    /// Keeps the file `name` an agent sent to people in `session`'s `sent/` (beside `data/`,
    /// only the daemon's); the name it got there, made unique with `-2`, `-3`… before its
    /// extension when one of that name was kept before.
    pub fn keep_sent(&self, session: &str, name: &str, bytes: &[u8]) -> std::io::Result<String> {
        let sessions = shared_dirs::open_trusted(&self.sessions)?;
        let session_dir = shared_dirs::ensure_dir(&sessions, OsStr::new(session), Owner::Daemon)?;
        let sent = shared_dirs::ensure_dir(&session_dir, OsStr::new(SENT), Owner::Daemon)?;
        let (stem, extension) = baaaht_proto::files::split_extension(name);
        let mut kept = name.to_string();
        for number in 2.. {
            if shared_dirs::open_regular(&sent, OsStr::new(&kept))?.is_none() {
                break;
            }
            kept = format!("{stem}-{number}{extension}");
        }
        let path = self.sessions.join(session).join(SENT).join(&kept);
        crate::base::state::write_atomic(&path, bytes, 0o600).map_err(std::io::Error::other)?;
        Ok(kept)
    }

    /// The browser profile of `person` (a plain name) in `session`, made if it is not there; its
    /// path on the host.
    pub fn browser_profile(&self, session: &str, person: &str) -> std::io::Result<PathBuf> {
        let sessions = shared_dirs::open_trusted(&self.sessions)?;
        let session_dir = shared_dirs::ensure_dir(&sessions, OsStr::new(session), Owner::Daemon)?;
        let profiles = shared_dirs::ensure_dir(&session_dir, OsStr::new(BROWSER_PROFILES), Owner::Daemon)?;
        shared_dirs::ensure_dir(&profiles, OsStr::new(person), Owner::Containers)?;
        Ok(self.sessions.join(session).join(BROWSER_PROFILES).join(person))
    }

    /// The file `name` kept in `session`'s `sent/`, if it is there and at most `cap` bytes.
    pub fn sent(&self, session: &str, name: &str, cap: u64) -> std::io::Result<Option<Vec<u8>>> {
        let sessions = shared_dirs::open_trusted(&self.sessions)?;
        let Some(sent) = shared_dirs::open_dir(&sessions, Path::new(session).join(SENT))? else {
            return Ok(None);
        };
        shared_dirs::read_regular(&sent, OsStr::new(name), cap)
    }

    /// The entries of `session`'s workspace whose status changed at or after `since` (seconds
    /// since the epoch; a command can set a file's times back, never its status change time),
    /// as paths relative to the workspace, at most `most` of them after looking at no more
    /// than [`MOST_WALKED`] entries; never through a link.
    pub fn changed_since(&self, session: &str, since: i64, most: usize) -> std::io::Result<Vec<String>> {
        let sessions = shared_dirs::open_trusted(&self.sessions)?;
        let Some(data) = shared_dirs::open_dir(&sessions, Path::new(session).join("data"))? else {
            return Ok(vec![]);
        };
        let mut found = vec![];
        let mut walked = 0usize;
        let mut folders = vec![(data, String::new(), 0usize)];
        while let Some((folder, prefix, depth)) = folders.pop() {
            for name in shared_dirs::names(&folder)? {
                walked += 1;
                if walked > MOST_WALKED || found.len() >= most {
                    return Ok(found);
                }
                let Ok(stat) = rustix::fs::statat(&folder, name.as_os_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                else {
                    // silent-ok: gone since it was listed.
                    continue;
                };
                let path = format!("{prefix}{}", name.to_string_lossy());
                let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
                if kind == rustix::fs::FileType::Directory {
                    if depth < 32 {
                        if let Some(inner) = shared_dirs::open_dir(&folder, name.as_os_str())? {
                            folders.push((inner, format!("{path}/"), depth + 1));
                        }
                    }
                } else if stat.st_ctime >= since {
                    found.push(path);
                }
            }
        }
        Ok(found)
    }

    /// Which of `paths` (relative to `session`'s workspace) are there, as anything; a path
    /// that cannot be looked at is taken as there.
    pub fn present(&self, session: &str, paths: &[String]) -> std::io::Result<Vec<bool>> {
        let sessions = shared_dirs::open_trusted(&self.sessions)?;
        let Some(data) = shared_dirs::open_dir(&sessions, Path::new(session).join("data"))? else {
            return Ok(vec![false; paths.len()]);
        };
        let mut present = vec![];
        for path in paths {
            let (folder, name) = match path.rsplit_once('/') {
                Some((folder, name)) => (shared_dirs::open_dir(&data, folder)?, name),
                None => (Some(data.try_clone()?), path.as_str()),
            };
            let there = match folder {
                None => false,
                Some(folder) => match rustix::fs::statat(&folder, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(_) => true,
                    Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => false,
                    Err(_) => true,
                },
            };
            present.push(there);
        }
        Ok(present)
    }

    /// The regular file at `path` (relative, `/`-separated) in `session`'s workspace, reached by
    /// descriptor, if it is there and at most `cap` bytes.
    pub fn read(&self, session: &str, path: &str, cap: u64) -> std::io::Result<Option<Vec<u8>>> {
        let sessions = shared_dirs::open_trusted(&self.sessions)?;
        let Some(data) = shared_dirs::open_dir(&sessions, Path::new(session).join("data"))? else {
            return Ok(None);
        };
        let folder = match path.rsplit_once('/') {
            Some((folder, name)) => shared_dirs::open_dir(&data, folder)?.map(|folder| (folder, name)),
            None => Some((data, path)),
        };
        match folder {
            Some((folder, name)) => shared_dirs::read_regular(&folder, OsStr::new(name), cap),
            None => Ok(None),
        }
    }

    /// Whether `session` has a workspace (its folder or filesystem's image).
    pub fn has(&self, session: &str) -> bool {
        let dir = self.sessions.join(session);
        std::fs::symlink_metadata(dir.join("data")).is_ok() || std::fs::symlink_metadata(dir.join(IMAGE)).is_ok()
    }

    /// Where `session`'s workspace is, as [`Workspaces::acquire`] gave it, without taking it.
    pub fn peek(&self, session: &str) -> Option<Prepared> {
        let path = self.sessions.join(session).join("data");
        let mounted = self.mounted().users.contains_key(session);
        Some(Prepared { path, checked_cap: (!mounted).then_some(self.cap) })
    }

    /// One tool container of `session` is gone; the last one unmounts its filesystem.
    pub fn release(&self, session: &str) {
        let mut mounted = self.mounted();
        let Some(users) = mounted.users.get_mut(session) else { return };
        *users -= 1;
        if *users > 0 {
            return;
        }
        mounted.users.remove(session);
        unmount(&self.sessions.join(session).join("data"));
    }

    /// Unmounts every workspace this daemon mounted (at shutdown, after the containers went).
    pub fn shutdown(&self) {
        let sessions: Vec<String> = self.mounted().users.drain().map(|(session, _)| session).collect();
        for session in sessions {
            unmount(&self.sessions.join(session).join("data"));
        }
    }
}

/// Whether the daemon can give workspaces a filesystem: root, in the mount namespace of PID 1
/// (where the engine runs; a private one, as systemd's `ProtectSystem=` makes, hides the
/// mount from it), with `mount` and `mkfs.ext4` at hand.
fn can_mount() -> Result<(), MountError> {
    if !rustix::process::geteuid().is_root() {
        return Err(MountError::NotRoot);
    }
    let ours = std::fs::read_link("/proc/self/ns/mnt").map_err(MountError::Namespace)?;
    match std::fs::read_link("/proc/1/ns/mnt") {
        Ok(init) if init == ours => {}
        Ok(_) => return Err(MountError::OwnNamespace),
        // PID 1 is not ours to inspect (a sandbox's supervisor): nothing says we are apart.
        Err(error) => tracing::debug!(%error, "cannot compare mount namespaces with PID 1"),
    }
    for tool in ["mount", "umount", "mkfs.ext4"] {
        if !["/usr/sbin", "/sbin", "/usr/bin", "/bin"].iter().any(|dir| Path::new(dir).join(tool).exists()) {
            return Err(MountError::Missing(tool));
        }
    }
    Ok(())
}

/// Whether `data` (in `parent`) is a mount point: it sits on another device than its parent.
pub(crate) fn is_mount_point(parent: &OwnedFd, data: &OwnedFd) -> std::io::Result<bool> {
    Ok(rustix::fs::fstat(parent)?.st_dev != rustix::fs::fstat(data)?.st_dev)
}

fn run(program: &str, args: &[&OsStr]) -> Result<(), MountError> {
    let output = Command::new(program)
        .args(args)
        .env("PATH", "/usr/sbin:/sbin:/usr/bin:/bin")
        .output()
        .map_err(|error| MountError::Spawn { program: program.to_string(), error })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    Err(MountError::Failed { program: program.to_string(), status: output.status, stderr })
}

/// A sparse ext4 image of `cap` bytes whose root belongs to the containers' uid.
fn make_image(image: &Path, cap: u64) -> Result<(), WorkspaceError> {
    let error = |action, why| WorkspaceError::Image { action, path: image.to_path_buf(), why };
    let owner = format!(
        "root_owner={uid}:{uid},lazy_itable_init=1,lazy_journal_init=1",
        uid = crate::base::auth::CONTAINER_UID
    );
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(image)
        .and_then(|file| file.set_len(cap).and_then(|()| file.sync_all()))
        .map_err(MountError::Io)
        .and_then(|()| {
            run(
                "mkfs.ext4",
                &[
                    OsStr::new("-q"),
                    OsStr::new("-F"),
                    OsStr::new("-m"),
                    OsStr::new("0"),
                    OsStr::new("-L"),
                    OsStr::new("baaaht-ws"),
                    OsStr::new("-E"),
                    OsStr::new(&owner),
                    image.as_os_str(),
                ],
            )
        });
    if let Err(why) = made {
        // silent-ok: a half-made image is worthless; the error says what failed.
        let _ = std::fs::remove_file(image);
        return Err(error("create", why));
    }
    Ok(())
}

fn mount(image: &Path, on: &Path) -> Result<(), WorkspaceError> {
    run(
        "mount",
        &[
            OsStr::new("-t"),
            OsStr::new("ext4"),
            OsStr::new("-o"),
            OsStr::new("loop,nosuid,nodev"),
            image.as_os_str(),
            on.as_os_str(),
        ],
    )
    .map_err(|why| WorkspaceError::Image { action: "mount", path: image.to_path_buf(), why })
}

/// Mounts a memory filesystem of at most `bytes` on `on` (the daemon's folder, 0755), for a
/// folder a container writes that must not take the host's disk (an IPC folder).
pub(crate) fn mount_tmpfs(on: &Path, bytes: u64) -> Result<(), MountError> {
    let options = format!("size={bytes},mode=0755,nosuid,nodev,noexec");
    run(
        "mount",
        &[
            OsStr::new("-t"),
            OsStr::new("tmpfs"),
            OsStr::new("-o"),
            OsStr::new(&options),
            OsStr::new("tmpfs"),
            on.as_os_str(),
        ],
    )
}

/// Lets go of the mount on `at` if there is one (detached when something on the host holds
/// it), after it was mounted elsewhere too: the other mounts, a container's among them, stay.
pub(crate) fn let_go_mount(at: &Path) -> std::io::Result<()> {
    let unmounted = rustix::mount::unmount(at, rustix::mount::UnmountFlags::empty())
        .or_else(|_| rustix::mount::unmount(at, rustix::mount::UnmountFlags::DETACH));
    match unmounted {
        // Not a mount point (any more), or gone.
        Ok(()) | Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOENT) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Removes the empty folder `name` in `parent` (one that holds something, or a mount, stays);
/// gone already is fine.
pub(crate) fn remove_empty(parent: &OwnedFd, name: &str) -> std::io::Result<()> {
    match rustix::fs::unlinkat(parent, name, rustix::fs::AtFlags::REMOVEDIR) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Unmounts the filesystem on `on` (detached at once when it is busy on the host).
pub(crate) fn unmount(on: &Path) {
    match run("umount", &[on.as_os_str()]) {
        Ok(()) => tracing::info!(folder = %on.display(), "filesystem unmounted"),
        Err(message) => {
            // Busy on the host (a shell sitting in it): detach it now, it goes when released.
            tracing::warn!(folder = %on.display(), %message, "cannot unmount a filesystem; detaching it");
            if let Err(message) = run("umount", &[OsStr::new("-l"), on.as_os_str()]) {
                tracing::warn!(folder = %on.display(), %message, "cannot detach a filesystem");
            }
        }
    }
}

impl Subsystem for Workspaces {
    fn name(&self) -> &'static str {
        "workspaces"
    }

    fn drain(self: Arc<Self>) -> Work {
        Box::pin(async move { self.shutdown() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pooled_workspace_goes_to_a_session_without_one_and_is_removed_otherwise() {
        let temp = tempfile::tempdir().expect("tempdir");
        let sessions = temp.path().join("sessions");
        let workspaces = Arc::new(Workspaces::new(sessions.clone(), 1 << 20, WorkspaceLimit::Checked, 4));
        let pooled = workspaces.pooled("p1").expect("pooled");
        assert_eq!(pooled.prepared.path, sessions.join("@pool/p1/data"));
        // A new session's folder holds its transcript, not yet a workspace.
        std::fs::create_dir_all(sessions.join("s1")).expect("session folder");
        std::fs::write(sessions.join("s1/session.jsonl"), "{}\n").expect("transcript");
        let adopted = workspaces.adopt(pooled, "s1").expect("adopt").expect("a session without a workspace takes it");
        assert_eq!(adopted.path, sessions.join("s1/data"));
        std::fs::write(adopted.path.join("written"), "by its first call").expect("write");
        workspaces.let_go_pooled("p1");
        assert!(!sessions.join("@pool/p1").exists());
        assert!(sessions.join("s1/session.jsonl").exists());

        // A session that has a workspace keeps it: the pooled workspace is removed, never merged.
        let other = workspaces.pooled("p2").expect("pooled");
        assert_eq!(workspaces.adopt(other, "s1").expect("adopt"), None);
        assert!(!sessions.join("@pool/p2").exists());
        assert!(sessions.join("s1/data/written").exists());
        assert_eq!(workspaces.adopt(workspaces.pooled("p3").expect("pooled"), "../s2").expect("adopt"), None);

        // Dropped unadopted, it goes; left by a daemon that stopped, the next start clears it.
        drop(workspaces.pooled("p4").expect("pooled"));
        assert!(!sessions.join("@pool/p4").exists());
        std::mem::forget(workspaces.pooled("p5").expect("pooled"));
        workspaces.clear_pool();
        assert_eq!(std::fs::read_dir(sessions.join("@pool")).expect("pool").count(), 0);
        assert!(workspaces.pooled("../p6").is_err());
        // One that is not as it was made (something ran in it) is not handed on.
        let written = workspaces.pooled("p7").expect("pooled");
        std::fs::write(written.prepared.path.join("planted"), "x").expect("write");
        assert_eq!(workspaces.adopt(written, "s7").expect("adopt"), None);
        assert!(!sessions.join("s7/data").exists() && !sessions.join("@pool/p7").exists());
    }
}
