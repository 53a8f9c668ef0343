//! The `baaaht` client: finds the daemon's socket, calls it, and prints what a person needs.
//!
//! Connection and RPC failures become one sentence that says what to do ("daemon not running
//! at PATH; start it with …"), never a stack of transport errors.

pub mod chat;
pub mod doctor;
pub mod mcp;
pub mod people;
pub mod status;
pub mod tasks;
pub mod terminal;
pub mod tui;

use std::path::{Path, PathBuf};

use baaaht_proto::client::{self, Client, ConnectError, ConnectOptions};

/// The host socket below a data dir.
const SOCKET_IN_DATA_DIR: &str = "data/ipc/orchestrator.sock";

/// The socket used when neither --socket nor BAAAHT_SOCKET is given: the data dir's (from
/// BAAAHT_DATA or the per-user default), or the system service's when only that one exists.
pub fn default_socket(env: impl Fn(&str) -> Option<String>) -> PathBuf {
    let data_dir = env("BAAAHT_DATA")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .or_else(|| env("XDG_DATA_HOME").filter(|v| v.starts_with('/')).map(|v| Path::new(&v).join("baaaht")))
        .or_else(|| env("HOME").filter(|v| !v.is_empty()).map(|home| Path::new(&home).join(".local/share/baaaht")));
    let user_socket = data_dir.map(|dir| dir.join(SOCKET_IN_DATA_DIR));
    let system_socket = Path::new("/var/lib/baaaht").join(SOCKET_IN_DATA_DIR);
    match user_socket {
        Some(path) if path.exists() || !system_socket.exists() || env("BAAAHT_DATA").is_some() => path,
        _ => system_socket,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(
        "daemon not running at {}; start it with `baaahtd` (or `scripts/up`, or `systemctl start baaaht`), \
         or point --socket / BAAAHT_SOCKET at its socket",
        path.display()
    )]
    NotRunning { path: PathBuf },
    #[error(
        "permission denied on {}: run as the daemon's user, or join the group set in orchestrator.socket.client_group",
        path.display()
    )]
    SocketPermission { path: PathBuf },
    #[error("cannot reach the daemon at {}: {detail}", path.display())]
    Unreachable { path: PathBuf, detail: String },
    #[error("the daemon refused: {0}")]
    Refused(String),
    #[error("the daemon does not support this yet: {0}")]
    Unsupported(String),
    #[error("the daemon answered with an error: {0}")]
    Rpc(String),
    #[error("cannot encode JSON output")]
    Json(#[source] serde_json::Error),
    #[error("the self-test found problems: {0}")]
    SelfTestFailed(String),
    #[error("{0}")]
    TurnFailed(String),
    #[error("the daemon closed the event stream before the reply")]
    StreamEnded,
    #[error("{0}")]
    Usage(String),
}

impl CliError {
    /// Exit codes (sysexits.h): unavailable 69, no permission 77, software 70.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::NotRunning { .. } | CliError::Unreachable { .. } => 69,
            CliError::SocketPermission { .. } | CliError::Refused(_) => 77,
            CliError::Unsupported(_) | CliError::Rpc(_) | CliError::Json(_) => 70,
            CliError::SelfTestFailed(_) | CliError::TurnFailed(_) => 1,
            CliError::StreamEnded => 69,
            CliError::Usage(_) => 64,
        }
    }

    pub fn from_status(status: tonic::Status, socket: &Path) -> CliError {
        use tonic::Code;
        let message = status.message().to_string();
        match status.code() {
            Code::PermissionDenied | Code::Unauthenticated => CliError::Refused(message),
            Code::InvalidArgument | Code::NotFound | Code::FailedPrecondition | Code::AlreadyExists => {
                CliError::Rpc(message)
            }
            Code::Unimplemented => CliError::Unsupported(message),
            // The daemon itself answered (its responses carry the correlation id) but cannot do
            // it now, e.g. without a container engine.
            Code::Unavailable if status.metadata().contains_key(baaaht_proto::CORRELATION_ID_HEADER) => {
                CliError::Rpc(message)
            }
            // The daemon went away between connect and call.
            Code::Unavailable => CliError::NotRunning { path: socket.to_path_buf() },
            _ => CliError::Rpc(format!("{:?}: {message}", status.code())),
        }
    }
}

/// Connects to the daemon at `socket`, once, without retrying.
pub async fn connect(socket: &Path) -> Result<Client, CliError> {
    client::connect(socket, ConnectOptions::default()).await.map_err(|error| match error {
        ConnectError::NotRunning { path } => CliError::NotRunning { path },
        ConnectError::PermissionDenied { path } => CliError::SocketPermission { path },
        other => CliError::Unreachable { path: socket.to_path_buf(), detail: baaaht_proto::error_chain(&other) },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_resolution() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |key: &str| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| v.to_string())
        };
        assert_eq!(
            default_socket(env(&[("BAAAHT_DATA", "/srv/b"), ("HOME", "/home/u")])),
            PathBuf::from("/srv/b/data/ipc/orchestrator.sock")
        );
        // The per-user default, unless only the system service's socket exists (not here).
        let path = default_socket(env(&[("HOME", "/nonexistent-home")]));
        if !Path::new("/var/lib/baaaht/data/ipc/orchestrator.sock").exists() {
            assert_eq!(path, PathBuf::from("/nonexistent-home/.local/share/baaaht/data/ipc/orchestrator.sock"));
        }
    }

    #[test]
    fn refusals_read_as_refusals() {
        let socket = Path::new("/x.sock");
        let refused = CliError::from_status(tonic::Status::permission_denied("uid 65534 may not"), socket);
        assert_eq!(refused.to_string(), "the daemon refused: uid 65534 may not");
        assert_eq!(refused.exit_code(), 77);
        let gone = CliError::from_status(tonic::Status::unavailable("connection reset"), socket);
        assert!(gone.to_string().starts_with("daemon not running at /x.sock"), "{gone}");
        let mut degraded = tonic::Status::unavailable("degraded: no container engine at /var/run/docker.sock");
        degraded.metadata_mut().insert(baaaht_proto::CORRELATION_ID_HEADER, "c-1".parse().expect("ascii"));
        let degraded = CliError::from_status(degraded, socket);
        assert!(degraded.to_string().ends_with("degraded: no container engine at /var/run/docker.sock"), "{degraded}");
    }
}
