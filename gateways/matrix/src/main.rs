//! `baaaht-matrix`: the Matrix gateway process.

use std::path::PathBuf;
use std::sync::Arc;

use baaaht_gateway_kit::cli::Supervised;
use baaaht_gateway_kit::follow::Follower;
use baaaht_matrix::gateway::Gateway;
use baaaht_matrix::session::{signed_in, Settings};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "baaaht-matrix", version, about = "baaaht's Matrix gateway (end-to-end encrypted rooms)")]
struct Cli {
    #[command(flatten)]
    supervised: Supervised,
    /// The homeserver's address, e.g. https://matrix.home.example
    #[arg(long, value_name = "URL")]
    homeserver: String,
    /// The bot's user id, e.g. @baaaht:home.example
    #[arg(long, value_name = "USER_ID")]
    user: String,
    /// Homeservers whose people may invite the bot and write to it, comma-separated or
    /// repeated (e.g. home.example); everyone else's invitations are declined
    #[arg(long, value_name = "SERVERS", required = true)]
    allow_server: Vec<String>,
    /// A certificate authority (PEM) trusted besides the system's, for a household's own homeserver
    #[arg(long, value_name = "PATH")]
    ca_file: Option<PathBuf>,
    /// Where the gateway keeps its device: its keys, stores and session (kept across restarts)
    #[arg(long, value_name = "PATH", default_value = "matrix-state")]
    state_dir: PathBuf,
    /// The name people's clients show for the gateway's device
    #[arg(long, value_name = "NAME", default_value = "baaaht")]
    device_name: String,
    /// The largest file taken from a room, in bytes (the daemon's sessions.max_upload_bytes holds too)
    #[arg(long, value_name = "BYTES", default_value_t = 25 * 1024 * 1024)]
    max_file_bytes: u64,
}

fn main() -> std::process::ExitCode {
    baaaht_gateway_kit::cli::main("baaaht-matrix", || run(Cli::parse()))
}

async fn run(cli: Cli) -> Result<(), String> {
    let supervised = &cli.supervised;
    let homeserver = cli.homeserver.trim_end_matches('/').to_string();
    if !(homeserver.starts_with("https://") || homeserver.starts_with("http://")) {
        return Err(format!("--homeserver `{homeserver}`: give its address, e.g. https://matrix.home.example"));
    }
    if supervised.egress_socket.is_some() && !homeserver.starts_with("https://") {
        return Err(format!(
            "--homeserver `{homeserver}`: through the daemon's egress the homeserver must be https:// (its tunnel \
             carries TLS)"
        ));
    }
    let user = cli.user.trim().to_string();
    let valid_user = user
        .strip_prefix('@')
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(name, server)| !name.is_empty() && !server.is_empty());
    if !valid_user {
        return Err(format!("--user `{user}`: give the bot's Matrix id, e.g. @baaaht:home.example"));
    }
    let allowed: Vec<String> = cli
        .allow_server
        .iter()
        .flat_map(|value| value.split(','))
        .map(|server| server.trim().to_ascii_lowercase())
        .filter(|server| !server.is_empty())
        .collect();
    if allowed.is_empty() {
        return Err("--allow-server: name the homeservers whose people may write to the assistant".into());
    }
    let ca_pem = match &cli.ca_file {
        Some(path) => Some(std::fs::read(path).map_err(|error| format!("--ca-file {}: {error}", path.display()))?),
        None => None,
    };
    if supervised.check {
        return Ok(());
    }
    let health = supervised.health("the homeserver", std::time::Duration::from_secs(120));
    let missing = "no password for the bot: store MATRIX_PASSWORD_{NAME} with `baaahtd secrets set`";
    let (daemon, password) = supervised.start(&health, "password", missing).await?;
    let proxy = baaaht_gateway_kit::egress::local_proxy(supervised.egress())
        .await
        .map_err(|error| format!("cannot start the local proxy to the daemon's egress: {error}"))?;
    let settings = Settings {
        homeserver: &homeserver,
        user: &user,
        password: &password,
        device_name: &cli.device_name,
        state: &cli.state_dir,
        proxy,
        ca_pem,
    };
    let (client, first) = signed_in(&settings).await?;
    let (follower, deliveries) =
        Follower::open(daemon.clone(), baaaht_proto::v1::ChannelType::Matrix, Some(&cli.state_dir))?;
    let gateway = Arc::new(Gateway::new(daemon, client, allowed, cli.max_file_bytes, follower));
    let delivering = tokio::spawn(gateway.clone().deliver(deliveries));
    supervised.run_until_stopped(gateway.run(health, first)).await;
    delivering.abort();
    Ok(())
}
