//! Building the test tools written in Go on first use: the `tests/envtest` harness,
//! and for the single-node cluster (`crate::node_cluster`) helm and CoreDNS.
//!
//! Each tool is a [`GoTool`]: a Go module under `tests/` ([`ENVTEST`], [`HELM`],
//! [`COREDNS`]) built into `target/<name>/<name>`, beside a stamp file
//! (`<name>.stamp`) holding a hash of every file of the module and of the build
//! command. The first test that needs one calls [`GoTool::binary`] (the harness:
//! [`harness`]):
//!
//! - its override variable set (`SVCPLANE_ENVTEST_BIN` for the harness): that binary
//!   is used as it is (never built);
//! - binary present and stamp current: used;
//! - otherwise, with `go` on `PATH`: built with the tool's command (for the harness
//!   [`GO_BUILD`], `go build -mod=readonly -trimpath -buildvcs=false` with version
//!   ldflags) into a temporary file renamed into place, then stamped. Progress goes
//!   to stderr (a first build takes minutes) and go's output to
//!   `target/<name>/build.log`;
//! - without Go, a binary that is present but stale or unstamped is used with a
//!   warning; no binary at all is a skip naming what to install.
//!
//! Exactly one build happens however many test processes ask at once: builders take
//! an exclusive lock on `target/<name>/build.lock` (`File::lock`, an advisory `flock`
//! released when the process exits, even on a crash), and re-check the stamp once they
//! hold it. Within one process the result is computed once per tool.
//! A failed build leaves `<name>.failed` (stamp hash and reason); later processes
//! report the same failure without retrying for [`FAILURE_TTL`], so one run does not
//! pay for one failed build per test binary. `scripts/test` removes them at its start.
//!
//! [`ensure_artifact`] is that scheme for anything built from files by a command; the
//! Go tools and the node cluster's images (`crate::node_cluster::images`) use it.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use crate::skip::Skip;

use super::ENV_BIN;

/// The Kubernetes version `tests/envtest/go.mod` requires, which the harness's
/// components report (`/version`): helm refuses charts whose `kubeVersion` an
/// unversioned build (`v0.0.0-master`) does not satisfy.
pub const KUBERNETES_VERSION: &str = "v1.37.2";

/// The harness's build command's arguments after `go`, part of the stamp.
pub const GO_BUILD: &[&str] = &[
    "build",
    "-mod=readonly",
    "-trimpath",
    "-buildvcs=false",
    "-ldflags=-s -w \
     -X k8s.io/component-base/version.gitVersion=v1.37.2 \
     -X k8s.io/component-base/version.gitMajor=1 \
     -X k8s.io/component-base/version.gitMinor=37 \
     -X k8s.io/component-base/version.gitTreeState=clean",
];

/// helm's: its own version too (`helm version`), static.
const HELM_BUILD: &[&str] = &[
    "build",
    "-mod=readonly",
    "-trimpath",
    "-buildvcs=false",
    "-ldflags=-s -w -X helm.sh/helm/v3/internal/version.version=v3.22.0 \
     -X helm.sh/helm/v3/internal/version.gitTreeState=clean",
];

/// CoreDNS's: static (`CGO_ENABLED=0`, see [`COREDNS`]), as its image has no libc.
const COREDNS_BUILD: &[&str] = &[
    "build",
    "-mod=readonly",
    "-trimpath",
    "-buildvcs=false",
    "-ldflags=-s -w",
];

/// One Go program built from a module under `tests/`.
#[derive(Debug)]
pub struct GoTool {
    /// `target/<name>/<name>`, and the name in messages.
    pub name: &'static str,
    /// The module's directory, relative to the workspace root.
    pub module: &'static str,
    /// What `go build` builds: `.` or a tool the module requires.
    pub package: &'static str,
    /// `go` and its arguments up to the output (`-o` and the package follow).
    pub command: &'static [&'static str],
    /// Extra environment of the build, part of the stamp.
    pub env: &'static [(&'static str, &'static str)],
    /// What it holds, for the progress lines.
    pub what: &'static str,
    /// A variable naming a ready binary to use instead, never built.
    pub override_var: Option<&'static str>,
}

/// The real-control-plane harness (etcd, kube-apiserver, kube-controller-manager,
/// kube-scheduler, kubelet, kube-proxy, kubectl, and the `node` mode).
pub const ENVTEST: GoTool = GoTool {
    name: "envtest",
    module: "tests/envtest",
    package: ".",
    command: GO_BUILD,
    env: &[],
    what: "the real-control-plane harness (tests/envtest: etcd, kube-apiserver, \
           kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl)",
    override_var: Some(ENV_BIN),
};

/// helm, for the operator suites on the node cluster.
pub const HELM: GoTool = GoTool {
    name: "helm",
    module: "tests/node/helm",
    package: "helm.sh/helm/v3/cmd/helm",
    command: HELM_BUILD,
    env: &[("CGO_ENABLED", "0")],
    what: "helm (tests/node/helm)",
    override_var: Some("SVCPLANE_HELM_BIN"),
};

/// CoreDNS, packed into the node cluster's DNS image.
pub const COREDNS: GoTool = GoTool {
    name: "coredns",
    module: "tests/node/coredns",
    package: "github.com/coredns/coredns",
    command: COREDNS_BUILD,
    env: &[("CGO_ENABLED", "0")],
    what: "CoreDNS (tests/node/coredns)",
    override_var: None,
};

/// How long a recorded build failure is reported instead of building again.
pub const FAILURE_TTL: Duration = Duration::from_secs(10 * 60);

/// How often a running build says it is still running.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// What to do when Go is missing.
const ENABLE_GO: &str = "install Go 1.26 or newer (https://go.dev/dl/) with access to the Go \
                         module proxy, then run `scripts/test` again";

/// The workspace root.
pub fn workspace() -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests.parent().unwrap_or(tests).to_path_buf()
}

/// `target/envtest/envtest` under the workspace root: where the harness is built.
pub fn default_bin() -> PathBuf {
    ENVTEST.default_bin()
}

/// The harness binary to start, building it first if needed; the reason to skip if
/// there is none. Computed once per process.
pub fn harness() -> Result<PathBuf, Skip> {
    ENVTEST.binary()
}

impl GoTool {
    /// `target/<name>/<name>` under the workspace root.
    pub fn default_bin(&self) -> PathBuf {
        workspace().join("target").join(self.name).join(self.name)
    }

    /// The stamp of the build command with its environment, then the module's files.
    pub fn stamp(&self) -> std::io::Result<String> {
        let mut command: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        command.extend(self.command.iter().map(|s| (*s).to_owned()));
        command.push(self.package.to_owned());
        stamp_of(&workspace().join(self.module), &command)
    }

    /// The binary, built first if needed (once per process and tool).
    pub fn binary(&self) -> Result<PathBuf, Skip> {
        static DONE: Mutex<Option<HashMap<&'static str, Result<PathBuf, Skip>>>> = Mutex::new(None);
        static BUILDING: OnceLock<Mutex<()>> = OnceLock::new();
        if let Some(done) = DONE
            .lock()
            .ok()
            .and_then(|d| d.as_ref()?.get(self.name).cloned())
        {
            return done;
        }
        // One tool at a time within a process: a second thread waits for the
        // first one's answer rather than starting its own build.
        let _one = BUILDING.get_or_init(|| Mutex::new(())).lock();
        if let Some(done) = DONE
            .lock()
            .ok()
            .and_then(|d| d.as_ref()?.get(self.name).cloned())
        {
            return done;
        }
        let result = self.locate();
        if let Ok(mut done) = DONE.lock() {
            done.get_or_insert_with(HashMap::new)
                .insert(self.name, result.clone());
        }
        result
    }

    fn locate(&self) -> Result<PathBuf, Skip> {
        if let Some(var) = self.override_var
            && let Some(bin) = std::env::var_os(var).filter(|p| !p.is_empty())
        {
            let bin = PathBuf::from(bin);
            return if bin.is_file() {
                Ok(bin)
            } else {
                Err(Skip::missing(
                    format!("{var}={} does not exist", bin.display()),
                    format!(
                        "unset {var} (the tests then build {} themselves) or point it at a built one",
                        self.name
                    ),
                ))
            };
        }
        let source = workspace().join(self.module);
        let want = self.stamp().map_err(|e| {
            Skip::missing(
                format!("cannot read {}: {e}", source.display()),
                format!("restore {} from the repository", self.module),
            )
        })?;
        let bin = self.default_bin();
        let go = go_version();
        if go.is_none() {
            let stamp = bin.with_file_name(format!("{}.stamp", self.name));
            if is_current(&bin, &stamp, &want) {
                return Ok(bin);
            }
            if bin.is_file() {
                say(&format!(
                    "warning: {} was built from another version of {} (or by hand) and \
                     Go is not on PATH to rebuild it; using it as it is",
                    bin.display(),
                    self.module
                ));
                return Ok(bin);
            }
            return Err(Skip::missing(
                format!(
                    "{} is not built and Go is not on PATH to build it",
                    self.what
                ),
                ENABLE_GO,
            ));
        }
        let go = go.unwrap_or_default();
        let artifact = Artifact {
            name: self.name,
            output: bin.clone(),
            stamp: want,
            what: self.what,
            enable: "make the Go module proxy reachable (GOPROXY), then run `scripts/test` again",
        };
        ensure_artifact(&artifact, |tmp, log| {
            say(&format!(
                "building {} with {go}: a first build downloads modules and compiles for \
                 minutes (the README's Prerequisites give measured times); go's output goes \
                 to {}",
                self.what,
                log.display()
            ));
            let mut cmd = Command::new("go");
            cmd.args(self.command)
                .arg("-o")
                .arg(tmp)
                .arg(self.package)
                .current_dir(&source)
                .envs(self.env.iter().copied());
            run_logged(cmd, log, self.name)
        })
    }
}

/// Something the tests build once from files with a command, cached under
/// `target/<name>/`: the output (`output`, a file or directory), `<name>.stamp`,
/// `<name>.failed`, `build.lock` and `build.log` beside it.
#[derive(Debug)]
pub struct Artifact<'a> {
    pub name: &'a str,
    pub output: PathBuf,
    /// The inputs' stamp ([`stamp_of`]); the output is current when its stamp matches.
    pub stamp: String,
    pub what: &'a str,
    /// What to do when building fails, in one line.
    pub enable: &'a str,
}

/// The artifact's output, built with `build(temporary output, log file)` unless
/// current (see the module documentation for the locking and failure rules).
pub fn ensure_artifact(
    a: &Artifact<'_>,
    build: impl FnOnce(&Path, &Path) -> Result<(), String>,
) -> Result<PathBuf, Skip> {
    let dir = a.output.parent().map(Path::to_path_buf).unwrap_or_default();
    let stamp = dir.join(format!("{}.stamp", a.name));
    if is_current(&a.output, &stamp, &a.stamp) {
        return Ok(a.output.clone());
    }
    std::fs::create_dir_all(&dir).map_err(|e| {
        Skip::missing(
            format!("cannot create {}: {e}", dir.display()),
            "make target/ writable",
        )
    })?;
    let _lock = lock(&dir.join("build.lock"), a.name)?;
    // Another process may have built it while this one waited for the lock.
    if is_current(&a.output, &stamp, &a.stamp) {
        return Ok(a.output.clone());
    }
    let failed = dir.join(format!("{}.failed", a.name));
    let fail = |reason: String| {
        Skip::missing(
            format!("building {} failed: {reason}", a.what),
            format!(
                "{} (output in {})",
                a.enable,
                dir.join("build.log").display()
            ),
        )
    };
    if let Some(reason) = recent_failure(&failed, &a.stamp) {
        return Err(fail(reason));
    }
    let tmp = dir.join(format!("{}.tmp-{}", a.name, std::process::id()));
    remove_any(&tmp);
    let start = Instant::now();
    let built = build(&tmp, &dir.join("build.log")).and_then(|()| {
        remove_any(&a.output);
        std::fs::rename(&tmp, &a.output).map_err(|e| {
            format!(
                "cannot move {} to {}: {e}",
                tmp.display(),
                a.output.display()
            )
        })
    });
    match built {
        Ok(()) => {
            let _ = std::fs::remove_file(&failed);
            write_atomically(&stamp, a.stamp.as_bytes()).map_err(|e| {
                Skip::missing(
                    format!("cannot write {}: {e}", stamp.display()),
                    "make target/ writable",
                )
            })?;
            say(&format!(
                "{} built in {} s: {}",
                a.name,
                start.elapsed().as_secs(),
                a.output.display()
            ));
            Ok(a.output.clone())
        }
        Err(reason) => {
            remove_any(&tmp);
            let _ = std::fs::write(&failed, format!("{}\n{reason}\n", a.stamp.trim_end()));
            Err(fail(reason))
        }
    }
}

fn remove_any(path: &Path) {
    if path.is_dir() {
        let _ = std::fs::remove_dir_all(path);
    } else {
        let _ = std::fs::remove_file(path);
    }
}

/// Runs `cmd` with its output in `log`, saying every [`PROGRESS_EVERY`] that it
/// still runs; on failure, the last line it printed.
pub fn run_logged(mut cmd: Command, log_path: &Path, name: &str) -> Result<(), String> {
    let log = std::fs::File::create(log_path)
        .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
    let log_err = log
        .try_clone()
        .map_err(|e| format!("cannot write {}: {e}", log_path.display()))?;
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    let mut next_note = PROGRESS_EVERY;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for the build of {name}: {e}")),
        }
        if start.elapsed() >= next_note {
            say(&format!(
                "  still building {name} ({} s) ...",
                start.elapsed().as_secs()
            ));
            next_note += PROGRESS_EVERY;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read_to_string(log_path).unwrap_or_default();
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .to_owned();
    say(&format!("the build of {name} failed ({status}):\n{text}"));
    Err(last)
}

/// Is `output` present and stamped with `want`?
fn is_current(output: &Path, stamp: &Path, want: &str) -> bool {
    output.exists() && std::fs::read_to_string(stamp).is_ok_and(|s| s == want)
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

/// The stamp of a build: FNV-1a (64 bit) over the build command and every file under
/// `source` (a directory or one file; relative path, length, content), in path order.
pub fn stamp_of(source: &Path, command: &[String]) -> std::io::Result<String> {
    let mut files = Vec::new();
    if source.is_file() {
        files.push(String::new());
    } else {
        collect_files(source, source, &mut files)?;
    }
    files.sort();
    let mut hash = Fnv::default();
    hash.write(command.join(" ").as_bytes());
    for rel in &files {
        let path = if rel.is_empty() {
            source.to_path_buf()
        } else {
            source.join(rel)
        };
        let bytes = std::fs::read(path)?;
        hash.write(rel.as_bytes());
        hash.write(&(bytes.len() as u64).to_le_bytes());
        hash.write(&bytes);
    }
    Ok(format!("fnv1a64:{:016x}\n", hash.0))
}

/// A stamp of `text` alone (e.g. several stamps joined), in [`stamp_of`]'s format.
pub fn stamp_of_text(text: &str) -> String {
    let mut hash = Fnv::default();
    hash.write(text.as_bytes());
    format!("fnv1a64:{:016x}\n", hash.0)
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
fn lock(path: &Path, name: &str) -> Result<std::fs::File, Skip> {
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
            say(&format!(
                "waiting for another test process that is building {name} ..."
            ));
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
        let a = stamp_of(&dir, &[]).ok();
        write("main.go", "package main // changed\n");
        let b = stamp_of(&dir, &[]).ok();
        write("sub/more.go", "package sub\n");
        let c = stamp_of(&dir, &[]).ok();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(a.is_some() && b.is_some() && c.is_some());
        assert_ne!(a, b);
        assert_ne!(b, c);
    }

    #[test]
    fn the_harness_reports_the_kubernetes_version_its_module_requires() {
        let go_mod =
            std::fs::read_to_string(workspace().join("tests/envtest/go.mod")).unwrap_or_default();
        let required = go_mod
            .lines()
            .find_map(|l| l.trim().strip_prefix("k8s.io/kubernetes "))
            .map(str::trim);
        assert_eq!(required, Some(KUBERNETES_VERSION), "tests/envtest/go.mod");
        let ldflags = GO_BUILD
            .iter()
            .find(|a| a.starts_with("-ldflags="))
            .copied();
        let (major, minor) = ("1", "37");
        for want in [
            format!("version.gitVersion={KUBERNETES_VERSION} "),
            format!("version.gitMajor={major} "),
            format!("version.gitMinor={minor} "),
        ] {
            assert!(
                ldflags.is_some_and(|l| l.contains(&want)),
                "{ldflags:?} lacks {want}"
            );
        }
        assert!(KUBERNETES_VERSION.starts_with(&format!("v{major}.{minor}.")));
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
