//! Draws an [`App`]: the conversation (newest at the bottom, scrollable), a status line and the
//! draft. Everything shown from agents and models passes through `terminal::clean`.

use ratatui::layout::{Constraint, Layout, Position};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block as Frame, Borders, Paragraph};

use super::state::{App, Block, Connection};
use crate::terminal::clean;

/// `text` cut into lines of at most `width` characters (words kept whole where they fit).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = vec![];
    for raw in text.split('\n') {
        let mut line = String::new();
        for word in raw.split_inclusive(' ') {
            if line.chars().count() + word.trim_end().chars().count() > width && !line.is_empty() {
                lines.push(std::mem::take(&mut line).trim_end().to_string());
            }
            let mut rest = word;
            while rest.chars().count() > width {
                let cut = rest.char_indices().nth(width).map_or(rest.len(), |(at, _)| at);
                lines.push(rest[..cut].to_string());
                rest = &rest[cut..];
            }
            line.push_str(rest);
        }
        lines.push(line.trim_end().to_string());
    }
    lines
}

fn styled(text: &str, width: usize, style: Style, prefix: &str) -> Vec<Line<'static>> {
    let inner = width.saturating_sub(prefix.chars().count());
    wrap(&clean(text), inner)
        .into_iter()
        .enumerate()
        .map(|(index, line)| {
            let lead = if index == 0 { prefix.to_string() } else { " ".repeat(prefix.chars().count()) };
            Line::from(vec![Span::styled(lead, style.add_modifier(Modifier::BOLD)), Span::styled(line, style)])
        })
        .collect()
}

/// A markdown answer: fenced code dimmed, headings bold; the rest as written.
fn answer(text: &str, width: usize) -> Vec<Line<'static>> {
    let mut lines = vec![];
    let mut in_code = false;
    for raw in clean(text).split('\n') {
        if raw.trim_start().starts_with("```") {
            in_code = !in_code;
            lines.push(Line::styled(raw.to_string(), Style::default().fg(Color::DarkGray)));
            continue;
        }
        let style = if in_code {
            Style::default().fg(Color::Green)
        } else if raw.starts_with('#') {
            Style::default().add_modifier(Modifier::BOLD)
        } else {
            Style::default()
        };
        for line in wrap(raw, width) {
            lines.push(Line::styled(line, style));
        }
    }
    lines
}

/// The conversation as lines for a `width`-wide pane.
pub fn transcript(app: &App, width: usize) -> Vec<Line<'static>> {
    let mut lines: Vec<Line<'static>> = vec![];
    for block in &app.blocks {
        match block {
            Block::User { sender, channel, text } => {
                let who = match channel {
                    Some(channel) => format!("{sender} ({channel}) › "),
                    None => format!("{sender} › "),
                };
                lines.extend(styled(text, width, Style::default().fg(Color::Cyan), &who));
            }
            Block::Assistant { text } => lines.extend(answer(text, width)),
            Block::Activity { text } => lines.extend(styled(text, width, Style::default().fg(Color::DarkGray), "  ")),
            Block::Notice { title, text, error } => {
                let style = Style::default().fg(if *error { Color::Red } else { Color::Yellow });
                lines.extend(styled(title, width, style, "⏰ "));
                lines.extend(styled(text, width, Style::default(), "   "));
            }
            Block::Error { text } => lines.extend(styled(text, width, Style::default().fg(Color::Red), "! ")),
            Block::Info { text } => {
                lines.extend(styled(text, width, Style::default().fg(Color::Gray).add_modifier(Modifier::ITALIC), ""))
            }
        }
        lines.push(Line::default());
    }
    if let Some(live) = &app.live {
        let mut streamed = answer(&live.text, width);
        match streamed.last_mut() {
            Some(last) => last.spans.push(Span::raw("▌")),
            None => streamed.push(Line::raw("▌")),
        }
        lines.extend(streamed);
    }
    lines
}

fn status(app: &App) -> Line<'static> {
    let (mark, state, color) = match &app.connection {
        Connection::Connected => ("●", "connected".to_string(), Color::Green),
        Connection::Connecting => ("◌", "connecting…".to_string(), Color::Yellow),
        Connection::Reconnecting { reason } => ("◌", format!("reconnecting… ({})", clean(reason)), Color::Yellow),
    };
    let session = app.session.clone().unwrap_or_else(|| "no session yet".into());
    Line::from(vec![
        Span::styled(format!("{mark} {state}"), Style::default().fg(color)),
        Span::styled(
            format!(" · {} · {session} · Enter send · Shift+Enter new line · /help", app.context),
            Style::default().fg(Color::DarkGray),
        ),
    ])
}

/// Draws `app` on `frame`.
pub fn draw(frame: &mut ratatui::Frame<'_>, app: &App) {
    let area = frame.area();
    let draft_lines = app.draft.text.split('\n').count().clamp(1, 6) as u16;
    let [talk, line, input] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(1), Constraint::Length(draft_lines + 2)]).areas(area);
    let lines = transcript(app, talk.width as usize);
    let height = talk.height as usize;
    let bottom = lines.len().saturating_sub(app.scroll.min(lines.len().saturating_sub(height)));
    let top = bottom.saturating_sub(height);
    frame.render_widget(Paragraph::new(lines[top..bottom].to_vec()), talk);
    frame.render_widget(Paragraph::new(status(app)), line);
    let editor =
        Paragraph::new(app.draft.text.clone()).block(Frame::default().borders(Borders::ALL).title(" message "));
    frame.render_widget(editor, input);
    // The cursor: its line and column in the draft.
    let before: String = app.draft.text.chars().take(app.draft.cursor).collect();
    let row = before.matches('\n').count() as u16;
    let column = before.rsplit('\n').next().unwrap_or_default().chars().count() as u16;
    frame.set_cursor_position(Position::new(input.x + 1 + column, input.y + 1 + row.min(draft_lines - 1)));
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
        app.handle(Input::Connected { session: "s-1".into() });
        app.blocks.push(Block::User { sender: "alice".into(), channel: None, text: "What is on today?".into() });
        app.blocks.push(Block::Activity { text: "→ worker: Check the calendar".into() });
        app.blocks.push(Block::Assistant { text: "# Today\nA dentist at 3pm.\n```\nnothing else\n```".into() });
        for c in "thanks".chars() {
            app.handle(Input::Key(Key::Char(c)));
        }
        let shown = screen(&app, 60, 16);
        let expected = [
            "alice › What is on today?",
            "",
            "  → worker: Check the calendar",
            "",
            "# Today",
            "A dentist at 3pm.",
            "```",
            "nothing else",
            "```",
            "",
            "",
            "",
            "● connected · user:alice · s-1 · Enter send · Shift+Enter ne",
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
        app.blocks.push(Block::Assistant { text: format!("\x1b]52;c;aGk=\x07{}", "word ".repeat(40)) });
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
