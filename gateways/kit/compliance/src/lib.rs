//! The channel compliance suite (as vector's component specification does for every source
//! and sink): what every baaaht channel must do, checked the same way for each. A channel's
//! real gateway runs against one [`FakeDaemon`] — the daemon's Sessions and Gateways services on
//! a Unix socket, with turns scripted by the case and everything the gateway asked recorded —
//! so that a case checks the channel alone. The rules are in `docs/channels.md`; each names the
//! case that checks it.

pub mod fake;

pub use fake::{FakeDaemon, Step};
