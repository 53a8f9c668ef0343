//! What moves a conversation: the orchestrator's turns, delegations, compaction and archival,
//! and the scheduler's heartbeats and tasks. It imports model/ and below.

pub mod orchestrator;
pub mod requests;
pub mod scheduler;
