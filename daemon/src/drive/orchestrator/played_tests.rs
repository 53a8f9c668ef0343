//! The orchestrator over the fake engine (`container/fake.rs`): a user's message becomes a
//! turn of its session's Assistant, whose answer is recorded and told to the context's
//! channels; a delegation made during it runs in a Worker of the same session and is recorded
//! beside it. The test plays the agents (and the tool runners, which connect and wait): no
//! Docker, no model.

use super::*;
use crate::sandbox::container::fake::FakeRuntime;
use crate::sandbox::container::ContainerSpec;
use crate::work::agents::{Turn, TurnOutcome};
use crate::work::peers::{Down, Up};

/// A daemon's subsystems on a temporary data dir, its containers played.
pub(crate) struct House {
    pub(crate) orchestrator: Arc<Orchestrator>,
    pub(crate) daemon: crate::Daemon,
    _temp: tempfile::TempDir,
}

/// Must be called inside the tokio runtime.
pub(crate) fn house() -> House {
    let temp = tempfile::tempdir().expect("tempdir");
    let data_dir = crate::base::datadir::DataDir::new(temp.path().join("d"));
    let paths = crate::base::config::ConfigPaths {
        config_file: None,
        config_dir: data_dir.config_dir(),
        data_dir: data_dir.root().to_path_buf(),
    };
    let env = [("BAAAHT__METRICS__ENABLED".to_string(), "false".to_string())];
    let loaded = crate::base::config::load(&paths, env).expect("the default configuration");
    let bound = crate::server::bind::bind(&data_dir, &loaded).expect("bound");
    let daemon = crate::Daemon::new(loaded, data_dir, bound).expect("the daemon's parts");
    let orchestrator = daemon.shared().orchestrator.clone();
    let (fake, mut starts) = FakeRuntime::new();
    orchestrator.containers.use_engine(fake.engine());
    let playing = orchestrator.clone();
    tokio::spawn(async move {
        while let Some(spec) = starts.recv().await {
            play(&playing, &spec);
        }
    });
    House { orchestrator, daemon, _temp: temp }
}

fn identity_of(spec: &ContainerSpec) -> ContainerIdentity {
    ContainerIdentity {
        name: spec.name.clone(),
        role: Role::named(&spec.labels.role).expect("a role"),
        session_id: spec.labels.session_id.clone(),
        context: Context::named(&spec.labels.context).expect("a context"),
    }
}

/// What a started container does: a tool runner connects and waits; an agent connects and
/// answers each turn. The Assistant delegates what it is asked to with `delegate: …`; the
/// Heartbeat agent tells what its prompt gives after `tell: `, else nothing.
fn play(orchestrator: &Arc<Orchestrator>, spec: &ContainerSpec) {
    let identity = identity_of(spec);
    if identity.role == Role::Tool {
        let mut calls = orchestrator.tools.attach(&identity, tokio_stream::pending());
        tokio::spawn(async move { while calls.recv().await.is_some() {} });
        return;
    }
    let (ups, reports) = tokio::sync::mpsc::unbounded_channel();
    let mut turns =
        orchestrator.agents.attach(&identity, tokio_stream::wrappers::UnboundedReceiverStream::new(reports));
    let orchestrator = orchestrator.clone();
    tokio::spawn(async move {
        while let Some(down) = turns.recv().await {
            let Down::Work(turn) = down else { continue };
            let content = answer(&orchestrator, &identity, &turn).await;
            let outcome = TurnOutcome { content, steps: 1, ..TurnOutcome::default() };
            if ups.send(Ok(Up::Answer { id: turn.turn_id.clone(), answer: outcome })).is_err() {
                return;
            }
        }
    });
}

async fn answer(orchestrator: &Arc<Orchestrator>, identity: &ContainerIdentity, turn: &Turn) -> String {
    let text = match turn.messages.last().and_then(|message| message.content.first()) {
        Some(baaaht_llm::model::Block::Text(text)) => text.clone(),
        _ => String::new(),
    };
    match (identity.role, text.strip_prefix("delegate: ")) {
        (Role::Assistant, Some(task)) => {
            let asked = Delegation { agent: Some(Role::Worker), task: task.to_string(), ..Delegation::default() };
            match delegate(orchestrator, identity, asked).await {
                Ok(done) => format!("the worker said: {}", done.result),
                Err(error) => format!("the delegation failed: {error}"),
            }
        }
        (Role::Assistant, None) if text.contains("(say nothing)") => String::new(),
        (Role::Assistant, None) => format!("echo: {text}"),
        // A heartbeat whose prompt says `tell: NEWS` finds NEWS; any other finds nothing.
        (Role::Heartbeat, _) => match text.split_once("tell: ") {
            Some((_, news)) => news.split("\n\n").next().unwrap_or_default().to_string(),
            None => crate::drive::scheduler::execute::NOTHING.to_string(),
        },
        (role, _) => format!("the {role} did it: {text}"),
    }
}

fn incoming(content: &str) -> Incoming {
    Incoming {
        context: Context::user("alice"),
        session: None,
        sender: "alice".into(),
        channel: Some("tui".into()),
        content: content.into(),
        parent: None,
        attachments: vec![],
        spoken: false,
    }
}

/// The events of `context` until the turn's reply or error.
async fn until_the_answer(events: &mut tokio::sync::broadcast::Receiver<(Context, Event)>) -> Vec<Kind> {
    let mut seen = vec![];
    loop {
        let received = tokio::time::timeout(Duration::from_secs(20), events.recv()).await;
        let (_, event) = received.expect("an answer within 20 s").expect("the bus");
        let done = matches!(event.kind, Kind::Reply { .. } | Kind::TurnError { .. });
        seen.push(event.kind);
        if done {
            return seen;
        }
    }
}

fn entries(orchestrator: &Orchestrator, session: &str) -> Vec<Entry> {
    orchestrator.sessions.read(session).expect("the session's log").entries
}

#[tokio::test]
async fn a_message_is_answered_by_its_sessions_assistant_recorded_and_told() {
    let house = house();
    let orchestrator = house.orchestrator.clone();
    let mut events = orchestrator.events.subscribe();
    let accepted = accept_user_message(&orchestrator, incoming("hello")).expect("accepted");
    let seen = until_the_answer(&mut events).await;
    assert!(matches!(&seen[0], Kind::UserMessage { content, .. } if content == "hello"), "{seen:?}");
    let Some(Kind::Reply { content, entry_id }) = seen.last() else { panic!("a reply: {seen:?}") };
    assert_eq!(content, "echo: hello");
    let recorded = entries(&orchestrator, &accepted.session);
    assert!(
        recorded.iter().any(|entry| entry.id() == entry_id
            && matches!(entry, Entry::Message { message, .. } if message.role == "assistant")),
        "the reply is in the session's log: {recorded:?}"
    );
    // The next message of the context goes to the same session, and its Assistant.
    let again = accept_user_message(&orchestrator, incoming("and again")).expect("accepted");
    assert_eq!(again.session, accepted.session);
    let seen = until_the_answer(&mut events).await;
    assert!(matches!(seen.last(), Some(Kind::Reply { content, .. }) if content == "echo: and again"), "{seen:?}");
}

#[tokio::test]
async fn a_delegation_runs_in_a_worker_of_the_session_and_is_recorded_beside_the_reply() {
    let house = house();
    let orchestrator = house.orchestrator.clone();
    let mut events = orchestrator.events.subscribe();
    let accepted = accept_user_message(&orchestrator, incoming("delegate: count the apples")).expect("accepted");
    let seen = until_the_answer(&mut events).await;
    let delegations: Vec<&str> = seen
        .iter()
        .filter_map(|kind| match kind {
            Kind::Delegation { agent: Role::Worker, state, .. } => Some(state.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(delegations, ["started", "finished"], "{seen:?}");
    assert!(
        matches!(seen.last(), Some(Kind::Reply { content, .. })
            if content == "the worker said: the worker did it: Task: count the apples"),
        "{seen:?}"
    );
    let recorded = entries(&orchestrator, &accepted.session);
    assert!(
        recorded.iter().any(|entry| matches!(entry, Entry::Delegate { agent, task, is_error: false, .. }
            if agent == "worker" && task == "count the apples")),
        "the delegation is in the session's log: {recorded:?}"
    );
}
