//! The mail servers the gateway talks to, and how their connections are made private: TLS from
//! the first byte (IMAPS on 993, SMTPS on 465) or STARTTLS on a plain port (IMAP on 143,
//! submission on 587) — never plain text — with the server's certificate verified against the
//! system's authorities and, for a household's own server, an extra one (`--ca-file`).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};

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

/// Whom the gateway trusts to vouch for a server's certificate.
#[derive(Clone)]
pub struct Trust {
    pub config: Arc<rustls::ClientConfig>,
    /// The extra authority's certificates (DER), for the SMTP client's own TLS set-up.
    pub extra: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trust").field("extra", &self.extra.len()).finish_non_exhaustive()
    }
}

impl Trust {
    /// The system's authorities, and `ca_file`'s certificates when given.
    pub fn load(ca_file: Option<&Path>) -> Result<Trust, String> {
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(found.certs);
        let mut extra = vec![];
        if let Some(path) = ca_file {
            let bytes = std::fs::read(path)
                .map_err(|error| format!("--ca-file {}: cannot read it: {error}", path.display()))?;
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
                .collect::<Result<_, _>>()
                .map_err(|error| format!("--ca-file {}: not PEM certificates: {error}", path.display()))?;
            if certs.is_empty() {
                return Err(format!("--ca-file {}: holds no certificate (give the authority's PEM)", path.display()));
            }
            for cert in certs {
                extra.push(cert.to_vec());
                roots.add(cert).map_err(|error| format!("--ca-file {}: {error}", path.display()))?;
            }
        }
        if roots.is_empty() {
            return Err(
                "no certificate authority to verify mail servers with: install ca-certificates, or give --ca-file"
                    .into(),
            );
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|error| format!("TLS: {error}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Trust { config: Arc::new(config), extra })
    }

    /// `stream` made private with `server`, its certificate verified.
    pub async fn wrap<S>(&self, stream: S, server: &Server) -> Result<tokio_rustls::client::TlsStream<S>, String>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(server.name()?, stream)
            .await
            .map_err(|error| format!("TLS with {}:{} failed: {error}", server.host, server.port))
    }

    /// The same trust for the SMTP client.
    pub fn smtp(&self, server: &Server) -> Result<lettre::transport::smtp::client::TlsParameters, String> {
        use lettre::transport::smtp::client::{Certificate, TlsParameters};
        let mut builder = TlsParameters::builder(server.host.clone());
        for der in &self.extra {
            let certificate =
                Certificate::from_der(der.clone()).map_err(|error| format!("--ca-file for SMTP: {error}"))?;
            builder = builder.add_root_certificate(certificate);
        }
        builder.build_rustls().map_err(|error| format!("TLS for SMTP: {error}"))
    }
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
