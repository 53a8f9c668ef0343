//! `baaaht-bench web`: the web gateway (the real `baaaht-web`, signed in through the real OIDC
//! provider's own form) with the real daemon. Time to the first words in a browser's event
//! stream — the fake provider's first token (stamped with the time it was written) → the same
//! token arriving on `/api/events` (SSE, read as a browser reads it) — beside the same token
//! reaching a host client (the CLI's path) in the same run; the same first token painted in a
//! real browser (headless Chromium on the page, timed there with the Performance API) beside
//! the same turn's token on the gateway's event stream; messages per second with 50 users
//! signed in and following their streams, beside the same 50 messages from a host client; the
//! gateway's resident memory idle and with the 50 users; and an approval pushed to a device
//! ([`crate::web_push`]).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use baaaht_proto::v1;
use baaaht_tests::fake_provider::{
    anthropic_answer, clock_nanos, stamped_token_stream, Answer, Asked, Responder, Wire,
};
use baaaht_tests::push::PushService;
use baaaht_tests::scenario::{self, last_user_text};
use baaaht_tests::web::{self, Provider, CLIENT_ID, CLIENT_SECRET};
use baaaht_tests::DaemonOptions;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::{cli_first_token, first_stamp, header, rss_mib, Row};

/// Users signed in for the throughput rounds.
const USERS: usize = 50;

/// Stamped tokens when asked to `count`, else a short echo.
fn brain() -> Answer {
    Answer::Respond(Responder(std::sync::Arc::new(|request| {
        let asked = Asked::of(request);
        let said = last_user_text(&asked);
        if said.ends_with("count") {
            stamped_token_stream(Wire::Anthropic, 20, Duration::from_millis(10))
        } else {
            anthropic_answer(&format!("echo: {said}"), &[])
        }
    })))
}

/// The wall clock in nanoseconds since 1970, as the browser's Performance API counts it
/// (`performance.timeOrigin + performance.now()`, in milliseconds).
pub(crate) fn wall_nanos() -> i128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_nanos() as i128)
}

/// One turn asked in the browser: (first token painted, first token in the page's DOM, the
/// same token on the gateway's stream), each in ms after the provider wrote it.
async fn browser_turn(
    page: &fantoccini::Client,
    stream: &mut mpsc::UnboundedReceiver<(u64, Value)>,
    offset: i128,
) -> Result<(f64, f64, f64)> {
    page.execute("performance.clearMarks()", vec![]).await?;
    web::say(page, "count").await;
    let mut turn = String::new();
    let mut sse = None;
    loop {
        let (arrived, event) =
            tokio::time::timeout(Duration::from_secs(60), stream.recv()).await?.context("the stream ended")?;
        match event["type"].as_str() {
            Some("user") if event["mine"] == true => turn = event["turn"].as_str().unwrap_or_default().to_string(),
            Some("delta") if event["turn"] == turn.as_str() && sse.is_none() => {
                sse = first_stamp(event["text"].as_str().unwrap_or_default()).map(|stamp| (stamp, arrived - stamp));
            }
            Some("reply") | Some("error") if event["turn"] == turn.as_str() => break,
            _ => {}
        }
    }
    let (stamp, sse) = sse.context("no first token on the stream")?;
    // The marks the page made (conversation.js `markFirst`), in wall-clock milliseconds.
    let deadline = Instant::now() + Duration::from_secs(10);
    let marks = loop {
        let marks = page
            .execute(
                "const at = (name) => performance.getEntriesByName(name).map((m) => [performance.timeOrigin + m.startTime, m.detail.text]);
                 return [at('first-token'), at('first-token-painted')];",
                vec![],
            )
            .await?;
        if marks[1].as_array().is_some_and(|painted| !painted.is_empty()) {
            break marks;
        }
        if Instant::now() > deadline {
            bail!("the page marked no first token: {marks}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let written = i128::from(stamp) + offset;
    let after = |mark: &Value| -> Result<f64> {
        let text = mark[1].as_str().unwrap_or_default();
        if first_stamp(text) != Some(stamp) {
            bail!("the page's first token {text:?} is not the stream's (@{stamp})");
        }
        let at = mark[0].as_f64().context("a mark's time")?;
        Ok(((at * 1e6) as i128 - written) as f64 / 1e6)
    };
    Ok((after(&marks[1][0])?, after(&marks[0][0])?, sse as f64 / 1e6))
}

pub(crate) fn run(runs: usize, rounds: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let dir = tempfile::tempdir()?;
    let port = web::free_port()?;
    let site = format!("http://127.0.0.1:{port}");
    let address: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let provider = Provider::start(dir.path(), &format!("{site}/auth/callback"), &format!("{site}/signed-out"), 3600)?;
    // Notifications go to a local push service; the approvals they tell of, to a bridge server.
    let push = PushService::start(dir.path())?;
    let bridge = baaaht_tests::bridge_server();
    // 50 users are 50 contexts, each with its Assistant and a pre-warmed tool container.
    let allow = format!("[\"127.0.0.1:{}\", \"{}:{}\"]", provider.port, bridge.0, bridge.1);
    let options = DaemonOptions {
        env: vec![
            ("BAAAHT__TOOLS__WEB_PROXY__ALLOW".into(), allow),
            ("WEB_CLIENT_SECRET_HOME".into(), CLIENT_SECRET.into()),
            ("BAAAHT__CONTAINER__MAX_CONCURRENT".into(), "160".into()),
        ],
        files: vec![crate::web_push::identities(&provider.issuer)],
        ..DaemonOptions::default()
    };
    let (_fake, daemon) = scenario::start(&rt, brain(), options)?;
    let added = rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await?;
        let request = v1::AddGatewayRequest {
            kind: "web".into(),
            name: "home".into(),
            issuer: provider.issuer.clone(),
            audience: CLIENT_ID.into(),
            mode: "external".into(),
            ..Default::default()
        };
        anyhow::Ok(host.admin.add_gateway(request).await?.into_inner())
    })?;
    let socket = added.gateway.context("gateway info")?.socket;
    let ca = push.ca.display().to_string();
    let push_args = ["--push-service", &push.origin, "--ca-file", &ca, "--push-subject", "mailto:ops@example.org"];
    let gateway = web::web_gateway(dir.path(), &socket, &added.token, port, &push_args)?;
    let idle_rss = rss_mib(gateway.id())?;
    let mut users = Vec::with_capacity(USERS);
    for n in 0..USERS {
        let jar = dir.path().join(format!("jar-{n}"));
        let browser = web::signed_in(&site, &format!("user{n}"), &jar)
            .with_context(|| format!("signing in user{n}: {}", gateway.log_text()))?;
        let me = rt.block_on(web::request(address, "GET", "/api/me", &browser, None))?;
        let id = me.1["id"].as_str().context("an id")?.to_string();
        users.push((browser, id));
    }
    let mut rows = [
        Row {
            name: "web: provider's first token → the same token on /api/events (SSE)".into(),
            unit: "ms",
            values: vec![],
        },
        Row { name: "baseline: the same first token → a host client (CLI path)".into(), unit: "ms", values: vec![] },
        Row { name: "browser: provider's first token → painted in Chromium".into(), unit: "ms", values: vec![] },
        Row { name: "browser: provider's first token → in the page (DOM)".into(), unit: "ms", values: vec![] },
        Row { name: "gateway: the same turn's first token on /api/events".into(), unit: "ms", values: vec![] },
        Row { name: "browser painted − gateway's event, same turn".into(), unit: "ms", values: vec![] },
        Row {
            name: format!("web: {USERS} signed-in users, messages answered per second"),
            unit: "msgs/s",
            values: vec![],
        },
        Row {
            name: format!("baseline: the same {USERS} contexts, host client messages per second"),
            unit: "msgs/s",
            values: vec![],
        },
    ];
    let busy_rss = rt.block_on(async {
        let mut streams = Vec::with_capacity(USERS);
        for user in &users {
            streams.push(web::events(address, &user.0).await?);
        }
        let mut host = scenario::host_client(&daemon).await?;
        for _ in 0..runs {
            let (status, sent) = web::request(
                address,
                "POST",
                "/api/messages",
                &users[0].0,
                Some(serde_json::json!({"content": "count"})),
            )
            .await?;
            if status != 200 {
                bail!("the message was refused: {status} {sent}");
            }
            let turn = sent["turn"].as_str().context("a turn")?.to_string();
            let mut first = None;
            loop {
                let (arrived, event) = tokio::time::timeout(Duration::from_secs(60), streams[0].recv())
                    .await?
                    .context("the stream ended")?;
                if event["turn"] != turn.as_str() {
                    continue;
                }
                match event["type"].as_str() {
                    Some("delta") if first.is_none() => {
                        first = first_stamp(event["text"].as_str().unwrap_or_default())
                            .map(|stamp| arrived.saturating_sub(stamp));
                    }
                    Some("reply") | Some("error") => break,
                    _ => {}
                }
            }
            rows[0].values.push(first.context("no first token")? as f64 / 1e6);
            // The CLI's path: the same stream to a host client.
            rows[1].values.push(cli_first_token(&mut host).await?);
        }
        // A real browser: Chromium signed in on the page, its first token timed by the page.
        let driver = web::Driver::start(dir.path())?;
        let page = driver.browser(1280).await?;
        web::sign_in(&page, &site, "viewer").await?;
        let session = web::Session::of(&page).await?;
        let mut viewer_stream = web::events(address, &session).await?;
        let offset = wall_nanos() - i128::from(clock_nanos());
        // A first turn warms the viewer's Assistant and page.
        browser_turn(&page, &mut viewer_stream, offset).await?;
        for _ in 0..runs {
            let (painted, dom, sse) = browser_turn(&page, &mut viewer_stream, offset).await?;
            rows[2].values.push(painted);
            rows[3].values.push(dom);
            rows[4].values.push(sse);
            rows[5].values.push(painted - sse);
        }
        page.close().await?;
        drop(driver);
        // Throughput: a warm-up round makes each user's Assistant, then timed rounds.
        for round in 0..=rounds {
            let started = Instant::now();
            let mut posts = tokio::task::JoinSet::new();
            for user in &users {
                let browser = web::Session { cookie: user.0.cookie.clone(), csrf: user.0.csrf.clone() };
                let content = serde_json::json!({"content": format!("hi {round}")});
                posts.spawn(
                    async move { web::request(address, "POST", "/api/messages", &browser, Some(content)).await },
                );
            }
            while let Some(posted) = posts.join_next().await {
                let (status, body) = posted??;
                if status != 200 {
                    bail!("a message was refused: {status} {body}");
                }
            }
            for stream in &mut streams {
                loop {
                    let (_, event) = tokio::time::timeout(Duration::from_secs(300), stream.recv())
                        .await
                        .with_context(|| format!("round {round}: no answer\n{}", gateway.log_text()))?
                        .context("a stream ended")?;
                    if event["type"] == "reply"
                        && event["text"].as_str().is_some_and(|text| text.ends_with(&format!("hi {round}")))
                    {
                        break;
                    }
                }
            }
            if round > 0 {
                rows[6].values.push(USERS as f64 / started.elapsed().as_secs_f64());
            }
            // The same 50 messages into the same 50 contexts from host clients, each connected
            // and following its context before the clock starts (as the browsers are).
            let mut followers = Vec::with_capacity(USERS);
            for user in &users {
                let mut client = scenario::host_client(&daemon).await?;
                let context = scenario::user(&user.1);
                let subscription = v1::EventSubscription {
                    context: Some(context.clone()),
                    session_id: String::new(),
                    channel: 0,
                    notifies: false,
                };
                let events = client.sessions.subscribe_events(subscription).await?.into_inner();
                followers.push((client, events, scenario::message(context, &user.1, &format!("host {round}"))));
            }
            let started = Instant::now();
            let mut turns = tokio::task::JoinSet::new();
            for (mut client, mut events, message) in followers {
                turns.spawn(async move {
                    let sent = client.sessions.send_user_message(message).await?.into_inner();
                    while let Some(event) =
                        tokio::time::timeout(Duration::from_secs(300), events.message()).await.context("timeout")??
                    {
                        if event.turn_id == sent.turn_id
                            && matches!(
                                event.event,
                                Some(v1::orchestrator_event::Event::Reply(_))
                                    | Some(v1::orchestrator_event::Event::Error(_))
                            )
                        {
                            return anyhow::Ok(());
                        }
                    }
                    bail!("the event stream ended before the answer")
                });
            }
            while let Some(turn) = turns.join_next().await {
                turn??;
            }
            if round > 0 {
                rows[7].values.push(USERS as f64 / started.elapsed().as_secs_f64());
            }
        }
        let busy = rss_mib(gateway.id())?;
        drop(streams);
        let pushed = crate::web_push::measure(&daemon, &site, address, &push, &gateway, bridge, runs).await?;
        anyhow::Ok((busy, pushed))
    })?;
    let (busy_rss, mut pushed) = busy_rss;
    println!(
        "baaaht-web: {runs} messages with a paced 20-token answer (first token → the browser's event stream) beside the CLI's \
         path, {runs} more typed in Chromium (painted, in the page, on the event stream), and {rounds} rounds of {USERS} signed-in users writing at once beside {USERS} host-client messages\n"
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().map(Row::print).collect();
    let added = p50[0] - p50[1];
    let push_p50: Vec<f64> = pushed.iter_mut().map(Row::print).collect();
    println!("{:<72} {:>10.2}  MiB", "baaaht-web resident memory, idle", idle_rss);
    println!("{:<72} {:>10.2}  MiB", format!("baaaht-web resident memory, {USERS} users following"), busy_rss);
    println!(
        "\nfirst words in the browser's event stream: {added:+.2} ms p50 over the CLI's path; painted in Chromium \
         {:+.2} ms p50 after the gateway's event (target ≤ 5 ms); throughput {:.2}× the host client's; an approval \
         at the push service {:.2} ms p50 after it was asked (target ≤ 50 ms): {:.2}× the command's own wait for it",
        p50[5],
        p50[6] / p50[7],
        push_p50[0],
        push_p50[2] / push_p50[1]
    );
    println!(
        "RESULT web_first_token_p50_ms={:.2} cli_first_token_p50_ms={:.2} added_p50_ms={added:.2} \
         browser_painted_p50_ms={:.2} browser_dom_p50_ms={:.2} browser_after_event_p50_ms={:.2} web_msgs_per_s={:.2} \
         host_msgs_per_s={:.2} throughput_vs_host={:.2} rss_idle_mib={idle_rss:.1} rss_{USERS}_users_mib={busy_rss:.1} \
         approval_to_push_p50_ms={:.2} command_to_host_p50_ms={:.2} command_to_push_p50_ms={:.2}",
        p50[0],
        p50[1],
        p50[2],
        p50[3],
        p50[5],
        p50[6],
        p50[7],
        p50[6] / p50[7],
        push_p50[0],
        push_p50[1],
        push_p50[2]
    );
    Ok(())
}
