//! `baaaht chat`: one message, its answer streamed to stdout.

use baaaht_proto::v1;

use crate::terminal::clean;
use crate::CliError;

pub(crate) async fn chat(
    client: &mut baaaht_proto::client::Client,
    socket: &std::path::Path,
    chat: Chat,
) -> Result<(), CliError> {
    use baaaht_gateway_kit::said::{said, Said};
    let env = |key: &str| std::env::var(key).ok();
    let in_group = chat.group.is_some();
    let context = crate::chat::context(chat.user, chat.group, env);
    // In a user's own conversation the sender is that user; --as names who writes in a group.
    let sender = match chat.sender {
        Some(sender) => sender,
        None if in_group => crate::chat::login(env),
        None => context.id.clone(),
    };
    let status = |status| CliError::from_status(status, socket);
    let session = if chat.new {
        let header = client
            .sessions
            .new_session(v1::NewSessionRequest { context: Some(context.clone()), title: String::new() })
            .await
            .map_err(status)?
            .into_inner();
        header.id
    } else {
        chat.session.unwrap_or_default()
    };
    let mut events = client
        .sessions
        .subscribe_events(v1::EventSubscription {
            context: Some(context.clone()),
            session_id: String::new(),
            channel: v1::ChannelType::Cli as i32,
            notifies: false,
        })
        .await
        .map_err(status)?
        .into_inner();
    // What was kept while no channel was there comes first.
    let inbox = client
        .sessions
        .list_inbox(v1::InboxRequest { context: Some(context.clone()), unread_only: true, mark_read: true })
        .await
        .map_err(status)?
        .into_inner();
    if !inbox.items.is_empty() {
        eprint!("{}", clean(&format!("while you were away:\n{}", crate::tasks::inbox_text(&inbox))));
    }
    let message = v1::UserMessage {
        context: Some(context),
        session_id: session,
        sender_id: sender,
        channel: v1::ChannelType::Cli as i32,
        content: chat.prompt,
        ..v1::UserMessage::default()
    };
    let sent = client.sessions.send_user_message(message).await.map_err(status)?.into_inner();
    // Ctrl-C from here on stops this message's turn rather than the client alone.
    let mut interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|error| CliError::Usage(format!("cannot take Ctrl-C: {error}")))?;
    // A turn already running in the session answers first: say so rather than wait silently.
    let transcript = v1::ReadSessionRequest { session_id: sent.session_id.clone(), leaf_entry_id: String::new() };
    if let Ok(transcript) = client.sessions.read_session(transcript).await {
        if transcript.get_ref().running_turns.iter().any(|turn| *turn != sent.turn_id) {
            eprintln!("waiting for the answer in progress in this session; Ctrl-C withdraws this message");
        }
    }
    let mut terminal =
        crate::chat::Terminal::new(&sent.session_id, &sent.turn_id, std::io::stdout(), std::io::stderr());
    // Something moves on a terminal until the first token: the model may take a while.
    let mut spinner = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(crate::chat::Spinner::default);
    let mut ticks = tokio::time::interval(std::time::Duration::from_millis(100));
    let mut deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(chat.wait);
    let mut stopping = false;
    let ending = loop {
        let next = tokio::select! {
            next = tokio::time::timeout_at(deadline, events.message()) => next,
            _ = ticks.tick(), if spinner.is_some() => {
                if let Some(spinner) = spinner.as_mut() {
                    spinner.tick(terminal.note());
                }
                continue;
            }
            _ = interrupts.recv() => {
                if stopping {
                    // A second Ctrl-C: gone at once (the turn was asked to stop already).
                    break Err(CliError::Interrupted { session: sent.session_id.clone() });
                }
                stopping = true;
                if let Some(spinner) = spinner.as_mut() {
                    spinner.clear(terminal.note());
                }
                eprintln!("\nstopping the turn (Ctrl-C again to leave at once)");
                let cancel = v1::CancelTurnRequest { session_id: sent.session_id.clone(), turn_id: sent.turn_id.clone() };
                if let Err(refused) = client.sessions.cancel_turn(cancel).await {
                    // It ended meanwhile: its answer is on its way.
                    eprintln!("{}", clean(refused.message()));
                }
                // Its end comes as an event; a daemon that never says is not waited on long.
                deadline = deadline.min(tokio::time::Instant::now() + std::time::Duration::from_secs(10));
                continue;
            }
        };
        let next = match next {
            Err(_elapsed) if stopping => break Err(CliError::Interrupted { session: sent.session_id.clone() }),
            next => next,
        };
        let next = next.map_err(|_elapsed| {
            CliError::TurnFailed(format!(
                "no reply within {} s; it will be in the session: baaaht sessions show {}",
                chat.wait, sent.session_id
            ))
        });
        let event = match next.and_then(|next| next.map_err(status)) {
            Ok(Some(event)) => event,
            Ok(None) => break Err(CliError::StreamEnded),
            Err(error) => break Err(error),
        };
        let Some(said) = said(&event) else { continue };
        match &said {
            Said::Notice(notice) => {
                eprint!("{}", clean(&crate::tasks::notice_text(notice)));
                continue;
            }
            Said::Approval(request) => {
                if let Some(spinner) = spinner.as_mut() {
                    spinner.clear(terminal.note());
                }
                eprint!("{}", crate::chat::approval_text(request));
                continue;
            }
            _ if !terminal.owns(&event) => continue,
            _ => {}
        }
        if let Some(spinner) = spinner.as_mut() {
            spinner.clear(terminal.note());
        }
        // The first words end the spinner for good.
        if matches!(said, Said::Words(_)) {
            spinner = None;
        }
        match terminal.take(&said) {
            Some(Ok(())) => break Ok(()),
            Some(Err(_)) if stopping => break Err(CliError::Interrupted { session: sent.session_id.clone() }),
            Some(Err(failed)) => break Err(CliError::TurnFailed(failed)),
            None => {}
        }
    };
    if let Some(spinner) = spinner.as_mut() {
        spinner.clear(terminal.note());
    }
    // After the answer, on a line of its own, where it does not mix with the text.
    eprintln!("(session {})", sent.session_id);
    ending
}

pub(crate) struct Chat {
    pub(crate) prompt: String,
    pub(crate) user: Option<String>,
    pub(crate) group: Option<String>,
    pub(crate) sender: Option<String>,
    pub(crate) session: Option<String>,
    pub(crate) new: bool,
    pub(crate) wait: u64,
}
