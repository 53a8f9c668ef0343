//! `baaaht tui`'s loop: keys from the terminal (a thread reading crossterm's events), events
//! from the daemon (a task that follows the context and reconnects when the daemon goes), and
//! the actions the state machine asks for, each answered by an RPC.

use std::path::{Path, PathBuf};
use std::time::Duration;

use baaaht_proto::client::Client;
use baaaht_proto::v1;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use tokio::sync::mpsc;

use super::state::{Action, App, Command, Input, Key};
use crate::CliError;

/// What to attach to.
#[derive(Debug, Clone)]
pub struct Target {
    pub socket: PathBuf,
    pub context: v1::ContextRef,
    /// Who writes (the user, or `--as` in a group).
    pub sender: String,
}

fn key_of(key: KeyEvent) -> Option<Key> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let control = key.modifiers.contains(KeyModifiers::CONTROL);
    Some(match key.code {
        KeyCode::Char('c') if control => Key::CtrlC,
        KeyCode::Char('j') if control => Key::NewLine,
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Enter if key.modifiers.intersects(KeyModifiers::SHIFT | KeyModifiers::ALT) => Key::NewLine,
        KeyCode::Enter => Key::Enter,
        KeyCode::Backspace => Key::Backspace,
        KeyCode::Left => Key::Left,
        KeyCode::Right => Key::Right,
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Tab => Key::Char(' '),
        _ => return None,
    })
}

/// Reads the terminal's events on a thread of its own (crossterm's reader blocks).
fn read_keys(sender: mpsc::Sender<Input>) {
    std::thread::spawn(move || loop {
        let input = match event::read() {
            Ok(Event::Key(key)) => key_of(key).map(Input::Key),
            Ok(Event::Paste(text)) => Some(Input::Key(Key::Paste(text))),
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

/// The context's active session, or a new one.
async fn attach(client: &mut Client, context: &v1::ContextRef) -> Result<String, tonic::Status> {
    let (user_id, group_id) = if context.r#type == v1::ContextType::Group as i32 {
        (String::new(), context.id.clone())
    } else {
        (context.id.clone(), String::new())
    };
    let filter = v1::SessionFilter { user_id, group_id, context_type: context.r#type, ..Default::default() };
    let sessions = client.sessions.list_sessions(filter).await?.into_inner().sessions;
    if let Some(session) = sessions.iter().find(|session| session.status != "archived") {
        return Ok(session.id.clone());
    }
    let request = v1::NewSessionRequest { context: Some(context.clone()), title: String::new() };
    Ok(client.sessions.new_session(request).await?.into_inner().id)
}

/// Follows the context on the daemon, reconnecting with a growing pause when it goes away.
async fn follow(target: Target, sender: mpsc::Sender<Input>) {
    let mut pause = Duration::from_millis(250);
    loop {
        let followed = async {
            let mut client = crate::connect(&target.socket).await.map_err(|error| error.to_string())?;
            let session = attach(&mut client, &target.context).await.map_err(|status| status.message().to_string())?;
            let subscription = v1::EventSubscription {
                context: Some(target.context.clone()),
                session_id: String::new(),
                channel: v1::ChannelType::Tui as i32,
            };
            let mut events = client
                .sessions
                .subscribe_events(subscription)
                .await
                .map_err(|status| status.message().to_string())?
                .into_inner();
            let inbox = v1::InboxRequest { context: Some(target.context.clone()), unread_only: true, mark_read: true };
            let items = client.sessions.list_inbox(inbox).await.map(|list| list.into_inner().items).unwrap_or_default();
            // silent-ok: the screen is gone when these fail; the loop ends with it.
            drop(sender.send(Input::Connected { session }).await);
            if !items.is_empty() {
                drop(sender.send(Input::Inbox(items)).await);
            }
            loop {
                match events.message().await {
                    Ok(Some(event)) => {
                        if sender.send(Input::Event(Box::new(event))).await.is_err() {
                            return Ok(());
                        }
                    }
                    Ok(None) => return Err("the daemon closed the stream".to_string()),
                    Err(status) => return Err(status.message().to_string()),
                }
            }
        }
        .await;
        match followed {
            Ok(()) => return,
            Err(reason) => {
                if sender.send(Input::Disconnected { reason }).await.is_err() {
                    return;
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// Carries out one action; what the daemon answered comes back as an input.
async fn act(socket: &Path, target: &Target, session: Option<String>, action: Action) -> Option<Input> {
    let mut client = match crate::connect(socket).await {
        Ok(client) => client,
        Err(error) => return Some(Input::Said(format!("not sent: {error}"))),
    };
    let said = |text: String| Some(Input::Said(text));
    let failed = |status: tonic::Status| Some(Input::Said(format!("the daemon refused: {}", status.message())));
    let session = session.unwrap_or_default();
    match action {
        Action::Send(content) => {
            let message = v1::UserMessage {
                context: Some(target.context.clone()),
                session_id: session,
                sender_id: target.sender.clone(),
                channel: v1::ChannelType::Tui as i32,
                content,
                ..Default::default()
            };
            client.sessions.send_user_message(message).await.err().and_then(failed)
        }
        Action::Cancel { .. } => said("a turn cannot be cancelled yet; it goes on and its reply lands here".into()),
        Action::Quit => None,
        Action::Run(command) => match command {
            Command::New => {
                let request = v1::NewSessionRequest { context: Some(target.context.clone()), title: String::new() };
                match client.sessions.new_session(request).await {
                    Ok(header) => Some(Input::Switched { session: header.into_inner().id }),
                    Err(status) => failed(status),
                }
            }
            Command::Resume(id) => match client.sessions.resume_session(v1::SessionRef { session_id: id }).await {
                Ok(header) => Some(Input::Switched { session: header.into_inner().id }),
                Err(status) => failed(status),
            },
            Command::Fork => {
                let request = v1::ForkSessionRequest { session_id: session, entry_id: String::new() };
                match client.sessions.fork_session(request).await {
                    Ok(header) => Some(Input::Switched { session: header.into_inner().id }),
                    Err(status) => failed(status),
                }
            }
            Command::Sessions => {
                let (user_id, group_id) = if target.context.r#type == v1::ContextType::Group as i32 {
                    (String::new(), target.context.id.clone())
                } else {
                    (target.context.id.clone(), String::new())
                };
                let filter =
                    v1::SessionFilter { user_id, group_id, context_type: target.context.r#type, ..Default::default() };
                match client.sessions.list_sessions(filter).await {
                    Ok(list) => said(crate::chat::sessions_text(&list.into_inner())),
                    Err(status) => failed(status),
                }
            }
            Command::Archive => match client.sessions.archive_session(v1::SessionRef { session_id: session }).await {
                Ok(_) => said("archived".into()),
                Err(status) => failed(status),
            },
            Command::Compact => match client.sessions.compact_session(v1::SessionRef { session_id: session }).await {
                Ok(_) => said("compacted".into()),
                Err(status) => failed(status),
            },
            Command::Model(model) => {
                match client.sessions.switch_model(v1::SwitchModelRequest { session_id: session, model }).await {
                    Ok(ack) => said(ack.into_inner().message),
                    Err(status) => failed(status),
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
                let (user_id, group_id) = if target.context.r#type == v1::ContextType::Group as i32 {
                    (String::new(), target.context.id.clone())
                } else {
                    (target.context.id.clone(), String::new())
                };
                let filter = v1::TaskFilter { user_id, group_id, ..Default::default() };
                match client.tasks.list_tasks(filter).await {
                    Ok(list) => said(crate::tasks::list_text(&list.into_inner())),
                    Err(status) => failed(status),
                }
            }
            // Answered by the state machine itself.
            Command::Help | Command::Quit => None,
        },
    }
}

/// Runs the TUI until the user leaves; the terminal is restored on every way out.
pub async fn run(target: Target) -> Result<(), CliError> {
    let mut terminal = ratatui::init();
    let (sender, mut inputs) = mpsc::channel::<Input>(1024);
    read_keys(sender.clone());
    let follower = tokio::spawn(follow(target.clone(), sender.clone()));
    let label = if target.context.r#type == v1::ContextType::Group as i32 {
        format!("group:{}", target.context.id)
    } else {
        format!("user:{}", target.context.id)
    };
    let mut app = App::new(label);
    let outcome = loop {
        if let Err(error) = terminal.draw(|frame| super::view::draw(frame, &app)) {
            break Err(CliError::TurnFailed(format!("cannot draw: {error}")));
        }
        let Some(input) = inputs.recv().await else { break Ok(()) };
        let mut quit = false;
        for action in app.handle(input) {
            if action == Action::Quit {
                quit = true;
                continue;
            }
            let (socket, target, session, sender) =
                (target.socket.clone(), target.clone(), app.session.clone(), sender.clone());
            tokio::spawn(async move {
                if let Some(answer) = act(&socket, &target, session, action).await {
                    // silent-ok: the screen may be gone.
                    drop(sender.send(answer).await);
                }
            });
        }
        if quit {
            break Ok(());
        }
    };
    follower.abort();
    ratatui::restore();
    outcome
}
