//! `baaaht-agent self-test --llm MODEL`: one short completion streamed through the daemon's
//! StreamLLM with this container's token, the path every agent's model calls take.

use std::path::Path;
use std::time::Duration;

use baaaht_proto::client::{connect, Backoff, ConnectOptions};
use baaaht_proto::selftest::LlmCheck;
use baaaht_proto::v1;

/// The longest the whole completion may take.
const LIMIT: Duration = Duration::from_secs(60);

/// Streams "say hello" from `model` over the daemon socket at `socket`.
pub fn run(socket: &Path, model: &str) -> LlmCheck {
    let mut check = LlmCheck { model: model.to_string(), ..LlmCheck::default() };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            check.error = format!("cannot start the async runtime: {error}");
            return check;
        }
    };
    let outcome = runtime.block_on(async { tokio::time::timeout(LIMIT, stream(socket, &mut check)).await });
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(error)) => check.error = error,
        Err(_) => check.error = format!("no complete answer within {} s", LIMIT.as_secs()),
    }
    check
}

async fn stream(socket: &Path, check: &mut LlmCheck) -> Result<(), String> {
    let token = std::env::var(baaaht_proto::CONTAINER_TOKEN_ENV)
        .map_err(|_unset| format!("{} is not set", baaaht_proto::CONTAINER_TOKEN_ENV))?;
    let options = ConnectOptions { token: Some(token), correlation_id: None, backoff: Backoff::ONCE };
    let mut client = connect(socket, options).await.map_err(|error| error.to_string())?;
    let request = v1::LlmRequest {
        model: check.model.clone(),
        messages: vec![v1::LlmMessage {
            role: "user".into(),
            content: vec![v1::ContentBlock {
                block: Some(v1::content_block::Block::Text("Reply with one word: hello.".into())),
            }],
        }],
        max_tokens: Some(64),
        ..v1::LlmRequest::default()
    };
    let mut events =
        client.agents.stream_llm(request).await.map_err(|status| status.message().to_string())?.into_inner();
    while let Some(event) = events.message().await.map_err(|status| status.message().to_string())? {
        use v1::llm_event::Event;
        match event.event {
            Some(Event::MessageStart(start)) => check.provider = start.provider,
            Some(Event::TextDelta(delta)) => check.text.push_str(&delta.text),
            Some(Event::Usage(usage)) => {
                check.input_tokens = usage.input_tokens;
                check.output_tokens = usage.output_tokens;
                check.estimated = usage.estimated;
            }
            Some(Event::MessageStop(stop)) => check.stop_reason = stop.stop_reason,
            Some(Event::Error(error)) => return Err(format!("{} ({})", error.message, error.kind)),
            _ => {}
        }
    }
    if check.stop_reason.is_empty() {
        return Err("the stream ended without a stop event".into());
    }
    Ok(())
}
