//! baaaht's Slack gateway (`baaaht-slack`): one per Slack workspace, a gRPC client of the
//! daemon with its gateway token. Socket Mode brings the events ([`socket_mode`]), or the Events
//! API over HTTP ([`events_http`]); [`gateway`] answers them; [`route`] says
//! which conversation each belongs to; answers are written as Slack's mrkdwn ([`mrkdwn`]); shared
//! files are fetched for the session's uploads ([`files`]). Every connection out goes through
//! [`egress`] (the daemon's tunnel in a container); the daemon asks after [`health`].

pub mod approvals;
pub mod events_http;
pub mod files;
pub mod gateway;
pub mod mrkdwn;
pub mod route;
pub mod socket_mode;

/// The gateway kit's: connections out through the daemon's egress, and the health the daemon
/// asks after.
pub use baaaht_gateway_kit::{egress, health};
