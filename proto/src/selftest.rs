//! The report `baaaht-agent self-test` prints (as JSON) from inside a container, and the
//! daemon reads back. Shared here so both sides agree on it.

use serde::{Deserialize, Serialize};

/// What a container's process sees of its own confinement.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelfTestReport {
    pub uid: u32,
    pub gid: u32,
    /// Effective, permitted and bounding capability sets, hex as in /proc/self/status.
    pub cap_eff: String,
    pub cap_prm: String,
    pub cap_bnd: String,
    pub no_new_privs: bool,
    /// "disabled", "strict" or "filter".
    pub seccomp: String,
    pub root_read_only: bool,
    pub tmp_writable: bool,
    /// Network interfaces, from /sys/class/net.
    pub interfaces: Vec<String>,
    /// The address probed with a TCP connect, if one was given.
    pub probe: Option<String>,
    /// Whether that connect succeeded.
    pub probe_reachable: bool,
    pub probe_error: String,
    /// `unshare -r true` failed.
    pub unshare_blocked: bool,
    /// `mount -t tmpfs` failed.
    pub mount_blocked: bool,
    /// `ptrace(PTRACE_TRACEME)` failed.
    pub ptrace_blocked: bool,
    /// The daemon's socket at /run/baaaht/daemon.sock accepted a connection.
    pub daemon_socket: bool,
    /// The kernel the container sees: the first line of /proc/version (gVisor's reads
    /// `Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016`).
    #[serde(default)]
    pub kernel: String,
    /// The first line of the kernel log (`dmesg`), when the container may read it: gVisor's
    /// starts `Starting gVisor...`; the host's is closed to uid 1000.
    #[serde(default)]
    pub kernel_log: String,
    /// The completion streamed through StreamLLM, when one was asked for.
    pub llm: Option<LlmCheck>,
    /// Every expectation that does not hold, as sentences; empty when all hold.
    pub problems: Vec<String>,
}

/// What one short completion streamed from inside the container delivered.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LlmCheck {
    pub model: String,
    /// The provider that answered (after any fallback).
    pub provider: String,
    pub text: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub estimated: bool,
    pub stop_reason: String,
    /// Empty when the answer arrived.
    pub error: String,
}

impl SelfTestReport {
    /// The container runs on gVisor's kernel, as its own kernel log says.
    pub fn in_gvisor(&self) -> bool {
        self.kernel_log.contains("Starting gVisor")
    }

    /// Fills `problems` from the other fields: the expectations of DESIGN.md §5.4.
    pub fn judge(&mut self) {
        let mut problems = vec![];
        if self.uid != 1000 || self.gid != 1000 {
            problems.push(format!("runs as {}:{}, not 1000:1000", self.uid, self.gid));
        }
        for (name, value) in [("effective", &self.cap_eff), ("permitted", &self.cap_prm), ("bounding", &self.cap_bnd)] {
            if value.trim_start_matches('0').is_empty() {
                continue;
            }
            problems.push(format!("{name} capabilities are {value}, not empty"));
        }
        if !self.no_new_privs {
            problems.push("no_new_privs is not set".into());
        }
        if self.seccomp != "filter" {
            problems.push(format!("seccomp is {}, not filter", self.seccomp));
        }
        if !self.root_read_only {
            problems.push("the root filesystem is writable".into());
        }
        if !self.tmp_writable {
            problems.push("/tmp is not writable".into());
        }
        let extra: Vec<&str> = self.interfaces.iter().map(String::as_str).filter(|name| *name != "lo").collect();
        if !extra.is_empty() {
            problems.push(format!("network interfaces besides lo: {}", extra.join(", ")));
        }
        if self.probe_reachable {
            problems.push(format!("{} is reachable", self.probe.as_deref().unwrap_or("the probe address")));
        }
        for (blocked, what) in
            [(self.unshare_blocked, "unshare"), (self.mount_blocked, "mount"), (self.ptrace_blocked, "ptrace")]
        {
            if !blocked {
                problems.push(format!("{what} is allowed"));
            }
        }
        if let Some(llm) = self.llm.as_ref().filter(|llm| !llm.error.is_empty()) {
            problems.push(format!("no completion from {}: {}", llm.model, llm.error));
        }
        self.problems = problems;
    }
}
