//! The `browser` tool through the real binaries: a Worker's calls go to the session's browser
//! container (Debian's Chromium under the tool tier, gVisor here), whose every request goes
//! through the runner's proxy to the daemon. The only server reached is the test's own, on the
//! container bridge (allowed by `tools.web_proxy.allow` and a rule); addresses the filter
//! refuses are refused before anything connects.

use baaaht_proto::client;
use baaaht_proto::v1;
use baaaht_tests::{DaemonOptions, LingeringAgent, TestDaemon};

/// Calls the browser as the agent `worker`; its answer (text, whether an error, metadata).
fn browse(
    rt: &tokio::runtime::Runtime,
    worker: &LingeringAgent,
    params: serde_json::Value,
) -> (String, bool, std::collections::HashMap<String, String>) {
    rt.block_on(async {
        let mut agent = client::connect(&worker.socket, worker.options()).await.expect("connect");
        let request =
            v1::ToolRequest { tool: "browser".into(), params_json: params.to_string(), ..v1::ToolRequest::default() };
        match agent.agents.request_tool_execution(request).await {
            Ok(answer) => {
                let answer = answer.into_inner();
                (answer.content, answer.is_error, answer.metadata)
            }
            Err(status) => (status.message().to_string(), true, Default::default()),
        }
    })
}

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
    drop(worker);
}

/// The number the page's reading gives the line holding `what`.
fn reference(page: &str, what: &str) -> u64 {
    page.lines()
        .find(|line| line.starts_with('[') && line.contains(what))
        .and_then(|line| line[1..].split(']').next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no [n] {what} in:\n{page}"))
}
