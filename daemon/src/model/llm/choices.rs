//! The models a person may pick for a conversation (the channels' model pickers): the agents'
//! configured models, each provider's `models:` in providers.yaml and the models priced there,
//! each with whether a request for it would be taken now — its provider configured with a key,
//! the gateway answering and the provider healthy, the context's budget not used up — and, when
//! not, why in a sentence the person can act on.

use std::collections::{BTreeMap, HashMap};

use super::{GatewayError, LlmGateway};
use crate::base::auth::Context;
use crate::base::config::{LoadedConfig, Price, ProvidersConfig};
use crate::model::budgets::Budgets;

/// A model a person may pick.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelChoice {
    /// `provider/model`, as SwitchModel takes it.
    pub name: String,
    pub provider: String,
    /// Why a request for it would not be taken now; `None`: it would.
    pub unavailable: Option<String>,
    pub price: Option<Price>,
    /// An agent role's configured model.
    pub configured: bool,
}

impl LlmGateway {
    /// What `context` may choose among, the agents' models first.
    pub async fn choices(&self, providers: &ProvidersConfig, budgets: &Budgets, context: &Context) -> Vec<ModelChoice> {
        let configured: Vec<String> = self.settings.config().models.clone();
        let mut names: BTreeMap<String, bool> = configured.iter().map(|name| (name.clone(), true)).collect();
        for (provider, entry) in providers.providers.configured() {
            for model in &entry.models {
                // Written with its provider too, it is taken as meant.
                let bare = model.strip_prefix(&format!("{provider}/")).unwrap_or(model);
                names.entry(format!("{provider}/{bare}")).or_insert(false);
            }
        }
        let known: Vec<&str> = self.settings.config().providers.iter().map(|p| p.name.as_str()).collect();
        for model in providers.prices.keys() {
            if known.iter().any(|provider| model.split('/').next() == Some(provider)) {
                names.entry(model.clone()).or_insert(false);
            }
        }
        let health = self.provider_health().await;
        let default_provider = self.settings.config().default_provider.clone();
        let mut choices: Vec<ModelChoice> = names
            .into_iter()
            .map(|(name, configured)| {
                let provider = match name.split_once('/') {
                    Some((provider, _)) if known.contains(&provider) => provider.to_string(),
                    _ => default_provider.clone(),
                };
                let unavailable = self.unusable(&provider, &health).or_else(|| budgets.refusal(context, &name));
                ModelChoice { price: budgets.price(&name), provider, unavailable, configured, name }
            })
            .collect();
        choices.sort_by(|a, b| b.configured.cmp(&a.configured).then_with(|| a.name.cmp(&b.name)));
        choices
    }

    /// Why `provider` cannot take a request now, if so.
    fn unusable(
        &self,
        provider: &str,
        health: &Result<HashMap<String, (bool, String)>, GatewayError>,
    ) -> Option<String> {
        let Some(settings) = self.settings.config().providers.iter().find(|p| p.name == provider) else {
            return Some(format!("no provider `{provider}` is configured in providers.yaml"));
        };
        if !settings.unusable.is_empty() {
            return Some(format!("{provider} cannot be used: {}", settings.unusable));
        }
        match health {
            Err(why) => Some(why.to_string()),
            Ok(providers) => match providers.get(provider) {
                // What the provider last said may be of another person's request (or echo what
                // signed it): a picker says only that it is failing.
                Some((false, _)) => Some(format!("{provider} is not answering now")),
                _ => None,
            },
        }
    }
}

/// Whether `model` may be asked for, by a person's pick or an agent's call: a `provider/model`
/// of a configured provider, or an alias; a Bedrock ARN (a stored prompt, a custom model,
/// provisioned throughput) only as providers.yaml lists it or an agent's configuration names
/// it, whatever provider leads to it (a fallback chain may) and however it is written. Else why
/// not, as a sentence.
pub fn pickable(loaded: &LoadedConfig, model: &str) -> Result<(), String> {
    if !crate::base::config::is_model_id(model) {
        return Err(format!(
            "model `{}` is not a model name such as anthropic/claude-sonnet-4-20250514",
            model.escape_debug()
        ));
    }
    let providers = &loaded.providers;
    let configured = providers.providers.configured();
    let listed = || {
        let agents = &loaded.config.agents;
        configured.iter().any(|(name, entry)| {
            entry
                .models
                .iter()
                .any(|listed| format!("{name}/{}", listed.trim_start_matches(&format!("{name}/"))) == model)
        }) || providers.prices.contains_key(model)
            || agents.roles().iter().any(|(role, _)| agents.settings(*role).model.0 == model)
    };
    match model.split_once('/') {
        None if providers.models.contains_key(model) => Ok(()),
        None => Err(format!("model `{model}` names no provider and is not an alias: write it as provider/model")),
        Some((provider, _)) if !configured.iter().any(|(name, _)| *name == provider) => {
            Err(format!("model `{model}`: no provider `{provider}` is configured on this server"))
        }
        Some((_, id)) if id.to_ascii_lowercase().contains("arn:") && !listed() => {
            Err(format!("model `{model}`: a Bedrock ARN is picked only as providers.yaml lists it (bedrock.models)"))
        }
        Some(_) => Ok(()),
    }
}
