//! Web egress for tool containers, which have no network of their own (spec §13.3): the
//! address filter every connection passes ([`filter`]), the proxy behind ProxyWebRequest
//! ([`proxy`]), the web_search backends ([`search`]), CONNECT tunnels through the filter
//! ([`tunnel`]), the connections a container's own proxy opens over its stream ([`relay`]),
//! which hosts a context's tools may reach ([`policy`]), asking its people in chat about the
//! others ([`approvals`]), and what every such connection passes on its way ([`edge`]: the
//! name it uses, the credentials swapped in with the daemon's [`authority`], no secret value
//! either way; why it refuses, [`refusal`]).

pub mod approvals;
pub mod authority;
pub mod credentials;
pub mod edge;
pub mod filter;
pub mod policy;
pub mod proxy;
pub mod refusal;
pub mod relay;
pub mod search;
pub mod tunnel;
pub mod web;
