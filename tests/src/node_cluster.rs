//! A real single-node Kubernetes cluster for the suites that act as an operator
//! would: install the chart with helm, run Deployments, reach Services through
//! kube-proxy and the cluster DNS.
//!
//! The envtest harness ([`crate::envtest`]) has an API server and nothing that runs
//! Pods; this module starts the harness's `node` mode instead (`tests/envtest/node.go`):
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
//! kube-proxy and containerd in a private network namespace, and CoreDNS in the
//! cluster. It needs root, Go (the harness, helm and CoreDNS are built from Go
//! modules on first use, [`crate::envtest::build`]) and Debian's `containerd`,
//! `runc`, `containernetworking-plugins` and `iptables`; without them the suite
//! skips through [`crate::skip::skip`] (a failure under `CI=true`). The images the
//! node uses (pause, CoreDNS, a busybox test app) are built once by
//! [`images`] and imported into the node's containerd before the kubelet starts.
//!
//! [`NodeCluster::start`] gives a cluster the caller owns: dropping it tears the
//! node down (the harness also does when this process dies, as it watches its
//! stdin; a run whose harness was killed is cleaned up by the next run or by
//! `target/envtest/envtest node-cleanup`). [`NodeCluster::shared`] gives one per
//! test binary, torn down when the binary exits.
//!
//! `SVCPLANE_E2E_KUBECONFIG` points the suites at an external cluster instead: the
//! methods then act on that cluster, except that images are the caller's problem
//! there ([`NodeCluster::import_image`] and [`NodeCluster::exec_in_node`] fail): load
//! them into its nodes yourself (`kind load image-archive`, `ctr images import`, or a
//! registry).

pub mod images;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::Client;
use serde::Deserialize;

use crate::envtest::build::{ENVTEST, HELM, workspace};
use crate::envtest::external_kubeconfig;
use crate::skip::{self, Skip};

pub use images::{BUSYBOX, COREDNS_IMAGE, PAUSE};

/// How long the node may take to report ready (the first start after a build
/// imports images and starts every component).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a dropped cluster may take to tear down before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(90);

/// Environment variable: `1` keeps the node's logs and configuration
/// (the run directory minus containerd's and the kubelet's state).
pub const ENV_KEEP_LOGS: &str = "SVCPLANE_NODE_KEEP_LOGS";

/// What the node runs with, beyond the defaults.
#[derive(Debug, Clone, Default)]
pub struct NodeOptions {
    /// kube-controller-manager flags after the harness's base flags, e.g.
    /// `--controllers=*,-endpoint,-endpointslice,-endpointslicemirroring`.
    pub kcm_args: Vec<String>,
    /// kube-proxy's mode: `iptables` (the default) or `nftables`.
    pub proxy_mode: Option<String>,
    /// More OCI archives to import before the kubelet starts.
    pub images: Vec<PathBuf>,
    /// Further `envtest node` flags (e.g. `--service-cluster-ip-range=...`).
    pub extra_args: Vec<String>,
}

/// What the harness writes into `node.json` beside the kubeconfig.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    pub kubeconfig: PathBuf,
    /// The network namespace everything runs in (`/run/netns/<netns>`).
    pub netns: String,
    pub netns_path: PathBuf,
    pub containerd_socket: PathBuf,
    pub control_socket: PathBuf,
    pub run_dir: PathBuf,
    /// One log per component (`kubelet.log`, `kube-apiserver.log`, ...).
    pub log_dir: PathBuf,
    pub node_name: String,
    #[serde(rename = "nodeIP")]
    pub node_ip: String,
    #[serde(rename = "serviceCIDRs")]
    pub service_cidrs: String,
    #[serde(rename = "podCIDR")]
    pub pod_cidr: String,
    /// kube-dns's ClusterIP, which the kubelet gives Pods as their resolver.
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: String,
    /// The host-side address of the API server (a loopback forwarder).
    pub api_server: String,
    pub pid: u32,
}

/// A running node cluster, or an external cluster (`SVCPLANE_E2E_KUBECONFIG`).
#[derive(Debug)]
pub struct NodeCluster {
    kubeconfig: PathBuf,
    /// `None` for an external cluster.
    info: Option<NodeInfo>,
    /// The harness binary, whose `kubectl` command the suites use.
    harness: PathBuf,
    helm: PathBuf,
    process: Option<Process>,
    startup: Duration,
}

#[derive(Debug)]
struct Process {
    stdin: Option<ChildStdin>,
    child: Child,
}

impl NodeCluster {
    /// A node cluster of the caller's own, or `None` (after [`skip::skip`]) when this
    /// machine cannot run one. Panics when the node fails to start.
    pub fn start(test: &str) -> Option<NodeCluster> {
        Self::start_with(test, &NodeOptions::default())
    }

    /// [`NodeCluster::start`] with options (ignored for an external cluster).
    pub fn start_with(test: &str, options: &NodeOptions) -> Option<NodeCluster> {
        match Self::resolve(options) {
            Ok(Ok(cluster)) => Some(cluster),
            Ok(Err(why)) => {
                skip::skip(test, &why);
                None
            }
            Err(e) => panic!("{test}: starting the node cluster: {e:#}"),
        }
    }

    /// One cluster per test binary, started by the first test that asks, torn down
    /// when the test binary exits (the harness sees its stdin close). For suites
    /// whose tests run one after another on the same cluster.
    pub fn shared(test: &str) -> Option<&'static NodeCluster> {
        static SHARED: OnceLock<Result<Result<NodeCluster, Skip>, String>> = OnceLock::new();
        match SHARED
            .get_or_init(|| Self::resolve(&NodeOptions::default()).map_err(|e| format!("{e:#}")))
        {
            Ok(Ok(cluster)) => Some(cluster),
            Ok(Err(why)) => {
                skip::skip(test, why);
                None
            }
            Err(e) => panic!("{test}: starting the node cluster: {e}"),
        }
    }

    fn resolve(options: &NodeOptions) -> anyhow::Result<Result<NodeCluster, Skip>> {
        let harness = match ENVTEST.binary() {
            Ok(bin) => bin,
            Err(why) => return Ok(Err(why)),
        };
        let helm = match HELM.binary() {
            Ok(bin) => bin,
            Err(why) => return Ok(Err(why)),
        };
        if let Some(kubeconfig) = external_kubeconfig() {
            return Ok(Ok(NodeCluster {
                kubeconfig,
                info: None,
                harness,
                helm,
                process: None,
                startup: Duration::ZERO,
            }));
        }
        if let Err(why) = preflight() {
            return Ok(Err(why));
        }
        let images = match images::ensure() {
            Ok(images) => images,
            Err(why) => return Ok(Err(why)),
        };
        let mut args = vec![
            "node".to_owned(),
            "--timeout=60m".to_owned(),
            format!("--pause-image={PAUSE}"),
            format!("--coredns-image={COREDNS_IMAGE}"),
        ];
        for archive in [&images.pause, &images.coredns, &images.busybox]
            .into_iter()
            .chain(&options.images)
        {
            args.push(format!("--image={}", archive.display()));
        }
        args.extend(options.kcm_args.iter().map(|a| format!("--kcm-arg={a}")));
        if let Some(mode) = &options.proxy_mode {
            args.push(format!("--proxy-mode={mode}"));
        }
        if std::env::var(ENV_KEEP_LOGS).is_ok_and(|v| v == "1") {
            args.push("--keep-logs".to_owned());
        }
        args.extend(options.extra_args.iter().cloned());
        launch(&harness, &helm, &args).map(Ok)
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// True for `SVCPLANE_E2E_KUBECONFIG`.
    pub fn is_external(&self) -> bool {
        self.info.is_none()
    }

    /// The node's details; `None` for an external cluster.
    pub fn info(&self) -> Option<&NodeInfo> {
        self.info.as_ref()
    }

    /// How long the node took to report ready (zero for an external cluster).
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// A fresh client. Build one per test: a client is bound to the tokio runtime it
    /// first runs on, and every `#[tokio::test]` has its own.
    pub async fn client(&self) -> anyhow::Result<Client> {
        crate::envtest::client_for(&self.kubeconfig).await
    }

    /// `kubectl ARGS...` (upstream kubectl at the cluster's version, from the harness)
    /// against the cluster.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(&self.harness);
        cmd.arg("kubectl")
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(args)
            .env("KUBECACHEDIR", self.discovery_cache());
        output_of(cmd)
    }

    /// kubectl's and helm's discovery cache: the run's, or a shared one under
    /// `target/` for an external cluster (not `~/.kube/cache`).
    fn discovery_cache(&self) -> PathBuf {
        match &self.info {
            Some(info) => info.run_dir.join("kube-cache"),
            None => workspace().join("target").join("helm").join("kube-cache"),
        }
    }

    /// `helm ARGS...` with `KUBECONFIG` set to the cluster's, and helm's cache,
    /// configuration and data under `target/helm/home/` rather than `$HOME`.
    pub fn helm(&self, args: &[&str]) -> Output {
        let home = workspace().join("target").join("helm").join("home");
        let mut cmd = Command::new(&self.helm);
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env("KUBECACHEDIR", self.discovery_cache());
        output_of(cmd)
    }

    /// Imports an OCI image archive (`scripts/image build`'s `.oci.tar`, or any archive
    /// whose index names the image with `io.containerd.image.name`) into the node's
    /// containerd; Pods then use it with `imagePullPolicy: Never` (or `IfNotPresent`).
    pub fn import_image(&self, archive: &Path) -> anyhow::Result<()> {
        let Some(info) = &self.info else {
            bail!(
                "the cluster is external (SVCPLANE_E2E_KUBECONFIG): load {} into its nodes yourself",
                archive.display()
            );
        };
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&info.containerd_socket)
            .args(["-n", "k8s.io", "images", "import"])
            .arg(archive)
            .stdin(Stdio::null())
            .output()
            .context("running ctr")?;
        if !out.status.success() {
            bail!(
                "ctr images import {}: {}",
                archive.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Restarts kube-controller-manager alone with `args` after the harness's base
    /// flags (replacing the previous extra flags; `&[]` restores its default
    /// controllers) and waits until it is healthy. For instance
    /// `--controllers=*,-endpoint,-endpointslice,-endpointslicemirroring` leaves
    /// the endpoint controllers to svcplane.
    pub fn restart_kcm(&self, args: &[&str]) -> anyhow::Result<()> {
        let Some(info) = &self.info else {
            bail!(
                "the cluster is external (SVCPLANE_E2E_KUBECONFIG): its controller manager is not ours to restart"
            );
        };
        let mut stream = UnixStream::connect(&info.control_socket)
            .with_context(|| format!("connecting to {}", info.control_socket.display()))?;
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        let request = serde_json::json!({ "command": "restart-kcm", "args": args });
        writeln!(stream, "{request}")?;
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line)?;
        let reply: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("reply {line:?}"))?;
        if reply["ok"] == serde_json::Value::Bool(true) {
            Ok(())
        } else {
            bail!("restart-kcm: {}", reply["error"]);
        }
    }

    /// Runs `command` inside the node's network namespace (where the node address,
    /// ClusterIPs and Pod IPs are reachable), e.g. `&["iptables-save"]` or
    /// `&["wget", "-qO-", "http://10.96.0.10:8080/health"]`.
    pub fn exec_in_node(&self, command: &[&str]) -> anyhow::Result<Output> {
        let Some(info) = &self.info else {
            bail!("the cluster is external (SVCPLANE_E2E_KUBECONFIG): no node namespace here");
        };
        let Some((program, args)) = command.split_first() else {
            bail!("no command");
        };
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", info.netns_path.display()))
            .arg("--")
            .arg(program)
            .args(args);
        Ok(output_of(cmd))
    }

    /// Tears the node down now and returns how long that took (also what dropping
    /// it does, without the figure).
    pub fn stop(mut self) -> Duration {
        let start = Instant::now();
        self.shutdown();
        start.elapsed()
    }

    fn shutdown(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.stop();
        }
    }
}

impl Process {
    /// Closes the harness's stdin, its signal to tear down, and waits for it (killed
    /// after [`STOP_TIMEOUT`]; its next run then cleans up after it).
    fn stop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NodeCluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn output_of(mut cmd: Command) -> Output {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| Output {
            status: std::os::unix::process::ExitStatusExt::from_raw(127 << 8),
            stdout: Vec::new(),
            stderr: format!("cannot run {program}: {e}").into_bytes(),
        })
}

/// What to install for the node cluster, in one command.
const ENABLE_NODE: &str = "as root on Debian 12: `apt-get install --no-install-recommends containerd \
                           runc containernetworking-plugins iptables iproute2 util-linux gcc \
                           libc6-dev python3`, then run `scripts/test` again";

/// The reason this machine cannot run a node, if any.
fn preflight() -> Result<(), Skip> {
    let uid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX);
    if uid != 0 {
        return Err(Skip::missing(
            "the node cluster needs root (network namespaces, cgroups, containerd)",
            "run the suite as root",
        ));
    }
    let mut missing = Vec::new();
    for tool in [
        "containerd",
        "ctr",
        "runc",
        "ip",
        "nsenter",
        "iptables",
        "sysctl",
        "gcc",
        "python3",
    ] {
        if !on_path(tool) {
            missing.push(tool.to_owned());
        }
    }
    let cni = ["/usr/lib/cni", "/opt/cni/bin"]
        .iter()
        .any(|d| Path::new(d).join("ptp").is_file());
    if !cni {
        missing.push("the CNI plugins (ptp in /usr/lib/cni or /opt/cni/bin)".to_owned());
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Skip::missing(
            format!("the node cluster needs {}", missing.join(", ")),
            ENABLE_NODE,
        ))
    }
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
}

fn launch(harness: &Path, helm: &Path, args: &[String]) -> anyhow::Result<NodeCluster> {
    let start = Instant::now();
    let mut child = Command::new(harness)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("spawning {}", harness.display()))?;
    let stdin = child.stdin.take().context("no stdin pipe")?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(read.map(|_| line));
    });
    let mut process = Process {
        stdin: Some(stdin),
        child,
    };
    let kubeconfig = match rx.recv_timeout(STARTUP_TIMEOUT) {
        Ok(Ok(line)) if !line.trim().is_empty() => PathBuf::from(line.trim()),
        other => {
            // Let it tear down what it started before giving up on it.
            process.stop();
            bail!("the node did not report ready: {other:?} (its output is above)");
        }
    };
    let startup = start.elapsed();
    let info_path = kubeconfig.with_file_name("node.json");
    let info = std::fs::read(&info_path)
        .with_context(|| format!("reading {}", info_path.display()))
        .and_then(|bytes| {
            serde_json::from_slice::<NodeInfo>(&bytes)
                .with_context(|| format!("parsing {}", info_path.display()))
        });
    let info = match info {
        Ok(info) => info,
        Err(e) => {
            process.stop();
            return Err(e);
        }
    };
    Ok(NodeCluster {
        kubeconfig,
        info: Some(info),
        harness: harness.to_path_buf(),
        helm: helm.to_path_buf(),
        process: Some(process),
        startup,
    })
}
