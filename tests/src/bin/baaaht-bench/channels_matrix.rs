//! `baaaht-bench channels`, its Matrix part: the Matrix gateway against a real Synapse on
//! loopback and the real daemon, people being matrix-sdk clients in end-to-end encrypted
//! direct chats. The first visible answer update — the provider's first token (stamped with
//! the time it was written) → the answer first showing it, decrypted at the person's client —
//! beside the same first token reaching a host client (`baaaht chat`'s path) in the same run;
//! messages answered per second with 20 people writing at once beside the same 20 messages
//! from host clients; and the gateway's resident memory idle and after 50 people wrote.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use baaaht_proto::v1;
use baaaht_tests::fake_provider::clock_nanos;
use baaaht_tests::matrix_person::MatrixPerson;
use baaaht_tests::scenario;
use baaaht_tests::synapse::Synapse;

use crate::channels::{host_round, PEOPLE, SENDERS};
use crate::{cli_first_token, first_stamp, header, rss_mib, status_mib, Row};

const WAIT: Duration = Duration::from_secs(120);

/// A person with a direct chat to the bot.
struct Chat {
    person: MatrixPerson,
    room: matrix_sdk::room::Room,
    _store: tempfile::TempDir,
}

async fn chat(synapse: &Synapse, bot: &str, name: &str) -> Result<Chat> {
    let user = synapse.register(name, "pw")?;
    let store = tempfile::tempdir()?;
    let person = MatrixPerson::sign_in(&synapse.url(), &user, "pw", store.path()).await?;
    let room = person.dm(bot).await?;
    person.joined(&room, bot, WAIT).await?;
    Ok(Chat { person, room, _store: store })
}

/// The Matrix part: its table, and its RESULT fields.
pub(crate) fn run(runs: usize, rounds: usize) -> Result<String> {
    let rt = baaaht_tests::runtime();
    let _entered = rt.enter();
    let synapse = Synapse::start()?;
    let bot = synapse.register("baaaht", "bot-pw")?;
    let options = baaaht_tests::DaemonOptions {
        env: vec![
            ("MATRIX_PASSWORD_HOME".into(), "bot-pw".into()),
            ("BAAAHT__CONTAINER__MAX_CONCURRENT".into(), "160".into()),
        ],
        ..Default::default()
    };
    let (_provider, daemon) = scenario::start(&rt, crate::channels::brain(), options)?;
    let state = daemon.data_dir.join("matrix-state").display().to_string();
    let url = synapse.url();
    let args = ["--homeserver", &url, "--user", &bot, "--allow-server", "home.test", "--state-dir", &state];
    let request = v1::AddGatewayRequest {
        kind: "matrix".into(),
        name: "home".into(),
        homeserver: synapse.url(),
        ..Default::default()
    };
    let (gateway, _) = baaaht_tests::gateway::run_external(&rt, &daemon, request, "baaaht-matrix", &args);
    let deadline = Instant::now() + WAIT;
    while !gateway.log_text().contains("listening to Matrix") {
        if Instant::now() > deadline {
            bail!("the gateway does not listen: {}", gateway.log_text());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let idle = rss_mib(gateway.id())?;
    let idle_anon = status_mib(gateway.id(), "RssAnon")?;
    let mut rows = [
        Row::new("Matrix: provider's first token → the answer showing it (decrypted)", "ms"),
        Row::new("baseline: the same first token → a host client (CLI path)", "ms"),
        Row::new("baseline: Synapse alone, a person's message → another's client (decrypted)", "ms"),
        Row::new(format!("Matrix: {SENDERS} people writing at once, answered per second"), "msgs/s"),
        Row::new(format!("baseline: the same {SENDERS} contexts, host client messages per second"), "msgs/s"),
        Row::new(
            format!("baseline: Synapse alone, {SENDERS} people's messages read by one client per second"),
            "msgs/s",
        ),
    ];
    let busy = rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await?;
        let first = chat(&synapse, &bot, "p0").await?;
        for _ in 0..runs {
            let asked = first.person.say(&first.room, "count").await?;
            // The answer's first showing of a stamp, and when this client read it.
            let deadline = Instant::now() + WAIT;
            let shown = loop {
                if let Some((text, _)) = first.person.answer_to(&asked) {
                    if let Some(stamp) = first_stamp(&text) {
                        break clock_nanos().saturating_sub(stamp);
                    }
                }
                if Instant::now() > deadline {
                    bail!("no streamed edit: {}", gateway.log_text());
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            rows[0].values.push(shown as f64 / 1e6);
            first.person.wait_for_answer(&asked, WAIT, |text| !text.ends_with('…') && text.contains('@')).await?;
            rows[1].values.push(cli_first_token(&mut host).await?);
        }
        // What the homeserver alone takes: a message from one person's client to another's,
        // encrypted and decrypted, with no gateway between.
        let peer_name = synapse.register("peer", "pw")?;
        let peer_store = tempfile::tempdir()?;
        let peer = MatrixPerson::sign_in(&synapse.url(), &peer_name, "pw", peer_store.path()).await?;
        let between = first.person.dm(&peer_name).await?;
        peer.client.join_room_by_id(between.room_id()).await?;
        first.person.joined(&between, &peer_name, WAIT).await?;
        let peer_room = peer.client.get_room(between.room_id()).context("the peer's room")?;
        for run in 0..runs {
            let sent = clock_nanos();
            peer.say(&peer_room, &format!("ping {run} {sent}")).await?;
            let deadline = Instant::now() + WAIT;
            while !first.person.said().iter().any(|said| said.body == format!("ping {run} {sent}")) {
                if Instant::now() > deadline {
                    bail!("the peer's message did not arrive");
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            rows[2].values.push(clock_nanos().saturating_sub(sent) as f64 / 1e6);
        }
        let mut chats = vec![first];
        for person in 1..SENDERS {
            chats.push(chat(&synapse, &bot, &format!("p{person}")).await?);
        }
        for round in 0..=rounds {
            let started = Instant::now();
            let mut asked = vec![];
            for chat in &chats {
                asked.push(chat.person.say(&chat.room, &format!("hi {round}")).await?);
            }
            for (chat, asked) in chats.iter().zip(&asked) {
                chat.person.wait_for_answer(asked, WAIT, |text| text == format!("echo: hi {round}")).await?;
            }
            if round > 0 {
                rows[3].values.push(SENDERS as f64 / started.elapsed().as_secs_f64());
            }
            let (count, started) = host_round(&daemon, round).await?;
            if round > 0 {
                rows[4].values.push(count as f64 / started.elapsed().as_secs_f64());
            }
        }
        // What Synapse alone carries: the same people each writing at once to one peer in a
        // direct chat of their own, every message read (decrypted) at the peer's client. An
        // answering bot needs at least this round and one more event back.
        let mut to_peer = vec![];
        for chat in &chats {
            let room = chat.person.dm(&peer_name).await?;
            peer.client.join_room_by_id(room.room_id()).await?;
            chat.person.joined(&room, &peer_name, WAIT).await?;
            to_peer.push(room);
        }
        for round in 0..=rounds {
            let started = Instant::now();
            let mut sent = vec![];
            for (n, (chat, room)) in chats.iter().zip(&to_peer).enumerate() {
                let text = format!("to the peer {round} {n}");
                chat.person.say(room, &text).await?;
                sent.push(text);
            }
            let deadline = Instant::now() + WAIT;
            while !sent.iter().all(|text| peer.said().iter().any(|said| said.body == *text)) {
                if Instant::now() > deadline {
                    bail!("the peer did not read every message");
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if round > 0 {
                rows[5].values.push(SENDERS as f64 / started.elapsed().as_secs_f64());
            }
        }
        drop(chats);
        // The rest write once: 50 have written when the memory is read.
        for person in SENDERS..PEOPLE {
            let chat = chat(&synapse, &bot, &format!("p{person}")).await?;
            let asked = chat.person.say(&chat.room, "hello").await?;
            chat.person.wait_for_answer(&asked, WAIT, |text| text == "echo: hello").await.context("answered")?;
        }
        Ok::<_, anyhow::Error>((rss_mib(gateway.id())?, status_mib(gateway.id(), "RssAnon")?))
    })?;
    let (busy, busy_anon) = busy;
    println!(
        "\nbaaaht-matrix: {runs} encrypted DMs of a paced 20-token answer (first token → the answer showing it, \
         decrypted) beside the CLI's path, and {rounds} rounds of {SENDERS} people writing at once beside {SENDERS} \
         host-client messages (Synapse on loopback)\n"
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().map(Row::print).collect();
    let added = p50[0] - p50[1];
    let over_synapse = p50[0] - p50[2];
    println!("{:<72} {:>10.2}  MiB", "baaaht-matrix resident memory, idle", idle);
    println!("{:<72} {:>10.2}  MiB", format!("baaaht-matrix resident memory, {PEOPLE} people have written"), busy);
    println!("{:<72} {:>10.2}  MiB", "  of it its own data (RssAnon; the rest is code and files), idle", idle_anon);
    println!("{:<72} {:>10.2}  MiB", format!("  of it its own data, {PEOPLE} people have written"), busy_anon);
    println!(
        "\nfirst visible words in Matrix: {added:+.2} ms p50 over the CLI's path, {over_synapse:+.2} ms over Synapse's own \
         delivery (target ≤ +50 over the local server); throughput {:.2}× the host client's (target ≥ 0.5), {:.2}× \
         Synapse's own one-way rate; memory {busy:.1} MiB with {PEOPLE} people (target ≤ 30)",
        p50[3] / p50[4],
        p50[3] / p50[5]
    );
    Ok(format!(
        "matrix_first_update_p50_ms={:.2} matrix_cli_first_token_p50_ms={:.2} matrix_added_p50_ms={added:.2} \
         matrix_synapse_alone_p50_ms={:.2} matrix_added_over_synapse_p50_ms={over_synapse:.2} \
         matrix_msgs_per_s={:.2} matrix_host_msgs_per_s={:.2} matrix_throughput_vs_host={:.2} \
         matrix_synapse_msgs_per_s={:.2} matrix_throughput_vs_synapse={:.2} \
         matrix_rss_idle_mib={idle:.1} matrix_rss_{PEOPLE}_people_mib={busy:.1} matrix_anon_idle_mib={idle_anon:.1} \
         matrix_anon_{PEOPLE}_people_mib={busy_anon:.1}",
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
