//! `baaaht-bench local-model`: a local llama.cpp server (scripts/local-model: SmolLM2-135M on
//! this CPU) answering "hello" in new conversations through the real daemon, set up by
//! `baaahtd setup` as a newcomer does. Each round first makes the instructions new to the
//! server (the person's profile names the round), then times two new conversations
//! one after the other: the first word of the first (the baseline: the whole prompt processed)
//! and of the second (what the server's prompt cache reuses of the first: the instructions and
//! tools, a stable prefix). Beside them, the prompt tokens the server processed and took from
//! its cache for each, from its `/metrics`.

use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use baaaht_proto::client;
use baaaht_proto::v1;
use baaaht_tests::{bin, DaemonOptions, TestDaemon};

use crate::{header, Following, Row};

/// `curl`'s answer to a GET (or a POST of `json`) of `url`: a benchmark's few requests to a
/// server on this machine.
fn curl(url: &str, json: Option<&serde_json::Value>) -> Result<String> {
    let mut command = Command::new("curl");
    command.args(["-fsS", "--max-time", "600", url]);
    if let Some(json) = json {
        command.args(["-H", "content-type: application/json", "--data-binary", &json.to_string()]);
    }
    let output = command.output().context("curl runs")?;
    if !output.status.success() {
        bail!("{url}: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// llama.cpp's counters: prompt tokens processed (those taken from its cache not among them),
/// those taken from its cache, and the seconds it spent processing prompts.
fn counters(base: &str) -> Result<(f64, f64, f64)> {
    let text = curl(&format!("{base}/metrics"), None)?;
    let value = |name: &str| {
        text.lines().find_map(|line| line.strip_prefix(name)?.trim().parse::<f64>().ok()).with_context(|| {
            format!("{name} in {base}/metrics (start the server with its metrics on: scripts/local-model)")
        })
    };
    Ok((
        value("llamacpp:prompt_tokens_total")?,
        value("llamacpp:prompt_tokens_cached_total").unwrap_or(0.0),
        value("llamacpp:prompt_seconds_total")?,
    ))
}

/// Makes the instructions of the next conversations new to the server (llama.cpp keeps
/// earlier prompts in memory too, so filling its slot is not enough): the person's profile,
/// which agents read when they start, names the round.
fn fresh_prefix(data: &std::path::Path, round: usize) -> Result<()> {
    let profile = data.join("users/bench/USER.md");
    std::fs::create_dir_all(profile.parent().context("a folder")?)?;
    std::fs::write(profile, format!("Round {round} of a benchmark. Likes short answers.\n"))?;
    Ok(())
}

/// A new conversation's "hello": when its first word came, in ms after it was sent. Returns
/// at its end (the server has one slot: the next conversation must not wait for this one).
async fn first_word(host: &mut client::Client) -> Result<f64> {
    let session = crate::delegation::new_session(host).await?;
    let mut turn = Following::send(host, &session, "hello").await?;
    let mut first = None;
    loop {
        match turn.next().await? {
            v1::orchestrator_event::Event::TextDelta(_) => {
                first.get_or_insert(turn.sent_at.elapsed().as_secs_f64() * 1e3);
            }
            v1::orchestrator_event::Event::Reply(_) => {
                return Ok(first.unwrap_or(turn.sent_at.elapsed().as_secs_f64() * 1e3))
            }
            v1::orchestrator_event::Event::Error(error) => bail!("the turn failed: {}", error.message),
            _ => {}
        }
    }
}

pub(crate) fn run(rounds: usize, base: &str) -> Result<()> {
    let rt = baaaht_tests::runtime();
    curl(&format!("{base}/health"), None)
        .with_context(|| format!("no llama.cpp server answers at {base}: start one with scripts/local-model"))?;
    // Set up as a newcomer does, then started on that data dir.
    let temp = tempfile::tempdir()?;
    let data = temp.path().join("d");
    let api_base = format!("{base}/v1");
    let setup = Command::new(bin("baaahtd"))
        .args(["setup", "--non-interactive", "--provider", "custom", "--api-base", &api_base])
        .env("BAAAHT_DATA", &data)
        .env_remove("BAAAHT_PASSPHRASE_FILE")
        .output()?;
    if !setup.status.success() {
        bail!("baaahtd setup failed: {}", String::from_utf8_lossy(&setup.stderr));
    }
    // Short answers: SmolLM2 otherwise writes until its cap, and the next conversation waits
    // for the server's one slot.
    let env = vec![("BAAAHT__AGENTS__ASSISTANT__MAX_OUTPUT_TOKENS".to_string(), "48".to_string())];
    let daemon = TestDaemon::start(DaemonOptions { data_dir: Some(data.clone()), env, ..DaemonOptions::default() })?;
    let mut cold = Row::new("first new conversation → first word (cache holds none of it)", "ms");
    let mut warm = Row::new("second new conversation → first word (its prefix cached)", "ms");
    let mut cold_tokens = Row::new("  prompt tokens processed, first conversation", "tokens");
    let mut warm_tokens = Row::new("  prompt tokens processed, second conversation", "tokens");
    let mut reused = Row::new("  prompt tokens taken from the cache, second conversation", "tokens");
    let mut cold_prompt = Row::new("  the server's prompt processing, first conversation", "ms");
    let mut warm_prompt = Row::new("  the server's prompt processing, second conversation", "ms");
    rt.block_on(async {
        let mut host = baaaht_tests::scenario::host_client(&daemon).await?;
        for round in 0..rounds {
            fresh_prefix(&data, round)?;
            let before = counters(base)?;
            let started = Instant::now();
            cold.values.push(first_word(&mut host).await.with_context(|| daemon.log_text())?);
            let between = counters(base)?;
            warm.values.push(first_word(&mut host).await.with_context(|| daemon.log_text())?);
            let after = counters(base)?;
            cold_tokens.values.push(between.0 - before.0);
            warm_tokens.values.push(after.0 - between.0);
            reused.values.push(after.1 - between.1);
            cold_prompt.values.push((between.2 - before.2) * 1e3);
            warm_prompt.values.push((after.2 - between.2) * 1e3);
            eprintln!("round {round}: {:.1} s", started.elapsed().as_secs_f64());
        }
        anyhow::Ok(())
    })?;
    header();
    let baseline = cold.print();
    let measured = warm.print();
    cold_tokens.print();
    warm_tokens.print();
    reused.print();
    cold_prompt.print();
    warm_prompt.print();
    let ratio = baseline / measured;
    println!("second conversation's first word {ratio:.1}× sooner than the first's (same run)");
    println!(
        "RESULT cold_first_word_p50_ms={baseline:.0} warm_first_word_p50_ms={measured:.0} ratio={ratio:.2} rounds={rounds}"
    );
    Ok(())
}
