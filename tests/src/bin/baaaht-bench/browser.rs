//! `baaaht-bench browser`: the time from a `browser open` to the page's text for a page built
//! by JavaScript, with the session's browser cold (Chromium started by the call, its container
//! up) and warm (running), beside `chromium --headless --dump-dom` of the same page on the host
//! in the same run; and the memory of the browser's container with the page open.

use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use baaaht_proto::client::Client;
use baaaht_tests::DaemonOptions;

use crate::tools::request;
use crate::{coder, header, Row};

/// One browser call; its time in ms.
async fn browse(client: &mut Client, params: serde_json::Value, expect: &str) -> Result<f64> {
    let started = Instant::now();
    let answer = client.agents.request_tool_execution(request("browser", params)).await?.into_inner();
    let took = started.elapsed().as_secs_f64() * 1e3;
    if answer.is_error || !answer.content.contains(expect) {
        bail!("the browser did not show `{expect}`: {}", answer.content);
    }
    Ok(took)
}

/// The memory the container `name` uses now, in MiB (`docker stats`).
fn memory_mib(name: &str) -> Result<f64> {
    let stats = baaaht_tests::docker(&["stats", "--no-stream", "--format", "{{.MemUsage}}", name])?;
    let used = stats.split('/').next().unwrap_or_default().trim();
    let (number, unit) = used.split_at(used.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(used.len()));
    let number: f64 = number.trim().parse().with_context(|| format!("docker stats said {stats:?}"))?;
    Ok(match unit {
        "GiB" => number * 1024.0,
        "KiB" => number / 1024.0,
        "B" => number / 1024.0 / 1024.0,
        _ => number,
    })
}

pub(crate) fn run(runs: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    let (_site, target) = baaaht_tests::browser_site::serve()?;
    let url = format!("http://{target}/js");
    let options = DaemonOptions {
        files: vec![
            (
                "config/config.yaml".into(),
                format!("tools:\n  browser:\n    enabled: true\n  web_proxy:\n    allow: ['{target}']\n"),
            ),
            ("users/baaaht-self-test/egress.yaml".into(), format!("rules:\n  - host: '{target}'\n    action: allow\n")),
        ],
        ..Default::default()
    };
    let mut agent = rt.block_on(coder(options))?;
    let open = serde_json::json!({"action": "open", "url": url});
    let mut first = Row::new("first call: the browser's container and Chromium started, page read", "ms");
    let mut cold = Row::new("cold: Chromium started by the call (container up), page read", "ms");
    let mut warm = Row::new("warm: page opened and read in the running browser", "ms");
    let mut host = Row::new("baseline: chromium --headless --dump-dom URL on the host", "ms");
    let mut memory = Row::new("the browser's container with the page open (docker stats)", "MiB");
    // The image is built before anything is timed.
    rt.block_on(async {
        first.values.push(browse(&mut agent.client, open.clone(), "42 trains").await.context("the first call")?);
        for run in 0..runs {
            browse(&mut agent.client, serde_json::json!({"action": "close"}), "closed").await?;
            let opened = browse(&mut agent.client, open.clone(), "42 trains").await;
            cold.values.push(opened.with_context(|| format!("cold run {run}"))?);
            let opened = browse(&mut agent.client, open.clone(), "42 trains").await;
            warm.values.push(opened.with_context(|| format!("warm run {run}"))?);
        }
        anyhow::Ok(())
    })?;
    let browser = agent
        .daemon
        .recorded_containers()
        .into_iter()
        .rev()
        .find(|name| name.starts_with("baaaht-tool-"))
        .context("the browser's container")?;
    for _ in 0..5 {
        memory.values.push(memory_mib(&browser)?);
    }
    let profile = tempfile::tempdir()?;
    for _ in 0..runs {
        let started = Instant::now();
        let status = Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(["--dump-dom", &url])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("chromium --dump-dom failed: {status}");
        }
        host.values.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let tier = baaaht_tests::docker(&["inspect", "-f", "{{.HostConfig.Runtime}}", &browser])?;
    println!(
        "baaaht-bench browser: `browser open` of a page built by JavaScript to its text, {runs} cold and warm runs \
         (browser's tier: {}), beside chromium --dump-dom on the host in the same run\n",
        tier.trim()
    );
    header();
    first.print();
    let cold_p50 = cold.print();
    let warm_p50 = warm.print();
    let host_p50 = host.print();
    let memory_p50 = memory.print();
    println!(
        "\nwarm: {:.2}× the host's dump-dom (target ≤ 1.5); cold: {:.2}×; memory {memory_p50:.0} MiB (target ≤ 250)",
        warm_p50 / host_p50,
        cold_p50 / host_p50
    );
    println!(
        "RESULT warm_p50_ms={warm_p50:.0} cold_p50_ms={cold_p50:.0} host_dump_dom_p50_ms={host_p50:.0} \
         warm_vs_host={:.2} cold_vs_host={:.2} memory_mib={memory_p50:.0} tier={}",
        warm_p50 / host_p50,
        cold_p50 / host_p50,
        tier.trim()
    );
    Ok(())
}
