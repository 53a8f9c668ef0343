//! Draws an [`App`]: the conversation (newest at the bottom, scrollable), a status line and the
//! draft. Everything shown from agents and models passes through `terminal::clean`.

use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block as Frame, Borders, Clear, Paragraph};
use unicode_width::UnicodeWidthStr;

use super::drawn::DrawnBlocks;
use super::markdown;
use super::state::{App, Block, Connection, Picker};
use crate::terminal::clean;

/// `text` cut into lines at most `width` columns wide (words kept whole where they fit).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let plain = [(text.to_string(), Style::default())];
    markdown::wrap_spans(&plain, width, &[], &[]).iter().map(|line| line.to_string()).collect()
}

fn styled(text: &str, width: usize, style: Style, prefix: &str) -> Vec<Line<'static>> {
    let inner = width.saturating_sub(prefix.width());
    wrap(&clean(text), inner)
        .into_iter()
        .enumerate()
        .map(|(index, line)| {
            let lead = if index == 0 { prefix.to_string() } else { " ".repeat(prefix.width()) };
            Line::from(vec![Span::styled(lead, style.add_modifier(Modifier::BOLD)), Span::styled(line, style)])
        })
        .collect()
}

/// Thinking: folded to one line, or shown dimmed when Ctrl+T unfolded it.
fn thinking(text: &str, app: &App, width: usize, streaming: bool) -> Vec<Line<'static>> {
    if text.trim().is_empty() {
        return vec![];
    }
    if !app.show_thinking {
        let what = if streaming {
            "thinking…".to_string()
        } else {
            match text.lines().count() {
                1 => "thought (1 line)".to_string(),
                n => format!("thought ({n} lines)"),
            }
        };
        return vec![Line::styled(format!("▸ {what} · Ctrl+T shows"), app.theme.dim)];
    }
    let mut lines = vec![Line::styled("▾ thinking · Ctrl+T folds", app.theme.dim)];
    lines.extend(styled(text, width, app.theme.dim.add_modifier(Modifier::ITALIC), "┊ "));
    lines
}

/// The conversation as lines for a `width`-wide pane.
pub fn transcript(app: &App, width: usize) -> Vec<Line<'static>> {
    visible(app, width, usize::MAX, 0)
}

/// The `height` lines of the conversation that show `scroll` lines up from its end; only
/// those are copied (a long conversation is drawn without copying all of it every frame).
fn visible(app: &App, width: usize, height: usize, scroll: usize) -> Vec<Line<'static>> {
    let theme = &app.theme;
    let mut drawn = app.drawn.0.borrow_mut();
    let key = (app.generation, width, app.show_thinking, theme.dark);
    if drawn.key != key || drawn.blocks.len() > app.blocks.len() {
        *drawn = DrawnBlocks { key, blocks: vec![] };
    }
    let mut code = 1 + drawn.blocks.iter().map(|(_, codes)| codes).sum::<usize>();
    for block in &app.blocks[drawn.blocks.len()..] {
        let (block_lines, codes) = block_lines(app, block, width, code);
        code += codes;
        drawn.blocks.push((block_lines, codes));
    }
    let mut live_lines = vec![];
    if let Some(live) = &app.live {
        live_lines.extend(thinking(&live.thinking, app, width, live.text.is_empty()));
        let mut streamed = markdown::render(&clean(&live.text), width, theme, code).lines;
        match streamed.last_mut() {
            Some(last) => last.spans.push(Span::raw("▌")),
            None => streamed.push(Line::raw("▌")),
        }
        live_lines.extend(streamed);
    }
    let total = drawn.blocks.iter().map(|(lines, _)| lines.len()).sum::<usize>() + live_lines.len();
    let bottom = total.saturating_sub(scroll.min(total.saturating_sub(height)));
    let top = bottom.saturating_sub(height);
    let finished = drawn.blocks.iter().flat_map(|(lines, _)| lines.iter());
    finished.chain(live_lines.iter()).skip(top).take(bottom - top).cloned().collect()
}

/// One finished block's lines (a blank line after it) and how many code blocks it has.
fn block_lines(app: &App, block: &Block, width: usize, code: usize) -> (Vec<Line<'static>>, usize) {
    let theme = &app.theme;
    let mut lines = vec![];
    let mut codes = 0;
    {
        match block {
            Block::User { sender, channel, text } => {
                let who = match channel {
                    Some(channel) => format!("{sender} ({channel}) › "),
                    None => format!("{sender} › "),
                };
                lines.extend(styled(text, width, theme.user, &who));
            }
            Block::Assistant { text, thinking: thought } => {
                lines.extend(thinking(thought, app, width, false));
                let rendered = markdown::render(&clean(text), width, theme, code);
                codes = rendered.code.len();
                lines.extend(rendered.lines);
            }
            Block::Activity { text } => lines.extend(styled(text, width, theme.dim, "  ")),
            Block::Notice { title, text, error } => {
                lines.extend(styled(title, width, if *error { theme.error } else { theme.notice }, "⏰ "));
                lines.extend(styled(text, width, Style::default(), "   "));
            }
            Block::Error { text } => lines.extend(styled(text, width, theme.error, "! ")),
            Block::Info { text } => lines.extend(styled(text, width, theme.info, "")),
        }
        lines.push(Line::default());
    }
    (lines, codes)
}

fn status(app: &App) -> Line<'static> {
    let theme = &app.theme;
    let (mark, state, style) = match &app.connection {
        Connection::Connected => ("●", "connected".to_string(), theme.ok),
        Connection::Connecting => ("◌", "connecting…".to_string(), theme.notice),
        Connection::Reconnecting { reason } => ("◌", format!("reconnecting… ({})", clean(reason)), theme.notice),
    };
    let session = app.session.clone().unwrap_or_else(|| "no session yet".into());
    let branch = if app.parent.is_some() { " (earlier branch)" } else { "" };
    let busy = match &app.live {
        Some(live) if live.tainted => {
            " · reading untrusted content: some tools are paused · Ctrl+C cancels".to_string()
        }
        Some(_) if !app.asking.is_empty() => {
            let keys: Vec<String> = app
                .asking
                .first()
                .into_iter()
                .flat_map(|first| first.choices)
                .map(|(key, ..)| key.to_string())
                .collect();
            format!(" · waiting for your approval ({})", keys.join("/"))
        }
        Some(live) if live.text.is_empty() && !live.phase.is_empty() => format!(" · {}…, Ctrl+C cancels", live.phase),
        Some(live) if live.text.is_empty() => " · working…, Ctrl+C cancels".to_string(),
        Some(_) => " · answering, Ctrl+C cancels".to_string(),
        None => String::new(),
    };
    let scrolled = if app.scroll > 0 { " · scrolled, Esc returns" } else { "" };
    Line::from(vec![
        Span::styled(format!("{mark} {state}"), style),
        Span::styled(format!(" · {} · {session}{branch}{busy}{scrolled} · /help", app.context), theme.dim),
    ])
}

/// The picker over the conversation: the list, and the selected line's preview under it.
fn picker(frame: &mut ratatui::Frame<'_>, area: Rect, app: &App, picker: &Picker) {
    let theme = &app.theme;
    frame.render_widget(Clear, area);
    let outer = Frame::default()
        .borders(Borders::ALL)
        .title(format!(" {} · ↑↓ choose · Enter open · Esc close ", picker.title))
        .border_style(theme.accent);
    let inner = outer.inner(area);
    frame.render_widget(outer, area);
    let preview_height = (inner.height / 3).clamp(1, 8);
    let [list, rule, preview] =
        Layout::vertical([Constraint::Min(1), Constraint::Length(1), Constraint::Length(preview_height)]).areas(inner);
    let height = list.height as usize;
    let top = picker.selected.saturating_sub(height.saturating_sub(1));
    let lines: Vec<Line<'static>> = picker
        .items
        .iter()
        .enumerate()
        .skip(top)
        .take(height)
        .map(|(index, item)| {
            let mark = if item.current { "● " } else { "  " };
            let text = format!("{}{mark}{}", "  ".repeat(item.depth), clean(&item.label));
            let style = if index == picker.selected { theme.selected } else { Style::default() };
            Line::styled(text, style)
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), list);
    frame.render_widget(Paragraph::new(Line::styled("─".repeat(rule.width as usize), theme.dim)), rule);
    let shown = picker.items.get(picker.selected).map(|item| item.preview.clone()).unwrap_or_default();
    let lines = styled(&shown, preview.width as usize, theme.dim, "");
    frame.render_widget(Paragraph::new(lines), preview);
}

/// Draws `app` on `frame`.
pub fn draw(frame: &mut ratatui::Frame<'_>, app: &App) {
    let area = frame.area();
    let draft_lines = app.draft.text.split('\n').count().clamp(1, 6) as u16;
    let offered = u16::from(!app.offered.is_empty());
    let asking = u16::from(!app.asking.is_empty());
    let [talk, hints, prompt, line, input] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(offered),
        Constraint::Length(asking),
        Constraint::Length(1),
        Constraint::Length(draft_lines + 2),
    ])
    .areas(area);
    let lines = visible(app, talk.width as usize, talk.height as usize, app.scroll);
    frame.render_widget(Paragraph::new(lines), talk);
    if offered > 0 {
        frame.render_widget(Paragraph::new(Line::styled(app.offered.join("  "), app.theme.accent)), hints);
    }
    if let Some(first) = app.asking.first() {
        let answers: Vec<String> = first.choices.iter().map(|(key, _, shown)| format!("[{key}] {shown}")).collect();
        let more = if app.asking.len() > 1 { format!(" (+{} more)", app.asking.len() - 1) } else { String::new() };
        let text = if app.confirming.as_deref() == Some(first.id.as_str()) {
            let again = if first.choices == crate::tui::state::REVIEW_ANSWERS {
                "press i again to install the skill, as reviewed above"
            } else {
                "press a again to allow it always (a rule in your egress.yaml)"
            };
            format!("? {again}; another key cancels  {}", clean(&first.what))
        } else {
            format!("? {}  {}{more}", answers.join("  "), clean(&first.what))
        };
        frame.render_widget(Paragraph::new(Line::styled(text, app.theme.accent)), prompt);
    }
    frame.render_widget(Paragraph::new(status(app)), line);
    // The draft's last lines when it is longer than the editor.
    let before: String = app.draft.text.chars().take(app.draft.cursor).collect();
    let row = before.matches('\n').count() as u16;
    let skip = row.saturating_sub(draft_lines - 1);
    let shown: Vec<&str> = app.draft.text.split('\n').skip(skip as usize).collect();
    let editor = Paragraph::new(shown.join("\n"))
        .block(Frame::default().borders(Borders::ALL).title(" message ").border_style(app.theme.dim));
    frame.render_widget(editor, input);
    if let Some(open) = &app.picker {
        let [_, middle, _] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(5), Constraint::Length(1)]).areas(talk);
        picker(frame, middle, app, open);
        return;
    }
    let line_text = before.rsplit('\n').next().unwrap_or_default();
    let column = line_text.width() as u16;
    let inner_width = input.width.saturating_sub(2);
    frame.set_cursor_position(Position::new(input.x + 1 + column.min(inner_width), input.y + 1 + row - skip));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::state::{Input, Key};
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn screen(app: &App, width: u16, height: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
        terminal.draw(|frame| draw(frame, app)).expect("draw");
        let buffer = terminal.backend().buffer().clone();
        (0..height)
            .map(|y| (0..width).map(|x| buffer[(x, y)].symbol().to_string()).collect::<String>().trim_end().to_string())
            .collect()
    }

    #[test]
    fn the_main_screen() {
        let mut app = App::new("user:alice");
        app.handle(Input::Connected { session: "s-1".into(), history: vec![] });
        app.blocks.push(Block::User { sender: "alice".into(), channel: None, text: "What is on today?".into() });
        app.blocks.push(Block::Activity { text: "→ worker: Check the calendar".into() });
        app.blocks.push(Block::Assistant {
            text: "# Today\nA dentist at 3pm.\n```\nnothing else\n```".into(),
            thinking: "Check the calendar first.".into(),
        });
        for c in "thanks".chars() {
            app.handle(Input::Key(Key::Char(c)));
        }
        let shown = screen(&app, 60, 20);
        let expected = [
            "alice › What is on today?",
            "",
            "  → worker: Check the calendar",
            "",
            "▸ thought (1 line) · Ctrl+T shows",
            "Today",
            "",
            "A dentist at 3pm.",
            "",
            "╭─ [1] Ctrl+Y copies the last, /copy 1 this one",
            "│ nothing else",
            "╰─",
            "",
            "",
            "",
            "",
            "● connected · user:alice · s-1 · /help",
            "┌ message ─────────────────────────────────────────────────┐",
            "│thanks                                                    │",
            "└──────────────────────────────────────────────────────────┘",
        ];
        assert_eq!(shown, expected, "\n{}", shown.join("\n"));
    }

    #[test]
    fn a_long_conversation_keeps_the_newest_at_the_bottom_and_scrolls_up() {
        let mut app = App::new("user:alice");
        for n in 0..30 {
            app.blocks.push(Block::Info { text: format!("line {n}") });
        }
        let shown = screen(&app, 40, 12);
        assert!(shown.iter().any(|line| line == "line 29"), "{shown:?}");
        assert!(!shown.iter().any(|line| line == "line 0"));
        app.handle(Input::Key(Key::PageUp));
        let shown = screen(&app, 40, 12);
        assert!(!shown.iter().any(|line| line == "line 29"), "scrolled up: {shown:?}");
    }

    #[test]
    fn control_characters_from_a_model_are_shown_not_obeyed_and_lines_wrap_at_80x24() {
        let mut app = App::new("user:alice");
        app.blocks.push(Block::Assistant {
            text: format!("\x1b]52;c;aGk=\x07{}", "word ".repeat(40)),
            thinking: String::new(),
        });
        app.handle(Input::Disconnected { reason: "the daemon restarted".into() });
        let shown = screen(&app, 80, 24);
        assert!(shown.iter().all(|line| !line.contains('\x1b')), "{shown:?}");
        assert!(shown.iter().any(|line| line.starts_with("◌ reconnecting… (the daemon restarted)")), "{shown:?}");
        assert!(shown.iter().filter(|line| line.contains("word")).count() >= 3, "wrapped: {shown:?}");
    }

    #[test]
    fn wrapping_keeps_words_and_cuts_what_is_longer_than_a_line() {
        assert_eq!(wrap("a bb ccc", 4), ["a bb", "ccc"]);
        assert_eq!(wrap("abcdefgh", 3), ["abc", "def", "gh"]);
        assert_eq!(wrap("one\n\ntwo", 10), ["one", "", "two"]);
    }
}
