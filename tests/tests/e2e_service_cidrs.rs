//! Service ranges from the cluster's ServiceCIDR objects, with the shipped `svcplane`
//! binary on the envtest kube-apiserver (AL-2.1, AL-3, AL-6).
//!
//! `svcplane run` is started without `--service-cluster-ip-range`, with its webhook
//! registered for one namespace and the `servicecidr` controller on, and does what an
//! operator expects: Services get addresses from the API server's own range; a
//! ServiceCIDR added at run time admits a hand-picked address in it without a restart
//! and shows in the capacity metrics (a tiny one filled by hand reaches 0 available
//! and counts the refused request); deleting that ServiceCIDR while a Service uses
//! it keeps it (finalizer, `Ready=False` `Terminating`) and the webhook hands out
//! nothing more from it; once the Service goes, so does the range. A second test gives
//! a range flag that disagrees with the cluster: the objects win, and `/readyz` says
//! so. The tests run one at a time (`SERIAL`): ServiceCIDRs are cluster-wide.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{ServiceCIDR, ServiceCIDRSpec};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use svcplane_tests::binary::{SvcplaneProcess, free_port};
use svcplane_tests::envtest;
use svcplane_tests::webhook_env::{BinaryEnv, install_claim_crd, register_webhooks};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

type Env = BinaryEnv;

async fn env(test: &str) -> Option<Env> {
    let env = BinaryEnv::new(test, &SERIAL).await?;
    install_claim_crd(&env.client).await.unwrap();
    Some(env)
}

/// `svcplane run` with its webhook and the `servicecidr` controller, no range flag
/// unless `extra` gives one; ready. Its HTTPS base URL.
async fn start_run(env: &Env, name: &str, extra: &[&str]) -> (SvcplaneProcess, String) {
    start_run_with(env, name, "servicecidr", extra).await
}

/// As [`start_run`], with these `--controllers`.
async fn start_run_with(
    env: &Env,
    name: &str,
    controllers: &str,
    extra: &[&str],
) -> (SvcplaneProcess, String) {
    let port = free_port();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut args: Vec<String> = vec![
        "run".into(),
        format!("--kubeconfig={}", env.cluster.kubeconfig.display()),
        "--leader-elect=false".into(),
        format!("--controllers={controllers}"),
        format!("--webhook-bind-address=127.0.0.1:{port}"),
        format!("--tls-cert-file={}", env.certs.cert_file.display()),
        format!("--tls-private-key-file={}", env.certs.key_file.display()),
        format!("--metrics-bind-address={admin}"),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let mut p = SvcplaneProcess::spawn(&env.bin, name, &args, Some(admin));
    p.wait_ready(Duration::from_secs(60)).await;
    (p, format!("https://127.0.0.1:{port}"))
}

fn service(name: &str, cluster_ip: Option<&str>) -> Service {
    let mut spec = json!({"ports": [{"port": 80}], "selector": {"app": name}});
    if let Some(ip) = cluster_ip {
        spec["clusterIP"] = json!(ip);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

async fn create(client: &Client, ns: &str, svc: &Service) -> Result<Service, kube::Error> {
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), svc)
        .await
}

/// The first ClusterIP of a stored Service.
fn ip_of(svc: &Service) -> Ipv4Addr {
    svc.spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .unwrap()
        .parse()
        .unwrap()
}

fn in_cidr(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = u32::MAX << (32 - prefix);
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

/// `(reason, status)` of the Ready condition, and whether the object still exists.
async fn ready_of(client: &Client, name: &str) -> Option<(String, String)> {
    let c = Api::<ServiceCIDR>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()?;
    let cond = c
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready");
    Some(cond.map_or_else(Default::default, |c| (c.reason, c.status)))
}

async fn wait_for<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn ranges_follow_service_cidrs_added_and_deleted_at_run_time() {
    let test = "e2e_service_cidrs::ranges_follow_service_cidrs_added_and_deleted_at_run_time";
    let Some(env) = env(test).await else {
        return;
    };
    let (run, base) = start_run(&env, "cidr-run", &[]).await;
    let ns = envtest::create_namespace(&env.client, "cidrs-")
        .await
        .unwrap();
    register_webhooks(&env.client, &ns, &base, &env.certs.ca_pem)
        .await
        .unwrap();
    let (_, body) = run.admin_get("/readyz").unwrap();
    assert!(
        body.contains("service ranges (ServiceCIDR objects): 10.96.0.0/16"),
        "/readyz names the cluster's ranges: {body}"
    );

    // No range flag: the address comes from the API server's own range.
    let auto = create(&env.client, &ns, &service("auto", None))
        .await
        .unwrap();
    assert!(
        in_cidr(ip_of(&auto), [10, 96, 0, 0], 16),
        "{:?}",
        ip_of(&auto)
    );

    // An address no ServiceCIDR covers is refused by the webhook.
    let e = create(&env.client, &ns, &service("early", Some("10.200.0.10")))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("denied the request")
            && e.to_string().contains("does not match the current range"),
        "{e}"
    );

    // A ServiceCIDR added at run time: the hand-picked address is admitted, no restart.
    let name = "e2e-extra";
    let mut cidr = ServiceCIDR::default();
    cidr.metadata.name = Some(name.into());
    cidr.spec = Some(ServiceCIDRSpec {
        cidrs: Some(vec!["10.200.0.0/24".into()]),
    });
    let cidrs = Api::<ServiceCIDR>::all(env.client.clone());
    cidrs.create(&PostParams::default(), &cidr).await.unwrap();
    // The controller marks it ready and protects it.
    wait_for("Ready=True", Duration::from_secs(30), || async {
        ready_of(&env.client, name)
            .await
            .is_some_and(|(_, s)| s == "True")
    })
    .await;
    let stored = cidrs.get(name).await.unwrap();
    assert_eq!(
        stored.metadata.finalizers.unwrap_or_default(),
        ["networking.k8s.io/service-cidr-finalizer"]
    );
    let start = Instant::now();
    let user = loop {
        match create(&env.client, &ns, &service("user", Some("10.200.0.10"))).await {
            Ok(s) => break s,
            Err(e) => {
                assert!(start.elapsed() < Duration::from_secs(30), "{e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(ip_of(&user), Ipv4Addr::new(10, 200, 0, 10));
    wait_for(
        "capacity metrics of the new range",
        Duration::from_secs(20),
        || async {
            run.metric("kube_apiserver_clusterip_allocator_allocated_ips{cidr=\"10.200.0.0/24\"}")
                == Some(1.0)
                && run.metric(
                    "kube_apiserver_clusterip_allocator_available_ips{cidr=\"10.200.0.0/24\"}",
                ) == Some(253.0)
        },
    )
    .await;

    // `svcplane migrate`, live and read-only: leaving the API server's range for the
    // added one moves `auto` to a free address of it (10.200.0.10 is `user`'s) and
    // leaves `default/kubernetes` to the operator.
    let out = std::process::Command::new(&env.bin)
        .args([
            "migrate",
            "--from",
            "kubernetes",
            "--to",
            name,
            "-o",
            "json",
        ])
        .arg(format!("--kubeconfig={}", env.cluster.kubeconfig.display()))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let moved = plan["moves"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["service"] == format!("{ns}/auto").as_str())
        .unwrap_or_else(|| panic!("{plan}"));
    let new_ip: Ipv4Addr = moved["newClusterIps"][0].as_str().unwrap().parse().unwrap();
    assert!(
        in_cidr(new_ip, [10, 200, 0, 0], 24) && new_ip != Ipv4Addr::new(10, 200, 0, 10),
        "{plan}"
    );
    assert!(
        plan["manual"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["service"] == "default/kubernetes"),
        "{plan}"
    );
    assert!(
        !plan["moves"].to_string().contains(&format!("{ns}/user")),
        "already in the target: {plan}"
    );

    // A tiny range filled by hand: its available addresses reach 0, and a request for
    // a taken one is counted as an error of that range.
    let tiny = "e2e-tiny";
    let mut small = ServiceCIDR::default();
    small.metadata.name = Some(tiny.into());
    small.spec = Some(ServiceCIDRSpec {
        cidrs: Some(vec!["10.201.0.0/29".into()]),
    });
    cidrs.create(&PostParams::default(), &small).await.unwrap();
    wait_for(
        "the tiny range to be ready",
        Duration::from_secs(30),
        || async {
            ready_of(&env.client, tiny)
                .await
                .is_some_and(|(_, s)| s == "True")
        },
    )
    .await;
    for host in 1..=6 {
        let ip = format!("10.201.0.{host}");
        let start = Instant::now();
        while let Err(e) = create(
            &env.client,
            &ns,
            &service(&format!("tiny-{host}"), Some(&ip)),
        )
        .await
        {
            assert!(start.elapsed() < Duration::from_secs(30), "{ip}: {e}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let series =
        |m: &str| format!("kube_apiserver_clusterip_allocator_{m}{{cidr=\"10.201.0.0/29\"}}");
    wait_for(
        "the tiny range to be full",
        Duration::from_secs(20),
        || async {
            run.metric(&series("available_ips")) == Some(0.0)
                && run.metric(&series("allocated_ips")) == Some(6.0)
        },
    )
    .await;
    let errors = "kube_apiserver_clusterip_allocator_allocation_errors_total{cidr=\"10.201.0.0/29\",scope=\"static\"}";
    assert_eq!(run.metric(errors), None, "no error yet");
    let e = create(&env.client, &ns, &service("tiny-again", Some("10.201.0.3")))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("already allocated"), "{e}");
    assert_eq!(run.metric(errors), Some(1.0));
    for host in 1..=6 {
        Api::<Service>::namespaced(env.client.clone(), &ns)
            .delete(&format!("tiny-{host}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    cidrs.delete(tiny, &DeleteParams::default()).await.unwrap();

    // Deleted while the Service uses it: kept, Ready=False Terminating, and nothing
    // more is handed out from it.
    cidrs.delete(name, &DeleteParams::default()).await.unwrap();
    wait_for(
        "Ready=False Terminating",
        Duration::from_secs(30),
        || async {
            ready_of(&env.client, name).await
                == Some(("Terminating".to_owned(), "False".to_owned()))
        },
    )
    .await;
    let start = Instant::now();
    loop {
        // The webhook learns of the deletion from its watch: retry until it refuses.
        match create(&env.client, &ns, &service("late", Some("10.200.0.11"))).await {
            Err(e) => {
                assert!(e.to_string().contains("denied the request"), "{e}");
                break;
            }
            Ok(_) => {
                Api::<Service>::namespaced(env.client.clone(), &ns)
                    .delete("late", &DeleteParams::default())
                    .await
                    .unwrap();
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "a range being deleted still hands out addresses"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    // The Service goes: so does the range, after the ten-second grace.
    Api::<Service>::namespaced(env.client.clone(), &ns)
        .delete("user", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the ServiceCIDR to go", Duration::from_secs(40), || async {
        ready_of(&env.client, name).await.is_none()
    })
    .await;

    // The webhook's own metrics moved with what it answered: values assigned, hand-picked
    // addresses refused (by cause), claims created; the certificate's expiry is there.
    let reviews = |endpoint: &str, verdict: &str| {
        run.metric(&format!(
            "svcplane_webhook_reviews_total{{endpoint=\"{endpoint}\",operation=\"CREATE\",verdict=\"{verdict}\"}}"
        ))
        .unwrap_or(0.0)
    };
    assert!(
        reviews("mutate", "patched") >= 1.0,
        "the auto Service was patched"
    );
    assert!(
        reviews("mutate", "denied") >= 2.0,
        "out of range and taken addresses"
    );
    assert!(
        reviews("validate", "allowed") >= 8.0,
        "every admitted create"
    );
    assert!(
        run.metric("svcplane_webhook_claims_created_total")
            .unwrap_or(0.0)
            >= 8.0,
        "one claim per value handed out"
    );
    assert!(
        run.metric("svcplane_webhook_review_duration_seconds_count{endpoint=\"mutate\"}")
            .unwrap_or(0.0)
            >= 10.0
    );
    let expiry = run
        .metric("svcplane_webhook_certificate_not_after_seconds")
        .expect("the served certificate's expiry");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(expiry > now, "{expiry} is not in the future");
    envtest::delete_namespace(&env.client, &ns).await;
}

#[tokio::test]
async fn a_range_flag_that_disagrees_is_reported_and_the_objects_win() {
    let test = "e2e_service_cidrs::a_range_flag_that_disagrees_is_reported_and_the_objects_win";
    let Some(env) = env(test).await else {
        return;
    };
    let (run, base) = start_run(
        &env,
        "cidr-flag",
        &["--service-cluster-ip-range=10.100.0.0/16"],
    )
    .await;
    let ns = envtest::create_namespace(&env.client, "cidrs-flag-")
        .await
        .unwrap();
    register_webhooks(&env.client, &ns, &base, &env.certs.ca_pem)
        .await
        .unwrap();
    let (_, body) = run.admin_get("/readyz").unwrap();
    assert!(
        body.contains("10.100.0.0/16") && body.contains("10.96.0.0/16"),
        "/readyz names both the flag and the objects: {body}"
    );
    // The flag's range would give 10.100.x.y; the cluster's gives 10.96.x.y.
    for i in 0..4 {
        let s = create(&env.client, &ns, &service(&format!("s{i}"), None))
            .await
            .unwrap();
        assert!(in_cidr(ip_of(&s), [10, 96, 0, 0], 16), "{:?}", ip_of(&s));
    }
    envtest::delete_namespace(&env.client, &ns).await;
}

/// Ranges by namespace: a ServiceCIDR annotated `svcplane.io/namespace-selector:
/// team=a` serves only the namespaces labelled so, and they only it. A Service created
/// right after its labelled namespace (before the namespace watch can have delivered
/// it) gets its address from that range; an unlabelled namespace keeps the API
/// server's range; an address across the line is refused with a 422 naming the
/// policy, and `explain range` says whom the range serves.
#[tokio::test]
async fn a_servicecidr_selecting_namespaces_serves_them_only_and_only_it_serves_them() {
    let test = "e2e_service_cidrs::a_servicecidr_selecting_namespaces_serves_them_only_and_only_it_serves_them";
    let Some(env) = env(test).await else {
        return;
    };
    let (run, base) = start_run(&env, "cidr-ns", &[]).await;
    let name = "e2e-team-a";
    selecting_service_cidr(&env, &run, name, "10.205.0.0/24", "team=a").await;
    let cidrs = Api::<ServiceCIDR>::all(env.client.clone());
    let team = labelled_namespace(&env, "cidrs-team-a-", ("team", "a")).await;
    let other = envtest::create_namespace(&env.client, "cidrs-other-")
        .await
        .unwrap();
    for ns in [&team, &other] {
        register_webhooks(&env.client, ns, &base, &env.certs.ca_pem)
            .await
            .unwrap();
    }
    // The API server may take a moment to call a just-registered webhook: until then
    // it allocates in-tree from its own range, which the retry below tells apart.
    let start = Instant::now();
    let first = loop {
        let s = create(&env.client, &team, &service("first", None))
            .await
            .unwrap();
        if in_cidr(ip_of(&s), [10, 205, 0, 0], 24) {
            break s;
        }
        Api::<Service>::namespaced(env.client.clone(), &team)
            .delete("first", &DeleteParams::default())
            .await
            .unwrap();
        assert!(start.elapsed() < Duration::from_secs(30), "{:?}", ip_of(&s));
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!(
        "e2e_service_cidrs: the selected namespace's first Service got {:?}",
        ip_of(&first)
    );
    for i in 0..5 {
        let s = create(&env.client, &team, &service(&format!("t{i}"), None))
            .await
            .unwrap();
        assert!(in_cidr(ip_of(&s), [10, 205, 0, 0], 24), "{:?}", ip_of(&s));
        let s = create(&env.client, &other, &service(&format!("o{i}"), None))
            .await
            .unwrap();
        assert!(in_cidr(ip_of(&s), [10, 96, 0, 0], 16), "{:?}", ip_of(&s));
    }
    let e = create(&env.client, &team, &service("across", Some("10.96.77.77")))
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("422") || matches!(&e, kube::Error::Api(s) if s.code == 422),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "not in a ServiceCIDR serving namespace \"{team}\""
        )) && text.contains("10.205.0.0/24 (ServiceCIDR e2e-team-a)")
            && text.contains("svcplane.io/namespace-selector"),
        "{text}"
    );
    let e = create(&env.client, &other, &service("across", Some("10.205.0.77")))
        .await
        .unwrap_err();
    assert!(matches!(&e, kube::Error::Api(s) if s.code == 422), "{e}");
    let text = explain_range(&env);
    assert!(
        text.contains("10.205.0.0/24 (IPv4, ServiceCIDR e2e-team-a): 6 of 254 used\n    serves only namespaces matching \"team=a\" (e2e-team-a)"),
        "{text}"
    );
    envtest::delete_namespace(&env.client, &team).await;
    envtest::delete_namespace(&env.client, &other).await;
    let _ = cidrs.delete(name, &DeleteParams::default()).await;
}

/// What `svcplane explain range` prints about the cluster.
fn explain_range(env: &Env) -> String {
    let out = std::process::Command::new(&env.bin)
        .args(["explain", "range"])
        .arg(format!("--kubeconfig={}", env.cluster.kubeconfig.display()))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A namespace named from `prefix`, created with the label `key=value`; its name.
async fn labelled_namespace(env: &Env, prefix: &str, (key, value): (&str, &str)) -> String {
    let mut ns = k8s_openapi::api::core::v1::Namespace::default();
    ns.metadata.generate_name = Some(prefix.into());
    ns.metadata.labels = Some([(key.to_owned(), value.to_owned())].into());
    Api::<k8s_openapi::api::core::v1::Namespace>::all(env.client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap()
        .metadata
        .name
        .unwrap()
}

/// A ServiceCIDR `name` over `cidr` (comma-separated for two families) serving the
/// namespaces `selector` picks; returns
/// once it is Ready and the webhook of `run` uses it.
async fn selecting_service_cidr(
    env: &Env,
    run: &SvcplaneProcess,
    name: &str,
    cidr: &str,
    selector: &str,
) {
    let mut object = ServiceCIDR::default();
    object.metadata.name = Some(name.into());
    object.metadata.annotations = Some(
        [(
            "svcplane.io/namespace-selector".to_owned(),
            selector.to_owned(),
        )]
        .into(),
    );
    object.spec = Some(ServiceCIDRSpec {
        cidrs: Some(cidr.split(',').map(str::to_owned).collect()),
    });
    Api::<ServiceCIDR>::all(env.client.clone())
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let first = cidr.split(',').next().unwrap_or(cidr);
    let series = format!("kube_apiserver_clusterip_allocator_available_ips{{cidr=\"{first}\"}}");
    wait_for(
        "the range in the webhook",
        Duration::from_secs(30),
        || async {
            run.metric(&series).is_some()
                && ready_of(&env.client, name)
                    .await
                    .is_some_and(|(_, s)| s == "True")
        },
    )
    .await;
}

/// What must survive a move: everything but the ClusterIPs and the server's fields.
fn kept(svc: &Service) -> serde_json::Value {
    let mut annotations = svc.metadata.annotations.clone().unwrap_or_default();
    annotations.remove("svcplane.io/migrated-from");
    let mut spec = serde_json::to_value(svc.spec.clone().unwrap()).unwrap();
    spec["clusterIP"] = json!(null);
    spec["clusterIPs"] = json!(null);
    json!({"labels": svc.metadata.labels, "annotations": annotations, "spec": spec})
}

fn is_headless(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

/// Issue 33: `svcplane migrate --apply` moves 200 Services (ClusterIP, NodePort,
/// dual-stack, and headless, which need no move) from one ServiceCIDR to another on kube-apiserver,
/// with `svcplane run` writing the EndpointSlices. The first run is killed mid-way; the
/// same command again finishes from its journal. No Service is lost or changed but its
/// ClusterIPs, every moved one has its EndpointSlices again, and the old ServiceCIDR
/// goes once empty.
#[tokio::test]
async fn migrate_apply_moves_200_services_and_an_interrupted_run_resumes() {
    let test = "e2e_service_cidrs::migrate_apply_moves_200_services_and_an_interrupted_run_resumes";
    let Some(env) = env(test).await else {
        return;
    };
    let (run, base) = start_run_with(&env, "cidr-migrate", "servicecidr,endpointslice", &[]).await;
    selecting_service_cidr(
        &env,
        &run,
        "e2e-mig-old",
        "10.210.0.0/23,fd00:10:210::/112",
        "mig=yes",
    )
    .await;
    // One the move must leave alone, and report: the cluster DNS (kube-apiserver
    // allocates in kube-system, where the webhook is not registered), created before
    // automatic picks could take its address.
    let dns: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kube-dns", "labels": {"k8s-app": "kube-dns"}},
        "spec": {"clusterIP": "10.210.1.10", "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]},
    }))
    .unwrap();
    let dns = create(&env.client, "kube-system", &dns).await.unwrap();
    let ns = labelled_namespace(&env, "cidrs-migrate-", ("mig", "yes")).await;
    register_webhooks(&env.client, &ns, &base, &env.certs.ca_pem)
        .await
        .unwrap();
    svcplane_tests::objects::create_node(
        &env.client,
        &ns,
        &svcplane_controller::core::fixtures::node("node-a", Some("zone-a")),
    )
    .await
    .unwrap();
    let pods: Vec<k8s_openapi::api::core::v1::Pod> = (0..20)
        .map(|i| {
            svcplane_controller::core::fixtures::pod(&format!("p{i}"), &format!("p{i}"))
                .node("node-a")
                .ip(&format!("10.1.0.{}", i + 1))
                .ready()
                .build()
        })
        .collect();
    svcplane_tests::objects::create_pods(&env.client, &ns, &pods)
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(env.client.clone(), &ns);
    let make = |i: usize| -> Service {
        let mut spec = json!({"selector": {"app": format!("p{}", i % 20)},
                              "ports": [{"port": 80, "targetPort": 8080}]});
        if i % 20 == 19 {
            spec["clusterIP"] = json!("None");
        } else if i.is_multiple_of(5) {
            spec["type"] = json!("NodePort");
        }
        if i % 10 == 3 {
            spec["ipFamilyPolicy"] = json!("RequireDualStack");
        }
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("s{i:03}"), "labels": {"batch": "mig"},
                         "annotations": {"owner": format!("team-{}", i % 3)}},
            "spec": spec,
        }))
        .unwrap()
    };
    // The first create waits for the API server to call the just-registered webhook.
    let start = Instant::now();
    loop {
        let s = create(&env.client, &ns, &make(0)).await.unwrap();
        if in_cidr(ip_of(&s), [10, 210, 0, 0], 23) {
            break;
        }
        services
            .delete("s000", &DeleteParams::default())
            .await
            .unwrap();
        assert!(start.elapsed() < Duration::from_secs(30), "{:?}", ip_of(&s));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for i in 1..200 {
        let s = create(&env.client, &ns, &make(i)).await.unwrap();
        assert!(is_headless(&s) || in_cidr(ip_of(&s), [10, 210, 0, 0], 23));
    }
    // Another the move must leave alone and report: an address picked by hand in the
    // static band.
    let pinned: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "pinned"},
        "spec": {"clusterIP": "10.210.0.20", "selector": {"app": "p0"},
                 "ports": [{"port": 80, "targetPort": 8080}]},
    }))
    .unwrap();
    let pinned = create(&env.client, &ns, &pinned).await.unwrap();
    // And one without a selector whose Endpoints are kept by hand: its delete would
    // take them along.
    let legacy: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "legacy"},
        "spec": {"ports": [{"port": 5432}]},
    }))
    .unwrap();
    let legacy = create(&env.client, &ns, &legacy).await.unwrap();
    assert!(in_cidr(ip_of(&legacy), [10, 210, 0, 0], 23));
    let legacy_endpoints: k8s_openapi::api::core::v1::Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "legacy"},
        "subsets": [{"addresses": [{"ip": "192.168.7.10"}], "ports": [{"port": 5432}]}],
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Endpoints>::namespaced(env.client.clone(), &ns)
        .create(&PostParams::default(), &legacy_endpoints)
        .await
        .unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(env.client.clone(), &ns);
    wait_for(
        "200 Services' EndpointSlices",
        Duration::from_secs(60),
        || async {
            slices
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len()
                >= 200
        },
    )
    .await;
    selecting_service_cidr(
        &env,
        &run,
        "e2e-mig-new",
        "10.212.0.0/23,fd00:10:212::/112",
        "mig=yes",
    )
    .await;
    let by_name = || async {
        services
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|s| (s.metadata.name.clone().unwrap(), s))
            .collect::<std::collections::BTreeMap<String, Service>>()
    };
    let before = by_name().await;
    assert_eq!(before.len(), 202);

    let migrate = |extra: &[&str]| {
        let mut c = std::process::Command::new(&env.bin);
        c.args([
            "migrate",
            "--from",
            "e2e-mig-old",
            "--to",
            "e2e-mig-new",
            "--apply",
            "--max-in-flight=4",
        ])
        .args(extra)
        .arg(format!("--kubeconfig={}", env.cluster.kubeconfig.display()))
        .env_remove("RUST_LOG");
        c
    };
    // The first run, killed once a third of the Services moved.
    let mut first = migrate(&[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let moved = || async {
        services
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|s| !is_headless(s) && in_cidr(ip_of(s), [10, 212, 0, 0], 23))
            .count()
    };
    let started = Instant::now();
    while moved().await < 60 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the first run stalled"
        );
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first run ended early"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().unwrap();
    let _ = first.wait();
    let at_kill = moved().await;
    // As if a run had died between a delete and its create: one Service not moved yet
    // exists only in the journal.
    // A second one was journalled with an address another Service took since: it is
    // created with automatic addresses instead.
    let listed = services.list(&ListParams::default()).await.unwrap().items;
    let mut waiting = listed.iter().filter(|s| {
        !is_headless(s)
            && in_cidr(ip_of(s), [10, 210, 0, 0], 23)
            && !matches!(s.metadata.name.as_deref(), Some("pinned" | "legacy"))
    });
    let victim = waiting.next().unwrap().clone();
    let blocked = waiting.next().unwrap().clone();
    let taken = listed
        .iter()
        .find(|s| !is_headless(s) && in_cidr(ip_of(s), [10, 212, 0, 0], 23))
        .map(|s| ip_of(s).to_string())
        .unwrap();
    let victim_name = victim.metadata.name.clone().unwrap();
    let blocked_name = blocked.metadata.name.clone().unwrap();
    for (svc, ip) in [(&victim, "10.212.1.250"), (&blocked, taken.as_str())] {
        let name = svc.metadata.name.clone().unwrap();
        use svcplane_controller::migrate::recreate::{
            JournalEntry, journal_key, journal_name, recreated,
        };
        let entry = JournalEntry {
            old_uid: svc.metadata.uid.clone().unwrap(),
            service: recreated(svc, &[ip.to_owned()]),
        };
        let journal = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
            env.client.clone(),
            "kube-system",
        );
        let body = json!({"data": {
            journal_key(&ns, &name): serde_json::to_string(&entry).unwrap()
        }});
        journal
            .patch(
                &journal_name("e2e-mig-old", "e2e-mig-new"),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&body),
            )
            .await
            .unwrap();
        services
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
    }
    // Meanwhile `explain range` shows the move, and the Services only its journal holds.
    let text = explain_range(&env);
    let line = text
        .lines()
        .find(|l| l.contains("svcplane migrate is moving its Services to ServiceCIDR e2e-mig-new (journal kube-system/svcplane-migrate-e2e-mig-old-to-e2e-mig-new)"))
        .unwrap_or_else(|| panic!("{text}"));
    for name in [&victim_name, &blocked_name] {
        assert!(line.contains(&format!("{ns}/{name}")), "{line}");
    }
    // The same command again finishes the job.
    let out = migrate(&["-o", "json"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let total = started.elapsed();
    let moved_again = report["moved"].as_array().unwrap();
    assert!(
        at_kill + moved_again.len() >= 190,
        "{at_kill} + {}",
        moved_again.len()
    );
    let resumed: Vec<&serde_json::Value> = moved_again
        .iter()
        .filter(|m| m["resumed"] == json!(true))
        .collect();
    assert!(
        resumed
            .iter()
            .any(|m| m["service"] == json!(format!("{ns}/{victim_name}"))
                && m["newClusterIps"][0] == json!("10.212.1.250")),
        "the journalled Service was created from the journal: {resumed:?}"
    );
    let fell_back = resumed
        .iter()
        .find(|m| m["service"] == json!(format!("{ns}/{blocked_name}")))
        .expect("the blocked Service was finished");
    assert_ne!(
        fell_back["newClusterIps"][0],
        json!(taken),
        "created with an automatic address instead of the taken {taken}"
    );
    let mut gaps: Vec<u64> = moved_again
        .iter()
        .map(|m| m["gapMs"].as_u64().unwrap())
        .collect();
    let mut back: Vec<u64> = moved_again
        .iter()
        .filter_map(|m| m["slicesMs"].as_u64())
        .collect();
    gaps.sort_unstable();
    back.sort_unstable();
    assert!(report["slowSlices"].is_null(), "{report}");

    let after = by_name().await;
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "no Service lost"
    );
    // The hand-picked and the DNS Service are reported, with what to do, and untouched.
    let manual = report["manual"].as_array().unwrap();
    for (service, why) in [
        (format!("{ns}/pinned"), "static band"),
        (format!("{ns}/legacy"), "Endpoints object is kept by hand"),
        ("kube-system/kube-dns".to_owned(), "clusterDNS"),
    ] {
        assert!(
            manual
                .iter()
                .any(|m| m["service"] == json!(service)
                    && m["reason"].as_str().unwrap().contains(why)),
            "{service} reported ({why}): {manual:?}"
        );
    }
    let dns_now = Api::<Service>::namespaced(env.client.clone(), "kube-system")
        .get("kube-dns")
        .await
        .unwrap();
    assert_eq!(
        dns_now.metadata.uid, dns.metadata.uid,
        "the DNS Service was not touched"
    );
    assert_eq!(ip_of(&dns_now), ip_of(&dns));
    assert_eq!(
        after["pinned"].metadata.uid, pinned.metadata.uid,
        "pinned not touched"
    );
    assert_eq!(ip_of(&after["pinned"]).to_string(), "10.210.0.20");
    assert_eq!(
        after["legacy"].metadata.uid, legacy.metadata.uid,
        "legacy not touched"
    );
    assert!(
        report["oldRange"].as_str().unwrap().contains("terminating"),
        "{report}"
    );
    // Each moved Service has its Migrated Event, naming its old and new addresses.
    let migrated: Vec<k8s_openapi::api::events::v1::Event> =
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(env.client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("Migrated"))
            .collect();
    assert!(migrated.len() >= 190, "{} Migrated events", migrated.len());
    assert!(
        migrated
            .iter()
            .all(|e| e.note.as_deref().is_some_and(
                |n| n.contains("svcplane migrate --from e2e-mig-old --to e2e-mig-new")
            )),
        "{:?}",
        migrated.first()
    );
    // svcplane's EndpointSlice controller took every recreated Service first.
    let first = run
        .metric("svcplane_migrated_services_first_total{name=\"endpoint_slice\"}")
        .unwrap_or(0.0);
    assert!(first >= 190.0, "migrated Services queued first: {first}");
    let mut dual = 0;
    for (name, old) in &before {
        let new = &after[name];
        assert_eq!(kept(new), kept(old), "{name} changed beyond its ClusterIPs");
        if name == "pinned" || name == "legacy" {
            continue;
        }
        if is_headless(old) {
            assert_eq!(
                new.metadata.uid, old.metadata.uid,
                "{name}: headless, not moved"
            );
        } else {
            assert!(
                in_cidr(ip_of(new), [10, 212, 0, 0], 23),
                "{name}: {:?}",
                ip_of(new)
            );
            let ips = |s: &Service| s.spec.as_ref().unwrap().cluster_ips.clone().unwrap();
            if let Some(v6) = ips(new).get(1) {
                dual += 1;
                assert!(v6.starts_with("fd00:10:212::"), "{name}: {v6}");
            }
            assert_eq!(
                new.metadata.annotations.as_ref().unwrap()["svcplane.io/migrated-from"],
                ips(old).join(",")
            );
        }
    }
    assert_eq!(dual, 20, "the dual-stack Services moved both addresses");
    // Every moved Service has EndpointSlices of its new object.
    wait_for(
        "every moved Service's EndpointSlices",
        Duration::from_secs(30),
        || async {
            let owners: std::collections::HashSet<String> = slices
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .flat_map(|s| s.metadata.owner_references.clone().unwrap_or_default())
                .map(|o| o.uid)
                .collect();
            after
                .values()
                .filter(|s| s.metadata.name.as_deref() != Some("legacy"))
                .all(|s| owners.contains(s.metadata.uid.as_deref().unwrap()))
        },
    )
    .await;
    // Still used by the three left to the operator, the old range stays, handing out
    // nothing. The operator does what the report says: pinned gets an address of the
    // new range picked by hand; the DNS Service (no kubelets here to reconfigure) and
    // legacy go.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(ready_of(&env.client, "e2e-mig-old").await.is_some());
    services
        .delete("pinned", &DeleteParams::default())
        .await
        .unwrap();
    let mut repinned = pinned.clone();
    repinned.metadata = kube::api::ObjectMeta {
        name: Some("pinned".into()),
        ..Default::default()
    };
    if let Some(spec) = repinned.spec.as_mut() {
        spec.cluster_ip = Some("10.212.0.20".into());
        spec.cluster_ips = Some(vec!["10.212.0.20".into()]);
    }
    create(&env.client, &ns, &repinned).await.unwrap();
    Api::<Service>::namespaced(env.client.clone(), "kube-system")
        .delete("kube-dns", &DeleteParams::default())
        .await
        .unwrap();
    services
        .delete("legacy", &DeleteParams::default())
        .await
        .unwrap();
    // The old range goes once empty; the journal is gone.
    wait_for(
        "the old ServiceCIDR to go",
        Duration::from_secs(30),
        || async { ready_of(&env.client, "e2e-mig-old").await.is_none() },
    )
    .await;
    let journal =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(env.client.clone(), "kube-system")
            .get_opt("svcplane-migrate-e2e-mig-old-to-e2e-mig-new")
            .await
            .unwrap();
    assert!(journal.is_none(), "the journal is removed at the end");
    let pct = |v: &[u64], p: usize| v.get(v.len() * p / 100).copied().unwrap_or(0);
    eprintln!(
        "e2e_service_cidrs migrate: 190 Services moved (4 at a time) in {total:?}, {at_kill} before the kill, \
         {} finished from the journal; \
         without a Service between delete and create: median {} ms, p99 {} ms, max {} ms; \
         EndpointSlices back after the delete: median {} ms, p99 {} ms, max {} ms",
        resumed.len(),
        pct(&gaps, 50),
        pct(&gaps, 99),
        gaps.last().unwrap_or(&0),
        pct(&back, 50),
        pct(&back, 99),
        back.last().unwrap_or(&0),
    );
    envtest::delete_namespace(&env.client, &ns).await;
    let _ = Api::<ServiceCIDR>::all(env.client.clone())
        .delete("e2e-mig-new", &DeleteParams::default())
        .await;
}
