//! Logging: JSON lines when stderr is not a terminal (journald, files, CI), human-readable
//! lines on a terminal; levels from `system.log_level` and `system.log_components`, or from
//! `RUST_LOG` when it is set. Every line passes the redactor ([`crate::guard::redact::log_line`])
//! before it is written.
//!
//! Tracing: with `otel.endpoint` set, the daemon's info spans (each RPC, each turn, each
//! delegation, LLM request and tool call) are exported over OTLP/gRPC. The W3C `traceparent`
//! carries a turn's context to its agents and back on every call they make for it, so a turn
//! is one trace: client's request → turn → agent's calls → model call → tool call. The model
//! and tool calls are the daemon's spans around its calls to the LLM gateway and the tool
//! runner; those processes export nothing themselves (they have no route to a collector).

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::base::config::{ConfigError, LoadedConfig, OtelConfig, SystemConfig};

/// The wings `system.log_components` may name, each all of its rooms.
const WINGS: &[&str] =
    &["server", "ops", "drive", "model", "work", "people", "net", "store", "sandbox", "guard", "base"];

/// The rooms `system.log_components` may name besides the wings, by the names people know them
/// by (ARCHITECTURE.md's map), each with the module its spans and events come from.
const ROOMS: &[(&str, &str)] = &[
    ("setup", "ops::setup"),
    ("defaults", "ops::defaults"),
    ("selftest", "ops::selftest"),
    ("sampler", "ops::sampler"),
    ("orchestrator", "drive::orchestrator"),
    ("scheduler", "drive::scheduler"),
    ("llm", "model::llm"),
    ("budgets", "model::budgets"),
    ("usage", "model::usage"),
    ("agents", "work::agents"),
    ("peers", "work::peers"),
    ("tools", "work::tools"),
    ("mcp", "work::mcp"),
    ("skills", "work::skills"),
    ("ipc", "work::ipc"),
    ("health", "work::health"),
    ("gateways", "work::gateways"),
    ("identities", "people::identities"),
    ("groups", "people::groups"),
    ("oidc", "people::oidc"),
    ("admissions", "people::admissions"),
    ("egress", "net::egress"),
    ("taint", "net::taint"),
    ("sessions", "store::sessions"),
    ("memory", "store::memory"),
    ("recall", "store::recall"),
    ("uploads", "store::uploads"),
    ("sent", "store::sent"),
    ("profile", "store::profile"),
    ("events", "store::events"),
    ("inbox", "store::inbox"),
    ("container", "sandbox::container"),
    ("policy", "sandbox::policy"),
    ("workspace", "sandbox::workspace"),
    ("sockets", "sandbox::sockets"),
    ("shared_dirs", "sandbox::shared_dirs"),
    ("redact", "guard::redact"),
    ("secrets", "guard::secrets"),
    ("audit", "guard::audit"),
    ("limits", "guard::limits"),
    ("telemetry", "guard::telemetry"),
    ("config", "base::config"),
    ("auth", "base::auth"),
    ("datadir", "base::datadir"),
    ("state", "base::state"),
    ("metrics", "base::metrics"),
    ("systemd", "base::systemd"),
    ("lifetime", "base::lifetime"),
];

/// The tracing targets of component `name`: a wing, a room, or a module below one
/// (`container::docker`, `net::egress::proxy`), by its path or by its room's name; `cli`. A room
/// is also followed under its name of old (`baaaht_daemon::egress::audit`, the audit targets).
fn component_targets(name: &str) -> Option<Vec<String>> {
    if name == "cli" {
        return Some(vec!["baaaht_daemon::cli".into()]);
    }
    let (first, rest) = name.split_once("::").map_or((name, None), |(first, rest)| (first, Some(rest)));
    let valid =
        |part: &str| !part.is_empty() && part.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !rest.unwrap_or("x").split("::").all(valid) {
        return None;
    }
    let below = rest.map(|rest| format!("::{rest}")).unwrap_or_default();
    if WINGS.contains(&first) {
        return Some(vec![format!("baaaht_daemon::{first}{below}")]);
    }
    let (room, path) = ROOMS.iter().find(|(room, _)| *room == first)?;
    Some(vec![format!("baaaht_daemon::{path}{below}"), format!("baaaht_daemon::{room}{below}")])
}

/// `system.log_components` in a loaded configuration names only parts of the daemon (a level
/// for a name nothing logs under would be accepted and ignored). Whatever loads the
/// configuration to use it runs this next to `config::load`.
pub fn check_config(loaded: &LoadedConfig) -> Result<(), ConfigError> {
    for name in loaded.config.system.log_components.keys() {
        if component_targets(name).is_none() {
            let known: Vec<&str> = WINGS.iter().copied().chain(ROOMS.iter().map(|(room, _)| *room)).collect();
            return Err(loaded.invalid_setting(
                &["system", "log_components"],
                format!(
                    "system.log_components.{name}: no part of the daemon is called that; name one of {}, or a \
                     module below one (container::docker)",
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// The filter directives for `system`: the daemon at `log_level`, each component at its own.
pub fn filter_directives(system: &SystemConfig) -> String {
    let mut directives = vec![
        "warn".to_string(),
        format!("baaaht_daemon={}", system.log_level),
        format!("baaahtd={}", system.log_level),
    ];
    for (component, level) in &system.log_components {
        for target in component_targets(component).unwrap_or_default() {
            directives.push(format!("{target}={level}"));
        }
    }
    directives.join(",")
}

/// What must live as long as the daemon: the span exporter, flushed when dropped.
#[derive(Debug, Default)]
pub struct Tracing {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Tracing {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            if let Err(error) = provider.shutdown() {
                eprintln!("baaahtd: the last spans could not be exported: {error}");
            }
        }
    }
}

/// Standard error, each line cleaned by the redactor first (the formatter writes an event's
/// line in one `write`).
struct Redacted(std::io::Stderr);

impl std::io::Write for Redacted {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                let clean = crate::guard::redact::log_line(text);
                self.0.write_all(clean.as_bytes())?;
            }
            Err(_) => self.0.write_all(bytes)?,
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Installs the global subscriber, and the OTLP exporter when `otel.endpoint` is set. Call
/// once, from `main`; keep what it returns until the daemon ends.
pub fn init(system: &SystemConfig, otel: &OtelConfig) -> Tracing {
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.is_empty() => EnvFilter::new(directives),
        _ => EnvFilter::new(filter_directives(system)),
    };
    let lines = tracing_subscriber::fmt::layer().with_writer(|| Redacted(std::io::stderr()));
    let lines = if std::io::stderr().is_terminal() {
        lines.with_target(false).with_filter(filter).boxed()
    } else {
        lines.json().with_current_span(true).with_span_list(false).flatten_event(true).with_filter(filter).boxed()
    };
    let (provider, failed) = match otel.endpoint.as_ref().map(|endpoint| exporter(&endpoint.0, &otel.service_name)) {
        Some(Ok(provider)) => (Some(provider), None),
        Some(Err(error)) => (None, Some(error)),
        None => (None, None),
    };
    let spans = provider.as_ref().map(|provider| {
        let spans = Targets::new().with_target("baaaht_daemon", tracing::Level::INFO);
        tracing_opentelemetry::layer().with_tracer(provider.tracer("baaahtd")).with_filter(spans)
    });
    tracing_subscriber::registry().with(lines).with(spans).init();
    match (&failed, &otel.endpoint) {
        (Some(error), Some(endpoint)) => {
            tracing::error!(endpoint = %endpoint.0, %error, "cannot export traces; the daemon runs without")
        }
        (None, Some(endpoint)) => tracing::info!(endpoint = %endpoint.0, "exporting traces over OTLP"),
        _ => {}
    }
    Tracing { provider }
}

/// Why spans cannot be exported (logged as it is, once, when the daemon starts).
#[derive(Debug, thiserror::Error)]
enum ExporterError {
    #[error(transparent)]
    Runtime(#[from] std::io::Error),
    #[error(transparent)]
    Build(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// A tracer provider exporting in batches to the collector at `endpoint`.
fn exporter(endpoint: &str, service: &str) -> Result<SdkTracerProvider, ExporterError> {
    // The SDK's batch thread runs each export outside any tokio runtime; tonic needs one.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("baaahtd-otel")
        .enable_all()
        .build()?;
    let inner = {
        let _entered = runtime.enter();
        opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(5))
            .build()?
    };
    let resource = opentelemetry_sdk::Resource::builder_empty().with_service_name(service.to_string()).build();
    let exporter = OnOwnRuntime { inner, runtime, failures: AtomicU64::new(0), last_said: Mutex::new(None) };
    Ok(SdkTracerProvider::builder()
        // A caller's `traceparent` places its calls in a trace; it cannot turn their spans off.
        .with_sampler(opentelemetry_sdk::trace::Sampler::AlwaysOn)
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// The OTLP exporter with the runtime its exports run on. Only the SDK's batch thread calls
/// `export` (`with_batch_exporter`): a plain thread, outside any runtime, where `block_on` is
/// allowed. A simple (per-span) exporter would call it on a runtime's thread and panic.
#[derive(Debug)]
struct OnOwnRuntime {
    inner: opentelemetry_otlp::SpanExporter,
    runtime: tokio::runtime::Runtime,
    failures: AtomicU64,
    last_said: Mutex<Option<Instant>>,
}

impl opentelemetry_sdk::trace::SpanExporter for OnOwnRuntime {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = opentelemetry_sdk::error::OTelSdkResult> + Send {
        let spans = batch.len();
        // The batch thread waits for each export anyway: run it to the end here.
        let result = self.runtime.block_on(self.inner.export(batch));
        if let Err(error) = &result {
            // Said at once, then at most once a minute: a collector that is down must not
            // flood the log. (This thread has no current span: the event is not exported.)
            let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
            let mut last = self.last_said.lock().unwrap_or_else(PoisonError::into_inner);
            if last.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                *last = Some(Instant::now());
                tracing::warn!(%error, spans, failures, "cannot export traces to the OTLP collector; those spans are lost");
            }
        }
        std::future::ready(result)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The W3C `traceparent` of the current span, for a hop to carry; empty when nothing is
/// exported.
pub fn traceparent() -> String {
    let context = tracing::Span::current().context();
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove("traceparent").unwrap_or_default()
}

/// Makes `span` a child of the remote span a caller named in its `traceparent` header, if any.
pub fn adopt_parent(span: &tracing::Span, headers: &http::HeaderMap) {
    let Some(parent) = headers.get(baaaht_proto::TRACEPARENT_HEADER).and_then(|value| value.to_str().ok()) else {
        return;
    };
    let carrier = HashMap::from([("traceparent".to_string(), parent.to_string())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    // silent-ok: with no exporter installed there is no span context to attach to.
    let _ = span.set_parent(context);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::config::LogLevel;

    #[test]
    fn directives_per_component() {
        let mut system = SystemConfig { log_level: LogLevel::Debug, ..SystemConfig::default() };
        system.log_components.insert("container".into(), LogLevel::Trace);
        let directives = filter_directives(&system);
        assert_eq!(
            directives,
            "warn,baaaht_daemon=debug,baaahtd=debug,baaaht_daemon::sandbox::container=trace,baaaht_daemon::container=trace"
        );
        EnvFilter::try_new(directives).expect("valid filter");
    }

    #[test]
    fn every_component_is_a_room_of_the_daemon_and_an_unknown_one_is_refused() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        for (room, path) in ROOMS {
            let at = src.join(path.replace("::", "/"));
            assert!(at.is_dir() || at.with_extension("rs").is_file(), "{room}: {} is not there", at.display());
        }
        for wing in WINGS {
            assert!(src.join(wing).is_dir(), "{wing}");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("config.yaml"),
            "system:\n  log_components: {egress: debug, net: info, container::docker: trace, kernel: trace}\n",
        )
        .expect("write");
        let paths = crate::base::config::ConfigPaths {
            config_file: None,
            config_dir: dir.path().to_path_buf(),
            data_dir: dir.path().join("data"),
        };
        let loaded = crate::base::config::load(&paths, std::iter::empty()).expect("loads");
        let error = check_config(&loaded).expect_err("kernel is no part of the daemon").to_string();
        assert!(
            error.contains("system.log_components.kernel: no part of the daemon is called that")
                && error.contains("config.yaml:2:3"),
            "{error}"
        );
        let directives = filter_directives(&loaded.config.system);
        assert!(
            directives.contains("baaaht_daemon::net::egress=debug") && directives.contains("baaaht_daemon::net=info"),
            "{directives}"
        );
        assert!(directives.contains("baaaht_daemon::sandbox::container::docker=trace"), "{directives}");
        assert!(component_targets("container::../x").is_none() && component_targets("kernel::x").is_none());
    }
}
