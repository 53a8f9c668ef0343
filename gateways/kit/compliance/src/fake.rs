//! A fake of the daemon for one channel's gateway: the Sessions and Gateways services a gateway
//! calls, served on a Unix socket in a folder of its own (the other services answer
//! Unimplemented). Each message starts a turn scripted by the case ([`FakeDaemon::answer_with`];
//! by default an echo); everything the gateway sent — messages with who sent them, uploads,
//! approval answers — is recorded for the case to read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baaaht_proto::v1;
use tokio::sync::{broadcast, watch};
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status, Streaming};

/// One step of a scripted turn.
// A case's script holds a few steps, cloned once per turn: an event kept inline (a skill's
// review makes it large) costs nothing worth a box in every case's script.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Step {
    /// The daemon says this of the turn (its session and turn ids are filled in).
    Say(v1::orchestrator_event::Event),
    /// A pause before the next step.
    Pause(Duration),
    /// Waits until the approval with this id is answered (or 30 s have passed).
    AwaitAnswer(String),
}

/// What a case scripts: the steps of the turn a message starts, or the daemon's refusal of it.
pub type Script = Arc<dyn Fn(&v1::UserMessage) -> Result<Vec<Step>, Status> + Send + Sync>;

/// A message the gateway sent, and who it said sent it (the user header).
#[derive(Debug, Clone)]
pub struct Sent {
    pub identity: String,
    pub message: v1::UserMessage,
}

/// A file the gateway uploaded.
#[derive(Debug, Clone)]
pub struct Uploaded {
    pub identity: String,
    pub start: v1::UploadStart,
    pub bytes: Vec<u8>,
}

/// An approval's answer the gateway passed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    pub identity: String,
    pub approval: String,
    pub decision: String,
}

#[derive(Default)]
struct Recorded {
    sent: Vec<Sent>,
    uploaded: Vec<Uploaded>,
    answered: Vec<Answered>,
    /// Files agents "sent", by session and path, for DownloadFile.
    files: HashMap<(String, String), Vec<u8>>,
    turns: u64,
    /// How many times events were subscribed to.
    subscriptions: usize,
}

struct State {
    secrets: HashMap<String, String>,
    script: Mutex<Script>,
    recorded: Mutex<Recorded>,
    /// Bumped whenever something is recorded.
    changed: watch::Sender<u64>,
    /// Every event, with the context it is of (`user:ID` or `group:ID`).
    events: broadcast::Sender<(String, v1::OrchestratorEvent)>,
}

impl State {
    fn record(&self, change: impl FnOnce(&mut Recorded)) {
        change(&mut self.recorded.lock().unwrap_or_else(PoisonError::into_inner));
        self.changed.send_modify(|n| *n += 1);
    }
}

/// The daemon a channel's gateway talks to in a compliance case.
pub struct FakeDaemon {
    folder: tempfile::TempDir,
    state: Arc<State>,
    server: tokio::task::JoinHandle<()>,
}

/// A context's key as events are published for it.
pub fn context_key(context: Option<&v1::ContextRef>) -> String {
    match context {
        Some(context) if context.r#type == v1::ContextType::Group as i32 => format!("group:{}", context.id),
        Some(context) => format!("user:{}", context.id),
        None => String::new(),
    }
}

/// The context of the user a channel identity is, as WhoAmI names it.
pub fn user_context(identity: &str) -> v1::ContextRef {
    v1::ContextRef { r#type: v1::ContextType::User as i32, id: user_of(identity) }
}

/// The user a channel identity is (`telegram:7:42` → `u-telegram-7-42`): one per identity.
fn user_of(identity: &str) -> String {
    let id: String = identity.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    format!("u-{id}")
}

fn identity_of<T>(request: &Request<T>) -> String {
    let header = request.metadata().get(baaaht_proto::USER_HEADER);
    header.and_then(|value| value.to_str().ok()).unwrap_or_default().to_string()
}

/// An echo: the phase, the words in two pieces, the whole answer.
fn echo(message: &v1::UserMessage) -> Result<Vec<Step>, Status> {
    use v1::orchestrator_event::Event;
    let answer = format!("echo: {}", message.content);
    let (first, rest) = answer.split_at(answer.len() / 2);
    Ok(vec![
        Step::Say(Event::Phase(v1::TurnPhase { agent: v1::AgentRole::Assistant as i32, phase: "thinking".into() })),
        Step::Say(Event::TextDelta(v1::TextDelta { index: 0, text: first.to_string() })),
        Step::Say(Event::TextDelta(v1::TextDelta { index: 0, text: rest.to_string() })),
        Step::Say(Event::Reply(v1::ReplyComplete { entry_id: "e-answer".into(), content: answer })),
    ])
}

impl FakeDaemon {
    /// A fake daemon serving on a socket of its own, whose gateway credentials are `secrets`.
    pub async fn start(secrets: HashMap<String, String>) -> std::io::Result<FakeDaemon> {
        let folder = tempfile::tempdir()?;
        let listener = tokio::net::UnixListener::bind(folder.path().join("daemon.sock"))?;
        let state = Arc::new(State {
            secrets,
            script: Mutex::new(Arc::new(echo)),
            recorded: Mutex::default(),
            changed: watch::channel(0).0,
            events: broadcast::channel(1024).0,
        });
        let service = Service(state.clone());
        let server = tonic::transport::Server::builder()
            .add_service(v1::sessions_server::SessionsServer::new(service.clone()))
            .add_service(v1::gateways_server::GatewaysServer::new(service))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener));
        let server = tokio::spawn(async move {
            // silent-ok: the server ends with the case; a case sees its failure as a gateway that cannot connect.
            let _ = server.await;
        });
        Ok(FakeDaemon { folder, state, server })
    }

    /// The socket a gateway connects to (`--socket`; any token is taken).
    pub fn socket(&self) -> PathBuf {
        self.folder.path().join("daemon.sock")
    }

    /// A folder for the case's other files (a token file, a health socket).
    pub fn folder(&self) -> &Path {
        self.folder.path()
    }

    /// From now on each message's turn goes as `script` says.
    pub fn answer_with(&self, script: impl Fn(&v1::UserMessage) -> Result<Vec<Step>, Status> + Send + Sync + 'static) {
        *self.state.script.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(script);
    }

    /// A file an agent "sent" to `session` at `path` (`sent/NAME`), for the gateway to download.
    pub fn keep_file(&self, session: &str, path: &str, bytes: &[u8]) {
        self.state.record(|recorded| {
            recorded.files.insert((session.to_string(), path.to_string()), bytes.to_vec());
        });
    }

    /// Publishes `event` to whoever follows `context` (what comes between turns).
    pub fn publish(&self, context: &v1::ContextRef, event: v1::OrchestratorEvent) {
        // silent-ok: nobody following is a case's own concern (it waits for a subscription first).
        let _ = self.state.events.send((context_key(Some(context)), event));
    }

    /// How many streams follow events now.
    pub fn followers(&self) -> usize {
        self.state.events.receiver_count()
    }

    /// How many times events were subscribed to so far (a turn's own stream, a follower's).
    pub fn subscriptions(&self) -> usize {
        self.state.recorded.lock().unwrap_or_else(PoisonError::into_inner).subscriptions
    }

    /// The messages sent so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.state.recorded.lock().unwrap_or_else(PoisonError::into_inner).sent.clone()
    }

    /// The files uploaded so far.
    pub fn uploaded(&self) -> Vec<Uploaded> {
        self.state.recorded.lock().unwrap_or_else(PoisonError::into_inner).uploaded.clone()
    }

    /// The approvals answered so far.
    pub fn answered(&self) -> Vec<Answered> {
        self.state.recorded.lock().unwrap_or_else(PoisonError::into_inner).answered.clone()
    }

    /// Waits until `done` holds of what was recorded, at most `wait`; whether it did.
    pub async fn wait_until(&self, wait: Duration, done: impl Fn(&FakeDaemon) -> bool) -> bool {
        let mut changed = self.state.changed.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if done(self) {
                return true;
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                _ => return done(self),
            }
        }
    }
}

impl Drop for FakeDaemon {
    fn drop(&mut self) {
        self.server.abort();
    }
}

#[derive(Clone)]
struct Service(Arc<State>);

impl Service {
    /// Runs a turn of `message` (session `session`, turn `turn`): its steps published to the
    /// message's context.
    async fn run(state: Arc<State>, steps: Vec<Step>, context: String, session: String, turn: String) {
        for step in steps {
            match step {
                Step::Say(event) => {
                    let event = v1::OrchestratorEvent {
                        session_id: session.clone(),
                        turn_id: turn.clone(),
                        correlation_id: String::new(),
                        event: Some(event),
                    };
                    // silent-ok: a turn nobody follows is still run to its end.
                    let _ = state.events.send((context.clone(), event));
                }
                Step::Pause(pause) => tokio::time::sleep(pause).await,
                Step::AwaitAnswer(approval) => {
                    let mut changed = state.changed.subscribe();
                    let answered = |state: &State| {
                        let recorded = state.recorded.lock().unwrap_or_else(PoisonError::into_inner);
                        recorded.answered.iter().any(|answer| answer.approval == approval)
                    };
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                    while !answered(&state) {
                        if !matches!(tokio::time::timeout_at(deadline, changed.changed()).await, Ok(Ok(()))) {
                            break;
                        }
                    }
                }
            }
        }
    }
}

#[tonic::async_trait]
impl v1::sessions_server::Sessions for Service {
    async fn send_user_message(
        &self,
        request: Request<v1::UserMessage>,
    ) -> Result<Response<v1::SendUserMessageResponse>, Status> {
        let identity = identity_of(&request);
        let message = request.into_inner();
        let script = self.0.script.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let steps = script(&message)?;
        let mut number = 0;
        self.0.record(|recorded| {
            recorded.turns += 1;
            number = recorded.turns;
            recorded.sent.push(Sent { identity, message: message.clone() });
        });
        let session = if message.session_id.is_empty() { "s-fake".to_string() } else { message.session_id.clone() };
        let turn = format!("t-{number}");
        let context = context_key(message.context.as_ref());
        let reply = v1::SendUserMessageResponse {
            session_id: session.clone(),
            entry_id: format!("e-{number}"),
            turn_id: turn.clone(),
            correlation_id: String::new(),
        };
        tokio::spawn(Service::run(self.0.clone(), steps, context, session, turn));
        Ok(Response::new(reply))
    }

    async fn upload_file(
        &self,
        request: Request<Streaming<v1::UploadChunk>>,
    ) -> Result<Response<v1::UploadResult>, Status> {
        use v1::upload_chunk::Part;
        let identity = identity_of(&request);
        let mut chunks = request.into_inner();
        let Some(v1::UploadChunk { part: Some(Part::Start(start)) }) = chunks.message().await? else {
            return Err(Status::invalid_argument("an upload starts with its UploadStart"));
        };
        let mut bytes = vec![];
        while let Some(chunk) = chunks.message().await? {
            match chunk.part {
                Some(Part::Data(data)) => bytes.extend(data),
                _ => return Err(Status::invalid_argument("only an upload's first message is its UploadStart")),
            }
        }
        let session = if start.session_id.is_empty() { "s-fake".to_string() } else { start.session_id.clone() };
        let attachment = v1::Attachment {
            filename: start.filename.clone(),
            mime_type: start.mime_type.clone(),
            path: format!("uploads/{}", start.filename),
            size_bytes: bytes.len() as u64,
            voice: false,
        };
        self.0.record(|recorded| recorded.uploaded.push(Uploaded { identity, start, bytes }));
        Ok(Response::new(v1::UploadResult { session_id: session, attachment: Some(attachment) }))
    }

    type DownloadFileStream = BoxStream<v1::FileChunk>;

    async fn download_file(
        &self,
        request: Request<v1::DownloadFileRequest>,
    ) -> Result<Response<Self::DownloadFileStream>, Status> {
        let wanted = request.into_inner();
        let bytes = {
            let recorded = self.0.recorded.lock().unwrap_or_else(PoisonError::into_inner);
            recorded.files.get(&(wanted.session_id.clone(), wanted.path.clone())).cloned()
        };
        let Some(bytes) = bytes else {
            return Err(Status::not_found(format!("conversation {} has no file {}", wanted.session_id, wanted.path)));
        };
        let filename = wanted.path.rsplit('/').next().unwrap_or_default().to_string();
        let attachment = v1::Attachment {
            filename,
            mime_type: "application/octet-stream".into(),
            path: wanted.path,
            size_bytes: bytes.len() as u64,
            voice: false,
        };
        let parts = std::iter::once(v1::file_chunk::Part::Attachment(attachment))
            .chain(bytes.chunks(64 * 1024).map(|chunk| v1::file_chunk::Part::Data(chunk.to_vec())))
            .map(|part| Ok(v1::FileChunk { part: Some(part) }))
            .collect::<Vec<_>>();
        Ok(Response::new(Box::pin(tokio_stream::iter(parts))))
    }

    type SubscribeEventsStream = BoxStream<v1::OrchestratorEvent>;

    async fn subscribe_events(
        &self,
        request: Request<v1::EventSubscription>,
    ) -> Result<Response<Self::SubscribeEventsStream>, Status> {
        let wanted = context_key(request.get_ref().context.as_ref());
        let mut events = self.0.events.subscribe();
        let (sender, receiver) = tokio::sync::mpsc::channel(256);
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok((context, event)) if context == wanted => {
                        if sender.send(Ok(event)).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        // A case may wait for the gateway to follow its context before it publishes.
        self.0.record(|recorded| recorded.subscriptions += 1);
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(receiver))))
    }

    async fn answer_approval(&self, request: Request<v1::ApprovalAnswer>) -> Result<Response<v1::Ack>, Status> {
        let identity = identity_of(&request);
        let answer = request.into_inner();
        self.0.record(|recorded| {
            recorded.answered.push(Answered { identity, approval: answer.id, decision: answer.decision })
        });
        Ok(Response::new(v1::Ack::default()))
    }

    async fn cancel_turn(&self, _: Request<v1::CancelTurnRequest>) -> Result<Response<v1::Ack>, Status> {
        Ok(Response::new(v1::Ack::default()))
    }

    async fn new_session(&self, _: Request<v1::NewSessionRequest>) -> Result<Response<v1::SessionHeader>, Status> {
        // One conversation in the fake: what a case keeps for it is found whichever way it came.
        Ok(Response::new(v1::SessionHeader { id: "s-fake".into(), ..Default::default() }))
    }

    async fn resume_session(&self, request: Request<v1::SessionRef>) -> Result<Response<v1::SessionHeader>, Status> {
        Ok(Response::new(v1::SessionHeader { id: request.into_inner().session_id, ..Default::default() }))
    }

    async fn list_inbox(&self, _: Request<v1::InboxRequest>) -> Result<Response<v1::InboxList>, Status> {
        Ok(Response::new(v1::InboxList::default()))
    }

    async fn read_session(
        &self,
        request: Request<v1::ReadSessionRequest>,
    ) -> Result<Response<v1::SessionTranscript>, Status> {
        let header = v1::SessionHeader { id: request.into_inner().session_id, ..Default::default() };
        Ok(Response::new(v1::SessionTranscript { header: Some(header), ..Default::default() }))
    }

    async fn list_sessions(&self, _: Request<v1::SessionFilter>) -> Result<Response<v1::SessionList>, Status> {
        Ok(Response::new(v1::SessionList::default()))
    }

    async fn route_to_agent(
        &self,
        _: Request<v1::AgentRoutingRequest>,
    ) -> Result<Response<v1::AgentRoutingResponse>, Status> {
        Err(Status::unimplemented("not in the fake daemon"))
    }

    async fn search_sessions(&self, _: Request<v1::SessionQuery>) -> Result<Response<v1::SessionHits>, Status> {
        Err(Status::unimplemented("not in the fake daemon"))
    }

    async fn fork_session(&self, _: Request<v1::ForkSessionRequest>) -> Result<Response<v1::SessionHeader>, Status> {
        Err(Status::unimplemented("not in the fake daemon"))
    }

    async fn undo(&self, _: Request<v1::UndoRequest>) -> Result<Response<v1::UndoPlan>, Status> {
        Err(Status::unimplemented("not in the fake daemon"))
    }

    async fn archive_session(&self, _: Request<v1::SessionRef>) -> Result<Response<v1::Ack>, Status> {
        Err(Status::unimplemented("not in the fake daemon"))
    }

    async fn compact_session(&self, _: Request<v1::SessionRef>) -> Result<Response<v1::Ack>, Status> {
        Err(Status::unimplemented("not in the fake daemon"))
    }

    async fn switch_model(&self, _: Request<v1::SwitchModelRequest>) -> Result<Response<v1::Ack>, Status> {
        Err(Status::unimplemented("not in the fake daemon"))
    }

    async fn list_model_choices(
        &self,
        _: Request<v1::ModelChoicesRequest>,
    ) -> Result<Response<v1::ModelChoices>, Status> {
        Err(Status::unimplemented("not in the fake daemon"))
    }

    async fn publish_event(&self, _: Request<v1::ChannelEvent>) -> Result<Response<v1::Ack>, Status> {
        Err(Status::unimplemented("not in the fake daemon"))
    }
}

#[tonic::async_trait]
impl v1::gateways_server::Gateways for Service {
    async fn who_am_i(&self, request: Request<v1::WhoAmIRequest>) -> Result<Response<v1::UserProfile>, Status> {
        let identity = identity_of(&request);
        if identity.is_empty() {
            return Err(Status::invalid_argument("a gateway names its user"));
        }
        let profile = v1::UserProfile { id: user_of(&identity), identities: vec![identity], ..Default::default() };
        Ok(Response::new(profile))
    }

    async fn update_profile(&self, request: Request<v1::ProfileUpdate>) -> Result<Response<v1::UserProfile>, Status> {
        let identity = identity_of(&request);
        Ok(Response::new(v1::UserProfile { id: user_of(&identity), ..Default::default() }))
    }

    async fn start_link(&self, _: Request<v1::StartLinkRequest>) -> Result<Response<v1::LinkCode>, Status> {
        Ok(Response::new(v1::LinkCode { code: "123456".into(), valid_seconds: 600 }))
    }

    async fn confirm_link(
        &self,
        request: Request<v1::ConfirmLinkRequest>,
    ) -> Result<Response<v1::UserProfile>, Status> {
        let identity = identity_of(&request);
        Ok(Response::new(v1::UserProfile { id: user_of(&identity), name: "Alice".into(), ..Default::default() }))
    }

    async fn ensure_channel_group(
        &self,
        request: Request<v1::EnsureChannelGroupRequest>,
    ) -> Result<Response<v1::GroupInfo>, Status> {
        let wanted = request.into_inner();
        let id: String = wanted.channel.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        Ok(Response::new(v1::GroupInfo {
            id: format!("g-{id}"),
            name: wanted.name,
            active: true,
            ..Default::default()
        }))
    }

    async fn get_gateway_secrets(
        &self,
        _: Request<v1::GatewaySecretsRequest>,
    ) -> Result<Response<v1::GatewaySecrets>, Status> {
        Ok(Response::new(v1::GatewaySecrets { secrets: self.0.secrets.clone() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fake through the real client, as a gateway reaches it: a message echoed on the
    /// context's stream, who sent it recorded.
    #[tokio::test]
    async fn a_message_is_echoed_to_its_context_and_recorded_as_its_sender() {
        let daemon =
            FakeDaemon::start(HashMap::from([("bot_token".to_string(), "t".to_string())])).await.expect("start");
        let token = daemon.folder().join("token");
        std::fs::write(&token, "any").expect("a token file");
        let mut client = baaaht_proto::client::connect_gateway(&daemon.socket(), Some(&token)).await.expect("connect");
        let context = v1::ContextRef { r#type: v1::ContextType::User as i32, id: "u-1".into() };
        let person = baaaht_gateway_kit::daemon::Person { identity: "telegram:7:42".into(), name: None };
        let subscription = v1::EventSubscription { context: Some(context.clone()), ..Default::default() };
        let events = client.sessions.subscribe_events(person.request(subscription)).await.expect("subscribe");
        let mut events = events.into_inner();
        let message = v1::UserMessage { context: Some(context), content: "hi".into(), ..Default::default() };
        let sent = client.sessions.send_user_message(person.request(message)).await.expect("sent").into_inner();
        let mut text = String::new();
        while let Some(event) = events.message().await.expect("an event") {
            assert_eq!((event.session_id.as_str(), event.turn_id.as_str()), ("s-fake", sent.turn_id.as_str()));
            if let Some(v1::orchestrator_event::Event::Reply(reply)) = event.event {
                text = reply.content;
                break;
            }
        }
        assert_eq!(text, "echo: hi");
        assert_eq!(daemon.sent()[0].identity, "telegram:7:42");
        let secrets = client.gateways.get_gateway_secrets(v1::GatewaySecretsRequest {}).await.expect("secrets");
        assert_eq!(secrets.into_inner().secrets["bot_token"], "t");
    }
}
