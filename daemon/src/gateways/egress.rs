//! A gateway container's only way out: `egress.sock` in its folder, where it asks for a tunnel
//! with `CONNECT host:port HTTP/1.1`. The daemon opens one only to the hosts the gateway needs
//! (a Slack gateway: slack.com and its subdomains on 443, and the host of its `--api-url`; a
//! web gateway: its OpenID provider's issuer, and the hosts of the token, key, userinfo and
//! logout endpoints its discovery document names),
//! through the web proxy's address checks (public addresses only, unless
//! `tools.web_proxy.allow` lets a private one in), and audits each.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use crate::audit::{Audit, Kind, Record};
use crate::egress::proxy::WebProxy;
use crate::gateways::{GatewayKind, GatewayRecord};

/// The longest request head taken.
const MAX_HEAD: usize = 8 * 1024;
/// How long a gateway has to send its request.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The most tunnels a gateway holds open at once.
const MAX_TUNNELS: usize = 64;

/// The hosts gateway `record` may reach, as `host:port` or `*.domain:port`.
pub fn hosts_of(record: &GatewayRecord) -> Vec<String> {
    use crate::oidc::host_port;
    match &record.kind {
        GatewayKind::Slack { .. } => {
            let mut hosts = vec!["slack.com:443".to_string(), "*.slack.com:443".to_string()];
            // The Web API the registrant named (a test workspace's, or an enterprise grid's host).
            hosts.extend(record.arg("--api-url").and_then(host_port));
            hosts
        }
        // The provider's (its other endpoints' hosts are added from its discovery document).
        GatewayKind::Web { issuer, .. } => host_port(issuer).into_iter().collect(),
    }
}

/// The tunnel endpoint of one gateway run.
pub struct Tunnels {
    pub gateway: String,
    pub hosts: Vec<String>,
    pub web: Arc<WebProxy>,
    pub audit: Audit,
}

impl Tunnels {
    /// Binds `path` (a stale socket is replaced) and serves tunnels on `tracker` until `cancel`.
    pub fn serve(
        self,
        path: &Path,
        cancel: CancellationToken,
        tracker: &tokio_util::task::TaskTracker,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        match std::fs::remove_file(path) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
        let listener = UnixListener::bind(path)?;
        let tunnels = Arc::new(self);
        let open = Arc::new(tokio::sync::Semaphore::new(MAX_TUNNELS));
        let tasks = tracker.clone();
        Ok(tracker.spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = cancel.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                match accepted {
                    Ok((mut stream, _)) => {
                        let Ok(slot) = open.clone().try_acquire_owned() else {
                            let why = format!("gateway {} has {MAX_TUNNELS} connections open already", tunnels.gateway);
                            tracing::warn!(gateway = %tunnels.gateway, "a gateway's connection was refused: too many open");
                            tasks.spawn(async move { answer(&mut stream, "503 Service Unavailable", &why).await });
                            continue;
                        };
                        let tunnels = tunnels.clone();
                        let cancel = cancel.clone();
                        tasks.spawn(async move {
                            tokio::select! {
                                () = cancel.cancelled() => {}
                                () = tunnels.tunnel(stream) => {}
                            }
                            drop(slot);
                        });
                    }
                    Err(error) => {
                        tracing::warn!(gateway = %tunnels.gateway, %error, "cannot accept on the egress socket");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }))
    }

    /// One tunnel: the request, the checks, the answer, then the bytes both ways.
    async fn tunnel(&self, mut stream: UnixStream) {
        let target = match tokio::time::timeout(HEAD_TIMEOUT, read_target(&mut stream)).await {
            Ok(Ok(target)) => target,
            Ok(Err(why)) => return answer(&mut stream, "400 Bad Request", &why).await,
            Err(_) => return answer(&mut stream, "408 Request Timeout", "no request within 10 s").await,
        };
        let (host, port) = target;
        let record = Record::new(Kind::Egress, format!("gateway:{}", self.gateway), "")
            .detail("host", host.as_str())
            .detail("port", port);
        if !crate::egress::proxy::listed(self.hosts.iter().map(String::as_str), &host, port) {
            let why = format!("{host}:{port} is not a host gateway {} needs ({})", self.gateway, self.hosts.join(", "));
            tracing::warn!(gateway = %self.gateway, %why, "a gateway's connection was refused");
            self.audit.record(Record { outcome: "refused".into(), ..record }.detail("reason", why.as_str()));
            return answer(&mut stream, "403 Forbidden", &why).await;
        }
        let mut upstream = match self.web.connect_checked(&host, port).await {
            Ok(upstream) => upstream,
            Err(error) => {
                let outcome = if error.is_refusal() { "refused" } else { "failed" };
                let why = error.to_string();
                tracing::warn!(gateway = %self.gateway, %why, "a gateway's connection was not opened");
                self.audit.record(Record { outcome: outcome.into(), ..record }.detail("reason", why.as_str()));
                let status = if error.is_refusal() { "403 Forbidden" } else { "502 Bad Gateway" };
                return answer(&mut stream, status, &why).await;
            }
        };
        self.audit.record(Record { outcome: "allowed".into(), ..record });
        if stream.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
            return;
        }
        // silent-ok: either end hanging up ends the tunnel.
        let _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream).await;
    }
}

/// Reads `CONNECT host:port HTTP/1.1` and the head after it; the host and port.
async fn read_target(stream: &mut UnixStream) -> Result<(String, u16), String> {
    use tokio::io::AsyncReadExt as _;
    // One byte at a time, at most MAX_HEAD: nothing past the head may be taken from the tunnel.
    let mut reader = BufReader::with_capacity(1, stream.take(MAX_HEAD as u64));
    let mut request_line = String::new();
    reader.read_line(&mut request_line).await.map_err(|error| error.to_string())?;
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).await.map_err(|error| error.to_string())?;
        if line == "\r\n" || line == "\n" {
            break;
        }
        if n == 0 || !line.ends_with('\n') {
            return Err("the request head ended early or is longer than 8 KiB".into());
        }
    }
    let mut parts = request_line.split_whitespace();
    let (Some("CONNECT"), Some(authority)) = (parts.next(), parts.next()) else {
        return Err(format!("expected `CONNECT host:port HTTP/1.1`, got `{}`", request_line.trim_end()));
    };
    match crate::egress::proxy::split_host_port(authority) {
        Some((host, Some(port))) if !host.is_empty() && port != 0 => Ok((host.to_ascii_lowercase(), port)),
        _ => Err(format!("`{authority}` is not host:port")),
    }
}

async fn answer(stream: &mut UnixStream, status: &str, why: &str) {
    let body = format!("{why}\n");
    let head = format!("HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n", body.len());
    // silent-ok: the gateway may be gone; the refusal is logged and audited.
    let _ = stream.write_all(format!("{head}{body}").as_bytes()).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateways::RunMode;

    fn record(args: &[&str]) -> GatewayRecord {
        GatewayRecord {
            name: "work".into(),
            kind: GatewayKind::Slack { team: "T1".into() },
            token_sha256: String::new(),
            created: String::new(),
            mode: RunMode::Container,
            args: args.iter().map(|arg| arg.to_string()).collect(),
        }
    }

    #[test]
    fn a_slack_gateway_reaches_slack_and_its_api_host_only() {
        let hosts = hosts_of(&record(&["--api-url", "http://127.0.0.1:4000/api"]));
        let allowed = |host: &str, port| crate::egress::proxy::listed(hosts.iter().map(String::as_str), host, port);
        assert!(allowed("slack.com", 443));
        assert!(allowed("wss-primary.slack.com", 443));
        assert!(allowed("files.slack.com", 443));
        assert!(allowed("127.0.0.1", 4000));
        assert!(!allowed("127.0.0.1", 4001));
        assert!(!allowed("slack.com", 80));
        assert!(!allowed("evilslack.com", 443));
        assert!(!allowed("slack.com.evil.example", 443));
        assert_eq!(hosts_of(&record(&[])), ["slack.com:443", "*.slack.com:443"]);
    }

    #[tokio::test]
    async fn a_host_it_does_not_need_is_refused_before_any_connection() {
        let folder = tempfile::tempdir().expect("tempdir");
        let path = folder.path().join("egress.sock");
        let config = crate::config::WebProxyConfig::default();
        let connector = Arc::new(crate::egress::proxy::TcpConnector);
        let web =
            Arc::new(WebProxy::new(&config, Arc::new(crate::egress::proxy::SystemResolver), connector).expect("proxy"));
        let metrics = Arc::new(crate::metrics::Metrics::default());
        let audit = Audit::open(folder.path().join("audit"), true, 30, metrics);
        let tunnels = Tunnels { gateway: "work".into(), hosts: hosts_of(&record(&[])), web, audit: audit.clone() };
        let cancel = CancellationToken::new();
        let tracker = tokio_util::task::TaskTracker::new();
        let server = tunnels.serve(&path, cancel.clone(), &tracker).expect("serve");
        let ask = |request: &'static str| {
            let path = path.clone();
            async move {
                let mut stream = UnixStream::connect(&path).await.expect("connect");
                stream.write_all(request.as_bytes()).await.expect("write");
                let mut answer = String::new();
                tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut answer).await.expect("read");
                answer
            }
        };
        let refused = ask("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n").await;
        assert!(refused.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{refused}");
        assert!(
            refused.ends_with("example.com:443 is not a host gateway work needs (slack.com:443, *.slack.com:443)\n")
        );
        let garbled = ask("GET / HTTP/1.1\r\n\r\n").await;
        assert!(garbled.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{garbled}");
        audit.flush();
        let found = audit
            .search(&crate::audit::Query { kind: Some(Kind::Egress), ..crate::audit::Query::default() })
            .expect("search");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].principal.as_str(), found[0].outcome.as_str()), ("gateway:work", "refused"));
        cancel.cancel();
        server.await.expect("server");
    }
}
