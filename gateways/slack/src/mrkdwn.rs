//! Markdown (what the models write) as Slack's mrkdwn, and long answers cut into messages Slack
//! takes.
//!
//! mrkdwn has bold `*x*`, italic `_x_`, strike `~x~`, code and code blocks, quotes, and links
//! `<url|text>`; it has no headings, tables or nested lists, and `&`, `<` and `>` in text must be
//! escaped. Headings become bold lines, list items bullets, tables their rows as code.

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// The longest text one Slack message carries well (Slack truncates past 40,000 characters and
/// splits `text` past 4,000 in some clients; blocks hold at most 3,000).
pub const MESSAGE_LIMIT: usize = 3_900;

pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// `markdown` as mrkdwn.
pub fn from_markdown(markdown: &str) -> String {
    let mut out = String::new();
    // Open lists: the next item's number, or none for bullets.
    let mut lists: Vec<Option<u64>> = vec![];
    let mut link: Option<String> = None;
    let mut quote = 0usize;
    let mut in_code_block = false;
    let mut at_line_start = true;
    let newline = |out: &mut String, at_line_start: &mut bool| {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        *at_line_start = true;
    };
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES;
    for event in Parser::new_ext(markdown, options) {
        if at_line_start && quote > 0 && !matches!(event, Event::End(_)) && !in_code_block {
            out.push_str(&"> ".repeat(quote.min(1)));
        }
        match event {
            Event::Start(Tag::Paragraph) => {}
            Event::End(TagEnd::Paragraph) => {
                newline(&mut out, &mut at_line_start);
                if lists.is_empty() && quote == 0 {
                    out.push('\n');
                }
                continue;
            }
            Event::Start(Tag::Heading { .. }) => out.push('*'),
            Event::End(TagEnd::Heading(level)) => {
                out.push('*');
                newline(&mut out, &mut at_line_start);
                if level <= HeadingLevel::H2 {
                    out.push('\n');
                }
                continue;
            }
            Event::Start(Tag::Strong) | Event::End(TagEnd::Strong) => out.push('*'),
            Event::Start(Tag::Emphasis) | Event::End(TagEnd::Emphasis) => out.push('_'),
            Event::Start(Tag::Strikethrough) | Event::End(TagEnd::Strikethrough) => out.push('~'),
            Event::Start(Tag::BlockQuote(_)) => {
                newline(&mut out, &mut at_line_start);
                quote += 1;
                continue;
            }
            Event::End(TagEnd::BlockQuote(_)) => {
                quote = quote.saturating_sub(1);
                continue;
            }
            // mrkdwn shows no language: the fence stands on its own.
            Event::Start(Tag::CodeBlock(_)) => {
                newline(&mut out, &mut at_line_start);
                out.push_str("```\n");
                in_code_block = true;
            }
            Event::End(TagEnd::CodeBlock) => {
                if !out.ends_with('\n') {
                    out.push('\n');
                }
                out.push_str("```\n");
                in_code_block = false;
                at_line_start = true;
                continue;
            }
            Event::Start(Tag::List(first)) => {
                newline(&mut out, &mut at_line_start);
                lists.push(first);
                continue;
            }
            Event::End(TagEnd::List(_)) => {
                lists.pop();
                if lists.is_empty() {
                    newline(&mut out, &mut at_line_start);
                    out.push('\n');
                }
                continue;
            }
            Event::Start(Tag::Item) => {
                newline(&mut out, &mut at_line_start);
                let depth = lists.len().saturating_sub(1);
                out.push_str(&"    ".repeat(depth));
                match lists.last_mut() {
                    Some(Some(number)) => {
                        out.push_str(&format!("{number}. "));
                        *number += 1;
                    }
                    _ => out.push_str("• "),
                }
                at_line_start = false;
                continue;
            }
            Event::End(TagEnd::Item) => {}
            // Only web and mail links: `<!channel|x>` or `<@U1|x>` would ping people.
            Event::Start(Tag::Link { dest_url, .. })
                if ["http://", "https://", "mailto:"].iter().any(|scheme| dest_url.starts_with(scheme)) =>
            {
                link = Some(dest_url.to_string());
                out.push('<');
                out.push_str(&dest_url.replace('|', "%7C").replace('>', "%3E"));
                out.push('|');
            }
            Event::End(TagEnd::Link) if link.take().is_some() => out.push('>'),
            Event::Start(Tag::Table(_)) => {
                newline(&mut out, &mut at_line_start);
                out.push_str("```\n");
                in_code_block = true;
            }
            Event::End(TagEnd::Table) => {
                out.push_str("```\n");
                in_code_block = false;
                at_line_start = true;
                continue;
            }
            Event::End(TagEnd::TableHead) | Event::End(TagEnd::TableRow) => {
                out.push('\n');
                at_line_start = true;
                continue;
            }
            Event::End(TagEnd::TableCell) => out.push_str(" | "),
            Event::Text(text) => {
                // Slack reads `<!channel>` even in a code block; its entities show as the characters.
                if link.is_some() && !in_code_block {
                    out.push_str(&escape(&text).replace('|', "¦"));
                } else {
                    out.push_str(&escape(&text));
                }
            }
            Event::Code(code) => {
                out.push('`');
                out.push_str(&escape(&code));
                out.push('`');
            }
            Event::SoftBreak | Event::HardBreak => {
                out.push('\n');
                at_line_start = true;
                continue;
            }
            Event::Rule => {
                newline(&mut out, &mut at_line_start);
                out.push_str("───\n");
                continue;
            }
            Event::TaskListMarker(done) => out.push_str(if done { "☑ " } else { "☐ " }),
            Event::Html(html) | Event::InlineHtml(html) => out.push_str(&escape(&html)),
            _ => {}
        }
        at_line_start = out.ends_with('\n');
    }
    out.trim_end().to_string()
}

/// `text` in pieces of at most `limit` bytes: cut at a paragraph, else a line, else a space,
/// never inside a character; a code block cut in two is closed and opened again.
pub fn split(text: &str, limit: usize) -> Vec<String> {
    let limit = limit.max(16);
    let mut parts = vec![];
    let mut rest = text.trim_end().to_string();
    while rest.len() > limit {
        // Room for a fence to close the part and open the next.
        let room = limit - 4;
        let mut cut = room;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let window = &rest[..cut];
        let at = window
            .rfind("\n\n")
            .filter(|at| *at > room / 2)
            .or_else(|| window.rfind('\n').filter(|at| *at > room / 2))
            .or_else(|| window.rfind(' ').filter(|at| *at > room / 2))
            .unwrap_or(cut);
        let (head, tail) = rest.split_at(at);
        let mut head = head.trim_end().to_string();
        let mut tail = tail.trim_start_matches([' ', '\n']).to_string();
        if head.matches("```").count() % 2 == 1 {
            head.push_str("\n```");
            tail = format!("```\n{tail}");
        }
        parts.push(head);
        rest = tail;
    }
    if !rest.is_empty() || parts.is_empty() {
        parts.push(rest);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_the_model_writes_pings_people() {
        let written = from_markdown("[hi](!channel) <!here> `<!everyone>`\n\n```\n<@U1>\n```\n");
        assert!(!written.contains("<!") && !written.contains("<@"), "{written}");
        assert!(written.starts_with("hi &lt;!here&gt;"), "{written}");
    }

    #[test]
    fn markdown_becomes_mrkdwn() {
        let markdown = "# Plan\n\nSome **bold**, _italic_, ~~gone~~ and `a<b` & [docs](https://example.com/a?b=1).\n\n\
                        - one\n- two\n  1. first\n  2. second\n\n> quoted\n\n```rust\nlet x = a < b;\n```\n";
        assert_eq!(
            from_markdown(markdown),
            "*Plan*\n\nSome *bold*, _italic_, ~gone~ and `a&lt;b` &amp; <https://example.com/a?b=1|docs>.\n\n\
             • one\n• two\n    1. first\n    2. second\n\n> quoted\n```\nlet x = a &lt; b;\n```"
        );
    }

    #[test]
    fn a_table_is_shown_as_rows() {
        let markdown = "| a | b |\n|---|---|\n| 1 | 2 |\n";
        assert_eq!(from_markdown(markdown), "```\na | b | \n1 | 2 | \n```");
    }

    #[test]
    fn long_text_is_cut_at_paragraphs_and_code_blocks_stay_whole() {
        let paragraph = "word ".repeat(30).trim_end().to_string();
        let text = [paragraph.as_str(); 5].join("\n\n");
        let parts = split(&text, 400);
        assert!(parts.iter().all(|part| part.len() <= 400), "{parts:?}");
        assert_eq!(parts.join("\n\n"), text);
        let code = format!("```\n{}```", "let x = 1;\n".repeat(60));
        let parts = split(&code, 300);
        assert!(
            parts.len() > 1 && parts.iter().all(|part| part.len() <= 300 && part.matches("```").count() == 2),
            "{parts:#?}"
        );
        assert_eq!(split("", 100), [""]);
        let wide = "é".repeat(100);
        assert!(split(&wide, 50).iter().all(|part| part.len() <= 50 && !part.is_empty()));
    }
}
