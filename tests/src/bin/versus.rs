//! `versus`: the same seeded workloads under upstream kube-controller-manager and under
//! `svcplane run`, each on a fresh kube-apiserver, side by side (see
//! `svcplane_tests::versus`).
//!
//! ```text
//! cargo build --release --bin svcplane
//! SVCPLANE_ENVTEST_BIN=target/envtest/envtest \
//!   cargo run -p svcplane-tests --bin versus -- rolling cold --scale 1
//! ```
//!
//! Workloads: `cold`, `rolling`, `churn`, `large` (all by default). One table per
//! workload on stdout, progress on stderr. Exits 1 if a side fails its correctness
//! check or does not converge, 2 if a run could not be made.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use svcplane_tests::versus::controllers::Limits;
use svcplane_tests::versus::workloads::{RollingSize, Shape, Workload};
use svcplane_tests::versus::{self, Config, Side, progress, report};

#[derive(Debug, Parser)]
#[command(
    about = "Upstream kube-controller-manager vs svcplane run, same workloads, real API server"
)]
struct Args {
    /// Workloads to run: cold, rolling, churn, large (default: all).
    workloads: Vec<Workload>,
    /// Multiplies the workloads' counts (and churn's duration).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Seed of the objects and changes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Both controllers' `--kube-api-qps`.
    #[arg(long, default_value_t = 20.0)]
    qps: f64,
    /// Both controllers' `--kube-api-burst`.
    #[arg(long, default_value_t = 30)]
    burst: u32,
    /// Run one side only.
    #[arg(long)]
    only: Option<Side>,
    /// Seconds each measured phase may take to converge.
    #[arg(long, default_value_t = 1800)]
    timeout: u64,
    /// The svcplane binary (default: target/release/svcplane if built, else the one
    /// beside this binary).
    #[arg(long)]
    svcplane: Option<PathBuf>,
    /// Sizes of `rolling`, SERVICESxPODS, comma-separated: one table each (the
    /// Service count is multiplied by --scale).
    #[arg(long, value_delimiter = ',', default_value = "10x50")]
    rolling_sizes: Vec<RollingSize>,
}

/// `target/release/svcplane` if present, else `svcplane` beside this binary.
fn default_svcplane() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let dir = exe.parent().context("this binary has no directory")?;
    let release = dir.parent().map(|t| t.join("release").join("svcplane"));
    Ok(release
        .filter(|p| p.is_file())
        .unwrap_or_else(|| dir.join("svcplane")))
}

/// The Kubernetes version the harness is built from (its go.mod).
fn upstream_version() -> &'static str {
    include_str!("../../envtest/go.mod")
        .lines()
        .find_map(|l| l.trim().strip_prefix("k8s.io/kubernetes "))
        .unwrap_or("unknown")
}

fn main() -> ExitCode {
    let args = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "versus: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &Args) -> anyhow::Result<bool> {
    let svcplane = match &args.svcplane {
        Some(p) => p.clone(),
        None => default_svcplane()?,
    };
    anyhow::ensure!(
        svcplane.is_file() || args.only == Some(Side::Upstream),
        "{} is missing: cargo build --release --bin svcplane, or pass --svcplane",
        svcplane.display()
    );
    let config = Config {
        scale: args.scale,
        seed: args.seed,
        limits: Limits {
            qps: args.qps,
            burst: args.burst,
        },
        timeout: Duration::from_secs(args.timeout),
        svcplane: svcplane.clone(),
        rolling: RollingSize::DEFAULT,
    };
    let workloads = if args.workloads.is_empty() {
        Workload::ALL.to_vec()
    } else {
        args.workloads.clone()
    };
    let sides: Vec<Side> = match args.only {
        Some(s) => vec![s],
        None => Side::ALL.to_vec(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("building the runtime")?;

    let mut out = std::io::stdout().lock();
    writeln!(out, "machine:  {}", report::machine())?;
    writeln!(
        out,
        "upstream: kube-controller-manager {} (tests/envtest)",
        upstream_version()
    )?;
    writeln!(out, "svcplane: {}", svcplane.display())?;
    writeln!(
        out,
        "settings: --kube-api-qps {} --kube-api-burst {}, scale {}, seed {}",
        args.qps, args.burst, args.scale, args.seed
    )?;
    writeln!(out)?;
    out.flush()?;

    let mut passed = true;
    let runs = workloads.into_iter().flat_map(|w| {
        let sizes = if w == Workload::Rolling {
            args.rolling_sizes.clone()
        } else {
            vec![RollingSize::DEFAULT]
        };
        sizes.into_iter().map(move |size| (w, size))
    });
    for (workload, size) in runs {
        let config = Config {
            rolling: size,
            ..config.clone()
        };
        let title = if workload == Workload::Rolling && size != RollingSize::DEFAULT {
            format!("{workload} {size}")
        } else {
            workload.name().to_owned()
        };
        let mut results = [None, None];
        for (i, side) in Side::ALL.into_iter().enumerate() {
            if !sides.contains(&side) {
                continue;
            }
            let started = Instant::now();
            progress(&format!("{title}/{}: starting", side.name()));
            let r = runtime.block_on(versus::run_side(workload, side, &config))?;
            progress(&format!(
                "{title}/{}: done in {:.0} s",
                side.name(),
                started.elapsed().as_secs_f64()
            ));
            passed &= r.passed();
            results[i] = Some(r);
        }
        let shape = Shape::sized(workload, args.scale, args.seed, size);
        let [up, sp] = &results;
        writeln!(
            out,
            "{}",
            report::render(&title, &shape.describe(), up.as_ref(), sp.as_ref())
        )?;
        out.flush()?;
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
        let a = Args::try_parse_from(["versus", "rolling", "cold", "--only", "svcplane"]).unwrap();
        assert_eq!(a.workloads, [Workload::Rolling, Workload::Cold]);
        assert_eq!(a.only, Some(Side::Svcplane));
        assert!(upstream_version().starts_with("v1."));
        assert_eq!(a.rolling_sizes, [RollingSize::DEFAULT]);
        let b =
            Args::try_parse_from(["versus", "rolling", "--rolling-sizes", "1x50,1x150"]).unwrap();
        assert_eq!(b.rolling_sizes.len(), 2);
    }
}
