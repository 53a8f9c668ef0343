//! `baaaht-bench abuse`: the daemon's resident memory under a hostile gateway user and after
//! it. Rounds of what the limits refuse (event subscriptions opened and dropped, uploads cut
//! off mid-way, connections that never authenticate, calls naming identities outside the
//! gateway's namespace, sessions past the rate limit) for `seconds`; the daemon's RSS after one
//! round (the baseline: what the paths allocate once), at the end, and after a quiet spell.

use std::time::{Duration, Instant};

use anyhow::Result;
use baaaht_proto::client::{self, Client, ConnectOptions};
use baaaht_proto::v1;
use baaaht_tests::gateway::{as_user, connect, slack_gateway};
use baaaht_tests::{DaemonOptions, TestDaemon};

/// One round of abuse by `eve` (whose context is `own`) through `client` on `socket`.
async fn round(client: &mut Client, socket: &std::path::Path, own: &v1::ContextRef, eve: &str) -> Result<usize> {
    let mut calls = 0;
    let mut held = vec![];
    for _ in 0..17 {
        let subscription = v1::EventSubscription { context: Some(own.clone()), ..Default::default() };
        held.push(client.sessions.subscribe_events(as_user(eve, None, subscription)).await);
        calls += 1;
    }
    drop(held);
    for n in 0..5 {
        let (sender, receiver) = tokio::sync::mpsc::channel(4);
        let start = v1::UploadStart { context: Some(own.clone()), filename: format!("f{n}.bin"), ..Default::default() };
        sender.send(v1::UploadChunk { part: Some(v1::upload_chunk::Part::Start(start)) }).await?;
        sender.send(v1::UploadChunk { part: Some(v1::upload_chunk::Part::Data(vec![7; 512 << 10])) }).await?;
        let mut uploading = client.clone();
        let request = as_user(eve, None, tokio_stream::wrappers::ReceiverStream::new(receiver));
        let upload = tokio::spawn(async move { uploading.sessions.upload_file(request).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        upload.abort();
        drop(sender);
        calls += 1;
    }
    let idle: Vec<std::os::unix::net::UnixStream> =
        (0..50).filter_map(|_| std::os::unix::net::UnixStream::connect(socket).ok()).collect();
    for mut stream in &idle {
        // silent-ok: the daemon may have closed it already.
        let _ = std::io::Write::write_all(&mut stream, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n garbage");
    }
    drop(idle);
    calls += 50;
    for n in 0..100 {
        // silent-ok: refused, as it should be.
        let _ =
            client.gateways.who_am_i(as_user(&format!("web:https://elsewhere#{n}"), None, v1::WhoAmIRequest {})).await;
        calls += 1;
    }
    for _ in 0..12 {
        let request = v1::NewSessionRequest { context: Some(own.clone()), title: "x".repeat(4096) };
        // silent-ok: past ten a minute they are refused.
        let _ = client.sessions.new_session(as_user(eve, None, request)).await;
        calls += 1;
    }
    Ok(calls)
}

pub(crate) fn run(seconds: u64) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let daemon = TestDaemon::start(DaemonOptions::default())?;
    let rss = || daemon.rss_kib().map(|kib| kib as f64 / 1024.0);
    let idle = rss()?;
    let (base, end, rounds, calls) = rt.block_on(async {
        let mut host = client::connect(&daemon.socket(), ConnectOptions::default()).await?;
        let acme = slack_gateway(&mut host, "acme", "T1").await;
        let mut client = connect(&acme).await;
        let eve = "slack:T1:UEVE";
        let own = v1::ContextRef {
            r#type: v1::ContextType::User as i32,
            id: client.gateways.who_am_i(as_user(eve, None, v1::WhoAmIRequest {})).await?.into_inner().id,
        };
        let mut calls = round(&mut client, &acme.socket, &own, eve).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let base = rss()?;
        let started = Instant::now();
        let mut rounds = 1;
        while started.elapsed() < Duration::from_secs(seconds) {
            calls += round(&mut client, &acme.socket, &own, eve).await?;
            rounds += 1;
        }
        anyhow::Ok((base, rss()?, rounds, calls))
    })?;
    // Unauthenticated connections are closed after their 10 s probation.
    std::thread::sleep(Duration::from_secs(15));
    let quiet = rss()?;
    println!(
        "baaaht-bench abuse: {rounds} rounds ({calls} calls) of refused work by one gateway user in {seconds} s; \
         the daemon's resident memory\n"
    );
    println!("{:<56} {:>10}", "measurement", "RSS MiB");
    for (name, value) in [
        ("idle, before", idle),
        ("after one round (baseline)", base),
        ("after the last round", end),
        ("15 s after it", quiet),
    ] {
        println!("{name:<56} {value:>10.1}");
    }
    println!("\nafter the abuse the daemon holds {:.2}× its baseline", quiet / base);
    println!(
        "RESULT idle_mib={idle:.1} baseline_mib={base:.1} end_mib={end:.1} quiet_mib={quiet:.1} growth={:.2} rounds={rounds}",
        quiet / base
    );
    Ok(())
}
