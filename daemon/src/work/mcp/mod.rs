//! MCP servers (spec §9.2): each stdio server runs in its own hardened container, per
//! context; the daemon speaks MCP to it and offers its tools to the agents allowed.

pub mod config;
pub mod effects;
pub mod limits;
pub mod pool;
mod pump;
pub mod relay;
mod stderr;
