//! `baaahtd`: parse the arguments, run the command (`baaaht_daemon::cli`), and map a failure
//! to an exit code in one table at the bottom.

use std::process::ExitCode;

use baaaht_daemon::base::datadir::DataDirError;
use baaaht_daemon::cli::{Cli, Failure};
use baaaht_daemon::people::PeopleError;
use baaaht_daemon::sandbox::SandboxError;
use baaaht_daemon::server::bind::BindError;
use baaaht_daemon::work::WorkError;
use baaaht_daemon::DaemonError;
use clap::Parser;

fn main() -> ExitCode {
    baaaht_proto::lifecycle::use_ring_for_tls();
    let cli = Cli::parse();
    match baaaht_daemon::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("baaahtd: {}", baaaht_proto::error_chain(&error));
            ExitCode::from(exit_code(&error))
        }
    }
}

/// The one table of exit codes (sysexits.h values).
fn exit_code(failure: &Failure) -> u8 {
    const SOFTWARE: u8 = 70;
    const OS_ERROR: u8 = 71;
    const CANT_CREATE: u8 = 73;
    const TEMP_FAIL: u8 = 75;
    const CONFIG: u8 = 78;
    const UNAVAILABLE: u8 = 69;
    const DATA_ERROR: u8 = 65;
    const NO_PERMISSION: u8 = 77;
    const USAGE: u8 = 64;
    match failure {
        Failure::Daemon(error) => match error {
            DaemonError::Config(_) | DaemonError::Bind(BindError::NoSuchGroup(_)) => CONFIG,
            DaemonError::DataDir(DataDirError::AlreadyRunning { .. })
            | DaemonError::Bind(BindError::DataDir(DataDirError::AlreadyRunning { .. })) => TEMP_FAIL,
            DaemonError::DataDir(DataDirError::NoHome)
            | DaemonError::Bind(BindError::DataDir(DataDirError::NoHome)) => CONFIG,
            DaemonError::DataDir(_)
            | DaemonError::Bind(BindError::DataDir(_) | BindError::SocketPathTooLong { .. } | BindError::Bind { .. }) => {
                CANT_CREATE
            }
            DaemonError::Defaults(_) => CANT_CREATE,
            DaemonError::Bind(BindError::MetricsBind { .. }) => UNAVAILABLE,
            DaemonError::Serve(_) => SOFTWARE,
            DaemonError::Guard(_)
            | DaemonError::Sandbox(SandboxError::Policy(_))
            | DaemonError::Net(_)
            | DaemonError::Scheduler(_) => CONFIG,
            DaemonError::Sandbox(SandboxError::Container(_)) | DaemonError::Work(WorkError::Ipc { .. }) => CANT_CREATE,
            DaemonError::Gateways(_)
            | DaemonError::Work(WorkError::Gateways(_))
            | DaemonError::People(PeopleError::Identities(_) | PeopleError::Groups(_)) => DATA_ERROR,
        },
        Failure::Runtime(_) => OS_ERROR,
        Failure::Print(_) => SOFTWARE,
        Failure::Engine(_) => UNAVAILABLE,
        Failure::Image(_) => CANT_CREATE,
        Failure::Secrets(baaaht_daemon::guard::secrets::SecretsError::Decrypt { .. }) => NO_PERMISSION,
        Failure::Secrets(_) => DATA_ERROR,
        Failure::NoSuchSecret(_) => DATA_ERROR,
        Failure::Setup(baaaht_daemon::ops::setup::SetupError::Usage(_)) => USAGE,
        Failure::Setup(baaaht_daemon::ops::setup::SetupError::Probe(_)) => UNAVAILABLE,
        Failure::Setup(baaaht_daemon::ops::setup::SetupError::NotConfirmed { .. }) => TEMP_FAIL,
        Failure::Setup(baaaht_daemon::ops::setup::SetupError::Invalid(_)) => CONFIG,
        Failure::Setup(_) => CANT_CREATE,
        Failure::NotReady(_) => 1,
        Failure::Gateway(_) => UNAVAILABLE,
        Failure::Policy(_) => CONFIG,
        Failure::Speech(_) => UNAVAILABLE,
    }
}
