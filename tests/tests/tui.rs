//! `baaaht tui` end to end: the real client in a real terminal (tmux), the real daemon, a real
//! engine and the fake provider as the model. What is typed is typed with send-keys and what
//! is checked is what the screen shows.

use std::time::Duration;

use baaaht_tests::fake_provider::{anthropic_thinking_answer, Answer, Asked, Responder};
use baaaht_tests::scenario::{self, last_user_text};
use baaaht_tests::tmux::{shell_quote, Tmux};
use baaaht_tests::DaemonOptions;

const WAIT: Duration = Duration::from_secs(60);

/// The scenario's Worker brain, and a model that thinks before it answers when asked to.
fn brain() -> Answer {
    let Answer::Respond(Responder(worker)) = scenario::worker_brain() else { unreachable!("a responder") };
    Answer::Respond(Responder(std::sync::Arc::new(move |request| {
        if last_user_text(&Asked::of(request)).contains("Think first") {
            return anthropic_thinking_answer(
                "Weighing the calendar.\nThen the weather.",
                "sig-tui",
                "After thinking: Tuesday.",
                &[],
            );
        }
        worker(request)
    })))
}

#[test]
fn a_conversation_in_the_tui_forks_exports_survives_a_daemon_restart_and_leaves_the_terminal_clean() {
    let rt = baaaht_tests::runtime();
    let (fake, mut daemon) = scenario::start(&rt, brain(), DaemonOptions::default()).expect("fake provider and daemon");
    let work = tempfile::tempdir().expect("temp dir");
    let terminal = Tmux::start(100, 32, &[("BAAAHT_SOCKET", daemon.socket().display().to_string())]).expect("tmux");
    terminal.type_text(&format!("cd {} && ", shell_quote(&work.path().display().to_string()))).expect("type");
    terminal
        .type_text(&format!(
            "{} tui --user alice --theme dark",
            shell_quote(&baaaht_tests::bin("baaaht").display().to_string())
        ))
        .expect("type");
    terminal.press(&["Enter"]).expect("enter");
    terminal.wait_for("● connected · user:alice", WAIT).expect("the TUI attaches");

    // A message: the delegation shows as it happens, then the streamed answer.
    terminal.type_text("Ask the worker.").expect("type");
    terminal.press(&["Enter"]).expect("send");
    let screen = terminal.wait_for("Worker: done", WAIT).expect("the answer");
    assert!(screen.contains("alice › Ask the worker."), "{screen}");
    assert!(screen.contains("→ worker: Say done."), "the delegation is shown: {screen}");

    // /fork, then /tree shows the session and its fork, the fork where we are.
    terminal.type_text("/fork").expect("type");
    terminal.press(&["Enter"]).expect("fork");
    let screen = terminal.wait_for("now in session", WAIT).expect("forked");
    assert!(screen.contains("Worker: done"), "the fork holds the conversation: {screen}");
    terminal.type_text("/tree").expect("type");
    terminal.press(&["Enter"]).expect("tree");
    let screen = terminal.wait_for("session tree", WAIT).expect("the tree");
    let line_with = |needle: &str| {
        screen.lines().find(|line| line.contains(needle)).unwrap_or_else(|| panic!("no {needle:?} in:\n{screen}"))
    };
    let (session_line, fork_line) = (line_with("session s-"), line_with("fork s-"));
    assert!(fork_line.contains("● fork"), "the fork is where we are: {screen}");
    assert!(!session_line.contains('●'), "{screen}");
    terminal.press(&["Escape"]).expect("close");
    terminal.wait_until(|screen| !screen.contains("session tree"), WAIT).expect("closed");

    // /export writes the conversation as one HTML page.
    terminal.type_text("/export talk.html").expect("type");
    terminal.press(&["Enter"]).expect("export");
    terminal.wait_for("exported to", WAIT).expect("exported");
    let page = std::fs::read_to_string(work.path().join("talk.html")).expect("the page");
    assert!(page.starts_with("<!doctype html>"), "{page}");
    assert!(page.contains("Ask the worker.") && page.contains("Worker: done"), "{page}");

    // The daemon restarts while a draft is half written: the TUI says so and keeps it.
    terminal.type_text("half written").expect("type");
    daemon.signal("TERM").expect("stop the daemon");
    daemon.wait_exit(Duration::from_secs(30)).expect("the daemon stops");
    terminal.wait_for("reconnecting…", WAIT).expect("the TUI notices");
    let data_dir = daemon.data_dir.clone();
    let restarted =
        baaaht_tests::TestDaemon::start(DaemonOptions { data_dir: Some(data_dir), ..scenario::options_for(&fake) })
            .expect("the daemon restarts");
    let screen = terminal.wait_for("reconnected", WAIT).expect("the TUI reconnects");
    assert!(screen.contains("│half written"), "the draft is intact: {screen}");
    terminal.type_text(", now sent").expect("type");
    terminal.press(&["Enter"]).expect("send");
    terminal
        .wait_until(|screen| screen.matches("Worker: done").count() >= 2, WAIT)
        .expect("the restarted daemon answers");

    // The model's thinking stands above its answer folded to a line, Ctrl+T unfolds and folds it.
    terminal.type_text("Think first, then answer.").expect("type");
    terminal.press(&["Enter"]).expect("send");
    let screen = terminal.wait_for("After thinking: Tuesday.", WAIT).expect("the answer");
    assert!(screen.contains("▸ thought (2 lines) · Ctrl+T shows"), "folded above the answer: {screen}");
    assert!(!screen.contains("Weighing the calendar."), "folded, the thinking is not shown: {screen}");
    terminal.press(&["C-t"]).expect("unfold");
    let screen = terminal.wait_for("▾ thinking · Ctrl+T folds", WAIT).expect("unfolded");
    assert!(screen.contains("┊ Weighing the calendar.") && screen.contains("  Then the weather."), "{screen}");
    terminal.press(&["C-t"]).expect("fold");
    terminal.wait_until(|screen| !screen.contains("Weighing the calendar."), WAIT).expect("folded again");

    // /quit: the terminal is the shell's again, the conversation left in its scrollback.
    terminal.type_text("/quit").expect("type");
    terminal.press(&["Enter"]).expect("quit");
    let screen = terminal.wait_for("baaaht: left session", WAIT).expect("the TUI ends");
    let screen = terminal.wait_until(|screen| screen.trim_end().ends_with('$'), WAIT).unwrap_or(screen);
    assert!(screen.trim_end().ends_with('$'), "the prompt is back: {screen}");
    assert!(!screen.contains("┌ message") && !screen.contains("● connected"), "no TUI left behind: {screen}");
    terminal.type_text("echo typed-after").expect("type");
    terminal.press(&["Enter"]).expect("enter");
    terminal.wait_for("\ntyped-after", WAIT).expect("the shell echoes: the terminal is back in cooked mode");
    drop(restarted);
}
