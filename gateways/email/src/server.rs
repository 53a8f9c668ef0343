//! The mail servers the gateway talks to, and how their connections are made private: TLS from
//! the first byte (IMAPS on 993, SMTPS on 465) or STARTTLS on a plain port (IMAP on 143,
//! submission on 587) — never plain text — with the server's certificate verified against the
//! system's authorities and, for a household's own server, an extra one (`--ca-file`).

use rustls::pki_types::ServerName;

/// How a connection becomes private.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tls {
    /// TLS from the first byte.
    Implicit,
    /// A plain connection upgraded by STARTTLS before anything else is said.
    StartTls,
}

impl Tls {
    pub fn parse(text: &str) -> Option<Tls> {
        match text {
            "implicit" | "tls" => Some(Tls::Implicit),
            "starttls" => Some(Tls::StartTls),
            _ => None,
        }
    }
}

/// A mail server: where, and how its connection becomes private.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub host: String,
    pub port: u16,
    pub tls: Tls,
}

impl Server {
    /// `host:port` (`what` names the option in errors); the port says how TLS starts unless
    /// `tls` does: 993 and 465 from the first byte, any other port by STARTTLS.
    pub fn parse(what: &str, text: &str, tls: Option<&str>) -> Result<Server, String> {
        let (host, port) = text
            .rsplit_once(':')
            .filter(|(host, _)| !host.is_empty())
            .ok_or_else(|| format!("{what} `{text}`: give host:port, e.g. mail.example.org:993"))?;
        let port: u16 = port
            .parse()
            .ok()
            .filter(|port| *port > 0)
            .ok_or_else(|| format!("{what} `{text}`: `{port}` is not a port (1-65535)"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let tls = match tls {
            Some(text) => Tls::parse(text)
                .ok_or_else(|| format!("{what} TLS `{text}`: say implicit (TLS from the first byte) or starttls"))?,
            None if port == 993 || port == 465 => Tls::Implicit,
            None => Tls::StartTls,
        };
        Ok(Server { host, port, tls })
    }

    /// The name its certificate must carry.
    pub fn name(&self) -> Result<ServerName<'static>, String> {
        ServerName::try_from(self.host.clone())
            .map_err(|error| format!("`{}` cannot be checked against a certificate: {error}", self.host))
    }
}

pub use baaaht_gateway_kit::egress::Trust;

/// `stream` made private with `server`, its certificate verified as `trust` says.
pub async fn wrap<S>(trust: &Trust, stream: S, server: &Server) -> Result<tokio_rustls::client::TlsStream<S>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    tokio_rustls::TlsConnector::from(trust.config.clone())
        .connect(server.name()?, stream)
        .await
        .map_err(|error| format!("TLS with {}:{} failed: {error}", server.host, server.port))
}

/// The same trust for the SMTP client.
pub fn smtp(trust: &Trust, server: &Server) -> Result<lettre::transport::smtp::client::TlsParameters, String> {
    use lettre::transport::smtp::client::{Certificate, TlsParameters};
    let mut builder = TlsParameters::builder(server.host.clone());
    for der in &trust.extra {
        let certificate = Certificate::from_der(der.clone()).map_err(|error| format!("--ca-file for SMTP: {error}"))?;
        builder = builder.add_root_certificate(certificate);
    }
    builder.build_rustls().map_err(|error| format!("TLS for SMTP: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_host_and_port_and_its_port_says_how_tls_starts() {
        let imaps = Server::parse("--imap", "mail.example.org:993", None).expect("imaps");
        assert_eq!((imaps.host.as_str(), imaps.port, imaps.tls), ("mail.example.org", 993, Tls::Implicit));
        assert_eq!(Server::parse("--smtp", "mail.example.org:587", None).expect("587").tls, Tls::StartTls);
        assert_eq!(Server::parse("--imap", "127.0.0.1:10993", Some("implicit")).expect("named").tls, Tls::Implicit);
        assert_eq!(Server::parse("--imap", "[::1]:993", None).expect("v6").host, "::1");
        for bad in ["mail.example.org", ":993", "mail.example.org:0", "mail.example.org:imap"] {
            let error = Server::parse("--imap", bad, None).expect_err(bad);
            assert!(error.starts_with("--imap `"), "{error}");
        }
        assert!(Server::parse("--smtp", "x:25", Some("none")).expect_err("plain").contains("starttls"));
    }
}
