//! Web egress for tool containers, which have no network of their own (spec §13.3): the
//! address filter every connection passes ([`filter`]).

pub mod filter;
