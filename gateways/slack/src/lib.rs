//! baaaht's Slack gateway (`baaaht-slack`): one per Slack workspace, a gRPC client of the
//! daemon with its gateway token. Socket Mode brings the events ([`gateway`]), or the Events API
//! over HTTP ([`events_http`]); [`route`] says
//! which conversation each belongs to; answers are written as Slack's mrkdwn ([`mrkdwn`]); shared
//! files are fetched for the session's uploads ([`files`]).

pub mod events_http;
pub mod files;
pub mod gateway;
pub mod mrkdwn;
pub mod route;
