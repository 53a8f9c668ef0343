//! The Admin service's egress RPCs, for host clients (`baaaht egress`): the rules a context's
//! tools go by (everyone's and its own), and writing or revoking one.

use baaaht_proto::v1;
use tonic::Status;

use super::context_of;
use super::Shared;
use crate::base::auth::Context;
use crate::guard::secrets::Referrer;
use crate::net::egress::credentials;
use crate::net::egress::policy::{self, Action, Rule};

/// Whose file a request names: everyone's (`None`), or a context's.
fn whose(system: bool, context: Option<&v1::ContextRef>) -> Result<Option<Context>, Status> {
    if system {
        return Ok(None);
    }
    match context_of(context, "context")? {
        Some(context) => Ok(Some(context)),
        None => Err(Status::invalid_argument("name a context (--user or --group), or everyone's rules (--system)")),
    }
}

fn info(rule: &Rule, system: bool) -> v1::EgressRuleInfo {
    v1::EgressRuleInfo {
        host: rule.pattern.to_string(),
        action: rule.action.as_str().into(),
        at: rule.at.clone(),
        system,
    }
}

/// Everyone's rules and credentials, then `context`'s own (none: everyone's only), with the
/// files' problems.
fn listed(shared: &Shared, context: Option<&Context>) -> v1::EgressRules {
    let mut list = v1::EgressRules::default();
    let folders = std::iter::once((shared.data_dir.config_dir(), true))
        .chain(context.map(|context| (shared.data_dir.context_dir(context), false)));
    for (folder, system) in folders {
        match policy::load(&folder.join(policy::FILE)) {
            Ok(rules) => list.rules.extend(rules.iter().map(|rule| info(rule, system))),
            Err(problems) => list.problems.extend(problems),
        }
        let referrer = if system { Referrer::System } else { Referrer::Context };
        match credentials::load(&folder.join(credentials::FILE), referrer) {
            Ok(bound) => list.credentials.extend(bound.into_iter().map(|binding| v1::EgressCredentialInfo {
                name: binding.name,
                hosts: binding.hosts.iter().map(ToString::to_string).collect(),
                at: binding.at,
                system,
            })),
            Err(problems) => list.problems.extend(problems),
        }
    }
    list
}

pub(super) async fn list(shared: &Shared, request: v1::EgressRulesRequest) -> Result<v1::EgressRules, Status> {
    let context = whose(request.system, request.context.as_ref())?;
    let mut list = listed(shared, context.as_ref());
    if let Some(context) = context {
        // The audit log is read from disk: off the runtime's threads.
        let (audit, data_dir) = (shared.audit.clone(), shared.data_dir.clone());
        let suggested = tokio::task::spawn_blocking(move || policy::suggested(&audit, &data_dir, &context))
            .await
            .map_err(|error| Status::internal(error.to_string()))?;
        list.suggestions = suggested.into_iter().map(|(host, times)| v1::EgressSuggestion { host, times }).collect();
    }
    Ok(list)
}

/// Writes (or with `revoke`, removes) a rule; answers the rules as they are now.
pub(super) async fn change(
    shared: &Shared,
    by: String,
    request: v1::EgressRuleChange,
) -> Result<v1::EgressRules, Status> {
    let context = whose(request.system, request.context.as_ref())?;
    let action = match request.action.as_str() {
        "allow" => Some(Action::Allow),
        "deny" => Some(Action::Deny),
        "ask" => Some(Action::Ask),
        "revoke" => None,
        other => {
            return Err(Status::invalid_argument(format!("action: `{other}` is not allow, deny, ask or revoke")));
        }
    };
    let path = match &context {
        Some(context) => shared.data_dir.context_dir(context).join(policy::FILE),
        None => shared.data_dir.config_dir().join(policy::FILE),
    };
    let host = request.host.clone();
    let written = tokio::task::spawn_blocking(move || policy::change(&path, &host, action, &by))
        .await
        .map_err(|error| Status::internal(error.to_string()))?;
    written.map_err(|why| Status::invalid_argument(why.to_string()))?;
    Ok(listed(shared, context.as_ref()))
}

/// Binds a secret to hosts (or with `remove`, unbinds it); answers the rules as they are now.
/// The secret must be one the file may name (a context's own: `secrets.user_usable`).
pub(super) async fn change_credential(
    shared: &Shared,
    by: String,
    request: v1::EgressCredentialChange,
) -> Result<v1::EgressRules, Status> {
    let context = whose(request.system, request.context.as_ref())?;
    let (path, referrer) = match &context {
        Some(context) => (shared.data_dir.context_dir(context).join(credentials::FILE), Referrer::Context),
        None => (shared.data_dir.config_dir().join(credentials::FILE), Referrer::System),
    };
    let hosts = (!request.remove).then_some(request.hosts);
    if hosts.as_ref().is_some_and(Vec::is_empty) {
        return Err(Status::invalid_argument("name the hosts the secret is sent to (--host HOST, once or more)"));
    }
    if hosts.is_some() {
        let rules = crate::guard::secrets::Rules::of(&shared.loaded);
        rules.check(&request.name, referrer).map_err(|why| Status::invalid_argument(why.to_string()))?;
    }
    let name = request.name;
    let written = tokio::task::spawn_blocking(move || credentials::change(&path, &name, hosts.as_deref(), &by))
        .await
        .map_err(|error| Status::internal(error.to_string()))?;
    written.map_err(|why| Status::invalid_argument(why.to_string()))?;
    Ok(listed(shared, context.as_ref()))
}
