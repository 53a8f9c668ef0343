//! gVisor that stops starting sandboxes while the daemon runs, on the real daemon and engine:
//! roles set to `auto` go on under runc, `doctor` names the cause, a role set to `gvisor` is
//! refused with what to fix, and everything is back on gVisor once it works again.
//!
//! A test binary of its own: it makes the host's `runsc` unusable for a while, which no test
//! of another binary may meet: `scripts/test-lanes.py` runs it alone.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use baaaht_proto::client;
use baaaht_proto::v1;
use baaaht_tests::{bin, DaemonOptions, TestDaemon};
use serde_json::json;

const RUNSC: &str = "/usr/bin/runsc";
const GVISOR_KERNEL: &str = "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016";

/// `runsc` made unusable (not executable) until dropped, whatever the test does meanwhile.
struct Unusable;

impl Unusable {
    fn new() -> Unusable {
        set_mode(0o644);
        Unusable
    }
}

impl Drop for Unusable {
    fn drop(&mut self) {
        set_mode(0o755);
    }
}

fn set_mode(mode: u32) {
    std::fs::set_permissions(RUNSC, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|error| panic!("chmod {mode:o} {RUNSC} (the test runs as root): {error}"));
}

/// `baaaht doctor --role ROLE --session SESSION`: what it printed (stdout, then stderr) and
/// whether it succeeded.
fn doctor(daemon: &TestDaemon, role: &str, session: &str) -> (String, bool) {
    let output = Command::new(bin("baaaht"))
        .args(["doctor", "--role", role, "--session", session])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht doctor runs");
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (said, output.status.success())
}

/// The kernel a Coder's `exec` runs on, from a new Coder of `session` (its agent and tool
/// containers start now, under the tier they get now).
fn kernel_of_a_new_coder(daemon: &TestDaemon, rt: &tokio::runtime::Runtime, session: &str) -> String {
    let lingering = daemon.lingering_agent("coder", Some(session), &[]).expect("a Coder container starts");
    let mut coder = rt.block_on(client::connect(&lingering.socket, lingering.options())).expect("connect as the agent");
    let request = v1::ToolRequest {
        tool: "exec".into(),
        params_json: json!({"command": "head -n 1 /proc/version"}).to_string(),
        ..v1::ToolRequest::default()
    };
    let answer = rt
        .block_on(coder.agents.request_tool_execution(request))
        .unwrap_or_else(|status| panic!("exec: {status:?}"))
        .into_inner();
    assert!(answer.content.starts_with("exit code 0\n"), "the Coder's command ran: {}", answer.content);
    drop(lingering);
    answer.content
}

#[test]
fn when_gvisor_stops_starting_sandboxes_auto_goes_on_under_runc_and_doctor_names_the_cause() {
    assert!(Path::new(RUNSC).is_file(), "{RUNSC} is missing: scripts/test installs Debian's runsc");
    set_mode(0o755);
    let rt = baaaht_tests::runtime();
    let mut options = DaemonOptions::default();
    let isolation = json!({"tool": "auto", "coder": "auto", "worker": "gvisor"});
    options.env.push(("BAAAHT__CONTAINER__ISOLATION".into(), isolation.to_string()));
    let daemon = TestDaemon::start(options).expect("daemon starts");

    // Working: the Coder's commands run on gVisor's kernel.
    let before = kernel_of_a_new_coder(&daemon, &rt, "before");
    assert!(before.contains(GVISOR_KERNEL), "on gVisor while it works: {before}");

    let unusable = Unusable::new();
    // A new Coder's containers start under runc: its command runs, on the host's kernel.
    let during = kernel_of_a_new_coder(&daemon, &rt, "during");
    let host = std::fs::read_to_string("/proc/version").expect("the host's /proc/version");
    assert!(!during.contains(GVISOR_KERNEL) && during.contains(host.trim()), "on runc meanwhile: {during}");
    let log = daemon.log_text();
    assert_eq!(log.matches("gVisor stopped starting sandboxes").count(), 1, "said once in the log:\n{log}");
    assert!(log.contains("is not executable: chmod 755 it"), "the log names the cause:\n{log}");

    // doctor names the cause, runs its own test under runc and says where each role runs.
    let (said, ok) = doctor(&daemon, "coder", "doctor-during");
    assert!(!ok, "doctor fails while gVisor does not start sandboxes:\n{said}");
    let cause = format!("the engine's runsc program {RUNSC} is not executable: chmod 755 it");
    assert!(said.contains(&format!("[FAIL] gVisor does not start sandboxes: {cause}")), "{said}");
    assert!(said.contains("[ok  ] started under runc, runs on the host's kernel"), "{said}");
    assert!(said.contains("coder       runc    (asked auto): gVisor stopped starting sandboxes"), "{said}");
    assert!(said.contains("worker      refused (asked gvisor)"), "{said}");
    // A role that must run under gVisor is refused with what to fix.
    let (said, ok) = doctor(&daemon, "worker", "doctor-worker");
    assert!(!ok, "{said}");
    assert!(
        said.contains("worker containers must run under gVisor (container.isolation.worker is gvisor), but gVisor does not start sandboxes now")
            && said.contains("`baaaht doctor` on the host says why")
            && said.contains("set container.isolation.worker to auto"),
        "{said}"
    );

    // Back: doctor's own sandbox starts, and roles set to auto return to gVisor at once.
    drop(unusable);
    let (said, ok) = doctor(&daemon, "coder", "doctor-after");
    assert!(said.contains("[ok  ] gVisor starts a sandbox ("), "{said}");
    assert!(ok && said.contains("[ok  ] started under gvisor, runs on gVisor's kernel"), "{said}");
    assert!(daemon.log_text().contains("gVisor starts sandboxes again"), "{}", daemon.log_text());
    let after = kernel_of_a_new_coder(&daemon, &rt, "after");
    assert!(after.contains(GVISOR_KERNEL), "on gVisor again: {after}");
}
