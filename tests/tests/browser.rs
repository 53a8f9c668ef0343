//! The `browser` tool through the real binaries: a Worker's calls go to the session's browser
//! container (Debian's Chromium under the tool tier, gVisor here), whose every request goes
//! through the runner's proxy to the daemon. The only server reached is the test's own, on the
//! container bridge (allowed by `tools.web_proxy.allow` and a rule); addresses the filter
//! refuses are refused before anything connects.

use baaaht_proto::client;
use baaaht_proto::v1;
use baaaht_tests::browser_site::{browse, reference};
use baaaht_tests::{DaemonOptions, TestDaemon};

fn daemon_for(target: &str) -> TestDaemon {
    TestDaemon::start(DaemonOptions {
        files: vec![
            (
                "config/config.yaml".into(),
                format!("tools:\n  browser:\n    enabled: true\n  web_proxy:\n    allow: ['{target}']\n"),
            ),
            ("users/baaaht-self-test/egress.yaml".into(), format!("rules:\n  - host: '{target}'\n    action: allow\n")),
        ],
        ..Default::default()
    })
    .expect("daemon")
}

#[test]
fn a_worker_reads_script_built_pages_fills_forms_keeps_a_login_and_saves_files() {
    let rt = baaaht_tests::runtime();
    let (_site, target) = baaaht_tests::browser_site::serve().expect("the test's site");
    let daemon = daemon_for(&target);
    let worker = daemon.lingering_agent("worker", None, &[]).expect("worker");
    let site = format!("http://{target}");

    // A page built by JavaScript: web_fetch sees an empty box, the browser the words.
    let (page, failed, meta) = browse(&rt, &worker, serde_json::json!({"action": "open", "url": format!("{site}/js")}));
    assert!(!failed && page.contains("Built by JavaScript: 42 trains today"), "{page}\n{}", daemon.log_text());
    assert_eq!(meta.get("title").map(String::as_str), Some("Trains"), "{meta:?}");

    // A two-step form: typed, chosen, submitted.
    let (page, failed, _) = browse(&rt, &worker, serde_json::json!({"action": "open", "url": format!("{site}/form")}));
    assert!(!failed && page.contains("Step 1"), "{page}");
    let name = reference(&page, "textbox \"Name\"");
    let (page, failed, _) =
        browse(&rt, &worker, serde_json::json!({"action": "type", "ref": name, "text": "Jane", "submit": true}));
    assert!(!failed && page.contains("Step 2"), "{page}");
    let class = reference(&page, "combobox \"Class\"");
    let (page, failed, _) =
        browse(&rt, &worker, serde_json::json!({"action": "choose", "ref": class, "option": "First"}));
    assert!(!failed && page.contains("= \"First\""), "{page}");
    let book = reference(&page, "button \"Book it\"");
    let (page, failed, _) = browse(&rt, &worker, serde_json::json!({"action": "click", "ref": book}));
    assert!(!failed && page.contains("Booked Jane in First class"), "{page}");

    // A link into a new window is followed there, at once.
    browse(&rt, &worker, serde_json::json!({"action": "open", "url": format!("{site}/away")}));
    let (page, _, _) = browse(&rt, &worker, serde_json::json!({"action": "read"}));
    let away = reference(&page, "link \"Trains in a new window\"");
    let started = std::time::Instant::now();
    let (page, failed, _) = browse(&rt, &worker, serde_json::json!({"action": "click", "ref": away}));
    assert!(!failed && page.contains("42 trains"), "{page}");
    println!("a click into a new window took {:?}", started.elapsed());

    // A login in one call is there in the next (the profile is the session's).
    browse(&rt, &worker, serde_json::json!({"action": "open", "url": format!("{site}/login")}));
    let (page, _, _) = browse(&rt, &worker, serde_json::json!({"action": "read"}));
    let user = reference(&page, "textbox \"User\"");
    let (page, failed, _) =
        browse(&rt, &worker, serde_json::json!({"action": "type", "ref": user, "text": "jane", "submit": true}));
    assert!(!failed && page.contains("Welcome back, Jane"), "{page}");
    let (closed, _, _) = browse(&rt, &worker, serde_json::json!({"action": "close"}));
    assert!(closed.contains("closed"), "{closed}");
    let (page, failed, _) =
        browse(&rt, &worker, serde_json::json!({"action": "open", "url": format!("{site}/account")}));
    assert!(!failed && page.contains("Welcome back, Jane"), "a login survives the browser's restart: {page}");

    // A screenshot and a download land in the workspace.
    let (said, failed, meta) = browse(&rt, &worker, serde_json::json!({"action": "screenshot"}));
    assert!(!failed && said.contains("saved a screenshot"), "{said}");
    let shot = meta.get("screenshot").expect("the screenshot's path");
    browse(&rt, &worker, serde_json::json!({"action": "open", "url": format!("{site}/files")}));
    let (page, _, _) = browse(&rt, &worker, serde_json::json!({"action": "read"}));
    let link = reference(&page, "link \"The report\"");
    let (said, failed, _) = browse(&rt, &worker, serde_json::json!({"action": "download", "ref": link}));
    assert!(!failed && said.contains("downloads/report.csv"), "{said}");
    let png =
        baaaht_tests::workspace_file(&daemon.data_dir, "self-test", shot).expect("the screenshot in the workspace");
    if let Some(shots) = std::env::var_os("BAAAHT_SCREENSHOTS") {
        std::fs::write(std::path::Path::new(&shots).join("browser-account.png"), &png).expect("a copy to look at");
    }
    assert!(baaaht_tests::web::png_shows_something(&png).expect("a PNG"), "the screenshot shows the page");
    let csv =
        baaaht_tests::workspace_file(&daemon.data_dir, "self-test", "downloads/report.csv").expect("the download");
    assert_eq!(csv, b"day,trains\nmonday,42\n");
    // The login's cookie is in the person's profile beside the workspace, where no other tool
    // reads it; not in the workspace.
    let profile = daemon.data_dir.join("sessions/self-test/browser/baaaht-self-test");
    assert!(profile.join("Default/Cookies").is_file(), "the profile is the person's: {}", profile.display());
    assert!(baaaht_tests::workspace_file(&daemon.data_dir, "self-test", ".browser/profile/Default/Cookies").is_none());
    drop(worker);
}

#[test]
fn private_addresses_and_a_redirect_to_metadata_are_refused_and_hostile_pages_are_contained() {
    let rt = baaaht_tests::runtime();
    let (_site, target) = baaaht_tests::browser_site::serve().expect("the test's site");
    let daemon = daemon_for(&target);
    let worker = daemon.lingering_agent("worker", None, &[]).expect("worker");
    let site = format!("http://{target}");

    for url in ["http://127.0.0.1:9/", "http://localhost/", "http://169.254.169.254/latest/", "file:///etc/passwd"] {
        let (said, failed, _) = browse(&rt, &worker, serde_json::json!({"action": "open", "url": url}));
        assert!(failed && said.contains("may not open") || said.contains("only http"), "{url}: {said}");
    }
    let (said, _, _) =
        browse(&rt, &worker, serde_json::json!({"action": "open", "url": format!("{site}/to-metadata")}));
    assert!(said.contains("169.254.169.254") && said.contains("refused"), "the redirect is refused: {said}");

    // A script that never yields: the page is closed, the browser goes on.
    let (said, failed, _) = browse(&rt, &worker, serde_json::json!({"action": "open", "url": format!("{site}/loop")}));
    assert!(failed && said.contains("did not answer"), "{said}");
    let (page, failed, _) = browse(&rt, &worker, serde_json::json!({"action": "open", "url": format!("{site}/js")}));
    assert!(!failed && page.contains("42 trains"), "the browser goes on: {page}");
    // A click on a button something invisible covers is refused, not taken by the cover.
    browse(&rt, &worker, serde_json::json!({"action": "open", "url": format!("{site}/covered")}));
    let (page, _, _) = browse(&rt, &worker, serde_json::json!({"action": "read"}));
    let cancel = reference(&page, "button \"Cancel order\"");
    let (said, failed, _) = browse(&rt, &worker, serde_json::json!({"action": "click", "ref": cancel}));
    assert!(failed && said.contains("covers it") && !said.contains("Booked taken"), "{said}");

    // A popup storm (Chromium's blocker holds windows opened without a click) and a dialog:
    // dismissed and told; Chromium's own traffic is not asked about nor told.
    let (page, failed, _) =
        browse(&rt, &worker, serde_json::json!({"action": "open", "url": format!("{site}/popups")}));
    assert!(!failed && page.contains("Many windows") && page.contains("dismissed: you won"), "{page}");
    assert!(!page.contains("google"), "{page}");

    // A page that moves the focus into a hidden frame as its field takes it gets nothing typed.
    browse(&rt, &worker, serde_json::json!({"action": "open", "url": format!("{site}/hijack")}));
    let (page, _, _) = browse(&rt, &worker, serde_json::json!({"action": "read"}));
    let search = reference(&page, "textbox \"Search\"");
    let (said, failed, _) =
        browse(&rt, &worker, serde_json::json!({"action": "type", "ref": search, "text": "my secret words"}));
    assert!(failed && said.contains("did not take the focus"), "{said}");

    // A memory bomb (array buffers, outside the heap's cap): its page is ended before it fills
    // the container, which under gVisor would end the whole sandbox; the browser goes on.
    let (said, failed, _) = browse(&rt, &worker, serde_json::json!({"action": "open", "url": format!("{site}/bomb")}));
    assert!(failed && said.contains("the page was closed") && said.contains("MiB"), "{said}");
    let (page, failed, _) = browse(&rt, &worker, serde_json::json!({"action": "open", "url": format!("{site}/js")}));
    assert!(!failed && page.contains("42 trains"), "the browser goes on: {page}");
    drop(worker);
}

/// A host no rule names is asked about in the chat, as the browser's (not a role's tools),
/// and the page opens once someone allows it.
#[test]
fn a_new_host_is_asked_in_chat_and_opens_once_allowed() {
    let rt = baaaht_tests::runtime();
    let (_site, target) = baaaht_tests::browser_site::serve().expect("the test's site");
    let daemon = TestDaemon::start(DaemonOptions {
        files: vec![(
            "config/config.yaml".into(),
            format!("tools:\n  browser:\n    enabled: true\n  web_proxy:\n    allow: ['{target}']\n"),
        )],
        ..Default::default()
    })
    .expect("daemon");
    let worker = daemon.lingering_agent("worker", None, &[]).expect("worker");
    let url = format!("http://{target}/js");
    let asked = rt.block_on(async {
        let mut host = baaaht_tests::scenario::host_client(&daemon).await.expect("host");
        let mut events = baaaht_tests::browser_site::follow_self_test(&mut host).await;
        let mut agent = client::connect(&worker.socket, worker.options()).await.expect("connect");
        let params = serde_json::json!({"action": "open", "url": url}).to_string();
        let request = v1::ToolRequest { tool: "browser".into(), params_json: params, ..v1::ToolRequest::default() };
        let opening = tokio::spawn(async move { agent.agents.request_tool_execution(request).await });
        let question = loop {
            let event = tokio::time::timeout(std::time::Duration::from_secs(120), events.message())
                .await
                .expect("a question within 120 s")
                .expect("the stream")
                .expect("an event");
            if let Some(v1::orchestrator_event::Event::Approval(request)) = event.event {
                break request;
            }
        };
        let said = baaaht_gateway_kit::sentences::approval_asked(&question);
        let answer = v1::ApprovalAnswer { id: question.id.clone(), decision: "once".into() };
        host.sessions.answer_approval(answer).await.expect("allowed");
        let opened = opening.await.expect("joined").expect("answered").into_inner();
        (said, opened)
    });
    let (said, opened) = asked;
    assert_eq!(said, format!("The browser wants to reach {target} for “open {url}”."));
    assert!(!opened.is_error && opened.content.contains("42 trains"), "{}", opened.content);
    drop(worker);
}

#[test]
fn the_browser_is_refused_with_a_sentence_while_it_is_turned_off() {
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(DaemonOptions {
        files: vec![("config/config.yaml".into(), "tools:\n  browser:\n    enabled: false\n".into())],
        ..Default::default()
    })
    .expect("daemon");
    let worker = daemon.lingering_agent("worker", None, &[]).expect("worker");
    let (said, failed, _) =
        browse(&rt, &worker, serde_json::json!({"action": "open", "url": "https://trains.example/"}));
    assert!(failed && said.contains("turned off") && said.contains("tools.browser.enabled"), "{said}");
    drop(worker);
}

/// The Assistant hands "Show me the trains page" to the Worker, which opens the test site's
/// page and takes a screenshot; anything else is answered "Hello".
fn screenshot_brain(site: String) -> baaaht_tests::fake_provider::Answer {
    use baaaht_tests::fake_provider::{anthropic_answer, Answer, Asked, Responder};
    Answer::Respond(Responder(std::sync::Arc::new(move |request| {
        let asked = Asked::of(request);
        let done = asked.turn_results.len();
        if asked.offers("delegate") {
            let text = baaaht_tests::scenario::last_user_text(&asked);
            if !text.contains("trains page") {
                return anthropic_answer("Hello", &[]);
            }
            let task = serde_json::json!({"agent": "worker", "task": text, "returnDirectly": false});
            return match done {
                0 => anthropic_answer("", &[("toolu_d0", "delegate", task)]),
                _ => anthropic_answer("Here is the trains page.", &[]),
            };
        }
        let steps = [
            serde_json::json!({"action": "open", "url": format!("{site}/js")}),
            serde_json::json!({"action": "screenshot", "path": "screenshots/trains.png"}),
        ];
        match steps.get(done) {
            Some(params) => anthropic_answer("", &[(&format!("toolu_w{done}"), "browser", params.clone())]),
            None => anthropic_answer("done", &[]),
        }
    })))
}

/// A screenshot a turn's browser takes reaches the person as a file: named in the TUI, shown
/// in the web page (and downloadable there as the PNG it is).
#[test]
fn a_screenshot_a_turn_takes_reaches_the_tui_and_the_web_page_as_a_file() {
    use baaaht_tests::tmux::{shell_quote, Tmux};
    use baaaht_tests::web::{self, text_of, until};
    const WAIT: std::time::Duration = std::time::Duration::from_secs(180);
    let rt = baaaht_tests::runtime();
    let (_site, target) = baaaht_tests::browser_site::serve().expect("the test's site");
    let dir = tempfile::tempdir().expect("tempdir");
    let (web_port, site, provider) = web::site_and_provider(dir.path(), 3600);
    let env = vec![
        ("BAAAHT__TOOLS__BROWSER__ENABLED".into(), "true".into()),
        ("BAAAHT__TOOLS__WEB_PROXY__ALLOW".into(), format!("[\"127.0.0.1:{}\", \"{target}\"]", provider.port)),
    ];
    let files = vec![("users/alice/egress.yaml".into(), format!("rules:\n  - host: '{target}'\n    action: allow\n"))];
    let (_fake, daemon) = web::daemon_for(&rt, &provider, screenshot_brain(format!("http://{target}")), env, files);

    let terminal = Tmux::start(120, 40, &[("BAAAHT_SOCKET", daemon.socket().display().to_string())]).expect("tmux");
    let baaaht = shell_quote(&baaaht_tests::bin("baaaht").display().to_string());
    terminal.type_text(&format!("{baaaht} tui --user alice --theme dark")).expect("type");
    terminal.press(&["Enter"]).expect("enter");
    terminal.wait_for("● connected · user:alice", WAIT).expect("the TUI attaches");
    terminal.type_text("Show me the trains page.").expect("type");
    terminal.press(&["Enter"]).expect("send");
    let screen = terminal
        .wait_for("Here is the trains page.", WAIT)
        .unwrap_or_else(|error| panic!("{error:#}\n{}", daemon.log_text()));
    assert!(screen.contains("The browser's screenshot of http://"), "{screen}");
    assert!(screen.contains("📎 trains.png (image/png, "), "{screen}");

    let (gateway, driver) = web::site_for(&rt, dir.path(), &daemon, &provider, web_port);
    let logs = || format!("{}\n{}", gateway.log_text(), daemon.log_text());
    rt.block_on(async {
        let alice = driver.browser(1280).await.expect("browser");
        web::sign_in(&alice, &site, "alice").await.unwrap_or_else(|error| panic!("{error:#}\n{}", logs()));
        web::say(&alice, "Show me the trains page again.").await;
        assert!(web::answered(&alice, "Here is the trains page.").await, "{}", logs());
        let shown = until(WAIT, || async { text_of(&alice, "#log").await.contains("📎 trains") }).await;
        assert!(shown, "{}\n{}", text_of(&alice, "#log").await, logs());
        // The picture is shown in the page, and its link gives the PNG itself.
        let script = "const picture = [...document.querySelectorAll('img.sent-picture')].pop(); \
                      if (!picture) return 'no picture'; \
                      await picture.decode(); \
                      const bytes = new Uint8Array(await (await fetch(picture.src)).arrayBuffer()); \
                      return [picture.naturalWidth, bytes[1], bytes[2], bytes[3]].join(' ');";
        let looked = alice.execute(&format!("return (async () => {{ {script} }})();"), vec![]).await;
        let looked = looked.expect("the picture").as_str().unwrap_or_default().to_string();
        let (width, magic) = looked.split_once(' ').unwrap_or_default();
        assert_eq!(magic, "80 78 71", "a PNG (\"PNG\" after its first byte): {looked}");
        assert!(width.parse::<u32>().is_ok_and(|width| width >= 640), "the page's width: {looked}");
        web::screenshot(&alice, dir.path(), "browser-screenshot-in-chat").await;
    });
}
