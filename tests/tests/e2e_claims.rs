//! Allocation claims on a real API server, with the shipped `svcplane` binary.
//!
//! Every test starts `svcplane webhook` or `svcplane run` as separate processes against
//! the envtest kube-apiserver, registers webhook configurations for its own namespace,
//! and checks what an operator would see: a deleted Service's ClusterIP and nodePort
//! can be taken again at once (by any replica, leader or not), churn through tiny ranges
//! never fails, a restored Service gets the values its annotations ask for, and the
//! claims left afterwards are exactly those of live Services — the
//! repair loop as shipped (its pace set by the watches' own sync signals) deletes the
//! rest. Each test uses ranges of its own inside the API server's 10.96.0.0/16; they
//! run one at a time (`SERIAL`) because every webhook process watches and repairs
//! claims cluster-wide, so one test's processes would act on another's claims.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use svcplane_tests::binary::{SvcplaneProcess, free_port, lease_holder};
use svcplane_tests::envtest;
use svcplane_tests::webhook_env::{BinaryEnv, install_claim_crd, kubectl, register_webhooks};
use svcplane_webhook::claim::AllocationClaim;

/// A webhook's ranges: a /26 of ClusterIPs and 40 nodePorts.
#[derive(Debug, Clone, Copy)]
struct Ranges {
    /// Third octet of `10.96.X.0/26`.
    third: u8,
    /// First port of `first..first+39`.
    first_port: i32,
}

impl Ranges {
    fn cidr(self) -> String {
        format!("10.96.{}.0/26", self.third)
    }

    fn ports(self) -> String {
        format!("{}-{}", self.first_port, self.first_port + 39)
    }

    /// Does a claim's value fall in these ranges?
    fn holds(self, claim: &AllocationClaim) -> bool {
        if let Ok(ip) = claim.spec.value.parse::<Ipv4Addr>() {
            let o = ip.octets();
            return o[0] == 10 && o[1] == 96 && o[2] == self.third && o[3] < 64;
        }
        claim
            .spec
            .value
            .parse::<i32>()
            .is_ok_and(|p| (self.first_port..self.first_port + 40).contains(&p))
    }
}

/// Held for a whole test; tokio's mutex works across the tests' separate runtimes.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

type Env = BinaryEnv;

async fn env(test: &str) -> Option<Env> {
    let env = BinaryEnv::new(test, &SERIAL).await?;
    install_claim_crd(&env.client).await.unwrap();
    Some(env)
}

/// Flags every webhook process here shares: TLS, ranges (given ones, overriding the
/// cluster's ServiceCIDRs), a fast repair loop, a
/// five-second grace period for claims of Services never seen, an admin address.
fn webhook_flags(env: &Env, ranges: Ranges, port: u16, admin: SocketAddr) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", env.cluster.kubeconfig.display()),
        format!("--webhook-bind-address=127.0.0.1:{port}"),
        format!("--tls-cert-file={}", env.certs.cert_file.display()),
        format!("--tls-private-key-file={}", env.certs.key_file.display()),
        format!("--service-cluster-ip-range={}", ranges.cidr()),
        format!("--service-node-port-range={}", ranges.ports()),
        // The tiny ranges on purpose, not the cluster's ServiceCIDRs.
        "--service-ranges-from=flags".into(),
        "--claim-repair-interval=1s".into(),
        "--claim-grace-period=5s".into(),
        format!("--metrics-bind-address={admin}"),
    ]
}

/// `svcplane webhook`, ready; and its HTTPS base URL.
async fn start_webhook(env: &Env, name: &str, ranges: Ranges) -> (SvcplaneProcess, String) {
    start_webhook_at(env, name, ranges, free_port(), &[]).await
}

/// `svcplane webhook` serving on `port` with `extra` flags, ready; its HTTPS base URL.
async fn start_webhook_at(
    env: &Env,
    name: &str,
    ranges: Ranges,
    port: u16,
    extra: &[&str],
) -> (SvcplaneProcess, String) {
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut args = vec!["webhook".to_owned()];
    args.extend(webhook_flags(env, ranges, port, admin));
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let mut p = SvcplaneProcess::spawn(&env.bin, name, &args, Some(admin));
    p.wait_ready(Duration::from_secs(60)).await;
    (p, format!("https://127.0.0.1:{port}"))
}

/// A namespace whose Services go to the webhook at `base_url`.
async fn webhook_namespace(env: &Env, prefix: &str, base_url: &str) -> String {
    let ns = envtest::create_namespace(&env.client, prefix)
        .await
        .unwrap();
    register_webhooks(&env.client, &ns, base_url, &env.certs.ca_pem)
        .await
        .unwrap();
    ns
}

fn node_port_service(name: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "type": "NodePort",
            "selector": {"app": name},
            "ports": [{"port": 80, "targetPort": 8080}],
        },
    }))
    .unwrap()
}

fn values_of(svc: &Service) -> (String, i32) {
    let spec = svc.spec.as_ref().unwrap();
    let ip = spec.cluster_ip.clone().unwrap();
    let port = spec.ports.as_ref().unwrap()[0].node_port.unwrap();
    (ip, port)
}

/// Creates a Service, retrying while the API server has not picked up a just
/// registered webhook configuration (it then allocates in-tree, outside our ranges).
async fn create_through_webhook(api: &Api<Service>, svc: &Service, ranges: Ranges) -> Service {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let created = api.create(&PostParams::default(), svc).await.unwrap();
        let (ip, _) = values_of(&created);
        if ip.starts_with(&format!("10.96.{}.", ranges.third)) {
            return created;
        }
        // Not ours yet: undo and try again.
        api.delete(&created.name_any(), &DeleteParams::default())
            .await
            .unwrap();
        assert!(Instant::now() < deadline, "the webhook never took over");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Stored claims whose value is in `ranges`.
async fn claims_in(client: &Client, ranges: Ranges) -> Vec<AllocationClaim> {
    Api::<AllocationClaim>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| ranges.holds(c))
        .collect()
}

/// Waits until the claims in `ranges` are exactly `want` (names); the time it took.
async fn claims_settle(client: &Client, ranges: Ranges, want: &HashSet<String>) -> Duration {
    let start = Instant::now();
    loop {
        let have: HashSet<String> = claims_in(client, ranges)
            .await
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        if &have == want {
            return start.elapsed();
        }
        // Grace (5 s) plus two repair intervals, with room for a loaded machine.
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "claims never settled: {} extra {:?}, {} missing {:?}",
            have.difference(want).count(),
            have.difference(want).collect::<Vec<_>>(),
            want.difference(&have).count(),
            want.difference(&have).collect::<Vec<_>>(),
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The claim names the values of `services` need.
fn wanted_claims(services: &[Service]) -> HashSet<String> {
    services
        .iter()
        .flat_map(|s| {
            let (ip, port) = values_of(s);
            [format!("ip-{ip}"), format!("nodeport-{port}")]
        })
        .collect()
}

fn service_yaml(name: &str, ip: &str, port: i32) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  type: NodePort\n  \
         clusterIP: {ip}\n  selector: {{app: {name}}}\n  ports: [{{port: 80, targetPort: 8080, nodePort: {port}}}]\n"
    )
}

fn kubectl_ok(kubeconfig: &Path, args: &[&str], stdin: &str) -> Result<String, String> {
    let out = kubectl(kubeconfig, args, stdin).unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_services_ip_and_node_port_are_taken_again_at_once_under_another_name() {
    let Some(env) = env("e2e_claims_reuse").await else {
        return;
    };
    let ranges = Ranges {
        third: 210,
        first_port: 30210,
    };
    let (webhook, url) = start_webhook(&env, "claims-reuse", ranges).await;
    let ns = webhook_namespace(&env, "svcplane-claims-reuse-", &url).await;
    let services: Api<Service> = Api::namespaced(env.client.clone(), &ns);
    let first = create_through_webhook(&services, &node_port_service("first"), ranges).await;
    let (ip, port) = values_of(&first);
    let kc = env.cluster.kubeconfig.as_path();
    kubectl_ok(kc, &["-n", &ns, "delete", "service", "first"], "").unwrap();
    // As an operator would: delete, then create another Service asking for the same
    // ClusterIP and nodePort by hand. Upstream admits it at once.
    let start = Instant::now();
    let mut attempts = 0;
    let yaml = service_yaml("second", &ip, port);
    loop {
        attempts += 1;
        match kubectl_ok(kc, &["-n", &ns, "create", "-f", "-"], &yaml) {
            Ok(_) => break,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "the re-use was refused for 5 s ({attempts} attempts): {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    eprintln!(
        "e2e_claims: {ip} and nodePort {port} re-used after {:?} ({attempts} attempt(s))",
        start.elapsed()
    );
    let second = services.get("second").await.unwrap();
    assert_eq!(values_of(&second), (ip.clone(), port));
    // The claims now stand for the new Service.
    for c in claims_in(&env.client, ranges).await {
        assert_eq!(c.spec.service.name, "second", "{}", c.name_any());
    }
    // A value nobody asks for again is released by the repair loop too.
    let third = create_through_webhook(&services, &node_port_service("third"), ranges).await;
    services
        .delete("third", &DeleteParams::default())
        .await
        .unwrap();
    let took = claims_settle(&env.client, ranges, &wanted_claims(&[second])).await;
    eprintln!(
        "e2e_claims: the deleted Service's claims ({:?}) were released {took:?} after the delete",
        values_of(&third)
    );
    assert!(
        webhook
            .metric("svcplane_webhook_claims_released_total{reason=\"service_gone\"}")
            .unwrap_or(0.0)
            >= 2.0
    );
    envtest::delete_namespace(&env.client, &ns).await;
}

/// A Service restored without its values (as Velero restores one: `clusterIP` blanked)
/// but carrying them in `svcplane.io/requested-cluster-ips` and
/// `svcplane.io/requested-node-ports` gets them back; a second Service asking for the
/// same values gets automatic ones, and `kubectl` prints the webhook's warning naming
/// why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_service_gets_the_values_its_annotations_ask_for() {
    let Some(env) = env("e2e_claims_requested").await else {
        return;
    };
    let ranges = Ranges {
        third: 214,
        first_port: 30600,
    };
    let (_webhook, url) = start_webhook(&env, "claims-requested", ranges).await;
    let ns = webhook_namespace(&env, "svcplane-claims-requested-", &url).await;
    let services: Api<Service> = Api::namespaced(env.client.clone(), &ns);
    let original = create_through_webhook(&services, &node_port_service("web"), ranges).await;
    let (ip, port) = values_of(&original);
    let kc = env.cluster.kubeconfig.as_path();
    kubectl_ok(kc, &["-n", &ns, "delete", "service", "web"], "").unwrap();
    let restored = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  annotations:\n    \
             svcplane.io/requested-cluster-ips: \"{ip}\"\n    \
             svcplane.io/requested-node-ports: \"80/TCP={port}\"\nspec:\n  type: NodePort\n  \
             selector: {{app: web}}\n  ports: [{{port: 80, targetPort: 8080}}]\n"
        )
    };
    // The restore, as an operator runs it; the deleted Service's values are free again
    // at once (see the test above), so it gets them on the first create.
    let out = kubectl(kc, &["-n", &ns, "create", "-f", "-"], &restored("web")).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("Warning"), "{stderr}");
    let web = services.get("web").await.unwrap();
    assert_eq!(
        values_of(&web),
        (ip.clone(), port),
        "the restore got its values back"
    );
    // Another Service asking for the same values: admitted with automatic ones.
    let out = kubectl(kc, &["-n", &ns, "create", "-f", "-"], &restored("copy")).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "Warning: svcplane.io/requested-cluster-ips: {ip} not given (failed to allocate IP {ip}: provided IP is already allocated); the Service gets automatic ClusterIPs"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "Warning: svcplane.io/requested-node-ports: 80/TCP={port} not given (provided port is already allocated)"
        )),
        "{stderr}"
    );
    let copy = services.get("copy").await.unwrap();
    let (copy_ip, copy_port) = values_of(&copy);
    assert_ne!((copy_ip.as_str(), copy_port), (ip.as_str(), port));
    assert!(
        copy_ip.starts_with(&format!("10.96.{}.", ranges.third)),
        "{copy_ip}"
    );
    envtest::delete_namespace(&env.client, &ns).await;
}

/// `--retain-released-values` across two replicas and a restart: a deleted Service's
/// ClusterIP and nodePort are retained for its name (stored in its claims); the other
/// replica, filling the whole nodePort range, never hands them out and refuses them
/// when asked by hand; the Service created again under the name after a restart of
/// its replica gets them back with a warning saying so; once the retention ends the
/// repair loop releases them and anyone may take them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_created_service_gets_its_retained_values_back_and_no_one_else_does() {
    let Some(env) = env("e2e_claims_retained").await else {
        return;
    };
    let ranges = Ranges {
        third: 216,
        first_port: 30700,
    };
    const RETAIN: &str = "--retain-released-values=12s";
    let port_a = free_port();
    let (a, url_a) = start_webhook_at(&env, "claims-retain-a", ranges, port_a, &[RETAIN]).await;
    let (b, url_b) =
        start_webhook_at(&env, "claims-retain-b", ranges, free_port(), &[RETAIN]).await;
    let ns_a = webhook_namespace(&env, "svcplane-retain-a-", &url_a).await;
    let ns_b = webhook_namespace(&env, "svcplane-retain-b-", &url_b).await;
    let services_a: Api<Service> = Api::namespaced(env.client.clone(), &ns_a);
    let services_b: Api<Service> = Api::namespaced(env.client.clone(), &ns_b);
    let web = create_through_webhook(&services_a, &node_port_service("web"), ranges).await;
    let (ip, port) = values_of(&web);
    let kc = env.cluster.kubeconfig.as_path();
    kubectl_ok(kc, &["-n", &ns_a, "delete", "service", "web"], "").unwrap();
    let deleted = Instant::now();
    // The retention is stored in both claims (by one replica; the other learns it).
    let claims: Api<AllocationClaim> = Api::all(env.client.clone());
    loop {
        let mut retained = true;
        for name in [format!("ip-{ip}"), format!("nodeport-{port}")] {
            let claim = claims.get_opt(&name).await.unwrap();
            retained &=
                claim.is_some_and(|c| c.spec.retained.is_some() && c.spec.service.name == "web");
        }
        if retained {
            break;
        }
        assert!(
            deleted.elapsed() < Duration::from_secs(10),
            "retention never stored"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stored_after = deleted.elapsed();
    // Replica B hands out every other nodePort of the range, never the retained one.
    let mut others = Vec::new();
    for i in 0..39 {
        let s =
            create_through_webhook(&services_b, &node_port_service(&format!("o{i}")), ranges).await;
        let (other_ip, other_port) = values_of(&s);
        assert_ne!(other_ip, ip, "replica B handed out the retained ClusterIP");
        assert_ne!(
            other_port, port,
            "replica B handed out the retained nodePort"
        );
        others.push(s);
    }
    // Asked for by hand through replica B: refused, as a value in use is.
    let e = kubectl_ok(
        kc,
        &["-n", &ns_b, "create", "-f", "-"],
        &service_yaml("thief", &ip, port),
    )
    .unwrap_err();
    assert!(e.contains("already allocated"), "{e}");
    // Replica A restarts (on the same address): the retention is read back from the claims.
    drop(a);
    let (a2, _) = start_webhook_at(&env, "claims-retain-a2", ranges, port_a, &[RETAIN]).await;
    let out = kubectl(
        kc,
        &["-n", &ns_a, "create", "-f", "-"],
        &node_port_yaml("web"),
    )
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let back = services_a.get("web").await.unwrap();
    assert_eq!(
        values_of(&back),
        (ip.clone(), port),
        "the same values again"
    );
    assert!(
        stderr.contains(&format!(
            "Warning: ClusterIPs retained for {ns_a}/web given back: {ip}"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "Warning: nodePorts retained for {ns_a}/web given back: 80/TCP={port}"
        )),
        "{stderr}"
    );
    // An Event says so, and the replica counts the values it gave back.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.client.clone(), &ns_a);
    let start = Instant::now();
    let note = loop {
        let given = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("RetainedValuesGivenBack"));
        if let Some(e) = given {
            break e.note.unwrap_or_default();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no RetainedValuesGivenBack event"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        note.contains(&format!("ClusterIP {ip}")) && note.contains(&format!("nodePort {port}")),
        "{note}"
    );
    assert_eq!(
        a2.metric("svcplane_webhook_values_given_back_total"),
        Some(2.0)
    );
    eprintln!(
        "e2e_claims retained: stored {stored_after:?} after the delete; 39 Services through the \
         other replica never got {ip}/{port}; after a restart the re-created Service got them back"
    );
    // Deleted again: once the retention ends the repair loop releases them, and a Service
    // in the other namespace may take them by hand.
    kubectl_ok(kc, &["-n", &ns_a, "delete", "service", "web"], "").unwrap();
    let deleted = Instant::now();
    loop {
        match kubectl_ok(
            kc,
            &["-n", &ns_b, "create", "-f", "-"],
            &service_yaml("late", &ip, port),
        ) {
            Ok(_) => break,
            Err(e) => {
                assert!(e.contains("already allocated"), "{e}");
                assert!(
                    deleted.elapsed() < Duration::from_secs(40),
                    "never released after the retention: {e}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let released_after = deleted.elapsed();
    assert!(
        released_after >= Duration::from_secs(11),
        "released {released_after:?} after the delete, before the 12 s retention ended"
    );
    eprintln!(
        "e2e_claims retained: released for others {released_after:?} after the second delete (12 s retention)"
    );
    assert!(
        b.metric("svcplane_webhook_claims_released_total{reason=\"retention_ended\"}")
            .unwrap_or(0.0)
            + a2.metric("svcplane_webhook_claims_released_total{reason=\"retention_ended\"}")
                .unwrap_or(0.0)
            >= 1.0
    );
    envtest::delete_namespace(&env.client, &ns_a).await;
    envtest::delete_namespace(&env.client, &ns_b).await;
}

/// With the flag off, a namespace annotated `svcplane.io/retain-released-values`
/// opts its Services in; deleting the claim releases a retained value at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_opts_in_and_deleting_the_claim_releases_early() {
    let Some(env) = env("e2e_claims_retained_ns").await else {
        return;
    };
    let ranges = Ranges {
        third: 217,
        first_port: 30750,
    };
    let (_w, url) = start_webhook(&env, "claims-retain-ns", ranges).await;
    let ns = webhook_namespace(&env, "svcplane-retain-ns-", &url).await;
    let other = webhook_namespace(&env, "svcplane-retain-other-", &url).await;
    let kc = env.cluster.kubeconfig.as_path();
    kubectl_ok(
        kc,
        &[
            "annotate",
            "namespace",
            &ns,
            "svcplane.io/retain-released-values=1h",
        ],
        "",
    )
    .unwrap();
    let services: Api<Service> = Api::namespaced(env.client.clone(), &ns);
    // The webhook sees the annotation through its namespace watch; a Service created
    // after it is retained on delete.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let web = create_through_webhook(&services, &node_port_service("web"), ranges).await;
    let (ip, port) = values_of(&web);
    kubectl_ok(kc, &["-n", &ns, "delete", "service", "web"], "").unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let e = kubectl_ok(
        kc,
        &["-n", &other, "create", "-f", "-"],
        &service_yaml("late", &ip, port),
    )
    .unwrap_err();
    assert!(
        e.contains("already allocated"),
        "retained for the namespace: {e}"
    );
    let explained = std::process::Command::new(&env.bin)
        .args(["explain", "ip", &ip, "--kubeconfig"])
        .arg(kc)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(text.contains(&format!("retained for {ns}/web")), "{text}");
    let explained = std::process::Command::new(&env.bin)
        .args(["explain", "service", &format!("{ns}/web"), "--kubeconfig"])
        .arg(kc)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&explained.stderr);
    assert!(
        text.contains("its values are retained for its name until")
            && text.contains(&format!("{ip} (clusterIPs[0])"))
            && text.contains(&format!("{port} (ports[80/TCP])")),
        "{text}"
    );
    // Released early, by hand.
    kubectl_ok(
        kc,
        &[
            "delete",
            "allocationclaim",
            &format!("ip-{ip}"),
            &format!("nodeport-{port}"),
        ],
        "",
    )
    .unwrap();
    let start = Instant::now();
    while let Err(e) = kubectl_ok(
        kc,
        &["-n", &other, "create", "-f", "-"],
        &service_yaml("late", &ip, port),
    ) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "not released by the delete: {e}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "e2e_claims retained: a namespace's annotation retained {ip}/{port}; deleting the claims \
         released them {:?} later",
        start.elapsed()
    );
    envtest::delete_namespace(&env.client, &ns).await;
    envtest::delete_namespace(&env.client, &other).await;
}

/// A NodePort Service of port 80, as `kubectl create -f` takes it.
fn node_port_yaml(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  type: NodePort\n  \
         selector: {{app: {name}}}\n  ports: [{{port: 80, targetPort: 8080}}]\n"
    )
}

/// Creates `total` NodePort Services in `ns` one after another, deleting each once
/// `window` newer ones exist; every create must succeed. The live Services at the end.
async fn churn(
    client: &Client,
    ns: &str,
    prefix: &str,
    total: usize,
    window: usize,
    ranges: Ranges,
) -> Vec<Service> {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let mut live: std::collections::VecDeque<Service> = Default::default();
    for i in 0..total {
        let created = services
            .create(
                &PostParams::default(),
                &node_port_service(&format!("{prefix}-{i}")),
            )
            .await
            .unwrap_or_else(|e| panic!("create {i} of {total} in {ns} failed: {e}"));
        let (ip, port) = values_of(&created);
        assert!(
            ip.starts_with(&format!("10.96.{}.", ranges.third)),
            "create {i}: {ip} is not from the webhook"
        );
        assert!((ranges.first_port..ranges.first_port + 40).contains(&port));
        live.push_back(created);
        if live.len() > window {
            let old = live.pop_front().unwrap();
            services
                .delete(&old.name_any(), &DeleteParams::default())
                .await
                .unwrap();
        }
    }
    live.into_iter().collect()
}

/// Warms up a namespace's webhook registration (the API server picks new
/// configurations up asynchronously).
async fn warm_up(client: &Client, ns: &str, ranges: Ranges) {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    create_through_webhook(&services, &node_port_service("warm-up"), ranges).await;
    services
        .delete("warm-up", &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_through_tiny_ranges_never_fails_and_leaves_only_live_claims() {
    let Some(env) = env("e2e_claims_churn").await else {
        return;
    };
    let ranges = Ranges {
        third: 211,
        first_port: 30300,
    };
    let (webhook, url) = start_webhook(&env, "claims-churn", ranges).await;
    let ns = webhook_namespace(&env, "svcplane-claims-churn-", &url).await;
    warm_up(&env.client, &ns, ranges).await;
    // 62 usable ClusterIPs and 40 nodePorts; 186 creates is three times the IP range
    // and over four times the port range.
    let start = Instant::now();
    let live = churn(&env.client, &ns, "churn", 186, 8, ranges).await;
    let churned = start.elapsed();
    let settled = claims_settle(&env.client, ranges, &wanted_claims(&live)).await;
    eprintln!(
        "e2e_claims churn: 186 create/delete cycles in {churned:?}, 8 live; claims equal the \
         live values {settled:?} later ({} claims)",
        wanted_claims(&live).len()
    );

    // A claim whose Service never appeared (a request denied after the webhook answered)
    // waits out the grace period, then goes too.
    let orphan: AllocationClaim = serde_json::from_value(json!({
        "apiVersion": "svcplane.io/v1alpha1",
        "kind": "AllocationClaim",
        "metadata": {"name": format!("nodeport-{}", ranges.first_port + 39)},
        "spec": {"kind": "NodePort", "value": (ranges.first_port + 39).to_string(),
                 "service": {"namespace": ns, "name": "never-stored"}, "requestUid": "x"},
    }))
    .unwrap();
    let port_taken = live
        .iter()
        .any(|s| values_of(s).1 == ranges.first_port + 39);
    if !port_taken {
        Api::<AllocationClaim>::all(env.client.clone())
            .create(&PostParams::default(), &orphan)
            .await
            .unwrap();
        let took = claims_settle(&env.client, ranges, &wanted_claims(&live)).await;
        assert!(
            took >= Duration::from_secs(4),
            "released before its grace period: {took:?}"
        );
        assert!(
            webhook
                .metric("svcplane_webhook_claims_released_total{reason=\"unused\"}")
                .unwrap_or(0.0)
                >= 1.0
        );
    }
    envtest::delete_namespace(&env.client, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_webhook_replicas_share_churn_without_duplicates_or_leaks() {
    let Some(env) = env("e2e_claims_replicas").await else {
        return;
    };
    let ranges = Ranges {
        third: 212,
        first_port: 30400,
    };
    let (_a, url_a) = start_webhook(&env, "claims-replica-a", ranges).await;
    let (_b, url_b) = start_webhook(&env, "claims-replica-b", ranges).await;
    // Each replica serves its own namespace; both hand out the same tiny ranges, so
    // every value one frees must be seen (and may be taken) by the other.
    let ns_a = webhook_namespace(&env, "svcplane-claims-a-", &url_a).await;
    let ns_b = webhook_namespace(&env, "svcplane-claims-b-", &url_b).await;
    warm_up(&env.client, &ns_a, ranges).await;
    warm_up(&env.client, &ns_b, ranges).await;
    let start = Instant::now();
    let (live_a, live_b) = tokio::join!(
        churn(&env.client, &ns_a, "a", 93, 6, ranges),
        churn(&env.client, &ns_b, "b", 93, 6, ranges),
    );
    let churned = start.elapsed();
    let live: Vec<Service> = live_a.into_iter().chain(live_b).collect();
    let (mut ips, mut ports) = (HashSet::new(), HashSet::new());
    for s in &live {
        let (ip, port) = values_of(s);
        assert!(ips.insert(ip.clone()), "duplicate ClusterIP {ip}");
        assert!(ports.insert(port), "duplicate nodePort {port}");
    }
    let settled = claims_settle(&env.client, ranges, &wanted_claims(&live)).await;
    eprintln!(
        "e2e_claims replicas: 2 x 93 cycles concurrently in {churned:?}, 12 live, no duplicate; \
         claims equal the live values {settled:?} later"
    );
    envtest::delete_namespace(&env.client, &ns_a).await;
    envtest::delete_namespace(&env.client, &ns_b).await;
}

/// Two `svcplane run` replicas, leader-elected with short Lease timings, their
/// webhooks on `ranges`; once one leads.
struct RunPair {
    leading: SvcplaneProcess,
    following: SvcplaneProcess,
    /// The follower's webhook URL.
    follower_url: String,
    /// The namespace of their Lease.
    lease_ns: String,
}

async fn run_pair(env: &Env, prefix: &str, ranges: Ranges, extra: &[&str]) -> RunPair {
    let lease_ns = envtest::create_namespace(&env.client, &format!("svcplane-{prefix}-lease-"))
        .await
        .unwrap();
    let spawn = |name: String| {
        let port = free_port();
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut args = vec![
            "run".to_owned(),
            format!("--leader-elect-resource-namespace={lease_ns}"),
            "--leader-elect-lease-duration=4s".into(),
            "--leader-elect-renew-deadline=3s".into(),
            "--leader-elect-retry-period=1s".into(),
            // The controllers are not under test here.
            "--controllers=allocator-repair".into(),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        args.extend(webhook_flags(env, ranges, port, admin));
        (
            SvcplaneProcess::spawn(&env.bin, &name, &args, Some(admin)),
            format!("https://127.0.0.1:{port}"),
        )
    };
    let (mut a, url_a) = spawn(format!("{prefix}-a"));
    let (mut b, url_b) = spawn(format!("{prefix}-b"));
    a.wait_ready(Duration::from_secs(60)).await;
    b.wait_ready(Duration::from_secs(60)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        if let Some(h) = lease_holder(&env.client, &lease_ns).await {
            break h;
        }
        assert!(Instant::now() < deadline, "no leader elected");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (leading, following, follower_url) = if leader == a.name {
        (a, b, url_b)
    } else {
        (b, a, url_a)
    };
    RunPair {
        leading,
        following,
        follower_url,
        lease_ns,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_svcplane_run_a_follower_allows_reuse_and_the_leader_repairs() {
    let Some(env) = env("e2e_claims_run").await else {
        return;
    };
    let ranges = Ranges {
        third: 213,
        first_port: 30500,
    };
    let RunPair {
        leading,
        following,
        follower_url,
        lease_ns,
    } = run_pair(&env, "claims-run", ranges, &[]).await;
    let (leading, following) = (&leading, &following);
    // Only the follower answers this namespace's reviews.
    let ns = webhook_namespace(&env, "svcplane-claims-run-", &follower_url).await;
    warm_up(&env.client, &ns, ranges).await;
    let services: Api<Service> = Api::namespaced(env.client.clone(), &ns);
    let first = create_through_webhook(&services, &node_port_service("first"), ranges).await;
    let (ip, port) = values_of(&first);
    services
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    let start = Instant::now();
    let second: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "second"},
        "spec": {"type": "NodePort", "clusterIP": ip, "selector": {"app": "second"},
                 "ports": [{"port": 80, "targetPort": 8080, "nodePort": port}]},
    }))
    .unwrap();
    let second = loop {
        match services.create(&PostParams::default(), &second).await {
            Ok(s) => break s,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "the follower refused the re-use for 5 s: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    eprintln!(
        "e2e_claims run: the follower admitted the re-use of {ip}/{port} after {:?}",
        start.elapsed()
    );
    // The leader's repair loop deletes the claims of a Service nobody replaces.
    let third = create_through_webhook(&services, &node_port_service("third"), ranges).await;
    services
        .delete("third", &DeleteParams::default())
        .await
        .unwrap();
    claims_settle(&env.client, ranges, &wanted_claims(&[second])).await;
    let released = |p: &SvcplaneProcess| {
        p.metric("svcplane_webhook_claims_released_total{reason=\"service_gone\"}")
            .unwrap_or(0.0)
    };
    assert!(
        released(leading) >= 2.0,
        "the leader released {:?}'s claims; leader metrics:\n{}\nfollower metrics:\n{}",
        values_of(&third),
        leading
            .admin_get("/metrics")
            .map(|r| r.1)
            .unwrap_or_default(),
        following
            .admin_get("/metrics")
            .map(|r| r.1)
            .unwrap_or_default(),
    );
    assert_eq!(released(following), 0.0, "followers run no repair");
    assert_eq!(
        leading.metric("leader_election_master_status{name=\"svcplane\"}"),
        Some(1.0)
    );
    assert_eq!(
        following.metric("leader_election_master_status{name=\"svcplane\"}"),
        Some(0.0)
    );
    envtest::delete_namespace(&env.client, &ns).await;
    envtest::delete_namespace(&env.client, &lease_ns).await;
}

/// Under `svcplane run` with two leader-elected replicas: the leader stores the
/// retention of a Service deleted through the follower's webhook; once the leader is
/// killed and the follower leads, the retained values are still refused to others and
/// given back to the Service created again under the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_svcplane_run_a_retention_survives_a_leader_change() {
    let Some(env) = env("e2e_claims_run_retained").await else {
        return;
    };
    let ranges = Ranges {
        third: 218,
        first_port: 30800,
    };
    let RunPair {
        leading,
        following,
        follower_url,
        lease_ns,
    } = run_pair(&env, "retain-run", ranges, &["--retain-released-values=1h"]).await;
    let ns = webhook_namespace(&env, "svcplane-retain-run-", &follower_url).await;
    let services: Api<Service> = Api::namespaced(env.client.clone(), &ns);
    let web = create_through_webhook(&services, &node_port_service("web"), ranges).await;
    let (ip, port) = values_of(&web);
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    // The leader stores the retention the follower's review path depends on.
    let claims: Api<AllocationClaim> = Api::all(env.client.clone());
    let start = Instant::now();
    loop {
        let claim = claims.get_opt(&format!("ip-{ip}")).await.unwrap();
        if claim.is_some_and(|c| c.spec.retained.is_some()) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "retention never stored"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let leader_name = leading.name.clone();
    leading.signal("KILL");
    drop(leading);
    let start = Instant::now();
    loop {
        let h = lease_holder(&env.client, &lease_ns).await;
        if h.as_deref() == Some(following.name.as_str()) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the follower never took over from {leader_name}: {h:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took_over = start.elapsed();
    let kc = env.cluster.kubeconfig.as_path();
    let e = kubectl_ok(
        kc,
        &["-n", &ns, "create", "-f", "-"],
        &service_yaml("thief", &ip, port),
    )
    .unwrap_err();
    assert!(e.contains("already allocated"), "{e}");
    let back = create_through_webhook(&services, &node_port_service("web"), ranges).await;
    assert_eq!(
        values_of(&back),
        (ip.clone(), port),
        "given back after the leader change"
    );
    eprintln!(
        "e2e_claims run retained: the follower led {took_over:?} after the leader was killed; \
         {ip}/{port} stayed retained and came back to the re-created Service"
    );
    assert_eq!(
        following.metric("leader_election_master_status{name=\"svcplane\"}"),
        Some(1.0)
    );
    envtest::delete_namespace(&env.client, &ns).await;
    envtest::delete_namespace(&env.client, &lease_ns).await;
}
