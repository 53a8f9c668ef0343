//! An answer's markdown as terminal lines (pulldown-cmark): headings, emphasis, lists, quotes,
//! tables drawn to fit, and fenced code highlighted by language (syntect) and numbered so that
//! one key copies it. What the model wrote has passed through `terminal::clean` before this.

use std::sync::OnceLock;

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use syntect::easy::HighlightLines;
use syntect::highlighting::ThemeSet;
use syntect::parsing::SyntaxSet;
use syntect::util::LinesWithEndings;
use unicode_width::UnicodeWidthStr;

use super::theme::Theme;

/// An answer drawn for one width.
#[derive(Debug, Default)]
pub struct Rendered {
    pub lines: Vec<Line<'static>>,
    /// The code blocks, in order, as written (for copying).
    pub code: Vec<String>,
}

/// A block the text sits in: a quote, or a list item (its marker shown on its first line).
#[derive(Debug, Clone)]
enum Container {
    Quote,
    Item { marker: String, shown: bool },
}

#[derive(Debug, Default)]
struct Table {
    rows: Vec<Vec<String>>,
    row: Vec<String>,
    cell: String,
}

struct Writer<'t> {
    width: usize,
    theme: &'t Theme,
    /// The number the next code block gets (blocks are numbered across the conversation).
    next_code: usize,
    out: Rendered,
    inline: Vec<(String, Style)>,
    styles: Vec<Style>,
    containers: Vec<Container>,
    /// Each open list's next number (None: bullets).
    lists: Vec<Option<u64>>,
    code: Option<(String, String)>,
    table: Option<Table>,
    link: Option<String>,
}

/// The words of `text` as pieces: runs of spaces, words, and line breaks.
fn pieces(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let first = rest.chars().next()?;
        let end = if first == '\n' {
            1
        } else {
            let space = first == ' ';
            rest.find(|c: char| c == '\n' || (c == ' ') != space).unwrap_or(rest.len())
        };
        let (piece, after) = rest.split_at(end);
        rest = after;
        Some(piece)
    })
}

/// Styled text wrapped at `width`, the first line after `first`, the others after `rest`.
pub fn wrap_spans(
    segments: &[(String, Style)],
    width: usize,
    first: &[Span<'static>],
    rest: &[Span<'static>],
) -> Vec<Line<'static>> {
    let indent = |prefix: &[Span<'static>]| prefix.iter().map(|span| span.content.width()).sum::<usize>();
    let mut lines = vec![];
    let mut spans: Vec<Span<'static>> = first.to_vec();
    let mut room = width.saturating_sub(indent(first)).max(1);
    let mut used = 0;
    let finish =
        |lines: &mut Vec<Line<'static>>, spans: &mut Vec<Span<'static>>, used: &mut usize, room: &mut usize| {
            if let Some(last) = spans.last_mut() {
                let trimmed = last.content.trim_end().to_string();
                last.content = trimmed.into();
            }
            lines.push(Line::from(std::mem::replace(spans, rest.to_vec())));
            *used = 0;
            *room = width.saturating_sub(indent(rest)).max(1);
        };
    for (text, style) in segments {
        for piece in pieces(text) {
            if piece == "\n" {
                finish(&mut lines, &mut spans, &mut used, &mut room);
                continue;
            }
            let size = piece.width();
            if piece.starts_with(' ') {
                if used > 0 && used + size <= room {
                    spans.push(Span::styled(piece.to_string(), *style));
                    used += size;
                }
                continue;
            }
            if used > 0 && used + size > room {
                finish(&mut lines, &mut spans, &mut used, &mut room);
            }
            // A word longer than a line is cut where the line ends.
            let mut word = piece;
            while used + word.width() > room {
                let mut cut = 0;
                let mut taken = 0;
                for (at, c) in word.char_indices() {
                    let w = c.to_string().width();
                    if used + taken + w > room {
                        break;
                    }
                    taken += w;
                    cut = at + c.len_utf8();
                }
                if cut == 0 {
                    if used == 0 {
                        // Not even one character fits: show it anyway.
                        cut = word.chars().next().map_or(word.len(), char::len_utf8);
                    } else {
                        finish(&mut lines, &mut spans, &mut used, &mut room);
                        continue;
                    }
                }
                spans.push(Span::styled(word[..cut].to_string(), *style));
                finish(&mut lines, &mut spans, &mut used, &mut room);
                word = &word[cut..];
            }
            if !word.is_empty() {
                spans.push(Span::styled(word.to_string(), *style));
                used += word.width();
            }
        }
    }
    if used > 0 || spans.len() > rest.len() || lines.is_empty() {
        finish(&mut lines, &mut spans, &mut used, &mut room);
    }
    lines
}

fn syntaxes() -> &'static SyntaxSet {
    static SET: OnceLock<SyntaxSet> = OnceLock::new();
    SET.get_or_init(SyntaxSet::load_defaults_newlines)
}

fn themes() -> &'static ThemeSet {
    static SET: OnceLock<ThemeSet> = OnceLock::new();
    SET.get_or_init(ThemeSet::load_defaults)
}

/// `code` in `language`'s colours, line by line; plain when the language is unknown.
fn highlight(code: &str, language: &str, theme: &Theme) -> Vec<Vec<(String, Style)>> {
    let plain = || code.lines().map(|line| vec![(line.to_string(), theme.code)]).collect();
    if theme.monochrome {
        return plain();
    }
    let set = syntaxes();
    let Some(syntax) = set.find_syntax_by_token(language) else { return plain() };
    let name = if theme.dark { "base16-ocean.dark" } else { "InspiredGitHub" };
    let Some(colours) = themes().themes.get(name) else { return plain() };
    let mut highlighter = HighlightLines::new(syntax, colours);
    let mut lines = vec![];
    for line in LinesWithEndings::from(code) {
        let Ok(ranges) = highlighter.highlight_line(line, set) else { return plain() };
        lines.push(
            ranges
                .into_iter()
                .map(|(style, text)| {
                    let fg = style.foreground;
                    let mut shown = Style::new().fg(Color::Rgb(fg.r, fg.g, fg.b));
                    if style.font_style.contains(syntect::highlighting::FontStyle::BOLD) {
                        shown = shown.add_modifier(Modifier::BOLD);
                    }
                    (text.trim_end_matches('\n').to_string(), shown)
                })
                .collect(),
        );
    }
    lines
}

/// `text` cut to `width` columns, "…" marking the cut.
fn fit(text: &str, width: usize) -> String {
    if text.width() <= width {
        return format!("{text}{}", " ".repeat(width - text.width()));
    }
    let mut out = String::new();
    for c in text.chars() {
        if out.width() + c.to_string().width() + 1 > width {
            break;
        }
        out.push(c);
    }
    out.push('…');
    let pad = width.saturating_sub(out.width());
    out + &" ".repeat(pad)
}

impl Writer<'_> {
    fn style(&self) -> Style {
        self.styles.last().copied().unwrap_or_default()
    }

    fn push_style(&mut self, change: impl FnOnce(Style) -> Style) {
        let next = change(self.style());
        self.styles.push(next);
    }

    /// The prefixes of the next line: the first (markers shown once) and the following.
    fn prefixes(&mut self) -> (Vec<Span<'static>>, Vec<Span<'static>>) {
        let (mut first, mut rest) = (vec![], vec![]);
        for container in &mut self.containers {
            match container {
                Container::Quote => {
                    first.push(Span::styled("│ ", self.theme.dim));
                    rest.push(Span::styled("│ ", self.theme.dim));
                }
                Container::Item { marker, shown } => {
                    let blank = " ".repeat(marker.width());
                    first.push(Span::styled(if *shown { blank.clone() } else { marker.clone() }, self.theme.accent));
                    rest.push(Span::raw(blank));
                    *shown = true;
                }
            }
        }
        (first, rest)
    }

    fn flush(&mut self) {
        if self.inline.iter().all(|(text, _)| text.trim().is_empty()) {
            self.inline.clear();
            return;
        }
        let segments = std::mem::take(&mut self.inline);
        let (first, rest) = self.prefixes();
        self.out.lines.extend(wrap_spans(&segments, self.width, &first, &rest));
    }

    /// A blank line between blocks at the top level.
    fn gap(&mut self) {
        if self.containers.is_empty() && self.out.lines.last().is_some_and(|line| line.width() > 0) {
            self.out.lines.push(Line::default());
        }
    }

    fn code_block(&mut self, language: String, code: String) {
        let number = self.next_code + self.out.code.len();
        let (_, rest) = self.prefixes();
        let label = if language.is_empty() { String::new() } else { format!(" {language}") };
        let mut head = rest.clone();
        head.push(Span::styled(
            format!("╭─{label} [{number}] Ctrl+Y copies the last, /copy {number} this one"),
            self.theme.dim,
        ));
        self.out.lines.push(Line::from(head));
        let inner = self.width.saturating_sub(2 + rest.iter().map(|s| s.content.width()).sum::<usize>()).max(1);
        for line in highlight(&code, &language, self.theme) {
            let mut spans = rest.clone();
            spans.push(Span::styled("│ ", self.theme.dim));
            let mut used = 0;
            for (text, style) in line {
                let room = inner.saturating_sub(used);
                if room == 0 {
                    break;
                }
                let text = if text.width() > room { fit(&text, room) } else { text };
                used += text.width();
                spans.push(Span::styled(text, style));
            }
            self.out.lines.push(Line::from(spans));
        }
        let mut foot = rest;
        foot.push(Span::styled("╰─", self.theme.dim));
        self.out.lines.push(Line::from(foot));
        self.out.code.push(code);
    }

    fn table(&mut self, table: Table) {
        let columns = table.rows.iter().map(Vec::len).max().unwrap_or(0);
        if columns == 0 {
            return;
        }
        let mut widths: Vec<usize> = (0..columns)
            .map(|c| table.rows.iter().filter_map(|row| row.get(c)).map(|cell| cell.width()).max().unwrap_or(1).max(1))
            .collect();
        let (_, rest) = self.prefixes();
        let indent = rest.iter().map(|s| s.content.width()).sum::<usize>();
        let room = self.width.saturating_sub(indent + 3 * columns + 1);
        // Too wide: the widest column gives way first, down to three characters.
        while widths.iter().sum::<usize>() > room {
            let Some((widest, &size)) = widths.iter().enumerate().max_by_key(|(_, w)| **w) else { break };
            if size <= 3 {
                break;
            }
            widths[widest] = size - 1;
        }
        let rule = |left: &str, middle: &str, right: &str| {
            let parts: Vec<String> = widths.iter().map(|w| "─".repeat(w + 2)).collect();
            format!("{left}{}{right}", parts.join(middle))
        };
        let line = |text: String, style: Style| {
            let mut spans = rest.clone();
            spans.push(Span::styled(text, style));
            Line::from(spans)
        };
        self.out.lines.push(line(rule("┌", "┬", "┐"), self.theme.dim));
        for (index, row) in table.rows.iter().enumerate() {
            let mut spans = rest.clone();
            for (c, width) in widths.iter().enumerate() {
                spans.push(Span::styled(if c == 0 { "│ " } else { " │ " }, self.theme.dim));
                let cell = row.get(c).map_or("", String::as_str);
                let style = if index == 0 { Style::new().add_modifier(Modifier::BOLD) } else { Style::new() };
                spans.push(Span::styled(fit(cell, *width), style));
            }
            spans.push(Span::styled(" │", self.theme.dim));
            self.out.lines.push(Line::from(spans));
            if index == 0 && table.rows.len() > 1 {
                self.out.lines.push(line(rule("├", "┼", "┤"), self.theme.dim));
            }
        }
        self.out.lines.push(line(rule("└", "┴", "┘"), self.theme.dim));
    }

    fn text(&mut self, text: &str) {
        if let Some((_, code)) = &mut self.code {
            code.push_str(text);
        } else if let Some(table) = &mut self.table {
            table.cell.push_str(text);
        } else {
            let style = self.style();
            self.inline.push((text.to_string(), style));
        }
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => self.text(&text),
            Event::Code(code) => {
                if let Some(table) = &mut self.table {
                    table.cell.push_str(&code);
                } else {
                    self.inline.push((code.to_string(), self.theme.code));
                }
            }
            // Raw HTML is shown as written, never interpreted.
            Event::Html(html) | Event::InlineHtml(html) => self.text(&html),
            Event::SoftBreak => self.text(" "),
            Event::HardBreak => self.text("\n"),
            Event::Rule => {
                self.flush();
                self.gap();
                self.out.lines.push(Line::styled("─".repeat(self.width.min(60)), self.theme.dim));
            }
            Event::TaskListMarker(done) => self.text(if done { "[x] " } else { "[ ] " }),
            Event::FootnoteReference(name) => self.text(&format!("[{name}]")),
            Event::InlineMath(math) | Event::DisplayMath(math) => self.text(&math),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph => self.gap(),
            Tag::Heading { level, .. } => {
                self.flush();
                self.gap();
                let style = self.theme.accent;
                let style = if level == pulldown_cmark::HeadingLevel::H1 {
                    style.add_modifier(Modifier::UNDERLINED)
                } else {
                    style
                };
                self.styles.push(style);
            }
            Tag::BlockQuote(_) => {
                self.flush();
                self.gap();
                self.containers.push(Container::Quote);
                self.push_style(|style| style.add_modifier(Modifier::ITALIC));
            }
            Tag::CodeBlock(kind) => {
                self.flush();
                self.gap();
                let language = match kind {
                    CodeBlockKind::Fenced(info) => info.split_whitespace().next().unwrap_or_default().to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                self.code = Some((language, String::new()));
            }
            Tag::List(start) => {
                self.flush();
                if self.lists.is_empty() {
                    self.gap();
                }
                self.lists.push(start);
            }
            Tag::Item => {
                self.flush();
                let depth = self.lists.len();
                let marker = match self.lists.last_mut() {
                    Some(Some(number)) => {
                        *number += 1;
                        format!("{}. ", *number - 1)
                    }
                    _ => format!("{} ", ["•", "◦", "▪"][(depth.saturating_sub(1)) % 3]),
                };
                self.containers.push(Container::Item { marker, shown: false });
            }
            Tag::Emphasis => self.push_style(|style| style.add_modifier(Modifier::ITALIC)),
            Tag::Strong => self.push_style(|style| style.add_modifier(Modifier::BOLD)),
            Tag::Strikethrough => self.push_style(|style| style.add_modifier(Modifier::CROSSED_OUT)),
            Tag::Link { dest_url, .. } => {
                self.link = Some(dest_url.to_string());
                let accent = self.theme.user;
                self.push_style(|style| style.patch(accent).add_modifier(Modifier::UNDERLINED));
            }
            Tag::Table(_) => {
                self.flush();
                self.gap();
                self.table = Some(Table::default());
            }
            Tag::TableHead | Tag::TableRow => {
                if let Some(table) = &mut self.table {
                    table.row.clear();
                }
            }
            Tag::TableCell => {
                if let Some(table) = &mut self.table {
                    table.cell.clear();
                }
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph => self.flush(),
            TagEnd::Heading(_) => {
                self.flush();
                self.styles.pop();
            }
            TagEnd::BlockQuote(_) => {
                self.flush();
                self.containers.pop();
                self.styles.pop();
            }
            TagEnd::CodeBlock => {
                if let Some((language, code)) = self.code.take() {
                    self.code_block(language, code);
                }
            }
            TagEnd::List(_) => {
                self.flush();
                self.lists.pop();
            }
            TagEnd::Item => {
                self.flush();
                self.containers.pop();
            }
            TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => {
                self.styles.pop();
            }
            TagEnd::Link => {
                self.styles.pop();
                if let Some(url) = self.link.take() {
                    let shown: String = self.inline.iter().rev().take(1).map(|(text, _)| text.clone()).collect();
                    if shown != url && !url.is_empty() {
                        self.inline.push((format!(" ({url})"), self.theme.dim));
                    }
                }
            }
            TagEnd::TableCell => {
                if let Some(table) = &mut self.table {
                    let cell = std::mem::take(&mut table.cell).trim().to_string();
                    table.row.push(cell);
                }
            }
            TagEnd::TableHead | TagEnd::TableRow => {
                if let Some(table) = &mut self.table {
                    let row = std::mem::take(&mut table.row);
                    table.rows.push(row);
                }
            }
            TagEnd::Table => {
                if let Some(table) = self.table.take() {
                    self.table(table);
                }
            }
            _ => {}
        }
    }
}

/// `text` (markdown) as lines `width` wide; its code blocks are numbered from `first_code`.
pub fn render(text: &str, width: usize, theme: &Theme, first_code: usize) -> Rendered {
    let mut writer = Writer {
        width: width.max(8),
        theme,
        next_code: first_code,
        out: Rendered::default(),
        inline: vec![],
        styles: vec![],
        containers: vec![],
        lists: vec![],
        code: None,
        table: None,
        link: None,
    };
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    for event in Parser::new_ext(text, options) {
        writer.event(event);
    }
    // A stream cut mid-block: what was written so far still shows.
    if let Some((language, code)) = writer.code.take() {
        writer.code_block(language, code);
    }
    if let Some(table) = writer.table.take() {
        writer.table(table);
    }
    writer.flush();
    writer.out
}

/// The code blocks of `text`, in order.
pub fn code_blocks(text: &str) -> Vec<String> {
    let mut blocks = vec![];
    let mut current: Option<String> = None;
    for event in Parser::new_ext(text, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::CodeBlock(_)) => current = Some(String::new()),
            Event::Text(text) => {
                if let Some(code) = &mut current {
                    code.push_str(&text);
                }
            }
            Event::End(TagEnd::CodeBlock) => blocks.extend(current.take()),
            _ => {}
        }
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(text: &str, width: usize) -> Vec<String> {
        render(text, width, &Theme::dark(), 1)
            .lines
            .iter()
            .map(|line| line.spans.iter().map(|span| span.content.as_ref()).collect::<String>().trim_end().to_string())
            .collect()
    }

    #[test]
    fn headings_lists_and_emphasis() {
        let text = "# Plan\n\nDo **this** first:\n\n1. one\n2. two, which is long enough to wrap here\n   - nested\n\n> quoted";
        assert_eq!(
            shown(text, 30),
            [
                "Plan",
                "",
                "Do this first:",
                "",
                "1. one",
                "2. two, which is long enough",
                "   to wrap here",
                "   ◦ nested",
                "",
                "│ quoted",
            ]
        );
    }

    #[test]
    fn a_table_fits_the_width_and_cuts_what_does_not() {
        let text = "| name | what |\n|---|---|\n| tea | a hot drink made from leaves |\n| ☕ | coffee |";
        assert_eq!(
            shown(text, 30),
            [
                "┌──────┬─────────────────────┐",
                "│ name │ what                │",
                "├──────┼─────────────────────┤",
                "│ tea  │ a hot drink made f… │",
                "│ ☕   │ coffee              │",
                "└──────┴─────────────────────┘",
            ]
        );
    }

    #[test]
    fn code_is_highlighted_numbered_and_kept_for_copying() {
        let text = "Run:\n\n```rust\nfn main() {}\n```\n";
        let rendered = render(text, 60, &Theme::dark(), 3);
        assert_eq!(rendered.code, ["fn main() {}\n"]);
        let lines: Vec<String> = rendered.lines.iter().map(|l| l.to_string()).collect();
        assert_eq!(lines[2], "╭─ rust [3] Ctrl+Y copies the last, /copy 3 this one");
        assert_eq!(lines[3], "│ fn main() {}");
        let keyword = rendered.lines[3].spans.iter().find(|s| s.content == "fn").expect("fn on its own");
        assert!(matches!(keyword.style.fg, Some(Color::Rgb(..))), "coloured: {keyword:?}");
        assert_eq!(code_blocks(text), ["fn main() {}\n"]);
        // Cut mid-stream, the block shows what came so far.
        assert_eq!(render("```sh\necho hi", 40, &Theme::dark(), 1).lines.len(), 3);
    }

    #[test]
    fn raw_html_and_links_are_shown_not_followed() {
        assert_eq!(shown("<b>x</b> [site](https://example.org)", 60), ["<b>x</b> site (https://example.org)"]);
    }

    #[test]
    fn wide_characters_wrap_by_their_width() {
        let line = vec![("日本語のテキスト".to_string(), Style::new())];
        let lines: Vec<String> = wrap_spans(&line, 6, &[], &[]).iter().map(|l| l.to_string()).collect();
        assert_eq!(lines, ["日本語", "のテキ", "スト"]);
    }
}
