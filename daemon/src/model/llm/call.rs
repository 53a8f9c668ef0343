//! The one road to the model. Every model call the daemon makes or brokers — an agent's
//! StreamLLM, a compaction of a session, automatic or asked for — goes through
//! [`Calls::stream`]: the budget of the context it is for is checked and the request's worst
//! case held before any provider is asked (a refusal is audited), the LLM gateway is called
//! (once more if it went away and restarted), and what streams back is tallied: when the stream
//! ends or is dropped its usage is recorded (metrics, the usage ledger), the budget settled, and
//! a budget warning told to the context's channels.
//!
//! The request and its events stay in the gateway's wire form here: the daemon passes an
//! agent's stream through as it came, and the gateway's error events carry more (the provider,
//! whether to retry) than the model's own events do.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use baaaht_proto::v1;
use tokio_stream::{Stream, StreamExt as _};

use super::{GatewayError, LlmGateway, Used};
use crate::base::auth::Live;
use crate::base::auth::{Context, Role};
use crate::base::config::LoadedConfig;
use crate::base::metrics::TokenCounts;
use crate::guard::audit::{Audit, Kind, Record};
use crate::model::budgets::{Budgets, Reservation};
use crate::store::events::{Event, EventBus, Kind as EventKind};

/// Why a model call was not made.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// A spending limit of the context is reached (the sentence is for the user as it is).
    #[error("{0}")]
    Budget(String),
    #[error(transparent)]
    Gateway(#[from] GatewayError),
    /// The gateway refused the call.
    #[error("the LLM gateway refused the call: {}", .0.message())]
    Refused(tonic::Status),
    /// The model's answer failed (an error event, a broken stream, nothing written).
    #[error("{0}")]
    Failed(String),
}

/// Whom a model call is for: charged to `context`, counted for `session`, audited as
/// `principal`.
#[derive(Debug, Clone)]
pub struct Payer {
    pub principal: String,
    pub context: Context,
    pub session: String,
    pub correlation_id: String,
}

/// An agent container's model call: who pays, the agent's role, and the turn it works for
/// (none between turns).
#[derive(Debug)]
pub struct AgentCall {
    pub payer: Payer,
    pub role: Role,
    pub live: Option<Live>,
}

/// An agent's model call's events as they arrive.
pub type AgentStream = Pin<Box<dyn Stream<Item = Result<v1::LlmEvent, tonic::Status>> + Send>>;

/// What a turn keeps of its reply as it streams (the orchestrator's turn table): the words
/// written so far, for a turn that is stopped, and a refusal for the context window, after
/// which the turn compacts and tries again.
pub trait Reply: Send + Sync {
    fn wrote(&self, turn: &str, text: &str);
    fn context_exceeded(&self, turn: &str);
}

/// Told when an Assistant's answer, still streaming, names the agent of a `delegate` call: the
/// agent can start while the model writes the task (the orchestrator starts it ahead).
pub trait Foresight: Send + Sync + std::fmt::Debug {
    fn delegating(&self, live: &Live, agent: &str);
}

/// Watches an Assistant's answer for `delegate` calls and names each one's agent as soon as
/// its arguments do, before the task is written; each agent once an answer, however many
/// calls name it.
#[derive(Debug, Default)]
struct DelegateSpotter {
    /// The index of the `delegate` call being written, and its arguments so far.
    writing: Option<(u32, String)>,
    named: Vec<String>,
}

/// How much of a delegate call's arguments the spotter reads for its agent's name.
const SPOTTED_WITHIN: usize = 4096;
/// The most agents one answer's calls are spotted naming (there are four to delegate to).
const MOST_NAMED: usize = 4;

impl DelegateSpotter {
    fn observe(&mut self, event: &v1::LlmEvent) -> Option<String> {
        use v1::llm_event::Event;
        match &event.event {
            Some(Event::ToolCallStart(start)) if start.name == "delegate" => {
                self.writing = Some((start.index, String::new()));
                None
            }
            Some(Event::ToolCallDelta(delta)) => {
                let (index, arguments) = self.writing.as_mut()?;
                if *index != delta.index {
                    return None;
                }
                arguments.push_str(&delta.partial_json);
                let agent = agent_named(arguments);
                if agent.is_some() || arguments.len() > SPOTTED_WITHIN {
                    self.writing = None;
                }
                let agent = agent.filter(|agent| !self.named.contains(agent) && self.named.len() < MOST_NAMED)?;
                self.named.push(agent.clone());
                Some(agent)
            }
            _ => None,
        }
    }
}

/// The agent that a delegate call's arguments, written so far, name (`"agent": "worker"`,
/// its closing quote written).
fn agent_named(arguments: &str) -> Option<String> {
    let after = &arguments[arguments.find("\"agent\"")? + "\"agent\"".len()..];
    let value = after.trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let name = &value[..value.find('"')?];
    (!name.is_empty() && name.len() <= 32).then(|| name.to_string())
}

/// Sends a text or thinking delta of the agent writing the reply to its context's channels; the
/// text is also kept as written so far by its turn. A refusal for the context window is noted
/// on the turn.
fn publish_delta(events: &EventBus, reply: Option<&dyn Reply>, live: &Live, event: &v1::LlmEvent) {
    use v1::llm_event::Event as Streamed;
    let out = match &event.event {
        Some(Streamed::TextDelta(delta)) => {
            if let Some(reply) = reply {
                reply.wrote(&live.user_turn, &delta.text);
            }
            EventKind::TextDelta { index: delta.index, text: delta.text.clone() }
        }
        // A delegate's reasoning (over pages it read, say) is its own; only its answer speaks.
        Some(Streamed::ThinkingDelta(delta)) if live.role == Role::Assistant => EventKind::ThinkingDelta {
            index: delta.index,
            thinking: delta.thinking.clone(),
            signature: delta.signature.clone(),
        },
        // The Assistant's history is what compaction shortens; a delegate's task is not.
        Some(Streamed::Error(error)) if error.kind == "context_exceeded" && live.role == Role::Assistant => {
            if let Some(reply) = reply {
                reply.context_exceeded(&live.user_turn);
            }
            return;
        }
        _ => return,
    };
    events.publish(&live.context, Event::of_turn(&live.session, &live.user_turn, &live.correlation_id, out));
}

/// The road's handles: the gateway and what a call is weighed, counted and told with.
#[derive(Debug)]
pub struct Calls {
    gateway: Arc<LlmGateway>,
    budgets: Arc<Budgets>,
    audit: Audit,
    events: Arc<EventBus>,
    /// The turn table, told what a turn's reply has written so far ([`Calls::replies_to`]).
    reply: std::sync::OnceLock<std::sync::Weak<dyn Reply>>,
    /// Told when an Assistant's answer names a delegation's agent ([`Calls::foresees`]); it
    /// holds the orchestrator weakly.
    foresight: std::sync::OnceLock<Arc<dyn Foresight>>,
    /// `providers.yaml`'s providers and fallbacks (what a request may end up costing) and the
    /// Assistant's model (for a request that names none).
    loaded: Arc<LoadedConfig>,
}

/// Whether a failed call means the gateway itself went away (it is restarted; try the new one).
fn gateway_gone(status: &tonic::Status) -> bool {
    matches!(status.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled)
}

impl Calls {
    pub fn new(
        gateway: Arc<LlmGateway>,
        budgets: Arc<Budgets>,
        audit: Audit,
        events: Arc<EventBus>,
        loaded: Arc<LoadedConfig>,
    ) -> Calls {
        Calls {
            gateway,
            budgets,
            audit,
            events,
            reply: std::sync::OnceLock::new(),
            foresight: std::sync::OnceLock::new(),
            loaded,
        }
    }

    /// Tells `foresight` (the orchestrator) which agent an Assistant's answer delegates to, as
    /// soon as the answer names it.
    pub fn foresees(&self, foresight: Arc<dyn Foresight>) {
        // silent-ok: the composer tells it once; a second would be a wiring mistake.
        let _ = self.foresight.set(foresight);
    }

    /// Tells `reply` (the orchestrator's turn table) what each turn's reply writes as it streams.
    pub fn replies_to(&self, reply: std::sync::Weak<dyn Reply>) {
        // silent-ok: the composer tells it once; a second table would be a wiring mistake.
        let _ = self.reply.set(reply);
    }

    /// An agent container's model call: capped at its role's output whatever it asked for, its
    /// tools cut to fit a small window, every channel following its turn told at once that it
    /// thinks; what the agent whose answer is the reply writes reaches them as it is written
    /// ([`publish_delta`]).
    pub async fn for_agent(&self, call: AgentCall, mut request: v1::LlmRequest) -> Result<AgentStream, CallError> {
        // The model an agent asks for is one a person could pick (an agent's container is not
        // trusted to name any model a provider has).
        if !request.model.is_empty() {
            super::choices::pickable(&self.loaded, &request.model)
                .map_err(|why| CallError::Refused(tonic::Status::invalid_argument(why)))?;
        }
        let settings = self.loaded.config.agents.settings(call.role);
        let cap = settings.max_output_tokens;
        request.max_tokens = Some(request.max_tokens.filter(|asked| *asked > 0).map_or(cap, |asked| asked.min(cap)));
        // Thinking as its role's configuration asks, within what the answer may have.
        if request.thinking_budget == 0 {
            request.thinking_budget = settings.thinking_budget;
        }
        request.thinking_budget = request.thinking_budget.min(cap.saturating_sub(1));
        // A model with a small window (as its server or providers.yaml says) gets the tools cut.
        if let Some(window) = self.gateway.context_window(&request.model).await {
            let tools = request.tools.iter_mut().map(|tool| super::small::ToolText {
                description: &mut tool.description,
                parameters_json: &mut tool.parameters_json,
            });
            super::small::fit(tools, window);
        }
        if let Some(live) = &call.live {
            let phase = EventKind::Phase { agent: live.role, phase: "thinking" };
            self.events
                .publish(&live.context, Event::of_turn(&live.session, &live.user_turn, &live.correlation_id, phase));
        }
        let upstream = self.stream(&call.payer, request).await?;
        // An Assistant's delegations are spotted as they are written.
        let mut spotter = call
            .live
            .clone()
            .filter(|live| live.role == Role::Assistant)
            .and_then(|live| Some((live, self.foresight.get()?.clone(), DelegateSpotter::default())));
        let live = call.live.filter(|live| live.speaks);
        let (events, reply) = (self.events.clone(), self.reply.get().cloned());
        Ok(Box::pin(upstream.map(move |item| {
            let event = item?;
            if let Some((delegator, foresight, spotter)) = &mut spotter {
                if let Some(agent) = spotter.observe(&event) {
                    foresight.delegating(delegator, &agent);
                }
            }
            if let Some(live) = &live {
                let reply = reply.as_ref().and_then(std::sync::Weak::upgrade);
                publish_delta(&events, reply.as_deref(), live, &event);
            }
            Ok(event)
        })))
    }

    /// The gateway this road leads to.
    pub fn gateway(&self) -> &Arc<LlmGateway> {
        &self.gateway
    }

    /// Streams `request` for `payer` through the LLM gateway, the budget held first; the
    /// stream's events come back as they arrive, counted and settled when it ends or is
    /// dropped.
    pub async fn stream(&self, payer: &Payer, request: v1::LlmRequest) -> Result<Metered, CallError> {
        let model = self.qualified_model(&request.model);
        let input_estimate = estimated_input_tokens(&request);
        let reserved = self.budgets.reserve(
            &payer.context,
            &self.chain_of(&model),
            input_estimate,
            request.max_tokens.map(u64::from),
        );
        let reservation = reserved.map_err(|error| {
            let record = Record::new(Kind::Budget, payer.principal.as_str(), "refused")
                .context(&payer.context)
                .session(&payer.session)
                .correlation(&payer.correlation_id);
            self.audit.record(record.detail("model", model.as_str()).detail("reason", error.to_string()));
            CallError::Budget(error.to_string())
        })?;
        let completion = v1::LlmCompletionRequest {
            request: Some(request),
            session_id: payer.session.clone(),
            user_id: payer.context.to_string(),
            correlation_id: payer.correlation_id.clone(),
        };
        let started = std::time::Instant::now();
        let empty = tracing::field::Empty;
        let span = tracing::info_span!("llm", model = %model, provider = empty, outcome = empty);
        let in_flight = InFlight::new(self.gateway.metrics.clone());
        let mut failed_generation = None;
        let failed = |error: CallError| {
            span.record("outcome", "error");
            error
        };
        let upstream = loop {
            let (mut client, generation) =
                self.gateway.client(failed_generation).await.map_err(|e| failed(e.into()))?;
            match client.stream_completion(completion.clone()).await {
                Ok(response) => break response.into_inner(),
                Err(status) if failed_generation.is_none() && gateway_gone(&status) => {
                    tracing::warn!(error = %status.message(), "the LLM gateway went away; waiting for its restart");
                    failed_generation = Some(generation);
                }
                Err(status) => return Err(failed(CallError::Refused(status))),
            }
        };
        let tally = Tally {
            llm: self.gateway.clone(),
            context: payer.context.clone(),
            session: payer.session.clone(),
            provider: String::new(),
            model: model.split_once('/').map_or(model.as_str(), |(_, name)| name).to_string(),
            started,
            first_token: None,
            _in_flight: in_flight,
            input_estimate,
            output_chars: 0,
            started_answer: false,
            usage: None,
            outcome: None,
            budget: Some((self.budgets.clone(), reservation, self.events.clone())),
            span,
        };
        Ok(Metered { upstream, tally })
    }

    /// The text `request` is answered with, for `payer` (a summary, a title): the whole
    /// stream read, an error event or an empty answer an error.
    pub async fn complete(&self, payer: &Payer, request: baaaht_llm::model::Request) -> Result<String, CallError> {
        use tokio_stream::StreamExt as _;
        let mut events = self.stream(payer, baaaht_llm::convert::request_to_proto(request)).await?;
        let mut text = String::new();
        while let Some(event) = events.next().await {
            match event.map_err(|status| CallError::Failed(status.message().to_string()))?.event {
                Some(v1::llm_event::Event::TextDelta(delta)) => text.push_str(&delta.text),
                Some(v1::llm_event::Event::Error(error)) => return Err(CallError::Failed(error.message)),
                _ => {}
            }
        }
        if text.trim().is_empty() {
            return Err(CallError::Failed("the answer came back empty".into()));
        }
        Ok(text.trim().to_string())
    }

    /// `model` (`provider/model`) and its fallbacks along `providers.yaml`'s chains, each as
    /// `provider/model`: what a request may end up costing.
    fn chain_of(&self, model: &str) -> Vec<String> {
        let providers = &self.loaded.providers;
        // An alias may be answered by any of its models.
        if let Some(models) = providers.models.get(model) {
            return models.clone();
        }
        let mut chain = vec![model.to_string()];
        let Some((provider, bare)) = model.split_once('/') else { return chain };
        let configured = providers.providers.configured();
        for (name, fallback) in baaaht_llm::gateway::fallbacks(provider, bare, &providers.fallback_chains) {
            if configured.iter().any(|(known, _)| *known == name) {
                chain.push(format!("{name}/{fallback}"));
            }
        }
        chain
    }

    /// `model` with its provider: as named, or the default provider's.
    fn qualified_model(&self, model: &str) -> String {
        if self.loaded.providers.models.contains_key(model) {
            return model.to_string();
        }
        if model.contains('/') || model.is_empty() {
            let assistant = self.loaded.config.agents.settings(Role::Assistant).model.0;
            return if model.is_empty() { assistant } else { model.to_string() };
        }
        let configured = self.loaded.providers.providers.configured();
        let default = configured.iter().find(|(_, entry)| entry.default).or(configured.first()).map(|(name, _)| *name);
        format!("{}/{model}", default.unwrap_or("anthropic"))
    }
}

/// A model call's events as they arrive, tallied; its usage is recorded and its budget
/// settled when it ends or is dropped.
pub struct Metered {
    upstream: tonic::Streaming<v1::LlmCompletionEvent>,
    tally: Tally,
}

impl std::fmt::Debug for Metered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metered").field("session", &self.tally.session).finish_non_exhaustive()
    }
}

impl Stream for Metered {
    type Item = Result<v1::LlmEvent, tonic::Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        match Pin::new(&mut this.upstream).poll_next(cx) {
            Poll::Ready(Some(Ok(event))) => {
                let event = event.event.unwrap_or_default();
                this.tally.observe(&event);
                Poll::Ready(Some(Ok(event)))
            }
            Poll::Ready(Some(Err(status))) => {
                this.tally.outcome = Some("error");
                Poll::Ready(Some(Err(tonic::Status::unavailable(format!(
                    "the LLM gateway's stream broke: {}",
                    status.message()
                )))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// About how many tokens a request sends (four characters a token).
fn estimated_input_tokens(request: &v1::LlmRequest) -> u64 {
    let text: usize = request
        .messages
        .iter()
        .flat_map(|message| &message.content)
        .map(|block| match &block.block {
            Some(v1::content_block::Block::Text(text)) => text.len(),
            Some(v1::content_block::Block::ToolResult(result)) => result.content.len(),
            Some(v1::content_block::Block::Image(_)) => baaaht_proto::IMAGE_TOKENS * 4,
            _ => 64,
        })
        .sum();
    ((text + request.system.len()) / 4) as u64
}

/// The characters an event carries of the answer (text, thinking, a tool call's name and
/// arguments).
fn streamed_chars(event: &v1::LlmEvent) -> usize {
    use v1::llm_event::Event;
    match &event.event {
        Some(Event::TextDelta(delta)) => delta.text.len(),
        Some(Event::ThinkingDelta(delta)) => delta.thinking.len(),
        Some(Event::ToolCallStart(start)) => start.name.len(),
        Some(Event::ToolCallDelta(delta)) => delta.partial_json.len(),
        _ => 0,
    }
}

/// Counts a model call in flight from its creation until it is dropped.
struct InFlight(Arc<crate::base::metrics::Metrics>);

impl InFlight {
    fn new(metrics: Arc<crate::base::metrics::Metrics>) -> InFlight {
        metrics.llm_in_flight(true);
        InFlight(metrics)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.llm_in_flight(false);
    }
}

/// What one stream delivered; recorded (and its budget reservation settled) when the stream
/// ends or is dropped.
struct Tally {
    llm: Arc<LlmGateway>,
    context: Context,
    session: String,
    provider: String,
    model: String,
    started: std::time::Instant,
    first_token: Option<std::time::Duration>,
    _in_flight: InFlight,
    /// About how many tokens the request sent, and the characters streamed back: what a
    /// stream that ends without the provider's usage (cancelled, cut) is counted at.
    input_estimate: u64,
    output_chars: usize,
    /// Whether a provider began answering.
    started_answer: bool,
    usage: Option<Used>,
    outcome: Option<&'static str>,
    budget: Option<(Arc<Budgets>, Reservation, Arc<EventBus>)>,
    /// Open while the answer streams: the model call in the turn's trace, as the daemon sees it
    /// (the gateway process exports no spans of its own).
    span: tracing::Span,
}

impl Tally {
    fn observe(&mut self, event: &v1::LlmEvent) {
        use v1::llm_event::Event;
        match &event.event {
            Some(Event::MessageStart(start)) => {
                self.started_answer = true;
                self.provider.clone_from(&start.provider);
                if !start.model.is_empty() {
                    self.model.clone_from(&start.model);
                }
            }
            Some(Event::TextDelta(_) | Event::ThinkingDelta(_)) if self.first_token.is_none() => {
                self.first_token = Some(self.started.elapsed());
                self.output_chars += streamed_chars(event);
            }
            Some(Event::Usage(usage)) => {
                let tokens = TokenCounts {
                    input: usage.input_tokens,
                    output: usage.output_tokens,
                    cache_read: usage.cache_read_tokens,
                    cache_write: usage.cache_write_tokens,
                };
                self.usage = Some(Used { tokens, estimated: usage.estimated });
            }
            Some(Event::MessageStop(_)) => self.outcome = Some("ok"),
            Some(Event::Error(error)) => {
                // The provider's own words are the operator's: a turn tells its people a
                // sentence without them, and a gateway in its container logs to the engine.
                tracing::warn!(kind = %error.kind, provider = %error.provider, message = %error.message,
                    "the model's call failed");
                self.outcome = Some("error");
                if self.provider.is_empty() {
                    self.provider.clone_from(&error.provider);
                }
            }
            _ => self.output_chars += streamed_chars(event),
        }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        let provider = if self.provider.is_empty() { "none" } else { self.provider.as_str() };
        let outcome = self.outcome.unwrap_or("cancelled");
        // A stream that ended without the provider's usage still cost what it sent and what
        // came back: a cancelled one (the request left for the provider), or one a provider
        // began and broke off.
        if self.usage.is_none() && (outcome == "cancelled" || self.started_answer) {
            let tokens = TokenCounts {
                input: self.input_estimate,
                output: (self.output_chars as u64).div_ceil(4),
                ..TokenCounts::default()
            };
            self.usage = Some(Used { tokens, estimated: true });
        }
        self.span.record("provider", provider).record("outcome", outcome);
        self.llm.metrics.record_llm_request(provider, &self.model, outcome, self.started.elapsed(), self.first_token);
        let context = self.context.to_string();
        if let Some(usage) = self.usage {
            self.llm.account(provider, &self.model, &context, &self.session, usage);
        }
        if let Some((budgets, reservation, bus)) = self.budget.take() {
            let used = self.usage.map(|usage| usage.tokens);
            let answered = crate::model::budgets::Answered { provider: &self.provider, model: &self.model };
            if let Some(warning) = budgets.settle(reservation, used, answered) {
                let event = crate::store::events::Event::of_session(
                    &self.session,
                    crate::store::events::Kind::budget_warning(warning),
                );
                bus.publish(&self.context, event);
            }
        }
        tracing::info!(provider, outcome, session = %self.session, "LLM stream ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delegate_calls_agent_is_named_as_soon_as_its_arguments_name_it() {
        use v1::llm_event::Event;
        let start = |index: u32, name: &str| v1::LlmEvent {
            event: Some(Event::ToolCallStart(v1::ToolCallStart { index, id: "t".into(), name: name.into() })),
        };
        let delta = |index: u32, json: &str| v1::LlmEvent {
            event: Some(Event::ToolCallDelta(v1::ToolCallDelta { index, partial_json: json.into() })),
        };
        let mut spotter = DelegateSpotter::default();
        assert_eq!(spotter.observe(&start(1, "delegate")), None);
        assert_eq!(spotter.observe(&delta(1, "{\"agent\": \"wor")), None, "not before its closing quote");
        assert_eq!(spotter.observe(&delta(0, "\"")), None, "another call's arguments");
        assert_eq!(spotter.observe(&delta(1, "ker\", \"task\": \"")), Some("worker".into()));
        assert_eq!(spotter.observe(&delta(1, "Look it up\"}")), None, "named once");
        // A call of another tool names nothing; a second delegation names its own.
        assert_eq!(spotter.observe(&start(2, "web_fetch")), None);
        assert_eq!(spotter.observe(&delta(2, "{\"agent\":\"coder\"}")), None);
        assert_eq!(spotter.observe(&start(3, "delegate")), None);
        assert_eq!(spotter.observe(&delta(3, "{\"task\":\"x\",\"agent\":\"coder\"}")), Some("coder".into()));
        // An agent named again, by a thousand calls, is named once.
        for index in 4..1004 {
            assert_eq!(spotter.observe(&start(index, "delegate")), None);
            assert_eq!(spotter.observe(&delta(index, "{\"agent\":\"coder\"}")), None);
        }
    }
}
