//! `baaaht-bench`: baaaht's benchmarks, one subcommand per area (DESIGN.md §7). Each runs its
//! baseline in the same run, prints medians with min–max beside the baseline, and ends with
//! exactly one `RESULT key=value …` line.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use baaaht_proto::client::{self, ConnectOptions};
use baaaht_proto::v1;
use baaaht_tests::{bin, median, percentile, DaemonOptions, TestDaemon};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "baaaht-bench", about = "baaaht's benchmarks (DESIGN.md §7)")]
struct Cli {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Start-to-ready time and idle resident memory of the real daemon
    Daemon {
        /// Daemon starts to measure (at least 10)
        #[arg(long, default_value_t = 15)]
        runs: usize,
    },
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Bench::Daemon { runs } => daemon(runs.max(10)),
    }
}

/// One row of a results table.
struct Row {
    name: &'static str,
    unit: &'static str,
    values: Vec<f64>,
}

impl Row {
    fn print(&mut self) -> f64 {
        let p50 = median(&mut self.values);
        let p99 = percentile(&mut self.values, 99.0);
        let (min, max) = (self.values[0], self.values[self.values.len() - 1]);
        println!(
            "{:<52} {:>10.2} {:>10.2} {:>10.2} {:>10.2}  {} (n={})",
            self.name,
            p50,
            p99,
            min,
            max,
            self.unit,
            self.values.len()
        );
        p50
    }
}

fn header() {
    println!("{:<52} {:>10} {:>10} {:>10} {:>10}", "measurement", "p50", "p99", "min", "max");
}

fn daemon(runs: usize) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut ready = Row { name: "baaahtd start → READY=1 (sd_notify)", unit: "ms", values: vec![] };
    let mut first_rpc = Row { name: "baaahtd start → first GetStatus answered", unit: "ms", values: vec![] };
    let mut idle_rss = Row { name: "baaahtd idle resident memory", unit: "MiB", values: vec![] };
    let mut restart = Row { name: "baaahtd restart on an existing data dir → READY=1", unit: "ms", values: vec![] };
    let mut exec = Row { name: "baseline: fork+exec `baaahtd --version`", unit: "ms", values: vec![] };

    for _ in 0..runs {
        // Baseline: the cost of starting this binary at all.
        let started = Instant::now();
        let status = Command::new(bin("baaahtd")).arg("--version").stdout(Stdio::null()).status()?;
        if !status.success() {
            bail!("baaahtd --version failed: {status}");
        }
        exec.values.push(started.elapsed().as_secs_f64() * 1e3);

        let started = Instant::now();
        let daemon = TestDaemon::start(DaemonOptions::default()).context("start baaahtd")?;
        ready.values.push(started.elapsed().as_secs_f64() * 1e3);
        // TestDaemon::start returns at READY=1; the socket is bound before that.
        runtime.block_on(async {
            let mut client = client::connect(&daemon.socket(), ConnectOptions::default()).await?;
            client.get_status(v1::StatusRequest {}).await?;
            anyhow::Ok(())
        })?;
        first_rpc.values.push(started.elapsed().as_secs_f64() * 1e3);
        // Idle: let the first engine probe and the default-file check finish, then read RSS.
        std::thread::sleep(Duration::from_millis(300));
        idle_rss.values.push(daemon.rss_kib()? as f64 / 1024.0);
        let data_dir = daemon.data_dir.clone();
        let exit = daemon.stop()?;
        if !exit.success() {
            bail!("baaahtd exited with {exit} after SIGTERM");
        }

        let started = Instant::now();
        let again = TestDaemon::start(DaemonOptions { data_dir: Some(data_dir), ..Default::default() })?;
        restart.values.push(started.elapsed().as_secs_f64() * 1e3);
        again.stop()?;
    }

    println!("baaaht-bench daemon: {runs} cold starts of the real daemon on a fresh data dir each\n");
    header();
    let ready_p50 = ready.print();
    let rpc_p50 = first_rpc.print();
    let restart_p50 = restart.print();
    let exec_p50 = exec.print();
    let rss_p50 = idle_rss.print();
    let ratio = ready_p50 / exec_p50;
    println!("\nready / bare exec = {ratio:.1}x; idle RSS target ≤ 20 MiB (DESIGN.md §7)");
    println!(
        "RESULT ready_p50_ms={ready_p50:.2} first_rpc_p50_ms={rpc_p50:.2} restart_p50_ms={restart_p50:.2} exec_p50_ms={exec_p50:.2} ratio={ratio:.2} idle_rss_p50_mib={rss_p50:.2}"
    );
    Ok(())
}
