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
        self.turn_marked(asked, None, act)
    }

    /// A turn that read `marked` from outside (none: nothing).
    fn turn_marked(&self, asked: &str, marked: Option<&str>, act: impl FnOnce(&Path)) -> String {
        let entry = self.sessions.append(&self.session, None, said(asked, "user")).expect("asked");
        let turn = Turn {
            session: self.session.clone(),
            context: Context::user("alice"),
            entry: entry.clone(),
            user_turn: format!("t-{entry}"),
            correlation: format!("c-{entry}"),
            marked: marked.map(str::to_string),
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
        marked: None,
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

/// What a turn changed, as compared between two ways of looking: path, content before and after.
fn changed(changes: &[Change]) -> Vec<(String, Option<String>, Option<String>)> {
    let mut seen: Vec<_> = changes
        .iter()
        .map(|change| {
            let hash = |stamp: &Option<Stamp>| stamp.as_ref().map(|stamp| format!("{}:{:o}", stamp.hash, stamp.mode));
            (change.path.clone(), hash(&change.before), hash(&change.after))
        })
        .collect();
    seen.sort();
    seen
}

#[test]
fn the_change_feed_sees_what_a_whole_walk_of_the_folder_sees() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("temp");
    let at = dir.path();
    let project = at.join("project");
    let outside = at.join("outside");
    for folder in [project.join("src/deep"), project.join("docs"), outside.join("pulled/in")] {
        std::fs::create_dir_all(folder).expect("the test's files");
    }
    for (path, text) in
        [("src/main.rs", "fn main() {}\n"), ("src/deep/x.rs", "x\n"), ("docs/a.md", "a\n"), ("notes.txt", "n\n")]
    {
        std::fs::write(project.join(path), text).expect("the test's files");
    }
    std::fs::write(outside.join("pulled/in/p.txt"), "from outside\n").expect("the test's files");
    let fed = Undo::new(&at.join("fed"), UndoConfig::default());
    let walked = Undo::without_feed(&at.join("walked"), UndoConfig::default());
    for data in ["fed", "walked"] {
        std::fs::create_dir_all(at.join(data).join("sessions/s1")).expect("the test's files");
    }
    let roots = vec![Root { name: "/project/site".into(), host: project.clone() }];
    let write = |path: &str, text: &str| {
        let path = project.join(path);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("the test's files");
        std::fs::write(path, text).expect("the test's files");
    };
    type Act<'a> = Box<dyn Fn() + 'a>;
    let acts: Vec<Act<'_>> = vec![
        Box::new(|| write("a/b/c.txt", "new, deep\n")),
        Box::new(|| {
            std::fs::rename(project.join("src/main.rs"), project.join("src/lib.rs")).expect("the test's files");
            use std::io::Write as _;
            let mut notes = std::fs::OpenOptions::new().append(true).open(project.join("notes.txt")).expect("notes");
            notes.write_all(b"more\n").expect("the test's files");
        }),
        Box::new(|| {
            std::fs::rename(project.join("a"), project.join("z")).expect("the test's files");
            std::fs::remove_file(project.join("docs/a.md")).expect("the test's files");
        }),
        Box::new(|| {
            for n in 0..3 {
                write(&format!("d/e/f{n}"), &format!("{n}\n"));
            }
            std::fs::remove_dir_all(project.join("z")).expect("the test's files");
        }),
        Box::new(|| {
            std::fs::remove_file(project.join("d/e/f1")).expect("the test's files");
            write("d/e/f1/inner.txt", "a folder where a file was\n");
            std::os::unix::fs::symlink("/etc/passwd", project.join("d/link")).expect("the test's files");
            let mode = std::fs::Permissions::from_mode(0o600);
            std::fs::set_permissions(project.join("src/lib.rs"), mode).expect("the test's files");
        }),
        Box::new(|| {
            std::fs::rename(outside.join("pulled"), project.join("pulled")).expect("the test's files");
            std::fs::rename(project.join("src/deep"), outside.join("deep")).expect("the test's files");
        }),
        // More events than the kernel queues (16,384): the feed runs over and walks whole.
        Box::new(|| {
            for n in 0..6_000 {
                write(&format!("many/m{n}"), "m");
            }
        }),
        Box::new(|| {
            std::fs::remove_dir_all(project.join("many")).expect("the test's files");
            write("pulled/in/p.txt", "changed inside a folder moved in\n");
        }),
    ];
    for (n, act) in acts.iter().enumerate() {
        let turn = Turn {
            session: "s1".into(),
            context: Context::user("alice"),
            entry: format!("e{n}"),
            user_turn: format!("t{n}"),
            correlation: format!("c{n}"),
            marked: None,
        };
        fed.before(&turn, &roots).expect("before");
        walked.before(&turn, &roots).expect("before");
        act();
        let by_feed = fed.after(&turn, "exec", None, &roots).expect("after");
        let by_walk = walked.after(&turn, "exec", None, &roots).expect("after");
        assert_eq!(changed(&by_feed), changed(&by_walk), "turn {n}");
        assert!(!by_walk.is_empty(), "turn {n} changed something");
        fed.ended(&turn.user_turn);
        walked.ended(&turn.user_turn);
        // The person edits between turns: the next turn's first look keeps it alike.
        write("notes.txt", &format!("the person's notes after turn {n}\n"));
    }
}

#[test]
fn a_gitignore_a_turn_writes_does_not_hide_the_files_it_then_makes() {
    let s = setup();
    s.turn("Build it", |at| {
        std::fs::write(at.join(".gitignore"), "*.log\nbuild/\n").expect("the test's files");
        std::fs::write(at.join("x.log"), "log\n").expect("the test's files");
        std::fs::create_dir_all(at.join("build")).expect("the test's files");
        std::fs::write(at.join("build/out.bin"), "out\n").expect("the test's files");
        // Nor does one in a folder it makes.
        std::fs::create_dir_all(at.join("made")).expect("the test's files");
        std::fs::write(at.join("made/.gitignore"), "*\n").expect("the test's files");
        std::fs::write(at.join("made/evil.sh"), "backdoor\n").expect("the test's files");
    });
    let plan = s.undo.plan(&s.sessions, &s.session, 1).expect("plan");
    let paths: Vec<&str> = plan.files.iter().map(|step| step.change.path.as_str()).collect();
    assert_eq!(paths, [".gitignore", "build/out.bin", "made/.gitignore", "made/evil.sh", "x.log"]);
    // Nor in a later turn: an undo of several turns must see what the later ones made.
    s.turn("Build again", |at| {
        std::fs::write(at.join("y.log"), "another log\n").expect("the test's files");
        std::fs::write(at.join("made/more.sh"), "more\n").expect("the test's files");
    });
    let plan = s.undo.plan(&s.sessions, &s.session, 2).expect("plan");
    let paths: Vec<&str> = plan.files.iter().map(|step| step.change.path.as_str()).collect();
    assert_eq!(
        paths,
        [".gitignore", "build/out.bin", "made/.gitignore", "made/evil.sh", "made/more.sh", "x.log", "y.log"]
    );
    // The person's own .gitignore holds, from the next turn.
    std::fs::write(s.project.join(".gitignore"), "*.log\nbuild/\n# mine\n").expect("the test's files");
    s.turn("Build once more", |at| {
        std::fs::write(at.join("z.log"), "a third log\n").expect("the test's files");
        std::fs::write(at.join("x.log"), "log, again\n").expect("the test's files");
    });
    let plan = s.undo.plan(&s.sessions, &s.session, 1).expect("plan");
    let paths: Vec<&str> = plan.files.iter().map(|step| step.change.path.as_str()).collect();
    assert_eq!(paths, ["x.log"]);
}

#[test]
fn a_file_a_marked_turn_wrote_is_marked_again_when_an_undo_or_a_redo_puts_it_back() {
    let mut s = setup();
    s.roots = vec![Root { name: WORKSPACE.into(), host: s.project.clone() }];
    let fetched = "web_fetch https://example.com/page";
    s.turn_marked("Save the page", Some(fetched), |at| {
        std::fs::write(at.join("page.md"), "from outside\n").expect("the test's files")
    });
    s.turn("Tidy up", |at| std::fs::remove_file(at.join("page.md")).expect("the test's files"));
    // Undoing the clean turn brings back what the marked one wrote: marked again.
    let plan = s.undo.plan(&s.sessions, &s.session, 1).expect("plan");
    let done = s.undo.apply(&s.sessions, &plan).expect("undone");
    assert_eq!(done.marked, [("page.md".to_string(), fetched.to_string())]);
    // Undoing the marked turn removes it; its redo brings it back, marked.
    let plan = s.undo.plan(&s.sessions, &s.session, 1).expect("plan");
    assert_eq!(plan.asked, ["Save the page"]);
    let done = s.undo.apply(&s.sessions, &plan).expect("undone");
    assert!(done.marked.is_empty(), "{:?}", done.marked);
    let redo = s.undo.plan_redo(&s.sessions, &s.session).expect("redo");
    let done = s.undo.apply(&s.sessions, &redo).expect("redone");
    assert_eq!(done.marked, [("page.md".to_string(), fetched.to_string())]);
    assert_eq!(s.read("page.md").as_deref(), Some("from outside\n"));
}

#[test]
fn a_turn_whose_changes_were_not_all_kept_says_so_in_its_undo_after_a_restart_too() {
    let mut s = setup();
    // A folder that cannot be looked at (a file where it should be).
    let broken = s.project.join("notes.txt");
    s.roots.push(Root { name: "/project/broken".into(), host: broken });
    let entry = s.sessions.append(&s.session, None, said("Change both", "user")).expect("asked");
    let turn = Turn {
        session: s.session.clone(),
        context: Context::user("alice"),
        entry: entry.clone(),
        user_turn: "t-1".into(),
        correlation: "c-1".into(),
        marked: None,
    };
    assert!(s.undo.before(&turn, &s.roots).is_err());
    std::fs::write(s.project.join("README.md"), "# Changed\n").expect("the test's files");
    s.undo.ended(&turn.user_turn);
    s.sessions.append(&s.session, None, said("done", "assistant")).expect("answered");
    let again = Undo::new(s.undo.data.as_path(), UndoConfig::default());
    let plan = again.plan(&s.sessions, &s.session, 1).expect("plan");
    assert!(
        plan.skipped.iter().any(|skip| skip.path == entry && skip.why.contains("were not kept")),
        "{:?}",
        plan.skipped
    );
}

#[test]
fn a_hook_a_turn_writes_in_git_is_taken_back_and_its_history_is_left_to_git() {
    let s = setup();
    std::fs::create_dir_all(s.project.join(".git/hooks")).expect("the test's files");
    std::fs::write(s.project.join(".git/config"), "[core]\n").expect("the test's files");
    s.turn("Commit it", |at| {
        std::fs::write(at.join(".git/hooks/post-checkout"), "#!/bin/sh\ntouch /tmp/owned\n").expect("the test's files");
        std::fs::write(at.join(".git/config"), "[core]\n\tfsmonitor = \"touch /tmp/owned\"\n")
            .expect("the test's files");
        std::fs::create_dir_all(at.join(".git/objects/ab")).expect("the test's files");
        std::fs::write(at.join(".git/objects/ab/cdef"), "history").expect("the test's files");
    });
    let plan = s.undo.plan(&s.sessions, &s.session, 1).expect("plan");
    let paths: Vec<&str> = plan.files.iter().map(|step| step.change.path.as_str()).collect();
    assert_eq!(paths, [".git/config", ".git/hooks/post-checkout"]);
    s.undo.apply(&s.sessions, &plan).expect("undone");
    assert_eq!(s.read(".git/config").as_deref(), Some("[core]\n"));
    assert_eq!(s.read(".git/hooks/post-checkout"), None);
    assert_eq!(s.read(".git/objects/ab/cdef").as_deref(), Some("history"), "git's own");
}

#[test]
fn a_link_or_a_file_a_turn_put_where_a_file_or_a_folder_was_is_replaced_by_its_undo() {
    let s = setup();
    std::fs::create_dir_all(s.project.join(".git/hooks")).expect("the test's files");
    std::fs::write(s.project.join(".git/config"), "[core]\n").expect("the test's files");
    std::fs::write(s.project.join(".git/hooks/pre-commit"), "#!/bin/sh\nmine\n").expect("the test's files");
    std::fs::create_dir_all(s.project.join("lib")).expect("the test's files");
    std::fs::write(s.project.join("lib/a.rs"), "a\n").expect("the test's files");
    s.turn("Swap things", |at| {
        std::fs::write(at.join("c.log"), "[core]\n\tfsmonitor = \"touch /tmp/owned\"\n").expect("the test's files");
        std::fs::remove_file(at.join(".git/config")).expect("the test's files");
        std::os::unix::fs::symlink("../c.log", at.join(".git/config")).expect("the test's files");
        std::fs::create_dir_all(at.join("hk")).expect("the test's files");
        std::fs::write(at.join("hk/post-checkout"), "#!/bin/sh\nevil\n").expect("the test's files");
        std::fs::remove_dir_all(at.join(".git/hooks")).expect("the test's files");
        std::os::unix::fs::symlink("../hk", at.join(".git/hooks")).expect("the test's files");
        std::fs::remove_dir_all(at.join("lib")).expect("the test's files");
        std::fs::write(at.join("lib"), "evil\n").expect("the test's files");
    });
    let plan = s.undo.plan(&s.sessions, &s.session, 1).expect("plan");
    let shown: Vec<(&str, &str)> =
        plan.files.iter().map(|step| (step.change.path.as_str(), step.summary.as_str())).collect();
    let said = format!("{shown:?}");
    assert!(
        said.contains("(\".git/config\", \"made again (the turn removed it); a link is there now and is replaced\")"),
        "{said}"
    );
    assert!(said.contains("(\"lib\", \"removed (the turn made it)\")"), "{said}");
    assert!(said.contains(".git/hooks is not a folder now"), "{said}");
    s.undo.apply(&s.sessions, &plan).expect("undone");
    let kind = |path: &str| std::fs::symlink_metadata(s.project.join(path)).expect("there").file_type();
    assert!(kind(".git/config").is_file() && kind(".git/hooks").is_dir() && kind("lib").is_dir());
    assert_eq!(s.read(".git/config").as_deref(), Some("[core]\n"));
    assert_eq!(s.read(".git/hooks/pre-commit").as_deref(), Some("#!/bin/sh\nmine\n"));
    assert_eq!(s.read(".git/hooks/post-checkout"), None);
    assert_eq!(s.read("lib/a.rs").as_deref(), Some("a\n"));
    assert_eq!(s.read("hk/post-checkout"), None, "the turn's own files go too");
}

#[test]
fn a_marked_turn_let_go_still_marks_its_content_when_a_later_undo_puts_it_back() {
    let mut s = setup_with(UndoConfig { turns: 1, ..UndoConfig::default() });
    s.roots = vec![Root { name: WORKSPACE.into(), host: s.project.clone() }];
    let fetched = "web_fetch https://example.com/page";
    s.turn_marked("Save the page", Some(fetched), |at| {
        std::fs::write(at.join("page.md"), "from outside\n").expect("the test's files")
    });
    s.turn("Tidy up", |at| std::fs::remove_file(at.join("page.md")).expect("the test's files"));
    let records = s.undo.records(&s.session);
    assert!(records.iter().any(|record| matches!(record, Record::Dropped { marked, .. } if !marked.is_empty())));
    let plan = s.undo.plan(&s.sessions, &s.session, 1).expect("plan");
    let done = s.undo.apply(&s.sessions, &plan).expect("undone");
    assert_eq!(done.marked, [("page.md".to_string(), fetched.to_string())]);
}
