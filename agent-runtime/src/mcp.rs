//! `baaaht-agent mcp`: the init of an MCP server's container. It asks the daemon how to start
//! the server (an `McpLaunch` over its socket, so secrets never sit in the container's
//! configuration), runs it as its only child with nothing of the relay's environment, and
//! relays: the daemon's bytes to the server's standard input, its standard output back, and its
//! standard error as log lines. It ends when the server does, or when the daemon hangs up.

use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use baaaht_proto::client::{connect, Backoff, ConnectOptions};
use baaaht_proto::v1;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;

use crate::egress::{AskedBy, Tunneled, Tunnels, Upstream};

/// PATH of the server's process; HOME is the container's scratch space.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const HOME: &str = "/tmp";
/// The longest stderr line sent up; the rest of a longer one is dropped.
const MAX_LOG_LINE: usize = 4096;

fn up(kind: v1::mcp_up::Kind) -> v1::McpUp {
    v1::McpUp { kind: Some(kind) }
}

/// A tunnel's message in the relay's stream.
fn tunneled(tunneled: Tunneled) -> v1::McpUp {
    use v1::mcp_up::Kind as Up;
    up(match tunneled {
        Tunneled::Open(open) => Up::EgressOpen(open),
        Tunneled::Data(data) => Up::EgressData(data),
        Tunneled::Close(close) => Up::EgressClose(close),
        Tunneled::Ack(ack) => Up::EgressAck(ack),
    })
}

/// Connects to the daemon on `socket` and relays one server until it ends.
pub fn run(socket: &Path) -> Result<v1::McpExited, String> {
    let token = crate::reaper::init_token("relay")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the async runtime: {error}"))?;
    runtime.block_on(async move {
        crate::reaper::reap_as_init()?;
        let options = ConnectOptions { token: Some(token), correlation_id: None, backoff: Backoff::PERSISTENT };
        let mut client = connect(socket, options).await.map_err(|error| error.to_string())?;
        let (sender, receiver) = mpsc::channel(16);
        let hello = v1::RunnerHello { version: env!("CARGO_PKG_VERSION").into() };
        sender.send(up(v1::mcp_up::Kind::Hello(hello))).await.map_err(|_closed| "the stream closed".to_string())?;
        let down = client
            .agents
            .relay_mcp(tokio_stream::wrappers::ReceiverStream::new(receiver))
            .await
            .map_err(|status| status.message().to_string())?
            .into_inner()
            .map(|item| item.map_err(|status| status.message().to_string()));
        relay(down, sender).await
    })
}

/// Takes the launch from `down`, starts the server and relays until it exits (its exit is
/// sent up and returned). The end of `down` closes the server's standard input.
pub async fn relay(
    mut down: impl tokio_stream::Stream<Item = Result<v1::McpDown, String>> + Unpin + Send + 'static,
    sender: mpsc::Sender<v1::McpUp>,
) -> Result<v1::McpExited, String> {
    use v1::mcp_down::Kind as Down;
    use v1::mcp_up::Kind as Up;
    let launch = loop {
        match down.next().await {
            Some(Ok(v1::McpDown { kind: Some(Down::Launch(launch)) })) => break launch,
            Some(Ok(v1::McpDown { kind: Some(Down::HealthCheck(probe)) })) => {
                let answer = health(&probe, "healthy", "the relay waits for the launch");
                sender.send(up(Up::Health(answer))).await.map_err(|_closed| "the stream closed".to_string())?;
            }
            Some(Ok(_)) => return Err("the daemon sent input before the launch".into()),
            Some(Err(error)) => return Err(error),
            None => return Err("the daemon closed the stream before the launch".into()),
        }
    };
    let mut command = Command::new(&launch.command);
    command
        .args(&launch.args)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", HOME)
        .envs(crate::tools::exec::kept_env())
        .envs(&launch.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let tunnels = Tunnels::default();
    if launch.egress {
        let upstream = Upstream { sender: sender.clone(), wrap: tunneled };
        let port = crate::egress::listen(tunnels.clone(), upstream, AskedBy::default(), None).await?;
        command.envs(crate::egress::proxy_env(port));
    }
    let mut spawned =
        crate::reaper::spawn(&mut command).map_err(|error| format!("cannot start `{}`: {error}", launch.command))?;
    let pid = rustix::process::Pid::from_raw(spawned.child.id() as i32);
    let pipes = (spawned.child.stdin.take(), spawned.child.stdout.take(), spawned.child.stderr.take());
    let (Some(stdin), Some(stdout), Some(stderr)) = pipes else {
        return Err("the server's standard streams were not piped".into());
    };
    let mut stdin = tokio::process::ChildStdin::from_std(stdin).map_err(|error| error.to_string())?;
    let mut stdout = tokio::process::ChildStdout::from_std(stdout).map_err(|error| error.to_string())?;
    let stderr = tokio::process::ChildStderr::from_std(stderr).map_err(|error| error.to_string())?;
    let (alive_tx, alive) = tokio::sync::watch::channel(true);
    let exited = tokio::task::spawn_blocking(move || {
        let status = loop {
            match spawned.wait_timeout(Duration::from_secs(3600)) {
                Ok(Some(status)) => break Ok(status),
                Ok(None) => continue,
                Err(error) => break Err(error.to_string()),
            }
        };
        // silent-ok: nobody may be watching any more.
        let _ = alive_tx.send(false);
        status
    });
    let out = {
        let sender = sender.clone();
        async move {
            let mut buffer = vec![0u8; 64 * 1024];
            loop {
                match stdout.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if sender.send(up(Up::Stdout(buffer[..n].to_vec()))).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    };
    let log = {
        let sender = sender.clone();
        async move {
            let mut lines = tokio::io::BufReader::new(stderr).split(b'\n');
            while let Ok(Some(mut line)) = lines.next_segment().await {
                line.truncate(MAX_LOG_LINE);
                let text = String::from_utf8_lossy(&line).into_owned();
                if sender.send(up(Up::Stderr(text))).await.is_err() {
                    return;
                }
            }
        }
    };
    let input = {
        let sender = sender.clone();
        async move {
            while let Some(message) = down.next().await {
                match message {
                    Ok(v1::McpDown { kind: Some(Down::Stdin(bytes)) }) => {
                        if stdin.write_all(&bytes).await.is_err() || stdin.flush().await.is_err() {
                            break;
                        }
                    }
                    Ok(v1::McpDown { kind: Some(Down::EgressOpened(opened)) }) => tunnels.opened(opened),
                    Ok(v1::McpDown { kind: Some(Down::EgressData(data)) }) => {
                        let id = data.id;
                        let close = Tunneled::Close(v1::EgressClose { id, write_only: false });
                        if tunnels.data(data) && sender.send(tunneled(close)).await.is_err() {
                            break;
                        }
                    }
                    Ok(v1::McpDown { kind: Some(Down::EgressClose(closed)) }) => tunnels.closed(closed),
                    Ok(v1::McpDown { kind: Some(Down::EgressAck(ack)) }) => tunnels.acked(ack),
                    Ok(v1::McpDown { kind: Some(Down::HealthCheck(probe)) }) => {
                        let answer = if *alive.borrow() {
                            health(&probe, "healthy", "the server runs")
                        } else {
                            health(&probe, "unhealthy", "the server has exited")
                        };
                        if sender.send(up(Up::Health(answer))).await.is_err() {
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            // The daemon is gone or done: the server reads the end of its input and stops; one
            // that does not is asked to (SIGTERM), then made to (SIGKILL).
            drop(stdin);
            let mut alive = alive;
            for signal in [rustix::process::Signal::TERM, rustix::process::Signal::KILL] {
                let ended = tokio::time::timeout(Duration::from_secs(5), alive.wait_for(|alive| !*alive)).await;
                if ended.is_ok() {
                    return;
                }
                if let Some(pid) = pid {
                    // silent-ok: it may have ended in between.
                    let _ = rustix::process::kill_process(pid, signal);
                }
            }
        }
    };
    let relayed = async {
        tokio::join!(out, log);
    };
    // The input side ends with the daemon; the server's end is what ends the relay.
    let input = tokio::spawn(input);
    relayed.await;
    let status = exited.await.map_err(|error| error.to_string())??;
    let exit = v1::McpExited {
        code: status.code().unwrap_or(-1),
        signal: status.signal().map(signal_name).unwrap_or_default(),
    };
    // silent-ok: the daemon may already have hung up.
    let _ = sender.send(up(Up::Exited(exit.clone()))).await;
    // The exit (and the lines before it) reach the daemon before the relay ends with them:
    // the stream takes what is queued, then the daemon hangs up once it has read it (a while
    // at most for each).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while sender.capacity() < sender.max_capacity() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(sender);
    // silent-ok: a daemon that keeps the stream open is not waited for longer.
    let _ = tokio::time::timeout(Duration::from_secs(2), input).await;
    Ok(exit)
}

fn health(probe: &v1::HealthCheckRequest, status: &str, message: &str) -> v1::HealthCheckResponse {
    v1::HealthCheckResponse {
        status: status.into(),
        message: message.into(),
        probe: probe.probe,
        ..v1::HealthCheckResponse::default()
    }
}

fn signal_name(signal: i32) -> String {
    rustix::process::Signal::from_named_raw(signal).map_or_else(|| format!("signal {signal}"), |s| format!("{s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(command: &str, args: &[&str], env: &[(&str, &str)]) -> v1::McpDown {
        v1::McpDown {
            kind: Some(v1::mcp_down::Kind::Launch(v1::McpLaunch {
                command: command.into(),
                args: args.iter().map(|a| a.to_string()).collect(),
                env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                egress: false,
            })),
        }
    }

    fn stdin(bytes: &[u8]) -> v1::McpDown {
        v1::McpDown { kind: Some(v1::mcp_down::Kind::Stdin(bytes.to_vec())) }
    }

    /// Relays `messages` to a server and collects what came up, until it exits.
    async fn relayed(messages: Vec<v1::McpDown>) -> (Vec<v1::mcp_up::Kind>, Result<v1::McpExited, String>) {
        let (sender, mut receiver) = mpsc::channel(64);
        let down = tokio_stream::iter(messages.into_iter().map(Ok));
        let exit = relay(down, sender).await;
        let mut seen = vec![];
        while let Ok(message) = receiver.try_recv() {
            seen.extend(message.kind);
        }
        (seen, exit)
    }

    #[tokio::test]
    async fn bytes_go_down_to_the_server_and_its_output_comes_back_until_it_exits() {
        let (seen, exit) = relayed(vec![launch("cat", &[], &[]), stdin(b"{\"jsonrpc\":\"2.0\"}\n")]).await;
        let stdout: Vec<u8> = seen
            .iter()
            .filter_map(|kind| match kind {
                v1::mcp_up::Kind::Stdout(bytes) => Some(bytes.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(stdout, b"{\"jsonrpc\":\"2.0\"}\n");
        assert_eq!(exit, Ok(v1::McpExited { code: 0, signal: String::new() }));
        assert!(matches!(seen.last(), Some(v1::mcp_up::Kind::Exited(_))), "{seen:?}");
    }

    #[tokio::test]
    async fn the_server_gets_its_env_and_nothing_of_the_relays() {
        std::env::set_var("RELAY_ONLY_SECRET", "leak");
        let script = "echo \"key=$API_KEY home=$HOME other=${RELAY_ONLY_SECRET:-none}\" >&2; exit 3";
        let (seen, exit) = relayed(vec![launch("sh", &["-c", script], &[("API_KEY", "k-1")])]).await;
        let logged: Vec<&String> = seen
            .iter()
            .filter_map(|kind| match kind {
                v1::mcp_up::Kind::Stderr(line) => Some(line),
                _ => None,
            })
            .collect();
        assert_eq!(logged, ["key=k-1 home=/tmp other=none"]);
        assert_eq!(exit.map(|exit| exit.code), Ok(3));
    }

    #[tokio::test]
    async fn a_server_that_cannot_start_says_which() {
        let (_, exit) = relayed(vec![launch("/nonexistent/mcp-server", &[], &[])]).await;
        let error = exit.expect_err("no such program");
        assert!(error.starts_with("cannot start `/nonexistent/mcp-server`"), "{error}");
        let (_, exit) = relayed(vec![stdin(b"x")]).await;
        assert_eq!(exit, Err("the daemon sent input before the launch".into()));
    }

    /// The server's proxy variables lead to the relay, which opens each CONNECT through the
    /// daemon (here the test): a refusal is the client's 403, an open tunnel carries bytes both
    /// ways, and what is not HTTP for the proxy is a 405.
    #[tokio::test]
    async fn a_servers_connect_is_tunnelled_through_the_daemon() {
        use v1::mcp_down::Kind as Down;
        use v1::mcp_up::Kind as Up;
        let script = r#"port=${HTTPS_PROXY##*:}
ask() { exec 3<>/dev/tcp/127.0.0.1/$port; printf "$1" >&3; IFS= read -r status <&3; echo "$status"; }
ask 'CONNECT refused.example:443 HTTP/1.1\r\n\r\n' >&2
exec 3<>/dev/tcp/127.0.0.1/$port
printf 'CONNECT open.example:443 HTTP/1.1\r\n\r\nping\n' >&3
IFS= read -r status <&3; IFS= read -r blank <&3; IFS= read -r echoed <&3
echo "$status|$echoed" >&2
ask 'SSH-2.0-OpenSSH_9.2\r\n\r\n' >&2
"#;
        let mut start = launch("bash", &["-c", script], &[]);
        if let Some(Down::Launch(launch)) = &mut start.kind {
            launch.egress = true;
        }
        let (down, from_test) = mpsc::channel(16);
        down.send(Ok(start)).await.expect("send");
        let (sender, mut receiver) = mpsc::channel(64);
        let relayed = tokio::spawn(relay(tokio_stream::wrappers::ReceiverStream::new(from_test), sender));
        let mut opened = vec![];
        let mut logged = vec![];
        while let Some(message) = receiver.recv().await {
            let reply = match message.kind {
                Some(Up::EgressOpen(open)) => {
                    opened.push(format!("{}:{}", open.host, open.port));
                    let refused = if open.host == "refused.example" { "not on the list" } else { "" };
                    Some(Down::EgressOpened(v1::EgressOpened { id: open.id, refused: refused.into() }))
                }
                Some(Up::EgressData(data)) => {
                    Some(Down::EgressData(v1::EgressData { id: data.id, data: b"pong\n".to_vec() }))
                }
                Some(Up::Stderr(line)) => {
                    logged.push(line);
                    None
                }
                Some(Up::Exited(_)) => break,
                _ => None,
            };
            if let Some(kind) = reply {
                down.send(Ok(v1::McpDown { kind: Some(kind) })).await.expect("send");
            }
        }
        relayed.await.expect("join").expect("relayed");
        assert_eq!(opened, ["refused.example:443", "open.example:443"]);
        assert_eq!(
            logged,
            [
                "HTTP/1.1 403 Forbidden\r",
                "HTTP/1.1 200 Connection established\r|pong",
                "HTTP/1.1 405 Method Not Allowed\r"
            ]
        );
    }
}
