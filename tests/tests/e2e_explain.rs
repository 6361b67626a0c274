//! `svcplane explain` against a real API server, read-only, as an operator
//! runs it: `kubectl svcplane explain service …` through kubectl's own plugin
//! mechanism (upstream kubectl from the envtest harness finds the shipped
//! `kubectl-svcplane` binary on `PATH` and hands it `KUBECONFIG`), and the
//! shipped `svcplane` binary for `explain pod`, `explain ip`,
//! `explain nodeport` and `explain range`. Every object is created through the API server; the
//! test checks each Pod's verdict and reason, that explain wrote nothing, and
//! that after the slices are written (by the shipped `svcplane run`, started for
//! that step) explain reports them in sync.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::Value;
use svcplane_allocator::Claim;
use svcplane_controller::core::fixtures::{node, pod, svc};
use svcplane_tests::binary::{SharedRun, svcplane_bin_or_skip};
use svcplane_tests::envtest::{self, Cluster, Flavor};
use svcplane_tests::objects::{create_node, create_pods, create_service};
use svcplane_tests::webhook_env::install_claim_crd;
use svcplane_webhook::claim::AllocationClaim;
use svcplane_webhook::state::ServiceRef;

/// The shipped binaries: `svcplane` and, next to it, `kubectl-svcplane`.
struct Bins {
    svcplane: PathBuf,
    plugin_dir: PathBuf,
}

fn bins(test: &str) -> Option<Bins> {
    let svcplane = svcplane_bin_or_skip(test)?;
    let dir = svcplane
        .parent()
        .expect("the binary has a directory")
        .to_owned();
    let plugin = dir.join("kubectl-svcplane");
    if !plugin.is_file() {
        svcplane_tests::skip::skip(
            test,
            &svcplane_tests::skip::Skip::missing(
                format!("{} is not built", plugin.display()),
                "run the tests with `scripts/test` (or `cargo test --workspace --all-targets`), which builds it",
            ),
        );
        return None;
    }
    Some(Bins {
        svcplane,
        plugin_dir: dir,
    })
}

/// `kubectl <args>` as an operator types it: upstream kubectl (the harness'),
/// the cluster in `KUBECONFIG`, the plugin's directory first on `PATH`.
fn kubectl(cluster: &Cluster, plugin_dir: &Path, args: &[&str]) -> Output {
    let path = std::env::join_paths(std::iter::once(plugin_dir.to_owned()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    Command::new(envtest::harness_bin())
        .arg("kubectl")
        .args(args)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("PATH", path)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("running the harness' kubectl")
}

/// `svcplane explain <args> --kubeconfig …` with the shipped binary.
fn svcplane_explain(bins: &Bins, cluster: &Cluster, args: &[&str]) -> Output {
    Command::new(&bins.svcplane)
        .arg("explain")
        .args(args)
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .env_remove("RUST_LOG")
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("running svcplane")
}

fn text(o: &Output) -> (Option<i32>, String, String) {
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn success(o: &Output) -> String {
    let (code, out, err) = text(o);
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    out
}

/// The line of `pod` in the Pods table.
fn pod_line<'t>(out: &'t str, pod: &str) -> &'t str {
    out.lines()
        .find(|l| l.trim_start().starts_with(&format!("{pod} ")))
        .unwrap_or_else(|| panic!("no line for {pod} in:\n{out}"))
}

/// Whether the `held by` table has a row for `kind name`.
fn holds(out: &str, kind: &str, name: &str) -> bool {
    out.lines().any(|l| {
        let mut words = l.split_whitespace();
        words.next() == Some(kind) && words.next() == Some(name)
    })
}

async fn slices_in(client: &kube::Client, ns: &str) -> usize {
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("listing slices")
        .items
        .len()
}

/// A namespace with Service `web` and a Pod for several reasons.
async fn set_up(client: &kube::Client, prefix: &str) -> String {
    let ns = envtest::create_namespace(client, prefix)
        .await
        .expect("namespace");
    create_node(client, &ns, &node("node-a", Some("zone-a")))
        .await
        .expect("node");
    create_service(
        client,
        &ns,
        &svc("web").named_port("http", 80, "http").build(),
    )
    .await
    .expect("service");
    create_pods(
        client,
        &ns,
        &[
            pod("web-ready", "web")
                .ip("10.244.0.10")
                .ready()
                .container_port("http", 8080)
                .build(),
            pod("web-starting", "web")
                .ip("10.244.0.11")
                .not_ready()
                .container_port("http", 8080)
                .build(),
            pod("web-leaving", "web")
                .ip("10.244.0.12")
                .ready()
                .terminating()
                .container_port("http", 8080)
                .build(),
            pod("web-lost", "web")
                .ip("10.244.0.13")
                .ready()
                .node("gone")
                .container_port("http", 8080)
                .build(),
            pod("web-noport", "web")
                .ip("10.244.0.14")
                .ready()
                .container_port("metrics", 9090)
                .build(),
            pod("web-pending", "web")
                .phase("Pending")
                .container_port("http", 8080)
                .build(),
            pod("api-1", "api")
                .ip("10.244.0.20")
                .ready()
                .container_port("http", 8080)
                .build(),
        ],
    )
    .await
    .expect("pods");
    ns
}

/// One test at a time: the first starts a `svcplane run` (watching every namespace),
/// which must not write into the other's namespace while it checks that nothing is
/// written.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn kubectl_svcplane_explain_service_through_the_plugin_mechanism() {
    let _one = SERIAL.lock().await;
    let test = "e2e_explain::kubectl_svcplane_explain_service";
    let Some(bins) = bins(test) else { return };
    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, test) else {
        return;
    };
    let client = cluster.client().await.expect("client");
    let ns = set_up(&client, "e2e-explain-svc-").await;
    let target = format!("{ns}/web");

    let out = success(&kubectl(
        &cluster,
        &bins.plugin_dir,
        &["svcplane", "explain", "service", &target],
    ));
    assert!(out.starts_with(&format!("Service {target}\n")), "{out}");
    for (pod, verdict, why) in [
        ("web-ready", "ready", "Ready condition True"),
        ("web-starting", "not ready", "Ready condition not True"),
        ("web-leaving", "terminating", "being deleted"),
        ("web-lost", "out", "not found: skipped"),
        (
            "web-noport",
            "ready",
            "which the Pod does not declare (it declares metrics:9090/TCP)",
        ),
        ("web-pending", "out", "no IP yet"),
        ("api-1", "out", "not selected: label app=\"api\""),
    ] {
        let line = pod_line(&out, pod);
        assert!(
            line.contains(&format!("  {verdict}  ")) && line.contains(why),
            "{pod}: {line}"
        );
    }
    assert!(out.contains("EndpointSlices: 2 writes to make"), "{out}");
    // Read-only: the slices explain says would be created are not.
    assert_eq!(slices_in(&client, &ns).await, 0);

    // JSON through the plugin too: the reasons by code.
    let json: Value = serde_json::from_str(&success(&kubectl(
        &cluster,
        &bins.plugin_dir,
        &["svcplane", "explain", "service", &target, "-o", "json"],
    )))
    .expect("JSON");
    let reason = |pod: &str, which: &str| {
        json["pods"]
            .as_array()
            .expect("pods")
            .iter()
            .find(|p| p["pod"] == pod)
            .unwrap_or_else(|| panic!("{pod} in {json:#}"))[which]["reason"]["code"]
            .clone()
    };
    assert_eq!(reason("web-lost", "endpointSlices"), "NodeNotFound");
    assert_eq!(reason("web-pending", "endpointSlices"), "NoIP");
    assert_eq!(reason("web-noport", "endpoints"), "NoPortResolved");
    assert_eq!(reason("web-leaving", "endpoints"), "Terminating");

    // Once svcplane run has written the slices, explain finds them in sync and names
    // them.
    let _run = SharedRun::start(&bins.svcplane, &cluster.kubeconfig, &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let out = loop {
        let out = success(&kubectl(
            &cluster,
            &bins.plugin_dir,
            &["svcplane", "explain", "service", &target],
        ));
        if out.contains("EndpointSlices: in sync, no write")
            && out.contains("Endpoints ")
            && out.contains("in sync, no write")
        {
            break out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "svcplane run never brought the slices in sync: {out}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    assert!(out.contains("EndpointSlices: in sync, no write"), "{out}");
    assert!(
        out.contains("Endpoints ") && out.contains("in sync, no write"),
        "{out}"
    );
    let ready = pod_line(&out, "web-ready");
    assert!(ready.contains("10.244.0.10 in web-"), "{ready}");

    // A Service that does not exist: exit 1, named, through kubectl too.
    let (code, out, err) = text(&kubectl(
        &cluster,
        &bins.plugin_dir,
        &["svcplane", "explain", "service", &format!("{ns}/nope")],
    ));
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains(&format!("Service {ns}/nope not found in the cluster")),
        "{err}"
    );
    envtest::delete_namespace(&client, &ns).await;
}

#[tokio::test]
async fn svcplane_explain_pod_ip_and_nodeport_live() {
    let _one = SERIAL.lock().await;
    let test = "e2e_explain::svcplane_explain_pod_ip_and_nodeport_live";
    let Some(bins) = bins(test) else { return };
    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, test) else {
        return;
    };
    let client = cluster.client().await.expect("client");
    let ns = set_up(&client, "e2e-explain-live-").await;

    // explain pod: the selecting Service, then the near miss.
    let api = Api::<Service>::namespaced(client.clone(), &ns);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "api"},
            "spec": {"selector": {"app": "api"}, "ports": [{"port": 9000}]},
        }))
        .expect("service"),
    )
    .await
    .expect("create api");
    let json: Value = serde_json::from_str(&success(&svcplane_explain(
        &bins,
        &cluster,
        &["pod", &format!("{ns}/web-lost"), "-o", "json"],
    )))
    .expect("JSON");
    let services: Vec<(String, bool, String)> = json["services"]
        .as_array()
        .expect("services")
        .iter()
        .map(|s| {
            (
                s["service"].as_str().unwrap_or_default().to_owned(),
                s["selected"].as_bool().unwrap_or_default(),
                s["verdict"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        services,
        vec![
            (format!("{ns}/web"), true, "out".to_owned()),
            (format!("{ns}/api"), false, "out".to_owned()),
        ]
    );
    let (code, _, err) = text(&svcplane_explain(
        &bins,
        &cluster,
        &["pod", &format!("{ns}/nope")],
    ));
    assert_eq!(code, Some(1), "{err}");

    // explain ip: the Service and kube-apiserver's IPAddress hold its ClusterIP.
    let web = api.get("web").await.expect("web");
    let ip = web
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .expect("a ClusterIP");
    let ranges = [
        "--service-cluster-ip-range",
        "10.96.0.0/16,fd00:10:96::/112",
    ];
    let mut args = vec!["ip", ip.as_str()];
    args.extend(ranges);
    let out = success(&svcplane_explain(&bins, &cluster, &args));
    assert!(
        holds(&out, "Service", &format!("{ns}/web")),
        "the Service holds it: {out}"
    );
    assert!(
        holds(&out, "IPAddress", &ip),
        "kube-apiserver's IPAddress holds it: {out}"
    );
    assert!(out.contains("provided IP is already allocated"), "{out}");
    assert!(
        out.contains("serves no AllocationClaims"),
        "no CRD yet: {out}"
    );

    // explain nodeport: a NodePort Service and a claim for its port.
    install_claim_crd(&client).await.expect("CRD");
    let port = 31777;
    let np = Api::<Service>::namespaced(client.clone(), &ns);
    np.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "np"},
            "spec": {"type": "NodePort", "selector": {"app": "web"},
                     "ports": [{"port": 80, "nodePort": port}]},
        }))
        .expect("service"),
    )
    .await
    .expect("create np");
    let claims = Api::<AllocationClaim>::all(client.clone());
    let claim = AllocationClaim::for_value(Claim::NodePort(port), &ServiceRef::named(&ns, "np"));
    claims
        .patch(
            &format!("nodeport-{port}"),
            &PatchParams::apply("e2e-explain").force(),
            &Patch::Apply(&claim),
        )
        .await
        .expect("claim");
    let port_arg = port.to_string();
    let out = success(&svcplane_explain(&bins, &cluster, &["nodeport", &port_arg]));
    assert!(
        holds(&out, "AllocationClaim", &format!("nodeport-{port}")),
        "{out}"
    );
    assert!(out.contains(&format!("for {ns}/np")), "{out}");
    assert!(holds(&out, "Service", &format!("{ns}/np")), "{out}");
    assert!(
        out.contains(
            "spec.ports[0].nodePort: Invalid value: 31777: provided port is already allocated"
        ),
        "{out}"
    );
    assert!(out.contains("30000-32767: dynamic band"), "{out}");
    let free = success(&svcplane_explain(&bins, &cluster, &["nodeport", "30002"]));
    assert!(
        free.contains("held by:  nobody") && free.contains("is admitted"),
        "{free}"
    );

    // explain range: the cluster's ServiceCIDR (kube-apiserver's `kubernetes`) with this
    // namespace's ClusterIPs counted, and the NodePort range with np's port.
    let out = success(&svcplane_explain(&bins, &cluster, &["range", "-o", "json"]));
    let doc: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        doc["clusterIpSource"], "the cluster's ServiceCIDR objects",
        "{doc}"
    );
    let first = &doc["clusterIpRanges"][0];
    assert_eq!(first["serviceCidrs"][0], "kubernetes", "{doc}");
    assert_eq!(first["handsOut"], true, "{doc}");
    let held_here = |range: &Value| {
        range["topNamespaces"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["namespace"] == ns.as_str())
            .and_then(|n| n["values"].as_u64())
    };
    // web, api and np have ClusterIPs; kubernetes' own is in `default`.
    assert_eq!(held_here(first), Some(3), "{doc}");
    assert!(first["used"].as_u64().unwrap_or_default() >= 4, "{doc}");
    let node_ports = &doc["nodePortRange"];
    assert_eq!(node_ports["range"], "30000-32767", "{doc}");
    assert_eq!(held_here(node_ports), Some(1), "{doc}");
    assert!(
        node_ports["dynamicBand"]["used"]
            .as_u64()
            .unwrap_or_default()
            >= 1,
        "{doc}"
    );
    let text = success(&svcplane_explain(&bins, &cluster, &["range"]));
    assert!(
        text.contains("automatic picks before the static band:"),
        "{text}"
    );

    // Nothing explain read was written: still no slices, the claim unchanged.
    assert_eq!(slices_in(&client, &ns).await, 0);
    claims
        .delete(&format!("nodeport-{port}"), &Default::default())
        .await
        .expect("delete claim");
    envtest::delete_namespace(&client, &ns).await;
}
