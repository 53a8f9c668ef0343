//! The running MCP servers: one container per context and server, started on first use. Its
//! relay (`baaaht-agent mcp`, the container's init) connects over RelayMcp; the daemon sends it
//! the launch (command, arguments, the server's environment with secrets resolved) and then
//! speaks MCP (`rmcp`) over the relayed stdio.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baaaht_proto::v1;
use rmcp::model::{CallToolRequestParams, ClientConfig, ContentBlock, Implementation, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::{mpsc, watch};

use super::config::Server;
use crate::auth::{ContainerIdentity, Context, Role};
use crate::container::manager::{ContainerManager, RunRequest};
use crate::health::{ProbeSlot, Probed};

/// How long a started container has to connect its relay, and the server to answer
/// `initialize`.
const START_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("MCP server `{server}` could not be started: {why}")]
    Start { server: String, why: String },
    #[error("MCP server `{server}` has no tool `{tool}`")]
    NoTool { server: String, tool: String },
    #[error("MCP server `{server}` did not answer within {seconds} s")]
    Timeout { server: String, seconds: u64 },
    #[error("MCP server `{server}` stopped while it was asked ({why})")]
    Gone { server: String, why: String },
    #[error("MCP server `{server}` refused the call: {why}")]
    Refused { server: String, why: String },
}

/// A relay that connected and waits to be claimed by the start that made its container.
struct Attached {
    down: mpsc::Sender<v1::McpDown>,
    up: tonic::Streaming<v1::McpUp>,
    identity: Probed,
}

/// A started server's relay, for the health monitor.
struct Relay {
    down: mpsc::Sender<v1::McpDown>,
    probe: Arc<ProbeSlot>,
    identity: Probed,
}

/// A server that runs: its MCP session and what it offers.
pub struct Running {
    pub container: String,
    pub tools: Vec<rmcp::model::Tool>,
    idle_timeout: Duration,
    client: RunningService<RoleClient, ClientConfig>,
    used: Mutex<Instant>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").field("container", &self.container).field("tools", &self.tools.len()).finish()
    }
}

/// What a call answered, as an agent reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub text: String,
    pub is_error: bool,
}

pub struct McpPool {
    containers: Arc<ContainerManager>,
    attached: Mutex<HashMap<String, Attached>>,
    relays: Mutex<HashMap<String, Relay>>,
    changes: watch::Sender<u64>,
    running: tokio::sync::Mutex<HashMap<(Context, String), Arc<Running>>>,
}

impl std::fmt::Debug for McpPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpPool").finish_non_exhaustive()
    }
}

impl McpPool {
    pub fn new(containers: Arc<ContainerManager>) -> McpPool {
        McpPool {
            containers,
            attached: Mutex::default(),
            relays: Mutex::default(),
            changes: watch::channel(0).0,
            running: tokio::sync::Mutex::default(),
        }
    }

    /// Takes the relay of `identity` (from its RelayMcp call); the stream it returns carries
    /// the daemon's messages down to it.
    pub fn attach(&self, identity: &ContainerIdentity, up: tonic::Streaming<v1::McpUp>) -> mpsc::Receiver<v1::McpDown> {
        let (down, receiver) = mpsc::channel(64);
        let attached = Attached { down, up, identity: Probed::from(identity) };
        self.attached.lock().unwrap_or_else(PoisonError::into_inner).insert(identity.name.clone(), attached);
        self.changes.send_modify(|count| *count += 1);
        receiver
    }

    /// The running `server` of `context`, started (and its tools listed) when it is not.
    pub async fn get(
        &self,
        context: &Context,
        server: &Server,
        env: Vec<(String, String)>,
    ) -> Result<Arc<Running>, McpError> {
        let key = (context.clone(), server.name.clone());
        let mut running = self.running.lock().await;
        if let Some(found) = running.get(&key).filter(|found| !found.client.is_transport_closed()) {
            *found.used.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
            return Ok(found.clone());
        }
        if let Some(gone) = running.remove(&key) {
            self.stop(&gone.container).await;
        }
        let started = self.start(context, server, env).await?;
        running.insert(key, started.clone());
        Ok(started)
    }

    async fn start(
        &self,
        context: &Context,
        server: &Server,
        env: Vec<(String, String)>,
    ) -> Result<Arc<Running>, McpError> {
        let fail = |why: String| McpError::Start { server: server.name.clone(), why };
        let image = match crate::skills::layer(self.containers.image(), &server.config.install).map_err(fail)? {
            None => server.config.image.clone(),
            Some((tag, dockerfile)) => {
                self.containers.ensure_image(&tag, &dockerfile).await.map_err(|error| fail(error.to_string()))?;
                Some(tag)
            }
        };
        let request = RunRequest {
            role: Role::Mcp,
            session_id: format!("mcp-{}", server.name),
            context: context.clone(),
            command: vec![format!("{}/baaaht-agent", crate::container::manager::BINARIES_MOUNT), "mcp".into()],
            mounts: vec![],
            env: vec![],
            timeout: Duration::MAX,
            daemon_socket: true,
            working_dir: Some("/tmp".into()),
            image,
        };
        let mut changes = self.changes.subscribe();
        let handle = self.containers.start_service(request).await.map_err(|error| fail(error.to_string()))?;
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        let attached = loop {
            let taken = self.attached.lock().unwrap_or_else(PoisonError::into_inner).remove(&handle.name);
            if let Some(attached) = taken {
                break attached;
            }
            if tokio::time::timeout_at(deadline, changes.changed()).await.is_err() {
                self.stop(&handle.name).await;
                return Err(fail(format!("its relay did not connect within {} s", START_TIMEOUT.as_secs())));
            }
        };
        let launch = v1::McpLaunch {
            command: server.config.command.clone(),
            args: server.config.args.clone(),
            env: env.into_iter().collect(),
        };
        let sent = attached.down.send(v1::McpDown { kind: Some(v1::mcp_down::Kind::Launch(launch)) }).await;
        if sent.is_err() {
            self.stop(&handle.name).await;
            return Err(fail("its relay hung up before the launch".into()));
        }
        let (ours, theirs) = tokio::io::duplex(256 * 1024);
        let probe = Arc::new(ProbeSlot::default());
        let relay = Relay { down: attached.down.clone(), probe: probe.clone(), identity: attached.identity.clone() };
        self.relays.lock().unwrap_or_else(PoisonError::into_inner).insert(handle.name.clone(), relay);
        pump(attached, probe, theirs, server.name.clone(), handle.name.clone());
        let (reader, writer) = tokio::io::split(ours);
        let config = ClientConfig::new(Default::default(), Implementation::new("baaahtd", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
        let client = match tokio::time::timeout(START_TIMEOUT, config.serve((reader, writer))).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                self.stop(&handle.name).await;
                return Err(fail(format!("it did not answer `initialize`: {error}")));
            }
            Err(_) => {
                self.stop(&handle.name).await;
                return Err(fail(format!("it did not answer `initialize` within {} s", START_TIMEOUT.as_secs())));
            }
        };
        let tools = match tokio::time::timeout(START_TIMEOUT, client.list_all_tools()).await {
            Ok(Ok(tools)) => tools,
            Ok(Err(error)) => {
                self.stop(&handle.name).await;
                return Err(fail(format!("it did not list its tools: {error}")));
            }
            Err(_) => {
                self.stop(&handle.name).await;
                return Err(fail("it did not list its tools in time".into()));
            }
        };
        tracing::info!(server = %server.name, context = %context, container = %handle.name, tools = tools.len(), "MCP server started");
        Ok(Arc::new(Running {
            container: handle.name,
            tools,
            idle_timeout: Duration::from_secs(server.config.idle_timeout),
            client,
            used: Mutex::new(Instant::now()),
        }))
    }

    /// Stops the servers unused for longer than their `idle_timeout`, and those whose stdio
    /// closed (a server that exited), every second until `cancel`.
    pub async fn supervise(self: Arc<Self>, cancel: tokio_util::sync::CancellationToken) {
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            let done: Vec<((Context, String), Arc<Running>)> = {
                let mut running = self.running.lock().await;
                let keys: Vec<(Context, String)> = running
                    .iter()
                    .filter(|(_, server)| {
                        let idle = server.used.lock().unwrap_or_else(PoisonError::into_inner).elapsed();
                        idle >= server.idle_timeout || server.client.is_transport_closed()
                    })
                    .map(|(key, _)| key.clone())
                    .collect();
                keys.into_iter().filter_map(|key| running.remove(&key).map(|server| (key, server))).collect()
            };
            for ((context, name), server) in done {
                tracing::info!(server = %name, context = %context, container = %server.container, "stopping an idle MCP server");
                self.stop(&server.container).await;
            }
        }
    }

    /// The started servers' containers, for the health monitor.
    pub fn probe_targets(&self) -> Vec<Probed> {
        let relays = self.relays.lock().unwrap_or_else(PoisonError::into_inner);
        relays.values().map(|relay| relay.identity.clone()).collect()
    }

    /// Asks the relay in `container` whether its server runs.
    pub async fn probe(&self, container: &str, timeout: Duration) -> Result<v1::HealthCheckResponse, String> {
        let found = {
            let relays = self.relays.lock().unwrap_or_else(PoisonError::into_inner);
            relays.get(container).map(|relay| (relay.down.clone(), relay.probe.clone()))
        };
        let wrap = |request| v1::McpDown { kind: Some(v1::mcp_down::Kind::HealthCheck(request)) };
        crate::health::probe_over(found, container, wrap, timeout).await
    }

    /// Removes a server's container that failed its health checks; the next call starts one.
    pub async fn restart(&self, target: &Probed) -> Result<String, McpError> {
        self.running.lock().await.retain(|_, running| running.container != target.name);
        self.stop(&target.name).await;
        Ok("it was removed; the next call starts a new one".into())
    }

    async fn stop(&self, container: &str) {
        self.relays.lock().unwrap_or_else(PoisonError::into_inner).remove(container);
        if let Err(error) = self.containers.stop_service(container).await {
            tracing::warn!(container, %error, "cannot remove an MCP server's container");
        }
    }

    /// Calls `tool` of `server` for `context` with `arguments`; a server that died is started
    /// again and asked once more.
    pub async fn call(
        &self,
        context: &Context,
        server: &Server,
        env: Vec<(String, String)>,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Answer, McpError> {
        let timeout = Duration::from_secs(server.config.timeout);
        for attempt in 0..2 {
            let running = self.get(context, server, env.clone()).await?;
            if !running.tools.iter().any(|offered| offered.name == tool) || !server.config.tools.offers(tool) {
                return Err(McpError::NoTool { server: server.name.clone(), tool: tool.into() });
            }
            let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments.clone());
            match tokio::time::timeout(timeout, running.client.call_tool(params)).await {
                Ok(Ok(result)) => {
                    let text = result.content.iter().map(describe).collect::<Vec<_>>().join("\n");
                    return Ok(Answer { text, is_error: result.is_error.unwrap_or(false) });
                }
                Ok(Err(rmcp::ServiceError::McpError(error))) => {
                    return Err(McpError::Refused { server: server.name.clone(), why: error.message.to_string() })
                }
                Ok(Err(error)) if attempt == 0 && running.client.is_transport_closed() => {
                    tracing::warn!(server = %server.name, %error, "the MCP server died; starting it again");
                }
                Ok(Err(error)) => return Err(McpError::Gone { server: server.name.clone(), why: error.to_string() }),
                Err(_) => return Err(McpError::Timeout { server: server.name.clone(), seconds: timeout.as_secs() }),
            }
        }
        Err(McpError::Gone { server: server.name.clone(), why: "it died twice".into() })
    }
}

/// One block of a tool's answer as text for the model.
fn describe(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => format!("[image {}, {} bytes as base64]", image.mime_type, image.data.len()),
        ContentBlock::Resource(resource) => match &resource.resource {
            rmcp::model::ResourceContents::TextResourceContents { uri, text, .. } => {
                format!("[resource {uri}]\n{text}")
            }
            rmcp::model::ResourceContents::BlobResourceContents { uri, blob, .. } => {
                format!("[resource {uri}, {} bytes as base64]", blob.len())
            }
            _ => "[resource]".into(),
        },
        ContentBlock::ResourceLink(link) => format!("[resource link {}]", link.uri),
        _ => "[content of a kind baaaht does not show]".into(),
    }
}

/// Carries bytes between the relay's stream and `theirs` (the far end of rmcp's pipe); the
/// server's stderr lines go to the log.
fn pump(attached: Attached, probe: Arc<ProbeSlot>, theirs: tokio::io::DuplexStream, server: String, container: String) {
    let Attached { down, mut up, .. } = attached;
    let (mut from_client, mut to_client) = tokio::io::split(theirs);
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            match from_client.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let bytes = v1::McpDown { kind: Some(v1::mcp_down::Kind::Stdin(buffer[..n].to_vec())) };
                    if down.send(bytes).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    tokio::spawn(async move {
        use tokio_stream::StreamExt as _;
        while let Some(message) = up.next().await {
            match message.map(|message| message.kind) {
                Ok(Some(v1::mcp_up::Kind::Stdout(bytes))) => {
                    if to_client.write_all(&bytes).await.is_err() {
                        break;
                    }
                }
                Ok(Some(v1::mcp_up::Kind::Health(health))) => probe.answer(health),
                Ok(Some(v1::mcp_up::Kind::Stderr(line))) => {
                    tracing::info!(server = %server, container = %container, line = %line, "MCP server log");
                }
                Ok(Some(v1::mcp_up::Kind::Exited(exit))) => {
                    tracing::warn!(server = %server, container = %container, code = exit.code, signal = %exit.signal, "MCP server exited");
                    break;
                }
                Ok(_) => {}
                Err(status) => {
                    tracing::warn!(server = %server, container = %container, error = %status.message(), "MCP relay stream broke");
                    break;
                }
            }
        }
        // rmcp sees the end of the server's output.
        // silent-ok: the pipe may already be closed.
        let _ = to_client.shutdown().await;
    });
}
