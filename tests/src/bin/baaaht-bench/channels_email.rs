//! `baaaht-bench channels`, its email part: the email gateway against real Dovecot and
//! Postfix on loopback and the real daemon. A mail cannot be edited, so its first visible
//! answer is the whole reply: the provider's last token (stamped with the time it was written)
//! → the reply delivered in the sender's mailbox (its file in the Maildir), beside the same last
//! token → the reply at a host client (`baaaht chat`'s path), in the same run; the mail
//! servers' own share is a plain delivery through Postfix to Dovecot, measured the same way.
//! Then messages answered per second with 20 people writing at once beside 20 host-client
//! messages, and the gateway's resident memory idle and after 50 people wrote.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use baaaht_proto::v1;
use baaaht_tests::fake_provider::{clock_nanos, stamp_of};
use baaaht_tests::mail::{compose, MailServers};
use baaaht_tests::scenario;

use crate::channels::{host_round, PEOPLE, SENDERS};
use crate::{header, rss_mib, Row};

const ASSISTANT: (&str, &str) = ("assistant@home.test", "bench-pw");

fn sender(person: i64) -> String {
    format!("p{person}@family.test")
}

/// The latest stamp in `text` (a quoted-printable body's soft breaks taken out first).
fn last_stamp(text: &str) -> Option<u64> {
    text.replace("=\r\n", "").split_whitespace().filter_map(stamp_of).max()
}

/// The mails in `folder` (none when it is not made yet).
fn files(folder: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(folder).into_iter().flatten().flatten().map(|entry| entry.path()).collect()
}

/// Waits (polling every millisecond) for a mail in `folder` beyond the `before` there were:
/// its text and when it was seen.
fn next_mail(folder: &Path, before: usize, limit: Duration) -> Result<(String, u64)> {
    let deadline = Instant::now() + limit;
    loop {
        let found = files(folder);
        if found.len() > before {
            let seen = clock_nanos();
            let newest =
                found.iter().max_by_key(|path| path.metadata().and_then(|m| m.modified()).ok()).context("a mail")?;
            return Ok((std::fs::read_to_string(newest)?, seen));
        }
        if Instant::now() > deadline {
            bail!("no mail in {} within {limit:?}", folder.display());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What the mail servers do for a round without the gateway: `SENDERS` mails in (delivered),
/// then `SENDERS` answers submitted at once with TLS and a sign-in (delivered).
fn servers_round(servers: &MailServers, round: usize) -> Result<()> {
    let mut waiting = vec![];
    for n in 0..SENDERS {
        let (from, to) = (sender(n + 1), format!("x{n}@elsewhere.test"));
        let folder = servers.new_mail_folder(&to);
        waiting.push((files(&folder).len(), folder));
        servers.send(&from, &to, &compose(&from, &to, "Hi", &format!("s{round}-{n}@family.test"), &[], "hi"))?;
    }
    for (before, folder) in &waiting {
        next_mail(folder, *before, Duration::from_secs(300))?;
    }
    let folders: Vec<(usize, std::path::PathBuf)> = (0..SENDERS)
        .map(|n| {
            let folder = servers.new_mail_folder(&format!("y{n}@elsewhere.test"));
            (files(&folder).len(), folder)
        })
        .collect();
    std::thread::scope(|scope| {
        let sent: Vec<_> = (0..SENDERS)
            .map(|n| {
                scope.spawn(move || {
                    let (from, to) = (format!("x{n}@elsewhere.test"), format!("y{n}@elsewhere.test"));
                    let answer = compose(&from, &to, "Re: Hi", &format!("t{round}-{n}@elsewhere.test"), &[], "answer");
                    servers.submit(&from, "pw", &to, &answer)
                })
            })
            .collect();
        sent.into_iter().try_for_each(|sent| sent.join().map_err(|_panic| anyhow::anyhow!("a sender panicked"))?)
    })?;
    for (before, folder) in &folders {
        next_mail(folder, *before, Duration::from_secs(300))?;
    }
    Ok(())
}

/// The CLI's path: `count` from a host client, the provider's last token → the reply there.
async fn cli_last_token(host: &mut baaaht_proto::client::Client) -> Result<f64> {
    let message = scenario::message(scenario::user("cli-bench"), "cli-bench", "count");
    let subscription = v1::EventSubscription {
        context: message.context.clone(),
        session_id: String::new(),
        channel: 0,
        notifies: false,
    };
    let mut events = host.sessions.subscribe_events(subscription).await?.into_inner();
    let sent = host.sessions.send_user_message(message).await?.into_inner();
    while let Some(event) =
        tokio::time::timeout(Duration::from_secs(60), events.message()).await.context("timeout")??
    {
        if event.turn_id != sent.turn_id {
            continue;
        }
        if let Some(v1::orchestrator_event::Event::Reply(reply)) = event.event {
            let seen = clock_nanos();
            let stamp = last_stamp(&reply.content).context("a stamp in the reply")?;
            return Ok(seen.saturating_sub(stamp) as f64 / 1e6);
        }
    }
    bail!("no reply")
}

/// The email part: its table, and its RESULT fields.
pub(crate) fn run(runs: usize, rounds: usize) -> Result<String> {
    let rt = baaaht_tests::runtime();
    let mut users: Vec<(String, String)> = vec![(ASSISTANT.0.into(), ASSISTANT.1.into())];
    users.extend((0..PEOPLE).map(|person| (sender(person), "pw".to_string())));
    users.push(("relay@elsewhere.test".into(), "pw".into()));
    // The servers' own round: mail in to x{n}, answers out from x{n} to y{n}.
    users.extend(
        (0..SENDERS).flat_map(|n| {
            [(format!("x{n}@elsewhere.test"), "pw".into()), (format!("y{n}@elsewhere.test"), "pw".into())]
        }),
    );
    let borrowed: Vec<(&str, &str)> = users.iter().map(|(user, password)| (user.as_str(), password.as_str())).collect();
    let servers = MailServers::start(&borrowed)?;
    let options = baaaht_tests::DaemonOptions {
        env: vec![
            ("EMAIL_PASSWORD_HOME".into(), ASSISTANT.1.into()),
            ("BAAAHT__CONTAINER__MAX_CONCURRENT".into(), "160".into()),
        ],
        ..Default::default()
    };
    let (_provider, daemon) = scenario::start(&rt, crate::channels::brain(), options)?;
    let state = daemon.data_dir.join("email-state");
    let args = [
        "--address".to_string(),
        ASSISTANT.0.into(),
        "--imap".into(),
        format!("127.0.0.1:{}", servers.imaps),
        "--imap-tls".into(),
        "implicit".into(),
        "--smtp".into(),
        format!("127.0.0.1:{}", servers.submissions),
        "--smtp-tls".into(),
        "implicit".into(),
        "--ca-file".into(),
        servers.ca.display().to_string(),
        "--allow".into(),
        "@family.test".into(),
        "--state-dir".into(),
        state.display().to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let request = v1::AddGatewayRequest {
        kind: "email".into(),
        name: "home".into(),
        address: ASSISTANT.0.into(),
        ..Default::default()
    };
    let (gateway, _) = baaaht_tests::gateway::run_external(&rt, &daemon, request, "baaaht-email", &args);
    let mut rows = [
        Row::new("email: provider's last token → the reply in the sender's mailbox", "ms"),
        Row::new("baseline: the same last token → the reply at a host client (CLI path)", "ms"),
        Row::new("the mail servers alone: SMTP handed → delivered in a mailbox", "ms"),
        Row::new(format!("email: {SENDERS} people writing at once, answered per second"), "msgs/s"),
        Row::new(format!("baseline: the same {SENDERS} contexts, host client messages per second"), "msgs/s"),
        Row::new(
            format!("the mail servers alone: {SENDERS} mails in, {SENDERS} answers out (TLS, sign-in), per second"),
            "msgs/s",
        ),
    ];
    // Signed in and watching before anything is timed.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !gateway.log_text().contains("watching the mailbox") {
        if Instant::now() > deadline {
            bail!("the gateway does not watch the mailbox: {}", gateway.log_text());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let idle = rss_mib(gateway.id())?;
    let alice = sender(0);
    let inbox = servers.new_mail_folder(&alice);
    let relay = servers.new_mail_folder("relay@elsewhere.test");
    rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await?;
        for run in 0..runs {
            let before = files(&inbox).len();
            let mail = compose(&alice, ASSISTANT.0, "Count", &format!("c{run}@family.test"), &[], "count");
            servers.send(&alice, ASSISTANT.0, &mail)?;
            let (reply, seen) = next_mail(&inbox, before, Duration::from_secs(60))?;
            let stamp = last_stamp(&reply).context("a stamp in the reply mail")?;
            rows[0].values.push(seen.saturating_sub(stamp) as f64 / 1e6);
            rows[1].values.push(cli_last_token(&mut host).await?);
            // The servers' own share: a mail to a mailbox no gateway reads.
            let before = files(&relay).len();
            let plain = compose(&alice, "relay@elsewhere.test", "Plain", &format!("d{run}@family.test"), &[], "x");
            let handed = clock_nanos();
            servers.send(&alice, "relay@elsewhere.test", &plain)?;
            let (_, seen) = next_mail(&relay, before, Duration::from_secs(60))?;
            rows[2].values.push(seen.saturating_sub(handed) as f64 / 1e6);
        }
        for round in 0..=rounds {
            let started = Instant::now();
            let mut waiting = vec![];
            for person in 1..=SENDERS {
                let from = sender(person);
                let folder = servers.new_mail_folder(&from);
                waiting.push((files(&folder).len(), folder));
                // Each person goes on in their thread (a new thread is a new conversation).
                let previous = format!("<r{}-{person}@family.test>", round.saturating_sub(1));
                let headers: &[(&str, &str)] = if round == 0 { &[] } else { &[("In-Reply-To", previous.as_str())] };
                let id = format!("r{round}-{person}@family.test");
                let mail = compose(&from, ASSISTANT.0, "Hi", &id, headers, &format!("hi {round}"));
                servers.send(&from, ASSISTANT.0, &mail)?;
            }
            for (before, folder) in &waiting {
                next_mail(folder, *before, Duration::from_secs(300))?;
            }
            if round > 0 {
                rows[3].values.push(SENDERS as f64 / started.elapsed().as_secs_f64());
            }
            let (count, started) = host_round(&daemon, round).await?;
            if round > 0 {
                rows[4].values.push(count as f64 / started.elapsed().as_secs_f64());
            }
            // The servers alone: the same mails in, then the answers out at once, no gateway.
            let started = Instant::now();
            servers_round(&servers, round)?;
            if round > 0 {
                rows[5].values.push(SENDERS as f64 / started.elapsed().as_secs_f64());
            }
        }
        // The rest write once: 50 have written when the memory is read.
        let mut waiting = vec![];
        for person in SENDERS + 1..PEOPLE {
            let from = sender(person);
            let folder = servers.new_mail_folder(&from);
            waiting.push((files(&folder).len(), folder));
            servers.send(
                &from,
                ASSISTANT.0,
                &compose(&from, ASSISTANT.0, "Hello", &format!("h{person}@family.test"), &[], "hello"),
            )?;
        }
        for (before, folder) in &waiting {
            next_mail(folder, *before, Duration::from_secs(300))?;
        }
        anyhow::Ok(())
    })?;
    let busy = rss_mib(gateway.id())?;
    println!(
        "\nbaaaht-email: {runs} mails answered with a paced 20-token answer (its last token → the reply delivered) beside \
         the CLI's path and a plain delivery, and {rounds} rounds of {SENDERS} people writing at once beside {SENDERS} \
         host-client messages (Dovecot and Postfix on loopback)\n"
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().map(Row::print).collect();
    // What the person waits beyond the CLI's path: the gateway and the mail servers' delivery.
    let added = p50[0] - p50[1];
    println!("{:<72} {:>10.2}  MiB", "baaaht-email resident memory, idle", idle);
    println!("{:<72} {:>10.2}  MiB", format!("baaaht-email resident memory, {PEOPLE} people have written"), busy);
    println!(
        "\nthe whole answer in the sender's mailbox: {added:+.2} ms p50 over the CLI's path, the servers' own delivery \
         ({:.2} ms) included (target ≤ +50); throughput {:.2}× the host client's (target ≥ 0.5); memory {busy:.1} MiB \
         with {PEOPLE} people (target ≤ 30); {:.2}× the mail servers' own round",
        p50[2],
        p50[3] / p50[4],
        p50[3] / p50[5]
    );
    Ok(format!(
        "email_reply_delivered_p50_ms={:.2} cli_reply_p50_ms={:.2} mail_servers_p50_ms={:.2} email_added_p50_ms={added:.2} \
         email_msgs_per_s={:.2} email_host_msgs_per_s={:.2} email_throughput_vs_host={:.2} email_rss_idle_mib={idle:.1} \
         email_rss_{PEOPLE}_people_mib={busy:.1} mail_servers_msgs_per_s={:.2} email_throughput_vs_servers={:.2}",
        p50[0],
        p50[1],
        p50[2],
        p50[3],
        p50[4],
        p50[3] / p50[4],
        p50[5],
        p50[3] / p50[5]
    ))
}
