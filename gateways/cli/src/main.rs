//! `baaaht`: the command-line client of the baaaht daemon. The commands are in
//! [`baaaht_cli::args`], what each does in `baaaht_cli::commands`.

use std::process::ExitCode;

use baaaht_cli::args::Cli;
use baaaht_cli::terminal::clean;
use clap::Parser as _;

fn main() -> ExitCode {
    baaaht_proto::lifecycle::use_ring_for_tls();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("baaaht: cannot start the async runtime: {error}");
            return ExitCode::from(71);
        }
    };
    match runtime.block_on(baaaht_cli::commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("baaaht: {}", clean(&error.to_string()));
            ExitCode::from(error.exit_code())
        }
    }
}
