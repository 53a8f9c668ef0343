//! `baaaht-bench egress`, its second half: what the credential edge adds to an https request
//! (the daemon terminating TLS for a bound host, swapping the placeholder, and verifying the
//! host onward) beside the same request to an unbound host, whose TLS passes through untouched;
//! and how long an approval request takes from the command's connection to the event a TUI
//! draws its prompt from, beside the same connection to an allowed host answering.

use std::io::BufRead as _;
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _, Result};
use baaaht_proto::v1;
use baaaht_tests::DaemonOptions;
use tokio_stream::StreamExt as _;

use crate::{coder, Row};

/// An https server on `address` answering a GET of `/big` with `big` bytes and any other with
/// "ok", with the certificate and key.
const SERVER: &str = r#"
import http.server, ssl, sys
big = b"x" * int(sys.argv[4])
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = big if self.path == "/big" else b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer((sys.argv[1], 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[2], sys.argv[3])
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// In the Coder's container: `n` https GETs to each port, alternating, each on a new
/// connection through the proxy (a CONNECT, as every https client takes); the bound one with
/// the placeholder in its Authorization header. Prints the times of each, in ms, a line each.
const CLIENT: &str = r#"
import os, sys, time, urllib.request
host, unbound, bound, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def get(port, token):
    headers = {"Authorization": "Bearer " + token} if token else {}
    request = urllib.request.Request(f"https://{host}:{port}/small", headers=headers)
    started = time.perf_counter()
    assert urllib.request.urlopen(request, timeout=30).read() == b"ok"
    return (time.perf_counter() - started) * 1e3
token = os.environ["BENCH_TOKEN"]
get(unbound, ""); get(bound, token)
times = ([], [])
for _ in range(n):
    times[0].append(get(unbound, ""))
    times[1].append(get(bound, token))
for series in times:
    print(" ".join(f"{t:.3f}" for t in series))
"#;

/// A server the bench started: stopped when dropped, whatever ended the bench's run.
pub(crate) struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        // silent-ok: the server is the bench's own; it may have stopped already.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts [`SERVER`] on `address` (`/big` is `big` bytes); the process and its port.
pub(crate) fn https_server(
    address: &str,
    (cert, key): (&std::path::Path, &std::path::Path),
    big: usize,
) -> Result<(Server, u16)> {
    let mut child = Command::new("python3")
        .args(["-c", SERVER, address])
        .arg(cert)
        .arg(key)
        .arg(big.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .context("python3")?;
    let stdout = child.stdout.take().context("stdout")?;
    let server = Server(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    Ok((server, line.trim().parse().context("the server's port")?))
}

/// Runs `command` in the Coder's container; its output.
fn exec(rt: &tokio::runtime::Runtime, coder: &mut crate::Coder, command: &str) -> Result<String> {
    let request = v1::ToolRequest {
        tool: "exec".into(),
        params_json: serde_json::json!({ "command": command, "timeout": 300 }).to_string(),
        ..v1::ToolRequest::default()
    };
    let answer = rt.block_on(coder.client.agents.request_tool_execution(request))?.into_inner();
    if answer.is_error {
        bail!("{command}: {}", answer.content);
    }
    Ok(answer.content)
}

/// The per-request times of the unbound and the bound host, in ms: `requests` of each (at most
/// 55: a session's commands open at most 120 connections a minute through the proxy).
pub(crate) fn interception(requests: usize) -> Result<(Row, Row)> {
    let requests = requests.min(55);
    let rt = baaaht_tests::runtime();
    let dir = tempfile::tempdir()?;
    let bridge = baaaht_tests::bridge_address()?.to_string();
    let (ca, cert, key) = baaaht_tests::web::issued_for(dir.path(), &bridge)?;
    let (_unbound_server, unbound) = https_server(&bridge, (&cert, &key), 0)?;
    let (_bound_server, bound) = https_server(&bridge, (&cert, &key), 0)?;
    let options = DaemonOptions {
        env: vec![("SSL_CERT_FILE".into(), ca.display().to_string()), ("BENCH_TOKEN".into(), "bench-secret".into())],
        files: vec![
            (
                "config/config.yaml".into(),
                format!(
                    "tools:\n  web_proxy:\n    allow: ['{bridge}:{unbound}', '{bridge}:{bound}']\nsecrets:\n  user_usable: [BENCH_TOKEN]\n"
                ),
            ),
            ("users/baaaht-self-test/egress.yaml".into(), format!("rules:\n  - host: '{bridge}'\n    action: allow\n")),
            (
                "users/baaaht-self-test/credentials.yaml".into(),
                format!("credentials:\n  - name: BENCH_TOKEN\n    hosts: ['{bridge}:{bound}']\n"),
            ),
        ],
        ..Default::default()
    };
    let mut coder = rt.block_on(coder(options))?;
    exec(&rt, &mut coder, &format!("cat > get.py <<'EOF'\n{CLIENT}\nEOF"))?;
    let output = exec(&rt, &mut coder, &format!("python3 get.py {bridge} {unbound} {bound} {requests}"))?;
    let series: Vec<Vec<f64>> = output
        .lines()
        .filter(|line| !line.is_empty() && line.split(' ').all(|field| field.parse::<f64>().is_ok()))
        .map(|line| line.split(' ').filter_map(|field| field.parse().ok()).collect())
        .collect();
    if series.len() != 2 {
        bail!("the client printed: {output}");
    }
    let row = |name: &str, values: &[f64]| Row { name: name.into(), unit: "ms", values: values.to_vec() };
    Ok((
        row("https GET, host bound to a credential (TLS terminated, swapped)", &series[1]),
        row("baseline: https GET, unbound host (TLS passes through)", &series[0]),
    ))
}

/// In the Coder's container: the wall-clock time, then a GET of `url`; prints both the time
/// and what came back.
const ASKING: &str = r#"
import sys, time, urllib.request, urllib.error
print(f"{time.time():.6f}", flush=True)
started = time.perf_counter()
try:
    urllib.request.urlopen(sys.argv[1], timeout=30).read()
except urllib.error.HTTPError as error:
    error.read()
print(f"{(time.perf_counter() - started) * 1e3:.3f}", flush=True)
"#;

/// From the command's connection to the approval request's event (ms), and the same command
/// against an allowed host, start to answer.
pub(crate) fn approval(rounds: usize) -> Result<(Row, Row)> {
    let rt = baaaht_tests::runtime();
    let (bridge, allowed) = baaaht_tests::bridge_server();
    let (_, asked) = baaaht_tests::bridge_server();
    let options = DaemonOptions {
        files: vec![
            (
                "config/config.yaml".into(),
                format!("tools:\n  web_proxy:\n    allow: ['{bridge}:{allowed}', '{bridge}:{asked}']\n"),
            ),
            (
                "users/baaaht-self-test/egress.yaml".into(),
                format!("rules:\n  - host: '{bridge}:{allowed}'\n    action: allow\n"),
            ),
        ],
        ..Default::default()
    };
    let mut coder = rt.block_on(coder(options))?;
    exec(&rt, &mut coder, &format!("cat > ask.py <<'EOF'\n{ASKING}\nEOF"))?;
    let mut events = rt.block_on(async {
        let mut host = baaaht_proto::client::connect(&coder.daemon.socket(), Default::default()).await?;
        let context = v1::ContextRef { r#type: v1::ContextType::User as i32, id: "baaaht-self-test".into() };
        let subscription = v1::EventSubscription {
            context: Some(context),
            channel: v1::ChannelType::Tui as i32,
            ..Default::default()
        };
        anyhow::Ok((host.sessions.subscribe_events(subscription).await?.into_inner(), host))
    })?;
    let (mut asked_ms, mut allowed_ms) = (vec![], vec![]);
    for round in 0..=rounds {
        // The same command, allowed: its whole answer.
        let output = exec(&rt, &mut coder, &format!("python3 ask.py http://{bridge}:{allowed}/x"))?;
        let took: f64 =
            output.lines().filter_map(|line| line.trim().parse::<f64>().ok()).nth(1).context(output.clone())?;
        // Asked: from the command's start to the request's event here, then denied at once.
        let command = format!("python3 ask.py http://{bridge}:{asked}/x");
        let request = v1::ToolRequest {
            tool: "exec".into(),
            params_json: serde_json::json!({ "command": command }).to_string(),
            ..v1::ToolRequest::default()
        };
        let mut client = coder.client.clone();
        let running = rt.spawn(async move { client.agents.request_tool_execution(request).await });
        let (event_at, id) = rt.block_on(async {
            loop {
                let event = tokio::time::timeout(std::time::Duration::from_secs(30), events.0.next())
                    .await
                    .context("no approval request within 30 s")?
                    .context("the event stream ended")??;
                if let Some(v1::orchestrator_event::Event::Approval(request)) = event.event {
                    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs_f64();
                    return anyhow::Ok((now, request.id));
                }
            }
        })?;
        rt.block_on(events.1.sessions.answer_approval(v1::ApprovalAnswer { id, decision: "deny".into() }))?;
        let answered = rt.block_on(running)??.into_inner();
        let started: f64 = answered
            .content
            .lines()
            .find_map(|line| line.trim().parse::<f64>().ok())
            .context(answered.content.clone())?;
        // The first round warms the path.
        if round > 0 {
            asked_ms.push((event_at - started) * 1e3);
            allowed_ms.push(took);
        }
    }
    let row = |name: &str, values: Vec<f64>| Row { name: name.into(), unit: "ms", values };
    Ok((
        row("approval: command's connection to the request event (the TUI's prompt)", asked_ms),
        row("baseline: the same command, allowed host, start to answer", allowed_ms),
    ))
}
