//! The household's people at a terminal: the real `baaaht tui`, each in a tmux terminal of its
//! own, typing their messages and reading the answers off the screen, as a person does. The
//! client reconnects by itself when the daemon goes away and comes back.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use super::{Outcome, Sent, PATIENCE, SORRY};
use crate::tmux::{shell_quote, Tmux};

/// How long a TUI may take to attach at the start.
const ATTACH: Duration = Duration::from_secs(60);
/// What the TUI shows before a message it could not send (`tui/run.rs`, `act`).
const NOT_SENT: [&str; 2] = ["not sent:", "the daemon refused:"];

/// The terminals, by household index.
pub(super) struct Terminals {
    pub(super) people: Vec<(usize, Arc<Tmux>)>,
}

impl Terminals {
    /// A 100×40 terminal for each of `indexes`, running `baaaht tui` on the daemon's `socket`
    /// until it shows it is connected.
    pub(super) fn open(socket: &Path, indexes: impl Iterator<Item = usize>) -> Result<Terminals> {
        let baaaht = shell_quote(&crate::bin("baaaht").display().to_string());
        let mut people = vec![];
        for index in indexes {
            let user = super::user_id(index);
            let terminal = Tmux::start(100, 40, &[("BAAAHT_SOCKET", socket.display().to_string())])?;
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

/// The conversation's part of `screen`: the lines above the status line.
fn talk(screen: &str) -> Vec<&str> {
    let lines: Vec<&str> = screen.lines().collect();
    let status = lines.iter().rposition(|line| line.contains(" · user:")).unwrap_or(lines.len());
    lines[..status].to_vec()
}

/// The last block of `talk` (blocks end with a blank line), its lines joined.
fn last_block(talk: &[&str]) -> String {
    let filled: Vec<&str> = talk.iter().rev().skip_while(|line| line.trim().is_empty()).copied().collect();
    let block: Vec<&str> = filled.iter().take_while(|line| !line.trim().is_empty()).map(|line| line.trim()).collect();
    block.into_iter().rev().collect::<Vec<_>>().join(" ")
}

/// The blocks of `lines`, each its lines joined, without the activity lines (indented).
fn blocks(lines: &[&str]) -> Vec<String> {
    let mut out = vec![];
    let mut block: Vec<&str> = vec![];
    for line in lines.iter().chain([&""]) {
        if line.trim().is_empty() {
            if !block.is_empty() {
                out.push(block.join(" "));
                block.clear();
            }
        } else if !line.starts_with("  ") {
            block.push(line.trim());
        }
    }
    out
}

/// Types `content` into `user`'s TUI and reads its turn off the screen: what the person saw.
pub(super) fn follow(terminal: &Tmux, user: &str, content: &str, sent: &mut Sent) {
    let before = match terminal.screen() {
        Ok(screen) => talk(&screen).join("\n"),
        Err(error) => {
            sent.outcome = Outcome::Lost(format!("the terminal: {error:#}"));
            return;
        }
    };
    let asked = Instant::now();
    if let Err(error) = terminal.type_text(content).and_then(|()| terminal.press(&["Enter"])) {
        sent.outcome = Outcome::Lost(format!("typing into the terminal: {error:#}"));
        return;
    }
    let mine = format!("{user} › ");
    let deadline = asked + PATIENCE;
    loop {
        let screen = match terminal.screen() {
            Ok(screen) => screen,
            Err(error) => {
                sent.outcome = Outcome::Lost(format!("the terminal: {error:#}"));
                return;
            }
        };
        let talk = talk(&screen);
        let shown = talk.iter().rposition(|line| line.starts_with(&mine) && line.contains(&sent.token));
        match shown {
            // Taken: its turn goes on below it.
            Some(at) => {
                let after = blocks(&talk[at + 1..]);
                if let Some(error) = after.iter().find(|block| block.starts_with("! ")) {
                    sent.outcome = Outcome::Refused(error.trim_start_matches("! ").to_string());
                    return;
                }
                let said: Vec<&String> = after.iter().filter(|block| block.contains(&sent.token)).collect();
                if sent.first_word.is_none() && !said.is_empty() {
                    sent.first_word = Some(asked.elapsed());
                }
                let answering = screen.lines().any(|line| line.contains(" · user:") && line.contains("Ctrl+C cancels"));
                if !answering {
                    if let Some(sorry) = said.iter().find(|block| block.starts_with(SORRY)) {
                        sent.outcome = Outcome::Refused(sorry.to_string());
                        return;
                    }
                    let text = said.iter().map(|block| block.as_str()).collect::<Vec<_>>().join("\n");
                    if super::answers(sent.kind, &text, &sent.token) {
                        sent.outcome = Outcome::Answered;
                        return;
                    }
                }
            }
            // Not taken (yet): the TUI says so after the send when it could not send it.
            None if talk.join("\n") != before => {
                let last = last_block(&talk);
                if NOT_SENT.iter().any(|lead| last.starts_with(lead)) {
                    // Whether the daemon took it anyway, its log says.
                    sent.unreachable = Some(last.clone());
                    sent.outcome = Outcome::Lost(last);
                    return;
                }
            }
            None => {}
        }
        if Instant::now() > deadline {
            sent.outcome = Outcome::Lost(format!("no answer on the screen within {} s", PATIENCE.as_secs()));
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_screen_is_read_as_blocks_of_the_conversation() {
        let screen = "person05 › Remember hh00001 for me, please.\n\necho: Remember hh00001 for\nme, please.\n\n  → coder: Run: echo hh00002\n\nnot sent: baaahtd is not\nrunning\n\n\n● connected · user:person05 · s-1 · /help\n┌ message\n";
        let talk = talk(screen);
        assert_eq!(talk.len(), 11);
        assert_eq!(last_block(&talk), "not sent: baaahtd is not running");
        assert_eq!(blocks(&talk[1..]), ["echo: Remember hh00001 for me, please.", "not sent: baaahtd is not running"]);
    }
}
