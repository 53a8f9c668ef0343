//! The operator's tools: first-run setup, the embedded defaults, the self-test, the resource
//! sampler and the disk's watch. It imports drive/ and below.

pub mod defaults;
pub mod disk;
pub mod sampler;
pub mod selftest;
pub mod setup;
