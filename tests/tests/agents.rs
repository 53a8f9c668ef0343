//! Agents end to end on the real binaries, a real engine and the fake provider as the model:
//! a user's message reaches the session's Assistant, which delegates to the Coder, whose tool
//! calls run in the session's tool container; the reply streams to the client and the session
//! log records the turn as a tree.

use std::time::Duration;

use baaaht_proto::v1;
use baaaht_tests::fake_provider::FakeProvider;
use baaaht_tests::scenario::{self, coder_brain, message, user, HELLO};
use baaaht_tests::DaemonOptions;

#[test]
fn the_assistant_delegates_to_the_coder_and_the_reply_streams_back() {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeProvider::start(vec![], Some(coder_brain()))).expect("fake provider");
    let daemon = scenario::daemon_with(&fake, DaemonOptions::default()).expect("daemon starts");
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await.expect("connect");
        let turn = scenario::turn(
            &mut client,
            message(user("alice"), "alice", "Write hello.sh and run it, please."),
            Duration::from_secs(120),
        )
        .await
        .unwrap_or_else(|error| panic!("{error:#}\n{}", daemon.log_text()));
        let reply = turn.reply.clone().unwrap_or_else(|| panic!("no reply: {:?}\n{}", turn.error, daemon.log_text()));
        assert!(reply.content.contains(HELLO), "{reply:?}");
        assert!(turn.streamed.contains("I'll ask the coder.") && turn.streamed.contains(HELLO), "{}", turn.streamed);

        use v1::orchestrator_event::Event;
        let delegations: Vec<&v1::DelegationProgress> = turn
            .events
            .iter()
            .filter_map(|e| match &e.event {
                Some(Event::Delegation(d)) => Some(d),
                _ => None,
            })
            .collect();
        assert_eq!(delegations.iter().map(|d| d.state.as_str()).collect::<Vec<_>>(), ["started", "finished"]);
        assert!(delegations.iter().all(|d| d.agent == v1::AgentRole::Coder as i32));
        let tools: Vec<&str> = turn
            .events
            .iter()
            .filter_map(|e| match &e.event {
                Some(Event::Tool(t)) => Some(t.tool.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(tools, ["write_file", "exec"]);
        let correlations: std::collections::BTreeSet<&str> =
            turn.events.iter().map(|e| e.correlation_id.as_str()).collect();
        assert_eq!(correlations.len(), 1, "one correlation id for the whole turn: {correlations:?}");

        // The session log: user message → delegate → reply, one branch.
        let transcript = client
            .read_session(v1::ReadSessionRequest {
                session_id: turn.session.clone(),
                leaf_entry_id: reply.entry_id.clone(),
            })
            .await
            .expect("ReadSession")
            .into_inner();
        assert!(transcript.problems.is_empty(), "{:?}", transcript.problems);
        let kinds: Vec<String> = transcript
            .entries
            .iter()
            .map(|entry| match &entry.entry {
                Some(v1::session_entry::Entry::Message(m)) => format!("message:{}", m.role),
                Some(v1::session_entry::Entry::Delegate(d)) => {
                    assert!(d.result.contains(HELLO), "{d:?}");
                    "delegate".into()
                }
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(kinds, ["message:user", "delegate", "message:assistant"]);
        let mut parent = turn.session.clone();
        for entry in &transcript.entries {
            assert_eq!(entry.parent, parent, "each entry hangs under the one before");
            parent = entry.id.clone();
        }
        let header = transcript.header.expect("header");
        assert_eq!((header.user_id.as_str(), header.status.as_str()), ("alice", "active"));
    });
    let script = daemon.data_dir.join("sessions").join(session_of(&daemon)).join("data/hello.sh");
    assert_eq!(
        std::fs::read_to_string(&script).expect("the coder's file is in the session's data folder"),
        format!("echo {HELLO}\n")
    );
}

fn session_of(daemon: &baaaht_tests::TestDaemon) -> String {
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(daemon.data_dir.join("data/state/sessions.json")).expect("session index"),
    )
    .expect("JSON");
    index["sessions"][0]["id"].as_str().expect("a session").to_string()
}
