//! `baaaht`: the command-line client of the baaaht daemon.

use std::path::PathBuf;
use std::process::ExitCode;

use baaaht_cli::{status, CliError};
use baaaht_proto::v1;
use clap::{Parser, Subcommand};

/// Talk to your baaaht daemon.
#[derive(Debug, Parser)]
#[command(name = "baaaht", version)]
struct Cli {
    /// The daemon's socket [default: $BAAAHT_DATA/data/ipc/orchestrator.sock]
    #[arg(long, env = "BAAAHT_SOCKET", global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show the daemon's version, uptime, data dir, container engine, sessions and containers
    Status {
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
    /// Check that containers are confined: run the self-test in a fresh hardened container
    Doctor {
        /// The role whose container to check
        #[arg(long, default_value = "tool", value_parser = ["assistant", "worker", "researcher", "coder", "memory", "heartbeat", "tool"])]
        role: String,
        /// An IP:PORT on this machine that must not be reachable from inside
        #[arg(long, value_name = "IP:PORT")]
        probe: Option<String>,
        /// Also stream a short completion from this model (provider/model) from inside the
        /// container: checks the agent → daemon → LLM gateway → provider path
        #[arg(long, value_name = "MODEL")]
        llm: Option<String>,
        /// The session the container belongs to (default: self-test)
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Keep the container this many seconds after the report, for inspection
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=600))]
        linger: u32,
        /// Print the raw JSON report
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("baaaht: cannot start the async runtime: {error}");
            return ExitCode::from(71);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("baaaht: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

async fn run(cli: Cli) -> Result<(), CliError> {
    let socket = cli.socket.unwrap_or_else(|| baaaht_cli::default_socket(|key| std::env::var(key).ok()));
    match cli.command {
        Command::Status { json } => {
            let mut client = baaaht_cli::connect(&socket).await?;
            let response = client
                .get_status(v1::StatusRequest {})
                .await
                .map_err(|status| CliError::from_status(status, &socket))?
                .into_inner();
            if json {
                let text = serde_json::to_string_pretty(&status::to_json(&response)).map_err(CliError::Json)?;
                println!("{text}");
            } else {
                print!("{}", status::to_text(&response));
            }
            Ok(())
        }
        Command::Doctor { role, probe, llm, session, linger, json } => {
            let mut client = baaaht_cli::connect(&socket).await?;
            let request = v1::SelfTestRequest {
                role: role_number(&role),
                probe_address: probe.unwrap_or_default(),
                linger_seconds: linger,
                llm_model: llm.unwrap_or_default(),
                session_id: session.unwrap_or_default(),
            };
            let response = client
                .run_self_test(request)
                .await
                .map_err(|status| CliError::from_status(status, &socket))?
                .into_inner();
            if json {
                println!("{}", response.report_json);
            } else {
                print!("{}", baaaht_cli::doctor::to_text(&role, &response));
            }
            if response.ok {
                Ok(())
            } else {
                Err(CliError::SelfTestFailed(response.problems.join("; ")))
            }
        }
    }
}

fn role_number(role: &str) -> i32 {
    let role = match role {
        "assistant" => v1::AgentRole::Assistant,
        "worker" => v1::AgentRole::Worker,
        "researcher" => v1::AgentRole::Researcher,
        "coder" => v1::AgentRole::Coder,
        "memory" => v1::AgentRole::Memory,
        "heartbeat" => v1::AgentRole::Heartbeat,
        _ => v1::AgentRole::Tool,
    };
    role as i32
}
