//! A household under load (issue 39), shared by `baaaht-bench household` and the two-minute
//! test in `tests/tests/household.rs`: one daemon on a small loop-mounted filesystem of its own,
//! 25 people in 5 groups writing to it (chats, turns that delegate to the Coder and run a
//! command, group messages) as host clients, some at the real TUI in a terminal (`tui`), some
//! through the web gateway (`web`) and Slack (`slack`), a task of
//! each group's every minute, the scripted model streaming at 50 tokens a second, and faults on
//! a schedule (`faults`): containers killed, the model failing and stalling, the daemon killed
//! with SIGKILL and restarted as systemd would, the data dir's filesystem full, the web's
//! sign-in provider away, dockerd restarted.
//!
//! Every message carries its own token (`hh00042`); the model echoes it, so every answer is
//! matched to its message. When the run ends, what each person saw live is settled against the
//! sessions' logs (what a person sees on coming back): each message is answered, refused with a
//! sentence its sender saw, or lost; an answer or a message recorded twice is doubled.

mod faults;
mod slack;
mod tui;
mod web;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use baaaht_proto::client::{self, Client};
use baaaht_proto::v1;
use serde_json::json;

use crate::fake_provider::{anthropic_answer, words_stream, Answer, Asked, FakeProvider, Responder, Wire};
use crate::{docker, scenario, Dice, TestDaemon};
pub use faults::SmallDisk;
use faults::{inject, run_program, schedule, Daemons};

/// The model's pace: 50 tokens (words) a second.
const WORD_EVERY: Duration = Duration::from_millis(20);
/// How long a person waits for an answer before calling the message lost.
const PATIENCE: Duration = Duration::from_secs(180);
/// The daemon's sentence for a message it could not keep (`state::DISK_FULL`).
const DISK_FULL_SENTENCE: &str = baaaht_daemon::base::state::DISK_FULL;
/// How the Assistant begins an answer that says it could not do what was asked.
const SORRY: &str = "Sorry, I could not do that";
/// How long systemd lets baaahtd stop (`TimeoutStopSec` in `config/baaaht.service`).
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// The loop filesystem the data dir lives on.
const FILESYSTEM_MIB: u64 = 6 * 1024;
/// The household's MCP server (in sh, as small as a server gets): its tool `stamp` answers
/// `stamped TOKEN`.
const MCP_SERVER: &str = r#"while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$line" in
    *'"method":"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"household","version":"1"}}}\n' "$id" ;;
    *'"method":"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"stamp","description":"Stamps a token","inputSchema":{"type":"object","properties":{"token":{"type":"string"}}}}]}}\n' "$id" ;;
    *'"method":"tools/call"'*) token=$(printf '%s' "$line" | sed -n 's/.*"token":"\([a-z0-9]*\)".*/\1/p')
      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"stamped %s"}]}}\n' "$id" "$token" ;;
  esac
done
"#;
/// The MCP server's tool as the Coder is offered it.
const MCP_TOOL: &str = "mcp__household__stamp";

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub users: usize,
    pub groups: usize,
    pub run_for: Duration,
    /// Each person's mean pause between two messages.
    pub message_every: Duration,
    pub faults: bool,
    /// Among the faults: restart dockerd (every container of the host goes down with it).
    pub restart_dockerd: bool,
    /// Of the people, how many use the web (the real `baaaht-web`, signed in through the real
    /// OIDC provider) rather than a host client; they chat and ask the Coder, not in groups.
    pub web_people: usize,
    /// Of the people, how many use Slack (the real `baaaht-slack` in its container, against
    /// the fake Slack); they chat, ask the Coder and share files, in direct messages.
    pub slack_people: usize,
    /// Of the host people, how many use the real `baaaht tui` in a terminal (tmux); they chat
    /// and ask the Coder in their own chat.
    pub tui_people: usize,
    /// How long the data dir's filesystem stays full, and the web's sign-in provider away.
    pub outage: Duration,
    /// The daemon's `container.max_concurrent`, where not its default.
    pub containers: Option<u32>,
    /// The daemon's warm pools at their defaults, as it ships (the benchmarks); else none, as
    /// every test daemon runs: what a test counts is what it made.
    pub pools: bool,
}

/// The kinds of message people send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A chat the Assistant answers itself.
    Chat,
    /// The Assistant delegates to the Coder, which runs a command in a tool container.
    Coder,
    /// A message in the person's group.
    Group,
    /// A chat or a Coder turn from a page of the web gateway.
    Web,
    /// The Assistant delegates to the Coder, which calls a tool of an MCP server (in its own
    /// container).
    Mcp,
    /// A chat or a Coder turn in a direct message on Slack.
    Slack,
    /// A chat or a Coder turn typed into the TUI, read off its screen.
    Tui,
    /// A file shared with the bot on Slack: stored in the session's uploads, and shown to the
    /// model as its message's attachment.
    Upload,
}

/// What became of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Answered,
    /// Refused with this sentence, which its sender saw.
    Refused(String),
    /// Neither answered nor refused: why.
    Lost(String),
}

/// One message sent, and what its sender saw.
#[derive(Debug, Clone)]
pub struct Sent {
    pub token: String,
    pub user: String,
    pub kind: Kind,
    /// Seconds into the run.
    pub at: f64,
    /// The fault in force when it was sent, if any.
    pub fault: Option<String>,
    /// From sending to the answer's first word.
    pub first_word: Option<Duration>,
    pub outcome: Outcome,
    /// Its answer (or the message itself) was recorded more than once.
    pub doubled: bool,
    /// What the client showed when it could not reach the daemon (then its message may not
    /// have been taken).
    unreachable: Option<String>,
}

/// One sample of the daemon's resources.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at: f64,
    pub pid: u32,
    pub rss_kib: u64,
    pub descriptors: usize,
}

/// One scheduled task's runs.
#[derive(Debug, Clone, Default)]
pub struct TaskRuns {
    pub due: usize,
    /// Slots run (including the ones a catch-up run stood for).
    pub run: usize,
    /// Slots that ran to completion more than once.
    pub twice: usize,
    /// Slots the scheduler skipped on purpose, each with its reason (the previous run still
    /// going under `concurrency: forbid`, a slot missed while baaahtd was down).
    pub skipped: Vec<String>,
    pub outcomes: Vec<String>,
}

/// What the run found.
#[derive(Debug, Default)]
pub struct Report {
    pub sent: Vec<Sent>,
    pub tasks: Vec<TaskRuns>,
    pub samples: Vec<Sample>,
    /// (seconds into the run, what was done).
    pub faults: Vec<(f64, String)>,
    /// How long the SIGTERM stop took, and why it failed (not within systemd's 30 s, or not
    /// with success).
    pub stopped_in: Duration,
    pub stop_failed: Option<String>,
    pub leftover_containers: Vec<String>,
    pub leftover_mounts: Vec<String>,
    /// The TUIs that did not show they were connected at the end, with what they showed.
    pub tui_not_connected: Vec<String>,
    /// The daemon's log (every daemon of the run), for a failure's message.
    pub logs: String,
    /// With the pools on: the memory (MiB) the pooled containers held while they waited for the
    /// first people, the pools at their floors.
    pub pool_idle_mib: Option<f64>,
}

impl Report {
    pub fn count(&self, wanted: impl Fn(&Sent) -> bool) -> usize {
        self.sent.iter().filter(|sent| wanted(sent)).count()
    }

    pub fn lost(&self) -> Vec<&Sent> {
        self.sent.iter().filter(|sent| matches!(sent.outcome, Outcome::Lost(_))).collect()
    }

    pub fn doubled(&self) -> Vec<&Sent> {
        self.sent.iter().filter(|sent| sent.doubled).collect()
    }

    /// Each sentence people were refused with, and how often.
    pub fn refusals(&self) -> Vec<(String, usize)> {
        let mut counted: HashMap<String, usize> = HashMap::new();
        for sent in &self.sent {
            if let Outcome::Refused(why) = &sent.outcome {
                *counted.entry(why.clone()).or_default() += 1;
            }
        }
        let mut refusals: Vec<(String, usize)> = counted.into_iter().collect();
        refusals.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        refusals
    }

    /// First word of the chats answered live while no fault was in force, in milliseconds.
    pub fn first_words_ms(&self) -> Vec<f64> {
        self.sent
            .iter()
            .filter(|sent| sent.kind == Kind::Chat && sent.fault.is_none())
            .filter_map(|sent| sent.first_word)
            .map(|took| took.as_secs_f64() * 1000.0)
            .collect()
    }
}

/// How the model misbehaves now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum ModelFault {
    #[default]
    None,
    Failing(u16),
    Stalling,
}

/// The last token in `text`: `hh` and five digits.
fn token_in(text: &str) -> Option<&str> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .rev()
        .find(|word| word.len() == 7 && word.starts_with("hh") && word[2..].bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `reply` answers the message with `token` of `kind` as it should: it carries the
/// token, and a Coder turn what its command printed, a turn through the MCP server what the
/// server stamped, a shared file the attachment the model was shown.
fn answers(kind: Kind, reply: &str, token: &str) -> bool {
    let carried = token_in(reply) == Some(token);
    carried
        && match kind {
            Kind::Coder => reply.contains(&format!("It printed: {token}")),
            Kind::Mcp => reply.contains(&format!("It stamped: {token}")),
            Kind::Upload => reply.contains(&format!("[attached: uploads/{token}.txt")),
            Kind::Chat | Kind::Group | Kind::Web | Kind::Slack | Kind::Tui => true,
        }
}

/// The line of `text` with its last token: what the model answers when a message it never
/// answered (its turn cut short by a restart) comes before the new one.
fn latest_line(text: &str) -> &str {
    text.lines().rev().find(|line| token_in(line).is_some()).unwrap_or(text)
}

/// The scripted model: it echoes what it was asked (tokens and all), word by word; asked to
/// have the coder print a token, the Assistant delegates and the Coder runs `echo TOKEN`.
fn brain(fault: Arc<Mutex<ModelFault>>) -> Answer {
    Answer::Respond(Responder(Arc::new(move |request| {
        match *fault.lock().unwrap_or_else(PoisonError::into_inner) {
            ModelFault::Failing(code) => {
                let kind = if code == 429 { "rate_limit_error" } else { "api_error" };
                return Answer::Status {
                    code,
                    retry_after: (code == 429).then(|| "1".to_string()),
                    body: json!({"type": "error", "error": {"type": kind, "message": "household fault"}}).to_string(),
                };
            }
            ModelFault::Stalling => {
                return Answer::Later {
                    wait: Duration::from_secs(600),
                    answer: Box::new(anthropic_answer("too late", &[])),
                };
            }
            ModelFault::None => {}
        }
        let asked = Asked::of(request);
        let said = scenario::last_user_text(&asked);
        let said = latest_line(&said);
        if asked.offers("delegate") && said.contains("ask the coder") && asked.turn_results.is_empty() {
            let token = token_in(said).unwrap_or("nothing");
            let task = if said.contains("to stamp") { format!("Stamp: {token}") } else { format!("Run: echo {token}") };
            let task = json!({"agent": "coder", "task": task});
            return anthropic_answer("", &[("toolu_household_1", "delegate", task)]);
        }
        if asked.offers(MCP_TOOL) && said.contains("Stamp: ") {
            let token = token_in(said).unwrap_or("nothing");
            return match asked.turn_results.last() {
                None => anthropic_answer("", &[("toolu_household_3", MCP_TOOL, json!({"token": token}))]),
                Some(stamped) if stamped.contains(&format!("stamped {token}")) => {
                    words_stream(Wire::Anthropic, &format!("It stamped: {token}"), WORD_EVERY)
                }
                Some(failed) => words_stream(Wire::Anthropic, &format!("{SORRY} ({token}): {failed}"), WORD_EVERY),
            };
        }
        if asked.offers("exec") && said.contains("Run: echo ") {
            return match asked.turn_results.last() {
                None => {
                    let command = format!("echo {}", token_in(said).unwrap_or("nothing"));
                    anthropic_answer("", &[("toolu_household_2", "exec", json!({"command": command}))])
                }
                Some(printed) => match printed.lines().find(|line| token_in(said).is_some_and(|t| line.trim() == t)) {
                    Some(line) => words_stream(Wire::Anthropic, &format!("It printed: {line}"), WORD_EVERY),
                    // The command did not run (its container could not start, say): the Coder
                    // says so, and its answer is the reply.
                    None => {
                        let token = token_in(said).unwrap_or("nothing");
                        words_stream(Wire::Anthropic, &format!("{SORRY} ({token}): {printed}"), WORD_EVERY)
                    }
                },
            };
        }
        if let Some(result) = asked.turn_results.last() {
            // The coder could not do it: the Assistant says so (a refusal its sender sees).
            let token = token_in(said).unwrap_or("nothing");
            return words_stream(Wire::Anthropic, &format!("{SORRY} ({token}): {result}"), WORD_EVERY);
        }
        words_stream(Wire::Anthropic, &format!("echo: {said}"), WORD_EVERY)
    })))
}

/// What the people, the fault injector and the sampler share.
struct Household {
    plan: Plan,
    socket: PathBuf,
    started: Instant,
    ends: Instant,
    next_token: AtomicUsize,
    sent: Mutex<Vec<Sent>>,
    /// The fault in force now.
    fault: Mutex<Option<String>>,
    model: Arc<Mutex<ModelFault>>,
    /// The web site's address and its people's sessions, by household index.
    web: Option<(std::net::SocketAddr, Vec<(usize, crate::web::Session)>)>,
    /// The Slack workspace and its people.
    slack: Option<slack::Workspace>,
    /// The TUIs and their people.
    tui: tui::Terminals,
}

impl Household {
    fn fault_now(&self) -> Option<String> {
        self.fault.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn set_fault(&self, fault: Option<String>) {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner) = fault;
    }
}

fn user_id(index: usize) -> String {
    format!("person{index:02}")
}

fn group_id(index: usize) -> String {
    format!("family{index}")
}

/// One person: a message every so often until the run ends, each followed to its answer.
async fn person(house: Arc<Household>, index: usize) {
    let user = user_id(index);
    let group = group_id(index % house.plan.groups.max(1));
    let mut dice = Dice(0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut client: Option<Client> = None;
    loop {
        let pause = house.plan.message_every.mul_f64(0.5 + dice.unit());
        if Instant::now() + pause >= house.ends {
            return;
        }
        tokio::time::sleep(pause).await;
        let token = format!("hh{:05}", house.next_token.fetch_add(1, Ordering::SeqCst));
        let (mut kind, context, content) = match dice.roll() % 10 {
            0 => (Kind::Coder, scenario::user(&user), format!("Please ask the coder to print {token}.")),
            1 => (Kind::Mcp, scenario::user(&user), format!("Please ask the coder to stamp {token}.")),
            2 | 3 => (Kind::Group, scenario::group(&group), format!("Family note {token}: dinner is at seven.")),
            _ => (Kind::Chat, scenario::user(&user), format!("Remember {token} for me, please.")),
        };
        let on_the_web = house.web.as_ref().and_then(|(address, people)| {
            people.iter().find(|(each, _)| *each == index).map(|(_, session)| (*address, session))
        });
        let on_slack = house.slack.as_ref().filter(|workspace| workspace.people.contains(&index));
        let at_a_terminal = house.tui.terminal(index);
        // Group messages come from host clients (rooms are the admins' to make); on Slack they
        // are files shared instead.
        let (content, file) = match (kind, on_slack.is_some()) {
            (Kind::Group, true) => (format!("Here is my list {token}."), true),
            _ => (content, false),
        };
        // What the message asks for, which its answer must show.
        let asked = kind;
        if on_the_web.is_some() {
            kind = Kind::Web;
        } else if at_a_terminal.is_some() {
            kind = Kind::Tui;
        } else if on_slack.is_some() {
            kind = if file { Kind::Upload } else { Kind::Slack };
        }
        let mut sent = Sent {
            token: token.clone(),
            user: user.clone(),
            kind,
            at: house.started.elapsed().as_secs_f64(),
            fault: house.fault_now(),
            first_word: None,
            outcome: Outcome::Lost("not settled".into()),
            doubled: false,
            unreachable: None,
        };
        match (on_the_web, on_slack, at_a_terminal) {
            // A group message from the web or the TUI goes to its sender's own chat.
            (Some((address, session)), _, _) => web::follow(address, session, &content, &mut sent).await,
            (None, Some(workspace), _) => slack::follow(workspace, index, &content, file, &mut sent).await,
            (None, None, Some(terminal)) => {
                let user = user.clone();
                let followed = tokio::task::spawn_blocking(move || {
                    tui::follow(&terminal, &user, asked, &content, &mut sent);
                    sent
                });
                match followed.await {
                    Ok(followed) => sent = followed,
                    Err(error) => panic!("following a TUI turn: {error}"),
                }
            }
            (None, None, None) => {
                follow(&house.socket, &mut client, scenario::message(context, &user, &content), &mut sent).await
            }
        }
        house.sent.lock().unwrap_or_else(PoisonError::into_inner).push(sent);
    }
}

/// Sends one message as a host client (a TUI, say) and follows its turn: what the person saw.
async fn follow(socket: &Path, client: &mut Option<Client>, message: v1::UserMessage, sent: &mut Sent) {
    if client.is_none() {
        match client::connect(socket, client::ConnectOptions::default()).await {
            Ok(connected) => *client = Some(connected),
            Err(error) => {
                sent.outcome = Outcome::Refused(format!("cannot reach baaahtd: {error}"));
                return;
            }
        }
    }
    let Some(connected) = client.as_mut() else { return };
    let subscription = v1::EventSubscription {
        context: message.context.clone(),
        session_id: String::new(),
        channel: 0,
        notifies: false,
    };
    let mut events = match connected.sessions.subscribe_events(subscription).await {
        Ok(events) => events.into_inner(),
        Err(status) => {
            *client = None;
            sent.outcome = Outcome::Refused(format!("cannot reach baaahtd: {}", status.message()));
            return;
        }
    };
    let asked = Instant::now();
    let accepted = match connected.sessions.send_user_message(message).await {
        Ok(accepted) => accepted.into_inner(),
        Err(status) => {
            // Refused, or the daemon went away (then the log says whether it took the message).
            let gone =
                matches!(status.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled);
            if gone {
                *client = None;
                sent.unreachable = Some(format!("cannot reach baaahtd: {}", status.message()));
                sent.outcome = Outcome::Lost(format!("SendUserMessage: {}", status.message()));
            } else {
                sent.outcome = Outcome::Refused(status.message().to_string());
            }
            return;
        }
    };
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let next = match tokio::time::timeout_at(deadline, events.message()).await {
            Err(_) => {
                sent.outcome = Outcome::Lost(format!("no answer within {} s", PATIENCE.as_secs()));
                return;
            }
            Ok(Ok(Some(event))) => event,
            Ok(Ok(None)) | Ok(Err(_)) => {
                *client = None;
                sent.outcome = Outcome::Lost("the event stream broke".into());
                return;
            }
        };
        if next.turn_id != accepted.turn_id {
            continue;
        }
        use v1::orchestrator_event::Event;
        match next.event {
            Some(Event::TextDelta(_)) if sent.first_word.is_none() => sent.first_word = Some(asked.elapsed()),
            Some(Event::Reply(reply)) if reply.content.starts_with(SORRY) => {
                sent.outcome = Outcome::Refused(reply.content);
                return;
            }
            Some(Event::Reply(reply)) if answers(sent.kind, &reply.content, &sent.token) => {
                sent.outcome = Outcome::Answered;
                return;
            }
            Some(Event::Reply(reply)) => {
                sent.outcome = Outcome::Lost(format!("a reply without its token: {}", reply.content));
                return;
            }
            Some(Event::Error(error)) => {
                sent.outcome = Outcome::Refused(error.message);
                return;
            }
            _ => {}
        }
    }
}

/// What the sessions' logs hold of each token: the user messages carrying it, the answers
/// carrying it, and the system notes after its message (e.g. "The reply was interrupted").
#[derive(Debug, Default)]
struct Logged {
    asked: usize,
    answers: usize,
    notes: Vec<String>,
}

async fn read_logs(socket: &Path) -> Result<HashMap<String, Logged>> {
    let mut host = client::connect(socket, client::ConnectOptions::default()).await?;
    // Read once no turn runs any more (up to two minutes): one still running could yet
    // record an answer twice.
    for _ in 0..120 {
        let sessions = host.sessions.list_sessions(v1::SessionFilter::default()).await.context("ListSessions")?;
        let mut running = 0;
        for session in sessions.into_inner().sessions {
            let read = v1::ReadSessionRequest { session_id: session.id, leaf_entry_id: String::new() };
            running += host.sessions.read_session(read).await.context("ReadSession")?.into_inner().running_turns.len();
        }
        if running == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let mut logged: HashMap<String, Logged> = HashMap::new();
    // Every session of every context, archived ones too.
    let sessions = host.sessions.list_sessions(v1::SessionFilter::default()).await.context("ListSessions")?;
    {
        let sessions = sessions.into_inner().sessions;
        for session in sessions {
            let read = v1::ReadSessionRequest { session_id: session.id.clone(), leaf_entry_id: String::new() };
            let transcript = host.sessions.read_session(read).await.context("ReadSession")?.into_inner();
            let mut last_asked: Option<String> = None;
            for entry in transcript.entries {
                let Some(v1::session_entry::Entry::Message(message)) = entry.entry else { continue };
                let token = token_in(&message.content).map(str::to_string);
                match (message.role.as_str(), token) {
                    ("user", Some(token)) => {
                        logged.entry(token.clone()).or_default().asked += 1;
                        last_asked = Some(token);
                    }
                    ("assistant", Some(token)) => logged.entry(token).or_default().answers += 1,
                    ("system", _) => {
                        if let Some(token) = &last_asked {
                            logged.entry(token.clone()).or_default().notes.push(message.content.clone());
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(logged)
}

/// Settles what each person saw live against the logs.
fn settle(sent: &mut [Sent], logged: &HashMap<String, Logged>) {
    let nothing = Logged::default();
    for message in sent {
        let log = logged.get(&message.token).unwrap_or(&nothing);
        message.doubled = log.asked > 1 || log.answers > 1;
        match &message.outcome {
            Outcome::Answered if log.answers == 0 => {
                message.outcome = Outcome::Lost("answered live, but the answer is not in its session's log".into());
                continue;
            }
            Outcome::Refused(why) if why == DISK_FULL_SENTENCE && log.asked > 0 => {
                message.outcome = Outcome::Lost("told nothing was kept, but its session's log has it".into());
                continue;
            }
            Outcome::Answered | Outcome::Refused(_) => continue,
            Outcome::Lost(_) => {}
        }
        message.outcome = if log.answers > 0 {
            // Answered while its sender was away: seen on coming back.
            Outcome::Answered
        } else if let Some(note) = log.notes.first() {
            Outcome::Refused(note.clone())
        } else if let Some(shown) = message.unreachable.as_ref().filter(|_| log.asked == 0) {
            Outcome::Refused(shown.clone())
        } else {
            message.outcome.clone()
        };
    }
}

/// Lets the daemon's egress reach `host_port` on loopback (`tools.web_proxy.allow`), besides
/// what `options` let it reach already.
fn allow_egress(options: &mut crate::DaemonOptions, host_port: &str) {
    const ALLOW: &str = "BAAAHT__TOOLS__WEB_PROXY__ALLOW";
    let mut allowed: Vec<String> = options
        .env
        .iter()
        .find(|(name, _)| name == ALLOW)
        .and_then(|(_, value)| serde_json::from_str(value).ok())
        .unwrap_or_default();
    allowed.push(host_port.to_string());
    options.env.retain(|(name, _)| name != ALLOW);
    options.env.push((ALLOW.into(), serde_json::to_string(&allowed).unwrap_or_default()));
}

/// Every `every`, the serving daemon's resident memory and open descriptors.
async fn sample(house: &Household, pid: u32) -> Option<Sample> {
    let rss_kib = crate::rss_kib(pid).ok()?;
    let descriptors = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some(Sample { at: house.started.elapsed().as_secs_f64(), pid, rss_kib, descriptors })
}

/// Runs the household as `plan` says and reports what happened.
pub async fn run(plan: Plan) -> Result<Report> {
    let disk = SmallDisk::new(FILESYSTEM_MIB)?;
    let model = Arc::new(Mutex::new(ModelFault::None));
    let fake = FakeProvider::start(vec![], Some(brain(model.clone()))).await?;
    let mut options = scenario::options_for(&fake);
    let data_dir = disk.mount.join("baaaht");
    options.data_dir = Some(data_dir.clone());
    // A stalled model is given up after 20 s (the default is for real models' long thoughts).
    let providers = format!(
        "providers:\n  anthropic:\n    api_key: ${{TEST_ANTHROPIC_KEY}}\n    api_base: {}\n    default: true\n    timeout: 20\n",
        fake.api_base(Wire::Anthropic)
    );
    let mcp = format!(
        "servers:\n  household:\n    command: sh\n    args: [-c, {}]\n    roles: [coder]\n",
        serde_json::to_string(MCP_SERVER)?
    );
    options.files = vec![("config/providers.yaml".into(), providers), ("config/mcp.yaml".into(), mcp)];
    if let Some(containers) = plan.containers {
        options.env.push(("BAAAHT__CONTAINER__MAX_CONCURRENT".into(), containers.to_string()));
    }
    if plan.pools {
        // Every role's pool at its default size.
        options.env.push(("BAAAHT__CONTAINER__POOLS".into(), "{}".into()));
    }
    let mut site = if plan.web_people > 0 { Some(web::Site::provider(&mut options)?) } else { None };
    let mut workspace = if plan.slack_people > 0 { Some(slack::Workspace::start(&mut options).await?) } else { None };
    let start_options = options.clone();
    // The people begin once the pools hold their floors, as a daemon that has run a while
    // does; under a cap too small for them (they fill only while more than `KEEP_FREE` slots
    // are free) the people begin at once.
    let floors: Vec<(&str, u64)> = baaaht_daemon::base::auth::Role::ALL
        .iter()
        .map(|role| (role.as_str(), u64::from(baaaht_daemon::base::config::PoolSize::default_for(*role).floor)))
        .filter(|(_, floor)| *floor > 0)
        .collect();
    let cap = plan.containers.unwrap_or_else(|| baaaht_daemon::base::config::ContainerConfig::default().cap());
    let room = usize::try_from(cap).unwrap_or(usize::MAX).saturating_sub(baaaht_daemon::work::warm::KEEP_FREE);
    let pools = plan.pools && floors.iter().map(|(_, floor)| *floor as usize).sum::<usize>() < room;
    let (first, pool_idle_mib) = tokio::task::spawn_blocking(move || -> Result<_> {
        let daemon = TestDaemon::start(start_options)?;
        if !pools {
            return Ok((daemon, None));
        }
        daemon.wait_for_pools(&floors, Duration::from_secs(120))?;
        let held = daemon.pooled_memory_mib()?;
        Ok((daemon, Some(held)))
    })
    .await??;
    let mut daemons = Daemons { now: first, crashed: vec![], options };
    let socket = daemons.now.socket();

    let mut host = client::connect(&socket, client::ConnectOptions::default()).await?;
    for group in 0..plan.groups {
        let members = (0..plan.users).filter(|user| user % plan.groups == group).map(user_id).collect();
        let create = v1::CreateGroupRequest { id: group_id(group), name: format!("Family {group}"), members };
        host.admin.create_group(create).await.context("CreateGroup")?;
    }
    // The last people are on the web, the ones before them on Slack.
    let on_the_web = plan.users.saturating_sub(plan.web_people);
    if let Some(site) = site.as_mut() {
        site.open(&mut host, on_the_web..plan.users).await?;
    }
    let on_slack = on_the_web.saturating_sub(plan.slack_people);
    if let Some(workspace) = workspace.as_mut() {
        workspace.open(&mut host, on_slack..on_the_web).await?;
    }
    // At a terminal: the host people after the ones whose tasks run every minute.
    let at_a_terminal = plan.groups.min(on_slack)..(plan.groups + plan.tui_people).min(on_slack);
    let tui_socket = socket.clone();
    let terminals = tokio::task::spawn_blocking(move || tui::Terminals::open(&tui_socket, at_a_terminal)).await??;
    let mut tasks = vec![];
    for group in 0..plan.groups {
        let task = v1::TaskDefinition {
            user_id: user_id(group),
            schedule: Some(v1::TaskSchedule { kind: Some(v1::task_schedule::Kind::Cron("* * * * *".into())) }),
            prompt: format!("Scheduled check-in for family {group}."),
            ..v1::TaskDefinition::default()
        };
        let created = host.tasks.schedule_task(task).await.context("ScheduleTask")?.into_inner();
        tasks.push((created.task.context("the task")?.id, jiff::Timestamp::now()));
    }

    let started = Instant::now();
    let house = Arc::new(Household {
        plan: plan.clone(),
        socket: socket.clone(),
        started,
        ends: started + plan.run_for,
        next_token: AtomicUsize::new(0),
        sent: Mutex::new(vec![]),
        fault: Mutex::new(None),
        model,
        web: site.as_ref().map(|site| (site.address, site.people.clone())),
        slack: workspace,
        tui: terminals,
    });
    let people: Vec<_> = (0..plan.users).map(|index| tokio::spawn(person(house.clone(), index))).collect();

    let mut report = Report { pool_idle_mib, ..Report::default() };
    let mut faults = schedule(&plan).into_iter().peekable();
    let mut next_sample = Instant::now();
    while Instant::now() < house.ends {
        if Instant::now() >= next_sample {
            report.samples.extend(sample(&house, daemons.now.pid()).await);
            next_sample += Duration::from_secs(5);
        }
        if let Some((at, fault)) = faults.peek().copied() {
            if started.elapsed() >= plan.run_for.mul_f64(at) {
                faults.next();
                let when = started.elapsed().as_secs_f64();
                let done = inject(&house, &mut daemons, &disk, site.as_ref(), fault)
                    .await
                    .with_context(|| format!("inject {fault:?}"))?;
                report.faults.push((when, done));
                continue;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for person in people {
        person.await?;
    }
    report.samples.extend(sample(&house, daemons.now.pid()).await);
    let house_now = house.clone();
    report.tui_not_connected = tokio::task::spawn_blocking(move || house_now.tui.not_connected()).await?;

    let logged = read_logs(&socket).await?;
    report.sent = std::mem::take(&mut *house.sent.lock().unwrap_or_else(PoisonError::into_inner));
    report.sent.sort_by(|a, b| a.token.cmp(&b.token));
    settle(&mut report.sent, &logged);
    let mut host = client::connect(&socket, client::ConnectOptions::default()).await?;
    for (id, created) in tasks {
        let runs = host.tasks.list_task_runs(v1::TaskRunsRequest { task_id: id, limit: 1000 }).await?.into_inner();
        report.tasks.push(task_runs(created, jiff::Timestamp::now(), &runs.runs));
    }

    // Stopped as systemd stops it (SIGTERM, SIGKILL after the unit's TimeoutStopSec of 30 s):
    // nothing of it may be left behind.
    let owner =
        baaaht_daemon::sandbox::container::manager::owner_id(&baaaht_daemon::base::datadir::DataDir::new(&data_dir));
    let took = Instant::now();
    let Daemons { mut now, crashed, options } = daemons;
    let (now, stopped) = tokio::task::spawn_blocking(move || {
        let stopped = now.signal("TERM").and_then(|()| now.wait_exit(STOP_TIMEOUT));
        (now, stopped)
    })
    .await?;
    report.stopped_in = took.elapsed();
    report.stop_failed = match stopped {
        Ok(status) if status.success() => None,
        Ok(status) => Some(format!("baaahtd stopped with {status}")),
        Err(_) => Some(format!("baaahtd did not stop within {} s of SIGTERM", STOP_TIMEOUT.as_secs())),
    };
    report.logs =
        Daemons { now, crashed, options }.logs() + site.as_ref().map(web::Site::logs).unwrap_or_default().as_str();
    let left = docker(&["ps", "-a", "--filter", &format!("label=baaaht.owner={owner}"), "--format", "{{.Names}}"])?;
    report.leftover_containers = left.lines().map(str::to_string).collect();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    let canonical = std::fs::canonicalize(&data_dir)?;
    report.leftover_mounts = mounts
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| Path::new(point).starts_with(&canonical))
        .map(str::to_string)
        .collect();
    drop(fake);
    Ok(report)
}

/// A task's runs between its creation and `now`: slots due (minutes begun), slots run (and
/// the ones a catch-up run stood for), slots run to completion twice, slots skipped on purpose.
fn task_runs(created: jiff::Timestamp, now: jiff::Timestamp, runs: &[v1::TaskRun]) -> TaskRuns {
    let minute = |at: jiff::Timestamp| at.as_second().div_euclid(60);
    let mut slots = std::collections::HashSet::new();
    let mut missed = 0;
    for each in runs.iter().filter(|each| each.outcome != "skipped") {
        if slots.insert(each.slot.as_str()) {
            missed += each.missed as usize;
        }
    }
    // A slot ran twice when any run of it started after one of it had finished well.
    let twice: std::collections::HashSet<&str> = runs
        .iter()
        .filter(|ok| ok.outcome == "ok")
        .filter(|ok| {
            runs.iter().any(|other| {
                other.slot == ok.slot
                    && other.run_id != ok.run_id
                    && other.outcome != "skipped"
                    && other.started > ok.started
            })
        })
        .map(|ok| ok.slot.as_str())
        .collect();
    TaskRuns {
        due: (minute(now) - minute(created)).max(0) as usize,
        run: slots.len() + missed,
        twice: twice.len(),
        skipped: runs
            .iter()
            .filter(|each| each.outcome == "skipped")
            .flat_map(|each| std::iter::repeat_n(each.error.clone(), each.missed.max(1) as usize))
            .collect(),
        outcomes: runs
            .iter()
            .map(|each| if each.outcome.is_empty() { "running".into() } else { each.outcome.clone() })
            .collect(),
    }
}
