//! The Helm chart's RBAC is enough for the shipped binary, on the envtest
//! kube-apiserver (which authorizes with RBAC).
//!
//! The chart is rendered with its default values (`tests/chart/render.py`, as
//! `tests/chart/run.sh` does), and its ServiceAccounts, ClusterRole(Binding)s,
//! Role(Binding)s and CRD are applied for real. `svcplane run` is then started with
//! exactly the args and env of the rendered Deployment, authenticated as the chart's
//! ServiceAccount (a kubeconfig that impersonates `system:serviceaccount:kube-system:
//! <sa>` with the groups a pod's token carries). Only what cannot work outside a pod
//! changes: `--kubeconfig` is added, the bind addresses move to free loopback
//! ports, and 127.0.0.1 joins the self-managed certificate's hosts (the API server
//! reaches this process at 127.0.0.1, not through the chart's Service).
//!
//! The chart's two webhook configurations are applied too, with only `clientConfig`
//! pointed at that loopback address and no `caBundle`: svcplane must publish the
//! bundle itself (`get`/`patch` on those names) before the API server can call it.
//!
//! The process must become ready and lead (Lease in kube-system, read from its secure
//! metrics port with the token of a ServiceAccount bound to the chart's reader role,
//! which needs the chart's TokenReview/SubjectAccessReview grants), publish the
//! bundle, answer admission reviews by claiming ClusterIPs (AllocationClaim creates),
//! write EndpointSlices and Endpoints for a Service with ready Pods, mirror a
//! custom Endpoints object, and log nothing forbidden: no 403 anywhere in its stderr.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Endpoints, Secret, Service};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use svcplane_allocator::Claim;
use svcplane_controller::core::fixtures::{node, pod, svc};
use svcplane_controller::core::keys::LABEL_MANAGED_BY;
use svcplane_controller::core::slice_endpoints::SliceEndpoints;
use svcplane_tests::binary::{
    SvcplaneProcess, free_port, https_get, lease_holder, sample, svcplane_bin_or_skip,
};
use svcplane_tests::envtest::{self, Cluster, Flavor};
use svcplane_tests::objects::{
    create_node, create_pods, create_service, get_endpoints, list_slices, service_account_token,
};
use svcplane_tests::skip::{Skip, skip};
use svcplane_tests::webhook_env::{as_yaml, kubectl, kubectl_ok, yaml_documents};
use svcplane_webhook::certs::CA_BUNDLE_KEY;
use svcplane_webhook::claim::{AllocationClaim, claim_name};

const TEST: &str = "e2e_chart_rbac";
/// The release namespace `render.py` renders into (`helm template -n kube-system`).
const RELEASE_NAMESPACE: &str = "kube-system";
/// `POD_NAME` of the process (its leader identity).
const POD_NAME: &str = "svcplane-rbac-test";
/// The kinds applied from the rendered chart before the binary starts.
const RBAC_KINDS: [&str; 6] = [
    "ServiceAccount",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];
const WEBHOOK_KINDS: [&str; 2] = [
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];
/// `tests/chart/run.sh`'s exit code when its tools cannot be installed.
const CHART_TOOLS_UNAVAILABLE: i32 = 77;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The chart rendered with its default values (YAML documents joined with `---`), or
/// `None` after skipping. Renders with `tests/chart/render.py` from the venv
/// `tests/chart/run.sh` keeps (running `run.sh` first when that venv lacks the
/// tools), into a file of this test's own: `run.sh` rewrites `target/chart/` as a
/// whole, and its other checks (lint, pytest) are the `chart` suite's business.
fn render_default_values(dir: &Path) -> Option<String> {
    let venv = std::env::var_os("SVCPLANE_CHART_VENV")
        .filter(|v| !v.is_empty())
        .map_or_else(
            || std::env::temp_dir().join("svcplane-chart-venv"),
            PathBuf::from,
        );
    let python = venv.join("bin").join("python");
    let has_tools = || {
        Command::new(&python)
            .args(["-c", "import helm_python, yaml"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has_tools() {
        if !svcplane_tests::skip::python3_or_skip(TEST) {
            return None;
        }
        // run.sh creates the venv first; whether its later checks pass is not this
        // test's concern, only whether the tools are there afterwards.
        let out = Command::new("bash")
            .arg("tests/chart/run.sh")
            .current_dir(workspace())
            .output()
            .unwrap();
        if out.status.code() == Some(CHART_TOOLS_UNAVAILABLE) {
            skip(
                TEST,
                &Skip::missing(
                    "tests/chart/run.sh could not install the chart tools (python3's venv module, or PyPI)",
                    "make PyPI reachable for pip (and python3's venv module available), then run `scripts/test` again",
                ),
            );
            return None;
        }
        assert!(
            has_tools(),
            "tests/chart/run.sh left no usable venv at {}:\n{}\n{}",
            venv.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rendered = dir.join("manifests.yaml");
    let out = Command::new(&python)
        .arg("tests/chart/render.py")
        .arg("charts/svcplane")
        .arg(&rendered)
        .current_dir(workspace())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tests/chart/render.py failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(std::fs::read_to_string(&rendered).unwrap())
}

/// A copy of the admin kubeconfig whose users impersonate `user` with `groups` (what
/// kube-rs, like kubectl, sends as `Impersonate-User`/`Impersonate-Group`). Written as
/// JSON, which every YAML reader takes.
fn impersonating_kubeconfig(admin: &Path, user: &str, groups: &[String], out: &Path) {
    let text = std::fs::read_to_string(admin).unwrap();
    let mut config: Value = serde_saphyr::from_str(&text).unwrap();
    let users = config["users"].as_array_mut().expect("kubeconfig users");
    assert!(!users.is_empty(), "{}: no users", admin.display());
    for u in users {
        u["user"]["as"] = json!(user);
        u["user"]["as-groups"] = json!(groups);
    }
    std::fs::write(out, serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

fn http_status(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Does a log line report a 403 or anything forbidden? `403` counts as a token of
/// its own (so a timestamp's `.403` fraction or a hex uid does not).
fn forbidden(line: &str) -> bool {
    line.to_ascii_lowercase().contains("forbidden")
        || line
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
            .any(|t| t.trim_matches('.') == "403")
}

/// The captured stderr of the process.
fn stderr_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Fails the test as soon as svcplane has logged a refusal (rather than when a wait
/// times out), with those lines first.
fn assert_nothing_forbidden(log: &Path) {
    let stderr = stderr_of(log);
    let refused: Vec<&str> = stderr.lines().filter(|l| forbidden(l)).collect();
    assert!(
        refused.is_empty(),
        "svcplane, as the chart's ServiceAccount, was refused:\n{}\n\nits whole stderr:\n{stderr}",
        refused.join("\n")
    );
}

/// Waits up to `limit` for `check`, failing early on a refusal in svcplane's log.
async fn wait_for<F, Fut>(what: &str, limit: Duration, log: &Path, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert_nothing_forbidden(log);
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}; svcplane's stderr:\n{}",
            stderr_of(log)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The Deployment's container args, changed only where a process outside a pod needs
/// it; the env as the kubelet would set it.
fn local_args_and_env(
    deployment: &Value,
    kubeconfig: &Path,
    admin: &str,
    webhook: &str,
    secure_metrics: &str,
) -> (Vec<String>, Vec<(String, String)>) {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let rendered: Vec<String> = container["args"]
        .as_array()
        .expect("the Deployment's container args")
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        rendered.first().map(String::as_str),
        Some("run"),
        "{rendered:?}"
    );
    let (mut metrics, mut webhook_bind, mut extra_hosts) = (false, false, false);
    let mut args: Vec<String> = rendered
        .iter()
        .map(|a| {
            if a.starts_with("--metrics-bind-address=") {
                metrics = true;
                format!("--metrics-bind-address={admin}")
            } else if a.starts_with("--secure-metrics-bind-address=") {
                format!("--secure-metrics-bind-address={secure_metrics}")
            } else if a.starts_with("--webhook-bind-address=") {
                webhook_bind = true;
                format!("--webhook-bind-address={webhook}")
            } else if a.starts_with("--tls-extra-hosts=") {
                extra_hosts = true;
                format!("{a},127.0.0.1")
            } else {
                a.clone()
            }
        })
        .collect();
    assert!(
        metrics && webhook_bind,
        "bind addresses not rendered: {rendered:?}"
    );
    assert!(
        !rendered.iter().any(|a| a.starts_with("--kubeconfig")),
        "{rendered:?}"
    );
    args.insert(1, format!("--kubeconfig={}", kubeconfig.display()));
    if !extra_hosts {
        args.push("--tls-extra-hosts=127.0.0.1".into());
    }

    let mut env = Vec::new();
    for e in container["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap().to_owned();
        let value = if let Some(v) = e["value"].as_str() {
            v.to_owned()
        } else {
            match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => POD_NAME.to_owned(),
                Some("metadata.namespace") => RELEASE_NAMESPACE.to_owned(),
                _ => panic!("the Deployment sets env {name} in a way this test does not know: {e}"),
            }
        };
        env.push((name, value));
    }
    if let Ok(log) = std::env::var("SVCPLANE_E2E_LOG") {
        env.retain(|(n, _)| n != "RUST_LOG");
        env.push(("RUST_LOG".into(), log));
    }
    (args, env)
}

/// Deletes everything this test applied or made svcplane create outside its namespace.
fn clean_up(kubeconfig: &Path, applied: &[Value]) {
    let _ = kubectl(
        kubeconfig,
        &["delete", "--ignore-not-found", "--wait=false", "-f", "-"],
        &as_yaml(applied),
    );
    for (kind, name) in [("secret", "svcplane-webhook-certs"), ("lease", "svcplane")] {
        let _ = kubectl(
            kubeconfig,
            &[
                "-n",
                RELEASE_NAMESPACE,
                "delete",
                "--ignore-not-found",
                kind,
                name,
            ],
            "",
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_rbac_is_enough_for_the_shipped_binary() {
    let Some(bin) = svcplane_bin_or_skip(TEST) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("svcplane-{TEST}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(rendered) = render_default_values(&dir) else {
        let _ = std::fs::remove_dir_all(&dir);
        return;
    };
    let Some(cluster) = envtest::cluster(Flavor::ApiServerOnly, TEST) else {
        return;
    };
    if !envtest::reaches_loopback(&cluster, TEST) {
        return;
    }
    let client = cluster.client().await.unwrap();

    // 1. The chart's identity, permissions and CRD, for real.
    let docs = yaml_documents(&rendered);
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the rendered Deployment");
    assert_eq!(deployment["metadata"]["namespace"], RELEASE_NAMESPACE);
    let sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("the Deployment's serviceAccountName")
        .to_owned();
    let mut applied: Vec<Value> = docs
        .iter()
        .filter(|d| RBAC_KINDS.iter().any(|k| d["kind"] == *k))
        .cloned()
        .collect();
    for d in &applied {
        let namespace = &d["metadata"]["namespace"];
        assert!(
            namespace.is_null() || *namespace == RELEASE_NAMESPACE,
            "{} {} in {namespace}",
            d["kind"],
            d["metadata"]["name"]
        );
    }
    for kind in RBAC_KINDS {
        assert!(
            applied.iter().any(|d| d["kind"] == kind),
            "the chart renders no {kind}"
        );
    }
    kubectl_ok(
        &cluster.kubeconfig,
        &["apply", "-f", "-"],
        &as_yaml(&applied),
    );
    kubectl_ok(
        &cluster.kubeconfig,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            "crd/allocationclaims.svcplane.io",
        ],
        "",
    );

    // 2. A kubeconfig that is the chart's ServiceAccount, as its pod's token would be.
    let user = format!("system:serviceaccount:{RELEASE_NAMESPACE}:{sa}");
    let groups = [
        "system:serviceaccounts".to_owned(),
        format!("system:serviceaccounts:{RELEASE_NAMESPACE}"),
        "system:authenticated".to_owned(),
    ];
    let sa_kubeconfig = dir.join("kubeconfig-sa.yaml");
    impersonating_kubeconfig(&cluster.kubeconfig, &user, &groups, &sa_kubeconfig);
    let as_sa = Cluster {
        kubeconfig: sa_kubeconfig.clone(),
        external: cluster.external,
    }
    .client()
    .await
    .unwrap();
    // Not the admin: Secrets cluster-wide are not the chart's to read.
    let secrets = Api::<Secret>::all(as_sa.clone())
        .list(&Default::default())
        .await;
    assert_eq!(
        secrets.as_ref().err().and_then(http_status),
        Some(403),
        "the impersonating kubeconfig is not restricted (is it still the admin?): {:?}",
        secrets.map(|l| l.items.len())
    );
    // ... and the chart's bindings are in effect (the authorizer's cache follows the
    // objects just created): every probe answers, none with 403, before svcplane
    // starts, so a 403 it logs later is the chart's and not a race.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let services = Api::<Service>::all(as_sa.clone())
            .list(&Default::default())
            .await
            .map(|_| ());
        let claims = Api::<AllocationClaim>::all(as_sa.clone())
            .list(&Default::default())
            .await
            .map(|_| ());
        let lease = Api::<Lease>::namespaced(as_sa.clone(), RELEASE_NAMESPACE)
            .get_opt("svcplane")
            .await
            .map(|_| ());
        let secret = Api::<Secret>::namespaced(as_sa.clone(), RELEASE_NAMESPACE)
            .get_opt("svcplane-webhook-certs")
            .await
            .map(|_| ());
        let results = [services, claims, lease, secret];
        if results.iter().all(Result::is_ok) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the chart's ServiceAccount still cannot do what its bindings grant: {results:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // 3. The chart's webhook configurations, pointed at this process, no caBundle.
    let admin_port = free_port();
    let webhook_port = free_port();
    let secure_port = free_port();
    let mut webhook_configs: Vec<Value> = docs
        .iter()
        .filter(|d| WEBHOOK_KINDS.iter().any(|k| d["kind"] == *k))
        .cloned()
        .collect();
    assert_eq!(webhook_configs.len(), 2, "the chart's two configurations");
    for c in &mut webhook_configs {
        for w in c["webhooks"].as_array_mut().unwrap() {
            let path = w["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap()
                .to_owned();
            assert!(w["clientConfig"]["caBundle"].is_null(), "{w}");
            w["clientConfig"] = json!({"url": format!("https://127.0.0.1:{webhook_port}{path}")});
        }
    }
    kubectl_ok(
        &cluster.kubeconfig,
        &["apply", "-f", "-"],
        &as_yaml(&webhook_configs),
    );
    applied.splice(0..0, webhook_configs.iter().cloned());

    // 4. `svcplane run` as the Deployment runs it, as the ServiceAccount.
    let admin = format!("127.0.0.1:{admin_port}");
    let secure: std::net::SocketAddr = format!("127.0.0.1:{secure_port}").parse().unwrap();
    let (args, env) = local_args_and_env(
        deployment,
        &sa_kubeconfig,
        &admin,
        &format!("127.0.0.1:{webhook_port}"),
        &secure.to_string(),
    );
    // The chart serves /metrics on its secure port by default: read it as Prometheus
    // would, with the token of a ServiceAccount bound to the chart's reader role
    // (svcplane, as the chart's ServiceAccount, then needs its TokenReview and
    // SubjectAccessReview grants).
    let secure_on = args
        .iter()
        .any(|a| a.starts_with("--secure-metrics-bind-address="));
    let reader_token = if secure_on {
        let reader_role = docs
            .iter()
            .find(|d| {
                d["kind"] == "ClusterRole"
                    && d["rules"].as_array().into_iter().flatten().any(|r| {
                        r["nonResourceURLs"]
                            .as_array()
                            .is_some_and(|u| u.iter().any(|u| u == "/metrics"))
                    })
            })
            .expect("the chart's metrics reader ClusterRole (secure metrics are on)");
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "svcplane-rbac-test-prometheus"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": reader_role["metadata"]["name"]},
            "subjects": [{"kind": "ServiceAccount", "name": "rbac-test-prometheus",
                          "namespace": RELEASE_NAMESPACE}],
        });
        kubectl_ok(
            &cluster.kubeconfig,
            &["apply", "-f", "-"],
            &as_yaml(std::slice::from_ref(&binding)),
        );
        applied.push(binding);
        applied.push(json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "rbac-test-prometheus", "namespace": RELEASE_NAMESPACE}}));
        Some(
            service_account_token(&client, RELEASE_NAMESPACE, "rbac-test-prometheus")
                .await
                .unwrap(),
        )
    } else {
        None
    };
    let log = dir.join("svcplane.stderr");
    let mut through_env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    through_env.push(bin.display().to_string());
    through_env.extend(args.iter().cloned());
    // `env` sets the Deployment's variables and execs the binary (same process).
    let started = Instant::now();
    let mut run = SvcplaneProcess::spawn_with_stderr(
        Path::new("env"),
        POD_NAME,
        &through_env,
        Some(admin.parse().unwrap()),
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let limit = Duration::from_secs(90);
    loop {
        assert!(
            !run.exited(),
            "svcplane {args:?} exited before it was ready:\n{}",
            stderr_of(&log)
        );
        if matches!(run.admin_get("/readyz"), Ok((200, _))) {
            break;
        }
        assert_nothing_forbidden(&log);
        assert!(
            started.elapsed() < limit,
            "svcplane not ready after {limit:?}: {:?}\n{}",
            run.admin_get("/readyz"),
            stderr_of(&log)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ready_after = started.elapsed();

    // It leads: the Lease in the release namespace is its own.
    wait_for(
        "the leader Lease",
        Duration::from_secs(30),
        &log,
        || async {
            let series = "leader_election_master_status{name=\"svcplane\"}";
            let leads = match &reader_token {
                Some(token) => match https_get(secure, "/metrics", Some(token)).await {
                    Ok((200, text)) => sample(&text, series) == Some(1.0),
                    Ok((code, text)) if code != 403 => {
                        panic!(
                            "the secure metrics port answered {code}: {text}\n{}",
                            stderr_of(&log)
                        )
                    }
                    // RBAC objects just made may not have reached the authorizer yet.
                    _ => false,
                },
                None => run.metric(series) == Some(1.0),
            };
            leads && lease_holder(&client, RELEASE_NAMESPACE).await.as_deref() == Some(POD_NAME)
        },
    )
    .await;

    // It published its CA to both configurations (get + patch on their names).
    let secret = Api::<Secret>::namespaced(client.clone(), RELEASE_NAMESPACE)
        .get("svcplane-webhook-certs")
        .await
        .expect("the self-managed certificate Secret");
    let ca = secret
        .data
        .as_ref()
        .and_then(|d| d.get(CA_BUNDLE_KEY))
        .map(|b| base64::engine::general_purpose::STANDARD.encode(&b.0))
        .expect("the Secret's CA bundle");
    wait_for(
        "the published caBundle",
        Duration::from_secs(30),
        &log,
        || async {
            WEBHOOK_KINDS.iter().all(|kind| {
                let out = kubectl_ok(
                    &cluster.kubeconfig,
                    &["get", &kind.to_lowercase(), "svcplane", "-o", "json"],
                    "",
                );
                let config: Value = serde_json::from_str(&out).unwrap();
                config["webhooks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|w| w["clientConfig"]["caBundle"] == ca)
            })
        },
    )
    .await;

    // 5. The webhook: Services in a reviewed namespace get claimed ClusterIPs. The API
    // server picks the bundle up asynchronously (and fails open until then): probe.
    let ns = envtest::create_namespace(&client, "chart-rbac-")
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let claims: Api<AllocationClaim> = Api::all(client.clone());
    let claimed = |s: &Service| {
        let ip: std::net::IpAddr = s
            .spec
            .as_ref()
            .and_then(|s| s.cluster_ip.as_deref())
            .unwrap()
            .parse()
            .unwrap();
        let claims = claims.clone();
        async move {
            claims
                .get_opt(&claim_name(Claim::Ip(ip)))
                .await
                .unwrap()
                .is_some()
        }
    };
    let mut i = 0;
    loop {
        i += 1;
        let name = format!("probe-{i}");
        let probe = create_service(&client, &ns, &svc(&name).port("http", 80, 8080).build())
            .await
            .unwrap_or_else(|e| panic!("{e:#}\nsvcplane's stderr:\n{}", stderr_of(&log)));
        if claimed(&probe).await {
            break;
        }
        assert_nothing_forbidden(&log);
        assert!(
            started.elapsed() < ready_after + Duration::from_secs(60),
            "the webhook never claimed a Service's ClusterIP; svcplane's stderr:\n{}",
            stderr_of(&log)
        );
        services
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // 6. The controllers: a Service with two ready Pods gets its EndpointSlice and
    // Endpoints; a Service without selector has its custom Endpoints mirrored.
    create_node(&client, &ns, &node("node-a", Some("zone-a")))
        .await
        .unwrap();
    create_pods(
        &client,
        &ns,
        &[
            pod("web-1", "web").ip("10.0.0.1").ready().build(),
            pod("web-2", "web").ip("10.0.0.2").ready().build(),
        ],
    )
    .await
    .unwrap();
    let web = create_service(&client, &ns, &svc("web").port("http", 80, 8080).build())
        .await
        .unwrap();
    assert!(claimed(&web).await, "web's ClusterIP is not claimed");
    let external: Service = serde_json::from_value(json!({
        "metadata": {"name": "external"},
        "spec": {"ports": [{"name": "http", "port": 80}]},
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &external)
        .await
        .unwrap();
    let custom: Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "external"},
        "subsets": [{"addresses": [{"ip": "10.0.1.1"}], "ports": [{"name": "http", "port": 80}]}],
    }))
    .unwrap();
    Api::<Endpoints>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &custom)
        .await
        .unwrap();

    let addresses_of = |slices: &[k8s_openapi::api::discovery::v1::EndpointSlice]| {
        let mut a: Vec<String> = slices
            .iter()
            .flat_map(|s| s.endpoints().iter().flat_map(|e| e.addresses.clone()))
            .collect();
        a.sort();
        a
    };
    wait_for(
        "web's EndpointSlice and Endpoints",
        Duration::from_secs(60),
        &log,
        || async {
            let slices = list_slices(&client, &ns, "web").await.unwrap();
            let endpoints = get_endpoints(&client, &ns, "web").await.unwrap();
            let mut ready: Vec<String> = endpoints
                .iter()
                .flat_map(|e| e.subsets.iter().flatten())
                .flat_map(|s| s.addresses.iter().flatten())
                .map(|a| a.ip.clone())
                .collect();
            ready.sort();
            addresses_of(&slices) == ["10.0.0.1", "10.0.0.2"] && ready == ["10.0.0.1", "10.0.0.2"]
        },
    )
    .await;
    wait_for(
        "the mirrored EndpointSlice",
        Duration::from_secs(60),
        &log,
        || async {
            let slices = list_slices(&client, &ns, "external").await.unwrap();
            addresses_of(&slices) == ["10.0.1.1"]
                && slices.iter().all(|s| {
                    s.labels().get(LABEL_MANAGED_BY).map(String::as_str)
                        == Some("endpointslicemirroring-controller.k8s.io")
                })
        },
    )
    .await;

    // 7. Nothing was forbidden along the way.
    assert_nothing_forbidden(&log);
    let stderr = stderr_of(&log);
    assert!(!run.exited(), "svcplane exited:\n{stderr}");
    eprintln!(
        "{TEST}: ready after {ready_after:?}, done after {:?}",
        started.elapsed()
    );

    drop(run);
    clean_up(&cluster.kubeconfig, &applied);
    envtest::delete_namespace(&client, &ns).await;
    let _ = std::fs::remove_dir_all(&dir);
}
