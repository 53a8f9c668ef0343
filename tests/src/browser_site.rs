//! The browser tests' and benchmark's site, served by Python's `http.server` on the container
//! bridge (never another address): pages built by JavaScript, a two-step form, a login kept in
//! a cookie, a download, a redirect to the metadata address, and hostile pages.

use std::io::BufRead as _;

use anyhow::Context as _;

/// The test's site: pages built by JavaScript, a two-step form, a login kept in a cookie, a
/// download, a redirect to the metadata address, and hostile pages.
pub const SITE: &str = r#"
import http.server, socketserver, sys, urllib.parse
class Page(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def send(self, body, status=200, headers=()):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        cookie = self.headers.get("Cookie") or ""
        if url.path == "/js":
            self.send("<title>Trains</title><div id=out></div><script>setTimeout(function(){"
                      "document.getElementById('out').textContent='Built by JavaScript: ' + (6*7) + ' trains today';},200)</script>")
        elif url.path == "/form":
            self.send("<title>Book</title><h1>Step 1</h1><form action=/form2><label>Name <input name=name></label>"
                      "<button>Next</button></form>")
        elif url.path == "/form2":
            name = query.get("name", "")
            self.send("<title>Book</title><h1>Step 2</h1><form action=/done><input type=hidden name=name value='%s'>"
                      "<label>Class <select name=class><option>Second</option><option>First</option></select></label>"
                      "<button>Book it</button></form>" % name)
        elif url.path == "/done":
            self.send("<title>Booked</title><p>Booked %s in %s class</p>" % (query.get("name"), query.get("class")))
        elif url.path == "/login":
            self.send("<title>Log in</title><form method=post action=/login><label>User <input name=user></label>"
                      "<button>Log in</button></form>")
        elif url.path == "/account":
            if "session=jane" in cookie:
                self.send("<title>Account</title><body style='background:#1d3557;color:#f1faee;font:48px serif'>"
                          "<h1 style='background:#e63946'>Welcome back, Jane</h1><p>Your trains: 3</p></body>")
            else:
                self.send("<title>Account</title><p>Please log in</p>")
        elif url.path == "/report.csv":
            data = b"day,trains\nmonday,42\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/csv")
            self.send_header("Content-Disposition", "attachment; filename=report.csv")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif url.path == "/covered":
            self.send("<title>Order</title><button onclick=\"location='/done?name=kept&class=none'\">Cancel order</button>"
                      "<a aria-hidden=true href='/done?name=taken&class=overlay' style='position:absolute;left:0;top:0;"
                      "width:100%;height:100%;opacity:0.01'></a>")
        elif url.path == "/away":
            self.send("<title>Away</title><a href=/js target=_blank>Trains in a new window</a>")
        elif url.path == "/files":
            self.send("<title>Files</title><a href=/report.csv>The report</a>")
        elif url.path == "/to-metadata":
            self.send("", 302, [("Location", "http://169.254.169.254/latest/meta-data/")])
        elif url.path == "/loop":
            self.send("<title>Busy</title><script>while (true) {}</script>")
        elif url.path == "/bomb":
            self.send("<title>Bomb</title><p>Growing</p><script>const kept = [];"
                      "while (true) { const b = new Uint8Array(16 << 20); b.fill(7); kept.push(b); }</script>")
        elif url.path == "/hijack":
            self.send("<title>Search</title><label>Search <input id=search></label>"
                      "<iframe id=frame srcdoc='<input id=steal>' style='width:1px;height:1px;opacity:0.01'></iframe>"
                      "<script>document.getElementById('search').addEventListener('focus', function() {"
                      "document.getElementById('frame').contentDocument.getElementById('steal').focus(); });</script>")
        elif url.path == "/popups":
            self.send("<title>Popups</title><p>Many windows</p><script>for (let i = 0; i < 30; i++) window.open('/js');"
                      "alert('you won');</script>")
        else:
            self.send("<p>not here</p>", 404)
    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
        if form.get("user") == "jane":
            self.send("", 303, [("Location", "/account"), ("Set-Cookie", "session=jane; Path=/; Max-Age=3600")])
        else:
            self.send("<p>Who?</p>", 403)
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
server = Server((sys.argv[1], 0), Page)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// A server the test started: stopped when dropped, however the test ended.
pub struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        // silent-ok: the server is the test's own; it may have stopped already.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts [`SITE`] on the container bridge; the process (stopped when dropped) and its
/// `host:port`.
pub fn serve() -> anyhow::Result<(Child, String)> {
    let bridge = crate::bridge_address()?;
    let mut child = std::process::Command::new("python3")
        .args(["-c", SITE, &bridge.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("python3")?;
    let stdout = child.stdout.take().context("its stdout")?;
    let child = Child(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line).context("its port")?;
    let port: u16 = line.trim().parse().with_context(|| format!("its port: {line:?}"))?;
    Ok((child, format!("{bridge}:{port}")))
}

/// What a tool call of the agent `agent` answered: its text, whether it was an error, its
/// metadata (a refusal by the daemon as its status message).
pub fn call_tool(
    rt: &tokio::runtime::Runtime,
    agent: &crate::LingeringAgent,
    tool: &str,
    params: serde_json::Value,
) -> (String, bool, std::collections::HashMap<String, String>) {
    rt.block_on(async {
        let mut client =
            baaaht_proto::client::connect(&agent.socket, agent.options()).await.expect("connect to the daemon");
        let request = baaaht_proto::v1::ToolRequest {
            tool: tool.into(),
            params_json: params.to_string(),
            ..baaaht_proto::v1::ToolRequest::default()
        };
        match client.agents.request_tool_execution(request).await {
            Ok(answer) => {
                let answer = answer.into_inner();
                (answer.content, answer.is_error, answer.metadata)
            }
            Err(status) => (status.message().to_string(), true, Default::default()),
        }
    })
}

/// Calls the browser as the agent `agent` ([`call_tool`]).
pub fn browse(
    rt: &tokio::runtime::Runtime,
    agent: &crate::LingeringAgent,
    params: serde_json::Value,
) -> (String, bool, std::collections::HashMap<String, String>) {
    call_tool(rt, agent, "browser", params)
}

/// The number the page's reading gives the line holding `what`.
pub fn reference(page: &str, what: &str) -> u64 {
    page.lines()
        .find(|line| line.starts_with('[') && line.contains(what))
        .and_then(|line| line[1..].split(']').next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no [n] {what} in:\n{page}"))
}

/// The self-test user's events, followed as the CLI (so approvals are asked of it).
pub async fn follow_self_test(
    host: &mut baaaht_proto::client::Client,
) -> tonic::Streaming<baaaht_proto::v1::OrchestratorEvent> {
    let subscription = baaaht_proto::v1::EventSubscription {
        context: Some(crate::scenario::user("baaaht-self-test")),
        session_id: String::new(),
        channel: baaaht_proto::v1::ChannelType::Cli as i32,
        notifies: false,
    };
    host.sessions.subscribe_events(subscription).await.expect("subscribe").into_inner()
}
