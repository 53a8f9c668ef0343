//! `baaaht-slack`: the Slack gateway process.

use std::sync::Arc;

use baaaht_gateway_kit::cli::Supervised;
use baaaht_gateway_kit::follow::Follower;
use baaaht_proto::client;
use baaaht_slack::gateway::Gateway;
use baaaht_slack::route::Trigger;
use baaaht_slack::{events_http, socket_mode};
use clap::Parser;
use slack_morphism::prelude::*;
use slack_morphism::signature_verifier::SlackEventSignatureVerifier;

#[derive(Debug, Parser)]
#[command(name = "baaaht-slack", version, about = "baaaht's Slack gateway (Socket Mode or the Events API)")]
struct Cli {
    #[command(flatten)]
    supervised: Supervised,
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
    /// How events arrive: `socket` (Socket Mode, no public URL needed) or `http` (the Events
    /// API: Slack POSTs to http://LISTEN/slack/events, signed with the app's signing secret)
    #[arg(long, value_enum, default_value_t = Events::Socket)]
    events: Events,
    /// Where the Events API is served (with --events http)
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:3000")]
    listen: std::net::SocketAddr,
    /// Where the chats served are kept across restarts (the daemon gives each gateway its own;
    /// without one, they are known until the process ends)
    #[arg(long, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Events {
    Socket,
    Http,
}

fn main() -> std::process::ExitCode {
    baaaht_gateway_kit::cli::main("baaaht-slack", || run(Cli::parse()))
}

async fn run(cli: Cli) -> Result<(), String> {
    let supervised = cli.supervised.clone();
    if supervised.check {
        return Ok(());
    }
    let health = supervised.health("Slack", std::time::Duration::from_secs(60));
    if let Some(path) = &supervised.health_socket {
        baaaht_proto::lifecycle::serve_health(health.clone(), path)?;
    }
    let egress = supervised.egress();
    let daemon = client::connect_gateway(&supervised.socket, supervised.token_file.as_deref()).await?;
    let trigger = Trigger { keywords: cli.keywords, always: cli.always };
    let (follower, deliveries) =
        Follower::open(daemon.clone(), baaaht_proto::v1::ChannelType::Slack, cli.state_dir.as_deref())?;
    let (gateway, listening) =
        Gateway::new(daemon, &cli.api_url, egress.clone(), trigger, cli.max_file_bytes, follower)
            .await
            .map_err(|error| error.to_string())?;
    let gateway = Arc::new(gateway);
    let delivering = tokio::spawn(gateway.clone().deliver(deliveries));
    let events = match cli.events {
        Events::Socket => {
            if listening.app_token.token_value.0.is_empty() {
                return Err("Socket Mode needs the app token: store SLACK_APP_TOKEN_{NAME} (baaahtd secrets set) or use --events http".into());
            }
            tokio::spawn(socket_mode::run(gateway.clone(), listening.app_token, egress, health.clone()))
        }
        Events::Http => {
            if listening.signing_secret.is_empty() {
                return Err("the Events API needs the signing secret: store SLACK_SIGNING_SECRET_{NAME} (baaahtd secrets set) or use --events socket".into());
            }
            let verifier = SlackEventSignatureVerifier::new(&SlackSigningSecret::new(listening.signing_secret));
            let listener = tokio::net::TcpListener::bind(cli.listen)
                .await
                .map_err(|error| format!("cannot listen on {}: {error}", cli.listen))?;
            tracing::info!(address = %listener.local_addr().unwrap_or(cli.listen), path = events_http::PATH, "serving the Events API");
            health.up();
            tokio::spawn(events_http::serve(listener, gateway.clone(), verifier))
        }
    };
    tracing::info!("listening to Slack");
    let why = baaaht_proto::lifecycle::stop_requested(supervised.parent).await;
    tracing::info!(why, "stopping");
    events.abort();
    delivering.abort();
    Ok(())
}
