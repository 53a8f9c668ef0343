//! `baaaht-agent self-test`: reads the process's own credentials, capabilities and seccomp
//! mode from /proc, tries what a hardened container must refuse (writing to /, unshare, mount,
//! ptrace, reaching a TCP address), and prints a [`SelfTestReport`] as JSON.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use baaaht_proto::selftest::SelfTestReport;

/// Where the daemon's per-container socket is mounted.
pub const DAEMON_SOCKET: &str = "/run/baaaht/daemon.sock";

/// A `Key:\tvalue` line of /proc/self/status.
fn status_field<'a>(status: &'a str, key: &str) -> &'a str {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key).and_then(|rest| rest.strip_prefix(':')))
        .map(str::trim)
        .unwrap_or("")
}

/// The first id of a `Uid:`/`Gid:` line (real, effective, saved, fs).
fn first_id(field: &str) -> u32 {
    field.split_whitespace().nth(1).and_then(|id| id.parse().ok()).unwrap_or(u32::MAX)
}

/// Fills the fields that come from /proc/self/status.
pub fn read_status(status: &str, report: &mut SelfTestReport) {
    report.uid = first_id(status_field(status, "Uid"));
    report.gid = first_id(status_field(status, "Gid"));
    report.cap_eff = status_field(status, "CapEff").to_string();
    report.cap_prm = status_field(status, "CapPrm").to_string();
    report.cap_bnd = status_field(status, "CapBnd").to_string();
    report.no_new_privs = status_field(status, "NoNewPrivs") == "1";
    report.seccomp = match status_field(status, "Seccomp") {
        "0" => "disabled",
        "1" => "strict",
        "2" => "filter",
        _ => "unknown",
    }
    .to_string();
}

/// True when `program args…` ran and exited non-zero (or could not run at all because the
/// system call it needs is refused).
fn fails(program: &str, args: &[&str]) -> bool {
    match Command::new(program).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(status) => !status.success(),
        Err(error) => error.kind() != std::io::ErrorKind::NotFound,
    }
}

/// Runs every check; `probe` is a TCP address that must not be reachable.
pub fn run(probe: Option<SocketAddr>) -> SelfTestReport {
    let mut report = SelfTestReport::default();
    // silent-ok: an unreadable status leaves fields empty, and judge() reports them.
    read_status(&std::fs::read_to_string("/proc/self/status").unwrap_or_default(), &mut report);
    // gVisor's /proc/self/status has no NoNewPrivs line: the kernel is asked instead.
    if let Ok(set) = rustix::thread::no_new_privs() {
        report.no_new_privs = set;
    }

    let marker = format!("/.baaaht-self-test-{}", std::process::id());
    report.root_read_only = std::fs::write(&marker, b"x").is_err();
    if !report.root_read_only {
        // silent-ok: best effort cleanup of our own marker; the report already says it all.
        let _ = std::fs::remove_file(&marker);
    }
    let tmp_marker = std::env::temp_dir().join(format!("baaaht-self-test-{}", std::process::id()));
    report.tmp_writable = std::fs::write(&tmp_marker, b"x").is_ok();
    let mount_point = std::env::temp_dir().join(format!("baaaht-mnt-{}", std::process::id()));
    // silent-ok: if /tmp is not writable the mount attempt below fails either way.
    let _ = std::fs::create_dir(&mount_point);

    let mut interfaces: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    interfaces.sort();
    report.interfaces = interfaces;

    if let Some(address) = probe {
        report.probe = Some(address.to_string());
        match TcpStream::connect_timeout(&address, Duration::from_secs(2)) {
            Ok(_) => report.probe_reachable = true,
            Err(error) => report.probe_error = error.to_string(),
        }
    }

    report.unshare_blocked = fails("unshare", &["-r", "true"]);
    let mount_point_text = mount_point.to_string_lossy().into_owned();
    report.mount_blocked = fails("mount", &["-t", "tmpfs", "none", &mount_point_text]);
    // PTRACE_TRACEME through libc; a refused call returns -1.
    report.ptrace_blocked = fails(
        "python3",
        &["-c", "import ctypes, sys; sys.exit(1 if ctypes.CDLL(None).ptrace(0, 0, None, None) == -1 else 0)"],
    );
    // silent-ok: an unreadable /proc/version leaves the kernel empty, which the daemon reports.
    report.kernel = std::fs::read_to_string("/proc/version").unwrap_or_default().lines().next().unwrap_or("").into();
    report.kernel_log = Command::new("dmesg")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("").trim().to_string())
        .unwrap_or_default();
    report.daemon_socket =
        Path::new(DAEMON_SOCKET).exists() && std::os::unix::net::UnixStream::connect(DAEMON_SOCKET).is_ok();

    // silent-ok: temp files of our own; the report does not depend on their removal.
    let _ = std::fs::remove_file(&tmp_marker);
    let _ = std::fs::remove_dir(&mount_point);
    report.judge();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFINED: &str = "Name:\tbaaaht-agent\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n\
        CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n\
        NoNewPrivs:\t1\nSeccomp:\t2\n";

    #[test]
    fn reads_proc_status_and_judges() {
        let mut report = SelfTestReport::default();
        read_status(CONFINED, &mut report);
        assert_eq!((report.uid, report.gid), (1000, 1000));
        assert_eq!(report.seccomp, "filter");
        assert!(report.no_new_privs);
        report.root_read_only = true;
        report.tmp_writable = true;
        report.interfaces = vec!["lo".into()];
        report.unshare_blocked = true;
        report.mount_blocked = true;
        report.ptrace_blocked = true;
        report.judge();
        assert_eq!(report.problems, Vec::<String>::new());

        let mut host = SelfTestReport::default();
        read_status(
            &CONFINED
                .replace("Seccomp:\t2", "Seccomp:\t0")
                .replace("CapEff:\t0000000000000000", "CapEff:\t000001ffffffffff"),
            &mut host,
        );
        host.interfaces = vec!["eth0".into(), "lo".into()];
        host.judge();
        assert!(host.problems.contains(&"seccomp is disabled, not filter".to_string()), "{:?}", host.problems);
        assert!(host.problems.contains(&"effective capabilities are 000001ffffffffff, not empty".to_string()));
        assert!(host.problems.contains(&"network interfaces besides lo: eth0".to_string()));
        assert!(host.problems.contains(&"unshare is allowed".to_string()));
    }
}
