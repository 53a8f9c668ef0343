//! An answer as it is read aloud: its words, not its markup. Code blocks and tables are named,
//! not read; a link is its text, a bare address "a link to" its host; headings and list items
//! end as sentences. A long answer is cut at a sentence and says the rest is written.

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// About how many characters espeak-ng reads a second.
const CHARACTERS_A_SECOND: usize = 14;

/// `markdown` as plain sentences of at most `seconds` of speech.
pub fn speakable(markdown: &str, seconds: u32) -> String {
    let mut out = String::new();
    let mut skipping = 0usize;
    let mut rows = 0usize;
    let mut link_text_start: Option<(usize, String)> = None;
    for event in Parser::new_ext(markdown, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH) {
        match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                let language = match kind {
                    CodeBlockKind::Fenced(language) if !language.trim().is_empty() => {
                        format!("{} ", language.split_whitespace().next().unwrap_or_default())
                    }
                    _ => String::new(),
                };
                sentence(&mut out, &format!("There is a {language}code block in the written answer."));
                skipping += 1;
            }
            Event::End(TagEnd::CodeBlock) => skipping = skipping.saturating_sub(1),
            Event::Start(Tag::Table(_)) => {
                rows = 0;
                skipping += 1;
            }
            Event::Start(Tag::TableRow) => rows += 1,
            Event::End(TagEnd::Table) => {
                skipping = skipping.saturating_sub(1);
                let rows = if rows == 1 { "one row".to_string() } else { format!("{rows} rows") };
                sentence(&mut out, &format!("There is a table of {rows} in the written answer."));
            }
            Event::Start(Tag::Image { .. }) | Event::Start(Tag::HtmlBlock) => skipping += 1,
            Event::End(TagEnd::Image) | Event::End(TagEnd::HtmlBlock) => skipping = skipping.saturating_sub(1),
            Event::Start(Tag::Link { dest_url, .. }) => link_text_start = Some((out.len(), dest_url.to_string())),
            Event::End(TagEnd::Link) => {
                if let Some((start, url)) = link_text_start.take() {
                    let said = out[start..].trim();
                    // An autolink's text is its address.
                    if said.is_empty() || said == url || said.contains("://") {
                        out.truncate(start);
                        words(&mut out, &link_to(&url));
                    }
                }
            }
            Event::Text(text) if skipping == 0 => words(&mut out, &without_addresses(&text)),
            Event::Code(code) if skipping == 0 => {
                if code.chars().count() <= 30 {
                    words(&mut out, &code);
                } else {
                    words(&mut out, "some code");
                }
            }
            Event::SoftBreak | Event::HardBreak if skipping == 0 => out.push(' '),
            Event::End(TagEnd::Paragraph | TagEnd::Heading(_) | TagEnd::Item) if skipping == 0 => {
                end_sentence(&mut out)
            }
            _ => {}
        }
    }
    let out = out.split_whitespace().collect::<Vec<_>>().join(" ");
    cut(&out, seconds as usize * CHARACTERS_A_SECOND)
}

fn words(out: &mut String, text: &str) {
    out.push_str(text);
}

fn end_sentence(out: &mut String) {
    let trimmed = out.trim_end();
    if !trimmed.is_empty() && !trimmed.ends_with(['.', '!', '?', ':', ';']) {
        out.truncate(trimmed.len());
        out.push('.');
    }
    out.push(' ');
}

fn sentence(out: &mut String, text: &str) {
    end_sentence(out);
    out.push_str(text);
    out.push(' ');
}

/// "a link to example.com" for an address.
fn link_to(url: &str) -> String {
    let host = url.split("://").nth(1).unwrap_or(url).split(['/', '?', '#']).next().unwrap_or_default();
    let host = host.rsplit('@').next().unwrap_or(host).trim_start_matches("www.");
    if host.is_empty() {
        "a link".into()
    } else {
        format!("a link to {host}")
    }
}

/// Bare addresses in running text, as [`link_to`] says them.
fn without_addresses(text: &str) -> String {
    text.split(' ')
        .map(|word| {
            let start = word.find("http://").or_else(|| word.find("https://"));
            match start {
                Some(at) => {
                    let end = word[at..].find([')', ',', '"']).map_or(word.len(), |end| at + end);
                    let address = word[at..end].trim_end_matches(['.', '!', '?']);
                    format!("{}{}{}", &word[..at], link_to(address), &word[at + address.len()..])
                }
                None => word.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` cut at the last sentence that ends within `most` characters.
fn cut(text: &str, most: usize) -> String {
    if text.chars().count() <= most {
        return text.to_string();
    }
    let head: String = text.chars().take(most).collect();
    let end = head.rfind(['.', '!', '?']).map_or(head.len(), |end| end + 1);
    format!("{} The rest is in the written answer.", head[..end].trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_tables_and_links_are_not_read_verbatim() {
        let said = speakable(
            "# Plan\nRun `ls` and see [the docs](https://docs.example.com/x?y=1).\n\n```rust\nfn main() {}\n```\n\n\
             | a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n\nMore at https://www.example.org/page. Done",
            90,
        );
        assert_eq!(
            said,
            "Plan. Run ls and see the docs. There is a rust code block in the written answer. \
             There is a table of 2 rows in the written answer. More at a link to example.org. Done."
        );
    }

    #[test]
    fn lists_become_sentences_and_autolinks_their_host() {
        assert_eq!(
            speakable("- milk\n- bread\n\n<https://shop.example.com/a>", 90),
            "milk. bread. a link to shop.example.com."
        );
    }

    #[test]
    fn a_long_answer_is_cut_at_a_sentence_and_says_so() {
        let long = "This is one sentence. ".repeat(100);
        let said = speakable(&long, 10);
        assert!(said.ends_with("sentence. The rest is in the written answer."), "{said}");
        assert!(said.len() <= 10 * CHARACTERS_A_SECOND + 40, "{}", said.len());
    }
}
