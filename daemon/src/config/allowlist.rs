//! The schema of `mount-allowlist.json` (spec §13.6): host folders a Coder's tool containers
//! may mount, and the patterns that are never mounted whatever the allowlist says.

use serde::{Deserialize, Serialize};

/// Patterns that are always blocked; a file's own `blockedPatterns` add to these, never remove.
pub const BUILT_IN_BLOCKED_PATTERNS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".gcloud",
    ".env",
    "credentials",
    ".kube",
    ".docker",
    "*.pem",
    "*.key",
    "id_rsa",
    "id_ed25519",
    ".netrc",
    ".config/baaaht",
    ".local/share/baaaht",
    ".bash_history",
    ".zsh_history",
];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MountAllowlist {
    pub allowed_mounts: Vec<AllowedMount>,
    pub blocked_patterns: Vec<String>,
}

impl Default for MountAllowlist {
    fn default() -> Self {
        MountAllowlist {
            allowed_mounts: vec![],
            blocked_patterns: BUILT_IN_BLOCKED_PATTERNS.iter().map(|p| p.to_string()).collect(),
        }
    }
}

impl MountAllowlist {
    /// Adds the built-in blocked patterns a file left out: they cannot be switched off.
    pub(crate) fn with_built_in_patterns(mut self) -> Self {
        for pattern in BUILT_IN_BLOCKED_PATTERNS {
            if !self.blocked_patterns.iter().any(|existing| existing == pattern) {
                self.blocked_patterns.push(pattern.to_string());
            }
        }
        self
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AllowedMount {
    /// Absolute host path.
    pub host_path: String,
    /// Absolute path inside the container, e.g. `/project/web`.
    pub container_path: String,
    #[serde(default)]
    pub options: MountMode,
    #[serde(rename = "type", default)]
    pub kind: MountKind,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MountMode {
    #[default]
    Ro,
    Rw,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MountKind {
    /// A project a Coder may work on (read-write when `options` is `rw`).
    Project,
    /// Read-only reference material.
    #[default]
    Reference,
}
