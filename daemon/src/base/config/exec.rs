//! `exec`'s refused commands: the built-in patterns (spec §8.5) and `tools.blocked_patterns`,
//! compiled once; `config::load` checks the configured ones and the policy engine uses them.

use regex::Regex;

/// A blocked command pattern that is not a regular expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("blocked command pattern `{pattern}` is not a valid regular expression: {reason}")]
pub struct BadPattern {
    pub pattern: String,
    pub reason: String,
}

/// Spec §8.5's refused commands: (pattern, why).
const BUILT_IN_EXEC_PATTERNS: &[(&str, &str)] = &[
    (r"\brm\s+(-[a-zA-Z]*[rRf][a-zA-Z]*\s+)+(/|/\*|~|~/|\$HOME)(\s|$|;|&|\|)", "deletes the whole filesystem or home"),
    (r"(?i)\bdel\s+/[fqs]\b", "forced delete"),
    (r"(?i)\brmdir\s+/s\b", "recursive delete"),
    (r"(?i)(^|[;&|(]\s*)format\s+[a-z]:", "formats a disk"),
    (r"\bmkfs(\.[a-z0-9]+)?\b", "formats a disk"),
    (r"\b(shutdown|reboot|poweroff|halt)\b", "stops the machine"),
    (r"\binit\s+[06]\b", "stops the machine"),
    (r":\s*\(\s*\)\s*\{[^}]*:\s*\|\s*:", "fork bomb"),
    (r">\s*/dev/(sd|hd|vd|nvme|xvd|mmcblk)", "writes to a raw disk"),
    (r"\bdd\b[^;&|]*\bof=/dev/(sd|hd|vd|nvme|xvd|mmcblk)", "writes to a raw disk"),
    (r"\b(curl|wget)\b[^;&]*\|\s*(sudo\s+)?(ba|z|da|k)?sh\b", "runs a downloaded script"),
    (r"\b(docker|podman|nerdctl|crictl|ctr|kubectl)\b", "container engine command"),
    (r"(^|[;&|(`]\s*|\$\(\s*)container\s", "container engine command"),
    (r"\b(sudo|doas|pkexec)\b", "privilege escalation"),
    (r"(^|[;&|(`]\s*|\$\(\s*)su(\s|$)", "privilege escalation"),
    (r"\bchmod\s+([^;&|]*\s)?([ugoa]*\+[rwx]*s|[0-7]?[4-7][0-7]{3})\b", "sets setuid/setgid bits"),
    (r"\bchown\b", "changes file ownership"),
    // curl, wget, git, pip and npm reach the network over HTTP(S) through the runner's proxy,
    // by the context's egress rules (DESIGN.md §10.2); these speak raw protocols it does not carry.
    (
        r"\b(nc|ncat|netcat|socat|ssh|scp|sftp|telnet|ftp)\b",
        "raw network tool: tools reach the network only over HTTP(S) through their proxy (curl, wget, git, pip)",
    ),
    (r"\b(printenv|env)\b", "environment inspection"),
    (r"/proc/[^/\s]+/environ", "environment inspection"),
];

/// Compiles the built-in and the configured (`extra`) patterns, each with why it refuses.
pub fn compile(extra: &[String]) -> Result<Vec<(Regex, String)>, BadPattern> {
    let mut out = vec![];
    for (pattern, why) in BUILT_IN_EXEC_PATTERNS {
        let regex = Regex::new(pattern)
            .map_err(|error| BadPattern { pattern: pattern.to_string(), reason: error.to_string() })?;
        out.push((regex, why.to_string()));
    }
    for pattern in extra {
        let regex =
            Regex::new(pattern).map_err(|error| BadPattern { pattern: pattern.clone(), reason: error.to_string() })?;
        out.push((regex, "configured in tools.blocked_patterns".to_string()));
    }
    Ok(out)
}
