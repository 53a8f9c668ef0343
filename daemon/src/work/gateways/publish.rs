//! The port of a web gateway in its container (DESIGN.md §9.2). The container has no network:
//! the daemon listens on the host address the admin picked (the gateway's `--listen`, as for a
//! host process) and carries each connection, byte for byte, to the HTTP socket the gateway
//! serves in its `run/` folder. It connects through a descriptor of that socket, never its
//! path, so nothing the container puts in `run/` sends the daemon anywhere else. With
//! `--tls-cert` and `--tls-key` the daemon speaks HTTPS on the port itself, and the private
//! key never enters the container.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::arg_in;

/// Where a web gateway listens unless its arguments say otherwise (`baaaht-web`'s default).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// The most browser connections a published gateway holds open at once.
const MAX_CONNECTIONS: usize = 1024;

/// Why a web gateway's port cannot be published as its arguments say.
///
/// Each message carries its cause's text, so none is a `source` (a chain would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("--listen `{0}` is not an address: write ADDR:PORT, e.g. 0.0.0.0:8080")]
    BadListen(String),
    /// The certificate or its key cannot be used: what the TLS loader said (it names the file).
    #[error("{0}")]
    Tls(String),
    #[error("--tls-cert and --tls-key go together: give both, or neither for plain HTTP")]
    HalfTls,
    /// The cause is in the message too: the gateway's state and the admins' notice show it.
    #[error("cannot listen on {address}: {error}")]
    Bind { address: SocketAddr, error: std::io::Error },
}

/// The address a web gateway registered with `args` is published on.
pub fn listen_address(args: &[String]) -> Result<SocketAddr, PublishError> {
    let value = arg_in(args, "--listen").unwrap_or(DEFAULT_LISTEN);
    value.parse().map_err(|_invalid| PublishError::BadListen(value.to_string()))
}

/// The arguments the daemon acts on for a gateway in its container: where to listen, and
/// with what certificate.
const DAEMONS_OWN: [&str; 3] = ["--listen", "--tls-cert", "--tls-key"];

/// `args` without those the daemon acts on itself ([`DAEMONS_OWN`]) and their values.
pub fn container_args(args: &[String]) -> Vec<String> {
    let mut kept = Vec::with_capacity(args.len());
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if DAEMONS_OWN.contains(&arg.as_str()) {
            rest.next();
        } else if !DAEMONS_OWN.iter().any(|flag| arg.strip_prefix(flag).is_some_and(|value| value.starts_with('='))) {
            kept.push(arg.clone());
        }
    }
    kept
}

/// The HTTPS the daemon speaks on the port, when `args` give a certificate and its key.
pub fn tls_of(args: &[String]) -> Result<Option<tokio_rustls::TlsAcceptor>, PublishError> {
    match (arg_in(args, "--tls-cert"), arg_in(args, "--tls-key")) {
        (Some(cert), Some(key)) => {
            let config =
                baaaht_proto::tls::server_config(Path::new(cert), Path::new(key)).map_err(PublishError::Tls)?;
            Ok(Some(tokio_rustls::TlsAcceptor::from(config)))
        }
        (None, None) => Ok(None),
        _ => Err(PublishError::HalfTls),
    }
}

/// Binds `address` for a gateway's browsers.
pub async fn bind(address: SocketAddr) -> Result<TcpListener, PublishError> {
    TcpListener::bind(address).await.map_err(|error| PublishError::Bind { address, error })
}

/// Carries connections from `listener` (through `tls` when given) to the socket open as
/// `socket` until `cancel`.
pub fn forward(
    gateway: String,
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    socket: OwnedFd,
    cancel: CancellationToken,
    tracker: &TaskTracker,
) {
    let socket = Arc::new(socket);
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let tasks = tracker.clone();
    tracker.spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = cancel.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%gateway, %error, "cannot accept a browser's connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(slot) = open.clone().try_acquire_owned() else {
                tracing::warn!(%gateway, "a browser's connection was dropped: {MAX_CONNECTIONS} are open already");
                continue;
            };
            let (socket, cancel, gateway, tls) = (socket.clone(), cancel.clone(), gateway.clone(), tls.clone());
            tasks.spawn(async move {
                // silent-ok: Nagle's delay only slows small writes; the bytes go either way.
                let _ = stream.set_nodelay(true);
                let carried = async {
                    match tls {
                        Some(acceptor) => match baaaht_proto::tls::accept(&acceptor, stream).await {
                            Ok(stream) => carry(stream, &socket, &gateway).await,
                            Err(error) => tracing::debug!(%gateway, %error, "a browser's TLS handshake failed"),
                        },
                        None => carry(stream, &socket, &gateway).await,
                    }
                };
                tokio::select! {
                    () = cancel.cancelled() => {}
                    () = carried => {}
                }
                drop(slot);
            });
        }
    });
}

/// How long a browser still sending is read from (and its bytes dropped) once the gateway
/// has answered and closed, so that it reads the answer rather than a reset.
const LINGER: Duration = Duration::from_secs(2);

/// Carries one connection to the gateway's site socket, both ways, until either side closes.
/// When the gateway answers before taking the whole request (a 413 for a file too large) and
/// closes, the answer still goes to the browser and what it goes on sending is read and dropped
/// for a while ([`LINGER`]): closing with its bytes unread would reset the connection, and the
/// browser would see a failed upload instead of the answer.
async fn carry<S>(stream: S, socket: &OwnedFd, gateway: &str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    let path = format!("/proc/self/fd/{}", socket.as_raw_fd());
    let upstream = match UnixStream::connect(&path).await {
        Ok(upstream) => upstream,
        Err(error) => return tracing::warn!(%gateway, %error, "cannot reach the gateway's HTTP socket"),
    };
    let (mut from_browser, mut to_browser) = tokio::io::split(stream);
    let (mut from_gateway, mut to_gateway) = upstream.into_split();
    // silent-ok (all below): a browser or the gateway closing a connection is not news.
    let requests = async {
        match tokio::io::copy(&mut from_browser, &mut to_gateway).await {
            Ok(_) => drop(to_gateway.shutdown().await),
            // The gateway stopped taking: the rest is read and dropped.
            Err(_) => drop(tokio::io::copy(&mut from_browser, &mut tokio::io::sink()).await),
        }
    };
    let answers = async {
        drop(tokio::io::copy(&mut from_gateway, &mut to_browser).await);
        drop(to_browser.shutdown().await);
    };
    tokio::pin!(requests, answers);
    tokio::select! {
        () = &mut requests => answers.await,
        () = &mut answers => drop(tokio::time::timeout(LINGER, requests).await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|arg| arg.to_string()).collect()
    }

    #[test]
    fn the_address_is_the_gateways_own_listen_argument() {
        assert_eq!(listen_address(&[]).expect("default").to_string(), DEFAULT_LISTEN);
        let given = args(&["--public-url", "https://chat.example", "--listen", "0.0.0.0:9000"]);
        assert_eq!(listen_address(&given).expect("given").to_string(), "0.0.0.0:9000");
        assert_eq!(listen_address(&args(&["--listen=[::1]:80"])).expect("given").to_string(), "[::1]:80");
        let error = listen_address(&args(&["--listen", "my-server"])).expect_err("refused").to_string();
        assert!(error.contains("--listen `my-server` is not an address"), "{error}");
        assert_eq!(container_args(&given), args(&["--public-url", "https://chat.example"]));
        let given = args(&["--listen=1.2.3.4:5", "--tls-cert", "/c.pem", "--scope", "groups", "--tls-key=/k.pem"]);
        assert_eq!(container_args(&given), args(&["--scope", "groups"]));
        let error = tls_of(&args(&["--tls-cert", "/c.pem"])).err().expect("refused").to_string();
        assert!(error.contains("--tls-cert and --tls-key go together"), "{error}");
    }
}
