//! Where a gateway's connections go: [`baaaht_proto::egress`] (the daemon's tunnel in a
//! container, which has no network; straight out on a host), with TLS on top — or, for a
//! library that only takes a proxy's address, through [`local_proxy`] (shared with the
//! skill fetch's container, so it lives with the dialer).

pub use baaaht_proto::egress::{host_and_port, local_proxy, Egress, Stream};

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
