//! `baaaht-agent`: the program baaaht runs inside its containers.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "baaaht-agent", version, about = "Runs inside baaaht's containers")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Take turns from the daemon as this container's agent (its role comes with its token)
    Agent,
    /// Serve tool calls from the daemon as this container's resident runner (its init)
    Runner {
        /// A mounted folder tools may use, `PATH` (read-write) or `PATH:ro`; the first is the
        /// default for relative paths
        #[arg(long = "mount", value_name = "PATH[:ro]", required = true)]
        mounts: Vec<String>,
        /// Serve one call, then exit (a cold tool container)
        #[arg(long)]
        once: bool,
        /// The folder each call's result is written to as well (file IPC, spec §12.4)
        #[arg(long, value_name = "PATH")]
        results: Option<std::path::PathBuf>,
        /// The --results folder is on a memory filesystem: results are not synced to disk
        #[arg(long, requires = "results")]
        results_in_memory: bool,
        /// The folder the `message` tool queues messages in
        #[arg(long, value_name = "PATH")]
        messages: Option<std::path::PathBuf>,
        /// The workspace's cap in bytes, checked after each call that can write (when no
        /// filesystem of that size holds it)
        #[arg(long, value_name = "BYTES")]
        workspace_cap: Option<u64>,
        /// The IPC folder's cap in bytes (the parent of --results), checked after each call
        /// that can write (when no filesystem of that size holds it)
        #[arg(long, value_name = "BYTES")]
        ipc_cap: Option<u64>,
        /// Serve the `browser` tool with this Chromium (a session's browser container)
        #[arg(long, value_name = "PATH")]
        browser: Option<std::path::PathBuf>,
        /// The browser's most pages open at once
        #[arg(long, default_value_t = 4, requires = "browser")]
        browser_pages: usize,
        /// The most bytes one download may have
        #[arg(long, default_value_t = 100 << 20, requires = "browser")]
        browser_download_bytes: u64,
        /// The most bytes of a page's text one answer carries
        #[arg(long, default_value_t = 40_000, requires = "browser")]
        browser_text_bytes: usize,
        /// The JavaScript heap one page may grow to, in MiB
        #[arg(long, default_value_t = 512, requires = "browser")]
        browser_heap_mib: u64,
        /// The browser container's memory in bytes: its pages are ended before they fill it
        #[arg(long, default_value_t = 1 << 30, requires = "browser")]
        browser_memory_bytes: u64,
        /// The browser's profile folder (its logins), of the person it browses for
        #[arg(long, value_name = "PATH", requires = "browser")]
        browser_profile: Option<std::path::PathBuf>,
        /// The most bytes the profile may hold: past it the sites' stored data goes
        #[arg(long, default_value_t = 256 << 20, requires = "browser")]
        browser_profile_bytes: u64,
    },
    /// Start an MCP server as the daemon says and relay its stdio (an MCP server's container)
    Mcp,
    /// Clone a skill's repository through the daemon's egress socket (a skill fetch's container)
    FetchSkill {
        /// The https:// URL of the repository
        #[arg(long)]
        url: String,
        /// A branch or tag; empty: the default branch
        #[arg(long = "ref", default_value = "")]
        git_ref: String,
        /// The folder inside the repository that holds SKILL.md; empty: its root
        #[arg(long, default_value = "")]
        path: String,
        /// The most files the skill's folder may hold
        #[arg(long, default_value_t = 500)]
        max_files: usize,
        /// The most bytes the skill's folder may hold
        #[arg(long, default_value_t = 10 * 1024 * 1024)]
        max_bytes: u64,
        /// The daemon's egress socket
        #[arg(long, value_name = "PATH")]
        socket: std::path::PathBuf,
        /// The folder `skill/` and `commit` are written to
        #[arg(long, value_name = "PATH")]
        out: std::path::PathBuf,
    },
    /// Report (as JSON) whether this container's confinement holds; exit 3 if it does not
    SelfTest {
        /// A TCP address that must not be reachable from here, e.g. a test server on the host
        #[arg(long, value_name = "IP:PORT")]
        probe: Option<SocketAddr>,
        /// Stay alive this many seconds after the report (at most 600), for inspection
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=600))]
        linger: u64,
        /// Also stream a short completion from this model (provider/model) through the daemon
        #[arg(long, value_name = "MODEL")]
        llm: Option<String>,
    },
}

fn main() -> ExitCode {
    baaaht_proto::lifecycle::use_ring_for_tls();
    match Cli::parse().command {
        Command::Agent => {
            let socket = std::path::Path::new(baaaht_agent::selftest::DAEMON_SOCKET);
            match baaaht_agent::agent::run(socket) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("baaaht-agent agent: {error}");
                    ExitCode::from(69)
                }
            }
        }
        Command::Runner {
            mounts,
            once,
            results,
            results_in_memory,
            messages,
            workspace_cap,
            ipc_cap,
            browser,
            browser_pages,
            browser_download_bytes,
            browser_text_bytes,
            browser_heap_mib,
            browser_memory_bytes,
            browser_profile,
            browser_profile_bytes,
        } => {
            let mounts: Vec<(std::path::PathBuf, bool)> = mounts
                .iter()
                .map(|mount| match mount.strip_suffix(":ro") {
                    Some(path) => (path.into(), false),
                    None => (mount.into(), true),
                })
                .collect();
            let socket = std::path::Path::new(baaaht_agent::selftest::DAEMON_SOCKET);
            let settings = baaaht_agent::runner::Settings {
                results,
                results_in_memory,
                messages,
                workspace_cap,
                ipc_cap,
                once,
                browser: browser.map(|chromium| baaaht_agent::browser::Limits {
                    chromium,
                    pages: browser_pages,
                    download_bytes: browser_download_bytes,
                    text_bytes: browser_text_bytes,
                    heap_mib: browser_heap_mib,
                    memory_bytes: browser_memory_bytes,
                    profile: browser_profile.unwrap_or_else(|| std::path::PathBuf::from("/tmp/browser-profile")),
                    profile_bytes: browser_profile_bytes,
                }),
                ..baaaht_agent::runner::Settings::default()
            };
            match baaaht_agent::runner::run(socket, &mounts, settings) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("baaaht-agent runner: {error}");
                    ExitCode::from(69)
                }
            }
        }
        Command::Mcp => {
            let socket = std::path::Path::new(baaaht_agent::selftest::DAEMON_SOCKET);
            match baaaht_agent::mcp::run(socket) {
                // The server's own exit code is the container's.
                Ok(exit) => ExitCode::from(u8::try_from(exit.code).unwrap_or(70)),
                Err(error) => {
                    eprintln!("baaaht-agent mcp: {error}");
                    ExitCode::from(69)
                }
            }
        }
        Command::FetchSkill { url, git_ref, path, max_files, max_bytes, socket, out } => {
            let fetch = baaaht_agent::fetch::Fetch { url, git_ref, path, most: (max_files, max_bytes), socket, out };
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(error) => {
                    eprintln!("baaaht-agent fetch-skill: cannot start: {error}");
                    return ExitCode::from(69);
                }
            };
            match runtime.block_on(baaaht_agent::fetch::run(&fetch)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(failed) => {
                    eprintln!("baaaht-agent fetch-skill: {}", failed.why);
                    ExitCode::from(failed.code)
                }
            }
        }
        Command::SelfTest { probe, linger, llm } => {
            let mut report = baaaht_agent::selftest::run(probe);
            if let Some(model) = llm {
                let socket = std::path::Path::new(baaaht_agent::selftest::DAEMON_SOCKET);
                report.llm = Some(baaaht_agent::llmcheck::run(socket, &model));
                report.judge();
            }
            match serde_json::to_string(&report) {
                Ok(json) => println!("{json}"),
                Err(error) => {
                    eprintln!("baaaht-agent: cannot encode the report: {error}");
                    return ExitCode::from(70);
                }
            }
            if linger > 0 {
                std::thread::sleep(Duration::from_secs(linger));
            }
            if report.problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            }
        }
    }
}
