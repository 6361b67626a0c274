//! Smoke test of the single-node cluster (`svcplane_tests::node_cluster`) that the
//! operator suites build on: it starts, runs Pods, and Services work through
//! kube-proxy and the cluster DNS; its helpers (kubectl, helm, image import, the
//! controller manager's restart, commands in the node's namespace) work; and it
//! leaves nothing behind.
//!
//! One test, so one node per run: `cargo test -p svcplane-tests --test e2e_node --
//! --nocapture` prints the start and teardown times. Skips (a failure under
//! `CI=true`) without root, Go or containerd; see `node_cluster`'s documentation.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use svcplane_tests::node_cluster::{BUSYBOX, NodeCluster, images};

const NS: &str = "smoke";

/// A backend that answers with its Pod's name, and a client to call it from.
fn workloads() -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: {NS}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {NS}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      securityContext: {{runAsUser: 65534, runAsGroup: 65534}}
      containers:
      - name: httpd
        image: {BUSYBOX}
        imagePullPolicy: Never
        command: [sh, -c, 'mkdir -p /tmp/www && hostname > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www']
        ports: [{{containerPort: 8080}}]
        readinessProbe:
          httpGet: {{path: /, port: 8080}}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: {NS}
spec:
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: 8080}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: {NS}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: client
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [sleep, "3600"]
"#
    )
}

/// A chart whose `kubeVersion` an unversioned API server would fail.
fn write_chart(dir: &Path) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: smoke\nversion: 0.1.0\nkubeVersion: \">=1.30.0-0\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("templates/configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  k8s: {{ .Capabilities.KubeVersion.Version | quote }}\n",
    )
    .unwrap();
}

fn ok(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Retries `f` until it returns `Some` or `limit` passes (kube-proxy and CoreDNS
/// pick up a new Service within a second or two).
fn eventually<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() > deadline => {
                panic!("{what}: still failing after {limit:?}: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// `wget` in the client Pod, bounded by `timeout` (Debian's busybox 1.35 `wget -T`
/// crashes).
fn client_get(cluster: &NodeCluster, url: &str) -> Result<String, String> {
    let out = cluster.kubectl(&[
        "-n", NS, "exec", "client", "--", "timeout", "5", "wget", "-qO-", url,
    ]);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

fn sysctls() -> Vec<(String, String)> {
    [
        "vm/overcommit_memory",
        "kernel/panic",
        "kernel/panic_on_oops",
    ]
    .iter()
    .map(|s| {
        let v = std::fs::read_to_string(format!("/proc/sys/{s}")).unwrap_or_default();
        ((*s).to_owned(), v.trim().to_owned())
    })
    .collect()
}

#[test]
fn a_node_runs_pods_and_serves_services_by_name_and_cluster_ip() {
    const TEST: &str = "a_node_runs_pods_and_serves_services_by_name_and_cluster_ip";
    let before = sysctls();
    let Some(cluster) = NodeCluster::start(TEST) else {
        return;
    };
    println!(
        "node cluster ready in {:.1}s",
        cluster.startup_time().as_secs_f64()
    );

    // The Node is Ready, seen through the Rust client.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ready = rt.block_on(async {
        let client = cluster.client().await.unwrap();
        let nodes = Api::<Node>::all(client)
            .list(&Default::default())
            .await
            .unwrap();
        nodes.items.iter().any(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
    });
    assert!(ready, "no Ready node");

    // Importing again is harmless, and exercises the suites' way in for images.
    let archives = images::ensure().expect("images were built for the start");
    cluster.import_image(&archives.busybox).unwrap();

    let manifest = std::env::temp_dir().join(format!("e2e-node-{}.yaml", std::process::id()));
    std::fs::write(&manifest, workloads()).unwrap();
    let t = Instant::now();
    ok(
        "kubectl apply",
        &cluster.kubectl(&["apply", "-f", manifest.to_str().unwrap()]),
    );
    let _ = std::fs::remove_file(&manifest);
    ok(
        "rollout",
        &cluster.kubectl(&[
            "-n",
            NS,
            "rollout",
            "status",
            "deployment/web",
            "--timeout=120s",
        ]),
    );
    ok(
        "client Ready",
        &cluster.kubectl(&[
            "-n",
            NS,
            "wait",
            "pod/client",
            "--for=condition=Ready",
            "--timeout=120s",
        ]),
    );
    println!(
        "backend (2 replicas) and client ready in {:.1}s",
        t.elapsed().as_secs_f64()
    );

    // By name, through CoreDNS.
    let host = eventually("web by DNS name", Duration::from_secs(30), || {
        client_get(&cluster, &format!("http://web.{NS}.svc.cluster.local/"))
    });
    assert!(host.starts_with("web-"), "answered by {host:?}");

    // By ClusterIP, through kube-proxy, reaching both replicas.
    let ip = ok(
        "service IP",
        &cluster.kubectl(&[
            "-n",
            NS,
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ]),
    );
    let mut seen = BTreeSet::new();
    for _ in 0..30 {
        seen.insert(eventually(
            "web by ClusterIP",
            Duration::from_secs(30),
            || client_get(&cluster, &format!("http://{ip}/")),
        ));
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen.len(), 2, "kube-proxy sent every request to {seen:?}");

    // The short name resolves too (the Pod's search path comes from the kubelet).
    let lookup = cluster.kubectl(&["-n", NS, "exec", "client", "--", "nslookup", "web"]);
    assert!(
        String::from_utf8_lossy(&lookup.stdout).contains(&ip),
        "nslookup web: {}",
        String::from_utf8_lossy(&lookup.stdout)
    );

    // helm installs a chart with a kubeVersion constraint: the API server reports
    // a real version.
    let chart = std::env::temp_dir().join(format!("e2e-node-chart-{}", std::process::id()));
    write_chart(&chart);
    ok(
        "helm install",
        &cluster.helm(&[
            "install",
            "smoke",
            chart.to_str().unwrap(),
            "-n",
            NS,
            "--wait",
            "--timeout=60s",
        ]),
    );
    let _ = std::fs::remove_dir_all(&chart);
    let k8s = ok(
        "configmap",
        &cluster.kubectl(&[
            "-n",
            NS,
            "get",
            "configmap",
            "smoke",
            "-o",
            "jsonpath={.data.k8s}",
        ]),
    );
    assert_eq!(k8s, svcplane_tests::envtest::build::KUBERNETES_VERSION);

    // The controller manager restarts alone, with and without its endpoint
    // controllers, and the Service keeps working.
    let t = Instant::now();
    cluster
        .restart_kcm(&["--controllers=*,-endpoint,-endpointslice,-endpointslicemirroring"])
        .unwrap();
    cluster.restart_kcm(&[]).unwrap();
    println!(
        "kube-controller-manager restarted twice in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    eventually("web after the restarts", Duration::from_secs(30), || {
        client_get(&cluster, &format!("http://{ip}/"))
    });

    // The node's namespace holds the node address.
    let info = cluster.info().cloned().unwrap();
    let addr = ok(
        "ip addr",
        &cluster
            .exec_in_node(&["ip", "-4", "addr", "show", "node0"])
            .unwrap(),
    );
    assert!(addr.contains(&info.node_ip), "{addr}");

    let took = cluster.stop();
    println!("node cluster torn down in {:.1}s", took.as_secs_f64());

    // Nothing is left: namespace, mounts, run directory, processes, sysctls.
    assert!(
        !info.netns_path.exists(),
        "{} remains",
        info.netns_path.display()
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let run_dir = info.run_dir.to_string_lossy().into_owned();
    assert!(!mounts.contains(&run_dir), "mounts remain under {run_dir}");
    assert!(
        !mounts.contains(&info.netns),
        "the namespace is still mounted"
    );
    if std::env::var("SVCPLANE_NODE_KEEP_LOGS").is_ok_and(|v| v == "1") {
        assert!(!info.run_dir.join("containerd").exists());
    } else {
        assert!(!info.run_dir.exists(), "{run_dir} remains");
    }
    let leftovers: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&run_dir))
        .collect();
    assert!(leftovers.is_empty(), "processes remain: {leftovers:?}");
    assert!(
        !Path::new("/sys/fs/cgroup/pids").join(&info.netns).exists(),
        "the run's cgroup remains"
    );
    assert_eq!(sysctls(), before, "kernel sysctls not restored");
}
