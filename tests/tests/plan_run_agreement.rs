//! `svcplane plan` and `svcplane run` share every decision: the same snapshot through
//! both gives the same writes (verb, kind, namespace, and the objects written) and the
//! same events (reason and object). `plan` is the pure path (its `plan()` function over
//! the snapshot); `run` is the runtime on the in-process fake API server, from the
//! same objects, until it settles.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use serde_json::Value;
use svcplane_controller::cli::Controller;
use svcplane_controller::core::fixtures::{endpoints, node, pod, svc};
use svcplane_controller::core::keys::LABEL_SERVICE_NAME;
use svcplane_controller::plan::output::{Object, Verb as PlanVerb};
use svcplane_controller::plan::{PlanOptions, plan};
use svcplane_tests::fake_api::{FakeApi, Verb};
use svcplane_tests::normalize::{normalize_endpoints, normalize_slice};
use svcplane_tests::run_env::{self, Instance, options, settle};

/// A world with something for every shared decision: slices over two packs, a
/// not-ready Pod, a Pod with an unparseable address, a selector no Pod can match, a
/// selectorless Service with hand-written Endpoints (mirroring), an ExternalName
/// Service, same-zone hints from `trafficDistribution`, and Services sharing one
/// ClusterIP (the fixtures' default), which the allocator repair reports.
fn world(fake: &FakeApi) {
    fake.insert(node("node-a", Some("zone-a"))).unwrap();
    fake.insert(node("node-b", Some("zone-b"))).unwrap();
    fake.insert(svc("web").port("http", 80, 8080).build())
        .unwrap();
    for i in 0..130 {
        let p = pod(&format!("web-{i}"), "web")
            .ip(&format!("10.0.{}.{}", i / 200, i % 200 + 1))
            .node(if i % 2 == 0 { "node-a" } else { "node-b" });
        let p = if i == 7 { p.not_ready() } else { p.ready() };
        fake.insert(p.build()).unwrap();
    }
    fake.insert(
        pod("web-x", "web")
            .ip("300.1.2.3")
            .node("node-a")
            .ready()
            .build(),
    )
    .unwrap();
    fake.insert(
        svc("bad")
            .selector("bad key!", "x")
            .port("http", 80, 8080)
            .build(),
    )
    .unwrap();
    fake.insert(svc("ext").no_selector().port("http", 80, 8080).build())
        .unwrap();
    fake.insert(
        endpoints("ext")
            .subset(&["10.9.0.1", "10.9.0.2"], &[], &[("http", 8080)])
            .build(),
    )
    .unwrap();
    fake.insert(svc("outside").external_name().build()).unwrap();
    let mut near = svc("near").port("http", 80, 8080).build();
    if let Some(spec) = near.spec.as_mut() {
        spec.traffic_distribution = Some("PreferClose".into());
    }
    fake.insert(near).unwrap();
    for i in 0..6 {
        fake.insert(
            pod(&format!("near-{i}"), "near")
                .ip(&format!("10.1.0.{}", i + 1))
                .node(if i % 2 == 0 { "node-a" } else { "node-b" })
                .ready()
                .build(),
        )
        .unwrap();
    }
}

fn resource_of(kind: &str) -> &'static str {
    match kind {
        "EndpointSlice" => "endpointslices",
        "Endpoints" => "endpoints",
        other => panic!("unexpected kind {other}"),
    }
}

fn verb_of(v: PlanVerb) -> Verb {
    match v {
        PlanVerb::Create => Verb::Create,
        PlanVerb::Update => Verb::Update,
        PlanVerb::Delete => Verb::Delete,
        // A strategic merge patch and a server-side apply are both PATCH requests.
        PlanVerb::Patch | PlanVerb::Apply => Verb::Patch,
    }
}

/// How many of each (verb, resource, namespace).
type WriteCounts = BTreeMap<(Verb, &'static str, String), usize>;

#[tokio::test(start_paused = true)]
async fn the_same_snapshot_gives_the_same_writes_and_events_in_plan_and_run() {
    let fake = FakeApi::new();
    world(&fake);
    let snapshot = run_env::snapshot(&fake);
    let doc = plan(
        &snapshot,
        &PlanOptions {
            // The webhook's Service updates are made at admission: not compared.
            controllers: [
                "endpointslice",
                "endpoints",
                "endpointslicemirroring",
                "allocator-repair",
            ]
            .iter()
            .map(|n| Controller::named(n).expect("a registered controller"))
            .collect(),
            max_endpoints_per_slice: 100,
            allocator: run_env::allocator(),
            follow_service_cidrs: true,
            now: k8s_openapi::jiff::Timestamp::now(),
        },
    );

    let run = Instance::start(fake.client(), options());
    settle(&fake, &[&run], Duration::from_secs(600)).await;
    // Events are written off the sync path; give the recorder its turn.
    tokio::time::sleep(Duration::from_secs(5)).await;
    run.stop().await.unwrap();

    // Writes: the same verbs on the same kinds in the same namespaces.
    let mut planned = WriteCounts::new();
    for a in doc.actions.iter().filter(|a| a.kind != "Service") {
        *planned
            .entry((verb_of(a.verb), resource_of(a.kind), a.namespace.clone()))
            .or_default() += 1;
    }
    let mut made = WriteCounts::new();
    for w in fake.writes() {
        if w.code >= 300 || !matches!(w.resource.as_str(), "endpointslices" | "endpoints") {
            continue;
        }
        let resource = resource_of(if w.resource == "endpointslices" {
            "EndpointSlice"
        } else {
            "Endpoints"
        });
        *made
            .entry((w.verb, resource, w.namespace.clone().unwrap_or_default()))
            .or_default() += 1;
    }
    assert!(!planned.is_empty());
    assert_eq!(made, planned, "writes of run vs plan");

    // The objects written: what plan would create is what run stored.
    let mut planned_slices: Vec<Value> = Vec::new();
    let mut planned_endpoints: Vec<Value> = Vec::new();
    for a in &doc.actions {
        match &a.object {
            Some(Object::EndpointSlice(s)) => planned_slices.push(normalize_slice(s)),
            Some(Object::Endpoints(e)) => planned_endpoints.push(normalize_endpoints(Some(e))),
            _ => {}
        }
    }
    let mut stored_slices: Vec<Value> = fake
        .objects_of::<EndpointSlice>()
        .unwrap()
        .iter()
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(LABEL_SERVICE_NAME))
        })
        .map(normalize_slice)
        .collect();
    let mut stored_endpoints: Vec<Value> = fake
        .objects_of::<Endpoints>()
        .unwrap()
        .iter()
        .filter(|e| e.metadata.name.as_deref() != Some("ext"))
        .map(|e| normalize_endpoints(Some(e)))
        .collect();
    for v in [
        &mut planned_slices,
        &mut stored_slices,
        &mut planned_endpoints,
        &mut stored_endpoints,
    ] {
        v.sort_by_key(Value::to_string);
    }
    assert_eq!(stored_slices, planned_slices, "slices of run vs plan");
    assert_eq!(
        stored_endpoints, planned_endpoints,
        "Endpoints of run vs plan"
    );

    // Events: the same reasons on the same objects.
    let mut planned_events: Vec<(String, String)> = doc
        .events
        .iter()
        .map(|e| (e.reason.clone(), e.object.clone()))
        .collect();
    let mut recorded: Vec<(String, String)> = fake
        .objects_of::<Event>()
        .unwrap()
        .iter()
        .map(|e| {
            let r = e.regarding.clone().unwrap_or_default();
            (
                e.reason.clone().unwrap_or_default(),
                format!(
                    "{}/{}",
                    r.namespace.unwrap_or_default(),
                    r.name.unwrap_or_default()
                ),
            )
        })
        .collect();
    planned_events.sort();
    recorded.sort();
    for reason in [
        "InvalidSelector",
        "InvalidPodIP",
        "ClusterIPAlreadyAllocated",
    ] {
        assert!(
            planned_events.iter().any(|(r, _)| r == reason),
            "{reason} in {planned_events:?}"
        );
    }
    assert_eq!(recorded, planned_events, "events of run vs plan");
}
