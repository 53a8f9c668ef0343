//! `baaaht-telegram`: the Telegram gateway process.

use std::sync::Arc;

use baaaht_gateway_kit::cli::Supervised;
use baaaht_gateway_kit::follow::Follower;
use baaaht_telegram::api::Api;
use baaaht_telegram::gateway::Gateway;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "baaaht-telegram", version, about = "baaaht's Telegram gateway (the Bot API by long polling)")]
struct Cli {
    #[command(flatten)]
    supervised: Supervised,
    /// The Bot API
    #[arg(long, env = "BAAAHT_TELEGRAM_API_URL", default_value = "https://api.telegram.org")]
    api_url: String,
    /// The largest file from a chat that is taken, in bytes (Telegram gives bots at most 20 MB;
    /// the daemon's sessions.max_upload_bytes holds as well)
    #[arg(long, value_name = "BYTES", default_value_t = 20 * 1024 * 1024)]
    max_file_bytes: u64,
    /// The Telegram user ids (numbers, comma-separated or repeated) who become users on their
    /// first message; anyone else waits for an admin (`baaaht users admit`). The daemon reads
    /// this list from the gateway's registration and holds to it.
    #[arg(long, value_name = "USER_IDS")]
    allow: Vec<String>,
    /// Where the chats served are kept across restarts (the daemon gives each gateway its own;
    /// without one, they are known until the process ends)
    #[arg(long, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
}

fn main() -> std::process::ExitCode {
    baaaht_gateway_kit::cli::main("baaaht-telegram", || run(Cli::parse()))
}

async fn run(cli: Cli) -> Result<(), String> {
    let supervised = &cli.supervised;
    let egress = supervised.egress();
    for listed in cli.allow.iter().flat_map(|value| value.split(',')).map(str::trim).filter(|id| !id.is_empty()) {
        if !listed.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(format!(
                "--allow `{listed}`: give Telegram user ids (numbers: @userinfobot tells one), not names, which can change hands"
            ));
        }
    }
    if supervised.check {
        return Api::new(&cli.api_url, "", egress).map(drop);
    }
    let health = supervised.health("Telegram", std::time::Duration::from_secs(120));
    let missing = "no bot token: store TELEGRAM_BOT_TOKEN_{NAME} with `baaahtd secrets set` (BotFather gives it)";
    let (daemon, token) = supervised.start(&health, "bot_token", missing).await?;
    let api = Api::new(&cli.api_url, &token, egress)?;
    let (follower, deliveries) =
        Follower::open(daemon.clone(), baaaht_proto::v1::ChannelType::Telegram, cli.state_dir.as_deref())?;
    let gateway = Arc::new(Gateway::new(daemon, api, cli.max_file_bytes, follower).await?);
    tracing::info!("listening to Telegram");
    let delivering = tokio::spawn(gateway.clone().deliver(deliveries));
    supervised.run_until_stopped(gateway.run(health)).await;
    delivering.abort();
    Ok(())
}
