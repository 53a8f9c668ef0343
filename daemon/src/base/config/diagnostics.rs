//! Turning parse errors into sentences a person can act on: `file:line:col: what, did you mean`.
//!
//! serde reports unknown keys and enum values as "unknown field `x`, expected one of `a`, `b`";
//! this module finds the nearest valid name in that list and appends it as a suggestion.

use std::fmt::Write as _;

/// Edit distance between two short strings (keys, enum values).
pub(crate) fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        current[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

/// The candidate closest to `wrong`, if it is close enough to be a plausible typo.
pub(crate) fn nearest<'a>(wrong: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let wrong_lower = wrong.to_ascii_lowercase();
    let limit = (wrong.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .map(|candidate| (levenshtein(&wrong_lower, candidate), candidate))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Names between backticks in a serde message, in order.
fn backticked(message: &str) -> Vec<&str> {
    message.split('`').skip(1).step_by(2).collect()
}

/// Appends "; did you mean `x`?" to a serde "unknown field/variant" message when a close match
/// exists among the expected names.
pub(crate) fn with_suggestion(message: &str) -> String {
    let is_unknown = message.contains("unknown field") || message.contains("unknown variant");
    let names = backticked(message);
    let mut out = message.to_string();
    if let Some(now) = moved(message, &names) {
        let _ = write!(out, ": {now}");
        return out;
    }
    if is_unknown && names.len() >= 2 {
        if let Some(best) = nearest(names[0], names[1..].iter().copied()) {
            let _ = write!(out, "; did you mean `{best}`?");
        }
    }
    out
}

/// Settings of the specification's `config.yaml` that baaaht keeps elsewhere: (the key, a key
/// beside it that tells its section, where it lives now).
const MOVED: &[(&str, &str, &str)] = &[
    (
        "channels",
        "orchestrator",
        "chat channels are not set in config.yaml: register each with `baaahtd gateways add` — Slack: \
         `baaahtd gateways add slack NAME --team ID -- --keyword WORD` (a mention always answers; `--keyword` and \
         `--always CHANNEL` take the place of trigger_pattern), its tokens kept by `baaahtd secrets set \
         SLACK_BOT_TOKEN_NAME` and `SLACK_APP_TOKEN_NAME`; the web: `baaahtd gateways add web NAME --issuer URL \
         --audience CLIENT_ID -- --listen ADDR:PORT`; the terminal needs none (`baaaht tui --theme light`). See \
         docs/channels.md, and remove the `channels` section",
    ),
    (
        "default_timeout",
        "engine_timeout",
        "containers are not timed as a whole: a turn's limit is agents.ROLE.timeout, a tool call's \
         tools.default_timeout (tools.timeout_overrides per tool), a scheduled task's its own timeout; remove \
         container.default_timeout",
    ),
    (
        "messages",
        "ipc",
        "an agent's message is delivered as soon as its tool call ends, and whatever waits is delivered on \
         every orchestrator.poll_intervals.ipc pass: set that instead, and remove poll_intervals.messages",
    ),
];

/// Where a key serde did not know lives now, if it is one of [`MOVED`].
fn moved(message: &str, names: &[&str]) -> Option<&'static str> {
    if !message.contains("unknown field") {
        return None;
    }
    let (key, beside) = names.split_first()?;
    MOVED.iter().find(|(moved, sibling, _)| moved == key && beside.contains(sibling)).map(|(.., now)| *now)
}

/// Removes serde_yaml's trailing " at line N column M" (we print the location up front).
pub(crate) fn strip_yaml_location(message: &str) -> &str {
    match message.rfind(" at line ") {
        Some(index) if message[index..].contains(" column ") => &message[..index],
        _ => message,
    }
}

/// The 1-based line of the key at `path` (e.g. `["fallback_chains", "anthropic"]`) in a YAML
/// document, found by indentation; used for checks made after deserialization.
pub(crate) fn find_yaml_key(text: &str, path: &[&str]) -> Option<(usize, usize)> {
    let mut depth = 0;
    let mut parent_indent: Option<usize> = None;
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        if let Some(parent) = parent_indent {
            if indent <= parent {
                // Left the block of the key matched last: the path is not there.
                return None;
            }
        }
        let key = trimmed.trim_start_matches("- ").split(':').next().unwrap_or("").trim();
        let key = key.trim_matches(|c| c == '"' || c == '\'');
        if key == path[depth] && trimmed.contains(':') {
            if depth + 1 == path.len() {
                return Some((number + 1, indent + 1));
            }
            depth += 1;
            parent_indent = Some(indent);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        let cases = [
            ("unknown field `nmae`, expected one of `name`, `timezone`", Some("name")),
            ("unknown field `log_levle`, expected one of `name`, `log_level`", Some("log_level")),
            ("unknown variant `dokcer`, expected one of `auto`, `docker`, `podman`", Some("docker")),
            ("unknown field `zzzzzz`, expected one of `name`, `timezone`", None),
            ("unknown field `porrt`, expected `port`", Some("port")),
            ("invalid type: string \"x\", expected u16", None),
        ];
        for (message, expected) in cases {
            let out = with_suggestion(message);
            match expected {
                Some(best) => assert!(out.ends_with(&format!("did you mean `{best}`?")), "{out}"),
                None => assert!(!out.contains("did you mean"), "{out}"),
            }
        }
    }

    #[test]
    fn strips_location_suffix() {
        assert_eq!(strip_yaml_location("system: bad at line 3 column 5"), "system: bad");
        assert_eq!(strip_yaml_location("plain"), "plain");
    }

    #[test]
    fn finds_nested_keys() {
        let text = "providers:\n  anthropic:\n    api_key: x\nfallback_chains:\n  # c\n  anthropic: [openai]\n";
        assert_eq!(find_yaml_key(text, &["fallback_chains", "anthropic"]), Some((6, 3)));
        assert_eq!(find_yaml_key(text, &["providers", "anthropic", "api_key"]), Some((3, 5)));
        assert_eq!(find_yaml_key(text, &["fallback_chains", "openai"]), None);
    }
}
