//! LLM provider adapters and the gateway that serves them: one request/event model
//! ([`model`]) over the providers' streaming wire formats — Anthropic Messages ([`anthropic`])
//! and OpenAI Chat Completions with its compatible servers ([`openai`], [`presets`]) — the
//! Server-Sent Events framing both use ([`sse`]), the transport with retry and fallback
//! ([`provider`]), rate limits and usage ([`gateway`]), and the LLMGateway service ([`server`])
//! of the `baaaht-llm-gateway` binary, the only process that ever holds a provider key.

pub mod anthropic;
pub mod bedrock;
pub mod convert;
pub mod gateway;
pub mod gemini;
pub mod model;
pub mod openai;
pub mod presets;
pub mod provider;
pub mod server;
pub mod sse;
