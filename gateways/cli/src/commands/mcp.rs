//! `baaaht mcp`.

use baaaht_proto::v1;

use crate::args::McpCommand;
use crate::terminal::clean;
use crate::CliError;

pub(crate) async fn mcp(
    client: &mut baaaht_proto::client::Client,
    socket: &std::path::Path,
    command: McpCommand,
) -> Result<(), CliError> {
    let status = |status| CliError::from_status(status, socket);
    let env = |key: &str| std::env::var(key).ok();
    // A context for list/tools/test (the caller's own by default); add/rm touch the system's
    // servers unless a context is named.
    let named = |user: Option<String>, group: Option<String>| {
        (user.is_some() || group.is_some()).then(|| crate::chat::context(user, group, env))
    };
    let text = match command {
        McpCommand::List { user, group } => {
            let request =
                v1::McpServerRequest { context: Some(crate::chat::context(user, group, env)), ..Default::default() };
            crate::mcp::servers_text(&client.admin.list_mcp_servers(request).await.map_err(status)?.into_inner())
        }
        McpCommand::Tools { server, user, group } => {
            let context = Some(crate::chat::context(user, group, env));
            let request = v1::McpServerRequest { context, server, ..Default::default() };
            crate::mcp::tools_text(&client.admin.list_mcp_tools(request).await.map_err(status)?.into_inner(), false)
        }
        McpCommand::Test { server, user, group } => {
            let context = Some(crate::chat::context(user, group, env));
            let request = v1::McpServerRequest { context, server, restart: true, ..Default::default() };
            crate::mcp::tools_text(&client.admin.list_mcp_tools(request).await.map_err(status)?.into_inner(), true)
        }
        McpCommand::Add {
            name,
            command,
            args,
            install,
            image,
            env: pairs,
            egress,
            role,
            idle_timeout,
            timeout,
            mounts,
            state,
            workspace,
            user,
            group,
        } => {
            let server = crate::mcp::NewServer {
                command,
                args,
                install,
                image,
                env: pairs,
                egress,
                roles: role,
                idle_timeout,
                timeout,
                mounts,
                state,
                workspace,
            };
            let yaml = server.yaml().map_err(CliError::Usage)?;
            let flags = match (&user, &group) {
                (Some(user), _) => format!(" --user {user}"),
                (_, Some(group)) => format!(" --group {group}"),
                _ => String::new(),
            };
            let context = named(user, group);
            let request = v1::PutMcpServerRequest { system: context.is_none(), context, name: name.clone(), yaml };
            let listed = client.admin.put_mcp_server(request).await.map_err(status)?.into_inner();
            let file = listed.servers.iter().find(|s| s.name == name).map(|s| s.file.clone()).unwrap_or_default();
            format!("added {name} to {file}; `baaaht mcp test {name}{flags}` starts it and lists its tools\n")
        }
        McpCommand::Rm { name, user, group } => {
            let context = named(user, group);
            let request =
                v1::McpServerRequest { system: context.is_none(), context, server: name.clone(), ..Default::default() };
            client.admin.remove_mcp_server(request).await.map_err(status)?;
            format!("removed {name}\n")
        }
    };
    print!("{}", clean(&text));
    Ok(())
}
