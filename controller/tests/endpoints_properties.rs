//! Property tests for the Endpoints controller's cap (EP-4.3)
//! and the mirroring controller's per-subset limit and coverage (MR-5.2).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use proptest::prelude::*;
use svcplane_controller::core::endpoints::{self, EndpointsWrite, MAX_CAPACITY, Outcome};
use svcplane_controller::core::fixtures::{as_stored, endpoints as ep_builder, ipv4_nth, pod, svc};
use svcplane_controller::core::ip;
use svcplane_controller::core::keys::ANNOTATION_OVER_CAPACITY;
use svcplane_controller::core::mirroring;
use svcplane_controller::core::slice_endpoints::SliceEndpoints;

fn written(outcome: Outcome) -> (Endpoints, usize) {
    match outcome {
        Outcome::Planned(p) => match p.writes.as_slice() {
            [EndpointsWrite::Create(e) | EndpointsWrite::Update(e)] => {
                (e.clone(), p.desired_addresses)
            }
            other => panic!("expected one write: {other:?}"),
        },
        Outcome::Skipped(r) => panic!("skipped: {r:?}"),
    }
}

fn counts(e: &Endpoints) -> (usize, usize) {
    e.subsets.iter().flatten().fold((0, 0), |(r, n), s| {
        (
            r + s.addresses.as_ref().map_or(0, Vec::len),
            n + s.not_ready_addresses.as_ref().map_or(0, Vec::len),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Truncated Endpoints hold exactly 1000 addresses and carry the
    /// annotation exactly when the input had more, and a resync of the
    /// written object plans nothing.
    #[test]
    fn endpoints_cap_is_exact(
        ready in 0usize..1400,
        not_ready in 0usize..500,
        second_port_every in 1usize..5,
        pnr in any::<bool>(),
    ) {
        let mut b = svc("web").port("http", 80, 8080).named_port("metrics", 9090, "metrics");
        if pnr {
            b = b.publish_not_ready();
        }
        let service = b.build();
        let pods: Vec<Arc<Pod>> = (0..ready + not_ready)
            .map(|i| {
                let mut p = pod(&format!("web-{i:05}"), "web").ip(&ipv4_nth(i));
                p = if i < ready { p.ready() } else { p.not_ready() };
                if i % second_port_every == 0 {
                    p = p.container_port("metrics", 9100);
                }
                p.arc()
            })
            .collect();
        let inputs = endpoints::Inputs {
            namespace: "default",
            name: "web",
            service: Some(&service),
            pods: &pods,
            existing: None,
            trigger_time: None,
        };
        let (e, desired) = written(endpoints::reconcile(&inputs));
        let (r, n) = counts(&e);
        prop_assert_eq!(r + n, desired.min(MAX_CAPACITY));
        let annotated = e
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_OVER_CAPACITY))
            .map(String::as_str);
        prop_assert_eq!(annotated, (desired > MAX_CAPACITY).then_some("truncated"));
        if !pnr && ready == 0 {
            prop_assert_eq!(r, 0);
        }
        if pnr {
            prop_assert_eq!(n, 0, "publishNotReadyAddresses makes every address ready");
        }
        // Resyncing the stored object plans nothing (also when truncated).
        let mut stored = e.clone();
        stored.metadata.resource_version = Some("1".into());
        let again = endpoints::Inputs { existing: Some(&stored), ..inputs };
        match endpoints::reconcile(&again) {
            Outcome::Planned(p) => prop_assert!(p.is_noop(), "resync wrote {:?}", p.writes.len()),
            Outcome::Skipped(r) => prop_assert!(false, "skipped {r:?}"),
        }
    }
}

/// Pool of addresses: valid IPv4 (some with leading zeros, duplicating a
/// canonical one), valid IPv6 (some non-canonical), and invalid strings.
fn address_pool() -> Vec<String> {
    let mut pool: Vec<String> = (0..40).map(ipv4_nth).collect();
    pool.extend((0..20).map(|i| format!("fd00::{:x}", i + 1)));
    pool.extend(
        [
            "010.0.0.1",
            "FD00::1",
            "fd00:0:0:0:0:0:0:2",
            "not-an-ip",
            "1.2.3",
            "",
        ]
        .map(String::from),
    );
    pool
}

fn subset_strategy() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    let n = address_pool().len();
    (
        prop::collection::vec(0..n, 0..60),
        prop::collection::vec(0..n, 0..30),
    )
}

fn build_endpoints(subsets: &[(Vec<usize>, Vec<usize>)]) -> Endpoints {
    let pool = address_pool();
    let addr = |i: &usize| EndpointAddress {
        ip: pool[*i].clone(),
        ..EndpointAddress::default()
    };
    let mut e = ep_builder("ext").build();
    e.subsets = Some(
        subsets
            .iter()
            .enumerate()
            .map(|(k, (r, n))| EndpointSubset {
                addresses: Some(r.iter().map(addr).collect()),
                not_ready_addresses: Some(n.iter().map(addr).collect()),
                ports: Some(vec![EndpointPort {
                    name: Some(format!("p{k}")),
                    port: 1000 + i32::try_from(k).unwrap(),
                    protocol: Some("TCP".into()),
                    app_protocol: None,
                }]),
            })
            .collect(),
    );
    e
}

fn mirror(e: &Endpoints, existing: &[Arc<EndpointSlice>], max: usize) -> mirroring::MirrorPlan {
    let service = svc("ext").no_selector().build();
    mirroring::reconcile(&mirroring::Inputs {
        namespace: "default",
        name: "ext",
        endpoints: Some(e),
        service: Some(&service),
        existing,
        max_endpoints_per_subset: max,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Mirrored slices never exceed the per-subset maximum (at most 1000)
    /// and, when no subset exceeds it, cover every valid input address of
    /// every port exactly once, with not-ready winning over ready.
    #[test]
    fn mirrored_slices_cover_valid_addresses_once(
        subsets in prop::collection::vec(subset_strategy(), 0..4),
        max in prop_oneof![Just(1000usize), 1usize..40],
    ) {
        let e = build_endpoints(&subsets);
        let plan = mirror(&e, &[], max);
        prop_assert!(plan.updates.is_empty() && plan.deletes.is_empty());
        for s in &plan.creates {
            prop_assert!(s.endpoints().len() <= max.min(1000));
        }
        let pool = address_pool();
        for (k, (ready, not_ready)) in subsets.iter().enumerate() {
            let port = format!("p{k}");
            // Valid canonical IPs offered on this port; not ready wins.
            let mut want: BTreeMap<String, bool> = BTreeMap::new();
            for (list, is_ready) in [(ready, true), (not_ready, false)] {
                for i in list {
                    if let Some((c, _)) = ip::canonical(&pool[*i]) {
                        let slot = want.entry(c).or_insert(is_ready);
                        *slot = *slot && is_ready;
                    }
                }
            }
            let mut got: Vec<String> = Vec::new();
            for s in plan.creates.iter().filter(|s| {
                s.ports.iter().flatten().any(|p| p.name.as_deref() == Some(port.as_str()))
            }) {
                for ep in s.endpoints() {
                    prop_assert_eq!(ep.addresses.len(), 1);
                    let family = ip::family_of(&ep.addresses[0]).map(|f| f.address_type());
                    prop_assert_eq!(family, Some(s.address_type.as_str()));
                    got.push(ep.addresses[0].clone());
                }
            }
            let unique: BTreeSet<&String> = got.iter().collect();
            prop_assert_eq!(unique.len(), got.len(), "an address appears twice");
            // Distinct raw strings the repack keeps (e.g. "010.0.0.1" and
            // "10.0.0.1") count once the canonical form merges them.
            let raw_valid: BTreeSet<&str> = ready
                .iter()
                .chain(not_ready)
                .map(|i| pool[*i].as_str())
                .filter(|s| ip::canonical(s).is_some())
                .collect();
            if raw_valid.len() <= max {
                prop_assert_eq!(
                    unique.into_iter().cloned().collect::<BTreeSet<_>>(),
                    want.keys().cloned().collect::<BTreeSet<_>>()
                );
            } else {
                prop_assert!(got.len() <= max);
            }
        }
        // Once applied, a resync writes nothing.
        let stored: Vec<Arc<EndpointSlice>> = plan
            .creates
            .iter()
            .enumerate()
            .map(|(i, s)| Arc::new(as_stored(s.clone(), &format!("ext-{i:05}"))))
            .collect();
        let again = mirror(&e, &stored, max);
        prop_assert!(again.is_noop(), "resync wrote {}", again.write_count());
    }
}
