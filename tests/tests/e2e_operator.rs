//! The operator's path on a real kubelet: the repository's image and chart,
//! installed with helm on the single-node cluster (`NodeCluster`), beside a real
//! application and a client that keeps calling it.
//!
//! One test walks the whole path in the order an operator takes it, because each
//! step starts from the state the previous one left (as on a real cluster):
//!
//! 1. an application (`web`, 3 busybox httpd replicas behind a Service) and a client
//!    Pod calling it by DNS name every 200 ms, with kube-controller-manager (KCM)
//!    running its endpoint controllers;
//! 2. `helm install` as the README prints it (plus the local image): 2 replicas
//!    Ready, one Lease holder, the webhook reached through its Service (a create gets
//!    an AllocationClaim) and a bad ClusterIP refused with 422 through kubectl;
//! 3. the hand-over: the overlap (both writers) measured — EndpointSlice 409s, Warning
//!    events, fail-open webhook calls — then KCM's three controllers switched off with
//!    the README's flags; scaling and a rolling update followed by svcplane alone; a
//!    Pod made unready is never answered from;
//! 4. the leader Pod deleted: a new leader, and `web` never without endpoints;
//! 5. `helm upgrade`, `helm rollback` (its check hook runs), `helm test` (no Pod left);
//!    then slices only (KEP-4974: the Endpoints and mirroring controllers off, their
//!    RBAC gone): nothing writes Endpoints, kube-proxy and CoreDNS (a headless
//!    Service) work from slices, and the Endpoints come back with their controller;
//! 6. the emergency switch and its restore: the re-created configurations carry the
//!    CA at once (no x509 window); then `svcplane migrate --apply` moves a Service
//!    from one ServiceCIDR to another while a second client calls it by name, and
//!    the time that client fails is printed beside the command's own gap;
//! 7. `helm uninstall`: no webhook configuration left, `web` keeps its endpoints; a
//!    re-install leads within seconds, not a lease duration; KCM back in the
//!    README's rollback order;
//! 8. a release whose Pods crash-loop fails its install within a minute, with the
//!    cause in the check Job's log.
//!
//! The client's failed requests are counted through every step and must stay 0.
//! Figures (times, writes, 409s, events) are printed with `--nocapture`; the README
//! quotes them.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::ListParams;
use svcplane_tests::node_cluster::{BUSYBOX, NodeCluster};
use svcplane_tests::skip::{self, Skip};

use svcplane_controller::core::slice_endpoints::SliceEndpoints;

const NS: &str = "kube-system";
const APP_NS: &str = "shop";
/// The README's hand-over flags for kube-controller-manager.
const KCM_WITHOUT_ENDPOINT_CONTROLLERS: &str = "--controllers=*,-endpointslice-controller,-endpoints-controller,-endpointslice-mirroring-controller";

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `what`, panicking with its output unless it succeeded; returns stdout.
fn ok(what: &str, out: Output) -> String {
    assert!(out.status.success(), "{what} failed:\n{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kubectl(c: &NodeCluster, args: &[&str]) -> String {
    ok(&format!("kubectl {}", args.join(" ")), c.kubectl(args))
}

fn apply(c: &NodeCluster, yaml: &str) {
    let path = std::env::temp_dir().join(format!("e2e-operator-{}.yaml", std::process::id()));
    std::fs::write(&path, yaml).unwrap();
    kubectl(c, &["apply", "-f", &path.display().to_string()]);
}

/// The newest modification time under `dir` (files only).
fn newest(dir: &std::path::Path) -> Option<SystemTime> {
    let mut latest = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let t = if path.is_dir() {
            newest(&path)
        } else {
            entry.metadata().ok()?.modified().ok()
        };
        latest = latest.max(t);
    }
    latest
}

/// Environment variable: an image archive to test as it is (no staleness check).
const ENV_IMAGE: &str = "SVCPLANE_E2E_IMAGE";

/// The image `scripts/image build` wrote (`.ci/run` builds it before the tests), or
/// why there is none to test: missing, or older than the sources it is built from
/// (a stale image would test yesterday's binary). [`ENV_IMAGE`] overrides.
fn image_archive() -> Result<PathBuf, Skip> {
    if let Some(given) = std::env::var_os(ENV_IMAGE) {
        return Ok(PathBuf::from(given));
    }
    let root = svcplane_tests::envtest::build::workspace();
    let version = env!("CARGO_PKG_VERSION");
    let enable =
        "run `scripts/image build` (as .ci/run does before the tests), then the suite again";
    let found = std::fs::read_dir(root.join("target/image"))
        .ok()
        .and_then(|dir| {
            dir.flatten().map(|e| e.path()).find(|p| {
                p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n.starts_with(&format!("svcplane-{version}-")) && n.ends_with(".oci.tar")
                })
            })
        })
        .ok_or_else(|| {
            Skip::missing(
                "the svcplane image (target/image/*.oci.tar) is not built",
                enable,
            )
        })?;
    let built = std::fs::metadata(&found).and_then(|m| m.modified()).ok();
    let sources = ["allocator/src", "controller/src", "webhook/src"]
        .iter()
        .filter_map(|d| newest(&root.join(d)))
        .max();
    if built < sources {
        return Err(Skip::missing(
            format!(
                "the svcplane image {} is older than the sources",
                found.display()
            ),
            enable,
        ));
    }
    Ok(found)
}

/// What to look at when a helm command failed: the check Job's verdict and the Pods.
fn diagnose(c: &NodeCluster) -> String {
    let mut out = String::new();
    for args in [
        &["-n", NS, "logs", "job/svcplane-check"][..],
        &["-n", NS, "get", "pods", "-o", "wide"][..],
        &[
            "-n",
            NS,
            "describe",
            "pods",
            "-l",
            "app.kubernetes.io/name=svcplane",
        ][..],
        &[
            "-n",
            NS,
            "logs",
            "-l",
            "app.kubernetes.io/name=svcplane",
            "--tail=30",
        ][..],
    ] {
        out.push_str(&format!(
            "\n--- kubectl {}\n{}",
            args.join(" "),
            text(&c.kubectl(args))
        ));
    }
    out
}

/// A helm command that must succeed; on failure, panics with [`diagnose`].
fn helm_ok(c: &NodeCluster, what: &str, args: &[String]) -> String {
    let out = helm(c, args);
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        text(&out),
        diagnose(c)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The values every install here uses: the README's, plus the image imported into
/// the node (no registry here).
fn install_args(extra: &[&str]) -> Vec<String> {
    let root = svcplane_tests::envtest::build::workspace();
    let mut args: Vec<String> = vec![
        "install".into(),
        "svcplane".into(),
        root.join("charts/svcplane").display().to_string(),
        "-n".into(),
        NS.into(),
        "--set".into(),
        "image.repository=svcplane".into(),
        "--set".into(),
        format!("image.tag={}", env!("CARGO_PKG_VERSION")),
        "--set".into(),
        "image.pullPolicy=Never".into(),
        "--set".into(),
        "serviceNodePortRange=30000-32767".into(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

fn helm(c: &NodeCluster, args: &[String]) -> Output {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    c.helm(&refs)
}

/// Polls `probe` every 200 ms until it returns `Some`, or panics after `limit`.
async fn until<T, F, Fut>(limit: Duration, what: &str, mut probe: F) -> (T, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return (v, start.elapsed());
        }
        assert!(start.elapsed() < limit, "timed out after {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `kubectl rollout status` of `deployment` in `ns`, failing the test after `timeout`.
fn rollout_status(c: &NodeCluster, ns: &str, deployment: &str, timeout: &str) {
    kubectl(
        c,
        &[
            "-n",
            ns,
            "rollout",
            "status",
            &format!("deployment/{deployment}"),
            &format!("--timeout={timeout}"),
        ],
    );
}

/// Waits (30 s at most) until `web`'s slices list exactly its `n` ready Pods; how
/// long that took.
async fn slices_follow(
    c: &NodeCluster,
    slices: &Api<EndpointSlice>,
    n: usize,
    what: &str,
) -> Duration {
    let (_, took) = until(Duration::from_secs(30), what, || async {
        let want = ready_pod_ips(c);
        (want.len() == n && ready_addresses(slices).await == want).then_some(())
    })
    .await;
    took
}

/// The application: `web` (busybox httpd answering its own Pod name, ready while
/// /tmp/ready exists, a preStop pause so kube-proxy drops it before it stops), its
/// Service, and a client calling it by name. A call fails when it is refused or
/// has no answer within 5 s: a request sent to a Pod that is gone hangs (its
/// address no longer answers ARP), so a stale endpoint still fails it, while a
/// node busy with parallel suites (2 cores in CI) may take seconds to answer a
/// healthy one. Answers that took 3 s or more are marked `slow <unix seconds>
/// <duration>` and printed with the step they fell in.
fn app_yaml(replicas: u32) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {APP_NS}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {APP_NS}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  strategy: {{rollingUpdate: {{maxUnavailable: 0, maxSurge: 1}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
        - name: httpd
          image: {BUSYBOX}
          imagePullPolicy: Never
          command: ["sh", "-c", "mkdir -p /www && echo $HOSTNAME > /www/index.html && touch /tmp/ready && exec httpd -f -p 8080 -h /www"]
          ports: [{{containerPort: 8080, name: http}}]
          readinessProbe:
            exec: {{command: ["test", "-f", "/tmp/ready"]}}
            periodSeconds: 1
          lifecycle:
            preStop: {{exec: {{command: ["sleep", "3"]}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {APP_NS}}}
spec:
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: http}}]
---
{}"#,
        shell_pod(
            "client",
            &format!(
                "while true; do t=$(date +%s); if body=$(timeout 5 wget -q -O - http://web.{APP_NS}.svc.cluster.local/ 2>&1); then took=$(( $(date +%s) - t )); if [ $took -ge 3 ]; then echo \"ok $body slow $t ${{took}}s\"; else echo \"ok $body\"; fi; else echo \"FAIL $t $body\"; fi; sleep 0.2; done"
            )
        )
    )
}

/// A Pod `name` in the application namespace whose one container runs `script` in
/// busybox's shell (the test's client loops), as YAML.
fn shell_pod(name: &str, script: &str) -> String {
    let command = serde_json::json!(["sh", "-c", script]);
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {APP_NS}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: client
      image: {BUSYBOX}
      imagePullPolicy: Never
      command: {command}
"#
    )
}

/// A headless Service over `web`'s Pods: CoreDNS answers its name with the Pods'
/// addresses, which it reads from EndpointSlices.
fn headless_yaml() -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: web-pods, namespace: {APP_NS}}}
spec:
  clusterIP: None
  selector: {{app: web}}
  ports: [{{port: 8080, targetPort: http}}]
"#
    )
}

/// When each step of the path began (unix seconds), so a failed client call can
/// name the step it fell in: the client's FAIL lines carry `date +%s`.
#[derive(Default)]
struct Steps(Vec<(u64, &'static str)>);

impl Steps {
    fn enter(&mut self, step: &'static str) {
        self.0.push((unix_now(), step));
    }

    /// The step under way at `at`, or "before the first step".
    fn at(&self, at: u64) -> &'static str {
        self.0
            .iter()
            .rev()
            .find(|(began, _)| *began <= at)
            .map_or("before the first step", |(_, step)| step)
    }

    /// Each line (`FAIL <unix seconds> <output>` or `slow <unix seconds> <took>`)
    /// with the step it fell in.
    fn place(&self, failed: &[String]) -> Vec<String> {
        failed
            .iter()
            .map(|line| {
                let at = line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(0);
                format!("{line} (during {})", self.at(at))
            })
            .collect()
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The client's log lines so far.
fn client_log(c: &NodeCluster) -> Vec<String> {
    kubectl(c, &["-n", APP_NS, "logs", "client"])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The ready addresses of `web`'s EndpointSlices.
async fn ready_addresses(slices: &Api<EndpointSlice>) -> Vec<String> {
    let list = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
        .await
        .unwrap();
    let mut out: Vec<String> = list
        .items
        .iter()
        .flat_map(|s| s.endpoints().iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false))
        .flat_map(|e| e.addresses.iter().cloned())
        .collect();
    out.sort();
    out
}

/// The ready addresses of `web`'s Endpoints object, sorted; none while it does not exist (right
/// after the Endpoints controller is switched back on, its first write is still
/// coming: a poll must not fail on that).
fn endpoints_ips(c: &NodeCluster) -> Vec<String> {
    let out = c.kubectl(&[
        "-n",
        APP_NS,
        "get",
        "endpoints",
        "web",
        "--ignore-not-found",
        "-o",
        "jsonpath={.subsets[*].addresses[*].ip}",
    ]);
    let out = ok("kubectl get endpoints web", out);
    let mut ips: Vec<String> = out.split_whitespace().map(str::to_owned).collect();
    ips.sort();
    ips
}

/// The IPs of `web`'s Pods that are Ready.
fn ready_pod_ips(c: &NodeCluster) -> Vec<String> {
    let out = kubectl(
        c,
        &[
            "-n",
            APP_NS,
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            r#"jsonpath={range .items[*]}{.status.podIP} {.status.conditions[?(@.type=="Ready")].status} {.metadata.deletionTimestamp}{"\n"}{end}"#,
        ],
    );
    let mut ips: Vec<String> = out
        .lines()
        .filter_map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            (parts.len() == 2 && parts[1] == "True").then(|| parts[0].to_owned())
        })
        .collect();
    ips.sort();
    ips
}

/// A sample of kube-apiserver's own counter, summed over the series matching all of
/// `needles` (from `kubectl get --raw /metrics`).
fn apiserver_counter(c: &NodeCluster, name: &str, needles: &[&str]) -> f64 {
    kubectl(c, &["get", "--raw", "/metrics"])
        .lines()
        .filter(|l| l.starts_with(name) && needles.iter().all(|n| l.contains(n)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `later - earlier` in seconds, both RFC 3339 timestamps as the API server writes them.
fn seconds_between(earlier: &str, later: &str) -> f64 {
    let t = |s: &str| -> k8s_openapi::jiff::Timestamp { s.trim().parse().unwrap() };
    t(later).duration_since(t(earlier)).as_secs_f64()
}

fn warning_events(c: &NodeCluster) -> Vec<String> {
    kubectl(
        c,
        &[
            "get",
            "events",
            "-A",
            "--field-selector",
            "type=Warning",
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.namespace}/{.involvedObject.name} {.reason}: {.message} x{.count}{"\n"}{end}"#,
        ],
    )
    .lines()
    .map(str::to_owned)
    .collect()
}

async fn lease_holder(leases: &Api<Lease>) -> Option<(String, String)> {
    let lease = leases.get_opt("svcplane").await.ok()??;
    let spec = lease.spec?;
    let holder = spec.holder_identity.filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.map(|t| t.0.to_string()).unwrap_or_default();
    Some((holder, renewed))
}

/// Waits until a replica other than `not` is seen renewing the Lease; returns it.
async fn new_leader(leases: &Api<Lease>, not: Option<&str>, limit: Duration) -> (String, Duration) {
    let first = lease_holder(leases).await;
    until(limit, "a replica renewing the Lease", || {
        let first = first.clone();
        async move {
            let now = lease_holder(leases).await?;
            let renewed = first.as_ref() != Some(&now);
            (renewed && Some(now.0.as_str()) != not).then_some(now.0)
        }
    })
    .await
}

fn pods_of_svcplane(c: &NodeCluster) -> Vec<String> {
    kubectl(
        c,
        &[
            "-n",
            NS,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=svcplane",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
    )
    .split_whitespace()
    .map(str::to_owned)
    .collect()
}

fn webhook_configurations(c: &NodeCluster) -> String {
    kubectl(
        c,
        &[
            "get",
            "mutatingwebhookconfiguration,validatingwebhookconfiguration",
            "-l",
            "app.kubernetes.io/name=svcplane",
            "-o",
            "name",
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_path_on_a_real_kubelet() {
    let archive = if svcplane_tests::envtest::external_kubeconfig().is_some() {
        eprintln!("e2e_operator: external cluster: load the svcplane image into its nodes first");
        None
    } else {
        match image_archive() {
            Ok(archive) => Some(archive),
            Err(why) => {
                skip::skip("e2e_operator", &why);
                return;
            }
        }
    };
    let Some(c) = NodeCluster::start("e2e_operator") else {
        return;
    };
    if let Some(archive) = archive {
        c.import_image(&archive).unwrap();
    }
    let client = c.client().await.unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), APP_NS);
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    println!("node ready after {:.1}s", c.startup_time().as_secs_f64());

    let mut steps = Steps::default();
    steps.enter("1. the application with KCM");
    // 1. The application, with KCM's endpoint controllers.
    apply(&c, &app_yaml(3));
    rollout_status(&c, APP_NS, "web", "180s");
    kubectl(
        &c,
        &[
            "-n",
            APP_NS,
            "wait",
            "pod/client",
            "--for=condition=Ready",
            "--timeout=120s",
        ],
    );
    until(
        Duration::from_secs(60),
        "the client's first answer",
        || async {
            client_log(&c)
                .iter()
                .any(|l| l.starts_with("ok "))
                .then_some(())
        },
    )
    .await;
    let start_mark = client_log(&c).len();

    steps.enter("2. helm install");
    // 2. Install as the README says.
    let fail_open_before =
        apiserver_counter(&c, "apiserver_admission_webhook_fail_open_count", &[]);
    let conflicts_before = apiserver_counter(
        &c,
        "apiserver_request_total",
        &["resource=\"endpointslices\"", "code=\"409\""],
    );
    let warnings_before = warning_events(&c).len();
    let writes = |c: &NodeCluster| -> f64 {
        let mut sum = 0.0;
        for verb in ["POST", "PUT", "DELETE"] {
            for resource in ["endpointslices", "endpoints"] {
                let (verb, resource) = (
                    format!("verb=\"{verb}\""),
                    format!("resource=\"{resource}\""),
                );
                sum += apiserver_counter(
                    c,
                    "apiserver_request_total",
                    &[&verb, &resource, "code=\"20"],
                );
            }
        }
        sum
    };
    let writes_before = writes(&c);
    let started = Instant::now();
    helm_ok(&c, "helm install", &install_args(&[]));
    let install_time = started.elapsed();
    rollout_status(&c, NS, "svcplane", "120s");
    assert_eq!(pods_of_svcplane(&c).len(), 2);
    let (leader, _) = new_leader(&leases, None, Duration::from_secs(30)).await;
    println!(
        "helm install (with its check: webhook answers, a leader renews) {:.1}s; leader {leader}",
        install_time.as_secs_f64()
    );
    let fail_open_install =
        apiserver_counter(&c, "apiserver_admission_webhook_fail_open_count", &[])
            - fail_open_before;
    // The webhook through its Service: a create is answered (an AllocationClaim names
    // its ClusterIP) and a bad ClusterIP is refused with svcplane's 422.
    kubectl(
        &c,
        &[
            "-n",
            APP_NS,
            "create",
            "service",
            "clusterip",
            "smoke",
            "--tcp=80:80",
        ],
    );
    let smoke_ip = kubectl(
        &c,
        &[
            "-n",
            APP_NS,
            "get",
            "service",
            "smoke",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    );
    let claims = kubectl(
        &c,
        &[
            "get",
            "allocationclaims",
            "-o",
            "jsonpath={.items[*].spec.value}",
        ],
    );
    assert!(
        claims.split_whitespace().any(|v| v == smoke_ip),
        "no claim for {smoke_ip}: {claims}"
    );
    let refused = c.kubectl(&[
        "-n",
        APP_NS,
        "create",
        "service",
        "clusterip",
        "bad",
        "--tcp=80:80",
        "--clusterip=203.0.113.7",
    ]);
    assert!(!refused.status.success());
    let said = text(&refused);
    assert!(
        said.contains("denied the request") && said.contains("spec.clusterIPs"),
        "{said}"
    );

    steps.enter("3. overlap and hand-over");
    // 3. The overlap (both write), then the hand-over.
    kubectl(
        &c,
        &["-n", APP_NS, "scale", "deployment/web", "--replicas=5"],
    );
    rollout_status(&c, APP_NS, "web", "120s");
    until(Duration::from_secs(30), "5 ready endpoints", || async {
        (ready_addresses(&slices).await.len() == 5).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let overlap_409 = apiserver_counter(
        &c,
        "apiserver_request_total",
        &["resource=\"endpointslices\"", "code=\"409\""],
    ) - conflicts_before;
    let overlap_writes = writes(&c) - writes_before;
    let overlap_warnings: Vec<String> = warning_events(&c)
        .into_iter()
        .skip(warnings_before)
        .collect();
    println!(
        "overlap (install + scale 3->5 with both writers): {overlap_writes} EndpointSlice and Endpoints \
         writes by both, {overlap_409} EndpointSlice 409s, \
         {} Warning events, {fail_open_install} fail-open webhook calls during install",
        overlap_warnings.len()
    );
    for w in &overlap_warnings {
        println!("  warning: {w}");
    }
    c.restart_kcm(&[KCM_WITHOUT_ENDPOINT_CONTROLLERS]).unwrap();
    let handover = Instant::now();
    kubectl(
        &c,
        &["-n", APP_NS, "scale", "deployment/web", "--replicas=2"],
    );
    kubectl(&c, &["-n", APP_NS, "rollout", "restart", "deployment/web"]);
    rollout_status(&c, APP_NS, "web", "180s");
    let followed = slices_follow(&c, &slices, 2, "slices follow the rollout").await;
    assert_eq!(endpoints_ips(&c), ready_pod_ips(&c), "Endpoints follow too");
    println!(
        "svcplane alone: scale 5->2 and a rolling update followed ({:.1}s after rollout status)",
        followed.as_secs_f64()
    );
    let _ = handover;
    // A Pod made unready is never answered from. Chosen among the Ready Pods not
    // being deleted: the rolling update's old Pods may still be terminating.
    let pods = kubectl(
        &c,
        &[
            "-n",
            APP_NS,
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.metadata.deletionTimestamp}{"\n"}{end}"#,
        ],
    );
    let unready = pods
        .lines()
        .find_map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            (parts.len() == 2 && parts[1] == "True").then(|| parts[0].to_owned())
        })
        .expect("a Ready web Pod");
    kubectl(
        &c,
        &["-n", APP_NS, "exec", &unready, "--", "rm", "/tmp/ready"],
    );
    until(
        Duration::from_secs(30),
        "the unready Pod leaves the ready endpoints",
        || async { (ready_addresses(&slices).await.len() == 1).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mark = client_log(&c).len();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let answered: Vec<String> = client_log(&c).into_iter().skip(mark).collect();
    assert!(answered.len() >= 5, "{answered:?}");
    assert!(
        answered
            .iter()
            .all(|l| l.starts_with("ok ") && !l.contains(&unready)),
        "answered by the unready Pod {unready}: {answered:?}"
    );
    kubectl(
        &c,
        &["-n", APP_NS, "exec", &unready, "--", "touch", "/tmp/ready"],
    );

    steps.enter("4. leader Pod deleted");
    // 4. The leader Pod deleted: a new leader, and web never without endpoints.
    let (leader, _) = new_leader(&leases, None, Duration::from_secs(30)).await;
    let deleted = Instant::now();
    kubectl(&c, &["-n", NS, "delete", "pod", &leader, "--wait=false"]);
    let watcher = {
        let slices = slices.clone();
        tokio::spawn(async move {
            let mut emptiest = usize::MAX;
            let until = Instant::now() + Duration::from_secs(25);
            while Instant::now() < until {
                emptiest = emptiest.min(ready_addresses(&slices).await.len());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            emptiest
        })
    };
    let (next, _) = new_leader(&leases, Some(&leader), Duration::from_secs(30)).await;
    let failover = deleted.elapsed();
    kubectl(
        &c,
        &["-n", APP_NS, "scale", "deployment/web", "--replicas=3"],
    );
    until(
        Duration::from_secs(60),
        "the new leader writes the scale-up",
        || async { (ready_addresses(&slices).await.len() == 3).then_some(()) },
    )
    .await;
    assert!(
        watcher.await.unwrap() >= 1,
        "web was without ready endpoints"
    );
    println!(
        "leader Pod deleted: {next} leads after {:.1}s",
        failover.as_secs_f64()
    );
    assert!(failover < Duration::from_secs(15), "{failover:?}");

    steps.enter("5. upgrade, rollback, test");
    // 5. upgrade, rollback (its check runs), test (nothing left).
    let mut upgrade = install_args(&["--reuse-values", "--set", "logging.level=debug"]);
    upgrade[0] = "upgrade".into();
    let started = Instant::now();
    helm_ok(&c, "helm upgrade", &upgrade);
    println!("helm upgrade {:.1}s", started.elapsed().as_secs_f64());
    let started = Instant::now();
    let rollback = ok(
        "helm rollback",
        c.helm(&["rollback", "svcplane", "1", "-n", NS]),
    );
    let rollback_time = started.elapsed();
    let job_events = kubectl(
        &c,
        &[
            "-n",
            NS,
            "get",
            "events",
            "--field-selector",
            "involvedObject.kind=Job,involvedObject.name=svcplane-check,reason=Completed",
            "-o",
            "name",
        ],
    );
    assert!(
        job_events.lines().count() >= 3,
        "install, upgrade and rollback each ran the check: {job_events}\n{rollback}"
    );
    println!(
        "helm rollback (with its check) {:.1}s",
        rollback_time.as_secs_f64()
    );
    ok("helm test", c.helm(&["test", "svcplane", "-n", NS]));
    let left = c.kubectl(&["-n", NS, "get", "pod", "svcplane-check-test"]);
    assert!(
        !left.status.success(),
        "a passed helm test leaves its Pod: {}",
        text(&left)
    );

    steps.enter("5b. slices only");
    // 5b. Slices only, as upstream's KEP-4974 CI job runs the control plane: the
    // Endpoints and mirroring controllers off (KCM's are off since step 3), so
    // nothing writes Endpoints, and the data plane works from slices alone:
    // kube-proxy for the ClusterIP, CoreDNS for a headless Service's Pod records.
    let mut slices_only = install_args(&[
        "--reuse-values",
        "--set",
        "controllers={endpointslice,allocator-repair}",
    ]);
    slices_only[0] = "upgrade".into();
    helm_ok(&c, "helm upgrade (slices only)", &slices_only);
    let role = kubectl(&c, &["get", "clusterrole", "svcplane", "-o", "yaml"]);
    assert!(
        !role.contains("- endpoints\n"),
        "the slices-only release is still granted Endpoints:\n{role}"
    );
    rollout_status(&c, NS, "svcplane", "120s");
    new_leader(&leases, None, Duration::from_secs(30)).await;
    apply(&c, &headless_yaml());
    // Every Endpoints object the Endpoints controller wrote before goes; none may
    // come back while it is off.
    kubectl(&c, &["-n", APP_NS, "delete", "endpoints", "--all"]);
    kubectl(
        &c,
        &["-n", APP_NS, "scale", "deployment/web", "--replicas=4"],
    );
    rollout_status(&c, APP_NS, "web", "120s");
    let followed = slices_follow(&c, &slices, 4, "slices follow the scale-up").await;
    let (_, resolved) = until(
        Duration::from_secs(30),
        "CoreDNS answers the headless Service with every ready Pod",
        || async {
            let answer = text(&c.kubectl(&[
                "-n",
                APP_NS,
                "exec",
                "client",
                "--",
                "nslookup",
                &format!("web-pods.{APP_NS}.svc.cluster.local"),
            ]));
            ready_pod_ips(&c)
                .iter()
                .all(|ip| answer.contains(ip.as_str()))
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let left = kubectl(&c, &["-n", APP_NS, "get", "endpoints", "-o", "name"]);
    assert!(
        left.trim().is_empty(),
        "something wrote Endpoints with their controllers off: {left}"
    );
    println!(
        "slices only: scale 2->4 in slices {:.1}s after rollout, headless DNS {:.1}s, no Endpoints written",
        followed.as_secs_f64(),
        resolved.as_secs_f64()
    );
    let mut all_back = install_args(&[
        "--reuse-values",
        "--set",
        "controllers={endpointslice,endpoints,endpointslicemirroring,allocator-repair}",
    ]);
    all_back[0] = "upgrade".into();
    helm_ok(&c, "helm upgrade (all controllers)", &all_back);
    until(
        Duration::from_secs(60),
        "Endpoints written again",
        || async { (endpoints_ips(&c).len() == 4).then_some(()) },
    )
    .await;
    kubectl(&c, &["-n", APP_NS, "delete", "service", "web-pods"]);
    kubectl(
        &c,
        &["-n", APP_NS, "scale", "deployment/web", "--replicas=3"],
    );

    steps.enter("6. emergency switch and restore");
    // 6. Emergency switch, then restore: the CA is there at once.
    let fail_open_before =
        apiserver_counter(&c, "apiserver_admission_webhook_fail_open_count", &[]);
    kubectl(
        &c,
        &[
            "delete",
            "mutatingwebhookconfiguration,validatingwebhookconfiguration",
            "svcplane",
        ],
    );
    let mut restore = install_args(&["--reuse-values"]);
    restore[0] = "upgrade".into();
    helm_ok(&c, "helm upgrade --reuse-values", &restore);
    let bundle = kubectl(
        &c,
        &[
            "get",
            "mutatingwebhookconfiguration",
            "svcplane",
            "-o",
            "jsonpath={.webhooks[0].clientConfig.caBundle}",
        ],
    );
    let stored = kubectl(
        &c,
        &[
            "-n",
            NS,
            "get",
            "secret",
            "svcplane-webhook-certs",
            "-o",
            "jsonpath={.data.ca\\.crt}",
        ],
    );
    assert!(
        !bundle.is_empty() && bundle == stored,
        "restored configuration without the stored CA"
    );
    kubectl(
        &c,
        &[
            "-n",
            APP_NS,
            "create",
            "service",
            "clusterip",
            "after-restore",
            "--tcp=80:80",
        ],
    );
    let fail_open_restore =
        apiserver_counter(&c, "apiserver_admission_webhook_fail_open_count", &[])
            - fail_open_before;
    assert_eq!(fail_open_restore, 0.0, "the restored webhook failed open");

    steps.enter("6b. leaving a Service range");
    // 6b. `svcplane migrate --apply` moves a Service to another ServiceCIDR while a
    // client calls it by name: what its clients see, beside what the command measured.
    let (api_gap_ms, client_outage) = leave_a_service_range(&c).await;
    // The client resolves the name again once CoreDNS's answer expires (its `ttl 5`)
    // and kube-proxy programs the new address: seconds, not the command's gap.
    assert!(
        client_outage < Duration::from_secs(15),
        "the client failed for {client_outage:?}"
    );
    println!(
        "migrate --apply: the Service existed nowhere for {api_gap_ms} ms; its client, \
         calling it by name every 50 ms, failed for {:.1}s (CoreDNS and kube-proxy catching up)",
        client_outage.as_secs_f64()
    );

    steps.enter("7. uninstall, re-install, KCM back");
    // 7. Uninstall (KCM still off): nothing of the webhook left, endpoints kept.
    let started = Instant::now();
    ok(
        "helm uninstall",
        c.helm(&["uninstall", "svcplane", "-n", NS, "--wait"]),
    );
    println!("helm uninstall {:.1}s", started.elapsed().as_secs_f64());
    assert_eq!(webhook_configurations(&c).trim(), "");
    assert_eq!(
        ready_addresses(&slices).await.len(),
        3,
        "web lost its endpoints"
    );
    // Re-install: the Lease left to a Pod that is gone is taken over at once.
    let started = Instant::now();
    helm_ok(&c, "helm install again", &install_args(&[]));
    let reinstall = started.elapsed();
    let (again, _) = new_leader(&leases, None, Duration::from_secs(30)).await;
    println!(
        "re-install to a renewing leader ({again}): {:.1}s (helm install returns once one renews)",
        reinstall.as_secs_f64()
    );
    // The new leader took the Lease over within seconds of its Pod's creation, where
    // waiting out the old holder's lease would take 15 s or more.
    let acquired = kubectl(
        &c,
        &[
            "-n",
            NS,
            "get",
            "lease",
            "svcplane",
            "-o",
            "jsonpath={.spec.acquireTime}",
        ],
    );
    let created = kubectl(
        &c,
        &[
            "-n",
            NS,
            "get",
            "pod",
            &again,
            "-o",
            "jsonpath={.metadata.creationTimestamp}",
        ],
    );
    let took = seconds_between(&created, &acquired);
    println!("  the new leader acquired the Lease {took:.1}s after its Pod was created");
    assert!(
        took < 14.0,
        "the Lease left by the uninstalled release was waited out: {took:.1}s"
    );
    steps.enter("7b. KCM back, then uninstall");
    // The README's rollback order: KCM's controllers first, then uninstall.
    c.restart_kcm(&[]).unwrap();
    ok(
        "helm uninstall",
        c.helm(&["uninstall", "svcplane", "-n", NS, "--wait"]),
    );
    kubectl(
        &c,
        &["-n", APP_NS, "scale", "deployment/web", "--replicas=4"],
    );
    until(Duration::from_secs(60), "KCM writes again", || async {
        (ready_addresses(&slices).await.len() == 4).then_some(())
    })
    .await;

    steps.enter("8. crash-looping release");
    // 8. A release whose Pods crash-loop fails fast, saying why.
    let started = Instant::now();
    let crashing = helm(&c, &install_args(&["--set", "extraArgs={--no-such-flag}"]));
    let failed_after = started.elapsed();
    assert!(!crashing.status.success(), "{}", text(&crashing));
    let why = text(&c.kubectl(&["-n", NS, "logs", "job/svcplane-check"]));
    assert!(
        why.contains("no svcplane Pod can run") && why.contains("CrashLoopBackOff"),
        "{why}{}",
        diagnose(&c)
    );
    assert!(
        why.contains("--no-such-flag"),
        "the crash's own words: {why}"
    );
    assert!(failed_after < Duration::from_secs(120), "{failed_after:?}");
    println!(
        "a crash-looping release failed its install after {:.1}s",
        failed_after.as_secs_f64()
    );
    let _ = c.helm(&["uninstall", "svcplane", "-n", NS, "--wait"]);

    steps.enter("uninstall of the crash-looping release");
    // One read of the client's log for the whole path: its failures and slow answers.
    let calls: Vec<String> = client_log(&c).into_iter().skip(start_mark).collect();
    let failed: Vec<String> = calls
        .iter()
        .filter(|l| l.starts_with("FAIL"))
        .cloned()
        .collect();
    let slow: Vec<String> = calls
        .iter()
        .filter_map(|l| l.split_once(" slow ").map(|(_, at)| format!("slow {at}")))
        .collect();
    for line in steps.place(&slow) {
        println!("  answered slowly: {line}");
    }
    assert!(
        failed.is_empty(),
        "the client's calls failed: {:?}",
        steps.place(&failed)
    );
    println!(
        "client calls through the whole path: {} (0 failed)",
        calls.len()
    );
    println!("teardown {:.1}s", c.stop().as_secs_f64());
}

/// The ServiceCIDRs of step 6b: outside the node's 10.96.0.0/16 and its 10.250 node
/// network.
const MIG_OLD: &str = "10.98.0.0/24";
const MIG_NEW: &str = "10.99.0.0/24";

/// Step 6b: a Service `moving` in ServiceCIDR `mig-old` (over `web`'s Pods) and a
/// client calling it by name every 50 ms (`/proc/uptime` stamps, centiseconds); then
/// `svcplane migrate --from mig-old --to mig-new --apply` with the shipped binary.
/// Returns the command's gap (delete to create) and the longest run of the client's
/// failures; the client answers again afterwards, from the new address.
async fn leave_a_service_range(c: &NodeCluster) -> (u64, Duration) {
    let Some(bin) = svcplane_tests::binary::svcplane_bin() else {
        panic!("the svcplane binary is not built (cargo build -p svcplane-controller --bins)");
    };
    apply(
        c,
        &format!(
            r#"apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {{name: mig-old}}
spec: {{cidrs: ["{MIG_OLD}"]}}
---
apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {{name: mig-new}}
spec: {{cidrs: ["{MIG_NEW}"]}}
"#
        ),
    );
    // Both Ready (the controller manager's ServiceCIDR controller), and the webhook
    // follows them.
    for name in ["mig-old", "mig-new"] {
        kubectl(
            c,
            &[
                "wait",
                &format!("servicecidr/{name}"),
                "--for=condition=Ready",
                "--timeout=60s",
            ],
        );
    }
    let moving = format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: moving, namespace: {APP_NS}}}
spec:
  clusterIP: 10.98.0.100
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: http}}]
---
{}"#,
        shell_pod(
            "mover-client",
            &format!(
                "while true; do t=$(cut -d' ' -f1 /proc/uptime); if timeout 2 wget -q -O /dev/null http://moving.{APP_NS}.svc.cluster.local/ 2>/dev/null; then echo \"ok $t\"; else echo \"FAIL $t\"; fi; sleep 0.05; done"
            )
        )
    );
    // The webhook may need a moment to see the new ranges: a refused create is retried.
    let (_, _) = until(
        Duration::from_secs(30),
        "moving created in mig-old",
        || async {
            let path = std::env::temp_dir()
                .join(format!("e2e-operator-moving-{}.yaml", std::process::id()));
            std::fs::write(&path, &moving).unwrap();
            let out = c.kubectl(&["apply", "-f", &path.display().to_string()]);
            out.status.success().then_some(())
        },
    )
    .await;
    kubectl(
        c,
        &[
            "-n",
            APP_NS,
            "wait",
            "pod/mover-client",
            "--for=condition=Ready",
            "--timeout=120s",
        ],
    );
    let log = |c: &NodeCluster| -> Vec<(String, f64)> {
        kubectl(c, &["-n", APP_NS, "logs", "mover-client"])
            .lines()
            .filter_map(|l| {
                let (verdict, t) = l.split_once(' ')?;
                Some((verdict.to_owned(), t.trim().parse().ok()?))
            })
            .collect()
    };
    until(
        Duration::from_secs(60),
        "the mover client's first answer",
        || async {
            log(c)
                .iter()
                .rev()
                .take(5)
                .all(|(v, _)| v == "ok")
                .then_some(())
        },
    )
    .await;
    let out = std::process::Command::new(&bin)
        .args([
            "migrate", "--from", "mig-old", "--to", "mig-new", "--apply", "-o", "json",
        ])
        .arg(format!("--kubeconfig={}", c.kubeconfig().display()))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "migrate --apply: {}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let moved = &report["moved"][0];
    assert_eq!(moved["service"], format!("{APP_NS}/moving"), "{report}");
    let new_ip = moved["newClusterIps"][0].as_str().unwrap().to_owned();
    assert!(new_ip.starts_with("10.99.0."), "{report}");
    let gap = moved["gapMs"].as_u64().unwrap();
    // The client answers again (from the new address).
    until(
        Duration::from_secs(60),
        "the mover client answering again",
        || async {
            let l = log(c);
            let last_fail = l.iter().rposition(|(v, _)| v == "FAIL");
            (last_fail.is_some_and(|i| l.len() - i > 20)).then_some(())
        },
    )
    .await;
    let l = log(c);
    let mut longest = 0.0_f64;
    let mut last_ok: Option<f64> = None;
    let mut failing_since: Option<f64> = None;
    for (v, t) in &l {
        if v == "ok" {
            if let Some(since) = failing_since.take() {
                longest = longest.max(t - last_ok.unwrap_or(since));
            }
            last_ok = Some(*t);
        } else if failing_since.is_none() {
            failing_since = Some(*t);
        }
    }
    kubectl(
        c,
        &[
            "-n",
            APP_NS,
            "delete",
            "pod/mover-client",
            "service/moving",
            "--wait=false",
        ],
    );
    kubectl(c, &["delete", "servicecidr", "mig-new", "--wait=false"]);
    (gap, Duration::from_secs_f64(longest))
}
