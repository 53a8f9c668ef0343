//! The Admin service's egress RPCs, for host clients (`baaaht egress`): the rules a context's
//! tools go by (everyone's and its own), and writing or revoking one.

use baaaht_proto::v1;
use tonic::Status;

use super::context_of;
use crate::auth::Context;
use crate::egress::policy::{self, Action, Rule};
use crate::Shared;

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

/// Everyone's rules, then `context`'s own (none: everyone's only), with the files' problems.
fn listed(shared: &Shared, context: Option<&Context>) -> v1::EgressRules {
    let mut list = v1::EgressRules::default();
    let everyone = shared.data_dir.config_dir().join(policy::FILE);
    let own = context.map(|context| shared.data_dir.context_dir(context).join(policy::FILE));
    for (path, system) in std::iter::once((everyone, true)).chain(own.map(|path| (path, false))) {
        match policy::load(&path) {
            Ok(rules) => list.rules.extend(rules.iter().map(|rule| info(rule, system))),
            Err(problems) => list.problems.extend(problems),
        }
    }
    list
}

pub(super) async fn list(shared: &Shared, request: v1::EgressRulesRequest) -> Result<v1::EgressRules, Status> {
    let context = whose(request.system, request.context.as_ref())?;
    Ok(listed(shared, context.as_ref()))
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
    written.map_err(Status::invalid_argument)?;
    Ok(listed(shared, context.as_ref()))
}
