//! The one way a test skips itself: [`skip`].
//!
//! A skipped test passes, so a run that skipped things looks green. To make that
//! visible, every skip goes through [`skip`], which
//!
//! 1. under `CI=true`, fails the test instead when the skip is [`SkipKind::Missing`]
//!    (a prerequisite of the machine is missing: CI must have everything);
//! 2. prints one `SKIPPED` line per reason and test binary straight to stderr (the test
//!    harness captures `eprintln!` of passing tests, and a skip must be seen);
//! 3. appends a record to `$SVCPLANE_SKIP_DIR/<test binary>-<pid>.tsv` when that variable
//!    is set. `scripts/test` (the README's test command) sets it to
//!    `target/test-skips/`, clears it before the run and prints a summary of the
//!    records after `cargo test` ends, so a partial run says so on its last lines.
//!
//! Record format, one line per skipped test, tab-separated:
//! `kind  binary  test  reason  enable` where `kind` is `missing` or `not-applicable`
//! and `enable` is what to do (one command or step) for the test to run.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Environment variable naming the directory skip records are written to.
pub const ENV_SKIP_DIR: &str = "SVCPLANE_SKIP_DIR";

/// Why a test skips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipKind {
    /// Something the machine lacks (Go, python3, a registry, a built binary): an
    /// error under `CI=true`.
    Missing,
    /// The test does not apply to the configuration chosen (e.g. an external cluster
    /// that cannot reach this machine): never an error.
    NotApplicable,
}

/// A reason to skip and how to remove it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub kind: SkipKind,
    /// What is missing, in one line.
    pub reason: String,
    /// The command or step that makes the test run, in one line.
    pub enable: String,
}

impl Skip {
    pub fn missing(reason: impl Into<String>, enable: impl Into<String>) -> Self {
        Self {
            kind: SkipKind::Missing,
            reason: reason.into(),
            enable: enable.into(),
        }
    }

    pub fn not_applicable(reason: impl Into<String>, enable: impl Into<String>) -> Self {
        Self {
            kind: SkipKind::NotApplicable,
            reason: reason.into(),
            enable: enable.into(),
        }
    }
}

/// Is this a CI run (`CI=true`)?
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Reasons already printed by this process.
static PRINTED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Skips the calling test: see the module documentation. `test` names it in messages
/// (the libtest thread name is recorded beside it when there is one). Panics under
/// `CI=true` for [`SkipKind::Missing`].
pub fn skip(test: &str, why: &Skip) {
    if why.kind == SkipKind::Missing && in_ci() {
        panic!(
            "{test}: would be SKIPPED, which is an error under CI=true: {}. To enable: {}",
            why.reason, why.enable
        );
    }
    let first = PRINTED
        .lock()
        .map(|mut p| {
            p.get_or_insert_with(HashSet::new)
                .insert(why.reason.clone())
        })
        .unwrap_or(true);
    if first {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test} (and every other test in this binary that needs it): {}. To enable: {}",
            why.reason,
            why.enable
        );
    }
    record(test, why);
}

/// The test binary's name without cargo's hash suffix (`differential-1a2b…` →
/// `differential`).
pub fn binary_name() -> String {
    let stem = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "unknown".into());
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() >= 8 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            name.to_owned()
        }
        _ => stem,
    }
}

fn record(test: &str, why: &Skip) {
    if let Some(dir) = std::env::var_os(ENV_SKIP_DIR).filter(|d| !d.is_empty()) {
        write_record(&PathBuf::from(dir), test, why);
    }
}

/// Appends the record of `test` skipping for `why` to this process's file in `dir`.
fn write_record(dir: &Path, test: &str, why: &Skip) {
    let binary = binary_name();
    let name = match std::thread::current().name() {
        Some(thread) if thread != "main" && thread != test => format!("{test} ({thread})"),
        _ => test.to_owned(),
    };
    let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ");
    let kind = match why.kind {
        SkipKind::Missing => "missing",
        SkipKind::NotApplicable => "not-applicable",
    };
    let line = format!(
        "{kind}\t{binary}\t{}\t{}\t{}\n",
        clean(&name),
        clean(&why.reason),
        clean(&why.enable)
    );
    let path = dir.join(format!("{binary}-{}.tsv", std::process::id()));
    // One short `write` per line on an append-mode file: lines of parallel tests do
    // not interleave.
    let written = std::fs::create_dir_all(dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?
            .write_all(line.as_bytes())
    });
    if let Err(e) = written {
        let _ = writeln!(
            std::io::stderr(),
            "warning: cannot record the skip of {test} in {}: {e}",
            path.display()
        );
    }
}

/// Whether `python3` runs; if not, skips `test` (the chart is rendered with Helm's SDK
/// from a Python venv) and returns false.
pub fn python3_or_skip(test: &str) -> bool {
    let has_python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_python {
        skip(
            test,
            &Skip::missing(
                "python3 is not on PATH (the chart is rendered with Helm's SDK and checked with pytest, from a venv)",
                "install python3 (3.10 or newer) with its venv module, e.g. `apt-get install python3 python3-venv`, then run `scripts/test` again",
            ),
        );
    }
    has_python
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_name_strips_the_hash() {
        // The unit-test binary of this crate is `svcplane_tests-<16 hex digits>`.
        assert_eq!(binary_name(), "svcplane_tests");
    }

    #[test]
    fn records_are_one_tab_separated_line_per_skip() {
        let dir = std::env::temp_dir().join(format!("svcplane-skip-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let why = Skip::missing("no\tgo", "install Go\nthen retry");
        write_record(&dir, "suite_a", &why);
        write_record(
            &dir,
            "suite_b",
            &Skip::not_applicable("external", "unset X"),
        );
        let file = dir.join(format!("svcplane_tests-{}.tsv", std::process::id()));
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0][0], "missing");
        assert_eq!(lines[0][1], "svcplane_tests");
        assert!(lines[0][2].starts_with("suite_a"), "{text}");
        assert_eq!(lines[0][3..], ["no go", "install Go then retry"]);
        assert_eq!(lines[1][0], "not-applicable");
    }
}
