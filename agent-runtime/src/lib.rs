//! What runs inside baaaht's containers: the agent loop ([`agent`]), the tool runner
//! ([`runner`]), the relay of an MCP server's container ([`mcp`]) and the self-test, which reports from inside a container whether its
//! confinement holds ([`selftest`]), and the clone of a skill's repository in a container
//! without network ([`fetch`]).
//!
//! This crate runs untrusted-side: it holds no secret and never writes outside /tmp.

pub mod agent;
pub mod browser;
pub mod egress;
pub mod fetch;
pub mod health;
pub mod llmcheck;
pub mod mcp;
pub mod reaper;
pub mod runner;
pub mod selftest;
pub mod tools;
