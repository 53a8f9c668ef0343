//! The LLMGateway service of `baaaht-llm-gateway`: the daemon configures it (keys included, in
//! memory only), then streams completions through it. A stream whose caller goes away stops its
//! upstream request at once.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use baaaht_proto::v1;
use baaaht_proto::v1::llm_gateway_server::LlmGateway;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use crate::convert::{event_to_proto, failure_to_proto, request_from_proto};
use crate::gateway::{Configured, Gateway};
use crate::presets::split_model;
use crate::provider::{Cloud, Endpoint, RetryPolicy, Route, Signer, Wire};

/// Seconds a provider may stay silent before a request to it is abandoned, unless configured.
pub const DEFAULT_TIMEOUT_SECONDS: u32 = 120;

#[derive(Debug, Default)]
struct Installed {
    gateway: Arc<Gateway>,
    models: Vec<String>,
    configured: bool,
}

/// The service; unconfigured until the daemon calls Configure.
#[derive(Debug)]
pub struct GatewayService {
    installed: RwLock<Installed>,
    started: std::time::Instant,
    /// The daemon's egress socket, when the gateway has no network of its own (its container).
    egress: Option<Arc<std::path::PathBuf>>,
}

impl Default for GatewayService {
    fn default() -> Self {
        GatewayService { installed: RwLock::default(), started: std::time::Instant::now(), egress: None }
    }
}

impl GatewayService {
    /// A service whose providers are reached through the daemon's egress socket at `socket`
    /// (each a tunnel the daemon opens to that provider's host only); those on the host's
    /// loopback through their relay still.
    pub fn through(socket: std::path::PathBuf) -> GatewayService {
        GatewayService { egress: Some(Arc::new(socket)), ..GatewayService::default() }
    }
}

/// The daemon's health probe (spec §18.3): degraded while a provider is failing, with each
/// provider's queue (`queued.{provider}`) for the daemon's queue-depth metric.
#[tonic::async_trait]
impl v1::container_health_server::ContainerHealth for GatewayService {
    async fn health_check(
        &self,
        request: Request<v1::HealthCheckRequest>,
    ) -> Result<Response<v1::HealthCheckResponse>, Status> {
        let probe = request.into_inner().probe;
        let uptime_seconds = self.started.elapsed().as_secs() as i64;
        let Ok(gateway) = self.current() else {
            let message = "waiting for the daemon's configuration".to_string();
            let status = "degraded".to_string();
            return Ok(Response::new(v1::HealthCheckResponse {
                status,
                message,
                uptime_seconds,
                probe,
                ..Default::default()
            }));
        };
        let mut metrics = std::collections::HashMap::new();
        let mut failing = vec![];
        for (name, provider) in &gateway.providers {
            metrics.insert(format!("queued.{name}"), provider.limiter.waiting().to_string());
            if provider.unusable.is_none() && provider.last_error().is_some() {
                failing.push(name.as_str());
            }
        }
        let (status, message) = if failing.is_empty() {
            ("healthy", "ok".to_string())
        } else {
            ("degraded", format!("failing: {}", failing.join(", ")))
        };
        Ok(Response::new(v1::HealthCheckResponse { status: status.into(), message, uptime_seconds, metrics, probe }))
    }
}

type EventStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<v1::LlmCompletionEvent, Status>> + Send>>;

/// Builds the gateway a configuration describes, or says which entry is wrong.
/// `egress`: the daemon's egress socket, the way to a provider no relay reaches (none: out
/// directly).
pub fn gateway_from(config: &v1::GatewayConfig, egress: Option<&Arc<std::path::PathBuf>>) -> Result<Gateway, String> {
    let mut providers = BTreeMap::new();
    for (index, provider) in config.providers.iter().enumerate() {
        let wire = Wire::parse(&provider.wire).ok_or_else(|| {
            format!(
                "providers[{index}] ({}): wire `{}` is none of anthropic, openai, gemini, azure, bedrock, vertex",
                provider.name, provider.wire
            )
        })?;
        let seconds = if provider.timeout_seconds == 0 { DEFAULT_TIMEOUT_SECONDS } else { provider.timeout_seconds };
        let account = provider.cloud.clone().unwrap_or_default();
        let route = match egress {
            _ if !provider.relay_socket.is_empty() => Route::Relay(provider.relay_socket.clone().into()),
            Some(socket) => Route::Tunnel(socket.clone()),
            None => Route::Direct,
        };
        let (signer, signer_problem) = match signer(wire, &account, &provider.api_base, &route, egress) {
            Ok(signer) => (signer, None),
            Err(problem) => (None, Some(problem)),
        };
        let endpoint = Endpoint {
            name: provider.name.clone(),
            wire,
            api_base: provider.api_base.clone(),
            api_key: (!provider.api_key.is_empty()).then(|| provider.api_key.clone()),
            cloud: Cloud {
                region: account.region.clone(),
                project: account.project.clone(),
                api_version: account.api_version.clone(),
            },
            signer,
            timeout: Duration::from_secs(u64::from(seconds)),
            max_output: (provider.max_output_tokens > 0).then_some(provider.max_output_tokens),
            route,
        };
        let unusable = (!provider.unusable.is_empty()).then(|| provider.unusable.clone()).or(signer_problem);
        let mut configured = Configured::new(endpoint, provider.rate_limit, unusable);
        configured.context_window = (provider.context_window > 0).then_some(provider.context_window);
        providers.insert(provider.name.clone(), configured);
    }
    let attempts = if config.retry_attempts == 0 { RetryPolicy::default().attempts } else { config.retry_attempts };
    Ok(Gateway {
        providers,
        fallback_chains: config
            .fallback_chains
            .iter()
            .map(|(name, chain)| (name.clone(), chain.providers.clone()))
            .collect(),
        default_provider: config.default_provider.clone(),
        policy: RetryPolicy { attempts, ..RetryPolicy::default() },
        aliases: config.aliases.iter().map(|(alias, models)| (alias.clone(), models.models.clone())).collect(),
    })
}

/// How a provider of `wire` signs in besides a key: SigV4 for Bedrock, a service account's
/// tokens for Vertex AI, Entra ID's for Azure when it has an app registration (each token
/// endpoint reached by [`token_route`]); or why its credentials cannot be used.
fn signer(
    wire: Wire,
    account: &v1::CloudAccount,
    api_base: &str,
    route: &Route,
    egress: Option<&Arc<std::path::PathBuf>>,
) -> Result<Option<Signer>, String> {
    use crate::provider::tokens::TokenSource;
    let reached = |source: TokenSource| -> Result<Option<Signer>, String> {
        let route = token_route(source.token_url(), api_base, route, egress)?;
        Ok(Some(Signer::Tokens(std::sync::Arc::new(source.reached_by(route)))))
    };
    Ok(match wire {
        Wire::Bedrock => Some(Signer::Aws(std::sync::Arc::new(crate::bedrock::AwsKeys {
            access_key_id: account.aws_access_key_id.clone(),
            secret_access_key: account.aws_secret_access_key.clone(),
            session_token: (!account.aws_session_token.is_empty()).then(|| account.aws_session_token.clone()),
        }))),
        Wire::Vertex => reached(TokenSource::service_account(&account.service_account_json).map_err(|error| error.0)?)?,
        Wire::Azure if !account.entra_client_id.is_empty() => {
            let authority = if account.entra_authority.is_empty() {
                crate::provider::tokens::ENTRA_AUTHORITY
            } else {
                account.entra_authority.as_str()
            };
            reached(TokenSource::client_credentials(
                authority,
                &account.entra_tenant,
                &account.entra_client_id,
                &account.entra_client_secret,
            ))?
        }
        _ => None,
    })
}

/// How the token endpoint at `token_url` is reached, given that the provider at `api_base` is
/// reached by `route`: the same way when it is at the provider's own address; else straight (a
/// gateway on the host) or by a tunnel of its own to its host (in a container, where the daemon
/// relays nothing but a provider's own address on the host's loopback); or why it cannot be.
fn token_route(
    token_url: &str,
    api_base: &str,
    route: &Route,
    egress: Option<&Arc<std::path::PathBuf>>,
) -> Result<Route, String> {
    use crate::provider::tokens::token_endpoint;
    let (host, port) = token_endpoint(token_url).map_err(|why| format!("its {why}"))?;
    if token_endpoint(api_base).is_ok_and(|provider| provider == (host.clone(), port)) {
        return Ok(route.clone());
    }
    match (route, egress) {
        (Route::Direct, _) => Ok(Route::Direct),
        _ if host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()) => Err(format!(
            "its token endpoint {token_url} is on this machine's loopback, which the gateway in its container \
             reaches only at a provider's own address: serve the tokens there, or run the gateway on the host \
             (llm.gateway: process)"
        )),
        (_, Some(socket)) => Ok(Route::Tunnel(socket.clone())),
        (_, None) => Err(format!("its token endpoint {token_url} cannot be reached from the gateway")),
    }
}

impl GatewayService {
    fn current(&self) -> Result<Arc<Gateway>, Status> {
        let installed = self.installed.read().unwrap_or_else(PoisonError::into_inner);
        if !installed.configured {
            return Err(Status::unavailable("the LLM gateway has not been configured by the daemon yet"));
        }
        Ok(installed.gateway.clone())
    }
}

#[tonic::async_trait]
impl LlmGateway for GatewayService {
    async fn configure(&self, request: Request<v1::GatewayConfig>) -> Result<Response<v1::ConfigureResponse>, Status> {
        let mut config = request.into_inner();
        let gateway = gateway_from(&config, self.egress.as_ref());
        // The keys now live in the gateway's endpoints only.
        for provider in &mut config.providers {
            zeroize::Zeroize::zeroize(&mut provider.api_key);
            if let Some(account) = &mut provider.cloud {
                for secret in [
                    &mut account.aws_secret_access_key,
                    &mut account.aws_session_token,
                    &mut account.service_account_json,
                    &mut account.entra_client_secret,
                ] {
                    zeroize::Zeroize::zeroize(secret);
                }
            }
        }
        let gateway = gateway.map_err(Status::invalid_argument)?;
        let usable = gateway.providers.values().filter(|provider| provider.unusable.is_none()).count();
        tracing::info!(
            providers = gateway.providers.len(),
            usable,
            default = %gateway.default_provider,
            "configured"
        );
        *self.installed.write().unwrap_or_else(PoisonError::into_inner) =
            Installed { gateway: Arc::new(gateway), models: config.models, configured: true };
        Ok(Response::new(v1::ConfigureResponse { usable_providers: usable as u32 }))
    }

    type StreamCompletionStream = EventStream;

    async fn stream_completion(
        &self,
        request: Request<v1::LlmCompletionRequest>,
    ) -> Result<Response<Self::StreamCompletionStream>, Status> {
        let gateway = self.current()?;
        let completion = request.into_inner();
        let proto = completion.request.ok_or_else(|| Status::invalid_argument("request: missing"))?;
        let llm_request = request_from_proto(proto).map_err(|error| Status::invalid_argument(error.to_string()))?;
        // Route before streaming, so a bad model name is an error status rather than an event.
        gateway.chain(&llm_request.model).map_err(|error| Status::invalid_argument(error.0))?;
        let span = tracing::info_span!(
            "completion",
            correlation_id = %completion.correlation_id,
            session = %completion.session_id,
            model = %llm_request.model,
        );
        let (sender, receiver) = mpsc::unbounded_channel();
        let watcher = sender.clone();
        let task = async move {
            let started = std::time::Instant::now();
            let mut send = |event| {
                // silent-ok: a caller that left is noticed below and stops the request.
                let _ = sender.send(Ok(v1::LlmCompletionEvent { event: Some(event_to_proto(event)) }));
            };
            tokio::select! {
                () = watcher.closed() => {
                    tracing::info!(after_ms = started.elapsed().as_millis() as u64, "the caller went away; upstream request cancelled");
                }
                outcome = gateway.complete(&llm_request, &mut send) => match outcome {
                    Ok(provider) => tracing::info!(%provider, duration_ms = started.elapsed().as_millis() as u64, "answered"),
                    Err(failure) => {
                        tracing::warn!(error = %failure, "no provider answered");
                        // silent-ok: as above.
                        let _ = sender.send(Ok(v1::LlmCompletionEvent { event: Some(failure_to_proto(&failure)) }));
                    }
                },
            }
        };
        tokio::spawn(tracing::Instrument::instrument(task, span));
        Ok(Response::new(Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(receiver))))
    }

    async fn list_models(&self, _: Request<v1::ListModelsRequest>) -> Result<Response<v1::ListModelsResponse>, Status> {
        let (gateway, names) = {
            let installed = self.installed.read().unwrap_or_else(PoisonError::into_inner);
            (installed.gateway.clone(), installed.models.clone())
        };
        let mut models = vec![];
        for name in names {
            // An alias is told by the provider it goes to first.
            let first = gateway.aliases.get(&name).and_then(|models| models.first()).cloned();
            let (provider, _) = split_model(first.as_deref().unwrap_or(&name), &gateway.default_provider);
            let configured = gateway.providers.get(provider);
            let max_output = configured.and_then(|p| p.endpoint.max_output).unwrap_or(0);
            let context_window = match configured {
                Some(configured) => configured.context_window().await,
                None => 0,
            };
            models.push(v1::ModelInfo {
                name: name.clone(),
                provider: provider.to_string(),
                max_output_tokens: max_output,
                context_window,
            });
        }
        Ok(Response::new(v1::ListModelsResponse { models }))
    }

    async fn get_provider_status(
        &self,
        _: Request<v1::ProviderStatusRequest>,
    ) -> Result<Response<v1::ProviderStatusResponse>, Status> {
        let gateway = self.current()?;
        let providers = gateway
            .providers
            .iter()
            .map(|(name, provider)| {
                let problem = provider.unusable.clone().or_else(|| provider.last_error());
                let paused = provider.limiter.paused_for();
                v1::ProviderStatus {
                    name: name.clone(),
                    healthy: problem.is_none(),
                    message: problem.unwrap_or_else(|| "ok".into()),
                    queued_requests: provider.limiter.waiting(),
                    rate_limited_for_seconds: paused.as_secs_f64().ceil() as u32,
                }
            })
            .collect();
        Ok(Response::new(v1::ProviderStatusResponse { providers }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_endpoint_is_reached_by_its_own_route_and_never_in_the_clear() {
        let relay = Route::Relay("/run/relay.sock".into());
        let egress = Arc::new(std::path::PathBuf::from("/run/egress.sock"));
        let tunnel = Route::Tunnel(egress.clone());
        let google = "https://oauth2.googleapis.com/token";
        // At the provider's own address: the same way (a fake cloud serving both on loopback).
        assert_eq!(
            token_route("http://127.0.0.1:9000/token", "http://127.0.0.1:9000", &relay, Some(&egress)),
            Ok(relay.clone())
        );
        // Elsewhere: its own tunnel, never the provider's relay.
        assert_eq!(token_route(google, "http://127.0.0.1:9000", &relay, Some(&egress)), Ok(tunnel.clone()));
        assert_eq!(
            token_route(google, "https://us-east5-aiplatform.googleapis.com", &tunnel, Some(&egress)),
            Ok(tunnel)
        );
        assert_eq!(token_route(google, "https://x.example", &Route::Direct, None), Ok(Route::Direct));
        // On loopback but not at the provider's address: nothing in the container reaches it.
        let refused = token_route("http://127.0.0.1:9001/token", "http://127.0.0.1:9000", &relay, Some(&egress));
        assert!(refused.is_err_and(|why| why.contains("llm.gateway: process")));
        // A secret over plain HTTP to another machine: never.
        let clear = token_route("http://login.example/token", "https://x.example", &Route::Direct, None);
        assert!(clear.as_ref().is_err_and(|why| why.contains("not an https:// address")), "{clear:?}");
    }
}
