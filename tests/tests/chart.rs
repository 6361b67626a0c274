//! The Helm chart: offline checks, then the rendered manifests against a real
//! kube-apiserver.
//!
//! 1. `bash tests/chart/run.sh`: lint, schema, render every values variant, validate
//!    with `kubernetes-validate --strict` for Kubernetes 1.33 and 1.37, a bad values
//!    file must fail, and the pytest property checks (needs python3 and PyPI once; the
//!    venv lives outside the repository).
//! 2. Every rendered variant passes `kubectl apply --dry-run=server` on the envtest API
//!    server, then is applied for real and deleted again (cert-manager and Prometheus
//!    Operator objects left out: their CRDs are not installed there).
//! 3. Install safety, with the chart's own webhook configurations and no svcplane pod
//!    behind them (the image cannot be pulled, the pods crash-loop): with the default
//!    `failurePolicy: Ignore`, Service creates succeed and the API server counts the
//!    webhook calls that failed open; with `Fail`, creates outside the excluded
//!    namespaces are refused while the release namespace, an opted-out namespace and
//!    an opted-out Service are not, and install probes are reviewed; the emergency
//!    switch (the one command in NOTES.txt) lets every create through.
//! 4. The chart's CRD and its two webhook configurations are applied for real, with
//!    only `clientConfig` pointed at svcplane's webhook running in this process: a
//!    Service in a test namespace gets its ClusterIP from svcplane (claimed), a value
//!    svcplane refuses is refused with 422, the same value is admitted in kube-system
//!    (the release namespace) and for a Service carrying the chart's opt-out label,
//!    and the shipped `svcplane check` (the hook's command) passes.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use svcplane_allocator::Claim;
use svcplane_tests::binary::svcplane_bin_or_skip;
use svcplane_tests::envtest::{self, Flavor};
use svcplane_tests::skip::{Skip, skip};
use svcplane_tests::webhook_env::{LocalWebhook, as_yaml, kubectl_ok, yaml_documents};
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
    yaml_documents(&text)
        .into_iter()
        .filter(|v| {
            let api = v["apiVersion"].as_str().unwrap_or_default();
            !api.starts_with("cert-manager.io/") && !api.starts_with("monitoring.coreos.com/")
        })
        .collect()
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
    if !svcplane_tests::skip::python3_or_skip("chart") {
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
    let client = cluster.client().await.unwrap();
    // ... and for real, one after the other (they share object names).
    for v in &variants {
        apply_for_real_then_delete(&cluster.kubeconfig, v);
    }

    // 3. Install safety: the chart's configurations, no svcplane pod behind them.
    install_safety(&cluster.kubeconfig, &client, &rendered).await;

    // 4. The chart's CRD and webhook configurations for real, svcplane behind them.
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

    // The hook's own command, as rendered, against the release namespace: the chart's
    // matchConditions let its probe through to svcplane (and nothing else from there).
    if let Some(bin) = svcplane_bin_or_skip("chart check hook") {
        let hook = docs
            .iter()
            .find(|d| d["kind"] == "Job" && d["metadata"]["name"] == "svcplane-check")
            .expect("the post-install check Job");
        let args: Vec<String> = hook["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect();
        // The rendered check also waits for a replica renewing the chart's Lease
        // (--leader-lease). This test runs no controllers, so it plays that replica.
        let lease = args
            .iter()
            .find_map(|a| a.strip_prefix("--leader-lease="))
            .expect("the hook waits for a leader with the chart's default values")
            .to_owned();
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        let renewer = tokio::spawn(async move {
            loop {
                let renewed = json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": lease},
                    "spec": {"holderIdentity": "svcplane-test", "leaseDurationSeconds": 15,
                             "renewTime": MicroTime(k8s_openapi::jiff::Timestamp::now())},
                });
                let _ = leases
                    .patch(
                        &lease,
                        &PatchParams::apply("chart-test").force(),
                        &Patch::Apply(&renewed),
                    )
                    .await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        let out = tokio::task::spawn_blocking({
            let (bin, kubeconfig, args) = (bin.clone(), cluster.kubeconfig.clone(), args.clone());
            move || {
                Command::new(bin)
                    .args(&args)
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .output()
                    .unwrap()
            }
        })
        .await
        .unwrap();
        renewer.abort();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && stdout.contains("replica svcplane-test")
                && stdout.contains("and replica svcplane-test leads the controllers"),
            "svcplane {args:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

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

/// Applies a rendered variant for real, checks the server stored the workload and (with
/// the webhook) both configurations, then deletes everything but the CRD.
fn apply_for_real_then_delete(kubeconfig: &Path, variant: &Path) {
    let docs = documents(variant);
    let out = kubectl_ok(kubeconfig, &["apply", "-f", "-"], &as_yaml(&docs));
    assert!(
        out.contains("deployment.apps/svcplane created")
            || out.contains("deployment.apps/svcplane configured"),
        "{}: {out}",
        variant.display()
    );
    let stored = kubectl_ok(
        kubeconfig,
        &[
            "-n",
            "kube-system",
            "get",
            "deployment",
            "svcplane",
            "-o",
            "json",
        ],
        "",
    );
    let stored: Value = serde_json::from_str(&stored).unwrap();
    let rendered = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    assert_eq!(
        stored["spec"]["template"]["spec"]["containers"][0]["args"],
        rendered["spec"]["template"]["spec"]["containers"][0]["args"],
        "{}",
        variant.display()
    );
    let rest: Vec<Value> = docs
        .into_iter()
        .filter(|d| d["kind"] != "CustomResourceDefinition")
        .collect();
    kubectl_ok(
        kubeconfig,
        &["delete", "--ignore-not-found", "--wait=false", "-f", "-"],
        &as_yaml(&rest),
    );
}

/// The API server's count of webhook calls that failed open (`failurePolicy: Ignore`).
fn fail_open_count(kubeconfig: &Path) -> f64 {
    let metrics = kubectl_ok(kubeconfig, &["get", "--raw", "/metrics"], "");
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_admission_webhook_fail_open_count")
                && l.contains("services.svcplane.io")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Creates `svc` in `ns`, retrying while the API server catches up with a changed
/// webhook configuration, until the outcome is `want_ok`; the last error otherwise.
async fn create_until(client: &kube::Client, ns: &str, svc: &Service, want_ok: bool) -> String {
    let api: Api<Service> = Api::namespaced(client.clone(), ns);
    let name = svc.metadata.name.clone().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let result = api.create(&PostParams::default(), svc).await;
        let ok = result.is_ok();
        let error = result.err().map(|e| e.to_string()).unwrap_or_default();
        if ok {
            let _ = api.delete(&name, &DeleteParams::default()).await;
        }
        if ok == want_ok {
            return error;
        }
        assert!(
            Instant::now() < deadline,
            "creating {ns}/{name}: wanted {}, got {error:?}",
            if want_ok { "success" } else { "a refusal" }
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn install_safety(kubeconfig: &Path, client: &kube::Client, rendered: &Path) {
    let docs = documents(&rendered.join("manifests.yaml"));
    let mut configs: Vec<Value> = docs
        .iter()
        .filter(|d| {
            d["kind"] == "MutatingWebhookConfiguration"
                || d["kind"] == "ValidatingWebhookConfiguration"
        })
        .cloned()
        .collect();
    let webhook_service: Vec<Value> = docs
        .iter()
        .filter(|d| d["kind"] == "Service" && d["metadata"]["name"] == "svcplane-webhook")
        .cloned()
        .collect();
    assert_eq!((configs.len(), webhook_service.len()), (2, 1));
    for c in &configs {
        for w in c["webhooks"].as_array().unwrap() {
            assert_eq!(w["failurePolicy"], "Ignore", "the chart's default");
        }
    }
    // The chart as installed whose pods never come up: the webhook Service exists,
    // nothing backs it.
    kubectl_ok(
        kubeconfig,
        &["apply", "-f", "-"],
        &as_yaml(&[webhook_service.clone(), configs.clone()].concat()),
    );
    let ns = envtest::create_namespace(client, "svcplane-safety-")
        .await
        .unwrap();
    let before = fail_open_count(kubeconfig);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 0;
    // Service creates succeed, and the API server did call the webhook: its calls
    // failed open, one count per create and configuration.
    loop {
        i += 1;
        let name = format!("no-pod-{i}");
        let err = create_until(client, &ns, &service(&name, None, false), true).await;
        assert!(err.is_empty());
        if fail_open_count(kubeconfig) >= before + 2.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the API server never called the chart's webhook (fail-open count {before})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut node_port = service("no-pod-nodeport", None, false);
    node_port.spec.as_mut().unwrap().type_ = Some("NodePort".into());
    create_until(client, &ns, &node_port, true).await;

    // failurePolicy Fail (`--set webhook.failurePolicy=Fail`, what generic control
    // planes choose): refused outside the exclusions once the API server sees it ...
    for c in &mut configs {
        for w in c["webhooks"].as_array_mut().unwrap() {
            w["failurePolicy"] = json!("Fail");
        }
    }
    kubectl_ok(kubeconfig, &["apply", "-f", "-"], &as_yaml(&configs));
    let refusal = create_until(client, &ns, &service("refused", None, false), false).await;
    assert!(refusal.contains("failed calling webhook"), "{refusal}");
    // ... the release namespace (the chart's own Services) is never reviewed ...
    create_until(
        client,
        "kube-system",
        &service("release-ns", None, false),
        true,
    )
    .await;
    // ... except install probes, which are (a dry run: nothing is written).
    let probe: Service = serde_json::from_value(json!({
        "metadata": {"generateName": "probe-", "labels": {"svcplane.io/probe": ""}},
        "spec": {"ports": [{"port": 443}]},
    }))
    .unwrap();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let e = Api::<Service>::namespaced(client.clone(), "kube-system")
        .create(&dry, &probe)
        .await
        .expect_err("a probe in the release namespace goes to the webhook");
    assert!(e.to_string().contains("failed calling webhook"), "{e}");
    // ... an opted-out Service is not ...
    create_until(client, &ns, &service("opted-out", None, true), true).await;
    // ... nor a namespace labelled out.
    let quiet = envtest::create_namespace(client, "svcplane-quiet-")
        .await
        .unwrap();
    kubectl_ok(
        kubeconfig,
        &["label", "namespace", &quiet, "svcplane.io/ignore="],
        "",
    );
    create_until(client, &quiet, &service("quiet", None, false), true).await;

    // The emergency switch, exactly as NOTES.txt prints it: creates work again.
    kubectl_ok(
        kubeconfig,
        &[
            "delete",
            "mutatingwebhookconfiguration,validatingwebhookconfiguration",
            "svcplane",
        ],
        "",
    );
    create_until(client, &ns, &service("after-switch", None, false), true).await;
    kubectl_ok(
        kubeconfig,
        &["delete", "-f", "-"],
        &as_yaml(&webhook_service),
    );
    envtest::delete_namespace(client, &ns).await;
    envtest::delete_namespace(client, &quiet).await;
}
