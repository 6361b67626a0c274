//! Building the `tests/envtest` harness on first use.
//!
//! The harness binary lives at `target/envtest/envtest`, beside a stamp file
//! (`envtest.stamp`) holding a hash of every file under `tests/envtest` and of the
//! build command. The first test that needs a real control plane calls [`harness`]:
//!
//! - `SVCPLANE_ENVTEST_BIN` set: that binary is used as it is (never built);
//! - binary present and stamp current: used;
//! - otherwise, with `go` on `PATH`: built with the command `.ci/run` used to run,
//!   `go build -mod=readonly -trimpath -buildvcs=false -ldflags='-s -w'`, into a
//!   temporary file renamed into place, then stamped. Progress goes to stderr (a
//!   first build takes minutes) and go's output to `target/envtest/build.log`;
//! - without Go, a binary that is present but stale or unstamped is used with a
//!   warning; no binary at all is a skip naming what to install.
//!
//! Exactly one build happens however many test processes ask at once: builders take
//! an exclusive lock on `target/envtest/build.lock` (`File::lock`, an advisory `flock`
//! released when the process exits, even on a crash), and re-check the stamp once they
//! hold it. Within one process the result is computed once ([`harness`] caches it).
//! A failed build leaves `envtest.failed` (stamp hash and reason); later processes
//! report the same failure without retrying for [`FAILURE_TTL`], so one run does not
//! pay for one failed build per test binary. `scripts/test` removes it at its start.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use crate::skip::Skip;

use super::ENV_BIN;

/// The build command's arguments after `go`, part of the stamp.
const GO_BUILD: &[&str] = &[
    "build",
    "-mod=readonly",
    "-trimpath",
    "-buildvcs=false",
    "-ldflags=-s -w",
];

/// How long a recorded build failure is reported instead of building again.
pub const FAILURE_TTL: Duration = Duration::from_secs(10 * 60);

/// How often a running build says it is still running.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// What to do when Go is missing.
const ENABLE_GO: &str = "install Go 1.26 or newer (https://go.dev/dl/) with access to the Go \
                         module proxy, then run `scripts/test` again";

/// The workspace root.
fn workspace() -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests.parent().unwrap_or(tests).to_path_buf()
}

/// `target/envtest/envtest` under the workspace root: where the harness is built.
pub fn default_bin() -> PathBuf {
    workspace().join("target").join("envtest").join("envtest")
}

/// The harness binary to start, building it first if needed; the reason to skip if
/// there is none. Computed once per process.
pub fn harness() -> Result<PathBuf, Skip> {
    static HARNESS: OnceLock<Result<PathBuf, Skip>> = OnceLock::new();
    HARNESS.get_or_init(locate).clone()
}

fn locate() -> Result<PathBuf, Skip> {
    if let Some(bin) = std::env::var_os(ENV_BIN).filter(|p| !p.is_empty()) {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(Skip::missing(
                format!("{ENV_BIN}={} does not exist", bin.display()),
                format!(
                    "unset {ENV_BIN} (the tests then build the harness themselves) or point it at a built harness"
                ),
            ))
        };
    }
    let bin = default_bin();
    let source = workspace().join("tests").join("envtest");
    let want = match stamp_of(&source) {
        Ok(s) => s,
        Err(e) => {
            return Err(Skip::missing(
                format!("cannot read {}: {e}", source.display()),
                "restore tests/envtest from the repository",
            ));
        }
    };
    let dir = bin.parent().map(Path::to_path_buf).unwrap_or_default();
    let stamp = dir.join("envtest.stamp");
    if is_current(&bin, &stamp, &want) {
        return Ok(bin);
    }
    let Some(go) = go_version() else {
        if bin.is_file() {
            say(&format!(
                "warning: {} was built from another version of tests/envtest (or by hand) and \
                 Go is not on PATH to rebuild it; using it as it is",
                bin.display()
            ));
            return Ok(bin);
        }
        return Err(Skip::missing(
            "the real-control-plane harness (tests/envtest) is not built and Go is not on PATH to build it",
            ENABLE_GO,
        ));
    };
    std::fs::create_dir_all(&dir).map_err(|e| {
        Skip::missing(
            format!("cannot create {}: {e}", dir.display()),
            "make target/ writable",
        )
    })?;
    let _lock = lock(&dir.join("build.lock"))?;
    // Another process may have built it while this one waited for the lock.
    if is_current(&bin, &stamp, &want) {
        return Ok(bin);
    }
    let failed = dir.join("envtest.failed");
    if let Some(reason) = recent_failure(&failed, &want) {
        return Err(build_failure(reason, &dir));
    }
    match build(&go, &source, &bin, &dir) {
        Ok(()) => {
            let _ = std::fs::remove_file(&failed);
            write_atomically(&stamp, want.as_bytes()).map_err(|e| {
                Skip::missing(
                    format!("cannot write {}: {e}", stamp.display()),
                    "make target/ writable",
                )
            })?;
            Ok(bin)
        }
        Err(reason) => {
            let _ = std::fs::write(&failed, format!("{want}\n{reason}\n"));
            Err(build_failure(reason, &dir))
        }
    }
}

fn build_failure(reason: String, dir: &Path) -> Skip {
    Skip::missing(
        format!("building the real-control-plane harness failed: {reason}"),
        format!(
            "make the Go module proxy reachable (GOPROXY; go's output is in {}), then run \
             `scripts/test` again",
            dir.join("build.log").display()
        ),
    )
}

/// Is `bin` present and stamped with `want`?
fn is_current(bin: &Path, stamp: &Path, want: &str) -> bool {
    bin.is_file() && std::fs::read_to_string(stamp).is_ok_and(|s| s == want)
}

/// `go version`, or `None` when `go` cannot be run.
fn go_version() -> Option<String> {
    let out = Command::new("go")
        .arg("version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The stamp of the harness sources: FNV-1a (64 bit) over the build command and every
/// file under `source` (relative path, length, content), in path order.
pub fn stamp_of(source: &Path) -> std::io::Result<String> {
    let mut files = Vec::new();
    collect_files(source, source, &mut files)?;
    files.sort();
    let mut hash = Fnv::default();
    hash.write(GO_BUILD.join(" ").as_bytes());
    for rel in &files {
        let bytes = std::fs::read(source.join(rel))?;
        hash.write(rel.as_bytes());
        hash.write(&(bytes.len() as u64).to_le_bytes());
        hash.write(&bytes);
    }
    Ok(format!("fnv1a64:{:016x}\n", hash.0))
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

/// 64-bit FNV-1a: stable across Rust releases, unlike `DefaultHasher`.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// Holds `path` locked exclusively; waits (saying so) while another process holds it.
fn lock(path: &Path) -> Result<std::fs::File, Skip> {
    let fail = |e: std::io::Error| {
        Skip::missing(
            format!("cannot lock {}: {e}", path.display()),
            "make target/ writable",
        )
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(fail)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            say("waiting for another test process that is building the envtest harness ...");
            file.lock().map_err(fail)?;
            Ok(file)
        }
        Err(std::fs::TryLockError::Error(e)) => Err(fail(e)),
    }
}

/// The reason of a failed build of the same sources less than [`FAILURE_TTL`] ago.
fn recent_failure(path: &Path, want: &str) -> Option<String> {
    let age = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())?;
    if age > FAILURE_TTL {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let (stamp, reason) = text.split_once('\n')?;
    (format!("{stamp}\n") == want)
        .then(|| format!("{} (recorded in {})", reason.trim(), path.display()))
}

/// Runs the build; on failure, the last line go printed.
fn build(go: &str, source: &Path, bin: &Path, dir: &Path) -> Result<(), String> {
    let log_path = dir.join("build.log");
    let tmp = dir.join(format!("envtest.tmp-{}", std::process::id()));
    say(&format!(
        "building the real-control-plane harness (tests/envtest: etcd, kube-apiserver, \
         kube-controller-manager, kubectl) with {go}: the first build downloads about \
         0.6 GB of modules and compiles Kubernetes, which takes many minutes (the README's \
         Prerequisites give measured times); go's output goes to {}",
        log_path.display()
    ));
    let log = std::fs::File::create(&log_path)
        .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
    let log_err = log
        .try_clone()
        .map_err(|e| format!("cannot write {}: {e}", log_path.display()))?;
    let start = Instant::now();
    let mut child = Command::new("go")
        .args(GO_BUILD)
        .arg("-o")
        .arg(&tmp)
        .arg(".")
        .current_dir(source)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|e| format!("cannot start go: {e}"))?;
    let mut next_note = PROGRESS_EVERY;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for go build: {e}")),
        }
        if start.elapsed() >= next_note {
            say(&format!(
                "  still building the envtest harness ({} s) ...",
                start.elapsed().as_secs()
            ));
            next_note += PROGRESS_EVERY;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    if !status.success() {
        let _ = std::fs::remove_file(&tmp);
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output")
            .trim()
            .to_owned();
        say(&format!(
            "go build of tests/envtest failed ({status}):\n{text}"
        ));
        return Err(last);
    }
    std::fs::rename(&tmp, bin)
        .map_err(|e| format!("cannot move {} to {}: {e}", tmp.display(), bin.display()))?;
    let size = std::fs::metadata(bin).map(|m| m.len()).unwrap_or(0);
    say(&format!(
        "envtest harness built in {} s: {} ({} MB)",
        start.elapsed().as_secs(),
        bin.display(),
        size / 1_000_000
    ));
    Ok(())
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// A progress line, straight to stderr (test output capture does not apply).
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_values() {
        let mut h = Fnv::default();
        h.write(b"");
        assert_eq!(h.0, 0xcbf2_9ce4_8422_2325);
        let mut h = Fnv::default();
        h.write(b"a");
        assert_eq!(h.0, 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn the_stamp_covers_every_harness_file() {
        let dir = std::env::temp_dir().join(format!("svcplane-stamp-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let write = |name: &str, text: &str| {
            let _ = std::fs::create_dir_all(dir.join(name).parent().unwrap_or(&dir));
            let _ = std::fs::write(dir.join(name), text);
        };
        write("go.mod", "module x\n");
        write("main.go", "package main\n");
        let a = stamp_of(&dir).ok();
        write("main.go", "package main // changed\n");
        let b = stamp_of(&dir).ok();
        write("sub/more.go", "package sub\n");
        let c = stamp_of(&dir).ok();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(a.is_some() && b.is_some() && c.is_some());
        assert_ne!(a, b);
        assert_ne!(b, c);
    }

    #[test]
    fn a_recorded_failure_is_reported_only_for_the_same_sources() {
        let dir = std::env::temp_dir().join(format!("svcplane-failed-test-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("envtest.failed");
        let _ = std::fs::write(&path, "fnv1a64:0000000000000001\nno proxy\n");
        let same = recent_failure(&path, "fnv1a64:0000000000000001\n");
        let other = recent_failure(&path, "fnv1a64:0000000000000002\n");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(same.is_some_and(|r| r.starts_with("no proxy")));
        assert_eq!(other, None);
    }
}
