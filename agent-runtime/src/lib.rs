//! What runs inside baaaht's containers. Today: the self-test, which reports from inside a
//! container whether its confinement holds (youki's runtimetest, for baaaht).
//!
//! This crate runs untrusted-side: it holds no secret and never writes outside /tmp.

pub mod llmcheck;
pub mod runner;
pub mod selftest;
pub mod tools;
