//! LLM provider adapters: one request/event model ([`model`]) over the providers' streaming
//! wire formats — Anthropic Messages ([`anthropic`]) and OpenAI Chat Completions with its
//! compatible servers ([`openai`]) — and the Server-Sent Events framing both use ([`sse`]).
//!
//! This crate turns requests into request bodies and response bytes into events. It holds no
//! key and opens no connection: the gateway process does that, and only it sees credentials.

pub mod anthropic;
pub mod model;
pub mod openai;
pub mod provider;
pub mod sse;
