//! The shared gRPC client: connect over a Unix socket, attach the bearer token and a correlation
//! id to every call, and reconnect with exponential backoff.
//!
//! Every baaaht component that talks to the daemon (CLI, TUI, agents, tool runners, gateways)
//! goes through [`connect`], so connection errors read the same everywhere.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::v1;
use crate::CORRELATION_ID_HEADER;

/// The channel every service client of a [`Client`] shares, with the caller's metadata.
pub type Intercepted = InterceptedService<Channel, CallMetadata>;

/// A connection to the daemon: one channel, a client per service (see `proto/baaaht/v1/`, one file per service).
/// Clones share the channel.
#[derive(Debug, Clone)]
pub struct Client {
    /// Agent containers and tool runners.
    pub agents: v1::agents_client::AgentsClient<Intercepted>,
    pub sessions: v1::sessions_client::SessionsClient<Intercepted>,
    pub skills: v1::skills_client::SkillsClient<Intercepted>,
    pub memory: v1::memory_client::MemoryClient<Intercepted>,
    pub tasks: v1::tasks_client::TasksClient<Intercepted>,
    pub system: v1::system_client::SystemClient<Intercepted>,
    /// What gateways ask for their users.
    pub gateways: v1::gateways_client::GatewaysClient<Intercepted>,
    pub admin: v1::admin_client::AdminClient<Intercepted>,
}

impl Client {
    fn new(channel: Channel, metadata: CallMetadata) -> Client {
        let service = InterceptedService::new(channel, metadata);
        Client {
            agents: v1::agents_client::AgentsClient::new(service.clone())
                .max_decoding_message_size(crate::MAX_MESSAGE_BYTES),
            sessions: v1::sessions_client::SessionsClient::new(service.clone())
                .max_decoding_message_size(crate::MAX_MESSAGE_BYTES),
            skills: v1::skills_client::SkillsClient::new(service.clone())
                .max_decoding_message_size(crate::MAX_MESSAGE_BYTES),
            memory: v1::memory_client::MemoryClient::new(service.clone())
                .max_decoding_message_size(crate::MAX_MESSAGE_BYTES),
            tasks: v1::tasks_client::TasksClient::new(service.clone())
                .max_decoding_message_size(crate::MAX_MESSAGE_BYTES),
            system: v1::system_client::SystemClient::new(service.clone())
                .max_decoding_message_size(crate::MAX_MESSAGE_BYTES),
            gateways: v1::gateways_client::GatewaysClient::new(service.clone())
                .max_decoding_message_size(crate::MAX_MESSAGE_BYTES),
            admin: v1::admin_client::AdminClient::new(service).max_decoding_message_size(crate::MAX_MESSAGE_BYTES),
        }
    }
}

/// How a connection attempt is retried.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// Delay before the first retry.
    pub initial: Duration,
    /// Upper bound for the delay between two attempts.
    pub max: Duration,
    /// Give up once this much time has passed since the first attempt.
    pub give_up_after: Duration,
}

impl Backoff {
    /// One attempt, no retry: for interactive commands that should answer at once.
    pub const ONCE: Backoff = Backoff { initial: Duration::ZERO, max: Duration::ZERO, give_up_after: Duration::ZERO };

    /// For long-lived containers: retry for up to two minutes, doubling from 50 ms to 5 s.
    pub const PERSISTENT: Backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_secs(5),
        give_up_after: Duration::from_secs(120),
    };

    fn next(&self, delay: Duration) -> Duration {
        (delay * 2).clamp(self.initial, self.max)
    }
}

/// Why the daemon could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("daemon not running at {}", path.display())]
    NotRunning { path: PathBuf },
    #[error("permission denied on {}: the socket belongs to the daemon's user and group", path.display())]
    PermissionDenied { path: PathBuf },
    #[error("cannot connect to {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot set up a gRPC channel to {}", path.display())]
    Transport {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
}

/// Adds the bearer token and the correlation id to every outgoing call.
#[derive(Debug, Clone)]
pub struct CallMetadata {
    token: Option<MetadataValue<tonic::metadata::Ascii>>,
    correlation_id: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl tonic::service::Interceptor for CallMetadata {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let metadata = request.metadata_mut();
        if let Some(token) = &self.token {
            metadata.insert("authorization", token.clone());
        }
        if !metadata.contains_key(CORRELATION_ID_HEADER) {
            let id = match &self.correlation_id {
                Some(id) => id.clone(),
                None => new_correlation_id(),
            };
            metadata.insert(CORRELATION_ID_HEADER, id);
        }
        Ok(request)
    }
}

fn new_correlation_id() -> MetadataValue<tonic::metadata::Ascii> {
    // A hyphenated UUID is always valid ASCII metadata.
    MetadataValue::try_from(uuid::Uuid::new_v4().to_string()).unwrap_or_else(|_| MetadataValue::from_static("invalid"))
}

/// Options for [`connect`].
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Bearer token (containers); host clients are identified by their peer credentials.
    pub token: Option<String>,
    /// A fixed correlation id for every call; when absent each call gets a fresh one.
    pub correlation_id: Option<String>,
    /// Retry policy for the first connection and for every reconnection.
    pub backoff: Backoff,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions { token: None, correlation_id: None, backoff: Backoff::ONCE }
    }
}

/// Connects a gateway to its socket `path` with its token — read from `token_file`, else from
/// `$BAAAHT_GATEWAY_TOKEN` — waiting for the daemon as long as it takes. The error is a
/// sentence for the gateway's log.
pub async fn connect_gateway(path: &Path, token_file: Option<&Path>) -> Result<Client, String> {
    let token = match token_file {
        Some(file) => {
            std::fs::read_to_string(file).map_err(|error| format!("cannot read {}: {error}", file.display()))?
        }
        None => std::env::var("BAAAHT_GATEWAY_TOKEN")
            .map_err(|_unset| "give the gateway's token: --token-file PATH or $BAAAHT_GATEWAY_TOKEN".to_string())?,
    };
    let options =
        ConnectOptions { token: Some(token.trim().to_string()), correlation_id: None, backoff: Backoff::PERSISTENT };
    connect(path, options).await.map_err(|error| error.to_string())
}

/// Connects to the orchestrator socket at `path`.
///
/// The first connection is made before this returns, so a missing daemon is reported here as
/// [`ConnectError::NotRunning`]. Later reconnections use the same backoff.
pub async fn connect(path: &Path, options: ConnectOptions) -> Result<Client, ConnectError> {
    let channel = channel(path, options.backoff).await?;
    let metadata = CallMetadata {
        token: options.token.as_deref().and_then(|token| MetadataValue::try_from(format!("Bearer {token}")).ok()),
        correlation_id: options.correlation_id.as_deref().and_then(|id| MetadataValue::try_from(id).ok()),
    };
    Ok(Client::new(channel, metadata))
}

/// HTTP/2 flow-control windows and frame size on the daemon's sockets: a tunnel's bytes (a
/// download through a tool's proxy) flow without waiting on window updates every 64 KiB.
pub const STREAM_WINDOW: u32 = 4 << 20;
pub const CONNECTION_WINDOW: u32 = 16 << 20;
pub const MAX_FRAME: u32 = 256 << 10;

/// A tonic channel over the Unix socket at `path`, reconnecting with `backoff`.
pub async fn channel(path: &Path, backoff: Backoff) -> Result<Channel, ConnectError> {
    // Fail early with a sentence rather than inside the lazy channel.
    connect_stream(path, backoff).await?;
    // The URI is required by tonic but never resolved: the connector below ignores it.
    let endpoint = Endpoint::from_static("http://baaaht.sock")
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME);
    let socket = path.to_path_buf();
    let connector = tower::service_fn(move |_: Uri| {
        let socket = socket.clone();
        async move { connect_stream(&socket, backoff).await.map(TokioIo::new).map_err(std::io::Error::other) }
    });
    Ok(endpoint.connect_with_connector_lazy(connector))
}

async fn connect_stream(path: &Path, backoff: Backoff) -> Result<UnixStream, ConnectError> {
    let started = tokio::time::Instant::now();
    let mut delay = backoff.initial;
    loop {
        match UnixStream::connect(path).await {
            Ok(stream) => return Ok(stream),
            Err(error) => {
                let error = classify(path, error);
                let waited = started.elapsed();
                if waited + delay > backoff.give_up_after {
                    return Err(error);
                }
                tokio::time::sleep(delay).await;
                delay = backoff.next(delay);
            }
        }
    }
}

fn classify(path: &Path, source: std::io::Error) -> ConnectError {
    let path = path.to_path_buf();
    match source.kind() {
        ErrorKind::NotFound | ErrorKind::ConnectionRefused => ConnectError::NotRunning { path },
        ErrorKind::PermissionDenied => ConnectError::PermissionDenied { path },
        _ => ConnectError::Io { path, source },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_socket_reads_not_running() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("absent.sock");
        let error = connect(&path, ConnectOptions::default()).await.expect_err("no daemon");
        assert!(matches!(error, ConnectError::NotRunning { .. }), "{error:?}");
        assert!(error.to_string().starts_with("daemon not running at "), "{error}");
    }

    #[tokio::test]
    async fn retries_until_the_socket_appears() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("late.sock");
        let bind_path = path.clone();
        let binder = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(120)).await;
            tokio::net::UnixListener::bind(&bind_path).expect("bind")
        });
        let backoff = Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(40),
            give_up_after: Duration::from_secs(5),
        };
        let stream = connect_stream(&path, backoff).await;
        let _listener = binder.await.expect("binder");
        assert!(stream.is_ok(), "{stream:?}");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let backoff = Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(300),
            give_up_after: Duration::from_secs(1),
        };
        let mut delay = backoff.initial;
        let mut seen = vec![];
        for _ in 0..5 {
            seen.push(delay.as_millis());
            delay = backoff.next(delay);
        }
        assert_eq!(seen, vec![50, 100, 200, 300, 300]);
    }
}
