//! The fake daemon's own check, before any channel runs against it: the kit's turn, as every
//! chat gateway runs it, over a surface that records what it was given. A message is answered
//! as its words come, an approval waits for its answer, and the answer is passed on as the
//! person who gave it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baaaht_gateway_compliance::{FakeDaemon, Step};
use baaaht_gateway_kit::daemon::{File, Person, Place};
use baaaht_gateway_kit::turn::{self, Surface, Trouble, Writing};
use baaaht_proto::v1;

/// What the surface was given.
#[derive(Default)]
struct Shown {
    live: Vec<String>,
    whole: Option<String>,
    approvals: Vec<v1::ApprovalRequest>,
}

#[derive(Default, Clone)]
struct Recording(Arc<Mutex<Shown>>, Arc<tokio::sync::Notify>);

impl Recording {
    fn shown<T>(&self, read: impl FnOnce(&Shown) -> T) -> T {
        read(&self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Surface for Recording {
    type Answer = ();

    fn update_every(&self) -> Duration {
        Duration::ZERO
    }

    async fn open(&self) -> Result<(), String> {
        Ok(())
    }

    async fn show(&self, _: &mut (), writing: &Writing) -> Result<bool, String> {
        let live = turn::live(writing, 4000);
        let mut shown = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if shown.live.last() != Some(&live) {
            shown.live.push(live);
        }
        Ok(true)
    }

    async fn close(&self, _: (), writing: &Writing, trouble: Option<Trouble>) -> Result<(), String> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).whole = Some(turn::whole(&writing.text, trouble));
        Ok(())
    }

    async fn message(&self, _: &str, _: Vec<File>) -> Result<(), String> {
        Ok(())
    }

    async fn approval(&self, event: &v1::orchestrator_event::Event) {
        if let v1::orchestrator_event::Event::Approval(request) = event {
            self.0.lock().unwrap_or_else(PoisonError::into_inner).approvals.push(request.clone());
            self.1.notify_one();
        }
    }
}

#[tokio::test]
async fn the_kits_turn_shows_the_answer_and_passes_an_approvals_answer_on_as_its_person() {
    use v1::orchestrator_event::Event;
    let daemon = FakeDaemon::start(HashMap::new()).await.expect("the fake daemon starts");
    let request = v1::ApprovalRequest {
        id: "a-1".into(),
        agent: v1::AgentRole::Coder as i32,
        host: "pypi.org".into(),
        port: 443,
        expires_in_seconds: 120,
        ..Default::default()
    };
    let asked = request.clone();
    daemon.answer_with(move |message| {
        let settled = v1::ApprovalSettled { id: "a-1".into(), decision: "session".into(), by: "Alice".into() };
        Ok(vec![
            Step::Say(Event::Approval(asked.clone())),
            Step::AwaitAnswer("a-1".into()),
            Step::Say(Event::ApprovalSettled(settled)),
            Step::Say(Event::TextDelta(v1::TextDelta { index: 0, text: "Fetched ".into() })),
            Step::Say(Event::Reply(v1::ReplyComplete {
                entry_id: "e-2".into(),
                content: format!("Fetched {}", message.content),
            })),
        ])
    });
    let token = daemon.folder().join("token");
    std::fs::write(&token, "any").expect("a token file");
    let client = baaaht_proto::client::connect_gateway(&daemon.socket(), Some(&token)).await.expect("connect");
    let (follower, _deliveries) =
        baaaht_gateway_kit::follow::Follower::open(client.clone(), v1::ChannelType::Telegram, None).expect("follower");
    let person = Person { identity: "telegram:7:42".into(), name: Some("Alice".into()) };
    let message = turn::Message {
        chat: "42".into(),
        person: person.clone(),
        place: Place::Own,
        text: "requests".into(),
        files: vec![],
        channel: v1::ChannelType::Telegram,
        session_id: String::new(),
    };
    let surface = Recording::default();
    let running = {
        let (client, follower, surface) = (client.clone(), follower.clone(), surface.clone());
        tokio::spawn(async move { turn::run(&client, &follower, message, &surface).await })
    };
    // The person answers the request the surface showed, as a button or a word would.
    let shown = tokio::time::timeout(Duration::from_secs(10), surface.1.notified()).await;
    assert!(shown.is_ok(), "the approval request was never shown");
    assert_eq!(surface.shown(|shown| shown.approvals.clone()), [request]);
    let answer = v1::ApprovalAnswer { id: "a-1".into(), decision: "session".into() };
    client.clone().sessions.answer_approval(person.request(answer)).await.expect("answered");
    tokio::time::timeout(Duration::from_secs(10), running).await.expect("the turn ends").expect("joined").expect("ran");

    assert_eq!(surface.shown(|shown| shown.whole.clone()).as_deref(), Some("Fetched requests"));
    assert!(
        surface.shown(|shown| shown.live.iter().any(|live| live.starts_with("Fetched"))),
        "the words showed as they came"
    );
    let sent = daemon.sent();
    assert_eq!(
        (sent.len(), sent[0].identity.as_str(), sent[0].message.content.as_str()),
        (1, "telegram:7:42", "requests")
    );
    let answered = daemon.answered();
    assert_eq!((answered[0].identity.as_str(), answered[0].decision.as_str()), ("telegram:7:42", "session"));
}
