//! The set of sockets the daemon listens on: the host clients' socket and one socket per
//! container (DESIGN.md §1, "How a container reaches the daemon").
//!
//! Every accepted connection is tagged with the socket it arrived on and handed to the one
//! tonic server through a channel. The tag *is* the caller's identity for containers; the
//! bearer token is checked on top (see `server/layer.rs`). Sockets are created here and removed here.
//!
//! No container or gateway can take the descriptors the others need ([`ConnectionLimits`]):
//! each socket holds at most its own number of connections, all of them together at most a
//! share of the daemon's descriptors (the host socket's clients and the daemon's own files
//! keep the rest), and a connection that has not authenticated a request within
//! [`ConnectionLimits::probation`] is closed. A socket at its cap is not accepted on until one
//! of its connections ends (what waits stays in the kernel's backlog, costing the daemon
//! nothing), and that is audited once a minute.

use std::collections::HashMap;
use std::future::Future as _;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::unix::UCred;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::base::auth::{self, ContainerIdentity, CONTAINER_UID};
use crate::base::datadir::MAX_SOCKET_PATH;
use crate::base::lifetime::{Subsystem, Work};
use crate::guard::audit::{Audit, Kind, Record};

/// The socket file name inside a container's socket folder.
pub const CONTAINER_SOCKET_NAME: &str = "daemon.sock";

/// The socket file name inside a gateway's socket folder.
pub const GATEWAY_SOCKET_NAME: &str = "daemon.sock";

/// Where a connection came in.
#[derive(Debug, Clone)]
pub enum Origin {
    Host,
    Container(Arc<ContainerEndpoint>),
    Gateway(Arc<GatewayEndpoint>),
}

/// A gateway's socket as the request layer knows it: the gateway's name (its record is the
/// gateway registry's) and the hash of its token.
#[derive(Debug)]
pub struct GatewayEndpoint {
    pub name: String,
    token_sha256: String,
    revoked: AtomicBool,
    /// The SHA-256 of the token of the run the daemon started, while it runs.
    run_token: Mutex<Option<String>>,
}

impl GatewayEndpoint {
    /// True when `presented` is this gateway's live token: the one printed at registration, or
    /// that of the run the daemon started.
    pub fn accepts(&self, presented: &str) -> bool {
        if self.revoked.load(Ordering::Acquire) {
            return false;
        }
        let presented = auth::token_sha256(presented);
        let run = self.run_token.lock().unwrap_or_else(PoisonError::into_inner).clone();
        auth::tokens_equal(&self.token_sha256, &presented)
            || run.is_some_and(|run| auth::tokens_equal(&run, &presented))
    }

    /// Accepts the token whose SHA-256 is `hash` for the daemon's current run (none: no run).
    pub fn set_run_token(&self, hash: Option<String>) {
        *self.run_token.lock().unwrap_or_else(PoisonError::into_inner) = hash;
    }

    pub fn revoke(&self) {
        self.revoked.store(true, Ordering::Release);
    }
}

/// A container's socket, its identity and the hash of its token. The token itself exists only
/// in the container's environment; the hash lets the daemon re-adopt the container after a
/// crash (`data/state/containers.json` keeps it).
///
/// A container started for a warm pool has no identity yet: it serves nobody, and every call
/// it makes waits (authenticated, answered by nothing) until the daemon binds it to a session
/// and context at claim. An endpoint is bound once; nothing binds it again, so a container that
/// served one person can never serve another.
#[derive(Debug)]
pub struct ContainerEndpoint {
    pub name: String,
    pub role: auth::Role,
    identity: tokio::sync::watch::Sender<Option<Arc<ContainerIdentity>>>,
    /// How many calls wait for the binding now (a pooled container that is up and ready has
    /// one; its process gone, none).
    asked: tokio::sync::watch::Sender<usize>,
    token_sha256: String,
    revoked: std::sync::atomic::AtomicBool,
}

/// Why a container's endpoint could not be bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error("container {0} has no socket (it was removed)")]
    Unknown(String),
    #[error("container {0} is bound already: a container serves one session only")]
    Bound(String),
}

impl ContainerEndpoint {
    /// True when `presented` is this container's live token.
    pub fn accepts(&self, presented: &str) -> bool {
        !self.revoked.load(std::sync::atomic::Ordering::Acquire)
            && auth::tokens_equal(&self.token_sha256, &auth::token_sha256(presented))
    }

    /// Who the container serves; none while it waits in a pool.
    pub fn identity(&self) -> Option<Arc<ContainerIdentity>> {
        self.identity.borrow().clone()
    }

    /// Who the container serves, once it is bound (at once when it was started bound).
    pub async fn bound(&self) -> Arc<ContainerIdentity> {
        let mut watching = self.identity.subscribe();
        if let Some(identity) = watching.borrow_and_update().clone() {
            return identity;
        }
        self.asked.send_modify(|waiting| *waiting += 1);
        // Counted off when the call ends, bound or not (its connection gone with its process).
        let _waiting = Waiting(&self.asked);
        loop {
            if let Some(identity) = watching.borrow_and_update().clone() {
                return identity;
            }
            if watching.changed().await.is_err() {
                // The endpoint is dropped only with its socket; the call's connection goes too.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Binds the container to `session_id` and `context`, once.
    fn bind(&self, session_id: &str, context: &auth::Context) -> Result<Arc<ContainerIdentity>, BindError> {
        let identity = Arc::new(ContainerIdentity {
            name: self.name.clone(),
            role: self.role,
            session_id: session_id.to_string(),
            context: context.clone(),
        });
        let bound = self.identity.send_if_modified(|now| {
            if now.is_some() {
                return false;
            }
            *now = Some(identity.clone());
            true
        });
        if bound {
            Ok(identity)
        } else {
            Err(BindError::Bound(self.name.clone()))
        }
    }

    /// Waits until a call of the container waits for its binding: the container is up.
    pub async fn ready(&self) {
        let mut asked = self.asked.subscribe();
        // silent-ok: the sender lives as long as `self`.
        let _ = asked.wait_for(|waiting| *waiting > 0).await;
    }

    /// Whether a call of the container waits for its binding now.
    pub fn waiting(&self) -> bool {
        *self.asked.borrow() > 0
    }
}

/// A call waiting for its container's binding, counted while it waits.
struct Waiting<'a>(&'a tokio::sync::watch::Sender<usize>);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|waiting| *waiting = waiting.saturating_sub(1));
    }
}

/// Connection info tonic attaches to every request of a connection.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    pub origin: Origin,
    pub credentials: Option<UCred>,
    /// Set by the request layer once a request on the connection authenticated: the
    /// connection's probation is over.
    pub authenticated: Arc<AtomicBool>,
}

/// How many connections the daemon takes from containers and gateways, and how long one may
/// stay without authenticating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections one container's socket holds at once (an agent or a runner needs one or
    /// two).
    pub per_container: usize,
    /// Connections one gateway's socket holds at once (a gateway multiplexes its users over
    /// one).
    pub per_gateway: usize,
    /// Every container's and gateway's connections together.
    pub shared: usize,
    pub probation: Duration,
}

impl ConnectionLimits {
    /// The limits for a daemon that may hold `descriptors` file descriptors: containers and
    /// gateways together get half of them (at least 64).
    pub fn for_descriptors(descriptors: u64) -> ConnectionLimits {
        let shared = usize::try_from(descriptors / 2).unwrap_or(usize::MAX).max(64);
        ConnectionLimits { per_container: 32, per_gateway: 64, shared, probation: Duration::from_secs(10) }
    }
}

/// An accepted connection and the socket it came from, holding its places under the socket's
/// caps until it is dropped.
#[derive(Debug)]
pub struct Conn {
    stream: UnixStream,
    origin: Origin,
    authenticated: Arc<AtomicBool>,
    /// When a connection that has not authenticated is closed; none for the host's.
    probation: Option<Pin<Box<tokio::time::Sleep>>>,
    _places: Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        PeerInfo {
            origin: self.origin.clone(),
            credentials: self.stream.peer_cred().ok(),
            authenticated: self.authenticated.clone(),
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(deadline) = this.probation.as_mut() {
            if this.authenticated.load(Ordering::Acquire) {
                this.probation = None;
            } else if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no authenticated request on this connection in time",
                )));
            }
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ListenerError {
    #[error("container name `{0}` is not usable as a folder name (letters, digits, `.`, `_`, `-`)")]
    BadName(String),
    #[error("a socket for container {0} already exists")]
    Exists(String),
    #[error("socket path {} is {len} bytes, more than the {MAX_SOCKET_PATH} the kernel allows: use a shorter data dir", path.display())]
    PathTooLong { path: PathBuf, len: usize },
    #[error("cannot create the socket {}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot generate a container token")]
    Token(#[source] getrandom::Error),
    #[error("the daemon is shutting down")]
    ShuttingDown,
}

/// A container's socket as handed to the container runtime.
#[derive(Debug, Clone)]
pub struct ContainerSocket {
    /// The folder to bind-mount into the container (it holds only the socket).
    pub folder: PathBuf,
    /// The socket inside `folder`.
    pub path: PathBuf,
    /// The value of the container's `BAAAHT_CONTAINER_TOKEN`; empty for an adopted container,
    /// whose token only the container knows.
    pub token: String,
    pub token_sha256: String,
}

struct Registered {
    endpoint: Arc<ContainerEndpoint>,
    cancel: CancellationToken,
    folder: PathBuf,
}

/// Every socket the daemon serves, feeding one stream of connections.
pub struct ListenerSet {
    connections: mpsc::Sender<io::Result<Conn>>,
    cancel: CancellationToken,
    tracker: TaskTracker,
    limits: ConnectionLimits,
    /// The places of [`ConnectionLimits::shared`].
    shared_places: Arc<Semaphore>,
    audit: Audit,
    containers_dir: PathBuf,
    containers: Mutex<HashMap<String, Registered>>,
    gateways: Mutex<HashMap<String, RegisteredGateway>>,
}

struct RegisteredGateway {
    endpoint: Arc<GatewayEndpoint>,
    cancel: CancellationToken,
    folder: PathBuf,
}

impl std::fmt::Debug for ListenerSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerSet").field("containers_dir", &self.containers_dir).finish_non_exhaustive()
    }
}

impl ListenerSet {
    /// A set whose container sockets live under `containers_dir`; returns the stream of
    /// connections for the tonic server.
    pub fn new(
        containers_dir: PathBuf,
        limits: ConnectionLimits,
        audit: Audit,
        cancel: CancellationToken,
        tracker: TaskTracker,
    ) -> (Arc<ListenerSet>, tokio_stream::wrappers::ReceiverStream<io::Result<Conn>>) {
        let (connections, receiver) = mpsc::channel(64);
        let set = ListenerSet {
            connections,
            cancel,
            tracker,
            limits,
            shared_places: Arc::new(Semaphore::new(limits.shared)),
            audit,
            containers_dir,
            containers: Mutex::default(),
            gateways: Mutex::default(),
        };
        (Arc::new(set), tokio_stream::wrappers::ReceiverStream::new(receiver))
    }

    /// Accepts host clients on `listener` until shutdown.
    pub fn serve_host(&self, listener: UnixListener) {
        let span = tracing::info_span!(parent: None, "accept", socket = "host");
        self.tracker.spawn(
            accept_loop(listener, Origin::Host, None, self.connections.clone(), self.cancel.clone()).instrument(span),
        );
    }

    /// Creates the socket of a container with `identity`, with a fresh token, and starts
    /// accepting on it.
    pub fn add_container(&self, identity: ContainerIdentity) -> Result<ContainerSocket, ListenerError> {
        let (name, role) = (identity.name.clone(), identity.role);
        self.add(&name, role, Some(identity))
    }

    /// Creates the socket of a pooled container `name` of `role`, bound to nobody: its calls
    /// wait until [`ListenerSet::bind`] binds it.
    pub fn add_unbound(&self, name: &str, role: auth::Role) -> Result<ContainerSocket, ListenerError> {
        self.add(name, role, None)
    }

    fn add(
        &self,
        name: &str,
        role: auth::Role,
        identity: Option<ContainerIdentity>,
    ) -> Result<ContainerSocket, ListenerError> {
        let token = auth::new_token().map_err(ListenerError::Token)?;
        let hash = auth::token_sha256(&token);
        let mut socket = self.register(name, role, identity, hash, false)?;
        socket.token = token;
        Ok(socket)
    }

    /// Binds pooled container `name` to `session_id` and `context`: its waiting calls go on as
    /// that session's. Once only.
    pub fn bind(
        &self,
        name: &str,
        session_id: &str,
        context: &auth::Context,
    ) -> Result<Arc<ContainerIdentity>, BindError> {
        let endpoint = self.container_endpoint(name).ok_or_else(|| BindError::Unknown(name.to_string()))?;
        endpoint.bind(session_id, context)
    }

    /// The endpoint of container `name`, while its socket is served.
    pub fn container_endpoint(&self, name: &str) -> Option<Arc<ContainerEndpoint>> {
        self.containers.lock().unwrap_or_else(PoisonError::into_inner).get(name).map(|r| r.endpoint.clone())
    }

    /// Re-creates the socket of a running container found after a restart, in the folder it
    /// already has mounted, accepting the token whose hash was recorded.
    pub fn adopt_container(
        &self,
        identity: ContainerIdentity,
        token_sha256: String,
    ) -> Result<ContainerSocket, ListenerError> {
        let (name, role) = (identity.name.clone(), identity.role);
        self.register(&name, role, Some(identity), token_sha256, true)
    }

    fn register(
        &self,
        name: &str,
        role: auth::Role,
        identity: Option<ContainerIdentity>,
        token_sha256: String,
        reuse_folder: bool,
    ) -> Result<ContainerSocket, ListenerError> {
        if self.cancel.is_cancelled() {
            return Err(ListenerError::ShuttingDown);
        }
        let name = name.to_string();
        if !auth::is_valid_context_id(&name) {
            return Err(ListenerError::BadName(name));
        }
        let folder = self.containers_dir.join(&name);
        let path = folder.join(CONTAINER_SOCKET_NAME);
        let len = path.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(ListenerError::PathTooLong { path, len });
        }
        let mut containers = self.containers.lock().unwrap_or_else(PoisonError::into_inner);
        if containers.contains_key(&name) {
            return Err(ListenerError::Exists(name));
        }
        let listener = create_container_socket(&folder, &path, reuse_folder)?;
        let endpoint = Arc::new(ContainerEndpoint {
            name: name.clone(),
            role,
            identity: tokio::sync::watch::channel(identity.map(Arc::new)).0,
            asked: tokio::sync::watch::channel(0).0,
            token_sha256: token_sha256.clone(),
            revoked: std::sync::atomic::AtomicBool::new(false),
        });
        let cancel = self.cancel.child_token();
        let span = tracing::info_span!(parent: None, "accept", socket = "container", container = %name);
        // Named as the audit finds it when a cap is reached: a pooled container by the
        // session that claimed it, once one has.
        let principal: Principal = {
            let endpoint = endpoint.clone();
            Arc::new(move || match endpoint.identity.borrow().as_ref() {
                Some(identity) => format!("container:{}:{} ({})", endpoint.role, endpoint.name, identity.context),
                None => format!("container:{}:{} (pooled)", endpoint.role, endpoint.name),
            })
        };
        let caps = self.caps(self.limits.per_container, principal);
        self.tracker.spawn(
            accept_loop(
                listener,
                Origin::Container(endpoint.clone()),
                Some(caps),
                self.connections.clone(),
                cancel.clone(),
            )
            .instrument(span),
        );
        containers.insert(name, Registered { endpoint, cancel, folder: folder.clone() });
        Ok(ContainerSocket { folder, path, token: String::new(), token_sha256 })
    }

    /// Creates gateway `name`'s socket in `folder` (the daemon's, 0700; the socket 0600) and
    /// starts accepting on it; its calls are authenticated with the token whose SHA-256 is
    /// `token_sha256`.
    pub fn add_gateway(&self, name: &str, token_sha256: &str, folder: PathBuf) -> Result<PathBuf, ListenerError> {
        if self.cancel.is_cancelled() {
            return Err(ListenerError::ShuttingDown);
        }
        let name = name.to_string();
        let path = folder.join(GATEWAY_SOCKET_NAME);
        let len = path.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(ListenerError::PathTooLong { path, len });
        }
        let mut gateways = self.gateways.lock().unwrap_or_else(PoisonError::into_inner);
        if gateways.contains_key(&name) {
            return Err(ListenerError::Exists(name));
        }
        let create = |source| ListenerError::Create { path: path.clone(), source };
        match std::fs::remove_dir_all(&folder) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(create(error)),
            _ => {}
        }
        crate::base::state::private_dir(&folder).map_err(create)?;
        let listener = UnixListener::bind(&path).map_err(create)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(create)?;
        let endpoint = Arc::new(GatewayEndpoint {
            name: name.clone(),
            token_sha256: token_sha256.to_string(),
            revoked: AtomicBool::new(false),
            run_token: Mutex::new(None),
        });
        let cancel = self.cancel.child_token();
        let span = tracing::info_span!(parent: None, "accept", socket = "gateway", gateway = %name);
        let principal = format!("gateway:{name}");
        let caps = self.caps(self.limits.per_gateway, Arc::new(move || principal.clone()));
        self.tracker.spawn(
            accept_loop(
                listener,
                Origin::Gateway(endpoint.clone()),
                Some(caps),
                self.connections.clone(),
                cancel.clone(),
            )
            .instrument(span),
        );
        gateways.insert(name, RegisteredGateway { endpoint, cancel, folder });
        Ok(path)
    }

    /// Revokes a gateway's token and removes its socket.
    pub fn remove_gateway(&self, name: &str) {
        let removed = self.gateways.lock().unwrap_or_else(PoisonError::into_inner).remove(name);
        if let Some(gateway) = removed {
            retire_gateway(gateway);
        }
    }

    /// The endpoint of gateway `name`, while its socket is served.
    pub fn gateway_endpoint(&self, name: &str) -> Option<Arc<GatewayEndpoint>> {
        self.gateways.lock().unwrap_or_else(PoisonError::into_inner).get(name).map(|gateway| gateway.endpoint.clone())
    }

    /// The gateway whose token this is, if any (to explain a token sent to the wrong socket).
    pub fn find_gateway_token(&self, presented: &str) -> Option<Arc<GatewayEndpoint>> {
        let gateways = self.gateways.lock().unwrap_or_else(PoisonError::into_inner);
        gateways.values().find(|gateway| gateway.endpoint.accepts(presented)).map(|gateway| gateway.endpoint.clone())
    }

    /// Revokes a container's token, stops accepting on its socket and removes the socket.
    /// Calls already authenticated finish; every later call is refused.
    pub fn remove_container(&self, name: &str) {
        let removed = self.containers.lock().unwrap_or_else(PoisonError::into_inner).remove(name);
        if let Some(registered) = removed {
            retire(registered);
        }
    }

    /// The container whose token this is, if any (to explain a token sent to the wrong socket).
    pub fn find_token(&self, presented: &str) -> Option<Arc<ContainerEndpoint>> {
        let containers = self.containers.lock().unwrap_or_else(PoisonError::into_inner);
        containers.values().find(|registered| registered.endpoint.accepts(presented)).map(|r| r.endpoint.clone())
    }

    pub fn container_count(&self) -> usize {
        self.containers.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Removes socket folders that belong to no registered container (left by a crash).
    pub fn remove_stale_folders(&self) {
        let containers = self.containers.lock().unwrap_or_else(PoisonError::into_inner);
        let Ok(entries) = std::fs::read_dir(&self.containers_dir) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if containers.contains_key(&name) {
                continue;
            }
            if let Err(error) = std::fs::remove_dir_all(entry.path()) {
                tracing::warn!(folder = %entry.path().display(), %error, "cannot remove a stale socket folder");
            }
        }
    }

    /// Removes every container and gateway socket (at shutdown).
    pub fn remove_all(&self) {
        let drained: Vec<Registered> =
            self.containers.lock().unwrap_or_else(PoisonError::into_inner).drain().map(|(_, r)| r).collect();
        drained.into_iter().for_each(retire);
        let gateways: Vec<RegisteredGateway> =
            self.gateways.lock().unwrap_or_else(PoisonError::into_inner).drain().map(|(_, g)| g).collect();
        gateways.into_iter().for_each(retire_gateway);
    }
}

impl ListenerSet {
    fn caps(&self, own: usize, principal: Principal) -> Caps {
        Caps {
            own: Arc::new(Semaphore::new(own)),
            shared: self.shared_places.clone(),
            principal,
            audit: self.audit.clone(),
            probation: self.limits.probation,
        }
    }
}

/// Who a socket serves, as the audit log names them (asked when it is needed).
type Principal = Arc<dyn Fn() -> String + Send + Sync>;

/// The caps of one container's or gateway's socket.
struct Caps {
    own: Arc<Semaphore>,
    shared: Arc<Semaphore>,
    /// As the audit log names who is at a cap.
    principal: Principal,
    audit: Audit,
    probation: Duration,
}

impl Caps {
    /// Places under both caps, waiting (not accepting) while either is full; none when
    /// cancelled. A wait is logged and audited at most once a minute.
    async fn places(
        &self,
        last_told: &mut Option<Instant>,
        cancel: &CancellationToken,
    ) -> Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)> {
        let mut take = |semaphore: &Arc<Semaphore>, which: &str| match semaphore.clone().try_acquire_owned() {
            Ok(permit) => Ok(permit),
            Err(_) => {
                if last_told.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                    *last_told = Some(Instant::now());
                    let principal = (self.principal)();
                    tracing::warn!(%principal, cap = which, "a socket is at its connection cap; more connections wait");
                    let record = Record::new(Kind::Limit, principal.as_str(), "refused")
                        .detail("limit", format!("connections ({which})"));
                    self.audit.record(record);
                }
                Err(semaphore.clone())
            }
        };
        let own = match take(&self.own, "its own") {
            Ok(permit) => permit,
            Err(semaphore) => tokio::select! {
                () = cancel.cancelled() => return None,
                permit = semaphore.acquire_owned() => permit.ok()?,
            },
        };
        let shared = match take(&self.shared, "every container's and gateway's together") {
            Ok(permit) => permit,
            Err(semaphore) => tokio::select! {
                () = cancel.cancelled() => return None,
                permit = semaphore.acquire_owned() => permit.ok()?,
            },
        };
        Some((own, shared))
    }
}

fn retire_gateway(gateway: RegisteredGateway) {
    gateway.endpoint.revoke();
    gateway.cancel.cancel();
    if let Err(error) = std::fs::remove_dir_all(&gateway.folder) {
        if error.kind() != io::ErrorKind::NotFound {
            tracing::warn!(folder = %gateway.folder.display(), %error, "cannot remove a gateway socket folder");
        }
    }
}

fn retire(registered: Registered) {
    registered.endpoint.revoked.store(true, std::sync::atomic::Ordering::Release);
    registered.cancel.cancel();
    if let Err(error) = std::fs::remove_dir_all(&registered.folder) {
        if error.kind() != io::ErrorKind::NotFound {
            tracing::warn!(folder = %registered.folder.display(), %error, "cannot remove a container socket folder");
        }
    }
}

/// The folder is 0700 and owned by the container uid when the daemon can chown (it runs as
/// root); otherwise it stays the daemon's with the socket 0666. Either way only the daemon can
/// reach it on the host: its parent is the daemon's private `data/run`.
fn create_container_socket(folder: &Path, path: &Path, reuse_folder: bool) -> Result<UnixListener, ListenerError> {
    let create = |source| ListenerError::Create { path: path.to_path_buf(), source };
    let remove = |result: io::Result<()>| match result {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(create(error)),
        _ => Ok(()),
    };
    if reuse_folder && folder.is_dir() {
        // An adopted container has this very folder mounted: only the dead socket goes.
        remove(std::fs::remove_file(path))?;
    } else {
        // A folder left by a crash holds a dead socket: replace it.
        remove(std::fs::remove_dir_all(folder))?;
        std::fs::DirBuilder::new().mode(0o700).create(folder).map_err(create)?;
    }
    let listener = UnixListener::bind(path).map_err(create)?;
    let as_root = std::os::unix::fs::chown(folder, Some(CONTAINER_UID), Some(CONTAINER_UID)).is_ok()
        && std::os::unix::fs::chown(path, Some(CONTAINER_UID), Some(CONTAINER_UID)).is_ok();
    let (folder_mode, socket_mode) = if as_root { (0o700, 0o600) } else { (0o711, 0o666) };
    std::fs::set_permissions(folder, std::fs::Permissions::from_mode(folder_mode)).map_err(create)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(socket_mode)).map_err(create)?;
    Ok(listener)
}

async fn accept_loop(
    listener: UnixListener,
    origin: Origin,
    caps: Option<Caps>,
    connections: mpsc::Sender<io::Result<Conn>>,
    cancel: CancellationToken,
) {
    let mut last_told = None;
    loop {
        let places = match &caps {
            Some(caps) => match caps.places(&mut last_told, &cancel).await {
                Some(places) => Some(places),
                None => return,
            },
            None => None,
        };
        let accepted = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                let probation = caps.as_ref().map(|caps| Box::pin(tokio::time::sleep(caps.probation)));
                let authenticated = Arc::new(AtomicBool::new(false));
                let conn = Conn { stream, origin: origin.clone(), authenticated, probation, _places: places };
                if connections.send(Ok(conn)).await.is_err() {
                    return; // The server stopped.
                }
            }
            Err(error) => {
                // Out of file descriptors and similar: back off briefly instead of spinning.
                tracing::warn!(%error, "cannot accept a connection");
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
                }
            }
        }
    }
}

impl Subsystem for ListenerSet {
    fn name(&self) -> &'static str {
        "sockets"
    }

    /// Every container's and gateway's socket goes (the host socket is the composer's).
    fn drain(self: Arc<Self>) -> Work {
        Box::pin(async move { self.remove_all() })
    }
}
