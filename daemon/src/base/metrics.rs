//! Prometheus metrics (spec §18.2), kept with `prometheus-client` and served in the OpenMetrics
//! text format on a loopback address only.
//!
//! Labels are bounded: no user, session or container ids. Where a label value comes from
//! outside (a model an agent names, a client's channel, a gRPC method), only the first
//! [`OPEN_LABEL_LIMIT`] distinct values get a series of their own and the rest count as
//! `other`. Per-user spending lives in the budget ledger, not here.

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::base::lifetime::{Subsystem, Work};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How many distinct values a label fed from outside may take before the rest count as `other`.
pub const OPEN_LABEL_LIMIT: usize = 64;

/// The content type of [`Metrics::render`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Short operations (RPCs, tool calls), 100 µs … 60 s.
const FAST_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0];
/// Model calls, delegations and container starts, 10 ms … 10 min.
const SLOW_BUCKETS: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0];

fn fast_histogram() -> Histogram {
    Histogram::new(FAST_BUCKETS.iter().copied())
}

fn slow_histogram() -> Histogram {
    Histogram::new(SLOW_BUCKETS.iter().copied())
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// Tokens of one answer, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenCounts {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    method: String,
    code: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabel {
    method: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabel {
    role: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RestartLabels {
    role: &'static str,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderOutcome {
    provider: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderModel {
    provider: String,
    model: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    provider: String,
    model: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabel {
    provider: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabels {
    agent: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabel {
    channel: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    context_kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindOutcome {
    context_kind: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    r#type: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AuditLabel {
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EgressLabels {
    /// allowed, refused, failed.
    outcome: &'static str,
    /// How it was allowed: rule, approval, list (an MCP server's or a gateway's), none.
    by: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    direction: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabel {
    decision: &'static str,
}

/// The values one open label has taken, up to [`OPEN_LABEL_LIMIT`].
#[derive(Debug, Default)]
struct Bounded(Mutex<HashSet<String>>);

impl Bounded {
    fn label(&self, value: &str) -> String {
        let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(value) {
            return value.to_string();
        }
        if seen.len() >= OPEN_LABEL_LIMIT || value.is_empty() {
            return "other".to_string();
        }
        seen.insert(value.to_string());
        value.to_string()
    }
}

/// Figures sampled from the engine and the data dir, set as a whole each time.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Per role: running containers, CPU in cores, memory in bytes.
    pub containers: Vec<(&'static str, u64, f64, u64)>,
    pub sessions: [(&'static str, u64); 3],
    /// Per kind of context (`user`, `group`): bytes of memory stores.
    pub memory_bytes: Vec<(&'static str, u64)>,
}

/// The daemon's metrics.
pub struct Metrics {
    /// False when nothing reads the figures (`metrics.enabled: false` and no `metrics.log`):
    /// every record is then skipped.
    recording: bool,
    started: Instant,
    registry: Registry,
    uptime: FloatGauge,
    rpc_requests: Family<RpcLabels, Counter>,
    rpc_duration: Histograms<MethodLabel>,
    container_spawn: Histograms<RoleLabel>,
    containers: Family<RoleLabel, Gauge>,
    container_cpu: Family<RoleLabel, FloatGauge>,
    container_memory: Family<RoleLabel, Gauge>,
    container_restarts: Family<RestartLabels, Counter>,
    health_failures: Family<RoleLabel, Counter>,
    llm_requests: Family<ProviderOutcome, Counter>,
    llm_duration: Histograms<ProviderModel>,
    llm_first_token: Histograms<ProviderModel>,
    llm_tokens: Family<TokenLabels, Counter>,
    llm_in_flight: Gauge,
    llm_queue: Family<ProviderLabel, Gauge>,
    gateway_up: Gauge,
    gateway_restarts: Counter,
    disk_used: FloatGauge,
    disk_available: Gauge,
    tool_duration: Histograms<ToolLabels>,
    delegation_duration: Histograms<AgentLabels>,
    messages: Family<ChannelLabel, Counter>,
    sessions: Family<StatusLabel, Gauge>,
    memory_bytes: Family<KindLabel, Gauge>,
    task_runs: Family<TaskLabels, Counter>,
    budget_events: Family<KindOutcome, Counter>,
    budget_spent: Family<KindLabel, Counter<f64, AtomicU64>>,
    audit_events: Family<AuditLabel, Counter>,
    egress_connections: Family<EgressLabels, Counter>,
    egress_bytes: Family<DirectionLabel, Counter>,
    egress_approvals: Family<DecisionLabel, Counter>,
    methods: Bounded,
    providers: Bounded,
    models: Bounded,
    tools: Bounded,
    channels: Bounded,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").field("started", &self.started).finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

fn histograms<L: Clone + std::hash::Hash + Eq>(slow: bool) -> Histograms<L> {
    Family::new_with_constructor(if slow { slow_histogram } else { fast_histogram })
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut metrics = Metrics {
            recording: true,
            started: Instant::now(),
            registry: Registry::default(),
            uptime: FloatGauge::default(),
            rpc_requests: Family::default(),
            rpc_duration: histograms(false),
            container_spawn: histograms(true),
            containers: Family::default(),
            container_cpu: Family::default(),
            container_memory: Family::default(),
            container_restarts: Family::default(),
            health_failures: Family::default(),
            llm_requests: Family::default(),
            llm_duration: histograms(true),
            llm_first_token: histograms(true),
            llm_tokens: Family::default(),
            llm_in_flight: Gauge::default(),
            llm_queue: Family::default(),
            gateway_up: Gauge::default(),
            gateway_restarts: Counter::default(),
            disk_used: FloatGauge::default(),
            disk_available: Gauge::default(),
            tool_duration: histograms(false),
            delegation_duration: histograms(true),
            messages: Family::default(),
            sessions: Family::default(),
            memory_bytes: Family::default(),
            task_runs: Family::default(),
            budget_events: Family::default(),
            budget_spent: Family::default(),
            audit_events: Family::default(),
            egress_connections: Family::default(),
            egress_bytes: Family::default(),
            egress_approvals: Family::default(),
            methods: Bounded::default(),
            providers: Bounded::default(),
            models: Bounded::default(),
            tools: Bounded::default(),
            channels: Bounded::default(),
        };
        metrics.register();
        metrics
    }

    fn register(&mut self) {
        let r = &mut self.registry;
        let seconds = Unit::Seconds;
        r.register_with_unit("baaaht_uptime", "Time since the daemon started", seconds.clone(), self.uptime.clone());
        r.register(
            "baaaht_build",
            "Version of the running daemon",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        r.register("baaaht_rpc_requests", "gRPC requests by method and status code", self.rpc_requests.clone());
        r.register_with_unit(
            "baaaht_rpc_duration",
            "gRPC request latency by method, until the response starts",
            seconds.clone(),
            self.rpc_duration.clone(),
        );
        r.register_with_unit(
            "baaaht_container_spawn_duration",
            "Time from asking the engine for a container until it runs, by role",
            seconds.clone(),
            self.container_spawn.clone(),
        );
        r.register(
            "baaaht_containers",
            "Running containers by role (sampled from the engine)",
            self.containers.clone(),
        );
        r.register(
            "baaaht_container_cpu_cores",
            "CPU used by the containers of a role, in cores (1 is one core busy; sampled from the engine)",
            self.container_cpu.clone(),
        );
        r.register_with_unit(
            "baaaht_container_memory",
            "Memory used by the containers of a role (sampled from the engine)",
            Unit::Bytes,
            self.container_memory.clone(),
        );
        r.register(
            "baaaht_container_restarts",
            "Containers restarted by the daemon, by role and reason",
            self.container_restarts.clone(),
        );
        r.register(
            "baaaht_health_check_failures",
            "Failed health checks of long-running containers, by role",
            self.health_failures.clone(),
        );
        r.register("baaaht_llm_requests", "StreamLLM requests by provider and outcome", self.llm_requests.clone());
        r.register_with_unit(
            "baaaht_llm_request_duration",
            "StreamLLM request latency, from the request to its last event, by provider and model",
            seconds.clone(),
            self.llm_duration.clone(),
        );
        r.register_with_unit(
            "baaaht_llm_time_to_first_token",
            "Time from a StreamLLM request to its first text, by provider and model",
            seconds.clone(),
            self.llm_first_token.clone(),
        );
        r.register("baaaht_llm_tokens", "LLM tokens by provider, model and kind", self.llm_tokens.clone());
        r.register(
            "baaaht_llm_requests_in_flight",
            "StreamLLM requests waiting for or streaming from the LLM gateway",
            self.llm_in_flight.clone(),
        );
        r.register(
            "baaaht_llm_queue_depth",
            "Requests the LLM gateway holds back for a provider's rate limit (sampled by its health check)",
            self.llm_queue.clone(),
        );
        r.register(
            "baaaht_llm_gateway_up",
            "Whether the LLM gateway answers its health check",
            self.gateway_up.clone(),
        );
        r.register("baaaht_llm_gateway_restarts", "Times the LLM gateway was restarted", self.gateway_restarts.clone());
        r.register(
            "baaaht_disk_used_ratio",
            "The share of the data dir's disk in use, as df counts it",
            self.disk_used.clone(),
        );
        r.register_with_unit(
            "baaaht_disk_available",
            "Bytes left on the data dir's disk",
            Unit::Bytes,
            self.disk_available.clone(),
        );
        r.register_with_unit(
            "baaaht_tool_duration",
            "Tool call duration through the daemon, by tool and outcome",
            seconds.clone(),
            self.tool_duration.clone(),
        );
        r.register_with_unit(
            "baaaht_delegation_duration",
            "Delegation round trip, from the Assistant's request to the agent's answer, by agent and outcome",
            seconds.clone(),
            self.delegation_duration.clone(),
        );
        r.register("baaaht_messages", "User messages received, by channel", self.messages.clone());
        r.register("baaaht_sessions", "Sessions by status", self.sessions.clone());
        r.register_with_unit(
            "baaaht_memory_store",
            "Size of the memory stores, by kind of context",
            Unit::Bytes,
            self.memory_bytes.clone(),
        );
        r.register(
            "baaaht_task_runs",
            "Scheduled runs by task type and outcome (skipped: a slot that got no run)",
            self.task_runs.clone(),
        );
        r.register(
            "baaaht_budget_events",
            "Requests refused at a hard limit and soft-limit warnings, by kind of context",
            self.budget_events.clone(),
        );
        r.register(
            "baaaht_budget_spent_dollars",
            "What answers cost, as budgets count it, by kind of context",
            self.budget_spent.clone(),
        );
        r.register("baaaht_audit_events", "Events written to the audit log, by kind", self.audit_events.clone());
        r.register(
            "baaaht_egress_connections",
            "Connections out of containers, by outcome and what allowed them",
            self.egress_connections.clone(),
        );
        r.register_with_unit(
            "baaaht_egress",
            "Bytes carried by connections out of containers, by direction",
            Unit::Bytes,
            self.egress_bytes.clone(),
        );
        r.register(
            "baaaht_egress_approvals",
            "Answers to approval requests for hosts, by decision",
            self.egress_approvals.clone(),
        );
    }

    /// Metrics that record nothing, for a daemon whose figures nobody reads.
    pub fn off() -> Metrics {
        Metrics { recording: false, ..Metrics::new() }
    }

    pub fn recording(&self) -> bool {
        self.recording
    }

    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Records one finished RPC; `code` is the gRPC status code as a number.
    pub fn record_rpc(&self, method: &str, code: &str, elapsed: Duration) {
        if !self.recording {
            return;
        }
        let method = self.methods.label(method);
        let code = if code.len() <= 2 && code.bytes().all(|b| b.is_ascii_digit()) { code } else { "other" };
        self.rpc_requests.get_or_create(&RpcLabels { method: method.clone(), code: code.to_string() }).inc();
        self.rpc_duration.get_or_create(&MethodLabel { method }).observe(elapsed.as_secs_f64());
    }

    /// Records how long the engine took to start a container of `role`.
    pub fn record_spawn(&self, role: &'static str, elapsed: Duration) {
        if !self.recording {
            return;
        }
        self.container_spawn.get_or_create(&RoleLabel { role }).observe(elapsed.as_secs_f64());
    }

    /// Counts a container of `role` the daemon restarted (`unhealthy`, `exited`).
    pub fn record_restart(&self, role: &'static str, reason: &'static str) {
        if !self.recording {
            return;
        }
        self.container_restarts.get_or_create(&RestartLabels { role, reason }).inc();
    }

    /// Counts a failed health check of a container of `role`.
    pub fn record_health_failure(&self, role: &'static str) {
        if !self.recording {
            return;
        }
        self.health_failures.get_or_create(&RoleLabel { role }).inc();
    }

    /// Records the tokens of one answer from `provider`'s `model`.
    pub fn record_llm_tokens(&self, provider: &str, model: &str, tokens: TokenCounts) {
        if !self.recording {
            return;
        }
        let (provider, model) = (self.providers.label(provider), self.models.label(model));
        for (kind, count) in [
            ("input", tokens.input),
            ("output", tokens.output),
            ("cache_read", tokens.cache_read),
            ("cache_write", tokens.cache_write),
        ] {
            self.llm_tokens
                .get_or_create(&TokenLabels { provider: provider.clone(), model: model.clone(), kind })
                .inc_by(count);
        }
    }

    /// Records how one StreamLLM request ended (`ok`, `error` or `cancelled`), how long it took
    /// and, when text came, how long until the first.
    pub fn record_llm_request(
        &self,
        provider: &str,
        model: &str,
        outcome: &'static str,
        elapsed: Duration,
        first_token: Option<Duration>,
    ) {
        if !self.recording {
            return;
        }
        let (provider, model) = (self.providers.label(provider), self.models.label(model));
        self.llm_requests.get_or_create(&ProviderOutcome { provider: provider.clone(), outcome }).inc();
        let labels = ProviderModel { provider, model };
        self.llm_duration.get_or_create(&labels).observe(elapsed.as_secs_f64());
        if let Some(first) = first_token {
            self.llm_first_token.get_or_create(&labels).observe(first.as_secs_f64());
        }
    }

    /// One more (or, with `false`, one fewer) StreamLLM request in flight.
    pub fn llm_in_flight(&self, started: bool) {
        if !self.recording {
            return;
        }
        if started {
            self.llm_in_flight.inc();
        } else {
            self.llm_in_flight.dec();
        }
    }

    /// Sets how many requests the gateway holds back for `provider`.
    pub fn set_llm_queue(&self, provider: &str, depth: u64) {
        if !self.recording {
            return;
        }
        let provider = self.providers.label(provider);
        self.llm_queue.get_or_create(&ProviderLabel { provider }).set(depth as i64);
    }

    /// Records a tool call through the daemon.
    pub fn record_tool(&self, tool: &str, ok: bool, elapsed: Duration) {
        if !self.recording {
            return;
        }
        let labels = ToolLabels { tool: self.tools.label(tool), outcome: if ok { "ok" } else { "error" } };
        self.tool_duration.get_or_create(&labels).observe(elapsed.as_secs_f64());
    }

    /// Records a delegation's round trip to `agent` (a role name).
    pub fn record_delegation(&self, agent: &'static str, ok: bool, elapsed: Duration) {
        if !self.recording {
            return;
        }
        let labels = AgentLabels { agent, outcome: if ok { "ok" } else { "error" } };
        self.delegation_duration.get_or_create(&labels).observe(elapsed.as_secs_f64());
    }

    /// Counts a user message received through `channel` (`cli`, `tui`, `web`, …).
    pub fn record_message(&self, channel: &str) {
        if !self.recording {
            return;
        }
        let channel = self.channels.label(if channel.is_empty() { "unknown" } else { channel });
        self.messages.get_or_create(&ChannelLabel { channel }).inc();
    }

    /// Counts a budget outcome for a `user` or `group` context: `refused` or `warned`.
    pub fn record_budget(&self, kind: &'static str, outcome: &'static str) {
        if !self.recording {
            return;
        }
        self.budget_events.get_or_create(&KindOutcome { context_kind: kind, outcome }).inc();
    }

    /// Adds what one answer cost a `user` or `group` context.
    pub fn record_budget_cost(&self, kind: &'static str, micros: u64) {
        if !self.recording {
            return;
        }
        self.budget_spent.get_or_create(&KindLabel { context_kind: kind }).inc_by(micros as f64 / 1e6);
    }

    /// Counts a scheduled run's end (or a skipped slot) of a task of `kind`.
    pub fn record_task_run(&self, kind: &'static str, outcome: &'static str) {
        if !self.recording {
            return;
        }
        self.task_runs.get_or_create(&TaskLabels { r#type: kind, outcome }).inc();
    }

    /// Counts an audit record of `kind`.
    pub fn record_audit(&self, kind: &'static str) {
        if !self.recording {
            return;
        }
        self.audit_events.get_or_create(&AuditLabel { kind }).inc();
    }

    /// An egress audit record, counted by its outcome and (bounded) particulars: never by host.
    pub fn record_egress(&self, outcome: &str, detail: &serde_json::Map<String, serde_json::Value>) {
        if !self.recording {
            return;
        }
        let text = |key: &str| detail.get(key).and_then(serde_json::Value::as_str).unwrap_or_default();
        // A request refused inside a connection (a credential's placeholder) is not a connection.
        if detail.contains_key("credential") {
            return;
        }
        if outcome == "answered" {
            let decision = match text("decision") {
                "once" => "once",
                "session" => "session",
                "always" => "always",
                "deny" => "deny",
                _ => "other",
            };
            self.egress_approvals.get_or_create(&DecisionLabel { decision }).inc();
            return;
        }
        let outcome = match outcome {
            "allowed" => "allowed",
            "refused" => "refused",
            "failed" => "failed",
            _ => return,
        };
        let allowed_by = text("allowed_by");
        let by = if outcome != "allowed" {
            "none"
        } else if [", once", ", session", ", always"].iter().any(|answer| allowed_by.ends_with(answer)) {
            "approval"
        } else if allowed_by.contains("egress.yaml") {
            "rule"
        } else {
            "list"
        };
        self.egress_connections.get_or_create(&EgressLabels { outcome, by }).inc();
        for (direction, key) in [("in", "bytes_in"), ("out", "bytes_out")] {
            if let Some(bytes) = detail.get(key).and_then(serde_json::Value::as_u64) {
                self.egress_bytes.get_or_create(&DirectionLabel { direction }).inc_by(bytes);
            }
        }
    }

    pub fn set_gateway_up(&self, up: bool) {
        if !self.recording {
            return;
        }
        self.gateway_up.set(i64::from(up));
    }

    /// The data dir's disk as just read.
    pub fn set_disk(&self, usage: crate::base::disk::Usage) {
        if !self.recording {
            return;
        }
        self.disk_used.set(f64::from(usage.percent()) / 100.0);
        self.disk_available.set(i64::try_from(usage.available).unwrap_or(i64::MAX));
    }

    pub fn count_gateway_restart(&self) {
        if !self.recording {
            return;
        }
        self.gateway_restarts.inc();
    }

    /// Replaces the sampled figures.
    pub fn set_sample(&self, sample: &Sample) {
        if !self.recording {
            return;
        }
        self.containers.clear();
        self.container_cpu.clear();
        self.container_memory.clear();
        for &(role, count, cpu, memory) in &sample.containers {
            self.containers.get_or_create(&RoleLabel { role }).set(count as i64);
            self.container_cpu.get_or_create(&RoleLabel { role }).set(cpu);
            self.container_memory.get_or_create(&RoleLabel { role }).set(memory as i64);
        }
        for &(status, count) in &sample.sessions {
            self.sessions.get_or_create(&StatusLabel { status }).set(count as i64);
        }
        for &(kind, bytes) in &sample.memory_bytes {
            self.memory_bytes.get_or_create(&KindLabel { context_kind: kind }).set(bytes as i64);
        }
    }

    /// The exposition text (OpenMetrics 1.0).
    pub fn render(&self) -> String {
        self.uptime.set(self.uptime().as_secs_f64());
        let mut out = String::with_capacity(16 * 1024);
        if let Err(error) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(%error, "cannot render the metrics");
        }
        out
    }

    /// Every sample of [`Metrics::render`] as one JSON object (`name{labels}` → value), for the
    /// log of deployments without Prometheus (`metrics.log: true`). Buckets are left out.
    pub fn snapshot(&self) -> serde_json::Map<String, serde_json::Value> {
        let text = self.render();
        let mut figures = serde_json::Map::new();
        for line in text.lines().filter(|line| !line.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else { continue };
            if series.contains("_bucket{") || series.ends_with("_created") {
                continue;
            }
            let value = value.parse::<f64>().ok().and_then(serde_json::Number::from_f64);
            if let Some(value) = value {
                figures.insert(series.to_string(), serde_json::Value::Number(value));
            }
        }
        figures
    }
}

/// Writes [`Metrics::snapshot`] to the log every `every` until `cancel`.
pub async fn log_every(metrics: Arc<Metrics>, every: Duration, cancel: CancellationToken) {
    let first = tokio::time::Instant::now() + every;
    crate::base::lifetime::every(first, every, &cancel, || {
        let figures = serde_json::Value::Object(metrics.snapshot());
        tracing::info!(metrics = %figures, "metrics");
        std::future::ready(())
    })
    .await;
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
                        .header("content-type", CONTENT_TYPE)
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

/// `GET /metrics` served ([`serve`]) as a subsystem.
#[derive(Debug)]
pub struct Endpoint {
    pub listener: std::sync::Mutex<Option<TcpListener>>,
    pub metrics: Arc<Metrics>,
}

impl Subsystem for Endpoint {
    fn name(&self) -> &'static str {
        "metrics endpoint"
    }

    fn run_until(self: Arc<Self>, shutdown: CancellationToken) -> Work {
        let listener = self.listener.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        Box::pin(async move {
            if let Some(listener) = listener {
                serve(listener, self.metrics.clone(), shutdown).await;
            }
        })
    }
}

/// The figures written to the log every `every` ([`log_every`]) as a subsystem.
#[derive(Debug)]
pub struct Log {
    pub metrics: Arc<Metrics>,
    pub every: Duration,
}

impl Subsystem for Log {
    fn name(&self) -> &'static str {
        "metrics log"
    }

    fn run_until(self: Arc<Self>, shutdown: CancellationToken) -> Work {
        Box::pin(log_every(self.metrics.clone(), self.every, shutdown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every family the daemon serves, with one sample each: (name, TYPE) of the TYPE lines.
    fn every_family() -> Vec<(String, String)> {
        let metrics = Metrics::default();
        let second = Duration::from_secs(1);
        metrics.record_rpc("GetStatus", "0", second);
        metrics.record_spawn("assistant", second);
        metrics.record_restart("assistant", "unhealthy");
        metrics.record_health_failure("assistant");
        metrics.record_llm_tokens("anthropic", "m", TokenCounts { input: 1, ..TokenCounts::default() });
        metrics.record_llm_request("anthropic", "m", "ok", second, Some(second));
        metrics.llm_in_flight(true);
        metrics.set_llm_queue("anthropic", 0);
        metrics.record_tool("exec", true, second);
        metrics.record_delegation("coder", true, second);
        metrics.record_message("cli");
        metrics.record_budget("user", "refused");
        metrics.record_budget_cost("user", 1);
        metrics.record_task_run("cron", "ok");
        metrics.record_audit("exec");
        metrics.set_gateway_up(true);
        metrics.count_gateway_restart();
        let sample = Sample {
            containers: vec![("assistant", 1, 0.5, 1 << 20)],
            sessions: [("active", 1), ("idle", 0), ("archived", 0)],
            memory_bytes: vec![("user", 10)],
        };
        metrics.set_sample(&sample);
        let text = metrics.render();
        let declared = text.lines().filter_map(|line| line.strip_prefix("# TYPE "));
        declared.filter_map(|line| line.split_once(' ')).map(|(name, kind)| (name.into(), kind.into())).collect()
    }

    #[test]
    fn the_grafana_dashboard_asks_only_for_served_figures() {
        let families = every_family();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/grafana-dashboard.json");
        let dashboard: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("config/grafana-dashboard.json")).expect("JSON");
        let mut asked = std::collections::BTreeSet::new();
        for panel in dashboard["panels"].as_array().expect("panels").iter().filter(|p| p["type"] != "row") {
            let targets = panel["targets"].as_array().filter(|targets| !targets.is_empty());
            for target in targets.unwrap_or_else(|| panic!("a panel without queries: {panel}")) {
                let expr = target["expr"].as_str().expect("expr");
                let words = expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
                for name in words.filter(|word| word.starts_with("baaaht_")) {
                    let family = families.iter().find(|(family, kind)| {
                        let suffixes: &[&str] = match kind.as_str() {
                            "counter" => &["_total"],
                            "histogram" => &["_bucket", "_count", "_sum"],
                            "info" => &["_info"],
                            _ => &[""],
                        };
                        suffixes.iter().any(|suffix| name.strip_prefix(family.as_str()) == Some(suffix))
                    });
                    let (family, _) = family.unwrap_or_else(|| panic!("`{name}` in `{expr}` is not served"));
                    asked.insert(family.clone());
                }
            }
        }
        // And every figure has a panel.
        let missing: Vec<&String> = families.iter().map(|(family, _)| family).filter(|f| !asked.contains(*f)).collect();
        assert!(missing.is_empty(), "families with no panel: {missing:?}");
    }

    #[test]
    fn renders_counts_and_buckets() {
        let metrics = Metrics::default();
        metrics.record_rpc("GetStatus", "0", Duration::from_micros(300));
        metrics.record_rpc("GetStatus", "0", Duration::from_millis(20));
        metrics.record_rpc("GetStatus", "16", Duration::from_micros(90));
        let text = metrics.render();
        assert!(text.contains("baaaht_rpc_requests_total{method=\"GetStatus\",code=\"0\"} 2"), "{text}");
        assert!(text.contains("baaaht_rpc_requests_total{method=\"GetStatus\",code=\"16\"} 1"), "{text}");
        assert!(text.contains("baaaht_rpc_duration_seconds_bucket{le=\"0.0005\",method=\"GetStatus\"} 2"), "{text}");
        assert!(text.contains("baaaht_rpc_duration_seconds_count{method=\"GetStatus\"} 3"), "{text}");
        assert!(text.contains("baaaht_uptime_seconds "), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn open_labels_are_bounded() {
        let metrics = Metrics::default();
        for n in 0..OPEN_LABEL_LIMIT + 10 {
            metrics.record_message(&format!("channel-{n}"));
        }
        let text = metrics.render();
        let series = text.lines().filter(|line| line.starts_with("baaaht_messages_total{")).count();
        assert_eq!(series, OPEN_LABEL_LIMIT + 1, "{text}");
        assert!(text.contains("baaaht_messages_total{channel=\"other\"} 10"), "{text}");
    }

    #[test]
    fn the_snapshot_holds_every_sample_but_buckets() {
        let metrics = Metrics::default();
        metrics.record_tool("exec", true, Duration::from_millis(3));
        metrics.set_sample(&Sample {
            containers: vec![("assistant", 2, 0.5, 1 << 20)],
            sessions: [("active", 3), ("idle", 1), ("archived", 0)],
            memory_bytes: vec![("user", 2048)],
        });
        let figures = metrics.snapshot();
        assert_eq!(figures["baaaht_tool_duration_seconds_count{tool=\"exec\",outcome=\"ok\"}"], 1.0);
        assert_eq!(figures["baaaht_container_memory_bytes{role=\"assistant\"}"], 1048576.0);
        assert_eq!(figures["baaaht_sessions{status=\"active\"}"], 3.0);
        assert!(figures.keys().all(|key| !key.contains("_bucket")), "{figures:?}");
    }
}
