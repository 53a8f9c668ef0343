//! baaaht's Matrix gateway (DESIGN.md §10.4): matrix-sdk with end-to-end encryption, its
//! device kept across restarts ([`session`]), rooms and DMs answered through the gateway kit
//! ([`gateway`]).

pub mod gateway;
pub mod session;
