//! `baaaht doctor`: the self-test report of a fresh hardened container, as a checklist.

use std::fmt::Write as _;

use baaaht_proto::selftest::SelfTestReport;
use baaaht_proto::v1;

fn mark(ok: bool) -> &'static str {
    if ok {
        "ok  "
    } else {
        "FAIL"
    }
}

pub fn to_text(role: &str, response: &v1::SelfTestResponse) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "self-test of a {role} container ({}, {} ms, {})",
        response.container, response.duration_ms, response.status
    );
    if let Ok(report) = serde_json::from_str::<SelfTestReport>(&response.report_json) {
        let zero = |caps: &str| caps.trim_start_matches('0').is_empty();
        let network_only_lo = report.interfaces.iter().all(|name| name == "lo");
        let checks = [
            (report.uid == 1000 && report.gid == 1000, format!("runs as {}:{}", report.uid, report.gid)),
            (zero(&report.cap_eff) && zero(&report.cap_prm) && zero(&report.cap_bnd), "no capabilities".to_string()),
            (report.no_new_privs, "no_new_privs set".to_string()),
            (report.seccomp == "filter", format!("seccomp {}", report.seccomp)),
            (report.root_read_only, "read-only root filesystem".to_string()),
            (report.tmp_writable, "writable /tmp".to_string()),
            (network_only_lo, format!("network interfaces: {}", report.interfaces.join(", "))),
            (report.unshare_blocked, "unshare refused".to_string()),
            (report.mount_blocked, "mount refused".to_string()),
            (report.ptrace_blocked, "ptrace refused".to_string()),
            (report.daemon_socket, "its own daemon socket answers".to_string()),
        ];
        for (ok, what) in checks {
            let _ = writeln!(out, "  [{}] {what}", mark(ok));
        }
        let gvisor = report.in_gvisor();
        let kernel = if gvisor {
            format!("gVisor's kernel ({}; kernel log: {})", report.kernel, report.kernel_log)
        } else {
            format!("the host's kernel ({})", report.kernel)
        };
        let expected = (response.isolation == "gvisor") == gvisor;
        let _ = writeln!(out, "  [{}] started under {}, runs on {kernel}", mark(expected), response.isolation);
        if let Some(probe) = &report.probe {
            let _ = writeln!(out, "  [{}] {probe} unreachable ({})", mark(!report.probe_reachable), report.probe_error);
        }
        if let Some(llm) = &report.llm {
            if llm.error.is_empty() {
                let estimated = if llm.estimated { ", estimated" } else { "" };
                let _ = writeln!(
                    out,
                    "  [ok  ] {} answered through the daemon: {:?} ({} in / {} out tokens{estimated})",
                    llm.provider,
                    llm.text.trim(),
                    llm.input_tokens,
                    llm.output_tokens
                );
            } else {
                let _ = writeln!(out, "  [FAIL] {}: {}", llm.model, llm.error);
            }
        }
    }
    if response.gvisor_probed {
        if response.gvisor_problem.is_empty() {
            let _ = writeln!(out, "  [ok  ] gVisor starts a sandbox ({} ms)", response.gvisor_probe_ms);
        } else {
            let _ = writeln!(out, "  [FAIL] gVisor does not start sandboxes: {}", response.gvisor_problem);
        }
    }
    if !response.undo.is_empty() {
        let _ = writeln!(out, "  [{}] {}", mark(response.undo_ok), response.undo);
    }
    if !response.tiers.is_empty() {
        let _ = writeln!(out, "isolation tiers (container.isolation):");
        for tier in &response.tiers {
            let got = if tier.tier.is_empty() { "refused" } else { tier.tier.as_str() };
            let why = if tier.reason.is_empty() { String::new() } else { format!(": {}", tier.reason) };
            let _ = writeln!(out, "  {:<11} {:<7} (asked {}){why}", tier.role, got, tier.asked);
        }
    }
    if response.ok {
        let _ = writeln!(out, "confined as designed");
    } else {
        for problem in &response.problems {
            let _ = writeln!(out, "problem: {problem}");
        }
    }
    out
}
