//! Mirroring benchmarks (issue 4): a hand-written dual-stack Endpoints
//! object of 1500 addresses (750 IPv4 + 750 IPv6, one subset, so 1000 are
//! mirrored and 500 skipped), planned from nothing and resynced unchanged.
//! The bytes each plan would write (JSON of its slices) are printed first.
//!
//! Run with `cargo bench -p svcplane-tests --bench mirroring`.

use std::sync::Arc;

use divan::Bencher;
use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use svcplane_controller::core::fixtures::{as_stored, endpoints, ipv4_nth, ipv6_nth, svc};
use svcplane_controller::core::mirroring::{
    DEFAULT_MAX_ENDPOINTS_PER_SUBSET, Inputs, MirrorPlan, reconcile,
};

struct World {
    service: Service,
    endpoints: Endpoints,
    stored: Vec<Arc<EndpointSlice>>,
}

fn world() -> World {
    let mut ready: Vec<EndpointAddress> = Vec::new();
    for i in 0..750 {
        for ip in [ipv4_nth(i), ipv6_nth(i)] {
            ready.push(EndpointAddress {
                ip,
                node_name: Some("node-a".into()),
                ..EndpointAddress::default()
            });
        }
    }
    let endpoints = endpoints("ext")
        .subset_of(ready, Vec::new(), &[("http", 8080)])
        .build();
    let mut w = World {
        service: svc("ext").no_selector().build(),
        endpoints,
        stored: Vec::new(),
    };
    w.stored = plan(&w)
        .creates
        .into_iter()
        .enumerate()
        .map(|(i, s)| Arc::new(as_stored(s, &format!("ext-{i:05}"))))
        .collect();
    w
}

fn plan_with(w: &World, existing: &[Arc<EndpointSlice>]) -> MirrorPlan {
    reconcile(&Inputs {
        namespace: "default",
        name: "ext",
        endpoints: Some(&w.endpoints),
        service: Some(&w.service),
        existing,
        max_endpoints_per_subset: DEFAULT_MAX_ENDPOINTS_PER_SUBSET,
    })
}

fn plan(w: &World) -> MirrorPlan {
    plan_with(w, &[])
}

fn bytes_written(p: &MirrorPlan) -> usize {
    p.creates
        .iter()
        .chain(&p.updates)
        .map(|s| serde_json::to_vec(s).map_or(0, |v| v.len()))
        .sum()
}

fn main() {
    let w = world();
    let fresh = plan(&w);
    let again = plan_with(&w, &w.stored);
    eprintln!(
        "mirroring 1500 dual-stack: fresh writes={} bytes={} skipped={}; resync writes={} bytes={}",
        fresh.write_count(),
        bytes_written(&fresh),
        fresh.stats.addresses_skipped,
        again.write_count(),
        bytes_written(&again)
    );
    divan::main();
}

#[divan::bench]
fn mirror_1500_dual_stack(bencher: Bencher) {
    let w = world();
    bencher.bench_local(|| plan(divan::black_box(&w)));
}

#[divan::bench]
fn resync_1500_dual_stack(bencher: Bencher) {
    let w = world();
    bencher.bench_local(|| plan_with(divan::black_box(&w), &w.stored));
}
