//! The systemd notification protocol (`sd_notify`): `READY=1` once the socket serves,
//! `WATCHDOG=1` pings while the daemon's runtime runs (`WatchdogSec=` in the unit), `STATUS=`
//! lines with what it serves, `STOPPING=1` on shutdown. A no-op outside systemd (no
//! `$NOTIFY_SOCKET`).

use crate::base::lifetime::{Subsystem, Work};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. `"READY=1\nSTATUS=serving"`) to `$NOTIFY_SOCKET` if it is set.
pub fn notify(state: &str) {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else { return };
    notify_to(&target.to_string_lossy(), state);
}

/// Sends `state` to the notify socket `target` without waiting long: a listener that does not
/// read (a busy or stuck manager, whose queue holds ten datagrams) loses a status or watchdog
/// ping at once, and `READY=1` or `STOPPING=1` after a second, rather than stopping the
/// runtime thread that sent it, which would stop the daemon with it.
fn notify_to(target: &str, state: &str) {
    let result = (|| -> std::io::Result<()> {
        let socket = UnixDatagram::unbound()?;
        if state.starts_with("READY=") || state.starts_with("STOPPING=") {
            socket.set_write_timeout(Some(std::time::Duration::from_secs(1)))?;
        } else {
            socket.set_nonblocking(true)?;
        }
        let address = match target.strip_prefix('@') {
            // An abstract socket: the name follows a NUL byte.
            Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
            None => SocketAddr::from_pathname(target)?,
        };
        socket.send_to_addr(state.as_bytes(), &address)?;
        Ok(())
    })();
    match result {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
            let what = state.lines().next().unwrap_or_default();
            tracing::warn!(notify_socket = %target, what, "systemd's notify socket is full (not read); the notification is dropped");
        }
        Err(error) => tracing::warn!(notify_socket = %target, %error, "cannot notify systemd"),
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
    crate::base::lifetime::every(tokio::time::Instant::now(), every, &cancel, || {
        let status = status();
        let message =
            if watchdog.is_some() { format!("WATCHDOG=1\nSTATUS={status}") } else { format!("STATUS={status}") };
        notify(&message);
        std::future::ready(())
    })
    .await;
}

/// The watchdog's pings and the status line ([`keep_alive`]) as a subsystem.
pub struct KeepAlive {
    pub status: Box<dyn Fn() -> String + Send + Sync>,
}

impl std::fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeepAlive").finish_non_exhaustive()
    }
}

impl Subsystem for KeepAlive {
    fn name(&self) -> &'static str {
        "systemd"
    }

    fn run_until(self: std::sync::Arc<Self>, shutdown: tokio_util::sync::CancellationToken) -> Work {
        Box::pin(async move { keep_alive(|| (self.status)(), shutdown).await })
    }
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

    /// A manager that stops reading (its queue full) once stopped the daemon: the watchdog
    /// ping blocked a runtime thread, and `STOPPING=1` the shutdown itself.
    #[test]
    fn a_notify_socket_nobody_reads_does_not_stop_the_sender() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let receiver = UnixDatagram::bind(&path).expect("bind");
        let target = path.display().to_string();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Far more than the socket queues (ten by default).
            for n in 0..100 {
                notify_to(&target, &format!("STATUS=ping {n}"));
            }
            notify_to(&target, "STOPPING=1");
            // silent-ok: the test may have given up already.
            let _ = done.send(());
        });
        let returned = finished.recv_timeout(std::time::Duration::from_secs(30));
        assert!(returned.is_ok(), "notify blocked on a socket nobody reads");
        // What was queued is intact; the rest was dropped.
        let mut buffer = [0u8; 64];
        let n = receiver.recv(&mut buffer).expect("recv");
        assert_eq!(&buffer[..n], b"STATUS=ping 0");
    }
}
