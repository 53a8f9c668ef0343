use super::*;
use crate::store::sessions::{NewEntry, SessionStore};

struct Setup {
    _dir: tempfile::TempDir,
    sessions: SessionStore,
    undo: Undo,
    session: String,
    project: PathBuf,
    roots: Vec<Root>,
}

fn setup() -> Setup {
    setup_with(UndoConfig::default())
}

fn setup_with(config: UndoConfig) -> Setup {
    let dir = tempfile::tempdir().expect("temp");
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("data/state")).expect("the test's files");
    let sessions = SessionStore::open(&data);
    let alice = Context::user("alice");
    let session = sessions.create(&alice, "alice", None).expect("session").id;
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join("src")).expect("the test's files");
    std::fs::write(project.join("src/main.rs"), "fn main() {}\n").expect("the test's files");
    std::fs::write(project.join("README.md"), "# Site\n").expect("the test's files");
    std::fs::write(project.join("notes.txt"), "mine\n").expect("the test's files");
    let undo = Undo::new(&data, config);
    let roots = vec![Root { name: "/project/site".into(), host: project.clone() }];
    Setup { _dir: dir, sessions, undo, session, project, roots }
}

fn said(content: &str, role: &'static str) -> NewEntry {
    NewEntry::Message { role, content: content.into(), channel: None, sender: None, attachments: vec![] }
}

impl Setup {
    /// A turn: the person's message, `act` run as one writing call (a command: walked), the
    /// answer. Answers the message's entry.
    fn turn(&self, asked: &str, act: impl FnOnce(&Path)) -> String {
        let entry = self.sessions.append(&self.session, None, said(asked, "user")).expect("asked");
        let turn = Turn {
            session: self.session.clone(),
            context: Context::user("alice"),
            entry: entry.clone(),
            user_turn: format!("t-{entry}"),
            correlation: format!("c-{entry}"),
        };
        self.undo.before(&turn, &self.roots).expect("before");
        act(&self.project);
        self.undo.after(&turn, "exec", None, &self.roots).expect("after");
        self.undo.ended(&turn.user_turn);
        self.sessions.append(&self.session, None, said("done", "assistant")).expect("answered");
        entry
    }

    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.project.join(path)).ok()
    }

    fn leaf(&self) -> String {
        self.sessions.get(&self.session).and_then(|record| record.leaf).expect("leaf")
    }
}

#[test]
fn an_undo_puts_back_what_the_last_turn_changed_and_moves_the_conversation_before_it() {
    let s = setup();
    let first = s.turn("Set up the site", |at| {
        std::fs::write(at.join("README.md"), "# Site\nWelcome\n").expect("the test's files")
    });
    let after_first = s.leaf();
    // The person edits notes.txt themselves between turns: the next turn's undo gives theirs back.
    std::fs::write(s.project.join("notes.txt"), "mine, edited\n").expect("the test's files");
    let second = s.turn("Add a page and fix the notes", |at| {
        std::fs::write(at.join("src/page.rs"), "pub fn page() {}\n").expect("the test's files");
        // In place, as `>>` writes.
        use std::io::Write as _;
        std::fs::OpenOptions::new()
            .append(true)
            .open(at.join("src/main.rs"))
            .expect("the test's files")
            .write_all(b"// more\n")
            .expect("the test's files");
        std::fs::write(at.join("notes.txt"), "the model's notes\n").expect("the test's files");
        std::fs::remove_file(at.join("README.md")).expect("the test's files");
    });
    let plan = s.undo.plan(&s.sessions, &s.session, 1).expect("plan");
    assert_eq!(plan.turns, std::slice::from_ref(&second));
    assert_eq!(plan.asked, ["Add a page and fix the notes"]);
    assert_eq!(plan.to_leaf, after_first);
    let shown: Vec<(&str, &str)> =
        plan.files.iter().map(|step| (step.change.path.as_str(), step.summary.as_str())).collect();
    assert_eq!(
        shown,
        [
            ("README.md", "made again (the turn removed it)"),
            ("notes.txt", "+1 −1 lines"),
            ("src/main.rs", "+0 −1 lines"),
            ("src/page.rs", "removed (the turn made it)"),
        ]
    );
    let done = s.undo.apply(&s.sessions, &plan).expect("undone");
    assert_eq!(done.restored.len(), 4);
    assert!(done.skipped.is_empty(), "{:?}", done.skipped);
    assert_eq!(s.read("README.md").as_deref(), Some("# Site\nWelcome\n"));
    assert_eq!(s.read("notes.txt").as_deref(), Some("mine, edited\n"));
    assert_eq!(s.read("src/main.rs").as_deref(), Some("fn main() {}\n"));
    assert_eq!(s.read("src/page.rs"), None);
    assert_eq!(s.leaf(), after_first);

    // A redo brings the turn back, files and conversation.
    let redo = s.undo.plan_redo(&s.sessions, &s.session).expect("redo");
    s.undo.apply(&s.sessions, &redo).expect("redone");
    assert_eq!(s.read("notes.txt").as_deref(), Some("the model's notes\n"));
    assert_eq!(s.read("README.md"), None);
    assert_eq!(s.read("src/page.rs").as_deref(), Some("pub fn page() {}\n"));
    assert_ne!(s.leaf(), after_first);
    assert!(s.undo.plan_redo(&s.sessions, &s.session).is_err(), "one redo per undo");

    // Two turns back at once: each file as before the first of them.
    let both = s.undo.plan(&s.sessions, &s.session, 2).expect("plan");
    assert_eq!(both.turns, [first, second]);
    s.undo.apply(&s.sessions, &both).expect("undone");
    assert_eq!(s.read("README.md").as_deref(), Some("# Site\n"));
    assert_eq!(s.read("notes.txt").as_deref(), Some("mine, edited\n"));
    assert_eq!(both.to_leaf, s.session, "before the first message");
    assert!(s.undo.plan(&s.sessions, &s.session, 1).is_err(), "nothing left to undo");
}

#[test]
fn a_file_the_person_changed_since_the_turn_is_kept_and_named() {
    let s = setup();
    s.turn("Write two files", |at| {
        std::fs::write(at.join("a.txt"), "model a\n").expect("the test's files");
        std::fs::write(at.join("src/main.rs"), "fn main() { println!(); }\n").expect("the test's files");
    });
    std::fs::write(s.project.join("src/main.rs"), "fn main() { /* mine */ }\n").expect("the test's files");
    let plan = s.undo.plan(&s.sessions, &s.session, 1).expect("plan");
    assert_eq!(plan.files.len(), 1);
    assert_eq!(plan.skipped.len(), 1);
    assert_eq!(plan.skipped[0].path, "src/main.rs");
    assert!(plan.skipped[0].why.contains("changed since"), "{:?}", plan.skipped);
    let done = s.undo.apply(&s.sessions, &plan).expect("undone");
    assert_eq!(s.read("src/main.rs").as_deref(), Some("fn main() { /* mine */ }\n"));
    assert_eq!(s.read("a.txt"), None);
    assert_eq!(done.skipped.len(), 1);
}

#[test]
fn an_undo_cut_short_by_a_stop_is_finished_at_the_next_start() {
    let s = setup();
    s.turn("Change things", |at| {
        std::fs::write(at.join("README.md"), "# Changed\n").expect("the test's files");
        std::fs::write(at.join("b.txt"), "new\n").expect("the test's files");
    });
    let plan = s.undo.plan(&s.sessions, &s.session, 1).expect("plan");
    // Written down, then one file put back, then the daemon died.
    let note = s.sessions.folder(&s.session).join(PENDING);
    state::write_atomic(&note, &serde_json::to_vec(&plan).expect("the test's files"), 0o600).expect("the test's files");
    std::fs::write(s.project.join("README.md"), "# Site\n").expect("the test's files");
    let again = Undo::new(s.undo.data.as_path(), UndoConfig::default());
    assert_eq!(again.pending(), std::slice::from_ref(&s.session));
    again.recover(&s.sessions, &s.session);
    assert!(again.pending().is_empty());
    assert_eq!(s.read("README.md").as_deref(), Some("# Site\n"));
    assert_eq!(s.read("b.txt"), None);
    assert_eq!(s.leaf(), plan.to_leaf);
    assert!(!note.exists());
    assert!(matches!(again.records(&s.session).last(), Some(Record::Undone { .. })));
}

#[test]
fn a_written_file_named_by_its_path_is_kept_without_a_walk_and_a_link_is_never_followed() {
    let s = setup();
    let outside = tempfile::tempdir().expect("the test's files");
    std::fs::write(outside.path().join("secret"), "host secret").expect("the test's files");
    let entry = s.sessions.append(&s.session, None, said("edit", "user")).expect("the test's files");
    let turn = Turn {
        session: s.session.clone(),
        context: Context::user("alice"),
        entry,
        user_turn: "t-1".into(),
        correlation: "c-1".into(),
    };
    s.undo.before(&turn, &s.roots).expect("the test's files");
    std::fs::write(s.project.join("README.md"), "# Edited\n").expect("the test's files");
    std::fs::write(s.project.join("notes.txt"), "not named\n").expect("the test's files");
    let changes =
        s.undo.after(&turn, "write_file", Some("/project/site/README.md"), &s.roots).expect("the test's files");
    assert_eq!(changes.iter().map(|c| c.path.as_str()).collect::<Vec<_>>(), ["README.md"]);
    // A link the turn made is not kept, and nothing it points to is read.
    std::os::unix::fs::symlink(outside.path().join("secret"), s.project.join("leak")).expect("the test's files");
    let changes = s.undo.after(&turn, "exec", None, &s.roots).expect("the test's files");
    assert_eq!(changes.iter().map(|c| c.path.as_str()).collect::<Vec<_>>(), ["notes.txt"]);
    let objects = s.undo.objects(&Context::user("alice"));
    for (hash, _) in objects.list().expect("the test's files") {
        assert_ne!(objects.get(&hash, 1 << 20).expect("the test's files"), b"host secret");
    }
    assert_eq!(named_in("src/x.rs", &s.roots), None, "relative paths are the workspace's");
    assert_eq!(named_in("/project/site/../x", &s.roots), None);
}

#[test]
fn the_oldest_turns_past_the_settings_are_let_go_and_their_undo_says_so() {
    let s = setup_with(UndoConfig { turns: 1, ..UndoConfig::default() });
    s.turn("First change", |at| std::fs::write(at.join("a.txt"), "one\n").expect("the test's files"));
    s.turn("Second change", |at| std::fs::write(at.join("b.txt"), "two\n").expect("the test's files"));
    let plan = s.undo.plan(&s.sessions, &s.session, 2).expect("plan");
    assert_eq!(plan.files.iter().map(|step| step.change.path.as_str()).collect::<Vec<_>>(), ["b.txt"]);
    assert_eq!(plan.skipped.len(), 1, "{:?}", plan.skipped);
    assert!(
        plan.skipped[0].why.contains("\"First change\" changed cannot be put back: only the last 1 turns"),
        "{:?}",
        plan.skipped
    );

    // A store past its size lets go of the oldest turns' contents, never what is there now.
    let s = setup_with(UndoConfig { max_size: crate::base::config::ByteSize(64 << 10), ..UndoConfig::default() });
    // Bytes that do not compress (xorshift).
    let big = |seed: u64| {
        let mut state = seed;
        (0..200_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect::<Vec<u8>>()
    };
    s.turn("Big one", |at| std::fs::write(at.join("big.bin"), big(7)).expect("the test's files"));
    s.turn("Big two", |at| std::fs::write(at.join("big.bin"), big(13)).expect("the test's files"));
    let records = s.undo.records(&s.session);
    assert!(records.iter().any(|record| matches!(record, Record::Dropped { .. })), "{records:?}");
    assert_eq!(std::fs::read(s.project.join("big.bin")).expect("the test's files"), big(13));
    // Past the size within a turn nothing more is kept, and the undo says so.
    let plan = s.undo.plan(&s.sessions, &s.session, 1).expect("plan");
    assert!(plan.files.is_empty(), "{:?}", plan.files);
    assert!(plan.skipped.iter().any(|skip| skip.why.contains("sessions.undo.max_size")), "{:?}", plan.skipped);
}
