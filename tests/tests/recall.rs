//! Memory that recalls (DESIGN.md §10.5) on the real daemon, its containers and the fake
//! provider as the model: 200 facts told across 50 conversations and kept as memories are
//! found again by paraphrased questions through the Assistant's `memory_search` and
//! `session_search`; a context finds only its own; the same fact told three ways is one entry;
//! a `kill -9` while memories are written loses none that was acknowledged.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use baaaht_proto::v1;
use baaaht_tests::fake_provider::{anthropic_answer, Answer, Asked, Responder};
use baaaht_tests::gateway::as_user;
use baaaht_tests::scenario::{self, last_user_text, message, user};
use baaaht_tests::{DaemonOptions, TestDaemon};
use serde_json::json;

const PEOPLE: [&str; 20] = [
    "Ada", "Bram", "Chidi", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ines", "Jonas", "Kofi", "Lena", "Mateo",
    "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tomas",
];

/// What is told of someone, how it is asked for again (other words), and the values told.
const KINDS: [(&str, &str, &str, &[&str]); 10] = [
    (
        "colour",
        "{p}'s favourite colour is {v}.",
        "Which colour does {p} like most?",
        &["teal", "amber", "crimson", "olive", "violet"],
    ),
    (
        "born",
        "{p} was born in {v}.",
        "In which town was {p} born?",
        &["Porto", "Lagos", "Oslo", "Quito", "Hanoi", "Tartu"],
    ),
    (
        "job",
        "{p} works as a {v}.",
        "Where does {p} work these days?",
        &["nurse", "carpenter", "pilot", "baker", "surveyor"],
    ),
    (
        "allergy",
        "{p} is allergic to {v}.",
        "Is {p} allergic to anything?",
        &["peanuts", "pollen", "penicillin", "shellfish"],
    ),
    (
        "car",
        "{p} drives an old {v}.",
        "What car does {p} drive?",
        &["Volvo", "Fiat", "Saab", "Skoda", "Lada", "Citroen"],
    ),
    (
        "instrument",
        "{p} plays the {v} on weekends.",
        "Which instrument does {p} play?",
        &["cello", "banjo", "oboe", "harp"],
    ),
    (
        "dog",
        "{p}'s dog is called {v}.",
        "What is the name of {p}'s dog?",
        &["Biscuit", "Pepper", "Nala", "Rufus", "Mochi"],
    ),
    (
        "study",
        "{p} studied {v} at university.",
        "What did {p} study?",
        &["geology", "law", "botany", "physics", "Latin"],
    ),
    ("fear", "{p} is afraid of {v}.", "What is {p} afraid of?", &["spiders", "heights", "thunder", "clowns"]),
    (
        "wake",
        "{p} usually wakes up at {v}.",
        "When does {p} wake up in the morning?",
        &["5:30", "6:15", "7:00", "8:45"],
    ),
];

/// One fact: its memory key, the sentence told, and the question asked for it.
struct Fact {
    key: String,
    told: String,
    asked: String,
}

/// The 200 facts: every person, every kind.
fn facts() -> Vec<Fact> {
    let mut facts = vec![];
    for (k, (kind, told, asked, values)) in KINDS.iter().enumerate() {
        for (p, person) in PEOPLE.iter().enumerate() {
            let value = values[(p + k) % values.len()];
            facts.push(Fact {
                key: format!("{}-{kind}", person.to_lowercase()),
                told: told.replace("{p}", person).replace("{v}", value),
                asked: asked.replace("{p}", person),
            });
        }
    }
    facts
}

/// Questions asked per quiz turn (two searches each, all in one step of the Assistant).
const PER_QUIZ: usize = 20;

/// Notes what it is told; for `QUIZ n`, asks `memory_search` and `session_search` each
/// question of batch `n` at once and keeps what they answered.
fn recall_brain(questions: Arc<Vec<String>>, answered: Arc<Mutex<Vec<Vec<String>>>>) -> Answer {
    Answer::Respond(Responder(Arc::new(move |request| {
        let asked = Asked::of(request);
        let said = last_user_text(&asked);
        let Some(batch) = said.strip_prefix("QUIZ ").and_then(|n| n.trim().parse::<usize>().ok()) else {
            return anthropic_answer("Noted.", &[]);
        };
        if !asked.turn_results.is_empty() {
            answered.lock().expect("answers").push(asked.turn_results.clone());
            return anthropic_answer("Searched.", &[]);
        }
        let mut calls: Vec<(String, &str, serde_json::Value)> = vec![];
        for (n, question) in questions.iter().enumerate().skip(batch * PER_QUIZ).take(PER_QUIZ) {
            calls.push((format!("toolu_m_{n}"), "memory_search", json!({"query": question, "limit": 5})));
            calls.push((format!("toolu_s_{n}"), "session_search", json!({"query": question, "limit": 5})));
        }
        let calls: Vec<(&str, &str, serde_json::Value)> =
            calls.iter().map(|(id, tool, input)| (id.as_str(), *tool, input.clone())).collect();
        anthropic_answer("", &calls)
    })))
}

#[test]
fn paraphrased_questions_find_the_right_memory_and_message_in_the_top_5_through_the_agents_tools() {
    let facts = facts();
    let questions: Arc<Vec<String>> = Arc::new(facts.iter().map(|fact| fact.asked.clone()).collect());
    let answered: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let rt = baaaht_tests::runtime();
    let brain = recall_brain(questions.clone(), answered.clone());
    let (_provider, daemon) = scenario::start(&rt, brain, DaemonOptions::default()).expect("daemon");
    let alice = user("alice");
    rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await.expect("host");
        // Told across 50 conversations, four facts each, and kept as memories.
        for (n, told) in facts.chunks(4).enumerate() {
            let created = v1::NewSessionRequest { context: Some(alice.clone()), title: format!("Chat {n}") };
            let session = host.sessions.new_session(created).await.expect("session").into_inner().id;
            let text = told.iter().map(|fact| fact.told.as_str()).collect::<Vec<_>>().join(" ");
            let mut said = message(alice.clone(), "alice", &format!("FACTS {text}"));
            said.session_id = session;
            let turn = scenario::turn(&mut host, said, Duration::from_secs(120)).await.expect("turn");
            assert!(turn.reply.is_some(), "no reply: {:?}\n{}", turn.error, daemon.log_text());
        }
        for fact in &facts {
            let write = v1::WriteMemoryRequest {
                context: Some(alice.clone()),
                key: fact.key.clone(),
                content: fact.told.clone(),
                ..Default::default()
            };
            let ack = host.memory.write_memory(write).await.expect("write").into_inner();
            assert_eq!(ack.message, format!("remembered `{}`", fact.key), "each fact is its own entry");
        }
        // Asked again in other words, through the Assistant's tools in its container.
        for batch in 0..facts.len() / PER_QUIZ {
            let said = message(alice.clone(), "alice", &format!("QUIZ {batch}"));
            let turn = scenario::turn(&mut host, said, Duration::from_secs(180)).await.expect("quiz");
            assert!(turn.reply.is_some(), "no reply: {:?}\n{}", turn.error, daemon.log_text());
        }
    });
    let answered = answered.lock().expect("answers").clone();
    assert_eq!(answered.len(), facts.len() / PER_QUIZ, "{}", daemon.log_text());
    let (mut memories_found, mut messages_found, mut missed) = (0, 0, vec![]);
    for (batch, results) in answered.iter().enumerate() {
        assert_eq!(results.len(), 2 * PER_QUIZ, "two searches a question: {results:#?}");
        for (at, fact) in facts.iter().skip(batch * PER_QUIZ).take(PER_QUIZ).enumerate() {
            let (memory, session) = (&results[2 * at], &results[2 * at + 1]);
            let top: Vec<&str> = memory.lines().take(5).collect();
            if top.iter().any(|line| line.starts_with(&format!("- {} ", fact.key))) {
                memories_found += 1;
            } else {
                missed.push(format!("memory_search “{}” → {memory}", fact.asked));
            }
            // Each result cites its conversation and message.
            let top: Vec<&str> = session.lines().take(5).collect();
            assert!(
                top.iter().all(|line| line.starts_with("- conversation s-") && line.contains(", message e-")),
                "{session}"
            );
            if top.iter().any(|line| line.contains(&fact.told)) {
                messages_found += 1;
            } else {
                missed.push(format!("session_search “{}” → {session}", fact.asked));
            }
        }
    }
    println!("memory_search: {memories_found}/200 in the top 5; session_search: {messages_found}/200");
    assert!(memories_found >= 180, "memory_search found {memories_found}/200:\n{}", missed.join("\n"));
    assert!(messages_found >= 180, "session_search found {messages_found}/200:\n{}", missed.join("\n"));
}

#[test]
fn a_context_finds_only_its_own_and_the_same_fact_told_three_ways_is_one_entry() {
    let rt = baaaht_tests::runtime();
    let mut options = DaemonOptions::default();
    options.files.push(scenario::linked_identities(&[("slack:T1:UALICE", "alice", "Alice")]));
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), options).expect("daemon");
    let (alice, bob) = (user("alice"), user("bob"));
    rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await.expect("host");
        for (context, sender, text) in [
            (&alice, "alice", "The spare key is under the blue flowerpot."),
            (&bob, "bob", "My locker code is zanzibar."),
        ] {
            let turn = scenario::turn(&mut host, message(context.clone(), sender, text), Duration::from_secs(120))
                .await
                .expect("turn");
            assert!(turn.reply.is_some(), "{:?}", turn.error);
        }
        let search = |context: &v1::ContextRef, query: &str| v1::SessionQuery {
            context: Some(context.clone()),
            query: query.into(),
            ..Default::default()
        };
        let hits =
            host.sessions.search_sessions(search(&alice, "flowerpot key")).await.expect("search").into_inner().hits;
        assert_eq!(hits.len(), 2, "her words and the echo: {hits:#?}");
        assert!(hits.iter().all(|hit| hit.content.contains("flowerpot")), "{hits:#?}");
        let none = host.sessions.search_sessions(search(&alice, "zanzibar locker")).await.expect("search").into_inner();
        assert!(none.hits.is_empty(), "bob's words are not alice's to find: {none:#?}");

        // Through a gateway, alice may search her own context, not bob's.
        let registered = {
            let request = v1::AddGatewayRequest {
                kind: "slack".into(),
                name: "recall".into(),
                team: "T1".into(),
                mode: "external".into(),
                ..Default::default()
            };
            baaaht_tests::gateway::add_gateway(&mut host, request).await
        };
        let mut gateway = baaaht_tests::gateway::connect(&registered).await;
        let own = v1::SessionQuery { query: "flowerpot zanzibar".into(), ..Default::default() };
        let found = gateway.sessions.search_sessions(as_user("slack:T1:UALICE", None, own)).await.expect("own");
        let found = found.into_inner().hits;
        assert!(!found.is_empty() && found.iter().all(|hit| hit.content.contains("flowerpot")), "{found:#?}");
        let refused = gateway
            .sessions
            .search_sessions(as_user("slack:T1:UALICE", None, search(&bob, "zanzibar")))
            .await
            .expect_err("not hers");
        assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");

        // A group's conversations are its members' to search, and no longer one's who left.
        let family =
            v1::CreateGroupRequest { id: "family".into(), name: "Family".into(), members: vec!["alice".into()] };
        host.admin.create_group(family).await.expect("a group");
        let group = scenario::group("family");
        let said = message(group.clone(), "alice", "Grandma's birthday party is at the lakehouse.");
        let turn = scenario::turn(&mut host, said, Duration::from_secs(120)).await.expect("turn");
        assert!(turn.reply.is_some(), "{:?}", turn.error);
        let found = gateway
            .sessions
            .search_sessions(as_user("slack:T1:UALICE", None, search(&group, "lakehouse")))
            .await
            .expect("a member searches her group");
        assert_eq!(found.into_inner().hits.len(), 2, "her words and the echo");
        let left = v1::GroupMemberRequest { group: "family".into(), member: "alice".into() };
        host.admin.remove_group_member(left).await.expect("alice leaves");
        let refused = gateway
            .sessions
            .search_sessions(as_user("slack:T1:UALICE", None, search(&group, "lakehouse")))
            .await
            .expect_err("she left");
        assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
        let own = v1::SessionQuery { query: "lakehouse".into(), ..Default::default() };
        let own = gateway.sessions.search_sessions(as_user("slack:T1:UALICE", None, own)).await.expect("her own");
        assert!(own.into_inner().hits.is_empty(), "the group's words are not in her own context");

        // The same fact told three ways: one entry, three sources.
        for (key, said, message_id) in [
            ("coffee", "Alice takes her coffee black.", "e-1"),
            ("coffee-order", "alice takes coffee black", "e-2"),
            ("drinks", "Alice's coffee: she takes it black!", "e-3"),
        ] {
            let write = v1::WriteMemoryRequest {
                context: Some(alice.clone()),
                key: key.into(),
                content: said.into(),
                message_id: message_id.into(),
                ..Default::default()
            };
            host.memory.write_memory(write).await.expect("write");
        }
        let listed = v1::MemoryQuery { context: Some(alice.clone()), limit: 50, ..Default::default() };
        let entries = host.memory.search_memory(listed).await.expect("list").into_inner().entries;
        assert_eq!(entries.len(), 1, "{entries:#?}");
        assert_eq!((entries[0].key.as_str(), entries[0].sources.len()), ("coffee", 3), "{entries:#?}");
    });
    let shown = daemon.cli(&["memory", "show", "coffee", "--user", "alice"]);
    assert!(shown.contains("told 3 times"), "{shown}");
    let found = daemon.cli(&["sessions", "search", "flowerpot", "--user", "alice"]);
    assert!(found.contains("The spare key is under the blue flowerpot."), "{found}");
    let found = daemon.cli(&["memory", "search", "\"coffee black\"", "--user", "alice"]);
    assert!(found.starts_with("coffee ("), "{found}");

    // A container's token searches its own context only: naming another is refused, and its
    // own holds nothing of alice's or bob's.
    let agent = daemon.lingering_agent("memory", None, &[]).expect("a memory agent");
    rt.block_on(async {
        let mut client = baaaht_proto::client::connect(&agent.socket, agent.options()).await.expect("connect");
        let bobs = v1::SessionQuery { context: Some(bob.clone()), query: "zanzibar".into(), ..Default::default() };
        let refused = client.sessions.search_sessions(bobs).await.expect_err("not its context");
        assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
        let own = v1::SessionQuery { query: "zanzibar flowerpot".into(), ..Default::default() };
        let hits = client.sessions.search_sessions(own).await.expect("its own").into_inner().hits;
        assert!(hits.is_empty(), "{hits:#?}");
        let theirs = v1::MemoryQuery { context: Some(alice.clone()), query: "coffee".into(), ..Default::default() };
        let refused = client.memory.search_memory(theirs).await.expect_err("not its context");
        assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    });
}

#[test]
fn a_kill_9_while_memories_are_written_loses_none_that_was_acknowledged() {
    let rt = baaaht_tests::runtime();
    let (provider, mut daemon) =
        scenario::start(&rt, scenario::echo_brain(), DaemonOptions::default()).expect("daemon");
    let acknowledged: Arc<Mutex<Vec<usize>>> = Arc::default();
    let writing = {
        let (socket, acknowledged) = (daemon.socket(), acknowledged.clone());
        std::thread::spawn(move || {
            let rt = baaaht_tests::runtime();
            rt.block_on(async {
                let options = baaaht_proto::client::ConnectOptions::default();
                let Ok(mut host) = baaaht_proto::client::connect(&socket, options).await else { return };
                for n in 0.. {
                    let write = v1::WriteMemoryRequest {
                        context: Some(user("alice")),
                        key: format!("note-{n}"),
                        content: format!("Note number {n} mentions the word marker{n}."),
                        ..Default::default()
                    };
                    if host.memory.write_memory(write).await.is_err() {
                        return;
                    }
                    acknowledged.lock().expect("acks").push(n);
                }
            });
        })
    };
    let started = std::time::Instant::now();
    while acknowledged.lock().expect("acks").len() < 150 {
        assert!(started.elapsed() < Duration::from_secs(120), "150 memories were not acknowledged within 2 minutes");
        // Polling the writer's count with a deadline: it runs on its own thread.
        std::thread::sleep(Duration::from_millis(10));
    }
    daemon.signal("KILL").expect("kill -9");
    daemon.wait_exit(Duration::from_secs(10)).expect("dies");
    writing.join().expect("writer");
    let acknowledged = acknowledged.lock().expect("acks").clone();
    let restarted = TestDaemon::start(DaemonOptions {
        data_dir: Some(daemon.data_dir.clone()),
        ..scenario::options_for(&provider)
    })
    .expect("restarts");
    rt.block_on(async {
        let mut host = scenario::host_client(&restarted).await.expect("host");
        for n in acknowledged {
            let query = v1::MemoryQuery {
                context: Some(user("alice")),
                query: format!("marker{n}"),
                limit: 3,
                ..Default::default()
            };
            let found = host.memory.search_memory(query).await.expect("search").into_inner().entries;
            assert_eq!(
                found.first().map(|entry| entry.key.as_str()),
                Some(format!("note-{n}").as_str()),
                "acknowledged note {n} is found\n{}",
                restarted.log_text()
            );
        }
    });
}
