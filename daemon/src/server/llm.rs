//! StreamLLM: an agent's request goes to the LLM gateway and each event comes back as it
//! arrives. When the agent goes away, dropping this stream drops the gateway call, and the
//! gateway stops its upstream request.

use std::sync::Arc;

use baaaht_proto::v1;
use tokio_stream::StreamExt as _;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use crate::audit::{Kind, Record};
use crate::auth::{Caller, Context};
use crate::budgets::{Budgets, Reservation};
use crate::events::EventBus;
use crate::llm::{GatewayError, LlmGateway};
use crate::Shared;

impl From<GatewayError> for Status {
    fn from(error: GatewayError) -> Status {
        match error {
            GatewayError::Off(_) => Status::failed_precondition(error.to_string()),
            GatewayError::Unavailable { .. } => Status::unavailable(error.to_string()),
        }
    }
}

/// Whether a failed call means the gateway itself went away (it is restarted; try the new one).
fn gateway_gone(status: &Status) -> bool {
    matches!(status.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled)
}

pub(super) async fn stream(
    shared: &Shared,
    caller: Caller,
    request: Request<v1::LlmRequest>,
) -> Result<Response<BoxStream<v1::LlmEvent>>, Status> {
    let Caller::Container(identity) = &caller else {
        return Err(Status::permission_denied("StreamLLM is for agent containers"));
    };
    let correlation_id = request
        .metadata()
        .get(baaaht_proto::CORRELATION_ID_HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let context = identity.context.to_string();
    let mut request = request.into_inner();
    // No answer is longer than its role's cap, whatever the agent asked for.
    let cap = shared.loaded.config.agents.settings(identity.role).max_output_tokens;
    request.max_tokens = Some(request.max_tokens.filter(|asked| *asked > 0).map_or(cap, |asked| asked.min(cap)));
    // The budget is checked (and the request's worst case, along its fallbacks, held) before
    // any provider is asked.
    let model = qualified_model(shared, &request.model);
    let input_estimate = estimated_input_tokens(&request);
    let reserved = shared.budgets.reserve(
        &identity.context,
        &chain_of(shared, &model),
        input_estimate,
        request.max_tokens.map(u64::from),
    );
    let reservation = reserved.map_err(|error| {
        let record = Record::by(Kind::Budget, &caller, "refused").correlation(&correlation_id);
        shared.audit.record(record.detail("model", model.as_str()).detail("reason", error.to_string()));
        Status::resource_exhausted(error.to_string())
    })?;
    let completion = v1::LlmCompletionRequest {
        request: Some(request),
        session_id: identity.session_id.clone(),
        user_id: context.clone(),
        correlation_id,
    };
    let started = std::time::Instant::now();
    let empty = tracing::field::Empty;
    let span = tracing::info_span!("llm", model = %model, provider = empty, outcome = empty);
    let in_flight = InFlight::new(shared.metrics.clone());
    let mut failed_generation = None;
    let failed = |status: Status| {
        span.record("outcome", "error");
        status
    };
    let upstream = loop {
        let (mut client, generation) =
            shared.llm.client(failed_generation).await.map_err(|error| failed(error.into()))?;
        match client.stream_completion(completion.clone()).await {
            Ok(response) => break response.into_inner(),
            Err(status) if failed_generation.is_none() && gateway_gone(&status) => {
                tracing::warn!(error = %status.message(), "the LLM gateway went away; waiting for its restart");
                failed_generation = Some(generation);
            }
            Err(status) => return Err(failed(status)),
        }
    };
    let mut tally = Tally {
        llm: shared.llm.clone(),
        context,
        session: identity.session_id.clone(),
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
        budget: Some((shared.budgets.clone(), reservation, identity.context.clone(), shared.events.clone())),
        span,
    };
    // What the Assistant writes reaches the context's channels as it is written.
    let live = shared.agents.live(&identity.name).filter(|live| live.role == crate::auth::Role::Assistant);
    let (bus, turns) = (shared.events.clone(), shared.turns.clone());
    let events = upstream.map(move |item| match item {
        Ok(event) => {
            let event = event.event.unwrap_or_default();
            tally.observe(&event);
            if let Some(live) = &live {
                publish_delta(&bus, &turns, live, &event);
            }
            Ok(event)
        }
        Err(status) => {
            tally.outcome = Some("error");
            Err(Status::unavailable(format!("the LLM gateway's stream broke: {}", status.message())))
        }
    });
    Ok(Response::new(Box::pin(events)))
}

/// Sends a text or thinking delta of the Assistant to its context's channels; the text is also
/// kept as written so far by its turn, for the case the turn is stopped. A refusal for the
/// context window is noted on the turn, which then compacts and tries again.
fn publish_delta(
    bus: &crate::events::EventBus,
    turns: &crate::orchestrator::Turns,
    live: &crate::agents::Live,
    event: &v1::LlmEvent,
) {
    use crate::events::Kind;
    use v1::llm_event::Event;
    let out = match &event.event {
        Some(Event::TextDelta(delta)) => {
            turns.wrote(&live.user_turn, &delta.text);
            Kind::TextDelta { index: delta.index, text: delta.text.clone() }
        }
        Some(Event::ThinkingDelta(delta)) => Kind::ThinkingDelta {
            index: delta.index,
            thinking: delta.thinking.clone(),
            signature: delta.signature.clone(),
        },
        Some(Event::Error(error)) if error.kind == "context_exceeded" => {
            return turns.context_exceeded(&live.user_turn);
        }
        _ => return,
    };
    bus.publish(
        &live.context,
        crate::events::Event::of_turn(&live.session, &live.user_turn, &live.correlation_id, out),
    );
}

/// `model` (`provider/model`) and its fallbacks along `providers.yaml`'s chains, each as
/// `provider/model`: what a request may end up costing.
fn chain_of(shared: &Shared, model: &str) -> Vec<String> {
    let mut chain = vec![model.to_string()];
    let Some((provider, bare)) = model.split_once('/') else { return chain };
    let providers = &shared.loaded.providers;
    let configured = providers.providers.configured();
    for (name, fallback) in baaaht_llm::gateway::fallbacks(provider, bare, &providers.fallback_chains) {
        if configured.iter().any(|(known, _)| *known == name) {
            chain.push(format!("{name}/{fallback}"));
        }
    }
    chain
}

/// `model` with its provider: as named, or the default provider's.
fn qualified_model(shared: &Shared, model: &str) -> String {
    if model.contains('/') || model.is_empty() {
        let assistant = shared.loaded.config.agents.settings(crate::auth::Role::Assistant).model.0;
        return if model.is_empty() { assistant } else { model.to_string() };
    }
    let configured = shared.loaded.providers.providers.configured();
    let default = configured.iter().find(|(_, entry)| entry.default).or(configured.first()).map(|(name, _)| *name);
    format!("{}/{model}", default.unwrap_or("anthropic"))
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

/// Counts a StreamLLM request in flight from its creation until it is dropped.
struct InFlight(Arc<crate::metrics::Metrics>);

impl InFlight {
    fn new(metrics: Arc<crate::metrics::Metrics>) -> InFlight {
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
    context: String,
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
    usage: Option<v1::Usage>,
    outcome: Option<&'static str>,
    budget: Option<(Arc<Budgets>, Reservation, Context, Arc<EventBus>)>,
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
            Some(Event::Usage(usage)) => self.usage = Some(*usage),
            Some(Event::MessageStop(_)) => self.outcome = Some("ok"),
            Some(Event::Error(error)) => {
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
            self.usage = Some(v1::Usage {
                input_tokens: self.input_estimate,
                output_tokens: (self.output_chars as u64).div_ceil(4),
                estimated: true,
                ..v1::Usage::default()
            });
        }
        self.span.record("provider", provider).record("outcome", outcome);
        self.llm.metrics.record_llm_request(provider, &self.model, outcome, self.started.elapsed(), self.first_token);
        if let Some(usage) = &self.usage {
            self.llm.account(provider, &self.model, &self.context, &self.session, usage);
        }
        if let Some((budgets, reservation, context, bus)) = self.budget.take() {
            let used = self.usage.map(|usage| crate::metrics::TokenCounts {
                input: usage.input_tokens,
                output: usage.output_tokens,
                cache_read: usage.cache_read_tokens,
                cache_write: usage.cache_write_tokens,
            });
            let answered = crate::budgets::Answered { provider: &self.provider, model: &self.model };
            if let Some(warning) = budgets.settle(reservation, used, answered) {
                bus.publish(
                    &context,
                    crate::events::Event::of_session(&self.session, crate::events::Kind::message(warning)),
                );
            }
        }
        tracing::info!(provider, outcome, session = %self.session, "LLM stream ended");
    }
}
