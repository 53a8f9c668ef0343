//! The one road to a model: the LLM gateway and every call through it, streamed words and the
//! turn table, budgets per user and group, and the usage ledger. It imports work/ and below.

pub mod budgets;
pub mod llm;
pub mod usage;
