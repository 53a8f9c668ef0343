//! Where the daemon listens: the data dir's lock, the host socket (0660, in systemd's runtime
//! directory when the unit gives one) and the metrics listener, acquired before the runtime
//! serves anything ([`bind`]) and removed at shutdown.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::base::config::LoadedConfig;
use crate::base::datadir::{DaemonLock, DataDir, DataDirError, MAX_SOCKET_PATH};

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    #[error("socket path {} is {len} bytes, more than the {MAX_SOCKET_PATH} the kernel allows: use a shorter data dir", path.display())]
    SocketPathTooLong { path: PathBuf, len: usize },
    #[error("cannot bind the daemon socket {}", path.display())]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("orchestrator.socket.client_group: no group named `{0}` in /etc/group; create it or clear the setting")]
    NoSuchGroup(String),
    #[error(
        "cannot serve metrics on {address}: set metrics.listen to a free loopback port, or metrics.enabled: false"
    )]
    MetricsBind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The listeners and the lock, acquired before the runtime serves anything.
#[derive(Debug)]
pub struct Bound {
    socket: std::os::unix::net::UnixListener,
    /// Where the host socket is served.
    socket_path: PathBuf,
    /// The link to it in the data dir, when it is served elsewhere.
    socket_link: Option<PathBuf>,
    metrics: Option<std::net::TcpListener>,
    client_group: Option<(String, u32)>,
    _lock: DaemonLock,
}

impl Bound {
    pub fn socket_path(&self) -> &std::path::Path {
        &self.socket_path
    }

    /// Who besides the daemon's user may use the host socket (`orchestrator.socket.client_group`).
    pub fn client_group(&self) -> Option<(String, u32)> {
        self.client_group.clone()
    }

    /// The host socket and the metrics listener (with its address) for the runtime; must be
    /// called inside it.
    pub fn listeners(&mut self, loaded: &LoadedConfig) -> Result<Listeners, BindError> {
        let bind_error = |source| BindError::Bind { path: self.socket_path.clone(), source };
        let host_std = self.socket.try_clone().map_err(bind_error)?;
        let host = tokio::net::UnixListener::from_std(host_std).map_err(bind_error)?;
        let (metrics, metrics_address) = match self.metrics.take() {
            Some(listener) => {
                let address = listener
                    .local_addr()
                    .map_err(|source| BindError::MetricsBind { address: loaded.config.metrics.listen.0, source })?;
                let listener = tokio::net::TcpListener::from_std(listener)
                    .map_err(|source| BindError::MetricsBind { address, source })?;
                (Some(listener), Some(address))
            }
            None => (None, None),
        };
        Ok(Listeners { host, metrics, metrics_address })
    }

    /// Removes the host socket and its link in the data dir (at shutdown), then lets go of the
    /// daemon lock.
    pub fn remove(self) {
        for path in std::iter::once(&self.socket_path).chain(&self.socket_link) {
            if let Err(error) = std::fs::remove_file(path) {
                tracing::warn!(socket = %path.display(), %error, "cannot remove the socket");
            }
        }
    }
}

/// What [`Bound::listeners`] hands the runtime.
#[derive(Debug)]
pub struct Listeners {
    pub host: tokio::net::UnixListener,
    pub metrics: Option<tokio::net::TcpListener>,
    pub metrics_address: Option<SocketAddr>,
}

/// Where the host socket is served: in systemd's runtime directory when the unit gives one
/// (`RuntimeDirectory=baaaht`: `/run/baaaht`, 0755, so that members of the client group reach
/// it while the data dir stays 0700), else in the data dir.
fn served_socket(data_dir: &DataDir, runtime_directory: Option<String>) -> PathBuf {
    match runtime_directory.filter(|value| value.starts_with('/')) {
        // systemd may pass several colon-separated folders; ours is the first.
        Some(folders) => Path::new(folders.split(':').next().unwrap_or(&folders)).join("orchestrator.sock"),
        None => data_dir.socket_path(),
    }
}

/// Removes what a daemon that died left at `path` (we hold the lock, so nothing serves it).
fn remove_stale(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {
            tracing::info!(socket = %path.display(), "replaced a stale socket left by a previous daemon");
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

/// Creates the data dir layout, takes the daemon lock, replaces a stale socket left by a crash
/// and binds the host socket (0660) and the metrics listener. A socket served outside the data
/// dir ([`served_socket`]) is linked from the data dir's usual place, where the daemon's own
/// tools and the CLI of its user look for it.
pub fn bind(data_dir: &DataDir, loaded: &LoadedConfig) -> Result<Bound, BindError> {
    data_dir.create_layout()?;
    let lock = data_dir.lock()?;
    let path = served_socket(data_dir, std::env::var("RUNTIME_DIRECTORY").ok());
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(BindError::SocketPathTooLong { path, len });
    }
    let bind_error = |source| BindError::Bind { path: path.clone(), source };
    let link = (path != data_dir.socket_path()).then(|| data_dir.socket_path());
    for stale in std::iter::once(&path).chain(&link) {
        remove_stale(stale).map_err(|source| BindError::Bind { path: stale.clone(), source })?;
    }
    let socket = std::os::unix::net::UnixListener::bind(&path).map_err(bind_error)?;
    socket.set_nonblocking(true).map_err(bind_error)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660)).map_err(bind_error)?;
    if let Some(link) = &link {
        std::os::unix::fs::symlink(&path, link).map_err(|source| BindError::Bind { path: link.clone(), source })?;
    }
    let group_name = &loaded.config.orchestrator.socket.client_group;
    let client_group = if group_name.is_empty() {
        None
    } else {
        let gid =
            baaaht_proto::host::group_named(group_name).ok_or_else(|| BindError::NoSuchGroup(group_name.clone()))?.gid;
        std::os::unix::fs::chown(&path, None, Some(gid)).map_err(bind_error)?;
        if let Some(folder) = baaaht_proto::host::folder_closed_to_group(&path, gid) {
            tracing::warn!(
                socket = %path.display(),
                "members of group {group_name} cannot reach the socket: {} is closed to them; run under the \
                 shipped unit (it serves the socket in /run/baaaht), or open that folder to the group",
                folder.display()
            );
        }
        Some((group_name.clone(), gid))
    };
    let metrics = if loaded.config.metrics.enabled {
        let address = loaded.config.metrics.listen.0;
        let listener =
            std::net::TcpListener::bind(address).map_err(|source| BindError::MetricsBind { address, source })?;
        listener.set_nonblocking(true).map_err(|source| BindError::MetricsBind { address, source })?;
        Some(listener)
    } else {
        None
    };
    Ok(Bound { socket, socket_path: path, socket_link: link, metrics, client_group, _lock: lock })
}
