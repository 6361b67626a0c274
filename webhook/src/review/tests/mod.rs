//! Tests of the review core, grouped by concern. Rule tests are named after the
//! rule they pin: `rule_8_3_…` is WH-8.3 (`docs/webhook.md`), `rule_7_2_…` AL-7.2
//! (`docs/allocator.md`).

mod decode_tests;
mod mutate_tests;
mod namespace_range_tests;
mod prop_tests;
mod requested_tests;
mod response_tests;
mod retained_tests;
mod rule_tests;
mod update_tests;
mod validate_tests;
mod warnings_tests;

use std::net::IpAddr;

use serde_json::{Value, json};
use svcplane_allocator::{AllocatorConfig, Claim};

use super::decode::{Decoded, ServiceRequest, decode};
use super::{MutateDecision, ValidateDecision};
use crate::state::{AllocationState, HolderKey, ServiceRef};

/// A state over fresh allocators for `--service-cluster-ip-range` and
/// `--service-node-port-range` values.
fn state(cidrs: &str, ports: &str) -> AllocationState {
    AllocationState::new(
        AllocatorConfig::from_flags(cidrs, ports)
            .unwrap()
            .allocators(42)
            .unwrap(),
    )
}

/// The default test cluster: a /24 and a small NodePort range.
fn small() -> AllocationState {
    state("10.0.0.0/24", "30000-30099")
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn cip(s: &str) -> Claim {
    Claim::Ip(ip(s))
}

/// A Service object as the API server sends it: namespace `ns`, scheme defaults applied
/// by the caller through `spec`.
fn svc(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
    })
}

/// A plain ClusterIP spec with one TCP port.
fn cluster_ip_spec() -> Value {
    json!({"type": "ClusterIP", "ports": [{"port": 80, "protocol": "TCP"}], "selector": {"app": "x"}})
}

fn review_json(op: &str, uid: &str, object: &Value, old: Option<&Value>, dry_run: bool) -> Value {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let mut request = json!({
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Service"},
        "resource": {"group": "", "version": "v1", "resource": "services"},
        "requestKind": {"group": "", "version": "v1", "kind": "Service"},
        "requestResource": {"group": "", "version": "v1", "resource": "services"},
        "name": name,
        "namespace": "ns",
        "operation": op,
        "userInfo": {"username": "alice"},
        "object": object,
        "dryRun": dry_run,
    });
    if let Some(old) = old {
        request["oldObject"] = old.clone();
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

fn decoded(review: &Value) -> ServiceRequest {
    match decode(&serde_json::to_vec(review).unwrap()).unwrap() {
        Decoded::Service(r) => *r,
        other => panic!("not a Service review: {other:?}"),
    }
}

/// The nodePorts of a patched object's ports, in order (0 for a port without one).
fn node_ports(out: &Value) -> Vec<i64> {
    out["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["nodePort"].as_i64().unwrap_or(0))
        .collect()
}

fn create(object: Value) -> ServiceRequest {
    decoded(&review_json("CREATE", "uid-1", &object, None, false))
}

fn update(object: Value, old: Value) -> ServiceRequest {
    decoded(&review_json("UPDATE", "uid-2", &object, Some(&old), false))
}

/// Apply a mutate answer's patch to the request's raw object.
fn patched(req: &ServiceRequest, d: &MutateDecision) -> Value {
    let MutateDecision::Allow { patch, .. } = d else {
        panic!("denied: {d:?}");
    };
    let mut doc = req.object.clone();
    json_patch::patch(&mut doc, &patch.0).unwrap();
    doc
}

fn ops(d: &MutateDecision) -> Value {
    match d {
        MutateDecision::Allow { patch, .. } => serde_json::to_value(patch).unwrap(),
        MutateDecision::Deny(e) => panic!("denied: {e}"),
    }
}

fn reserved(d: &MutateDecision) -> Vec<Claim> {
    match d {
        MutateDecision::Allow { reserved, .. } => reserved.clone(),
        MutateDecision::Deny(e) => panic!("denied: {e}"),
    }
}

fn warnings(d: &MutateDecision) -> Vec<String> {
    match d {
        MutateDecision::Allow { warnings, .. } => warnings.clone(),
        MutateDecision::Deny(e) => panic!("denied: {e}"),
    }
}

fn denial(d: &MutateDecision) -> String {
    match d {
        MutateDecision::Deny(e) => e.to_string(),
        MutateDecision::Allow { .. } => panic!("allowed: {d:?}"),
    }
}

fn validate_denial(d: &ValidateDecision) -> String {
    match d {
        ValidateDecision::Deny(e) => e.to_string(),
        ValidateDecision::Allow { .. } => panic!("allowed: {d:?}"),
    }
}

/// Another Service in `ns` holding `values`.
fn hold_other(st: &mut AllocationState, name: &str, values: Vec<Claim>) {
    st.set(
        HolderKey::Service {
            namespace: "ns".into(),
            name: name.into(),
        },
        Some(ServiceRef::named("ns", name)),
        values,
    );
}

/// What the allocators have marked: every IP of both families and every NodePort.
fn marked(st: &AllocationState) -> (Vec<IpAddr>, Vec<i32>) {
    use svcplane_allocator::range::IpFamily;
    let a = st.allocators();
    let mut ips = Vec::new();
    for f in [IpFamily::V4, IpFamily::V6] {
        if let Some(fa) = a.family(f) {
            ips.extend(fa.allocated());
        }
    }
    (ips, a.node_ports().allocated().collect())
}
