//! `baaaht-bench relay`: a model (the fake provider on 127.0.0.1, llama.cpp's wire) streamed
//! to a client three ways in the same run: straight over TCP (the baseline: what a gateway on
//! the host does), through the daemon's relay (`llm/relay.rs`: a Unix socket carried to the
//! same address, what a gateway in its container does for a provider on the host's loopback),
//! and through a tunnel asked of the gateway's egress socket (`llm/egress.rs`: what a gateway
//! in its container, which has no network, does for any other provider; the address filter
//! and the audit line included). Measured: a request's first token (connect, request, first
//! event) and a stream's throughput, medians beside the baseline, the ratio taken in this run.

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
    let relays =
        rt.block_on(async { baaaht_daemon::model::llm::relay::bind(folder.path(), "/unused", &mut config) })?;
    let socket = folder.path().join(config.providers[0].relay_socket.trim_start_matches("/unused/"));
    let serving = rt.spawn(baaaht_daemon::model::llm::relay::serve(relays));
    let host = api_base.trim_start_matches("http://").split('/').next().unwrap_or_default().to_string();
    let web = baaaht_daemon::net::egress::proxy::WebProxy::new(
        &Default::default(),
        std::sync::Arc::new(baaaht_daemon::net::egress::proxy::SystemResolver),
        std::sync::Arc::new(baaaht_daemon::net::egress::proxy::TcpConnector),
    )
    .map_err(anyhow::Error::msg)?;
    let metrics = std::sync::Arc::new(baaaht_daemon::base::metrics::Metrics::new());
    let audit = baaaht_daemon::guard::audit::Audit::open(folder.path().join("audit"), true, 1, metrics);
    let way_out = baaaht_daemon::model::llm::egress::WayOut::new(vec![host], web, audit, Default::default());
    let _tunnels = rt.block_on(async { way_out.open(folder.path()) })?;
    let egress = std::sync::Arc::new(folder.path().join(baaaht_daemon::model::llm::egress::EGRESS_SOCKET));
    let endpoint = |route: Route| Endpoint {
        name: "local".into(),
        wire: Wire::OpenAi,
        api_base: api_base.clone(),
        api_key: None,
        timeout: Duration::from_secs(60),
        max_output: None,
        cloud: Default::default(),
        signer: None,
        route,
    };
    let (direct, relayed, tunneled) =
        (endpoint(Route::Direct), endpoint(Route::Relay(socket)), endpoint(Route::Tunnel(egress)));
    println!(
        "baaaht-bench relay: a model's answer straight over TCP (baseline), through the daemon's relay and \
         through a tunnel of the gateway's egress socket; {requests} requests of 1 token, then {tokens}-token \
         streams × 10\n"
    );
    header();
    let measured = rt.block_on(async {
        let mut rows = vec![];
        // First token: short answers, the two ways interleaved so the machine's noise hits both.
        provider.answer_with(fake::token_stream(fake::Wire::OpenAi, 1, Duration::ZERO));
        let (mut straight, mut through, mut tunnel) = (vec![], vec![], vec![]);
        for _ in 0..3 {
            stream_once(&direct, 1).await?;
            stream_once(&relayed, 1).await?;
            stream_once(&tunneled, 1).await?;
        }
        for _ in 0..requests {
            straight.push(stream_once(&direct, 1).await?.0.as_secs_f64() * 1e6);
            through.push(stream_once(&relayed, 1).await?.0.as_secs_f64() * 1e6);
            tunnel.push(stream_once(&tunneled, 1).await?.0.as_secs_f64() * 1e6);
        }
        for (name, values) in [
            ("first token: straight (baseline)", straight),
            ("first token: through the relay", through),
            ("first token: through a tunnel", tunnel),
        ] {
            rows.push(Row { name: name.into(), unit: "µs", values }.print());
        }
        // Throughput of a long answer.
        provider.answer_with(fake::token_stream(fake::Wire::OpenAi, tokens, Duration::ZERO));
        let (mut straight, mut through, mut tunnel) = (vec![], vec![], vec![]);
        for _ in 0..10 {
            straight.push(tokens as f64 / stream_once(&direct, tokens).await?.1.as_secs_f64());
            through.push(tokens as f64 / stream_once(&relayed, tokens).await?.1.as_secs_f64());
            tunnel.push(tokens as f64 / stream_once(&tunneled, tokens).await?.1.as_secs_f64());
        }
        for (name, values) in [
            ("throughput: straight (baseline)", straight),
            ("throughput: through the relay", through),
            ("throughput: through a tunnel", tunnel),
        ] {
            rows.push(Row { name: name.into(), unit: "tokens/s", values }.print());
        }
        anyhow::Ok(rows)
    })?;
    serving.abort();
    let [first_direct, first_relay, first_tunnel, tps_direct, tps_relay, tps_tunnel] = measured[..] else {
        bail!("{} figures measured, not 6", measured.len());
    };
    for (way, first, tps) in [("the relay", first_relay, tps_relay), ("a tunnel", first_tunnel, tps_tunnel)] {
        println!(
            "through {way}: first token +{:.0} µs ({:.2}×), throughput {:.2}× the straight stream",
            first - first_direct,
            first / first_direct,
            tps / tps_direct
        );
    }
    println!(
        "RESULT first_token_direct_p50_us={first_direct:.0} first_token_relay_p50_us={first_relay:.0} \
         first_token_tunnel_p50_us={first_tunnel:.0} relay_added_p50_us={:.0} tunnel_added_p50_us={:.0} \
         direct_tps={tps_direct:.0} relay_tps={tps_relay:.0} tunnel_tps={tps_tunnel:.0} \
         relay_throughput_ratio={:.2} tunnel_throughput_ratio={:.2}",
        first_relay - first_direct,
        first_tunnel - first_direct,
        tps_relay / tps_direct,
        tps_tunnel / tps_direct
    );
    Ok(())
}
