//! The TUI's state machine (issue 16): keys, daemon events and connection changes in, what the
//! screen shows and what to ask the daemon out. No terminal and no network here, so that every
//! transition is tested on its own.

use baaaht_gateway_kit::said::{said, Said};
use baaaht_gateway_kit::sentences;
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

/// The `/` commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    New,
    Sessions,
    /// A session by id, or (None) a list to browse.
    Resume(Option<String>),
    Tree,
    /// Checks out a branch of a session (from /tree).
    Branch {
        session: String,
        leaf: String,
    },
    Archive,
    Compact,
    Fork,
    /// `/undo [N] [yes]`, `/redo [yes]`.
    Undo(baaaht_gateway_kit::undo::Command),
    Model(Option<String>),
    Export(Option<String>),
    Copy(usize),
    Group(String),
    Skill {
        name: String,
        text: String,
    },
    Tasks,
    /// Memory written while reading untrusted content: list it, or confirm or drop one.
    Memory(MemoryReview),
    /// What is remembered and what was said before that matches these words.
    Search(String),
    Usage,
    Status,
    Help,
    Quit,
}

/// What `/memory` asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryReview {
    List,
    Confirm(String),
    Drop(String),
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

/// The commands, with what each does (for `/help` and completion).
pub const COMMANDS: &[(&str, &str)] = &[
    ("/new", "start a new session"),
    ("/resume", "browse sessions and resume one (or /resume ID)"),
    ("/tree", "this session's forks and branches; pick one to switch"),
    ("/fork", "start a new session from this one"),
    ("/undo", "take the last turn back, its files too (/undo N: N turns); shows what first, /undo yes does it"),
    ("/redo", "bring the last undo back (/redo yes)"),
    ("/sessions", "list this context's sessions"),
    ("/archive", "archive this session"),
    ("/compact", "summarize this session's history for the model"),
    ("/model", "the models there are, or switch: /model provider/model"),
    ("/export", "write this conversation to an HTML file (/export PATH)"),
    ("/copy", "copy code block N to the clipboard (Ctrl+Y: the newest)"),
    ("/skill:", "use a skill: /skill:NAME what to do"),
    ("/group", "talk in a group: /group ID (/group me: back to yours)"),
    ("/tasks", "this context's scheduled tasks and their last runs"),
    ("/search", "find what is remembered and what was said in past sessions: /search WORDS"),
    ("/memory", "memory waiting for review (from untrusted content): /memory confirm KEY, /memory drop KEY"),
    ("/usage", "tokens and cost against the budget"),
    ("/status", "the daemon, the engine and your containers"),
    ("/help", "these commands and keys"),
    ("/quit", "leave (Ctrl+C twice does too)"),
];

/// The keys, for /help.
pub const KEYS: &str = "Enter send · Shift/Alt+Enter or Ctrl+J new line · Up/Down history · Tab complete \
(/commands, /skill:names, @files) · PgUp/PgDn or the wheel scroll · Ctrl+T thinking · Ctrl+Y copy code · \
Ctrl+C cancel the turn, twice to quit";

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
    let optional = |usage: &str| -> Result<Option<String>, String> {
        match rest.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some((*one).to_string())),
            _ => Err(format!("usage: {usage}")),
        }
    };
    if let Some(skill) = name.strip_prefix("/skill:") {
        if skill.is_empty() {
            return Err("usage: /skill:NAME what to do (Tab lists the skills)".into());
        }
        return Ok(Command::Skill { name: skill.to_string(), text: rest.join(" ") });
    }
    match name {
        "/new" => bare(Command::New),
        "/sessions" => bare(Command::Sessions),
        "/resume" => optional("/resume [SESSION-ID]").map(Command::Resume),
        "/tree" => bare(Command::Tree),
        "/fork" => bare(Command::Fork),
        "/undo" | "/redo" => baaaht_gateway_kit::undo::command(text)
            .map(Command::Undo)
            .ok_or_else(|| format!("usage: /undo [1-{}] [yes], /redo [yes]", baaaht_gateway_kit::undo::MOST_TURNS)),
        "/archive" => bare(Command::Archive),
        "/compact" => bare(Command::Compact),
        "/model" => optional("/model [provider/model]").map(Command::Model),
        "/export" => optional("/export [FILE.html]").map(Command::Export),
        "/copy" => match rest.as_slice() {
            [n] => n
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .map(Command::Copy)
                .ok_or_else(|| format!("/copy: `{n}` is not a code block's number (they are shown as [N])")),
            _ => Err("usage: /copy N (the number shown on the code block)".into()),
        },
        "/group" => argument("/group GROUP-ID (or /group me)").map(Command::Group),
        "/tasks" => bare(Command::Tasks),
        "/memory" => match rest.as_slice() {
            [] => Ok(Command::Memory(MemoryReview::List)),
            ["confirm", key] => Ok(Command::Memory(MemoryReview::Confirm((*key).to_string()))),
            ["drop", key] => Ok(Command::Memory(MemoryReview::Drop((*key).to_string()))),
            _ => Err("usage: /memory, /memory confirm KEY or /memory drop KEY".into()),
        },
        "/search" if rest.is_empty() => Err("usage: /search WORDS (\"a phrase\", prefix*)".into()),
        "/search" => Ok(Command::Search(rest.join(" "))),
        "/usage" => bare(Command::Usage),
        "/status" => bare(Command::Status),
        "/help" => bare(Command::Help),
        "/quit" | "/exit" => bare(Command::Quit),
        other => Err(format!("{other} is not a command; /help lists them")),
    }
}

/// The commands `prefix` may complete to (`/skill:NAME` for each of `skills`).
pub fn complete(prefix: &str, skills: &[String]) -> Vec<String> {
    let commands = COMMANDS.iter().map(|(name, _)| (*name).to_string()).filter(|name| name != "/skill:");
    let skills = skills.iter().map(|skill| format!("/skill:{skill}"));
    commands.chain(skills).filter(|name| name.starts_with(prefix)).collect()
}

/// The entries of `root` that `prefix` (a path relative to it) may complete to; folders end
/// in `/`. Nothing outside `root` is listed: `..` and absolute paths complete to nothing.
pub fn complete_path(root: &std::path::Path, prefix: &str) -> Vec<String> {
    let (folder, start) = match prefix.rfind('/') {
        Some(at) => (&prefix[..=at], &prefix[at + 1..]),
        None => ("", prefix),
    };
    let outside =
        std::path::Path::new(folder).components().any(|part| !matches!(part, std::path::Component::Normal(_)));
    if outside {
        return vec![];
    }
    // The folder is the containers' to write: a link in it is listed, never followed.
    let mut at = root.to_path_buf();
    for part in std::path::Path::new(folder).components() {
        at.push(part);
        if !std::fs::symlink_metadata(&at).is_ok_and(|meta| meta.is_dir()) {
            return vec![];
        }
    }
    let Ok(entries) = std::fs::read_dir(root.join(folder)) else { return vec![] };
    let mut found: Vec<String> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            if !name.starts_with(start) || (name.starts_with('.') && !start.starts_with('.')) {
                return None;
            }
            // file_type() does not follow links: a link to a folder completes as a name.
            let folder_mark = if entry.file_type().ok()?.is_dir() { "/" } else { "" };
            Some(format!("{folder}{name}{folder_mark}"))
        })
        .collect();
    found.sort();
    found
}

/// The longest start all of `words` share.
fn common_prefix(words: &[String]) -> String {
    let Some(first) = words.first() else { return String::new() };
    let mut end = first.len();
    for word in &words[1..] {
        end = end.min(first.bytes().zip(word.bytes()).take_while(|(a, b)| a == b).count());
    }
    while !first.is_char_boundary(end) {
        end -= 1;
    }
    first[..end].to_string()
}

/// The entries of the branch ending at `leaf` (the last entry written when None), root first,
/// with the approvals and notices shown beside them.
pub fn branch_of(entries: &[v1::SessionEntry], leaf: Option<&str>) -> Vec<v1::SessionEntry> {
    baaaht_proto::transcript::branch(entries, leaf).into_iter().cloned().collect()
}

/// The blocks of `history` (the session now) after the last message `shown` also holds, less
/// the ones shown after it already: what the session gained while the screen was away.
fn missed(shown: &[Block], history: Vec<Block>) -> Vec<Block> {
    let common = shown.iter().enumerate().rev().filter(|(_, block)| matches!(block, Block::User { .. })).find_map(
        |(at_shown, block)| history.iter().rposition(|each| each == block).map(|at_history| (at_shown, at_history)),
    );
    let Some((at_shown, at_history)) = common else {
        // Nothing in common: the screen showed none of it (or the history was cut short).
        return vec![];
    };
    let after = &shown[at_shown + 1..];
    history.into_iter().skip(at_history + 1).filter(|block| !after.contains(block)).collect()
}

/// A session's entries as the screen shows them.
pub fn blocks_of(entries: &[v1::SessionEntry]) -> Vec<Block> {
    use v1::session_entry::Entry;
    let mut blocks = vec![];
    for entry in entries {
        match &entry.entry {
            Some(Entry::Message(message)) => blocks.push(match message.role.as_str() {
                "user" => Block::User {
                    sender: message.sender_id.clone(),
                    channel: channel_name(message.channel),
                    text: message.content.clone(),
                },
                "assistant" => Block::Assistant { text: message.content.clone(), thinking: String::new() },
                _ => Block::Info { text: message.content.clone() },
            }),
            Some(Entry::Delegate(delegate)) => {
                let task = delegate.task.lines().next().unwrap_or_default();
                blocks.push(Block::Activity { text: format!("→ {}: {task}", sentences::agent(delegate.agent)) });
            }
            Some(Entry::Compaction(_)) => {
                blocks.push(Block::Info { text: "(earlier messages were summarized)".into() })
            }
            Some(Entry::ModelChange(change)) => {
                blocks.push(Block::Info { text: format!("model: {} → {}", change.previous_model, change.new_model) })
            }
            // As it was shown when it happened.
            Some(Entry::Activity(activity)) => {
                blocks.extend(baaaht_proto::transcript::activity_event(activity).and_then(activity_block))
            }
            None => {}
        }
    }
    blocks
}

/// The prompt's line for an approval request: whose tools want what, for the command's first
/// words; or which skill an agent asks to install, answered install or decline.
fn asking_of(request: &v1::ApprovalRequest) -> Asking {
    if request.skill_review.is_some() {
        return Asking { id: request.id.clone(), what: sentences::review_asked(request), choices: REVIEW_ANSWERS };
    }
    if request.action.is_some() {
        return Asking { id: request.id.clone(), what: sentences::review_asked(request), choices: ACTION_ANSWERS };
    }
    let title = sentences::wants_to_reach(request);
    let mut command: String = request.asked_by.split_whitespace().collect::<Vec<_>>().join(" ");
    if command.chars().count() > 48 {
        command = command.chars().take(47).collect::<String>() + "…";
    }
    let what = if command.is_empty() { title } else { format!("{title} for `{command}`") };
    Asking { id: request.id.clone(), what, choices: ANSWERS }
}

/// An approval, its answer, a turn that read content from outside, or a message, as the screen
/// shows it, live or from the session's log (the same block both ways: a screen that comes
/// back finds it shown already).
fn activity_block(event: &v1::orchestrator_event::Event) -> Option<Block> {
    use v1::orchestrator_event::Event;
    Some(match event {
        Event::Approval(request @ v1::ApprovalRequest { skill_review: Some(review), .. }) => {
            let mut lines = sentences::review_lines(review);
            lines.push(format!(
                "Install it? Press i twice (install) or d (decline); declined in {} s without an answer. Approval {}.",
                request.expires_in_seconds, request.id
            ));
            Block::Notice {
                title: sentences::review_asked(request),
                text: lines.join("\n"),
                error: !review.findings.is_empty(),
            }
        }
        Event::Approval(request @ v1::ApprovalRequest { action: Some(_), .. }) => {
            let mut lines = sentences::review_lines_of(request);
            lines.push(format!(
                "Do it? Press o (once) or d (deny); denied in {} s without an answer. Approval {}.",
                request.expires_in_seconds, request.id
            ));
            Block::Notice { title: sentences::review_asked(request), text: lines.join("\n"), error: true }
        }
        Event::Approval(request) => {
            let title = sentences::wants_to_reach(request);
            let command = sentences::asked_for(request);
            let asked = if command.is_empty() { String::new() } else { format!(" for `{command}`") };
            let text = format!(
                "Allow it? Press o (once), s (this session), a twice (always: a rule) or d (deny); denied in {} s \
                 without an answer. Approval {}{asked}.",
                request.expires_in_seconds, request.id
            );
            Block::Notice { title, text, error: false }
        }
        Event::Message(message) => {
            // Its files by name (a screenshot, a report): the terminal cannot show them.
            let files = message.attachments.iter().map(|file| format!("\n\n{}", sentences::file_sent(file)));
            Block::Assistant {
                text: format!("{}{}", message.content, files.collect::<String>()),
                thinking: String::new(),
            }
        }
        Event::Tainted(_) => Block::Activity { text: format!("! {}", sentences::activity(event)?) },
        Event::ApprovalSettled(_) => Block::Activity { text: format!("· {}", sentences::activity(event)?) },
        _ => return None,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use v1::orchestrator_event::Event;

    fn event(turn: &str, kind: Event) -> Input {
        Input::Event(Box::new(v1::OrchestratorEvent {
            session_id: String::new(),
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

    /// Back on the same session after the daemon went away, the screen shows what the session
    /// gained meanwhile (the note of a turn cut short, an answer given while away), once.
    #[test]
    fn a_reconnection_shows_what_the_session_gained_while_away() {
        let user = |text: &str| Block::User { sender: "alice".into(), channel: None, text: text.into() };
        let said = |text: &str| Block::Assistant { text: text.into(), thinking: String::new() };
        let note = Block::Info { text: "The reply was interrupted".into() };
        let mut app = App::new("user:alice");
        app.handle(Input::Connected { session: "s-1".into(), history: vec![user("one"), said("first")] });
        app.handle(Input::Disconnected { reason: "the daemon restarted".into() });
        let history = vec![user("one"), said("first"), user("two"), note.clone(), user("three"), said("third")];
        // "two" was on the screen when the daemon went; "three" was sent from elsewhere.
        app.blocks.push(user("two"));
        app.handle(Input::Connected { session: "s-1".into(), history: history.clone() });
        let shown: Vec<&Block> = app.blocks.iter().collect();
        assert_eq!(
            shown,
            [
                &user("one"),
                &said("first"),
                &user("two"),
                &note,
                &user("three"),
                &said("third"),
                &Block::Info { text: "reconnected".into() }
            ]
        );
        // Again, with nothing new: nothing is shown twice.
        app.handle(Input::Disconnected { reason: "again".into() });
        app.handle(Input::Connected { session: "s-1".into(), history });
        assert_eq!(app.blocks.iter().filter(|block| **block == said("third")).count(), 1);
    }

    #[test]
    fn an_approval_is_answered_by_one_key_with_the_draft_empty_and_always_takes_two() {
        let mut app = App::new("user:alice");
        app.handle(Input::Connected { session: "s-1".into(), history: vec![] });
        let asked = |id: &str| {
            let request =
                v1::ApprovalRequest { id: id.into(), host: "pypi.org".into(), port: 443, ..Default::default() };
            event("", Event::Approval(request))
        };
        app.handle(asked("a-1"));
        // Once a message is begun, the keys type it: only an empty draft answers.
        typed(&mut app, "I so");
        assert_eq!(app.draft.text, "I so");
        assert_eq!(app.asking.len(), 1);
        app.draft.take();
        // `a` once asks again; another key cancels; `a` twice answers.
        assert_eq!(app.handle(Input::Key(Key::Char('a'))), []);
        assert_eq!(app.confirming.as_deref(), Some("a-1"));
        assert_eq!(
            app.handle(Input::Key(Key::Char('a'))),
            [Action::Answer { id: "a-1".into(), decision: "always".into() }]
        );
        app.handle(asked("a-2"));
        app.handle(Input::Key(Key::Char('a')));
        app.handle(Input::Key(Key::Esc));
        assert_eq!(app.confirming, None);
        assert_eq!(
            app.handle(Input::Key(Key::Char('s'))),
            [Action::Answer { id: "a-2".into(), decision: "session".into() }]
        );
        assert!(app.asking.is_empty());
    }

    #[test]
    fn a_skill_review_is_shown_whole_and_answered_by_i_or_d() {
        let mut app = App::new("user:alice");
        app.handle(Input::Connected { session: "s-1".into(), history: vec![] });
        let review = v1::SkillReview {
            name: "forecast".into(),
            installs_for: "you".into(),
            scripts: vec![v1::SkillScript { path: "scripts/forecast.sh".into(), size_bytes: 812 }],
            findings: vec!["scripts/forecast.sh:3: runs what it downloads (remote-exec): curl x | sh".into()],
            ..Default::default()
        };
        let request = v1::ApprovalRequest {
            id: "a-1".into(),
            agent: v1::AgentRole::Worker as i32,
            expires_in_seconds: 300,
            skill_review: Some(review),
            ..Default::default()
        };
        app.handle(event("", Event::Approval(request.clone())));
        assert_eq!(app.asking[0].what, "The worker asks to install the skill forecast for you.");
        assert_eq!(app.asking[0].choices, REVIEW_ANSWERS);
        let Some(Block::Notice { title, text, error }) = app.blocks.last() else { panic!("{:#?}", app.blocks) };
        assert_eq!(title, "The worker asks to install the skill forecast for you.");
        assert!(text.contains("Scripts: scripts/forecast.sh (812 bytes).\n"), "{text}");
        assert!(text.contains("\n⚠ The scan found:\n• scripts/forecast.sh:3: runs what it downloads"), "{text}");
        assert!(text
            .ends_with("Press i twice (install) or d (decline); declined in 300 s without an answer. Approval a-1."));
        assert!(*error, "a review whose scan found something is shown as a warning");
        // The egress keys do not answer a review: `o` types; `i` asks again, and a second installs.
        app.handle(Input::Key(Key::Char('o')));
        assert_eq!(app.draft.text, "o");
        app.draft.take();
        assert_eq!(app.handle(Input::Key(Key::Char('i'))), []);
        assert_eq!(app.confirming.as_deref(), Some("a-1"));
        assert_eq!(
            app.handle(Input::Key(Key::Char('i'))),
            [Action::Answer { id: "a-1".into(), decision: "install".into() }]
        );
        assert!(app.asking.is_empty());
        app.handle(event("", Event::Approval(v1::ApprovalRequest { id: "a-2".into(), ..request })));
        assert_eq!(
            app.handle(Input::Key(Key::Char('d'))),
            [Action::Answer { id: "a-2".into(), decision: "decline".into() }]
        );
    }

    #[test]
    fn a_turn_streams_into_one_answer_with_its_activity_in_order() {
        let mut app = App::new("user:alice");
        app.handle(Input::Connected { session: "s-1".into(), history: vec![] });
        typed(&mut app, "hello");
        assert_eq!(app.handle(Input::Key(Key::Enter)), [Action::Send { text: "hello".into(), parent: None }]);
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
                Block::Assistant { text: "Let me check.".into(), thinking: String::new() },
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
        app.handle(event("t1", Event::Error(v1::TurnError { message: "cancelled".into(), for_users: true })));
        // What was written stays, marked as stopped, above the reason.
        let n = app.blocks.len();
        assert_eq!(
            app.blocks[n - 2..],
            [
                Block::Assistant { text: "…\n\n[stopped]".into(), thinking: String::new() },
                Block::Error { text: "cancelled".into() }
            ]
        );
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
        app.handle(Input::Connected { session: "s-1".into(), history: vec![] });
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
        assert_eq!(parse_command("/model openai/gpt-4o"), Ok(Command::Model(Some("openai/gpt-4o".into()))));
        assert_eq!(parse_command("/resume"), Ok(Command::Resume(None)));
        assert_eq!(parse_command("/resume a b"), Err("usage: /resume [SESSION-ID]".into()));
        assert_eq!(
            parse_command("/skill:summarize this page"),
            Ok(Command::Skill { name: "summarize".into(), text: "this page".into() })
        );
        assert_eq!(
            parse_command("/copy x"),
            Err("/copy: `x` is not a code block's number (they are shown as [N])".into())
        );
        assert_eq!(parse_command("/new please"), Err("/new takes no argument".into()));
        assert_eq!(parse_command("/frobnicate"), Err("/frobnicate is not a command; /help lists them".into()));
        assert_eq!(complete("/s", &["summarize".into()]), ["/sessions", "/search", "/status", "/skill:summarize"]);
        assert_eq!(parse_command("/search lisbon trip"), Ok(Command::Search("lisbon trip".into())));
        assert!(parse_command("/search").is_err_and(|why| why.starts_with("usage: /search WORDS")));
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
        app.handle(Input::Connected { session: "s-1".into(), history: vec![] });
        app.blocks.push(Block::Info { text: "old".into() });
        let history = vec![Block::User { sender: "alice".into(), channel: None, text: "before".into() }];
        app.handle(Input::Switched { session: "s-2".into(), history, leaf: Some("e-3".into()) });
        assert_eq!(app.session.as_deref(), Some("s-2"));
        assert_eq!(app.blocks.len(), 2, "the session's conversation replaces the old one: {:?}", app.blocks);
        assert!(
            matches!(app.blocks.last(), Some(Block::Info { text }) if text.starts_with("now in session s-2 (an earlier branch"))
        );
        typed(&mut app, "next");
        assert_eq!(
            app.handle(Input::Key(Key::Enter)),
            [Action::Send { text: "next".into(), parent: Some("e-3".into()) }]
        );
        typed(&mut app, "then");
        assert_eq!(
            app.handle(Input::Key(Key::Enter)),
            [Action::Send { text: "then".into(), parent: None }],
            "the branch goes on from the new message"
        );
        // Events of the context's other sessions are not this screen's.
        let elsewhere = v1::OrchestratorEvent {
            session_id: "s-other".into(),
            turn_id: "t9".into(),
            correlation_id: String::new(),
            event: Some(Event::TextDelta(v1::TextDelta { text: "elsewhere".into(), ..Default::default() })),
        };
        app.handle(Input::Event(Box::new(elsewhere)));
        assert!(app.live.is_none());
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

    #[test]
    fn tab_completes_commands_skills_and_files_under_the_data_folder() {
        let folder = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(folder.path().join("notes")).expect("mkdir");
        std::fs::write(folder.path().join("notes/todo.md"), "x").expect("write");
        std::fs::write(folder.path().join("notes/today.md"), "x").expect("write");
        std::fs::write(folder.path().join(".hidden"), "x").expect("write");
        let mut app = App::new("user:alice");
        app.handle(Input::Skills(vec!["summarize".into()]));
        app.handle(Input::Files(Some(folder.path().to_path_buf())));
        typed(&mut app, "/tr");
        app.handle(Input::Key(Key::Tab));
        assert_eq!(app.draft.text, "/tree ");
        let mut app2 = app.clone();
        app2.draft = Draft::default();
        typed(&mut app2, "/sk");
        app2.handle(Input::Key(Key::Tab));
        assert_eq!(app2.draft.text, "/skill:summarize ");
        let mut app3 = app.clone();
        app3.draft = Draft::default();
        typed(&mut app3, "/s");
        app3.handle(Input::Key(Key::Tab));
        assert_eq!(app3.offered, ["/sessions", "/search", "/status", "/skill:summarize"], "several: all are offered");
        let mut app4 = app.clone();
        app4.draft = Draft::default();
        typed(&mut app4, "read @no");
        app4.handle(Input::Key(Key::Tab));
        assert_eq!(app4.draft.text, "read @notes/");
        app4.handle(Input::Key(Key::Tab));
        assert_eq!(app4.draft.text, "read @notes/tod", "the common start of todo.md and today.md");
        assert_eq!(app4.offered, ["notes/today.md", "notes/todo.md"]);
        typed(&mut app4, "o");
        app4.handle(Input::Key(Key::Tab));
        assert_eq!(app4.draft.text, "read @notes/todo.md");
        assert!(complete_path(folder.path(), "../").is_empty(), "nothing outside the folder");
        std::os::unix::fs::symlink("/etc", folder.path().join("etc")).expect("link");
        assert_eq!(complete_path(folder.path(), "et"), ["etc"], "a link is a name");
        assert!(complete_path(folder.path(), "etc/").is_empty(), "and is not followed");
        assert_eq!(complete_path(folder.path(), "."), [".hidden"]);
    }

    #[test]
    fn thinking_is_kept_with_its_answer_and_code_blocks_are_copied_by_number() {
        let mut app = App::new("user:alice");
        app.handle(event(
            "t1",
            Event::ThinkingDelta(v1::ThinkingDelta { thinking: "hmm".into(), ..Default::default() }),
        ));
        app.handle(event(
            "t1",
            Event::TextDelta(v1::TextDelta { text: "```sh\necho 1\n```".into(), ..Default::default() }),
        ));
        app.handle(event("t1", Event::Reply(v1::ReplyComplete::default())));
        assert_eq!(app.blocks, [Block::Assistant { text: "```sh\necho 1\n```".into(), thinking: "hmm".into() }]);
        app.blocks.push(Block::Assistant { text: "```\nsecond\n```".into(), thinking: String::new() });
        app.handle(Input::Key(Key::CtrlT));
        assert!(app.show_thinking);
        assert_eq!(app.handle(Input::Key(Key::CtrlY)), [Action::Copy("second\n".into())]);
        typed(&mut app, "/copy 1");
        assert_eq!(app.handle(Input::Key(Key::Enter)), [Action::Copy("echo 1\n".into())]);
        typed(&mut app, "/copy 3");
        assert!(app.handle(Input::Key(Key::Enter)).is_empty());
        assert!(
            matches!(app.blocks.last(), Some(Block::Error { text }) if text == "there is no code block [3]; they go from [1] to [2]")
        );
    }

    #[test]
    fn a_picker_takes_the_keys_until_a_line_is_chosen_or_it_is_closed() {
        let mut app = App::new("user:alice");
        app.handle(Input::Connected { session: "s-1".into(), history: vec![] });
        let item =
            |pick: Pick| PickItem { label: String::new(), depth: 0, preview: String::new(), pick, current: false };
        let picker = Picker {
            title: "session tree".into(),
            items: vec![
                item(Pick::Session("s-1".into())),
                item(Pick::Branch { session: "s-1".into(), leaf: "e-2".into() }),
            ],
            selected: 0,
        };
        app.handle(Input::Pick(picker.clone()));
        typed(&mut app, "x");
        assert_eq!(app.draft.text, "", "typing goes to the picker");
        app.handle(Input::Key(Key::Down));
        assert_eq!(
            app.handle(Input::Key(Key::Enter)),
            [Action::Run(Command::Branch { session: "s-1".into(), leaf: "e-2".into() })]
        );
        assert!(app.picker.is_none());
        app.handle(Input::Pick(picker));
        app.handle(Input::Key(Key::Esc));
        assert!(app.picker.is_none());
        typed(&mut app, "/skill:nope");
        app.handle(Input::Skills(vec!["summarize".into()]));
        assert!(app.handle(Input::Key(Key::Enter)).is_empty());
        assert!(
            matches!(app.blocks.last(), Some(Block::Error { text }) if text == "there is no skill `nope`; there are: summarize")
        );
    }

    #[test]
    fn a_branch_is_followed_from_its_leaf_to_the_root() {
        let entry =
            |id: &str, parent: &str| v1::SessionEntry { id: id.into(), parent: parent.into(), ..Default::default() };
        let entries = [entry("a", "s-1"), entry("b", "a"), entry("c", "a"), entry("d", "b")];
        let ids = |branch: Vec<v1::SessionEntry>| branch.into_iter().map(|e| e.id).collect::<Vec<_>>();
        assert_eq!(ids(branch_of(&entries, None)), ["a", "b", "d"]);
        assert_eq!(ids(branch_of(&entries, Some("c"))), ["a", "c"]);
        assert!(branch_of(&entries, Some("nope")).is_empty());
    }

    #[test]
    fn a_session_log_is_shown_as_the_conversation_it_was() {
        use v1::session_entry::Entry;
        let message = |role: &str, content: &str, channel: v1::ChannelType| v1::SessionEntry {
            entry: Some(Entry::Message(v1::MessageEntry {
                role: role.into(),
                content: content.into(),
                channel: channel as i32,
                sender_id: "alice".into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let delegate = v1::SessionEntry {
            entry: Some(Entry::Delegate(v1::DelegateEntry {
                agent: v1::AgentRole::Coder as i32,
                task: "Write it\nin full".into(),
                result: "done".into(),
            })),
            ..Default::default()
        };
        let activity = |event: v1::orchestrator_event::Event| v1::SessionEntry {
            entry: Some(Entry::Activity(v1::ActivityEntry {
                after: String::new(),
                event: Some(v1::OrchestratorEvent { event: Some(event), ..Default::default() }),
            })),
            ..Default::default()
        };
        let settled = v1::ApprovalSettled { id: "a1".into(), decision: "once".into(), by: "Alice".into() };
        let sent = v1::OutboundMessage { content: "The report is ready.".into(), ..Default::default() };
        let entries = [
            message("user", "hello", v1::ChannelType::Slack),
            delegate,
            activity(v1::orchestrator_event::Event::ApprovalSettled(settled)),
            message("assistant", "hi", v1::ChannelType::Unspecified),
            activity(v1::orchestrator_event::Event::Message(sent)),
            message("system", "The turn was cancelled.", v1::ChannelType::Unspecified),
        ];
        assert_eq!(
            blocks_of(&entries),
            [
                Block::User { sender: "alice".into(), channel: Some("slack".into()), text: "hello".into() },
                Block::Activity { text: "→ coder: Write it".into() },
                Block::Activity { text: "· Allowed once, by Alice.".into() },
                Block::Assistant { text: "hi".into(), thinking: String::new() },
                Block::Assistant { text: "The report is ready.".into(), thinking: String::new() },
                Block::Info { text: "The turn was cancelled.".into() },
            ]
        );
    }
}
