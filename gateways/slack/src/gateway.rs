//! The gateway: Slack's Socket Mode in, the daemon's turns out, answers streamed into the
//! thread of the message that asked.
//!
//! Each delivery is acknowledged at once and processed after (Slack wants the ack within 3 s);
//! a delivery seen before — a retry, or the same event after a reconnect — is dropped by its
//! event id. A DM is the sender's own conversation; a channel's is its group's (made on first
//! use by the daemon). The answer appears as one message updated as it is written (at most
//! once a second, within Slack's rate limits), with a status line for delegations and tools,
//! and is cut into more messages past Slack's limit.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baaaht_proto::client::Client;
use baaaht_proto::v1;
use slack_morphism::prelude::*;

use crate::egress::Egress;
use crate::files::Files;
use crate::mrkdwn;
use crate::route::{route, Route, Seen, Threads, Trigger};

/// How often the answer being written is updated in Slack.
const UPDATE_EVERY: Duration = Duration::from_millis(1000);
/// What a message shows before the answer's first words.
const PLACEHOLDER: &str = "_…_";
/// What a Slack user reads of a failure inside baaaht (its detail is in the logs).
const INTERNAL: &str = "Something went wrong on the assistant's side; try again.";
/// The most text one streaming chunk carries (Slack takes 12,000 characters per call).
const STREAM_CHUNK_LIMIT: usize = 10_000;
/// The size of each piece of a file sent to the daemon.
const UPLOAD_CHUNK: usize = 64 * 1024;
/// How long a turn may take before the gateway stops following it.
const TURN_LIMIT: Duration = Duration::from_secs(900);

type Connector = SlackClientHyperConnector<hyper_rustls::HttpsConnector<Egress>>;

/// What the gateway knows for its whole life.
pub struct Gateway {
    pub daemon: Client,
    pub slack: Arc<SlackClient<Connector>>,
    pub bot_token: SlackApiToken,
    pub team: String,
    pub bot_user: String,
    pub trigger: Trigger,
    files: Files,
    streaming: Streaming,
    seen: Mutex<Seen>,
    threads: Mutex<Threads>,
    /// Slack users' display names, by user id.
    names: Mutex<std::collections::HashMap<String, String>>,
    /// The approval requests posted, by id: where their message is (`crate::approvals`).
    pub(crate) asked: Mutex<std::collections::HashMap<String, (SlackChannelId, SlackTs, Instant)>>,
}

/// The credentials the events come in with: the app token (Socket Mode) and the signing
/// secret (the Events API over HTTP); either may be empty when that way is not used.
pub struct Listening {
    pub app_token: SlackApiToken,
    pub signing_secret: String,
}

/// What a Slack user may read of the daemon's refusal: its sentence when it is about what they
/// asked (a budget, a permission, a bad request); a plain sentence for anything internal, whose
/// text stays in the log (DESIGN §9.2: no host path or internal error text reaches Slack).
pub(crate) fn for_users(status: &tonic::Status) -> String {
    use tonic::Code;
    match status.code() {
        Code::PermissionDenied
        | Code::ResourceExhausted
        | Code::FailedPrecondition
        | Code::InvalidArgument
        | Code::NotFound => status.message().to_string(),
        Code::Unavailable | Code::DeadlineExceeded => {
            "The assistant is not reachable right now; try again in a minute.".into()
        }
        _ => {
            tracing::warn!(code = ?status.code(), message = %status.message(), "the daemon failed a Slack turn");
            INTERNAL.into()
        }
    }
}

/// Runs a Web API call; a 429 is waited out (its Retry-After, at most a minute) and the call
/// made again, up to 5 times. slack-morphism's own rate controller is not used: its tier
/// estimates are per workspace and held every channel to one message a second
/// (`baaaht-bench slack`: 1 event/s with 20 channels, 104 without).
pub async fn patiently<T, F, Fut>(what: &str, mut call: F) -> Result<T, slack_morphism::errors::SlackClientError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, slack_morphism::errors::SlackClientError>>,
{
    let mut attempt = 0;
    loop {
        match call().await {
            Err(slack_morphism::errors::SlackClientError::RateLimitError(limited)) if attempt < 5 => {
                attempt += 1;
                let wait = limited.retry_after.unwrap_or(Duration::from_secs(1)).min(Duration::from_secs(60));
                tracing::info!(what, wait_ms = wait.as_millis() as u64, "Slack asks to wait");
                tokio::time::sleep(wait).await;
            }
            other => return other,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("the daemon: {0}")]
    Daemon(String),
    #[error("Slack: {0}")]
    Slack(String),
}

/// A Slack Web API client for `api_url` (https, or plain http for a local test workspace),
/// reached through `egress`.
pub fn slack_client(api_url: &str, egress: Egress) -> Result<Arc<SlackClient<Connector>>, GatewayError> {
    let https = crate::egress::https(egress).map_err(GatewayError::Slack)?;
    let connector = SlackClientHyperConnector::with_connector(https)
        .with_slack_api_url(api_url.trim_end_matches('/'))
        // Slack's own 429s (with Retry-After) are waited out and retried; the gateway paces its
        // updates per message itself. slack-morphism's tier estimates are not applied: they are
        // per workspace and would hold every channel to one message a second.
        ;
    Ok(Arc::new(SlackClient::new(connector)))
}

impl Gateway {
    /// Asks the daemon for the gateway's Slack tokens and Slack who the bot is.
    pub async fn new(
        mut daemon: Client,
        api_url: &str,
        egress: Egress,
        trigger: Trigger,
        max_file_bytes: u64,
    ) -> Result<(Gateway, Listening), GatewayError> {
        let files = Files::new(api_url, egress.clone(), max_file_bytes).map_err(GatewayError::Slack)?;
        let secrets = daemon
            .gateways
            .get_gateway_secrets(v1::GatewaySecretsRequest {})
            .await
            .map_err(|status| GatewayError::Daemon(status.message().to_string()))?
            .into_inner()
            .secrets;
        let token = |key: &str| secrets.get(key).cloned().unwrap_or_default();
        let bot_token = SlackApiToken::new(SlackApiTokenValue::new(token("bot_token")));
        let listening = Listening {
            app_token: SlackApiToken::new(SlackApiTokenValue::new(token("app_token"))),
            signing_secret: token("signing_secret"),
        };
        let slack = slack_client(api_url, egress)?;
        let me = slack
            .open_session(&bot_token)
            .auth_test()
            .await
            .map_err(|error| GatewayError::Slack(format!("auth.test with the bot token failed: {error}")))?;
        tracing::info!(team = %me.team_id, bot = %me.user_id, "signed in to Slack");
        let gateway = Gateway {
            daemon,
            slack,
            bot_token,
            team: me.team_id.to_string(),
            bot_user: me.user_id.to_string(),
            trigger,
            files,
            streaming: Streaming::default(),
            seen: Mutex::new(Seen::new(Duration::from_secs(15 * 60), 10_000)),
            threads: Mutex::new(Threads::default()),
            names: Mutex::default(),
            asked: Mutex::default(),
        };
        Ok((gateway, listening))
    }

    /// Takes one delivery: the route of a new event, or none (seen before, or not for the bot).
    pub fn take(&self, event_id: &str, event: &serde_json::Value) -> Option<Route> {
        if !self.seen.lock().unwrap_or_else(PoisonError::into_inner).first(event_id, Instant::now()) {
            tracing::info!(event_id, "a delivery seen before is dropped");
            return None;
        }
        let threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        let routed = route(event, &self.team, &self.bot_user, &self.trigger, &threads);
        if routed.is_none() {
            tracing::debug!(event_id, kind = event["type"].as_str().unwrap_or_default(), "not for the bot");
        }
        routed
    }

    /// Answers `route`: the turn in its context, streamed into its thread.
    pub async fn answer(&self, route: Route) {
        let channel = SlackChannelId::new(route.channel.clone());
        let thread = route.thread_ts.clone().map(SlackTs::new);
        if let Err(error) = self.run_turn(&route, &channel, thread.clone()).await {
            tracing::warn!(channel = %route.channel, error = %error, "a turn from Slack failed");
            let text = match error {
                GatewayError::Daemon(sentence) => format!(":warning: {sentence}"),
                GatewayError::Slack(_) => ":warning: Slack did not take the answer; try again.".into(),
            };
            let content = SlackMessageContent::new().with_text(text);
            let request = SlackApiChatPostMessageRequest::new(channel, content).opt_thread_ts(thread);
            if let Err(error) = self.slack.open_session(&self.bot_token).chat_post_message(&request).await {
                tracing::warn!(%error, "cannot tell the Slack user what went wrong");
            }
        }
    }

    fn as_user<T>(&self, route: &Route, message: T) -> tonic::Request<T> {
        self.as_identity(&route.identity, &route.user, message)
    }

    /// `message` on behalf of the Slack user `user`, whose channel identity is `identity`.
    pub(crate) fn as_identity<T>(&self, identity: &str, user: &str, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Ok(value) = identity.parse() {
            request.metadata_mut().insert(baaaht_proto::USER_HEADER, value);
        }
        let name = self.names.lock().unwrap_or_else(PoisonError::into_inner).get(user).cloned();
        if let Some(Ok(value)) = name.map(|name| tonic::metadata::MetadataValue::try_from(name.as_str())) {
            request.metadata_mut().insert(baaaht_proto::USER_NAME_HEADER, value);
        }
        request
    }

    /// Learns the Slack user's display name once (users.info), so the daemon names the user
    /// as Slack does.
    async fn learn_name(&self, user: &str) {
        if self.names.lock().unwrap_or_else(PoisonError::into_inner).contains_key(user) {
            return;
        }
        let request = SlackApiUsersInfoRequest::new(SlackUserId::new(user.to_string()));
        match self.slack.open_session(&self.bot_token).users_info(&request).await {
            Ok(found) => {
                let (display, real) = match found.user.profile {
                    Some(profile) => (profile.display_name, profile.real_name),
                    None => (None, None),
                };
                let name = [display, real, found.user.name]
                    .into_iter()
                    .flatten()
                    .find(|name| !name.trim().is_empty())
                    .unwrap_or_else(|| user.to_string());
                // Only what a header carries (visible ASCII and spaces).
                let name: String = name.chars().filter(|c| c.is_ascii_graphic() || *c == ' ').take(80).collect();
                self.names.lock().unwrap_or_else(PoisonError::into_inner).insert(user.to_string(), name);
            }
            Err(error) => tracing::warn!(user, %error, "users.info failed; the user is named by id"),
        }
    }

    async fn context_of(&self, route: &Route) -> Result<v1::ContextRef, GatewayError> {
        self.learn_name(&route.user).await;
        let mut daemon = self.daemon.clone();
        let sentence = |status: tonic::Status| GatewayError::Daemon(for_users(&status));
        if route.shared {
            let request = v1::EnsureChannelGroupRequest { channel: route.channel.clone(), name: String::new() };
            let group = daemon.gateways.ensure_channel_group(self.as_user(route, request)).await.map_err(sentence)?;
            Ok(v1::ContextRef { r#type: v1::ContextType::Group as i32, id: group.into_inner().id })
        } else {
            let me = daemon.gateways.who_am_i(self.as_user(route, v1::WhoAmIRequest {})).await.map_err(sentence)?;
            Ok(v1::ContextRef { r#type: v1::ContextType::User as i32, id: me.into_inner().id })
        }
    }

    /// Downloads one shared file and stores it in the session's uploads (the context's active
    /// session when `session_id` is empty); returns the session and the attachment.
    async fn share(
        &self,
        route: &Route,
        context: &v1::ContextRef,
        session_id: &str,
        file: &serde_json::Value,
    ) -> Result<(String, v1::Attachment), GatewayError> {
        let token = self.bot_token.token_value.0.clone();
        let downloaded = self.files.download(file, &token).await.map_err(GatewayError::Daemon)?;
        let start = v1::UploadStart {
            context: Some(context.clone()),
            session_id: session_id.to_string(),
            filename: downloaded.name,
            mime_type: downloaded.mime_type,
            sender_id: route.identity.clone(),
            size_bytes: downloaded.bytes.len() as u64,
        };
        let chunks: Vec<v1::UploadChunk> = std::iter::once(v1::upload_chunk::Part::Start(start))
            .chain(downloaded.bytes.chunks(UPLOAD_CHUNK).map(|chunk| v1::upload_chunk::Part::Data(chunk.to_vec())))
            .map(|part| v1::UploadChunk { part: Some(part) })
            .collect();
        let mut daemon = self.daemon.clone();
        let stored = daemon
            .sessions
            .upload_file(self.as_user(route, tokio_stream::iter(chunks)))
            .await
            .map_err(|status| GatewayError::Daemon(for_users(&status)))?
            .into_inner();
        let attachment = stored.attachment.ok_or_else(|| GatewayError::Daemon("The file was not stored.".into()))?;
        tracing::info!(session = %stored.session_id, path = %attachment.path, bytes = attachment.size_bytes, "a shared file is in the session's uploads");
        Ok((stored.session_id, attachment))
    }

    async fn run_turn(
        &self,
        route: &Route,
        channel: &SlackChannelId,
        thread: Option<SlackTs>,
    ) -> Result<(), GatewayError> {
        let sentence = |status: tonic::Status| GatewayError::Daemon(for_users(&status));
        let context = self.context_of(route).await?;
        let mut daemon = self.daemon.clone();
        // Shared files go first into the session's uploads; the message names them.
        let (mut session_id, mut attachments) = (String::new(), vec![]);
        for file in &route.files {
            let (session, attachment) = self.share(route, &context, &session_id, file).await?;
            session_id = session;
            attachments.push(attachment);
        }
        let subscription = v1::EventSubscription {
            context: Some(context.clone()),
            session_id: String::new(),
            channel: v1::ChannelType::Slack as i32,
        };
        let mut events =
            daemon.sessions.subscribe_events(self.as_user(route, subscription)).await.map_err(sentence)?.into_inner();
        let message = v1::UserMessage {
            context: Some(context),
            sender_id: route.identity.clone(),
            channel: v1::ChannelType::Slack as i32,
            content: route.text.clone(),
            session_id,
            attachments,
            ..v1::UserMessage::default()
        };
        // The answer's message goes up while the daemon takes the message: its first words never
        // wait behind it.
        let (sent, output) = tokio::join!(
            daemon.sessions.send_user_message(self.as_user(route, message)),
            self.open_answer(route, channel, thread.as_ref())
        );
        let mut output = output?;
        let sent = match sent {
            Ok(sent) => sent.into_inner(),
            Err(status) => {
                // The answer's message is up already: it says what went wrong.
                let trouble = format!(":warning: {}", for_users(&status));
                return self.close_answer(output, &Writing::default(), Some(trouble), route, channel, thread).await;
            }
        };
        if let Some(thread) = &route.thread_ts {
            self.threads.lock().unwrap_or_else(PoisonError::into_inner).answered(&route.channel, thread);
        }
        let mut writing = Writing::default();
        // The first words show as soon as they come; then at most one update a second.
        let mut last_update = Instant::now().checked_sub(UPDATE_EVERY).unwrap_or_else(Instant::now);
        let deadline = tokio::time::Instant::now() + TURN_LIMIT;
        let trouble = loop {
            let next = tokio::time::timeout(UPDATE_EVERY, events.message());
            let event = match tokio::time::timeout_at(deadline, next).await {
                Err(_) => {
                    break Some(format!(
                        ":hourglass: No answer after {} minutes; the gateway stopped waiting. Ask again, or read the \
                         conversation in another baaaht client later.",
                        TURN_LIMIT.as_secs() / 60
                    ))
                }
                Ok(Err(_)) => None,
                Ok(Ok(Ok(Some(event)))) => Some(event),
                Ok(Ok(Ok(None))) | Ok(Ok(Err(_))) => {
                    break Some(":warning: Lost the daemon while answering; try again.".to_string())
                }
            };
            // A connection waiting for approval, whichever turn asked: buttons in this thread.
            if let Some(asked) = event.as_ref().and_then(|event| event.event.as_ref()) {
                self.approval_event(asked, channel, thread.as_ref()).await;
            }
            if let Some(event) = event.filter(|event| event.turn_id == sent.turn_id) {
                use v1::orchestrator_event::Event;
                match event.event {
                    Some(Event::TextDelta(delta)) => writing.text.push_str(&delta.text),
                    Some(Event::Delegation(delegation)) => {
                        writing.status = format!("{} {}", agent_name(delegation.agent), delegation.state);
                    }
                    Some(Event::Tool(tool)) => {
                        writing.status = format!("{} {} ({} ms)", tool.tool, tool.state, tool.duration_ms);
                    }
                    Some(Event::Reply(reply)) => {
                        writing.text = reply.content;
                        break None;
                    }
                    Some(Event::Error(error)) if error.for_users => break Some(format!(":warning: {}", error.message)),
                    Some(Event::Error(error)) => {
                        tracing::warn!(message = %error.message, "the turn failed");
                        break Some(format!(":warning: {INTERNAL}"));
                    }
                    _ => {}
                }
            }
            // The throttle counts from an update sent, so the first words go at once.
            if last_update.elapsed() >= UPDATE_EVERY {
                match self.show(&mut output, &mut writing, channel).await {
                    Ok(true) => last_update = Instant::now(),
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(%error, "Slack refused an update; the answer is written when it is done");
                        last_update = Instant::now();
                    }
                }
            }
        };
        self.close_answer(output, &writing, trouble, route, channel, thread).await
    }

    /// The answer's message: a stream in a thread when the workspace has Slack's streaming
    /// API, else a placeholder message updated as the answer is written.
    async fn open_answer(
        &self,
        route: &Route,
        channel: &SlackChannelId,
        thread: Option<&SlackTs>,
    ) -> Result<Output, GatewayError> {
        let session = self.slack.open_session(&self.bot_token);
        if let Some(thread) = thread.filter(|_| self.streaming.usable()) {
            let start = SlackApiChatStartStreamRequest::new(channel.clone())
                .with_thread_ts(thread.clone())
                .with_recipient_user_id(SlackUserId::new(route.user.clone()))
                .with_recipient_team_id(SlackTeamId::new(self.team.clone()));
            match patiently("chat.startStream", || session.chat_start_stream(&start)).await {
                Ok(started) => {
                    return Ok(Output::Stream { ts: started.ts, streamed: String::new(), status: String::new() })
                }
                Err(error) => {
                    // Not offered here (an app without Slack's AI features, an older workspace).
                    tracing::info!(%error, "chat.startStream refused; answers are updated messages instead");
                    self.streaming.refused();
                }
            }
        }
        let placeholder = SlackMessageContent::new().with_text(PLACEHOLDER.into());
        let request = SlackApiChatPostMessageRequest::new(channel.clone(), placeholder).opt_thread_ts(thread.cloned());
        let posted =
            patiently("chat.postMessage", || session.chat_post_message(&request)).await.map_err(slack_error)?;
        Ok(Output::Update { ts: posted.ts, shown: PLACEHOLDER.into() })
    }

    /// Shows what is new of the answer; whether anything was sent.
    async fn show(
        &self,
        output: &mut Output,
        writing: &mut Writing,
        channel: &SlackChannelId,
    ) -> Result<bool, GatewayError> {
        let session = self.slack.open_session(&self.bot_token);
        match output {
            Output::Update { ts, shown } => {
                let live = writing.live();
                if live == *shown {
                    return Ok(false);
                }
                let content = SlackMessageContent::new().with_text(live.clone());
                let update = SlackApiChatUpdateRequest::new(channel.clone(), content, ts.clone());
                patiently("chat.update", || session.chat_update(&update)).await.map_err(slack_error)?;
                *shown = live;
            }
            Output::Stream { ts, streamed, status } => {
                let mut chunks = vec![];
                if writing.status != *status {
                    chunks.push(status_chunk(&writing.status, SlackTaskCardStatus::InProgress));
                    status.clone_from(&writing.status);
                }
                // Deltas only add to the text; the reply replaces it only at the end.
                let new = writing.text.strip_prefix(streamed.as_str()).unwrap_or_default().to_string();
                if new.is_empty() && chunks.is_empty() {
                    return Ok(false);
                }
                self.append(ts, channel, chunks, &new).await?;
                streamed.clone_from(&writing.text);
            }
        }
        Ok(true)
    }

    /// Appends `chunks` and the markdown `text` to the stream `ts`, in as many calls as
    /// Slack's limit per call takes.
    async fn append(
        &self,
        ts: &SlackTs,
        channel: &SlackChannelId,
        mut chunks: Vec<SlackStreamChunk>,
        text: &str,
    ) -> Result<(), GatewayError> {
        let session = self.slack.open_session(&self.bot_token);
        let mut parts = pieces(text, STREAM_CHUNK_LIMIT).into_iter().peekable();
        loop {
            if let Some(part) = parts.next() {
                chunks.push(SlackStreamChunk::MarkdownText { text: part });
            }
            if chunks.is_empty() {
                return Ok(());
            }
            let append = SlackApiChatAppendStreamRequest::new(channel.clone(), ts.clone())
                .with_chunks(std::mem::take(&mut chunks));
            patiently("chat.appendStream", || session.chat_append_stream(&append)).await.map_err(slack_error)?;
            if parts.peek().is_none() {
                return Ok(());
            }
        }
    }

    /// Writes the whole answer (and `trouble`, when it did not finish): the stream stopped with
    /// the rest, or the message updated with the first part and the rest in the thread.
    async fn close_answer(
        &self,
        output: Output,
        writing: &Writing,
        trouble: Option<String>,
        route: &Route,
        channel: &SlackChannelId,
        thread: Option<SlackTs>,
    ) -> Result<(), GatewayError> {
        let session = self.slack.open_session(&self.bot_token);
        match output {
            Output::Stream { ts, streamed, status } => {
                // The reply's text is the whole answer; what was streamed is its beginning.
                let mut rest = match writing.text.strip_prefix(streamed.as_str()) {
                    Some(rest) => rest.to_string(),
                    None => {
                        tracing::warn!("the reply differs from the text streamed; the stream keeps what it showed");
                        String::new()
                    }
                };
                if let Some(trouble) = &trouble {
                    rest.push_str(&format!("\n\n{trouble}"));
                }
                if !rest.is_empty() {
                    self.append(&ts, channel, vec![], &rest).await?;
                }
                let done = (!status.is_empty()).then(|| vec![status_chunk(&status, SlackTaskCardStatus::Complete)]);
                let stop = SlackApiChatStopStreamRequest::new(channel.clone(), ts, SlackMessageContent::new())
                    .opt_chunks(done);
                patiently("chat.stopStream", || session.chat_stop_stream(&stop)).await.map_err(slack_error)?;
            }
            Output::Update { ts, .. } => {
                let whole = match trouble {
                    None => mrkdwn::from_markdown(&writing.text),
                    Some(trouble) if writing.text.is_empty() => trouble,
                    Some(trouble) => format!("{}\n\n{trouble}", mrkdwn::from_markdown(&writing.text)),
                };
                let mut parts = mrkdwn::split(&whole, mrkdwn::MESSAGE_LIMIT).into_iter();
                let first = parts.next().unwrap_or_default();
                let content = SlackMessageContent::new().with_text(first);
                let last = SlackApiChatUpdateRequest::new(channel.clone(), content, ts);
                patiently("chat.update", || session.chat_update(&last)).await.map_err(slack_error)?;
                // The rest follows in the same thread (a DM's answer starts one under the question).
                let rest_thread = thread.unwrap_or_else(|| SlackTs::new(route.ts.clone()));
                for part in parts {
                    let content = SlackMessageContent::new().with_text(part);
                    let request = SlackApiChatPostMessageRequest::new(channel.clone(), content)
                        .with_thread_ts(rest_thread.clone());
                    patiently("chat.postMessage", || session.chat_post_message(&request)).await.map_err(slack_error)?;
                }
            }
        }
        Ok(())
    }
}

/// `text` in pieces of at most `limit` bytes, cut at character boundaries only (streamed
/// deltas join up exactly as they came).
fn pieces(text: &str, limit: usize) -> Vec<String> {
    let mut pieces = vec![];
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(limit.max(4));
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, after) = rest.split_at(end);
        pieces.push(piece.to_string());
        rest = after;
    }
    pieces
}

fn slack_error(error: slack_morphism::errors::SlackClientError) -> GatewayError {
    GatewayError::Slack(error.to_string())
}

/// The status line as a task in a stream (one task, updated in place).
fn status_chunk(status: &str, state: SlackTaskCardStatus) -> SlackStreamChunk {
    SlackStreamChunk::TaskUpdate {
        id: SlackTaskId("status".into()),
        title: status.to_string(),
        hide_title: None,
        icon: None,
        status: state,
        details: None,
        output: None,
        sources: None,
    }
}

/// How the answer is shown while it is written.
enum Output {
    /// A message updated in place (`chat.update`), showing `shown`.
    Update { ts: SlackTs, shown: String },
    /// Slack's streaming message: the text appended so far, and the status shown.
    Stream { ts: SlackTs, streamed: String, status: String },
}

/// Whether to try Slack's streaming API: yes until the workspace refuses it, then again an hour
/// later (a refusal may have been passing).
#[derive(Debug, Default)]
struct Streaming {
    refused_at: Mutex<Option<Instant>>,
}

impl Streaming {
    const RETRY_AFTER: Duration = Duration::from_secs(3600);

    fn usable(&self) -> bool {
        let refused = *self.refused_at.lock().unwrap_or_else(PoisonError::into_inner);
        refused.is_none_or(|at| at.elapsed() > Self::RETRY_AFTER)
    }

    fn refused(&self) {
        *self.refused_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }
}

/// The answer being written.
#[derive(Debug, Default)]
struct Writing {
    text: String,
    status: String,
}

impl Writing {
    /// What the message shows while the answer is written: the text so far (within one
    /// message) and the status line.
    fn live(&self) -> String {
        let text = mrkdwn::from_markdown(&self.text);
        let text = mrkdwn::split(&text, mrkdwn::MESSAGE_LIMIT - 200).into_iter().next().unwrap_or_default();
        match (text.is_empty(), self.status.is_empty()) {
            (true, true) => PLACEHOLDER.into(),
            (true, false) => format!("_{}…_", self.status),
            (false, true) => format!("{text} …"),
            (false, false) => format!("{text} …\n_{}_", self.status),
        }
    }
}

pub(crate) fn agent_name(agent: i32) -> &'static str {
    match baaaht_proto::role_name(agent) {
        Some(name @ ("worker" | "researcher" | "coder" | "memory")) => name,
        _ => "agent",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_text_is_cut_at_character_boundaries_and_joins_up_exactly() {
        let text = "ab é  \n".repeat(3);
        let cut = pieces(&text, 5);
        assert!(cut.iter().all(|piece| piece.len() <= 5), "{cut:?}");
        assert_eq!(cut.concat(), text);
        assert!(pieces("", 5).is_empty());
    }
}
