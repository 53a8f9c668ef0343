//! The web UI as people use it, in headless Chromium at desktop and phone sizes: the first
//! screen, the model picker, the log following an answer, the keyboard, the side bar on a
//! phone, bidirectional text in links, artifacts sized to their content, and axe-core's
//! accessibility checks in both themes. Screenshots of each state are kept (in
//! $BAAAHT_SCREENSHOTS when set) for people to look at.

use std::time::Duration;

use baaaht_proto::v1;
use baaaht_tests::fake_provider::{
    anthropic_answer, anthropic_thinking_answer, words_stream, Answer, Asked, Responder, Wire,
};
use baaaht_tests::scenario::{self, last_user_text};
use baaaht_tests::web::{
    self, accessibility_problems, answered, click, daemon_offering, say, screenshot, shown, site_and_provider, text_of,
    until,
};
use fantoccini::{Client, Locator};

/// The model the picker offers besides the Assistant's own.
const OTHER_MODEL: &str = "anthropic/claude-haiku-4-5";

/// An answer naming the model it was asked as; a long answer line by line, slowly; a link
/// whose text hides a reversed extension, with a small picture.
fn brain() -> Answer {
    Answer::Respond(Responder(std::sync::Arc::new(|request| {
        let asked = Asked::of(request);
        let said = last_user_text(&asked);
        if said.contains("long answer") {
            let lines: String = (1..=120).map(|n| format!("line{n}\n")).collect();
            return words_stream(Wire::Anthropic, &lines.replace('\n', "\n "), Duration::from_millis(50));
        }
        if said.contains("think first") {
            return anthropic_thinking_answer("Weighing the calendar.", "sig-web", "After thinking: Tuesday.", &[]);
        }
        if said.contains("take your time") {
            return words_stream(Wire::Anthropic, "Here I am, after a while.", Duration::from_millis(700));
        }
        if said.contains("the invoice") {
            return anthropic_answer(
                "Here is the invoice: [invoice\u{202E}fdp.exe](http://127.0.0.1:9/invoice) and a picture:\n\n\
                 ```svg\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"200\" height=\"80\">\
                 <rect width=\"200\" height=\"80\" fill=\"teal\"/></svg>\n```\n",
                &[],
            );
        }
        let model = asked.body["model"].as_str().unwrap_or("none").to_string();
        anthropic_answer(&format!("asked as model: {model}. Some `code`:\n\n```rust\nfn main() {{}}\n```"), &[])
    })))
}

/// Alice (an admin, u-alice) and Bob (not, u-bob, with a skill of his own).
fn people(issuer: &str) -> Vec<(String, String)> {
    let identities = serde_json::json!({
        "version": 1,
        "identities": {
            format!("web:{issuer}#alice"): {"user": "u-alice", "own": "u-alice", "created": "2026-11-23T00:00:00Z"},
            format!("web:{issuer}#bob"): {"user": "u-bob", "own": "u-bob", "created": "2026-11-23T00:00:00Z"},
        },
        "users": {
            "u-alice": {"name": "Alice Admin", "created": "2026-11-23T00:00:00Z"},
            "u-bob": {"name": "Bob Builder", "created": "2026-11-23T00:00:00Z"},
        },
    });
    let skill = "---\nname: weather\ndescription: Tells the weather for a place. Uses a forecast service.\n---\n\
                 Look the weather up and say it in a sentence.\n";
    vec![
        ("data/state/identities.json".into(), identities.to_string()),
        ("users/u-bob/skills/weather/SKILL.md".into(), skill.into()),
    ]
}

/// Checks the page with axe-core: nothing serious or critical.
async fn accessible(browser: &Client, state: &str) {
    let problems = accessibility_problems(browser).await.expect("axe-core");
    assert!(problems.is_empty(), "axe-core, {state}:\n{}", problems.join("\n"));
}

/// Sets the theme as the settings do, and waits for the page to be drawn in it.
async fn theme(browser: &Client, theme: &str) {
    js(browser, &format!("localStorage.setItem('theme', '{theme}'); window.applyTheme();")).await;
    drawn(browser).await;
}

/// Waits for the page to come to rest: its transitions (a side bar sliding, colours changing)
/// ended and two frames painted after them.
async fn drawn(browser: &Client) {
    let script = "const done = arguments[arguments.length - 1]; requestAnimationFrame(() => \
                  Promise.all(document.getAnimations().map((a) => a.finished)).then(() => \
                  requestAnimationFrame(() => requestAnimationFrame(() => done(true)))));";
    browser.execute_async(script, vec![]).await.expect("the page comes to rest");
}

/// Runs `script` in the page and returns what it returns, as JSON.
async fn js(browser: &Client, script: &str) -> serde_json::Value {
    browser.execute(script, vec![]).await.unwrap_or_else(|error| panic!("{script}: {error}"))
}

/// How far the conversation's log is from its end, in pixels.
async fn from_the_end(browser: &Client) -> f64 {
    let left =
        js(browser, "const l = document.getElementById('log'); return l.scrollHeight - l.scrollTop - l.clientHeight;")
            .await;
    left.as_f64().unwrap_or(f64::MAX)
}

/// Presses `keys` (WebDriver key codes) in the element focused now.
async fn press(browser: &Client, keys: &str) {
    let focused = browser.active_element().await.expect("a focused element");
    focused.send_keys(keys).await.expect("keys");
}

const ESCAPE: &str = "\u{E00C}";
const ARROW_UP: &str = "\u{E013}";
const CONTROL: &str = "\u{E009}";
const RELEASE: &str = "\u{E000}";

#[test]
fn a_newcomer_meets_a_greeting_and_suggestions_and_only_admins_see_admin_controls_on_desktop_and_phone() {
    let rt = baaaht_tests::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let (web_port, site, provider) = site_and_provider(dir.path(), 3600);
    let env = vec![("BAAAHT__SYSTEM__ADMIN_USERS".into(), "[\"u-alice\"]".into())];
    let (_fake, daemon) =
        daemon_offering(&rt, &provider, brain(), env, people(&provider.issuer), &["claude-haiku-4-5"]);
    // Bob has a task of his own, scheduled every morning.
    rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await.expect("host client");
        let task = v1::TaskDefinition {
            user_id: "u-bob".into(),
            schedule: Some(v1::TaskSchedule { kind: Some(v1::task_schedule::Kind::Cron("0 8 * * *".into())) }),
            prompt: "Tell me what is on today.".into(),
            description: "Morning briefing".into(),
            ..v1::TaskDefinition::default()
        };
        host.tasks.schedule_task(task).await.expect("ScheduleTask");
    });
    let (gateway, driver) = web::site_for(&rt, dir.path(), &daemon, &provider, web_port);
    let logs = || format!("{}\n{}", gateway.log_text(), daemon.log_text());
    rt.block_on(async {
        for (width, size) in [(1280, "desktop"), (390, "phone")] {
            let bob = driver.browser(width).await.expect("browser");
            web::sign_in(&bob, &site, "bob").await.unwrap_or_else(|error| panic!("{error:#}\n{}", logs()));
            // A greeting with his name, suggestions from his skill and his task, the composer.
            let greeted = until(Duration::from_secs(30), || async {
                text_of(&bob, "#greeting").await.ends_with(", Bob")
                    && text_of(&bob, "#suggestions").await.contains("Morning briefing")
            })
            .await;
            assert!(greeted, "{size}: {}\n{}", text_of(&bob, "#welcome").await, logs());
            let suggestions = text_of(&bob, "#suggestions").await;
            assert!(suggestions.contains("Use weather\nTells the weather for a place."), "{suggestions}");
            assert!(shown(&bob, "#input").await, "{size}: the composer is there");
            // The model can be chosen before he asks; no conversation's actions for one that
            // does not exist, no admin control for him.
            assert!(shown(&bob, "#model").await, "{size}: the model picker is on the first screen");
            for hidden in ["#tree-toggle", "#more", "#new-room-box", "#new-room", "#room-id", "#log"] {
                assert!(!shown(&bob, hidden).await, "{size}: {hidden} is shown on Bob's first screen");
            }
            screenshot(&bob, dir.path(), &format!("web-first-screen-{size}-light")).await;
            accessible(&bob, &format!("the first screen, {size}, light")).await;
            theme(&bob, "dark").await;
            screenshot(&bob, dir.path(), &format!("web-first-screen-{size}-dark")).await;
            accessible(&bob, &format!("the first screen, {size}, dark")).await;
            theme(&bob, "light").await;

            // A suggestion puts its words in the composer, to finish and send.
            click(&bob, "#suggestions li:first-child button").await;
            let value = js(&bob, "return document.getElementById('input').value").await;
            assert_eq!(value.as_str(), Some("Use the weather skill to "), "{size}");
            js(&bob, "document.getElementById('input').value = ''").await;

            if size == "phone" {
                // The side bar slides over the conversation and closes by its button, the
                // backdrop, Esc, and a swipe to the left.
                let closed = || async { until(Duration::from_secs(5), || async { !shown(&bob, "#sidebar").await }).await };
                let open = || async {
                    click(&bob, "#menu").await;
                    assert!(until(Duration::from_secs(5), || async { shown(&bob, "#close-menu").await }).await);
                };
                assert!(!shown(&bob, "#sidebar").await, "the side bar starts closed on a phone");
                open().await;
                drawn(&bob).await;
                screenshot(&bob, dir.path(), "web-sidebar-phone-light").await;
                accessible(&bob, "the side bar open on a phone").await;
                click(&bob, "#close-menu").await;
                assert!(closed().await, "the close button closes it");
                open().await;
                // The backdrop's visible part is beside the side bar.
                js(&bob, "document.getElementById('backdrop').dispatchEvent(new MouseEvent('click', {bubbles: true}))").await;
                assert!(closed().await, "the backdrop closes it");
                open().await;
                press(&bob, ESCAPE).await;
                assert!(closed().await, "Esc closes it");
                open().await;
                js(
                    &bob,
                    "const s = document.getElementById('sidebar');
                     const at = (x) => [new Touch({identifier: 1, target: s, clientX: x, clientY: 300})];
                     s.dispatchEvent(new TouchEvent('touchstart', {touches: at(250), changedTouches: at(250), bubbles: true}));
                     s.dispatchEvent(new TouchEvent('touchend', {touches: [], changedTouches: at(80), bubbles: true}));",
                )
                .await;
                assert!(closed().await, "a swipe to the left closes it");
                // A conversation's header stays a thin line on a phone.
                say(&bob, "hello from the phone").await;
                assert!(answered(&bob, "asked as model").await, "{}", logs());
                let header = js(&bob, "return document.querySelector('.top').getBoundingClientRect().height").await;
                assert!(header.as_f64().is_some_and(|height| height <= 56.0), "the header is {header} px tall");
                assert!(shown(&bob, "#model").await, "the conversation's model picker is shown");
                screenshot(&bob, dir.path(), "web-conversation-phone-light").await;
                accessible(&bob, "a conversation on a phone").await;
            }
            bob.close().await.expect("close");
        }
        // An admin sees what is hers to use.
        let alice = driver.browser(1280).await.expect("browser");
        web::sign_in(&alice, &site, "alice").await.unwrap_or_else(|error| panic!("{error:#}\n{}", logs()));
        let admin = until(Duration::from_secs(30), || async { shown(&alice, "#new-room-open").await }).await;
        assert!(admin, "an admin can make rooms");
        alice.close().await.expect("close");
    });
}

/// Sends `text` from the composer as a person does and returns, from the page, when the
/// answer's "working" line appeared (ms after the send), what it and the live region said, and
/// how many of the page's requests had been answered by then.
async fn send_and_catch_the_working_line(browser: &Client, text: &str) -> serde_json::Value {
    let script = r#"
        const [text, done] = arguments;
        const log = document.getElementById('log');
        const sent = performance.now();
        const seen = new MutationObserver(() => {
          const line = log.querySelector('.assistant .working');
          if (!line) return;
          seen.disconnect();
          const at = performance.now();
          const answered = performance.getEntriesByType('resource')
            .filter((r) => r.startTime >= sent && r.responseEnd > 0 && r.responseEnd <= at).length;
          done({ms: at - sent, line: line.textContent, status: document.getElementById('status').textContent, answered});
        });
        seen.observe(log, {childList: true, subtree: true});
        document.getElementById('input').value = text;
        document.getElementById('composer').requestSubmit();
    "#;
    browser.execute_async(script, vec![serde_json::json!(text)]).await.expect("the working line appears")
}

#[test]
fn a_message_says_at_once_that_the_assistant_works_and_the_model_is_chosen_before_it() {
    let rt = baaaht_tests::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let (web_port, site, provider) = site_and_provider(dir.path(), 3600);
    let (fake, daemon) =
        daemon_offering(&rt, &provider, brain(), vec![], people(&provider.issuer), &["claude-haiku-4-5"]);
    let (gateway, driver) = web::site_for(&rt, dir.path(), &daemon, &provider, web_port);
    let logs = || {
        format!(
            "{}
{}",
            gateway.log_text(),
            daemon.log_text()
        )
    };
    rt.block_on(async {
        let alice = driver.browser(1280).await.expect("browser");
        web::sign_in(&alice, &site, "alice").await.unwrap_or_else(|error| panic!("{error:#}\n{}", logs()));
        // Before the first message: the picker is there and says what a choice covers.
        let listed = until(Duration::from_secs(30), || async {
            let options = js(&alice, "return [...document.querySelectorAll('#model option')].map((o) => o.value)").await;
            options.as_array().is_some_and(|all| all.iter().any(|value| value == OTHER_MODEL))
        })
        .await;
        assert!(listed && shown(&alice, "#model").await, "the picker on the first screen\n{}", logs());
        let picker = alice.find(Locator::Id("model")).await.expect("the picker");
        picker.select_by_value(OTHER_MODEL).await.expect("choose");
        let covers = js(&alice, "return document.getElementById('model').title").await;
        assert!(
            covers.as_str().is_some_and(|said| said.contains(OTHER_MODEL) && said.contains("Coder it delegates to keep their own")),
            "{covers}"
        );
        let described = text_of(&alice, "#model-covers").await;
        assert!(described.is_empty() || described.contains("keep their own models"), "{described}");

        // The moment the message is sent, before the daemon has answered anything, the answer
        // says the assistant is working, in the page and to screen readers.
        let caught = send_and_catch_the_working_line(&alice, "take your time").await;
        eprintln!("the working line appeared {} ms after the send", caught["ms"]);
        assert_eq!(caught["line"], "Sending your message…", "{caught}");
        assert_eq!(caught["status"], "Sending your message…", "the live region says it too: {caught}");
        assert_eq!(caught["answered"], 0, "shown before any answer from the server: {caught}");
        // Then what it does: the Assistant starts for the new conversation, then thinks.
        let seen = std::sync::Mutex::new(Vec::<String>::new());
        let thought = until(Duration::from_secs(60), || async {
            let line = text_of(&alice, ".assistant .working").await;
            let mut seen = seen.lock().expect("seen");
            if !line.is_empty() && seen.last() != Some(&line) {
                seen.push(line.clone());
            }
            line == "Thinking…"
        })
        .await;
        assert!(thought, "the phases shown: {:?}\n{}", seen.lock().expect("seen"), logs());
        screenshot(&alice, dir.path(), "web-working-desktop-light").await;
        let status = js(&alice, "return document.getElementById('status').textContent").await;
        assert_eq!(status, "Thinking…", "the live region follows");
        assert!(answered(&alice, "Here I am, after a while.").await, "{}", logs());
        assert!(!shown(&alice, ".assistant .working").await, "the line goes with the first words");
        // The answer came from the model chosen before the conversation began.
        let models: Vec<String> =
            fake.requests().iter().map(|r| Asked::of(r).body["model"].as_str().unwrap_or_default().to_string()).collect();
        assert!(models.iter().any(|model| model == "claude-haiku-4-5"), "the provider was asked for {models:?}");
    });
}

#[test]
fn a_conversation_follows_its_answer_switches_models_and_shows_what_link_text_hides() {
    let rt = baaaht_tests::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let (web_port, site, provider) = site_and_provider(dir.path(), 3600);
    // A cost limit: a model without a price cannot be chosen (budgets would refuse it).
    let env = vec![("BAAAHT__BUDGETS__USER__MONTHLY_COST".into(), "50".into())];
    let offered = ["claude-haiku-4-5", "claude-unpriced-1"];
    let (fake, daemon) = daemon_offering(&rt, &provider, brain(), env, people(&provider.issuer), &offered);
    let (gateway, driver) = web::site_for(&rt, dir.path(), &daemon, &provider, web_port);
    let logs = || format!("{}\n{}", gateway.log_text(), daemon.log_text());
    rt.block_on(async {
        let alice = driver.browser(1280).await.expect("browser");
        web::sign_in(&alice, &site, "alice").await.unwrap_or_else(|error| panic!("{error:#}\n{}", logs()));
        say(&alice, "hello").await;
        assert!(answered(&alice, "asked as model: ").await, "no answer\n{}", logs());

        // The picker lists the Assistant's model and the provider's other one, the current
        // one chosen; the next answer comes from the one chosen.
        let listed = until(Duration::from_secs(30), || async {
            let options = js(&alice, "return [...document.querySelectorAll('#model option')].map((o) => o.value)").await;
            options.as_array().is_some_and(|all| all.iter().any(|value| value == OTHER_MODEL))
        })
        .await;
        assert!(listed, "the picker: {}\n{}", text_of(&alice, "#model").await, logs());
        let unpriced = js(
            &alice,
            "const o = document.querySelector('#model option[value=\"anthropic/claude-unpriced-1\"]'); return [o.disabled, o.title, o.text];",
        )
        .await;
        assert_eq!(unpriced[0], true, "a model the budget would refuse cannot be chosen: {unpriced}");
        assert!(unpriced[1].as_str().is_some_and(|why| why.contains("has no price")), "and says why: {unpriced}");
        let current = js(&alice, "return document.getElementById('model').value").await;
        assert!(current.as_str().is_some_and(|model| model.starts_with("anthropic/") && model != OTHER_MODEL), "{current}");
        let picker = alice.find(Locator::Id("model")).await.expect("the picker");
        picker.select_by_value(OTHER_MODEL).await.expect("choose");
        let switched = until(Duration::from_secs(30), || async {
            js(&alice, "return document.getElementById('status').textContent").await.as_str().is_some_and(|said| said.contains(OTHER_MODEL))
        })
        .await;
        assert!(switched, "switched: {}\n{}", text_of(&alice, "#log").await, logs());
        let asked_before = fake.requests().len();
        say(&alice, "which model now").await;
        assert!(answered(&alice, "asked as model: claude-haiku-4-5").await, "{}", text_of(&alice, "#log").await);
        let models: Vec<String> = fake.requests()[asked_before..]
            .iter()
            .map(|request| Asked::of(request).body["model"].as_str().unwrap_or_default().to_string())
            .collect();
        assert!(models.iter().any(|model| model == "claude-haiku-4-5"), "the provider was asked for {models:?}");
        screenshot(&alice, dir.path(), "web-model-picker-desktop-light").await;

        // The model's thinking is above its answer, folded under "Thinking" until opened.
        say(&alice, "think first please").await;
        assert!(answered(&alice, "After thinking: Tuesday.").await, "{}", text_of(&alice, "#log").await);
        let folded = js(
            &alice,
            "const d = [...document.querySelectorAll('.assistant.done')].pop().querySelector('details.thinking'); \
             return d && [d.open, d.querySelector('summary').textContent, d.querySelector('.thought').textContent, \
             d.nextElementSibling && d.nextElementSibling.className];",
        )
        .await;
        assert_eq!(folded, serde_json::json!([false, "Thinking", "Weighing the calendar.", "text"]), "{}", logs());
        let last = text_of(&alice, ".assistant.done:last-of-type").await;
        assert!(!last.contains("Weighing the calendar."), "folded, the thinking is not shown: {last}");

        // The log follows a long answer to its end; scrolled up, it stays where the reader is
        // and offers the way back.
        say(&alice, "a long answer please").await;
        let long = until(Duration::from_secs(60), || async {
            text_of(&alice, ".assistant[aria-busy] .text").await.contains("line30")
        })
        .await;
        assert!(long, "the long answer starts: {}\n{}", text_of(&alice, "#log").await, logs());
        let following = from_the_end(&alice).await;
        assert!(following < 48.0, "the log follows the answer: {following} px from the end");
        js(&alice, "document.getElementById('log').scrollTop = 0").await;
        // Not a wait for something to happen: the log must stay where it was put while the
        // answer goes on streaming for a while.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let top = js(&alice, "return document.getElementById('log').scrollTop").await;
        assert!(top.as_f64().is_some_and(|top| top < 5.0), "scrolled up, the log stays: {top}");
        assert!(shown(&alice, "#jump").await, "the way back to the latest is offered");
        screenshot(&alice, dir.path(), "web-scrolled-up-desktop-light").await;
        click(&alice, "#jump").await;
        let back = until(Duration::from_secs(10), || async { from_the_end(&alice).await < 48.0 }).await;
        assert!(back, "back at the end");
        assert!(answered(&alice, "line120").await, "{}", logs());
        let end = from_the_end(&alice).await;
        assert!(end < 48.0 && !shown(&alice, "#jump").await, "the finished answer is in view: {end}");

        // Esc stops the answer being written.
        say(&alice, "another long answer please").await;
        let started = until(Duration::from_secs(30), || async {
            text_of(&alice, ".assistant[aria-busy] .text").await.contains("line3")
        })
        .await;
        assert!(started, "{}", text_of(&alice, "#log").await);
        press(&alice, ESCAPE).await;
        let stopped = until(Duration::from_secs(60), || async {
            text_of(&alice, ".assistant.failed .failure").await.contains("cancelled")
        })
        .await;
        assert!(stopped, "Esc stopped it: {}\n{}", text_of(&alice, "#log").await, logs());

        // ↑ in the empty composer takes the last message back to write it again.
        alice.find(Locator::Id("input")).await.expect("composer").click().await.expect("focus");
        press(&alice, ARROW_UP).await;
        let value = js(&alice, "return document.getElementById('input').value").await;
        assert_eq!(value.as_str(), Some("another long answer please"));
        assert!(text_of(&alice, "#replying").await.contains("Editing your last message"));
        click(&alice, "#replying-cancel").await;

        // Ctrl+K searches the conversations by title.
        press(&alice, &format!("{CONTROL}k{RELEASE}")).await;
        let focused = js(&alice, "return document.activeElement.id").await;
        assert_eq!(focused.as_str(), Some("search"), "Ctrl+K goes to the search");
        press(&alice, "no such title").await;
        let none = until(Duration::from_secs(5), || async { shown(&alice, "#no-match").await }).await;
        assert!(none && alice.find_all(Locator::Css("#sessions button")).await.expect("list").is_empty());
        js(&alice, "const s = document.getElementById('search'); s.value = 'HELL'; s.dispatchEvent(new Event('input'));").await;
        let found = until(Duration::from_secs(5), || async { text_of(&alice, "#sessions").await.contains("hello") }).await;
        assert!(found, "{}", text_of(&alice, "#sidebar").await);
        assert_eq!(text_of(&alice, "#sessions h3").await, "Today", "grouped by date");
        // Below the titles, what was said in the conversations that matches (the daemon's index).
        js(&alice, "const s = document.getElementById('search'); s.value = 'long answer'; s.dispatchEvent(new Event('input'));").await;
        let said = until(Duration::from_secs(10), || async {
            shown(&alice, "#said-box").await && text_of(&alice, "#said").await.contains("another long answer please")
        })
        .await;
        assert!(said, "{}", text_of(&alice, "#sidebar").await);
        screenshot(&alice, dir.path(), "web-search-said-desktop-light").await;
        js(&alice, "const s = document.getElementById('search'); s.value = ''; s.dispatchEvent(new Event('input'));").await;

        // Link text cannot hide a reversed extension; a small picture gets a small frame.
        say(&alice, "send me the invoice").await;
        assert!(answered(&alice, "Here is the invoice").await, "{}", logs());
        let link = text_of(&alice, ".assistant.done:last-of-type a").await;
        assert_eq!(link, "invoice<U+202E>fdp.exe", "the override is shown, not obeyed");
        let sized = until(Duration::from_secs(20), || async {
            let height = js(&alice, "return [...document.querySelectorAll('iframe.artifact')].pop().getBoundingClientRect().height").await;
            height.as_f64().is_some_and(|height| (78.0..=100.0).contains(&height))
        })
        .await;
        let height = js(&alice, "return [...document.querySelectorAll('iframe.artifact')].pop().style.height").await;
        assert!(sized, "the picture's frame fits it (80 px): {height}");

        // Nor can a file's name: the daemon stores it without the control (the page would show
        // one it kept), in the composer and on the message sent with it.
        let file = dir.path().join("report\u{202E}fdp.exe");
        std::fs::write(&file, "not a pdf").expect("a file");
        let picker = alice.find(Locator::Id("file")).await.expect("the file picker");
        picker.send_keys(&file.display().to_string()).await.expect("choose the file");
        let chip = until(Duration::from_secs(30), || async { text_of(&alice, "#attached").await.contains("report") }).await;
        assert!(chip, "attached: {}\n{}", text_of(&alice, "#log").await, logs());
        let chip = text_of(&alice, "#attached").await;
        assert!(chip.contains("report") && chip.contains("fdp.exe") && !chip.contains('\u{202E}'), "{chip:?}");
        say(&alice, "what is this file").await;
        assert!(answered(&alice, "asked as model").await, "{}", logs());
        let users = alice.find_all(Locator::Css("#log .user")).await.expect("messages");
        let sent = users.last().expect("the message").text().await.expect("its text");
        assert!(sent.contains("fdp.exe") && !sent.contains('\u{202E}'), "the message's file: {sent:?}");

        // A message's actions show on hover and keyboard focus only.
        let hidden = js(
            &alice,
            "const idle = [...document.querySelectorAll('#log .bubble .actions')].filter((a) => !a.parentElement.matches(':hover'));
             return idle.length > 0 && idle.every((a) => getComputedStyle(a).opacity === '0');",
        )
        .await;
        assert_eq!(hidden.as_bool(), Some(true), "actions hide until wanted");
        js(&alice, "[...document.querySelectorAll('#log .user .actions button')].pop().focus()").await;
        let focused = until(Duration::from_secs(5), || async {
            js(&alice, "return getComputedStyle([...document.querySelectorAll('#log .user .actions')].pop()).opacity")
                .await
                .as_str()
                == Some("1")
        })
        .await;
        assert!(focused, "focused, a message's actions show");

        screenshot(&alice, dir.path(), "web-conversation-desktop-light").await;
        accessible(&alice, "a conversation, desktop, light").await;
        theme(&alice, "dark").await;
        screenshot(&alice, dir.path(), "web-conversation-desktop-dark").await;
        accessible(&alice, "a conversation, desktop, dark").await;
        click(&alice, "#more summary").await;
        screenshot(&alice, dir.path(), "web-menu-desktop-dark").await;
        accessible(&alice, "the conversation's menu, dark").await;
        press(&alice, ESCAPE).await;
        click(&alice, "#settings-open").await;
        drawn(&alice).await;
        accessible(&alice, "the settings, dark").await;
        screenshot(&alice, dir.path(), "web-settings-desktop-dark").await;
        alice.close().await.expect("close");
    });
}
