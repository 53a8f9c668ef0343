//! Why the edge (`egress::edge`) refuses a connection or one of its requests, or cannot carry it
//! on: each a sentence the command gets (in a `403` or `502` answer) and the audit log keeps.
//! A cause is in the sentence, as it always was, and so not a `#[source]` as well (a chain
//! printer would say it twice).

use std::fmt;

/// Why a connection that began as TLS is not carried: its ClientHello does not read.
#[derive(Debug, thiserror::Error)]
pub enum HelloRefusal {
    #[error("it is not TLS ({error})")]
    NotTls { error: std::io::Error },
    #[error("its TLS hello does not read ({error})")]
    Unreadable { error: rustls::Error },
    #[error("its TLS hello is longer than {most} bytes")]
    TooLong { most: usize },
    #[error("it stopped in the middle of its TLS hello")]
    Stopped,
}

/// Why a request is not sent on (answered `403`; those about a credential are audited).
#[derive(Debug, thiserror::Error)]
pub enum EdgeRefusal {
    #[error(
        "a request in a connection to {host}:{port} must name that host once (one Host header, and its URL) and no \
         other"
    )]
    NotAimed { host: String, port: u16 },
    #[error("a CONNECT inside the connection to {host} is not sent: open each connection through the proxy")]
    Connect { host: String },
    #[error("a change of protocol (Upgrade) in the connection to {host} is not offered")]
    Upgrade { host: String },
    #[error("the request's path is not a path: {error}")]
    Path { error: http::uri::InvalidUri },
    #[error("a request to {host} carries the value of {name}; it is not sent")]
    Value { host: String, name: String },
    /// A placeholder on its way where its secret may not go; `name`: its secret's (or `a
    /// credential`, when it is none of the session's).
    #[error("the placeholder of {name} is not sent in {place}")]
    Misplaced { name: String, place: Misplaced },
    #[error("a credential cannot go in a header")]
    NotAHeader,
    #[error(
        "the placeholder of {name} was sent to {host}, which {name} is not bound to; it is swapped for the secret \
         only on its way to the hosts it is bound to (`baaaht egress credential add {name} --host {host}`)"
    )]
    Unbound { name: String, host: String },
    #[error("{name} is sent only over https, never in plain http: use https://{host}")]
    PlainHttp { name: String, host: String },
    #[error("{name} is not swapped in for this container")]
    NotSwapped { name: String },
    /// The secrets store would not give the value (`why`, its sentence).
    #[error("{name} could not be read for {host}: {why}")]
    Unreadable { name: String, host: String, why: String },
}

/// Where a placeholder was on its way to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misplaced {
    Url,
    /// A header whose value is not text.
    NotText {
        header: String,
    },
    /// A header other than the credential headers.
    Header {
        header: String,
    },
    Trace,
    /// A request of another session than the one it was made for (or it was never made).
    OtherSession,
}

impl fmt::Display for Misplaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misplaced::Url => f.write_str("the URL: put it in the Authorization header"),
            Misplaced::NotText { header } => write!(f, "the header {header}, which is not text"),
            Misplaced::Header { header } => write!(f, "the header {header}: it goes only in Authorization"),
            Misplaced::Trace => f.write_str("a TRACE, which echoes it back"),
            Misplaced::OtherSession => f.write_str("this session: it is another's, or was never made"),
        }
    }
}

/// Why the requests of a connection cannot be sent on (answered `502`).
#[derive(Debug, thiserror::Error)]
pub enum OnwardError {
    #[error("{host}'s TLS certificate could not be verified: {why}")]
    Unverified { host: String, why: OnwardTlsError },
    #[error("{host} did not speak HTTP: {error}")]
    NotHttp { host: String, error: hyper::Error },
}

/// Why the edge's own TLS to a host could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OnwardTlsError {
    #[error("{0}")]
    Name(rustls::pki_types::InvalidDnsNameError),
    /// The daemon has no trusted roots (the sentence of `baaaht_llm::provider::tls_config`).
    #[error("{0}")]
    Roots(String),
    #[error("{0}")]
    Handshake(std::io::Error),
}
