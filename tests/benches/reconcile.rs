//! Reconciler benchmarks (issue 2): one Service with 10 / 100 / 1000 / 10000
//! ready Pods; a fresh plan (no slices yet), an unchanged one (no-op) and
//! one with a single Pod changed. Measures desired state and diff only; no
//! serialization. The `*_cached` variants plan the same 1000 Pods as the
//! runtime caches them (`CachedPod`).
//!
//! Run with `cargo bench -p svcplane-tests --bench reconcile`.

use std::collections::BTreeMap;
use std::sync::Arc;

use divan::Bencher;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use svcplane_controller::core::endpointslice::{Inputs, Outcome, reconcile};
use svcplane_controller::core::fixtures::{apply_plan, node, nodes, pod, svc};
use svcplane_controller::core::pod::PodView;
use svcplane_controller::shell::cache::CachedPod;

const SIZES: &[usize] = &[10, 100, 1000, 10000];

struct World {
    service: Service,
    pods: Vec<Arc<Pod>>,
    changed_pods: Vec<Arc<Pod>>,
    nodes: BTreeMap<String, Arc<Node>>,
    stored: Vec<Arc<EndpointSlice>>,
}

fn world(n: usize) -> World {
    let service = svc("web").named_port("http", 80, "http").build();
    let nodes = nodes(&[
        node("node-a", Some("zone-a")),
        node("node-b", Some("zone-b")),
        node("node-c", Some("zone-c")),
    ]);
    let make = |i: usize, ready: bool| {
        let b = pod(&format!("web-{i:05}"), "web")
            .ip(&format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256))
            .node(["node-a", "node-b", "node-c"][i % 3])
            .container_port("http", 8080);
        if ready {
            b.ready().arc()
        } else {
            b.not_ready().arc()
        }
    };
    let pods: Vec<Arc<Pod>> = (0..n).map(|i| make(i, true)).collect();
    let mut changed_pods = pods.clone();
    changed_pods[n / 2] = make(n / 2, false);
    let mut w = World {
        service,
        pods,
        changed_pods,
        nodes,
        stored: Vec::new(),
    };
    let plan = plan(&w, &w.pods, &[]);
    w.stored = apply_plan(&[], &plan);
    w
}

fn plan<P: PodView>(
    w: &World,
    pods: &[Arc<P>],
    existing: &[Arc<EndpointSlice>],
) -> svcplane_controller::core::endpointslice::SlicePlan {
    let inputs = Inputs {
        service: &w.service,
        pods,
        nodes: &w.nodes,
        existing,
        trigger_time: None,
        max_endpoints_per_slice: 100,
    };
    match reconcile(&inputs) {
        Outcome::Planned(p) => p,
        Outcome::Skipped(_) => Default::default(),
    }
}

#[divan::bench(args = SIZES)]
fn fresh(bencher: Bencher, n: usize) {
    let w = world(n);
    bencher.bench(|| plan(&w, divan::black_box(&w.pods), &[]));
}

#[divan::bench(args = SIZES)]
fn unchanged(bencher: Bencher, n: usize) {
    let w = world(n);
    assert!(plan(&w, &w.pods, &w.stored).is_noop());
    bencher.bench(|| plan(&w, divan::black_box(&w.pods), &w.stored));
}

#[divan::bench(args = SIZES)]
fn one_pod_changed(bencher: Bencher, n: usize) {
    let w = world(n);
    assert_eq!(plan(&w, &w.changed_pods, &w.stored).write_count(), 1);
    bencher.bench(|| plan(&w, divan::black_box(&w.changed_pods), &w.stored));
}

fn cached(pods: &[Arc<Pod>]) -> Vec<Arc<CachedPod>> {
    pods.iter()
        .map(|p| Arc::new(CachedPod::from_pod(Pod::clone(p))))
        .collect()
}

#[divan::bench(args = [1000])]
fn unchanged_cached(bencher: Bencher, n: usize) {
    let w = world(n);
    let pods = cached(&w.pods);
    assert!(plan(&w, &pods, &w.stored).is_noop());
    bencher.bench(|| plan(&w, divan::black_box(&pods), &w.stored));
}

#[divan::bench(args = [1000])]
fn one_pod_changed_cached(bencher: Bencher, n: usize) {
    let w = world(n);
    let pods = cached(&w.changed_pods);
    assert_eq!(plan(&w, &pods, &w.stored).write_count(), 1);
    bencher.bench(|| plan(&w, divan::black_box(&pods), &w.stored));
}

fn main() {
    divan::main();
}
