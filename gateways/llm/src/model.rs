//! The one request/event model every provider adapter speaks (mirrors `LLMRequest`/`LLMEvent`
//! of baaaht.v1; the gateway's server converts at its boundary).

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Request {
    /// The model name without its provider prefix.
    pub model: String,
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    /// Extended thinking budget in tokens; 0 disables thinking.
    pub thinking_budget: u32,
    pub stop: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    Image { media_type: String, data: Vec<u8> },
    ToolUse { id: String, name: String, input: Value },
    ToolResult { tool_use_id: String, content: String, is_error: bool },
    Thinking { thinking: String, signature: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: String,
    /// JSON schema of the parameters.
    pub parameters: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// The provider reported none; counted from the text (about 4 characters a token).
    pub estimated: bool,
}

/// What a provider's error means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    RateLimited,
    Overloaded,
    InvalidRequest,
    Authentication,
    Provider,
    Timeout,
    Network,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::Authentication => "authentication",
            ErrorKind::Provider => "provider",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Network => "network",
        }
    }

    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::RateLimited
                | ErrorKind::Overloaded
                | ErrorKind::Provider
                | ErrorKind::Timeout
                | ErrorKind::Network
        )
    }
}

/// One streamed event, in order. Indexes are the provider's content block (Anthropic) or tool
/// call (OpenAI) indexes.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `provider` is filled in by the transport: the configured provider that answered.
    MessageStart {
        id: String,
        model: String,
        provider: String,
    },
    TextDelta {
        index: u32,
        text: String,
    },
    ThinkingDelta {
        index: u32,
        thinking: String,
        signature: String,
    },
    ToolCallStart {
        index: u32,
        id: String,
        name: String,
    },
    ToolCallDelta {
        index: u32,
        partial_json: String,
    },
    ToolCallEnd {
        index: u32,
    },
    Usage(Usage),
    MessageStop {
        stop_reason: String,
    },
    Error {
        kind: ErrorKind,
        message: String,
    },
}

/// A stream that does not follow the provider's format.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{provider} sent an event that does not parse ({event}): {reason}")]
pub struct StreamError {
    pub provider: &'static str,
    pub event: String,
    pub reason: String,
}
