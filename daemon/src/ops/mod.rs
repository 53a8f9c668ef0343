//! The operator's tools: first-run setup, the embedded defaults, the self-test, and the
//! resource sampler. It imports drive/ and below.

pub mod defaults;
pub mod sampler;
pub mod selftest;
pub mod setup;
