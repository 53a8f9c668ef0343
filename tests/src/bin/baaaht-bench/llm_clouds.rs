//! `baaaht-bench llm`'s rows for the clouds (issue 56): for Gemini, Azure OpenAI, Bedrock and
//! Vertex AI (Gemini and Claude), the time to the first token through the gateway beside the
//! same request sent to the fake cloud straight from this process (the fake's own time, with
//! the same adapter, signing and token), interleaved run by run; and what signing a Bedrock
//! request with SigV4 costs beside hashing its body alone.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Result};
use baaaht_llm::bedrock::{self, AwsKeys};
use baaaht_llm::model::Event;
use baaaht_llm::provider::tokens::TokenSource;
use baaaht_llm::provider::{Cloud, Endpoint, Route, Signer, Wire};
use baaaht_proto::client::{self, Backoff};
use baaaht_proto::v1;
use baaaht_proto::v1::llm_gateway_client::LlmGatewayClient;
use baaaht_tests::fake_cloud::{self, FakeCloud};

use crate::Row;

/// One cloud model: its name in the gateway and the endpoint that reaches it from here.
struct Cloudy {
    model: String,
    endpoint: Endpoint,
}

fn endpoint(cloud: &FakeCloud, name: &str, wire: Wire, key: Option<&str>, signer: Option<Signer>) -> Endpoint {
    Endpoint {
        name: name.into(),
        wire,
        api_base: cloud.base(),
        api_key: key.map(str::to_string),
        cloud: Cloud {
            region: if wire == Wire::Bedrock { fake_cloud::AWS_REGION } else { fake_cloud::VERTEX_REGION }.into(),
            project: fake_cloud::VERTEX_PROJECT.into(),
            api_version: String::new(),
        },
        signer,
        timeout: Duration::from_secs(30),
        max_output: None,
        route: Route::Direct,
    }
}

fn models(cloud: &FakeCloud) -> Result<Vec<Cloudy>> {
    let keys = Arc::new(AwsKeys {
        access_key_id: fake_cloud::AWS_ACCESS_KEY_ID.into(),
        secret_access_key: fake_cloud::AWS_SECRET_ACCESS_KEY.into(),
        session_token: None,
    });
    let account = std::fs::read_to_string(cloud.key_file())?;
    let tokens = Arc::new(TokenSource::service_account(&account).map_err(|error| anyhow::anyhow!(error.0))?);
    let vertex = || endpoint(cloud, "vertex", Wire::Vertex, None, Some(Signer::Tokens(tokens.clone())));
    Ok(vec![
        Cloudy {
            model: "google/gemini-2.5-flash".into(),
            endpoint: endpoint(cloud, "google", Wire::Gemini, Some(fake_cloud::GEMINI_KEY), None),
        },
        Cloudy {
            model: format!("azure/{}", fake_cloud::AZURE_DEPLOYMENT),
            endpoint: endpoint(cloud, "azure", Wire::Azure, Some(fake_cloud::AZURE_KEY), None),
        },
        Cloudy {
            model: "bedrock/anthropic.claude-3-7-sonnet-20250219-v1:0".into(),
            endpoint: endpoint(cloud, "bedrock", Wire::Bedrock, None, Some(Signer::Aws(keys))),
        },
        Cloudy { model: "vertex/gemini-2.5-pro".into(), endpoint: vertex() },
        Cloudy { model: "vertex/claude-sonnet-4@20250514".into(), endpoint: vertex() },
    ])
}

fn request(model: &str) -> baaaht_llm::model::Request {
    baaaht_llm::model::Request {
        model: model.into(),
        messages: vec![baaaht_llm::model::Message::user("Hi")],
        max_tokens: Some(64),
        ..baaaht_llm::model::Request::default()
    }
}

/// Microseconds to the first words, sent straight from here.
async fn direct(cloudy: &Cloudy) -> Result<f64> {
    let bare = cloudy.model.split_once('/').map_or(cloudy.model.as_str(), |(_, bare)| bare);
    let started = Instant::now();
    let mut first = None;
    baaaht_llm::provider::stream(&cloudy.endpoint, &request(bare), &mut |event| {
        if matches!(event, Event::TextDelta { .. }) && first.is_none() {
            first = Some(started.elapsed());
        }
    })
    .await?;
    match first {
        Some(first) => Ok(first.as_secs_f64() * 1e6),
        None => bail!("{}: no words came", cloudy.model),
    }
}

/// Microseconds to the first words, through the gateway (on one channel, as the daemon keeps).
async fn through_gateway(gateway: &mut LlmGatewayClient<tonic::transport::Channel>, model: &str) -> Result<f64> {
    let completion = v1::LlmCompletionRequest {
        request: Some(baaaht_llm::convert::request_to_proto(request(model))),
        session_id: "bench".into(),
        user_id: "user:bench".into(),
        correlation_id: "bench".into(),
    };
    let started = Instant::now();
    let mut events = gateway.stream_completion(completion).await?.into_inner();
    let mut first = None;
    while let Some(event) = events.message().await? {
        match event.event.and_then(|event| event.event) {
            Some(v1::llm_event::Event::TextDelta(_)) if first.is_none() => first = Some(started.elapsed()),
            Some(v1::llm_event::Event::Error(error)) => bail!("{model}: {}", error.message),
            _ => {}
        }
    }
    match first {
        Some(first) => Ok(first.as_secs_f64() * 1e6),
        None => bail!("{model}: no words came through the gateway"),
    }
}

/// The cloud rows; returns `(worst added p50 in µs, SigV4 µs per request)`.
pub(crate) async fn measure(cloud: &FakeCloud, gateway_socket: &std::path::Path, runs: usize) -> Result<(f64, f64)> {
    println!("\nclouds: time to the first word, through the gateway and straight to the fake cloud, {runs} runs each, interleaved");
    let gateway_channel = &mut LlmGatewayClient::new(client::channel(gateway_socket, Backoff::ONCE).await?);
    let mut worst = 0.0_f64;
    for cloudy in models(cloud)? {
        // Warm: connections, the Vertex token, the fake's first answer.
        direct(&cloudy).await?;
        through_gateway(gateway_channel, &cloudy.model).await?;
        let mut straight = Row::new(format!("{}: fake cloud → this process (baseline)", cloudy.model), "µs");
        let mut gateway = Row::new(format!("{}: fake cloud → gateway → this process", cloudy.model), "µs");
        for _ in 0..runs {
            straight.values.push(direct(&cloudy).await?);
            gateway.values.push(through_gateway(gateway_channel, &cloudy.model).await?);
        }
        let base = straight.print();
        let through = gateway.print();
        println!(
            "  added by the gateway: {:.0} µs p50 ({:.2}× the fake's own; target ≤ 1 ms)",
            through - base,
            through / base
        );
        worst = worst.max(through - base);
    }
    // Signing a Bedrock request of a typical turn (8 KiB of JSON) beside hashing its body.
    let keys = AwsKeys {
        access_key_id: fake_cloud::AWS_ACCESS_KEY_ID.into(),
        secret_access_key: fake_cloud::AWS_SECRET_ACCESS_KEY.into(),
        session_token: Some("session".into()),
    };
    let body = vec![b'x'; 8 << 10];
    let url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-7-sonnet-20250219-v1%3A0/converse-stream";
    let headers = [("host", "bedrock-runtime.us-east-1.amazonaws.com"), ("content-type", "application/json")];
    const BATCH: u32 = 1000;
    let mut hashing = Row::new("SHA-256 of an 8 KiB body (baseline)", "µs");
    let mut signing = Row::new("SigV4 signature of a Bedrock request with an 8 KiB body", "µs");
    for _ in 0..runs.max(5) {
        let started = Instant::now();
        for _ in 0..BATCH {
            std::hint::black_box(ring::digest::digest(&ring::digest::SHA256, std::hint::black_box(&body)));
        }
        hashing.values.push(started.elapsed().as_secs_f64() * 1e6 / f64::from(BATCH));
        let started = Instant::now();
        for _ in 0..BATCH {
            std::hint::black_box(bedrock::sign(&keys, "us-east-1", url, &headers, &body, SystemTime::now())?);
        }
        signing.values.push(started.elapsed().as_secs_f64() * 1e6 / f64::from(BATCH));
    }
    let hashed = hashing.print();
    let signed = signing.print();
    println!("  SigV4 per request: {signed:.1} µs ({:.2}× hashing the body alone; target ≤ 50 µs)", signed / hashed);
    Ok((worst, signed))
}
