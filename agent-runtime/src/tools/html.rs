//! HTML to readable text with light markdown, for `web_fetch`: the page's title, headings as
//! `#`, list items as `-`, links as `[text](href)`, preformatted text kept as it is; scripts,
//! styles and other non-content elements dropped; entities decoded; whitespace collapsed.

/// Elements whose content is never text for a reader.
const SKIPPED: &[&str] = &["script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "head"];
/// Elements that start a new paragraph.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "header",
    "footer",
    "nav",
    "aside",
    "ul",
    "ol",
    "table",
    "tr",
    "blockquote",
    "form",
    "figure",
    "figcaption",
    "dl",
    "dt",
    "dd",
    "details",
    "summary",
    "address",
];

fn decode_entity(entity: &str) -> Option<String> {
    let named = match entity {
        "amp" => "&",
        "lt" => "<",
        "gt" => ">",
        "quot" => "\"",
        "apos" => "'",
        "nbsp" => " ",
        "mdash" => "—",
        "ndash" => "–",
        "hellip" => "…",
        "copy" => "©",
        "rsquo" => "’",
        "lsquo" => "‘",
        "rdquo" => "”",
        "ldquo" => "“",
        _ => "",
    };
    if !named.is_empty() {
        return Some(named.to_string());
    }
    let number = entity.strip_prefix('#')?;
    let code = match number.strip_prefix(['x', 'X']) {
        Some(hex) => u32::from_str_radix(hex, 16).ok()?,
        None => number.parse().ok()?,
    };
    char::from_u32(code).map(String::from)
}

/// Decodes the entities of `text`.
pub fn decode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('&') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        match after.find(';').filter(|end| *end <= 10).and_then(|end| decode_entity(&after[..end]).map(|d| (end, d))) {
            Some((end, decoded)) => {
                out.push_str(&decoded);
                rest = &after[end + 1..];
            }
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The value of attribute `name` in a tag's attribute text.
fn attribute(attributes: &str, name: &str) -> Option<String> {
    let lower = attributes.to_ascii_lowercase();
    let mut from = 0;
    while let Some(found) = lower[from..].find(name) {
        let at = from + found;
        let before_ok = at == 0 || lower.as_bytes()[at - 1].is_ascii_whitespace();
        let rest = attributes[at + name.len()..].trim_start();
        if before_ok {
            if let Some(value) = rest.strip_prefix('=') {
                let value = value.trim_start();
                let parsed = match value.chars().next() {
                    Some(quote @ ('"' | '\'')) => value[1..].split(quote).next().unwrap_or(""),
                    _ => value.split(|c: char| c.is_ascii_whitespace() || c == '>').next().unwrap_or(""),
                };
                return Some(decode(parsed));
            }
        }
        from = at + name.len();
    }
    None
}

struct Writer {
    out: String,
    pre: usize,
    /// Whitespace was seen since the last word.
    space: bool,
}

impl Writer {
    fn text(&mut self, text: &str) {
        if self.pre > 0 {
            self.out.push_str(text);
            return;
        }
        let mut first = true;
        for word in text.split_whitespace() {
            let gap = !first || self.space || text.starts_with(char::is_whitespace);
            if gap && !self.out.is_empty() && !self.out.ends_with([' ', '\n', '[']) {
                self.out.push(' ');
            }
            self.out.push_str(word);
            first = false;
        }
        if !text.is_empty() {
            self.space = if first { true } else { text.ends_with(char::is_whitespace) };
        }
    }

    /// Opens a link: `[` after a space when the text before needs one.
    fn open_link(&mut self) {
        if self.space && !self.out.is_empty() && !self.out.ends_with([' ', '\n']) {
            self.out.push(' ');
        }
        self.out.push('[');
        self.space = false;
    }

    fn newlines(&mut self, count: usize) {
        self.space = false;
        while self.out.ends_with(' ') {
            self.out.pop();
        }
        if self.out.is_empty() {
            return;
        }
        let have = self.out.chars().rev().take_while(|c| *c == '\n').count();
        for _ in have..count {
            self.out.push('\n');
        }
    }
}

/// The readable text of an HTML page.
pub fn to_text(html: &str) -> String {
    let mut writer = Writer { out: String::with_capacity(html.len() / 3), pre: 0, space: false };
    let mut title = String::new();
    let mut skipping: Option<String> = None;
    let mut in_title = false;
    let mut links: Vec<Option<String>> = vec![];
    let mut rest = html;
    while !rest.is_empty() {
        let Some(open) = rest.find('<') else {
            if skipping.is_none() {
                writer.text(&decode(rest));
            }
            break;
        };
        let text = &rest[..open];
        if in_title {
            title.push_str(text);
        } else if skipping.is_none() && !text.is_empty() {
            writer.text(&decode(text));
        }
        rest = &rest[open..];
        if let Some(comment) = rest.strip_prefix("<!--") {
            rest = comment.find("-->").map_or("", |end| &comment[end + 3..]);
            continue;
        }
        let Some(close) = rest.find('>') else { break };
        let tag = &rest[1..close];
        rest = &rest[close + 1..];
        let closing = tag.starts_with('/');
        let tag = tag.trim_start_matches('/');
        let name_end = tag.find(|c: char| c.is_ascii_whitespace() || c == '/').unwrap_or(tag.len());
        let name = tag[..name_end].to_ascii_lowercase();
        let attributes = &tag[name_end..];
        if let Some(skipped) = &skipping {
            if closing && *skipped == name {
                skipping = None;
            }
            if name == "title" && !closing {
                in_title = true;
            }
            if name == "title" && closing {
                in_title = false;
            }
            continue;
        }
        if name == "title" {
            in_title = !closing;
            continue;
        }
        if SKIPPED.contains(&name.as_str()) {
            if !closing && !tag.ends_with('/') {
                skipping = Some(name);
            }
            continue;
        }
        match (name.as_str(), closing) {
            ("br", _) => writer.newlines(1),
            ("hr", _) => {
                writer.newlines(2);
                writer.out.push_str("---");
                writer.newlines(2);
            }
            (heading @ ("h1" | "h2" | "h3" | "h4" | "h5" | "h6"), false) => {
                writer.newlines(2);
                let level = heading[1..].parse().unwrap_or(1);
                writer.out.push_str(&"#".repeat(level));
                writer.out.push(' ');
            }
            ("h1" | "h2" | "h3" | "h4" | "h5" | "h6", true) => writer.newlines(2),
            ("li", false) => {
                writer.newlines(1);
                writer.out.push_str("- ");
            }
            ("pre", false) => {
                writer.newlines(2);
                writer.out.push_str("```\n");
                writer.pre += 1;
            }
            ("pre", true) => {
                writer.pre = writer.pre.saturating_sub(1);
                writer.newlines(1);
                writer.out.push_str("```");
                writer.newlines(2);
            }
            ("td" | "th", false) => writer.text(" | "),
            ("a", false) => {
                let href = attribute(attributes, "href").filter(|h| !h.starts_with("javascript:") && !h.is_empty());
                if href.is_some() {
                    writer.open_link();
                }
                links.push(href);
            }
            ("a", true) => {
                if let Some(Some(href)) = links.pop() {
                    while writer.out.ends_with(' ') {
                        writer.out.pop();
                    }
                    if writer.out.ends_with('[') {
                        writer.out.pop();
                    } else {
                        writer.out.push_str(&format!("]({href})"));
                    }
                }
            }
            (block, _) if BLOCKS.contains(&block) || block == "p" => writer.newlines(2),
            _ => {}
        }
    }
    let body = writer.out.trim().to_string();
    let title = decode(title.split_whitespace().collect::<Vec<_>>().join(" ").as_str());
    if title.is_empty() {
        body
    } else {
        format!("# {title}\n\n{body}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_becomes_readable_text() {
        let page = r#"<!doctype html><html><head><title>The  Page &amp; More</title>
            <style>p { color: red }</style><script>alert("x<y")</script></head>
            <body><nav><a href="/home">Home</a></nav>
            <h1>Welcome</h1><p>Hello,   <b>world</b>!<br>Second&nbsp;line &lt;ok&gt; &#233;&#x263A;</p>
            <!-- a comment <p>hidden</p> -->
            <ul><li>one</li><li>two <a href="https://example.com/a?b=1&amp;c=2">link</a></li></ul>
            <pre>  keep
    this</pre><noscript>no</noscript><p>End.</p></body></html>"#;
        assert_eq!(
            to_text(page),
            "# The Page & More\n\n[Home](/home)\n\n# Welcome\n\nHello, world!\nSecond line <ok> é☺\n\n- one\n- two [link](https://example.com/a?b=1&c=2)\n\n```\n  keep\n    this\n```\n\nEnd."
        );
    }

    #[test]
    fn entities_and_attributes() {
        assert_eq!(decode("a &amp;&amp; b &unknown; &#60;"), "a && b &unknown; <");
        assert_eq!(attribute(" class=x HREF='/a b' ", "href").as_deref(), Some("/a b"));
        assert_eq!(attribute(" data-href=\"/no\" ", "href"), None);
    }
}
