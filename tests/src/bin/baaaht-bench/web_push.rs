//! `baaaht-bench web`'s notifications: an approval asked (a Coder's connection waiting) → the
//! push delivered at the local push service (encrypted, VAPID-signed, checked and decrypted
//! there), beside the same approval reaching a host client that follows the same context, in
//! the same run. Both are timed from the moment the command starts, on this machine's clock
//! (the push service stamps what it takes); the moment a host client has the approval is when
//! it was asked, and what comes after it is the gateway's follower, the encryption and the push.

use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use baaaht_proto::v1;
use baaaht_tests::push::PushService;
use baaaht_tests::scenario;
use baaaht_tests::web::{self, Session};
use baaaht_tests::TestDaemon;
use serde_json::json;

use crate::Row;

/// The wall clock in seconds since 1970, as the push service stamps what it takes.
fn now() -> f64 {
    crate::web::wall_nanos() as f64 / 1e9
}

/// The person whose Coder asks: the web's "alice" is the self-test user the doctor's agents run for.
pub(crate) fn identities(issuer: &str) -> (String, String) {
    web::known_as(issuer, &[("alice", "baaaht-self-test", "Alice")])
}

/// `runs` approvals (after one to warm up), each answered "once" from the host: (asked, as a
/// host client has it → the push service has it; the command started → a host client has it;
/// the command started → the push service has it), in ms.
pub(crate) async fn measure(
    daemon: &TestDaemon,
    site: &str,
    address: std::net::SocketAddr,
    push: &PushService,
    gateway: &baaaht_tests::Running,
    bridge: (std::net::IpAddr, u16),
    runs: usize,
) -> Result<[Row; 3]> {
    let jar = tempfile::NamedTempFile::new()?;
    let alice: Session = web::signed_in(site, "alice", jar.path())?;
    let mut device = push.subscribe("alice-phone")?;
    device["label"] = json!("Phone");
    let (status, body) = web::request(address, "POST", "/api/push/devices", &alice, Some(device)).await?;
    if status != 200 {
        bail!("the device was refused: {status} {body}");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !gateway.log_text().contains("following a person for their notifications") {
        if std::time::Instant::now() > deadline {
            bail!("the gateway does not follow alice for her device:\n{}", gateway.log_text());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, sent) =
        web::request(address, "POST", "/api/messages", &alice, Some(json!({"content": "hello"}))).await?;
    if status != 200 {
        bail!("the message was refused: {status} {sent}");
    }
    let session = sent["session"].as_str().context("a session")?.to_string();
    let coder = tokio::task::block_in_place(|| daemon.lingering_agent("coder", Some(&session), &[]))?;
    let mut host = scenario::host_client(daemon).await?;
    let subscription = v1::EventSubscription {
        context: Some(scenario::user("baaaht-self-test")),
        channel: v1::ChannelType::Tui as i32,
        ..Default::default()
    };
    let mut events = host.sessions.subscribe_events(subscription).await?.into_inner();
    let mut rows = [
        Row::new("push: approval asked (a host client has it) → at the push service", "ms"),
        Row::new("baseline: command started → the approval at a host client", "ms"),
        Row::new("push: command started → the approval at the push service", "ms"),
    ];
    for run in 0..=runs {
        let pushed_before = push.shown("approval").len();
        let asked = now();
        let fetching = baaaht_tests::fetch_in_background(&coder, format!("{}:{}", bridge.0, bridge.1));
        let (id, to_host) = loop {
            let event = tokio::time::timeout(Duration::from_secs(60), events.message())
                .await
                .context("no approval asked within 60 s")??
                .context("the host's stream ended")?;
            if let Some(v1::orchestrator_event::Event::Approval(request)) = event.event {
                break (request.id, now() - asked);
            }
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let to_push = loop {
            let shown = push.shown("approval");
            if shown.len() > pushed_before {
                let (taken, _) = &shown[shown.len() - 1];
                break taken["at"].as_f64().context("when it was taken")? - asked;
            }
            if std::time::Instant::now() > deadline {
                bail!("approval {id} was not pushed:\n{}", gateway.log_text());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let answer = v1::ApprovalAnswer { id, decision: "once".into() };
        host.sessions.answer_approval(answer).await?;
        let fetched = tokio::task::spawn_blocking(move || fetching.join()).await?;
        if !fetched.map_err(|_panicked| anyhow::anyhow!("the fetch panicked"))?.contains("arrived") {
            bail!("the command did not go on after the answer");
        }
        if run > 0 {
            rows[0].values.push((to_push - to_host) * 1e3);
            rows[1].values.push(to_host * 1e3);
            rows[2].values.push(to_push * 1e3);
        }
    }
    drop(coder);
    Ok(rows)
}
