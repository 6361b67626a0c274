//! Values retained for a deleted Service's name (`--retain-released-values`): a create
//! under that name leaving its values to the allocator gets them back, with a warning
//! saying so; any other request gets other values.

use std::time::Duration;

use serde_json::{Value, json};
use svcplane_allocator::Claim;

use super::*;
use crate::review::mutate;
use crate::review::requested::REQUESTED_CLUSTER_IPS;
use crate::state::retention::{Protocol, Role};
use crate::state::{ClaimObject, ServiceObject};

/// A NodePort Service with ports 80/TCP and 53/UDP, values left to the allocator.
fn node_port(name: &str) -> Value {
    svc(
        name,
        json!({"type": "NodePort", "selector": {"app": "x"},
               "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                         {"name": "dns", "port": 53, "protocol": "UDP"}]}),
    )
}

/// `ns/web` held 10.0.0.50, 30050 (port 80) and 30053 (port 53) and was deleted with
/// retention on.
fn web_deleted() -> AllocationState {
    let mut st = small();
    st.set_default_retention(Duration::from_secs(3600));
    let values = [
        (cip("10.0.0.50"), Role::ClusterIp(0)),
        (
            Claim::NodePort(30050),
            Role::Port {
                port: 80,
                protocol: Protocol::Tcp,
            },
        ),
        (
            Claim::NodePort(30053),
            Role::Port {
                port: 53,
                protocol: Protocol::Udp,
            },
        ),
    ];
    for (i, (v, _)) in values.iter().enumerate() {
        st.set_claim(ClaimObject {
            name: crate::claim::claim_name(*v),
            uid: format!("c{i}"),
            created: Some(100),
            owner: ServiceRef::of_request("ns", "web", "", "req-0"),
            value: Some(*v),
            resource_version: "1".into(),
            retained: None,
        });
    }
    let key = HolderKey::Service {
        namespace: "ns".into(),
        name: "web".into(),
    };
    st.set_service(
        key.clone(),
        ServiceRef::named("ns", "web"),
        ServiceObject {
            uid: "svc-1".into(),
            created: Some(100),
            retain: None,
            roles: values.to_vec(),
        },
        values.iter().map(|(v, _)| *v).collect(),
    );
    st.remove_service(&key);
    st
}

#[test]
fn a_service_created_again_under_the_name_gets_its_retained_values_back_on_the_same_ports() {
    let mut st = web_deleted();
    let req = create(node_port("web"));
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);
    assert_eq!(out["spec"]["clusterIP"], "10.0.0.50");
    assert_eq!(node_ports(&out), [30050, 30053]);
    assert_eq!(
        warnings(&d),
        [
            "ClusterIPs retained for ns/web given back: 10.0.0.50",
            "nodePorts retained for ns/web given back: 80/TCP=30050,53/UDP=30053",
        ]
    );
}

#[test]
fn another_service_gets_other_values_and_is_refused_a_retained_one_by_hand() {
    let mut st = web_deleted();
    let d = mutate(&create(node_port("other")), &mut st);
    let got = reserved(&d);
    assert!(!got.contains(&cip("10.0.0.50")), "{got:?}");
    assert!(!got.contains(&Claim::NodePort(30050)), "{got:?}");
    assert!(warnings(&d).is_empty(), "{:?}", warnings(&d));
    let mut thief = node_port("thief");
    thief["spec"]["clusterIP"] = json!("10.0.0.50");
    let d = mutate(&create(thief), &mut st);
    assert!(matches!(d, MutateDecision::Deny(_)), "{d:?}");
}

#[test]
fn a_service_asking_by_annotation_or_by_hand_keeps_what_it_asks_for() {
    let mut st = web_deleted();
    let mut asks = node_port("web");
    asks["metadata"]["annotations"] = json!({REQUESTED_CLUSTER_IPS: "10.0.0.60"});
    let req = create(asks);
    let out = patched(&req, &mutate(&req, &mut st));
    assert_eq!(out["spec"]["clusterIP"], "10.0.0.60");

    let mut st = web_deleted();
    let mut by_hand = node_port("web");
    by_hand["spec"]["clusterIP"] = json!("10.0.0.61");
    let req = create(by_hand);
    let out = patched(&req, &mutate(&req, &mut st));
    assert_eq!(out["spec"]["clusterIP"], "10.0.0.61");
    assert_eq!(
        node_ports(&out),
        [30050, 30053],
        "the ports it left unset come back"
    );
}

#[test]
fn an_update_never_takes_retained_values() {
    let mut st = web_deleted();
    let old = svc(
        "web",
        json!({"type": "ClusterIP", "clusterIP": "10.0.0.70",
                                "clusterIPs": ["10.0.0.70"],
                                "ports": [{"port": 80, "protocol": "TCP"}]}),
    );
    let mut new = old.clone();
    new["spec"]["type"] = json!("NodePort");
    let req = update(new, old);
    let out = patched(&req, &mutate(&req, &mut st));
    let np = node_ports(&out)[0];
    assert!(np != 30050 && np != 30053, "{np}");
}

#[test]
fn a_malformed_retention_annotation_is_a_warning_never_a_refusal() {
    let mut st = small();
    let mut web = node_port("web");
    web["metadata"]["annotations"] =
        json!({crate::state::retention::RETAIN_RELEASED_VALUES: "a week"});
    let d = mutate(&create(web), &mut st);
    let w = warnings(&d);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("svcplane.io/retain-released-values") && w[0].contains("a week"),
        "{w:?}"
    );
}
