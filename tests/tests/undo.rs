//! Undo through the real binaries: a Coder's turn that changes files in a mounted project and
//! in the session's workspace is taken back from the TUI and from Telegram, files and
//! conversation together; a file the person edited since is kept and named; an undo cut short
//! by `kill -9` is finished when the daemon starts again; the web page's Undo does the same.

use std::path::{Path, PathBuf};
use std::time::Duration;

use baaaht_proto::v1;
use baaaht_tests::fake_provider::{anthropic_answer, Answer, Asked, Responder};
use baaaht_tests::fake_telegram::{gateway_for, telegram_options, FakeTelegram, BOT_ID};
use baaaht_tests::scenario::{self, last_user_text};
use baaaht_tests::tmux::{shell_quote, Tmux};
use baaaht_tests::DaemonOptions;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);

/// The Assistant hands "Fix the site" to the Coder, which rewrites `index.html`, appends to
/// `style.css` in place (as `>>` does), and writes `notes.md` in the workspace; "Make many"
/// has it write 2,000 files; anything else is answered "Hello, how can I help?".
fn brain() -> Answer {
    Answer::Respond(Responder(std::sync::Arc::new(|request| {
        let asked = Asked::of(request);
        let done = asked.turn_results.clone();
        if asked.offers("delegate") {
            let text = last_user_text(&asked);
            if !text.contains("Fix the site") && !text.contains("Make many") {
                return anthropic_answer("Hello, how can I help?", &[]);
            }
            let task = json!({"agent": "coder", "task": text, "returnDirectly": false});
            return match done.len() {
                0 => anthropic_answer("", &[("toolu_d0", "delegate", task)]),
                _ => anthropic_answer(&format!("Coder: {}", done.join(" ")), &[]),
            };
        }
        let steps = match asked.first.contains("Make many") {
            true => vec![(
                "exec",
                json!({"command": "mkdir -p /project/site/many && for i in $(seq 2000); do echo $i > /project/site/many/f$i.txt; done"}),
            )],
            false => vec![
                ("write_file", json!({"path": "/project/site/index.html", "content": "<h1>fixed</h1>\n"})),
                ("exec", json!({"command": "printf 'p { color: red }\\n' >> /project/site/style.css"})),
                ("write_file", json!({"path": "notes.md", "content": "what I changed\n"})),
            ],
        };
        match steps.get(done.len()) {
            Some((tool, params)) => anthropic_answer("", &[(&format!("toolu_c{}", done.len()), tool, params.clone())]),
            None => anthropic_answer("done", &[]),
        }
    })))
}

/// A project folder of the containers' uid, read-write for `owner`'s Coder at `/project/site`.
struct Site {
    _dir: tempfile::TempDir,
    path: PathBuf,
    allowlist: String,
}

fn site(owner: &str) -> Site {
    let dir = tempfile::tempdir().expect("temp");
    let path = dir.path().join("site");
    std::fs::create_dir(&path).expect("site");
    std::fs::write(path.join("index.html"), "<h1>site</h1>\n").expect("write");
    std::fs::write(path.join("style.css"), "body {}\n").expect("write");
    for file in ["", "index.html", "style.css"] {
        std::os::unix::fs::chown(path.join(file), Some(1000), Some(1000)).expect("chown");
    }
    let allowlist = json!({"allowedMounts": [
        {"hostPath": path, "containerPath": "/project/site", "options": "rw", "type": "project", "owner": format!("user:{owner}")},
    ]})
    .to_string();
    Site { _dir: dir, path, allowlist }
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The session's workspace file `name`, read inside its tool container (the workspace is a
/// filesystem mounted while the container runs).
fn in_workspace(session: &str, name: &str) -> Option<String> {
    let out = std::process::Command::new("docker")
        .args(["ps", "--filter", &format!("label=baaaht.session={session}"), "--filter", "label=baaaht.role=tool"])
        .args(["--format", "{{.Names}}"])
        .output()
        .expect("docker ps");
    let name_of = String::from_utf8_lossy(&out.stdout).lines().next().map(str::to_string)?;
    let out = std::process::Command::new("docker")
        .args(["exec", &name_of, "cat", &format!("/workspace/{name}")])
        .output()
        .expect("docker exec");
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The people's sessions in the data dir (not scheduled runs'), from the daemon's index.
fn sessions(data_dir: &Path) -> Vec<String> {
    let index = std::fs::read_to_string(data_dir.join("data/state/sessions.json")).unwrap_or_default();
    let index: serde_json::Value = serde_json::from_str(&index).unwrap_or_default();
    let listed = index["sessions"].as_array().cloned().unwrap_or_default();
    listed.iter().filter(|s| s["run"] != true).filter_map(|s| s["id"].as_str().map(str::to_string)).collect()
}

/// The daemon's leaf of session `id` (what new messages hang under), from its index.
fn leaf_of(data_dir: &Path, id: &str) -> Option<String> {
    let index = std::fs::read_to_string(data_dir.join("data/state/sessions.json")).expect("index");
    let index: serde_json::Value = serde_json::from_str(&index).expect("json");
    let session = index["sessions"].as_array()?.iter().find(|session| session["id"] == id)?.clone();
    session["leaf"].as_str().map(str::to_string)
}

fn options(site: &Site, admins: &str) -> DaemonOptions {
    DaemonOptions {
        files: vec![("config/mount-allowlist.json".into(), site.allowlist.clone())],
        env: vec![("BAAAHT__SYSTEM__ADMIN_USERS".into(), format!("[\"{admins}\"]"))],
        ..Default::default()
    }
}

#[test]
fn a_coders_turn_is_undone_from_the_tui_and_a_file_edited_since_is_kept_and_named() {
    let rt = baaaht_tests::runtime();
    let site = site("alice");
    let (_fake, daemon) = scenario::start(&rt, brain(), options(&site, "nobody")).expect("daemon");
    let terminal = Tmux::start(110, 40, &[("BAAAHT_SOCKET", daemon.socket().display().to_string())]).expect("tmux");
    let baaaht = shell_quote(&baaaht_tests::bin("baaaht").display().to_string());
    terminal.type_text(&format!("{baaaht} tui --user alice --theme dark")).expect("type");
    terminal.press(&["Enter"]).expect("enter");
    terminal.wait_for("● connected · user:alice", WAIT).expect("the TUI attaches");
    terminal.type_text("Hello there.").expect("type");
    terminal.press(&["Enter"]).expect("send");
    terminal.wait_for("Hello, how can I help?", WAIT).expect("the first answer");
    terminal.type_text("Fix the site.").expect("type");
    terminal.press(&["Enter"]).expect("send");
    terminal.wait_for("Coder: done", WAIT).expect("the Coder's answer");
    assert_eq!(read(&site.path.join("index.html")).as_deref(), Some("<h1>fixed</h1>\n"));
    assert_eq!(read(&site.path.join("style.css")).as_deref(), Some("body {}\np { color: red }\n"));
    let session = sessions(&daemon.data_dir).into_iter().next().expect("the session");
    assert_eq!(in_workspace(&session, "notes.md").as_deref(), Some("what I changed\n"));
    let before = leaf_of(&daemon.data_dir, &session).expect("leaf");

    // The person changes style.css themselves meanwhile.
    std::fs::write(site.path.join("style.css"), "body { margin: 0 }\n").expect("edit");
    terminal.type_text("/undo").expect("type");
    terminal.press(&["Enter"]).expect("undo");
    let screen = terminal.wait_for("Send /undo yes to do it.", WAIT).expect("the plan");
    assert!(screen.contains("Undo the last turn (\"Fix the site.\")?"), "{screen}");
    assert!(screen.contains("/project/site/index.html — +1 −1 lines"), "{screen}");
    assert!(screen.contains("notes.md — removed (the turn made it)"), "{screen}");
    assert!(screen.contains("/project/site/style.css — it was changed since"), "{screen}");
    assert_eq!(read(&site.path.join("index.html")).as_deref(), Some("<h1>fixed</h1>\n"), "only shown so far");

    // What is confirmed is what was shown: a file changed after the plan refuses the `yes`.
    std::fs::write(site.path.join("index.html"), "<h1>mine</h1>\n").expect("edit");
    terminal.type_text("/undo yes").expect("type");
    terminal.press(&["Enter"]).expect("confirm");
    terminal.wait_for("What the undo would do changed since it was shown", WAIT).expect("refused");
    assert_eq!(read(&site.path.join("index.html")).as_deref(), Some("<h1>mine</h1>\n"), "nothing done");
    std::fs::write(site.path.join("index.html"), "<h1>fixed</h1>\n").expect("edit");
    terminal.type_text("/undo").expect("type");
    terminal.press(&["Enter"]).expect("undo");
    terminal.wait_until(|screen| screen.matches("Send /undo yes to do it.").count() >= 2, WAIT).expect("shown again");

    terminal.type_text("/undo yes").expect("type");
    terminal.press(&["Enter"]).expect("confirm");
    let screen = terminal.wait_for("Undone: the last turn", WAIT).expect("undone");
    assert!(!screen.contains("alice › Fix the site."), "the conversation is back before it: {screen}");
    assert!(screen.contains("alice › Hello there."), "{screen}");
    assert_eq!(read(&site.path.join("index.html")).as_deref(), Some("<h1>site</h1>\n"));
    assert_eq!(
        read(&site.path.join("style.css")).as_deref(),
        Some("body { margin: 0 }\n"),
        "the person's edit is kept"
    );
    assert_eq!(in_workspace(&session, "notes.md"), None);
    let after = leaf_of(&daemon.data_dir, &session).expect("leaf");
    assert_ne!(after, before);

    // The next message goes on from before the undone turn; /redo is then refused.
    terminal.type_text("Hello again.").expect("type");
    terminal.press(&["Enter"]).expect("send");
    terminal.wait_until(|screen| screen.matches("Hello, how can I help?").count() >= 2, WAIT).expect("answered");
    terminal.type_text("/redo").expect("type");
    terminal.press(&["Enter"]).expect("redo");
    terminal.wait_for("The conversation went on after the undo", WAIT).expect("refused");

    // An undo from elsewhere (here the host's CLI) moves the open screen too.
    let undone = std::process::Command::new(baaaht_tests::bin("baaaht"))
        .args(["sessions", "undo", &session, "--yes"])
        .env("BAAAHT_SOCKET", daemon.socket())
        .output()
        .expect("baaaht sessions undo");
    let said = String::from_utf8_lossy(&undone.stdout);
    assert!(undone.status.success() && said.contains("Undone: the last turn (\"Hello again.\")"), "{said}");
    let screen = terminal
        .wait_until(
            |screen| {
                !screen.contains("alice › Hello again.") && screen.contains("Undone: the last turn (0 files put back")
            },
            WAIT,
        )
        .expect("the screen follows the undo");
    assert!(screen.contains("alice › Hello there."), "{screen}");
}

#[test]
fn a_coders_turn_is_undone_from_telegram_files_and_conversation() {
    let rt = baaaht_tests::runtime();
    let site = site("u-ada");
    let fake = rt.block_on(FakeTelegram::start()).expect("fake telegram");
    let mut options = telegram_options();
    options.files.extend(self::options(&site, "nobody").files);
    options.files.push(scenario::linked_identities(&[(&format!("telegram:{BOT_ID}:42"), "u-ada", "Ada")]));
    let (_provider, daemon) = scenario::start(&rt, brain(), options).expect("daemon");
    let gateway = gateway_for(&rt, &daemon, &fake);
    let logs = || format!("{}\n{}", gateway.log_text(), daemon.log_text());
    rt.block_on(async {
        assert!(fake.wait_for(Duration::from_secs(60), |fake| !fake.calls_of("getUpdates").is_empty()).await);
        let answered = ada_says(&fake, "Fix the site.", |text| text.contains("Coder: done")).await;
        assert!(answered.is_some(), "{}", logs());
        assert_eq!(read(&site.path.join("index.html")).as_deref(), Some("<h1>fixed</h1>\n"));
        let plan = ada_says(&fake, "/undo", |text| text.contains("Send /undo yes to do it.")).await;
        let plan = plan.unwrap_or_else(|| panic!("the plan is shown\n{}", logs()));
        assert!(plan.contains("/project/site/style.css — +0 −1 lines"), "{plan}");
        assert!(plan.contains("notes.md — removed (the turn made it)"), "{plan}");
        let undone = ada_says(&fake, "/undo yes", |text| text.starts_with("Undone: the last turn")).await;
        assert!(undone.is_some(), "undone\n{}", logs());
        assert_eq!(read(&site.path.join("index.html")).as_deref(), Some("<h1>site</h1>\n"));
        assert_eq!(read(&site.path.join("style.css")).as_deref(), Some("body {}\n"));
        // The conversation is back before the turn: the model is not shown it again.
        let session = sessions(&daemon.data_dir).into_iter().next().expect("the session");
        let mut host = scenario::host_client(&daemon).await.expect("host");
        let read_back = v1::ReadSessionRequest {
            session_id: session.clone(),
            leaf_entry_id: leaf_of(&daemon.data_dir, &session).unwrap_or_default(),
        };
        let branch = host.sessions.read_session(read_back).await.expect("read").into_inner();
        assert!(!format!("{:?}", branch.entries).contains("Fix the site."), "{branch:?}");
        // And /redo brings it back.
        let redone = ada_says(&fake, "/redo yes", |text| text.contains("Send /redo yes to do it.")).await;
        assert!(redone.is_some(), "a redo is shown first\n{}", logs());
        let redone = ada_says(&fake, "/redo yes", |text| text.starts_with("Redone")).await;
        assert!(redone.is_some(), "redone\n{}", logs());
        assert_eq!(read(&site.path.join("index.html")).as_deref(), Some("<h1>fixed</h1>\n"));
    });
}

#[test]
fn an_undo_cut_short_by_kill_9_is_finished_when_the_daemon_starts_again() {
    let rt = baaaht_tests::runtime();
    let site = site("alice");
    let (fake, mut daemon) = scenario::start(&rt, brain(), options(&site, "nobody")).expect("daemon");
    let turn = scenario::turn_on(&rt, &daemon, scenario::message(scenario::user("alice"), "alice", "Make many files."));
    assert!(turn.reply.is_some_and(|reply| reply.content.contains("Coder: done")), "the turn");
    assert!(site.path.join("many/f2000.txt").exists());
    let session = sessions(&daemon.data_dir).into_iter().next().expect("the session");
    let note = daemon.data_dir.join("sessions").join(&session).join("undo.pending.json");
    let socket = daemon.socket();
    let undoing = rt.spawn(async move {
        let mut host = baaaht_proto::client::connect(&socket, Default::default()).await.expect("connect");
        let asked = v1::UndoRequest { session_id: session, turns: 1, ..Default::default() };
        let plan = host.sessions.undo(asked.clone()).await.expect("the plan").into_inner();
        let request = v1::UndoRequest {
            apply: true,
            expect_leaf_entry_id: plan.from_entry_id,
            expect_digest: plan.digest,
            ..asked
        };
        host.sessions.undo(request).await
    });
    // Killed as soon as the undo is written down, while it removes the 2,000 files.
    let deadline = std::time::Instant::now() + WAIT;
    while !note.exists() {
        if undoing.is_finished() {
            let answered = rt.block_on(undoing).expect("the undo's task");
            panic!("the undo ended before it was seen: {answered:?}\n{}", daemon.log_text());
        }
        assert!(std::time::Instant::now() < deadline, "the undo never started\n{}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(1));
    }
    daemon.crash().expect("kill -9");
    let _ = rt.block_on(undoing);
    let left = std::fs::read_dir(site.path.join("many")).map(|files| files.count()).unwrap_or(0);
    assert!(left > 0, "the undo was cut short");
    let data_dir = daemon.data_dir.clone();
    let again =
        scenario::daemon_with(&fake, DaemonOptions { data_dir: Some(data_dir.clone()), ..options(&site, "nobody") })
            .expect("the daemon starts again");
    let left = std::fs::read_dir(site.path.join("many")).map(|files| files.count()).unwrap_or(0);
    assert_eq!(left, 0, "finished on start\n{}", again.log_text());
    assert!(!note.exists());
    assert!(again.log_text().contains("an undo cut short by a stop is finished"), "{}", again.log_text());
    let session = sessions(&data_dir).into_iter().next().expect("the session");
    let leaf = leaf_of(&data_dir, &session);
    let log = std::fs::read_to_string(data_dir.join("sessions").join(&session).join("session.jsonl")).expect("log");
    let asked = log.lines().find(|line| line.contains("Make many files.")).expect("the message");
    let parent = serde_json::from_str::<serde_json::Value>(asked).expect("json")["parent"].as_str().map(str::to_string);
    assert_eq!(leaf, parent, "the conversation is back before the turn");
}

/// Ada (chat 42) says `text` in her private chat: the reply to it, once it is what `answer`
/// wants (none when it never is).
async fn ada_says(fake: &FakeTelegram, text: &str, answer: impl Fn(&str) -> bool) -> Option<String> {
    let update = fake.message(42, "private", 42, "Ada", text);
    let asked = update["message"]["message_id"].as_i64().expect("id");
    fake.push(update);
    let reply = |fake: &FakeTelegram| fake.replies_to(42, asked).first().and_then(|reply| fake.text_of(42, *reply));
    let came = fake.wait_for(WAIT, |fake| reply(fake).is_some_and(|text| answer(&text))).await;
    came.then(|| reply(fake)).flatten()
}

/// From the web page (the real `baaaht-web`, headless Chromium): the Undo on an answer shows the
/// plan in the conversation, and its Undo button takes the turn back, confirmed with what was
/// shown (the plan's digest); the page shows the conversation before it.
#[test]
fn a_turn_is_undone_from_the_undo_on_its_answer_in_the_web_page() {
    use baaaht_tests::web::{self, text_of, until};
    use fantoccini::Locator;
    let rt = baaaht_tests::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let (web_port, site, provider) = web::site_and_provider(dir.path(), 3600);
    let (_fake, daemon) = web::daemon_for(&rt, &provider, scenario::echo_brain(), vec![], vec![]);
    let (gateway, driver) = web::site_for(&rt, dir.path(), &daemon, &provider, web_port);
    let logs = || format!("{}\n{}", gateway.log_text(), daemon.log_text());
    rt.block_on(async {
        let alice = driver.browser(1280).await.expect("browser");
        web::sign_in(&alice, &site, "alice").await.unwrap_or_else(|error| panic!("{error:#}\n{}", logs()));
        web::say(&alice, "first").await;
        assert!(web::answered(&alice, "echo: first").await, "{}", logs());
        web::say(&alice, "second").await;
        assert!(web::answered(&alice, "echo: second").await, "{}", logs());
        // The same conversation open in a second window, which follows the undo.
        let session = alice.find(Locator::Css("#sessions [aria-current]")).await.expect("current");
        let session = session.attr("data-id").await.expect("id").expect("an id");
        let other = driver.browser(1280).await.expect("browser");
        web::sign_in(&other, &site, "alice").await.unwrap_or_else(|error| panic!("{error:#}\n{}", logs()));
        web::click(&other, &format!("#sessions [data-id='{session}']")).await;
        let open = until(WAIT, || async { text_of(&other, "#log").await.contains("echo: second") }).await;
        assert!(open, "{}", text_of(&other, "#log").await);
        // The last answer's Undo, in the bar a hover or a long press shows.
        let script = "const undo = [...document.querySelectorAll(\"button[title^='Take this turn back']\")]; \
                      undo[undo.length - 1].click(); return undo.length;";
        let offered = alice.execute(script, vec![]).await.expect("click Undo");
        assert_eq!(offered.as_u64(), Some(2), "an Undo on each answer");
        let shown =
            until(WAIT, || async { text_of(&alice, ".undo-plan").await.contains("Undo the last turn (\"second\")?") })
                .await;
        assert!(shown, "{}\n{}", text_of(&alice, "#log").await, logs());
        web::screenshot(&alice, dir.path(), "undo-plan").await;
        web::click(&alice, ".undo-plan .answers button").await;
        let undone = until(WAIT, || async {
            let log = text_of(&alice, "#log").await;
            log.contains("Undone: the last turn") && !log.contains("echo: second")
        })
        .await;
        assert!(undone, "{}\n{}", text_of(&alice, "#log").await, logs());
        assert!(text_of(&alice, "#log").await.contains("echo: first"));
        web::screenshot(&alice, dir.path(), "undone").await;
        let followed = until(WAIT, || async {
            let log = text_of(&other, "#log").await;
            log.contains("Undone: the last turn") && !log.contains("echo: second") && log.contains("echo: first")
        })
        .await;
        assert!(followed, "the other window: {}\n{}", text_of(&other, "#log").await, logs());
        assert_eq!(text_of(&alice, "#log").await.matches("Undone: the last turn").count(), 1, "said once");
    });
}
