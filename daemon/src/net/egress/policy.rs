//! Which hosts a context's tools may reach (DESIGN.md §10.2): rules in `config/egress.yaml`
//! (everyone), `users/{id}/egress.yaml` and `groups/{id}/egress.yaml`:
//!
//! ```yaml
//! rules:
//!   - host: api.github.com        # a host, `*.domain` (the names under it) or host:port
//!     action: allow               # allow, deny or ask
//! ```
//!
//! The most specific rule that matches decides (host:port, then the host, then the longest
//! `*.domain`); at equal specificity `deny` beats `ask`, which beats `allow`. A `deny` in
//! `config/egress.yaml` holds whatever a context's own file says. A host no rule names is
//! asked about.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::base::auth::Context;
use crate::base::datadir::DataDir;

/// The file's name in `config/` and in a context's folder.
pub const FILE: &str = "egress.yaml";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Allow,
    Ask,
    Deny,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Ask => "ask",
            Action::Deny => "deny",
        }
    }
}

/// What a rule names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// One host, on any port or on one.
    Host { host: String, port: Option<u16> },
    /// The names under `domain` (`*.example.com`: `api.example.com`, not `example.com`).
    Under { domain: String },
}

impl Pattern {
    /// How specific a match is: a host and port, then a host, then a longer domain.
    fn specificity(&self) -> usize {
        match self {
            Pattern::Host { port: Some(_), .. } => 10_000,
            Pattern::Host { port: None, .. } => 9_999,
            Pattern::Under { domain } => domain.split('.').count(),
        }
    }

    pub fn matches(&self, host: &str, port: u16) -> bool {
        match self {
            Pattern::Host { host: named, port: named_port } => {
                named == host && named_port.is_none_or(|named_port| named_port == port)
            }
            Pattern::Under { domain } => host.strip_suffix(domain.as_str()).is_some_and(|rest| rest.ends_with('.')),
        }
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pattern::Host { host, port: Some(port) } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Pattern::Host { host, port: Some(port) } => write!(f, "{host}:{port}"),
            Pattern::Host { host, port: None } => f.write_str(host),
            Pattern::Under { domain } => write!(f, "*.{domain}"),
        }
    }
}

/// One rule, and where it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub pattern: Pattern,
    pub action: Action,
    /// `path:line`.
    pub at: String,
    /// Its `host:`'s line, from 1 (0: not found in the text).
    pub line: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    rules: Vec<Written>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    host: String,
    action: Action,
}

/// Why a rule's `host` (`written`: trimmed, in lower case) names no host a rule can be about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("host is empty")]
    Empty,
    #[error("`{written}`: a wildcard is `*.domain`, with no port and one `*`")]
    Wildcard { written: String },
    #[error("`{written}` would cover every name under a top-level domain; name the domain (`*.example.com`)")]
    TopLevelDomain { written: String },
    #[error("`{written}`: `*` is allowed only as `*.domain`; a rule for every host is not offered")]
    EveryHost { written: String },
    #[error("`{written}`: the port is not a number from 1 to 65535")]
    Port { written: String },
    /// A link-local address or a cloud metadata endpoint (`why`, in words).
    #[error("`{written}` is never reachable from a container: {why}")]
    NeverReachable { written: String, why: String },
    #[error("`{written}` names a cloud metadata service: never reachable from a container")]
    Metadata { written: String },
    #[error("`{written}` is not a host name")]
    NotAName { written: String },
}

/// Why a rule could not be written in its file ([`change`]). An I/O error is in the sentence, as
/// it always was, and so not a `#[source]` as well (a chain printer would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error(transparent)]
    Pattern(#[from] PatternError),
    #[error("cannot read {}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    #[error("{} has problems; fix them first:\n{}", path.display(), problems.join("\n"))]
    Problems { path: PathBuf, problems: Vec<String> },
    #[error("{} has no rule for {pattern}", path.display())]
    NoRule { path: PathBuf, pattern: Pattern },
    #[error("{}: write `rules:` as a list, one `- host:` a line, to add to it", path.display())]
    NotAList { path: PathBuf },
    /// What was about to be written does not read back (each problem as `path:line:col: what`).
    #[error("{}", problems.join("\n"))]
    Unreadable { problems: Vec<String> },
    #[error("cannot make {}: {error}", path.display())]
    Folder { path: PathBuf, error: std::io::Error },
    #[error(transparent)]
    Write(#[from] crate::base::state::StateError),
}

/// What a rule's `host` names, or why it cannot be one.
pub fn pattern(written: &str) -> Result<Pattern, PatternError> {
    let written = written.trim().to_ascii_lowercase();
    if written.is_empty() {
        return Err(PatternError::Empty);
    }
    if let Some(domain) = written.strip_prefix("*.") {
        if domain.contains('*') || domain.contains(':') {
            return Err(PatternError::Wildcard { written });
        }
        if !domain.contains('.') {
            return Err(PatternError::TopLevelDomain { written });
        }
        check_name(domain, &written)?;
        return Ok(Pattern::Under { domain: domain.to_string() });
    }
    if written.contains('*') {
        return Err(PatternError::EveryHost { written });
    }
    let Some((host, port)) = crate::net::egress::filter::split_host_port(&written).filter(|(_, port)| *port != Some(0))
    else {
        return Err(PatternError::Port { written });
    };
    let host = host.to_string();
    if let Ok(address) = host.parse::<std::net::IpAddr>() {
        let full = if address.is_ipv4() { 32 } else { 128 };
        if let Some(why) = crate::net::egress::filter::never_allowed(address, full) {
            return Err(PatternError::NeverReachable { written, why });
        }
    } else {
        check_name(&host, &written)?;
    }
    if crate::net::egress::filter::METADATA_NAMES.contains(&host.as_str()) {
        return Err(PatternError::Metadata { written });
    }
    Ok(Pattern::Host { host, port })
}

fn check_name(name: &str, written: &str) -> Result<(), PatternError> {
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(PatternError::NotAName { written: written.to_string() });
    }
    Ok(())
}

/// The rules of `text` (read from `path`), or every problem, each as `path:line:col: what`.
pub fn parse(text: &str, path: &Path) -> Result<Vec<Rule>, Vec<String>> {
    let shown = path.display();
    let file: File = match serde_yaml::from_str::<Option<File>>(text) {
        Ok(file) => file.unwrap_or(File { rules: vec![] }),
        Err(error) => {
            let at = error.location().map_or(String::new(), |at| format!("{}:{}:", at.line(), at.column()));
            return Err(vec![format!(
                "{shown}:{at} {error}; see `rules:` with `- host: …` and `action: allow|deny|ask`"
            )]);
        }
    };
    let mut rules = vec![];
    let mut problems = vec![];
    // Each rule's line: where its `host:` value is written, in order.
    let mut from = 0;
    for written in file.rules {
        let (line, column) = locate(text, &written.host, &mut from);
        match pattern(&written.host) {
            Ok(pattern) => rules.push(Rule { pattern, action: written.action, at: format!("{shown}:{line}"), line }),
            Err(why) => problems.push(format!("{shown}:{line}:{column}: {why}")),
        }
    }
    if problems.is_empty() {
        Ok(rules)
    } else {
        Err(problems)
    }
}

/// The line and column of the next `host:` whose value is `host`, from line `from` on.
fn locate(text: &str, host: &str, from: &mut usize) -> (usize, usize) {
    for (index, line) in text.lines().enumerate().skip(*from) {
        if let Some(at) = line.find("host:") {
            let value = line[at + 5..].trim().trim_matches(['"', '\'']);
            if value == host.trim() {
                *from = index + 1;
                let column = line[at + 5..].find(|c: char| !c.is_whitespace()).map_or(at + 6, |skip| at + 6 + skip);
                return (index + 1, column);
            }
        }
    }
    (0, 0)
}

/// The rules of the file at `path` (none when there is none), or its problems, each as
/// `path:line:col: what`.
pub fn load(path: &Path) -> Result<Vec<Rule>, Vec<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text, path),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(vec![]),
        Err(error) => Err(vec![format!("{}: cannot be read: {error}", path.display())]),
    }
}

/// The rules of `path`; a file with problems is logged and counts as none, which leaves every
/// host to be asked about.
fn read(path: &Path) -> Vec<Rule> {
    load(path).unwrap_or_else(|problems| {
        for problem in problems {
            tracing::warn!(%problem, "an egress policy has a problem; its rules do not apply until it is fixed");
        }
        vec![]
    })
}

/// Where the rules for `context`'s tools are: everyone's, then its own.
pub fn files(data_dir: &DataDir, context: &Context) -> [PathBuf; 2] {
    [data_dir.config_dir().join(FILE), data_dir.context_dir(context).join(FILE)]
}

/// What the rules say of `host:port` for `context`, and the rule that said it (none: no rule
/// names it).
pub fn decide(data_dir: &DataDir, context: &Context, host: &str, port: u16) -> Option<Rule> {
    let [everyone, own] = files(data_dir, context);
    decide_among(&read(&everyone), &read(&own), host, port)
}

fn decide_among(everyone: &[Rule], own: &[Rule], host: &str, port: u16) -> Option<Rule> {
    let host = host.to_ascii_lowercase();
    let matching = |rules: &[Rule]| -> Vec<Rule> {
        rules.iter().filter(|rule| rule.pattern.matches(&host, port)).cloned().collect::<Vec<_>>()
    };
    let (everyone, own) = (matching(everyone), matching(own));
    if let Some(denied) = everyone.iter().find(|rule| rule.action == Action::Deny) {
        return Some(denied.clone());
    }
    everyone.into_iter().chain(own).max_by_key(|rule| (rule.pattern.specificity(), rule.action))
}

/// How often a host must have been allowed once to be suggested as a rule.
const SUGGEST_AFTER: u32 = 3;

/// The hosts `context`'s people allowed once at least [`SUGGEST_AFTER`] times in the last 30
/// days (from the audit log's connection records) that no rule allows now, as `host:port` and
/// how often; most asked first.
pub fn suggested(audit: &crate::guard::audit::Audit, data_dir: &DataDir, context: &Context) -> Vec<(String, u32)> {
    let query = crate::guard::audit::Query {
        since: Some(jiff::Timestamp::now() - jiff::SignedDuration::from_hours(30 * 24)),
        user: None,
        kind: Some(crate::guard::audit::Kind::Egress),
        limit: 100_000,
    };
    let records = audit.search(&query).unwrap_or_else(|error| {
        tracing::warn!(%error, "the audit log could not be read for egress suggestions");
        vec![]
    });
    let whose = context.to_string();
    let mut counted: std::collections::BTreeMap<(String, u16), u32> = std::collections::BTreeMap::new();
    for record in records {
        let once = record.detail.get("allowed_by").and_then(|by| by.as_str()).is_some_and(|by| by.ends_with(", once"));
        if record.context != whose || record.outcome != "allowed" || !once {
            continue;
        }
        let host = record.detail.get("host").and_then(|host| host.as_str()).unwrap_or_default().to_string();
        let port = record.detail.get("port").and_then(serde_json::Value::as_u64).unwrap_or(0);
        *counted.entry((host, u16::try_from(port).unwrap_or(0))).or_default() += 1;
    }
    let mut suggestions: Vec<(String, u32)> = counted
        .into_iter()
        .filter(|((host, port), times)| {
            *times >= SUGGEST_AFTER
                && !host.is_empty()
                && decide(data_dir, context, host, *port).is_none_or(|rule| rule.action != Action::Allow)
        })
        .map(|((host, port), times)| {
            let host = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
            (host, times)
        })
        .collect();
    suggestions.sort_by(|(a_host, a_times), (b_host, b_times)| b_times.cmp(a_times).then_with(|| a_host.cmp(b_host)));
    suggestions
}

/// The gate of one session's tool containers: the context's rules decide; about a host no
/// rule names (or one whose rule says `ask`) the context's people are asked in chat. Refused
/// so because nobody could answer, the context is told in its inbox (once an hour per host)
/// how to allow it for next time.
#[derive(Debug)]
pub struct Policy {
    pub data_dir: DataDir,
    pub context: Context,
    pub session: String,
    pub refusals: Refusals,
    pub approvals: std::sync::Arc<crate::net::egress::approvals::Approvals>,
    /// A turn that read untrusted content is not asked about new hosts: they are refused.
    pub taints: std::sync::Arc<crate::net::taint::Taints>,
}

/// Where refusals of hosts no rule names are told, and when each was last told.
#[derive(Debug, Clone)]
pub struct Refusals {
    inbox: std::sync::Arc<crate::store::inbox::Inbox>,
    told: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<(Context, String), std::time::Instant>>>,
}

/// How often one refused host is told to one context.
const TELL_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

impl Refusals {
    pub fn new(inbox: std::sync::Arc<crate::store::inbox::Inbox>) -> Refusals {
        Refusals { inbox, told: std::sync::Arc::default() }
    }

    /// Tells `context` that `host:port` was refused (unless it was within the hour).
    fn tell(&self, context: &Context, host: &str, port: u16, asked_by: &str) {
        let now = std::time::Instant::now();
        {
            let mut told = self.told.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            told.retain(|_, at| now.duration_since(*at) < TELL_EVERY);
            if told.insert((context.clone(), format!("{host}:{port}")), now).is_some() {
                return;
            }
        }
        let named = match context.kind {
            crate::base::auth::ContextKind::User => format!("--user {}", context.id),
            crate::base::auth::ContextKind::Group => format!("--group {}", context.id),
        };
        let what = if asked_by.is_empty() { "A command".to_string() } else { format!("`{asked_by}`") };
        let content = format!(
            "{what} wanted {host}:{port}, which no egress rule allows, so it was refused. To allow it from now on: \
             `baaaht egress allow {host} {named}`."
        );
        let item = crate::store::inbox::Item::new(format!("{host} was refused to your tools"), content, "", "");
        if let Err(error) = self.inbox.push(context, item) {
            tracing::warn!(context = %context, %error, "cannot tell of a refused host");
        }
    }
}

#[async_trait::async_trait]
impl crate::net::egress::relay::Gate for Policy {
    async fn decide(&self, host: &str, port: u16, asked_by: &str) -> crate::net::egress::relay::Verdict {
        use crate::net::egress::relay::Verdict;
        let (data_dir, context, host_owned) = (self.data_dir.clone(), self.context.clone(), host.to_string());
        let rule = tokio::task::spawn_blocking(move || decide(&data_dir, &context, &host_owned, port)).await;
        let own = self.data_dir.context_dir(&self.context).join(FILE);
        let own = own.strip_prefix(self.data_dir.root()).unwrap_or(&own).display().to_string();
        match rule {
            Ok(Some(rule)) if rule.action == Action::Allow => {
                Verdict::Allow { by: format!("{} ({})", rule.pattern, rule.at) }
            }
            Ok(Some(rule)) if rule.action == Action::Deny => {
                Verdict::Refuse(format!("{host}:{port} is denied by the rule `{}` ({})", rule.pattern, rule.at))
            }
            Ok(_) => {
                use crate::net::egress::approvals::{Asking, Decision};
                if let Some(why) = page_chose(asked_by, host, port) {
                    return Verdict::Refuse(why);
                }
                let principal = format!("container:tool:{}", self.session);
                let granted = self.approvals.granted(&self.session, host, port);
                let asked = if granted { Ok(()) } else { self.taints.may_ask(&self.session, &principal) };
                if let Err(why) = asked {
                    return Verdict::Refuse(format!("{host}:{port}: {why}"));
                }
                let asking = Asking {
                    context: self.context.clone(),
                    session: self.session.clone(),
                    // A browser serves every agent of the session; commands are the Coder's.
                    agent: if asked_by.starts_with(baaaht_proto::BROWSER_ASKED) {
                        crate::base::auth::Role::Tool
                    } else {
                        crate::base::auth::Role::Coder
                    },
                    subject: crate::net::egress::approvals::Subject::Egress { host: host.to_string(), port },
                    asked_by: asked_by.to_string(),
                };
                match self.approvals.ask(&asking).await {
                    Ok((Decision::Deny, by)) => Verdict::Refuse(format!("{host}:{port} was denied by {by}")),
                    Ok((Decision::Always, by)) => {
                        // What was asked for, no more: this host on this port.
                        let path = self.data_dir.context_dir(&self.context).join(FILE);
                        let written =
                            if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
                        let by_rule = by.clone();
                        let wrote =
                            tokio::task::spawn_blocking(move || change(&path, &written, Some(Action::Allow), &by_rule))
                                .await;
                        // Logged as it always was: the error's sentence.
                        let wrote = wrote.map(|rules| rules.map_err(|error| error.to_string()));
                        if !matches!(wrote, Ok(Ok(_))) {
                            tracing::warn!(context = %self.context, host, ?wrote, "an approval's rule could not be written");
                        }
                        Verdict::Allow { by: format!("{by}, always") }
                    }
                    Ok((decision, by)) => Verdict::Allow { by: format!("{by}, {}", decision.as_str()) },
                    Err(why) => {
                        self.refusals.tell(&self.context, host, port, asked_by);
                        Verdict::Refuse(format!(
                            "{host}:{port} is not allowed for {}'s tools, and {why}; to allow it, add to {own}:\nrules:\n  - host: {host}\n    action: allow",
                            self.context
                        ))
                    }
                }
            }
            Err(error) => Verdict::Refuse(format!("the egress policy could not be read: {error}")),
        }
    }
}

/// Why a browser's connection to `host:port`, which no rule names, is refused without asking:
/// only the address the model itself gave (`open` or `download`, in `asked_by`) is asked about,
/// on its port or the web's (a redirect from http to https). A page's own requests (its
/// pictures, scripts, frames, a redirect elsewhere) are the page's choice, not the person's:
/// asked about, they would put the page's hosts in questions (and in rules, answered
/// "always"), as many as it likes. None for any other caller, or the address given.
fn page_chose(asked_by: &str, host: &str, port: u16) -> Option<String> {
    let said = asked_by.strip_prefix(baaaht_proto::BROWSER_ASKED)?;
    let named = said
        .split_once(' ')
        .filter(|(action, _)| matches!(*action, "open" | "download"))
        .and_then(|(_, url)| crate::net::egress::proxy::host_and_port(url).ok());
    let bare = |name: &str| name.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    match named {
        Some((named, named_port))
            if bare(&named) == bare(host) && (port == named_port || port == 80 || port == 443) =>
        {
            None
        }
        _ => Some(format!(
            "{host}:{port} is a page's own request, which no egress rule allows; only the address the browser was \
             given is asked about (allow this one with a rule)"
        )),
    }
}

/// Writes a rule for `host` in the file at `path` (`action`; none: the rule is removed),
/// atomically, leaving the rest of the file as its owner wrote it; `by` and the time go in a
/// comment beside it. Why not, in a sentence.
pub fn change(path: &Path, host: &str, action: Option<Action>, by: &str) -> Result<Vec<Rule>, RuleError> {
    let wanted = pattern(host)?;
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(RuleError::Read { path: path.to_path_buf(), error }),
    };
    let rules = parse(&text, path).map_err(|problems| RuleError::Problems { path: path.to_path_buf(), problems })?;
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    // The rules for the same pattern go, last first (their lines stay valid).
    let found: Vec<usize> =
        rules.iter().filter(|rule| rule.pattern == wanted && rule.line > 0).map(|rule| rule.line - 1).collect();
    if action.is_none() && found.is_empty() {
        return Err(RuleError::NoRule { path: path.to_path_buf(), pattern: wanted });
    }
    for host_line in found.into_iter().rev() {
        let (start, end) = item_lines(&lines, host_line);
        lines.drain(start..end);
    }
    if let Some(action) = action {
        let block = lines.iter().any(|line| line.trim_end() == "rules:" || line.starts_with("rules: #"));
        if !block {
            if lines.iter().any(|line| line.starts_with("rules:")) {
                return Err(RuleError::NotAList { path: path.to_path_buf() });
            }
            lines.push("rules:".into());
        }
        let when = jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC");
        lines.push(format!("  - host: '{wanted}'"));
        lines.push(format!("    action: {}  # by {by}, {when}", action.as_str()));
    }
    let mut written = lines.join("\n");
    written.push('\n');
    let rules = parse(&written, path).map_err(|problems| RuleError::Unreadable { problems })?;
    if let Some(folder) = path.parent() {
        std::fs::create_dir_all(folder).map_err(|error| RuleError::Folder { path: folder.to_path_buf(), error })?;
    }
    crate::base::state::write_atomic(path, written.as_bytes(), 0o644)?;
    Ok(rules)
}

/// The lines of the list item whose `host:` is on line `host_line` (0-based): from its `- `
/// to the next item or the end of the list.
fn item_lines(lines: &[String], host_line: usize) -> (usize, usize) {
    let indent = |line: &str| line.len() - line.trim_start().len();
    let start = (0..=host_line).rev().find(|at| lines[*at].trim_start().starts_with("- ")).unwrap_or(host_line);
    let dash = indent(&lines[start]);
    let end = (start + 1..lines.len())
        .find(|at| {
            let line = &lines[*at];
            let text = line.trim_start();
            !text.is_empty()
                && !text.starts_with('#')
                && (indent(line) < dash || (indent(line) == dash && text.starts_with("- ")))
        })
        .unwrap_or(lines.len());
    (start, end)
}

/// Every egress policy in the data dir and its problems (`baaahtd config check`).
pub fn check_all(data_dir: &DataDir) -> Vec<String> {
    let mut paths = vec![data_dir.config_dir().join(FILE)];
    for kind in crate::base::datadir::CONTEXT_KINDS {
        let Ok(entries) = std::fs::read_dir(data_dir.contexts_dir(kind)) else { continue };
        let mut found: Vec<PathBuf> = entries.flatten().map(|entry| entry.path().join(FILE)).collect();
        found.sort();
        paths.extend(found);
    }
    paths.iter().flat_map(|path| load(path).err().unwrap_or_default()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> Vec<Rule> {
        parse(text, Path::new("egress.yaml")).expect("rules")
    }

    #[test]
    fn only_the_address_the_browser_was_given_is_asked_about() {
        let asked = "the browser: open https://Trains.example:8443/times?from=leeds";
        assert_eq!(page_chose(asked, "trains.example", 8443), None);
        assert_eq!(page_chose(asked, "trains.example", 443), None, "on to https");
        assert!(page_chose(asked, "trains.example", 22).is_some());
        assert!(page_chose(asked, "cdn.tracker.example", 443).expect("refused").contains("a page's own request"));
        assert!(page_chose("the browser: click", "trains.example", 443).is_some(), "a click names no address");
        assert!(page_chose("the browser: download http://[::1]:8080/x", "::1", 8080).is_none());
        assert_eq!(page_chose("exec: curl https://example.com", "example.com", 443), None, "not the browser");
    }

    #[test]
    fn the_most_specific_rule_decides_and_deny_wins_a_tie() {
        let own = rules(
            "rules:\n  - host: '*.example.com'\n    action: deny\n  - host: api.example.com\n    action: allow\n  \
             - host: api.example.com:22\n    action: deny\n  - host: files.example.com\n    action: allow\n  \
             - host: files.example.com\n    action: ask\n",
        );
        let said = |host: &str, port| decide_among(&[], &own, host, port).map(|rule| rule.action);
        assert_eq!(said("api.example.com", 443), Some(Action::Allow));
        assert_eq!(said("api.example.com", 22), Some(Action::Deny));
        assert_eq!(said("www.example.com", 443), Some(Action::Deny));
        assert_eq!(said("example.com", 443), None, "`*.example.com` covers the names under it only");
        assert_eq!(said("files.example.com", 443), Some(Action::Ask), "ask beats allow at equal specificity");
        assert_eq!(said("API.Example.com", 443), Some(Action::Allow));
        assert_eq!(said("notexample.com", 443), None);
        assert_eq!(pattern("[fd00::7]:8443").map(|p| p.to_string()), Ok("[fd00::7]:8443".to_string()));
        let rule = decide_among(&[], &own, "api.example.com", 443).expect("a rule");
        assert_eq!(rule.at, "egress.yaml:4");
    }

    #[test]
    fn everyones_deny_holds_whatever_a_context_allows() {
        let everyone = rules("rules:\n  - host: '*.tracker.example'\n    action: deny\n");
        let own = rules("rules:\n  - host: ads.tracker.example:443\n    action: allow\n");
        let said = decide_among(&everyone, &own, "ads.tracker.example", 443).expect("a rule");
        assert_eq!((said.action, said.pattern.to_string()), (Action::Deny, "*.tracker.example".to_string()));
        let everyone_allows = rules("rules:\n  - host: pypi.org\n    action: allow\n");
        let own_denies = rules("rules:\n  - host: pypi.org\n    action: deny\n");
        assert_eq!(decide_among(&everyone_allows, &own_denies, "pypi.org", 443).map(|r| r.action), Some(Action::Deny));
    }

    #[test]
    fn a_rule_is_written_beside_what_the_owner_wrote_and_revoked_alone() {
        let temp = tempfile::tempdir().expect("tempdir");
        let path = temp.path().join("users/alice/egress.yaml");
        let rules = change(&path, "pypi.org", Some(Action::Allow), "alice").expect("written");
        assert_eq!(rules.len(), 1);
        let mine = "# my rules\nrules:\n  # the docs\n  - host: docs.rs\n    action: allow\n";
        std::fs::write(&path, mine).expect("write");
        change(&path, "PyPI.org", Some(Action::Allow), "alice").expect("added");
        change(&path, "*.github.com", Some(Action::Ask), "root").expect("added");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.starts_with(mine), "{text}");
        assert!(text.contains("  - host: 'pypi.org'\n    action: allow  # by alice, "), "{text}");
        // A new action for the same host replaces the old rule.
        let rules = change(&path, "pypi.org", Some(Action::Deny), "root").expect("replaced");
        let said: Vec<(String, Action)> = rules.iter().map(|rule| (rule.pattern.to_string(), rule.action)).collect();
        assert_eq!(
            said,
            [
                ("docs.rs".into(), Action::Allow),
                ("*.github.com".into(), Action::Ask),
                ("pypi.org".into(), Action::Deny)
            ]
        );
        let rules = change(&path, "*.github.com", None, "root").expect("revoked");
        assert_eq!(rules.len(), 2);
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.starts_with(mine) && !text.contains("github"), "{text}");
        assert_eq!(
            change(&path, "example.org", None, "root").expect_err("none").to_string(),
            format!("{} has no rule for example.org", path.display())
        );
        let refused = change(&path, "*", Some(Action::Allow), "root").expect_err("refused");
        assert!(matches!(refused, RuleError::Pattern(PatternError::EveryHost { .. })), "{refused}");
        assert!(refused.to_string().contains("only as `*.domain`"), "{refused}");
        std::fs::write(&path, "rules: [{host: a.example, action: allow}]\n").expect("flow");
        let flow = change(&path, "b.example", Some(Action::Allow), "root").expect_err("flow");
        assert!(matches!(flow, RuleError::NotAList { .. }) && flow.to_string().contains("as a list"), "{flow}");
    }

    #[test]
    fn bad_rules_are_refused_with_where_and_why() {
        let text = "rules:\n  - host: '*'\n    action: allow\n  - host: '*.com'\n    action: allow\n  \
                    - host: 169.254.169.254\n    action: allow\n  - host: metadata.google.internal\n    action: allow\n  \
                    - host: 'a*.example.com'\n    action: allow\n  - host: example.com:http\n    action: allow\n  \
                    - host: ok.example\n    action: allow\n";
        let problems = parse(text, Path::new("users/alice/egress.yaml")).expect_err("refused");
        assert_eq!(problems.len(), 6, "{problems:#?}");
        assert!(
            problems[0].starts_with("users/alice/egress.yaml:2:11: `*`: `*` is allowed only as `*.domain`"),
            "{}",
            problems[0]
        );
        assert!(
            problems[1].contains(":4:") && problems[1].contains("every name under a top-level domain"),
            "{}",
            problems[1]
        );
        assert!(problems[2].contains(":6:") && problems[2].contains("never reachable"), "{}", problems[2]);
        assert!(problems[3].contains("cloud metadata service"), "{}", problems[3]);
        assert!(problems[4].contains("only as `*.domain`"), "{}", problems[4]);
        assert!(problems[5].contains("the port is not a number"), "{}", problems[5]);
        let typo = parse("rules:\n  - host: pypi.org\n    action: alow\n", Path::new("egress.yaml")).expect_err("typo");
        assert!(typo[0].starts_with("egress.yaml:3:") && typo[0].contains("unknown variant `alow`"), "{typo:?}");
        assert_eq!(parse("", Path::new("egress.yaml")), Ok(vec![]));
    }
}
