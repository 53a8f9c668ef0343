//! Web egress for tool containers, which have no network of their own (spec §13.3): the
//! address filter every connection passes ([`filter`]) and the proxy behind ProxyWebRequest
//! ([`proxy`]).

pub mod filter;
pub mod proxy;
