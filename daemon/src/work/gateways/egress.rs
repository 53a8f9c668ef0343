//! A gateway container's only way out: `egress.sock` in its folder, where it asks for a tunnel
//! with `CONNECT host:port HTTP/1.1`. The daemon opens one only to the hosts the gateway needs
//! (a Slack gateway: slack.com and its subdomains on 443, and the host of its `--api-url`; an
//! email gateway: its `--imap` and `--smtp` servers; a
//! web gateway: its OpenID provider's issuer, the hosts of the token, key, userinfo and
//! logout endpoints its discovery document names, and the push services its notifications go
//! to),
//! through the web proxy's address checks (public addresses only, unless
//! `tools.web_proxy.allow` lets a private one in), and audits each.

use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::guard::audit::Audit;
use crate::net::egress::proxy::WebProxy;
use crate::net::egress::tunnel::{Listener, Reach, Tunnels};
use crate::work::gateways::{GatewayKind, GatewayRecord};

/// The most tunnels a gateway holds open at once.
const MAX_TUNNELS: usize = 64;

/// The hosts gateway `record` may reach, as `host:port` or `*.domain:port`.
pub fn hosts_of(record: &GatewayRecord) -> Vec<String> {
    use crate::people::oidc::host_port;
    match &record.kind {
        GatewayKind::Slack { .. } => {
            let mut hosts = vec!["slack.com:443".to_string(), "*.slack.com:443".to_string()];
            // The Web API the registrant named (a test workspace's, or an enterprise grid's host).
            hosts.extend(record.arg("--api-url").and_then(host_port));
            hosts
        }
        GatewayKind::Telegram { .. } => {
            let mut hosts = vec!["api.telegram.org:443".to_string()];
            // The Bot API the registrant named (a local Bot API server, or a test's).
            hosts.extend(record.arg("--api-url").and_then(host_port));
            hosts
        }
        // The mailbox's IMAP server and the SMTP server answers go out through, and the resolver
        // DKIM keys are asked of, as registered.
        GatewayKind::Email { .. } => {
            ["--imap", "--smtp", "--dns"].iter().filter_map(|flag| record.arg(flag)).filter_map(host_port).collect()
        }
        // The homeserver (its media too: matrix-sdk fetches media from the homeserver).
        GatewayKind::Matrix { homeserver } => host_port(homeserver).into_iter().collect(),
        // The provider's (its other endpoints' hosts are added from its discovery document),
        // the browsers' push services and any push service the registrant named.
        GatewayKind::Web { issuer, .. } => {
            let mut hosts: Vec<String> = host_port(issuer).into_iter().collect();
            hosts.extend(baaaht_proto::PUSH_SERVICES.iter().map(|service| format!("{service}:443")));
            hosts.extend(record.arg_values("--push-service").into_iter().filter_map(host_port));
            hosts
        }
    }
}

/// Serves gateway `record`'s egress socket at `path` (a stale socket is replaced) with tunnels
/// to `hosts` only, on `tracker` until `cancel`.
pub fn serve(
    record: &GatewayRecord,
    hosts: Vec<String>,
    web: Arc<WebProxy>,
    audit: Audit,
    path: &Path,
    cancel: CancellationToken,
    tracker: &tokio_util::task::TaskTracker,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    let principal = format!("gateway:{}", record.name);
    let mut tunnels = Tunnels::new(principal, format!("gateway {}", record.name), Reach::Listed(hosts), web, audit);
    tunnels.max_open = MAX_TUNNELS;
    Ok(Arc::new(tunnels).serve(Listener::Unix(listener), cancel, tracker))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::audit::Kind;
    use crate::work::gateways::RunMode;
    use tokio::io::AsyncWriteExt as _;
    use tokio::net::UnixStream;

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
        let allowed =
            |host: &str, port| crate::net::egress::filter::listed(hosts.iter().map(String::as_str), host, port);
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

    #[test]
    fn a_gateway_names_only_its_own_people_and_a_telegram_bot_admits_only_those_listed() {
        let mut matrix = record(&["--allow-server", "home.test", "--allow-server=other.test:8448"]);
        matrix.kind = GatewayKind::Matrix { homeserver: "https://home.test".into() };
        assert!(matrix.may_name("matrix:@alice:home.test") && matrix.may_name("matrix:@bob:other.test:8448"));
        assert!(!matrix.may_name("matrix:@mallory:evil.test") && !matrix.may_name("matrix:@x:home.test.evil"));
        let mut telegram = record(&["--allow", "42, 43", "--allow=7"]);
        telegram.kind = GatewayKind::Telegram { bot: "9".into() };
        assert!(telegram.admits("telegram:9:42") && telegram.admits("telegram:9:7"));
        assert!(!telegram.admits("telegram:9:666") && !telegram.admits("telegram:8:42"));
        assert!(record(&[]).admits("slack:T1:U1"), "a Slack workspace admits its own");
    }

    #[test]
    fn a_telegram_gateway_reaches_the_bot_api_and_its_api_host_only() {
        let mut telegram = record(&["--api-url", "http://127.0.0.1:4100"]);
        telegram.kind = GatewayKind::Telegram { bot: "123".into() };
        let hosts = hosts_of(&telegram);
        assert_eq!(hosts, ["api.telegram.org:443", "127.0.0.1:4100"]);
        let allowed =
            |host: &str, port| crate::net::egress::filter::listed(hosts.iter().map(String::as_str), host, port);
        assert!(allowed("api.telegram.org", 443) && allowed("127.0.0.1", 4100));
        assert!(
            !allowed("telegram.org", 443) && !allowed("evil.api.telegram.org", 443) && !allowed("api.telegram.org", 80)
        );
    }

    #[test]
    fn an_email_gateway_reaches_its_imap_and_smtp_servers_only() {
        let mut email = record(&["--imap", "mail.example.org:993", "--smtp=smtp.example.org:465", "--allow", "@x.org"]);
        email.kind = GatewayKind::Email { address: "assistant@example.org".into() };
        let hosts = hosts_of(&email);
        assert_eq!(hosts, ["mail.example.org:993", "smtp.example.org:465"]);
        let allowed =
            |host: &str, port| crate::net::egress::filter::listed(hosts.iter().map(String::as_str), host, port);
        assert!(allowed("mail.example.org", 993) && allowed("smtp.example.org", 465));
        assert!(!allowed("mail.example.org", 465) && !allowed("example.org", 993) && !allowed("x.org", 443));
    }

    #[test]
    fn a_web_gateway_reaches_its_provider_and_the_push_services_only() {
        let mut web = record(&["--push-service", "https://127.0.0.1:9443/"]);
        web.kind = GatewayKind::Web { issuer: "https://id.example.org/realms/home".into(), audience: "gw".into() };
        let hosts = hosts_of(&web);
        let allowed =
            |host: &str, port| crate::net::egress::filter::listed(hosts.iter().map(String::as_str), host, port);
        assert!(allowed("id.example.org", 443) && allowed("fcm.googleapis.com", 443) && allowed("127.0.0.1", 9443));
        assert!(allowed("wns2-par02p.notify.windows.com", 443) && allowed("web.push.apple.com", 443));
        assert!(!allowed("fcm.googleapis.com", 80) && !allowed("127.0.0.1", 443) && !allowed("example.com", 443));
    }

    #[test]
    fn a_matrix_gateway_reaches_its_homeserver_only() {
        let mut matrix = record(&["--user", "@baaaht:home.example"]);
        matrix.kind = GatewayKind::Matrix { homeserver: "https://matrix.home.example".into() };
        assert_eq!(hosts_of(&matrix), ["matrix.home.example:443"]);
        matrix.kind = GatewayKind::Matrix { homeserver: "http://127.0.0.1:8008".into() };
        assert_eq!(hosts_of(&matrix), ["127.0.0.1:8008"]);
    }

    #[tokio::test]
    async fn a_host_it_does_not_need_is_refused_before_any_connection() {
        let folder = tempfile::tempdir().expect("tempdir");
        let path = folder.path().join("egress.sock");
        let config = crate::base::config::WebProxyConfig::default();
        let connector = Arc::new(crate::net::egress::proxy::TcpConnector);
        let web = Arc::new(
            WebProxy::new(&config, Arc::new(crate::net::egress::proxy::SystemResolver), connector).expect("proxy"),
        );
        let metrics = Arc::new(crate::base::metrics::Metrics::default());
        let audit = Audit::open(folder.path().join("audit"), true, 30, metrics);
        let cancel = CancellationToken::new();
        let tracker = tokio_util::task::TaskTracker::new();
        let gateway = record(&[]);
        let server =
            serve(&gateway, hosts_of(&gateway), web, audit.clone(), &path, cancel.clone(), &tracker).expect("serve");
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
            .search(&crate::guard::audit::Query { kind: Some(Kind::Egress), ..crate::guard::audit::Query::default() })
            .expect("search");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].principal.as_str(), found[0].outcome.as_str()), ("gateway:work", "refused"));
        cancel.cancel();
        server.await.expect("server");
    }
}
