//! Prometheus metrics, served as text on a loopback address only (spec §18.2).
//!
//! Counters and histograms live in one [`Metrics`] value shared by the subsystems that record
//! them; the HTTP side renders a snapshot per scrape and never blocks a recorder for long.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Upper bounds of the latency buckets, in seconds (100 µs … 10 s).
const LATENCY_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; LATENCY_BUCKETS.len()];
        }
        for (bucket, bound) in self.counts.iter_mut().zip(LATENCY_BUCKETS) {
            if seconds <= *bound {
                *bucket += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }
}

#[derive(Debug, Default)]
struct Registry {
    /// method → gRPC code → calls
    rpc_calls: BTreeMap<String, BTreeMap<String, u64>>,
    rpc_latency: BTreeMap<String, Histogram>,
    /// (provider, context, kind) → tokens
    llm_tokens: BTreeMap<(String, String, &'static str), u64>,
    /// (provider, outcome) → requests
    llm_requests: BTreeMap<(String, &'static str), u64>,
    gateway_up: bool,
    gateway_restarts: u64,
    /// Budget outcomes: (kind of context, outcome) → count; no user ids as labels.
    budget_events: BTreeMap<(&'static str, &'static str), u64>,
    /// Spending counted against budgets, in micro-dollars, by kind of context.
    budget_cost_micros: BTreeMap<&'static str, u64>,
    /// Scheduled runs: (task type, outcome) → count.
    task_runs: BTreeMap<(&'static str, &'static str), u64>,
}

/// Tokens of one answer, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenCounts {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

/// The daemon's metrics.
#[derive(Debug)]
pub struct Metrics {
    started: Instant,
    registry: Mutex<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics { started: Instant::now(), registry: Mutex::default() }
    }
}

impl Metrics {
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Records one finished RPC.
    pub fn record_rpc(&self, method: &str, code: &str, elapsed: Duration) {
        let mut registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        // Every RPC passes here: allocate keys only the first time a method/code is seen.
        if !registry.rpc_calls.contains_key(method) {
            registry.rpc_calls.insert(method.to_string(), BTreeMap::new());
        }
        if let Some(codes) = registry.rpc_calls.get_mut(method) {
            match codes.get_mut(code) {
                Some(count) => *count += 1,
                None => {
                    codes.insert(code.to_string(), 1);
                }
            }
        }
        match registry.rpc_latency.get_mut(method) {
            Some(histogram) => histogram.observe(elapsed.as_secs_f64()),
            None => {
                let mut histogram = Histogram::default();
                histogram.observe(elapsed.as_secs_f64());
                registry.rpc_latency.insert(method.to_string(), histogram);
            }
        }
    }

    /// Records the tokens of one answer from `provider` for `context` (`user:ID` or `group:ID`).
    pub fn record_llm_tokens(&self, provider: &str, context: &str, tokens: TokenCounts) {
        let mut registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        for (kind, count) in [
            ("input", tokens.input),
            ("output", tokens.output),
            ("cache_read", tokens.cache_read),
            ("cache_write", tokens.cache_write),
        ] {
            *registry.llm_tokens.entry((provider.to_string(), context.to_string(), kind)).or_default() += count;
        }
    }

    /// Records how one StreamLLM request ended: `ok`, `error` or `cancelled`.
    pub fn record_llm_request(&self, provider: &str, outcome: &'static str) {
        let mut registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        *registry.llm_requests.entry((provider.to_string(), outcome)).or_default() += 1;
    }

    /// Counts a budget outcome for a `user` or `group` context: `refused` or `warned`.
    pub fn record_budget(&self, kind: &'static str, outcome: &'static str) {
        let mut registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        *registry.budget_events.entry((kind, outcome)).or_default() += 1;
    }

    /// Adds what one answer cost a `user` or `group` context.
    pub fn record_budget_cost(&self, kind: &'static str, micros: u64) {
        let mut registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        *registry.budget_cost_micros.entry(kind).or_default() += micros;
    }

    /// Counts a scheduled run's end (or a skipped slot) of a task of `kind`.
    pub fn record_task_run(&self, kind: &'static str, outcome: &'static str) {
        let mut registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        *registry.task_runs.entry((kind, outcome)).or_default() += 1;
    }

    pub fn set_gateway_up(&self, up: bool) {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner).gateway_up = up;
    }

    pub fn count_gateway_restart(&self) {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner).gateway_restarts += 1;
    }

    /// The exposition text (Prometheus text format 0.0.4).
    pub fn render(&self) -> String {
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        let _ = writeln!(out, "# HELP baaaht_uptime_seconds Seconds since the daemon started.");
        let _ = writeln!(out, "# TYPE baaaht_uptime_seconds gauge");
        let _ = writeln!(out, "baaaht_uptime_seconds {:.3}", self.uptime().as_secs_f64());
        let _ = writeln!(out, "# HELP baaaht_build_info Version of the running daemon.");
        let _ = writeln!(out, "# TYPE baaaht_build_info gauge");
        let _ = writeln!(out, "baaaht_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(out, "# HELP baaaht_rpc_requests_total gRPC requests by method and status code.");
        let _ = writeln!(out, "# TYPE baaaht_rpc_requests_total counter");
        for (method, codes) in &registry.rpc_calls {
            for (code, count) in codes {
                let _ = writeln!(out, "baaaht_rpc_requests_total{{method=\"{method}\",code=\"{code}\"}} {count}");
            }
        }
        let _ = writeln!(
            out,
            "# HELP baaaht_rpc_duration_seconds gRPC request latency by method (until the response starts)."
        );
        let _ = writeln!(out, "# TYPE baaaht_rpc_duration_seconds histogram");
        for (method, histogram) in &registry.rpc_latency {
            for (count, bound) in histogram.counts.iter().zip(LATENCY_BUCKETS) {
                let _ =
                    writeln!(out, "baaaht_rpc_duration_seconds_bucket{{method=\"{method}\",le=\"{bound}\"}} {count}");
            }
            let _ = writeln!(
                out,
                "baaaht_rpc_duration_seconds_bucket{{method=\"{method}\",le=\"+Inf\"}} {}",
                histogram.count
            );
            let _ = writeln!(out, "baaaht_rpc_duration_seconds_sum{{method=\"{method}\"}} {}", histogram.sum);
            let _ = writeln!(out, "baaaht_rpc_duration_seconds_count{{method=\"{method}\"}} {}", histogram.count);
        }
        let _ = writeln!(out, "# HELP baaaht_llm_tokens_total LLM tokens by provider, context and kind.");
        let _ = writeln!(out, "# TYPE baaaht_llm_tokens_total counter");
        for ((provider, context, kind), count) in &registry.llm_tokens {
            let _ = writeln!(
                out,
                "baaaht_llm_tokens_total{{provider=\"{provider}\",context=\"{context}\",kind=\"{kind}\"}} {count}"
            );
        }
        let _ = writeln!(out, "# HELP baaaht_llm_requests_total StreamLLM requests by provider and outcome.");
        let _ = writeln!(out, "# TYPE baaaht_llm_requests_total counter");
        for ((provider, outcome), count) in &registry.llm_requests {
            let _ = writeln!(out, "baaaht_llm_requests_total{{provider=\"{provider}\",outcome=\"{outcome}\"}} {count}");
        }
        let _ = writeln!(out, "# HELP baaaht_llm_gateway_up Whether the LLM gateway answers its health check.");
        let _ = writeln!(out, "# TYPE baaaht_llm_gateway_up gauge");
        let _ = writeln!(out, "baaaht_llm_gateway_up {}", u8::from(registry.gateway_up));
        let _ = writeln!(out, "# HELP baaaht_llm_gateway_restarts_total Times the LLM gateway was restarted.");
        let _ = writeln!(out, "# TYPE baaaht_llm_gateway_restarts_total counter");
        let _ = writeln!(out, "baaaht_llm_gateway_restarts_total {}", registry.gateway_restarts);
        let _ = writeln!(out, "# HELP baaaht_budget_events_total Requests refused at a hard limit and soft-limit warnings, by kind of context.");
        let _ = writeln!(out, "# TYPE baaaht_budget_events_total counter");
        for ((kind, outcome), count) in &registry.budget_events {
            let _ =
                writeln!(out, "baaaht_budget_events_total{{context_kind=\"{kind}\",outcome=\"{outcome}\"}} {count}");
        }
        let _ = writeln!(
            out,
            "# HELP baaaht_budget_spent_dollars_total What answers cost, as budgets count it, by kind of context."
        );
        let _ = writeln!(out, "# TYPE baaaht_budget_spent_dollars_total counter");
        for (kind, micros) in &registry.budget_cost_micros {
            let _ = writeln!(
                out,
                "baaaht_budget_spent_dollars_total{{context_kind=\"{kind}\"}} {:.6}",
                *micros as f64 / 1e6
            );
        }
        let _ = writeln!(
            out,
            "# HELP baaaht_task_runs_total Scheduled runs by task type and outcome (skipped: a slot that got no run)."
        );
        let _ = writeln!(out, "# TYPE baaaht_task_runs_total counter");
        for ((kind, outcome), count) in &registry.task_runs {
            let _ = writeln!(out, "baaaht_task_runs_total{{type=\"{kind}\",outcome=\"{outcome}\"}} {count}");
        }
        out
    }
}

/// Serves `GET /metrics` on `listener` until `cancel` fires.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, cancel: CancellationToken) {
    loop {
        let stream = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "metrics listener failed to accept a connection");
                    continue;
                }
            },
        };
        let metrics = metrics.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let metrics = metrics.clone();
            async move {
                let response = if request.uri().path() == "/metrics" && request.method() == hyper::Method::GET {
                    hyper::Response::builder()
                        .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
                        .body(Full::new(Bytes::from(metrics.render())))
                } else {
                    hyper::Response::builder()
                        .status(404)
                        .body(Full::new(Bytes::from_static(b"not found: metrics are at /metrics\n")))
                };
                response
            }
        });
        let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
        let cancel = cancel.clone();
        // One scrape per connection at a time; a slow scraper cannot stall the accept loop
        // for long because scrapes are small and the connection ends with the daemon.
        tokio::select! {
            () = cancel.cancelled() => return,
            result = connection => if let Err(error) = result {
                tracing::debug!(%error, "metrics connection ended with an error");
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_and_buckets() {
        let metrics = Metrics::default();
        metrics.record_rpc("GetStatus", "0", Duration::from_micros(300));
        metrics.record_rpc("GetStatus", "0", Duration::from_millis(20));
        metrics.record_rpc("GetStatus", "16", Duration::from_micros(90));
        let text = metrics.render();
        assert!(text.contains("baaaht_rpc_requests_total{method=\"GetStatus\",code=\"0\"} 2"), "{text}");
        assert!(text.contains("baaaht_rpc_requests_total{method=\"GetStatus\",code=\"16\"} 1"), "{text}");
        assert!(text.contains("baaaht_rpc_duration_seconds_bucket{method=\"GetStatus\",le=\"0.0005\"} 2"), "{text}");
        assert!(text.contains("baaaht_rpc_duration_seconds_count{method=\"GetStatus\"} 3"), "{text}");
        assert!(text.contains("baaaht_uptime_seconds "), "{text}");
    }
}
