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

impl Request {
    /// The most output tokens to ask for: what the request asks, within the provider's cap
    /// (which holds whether or not the request asks for less), or the cap alone.
    pub fn max_tokens_within(&self, cap: Option<u32>) -> Option<u32> {
        match (self.max_tokens, cap) {
            (Some(asked), Some(cap)) => Some(asked.min(cap)),
            (asked, cap) => asked.or(cap),
        }
    }
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

impl Message {
    /// A user message of one text.
    pub fn user(text: impl Into<String>) -> Message {
        Message { role: Role::User, content: vec![Block::Text(text.into())] }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    Image { media_type: String, data: Vec<u8> },
    ToolUse { id: String, name: String, input: Value },
    ToolResult { tool_use_id: String, content: String, is_error: bool },
    Thinking { thinking: String, signature: String },
}

/// The mark the Gemini adapter puts before a thought signature it read: Gemini's signatures are
/// good only for Gemini, Anthropic's (direct, on Bedrock or on Vertex) for Anthropic's models.
pub const GEMINI_SIGNATURE: &str = "gemini:";

/// Whether a thinking block's signature was made by an Anthropic model (it may be sent back to
/// one as thinking).
pub fn signed_by_anthropic(signature: &str) -> bool {
    !signature.is_empty() && !signature.starts_with(GEMINI_SIGNATURE)
}

/// Thinking sent to a model that cannot take it as thinking (spec §7.4: `<thinking>` tags);
/// `None` when there is nothing to say (a signature alone).
pub fn thinking_as_text(thinking: &str) -> Option<String> {
    (!thinking.trim().is_empty()).then(|| format!("<thinking>\n{thinking}\n</thinking>"))
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
    /// The provider reported none; counted from the text (a tokenizer's count).
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
    /// The request is longer than the model's context window: the history must be shortened
    /// (compacted) before it is sent again.
    ContextExceeded,
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
            ErrorKind::ContextExceeded => "context_exceeded",
        }
    }

    /// The kind of a request refused with `message`: [`ErrorKind::ContextExceeded`] when the
    /// words are a context window's (llama.cpp, OpenAI and its compatible servers, Anthropic,
    /// vLLM, Ollama), else `kind` as it was.
    pub fn refined(self, message: &str) -> ErrorKind {
        if self == ErrorKind::InvalidRequest && context_exceeded(message) {
            ErrorKind::ContextExceeded
        } else {
            self
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

/// Whether a provider's refusal says the request does not fit the model's context window.
pub fn context_exceeded(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    [
        "exceeds the available context size", // llama.cpp's server
        "context_length_exceeded",            // OpenAI's code
        "maximum context length",             // OpenAI, vLLM
        "context window",                     // several
        "prompt is too long",                 // Anthropic
        "exceed context window",
        "context size has been exceeded",
        "too many tokens",
        "input is too long",
    ]
    .iter()
    .any(|words| message.contains(words))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_in_a_context_windows_words_is_told_apart() {
        let llama = "the request exceeds the available context size, try increasing it";
        let openai = "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000";
        let anthropic = "prompt is too long: 210000 tokens > 200000 maximum";
        for message in [llama, openai, anthropic] {
            assert_eq!(ErrorKind::InvalidRequest.refined(message), ErrorKind::ContextExceeded, "{message}");
        }
        assert_eq!(ErrorKind::InvalidRequest.refined("unknown model"), ErrorKind::InvalidRequest);
        // Only a refused request: a rate limit that mentions tokens stays what it is.
        assert_eq!(ErrorKind::RateLimited.refined("too many tokens per minute"), ErrorKind::RateLimited);
        assert!(!ErrorKind::ContextExceeded.retryable(), "sent again unchanged, it fails again");
    }
}
