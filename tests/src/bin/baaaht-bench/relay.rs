//! `baaaht-bench relay`: a local model (the fake provider on 127.0.0.1, llama.cpp's wire)
//! streamed to a client two ways in the same run: straight over TCP (the baseline: what a
//! gateway on the host does), and through the daemon's relay (`llm/relay.rs`: a Unix socket
//! carried to the same address, what a gateway in its container does). Measured: a request's
//! first token (connect, request, first event) and a stream's throughput, medians beside the
//! baseline, the ratio taken in this run.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use baaaht_llm::model::{Block, Event, Message, Request, Role};
use baaaht_llm::provider::{Endpoint, Route, Wire};
use baaaht_proto::v1;
use baaaht_tests::fake_provider::{self as fake, FakeProvider};

use crate::{header, Row};

/// Streams one answer of `tokens` tokens from `endpoint`: when its first token came, and how
/// long the whole took.
async fn stream_once(endpoint: &Endpoint, tokens: usize) -> Result<(Duration, Duration)> {
    let request = Request {
        model: "fake-model".into(),
        messages: vec![Message { role: Role::User, content: vec![Block::Text("count".into())] }],
        ..Request::default()
    };
    let started = Instant::now();
    let (mut first, mut seen) = (None, 0);
    let mut on_event = |event: Event| {
        if let Event::TextDelta { .. } = event {
            first.get_or_insert_with(|| started.elapsed());
            seen += 1;
        }
    };
    baaaht_llm::provider::stream(endpoint, &request, &mut on_event).await?;
    if seen != tokens {
        bail!("{seen} of {tokens} tokens arrived");
    }
    Ok((first.unwrap_or_default(), started.elapsed()))
}

pub(crate) fn run(requests: usize, tokens: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let folder = tempfile::tempdir()?;
    let provider = rt.block_on(FakeProvider::start(vec![], None))?;
    let api_base = provider.api_base(fake::Wire::OpenAi);
    // The daemon's relay for a provider at that address, as it binds it for a gateway in its
    // container (here the client is in this process).
    let mut config = v1::GatewayConfig {
        providers: vec![v1::GatewayProvider { name: "local".into(), api_base: api_base.clone(), ..Default::default() }],
        ..Default::default()
    };
    let relays = rt.block_on(async { baaaht_daemon::llm::relay::bind(folder.path(), "/unused", &mut config) })?;
    let socket = folder.path().join(config.providers[0].relay_socket.trim_start_matches("/unused/"));
    let serving = rt.spawn(baaaht_daemon::llm::relay::serve(relays));
    let endpoint = |route: Route| Endpoint {
        name: "local".into(),
        wire: Wire::OpenAi,
        api_base: api_base.clone(),
        api_key: None,
        timeout: Duration::from_secs(60),
        max_output: None,
        route,
    };
    let (direct, relayed) = (endpoint(Route::Direct), endpoint(Route::Relay(socket)));
    println!(
        "baaaht-bench relay: a local model's answer straight over TCP (baseline) and through the daemon's relay; \
         {requests} requests of 1 token, then {tokens}-token streams × 10\n"
    );
    header();
    let measured = rt.block_on(async {
        let mut rows = vec![];
        // First token: short answers, the two ways interleaved so the machine's noise hits both.
        provider.answer_with(fake::token_stream(fake::Wire::OpenAi, 1, Duration::ZERO));
        let (mut straight, mut through) = (vec![], vec![]);
        for _ in 0..3 {
            stream_once(&direct, 1).await?;
            stream_once(&relayed, 1).await?;
        }
        for _ in 0..requests {
            straight.push(stream_once(&direct, 1).await?.0.as_secs_f64() * 1e6);
            through.push(stream_once(&relayed, 1).await?.0.as_secs_f64() * 1e6);
        }
        for (name, values) in
            [("first token: straight (baseline)", straight), ("first token: through the relay", through)]
        {
            rows.push(Row { name: name.into(), unit: "µs", values }.print());
        }
        // Throughput of a long answer.
        provider.answer_with(fake::token_stream(fake::Wire::OpenAi, tokens, Duration::ZERO));
        let (mut straight, mut through) = (vec![], vec![]);
        for _ in 0..10 {
            straight.push(tokens as f64 / stream_once(&direct, tokens).await?.1.as_secs_f64());
            through.push(tokens as f64 / stream_once(&relayed, tokens).await?.1.as_secs_f64());
        }
        for (name, values) in
            [("throughput: straight (baseline)", straight), ("throughput: through the relay", through)]
        {
            rows.push(Row { name: name.into(), unit: "tokens/s", values }.print());
        }
        anyhow::Ok(rows)
    })?;
    serving.abort();
    let (first_direct, first_relay, tps_direct, tps_relay) = (measured[0], measured[1], measured[2], measured[3]);
    println!(
        "\nthrough the relay: first token +{:.0} µs ({:.2}×), throughput {:.2}× the straight stream",
        first_relay - first_direct,
        first_relay / first_direct,
        tps_relay / tps_direct
    );
    println!(
        "RESULT first_token_direct_p50_us={first_direct:.0} first_token_relay_p50_us={first_relay:.0} \
         added_p50_us={:.0} first_token_ratio={:.2} direct_tps={tps_direct:.0} relay_tps={tps_relay:.0} \
         throughput_ratio={:.2}",
        first_relay - first_direct,
        first_relay / first_direct,
        tps_relay / tps_direct
    );
    Ok(())
}
