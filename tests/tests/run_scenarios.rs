//! `svcplane run`'s machinery (watches, caches, queues, workers, writes, leader
//! election) end to end against the in-process fake API server, on a paused clock.
//!
//! Every scenario ends with `assert_converged`: a re-plan of the stored objects by the
//! pure reconcilers writes nothing, and no endpoint is duplicated.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, PostParams};
use svcplane_controller::core::fixtures::{node, pod, svc};
use svcplane_controller::core::keys::LABEL_SERVICE_NAME;
use svcplane_controller::core::slice_endpoints::SliceEndpoints;
use svcplane_tests::fake_api::{FakeApi, Fault, Verb};
use svcplane_tests::run_env::{Instance, assert_converged_default, options, settle};

const LIMIT: Duration = Duration::from_secs(600);

fn slices_of(fake: &FakeApi, name: &str) -> Vec<EndpointSlice> {
    fake.objects_of::<EndpointSlice>()
        .unwrap()
        .into_iter()
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_SERVICE_NAME))
                .is_some_and(|n| n == name)
        })
        .collect()
}

fn endpoints_of(fake: &FakeApi, name: &str) -> Option<Endpoints> {
    fake.get_of::<Endpoints>(Some("default"), name).unwrap()
}

fn ready_addresses(e: &Endpoints) -> usize {
    e.subsets
        .iter()
        .flatten()
        .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
        .sum()
}

/// Slice and Endpoints writes (creates, updates, deletes) so far.
fn endpoint_writes(fake: &FakeApi) -> (u64, u64, u64, u64) {
    let s = fake.stats();
    (
        s.requests(Verb::Create, "endpointslices"),
        s.requests(Verb::Update, "endpointslices"),
        s.requests(Verb::Delete, "endpointslices"),
        s.requests(Verb::Create, "endpoints")
            + s.requests(Verb::Update, "endpoints")
            + s.requests(Verb::Delete, "endpoints"),
    )
}

fn web_cluster(fake: &FakeApi, pods: usize) {
    fake.insert(node("node-a", Some("zone-a"))).unwrap();
    fake.insert(node("node-b", Some("zone-b"))).unwrap();
    fake.insert(svc("web").port("http", 80, 8080).build())
        .unwrap();
    for i in 0..pods {
        fake.insert(
            pod(&format!("web-{i}"), "web")
                .ip(&format!("10.0.{}.{}", i / 250, i % 250 + 1))
                .node(if i % 2 == 0 { "node-a" } else { "node-b" })
                .ready()
                .build(),
        )
        .unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn service_and_pods_become_slices_and_endpoints_with_the_floor_of_writes() {
    let fake = FakeApi::new();
    web_cluster(&fake, 150);
    let run = Instance::start(fake.client(), options());
    settle(&fake, &[&run], LIMIT).await;
    assert_converged_default(&fake);
    let slices = slices_of(&fake, "web");
    assert_eq!(slices.len(), 2, "150 endpoints at 100 per slice");
    assert_eq!(
        slices.iter().map(|s| s.endpoints().len()).sum::<usize>(),
        150
    );
    assert_eq!(ready_addresses(&endpoints_of(&fake, "web").unwrap()), 150);
    // The write floor: one create per slice and one for the Endpoints, nothing else.
    assert_eq!(endpoint_writes(&fake), (2, 0, 0, 1));
    run.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_readiness_flip_is_one_slice_update_and_one_endpoints_update() {
    let fake = FakeApi::new();
    web_cluster(&fake, 3);
    let run = Instance::start(fake.client(), options());
    settle(&fake, &[&run], LIMIT).await;
    let before = endpoint_writes(&fake);
    fake.insert(
        pod("web-1", "web")
            .ip("10.0.0.2")
            .node("node-b")
            .not_ready()
            .build(),
    )
    .unwrap();
    settle(&fake, &[&run], LIMIT).await;
    assert_converged_default(&fake);
    let after = endpoint_writes(&fake);
    assert_eq!(
        (
            after.0 - before.0,
            after.1 - before.1,
            after.2 - before.2,
            after.3 - before.3
        ),
        (0, 1, 0, 1)
    );
    let e = endpoints_of(&fake, "web").unwrap();
    assert_eq!(ready_addresses(&e), 2);
    let ep = slices_of(&fake, "web")[0]
        .endpoints()
        .iter()
        .find(|e| e.addresses == ["10.0.0.2"])
        .cloned()
        .unwrap();
    assert_eq!(ep.conditions.unwrap().ready, Some(false));
    run.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn terminating_pods_are_serving_terminating_endpoints() {
    let fake = FakeApi::new();
    web_cluster(&fake, 2);
    let run = Instance::start(fake.client(), options());
    settle(&fake, &[&run], LIMIT).await;
    // A finalizer keeps the terminating Pod stored, as a graceful delete would.
    let mut p = pod("web-0", "web")
        .ip("10.0.0.1")
        .node("node-a")
        .ready()
        .terminating()
        .build();
    p.metadata.finalizers = Some(vec!["test.svcplane.io/keep".into()]);
    fake.insert(p).unwrap();
    settle(&fake, &[&run], LIMIT).await;
    assert_converged_default(&fake);
    let slice = &slices_of(&fake, "web")[0];
    let c = slice
        .endpoints()
        .iter()
        .find(|e| e.addresses == ["10.0.0.1"])
        .and_then(|e| e.conditions.clone())
        .unwrap();
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(false), Some(true), Some(true))
    );
    // The Endpoints controller drops terminating Pods (no publishNotReadyAddresses).
    assert_eq!(ready_addresses(&endpoints_of(&fake, "web").unwrap()), 1);
    run.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_node_zone_change_moves_its_endpoints_zone() {
    let fake = FakeApi::new();
    web_cluster(&fake, 4);
    let run = Instance::start(fake.client(), options());
    settle(&fake, &[&run], LIMIT).await;
    let before = endpoint_writes(&fake);
    fake.insert(node("node-a", Some("zone-c"))).unwrap();
    settle(&fake, &[&run], LIMIT).await;
    assert_converged_default(&fake);
    let zones: Vec<Option<String>> = slices_of(&fake, "web")[0]
        .endpoints()
        .iter()
        .filter(|e| e.node_name.as_deref() == Some("node-a"))
        .map(|e| e.zone.clone())
        .collect();
    assert_eq!(
        zones,
        [Some("zone-c".to_owned()), Some("zone-c".to_owned())]
    );
    let after = endpoint_writes(&fake);
    assert_eq!(
        (after.1 - before.1, after.3 - before.3),
        (1, 0),
        "one slice update; Endpoints carry no zone"
    );
    run.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_service_deleted_and_recreated_gets_fresh_slices() {
    let fake = FakeApi::new();
    web_cluster(&fake, 3);
    let run = Instance::start(fake.client(), options());
    settle(&fake, &[&run], LIMIT).await;
    let old_uid = slices_of(&fake, "web")[0]
        .metadata
        .owner_references
        .clone()
        .unwrap()[0]
        .uid
        .clone();
    fake.delete("v1/services", Some("default"), "web").unwrap();
    fake.insert(
        svc("web")
            .uid("uid-svc-web-2")
            .port("http", 80, 8080)
            .build(),
    )
    .unwrap();
    settle(&fake, &[&run], LIMIT).await;
    assert_converged_default(&fake);
    let slices = slices_of(&fake, "web");
    assert_eq!(slices.len(), 1);
    let owner = &slices[0].metadata.owner_references.clone().unwrap()[0];
    assert_ne!(owner.uid, old_uid);
    assert_eq!(owner.uid, "uid-svc-web-2");
    run.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn injected_conflicts_and_server_errors_still_converge_exactly() {
    let fake = FakeApi::new();
    web_cluster(&fake, 40);
    for i in 0..5 {
        fake.insert(svc(&format!("svc-{i}")).port("http", 80, 8080).build())
            .unwrap();
        for j in 0..30 {
            fake.insert(
                pod(&format!("p-{i}-{j}"), &format!("svc-{i}"))
                    .ip(&format!("10.{}.{}.{}", i + 1, j / 200, j % 200 + 1))
                    .ready()
                    .build(),
            )
            .unwrap();
        }
    }
    for resource in ["endpointslices", "endpoints"] {
        for verb in [Verb::Create, Verb::Update, Verb::Delete] {
            fake.inject(
                Fault::status(409)
                    .verb(verb)
                    .resource(resource)
                    .probability(0.1),
            );
            fake.inject(
                Fault::status(500)
                    .verb(verb)
                    .resource(resource)
                    .probability(0.1),
            );
        }
    }
    let run = Instance::start(fake.client(), options());
    settle(&fake, &[&run], LIMIT).await;
    // Churn while faults keep firing.
    for j in 0..30 {
        let p = pod(&format!("p-0-{j}"), "svc-0").ip(&format!("10.1.0.{}", j + 1));
        let p = if j % 3 == 0 { p.not_ready() } else { p.ready() };
        fake.insert(p.build()).unwrap();
    }
    fake.delete("v1/pods", Some("default"), "p-1-0").unwrap();
    settle(&fake, &[&run], LIMIT).await;
    let s = fake.stats();
    assert!(
        s.get(Verb::Create, "endpointslices").errors > 0,
        "faults fired"
    );
    fake.clear_faults();
    // Errors leave keys in backoff; once settled, the state must be exact.
    settle(&fake, &[&run], LIMIT).await;
    assert_converged_default(&fake);
    run.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_restart_resyncs_with_zero_writes() {
    let fake = FakeApi::new();
    web_cluster(&fake, 250);
    fake.insert(svc("other").port("http", 80, 8080).build())
        .unwrap();
    let first = Instance::start(fake.client(), options());
    settle(&fake, &[&first], LIMIT).await;
    first.stop().await.unwrap();
    let before = endpoint_writes(&fake);
    let second = Instance::start(fake.client(), options());
    settle(&fake, &[&second], LIMIT).await;
    assert_eq!(
        endpoint_writes(&fake),
        before,
        "a restart must not rewrite anything"
    );
    assert_converged_default(&fake);
    second.stop().await.unwrap();
}

/// A re-list is diffed against the caches: a Pod and one of svcplane's own slices
/// deleted while every watch was failing become deletes once the watches list again,
/// so the slice loses the Pod and the missing slice is written again.
#[tokio::test(start_paused = true)]
async fn objects_deleted_while_the_watches_were_down_are_deleted_by_the_relist() {
    let fake = FakeApi::new();
    web_cluster(&fake, 3);
    fake.insert(svc("other").port("http", 80, 8080).build())
        .unwrap();
    fake.insert(
        pod("other-0", "other")
            .ip("10.1.0.1")
            .node("node-a")
            .ready()
            .build(),
    )
    .unwrap();
    let run = Instance::start(fake.client(), options());
    settle(&fake, &[&run], LIMIT).await;
    let other = slices_of(&fake, "other");
    assert_eq!(other.len(), 1);
    let down = [
        fake.inject(Fault::status(500).verb(Verb::Watch)),
        fake.inject(Fault::status(500).verb(Verb::List)),
    ];
    fake.close_watches();
    tokio::time::sleep(Duration::from_secs(2)).await;
    fake.delete("v1/pods", Some("default"), "web-1").unwrap();
    let lost = other[0].metadata.name.as_deref().unwrap();
    fake.delete("discovery.k8s.io/v1/endpointslices", Some("default"), lost)
        .unwrap();
    for id in down {
        fake.remove_fault(id);
    }
    fake.compact();
    // Past the longest re-list backoff (30 s).
    tokio::time::sleep(Duration::from_secs(35)).await;
    settle(&fake, &[&run], LIMIT).await;
    assert_converged_default(&fake);
    let web = slices_of(&fake, "web");
    assert_eq!(web[0].endpoints().len(), 2, "web-1 left the slice");
    assert_eq!(slices_of(&fake, "other").len(), 1, "the lost slice is back");
    run.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn invalid_selector_and_malformed_pod_ip_get_events_and_the_rest_works() {
    let fake = FakeApi::new();
    web_cluster(&fake, 2);
    fake.insert(svc("bad").selector("not a key", "x").build())
        .unwrap();
    fake.insert(pod("web-x", "web").ip("10.0.0.300").ready().build())
        .unwrap();
    let run = Instance::start(fake.client(), options());
    settle(&fake, &[&run], LIMIT).await;
    assert_eq!(
        slices_of(&fake, "web")[0].endpoints().len(),
        2,
        "the bad IP is left out"
    );
    assert!(
        slices_of(&fake, "bad").is_empty(),
        "nothing written for the invalid selector"
    );
    let events = fake.objects_of::<Event>().unwrap();
    let reasons: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e.reason.clone().unwrap_or_default(),
                e.regarding
                    .as_ref()
                    .and_then(|r| r.name.clone())
                    .unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        reasons.contains(&("InvalidSelector".into(), "bad".into())),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&("InvalidPodIP".into(), "web-x".into())),
        "{reasons:?}"
    );
    let note = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("InvalidSelector"))
        .and_then(|e| e.note.clone())
        .unwrap();
    assert!(note.contains("\"not a key\""), "{note}");
    run.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn selectorless_service_endpoints_are_mirrored() {
    let fake = FakeApi::new();
    fake.insert(svc("ext").no_selector().port("http", 80, 8080).build())
        .unwrap();
    fake.insert(
        svcplane_controller::core::fixtures::endpoints("ext")
            .subset(&["192.0.2.1", "192.0.2.2"], &[], &[("http", 8080)])
            .build(),
    )
    .unwrap();
    let run = Instance::start(fake.client(), options());
    settle(&fake, &[&run], LIMIT).await;
    assert_converged_default(&fake);
    let slices = slices_of(&fake, "ext");
    assert_eq!(slices.len(), 1);
    assert_eq!(slices[0].endpoints().len(), 2);
    // Deleting the Endpoints removes the mirrored slice.
    fake.delete("v1/endpoints", Some("default"), "ext").unwrap();
    settle(&fake, &[&run], LIMIT).await;
    assert!(slices_of(&fake, "ext").is_empty());
    run.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn writes_go_through_the_api_with_preconditions() {
    // A slice changed behind our back (someone else's write) makes our stale update
    // fail with 409; the retry re-reads and converges.
    let fake = FakeApi::new();
    web_cluster(&fake, 3);
    let run = Instance::start(fake.client(), options());
    settle(&fake, &[&run], LIMIT).await;
    let client = fake.client();
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let mut s = slices_of(&fake, "web").remove(0);
    s.endpoints_mut().truncate(1);
    api.replace(
        s.metadata.name.as_deref().unwrap(),
        &PostParams::default(),
        &s,
    )
    .await
    .unwrap();
    settle(&fake, &[&run], LIMIT).await;
    assert_converged_default(&fake);
    assert_eq!(slices_of(&fake, "web")[0].endpoints().len(), 3, "repaired");
    // And a Pod deleted through the API disappears from both objects.
    Api::<Pod>::namespaced(client.clone(), "default")
        .delete("web-0", &DeleteParams::default())
        .await
        .unwrap();
    settle(&fake, &[&run], LIMIT).await;
    assert_converged_default(&fake);
    assert_eq!(ready_addresses(&endpoints_of(&fake, "web").unwrap()), 2);
    let _ = Api::<Service>::namespaced(client, "default");
    run.stop().await.unwrap();
}

fn elected(identity: &str) -> svcplane_controller::run_cmd::RunOptions {
    let mut o = options();
    o.identity = identity.to_owned();
    o.controllers.identity = identity.to_owned();
    o.leader = Some(svcplane_controller::run_cmd::LeaderRun {
        namespace: "kube-system".into(),
        name: "svcplane".into(),
        params: svcplane_controller::leader::Params::default(),
    });
    o
}

async fn leaders(instances: &[&Instance]) -> usize {
    let mut n = 0;
    for i in instances {
        n += usize::from(i.is_leading().await);
    }
    n
}

#[tokio::test(start_paused = true)]
async fn two_instances_elect_exactly_one_leader_and_a_crash_hands_over_without_duplicate_writes() {
    let fake = FakeApi::new();
    web_cluster(&fake, 120);
    let a = Instance::start(fake.client(), elected("replica-a"));
    let b = Instance::start(fake.client(), elected("replica-b"));
    // Exactly one leader at every sampled moment.
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(leaders(&[&a, &b]).await <= 1, "two leaders at once");
    }
    settle(&fake, &[&a, &b], LIMIT).await;
    assert_eq!(leaders(&[&a, &b]).await, 1);
    assert_converged_default(&fake);
    let floor = endpoint_writes(&fake);
    assert_eq!(floor, (2, 0, 0, 1));

    // The leader crashes (no release). The follower takes over after the lease
    // duration (15 s) and finds nothing to write.
    let (leader, follower) = if a.is_leading().await { (a, b) } else { (b, a) };
    leader.task.abort();
    let crashed = tokio::time::Instant::now();
    while !follower.is_leading().await {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(crashed.elapsed() < Duration::from_secs(20), "no takeover");
    }
    let took = crashed.elapsed();
    assert!(
        took <= Duration::from_secs(15 + 2 * 2),
        "takeover after {took:?}"
    );
    settle(&fake, &[&follower], LIMIT).await;
    assert_eq!(
        endpoint_writes(&fake),
        floor,
        "the new leader repeated no write"
    );
    // And it keeps the objects current.
    fake.insert(pod("web-new", "web").ip("10.9.0.1").ready().build())
        .unwrap();
    settle(&fake, &[&follower], LIMIT).await;
    assert_converged_default(&fake);
    assert_eq!(ready_addresses(&endpoints_of(&fake, "web").unwrap()), 121);
    follower.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_stopped_leader_releases_its_lease_for_an_immediate_handover() {
    let fake = FakeApi::new();
    web_cluster(&fake, 3);
    let a = Instance::start(fake.client(), elected("replica-a"));
    settle(&fake, &[&a], LIMIT).await;
    let b = Instance::start(fake.client(), elected("replica-b"));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(a.is_leading().await && !b.is_leading().await);
    a.stop().await.unwrap();
    let stopped = tokio::time::Instant::now();
    while !b.is_leading().await {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            stopped.elapsed() < Duration::from_secs(5),
            "released Lease not taken at once"
        );
    }
    assert!(stopped.elapsed() <= Duration::from_secs(3));
    b.stop().await.unwrap();
}

/// Found in review: a leader whose renewals fail must stop its syncs at once, not let
/// them finish for the shutdown grace period: followers take over `lease_duration -
/// renew_deadline` (5 s) after the old leader's deadline, so its late writes would
/// land while the new leader writes. Here the old leader's slice create is slow to be
/// answered; it must never execute (one create, no clean-up delete).
#[tokio::test(start_paused = true)]
async fn a_leader_that_lost_its_lease_writes_nothing_once_another_leads() {
    let fake = FakeApi::new();
    web_cluster(&fake, 3);
    let a = Instance::start(fake.client(), elected("replica-a"));
    settle(&fake, &[&a], LIMIT).await;
    let b = Instance::start(fake.client(), elected("replica-b"));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(a.is_leading().await && !b.is_leading().await);
    let before = endpoint_writes(&fake);

    // The API server gets slow: A's next renewal hangs past its renew deadline, and
    // A's next slice create takes 25 s to be answered.
    fake.inject(
        Fault::latency(Duration::from_secs(300))
            .verb(Verb::Update)
            .resource("leases")
            .times(1),
    );
    fake.inject(
        Fault::latency(Duration::from_secs(25))
            .verb(Verb::Create)
            .resource("endpointslices")
            .times(1),
    );
    fake.insert(svc("api").port("http", 80, 8080).build())
        .unwrap();
    fake.insert(
        pod("api-0", "api")
            .ip("10.1.0.1")
            .node("node-a")
            .ready()
            .build(),
    )
    .unwrap();

    let t0 = tokio::time::Instant::now();
    while !b.is_leading().await {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(t0.elapsed() < Duration::from_secs(30), "B never took over");
    }
    let a_result = a.task.await.expect("run task");
    assert!(
        a_result.is_err(),
        "a leader that lost its lease exits with an error"
    );
    settle(&fake, &[&b], LIMIT).await;
    let after = endpoint_writes(&fake);
    assert_eq!(
        (after.0 - before.0, after.2 - before.2),
        (1, 0),
        "one slice create for the new Service and no clean-up delete: the replica that \
         lost its lease must not write after the other replica leads (creates, deletes)"
    );
    assert_converged_default(&fake);
    b.stop().await.unwrap();
}

/// `svcplane run` with its webhook watches Services once: the controllers and the
/// webhook's allocation state are both fed by that one watch.
#[tokio::test(start_paused = true)]
async fn with_the_webhook_services_are_watched_once_for_controllers_and_webhook() {
    use svcplane_allocator::Claim;
    use svcplane_controller::process::Serving;
    use svcplane_controller::run_cmd::WebhookRun;
    use svcplane_webhook::handler::AdmissionHandler;
    use svcplane_webhook::shell::certs::CertPlan;
    use svcplane_webhook::shell::repair::RepairConfig;
    use svcplane_webhook::shell::{ServiceSource, WebhookOptions};

    let fake = FakeApi::new();
    fake.register(
        "svcplane.io",
        "v1alpha1",
        "allocationclaims",
        "AllocationClaim",
        false,
        false,
    );
    web_cluster(&fake, 3);
    let mut web = svc("held").port("http", 80, 8080).build();
    if let Some(spec) = web.spec.as_mut() {
        spec.cluster_ip = Some("10.96.0.10".into());
        spec.cluster_ips = Some(vec!["10.96.0.10".into()]);
    }
    fake.insert(web).unwrap();
    let dir = std::env::temp_dir().join(format!("svcplane-run-webhook-{}", std::process::id()));
    let certs = svcplane_tests::webhook_env::certs(&dir, &["127.0.0.1"]).unwrap();
    let mut opts = options();
    opts.webhook = Some(WebhookRun {
        serving: Serving {
            bind_address: "127.0.0.1:0".parse().unwrap(),
            certs: CertPlan::Files {
                cert: certs.cert_file.clone(),
                key: certs.key_file.clone(),
            },
            request_timeout: Duration::from_secs(4),
            reload_interval: Duration::from_secs(30),
        },
        options: WebhookOptions {
            allocator: svcplane_tests::run_env::allocator(),
            seed: 1,
            retain_released_values: std::time::Duration::ZERO,
            repair: RepairConfig {
                interval: Duration::from_secs(30),
                grace: Duration::from_secs(60),
            },
            metrics: Default::default(),
            services: ServiceSource::External,
            explicit_ranges: None,
            follow_service_cidrs: false,
            identity: "run-scenarios".into(),
        },
    });
    let run = Instance::start(fake.client(), opts);
    settle(&fake, &[&run], LIMIT).await;
    assert_converged_default(&fake);
    let webhook = run.handle.webhook().expect("the webhook started").clone();
    assert!(
        webhook.is_ready(),
        "the Service feed listed through the shared watch"
    );
    assert!(
        webhook
            .state()
            .lock()
            .unwrap()
            .allocators()
            .has(Claim::Ip("10.96.0.10".parse().unwrap())),
        "the webhook's state holds the stored Service's ClusterIP"
    );
    let s = fake.stats();
    // The list is the watch's initial events (a streaming list, ES-1.8).
    assert_eq!(s.requests(Verb::Watch, "services"), 1, "one Service watch");
    assert_eq!(s.requests(Verb::List, "services"), 0, "no separate list");
    assert_eq!(slices_of(&fake, "web").len(), 1, "the controllers ran");
    run.stop().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
