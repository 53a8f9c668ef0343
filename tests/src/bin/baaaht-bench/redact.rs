//! `baaaht-bench redact`: what the one redactor (DESIGN.md §10.3) costs. With 50 secrets in
//! the store and gitleaks' rule set, in this process, as the daemon runs it:
//! - per KiB of session text (prose, code, JSON, shell output, links, a few secrets), beside
//!   serializing the same text to JSON (what every writer does with it anyway), same run;
//! - what it adds to a warm tool call (its parameters in, a 1 KiB answer out) and to a streamed
//!   answer's first token (one delta to the channels), beside a warm `read_file`'s p50 through
//!   a real daemon measured in the same run.

use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use baaaht_daemon::guard::redact::Shield;
use baaaht_proto::v1;
use baaaht_tests::DaemonOptions;

use crate::{coder, header, Row};

/// Text as sessions hold it: a conversation about code, with tool output and links.
fn session_text(secrets: &[(String, String)], kib: usize) -> String {
    let pieces = [
        "Sure — I looked at the build log. The failure is in the integration step, where the \
         test waits for the server to come up before it sends the first request.\n",
        "```rust\nlet client = Client::new(&config.endpoint);\nlet token = settings.get(\"token_path\")?;\n\
         let response = client.get(\"/api/v2/items\").send().await?;\n```\n",
        "{\"id\":\"run-81723\",\"status\":\"failed\",\"exit_code\":1,\"duration_ms\":48213,\"files\":[\"src/main.rs\",\"Cargo.toml\"]}\n",
        "$ cargo test --workspace\n   Compiling baaaht v0.1.0\n    Finished test profile in 2m 31s\ntest result: ok. 212 passed; 0 failed\n",
        "See https://docs.rs/tokio/latest/tokio/time/fn.timeout.html and the discussion at \
         https://github.com/tokio-rs/tokio/issues/4780 for why the key is to time out the whole call.\n",
        "The password policy says: at least 12 characters, rotated every 90 days; the secret \
         manager keeps the API credentials for the staging cluster.\n",
    ];
    let mut text = String::with_capacity(kib * 1024 + 256);
    let mut index = 0;
    while text.len() < kib * 1024 {
        text.push_str(pieces[index % pieces.len()]);
        // Now and then a secret as an agent might echo it.
        if index % 40 == 7 {
            text.push_str(&format!("export DEPLOY_KEY={}\n", secrets[index % secrets.len()].1));
        }
        index += 1;
    }
    text
}

/// 50 secrets of 27 characters, as an API key looks (a fixed sequence: the same every run).
fn secrets() -> Vec<(String, String)> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    (0..50)
        .map(|index| {
            let value: String = (0..24)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    char::from(alphabet[(state % alphabet.len() as u64) as usize])
                })
                .collect();
            (format!("SECRET_{index}"), format!("sk-{value}"))
        })
        .collect()
}

pub(crate) fn run(runs: usize, calls: usize) -> Result<()> {
    let secrets = secrets();
    let pairs: Vec<(&str, &str)> = secrets.iter().map(|(name, value)| (name.as_str(), value.as_str())).collect();
    let shield = Shield::with_values(&pairs);
    let compiling = Instant::now();
    shield.warm();
    let compiled_ms = compiling.elapsed().as_secs_f64() * 1e3;
    let kib = 64;
    let text = session_text(&secrets, kib);
    let (cleaned, found) = shield.scan(&text);
    if found.is_empty() || cleaned.contains(&secrets[7].1) {
        bail!("the corpus's secrets were not all found: {found:?}");
    }
    let mut rows = [
        Row {
            name: format!("redact {kib} KiB of session text (50 secrets + gitleaks), per KiB"),
            unit: "µs",
            values: vec![],
        },
        Row {
            name: format!("baseline: serde_json::to_string of the same {kib} KiB, per KiB"),
            unit: "µs",
            values: vec![],
        },
        Row { name: "added to a tool call: parameters in + 1 KiB answer out".into(), unit: "µs", values: vec![] },
        Row { name: "added to a streamed answer's first token: one delta".into(), unit: "µs", values: vec![] },
        Row {
            name: "warm read_file 1 KiB through the daemon (redaction included)".into(), unit: "µs", values: vec![]
        },
    ];
    for _ in 0..runs {
        let started = Instant::now();
        std::hint::black_box(shield.scan(std::hint::black_box(&text)));
        rows[0].values.push(started.elapsed().as_secs_f64() * 1e6 / kib as f64);
        let started = Instant::now();
        std::hint::black_box(serde_json::to_string(std::hint::black_box(&text))?);
        rows[1].values.push(started.elapsed().as_secs_f64() * 1e6 / kib as f64);
    }
    let params = serde_json::json!({"path": "src/main.rs", "offset": 0, "limit": 200}).to_string();
    let answer = text[..1024].to_string();
    for _ in 0..calls {
        let started = Instant::now();
        std::hint::black_box(shield.scan(std::hint::black_box(&params)));
        std::hint::black_box(shield.scan(std::hint::black_box(&answer)));
        rows[2].values.push(started.elapsed().as_secs_f64() * 1e6);
        let started = Instant::now();
        std::hint::black_box(shield.scan(std::hint::black_box("Sure — I looked at")));
        rows[3].values.push(started.elapsed().as_secs_f64() * 1e6);
    }
    // The warm call as the daemon serves it, for scale.
    let rt = baaaht_tests::runtime();
    rt.block_on(async {
        let mut agent = coder(DaemonOptions::default()).await?;
        let request = |tool: &str, params: serde_json::Value| v1::ToolRequest {
            tool: tool.into(),
            params_json: params.to_string(),
            ..v1::ToolRequest::default()
        };
        let file = serde_json::json!({"path": "kib.txt", "content": answer});
        let wrote = agent.client.agents.request_tool_execution(request("write_file", file)).await?.into_inner();
        if wrote.is_error {
            bail!("write_file failed: {}", wrote.content);
        }
        for _ in 0..calls.min(300) {
            let read = request("read_file", serde_json::json!({"path": "kib.txt"}));
            let response = agent.client.agents.request_tool_execution(read).await?.into_inner();
            let daemon_us: f64 = response.metadata.get("daemon_us").context("daemon_us")?.parse()?;
            rows[4].values.push(daemon_us);
        }
        anyhow::Ok(())
    })?;
    println!(
        "baaaht-bench redact: the redactor with 50 secrets and gitleaks' {} rules (read at start in {compiled_ms:.0} ms; each rule \
         compiled when its keywords first appear), {runs} runs over {kib} KiB and {calls} calls, beside JSON serialization of the same \
         text in the same run\n",
        baaaht_daemon::guard::redact::Rules::gitleaks().len()
    );
    header();
    let p50: Vec<f64> = rows.iter_mut().map(Row::print).collect();
    println!(
        "\nper KiB: {:.2} µs, {:.1}× serializing it (target ≤ 20 µs/KiB); tool call +{:.1} µs on a {:.0} µs warm call \
         (target ≤ +100 µs); first token +{:.1} µs (target ≤ +100 µs)",
        p50[0],
        p50[0] / p50[1],
        p50[2],
        p50[4],
        p50[3]
    );
    println!(
        "RESULT redact_us_per_kib={:.2} json_us_per_kib={:.2} ratio={:.1} tool_call_added_us={:.1} \
         first_token_added_us={:.1} warm_call_us={:.0}",
        p50[0],
        p50[1],
        p50[0] / p50[1],
        p50[2],
        p50[3],
        p50[4]
    );
    Ok(())
}
