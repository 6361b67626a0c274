//! Installing and operating the shipped `svcplane` binary on a real API server.
//!
//! - Without the AllocationClaim CRD, `svcplane webhook` and `svcplane run` say so once
//!   (one error line naming `svcplane crd | kubectl apply -f -`), stay up and unready
//!   with the same text in `/readyz`, and turn ready once the CRD is applied.
//! - `svcplane check` exits 0 only when svcplane itself answered its dry-run probe: not
//!   when the webhook is unreachable under `failurePolicy: Fail` (the API server
//!   refuses), nor under `Ignore` (the API server admits without svcplane).
//! - `svcplane check --pods-selector` fails within its patience, not its timeout, when
//!   no svcplane Pod can run, quoting the kubelet's reason; `--leader-lease` passes only
//!   once a replica is seen renewing the Lease (a stale holder is not a leader).
//! - Self-managed certificates (`--tls-secret-name`): two replicas started together
//!   make one CA between them, publish it as the configurations' `caBundle`, both are
//!   trusted by the API server, and a serving certificate re-issued in the Secret is
//!   served in place.
//!
//! The tests run one at a time (`SERIAL`): the first removes the cluster-wide CRD.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use svcplane_tests::binary::{SvcplaneProcess, free_port};
use svcplane_tests::envtest;
use svcplane_tests::webhook_env::{BinaryEnv, install_claim_crd, kubectl, register_webhooks};
use svcplane_webhook::claim::AllocationClaim;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

type Env = BinaryEnv;

async fn env(test: &str) -> Option<Env> {
    let env = BinaryEnv::new(test, &SERIAL).await?;
    Some(env)
}

fn admin_addr() -> SocketAddr {
    format!("127.0.0.1:{}", free_port()).parse().unwrap()
}

fn stderr_file(env: &Env, name: &str) -> (PathBuf, Stdio) {
    std::fs::create_dir_all(&env.dir).unwrap();
    let path = env.dir.join(format!("{name}.stderr"));
    let file = std::fs::File::create(&path).unwrap();
    (path, Stdio::from(file))
}

fn service(name: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))
    .unwrap()
}

/// Polls `/readyz` until its body contains `needle` (any status); the last answer.
async fn readyz_until(p: &mut SvcplaneProcess, needle: &str, limit: Duration) -> (u16, String) {
    let start = Instant::now();
    loop {
        assert!(!p.exited(), "{} exited", p.name);
        if let Ok((code, body)) = p.admin_get("/readyz")
            && body.contains(needle)
        {
            return (code, body);
        }
        assert!(
            start.elapsed() < limit,
            "{}: /readyz never said {needle:?}: {:?}",
            p.name,
            p.admin_get("/readyz")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_crd_the_webhook_says_so_once_stays_unready_and_recovers_when_applied() {
    let Some(env) = env("e2e_install_crd").await else {
        return;
    };
    let kc = &env.cluster.kubeconfig;
    // Start from an API server without the CRD.
    let out = kubectl(
        kc,
        &[
            "delete",
            "crd",
            "allocationclaims.svcplane.io",
            "--ignore-not-found",
            "--wait=true",
        ],
        "",
    )
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let claims: Api<AllocationClaim> = Api::all(env.client.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    while claims.list(&Default::default()).await.is_ok() {
        assert!(Instant::now() < deadline, "the CRD is still served");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let kubeconfig = format!("--kubeconfig={}", kc.display());
    let tls = [
        format!("--tls-cert-file={}", env.certs.cert_file.display()),
        format!("--tls-private-key-file={}", env.certs.key_file.display()),
    ];
    let wh_admin = admin_addr();
    let mut args = vec!["webhook".to_owned(), kubeconfig.clone()];
    args.extend(tls.clone());
    args.push(format!("--webhook-bind-address=127.0.0.1:{}", free_port()));
    args.push(format!("--metrics-bind-address={wh_admin}"));
    let (wh_log, wh_err) = stderr_file(&env, "webhook");
    let mut webhook =
        SvcplaneProcess::spawn_with_stderr(&env.bin, "crd-webhook", &args, Some(wh_admin), wh_err);
    let run_admin = admin_addr();
    let mut args = vec![
        "run".to_owned(),
        kubeconfig,
        "--leader-elect=false".into(),
        "--controllers=allocator-repair".into(),
    ];
    args.extend(tls);
    args.push(format!("--webhook-bind-address=127.0.0.1:{}", free_port()));
    args.push(format!("--metrics-bind-address={run_admin}"));
    let (run_log, run_err) = stderr_file(&env, "run");
    let mut run =
        SvcplaneProcess::spawn_with_stderr(&env.bin, "crd-run", &args, Some(run_admin), run_err);

    let fix = "svcplane crd | kubectl apply -f -";
    for p in [&mut webhook, &mut run] {
        let (code, body) = readyz_until(p, fix, Duration::from_secs(60)).await;
        assert_eq!(code, 503, "{}: {body}", p.name);
        assert!(body.contains("allocationclaims.svcplane.io"), "{body}");
    }
    // Several polls later (every 5 s): still one line each, and both processes up.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for (p, log) in [(&mut webhook, &wh_log), (&mut run, &run_log)] {
        assert!(!p.exited(), "{} exited instead of staying unready", p.name);
        let text = std::fs::read_to_string(log).unwrap();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("allocationclaims.svcplane.io"))
            .collect();
        assert_eq!(lines.len(), 1, "{}: exactly one line:\n{text}", p.name);
        assert!(
            lines[0].contains("ERROR") && lines[0].contains(fix),
            "{}",
            lines[0]
        );
        assert!(
            !text.contains("404"),
            "no watch failing with 404 over and over:\n{text}"
        );
    }

    install_claim_crd(&env.client).await.unwrap();
    webhook.wait_ready(Duration::from_secs(30)).await;
    run.wait_ready(Duration::from_secs(30)).await;
}

/// Both webhook configurations for Services in `ns`, calling `url`, with `policy`.
async fn configurations(client: &Client, ns: &str, url: &str, ca_pem: &str, policy: &str) {
    let name = format!("svcplane-{ns}");
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let hook = |hook_name: &str, path: &str| {
        json!({
            "name": hook_name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "NoneOnDryRun",
            "failurePolicy": policy,
            "timeoutSeconds": 5,
            "clientConfig": {"url": format!("{url}{path}"), "caBundle": ca},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                       "resources": ["services"], "scope": "Namespaced"}],
        })
    };
    let m: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": name},
        "webhooks": [hook("mutate.svcplane.io", "/mutate-services")],
    }))
    .unwrap();
    let v: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": name},
        "webhooks": [hook("validate.svcplane.io", "/validate-services")],
    }))
    .unwrap();
    let pp = PatchParams::apply("e2e-install").force();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(&name, &pp, &Patch::Apply(&m))
        .await
        .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(&name, &pp, &Patch::Apply(&v))
        .await
        .unwrap();
}

/// `svcplane check -n ns --timeout T --interval 500ms`: (exit code, stdout, stderr).
fn check(env: &Env, ns: &str, timeout: &str) -> (i32, String, String) {
    check_with(env, ns, timeout, &[])
}

/// [`check`] with more flags.
fn check_with(env: &Env, ns: &str, timeout: &str, extra: &[&str]) -> (i32, String, String) {
    let out = Command::new(&env.bin)
        .args([
            "check",
            "--kubeconfig",
            &env.cluster.kubeconfig.display().to_string(),
            "-n",
            ns,
            "--timeout",
            timeout,
            "--interval",
            "500ms",
        ])
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn svcplane_check_passes_only_when_svcplane_itself_answered() {
    let Some(env) = env("e2e_install_check").await else {
        return;
    };
    install_claim_crd(&env.client).await.unwrap();
    let ns = envtest::create_namespace(&env.client, "svcplane-check-")
        .await
        .unwrap();
    let port = free_port();
    let url = format!("https://127.0.0.1:{port}");

    // Nothing listens. Fail: the API server refuses, and says why.
    configurations(&env.client, &ns, &url, &env.certs.ca_pem, "Fail").await;
    let (code, stdout, stderr) = check(&env, &ns, "3s");
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("did not answer within 3s"), "{stderr}");
    assert!(stderr.contains("failed calling webhook"), "{stderr}");
    // Ignore: the API server admits the probe without svcplane; still a failure.
    configurations(&env.client, &ns, &url, &env.certs.ca_pem, "Ignore").await;
    let (code, _, stderr) = check(&env, &ns, "3s");
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("without svcplane's answer"), "{stderr}");

    // svcplane answers: exit 0, naming the replica.
    let webhook = spawn_webhook(&env, port, "check-replica-0").await;
    let (code, stdout, stderr) = check(&env, &ns, "30s");
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.starts_with("ok:"), "{stdout}");
    assert!(stdout.contains("replica check-replica-0"), "{stdout}");
    assert!(stdout.contains("clusterIP 10.96.230."), "{stdout}");
    // A dry run: nothing stored, nothing claimed.
    let services: Api<Service> = Api::namespaced(env.client.clone(), &ns);
    assert!(
        services
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let claims: Api<AllocationClaim> = Api::all(env.client.clone());
    assert!(
        !claims
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|c| c.spec.value.starts_with("10.96.230.")),
        "the probe claimed a value"
    );
    drop(webhook);
    envtest::delete_namespace(&env.client, &ns).await;
}

/// A Pod of svcplane's that the kubelet cannot run, as the API server shows it: its
/// container waiting with `reason`/`message` (status written as a kubelet would).
async fn stuck_pod(client: &Client, ns: &str, name: &str, reason: &str, message: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "svcplane-under-check"}},
        "spec": {"containers": [{"name": "svcplane", "image": "registry.invalid/svcplane:nope"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = json!({"status": {"containerStatuses": [{
        "name": "svcplane", "image": "registry.invalid/svcplane:nope", "imageID": "",
        "ready": false, "restartCount": 0,
        "state": {"waiting": {"reason": reason, "message": message}},
    }]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// A Lease as a replica of an uninstalled release left it: held, never renewed again.
async fn stale_lease(client: &Client, ns: &str, name: &str) -> Api<Lease> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"holderIdentity": "svcplane-5c4b3a291-qwert", "leaseDurationSeconds": 15,
                 "renewTime": "2026-01-01T00:00:00.000000Z"},
    }))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    leases
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn svcplane_check_names_why_no_pod_can_run_and_waits_for_a_renewing_leader() {
    let Some(env) = env("e2e_install_check_fast").await else {
        return;
    };
    install_claim_crd(&env.client).await.unwrap();
    let ns = envtest::create_namespace(&env.client, "svcplane-check-fast-")
        .await
        .unwrap();
    let port = free_port();
    let url = format!("https://127.0.0.1:{port}");
    configurations(&env.client, &ns, &url, &env.certs.ca_pem, "Ignore").await;

    // No answer, and the only Pod cannot pull its image: exit 1 after the patience,
    // long before the timeout, with the kubelet's words.
    stuck_pod(
        &env.client,
        &ns,
        "svcplane-7d9f8c6b5-abcde",
        "ImagePullBackOff",
        "Back-off pulling image \"registry.invalid/svcplane:nope\"",
    )
    .await;
    let selector = "--pods-selector=app.kubernetes.io/name=svcplane-under-check";
    let started = Instant::now();
    let (code, stdout, stderr) = check_with(&env, &ns, "2m", &[selector, "--stuck-patience=2s"]);
    let took = started.elapsed();
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(stderr.contains("no svcplane Pod can run"), "{stderr}");
    assert!(
        stderr.contains(
            "pod svcplane-7d9f8c6b5-abcde container svcplane: ImagePullBackOff: \
                         Back-off pulling image \"registry.invalid/svcplane:nope\""
        ),
        "{stderr}"
    );
    // Without the selector the same check waits out its timeout (the old behaviour).
    let (code, _, stderr) = check(&env, &ns, "3s");
    assert_eq!(code, 1);
    assert!(stderr.contains("did not answer within 3s"), "{stderr}");

    // The webhook answers, but the Lease's holder never renews: not done.
    let webhook = spawn_webhook(&env, port, "check-replica-1").await;
    let leases = stale_lease(&env.client, &ns, "svcplane").await;
    let (code, stdout, stderr) = check_with(&env, &ns, "4s", &["--leader-lease=svcplane"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("no replica was seen renewing the Lease"),
        "{stderr}"
    );
    // A replica renews while the check runs: done, naming the leader.
    let renewer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let renew = json!({"spec": {"holderIdentity": "svcplane-7d9f8c6b5-abcde",
                                     "renewTime": "2026-01-01T00:00:07.000000Z"}});
        leases
            .patch("svcplane", &PatchParams::default(), &Patch::Merge(&renew))
            .await
            .unwrap();
    });
    let (code, stdout, stderr) = tokio::task::spawn_blocking({
        let (bin, kubeconfig, ns) = (env.bin.clone(), env.cluster.kubeconfig.clone(), ns.clone());
        move || {
            let out = Command::new(bin)
                .args([
                    "check",
                    "--kubeconfig",
                    &kubeconfig.display().to_string(),
                    "-n",
                    &ns,
                    "--timeout",
                    "30s",
                    "--interval",
                    "500ms",
                    "--leader-lease=svcplane",
                ])
                .output()
                .unwrap();
            (
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    })
    .await
    .unwrap();
    renewer.await.unwrap();
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("and replica svcplane-7d9f8c6b5-abcde leads the controllers"),
        "{stdout}"
    );
    drop(webhook);
    envtest::delete_namespace(&env.client, &ns).await;
}

/// `svcplane webhook` as replica `name` on 127.0.0.1:`port` (certificates from the
/// test's CA, a range of its own), ready.
async fn spawn_webhook(env: &Env, port: u16, name: &str) -> SvcplaneProcess {
    let admin = admin_addr();
    let args = vec![
        "webhook".to_owned(),
        format!("--kubeconfig={}", env.cluster.kubeconfig.display()),
        format!("--tls-cert-file={}", env.certs.cert_file.display()),
        format!("--tls-private-key-file={}", env.certs.key_file.display()),
        format!("--webhook-bind-address=127.0.0.1:{port}"),
        format!("--metrics-bind-address={admin}"),
        "--service-cluster-ip-range=10.96.230.0/26".into(),
        // A range of its own, not the cluster's ServiceCIDRs.
        "--service-ranges-from=flags".into(),
    ];
    let mut webhook = SvcplaneProcess::spawn(&env.bin, name, &args, Some(admin));
    webhook.wait_ready(Duration::from_secs(60)).await;
    webhook
}

/// The Secret's `ca.crt`, `tls.crt`.
async fn secret_pems(client: &Client, ns: &str, name: &str) -> Option<(String, String)> {
    let s = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()?;
    let data = s.data?;
    let text = |k: &str| String::from_utf8(data.get(k)?.0.clone()).ok();
    Some((text("ca.crt")?, text("tls.crt")?))
}

async fn ca_bundles(client: &Client, name: &str) -> Vec<String> {
    let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await
        .unwrap();
    let v = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await
        .unwrap();
    let mut out = Vec::new();
    for w in m.webhooks.unwrap_or_default() {
        out.push(String::from_utf8(w.client_config.ca_bundle.unwrap_or_default().0).unwrap());
    }
    for w in v.webhooks.unwrap_or_default() {
        out.push(String::from_utf8(w.client_config.ca_bundle.unwrap_or_default().0).unwrap());
    }
    out
}

/// Creates `name` in `api`; its ClusterIP must come from svcplane's `prefix` range
/// (the configurations are `Fail`: without svcplane the create fails).
async fn create_through_svcplane(api: &Api<Service>, name: &str, prefix: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match api.create(&PostParams::default(), &service(name)).await {
            Ok(svc) => {
                let ip = svc.spec.unwrap().cluster_ip.unwrap();
                assert!(ip.starts_with(prefix), "{name}: {ip} not from svcplane");
                return;
            }
            // The API server picks up changed configurations asynchronously.
            Err(e) if Instant::now() < deadline => {
                eprintln!("retrying {name}: {e}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!("{name}: {e}"),
        }
    }
}

fn self_managed_args(env: &Env, ns: &str, port: u16, admin: SocketAddr) -> Vec<String> {
    vec![
        "webhook".to_owned(),
        format!("--kubeconfig={}", env.cluster.kubeconfig.display()),
        "--tls-secret-name=svcplane-webhook-certs".into(),
        format!("--tls-secret-namespace={ns}"),
        "--tls-extra-hosts=127.0.0.1".into(),
        format!("--webhook-configuration-name=svcplane-{ns}"),
        // Re-issued two thirds into 12 s, checked every second.
        "--tls-cert-validity=12s".into(),
        "--tls-reload-interval=1s".into(),
        format!("--webhook-bind-address=127.0.0.1:{port}"),
        format!("--metrics-bind-address={admin}"),
        "--service-cluster-ip-range=10.96.231.0/26".into(),
        // A range of its own, not the cluster's ServiceCIDRs.
        "--service-ranges-from=flags".into(),
    ]
}

async fn point_at(client: &Client, ns: &str, port: u16) {
    let name = format!("svcplane-{ns}");
    for (path, kind) in [("/mutate-services", "m"), ("/validate-services", "v")] {
        let patch = json!([{"op": "replace", "path": "/webhooks/0/clientConfig/url",
                            "value": format!("https://127.0.0.1:{port}{path}")}]);
        let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
        let pp = PatchParams::default();
        if kind == "m" {
            Api::<MutatingWebhookConfiguration>::all(client.clone())
                .patch(&name, &pp, &Patch::Json::<()>(patch))
                .await
                .unwrap();
        } else {
            Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .patch(&name, &pp, &Patch::Json::<()>(patch))
                .await
                .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_managed_certificates_one_ca_for_all_replicas_published_and_rotated_in_place() {
    let Some(env) = env("e2e_install_certs").await else {
        return;
    };
    install_claim_crd(&env.client).await.unwrap();
    let ns = envtest::create_namespace(&env.client, "svcplane-certs-")
        .await
        .unwrap();
    let (port_a, port_b) = (free_port(), free_port());
    // Registered without a CA: svcplane publishes its own.
    register_webhooks(&env.client, &ns, &format!("https://127.0.0.1:{port_a}"), "")
        .await
        .unwrap();
    // Two replicas race to create the Secret.
    let (admin_a, admin_b) = (admin_addr(), admin_addr());
    let mut a = SvcplaneProcess::spawn(
        &env.bin,
        "certs-a",
        &self_managed_args(&env, &ns, port_a, admin_a),
        Some(admin_a),
    );
    let mut b = SvcplaneProcess::spawn(
        &env.bin,
        "certs-b",
        &self_managed_args(&env, &ns, port_b, admin_b),
        Some(admin_b),
    );
    a.wait_ready(Duration::from_secs(60)).await;
    b.wait_ready(Duration::from_secs(60)).await;

    let (ca, first_cert) = secret_pems(&env.client, &ns, "svcplane-webhook-certs")
        .await
        .expect("the Secret was created");
    assert_eq!(ca.matches("BEGIN CERTIFICATE").count(), 1, "one CA:\n{ca}");
    // Published to both configurations (the loop runs every second).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let bundles = ca_bundles(&env.client, &format!("svcplane-{ns}")).await;
        if bundles.len() == 2 && bundles.iter().all(|b| *b == ca) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "caBundle never published: {bundles:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let services: Api<Service> = Api::namespaced(env.client.clone(), &ns);
    create_through_svcplane(&services, "via-a", "10.96.231.").await;
    // The other replica serves a certificate from the same CA.
    point_at(&env.client, &ns, port_b).await;
    create_through_svcplane(&services, "via-b", "10.96.231.").await;

    // The serving certificate is re-issued in the Secret and served in place.
    let deadline = Instant::now() + Duration::from_secs(30);
    let rotated = loop {
        let (ca_now, cert) = secret_pems(&env.client, &ns, "svcplane-webhook-certs")
            .await
            .unwrap();
        if cert != first_cert {
            assert_eq!(ca_now, ca, "the CA stays");
            break cert;
        }
        assert!(Instant::now() < deadline, "never re-issued");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(rotated.contains("BEGIN CERTIFICATE"));
    // Give both replicas a reload interval, then both still answer.
    tokio::time::sleep(Duration::from_secs(2)).await;
    create_through_svcplane(&services, "after-rotation-b", "10.96.231.").await;
    point_at(&env.client, &ns, port_a).await;
    create_through_svcplane(&services, "after-rotation-a", "10.96.231.").await;
    assert!(!a.exited() && !b.exited());
    let names: Vec<String> = services
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        let _ = kubectl(
            &env.cluster.kubeconfig,
            &["delete", kind, &format!("svcplane-{ns}")],
            "",
        );
    }
    envtest::delete_namespace(&env.client, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_leads_without_a_webhook_certificate_and_stops_when_the_webhook_cannot_listen() {
    let Some(env) = env("e2e_install_run").await else {
        return;
    };
    install_claim_crd(&env.client).await.unwrap();
    let ns = envtest::create_namespace(&env.client, "svcplane-run-")
        .await
        .unwrap();
    // The certificate Secret cannot be created (its namespace does not exist): the
    // webhook waits for it, the controllers do not.
    let admin = admin_addr();
    let args = vec![
        "run".to_owned(),
        format!("--kubeconfig={}", env.cluster.kubeconfig.display()),
        "--tls-secret-name=svcplane-webhook-certs".into(),
        "--tls-secret-namespace=no-such-namespace".into(),
        format!("--webhook-bind-address=127.0.0.1:{}", free_port()),
        format!("--metrics-bind-address={admin}"),
        format!("--leader-elect-resource-namespace={ns}"),
        "--controllers=endpointslice".into(),
    ];
    let mut p = SvcplaneProcess::spawn(&env.bin, "run-no-cert", &args, Some(admin));
    let deadline = Instant::now() + Duration::from_secs(60);
    while svcplane_tests::binary::lease_holder(&env.client, &ns)
        .await
        .as_deref()
        != Some("run-no-cert")
    {
        assert!(!p.exited(), "exited");
        assert!(
            Instant::now() < deadline,
            "never led while the certificate was missing"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, body) =
        readyz_until(&mut p, "no serving certificate", Duration::from_secs(10)).await;
    assert_eq!(code, 503, "{body}");
    drop(p);

    // A webhook address already taken: the process stops with the reason.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let admin = admin_addr();
    let args = vec![
        "run".to_owned(),
        format!("--kubeconfig={}", env.cluster.kubeconfig.display()),
        format!("--tls-cert-file={}", env.certs.cert_file.display()),
        format!("--tls-private-key-file={}", env.certs.key_file.display()),
        format!("--webhook-bind-address={}", taken.local_addr().unwrap()),
        format!("--metrics-bind-address={admin}"),
        format!("--leader-elect-resource-namespace={ns}"),
        "--controllers=endpointslice".into(),
    ];
    let (log, err) = stderr_file(&env, "run-taken");
    let mut p = SvcplaneProcess::spawn_with_stderr(&env.bin, "run-taken", &args, Some(admin), err);
    let code = p.wait(Duration::from_secs(60));
    assert_eq!(code, Some(1), "{}", std::fs::read_to_string(&log).unwrap());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("cannot listen on"), "{text}");
    envtest::delete_namespace(&env.client, &ns).await;
}
