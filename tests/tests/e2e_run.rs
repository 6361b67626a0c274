//! `svcplane run` against a real kube-apiserver (tests/envtest, or
//! `SVCPLANE_E2E_KUBECONFIG`): the runtime in-process for the basic scenarios (Pod
//! status set through the status subresource, as the kubelet does), and the
//! `svcplane` binary as separate processes electing a leader on a real Lease.
//!
//! The tests of this binary share one API server and every runtime watches all
//! namespaces, so they run one at a time (`SERIAL`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Endpoints, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use svcplane_controller::core::fixtures::{node, pod, svc};
use svcplane_controller::core::keys::LABEL_SERVICE_NAME;
use svcplane_controller::core::slice_endpoints::SliceEndpoints;
use svcplane_tests::binary::{SvcplaneProcess, free_port, lease_holder, svcplane_bin_or_skip};
use svcplane_tests::envtest::{self, Flavor};
use svcplane_tests::objects::{create_node, create_pods, create_service};
use svcplane_tests::run_env::{Instance, options};
use svcplane_tests::skip::{Skip, skip};

/// Held for a whole test; tokio's mutex works across the tests' separate runtimes.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn slices(client: &Client, ns: &str, name: &str) -> Vec<EndpointSlice> {
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{LABEL_SERVICE_NAME}={name}")))
        .await
        .unwrap()
        .items
}

fn ready_count(slices: &[EndpointSlice]) -> usize {
    slices
        .iter()
        .flat_map(|s| s.endpoints())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .count()
}

/// Polls `check` every 200 ms until it holds or `limit` passes.
async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Slice and Endpoints writes so far, from the runtime's own counters.
fn writes(i: &Instance) -> (u64, u64) {
    let m = i.handle.metrics();
    (
        m.api_writes("create", "endpointslices") + m.api_writes("update", "endpointslices"),
        m.api_writes("create", "endpoints") + m.api_writes("update", "endpoints"),
    )
}

#[tokio::test]
async fn run_in_process_keeps_slices_and_endpoints_in_step_with_pod_status() {
    let _one = SERIAL.lock().await;
    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, "e2e_run") else {
        return;
    };
    let client = cluster.client().await.unwrap();
    let ns = envtest::create_namespace(&client, "svcplane-run-")
        .await
        .unwrap();
    create_node(&client, &ns, &node("node-a", Some("zone-a")))
        .await
        .unwrap();
    create_service(&client, &ns, &svc("web").port("http", 80, 8080).build())
        .await
        .unwrap();
    let pods: Vec<Pod> = (0..3)
        .map(|i| {
            pod(&format!("web-{i}"), "web")
                .node("node-a")
                .ip(&format!("10.1.0.{}", i + 1))
                .ready()
                .build()
        })
        .collect();
    create_pods(&client, &ns, &pods).await.unwrap();

    let run = Instance::start(client.clone(), options());
    eventually(Duration::from_secs(60), "3 ready endpoints", || async {
        ready_count(&slices(&client, &ns, "web").await) == 3
    })
    .await;
    let eps = Api::<Endpoints>::namespaced(client.clone(), &ns);
    eventually(Duration::from_secs(30), "the Endpoints object", || async {
        eps.get_opt("web").await.unwrap().is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = writes(&run);

    // The kubelet's way: a status patch flips readiness.
    let status =
        serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
    Api::<Pod>::namespaced(client.clone(), &ns)
        .patch_status("web-1", &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "2 ready endpoints", || async {
        ready_count(&slices(&client, &ns, "web").await) == 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = writes(&run);
    assert_eq!(
        (after.0 - settled.0, after.1 - settled.1),
        (1, 1),
        "one slice update, one Endpoints update"
    );

    // A graceful delete: the Pod stays, terminating, until its grace period ends.
    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete(
            "web-0",
            &kube::api::DeleteParams {
                grace_period_seconds: Some(3600),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "a terminating endpoint",
        || async {
            slices(&client, &ns, "web")
                .await
                .iter()
                .flat_map(|s| s.endpoints())
                .any(|e| e.conditions.as_ref().and_then(|c| c.terminating) == Some(true))
        },
    )
    .await;
    run.stop().await.unwrap();
    envtest::delete_namespace(&client, &ns).await;
}

// --- the binary, as separate processes ---------------------------------------------

/// `svcplane run` without the webhook, electing on a Lease in `lease_ns`.
fn spawn_run(bin: &Path, kubeconfig: &Path, name: &str, lease_ns: &str) -> SvcplaneProcess {
    let args: Vec<String> = [
        "run",
        "--webhook=false",
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=1s",
        "--allocator-repair-interval=1h",
    ]
    .into_iter()
    .map(String::from)
    .chain([
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--leader-elect-resource-namespace={lease_ns}"),
        format!("--metrics-bind-address=127.0.0.1:{}", free_port()),
    ])
    .collect();
    SvcplaneProcess::spawn(bin, name, &args, None)
}

#[tokio::test]
async fn two_processes_elect_one_leader_and_hand_over() {
    let _one = SERIAL.lock().await;
    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, "e2e_run") else {
        return;
    };
    if cluster.external {
        // Two controller processes over someone else's cluster: not here.
        skip(
            "e2e_run (leader election)",
            &Skip::not_applicable(
                format!(
                    "{} is set: two svcplane processes are not started against an external cluster",
                    envtest::ENV_EXTERNAL
                ),
                format!(
                    "unset {} to run against the envtest harness",
                    envtest::ENV_EXTERNAL
                ),
            ),
        );
        return;
    }
    let Some(bin) = svcplane_bin_or_skip("e2e_run") else {
        return;
    };
    let client = cluster.client().await.unwrap();
    let ns = envtest::create_namespace(&client, "svcplane-lease-")
        .await
        .unwrap();
    create_node(&client, &ns, &node("node-a", Some("zone-a")))
        .await
        .unwrap();
    create_service(&client, &ns, &svc("web").port("http", 80, 8080).build())
        .await
        .unwrap();
    create_pods(
        &client,
        &ns,
        &[pod("web-0", "web")
            .node("node-a")
            .ip("10.2.0.1")
            .ready()
            .build()],
    )
    .await
    .unwrap();

    let mut a = spawn_run(&bin, &cluster.kubeconfig, "replica-a", &ns);
    let mut b = spawn_run(&bin, &cluster.kubeconfig, "replica-b", &ns);
    eventually(Duration::from_secs(60), "a leader", || async {
        lease_holder(&client, &ns).await.is_some()
    })
    .await;
    eventually(Duration::from_secs(60), "the slice", || async {
        ready_count(&slices(&client, &ns, "web").await) == 1
    })
    .await;
    let first = lease_holder(&client, &ns).await.unwrap();
    assert!(first == "replica-a" || first == "replica-b", "{first}");
    let lease = Api::<Lease>::namespaced(client.clone(), &ns)
        .get("svcplane")
        .await
        .unwrap();
    let transitions = lease.spec.and_then(|s| s.lease_transitions).unwrap_or(0);

    // Kill the leader without a chance to release: the other takes over after the
    // lease duration and carries on.
    let (leader, follower) = if first == a.name {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    leader.signal("KILL");
    let killed_at = Instant::now();
    let follower_name = follower.name.clone();
    eventually(Duration::from_secs(30), "the follower to lead", || async {
        lease_holder(&client, &ns).await.as_deref() == Some(follower_name.as_str())
    })
    .await;
    let took = killed_at.elapsed();
    assert!(
        took < Duration::from_secs(4 + 3),
        "takeover took {took:?} (lease 4s, retry 1s)"
    );
    let lease = Api::<Lease>::namespaced(client.clone(), &ns)
        .get("svcplane")
        .await
        .unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.lease_transitions).unwrap_or(0),
        transitions + 1
    );
    create_pods(
        &client,
        &ns,
        &[pod("web-1", "web")
            .node("node-a")
            .ip("10.2.0.2")
            .ready()
            .build()],
    )
    .await
    .unwrap();
    eventually(
        Duration::from_secs(30),
        "the new leader to write",
        || async { ready_count(&slices(&client, &ns, "web").await) == 2 },
    )
    .await;
    assert_eq!(
        slices(&client, &ns, "web").await.len(),
        1,
        "no duplicate slice after the handover"
    );

    // SIGTERM: the leader releases the Lease and exits 0.
    follower.signal("TERM");
    assert_eq!(
        follower.wait(Duration::from_secs(25)),
        Some(0),
        "clean exit on SIGTERM"
    );
    assert_eq!(
        lease_holder(&client, &ns).await,
        None,
        "the Lease is released on shutdown"
    );
    envtest::delete_namespace(&client, &ns).await;
}

#[tokio::test]
async fn an_unreachable_api_server_is_retried_not_a_crash() {
    let _one = SERIAL.lock().await;
    let Some(bin) = svcplane_bin_or_skip("e2e_run") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("svcplane-unreachable-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let port = free_port();
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:{port}'}}\n\
             users:\n- name: u\n  user: {{token: x}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    let mut p = spawn_run(&bin, &kubeconfig, "lonely", "default");
    assert_eq!(
        p.wait(Duration::from_secs(3)),
        None,
        "still running, retrying"
    );
    p.signal("TERM");
    assert_eq!(
        p.wait(Duration::from_secs(10)),
        Some(0),
        "clean exit on SIGTERM while waiting for the API"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The secure metrics port (`--secure-metrics-bind-address`) of the shipped binary on
/// kube-apiserver: `/metrics` over HTTPS for a token RBAC allows `get` on the path,
/// 403 for a valid token without that grant and for no token (system:anonymous), 401
/// for a token the API server rejects; the plain port then answers probes only. The
/// text is kube-controller-manager's format (its bare-named counters included).
#[tokio::test]
async fn the_secure_metrics_port_serves_those_rbac_allows() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::{DeleteParams, PostParams};
    use svcplane_tests::binary::{https_get, sample};
    use svcplane_tests::objects::service_account_token;

    let _one = SERIAL.lock().await;
    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, "e2e_run") else {
        return;
    };
    let Some(bin) = svcplane_bin_or_skip("e2e_run") else {
        return;
    };
    let client = cluster.client().await.unwrap();
    let ns = envtest::create_namespace(&client, "svcplane-metrics-")
        .await
        .unwrap();
    let role_name = format!("{ns}-metrics-reader");
    let role: ClusterRole = serde_json::from_value(serde_json::json!({
        "metadata": {"name": role_name},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }))
    .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": role_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": ns}],
    }))
    .unwrap();
    let roles = Api::<ClusterRole>::all(client.clone());
    let bindings = Api::<ClusterRoleBinding>::all(client.clone());
    roles.create(&PostParams::default(), &role).await.unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let reader = service_account_token(&client, &ns, "prometheus")
        .await
        .unwrap();
    let stranger = service_account_token(&client, &ns, "stranger")
        .await
        .unwrap();

    let admin: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let secure: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let args: Vec<String> = vec![
        "run".into(),
        "--webhook=false".into(),
        "--leader-elect=false".into(),
        "--controllers=endpointslice".into(),
        format!("--kubeconfig={}", cluster.kubeconfig.display()),
        format!("--metrics-bind-address={admin}"),
        format!("--secure-metrics-bind-address={secure}"),
    ];
    let mut p = SvcplaneProcess::spawn(&bin, "secure-metrics", &args, Some(admin));
    p.wait_ready(Duration::from_secs(60)).await;

    // The bindings just made take a moment to reach the authorizer.
    let mut last = (0, String::new());
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        last = https_get(secure, "/metrics", Some(&reader)).await.unwrap();
        if last.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (code, text) = last;
    assert_eq!(code, 200, "the bound ServiceAccount reads /metrics: {text}");
    assert!(
        text.contains("# TYPE endpoint_slice_controller_syncs counter")
            || text.contains("# TYPE workqueue_adds_total counter"),
        "kube-controller-manager's text format: {text}"
    );
    assert!(!text.contains("# EOF"), "not OpenMetrics: {text}");
    assert!(
        sample(&text, "workqueue_depth{name=\"endpoint_slice\"}").is_some(),
        "{text}"
    );

    let (code, body) = https_get(secure, "/metrics", Some(&stranger))
        .await
        .unwrap();
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(&format!("system:serviceaccount:{ns}:stranger")),
        "{body}"
    );
    let (code, body) = https_get(secure, "/metrics", None).await.unwrap();
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("system:anonymous"), "{body}");
    let (code, body) = https_get(secure, "/metrics", Some("not-a-token"))
        .await
        .unwrap();
    assert_eq!(code, 401, "{body}");
    assert_eq!(
        https_get(secure, "/readyz", Some(&reader)).await.unwrap().0,
        404
    );

    // The plain port: probes only.
    assert_eq!(p.admin_get("/readyz").unwrap().0, 200);
    let (code, body) = p.admin_get("/metrics").unwrap();
    assert_eq!(code, 404, "{body}");
    assert!(body.contains(&secure.to_string()), "{body}");

    p.signal("TERM");
    assert_eq!(
        p.wait(Duration::from_secs(20)),
        Some(0),
        "clean exit on SIGTERM"
    );
    let _ = bindings.delete(&role_name, &DeleteParams::default()).await;
    let _ = roles.delete(&role_name, &DeleteParams::default()).await;
    envtest::delete_namespace(&client, &ns).await;
}

/// Write coalescing on the shipped binary (docs/design/write-coalescing.md): it acts on
/// pressure, not on a clock. With the client at its rate limit (`--kube-api-qps 2`),
/// twenty Pods turning ready one after another reach the EndpointSlice and the
/// Endpoints object in at most three writes each, and the final state is exact;
/// synced one by one they would take a write per Pod or close. Without pressure (a
/// second process with tokens to spare, an idle API server), Pods created well apart
/// are each written at once, as upstream writes them: no window holds a change the
/// API server has room for.
#[tokio::test]
async fn a_burst_is_written_in_a_few_writes_under_pressure_and_single_changes_at_once() {
    use svcplane_tests::binary::sample;

    let _one = SERIAL.lock().await;
    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, "e2e_run") else {
        return;
    };
    let Some(bin) = svcplane_bin_or_skip("e2e_run") else {
        return;
    };
    let client = cluster.client().await.unwrap();
    let ns = envtest::create_namespace(&client, "svcplane-coalesce-")
        .await
        .unwrap();
    create_node(&client, &ns, &node("node-a", Some("zone-a")))
        .await
        .unwrap();
    create_service(&client, &ns, &svc("web").port("http", 80, 8080).build())
        .await
        .unwrap();
    const PODS: usize = 20;
    let names: Vec<String> = (0..PODS).map(|i| format!("web-{i}")).collect();
    let pods: Vec<Pod> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            pod(name, "web")
                .node("node-a")
                .ip(&format!("10.2.0.{}", i + 1))
                .not_ready()
                .build()
        })
        .collect();
    create_pods(&client, &ns, &pods).await.unwrap();

    let start = |name: &str, extra: &[&str]| {
        let admin: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut args: Vec<String> = vec![
            "run".into(),
            "--webhook=false".into(),
            "--leader-elect=false".into(),
            "--controllers=endpointslice,endpoints".into(),
            format!("--kubeconfig={}", cluster.kubeconfig.display()),
            format!("--metrics-bind-address={admin}"),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        SvcplaneProcess::spawn(&bin, name, &args, Some(admin))
    };
    let endpoints = |c: Client, ns: String| async move {
        Api::<Endpoints>::namespaced(c, &ns)
            .get_opt("web")
            .await
            .unwrap()
            .map_or(0, |e| {
                e.subsets
                    .iter()
                    .flatten()
                    .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
                    .sum::<usize>()
            })
    };
    let updates = |p: &SvcplaneProcess| {
        let text = p.admin_get("/metrics").map(|(_, b)| b).unwrap_or_default();
        let n = |r: &str| {
            sample(
                &text,
                &format!("svcplane_api_writes_total{{verb=\"update\",resource=\"{r}\"}}"),
            )
            .unwrap_or(0.0) as u64
        };
        (n("endpointslices"), n("endpoints"))
    };

    // Under pressure: two requests a second, one at a time.
    let mut p = start("coalescing", &["--kube-api-qps=2", "--kube-api-burst=1"]);
    p.wait_ready(Duration::from_secs(60)).await;
    eventually(
        Duration::from_secs(60),
        "20 not-ready endpoints",
        || async {
            slices(&client, &ns, "web")
                .await
                .iter()
                .map(|s| s.endpoints().len())
                .sum::<usize>()
                == PODS
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = updates(&p);
    let ready =
        serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let pod_api = Api::<Pod>::namespaced(client.clone(), &ns);
    let flips = Instant::now();
    for name in &names {
        pod_api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&ready))
            .await
            .unwrap();
    }
    let flipped_in = flips.elapsed();
    eventually(Duration::from_secs(30), "20 ready endpoints", || async {
        ready_count(&slices(&client, &ns, "web").await) == PODS
            && endpoints(client.clone(), ns.clone()).await == PODS
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = updates(&p);
    let (slice_writes, endpoints_writes) = (after.0 - before.0, after.1 - before.1);
    assert!(
        (1..=3).contains(&slice_writes) && (1..=3).contains(&endpoints_writes),
        "{PODS} Pods turned ready in {flipped_in:?} at 2 requests/s: {slice_writes} slice \
         updates, {endpoints_writes} Endpoints updates"
    );
    p.signal("TERM");
    assert_eq!(p.wait(Duration::from_secs(20)), Some(0));

    // Without pressure: the default limits and an idle API server, five Pods created
    // 100 ms apart, one after another as a rollout step makes them. A sync here takes
    // a few milliseconds, so the hold after it is over before the next Pod comes:
    // each is written at once (a 250 ms clock window would merge all but the first
    // two). The Endpoints hold is one sync's duration, the slices' three.
    let mut p = start("no-pressure", &[]);
    p.wait_ready(Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    const SINGLES: usize = 5;
    let before = updates(&p);
    let more: Vec<Pod> = (0..SINGLES)
        .map(|i| {
            pod(&format!("web-next-{i}"), "web")
                .node("node-a")
                .ip(&format!("10.2.1.{}", i + 1))
                .ready()
                .build()
        })
        .collect();
    for pod in &more {
        create_pods(&client, &ns, std::slice::from_ref(pod))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually(
        Duration::from_secs(30),
        "the new Pods' endpoints",
        || async {
            ready_count(&slices(&client, &ns, "web").await) == PODS + SINGLES
                && endpoints(client.clone(), ns.clone()).await == PODS + SINGLES
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = updates(&p);
    let (slice_writes, endpoints_writes) = (after.0 - before.0, after.1 - before.1);
    assert!(
        endpoints_writes == SINGLES as u64 && slice_writes + 1 >= SINGLES as u64,
        "{SINGLES} Pods created 100 ms apart without pressure: {slice_writes} slice \
         updates, {endpoints_writes} Endpoints updates (one per Pod expected)"
    );
    p.signal("TERM");
    assert_eq!(p.wait(Duration::from_secs(20)), Some(0));
    envtest::delete_namespace(&client, &ns).await;
}
