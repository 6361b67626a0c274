//! The `svcplane` binary: parse flags, set up logging, run the subcommand.

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};
use kube::CustomResourceExt;
use svcplane_controller::cli::{Cli, Command, LogFormat};
use svcplane_controller::{
    check_cmd, explain, logging, migrate, plan, rbac_cmd, run_cmd, webhook_cmd,
};
use svcplane_webhook::claim::AllocationClaim;

pub(crate) fn main() -> ExitCode {
    // Usage errors exit 2 (clap); bad input exits 1.
    let cli = parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let v = cli.verbosity;
    match cli.command {
        Command::Plan(args) => {
            logging::init(v, "warn", LogFormat::Text);
            on_stdio(
                "",
                |i, o, e| plan::run(&args, i, o, e),
                plan::PlanError::exit_code,
            )
        }
        Command::Run(args) => {
            if let Err(msg) = args.check() {
                usage_error(msg);
            }
            logging::init(v, "info,kube=warn", args.log_format);
            match run_cmd::main(&args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(
                        error = svcplane_controller::kube_client::error_chain(&e),
                        "svcplane run failed"
                    );
                    ExitCode::FAILURE
                }
            }
        }
        Command::Webhook(args) => {
            if let Err(msg) = args.check() {
                usage_error(msg);
            }
            logging::init(v, "info,kube=warn", args.log_format);
            match webhook_cmd::run(&args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(
                        error = svcplane_controller::kube_client::error_chain(&e),
                        "svcplane webhook failed"
                    );
                    ExitCode::FAILURE
                }
            }
        }
        Command::Explain(args) => {
            logging::init(v, "warn", LogFormat::Text);
            on_stdio(
                "error: ",
                |i, o, e| explain::run(&args, i, o, e),
                explain::ExplainError::exit_code,
            )
        }
        Command::Migrate(args) => {
            logging::init(v, "warn", LogFormat::Text);
            on_stdio(
                "error: ",
                |i, o, e| migrate::run(&args, i, o, e),
                migrate::MigrateError::exit_code,
            )
        }
        Command::Check(args) => {
            logging::init(v, "warn", LogFormat::Text);
            let outcome = check_cmd::run(&args);
            let code = outcome.exit_code();
            let _ = match outcome.message() {
                (true, msg) => writeln!(std::io::stdout().lock(), "{msg}"),
                (false, msg) => writeln!(std::io::stderr().lock(), "{msg}"),
            };
            ExitCode::from(code)
        }
        Command::Rbac(args) => {
            logging::init(v, "warn", LogFormat::Text);
            match rbac_cmd::run(&args) {
                Ok(yaml) => {
                    let mut out = std::io::stdout().lock();
                    if out.write_all(yaml.as_bytes()).is_err() {
                        return ExitCode::FAILURE;
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    let _ = writeln!(std::io::stderr(), "svcplane rbac: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Crd => match serde_saphyr::to_string(&AllocationClaim::crd()) {
            Ok(yaml) => {
                let _ = std::io::stdout().lock().write_all(yaml.as_bytes());
                ExitCode::SUCCESS
            }
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "encoding the CRD: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

/// The command line. Run as the kubectl plugin (`kubectl-svcplane`), usage
/// messages name the command as the user typed it: `kubectl svcplane`.
fn parse() -> Cli {
    let plugin = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .is_some_and(|name| name.starts_with("kubectl-"));
    if !plugin {
        return Cli::parse();
    }
    let matches = Cli::command().bin_name("kubectl svcplane").get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// A usage error clap could not detect (exit 2, clap's format).
fn usage_error(msg: String) -> ! {
    Cli::command()
        .error(clap::error::ErrorKind::MissingRequiredArgument, msg)
        .exit()
}

/// Runs an offline subcommand on the process' standard streams; its error goes to
/// stderr after `prefix` and chooses the exit code.
fn on_stdio<E: std::fmt::Display>(
    prefix: &str,
    run: impl FnOnce(
        &mut std::io::StdinLock<'static>,
        &mut std::io::StdoutLock<'static>,
        &mut std::io::StderrLock<'static>,
    ) -> Result<(), E>,
    exit_code: impl FnOnce(&E) -> u8,
) -> ExitCode {
    let mut stderr = std::io::stderr().lock();
    match run(
        &mut std::io::stdin().lock(),
        &mut std::io::stdout().lock(),
        &mut stderr,
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(stderr, "{prefix}{e}");
            ExitCode::from(exit_code(&e))
        }
    }
}
