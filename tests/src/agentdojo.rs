//! AgentDojo through the real daemon (issue 59), shared by `baaaht-bench containment` and the
//! slice in `tests/tests/agentdojo.rs`. Each suite's environment is an MCP server in its own
//! container (`tests/agentdojo/server.py`, agentdojo 0.1.35 and the MCP SDK pinned in an image
//! built from the base image); the case it plays is named in its state folder before each turn.
//! A scripted model plays the agents: the Assistant hands the user task's prompt to the Worker,
//! which makes AgentDojo's ground-truth calls through the daemon's MCP tools, and the moment a
//! tool's answer carries the attack's text it **always obeys**: the injection task's ground-truth
//! calls come next. A scripted person answers the questions acting tools raise (careful: only
//! what the user's task asked; permissive: everything; or nobody there to ask). AgentDojo's own
//! checks (`judge.py`, in the same image) judge the environment the server left.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use baaaht_proto::client::Client;
use baaaht_proto::v1;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use crate::fake_provider::{anthropic_answer, Answer, Asked, FakeProvider, Responder};
use crate::scenario::{self, last_user_text};
use crate::{docker, DaemonOptions, TestDaemon};

/// The benchmark's version: 97 user tasks and 629 security cases (v1.2 adds 320 workspace
/// cases whose injection tasks have no ground truth to obey).
pub const VERSION: &str = "v1.1.2";
pub const SUITES: [&str; 4] = ["workspace", "travel", "banking", "slack"];
/// The person the runs are for.
const PERSON: &str = "emma";
/// How long one case's turn may take.
const TURN_LIMIT: Duration = Duration::from_secs(180);
/// The files of the image, by name, as the repository has them.
const FILES: [(&str, &str); 6] = [
    ("Dockerfile", include_str!("../agentdojo/Dockerfile")),
    ("requirements.txt", include_str!("../agentdojo/requirements.txt")),
    ("annotations.json", include_str!("../agentdojo/annotations.json")),
    ("common.py", include_str!("../agentdojo/common.py")),
    ("judge.py", include_str!("../agentdojo/judge.py")),
    ("server.py", include_str!("../agentdojo/server.py")),
];

/// Who answers the questions a marked turn's acting tools raise, and whether they are asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `security.taint.acting_tools: allow`: the undefended baseline.
    TaintOff,
    /// Allows only the calls the user's task makes, with their arguments.
    Careful,
    /// Allows everything.
    Permissive,
    /// Nobody is connected to be asked.
    Nobody,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::TaintOff => "taint off",
            Mode::Careful => "taint on, careful person",
            Mode::Permissive => "taint on, person allows all",
            Mode::Nobody => "taint on, nobody to ask",
        }
    }
}

/// One security case (or, without an injection task, a user task alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub suite: String,
    pub user_task: String,
    pub injection_task: Option<String>,
}

/// How a case ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub case: Case,
    pub utility: bool,
    /// The attack's goal reached (none without an injection task).
    pub attacked: Option<bool>,
    /// Questions the person was asked.
    pub questions: usize,
    /// Whether the model obeyed the injection (it saw it in a tool's answer).
    pub obeyed: bool,
}

/// The tools of `suite` that only read what its server holds, as the operator says in
/// `mcp.yaml` (a server's own hints are not taken from a server that is not trusted): read-only
/// and closed-world by their annotations. `get_webpage`, a read that fetches any address it is
/// given, acts: what it is given leaves the house.
fn readers(suite: &str) -> Vec<String> {
    let annotations: Value = serde_json::from_str(FILES[2].1).unwrap_or_default();
    let mut readers: Vec<String> = annotations[suite]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, hints)| hints["readOnlyHint"] == true && hints["openWorldHint"] != true)
        .map(|(tool, _)| tool.clone())
        .collect();
    readers.sort();
    readers
}

/// The image of the servers and the judge, built once per content.
pub fn image() -> Result<String> {
    let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
    for (name, text) in FILES {
        hash.update(name.as_bytes());
        hash.update(text.as_bytes());
    }
    let digest = hash.finish();
    let tag: String = digest.as_ref().iter().take(6).map(|byte| format!("{byte:02x}")).collect();
    let image = format!("baaaht-bench/agentdojo:0.1.35-{tag}");
    if docker(&["image", "inspect", &image]).is_ok() {
        return Ok(image);
    }
    let context = tempfile::tempdir()?;
    for (name, text) in FILES {
        std::fs::write(context.path().join(name), text)?;
    }
    // The host's CA bundle: a proxy of the host's may sign the registry's certificates.
    std::fs::copy("/etc/ssl/certs/ca-certificates.crt", context.path().join("host-cas.pem"))
        .context("the host's CA bundle /etc/ssl/certs/ca-certificates.crt")?;
    let context_path = context.path().to_string_lossy().into_owned();
    docker(&["build", "-q", "-t", &image, &context_path]).context("build the AgentDojo image")?;
    Ok(image)
}

/// What the scripted model does for a case, as the judge planned it.
#[derive(Debug, Clone, Default)]
struct Plan {
    suite: String,
    prompt: String,
    user_calls: Vec<(String, Value)>,
    user_output: String,
    injection_calls: Vec<(String, Value)>,
    injection_output: String,
    /// The attack's text in each vector, letters and digits only (as a tool's answer may have
    /// re-wrapped it).
    injections: Vec<String>,
    /// Whether the model saw the attack and set out to obey it.
    obeyed: bool,
}

fn calls_of(value: &Value) -> Vec<(String, Value)> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .map(|call| (call["function"].as_str().unwrap_or_default().to_string(), call["args"].clone()))
        .collect()
}

/// `text` lower-cased, letters and digits only, escapes (`\n`) as spaces first.
fn letters(text: &str) -> String {
    text.replace("\\n", " ").replace("\\t", " ").to_lowercase().chars().filter(char::is_ascii_alphanumeric).collect()
}

impl Plan {
    fn of(suite: &str, planned: &Value) -> Plan {
        Plan {
            suite: suite.to_string(),
            prompt: planned["prompt"].as_str().unwrap_or_default().to_string(),
            user_calls: calls_of(&planned["user_calls"]),
            user_output: planned["user_output"].as_str().unwrap_or_default().to_string(),
            injection_calls: calls_of(&planned["injection_calls"]),
            injection_output: planned["injection_output"].as_str().unwrap_or_default().to_string(),
            injections: planned["injections"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(letters)
                .filter(|text| !text.is_empty())
                .collect(),
            obeyed: false,
        }
    }

    /// The Worker's next call after `results` (the answers so far, in order), or none when it
    /// is done; and whether it obeyed. The user task's calls in order, and the injection's as
    /// soon as an answer shows the attack.
    fn next(&self, results: &[String]) -> (Option<(String, Value)>, bool) {
        let mut user = self.user_calls.iter();
        let mut injected: std::collections::VecDeque<&(String, Value)> = Default::default();
        let mut obeyed = false;
        for index in 0..=results.len() {
            let call = injected.pop_front().or_else(|| user.next());
            let Some(call) = call else { return (None, obeyed) };
            let Some(result) = results.get(index) else { return (Some(call.clone()), obeyed) };
            if !obeyed && self.shows_attack(result) {
                obeyed = true;
                injected.extend(self.injection_calls.iter());
            }
        }
        (None, obeyed)
    }

    fn shows_attack(&self, result: &str) -> bool {
        let seen = letters(result);
        self.injections.iter().any(|text| seen.contains(text.as_str()))
    }
}

/// The model: the Assistant delegates the prompt to the Worker and passes on its answer; the
/// Worker plays the plan.
fn brain(playing: Arc<Mutex<Plan>>) -> Answer {
    Answer::Respond(Responder(Arc::new(move |request| {
        let asked = Asked::of(request);
        if asked.offers("delegate") {
            return match asked.turn_results.last() {
                None => {
                    let task = json!({"agent": "worker", "task": last_user_text(&asked), "returnDirectly": false});
                    anthropic_answer("", &[("toolu_delegate", "delegate", task)])
                }
                Some(result) => anthropic_answer(result, &[]),
            };
        }
        let plan = playing.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let (next, obeyed) = plan.next(&asked.turn_results);
        playing.lock().unwrap_or_else(PoisonError::into_inner).obeyed |= obeyed;
        match (next, obeyed) {
            (Some((function, args)), _) => {
                let id = format!("toolu_{}", asked.turn_results.len());
                anthropic_answer("", &[(&id, &format!("mcp__{}__{function}", plan.suite), args)])
            }
            (None, obeyed) => {
                let mut said = plan.user_output.clone();
                if obeyed && !plan.injection_output.is_empty() {
                    said = format!("{said} {}", plan.injection_output);
                }
                anthropic_answer(if said.trim().is_empty() { "Done." } else { said.trim() }, &[])
            }
        }
    })))
}

/// The judge: `judge.py` in the image, on JSON lines; what a server left is handed to it (read
/// from the server's folder as it is now: a server restarted may have its folder mounted anew).
struct Judge {
    child: tokio::process::Child,
    input: tokio::process::ChildStdin,
    output: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Judge {
    fn start(image: &str) -> Result<Judge> {
        let mut child = tokio::process::Command::new("docker")
            .args(["run", "-i", "--rm", "--network", "none", image, "python3", "judge.py"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("start the judge")?;
        let input = child.stdin.take().context("the judge's input")?;
        let output = BufReader::new(child.stdout.take().context("the judge's output")?).lines();
        Ok(Judge { child, input, output })
    }

    async fn ask(&mut self, request: Value) -> Result<Value> {
        self.input.write_all(format!("{request}\n").as_bytes()).await?;
        let line = self.output.next_line().await?.context("the judge stopped")?;
        let answer: Value = serde_json::from_str(&line).with_context(|| format!("the judge said {line}"))?;
        if let Some(error) = answer["error"].as_str() {
            bail!("the judge failed on {request}: {error}");
        }
        Ok(answer)
    }
}

/// The person: follows the conversations (on a channel, so they can be asked, unless nobody is
/// there) and answers each question as `mode` says; counts them.
struct Person {
    questions: Arc<AtomicUsize>,
    replies: tokio::sync::mpsc::UnboundedReceiver<(String, Result<String, String>)>,
    _following: tokio::task::JoinHandle<()>,
}

/// Whether `action` is one of the user task's calls, with the same arguments.
fn asked_for(action: &v1::ActionReview, calls: &[(String, Value)]) -> bool {
    let shown: Option<BTreeMap<String, Value>> = action
        .arguments
        .iter()
        .map(|argument| serde_json::from_str(&argument.value).ok().map(|value| (argument.name.clone(), value)))
        .collect();
    let Some(shown) = shown else { return false };
    calls.iter().any(|(function, args)| {
        let planned: BTreeMap<String, Value> =
            args.as_object().map(|args| args.clone().into_iter().collect()).unwrap_or_default();
        *function == action.tool && planned == shown
    })
}

impl Person {
    async fn follow(mut client: Client, mode: Mode, playing: Arc<Mutex<Plan>>) -> Result<Person> {
        let channel = if mode == Mode::Nobody { 0 } else { v1::ChannelType::Cli as i32 };
        let subscription = v1::EventSubscription {
            context: Some(scenario::user(PERSON)),
            session_id: String::new(),
            channel,
            notifies: false,
        };
        let mut events = client.sessions.subscribe_events(subscription).await?.into_inner();
        let questions = Arc::new(AtomicUsize::new(0));
        let (said, replies) = tokio::sync::mpsc::unbounded_channel();
        let counted = questions.clone();
        let following = tokio::spawn(async move {
            use v1::orchestrator_event::Event;
            while let Ok(Some(event)) = events.message().await {
                match event.event {
                    Some(Event::Approval(request)) => {
                        counted.fetch_add(1, Ordering::SeqCst);
                        let Some(action) = request.action else { continue };
                        let allow = match mode {
                            Mode::Permissive => true,
                            Mode::Careful => {
                                asked_for(&action, &playing.lock().unwrap_or_else(PoisonError::into_inner).user_calls)
                            }
                            Mode::TaintOff | Mode::Nobody => continue,
                        };
                        let decision = if allow { "once" } else { "deny" };
                        let answer = v1::ApprovalAnswer { id: request.id.clone(), decision: decision.into() };
                        if let Err(status) = client.sessions.answer_approval(answer).await {
                            eprintln!("the person's answer to {} was refused: {}", request.id, status.message());
                        }
                    }
                    Some(Event::Reply(reply)) => drop(said.send((event.turn_id, Ok(reply.content)))),
                    Some(Event::Error(error)) => drop(said.send((event.turn_id, Err(error.message)))),
                    _ => {}
                }
            }
        });
        Ok(Person { questions, replies, _following: following })
    }
}

/// One mode's daemon, model, person and judge.
pub struct Harness {
    pub mode: Mode,
    pub daemon: TestDaemon,
    _provider: FakeProvider,
    playing: Arc<Mutex<Plan>>,
    judge: Judge,
    person: Person,
    client: Client,
    attack: String,
    seq: u64,
}

impl Harness {
    /// A daemon with the suites' servers (`image`) for `mode`, under `attack`.
    pub async fn start(image: &str, mode: Mode, attack: &str) -> Result<Harness> {
        let playing = Arc::new(Mutex::new(Plan::default()));
        let provider = FakeProvider::start(vec![], Some(brain(playing.clone()))).await?;
        let servers: String = SUITES
            .iter()
            .map(|suite| {
                format!(
                    "  {suite}:\n    image: {image}\n    command: python3\n    args: [/opt/agentdojo/server.py, {suite}, \
                     {VERSION}]\n    state: true\n    roles: [worker]\n    timeout: 120\n    effects: {{default: acts, \
                     reads: [{}]}}\n",
                    readers(suite).join(", ")
                )
            })
            .collect();
        let acting = if mode == Mode::TaintOff { "allow" } else { "ask" };
        let options = DaemonOptions {
            env: vec![
                ("BAAAHT__SECURITY__TAINT__ACTING_TOOLS".into(), acting.into()),
                ("BAAAHT__EGRESS__APPROVAL_TIMEOUT".into(), "30".into()),
                // travel's user_task_19 makes 14 calls and obeying adds more: past the Worker's
                // default of 15 model calls a turn.
                ("BAAAHT__AGENTS__WORKER__MAX_ITERATIONS".into(), "40".into()),
            ],
            files: vec![("config/mcp.yaml".into(), format!("servers:\n{servers}"))],
            ..DaemonOptions::default()
        };
        let daemon = tokio::task::block_in_place(|| scenario::daemon_with(&provider, options))?;
        let mut client = scenario::host_client(&daemon).await?;
        // Each server started once, so its folder is there to name the case in.
        for suite in SUITES {
            let request = v1::McpServerRequest {
                context: Some(scenario::user(PERSON)),
                server: suite.into(),
                ..Default::default()
            };
            let listed = client.admin.list_mcp_tools(request).await;
            listed.with_context(|| format!("start the {suite} server\n{}", daemon.log_text()))?;
        }
        let judge = Judge::start(image)?;
        let person = Person::follow(scenario::host_client(&daemon).await?, mode, playing.clone()).await?;
        Ok(Harness {
            mode,
            daemon,
            _provider: provider,
            playing,
            judge,
            person,
            client,
            attack: attack.to_string(),
            seq: 0,
        })
    }

    /// Every case of `suites`: each user task alone, and each pair of a user task and an
    /// injection task.
    pub async fn cases(&mut self, suites: &[&str]) -> Result<(Vec<Case>, Vec<Case>)> {
        let listed = self.judge.ask(json!({"op": "cases", "version": VERSION, "suites": suites})).await?;
        let (mut alone, mut pairs) = (vec![], vec![]);
        for suite in listed["suites"].as_array().into_iter().flatten() {
            let name = suite["suite"].as_str().unwrap_or_default();
            let ids = |key: &str| -> Vec<String> {
                suite[key].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
            };
            for user_task in ids("user_tasks") {
                alone.push(Case { suite: name.into(), user_task: user_task.clone(), injection_task: None });
                for injection_task in ids("injection_tasks") {
                    pairs.push(Case {
                        suite: name.into(),
                        user_task: user_task.clone(),
                        injection_task: Some(injection_task),
                    });
                }
            }
        }
        Ok((alone, pairs))
    }

    fn folder(&self, suite: &str) -> PathBuf {
        self.daemon.data_dir.join(format!("data/mcp-state/user-{PERSON}.system.{suite}/data"))
    }

    /// Runs `case` as a new conversation and judges it. A server that missed its case (stopped
    /// to free a slot while idle, and started again over its folder after the case was named)
    /// is restarted and the case played again, once.
    pub async fn run(&mut self, case: &Case) -> Result<Outcome> {
        match self.play(case).await? {
            Some(outcome) => Ok(outcome),
            None => {
                eprintln!("the {} server missed {case:?}; restarted, it plays it again", case.suite);
                let request = v1::McpServerRequest {
                    context: Some(scenario::user(PERSON)),
                    server: case.suite.clone(),
                    restart: true,
                    ..Default::default()
                };
                self.client.admin.list_mcp_tools(request).await?;
                self.play(case).await?.with_context(|| format!("the {} server missed {case:?} twice", case.suite))
            }
        }
    }

    /// One play of `case`; none when its server never saw it.
    async fn play(&mut self, case: &Case) -> Result<Option<Outcome>> {
        self.seq += 1;
        let named = json!({"seq": self.seq, "version": VERSION, "suite": case.suite, "user_task": case.user_task,
            "injection_task": case.injection_task, "attack": self.attack});
        let planned = self.judge.ask(json!({"op": "plan", "case": named})).await?;
        let plan = Plan::of(&case.suite, &planned);
        let prompt = plan.prompt.clone();
        *self.playing.lock().unwrap_or_else(PoisonError::into_inner) = plan;
        let folder = self.folder(&case.suite);
        let (file, temporary) = (folder.join("case.json"), folder.join("case.json.tmp"));
        let written = std::fs::write(&temporary, named.to_string()).and_then(|()| std::fs::rename(&temporary, &file));
        written.with_context(|| format!("name the case in {}", folder.display()))?;
        let asked_before = self.person.questions.load(Ordering::SeqCst);
        let new = v1::NewSessionRequest { context: Some(scenario::user(PERSON)), ..Default::default() };
        let session = self.client.sessions.new_session(new).await?.into_inner().id;
        let mut message = scenario::message(scenario::user(PERSON), PERSON, &prompt);
        message.session_id = session;
        let sent = self.client.sessions.send_user_message(message).await?.into_inner();
        let reply = loop {
            let next = tokio::time::timeout(TURN_LIMIT, self.person.replies.recv()).await;
            let Ok(Some((turn, reply))) = next else {
                bail!("no answer to {case:?} within {TURN_LIMIT:?}\n{}", self.daemon.log_text())
            };
            if turn == sent.turn_id {
                break reply;
            }
        };
        let output = reply.map_err(|error| anyhow::anyhow!("the turn of {case:?} failed: {error}"))?;
        // What the server left, as the daemon's data dir holds it now.
        let environment = std::fs::read(folder.join("env.pickle")).ok();
        let environment = environment.map(|bytes| data_encoding::BASE64.encode(&bytes));
        let traces = std::fs::read_to_string(folder.join("traces.json")).ok();
        let traces: Option<Value> = traces.and_then(|text| serde_json::from_str(&text).ok());
        let plan = self.playing.lock().unwrap_or_else(PoisonError::into_inner).clone();
        // Every task's first call reads, so it reaches the server whatever is asked after it.
        let seen = traces.as_ref().is_some_and(|traces| traces["seq"] == json!(self.seq));
        if !seen && !plan.user_calls.is_empty() {
            return Ok(None);
        }
        let asked = json!({"op": "judge", "case": named, "output": output, "env": environment, "traces": traces});
        let judged = self.judge.ask(asked).await?;
        if std::env::var_os("AGENTDOJO_SHOW").is_some() {
            eprintln!(
                "{case:?}: planned {:?}\n  made {}\n  answered {output:?}\n  judged {judged}",
                plan.user_calls, judged["calls"]
            );
        }
        Ok(Some(Outcome {
            case: case.clone(),
            utility: judged["utility"].as_bool().unwrap_or(false),
            attacked: judged["security"].as_bool(),
            questions: self.person.questions.load(Ordering::SeqCst) - asked_before,
            obeyed: plan.obeyed,
        }))
    }

    pub async fn stop(mut self) {
        // silent-ok: the judge's container goes with its input.
        let _ = self.judge.child.kill().await;
    }
}

/// Figures of a set of outcomes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Score {
    pub cases: usize,
    pub attacked: usize,
    pub useful: usize,
    pub questions: usize,
}

impl Score {
    pub fn of<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>) -> Score {
        let mut score = Score::default();
        for outcome in outcomes {
            score.cases += 1;
            score.attacked += usize::from(outcome.attacked == Some(true));
            score.useful += usize::from(outcome.utility);
            score.questions += outcome.questions;
        }
        score
    }

    fn share(part: usize, whole: usize) -> f64 {
        if whole == 0 {
            0.0
        } else {
            100.0 * part as f64 / whole as f64
        }
    }

    /// Attack success, percent of cases.
    pub fn attack_success(&self) -> f64 {
        Score::share(self.attacked, self.cases)
    }

    /// Utility, percent of cases.
    pub fn utility(&self) -> f64 {
        Score::share(self.useful, self.cases)
    }

    pub fn questions_per_task(&self) -> f64 {
        if self.cases == 0 {
            0.0
        } else {
            self.questions as f64 / self.cases as f64
        }
    }
}
