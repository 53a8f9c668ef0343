//! `security:` in config.yaml (DESIGN.md §10.3): what a turn that read untrusted content may
//! still do, and what the redactor looks for beside the secrets store.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    pub taint: TaintPolicy,
    pub redact: RedactConfig,
}

/// What a tainted turn (one whose agents read a web page, a search result, an untrusted MCP
/// server's answer, someone else's upload or someone else's message) may still do. The
/// defaults withhold every way out.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TaintPolicy {
    /// What an egress rule's `ask` becomes for a host not already allowed: `deny` or `ask`.
    pub egress_ask: EgressInTaint,
    /// An agent's `message`: it reaches every channel of the conversation, not only the one
    /// the turn came from (the turn's answer still reaches the user).
    pub message: Withhold,
    pub schedule_task: Withhold,
    /// Installing a skill.
    pub skill_install: Withhold,
    /// `delegate` to the Coder (the agent with a shell).
    pub delegate_coder: Withhold,
    /// A memory write: `quarantine` (kept, not used until its owner confirms it), `withhold`
    /// or `allow`.
    pub memory_write: MemoryInTaint,
    /// A tool that acts (an MCP tool whose class is `acts`: it sends, pays, shares, deletes or
    /// writes outside the conversation): `ask` a person of the turn's context first (withheld
    /// where nobody can be asked), `withhold`, or `allow`.
    pub acting_tools: ActingInTaint,
}

impl Default for TaintPolicy {
    fn default() -> Self {
        TaintPolicy {
            egress_ask: EgressInTaint::Deny,
            message: Withhold::Withhold,
            schedule_task: Withhold::Withhold,
            skill_install: Withhold::Withhold,
            delegate_coder: Withhold::Withhold,
            memory_write: MemoryInTaint::Quarantine,
            acting_tools: ActingInTaint::Ask,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EgressInTaint {
    Deny,
    Ask,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Withhold {
    Withhold,
    Allow,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ActingInTaint {
    Ask,
    Withhold,
    Allow,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MemoryInTaint {
    Quarantine,
    Withhold,
    Allow,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RedactConfig {
    /// Credentials of your own to redact beside the secrets store and gitleaks' rules.
    pub extra_patterns: Vec<ExtraPattern>,
}

/// A pattern of the operator's: `{name: employee-id, regex: 'EMP-\d{6}'}`. The secret is the
/// first non-empty group, else the whole match.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExtraPattern {
    pub name: PatternName,
    pub regex: PatternRegex,
}

/// A pattern's name, as the redaction shows it: `[redacted: NAME]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PatternName(pub String);

impl TryFrom<String> for PatternName {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        let fits = !value.is_empty()
            && value.len() <= 64
            && value.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'));
        if fits {
            Ok(PatternName(value))
        } else {
            Err(format!("pattern name `{value}` must be 1-64 letters, digits, `-`, `_` or `.`"))
        }
    }
}

impl From<PatternName> for String {
    fn from(name: PatternName) -> String {
        name.0
    }
}

/// A regular expression (the `regex` crate's syntax), compiled when the file is read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PatternRegex(pub String);

impl TryFrom<String> for PatternRegex {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        if value.is_empty() {
            return Err("an empty regex would match everything: write the credential's shape".into());
        }
        match regex::Regex::new(&value) {
            Ok(compiled) if compiled.is_match("") => {
                Err(format!("regex `{value}` matches empty text, so it would redact between every character"))
            }
            Ok(_) => Ok(PatternRegex(value)),
            Err(error) => Err(format!("regex `{value}` does not compile: {error}")),
        }
    }
}

impl From<PatternRegex> for String {
    fn from(regex: PatternRegex) -> String {
        regex.0
    }
}

impl RedactConfig {
    /// (name, regex) pairs, as the redactor takes them.
    pub fn patterns(&self) -> Vec<(String, String)> {
        self.extra_patterns.iter().map(|pattern| (pattern.name.0.clone(), pattern.regex.0.clone())).collect()
    }
}
