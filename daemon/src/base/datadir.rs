//! The data directory (spec §14.1): where it is, its layout, and the lock that keeps a second
//! daemon off it.
//!
//! The root is 0700: sessions, memory and secrets live below it. This module creates folders
//! and takes the lock; it writes no other file.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::base::auth::{Context, ContextKind};

/// The longest path a Unix socket can be bound to (`sun_path` is 108 bytes with the NUL).
pub const MAX_SOCKET_PATH: usize = 107;

#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("no data dir given and $HOME is not set: pass --data-dir or set BAAAHT_DATA")]
    NoHome,
    #[error("cannot create {}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot lock {}", path.display())]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "another baaahtd{} is already serving {}: stop it first (systemctl stop baaaht, or kill it)",
        pid.map(|pid| format!(" (pid {pid})")).unwrap_or_default(),
        root.display()
    )]
    AlreadyRunning { root: PathBuf, pid: Option<u32> },
}

/// The folder under the state dir where gateways keep what outlives a run.
pub const GATEWAY_STATE: &str = "gateway-state";

/// Paths inside one data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDir {
    root: PathBuf,
}

/// The folder (below the data dir) of each kind of context's own folders: `users`, `groups`.
pub fn context_folder(kind: crate::base::auth::ContextKind) -> &'static str {
    match kind {
        crate::base::auth::ContextKind::User => "users",
        crate::base::auth::ContextKind::Group => "groups",
    }
}

/// Both kinds of context, with the folder of each.
pub const CONTEXT_KINDS: [crate::base::auth::ContextKind; 2] =
    [crate::base::auth::ContextKind::User, crate::base::auth::ContextKind::Group];

/// The context a data dir's `{users,groups}/{id}` names.
pub fn context_in(folder: &str, id: &str) -> Option<crate::base::auth::Context> {
    let kind = CONTEXT_KINDS.into_iter().find(|kind| context_folder(*kind) == folder)?;
    crate::base::auth::is_valid_context_id(id).then(|| crate::base::auth::Context { kind, id: id.to_string() })
}

impl DataDir {
    pub fn new(root: impl Into<PathBuf>) -> DataDir {
        DataDir { root: root.into() }
    }

    /// `explicit` (from --data-dir or BAAAHT_DATA), else systemd's `$STATE_DIRECTORY`
    /// (`/var/lib/baaaht` with the shipped unit), else `$XDG_DATA_HOME/baaaht`, else
    /// `~/.local/share/baaaht`.
    pub fn resolve(explicit: Option<PathBuf>, env: impl Fn(&str) -> Option<String>) -> Result<DataDir, DataDirError> {
        if let Some(root) = explicit {
            return Ok(DataDir::new(absolute(root)));
        }
        if let Some(state) = env("STATE_DIRECTORY").filter(|value| !value.is_empty()) {
            // systemd may pass several colon-separated folders; ours is the first.
            let first = state.split(':').next().unwrap_or(&state);
            return Ok(DataDir::new(first));
        }
        if let Some(xdg) = env("XDG_DATA_HOME").filter(|value| value.starts_with('/')) {
            return Ok(DataDir::new(Path::new(&xdg).join("baaaht")));
        }
        let home = env("HOME").filter(|value| !value.is_empty()).ok_or(DataDirError::NoHome)?;
        Ok(DataDir::new(Path::new(&home).join(".local/share/baaaht")))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn config_dir(&self) -> PathBuf {
        self.root.join("config")
    }

    pub fn ipc_dir(&self) -> PathBuf {
        self.root.join("data/ipc")
    }

    /// The host clients' socket.
    pub fn socket_path(&self) -> PathBuf {
        self.ipc_dir().join("orchestrator.sock")
    }

    /// Folders holding one socket per container; only the daemon can traverse this one.
    pub fn container_sockets_dir(&self) -> PathBuf {
        self.root.join("data/run")
    }

    /// A user's or group's own folder: `users/{id}` or `groups/{id}` (profile, memory,
    /// skills). The one place these paths are built.
    pub fn context_dir(&self, context: &crate::base::auth::Context) -> PathBuf {
        self.root.join(context_folder(context.kind)).join(&context.id)
    }

    /// The folder of every user's, or every group's, own folder.
    pub fn contexts_dir(&self, kind: crate::base::auth::ContextKind) -> PathBuf {
        self.root.join(context_folder(kind))
    }

    /// Folders holding one socket per registered gateway.
    /// What a gateway the daemon runs keeps between runs (the web gateway's signed-in
    /// sessions), by gateway: apart from its socket folder, which every start makes anew.
    pub fn gateway_state_dir(&self, name: &str) -> PathBuf {
        self.state_dir().join(GATEWAY_STATE).join(name)
    }

    pub fn gateways_dir(&self) -> PathBuf {
        self.root.join("data/gateways")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.root.join("data/state")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("data/logs")
    }

    fn lock_path(&self) -> PathBuf {
        self.state_dir().join("daemon.lock")
    }

    /// Creates the layout of spec §14.1; the root and every folder below it are 0700. Folders
    /// that exist are left as they are.
    pub fn create_layout(&self) -> Result<(), DataDirError> {
        let created_root = !self.root.exists();
        let mut builder = DirBuilder::new();
        builder.recursive(true).mode(0o700);
        for relative in [
            "",
            "agents",
            "users",
            "groups",
            "sessions",
            "skills",
            "config",
            "data/ipc",
            "data/ipc/system",
            "data/run",
            "data/gateways",
            "data/logs",
            "data/state",
        ] {
            let path = self.root.join(relative);
            builder.create(&path).map_err(|source| DataDirError::Create { path: path.clone(), source })?;
        }
        if created_root {
            // `recursive` applies the mode only to folders it creates, and the umask may have
            // narrowed or widened nothing else; make the root exactly 0700.
            fs::set_permissions(&self.root, fs::Permissions::from_mode(0o700))
                .map_err(|source| DataDirError::Create { path: self.root.clone(), source })?;
        } else if let Ok(metadata) = fs::metadata(&self.root) {
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o007 != 0 {
                tracing::warn!(
                    data_dir = %self.root.display(),
                    mode = format!("{mode:o}"),
                    "the data dir is open to other users; it holds sessions, memory and secrets: chmod 700 it"
                );
            }
        }
        // The container socket folder must never be traversable by anyone but the daemon.
        let run = self.container_sockets_dir();
        fs::set_permissions(&run, fs::Permissions::from_mode(0o700))
            .map_err(|source| DataDirError::Create { path: run, source })?;
        Ok(())
    }

    /// Takes the daemon lock (an advisory `flock` on `data/state/daemon.lock`, released by the
    /// kernel when the process dies, so a crash never leaves a stale lock).
    pub fn lock(&self) -> Result<DaemonLock, DataDirError> {
        let path = self.lock_path();
        let lock_error = |source| DataDirError::Lock { path: path.clone(), source };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(lock_error)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                // silent-ok: the pid only decorates the message.
                let _ = file.read_to_string(&mut pid);
                return Err(DataDirError::AlreadyRunning { root: self.root.clone(), pid: pid.trim().parse().ok() });
            }
            Err(fs::TryLockError::Error(source)) => return Err(lock_error(source)),
        }
        file.set_len(0).map_err(lock_error)?;
        file.rewind().map_err(lock_error)?;
        writeln!(file, "{}", std::process::id()).map_err(lock_error)?;
        Ok(DaemonLock { _file: file })
    }
}

fn absolute(path: PathBuf) -> PathBuf {
    if path.is_absolute() {
        return path;
    }
    match std::env::current_dir() {
        Ok(cwd) => cwd.join(path),
        // silent-ok: a relative path still works for this process, only messages read worse.
        Err(_) => path,
    }
}

/// Held for the daemon's lifetime; dropping it releases the data dir.
#[derive(Debug)]
pub struct DaemonLock {
    _file: File,
}

/// Current uid, from the owner of `/proc/self` (std offers no getuid).
pub fn current_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    // silent-ok: /proc is always mounted where the daemon runs; root is the safe reading
    // because it admits only root besides the group.
    std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0)
}

/// The folder name of a context: `user-alice`, `group-family`.
pub fn folder_of(context: &Context) -> String {
    let kind = match context.kind {
        ContextKind::User => "user",
        ContextKind::Group => "group",
    };
    format!("{kind}-{}", context.id)
}

/// The folder of baaaht's other binaries (`baaaht-agent`, `baaaht-llm-gateway`): from
/// `container.binaries_dir`, else beside the daemon's own executable.
pub fn binaries_dir(configured: &str) -> PathBuf {
    if configured.is_empty() {
        // silent-ok: whoever needs a binary reports it missing by its path
        std::env::current_exe().ok().and_then(|exe| exe.parent().map(PathBuf::from)).unwrap_or_default()
    } else {
        PathBuf::from(configured)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_order() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |key: &str| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| v.to_string())
        };
        type Env = &'static [(&'static str, &'static str)];
        let cases: &[(Option<&str>, Env, &str)] = &[
            (Some("/srv/b"), &[("HOME", "/home/u")], "/srv/b"),
            (None, &[("STATE_DIRECTORY", "/var/lib/baaaht"), ("HOME", "/home/u")], "/var/lib/baaaht"),
            (None, &[("STATE_DIRECTORY", "/var/lib/a:/var/lib/b")], "/var/lib/a"),
            (None, &[("XDG_DATA_HOME", "/x"), ("HOME", "/home/u")], "/x/baaaht"),
            (None, &[("XDG_DATA_HOME", "relative"), ("HOME", "/home/u")], "/home/u/.local/share/baaaht"),
            (None, &[("HOME", "/home/u")], "/home/u/.local/share/baaaht"),
        ];
        for (explicit, pairs, expected) in cases {
            let dir = DataDir::resolve(explicit.map(PathBuf::from), env(pairs)).expect("resolves");
            assert_eq!(dir.root(), Path::new(expected));
        }
        assert!(matches!(DataDir::resolve(None, env(&[])), Err(DataDirError::NoHome)));
    }

    #[test]
    fn layout_is_private_and_the_lock_is_exclusive() {
        let parent = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::new(parent.path().join("data"));
        dir.create_layout().expect("layout");
        let mode = fs::metadata(dir.root()).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        for sub in ["agents", "users", "groups", "sessions", "skills", "config", "data/ipc/system", "data/logs"] {
            assert!(dir.root().join(sub).is_dir(), "{sub}");
        }
        let held = dir.lock().expect("first lock");
        let error = dir.lock().expect_err("second lock");
        assert!(error.to_string().contains(&format!("(pid {})", std::process::id())), "{error}");
        drop(held);
        dir.lock().expect("lock again after release");
    }
}
