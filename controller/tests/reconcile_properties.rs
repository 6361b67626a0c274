//! Property tests of the EndpointSlice reconciler: whatever the Pods and the
//! slices already stored, one plan leads to a state where every endpoint
//! appears exactly once per address type and port group, no slice exceeds
//! the maximum, and planning again writes nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use proptest::prelude::*;
use svcplane_controller::core::endpointslice::{Inputs, Outcome, SlicePlan, reconcile};
use svcplane_controller::core::fixtures::{apply_plan, node, nodes, pod, svc};
use svcplane_controller::core::slice_endpoints::SliceEndpoints;

#[derive(Debug, Clone)]
struct PodSpec {
    ready: bool,
    terminating: bool,
    terminal: bool,
    v4: bool,
    v6: bool,
    /// 0: port name resolves to 8080, 1: to 9090, 2: does not resolve.
    port: u8,
    /// 0, 1: existing nodes; 2: a node missing from the cache.
    node: u8,
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        any::<bool>(),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.05),
        prop::bool::weighted(0.9),
        any::<bool>(),
        0u8..3,
        prop::sample::select(vec![0u8, 0, 1, 1, 2]),
    )
        .prop_map(
            |(ready, terminating, terminal, v4, v6, port, node)| PodSpec {
                ready,
                terminating,
                terminal,
                v4,
                v6,
                port,
                node,
            },
        )
}

fn build_pod(i: usize, spec: &PodSpec) -> Arc<Pod> {
    let mut ips = Vec::new();
    if spec.v4 {
        ips.push(format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256));
    }
    if spec.v6 {
        ips.push(format!("fd00::{i:x}"));
    }
    let ip_refs: Vec<&str> = ips.iter().map(String::as_str).collect();
    let mut b = pod(&format!("p{i:04}"), "web")
        .ips(&ip_refs)
        .node(["node-a", "node-b", "gone"][usize::from(spec.node)]);
    b = if spec.ready { b.ready() } else { b.not_ready() };
    if spec.terminating {
        b = b.terminating();
    }
    if spec.terminal {
        b = b.phase("Succeeded");
    }
    match spec.port {
        0 => b = b.container_port("http", 8080),
        1 => b = b.container_port("http", 9090),
        _ => {}
    }
    b.arc()
}

fn service(families: u8, publish_not_ready: bool) -> Service {
    let fams: &[&str] = match families {
        0 => &["IPv4"],
        1 => &["IPv6"],
        _ => &["IPv4", "IPv6"],
    };
    let mut b = svc("web").families(fams).named_port("http", 80, "http");
    if publish_not_ready {
        b = b.publish_not_ready();
    }
    b.build()
}

fn run(
    service: &Service,
    pods: &[Arc<Pod>],
    stored: &[Arc<EndpointSlice>],
    max: usize,
) -> SlicePlan {
    let nodes = nodes(&[
        node("node-a", Some("zone-a")),
        node("node-b", Some("zone-b")),
    ]);
    let inputs = Inputs {
        service,
        pods,
        nodes: &nodes,
        existing: stored,
        trigger_time: None,
        max_endpoints_per_slice: max,
    };
    match reconcile(&inputs) {
        Outcome::Planned(p) => p,
        Outcome::Skipped(r) => panic!("skipped: {r:?}"),
    }
}

/// (address type, port) → expected pod names, from the pod specs directly.
fn expected(
    specs: &[PodSpec],
    families: u8,
    publish_not_ready: bool,
) -> BTreeMap<(String, Option<i32>), Vec<String>> {
    let mut out: BTreeMap<(String, Option<i32>), Vec<String>> = BTreeMap::new();
    for (i, s) in specs.iter().enumerate() {
        if s.terminal || (!s.v4 && !s.v6) {
            continue;
        }
        if s.node == 2 && !publish_not_ready {
            continue;
        }
        let port = match s.port {
            0 => Some(8080),
            1 => Some(9090),
            _ => None,
        };
        for (fam, has) in [("IPv4", s.v4), ("IPv6", s.v6)] {
            let wanted = match families {
                0 => fam == "IPv4",
                1 => fam == "IPv6",
                _ => true,
            };
            if wanted && has {
                out.entry((fam.to_owned(), port))
                    .or_default()
                    .push(format!("p{i:04}"));
            }
        }
    }
    out
}

fn actual(slices: &[Arc<EndpointSlice>]) -> BTreeMap<(String, Option<i32>), Vec<String>> {
    let mut out: BTreeMap<(String, Option<i32>), Vec<String>> = BTreeMap::new();
    for s in slices {
        let port = s
            .ports
            .as_ref()
            .and_then(|p| p.first())
            .and_then(|p| p.port);
        let names = out.entry((s.address_type.clone(), port)).or_default();
        for e in s.endpoints() {
            names.push(
                e.target_ref
                    .as_ref()
                    .and_then(|r| r.name.clone())
                    .unwrap_or_default(),
            );
        }
    }
    out.retain(|_, v| !v.is_empty());
    for v in out.values_mut() {
        v.sort();
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_endpoint_once_no_slice_over_max_and_replanning_is_a_noop(
        before in prop::collection::vec(pod_spec(), 0..260),
        after in prop::collection::vec(pod_spec(), 0..260),
        families in 0u8..3,
        publish_not_ready in any::<bool>(),
        max in prop::sample::select(vec![1usize, 3, 7, 50, 100, 1000]),
    ) {
        let svc = service(families, publish_not_ready);
        let before_pods: Vec<Arc<Pod>> =
            before.iter().enumerate().map(|(i, s)| build_pod(i, s)).collect();
        let stored = apply_plan(&[], &run(&svc, &before_pods, &[], max));

        let after_pods: Vec<Arc<Pod>> =
            after.iter().enumerate().map(|(i, s)| build_pod(i, s)).collect();
        let plan = run(&svc, &after_pods, &stored, max);
        let state = apply_plan(&stored, &plan);

        for s in &state {
            prop_assert!(s.endpoints().len() <= max, "slice over max: {}", s.endpoints().len());
        }
        prop_assert_eq!(actual(&state), expected(&after, families, publish_not_ready));

        let again = run(&svc, &after_pods, &state, max);
        prop_assert!(again.is_noop(), "second plan wrote {} times", again.write_count());
    }
}
