//! StreamLLM: an agent's request goes to the LLM gateway and each event comes back as it
//! arrives. When the agent goes away, dropping this stream drops the gateway call, and the
//! gateway stops its upstream request.

use std::sync::Arc;

use baaaht_proto::v1;
use tokio_stream::StreamExt as _;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use crate::auth::Caller;
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
    let Caller::Container(identity) = caller else {
        return Err(Status::permission_denied("StreamLLM is for agent containers"));
    };
    let correlation_id = request
        .metadata()
        .get(baaaht_proto::CORRELATION_ID_HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let context = identity.context.to_string();
    let completion = v1::LlmCompletionRequest {
        request: Some(request.into_inner()),
        session_id: identity.session_id.clone(),
        user_id: context.clone(),
        correlation_id,
    };
    let mut failed_generation = None;
    let upstream = loop {
        let (mut client, generation) = shared.llm.client(failed_generation).await?;
        match client.stream_completion(completion.clone()).await {
            Ok(response) => break response.into_inner(),
            Err(status) if failed_generation.is_none() && gateway_gone(&status) => {
                tracing::warn!(error = %status.message(), "the LLM gateway went away; waiting for its restart");
                failed_generation = Some(generation);
            }
            Err(status) => return Err(status),
        }
    };
    let mut tally = Tally::new(shared.llm.clone(), context, identity.session_id.clone());
    // What the Assistant writes reaches the context's channels as it is written.
    let live = shared.agents.live(&identity.name).filter(|live| live.role == crate::auth::Role::Assistant);
    let bus = shared.events.clone();
    let events = upstream.map(move |item| match item {
        Ok(event) => {
            let event = event.event.unwrap_or_default();
            tally.observe(&event);
            if let Some(live) = &live {
                publish_delta(&bus, live, &event);
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

/// Sends a text or thinking delta of the Assistant to its context's channels.
fn publish_delta(bus: &crate::events::EventBus, live: &crate::agents::Live, event: &v1::LlmEvent) {
    use v1::llm_event::Event;
    use v1::orchestrator_event::Event as Out;
    let out = match &event.event {
        Some(Event::TextDelta(delta)) => Out::TextDelta(delta.clone()),
        Some(Event::ThinkingDelta(delta)) => Out::ThinkingDelta(delta.clone()),
        _ => return,
    };
    bus.publish(
        &live.context,
        v1::OrchestratorEvent {
            session_id: live.session.clone(),
            turn_id: live.user_turn.clone(),
            correlation_id: live.correlation_id.clone(),
            event: Some(out),
        },
    );
}

/// What one stream delivered; recorded when the stream ends or is dropped.
struct Tally {
    llm: Arc<LlmGateway>,
    context: String,
    session: String,
    provider: String,
    usage: Option<v1::Usage>,
    outcome: Option<&'static str>,
}

impl Tally {
    fn new(llm: Arc<LlmGateway>, context: String, session: String) -> Tally {
        Tally { llm, context, session, provider: String::new(), usage: None, outcome: None }
    }

    fn observe(&mut self, event: &v1::LlmEvent) {
        use v1::llm_event::Event;
        match &event.event {
            Some(Event::MessageStart(start)) => self.provider.clone_from(&start.provider),
            Some(Event::Usage(usage)) => self.usage = Some(*usage),
            Some(Event::MessageStop(_)) => self.outcome = Some("ok"),
            Some(Event::Error(error)) => {
                self.outcome = Some("error");
                if self.provider.is_empty() {
                    self.provider.clone_from(&error.provider);
                }
            }
            _ => {}
        }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        let provider = if self.provider.is_empty() { "none" } else { self.provider.as_str() };
        let outcome = self.outcome.unwrap_or("cancelled");
        self.llm.metrics.record_llm_request(provider, outcome);
        if let Some(usage) = &self.usage {
            self.llm.account(provider, &self.context, &self.session, usage);
        }
        tracing::info!(provider, outcome, session = %self.session, "LLM stream ended");
    }
}
