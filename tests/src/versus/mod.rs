//! The side-by-side benchmark behind the `versus` binary (issue 21): the same seeded
//! workload once under upstream kube-controller-manager (the harness's release) and once under
//! `svcplane run`, each against a fresh real kube-apiserver from the envtest harness,
//! measured the same way from outside both.
//!
//! Why this and the simulator both exist: the simulator ([`crate::sim`]) runs svcplane
//! alone, on a paused clock, against a fake, so it is exact and repeatable but cannot
//! say how the upstream controllers do. Here both controllers are black boxes doing
//! real work on a real API server; what is measured is only what the API server and
//! the kernel show, so neither side gets an advantage from instrumentation.
//!
//! One side of one workload ([`run_side`]):
//! 1. a fresh API-server-only harness ([`crate::envtest::launch`]);
//! 2. the workload's Namespaces, Nodes, Services and initial Pods ([`workloads`]);
//! 3. the bench's watch of EndpointSlices and Endpoints ([`observer`]), from before
//!    the controller starts; the initial Pods are announced as changes at the spawn;
//! 4. the controller, started by the bench ([`controllers`]);
//! 5. `cold`: measured from the spawn until every Pod is reflected and writes stop.
//!    Otherwise the initial convergence is not counted: counters, latency and CPU are
//!    taken after it, then the driver makes its changes and the figures are taken once
//!    everything is reflected and no write has come for [`QUIET`];
//! 6. the end state, judged by an independent check ([`state::check`]) and by the pure
//!    planner (re-plan writes, and the write floor from the measured start,
//!    [`crate::sim::floor`]).
//!
//! [`report`] prints both sides in one table.

pub mod controllers;
pub mod observer;
pub mod procstat;
pub mod report;
pub mod state;
pub mod workloads;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use svcplane_controller::core::endpointslice::DEFAULT_MAX_ENDPOINTS_PER_SLICE;
use svcplane_controller::dump::snapshot::Snapshot;
use tokio::time::Instant;

use crate::envtest;
use crate::sim::floor;
use controllers::{Controller, Limits};
use observer::Observer;
use report::SideResult;
use workloads::{Shape, Workload};

/// No write for this long (after every change is reflected) ends a measurement.
pub const QUIET: Duration = Duration::from_secs(3);

/// Which controller runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Upstream,
    Svcplane,
}

impl Side {
    pub const ALL: [Side; 2] = [Side::Upstream, Side::Svcplane];

    pub fn name(self) -> &'static str {
        match self {
            Side::Upstream => "upstream",
            Side::Svcplane => "svcplane",
        }
    }
}

impl std::str::FromStr for Side {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Side::ALL
            .into_iter()
            .find(|x| x.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown side {s:?} (want upstream or svcplane)"))
    }
}

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Multiplies the workloads' counts (and `churn`'s duration).
    pub scale: f64,
    pub seed: u64,
    /// Both controllers' client limits.
    pub limits: Limits,
    /// Per measured phase (the initial convergence gets as long again).
    pub timeout: Duration,
    /// The `svcplane` binary.
    pub svcplane: PathBuf,
    /// The size of `rolling`.
    pub rolling: workloads::RollingSize,
}

/// A progress line on stderr.
pub fn progress(msg: &str) {
    let _ = writeln!(std::io::stderr(), "[versus] {msg}");
}

/// Where a run keeps its logs: removed when the run succeeds.
fn work_dir(workload: Workload, side: Side) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "svcplane-versus-{}-{workload}-{}",
        std::process::id(),
        side.name()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Runs `workload` under `side` on a fresh API server.
pub async fn run_side(
    workload: Workload,
    side: Side,
    config: &Config,
) -> anyhow::Result<SideResult> {
    let dir = work_dir(workload, side)?;
    let result = measure(workload, side, config, &dir)
        .await
        .with_context(|| {
            format!(
                "{workload} under {} (logs in {})",
                side.name(),
                dir.display()
            )
        });
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn measure(
    workload: Workload,
    side: Side,
    config: &Config,
    dir: &std::path::Path,
) -> anyhow::Result<SideResult> {
    // The harness outlives both phases and setup, whatever they take.
    let harness_timeout = config.timeout * 3 + Duration::from_secs(3600);
    let harness = envtest::launch(&[format!("--timeout={}s", harness_timeout.as_secs())])?;
    let client = harness.cluster().client().await?;
    let mut shape = Shape::sized(workload, config.scale, config.seed, config.rolling);
    let t = Instant::now();
    workloads::setup(&client, &shape).await?;
    progress(&format!(
        "{workload}/{}: {} Pods, {} Services, {} Nodes stored in {:.1} s",
        side.name(),
        shape.initial.len(),
        shape.services.len(),
        shape.nodes.len(),
        t.elapsed().as_secs_f64()
    ));
    let observer = Arc::new(Observer::start(harness.cluster().client().await?).await?);
    let services = shape.service_keys();
    let initial: Vec<_> = shape
        .initial
        .iter()
        .map(|p| (p.namespace.clone(), p.name.clone()))
        .collect();

    let spawned = Instant::now();
    observer.change(&initial, observer::PodChange::Status { ready: true });
    let mut controller = Controller::start(side, &harness, &config.svcplane, &config.limits, dir)?;
    let pid = controller.pid();
    controller.wait_ready().await?;

    let mut result = SideResult::default();
    let (start_state, before, start) = if workload == Workload::Cold {
        (Snapshot::default(), procstat::Sample::default(), spawned)
    } else {
        let settled = observer
            .settle(
                &services,
                shape.initial_endpoints_capped(),
                spawned,
                QUIET,
                spawned + config.timeout,
                || controller.alive(),
            )
            .await?;
        let took = settled
            .converged
            .context("the initial state did not converge before the timeout")?;
        progress(&format!(
            "{workload}/{}: initial state converged in {:.1} s",
            side.name(),
            took.as_secs_f64()
        ));
        observer.take_latency();
        let start_state = state::endpoint_state(&client).await?;
        (start_state, procstat::sample(pid)?, Instant::now())
    };
    let writes_before = observer.writes();

    let driving = Instant::now();
    workloads::drive(&client, &observer, &mut shape).await?;
    result.driver = driving.elapsed();
    let settled = observer
        .settle(
            &services,
            shape.endpoints_capped,
            start,
            QUIET,
            Instant::now() + config.timeout,
            || controller.alive(),
        )
        .await?;
    let after = procstat::sample(pid)?;
    let figures = procstat::delta(before, after);
    drop(controller);

    result.writes = observer.writes().since(&writes_before);
    (result.slice_latency, result.endpoints_latency) = observer.take_latency();
    result.resyncs = observer.resyncs();
    result.cpu_seconds = figures.cpu_seconds;
    result.peak_rss = figures.peak_rss;
    result.converged = settled.converged;
    result.last_write = settled.last_write;
    drop(observer);

    let end = state::snapshot(&client).await?;
    result.problems = state::check(&end, 10);
    result.replan = floor::check(&end, DEFAULT_MAX_ENDPOINTS_PER_SLICE, usize::MAX);
    result.floor = floor::floor(&start_state, &end);
    progress(&format!(
        "{workload}/{}: {} writes, {}",
        side.name(),
        result.writes.total(),
        if result.passed() { "PASS" } else { "FAIL" }
    ));
    drop(harness);
    Ok(result)
}
