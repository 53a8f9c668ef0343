//! `baaaht-agent runner`: the resident tool runner of a session's tool container (DESIGN.md §1).
//! It is the container's init (PID 1): it connects to the daemon over its mounted socket with
//! its token, receives tool calls over ServeTools, runs them one at a time, and after each call
//! kills every other process in the container, so nothing a call started outlives it (also
//! what detached with `setsid` or `nohup`); as init it reaps every child ([`crate::reaper`]).
//! It makes itself non-dumpable, so a command it runs (same uid) cannot read its environment,
//! memory or file descriptors through /proc.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use baaaht_proto::client::{connect, Backoff, ConnectOptions};
use baaaht_proto::{v1, ToolName};
use serde_json::Value;

use crate::egress::{AskedBy, Tunneled, Tunnels, Upstream};
use crate::tools::{self, paths::Mounts, Params, ToolOutput};

/// How this runner was started (its command line).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Where each call's result is also written (file IPC, spec §12.4).
    pub results: Option<PathBuf>,
    /// `results` is on a memory filesystem: a result is not synced to a disk it is not on
    /// (under gVisor each sync is a round trip to the host, on every call).
    pub results_in_memory: bool,
    /// Where the `message` tool queues messages; none in a Coder's container.
    pub messages: Option<PathBuf>,
    /// The workspace's cap in bytes, when no filesystem of that size holds it.
    pub workspace_cap: Option<u64>,
    /// The IPC folder's cap in bytes (the parent of `results`), when no filesystem of that
    /// size holds it.
    pub ipc_cap: Option<u64>,
    /// Serve one call, then wait to be removed (a cold tool container).
    pub once: bool,
    /// What a command's environment needs to reach the egress proxy (set once it listens).
    pub proxy_env: Vec<(&'static str, String)>,
    /// The proxy's tunnels: what the daemon refused during a command goes in its result.
    pub tunnels: Tunnels,
    /// This container is a session's browser ([`crate::browser`]): it serves `browser` calls
    /// only (the workspace, the first mount, holds its profile).
    pub browser: Option<crate::browser::Limits>,
}

/// Runs one call.
pub fn execute(call: &v1::ToolCall, mounts: &Mounts, settings: &Settings) -> v1::ToolResponse {
    let started = Instant::now();
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() as i64);
    let params: Value = match serde_json::from_str(if call.params_json.is_empty() { "{}" } else { &call.params_json }) {
        Ok(value @ Value::Object(_)) => value,
        Ok(other) => return response(error(format!("parameters must be a JSON object, not {other}")), started),
        Err(error_text) => return response(error(format!("parameters are not JSON: {error_text}")), started),
    };
    let tool = ToolName::named(&call.tool);
    let mut output = match tool {
        None => error(format!("unknown tool `{}`", call.tool)),
        Some(ToolName::Exec) => {
            let limit = Duration::from_secs(u64::from(call.timeout_seconds.max(1)));
            // What was refused before this command is not its own.
            settings.tunnels.take_refused();
            // A command that writes a request file (tasks/) names the request it came from; it
            // is the runner's own variable, as the proxy's are (a skill's `env` is not).
            let mut own = settings.proxy_env.clone();
            if !call.correlation_id.is_empty() {
                own.push(("BAAAHT_CORRELATION_ID", call.correlation_id.clone()));
            }
            let mut output = tools::exec::exec(&Params(&params), mounts, limit, &call.env, &own, &call.placeholders)
                .unwrap_or_else(ToolOutput::from);
            tools::exec::refused(&mut output.content, &settings.tunnels.take_refused());
            output
        }
        Some(ToolName::Message) => match &settings.messages {
            Some(folder) => {
                tools::message::message(&Params(&params), folder, &call.session, &call.correlation_id, mounts)
                    .unwrap_or_else(ToolOutput::from)
            }
            None => error("this tool container has no message folder".into()),
        },
        Some(file_tool) => tools::run(file_tool, &params, mounts),
    };
    // Only a command starts processes; a file tool's call leaves none to sweep for.
    if tool == Some(ToolName::Exec) && crate::reaper::active() {
        crate::reaper::sweep();
    }
    let writes = matches!(tool, Some(ToolName::Exec | ToolName::WriteFile | ToolName::EditFile));
    let mut over = vec![];
    if let (true, Some(cap), Some(root)) = (writes, settings.workspace_cap, mounts.default_root()) {
        over.extend(tools::quota::enforce(root, cap, since, "the workspace"));
    }
    // Only a command, and a message's files, can write in the IPC folder: no file tool reaches it.
    let ipc = settings
        .results
        .as_deref()
        .and_then(Path::parent)
        .filter(|_| matches!(tool, Some(ToolName::Exec | ToolName::Message)));
    if let (Some(cap), Some(folder)) = (settings.ipc_cap, ipc) {
        if let Ok(root) = Mounts::open(&[(folder.to_path_buf(), true)]) {
            over.extend(root.default_root().and_then(|root| tools::quota::enforce(root, cap, since, "the IPC folder")));
        }
    }
    for over in over {
        output.is_error = true;
        if !output.content.is_empty() && !output.content.ends_with('\n') {
            output.content.push('\n');
        }
        output.content.push_str(&format!("error: {over}\n"));
    }
    response(output, started)
}

/// A tunnel's message in the runner's stream.
fn tunneled(tunneled: Tunneled) -> v1::RunnerMessage {
    use v1::runner_message::Kind;
    let kind = match tunneled {
        Tunneled::Open(open) => Kind::EgressOpen(open),
        Tunneled::Data(data) => Kind::EgressData(data),
        Tunneled::Close(close) => Kind::EgressClose(close),
        Tunneled::Ack(ack) => Kind::EgressAck(ack),
    };
    v1::RunnerMessage { kind: Some(kind) }
}

/// What the call running asks the network for, as the daemon shows it to whoever approves a
/// connection: the tool and, for `exec`, its command or script (cut to 200 characters).
fn asked(call: &v1::ToolCall) -> String {
    let params: Value = serde_json::from_str(&call.params_json).unwrap_or_default();
    let what = params["command"].as_str().or_else(|| params["script"].as_str()).unwrap_or_default();
    let mut asked = if call.tool == ToolName::Browser.as_str() {
        let action = params["action"].as_str().unwrap_or_default();
        let url = params["url"].as_str().unwrap_or_default();
        format!("{}{action} {url}", baaaht_proto::BROWSER_ASKED).trim_end().to_string()
    } else if what.is_empty() {
        call.tool.clone()
    } else {
        format!("{}: {what}", call.tool)
    };
    if asked.len() > 200 {
        let mut cut = 200;
        while !asked.is_char_boundary(cut) {
            cut -= 1;
        }
        asked.truncate(cut);
        asked.push('…');
    }
    asked
}

/// A tool whose call is bounded by its input (one file of at most [`tools::files::MAX_FILE_BYTES`],
/// opened without blocking), so it runs on the runner's own thread: the stream waits for it no
/// longer than for a message. A command, a folder listing or a walk of a tree runs on another,
/// and so does a write whose workspace cap is checked by a walk of its files (`--workspace-cap`,
/// where no filesystem of that size holds it).
fn bounded(tool: ToolName, settings: &Settings) -> bool {
    match tool {
        ToolName::ReadFile => true,
        ToolName::WriteFile | ToolName::EditFile => settings.workspace_cap.is_none(),
        _ => false,
    }
}

fn error(content: String) -> ToolOutput {
    ToolOutput { content, is_error: true, metadata: vec![] }
}

fn response(output: ToolOutput, started: Instant) -> v1::ToolResponse {
    v1::ToolResponse {
        content: output.content,
        is_error: output.is_error,
        duration_ms: started.elapsed().as_millis() as u64,
        metadata: output.metadata.into_iter().collect(),
    }
}

/// Writes a call's result to `{results}/{call_id}.json` atomically (temp, rename; synced, file
/// and folder, unless `in_memory`): the daemon collects it even if it was restarted while the
/// call ran (spec §12.4).
pub fn write_result(
    results: &Path,
    call: &v1::ToolCall,
    response: &v1::ToolResponse,
    in_memory: bool,
) -> std::io::Result<()> {
    use std::io::Write as _;
    let valid = !call.call_id.is_empty()
        && call.call_id.len() <= 128
        && call.call_id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "the call id is not a file name"));
    }
    let record = serde_json::json!({
        "callId": call.call_id,
        "tool": call.tool,
        "content": response.content,
        "isError": response.is_error,
        "durationMs": response.duration_ms,
        "metadata": response.metadata,
        "correlationId": call.correlation_id,
    });
    let temp = results.join(format!(".{}.tmp", call.call_id));
    let mut file = std::fs::File::create(&temp)?;
    file.write_all(record.to_string().as_bytes())?;
    if !in_memory {
        file.sync_all()?;
    }
    drop(file);
    std::fs::rename(&temp, results.join(format!("{}.json", call.call_id)))?;
    if !in_memory {
        std::fs::File::open(results)?.sync_all()?;
    }
    Ok(())
}

/// Serves calls until the daemon closes the stream; returns why it stopped. With `results`,
/// each call's result is also written there before it is sent.
pub fn run(socket: &Path, mounts: &[(PathBuf, bool)], mut settings: Settings) -> Result<(), String> {
    let token = crate::reaper::init_token("runner")?;
    let mounts = Mounts::open(mounts).map_err(|error| format!("cannot open the mounts: {error}"))?;
    tools::paths::probe();
    // A call runs on a thread of its own (the reader goes on meanwhile). The thread stays for
    // the next call however long the pause: made per call after tokio's 10 s, it cost every
    // call at a person's pace a thread's start, which gVisor makes dear.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_keep_alive(Duration::from_secs(24 * 3600))
        .build()
        .map_err(|error| format!("cannot start the async runtime: {error}"))?;
    runtime.block_on(async move {
        crate::reaper::reap_as_init()?;
        // The first call's thread is made now, while the runner waits for its first call.
        let _ready = tokio::task::spawn_blocking(|| ());
        let options = ConnectOptions { token: Some(token), correlation_id: None, backoff: Backoff::PERSISTENT };
        let mut client = connect(socket, options).await.map_err(|error| error.to_string())?;
        // web_fetch calls the daemon's egress proxy over the same connection.
        let mut web = client.clone();
        let (sender, receiver) = tokio::sync::mpsc::channel(4);
        let hello = v1::RunnerMessage {
            kind: Some(v1::runner_message::Kind::Hello(v1::RunnerHello { version: env!("CARGO_PKG_VERSION").into() })),
        };
        sender.send(hello).await.map_err(|_closed| "the outbound stream closed".to_string())?;
        let mut calls = client
            .agents
            .serve_tools(tokio_stream::wrappers::ReceiverStream::new(receiver))
            .await
            .map_err(|status| status.message().to_string())?
            .into_inner();
        // A command's connections out ride this stream to the daemon, which decides.
        let tunnels = Tunnels::default();
        let asked_by = AskedBy::default();
        let upstream = Upstream { sender: sender.clone(), wrap: tunneled };
        // A browser's proxy carries only what its pages asked for.
        let pages = settings.browser.as_ref().map(|_| std::sync::Arc::new(crate::browser::PageHosts::default()));
        let admit = pages.clone().map(|pages| -> crate::egress::Admit {
            std::sync::Arc::new(move |host, port| {
                let pages = pages.clone();
                Box::pin(async move { pages.admits(&host, port).await })
            })
        });
        let port = crate::egress::listen(tunnels.clone(), upstream.clone(), asked_by.clone(), admit).await?;
        settings.proxy_env = crate::egress::proxy_env(port);
        settings.tunnels = tunnels.clone();
        let mut browser = settings.browser.clone().map(|limits| {
            let workspace = mounts.default_root().map(|root| root.at.clone()).unwrap_or_default();
            crate::browser::Browser::new(crate::browser::Settings {
                limits,
                workspace,
                proxy_port: port,
                pages_asked: pages.clone().unwrap_or_default(),
            })
        });
        let mounts = std::sync::Arc::new(mounts);
        let settings = std::sync::Arc::new(settings);
        // Calls run one at a time while the reader goes on, so a health probe (and a tunnel's
        // bytes) are taken even during a long command: only a stuck runner fails a probe.
        let (work, mut queue) = tokio::sync::mpsc::channel::<v1::ToolCall>(4);
        let busy = crate::health::Busy::default();
        let read = async {
            // Owned here: when the daemon's stream ends, the queue closes and the calls end.
            let work = work;
            let closed = || "the outbound stream closed".to_string();
            while let Some(mut call) = calls.message().await.map_err(|status| status.message().to_string())? {
                if let Some(probe) = call.health_check.take() {
                    let health = v1::RunnerMessage { kind: Some(v1::runner_message::Kind::Health(busy.answer(probe))) };
                    sender.send(health).await.map_err(|_closed| closed())?;
                } else if let Some(opened) = call.egress_opened.take() {
                    tunnels.opened(opened);
                } else if let Some(data) = call.egress_data.take() {
                    let id = data.id;
                    if tunnels.data(data) && !upstream.close(id, false).await {
                        return Err(closed());
                    }
                } else if let Some(close) = call.egress_close.take() {
                    tunnels.closed(close);
                } else if let Some(ack) = call.egress_ack.take() {
                    tunnels.acked(ack);
                } else if work.send(call).await.is_err() {
                    break;
                }
            }
            Ok::<(), String>(())
        };
        let serve = async {
            while let Some(call) = queue.recv().await {
                busy.working(true);
                *asked_by.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = asked(&call);
                let mounts = mounts.clone();
                let shared_settings = settings.clone();
                let call_id = call.call_id.clone();
                let record = call.clone();
                let tool = ToolName::named(&call.tool);
                let web_tool = tool.filter(|tool| matches!(tool, ToolName::WebFetch | ToolName::WebSearch));
                let response = if let (Some(ToolName::Browser), Some(browser)) = (tool, browser.as_mut()) {
                    // On this thread: the browser is driven by messages, and its page's
                    // connections out ride the same stream meanwhile.
                    let started = Instant::now();
                    settings.tunnels.take_refused();
                    let limit = Duration::from_secs(u64::from(call.timeout_seconds.max(1)));
                    let output = match serde_json::from_str::<Value>(&call.params_json) {
                        Ok(params @ Value::Object(_)) => browser.call(&params, limit).await,
                        _ => error("parameters must be a JSON object".into()),
                    };
                    let mut output = output;
                    tools::exec::refused(&mut output.content, &settings.tunnels.take_refused());
                    response(output, started)
                } else if browser.is_some() {
                    response(
                        error(format!("this container serves the browser only, not `{}`", call.tool)),
                        Instant::now(),
                    )
                } else if let Some(web_tool) = web_tool {
                    let started = Instant::now();
                    let output = match serde_json::from_str::<Value>(&call.params_json) {
                        Ok(params) if web_tool == ToolName::WebFetch => {
                            tools::web::web_fetch(&mut web, &params).await.unwrap_or_else(ToolOutput::from)
                        }
                        Ok(params) => tools::web::web_search(&mut web, &params).await.unwrap_or_else(ToolOutput::from),
                        Err(problem) => error(format!("parameters are not JSON: {problem}")),
                    };
                    response(output, started)
                } else if tool.is_some_and(|tool| bounded(tool, &settings)) {
                    // On this thread: handing a call of a few microseconds to another costs more
                    // than the call (under gVisor, each wake a round trip to the sandbox's kernel).
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| execute(&call, &mounts, &shared_settings)))
                        .unwrap_or_else(|_panic| response(error("the tool failed".into()), Instant::now()))
                } else {
                    tokio::task::spawn_blocking(move || execute(&call, &mounts, &shared_settings))
                        .await
                        .unwrap_or_else(|panic| response(error(format!("the tool failed: {panic}")), Instant::now()))
                };
                let kept = !tool.is_some_and(ToolName::only_reads);
                if let (Some(results), true) = (&settings.results, kept) {
                    if let Err(problem) = write_result(results, &record, &response, settings.results_in_memory) {
                        eprintln!("baaaht-agent runner: cannot write the result of {}: {problem}", record.call_id);
                    }
                }
                busy.working(false);
                asked_by.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
                let result = v1::RunnerMessage {
                    kind: Some(v1::runner_message::Kind::Result(v1::ToolCallResult {
                        call_id,
                        response: Some(response),
                    })),
                };
                sender.send(result).await.map_err(|_closed| "the outbound stream closed".to_string())?;
                if settings.once {
                    // Wait until the daemon, which has the result, removes this container.
                    std::future::pending::<()>().await;
                }
            }
            Ok::<(), String>(())
        };
        let (read, served) = tokio::join!(read, serve);
        read.and(served)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_the_runner_does_not_have_is_an_error_the_model_reads() {
        let temp = tempfile::tempdir().expect("tempdir");
        let mounts = Mounts::open(&[(temp.path().to_path_buf(), true)]).expect("mounts");
        for tool in ["frobnicate", "delegate", "web_fetch"] {
            let call = v1::ToolCall { tool: tool.into(), params_json: "{}".into(), ..v1::ToolCall::default() };
            let answer = execute(&call, &mounts, &Settings::default());
            assert!(answer.is_error, "{tool}: {}", answer.content);
            assert_eq!(answer.content, format!("unknown tool `{tool}`"));
        }
    }

    #[test]
    fn a_calls_correlation_id_reaches_its_command_and_its_result_file() {
        let temp = tempfile::tempdir().expect("tempdir");
        let (workspace, results) = (temp.path().join("workspace"), temp.path().join("results"));
        std::fs::create_dir_all(&workspace).expect("mkdir");
        std::fs::create_dir_all(&results).expect("mkdir");
        let mounts = Mounts::open(&[(workspace, true)]).expect("mounts");
        let call = v1::ToolCall {
            call_id: "call-1".into(),
            tool: "exec".into(),
            params_json: r#"{"command": "echo \"$BAAAHT_CORRELATION_ID\""}"#.into(),
            timeout_seconds: 10,
            correlation_id: "c-77e1".into(),
            ..v1::ToolCall::default()
        };
        let answer = execute(&call, &mounts, &Settings::default());
        assert!(answer.content.contains("c-77e1"), "{}", answer.content);
        write_result(&results, &call, &answer, false).expect("written");
        let written: Value =
            serde_json::from_slice(&std::fs::read(results.join("call-1.json")).expect("read")).expect("JSON");
        assert_eq!(written["correlationId"], "c-77e1", "{written}");
    }
}
