//! A provider on the host's loopback (llama.cpp's server on 127.0.0.1:8080, Ollama on
//! localhost:11434) for an LLM gateway in its container, where 127.0.0.1 is the container's
//! own: the daemon binds a Unix socket in the gateway's folder for each such provider and
//! carries every connection made on it to that one address on the host, byte for byte. The
//! gateway sends the same HTTP it would send the address itself (`relay_socket` in its
//! configuration), so nothing else about the provider changes.
//!
//! Only the addresses written in `providers.yaml` are relayed, and only from the gateway's
//! folder, which no agent or tool container reaches. When nothing answers on the host, a
//! plain-HTTP provider gets an answer that says so and what to do, so the sentence reaches
//! `baaaht chat` and `baaaht doctor` instead of "connection closed".

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use baaaht_proto::v1;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};

/// The most connections one relay carries at once (a gateway holds one per request).
const MAX_OPEN: usize = 64;
/// How long the host's server has to take a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the rest of a request is read (and dropped) after the relay answered it itself.
const LINGER: Duration = Duration::from_secs(2);

/// A provider's address on the host's loopback, from its `api_base`: `host:port`, and
/// whether it speaks plain HTTP. `None` for any other address.
pub fn loopback_target(api_base: &str) -> Option<(String, bool)> {
    let (plain, rest) = match api_base.split_once("://")? {
        ("http", rest) => (true, rest),
        ("https", rest) => (false, rest),
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => {
            let (host, rest) = bracketed.split_once(']')?;
            (host, rest.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let loopback = host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return None;
    }
    let port: u16 = match port {
        Some(port) => port.parse().ok()?,
        None if plain => 80,
        None => 443,
    };
    let host = if host.contains(':') { format!("[{host}]") } else { host.to_string() };
    Some((format!("{host}:{port}"), plain))
}

/// One provider's relay: its socket, bound, and where it leads.
#[derive(Debug)]
pub struct Relay {
    provider: String,
    /// `host:port` on the host's loopback.
    target: String,
    plain_http: bool,
    listener: UnixListener,
}

/// Binds a relay in `folder` (the gateway's, mounted at `mount` in its container) for each
/// usable provider of `config` on the host's loopback, and names its socket in the provider's
/// `relay_socket` as the gateway sees it.
pub fn bind(folder: &Path, mount: &str, config: &mut v1::GatewayConfig) -> std::io::Result<Vec<Relay>> {
    let mut relays = vec![];
    for (index, provider) in config.providers.iter_mut().enumerate() {
        if !provider.unusable.is_empty() {
            continue;
        }
        let Some((target, plain_http)) = loopback_target(&provider.api_base) else { continue };
        let name = format!("relay-{index}.sock");
        let path = folder.join(&name);
        let listener = UnixListener::bind(&path)?;
        crate::sandbox::shared_dirs::share_socket(&path)?;
        tracing::info!(provider = %provider.name, %target, "relaying the LLM gateway's connections to the host's loopback");
        provider.relay_socket = format!("{mount}/{name}");
        relays.push(Relay { provider: provider.name.clone(), target, plain_http, listener });
    }
    Ok(relays)
}

/// Carries the connections made on `relays` until dropped (which ends every one of them).
pub async fn serve(relays: Vec<Relay>) -> std::convert::Infallible {
    // Dropped with this future: each relay's task, and so its connections, end with it.
    let mut serving = tokio::task::JoinSet::new();
    for relay in relays {
        serving.spawn(serve_one(relay));
    }
    std::future::pending().await
}

async fn serve_one(relay: Relay) {
    let relay = Arc::new(relay);
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_OPEN));
    // Dropped with this future: every connection ends with the relay.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = relay.listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let Ok(slot) = open.clone().try_acquire_owned() else {
                        tracing::warn!(provider = %relay.provider, "a relayed connection was refused: {MAX_OPEN} are open");
                        continue;
                    };
                    let relay = relay.clone();
                    connections.spawn(async move {
                        carry(stream, &relay).await;
                        drop(slot);
                    });
                }
                Err(error) => {
                    tracing::warn!(provider = %relay.provider, %error, "cannot accept on the relay");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            // silent-ok: a finished connection's outcome was logged where it ended.
            Some(_) = connections.join_next() => {}
        }
    }
}

/// Carries one connection of the gateway's to the relay's target, both ways, until either
/// side closes; when the target cannot be reached, says so in an HTTP answer.
async fn carry(mut gateway: UnixStream, relay: &Relay) {
    let why = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&relay.target)).await {
        Ok(Ok(mut provider)) => {
            // silent-ok: either side closing is the end of an exchange, not news.
            let _ = tokio::io::copy_bidirectional(&mut gateway, &mut provider).await;
            return;
        }
        Ok(Err(error)) => error.to_string(),
        Err(_) => format!("it did not take the connection within {} s", CONNECT_TIMEOUT.as_secs()),
    };
    tracing::warn!(provider = %relay.provider, target = %relay.target, %why, "cannot reach a provider on the host's loopback");
    if relay.plain_http {
        let sentence = unreachable_sentence(&relay.target, &why);
        // silent-ok: a gateway that left first has no one to tell.
        let _ = answer_unreachable(&mut gateway, &sentence).await;
    }
}

/// What the gateway (and so `baaaht chat` and `doctor`) is told when nothing answers at
/// `target` on the host.
fn unreachable_sentence(target: &str, why: &str) -> String {
    format!(
        "nothing answers at {target} on this host ({why}); the LLM gateway runs in a container and \
         baaahtd relays its connections there: start the model server (e.g. `llama-server --port {port}` \
         or `ollama serve`), or correct api_base in providers.yaml",
        port = target.rsplit_once(':').map_or("8080", |(_, port)| port)
    )
}

/// Answers the request on `stream` with `502` and `sentence` (as an OpenAI-style error, which
/// the gateway shows) once its head has arrived (an answer that comes before the request is,
/// to an HTTP client, a broken connection), then reads and drops the rest of the request for
/// a while so the answer is read rather than reset.
async fn answer_unreachable(stream: &mut UnixStream, sentence: &str) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let whole_head = async {
        while !head.windows(4).any(|window| window == b"\r\n\r\n") && head.len() < 64 * 1024 {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(read) => head.extend_from_slice(&chunk[..read]),
            }
        }
        true
    };
    if !tokio::time::timeout(LINGER, whole_head).await.unwrap_or(false) {
        return Ok(());
    }
    let body =
        serde_json::json!({"error": {"message": sentence, "type": baaaht_llm::provider::NOTHING_ANSWERS}}).to_string();
    let head = format!(
        "HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await?;
    let mut sink = [0u8; 16 * 1024];
    let _ =
        tokio::time::timeout(LINGER, async { while stream.read(&mut sink).await.is_ok_and(|read| read > 0) {} }).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_hosts_loopback_is_relayed() {
        let target = |base: &str| loopback_target(base);
        assert_eq!(target("http://127.0.0.1:8080/v1"), Some(("127.0.0.1:8080".into(), true)));
        assert_eq!(target("http://localhost:11434/v1"), Some(("localhost:11434".into(), true)));
        assert_eq!(target("http://LOCALHOST/v1"), Some(("LOCALHOST:80".into(), true)));
        assert_eq!(target("https://127.1.2.3"), Some(("127.1.2.3:443".into(), false)));
        assert_eq!(target("http://[::1]:8000/v1"), Some(("[::1]:8000".into(), true)));
        assert_eq!(target("http://user@127.0.0.1:9/v1"), Some(("127.0.0.1:9".into(), true)));
        for elsewhere in [
            "https://api.anthropic.com",
            "http://192.168.1.5:11434/v1",
            "http://localhost.example.com:80/v1",
            "http://127.0.0.1.nip.io/v1",
            "http://127.0.0.1:notaport/v1",
            "ftp://127.0.0.1/",
            "127.0.0.1:8080",
        ] {
            assert_eq!(target(elsewhere), None, "{elsewhere}");
        }
    }

    fn config(providers: &[(&str, &str, &str)]) -> v1::GatewayConfig {
        v1::GatewayConfig {
            providers: providers
                .iter()
                .map(|(name, api_base, unusable)| v1::GatewayProvider {
                    name: name.to_string(),
                    api_base: api_base.to_string(),
                    unusable: unusable.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    async fn ask(socket: &str) -> String {
        let mut stream = UnixStream::connect(socket).await.expect("the relay's socket");
        stream.write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.expect("request");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("answer");
        answer
    }

    #[tokio::test]
    async fn a_relay_carries_to_its_address_and_says_when_nothing_answers_there() {
        let folder = tempfile::tempdir().expect("tempdir");
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a server");
        let port = server.local_addr().expect("address").port();
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let closed_port = closed.local_addr().expect("address").port();
        drop(closed);
        let mut config = config(&[
            ("cloud", "https://api.example.com/v1", ""),
            ("llama", &format!("http://127.0.0.1:{port}/v1"), ""),
            ("ollama", &format!("http://localhost:{closed_port}/v1"), ""),
            ("keyless", "http://127.0.0.1:1/v1", "its key is missing"),
        ]);
        let relays = bind(folder.path(), "/run/baaaht-llm", &mut config).expect("bound");
        assert_eq!(relays.len(), 2, "{relays:?}");
        let sockets: Vec<&str> = config.providers.iter().map(|p| p.relay_socket.as_str()).collect();
        assert_eq!(sockets, ["", "/run/baaaht-llm/relay-1.sock", "/run/baaaht-llm/relay-2.sock", ""]);
        let serving = tokio::spawn(serve(relays));
        tokio::spawn(async move {
            let (mut connection, _) = server.accept().await.expect("a connection");
            let mut head = vec![0u8; 1024];
            let read = connection.read(&mut head).await.expect("the request");
            assert!(head[..read].starts_with(b"GET /v1/models"), "carried as sent");
            connection
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .await
                .expect("answer");
        });
        let path = |name: &str| folder.path().join(name).display().to_string();
        let answer = ask(&path("relay-1.sock")).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("ok"), "{answer}");
        let answer = ask(&path("relay-2.sock")).await;
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
        assert!(
            answer.contains(&format!("nothing answers at localhost:{closed_port} on this host"))
                && answer.contains("ollama serve")
                && answer.contains("correct api_base in providers.yaml"),
            "{answer}"
        );
        // Nothing is said before the request has come: a client would take it for a broken
        // connection.
        let mut early = UnixStream::connect(path("relay-2.sock")).await.expect("the relay's socket");
        let mut byte = [0u8; 1];
        let said = tokio::time::timeout(Duration::from_millis(200), early.read(&mut byte)).await;
        assert!(said.is_err(), "the relay answered before the request: {said:?}");
        serving.abort();
    }
}
