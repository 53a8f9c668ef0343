//! `baaaht-email`: the email gateway process.

use std::path::PathBuf;
use std::sync::Arc;

use baaaht_email::allow::Allowed;
use baaaht_email::auth::Checks;
use baaaht_email::gateway::{Gateway, Options, Unauthenticated};
use baaaht_email::server::{Server, Trust};
use baaaht_email::threads::Threads;
use baaaht_gateway_kit::cli::Supervised;
use baaaht_gateway_kit::follow::Follower;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "baaaht-email", version, about = "baaaht's email gateway (IMAP IDLE in, SMTP out)")]
struct Cli {
    #[command(flatten)]
    supervised: Supervised,
    /// The assistant's address: the mailbox it reads, and the sender of its answers
    #[arg(long, value_name = "ADDRESS")]
    address: String,
    /// The name shown with the address on answers
    #[arg(long, value_name = "NAME", default_value = "baaaht")]
    name: String,
    /// The mailbox's sign-in name (default: the address)
    #[arg(long, value_name = "NAME")]
    login: Option<String>,
    /// The IMAP server, host:port (993: TLS from the first byte; another port: STARTTLS)
    #[arg(long, value_name = "HOST:PORT")]
    imap: String,
    /// implicit or starttls, when the IMAP port does not say
    #[arg(long, value_name = "TLS")]
    imap_tls: Option<String>,
    /// The SMTP submission server, host:port (465: TLS from the first byte; 587: STARTTLS)
    #[arg(long, value_name = "HOST:PORT")]
    smtp: String,
    /// implicit or starttls, when the SMTP port does not say
    #[arg(long, value_name = "TLS")]
    smtp_tls: Option<String>,
    /// The folder watched
    #[arg(long, value_name = "NAME", default_value = "INBOX")]
    mailbox: String,
    /// Who may write to the assistant: addresses (alice@family.example) and domains
    /// (@family.example), comma-separated or repeated. Anyone else's mail is left unread.
    #[arg(long, value_name = "SENDERS", required = true)]
    allow: Vec<String>,
    /// A DNS resolver, host:port, asked (over TCP, through the daemon's egress) for the DKIM keys
    /// that authenticate senders, e.g. 1.1.1.1:53 (a private one needs tools.web_proxy.allow)
    #[arg(long, value_name = "HOST:PORT")]
    dns: Option<String>,
    /// The authserv-id of the household's mail server, whose topmost Authentication-Results
    /// header is believed (dmarc=pass, or an aligned dkim=pass); the server must stamp every
    /// mail and remove stamps claiming its id (OpenDKIM: AuthservID, RemoveARAll)
    #[arg(long, value_name = "ID")]
    authserv_id: Option<String>,
    /// What becomes of an allowed address's mail that is not authenticated: ignore (left
    /// unread) or isolate (answered as from an unknown sender, with no one's context)
    #[arg(long, value_name = "WHAT", default_value = "ignore")]
    unauthenticated: String,
    /// A certificate authority (PEM) trusted besides the system's, for a household's own mail
    /// server
    #[arg(long, value_name = "PATH")]
    ca_file: Option<PathBuf>,
    /// Where the gateway keeps which conversation each thread is (kept across restarts)
    #[arg(long, value_name = "PATH", default_value = "email-state")]
    state_dir: PathBuf,
    /// The largest attachment taken, in bytes (the daemon's sessions.max_upload_bytes holds too)
    #[arg(long, value_name = "BYTES", default_value_t = 25 * 1024 * 1024)]
    max_file_bytes: u64,
}

fn main() -> std::process::ExitCode {
    baaaht_gateway_kit::cli::main("baaaht-email", || run(Cli::parse()))
}

async fn run(cli: Cli) -> Result<(), String> {
    let supervised = &cli.supervised;
    let address = cli.address.trim().to_ascii_lowercase();
    if address.split_once('@').is_none_or(|(user, domain)| user.is_empty() || domain.is_empty()) {
        return Err(format!("--address `{address}`: give the assistant's mail address, e.g. assistant@home.example"));
    }
    let imap = Server::parse("--imap", &cli.imap, cli.imap_tls.as_deref())?;
    let smtp = Server::parse("--smtp", &cli.smtp, cli.smtp_tls.as_deref())?;
    let allowed = Allowed::parse(&cli.allow)?;
    let trust = Trust::load(cli.ca_file.as_deref())?;
    let unauthenticated = Unauthenticated::parse(&cli.unauthenticated)?;
    let dns = match cli.dns.as_deref() {
        Some(dns) => Some(
            dns.rsplit_once(':')
                .map(|(host, port)| {
                    (host.trim_start_matches('[').trim_end_matches(']').to_string(), port.parse::<u16>())
                })
                .and_then(|(host, port)| {
                    port.ok().filter(|port| *port != 0 && !host.is_empty()).map(|port| (host, port))
                })
                .ok_or_else(|| format!("--dns `{dns}`: give a resolver's host:port, e.g. 1.1.1.1:53"))?,
        ),
        None => None,
    };
    let authserv_id = cli.authserv_id.as_deref().map(str::trim).filter(|id| !id.is_empty()).map(str::to_string);
    let checks = Checks::new(authserv_id, dns, supervised.egress())?;
    if supervised.check {
        return Ok(());
    }
    let threads = Threads::open(&cli.state_dir)?;
    let health = supervised.health("the mail server", std::time::Duration::from_secs(120));
    let missing = "no mailbox password: store EMAIL_PASSWORD_{NAME} with `baaahtd secrets set`";
    let (daemon, password) = supervised.start(&health, "password", missing).await?;
    let options = Options {
        login: cli.login.clone().unwrap_or_else(|| address.clone()),
        address,
        name: cli.name.clone(),
        password,
        imap,
        smtp,
        mailbox: cli.mailbox.clone(),
        allowed,
        max_file_bytes: cli.max_file_bytes,
        checks: Arc::new(checks),
        unauthenticated,
    };
    let (follower, deliveries) =
        Follower::open(daemon.clone(), baaaht_proto::v1::ChannelType::Email, Some(&cli.state_dir))?;
    let gateway = Arc::new(Gateway::new(daemon, supervised.egress(), trust, options, threads, follower));
    let delivering = tokio::spawn(gateway.clone().deliver(deliveries));
    supervised.run_until_stopped(gateway.run(health)).await;
    delivering.abort();
    Ok(())
}
