//! The validating endpoint on final (allocated) objects.

use serde_json::{Value, json};
use svcplane_allocator::Claim;

use super::*;
use crate::review::validate;

/// A final ClusterIP Service as the API server hands it to validating webhooks.
fn final_cluster_ip(name: &str, ip: &str) -> Value {
    svc(
        name,
        json!({
            "type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"port": 80, "protocol": "TCP"}], "selector": {"app": "x"}
        }),
    )
}

fn final_node_port(name: &str, ip: &str, node_ports: &[i64]) -> Value {
    let ports: Vec<Value> = node_ports
        .iter()
        .enumerate()
        .map(|(i, np)| json!({"name": format!("p{i}"), "port": 80 + i, "protocol": "TCP", "nodePort": np}))
        .collect();
    svc(
        name,
        json!({
            "type": "NodePort", "externalTrafficPolicy": "Cluster",
            "clusterIP": ip, "clusterIPs": [ip], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": ports
        }),
    )
}

fn allowed(d: &ValidateDecision) {
    assert_eq!(
        *d,
        ValidateDecision::Allow {
            warnings: Vec::new()
        }
    );
}

#[test]
fn ip_held_by_another_service_is_denied() {
    let mut st = small();
    hold_other(&mut st, "other", vec![cip("10.0.0.5")]);
    let before = marked(&st);
    let d = validate(&create(final_cluster_ip("web", "10.0.0.5")), &mut st);
    assert_eq!(
        validate_denial(&d),
        "Service \"web\" is invalid: spec.clusterIPs: Invalid value: [\"10.0.0.5\"]: failed to allocate IP 10.0.0.5: provided IP is already allocated"
    );
    assert_eq!(marked(&st), before);
}

#[test]
fn ip_held_by_a_foreign_ip_address_object_is_denied() {
    let mut st = small();
    st.set(
        HolderKey::IpAddress {
            name: "10.0.0.5".into(),
        },
        None,
        vec![cip("10.0.0.5")],
    );
    let d = validate(&create(final_cluster_ip("web", "10.0.0.5")), &mut st);
    assert!(validate_denial(&d).ends_with("provided IP is already allocated"));
}

#[test]
fn node_port_held_by_another_is_denied() {
    let mut st = small();
    hold_other(&mut st, "other", vec![Claim::NodePort(30093)]);
    let d = validate(
        &create(final_node_port("web", "10.0.0.5", &[30001, 30093])),
        &mut st,
    );
    assert_eq!(
        validate_denial(&d),
        "Service \"web\" is invalid: spec.ports[1].nodePort: Invalid value: 30093: provided port is already allocated"
    );
}

#[test]
fn health_check_node_port_held_by_another_is_upstreams_500() {
    let mut st = small();
    hold_other(&mut st, "other", vec![Claim::NodePort(30005)]);
    let obj = svc(
        "lb",
        json!({
            "type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 30005,
            "allocateLoadBalancerNodePorts": false,
            "clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"port": 443}]
        }),
    );
    let ValidateDecision::Deny(e) = validate(&create(obj), &mut st) else {
        panic!("allowed")
    };
    assert_eq!(e.code(), 500);
    assert_eq!(
        e.to_string(),
        "Internal error occurred: failed to allocate requested HealthCheck NodePort 30005: provided port is already allocated"
    );
}

#[test]
fn ip_outside_every_range_network_and_broadcast_are_mismatched() {
    for bad in ["10.1.0.5", "10.0.0.0", "10.0.0.255"] {
        let mut st = small();
        let d = validate(&create(final_cluster_ip("web", bad)), &mut st);
        assert_eq!(
            validate_denial(&d),
            format!(
                "Service \"web\" is invalid: spec.clusterIPs: Invalid value: [\"{bad}\"]: failed to allocate IP {bad}: the provided network does not match the current range"
            )
        );
    }
}

#[test]
fn node_port_outside_the_range_is_denied() {
    let mut st = small();
    let d = validate(
        &create(final_node_port("web", "10.0.0.5", &[32769])),
        &mut st,
    );
    assert_eq!(
        validate_denial(&d),
        "Service \"web\" is invalid: spec.ports[0].nodePort: Invalid value: 32769: provided port is not in the valid range. The range of valid ports is 30000-30099"
    );
}

#[test]
fn malformed_ip_is_denied_at_its_index() {
    let mut st = small();
    let d = validate(&create(final_cluster_ip("web", "10.0.0.300")), &mut st);
    assert_eq!(
        validate_denial(&d),
        "Service \"web\" is invalid: spec.clusterIPs[0]: Invalid value: \"10.0.0.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
    );
}

#[test]
fn wrong_family_is_denied() {
    let mut st = small();
    let mut obj = final_cluster_ip("web", "fd00::5");
    let d = validate(&create(obj.clone()), &mut st);
    assert_eq!(
        validate_denial(&d),
        "Service \"web\" is invalid: spec.clusterIPs[0]: Invalid value: \"fd00::5\": expected an IPv4 value as indicated by `ipFamilies[0]`"
    );
    obj["spec"].as_object_mut().unwrap().remove("ipFamilies");
    let d = validate(&create(obj), &mut st);
    assert_eq!(
        validate_denial(&d),
        "Service \"web\" is invalid: spec.clusterIPs[0]: Invalid value: [\"fd00::5\"]: IPv6 is not configured on this cluster"
    );
}

#[test]
fn own_holders_do_not_conflict_and_nothing_is_left_behind() {
    let mut st = small();
    // The API server's IPAddress object for this Service and our own claim.
    st.set(
        HolderKey::IpAddress {
            name: "10.0.0.5".into(),
        },
        Some(ServiceRef::named("ns", "web")),
        vec![cip("10.0.0.5")],
    );
    st.set(
        HolderKey::Claim {
            name: "np-30001".into(),
        },
        Some(ServiceRef::of_request("ns", "web", "", "mutate-uid")),
        vec![Claim::NodePort(30001)],
    );
    let before = marked(&st);
    allowed(&validate(
        &create(final_node_port("web", "10.0.0.5", &[30001])),
        &mut st,
    ));
    assert_eq!(marked(&st), before);
    assert_eq!(st.holders(cip("10.0.0.5")).len(), 1);
}

#[test]
fn generate_name_reservation_matches_the_generated_name() {
    let mut st = small();
    st.set(
        HolderKey::Claim {
            name: "ip-10-0-0-5".into(),
        },
        Some(ServiceRef::of_request("ns", "", "web-", "mutate-uid")),
        vec![cip("10.0.0.5")],
    );
    let mut obj = final_cluster_ip("web-x7k2p", "10.0.0.5");
    obj["metadata"]["generateName"] = json!("web-");
    // Validating admission sees the generated name.
    allowed(&validate(&create(obj), &mut st));
    // A different Service is still refused.
    let d = validate(&create(final_cluster_ip("api", "10.0.0.5")), &mut st);
    assert!(validate_denial(&d).ends_with("provided IP is already allocated"));
}

#[test]
fn dry_run_placeholders_are_allowed() {
    let mut st = small();
    hold_other(&mut st, "other", vec![cip("10.0.0.5")]);
    // Upstream's dry-run answer: the network address and NodePorts from 32769.
    let obj = final_node_port("web", "10.0.0.0", &[32769]);
    let req = decoded(&review_json("CREATE", "dry", &obj, None, true));
    allowed(&validate(&req, &mut st));
    // The structural rules still apply to dry runs.
    let req = decoded(&review_json(
        "CREATE",
        "dry",
        &final_node_port("web", "garbage", &[32769]),
        None,
        true,
    ));
    assert!(validate_denial(&validate(&req, &mut st)).contains("spec.clusterIPs[0]"));
}

#[test]
fn update_does_not_recheck_kept_values() {
    let mut st = small();
    let old = final_node_port("web", "10.0.0.5", &[30001]);
    // A duplicate that slipped in while the webhook was bypassed.
    hold_other(
        &mut st,
        "other",
        vec![cip("10.0.0.5"), Claim::NodePort(30001)],
    );
    let mut new = old.clone();
    new["metadata"]["labels"] = json!({"touched": "yes"});
    allowed(&validate(&update(new, old), &mut st));
}

#[test]
fn update_checks_newly_taken_values() {
    let mut st = small();
    let old = final_node_port("web", "10.0.0.5", &[30001]);
    hold_other(&mut st, "other", vec![Claim::NodePort(30002)]);
    let new = final_node_port("web", "10.0.0.5", &[30001, 30002]);
    assert_eq!(
        validate_denial(&validate(&update(new, old), &mut st)),
        "Service \"web\" is invalid: spec.ports[1].nodePort: Invalid value: 30002: provided port is already allocated"
    );
}

#[test]
fn update_immutability_is_enforced() {
    let mut st = small();
    let old = final_cluster_ip("web", "10.0.0.5");
    let new = final_cluster_ip("web", "10.0.0.6");
    assert_eq!(
        validate_denial(&validate(&update(new, old), &mut st)),
        "Service \"web\" is invalid: spec.clusterIPs[0]: Invalid value: [\"10.0.0.6\"]: may not change once set"
    );
}

#[test]
fn update_health_check_node_port_change_is_forbidden() {
    let mut st = small();
    let lb = |hc: i64| {
        svc(
            "lb",
            json!({
                "type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": hc,
                "allocateLoadBalancerNodePorts": false,
                "clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                "ports": [{"port": 443}]
            }),
        )
    };
    let ValidateDecision::Deny(e) = validate(&update(lb(30006), lb(30005)), &mut st) else {
        panic!("allowed")
    };
    assert_eq!(
        e.to_string(),
        "Service \"lb\" is invalid: spec.healthCheckNodePort: Forbidden: field is immutable"
    );
    assert_eq!(
        e.causes()[0].error_type.cause_reason(),
        "FieldValueForbidden"
    );
}

#[test]
fn several_structural_errors_are_reported_together() {
    let mut st = small();
    let obj = svc(
        "web",
        json!({
            "type": "ClusterIP", "clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"port": 80, "nodePort": 30001}, {"port": 81, "nodePort": 30001}]
        }),
    );
    // The allocation replay does not look at nodePorts of a ClusterIP Service; the rules do.
    let ValidateDecision::Deny(e) = validate(&create(obj), &mut st) else {
        panic!("allowed")
    };
    assert_eq!(
        e.to_string(),
        "Service \"web\" is invalid: [spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP', spec.ports[1].nodePort: Forbidden: may not be used when `type` is 'ClusterIP', spec.ports[1].nodePort: Duplicate value: 30001]"
    );
}
