//! Running one fuzz target: a bounded number of proptest cases, then one line saying
//! how many ran and how long they took.

use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestError, TestRunner};

/// The environment variable proptest itself reads: the number of cases of every target
/// here when set (CI can raise it for a longer run, or lower it for a quick one).
pub(crate) const CASES_ENV: &str = "PROPTEST_CASES";

/// Run `property` on `cases` inputs from `strategy` (`PROPTEST_CASES` overrides the
/// default: the defaults are sized for ~20–40 s per target in a debug build on two
/// cores, so the normal test run stays bounded). Fails with proptest's shrunk input.
pub(crate) fn run<S: Strategy>(
    name: &str,
    default_cases: u32,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let cases = std::env::var(CASES_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default_cases);
    let config = ProptestConfig {
        cases,
        // Failures become named regression tests in these files instead of
        // `.proptest-regressions` files nobody reviews.
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let ran = AtomicU32::new(0);
    let started = Instant::now();
    let result = TestRunner::new(config).run(&strategy, |input| {
        ran.fetch_add(1, Ordering::Relaxed);
        property(input)
    });
    // Straight to stderr: the harness captures `eprintln!` of passing tests, and the
    // count is the point (a target that ran 0 cases proves nothing).
    let _ = writeln!(
        std::io::stderr(),
        "[fuzz] {name}: {} cases in {:.1} s (wanted {cases}; set {CASES_ENV} to change)",
        ran.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, input)) => {
            panic!("{name}: {why}\nminimal failing input: {input:#?}")
        }
        Err(TestError::Abort(why)) => panic!("{name}: aborted: {why}"),
    }
}
