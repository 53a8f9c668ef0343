//! StreamLLM: an agent's request takes the one road to the model ([`crate::model::llm::call`]) and
//! each event comes back as it arrives. When the agent goes away, dropping this stream drops
//! the gateway call, and the gateway stops its upstream request.

use baaaht_proto::v1;
use tokio_stream::StreamExt as _;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use super::Shared;
use crate::base::auth::Caller;
use crate::model::llm::call::{CallError, Payer};
use crate::model::llm::GatewayError;

impl From<GatewayError> for Status {
    fn from(error: GatewayError) -> Status {
        match error {
            GatewayError::Off(_) => Status::failed_precondition(error.to_string()),
            GatewayError::Unavailable { .. } => Status::unavailable(error.to_string()),
        }
    }
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
    let mut request = request.into_inner();
    // No answer is longer than its role's cap, whatever the agent asked for.
    let cap = shared.loaded.config.agents.settings(identity.role).max_output_tokens;
    request.max_tokens = Some(request.max_tokens.filter(|asked| *asked > 0).map_or(cap, |asked| asked.min(cap)));
    // A model with a small window (as its server or providers.yaml says) gets the tools cut.
    if let Some(window) = shared.llm.context_window(&request.model).await {
        let tools = request.tools.iter_mut().map(|tool| crate::model::llm::small::ToolText {
            description: &mut tool.description,
            parameters_json: &mut tool.parameters_json,
        });
        crate::model::llm::small::fit(tools, window);
    }
    let payer = Payer {
        principal: crate::guard::audit::principal(&caller),
        context: identity.context.clone(),
        session: identity.session_id.clone(),
        correlation_id,
    };
    // Every channel following the turn hears at once that its agent is thinking.
    let live = shared.agents.live(&identity.name);
    if let Some(live) = &live {
        let phase = crate::store::events::Kind::Phase { agent: live.role, phase: "thinking" };
        let event = crate::store::events::Event::of_turn(&live.session, &live.user_turn, &live.correlation_id, phase);
        shared.events.publish(&live.context, event);
    }
    let upstream = shared.calls.stream(&payer, request).await.map_err(|error| match error {
        CallError::Budget(sentence) => Status::resource_exhausted(sentence),
        CallError::Gateway(error) => error.into(),
        CallError::Refused(status) => status,
        CallError::Failed(why) => Status::unavailable(why),
    })?;
    // What the Assistant writes, or a delegate whose answer is the reply, reaches the
    // context's channels as it is written.
    let live = live.filter(|live| live.speaks);
    let (bus, turns) = (shared.events.clone(), shared.turns.clone());
    let events = upstream.map(move |item| {
        let event = item?;
        if let Some(live) = &live {
            publish_delta(&bus, &turns, live, &event);
        }
        Ok(event)
    });
    Ok(Response::new(Box::pin(events)))
}

/// Sends a text or thinking delta of the agent writing the reply to its context's channels; the text is also
/// kept as written so far by its turn, for the case the turn is stopped. A refusal for the
/// context window is noted on the turn, which then compacts and tries again.
fn publish_delta(
    bus: &crate::store::events::EventBus,
    turns: &crate::drive::orchestrator::Turns,
    live: &crate::base::auth::Live,
    event: &v1::LlmEvent,
) {
    use crate::store::events::Kind;
    use v1::llm_event::Event;
    let out = match &event.event {
        Some(Event::TextDelta(delta)) => {
            turns.wrote(&live.user_turn, &delta.text);
            Kind::TextDelta { index: delta.index, text: delta.text.clone() }
        }
        // A delegate's reasoning (over pages it read, say) is its own; only its answer speaks.
        Some(Event::ThinkingDelta(delta)) if live.role == crate::base::auth::Role::Assistant => Kind::ThinkingDelta {
            index: delta.index,
            thinking: delta.thinking.clone(),
            signature: delta.signature.clone(),
        },
        // The Assistant's history is what compaction shortens; a delegate's task is not.
        Some(Event::Error(error))
            if error.kind == "context_exceeded" && live.role == crate::base::auth::Role::Assistant =>
        {
            return turns.context_exceeded(&live.user_turn);
        }
        _ => return,
    };
    bus.publish(
        &live.context,
        crate::store::events::Event::of_turn(&live.session, &live.user_turn, &live.correlation_id, out),
    );
}
