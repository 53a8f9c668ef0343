//! The gRPC surface of the daemon: the `Orchestrator` service on every socket.
//!
//! Handlers are thin: convert the request to domain types, authorize it, call a subsystem,
//! convert back. Only this module (and its children) sees tonic and prost types. RPCs whose
//! subsystem is not built yet authorize first, then answer UNIMPLEMENTED with a sentence.

mod agents;
pub mod bind;
mod egress;
mod files;
pub(crate) mod from_wire;
pub mod layer;
mod llm;
mod mcp;
mod memory;
mod people;
mod search;
mod sessions;
mod shared;
mod skills;
mod system;
mod tasks;
pub(crate) mod to_wire;
mod tools;
mod undo;

use std::sync::Arc;

use baaaht_proto::v1;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use crate::base::auth::{authorize, AuthError, Caller, Context, Operation, Target};
use crate::sandbox::container::manager::ContainerError;
pub use shared::Shared;

/// Requests one connection may have in flight at once.
const MAX_STREAMS_PER_CONNECTION: u32 = 2048;

/// The gRPC server on `incoming` (every socket's connections, tagged with where they came in),
/// each request through the request layer, until `shutdown`; then it drains what is in flight.
pub fn serve(
    shared: &Arc<Shared>,
    client_group: Option<(String, u32)>,
    incoming: tokio_stream::wrappers::ReceiverStream<std::io::Result<crate::sandbox::sockets::Conn>>,
    shutdown: tokio_util::sync::CancellationToken,
) -> impl std::future::Future<Output = Result<(), tonic::transport::Error>> {
    let gate = Arc::new(layer::Gate {
        host_policy: crate::base::auth::HostPolicy { daemon_uid: crate::base::datadir::current_uid(), client_group },
        shared: shared.clone(),
    });
    tonic::transport::Server::builder()
        // What one connection may have in flight at once (a gateway's users share one).
        .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
        // Room for a tunnel's bytes in flight (a download through a tool's proxy), in larger
        // frames: fewer window updates and frames a megabyte.
        .initial_stream_window_size(Some(baaaht_proto::client::STREAM_WINDOW))
        .initial_connection_window_size(Some(baaaht_proto::client::CONNECTION_WINDOW))
        .max_frame_size(Some(baaaht_proto::client::MAX_FRAME))
        .layer(layer::RequestLayer::new(gate))
        .add_routes(routes(shared))
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
}

impl From<ContainerError> for Status {
    fn from(error: ContainerError) -> Status {
        match error {
            ContainerError::Unavailable(reason) => Status::unavailable(reason),
            ref away if away.engine_away() => Status::unavailable(away.to_string()),
            ref full if crate::base::state::is_disk_full(full) => {
                tracing::error!(error = %baaaht_proto::error_chain(full), "the data dir's disk is full");
                Status::resource_exhausted(crate::base::state::DISK_FULL_WORK)
            }
            ContainerError::StartFailed { .. } | ContainerError::Isolation(_) => {
                Status::failed_precondition(error.to_string())
            }
            other => Status::internal(baaaht_proto::error_chain(&other)),
        }
    }
}

impl From<AuthError> for Status {
    fn from(error: AuthError) -> Status {
        if let AuthError::Unrecorded { disk_full } = error {
            return if disk_full {
                Status::resource_exhausted(crate::base::state::DISK_FULL)
            } else {
                Status::internal(error.to_string())
            };
        }
        if error.is_unauthenticated() {
            Status::unauthenticated(error.to_string())
        } else {
            Status::permission_denied(error.to_string())
        }
    }
}

fn caller<T>(request: &Request<T>) -> Result<Caller, Status> {
    // The layer authenticates every request before it gets here.
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::internal("request reached a handler without an authenticated caller"))
}

/// The turn a container's agent was working on when `request` came in (none for other callers,
/// or an agent between turns); the request layer resolves it once.
fn live_turn<T>(request: &Request<T>) -> Option<crate::base::auth::Live> {
    request.extensions().get::<layer::LiveTurn>().map(|live| live.0.clone())
}

pub(crate) use to_wire::role_ref;

/// The correlation id the request layer gave `request` (empty outside the layer, in tests).
pub(crate) fn correlation_id<T>(request: &Request<T>) -> String {
    request.extensions().get::<layer::CorrelationId>().map(|id| id.0.clone()).unwrap_or_default()
}

/// `id` as a session's, task's or person's id, or why not (naming `field`).
fn valid_id(id: &str, field: &str) -> Result<(), Status> {
    if crate::base::auth::is_valid_context_id(id) {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "{field} `{}` is not a valid id: use 1-128 letters, digits, `.`, `_` or `-`",
            id.escape_debug()
        )))
    }
}

fn context_of(reference: Option<&v1::ContextRef>, field: &str) -> Result<Option<Context>, Status> {
    let Some(reference) = reference else { return Ok(None) };
    crate::server::from_wire::context_of(reference)
        .map(Some)
        .map_err(|why| Status::invalid_argument(format!("{field}.{why}")))
}

/// Authorizes `operation` for the caller of `request` on what it names; for a user, the
/// context of a session it names is looked up and must be theirs too.
fn check<T>(
    shared: &Shared,
    request: &Request<T>,
    operation: Operation,
    context: Option<&Context>,
    session_id: Option<&str>,
) -> Result<Caller, Status> {
    let caller = caller(request)?;
    let session_context = match (&caller, session_id.filter(|id| !id.is_empty())) {
        (Caller::Gateway(_), Some(id)) => Some(
            shared
                .sessions
                .get(id)
                .map(|record| record.context())
                .ok_or_else(|| Status::not_found(format!("no session {id}")))?,
        ),
        _ => None,
    };
    let target = Target { context, session_id, session_context: session_context.as_ref(), config_section: None };
    authorize(&caller, operation, target).map_err(|error| {
        tracing::warn!(%error, operation = operation.name(), "request denied");
        Status::from(error)
    })?;
    Ok(caller)
}

/// A long-lived stream (an agent's turns, a runner's calls, a client's events) that ends the
/// moment the daemon starts shutting down: only calls that are really in flight are drained.
fn until_shutdown<T, S>(shared: &Shared, stream: S) -> BoxStream<T>
where
    S: tokio_stream::Stream<Item = Result<T, Status>> + Send + 'static,
    T: Send + 'static,
{
    Box::pin(UntilShutdown {
        stream: Box::pin(stream),
        shutdown: Box::pin(shared.lifetime.shutdown.clone().cancelled_owned()),
    })
}

/// See [`until_shutdown`].
struct UntilShutdown<T> {
    stream: BoxStream<T>,
    shutdown: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
}

impl<T> tokio_stream::Stream for UntilShutdown<T> {
    type Item = Result<T, Status>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if std::future::Future::poll(self.shutdown.as_mut(), cx).is_ready() {
            return std::task::Poll::Ready(None);
        }
        self.stream.as_mut().poll_next(cx)
    }
}

/// The context a skill request is about: a container's own (whatever it named, which
/// `check` already matched), or the one a host client names.
fn own_context(caller: &Caller, named: Option<Context>) -> Result<Context, Status> {
    match (caller, named) {
        (Caller::Container(identity), _) => Ok(identity.context.clone()),
        (Caller::Host(_) | Caller::Gateway(_), Some(context)) => Ok(context),
        (Caller::Gateway(call), None) => match &call.user {
            Some(user) => Ok(user.context()),
            None => Err(Status::invalid_argument("context: name the user or group")),
        },
        (Caller::Host(_), None) => Err(Status::invalid_argument("context: name the user or group")),
    }
}

/// `caller` stopped at a limit of `what` (`why` says which and what to do): audited, and the
/// sentence for the caller.
/// Who `caller` is, as a person reads it: a user's display name, the login of the host's user
/// (`root at the host`), a gateway's name; the audit keeps the principal.
fn person_named(shared: &Shared, caller: &Caller) -> String {
    match caller {
        Caller::Host(peer) => {
            let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
            let login = passwd.lines().find_map(|line| {
                let fields: Vec<&str> = line.split(':').collect();
                (fields.get(2) == Some(&peer.uid.to_string().as_str())).then(|| fields[0].to_string())
            });
            match login {
                Some(login) => format!("{login} at the host"),
                None => format!("the host's user {}", peer.uid),
            }
        }
        Caller::Gateway(call) => match &call.user {
            Some(user) => shared
                .identities
                .user(&user.id)
                .map(|view| view.name)
                .filter(|name| !name.trim().is_empty())
                .unwrap_or_else(|| user.id.clone()),
            None => format!("the {} gateway", call.gateway),
        },
        Caller::Container(_) => crate::guard::audit::principal(caller),
    }
}

fn limited(shared: &Shared, caller: &Caller, what: &str, why: crate::guard::limits::LimitError) -> Status {
    tracing::warn!(principal = %crate::guard::audit::principal(caller), limit = what, %why, "a caller is at a limit");
    let record = crate::guard::audit::Record::by(crate::guard::audit::Kind::Limit, caller, "refused");
    shared.audit.record(record.detail("limit", what).detail("reason", why.to_string()));
    Status::resource_exhausted(why.to_string())
}

fn role_of(value: i32) -> Result<Option<crate::base::auth::Role>, Status> {
    crate::server::from_wire::role_of(value).map_err(|why| Status::invalid_argument(why.to_string()))
}

/// The context a task request names: its group when set, else its user.
fn task_context(user_id: &str, group_id: &str) -> Result<Option<Context>, Status> {
    let (kind, id, field) = match (user_id.is_empty(), group_id.is_empty()) {
        (_, false) => (v1::ContextType::Group, group_id, "group_id"),
        (false, true) => (v1::ContextType::User, user_id, "user_id"),
        (true, true) => return Ok(None),
    };
    context_of(Some(&v1::ContextRef { r#type: kind as i32, id: id.to_string() }), field)
}

/// Every service of the daemon, for the one server that serves every socket.
pub fn routes(shared: &Arc<Shared>) -> tonic::service::Routes {
    let agents = v1::agents_server::AgentsServer::new(agents::AgentsService { shared: shared.clone() })
        .max_decoding_message_size(baaaht_proto::MAX_MESSAGE_BYTES);
    tonic::service::Routes::new(agents)
        .add_service(v1::sessions_server::SessionsServer::new(sessions::SessionsService { shared: shared.clone() }))
        .add_service(v1::skills_server::SkillsServer::new(skills::SkillsService { shared: shared.clone() }))
        .add_service(v1::memory_server::MemoryServer::new(memory::MemoryService { shared: shared.clone() }))
        .add_service(v1::tasks_server::TasksServer::new(tasks::TasksService { shared: shared.clone() }))
        .add_service(v1::system_server::SystemServer::new(system::SystemService { shared: shared.clone() }))
        .add_service(v1::gateways_server::GatewaysServer::new(people::GatewaysService { shared: shared.clone() }))
        .add_service(v1::admin_server::AdminServer::new(people::AdminService { shared: shared.clone() }))
}
