//! The web gateway (`baaaht-web`, the real binary) with the real daemon, a real OpenID Connect
//! provider (npm's `oidc-provider`, run by Node) and headless Chromium.

use std::time::Duration;

use baaaht_proto::v1;
use baaaht_tests::web::{self, Driver, Provider, CLIENT_ID, CLIENT_SECRET};
use baaaht_tests::{scenario, DaemonOptions};
use fantoccini::Locator;

fn web_cookie() -> &'static str {
    "baaaht_web"
}

/// Waits until `check` holds in the browser, polling against a deadline.
async fn until<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[test]
fn a_user_signs_in_with_the_provider_is_met_by_the_daemon_and_signs_out() {
    let rt = baaaht_tests::runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let web_port = web::free_port().expect("port");
    let site = format!("http://127.0.0.1:{web_port}");
    let provider = Provider::start(dir.path(), &format!("{site}/auth/callback"), &format!("{site}/signed-out"), 3600)
        .expect("the OIDC provider");
    // The daemon fetches the provider's keys through its egress proxy: loopback is allowed here.
    let options = DaemonOptions {
        env: vec![
            ("BAAAHT__TOOLS__WEB_PROXY__ALLOW".into(), format!("[\"127.0.0.1:{}\"]", provider.port)),
            ("WEB_CLIENT_SECRET_HOME".into(), CLIENT_SECRET.into()),
        ],
        ..DaemonOptions::default()
    };
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), options).expect("daemon");
    let added = rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await.expect("host client");
        let request = v1::AddGatewayRequest {
            kind: "web".into(),
            name: "home".into(),
            issuer: provider.issuer.clone(),
            audience: CLIENT_ID.into(),
            mode: "external".into(),
            ..Default::default()
        };
        host.admin.add_gateway(request).await.expect("AddGateway").into_inner()
    });
    let socket = added.gateway.expect("info").socket;
    let gateway = web::web_gateway(dir.path(), &socket, &added.token, web_port).expect("baaaht-web");
    let driver = Driver::start(dir.path()).expect("chromedriver");
    rt.block_on(async {
        let browser = driver.browser(1280).await.expect("browser");
        // Not signed in: the site sends the browser to the provider's sign-in form.
        browser.goto(&site).await.expect("open the site");
        let form = browser.wait().at_most(Duration::from_secs(30)).for_element(Locator::Css("input[name=login]")).await;
        let login = form.unwrap_or_else(|error| panic!("no sign-in form: {error}\n{}", gateway.log_text()));
        assert!(browser.current_url().await.expect("url").as_str().starts_with(&provider.issuer));
        login.send_keys("alice").await.expect("login");
        browser
            .find(Locator::Css("input[name=password]"))
            .await
            .expect("password")
            .send_keys("secret")
            .await
            .expect("type");
        browser.find(Locator::Css("button.login-submit")).await.expect("submit").click().await.expect("click");
        // Back on the site, signed in, named as the provider says.
        let who = browser.wait().at_most(Duration::from_secs(30)).for_element(Locator::Id("who")).await;
        let who =
            who.unwrap_or_else(|error| panic!("not signed in: {error}\n{}\n{}", gateway.log_text(), daemon.log_text()));
        assert_eq!(who.text().await.expect("text"), "Alice Admin");
        // The daemon met the user: the first sign-in made a canonical user for the identity.
        let identities =
            std::fs::read_to_string(daemon.data_dir.join("data/state/identities.json")).expect("identities");
        assert!(identities.contains(&format!("web:{}#alice", provider.issuer)), "{identities}");
        // A message: it appears, and the answer streams in below it.
        let input = browser.find(Locator::Id("input")).await.expect("the composer");
        input.send_keys("hello from the web\n").await.expect("type");
        let answered = until(Duration::from_secs(120), || async {
            match browser.find(Locator::Css(".assistant.done")).await {
                Ok(answer) => answer.text().await.is_ok_and(|text| text.contains("echo: hello from the web")),
                Err(_) => false,
            }
        })
        .await;
        let shown = browser.find(Locator::Id("log")).await.expect("log").text().await.unwrap_or_default();
        assert!(answered, "no answer: {shown}\n{}\n{}", gateway.log_text(), daemon.log_text());
        assert!(shown.starts_with("hello from the web"), "the user's message comes first: {shown}");
        let shot = browser.screenshot().await.expect("screenshot");
        std::fs::write(dir.path().join("chat.png"), &shot).expect("keep the screenshot");
        if let Ok(keep) = std::env::var("BAAAHT_SCREENSHOTS") {
            std::fs::create_dir_all(&keep).expect("screenshot folder");
            std::fs::write(std::path::Path::new(&keep).join("web-chat-desktop.png"), &shot).expect("screenshot");
        }
        // A forged or replayed sign-in answer is refused.
        browser.goto(&format!("{site}/auth/callback?code=x&state=forged")).await.expect("forged");
        let body = browser.find(Locator::Css("body")).await.expect("body").text().await.expect("text");
        assert!(body.contains("expired or was used already"), "{body}");
        // Signing out needs the page's CSRF token: the session's cookie alone is refused.
        let cookie = browser.get_named_cookie(web_cookie()).await.expect("the session cookie");
        assert_eq!(cookie.http_only(), Some(true));
        assert_eq!(cookie.same_site().map(|same_site| same_site.to_string()).as_deref(), Some("Lax"));
        let forged = std::process::Command::new("curl")
            .args(["-si", "-X", "POST", "-H", &format!("cookie: {}={}", cookie.name(), cookie.value())])
            .args(["--data", "csrf=guessed", &format!("{site}/logout")])
            .output()
            .expect("curl");
        let forged = String::from_utf8_lossy(&forged.stdout).to_string();
        assert!(forged.starts_with("HTTP/1.1 403"), "{forged}");
        // Then the page's own button signs out, at the provider too.
        browser.goto(&site).await.expect("home");
        browser.find(Locator::Css("button[type=submit]")).await.expect("sign out").click().await.expect("click");
        let confirm =
            browser.wait().at_most(Duration::from_secs(30)).for_element(Locator::Css("button[name=logout]")).await;
        confirm.expect("the provider asks to confirm").click().await.expect("confirm");
        let out = until(Duration::from_secs(30), || async {
            browser.current_url().await.is_ok_and(|url| url.as_str() == format!("{site}/signed-out"))
        })
        .await;
        assert!(out, "not back on the site signed out: {:?}", browser.current_url().await);
        browser.goto(&site).await.expect("home again");
        let again =
            browser.wait().at_most(Duration::from_secs(30)).for_element(Locator::Css("input[name=login]")).await;
        assert!(again.is_ok(), "the session is over: the site asks to sign in again");
        browser.close().await.expect("close");
    });
    // The session cookie's attributes, and the CSP on every answer.
    let answer =
        std::process::Command::new("curl").args(["-si", &format!("{site}/signed-out")]).output().expect("curl");
    let head = String::from_utf8_lossy(&answer.stdout).to_lowercase();
    assert!(head.contains("content-security-policy: default-src 'self'"), "{head}");
    assert!(head.contains("frame-ancestors 'none'"), "{head}");
}
