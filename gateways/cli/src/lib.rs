//! The `baaaht` client: finds the daemon's socket, calls it, and prints what a person needs.
//!
//! Connection and RPC failures become one sentence that says what to do ("daemon not running
//! at PATH; start it with …"), never a stack of transport errors.

pub mod args;
pub mod chat;
pub mod commands;
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
/// Where the system service serves it (the unit's `RuntimeDirectory`), open to its client
/// group; its data dir (`/var/lib/baaaht`, 0700) links there for the daemon's own user.
pub const SERVICE_SOCKET: &str = "/run/baaaht/orchestrator.sock";

/// The socket used when neither --socket nor BAAAHT_SOCKET is given: the data dir's (from
/// BAAAHT_DATA or the per-user default), or the system service's when only that one exists.
pub fn default_socket(env: impl Fn(&str) -> Option<String>) -> PathBuf {
    let data_dir = env("BAAAHT_DATA")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .or_else(|| env("XDG_DATA_HOME").filter(|v| v.starts_with('/')).map(|v| Path::new(&v).join("baaaht")))
        .or_else(|| env("HOME").filter(|v| !v.is_empty()).map(|home| Path::new(&home).join(".local/share/baaaht")));
    let user_socket = data_dir.map(|dir| dir.join(SOCKET_IN_DATA_DIR));
    let service_socket = [PathBuf::from(SERVICE_SOCKET), Path::new("/var/lib/baaaht").join(SOCKET_IN_DATA_DIR)]
        .into_iter()
        .find(|path| path.exists());
    match (user_socket, service_socket) {
        (Some(path), _) if path.exists() || env("BAAAHT_DATA").is_some() => path,
        (_, Some(service)) => service,
        (Some(path), None) => path,
        (None, None) => PathBuf::from(SERVICE_SOCKET),
    }
}

/// What a person refused by the socket's permissions can do about it: what the system says
/// about them and the socket, in a sentence.
fn permission_advice(socket: &Path) -> String {
    use baaaht_proto::host;
    use std::os::unix::fs::MetadataExt;
    let me = host::my_uid();
    let my_name = me.and_then(host::user_name).unwrap_or_else(|| "YOUR-USER".into());
    let Ok(meta) = std::fs::metadata(socket) else {
        // The socket cannot even be looked at: a folder on the way is closed.
        let mut on_the_way: Vec<&Path> = socket.ancestors().collect();
        on_the_way.reverse();
        let closed = on_the_way.into_iter().find_map(|path| {
            let refused =
                std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied);
            refused.then(|| path.parent()).flatten()
        });
        let place = closed.map(|folder| format!(" ({})", folder.display())).unwrap_or_default();
        return format!(
            "a folder on the way to it is closed to you{place}; the service's socket for other users is \
             {SERVICE_SOCKET}: pass --socket {SERVICE_SOCKET} (or set BAAAHT_SOCKET), or run as the daemon's user"
        );
    };
    let Some(group) = host::group_with_id(meta.gid()) else {
        return format!("the socket is open to its owner and group {} only: run as the daemon's user", meta.gid());
    };
    let held = host::process_groups("self");
    let facts = Facts {
        group: &group.name,
        holds_group: held.contains(&group.gid),
        listed_in_group: group.members.contains(&my_name),
        group_may_use: meta.mode() & 0o060 == 0o060,
    };
    advice(&facts, &my_name)
}

/// What [`permission_advice`] found.
struct Facts<'a> {
    group: &'a str,
    /// This process holds the socket's group.
    holds_group: bool,
    /// `/etc/group` lists this user in it.
    listed_in_group: bool,
    /// The socket's mode lets its group read and write it.
    group_may_use: bool,
}

fn advice(facts: &Facts<'_>, me: &str) -> String {
    let group = facts.group;
    match facts {
        Facts { holds_group: true, group_may_use: false, .. } => {
            format!("you are in group {group}, but the socket is not open to its group: ask the admin to restart the daemon")
        }
        Facts { holds_group: true, .. } => format!(
            "you are in group {group}, but the daemon does not let that group in: its admin sets \
             orchestrator.socket.client_group: {group}"
        ),
        Facts { listed_in_group: true, .. } => format!(
            "you were added to group {group} after this login: log in again (or run `newgrp {group}`) so that your \
             session holds it"
        ),
        Facts { .. } => format!(
            "the socket is open to group {group} only: ask the admin to add you (`usermod -aG {group} {me}`), then \
             log in again; or run as the daemon's user"
        ),
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
    #[error("permission denied on {}: {advice}", path.display())]
    SocketPermission { path: PathBuf, advice: String },
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
    /// Ctrl-C: the turn was stopped; what it wrote is kept in the session.
    #[error("stopped; what was written is kept in the session: baaaht sessions show {session}")]
    Interrupted { session: String },
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
            // As a shell reports a process ended by SIGINT.
            CliError::Interrupted { .. } => 130,
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
        ConnectError::PermissionDenied { path } => {
            let advice = permission_advice(&path);
            CliError::SocketPermission { path, advice }
        }
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
        if !Path::new("/var/lib/baaaht/data/ipc/orchestrator.sock").exists() && !Path::new(SERVICE_SOCKET).exists() {
            assert_eq!(path, PathBuf::from("/nonexistent-home/.local/share/baaaht/data/ipc/orchestrator.sock"));
        }
    }

    #[test]
    fn a_refused_person_is_told_what_keeps_them_out() {
        let facts =
            |holds_group, listed_in_group| Facts { group: "family", holds_group, listed_in_group, group_may_use: true };
        let told = advice(&facts(false, false), "bob");
        assert!(told.contains("ask the admin to add you (`usermod -aG family bob`), then log in again"), "{told}");
        let told = advice(&facts(false, true), "bob");
        assert!(told.contains("you were added to group family after this login: log in again"), "{told}");
        let told = advice(&facts(true, true), "bob");
        assert!(told.contains("sets orchestrator.socket.client_group: family"), "{told}");
        let socket = tempfile::tempdir().expect("tempdir").path().join("gone/orchestrator.sock");
        // A missing folder is no closed one; root passes everywhere else.
        assert!(permission_advice(&socket).contains("a folder on the way to it is closed to you; the service's"));
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
