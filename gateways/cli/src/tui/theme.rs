//! Dark and light themes; by default the one that suits the terminal's background, which the
//! terminal is asked for (OSC 11, `terminal-colorsaurus`). `NO_COLOR` turns colour off.

use ratatui::style::{Color, Modifier, Style};

/// The styles the screen is drawn with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    pub dark: bool,
    /// No colour at all (`NO_COLOR`): emphasis only.
    pub monochrome: bool,
    pub user: Style,
    pub dim: Style,
    pub accent: Style,
    pub error: Style,
    pub notice: Style,
    pub info: Style,
    pub code: Style,
    pub ok: Style,
    pub selected: Style,
}

/// What the user asked for with `--theme`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Choice {
    /// The terminal's background decides
    #[default]
    Auto,
    Dark,
    Light,
}

impl Theme {
    pub fn dark() -> Theme {
        Theme {
            dark: true,
            monochrome: false,
            user: Style::new().fg(Color::Cyan),
            dim: Style::new().fg(Color::DarkGray),
            accent: Style::new().fg(Color::LightBlue).add_modifier(Modifier::BOLD),
            error: Style::new().fg(Color::LightRed),
            notice: Style::new().fg(Color::Yellow),
            info: Style::new().fg(Color::Gray).add_modifier(Modifier::ITALIC),
            code: Style::new().fg(Color::LightYellow),
            ok: Style::new().fg(Color::LightGreen),
            selected: Style::new().bg(Color::DarkGray).add_modifier(Modifier::BOLD),
        }
    }

    pub fn light() -> Theme {
        Theme {
            dark: false,
            monochrome: false,
            user: Style::new().fg(Color::Blue),
            dim: Style::new().fg(Color::Gray),
            accent: Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD),
            error: Style::new().fg(Color::Red),
            notice: Style::new().fg(Color::Rgb(0x9a, 0x60, 0x00)),
            info: Style::new().fg(Color::DarkGray).add_modifier(Modifier::ITALIC),
            code: Style::new().fg(Color::Rgb(0xa0, 0x30, 0x30)),
            ok: Style::new().fg(Color::Green),
            selected: Style::new().bg(Color::Rgb(0xdd, 0xe4, 0xee)).add_modifier(Modifier::BOLD),
        }
    }

    /// Emphasis only, for `NO_COLOR`.
    pub fn monochrome() -> Theme {
        let plain = Style::new();
        Theme {
            dark: true,
            monochrome: true,
            user: plain.add_modifier(Modifier::BOLD),
            dim: plain.add_modifier(Modifier::DIM),
            accent: plain.add_modifier(Modifier::BOLD),
            error: plain.add_modifier(Modifier::BOLD),
            notice: plain.add_modifier(Modifier::BOLD),
            info: plain.add_modifier(Modifier::ITALIC),
            code: plain,
            ok: plain,
            selected: plain.add_modifier(Modifier::REVERSED),
        }
    }

    /// The theme for `choice`; `Auto` asks the terminal (a fraction of a second at most),
    /// then `COLORFGBG`, and is dark when neither answers. Call before the screen starts.
    pub fn detect(choice: Choice, env: impl Fn(&str) -> Option<String>) -> Theme {
        if env("NO_COLOR").is_some_and(|value| !value.is_empty()) {
            return Theme::monochrome();
        }
        let dark = match choice {
            Choice::Dark => true,
            Choice::Light => false,
            Choice::Auto => {
                let options = {
                    let mut options = terminal_colorsaurus::QueryOptions::default();
                    options.timeout = std::time::Duration::from_millis(300);
                    options
                };
                match terminal_colorsaurus::theme_mode(options) {
                    Ok(mode) => mode == terminal_colorsaurus::ThemeMode::Dark,
                    // "15;0": light text on a black background.
                    Err(_) => env("COLORFGBG")
                        .and_then(|value| value.rsplit(';').next().and_then(|bg| bg.parse::<u8>().ok()))
                        .is_none_or(|background| !matches!(background, 7 | 15)),
                }
            }
        };
        if dark {
            Theme::dark()
        } else {
            Theme::light()
        }
    }
}
