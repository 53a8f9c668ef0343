//! `baaaht tui`'s loop: keys from the terminal (a thread reading crossterm's events), events
//! from the daemon (a task that follows the context and reconnects when the daemon goes), and
//! the actions the state machine asks for, each answered by an RPC.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use baaaht_gateway_kit::backoff::Backoff;
use baaaht_gateway_kit::watch::{watch, Flow, Lost, Watch};
use baaaht_proto::client::Client;
use baaaht_proto::v1;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseEventKind};
use tokio::sync::mpsc;

use super::state::{blocks_of, branch_of, Action, App, Block, Command, Input, Key, Pick, PickItem, Picker};
use super::theme::{Choice, Theme};
use crate::CliError;

/// What to attach to.
#[derive(Debug, Clone)]
pub struct Target {
    pub socket: PathBuf,
    pub context: v1::ContextRef,
    /// Who writes (the user, or `--as` in a group).
    pub sender: String,
    pub theme: Choice,
    /// The undo plan shown, waiting for `/undo yes`.
    pub undos: std::sync::Arc<baaaht_gateway_kit::undo::Shown>,
}

impl Target {
    fn label(&self) -> String {
        if self.context.r#type == v1::ContextType::Group as i32 {
            format!("group:{}", self.context.id)
        } else {
            format!("user:{}", self.context.id)
        }
    }

    fn filter(&self) -> v1::SessionFilter {
        let (user_id, group_id) = if self.context.r#type == v1::ContextType::Group as i32 {
            (String::new(), self.context.id.clone())
        } else {
            (self.context.id.clone(), String::new())
        };
        v1::SessionFilter { user_id, group_id, context_type: self.context.r#type, ..Default::default() }
    }
}

fn key_of(key: KeyEvent) -> Option<Key> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let control = key.modifiers.contains(KeyModifiers::CONTROL);
    Some(match key.code {
        KeyCode::Char('c') if control => Key::CtrlC,
        KeyCode::Char('j') if control => Key::NewLine,
        KeyCode::Char('t') if control => Key::CtrlT,
        KeyCode::Char('y') if control => Key::CtrlY,
        KeyCode::Char('a') if control => Key::Home,
        KeyCode::Char('e') if control => Key::End,
        KeyCode::Char(_) if control => return None,
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Enter if key.modifiers.intersects(KeyModifiers::SHIFT | KeyModifiers::ALT) => Key::NewLine,
        KeyCode::Enter => Key::Enter,
        KeyCode::Backspace => Key::Backspace,
        KeyCode::Left => Key::Left,
        KeyCode::Right => Key::Right,
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::Home => Key::Home,
        KeyCode::End => Key::End,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Tab => Key::Tab,
        KeyCode::Esc => Key::Esc,
        _ => return None,
    })
}

/// Reads the terminal's events on a thread of its own (crossterm's reader blocks).
fn read_keys(sender: mpsc::Sender<Input>) {
    std::thread::spawn(move || loop {
        let input = match event::read() {
            Ok(Event::Key(key)) => key_of(key).map(Input::Key),
            Ok(Event::Paste(text)) => Some(Input::Key(Key::Paste(text))),
            Ok(Event::Mouse(mouse)) => match mouse.kind {
                MouseEventKind::ScrollUp => Some(Input::Key(Key::ScrollUp)),
                MouseEventKind::ScrollDown => Some(Input::Key(Key::ScrollDown)),
                _ => None,
            },
            Ok(Event::Resize(..)) => Some(Input::Redraw),
            Ok(_) => None,
            Err(_closed) => return,
        };
        if let Some(input) = input {
            if sender.blocking_send(input).is_err() {
                return;
            }
        }
    });
}

/// The context's active session (as the daemon picks it: never a scheduled run's own), or a
/// new one.
async fn attach(client: &mut Client, target: &Target) -> Result<String, tonic::Status> {
    let sessions = client.sessions.list_sessions(target.filter()).await?.into_inner().sessions;
    if let Some(session) = sessions.iter().find(|session| session.status != "archived" && !session.scheduled_run) {
        return Ok(session.id.clone());
    }
    let request = v1::NewSessionRequest { context: Some(target.context.clone()), title: String::new() };
    Ok(client.sessions.new_session(request).await?.into_inner().id)
}

/// Session `id`'s entries: the branch ending at `leaf`, else the newest branch.
async fn branch(client: &mut Client, id: &str, leaf: Option<&str>) -> Result<Vec<v1::SessionEntry>, tonic::Status> {
    let all = read_all(client, id).await?;
    Ok(branch_of(&all, leaf))
}

/// Every entry of session `id`, in the order written.
async fn read_all(client: &mut Client, id: &str) -> Result<Vec<v1::SessionEntry>, tonic::Status> {
    let request = v1::ReadSessionRequest { session_id: id.into(), leaf_entry_id: String::new() };
    Ok(client.sessions.read_session(request).await?.into_inner().entries)
}

/// Follows the context on the daemon, reconnecting with a growing pause when it goes away.
async fn follow(target: Target, sender: mpsc::Sender<Input>) {
    let backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
    watch(&mut Screen { target, sender }, backoff).await;
}

/// The screen's side of the context's stream: once subscribed, the session attached and what
/// the screen shows of it (its branch, approvals waiting, the inbox, skills, its files' folder);
/// then each event; a lost stream shown as such.
struct Screen {
    target: Target,
    sender: mpsc::Sender<Input>,
}

impl Watch for Screen {
    async fn subscribe(&mut self) -> Result<tonic::Streaming<v1::OrchestratorEvent>, Lost> {
        let (target, sender) = (&self.target, &self.sender);
        let failed = |status: tonic::Status| Lost::Failed(status.message().to_string());
        let mut client = crate::connect(&target.socket).await.map_err(|error| Lost::Failed(error.to_string()))?;
        let session = attach(&mut client, target).await.map_err(failed)?;
        let subscription = v1::EventSubscription {
            context: Some(target.context.clone()),
            session_id: String::new(),
            channel: v1::ChannelType::Tui as i32,
            notifies: false,
        };
        let events = client.sessions.subscribe_events(subscription).await.map_err(failed)?.into_inner();
        let entries = branch(&mut client, &session, None).await;
        let history = entries.as_ref().map(|entries| blocks_of(entries));
        let waiting: Vec<v1::ApprovalRequest> = entries
            .as_ref()
            .map(|entries| baaaht_proto::transcript::waiting_approvals(entries).into_iter().cloned().collect())
            .unwrap_or_default();
        let inbox = v1::InboxRequest { context: Some(target.context.clone()), unread_only: true, mark_read: true };
        let items = client.sessions.list_inbox(inbox).await.map(|list| list.into_inner().items).unwrap_or_default();
        let manifest = v1::SkillManifestRequest { context: Some(target.context.clone()) };
        let skills = client.skills.get_skill_manifest(manifest).await.map(|m| m.into_inner().skills);
        let data_dir = client.system.get_status(v1::StatusRequest::default()).await.map(|s| s.into_inner().data_dir);
        // silent-ok: the screen is gone when these fail; the loop ends with it.
        drop(sender.send(Input::Connected { session: session.clone(), history: history.unwrap_or_default() }).await);
        if !items.is_empty() {
            drop(sender.send(Input::Inbox(items)).await);
        }
        if !waiting.is_empty() {
            drop(sender.send(Input::Waiting(waiting)).await);
        }
        if let Ok(skills) = skills {
            drop(sender.send(Input::Skills(skills.into_iter().map(|skill| skill.name).collect())).await);
        }
        let files = data_dir.ok().map(|dir| Path::new(&dir).join("sessions").join(&session).join("data"));
        drop(sender.send(Input::Files(files.filter(|folder| std::fs::read_dir(folder).is_ok()))).await);
        Ok(events)
    }

    async fn take(&mut self, event: v1::OrchestratorEvent) -> Flow {
        match self.sender.send(Input::Event(Box::new(event))).await {
            Ok(()) => Flow::Go,
            Err(_) => Flow::Stop,
        }
    }

    async fn lost(&mut self, lost: Lost) -> Flow {
        match self.sender.send(Input::Disconnected { reason: lost.reason() }).await {
            Ok(()) => Flow::Go,
            Err(_) => Flow::Stop,
        }
    }
}

/// The first line of the last message of `entries` from `role` ("" for any).
fn last_said(entries: &[v1::SessionEntry], role: &str) -> String {
    entries
        .iter()
        .rev()
        .find_map(|entry| match &entry.entry {
            Some(v1::session_entry::Entry::Message(m)) if role.is_empty() || m.role == role => {
                Some(m.content.lines().find(|line| !line.trim().is_empty()).unwrap_or_default().to_string())
            }
            _ => None,
        })
        .unwrap_or_default()
}

/// The last few messages of `entries`, for a picker's preview.
fn preview(entries: &[v1::SessionEntry]) -> String {
    let said: Vec<String> = entries
        .iter()
        .filter_map(|entry| match &entry.entry {
            Some(v1::session_entry::Entry::Message(m)) => {
                let first = m.content.lines().find(|line| !line.trim().is_empty()).unwrap_or_default();
                Some(format!("{}: {first}", if m.role == "user" { m.sender_id.as_str() } else { m.role.as_str() }))
            }
            _ => None,
        })
        .collect();
    let start = said.len().saturating_sub(4);
    if said.is_empty() {
        "(no messages yet)".into()
    } else {
        said[start..].join("\n")
    }
}

fn short(text: &str, at_most: usize) -> String {
    if text.chars().count() <= at_most {
        text.to_string()
    } else {
        format!("{}…", text.chars().take(at_most.saturating_sub(1)).collect::<String>())
    }
}

/// The context's sessions to browse, the unarchived first, newest activity first.
async fn sessions_picker(client: &mut Client, target: &Target, current: &str) -> Result<Picker, tonic::Status> {
    let mut sessions = client.sessions.list_sessions(target.filter()).await?.into_inner().sessions;
    sessions.sort_by(|a, b| {
        (a.status == "archived").cmp(&(b.status == "archived")).then(b.last_activity.cmp(&a.last_activity))
    });
    let mut items = vec![];
    for session in sessions.iter().take(50) {
        let entries = branch(client, &session.id, None).await.unwrap_or_default();
        let topic = if session.title.is_empty() { last_said(&entries, "user") } else { session.title.clone() };
        let when = crate::terminal::local_time(&session.last_activity);
        items.push(PickItem {
            label: format!("{} · {} · {when} · {}", session.id, session.status, short(&topic, 50)),
            depth: 0,
            preview: preview(&entries),
            pick: Pick::Session(session.id.clone()),
            current: session.id == current,
        });
    }
    Ok(Picker { title: "sessions".into(), items, selected: 0 })
}

/// The session tree around `current`: the session it was forked from up to the root, every
/// fork under it, and the branches inside the current session when it has several.
async fn tree_picker(client: &mut Client, target: &Target, current: &str) -> Result<Picker, tonic::Status> {
    let sessions = client.sessions.list_sessions(target.filter()).await?.into_inner().sessions;
    let parent_of = |id: &str| {
        sessions.iter().find(|s| s.id == id).map(|s| s.forked_from_session.clone()).filter(|p| !p.is_empty())
    };
    let mut root = current.to_string();
    let mut seen = vec![root.clone()];
    while let Some(parent) = parent_of(&root) {
        if seen.contains(&parent) || !sessions.iter().any(|s| s.id == parent) {
            break;
        }
        seen.push(parent.clone());
        root = parent;
    }
    let mut items = vec![];
    let mut stack = vec![(root, 0usize)];
    while let Some((id, depth)) = stack.pop() {
        let Some(session) = sessions.iter().find(|s| s.id == id) else { continue };
        let all = read_all(client, &id).await?;
        let newest = branch_of(&all, None);
        let how = if depth == 0 { "session".to_string() } else { "fork".to_string() };
        let topic = if session.title.is_empty() { last_said(&newest, "user") } else { session.title.clone() };
        items.push(PickItem {
            label: format!("{how} {id} · {} · {}", session.status, short(&topic, 50)),
            depth,
            preview: preview(&newest),
            pick: Pick::Session(id.clone()),
            current: id == current,
        });
        // Branches inside the session: every entry nothing hangs under is the end of one.
        let leaves: Vec<&v1::SessionEntry> =
            all.iter().filter(|entry| !all.iter().any(|other| other.parent == entry.id)).collect();
        if leaves.len() > 1 {
            let newest_leaf = all.last().map(|entry| entry.id.clone()).unwrap_or_default();
            for leaf in leaves {
                let entries = branch_of(&all, Some(&leaf.id));
                items.push(PickItem {
                    label: format!("branch · {}", short(&last_said(&entries, "user"), 60)),
                    depth: depth + 1,
                    preview: preview(&entries),
                    pick: Pick::Branch { session: id.clone(), leaf: leaf.id.clone() },
                    current: id == current && leaf.id == newest_leaf,
                });
            }
        }
        let mut forks: Vec<&v1::SessionHeader> = sessions.iter().filter(|s| s.forked_from_session == id).collect();
        forks.sort_by(|a, b| b.created.cmp(&a.created));
        stack.extend(forks.into_iter().map(|fork| (fork.id.clone(), depth + 1)));
    }
    let selected = items.iter().position(|item| item.current).unwrap_or(0);
    Ok(Picker { title: "session tree".into(), items, selected })
}

/// The models the gateway knows, as a picker's worth of text.
async fn models_text(client: &mut Client, current: &str) -> Result<String, tonic::Status> {
    let status = client.system.get_status(v1::StatusRequest::default()).await?.into_inner();
    let providers = status.llm.map(|llm| llm.providers).unwrap_or_default();
    let mut text =
        format!("this session's model: {}\n", if current.is_empty() { "the assistant's default" } else { current });
    if providers.is_empty() {
        text.push_str("no provider is ready; /status says why");
    } else {
        text.push_str(&format!(
            "providers ready: {}\nswitch with /model PROVIDER/MODEL, e.g. /model {}/…",
            providers.join(", "),
            providers[0]
        ));
    }
    Ok(text)
}

/// Writes the conversation to `path` as one self-contained HTML page (atomically).
fn export(path: &Path, title: &str, blocks: &[Block]) -> std::io::Result<()> {
    let page = super::export::page(title, blocks);
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(folder)?;
    file.write_all(page.as_bytes())?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|error| error.error)?;
    Ok(())
}

/// Carries out one action; what the daemon answered comes back as an input.
async fn act(target: &Target, session: Option<String>, action: Action) -> Option<Input> {
    let mut client = match crate::connect(&target.socket).await {
        Ok(client) => client,
        Err(error) => return Some(Input::Said(format!("not sent: {error}"))),
    };
    let said = |text: String| Some(Input::Said(text));
    let failed = |status: tonic::Status| Some(Input::Said(format!("the daemon refused: {}", status.message())));
    let session = session.unwrap_or_default();
    let switched = |client: &mut Client, id: String| {
        let mut client = client.clone();
        async move {
            let history = branch(&mut client, &id, None).await.map(|entries| blocks_of(&entries)).unwrap_or_default();
            Some(Input::Switched { session: id, history, leaf: None })
        }
    };
    match action {
        Action::Send { text, parent } => {
            let message = v1::UserMessage {
                context: Some(target.context.clone()),
                session_id: session,
                sender_id: target.sender.clone(),
                channel: v1::ChannelType::Tui as i32,
                content: text,
                parent_entry_id: parent.unwrap_or_default(),
                ..Default::default()
            };
            client.sessions.send_user_message(message).await.err().and_then(failed)
        }
        Action::Cancel { turn } => {
            match client.sessions.cancel_turn(v1::CancelTurnRequest { session_id: session, turn_id: turn }).await {
                Ok(_) => None,
                Err(status) => failed(status),
            }
        }
        Action::Answer { id, decision } => {
            match client.sessions.answer_approval(v1::ApprovalAnswer { id, decision }).await {
                Ok(_) => None,
                Err(status) => failed(status),
            }
        }
        Action::Copy(_) | Action::Quit => None,
        Action::Follow { session, leaf, text } => {
            let history = branch(&mut client, &session, Some(&leaf)).await;
            let history = history.map(|entries| blocks_of(&entries)).unwrap_or_default();
            Some(Input::Undone { session, history, text, leaf })
        }
        Action::Run(command) => match command {
            Command::New => {
                let request = v1::NewSessionRequest { context: Some(target.context.clone()), title: String::new() };
                match client.sessions.new_session(request).await {
                    Ok(header) => {
                        Some(Input::Switched { session: header.into_inner().id, history: vec![], leaf: None })
                    }
                    Err(status) => failed(status),
                }
            }
            Command::Resume(Some(id)) => {
                match client.sessions.resume_session(v1::SessionRef { session_id: id }).await {
                    Ok(header) => switched(&mut client, header.into_inner().id).await,
                    Err(status) => failed(status),
                }
            }
            Command::Resume(None) => match sessions_picker(&mut client, target, &session).await {
                Ok(picker) => Some(Input::Pick(picker)),
                Err(status) => failed(status),
            },
            Command::Tree => match tree_picker(&mut client, target, &session).await {
                Ok(picker) => Some(Input::Pick(picker)),
                Err(status) => failed(status),
            },
            Command::Branch { session: id, leaf } => {
                if let Err(status) = client.sessions.resume_session(v1::SessionRef { session_id: id.clone() }).await {
                    return failed(status);
                }
                match branch(&mut client, &id, Some(&leaf)).await {
                    Ok(entries) => {
                        Some(Input::Switched { session: id, history: blocks_of(&entries), leaf: Some(leaf) })
                    }
                    Err(status) => failed(status),
                }
            }
            Command::Undo(command) => {
                use baaaht_gateway_kit::undo;
                let context = Some(target.context.clone());
                let request = undo::request(&target.undos, "tui", command, &session, context);
                match client.sessions.undo(request).await {
                    Ok(plan) => {
                        let plan = plan.into_inner();
                        let text = undo::reply(&target.undos, "tui".into(), command, &plan);
                        if !plan.applied {
                            return said(text);
                        }
                        let history = branch(&mut client, &plan.session_id, Some(&plan.to_entry_id)).await;
                        let history = history.map(|entries| blocks_of(&entries)).unwrap_or_default();
                        Some(Input::Undone { session: plan.session_id, history, text, leaf: plan.to_entry_id })
                    }
                    Err(status) => failed(status),
                }
            }
            Command::Fork => {
                let request = v1::ForkSessionRequest { session_id: session, entry_id: String::new() };
                match client.sessions.fork_session(request).await {
                    Ok(header) => switched(&mut client, header.into_inner().id).await,
                    Err(status) => failed(status),
                }
            }
            Command::Sessions => match client.sessions.list_sessions(target.filter()).await {
                Ok(list) => said(crate::chat::sessions_text(&list.into_inner())),
                Err(status) => failed(status),
            },
            Command::Archive => match client.sessions.archive_session(v1::SessionRef { session_id: session }).await {
                Ok(_) => said("archived; /new starts another, /resume goes back to one".into()),
                Err(status) => failed(status),
            },
            Command::Compact => match client.sessions.compact_session(v1::SessionRef { session_id: session }).await {
                Ok(_) => said("compacted".into()),
                Err(status) => failed(status),
            },
            Command::Model(None) => {
                let sessions = client.sessions.list_sessions(target.filter()).await.map(|l| l.into_inner().sessions);
                let current = sessions.ok().and_then(|all| all.into_iter().find(|s| s.id == session)).map(|s| s.model);
                match models_text(&mut client, &current.unwrap_or_default()).await {
                    Ok(text) => said(text),
                    Err(status) => failed(status),
                }
            }
            Command::Model(Some(model)) => {
                match client.sessions.switch_model(v1::SwitchModelRequest { session_id: session, model }).await {
                    Ok(ack) => said(ack.into_inner().message),
                    Err(status) => failed(status),
                }
            }
            Command::Export(path) => {
                let entries = match branch(&mut client, &session, None).await {
                    Ok(entries) => entries,
                    Err(status) => return failed(status),
                };
                let path = PathBuf::from(path.unwrap_or_else(|| format!("baaaht-{session}.html")));
                let title = format!("baaaht · {} · {session}", target.label());
                match export(&path, &title, &blocks_of(&entries)) {
                    Ok(()) => {
                        let shown = std::fs::canonicalize(&path).unwrap_or(path);
                        said(format!("exported to {}", shown.display()))
                    }
                    Err(error) => said(format!("cannot write {}: {error}", path.display())),
                }
            }
            Command::Status => match client.system.get_status(v1::StatusRequest { containers: true }).await {
                Ok(status) => said(crate::status::to_text(&status.into_inner())),
                Err(status) => failed(status),
            },
            Command::Usage => {
                match client.admin.get_usage(v1::UsageRequest { context: Some(target.context.clone()) }).await {
                    Ok(report) => said(crate::people::usage_text(&report.into_inner(), false)),
                    Err(status) => failed(status),
                }
            }
            Command::Tasks => {
                let filter = target.filter();
                let filter =
                    v1::TaskFilter { user_id: filter.user_id, group_id: filter.group_id, ..Default::default() };
                match client.tasks.list_tasks(filter).await {
                    Ok(list) => said(crate::tasks::list_text(&list.into_inner())),
                    Err(status) => failed(status),
                }
            }
            Command::Search(words) => {
                let context = Some(target.context.clone());
                let memories =
                    v1::MemoryQuery { context: context.clone(), query: words.clone(), limit: 5, ..Default::default() };
                let said_before = v1::SessionQuery { context, query: words.clone(), limit: 8, ..Default::default() };
                let (memories, said_before) = match (
                    client.memory.search_memory(memories).await,
                    client.sessions.search_sessions(said_before).await,
                ) {
                    (Ok(memories), Ok(said_before)) => (memories.into_inner().entries, said_before.into_inner().hits),
                    (Err(status), _) | (_, Err(status)) => return failed(status),
                };
                let mut text = format!("Remembered, matching “{words}”:\n");
                if memories.is_empty() {
                    text.push_str("    nothing\n");
                }
                for entry in &memories {
                    text.push_str(&crate::commands::memory::entry_text(entry));
                }
                text.push_str("\nSaid in past sessions (/resume ID to open one):\n");
                if said_before.is_empty() {
                    text.push_str("    nothing\n");
                }
                for hit in &said_before {
                    text.push_str(&crate::commands::sessions::hit_text(hit));
                }
                said(text)
            }
            Command::Memory(review) => {
                use super::state::MemoryReview;
                let key = |key: String| v1::MemoryKey { context: Some(target.context.clone()), key, quarantined: true };
                let answered = match review {
                    MemoryReview::Confirm(name) => client.memory.confirm_memory(key(name)).await,
                    MemoryReview::Drop(name) => client.memory.delete_memory(key(name)).await,
                    MemoryReview::List => {
                        let query = v1::MemoryQuery {
                            context: Some(target.context.clone()),
                            limit: 200,
                            quarantined: true,
                            ..Default::default()
                        };
                        return match client.memory.search_memory(query).await {
                            Ok(list) => {
                                let entries = list.into_inner().entries;
                                let mut text = if entries.is_empty() {
                                    "Nothing waits for review.".to_string()
                                } else {
                                    "Written while reading content from outside; none is used until you confirm it \
                                     (/memory confirm KEY, /memory drop KEY):\n"
                                        .to_string()
                                };
                                for entry in &entries {
                                    text.push_str(&crate::commands::memory::entry_text(entry));
                                }
                                said(text)
                            }
                            Err(status) => failed(status),
                        };
                    }
                };
                match answered {
                    Ok(ack) => said(ack.into_inner().message),
                    Err(status) => failed(status),
                }
            }
            // Answered by the state machine or the loop itself.
            Command::Help | Command::Quit | Command::Copy(_) | Command::Skill { .. } | Command::Group(_) => None,
        },
    }
}

/// Puts `text` on the clipboard of the terminal the user sits at (OSC 52; tmux passes it on
/// with `set-clipboard on`, SSH carries it as any output).
fn copy(text: &str) {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(text);
    let mut out = std::io::stdout();
    // silent-ok: a terminal that cannot take it has no clipboard to fill.
    let _ = write!(out, "\x1b]52;c;{encoded}\x07").and_then(|()| out.flush());
}

/// The conversation as plain text, left in the terminal's scrollback when the TUI ends.
fn plain_transcript(app: &App, width: usize) -> String {
    let mut text = String::new();
    for line in super::view::transcript(app, width) {
        text.push_str(line.to_string().trim_end());
        text.push('\n');
    }
    text
}

/// Runs the TUI until the user leaves; the terminal is restored on every way out.
pub async fn run(target: Target) -> Result<(), CliError> {
    let theme = Theme::detect(target.theme, |key| std::env::var(key).ok());
    let home = target.clone();
    let mut target = target;
    let mut terminal = ratatui::init();
    // silent-ok: a terminal without mouse reporting scrolls with PageUp/PageDown.
    let _ = ratatui::crossterm::execute!(
        std::io::stdout(),
        ratatui::crossterm::event::EnableMouseCapture,
        ratatui::crossterm::event::EnableBracketedPaste
    );
    let (sender, mut inputs) = mpsc::channel::<Input>(1024);
    read_keys(sender.clone());
    let mut follower = tokio::spawn(follow(target.clone(), sender.clone()));
    let mut app = App::new(target.label());
    app.theme = theme;
    let mut signals = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .and_then(|term| Ok((term, tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?)))
        .map_err(|error| CliError::TurnFailed(format!("cannot watch for signals: {error}")))?;
    let outcome = loop {
        if let Err(error) = terminal.draw(|frame| super::view::draw(frame, &app)) {
            break Err(CliError::TurnFailed(format!("cannot draw: {error}")));
        }
        let input = tokio::select! {
            input = inputs.recv() => input,
            _ = signals.0.recv() => break Ok(()),
            _ = signals.1.recv() => break Ok(()),
        };
        let Some(input) = input else { break Ok(()) };
        // Whatever else is waiting is taken before the next frame: a fast stream draws once
        // per batch, not once per token.
        let mut batch = vec![input];
        while batch.len() < 512 {
            match inputs.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        let mut quit = false;
        for action in batch.into_iter().map(|input| app.handle(input)).collect::<Vec<_>>().into_iter().flatten() {
            match action {
                Action::Quit => quit = true,
                Action::Copy(text) => copy(&text),
                Action::Run(Command::Group(id)) => {
                    if id == "me" {
                        target = home.clone();
                    } else {
                        target.context = v1::ContextRef { r#type: v1::ContextType::Group as i32, id };
                        // In a group, the person at the terminal writes.
                        if home.context.r#type == v1::ContextType::User as i32 {
                            target.sender = home.context.id.clone();
                        }
                    }
                    follower.abort();
                    app.handle(Input::Context { label: target.label() });
                    follower = tokio::spawn(follow(target.clone(), sender.clone()));
                }
                action => {
                    let (target, session, sender) = (target.clone(), app.session.clone(), sender.clone());
                    tokio::spawn(async move {
                        if let Some(answer) = act(&target, session, action).await {
                            // silent-ok: the screen may be gone.
                            drop(sender.send(answer).await);
                        }
                    });
                }
            }
        }
        if quit {
            break Ok(());
        }
    };
    follower.abort();
    let width = terminal.size().map(|size| size.width as usize).unwrap_or(80);
    // silent-ok: restoring what was never enabled is harmless.
    let _ = ratatui::crossterm::execute!(
        std::io::stdout(),
        ratatui::crossterm::event::DisableMouseCapture,
        ratatui::crossterm::event::DisableBracketedPaste
    );
    ratatui::restore();
    if outcome.is_ok() && !app.blocks.is_empty() {
        print!("{}", plain_transcript(&app, width));
    }
    if let Some(session) = &app.session {
        println!("baaaht: left session {session}; `baaaht tui` comes back to it");
    }
    outcome
}
