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
