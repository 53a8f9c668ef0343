//! The chat channels in the compliance suite (`baaaht-gateway-compliance`): each adapter runs
//! its channel's real gateway against the suite's fake daemon and its service's fake, and does
//! what a person does in their chat with the bot. `tests/tests/channels.rs` runs every case
//! against each.

use std::path::Path;
use std::time::Duration;

use baaaht_gateway_compliance::FakeDaemon;

pub mod cut;
pub mod email;
pub mod matrix;
pub mod slack;
pub mod telegram;

/// Starts the gateway `binary` on `daemon`'s socket (any token), its health on `health`, with
/// `args`; it logs to `{binary}.log` in the daemon's folder.
fn start_gateway(daemon: &FakeDaemon, binary: &str, health: &Path, args: &[&str]) -> Result<crate::Running, String> {
    let token = daemon.folder().join("token");
    std::fs::write(&token, "compliance").map_err(|error| format!("cannot write {}: {error}", token.display()))?;
    let mut command = std::process::Command::new(crate::bin(binary));
    command
        .arg("--socket")
        .arg(daemon.socket())
        .arg("--token-file")
        .arg(&token)
        .arg("--health-socket")
        .arg(health)
        .args(args)
        .env("RUST_LOG", "info");
    crate::spawn(command, &daemon.folder().join(format!("{binary}.log"))).map_err(|error| format!("{error:#}"))
}

/// Waits until `check` holds, looking again every `every`, at most `wait`; whether it did. For a
/// person's client that keeps what it reads (Matrix) or a mailbox, which announce nothing to a
/// test.
async fn looked_at_until(wait: Duration, every: Duration, check: impl Fn() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if check() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}
