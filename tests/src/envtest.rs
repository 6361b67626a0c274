//! Access to a real control plane for the e2e and differential suites.
//!
//! By default the suites run against `tests/envtest`, a Go program that runs
//! etcd, kube-apiserver and (for the differential suite) upstream
//! kube-controller-manager on loopback. `.ci/run` builds it once; the tests only
//! start the built binary, found at `SVCPLANE_ENVTEST_BIN` or
//! `target/envtest/envtest` under the workspace root. Each harness instance is
//! started at most once per test binary and stops when the test binary exits:
//! it watches its stdin, which is a pipe only this process holds.
//!
//! `SVCPLANE_E2E_KUBECONFIG` points the e2e suite at an external cluster
//! instead. If neither is available the tests print a skip message and pass,
//! except under `CI=true`, where a missing harness fails them.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// Environment variable naming the harness binary.
pub const ENV_BIN: &str = "SVCPLANE_ENVTEST_BIN";
/// Environment variable naming an external cluster's kubeconfig.
pub const ENV_EXTERNAL: &str = "SVCPLANE_E2E_KUBECONFIG";

/// How long a harness may take to report ready.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(180);

/// The kube-controller-manager controllers the differential suite compares with:
/// the three endpoint controllers and the ServiceCIDR controller.
pub const UPSTREAM_CONTROLLERS: &str =
    "endpointslice,endpoint,endpointslicemirroring,service-cidr-controller";

/// Which control plane a suite needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// kube-apiserver and etcd only: nothing but the test writes EndpointSlices.
    ApiServerOnly,
    /// Also upstream kube-controller-manager running [`UPSTREAM_CONTROLLERS`]
    /// (the differential oracle).
    UpstreamControllers,
}

/// A reachable cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub kubeconfig: PathBuf,
    /// True for `SVCPLANE_E2E_KUBECONFIG`: its own controllers may be running.
    pub external: bool,
}

impl Cluster {
    /// A fresh client. Build one per test: a client is bound to the tokio
    /// runtime it first runs on, and every `#[tokio::test]` has its own.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("reading {}", self.kubeconfig.display()))?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .context("loading kubeconfig")?;
        Client::try_from(config).context("building client")
    }
}

struct Running {
    // Dropping the stdin pipe (at the latest when this process exits) makes
    // the harness shut down and remove its temporary directory.
    _stdin: ChildStdin,
    _child: Child,
}

static SKIP_REPORTED: AtomicBool = AtomicBool::new(false);
static PROCESSES: Mutex<Vec<Running>> = Mutex::new(Vec::new());
static API_ONLY: OnceLock<Result<Option<Cluster>, String>> = OnceLock::new();
static UPSTREAM: OnceLock<Result<Option<Cluster>, String>> = OnceLock::new();

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The harness binary: `SVCPLANE_ENVTEST_BIN`, else `target/envtest/envtest`
/// under the workspace root.
pub fn harness_bin() -> PathBuf {
    match std::env::var_os(ENV_BIN) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("target")
            .join("envtest")
            .join("envtest"),
    }
}

/// The cluster for `flavor`, starting the harness on first use. `None` means
/// "skip this test" (the reason is printed). Panics when a harness that
/// exists fails to start, and in CI when it is missing.
pub fn cluster(flavor: Flavor, test: &str) -> Option<Cluster> {
    match cell(flavor).get_or_init(|| resolve(flavor)) {
        Ok(Some(c)) => Some(c.clone()),
        Ok(None) => {
            let msg = skip_message(flavor);
            if in_ci() && external_kubeconfig().is_none() {
                panic!("{test}: {msg} (CI=true: a missing harness is an error)");
            }
            // Once per binary, straight to stderr: the test harness captures
            // `eprintln!` of passing tests, and a skip must be seen.
            if !SKIP_REPORTED.swap(true, Ordering::Relaxed) {
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED {test} (and every other real-API-server test in this binary): {msg}"
                );
            }
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

/// Like [`cluster`] for several flavors, starting the missing harness
/// instances in parallel. `None` if any of them is unavailable.
pub fn clusters<const N: usize>(flavors: [Flavor; N], test: &str) -> Option<[Cluster; N]> {
    std::thread::scope(|scope| {
        for flavor in flavors {
            scope.spawn(move || {
                cell(flavor).get_or_init(|| resolve(flavor));
            });
        }
    });
    let mut out = Vec::with_capacity(N);
    for flavor in flavors {
        out.push(cluster(flavor, test)?);
    }
    out.try_into().ok()
}

fn cell(flavor: Flavor) -> &'static OnceLock<Result<Option<Cluster>, String>> {
    match flavor {
        Flavor::ApiServerOnly => &API_ONLY,
        Flavor::UpstreamControllers => &UPSTREAM,
    }
}

fn skip_message(flavor: Flavor) -> String {
    if flavor == Flavor::UpstreamControllers && external_kubeconfig().is_some() {
        return format!(
            "{ENV_EXTERNAL} is set, but the differential suite needs two harness instances"
        );
    }
    format!(
        "the real-control-plane harness is not built (looked for {}). Build it with \
         `go build -C tests/envtest -o ../../target/envtest/envtest .` (or set {ENV_BIN}), \
         or point {ENV_EXTERNAL} at a cluster",
        harness_bin().display()
    )
}

/// `SVCPLANE_E2E_KUBECONFIG`, when set and not empty.
pub fn external_kubeconfig() -> Option<PathBuf> {
    std::env::var_os(ENV_EXTERNAL)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

fn resolve(flavor: Flavor) -> Result<Option<Cluster>, String> {
    if let Some(kubeconfig) = external_kubeconfig() {
        return Ok(match flavor {
            Flavor::ApiServerOnly => Some(Cluster {
                kubeconfig,
                external: true,
            }),
            Flavor::UpstreamControllers => None,
        });
    }
    let bin = harness_bin();
    if !bin.is_file() {
        return Ok(None);
    }
    start(&bin, flavor)
        .map(Some)
        .map_err(|e| format!("starting the harness {}: {e:#}", bin.display()))
}

fn start(bin: &Path, flavor: Flavor) -> anyhow::Result<Cluster> {
    let mut cmd = Command::new(bin);
    cmd.arg("--timeout=30m")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if flavor == Flavor::UpstreamControllers {
        cmd.arg("--kube-controller-manager")
            .arg(format!("--controllers={}", UPSTREAM_CONTROLLERS));
    }
    let mut child = cmd.spawn().context("spawn")?;
    let stdin = child.stdin.take().context("no stdin pipe")?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(read.map(|_| line));
    });
    let kubeconfig = match rx.recv_timeout(STARTUP_TIMEOUT) {
        Ok(Ok(line)) if !line.trim().is_empty() => PathBuf::from(line.trim()),
        other => {
            let _ = child.kill();
            let _ = child.wait();
            bail!("harness did not report ready: {other:?}");
        }
    };
    PROCESSES
        .lock()
        .map_err(|_| anyhow::anyhow!("harness registry poisoned"))?
        .push(Running {
            _stdin: stdin,
            _child: child,
        });
    Ok(Cluster {
        kubeconfig,
        external: false,
    })
}

/// Creates a namespace named `name` (or generated from `name` when it ends
/// with `-`) and returns its name.
pub async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<String> {
    let mut ns = Namespace::default();
    if name.ends_with('-') {
        ns.metadata.generate_name = Some(name.into());
    } else {
        ns.metadata.name = Some(name.into());
    }
    let created = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    created.metadata.name.context("namespace without a name")
}

/// Deletes a test namespace (best effort; a harness is thrown away anyway).
pub async fn delete_namespace(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}
