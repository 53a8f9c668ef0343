//! The schema of `mount-allowlist.json` (spec §13.6): host folders a Coder's tool containers
//! may mount, and the patterns that are never mounted whatever the allowlist says.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Patterns that are always blocked; a file's own `blockedPatterns` add to these, never remove.
pub const BUILT_IN_BLOCKED_PATTERNS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".gcloud",
    ".env",
    "credentials",
    ".kube",
    ".docker",
    "*.pem",
    "*.key",
    "id_rsa",
    "id_ed25519",
    ".netrc",
    ".config/baaaht",
    ".local/share/baaaht",
    ".bash_history",
    ".zsh_history",
];

/// Where container engines put their sockets; a container must never reach one.
pub const ENGINE_SOCKETS: &[&str] =
    &["/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock", "/var/run/podman/podman.sock"];

/// The daemon's runtime folder (systemd's `RuntimeDirectory=baaaht`).
pub const RUNTIME_DIR: &str = "/run/baaaht";

/// The host's own folders: its kernel's views (`/proc`, `/sys`, `/dev`), its configuration
/// and boot files, its runtime sockets (the engines' and containerd's among them) and the
/// engines' storage, where a container's mount would reach every other container's files.
const SYSTEM_FOLDERS: &[&str] = &[
    "/proc",
    "/sys",
    "/dev",
    "/etc",
    "/boot",
    "/run",
    "/var/run",
    "/var/lib/docker",
    "/var/lib/containers",
    "/var/lib/containerd",
];

/// Why the host folder `host` may never be mounted into a container, whatever an allowlist
/// says: the whole filesystem, an engine socket or a folder holding one (`engine_socket` is
/// `container.socket`, empty for the usual places), the daemon's runtime folder, one of the
/// host's [`SYSTEM_FOLDERS`], or the data dir, a folder inside it or one holding it. Paths are
/// compared as given and resolved.
pub fn forbidden_mount(host: &Path, data_dir: &Path, engine_socket: &str) -> Option<String> {
    let resolved = |path: &Path| std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()); // silent-ok: a missing path is compared as written
    let hosts = [host.to_path_buf(), resolved(host)];
    let related = |other: &Path| {
        let others = [other.to_path_buf(), resolved(other)];
        hosts.iter().any(|h| others.iter().any(|o| o.starts_with(h) || h.starts_with(o)))
    };
    if hosts.iter().any(|h| h == Path::new("/")) {
        return Some("it is the whole filesystem".into());
    }
    let sockets = ENGINE_SOCKETS.iter().copied().chain((!engine_socket.is_empty()).then_some(engine_socket));
    for socket in sockets {
        let socket = Path::new(socket);
        let others = [socket.to_path_buf(), resolved(socket)];
        if hosts.iter().any(|h| others.iter().any(|o| o.starts_with(h))) {
            return Some(format!("it is or holds the container engine's socket {}", socket.display()));
        }
    }
    if related(Path::new(RUNTIME_DIR)) {
        return Some(format!("it is, holds or lies in the daemon's runtime folder {RUNTIME_DIR}"));
    }
    if let Some(system) = SYSTEM_FOLDERS.iter().find(|folder| related(Path::new(folder))) {
        return Some(format!("it is, holds or lies in the host's system folder {system}"));
    }
    if related(data_dir) {
        return Some(format!("it is, holds or lies in the data dir {}", data_dir.display()));
    }
    None
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MountAllowlist {
    pub allowed_mounts: Vec<AllowedMount>,
    pub blocked_patterns: Vec<String>,
}

impl Default for MountAllowlist {
    fn default() -> Self {
        MountAllowlist {
            allowed_mounts: vec![],
            blocked_patterns: BUILT_IN_BLOCKED_PATTERNS.iter().map(|p| p.to_string()).collect(),
        }
    }
}

impl MountAllowlist {
    /// Adds the built-in blocked patterns a file left out: they cannot be switched off.
    pub(crate) fn with_built_in_patterns(mut self) -> Self {
        for pattern in BUILT_IN_BLOCKED_PATTERNS {
            if !self.blocked_patterns.iter().any(|existing| existing == pattern) {
                self.blocked_patterns.push(pattern.to_string());
            }
        }
        self
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AllowedMount {
    /// Absolute host path.
    pub host_path: String,
    /// Absolute path inside the container, e.g. `/project/web`.
    pub container_path: String,
    #[serde(default)]
    pub options: MountMode,
    #[serde(rename = "type", default)]
    pub kind: MountKind,
    /// Whose folder it is: a Coder mounts only what is its context's or shared with it.
    #[serde(default)]
    pub owner: MountOwner,
}

/// Whose an allowlisted folder is (spec §11.3: a container for one user never sees another's
/// data; non-admin contexts get read-only access to shared resources).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum MountOwner {
    /// The administrators' (`system.admin_users`): what an entry without `owner` is.
    #[default]
    Admins,
    /// Shared with every context: read-write for administrators' contexts as its `options`
    /// say, read-only for everyone else's.
    Everyone,
    /// One user's (`user:ID`) or one group's (`group:ID`): mounted in that context only.
    User(String),
    Group(String),
}

impl TryFrom<String> for MountOwner {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        let id = |id: &str| {
            let valid = !id.is_empty()
                && id.len() <= 128
                && id.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
            valid.then(|| id.to_string())
        };
        match value.split_once(':') {
            None if value == "admins" => Ok(MountOwner::Admins),
            None if value == "everyone" => Ok(MountOwner::Everyone),
            Some(("user", user)) if id(user).is_some() => Ok(MountOwner::User(user.to_string())),
            Some(("group", group)) if id(group).is_some() => Ok(MountOwner::Group(group.to_string())),
            _ => Err(format!(
                "owner `{value}`: give `admins`, `everyone`, `user:ID` or `group:ID` (whose folder it is: only \
                 that context's Coder mounts it)"
            )),
        }
    }
}

impl From<MountOwner> for String {
    fn from(owner: MountOwner) -> String {
        match owner {
            MountOwner::Admins => "admins".into(),
            MountOwner::Everyone => "everyone".into(),
            MountOwner::User(id) => format!("user:{id}"),
            MountOwner::Group(id) => format!("group:{id}"),
        }
    }
}

impl std::fmt::Display for MountOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from(self.clone()))
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MountMode {
    #[default]
    Ro,
    Rw,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MountKind {
    /// A project a Coder may work on (read-write when `options` is `rw`).
    Project,
    /// Read-only reference material.
    #[default]
    Reference,
}
