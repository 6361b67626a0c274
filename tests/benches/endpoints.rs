//! Endpoints controller benchmarks (issue 4): the Endpoints object built from
//! 1000 and 5000 ready Pods (no object yet), and a no-op resync of an
//! over-capacity Service (5000 Pods, truncated object already stored).
//! Measures desired state, repack, cap and diff; no serialization. The bytes
//! each plan would write (JSON of its objects) are printed first.
//!
//! Run with `cargo bench -p svcplane-tests --bench endpoints`.

use std::sync::Arc;

use divan::Bencher;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use svcplane_controller::core::endpoints::{
    EndpointsPlan, EndpointsWrite, Inputs, Outcome, reconcile,
};
use svcplane_controller::core::fixtures::{epoch, ipv4_nth, pod, svc};

struct World {
    service: Service,
    pods: Vec<Arc<Pod>>,
    stored: Option<Endpoints>,
}

fn world(n: usize) -> World {
    let service = svc("web").named_port("http", 80, "http").build();
    let pods = (0..n)
        .map(|i| {
            pod(&format!("web-{i:05}"), "web")
                .ip(&ipv4_nth(i))
                .node(["node-a", "node-b", "node-c"][i % 3])
                .container_port("http", 8080)
                .ready()
                .arc()
        })
        .collect();
    let mut w = World {
        service,
        pods,
        stored: None,
    };
    let mut stored = match plan(&w).writes.first() {
        Some(EndpointsWrite::Create(e)) => e.clone(),
        _ => Endpoints::default(),
    };
    stored.metadata.resource_version = Some("1".into());
    w.stored = Some(stored);
    w
}

fn plan_with(w: &World, existing: Option<&Endpoints>) -> EndpointsPlan {
    let inputs = Inputs {
        namespace: "default",
        name: "web",
        service: Some(&w.service),
        pods: &w.pods,
        existing,
        trigger_time: Some(epoch()),
    };
    match reconcile(&inputs) {
        Outcome::Planned(p) => p,
        Outcome::Skipped(_) => EndpointsPlan::default(),
    }
}

fn plan(w: &World) -> EndpointsPlan {
    plan_with(w, None)
}

fn bytes_written(p: &EndpointsPlan) -> usize {
    p.writes
        .iter()
        .map(|w| match w {
            EndpointsWrite::Create(e) | EndpointsWrite::Update(e) => {
                serde_json::to_vec(e).map_or(0, |v| v.len())
            }
            EndpointsWrite::Delete(_) => 0,
        })
        .sum()
}

fn main() {
    for n in [1000, 5000] {
        let w = world(n);
        let fresh = plan(&w);
        let noop = plan_with(&w, w.stored.as_ref());
        eprintln!(
            "endpoints n={n}: fresh writes={} bytes={}; resync writes={} bytes={}",
            fresh.writes.len(),
            bytes_written(&fresh),
            noop.writes.len(),
            bytes_written(&noop)
        );
    }
    divan::main();
}

#[divan::bench(args = [1000, 5000])]
fn build_from_pods(bencher: Bencher, n: usize) {
    let w = world(n);
    bencher.bench_local(|| plan(divan::black_box(&w)));
}

#[divan::bench]
fn noop_resync_over_capacity(bencher: Bencher) {
    let w = world(5000);
    bencher.bench_local(|| plan_with(divan::black_box(&w), w.stored.as_ref()));
}
