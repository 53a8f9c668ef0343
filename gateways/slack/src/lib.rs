//! baaaht's Slack gateway (`baaaht-slack`): one per Slack workspace, a gRPC client of the
//! daemon with its gateway token. Socket Mode brings the events ([`gateway`]); [`route`] says
//! which conversation each belongs to; answers are written as Slack's mrkdwn ([`mrkdwn`]); shared
//! files are fetched for the session's uploads ([`files`]).

pub mod files;
pub mod gateway;
pub mod mrkdwn;
pub mod route;
