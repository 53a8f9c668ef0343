//! Credential patterns for secrets the daemon was never told: gitleaks' rule set
//! (`gitleaks.toml`, MIT, `gitleaks.LICENSE`), loaded as data, plus the operator's
//! `security.redact.extra_patterns`.
//!
//! The file is gitleaks' own `config/gitleaks.toml` at commit b58d3f10 (v8.30.0 and 27 commits),
//! unchanged; updating it is copying the new file over. Its rules are applied the way gitleaks
//! applies them to a fragment of text:
//! - a rule runs only when one of its keywords is in the text (one case-insensitive
//!   `aho-corasick` pass finds which);
//! - the secret is the rule's `secretGroup`, else the first non-empty group, else the match;
//! - a rule with an `entropy` needs the secret's Shannon entropy above it, and a `generic…`
//!   rule a digit in the secret;
//! - the global allowlist and the rule's own (regexes on the secret, the match or the line;
//!   stopwords in the secret) let a finding go. Allowlists about file paths or commits do not
//!   apply to text and are skipped, as is a rule that only names a path.
//!
//! Go's RE2 syntax differs from the `regex` crate's in one place these rules use: a `{` that
//! is not a repetition is a literal in RE2 and an error here, so it is escaped (`go_to_rust`).
//! Three rules build automata bigger than the crate's default limit; the limit is raised.

use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::{Regex, RegexBuilder};
use serde::Deserialize;

use super::Finding;

/// gitleaks' rules as its project publishes them.
const GITLEAKS: &str = include_str!("gitleaks.toml");

/// Why a rule set cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error(transparent)]
    Toml(#[from] toml::de::Error),
    #[error("regexTarget `{0}` is not secret, match or line")]
    Target(String),
    #[error(transparent)]
    Regex(#[from] regex::Error),
    #[error("stopwords")]
    Stopwords(#[source] aho_corasick::BuildError),
    #[error("rule {id}")]
    Rule {
        id: String,
        #[source]
        source: Box<RulesError>,
    },
    #[error("pattern {name}")]
    Pattern {
        name: String,
        #[source]
        source: regex::Error,
    },
}

#[derive(Deserialize)]
struct File {
    #[serde(default)]
    allowlist: Option<AllowFile>,
    #[serde(default)]
    rules: Vec<RuleFile>,
}

#[derive(Deserialize)]
struct RuleFile {
    id: String,
    #[serde(default)]
    regex: Option<String>,
    #[serde(default, rename = "secretGroup")]
    secret_group: Option<usize>,
    #[serde(default)]
    entropy: Option<f64>,
    #[serde(default)]
    keywords: Vec<String>,
    #[serde(default)]
    allowlists: Vec<AllowFile>,
}

#[derive(Deserialize)]
struct AllowFile {
    #[serde(default)]
    regexes: Vec<String>,
    #[serde(default)]
    stopwords: Vec<String>,
    #[serde(default, rename = "regexTarget")]
    target: Option<String>,
    #[serde(default)]
    condition: Option<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    commits: Vec<String>,
}

/// What an allowlist's regexes are tested on.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Secret,
    Match,
    Line,
}

/// One allowlist that can apply to text.
#[derive(Debug)]
struct Allow {
    regexes: Vec<Regex>,
    target: Target,
    stopwords: Option<AhoCorasick>,
    /// Every criterion must hold (`condition = "AND"`), else any one.
    all: bool,
}

impl Allow {
    /// `None` for an allowlist that cannot apply to text (paths or commits only, or AND with them).
    fn compile(file: &AllowFile) -> Result<Option<Allow>, RulesError> {
        let all = file.condition.as_deref().is_some_and(|condition| condition.eq_ignore_ascii_case("and"));
        let about_files = !file.paths.is_empty() || !file.commits.is_empty();
        if (all && about_files) || (file.regexes.is_empty() && file.stopwords.is_empty()) {
            return Ok(None);
        }
        let target = match file.target.as_deref() {
            None | Some("secret") => Target::Secret,
            Some("match") => Target::Match,
            Some("line") => Target::Line,
            Some(other) => return Err(RulesError::Target(other.to_string())),
        };
        let regexes = file.regexes.iter().map(|pattern| compile(pattern)).collect::<Result<Vec<_>, _>>()?;
        let stopwords = (!file.stopwords.is_empty())
            .then(|| {
                AhoCorasickBuilder::new()
                    .ascii_case_insensitive(true)
                    .build(&file.stopwords)
                    .map_err(RulesError::Stopwords)
            })
            .transpose()?;
        Ok(Some(Allow { regexes, target, stopwords, all }))
    }

    fn allows(&self, secret: &str, matched: &str, line: &str) -> bool {
        let subject = match self.target {
            Target::Secret => secret,
            Target::Match => matched,
            Target::Line => line,
        };
        let by_regex = (!self.regexes.is_empty()).then(|| self.regexes.iter().any(|regex| regex.is_match(subject)));
        let by_stopword = self.stopwords.as_ref().map(|stopwords| stopwords.is_match(secret));
        let criteria = [by_regex, by_stopword].into_iter().flatten();
        if self.all {
            criteria.into_iter().all(|held| held)
        } else {
            criteria.into_iter().any(|held| held)
        }
    }
}

/// One credential pattern, compiled the first time its keywords are seen (most rules never
/// are: the set costs nothing at start).
#[derive(Debug)]
struct Rule {
    id: String,
    pattern: String,
    regex: OnceLock<Option<Regex>>,
    secret_group: Option<usize>,
    entropy: Option<f64>,
    allows: Vec<Allow>,
}

/// A compiled rule set.
#[derive(Debug)]
pub struct Rules {
    rules: Vec<Rule>,
    /// Every rule's keywords, one automaton.
    keywords: Option<AhoCorasick>,
    /// For each keyword (by pattern index), the rules it wakes.
    woken: Vec<Vec<usize>>,
    /// Rules without keywords: run on every text.
    always: Vec<usize>,
    global: Vec<Allow>,
}

/// A pattern as `regex` reads it: RE2's literal `{` escaped where it is not a repetition, and
/// `\w`, `\d`, `\s` and `\b` ASCII as in Go (`regex` makes them Unicode, where one rule such
/// as `generic-api-key` compiles to 12 MiB and takes 6 MiB of search cache per thread; ASCII,
/// 0.1 and 0.2).
fn go_to_rust(pattern: &str) -> String {
    let bytes = pattern.as_bytes();
    let mut out = String::with_capacity(pattern.len() + 8);
    let (mut escaped, mut in_class) = (false, false);
    for (index, character) in pattern.char_indices() {
        if escaped {
            escaped = false;
            let ascii = match (character, in_class) {
                ('w', true) => "[:word:]",
                ('W', true) => "[:^word:]",
                ('d', true) => "[:digit:]",
                ('D', true) => "[:^digit:]",
                ('s', true) => "\\t\\n\\x0C\\r\\x20",
                ('S', true) => "[^\\t\\n\\x0C\\r\\x20]",
                ('w', false) => "[[:word:]]",
                ('W', false) => "[^[:word:]]",
                ('d', false) => "[[:digit:]]",
                ('D', false) => "[^[:digit:]]",
                ('s', false) => "[\\t\\n\\x0C\\r\\x20]",
                ('S', false) => "[^\\t\\n\\x0C\\r\\x20]",
                ('b', false) => "(?-u:\\b)",
                ('B', false) => "(?-u:\\B)",
                _ => {
                    out.push('\\');
                    out.push(character);
                    continue;
                }
            };
            out.push_str(ascii);
            continue;
        }
        match character {
            '\\' => {
                escaped = true;
                continue;
            }
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '{' if !in_class => {
                let rest = &bytes[index + 1..];
                let digits = rest.iter().take_while(|byte| byte.is_ascii_digit() || **byte == b',').count();
                let repetition = digits > 0 && rest.get(digits) == Some(&b'}') && rest[0].is_ascii_digit();
                let after_atom = index > 0 && !matches!(bytes[index - 1], b'(' | b'|' | b'^');
                if !(repetition && after_atom) {
                    out.push_str("\\{");
                    continue;
                }
            }
            _ => {}
        }
        out.push(character);
    }
    out
}

fn compile(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(&go_to_rust(pattern)).build()
}

/// Shannon entropy of `text` in bits per character, as gitleaks computes it.
fn entropy(text: &str) -> f64 {
    let mut counts = [0u32; 256];
    for byte in text.bytes() {
        counts[usize::from(byte)] += 1;
    }
    let length = text.len() as f64;
    counts
        .iter()
        .filter(|count| **count > 0)
        .map(|count| {
            let share = f64::from(*count) / length;
            -share * share.log2()
        })
        .sum()
}

impl Rules {
    /// gitleaks' rules, read on first use (each rule compiled when it is first needed).
    pub fn gitleaks() -> &'static Rules {
        static RULES: OnceLock<Rules> = OnceLock::new();
        RULES.get_or_init(|| {
            Rules::from_toml(GITLEAKS)
                .unwrap_or_else(|error| panic!("the vendored gitleaks.toml: {}", baaaht_proto::error_chain(&error)))
        })
    }

    /// Rules in gitleaks' format.
    pub fn from_toml(text: &str) -> Result<Rules, RulesError> {
        let file: File = toml::from_str(text)?;
        let global = match &file.allowlist {
            Some(allow) => Allow::compile(allow)?.into_iter().collect(),
            None => vec![],
        };
        let mut rules = vec![];
        let mut keywords: Vec<(String, usize)> = vec![];
        for rule in file.rules {
            let Some(pattern) = rule.regex else { continue };
            let mut allows = vec![];
            for allow in &rule.allowlists {
                let in_rule = |error| RulesError::Rule { id: rule.id.clone(), source: Box::new(error) };
                allows.extend(Allow::compile(allow).map_err(in_rule)?);
            }
            let index = rules.len();
            keywords.extend(rule.keywords.iter().map(|keyword| (keyword.to_ascii_lowercase(), index)));
            let (secret_group, entropy, regex) = (rule.secret_group, rule.entropy, OnceLock::new());
            rules.push(Rule { id: rule.id, pattern, regex, secret_group, entropy, allows });
        }
        Ok(Rules::assemble(rules, keywords, global))
    }

    /// The operator's own patterns (`security.redact.extra_patterns`): (name, regex), run on
    /// every text; the secret is the first non-empty group, else the match.
    pub fn extra(patterns: &[(String, String)]) -> Result<Rules, RulesError> {
        let mut rules = vec![];
        for (name, pattern) in patterns {
            let regex = compile(pattern).map_err(|source| RulesError::Pattern { name: name.clone(), source })?;
            let (id, pattern) = (name.clone(), pattern.clone());
            rules.push(Rule {
                id,
                pattern,
                regex: OnceLock::from(Some(regex)),
                secret_group: None,
                entropy: None,
                allows: vec![],
            });
        }
        Ok(Rules::assemble(rules, vec![], vec![]))
    }

    fn assemble(rules: Vec<Rule>, keywords: Vec<(String, usize)>, global: Vec<Allow>) -> Rules {
        let mut names: Vec<String> = vec![];
        let mut woken: Vec<Vec<usize>> = vec![];
        for (keyword, rule) in keywords {
            match names.iter().position(|name| *name == keyword) {
                Some(at) => woken[at].push(rule),
                None => {
                    names.push(keyword);
                    woken.push(vec![rule]);
                }
            }
        }
        let with_keywords: std::collections::HashSet<usize> = woken.iter().flatten().copied().collect();
        let always = (0..rules.len()).filter(|index| !with_keywords.contains(index)).collect();
        let keywords = (!names.is_empty()).then(|| {
            AhoCorasickBuilder::new()
                .ascii_case_insensitive(true)
                .match_kind(MatchKind::Standard)
                .build(&names)
                .expect("keywords are plain strings")
        });
        Rules { rules, keywords, woken, always, global }
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Every credential in `text`, appended to `found`.
    pub fn find(&self, text: &str, found: &mut Vec<Finding>) {
        let mut run = vec![false; self.rules.len()];
        for index in &self.always {
            run[*index] = true;
        }
        if let Some(keywords) = &self.keywords {
            for matched in keywords.find_overlapping_iter(text) {
                for rule in &self.woken[matched.pattern().as_usize()] {
                    run[*rule] = true;
                }
            }
        }
        for (rule, _) in self.rules.iter().zip(&run).filter(|(_, run)| **run) {
            self.apply(rule, text, found);
        }
    }

    /// Every rule compiled now; the ids of those that do not compile, with why.
    pub fn compile_all(&self) -> Vec<String> {
        self.rules
            .iter()
            .filter_map(|rule| compile(&rule.pattern).err().map(|error| format!("{}: {error}", rule.id)))
            .collect()
    }

    fn apply(&self, rule: &Rule, text: &str, found: &mut Vec<Finding>) {
        // silent-ok: a vendored rule that does not compile is found by the unit test
        // (`compile_all`); nothing may be logged here, where log lines themselves are scanned.
        let Some(regex) = rule.regex.get_or_init(|| compile(&rule.pattern).ok()) else { return };
        for captures in regex.captures_iter(text) {
            let whole = captures.get(0).expect("group 0 is the match");
            let secret = match rule.secret_group {
                Some(group) if group > 0 => captures.get(group),
                _ => captures.iter().skip(1).flatten().find(|group| !group.as_str().is_empty()),
            }
            .unwrap_or(whole);
            let value = secret.as_str();
            if rule.entropy.is_some_and(|least| entropy(value) <= least) {
                continue;
            }
            if rule.id.starts_with("generic") && !value.bytes().any(|byte| byte.is_ascii_digit()) {
                continue;
            }
            let line_start = text[..whole.start()].rfind('\n').map_or(0, |at| at + 1);
            let line_end = text[whole.end()..].find('\n').map_or(text.len(), |at| whole.end() + at);
            let line = &text[line_start..line_end];
            let allowed = |allow: &Allow| allow.allows(value, whole.as_str(), line);
            if self.global.iter().any(allowed) || rule.allows.iter().any(allowed) {
                continue;
            }
            found.push(Finding { start: secret.start(), end: secret.end(), rule: rule.id.clone() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_gitleaks_rule_compiles() {
        let rules = Rules::gitleaks();
        assert!(rules.len() >= 220, "{} rules", rules.len());
        assert_eq!(rules.compile_all(), Vec::<String>::new());
    }

    fn found(text: &str) -> Vec<String> {
        let mut found = vec![];
        Rules::gitleaks().find(text, &mut found);
        found.into_iter().map(|finding| format!("{}={}", finding.rule, &text[finding.start..finding.end])).collect()
    }

    #[test]
    fn well_known_credentials_are_found_and_prose_is_not() {
        let github = "ghp_R7s2kLm9QwErTy0UiOpAsDfGhJkLzXcVbN12";
        assert_eq!(found(&format!("token is {github} ok")), vec![format!("github-pat={github}")]);
        let aws = "AKIAZ7QW3ERT5YUI6OPA";
        assert!(found(&format!("aws_access_key_id = {aws}")).iter().any(|hit| hit.ends_with(aws)));
        let generic = found("my api_key = \"x9f8Kd72LmQp0vZr5TyWb\"\n");
        assert_eq!(generic, vec!["generic-api-key=x9f8Kd72LmQp0vZr5TyWb".to_string()]);
        assert!(found("The key to a good API is a secret handshake between friends.").is_empty());
        assert!(found("password = \"${PASSWORD}\"").is_empty(), "a reference is allowed");
    }

    #[test]
    fn re2_literal_braces_are_escaped_and_repetitions_kept() {
        assert_eq!(go_to_rust(r"^\$(?:\d+|{\d+})$"), r"^\$(?:[[:digit:]]+|\{[[:digit:]]+})$");
        assert_eq!(go_to_rust(r"a{2,5}[{]x"), r"a{2,5}[{]x");
        assert_eq!(go_to_rust(r"^\${(?:[A-Z_]+)}$"), r"^\$\{(?:[A-Z_]+)}$");
    }

    #[test]
    fn classes_are_ascii_as_in_go() {
        assert_eq!(
            go_to_rust(r"\b[\w.-]{8}\s\d\S[\s\S]"),
            r"(?-u:\b)[[:word:].-]{8}[\t\n\x0C\r\x20][[:digit:]][^\t\n\x0C\r\x20][\t\n\x0C\r\x20[^\t\n\x0C\r\x20]]"
        );
        let rules = Rules::extra(&[("word".into(), r"\bk\w+\b".into())]).expect("compiles");
        let mut found = vec![];
        rules.find("é kéy key1 ", &mut found);
        // `é` is no word character in Go: `kéy` is not one word, `key1` is.
        assert_eq!(found.iter().map(|f| f.start).collect::<Vec<_>>(), vec![8]);
    }

    #[test]
    fn extra_patterns_run_on_every_text() {
        let rules = Rules::extra(&[("employee-id".into(), r"EMP-(\d{6})".into())]).expect("compiles");
        let mut found = vec![];
        rules.find("badge EMP-123456 here", &mut found);
        assert_eq!(found, vec![Finding { start: 10, end: 16, rule: "employee-id".into() }]);
        let error = Rules::extra(&[("bad".into(), "(".into())]).expect_err("does not compile");
        assert!(error.to_string().contains("pattern bad"));
    }
}
