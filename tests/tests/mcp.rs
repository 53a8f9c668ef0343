//! MCP servers through the real daemon: a server's container started on first use, its relay,
//! the launch with the server's environment, the MCP handshake, calls, restarts with backoff
//! and egress through the daemon's proxy, checked with minimal stdio servers written in sh and
//! bash; and real servers from PyPI and npm, installed into cached layers, answering a Coder
//! driven by the scripted fake model.

use baaaht_proto::client;
use baaaht_proto::v1;
use baaaht_tests::{DaemonOptions, TestDaemon};

const SERVER: &str = r#"while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$line" in
    *'"method":"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"sh","version":"1"}}}\n' "$id" ;;
    *'"method":"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"hello","description":"Says hello","inputSchema":{"type":"object","properties":{}}}]}}\n' "$id" ;;
    *'"method":"tools/call"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"hello from %s"}]}}\n' "$id" "${GREETING:-nobody}" ;;
  esac
done
"#;

/// A server with the tools `reach {target: "host:port", mode}` and `env`: through the proxy its
/// relay offers (when it has egress) `reach` sends `ping` and reports the answer or the
/// refusal; without one, or with `mode: direct`, it tries to connect directly.
const NET_SERVER: &str = r#"reach() {
  if [ -z "$HTTPS_PROXY" ] || [ "$2" = direct ]; then
    if timeout 5 bash -c "exec 3<>/dev/tcp/${1%:*}/${1##*:}" 2>/dev/null; then echo "direct: connected"; else echo "direct: no connection"; fi
    return
  fi
  exec 3<>/dev/tcp/127.0.0.1/${HTTPS_PROXY##*:}
  printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' "$1" "$1" >&3
  IFS= read -r status <&3
  while IFS= read -r header <&3 && [ -n "${header%$'\r'}" ]; do :; done
  case "$status" in
    *' 200 '*) echo ping >&3; IFS= read -r reply <&3; echo "tunnel: $reply" ;;
    *) IFS= read -r body <&3; echo "refused: $status $body" ;;
  esac
  exec 3<&-
}
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$line" in
    *'"method":"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"net","version":"1"}}}\n' "$id" ;;
    *'"method":"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"reach","description":"Connects","inputSchema":{"type":"object","properties":{"target":{"type":"string"}}}},{"name":"env","description":"Its environment","inputSchema":{"type":"object"}}]}}\n' "$id" ;;
    *'"name":"env"'*) text=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\0\r"\\' '    ' | tr '\n' ' ')
      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}]}}\n' "$id" "$text" ;;
    *'"method":"tools/call"'*) target=$(printf '%s' "$line" | sed -n 's/.*"target":"\([^"]*\)".*/\1/p')
      mode=$(printf '%s' "$line" | sed -n 's/.*"mode":"\([^"]*\)".*/\1/p')
      text=$(reach "$target" "$mode" 2>&1 | tr -d '\r"\\' | tr '\n' ' ')
      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}]}}\n' "$id" "$text" ;;
  esac
done
"#;

fn call(tool: &str) -> v1::ToolRequest {
    v1::ToolRequest { tool: tool.into(), params_json: "{}".into(), ..v1::ToolRequest::default() }
}

#[test]
fn a_coder_calls_an_mcp_servers_tool_and_the_server_gets_its_env() {
    let rt = baaaht_tests::runtime();
    let mcp = format!(
        "servers:\n  hello:\n    command: sh\n    args: [-c, {}]\n    env: {{GREETING: '${{TEST_GREETING}}'}}\n    roles: [coder]\n    idle_timeout: 2\n",
        serde_json::to_string(SERVER).expect("JSON")
    );
    let daemon = TestDaemon::start(DaemonOptions {
        files: vec![
            ("config/mcp.yaml".into(), mcp),
            // Alice's own server: no agent of another user is offered it.
            ("users/alice/mcp.yaml".into(), "servers:\n  private:\n    command: sh\n    roles: [coder]\n".into()),
        ],
        env: vec![("TEST_GREETING".into(), "the-secret-greeting".into())],
        ..Default::default()
    })
    .expect("daemon");
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
        let answer = agent.agents.request_tool_execution(call("mcp__hello__hello")).await;
        let answer = answer.unwrap_or_else(|status| panic!("{status:?}\n{}", daemon.log_text())).into_inner();
        assert_eq!((answer.content.as_str(), answer.is_error), ("hello from the-secret-greeting", false));
        // Warm: the same container answers again.
        let again = agent.agents.request_tool_execution(call("mcp__hello__hello")).await.expect("again");
        assert_eq!(again.into_inner().content, "hello from the-secret-greeting");
        let missing = agent.agents.request_tool_execution(call("mcp__nope__hello")).await.expect_err("no server");
        assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");
        let alices = agent.agents.request_tool_execution(call("mcp__private__hello")).await.expect_err("alice's");
        assert_eq!(alices.code(), tonic::Code::NotFound, "another user's server: {alices:?}");
        let unknown = agent.agents.request_tool_execution(call("mcp__hello__other")).await.expect("answered");
        let unknown = unknown.into_inner();
        assert!(unknown.is_error && unknown.content.contains("has no tool `other`"), "{unknown:?}");
    });
    // Each call is in the audit log, as an exec is: who, which server and tool, how it ended.
    let mut calls: Vec<(String, String, String)> = daemon
        .audit("mcp")
        .iter()
        .filter(|record| record["detail"]["tool"].is_string())
        .map(|record| {
            let text = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_string();
            assert!(text(&record["principal"]).starts_with("container:coder:"), "{record}");
            assert!(record["detail"]["duration_ms"].is_u64(), "{record}");
            (text(&record["detail"]["server"]), text(&record["detail"]["tool"]), text(&record["outcome"]))
        })
        .collect();
    calls.sort();
    let audited = |tool: &str, outcome: &str| ("hello".to_string(), tool.to_string(), outcome.to_string());
    assert_eq!(calls, [audited("hello", "ok"), audited("hello", "ok"), audited("other", "failed")]);
    // This daemon's MCP containers that run (other tests' daemons have theirs).
    let listed = || {
        let running = baaaht_tests::docker(&["ps", "--format", "{{.Names}}"]).expect("docker ps");
        let ours = daemon.recorded_containers();
        running.lines().filter(|name| name.starts_with("baaaht-mcp-") && ours.iter().any(|o| o == name)).count()
    };
    assert_eq!(listed(), 1, "one container for the server");
    // Unused for its idle_timeout (2 s), the server's container goes; the next call starts one.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while listed() > 0 {
        assert!(std::time::Instant::now() < deadline, "the idle server still runs\n{}", daemon.log_text());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
        let answer = agent.agents.request_tool_execution(call("mcp__hello__hello")).await.expect("restarted");
        assert_eq!(answer.into_inner().content, "hello from the-secret-greeting");
    });
    assert_eq!(listed(), 1);
    // A server that crashes is started again, and the call is answered.
    let running = baaaht_tests::docker(&["ps", "--format", "{{.Names}}"]).expect("docker ps");
    let ours = daemon.recorded_containers();
    let server = running.lines().find(|n| n.starts_with("baaaht-mcp-") && ours.iter().any(|o| o == n)).expect("ours");
    // The server's secret is handed over its socket: not in its container's configuration,
    // and nowhere an agent can read.
    let inspected = baaaht_tests::docker(&["inspect", server]).expect("docker inspect");
    assert!(!inspected.contains("the-secret-greeting"), "the secret is in the container's configuration");
    let seen = baaaht_tests::docker(&[
        "exec",
        &coder.name,
        "sh",
        "-c",
        "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null; true",
    ])
    .expect("the Coder's environment");
    assert!(!seen.contains("the-secret-greeting") && seen.contains("PATH="), "{seen}");
    baaaht_tests::docker(&["kill", server]).expect("docker kill");
    rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
        let answer = agent.agents.request_tool_execution(call("mcp__hello__hello")).await;
        let answer = answer.unwrap_or_else(|status| panic!("{status:?}\n{}", daemon.log_text())).into_inner();
        assert_eq!((answer.content.as_str(), answer.is_error), ("hello from the-secret-greeting", false));
    });
    drop(coder);
}

/// At the container cap, a start that waits for a slot stops the MCP server unused the
/// longest (answering no call), as it removes an idle agent or tool container: a server idle
/// within its `idle_timeout` does not hold a slot others wait for.
#[test]
fn at_the_container_cap_an_mcp_server_answering_no_call_gives_its_slot_up() {
    let rt = baaaht_tests::runtime();
    let server = serde_json::to_string(SERVER).expect("JSON");
    let mcp = format!(
        "servers:\n  one:\n    command: sh\n    args: [-c, {server}]\n    roles: [coder]\n  \
         two:\n    command: sh\n    args: [-c, {server}]\n    roles: [coder]\n"
    );
    let config = "container:\n  max_concurrent: 2\n  queue_timeout: 30\n";
    let daemon = TestDaemon::start(DaemonOptions {
        files: vec![("config/mcp.yaml".into(), mcp), ("config/config.yaml".into(), config.into())],
        ..Default::default()
    })
    .expect("daemon");
    // The Coder holds one slot, server `one` the other.
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
        let one = agent.agents.request_tool_execution(call("mcp__one__hello")).await.expect("one").into_inner();
        assert_eq!((one.content.as_str(), one.is_error), ("hello from nobody", false), "{}", daemon.log_text());
        // Server `two` waits for a slot: `one`, answering nothing, gives its up.
        let two = agent.agents.request_tool_execution(call("mcp__two__hello")).await;
        let two = two.unwrap_or_else(|status| panic!("{status:?}\n{}", daemon.log_text())).into_inner();
        assert_eq!((two.content.as_str(), two.is_error), ("hello from nobody", false), "{}", daemon.log_text());
    });
    assert!(
        daemon.log_text().contains("stopping an MCP server that answers no call to free a slot"),
        "{}",
        daemon.log_text()
    );
    let running = baaaht_tests::docker(&["ps", "--format", "{{.Names}}"]).expect("docker ps");
    let ours = daemon.recorded_containers();
    let servers = running.lines().filter(|name| name.starts_with("baaaht-mcp-") && ours.iter().any(|o| o == name));
    assert_eq!(servers.count(), 1, "one server runs: {running}");
}

/// Runs `baaaht mcp ARGS` against `daemon`; its standard output, or a panic with what it said.
fn baaaht_mcp(daemon: &TestDaemon, args: &[&str]) -> String {
    let output = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .arg("mcp")
        .args(args)
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht mcp");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "baaaht mcp {args:?}: {stdout}{stderr}\n{}", daemon.log_text());
    stdout.into_owned()
}

/// Real servers from the registries, installed into cached layers: `mcp-server-time` from PyPI
/// and `@modelcontextprotocol/server-everything` from npm. `baaaht mcp test` starts each and
/// shows its tools; then a Coder driven by the scripted fake model is offered them with their
/// schemas and calls them, and a prompt listing goes through `get_prompt`.
#[test]
fn real_servers_from_pypi_and_npm_answer_a_coder() {
    use baaaht_tests::fake_provider::{anthropic_answer, Answer, Asked, Responder};
    use baaaht_tests::scenario;
    use serde_json::json;
    let rt = baaaht_tests::runtime();
    let offered = std::sync::Arc::new(std::sync::Mutex::new(serde_json::Value::Null));
    let seen = offered.clone();
    let brain = Answer::Respond(Responder(std::sync::Arc::new(move |request| {
        let asked = Asked::of(request);
        if asked.offers("delegate") {
            return match asked.results.last() {
                None => {
                    let task = json!({"agent": "coder", "task": "Tell the time in UTC, then echo a greeting.", "returnDirectly": false});
                    anthropic_answer("", &[("toolu_delegate_1", "delegate", task)])
                }
                Some(result) => anthropic_answer(&format!("The coder says: {result}"), &[]),
            };
        }
        if asked.offers("mcp__time__get_current_time") {
            *seen.lock().expect("lock") = asked.body["tools"].clone();
            return match asked.results.len() {
                0 => anthropic_answer("", &[("toolu_time", "mcp__time__get_current_time", json!({"timezone": "UTC"}))]),
                1 => anthropic_answer(
                    "",
                    &[("toolu_echo", "mcp__everything__echo", json!({"message": "hi from baaaht"}))],
                ),
                2 => anthropic_answer("", &[("toolu_prompts", "mcp__everything__get_prompt", json!({}))]),
                _ => anthropic_answer(&asked.results.join("\n---\n"), &[]),
            };
        }
        anthropic_answer("I was not expecting to be asked.", &[])
    })));
    // `time` is everyone's, `everything` alice's own; bob's server is never offered to her.
    let system = "servers:\n  time:\n    command: mcp-server-time\n    install: [{source: pip, name: mcp-server-time==2026.10.19}]\n    \
                  roles: [coder]\n    timeout: 60\n";
    // Alice says which of its tools only read: in a turn that read a server's answer, a tool
    // that acts would wait for her yes.
    let alices = "servers:\n  everything:\n    command: mcp-server-everything\n    \
                  install: [{source: npm, name: '@modelcontextprotocol/server-everything@2026.8.31'}]\n    roles: [coder]\n    \
                  effects: {reads: [echo]}\n";
    let bobs = "servers:\n  bobs:\n    command: sh\n    roles: [coder]\n";
    let files = vec![
        ("config/mcp.yaml".into(), system.into()),
        ("users/alice/mcp.yaml".into(), alices.into()),
        ("users/bob/mcp.yaml".into(), bobs.into()),
    ];
    let options = DaemonOptions { files, ..Default::default() };
    let (_fake, daemon) = scenario::start(&rt, brain, options).expect("daemon");
    // The first start builds each server's layer; `test` shows what agents will be offered.
    let tested = baaaht_mcp(&daemon, &["test", "time", "--user", "alice"]);
    assert!(tested.starts_with("time started in "), "{tested}");
    assert!(tested.contains("mcp__time__get_current_time") && tested.contains("\"timezone\""), "{tested}");
    let tested = baaaht_mcp(&daemon, &["test", "everything", "--user", "alice"]);
    assert!(tested.contains("mcp__everything__echo") && tested.contains("mcp__everything__get_prompt"), "{tested}");
    let listed = baaaht_mcp(&daemon, &["list", "--user", "alice"]);
    assert!(
        listed.contains("everything (user:alice, running)")
            && listed.contains("install: pip:mcp-server-time==2026.10.19"),
        "{listed}"
    );
    assert!(!listed.contains("bobs"), "{listed}");

    let turn = scenario::turn_on(&rt, &daemon, scenario::message(scenario::user("alice"), "alice", "What time is it?"));
    let reply = turn.reply.expect("a reply").content;
    assert!(reply.contains("\"timezone\": \"UTC\""), "the time server answered: {reply}");
    assert!(reply.contains("Echo: hi from baaaht") || reply.contains("hi from baaaht"), "{reply}");
    let prompts = reply.split("---").nth(2).unwrap_or_default();
    assert!(!prompts.trim().is_empty() && !prompts.contains("lists no prompts"), "prompts listed: {reply}");
    // Offered with the server's own schema.
    let tools = offered.lock().expect("lock").clone();
    let time = tools.as_array().into_iter().flatten().find(|tool| tool["name"] == "mcp__time__get_current_time");
    let time = time.unwrap_or_else(|| panic!("not offered: {tools:#}"));
    assert!(time["input_schema"]["properties"]["timezone"].is_object(), "{time:#}");
    let names: Vec<&str> = tools.as_array().into_iter().flatten().filter_map(|tool| tool["name"].as_str()).collect();
    assert!(
        names.contains(&"mcp__everything__echo") && !names.iter().any(|name| name.starts_with("mcp__bobs__")),
        "{names:?}"
    );
    // Tool events as for built-in tools.
    let finished: Vec<String> = turn
        .events
        .iter()
        .filter_map(|event| match &event.event {
            Some(v1::orchestrator_event::Event::Tool(progress)) if progress.state == "finished" => {
                Some(progress.tool.clone())
            }
            _ => None,
        })
        .collect();
    assert!(finished.iter().any(|tool| tool == "mcp__time__get_current_time"), "{finished:?}");

    // Both servers crash (their containers killed): the next turn's calls start them again.
    let running = baaaht_tests::docker(&["ps", "--format", "{{.Names}}"]).expect("docker ps");
    let ours = daemon.recorded_containers();
    let servers: Vec<&str> =
        running.lines().filter(|name| name.starts_with("baaaht-mcp-") && ours.iter().any(|o| o == name)).collect();
    assert_eq!(servers.len(), 2, "both servers run: {running}");
    for name in &servers {
        baaaht_tests::docker(&["kill", name]).expect("docker kill");
    }
    // A new session, so the Assistant delegates again.
    let mut message = scenario::message(scenario::user("alice"), "alice", "And now?");
    message.session_id = rt
        .block_on(async {
            let mut client = scenario::host_client(&daemon).await?;
            let created = v1::NewSessionRequest { context: Some(scenario::user("alice")), title: String::new() };
            anyhow::Ok(client.sessions.new_session(created).await?.into_inner().id)
        })
        .expect("a new session");
    let again = scenario::turn_on(&rt, &daemon, message);
    let reply = again.reply.expect("a reply").content;
    assert!(reply.contains("\"timezone\": \"UTC\"") && reply.contains("hi from baaaht"), "after the crash: {reply}");
}

#[test]
fn a_hung_mcp_server_is_replaced_after_the_threshold_and_the_admin_is_told() {
    let rt = baaaht_tests::runtime();
    let mcp = format!(
        "servers:\n  hello:\n    command: sh\n    args: [-c, {}]\n    roles: [coder]\n",
        serde_json::to_string(SERVER).expect("JSON")
    );
    let config = "system:\n  admin_users: [root-admin]\norchestrator:\n  health_check:\n    interval: 200\n    \
                  timeout: 200\n    failure_threshold: 3\n";
    let daemon = TestDaemon::start(DaemonOptions {
        files: vec![("config/mcp.yaml".into(), mcp), ("config/config.yaml".into(), config.into())],
        ..Default::default()
    })
    .expect("daemon");
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    let ask = || {
        rt.block_on(async {
            let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
            let answer = agent.agents.request_tool_execution(call("mcp__hello__hello")).await;
            answer.unwrap_or_else(|status| panic!("{status:?}\n{}", daemon.log_text())).into_inner().content
        })
    };
    assert_eq!(ask(), "hello from nobody");
    let ours = || {
        let running = baaaht_tests::docker(&["ps", "--format", "{{.Names}}"]).expect("docker ps");
        let recorded = daemon.recorded_containers();
        running
            .lines()
            .filter(|n| n.starts_with("baaaht-mcp-") && recorded.iter().any(|r| r == n))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let hung = ours().pop().expect("the server's container");
    baaaht_tests::docker(&["pause", &hung]).expect("docker pause");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let inbox = std::process::Command::new(baaaht_tests::bin("baaaht"))
            .args(["inbox", "--user", "root-admin", "--all"])
            .env("BAAAHT_SOCKET", daemon.socket())
            .output()
            .expect("inbox");
        let inbox = String::from_utf8_lossy(&inbox.stdout).into_owned();
        if inbox.contains("mcp container restarted") && inbox.contains(&hung) && !ours().contains(&hung) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{inbox}\n{}", daemon.log_text());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(ask(), "hello from nobody", "a new server answers");
    drop(coder);
}

/// A server reaches the network only through its relay's proxy, which the daemon checks
/// against the server's `egress` list and the address filter: a listed host answers, an
/// unlisted one and a listed name for a loopback address are refused, a server with no egress
/// cannot connect at all, and another server does not see one server's secret.
#[test]
fn an_mcp_servers_egress_is_its_list_through_the_daemons_proxy() {
    use std::io::{BufRead as _, Write as _};
    let rt = baaaht_tests::runtime();
    // The host's end of the container bridge stands for "the internet": the admin allows it
    // (it is a private address), and the `open` server lists it.
    let bridge = baaaht_tests::bridge_address().expect("bridge address");
    let listener = std::net::TcpListener::bind((bridge, 0)).expect("listen on the bridge");
    let port = listener.local_addr().expect("address").port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = accepted.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut reader = std::io::BufReader::new(stream);
            let mut line = String::new();
            if reader.read_line(&mut line).is_ok() {
                // silent-ok: a client that went away gets nothing.
                let _ = writeln!(reader.get_mut(), "pong to {}", line.trim());
            }
        }
    });
    let script = serde_json::to_string(NET_SERVER).expect("JSON");
    let mcp = format!(
        "servers:\n  open:\n    command: bash\n    args: [-c, {script}]\n    egress: ['{bridge}']\n    env: {{TOKEN: '${{OPEN_TOKEN}}'}}\n    roles: [coder]\n  \
         local:\n    command: bash\n    args: [-c, {script}]\n    egress: [localhost]\n    roles: [coder]\n  \
         closed:\n    command: bash\n    args: [-c, {script}]\n    roles: [coder]\n"
    );
    let config = format!("tools:\n  web_proxy:\n    allow: ['{bridge}:{port}']\n");
    let daemon = TestDaemon::start(DaemonOptions {
        files: vec![("config/mcp.yaml".into(), mcp), ("config/config.yaml".into(), config)],
        env: vec![("OPEN_TOKEN".into(), "open-server-secret-4711".into())],
        ..Default::default()
    })
    .expect("daemon");
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    let reach_by = |server: &str, target: String, mode: &str| {
        rt.block_on(async {
            let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
            let mut request = call(&format!("mcp__{server}__reach"));
            request.params_json = serde_json::json!({ "target": target, "mode": mode }).to_string();
            let answer = agent.agents.request_tool_execution(request).await;
            answer.unwrap_or_else(|status| panic!("{status:?}\n{}", daemon.log_text())).into_inner().content
        })
    };
    let reach = |server: &str, target: String| reach_by(server, target, "proxy");
    let answer = reach("open", format!("{bridge}:{port}"));
    assert_eq!(answer.trim(), format!("tunnel: pong to ping"), "{}", daemon.log_text());
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Loopback is refused at sight (the filter's word comes first); a name not listed by its list.
    let answer = reach("open", format!("127.0.0.1:{port}"));
    assert!(answer.contains("403") && answer.contains("loopback"), "{answer}");
    let answer = reach("open", format!("unlisted.test:{port}"));
    assert!(answer.contains("403") && answer.contains("is not in the egress list of MCP server `open`"), "{answer}");
    let answer = reach("local", format!("localhost:{port}"));
    assert!(answer.contains("403") && answer.contains("loopback"), "a listed name for a loopback address: {answer}");
    let answer = reach("closed", format!("{bridge}:{port}"));
    assert_eq!(answer.trim(), "direct: no connection", "a server without egress has no network");
    let answer = reach_by("open", format!("{bridge}:{port}"), "direct");
    assert_eq!(answer.trim(), "direct: no connection", "a server with egress has no way around the proxy");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1, "only the allowed tunnel arrived");
    // One server's secret is not in another server's container, nor in the agents' tool
    // containers.
    let open_env = rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
        agent.agents.request_tool_execution(call("mcp__open__env")).await.expect("env").into_inner().content
    });
    assert!(open_env.contains("open-server-secret-4711"), "the server has its own secret: {open_env}");
    let closed_env = rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
        agent.agents.request_tool_execution(call("mcp__closed__env")).await.expect("env").into_inner().content
    });
    assert!(closed_env.contains("PATH=") && !closed_env.contains("open-server-secret-4711"), "{closed_env}");
    rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
        let mut exec = call("exec");
        exec.params_json = r#"{"command": "true"}"#.into();
        agent.agents.request_tool_execution(exec).await.expect("exec");
    });
    let running = baaaht_tests::docker(&["ps", "--format", "{{.Names}}"]).expect("docker ps");
    let ours = daemon.recorded_containers();
    let tools = running.lines().find(|n| n.starts_with("baaaht-tool-") && ours.iter().any(|o| o == n)).expect("tools");
    let tool_env = baaaht_tests::docker(&[
        "exec",
        tools,
        "sh",
        "-c",
        "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; true",
    ])
    .expect("the tool container's environment");
    assert!(tool_env.contains("PATH=") && !tool_env.contains("open-server-secret-4711"), "{tool_env}");
    // Each connection is audited once, with the server, host and outcome.
    let records = daemon.audit_records("egress");
    let outcomes: Vec<(String, String, String)> = records
        .iter()
        .filter(|record| record["detail"]["mcp_server"].is_string())
        .map(|record| {
            let text = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_string();
            (text(&record["detail"]["mcp_server"]), text(&record["detail"]["host"]), text(&record["outcome"]))
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("open".to_string(), bridge.to_string(), "allowed".to_string()),
            ("open".into(), "127.0.0.1".into(), "refused".into()),
            ("open".into(), "unlisted.test".into(), "refused".into()),
            ("local".into(), "localhost".into(), "refused".into()),
        ],
        "{records:#?}"
    );
    drop(coder);
}

/// A server that keeps failing is tried at once, then again only after a growing pause, and
/// the agent is told when; `baaaht mcp add`/`rm` edit a context's mcp.yaml, which only that
/// context sees, and a bad server is refused with the reason.
#[test]
fn a_failing_server_backs_off_and_servers_are_added_and_removed_per_context() {
    let rt = baaaht_tests::runtime();
    let mcp =
        "servers:\n  crash:\n    command: sh\n    args: [-c, 'echo cannot start >&2; exit 3']\n    roles: [coder]\n";
    // NOTES_KEY is a secret users' own servers may name; no other is.
    let config = "secrets:\n  user_usable: [NOTES_KEY]\n";
    let daemon = TestDaemon::start(DaemonOptions {
        files: vec![("config/mcp.yaml".into(), mcp.into()), ("config/config.yaml".into(), config.into())],
        ..Default::default()
    })
    .expect("daemon");
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    // Calls until one is turned away by the backoff (on a busy machine a call may come after
    // a pause has passed, and start the server again).
    let answers: Vec<v1::ToolResponse> = rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
        let mut answers: Vec<v1::ToolResponse> = vec![];
        while answers.len() < 6 && !answers.last().is_some_and(|answer| answer.content.contains("times in a row")) {
            let answer = agent.agents.request_tool_execution(call("mcp__crash__hello")).await;
            answers.push(answer.unwrap_or_else(|status| panic!("{status:?}\n{}", daemon.log_text())).into_inner());
        }
        answers
    });
    let (refused, started) = answers.split_last().expect("answers");
    assert!(started.len() >= 2, "the first restart is at once: {answers:#?}");
    for answer in started {
        assert!(answer.is_error && answer.content.contains("MCP server `crash` could not be started"), "{answer:?}");
        // Why, in the server's own words (and how it exited, when that came in time).
        assert!(answer.content.contains("its last lines on stderr:\n  cannot start"), "{answer:?}");
    }
    let failures = started.len();
    assert!(
        refused.is_error
            && refused.content.contains(&format!("failed {failures} times in a row; it is tried again in")),
        "{answers:#?}"
    );
    drop(coder);
    // `baaaht mcp test` shows the same, rather than asking for itself to be run.
    let tested = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(["mcp", "test", "crash"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht mcp test");
    let said = String::from_utf8_lossy(&tested.stderr);
    assert!(!tested.status.success(), "{said}");
    assert!(
        said.contains("could not be started") && said.contains("its last lines on stderr:\n  cannot start"),
        "{said}"
    );
    assert!(!said.contains("baaaht mcp test crash"), "{said}");

    let added = baaaht_mcp(
        &daemon,
        &[
            "add",
            "notes",
            "--command",
            "notes-mcp",
            "--arg",
            "--verbose",
            "--install",
            "pip:notes-mcp",
            "--env",
            "KEY=${NOTES_KEY}",
            "--egress",
            "api.notes.example",
            "--user",
            "alice",
        ],
    );
    assert!(added.starts_with("added notes to ") && added.contains("users/alice/mcp.yaml"), "{added}");
    assert!(added.contains("`baaaht mcp test notes --user alice`"), "{added}");
    let alices = baaaht_mcp(&daemon, &["list", "--user", "alice"]);
    assert!(alices.contains("notes (user:alice, stopped)\n  command: notes-mcp --verbose\n  install: pip:notes-mcp\n  env:     KEY\n  egress:  api.notes.example"), "{alices}");
    assert!(alices.contains("crash (system, stopped)"), "{alices}");
    let bobs = baaaht_mcp(&daemon, &["list", "--user", "bob"]);
    assert!(!bobs.contains("notes") && bobs.contains("crash"), "{bobs}");
    let refused = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(["mcp", "add", "bad", "--command", "x", "--role", "assistant", "--user", "alice"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht mcp add");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("server `bad`: role `assistant` is not one of"), "{said}");
    // A user's server may name only the secrets an admin let users name, and never a provider's key.
    for (env, why) in [
        ("K=${ANTHROPIC_API_KEY}", "`${ANTHROPIC_API_KEY}` is an LLM provider's key: it never leaves the daemon"),
        ("K=Bearer ${OTHER_KEY}", "`${OTHER_KEY}` is not a secret users' and groups' own servers and skills may use"),
    ] {
        let refused = std::process::Command::new(baaaht_tests::bin("baaaht"))
            .args(["mcp", "add", "leaky", "--command", "x", "--env", env, "--user", "alice"])
            .env("BAAAHT_SOCKET", daemon.socket())
            .output()
            .expect("baaaht mcp add");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success()
                && said.contains(why)
                && said.contains("secrets.user_usable") == env.contains("OTHER"),
            "{said}"
        );
    }
    assert_eq!(baaaht_mcp(&daemon, &["rm", "notes", "--user", "alice"]), "removed notes\n");
    assert!(!baaaht_mcp(&daemon, &["list", "--user", "alice"]).contains("notes"));
    let again = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(["mcp", "rm", "notes", "--user", "alice"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht mcp rm");
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success() && said.contains("no server `notes`"), "{said}");
}

/// A user's mcp.yaml written by hand (as a skill or a person with the folder could) that names
/// a provider's key or a secret no admin let users name: its server is not started, and the
/// value goes nowhere.
#[test]
fn a_users_own_server_never_gets_a_provider_key_or_an_unlisted_secret() {
    let rt = baaaht_tests::runtime();
    let script = serde_json::to_string(NET_SERVER).expect("JSON");
    let mcp = format!(
        "servers:\n  leaky:\n    command: bash\n    args: [-c, {script}]\n    env: {{K: '${{ANTHROPIC_API_KEY}}'}}\n    roles: [coder]\n  \
         nosy:\n    command: bash\n    args: [-c, {script}]\n    env: {{K: '${{HOME}}'}}\n    roles: [coder]\n"
    );
    let daemon = TestDaemon::start(DaemonOptions {
        files: vec![("users/baaaht-self-test/mcp.yaml".into(), mcp)],
        env: vec![("ANTHROPIC_API_KEY".into(), "sk-ant-canary-0042".into())],
        ..Default::default()
    })
    .expect("daemon");
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
        for (server, why) in [
            ("leaky", "`${ANTHROPIC_API_KEY}` is an LLM provider's key"),
            ("nosy", "`${HOME}` is not a secret users' and groups' own servers and skills may use"),
        ] {
            let answer = agent.agents.request_tool_execution(call(&format!("mcp__{server}__env"))).await;
            let text = match answer {
                Ok(answer) => answer.into_inner().content,
                Err(status) => status.message().to_string(),
            };
            assert!(text.contains(why) && !text.contains("sk-ant-canary-0042"), "{server}: {text}");
        }
    });
    let inspected = baaaht_tests::docker(&["ps", "-aq"]).expect("ps");
    for id in inspected.lines() {
        let config = baaaht_tests::docker(&["inspect", id]).unwrap_or_default();
        assert!(!config.contains("sk-ant-canary-0042"), "a container holds the provider's key");
    }
    let refused: Vec<_> = daemon.audit("secret").into_iter().filter(|r| r["outcome"] == "refused").collect();
    assert!(refused.iter().any(|r| r["detail"]["name"] == "ANTHROPIC_API_KEY"), "{refused:?}");
    drop(coder);
}

/// A server whose tool description is 200 KB and whose answer is a 6 MB line: the agents are
/// offered a description cut to size (and told so), and the call is answered with the
/// answer's beginning as soon as it passes what the client takes, not after the call's timeout.
const HUGE_SERVER: &str = r#"while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$line" in
    *'"method":"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"huge","version":"1"}}}\n' "$id" ;;
    *'"method":"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"flood","description":"' "$id"
      head -c 204800 /dev/zero | tr '\0' d
      printf '","inputSchema":{"type":"object","properties":{}}}]}}\n' ;;
    *'"method":"tools/call"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"start of the flood ' "$id"
      head -c 6000000 /dev/zero | tr '\0' a
      printf '"}],"isError":false}}\n' ;;
  esac
done
"#;

#[test]
fn a_servers_huge_description_and_answer_are_cut_to_size_and_said_so() {
    let rt = baaaht_tests::runtime();
    let mcp = format!(
        "servers:\n  huge:\n    command: sh\n    args: [-c, {}]\n    roles: [coder]\n    timeout: 300\n",
        serde_json::to_string(HUGE_SERVER).expect("JSON")
    );
    let daemon =
        TestDaemon::start(DaemonOptions { files: vec![("config/mcp.yaml".into(), mcp)], ..Default::default() })
            .expect("daemon");
    let tools = baaaht_mcp(&daemon, &["test", "huge", "--user", "baaaht-self-test"]);
    assert!(tools.contains("[description cut by baaaht: "), "{}", &tools[..tools.len().min(3000)]);
    assert!(tools.len() < 8 << 10, "the whole description is not shown: {} bytes", tools.len());
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
        let answer = agent.agents.request_tool_execution(call("mcp__huge__flood")).await.expect("answered");
        let answer = answer.into_inner();
        assert!(!answer.is_error, "{}", &answer.content[..answer.content.len().min(500)]);
        assert!(answer.content.starts_with("start of the flood aaaa"), "{}", &answer.content[..100]);
        assert!(answer.content.len() < 70 << 10, "{} bytes", answer.content.len());
        assert!(answer.content.contains("[truncated: "), "the cut is said");
    });
    drop(coder);
}

/// A server with the tools `look` (what it sees of the allowlisted folders), `remember` (adds
/// a line to a file in its own folder and counts them) and `workspace` (the calling session's
/// files).
const FILES_SERVER: &str = r#"answer() { printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}]}}\n' "$1" "$(printf '%s' "$2" | tr '\n"\\' '   ')"; }
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$line" in
    *'"method":"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"files","version":"1"}}}\n' "$id" ;;
    *'"method":"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"look","inputSchema":{"type":"object"}},{"name":"remember","inputSchema":{"type":"object"}},{"name":"workspace","inputSchema":{"type":"object"}}]}}\n' "$id" ;;
    *'"name":"look"'*) answer "$id" "$(cat /project/site/index.html; if echo x > /project/reference/w 2>/dev/null; then echo reference-written; else echo reference-read-only; fi)" ;;
    *'"name":"remember"'*) echo seen >> "$MCP_STATE_DIR/log"; answer "$id" "$MCP_STATE_DIR: $(wc -l < "$MCP_STATE_DIR/log")" ;;
    *'"name":"workspace"'*) answer "$id" "$(ls /workspace)" ;;
  esac
done
"#;

#[test]
fn a_server_sees_its_allowlisted_folders_the_callers_workspace_and_keeps_its_own_state() {
    use serde_json::json;
    let rt = baaaht_tests::runtime();
    let projects = baaaht_tests::Projects::new().expect("the projects");
    let (site, reference) = (&projects.site, &projects.reference);
    let server = json!({"servers": {"files": {
        "command": "sh", "args": ["-c", FILES_SERVER], "roles": ["coder"], "idle_timeout": 600,
        // Asked read-write, the reference stays read-only: the allowlist says so.
        "mounts": [{"host": site, "read_write": true}, {"host": reference, "read_write": true}],
        "state": true, "workspace": true,
    }}});
    // A user's own server may not both see folders and reach the network.
    let leaky = "servers:\n  leaky:\n    command: sh\n    workspace: true\n    egress: [example.com]\n";
    let daemon = TestDaemon::start(DaemonOptions {
        files: vec![
            ("config/mount-allowlist.json".into(), projects.allowlist.clone()),
            ("config/mcp.yaml".into(), server.to_string()),
            ("users/alice/mcp.yaml".into(), leaky.into()),
        ],
        ..Default::default()
    })
    .expect("daemon");
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    let ask = |tool: &str| {
        rt.block_on(async {
            let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
            let answer = agent.agents.request_tool_execution(call(tool)).await;
            answer.unwrap_or_else(|status| panic!("{status:?}\n{}", daemon.log_text())).into_inner()
        })
    };
    let looked = ask("mcp__files__look");
    assert_eq!(looked.content.trim(), "<h1>site</h1> reference-read-only", "{looked:?}");
    assert_eq!(ask("mcp__files__remember").content, "/state: 1");
    assert_eq!(ask("mcp__files__remember").content, "/state: 2");
    // The Coder writes in its session's workspace; the server sees it there.
    let written = rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
        let request = v1::ToolRequest {
            tool: "write_file".into(),
            params_json: json!({"path": "draft.md", "content": "# draft\n"}).to_string(),
            ..v1::ToolRequest::default()
        };
        agent.agents.request_tool_execution(request).await.expect("write_file").into_inner()
    });
    assert!(!written.is_error, "{written:?}");
    assert!(ask("mcp__files__workspace").content.contains("draft.md"), "the session's workspace");
    // Its own folder outlives its container.
    let ours = daemon.recorded_containers();
    let running = baaaht_tests::docker(&["ps", "--format", "{{.Names}}"]).expect("docker ps");
    let server = running.lines().find(|n| n.starts_with("baaaht-mcp-") && ours.iter().any(|o| o == n)).expect("ours");
    baaaht_tests::docker(&["rm", "-f", server]).expect("docker rm");
    assert_eq!(ask("mcp__files__remember").content, "/state: 3", "{}", daemon.log_text());
    let listed = baaaht_mcp(&daemon, &["list", "--user", "alice"]);
    assert!(
        listed.contains(&format!(
            "mounts:  {} -> /project/site (rw), {} -> /project/reference (ro)",
            site.display(),
            reference.display()
        )),
        "{listed}"
    );
    assert!(listed.contains("state:   its own folder at /state"), "{listed}");
    assert!(listed.contains("not used:") && listed.contains("may mount folders or reach the network"), "{listed}");
    drop(coder);
}

#[test]
fn the_memory_server_from_npm_keeps_its_graph_in_its_own_folder_across_restarts() {
    let rt = baaaht_tests::runtime();
    // README's example, with its version pinned, for the Coder, and a timeout.
    let mcp = "servers:\n  memory:\n    command: mcp-server-memory\n    \
               install: [{source: npm, name: '@modelcontextprotocol/server-memory@2026.8.31'}]\n    \
               env: {MEMORY_FILE_PATH: /state/memory.json}\n    state: true\n    roles: [coder]\n    timeout: 60\n";
    let daemon =
        TestDaemon::start(DaemonOptions { files: vec![("config/mcp.yaml".into(), mcp.into())], ..Default::default() })
            .expect("daemon");
    // Its layer is built on the first start.
    let tested = baaaht_mcp(&daemon, &["test", "memory", "--user", "alice"]);
    assert!(tested.contains("mcp__memory__create_entities") && tested.contains("mcp__memory__read_graph"), "{tested}");
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    let ask = |tool: &str, params: serde_json::Value| {
        rt.block_on(async {
            let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
            let request =
                v1::ToolRequest { tool: tool.into(), params_json: params.to_string(), ..v1::ToolRequest::default() };
            let answer = agent.agents.request_tool_execution(request).await;
            answer.unwrap_or_else(|status| panic!("{status:?}\n{}", daemon.log_text())).into_inner()
        })
    };
    let entity = serde_json::json!({"entities": [{"name": "Alice", "entityType": "person", "observations": ["likes jasmine tea"]}]});
    let created = ask("mcp__memory__create_entities", entity);
    assert!(!created.is_error, "{created:?}");
    // Its container goes (as after its idle time, or a crash); what it knew stays.
    let ours = daemon.recorded_containers();
    let running = baaaht_tests::docker(&["ps", "--format", "{{.Names}}"]).expect("docker ps");
    for server in running.lines().filter(|n| n.starts_with("baaaht-mcp-") && ours.iter().any(|o| o == n)) {
        baaaht_tests::docker(&["rm", "-f", server]).expect("docker rm");
    }
    let graph = ask("mcp__memory__read_graph", serde_json::json!({}));
    assert!(!graph.is_error && graph.content.contains("likes jasmine tea"), "{graph:?}\n{}", daemon.log_text());
    drop(coder);
}

/// A server added while a Coder runs is offered to it from its next turn: the same Coder that
/// had no such tool in the first turn calls it in the second.
#[test]
fn a_server_added_mid_conversation_is_offered_from_the_next_turn() {
    use baaaht_tests::fake_provider::{anthropic_answer, Answer, Asked, Responder};
    use baaaht_tests::scenario;
    use serde_json::json;
    let rt = baaaht_tests::runtime();
    let brain = Answer::Respond(Responder(std::sync::Arc::new(move |request| {
        let asked = Asked::of(request);
        if asked.offers("delegate") {
            return scenario::assistant_asks_the_coder(&asked, "Tell the time in UTC.");
        }
        if asked.offers("exec") {
            if !asked.offers("mcp__time__get_current_time") {
                return anthropic_answer("I have no time tool.", &[]);
            }
            return match asked.turn_results.len() {
                0 => anthropic_answer("", &[("toolu_time", "mcp__time__get_current_time", json!({"timezone": "UTC"}))]),
                _ => anthropic_answer(&asked.turn_results.join("\n"), &[]),
            };
        }
        anthropic_answer("I was not expecting to be asked.", &[])
    })));
    let (_fake, daemon) = scenario::start(&rt, brain, DaemonOptions::default()).expect("daemon");
    let first =
        scenario::turn_on(&rt, &daemon, scenario::message(scenario::user("alice"), "alice", "What time is it?"));
    let reply = first.reply.expect("a reply").content;
    assert!(reply.contains("I have no time tool."), "{reply}\n{}", daemon.log_text());
    let coders =
        || -> Vec<String> { daemon.recorded_containers().into_iter().filter(|name| name.contains("coder")).collect() };
    let before = coders();
    assert_eq!(before.len(), 1, "{before:?}");
    let added = baaaht_mcp(
        &daemon,
        &[
            "add",
            "time",
            "--command",
            "mcp-server-time",
            "--install",
            "pip:mcp-server-time==2026.10.19",
            "--role",
            "coder",
        ],
    );
    assert!(added.contains("time"), "{added}");
    // Its layer (pip) is built before it answers: `mcp tools` waits for that, as a person would
    // look before asking (a turn offers only the servers that are up within 20 s).
    let listed = baaaht_mcp(&daemon, &["tools", "time", "--user", "alice"]);
    assert!(listed.contains("get_current_time"), "{listed}");
    let mut message = scenario::message(scenario::user("alice"), "alice", "And now?");
    message.session_id = first.session.clone();
    let second = scenario::turn_on(&rt, &daemon, message);
    let reply = second.reply.expect("a reply").content;
    assert!(reply.contains("\"timezone\": \"UTC\""), "the new server answered: {reply}\n{}", daemon.log_text());
    assert_eq!(coders(), before, "the same Coder, started before the server was added");
}
