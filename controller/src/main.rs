//! The `svcplane` binary: parse flags, set up logging, run the subcommand.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use svcplane_controller::cli::{Cli, Command};
use svcplane_controller::plan;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // Usage errors exit 2 (clap); bad input exits 1.
    let cli = Cli::parse();
    // Logs go to stderr; RUST_LOG overrides the quiet default.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
    match cli.command {
        Command::Plan(args) => {
            let mut stderr = std::io::stderr().lock();
            let result = plan::run(
                &args,
                &mut std::io::stdin().lock(),
                &mut std::io::stdout().lock(),
                &mut stderr,
            );
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    let _ = writeln!(stderr, "{e}");
                    ExitCode::from(e.exit_code())
                }
            }
        }
    }
}
