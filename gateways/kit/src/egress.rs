//! Where a gateway's connections go: [`baaaht_proto::egress`] (the daemon's tunnel in a
//! container, which has no network; straight out on a host), with TLS on top.

pub use baaaht_proto::egress::{host_and_port, Egress, Stream};

/// An HTTPS (or, for a local test service, plain HTTP) connector over `egress`, trusting the
/// system's certificate authorities.
pub fn https(egress: Egress) -> Result<hyper_rustls::HttpsConnector<Egress>, String> {
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|error| format!("cannot load the system's CA certificates: {error}"))?
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(egress))
}
