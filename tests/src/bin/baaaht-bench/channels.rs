//! `baaaht-bench channels`: the chat gateways on the gateway kit against their fake or real
//! services and the real daemon (Telegram here; email in `channels_email.rs`, Matrix in
//! `channels_matrix.rs`). Per gateway: the
//! first visible answer update — the provider's first token (stamped with the time it was
//! written) → the first edit showing it — beside the same first token reaching a host client
//! (`baaaht chat`'s path) in the same run; messages answered per second with 20 people writing
//! at once, beside the same 20 messages from host clients; and the gateway's resident memory
//! idle and after 50 people wrote.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use baaaht_tests::fake_provider::{anthropic_answer, stamped_token_stream, Answer, Asked, Responder, Wire};
use baaaht_tests::fake_telegram::{gateway_for, telegram_options, FakeTelegram};
use baaaht_tests::scenario::{self, last_user_text};

use crate::{cli_first_token, first_stamp, header, rss_mib, Row};

/// Senders writing at once in the throughput rounds.
pub(crate) const SENDERS: i64 = 20;
/// People who have written when the busy memory is read.
pub(crate) const PEOPLE: i64 = 50;

/// Stamped tokens when asked to `count`, else a short echo.
pub(crate) fn brain() -> Answer {
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

/// Whether every one of `chats`' latest message from the bot reads `text`.
fn all_answered(fake: &FakeTelegram, chats: &[(i64, i64)], text: &str) -> bool {
    chats.iter().all(|(chat, asked)| {
        fake.replies_to(*chat, *asked).first().and_then(|reply| fake.text_of(*chat, *reply)).is_some_and(|t| t == text)
    })
}

/// `SENDERS` messages at once from host clients into the contexts of the first people the
/// daemon met (a channel round's baseline): how many, and when they were sent.
pub(crate) async fn host_round(daemon: &baaaht_tests::TestDaemon, round: usize) -> Result<(usize, Instant)> {
    let known: String = ["identities.json", "identities.journal"]
        .iter()
        .filter_map(|name| std::fs::read_to_string(daemon.data_dir.join("data/state").join(name)).ok())
        .collect();
    let users: Vec<String> = known
        .split('"')
        .filter(|part| part.starts_with("u-"))
        .map(str::to_string)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .take(SENDERS as usize)
        .collect();
    let started = Instant::now();
    let mut turns = tokio::task::JoinSet::new();
    for user in users {
        let mut client = scenario::host_client(daemon).await?;
        let message = scenario::message(scenario::user(&user), &user, &format!("host {round}"));
        turns.spawn(async move { scenario::turn(&mut client, message, Duration::from_secs(300)).await });
    }
    let count = turns.len();
    while let Some(turn) = turns.join_next().await {
        turn??;
    }
    Ok((count, started))
}

pub(crate) fn run(runs: usize, rounds: usize, only: Option<&str>) -> Result<()> {
    let mut results = vec![];
    if only.is_none_or(|only| only == "telegram") {
        results.push(telegram(runs, rounds)?);
    }
    if only.is_none_or(|only| only == "email") {
        results.push(crate::channels_email::run(runs, rounds)?);
    }
    if only.is_none_or(|only| only == "matrix") {
        results.push(crate::channels_matrix::run(runs, rounds)?);
    }
    println!("RESULT {}", results.join(" "));
    Ok(())
}

/// The Telegram part: its table, and its RESULT fields.
fn telegram(runs: usize, rounds: usize) -> Result<String> {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeTelegram::start())?;
    // 50 people are 50 contexts, each with its Assistant (and a pre-warmed tool container).
    let mut options = telegram_options();
    options.env.push(("BAAAHT__CONTAINER__MAX_CONCURRENT".into(), "160".into()));
    let (_provider, daemon) = scenario::start(&rt, brain(), options)?;
    let gateway = gateway_for(&rt, &daemon, &fake);
    let mut rows = [
        Row::new("Telegram: provider's first token → first edit showing it", "ms"),
        Row::new("baseline: the same first token → a host client (CLI path)", "ms"),
        Row::new(format!("Telegram: {SENDERS} people writing at once, answered per second"), "msgs/s"),
        Row::new(format!("baseline: the same {SENDERS} contexts, host client messages per second"), "msgs/s"),
    ];
    let (idle, busy) = rt.block_on(async {
        if !fake.wait_for(Duration::from_secs(60), |fake| !fake.calls_of("getUpdates").is_empty()).await {
            bail!("the gateway does not poll: {}", gateway.log_text());
        }
        let idle = rss_mib(gateway.id())?;
        let mut host = scenario::host_client(&daemon).await?;
        for _ in 0..runs {
            let update = fake.message(1, "private", 1, "Bench", "count");
            let asked = update["message"]["message_id"].as_i64().context("an id")?;
            let before = fake.calls().len();
            fake.push(update);
            let shown = |fake: &FakeTelegram| {
                fake.calls()[before..]
                    .iter()
                    .find(|call| {
                        call.method == "editMessageText"
                            && !call.limited
                            && call.params["text"].as_str().is_some_and(|text| text.contains('@'))
                    })
                    .cloned()
            };
            if !fake.wait_for(Duration::from_secs(60), |fake| shown(fake).is_some()).await {
                bail!("no streamed edit: {}", gateway.log_text());
            }
            let edit = shown(&fake).context("the edit")?;
            let stamp = first_stamp(edit.params["text"].as_str().unwrap_or_default()).context("a stamp")?;
            rows[0].values.push(edit.nanos.saturating_sub(stamp) as f64 / 1e6);
            // This answer ends before the next run (its last edit has no "…").
            let ended = fake
                .wait_for(Duration::from_secs(60), |fake| {
                    fake.replies_to(1, asked)
                        .first()
                        .and_then(|reply| fake.text_of(1, *reply))
                        .is_some_and(|text| !text.ends_with('…') && text.contains('@'))
                })
                .await;
            if !ended {
                bail!("the answer did not end: {}", gateway.log_text());
            }
            // The CLI's path: the same stream to a host client.
            rows[1].values.push(cli_first_token(&mut host).await?);
        }
        // Throughput: a warm-up round meets each person and makes their Assistant, then timed rounds.
        for round in 0..=rounds {
            let started = Instant::now();
            let mut chats = vec![];
            for person in 0..SENDERS {
                let chat = 1000 + person;
                let update = fake.message(chat, "private", chat, &format!("Person {person}"), &format!("hi {round}"));
                chats.push((chat, update["message"]["message_id"].as_i64().context("an id")?));
                fake.push(update);
            }
            let done = fake
                .wait_for(Duration::from_secs(300), |fake| all_answered(fake, &chats, &format!("echo: hi {round}")))
                .await;
            if !done {
                bail!("round {round} was not answered: {}", gateway.log_text());
            }
            if round > 0 {
                rows[2].values.push(SENDERS as f64 / started.elapsed().as_secs_f64());
            }
            // The same messages into the same people's contexts from host clients.
            let (count, started) = host_round(&daemon, round).await?;
            if round > 0 {
                rows[3].values.push(count as f64 / started.elapsed().as_secs_f64());
            }
        }
        // 30 more people write once: 50 have written when the memory is read.
        let mut chats = vec![];
        for person in SENDERS..PEOPLE {
            let chat = 1000 + person;
            let update = fake.message(chat, "private", chat, &format!("Person {person}"), "hello");
            chats.push((chat, update["message"]["message_id"].as_i64().context("an id")?));
            fake.push(update);
        }
        if !fake.wait_for(Duration::from_secs(300), |fake| all_answered(fake, &chats, "echo: hello")).await {
            bail!("the last people were not answered: {}", gateway.log_text());
        }
        anyhow::Ok((idle, rss_mib(gateway.id())?))
    })?;
    println!(
        "baaaht-telegram: {runs} DMs of a paced 20-token answer (first token → the first edit showing it) beside the CLI's \
         path, and {rounds} rounds of {SENDERS} people writing at once beside {SENDERS} host-client messages\n"
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().map(Row::print).collect();
    let added = p50[0] - p50[1];
    println!("{:<72} {:>10.2}  MiB", "baaaht-telegram resident memory, idle", idle);
    println!("{:<72} {:>10.2}  MiB", format!("baaaht-telegram resident memory, {PEOPLE} people have written"), busy);
    println!(
        "\nfirst visible words in Telegram: {added:+.2} ms p50 over the CLI's path (target ≤ +50); throughput {:.2}× the \
         host client's (target ≥ 0.5); memory {busy:.1} MiB with {PEOPLE} people (target ≤ 30)",
        p50[2] / p50[3]
    );
    Ok(format!(
        "telegram_first_update_p50_ms={:.2} cli_first_token_p50_ms={:.2} telegram_added_p50_ms={added:.2} \
         telegram_msgs_per_s={:.2} host_msgs_per_s={:.2} telegram_throughput_vs_host={:.2} telegram_rss_idle_mib={idle:.1} \
         telegram_rss_{PEOPLE}_people_mib={busy:.1}",
        p50[0],
        p50[1],
        p50[2],
        p50[3],
        p50[2] / p50[3]
    ))
}
