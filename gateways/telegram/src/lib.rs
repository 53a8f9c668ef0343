//! baaaht's Telegram gateway (`baaaht-telegram`): one per bot, a gRPC client of the daemon with
//! its gateway token. Updates come by long polling the Bot API ([`api`]); [`route`] says which
//! conversation each belongs to (a private chat is the sender's own, a group's mention or reply
//! to the bot is the group's); [`gateway`] answers on the gateway kit's turn, the answer one
//! message edited as it is written, approval requests as inline keyboards. Every connection goes
//! through the kit's egress (the daemon's tunnel in a container).
//!
//! The Bot API is called with hyper over the kit's connector rather than with teloxide: every
//! connection must go through the daemon's tunnel (CONNECT over a Unix socket), which
//! teloxide's reqwest client cannot take as its transport, and the gateway needs eight methods.

pub mod api;
pub mod gateway;
pub mod route;
