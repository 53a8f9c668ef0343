//! Where a request goes: a URL as host, port, path and whether TLS is spoken.

use super::Failure;

/// Where a request goes.
pub(crate) struct Target {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// From its `/`, with the query.
    pub(crate) path: String,
    pub(crate) tls: bool,
}

impl Target {
    /// The target of `url` (`https://host[:port]/path?query`, or `http://` for a local server).
    pub(crate) fn parse(provider: &str, url: &str) -> Result<Target, Failure> {
        let bad = |reason: &str| Failure::BadBase {
            provider: provider.to_string(),
            api_base: url.to_string(),
            reason: reason.into(),
        };
        let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(bad("write it as https://host[:port]/path (or http:// for a local server)"));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, ""),
        };
        let (host, port) = match authority.rsplit_once(':').filter(|(_, port)| !port.contains(']')) {
            Some((host, port)) => (host, port.parse().map_err(|_not_a_port| bad("the port is not a number"))?),
            None => (authority, if tls { 443 } else { 80 }),
        };
        if host.is_empty() {
            return Err(bad("it names no host"));
        }
        let path = if path.starts_with('/') { path.to_string() } else { format!("/{path}") };
        Ok(Target { host: host.trim_matches(['[', ']']).to_string(), port, path, tls })
    }

    /// `host:port`, to connect to.
    pub(crate) fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The `Host` header: the port only when it is not the scheme's own (as signed by SigV4).
    pub(crate) fn host_header(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        match (self.tls, self.port) {
            (true, 443) | (false, 80) => host,
            (_, port) => format!("{host}:{port}"),
        }
    }
}
