//! `baaaht-slack`: the Slack gateway process.

use std::path::PathBuf;
use std::sync::Arc;

use baaaht_proto::client::{self, Backoff, ConnectOptions};
use baaaht_slack::gateway::Gateway;
use baaaht_slack::route::Trigger;
use clap::Parser;
use slack_morphism::prelude::*;

#[derive(Debug, Parser)]
#[command(name = "baaaht-slack", version, about = "baaaht's Slack gateway (Socket Mode)")]
struct Cli {
    /// The gateway's socket (data/gateways/{name}/daemon.sock)
    #[arg(long, env = "BAAAHT_GATEWAY_SOCKET", value_name = "PATH")]
    socket: PathBuf,
    /// A file holding the gateway's token (printed once by `baaahtd gateways add`); else
    /// $BAAAHT_GATEWAY_TOKEN
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Slack's Web API
    #[arg(long, env = "BAAAHT_SLACK_API_URL", default_value = "https://slack.com/api")]
    api_url: String,
    /// A word that addresses the bot in a channel, besides a mention (repeatable)
    #[arg(long = "keyword", value_name = "WORD")]
    keywords: Vec<String>,
    /// A channel id where every message is for the bot (repeatable)
    #[arg(long = "always", value_name = "CHANNEL")]
    always: Vec<String>,
    /// The largest file shared with the bot that is taken, in bytes (the daemon's
    /// sessions.max_upload_bytes holds as well)
    #[arg(long, value_name = "BYTES", default_value_t = 25 * 1024 * 1024)]
    max_file_bytes: u64,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_target(false)
        .init();
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("baaaht-slack: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    let token = match &cli.token_file {
        Some(file) => {
            std::fs::read_to_string(file).map_err(|error| format!("cannot read {}: {error}", file.display()))?
        }
        None => std::env::var("BAAAHT_GATEWAY_TOKEN")
            .map_err(|_unset| "give the gateway's token: --token-file PATH or $BAAAHT_GATEWAY_TOKEN".to_string())?,
    };
    let options =
        ConnectOptions { token: Some(token.trim().to_string()), correlation_id: None, backoff: Backoff::PERSISTENT };
    let daemon = client::connect(&cli.socket, options).await.map_err(|error| error.to_string())?;
    let trigger = Trigger { keywords: cli.keywords, always: cli.always };
    let (gateway, app_token) = Gateway::new(daemon, &cli.api_url, trigger, cli.max_file_bytes).await.map_err(|error| error.to_string())?;
    let gateway = Arc::new(gateway);
    let environment = Arc::new(
        SlackClientEventsListenerEnvironment::new(gateway.slack.clone())
            .with_error_handler(on_error)
            .with_user_state(gateway.clone()),
    );
    let callbacks = SlackSocketModeListenerCallbacks::new().with_push_events(on_push);
    let config = SlackClientSocketModeConfig::new().with_max_connections_count(1);
    let listener = SlackClientSocketModeListener::new(&config, environment, callbacks);
    listener.listen_for(&app_token).await.map_err(|error| format!("Socket Mode: {error}"))?;
    listener.start().await;
    tracing::info!("listening to Slack");
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|error| format!("cannot watch SIGTERM: {error}"))?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    listener.shutdown().await;
    Ok(())
}

/// A delivery: acknowledged when this returns (at once); the answer is written after.
async fn on_push(
    event: SlackPushEventCallback,
    _client: Arc<SlackHyperClient>,
    states: SlackClientEventsUserState,
) -> UserCallbackResult<()> {
    let gateway = states.read().await.get_user_state::<Arc<Gateway>>().cloned();
    let Some(gateway) = gateway else { return Ok(()) };
    let body = serde_json::to_value(&event.event).unwrap_or_default();
    if let Some(route) = gateway.take(event.event_id.as_ref(), &body) {
        tokio::spawn(async move { gateway.answer(route).await });
    }
    Ok(())
}

fn on_error(
    error: Box<dyn std::error::Error + Send + Sync>,
    _client: Arc<SlackHyperClient>,
    _states: SlackClientEventsUserState,
) -> http::StatusCode {
    tracing::warn!(%error, "Slack event not handled");
    http::StatusCode::OK
}
