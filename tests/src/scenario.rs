//! Agents end to end with the fake provider as the model: brains that read what each agent is
//! asked and answer the way a model would, a daemon wired to them, and a client that sends a
//! message and follows its turn to the end.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use baaaht_proto::client::{self, Client};
use baaaht_proto::v1;
use serde_json::json;

use crate::fake_provider::{anthropic_answer, Answer, Asked, FakeProvider, Responder, Wire};
use crate::{DaemonOptions, TestDaemon};

/// The text a coder's script prints.
pub const HELLO: &str = "hello from baaaht";

/// The Assistant's side of each turn: it delegates (`params`, after saying `say`), then says
/// `reply` and what came back. Earlier turns' delegations, in the history as tool calls and
/// results, do not count.
fn assistant_delegates(asked: &Asked, say: &str, params: serde_json::Value, reply: &str) -> Answer {
    match asked.turn_results.last() {
        None => anthropic_answer(say, &[("toolu_delegate_1", "delegate", params)]),
        Some(result) => anthropic_answer(&format!("{reply}{result}"), &[]),
    }
}

/// The Assistant's side of a turn, every turn anew: it hands `task` to the Coder, then passes
/// on what the Coder said ("The coder says: …").
pub fn assistant_asks_the_coder(asked: &Asked, task: &str) -> Answer {
    let params = json!({"agent": "coder", "task": task, "returnDirectly": false});
    assistant_delegates(asked, "", params, "The coder says: ")
}

/// The Assistant's side of a turn, every turn anew: it hands `task` to the Worker, then passes
/// on what the Worker said ("The worker says: …").
pub fn assistant_asks_the_worker(asked: &Asked, task: &str) -> Answer {
    let params = json!({"agent": "worker", "task": task, "returnDirectly": false});
    assistant_delegates(asked, "", params, "The worker says: ")
}

/// A household's model for installing skills by asking: the Assistant hands "install …" to the
/// Worker, whose `install_skill` takes the parameters of the first of `skills` whose word the
/// request names, and passes on what the call answered; asked "which skills", the Assistant
/// says whether its prompt now offers the skill `offered`.
pub fn installing_brain(skills: Vec<(&'static str, serde_json::Value)>, offered: &'static str) -> Answer {
    Answer::Respond(Responder(Arc::new(move |request| {
        let asked = Asked::of(request);
        if asked.offers("delegate") {
            let said = last_user_text(&asked);
            if said.contains("which skills") {
                let has = asked.system.contains(&format!("- {offered}: "));
                return anthropic_answer(if has { "I have the skill." } else { "No new skills." }, &[]);
            }
            return assistant_asks_the_worker(&asked, &format!("Install this: {said}"));
        }
        if asked.offers("install_skill") {
            let Some((_, params)) = skills.iter().find(|(word, _)| asked.first.contains(word)) else {
                return anthropic_answer("I do not know that skill.", &[]);
            };
            return match asked.turn_results.last() {
                None => anthropic_answer("", &[("toolu_install", "install_skill", params.clone())]),
                Some(result) => anthropic_answer(result, &[]),
            };
        }
        anthropic_answer("I was not expecting to be asked.", &[])
    })))
}

/// The Assistant delegates to the Coder; the Coder writes `hello.sh`, runs it, and reports what
/// it printed; the Assistant passes that on.
pub fn coder_brain() -> Answer {
    Answer::Respond(Responder(Arc::new(|request| {
        let asked = Asked::of(request);
        if asked.offers("delegate") {
            let task = json!({"agent": "coder", "task": "Write hello.sh that prints a greeting, then run it.", "responseFormat": "what it printed", "returnDirectly": false});
            return assistant_delegates(&asked, "I'll ask the coder. ", task, "Done. The coder says: ");
        }
        if asked.offers("exec") {
            return match asked.results.len() {
                0 => anthropic_answer(
                    "",
                    &[(
                        "toolu_write_1",
                        "write_file",
                        json!({"path": "hello.sh", "content": format!("echo {HELLO}\n")}),
                    )],
                ),
                1 => anthropic_answer("", &[("toolu_exec_1", "exec", json!({"command": "sh hello.sh"}))]),
                _ => {
                    let printed = asked.results.last().cloned().unwrap_or_default();
                    let line = printed.lines().find(|line| line.contains(HELLO)).unwrap_or("nothing");
                    anthropic_answer(&format!("hello.sh printed: {line}"), &[])
                }
            };
        }
        anthropic_answer("I was not expecting to be asked.", &[])
    })))
}

/// The Assistant delegates to the Worker, which answers at once; the Assistant passes it on.
/// No tool runs: the round trip is the orchestration alone.
pub fn worker_brain() -> Answer {
    Answer::Respond(Responder(Arc::new(|request| {
        let asked = Asked::of(request);
        if asked.offers("delegate") {
            return assistant_delegates(
                &asked,
                "",
                json!({"agent": "worker", "task": "Say done.", "returnDirectly": false}),
                "Worker: ",
            );
        }
        anthropic_answer("done", &[])
    })))
}

/// The text of the last user message of a request that is not a tool result.
pub fn last_user_text(asked: &Asked) -> String {
    let mut last = String::new();
    for message in asked.body["messages"].as_array().into_iter().flatten() {
        if message["role"] != "user" {
            continue;
        }
        let blocks: Vec<&serde_json::Value> = match &message["content"] {
            serde_json::Value::Array(blocks) => blocks.iter().collect(),
            other => vec![other],
        };
        let text: Vec<&str> = blocks
            .iter()
            .filter_map(|b| b["text"].as_str().or(b.as_str()))
            .filter(|text| !text.starts_with(baaaht_proto::TIME_NOTE))
            .collect();
        if !text.is_empty() {
            last = text.join("\n");
        }
    }
    last
}

/// The Assistant answers by itself: `echo: ` and the last thing the user wrote.
pub fn echo_brain() -> Answer {
    Answer::Respond(Responder(Arc::new(|request| {
        let asked = Asked::of(request);
        anthropic_answer(&format!("echo: {}", last_user_text(&asked)), &[])
    })))
}

/// The Assistant hands a lookup to the Worker in the background and answers at once; the
/// Worker's answer arrives later.
pub fn background_brain() -> Answer {
    Answer::Respond(Responder(Arc::new(|request| {
        let asked = Asked::of(request);
        if asked.offers("delegate") {
            let task = json!({"agent": "worker", "task": "Look up the answer.", "priority": "background"});
            return assistant_delegates(&asked, "", task, "I'll get back to you. ");
        }
        crate::fake_provider::token_stream(Wire::Anthropic, 3, Duration::from_millis(300))
    })))
}

/// The Assistant reads the bundled `summarize` skill before it answers, and quotes its name line.
pub fn skill_brain() -> Answer {
    Answer::Respond(Responder(Arc::new(|request| {
        let asked = Asked::of(request);
        match asked.results.last() {
            None => anthropic_answer("", &[("toolu_skill_1", "read_skill", json!({"skill": "summarize"}))]),
            Some(skill) => {
                let line = skill.lines().find(|line| line.starts_with("name:")).unwrap_or("no name line");
                anthropic_answer(&format!("The skill says {line}"), &[])
            }
        }
    })))
}

/// The Assistant echoes; the Memory agent, at archival, remembers that Alice likes jasmine tea.
pub fn memory_brain() -> Answer {
    Answer::Respond(Responder(Arc::new(|request| {
        let asked = Asked::of(request);
        if asked.offers("memory_write") {
            return match asked.results.len() {
                0 => anthropic_answer(
                    "",
                    &[(
                        "toolu_mem_1",
                        "memory_write",
                        json!({"key": "favourite-tea", "content": "Alice likes jasmine tea.", "tags": ["preferences"]}),
                    )],
                ),
                _ => anthropic_answer("Saved favourite-tea.", &[]),
            };
        }
        anthropic_answer(&format!("echo: {}", last_user_text(&asked)), &[])
    })))
}

/// As [`echo_brain`], each answer taking about a second to stream.
pub fn slow_echo_brain() -> Answer {
    paced_echo_brain(Duration::from_millis(150))
}

/// As [`echo_brain`], each of an answer's half-dozen stream events `interval` apart.
pub fn paced_echo_brain(interval: Duration) -> Answer {
    Answer::Respond(Responder(Arc::new(move |request| {
        let asked = Asked::of(request);
        let Answer::Stream { body, .. } = anthropic_answer(&format!("echo: {}", last_user_text(&asked)), &[]) else {
            unreachable!("anthropic_answer streams")
        };
        let chunks: Vec<String> = body.split_inclusive("\n\n").map(str::to_string).collect();
        Answer::Paced { chunks: Arc::new(chunks), interval }
    })))
}

/// What a person asks to be sent a file, the file, and what goes with it.
pub const ASK_FOR_REPORT: &str = "send me the May report";
pub const REPORT_NAME: &str = "report.csv";
pub const REPORT: &[u8] = b"month,cost\nMay,12\n";
pub const REPORT_MESSAGE: &str = "Here is the **May** report.";
pub const REPORT_SENT: &str = "The report is on its way.";

/// `otherwise` (a responding brain), but asked for the May report ([`ASK_FOR_REPORT`]) the
/// Assistant has the Worker write it and send it with a message (the `message` tool's `files`),
/// then says so ([`REPORT_SENT`]).
pub fn report_sending_brain(otherwise: Answer) -> Answer {
    let Answer::Respond(Responder(otherwise)) = otherwise else {
        panic!("report_sending_brain wraps a responding brain")
    };
    Answer::Respond(Responder(Arc::new(move |request| {
        let asked = Asked::of(request);
        if !last_user_text(&asked).contains("May report") {
            return otherwise(request);
        }
        let done = asked.turn_results.len();
        if asked.offers("delegate") {
            return match done {
                0 => {
                    let task = json!({"agent": "worker", "task": "Write the May report and send it.", "returnDirectly": false});
                    anthropic_answer("", &[("toolu_d0", "delegate", task)])
                }
                _ => anthropic_answer(REPORT_SENT, &[]),
            };
        }
        let path = format!("out/{REPORT_NAME}");
        let steps = [
            ("write_file", json!({"path": path, "content": String::from_utf8_lossy(REPORT)})),
            ("message", json!({"content": REPORT_MESSAGE, "files": [path]})),
        ];
        match steps.get(done) {
            Some((tool, params)) => anthropic_answer("", &[(&format!("toolu_w{done}"), tool, params.clone())]),
            None => anthropic_answer(&asked.turn_results.join("\n"), &[]),
        }
    })))
}

/// An answer with a page whose script tries the site's cookie and API, and a picture.
pub const PAGE_ANSWER: &str = "Here is the page:\n\n```html\n<p id=\"out\">not run</p>\n<script>\n\
    let cookie; try { cookie = document.cookie ? \"readable\" : \"empty\"; } catch (e) { cookie = \"blocked\"; }\n\
    fetch(\"/api/me\").then(() => \"reachable\", () => \"blocked\").then((api) => {\n\
    document.getElementById(\"out\").textContent = `script ran; cookie ${cookie}; api ${api}`;\n});\n</script>\n```\n\n\
    And a picture:\n\n```svg\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"120\" height=\"120\">\
    <circle cx=\"60\" cy=\"60\" r=\"50\" fill=\"#3b6fd8\"/></svg>\n```\n";

/// What the web gateway's tests talk to: asked to "ask the worker", the Assistant delegates to
/// the Worker and passes on its "done"; asked to "draw a page", it
/// answers [`PAGE_ANSWER`]; asked anything else, it echoes it word by word, a word
/// every 150 ms, so a page can be seen writing it as it comes.
pub fn web_brain() -> Answer {
    Answer::Respond(Responder(Arc::new(|request| {
        let asked = Asked::of(request);
        let said = last_user_text(&asked);
        if asked.offers("delegate") && said.contains("ask the worker") {
            return assistant_delegates(
                &asked,
                "",
                json!({"agent": "worker", "task": "Say done.", "returnDirectly": false}),
                "Worker: ",
            );
        }
        if !asked.offers("delegate") {
            return anthropic_answer("done", &[]);
        }
        if said.contains("draw a page") {
            return anthropic_answer(PAGE_ANSWER, &[]);
        }
        let words: String = said.chars().filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '?').collect();
        crate::fake_provider::words_stream(Wire::Anthropic, &format!("echo: {words}"), Duration::from_millis(150))
    })))
}

/// The Assistant delegates to the Worker, whose answer takes a minute to stream.
pub fn slow_worker_brain() -> Answer {
    Answer::Respond(Responder(Arc::new(|request| {
        let asked = Asked::of(request);
        if asked.offers("delegate") {
            return assistant_delegates(
                &asked,
                "",
                json!({"agent": "worker", "task": "Take your time.", "returnDirectly": false}),
                "Worker: ",
            );
        }
        crate::fake_provider::token_stream(Wire::Anthropic, 120, Duration::from_millis(500))
    })))
}

/// A daemon whose models are all `fake` (its `anthropic` provider), the gateway a host child.
pub fn daemon_with(fake: &FakeProvider, mut options: DaemonOptions) -> Result<TestDaemon> {
    let wired = options_for(fake);
    options.env.extend(wired.env);
    options.files.extend(wired.files);
    TestDaemon::start(options)
}

/// A fake provider answering with `brain` and a daemon whose models it is.
pub fn start(
    rt: &tokio::runtime::Runtime,
    brain: Answer,
    options: DaemonOptions,
) -> Result<(FakeProvider, TestDaemon)> {
    let fake = rt.block_on(FakeProvider::start(vec![], Some(brain)))?;
    let daemon = daemon_with(&fake, options)?;
    Ok((fake, daemon))
}

/// What [`daemon_with`] adds: the `anthropic` provider at `fake`, the gateway a host child.
pub fn options_for(fake: &FakeProvider) -> DaemonOptions {
    let providers = format!(
        "providers:\n  anthropic:\n    api_key: ${{TEST_ANTHROPIC_KEY}}\n    api_base: {}\n    default: true\n",
        fake.api_base(Wire::Anthropic)
    );
    DaemonOptions {
        env: vec![
            ("BAAAHT__LLM__GATEWAY".into(), "process".into()),
            ("TEST_ANTHROPIC_KEY".into(), "sk-ant-scenario".into()),
        ],
        files: vec![("config/providers.yaml".into(), providers)],
        ..DaemonOptions::default()
    }
}

pub fn user(id: &str) -> v1::ContextRef {
    v1::ContextRef { r#type: v1::ContextType::User as i32, id: id.into() }
}

pub fn group(id: &str) -> v1::ContextRef {
    v1::ContextRef { r#type: v1::ContextType::Group as i32, id: id.into() }
}

/// What a client saw of one turn.
#[derive(Debug, Default, Clone)]
pub struct Turn {
    pub session: String,
    pub entry: String,
    pub turn: String,
    /// Every text delta, joined.
    pub streamed: String,
    pub events: Vec<v1::OrchestratorEvent>,
    pub reply: Option<v1::ReplyComplete>,
    pub error: Option<String>,
}

/// Sends `message` as a host client and follows the turn until its reply or error.
pub async fn turn(client: &mut Client, message: v1::UserMessage, limit: Duration) -> Result<Turn> {
    let context = message.context.clone();
    let mut events = client
        .sessions
        .subscribe_events(v1::EventSubscription { context, session_id: String::new(), channel: 0, notifies: false })
        .await
        .context("SubscribeEvents")?
        .into_inner();
    let sent = client.sessions.send_user_message(message).await.context("SendUserMessage")?.into_inner();
    let mut seen =
        Turn { session: sent.session_id, entry: sent.entry_id, turn: sent.turn_id.clone(), ..Turn::default() };
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let next = tokio::time::timeout_at(deadline, events.message()).await;
        let Ok(next) = next else { bail!("no reply within {limit:?}; saw {:#?}", seen.events) };
        let Some(event) = next.context("event stream")? else { bail!("the event stream ended") };
        if event.turn_id != sent.turn_id {
            continue;
        }
        use v1::orchestrator_event::Event;
        match &event.event {
            Some(Event::TextDelta(delta)) => seen.streamed.push_str(&delta.text),
            Some(Event::Reply(reply)) => seen.reply = Some(reply.clone()),
            Some(Event::Error(error)) => seen.error = Some(error.message.clone()),
            _ => {}
        }
        seen.events.push(event);
        if seen.reply.is_some() || seen.error.is_some() {
            return Ok(seen);
        }
    }
}

/// [`turn`] as a new host client of `daemon`, within two minutes; a failure panics with the
/// daemon's log.
pub fn turn_on(rt: &tokio::runtime::Runtime, daemon: &TestDaemon, message: v1::UserMessage) -> Turn {
    rt.block_on(async {
        let mut client = host_client(daemon).await.expect("connect");
        turn(&mut client, message, Duration::from_secs(120)).await
    })
    .unwrap_or_else(|error| panic!("{error:#}\n{}", daemon.log_text()))
}

/// A user message from `sender` in `context`.
pub fn message(context: v1::ContextRef, sender: &str, content: &str) -> v1::UserMessage {
    v1::UserMessage {
        context: Some(context),
        sender_id: sender.into(),
        channel: v1::ChannelType::Cli as i32,
        content: content.into(),
        ..v1::UserMessage::default()
    }
}

/// A host client of `daemon`.
pub async fn host_client(daemon: &TestDaemon) -> Result<Client> {
    Ok(client::connect(&daemon.socket(), client::ConnectOptions::default()).await?)
}

/// The data-dir file that links channel identities to users before the daemon starts: each
/// `(identity, user, name)` is the user `user`, named `name`, whose own identity it is.
pub fn linked_identities(links: &[(&str, &str, &str)]) -> (String, String) {
    let mut identities = serde_json::Map::new();
    let mut users = serde_json::Map::new();
    for (identity, user, name) in links {
        identities.insert(identity.to_string(), json!({"user": user, "own": user, "created": "2026-11-23T00:00:00Z"}));
        users.insert(user.to_string(), json!({"name": name, "created": "2026-11-23T00:00:00Z"}));
    }
    let file = json!({"version": 1, "identities": identities, "users": users});
    ("data/state/identities.json".into(), file.to_string())
}

/// A task that runs once, `seconds` from now, as `user`, doing `prompt` (the rest as
/// scheduled tasks default).
pub fn task_once(user: &str, seconds: i64, prompt: &str) -> v1::TaskDefinition {
    let at = jiff::Timestamp::now().checked_add(jiff::SignedDuration::from_secs(seconds)).expect("a time");
    v1::TaskDefinition {
        user_id: user.into(),
        schedule: Some(v1::TaskSchedule { kind: Some(v1::task_schedule::Kind::Once(at.to_string())) }),
        prompt: prompt.into(),
        ..v1::TaskDefinition::default()
    }
}
