//! Topology-hints benchmarks (issue 3): one Service with 1000 ready
//! endpoints over 5 zones and 5000 Nodes.
//!
//! - `ratios_from_5000_nodes`: TH-3.3.1 node accounting;
//! - `hints_first_sync`: the topology-cache algorithm over the Service's
//!   1000 endpoints (10 slices to create, fresh cache);
//! - `reconcile_first_sync_with_hints`: the whole reconcile of that Service
//!   with the policy, for comparison with the `reconcile` bench;
//! - `node_cpu_change_recheck`: one Node's CPU changes: ratios again plus the
//!   TH-3.3.6 re-check over 1000 Services with hints;
//! - `resync_after_node_change`: the Service re-synced after that change
//!   (zero writes expected).
//!
//! Before the benches run, it prints how many of the 1000 Services a Node
//! change re-queues. Run with `cargo bench -p svcplane-tests --bench hints`.

// A bench reports on stdout, and its setup may fail loudly.
#![allow(clippy::print_stdout, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use divan::Bencher;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use svcplane_controller::core::endpointslice::hints::{HintsPolicy, PassSlices};
use svcplane_controller::core::endpointslice::{
    Inputs, Outcome, SlicePlan, reconcile, reconcile_with_hints,
};
use svcplane_controller::core::fixtures::{apply_plan, pod, svc};
use svcplane_controller::core::keys::ANNOTATION_TOPOLOGY_MODE;
use svcplane_controller::core::topology::fixtures::{cpu_node, slice, zoned_endpoints};
use svcplane_controller::core::topology::{TopologyPolicy, nodes};

const ZONES: [&str; 5] = ["zone-a", "zone-b", "zone-c", "zone-d", "zone-e"];
const NODES: usize = 5000;
const ENDPOINTS: usize = 1000;
const OTHER_SERVICES: usize = 999;

struct World {
    service: Service,
    pods: Vec<Arc<Pod>>,
    nodes: BTreeMap<String, Arc<Node>>,
    /// The same Nodes with node 0's CPU doubled.
    changed_nodes: BTreeMap<String, Arc<Node>>,
    /// Slices to create on a first sync, before hints.
    creates: Vec<EndpointSlice>,
    /// Stored slices after the first sync with hints.
    stored: Vec<Arc<EndpointSlice>>,
    /// Policy after the first sync of this Service and 999 others.
    policy: TopologyPolicy,
}

fn node_name(i: usize) -> String {
    format!("node-{i:04}")
}

/// Node `i` is in zone `i % 5`; CPU varies a little by Node.
fn cluster(changed: bool) -> BTreeMap<String, Arc<Node>> {
    (0..NODES)
        .map(|i| {
            let cpu = if changed && i == 0 {
                "8".to_owned()
            } else {
                format!("{}m", 3500 + (i % 7) * 100)
            };
            let n = cpu_node(&node_name(i), Some(ZONES[i % 5]), Some(&cpu));
            (node_name(i), Arc::new(n))
        })
        .collect()
}

fn plan_of(outcome: Outcome) -> SlicePlan {
    match outcome {
        Outcome::Planned(p) => p,
        Outcome::Skipped(r) => panic!("skipped: {r:?}"),
    }
}

fn inputs<'a>(
    service: &'a Service,
    pods: &'a [Arc<Pod>],
    nodes: &'a BTreeMap<String, Arc<Node>>,
    existing: &'a [Arc<EndpointSlice>],
) -> Inputs<'a> {
    Inputs {
        service,
        pods,
        nodes,
        existing,
        trigger_time: None,
        max_endpoints_per_slice: 100,
    }
}

/// Endpoints per zone of the other Services: sizes 5..=304, skewed.
fn other_service_zones(i: usize) -> Vec<(&'static str, usize)> {
    let n = 5 + (i * 37) % 300;
    let skew = i % 5;
    ZONES
        .iter()
        .enumerate()
        .map(|(z, name)| {
            let share = if z == skew { n / 5 + n / 10 } else { n / 5 };
            (*name, share.max(1))
        })
        .collect()
}

fn world() -> World {
    let service = svc("web")
        .annotation(ANNOTATION_TOPOLOGY_MODE, "Auto")
        .port("http", 80, 8080)
        .build();
    let nodes = cluster(false);
    // Zones get 260/240/200/160/140 endpoints: redistribution has work.
    let per_zone = [260usize, 240, 200, 160, 140];
    let mut pods = Vec::with_capacity(ENDPOINTS);
    for (z, count) in per_zone.iter().enumerate() {
        for k in 0..*count {
            let i = pods.len();
            pods.push(
                pod(&format!("web-{i:05}"), "web")
                    .ip(&format!("10.1.{}.{}", i / 256, i % 256))
                    .node(&node_name(z + 5 * (k % (NODES / 5))))
                    .ready()
                    .arc(),
            );
        }
    }
    let creates = plan_of(reconcile(&inputs(&service, &pods, &nodes, &[]))).passes[0]
        .creates
        .clone();

    let mut policy = TopologyPolicy::from_nodes(nodes.values().map(Arc::as_ref));
    let first = plan_of(reconcile_with_hints(
        &inputs(&service, &pods, &nodes, &[]),
        &mut policy,
    ));
    let stored = apply_plan(&[], &first);
    for i in 0..OTHER_SERVICES {
        let other = svc(&format!("svc-{i:04}"))
            .annotation(ANNOTATION_TOPOLOGY_MODE, "Auto")
            .build();
        let mut pass = PassSlices {
            address_type: "IPv4".to_owned(),
            creates: vec![slice("s", zoned_endpoints(0, &other_service_zones(i)))],
            updates: Vec::new(),
            unchanged: Vec::new(),
        };
        policy.apply(&other, &mut pass, &mut Vec::new());
    }
    World {
        service,
        pods,
        nodes,
        changed_nodes: cluster(true),
        creates,
        stored,
        policy,
    }
}

fn main() {
    let w = world();
    let services = w.policy.cache().len();
    let mut p = w.policy.clone();
    let requeued = p.set_nodes(w.changed_nodes.values().map(Arc::as_ref));
    let after = plan_of(reconcile_with_hints(
        &inputs(&w.service, &w.pods, &w.changed_nodes, &w.stored),
        &mut p,
    ));
    let old = w.nodes.get(&node_name(0)).expect("node 0");
    let new = w.changed_nodes.get(&node_name(0)).expect("node 0");
    println!(
        "node-0000 CPU 3500m -> 8: {} of {services} Services with hints re-queued \
         (topology item triggered by this update alone: {}); re-sync of default/web writes {}",
        requeued.len(),
        nodes::update_needs_topology_sync(old, new),
        after.write_count(),
    );
    divan::main();
}

#[divan::bench]
fn ratios_from_5000_nodes(bencher: Bencher) {
    let nodes = cluster(false);
    bencher.bench(|| nodes::zone_ratios(nodes.values().map(Arc::as_ref)));
}

#[divan::bench]
fn hints_first_sync(bencher: Bencher) {
    let w = world();
    let fresh = TopologyPolicy::from_nodes(w.nodes.values().map(Arc::as_ref));
    bencher
        .with_inputs(|| (fresh.clone(), w.creates.clone()))
        .bench_values(|(mut policy, creates)| {
            let mut pass = PassSlices {
                address_type: "IPv4".to_owned(),
                creates,
                updates: Vec::new(),
                unchanged: Vec::new(),
            };
            let mut events = Vec::new();
            policy.apply(&w.service, &mut pass, &mut events);
            (pass.creates, events)
        });
}

#[divan::bench]
fn reconcile_first_sync_with_hints(bencher: Bencher) {
    let w = world();
    let fresh = TopologyPolicy::from_nodes(w.nodes.values().map(Arc::as_ref));
    bencher
        .with_inputs(|| fresh.clone())
        .bench_values(|mut policy| {
            reconcile_with_hints(&inputs(&w.service, &w.pods, &w.nodes, &[]), &mut policy)
        });
}

#[divan::bench]
fn node_cpu_change_recheck(bencher: Bencher) {
    let w = world();
    bencher
        .with_inputs(|| w.policy.clone())
        .bench_values(|mut policy| policy.set_nodes(w.changed_nodes.values().map(Arc::as_ref)));
}

#[divan::bench]
fn resync_after_node_change(bencher: Bencher) {
    let w = world();
    let mut changed = w.policy.clone();
    changed.set_nodes(w.changed_nodes.values().map(Arc::as_ref));
    bencher
        .with_inputs(|| changed.clone())
        .bench_values(|mut policy| {
            let plan = plan_of(reconcile_with_hints(
                &inputs(&w.service, &w.pods, &w.changed_nodes, &w.stored),
                &mut policy,
            ));
            assert!(plan.is_noop());
            plan
        });
}
