//! `HEARTBEAT.md` (spec §15.3): each `##` heading starts a heartbeat with `Cadence:`,
//! `Prompt:` and an optional `Active hours:` (case-insensitive, a leading `- ` optional). A
//! prompt runs on to the next `##` heading. A malformed section is skipped with a warning that
//! names its line; the others are still used.

use super::schedule::{ActiveHours, Cadence, ScheduleError};

/// Why a section of `HEARTBEAT.md` is skipped (a [`Warning`] at its heading's line).
///
/// Each message carries its cause's text, so none is a `source` (a chain would say it twice).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    #[error("a heartbeat heading without a name; write `## Name`")]
    NoName,
    /// A field that does not read; the message says why as well, as a warning is shown alone.
    #[error("heartbeat {shown}, line {line}: {error}")]
    Field { shown: String, line: usize, error: ScheduleError },
    #[error("heartbeat {shown} has no `Cadence:` line before its prompt (hourly, daily, weekly, biweekly or monthly)")]
    NoCadence { shown: String },
    #[error("heartbeat {shown} has no prompt; add `Prompt:` and what to do")]
    NoPrompt { shown: String },
}

/// One heartbeat of a context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub title: String,
    /// 1-based line of its heading.
    pub line: usize,
    pub cadence: Cadence,
    pub prompt: String,
    /// As written, checked: `09:00-22:00`.
    pub active_hours: Option<String>,
}

/// A section that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub line: usize,
    pub message: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub sections: Vec<Section>,
    pub warnings: Vec<Warning>,
}

/// Longest prompt kept (a heartbeat's prompt is a paragraph, not a document).
const MOST_PROMPT: usize = 8 * 1024;

/// A `key: value` line (`- Cadence: hourly`), the key lower-cased.
fn field(line: &str) -> Option<(String, &str)> {
    let line = line.trim_start();
    let line = line.strip_prefix("- ").or_else(|| line.strip_prefix("* ")).unwrap_or(line).trim_start();
    let (key, value) = line.split_once(':')?;
    let key = key.trim().trim_matches('*').trim().to_ascii_lowercase();
    matches!(key.as_str(), "cadence" | "prompt" | "active hours").then_some((key, value.trim()))
}

fn heading(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("##")?;
    if rest.starts_with('#') {
        return None;
    }
    (rest.is_empty() || rest.starts_with([' ', '\t'])).then(|| rest.trim())
}

/// Reads a `HEARTBEAT.md`.
pub fn parse(text: &str) -> Parsed {
    let mut parsed = Parsed::default();
    let lines: Vec<&str> = text.split('\n').map(|line| line.strip_suffix('\r').unwrap_or(line)).collect();
    let mut starts: Vec<(usize, &str)> =
        lines.iter().enumerate().filter_map(|(index, line)| Some((index, heading(line)?))).collect();
    starts.push((lines.len(), ""));
    for pair in starts.windows(2) {
        let ((start, title), (end, _)) = (pair[0], pair[1]);
        let body = &lines[start + 1..end];
        match section(title, start + 1, body) {
            Ok(section) => {
                if parsed.sections.iter().any(|other| other.title.eq_ignore_ascii_case(&section.title)) {
                    parsed.warnings.push(Warning {
                        line: start + 1,
                        message: format!("a second heartbeat called \"{}\"; give each its own heading", section.title),
                    });
                } else {
                    parsed.sections.push(section);
                }
            }
            Err(error) => parsed.warnings.push(Warning { line: start + 1, message: error.to_string() }),
        }
    }
    parsed
}

fn section(title: &str, line: usize, body: &[&str]) -> Result<Section, HeartbeatError> {
    let shown = if title.is_empty() { "(untitled)".to_string() } else { format!("\"{title}\"") };
    if title.is_empty() {
        return Err(HeartbeatError::NoName);
    }
    let (mut cadence, mut active_hours, mut prompt) = (None, None, None::<Vec<&str>>);
    for (offset, text) in body.iter().enumerate() {
        if let Some(prompt) = prompt.as_mut() {
            prompt.push(text);
            continue;
        }
        let Some((key, value)) = field(text) else { continue };
        let at = line + 1 + offset;
        let unreadable = |error| HeartbeatError::Field { shown: shown.clone(), line: at, error };
        match key.as_str() {
            "cadence" => cadence = Some(value.parse::<Cadence>().map_err(unreadable)?),
            "active hours" => {
                let hours: ActiveHours = value.parse().map_err(unreadable)?;
                active_hours = Some(hours.to_string());
            }
            _ => prompt = Some(vec![value]),
        }
    }
    let cadence = cadence.ok_or_else(|| HeartbeatError::NoCadence { shown: shown.clone() })?;
    let prompt = prompt.map(|lines| lines.join("\n").trim().to_string()).unwrap_or_default();
    if prompt.is_empty() {
        return Err(HeartbeatError::NoPrompt { shown });
    }
    let mut prompt = prompt;
    if prompt.len() > MOST_PROMPT {
        let mut cut = MOST_PROMPT;
        while !prompt.is_char_boundary(cut) {
            cut -= 1;
        }
        prompt.truncate(cut);
    }
    Ok(Section { title: title.to_string(), line, cadence, prompt, active_hours })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC_EXAMPLE: &str =
        "# HEARTBEAT.md — User: billm\n\n## Email Triage\n- Cadence: hourly\n- Prompt: Check my email \
                                and let me know if anything looks urgent\n\n## Project Status  \n- Cadence: daily\n- \
                                Prompt: Review my open GitHub PRs\n\n## Weekly Digest\n- Cadence: weekly\n- Prompt: \
                                Summarize this week's activity\n";

    #[test]
    fn the_spec_example() {
        let parsed = parse(SPEC_EXAMPLE);
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let titles: Vec<(&str, Cadence, usize)> =
            parsed.sections.iter().map(|s| (s.title.as_str(), s.cadence, s.line)).collect();
        assert_eq!(
            titles,
            [
                ("Email Triage", Cadence::Hourly, 3),
                ("Project Status", Cadence::Daily, 7),
                ("Weekly Digest", Cadence::Weekly, 11)
            ]
        );
        assert_eq!(parsed.sections[0].prompt, "Check my email and let me know if anything looks urgent");
    }

    #[test]
    fn table() {
        struct Case {
            name: &'static str,
            text: &'static str,
            sections: &'static [(&'static str, &'static str)],
            warnings: &'static [(usize, &'static str)],
        }
        let cases = [
            Case {
                name: "CRLF line ends, no dash, any case",
                text: "## A\r\nCADENCE: Daily\r\nprompt: do a\r\n",
                sections: &[("A", "do a")],
                warnings: &[],
            },
            Case {
                name: "a multi-line prompt runs to the next heading",
                text: "## A\n- Cadence: weekly\n- Prompt: first line\nsecond line\n\n### not a heading of ours\nthird\n## B\nCadence: hourly\nPrompt: b",
                sections: &[("A", "first line\nsecond line\n\n### not a heading of ours\nthird"), ("B", "b")],
                warnings: &[],
            },
            Case {
                name: "the prompt may start on the next line",
                text: "## A\n- Cadence: monthly\n- Prompt:\n  Look at the bills.\n",
                sections: &[("A", "Look at the bills.")],
                warnings: &[],
            },
            Case {
                name: "missing prompt skipped, the rest kept",
                text: "## A\n- Cadence: daily\n\n## B\n- Cadence: daily\n- Prompt: b\n",
                sections: &[("B", "b")],
                warnings: &[(1, "has no prompt")],
            },
            Case {
                name: "missing cadence",
                text: "intro\n## A\n- Prompt: a\n",
                sections: &[],
                warnings: &[(2, "has no `Cadence:` line")],
            },
            Case {
                name: "unknown cadence names its line",
                text: "## A\n- Cadence: every so often\n- Prompt: a\n## B\n- Cadence: hourly\n- Prompt: b",
                sections: &[("B", "b")],
                warnings: &[(1, "line 2: schedule.cadence: `every so often` is not a cadence")],
            },
            Case {
                name: "active hours",
                text: "## A\n- Cadence: hourly\n- Active hours: 9:00-22:00\n- Prompt: a\n## B\n- Cadence: hourly\n- Active Hours: nine to five\n- Prompt: b",
                sections: &[("A", "a")],
                warnings: &[(5, "line 7: active hours: `nine to five` is not a time range")],
            },
            Case {
                name: "duplicate and untitled headings",
                text: "## A\nCadence: daily\nPrompt: a\n##\nCadence: daily\nPrompt: x\n## a\nCadence: daily\nPrompt: y",
                sections: &[("A", "a")],
                warnings: &[(4, "without a name"), (7, "a second heartbeat called \"a\"")],
            },
            Case { name: "empty file", text: "", sections: &[], warnings: &[] },
        ];
        for case in cases {
            let parsed = parse(case.text);
            let sections: Vec<(&str, &str)> =
                parsed.sections.iter().map(|s| (s.title.as_str(), s.prompt.as_str())).collect();
            assert_eq!(sections, case.sections, "{}", case.name);
            assert_eq!(parsed.warnings.len(), case.warnings.len(), "{}: {:?}", case.name, parsed.warnings);
            for (warning, (line, text)) in parsed.warnings.iter().zip(case.warnings) {
                assert_eq!(warning.line, *line, "{}: {warning:?}", case.name);
                assert!(warning.message.contains(text), "{}: {warning:?}", case.name);
            }
        }
        let parsed = parse("## A\n- Cadence: hourly\n- Active hours: 9:00-22:00\n- Prompt: a");
        assert_eq!(parsed.sections[0].active_hours.as_deref(), Some("09:00-22:00"));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in "(\\PC|\n|\r|## |- Cadence: |Prompt: |Active hours: |daily|:|-){0,200}") {
            let parsed = parse(&text);
            for section in &parsed.sections {
                proptest::prop_assert!(!section.prompt.is_empty());
                proptest::prop_assert!(section.line >= 1);
            }
        }

        #[test]
        fn never_panics_on_any_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = parse(&String::from_utf8_lossy(&bytes));
        }
    }
}
