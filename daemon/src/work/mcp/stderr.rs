//! What an MCP server writes on stderr: the last lines kept (and how it exited), to tell why
//! it could not start, with the values of its environment hidden and control characters
//! made harmless.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

/// The last lines a server wrote on stderr (and how it exited), to tell why it could not start;
/// the values of its environment in them are hidden.
#[derive(Debug, Clone)]
pub(super) struct Stderr(Arc<StderrKept>);

#[derive(Debug)]
struct StderrKept {
    lines: Mutex<std::collections::VecDeque<String>>,
    /// Set when the server's stream ended: nothing more comes.
    ended: watch::Sender<bool>,
    /// Values never shown (its environment's).
    hidden: Vec<String>,
}

impl Stderr {
    /// Keeps lines with each of `hidden` in them shown as `[hidden]`.
    pub(super) fn hiding(hidden: Vec<String>) -> Stderr {
        Stderr(Arc::new(StderrKept { lines: Mutex::default(), ended: watch::channel(false).0, hidden }))
    }

    /// Lines kept, and the longest part of a line kept.
    const LINES: usize = 12;
    const LINE: usize = 300;

    /// Keeps `line`, its control characters (terminal escapes) as spaces; the line as kept.
    pub(super) fn push(&self, line: &str) -> String {
        let mut line = line.to_string();
        for value in &self.0.hidden {
            line = line.replace(value.as_str(), "[hidden]");
        }
        let line: String =
            line.trim_end().chars().take(Self::LINE).map(|c| if c.is_control() { ' ' } else { c }).collect();
        let mut kept = self.0.lines.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() == Self::LINES {
            kept.pop_front();
        }
        kept.push_back(line.clone());
        line
    }

    /// The server's stream ended: nothing more comes.
    pub(super) fn ended(&self) {
        self.0.ended.send_replace(true);
    }

    /// `why`, and what the server last wrote on stderr (waiting a moment for the rest of its
    /// stream, which may come after what made the start fail).
    pub(super) async fn explain(&self, why: String) -> String {
        let mut ended = self.0.ended.subscribe();
        // silent-ok: a stream still open after 2 s has said what it will say for now.
        let _ = tokio::time::timeout(Duration::from_secs(2), ended.wait_for(|ended| *ended)).await;
        let kept = self.0.lines.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.is_empty() {
            return format!("{why}; it wrote nothing on stderr");
        }
        let lines: Vec<&str> = kept.iter().map(String::as_str).collect();
        format!("{why}; its last lines on stderr:\n  {}", lines.join("\n  "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_a_server_wrote_is_told_without_its_environments_values_or_controls() {
        let stderr = Stderr::hiding(vec!["sk-secret-123".into()]);
        assert_eq!(stderr.push("invalid token sk-secret-123\x1b[2J"), "invalid token [hidden] [2J");
        stderr.ended();
        let told = stderr.explain("it did not start".into()).await;
        assert_eq!(told, "it did not start; its last lines on stderr:\n  invalid token [hidden] [2J");
        let silent = Stderr::hiding(vec![]);
        silent.ended();
        assert_eq!(silent.explain("it did not start".into()).await, "it did not start; it wrote nothing on stderr");
    }
}
