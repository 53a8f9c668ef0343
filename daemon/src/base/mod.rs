//! The floor everything stands on: the configuration, who a caller is, the data dir and its
//! atomic state files, the metrics, systemd's notifications and the daemon's lifetime. It
//! imports no other wing.

pub mod auth;
pub mod config;
pub mod datadir;
pub mod lifetime;
pub mod metrics;
pub mod state;
pub mod systemd;
