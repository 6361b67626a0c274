//! Every `simulate` trace at a small scale: correctness and write-floor assertions only,
//! never timings (CPU and latency figures depend on the machine and on the QPS limit;
//! they are reported by `cargo run --release -p svcplane-tests --bin simulate -- all`).
//!
//! Each trace runs on its own paused runtime, so the four tests may run in parallel.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use svcplane_tests::sim::report::Report;
use svcplane_tests::sim::{self, Config, Trace};

fn run(trace: Trace, scale: f64) -> Report {
    let config = Config {
        scale,
        ..Config::default()
    };
    let report = sim::run(trace, &config).unwrap_or_else(|e| panic!("{trace}: {e:#}"));
    for r in &report.runs {
        assert!(
            r.problems.is_empty(),
            "{trace} [{}] not converged:\n{}\n{}",
            r.label,
            r.problems.join("\n"),
            report.render()
        );
        assert_eq!(
            r.latency.never_reflected,
            0,
            "{trace} [{}]: transitions never reflected\n{}",
            r.label,
            report.render()
        );
        assert!(r.latency.transitions > 0, "{trace}: no transition recorded");
        assert_eq!(
            r.latency.reflected, r.latency.transitions,
            "{trace} [{}]",
            r.label
        );
        assert!(
            r.stats_agree,
            "{trace}: fake.stats() minus the observer differs from the controllers' client"
        );
    }
    assert!(report.passed());
    report
}

#[test]
fn s1_cold_start_writes_exactly_the_floor() {
    let report = run(Trace::ColdStart, 0.02);
    let r = &report.runs[0];
    // 200 Services of 10 Pods in 2 namespaces: one slice and one Endpoints each,
    // created once, and one sync per key.
    assert_eq!((r.floor.slices, r.floor.endpoints), (200, 200));
    assert_eq!(r.writes, r.floor.total(), "{}", report.render());
    assert_eq!(r.pods, 2000);
    assert_eq!(r.retries, 0);
}

#[test]
fn s2_rolling_update_converges_at_every_batch_period() {
    let report = run(Trace::RollingUpdate, 0.05);
    assert_eq!(report.runs.len(), 3, "batch periods 0, 500 ms, 1 s");
    for r in &report.runs {
        assert!(r.writes >= r.floor.total(), "{}", report.render());
        assert_eq!(r.pods, 50);
    }
    // Batching can only save writes.
    assert!(report.runs[2].writes <= report.runs[0].writes);
}

#[test]
fn s3_node_changes_that_move_no_allocation_write_nothing() {
    let report = run(Trace::Topology, 0.01);
    let r = &report.runs[0];
    assert_eq!(r.phases.len(), 5, "{}", report.render());
    let cold = &r.phases[0];
    assert_eq!(cold.writes, cold.floor.total(), "{}", report.render());
    let noop: Vec<_> = r.phases.iter().filter(|p| p.expect_noop).collect();
    assert_eq!(noop.len(), 2);
    for p in noop {
        assert_eq!(p.floor.total(), 0, "{}: {}", p.name, report.render());
        assert_eq!(p.writes, 0, "{}: {}", p.name, report.render());
    }
    let moved = &r.phases[4];
    assert!(
        moved.floor.total() > 0 && moved.writes > 0,
        "the zone-e pool must move allocations: {}",
        report.render()
    );
}

#[test]
fn s4_node_failure_reflects_every_pod_change() {
    let report = run(Trace::NodeFailure, 0.01);
    let r = &report.runs[0];
    assert_eq!(r.pods, 1000, "every evicted Pod was replaced");
    assert!(r.writes >= r.floor.total(), "{}", report.render());
}
