//! Where a gateway's connections go: [`baaaht_proto::egress`] (the daemon's tunnel in a
//! container, which has no network; straight out on a host), with TLS on top — or, for a
//! library that only takes a proxy's address, through [`local_proxy`].

pub use baaaht_proto::egress::{host_and_port, Egress, Stream};

/// An HTTPS (or, for a local test service, plain HTTP) connector over `egress`, trusting the
/// system's certificate authorities.
pub fn https(egress: Egress) -> Result<hyper_rustls::HttpsConnector<Egress>, String> {
    // ring, named: a library asking for the default cannot choose when more than one is built.
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
        .map_err(|error| format!("cannot load the system's CA certificates: {error}"))?
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(egress))
}

/// A CONNECT proxy on the gateway's own loopback in front of `egress`, for a library that
/// takes a proxy's address but no connector of ours (matrix-sdk's HTTP client): its
/// `http://127.0.0.1:{port}`, or `None` when connections go straight out. Only HTTPS goes
/// through it (a tunnel per connection, to the hosts the daemon lets the gateway reach).
pub async fn local_proxy(egress: Egress) -> std::io::Result<Option<String>> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    if matches!(egress, Egress::Direct) {
        return Ok(None);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let mut client = match listener.accept().await {
                Ok((client, _)) => client,
                Err(error) => {
                    tracing::warn!(%error, "the local proxy cannot take a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let egress = egress.clone();
            tokio::spawn(async move {
                // The request's head: `CONNECT host:port HTTP/1.1`, headers, an empty line.
                let mut head = Vec::with_capacity(512);
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                    match client.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let line = String::from_utf8_lossy(&head);
                let target = line.lines().next().and_then(|first| first.strip_prefix("CONNECT ")).and_then(|rest| {
                    let authority = rest.split_whitespace().next()?;
                    let (host, port) = authority.rsplit_once(':')?;
                    Some((host.trim_start_matches('[').trim_end_matches(']').to_string(), port.parse::<u16>().ok()?))
                });
                let Some((host, port)) = target else {
                    // silent-ok: a client that did not ask for a tunnel is told and dropped.
                    let _ = client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n").await;
                    return;
                };
                match egress.dial(&host, port).await {
                    Ok(mut upstream) => {
                        if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_ok() {
                            // silent-ok: either side closing ends the tunnel.
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, host, port, "the daemon's egress refused a tunnel");
                        // silent-ok: the client learns of the refusal from the status, if it still listens.
                        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                    }
                }
            });
        }
    });
    Ok(Some(format!("http://{address}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// An egress socket that opens a tunnel to `allowed` only, and echoes what comes through.
    fn daemon_egress(path: std::path::PathBuf, allowed: &'static str) {
        let listener = tokio::net::UnixListener::bind(path).expect("bind");
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = vec![];
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        stream.read_exact(&mut byte).await.expect("head");
                        head.push(byte[0]);
                    }
                    if !String::from_utf8_lossy(&head).starts_with(&format!("CONNECT {allowed} ")) {
                        stream.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").await.expect("refuse");
                        return;
                    }
                    stream.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.expect("open");
                    let mut buffer = [0u8; 64];
                    while let Ok(read) = stream.read(&mut buffer).await {
                        if read == 0 || stream.write_all(&buffer[..read]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
    }

    async fn ask(proxy: &str, request: &str) -> (String, tokio::net::TcpStream) {
        let mut stream = tokio::net::TcpStream::connect(proxy.trim_start_matches("http://")).await.expect("connect");
        stream.write_all(request.as_bytes()).await.expect("ask");
        let mut head = vec![];
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.expect("answer") == 1 {
            head.push(byte[0]);
        }
        (String::from_utf8_lossy(&head).into_owned(), stream)
    }

    #[tokio::test]
    async fn the_local_proxy_tunnels_through_the_daemons_egress_and_nothing_else() {
        assert_eq!(local_proxy(Egress::Direct).await.expect("direct"), None, "no proxy on a host");
        let folder = std::env::temp_dir().join(format!("baaaht-kit-proxy-{}", std::process::id()));
        // silent-ok: a folder left by an earlier run, or none.
        let _ = std::fs::remove_dir_all(&folder);
        std::fs::create_dir_all(&folder).expect("folder");
        let socket = folder.join("egress.sock");
        daemon_egress(socket.clone(), "matrix.home.example:443");
        let proxy = local_proxy(Egress::Tunnel(std::sync::Arc::new(socket))).await.expect("proxy").expect("an address");
        assert!(proxy.starts_with("http://127.0.0.1:"), "{proxy}");
        let (head, mut tunnel) = ask(&proxy, "CONNECT matrix.home.example:443 HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        tunnel.write_all(b"ping").await.expect("write");
        let mut echoed = [0u8; 4];
        tunnel.read_exact(&mut echoed).await.expect("echo");
        assert_eq!(&echoed, b"ping", "bytes go both ways through the tunnel");
        let (refused, _) = ask(&proxy, "CONNECT evil.example:443 HTTP/1.1\r\n\r\n").await;
        assert!(refused.starts_with("HTTP/1.1 502"), "the daemon's refusal is a refusal: {refused}");
        let (plain, _) = ask(&proxy, "GET http://matrix.home.example/ HTTP/1.1\r\n\r\n").await;
        assert!(plain.starts_with("HTTP/1.1 405"), "only tunnels: {plain}");
        // silent-ok: cleaning up.
        let _ = std::fs::remove_dir_all(&folder);
    }
}
