//! The LLM gateway, from the daemon's side (spec §7, DESIGN.md §1): resolve `providers.yaml`
//! with the secrets store into the gateway's configuration, run `baaaht-llm-gateway` (in a
//! container with no network, or as a host child process), configure it over its socket, check
//! its health and restart it after `failure_threshold` failed checks. Requests that arrive
//! while it (re)starts wait up to `llm.queue_timeout`. A gateway in its container reaches a
//! provider on the host's loopback through the daemon's relay ([`relay`]) and any other only
//! through a tunnel to that provider's host ([`egress`]).

pub mod call;
pub mod choices;
mod clouds;
pub use choices::ModelChoice;
pub mod egress;
pub mod relay;
pub mod small;

use std::collections::HashMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baaaht_proto::client::Backoff;
use baaaht_proto::v1;
use baaaht_proto::v1::llm_gateway_client::LlmGatewayClient;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use zeroize::{Zeroize, Zeroizing};

use crate::base::auth::{Context, Role};
use crate::base::config::{GatewayMode, HealthCheckConfig, LoadedConfig};
use crate::base::lifetime::{Subsystem, Work};
use crate::base::metrics::{Metrics, TokenCounts};
use crate::guard::secrets::{self, Secrets};
use crate::model::usage::UsageBook;
use crate::sandbox::container::instance::Instance;
use crate::sandbox::container::manager::{ContainerManager, RunRequest, BINARIES_MOUNT, GATEWAY_BINARY};
use crate::sandbox::container::{Engine, MountSpec};

/// The gateway's socket, in `data/llm/` (mounted at [`GATEWAY_MOUNT`] in container mode).
pub const GATEWAY_SOCKET: &str = "gateway.sock";
const GATEWAY_MOUNT: &str = "/run/baaaht-llm";
/// How long a started gateway may take to answer its first call.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The gateway's configuration, keys included (wiped from memory when dropped), and the token
/// endpoints its cloud accounts sign in at.
pub struct GatewaySettings(v1::GatewayConfig, Vec<String>);

impl Drop for GatewaySettings {
    fn drop(&mut self) {
        for provider in &mut self.0.providers {
            provider.api_key.zeroize();
            if let Some(account) = &mut provider.cloud {
                account.aws_secret_access_key.zeroize();
                account.aws_session_token.zeroize();
                account.service_account_json.zeroize();
                account.entra_client_secret.zeroize();
            }
        }
    }
}

impl std::fmt::Debug for GatewaySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.0.providers.iter().map(|provider| provider.name.as_str()).collect();
        f.debug_struct("GatewaySettings").field("providers", &names).finish_non_exhaustive()
    }
}

impl GatewaySettings {
    pub fn config(&self) -> &v1::GatewayConfig {
        &self.0
    }

    /// Every provider's secret as it was resolved (from the store, the environment, the file
    /// itself, an AWS credentials file or a service account's key file), named for the
    /// redactor: a provider's error that repeats one, in any form, reaches no one.
    pub fn secret_values(&self) -> Vec<(String, Zeroizing<String>)> {
        let mut values = vec![];
        for provider in &self.0.providers {
            let mut add = |what: &str, value: &str| {
                if !value.is_empty() {
                    values.push((format!("providers.{}.{what}", provider.name), Zeroizing::new(value.to_string())));
                }
            };
            add("api_key", &provider.api_key);
            if let Some(account) = &provider.cloud {
                add("secret_access_key", &account.aws_secret_access_key);
                add("session_token", &account.aws_session_token);
                add("entra.client_secret", &account.entra_client_secret);
                // The key's base64, its lines joined: any run of it in a line is found.
                let key: serde_json::Value = serde_json::from_str(&account.service_account_json).unwrap_or_default();
                let body: Zeroizing<String> = Zeroizing::new(
                    key["private_key"]
                        .as_str()
                        .unwrap_or_default()
                        .lines()
                        .filter(|line| !line.starts_with("-----"))
                        .map(str::trim)
                        .collect(),
                );
                add("service_account", &body);
            }
        }
        values
    }

    /// Providers that can take requests, and why the others cannot.
    pub fn usable(&self) -> (Vec<&str>, Vec<String>) {
        let mut usable = vec![];
        let mut problems = vec![];
        for provider in &self.0.providers {
            if provider.unusable.is_empty() {
                usable.push(provider.name.as_str());
            } else {
                problems.push(format!("{}: {}", provider.name, provider.unusable));
            }
        }
        (usable, problems)
    }
}

/// Resolves every configured provider: its wire and address (preset, or as written), its key
/// (`${NAME}` from the store, then the environment), and the reason it cannot be used if so.
pub fn gateway_settings(
    loaded: &LoadedConfig,
    secrets: Option<&Secrets>,
    env: impl Fn(&str) -> Option<String>,
) -> GatewaySettings {
    let providers_config = &loaded.providers;
    let mut providers = vec![];
    let mut token_urls = vec![];
    let mut default_provider = String::new();
    for (name, entry) in providers_config.providers.configured() {
        let preset = baaaht_llm::presets::find(name);
        let mut unusable = String::new();
        let wire = match (preset, entry.openai_compatible) {
            (_, Some(true)) => baaaht_llm::provider::Wire::OpenAi,
            (Some(preset), _) => preset.wire,
            (None, Some(false)) => {
                unusable =
                    "only OpenAI-compatible custom providers are supported: remove `openai_compatible: false`".into();
                baaaht_llm::provider::Wire::OpenAi
            }
            (None, None) => baaaht_llm::provider::Wire::OpenAi,
        };
        let mut api_base = entry
            .api_base
            .clone()
            .or_else(|| preset.map(|p| p.api_base.to_string()).filter(|base| !base.is_empty()))
            .unwrap_or_default();
        // A preset's server answers under /v1: `http://localhost:11434` is written as often.
        if let Some(preset) =
            preset.filter(|p| p.api_base.ends_with("/v1") && wire == baaaht_llm::provider::Wire::OpenAi)
        {
            if entry.api_base.is_some() && api_base.matches('/').count() == 2 {
                api_base = format!("{}/v1", api_base.trim_end_matches('/'));
                tracing::debug!(provider = name, preset = preset.name, "api_base given without /v1: added");
            }
        }
        let resolve = |text: &str| -> Result<String, String> {
            secrets::resolve_references(text, secrets, &env).map(|value| value.to_string()).map_err(|error| match error
            {
                // The built-in providers are a guess, not the person's choice: no key is advised.
                secrets::SecretsError::Unresolved { .. }
                    if loaded.sources.providers == crate::base::config::Source::BuiltIn =>
                {
                    "no model provider is set up yet: run `baaahtd setup` (it finds a model on this machine \
                     or takes a key), then restart baaahtd"
                        .to_string()
                }
                secrets::SecretsError::Unresolved { name: variable } => format!(
                    "${{{variable}}} is neither in the secrets store nor in the environment: \
                     run `baaahtd secrets set {variable}`"
                ),
                error => error.to_string(),
            })
        };
        let mut api_key = String::new();
        if let Some(Err(problem)) = entry.api_key.as_deref().map(|text| resolve(text).map(|key| api_key = key)) {
            unusable = match problem.strip_prefix('$') {
                Some(_) => format!("its key {problem}"),
                None => problem,
            };
        }
        if unusable.is_empty() && api_key.is_empty() && preset.is_some_and(|p| p.needs_key) {
            unusable = format!("{name} needs an api_key in providers.yaml");
        }
        let mut cloud = None;
        if unusable.is_empty() {
            match clouds::account(name, wire, &entry, &resolve, &env) {
                Ok((account, base, token_url)) => {
                    if let Some(base) = base {
                        api_base = base;
                    }
                    token_urls.extend(token_url);
                    cloud = Some(v1::CloudAccount {
                        region: account.region.clone(),
                        project: account.project.clone(),
                        api_version: account.api_version.clone(),
                        aws_access_key_id: account.aws_access_key_id.clone(),
                        aws_secret_access_key: account.aws_secret_access_key.to_string(),
                        aws_session_token: account.aws_session_token.to_string(),
                        service_account_json: account.service_account_json.to_string(),
                        entra_authority: account.entra_authority.clone(),
                        entra_tenant: account.entra_tenant.clone(),
                        entra_client_id: account.entra_client_id.clone(),
                        entra_client_secret: account.entra_client_secret.to_string(),
                    });
                }
                Err(problem) => unusable = problem,
            }
        }
        if entry.default && default_provider.is_empty() {
            default_provider = name.to_string();
        }
        providers.push(v1::GatewayProvider {
            name: name.to_string(),
            wire: wire.as_str().into(),
            api_base,
            api_key,
            timeout_seconds: entry.timeout.map_or(0, |seconds| seconds.min(u64::from(u32::MAX)) as u32),
            rate_limit: entry.rate_limit.unwrap_or(0),
            max_output_tokens: entry.max_output_tokens.or(preset.and_then(|p| p.max_output)).unwrap_or(0),
            unusable,
            relay_socket: String::new(),
            context_window: entry.context_window.unwrap_or(0),
            cloud,
        });
    }
    if default_provider.is_empty() {
        default_provider = providers.first().map(|p| p.name.clone()).unwrap_or_default();
    }
    let agents = &loaded.config.agents;
    let mut models: Vec<String> = agents.roles().iter().map(|(role, _)| agents.settings(*role).model.0).collect();
    models.sort();
    models.dedup();
    GatewaySettings(
        v1::GatewayConfig {
            providers,
            fallback_chains: providers_config
                .fallback_chains
                .iter()
                .map(|(name, chain)| (name.clone(), v1::FallbackChain { providers: chain.clone() }))
                .collect(),
            default_provider,
            retry_attempts: loaded.config.llm.retry_attempts,
            models,
            aliases: aliases(providers_config),
        },
        token_urls,
    )
}

/// providers.yaml's aliases, each with its models cheapest first by the price table (those of
/// unknown price last, in the order written).
fn aliases(providers: &crate::base::config::ProvidersConfig) -> HashMap<String, v1::ModelAlias> {
    let cost = |model: &str| {
        crate::model::budgets::price_in(&providers.prices, model)
            .map_or(f64::INFINITY, |price| price.input + price.output)
    };
    providers
        .models
        .iter()
        .map(|(alias, models)| {
            let mut ordered = models.clone();
            ordered.sort_by(|a, b| cost(a).total_cmp(&cost(b)));
            (alias.clone(), v1::ModelAlias { models: ordered })
        })
        .collect()
}

/// Where the gateway stands.
#[derive(Debug, Clone)]
enum State {
    /// Not started, and why (e.g. no provider has a key).
    Off(String),
    Starting,
    /// Serving; `generation` counts restarts so a caller can tell a new gateway from the old.
    Ready {
        client: LlmGatewayClient<Channel>,
        generation: u64,
    },
    Down(String),
}

/// The gateway's state as `baaaht status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewaySummary {
    pub mode: GatewayMode,
    /// "ready", "starting", "down" or "off".
    pub state: &'static str,
    pub message: String,
    pub providers: Vec<String>,
}

/// Why a request cannot reach the gateway, as a sentence.
///
/// Each message carries its cause's text, so none is a `source` (a chain would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("no LLM provider can be used: {0}")]
    Off(String),
    #[error("the LLM gateway is not available after waiting {waited} s: {reason}")]
    Unavailable { waited: u64, reason: String },
    #[error("no model can be used: {0}")]
    NoModel(String),
    #[error("the LLM gateway is starting: try again in a moment")]
    Starting,
    #[error("the LLM gateway is down: {0}")]
    Down(String),
    #[error("the LLM gateway cannot say how its providers are: {0}")]
    Health(String),
    #[error("the LLM gateway did not answer within 2 s: try again in a moment")]
    HealthTimeout,
    #[error("the gateway did not create {} within {} s", .0.display(), START_TIMEOUT.as_secs())]
    NoSocket(PathBuf),
    /// The message holds the cause too: it becomes the gateway's state, told as it is.
    #[error("cannot connect to the gateway: {error}")]
    Connect { error: baaaht_proto::client::ConnectError },
    #[error("the gateway refused its configuration: {0}")]
    Configure(String),
    #[error("the gateway did not answer within {} s", START_TIMEOUT.as_secs())]
    ConfigureTimeout,
}

/// The tokens a model call used, and whether they were counted from the text (the provider
/// reported none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Used {
    pub tokens: TokenCounts,
    pub estimated: bool,
}

/// A gateway started and configured: what runs it, its client, and the ways out it is given
/// for as long as it is watched (its relays, and its tunnels until the guard is dropped).
struct Started {
    instance: Instance,
    client: LlmGatewayClient<Channel>,
    channel: Channel,
    relays: Vec<relay::Relay>,
    _tunnels: Option<tokio_util::sync::DropGuard>,
}

/// The daemon's handle on the LLM gateway.
pub struct LlmGateway {
    settings: GatewaySettings,
    mode: GatewayMode,
    state: watch::Sender<State>,
    folder: PathBuf,
    binary: PathBuf,
    health: HealthCheckConfig,
    queue_timeout: Duration,
    pub metrics: Arc<Metrics>,
    pub usage: UsageBook,
    notifier: std::sync::OnceLock<Arc<crate::work::health::Notifier>>,
    /// The tunnels a gateway in its container reaches its providers by.
    way_out: std::sync::OnceLock<egress::WayOut>,
    /// Provider → the context window the gateway gave its models (0: unknown), and when it
    /// was asked.
    windows: tokio::sync::Mutex<(std::collections::HashMap<String, u32>, Option<Instant>)>,
}

/// How long the context windows the gateway gave are kept before it is asked again.
const WINDOWS_KEPT: Duration = Duration::from_secs(60);

impl std::fmt::Debug for LlmGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmGateway").field("mode", &self.mode).field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl LlmGateway {
    pub fn new(
        loaded: &LoadedConfig,
        settings: GatewaySettings,
        data_dir: &crate::base::datadir::DataDir,
        binaries_dir: &Path,
        metrics: Arc<Metrics>,
    ) -> LlmGateway {
        let (usable, problems) = settings.usable();
        let state = if usable.is_empty() {
            let why = if problems.is_empty() { "providers.yaml names none".to_string() } else { problems.join("; ") };
            State::Off(why)
        } else {
            State::Starting
        };
        LlmGateway {
            settings,
            mode: loaded.config.llm.gateway,
            state: watch::channel(state).0,
            folder: data_dir.root().join("data/llm"),
            binary: binaries_dir.join(GATEWAY_BINARY),
            health: loaded.config.orchestrator.health_check.clone(),
            queue_timeout: Duration::from_secs(loaded.config.llm.queue_timeout),
            metrics,
            usage: UsageBook::open(&data_dir.state_dir()),
            notifier: std::sync::OnceLock::new(),
            way_out: std::sync::OnceLock::new(),
            windows: tokio::sync::Mutex::default(),
        }
    }

    /// The context window of `model` (`provider/model`) in tokens, as the gateway tells it:
    /// providers.yaml's `context_window`, else what a local server says (llama.cpp's `/props`).
    /// `None` when neither says, or the gateway is not ready: the caller goes by the name.
    pub async fn context_window(&self, model: &str) -> Option<usize> {
        let provider = model.split_once('/').map(|(provider, _)| provider)?;
        // Asked of the gateway at most once a minute (after a failure too), and not under the
        // lock: a slow gateway holds up no model call. A gateway not ready yet was not asked,
        // so the next call asks (a turn right after the start would otherwise go by the name).
        let ready = match &*self.state.borrow() {
            State::Ready { client, .. } => Some(client.clone()),
            _ => None,
        };
        let due = ready.is_some() && {
            let mut windows = self.windows.lock().await;
            let due = windows.1.is_none_or(|asked| asked.elapsed() > WINDOWS_KEPT);
            if due {
                windows.1 = Some(Instant::now());
            }
            due
        };
        if let Some(mut client) = ready.filter(|_| due) {
            let asked =
                tokio::time::timeout(Duration::from_secs(5), client.list_models(v1::ListModelsRequest::default()));
            match asked.await {
                Ok(Ok(listed)) => {
                    self.windows.lock().await.0 = listed
                        .into_inner()
                        .models
                        .into_iter()
                        .map(|model| (model.provider, model.context_window))
                        .collect();
                }
                Ok(Err(status)) => tracing::debug!(error = %status.message(), "cannot list the gateway's models"),
                Err(_) => tracing::debug!("the gateway did not list its models within 5 s"),
            }
        }
        self.windows.lock().await.0.get(provider).filter(|window| **window > 0).map(|window| *window as usize)
    }

    /// Each provider's health as the gateway sees it (healthy, and what it last said), or why
    /// the gateway cannot say; it is waited for at most 2 s.
    pub async fn provider_health(&self) -> Result<HashMap<String, (bool, String)>, GatewayError> {
        let mut client = match &*self.state.borrow() {
            State::Ready { client, .. } => client.clone(),
            State::Off(why) => return Err(GatewayError::NoModel(why.clone())),
            State::Starting => return Err(GatewayError::Starting),
            State::Down(why) => return Err(GatewayError::Down(why.clone())),
        };
        let asked = client.get_provider_status(v1::ProviderStatusRequest {});
        match tokio::time::timeout(Duration::from_secs(2), asked).await {
            Ok(Ok(status)) => Ok(status
                .into_inner()
                .providers
                .into_iter()
                .map(|provider| (provider.name, (provider.healthy, provider.message)))
                .collect()),
            Ok(Err(status)) => Err(GatewayError::Health(status.message().to_string())),
            Err(_) => Err(GatewayError::HealthTimeout),
        }
    }

    /// Restarts after failed health checks are told to the admins through `notifier`.
    pub fn tell_admins_through(&self, notifier: Arc<crate::work::health::Notifier>) {
        // silent-ok: set once, at start.
        let _ = self.notifier.set(notifier);
    }

    /// The hosts of the providers a gateway in its container reaches by a tunnel, and of the
    /// token endpoints its cloud accounts sign in at.
    pub fn provider_hosts(&self) -> Vec<String> {
        let bases = self.settings.config().providers.iter().map(|provider| provider.api_base.as_str());
        egress::provider_hosts(bases.chain(self.settings.1.iter().map(String::as_str)))
    }

    /// A gateway in its container reaches its providers through `way_out` from now on.
    pub fn reach_out_through(&self, way_out: egress::WayOut) {
        // silent-ok: set once, at start.
        let _ = self.way_out.set(way_out);
    }

    /// Where the gateway stands, for `baaaht status`.
    pub fn summary(&self) -> GatewaySummary {
        let (state, message) = match &*self.state.borrow() {
            State::Off(why) => ("off", format!("no LLM provider can be used: {why}")),
            State::Starting => ("starting", String::new()),
            State::Ready { .. } => ("ready", String::new()),
            State::Down(why) => ("down", why.clone()),
        };
        let providers = self.settings.usable().0.into_iter().map(str::to_string).collect();
        GatewaySummary { mode: self.mode, state, message, providers }
    }

    /// A client of a configured, healthy gateway newer than `after` (a generation a caller saw
    /// fail), waiting up to `llm.queue_timeout` while it starts or restarts.
    pub async fn client(&self, after: Option<u64>) -> Result<(LlmGatewayClient<Channel>, u64), GatewayError> {
        let mut changes = self.state.subscribe();
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.queue_timeout;
        loop {
            let last_reason = {
                let state = changes.borrow_and_update();
                match &*state {
                    State::Off(why) => return Err(GatewayError::Off(why.clone())),
                    State::Ready { client, generation } if after.is_none_or(|seen| *generation > seen) => {
                        return Ok((client.clone(), *generation));
                    }
                    State::Ready { .. } | State::Starting => "it is starting".to_string(),
                    State::Down(reason) => reason.clone(),
                }
            };
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => {
                    return Err(GatewayError::Unavailable { waited: started.elapsed().as_secs(), reason: last_reason })
                }
            }
        }
    }

    /// Records the usage of one answer of `provider`'s `model` for `context` and `session`:
    /// metrics now, the ledger on a blocking thread.
    pub fn account(self: &Arc<Self>, provider: &str, model: &str, context: &str, session: &str, usage: Used) {
        let Used { tokens, estimated } = usage;
        self.metrics.record_llm_tokens(provider, model, tokens);
        let gateway = self.clone();
        let (context, session) = (context.to_string(), session.to_string());
        let write = move || {
            if let Err(error) = gateway.usage.record(&context, &session, tokens, estimated) {
                tracing::warn!(%error, "cannot update the usage ledger");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn_blocking(write)),
            Err(_) => write(),
        }
    }

    /// Runs the gateway until `cancel`: start, configure, watch, restart.
    pub async fn run(
        self: Arc<Self>,
        containers: Arc<ContainerManager>,
        mut engine: watch::Receiver<Engine>,
        cancel: CancellationToken,
    ) {
        if let State::Off(why) = &*self.state.borrow() {
            tracing::warn!(reason = %why, "the LLM gateway is not started: no provider can be used");
            return;
        }
        let (usable, problems) = self.settings.usable();
        tracing::info!(mode = %self.mode, usable = ?usable, unusable = ?problems, "starting the LLM gateway");
        let mut generation = 0;
        let mut delay = Duration::from_secs(1);
        loop {
            let started = Instant::now();
            let outcome = tokio::select! {
                () = cancel.cancelled() => return,
                outcome = self.start(&containers, &mut engine) => outcome,
            };
            let reason = match outcome {
                Ok(Started { mut instance, client, channel, relays, _tunnels }) => {
                    generation += 1;
                    self.metrics.set_gateway_up(true);
                    self.state.send_replace(State::Ready { client: client.clone(), generation });
                    tracing::info!(
                        generation,
                        startup_ms = started.elapsed().as_millis() as u64,
                        "the LLM gateway is ready"
                    );
                    // The relays carry the gateway's connections for as long as it is watched.
                    let (reason, why) = tokio::select! {
                        watched = self.watch(channel, &mut instance, &cancel) => watched,
                        never = relay::serve(relays) => match never {},
                    };
                    self.metrics.set_gateway_up(false);
                    if !cancel.is_cancelled() {
                        self.metrics.record_restart(Role::LlmGateway.as_str(), why);
                        if let Some(notifier) = self.notifier.get() {
                            notifier.notify(
                                "LLM gateway restarted",
                                &format!("The LLM gateway stopped answering ({reason}); the daemon restarts it."),
                            );
                        }
                    }
                    self.state.send_replace(State::Down(reason.clone()));
                    instance.stop(&containers).await;
                    reason
                }
                Err((instance, reason)) => {
                    if let Some(instance) = instance {
                        instance.stop(&containers).await;
                    }
                    self.state.send_replace(State::Down(reason.clone()));
                    reason
                }
            };
            if cancel.is_cancelled() {
                return;
            }
            // A gateway that ran well for a while restarts at once; one that keeps failing backs off.
            if started.elapsed() > Duration::from_secs(60) {
                delay = Duration::from_secs(1);
            }
            self.metrics.count_gateway_restart();
            tracing::warn!(%reason, retry_in_ms = delay.as_millis() as u64, "restarting the LLM gateway");
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(Duration::from_secs(30));
        }
    }

    /// Starts one gateway and configures it.
    async fn start(
        &self,
        containers: &ContainerManager,
        engine: &mut watch::Receiver<Engine>,
    ) -> Result<Started, (Option<Instance>, String)> {
        self.prepare_folder().map_err(|error| (None, format!("cannot prepare {}: {error}", self.folder.display())))?;
        let socket = self.folder.join(GATEWAY_SOCKET);
        // A copy (its keys wiped when dropped) that names the relays.
        let mut config = GatewaySettings(self.settings.config().clone(), vec![]);
        let relays = match self.mode {
            GatewayMode::Container => relay::bind(&self.folder, GATEWAY_MOUNT, &mut config.0)
                .map_err(|error| (None, format!("cannot relay to the host's loopback: {error}")))?,
            // On the host, the host's loopback is the gateway's own.
            GatewayMode::Process => vec![],
        };
        let tunnels = match (self.mode, self.way_out.get()) {
            (GatewayMode::Container, Some(way_out)) => Some(
                way_out
                    .open(&self.folder)
                    .map_err(|error| (None, format!("cannot serve the gateway's egress socket: {error}")))?,
            ),
            (GatewayMode::Container, None) => return Err((None, "the daemon gave the gateway no way out".into())),
            (GatewayMode::Process, _) => None,
        };
        let instance = match self.mode {
            GatewayMode::Process => {
                if !self.binary.is_file() {
                    return Err((
                        None,
                        format!("{} is missing: build it or set container.binaries_dir", self.binary.display()),
                    ));
                }
                let child = tokio::process::Command::new(&self.binary)
                    .arg("serve")
                    .arg("--socket")
                    .arg(&socket)
                    .arg("--parent")
                    .arg(std::process::id().to_string())
                    // Nothing of the daemon's environment (which may hold keys) is inherited.
                    .env_clear()
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(|error| (None, format!("cannot start {}: {error}", self.binary.display())))?;
                Instance::Process(child)
            }
            GatewayMode::Container => {
                if engine.borrow().runtime.is_none() {
                    self.state.send_replace(State::Down(
                        "no container engine yet (or set llm.gateway: process to run the gateway on the host)".into(),
                    ));
                    while engine.borrow_and_update().runtime.is_none() {
                        if engine.changed().await.is_err() {
                            return Err((None, "the engine watcher stopped".into()));
                        }
                    }
                }
                let socket_mode = if crate::base::datadir::current_uid() == 0 { "600" } else { "666" };
                let request = RunRequest {
                    role: Role::LlmGateway,
                    session_id: "system".into(),
                    context: Context::user("system"),
                    command: vec![
                        format!("{BINARIES_MOUNT}/{GATEWAY_BINARY}"),
                        "serve".into(),
                        "--socket".into(),
                        format!("{GATEWAY_MOUNT}/{GATEWAY_SOCKET}"),
                        "--socket-mode".into(),
                        socket_mode.into(),
                        "--egress-socket".into(),
                        format!("{GATEWAY_MOUNT}/{}", egress::EGRESS_SOCKET),
                    ],
                    mounts: vec![MountSpec {
                        host: self.folder.clone(),
                        target: GATEWAY_MOUNT.into(),
                        read_only: false,
                    }],
                    env: vec![],
                    timeout: Duration::MAX,
                    daemon_socket: false,
                    working_dir: None,
                    image: None,
                    limits: None,
                };
                let handle = containers
                    .start_detached(request)
                    .await
                    .map_err(|error| (None, format!("cannot start the gateway container: {}", error.told())))?;
                Instance::Container(handle.name)
            }
        };
        match self.connect(&socket, &config).await {
            Ok((client, channel)) => Ok(Started { instance, client, channel, relays, _tunnels: tunnels }),
            Err(reason) => Err((Some(instance), reason.to_string())),
        }
    }

    /// A fresh folder for the socket, reachable by the gateway's uid in its container.
    fn prepare_folder(&self) -> std::io::Result<()> {
        match std::fs::remove_dir_all(&self.folder) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
        std::fs::DirBuilder::new().mode(0o700).create(&self.folder)?;
        if self.mode == GatewayMode::Container {
            // Made just now by the daemon; handed over by descriptor all the same.
            crate::sandbox::shared_dirs::hand_over(crate::sandbox::shared_dirs::open_trusted(&self.folder)?)?;
        }
        Ok(())
    }

    /// Waits for the socket, connects and sends the configuration.
    async fn connect(
        &self,
        socket: &Path,
        settings: &GatewaySettings,
    ) -> Result<(LlmGatewayClient<Channel>, Channel), GatewayError> {
        let deadline = Instant::now() + START_TIMEOUT;
        while !socket.exists() {
            if Instant::now() > deadline {
                return Err(GatewayError::NoSocket(socket.to_path_buf()));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let backoff = Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(500),
            give_up_after: Duration::from_secs(5),
        };
        let channel =
            baaaht_proto::client::channel(socket, backoff).await.map_err(|error| GatewayError::Connect { error })?;
        let mut client =
            LlmGatewayClient::new(channel.clone()).max_decoding_message_size(baaaht_proto::MAX_MESSAGE_BYTES);
        let configure = client.configure(settings.config().clone());
        match tokio::time::timeout(START_TIMEOUT, configure).await {
            Ok(Ok(response)) => {
                tracing::info!(usable_providers = response.get_ref().usable_providers, "the LLM gateway is configured");
                Ok((client, channel))
            }
            Ok(Err(status)) => Err(GatewayError::Configure(status.message().to_string())),
            Err(_) => Err(GatewayError::ConfigureTimeout),
        }
    }

    /// Checks health (ContainerHealth, spec §18.3) until `failure_threshold` checks in a row
    /// fail, the process exits, or `cancel`; returns why it stopped watching, in a sentence and
    /// as `unhealthy` or `exited`. Each answer also gives the providers' queues for the
    /// queue-depth metric.
    async fn watch(
        &self,
        channel: Channel,
        instance: &mut Instance,
        cancel: &CancellationToken,
    ) -> (String, &'static str) {
        let exited = instance.exited();
        crate::work::health::watch_service(channel, "llm-gateway", &self.health, exited, cancel, |response| {
            for (key, value) in &response.metrics {
                if let (Some(provider), Ok(depth)) = (key.strip_prefix("queued."), value.parse::<u64>()) {
                    self.metrics.set_llm_queue(provider, depth);
                }
            }
        })
        .await
    }
}

/// The LLM gateway's container kept running ([`LlmGateway::run`]) as a subsystem.
#[derive(Debug)]
pub struct Upkeep {
    pub gateway: Arc<LlmGateway>,
    pub containers: Arc<ContainerManager>,
    pub engine: watch::Receiver<Engine>,
}

impl Subsystem for Upkeep {
    fn name(&self) -> &'static str {
        "llm gateway"
    }

    fn run_until(self: Arc<Self>, shutdown: CancellationToken) -> Work {
        Box::pin(self.gateway.clone().run(self.containers.clone(), self.engine.clone(), shutdown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(providers_yaml: &str) -> LoadedConfig {
        let dir = tempfile::tempdir().expect("tempdir");
        if !providers_yaml.is_empty() {
            std::fs::write(dir.path().join(crate::base::config::PROVIDERS_FILE), providers_yaml).expect("write");
        }
        let paths = crate::base::config::ConfigPaths {
            config_file: None,
            config_dir: dir.path().to_path_buf(),
            data_dir: dir.path().join("data"),
        };
        crate::base::config::load(&paths, Vec::new()).expect("valid configuration")
    }

    #[test]
    fn keys_resolve_from_the_environment_and_presets_fill_the_rest() {
        let loaded = loaded(
            "providers:\n  anthropic:\n    api_key: ${A_KEY}\n    default: true\n  groq:\n    api_key: ${MISSING_KEY}\n  ollama: {}\n  custom:\n    - name: llama-server\n      api_base: http://127.0.0.1:8081/v1\nfallback_chains:\n  anthropic: [ollama]\n",
        );
        let env = |name: &str| (name == "A_KEY").then(|| "sk-ant-xyz".to_string());
        let settings = gateway_settings(&loaded, None, env);
        let config = settings.config();
        let by_name = |name: &str| config.providers.iter().find(|p| p.name == name).expect("provider");
        let anthropic = by_name("anthropic");
        assert_eq!((anthropic.wire.as_str(), anthropic.api_key.as_str()), ("anthropic", "sk-ant-xyz"));
        assert_eq!(anthropic.api_base, "https://api.anthropic.com");
        assert!(by_name("groq").unusable.contains("baaahtd secrets set MISSING_KEY"), "{:?}", by_name("groq"));
        assert_eq!(by_name("ollama").api_base, "http://localhost:11434/v1");
        assert!(by_name("ollama").unusable.is_empty(), "local servers need no key");
        assert_eq!(by_name("llama-server").wire, "openai");
        assert_eq!(config.default_provider, "anthropic");
        assert_eq!(config.fallback_chains["anthropic"].providers, ["ollama"]);
        let (usable, problems) = settings.usable();
        assert_eq!(usable, ["anthropic", "ollama", "llama-server"]);
        assert_eq!(problems.len(), 1);
        assert!(!format!("{settings:?}").contains("sk-ant"), "keys never reach logs");
    }

    #[test]
    fn the_default_configuration_has_no_usable_provider_without_keys() {
        let settings = gateway_settings(&loaded(""), None, |_| None);
        let (usable, problems) = settings.usable();
        assert!(usable.is_empty());
        // The built-in providers are no one's choice: what is said is to set one up.
        assert!(problems.iter().all(|p| p.contains("run `baaahtd setup`") && !p.contains("API_KEY")), "{problems:?}");
    }
}
