//! The household's people at a terminal: the real `baaaht tui`, each in a tmux terminal of its
//! own, typing their messages and reading the answers off the screen, as a person does. The
//! client reconnects by itself when the daemon goes away and comes back.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use super::{Kind, Outcome, Sent, PATIENCE, SORRY};
use crate::tmux::{shell_quote, Tmux};

/// How long a TUI may take to attach at the start.
const ATTACH: Duration = Duration::from_secs(60);
/// How often a person looks at the screen: each look is a `tmux capture-pane` process, and
/// three terminals looked at every 50 ms were some 60 processes a second on the two cores the
/// daemon is measured on. A TUI's first word is not in the report's latency (the chats' is), so
/// looking four times a second costs the report nothing.
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// What the TUI shows for a message it could not send, and for one the daemon refused
/// (`tui/run.rs`, `act`).
const NOT_SENT: &str = "not sent:";
const REFUSED: &str = "the daemon refused:";

/// The terminals, by household index.
pub(super) struct Terminals {
    pub(super) people: Vec<(usize, Arc<Tmux>)>,
}

impl Terminals {
    /// A 160×60 terminal (the status line whole, a long answer on one screen) for each of `indexes`, running `baaaht tui` on the daemon's `socket`
    /// until it shows it is connected.
    pub(super) fn open(socket: &Path, indexes: impl Iterator<Item = usize>) -> Result<Terminals> {
        let baaaht = shell_quote(&crate::bin("baaaht").display().to_string());
        let mut people = vec![];
        for index in indexes {
            let user = super::user_id(index);
            let terminal = Tmux::start(160, 60, &[("BAAAHT_SOCKET", socket.display().to_string())])?;
            terminal.type_text(&format!("{baaaht} tui --user {user} --theme dark"))?;
            terminal.press(&["Enter"])?;
            terminal
                .wait_for(&format!("● connected · user:{user}"), ATTACH)
                .with_context(|| format!("{user}'s TUI"))?;
            people.push((index, Arc::new(terminal)));
        }
        Ok(Terminals { people })
    }

    pub(super) fn terminal(&self, index: usize) -> Option<Arc<Tmux>> {
        self.people.iter().find(|(each, _)| *each == index).map(|(_, terminal)| terminal.clone())
    }

    /// The people whose TUI does not show it is connected now, with what it shows.
    pub(super) fn not_connected(&self) -> Vec<String> {
        let mut found = vec![];
        for (index, terminal) in &self.people {
            let user = super::user_id(*index);
            let connected = format!("● connected · user:{user}");
            // Given the time a reconnection takes (its backoff after a daemon restart).
            if let Err(error) = terminal.wait_for(&connected, ATTACH) {
                found.push(format!("{user}: {error:#}"));
            }
        }
        found
    }
}

/// The status line's index in `lines`: the line above the message box.
fn status_at(lines: &[&str]) -> usize {
    lines.iter().rposition(|line| line.starts_with("┌ message")).map_or(lines.len(), |at| at.saturating_sub(1))
}

/// The conversation's part of `screen`: the lines above the status line.
fn talk(screen: &str) -> Vec<&str> {
    let lines: Vec<&str> = screen.lines().collect();
    let status = status_at(&lines);
    lines[..status].to_vec()
}

/// The status line of `screen`.
fn status(screen: &str) -> &str {
    let lines: Vec<&str> = screen.lines().collect();
    lines.get(status_at(&lines)).copied().unwrap_or_default()
}

/// Whether the status line says a turn is under way (`view.rs`, `status`).
fn answering(screen: &str) -> bool {
    let status = status(screen);
    status.contains(" · answering") || status.contains(" · reading untrusted content")
}

/// The blocks of `lines` (each ends with a blank line), each its lines joined, without the
/// activity lines (a block whose first line is indented).
fn blocks(lines: &[&str]) -> Vec<String> {
    let mut out = vec![];
    let mut block: Vec<&str> = vec![];
    for line in lines.iter().chain([&""]) {
        if !line.trim().is_empty() {
            block.push(line);
            continue;
        }
        if block.first().is_some_and(|first| !first.starts_with("  ")) {
            out.push(block.iter().map(|line| line.trim()).collect::<Vec<_>>().join(" "));
        }
        block.clear();
    }
    out
}

/// The blocks of `now` that came after the ones of `before` (the screen may have scrolled).
fn added<'a>(before: &[String], now: &'a [String]) -> &'a [String] {
    for tail in (1..=before.len().min(3)).rev() {
        let last = &before[before.len() - tail..];
        if let Some(at) = (0..=now.len().saturating_sub(tail)).rev().find(|at| now[*at..].starts_with(last)) {
            return &now[at + tail..];
        }
    }
    now
}

/// Waits until no turn is under way on `terminal`: a message typed then is this message's
/// turn alone. A turn that outlasts the wait is cancelled (Ctrl+C), as a person would.
fn settled(terminal: &Tmux) -> Result<()> {
    if terminal.wait_until(|screen| !answering(screen), PATIENCE).is_err() {
        terminal.press(&["C-c"])?;
        terminal.wait_until(|screen| !answering(screen), Duration::from_secs(30))?;
    }
    Ok(())
}

/// Types `content` into `user`'s TUI and reads its turn off the screen: what the person saw.
/// `asked` is what the message asks for (a chat, the Coder, the MCP server), which its answer
/// must show.
pub(super) fn follow(terminal: &Tmux, user: &str, asked: Kind, content: &str, sent: &mut Sent) {
    let before = match settled(terminal).and_then(|()| terminal.screen()) {
        Ok(screen) => blocks(&talk(&screen)),
        Err(error) => {
            sent.outcome = Outcome::Lost(format!("the terminal: {error:#}"));
            return;
        }
    };
    let started = Instant::now();
    if let Err(error) = terminal.type_text(content).and_then(|()| terminal.press(&["Enter"])) {
        sent.outcome = Outcome::Lost(format!("typing into the terminal: {error:#}"));
        return;
    }
    let mine = format!("{user} › ");
    let deadline = started + PATIENCE;
    loop {
        let screen = match terminal.screen() {
            Ok(screen) => screen,
            Err(error) => {
                sent.outcome = Outcome::Lost(format!("the terminal: {error:#}"));
                return;
            }
        };
        let now = blocks(&talk(&screen));
        let new = added(&before, &now);
        match new.iter().position(|block| block.starts_with(&mine) && block.contains(&sent.token)) {
            // Taken: its turn goes on below it.
            Some(at) => {
                let after = &new[at + 1..];
                if let Some(error) = after.iter().find(|block| block.starts_with("! ")) {
                    sent.outcome = Outcome::Refused(error.trim_start_matches("! ").to_string());
                    return;
                }
                let said: Vec<&String> = after.iter().filter(|block| block.contains(&sent.token)).collect();
                if sent.first_word.is_none() && !said.is_empty() {
                    sent.first_word = Some(started.elapsed());
                }
                // The daemon went away during the turn: what the screen kept of it is cut
                // short; whether it was answered, its session's log says.
                if after.iter().any(|block| block == "reconnected") || status(&screen).contains("reconnecting") {
                    sent.outcome = Outcome::Lost("the daemon went away during the turn".into());
                    return;
                }
                if !answering(&screen) {
                    if let Some(sorry) = said.iter().find(|block| block.starts_with(SORRY)) {
                        sent.outcome = Outcome::Refused(sorry.to_string());
                        return;
                    }
                    let text = said.iter().map(|block| block.as_str()).collect::<Vec<_>>().join("\n");
                    if super::answers(asked, &text, &sent.token) {
                        sent.outcome = Outcome::Answered;
                        return;
                    }
                }
            }
            // Not taken: the TUI says so below what was on the screen.
            None => {
                if let Some(refused) = new.iter().find_map(|block| block.strip_prefix(REFUSED)) {
                    sent.outcome = Outcome::Refused(refused.trim().to_string());
                    return;
                }
                if let Some(not_sent) = new.iter().find(|block| block.starts_with(NOT_SENT)) {
                    // It never reached the daemon (its log says so).
                    sent.unreachable = Some(not_sent.clone());
                    sent.outcome = Outcome::Lost(not_sent.clone());
                    return;
                }
            }
        }
        if Instant::now() > deadline {
            sent.outcome = Outcome::Lost(format!("no answer on the screen within {} s", PATIENCE.as_secs()));
            return;
        }
        std::thread::sleep(LOOK_EVERY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_screen_is_read_as_blocks_of_the_conversation() {
        let screen = "person05 › Remember hh00001 for me, please.\n\necho: Remember hh00001 for\nme, please.\n\n  → coder: Run: echo hh00002\n\n! the model is busy,\n  try again\n\nnot sent: baaahtd is not\nrunning\n\n\n◌ reconnecting… (daemon not running at /a/very/long/path; start it with baaahtd run) · user:pe\n┌ message ─\n│\n└─\n";
        let talk = talk(screen);
        assert_eq!(talk.len(), 14);
        assert!(status(screen).starts_with("◌ reconnecting"));
        assert!(!answering(screen));
        let blocks = blocks(&talk);
        assert_eq!(
            blocks,
            [
                "person05 › Remember hh00001 for me, please.",
                "echo: Remember hh00001 for me, please.",
                "! the model is busy, try again",
                "not sent: baaahtd is not running"
            ]
        );
        // Scrolled by one block, then one more added.
        let later: Vec<String> = blocks[1..].iter().cloned().chain(["reconnected".to_string()]).collect();
        assert_eq!(added(&blocks, &later), ["reconnected"]);
        assert_eq!(added(&[], &later).len(), 4);
    }
}
