//! `/export`: a conversation as one self-contained HTML page (its style inline, no script, no
//! request to anywhere), dark or light as the reader's system prefers. Markdown becomes HTML;
//! raw HTML a model wrote is shown as text, never run.

use pulldown_cmark::{html, Event, Options, Parser};

use super::state::Block;

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Markdown as HTML, raw HTML escaped and only web links kept as links.
fn markdown(text: &str) -> String {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let events = Parser::new_ext(text, options).map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        Event::Start(pulldown_cmark::Tag::Link { link_type, dest_url, title, id })
            if !(dest_url.starts_with("https://") || dest_url.starts_with("http://")) =>
        {
            Event::Start(pulldown_cmark::Tag::Link { link_type, dest_url: "#".into(), title, id })
        }
        // An image would be fetched when the page opens: its description is shown instead.
        Event::Start(pulldown_cmark::Tag::Image { .. }) => Event::Start(pulldown_cmark::Tag::Emphasis),
        Event::End(pulldown_cmark::TagEnd::Image) => Event::End(pulldown_cmark::TagEnd::Emphasis),
        other => other,
    });
    let mut out = String::new();
    html::push_html(&mut out, events);
    out
}

const STYLE: &str = "
:root { color-scheme: light dark; --bg: #fbfbfa; --fg: #1d1d1f; --dim: #6b6b70; --user: #e8eef8; --line: #d9d9de; --code: #f0f0f2; }
@media (prefers-color-scheme: dark) { :root { --bg: #17181a; --fg: #e6e6e8; --dim: #9a9aa2; --user: #1f2a3a; --line: #2e3035; --code: #222428; } }
body { background: var(--bg); color: var(--fg); font: 16px/1.55 system-ui, sans-serif; max-width: 46rem; margin: 2rem auto; padding: 0 1rem; }
header { border-bottom: 1px solid var(--line); margin-bottom: 1.5rem; color: var(--dim); }
.message { margin: 1rem 0; padding: .6rem .9rem; border-radius: .6rem; }
.user { background: var(--user); }
.who { font-size: .8rem; color: var(--dim); margin-bottom: .2rem; }
.activity, .info { color: var(--dim); font-size: .9rem; margin: .3rem 0; }
.error { color: #c0392b; }
pre { background: var(--code); padding: .7rem; border-radius: .4rem; overflow-x: auto; }
code { font-family: ui-monospace, monospace; font-size: .9em; }
table { border-collapse: collapse; } td, th { border: 1px solid var(--line); padding: .25rem .5rem; }
details { color: var(--dim); }
";

/// The page for `blocks`.
pub fn page(title: &str, blocks: &[Block]) -> String {
    let mut body = String::new();
    for block in blocks {
        let part = match block {
            Block::User { sender, channel, text } => {
                let via = channel.as_ref().map(|channel| format!(" via {}", escape(channel))).unwrap_or_default();
                format!(
                    "<div class=\"message user\"><div class=\"who\">{}{via}</div>{}</div>",
                    escape(sender),
                    markdown(text)
                )
            }
            Block::Assistant { text, thinking } => {
                let thought = if thinking.trim().is_empty() {
                    String::new()
                } else {
                    format!("<details><summary>thinking</summary><pre>{}</pre></details>", escape(thinking))
                };
                format!(
                    "<div class=\"message assistant\"><div class=\"who\">assistant</div>{thought}{}</div>",
                    markdown(text)
                )
            }
            Block::Activity { text } => format!("<div class=\"activity\">{}</div>", escape(text)),
            Block::Notice { title, text, error } => format!(
                "<div class=\"message{}\"><div class=\"who\">{}</div>{}</div>",
                if *error { " error" } else { "" },
                escape(title),
                markdown(text)
            ),
            Block::Error { text } => format!("<div class=\"info error\">{}</div>", escape(text)),
            Block::Info { text } => format!("<div class=\"info\">{}</div>", escape(text)),
        };
        body.push_str(&part);
        body.push('\n');
    }
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
<title>{title}</title><style>{STYLE}</style></head>\n<body><header><h1>{title}</h1></header>\n<main>\n{body}</main></body></html>\n",
        title = escape(title)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_becomes_one_page_that_runs_nothing_and_fetches_nothing() {
        let blocks = [
            Block::User { sender: "alice".into(), channel: Some("slack".into()), text: "Hi <script>x()</script>".into() },
            Block::Assistant {
                text: "# Hello\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```sh\necho hi\n```\n<img src=x onerror=y()> [ok](javascript:alert(1)) ![p](https://tracker.example/p.png)".into(),
                thinking: "mull".into(),
            },
            Block::Activity { text: "→ worker: look".into() },
        ];
        let html = page("baaaht · user:alice · s-1", &blocks);
        assert!(html.starts_with("<!doctype html>"));
        assert!(html.contains("<div class=\"who\">alice via slack</div>"), "{html}");
        assert!(html.contains("Hi &lt;script&gt;x()&lt;/script&gt;"), "{html}");
        assert!(html.contains("<h1>Hello</h1>") && html.contains("<table>") && html.contains("echo hi"), "{html}");
        assert!(!html.contains("<img") && !html.contains("<script") && !html.contains("javascript:"), "{html}");
        assert!(html.contains("default-src 'none'"), "a page that loads nothing");
        assert!(html.contains("<details><summary>thinking</summary><pre>mull</pre></details>"));
        assert!(html.contains("→ worker: look"));
    }
}
