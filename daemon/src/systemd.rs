//! The systemd notification protocol (`sd_notify`): `READY=1` once the socket serves,
//! `WATCHDOG=1` pings while the daemon's runtime runs (`WatchdogSec=` in the unit), `STATUS=`
//! lines with what it serves, `STOPPING=1` on shutdown. A no-op outside systemd (no
//! `$NOTIFY_SOCKET`).

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. `"READY=1\nSTATUS=serving"`) to `$NOTIFY_SOCKET` if it is set.
pub fn notify(state: &str) {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let target = target.to_string_lossy().into_owned();
    let result = (|| -> std::io::Result<()> {
        let socket = UnixDatagram::unbound()?;
        let address = match target.strip_prefix('@') {
            // An abstract socket: the name follows a NUL byte.
            Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
            None => SocketAddr::from_pathname(&target)?,
        };
        socket.send_to_addr(state.as_bytes(), &address)?;
        Ok(())
    })();
    if let Err(error) = result {
        tracing::warn!(notify_socket = %target, %error, "cannot notify systemd");
    }
}

/// The watchdog interval systemd asks for (`$WATCHDOG_USEC`, for this process when
/// `$WATCHDOG_PID` names one), if any.
pub fn watchdog_interval() -> Option<std::time::Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok()? != std::process::id() {
            return None;
        }
    }
    (usec > 0).then(|| std::time::Duration::from_micros(usec))
}

/// Pings the watchdog at half its interval (when systemd set one) and refreshes `STATUS=`
/// with `status()` every time, or every 30 s without a watchdog, until `cancel`. A stalled
/// runtime stops the pings, and systemd restarts the daemon.
pub async fn keep_alive(status: impl Fn() -> String, cancel: tokio_util::sync::CancellationToken) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    let watchdog = watchdog_interval();
    let every = watchdog.map_or(std::time::Duration::from_secs(30), |interval| interval / 2);
    crate::every(tokio::time::Instant::now(), every, &cancel, || {
        let status = status();
        let message =
            if watchdog.is_some() { format!("WATCHDOG=1\nSTATUS={status}") } else { format!("STATUS={status}") };
        notify(&message);
        std::future::ready(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_to_the_notify_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let receiver = UnixDatagram::bind(&path).expect("bind");
        // The only test in this crate that sets NOTIFY_SOCKET.
        std::env::set_var("NOTIFY_SOCKET", &path);
        notify("READY=1");
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buffer = [0u8; 64];
        let n = receiver.recv(&mut buffer).expect("recv");
        assert_eq!(&buffer[..n], b"READY=1");
    }
}
