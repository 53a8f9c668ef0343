//! The `/` commands: read, completed, listed for /help.

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
pub(super) fn common_prefix(words: &[String]) -> String {
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
