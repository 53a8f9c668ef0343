//! Web egress for tool containers, which have no network of their own (spec §13.3): the
//! address filter every connection passes ([`filter`]), the proxy behind ProxyWebRequest
//! ([`proxy`]) and the web_search backends ([`search`]).

pub mod filter;
pub mod proxy;
pub mod search;
