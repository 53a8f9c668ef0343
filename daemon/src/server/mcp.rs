//! The Admin service's MCP RPCs, for host clients (`baaaht mcp`): the servers a context sees,
//! a server's tools as agents are offered them, and adding or removing a server.

use baaaht_proto::v1;
use tonic::Status;

use super::Shared;
use super::{context_of, to_wire};
use crate::base::auth::{Caller, Context};
use crate::work::mcp::config::{self, McpConfigError, Scope};

impl From<McpConfigError> for Status {
    fn from(error: McpConfigError) -> Status {
        match error.kind {
            config::Problem::NoServer => Status::not_found(error.to_string()),
            config::Problem::Io => Status::internal(error.to_string()),
            config::Problem::Invalid => Status::invalid_argument(error.to_string()),
        }
    }
}

/// The scope a request names: the system's file, or a context's.
fn scope_of(request: &v1::McpServerRequest) -> Result<Scope, Status> {
    if request.system {
        return Ok(Scope::System);
    }
    match context_of(request.context.as_ref(), "context")? {
        Some(context) => Ok(Scope::Context(context)),
        None => Err(Status::invalid_argument("name a context (--user or --group), or the system's servers")),
    }
}

/// The servers `scope` sees: a context's own and the system's; the system's alone.
async fn listed(shared: &Shared, scope: &Scope) -> v1::McpServerList {
    let (servers, problems) = match scope {
        Scope::System => match config::read(&config::file_of(shared.data_dir.root(), scope), scope) {
            Ok(servers) => (servers, vec![]),
            Err(problem) => (vec![], vec![problem]),
        },
        Scope::Context(context) => config::servers_for(shared.data_dir.root(), context),
    };
    let running = match scope {
        Scope::Context(context) => shared.mcp.running_in(context),
        Scope::System => vec![],
    };
    v1::McpServerList {
        servers: servers.iter().map(|server| to_wire::mcp_server_info(server, &running, &shared.policy)).collect(),
        problems: problems.iter().map(ToString::to_string).collect(),
    }
}

pub(super) async fn list(shared: &Shared, request: v1::McpServerRequest) -> Result<v1::McpServerList, Status> {
    Ok(listed(shared, &scope_of(&request)?).await)
}

/// A server's tools as the context's agents are offered them; started to list them when it has
/// not before, or afresh with `restart`.
pub(super) async fn tools(
    shared: &std::sync::Arc<Shared>,
    caller: &Caller,
    request: v1::McpServerRequest,
) -> Result<v1::McpToolList, Status> {
    let context: Context = match scope_of(&request)? {
        Scope::Context(context) => context,
        Scope::System => {
            return Err(Status::invalid_argument("a server's tools are listed for a context (--user or --group)"))
        }
    };
    let (servers, problems) = config::servers_for(shared.data_dir.root(), &context);
    let Some(server) = servers.into_iter().find(|server| server.name == request.server) else {
        let mut why = format!("{context} sees no MCP server `{}`", request.server);
        for problem in problems {
            why.push_str(&format!("; {problem}"));
        }
        return Err(Status::not_found(why));
    };
    let env = server.env(&shared.tool_calls.secrets, caller, "");
    let env = env.map_err(|error| Status::failed_precondition(error.to_string()))?;
    let listed = shared.mcp.listed(&context, &server, env, request.restart).await;
    let (offer, started) = listed.map_err(|error| Status::failed_precondition(error.to_string()))?;
    let tools = offer
        .definitions(&server)
        .into_iter()
        .map(|(name, description, schema)| v1::McpToolInfo {
            name: server.tool_name(&name),
            description,
            schema_json: schema.to_string(),
        })
        .collect();
    Ok(v1::McpToolList {
        server: server.name,
        tools,
        started: started.is_some(),
        start_ms: started.map_or(0, |took| took.as_millis() as u64),
    })
}

pub(super) async fn put(shared: &Shared, request: v1::PutMcpServerRequest) -> Result<v1::McpServerList, Status> {
    let scope = scope_of(&v1::McpServerRequest {
        context: request.context.clone(),
        system: request.system,
        ..Default::default()
    })?;
    let rules = crate::guard::secrets::Rules::of(&shared.loaded);
    config::check_entry(&request.yaml, &scope, &shared.policy, &rules)
        .map_err(|refused| Status::invalid_argument(refused.to_string()))?;
    let file = config::file_of(shared.data_dir.root(), &scope);
    let (name, yaml) = (request.name.clone(), request.yaml.clone());
    let written_scope = scope.clone();
    tokio::task::spawn_blocking(move || config::put(&file, &written_scope, &name, &yaml))
        .await
        .map_err(|error| Status::internal(error.to_string()))??;
    stop_everywhere(shared, &scope, &request.name).await;
    Ok(listed(shared, &scope).await)
}

pub(super) async fn remove(shared: &Shared, request: v1::McpServerRequest) -> Result<v1::McpServerList, Status> {
    let scope = scope_of(&request)?;
    let file = config::file_of(shared.data_dir.root(), &scope);
    let (name, removed_scope) = (request.server.clone(), scope.clone());
    tokio::task::spawn_blocking(move || config::remove(&file, &removed_scope, &name))
        .await
        .map_err(|error| Status::internal(error.to_string()))??;
    stop_everywhere(shared, &scope, &request.server).await;
    Ok(listed(shared, &scope).await)
}

/// A changed or removed server's running instances stop: the next use starts the new one.
async fn stop_everywhere(shared: &Shared, scope: &Scope, name: &str) {
    match scope {
        Scope::Context(context) => shared.mcp.stop_server(context, name).await,
        Scope::System => shared.mcp.stop_named(name).await,
    }
}
