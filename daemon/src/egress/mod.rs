//! Web egress for tool containers, which have no network of their own (spec §13.3): the
//! address filter every connection passes ([`filter`]), the proxy behind ProxyWebRequest
//! ([`proxy`]), the web_search backends ([`search`]) and CONNECT tunnels through the filter
//! ([`tunnel`]).

pub mod filter;
pub mod proxy;
pub mod search;
pub mod tunnel;
