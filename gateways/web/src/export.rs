//! A conversation as a file: markdown, or a self-contained HTML page made from it (raw HTML in
//! the conversation is shown as text, never run).

use baaaht_proto::v1;

/// The branch as markdown: a heading per speaker, their words as they wrote them.
pub fn markdown(title: &str, entries: &[&v1::SessionEntry]) -> String {
    use v1::session_entry::Entry;
    let mut out = format!("# {}\n", title.replace('\n', " "));
    for entry in entries {
        let when = entry.timestamp.get(..16).unwrap_or(&entry.timestamp).replace('T', " ");
        match &entry.entry {
            Some(Entry::Message(message)) => {
                let who = match message.role.as_str() {
                    "user" if !message.sender_name.is_empty() => plain(&message.sender_name),
                    "user" => "You".into(),
                    "assistant" => "Assistant".into(),
                    other => other.to_string(),
                };
                out.push_str(&format!("\n## {who} · {when}\n\n{}\n", message.content.trim_end()));
            }
            Some(Entry::Delegate(delegate)) => {
                let agent = baaaht_gateway_kit::sentences::agent(delegate.agent);
                out.push_str(&format!("\n> Delegated to {agent}: {}\n", delegate.task.lines().next().unwrap_or("")));
            }
            Some(Entry::Compaction(compaction)) => {
                out.push_str(&format!("\n> Earlier messages, summarized: {}\n", compaction.summary.trim()));
            }
            Some(Entry::ModelChange(change)) => {
                out.push_str(&format!("\n> Model: {} → {}\n", change.previous_model, change.new_model));
            }
            Some(Entry::Activity(activity)) => {
                let event = baaaht_proto::transcript::activity_event(activity);
                if let Some(said) = event.and_then(baaaht_gateway_kit::sentences::activity) {
                    // A message is markdown, as answers are; the rest names hosts, commands and
                    // people as they were written: text, never markup.
                    let said = match event {
                        Some(v1::orchestrator_event::Event::Message(_)) => said,
                        _ => plain(&said),
                    };
                    out.push_str(&format!("\n> {}\n", said.trim_end().replace('\n', "\n> ")));
                }
            }
            None => {}
        }
    }
    out
}

/// `text` as markdown that shows it as it is: every ASCII punctuation mark escaped (a name or a
/// host never becomes a link, an image or a code span).
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_punctuation() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A self-contained HTML page showing `markdown`.
pub fn html(title: &str, markdown: &str) -> String {
    use pulldown_cmark::{Event, Options, Parser};
    let parser =
        Parser::new_ext(markdown, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH).map(|event| match event {
            // What a conversation says is shown, never interpreted as markup.
            Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
            other => other,
        });
    let mut body = String::new();
    pulldown_cmark::html::push_html(&mut body, parser);
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" \
         content=\"width=device-width, initial-scale=1\"><meta http-equiv=\"Content-Security-Policy\" \
         content=\"default-src 'none'; style-src 'unsafe-inline'\"><title>{}</title><style>:root{{color-scheme:light dark;\
         font-family:system-ui,sans-serif}}body{{max-width:48rem;margin:2rem auto;padding:0 1rem;line-height:1.5}}\
         pre{{overflow:auto;padding:.75rem;border-radius:.5rem;background:color-mix(in srgb,CanvasText 8%,Canvas)}}\
         blockquote{{opacity:.75;margin-left:0;padding-left:1rem;border-left:3px solid}}</style></head><body>{body}</body></html>",
        crate::app::escape(title)
    )
}

/// A file name for `title`: letters, digits and `-` only.
pub fn file_name(title: &str, extension: &str) -> String {
    let mut name = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            name.push(c.to_ascii_lowercase());
        } else if !name.ends_with('-') && !name.is_empty() {
            name.push('-');
        }
        if name.len() >= 60 {
            break;
        }
    }
    let name = name.trim_end_matches('-');
    let name = if name.is_empty() { "conversation" } else { name };
    format!("{name}.{extension}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use v1::session_entry::Entry;

    fn message(id: &str, parent: &str, role: &str, text: &str) -> v1::SessionEntry {
        v1::SessionEntry {
            id: id.into(),
            parent: parent.into(),
            timestamp: "2026-11-23T10:00:00Z".into(),
            entry: Some(Entry::Message(v1::MessageEntry {
                role: role.into(),
                content: text.into(),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn the_export_follows_the_newest_branch() {
        let entries = [
            message("a", "", "user", "first"),
            message("b", "a", "assistant", "answer one"),
            message("c", "a", "user", "<script>alert(1)</script> edited"),
            message("d", "c", "assistant", "answer two\n\n```rust\nfn main() {}\n```"),
        ];
        let branch = baaaht_proto::transcript::branch(&entries, None);
        let ids: Vec<&str> = branch.iter().map(|entry| entry.id.as_str()).collect();
        assert_eq!(ids, ["a", "c", "d"]);
        let text = markdown("Plans", &branch);
        assert!(text.starts_with("# Plans\n"));
        assert!(!text.contains("answer one"));
        assert!(text.contains("## Assistant · 2026-11-23 10:00"));
        let page = html("Plans", &text);
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{page}");
        assert!(!page.contains("<script>"));
        assert!(page.contains("<code class=\"language-rust\">"));
    }

    #[test]
    fn names_hosts_and_commands_in_a_notice_are_text_not_markup() {
        let settled = v1::ApprovalSettled {
            id: "a1".into(),
            decision: "once".into(),
            by: "M [pay](javascript:alert(1)) ![x](https://evil.example/p.png)".into(),
        };
        let activity = v1::ActivityEntry {
            after: "a".into(),
            event: Some(v1::OrchestratorEvent {
                event: Some(v1::orchestrator_event::Event::ApprovalSettled(settled)),
                ..Default::default()
            }),
        };
        let entries = [
            message("a", "", "user", "fetch it"),
            v1::SessionEntry { id: "x".into(), entry: Some(Entry::Activity(activity)), ..Default::default() },
        ];
        let branch = baaaht_proto::transcript::branch(&entries, None);
        let page = html("Plans", &markdown("Plans", &branch));
        assert!(
            page.contains("Allowed once, by M [pay](javascript:alert(1)) ![x](https://evil.example/p.png)."),
            "{page}"
        );
        assert!(!page.contains("<a ") && !page.contains("<img"), "{page}");
    }

    #[test]
    fn file_names_are_plain() {
        assert_eq!(file_name("Trip to Lyon / June!", "md"), "trip-to-lyon-june.md");
        assert_eq!(file_name("../../etc", "html"), "etc.html");
        assert_eq!(file_name("", "md"), "conversation.md");
    }
}
