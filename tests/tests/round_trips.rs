//! A turn's round trips to the model, end to end on the real binaries and a real engine with
//! the fake provider: a delegation whose answer returns directly saves the Assistant's second
//! request and streams from the agent that writes it; two delegations of one step run at once,
//! each in its own container.

use std::io::Read as _;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use baaaht_proto::v1;
use baaaht_tests::fake_provider::{anthropic_answer, words_stream, Answer, Asked, Responder, Wire};
use baaaht_tests::scenario::{self, message, user, HELLO};
use baaaht_tests::DaemonOptions;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);

/// The kinds of a session's entries, in order.
async fn kinds(client: &mut baaaht_proto::client::Client, session: &str, leaf: &str) -> Vec<String> {
    let request = v1::ReadSessionRequest { session_id: session.into(), leaf_entry_id: leaf.into() };
    let read = client.sessions.read_session(request).await.expect("ReadSession").into_inner();
    assert!(read.problems.is_empty(), "{:?}", read.problems);
    read.entries
        .iter()
        .map(|entry| match &entry.entry {
            Some(v1::session_entry::Entry::Message(m)) => format!("message:{}", m.role),
            Some(v1::session_entry::Entry::Delegate(d)) => {
                format!("delegate:{}", baaaht_proto::role_name(d.agent).unwrap_or("?"))
            }
            other => format!("{other:?}"),
        })
        .collect()
}

/// A one-tool turn: the Assistant delegates to the Coder (`returnDirectly` unset — the Coder's
/// default, its answer is the reply — unless the person asks for the Assistant's own words),
/// the Coder runs one command and says what it printed.
fn one_tool_brain() -> Answer {
    Answer::Respond(Responder(Arc::new(|request| {
        let asked = Asked::of(request);
        if asked.offers("delegate") {
            return match asked.turn_results.last() {
                None => {
                    let mut task = json!({"agent": "coder", "task": "Print a greeting."});
                    if scenario::last_user_text(&asked).contains("in your words") {
                        task["returnDirectly"] = json!(false);
                    }
                    anthropic_answer("I'll ask the coder. ", &[("toolu_d1", "delegate", task)])
                }
                Some(result) => anthropic_answer(&format!("Done. The coder says: {result}"), &[]),
            };
        }
        match asked.turn_results.last() {
            None => anthropic_answer("", &[("toolu_exec_1", "exec", json!({"command": format!("echo {HELLO}")}))]),
            Some(printed) => {
                let line = printed.lines().find(|line| line.contains(HELLO)).unwrap_or("nothing");
                anthropic_answer(&format!("It printed: {line}"), &[])
            }
        }
    })))
}

#[test]
fn a_returned_directly_answer_saves_the_assistants_second_request_and_reads_as_one_rewritten() {
    let rt = baaaht_tests::runtime();
    let (fake, daemon) = scenario::start(&rt, one_tool_brain(), DaemonOptions::default()).expect("daemon");
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let mut seen = vec![];
        for (who, said) in [("alice", "Greet me."), ("bob", "Greet me, in your words.")] {
            let before = fake.requests().len();
            let turn = scenario::turn(&mut client, message(user(who), who, said), WAIT)
                .await
                .unwrap_or_else(|error| panic!("{error:#}\n{}", daemon.log_text()));
            let asked = fake.requests().len() - before;
            let reply =
                turn.reply.clone().unwrap_or_else(|| panic!("no reply: {:?}\n{}", turn.error, daemon.log_text()));
            let kinds = kinds(&mut client, &turn.session, &reply.entry_id).await;
            seen.push((asked, reply.content.clone(), turn.streamed.clone(), kinds));
        }
        let (direct, rewritten) = (&seen[0], &seen[1]);
        // The Assistant (delegates), the Coder (exec), the Coder (answers) — and only without
        // it, the Assistant again.
        assert_eq!((direct.0, rewritten.0), (3, 4), "requests per turn: {seen:#?}");
        assert_eq!(direct.1, format!("I'll ask the coder. \n\nIt printed: {HELLO}"), "{seen:#?}");
        assert_eq!(rewritten.1, format!("I'll ask the coder. \n\nDone. The coder says: It printed: {HELLO}"));
        // The Coder's words reached the client as it wrote them; the same session log either way.
        assert!(direct.2.contains("I'll ask the coder.") && direct.2.contains(HELLO), "{}", direct.2);
        assert_eq!(direct.3, ["message:user", "delegate:coder", "message:assistant"]);
        assert_eq!(direct.3, rewritten.3);
    });
}

/// The Assistant hands the question to the Worker (its answer returns directly by default);
/// the Worker writes its answer a word every 400 ms.
fn slow_writer_brain() -> Answer {
    Answer::Respond(Responder(Arc::new(|request| {
        let asked = Asked::of(request);
        if asked.offers("delegate") {
            return anthropic_answer("", &[("toolu_d1", "delegate", json!({"agent": "worker", "task": "Answer it."}))]);
        }
        words_stream(
            Wire::Anthropic,
            "The answer is forty two, written slowly word by word.",
            Duration::from_millis(400),
        )
    })))
}

#[test]
fn the_first_words_of_a_returned_answer_reach_the_cli_while_the_worker_still_writes() {
    let rt = baaaht_tests::runtime();
    let (fake, daemon) = scenario::start(&rt, slow_writer_brain(), DaemonOptions::default()).expect("daemon");
    let mut chat = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(["chat", "--user", "alice", "What is the answer?"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("baaaht chat");
    let mut stdout = chat.stdout.take().expect("stdout");
    let mut shown = Vec::new();
    let mut byte = [0u8; 1];
    // Read what the person sees until the Worker's first word is on the screen.
    while !String::from_utf8_lossy(&shown).contains("The answer") {
        match stdout.read(&mut byte) {
            Ok(1) => shown.push(byte[0]),
            _ => panic!("the chat ended before the answer: {}\n{}", String::from_utf8_lossy(&shown), daemon.log_text()),
        }
    }
    // At that moment the Worker's answer is still being written: of the two answers asked (the
    // Assistant's delegation, the Worker's words) only the first has ended.
    assert_eq!((fake.requests().len(), fake.completed()), (2, 1), "{}", String::from_utf8_lossy(&shown));
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("the rest");
    assert!(chat.wait().expect("exit").success());
    let whole = String::from_utf8_lossy(&shown).into_owned() + rest.as_str();
    assert!(whole.contains("The answer is forty two, written slowly word by word."), "{whole}");
    assert_eq!(fake.requests().len(), 2, "no second request of the Assistant");
}

/// Worker requests in flight: each waits (up to a minute) until two are, then says whether it
/// had company.
#[derive(Default)]
struct Meeting {
    arrived: Mutex<usize>,
    met: Condvar,
}

fn parallel_brain(meeting: Arc<Meeting>) -> Answer {
    Answer::Respond(Responder(Arc::new(move |request| {
        let asked = Asked::of(request);
        if asked.offers("delegate") {
            return match asked.turn_results.len() {
                0 => anthropic_answer(
                    "",
                    &[
                        ("toolu_d1", "delegate", json!({"agent": "worker", "task": "Check the oven."})),
                        ("toolu_d2", "delegate", json!({"agent": "worker", "task": "Check the fridge."})),
                    ],
                ),
                _ => anthropic_answer(&format!("Both: {}", asked.turn_results.join(" / ")), &[]),
            };
        }
        let together = tokio::task::block_in_place(|| {
            let mut arrived = meeting.arrived.lock().expect("count");
            *arrived += 1;
            meeting.met.notify_all();
            let (arrived, _) =
                meeting.met.wait_timeout_while(arrived, Duration::from_secs(60), |arrived| *arrived < 2).expect("wait");
            *arrived >= 2
        });
        anthropic_answer(if together { "checked while the other one worked" } else { "checked alone" }, &[])
    })))
}

#[test]
fn two_delegations_of_one_step_run_at_once_each_in_its_own_container() {
    let rt = baaaht_tests::runtime();
    let meeting = Arc::new(Meeting::default());
    let (_fake, daemon) = scenario::start(&rt, parallel_brain(meeting), DaemonOptions::default()).expect("daemon");
    let turn = scenario::turn_on(&rt, &daemon, message(user("alice"), "alice", "Check the kitchen."));
    let reply = turn.reply.clone().unwrap_or_else(|| panic!("no reply: {:?}\n{}", turn.error, daemon.log_text()));
    // Both asked the model at once: neither answered alone. Two answers beside each other are
    // brought together by the Assistant (none returns directly).
    assert_eq!(
        reply.content,
        "Both: checked while the other one worked / checked while the other one worked",
        "{}",
        daemon.log_text()
    );
    // Neither Worker spoke to the person: only the Assistant's words were streamed.
    assert_eq!(turn.streamed, reply.content);
    // Both Workers' containers wait, kept warm, for the session's next task.
    let session = format!("label=baaaht.session={}", turn.session);
    let workers = baaaht_tests::docker(&["ps", "--filter", &session, "--filter", "label=baaaht.role=worker", "-q"])
        .expect("docker ps");
    assert_eq!(workers.lines().count(), 2, "each in its own container: {workers}");
}

#[test]
fn input_read_from_the_providers_cache_is_counted_and_priced_at_the_cached_rate() {
    let rt = baaaht_tests::runtime();
    // The model (Claude Sonnet 4: $3 a million input, $0.30 cached, $15 output) read 9,000 of
    // the prompt's 10,000 tokens from its cache.
    let Answer::Stream { body, .. } = anthropic_answer("Cached.", &[]) else { unreachable!("a stream") };
    let body = body
        .replace(
            r#""usage":{"input_tokens":20,"output_tokens":1}"#,
            r#""usage":{"cache_read_input_tokens":9000,"input_tokens":1000,"output_tokens":1}"#,
        )
        .replace(r#""usage":{"output_tokens":10}"#, r#""usage":{"output_tokens":100}"#);
    assert!(body.contains("9000") && body.contains(r#""output_tokens":100"#), "{body}");
    let (_fake, daemon) =
        scenario::start(&rt, Answer::Stream { body, cut: false }, DaemonOptions::default()).expect("daemon");
    let turn = scenario::turn_on(&rt, &daemon, message(user("alice"), "alice", "Hello"));
    assert_eq!(turn.reply.map(|reply| reply.content).as_deref(), Some("Cached."), "{}", daemon.log_text());
    rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await.expect("host");
        let report = host
            .admin
            .get_usage(v1::UsageRequest { context: Some(user("alice")) })
            .await
            .expect("GetUsage")
            .into_inner();
        let today = report.today.expect("today");
        // 1,000 × $3 + 9,000 × $0.30 + 100 × $15, a million each: $0.0072 (not $0.0315).
        assert_eq!(today.tokens, 10_100, "{today:?}");
        assert!((today.cost_usd - 0.0072).abs() < 1e-9, "{today:?}");
    });
    let usage = daemon.cli(&["usage", "--user", "alice"]);
    assert!(usage.contains("10100") || usage.contains("10,100"), "{usage}");
}
