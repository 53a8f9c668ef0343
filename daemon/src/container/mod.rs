//! Container engines: which one is reachable, and (with the container runtime) everything the
//! daemon does with containers. Only this module talks to the engine.
//!
//! The daemon serves without an engine: status then reports "degraded: no container engine at
//! …" and container work is refused with that sentence, until a probe finds one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::RuntimeChoice;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    Docker,
    Podman,
}

impl EngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Docker => "docker",
            EngineKind::Podman => "podman",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineInfo {
    pub kind: EngineKind,
    pub socket: PathBuf,
    pub version: String,
    /// The Engine API version negotiated with the engine (1.41 for Debian's dockerd 20.10).
    pub api_version: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineStatus {
    /// The first probe has not finished yet.
    Probing,
    Ready(EngineInfo),
    Unavailable {
        reason: String,
    },
}

impl EngineStatus {
    /// The sentence shown in status and given to callers whose container work is refused.
    pub fn degraded_reason(&self) -> Option<String> {
        match self {
            EngineStatus::Ready(_) => None,
            EngineStatus::Probing => Some("container engine: still probing".into()),
            EngineStatus::Unavailable { reason } => Some(format!("degraded: {reason}")),
        }
    }
}

/// The engine sockets to try for `choice`, in order (issue #3's runtime selection).
pub fn candidate_sockets(choice: RuntimeChoice, env: impl Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut out = vec![];
    let docker_host = env("DOCKER_HOST").and_then(|host| host.strip_prefix("unix://").map(PathBuf::from));
    let podman_user = env("XDG_RUNTIME_DIR").map(|dir| Path::new(&dir).join("podman/podman.sock"));
    if matches!(choice, RuntimeChoice::Auto | RuntimeChoice::Docker) {
        out.extend(docker_host);
        out.push(PathBuf::from("/var/run/docker.sock"));
    }
    if matches!(choice, RuntimeChoice::Auto | RuntimeChoice::Podman) {
        out.push(PathBuf::from("/run/podman/podman.sock"));
        out.extend(podman_user);
    }
    let mut seen = vec![];
    out.retain(|path| {
        let new = !seen.contains(path);
        seen.push(path.clone());
        new
    });
    out
}

/// Connects to the first candidate that answers, negotiating the API version.
pub async fn probe(choice: RuntimeChoice) -> EngineStatus {
    let candidates = candidate_sockets(choice, |key| std::env::var(key).ok());
    let mut problems = vec![];
    for socket in &candidates {
        if !socket.exists() {
            continue;
        }
        match probe_socket(socket).await {
            Ok(info) => return EngineStatus::Ready(info),
            Err(error) => problems.push(format!("{}: {error}", socket.display())),
        }
    }
    let tried: Vec<String> = candidates.iter().map(|path| path.display().to_string()).collect();
    let mut reason = format!(
        "no container engine at {}; start dockerd (or podman.socket) or set container.runtime",
        tried.join(", ")
    );
    if !problems.is_empty() {
        reason.push_str(&format!(" ({})", problems.join("; ")));
    }
    EngineStatus::Unavailable { reason }
}

async fn probe_socket(socket: &Path) -> Result<EngineInfo, bollard::errors::Error> {
    let path = socket.to_string_lossy();
    let docker = Docker::connect_with_unix(&path, 5, bollard::API_DEFAULT_VERSION)?;
    let docker = docker.negotiate_version().await?;
    let version = docker.version().await?;
    let is_podman =
        version.components.iter().flatten().any(|component| component.name.to_ascii_lowercase().contains("podman"))
            || version.platform.as_ref().is_some_and(|platform| platform.name.to_ascii_lowercase().contains("podman"));
    Ok(EngineInfo {
        kind: if is_podman { EngineKind::Podman } else { EngineKind::Docker },
        socket: socket.to_path_buf(),
        version: version.version.unwrap_or_default(),
        api_version: docker.client_version().to_string(),
    })
}

/// Probes at start, then every 10 s while no engine answers and every 60 s while one does,
/// publishing each change on `status`.
pub async fn watch_engine(choice: RuntimeChoice, status: watch::Sender<EngineStatus>, cancel: CancellationToken) {
    loop {
        let current = probe(choice).await;
        if *status.borrow() != current {
            match &current {
                EngineStatus::Ready(info) => tracing::info!(
                    engine = info.kind.as_str(),
                    socket = %info.socket.display(),
                    version = %info.version,
                    api_version = %info.api_version,
                    "container engine ready"
                ),
                other => {
                    tracing::warn!(reason = other.degraded_reason().unwrap_or_default(), "container engine unavailable")
                }
            }
            status.send_replace(current.clone());
        }
        let pause = match current {
            EngineStatus::Ready(_) => Duration::from_secs(60),
            _ => Duration::from_secs(10),
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_per_choice() {
        let env = |key: &str| match key {
            "DOCKER_HOST" => Some("unix:///custom/docker.sock".to_string()),
            "XDG_RUNTIME_DIR" => Some("/run/user/1000".to_string()),
            _ => None,
        };
        let paths = |choice| -> Vec<String> {
            candidate_sockets(choice, env).iter().map(|p| p.display().to_string()).collect()
        };
        assert_eq!(
            paths(RuntimeChoice::Auto),
            [
                "/custom/docker.sock",
                "/var/run/docker.sock",
                "/run/podman/podman.sock",
                "/run/user/1000/podman/podman.sock"
            ]
        );
        assert_eq!(paths(RuntimeChoice::Docker), ["/custom/docker.sock", "/var/run/docker.sock"]);
        assert_eq!(paths(RuntimeChoice::Podman), ["/run/podman/podman.sock", "/run/user/1000/podman/podman.sock"]);
        let tcp = |key: &str| (key == "DOCKER_HOST").then(|| "tcp://10.0.0.1:2375".to_string());
        assert_eq!(candidate_sockets(RuntimeChoice::Docker, tcp), [PathBuf::from("/var/run/docker.sock")]);
    }
}
