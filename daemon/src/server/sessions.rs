//! The client side of sessions: SendUserMessage, List/Read/New/Resume/Fork/Archive sessions,
//! SwitchModel — conversions between the session store and the protocol.

use std::sync::Arc;

use baaaht_proto::v1;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use super::Shared;
use crate::base::auth::Context;
use crate::base::auth::{Caller, ContextKind, Operation};
use crate::drive::orchestrator::OrchestratorError;
use crate::store::sessions::{SessionError, SessionStatus};

use super::from_wire::{channel_name, filter, incoming, sender_of, Written};
use super::to_wire::{entry, header};
use super::{caller, check, context_of, limited, own_context, to_wire, until_shutdown, valid_id};

impl From<SessionError> for Status {
    fn from(error: SessionError) -> Status {
        let text = error.to_string();
        match error {
            SessionError::NotFound(_) => Status::not_found(text),
            SessionError::Archived(_) => Status::failed_precondition(text),
            SessionError::OtherContext { .. } => Status::permission_denied(text),
            SessionError::DiskCritical(_) => Status::resource_exhausted(text),
            SessionError::Log(
                crate::store::sessions::LogError::UnknownEntry(_)
                | crate::store::sessions::LogError::UnknownParent { .. },
            ) => Status::invalid_argument(text),
            other if crate::base::state::is_disk_full(&other) => {
                tracing::error!(error = %baaaht_proto::error_chain(&other), "the data dir's disk is full");
                Status::resource_exhausted(crate::base::state::DISK_FULL)
            }
            other => Status::internal(baaaht_proto::error_chain(&other)),
        }
    }
}

impl From<OrchestratorError> for Status {
    fn from(error: OrchestratorError) -> Status {
        match error {
            OrchestratorError::Session(error) => error.into(),
            OrchestratorError::Invalid(text) => Status::invalid_argument(text),
            OrchestratorError::NoTurn => Status::failed_precondition(error.to_string()),
            OrchestratorError::Model(_) => Status::unavailable(error.to_string()),
            OrchestratorError::Budget(_) => Status::resource_exhausted(error.to_string()),
            OrchestratorError::Group(crate::people::groups::GroupError::NotFound(_)) => {
                Status::not_found(error.to_string())
            }
            OrchestratorError::Group(crate::people::groups::GroupError::State(state)) => {
                // A file that cannot be written: the operator's to read, not the caller's.
                tracing::error!(error = %baaaht_proto::error_chain(&state), "cannot keep the groups");
                Status::internal("cannot keep the groups; the daemon's log says why")
            }
            OrchestratorError::Group(_) => Status::failed_precondition(error.to_string()),
        }
    }
}

/// How long an upload may take from its first byte to its last.
const UPLOAD_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);
/// How long an upload may send nothing.
const UPLOAD_IDLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// An upload's failure for the caller: the sentence when it is about the file or the session's
/// room, the log's for anything else.
fn upload_status(error: crate::store::uploads::UploadError) -> Status {
    use crate::store::uploads::UploadError;
    match error {
        UploadError::TooLarge(_) => Status::invalid_argument(error.to_string()),
        UploadError::Full | UploadError::Workspace(crate::sandbox::workspace::WorkspaceError::TooMany(_)) => {
            Status::resource_exhausted(error.to_string())
        }
        // Nothing of the file was kept: the sender is told so, and why.
        UploadError::Io(_) | UploadError::Workspace(_) if crate::base::state::is_disk_full(&error) => {
            tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot store an upload");
            Status::resource_exhausted(crate::base::state::DISK_FULL)
        }
        UploadError::Io(_) | UploadError::Workspace(_) => {
            tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot store an upload");
            Status::internal("cannot store the upload; the daemon's log says why")
        }
    }
}

/// The `Sessions` service.
#[derive(Debug, Clone)]
pub(super) struct SessionsService {
    pub(super) shared: Arc<Shared>,
}

impl SessionsService {
    /// A transcript's `entry` as it reads now: a message with its sender's name as the daemon
    /// knows it today, an approval with how long it still waits (0: no longer).
    fn as_now(&self, mut entry: v1::SessionEntry) -> v1::SessionEntry {
        use v1::orchestrator_event::Event;
        match &mut entry.entry {
            Some(v1::session_entry::Entry::Message(message)) => {
                message.sender_name =
                    crate::drive::orchestrator::sender_name(&self.shared.orchestrator, &message.sender_id);
            }
            Some(v1::session_entry::Entry::Activity(v1::ActivityEntry {
                event: Some(v1::OrchestratorEvent { event: Some(Event::Approval(asked)), .. }),
                ..
            })) => asked.expires_in_seconds = self.shared.approvals.waiting_for(&asked.id).unwrap_or(0),
            _ => {}
        }
        entry
    }

    /// The session an upload goes to: the one it names in `context`, else the sender's active
    /// one; never an archived one, nor a group's that takes no messages.
    fn upload_session(
        &self,
        caller: &Caller,
        context: &Context,
        start: &v1::UploadStart,
    ) -> Result<crate::store::sessions::SessionRecord, Status> {
        let sender = sender_of(caller, context, &start.sender_id)?;
        if let Some(why) = self.shared.disk.refusal("An upload") {
            return Err(Status::resource_exhausted(why));
        }
        let record = if start.session_id.is_empty() {
            self.shared.sessions.active(context, &sender)?
        } else {
            valid_id(&start.session_id, "start.session_id")?;
            self.shared.sessions.get_in(&start.session_id, context)?
        };
        if record.status == SessionStatus::Archived {
            return Err(SessionError::Archived(record.id).into());
        }
        if context.kind == crate::base::auth::ContextKind::Group {
            self.shared.groups.accepts_messages(&context.id).map_err(OrchestratorError::from)?;
        }
        Ok(record)
    }
}

/// An upload's bytes, as they come, into `upload`; each chunk within [`UPLOAD_IDLE_LIMIT`]. Disk
/// writes are blocking, and so is the unmount that letting go of the workspace may take.
/// An upload to `session`'s workspace of at most `max` bytes, begun, then its bytes written as
/// `stream` sends them, within [`UPLOAD_TIME_LIMIT`].
async fn received(
    shared: &Shared,
    session: &str,
    max: u64,
    stream: &mut tonic::Streaming<v1::UploadChunk>,
) -> Result<crate::store::uploads::Upload, Status> {
    let (workspaces, session) = (shared.workspaces.clone(), session.to_string());
    let begun = tokio::task::spawn_blocking(move || crate::store::uploads::Upload::begin(workspaces, &session, max));
    let upload = begun.await.map_err(|error| Status::internal(error.to_string()))?.map_err(upload_status)?;
    match tokio::time::timeout(UPLOAD_TIME_LIMIT, written(stream, upload)).await {
        Ok(written) => written,
        Err(_) => {
            let minutes = UPLOAD_TIME_LIMIT.as_secs() / 60;
            Err(Status::deadline_exceeded(format!("the upload took more than {minutes} minutes; send it again")))
        }
    }
}

/// `upload` with the bytes `stream` sends written to it, each chunk within [`UPLOAD_IDLE_LIMIT`].
async fn written(
    stream: &mut tonic::Streaming<v1::UploadChunk>,
    mut upload: crate::store::uploads::Upload,
) -> Result<crate::store::uploads::Upload, Status> {
    loop {
        let Ok(next) = tokio::time::timeout(UPLOAD_IDLE_LIMIT, stream.message()).await else {
            let idle = UPLOAD_IDLE_LIMIT.as_secs();
            return Err(Status::deadline_exceeded(format!("the upload sent nothing for {idle} s; send it again")));
        };
        let Some(chunk) = next? else { return Ok(upload) };
        let Some(v1::upload_chunk::Part::Data(bytes)) = chunk.part else {
            return Err(Status::invalid_argument("only an upload's first message is its UploadStart"));
        };
        let written = tokio::task::spawn_blocking(move || upload.write(&bytes).map(|()| upload));
        upload = written.await.map_err(|error| Status::internal(error.to_string()))?.map_err(upload_status)?;
    }
}

#[tonic::async_trait]
impl v1::sessions_server::Sessions for SessionsService {
    async fn route_to_agent(
        &self,
        request: Request<v1::AgentRoutingRequest>,
    ) -> Result<Response<v1::AgentRoutingResponse>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        check(&self.shared, &request, Operation::RouteToAgent, context.as_ref(), Some(&request.get_ref().session_id))?;
        let context = context.ok_or_else(|| Status::invalid_argument("context: name the user or group"))?;
        let message = request.into_inner();
        if !message.session_id.is_empty() {
            valid_id(&message.session_id, "session_id")?;
        }
        let incoming = crate::drive::orchestrator::Incoming {
            sender: context.id.clone(),
            context,
            session: (!message.session_id.is_empty()).then_some(message.session_id),
            channel: None,
            content: message.content,
            parent: None,
            attachments: vec![],
            spoken: false,
        };
        let accepted = crate::drive::orchestrator::accept_user_message(&self.shared.orchestrator, incoming)?;
        Ok(Response::new(v1::AgentRoutingResponse { session_id: accepted.session, turn_id: accepted.turn }))
    }

    type DownloadFileStream = BoxStream<v1::FileChunk>;

    async fn download_file(
        &self,
        request: Request<v1::DownloadFileRequest>,
    ) -> Result<Response<Self::DownloadFileStream>, Status> {
        super::files::download_file(&self.shared, request).await
    }

    type SubscribeEventsStream = BoxStream<v1::OrchestratorEvent>;

    async fn subscribe_events(
        &self,
        request: Request<v1::EventSubscription>,
    ) -> Result<Response<Self::SubscribeEventsStream>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(
            &self.shared,
            &request,
            Operation::SubscribeEvents,
            context.as_ref(),
            Some(&request.get_ref().session_id),
        )?;
        let context = context.ok_or_else(|| Status::invalid_argument("context: name the user or group to follow"))?;
        let subscription = request.into_inner();
        let session = subscription.session_id;
        // A follower that notifies a person's devices counts as `push`: approvals may be asked,
        // and no notice is told there instead of the inbox (store::inbox::channel_for).
        let channel = if subscription.notifies {
            Some(crate::store::inbox::PUSH.to_string())
        } else {
            channel_name(subscription.channel)
        };
        let held = self
            .shared
            .limits
            .subscriptions
            .take(&crate::guard::limits::Limits::subscription_keys(&caller))
            .map_err(|why| limited(&self.shared, &caller, "event subscriptions", why))?;
        // The channel counts as connected (for the scheduler's notices) while it follows.
        let (bus, followed) = (&self.shared.events, context.clone());
        let connect = move || (channel.map(|channel| bus.connect(&followed, &channel)), held);
        let followed = bus.follow(context.clone(), session, &self.shared.lifetime, connect);
        let events = tokio_stream::wrappers::ReceiverStream::new(followed);
        let events = tokio_stream::StreamExt::map(events, move |event| Ok(to_wire::event(&context, event)));
        Ok(Response::new(until_shutdown(&self.shared, events)))
    }

    async fn list_inbox(&self, request: Request<v1::InboxRequest>) -> Result<Response<v1::InboxList>, Status> {
        let named = context_of(request.get_ref().context.as_ref(), "context")?;
        let context = own_context(&caller(&request)?, named)?;
        check(&self.shared, &request, Operation::ListInbox, Some(&context), None)?;
        let wanted = request.into_inner();
        let items = self
            .shared
            .inbox
            .list(&context, wanted.unread_only, wanted.mark_read)
            .map_err(|error| Status::internal(format!("cannot read the inbox: {error}")))?;
        let items = items
            .into_iter()
            .map(|item| v1::InboxItem {
                id: item.id,
                at: item.at,
                title: item.title,
                content: item.content,
                task_id: item.task_id,
                run_id: item.run_id,
                read: item.read,
            })
            .collect();
        Ok(Response::new(v1::InboxList { items }))
    }

    async fn publish_event(&self, request: Request<v1::ChannelEvent>) -> Result<Response<v1::Ack>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&self.shared, &request, Operation::PublishEvent, context.as_ref(), None)?;
        let context = context.ok_or_else(|| Status::invalid_argument("context: name the user or group"))?;
        let event = request.into_inner();
        match event.event {
            Some(v1::channel_event::Event::UserMessage(message)) => {
                let written = Written {
                    sender_id: &event.sender_id,
                    channel: event.channel,
                    session_id: message.session_id,
                    parent_entry_id: message.parent_entry_id,
                    content: message.content,
                    attachments: message.attachments,
                };
                let incoming = incoming(&caller, context, written, "user_message.session_id")?;
                let accepted = crate::drive::orchestrator::accept_user_message(&self.shared.orchestrator, incoming)?;
                Ok(Response::new(v1::Ack {
                    message: format!("turn {} in session {}", accepted.turn, accepted.session),
                }))
            }
            Some(v1::channel_event::Event::Typing(_)) => Ok(Response::new(v1::Ack { message: "noted".into() })),
            None => Err(Status::invalid_argument("event: send a user_message or typing")),
        }
    }

    async fn send_user_message(
        &self,
        request: Request<v1::UserMessage>,
    ) -> Result<Response<v1::SendUserMessageResponse>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(
            &self.shared,
            &request,
            Operation::SendUserMessage,
            context.as_ref(),
            Some(&request.get_ref().session_id),
        )?;
        let context = context.ok_or_else(|| Status::invalid_argument("context: name the user or group who writes"))?;
        let message = request.into_inner();
        let voice = message.voice;
        let written = Written {
            sender_id: &message.sender_id,
            channel: message.channel,
            session_id: message.session_id,
            parent_entry_id: message.parent_entry_id,
            content: message.content,
            attachments: message.attachments,
        };
        let mut incoming = incoming(&caller, context, written, "session_id")?;
        if voice {
            incoming = crate::drive::orchestrator::voice::hear(&self.shared.orchestrator, incoming).await?;
        }
        let accepted = crate::drive::orchestrator::accept_user_message(&self.shared.orchestrator, incoming)?;
        Ok(Response::new(v1::SendUserMessageResponse {
            session_id: accepted.session,
            entry_id: accepted.entry,
            turn_id: accepted.turn,
            correlation_id: accepted.correlation_id,
        }))
    }

    async fn upload_file(
        &self,
        mut request: Request<tonic::Streaming<v1::UploadChunk>>,
    ) -> Result<Response<v1::UploadResult>, Status> {
        use v1::upload_chunk::Part;
        let start = match request.get_mut().message().await? {
            Some(v1::UploadChunk { part: Some(Part::Start(start)) }) => start,
            _ => {
                return Err(Status::invalid_argument(
                    "an upload starts with its UploadStart (context, session_id, filename), then the bytes",
                ))
            }
        };
        let context = context_of(start.context.as_ref(), "start.context")?;
        let caller = check(&self.shared, &request, Operation::UploadFile, context.as_ref(), Some(&start.session_id))?;
        let context =
            context.ok_or_else(|| Status::invalid_argument("start.context: name the user or group it is for"))?;
        let record = self.upload_session(&caller, &context, &start)?;
        let max = self.shared.loaded.config.sessions.max_upload_bytes;
        if start.size_bytes > max {
            return Err(upload_status(crate::store::uploads::UploadError::TooLarge(max)));
        }
        // An upload holds a file and the session's workspace open: a user and a gateway hold
        // a few at a time, and each must keep sending.
        let keys = crate::guard::limits::Limits::upload_keys(&caller);
        let _held =
            self.shared.limits.uploads.take(&keys).map_err(|why| limited(&self.shared, &caller, "uploads", why))?;
        let upload = received(&self.shared, &record.id, max, request.get_mut()).await?;
        let (filename, declared) = (start.filename, start.mime_type);
        let finished = tokio::task::spawn_blocking(move || upload.finish(&filename, &declared));
        let stored = finished.await.map_err(|error| Status::internal(error.to_string()))?.map_err(upload_status)?;
        tracing::info!(session = %record.id, name = %stored.name, bytes = stored.size, mime = %stored.mime_type, "upload stored");
        Ok(Response::new(to_wire::upload_result(record.id, stored)))
    }

    async fn list_sessions(&self, request: Request<v1::SessionFilter>) -> Result<Response<v1::SessionList>, Status> {
        let caller = check(&self.shared, &request, Operation::ListSessions, None, None)?;
        let filter = filter(request.get_ref())?;
        let mut found = self.shared.sessions.list(&filter);
        // A user sees the sessions of their own context and their groups'.
        if let Caller::Gateway(call) = &caller {
            match &call.user {
                Some(user) if user.admin => {}
                Some(user) => found.retain(|record| user.owns(&record.context())),
                None => found.clear(),
            }
        }
        Ok(Response::new(v1::SessionList { sessions: found.iter().map(header).collect() }))
    }

    async fn search_sessions(&self, request: Request<v1::SessionQuery>) -> Result<Response<v1::SessionHits>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&self.shared, &request, Operation::SearchSessions, context.as_ref(), None)?;
        let context = super::own_context(&caller, context)?;
        let live = super::live_turn(&request);
        let found = super::search::sessions(&self.shared, &context, request.into_inner()).await?;
        if matches!(caller, Caller::Container(_)) {
            if let Some(live) = live {
                // A group's conversations hold every member's words: an agent's turn that
                // found some not of its asker read them; and what was said after a turn read
                // content from outside carries it (DESIGN.md §10.3).
                let others = (context.kind == ContextKind::Group)
                    .then(|| super::search::others_words(&self.shared, &found.hits, live.asker.as_deref()))
                    .flatten();
                if let Some(source) = others.or_else(|| super::search::carried(&self.shared, &found.hits)) {
                    self.shared.taints.taint(&live, &format!("session_search found {source}"));
                }
            }
        }
        Ok(Response::new(found))
    }

    async fn read_session(
        &self,
        request: Request<v1::ReadSessionRequest>,
    ) -> Result<Response<v1::SessionTranscript>, Status> {
        check(&self.shared, &request, Operation::ReadSession, None, Some(&request.get_ref().session_id))?;
        let message = request.into_inner();
        valid_id(&message.session_id, "session_id")?;
        let record =
            self.shared.sessions.get(&message.session_id).ok_or_else(|| {
                Status::from(crate::store::sessions::SessionError::NotFound(message.session_id.clone()))
            })?;
        let read = self.shared.sessions.read(&message.session_id)?;
        let entries = if message.leaf_entry_id.is_empty() {
            read.entries.clone()
        } else {
            read.with_activities(
                read.branch(&message.leaf_entry_id).map_err(crate::store::sessions::SessionError::from)?,
            )
        };
        Ok(Response::new(v1::SessionTranscript {
            header: Some(header(&record)),
            entries: entries.iter().filter_map(|kept| entry(&record, kept)).map(|entry| self.as_now(entry)).collect(),
            problems: read.corrupt.iter().map(|c| format!("line {}: {}", c.line, c.reason)).collect(),
            running_turns: self.shared.turns.running_in(&record.id),
        }))
    }

    async fn new_session(
        &self,
        request: Request<v1::NewSessionRequest>,
    ) -> Result<Response<v1::SessionHeader>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&self.shared, &request, Operation::NewSession, context.as_ref(), None)?;
        let context = context.ok_or_else(|| Status::invalid_argument("context: name the user or group"))?;
        self.shared.limits.new_session(&caller).map_err(|why| limited(&self.shared, &caller, "new sessions", why))?;
        let message = request.into_inner();
        let title = (!message.title.trim().is_empty()).then(|| message.title.trim().to_string());
        // Its workspace and tool container come with its first message.
        let record = self.shared.sessions.create(&context, &context.id, title)?;
        Ok(Response::new(header(&record)))
    }

    async fn resume_session(&self, request: Request<v1::SessionRef>) -> Result<Response<v1::SessionHeader>, Status> {
        check(&self.shared, &request, Operation::ResumeSession, None, Some(&request.get_ref().session_id))?;
        let id = request.into_inner().session_id;
        valid_id(&id, "session_id")?;
        let record = self.shared.sessions.set_status(&id, crate::store::sessions::SessionStatus::Active)?;
        tracing::info!(session = %id, "session resumed");
        Ok(Response::new(header(&record)))
    }

    async fn fork_session(
        &self,
        request: Request<v1::ForkSessionRequest>,
    ) -> Result<Response<v1::SessionHeader>, Status> {
        let caller = check(&self.shared, &request, Operation::ForkSession, None, Some(&request.get_ref().session_id))?;
        self.shared.limits.new_session(&caller).map_err(|why| limited(&self.shared, &caller, "new sessions", why))?;
        let message = request.into_inner();
        valid_id(&message.session_id, "session_id")?;
        let entry = if message.entry_id.is_empty() {
            self.shared
                .sessions
                .get(&message.session_id)
                .and_then(|record| record.leaf)
                .unwrap_or_else(|| message.session_id.clone())
        } else {
            message.entry_id
        };
        let record = self.shared.sessions.fork(&message.session_id, &entry)?;
        Ok(Response::new(header(&record)))
    }

    async fn undo(&self, request: Request<v1::UndoRequest>) -> Result<Response<v1::UndoPlan>, Status> {
        super::undo::undo(&self.shared, request).await
    }

    async fn archive_session(&self, request: Request<v1::SessionRef>) -> Result<Response<v1::Ack>, Status> {
        check(&self.shared, &request, Operation::ArchiveSession, None, Some(&request.get_ref().session_id))?;
        let id = request.into_inner().session_id;
        valid_id(&id, "session_id")?;
        crate::drive::orchestrator::archive(&self.shared.orchestrator, &id).await?;
        tracing::info!(session = %id, "session archived on request");
        Ok(Response::new(v1::Ack { message: format!("session {id} archived") }))
    }

    async fn compact_session(&self, request: Request<v1::SessionRef>) -> Result<Response<v1::Ack>, Status> {
        check(&self.shared, &request, Operation::CompactSession, None, Some(&request.get_ref().session_id))?;
        let id = request.into_inner().session_id;
        valid_id(&id, "session_id")?;
        let entry = crate::drive::orchestrator::compact(&self.shared.orchestrator, &id).await?;
        Ok(Response::new(v1::Ack { message: format!("session {id} compacted into entry {entry}") }))
    }

    async fn answer_approval(&self, request: Request<v1::ApprovalAnswer>) -> Result<Response<v1::Ack>, Status> {
        use crate::net::egress::approvals::{AnswerError, Decision};
        let id = request.get_ref().id.clone();
        let waiting =
            || Status::not_found(format!("no approval request {id} is waiting (it was answered, or it timed out)"));
        let context = self.shared.approvals.context_of(&id).ok_or_else(waiting)?;
        let caller = check(&self.shared, &request, Operation::AnswerApproval, Some(&context), None)?;
        let answer = request.into_inner();
        let decision = Decision::named(&answer.decision).ok_or_else(|| {
            Status::invalid_argument(format!(
                "decision: `{}` is not once, session, always or deny (install or decline for a skill's review; once \
                 or deny for an action)",
                answer.decision
            ))
        })?;
        let admin = match &caller {
            Caller::Host(_) => true,
            Caller::Gateway(call) => call.user.as_ref().is_some_and(|user| user.admin),
            Caller::Container(_) => false,
        };
        let by = super::person_named(&self.shared, &caller);
        let action = self.shared.approvals.is_action(&id);
        let who = match &caller {
            Caller::Gateway(call) => call.user.as_ref().map(|user| user.id.clone()),
            Caller::Host(_) | Caller::Container(_) => None,
        };
        let answered = self.shared.approvals.answer(&id, Some(&context), decision, (&by, who.as_deref()), admin);
        let decision = answered.map_err(|error| match error {
            AnswerError::AdminOnly | AnswerError::GroupInstallAdminOnly | AnswerError::NotTheSender => {
                Status::permission_denied(error.to_string())
            }
            AnswerError::NotAReviewAnswer(_)
            | AnswerError::NotAnEgressAnswer(_)
            | AnswerError::NotAnActionAnswer(_) => Status::invalid_argument(error.to_string()),
            AnswerError::NotWaiting(_) | AnswerError::NotTheirs { .. } => Status::not_found(error.to_string()),
        })?;
        let of = match decision {
            _ if action => crate::guard::audit::Kind::Taint,
            Decision::Install | Decision::Decline => crate::guard::audit::Kind::Skill,
            _ => crate::guard::audit::Kind::Egress,
        };
        let record = crate::guard::audit::Record::by(of, &caller, "answered");
        self.shared.audit.record(record.detail("approval", id.as_str()).detail("decision", decision.as_str()));
        Ok(Response::new(v1::Ack { message: format!("{id}: {}", decision.as_str()) }))
    }

    async fn cancel_turn(&self, request: Request<v1::CancelTurnRequest>) -> Result<Response<v1::Ack>, Status> {
        check(&self.shared, &request, Operation::CancelTurn, None, Some(&request.get_ref().session_id))?;
        let wanted = request.into_inner();
        valid_id(&wanted.session_id, "session_id")?;
        if !wanted.turn_id.is_empty() {
            valid_id(&wanted.turn_id, "turn_id")?;
        }
        let cancelled = self.shared.turns.cancel(&wanted.session_id, &wanted.turn_id);
        if cancelled.is_empty() {
            let what =
                if wanted.turn_id.is_empty() { "no turn".to_string() } else { format!("turn {}", wanted.turn_id) };
            return Err(Status::failed_precondition(format!(
                "{what} is running in session {}: it has finished (its reply is in the session) or never started",
                wanted.session_id
            )));
        }
        Ok(Response::new(v1::Ack { message: format!("cancelled {}", cancelled.join(", ")) }))
    }

    async fn list_model_choices(
        &self,
        request: Request<v1::ModelChoicesRequest>,
    ) -> Result<Response<v1::ModelChoices>, Status> {
        let session_id = request.get_ref().session_id.clone();
        let (context, current) = if session_id.is_empty() {
            let named = context_of(request.get_ref().context.as_ref(), "context")?;
            let context = own_context(&caller(&request)?, named)?;
            check(&self.shared, &request, Operation::ListModelChoices, Some(&context), None)?;
            (context, None)
        } else {
            valid_id(&session_id, "session_id")?;
            check(&self.shared, &request, Operation::ListModelChoices, None, Some(&session_id))?;
            let record = self
                .shared
                .sessions
                .get(&session_id)
                .ok_or_else(|| Status::from(crate::store::sessions::SessionError::NotFound(session_id.clone())))?;
            (record.context(), record.model)
        };
        let current = current
            .unwrap_or_else(|| self.shared.loaded.config.agents.settings(crate::base::auth::Role::Assistant).model.0);
        let choices = self.shared.llm.choices(&self.shared.loaded.providers, &self.shared.budgets, &context).await;
        let models = choices
            .into_iter()
            .map(|choice| v1::ModelChoice {
                available: choice.unavailable.is_none(),
                why: choice.unavailable.unwrap_or_default(),
                input_price: choice.price.map_or(0.0, |price| price.input),
                output_price: choice.price.map_or(0.0, |price| price.output),
                priced: choice.price.is_some(),
                configured: choice.configured,
                provider: choice.provider,
                name: choice.name,
            })
            .collect();
        Ok(Response::new(v1::ModelChoices { models, current }))
    }

    async fn switch_model(&self, request: Request<v1::SwitchModelRequest>) -> Result<Response<v1::Ack>, Status> {
        check(&self.shared, &request, Operation::SwitchModel, None, Some(&request.get_ref().session_id))?;
        let message = request.into_inner();
        valid_id(&message.session_id, "session_id")?;
        crate::model::llm::choices::pickable(&self.shared.loaded, &message.model).map_err(Status::invalid_argument)?;
        let record =
            self.shared.sessions.get(&message.session_id).ok_or_else(|| {
                Status::from(crate::store::sessions::SessionError::NotFound(message.session_id.clone()))
            })?;
        let previous = record
            .model
            .unwrap_or_else(|| self.shared.loaded.config.agents.settings(crate::base::auth::Role::Assistant).model.0);
        self.shared.sessions.append(
            &message.session_id,
            None,
            crate::store::sessions::NewEntry::ModelChange { previous: previous.clone(), new: message.model.clone() },
        )?;
        self.shared.sessions.set_model(&message.session_id, &message.model)?;
        Ok(Response::new(v1::Ack {
            message: format!("session {} now uses {} (was {previous})", message.session_id, message.model),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upload_on_a_full_disk_is_told_as_such_and_other_failures_keep_their_detail_in_the_log() {
        let full = crate::store::uploads::UploadError::Io(std::io::Error::from(std::io::ErrorKind::StorageFull));
        let status = upload_status(full);
        assert_eq!((status.code(), status.message()), (tonic::Code::ResourceExhausted, crate::base::state::DISK_FULL));
        let other = crate::store::uploads::UploadError::Io(std::io::Error::other("/data/x: bad block"));
        let status = upload_status(other);
        assert_eq!(status.code(), tonic::Code::Internal);
        assert!(!status.message().contains("/data"), "{}", status.message());
    }
}
