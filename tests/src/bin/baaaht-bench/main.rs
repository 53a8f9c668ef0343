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

mod abuse;
mod browser;
mod channels;
mod channels_email;
mod channels_matrix;
mod containment;
mod delegation;
mod edge;
mod egress;
mod household;
mod identity;
mod isolation;
mod llm;
mod llm_clouds;
mod local_model;
mod mcp;
mod memory;
mod ops;
mod pool;
mod redact;
mod relay;
mod scheduler;
mod slack;
mod tools;
mod tui;
mod turn;
mod undo;
mod web;
mod web_push;

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
    /// Tokens from a provider to an agent: straight, through the gateway, through daemon + gateway
    Llm {
        /// Unpaced tokens per throughput run (one answer: the gateway stops one past 16 MiB, about
        /// 190,000 of the fake's tokens)
        #[arg(long, default_value_t = 100_000)]
        tokens: usize,
        /// Tokens per stream in the paced (100 tokens/s) latency runs
        #[arg(long, default_value_t = 300)]
        paced_tokens: usize,
        /// Throughput runs of each path (at least 3)
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// AgentDojo's user tasks and security cases through the real daemon with a model that always
    /// obeys the attack: attack success, utility and questions per task, taint off (the baseline)
    /// and on with a careful person, one who allows everything, and nobody to ask
    Containment {
        /// The benchmark (only `agentdojo`)
        #[arg(long, default_value = "agentdojo")]
        suite: String,
        /// AgentDojo's attack that fills the injection vectors
        #[arg(long, default_value = "important_instructions")]
        attack: String,
        /// Only this AgentDojo suite (workspace, travel, banking, slack)
        #[arg(long)]
        only: Option<String>,
        /// Only the first N user tasks of each suite
        #[arg(long)]
        users: Option<usize>,
        /// The modes, in order: off, careful, permissive, nobody
        #[arg(long, default_value = "off,careful,permissive,nobody")]
        modes: String,
    },
    /// A model's answer through the daemon's relay and through a tunnel of the gateway's egress
    /// socket (a gateway in its container, which has no network) vs straight over TCP
    Relay {
        /// Requests timed for the first token (at least 100)
        #[arg(long, default_value_t = 300)]
        requests: usize,
        /// Tokens of each long answer timed for throughput (at least 1000)
        #[arg(long, default_value_t = 20_000)]
        tokens: usize,
    },
    /// A new session's first tool turn and first tool call with the warm pools on and off,
    /// beside warm ones and docker run --rm, and the memory pooled containers hold
    Pool {
        /// New sessions with the pools on, and as many off (at least 10)
        #[arg(long, default_value_t = 15)]
        runs: usize,
        /// Warm turns and calls (at least 20)
        #[arg(long, default_value_t = 30)]
        warm: usize,
    },
    /// A tool call (read_file, 1 KiB) in a warm and a cold tool container vs docker exec/run
    Tools {
        /// Warm calls (at least 200)
        #[arg(long, default_value_t = 300)]
        warm: usize,
        /// Cold calls (at least 20)
        #[arg(long, default_value_t = 25)]
        cold: usize,
    },
    /// Tool calls under runc and under gVisor (warm, cold, a 1,000-file grep, python3 start)
    /// beside docker run --rm with each runtime
    Isolation {
        /// Warm calls of each kind per tier (at least 100)
        #[arg(long, default_value_t = 200)]
        warm: usize,
        /// Cold calls and docker runs per tier (at least 15)
        #[arg(long, default_value_t = 20)]
        cold: usize,
    },
    /// A turn in which the Assistant delegates to the Worker, warm and cold, vs docker run;
    /// resident memory of the daemon with many sessions and of an agent process
    Delegation {
        /// Warm and cold turns each (at least 50)
        #[arg(long, default_value_t = 50)]
        runs: usize,
        /// Active sessions for the memory measurement
        #[arg(long, default_value_t = 50)]
        sessions: usize,
    },
    /// A household of people on one daemon for minutes, with faults: what became of every
    /// message, scheduled runs, first-word latency, the daemon's memory and what it left
    Household {
        #[arg(long, default_value_t = 30)]
        minutes: u64,
        #[arg(long, default_value_t = 25)]
        users: usize,
        #[arg(long, default_value_t = 5)]
        groups: usize,
        /// Each person's mean pause between messages, in seconds
        #[arg(long, default_value_t = 30)]
        every: u64,
        /// Inject faults on a schedule
        #[arg(long)]
        faults: bool,
        /// Among the faults, restart dockerd
        #[arg(long)]
        dockerd: bool,
        /// Of the users, how many use the web gateway (signed in through the OIDC provider)
        #[arg(long, default_value_t = 3)]
        web: usize,
        /// Of the users, how many use Slack (the gateway in its container, the fake Slack)
        #[arg(long, default_value_t = 3)]
        slack: usize,
        /// Of the host users, how many use the TUI in a terminal (tmux)
        #[arg(long, default_value_t = 3)]
        tui: usize,
        /// Instead of one run: runs without faults at a rising number of active people (each
        /// `--minutes` long) up to the first whose p99 first word exceeds 1 s: the capacity line
        #[arg(long)]
        capacity: bool,
        /// The daemon's container cap (`container.max_concurrent`; default: the daemon's, `auto`)
        #[arg(long)]
        containers: Option<u32>,
        /// Without the warm pools (`container.pools` all 0), to see what they give
        #[arg(long)]
        no_pools: bool,
    },
    /// "hello" in two new conversations to a local llama.cpp server (scripts/local-model): the
    /// second's first word, its instructions and tools cached by the server, vs the first's
    LocalModel {
        /// Rounds of two conversations each (at least 3)
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// The server's address
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        server: String,
    },
    /// A one-tool turn against a model with 800 ms to its first token: its answer returned
    /// directly vs re-written by the Assistant; a conversation's input tokens with prompt caching
    Turn {
        /// Turns of each kind (at least 5)
        #[arg(long, default_value_t = 10)]
        runs: usize,
        /// Turns of the conversation whose input tokens are counted (at least 2)
        #[arg(long, default_value_t = 10)]
        conversation: usize,
    },
    /// What naming an end user costs per RPC: host client vs a gateway naming its user, and
    /// with an OIDC ID token verified against cached keys
    Identity {
        /// Calls of each path (at least 1000)
        #[arg(long, default_value_t = 3000)]
        calls: usize,
    },
    /// The daemon's resident memory under rounds of refused work by a hostile gateway user,
    /// and after it
    Abuse {
        /// Seconds of abuse (at least 30)
        #[arg(long, default_value_t = 120)]
        seconds: u64,
    },
    /// What meeting a new end user costs (their user made and kept durably), with few users
    /// known and with many, vs a call naming a user already known
    FirstContact {
        /// Users known before the second measurement (at least 1000)
        #[arg(long, default_value_t = 3000)]
        users: usize,
        /// First contacts measured at each size (at least 100)
        #[arg(long, default_value_t = 200)]
        calls: usize,
    },
    /// The scheduler: tick time and memory with many tasks, HEARTBEAT.md edit → regenerated
    /// tasks, claim → agent start vs docker run
    Scheduler {
        /// Active tasks (at least 1000)
        #[arg(long, default_value_t = 10_000)]
        tasks: usize,
        /// Simulated minutes of ticks (at least 60)
        #[arg(long, default_value_t = 1440)]
        minutes: usize,
        /// HEARTBEAT.md edits (at least 10)
        #[arg(long, default_value_t = 20)]
        edits: usize,
        /// Scheduled runs on the real daemon (at least 3)
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// `baaaht tui` on a pseudo-terminal: keypress → screen while an answer streams (vs a raw
    /// `cat`'s echo), launch → usable prompt (vs a one-shot `baaaht status`), resident memory
    Tui {
        /// Keys timed while streaming and idle (at least 100)
        #[arg(long, default_value_t = 300)]
        samples: usize,
        /// Launches timed (at least 5)
        #[arg(long, default_value_t = 10)]
        launches: usize,
        /// Tokens of the streamed answer (200 per second)
        #[arg(long, default_value_t = 4000)]
        tokens: usize,
    },
    /// What metrics and the audit log add to a tool call (on vs off), and a scrape's time with
    /// many active sessions vs idle
    Ops {
        /// Interleaved calls on each daemon (at least 200)
        #[arg(long, default_value_t = 1000)]
        calls: usize,
        /// Active sessions for the scrape (at least 1)
        #[arg(long, default_value_t = 50)]
        sessions: usize,
        /// Scrapes timed idle and busy (at least 50)
        #[arg(long, default_value_t = 200)]
        scrapes: usize,
    },
    /// A warm MCP tool call through the daemon vs the same call on the server's stdio, and a
    /// server's cold start vs the same start done directly
    Mcp {
        /// Warm calls of each path (at least 200)
        #[arg(long, default_value_t = 300)]
        calls: usize,
        /// Cold starts of each (at least 5)
        #[arg(long, default_value_t = 10)]
        starts: usize,
    },
    /// A context's search index with 100,000 memories and 1,000,000 messages: search p50/p99,
    /// indexing throughput, a rebuild from the files, size; beside the word-count search it
    /// replaced, on the same 2,000 entries
    Memory {
        #[arg(long, default_value_t = 100_000)]
        memories: usize,
        #[arg(long, default_value_t = 1_000_000)]
        messages: usize,
        /// Searches timed of each kind (at least 200)
        #[arg(long, default_value_t = 1000)]
        queries: usize,
        /// Messages written to real session logs for the rebuild from the files (at least 10,000)
        #[arg(long, default_value_t = 100_000)]
        rebuild_messages: usize,
    },
    /// The Slack gateway against the fake Slack: first token → first update in Slack vs the
    /// CLI's path, and events per second with 20 channels active vs a host client
    Slack {
        /// DMs timed (at least 10)
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Rounds of 20 channel mentions (at least 2)
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// The chat gateways on the gateway kit (Telegram against its fake, email against real
    /// Dovecot and Postfix, Matrix against a real Synapse): first visible answer vs the CLI's path, messages per second with
    /// 20 people writing vs a host client, and the gateway's resident memory idle and after 50
    /// people (with BAAAHT_GATEWAY_BIN_DIR=target/release, a release build's gateways)
    Channels {
        /// DMs (and mails) timed for the first visible answer (at least 10)
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Rounds of 20 people writing at once (at least 2)
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Only this gateway's part: telegram, email or matrix
        #[arg(long, value_parser = ["telegram", "email", "matrix"])]
        only: Option<String>,
    },
    /// The web gateway with 50 signed-in users: first token in the browser's event stream vs
    /// the CLI's path, and painted in Chromium vs the gateway's event; messages per second vs a
    /// host client, and its resident memory
    Web {
        /// Messages timed for the first token (at least 10)
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Rounds of 50 users writing at once (at least 2)
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// A 10 MB download by a Coder's command through the tool runner's proxy (plain and
    /// tunnelled) vs the same download from a container on the bridge network
    Egress {
        /// Downloads of each path (at least 5)
        #[arg(long, default_value_t = 10)]
        downloads: usize,
    },
    /// The redactor with 50 secrets and gitleaks' rules: per KiB of session text vs JSON
    /// serialization, and what it adds to a warm tool call and a streamed answer's first token
    Redact {
        /// Runs over 64 KiB (at least 20)
        #[arg(long, default_value_t = 50)]
        runs: usize,
        /// Tool calls and deltas timed (at least 200)
        #[arg(long, default_value_t = 1000)]
        calls: usize,
    },
    /// What keeping a turn's changes for its undo adds to a writing turn (1,000 and 100,000
    /// files, 10 changed) beside the writes themselves, what an undo takes, and the store's
    /// size after 100 turns over a 100 MB project beside the bytes they wrote
    Undo {
        /// Turns timed per project (at least 20)
        #[arg(long, default_value_t = 50)]
        runs: usize,
    },
    /// The browser tool: a page built by JavaScript opened and read, cold and warm, beside
    /// `chromium --headless --dump-dom` on the host; the browser container's memory
    Browser {
        /// Cold and warm opens timed (at least 10)
        #[arg(long, default_value_t = 20)]
        runs: usize,
    },
    /// A cold container running `true` through baaaht's runtime vs `docker run --rm`
    Containers {
        /// Runs of each (at least 20)
        #[arg(long, default_value_t = 25)]
        runs: usize,
        /// The image to run
        #[arg(long, default_value = "baaaht/base:latest")]
        image: String,
    },
}

fn main() -> Result<()> {
    baaaht_proto::lifecycle::use_ring_for_tls();
    match Cli::parse().command {
        Bench::Daemon { runs } => daemon(runs.max(10)),
        Bench::Containers { runs, image } => containers(runs.max(20), &image),
        Bench::Delegation { runs, sessions } => delegation::run(runs.max(50), sessions.max(1)),
        Bench::Identity { calls } => identity::run(calls.max(1000)),
        Bench::Household {
            minutes,
            users,
            groups,
            every,
            faults,
            dockerd,
            web,
            slack,
            tui,
            capacity,
            containers,
            no_pools,
        } => {
            let users = users.max(1);
            let plan = household::plan(minutes.max(1), users, groups.max(1), every.max(1), faults, dockerd);
            let (web_people, slack_people) = (web.min(users), slack.min(users - web.min(users)));
            let plan =
                household::Plan { web_people, slack_people, tui_people: tui, containers, pools: !no_pools, ..plan };
            if capacity {
                household::capacity(plan)
            } else {
                household::run(plan)
            }
        }
        Bench::LocalModel { rounds, server } => local_model::run(rounds.max(3), server.trim_end_matches('/')),
        Bench::Turn { runs, conversation } => turn::run(runs.max(5), conversation.max(2)),
        Bench::Abuse { seconds } => abuse::run(seconds.max(30)),
        Bench::FirstContact { users, calls } => identity::first_contact(users.max(1000), calls.max(100)),
        Bench::Scheduler { tasks, minutes, edits, runs } => {
            scheduler::run(tasks.max(1000), minutes.max(60), edits.max(10), runs.max(3))
        }
        Bench::Tui { samples, launches, tokens } => tui::run(samples.max(100), launches.max(5), tokens.max(1000)),
        Bench::Ops { calls, sessions, scrapes } => ops::run(calls.max(200), sessions.max(1), scrapes.max(50)),
        Bench::Mcp { calls, starts } => mcp::run(calls.max(200), starts.max(5)),
        Bench::Memory { memories, messages, queries, rebuild_messages } => {
            memory::run(memories.max(1000), messages.max(10_000), queries.max(200), rebuild_messages.max(10_000))
        }
        Bench::Slack { runs, rounds } => slack::run(runs.max(10), rounds.max(2)),
        Bench::Web { runs, rounds } => web::run(runs.max(10), rounds.max(2)),
        Bench::Channels { runs, rounds, only } => channels::run(runs.max(10), rounds.max(2), only.as_deref()),
        Bench::Tools { warm, cold } => tools::run(warm.max(200), cold.max(20)),
        Bench::Undo { runs } => undo::run(runs.max(20)),
        Bench::Browser { runs } => browser::run(runs.max(10)),
        Bench::Pool { runs, warm } => pool::run(runs.max(10), warm.max(20)),
        Bench::Isolation { warm, cold } => isolation::run(warm.max(100), cold.max(15)),
        Bench::Egress { downloads } => egress::run(downloads.max(5)),
        Bench::Redact { runs, calls } => redact::run(runs.max(20), calls.max(200)),
        Bench::Llm { tokens, paced_tokens, runs } => llm::run(tokens.max(16), paced_tokens.max(10), runs.max(3)),
        Bench::Relay { requests, tokens } => relay::run(requests.max(100), tokens.max(1000)),
        Bench::Containment { suite, attack, only, users, modes } => {
            if suite != "agentdojo" {
                anyhow::bail!("--suite: `{suite}` is not a benchmark this knows; it runs agentdojo");
            }
            containment::run(containment::Asked { attack, only, users, modes: containment::modes(&modes)? })
        }
    }
}

/// A daemon with a lingering Coder whose credentials the bench calls with.
pub(crate) struct Coder {
    pub(crate) daemon: TestDaemon,
    pub(crate) client: client::Client,
    _coder: baaaht_tests::LingeringAgent,
}

pub(crate) async fn coder(options: DaemonOptions) -> Result<Coder> {
    let daemon = TestDaemon::start(options)?;
    let coder = daemon.lingering_agent("coder", None, &[])?;
    let client = client::connect(&coder.socket, coder.options()).await?;
    Ok(Coder { daemon, client, _coder: coder })
}

/// Starts `count` sessions of user `bench`, each with a first turn (its Assistant running).
pub(crate) async fn active_sessions(daemon: &TestDaemon, count: usize) -> Result<()> {
    use baaaht_tests::scenario::{self, message, user};
    let mut client = scenario::host_client(daemon).await?;
    for _ in 0..count {
        let created = v1::NewSessionRequest { context: Some(user("bench")), title: String::new() };
        let mut hello = message(user("bench"), "bench", "hello");
        hello.session_id = client.sessions.new_session(created).await?.into_inner().id;
        let seen = scenario::turn(&mut client, hello, Duration::from_secs(120)).await?;
        if seen.reply.is_none() {
            bail!("no reply: {:?}", seen.error);
        }
    }
    Ok(())
}

/// One row of a results table.
pub(crate) struct Row {
    name: String,
    unit: &'static str,
    values: Vec<f64>,
}

impl Row {
    /// An empty row named `name`, its values in `unit`.
    pub(crate) fn new(name: impl Into<String>, unit: &'static str) -> Row {
        Row { name: name.into(), unit, values: vec![] }
    }

    pub(crate) fn print(&mut self) -> f64 {
        let p50 = median(&mut self.values);
        let p99 = percentile(&mut self.values, 99.0);
        let (min, max) = (self.values[0], self.values[self.values.len() - 1]);
        println!(
            "{:<72} {:>10.2} {:>10.2} {:>10.2} {:>10.2}  {} (n={})",
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

/// The first stamp in `text` (the fake provider's `@NANOS` tokens).
pub(crate) fn first_stamp(text: &str) -> Option<u64> {
    text.split_whitespace().find_map(baaaht_tests::fake_provider::stamp_of)
}

/// The CLI's path, a channel benchmark's baseline: `count` sent by `host` for the user
/// `cli-bench`, and its first stamped token's time from the provider to the host client, in ms.
pub(crate) async fn cli_first_token(host: &mut baaaht_proto::client::Client) -> anyhow::Result<f64> {
    use anyhow::Context as _;
    use baaaht_proto::v1;
    let message = baaaht_tests::scenario::message(baaaht_tests::scenario::user("cli-bench"), "cli-bench", "count");
    let subscription = v1::EventSubscription {
        context: message.context.clone(),
        session_id: String::new(),
        channel: 0,
        notifies: false,
    };
    let mut events = host.sessions.subscribe_events(subscription).await?.into_inner();
    let sent = host.sessions.send_user_message(message).await?.into_inner();
    let mut first = None;
    while let Some(event) =
        tokio::time::timeout(std::time::Duration::from_secs(60), events.message()).await.context("timeout")??
    {
        if event.turn_id != sent.turn_id {
            continue;
        }
        match event.event {
            Some(v1::orchestrator_event::Event::TextDelta(delta)) if first.is_none() => {
                first = first_stamp(&delta.text)
                    .map(|stamp| baaaht_tests::fake_provider::clock_nanos().saturating_sub(stamp));
            }
            Some(v1::orchestrator_event::Event::Reply(_)) | Some(v1::orchestrator_event::Event::Error(_)) => break,
            _ => {}
        }
    }
    Ok(first.context("no first token")? as f64 / 1e6)
}

/// A process's resident memory, in MiB.
pub(crate) fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    status_mib(pid, "VmRSS")
}

/// The `field` of a process's `/proc/{pid}/status` (a size in KiB there), in MiB: `VmRSS` all
/// it holds in memory, `RssAnon` its own data (the rest is the binary's code and files read).
pub(crate) fn status_mib(pid: u32, field: &str) -> anyhow::Result<f64> {
    use anyhow::Context as _;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .with_context(|| field.to_string())?;
    Ok(kib / 1024.0)
}

/// A message of user `bench` sent in `session`, and its turn followed.
pub(crate) struct Following {
    events: tonic::Streaming<v1::OrchestratorEvent>,
    turn: String,
    /// When it was sent.
    pub(crate) sent_at: Instant,
}

impl Following {
    pub(crate) async fn send(client: &mut client::Client, session: &str, text: &str) -> Result<Following> {
        let context = Some(baaaht_tests::scenario::user("bench"));
        let subscription = v1::EventSubscription { context, session_id: session.into(), channel: 0, notifies: false };
        let events = client.sessions.subscribe_events(subscription).await?.into_inner();
        let mut asked = baaaht_tests::scenario::message(baaaht_tests::scenario::user("bench"), "bench", text);
        asked.session_id = session.into();
        let sent_at = Instant::now();
        let turn = client.sessions.send_user_message(asked).await?.into_inner().turn_id;
        Ok(Following { events, turn, sent_at })
    }

    /// The turn's next event (within two minutes).
    pub(crate) async fn next(&mut self) -> Result<v1::orchestrator_event::Event> {
        loop {
            let event = tokio::time::timeout(Duration::from_secs(120), self.events.message())
                .await
                .context("no reply within 120 s")??
                .context("the event stream ended")?;
            if event.turn_id == self.turn {
                if let Some(event) = event.event {
                    return Ok(event);
                }
            }
        }
    }
}

pub(crate) fn header() {
    println!("{:<72} {:>10} {:>10} {:>10} {:>10}", "measurement", "p50", "p99", "min", "max");
}

fn daemon(runs: usize) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut ready = Row { name: "baaahtd start → READY=1 (sd_notify)".into(), unit: "ms", values: vec![] };
    let mut first_rpc = Row { name: "baaahtd start → first GetStatus answered".into(), unit: "ms", values: vec![] };
    let mut idle_rss = Row { name: "baaahtd idle resident memory".into(), unit: "MiB", values: vec![] };
    let mut restart =
        Row { name: "baaahtd restart on an existing data dir → READY=1".into(), unit: "ms", values: vec![] };
    let mut exec = Row { name: "baseline: fork+exec `baaahtd --version`".into(), unit: "ms", values: vec![] };

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
            client.system.get_status(v1::StatusRequest::default()).await?;
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

fn containers(runs: usize, image: &str) -> Result<()> {
    use baaaht_daemon::base::config::RuntimeChoice;
    use baaaht_daemon::sandbox::container::{self, ContainerKind, ContainerLabels, ContainerSpec, Isolation, Limits};
    let tokio = baaaht_tests::runtime();
    let engine = tokio.block_on(container::probe(RuntimeChoice::Docker));
    let runtime = engine
        .runtime
        .with_context(|| format!("no docker engine: {}", engine.status.degraded_reason().unwrap_or_default()))?;
    if !tokio.block_on(runtime.image_exists(image))? {
        bail!("{image} is missing: run `baaahtd images build`");
    }
    let seccomp = std::env::temp_dir().join(format!("baaaht-bench-seccomp-{}.json", std::process::id()));
    std::fs::write(&seccomp, baaaht_daemon::sandbox::container::docker::SECCOMP_PROFILE)?;
    let spec = |n: usize| ContainerSpec {
        name: format!("baaaht-bench-{}-{n}", std::process::id()),
        image: image.to_string(),
        labels: ContainerLabels {
            role: "tool".into(),
            session_id: "bench".into(),
            context: "user:bench".into(),
            owner: "bench".into(),
            kind: ContainerKind::Task,
        },
        mounts: vec![],
        env: vec![],
        limits: Limits { cpus: 1.0, memory_bytes: 512 << 20, pids: 256, tmp_bytes: 64 << 20, disk_bytes: 1 << 30 },
        command: vec!["true".into()],
        working_dir: None,
        isolation: Isolation::Runc,
    };
    let mut total = Row { name: "baaaht runtime: create+start+wait+remove".into(), unit: "ms", values: vec![] };
    let mut create = Row { name: "  create".into(), unit: "ms", values: vec![] };
    let mut start = Row { name: "  start".into(), unit: "ms", values: vec![] };
    let mut wait = Row { name: "  wait".into(), unit: "ms", values: vec![] };
    let mut remove = Row { name: "  remove".into(), unit: "ms", values: vec![] };
    let mut plain = Row { name: "baseline: docker run --rm IMAGE true".into(), unit: "ms", values: vec![] };
    let mut hardened = Row { name: "docker run --rm + the same hardening flags".into(), unit: "ms", values: vec![] };
    let hardening = [
        "--user",
        "1000:1000",
        "--read-only",
        "--tmpfs",
        "/tmp:rw,nosuid,nodev,size=64m",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--network",
        "none",
        "--memory",
        "512m",
        "--memory-swap",
        "512m",
        "--pids-limit",
        "256",
        "--cpus",
        "1",
    ];
    let seccomp_opt = format!("seccomp={}", seccomp.display());
    let ms = |started: Instant| started.elapsed().as_secs_f64() * 1e3;
    for n in 0..runs {
        // Interleave the three so drift on the machine hits them alike.
        let started = Instant::now();
        let status = Command::new("docker").args(["run", "--rm", image, "true"]).stdout(Stdio::null()).status()?;
        if !status.success() {
            bail!("docker run failed: {status}");
        }
        plain.values.push(ms(started));

        let started = Instant::now();
        let status = Command::new("docker")
            .arg("run")
            .arg("--rm")
            .args(hardening)
            .args(["--security-opt", &seccomp_opt, image, "true"])
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("hardened docker run failed: {status}");
        }
        hardened.values.push(ms(started));

        let spec = spec(n);
        let result: Result<()> = tokio.block_on(async {
            let started = Instant::now();
            let step = Instant::now();
            let id = runtime.create(&spec).await?;
            create.values.push(ms(step));
            let step = Instant::now();
            runtime.start(&id).await?;
            start.values.push(ms(step));
            let step = Instant::now();
            let exit = runtime.wait(&id).await?;
            wait.values.push(ms(step));
            let step = Instant::now();
            runtime.remove(&id).await?;
            remove.values.push(ms(step));
            total.values.push(ms(started));
            if exit.code != 0 {
                bail!("`true` exited with {}", exit.code);
            }
            Ok(())
        });
        result?;
    }
    std::fs::remove_file(&seccomp)?;
    let engine = runtime.engine();
    println!(
        "baaaht-bench containers: {runs} cold runs of `true` in {image} ({} {}, API {})\n",
        engine.kind.as_str(),
        engine.version,
        engine.api_version
    );
    header();
    let total_p50 = total.print();
    create.print();
    start.print();
    wait.print();
    remove.print();
    let plain_p50 = plain.print();
    let hardened_p50 = hardened.print();
    let ratio = total_p50 / plain_p50;
    println!(
        "\nruntime / docker run --rm = {ratio:.2} (target ≤ 1.0); runtime / hardened docker run = {:.2}",
        total_p50 / hardened_p50
    );
    println!(
        "RESULT runtime_p50_ms={total_p50:.1} docker_run_p50_ms={plain_p50:.1} hardened_docker_run_p50_ms={hardened_p50:.1} ratio={ratio:.2}"
    );
    Ok(())
}
