//! The port of a web gateway in its container (DESIGN.md §9.2). The container has no network:
//! the daemon listens on the host address the admin picked (the gateway's `--listen`, as for a
//! host process) and carries each connection, byte for byte, to the HTTP socket the gateway
//! serves in its `run/` folder. It connects through a descriptor of that socket, never its
//! path, so nothing the container puts in `run/` sends the daemon anywhere else.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Where a web gateway listens unless its arguments say otherwise (`baaaht-web`'s default).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// The most browser connections a published gateway holds open at once.
const MAX_CONNECTIONS: usize = 1024;

/// The address a web gateway registered with `args` is published on.
pub fn listen_address(args: &[String]) -> Result<SocketAddr, String> {
    let mut value = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--listen" {
            value = rest.next().map(String::as_str);
        } else if let Some(given) = arg.strip_prefix("--listen=") {
            value = Some(given);
        }
    }
    let value = value.unwrap_or(DEFAULT_LISTEN);
    value
        .parse()
        .map_err(|_invalid| format!("--listen `{value}` is not an address: write ADDR:PORT, e.g. 0.0.0.0:8080"))
}

/// `args` without `--listen` and its value (the daemon listens there, not the container).
pub fn without_listen(args: &[String]) -> Vec<String> {
    let mut kept = Vec::with_capacity(args.len());
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--listen" {
            rest.next();
        } else if !arg.starts_with("--listen=") {
            kept.push(arg.clone());
        }
    }
    kept
}

/// Binds `address` for a gateway's browsers.
pub async fn bind(address: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(address).await.map_err(|error| format!("cannot listen on {address}: {error}"))
}

/// Carries connections from `listener` to the socket open as `socket` until `cancel`.
pub fn forward(
    gateway: String,
    listener: TcpListener,
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
            let (socket, cancel, gateway) = (socket.clone(), cancel.clone(), gateway.clone());
            tasks.spawn(async move {
                let mut stream = stream;
                // silent-ok: Nagle's delay only slows small writes; the bytes go either way.
                let _ = stream.set_nodelay(true);
                let path = format!("/proc/self/fd/{}", socket.as_raw_fd());
                let mut upstream = match UnixStream::connect(&path).await {
                    Ok(upstream) => upstream,
                    Err(error) => {
                        tracing::warn!(%gateway, %error, "cannot reach the gateway's HTTP socket");
                        return;
                    }
                };
                tokio::select! {
                    () = cancel.cancelled() => {}
                    // silent-ok: a browser or the gateway closing a connection is not news.
                    _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream) => {}
                }
                drop((slot, socket));
            });
        }
    });
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
        let error = listen_address(&args(&["--listen", "my-server"])).expect_err("refused");
        assert!(error.contains("--listen `my-server` is not an address"), "{error}");
        assert_eq!(without_listen(&given), args(&["--public-url", "https://chat.example"]));
        assert_eq!(without_listen(&args(&["--listen=1.2.3.4:5", "--scope", "groups"])), args(&["--scope", "groups"]));
    }
}
