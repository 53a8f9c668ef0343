//! How a process the daemon started learns it should stop: SIGTERM or SIGINT, or — for a host
//! child of a daemon that died (`--parent PID`) — its parent no longer being that daemon.

use std::time::Duration;

/// Resolves when the process should stop, with why in a few words.
pub async fn stop_requested(parent: Option<u32>) -> &'static str {
    let Ok(mut terminate) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
        return "SIGTERM cannot be watched";
    };
    let orphaned = async {
        let Some(parent) = parent else { return std::future::pending().await };
        loop {
            if std::os::unix::process::parent_id() != parent {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "SIGINT",
        () = orphaned => "the daemon that started it is gone",
    }
}

/// A Unix socket at `path` (a stale one replaced) that the daemon supervising a gateway can
/// connect to: open to all, as the folder around it (the daemon's, or handed to the gateway's
/// container and reached by the daemon through the containers' group) keeps others out.
pub fn bind_socket(path: &std::path::Path) -> Result<tokio::net::UnixListener, String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("cannot replace {}: {error}", path.display()))
        }
        _ => {}
    }
    let listener = tokio::net::UnixListener::bind(path)
        .map_err(|error| format!("cannot listen on {}: {error}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .map_err(|error| format!("cannot set the permissions of {}: {error}", path.display()))?;
    Ok(listener)
}

/// Serves `health` (a gateway's `ContainerHealth`) on a Unix socket at `path`, a stale one
/// replaced, until the process ends: how the daemon that supervises a gateway asks after it.
pub fn serve_health<S: crate::v1::container_health_server::ContainerHealth>(
    health: std::sync::Arc<S>,
    path: &std::path::Path,
) -> Result<tokio::task::JoinHandle<()>, String> {
    let listener = bind_socket(path)?;
    let server = tonic::transport::Server::builder()
        .add_service(crate::v1::container_health_server::ContainerHealthServer::from_arc(health))
        .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener));
    Ok(tokio::spawn(async move {
        if let Err(error) = server.await {
            eprintln!("the health socket stopped: {error}");
        }
    }))
}

/// Makes ring this process's TLS provider. The workspace's crates are built with more than one
/// (matrix-sdk's HTTP client brings aws-lc-rs), and rustls then will not choose for a library
/// that asks for the default; every binary calls this first.
pub fn use_ring_for_tls() {
    // silent-ok: a provider already chosen (by an earlier call) stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A gateway binary's logging: to standard error (which a daemon-run gateway shares with the
/// daemon), filtered by `RUST_LOG`, in colour only on a terminal.
pub fn log_to_stderr() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// A gateway binary's exit: success, or `program: why` on standard error and failure.
pub fn exit(program: &str, outcome: Result<(), String>) -> std::process::ExitCode {
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{program}: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A socket's permissions written in octal (`600`), for a service's `--socket-mode`.
pub fn parse_mode(text: &str) -> Result<u32, String> {
    u32::from_str_radix(text, 8)
        .ok()
        .filter(|mode| *mode <= 0o777)
        .ok_or_else(|| format!("`{text}` is not an octal mode such as 600"))
}

/// Listens on the Unix socket `socket` with permissions `mode`, replacing a stale one left by an
/// earlier run: how a service the daemon runs (the LLM gateway, the speech service) serves.
pub fn listen(socket: &std::path::Path, mode: u32) -> Result<tokio::net::UnixListener, String> {
    use std::os::unix::fs::PermissionsExt as _;
    match std::fs::remove_file(socket) {
        Ok(()) => tracing::info!(socket = %socket.display(), "replaced a stale socket"),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(format!("cannot replace {}: {error}", socket.display())),
    }
    let listener = tokio::net::UnixListener::bind(socket)
        .map_err(|error| format!("cannot listen on {}: {error}", socket.display()))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(mode))
        .map_err(|error| format!("cannot set {}'s mode: {error}", socket.display()))?;
    Ok(listener)
}

#[cfg(test)]
mod tls_tests {
    #[test]
    fn a_library_asking_for_the_default_tls_provider_gets_ring() {
        super::use_ring_for_tls();
        super::use_ring_for_tls();
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let ring = rustls::crypto::ring::default_provider();
        assert_eq!(config.crypto_provider().cipher_suites.len(), ring.cipher_suites.len());
    }
}
