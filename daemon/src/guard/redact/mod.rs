//! The redactor (DESIGN.md §10.3): no secret in anything the daemon persists or sends.
//!
//! Every string the daemon writes to its state (session logs, memory, task results, the
//! inbox, the audit log, its own log lines), sends to a channel (events), hands a tool or takes
//! back from one passes [`Redact::clean`] (or [`Redact::clean_json`], which cleans every string
//! in a JSON value) on its one way out. What is found is replaced by `[redacted: NAME]` and
//! audited (`redaction`: where, and which secret or rule — never the value).
//!
//! What is found ([`Shield::scan`]):
//! - the values of the secrets store, as they are and in hex, base64, base64url and percent
//!   encoding (`known.rs`), read again when the store changes;
//! - credential patterns of gitleaks' rule set (`rules.rs`, its file vendored as data);
//! - an egress placeholder (`baaaht-placeholder-…`), and the operator's
//!   `security.redact.extra_patterns`.
//!
//! Split or reversed values are not found: that is the known limit.

mod known;
pub mod rules;

use std::borrow::Cow;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use zeroize::Zeroizing;

pub use known::{Known, Scrubbing, MIN_VALUE};
pub use rules::{Rules, RulesError};

use crate::guard::audit::{Audit, Kind, Record};
use crate::guard::secrets::{LiveSecrets, Secrets};

/// A secret or credential found in text: where (its secret part), and the secret's name or the
/// rule's id.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub start: usize,
    pub end: usize,
    pub rule: String,
}

/// Where a string was going when it was cleaned (the audit's `place`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    SessionLog,
    Memory,
    TaskResult,
    Inbox,
    Audit,
    DaemonLog,
    /// An event to the channels (TUI, web, Slack, CLI).
    Channel,
    /// A tool call's parameters, on their way into a container.
    ToolCall,
    /// A tool's answer, on its way to the agent.
    ToolResult,
    /// A field of one of the daemon's state files (`data/state/`, a profile).
    State,
}

impl Place {
    pub fn as_str(self) -> &'static str {
        match self {
            Place::SessionLog => "session_log",
            Place::Memory => "memory",
            Place::TaskResult => "task_result",
            Place::Inbox => "inbox",
            Place::Audit => "audit",
            Place::DaemonLog => "daemon_log",
            Place::Channel => "channel",
            Place::ToolCall => "tool_call",
            Place::ToolResult => "tool_result",
            Place::State => "state",
        }
    }
}

/// The placeholder pattern: a placeholder is worthless outside its session, and still not
/// for a log.
const PLACEHOLDER: &str = "baaaht-placeholder-[0-9a-f]{32}";

/// When the store was last looked at, and what it held then.
#[derive(Default)]
struct Refresh {
    from: Option<Arc<Secrets>>,
}

/// Finds secrets and credentials in text (no audit: [`Redact`] is the path writers take).
pub struct Shield {
    live: Option<Arc<LiveSecrets>>,
    /// The values found by the last look at the store.
    known: RwLock<Arc<Known>>,
    /// Held by whoever looks at the store; a writer waits for a look in progress, so nothing
    /// written after a secret was stored goes out without it. A log line
    /// never takes it (it uses the values as they were): reading the store logs, from inside.
    refresh: Mutex<Refresh>,
    /// The placeholder and the operator's patterns.
    own: Rules,
    /// Values known besides the store's (name, value): the providers' secrets as resolved from
    /// the environment and the files they name.
    also: RwLock<Vec<(String, Zeroizing<String>)>>,
}

impl std::fmt::Debug for Shield {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shield").field("own_patterns", &self.own.len()).finish_non_exhaustive()
    }
}

/// `text` with each finding's span replaced by `[redacted: RULE]` (overlaps merged, the first
/// one's name kept), and the names found, once each.
pub(crate) fn replace(text: &str, mut found: Vec<Finding>) -> (Cow<'_, str>, Vec<String>) {
    if found.is_empty() {
        return (Cow::Borrowed(text), vec![]);
    }
    found.sort_by(|one, other| one.start.cmp(&other.start).then(other.end.cmp(&one.end)));
    let (mut out, mut names, mut last) = (String::with_capacity(text.len()), Vec::<String>::new(), 0);
    for finding in found {
        if finding.start < last {
            // Inside (or across the end of) one already replaced.
            last = last.max(finding.end);
            continue;
        }
        out.push_str(&text[last..finding.start]);
        out.push_str("[redacted: ");
        out.push_str(&finding.rule);
        out.push(']');
        last = finding.end;
        if !names.contains(&finding.rule) {
            names.push(finding.rule);
        }
    }
    out.push_str(&text[last..]);
    (Cow::Owned(out), names)
}

impl Shield {
    /// A shield for the store `live` and the operator's `extra` patterns (name, regex).
    pub fn new(live: Option<Arc<LiveSecrets>>, extra: &[(String, String)]) -> Result<Shield, RulesError> {
        let mut own = vec![("baaaht-placeholder".to_string(), PLACEHOLDER.to_string())];
        own.extend(extra.iter().cloned());
        let known = RwLock::new(Arc::new(Known::new([])));
        Ok(Shield { live, known, refresh: Mutex::default(), own: Rules::extra(&own)?, also: RwLock::default() })
    }

    /// A shield for fixed values (name, value), never read again (tests, benchmarks).
    pub fn with_values(values: &[(&str, &str)]) -> Shield {
        let known = RwLock::new(Arc::new(Known::new(values.iter().copied())));
        let own = Rules::extra(&[("baaaht-placeholder".to_string(), PLACEHOLDER.to_string())]).expect("it compiles");
        Shield { live: None, known, refresh: Mutex::default(), own, also: RwLock::default() }
    }

    /// The store's values, read again when it changed (its file's stamp, looked at on every
    /// clean: a value stored is never missed by what is written after) if `refresh`: a log line
    /// never reads the store (reading it may log, from inside its lock).
    fn known(&self, refresh: bool) -> Arc<Known> {
        let live = self.live.as_ref().filter(|_| refresh);
        if let Some(live) = live {
            let mut refresh = self.refresh.lock().unwrap_or_else(PoisonError::into_inner);
            let current = live.current();
            let same = match (&current, &refresh.from) {
                (Some(now), Some(before)) => Arc::ptr_eq(now, before),
                (None, None) => true,
                _ => false,
            };
            if !same {
                *self.known.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(self.build(current.as_deref()));
                refresh.from = current;
            }
        }
        self.known.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The finder of `store`'s values and those known besides.
    fn build(&self, store: Option<&Secrets>) -> Known {
        let also = self.also.read().unwrap_or_else(PoisonError::into_inner);
        let mut values: Vec<(&str, &str)> = also.iter().map(|(name, value)| (name.as_str(), value.as_str())).collect();
        let names = store.map(Secrets::names).unwrap_or_default();
        if let Some(store) = store {
            values.extend(names.iter().filter_map(|name| store.get(name).map(|value| (name.as_str(), value))));
        }
        Known::new(values)
    }

    /// Also finds `values` (name, value) from now on, besides the store's: secrets the daemon
    /// resolved from elsewhere (the environment, a key file).
    pub fn also_known(&self, values: Vec<(String, Zeroizing<String>)>) {
        let refresh = self.refresh.lock().unwrap_or_else(PoisonError::into_inner);
        *self.also.write().unwrap_or_else(PoisonError::into_inner) = values;
        // The store as last looked at: a change since is picked up at the next look.
        let known = Arc::new(self.build(refresh.from.as_deref()));
        *self.known.write().unwrap_or_else(PoisonError::into_inner) = known;
    }

    /// The store's values as they are now, in the forms they travel in: what the egress edge
    /// scrubs from answers and refuses in requests, byte by byte.
    pub fn values(&self) -> Arc<Known> {
        self.known(true)
    }

    /// `text` with every secret and credential replaced, and what was found (names and rule ids).
    pub fn scan<'t>(&self, text: &'t str) -> (Cow<'t, str>, Vec<String>) {
        self.scan_with(text, true)
    }

    fn scan_with<'t>(&self, text: &'t str, refresh: bool) -> (Cow<'t, str>, Vec<String>) {
        let mut found = vec![];
        self.known(refresh).find(text, &mut found);
        self.own.find(text, &mut found);
        Rules::gitleaks().find(text, &mut found);
        replace(text, found)
    }

    /// `text` with the store's values and placeholders replaced, credential patterns left
    /// alone: for what goes into a container, where a pattern's false positive would change
    /// the code an agent writes, and only the store's values must never arrive.
    pub fn scan_values<'t>(&self, text: &'t str) -> (Cow<'t, str>, Vec<String>) {
        let mut found = vec![];
        self.known(true).find(text, &mut found);
        self.own.find(text, &mut found);
        replace(text, found)
    }

    /// Reads the rule set now, off any request's path (each rule compiles when first needed).
    pub fn warm(&self) {
        Rules::gitleaks();
    }
}

impl crate::guard::audit::Cleaner for Shield {
    fn clean(&self, value: &mut serde_json::Value) -> Vec<String> {
        let mut names = vec![];
        clean_value(self, value, &mut names);
        names
    }
}

/// The one path: a [`Shield`] and the audit log its findings go to.
#[derive(Debug, Clone)]
pub struct Redact {
    shield: Arc<Shield>,
    audit: Audit,
}

impl Redact {
    pub fn new(shield: Arc<Shield>, audit: Audit) -> Redact {
        Redact { shield, audit }
    }

    pub fn shield(&self) -> &Arc<Shield> {
        &self.shield
    }

    fn report(&self, place: Place, names: Vec<String>) {
        if names.is_empty() {
            return;
        }
        let record = Record::new(Kind::Redaction, "daemon", "redacted").detail("place", place.as_str());
        self.audit.record(record.detail("found", names));
    }

    /// `text` as it may be persisted or sent to `place`.
    pub fn clean<'t>(&self, place: Place, text: &'t str) -> Cow<'t, str> {
        let (clean, names) = self.shield.scan(text);
        self.report(place, names);
        clean
    }

    /// `text`, owned, with no value of the store in it (credential patterns left alone): what
    /// goes into a container ([`Shield::scan_values`]).
    pub fn clean_values(&self, place: Place, text: String) -> String {
        let (clean, names) = self.shield.scan_values(&text);
        self.report(place, names);
        match clean {
            Cow::Borrowed(_) => text,
            Cow::Owned(clean) => clean,
        }
    }

    /// `text`, owned, as it may be persisted or sent to `place`.
    pub fn clean_string(&self, place: Place, text: String) -> String {
        match self.clean(place, &text) {
            Cow::Borrowed(_) => text,
            Cow::Owned(clean) => clean,
        }
    }

    /// Every string in `value` (keys too) cleaned for `place`.
    pub fn clean_json(&self, place: Place, value: &mut serde_json::Value) {
        let mut names = vec![];
        clean_value(&self.shield, value, &mut names);
        self.report(place, names);
    }
}

/// `text` as a state file may keep it: cleaned by `redact` when a store has one (a store
/// opened in a test may not).
pub fn state_field(redact: Option<&Redact>, text: String) -> String {
    match redact {
        Some(redact) => redact.clean_string(Place::State, text),
        None => text,
    }
}

/// Every string of `value` cleaned by `shield`, what was found added to `names`.
pub fn clean_value(shield: &Shield, value: &mut serde_json::Value, names: &mut Vec<String>) {
    use serde_json::Value;
    let mut take = |text: &str| -> Option<String> {
        let (clean, found) = shield.scan(text);
        for name in found {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        match clean {
            Cow::Owned(clean) => Some(clean),
            Cow::Borrowed(_) => None,
        }
    };
    match value {
        Value::String(text) => {
            if let Some(clean) = take(text) {
                *text = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| clean_value(shield, item, names)),
        Value::Object(map) => {
            let renamed: Vec<(String, String)> =
                map.keys().filter_map(|key| take(key).map(|clean| (key.clone(), clean))).collect();
            for (key, clean) in renamed {
                if let Some(item) = map.remove(&key) {
                    map.insert(clean, item);
                }
            }
            map.values_mut().for_each(|item| clean_value(shield, item, names));
        }
        _ => {}
    }
}

/// The redactor the daemon's log lines take (set when a daemon starts; the subscriber is
/// the process's, so the last one set wins).
static LOG_LINES: RwLock<Option<Redact>> = RwLock::new(None);

/// Log lines go through `redact` from now on.
pub fn for_log_lines(redact: &Redact) {
    *LOG_LINES.write().unwrap_or_else(PoisonError::into_inner) = Some(redact.clone());
}

/// A log line as it may be written.
pub fn log_line(line: &str) -> Cow<'_, str> {
    let redact = LOG_LINES.read().unwrap_or_else(PoisonError::into_inner).clone();
    match redact {
        Some(redact) => {
            // The values as last read: a log line may be written while the store is read.
            let (clean, names) = redact.shield.scan_with(line, false);
            redact.report(Place::DaemonLog, names);
            Cow::Owned(clean.into_owned())
        }
        None => Cow::Borrowed(line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_rules_and_placeholders_are_replaced_once_each() {
        let shield = Shield::new(None, &[("badge".into(), r"EMP-\d{6}".into())]).expect("compiles");
        let text = "a baaaht-placeholder-0123456789abcdef0123456789abcdef and EMP-123456 and \
                    ghp_R7s2kLm9QwErTy0UiOpAsDfGhJkLzXcVbN12 end";
        let (clean, names) = shield.scan(text);
        assert_eq!(clean, "a [redacted: baaaht-placeholder] and [redacted: badge] and [redacted: github-pat] end");
        assert_eq!(names, vec!["baaaht-placeholder", "badge", "github-pat"]);
        let (same, none) = shield.scan("nothing to see");
        assert!(matches!(same, Cow::Borrowed(_)) && none.is_empty());
    }

    #[test]
    fn a_providers_secret_from_the_environment_is_found_in_every_form_it_travels_in() {
        let shield = Shield::new(None, &[]).expect("compiles");
        let secret = "Abc8Q~x.y-z_1234567890abcdef/ghijKLMN";
        shield.also_known(vec![("providers.azure.entra.client_secret".into(), Zeroizing::new(secret.into()))]);
        let base64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, secret);
        let reversed: String = secret.chars().rev().collect();
        for form in [
            secret.to_string(),
            "Abc8Q~x.y-z_1234567890abcdef%2FghijKLMN".into(),
            "Abc8Q~x.y-z_1234567890abcdef%2fghijKLMN".into(),
            base64,
            reversed,
            format!("{} … {}", &secret[..14], &secret[14..]),
        ] {
            let text = format!("the provider said: {form}");
            let (clean, names) = shield.scan(&text);
            assert!(names.contains(&"providers.azure.entra.client_secret".to_string()), "{form}: {clean}");
        }
    }

    #[test]
    fn overlapping_findings_are_merged() {
        let found =
            vec![Finding { start: 2, end: 8, rule: "a".into() }, Finding { start: 4, end: 10, rule: "b".into() }];
        let (clean, names) = replace("0123456789xy", found);
        assert_eq!(clean, "01[redacted: a]xy");
        assert_eq!(names, vec!["a"]);
    }

    #[test]
    fn json_strings_and_keys_are_cleaned_and_stay_json() {
        let shield = Shield::with_values(&[("TOKEN", "s3cr3t-value-1")]);
        let mut value = serde_json::json!({"s3cr3t-value-1": ["x s3cr3t-value-1", 3, {"k": "s3cr3t-value-1"}]});
        let mut names = vec![];
        clean_value(&shield, &mut value, &mut names);
        assert_eq!(
            value,
            serde_json::json!({"[redacted: TOKEN]": ["x [redacted: TOKEN]", 3, {"k": "[redacted: TOKEN]"}]})
        );
        assert_eq!(names, vec!["TOKEN"]);
    }
}
