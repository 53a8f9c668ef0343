//! The TUI's state machine (issue 16): keys, daemon events and connection changes in, what the
//! screen shows and what to ask the daemon out. No terminal and no network here, so that every
//! transition is tested on its own.

use baaaht_proto::v1;

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
    CtrlC,
    Paste(String),
}

/// What happens to the state.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Key(Key),
    Event(Box<v1::OrchestratorEvent>),
    Connected {
        session: String,
    },
    Disconnected {
        reason: String,
    },
    /// The inbox's unread items, shown on open.
    Inbox(Vec<v1::InboxItem>),
    /// A command's answer, to show.
    Said(String),
    /// Nothing changed but the screen's size: draw again.
    Redraw,
    /// Messages go to another session from now on (after /new, /resume, /fork).
    Switched {
        session: String,
    },
}

/// The `/` commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    New,
    Sessions,
    Resume(String),
    Archive,
    Compact,
    Fork,
    Model(String),
    Tasks,
    Usage,
    Status,
    Help,
    Quit,
}

/// What the client should ask the daemon, or do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Send(String),
    Cancel { turn: String },
    Run(Command),
    Quit,
}

/// The commands, with what each does (for `/help` and completion).
pub const COMMANDS: &[(&str, &str)] = &[
    ("/new", "start a new session"),
    ("/sessions", "list this context's sessions"),
    ("/resume", "resume a session: /resume ID"),
    ("/fork", "start a new session from this one"),
    ("/archive", "archive this session"),
    ("/compact", "summarize this session's history for the model"),
    ("/model", "switch this session's model: /model provider/model"),
    ("/tasks", "this context's scheduled tasks and their next runs"),
    ("/usage", "tokens and cost against the budget"),
    ("/status", "the daemon, the engine and the containers"),
    ("/help", "these commands"),
    ("/quit", "leave (Ctrl+C twice does too)"),
];

/// Reads a `/` command; the error says what was wrong.
pub fn parse_command(text: &str) -> Result<Command, String> {
    let mut words = text.split_whitespace();
    let name = words.next().unwrap_or_default();
    let rest: Vec<&str> = words.collect();
    let argument = |usage: &str| -> Result<String, String> {
        match rest.as_slice() {
            [one] => Ok((*one).to_string()),
            _ => Err(format!("usage: {usage}")),
        }
    };
    let bare = |command: Command| -> Result<Command, String> {
        if rest.is_empty() {
            Ok(command)
        } else {
            Err(format!("{name} takes no argument"))
        }
    };
    match name {
        "/new" => bare(Command::New),
        "/sessions" => bare(Command::Sessions),
        "/resume" => argument("/resume SESSION-ID").map(Command::Resume),
        "/fork" => bare(Command::Fork),
        "/archive" => bare(Command::Archive),
        "/compact" => bare(Command::Compact),
        "/model" => argument("/model provider/model").map(Command::Model),
        "/tasks" => bare(Command::Tasks),
        "/usage" => bare(Command::Usage),
        "/status" => bare(Command::Status),
        "/help" => bare(Command::Help),
        "/quit" | "/exit" => bare(Command::Quit),
        other => Err(format!("{other} is not a command; /help lists them")),
    }
}

/// The commands `prefix` may complete to.
pub fn complete(prefix: &str) -> Vec<&'static str> {
    COMMANDS.iter().map(|(name, _)| *name).filter(|name| name.starts_with(prefix)).collect()
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
    history: Vec<String>,
    /// Where Up/Down is in `history` (None: the draft).
    browsing: Option<usize>,
    /// The draft as it was when browsing started.
    stashed: String,
    /// Ctrl+C pressed once with nothing to cancel: the next one quits.
    quit_armed: bool,
}

fn role_name(role: i32) -> &'static str {
    match v1::AgentRole::try_from(role) {
        Ok(v1::AgentRole::Assistant) => "assistant",
        Ok(v1::AgentRole::Worker) => "worker",
        Ok(v1::AgentRole::Researcher) => "researcher",
        Ok(v1::AgentRole::Coder) => "coder",
        Ok(v1::AgentRole::Memory) => "memory",
        Ok(v1::AgentRole::Heartbeat) => "heartbeat",
        _ => "agent",
    }
}

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
            history: vec![],
            browsing: None,
            stashed: String::new(),
            quit_armed: false,
        }
    }

    fn info(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Info { text: text.into() });
    }

    /// Takes one input; returns what the client should do.
    pub fn handle(&mut self, input: Input) -> Vec<Action> {
        match input {
            Input::Key(key) => self.key(key),
            Input::Event(event) => {
                self.event(*event);
                vec![]
            }
            Input::Connected { session } => {
                if matches!(self.connection, Connection::Reconnecting { .. }) {
                    self.info("reconnected");
                }
                self.connection = Connection::Connected;
                self.session = Some(session);
                vec![]
            }
            Input::Disconnected { reason } => {
                // A turn in flight is the daemon's to finish or end; its text so far stays.
                if let Some(live) = self.live.take() {
                    if !live.text.is_empty() {
                        self.blocks.push(Block::Assistant { text: live.text });
                    }
                }
                self.connection = Connection::Reconnecting { reason };
                vec![]
            }
            Input::Inbox(items) => {
                for item in items {
                    self.blocks.push(Block::Notice { title: item.title, text: item.content, error: false });
                }
                vec![]
            }
            Input::Said(text) => {
                self.info(text);
                vec![]
            }
            Input::Redraw => vec![],
            Input::Switched { session } => {
                self.live = None;
                self.info(format!("now in session {session}"));
                self.session = Some(session);
                vec![]
            }
        }
    }

    fn key(&mut self, key: Key) -> Vec<Action> {
        if key != Key::CtrlC {
            self.quit_armed = false;
        }
        match key {
            Key::Char(c) => self.draft.insert(&c.to_string()),
            Key::Paste(text) => self.draft.insert(&text.replace("\r\n", "\n")),
            Key::NewLine => self.draft.insert("\n"),
            Key::Backspace => self.draft.backspace(),
            Key::Left => self.draft.cursor = self.draft.cursor.saturating_sub(1),
            Key::Right => self.draft.cursor = (self.draft.cursor + 1).min(self.draft.text.chars().count()),
            Key::Up if !self.draft.text.contains('\n') => self.history_back(),
            Key::Down if !self.draft.text.contains('\n') => self.history_forward(),
            Key::Up | Key::Down => {}
            Key::PageUp => self.scroll += 10,
            Key::PageDown => self.scroll = self.scroll.saturating_sub(10),
            Key::Enter => return self.submit(),
            Key::CtrlC => {
                if let Some(live) = &self.live {
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
                    self.info(lines.join("\n"));
                    vec![]
                }
                Ok(command) => vec![Action::Run(command)],
                Err(error) => {
                    self.blocks.push(Block::Error { text: error });
                    vec![]
                }
            };
        }
        vec![Action::Send(text)]
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

    fn event(&mut self, event: v1::OrchestratorEvent) {
        use v1::orchestrator_event::Event;
        let Some(kind) = event.event else { return };
        match kind {
            Event::UserMessage(message) => {
                self.blocks.push(Block::User {
                    sender: message.sender_id,
                    channel: channel_name(message.channel),
                    text: message.content,
                });
                self.live = Some(Live { turn: event.turn_id, ..Live::default() });
            }
            Event::TextDelta(delta) => self.live_of(&event.turn_id).text.push_str(&delta.text),
            Event::ThinkingDelta(delta) => self.live_of(&event.turn_id).thinking.push_str(&delta.thinking),
            Event::Delegation(delegation) => {
                let task = delegation.task.lines().next().unwrap_or_default().to_string();
                let text = match delegation.state.as_str() {
                    "started" => format!("→ {}: {task}", role_name(delegation.agent)),
                    state => format!("← {} {state}", role_name(delegation.agent)),
                };
                self.blocks.push(Block::Activity { text });
            }
            Event::Tool(tool) => {
                let text =
                    format!("· {} {} {} ({} ms)", role_name(tool.agent), tool.tool, tool.state, tool.duration_ms);
                self.blocks.push(Block::Activity { text });
            }
            Event::Reply(reply) => {
                let text = match self.live.take() {
                    Some(live) if !live.text.is_empty() => live.text,
                    _ => reply.content,
                };
                self.blocks.push(Block::Assistant { text });
            }
            Event::Error(error) => {
                self.live = None;
                self.blocks.push(Block::Error { text: error.message });
            }
            Event::Message(message) => self.blocks.push(Block::Assistant { text: message.content }),
            Event::Notice(notice) => {
                self.blocks.push(Block::Notice { title: notice.title, text: notice.content, error: notice.is_error })
            }
        }
    }

    fn live_of(&mut self, turn: &str) -> &mut Live {
        if self.live.as_ref().is_none_or(|live| live.turn != turn) {
            self.live = Some(Live { turn: turn.to_string(), ..Live::default() });
        }
        self.live.get_or_insert_with(Live::default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use v1::orchestrator_event::Event;

    fn event(turn: &str, kind: Event) -> Input {
        Input::Event(Box::new(v1::OrchestratorEvent {
            session_id: "s-1".into(),
            turn_id: turn.into(),
            correlation_id: String::new(),
            event: Some(kind),
        }))
    }

    fn typed(app: &mut App, text: &str) {
        for c in text.chars() {
            app.handle(Input::Key(Key::Char(c)));
        }
    }

    #[test]
    fn a_turn_streams_into_one_answer_with_its_activity_in_order() {
        let mut app = App::new("user:alice");
        app.handle(Input::Connected { session: "s-1".into() });
        typed(&mut app, "hello");
        assert_eq!(app.handle(Input::Key(Key::Enter)), [Action::Send("hello".into())]);
        assert_eq!(app.draft, Draft::default());
        let entered = v1::UserMessageEntered {
            sender_id: "alice".into(),
            content: "hello".into(),
            channel: v1::ChannelType::Tui as i32,
            ..Default::default()
        };
        app.handle(event("t1", Event::UserMessage(entered)));
        app.handle(event("t1", Event::TextDelta(v1::TextDelta { text: "Let me ".into(), ..Default::default() })));
        let delegation = v1::DelegationProgress {
            agent: v1::AgentRole::Worker as i32,
            task: "Look it up\nmore".into(),
            state: "started".into(),
            result: String::new(),
        };
        app.handle(event("t1", Event::Delegation(delegation)));
        app.handle(event("t1", Event::TextDelta(v1::TextDelta { text: "check.".into(), ..Default::default() })));
        assert_eq!(app.live.as_ref().map(|live| live.text.as_str()), Some("Let me check."));
        app.handle(event(
            "t1",
            Event::Reply(v1::ReplyComplete { content: "Let me check.".into(), ..Default::default() }),
        ));
        assert!(app.live.is_none());
        assert_eq!(
            app.blocks,
            [
                Block::User { sender: "alice".into(), channel: None, text: "hello".into() },
                Block::Activity { text: "→ worker: Look it up".into() },
                Block::Assistant { text: "Let me check.".into() },
            ]
        );
    }

    #[test]
    fn a_message_from_another_channel_is_marked_with_it() {
        let mut app = App::new("user:alice");
        let entered = v1::UserMessageEntered {
            sender_id: "alice".into(),
            content: "from my phone".into(),
            channel: v1::ChannelType::Slack as i32,
            ..Default::default()
        };
        app.handle(event("t2", Event::UserMessage(entered)));
        assert_eq!(
            app.blocks,
            [Block::User { sender: "alice".into(), channel: Some("slack".into()), text: "from my phone".into() }]
        );
    }

    #[test]
    fn ctrl_c_cancels_a_running_turn_and_twice_quits_when_idle() {
        let mut app = App::new("user:alice");
        app.handle(event("t1", Event::TextDelta(v1::TextDelta { text: "…".into(), ..Default::default() })));
        assert_eq!(app.handle(Input::Key(Key::CtrlC)), [Action::Cancel { turn: "t1".into() }]);
        app.handle(event("t1", Event::Error(v1::TurnError { message: "cancelled".into() })));
        assert!(app.handle(Input::Key(Key::CtrlC)).is_empty(), "the first one only warns");
        assert!(matches!(app.blocks.last(), Some(Block::Info { text }) if text.contains("again to quit")));
        assert_eq!(app.handle(Input::Key(Key::CtrlC)), [Action::Quit]);
        // Any other key in between disarms it.
        let mut app = App::new("user:alice");
        app.handle(Input::Key(Key::CtrlC));
        app.handle(Input::Key(Key::Char('x')));
        assert!(app.handle(Input::Key(Key::CtrlC)).is_empty());
    }

    #[test]
    fn the_draft_survives_a_reconnection_and_history_comes_back_with_up() {
        let mut app = App::new("user:alice");
        typed(&mut app, "first");
        app.handle(Input::Key(Key::Enter));
        typed(&mut app, "half-written");
        app.handle(Input::Key(Key::NewLine));
        typed(&mut app, "second line");
        app.handle(Input::Disconnected { reason: "the daemon restarted".into() });
        assert_eq!(app.connection, Connection::Reconnecting { reason: "the daemon restarted".into() });
        app.handle(Input::Connected { session: "s-1".into() });
        assert_eq!(app.draft.text, "half-written\nsecond line");
        assert!(matches!(app.blocks.last(), Some(Block::Info { text }) if text == "reconnected"));
        // Up in a multi-line draft moves in the draft, not through history.
        app.handle(Input::Key(Key::Up));
        assert_eq!(app.draft.text, "half-written\nsecond line");
        let mut app = App::new("user:alice");
        for text in ["one", "two"] {
            typed(&mut app, text);
            app.handle(Input::Key(Key::Enter));
        }
        typed(&mut app, "dra");
        app.handle(Input::Key(Key::Up));
        assert_eq!(app.draft.text, "two");
        app.handle(Input::Key(Key::Up));
        assert_eq!(app.draft.text, "one");
        app.handle(Input::Key(Key::Down));
        app.handle(Input::Key(Key::Down));
        assert_eq!(app.draft.text, "dra", "back to what was being written");
    }

    #[test]
    fn commands_are_parsed_completed_and_refused_with_a_reason() {
        assert_eq!(parse_command("/model openai/gpt-4o"), Ok(Command::Model("openai/gpt-4o".into())));
        assert_eq!(parse_command("/resume"), Err("usage: /resume SESSION-ID".into()));
        assert_eq!(parse_command("/new please"), Err("/new takes no argument".into()));
        assert_eq!(parse_command("/frobnicate"), Err("/frobnicate is not a command; /help lists them".into()));
        assert_eq!(complete("/s"), ["/sessions", "/status"]);
        let mut app = App::new("user:alice");
        typed(&mut app, "/tasks");
        assert_eq!(app.handle(Input::Key(Key::Enter)), [Action::Run(Command::Tasks)]);
        typed(&mut app, "/help");
        assert!(app.handle(Input::Key(Key::Enter)).is_empty());
        assert!(matches!(app.blocks.last(), Some(Block::Info { text }) if text.contains("/tasks")));
    }

    #[test]
    fn switching_sessions_sends_there_from_then_on() {
        let mut app = App::new("user:alice");
        app.handle(Input::Connected { session: "s-1".into() });
        app.handle(Input::Switched { session: "s-2".into() });
        assert_eq!(app.session.as_deref(), Some("s-2"));
        assert!(matches!(app.blocks.last(), Some(Block::Info { text }) if text == "now in session s-2"));
    }

    #[test]
    fn editing_works_on_characters_not_bytes_and_paste_keeps_lines() {
        let mut app = App::new("user:alice");
        typed(&mut app, "héllo");
        app.handle(Input::Key(Key::Left));
        app.handle(Input::Key(Key::Backspace));
        assert_eq!(app.draft.text, "hélo");
        app.handle(Input::Key(Key::Paste("a\r\nb".into())));
        assert_eq!(app.draft.text, "héla\nbo");
    }
}
