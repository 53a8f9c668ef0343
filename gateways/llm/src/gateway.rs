//! What the gateway does around the adapters: each configured provider behind its own rate
//! limit (requests per minute, and a pause when the provider says to wait), fallback chains,
//! and one usage report per answer (the provider's, or an estimate when it gives none).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::model::{Block, Event, Request, Usage};
use crate::presets::split_model;
use crate::provider::{Attempt, Endpoint, Failure, Provider, RetryPolicy};

/// Requests per minute, with a pause whenever the provider asks for one (429 + retry-after).
#[derive(Debug)]
pub struct RateLimiter {
    per_minute: u32,
    state: Mutex<LimiterState>,
    waiting: AtomicU32,
}

#[derive(Debug)]
struct LimiterState {
    tokens: f64,
    refilled: Instant,
    paused_until: Option<Instant>,
}

impl RateLimiter {
    /// `per_minute` 0 means no limit of our own (the provider's pauses still apply).
    pub fn new(per_minute: u32) -> RateLimiter {
        RateLimiter {
            per_minute,
            state: Mutex::new(LimiterState {
                tokens: f64::from(per_minute.max(1)),
                refilled: Instant::now(),
                paused_until: None,
            }),
            waiting: AtomicU32::new(0),
        }
    }

    /// How long the caller must wait before it may send, taking the slot when it may (zero).
    fn try_take(&self) -> Duration {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if let Some(until) = state.paused_until {
            if until > now {
                return until - now;
            }
            state.paused_until = None;
        }
        if self.per_minute == 0 {
            return Duration::ZERO;
        }
        let rate = f64::from(self.per_minute) / 60.0;
        let capacity = f64::from(self.per_minute);
        state.tokens = (state.tokens + now.duration_since(state.refilled).as_secs_f64() * rate).min(capacity);
        state.refilled = now;
        if state.tokens >= 1.0 {
            state.tokens -= 1.0;
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - state.tokens) / rate)
        }
    }

    /// Waits until a request may be sent.
    pub async fn acquire(&self) {
        loop {
            let wait = self.try_take();
            if wait.is_zero() {
                return;
            }
            self.waiting.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(wait).await;
            self.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Sends nothing to this provider for `duration` (it said so).
    pub fn pause(&self, duration: Duration) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let until = Instant::now() + duration;
        state.paused_until = Some(state.paused_until.map_or(until, |current| current.max(until)));
    }

    /// How long the provider's pause still lasts.
    pub fn paused_for(&self) -> Duration {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.paused_until.map_or(Duration::ZERO, |until| until.saturating_duration_since(Instant::now()))
    }

    /// Requests waiting for a slot now.
    pub fn waiting(&self) -> u32 {
        self.waiting.load(Ordering::Relaxed)
    }
}

/// A provider as configured: its endpoint behind its rate limit, or the reason it cannot be used.
#[derive(Debug)]
pub struct Configured {
    pub endpoint: Endpoint,
    pub limiter: RateLimiter,
    /// e.g. "ANTHROPIC_API_KEY is not in the secrets store or the environment".
    pub unusable: Option<String>,
    last_error: Mutex<Option<String>>,
    /// The context window providers.yaml gives its models, if any.
    pub context_window: Option<u32>,
    /// What its server said of its context window (0: nothing), and when.
    learned_window: tokio::sync::Mutex<Option<(u32, std::time::Instant)>>,
}

/// How long what a server said of its context window is believed.
const WINDOW_KEPT: std::time::Duration = std::time::Duration::from_secs(300);

impl Configured {
    pub fn new(endpoint: Endpoint, rate_limit: u32, unusable: Option<String>) -> Configured {
        Configured {
            endpoint,
            limiter: RateLimiter::new(rate_limit),
            unusable,
            last_error: Mutex::new(None),
            context_window: None,
            learned_window: tokio::sync::Mutex::new(None),
        }
    }

    /// The context window of this provider's models in tokens: as providers.yaml gives it, else
    /// as a local server says (llama.cpp's `/props`: the `n_ctx` each request gets, asked at
    /// most every five minutes), else 0 (unknown: the daemon goes by the model's name).
    pub async fn context_window(&self) -> u32 {
        if let Some(window) = self.context_window {
            return window;
        }
        let local = self.endpoint.api_base.starts_with("http://")
            || matches!(self.endpoint.route, crate::provider::Route::Relay(_));
        if self.endpoint.wire != crate::provider::Wire::OpenAi || !local || self.unusable.is_some() {
            return 0;
        }
        let mut learned = self.learned_window.lock().await;
        if let Some((window, when)) = *learned {
            if when.elapsed() < WINDOW_KEPT {
                return window;
            }
        }
        let mut asking = self.endpoint.clone();
        asking.timeout = std::time::Duration::from_secs(2);
        let window = match crate::provider::get_json(&asking, "/props").await {
            Ok(props) => props["default_generation_settings"]["n_ctx"]
                .as_u64()
                .or_else(|| props["n_ctx"].as_u64())
                .map_or(0, |n| n.min(u64::from(u32::MAX)) as u32),
            Err(failure) => {
                tracing::debug!(provider = %self.endpoint.name, %failure, "the server does not tell its context window");
                0
            }
        };
        *learned = Some((window, std::time::Instant::now()));
        window
    }

    /// The last failure since the last answer, if any.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[async_trait::async_trait]
impl Provider for Configured {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    async fn stream(&self, request: &Request, on_event: &mut (dyn FnMut(Event) + Send)) -> Result<(), Failure> {
        if let Some(reason) = &self.unusable {
            return Err(Failure::Unusable { provider: self.endpoint.name.clone(), reason: reason.clone() });
        }
        self.limiter.acquire().await;
        let result = self.endpoint.stream(request, on_event).await;
        if let Err(Failure::Status { retry_after: Some(wait), status: 429 | 529, .. }) = &result {
            self.limiter.pause(*wait);
        }
        *self.last_error.lock().unwrap_or_else(PoisonError::into_inner) =
            result.as_ref().err().map(ToString::to_string);
        result
    }
}

/// Every configured provider and how requests move between them.
#[derive(Debug, Default)]
pub struct Gateway {
    pub providers: BTreeMap<String, Configured>,
    /// Provider → fallbacks, each `provider` or `provider/model`.
    pub fallback_chains: BTreeMap<String, Vec<String>>,
    pub default_provider: String,
    pub policy: RetryPolicy,
    /// Alias → `provider/model`s that serve it, cheapest first.
    pub aliases: BTreeMap<String, Vec<String>>,
}

/// The `(provider, model)` of each fallback of `provider`'s model `bare`, in the order tried:
/// a link `name` keeps the model's name, `name/model` names its own, and OpenRouter names it
/// `{provider}/{bare}`. The daemon prices a request's worst case along the same chain.
pub fn fallbacks<'a>(
    provider: &str,
    bare: &str,
    fallback_chains: &'a BTreeMap<String, Vec<String>>,
) -> Vec<(&'a str, String)> {
    fallback_chains
        .get(provider)
        .into_iter()
        .flatten()
        .map(|link| match link.split_once('/') {
            Some((name, model)) => (name, model.to_string()),
            // OpenRouter names models `{provider}/{model}` itself.
            None if link == "openrouter" => (link.as_str(), format!("{provider}/{bare}")),
            None => (link.as_str(), bare.to_string()),
        })
        .collect()
}

/// A request the gateway cannot route, as a sentence for the caller.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct RouteError(pub String);

impl Gateway {
    /// The chain for a `{provider}/{model}` name: the provider, then its fallbacks; for an
    /// alias, its models cheapest first, those whose provider is failing or waiting out a rate
    /// limit after the rest (spec §7.3's cost optimisation).
    pub fn chain(&self, model: &str) -> Result<Vec<Attempt<'_>>, RouteError> {
        if let Some(models) = self.aliases.get(model) {
            let mut healthy = vec![];
            let mut failing = vec![];
            for target in models {
                let Some((name, bare)) = target.split_once('/') else { continue };
                let Some(provider) = self.providers.get(name) else { continue };
                let attempt = Attempt { provider, model: bare.to_string() };
                let well = provider.unusable.is_none()
                    && provider.last_error().is_none()
                    && provider.limiter.paused_for().is_zero();
                if well {
                    healthy.push(attempt)
                } else {
                    failing.push(attempt)
                }
            }
            healthy.extend(failing);
            if healthy.is_empty() {
                return Err(RouteError(format!("alias `{model}` names no configured provider")));
            }
            return Ok(healthy);
        }
        let (provider, bare) = split_model(model, &self.default_provider);
        if provider.is_empty() {
            return Err(RouteError(format!(
                "model `{model}` names no provider and none is the default: write it as provider/model"
            )));
        }
        let Some(primary) = self.providers.get(provider) else {
            let known: Vec<&str> = self.providers.keys().map(String::as_str).collect();
            return Err(RouteError(format!(
                "model `{model}`: no provider `{provider}` is configured (configured: {}); add it to providers.yaml",
                known.join(", ")
            )));
        };
        let mut chain = vec![Attempt { provider: primary, model: bare.to_string() }];
        for (name, model) in fallbacks(provider, bare, &self.fallback_chains) {
            if let Some(fallback) = self.providers.get(name) {
                chain.push(Attempt { provider: fallback, model });
            }
        }
        Ok(chain)
    }

    /// Streams `request` (its model named `{provider}/{model}`) along its chain; returns the
    /// provider that answered. Every answer ends with one [`Event::Usage`] and then its
    /// [`Event::MessageStop`], whatever order the provider used.
    pub async fn complete(
        &self,
        request: &Request,
        on_event: &mut (dyn FnMut(Event) + Send),
    ) -> Result<String, Failure> {
        let chain = self.chain(&request.model).map_err(|RouteError(message)| Failure::Route { message })?;
        let mut usage: Option<Usage> = None;
        let mut stop = None;
        // The answer's words, counted only if the provider reports no usage.
        let mut output = String::new();
        let mut forward = |event: Event| match event {
            Event::Usage(reported) => usage = Some(reported),
            Event::MessageStop { .. } => stop = Some(event),
            other => {
                if usage.is_none() {
                    output.push_str(match &other {
                        Event::TextDelta { text, .. } => text,
                        Event::ThinkingDelta { thinking, .. } => thinking,
                        Event::ToolCallDelta { partial_json, .. } => partial_json,
                        Event::ToolCallStart { name, .. } => name,
                        _ => "",
                    });
                }
                on_event(other);
            }
        };
        let answered = crate::provider::stream_with_fallback(&chain, request, self.policy, &mut forward).await?;
        let usage = match usage {
            Some(usage) if usage.input_tokens.saturating_add(usage.output_tokens) > 0 => usage,
            _ => Usage {
                input_tokens: input_tokens(request),
                output_tokens: count_tokens(&output),
                estimated: true,
                ..Usage::default()
            },
        };
        // A provider's count past any context window is not believed (it would overflow sums).
        const MOST: u64 = 100_000_000;
        let usage = Usage {
            input_tokens: usage.input_tokens.min(MOST),
            output_tokens: usage.output_tokens.min(MOST),
            cache_read_tokens: usage.cache_read_tokens.min(MOST),
            cache_write_tokens: usage.cache_write_tokens.min(MOST),
            ..usage
        };
        on_event(Event::Usage(usage));
        if let Some(stop) = stop {
            on_event(stop);
        }
        Ok(answered)
    }
}

/// The tokens of `text` in OpenAI's `o200k_base` encoding (tiktoken's, loaded on the first
/// count): the estimate where a provider reports no usage (spec §7.4), near enough for any
/// model's text — closer than characters ÷ 4 for code, numbers and languages other than English.
pub fn count_tokens(text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    tiktoken_rs::o200k_base_singleton().encode_ordinary(text).len() as u64
}

/// The tokens of a request: its text counted, each picture as providers bill one.
fn input_tokens(request: &Request) -> u64 {
    let mut text = request.system.clone();
    let mut pictures = 0u64;
    for block in request.messages.iter().flat_map(|message| &message.content) {
        text.push('\n');
        match block {
            Block::Text(words) => text.push_str(words),
            Block::Image { .. } => pictures += 1,
            Block::ToolUse { name, input, .. } => {
                text.push_str(name);
                text.push_str(&input.to_string());
            }
            Block::ToolResult { content, .. } => text.push_str(content),
            Block::Thinking { thinking, .. } => text.push_str(thinking),
        }
    }
    for tool in &request.tools {
        text.push_str(&tool.name);
        text.push_str(&tool.description);
        text.push_str(&tool.parameters.to_string());
    }
    count_tokens(&text) + pictures * baaaht_proto::IMAGE_TOKENS as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Wire;

    fn configured(name: &str, unusable: Option<&str>) -> Configured {
        let endpoint = Endpoint {
            name: name.into(),
            wire: Wire::OpenAi,
            api_base: "http://127.0.0.1:9/v1".into(),
            api_key: None,
            timeout: Duration::from_secs(1),
            max_output: None,
            route: crate::provider::Route::Direct,
            cloud: crate::provider::Cloud::default(),
            signer: None,
        };
        Configured::new(endpoint, 0, unusable.map(str::to_string))
    }

    fn gateway() -> Gateway {
        let providers = ["anthropic", "openrouter", "ollama"].map(|name| (name.to_string(), configured(name, None)));
        Gateway {
            providers: providers.into_iter().collect(),
            fallback_chains: BTreeMap::from([(
                "anthropic".to_string(),
                vec!["openrouter".to_string(), "ollama/llama3".to_string(), "missing".to_string()],
            )]),
            default_provider: "anthropic".into(),
            policy: RetryPolicy::default(),
            aliases: BTreeMap::from([(
                "claude-sonnet".to_string(),
                vec!["openrouter/anthropic/claude-sonnet-4".to_string(), "anthropic/claude-sonnet-4".to_string()],
            )]),
        }
    }

    #[test]
    fn an_alias_goes_to_its_cheapest_healthy_provider_first() {
        let gateway = gateway();
        let links = |gateway: &Gateway| -> Vec<(String, String)> {
            let chain = gateway.chain("claude-sonnet").expect("an alias");
            chain.iter().map(|a| (a.provider.name().to_string(), a.model.clone())).collect()
        };
        assert_eq!(
            links(&gateway),
            [
                ("openrouter".to_string(), "anthropic/claude-sonnet-4".to_string()),
                ("anthropic".to_string(), "claude-sonnet-4".to_string())
            ]
        );
        // The cheapest fails: the next is tried first until it answers again.
        *gateway.providers["openrouter"].last_error.lock().expect("lock") = Some("503".into());
        assert_eq!(links(&gateway)[0].0, "anthropic");
    }

    #[test]
    fn chains_rename_the_model_for_each_fallback() {
        let gateway = gateway();
        let chain = gateway.chain("anthropic/claude-sonnet-4").expect("routes");
        let links: Vec<(&str, &str)> = chain.iter().map(|a| (a.provider.name(), a.model.as_str())).collect();
        assert_eq!(
            links,
            [("anthropic", "claude-sonnet-4"), ("openrouter", "anthropic/claude-sonnet-4"), ("ollama", "llama3")]
        );
        assert_eq!(gateway.chain("claude-x").expect("default").len(), 3);
        let error = gateway.chain("groq/llama").err().expect("unknown route");
        assert!(error.0.contains("no provider `groq` is configured (configured: anthropic, ollama, openrouter)"));
    }

    #[tokio::test]
    async fn a_provider_pause_delays_the_next_request() {
        let limiter = RateLimiter::new(0);
        limiter.pause(Duration::from_millis(80));
        assert!(limiter.paused_for() > Duration::from_millis(40));
        let started = Instant::now();
        limiter.acquire().await;
        assert!(started.elapsed() >= Duration::from_millis(70));
        assert_eq!(limiter.paused_for(), Duration::ZERO);
    }

    #[tokio::test]
    async fn requests_per_minute_are_spaced() {
        // 600 a minute: a burst of 600, then one every 100 ms.
        let limiter = RateLimiter::new(600);
        for _ in 0..600 {
            assert!(limiter.try_take().is_zero());
        }
        let wait = limiter.try_take();
        assert!(wait > Duration::from_millis(50) && wait <= Duration::from_millis(100), "{wait:?}");
    }

    #[test]
    fn estimates_are_a_tokenizers_count() {
        assert_eq!(count_tokens(""), 0);
        // tiktoken's own documented example: "hello world" is two tokens in o200k_base.
        assert_eq!(count_tokens("hello world"), 2);
        let request = Request {
            system: "12345678".into(),
            messages: vec![crate::model::Message {
                role: crate::model::Role::User,
                content: vec![Block::Text("abcd".into())],
            }],
            ..Request::default()
        };
        assert_eq!(input_tokens(&request), count_tokens("12345678\nabcd"));
        let picture = Request {
            messages: vec![crate::model::Message {
                role: crate::model::Role::User,
                content: vec![Block::Image { media_type: "image/png".into(), data: vec![0; 10_000] }],
            }],
            ..Request::default()
        };
        assert_eq!(input_tokens(&picture), count_tokens("\n") + baaaht_proto::IMAGE_TOKENS as u64);
    }
}
