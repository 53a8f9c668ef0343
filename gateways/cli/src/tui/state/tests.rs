//! The state machine's transitions, each on its own.

use super::*;
use v1::orchestrator_event::Event;

fn event(turn: &str, kind: Event) -> Input {
    Input::Event(Box::new(v1::OrchestratorEvent {
        session_id: String::new(),
        turn_id: turn.into(),
        correlation_id: String::new(),
        event: Some(kind),
    }))
}

fn typed(app: &mut App, text: &str) {
    for c in text.chars() {
        app.handle(Input::Key(Key::Char(c)));
    }
}

/// Back on the same session after the daemon went away, the screen shows what the session
/// gained meanwhile (the note of a turn cut short, an answer given while away), once.
#[test]
fn a_reconnection_shows_what_the_session_gained_while_away() {
    let user = |text: &str| Block::User { sender: "alice".into(), channel: None, text: text.into() };
    let said = |text: &str| Block::Assistant { text: text.into(), thinking: String::new() };
    let note = Block::Info { text: "The reply was interrupted".into() };
    let mut app = App::new("user:alice");
    app.handle(Input::Connected { session: "s-1".into(), history: vec![user("one"), said("first")] });
    app.handle(Input::Disconnected { reason: "the daemon restarted".into() });
    let history = vec![user("one"), said("first"), user("two"), note.clone(), user("three"), said("third")];
    // "two" was on the screen when the daemon went; "three" was sent from elsewhere.
    app.blocks.push(user("two"));
    app.handle(Input::Connected { session: "s-1".into(), history: history.clone() });
    let shown: Vec<&Block> = app.blocks.iter().collect();
    assert_eq!(
        shown,
        [
            &user("one"),
            &said("first"),
            &user("two"),
            &note,
            &user("three"),
            &said("third"),
            &Block::Info { text: "reconnected".into() }
        ]
    );
    // Again, with nothing new: nothing is shown twice.
    app.handle(Input::Disconnected { reason: "again".into() });
    app.handle(Input::Connected { session: "s-1".into(), history });
    assert_eq!(app.blocks.iter().filter(|block| **block == said("third")).count(), 1);
}

#[test]
fn an_approval_is_answered_by_one_key_with_the_draft_empty_and_always_takes_two() {
    let mut app = App::new("user:alice");
    app.handle(Input::Connected { session: "s-1".into(), history: vec![] });
    let asked = |id: &str| {
        let request = v1::ApprovalRequest { id: id.into(), host: "pypi.org".into(), port: 443, ..Default::default() };
        event("", Event::Approval(request))
    };
    app.handle(asked("a-1"));
    // Once a message is begun, the keys type it: only an empty draft answers.
    typed(&mut app, "I so");
    assert_eq!(app.draft.text, "I so");
    assert_eq!(app.asking.len(), 1);
    app.draft.take();
    // `a` once asks again; another key cancels; `a` twice answers.
    assert_eq!(app.handle(Input::Key(Key::Char('a'))), []);
    assert_eq!(app.confirming.as_deref(), Some("a-1"));
    assert_eq!(
        app.handle(Input::Key(Key::Char('a'))),
        [Action::Answer { id: "a-1".into(), decision: "always".into() }]
    );
    app.handle(asked("a-2"));
    app.handle(Input::Key(Key::Char('a')));
    app.handle(Input::Key(Key::Esc));
    assert_eq!(app.confirming, None);
    assert_eq!(
        app.handle(Input::Key(Key::Char('s'))),
        [Action::Answer { id: "a-2".into(), decision: "session".into() }]
    );
    assert!(app.asking.is_empty());
}

#[test]
fn a_skill_review_is_shown_whole_and_answered_by_i_or_d() {
    let mut app = App::new("user:alice");
    app.handle(Input::Connected { session: "s-1".into(), history: vec![] });
    let review = v1::SkillReview {
        name: "forecast".into(),
        installs_for: "you".into(),
        scripts: vec![v1::SkillScript { path: "scripts/forecast.sh".into(), size_bytes: 812 }],
        findings: vec!["scripts/forecast.sh:3: runs what it downloads (remote-exec): curl x | sh".into()],
        ..Default::default()
    };
    let request = v1::ApprovalRequest {
        id: "a-1".into(),
        agent: v1::AgentRole::Worker as i32,
        expires_in_seconds: 300,
        skill_review: Some(review),
        ..Default::default()
    };
    app.handle(event("", Event::Approval(request.clone())));
    assert_eq!(app.asking[0].what, "The worker asks to install the skill forecast for you.");
    assert_eq!(app.asking[0].choices, REVIEW_ANSWERS);
    let Some(Block::Notice { title, text, error }) = app.blocks.last() else { panic!("{:#?}", app.blocks) };
    assert_eq!(title, "The worker asks to install the skill forecast for you.");
    assert!(text.contains("Scripts: scripts/forecast.sh (812 bytes).\n"), "{text}");
    assert!(text.contains("\n⚠ The scan found:\n• scripts/forecast.sh:3: runs what it downloads"), "{text}");
    assert!(
        text.ends_with("Press i twice (install) or d (decline); declined in 300 s without an answer. Approval a-1.")
    );
    assert!(*error, "a review whose scan found something is shown as a warning");
    // The egress keys do not answer a review: `o` types; `i` asks again, and a second installs.
    app.handle(Input::Key(Key::Char('o')));
    assert_eq!(app.draft.text, "o");
    app.draft.take();
    assert_eq!(app.handle(Input::Key(Key::Char('i'))), []);
    assert_eq!(app.confirming.as_deref(), Some("a-1"));
    assert_eq!(
        app.handle(Input::Key(Key::Char('i'))),
        [Action::Answer { id: "a-1".into(), decision: "install".into() }]
    );
    assert!(app.asking.is_empty());
    app.handle(event("", Event::Approval(v1::ApprovalRequest { id: "a-2".into(), ..request })));
    assert_eq!(
        app.handle(Input::Key(Key::Char('d'))),
        [Action::Answer { id: "a-2".into(), decision: "decline".into() }]
    );
}

#[test]
fn a_turn_streams_into_one_answer_with_its_activity_in_order() {
    let mut app = App::new("user:alice");
    app.handle(Input::Connected { session: "s-1".into(), history: vec![] });
    typed(&mut app, "hello");
    assert_eq!(app.handle(Input::Key(Key::Enter)), [Action::Send { text: "hello".into(), parent: None }]);
    assert_eq!(app.draft, Draft::default());
    let entered = v1::UserMessageEntered {
        sender_id: "alice".into(),
        content: "hello".into(),
        channel: v1::ChannelType::Tui as i32,
        ..Default::default()
    };
    app.handle(event("t1", Event::UserMessage(entered)));
    app.handle(event("t1", Event::TextDelta(v1::TextDelta { text: "Let me ".into(), ..Default::default() })));
    let delegation = v1::DelegationProgress {
        agent: v1::AgentRole::Worker as i32,
        task: "Look it up\nmore".into(),
        state: "started".into(),
        result: String::new(),
    };
    app.handle(event("t1", Event::Delegation(delegation)));
    app.handle(event("t1", Event::TextDelta(v1::TextDelta { text: "check.".into(), ..Default::default() })));
    assert_eq!(app.live.as_ref().map(|live| live.text.as_str()), Some("Let me check."));
    app.handle(event("t1", Event::Reply(v1::ReplyComplete { content: "Let me check.".into(), ..Default::default() })));
    assert!(app.live.is_none());
    assert_eq!(
        app.blocks,
        [
            Block::User { sender: "alice".into(), channel: None, text: "hello".into() },
            Block::Activity { text: "→ worker: Look it up".into() },
            Block::Assistant { text: "Let me check.".into(), thinking: String::new() },
        ]
    );
}

#[test]
fn a_message_from_another_channel_is_marked_with_it() {
    let mut app = App::new("user:alice");
    let entered = v1::UserMessageEntered {
        sender_id: "alice".into(),
        content: "from my phone".into(),
        channel: v1::ChannelType::Slack as i32,
        ..Default::default()
    };
    app.handle(event("t2", Event::UserMessage(entered)));
    assert_eq!(
        app.blocks,
        [Block::User { sender: "alice".into(), channel: Some("slack".into()), text: "from my phone".into() }]
    );
}

#[test]
fn ctrl_c_cancels_a_running_turn_and_twice_quits_when_idle() {
    let mut app = App::new("user:alice");
    app.handle(event("t1", Event::TextDelta(v1::TextDelta { text: "…".into(), ..Default::default() })));
    assert_eq!(app.handle(Input::Key(Key::CtrlC)), [Action::Cancel { turn: "t1".into() }]);
    app.handle(event("t1", Event::Error(v1::TurnError { message: "cancelled".into(), for_users: true })));
    // What was written stays, marked as stopped, above the reason.
    let n = app.blocks.len();
    assert_eq!(
        app.blocks[n - 2..],
        [
            Block::Assistant { text: "…\n\n[stopped]".into(), thinking: String::new() },
            Block::Error { text: "cancelled".into() }
        ]
    );
    assert!(app.handle(Input::Key(Key::CtrlC)).is_empty(), "the first one only warns");
    assert!(matches!(app.blocks.last(), Some(Block::Info { text }) if text.contains("again to quit")));
    assert_eq!(app.handle(Input::Key(Key::CtrlC)), [Action::Quit]);
    // Any other key in between disarms it.
    let mut app = App::new("user:alice");
    app.handle(Input::Key(Key::CtrlC));
    app.handle(Input::Key(Key::Char('x')));
    assert!(app.handle(Input::Key(Key::CtrlC)).is_empty());
}

#[test]
fn the_draft_survives_a_reconnection_and_history_comes_back_with_up() {
    let mut app = App::new("user:alice");
    typed(&mut app, "first");
    app.handle(Input::Key(Key::Enter));
    typed(&mut app, "half-written");
    app.handle(Input::Key(Key::NewLine));
    typed(&mut app, "second line");
    app.handle(Input::Disconnected { reason: "the daemon restarted".into() });
    assert_eq!(app.connection, Connection::Reconnecting { reason: "the daemon restarted".into() });
    app.handle(Input::Connected { session: "s-1".into(), history: vec![] });
    assert_eq!(app.draft.text, "half-written\nsecond line");
    assert!(matches!(app.blocks.last(), Some(Block::Info { text }) if text == "reconnected"));
    // Up in a multi-line draft moves in the draft, not through history.
    app.handle(Input::Key(Key::Up));
    assert_eq!(app.draft.text, "half-written\nsecond line");
    let mut app = App::new("user:alice");
    for text in ["one", "two"] {
        typed(&mut app, text);
        app.handle(Input::Key(Key::Enter));
    }
    typed(&mut app, "dra");
    app.handle(Input::Key(Key::Up));
    assert_eq!(app.draft.text, "two");
    app.handle(Input::Key(Key::Up));
    assert_eq!(app.draft.text, "one");
    app.handle(Input::Key(Key::Down));
    app.handle(Input::Key(Key::Down));
    assert_eq!(app.draft.text, "dra", "back to what was being written");
}

#[test]
fn commands_are_parsed_completed_and_refused_with_a_reason() {
    assert_eq!(parse_command("/model openai/gpt-4o"), Ok(Command::Model(Some("openai/gpt-4o".into()))));
    assert_eq!(parse_command("/resume"), Ok(Command::Resume(None)));
    assert_eq!(parse_command("/resume a b"), Err("usage: /resume [SESSION-ID]".into()));
    assert_eq!(
        parse_command("/skill:summarize this page"),
        Ok(Command::Skill { name: "summarize".into(), text: "this page".into() })
    );
    assert_eq!(parse_command("/copy x"), Err("/copy: `x` is not a code block's number (they are shown as [N])".into()));
    assert_eq!(parse_command("/new please"), Err("/new takes no argument".into()));
    assert_eq!(parse_command("/frobnicate"), Err("/frobnicate is not a command; /help lists them".into()));
    assert_eq!(complete("/s", &["summarize".into()]), ["/sessions", "/search", "/status", "/skill:summarize"]);
    assert_eq!(parse_command("/search lisbon trip"), Ok(Command::Search("lisbon trip".into())));
    assert!(parse_command("/search").is_err_and(|why| why.starts_with("usage: /search WORDS")));
    let mut app = App::new("user:alice");
    typed(&mut app, "/tasks");
    assert_eq!(app.handle(Input::Key(Key::Enter)), [Action::Run(Command::Tasks)]);
    typed(&mut app, "/help");
    assert!(app.handle(Input::Key(Key::Enter)).is_empty());
    assert!(matches!(app.blocks.last(), Some(Block::Info { text }) if text.contains("/tasks")));
}

#[test]
fn switching_sessions_sends_there_from_then_on() {
    let mut app = App::new("user:alice");
    app.handle(Input::Connected { session: "s-1".into(), history: vec![] });
    app.blocks.push(Block::Info { text: "old".into() });
    let history = vec![Block::User { sender: "alice".into(), channel: None, text: "before".into() }];
    app.handle(Input::Switched { session: "s-2".into(), history, leaf: Some("e-3".into()) });
    assert_eq!(app.session.as_deref(), Some("s-2"));
    assert_eq!(app.blocks.len(), 2, "the session's conversation replaces the old one: {:?}", app.blocks);
    assert!(
        matches!(app.blocks.last(), Some(Block::Info { text }) if text.starts_with("now in session s-2 (an earlier branch"))
    );
    typed(&mut app, "next");
    assert_eq!(app.handle(Input::Key(Key::Enter)), [Action::Send { text: "next".into(), parent: Some("e-3".into()) }]);
    typed(&mut app, "then");
    assert_eq!(
        app.handle(Input::Key(Key::Enter)),
        [Action::Send { text: "then".into(), parent: None }],
        "the branch goes on from the new message"
    );
    // Events of the context's other sessions are not this screen's.
    let elsewhere = v1::OrchestratorEvent {
        session_id: "s-other".into(),
        turn_id: "t9".into(),
        correlation_id: String::new(),
        event: Some(Event::TextDelta(v1::TextDelta { text: "elsewhere".into(), ..Default::default() })),
    };
    app.handle(Input::Event(Box::new(elsewhere)));
    assert!(app.live.is_none());
}

#[test]
fn editing_works_on_characters_not_bytes_and_paste_keeps_lines() {
    let mut app = App::new("user:alice");
    typed(&mut app, "héllo");
    app.handle(Input::Key(Key::Left));
    app.handle(Input::Key(Key::Backspace));
    assert_eq!(app.draft.text, "hélo");
    app.handle(Input::Key(Key::Paste("a\r\nb".into())));
    assert_eq!(app.draft.text, "héla\nbo");
}

#[test]
fn tab_completes_commands_skills_and_files_under_the_data_folder() {
    let folder = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(folder.path().join("notes")).expect("mkdir");
    std::fs::write(folder.path().join("notes/todo.md"), "x").expect("write");
    std::fs::write(folder.path().join("notes/today.md"), "x").expect("write");
    std::fs::write(folder.path().join(".hidden"), "x").expect("write");
    let mut app = App::new("user:alice");
    app.handle(Input::Skills(vec!["summarize".into()]));
    app.handle(Input::Files(Some(folder.path().to_path_buf())));
    typed(&mut app, "/tr");
    app.handle(Input::Key(Key::Tab));
    assert_eq!(app.draft.text, "/tree ");
    let mut app2 = app.clone();
    app2.draft = Draft::default();
    typed(&mut app2, "/sk");
    app2.handle(Input::Key(Key::Tab));
    assert_eq!(app2.draft.text, "/skill:summarize ");
    let mut app3 = app.clone();
    app3.draft = Draft::default();
    typed(&mut app3, "/s");
    app3.handle(Input::Key(Key::Tab));
    assert_eq!(app3.offered, ["/sessions", "/search", "/status", "/skill:summarize"], "several: all are offered");
    let mut app4 = app.clone();
    app4.draft = Draft::default();
    typed(&mut app4, "read @no");
    app4.handle(Input::Key(Key::Tab));
    assert_eq!(app4.draft.text, "read @notes/");
    app4.handle(Input::Key(Key::Tab));
    assert_eq!(app4.draft.text, "read @notes/tod", "the common start of todo.md and today.md");
    assert_eq!(app4.offered, ["notes/today.md", "notes/todo.md"]);
    typed(&mut app4, "o");
    app4.handle(Input::Key(Key::Tab));
    assert_eq!(app4.draft.text, "read @notes/todo.md");
    assert!(complete_path(folder.path(), "../").is_empty(), "nothing outside the folder");
    std::os::unix::fs::symlink("/etc", folder.path().join("etc")).expect("link");
    assert_eq!(complete_path(folder.path(), "et"), ["etc"], "a link is a name");
    assert!(complete_path(folder.path(), "etc/").is_empty(), "and is not followed");
    assert_eq!(complete_path(folder.path(), "."), [".hidden"]);
}

#[test]
fn thinking_is_kept_with_its_answer_and_code_blocks_are_copied_by_number() {
    let mut app = App::new("user:alice");
    app.handle(event("t1", Event::ThinkingDelta(v1::ThinkingDelta { thinking: "hmm".into(), ..Default::default() })));
    app.handle(event(
        "t1",
        Event::TextDelta(v1::TextDelta { text: "```sh\necho 1\n```".into(), ..Default::default() }),
    ));
    app.handle(event("t1", Event::Reply(v1::ReplyComplete::default())));
    assert_eq!(app.blocks, [Block::Assistant { text: "```sh\necho 1\n```".into(), thinking: "hmm".into() }]);
    app.blocks.push(Block::Assistant { text: "```\nsecond\n```".into(), thinking: String::new() });
    app.handle(Input::Key(Key::CtrlT));
    assert!(app.show_thinking);
    assert_eq!(app.handle(Input::Key(Key::CtrlY)), [Action::Copy("second\n".into())]);
    typed(&mut app, "/copy 1");
    assert_eq!(app.handle(Input::Key(Key::Enter)), [Action::Copy("echo 1\n".into())]);
    typed(&mut app, "/copy 3");
    assert!(app.handle(Input::Key(Key::Enter)).is_empty());
    assert!(
        matches!(app.blocks.last(), Some(Block::Error { text }) if text == "there is no code block [3]; they go from [1] to [2]")
    );
}

#[test]
fn a_picker_takes_the_keys_until_a_line_is_chosen_or_it_is_closed() {
    let mut app = App::new("user:alice");
    app.handle(Input::Connected { session: "s-1".into(), history: vec![] });
    let item = |pick: Pick| PickItem { label: String::new(), depth: 0, preview: String::new(), pick, current: false };
    let picker = Picker {
        title: "session tree".into(),
        items: vec![
            item(Pick::Session("s-1".into())),
            item(Pick::Branch { session: "s-1".into(), leaf: "e-2".into() }),
        ],
        selected: 0,
    };
    app.handle(Input::Pick(picker.clone()));
    typed(&mut app, "x");
    assert_eq!(app.draft.text, "", "typing goes to the picker");
    app.handle(Input::Key(Key::Down));
    assert_eq!(
        app.handle(Input::Key(Key::Enter)),
        [Action::Run(Command::Branch { session: "s-1".into(), leaf: "e-2".into() })]
    );
    assert!(app.picker.is_none());
    app.handle(Input::Pick(picker));
    app.handle(Input::Key(Key::Esc));
    assert!(app.picker.is_none());
    typed(&mut app, "/skill:nope");
    app.handle(Input::Skills(vec!["summarize".into()]));
    assert!(app.handle(Input::Key(Key::Enter)).is_empty());
    assert!(
        matches!(app.blocks.last(), Some(Block::Error { text }) if text == "there is no skill `nope`; there are: summarize")
    );
}

#[test]
fn a_branch_is_followed_from_its_leaf_to_the_root() {
    let entry =
        |id: &str, parent: &str| v1::SessionEntry { id: id.into(), parent: parent.into(), ..Default::default() };
    let entries = [entry("a", "s-1"), entry("b", "a"), entry("c", "a"), entry("d", "b")];
    let ids = |branch: Vec<v1::SessionEntry>| branch.into_iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(ids(branch_of(&entries, None)), ["a", "b", "d"]);
    assert_eq!(ids(branch_of(&entries, Some("c"))), ["a", "c"]);
    assert!(branch_of(&entries, Some("nope")).is_empty());
}

#[test]
fn a_session_log_is_shown_as_the_conversation_it_was() {
    use v1::session_entry::Entry;
    let message = |role: &str, content: &str, channel: v1::ChannelType| v1::SessionEntry {
        entry: Some(Entry::Message(v1::MessageEntry {
            role: role.into(),
            content: content.into(),
            channel: channel as i32,
            sender_id: "alice".into(),
            ..Default::default()
        })),
        ..Default::default()
    };
    let delegate = v1::SessionEntry {
        entry: Some(Entry::Delegate(v1::DelegateEntry {
            agent: v1::AgentRole::Coder as i32,
            task: "Write it\nin full".into(),
            result: "done".into(),
        })),
        ..Default::default()
    };
    let activity = |event: v1::orchestrator_event::Event| v1::SessionEntry {
        entry: Some(Entry::Activity(v1::ActivityEntry {
            after: String::new(),
            event: Some(v1::OrchestratorEvent { event: Some(event), ..Default::default() }),
        })),
        ..Default::default()
    };
    let settled = v1::ApprovalSettled { id: "a1".into(), decision: "once".into(), by: "Alice".into() };
    let sent = v1::OutboundMessage { content: "The report is ready.".into(), ..Default::default() };
    let entries = [
        message("user", "hello", v1::ChannelType::Slack),
        delegate,
        activity(v1::orchestrator_event::Event::ApprovalSettled(settled)),
        message("assistant", "hi", v1::ChannelType::Unspecified),
        activity(v1::orchestrator_event::Event::Message(sent)),
        message("system", "The turn was cancelled.", v1::ChannelType::Unspecified),
    ];
    assert_eq!(
        blocks_of(&entries),
        [
            Block::User { sender: "alice".into(), channel: Some("slack".into()), text: "hello".into() },
            Block::Activity { text: "→ coder: Write it".into() },
            Block::Activity { text: "· Allowed once, by Alice.".into() },
            Block::Assistant { text: "hi".into(), thinking: String::new() },
            Block::Assistant { text: "The report is ready.".into(), thinking: String::new() },
            Block::Info { text: "The turn was cancelled.".into() },
        ]
    );
}
