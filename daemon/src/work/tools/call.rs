//! A tool call an agent asks for (RequestToolExecution), from the request to its answer: the
//! role's policy, an `exec`'s command check and a skill script's secrets, the call id and the
//! answer recorded for a call asked again, the warm or cold runner, an MCP server's tool, and
//! each call's audit line, metrics and progress event. The one road to a tool, beside the
//! runners as `llm::call::Calls` is beside the LLM gateway.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use super::{Runners, ToolAnswer, ToolsError};
use crate::base::auth::Live;
use crate::base::auth::{Caller, ContainerIdentity, Role};
use crate::base::config::{LoadedConfig, ToolMode, ToolName};
use crate::base::datadir::DataDir;
use crate::base::metrics::Metrics;
use crate::guard::audit::{Audit, Kind, Record};
use crate::guard::secrets::Handout;
use crate::sandbox::policy::Policy;
use crate::store::events::EventBus;
use crate::work::agents::AgentPool;
use crate::work::ipc::Ipc;
use crate::work::mcp::pool::McpPool;

/// The tools that read or write a session's files.
const FILE_TOOLS: &[ToolName] = &[
    ToolName::ReadFile,
    ToolName::WriteFile,
    ToolName::EditFile,
    ToolName::ListDir,
    ToolName::Grep,
    ToolName::Find,
    ToolName::Exec,
];

/// A call as the agent asked for it.
#[derive(Debug, Clone, Default)]
pub struct Asked {
    /// A runner's tool, or `mcp__{server}__{tool}`.
    pub tool: String,
    pub params_json: String,
    /// What the agent asks for; the tool's configured timeout caps it. 0: that timeout.
    pub timeout_seconds: u32,
    /// The file name of its result (spec §12.4); empty: a new one.
    pub tool_call_id: String,
}

/// Why a call was not made.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The policy or the caller's role forbids it; audited.
    #[error("{0}")]
    Refused(String),
    /// The request itself is wrong.
    #[error("{0}")]
    Invalid(String),
    /// It names an MCP server the caller's context does not have.
    #[error("{0}")]
    NotFound(String),
    /// The MCP server cannot be started as configured (its env).
    #[error("{0}")]
    Unready(String),
    #[error(transparent)]
    Tools(#[from] ToolsError),
}

/// An MCP tool as an agent is offered it.
/// A writing call's turn and the folders it can change, kept for the turn's undo.
struct Undoing {
    turn: crate::store::undo::Turn,
    roots: Vec<crate::store::undo::Root>,
    tool: String,
    path: Option<String>,
}

impl Undoing {
    /// Before the call: a folder the turn has not looked at yet is looked at. What goes wrong
    /// is logged, and the call goes on (the undo then says what it cannot put back).
    async fn before(&self, undo: &Arc<crate::store::undo::Undo>) {
        let (undo, turn, roots) = (undo.clone(), self.turn.clone(), self.roots.clone());
        let looked = tokio::task::spawn_blocking(move || undo.before(&turn, &roots)).await;
        if let Ok(Err(error)) = looked {
            tracing::warn!(error = %baaaht_proto::error_chain(&error), session = %self.turn.session, "cannot keep the folders before a writing call; its turn's undo may not put everything back");
        }
    }

    /// After the call: what it changed is kept and recorded. When it cannot be (a full disk),
    /// the turn's people are told, once a turn.
    async fn after(self, undo: &Arc<crate::store::undo::Undo>, events: &EventBus) {
        use crate::store::events::{Event, Kind, Notice};
        let (turn, undo, undo_of) = (self.turn.clone(), undo.clone(), undo.clone());
        let kept =
            tokio::task::spawn_blocking(move || undo.after(&self.turn, &self.tool, self.path.as_deref(), &self.roots))
                .await;
        let Ok(Err(error)) = kept else { return };
        tracing::warn!(error = %baaaht_proto::error_chain(&error), session = %turn.session, "cannot keep what a writing call changed; its turn's undo cannot put it back");
        if matches!(error, crate::store::undo::UndoError::DiskFull) && undo_of.tell_once(&turn.entry) {
            let notice =
                Notice { title: "Undo".into(), content: error.to_string(), is_error: true, ..Default::default() };
            let event = Event::of_turn(&turn.session, &turn.user_turn, &turn.correlation, Kind::Notice(notice));
            events.publish(&turn.context, event);
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Offered {
    /// `mcp__{server}__{tool}`.
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// What a tool call's work reaches, handed over when the daemon is put together.
#[derive(Debug)]
pub struct Calls {
    pub runners: Arc<Runners>,
    pub mcp: Arc<McpPool>,
    pub policy: Arc<Policy>,
    pub ipc: Arc<Ipc>,
    pub secrets: Handout,
    pub audit: Audit,
    pub metrics: Arc<Metrics>,
    pub loaded: Arc<LoadedConfig>,
    pub data_dir: DataDir,
    /// Where each call's progress is told, to the turn its agent is working for.
    pub events: Arc<EventBus>,
    pub agents: Arc<AgentPool>,
    /// What a call's turn may still do, and which answers taint it.
    pub taints: Arc<crate::net::taint::Taints>,
    /// Where an acting tool of a marked turn is asked of a person.
    pub approvals: Arc<crate::net::egress::approvals::Approvals>,
    /// What a call's parameters pass on their way into a container, and its answer on its
    /// way back.
    pub redact: crate::guard::redact::Redact,
    /// Where what a writing call changes is kept for the undo of its turn.
    pub undo: Arc<crate::store::undo::Undo>,
}

/// The most text an MCP tool's answer gives the model, as the built-in tools.
const MAX_MCP_OUTPUT: usize = 64 << 10;

/// How long a `message` call waits for its delivery.
const MESSAGE_DELIVERY: Duration = Duration::from_secs(5);

/// How long an agent's registration waits for MCP servers to list their tools.
const OFFER_WAIT: Duration = Duration::from_secs(20);

impl Calls {
    /// Makes the call `asked` of the agent `identity` (`correlation_id`: the request's): no
    /// secret goes in or comes back (DESIGN.md §10.3); a turn that read untrusted content may
    /// not `message`; an answer from outside taints the turn.
    pub async fn execute(
        self: &Arc<Self>,
        identity: &Arc<ContainerIdentity>,
        correlation_id: &str,
        mut asked: Asked,
    ) -> Result<ToolAnswer, CallError> {
        use crate::guard::redact::Place;
        let live = self.agents.live(&identity.name);
        let _calling = live.as_ref().map(|live| self.taints.calling(live));
        if asked.tool == ToolName::Message.as_str() {
            match live.as_ref() {
                Some(live) => self.taints.allow(live, crate::net::taint::Way::Message),
                // Between turns, the session's mark decides.
                None => {
                    let principal = format!("container:{}", identity.role);
                    self.taints.allow_session(&identity.session_id, crate::net::taint::Way::Message, &principal)
                }
            }
            .map_err(CallError::Refused)?;
        }
        asked.params_json = self.redact.clean_values(Place::ToolCall, asked.params_json);
        let browsing = asked.tool == ToolName::Browser.as_str();
        if browsing {
            let params = serde_json::from_str(&asked.params_json).unwrap_or_default();
            self.browser_may(identity, live.as_ref(), &params).await.map_err(CallError::Refused)?;
        }
        let untrusted = self.untrusted_source(identity, &asked);
        let messaging = asked.tool == ToolName::Message.as_str();
        // What it does with the session's files, which carry the marks of the turns that wrote
        // them (a status change time has whole seconds: from the second before).
        let files = ToolName::named(&asked.tool).filter(|tool| FILE_TOOLS.contains(tool)).map(|tool| {
            let params = serde_json::from_str::<serde_json::Value>(&asked.params_json).unwrap_or_default();
            (tool, params["path"].as_str().map(str::to_string), crate::base::state::now_seconds() as i64 - 1)
        });
        // What the call sent, for what its answer only echoes back (not shown by the server).
        let sent = if untrusted.is_some() { asked.params_json.clone() } else { String::new() };
        let undoing = live.as_ref().and_then(|live| self.undo_of(identity, live, &asked));
        if let Some(undoing) = &undoing {
            undoing.before(&self.undo).await;
        }
        let ran = self.run(identity, correlation_id, asked).await;
        if let (Ok(_), Some(live), Some(files)) = (&ran, &live, files) {
            self.follow_files(live, files).await;
        }
        // Kept whether or not the call failed (a command stopped half way may have written),
        // with the turn's mark as it is now that its files were followed.
        if let Some(mut undoing) = undoing {
            let marked = self.taints.mark(&undoing.turn.session, &undoing.turn.user_turn);
            undoing.turn.marked = marked.and_then(|mark| mark.sources.first().cloned());
            undoing.after(&self.undo, &self.events).await;
        }
        let mut answer = ran?;
        if messaging && !answer.is_error {
            // The message (and its files) reaches the channels before the agent goes on, so
            // before the turn that sent it ends.
            self.ipc.flush(MESSAGE_DELIVERY).await;
        }
        answer.content = self.redact.clean_string(Place::ToolResult, answer.content);
        if let (Some(live), Some((mut source, server))) = (&live, untrusted) {
            // A web tool that failed read nothing from outside (what the web said reached the
            // turn through the proxy, which marked what it showed); a server's answer, failed
            // or not, is all its own; so is the browser's (a dialog's words, a download's name,
            // a list's options reach the model in its errors too); a page the browser read
            // shows what its links lead to.
            if server || browsing || !answer.is_error {
                if let Some(url) = answer.metadata.get("url").filter(|_| browsing) {
                    source = format!("the browser at {}", crate::net::egress::proxy::redacted(url));
                }
                let taints = self.taints.clone();
                let (live, read) = (live.clone(), (server || browsing).then(|| answer.content.clone()));
                let asked = sent;
                // The mark is saved to disk before the answer reaches the agent.
                let marking = move || {
                    if let Some(read) = read {
                        taints.shown(&live.session, Some(&live.user_turn), &read, &asked);
                    }
                    taints.taint(&live, &source)
                };
                tokio::task::spawn_blocking(marking).await.ok();
            }
        }
        if browsing {
            self.browser_done(identity, live.as_ref(), &answer).await;
        }
        Ok(answer)
    }

    /// Files follow their marks (DESIGN.md §10.3): a clean turn that reads a file a marked
    /// turn wrote (`read_file`, `edit_file` of it; `list_dir`, `grep`, `find`, `exec` while
    /// one is in the session's workspace) is marked; what a marked turn writes (`write_file`,
    /// `edit_file`, what an `exec` changed) is noted. Runs before the answer reaches the agent.
    async fn follow_files(&self, live: &Live, (tool, path, started): (ToolName, Option<String>, i64)) {
        use crate::net::taint::{Taints, DIGEST_PATH};
        let (taints, workspaces, live) = (self.taints.clone(), self.runners.workspaces().clone(), live.clone());
        let following = move || {
            let session = live.session.as_str();
            let written = taints.written(session);
            if !written.is_empty() && taints.mark(session, &live.user_turn).is_none() {
                let read: Vec<(String, String)> = match tool {
                    ToolName::ReadFile | ToolName::EditFile => {
                        let read = path.as_deref().filter(|path| Taints::is_written(&written, path));
                        let source = written.values().next().cloned().unwrap_or_default();
                        read.map(|path| (path.to_string(), source)).into_iter().collect()
                    }
                    _ => {
                        let (paths, sources): (Vec<String>, Vec<String>) = written.into_iter().unzip();
                        let present = workspaces.present(session, &paths).unwrap_or_else(|error| {
                            tracing::warn!(%error, session, "cannot look for the files a marked turn wrote; they count as there");
                            vec![true; paths.len()]
                        });
                        let mut there = vec![];
                        let mut gone = vec![];
                        for ((path, source), present) in paths.into_iter().zip(sources).zip(present) {
                            match present || path.starts_with(DIGEST_PATH) {
                                true => there.push((path, source)),
                                false => gone.push(path),
                            }
                        }
                        taints.gone(session, gone);
                        there
                    }
                };
                if let Some((_, source)) = read.first() {
                    let mut names: Vec<&str> = read.iter().take(3).map(|(path, _)| path.as_str()).collect();
                    if read.len() > 3 {
                        names.push("…");
                    }
                    let names = names.iter().map(|name| if name.starts_with(DIGEST_PATH) { "a file" } else { name });
                    let names: Vec<&str> = names.collect();
                    let read = format!(
                        "files written by an earlier turn that read content from outside ({}; {source})",
                        names.join(", ")
                    );
                    taints.taint(&live, &read);
                }
            }
            if let Some(mark) = taints.mark(session, &live.user_turn) {
                let paths = match tool {
                    ToolName::WriteFile | ToolName::EditFile => path.into_iter().collect(),
                    ToolName::Exec => workspaces.changed_since(session, started, 256).unwrap_or_else(|error| {
                        tracing::warn!(%error, session, "cannot find what a marked turn's command wrote");
                        vec![]
                    }),
                    _ => vec![],
                };
                taints.wrote(&mark, paths);
            }
        };
        tokio::task::spawn_blocking(following).await.ok();
    }

    /// What a writing call (`write_file`, `edit_file`, `exec`) of a person's turn can change,
    /// for the turn's undo: the session's workspace and, for the Coder, the project folders
    /// mounted read-write. None for any other call, or outside a person's turn.
    fn undo_of(&self, identity: &ContainerIdentity, live: &Live, asked: &Asked) -> Option<Undoing> {
        if !self.undo.enabled() || live.entry.is_empty() {
            return None;
        }
        let tool = ToolName::named(&asked.tool)?;
        if !matches!(tool, ToolName::WriteFile | ToolName::EditFile | ToolName::Exec) {
            return None;
        }
        let path = match tool {
            ToolName::Exec => None,
            _ => {
                serde_json::from_str::<serde_json::Value>(&asked.params_json).ok()?["path"].as_str().map(str::to_string)
            }
        };
        let workspace = self.data_dir.root().join("sessions").join(&identity.session_id).join("data");
        let mut roots = vec![crate::store::undo::Root { name: crate::store::undo::WORKSPACE.into(), host: workspace }];
        if identity.role == Role::Coder {
            let projects = self.policy.coder_mounts(&identity.context).into_iter().filter(|mount| !mount.read_only);
            roots.extend(projects.map(|mount| crate::store::undo::Root { name: mount.target, host: mount.host }));
        }
        let turn = crate::store::undo::Turn {
            session: live.session.clone(),
            context: live.context.clone(),
            entry: live.entry.clone(),
            user_turn: live.user_turn.clone(),
            correlation: live.correlation_id.clone(),
            marked: None,
        };
        Some(Undoing { turn, roots, tool: asked.tool.clone(), path })
    }

    /// What `asked` reads from outside, if anything (DESIGN.md §10.3): the web, or an MCP
    /// server not marked `trusted` (then true: its answer is from outside as a whole).
    fn untrusted_source(&self, identity: &ContainerIdentity, asked: &Asked) -> Option<(String, bool)> {
        let params = || serde_json::from_str::<serde_json::Value>(&asked.params_json).unwrap_or_default();
        if asked.tool == ToolName::WebFetch.as_str() {
            return Some((format!("web_fetch {}", params()["url"].as_str().unwrap_or("?")), false));
        }
        if asked.tool == ToolName::WebSearch.as_str() {
            return Some((format!("web_search \"{}\"", params()["query"].as_str().unwrap_or("?")), false));
        }
        if asked.tool == ToolName::Browser.as_str() {
            return Some(("the browser".into(), false));
        }
        let (server, _) = asked.tool.strip_prefix("mcp__")?.split_once("__")?;
        let (servers, _) = crate::work::mcp::config::servers_for(self.data_dir.root(), &identity.context);
        let trusted = servers.iter().any(|known| known.name == server && known.config.trusted);
        (!trusted).then(|| (format!("the MCP server {server}"), true))
    }

    async fn run(
        self: &Arc<Self>,
        identity: &Arc<ContainerIdentity>,
        correlation_id: &str,
        asked: Asked,
    ) -> Result<ToolAnswer, CallError> {
        let caller = Caller::Container(identity.clone());
        let audit = |kind: Kind, outcome: &str| Record::by(kind, &caller, outcome).correlation(correlation_id);
        if let Some(named) = asked.tool.strip_prefix("mcp__") {
            return self.mcp_call(identity, &caller, correlation_id, named, &asked).await;
        }
        let allowed = Policy::tools_of(identity.role);
        let Some(tool) = ToolName::named(&asked.tool).filter(|tool| allowed.contains(tool)) else {
            let allowed: Vec<&str> = allowed.iter().map(|tool| tool.as_str()).collect();
            let reason = format!(
                "the {} role may not use `{}`; its tools are: {}",
                identity.role,
                asked.tool,
                allowed.join(", ")
            );
            let record = audit(Kind::Policy, "refused").detail("tool", asked.tool.as_str());
            self.audit.record(record.detail("reason", reason.as_str()));
            return Err(CallError::Refused(reason));
        };
        let mut env = HashMap::new();
        let mut unmet = None;
        let mut command = None;
        if tool == ToolName::Exec {
            let params: serde_json::Value = serde_json::from_str(&asked.params_json)
                .map_err(|error| CallError::Invalid(format!("params_json is not JSON: {error}")))?;
            // A shell command, or a skill's script by itself (which alone gets its skill's secrets).
            let script = params["script"].as_str();
            let text = match script {
                Some(script) => {
                    let args = params["args"].as_array().into_iter().flatten().filter_map(|arg| arg.as_str());
                    std::iter::once(script).chain(args).collect::<Vec<_>>().join(" ")
                }
                None => params["command"].as_str().unwrap_or_default().to_string(),
            };
            if let Err(error) = self.policy.validate_exec_command(&text) {
                let record =
                    audit(Kind::Policy, "refused").detail("tool", tool.as_str()).detail("command", text.as_str());
                self.audit.record(record.detail("reason", error.to_string()));
                return Err(CallError::Refused(error.to_string()));
            }
            if let Some(script) = script {
                let skills = crate::work::skills::manifest(
                    self.data_dir.root(),
                    &self.loaded.config.skills.directories,
                    &identity.context,
                );
                let given = crate::work::skills::script_env(&skills, script, &self.secrets, &caller, correlation_id);
                unmet = given.note();
                env = given.env;
            }
            command = Some(text);
        }
        // A bound secret's variable holds the session's placeholder, never the value.
        let placeholders = match (&self.runners.edge, tool == ToolName::Exec) {
            (Some(edge), true) => {
                let (edge, context, session) = (edge.clone(), identity.context.clone(), identity.session_id.clone());
                tokio::task::spawn_blocking(move || edge.placeholders_for(&context, &session)).await.unwrap_or_default()
            }
            _ => HashMap::new(),
        };
        debug_assert_ne!(identity.role, Role::Tool);
        let timeout = self.timeout_of(tool, asked.timeout_seconds);
        let call_id = if asked.tool_call_id.is_empty() {
            uuid::Uuid::new_v4().simple().to_string()
        } else if crate::work::ipc::is_valid_call_id(&asked.tool_call_id) {
            asked.tool_call_id.clone()
        } else {
            return Err(CallError::Invalid("tool_call_id must be 1-128 letters, digits, `-` or `_`".into()));
        };
        // Asked again (e.g. after a daemon restart): the recorded result, never a second run.
        let coder = identity.role == Role::Coder;
        if let Some(recorded) = self.ipc.collect(&identity.context, &identity.session_id, coder, &call_id) {
            tracing::info!(tool = %tool, call_id = %call_id, "answered with a result collected before");
            return Ok(recorded);
        }
        let received = Instant::now();
        let (session, context) = (&identity.session_id, &identity.context);
        // Whose browser: in a group, the asking member's own (their logins).
        let asker = self.agents.live(&identity.name).and_then(|live| live.asker);
        let call = super::Call {
            session,
            context,
            asker: asker.as_deref(),
            coder,
            call_id: call_id.clone(),
            tool: tool.as_str(),
            params_json: asked.params_json,
            timeout,
            env,
            placeholders,
            correlation_id,
        };
        let span = tracing::info_span!("tool", tool = %tool);
        let mut answer = if self.loaded.config.tools.mode == ToolMode::Cold {
            self.runners.call_cold(call).instrument(span).await?
        } else {
            self.runners.call(call).instrument(span).await?
        };
        answer.content.extend(unmet);
        // The runner also wrote the result to the context's IPC folder (unless the call only
        // read): record it for an agent that asks again, off the answer's path (a crash before
        // then leaves the file for the next start).
        if !tool.only_reads() {
            let (ipc, recorded_context, recorded_session) = (self.ipc.clone(), context.clone(), session.clone());
            tokio::task::spawn_blocking(move || ipc.collect(&recorded_context, &recorded_session, coder, &call_id));
        }
        // Request in → result out, as the daemon saw it (baaaht-bench tools reads it).
        let daemon_us = received.elapsed().as_micros() as u64;
        answer.metadata.insert("daemon_us".into(), daemon_us.to_string());
        self.metrics.record_tool(tool.as_str(), !answer.is_error, received.elapsed());
        if let Some(command) = command {
            let exit_code = answer.metadata.get("exit_code").cloned().unwrap_or_else(|| "none".into());
            let record = audit(Kind::Exec, if answer.is_error { "failed" } else { "ok" })
                .detail("command", command)
                .detail("exit_code", exit_code.parse::<i64>().map_or(serde_json::Value::from(exit_code), Into::into))
                .detail("duration_ms", answer.duration_ms);
            self.audit.record(record);
        }
        tracing::info!(
            tool = %tool,
            session = %identity.session_id,
            is_error = answer.is_error,
            duration_ms = answer.duration_ms,
            daemon_us,
            "tool call"
        );
        self.tell_progress(identity, tool.as_str(), answer.is_error, answer.duration_ms);
        Ok(answer)
    }

    /// The timeout of `tool`: its override, else the default, lowered by the request.
    fn timeout_of(&self, tool: ToolName, requested: u32) -> Duration {
        let tools = &self.loaded.config.tools;
        let configured = tools.timeout_overrides.get(&tool).copied().unwrap_or(tools.default_timeout);
        let seconds = if requested > 0 { u64::from(requested).min(configured) } else { configured };
        Duration::from_secs(seconds.max(1))
    }

    /// Tells the turn's watchers that `tool` finished (or failed) for the agent `identity`.
    fn tell_progress(&self, identity: &ContainerIdentity, tool: &str, is_error: bool, duration_ms: u64) {
        if let Some(live) = self.agents.live(&identity.name) {
            let progress = crate::store::events::Kind::Tool {
                agent: identity.role,
                tool: tool.to_string(),
                state: if is_error { "failed" } else { "finished" }.into(),
                duration_ms,
            };
            let event =
                crate::store::events::Event::of_turn(&live.session, &live.user_turn, &live.correlation_id, progress);
            self.events.publish(&live.context, event);
        }
    }

    /// A call of `named` (`{server}__{tool}`, from `mcp__{server}__{tool}`): the caller's
    /// context's server, if its role may use it, with the server's environment from the secrets.
    async fn mcp_call(
        &self,
        identity: &ContainerIdentity,
        caller: &Caller,
        correlation_id: &str,
        named: &str,
        asked: &Asked,
    ) -> Result<ToolAnswer, CallError> {
        let received = Instant::now();
        let Some((server_name, tool)) = named.split_once("__") else {
            return Err(CallError::Invalid("an MCP tool is named mcp__{server}__{tool}".into()));
        };
        let audit = |kind: Kind, outcome: &str| Record::by(kind, caller, outcome).correlation(correlation_id);
        let (servers, problems) = crate::work::mcp::config::servers_for(self.data_dir.root(), &identity.context);
        for problem in problems {
            tracing::warn!(%problem, "skipping an mcp.yaml");
        }
        let Some(server) = servers.iter().find(|server| server.name == server_name) else {
            let why = format!("no MCP server `{server_name}` is configured for {}", identity.context);
            return Err(CallError::NotFound(why));
        };
        if !server.offered_to(identity.role) {
            let reason = format!("the {} role may not use the MCP server `{server_name}`", identity.role);
            let record = audit(Kind::Policy, "refused").detail("tool", asked.tool.as_str());
            self.audit.record(record.detail("reason", reason.as_str()));
            return Err(CallError::Refused(reason));
        }
        let arguments = match serde_json::from_str::<serde_json::Value>(&asked.params_json) {
            Ok(serde_json::Value::Object(arguments)) => arguments,
            Ok(serde_json::Value::Null) => serde_json::Map::new(),
            _ => return Err(CallError::Invalid("params_json of an MCP tool is a JSON object".into())),
        };
        let env =
            server.env(&self.secrets, caller, correlation_id).map_err(|error| CallError::Unready(error.to_string()))?;
        // An acting tool of a marked turn waits for a person's yes (its class from what the
        // server listed: started to list it if it never has). A server that cannot start, or
        // has no such tool, answers so as the call would.
        let mut timeout = Duration::from_secs(server.config.timeout);
        if asked.timeout_seconds > 0 {
            timeout = timeout.min(Duration::from_secs(u64::from(asked.timeout_seconds)));
        }
        let started = Instant::now();
        let answer = match self.mcp.offer(&identity.context, server, env.clone()).await {
            Err(error) => Err(error),
            Ok(offer) => {
                // Only a name an agent can be offered (`mcp_offers` leaves the others out).
                let plain = tool.len() <= crate::work::mcp::config::MAX_TOOL_NAME
                    && tool.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                if !plain || !offer.offers(server, tool) {
                    Err(crate::work::mcp::pool::McpError::NoTool { server: server.name.clone(), tool: tool.into() })
                } else {
                    let acts = self.acting(identity, caller, correlation_id, server, &offer, tool, &arguments).await?;
                    self.mcp
                        .call(&identity.context, server, &identity.session_id, env, tool, arguments, timeout, acts)
                        .await
                }
            }
        };
        let elapsed = started.elapsed();
        self.metrics.record_tool(&asked.tool, answer.as_ref().is_ok_and(|a| !a.is_error), elapsed);
        let (mut content, is_error) = match answer {
            Ok(answer) => (answer.text, answer.is_error),
            Err(error) => (error.to_string(), true),
        };
        if content.len() > MAX_MCP_OUTPUT {
            let mut cut = MAX_MCP_OUTPUT;
            while !content.is_char_boundary(cut) {
                cut -= 1;
            }
            let dropped = content.len() - cut;
            content.truncate(cut);
            content.push_str(&format!("\n[truncated: {dropped} more bytes not shown]"));
        }
        let duration_ms = elapsed.as_millis() as u64;
        tracing::info!(tool = %asked.tool, session = %identity.session_id, is_error, duration_ms, "MCP tool call");
        // Every call, as an exec is: which server and tool, how it ended, how long it took.
        let record = audit(Kind::Mcp, if is_error { "failed" } else { "ok" })
            .detail("server", server.name.as_str())
            .detail("tool", tool)
            .detail("duration_ms", duration_ms);
        self.audit.record(record);
        self.tell_progress(identity, &asked.tool, is_error, duration_ms);
        // Request in → result out, as the daemon saw it (baaaht-bench mcp reads it).
        let metadata = [("daemon_us".to_string(), received.elapsed().as_micros().to_string())].into_iter().collect();
        Ok(ToolAnswer { content, is_error, duration_ms, metadata })
    }

    /// Whether `tool` of `server` (as `offer` lists it) acts; in a marked turn, only once a
    /// person allowed it (`super::acting`), and never between turns of a marked conversation.
    #[allow(clippy::too_many_arguments)]
    async fn acting(
        &self,
        identity: &ContainerIdentity,
        caller: &Caller,
        correlation_id: &str,
        server: &crate::work::mcp::config::Server,
        offer: &crate::work::mcp::pool::Offer,
        tool: &str,
        arguments: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<bool, CallError> {
        let listed = offer.tools.iter().find(|offered| offered.name == tool);
        // `read_resource` and `get_prompt` only read, where the server reaches nothing else.
        let added_reads = listed.is_none() && (server.config.trusted || server.config.egress.is_empty());
        let class = crate::work::mcp::effects::class_of(
            &server.config.effects,
            tool,
            listed.and_then(|offered| offered.annotations.as_ref()),
            (added_reads, server.config.trusted),
        );
        let acts = class.effect == crate::work::mcp::effects::Effect::Acts;
        match self.agents.live(&identity.name) {
            Some(live) => {
                let action = super::acting::Action { live: &live, server: &server.name, tool, class, arguments };
                let shield = self.redact.shield();
                super::acting::allowed(&self.taints, &self.approvals, shield, action)
                    .await
                    .map_err(CallError::Refused)?;
            }
            // Between turns (one ended, cancelled or timed out) nobody can be asked: an acting
            // tool of a marked conversation is withheld (unless the policy allows acting tools).
            None if acts && self.taints.policy().acting_tools != crate::base::config::ActingInTaint::Allow => {
                if let Some(mark) = self.taints.of_session(&identity.session_id) {
                    let source = mark.sources.first().cloned().unwrap_or_default();
                    let why = format!(
                        "`{tool}` of the MCP server {} was not run: it acts, this conversation read content from \
                         outside ({source}), and this agent works for no turn now, so nobody can be asked",
                        server.name
                    );
                    let record = Record::by(Kind::Taint, caller, "withheld").correlation(correlation_id);
                    self.audit.record(record.detail("tool", server.tool_name(tool)).detail("reason", why.as_str()));
                    return Err(CallError::Refused(why));
                }
            }
            None => {}
        }
        Ok(acts)
    }

    /// The MCP tools offered to the agent `identity`: those of the servers its context sees
    /// and its role may use. A server that has not listed its tools before is started to list
    /// them; one that cannot be, or is still starting after [`OFFER_WAIT`], is left out (and
    /// logged) for this agent.
    pub async fn mcp_offers(self: &Arc<Self>, identity: &Arc<ContainerIdentity>) -> Vec<Offered> {
        if !crate::base::auth::Operation::RequestToolExecution.container_roles().contains(&identity.role) {
            return vec![];
        }
        let (servers, problems) = crate::work::mcp::config::servers_for(self.data_dir.root(), &identity.context);
        for problem in problems {
            tracing::warn!(%problem, "skipping an mcp.yaml");
        }
        let mut asked = tokio::task::JoinSet::new();
        for (index, server) in servers.into_iter().filter(|server| server.offered_to(identity.role)).enumerate() {
            let (calls, identity) = (self.clone(), identity.clone());
            asked.spawn(async move {
                // What it listed before, without its secrets; else it is started to list it.
                let offer = match calls.mcp.known_offer(&identity.context, &server) {
                    Some(offer) => Ok(offer),
                    None => {
                        let caller = Caller::Container(identity.clone());
                        match server.env(&calls.secrets, &caller, "") {
                            Ok(env) => {
                                calls.mcp.offer(&identity.context, &server, env).await.map_err(|e| e.to_string())
                            }
                            Err(why) => Err(why.to_string()),
                        }
                    }
                };
                let offer = match offer {
                    Ok(offer) => offer,
                    Err(error) => {
                        tracing::warn!(server = %server.name, %error, "an MCP server's tools are not offered");
                        return (index, vec![]);
                    }
                };
                let offered = offer
                    .definitions(&server)
                    .into_iter()
                    .filter_map(|(tool, description, parameters)| {
                        let name = server.tool_name(&tool);
                        let name_ok = name.len() <= crate::work::mcp::config::MAX_TOOL_NAME
                            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                        if !name_ok {
                            tracing::warn!(server = %server.name, tool = %tool, "an MCP tool's name is too long or not [A-Za-z0-9_-]: not offered");
                        }
                        name_ok.then_some(Offered { name, description, parameters })
                    })
                    .collect();
                (index, offered)
            });
        }
        // An agent must register within its connect timeout: a server still starting (its
        // layer being built) is left out of this agent's tools, and keeps starting for the next.
        let deadline = tokio::time::Instant::now() + OFFER_WAIT;
        let mut found = vec![];
        loop {
            match tokio::time::timeout_at(deadline, asked.join_next()).await {
                Ok(Some(Ok(done))) => found.push(done),
                Ok(Some(Err(error))) => tracing::warn!(%error, "listing an MCP server's tools failed"),
                Ok(None) => break,
                Err(_) => {
                    tracing::warn!(
                        servers = asked.len(),
                        "MCP servers still starting are not offered to this agent; the next one gets their tools"
                    );
                    asked.detach_all();
                    break;
                }
            }
        }
        found.sort_by_key(|(index, _)| *index);
        found.into_iter().flat_map(|(_, offered)| offered).collect()
    }
}

/// The most an agent's message to its channels may be (the Agents service decodes up to 32 MiB
/// for StreamLLM's pictures, far more than a chat message should be): more is written to a file
/// and named.
const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// Why an agent's message to its context's channels was not sent.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error("content: the message is empty")]
    Empty,
    #[error("attachments: an agent sends files with the `message` tool's `files`, which the daemon keeps first")]
    Attachments,
    #[error("content: {0} bytes is more than a message may be ({MAX_MESSAGE_BYTES}); write a file and name it")]
    TooLong(usize),
    /// The turn read untrusted content (the sentence says what it may no longer do).
    #[error("{0}")]
    Tainted(String),
}

/// An agent's message to its context's channels, between turns or in one.
#[derive(Debug)]
pub struct Outbound {
    pub content: String,
    pub reply_to: String,
    pub metadata: std::collections::BTreeMap<String, String>,
    /// Files named by the request itself (refused: they come with the `message` tool).
    pub attachments: usize,
}

impl Calls {
    /// Sends `message` from the agent of `identity` (working on `live`, if any) to its context's
    /// channels, unless its turn read untrusted content; says how many channels it reached.
    pub fn message(
        &self,
        identity: &crate::base::auth::ContainerIdentity,
        live: Option<&Live>,
        message: Outbound,
    ) -> Result<usize, MessageError> {
        if message.content.trim().is_empty() {
            return Err(MessageError::Empty);
        }
        if message.attachments > 0 {
            return Err(MessageError::Attachments);
        }
        if message.content.len() > MAX_MESSAGE_BYTES {
            return Err(MessageError::TooLong(message.content.len()));
        }
        if let Some(live) = live {
            self.taints.allow(live, crate::net::taint::Way::Message).map_err(MessageError::Tainted)?;
        }
        let event = crate::store::events::Event {
            recorded: false,
            session: identity.session_id.clone(),
            turn: live.map(|live| live.user_turn.clone()).unwrap_or_default(),
            correlation_id: live.map(|live| live.correlation_id.clone()).unwrap_or_default(),
            kind: crate::store::events::Kind::Message {
                content: message.content,
                reply_to: message.reply_to,
                metadata: message.metadata.into_iter().collect(),
                attachments: vec![],
            },
        };
        Ok(self.events.publish(&identity.context, event))
    }
}
