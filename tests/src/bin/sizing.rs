//! `sizing`: peak memory of the shipped `svcplane run` against a real API server, for
//! the README's sizing table and the chart's resource defaults.
//!
//! ```text
//! cargo build --release -p svcplane-controller
//! cargo run --release -p svcplane-tests --bin sizing -- --pods 1000,10000,30000
//! ```
//!
//! For each size, in a child process of its own (a fresh envtest harness: etcd +
//! kube-apiserver 1.36), it creates Nodes, Services (one per `--pods-per-service` Pods,
//! spread over 10 namespaces) and realistic 3.4 KB Pods (the simulator's: two
//! containers, probes, managedFields, a full status, Ready), then starts
//! `target/release/svcplane run` as the chart does — webhook on (certificate files),
//! leader election on, every controller — and waits until every Service has its
//! EndpointSlice and Endpoints and the work queues are empty. It then reads the
//! process' peak (VmHWM) and current (VmRSS) resident set from /proc. One Markdown
//! table row per size on stdout.
//!
//! `--kube-api-qps`/`--kube-api-burst` default to 1000/2000 so a run converges in
//! minutes (at the default 20 QPS, 10 000 Services take ~8 minutes per controller);
//! memory is set by what is cached, not by the write rate. Not a test: nothing is
//! timed or asserted, and it needs the envtest harness (`SVCPLANE_ENVTEST_BIN`).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use svcplane_tests::binary::{SvcplaneProcess, free_port};
use svcplane_tests::envtest;
use svcplane_tests::sim::cluster::{NodeSpec, PodFactory, for_create, nodes, services};
use svcplane_tests::webhook_env::{certs, install_claim_crd};
use svcplane_webhook::retry::{Backoff, entropy_seed};

#[derive(Debug, Parser)]
#[command(about = "Peak RSS of `svcplane run` against a real API server, by cluster size")]
struct Args {
    /// Pod counts to measure, comma-separated (one fresh API server each).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,30000")]
    pods: Vec<usize>,
    /// Pods per Service.
    #[arg(long, default_value_t = 10)]
    pods_per_service: usize,
    /// Pods per Node.
    #[arg(long, default_value_t = 30)]
    pods_per_node: usize,
    /// `--kube-api-qps` of svcplane run (time to converge only).
    #[arg(long, default_value_t = 1000.0)]
    kube_api_qps: f64,
    /// `--kube-api-burst` of svcplane run.
    #[arg(long, default_value_t = 2000)]
    kube_api_burst: u32,
    /// The binary to measure (default: target/release/svcplane).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Measure one size in this process (used by the parent).
    #[arg(long, hide = true)]
    one: Option<usize>,
}

const NAMESPACES: usize = 10;
const CONCURRENCY: usize = 48;
/// Attempts per object: a loaded API server closes a connection now and then.
const ATTEMPTS: u32 = 5;
/// Bounds of the wait between attempts: the base doubles 400 ms → 3.2 s over the four
/// retries and jitter adds up to as much again, so the [`CONCURRENCY`] creates that a
/// dropped connection fails together do not all come back at the same instant.
const RETRY_FIRST: Duration = Duration::from_millis(400);
const RETRY_CAP: Duration = Duration::from_millis(6_400);

/// Creates `obj` (an existing one counts: a retried create may have gone through), then
/// merges `status` into its status subresource; each step retried.
async fn create<K>(api: &Api<K>, obj: &K, status: Option<&Value>) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let mut attempt = 0;
    let mut backoff = Backoff::with_bounds(RETRY_FIRST, RETRY_CAP, entropy_seed());
    loop {
        let created = match api.create(&PostParams::default(), obj).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        };
        let result = match (created, status) {
            (Ok(()), Some(st)) => api
                .patch_status(&name, &Default::default(), &kube::api::Patch::Merge(st))
                .await
                .map(|_| ()),
            (r, _) => r,
        };
        match result {
            Ok(()) => return Ok(()),
            Err(e) if attempt + 1 >= ATTEMPTS => {
                return Err(e).with_context(|| format!("creating {name}"));
            }
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(backoff.next_delay()).await;
            }
        }
    }
}

/// A harness of our own: the shared helper stops its harness after 30 minutes, and a
/// 100 000-Pod run takes longer. It stops when this process exits (its stdin closes).
fn start_harness() -> anyhow::Result<(std::process::Child, PathBuf)> {
    use std::io::BufRead;
    let mut child = Command::new(envtest::harness_bin())
        .arg("--timeout=4h")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting the envtest harness (SVCPLANE_ENVTEST_BIN)")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    if line.trim().is_empty() {
        bail!("the harness did not report a kubeconfig");
    }
    Ok((child, PathBuf::from(line.trim())))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    if let Some(n) = args.one {
        let rt = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => return fail(&format!("runtime: {e}")),
        };
        return match rt.block_on(measure(&args, n)) {
            Ok(row) => {
                let _ = writeln!(std::io::stdout(), "{row}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&format!("{e:#}")),
        };
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "| Pods | Services | Nodes | peak RSS (VmHWM) | RSS after convergence | converged in |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- |");
    let Ok(me) = std::env::current_exe() else {
        return fail("no current executable");
    };
    let mut ok = true;
    for n in &args.pods {
        let mut cmd = Command::new(&me);
        cmd.arg("--one").arg(n.to_string());
        cmd.arg(format!("--pods-per-service={}", args.pods_per_service));
        cmd.arg(format!("--pods-per-node={}", args.pods_per_node));
        cmd.arg(format!("--kube-api-qps={}", args.kube_api_qps));
        cmd.arg(format!("--kube-api-burst={}", args.kube_api_burst));
        if let Some(b) = &args.bin {
            cmd.arg("--bin").arg(b);
        }
        match cmd.stderr(Stdio::inherit()).output() {
            Ok(o) if o.status.success() => {
                let _ = out.write_all(&o.stdout);
                let _ = out.flush();
            }
            Ok(o) => {
                ok = false;
                let _ = writeln!(std::io::stderr(), "size {n} failed: {}", o.status);
            }
            Err(e) => return fail(&format!("starting the child for {n}: {e}")),
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn fail(msg: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "sizing: {msg}");
    ExitCode::FAILURE
}

fn log(msg: &str) {
    let _ = writeln!(std::io::stderr(), "[sizing] {msg}");
}

async fn measure(args: &Args, pods: usize) -> anyhow::Result<String> {
    let bin = args.bin.clone().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/svcplane")
    });
    if !bin.is_file() {
        bail!(
            "{} is missing: cargo build --release -p svcplane-controller",
            bin.display()
        );
    }
    let (_harness, kubeconfig) = start_harness()?;
    let cluster = envtest::Cluster {
        kubeconfig,
        external: false,
    };
    let client = cluster.client().await?;
    install_claim_crd(&client).await?;
    let n_services = pods.div_ceil(args.pods_per_service).max(1);
    let n_nodes = pods.div_ceil(args.pods_per_node).max(1);
    let started = Instant::now();

    for i in 0..NAMESPACES {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": format!("ns-{i:03}")}}))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .context("namespace")?;
    }
    let node_specs: Vec<NodeSpec> = nodes(n_nodes, &[8000]);
    futures::stream::iter(node_specs.iter().map(|n| {
        let api = Api::<Node>::all(client.clone());
        let body = n.to_json();
        async move {
            let node: Node = serde_json::from_value(for_create(body.clone()))?;
            create(&api, &node, Some(&json!({"status": body["status"]}))).await
        }
    }))
    .buffer_unordered(CONCURRENCY)
    .try_collect::<Vec<_>>()
    .await
    .context("nodes")?;
    let svc_specs = services(n_services, NAMESPACES, false);
    futures::stream::iter(svc_specs.iter().map(|s| {
        let api = Api::<Service>::namespaced(client.clone(), &s.namespace);
        let body = s.to_json();
        async move {
            let svc: Service = serde_json::from_value(for_create(body))?;
            create(&api, &svc, None).await
        }
    }))
    .buffer_unordered(CONCURRENCY)
    .try_collect::<Vec<_>>()
    .await
    .context("services")?;
    log(&format!(
        "{n_nodes} nodes, {n_services} services in {:.0}s",
        started.elapsed().as_secs_f64()
    ));
    let mut factory = PodFactory::default();
    let pod_specs: Vec<_> = (0..pods)
        .map(|i| {
            let svc = &svc_specs[i % n_services];
            let node = &node_specs[i % n_nodes].name;
            factory.make(svc, "7d9f8c6b5", node, true, 0)
        })
        .collect();
    let done = std::sync::atomic::AtomicUsize::new(0);
    futures::stream::iter(pod_specs.iter().map(|p| {
        let api = Api::<Pod>::namespaced(client.clone(), &p.namespace);
        let body = p.to_json();
        let done = &done;
        async move {
            let pod: Pod = serde_json::from_value(for_create(body.clone()))?;
            create(&api, &pod, Some(&json!({"status": body["status"]}))).await?;
            let d = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            if d.is_multiple_of(10_000) {
                log(&format!("{d} pods"));
            }
            anyhow::Ok(())
        }
    }))
    .buffer_unordered(CONCURRENCY)
    .try_collect::<Vec<_>>()
    .await
    .context("pods")?;
    log(&format!(
        "{pods} pods in {:.0}s; starting svcplane run",
        started.elapsed().as_secs_f64()
    ));

    let dir = std::env::temp_dir().join(format!("svcplane-sizing-{}", std::process::id()));
    let certs = certs(&dir, &["127.0.0.1"])?;
    let admin: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse()?;
    let run_args = vec![
        "run".to_owned(),
        format!("--kubeconfig={}", cluster.kubeconfig.display()),
        format!("--tls-cert-file={}", certs.cert_file.display()),
        format!("--tls-private-key-file={}", certs.key_file.display()),
        format!("--webhook-bind-address=127.0.0.1:{}", free_port()),
        format!("--metrics-bind-address={admin}"),
        "--service-cluster-ip-range=10.96.0.0/16".into(),
        format!("--kube-api-qps={}", args.kube_api_qps),
        format!("--kube-api-burst={}", args.kube_api_burst),
        "--leader-elect-resource-namespace=kube-system".into(),
    ];
    let run_started = Instant::now();
    let mut p = SvcplaneProcess::spawn(&bin, "svcplane-sizing", &run_args, Some(admin));
    let pid = p.pid();
    let want = n_services as f64;
    let mut quiet_since: Option<Instant> = None;
    loop {
        if p.exited() {
            bail!("svcplane run exited");
        }
        let slices = p
            .metric("svcplane_api_writes_total{verb=\"create\",resource=\"endpointslices\"}")
            .unwrap_or(0.0);
        let endpoints = p
            .metric("svcplane_api_writes_total{verb=\"create\",resource=\"endpoints\"}")
            .unwrap_or(0.0);
        let depth: f64 = ["endpoint_slice", "endpoint", "endpoint_slice_mirroring"]
            .iter()
            .map(|q| {
                p.metric(&format!("workqueue_depth{{name=\"{q}\"}}"))
                    .unwrap_or(0.0)
            })
            .sum();
        if slices >= want && endpoints >= want && depth == 0.0 {
            let since = *quiet_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(5) {
                break;
            }
        } else {
            quiet_since = None;
        }
        if run_started.elapsed() > Duration::from_secs(3600) {
            bail!("not converged after an hour: {slices} slices, {endpoints} endpoints");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let converged = run_started.elapsed().as_secs_f64() - 5.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |field: &str| -> anyhow::Result<f64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .with_context(|| format!("{field} in /proc/{pid}/status"))
    };
    let hwm = kib("VmHWM:")? / 1024.0;
    let rss = kib("VmRSS:")? / 1024.0;
    drop(p);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!(
        "| {pods} | {n_services} | {n_nodes} | {hwm:.0} MiB | {rss:.0} MiB | {converged:.0} s |"
    ))
}
