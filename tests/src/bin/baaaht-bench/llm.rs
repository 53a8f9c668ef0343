//! `baaaht-bench llm`: tokens from the fake provider (in this process) to a client (in this
//! process), three ways in the same run: straight from the provider (the baseline), through
//! the gateway alone, and through the daemon and the gateway as an agent's StreamLLM does.
//! Every token carries the time it was written, so each path's per-token latency is measured
//! on one clock; the broker hop is the daemon path minus the gateway path, shown beside the hop
//! of a bare tonic proxy (forwarding only) measured in the same run. Then the clouds'
//! rows ([`crate::llm_clouds`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use baaaht_llm::model::{Block, Event, Message, Request, Role};
use baaaht_llm::provider::{Endpoint, Wire};
use baaaht_proto::client::{self, Backoff, ConnectOptions};
use baaaht_proto::v1;
use baaaht_proto::v1::llm_gateway_client::LlmGatewayClient;
use baaaht_tests::fake_cloud::FakeCloud;
use baaaht_tests::fake_provider::{
    self as fake, clock_nanos, stamp_of, stamped_token_stream, Answer, FakeProvider, ANTHROPIC_HELLO,
};
use baaaht_tests::{DaemonOptions, TestDaemon};

use crate::{header, Row};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    Direct,
    Gateway,
    BareProxy,
    Daemon,
}

impl Path {
    const ALL: [Path; 4] = [Path::Direct, Path::Gateway, Path::BareProxy, Path::Daemon];

    fn label(self) -> &'static str {
        match self {
            Path::Direct => "provider → client (baseline)",
            Path::Gateway => "provider → gateway → client",
            Path::BareProxy => "provider → gateway → bare tonic proxy → client",
            Path::Daemon => "provider → gateway → daemon → agent",
        }
    }
}

/// Where each path connects.
struct Setup {
    endpoint: Endpoint,
    gateway_socket: PathBuf,
    proxy_socket: PathBuf,
    agent_socket: PathBuf,
    token: String,
}

/// The baseline for the daemon's hop: a tonic service that forwards StreamCompletion to the
/// gateway and nothing else (no authentication, no accounting), on its own runtime threads.
struct BareProxy {
    upstream: LlmGatewayClient<tonic::transport::Channel>,
}

#[tonic::async_trait]
impl v1::llm_gateway_server::LlmGateway for BareProxy {
    async fn configure(
        &self,
        _: tonic::Request<v1::GatewayConfig>,
    ) -> Result<tonic::Response<v1::ConfigureResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("the bare proxy only streams"))
    }

    type StreamCompletionStream = tonic::codec::Streaming<v1::LlmCompletionEvent>;

    async fn stream_completion(
        &self,
        request: tonic::Request<v1::LlmCompletionRequest>,
    ) -> Result<tonic::Response<Self::StreamCompletionStream>, tonic::Status> {
        let mut upstream = self.upstream.clone();
        Ok(tonic::Response::new(upstream.stream_completion(request.into_inner()).await?.into_inner()))
    }

    async fn list_models(
        &self,
        _: tonic::Request<v1::ListModelsRequest>,
    ) -> Result<tonic::Response<v1::ListModelsResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("the bare proxy only streams"))
    }

    async fn get_provider_status(
        &self,
        _: tonic::Request<v1::ProviderStatusRequest>,
    ) -> Result<tonic::Response<v1::ProviderStatusResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("the bare proxy only streams"))
    }
}

/// Serves a [`BareProxy`] on `socket` from a runtime of its own (two worker threads, as the
/// daemon has), which lives as long as the returned runtime.
fn start_bare_proxy(gateway: &std::path::Path, socket: &std::path::Path) -> Result<tokio::runtime::Runtime> {
    let runtime = baaaht_tests::runtime();
    let upstream = runtime.block_on(client::channel(gateway, Backoff::ONCE))?;
    let listener = runtime.block_on(async { tokio::net::UnixListener::bind(socket) })?;
    let service =
        v1::llm_gateway_server::LlmGatewayServer::new(BareProxy { upstream: LlmGatewayClient::new(upstream) });
    runtime.spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
    Ok(runtime)
}

/// What one stream delivered: its tokens' latencies (ns) and how long it took.
struct Streamed {
    latencies: Vec<u64>,
    elapsed: Duration,
}

fn request(model: &str) -> Request {
    Request {
        model: model.into(),
        messages: vec![Message { role: Role::User, content: vec![Block::Text("count".into())] }],
        ..Request::default()
    }
}

fn proto_request(model: &str) -> v1::LlmRequest {
    v1::LlmRequest {
        model: model.into(),
        messages: vec![v1::LlmMessage {
            role: "user".into(),
            content: vec![v1::ContentBlock { block: Some(v1::content_block::Block::Text("count".into())) }],
        }],
        ..v1::LlmRequest::default()
    }
}

fn note(latencies: &mut Vec<u64>, text: &str) {
    if let Some(sent) = stamp_of(text) {
        latencies.push(clock_nanos().saturating_sub(sent));
    }
}

async fn stream_once(path: Path, setup: &Setup, expected: usize) -> Result<Streamed> {
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(expected);
    match path {
        Path::Direct => {
            let mut on_event = |event: Event| {
                if let Event::TextDelta { text, .. } = &event {
                    note(&mut latencies, text);
                }
            };
            baaaht_llm::provider::stream(&setup.endpoint, &request("fake-model"), &mut on_event).await?;
        }
        Path::Gateway | Path::BareProxy => {
            let socket = if path == Path::Gateway { &setup.gateway_socket } else { &setup.proxy_socket };
            let channel = client::channel(socket, Backoff::ONCE).await?;
            let mut gateway = LlmGatewayClient::new(channel);
            let completion = v1::LlmCompletionRequest {
                request: Some(proto_request("anthropic/fake-model")),
                session_id: "bench".into(),
                user_id: "user:bench".into(),
                correlation_id: "bench".into(),
            };
            let mut events = gateway.stream_completion(completion).await?.into_inner();
            while let Some(event) = events.message().await? {
                if let Some(v1::llm_event::Event::TextDelta(delta)) = event.event.and_then(|e| e.event) {
                    note(&mut latencies, &delta.text);
                }
            }
        }
        Path::Daemon => {
            let options = ConnectOptions { token: Some(setup.token.clone()), ..ConnectOptions::default() };
            let mut agent = client::connect(&setup.agent_socket, options).await?;
            let mut events = agent.agents.stream_llm(proto_request("anthropic/fake-model")).await?.into_inner();
            while let Some(event) = events.message().await? {
                if let Some(v1::llm_event::Event::TextDelta(delta)) = event.event {
                    note(&mut latencies, &delta.text);
                }
            }
        }
    }
    if latencies.len() != expected {
        bail!("{}: {} of {expected} tokens arrived", path.label(), latencies.len());
    }
    Ok(Streamed { latencies, elapsed: started.elapsed() })
}

/// `streams` concurrent streams on `path`; returns every token's latency and the wall time.
async fn concurrent(path: Path, setup: &Arc<Setup>, streams: usize, tokens: usize) -> Result<Streamed> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..streams)
        .map(|_| {
            let setup = setup.clone();
            tokio::spawn(async move { stream_once(path, &setup, tokens).await })
        })
        .collect();
    let mut latencies = Vec::with_capacity(streams * tokens);
    for task in tasks {
        latencies.extend(task.await??.latencies);
    }
    Ok(Streamed { latencies, elapsed: started.elapsed() })
}

fn micros(latencies: &[u64]) -> Vec<f64> {
    latencies.iter().map(|ns| *ns as f64 / 1e3).collect()
}

pub(crate) fn run(tokens: usize, paced_tokens: usize, runs: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let provider = rt.block_on(FakeProvider::start(vec![], None))?;
    let cloud = FakeCloud::start(&provider, 3600)?;
    let providers = format!(
        "providers:\n  anthropic:\n    api_key: bench-key\n    api_base: {}\n    default: true\n{}",
        provider.api_base(fake::Wire::Anthropic),
        cloud.providers_yaml()
    );
    let mut env = FakeCloud::env();
    env.push(("BAAAHT__LLM__GATEWAY".into(), "process".into()));
    let daemon = TestDaemon::start(DaemonOptions {
        env,
        files: vec![("config/providers.yaml".into(), providers)],
        ..Default::default()
    })
    .context("start baaahtd")?;
    // An agent container that stays while we stream with its credentials.
    let agent = daemon.lingering_agent("assistant", None, &[])?;
    let (agent_socket, token) = (agent.socket.clone(), agent.token.clone());
    let setup = Arc::new(Setup {
        endpoint: Endpoint {
            name: "anthropic".into(),
            wire: Wire::Anthropic,
            api_base: provider.api_base(fake::Wire::Anthropic),
            api_key: Some("bench-key".into()),
            timeout: Duration::from_secs(60),
            max_output: None,
            cloud: Default::default(),
            signer: None,
            route: baaaht_llm::provider::Route::Direct,
        },
        gateway_socket: daemon.data_dir.join("data/llm/gateway.sock"),
        proxy_socket: daemon.temp.path().join("bare-proxy.sock"),
        agent_socket,
        token,
    });
    let proxy = start_bare_proxy(&setup.gateway_socket, &setup.proxy_socket)?;
    let result = rt.block_on(async {
        let figures = measure(&provider, &setup, tokens, paced_tokens, runs).await?;
        provider.answer_with(Answer::Stream { body: ANTHROPIC_HELLO.into(), cut: false });
        let (added, sigv4) = crate::llm_clouds::measure(&cloud, &setup.gateway_socket, runs.max(20)).await?;
        println!("RESULT {figures} clouds_added_p50_us={added:.0} sigv4_us={sigv4:.1}");
        anyhow::Ok(())
    });
    proxy.shutdown_background();
    drop(agent);
    result
}

/// The rows of the four paths; returns the figures of the RESULT line.
async fn measure(
    provider: &FakeProvider,
    setup: &Arc<Setup>,
    tokens: usize,
    paced: usize,
    runs: usize,
) -> Result<String> {
    const STREAMS: usize = 16;
    let pace = Duration::from_millis(10); // 100 tokens/s
    println!(
        "baaaht-bench llm: tokens from the fake provider to a client in this process, four ways; \
         {tokens} unpaced tokens × {runs} runs, then {paced} tokens at 100/s on 1 and {STREAMS} streams × 3 rounds\n"
    );
    header();
    // Throughput: one stream, then 16 sharing the same total, as fast as the paths go.
    let mut single = vec![];
    for path in Path::ALL {
        provider.answer_with(stamped_token_stream(fake::Wire::Anthropic, tokens, Duration::ZERO));
        stream_once(path, setup, tokens).await?; // warm the connections and caches
        let mut row = Row { name: format!("1 stream, throughput: {}", path.label()), unit: "tokens/s", values: vec![] };
        for _ in 0..runs {
            let streamed = stream_once(path, setup, tokens).await?;
            row.values.push(tokens as f64 / streamed.elapsed.as_secs_f64());
        }
        single.push(row.print());
    }
    let mut aggregate = vec![];
    for path in Path::ALL {
        let per_stream = tokens / STREAMS;
        provider.answer_with(stamped_token_stream(fake::Wire::Anthropic, per_stream, Duration::ZERO));
        let name = format!("{STREAMS} streams, aggregate: {}", path.label());
        let mut row = Row { name, unit: "tokens/s", values: vec![] };
        for _ in 0..runs {
            let streamed = concurrent(path, setup, STREAMS, per_stream).await?;
            row.values.push((per_stream * STREAMS) as f64 / streamed.elapsed.as_secs_f64());
        }
        aggregate.push(row.print());
    }
    // Latency per token at a provider's pace.
    provider.answer_with(stamped_token_stream(fake::Wire::Anthropic, paced, pace));
    // Rounds interleave the paths, so a noisy moment of the machine hits them alike.
    const ROUNDS: usize = 3;
    let mut p50 = [[0.0; 4]; 2];
    let mut p99 = [[0.0; 4]; 2];
    for (config, streams) in [1, STREAMS].into_iter().enumerate() {
        let mut pooled: [Vec<u64>; 4] = Default::default();
        for _ in 0..ROUNDS {
            for (index, path) in Path::ALL.into_iter().enumerate() {
                pooled[index].extend(concurrent(path, setup, streams, paced).await?.latencies);
            }
        }
        for (index, path) in Path::ALL.into_iter().enumerate() {
            let mut row = Row {
                name: format!("{streams} × 100 tok/s, latency per token: {}", path.label()),
                unit: "µs",
                values: micros(&pooled[index]),
            };
            p50[config][index] = row.print();
            p99[config][index] = baaaht_tests::percentile(&mut row.values, 99.0);
        }
    }
    // Index 0 direct, 1 gateway, 2 bare proxy, 3 daemon.
    let hop = |config: usize| p50[config][3] - p50[config][1];
    let bare = |config: usize| p50[config][2] - p50[config][1];
    let added = |config: usize| p50[config][3] - p50[config][0];
    println!(
        "\nbroker hop (daemon − gateway path), p50 per token: {:.0} µs at 1 stream, {:.0} µs at {STREAMS} streams \
         (target ≤ 100 µs at {STREAMS} × 100 tok/s); p99 per token through the daemon {:.0} µs, gateway alone {:.0} µs",
        hop(0),
        hop(1),
        p99[1][3],
        p99[1][1]
    );
    println!(
        "bare tonic proxy hop (same run, baseline), p50 per token: {:.0} µs at 1 stream, {:.0} µs at {STREAMS} streams",
        bare(0),
        bare(1)
    );
    println!(
        "gateway + daemon over the bare provider stream, p50 per token: {:.0} µs at 1 stream, {:.0} µs at {STREAMS}",
        added(0),
        added(1)
    );
    let ratio = single[3] / single[0];
    println!(
        "throughput through the daemon: {:.0} tokens/s on 1 stream ({:.2}× the bare stream), {:.0} aggregate on {STREAMS} \
         (target ≥ 1,000,000)",
        single[3], ratio, aggregate[3]
    );
    let hop_ratio = hop(1) / bare(1);
    Ok(format!(
        "direct_tps={:.0} gateway_tps={:.0} daemon_tps={:.0} daemon16_tps={:.0} hop_p50_us={:.1} hop16_p50_us={:.1} \
         bare_hop16_p50_us={:.1} daemon16_p99_us={:.1} added16_p50_us={:.1} ratio={ratio:.3} hop_vs_bare={hop_ratio:.2}",
        single[0],
        single[1],
        single[3],
        aggregate[3],
        hop(0),
        hop(1),
        bare(1),
        p99[1][3],
        added(1)
    ))
}
