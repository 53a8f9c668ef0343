//! The TUI's state machine (issue 16): keys, daemon events and connection changes in, what the
//! screen shows and what to ask the daemon out. No terminal and no network here, so that every
//! transition is tested on its own.

use baaaht_gateway_kit::said::{said, Said};
use baaaht_proto::v1;

mod blocks;
mod commands;
#[cfg(test)]
mod tests;

use blocks::{activity_block, asking_of, missed};
pub use blocks::{blocks_of, branch_of};
use commands::common_prefix;
pub use commands::{complete, complete_path, parse_command, Command, MemoryReview, COMMANDS, KEYS};

/// One finished piece of the conversation as the screen shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    /// A user's message; `channel` when it came from another channel than this one.
    User {
        sender: String,
        channel: Option<String>,
        text: String,
    },
    Assistant {
        text: String,
        /// The model's thinking before it answered (folded unless shown).
        thinking: String,
    },
    /// A delegation or a tool call: one compact line.
    Activity {
        text: String,
    },
    /// A scheduled task's result or trouble, or an inbox item.
    Notice {
        title: String,
        text: String,
        error: bool,
    },
    Error {
        text: String,
    },
    /// What the client itself says (help, command output, reconnection).
    Info {
        text: String,
    },
}

/// The turn being streamed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Live {
    pub turn: String,
    pub text: String,
    pub thinking: String,
    /// The turn read untrusted content: some of its tools are paused.
    pub tainted: bool,
    /// What its agent does before words come ("starting the assistant", "thinking").
    pub phase: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connection {
    Connecting,
    Connected,
    /// Lost; the client tries again. What the user types is kept.
    Reconnecting {
        reason: String,
    },
}

/// A key, as the terminal layer translates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Char(char),
    /// Enter: send.
    Enter,
    /// Shift+Enter or Alt+Enter: a new line in the draft.
    NewLine,
    Backspace,
    Left,
    Right,
    Up,
    Down,
    PageUp,
    PageDown,
    /// The mouse wheel: three lines.
    ScrollUp,
    ScrollDown,
    Home,
    End,
    Tab,
    Esc,
    CtrlC,
    /// Shows or folds the thinking blocks.
    CtrlT,
    /// Copies the newest code block.
    CtrlY,
    Paste(String),
}

/// What happens to the state.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Key(Key),
    Event(Box<v1::OrchestratorEvent>),
    /// Following the context; `history` is the session so far, shown when it is not already.
    Connected {
        session: String,
        history: Vec<Block>,
    },
    Disconnected {
        reason: String,
    },
    /// The inbox's unread items, shown on open.
    Inbox(Vec<v1::InboxItem>),
    /// Approvals of the session still waiting for an answer, found in its history on open:
    /// the prompt asks them as it asks those that come.
    Waiting(Vec<v1::ApprovalRequest>),
    /// A command's answer, to show.
    Said(String),
    /// Nothing changed but the screen's size: draw again.
    Redraw,
    /// Messages go to another session, or another branch of one, from now on (after /new,
    /// /resume, /fork, /tree): its conversation so far replaces what is shown.
    Switched {
        session: String,
        history: Vec<Block>,
        /// The branch's last entry, when a branch other than the newest was chosen.
        leaf: Option<String>,
    },
    /// Turns were undone (or redone): the session's conversation is now `history`, new
    /// messages follow the daemon's branch, and `text` says what was done.
    Undone {
        session: String,
        history: Vec<Block>,
        text: String,
        /// Where the conversation is now.
        leaf: String,
    },
    /// A list to choose from (/resume, /tree).
    Pick(Picker),
    /// The context's skills, for completion and /skill:NAME.
    Skills(Vec<String>),
    /// The folder whose files complete after `@` (the session's data folder), when readable.
    Files(Option<std::path::PathBuf>),
    /// Now following another context (/group).
    Context {
        label: String,
    },
}

/// What a picker's line leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    Session(String),
    Branch { session: String, leaf: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PickItem {
    pub label: String,
    /// Indentation in a tree.
    pub depth: usize,
    /// Shown under the list while the line is selected.
    pub preview: String,
    pub pick: Pick,
    /// Where the user is now.
    pub current: bool,
}

/// A list to choose from with Up/Down and Enter (Esc leaves it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picker {
    pub title: String,
    pub items: Vec<PickItem>,
    pub selected: usize,
}

/// What the client should ask the daemon, or do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A message, under `parent` when a branch other than the newest was chosen.
    Send {
        text: String,
        parent: Option<String>,
    },
    Cancel {
        turn: String,
    },
    /// Answers an approval request (once, session, always or deny).
    Answer {
        id: String,
        decision: String,
    },
    /// Puts this on the clipboard (OSC 52: works over SSH and in tmux).
    Copy(String),
    /// The conversation was moved by an undo or a redo elsewhere: show its branch at `leaf`.
    Follow {
        session: String,
        leaf: String,
        text: String,
    },
    Run(Command),
    Quit,
}

/// The text being written, a cursor in it (a char index).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Draft {
    pub text: String,
    pub cursor: usize,
}

impl Draft {
    fn byte_at(&self, chars: usize) -> usize {
        self.text.char_indices().nth(chars).map_or(self.text.len(), |(at, _)| at)
    }

    fn insert(&mut self, text: &str) {
        let at = self.byte_at(self.cursor);
        self.text.insert_str(at, text);
        self.cursor += text.chars().count();
    }

    fn backspace(&mut self) {
        if self.cursor == 0 {
            return;
        }
        let (from, to) = (self.byte_at(self.cursor - 1), self.byte_at(self.cursor));
        self.text.replace_range(from..to, "");
        self.cursor -= 1;
    }

    fn set(&mut self, text: &str) {
        self.text = text.to_string();
        self.cursor = text.chars().count();
    }

    fn take(&mut self) -> String {
        self.cursor = 0;
        std::mem::take(&mut self.text)
    }
}

/// The whole screen's state.
#[derive(Debug, Clone)]
pub struct App {
    pub context: String,
    pub session: Option<String>,
    pub blocks: Vec<Block>,
    pub live: Option<Live>,
    pub draft: Draft,
    pub connection: Connection,
    /// Lines scrolled up from the bottom.
    pub scroll: usize,
    pub theme: super::theme::Theme,
    pub show_thinking: bool,
    pub picker: Option<Picker>,
    /// Completions offered by the last Tab, shown above the editor.
    pub offered: Vec<String>,
    /// The entry the next message hangs under, when a branch other than the newest was chosen.
    pub parent: Option<String>,
    /// Where the last undo or redo this screen showed moved the conversation.
    pub moved_to: Option<String>,
    pub skills: Vec<String>,
    pub files: Option<std::path::PathBuf>,
    /// Bumped whenever `blocks` is replaced rather than added to (the view's cache key).
    pub generation: u64,
    /// The blocks as last drawn, so that a frame renders only what is new.
    pub drawn: super::drawn::Drawn,
    history: Vec<String>,
    /// Where Up/Down is in `history` (None: the draft).
    browsing: Option<usize>,
    /// The draft as it was when browsing started.
    stashed: String,
    /// Ctrl+C pressed once with nothing to cancel: the next one quits.
    quit_armed: bool,
    /// The turn Ctrl+C asked to stop: what it wrote stays, marked as stopped.
    stopping: Option<String>,
    /// Connections and skills' reviews waiting for an answer, oldest first: with the draft
    /// empty, one of the first's keys (o/s/a/d, or i/d) answers it.
    pub asking: Vec<Asking>,
    /// The request `a` (always) or `i` (install) was pressed for once: a second press answers
    /// it so.
    pub confirming: Option<String>,
}

/// A connection waiting for someone to allow it, or a skill waiting for its review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asking {
    pub id: String,
    /// "The coder's tools want to reach github.com:443 for `git clone …`".
    pub what: String,
    /// The answers it takes ([`ANSWERS`], [`REVIEW_ANSWERS`] for a skill's review,
    /// [`ACTION_ANSWERS`] for an action).
    pub choices: &'static [(char, &'static str, &'static str)],
}

/// The answers the approval prompt offers: its key, the decision, and how it is shown.
pub const ANSWERS: &[(char, &str, &str)] =
    &[('o', "once", "once"), ('s', "session", "this session"), ('a', "always", "always"), ('d', "deny", "deny")];

/// The answers the prompt offers for a skill's review.
pub const REVIEW_ANSWERS: &[(char, &str, &str)] = &[('i', "install", "install"), ('d', "decline", "decline")];

/// The answers the prompt offers for an action asked in a marked turn.
pub const ACTION_ANSWERS: &[(char, &str, &str)] = &[('o', "once", "allow once"), ('d', "deny", "deny")];

fn channel_name(channel: i32) -> Option<String> {
    match v1::ChannelType::try_from(channel) {
        Ok(v1::ChannelType::Web) => Some("web".into()),
        Ok(v1::ChannelType::Slack) => Some("slack".into()),
        Ok(v1::ChannelType::Cli) => Some("cli".into()),
        _ => None,
    }
}

impl App {
    pub fn new(context: impl Into<String>) -> App {
        App {
            context: context.into(),
            session: None,
            blocks: vec![],
            live: None,
            draft: Draft::default(),
            connection: Connection::Connecting,
            scroll: 0,
            theme: super::theme::Theme::dark(),
            show_thinking: false,
            picker: None,
            offered: vec![],
            parent: None,
            moved_to: None,
            skills: vec![],
            files: None,
            generation: 0,
            drawn: super::drawn::Drawn::default(),
            history: vec![],
            browsing: None,
            stashed: String::new(),
            quit_armed: false,
            stopping: None,
            asking: vec![],
            confirming: None,
        }
    }

    fn info(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Info { text: text.into() });
    }

    /// Takes one input; returns what the client should do.
    pub fn handle(&mut self, input: Input) -> Vec<Action> {
        match input {
            Input::Key(key) => return self.key(key),
            Input::Event(event) => return self.event(*event),
            Input::Waiting(requests) => {
                for request in requests {
                    if !self.asking.iter().any(|asking| asking.id == request.id) {
                        self.asking.push(asking_of(&request));
                    }
                }
            }
            Input::Connected { session, history } => {
                let again = matches!(self.connection, Connection::Reconnecting { .. });
                if self.session.as_deref() != Some(session.as_str()) {
                    self.blocks = history;
                    self.generation += 1;
                    self.parent = None;
                } else if again {
                    // What the session gained while the screen was away: answers, notes of
                    // turns the daemon's restart cut short, messages sent from elsewhere.
                    let missed = missed(&self.blocks, history);
                    self.blocks.extend(missed);
                }
                if again {
                    self.info("reconnected");
                }
                self.connection = Connection::Connected;
                self.session = Some(session);
            }
            Input::Disconnected { reason } => {
                // A turn in flight is the daemon's to finish or end; its text so far stays.
                if let Some(live) = self.live.take() {
                    if !live.text.is_empty() {
                        self.blocks.push(Block::Assistant { text: live.text, thinking: live.thinking });
                    }
                }
                self.connection = Connection::Reconnecting { reason };
            }
            Input::Inbox(items) => {
                for item in items {
                    self.blocks.push(Block::Notice { title: item.title, text: item.content, error: false });
                }
            }
            Input::Said(text) => self.info(text),
            Input::Redraw => {}
            Input::Switched { session, history, leaf } => {
                self.live = None;
                self.blocks = history;
                self.generation += 1;
                self.scroll = 0;
                let branch = if leaf.is_some() { " (an earlier branch: your next message starts from it)" } else { "" };
                self.info(format!("now in session {session}{branch}"));
                // @files complete in the new session's data folder (…/sessions/{id}/data).
                let sessions =
                    self.files.as_deref().and_then(|data| data.parent()?.parent()).map(|dir| dir.to_path_buf());
                if let Some(sessions) = sessions {
                    self.files = Some(sessions.join(&session).join("data"));
                }
                self.session = Some(session);
                self.parent = leaf;
            }
            Input::Undone { session, history, text, leaf } => {
                // Shown already (this screen's own answer or the event came first).
                if self.moved_to.as_deref() == Some(leaf.as_str()) && self.session.as_deref() == Some(session.as_str())
                {
                    return vec![];
                }
                self.live = None;
                self.blocks = history;
                self.generation += 1;
                self.scroll = 0;
                self.session = Some(session);
                self.parent = None;
                self.info(text);
                self.moved_to = Some(leaf);
            }
            Input::Pick(picker) => {
                if picker.items.is_empty() {
                    self.info(format!("{}: nothing to choose from", picker.title));
                } else {
                    self.picker = Some(picker);
                }
            }
            Input::Skills(skills) => self.skills = skills,
            Input::Files(root) => self.files = root,
            Input::Context { label } => {
                self.context = label;
                self.session = None;
                self.blocks.clear();
                self.generation += 1;
                self.live = None;
                self.parent = None;
                self.connection = Connection::Connecting;
            }
        }
        vec![]
    }

    /// The code blocks of the conversation, numbered from 1 in the order shown.
    pub fn code_blocks(&self) -> Vec<String> {
        let answers = self.blocks.iter().filter_map(|block| match block {
            Block::Assistant { text, .. } => Some(text.as_str()),
            _ => None,
        });
        answers.chain(self.live.iter().map(|live| live.text.as_str())).flat_map(super::markdown::code_blocks).collect()
    }

    fn copy(&mut self, number: Option<usize>) -> Vec<Action> {
        let blocks = self.code_blocks();
        let chosen = match number {
            None => blocks.len().checked_sub(1),
            Some(n) => n.checked_sub(1).filter(|at| *at < blocks.len()),
        };
        match chosen {
            Some(at) => {
                self.info(format!("code block [{}] copied to the clipboard", at + 1));
                vec![Action::Copy(blocks[at].clone())]
            }
            None if blocks.is_empty() => {
                self.info("there is no code block to copy yet");
                vec![]
            }
            None => {
                self.blocks.push(Block::Error {
                    text: format!(
                        "there is no code block [{}]; they go from [1] to [{}]",
                        number.unwrap_or(0),
                        blocks.len()
                    ),
                });
                vec![]
            }
        }
    }

    fn pick_key(&mut self, key: Key) -> Vec<Action> {
        let Some(picker) = &mut self.picker else { return vec![] };
        match key {
            Key::Up => picker.selected = picker.selected.saturating_sub(1),
            Key::Down => picker.selected = (picker.selected + 1).min(picker.items.len().saturating_sub(1)),
            Key::PageUp => picker.selected = picker.selected.saturating_sub(10),
            Key::PageDown => picker.selected = (picker.selected + 10).min(picker.items.len().saturating_sub(1)),
            Key::Esc | Key::CtrlC => self.picker = None,
            Key::Enter => {
                let chosen = picker.items.get(picker.selected).map(|item| item.pick.clone());
                self.picker = None;
                return match chosen {
                    Some(Pick::Session(id)) if Some(&id) == self.session.as_ref() && self.parent.is_none() => {
                        self.info("already here");
                        vec![]
                    }
                    Some(Pick::Session(id)) => vec![Action::Run(Command::Resume(Some(id)))],
                    Some(Pick::Branch { session, leaf }) => vec![Action::Run(Command::Branch { session, leaf })],
                    None => vec![],
                };
            }
            _ => {}
        }
        vec![]
    }

    fn tab(&mut self) {
        let text = self.draft.text.clone();
        let before: String = text.chars().take(self.draft.cursor).collect();
        let word_start = before.rfind(char::is_whitespace).map_or(0, |at| at + 1);
        let word = &before[word_start..];
        let (candidates, lead) = if word_start == 0 && word.starts_with('/') {
            (complete(word, &self.skills), "")
        } else if let Some(path) = word.strip_prefix('@') {
            match &self.files {
                Some(root) => (complete_path(root, path), "@"),
                None => {
                    self.info(
                        "the session's files cannot be listed from here (the daemon's data folder is not readable)",
                    );
                    return;
                }
            }
        } else {
            return;
        };
        let completed = match candidates.as_slice() {
            [] => {
                self.offered = vec![];
                return;
            }
            [one] if one.ends_with('/') || lead == "@" => one.clone(),
            [one] => format!("{one} "),
            many => common_prefix(many),
        };
        self.offered = if candidates.len() > 1 { candidates } else { vec![] };
        let replacement = format!("{lead}{completed}");
        if replacement.len() > word.len() {
            let after: String = text.chars().skip(self.draft.cursor).collect();
            let start = before[..word_start].to_string();
            self.draft.text = format!("{start}{replacement}{after}");
            self.draft.cursor = start.chars().count() + replacement.chars().count();
        }
    }

    fn key(&mut self, key: Key) -> Vec<Action> {
        if key != Key::CtrlC {
            self.quit_armed = false;
        }
        if self.picker.is_some() {
            return self.pick_key(key);
        }
        if key != Key::Tab {
            self.offered.clear();
        }
        let confirming = self.confirming.take();
        if let (Key::Char(c), true) = (&key, self.draft.text.is_empty()) {
            let asking = self.asking.first();
            let answer = asking.and_then(|asking| asking.choices.iter().find(|(shortcut, ..)| shortcut == c));
            if let (Some((_, decision, _)), Some(asking)) = (answer, asking) {
                let id = asking.id.clone();
                // `always` writes a rule and `install` a skill: each takes a second press, so a
                // word begun with its key does not.
                if matches!(*decision, "always" | "install") && confirming.as_deref() != Some(id.as_str()) {
                    self.confirming = Some(id);
                    return vec![];
                }
                self.asking.remove(0);
                return vec![Action::Answer { id, decision: (*decision).to_string() }];
            }
        }
        match key {
            Key::Char(c) => self.draft.insert(&c.to_string()),
            Key::Paste(text) => self.draft.insert(&text.replace("\r\n", "\n").replace('\r', "\n")),
            Key::NewLine => self.draft.insert("\n"),
            Key::Backspace => self.draft.backspace(),
            Key::Left => self.draft.cursor = self.draft.cursor.saturating_sub(1),
            Key::Right => self.draft.cursor = (self.draft.cursor + 1).min(self.draft.text.chars().count()),
            Key::Home => self.draft.cursor = 0,
            Key::End => self.draft.cursor = self.draft.text.chars().count(),
            Key::Up if !self.draft.text.contains('\n') => self.history_back(),
            Key::Down if !self.draft.text.contains('\n') => self.history_forward(),
            Key::Up | Key::Down => {}
            Key::PageUp => self.scroll += 10,
            Key::PageDown => self.scroll = self.scroll.saturating_sub(10),
            Key::ScrollUp => self.scroll += 3,
            Key::ScrollDown => self.scroll = self.scroll.saturating_sub(3),
            Key::Tab => self.tab(),
            Key::Esc => self.scroll = 0,
            Key::CtrlT => self.show_thinking = !self.show_thinking,
            Key::CtrlY => return self.copy(None),
            Key::Enter => return self.submit(),
            Key::CtrlC => {
                if let Some(live) = &self.live {
                    self.stopping = Some(live.turn.clone());
                    return vec![Action::Cancel { turn: live.turn.clone() }];
                }
                if self.quit_armed {
                    return vec![Action::Quit];
                }
                self.quit_armed = true;
                self.info("press Ctrl+C again to quit");
            }
        }
        vec![]
    }

    fn submit(&mut self) -> Vec<Action> {
        let text = self.draft.text.trim().to_string();
        if text.is_empty() {
            return vec![];
        }
        self.draft.take();
        self.browsing = None;
        if self.history.last() != Some(&text) {
            self.history.push(text.clone());
        }
        self.scroll = 0;
        if text.starts_with('/') {
            return match parse_command(&text) {
                Ok(Command::Quit) => vec![Action::Quit],
                Ok(Command::Help) => {
                    let lines: Vec<String> = COMMANDS.iter().map(|(name, what)| format!("{name:<10} {what}")).collect();
                    self.info(format!("{}\n\n{KEYS}", lines.join("\n")));
                    vec![]
                }
                Ok(Command::Copy(number)) => self.copy(Some(number)),
                Ok(Command::Skill { name, .. }) if !self.skills.is_empty() && !self.skills.contains(&name) => {
                    self.blocks.push(Block::Error {
                        text: format!("there is no skill `{name}`; there are: {}", self.skills.join(", ")),
                    });
                    vec![]
                }
                Ok(Command::Skill { name, text }) => {
                    let ask = if text.is_empty() { "Use it for what comes next.".to_string() } else { text };
                    let parent = self.parent.take();
                    vec![Action::Send { text: format!("Use the `{name}` skill (read it first). {ask}"), parent }]
                }
                Ok(command) => vec![Action::Run(command)],
                Err(error) => {
                    self.blocks.push(Block::Error { text: error });
                    vec![]
                }
            };
        }
        vec![Action::Send { text, parent: self.parent.take() }]
    }

    fn history_back(&mut self) {
        let at = match self.browsing {
            None if self.history.is_empty() => return,
            None => {
                self.stashed = self.draft.text.clone();
                self.history.len() - 1
            }
            Some(at) => at.saturating_sub(1),
        };
        self.browsing = Some(at);
        let text = self.history[at].clone();
        self.draft.set(&text);
    }

    fn history_forward(&mut self) {
        let Some(at) = self.browsing else { return };
        if at + 1 < self.history.len() {
            self.browsing = Some(at + 1);
            let text = self.history[at + 1].clone();
            self.draft.set(&text);
        } else {
            self.browsing = None;
            let stashed = std::mem::take(&mut self.stashed);
            self.draft.set(&stashed);
        }
    }

    fn event(&mut self, event: v1::OrchestratorEvent) -> Vec<Action> {
        use v1::orchestrator_event::Event;
        // Read as every client reads it; the approvals' and messages' blocks are drawn from the
        // event itself (the same block when a screen comes back and reads them from the log).
        let Some(said) = said(&event) else { return vec![] };
        // The context's other sessions go on without this screen; notices and approval requests
        // are for everyone.
        let elsewhere = !event.session_id.is_empty() && self.session.as_deref().is_some_and(|s| s != event.session_id);
        if elsewhere && !matches!(said, Said::Notice(_) | Said::Approval(_) | Said::Settled(_)) {
            return vec![];
        }
        let turn = event.turn_id;
        match said {
            Said::Entered(message) => {
                // The conversation went on: an undo may take it back to where it was before.
                self.moved_to = None;
                self.blocks.push(Block::User {
                    sender: message.sender_id,
                    channel: channel_name(message.channel),
                    text: message.content,
                });
                self.live = Some(Live { turn, ..Live::default() });
            }
            Said::Words(text) => self.live_of(&turn).text.push_str(&text),
            Said::Phase { said, .. } => self.live_of(&turn).phase = said,
            Said::Thinking(text) => self.live_of(&turn).thinking.push_str(&text),
            Said::Delegation { agent, task, state } => {
                let task = task.lines().next().unwrap_or_default().to_string();
                let text = match state.as_str() {
                    "started" => format!("→ {agent}: {task}"),
                    state => format!("← {agent} {state}"),
                };
                self.blocks.push(Block::Activity { text });
            }
            Said::Tool { agent, tool, state, ms } => {
                self.blocks.push(Block::Activity { text: format!("· {agent} {tool} {state} ({ms} ms)") });
            }
            Said::Answered { text: answer, .. } => {
                let (text, thinking) = match self.live.take() {
                    Some(live) if !live.text.is_empty() => (live.text, live.thinking),
                    Some(live) => (answer, live.thinking),
                    None => (answer, String::new()),
                };
                self.blocks.push(Block::Assistant { text, thinking });
            }
            Said::Failed { sentence, internal } => {
                // What was written before a stop stays on screen, as in the session.
                let stopped = self.live.take().filter(|live| self.stopping.as_deref() == Some(live.turn.as_str()));
                if let Some(live) = stopped.filter(|live| !live.text.trim().is_empty()) {
                    let text = format!("{}\n\n{}", live.text.trim_end(), baaaht_proto::STOPPED_MARK);
                    self.blocks.push(Block::Assistant { text, thinking: live.thinking });
                }
                // The operator's own screen: a failure inside shows its detail.
                self.blocks.push(Block::Error { text: internal.unwrap_or(sentence) });
            }
            Said::Notice(notice) => {
                self.blocks.push(Block::Notice { title: notice.title, text: notice.content, error: notice.is_error })
            }
            Said::Approval(request) => {
                self.asking.push(asking_of(&request));
                self.blocks.extend(activity_block(&Event::Approval(*request)));
            }
            Said::Tainted { .. } => {
                self.live_of(&turn).tainted = true;
                self.blocks.extend(event.event.as_ref().and_then(activity_block));
            }
            Said::Settled(settled) => {
                self.asking.retain(|asking| asking.id != settled.id);
                self.blocks.extend(activity_block(&Event::ApprovalSettled(settled)));
            }
            Said::Sent(message) => self.blocks.extend(activity_block(&Event::Message(message))),
            Said::Moved { leaf, text } => {
                if self.moved_to.as_deref() != Some(leaf.as_str()) && !event.session_id.is_empty() {
                    return vec![Action::Follow { session: event.session_id, leaf, text }];
                }
            }
        }
        vec![]
    }

    fn live_of(&mut self, turn: &str) -> &mut Live {
        if self.live.as_ref().is_none_or(|live| live.turn != turn) {
            self.live = Some(Live { turn: turn.to_string(), ..Live::default() });
        }
        self.live.get_or_insert_with(Live::default)
    }
}
