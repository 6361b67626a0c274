//! Two webhook replicas sharing one API server (the in-process fake): claims make
//! every hand-out unique, dry runs leave nothing behind, a deleted Service's values are
//! reusable at once on either replica, and the spawned repair loop (as shipped, paced by
//! the watches' own sync signals) deletes the claims of deleted Services and of Services
//! that never appeared. The same behaviours are proven on a real API server with the
//! shipped binary in `e2e_claims.rs`.

// Test helpers outside #[test] functions: a failed fixture should panic loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use futures::future::join_all;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use svcplane_allocator::AllocatorConfig;
use svcplane_tests::fake_api::FakeApi;
use svcplane_webhook::claim::AllocationClaim;
use svcplane_webhook::claim::repair::{ReleaseReason, UnusedClaims};
use svcplane_webhook::handler::{AdmissionHandler, Endpoint};
use svcplane_webhook::metrics::WebhookMetrics;
use svcplane_webhook::shell::repair::{RepairConfig, repair_once};
use svcplane_webhook::shell::{KubeClaims, Started, Webhook, WebhookOptions, start};
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "apps";

fn fake_api() -> FakeApi {
    let api = FakeApi::new();
    api.register(
        "svcplane.io",
        "v1alpha1",
        "allocationclaims",
        "AllocationClaim",
        false,
        false,
    );
    api
}

/// A state that knows no Service and no claim.
struct NothingKnown;

impl svcplane_webhook::claim::repair::ClaimStatus for NothingKnown {
    fn released(&self, _: &svcplane_webhook::claim::repair::ClaimRecord) -> bool {
        false
    }
    fn retained(&self, _: &svcplane_webhook::claim::repair::ClaimRecord) -> bool {
        false
    }
    fn held_by_service(&self, _: svcplane_allocator::Claim) -> bool {
        false
    }
}

/// The repair loop of tests that run passes by hand: it never ticks on its own.
const BY_HAND: RepairConfig = RepairConfig {
    interval: Duration::from_secs(3600),
    grace: Duration::from_secs(60),
};

fn options(ranges: &str, ports: &str, seed: u64, repair: RepairConfig) -> WebhookOptions {
    WebhookOptions {
        allocator: AllocatorConfig::from_flags(ranges, ports).unwrap(),
        seed,
        repair,
        retain_released_values: Duration::ZERO,
        metrics: WebhookMetrics::default(),
        services: Default::default(),
        explicit_ranges: None,
        follow_service_cidrs: false,
        identity: format!("replica-{seed}"),
    }
}

async fn replica(
    api: &FakeApi,
    ranges: &str,
    ports: &str,
    seed: u64,
    cancel: &CancellationToken,
) -> Started {
    replica_with(api, options(ranges, ports, seed, BY_HAND), cancel).await
}

async fn replica_with(
    api: &FakeApi,
    options: WebhookOptions,
    cancel: &CancellationToken,
) -> Started {
    let started = start(api.client(), options, cancel.clone()).await.unwrap();
    for _ in 0..500 {
        if started.webhook.is_ready() {
            return started;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("replica never became ready");
}

fn service(name: &str, node_port: bool) -> Value {
    let mut spec = json!({
        "type": if node_port { "NodePort" } else { "ClusterIP" },
        "selector": {"app": name},
        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
        "sessionAffinity": "None",
        "internalTrafficPolicy": "Cluster",
    });
    if node_port {
        spec["externalTrafficPolicy"] = json!("Cluster");
    }
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    })
}

fn review(uid: &str, object: &Value, dry_run: bool) -> Bytes {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    Bytes::from(
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "Service"},
                "resource": {"group": "", "version": "v1", "resource": "services"},
                "requestKind": {"group": "", "version": "v1", "kind": "Service"},
                "requestResource": {"group": "", "version": "v1", "resource": "services"},
                "name": name,
                "namespace": NAMESPACE,
                "operation": "CREATE",
                "userInfo": {"username": "test"},
                "object": object,
                "dryRun": dry_run,
            }
        }))
        .unwrap(),
    )
}

/// Post a CREATE review to the mutating endpoint; the patched object on success.
async fn mutate(
    webhook: &Webhook<KubeClaims>,
    uid: &str,
    object: &Value,
    dry_run: bool,
) -> Result<Value, Value> {
    let answer = webhook
        .handle(Endpoint::Mutate, review(uid, object, dry_run))
        .await;
    assert_eq!(answer.status, 200);
    let body: Value = serde_json::from_slice(&answer.body).unwrap();
    let response = &body["response"];
    assert_eq!(response["uid"], uid);
    if response["allowed"] != true {
        return Err(response["status"].clone());
    }
    let mut patched = object.clone();
    if let Some(p) = response["patch"].as_str() {
        assert_eq!(response["patchType"], "JSONPatch");
        let ops: json_patch::Patch =
            serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(p).unwrap())
                .unwrap();
        json_patch::patch(&mut patched, &ops).unwrap();
    }
    Ok(patched)
}

fn values_of(svc: &Service) -> (Vec<IpAddr>, Vec<i32>) {
    let spec = svc.spec.clone().unwrap_or_default();
    let ips = spec
        .cluster_ips
        .unwrap_or_default()
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    let ports = spec
        .ports
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.node_port)
        .collect();
    (ips, ports)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_hand_out_1000_concurrent_creates_without_a_duplicate() {
    let api = fake_api();
    let cancel = CancellationToken::new();
    // A /22 holds 1022 addresses: 1000 creates leave both replicas racing for the
    // last free ones, the case claims exist for.
    let (ranges, ports) = ("10.0.0.0/22", "30000-30699");
    let a = replica(&api, ranges, ports, 1, &cancel).await;
    let b = replica(&api, ranges, ports, 2, &cancel).await;
    let services: Api<Service> = Api::namespaced(api.client(), NAMESPACE);
    let creates = (0..1000).map(|i| {
        let webhook = if i % 2 == 0 {
            a.webhook.clone()
        } else {
            b.webhook.clone()
        };
        let services = services.clone();
        async move {
            let object = service(&format!("svc-{i}"), i % 3 == 0);
            let patched = mutate(&webhook, &format!("uid-{i}"), &object, false)
                .await
                .unwrap_or_else(|status| panic!("svc-{i} denied: {status}"));
            // What the API server does next: store the patched object.
            let svc: Service = serde_json::from_value(patched).unwrap();
            services.create(&PostParams::default(), &svc).await.unwrap();
        }
    });
    join_all(creates).await;

    let stored = services.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(stored.len(), 1000);
    let (mut ips, mut node_ports) = (HashSet::new(), HashSet::new());
    for svc in &stored {
        let (svc_ips, svc_ports) = values_of(svc);
        assert_eq!(svc_ips.len(), 1, "{:?}", svc.metadata.name);
        for ip in svc_ips {
            assert!(ips.insert(ip), "duplicate ClusterIP {ip}");
        }
        for p in svc_ports {
            assert!(node_ports.insert(p), "duplicate nodePort {p}");
        }
    }
    assert_eq!(node_ports.len(), 334);
    // Every value handed out is claimed exactly once.
    let claims: Api<AllocationClaim> = Api::all(api.client());
    let claimed = claims.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(claimed.len(), ips.len() + node_ports.len());
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_gets_a_real_free_value_and_leaves_no_claim() {
    let api = fake_api();
    let cancel = CancellationToken::new();
    let a = replica(&api, "10.0.0.0/24", "30000-30099", 1, &cancel).await;
    let object = service("web", true);
    let patched = mutate(&a.webhook, "uid-dry", &object, true).await.unwrap();
    let ip: IpAddr = patched["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(
        ip,
        "10.0.0.0".parse::<IpAddr>().unwrap(),
        "not the dry-run placeholder"
    );
    let port = patched["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=30099).contains(&port));
    let claims: Api<AllocationClaim> = Api::all(api.client());
    assert!(
        claims
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // Nothing stays reserved in the replica either: a real create may get the same IP.
    let st = a.webhook.state().lock().unwrap();
    assert!(!st.allocators().has(svcplane_allocator::Claim::Ip(ip)));
    drop(st);
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repair_loop_releases_claims_of_services_that_never_appeared() {
    let api = fake_api();
    let cancel = CancellationToken::new();
    let a = replica(&api, "10.0.0.0/24", "30000-30099", 1, &cancel).await;
    let services: Api<Service> = Api::namespaced(api.client(), NAMESPACE);
    // "kept" is stored; "ghost" is admitted but never stored (denied later).
    let kept = mutate(&a.webhook, "uid-kept", &service("kept", false), false)
        .await
        .unwrap();
    let kept: Service = serde_json::from_value(kept).unwrap();
    services
        .create(&PostParams::default(), &kept)
        .await
        .unwrap();
    let ghost = mutate(&a.webhook, "uid-ghost", &service("ghost", true), false)
        .await
        .unwrap();
    let claims: Api<AllocationClaim> = Api::all(api.client());
    let all = claims.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(all.len(), 3, "kept: 1 IP; ghost: 1 IP + 1 nodePort");
    // Let the Service watch catch up with the stored Service.
    for _ in 0..200 {
        let (ips, _) = values_of(&kept);
        let held = svcplane_webhook::shell::repair::held_by_service(
            &a.webhook.state().lock().unwrap(),
            svcplane_allocator::Claim::Ip(ips[0]),
        );
        if held {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let state = a.webhook.state().clone();
    let mut unused = UnusedClaims::default();
    let t0 = Instant::now();
    let grace = Duration::from_secs(60);
    // The first pass only notes the ghost's claims as unused; inside the grace period
    // nothing is released.
    for after in [0, 30] {
        let n = repair_once(
            &api.client(),
            &state,
            &mut unused,
            grace,
            t0 + Duration::from_secs(after),
        )
        .await
        .unwrap();
        assert_eq!(n.released, [], "{after} s");
    }
    let n = repair_once(
        &api.client(),
        &state,
        &mut unused,
        grace,
        t0 + Duration::from_secs(61),
    )
    .await
    .unwrap();
    assert_eq!(n.released.len(), 2, "the ghost's IP and nodePort");
    assert!(
        n.released
            .iter()
            .all(|(_, why)| *why == ReleaseReason::Unused),
        "{:?}",
        n.released
    );
    let left = claims.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].spec.service.name, "kept");
    // The released values are free again in the replica.
    let ghost_ip: IpAddr = ghost["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        !state
            .lock()
            .unwrap()
            .allocators()
            .has(svcplane_allocator::Claim::Ip(ghost_ip))
    );
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_created_service_refreshes_the_claim_its_predecessor_left() {
    let api = fake_api();
    let cancel = CancellationToken::new();
    let a = replica(&api, "10.0.0.0/24", "30000-30099", 1, &cancel).await;
    let services: Api<Service> = Api::namespaced(api.client(), NAMESPACE);
    let claims: Api<AllocationClaim> = Api::all(api.client());
    let mut object = service("web", true);
    object["spec"]["ports"][0]["nodePort"] = json!(30050);
    let first = mutate(&a.webhook, "uid-1", &object, false).await.unwrap();
    let stored: Service = serde_json::from_value(first).unwrap();
    services
        .create(&PostParams::default(), &stored)
        .await
        .unwrap();
    let old = claims.get("nodeport-30050").await.unwrap();
    assert_eq!(old.spec.request_uid, "uid-1");
    // Deleted, then applied again before any repair pass.
    services
        .delete("web", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    mutate(&a.webhook, "uid-2", &object, false).await.unwrap();
    let new = claims.get("nodeport-30050").await.unwrap();
    assert_eq!(new.spec.request_uid, "uid-2", "the claim was refreshed");
    assert_ne!(new.metadata.uid, old.metadata.uid);
    // The old claim was seen unused once the Service was gone; the refreshed one is a
    // new object, so a pass a grace period later does not release it under the new
    // Service.
    let state = a.webhook.state().clone();
    let mut unused = UnusedClaims::default();
    let t0 = Instant::now();
    let mut records = vec![svcplane_webhook::claim::repair::ClaimRecord::of(&old)];
    records[0].value = Some(svcplane_allocator::Claim::NodePort(30050));
    assert!(
        unused
            .claims_to_release(
                &records,
                &NothingKnown,
                t0,
                Duration::from_secs(60),
                jiff::Timestamp::now()
            )
            .is_empty()
    );
    let n = repair_once(
        &api.client(),
        &state,
        &mut unused,
        Duration::from_secs(60),
        t0 + Duration::from_secs(61),
    )
    .await
    .unwrap();
    // The deleted Service's ClusterIP claim may already be released (if the replica saw
    // the Service before its delete); the refreshed nodePort claim is never touched.
    assert!(
        n.released.iter().all(|(name, _)| name != "nodeport-30050"),
        "{:?}",
        n.released
    );
    assert!(claims.get_opt("nodeport-30050").await.unwrap().is_some());
    cancel.cancel();
}

/// Polls `check` every 20 ms for up to `limit`; whether it came true.
async fn within(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if check() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Names of the stored claims, sorted.
async fn claim_names(api: &FakeApi) -> Vec<String> {
    let claims: Api<AllocationClaim> = Api::all(api.client());
    let mut names: Vec<String> = claims
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    names.sort();
    names
}

/// A replica whose spawned repair loop ticks every 100 ms and keeps claims of Services
/// it never saw for a minute: within a test, only the delete-driven release can act.
fn fast_repair(ranges: &str, ports: &str, seed: u64) -> WebhookOptions {
    options(
        ranges,
        ports,
        seed,
        RepairConfig {
            interval: Duration::from_millis(100),
            grace: Duration::from_secs(60),
        },
    )
}

/// Mutate through `webhook`, then store what the API server would store.
async fn admit_and_store(
    api: &FakeApi,
    webhook: &Webhook<KubeClaims>,
    uid: &str,
    object: &Value,
) -> Service {
    let patched = mutate(webhook, uid, object, false)
        .await
        .unwrap_or_else(|status| panic!("{uid} denied: {status}"));
    let svc: Service = serde_json::from_value(patched).unwrap();
    Api::<Service>::namespaced(api.client(), NAMESPACE)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap()
}

/// Does the replica's state have `svc`'s ClusterIP held by a Service?
fn sees(replica: &Started, svc: &Service) -> bool {
    let (ips, _) = values_of(svc);
    svcplane_webhook::shell::repair::held_by_service(
        &replica.webhook.state().lock().unwrap(),
        svcplane_allocator::Claim::Ip(ips[0]),
    )
}

/// The same ClusterIP and nodePort asked for by hand, under another name.
fn same_values(name: &str, of: &Service) -> Value {
    let (ips, ports) = values_of(of);
    let mut object = service(name, true);
    object["spec"]["clusterIP"] = json!(ips[0].to_string());
    object["spec"]["clusterIPs"] = json!([ips[0].to_string()]);
    object["spec"]["ports"][0]["nodePort"] = json!(ports[0]);
    object
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_services_values_are_reusable_at_once_on_either_replica() {
    let api = fake_api();
    let cancel = CancellationToken::new();
    let (ranges, ports) = ("10.0.0.0/26", "30000-30039");
    let a = replica_with(&api, fast_repair(ranges, ports, 1), &cancel).await;
    let b = replica_with(&api, fast_repair(ranges, ports, 2), &cancel).await;
    let services: Api<Service> = Api::namespaced(api.client(), NAMESPACE);
    let first = admit_and_store(&api, &a.webhook, "uid-1", &service("first", true)).await;
    assert!(
        within(Duration::from_secs(5), || sees(&a, &first)
            && sees(&b, &first))
        .await
    );
    services
        .delete("first", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    assert!(
        within(Duration::from_secs(5), || !sees(&a, &first)
            && !sees(&b, &first))
        .await
    );
    // The follower (b) took no part in the first create: it re-uses the values at once,
    // taking the dead claims over, with no grace period.
    let again = same_values("second", &first);
    let second = admit_and_store(&api, &b.webhook, "uid-2", &again).await;
    assert_eq!(values_of(&second), values_of(&first));
    let claims: Api<AllocationClaim> = Api::all(api.client());
    for c in claims.list(&ListParams::default()).await.unwrap().items {
        assert_eq!(c.spec.service.name, "second", "{:?}", c.metadata.name);
        assert_eq!(c.spec.request_uid, "uid-2");
    }
    assert_eq!(claim_names(&api).await.len(), 2);
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spawned_repair_loop_deletes_the_claims_of_deleted_services() {
    let api = fake_api();
    let cancel = CancellationToken::new();
    let (ranges, ports) = ("10.0.0.0/26", "30000-30039");
    let metrics = WebhookMetrics::default();
    let mut opts = fast_repair(ranges, ports, 1);
    opts.metrics = metrics.clone();
    let a = replica_with(&api, opts, &cancel).await;
    let services: Api<Service> = Api::namespaced(api.client(), NAMESPACE);
    let kept = admit_and_store(&api, &a.webhook, "uid-kept", &service("kept", true)).await;
    let gone = admit_and_store(&api, &a.webhook, "uid-gone", &service("gone", true)).await;
    assert!(
        within(Duration::from_secs(5), || sees(&a, &kept)
            && sees(&a, &gone))
        .await
    );
    assert_eq!(claim_names(&api).await.len(), 4);
    services
        .delete("gone", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    // Nobody asks for the values again: the loop as spawned by `start` deletes the two
    // claims well inside the one-minute grace period.
    let mut left = Vec::new();
    for _ in 0..100 {
        left = claim_names(&api).await;
        if left.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (ips, ports) = values_of(&kept);
    let mut want = vec![format!("ip-{}", ips[0]), format!("nodeport-{}", ports[0])];
    want.sort();
    assert_eq!(left, want, "only the live Service's claims are left");
    assert!(metrics.repair_passes.get() > 0, "the loop ran");
    assert_eq!(
        metrics
            .claims_released
            .get_or_create(&svcplane_webhook::metrics::ReleaseLabels {
                reason: "service_gone"
            })
            .get(),
        2
    );
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_pauses_while_the_service_watch_fails_and_resumes_after_a_relist() {
    use svcplane_tests::fake_api::{Fault, Verb};
    let api = fake_api();
    let cancel = CancellationToken::new();
    let metrics = WebhookMetrics::default();
    let mut opts = fast_repair("10.0.0.0/26", "30000-30039", 1);
    opts.metrics = metrics.clone();
    let a = replica_with(&api, opts, &cancel).await;
    let services: Api<Service> = Api::namespaced(api.client(), NAMESPACE);
    let svc = admit_and_store(&api, &a.webhook, "uid-1", &service("web", true)).await;
    assert!(within(Duration::from_secs(5), || sees(&a, &svc)).await);
    assert!(a.readiness().repair_safe());
    // The Service watch breaks and cannot come back; meanwhile the Service is deleted.
    let fault = api.inject(Fault::status(500).verb(Verb::Watch).resource("services"));
    let list_fault = api.inject(Fault::status(500).verb(Verb::List).resource("services"));
    api.close_watches();
    assert!(within(Duration::from_secs(5), || !a.readiness().repair_safe()).await);
    services
        .delete("web", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let passes = metrics.repair_passes.get();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        metrics.repair_passes.get(),
        passes,
        "no pass while out of sync"
    );
    assert_eq!(claim_names(&api).await.len(), 2, "nothing released blind");
    assert!(
        a.webhook.is_ready(),
        "the webhook keeps answering meanwhile"
    );
    // The API server recovers: the watch lists again, sees the delete, and the loop
    // resumes and deletes the dead claims.
    api.remove_fault(fault);
    api.remove_fault(list_fault);
    assert!(within(Duration::from_secs(10), || a.readiness().repair_safe()).await);
    let mut left = claim_names(&api).await;
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = claim_names(&api).await;
    }
    assert_eq!(left, Vec::<String>::new());
    assert!(metrics.repair_passes.get() > passes);
    cancel.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_allocation_takes_a_value_whose_service_was_deleted_when_nothing_else_is_free() {
    let api = fake_api();
    let cancel = CancellationToken::new();
    // Two nodePorts in all, and the repair loop never runs: the only way to a free
    // port is the deleted Service's, whose claim is still stored.
    let a = replica(&api, "10.0.0.0/28", "30000-30001", 1, &cancel).await;
    let services: Api<Service> = Api::namespaced(api.client(), NAMESPACE);
    let one = admit_and_store(&api, &a.webhook, "uid-1", &service("one", true)).await;
    let two = admit_and_store(&api, &a.webhook, "uid-2", &service("two", true)).await;
    assert!(within(Duration::from_secs(5), || sees(&a, &one) && sees(&a, &two)).await);
    let denied = mutate(&a.webhook, "uid-3", &service("three", true), false).await;
    assert!(denied.is_err(), "the port range is full");
    services
        .delete("one", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    assert!(within(Duration::from_secs(5), || !sees(&a, &one)).await);
    assert_eq!(claim_names(&api).await.len(), 4, "no repair pass ran");
    let three = admit_and_store(&api, &a.webhook, "uid-4", &service("three", true)).await;
    assert_eq!(values_of(&three).1, values_of(&one).1, "the freed nodePort");
    let claims: Api<AllocationClaim> = Api::all(api.client());
    let port_claim = claims
        .get(&format!("nodeport-{}", values_of(&one).1[0]))
        .await
        .unwrap();
    assert_eq!(port_claim.spec.service.name, "three");
    cancel.cancel();
}
