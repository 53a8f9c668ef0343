//! The assistant in a pocket (the real `baaaht-web`, the real daemon, a real OpenID Connect
//! provider, headless Chromium at a phone's size, and a local push service that checks VAPID
//! and decrypts with http_ece, proved against pywebpush): the app installs, a device allows
//! notifications from the settings, an approval reaches the push service through the daemon's
//! egress, the page's service worker shows it with its answers, "Allow once" from the
//! notification lets the command go on, and a device its service says is gone is removed.
//! An answer that finished while no page was open and a budget nearing its limit are told;
//! quiet hours keep an answer from waking anyone, and a scheduled result comes silently.

use std::time::Duration;

use baaaht_proto::v1;
use baaaht_tests::push::{DevTools, PushService};
use baaaht_tests::scenario;
use baaaht_tests::web::{self, click, daemon_for, register, screenshot, site_and_provider, text_of, until};
use fantoccini::Locator;
use serde_json::{json, Value};

/// The page's push subscription made by the test's push service (Chromium's own push service
/// is Google's, which a test cannot reach): the settings' button goes through the page's real
/// code, `PushManager.subscribe` answering with it.
fn stub(subscription: &Value) -> String {
    format!(
        "(() => {{ const given = {subscription}; let made = null; \
         const subscription = {{ endpoint: given.endpoint, toJSON: () => given, unsubscribe: async () => {{ made = null; return true; }} }}; \
         PushManager.prototype.subscribe = async function () {{ made = subscription; return subscription; }}; \
         PushManager.prototype.getSubscription = async function () {{ return made; }}; }})();"
    )
}

/// Alice signs in on the web as the user whose tools the test's Coder runs for.
fn alice_is_the_self_test_user(provider: &web::Provider) -> (String, String) {
    web::known_as(&provider.issuer, &[("alice", "baaaht-self-test", "Alice")])
}

/// A site run by hand (`baaaht-web` on the host) for alice, with the local push service.
struct Served {
    push: PushService,
    site: String,
    daemon: baaaht_tests::TestDaemon,
    gateway: baaaht_tests::Running,
    _fake: baaaht_tests::fake_provider::FakeProvider,
    _provider: web::Provider,
}

/// [`Served`], its ID tokens lasting `ttl` seconds, the daemon with `env`.
fn served_by_hand(rt: &tokio::runtime::Runtime, dir: &std::path::Path, ttl: u64, env: Vec<(String, String)>) -> Served {
    let push = PushService::start(dir).expect("the push service");
    let (web_port, site, provider) = site_and_provider(dir, ttl);
    let files = vec![alice_is_the_self_test_user(&provider)];
    let (fake, daemon) = daemon_for(rt, &provider, scenario::echo_brain(), env, files);
    let added = register(rt, &daemon, &provider, "external", vec![]);
    let socket = added.gateway.expect("info").socket;
    let args = ["--push-service", &push.origin, "--ca-file", &push.ca.display().to_string()];
    let gateway = web::web_gateway(dir, &socket, &added.token, web_port, &args).expect("baaaht-web");
    Served { push, site, daemon, gateway, _fake: fake, _provider: provider }
}

/// The settings, from the side bar a phone slides in.
async fn settings(browser: &fantoccini::Client) {
    if !browser.find(Locator::Id("settings-open")).await.expect("the button").is_displayed().await.unwrap_or(false) {
        click(browser, "#menu").await;
    }
    click(browser, "#settings-open").await;
}

#[test]
fn an_approval_is_answered_from_its_notification_and_a_gone_device_is_removed() {
    let rt = baaaht_tests::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let push = PushService::start(dir.path()).expect("the push service");
    let (web_port, site, provider) = site_and_provider(dir.path(), 3600);
    let (bridge, port) = baaaht_tests::bridge_server();
    let allow = format!("[\"127.0.0.1:{}\", \"127.0.0.1:{}\", \"{bridge}:{port}\"]", provider.port, push.port);
    let env = vec![("BAAAHT__TOOLS__WEB_PROXY__ALLOW".into(), allow)];
    let files = vec![alice_is_the_self_test_user(&provider)];
    let (_fake, daemon) = daemon_for(&rt, &provider, scenario::echo_brain(), env, files);
    // The gateway in its container, without a network: its pushes go through the daemon's
    // egress tunnel, which opens the push services only.
    let args: Vec<String> = [
        "--listen",
        &format!("127.0.0.1:{web_port}"),
        "--public-url",
        &site,
        "--push-service",
        &push.origin,
        "--ca-file",
        &push.ca.display().to_string(),
        "--push-subject",
        "mailto:ops@example.org",
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    let added = register(&rt, &daemon, &provider, "", args);
    assert_eq!(added.gateway.as_ref().map(|info| info.mode.as_str()), Some("container"));
    assert!(web::serving(&site, 120), "the gateway's container does not serve\n{}", daemon.log_text());
    let driver = web::Driver::start(dir.path()).expect("chromedriver");
    let logs = || format!("{}\n{}", daemon.log_text(), push.process.log_text());
    let devices_file = daemon.data_dir.join("data/state/gateway-state/home/push.json");
    rt.block_on(async {
        let alice = driver.browser(390).await.expect("a phone's browser");
        web::sign_in(&alice, &site, "alice").await.unwrap_or_else(|error| panic!("{error:#}\n{}", logs()));
        let mut tools = DevTools::of(&alice).await.expect("DevTools");
        let page = tools.attach("page", &site).await.expect("the page");

        // The app installs: Chromium finds nothing missing (the manifest, its icons, a secure
        // origin), and the manifest offers its shortcuts.
        let mut errors = json!(null);
        for _ in 0..60 {
            errors = tools.call(Some(&page), "Page.getInstallabilityErrors", json!({})).await.expect("installability");
            if errors["installabilityErrors"].as_array().is_some_and(Vec::is_empty) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert_eq!(errors["installabilityErrors"], json!([]), "{errors}");
        let manifest = tools.call(Some(&page), "Page.getAppManifest", json!({})).await.expect("the manifest");
        let parsed: Value = serde_json::from_str(manifest["data"].as_str().expect("its text")).expect("JSON");
        assert_eq!(parsed["display"], "standalone", "{manifest}");
        let shortcuts: Vec<&str> =
            parsed["shortcuts"].as_array().expect("shortcuts").iter().filter_map(|s| s["url"].as_str()).collect();
        assert_eq!(shortcuts, ["/?new=1", "/?approvals=1"]);

        // The device allows notifications in the settings.
        tools
            .call(None, "Browser.grantPermissions", json!({"origin": site, "permissions": ["notifications"]}))
            .await
            .expect("the notifications permission");
        let subscription = push.subscribe("alice-phone").expect("a subscription");
        let source = stub(&subscription);
        tools.call(Some(&page), "Page.enable", json!({})).await.expect("Page.enable");
        tools.call(Some(&page), "Page.addScriptToEvaluateOnNewDocument", json!({"source": source})).await.expect("stub");
        alice.refresh().await.expect("reload");
        alice.wait().at_most(Duration::from_secs(30)).for_element(Locator::Id("who")).await.expect("the page");
        settings(&alice).await;
        click(&alice, "#push-allow").await;
        let listed = until(Duration::from_secs(30), || async {
            text_of(&alice, "#push-devices .device").await.contains("(this device)")
        })
        .await;
        assert!(listed, "{}\n{}", text_of(&alice, "#notifications").await, logs());
        assert_eq!(text_of(&alice, "#push-state").await, "This device shows notifications.");
        alice.execute("document.getElementById('notifications').scrollIntoView()", vec![]).await.expect("scroll");
        screenshot(&alice, dir.path(), "push-settings").await;
        let kept = std::fs::read_to_string(&devices_file).expect("push.json");
        assert!(kept.contains("alice-phone") && kept.contains(&format!("web:{}#alice", provider.issuer)), "{kept}");
        click(&alice, "#settings-close").await;

        // Her conversation; its Coder's connection waits for approval.
        let (session, coder) = web::coder_in_conversation(&alice, &daemon).await.unwrap_or_else(|error| panic!("{error:#}\n{}", logs()));
        let fetching = baaaht_tests::fetch_in_background(&coder, format!("{bridge}:{port}"));
        let pushed = until(Duration::from_secs(60), || async { !push.shown("approval").is_empty() }).await;
        assert!(pushed, "no approval pushed: {:#?}\n{}", push.received(), logs());
        let (taken, shown) = push.shown("approval").remove(0);
        // Signed for the push service's own origin, encrypted for the device, at once.
        assert_eq!(taken["claims"]["aud"], push.origin.as_str(), "{taken}");
        assert_eq!(taken["claims"]["sub"], "mailto:ops@example.org");
        assert_eq!(taken["urgency"], "high");
        let id = shown["approval"].as_str().expect("the approval's id").to_string();
        assert_eq!(taken["topic"], format!("approval-{id}"));
        assert!(shown["body"].as_str().expect("body").contains(&format!("want to reach {bridge}:{port}")), "{shown}");
        assert_eq!(shown["actions"], json!([{"action": "once", "title": "Allow once"}, {"action": "deny", "title": "Deny"}]));
        assert_eq!(shown["url"], format!("/?session={session}"));
        // The gateway's push went through the daemon's tunnel, and was audited there.
        let mut host = scenario::host_client(&daemon).await.expect("host client");
        let query = v1::AuditQuery { kind: "egress".into(), ..Default::default() };
        let records = host.admin.search_audit(query).await.expect("SearchAudit").into_inner().records;
        let tunnelled = records.iter().any(|record| {
            record.principal == "gateway:home" && record.detail_json.contains(&push.port.to_string())
        });
        assert!(tunnelled, "{records:#?}");

        // Delivered to the page's service worker, which shows it with the two answers.
        tools.call(Some(&page), "ServiceWorker.enable", json!({})).await.expect("ServiceWorker.enable");
        let registration = tools
            .event("ServiceWorker.workerRegistrationUpdated", Duration::from_secs(30), |params| {
                params["registrations"].as_array().is_some_and(|found| !found.is_empty())
            })
            .await
            .expect("the worker's registration");
        let registration = registration["registrations"][0]["registrationId"].clone();
        let deliver = json!({"origin": site, "registrationId": registration, "data": taken["data"]});
        tools.call(Some(&page), "ServiceWorker.deliverPushMessage", deliver).await.expect("deliverPushMessage");
        let notifications = "navigator.serviceWorker.ready.then((r) => r.getNotifications()).then((all) => \
            all.map((n) => ({title: n.title, body: n.body, tag: n.tag, actions: n.actions.map((a) => a.action)})))";
        let showing = until(Duration::from_secs(30), || async {
            let shown = alice.execute(&format!("return {notifications};"), vec![]).await.unwrap_or_default();
            shown.as_array().is_some_and(|all| all.iter().any(|n| n["tag"] == format!("approval-{id}")))
        })
        .await;
        let shown = alice.execute(&format!("return {notifications};"), vec![]).await.expect("notifications");
        assert!(showing, "{shown}");
        let notification = shown.as_array().expect("list").iter().find(|n| n["tag"] == format!("approval-{id}")).cloned();
        let notification = notification.expect("shown");
        assert_eq!(notification["title"], "baaaht asks");
        assert_eq!(notification["actions"], json!(["once", "deny"]));

        // "Allow once" on the notification: the service worker answers as Alice, without the
        // app; the Coder's command goes on.
        let worker = tools.attach("service_worker", &format!("{site}/sw.js")).await.expect("the worker");
        let press = format!(
            "self.registration.getNotifications({{tag: 'approval-{id}'}}).then(([n]) => {{ \
             self.dispatchEvent(new NotificationEvent('notificationclick', {{notification: n, action: 'once'}})); return true; }})"
        );
        assert_eq!(tools.evaluate(&worker, &press).await.expect("a press"), json!(true));
        let fetched = tokio::task::spawn_blocking(move || fetching.join().expect("fetch")).await.expect("join");
        assert!(fetched.contains("arrived: GET /x"), "{fetched}\n{}", logs());
        // Her devices are told it was answered (the notification is replaced under its tag).
        let settled = until(Duration::from_secs(30), || async { !push.shown("settled").is_empty() }).await;
        assert!(settled, "{:#?}", push.received());
        let (_, told) = push.shown("settled").remove(0);
        assert_eq!(told["body"], "Allowed once, by Alice.");
        let card = until(Duration::from_secs(30), || async {
            text_of(&alice, ".approval.allowed .meta").await.starts_with("Allowed once, by Alice")
        })
        .await;
        assert!(card, "{}", text_of(&alice, "#log").await);
        drop(coder);

        // The push service says the device is gone: it is removed.
        push.gone("alice-phone").expect("gone");
        settings(&alice).await;
        click(&alice, "#push-test").await;
        let removed = until(Duration::from_secs(30), || async {
            std::fs::read_to_string(&devices_file).is_ok_and(|kept| !kept.contains("alice-phone"))
        })
        .await;
        assert!(removed, "{}\n{}", std::fs::read_to_string(&devices_file).unwrap_or_default(), logs());
        click(&alice, "#settings-close").await;
        settings(&alice).await;
        let gone = until(Duration::from_secs(10), || async {
            text_of(&alice, "#push-state").await == "No device of yours shows notifications yet."
        })
        .await;
        assert!(gone, "{}", text_of(&alice, "#notifications").await);
        alice.execute("document.getElementById('notifications').scrollIntoView()", vec![]).await.expect("scroll");
        screenshot(&alice, dir.path(), "push-settings-gone").await;

        // The server gone: the installed app says it is offline (its worker kept the page).
        host.admin.remove_gateway(v1::GatewayRef { name: "home".into() }).await.expect("RemoveGateway");
        assert_eq!(web::status_of(&format!("{site}/signed-out")), 0, "nothing listens on the site's port");
        alice.goto(&format!("{site}/")).await.expect("the app, offline");
        let offline = text_of(&alice, "main").await;
        assert!(offline.contains("You are offline") && offline.contains("Your conversations are kept there"), "{offline}");
        screenshot(&alice, dir.path(), "offline").await;
    });
}

#[test]
fn an_answer_while_away_and_a_budget_are_told_and_in_quiet_hours_only_a_silent_result_comes() {
    let rt = baaaht_tests::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    // A budget that warns at the first answer (30 tokens of 1,000 are 3%).
    let env = vec![
        ("BAAAHT__BUDGETS__SOFT_PERCENT".into(), "1".into()),
        ("BAAAHT__BUDGETS__USER__DAILY_TOKENS".into(), "1000".into()),
    ];
    let Served { push, site, daemon, gateway, _fake, _provider } = served_by_hand(&rt, dir.path(), 3600, env);
    let logs = || format!("{}\n{}\n{}", gateway.log_text(), daemon.log_text(), push.process.log_text());
    // Alice signs in; no page of hers follows her events (she is away).
    let me =
        web::signed_in(&site, "alice", &dir.path().join("jar")).unwrap_or_else(|error| panic!("{error:#}\n{}", logs()));
    rt.block_on(async {
        // Her device, as a browser's settings add it.
        let subscription = push.subscribe("alice-phone").expect("a subscription");
        let mut device = subscription.clone();
        device["label"] = json!("Phone");
        let (status, body) = me.call(&site, "POST", "/api/push/devices", Some(&device.to_string()), true).expect("add");
        assert_eq!(status, 200, "{body}");
        // The gateway follows her for her device from now on.
        let following = until(Duration::from_secs(30), || async {
            gateway.log_text().contains("following a person for their notifications")
        })
        .await;
        assert!(following, "{}", logs());
        let send = |text: &str| {
            let message = json!({"content": text}).to_string();
            let (status, body) = me.call(&site, "POST", "/api/messages", Some(&message), true).expect("send");
            assert_eq!(status, 200, "{body}");
        };
        send("first question");
        let told = until(Duration::from_secs(60), || async {
            push.shown("answer").iter().any(|(_, shown)| shown["body"] == "echo: first question")
        })
        .await;
        assert!(told, "the answer was not pushed: {:#?}\n{}", push.received(), logs());
        let (taken, _) = push.shown("answer").remove(0);
        assert_eq!(taken["urgency"], "normal");
        // The budget nearing its limit, in the budget's own words.
        let budget = until(Duration::from_secs(30), || async { !push.shown("budget").is_empty() }).await;
        assert!(budget, "no budget pushed: {:#?}", push.received());
        let (_, shown) = push.shown("budget").remove(0);
        assert!(
            shown["body"].as_str().is_some_and(|body| body.starts_with("You have used 3% of the daily budget")),
            "{shown}"
        );

        // Quiet hours around now: an answer does not come; a scheduled result comes silently.
        let now = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC);
        let at = |shift: i64| {
            let time = now.checked_add(jiff::SignedDuration::from_mins(shift)).expect("a time");
            format!("{:02}:{:02}", time.hour(), time.minute())
        };
        let quiet = json!({"content": "full", "kinds": {"approvals": true, "results": true, "heartbeats": true,
            "answers": true, "budget": true}, "quiet": {"from": at(-60), "to": at(60), "timezone": "UTC"}});
        let (status, body) =
            me.call(&site, "POST", "/api/push/settings", Some(&quiet.to_string()), true).expect("quiet");
        assert_eq!(status, 200, "{body}");
        let wrong = json!({"quiet": {"from": "7pm", "to": "07:00", "timezone": "UTC"}});
        let (status, body) =
            me.call(&site, "POST", "/api/push/settings", Some(&wrong.to_string()), true).expect("wrong");
        assert!(status == 400 && body.contains("write a time as HH:MM"), "{status} {body}");
        send("second question");
        let mut host = scenario::host_client(&daemon).await.expect("host client");
        let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(2);
        let task = v1::TaskDefinition {
            user_id: "baaaht-self-test".into(),
            agent: "worker".into(),
            description: "Plants".into(),
            schedule: Some(v1::TaskSchedule { kind: Some(v1::task_schedule::Kind::Once(at.to_string())) }),
            prompt: "Water the plants.".into(),
            ..v1::TaskDefinition::default()
        };
        host.tasks.schedule_task(task).await.expect("scheduled");
        let result = until(Duration::from_secs(120), || async { !push.shown("result").is_empty() }).await;
        assert!(result, "no result pushed: {:#?}\n{}", push.received(), logs());
        let (_, shown) = push.shown("result").remove(0);
        assert_eq!(shown["silent"], true, "{shown}");
        assert_eq!(shown["title"], "Plants");
        // The second answer finished long before the task ran; it was not pushed.
        let (_, transcript) = me.call(&site, "GET", "/api/sessions", None, false).expect("sessions");
        assert!(!transcript.is_empty());
        let answers: Vec<Value> = push.shown("answer").into_iter().map(|(_, shown)| shown["body"].clone()).collect();
        assert_eq!(answers, [json!("echo: first question")], "{:#?}", push.received());
    });
}

/// A device is told only while the sign-in that allowed it lives: on a shared tablet, Bob
/// signing in over Alice's sign-in ends hers and takes her tablet off her devices; a kiosk
/// whose sign-in expired is told nothing more, while her phone is.
#[test]
fn a_device_is_told_only_while_its_own_sign_in_lives() {
    let rt = baaaht_tests::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    // ID tokens last 20 s, with no refresh token: a sign-in ends 20 s after it began.
    let Served { push, site, daemon, gateway, _fake, _provider } = served_by_hand(&rt, dir.path(), 20, vec![]);
    let logs = || format!("{}\n{}\n{}", gateway.log_text(), daemon.log_text(), push.process.log_text());
    let allow = |session: &web::Session, name: &str| {
        let device = push.subscribe(name).expect("a subscription");
        let (status, body) =
            session.call(&site, "POST", "/api/push/devices", Some(&device.to_string()), true).expect("add");
        assert_eq!(status, 200, "{body}");
    };
    let told = |name: &str, text: &str| {
        push.received().iter().any(|taken| {
            taken["subscription"] == name && taken["data"].as_str().is_some_and(|data| data.contains(text))
        })
    };
    let started = std::time::Instant::now();
    let kiosk = web::signed_in(&site, "alice", &dir.path().join("kiosk"))
        .unwrap_or_else(|error| panic!("{error:#}\n{}", logs()));
    allow(&kiosk, "kiosk");
    // The shared tablet: Alice allows notifications, then Bob signs in on the same browser.
    let tablet = dir.path().join("tablet");
    let alice_there = web::signed_in(&site, "alice", &tablet).expect("alice on the tablet");
    allow(&alice_there, "tablet");
    // (The provider's own session there is over: only the site's cookie is left in the browser.)
    let jar = std::fs::read_to_string(&tablet).expect("the tablet's cookies");
    let site_only: String = jar
        .lines()
        .filter(|line| !line.contains('\t') || line.contains("\tbaaaht_web\t"))
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(&tablet, site_only).expect("cookies");
    let bob = web::signed_in(&site, "bob", &tablet).expect("bob on the tablet");
    assert_eq!(alice_there.call(&site, "GET", "/api/me", None, false).expect("me").0, 401, "her sign-in there ended");
    let kept = std::fs::read_to_string(dir.path().join("web-state/push.json")).expect("push.json");
    assert!(!kept.contains("/push/tablet"), "{kept}");
    assert_eq!(bob.call(&site, "GET", "/api/me", None, false).expect("me").0, 200);
    // Later, on her phone; the kiosk's sign-in then ends.
    std::thread::sleep(Duration::from_secs(11).saturating_sub(started.elapsed()));
    let phone = web::signed_in(&site, "alice", &dir.path().join("phone")).expect("alice on her phone");
    allow(&phone, "phone");
    std::thread::sleep(Duration::from_secs(21).saturating_sub(started.elapsed()));
    assert_eq!(kiosk.call(&site, "GET", "/api/me", None, false).expect("me").0, 401, "the kiosk's sign-in ended");
    let message = json!({"content": "after the kiosk"}).to_string();
    let (status, body) = phone.call(&site, "POST", "/api/messages", Some(&message), true).expect("send");
    assert_eq!(status, 200, "{body}");
    rt.block_on(async {
        let to_phone = until(Duration::from_secs(30), || async { told("phone", "echo: after the kiosk") }).await;
        assert!(to_phone, "{:#?}\n{}", push.received(), logs());
    });
    assert!(!told("kiosk", "after the kiosk") && !told("tablet", "after the kiosk"), "{:#?}", push.received());
}
