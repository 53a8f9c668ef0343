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

/// PATH of the server's process; HOME is the container's scratch space.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const HOME: &str = "/tmp";
/// The longest stderr line sent up; the rest of a longer one is dropped.
const MAX_LOG_LINE: usize = 4096;

fn up(kind: v1::mcp_up::Kind) -> v1::McpUp {
    v1::McpUp { kind: Some(kind) }
}

/// Connects to the daemon on `socket` and relays one server until it ends.
pub fn run(socket: &Path) -> Result<v1::McpExited, String> {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|errno| format!("cannot make the relay non-dumpable: {errno}"))?;
    let token = std::env::var(baaaht_proto::CONTAINER_TOKEN_ENV)
        .map_err(|_unset| format!("{} is not set", baaaht_proto::CONTAINER_TOKEN_ENV))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the async runtime: {error}"))?;
    runtime.block_on(async move {
        if std::process::id() == 1 {
            let mut exited = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
                .map_err(|error| format!("cannot watch SIGCHLD: {error}"))?;
            crate::reaper::activate();
            tokio::spawn(async move {
                while exited.recv().await.is_some() {
                    crate::reaper::reap();
                }
            });
        }
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
        .envs(&launch.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut spawned =
        crate::reaper::spawn(&mut command).map_err(|error| format!("cannot start `{}`: {error}", launch.command))?;
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
            // The daemon is gone or done: the server reads the end of its input and stops.
            drop(stdin);
        }
    };
    let relayed = async {
        tokio::join!(out, log);
    };
    // The input side ends with the daemon; the server's end is what ends the relay.
    tokio::spawn(input);
    relayed.await;
    let status = exited.await.map_err(|error| error.to_string())??;
    let exit = v1::McpExited {
        code: status.code().unwrap_or(-1),
        signal: status.signal().map(signal_name).unwrap_or_default(),
    };
    // silent-ok: the daemon may already have hung up.
    let _ = sender.send(up(Up::Exited(exit.clone()))).await;
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
}
