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

use baaaht_gateway_kit::daemon::{File, Person, Place};
use baaaht_gateway_kit::follow::{Delivery, Follower};
use baaaht_gateway_kit::seen::Seen;
use baaaht_gateway_kit::text::pieces;
use baaaht_gateway_kit::turn::{self, Surface, Trouble, TurnError, Writing};
use baaaht_proto::client::Client;
use baaaht_proto::v1;
use slack_morphism::prelude::*;

use crate::egress::Egress;
use crate::files::Files;
use crate::mrkdwn;
use crate::route::{route, Route, Threads, Trigger};

/// How often the answer being written is updated in Slack.
const UPDATE_EVERY: Duration = Duration::from_millis(1000);
/// What a message shows before the answer's first words.
const PLACEHOLDER: &str = "_…_";
/// The most text one streaming chunk carries (Slack takes 12,000 characters per call).
const STREAM_CHUNK_LIMIT: usize = 10_000;

type Connector = SlackClientHyperConnector<hyper_rustls::HttpsConnector<Egress>>;

/// What the gateway knows for its whole life.
pub struct Gateway {
    pub daemon: Client,
    pub slack: Arc<SlackClient<Connector>>,
    pub bot_token: SlackApiToken,
    pub team: String,
    pub bot_user: String,
    pub trigger: Trigger,
    /// The chats served, followed for what comes between turns.
    pub follower: Arc<Follower>,
    files: Files,
    streaming: Streaming,
    seen: Mutex<Seen>,
    threads: Mutex<Threads>,
    /// Slack users' display names, by user id.
    names: Mutex<std::collections::HashMap<String, String>>,
    /// The approval requests posted, by id: where their message is, so answering it edits it in place.
    pub(crate) asked: Mutex<std::collections::HashMap<String, (SlackChannelId, SlackTs, Instant)>>,
}

/// The credentials the events come in with: the app token (Socket Mode) and the signing
/// secret (the Events API over HTTP); either may be empty when that way is not used.
pub struct Listening {
    pub app_token: SlackApiToken,
    pub signing_secret: String,
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
        follower: Arc<Follower>,
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
            follower,
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

    /// Posts what comes between turns (a scheduled task's result, a later message) until the
    /// follower ends.
    pub async fn deliver(self: Arc<Self>, mut deliveries: tokio::sync::mpsc::Receiver<Delivery>) {
        while let Some(delivery) = deliveries.recv().await {
            let channel = SlackChannelId::new(delivery.chat.clone());
            if let Err(error) = self.post_message(&channel, None, &delivery.text, delivery.files).await {
                tracing::warn!(channel = %delivery.chat, %error, "Slack did not take what came between turns");
            }
        }
    }

    /// Answers `route`: the turn in its context, streamed into its thread. `taken` is told
    /// (sent, or dropped when the turn ends first) once the daemon has the message: the
    /// delivery is acknowledged to Slack then, so a gateway that dies before gets it again.
    pub async fn answer(&self, route: Route, taken: tokio::sync::oneshot::Sender<()>) {
        let taken = Mutex::new(Some(taken));
        let channel = SlackChannelId::new(route.channel.clone());
        let thread = route.thread_ts.clone().map(SlackTs::new);
        let ran = match self.message_of(&route).await {
            Ok(message) => {
                let surface = Answering {
                    gateway: self,
                    route: &route,
                    channel: &channel,
                    thread: thread.as_ref(),
                    taken: &taken,
                };
                turn::run(&self.daemon, &self.follower, message, &surface).await
            }
            Err(sentence) => Err(TurnError::Daemon(sentence)),
        };
        if let Err(error) = ran {
            tracing::warn!(channel = %route.channel, error = %error, "a turn from Slack failed");
            let text = match error {
                TurnError::Daemon(sentence) => format!(":warning: {sentence}"),
                TurnError::Channel(_) => ":warning: Slack did not take the answer; try again.".into(),
            };
            let content = SlackMessageContent::new().with_text(text);
            let request = SlackApiChatPostMessageRequest::new(channel, content).opt_thread_ts(thread);
            if let Err(error) = self.slack.open_session(&self.bot_token).chat_post_message(&request).await {
                tracing::warn!(%error, "cannot tell the Slack user what went wrong");
            }
        }
    }

    /// The Slack user `user`, whose channel identity is `identity`, as the daemon is told.
    pub(crate) fn person(&self, identity: &str, user: &str) -> Person {
        let name = self.names.lock().unwrap_or_else(PoisonError::into_inner).get(user).cloned();
        Person { identity: identity.to_string(), name }
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
                self.names.lock().unwrap_or_else(PoisonError::into_inner).insert(user.to_string(), name);
            }
            Err(error) => tracing::warn!(user, %error, "users.info failed; the user is named by id"),
        }
    }

    /// The turn's message: who wrote it, where, and the files they shared (downloaded with the
    /// bot token); a sentence for the user when a file cannot be fetched.
    async fn message_of(&self, route: &Route) -> Result<turn::Message, String> {
        self.learn_name(&route.user).await;
        let token = self.bot_token.token_value.0.clone();
        let mut files = vec![];
        for file in &route.files {
            let downloaded = self.files.download(file, &token).await?;
            files.push(File {
                name: downloaded.name,
                mime_type: downloaded.mime_type,
                bytes: downloaded.bytes.to_vec(),
                voice: false,
            });
        }
        Ok(turn::Message {
            chat: route.channel.clone(),
            person: self.person(&route.identity, &route.user),
            place: if route.shared { Place::Shared { chat: route.channel.clone() } } else { Place::Own },
            text: route.text.clone(),
            files,
            channel: v1::ChannelType::Slack,
            session_id: String::new(),
        })
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
        writing: &Writing,
        channel: &SlackChannelId,
    ) -> Result<bool, GatewayError> {
        let session = self.slack.open_session(&self.bot_token);
        match output {
            Output::Update { ts, shown } => {
                let live = live(writing);
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

    /// A message the agents sent, posted in `channel` (in `thread` when given), then its files
    /// shared there as Slack's upload asks: an upload address for each, its bytes sent there,
    /// then one completion that shares them all.
    async fn post_message(
        &self,
        channel: &SlackChannelId,
        thread: Option<&SlackTs>,
        text: &str,
        files: Vec<File>,
    ) -> Result<(), GatewayError> {
        let session = self.slack.open_session(&self.bot_token);
        for part in mrkdwn::split(&mrkdwn::from_markdown(text), mrkdwn::MESSAGE_LIMIT) {
            let content = SlackMessageContent::new().with_text(part);
            let request = SlackApiChatPostMessageRequest::new(channel.clone(), content).opt_thread_ts(thread.cloned());
            patiently("chat.postMessage", || session.chat_post_message(&request)).await.map_err(slack_error)?;
        }
        if files.is_empty() {
            return Ok(());
        }
        let mut uploaded = vec![];
        for file in files {
            let asked = SlackApiFilesGetUploadUrlExternalRequest::new(file.name.clone(), file.bytes.len());
            let upload = patiently("files.getUploadURLExternal", || session.get_upload_url_external(&asked))
                .await
                .map_err(slack_error)?;
            let bytes = SlackApiFilesUploadViaUrlRequest::new(upload.upload_url, file.bytes, file.mime_type);
            patiently("the file's upload", || session.files_upload_via_url(&bytes)).await.map_err(slack_error)?;
            uploaded.push(SlackApiFilesComplete::new(upload.file_id).with_title(file.name));
        }
        let complete = SlackApiFilesCompleteUploadExternalRequest::new(uploaded)
            .with_channel_id(channel.clone())
            .opt_thread_ts(thread.cloned());
        patiently("files.completeUploadExternal", || session.files_complete_upload_external(&complete))
            .await
            .map_err(slack_error)?;
        Ok(())
    }
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

/// What the message shows while the answer is written: the text so far (within one message)
/// and the status line.
fn live(writing: &Writing) -> String {
    let text = mrkdwn::from_markdown(&writing.text);
    let text = mrkdwn::split(&text, mrkdwn::MESSAGE_LIMIT - 200).into_iter().next().unwrap_or_default();
    match (text.is_empty(), writing.status.is_empty()) {
        (true, true) => PLACEHOLDER.into(),
        (true, false) => format!("_{}…_", writing.status),
        (false, true) => format!("{text} …"),
        (false, false) => format!("{text} …\n_{}_", writing.status),
    }
}

/// One turn's answer in Slack: in the thread of the message that asked.
struct Answering<'a> {
    gateway: &'a Gateway,
    route: &'a Route,
    channel: &'a SlackChannelId,
    thread: Option<&'a SlackTs>,
    /// Told when the daemon has the message ([`Gateway::answer`]).
    taken: &'a Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl Surface for Answering<'_> {
    type Answer = Output;

    fn update_every(&self) -> Duration {
        UPDATE_EVERY
    }

    async fn open(&self) -> Result<Output, String> {
        self.gateway.open_answer(self.route, self.channel, self.thread).await.map_err(|error| error.to_string())
    }

    async fn show(&self, answer: &mut Output, writing: &Writing) -> Result<bool, String> {
        self.gateway.show(answer, writing, self.channel).await.map_err(|error| error.to_string())
    }

    async fn close(&self, answer: Output, writing: &Writing, trouble: Option<Trouble>) -> Result<(), String> {
        let trouble = trouble.map(|trouble| match trouble {
            Trouble::TooLong => format!(":hourglass: {}", trouble.sentence()),
            Trouble::Failed(sentence) => format!(":warning: {sentence}"),
        });
        let thread = self.thread.cloned();
        self.gateway
            .close_answer(answer, writing, trouble, self.route, self.channel, thread)
            .await
            .map_err(|error| error.to_string())
    }

    async fn message(&self, text: &str, files: Vec<File>) -> Result<(), String> {
        // Where the answer goes: its thread in a channel, the chat itself in a DM.
        self.gateway.post_message(self.channel, self.thread, text, files).await.map_err(|error| error.to_string())
    }

    async fn approval(&self, event: &v1::orchestrator_event::Event) {
        self.gateway.approval_event(event, self.channel, self.thread).await;
    }

    fn accepted(&self) {
        if let Some(taken) = self.taken.lock().unwrap_or_else(PoisonError::into_inner).take() {
            // silent-ok: the delivery's ack stopped waiting (its 2.5 s passed).
            let _ = taken.send(());
        }
        if let Some(thread) = &self.route.thread_ts {
            let mut threads = self.gateway.threads.lock().unwrap_or_else(PoisonError::into_inner);
            threads.answered(&self.route.channel, thread);
        }
    }
}
