//! Fuzz targets on stable Rust (issue 30, part 4) for the admission webhook: property
//! tests that feed arbitrary bytes and structure-aware mutations of real
//! AdmissionReviews to the webhook's request path. Each target runs a bounded number
//! of cases (`PROPTEST_CASES`; the defaults take ~20–40 s in a debug build) as part of
//! the normal `scripts/test` run and prints how many ran.
//!
//! `mutate` and `runner` are shared with `plan`/`explain`'s target
//! (`controller/tests/fuzz/`), which includes them by path.
//!
//! A failure prints proptest's shrunk input; fix the code and pin the case as a named
//! regression test next to the code it broke.

mod admission;
mod mutate;
mod runner;
