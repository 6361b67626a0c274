//! In-process admission latency (issue 7): one AdmissionReview body in, one response
//! body out, against an allocation state that already holds 10 000 Services.
//!
//! - `decode`: parsing and checking the review;
//! - `validate_handler`: the whole validating path (decode, checks, response), which
//!   makes no API call;
//! - `mutate_handler`: the whole mutating path for a NodePort Service (reserve a
//!   ClusterIP and a nodePort, claim them through an in-memory claim store, patch,
//!   response), then the values are released again so every iteration starts equal.
//!
//! Run with `cargo bench -p svcplane-tests --bench review`.

#![allow(clippy::expect_used)]

use bytes::Bytes;
use divan::Bencher;
use serde_json::{Value, json};
use svcplane_webhook::handler::{AdmissionHandler, Endpoint};
use svcplane_webhook::review;
use svcplane_webhook::state::HolderKey;

#[path = "support/mod.rs"]
mod support;

fn body(operation: &str, object: Value, dry_run: bool) -> Bytes {
    Bytes::from(
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "0f6b6f5e-3f1c-4a53-9d0e-1b2c3d4e5f60",
                "kind": {"group": "", "version": "v1", "kind": "Service"},
                "resource": {"group": "", "version": "v1", "resource": "services"},
                "name": object["metadata"]["name"],
                "namespace": "bench",
                "operation": operation,
                "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
                "object": object,
                "dryRun": dry_run,
            }
        }))
        .expect("encodes"),
    )
}

/// A Service as the validating webhook sees it: allocated by then.
fn allocated_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "bench", "labels": {"app": "web"}},
        "spec": {
            "type": "ClusterIP", "clusterIP": "10.100.7.9", "clusterIPs": ["10.100.7.9"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "selector": {"app": "web"}, "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]
        }
    })
}

fn new_node_port_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "bench"},
        "spec": {
            "type": "NodePort", "selector": {"app": "web"}, "sessionAffinity": "None",
            "externalTrafficPolicy": "Cluster", "internalTrafficPolicy": "Cluster",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]
        }
    })
}

fn main() {
    divan::main();
}

#[divan::bench]
fn decode(bencher: Bencher) {
    let b = body("CREATE", allocated_service(), false);
    bencher.bench(|| review::decode(divan::black_box(&b)).expect("decodes"));
}

#[divan::bench]
fn validate_handler(bencher: Bencher) {
    let webhook = support::webhook(support::held_state());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let b = body("CREATE", allocated_service(), false);
    bencher.bench_local(|| {
        let answer = rt.block_on(webhook.handle(Endpoint::Validate, b.clone()));
        assert_eq!(answer.status, 200);
        answer
    });
}

#[divan::bench]
fn mutate_handler(bencher: Bencher) {
    let state = support::held_state();
    let webhook = support::webhook(state.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let b = body("CREATE", new_node_port_service(), false);
    bencher.bench_local(|| {
        let answer = rt.block_on(webhook.handle(Endpoint::Mutate, b.clone()));
        // Release what was claimed so the next iteration sees the same state.
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        let keys: Vec<HolderKey> = st
            .holder_keys()
            .filter(|k| matches!(k, HolderKey::Claim { .. }))
            .cloned()
            .collect();
        for k in keys {
            st.remove(&k);
        }
        answer
    });
}
