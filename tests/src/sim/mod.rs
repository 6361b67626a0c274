//! The workload simulator behind `simulate` (issue 10): seeded, deterministic traces
//! replayed through the real `svcplane run` runtime and the in-process fake API server on
//! a paused tokio clock, measured against the floor of writes any correct controller
//! needs.
//!
//! Why a paused clock: a rolling update or a node failure takes minutes of cluster time,
//! and a QPS-limited cold start of 10 000 Services takes a quarter of an hour. On a
//! paused current-thread runtime, virtual time jumps to the next timer whenever every
//! task waits, so a trace costs only the CPU of the work it causes, latencies are exact
//! and repeatable (no scheduler noise), and a run is a function of its seed.
//!
//! - [`cluster`]: realistic Node/Service/Pod documents and the seeded RNG;
//! - [`harness`]: the fake, the controllers' (rate-limited) client, the observer, settle;
//! - [`traffic`]: per-client request counts and the fake's time per client;
//! - [`observe`]: Pod transition → first EndpointSlice write latency;
//! - [`floor`]: write floors and the correctness check from the pure planner;
//! - [`measure`]: CPU, RSS and heap figures;
//! - [`traces`]: the traces, S1 to S4;
//! - [`report`]: the printed tables.
//!
//! ```ignore
//! let report = svcplane_tests::sim::run(Trace::ColdStart, &Config { scale: 0.01, ..Config::default() })?;
//! print!("{}", report.render());
//! assert!(report.passed());
//! ```

pub mod cluster;
pub mod floor;
pub mod harness;
pub mod measure;
pub mod observe;
pub mod report;
pub mod traces;
pub mod traffic;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;

pub use measure::Heap;
pub use report::Report;

/// The traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Trace {
    /// S1: cold start.
    ColdStart,
    /// S2: rolling update.
    RollingUpdate,
    /// S3: topology hints and Node changes.
    Topology,
    /// S4: 20 % of the Nodes fail.
    NodeFailure,
}

impl Trace {
    pub const ALL: [Trace; 4] = [
        Trace::ColdStart,
        Trace::RollingUpdate,
        Trace::Topology,
        Trace::NodeFailure,
    ];

    /// `S1` ... `S4`.
    pub fn id(self) -> &'static str {
        match self {
            Trace::ColdStart => "S1",
            Trace::RollingUpdate => "S2",
            Trace::Topology => "S3",
            Trace::NodeFailure => "S4",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Trace::ColdStart => "S1 cold start",
            Trace::RollingUpdate => "S2 rolling update",
            Trace::Topology => "S3 topology hints",
            Trace::NodeFailure => "S4 node failure",
        }
    }
}

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl FromStr for Trace {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Trace::ALL
            .into_iter()
            .find(|t| t.id().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown trace {s:?} (want S1, S2, S3, S4 or all)"))
    }
}

/// Settings of a run.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Multiplies every count (Services, Pods, Nodes, Deployment size).
    pub scale: f64,
    /// The controllers' client limit (`--kube-api-qps`, `--kube-api-burst`).
    pub qps: f64,
    pub burst: u32,
    /// Batch period of all three controllers; `None`: 0, and S2 runs 0, 500 ms and 1 s.
    pub batch_period: Option<Duration>,
    /// Write coalescing; `None`: `svcplane run`'s default.
    pub coalescing: Option<svcplane_controller::shell::coalescing::Coalescing>,
    pub seed: u64,
    /// The instrumented global allocator, if the binary installed one.
    pub heap: Heap,
}

impl Default for Config {
    /// Full size, upstream's default client limit (QPS 20, burst 30).
    fn default() -> Self {
        Self {
            scale: 1.0,
            qps: 20.0,
            burst: 30,
            batch_period: None,
            coalescing: None,
            seed: 1,
            heap: None,
        }
    }
}

/// Runs one trace on a fresh paused current-thread runtime.
pub fn run(trace: Trace, config: &Config) -> anyhow::Result<Report> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .context("building the paused runtime")?;
    runtime.block_on(traces::run(trace, config))
}
