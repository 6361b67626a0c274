//! Fuzz targets on stable Rust (issue 30, part 4) for `svcplane plan` and `svcplane
//! explain -f`: property tests that feed arbitrary bytes and structure-aware
//! mutations of the shipped example dump to their readers. Each target runs a bounded
//! number of cases (`PROPTEST_CASES`; the defaults take ~20–40 s in a debug build) as
//! part of the normal `scripts/test` run and prints how many ran.
//!
//! A failure prints proptest's shrunk input; fix the code and pin the case as a named
//! regression test next to the code it broke.

// The mutation engine and the runner are the webhook target's: one copy for both.
#[path = "../../../webhook/tests/fuzz/mutate.rs"]
mod mutate;
#[path = "../../../webhook/tests/fuzz/runner.rs"]
mod runner;

mod plan_explain;
