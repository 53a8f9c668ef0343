//! `baaaht egress`.

use baaaht_proto::v1;

use crate::args::{CredentialCommand, EgressCommand, EgressScope};
use crate::terminal::clean;
use crate::CliError;

pub(crate) async fn egress(
    client: &mut baaaht_proto::client::Client,
    socket: &std::path::Path,
    command: EgressCommand,
) -> Result<(), CliError> {
    let status = |status| CliError::from_status(status, socket);
    let whose = |scope: EgressScope| {
        let env = |key: &str| std::env::var(key).ok();
        let context = (!scope.system).then(|| crate::chat::context(scope.user, scope.group, env));
        (context, scope.system)
    };
    let (host, action, scope) = match command {
        EgressCommand::List { scope } => {
            let (context, system) = whose(scope);
            let request = v1::EgressRulesRequest { context, system };
            let rules = client.admin.list_egress_rules(request).await.map_err(status)?.into_inner();
            print!("{}", rules_text(&rules));
            return Ok(());
        }
        EgressCommand::Approve { id, session, always } => {
            let decision = match (session, always) {
                (_, true) => "always",
                (true, false) => "session",
                (false, false) => "once",
            };
            let answer = v1::ApprovalAnswer { id: id.clone(), decision: decision.into() };
            client.sessions.answer_approval(answer).await.map_err(status)?;
            println!("{} is allowed ({decision})", clean(&id));
            return Ok(());
        }
        EgressCommand::Deny { host: id, .. } if is_approval_id(&id) => {
            let answer = v1::ApprovalAnswer { id: id.clone(), decision: "deny".into() };
            client.sessions.answer_approval(answer).await.map_err(status)?;
            println!("{} is refused", clean(&id));
            return Ok(());
        }
        EgressCommand::Credential(command) => {
            let (name, hosts, remove, scope) = match command {
                CredentialCommand::Add { name, hosts, scope } => (name, hosts, false, scope),
                CredentialCommand::Remove { name, scope } => (name, vec![], true, scope),
            };
            let (context, system) = whose(scope);
            let request = v1::EgressCredentialChange { context, system, name: name.clone(), hosts, remove };
            let rules = client.admin.change_egress_credential(request).await.map_err(status)?.into_inner();
            if remove {
                println!("{} is no longer sent anywhere", clean(&name));
            } else {
                println!(
                    "{} is swapped in for its placeholder on the way to the hosts it is bound to; tool commands see \
                     only the placeholder in ${}",
                    clean(&name),
                    clean(&name)
                );
            }
            print!("{}", rules_text(&rules));
            return Ok(());
        }
        EgressCommand::Suggest { scope } => {
            let named = match (&scope.user, &scope.group) {
                (Some(user), _) => format!(" --user {user}"),
                (None, Some(group)) => format!(" --group {group}"),
                (None, None) => String::new(),
            };
            let (context, system) = whose(scope);
            let request = v1::EgressRulesRequest { context, system };
            let rules = client.admin.list_egress_rules(request).await.map_err(status)?.into_inner();
            print!("{}", suggestions_text(&rules, &named));
            return Ok(());
        }
        EgressCommand::Allow { host, scope } => (host, "allow", scope),
        EgressCommand::Deny { host, scope } => (host, "deny", scope),
        EgressCommand::Ask { host, scope } => (host, "ask", scope),
        EgressCommand::Revoke { host, scope } => (host, "revoke", scope),
    };
    let (context, system) = whose(scope);
    let request = v1::EgressRuleChange { context, system, host: host.clone(), action: action.into() };
    let rules = client.admin.change_egress_rule(request).await.map_err(status)?.into_inner();
    match action {
        "revoke" => println!("the rule for {} is removed", clean(&host)),
        action => println!("{} is now: {action}", clean(&host)),
    }
    print!("{}", rules_text(&rules));
    Ok(())
}

/// Whether `text` is an approval's id (`a-` and 12 hex digits), not a host.
fn is_approval_id(text: &str) -> bool {
    text.strip_prefix("a-").is_some_and(|hex| hex.len() == 12 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The rules as a table: host, action, whose, where written; then the files' problems.
fn rules_text(rules: &v1::EgressRules) -> String {
    let mut text = String::new();
    if rules.rules.is_empty() {
        text.push_str("no egress rules: tools are asked about every host (and refused where nobody can answer)\n");
    }
    for rule in &rules.rules {
        let whose = if rule.system { "everyone" } else { "own" };
        text.push_str(&format!(
            "{:<40} {:<6} {:<9} {}\n",
            clean(&rule.host),
            clean(&rule.action),
            whose,
            clean(&rule.at)
        ));
    }
    for credential in &rules.credentials {
        let whose = if credential.system { "everyone" } else { "own" };
        text.push_str(&format!(
            "credential {:<29} {:<6} {:<9} {}\n",
            clean(&credential.name),
            "→",
            whose,
            clean(&format!("{} ({})", credential.hosts.join(", "), credential.at))
        ));
    }
    for problem in &rules.problems {
        text.push_str(&format!("problem: {}\n", clean(problem)));
    }
    text
}

/// The hosts worth a rule, each with the command that writes it.
fn suggestions_text(rules: &v1::EgressRules, named: &str) -> String {
    if rules.suggestions.is_empty() {
        return "nothing to suggest: no host was allowed once three times or more in the last 30 days without a rule\n"
            .into();
    }
    let mut text = String::new();
    for suggestion in &rules.suggestions {
        text.push_str(&format!(
            "{:<40} allowed once {} times; to allow it from now on: baaaht egress allow {}{}\n",
            clean(&suggestion.host),
            suggestion.times,
            clean(&suggestion.host),
            clean(named)
        ));
    }
    text
}
