//! `baaaht-bench household` (issue 39): a household of 25 people in 5 groups on one daemon for
//! `--minutes`, with faults on a schedule (`--faults`), and what became of every message. The
//! run itself is `baaaht_tests::household`, which the two-minute test shares.

use std::time::Duration;

use anyhow::Result;
pub(crate) use baaaht_tests::household::Plan;
use baaaht_tests::household::{self, Kind, Outcome, Report};
use baaaht_tests::percentile;

pub(crate) fn run(plan: Plan) -> Result<()> {
    println!(
        "household: {} people ({} on the web, {} on Slack, {} at the TUI) in {} groups for {} min, a message each every {} s on average, faults {}",
        plan.users,
        plan.web_people,
        plan.slack_people,
        plan.tui_people,
        plan.groups,
        plan.run_for.as_secs() / 60,
        plan.message_every.as_secs(),
        if plan.faults { "on" } else { "off" }
    );
    let runtime = baaaht_tests::runtime();
    let report = runtime.block_on(household::run(plan))?;
    let logs = std::env::temp_dir().join("baaaht-household-daemon.log");
    std::fs::write(&logs, &report.logs)?;
    println!("the daemons' logs: {}", logs.display());
    print(&report);
    Ok(())
}

/// The people a host serves: the number of active people at which the p99 first word of a
/// chat stays within this (the model answers at once, so it is the daemon's time).
const FIRST_WORD_TARGET_MS: f64 = 1000.0;
/// The most memory the warm pools may hold while they wait, at their default sizes.
const POOL_IDLE_TARGET_MIB: f64 = 60.0;
/// The numbers of active people the capacity line tries, in turn.
const CROWDS: [usize; 7] = [5, 10, 15, 25, 40, 60, 90];

/// Runs the household without faults at each of [`CROWDS`] (a fifth of them in groups, the
/// plan's web and Slack people among them) until the p99 first word of a chat exceeds 1 s:
/// the most people one host serves within it.
/// The daemon's own container cap on this host, `container.max_concurrent`'s default (`auto`).
fn default_cap() -> u32 {
    baaaht_daemon::base::config::ContainerConfig::default().cap()
}

pub(crate) fn capacity(plan: Plan) -> Result<()> {
    println!(
        "capacity: the household without faults, {} min at each size, a message each every {} s on average, \
         the daemon's container cap {}, warm pools {}; target: p99 first word of a chat ≤ {FIRST_WORD_TARGET_MS:.0} ms",
        plan.run_for.as_secs() / 60,
        plan.message_every.as_secs(),
        plan.containers.unwrap_or_else(default_cap),
        if plan.pools { "at their defaults" } else { "off" }
    );
    println!(
        "{:>7} {:>6} {:>9} {:>8} {:>8} {:>8} {:>14}",
        "people", "sent", "answered", "lost", "p50 ms", "p99 ms", "p99 / target"
    );
    let runtime = baaaht_tests::runtime();
    let mut served = 0;
    let mut at_served = f64::NAN;
    let mut pool_idle_mib = None;
    for people in CROWDS {
        let crowd = Plan {
            users: people,
            groups: (people / 5).max(1),
            faults: false,
            restart_dockerd: false,
            web_people: plan.web_people.min(people / 5),
            slack_people: plan.slack_people.min(people / 5),
            tui_people: plan.tui_people.min(people / 5),
            ..plan.clone()
        };
        let report = runtime.block_on(household::run(crowd))?;
        pool_idle_mib = pool_idle_mib.or(report.pool_idle_mib);
        let mut quiet = report.first_words_ms();
        let (p50, p99) = (percentile(&mut quiet, 50.0), percentile(&mut quiet, 99.0));
        let answered = report.count(|s| s.outcome == Outcome::Answered);
        println!(
            "{people:>7} {:>6} {answered:>9} {:>8} {p50:>8.0} {p99:>8.0} {:>13.2}×",
            report.sent.len(),
            report.lost().len(),
            p99 / FIRST_WORD_TARGET_MS
        );
        println!("        slowest: {}", slowest(&report, 5));
        // Past what it serves: too slow, or chats refused (busy) rather than answered.
        let chats_refused = report.count(|s| s.kind == Kind::Chat && s.outcome != Outcome::Answered);
        if p99 > FIRST_WORD_TARGET_MS || quiet.is_empty() || chats_refused > 0 || !report.lost().is_empty() {
            if chats_refused > 0 {
                println!("        {chats_refused} chats not answered at {people} people");
            }
            break;
        }
        (served, at_served) = (people, p99);
    }
    let cap = plan.containers.unwrap_or_else(default_cap);
    let pool_idle = pool_idle_mib.map_or_else(|| "off".to_string(), |mib| format!("{mib:.1}"));
    println!(
        "the pools at their floors held {pool_idle} MiB while they waited (target ≤ {POOL_IDLE_TARGET_MIB:.0} MiB)"
    );
    println!(
        "RESULT household_capacity_people={served} first_word_p99_ms={at_served:.0} target_ms={FIRST_WORD_TARGET_MS:.0} \
         container_cap={cap} pool_idle_mib={pool_idle} pool_idle_target_mib={POOL_IDLE_TARGET_MIB:.0}"
    );
    Ok(())
}

fn print(report: &Report) {
    println!("\nfaults injected:");
    for (at, what) in &report.faults {
        println!("  {at:>7.1} s  {what}");
    }
    let sent = report.sent.len();
    let answered = report.count(|s| s.outcome == Outcome::Answered);
    let refused = report.count(|s| matches!(s.outcome, Outcome::Refused(_)));
    let lost = report.lost();
    let doubled = report.doubled();
    println!(
        "\nmessages: {sent} sent, {answered} answered, {refused} refused, {} lost, {} doubled",
        lost.len(),
        doubled.len()
    );
    let kinds = [
        (Kind::Chat, "chats"),
        (Kind::Coder, "coder turns (delegation + exec)"),
        (Kind::Mcp, "coder turns through an MCP server"),
        (Kind::Group, "group messages"),
        (Kind::Web, "on the web (chats and coder turns)"),
        (Kind::Slack, "on Slack (chats and coder turns)"),
        (Kind::Upload, "files shared on Slack"),
        (Kind::Tui, "at the TUI (chats and coder turns)"),
    ];
    for (kind, name) in kinds {
        let of_kind = report.count(|s| s.kind == kind);
        let ok = report.count(|s| s.kind == kind && s.outcome == Outcome::Answered);
        println!("  {name:<34} {ok:>5} of {of_kind:>5} answered");
    }
    println!("refused, with what the sender saw:");
    for (why, count) in report.refusals() {
        println!("  {count:>4} × {}", why.chars().take(160).collect::<String>());
    }
    for sent in lost.iter().chain(doubled.iter()) {
        println!(
            "  LOST/DOUBLED {} ({:?}, {:.1} s, fault {:?}): {:?}",
            sent.token, sent.kind, sent.at, sent.fault, sent.outcome
        );
    }
    let (mut due, mut ran, mut twice) = (0, 0, 0);
    let mut outcomes = std::collections::BTreeMap::<&str, usize>::new();
    let mut skipped = std::collections::BTreeMap::<&str, usize>::new();
    for task in &report.tasks {
        due += task.due;
        ran += task.run;
        twice += task.twice;
        for outcome in &task.outcomes {
            *outcomes.entry(outcome).or_default() += 1;
        }
        for reason in &task.skipped {
            *skipped.entry(reason).or_default() += 1;
        }
    }
    let skipped_slots: usize = skipped.values().sum();
    println!(
        "\nscheduled (a task of each group every minute): {due} due, {ran} run, {skipped_slots} skipped on purpose, \
         {twice} run twice; runs: {outcomes:?}"
    );
    for (reason, count) in &skipped {
        println!("  {count:>4} × skipped: {reason}");
    }
    let mut quiet = report.first_words_ms();
    let mut all: Vec<f64> = report
        .sent
        .iter()
        .filter(|s| s.kind == Kind::Chat)
        .filter_map(|s| s.first_word)
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    let (p50, p99) = (percentile(&mut quiet, 50.0), percentile(&mut quiet, 99.0));
    println!(
        "first word of a chat (the model answers at once): p50 {p50:.0} ms, p99 {p99:.0} ms without a fault ({} chats); \
         p50 {:.0} ms, p99 {:.0} ms over all {} (baseline: the quiet ones, ratio p99 {:.2}×)",
        quiet.len(),
        percentile(&mut all, 50.0),
        percentile(&mut all, 99.0),
        all.len(),
        percentile(&mut all, 99.0) / p99.max(1.0)
    );
    println!("  slowest (seconds into the run: first word): {}", slowest(report, 10));
    if let Some(mib) = report.pool_idle_mib {
        println!("the pools at their floors held {mib:.1} MiB while they waited for the first people");
    }
    let last_pid = report.samples.last().map(|s| s.pid);
    let last: Vec<_> = report.samples.iter().filter(|s| Some(s.pid) == last_pid).collect();
    // After warm-up: from the third sample of the daemon serving at the end.
    let (warm, end) = (last.get(2.min(last.len().saturating_sub(1))), last.last());
    if let (Some(warm), Some(end)) = (warm, end) {
        println!(
            "baaahtd (pid {}): resident {:.1} MiB at {:.0} s → {:.1} MiB at {:.0} s; descriptors {} → {}",
            end.pid,
            warm.rss_kib as f64 / 1024.0,
            warm.at,
            end.rss_kib as f64 / 1024.0,
            end.at,
            warm.descriptors,
            end.descriptors
        );
    }
    println!(
        "  samples (s: MiB/fds): {}",
        report
            .samples
            .iter()
            .map(|s| format!("{:.0}:{:.0}/{}", s.at, s.rss_kib as f64 / 1024.0, s.descriptors))
            .collect::<Vec<_>>()
            .join(" ")
    );
    match &report.stop_failed {
        None => println!("baaahtd stopped on SIGTERM in {:.1} s", report.stopped_in.as_secs_f64()),
        Some(why) => println!("STOP FAILED after {:.1} s: {why}", report.stopped_in.as_secs_f64()),
    }
    println!(
        "left after the daemon stopped: {} containers {:?}, {} mounts {:?}",
        report.leftover_containers.len(),
        report.leftover_containers,
        report.leftover_mounts.len(),
        report.leftover_mounts
    );
    if !report.tui_not_connected.is_empty() {
        println!("TUIS NOT CONNECTED at the end: {:#?}", report.tui_not_connected);
    }
    let growth = match (warm, end) {
        (Some(warm), Some(end)) => (end.rss_kib as f64 - warm.rss_kib as f64) / 1024.0,
        _ => 0.0,
    };
    println!(
        "RESULT household_sent={sent} answered={answered} refused={refused} lost={} doubled={} scheduled_due={due} scheduled_run={ran} scheduled_skipped={skipped_slots} scheduled_twice={twice} first_word_p50_ms={p50:.0} first_word_p99_ms={p99:.0} rss_growth_mib={growth:.1} stopped_in_s={:.1} stop_ok={} leftover_containers={} leftover_mounts={}",
        lost.len(),
        doubled.len(),
        report.stopped_in.as_secs_f64(),
        report.stop_failed.is_none(),
        report.leftover_containers.len(),
        report.leftover_mounts.len()
    );
}

/// The `n` slowest first words of chats without a fault, with when they were sent: whether a
/// run's tail is its opening (new conversations) or spread through it.
fn slowest(report: &Report, n: usize) -> String {
    let mut first = std::collections::HashMap::<&str, f64>::new();
    for sent in &report.sent {
        let at = first.entry(sent.user.as_str()).or_insert(sent.at);
        *at = at.min(sent.at);
    }
    let mut chats: Vec<(f64, f64, bool)> = report
        .sent
        .iter()
        .filter(|sent| sent.kind == Kind::Chat && sent.fault.is_none())
        .filter_map(|sent| {
            let opens = first.get(sent.user.as_str()) == Some(&sent.at);
            sent.first_word.map(|took| (took.as_secs_f64() * 1e3, sent.at, opens))
        })
        .collect();
    chats.sort_by(|a, b| b.0.total_cmp(&a.0));
    let each = |(ms, at, opens): &(f64, f64, bool)| {
        format!("{at:.1} s: {ms:.0} ms{}", if *opens { " (the person's first)" } else { "" })
    };
    chats.iter().take(n).map(each).collect::<Vec<_>>().join(", ")
}

/// The plan the subcommand's flags make.
pub(crate) fn plan(minutes: u64, users: usize, groups: usize, every: u64, faults: bool, dockerd: bool) -> Plan {
    Plan {
        users,
        groups,
        run_for: Duration::from_secs(minutes * 60),
        message_every: Duration::from_secs(every),
        faults,
        restart_dockerd: dockerd,
        web_people: 0,
        slack_people: 0,
        tui_people: 0,
        outage: Duration::from_secs(30),
        containers: None,
        pools: true,
    }
}
