//! Where a gateway's connections go: [`baaaht_proto::egress`] (the daemon's tunnel in a
//! container, which has no network; straight out on a host), with TLS on top — or, for a
//! library that only takes a proxy's address, through [`local_proxy`] (shared with the
//! skill fetch's container, so it lives with the dialer).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;

pub use baaaht_proto::egress::{host_and_port, local_proxy, Egress, Stream};

/// Whom a gateway trusts to vouch for a server's certificate: the system's authorities, and a
/// household's own (`--ca-file`, for its own mail server, homeserver or push service).
#[derive(Clone)]
pub struct Trust {
    pub config: Arc<rustls::ClientConfig>,
    /// The extra authority's certificates (DER), for a client with a TLS set-up of its own.
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
                "no certificate authority to verify servers with: install ca-certificates, or give --ca-file".into()
            );
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|error| format!("TLS: {error}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Trust { config: Arc::new(config), extra })
    }

    /// An HTTPS-only connector over `egress` with this trust.
    pub fn https(&self, egress: Egress) -> hyper_rustls::HttpsConnector<Egress> {
        hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*self.config).clone())
            .https_only()
            .enable_http1()
            .enable_http2()
            .wrap_connector(egress)
    }
}

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
