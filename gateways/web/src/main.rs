//! `baaaht-web`: the web gateway process.

use std::path::PathBuf;
use std::sync::Arc;

use baaaht_proto::client;
use baaaht_proto::egress::Egress;
use baaaht_proto::v1;
use baaaht_web::app::{self, App};
use baaaht_web::oidc::{Admission, Oidc};
use baaaht_web::push::devices::Devices;
use baaaht_web::push::message::Vapid;
use baaaht_web::push::send::Sender;
use baaaht_web::push::Push;
use baaaht_web::store::Store;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "baaaht-web",
    version,
    about = "baaaht's web gateway: sign in with OpenID Connect, chat in the browser"
)]
struct Cli {
    /// The gateway's socket (data/gateways/{name}/daemon.sock)
    #[arg(long, env = "BAAAHT_GATEWAY_SOCKET", value_name = "PATH")]
    socket: PathBuf,
    /// A file holding the gateway's token (printed once by `baaahtd gateways add --mode
    /// external`); else $BAAAHT_GATEWAY_TOKEN (the daemon sets it for a gateway it runs)
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Where to serve (in its container, the daemon listens here and hands each connection
    /// to --listen-socket)
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8080")]
    listen: std::net::SocketAddr,
    /// Serve on this Unix socket instead of --listen (set by the daemon that runs the gateway
    /// in a container)
    #[arg(long, value_name = "PATH")]
    listen_socket: Option<PathBuf>,
    /// Reach the OpenID provider through the daemon's egress socket at PATH (set by the daemon
    /// that runs the gateway in a container, which has no network)
    #[arg(long, value_name = "PATH")]
    egress_socket: Option<PathBuf>,
    /// Serve HTTPS with the certificate chain in this PEM file (read again when it changes);
    /// else plain HTTP, for a reverse proxy in front
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM)
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The site's address as browsers reach it (the sign-in comes back to PUBLIC_URL/auth/callback)
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8080")]
    public_url: String,
    /// Where signed-in sessions are kept (sessions.json), so a restart signs nobody out
    #[arg(long, value_name = "DIR")]
    state_dir: PathBuf,
    /// The largest file a browser may upload, in bytes (the daemon's sessions.max_upload_bytes
    /// holds as well)
    #[arg(long, value_name = "BYTES", default_value_t = 25 * 1024 * 1024)]
    max_upload_bytes: u64,
    /// Let in only this email address, verified by the provider (repeatable; with
    /// --allowed-domain, matching either lets an account in)
    #[arg(long = "allowed-email", value_name = "ADDRESS")]
    allowed_emails: Vec<String>,
    /// Let in only verified addresses at this domain (repeatable)
    #[arg(long = "allowed-domain", value_name = "DOMAIN")]
    allowed_domains: Vec<String>,
    /// Let in only accounts in this group (repeatable: any of them), as the provider lists
    /// them in --groups-claim
    #[arg(long = "required-group", value_name = "GROUP")]
    required_groups: Vec<String>,
    /// The ID token claim that lists an account's groups
    #[arg(long, value_name = "CLAIM", default_value = "groups")]
    groups_claim: String,
    /// Another scope to ask the provider for, e.g. `groups` (repeatable)
    #[arg(long = "scope", value_name = "SCOPE")]
    scopes: Vec<String>,
    /// The contact push services are given with each notification (`mailto:` or `https:`);
    /// else the site's address when it is HTTPS
    #[arg(long, value_name = "URI")]
    push_subject: Option<String>,
    /// A push service devices may subscribe with besides the browsers' own (Chrome's, Edge's,
    /// Firefox's, Safari's), as `https://host[:port]` (repeatable)
    #[arg(long = "push-service", value_name = "URL")]
    push_services: Vec<String>,
    /// A certificate authority (PEM) trusted besides the system's, for a household's own push
    /// service
    #[arg(long, value_name = "PATH")]
    ca_file: Option<PathBuf>,
    /// Serve the gateway's health (ContainerHealth) on this Unix socket, for the daemon that
    /// supervises it
    #[arg(long, value_name = "PATH")]
    health_socket: Option<PathBuf>,
    /// Stop when this process is no longer the parent (a host child of a daemon that died)
    #[arg(long, value_name = "PID")]
    parent: Option<u32>,
    /// Only check these arguments and exit (0: usable)
    #[arg(long)]
    check: bool,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    baaaht_proto::lifecycle::use_ring_for_tls();
    baaaht_proto::lifecycle::log_to_stderr();
    baaaht_proto::lifecycle::exit("baaaht-web", run(Cli::parse()).await)
}

async fn run(cli: Cli) -> Result<(), String> {
    let public_url = cli.public_url.trim_end_matches('/').to_string();
    if public_url.starts_with("http://") && !app::is_loopback_http(&public_url) {
        return Err(format!(
            "--public-url {public_url}: sessions need HTTPS (a Secure cookie) except on loopback; put the gateway behind your HTTPS reverse proxy, or give it --tls-cert and --tls-key, and give its https:// address"
        ));
    }
    let tls = match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert), Some(key)) => {
            if !public_url.starts_with("https://") {
                return Err(format!("--public-url {public_url}: the site is served over HTTPS (--tls-cert), so give its https:// address"));
            }
            Some(baaaht_proto::tls::server_config(cert, key)?)
        }
        _ => None,
    };
    let push_subject = match &cli.push_subject {
        Some(subject) if subject.starts_with("mailto:") || subject.starts_with("https://") => subject.clone(),
        Some(subject) => {
            return Err(format!(
                "--push-subject {subject}: give a mailto: address or an https:// page for push services to reach you"
            ))
        }
        None if public_url.starts_with("https://") => public_url.clone(),
        None => "mailto:root@localhost".to_string(),
    };
    let mut push_services = vec![];
    for service in &cli.push_services {
        let origin = baaaht_web::push::message::origin(service)
            .map_err(|_not_https| format!("--push-service {service}: give the push service's https:// address"))?;
        push_services.push(origin);
    }
    let trust = baaaht_gateway_kit::egress::Trust::load(cli.ca_file.as_deref())?;
    if cli.check {
        return Ok(());
    }
    let mut daemon = client::connect_gateway(&cli.socket, cli.token_file.as_deref()).await?;
    let settings = daemon
        .gateways
        .get_gateway_secrets(v1::GatewaySecretsRequest {})
        .await
        .map_err(|status| format!("the daemon: {}", status.message()))?
        .into_inner()
        .secrets;
    let issuer = settings.get("issuer").cloned().unwrap_or_default();
    let client_id = settings.get("client_id").cloned().unwrap_or_default();
    let client_secret = settings.get("client_secret").cloned();
    let redirect = format!("{public_url}/auth/callback");
    let egress = match &cli.egress_socket {
        Some(path) => Egress::Tunnel(Arc::new(path.clone())),
        None => Egress::Direct,
    };
    let mut oidc = Oidc::discover(&issuer, &client_id, client_secret, &redirect, egress.clone())
        .await
        .map_err(|error| error.to_string())?;
    oidc.extra_scopes = cli.scopes.clone();
    oidc.groups_claim = cli.groups_claim.clone();
    let admission = Admission {
        emails: cli.allowed_emails.clone(),
        domains: cli.allowed_domains.clone(),
        groups: cli.required_groups.clone(),
    };
    std::fs::create_dir_all(&cli.state_dir)
        .map_err(|error| format!("cannot make {}: {error}", cli.state_dir.display()))?;
    let store = Store::open(&cli.state_dir).map_err(|error| error.to_string())?;
    let devices = Devices::open(&cli.state_dir, push_services).map_err(|error| error.to_string())?;
    let vapid = Vapid::open(&cli.state_dir).map_err(|error| error.to_string())?;
    let push = Arc::new(Push::new(devices, Sender::new(egress.clone(), &trust, vapid, push_subject)));
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let run = format!("{:x}", started.as_nanos());
    let csp = axum::http::HeaderValue::from_str(&app::content_security_policy(&app::origin(&issuer)))
        .map_err(|_invalid| format!("the issuer `{issuer}` cannot be named in a Content-Security-Policy"))?;
    let app = Arc::new(App {
        oidc,
        store,
        daemon,
        issuer,
        public_url,
        hub: Default::default(),
        run,
        csp,
        max_upload: cli.max_upload_bytes,
        admission,
        profiles: Default::default(),
        refreshing: Default::default(),
        sign_ins: Default::default(),
        refresh_after: Default::default(),
        on_session_end: Default::default(),
    });
    // A sign-in that ends takes its devices with it.
    let ending = push.clone();
    // silent-ok: set once, here, before anything is served.
    let _ = app.on_session_end.set(Box::new(move |key| ending.signed_out(key)));
    // The site is served before the health says so.
    let listener = match &cli.listen_socket {
        Some(path) => {
            let listener = baaaht_proto::lifecycle::bind_socket(path)?;
            tracing::info!(socket = %path.display(), public_url = %app.public_url, "serving");
            Listener::Unix(listener)
        }
        None => {
            let listener = tokio::net::TcpListener::bind(cli.listen)
                .await
                .map_err(|error| format!("cannot listen on {}: {error}", cli.listen))?;
            tracing::info!(address = %cli.listen, public_url = %app.public_url, https = tls.is_some(), "serving");
            match tls {
                Some(config) => Listener::Tls(listener, tokio_rustls::TlsAcceptor::from(config)),
                None => Listener::Tcp(listener),
            }
        }
    };
    if let Some(path) = &cli.health_socket {
        baaaht_proto::lifecycle::serve_health(Arc::new(Serving(std::time::Instant::now(), app.clone())), path)?;
    }
    let stopped = async move {
        let why = baaaht_proto::lifecycle::stop_requested(cli.parent).await;
        tracing::info!(why, "stopping");
    };
    // Users no browser follows for five minutes are let go (checked every minute), for as long
    // as the server runs.
    let reap = async {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(60));
        loop {
            every.tick().await;
            let retired = app.hub.retire_idle(std::time::Duration::from_secs(300));
            if retired > 0 {
                tracing::info!(retired, "stopped following users no browser follows");
            }
        }
    };
    let router = baaaht_web::routes::router(app.clone(), push.clone());
    let serve = async move {
        match listener {
            Listener::Tcp(listener) => axum::serve(listener, router).with_graceful_shutdown(stopped).await,
            Listener::Unix(listener) => axum::serve(listener, router).with_graceful_shutdown(stopped).await,
            Listener::Tls(listener, acceptor) => {
                serve_tls(listener, acceptor, router, stopped).await;
                Ok(())
            }
        }
    };
    // Everyone with a device is followed for their notifications.
    let notify = baaaht_web::push::run(app.clone(), push);
    tokio::select! {
        served = serve => served.map_err(|error| format!("the server stopped: {error}")),
        () = reap => Ok(()),
        () = notify => Ok(()),
    }
}

/// Where the site is served: a port, or (in the gateway's container) a Unix socket the daemon
/// forwards the port to.
enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
    Tls(tokio::net::TcpListener, tokio_rustls::TlsAcceptor),
}

/// Serves `router` over TLS until `stopped` (axum serves plain connections only): each
/// connection's handshake and requests in a task of its own, HTTP/2 or HTTP/1.1 as the browser
/// chose.
async fn serve_tls(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    router: axum::Router,
    stopped: impl std::future::Future<Output = ()>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let service = hyper_util::service::TowerToHyperService::new(router);
    tokio::pin!(stopped);
    loop {
        let stream = tokio::select! {
            () = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (acceptor, service) = (acceptor.clone(), service.clone());
        tokio::spawn(async move {
            let stream = match baaaht_proto::tls::accept(&acceptor, stream).await {
                Ok(stream) => stream,
                Err(error) => return tracing::debug!(%error, "a TLS handshake failed"),
            };
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(error) = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).await {
                tracing::debug!(%error, "a connection ended with an error");
            }
        });
    }
}

/// The gateway's health for the daemon that runs it: it answers once the site is served (it
/// is served for as long as the process lives; a failed listener ends the process).
/// The health the daemon reads: degraded while sign-ins fail.
struct Serving(std::time::Instant, Arc<App>);

#[tonic::async_trait]
impl v1::container_health_server::ContainerHealth for Serving {
    async fn health_check(
        &self,
        request: tonic::Request<v1::HealthCheckRequest>,
    ) -> Result<tonic::Response<v1::HealthCheckResponse>, tonic::Status> {
        let (status, message) = self.1.sign_ins.health();
        Ok(tonic::Response::new(v1::HealthCheckResponse {
            status: status.into(),
            message,
            uptime_seconds: self.0.elapsed().as_secs() as i64,
            metrics: Default::default(),
            probe: request.into_inner().probe,
        }))
    }
}
