//! `baaaht-llm-gateway`: the only process that holds LLM provider keys. It serves the
//! LLMGateway service on a Unix socket that only the daemon reaches; the daemon runs it in a
//! container with no network, its providers reached through the daemon's egress socket (or as
//! a host child process), and configures it over that socket.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use baaaht_llm::server::GatewayService;
use baaaht_proto::v1::container_health_server::ContainerHealthServer;
use baaaht_proto::v1::llm_gateway_server::LlmGatewayServer;
use clap::{Parser, Subcommand};
use tokio_stream::wrappers::UnixListenerStream;

#[derive(Debug, Parser)]
#[command(name = "baaaht-llm-gateway", version, about = "Streams LLM completions for the baaaht daemon")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve on a Unix socket until SIGTERM (or until the parent process is gone)
    Serve {
        /// Where to listen; the folder must exist and be reachable only by the daemon
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
        /// Exit when this process is no longer the parent (a host child of a daemon that died)
        #[arg(long, value_name = "PID")]
        parent: Option<u32>,
        /// Permissions of the socket, in octal (the folder around it is what keeps others out)
        #[arg(long, default_value = "600", value_parser = baaaht_proto::lifecycle::parse_mode)]
        socket_mode: u32,
        /// Reach providers through the daemon's egress socket (CONNECT host:port) instead of
        /// directly: how the gateway runs in its container, which has no network
        #[arg(long, value_name = "PATH")]
        egress_socket: Option<PathBuf>,
        /// Log level: error, warn, info, debug or trace
        #[arg(long, default_value = "info")]
        log_level: String,
    },
}

fn main() -> ExitCode {
    baaaht_proto::lifecycle::use_ring_for_tls();
    let Command::Serve { socket, parent, socket_mode, egress_socket, log_level } = Cli::parse().command;
    let filter =
        tracing_subscriber::EnvFilter::try_new(format!("warn,baaaht_llm={log_level},baaaht_llm_gateway={log_level}"));
    let filter = match filter {
        Ok(filter) => filter,
        Err(error) => {
            eprintln!("baaaht-llm-gateway: --log-level {log_level}: {error}");
            return ExitCode::from(64);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .json()
        .with_current_span(true)
        .with_span_list(false)
        .flatten_event(true)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "cannot start the async runtime");
            return ExitCode::from(70);
        }
    };
    match runtime.block_on(serve(&socket, socket_mode, parent, egress_socket)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = %baaaht_proto::error_chain(&*error), "stopped");
            ExitCode::from(70)
        }
    }
}

async fn serve(
    socket: &Path,
    mode: u32,
    parent: Option<u32>,
    egress: Option<PathBuf>,
) -> Result<(), Box<dyn std::error::Error>> {
    let listener = baaaht_proto::lifecycle::listen(socket, mode)?;
    tracing::info!(socket = %socket.display(), version = env!("CARGO_PKG_VERSION"), "serving");
    let service = Arc::new(egress.map_or_else(GatewayService::default, GatewayService::through));
    let server = tonic::transport::Server::builder()
        .add_service(
            LlmGatewayServer::from_arc(service.clone()).max_decoding_message_size(baaaht_proto::MAX_MESSAGE_BYTES),
        )
        .add_service(ContainerHealthServer::from_arc(service))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), stopped(parent));
    server.await?;
    // silent-ok: the socket may already be gone with its folder.
    let _ = std::fs::remove_file(socket);
    tracing::info!("stopped");
    Ok(())
}

/// Resolves when the gateway should stop (SIGTERM, SIGINT, or its daemon gone).
async fn stopped(parent: Option<u32>) {
    let why = baaaht_proto::lifecycle::stop_requested(parent).await;
    tracing::info!(why, "stopping");
}
