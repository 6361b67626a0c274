//! `simulate`: replays issue 10's traces through the real runtime and prints one table
//! per trace (see `svcplane_tests::sim`).
//!
//! ```text
//! cargo run --release -p svcplane-tests --bin simulate -- all
//! cargo run --release -p svcplane-tests --bin simulate -- S2 --scale 0.1 --qps 100 --burst 200 --batch-period 500ms
//! ```
//!
//! `all` runs each trace in a child process of its own, so each table's peak RSS is that
//! trace's alone. Exits 1 if any trace fails its correctness check.

use std::alloc::System;
use std::io::Write;
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use svcplane_controller::shell::coalescing::Coalescing;
use svcplane_tests::sim::{self, Config, Trace};

/// Counts heap bytes (for bytes per cached Pod and the heap figures); the cost is two
/// relaxed atomic adds per allocation.
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

#[derive(Debug, Parser)]
#[command(about = "Replay workload traces through svcplane's runtime on a paused clock")]
struct Args {
    /// S1 (cold start), S2 (rolling update), S3 (topology), S4 (node failure) or all.
    trace: String,
    /// Multiplies every count (Services, Pods, Nodes, Deployment size).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// The controllers' client QPS (`--kube-api-qps`).
    #[arg(long, default_value_t = 20.0)]
    qps: f64,
    /// The controllers' client burst (`--kube-api-burst`).
    #[arg(long, default_value_t = 30)]
    burst: u32,
    /// Batch period of the endpoint controllers (`0`, `500ms`, `1s`); default 0, and S2
    /// runs 0, 500ms and 1s.
    #[arg(long, value_parser = parse_duration)]
    batch_period: Option<Duration>,
    /// `--write-coalescing-window` of the controllers (`0` turns coalescing off);
    /// default: `svcplane run`'s.
    #[arg(long, value_parser = parse_duration)]
    coalescing_window: Option<Duration>,
    /// Override the withdrawals' window (default: a quarter of the window).
    #[arg(long, value_parser = parse_duration, requires = "coalescing_window")]
    withdrawal_window: Option<Duration>,
    /// Seed of the trace (placement, delays, generated names).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (number, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms or 1s"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("{s:?}: unit must be ms, s or m")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    // The runtime's logs, on demand (`RUST_LOG=svcplane_controller=debug`); off by
    // default, since formatting them would be part of the CPU measured.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "simulate: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs the requested trace(s); `Ok(false)` when a correctness check failed.
fn run(args: &Args) -> anyhow::Result<bool> {
    if args.trace.eq_ignore_ascii_case("all") {
        return run_children(args);
    }
    let trace: Trace = args.trace.parse().map_err(anyhow::Error::msg)?;
    let config = Config {
        scale: args.scale,
        qps: args.qps,
        burst: args.burst,
        batch_period: args.batch_period,
        coalescing: args.coalescing_window.map(|w| {
            let mut c = Coalescing::from_window(w);
            if let Some(x) = args.withdrawal_window {
                c.withdrawals = x;
            }
            c
        }),
        seed: args.seed,
        heap: Some(GLOBAL),
    };
    let report = sim::run(trace, &config)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", report.render())?;
    let passed = report.passed();
    writeln!(out, "{}: {}", trace, if passed { "PASS" } else { "FAIL" })?;
    Ok(passed)
}

/// `all`: one child process per trace, in order, with the same flags.
fn run_children(args: &Args) -> anyhow::Result<bool> {
    let exe = std::env::current_exe().context("locating the simulate binary")?;
    let mut passed = true;
    for trace in Trace::ALL {
        let mut cmd = Command::new(&exe);
        cmd.arg(trace.id())
            .arg("--scale")
            .arg(args.scale.to_string())
            .arg("--qps")
            .arg(args.qps.to_string())
            .arg("--burst")
            .arg(args.burst.to_string())
            .arg("--seed")
            .arg(args.seed.to_string());
        if let Some(b) = args.batch_period {
            cmd.arg("--batch-period")
                .arg(format!("{}ms", b.as_millis()));
        }
        if let Some(w) = args.coalescing_window {
            cmd.arg("--coalescing-window")
                .arg(format!("{}ms", w.as_millis()));
        }
        if let Some(w) = args.withdrawal_window {
            cmd.arg("--withdrawal-window")
                .arg(format!("{}ms", w.as_millis()));
        }
        let status = cmd
            .status()
            .with_context(|| format!("running {}", trace.id()))?;
        match status.code() {
            Some(0) => {}
            Some(1) => passed = false,
            _ => anyhow::bail!("{} did not finish ({status})", trace.id()),
        }
    }
    Ok(passed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_parse() {
        Args::command().debug_assert();
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("1h").is_err());
    }
}
