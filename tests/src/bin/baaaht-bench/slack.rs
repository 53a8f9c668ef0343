//! `baaaht-bench slack`: the Slack gateway (the real `baaaht-slack`) against the fake Slack and
//! the real daemon. Time to the first words in Slack — a DM's event delivered → the first
//! `chat.update` showing text, measured from the fake provider's first token (stamped with the
//! time it was written) — beside the same first token reaching a host client (the CLI's path) in
//! the same run; and events per second with 20 channels active, beside the same 20 messages
//! sent by a host client.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use baaaht_tests::fake_provider::{anthropic_answer, stamped_token_stream, Answer, Asked, Responder, Wire};
use baaaht_tests::fake_slack::{gateway_for, slack_options, FakeSlack};
use baaaht_tests::scenario::{self, last_user_text};
use serde_json::json;

use crate::{cli_first_token, first_stamp, header, Row};

/// Stamped tokens when asked to `count`, else a short echo.
fn brain() -> Answer {
    Answer::Respond(Responder(std::sync::Arc::new(|request| {
        let asked = Asked::of(request);
        let said = last_user_text(&asked);
        if said.ends_with("count") {
            match stamped_token_stream(Wire::Anthropic, 20, Duration::from_millis(10)) {
                Answer::Paced { chunks, interval } => Answer::Paced { chunks, interval },
                other => other,
            }
        } else {
            anthropic_answer(&format!("echo: {said}"), &[])
        }
    })))
}

pub(crate) fn run(runs: usize, rounds: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeSlack::start("T0BENCH"))?;
    // 20 channels are 20 groups, each with its Assistant (and a pre-warmed tool container).
    let mut options = slack_options();
    options.env.push(("BAAAHT__CONTAINER__MAX_CONCURRENT".into(), "64".into()));
    let (_provider, daemon) = scenario::start(&rt, brain(), options)?;
    let gateway = gateway_for(&rt, &daemon, &fake);
    let mut rows = [
        Row {
            name: "Slack: provider's first token → first chat.update showing it".into(), unit: "ms", values: vec![]
        },
        Row { name: "baseline: the same first token → a host client (CLI path)".into(), unit: "ms", values: vec![] },
        Row { name: "Slack: 20 channels, events answered per second".into(), unit: "events/s", values: vec![] },
        Row {
            name: "baseline: 20 group contexts, host client messages answered per second".into(),
            unit: "msgs/s",
            values: vec![],
        },
    ];
    rt.block_on(async {
        if !fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 1).await {
            bail!("the gateway did not connect: {}", gateway.log_text());
        }
        let mut host = scenario::host_client(&daemon).await?;
        for run in 0..runs {
            // One user for the Slack runs and one for the CLI runs, so neither waits for the other.
            let ts = format!("1760001000.{run:06}");
            let event = json!({"type": "message", "channel": "DU1", "channel_type": "im", "user": "U1", "text": "count", "ts": ts});
            let before = fake.calls().len();
            fake.push_event(event, &format!("EvT{run}"), 0).context("no connection")?;
            let shown = fake
                .wait_for(Duration::from_secs(60), |fake| {
                    fake.calls()[before..].iter().any(|call| call.method == "chat.update" && call.params["text"].as_str().is_some_and(|t| t.contains('@')))
                })
                .await;
            if !shown {
                bail!("no streamed update: {}", gateway.log_text());
            }
            let calls = fake.calls();
            let update = calls[before..]
                .iter()
                .find(|call| call.method == "chat.update" && call.params["text"].as_str().is_some_and(|t| t.contains('@')))
                .context("the update")?;
            let stamp = first_stamp(update.params["text"].as_str().unwrap_or_default()).context("a stamp")?;
            rows[0].values.push(update.nanos.saturating_sub(stamp) as f64 / 1e6);
            // Wait for this answer to end before the next run.
            let ended = fake
                .wait_for(Duration::from_secs(60), |fake| {
                    fake.calls()[before..].iter().filter(|call| call.method == "chat.update").count() >= 2
                        && !fake.calls().last().is_some_and(|call| call.params["text"].as_str().is_some_and(|t| t.ends_with('…')))
                })
                .await;
            if !ended {
                bail!("the answer did not end");
            }
            // The CLI's path: the same stream to a host client.
            rows[1].values.push(cli_first_token(&mut host).await?);
        }
        // Throughput: a warm-up round makes each channel's group and Assistant, then timed rounds.
        for round in 0..=rounds {
            let before = fake.calls().len();
            let started = Instant::now();
            for channel in 0..20 {
                let ts = format!("1760002{round:03}.{channel:06}");
                let event = json!({"type": "message", "channel": format!("C{channel}"), "channel_type": "channel", "user": format!("U{channel}"), "text": format!("<@UBOT> hi {round}"), "ts": ts});
                fake.push_event(event, &format!("EvR{round}C{channel}"), 0).context("no connection")?;
            }
            let done = fake
                .wait_for(Duration::from_secs(120), |fake| {
                    let calls = fake.calls();
                    let finals = calls[before..].iter().filter(|call| call.method == "chat.update" && call.params["text"].as_str().is_some_and(|t| t.ends_with(&format!("hi {round}")))).count();
                    finals >= 20
                })
                .await;
            if !done {
                let calls = fake.calls();
                let written: Vec<String> = calls[before..]
                    .iter()
                    .filter(|call| call.method == "chat.update")
                    .filter_map(|call| call.params["text"].as_str().map(str::to_string))
                    .collect();
                bail!("round {round} was not answered: {written:?}\n{}\n{}", gateway.log_text(), daemon.log_text().lines().rev().take(20).collect::<Vec<_>>().join("\n"));
            }
            if round > 0 {
                rows[2].values.push(20.0 / started.elapsed().as_secs_f64());
            }
            // The same 20 messages into the 20 groups from a host client.
            let started = Instant::now();
            let mut turns = tokio::task::JoinSet::new();
            for channel in 0..20 {
                let mut client = scenario::host_client(&daemon).await?;
                let context = scenario::group(&format!("slack-T0BENCH-C{channel}"));
                let message = scenario::message(context, "bench", &format!("host {round}"));
                turns.spawn(async move { scenario::turn(&mut client, message, Duration::from_secs(120)).await });
            }
            while let Some(turn) = turns.join_next().await {
                turn??;
            }
            if round > 0 {
                rows[3].values.push(20.0 / started.elapsed().as_secs_f64());
            }
        }
        anyhow::Ok(())
    })?;
    println!(
        "baaaht-slack: {runs} DMs of a paced 20-token answer (first token → Slack) beside the CLI's path, and {rounds} rounds of \
         20 channel mentions at once beside 20 host-client messages\n"
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().map(Row::print).collect();
    let added = p50[0] - p50[1];
    println!(
        "\nfirst words in Slack: {added:+.2} ms p50 over the CLI's path; throughput {:.2}× the host client's",
        p50[2] / p50[3]
    );
    println!(
        "RESULT slack_first_update_p50_ms={:.2} cli_first_token_p50_ms={:.2} added_p50_ms={added:.2} slack_events_per_s={:.2} \
         host_msgs_per_s={:.2} throughput_vs_host={:.2}",
        p50[0],
        p50[1],
        p50[2],
        p50[3],
        p50[2] / p50[3]
    );
    Ok(())
}
