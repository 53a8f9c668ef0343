//! `baaaht-bench egress`: a 10 MB download by a Coder's command through the tool runner's
//! proxy (plain HTTP; a CONNECT tunnel carrying plain HTTP, which the edge reads request by
//! request; and https through a CONNECT, passed on as it is as for `pip` or `git`), beside the
//! same download from a container on Docker's bridge network, in the same run, with the tool
//! container under gVisor and under runc: time to the first byte and throughput, each measured
//! inside the container by the same Python client.

use std::io::{BufRead as _, Write as _};
use std::process::Command;

use anyhow::{bail, Context as _, Result};
use baaaht_proto::v1;
use baaaht_tests::DaemonOptions;

use crate::{coder, header, Row};

/// The body each download fetches.
const SIZE: usize = 10 << 20;

/// Fetches `http://HOST:PORT/big` (`proxy`: through the proxy in absolute form; `tunnel`:
/// through a CONNECT; `direct`: straight; `tls` and `tlsdirect`: https, through a CONNECT or
/// straight, the certificate not checked) and prints `ttfb_ms total_ms bytes`.
const CLIENT: &str = r#"
import os, socket, ssl, sys, time
host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
get = f"GET {{}} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
started = time.perf_counter()
if mode in ("direct", "tlsdirect"):
    s = socket.create_connection((host, port))
else:
    proxy = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
    s = socket.create_connection(("127.0.0.1", proxy))
if mode == "proxy":
    s.sendall(get.format(f"http://{host}:{port}/big").encode())
elif mode in ("tunnel", "tls"):
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    if b" 200 " not in head.split(b"\r\n")[0]:
        sys.exit(f"refused: {head!r}")
if mode.startswith("tls"):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    s = context.wrap_socket(s)
if mode != "proxy":
    s.sendall(get.format("/big").encode())
def more():
    try:
        return s.recv(1 << 20)
    except ssl.SSLEOFError:
        return b""
first = more()
ttfb = time.perf_counter() - started
received = len(first)
while True:
    chunk = more()
    if not chunk:
        break
    received += len(chunk)
total = time.perf_counter() - started
print(f"{ttfb * 1e3:.3f} {total * 1e3:.3f} {received}")
"#;

/// A server on the bridge answering every request with `SIZE` bytes.
fn big_server() -> Result<(std::net::IpAddr, u16)> {
    let bridge = baaaht_tests::bridge_address()?;
    let listener = std::net::TcpListener::bind((bridge, 0))?;
    let port = listener.local_addr()?.port();
    let body = vec![b'x'; SIZE];
    let body = std::sync::Arc::new(body);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let body = body.clone();
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(stream);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\nConnection: close\r\n\r\n");
                let stream = reader.get_mut();
                // silent-ok: a client that went away gets nothing.
                let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(&body));
            });
        }
    });
    Ok((bridge, port))
}

/// (time to first byte, whole download) in ms, from the client's line.
fn parsed(output: &str) -> Result<(f64, f64)> {
    let line = output.lines().rev().find(|line| line.split(' ').count() == 3).context(output.to_string())?;
    let fields: Vec<&str> = line.split(' ').collect();
    let bytes: usize = fields[2].parse()?;
    if bytes < SIZE {
        bail!("only {bytes} bytes arrived: {output}");
    }
    Ok((fields[0].parse()?, fields[1].parse()?))
}

/// The tiers a Coder's tool container is measured under, with the issue's throughput target.
const TIERS: [(&str, f64); 2] = [("gvisor", 0.5), ("runc", 0.8)];

/// The ways through the runner's proxy, as the client names them and as the table does.
const WAYS: [(&str, &str); 3] =
    [("proxy", "plain http"), ("tunnel", "CONNECT tunnel, plain http"), ("tls", "CONNECT tunnel, https passed on")];

pub(crate) fn run(downloads: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let (bridge, port) = big_server()?;
    let dir = tempfile::tempdir()?;
    let (_ca, cert, key) = baaaht_tests::web::issued_for(dir.path(), &bridge.to_string())?;
    let (_tls_server, tls_port) = crate::edge::https_server(&bridge.to_string(), (&cert, &key), SIZE)?;
    let port_of = |mode: &str| if mode.starts_with("tls") { tls_port } else { port };
    let (target, tls_target) = (format!("{bridge}:{port}"), format!("{bridge}:{tls_port}"));
    let coder_under = |tier: &str| {
        let options = DaemonOptions {
            files: vec![
                (
                    "config/config.yaml".into(),
                    format!("tools:\n  web_proxy:\n    allow: ['{target}', '{tls_target}']\n"),
                ),
                (
                    "users/baaaht-self-test/egress.yaml".into(),
                    format!(
                        "rules:\n  - host: '{target}'\n    action: allow\n  - host: '{tls_target}'\n    action: allow\n"
                    ),
                ),
            ],
            env: vec![(
                "BAAAHT__CONTAINER__ISOLATION".into(),
                serde_json::json!({"tool": tier, "coder": tier}).to_string(),
            )],
            ..Default::default()
        };
        rt.block_on(coder(options))
    };
    let direct = |mode: &str| -> Result<(f64, f64)> {
        let output = Command::new("docker")
            .args(["run", "--rm", "--network", "bridge", "baaaht/base:latest", "python3", "-c", CLIENT])
            .args([bridge.to_string(), port_of(mode).to_string(), mode.into()])
            .output()?;
        if !output.status.success() {
            bail!("docker run failed: {}", String::from_utf8_lossy(&output.stderr));
        }
        parsed(&String::from_utf8_lossy(&output.stdout))
    };
    let row = |name: String, unit: &'static str| Row { name, unit, values: vec![] };
    let mut rows = vec![];
    for (tier, _) in TIERS {
        for (what, unit) in [("time to first byte", "ms"), ("throughput", "MB/s")] {
            for (_, way) in WAYS {
                rows.push(row(format!("{tier}: proxy ({way}): {what}"), unit));
            }
        }
    }
    let mut baseline = [
        row("baseline: bridge network (runc), direct http: time to first byte".into(), "ms"),
        row("baseline: bridge network (runc), direct http: throughput".into(), "MB/s"),
        row("baseline: bridge network (runc), direct https: time to first byte".into(), "ms"),
        row("baseline: bridge network (runc), direct https: throughput".into(), "MB/s"),
    ];
    let mb = SIZE as f64 / 1e6;
    let mut coders = vec![];
    for (tier, _) in TIERS {
        let mut coder = coder_under(tier)?;
        let write = v1::ToolRequest {
            tool: "write_file".into(),
            params_json: serde_json::json!({ "path": "get.py", "content": CLIENT }).to_string(),
            ..v1::ToolRequest::default()
        };
        let wrote = rt.block_on(coder.client.agents.request_tool_execution(write))?.into_inner();
        if wrote.is_error {
            bail!("write_file failed: {}", wrote.content);
        }
        coders.push(coder);
    }
    let through = |coder: &mut crate::Coder, mode: &str| -> Result<(f64, f64)> {
        let command = format!("python3 get.py {bridge} {} {mode}", port_of(mode));
        let request = v1::ToolRequest {
            tool: "exec".into(),
            params_json: serde_json::json!({ "command": command }).to_string(),
            ..v1::ToolRequest::default()
        };
        let answer = rt.block_on(coder.client.agents.request_tool_execution(request))?.into_inner();
        if answer.is_error {
            bail!("the download ({mode}) failed: {}", answer.content);
        }
        parsed(&answer.content)
    };
    // The first of each warms the runner and the path; interleaved, so drift hits all alike.
    for coder in &mut coders {
        through(coder, "proxy")?;
        through(coder, "tls")?;
    }
    direct("direct")?;
    direct("tlsdirect")?;
    let ways = WAYS.len();
    for _ in 0..downloads {
        for (index, coder) in coders.iter_mut().enumerate() {
            for (way, (mode, _)) in WAYS.into_iter().enumerate() {
                let (ttfb, total) = through(coder, mode)?;
                rows[index * 2 * ways + way].values.push(ttfb);
                rows[index * 2 * ways + ways + way].values.push(mb / (total / 1e3));
            }
        }
        for (at, mode) in ["direct", "tlsdirect"].into_iter().enumerate() {
            let (ttfb, total) = direct(mode)?;
            baseline[2 * at].values.push(ttfb);
            baseline[2 * at + 1].values.push(mb / (total / 1e3));
        }
    }
    println!(
        "baaaht-bench egress: {downloads} downloads of {} MB each way, from a Coder's command through the runner's \
         proxy and the daemon (its tool container under gVisor, then runc), beside a container on the bridge \
         network in the same run\n",
        SIZE >> 20
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().chain(baseline.iter_mut()).map(Row::print).collect();
    let at = TIERS.len() * 2 * ways;
    let (ttfb_direct, rate_direct, ttfb_tls_direct, rate_tls_direct) = (p50[at], p50[at + 1], p50[at + 2], p50[at + 3]);
    let mut result = format!(
        "RESULT ttfb_direct_ms={ttfb_direct:.2} mbps_direct={rate_direct:.1} mbps_tls_direct={rate_tls_direct:.1}"
    );
    println!();
    for (index, (tier, target)) in TIERS.into_iter().enumerate() {
        let figures = &p50[index * 2 * ways..(index + 1) * 2 * ways];
        let (ttfb_plain, ttfb_tunnel, ttfb_tls) = (figures[0], figures[1], figures[2]);
        let (rate_plain, rate_tunnel, rate_tls) = (figures[3], figures[4], figures[5]);
        println!(
            "{tier}: first byte +{:.1} ms (plain), +{:.1} ms (tunnel), +{:.1} ms (https) over direct (target ≤ +5 ms); \
             throughput {:.2}× (plain), {:.2}× (tunnel) of direct http, {:.2}× (https) of direct https (target ≥ \
             {target}×)",
            ttfb_plain - ttfb_direct,
            ttfb_tunnel - ttfb_direct,
            ttfb_tls - ttfb_tls_direct,
            rate_plain / rate_direct,
            rate_tunnel / rate_direct,
            rate_tls / rate_tls_direct
        );
        result.push_str(&format!(
            " {tier}_ttfb_plain_ms={ttfb_plain:.2} {tier}_ttfb_tunnel_ms={ttfb_tunnel:.2} {tier}_ttfb_tls_ms={ttfb_tls:.2} \
             {tier}_mbps_plain={rate_plain:.1} {tier}_mbps_tunnel={rate_tunnel:.1} {tier}_mbps_tls={rate_tls:.1} \
             {tier}_vs_direct={:.2} {tier}_tls_vs_direct={:.2}",
            rate_plain.min(rate_tunnel) / rate_direct,
            rate_tls / rate_tls_direct
        ));
    }
    drop(coders);
    // The credential edge and the approval path, each with its own daemon.
    let (bound, unbound) = crate::edge::interception(downloads * 4)?;
    let (asked, allowed) = crate::edge::approval(downloads * 2)?;
    let mut more = [bound, unbound, asked, allowed];
    println!();
    header();
    let p50: Vec<f64> = more.iter_mut().map(Row::print).collect();
    let (bound, unbound, asked, allowed) = (p50[0], p50[1], p50[2], p50[3]);
    println!(
        "\nTLS interception: +{:.1} ms a request over the unbound host (target ≤ +10 ms); an approval request reaches \
         a TUI {asked:.1} ms after the command connects (target ≤ 50 ms; the allowed command's whole answer: \
         {allowed:.1} ms)",
        bound - unbound
    );
    println!("{result} tls_interception_ms={:.2} approval_to_prompt_ms={asked:.2}", bound - unbound);
    Ok(())
}
