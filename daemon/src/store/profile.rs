//! A context's profile, `users/{id}/USER.md` or `groups/{id}/GROUP.md`: the agents read it whole;
//! the daemon reads one line of it, `preferred_channel:`, where a scheduled task's results go
//! (DESIGN.md §9.4). A settings page writes that line in place and leaves the rest of the file as
//! its owner wrote it.

use std::path::Path;

use crate::base::state::{self, StateError};

/// `text` (a name, one line) as plain text in markdown: what would format it, link it or
/// start a heading is escaped, so that it reads as the words it is.
pub fn plain_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if matches!(c, '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' | '|' | '~' | '!') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The channels a result can be sent to: each chat gateway delivers the notices of its own
/// (`kit::follow`), the terminal and the web theirs.
pub fn is_valid_channel(channel: &str) -> bool {
    matches!(channel, "" | "none" | "tui" | "cli" | "web" | "slack" | "telegram" | "matrix" | "email")
        || channel.strip_prefix("slack/").is_some_and(|rest| {
            !rest.is_empty() && rest.len() <= 64 && rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

/// The key and value of a `key: value` line (front matter, a `- ` list item or bold markdown
/// alike), the key in snake case.
fn setting(line: &str) -> Option<(String, String)> {
    let line = line.trim().trim_start_matches("- ").trim();
    let (key, value) = line.split_once(':')?;
    let key = key.trim().trim_matches('*').trim().to_ascii_lowercase().replace(' ', "_");
    Some((key, value.trim().trim_matches('`').trim().to_ascii_lowercase()))
}

/// The channel a profile's `preferred_channel:` line names, if it names one.
pub fn preferred_channel(profile: &str) -> Option<String> {
    profile.lines().find_map(|line| {
        let (key, value) = setting(line)?;
        (key == "preferred_channel" && is_valid_channel(&value) && !value.is_empty()).then_some(value)
    })
}

/// `profile` with its `preferred_channel:` line saying `channel` (where the first such line
/// was, else at the end), or without one when `channel` is empty.
pub fn with_preferred_channel(profile: &str, channel: &str) -> String {
    let mut out = String::with_capacity(profile.len() + 32);
    let mut written = channel.is_empty();
    for line in profile.split_inclusive('\n') {
        if setting(line).is_some_and(|(key, _)| key == "preferred_channel") {
            if !written {
                out.push_str(&format!("preferred_channel: {channel}\n"));
                written = true;
            }
            continue;
        }
        out.push_str(line);
    }
    if !written {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        if !out.is_empty() && !out.ends_with("\n\n") {
            out.push('\n');
        }
        out.push_str(&format!("preferred_channel: {channel}\n"));
    }
    out
}

/// Writes `channel` as the preferred channel of the profile at `path` (made when missing).
pub fn set_preferred_channel(path: &Path, channel: &str) -> Result<(), StateError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => return Err(StateError::Read { path: path.to_path_buf(), source }),
    };
    if let Some(folder) = path.parent() {
        std::fs::create_dir_all(folder).map_err(|source| StateError::Write { path: path.to_path_buf(), source })?;
    }
    state::write_atomic(path, with_preferred_channel(&text, channel).as_bytes(), 0o600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_read_in_any_of_the_shapes_people_write_it() {
        assert_eq!(preferred_channel("# Ann\n\npreferred_channel: web\n"), Some("web".into()));
        assert_eq!(preferred_channel("- **Preferred channel**: `Slack/DM`\n"), Some("slack/dm".into()));
        assert_eq!(preferred_channel("preferred_channel: carrier pigeon\n"), None);
        // Every chat gateway's channel: it delivers the notices of its own.
        for channel in ["telegram", "matrix", "email"] {
            assert_eq!(preferred_channel(&format!("preferred_channel: {channel}\n")).as_deref(), Some(channel));
        }
        assert_eq!(preferred_channel("# Ann\n"), None);
    }

    #[test]
    fn writing_the_line_keeps_the_rest_of_the_profile() {
        let profile = "# Ann\n\n- Likes tea\n- preferred_channel: tui\n- Lives in Ghent\n";
        assert_eq!(
            with_preferred_channel(profile, "web"),
            "# Ann\n\n- Likes tea\npreferred_channel: web\n- Lives in Ghent\n"
        );
        assert_eq!(with_preferred_channel(profile, ""), "# Ann\n\n- Likes tea\n- Lives in Ghent\n");
        assert_eq!(with_preferred_channel("# Ann", "web"), "# Ann\n\npreferred_channel: web\n");
        assert_eq!(with_preferred_channel("", "none"), "preferred_channel: none\n");
        let again = with_preferred_channel(&with_preferred_channel("# Ann\n", "web"), "slack/dm");
        assert_eq!(preferred_channel(&again), Some("slack/dm".into()));
        assert_eq!(again.matches("preferred_channel").count(), 1);
    }
}
