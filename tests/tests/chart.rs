//! The Helm chart (issue 9): offline checks, then the rendered manifests against a real
//! kube-apiserver.
//!
//! 1. `bash tests/chart/run.sh`: lint, schema, render every values variant, validate
//!    with `kubernetes-validate --strict` for Kubernetes 1.33 and 1.36, a bad values
//!    file must fail, and the pytest property checks (needs python3 and PyPI once; the
//!    venv lives outside the repository).
//! 2. Every rendered variant passes `kubectl apply --dry-run=server` on the envtest API
//!    server (cert-manager and Prometheus Operator objects left out: their CRDs are not
//!    installed there).
//! 3. The chart's CRD and its two webhook configurations are applied for real, with
//!    only `clientConfig` pointed at svcplane's webhook running in this process: a
//!    Service in a test namespace gets its ClusterIP from svcplane (claimed), a value
//!    svcplane refuses is refused with 422, the same value is admitted in kube-system
//!    (excluded by the chart's namespaceSelector) and for a Service carrying the chart's
//!    opt-out label.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use svcplane_allocator::Claim;
use svcplane_tests::envtest::{self, Flavor};
use svcplane_tests::skip::{Skip, skip};
use svcplane_tests::webhook_env::{LocalWebhook, kubectl};
use svcplane_webhook::claim::{AllocationClaim, claim_name};

/// svcplane's range is half of the API server's (10.96.0.0/16), so the API server
/// accepts addresses svcplane refuses: that is how the webhook's verdict shows.
const WEBHOOK_RANGES: &str = "10.96.0.0/17,fd00:10:96::/112";
const OPT_OUT_LABEL: &str = "svcplane.io/ignore";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `tests/chart/run.sh`'s exit code when its tools cannot be installed.
const CHART_TOOLS_UNAVAILABLE: i32 = 77;

/// The YAML documents of a rendered file, minus kinds whose CRDs envtest lacks.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.split("\n---")
        .filter_map(|d| serde_saphyr::from_str::<Value>(d).ok())
        .filter(|v| v.is_object())
        .filter(|v| {
            let api = v["apiVersion"].as_str().unwrap_or_default();
            !api.starts_with("cert-manager.io/") && !api.starts_with("monitoring.coreos.com/")
        })
        .collect()
}

fn as_yaml(docs: &[Value]) -> String {
    docs.iter()
        .map(|d| serde_json::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

fn kubectl_ok(kubeconfig: &Path, args: &[&str], stdin: &str) -> String {
    let out = kubectl(kubeconfig, args, stdin).unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn service(name: &str, cluster_ip: Option<&str>, opt_out: bool) -> Service {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    });
    if let Some(ip) = cluster_ip {
        v["spec"]["clusterIP"] = json!(ip);
    }
    if opt_out {
        v["metadata"]["labels"] = json!({OPT_OUT_LABEL: ""});
    }
    serde_json::from_value(v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_renders_validates_applies_and_its_webhooks_admit_and_reject() {
    // 1. Offline checks.
    let has_python = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_python {
        skip(
            "chart",
            &Skip::missing(
                "python3 is not on PATH (the chart checks run Helm's SDK and pytest from a venv)",
                "install python3 (3.10 or newer) with its venv module, e.g. `apt-get install python3 python3-venv`, then run `scripts/test` again",
            ),
        );
        return;
    }
    let bin = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("svcplane");
    let mut cmd = Command::new("bash");
    cmd.arg("tests/chart/run.sh").current_dir(workspace());
    if bin.is_file() {
        cmd.env("SVCPLANE_BIN", &bin);
    }
    let out = cmd.output().unwrap();
    if out.status.code() == Some(CHART_TOOLS_UNAVAILABLE) {
        // run.sh could not set up its venv: no venv module, or PyPI unreachable.
        let stderr = String::from_utf8_lossy(&out.stderr);
        let why = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("tests/chart/run.sh could not install its tools")
            .trim()
            .trim_start_matches("UNAVAILABLE: ")
            .to_owned();
        skip(
            "chart",
            &Skip::missing(
                why,
                "make PyPI reachable for pip (and python3's venv module available), then run `scripts/test` again",
            ),
        );
        return;
    }
    assert!(
        out.status.success(),
        "tests/chart/run.sh failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // 2. Server-side dry run of every variant.
    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, "chart") else {
        return;
    };
    let rendered = workspace().join("target").join("chart");
    let mut variants: Vec<PathBuf> = std::fs::read_dir(&rendered)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    variants.sort();
    assert!(
        variants.len() >= 6,
        "default + five ci variants: {variants:?}"
    );
    for v in &variants {
        let docs = documents(v);
        let out = kubectl_ok(
            &cluster.kubeconfig,
            &["apply", "--dry-run=server", "-f", "-"],
            &as_yaml(&docs),
        );
        assert!(out.contains("(server dry run)"), "{}: {out}", v.display());
    }
    if !envtest::reaches_loopback(&cluster, "chart (webhook checks)") {
        return;
    }

    // 3. The chart's CRD and webhook configurations for real, svcplane behind them.
    let client = cluster.client().await.unwrap();
    let docs = documents(&rendered.join("manifests.yaml"));
    let of_kind =
        |k: &str| -> Vec<Value> { docs.iter().filter(|d| d["kind"] == k).cloned().collect() };
    kubectl_ok(
        &cluster.kubeconfig,
        &["apply", "-f", "-"],
        &as_yaml(&of_kind("CustomResourceDefinition")),
    );
    let claims: Api<AllocationClaim> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    while claims.list(&Default::default()).await.is_err() {
        assert!(Instant::now() < deadline, "the chart's CRD is never served");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let local = LocalWebhook::start(&client, WEBHOOK_RANGES, "30000-32767", 11, "svcplane-chart")
        .await
        .unwrap();
    let ca = base64::engine::general_purpose::STANDARD.encode(local.certs.ca_pem.as_bytes());
    let mut configs = of_kind("MutatingWebhookConfiguration");
    configs.extend(of_kind("ValidatingWebhookConfiguration"));
    assert_eq!(configs.len(), 2);
    for c in &mut configs {
        for w in c["webhooks"].as_array_mut().unwrap() {
            let path = w["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap()
                .to_owned();
            w["clientConfig"] =
                json!({"url": format!("{}{path}", local.base_url()), "caBundle": ca});
        }
    }
    kubectl_ok(
        &cluster.kubeconfig,
        &["apply", "-f", "-"],
        &as_yaml(&configs),
    );

    let ns = envtest::create_namespace(&client, "svcplane-chart-")
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    // The API server picks configurations up asynchronously: probe until svcplane
    // answers. 10.96.200.x is in the API server's range, not in svcplane's.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 0;
    let refusal = loop {
        i += 1;
        match services
            .create(
                &PostParams::default(),
                &service(&format!("probe-{i}"), Some("10.96.200.5"), false),
            )
            .await
        {
            Err(kube::Error::Api(s)) if s.message.contains("admission webhook") => break s,
            Err(e) => panic!("unexpected error: {e}"),
            Ok(_) => {
                assert!(
                    Instant::now() < deadline,
                    "the chart's webhook was never called"
                );
                services
                    .delete(&format!("probe-{i}"), &DeleteParams::default())
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(
        (refusal.code, refusal.reason.as_str()),
        (422, "Invalid"),
        "{refusal:?}"
    );

    // Assigned by svcplane: in its range, and claimed.
    let web = services
        .create(&PostParams::default(), &service("web", None, false))
        .await
        .unwrap();
    let ip: std::net::IpAddr = web.spec.unwrap().cluster_ip.unwrap().parse().unwrap();
    let std::net::IpAddr::V4(v4) = ip else {
        panic!("{ip}")
    };
    assert!(v4.octets()[2] < 128, "{ip} outside svcplane's 10.96.0.0/17");
    assert!(
        claims
            .get_opt(&claim_name(Claim::Ip(ip)))
            .await
            .unwrap()
            .is_some(),
        "{ip} not claimed"
    );

    // kube-system is excluded by the chart's namespaceSelector; the opt-out label
    // skips the webhook: the API server alone decides, and accepts.
    let system: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    system
        .create(
            &PostParams::default(),
            &service("chart-excluded", Some("10.96.200.6"), false),
        )
        .await
        .expect("kube-system is not reviewed");
    services
        .create(
            &PostParams::default(),
            &service("opted-out", Some("10.96.200.7"), true),
        )
        .await
        .expect("the opt-out label skips the webhook");

    for c in &configs {
        let kind = c["kind"].as_str().unwrap().to_lowercase();
        let name = c["metadata"]["name"].as_str().unwrap();
        kubectl_ok(&cluster.kubeconfig, &["delete", &kind, name], "");
    }
    let _ = system
        .delete("chart-excluded", &DeleteParams::default())
        .await;
    envtest::delete_namespace(&client, &ns).await;
    local.stop().await;
}
