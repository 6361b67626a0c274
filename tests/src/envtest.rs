//! Access to a real control plane for the e2e and differential suites.
//!
//! By default the suites run against `tests/envtest`, a Go program that runs
//! etcd, kube-apiserver and (for the differential suite) upstream
//! kube-controller-manager on loopback. The first test that needs it builds it
//! ([`build::harness`]: once, under a file lock, cached in `target/envtest/` and
//! rebuilt when `tests/envtest` changes) when Go is on `PATH`, or uses
//! `SVCPLANE_ENVTEST_BIN` as it is. Each harness instance is started at most once
//! per test binary and stops when the test binary exits: it watches its stdin,
//! which is a pipe only this process holds. [`launch`] starts an instance the caller
//! owns instead, stopped when its [`Harness`] handle is dropped (the `versus` bench
//! uses a fresh one per run).
//!
//! `SVCPLANE_E2E_KUBECONFIG` points the e2e suite at an external cluster
//! instead. When no control plane can be had, the tests skip through
//! [`crate::skip::skip`]: a `SKIPPED` line, a record for `scripts/test`'s
//! summary, and a failure under `CI=true`.

pub mod build;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::skip::{self, Skip};

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
        client_for(&self.kubeconfig).await
    }
}

/// A fresh client for the admin kubeconfig at `path` (the envtest harness's, the node
/// cluster's, or an external one).
pub async fn client_for(path: &Path) -> anyhow::Result<Client> {
    let kubeconfig =
        Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context("loading kubeconfig")?;
    Client::try_from(config).context("building client")
}

/// A cluster, the reason there is none, or why starting one failed.
type Resolved = Result<Result<Cluster, Skip>, String>;

// Never dropped: the suites' instances live until the test binary exits, which
// closes their stdin pipes.
static PROCESSES: Mutex<Vec<Harness>> = Mutex::new(Vec::new());
static API_ONLY: OnceLock<Resolved> = OnceLock::new();
static UPSTREAM: OnceLock<Resolved> = OnceLock::new();

/// The harness binary the suites use: `SVCPLANE_ENVTEST_BIN`, else
/// `target/envtest/envtest` under the workspace root (built on first use).
pub fn harness_bin() -> PathBuf {
    match std::env::var_os(ENV_BIN) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => build::default_bin(),
    }
}

/// The cluster for `flavor`, building and starting the harness on first use.
/// `None` means "skip this test": [`skip::skip`] has said why (and panicked
/// instead under `CI=true` when something is missing). Panics when a harness
/// fails to start.
pub fn cluster(flavor: Flavor, test: &str) -> Option<Cluster> {
    match cell(flavor).get_or_init(|| resolve(flavor)) {
        Ok(Ok(c)) => Some(c.clone()),
        Ok(Err(why)) => {
            skip::skip(test, why);
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

/// Skips `test` unless `cluster` can reach this machine's loopback addresses (an
/// external cluster cannot call back into a webhook served by the test process).
pub fn reaches_loopback(cluster: &Cluster, test: &str) -> bool {
    if cluster.external {
        skip::skip(
            test,
            &Skip::not_applicable(
                format!("{ENV_EXTERNAL} is set, and that API server cannot call back to 127.0.0.1"),
                format!("unset {ENV_EXTERNAL} to run against the envtest harness"),
            ),
        );
        return false;
    }
    true
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

fn cell(flavor: Flavor) -> &'static OnceLock<Resolved> {
    match flavor {
        Flavor::ApiServerOnly => &API_ONLY,
        Flavor::UpstreamControllers => &UPSTREAM,
    }
}

/// `SVCPLANE_E2E_KUBECONFIG`, when set and not empty.
pub fn external_kubeconfig() -> Option<PathBuf> {
    std::env::var_os(ENV_EXTERNAL)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

fn resolve(flavor: Flavor) -> Resolved {
    if let Some(kubeconfig) = external_kubeconfig() {
        return Ok(match flavor {
            Flavor::ApiServerOnly => Ok(Cluster {
                kubeconfig,
                external: true,
            }),
            Flavor::UpstreamControllers => Err(Skip::not_applicable(
                format!(
                    "{ENV_EXTERNAL} is set, but the differential suite needs two harness instances"
                ),
                format!("unset {ENV_EXTERNAL} to run it on the envtest harness"),
            )),
        });
    }
    let bin = match build::harness() {
        Ok(bin) => bin,
        Err(why) => return Ok(Err(why)),
    };
    start(&bin, flavor)
        .map(Ok)
        .map_err(|e| format!("starting the harness {}: {e:#}", bin.display()))
}

fn start(bin: &Path, flavor: Flavor) -> anyhow::Result<Cluster> {
    let mut args = Vec::new();
    if flavor == Flavor::UpstreamControllers {
        args.push("--kube-controller-manager".to_owned());
        args.push(format!("--controllers={UPSTREAM_CONTROLLERS}"));
    }
    let harness = launch_bin(bin, &args)?;
    let cluster = harness.cluster();
    PROCESSES
        .lock()
        .map_err(|_| anyhow::anyhow!("harness registry poisoned"))?
        .push(harness);
    Ok(cluster)
}

/// A harness instance of the caller's own (the `versus` bench starts a fresh one per
/// run). Dropping it closes its stdin, which makes the harness stop its children and
/// remove its temporary directory; it is killed if that takes longer than
/// [`STOP_TIMEOUT`].
#[derive(Debug)]
pub struct Harness {
    /// The harness binary, which also runs upstream components as subcommands
    /// (`<bin> kube-controller-manager ARGS...`).
    pub bin: PathBuf,
    /// The admin kubeconfig it wrote.
    pub kubeconfig: PathBuf,
    stdin: Option<ChildStdin>,
    child: Child,
}

/// How long a dropped [`Harness`] may take to shut down cleanly.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

impl Harness {
    /// The cluster it serves.
    pub fn cluster(&self) -> Cluster {
        Cluster {
            kubeconfig: self.kubeconfig.clone(),
            external: false,
        }
    }
}

/// `envtest.json`, which the harness writes beside the kubeconfig.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlaneInfo {
    control_socket: PathBuf,
}

impl Harness {
    /// Sends `command` with `args` to the harness's control socket and waits for the
    /// reply (`start-apiserver` replies once the API server is ready again); the
    /// reply's detail (e.g. the revision `compact-etcd` compacted to). The commands
    /// are listed in `tests/envtest/control.go`.
    pub async fn control(&self, command: &str, args: &[&str]) -> anyhow::Result<String> {
        let info = self
            .kubeconfig
            .parent()
            .context("kubeconfig without a directory")?
            .join("envtest.json");
        let request = serde_json::json!({ "command": command, "args": args });
        let what = format!("{command} {}", args.join(" "));
        // A blocking exchange on a thread of its own: the reply can take as long as
        // an API server start, and the test's runtime keeps watching meanwhile.
        tokio::task::spawn_blocking(move || {
            use std::io::Write as _;
            let info: PlaneInfo = serde_json::from_slice(
                &std::fs::read(&info).with_context(|| format!("reading {}", info.display()))?,
            )?;
            let mut stream = std::os::unix::net::UnixStream::connect(&info.control_socket)
                .with_context(|| format!("connecting to {}", info.control_socket.display()))?;
            writeln!(stream, "{request}")?;
            let mut line = String::new();
            BufReader::new(stream).read_line(&mut line)?;
            let reply: serde_json::Value =
                serde_json::from_str(&line).with_context(|| format!("reply {line:?}"))?;
            if reply["ok"] != serde_json::Value::Bool(true) {
                bail!("{}", reply["error"].as_str().unwrap_or(&line));
            }
            Ok(reply["detail"].as_str().unwrap_or_default().to_owned())
        })
        .await
        .context("control thread")?
        .with_context(|| format!("envtest control: {what}"))
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + STOP_TIMEOUT;
        while std::time::Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a harness of the caller's own ([`build::harness`]: `SVCPLANE_ENVTEST_BIN` or
/// the one built on first use) with `--timeout=30m` and `extra_args` (later flags win,
/// so `--timeout=4h` there replaces it). API server only unless `extra_args` asks for
/// `--kube-controller-manager`.
pub fn launch(extra_args: &[String]) -> anyhow::Result<Harness> {
    let bin = build::harness()
        .map_err(|why| anyhow::anyhow!("no envtest harness: {} ({})", why.reason, why.enable))?;
    launch_bin(&bin, extra_args)
}

fn launch_bin(bin: &Path, extra_args: &[String]) -> anyhow::Result<Harness> {
    let mut child = Command::new(bin)
        .arg("--timeout=30m")
        .args(extra_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("spawn")?;
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
    Ok(Harness {
        bin: bin.to_path_buf(),
        kubeconfig,
        stdin: Some(stdin),
        child,
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
