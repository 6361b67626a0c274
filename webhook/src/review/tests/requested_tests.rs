//! Values asked for by annotation on CREATE (`svcplane.io/requested-cluster-ips`,
//! `svcplane.io/requested-node-ports`): given where free, else automatic with a warning.

use serde_json::{Value, json};
use svcplane_allocator::Claim;

use super::*;
use crate::review::mutate;
use crate::review::requested::{REQUESTED_CLUSTER_IPS, REQUESTED_NODE_PORTS};

/// A NodePort Service asking for `ips` and `ports` by annotation.
fn restored(name: &str, ips: &str, ports: &str) -> Value {
    let mut obj = svc(
        name,
        json!({"type": "NodePort", "selector": {"app": "x"},
               "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                         {"name": "dns", "port": 53, "protocol": "UDP"}]}),
    );
    obj["metadata"]["annotations"] =
        json!({REQUESTED_CLUSTER_IPS: ips, REQUESTED_NODE_PORTS: ports});
    obj
}

fn create_as(uid: &str, object: Value) -> ServiceRequest {
    decoded(&review_json("CREATE", uid, &object, None, false))
}

/// Another request (`uid-a`) takes the values `spec` sets.
fn held_by_another(st: &mut AllocationState, spec: Value) {
    let _ = reserved(&mutate(&create_as("uid-a", svc("holder", spec)), st));
}

/// The answer gave an automatic address of the test range.
fn assert_automatic_ip(req: &ServiceRequest, d: &MutateDecision) {
    let out = patched(req, d);
    let ip = out["spec"]["clusterIP"].as_str().unwrap_or_default();
    assert!(ip.starts_with("10.0.0."), "{ip}");
}

#[test]
fn requested_values_that_are_free_are_given() {
    let mut st = small();
    let req = create(restored("web", "10.0.0.50", "80/TCP=30050, 53/UDP=30051"));
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);
    assert_eq!(out["spec"]["clusterIP"], "10.0.0.50");
    assert_eq!(out["spec"]["clusterIPs"], json!(["10.0.0.50"]));
    assert_eq!(node_ports(&out), [30050, 30051]);
    assert!(warnings(&d).is_empty(), "{:?}", warnings(&d));
    let mut got = reserved(&d);
    got.sort();
    assert_eq!(
        got,
        [
            cip("10.0.0.50"),
            Claim::NodePort(30050),
            Claim::NodePort(30051)
        ]
    );
}

#[test]
fn a_taken_address_gives_automatic_values_and_a_warning_the_ports_still_come() {
    let mut st = small();
    held_by_another(
        &mut st,
        json!({"clusterIP": "10.0.0.50", "ports": [{"port": 80, "protocol": "TCP"}]}),
    );
    let req = create_as("uid-b", restored("web", "10.0.0.50", "80=30050"));
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);
    let ip = out["spec"]["clusterIP"].as_str().unwrap();
    assert_ne!(ip, "10.0.0.50");
    assert_eq!(node_ports(&out)[0], 30050, "the nodePort is still free");
    assert_ne!(node_ports(&out)[1], 0, "the unrequested one is automatic");
    assert_eq!(
        warnings(&d),
        [format!(
            "{REQUESTED_CLUSTER_IPS}: 10.0.0.50 not given (failed to allocate IP 10.0.0.50: provided IP is already allocated); the Service gets automatic ClusterIPs"
        )]
    );
}

#[test]
fn a_taken_node_port_keeps_the_address_and_warns() {
    let mut st = small();
    held_by_another(
        &mut st,
        json!({"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30050}]}),
    );
    let req = create_as("uid-b", restored("web", "10.0.0.60", "80/TCP=30050"));
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);
    assert_eq!(out["spec"]["clusterIP"], "10.0.0.60");
    assert_ne!(node_ports(&out)[0], 30050);
    let w = warnings(&d);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0] == format!(
            "{REQUESTED_NODE_PORTS}: 80/TCP=30050 not given (provided port is already allocated); the Service gets automatic nodePorts"
        ),
        "{w:?}"
    );
}

#[test]
fn an_address_outside_the_range_is_not_given() {
    let mut st = small();
    let req = create(restored("web", "10.9.0.5", ""));
    let d = mutate(&req, &mut st);
    assert_automatic_ip(&req, &d);
    let w = warnings(&d);
    assert!(
        w[0].contains("the provided network does not match the current range"),
        "{w:?}"
    );
}

#[test]
fn a_malformed_annotation_is_ignored_with_a_warning_never_refused() {
    let mut st = small();
    let req = create(restored("web", "not-an-ip", "80=30050"));
    let d = mutate(&req, &mut st);
    assert_automatic_ip(&req, &d);
    assert_eq!(
        warnings(&d),
        [format!(
            "{REQUESTED_CLUSTER_IPS}: \"not-an-ip\" is not an IP address; the annotation is ignored"
        )]
    );
    let req = create_as("uid-c", restored("other", "", "80:30050"));
    let w = warnings(&mutate(&req, &mut st));
    assert!(
        w[0].contains("\"80:30050\" is not PORT[/PROTOCOL]=NODEPORT"),
        "{w:?}"
    );
}

#[test]
fn values_the_request_sets_itself_and_updates_ignore_the_annotation() {
    let mut st = small();
    let mut obj = restored("web", "10.0.0.50", "80=30050");
    obj["spec"]["clusterIP"] = json!("10.0.0.70");
    let req = create(obj);
    let d = mutate(&req, &mut st);
    assert_eq!(patched(&req, &d)["spec"]["clusterIP"], "10.0.0.70");
    assert_eq!(
        node_ports(&patched(&req, &d))[0],
        30050,
        "nodePorts left unset: given"
    );
    // An UPDATE never reads it.
    let old = svc(
        "kept",
        json!({"type": "ClusterIP", "clusterIP": "10.0.0.80", "clusterIPs": ["10.0.0.80"],
               "ports": [{"port": 80, "protocol": "TCP"}]}),
    );
    let mut new = old.clone();
    new["metadata"]["annotations"] = json!({REQUESTED_CLUSTER_IPS: "10.0.0.90"});
    let d = mutate(&update(new, old), &mut st);
    assert!(warnings(&d).is_empty());
    assert!(reserved(&d).iter().all(|c| *c != cip("10.0.0.90")));
}
