//! `baaaht mcp`: the MCP servers a user or group sees, their tools, and adding or removing one.

use std::fmt::Write as _;

use baaaht_proto::v1;

/// `baaaht mcp list`: one block per server.
pub fn servers_text(list: &v1::McpServerList) -> String {
    let mut text = String::new();
    if list.servers.is_empty() {
        text.push_str("no MCP servers are configured here (add one with `baaaht mcp add NAME --command …`)\n");
    }
    for server in &list.servers {
        let state = if server.running { "running" } else { "stopped" };
        let _ = writeln!(text, "{} ({}, {state})", server.name, server.scope);
        let mut command = server.command.clone();
        for arg in &server.args {
            command.push(' ');
            command.push_str(&shell_word(arg));
        }
        let _ = writeln!(text, "  command: {command}");
        if !server.install.is_empty() {
            let _ = writeln!(text, "  install: {}", server.install.join(", "));
        }
        if !server.image.is_empty() {
            let _ = writeln!(text, "  image:   {}", server.image);
        }
        if !server.env.is_empty() {
            let _ = writeln!(text, "  env:     {}", server.env.join(", "));
        }
        let egress = if server.egress.is_empty() { "none (no network)".to_string() } else { server.egress.join(", ") };
        let _ = writeln!(text, "  egress:  {egress}");
        if !server.mounts.is_empty() {
            let _ = writeln!(text, "  mounts:  {}", server.mounts.join(", "));
        }
        if server.state {
            let _ = writeln!(text, "  state:   its own folder at /state (MCP_STATE_DIR)");
        }
        if server.workspace {
            let _ = writeln!(text, "  workspace: the calling session's, at /workspace (one container per session)");
        }
        let _ = writeln!(text, "  roles:   {}", server.roles.join(", "));
        let _ = writeln!(text, "  file:    {}", server.file);
    }
    for problem in &list.problems {
        let _ = writeln!(text, "not used: {problem}");
    }
    text
}

/// `baaaht mcp tools` (names and descriptions) and `baaaht mcp test` (with `schemas`).
pub fn tools_text(list: &v1::McpToolList, schemas: bool) -> String {
    let mut text = String::new();
    if list.started {
        let _ = writeln!(text, "{} started in {} ms", list.server, list.start_ms);
    }
    if list.tools.is_empty() {
        let _ = writeln!(text, "{} offers no tools", list.server);
    }
    for tool in &list.tools {
        let first = tool.description.lines().next().unwrap_or_default();
        let _ = writeln!(text, "{}  {first}", tool.name);
        if schemas {
            let schema: serde_json::Value = serde_json::from_str(&tool.schema_json).unwrap_or_default();
            let pretty = serde_json::to_string_pretty(&schema).unwrap_or_default();
            for line in pretty.lines() {
                let _ = writeln!(text, "    {line}");
            }
        }
    }
    text
}

/// What `baaaht mcp add` writes for a server, as a YAML mapping (JSON is YAML).
#[derive(Debug, Default)]
pub struct NewServer {
    pub command: String,
    pub args: Vec<String>,
    /// `pip:NAME`, `npm:NAME` or `apt:NAME`.
    pub install: Vec<String>,
    pub image: Option<String>,
    /// `NAME=VALUE`; `${SECRET}` in a value is taken from the secrets store.
    pub env: Vec<String>,
    pub egress: Vec<String>,
    pub roles: Vec<String>,
    pub idle_timeout: Option<u64>,
    pub timeout: Option<u64>,
    /// `HOST_PATH` (read-only) or `HOST_PATH:rw`: an allowlisted folder it sees.
    pub mounts: Vec<String>,
    /// A folder of its own, kept across restarts.
    pub state: bool,
    /// It sees the calling session's workspace.
    pub workspace: bool,
}

impl NewServer {
    /// The settings as YAML, or what is wrong with a flag.
    pub fn yaml(&self) -> Result<String, String> {
        let mut settings = serde_json::Map::new();
        settings.insert("command".into(), self.command.clone().into());
        if !self.args.is_empty() {
            settings.insert("args".into(), self.args.clone().into());
        }
        let mut install = vec![];
        for package in &self.install {
            let Some((source, name)) = package.split_once(':').filter(|(s, n)| !s.is_empty() && !n.is_empty()) else {
                return Err(format!(
                    "--install {package}: write SOURCE:NAME, e.g. pip:mcp-server-time or npm:@scope/server"
                ));
            };
            install.push(serde_json::json!({"source": source, "name": name}));
        }
        if !install.is_empty() {
            settings.insert("install".into(), install.into());
        }
        if let Some(image) = &self.image {
            settings.insert("image".into(), image.clone().into());
        }
        let mut env = serde_json::Map::new();
        for pair in &self.env {
            let Some((name, value)) = pair.split_once('=').filter(|(name, _)| !name.is_empty()) else {
                return Err(format!("--env {pair}: write NAME=VALUE, e.g. API_KEY='${{GITHUB_TOKEN}}'"));
            };
            env.insert(name.into(), value.into());
        }
        if !env.is_empty() {
            settings.insert("env".into(), env.into());
        }
        if !self.egress.is_empty() {
            settings.insert("egress".into(), self.egress.clone().into());
        }
        let mounts: Vec<serde_json::Value> = self
            .mounts
            .iter()
            .map(|mount| match mount.strip_suffix(":rw") {
                Some(host) => serde_json::json!({"host": host, "read_write": true}),
                None => serde_json::json!({"host": mount.strip_suffix(":ro").unwrap_or(mount)}),
            })
            .collect();
        if !mounts.is_empty() {
            settings.insert("mounts".into(), mounts.into());
        }
        if self.state {
            settings.insert("state".into(), true.into());
        }
        if self.workspace {
            settings.insert("workspace".into(), true.into());
        }
        if !self.roles.is_empty() {
            settings.insert("roles".into(), self.roles.clone().into());
        }
        if let Some(seconds) = self.idle_timeout {
            settings.insert("idle_timeout".into(), seconds.into());
        }
        if let Some(seconds) = self.timeout {
            settings.insert("timeout".into(), seconds.into());
        }
        serde_json::to_string(&settings).map_err(|error| error.to_string())
    }
}

/// `arg` as a shell reads it back: bare when it is plain, else single-quoted.
fn shell_word(arg: &str) -> String {
    let plain = !arg.is_empty() && arg.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_listed_with_what_it_may_do() {
        let list = v1::McpServerList {
            servers: vec![v1::McpServerInfo {
                name: "time".into(),
                scope: "system".into(),
                file: "/data/config/mcp.yaml".into(),
                command: "mcp-server-time".into(),
                args: vec!["--local-timezone".into(), "Europe/Paris".into(), "a b".into()],
                install: vec!["pip:mcp-server-time".into()],
                env: vec!["TOKEN".into()],
                roles: vec!["coder".into()],
                running: true,
                ..Default::default()
            }],
            problems: vec!["/data/users/bob/mcp.yaml: server `x`: `command` is empty".into()],
        };
        assert_eq!(
            servers_text(&list),
            "time (system, running)\n  command: mcp-server-time --local-timezone Europe/Paris 'a b'\n  \
             install: pip:mcp-server-time\n  env:     TOKEN\n  egress:  none (no network)\n  roles:   coder\n  \
             file:    /data/config/mcp.yaml\nnot used: /data/users/bob/mcp.yaml: server `x`: `command` is empty\n"
        );
    }

    #[test]
    fn tools_show_their_schemas_when_tested() {
        let list = v1::McpToolList {
            server: "time".into(),
            tools: vec![v1::McpToolInfo {
                name: "mcp__time__now".into(),
                description: "The time.\nMore.".into(),
                schema_json: r#"{"type":"object"}"#.into(),
            }],
            started: true,
            start_ms: 812,
        };
        assert_eq!(tools_text(&list, false), "time started in 812 ms\nmcp__time__now  The time.\n");
        assert_eq!(
            tools_text(&list, true),
            "time started in 812 ms\nmcp__time__now  The time.\n    {\n      \"type\": \"object\"\n    }\n"
        );
    }

    #[test]
    fn add_writes_the_flags_as_settings_and_names_a_bad_one() {
        let server = NewServer {
            command: "mcp-server-fetch".into(),
            install: vec!["pip:mcp-server-fetch".into()],
            env: vec!["KEY=${FETCH_KEY}".into()],
            egress: vec!["example.com".into()],
            mounts: vec!["/srv/notes".into(), "/srv/code:rw".into()],
            state: true,
            ..Default::default()
        };
        let yaml: serde_json::Value = serde_json::from_str(&server.yaml().expect("yaml")).expect("JSON");
        assert_eq!(
            yaml,
            serde_json::json!({"command": "mcp-server-fetch", "install": [{"source": "pip", "name": "mcp-server-fetch"}],
                "env": {"KEY": "${FETCH_KEY}"}, "egress": ["example.com"],
                "mounts": [{"host": "/srv/notes"}, {"host": "/srv/code", "read_write": true}], "state": true})
        );
        let bad = NewServer { command: "x".into(), install: vec!["mcp-server-time".into()], ..Default::default() };
        assert!(bad.yaml().expect_err("no source").contains("SOURCE:NAME"));
        let bad = NewServer { command: "x".into(), env: vec!["KEY".into()], ..Default::default() };
        assert!(bad.yaml().expect_err("no value").contains("NAME=VALUE"));
    }
}
