//! Every byte of a download through a Coder's egress proxy arrives, in order, under both
//! isolation tiers (runc and gVisor), as plain HTTP, through a CONNECT tunnel, and as https
//! through a CONNECT (passed on as it is, the edge handing the far end to the relay): 100 MB of
//! seeded pseudo-random bytes, 20 times each way, half of them read slowly by the command (so
//! the daemon outpaces it), and the SHA-256 of what arrived compared with what was sent. A far
//! end that fails mid-answer reaches the command as a reset, never as a clean, shorter answer.
//! The only server reached is the test's own, on the container bridge.

use std::io::{BufRead as _, Write as _};
use std::sync::Arc;

use baaaht_proto::client;
use baaaht_proto::v1;
use baaaht_tests::{DaemonOptions, LingeringAgent, TestDaemon};

/// The body of a whole download.
const SIZE: usize = 100 << 20;
/// Downloads per mode and tier.
const RUNS: usize = 20;

/// `SIZE` bytes from a seeded xorshift: a shift, a drop or a repeat changes the hash.
fn body() -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut body = Vec::with_capacity(SIZE);
    while body.len() < SIZE {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        body.extend_from_slice(&state.to_le_bytes());
    }
    body.truncate(SIZE);
    body
}

/// A server on the bridge: `/whole` answers `body` with its length; `/reset` sends 10 MB of it
/// with no length (the end of the connection ends it) and then resets the connection.
fn server(body: Arc<Vec<u8>>) -> (std::net::IpAddr, u16) {
    let bridge = baaaht_tests::bridge_address().expect("bridge address");
    let listener = std::net::TcpListener::bind((bridge, 0)).expect("listen on the bridge");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let body = body.clone();
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(stream);
                let mut first = String::new();
                // silent-ok: a client that went away gets nothing.
                let _ = reader.read_line(&mut first);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let stream = reader.get_mut();
                if first.starts_with("GET /reset ") {
                    let head = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n";
                    // silent-ok: the point is the reset.
                    let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(&body[..10 << 20]));
                    let _ = socket_reset(stream);
                } else {
                    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\nConnection: close\r\n\r\n");
                    // silent-ok: a client that went away gets nothing.
                    let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(&body));
                }
            });
        }
    });
    (bridge, port)
}

/// The same server over TLS (Python's `ssl`, the certificate `issued_for` the bridge): `/whole`
/// and `/reset` as above, the body read from a file.
const TLS_SERVER: &str = r#"
import socket, ssl, struct, sys, threading
host, cert, key, path = sys.argv[1:5]
body = open(path, "rb").read()
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
listener = socket.create_server((host, 0))
print(listener.getsockname()[1], flush=True)
def serve(conn):
    try:
        s = context.wrap_socket(conn, server_side=True)
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(65536)
            if not chunk:
                return
            got += chunk
        if got.startswith(b"GET /reset "):
            s.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body[:10 << 20])
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        s.close()
    except OSError:
        pass
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"#;

/// A server the test started: stopped when dropped, however the test ended.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        // silent-ok: the server is the test's own; it may have stopped already.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts [`TLS_SERVER`] on the bridge with `body`; the process and its port.
fn tls_server(dir: &std::path::Path, bridge: std::net::IpAddr, body: &[u8]) -> (Child, u16) {
    let (_ca, cert, key) = baaaht_tests::web::issued_for(dir, &bridge.to_string()).expect("a certificate");
    let path = dir.join("body");
    std::fs::write(&path, body).expect("the body");
    let mut child = std::process::Command::new("python3")
        .args(["-c", TLS_SERVER, &bridge.to_string()])
        .args([&cert, &key, &path])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let stdout = child.stdout.take().expect("stdout");
    let child = Child(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line).expect("the port");
    (child, line.trim().parse().unwrap_or_else(|_| panic!("the TLS server's port: {line:?}")))
}

/// Makes `stream` close with a reset (`SO_LINGER` 0) when it is dropped.
fn socket_reset(stream: &std::net::TcpStream) -> std::io::Result<()> {
    socket2::SockRef::from(stream).set_linger(Some(std::time::Duration::ZERO))
}

/// Downloads `PATH` from `HOST:PORT` `RUNS` times through the proxy (`proxy`: plain HTTP in
/// absolute form; `tunnel`: a CONNECT; `tls`: https through a CONNECT, the certificate not
/// checked), every other run read slowly; prints, per run, the bytes
/// of the body, their SHA-256 and how the connection ended (`eof` or `reset`).
const CLIENT: &str = r#"
import hashlib, os, socket, ssl, sys, time
host, port, mode, path, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
proxy = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
get = "GET {} HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n" % (host, port)
class Tls:
    """TLS over the socket's own reads, so that how the connection ended (its end or a reset) shows."""
    def __init__(self, s):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        self.s, self.inc, self.out = s, ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.inc, self.out)
        self.step(self.tls.do_handshake)
    def step(self, op):
        while True:
            try:
                result = op()
                if self.out.pending:
                    self.s.sendall(self.out.read())
                return result
            except ssl.SSLWantReadError:
                if self.out.pending:
                    self.s.sendall(self.out.read())
                data = self.s.recv(65536)
                if not data:
                    return b""
                self.inc.write(data)
    def sendall(self, data):
        self.step(lambda: self.tls.write(data))
    def recv(self, n):
        try:
            return self.step(lambda: self.tls.read(n))
        except ssl.SSLZeroReturnError:
            return b""
    def close(self):
        self.s.close()
for run in range(runs):
    s = socket.create_connection(("127.0.0.1", proxy))
    if mode == "proxy":
        s.sendall(get.format("http://%s:%d%s" % (host, port, path)).encode())
    else:
        s.sendall(("CONNECT %s:%d HTTP/1.1\r\n\r\n" % (host, port)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(1)
        if b" 200 " not in head.split(b"\r\n")[0]:
            sys.exit("refused: %r" % head)
        if mode == "tls":
            s = Tls(s)
        s.sendall(get.format(path).encode())
    got, end = b"", "eof"
    try:
        while b"\r\n\r\n" not in got:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        head, _, body = got.partition(b"\r\n\r\n")
        digest, size = hashlib.sha256(body), len(body)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
            # A millisecond per 64 KiB read (a TLS socket gives 16 KiB at a time).
            if run % 2 == 1 and size // 65536 != (size - len(chunk)) // 65536:
                time.sleep(0.001)
    except ConnectionResetError:
        end = "reset"
    print(run, size, digest.hexdigest(), end, flush=True)
    s.close()
"#;

/// Runs `command` in `coder`'s container; what it printed.
fn exec(
    rt: &tokio::runtime::Runtime,
    daemon: &TestDaemon,
    coder: &LingeringAgent,
    tool: &str,
    params: serde_json::Value,
) -> String {
    rt.block_on(async {
        let mut agent = client::connect(&coder.socket, coder.options()).await.expect("connect");
        let request =
            v1::ToolRequest { tool: tool.into(), params_json: params.to_string(), ..v1::ToolRequest::default() };
        let answer = agent.agents.request_tool_execution(request).await;
        let answer = answer.unwrap_or_else(|status| panic!("{status:?}\n{}", daemon.log_text())).into_inner();
        assert!(!answer.is_error, "{tool}: {}\n{}", answer.content, daemon.log_text());
        answer.content
    })
}

/// The runs `printed`: (bytes, sha256, end) each.
fn runs(printed: &str) -> Vec<(usize, String, String)> {
    printed
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (fields.len() == 4).then(|| (fields[1].parse().unwrap_or(0), fields[2].to_string(), fields[3].to_string()))
        })
        .collect()
}

fn every_byte_arrives_under(tier: &str) {
    let rt = baaaht_tests::runtime();
    let body = Arc::new(body());
    let sha = data_encoding::HEXLOWER.encode(ring::digest::digest(&ring::digest::SHA256, &body).as_ref());
    let (bridge, port) = server(body.clone());
    let dir = tempfile::tempdir().expect("tempdir");
    let (_tls, tls_port) = tls_server(dir.path(), bridge, &body);
    let (target, tls_target) = (format!("{bridge}:{port}"), format!("{bridge}:{tls_port}"));
    let daemon = TestDaemon::start(DaemonOptions {
        files: vec![
            (
                "config/config.yaml".into(),
                format!(
                // 2 GB through gVisor's ptrace platform on a loaded 2-core runner takes minutes:
                // the test is about bytes, not speed.
                "tools:\n  timeout_overrides: {{ exec: 900 }}\n  web_proxy:\n    allow: ['{target}', '{tls_target}']\n"
            ),
            ),
            (
                "users/baaaht-self-test/egress.yaml".into(),
                format!(
                    "rules:\n  - host: '{target}'\n    action: allow\n  - host: '{tls_target}'\n    action: allow\n"
                ),
            ),
        ],
        env: vec![("BAAAHT__CONTAINER__ISOLATION".into(), format!("{{\"tool\":\"{tier}\",\"coder\":\"{tier}\"}}"))],
        ..Default::default()
    })
    .expect("daemon");
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    exec(&rt, &daemon, &coder, "write_file", serde_json::json!({ "path": "get.py", "content": CLIENT }));
    // gVisor's kernel says it is 4.4.0; the host's is newer.
    let kernel = exec(&rt, &daemon, &coder, "exec", serde_json::json!({ "command": "uname -r" }));
    assert_eq!(kernel.contains("4.4.0"), tier == "gvisor", "{tier}: {kernel}");
    for (mode, port) in [("proxy", port), ("tunnel", port), ("tls", tls_port)] {
        let command = format!("python3 get.py {bridge} {port} {mode} /whole {RUNS}");
        let printed = exec(&rt, &daemon, &coder, "exec", serde_json::json!({ "command": command, "timeout": 900 }));
        let whole = runs(&printed);
        assert_eq!(whole.len(), RUNS, "{tier} {mode}: {printed}");
        for (run, (bytes, digest, end)) in whole.iter().enumerate() {
            assert_eq!((*bytes, digest.as_str(), end.as_str()), (SIZE, sha.as_str(), "eof"), "{tier} {mode} run {run}");
        }
        // A far end that fails mid-answer: what came before, then a reset.
        let command = format!("python3 get.py {bridge} {port} {mode} /reset 1");
        let printed = exec(&rt, &daemon, &coder, "exec", serde_json::json!({ "command": command, "timeout": 120 }));
        let cut = runs(&printed);
        assert!(cut.len() == 1 && cut[0].2 == "reset", "{tier} {mode}: a cut answer ends in a reset: {printed}");
    }
    drop(coder);
}

#[test]
fn every_byte_of_a_download_arrives_through_the_proxy_under_runc() {
    every_byte_arrives_under("runc");
}

#[test]
fn every_byte_of_a_download_arrives_through_the_proxy_under_gvisor() {
    every_byte_arrives_under("gvisor");
}
