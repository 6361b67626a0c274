//! Mutation on UPDATE (AL-5.1, AL-5.3, AL-7.3, AL-7.4, WH-13.1).

use serde_json::{Value, json};
use svcplane_allocator::{AllocatorConfig, Claim};

use super::*;
use crate::review::mutate;

/// A stored ClusterIP Service `web` holding 10.0.0.50, registered in the state.
fn stored_cluster_ip(st: &mut AllocationState) -> Value {
    let old = svc(
        "web",
        json!({
            "type": "ClusterIP",
            "clusterIP": "10.0.0.50", "clusterIPs": ["10.0.0.50"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
            "selector": {"app": "x"}
        }),
    );
    hold_self(st, vec![cip("10.0.0.50")]);
    old
}

fn hold_self(st: &mut AllocationState, values: Vec<Claim>) {
    st.set(
        HolderKey::Service {
            namespace: "ns".into(),
            name: "web".into(),
        },
        Some(ServiceRef::named("ns", "web")),
        values,
    );
}

fn op_paths(d: &MutateDecision) -> Vec<String> {
    ops(d)
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn rule_13_1_type_change_to_node_port_gets_node_ports_only() {
    let mut st = small();
    let old = stored_cluster_ip(&mut st);
    // The client omitted clusterIP(s): the API server copies them from old.
    let new = svc(
        "web",
        json!({
            "type": "NodePort", "externalTrafficPolicy": "Cluster",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
            "selector": {"app": "x"}
        }),
    );
    let req = update(new, old);
    let d = mutate(&req, &mut st);
    assert_eq!(op_paths(&d), ["/spec/ports/0/nodePort"]);
    let out = patched(&req, &d);
    assert!(out["spec"].get("clusterIP").is_none(), "not filled");
    let np = out["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert_eq!(
        reserved(&d),
        vec![Claim::NodePort(i32::try_from(np).unwrap())]
    );
}

#[test]
fn rule_5_1_omitted_cluster_ip_is_not_filled() {
    let mut st = small();
    let old = stored_cluster_ip(&mut st);
    let new = svc("web", cluster_ip_spec());
    let d = mutate(&update(new, old), &mut st);
    assert_eq!(ops(&d), json!([]));
    assert!(reserved(&d).is_empty());
}

#[test]
fn rule_13_1_unchanged_update_is_empty() {
    let mut st = small();
    let old = stored_cluster_ip(&mut st);
    let before = marked(&st);
    let d = mutate(&update(old.clone(), old), &mut st);
    assert_eq!(ops(&d), json!([]));
    assert!(warnings(&d).is_empty());
    assert_eq!(marked(&st), before);
}

#[test]
fn rule_5_3_external_name_to_cluster_ip_allocates_like_a_create() {
    let mut st = small();
    let old = svc(
        "web",
        json!({"type": "ExternalName", "externalName": "example.com"}),
    );
    let req = update(svc("web", cluster_ip_spec()), old);
    let d = mutate(&req, &mut st);
    assert_eq!(
        op_paths(&d),
        [
            "/spec/clusterIP",
            "/spec/clusterIPs",
            "/spec/ipFamilies",
            "/spec/ipFamilyPolicy"
        ]
    );
    let out = patched(&req, &d);
    assert_eq!(out["spec"]["clusterIPs"][0], out["spec"]["clusterIP"]);
    assert_eq!(reserved(&d).len(), 1);
}

#[test]
fn rule_5_3_to_external_name_assigns_nothing() {
    let mut st = small();
    let old = stored_cluster_ip(&mut st);
    let new = svc(
        "web",
        json!({"type": "ExternalName", "externalName": "example.com"}),
    );
    let d = mutate(&update(new, old), &mut st);
    assert_eq!(ops(&d), json!([]));
    assert!(
        st.allocators().has(cip("10.0.0.50")),
        "released only after the write"
    );
}

fn dual_stack_old(st: &mut AllocationState) -> Value {
    stored_cluster_ip(st)
}

#[test]
fn rule_5_3_dual_stack_upgrade_carries_primary_and_new_secondary() {
    let mut st = state("10.0.0.0/24,fd00::/112", "30000-30099");
    let old = dual_stack_old(&mut st);
    let mut new = old.clone();
    new["spec"]["ipFamilyPolicy"] = json!("RequireDualStack");
    new["spec"]["ipFamilies"] = json!(["IPv4"]);
    let req = update(new, old);
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);
    let ips = out["spec"]["clusterIPs"].as_array().unwrap();
    assert_eq!(ips[0], "10.0.0.50", "primary copied from old");
    assert!(ips[1].as_str().unwrap().starts_with("fd00::"));
    assert_eq!(out["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    assert_eq!(op_paths(&d), ["/spec/clusterIPs", "/spec/ipFamilies"]);
    assert_eq!(reserved(&d).len(), 1, "only the secondary is new");
}

#[test]
fn rule_5_3_dual_stack_upgrade_with_cluster_ips_omitted() {
    let mut st = state("10.0.0.0/24,fd00::/112", "30000-30099");
    let old = dual_stack_old(&mut st);
    let new = svc(
        "web",
        json!({"type": "ClusterIP", "ipFamilyPolicy": "PreferDualStack", "ports": [{"name": "http", "port": 80}], "selector": {"app": "x"}}),
    );
    let req = update(new, old);
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);
    assert_eq!(out["spec"]["clusterIP"], "10.0.0.50");
    assert_eq!(out["spec"]["clusterIPs"][0], "10.0.0.50");
    assert_eq!(out["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    assert!(!op_paths(&d).contains(&"/spec/ipFamilyPolicy".to_string()));
}

fn stored_node_port(st: &mut AllocationState) -> Value {
    let old = svc(
        "web",
        json!({
            "type": "NodePort", "externalTrafficPolicy": "Cluster",
            "clusterIP": "10.0.0.50", "clusterIPs": ["10.0.0.50"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30050}],
            "selector": {"app": "x"}
        }),
    );
    hold_self(st, vec![cip("10.0.0.50"), Claim::NodePort(30050)]);
    old
}

#[test]
fn rule_7_4_omitted_node_ports_are_not_filled_and_new_ports_are() {
    let mut st = small();
    let old = stored_node_port(&mut st);
    let new = svc(
        "web",
        json!({
            "type": "NodePort", "externalTrafficPolicy": "Cluster",
            "ports": [
                {"name": "http", "port": 80, "protocol": "TCP"},
                {"name": "https", "port": 443, "protocol": "TCP"}
            ],
            "selector": {"app": "x"}
        }),
    );
    let req = update(new, old);
    let d = mutate(&req, &mut st);
    assert_eq!(op_paths(&d), ["/spec/ports/1/nodePort"]);
    let out = patched(&req, &d);
    assert!(out["spec"]["ports"][0].get("nodePort").is_none());
    assert_ne!(out["spec"]["ports"][1]["nodePort"], 30050);
}

#[test]
fn rule_7_3_becoming_local_gets_a_health_check_node_port() {
    let mut st = small();
    let old = svc(
        "lb",
        json!({
            "type": "LoadBalancer", "externalTrafficPolicy": "Cluster", "allocateLoadBalancerNodePorts": true,
            "clusterIP": "10.0.0.60", "clusterIPs": ["10.0.0.60"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "https", "port": 443, "nodePort": 30060}]
        }),
    );
    st.set(
        HolderKey::Service {
            namespace: "ns".into(),
            name: "lb".into(),
        },
        Some(ServiceRef::named("ns", "lb")),
        vec![cip("10.0.0.60"), Claim::NodePort(30060)],
    );
    let mut new = old.clone();
    new["spec"]["externalTrafficPolicy"] = json!("Local");
    let req = update(new, old);
    let d = mutate(&req, &mut st);
    assert_eq!(op_paths(&d), ["/spec/healthCheckNodePort"]);
}

#[test]
fn rule_7_4_new_user_node_port_held_by_another_is_denied() {
    let mut st = small();
    let old = stored_node_port(&mut st);
    hold_other(&mut st, "other", vec![Claim::NodePort(30070)]);
    let mut new = old.clone();
    new["spec"]["ports"][0]["nodePort"] = json!(30070);
    assert_eq!(
        denial(&mutate(&update(new, old), &mut st)),
        "Service \"web\" is invalid: spec.ports[0].nodePort: Invalid value: 30070: provided port is already allocated"
    );
}

#[test]
fn rule_8_4_changed_cluster_ip_is_left_to_the_api_server() {
    let mut st = small();
    let old = stored_cluster_ip(&mut st);
    let mut new = old.clone();
    new["spec"]["clusterIP"] = json!("10.0.0.51");
    new["spec"]["clusterIPs"] = json!(["10.0.0.51"]);
    let before = marked(&st);
    let d = mutate(&update(new, old), &mut st);
    assert_eq!(ops(&d), json!([]));
    assert!(reserved(&d).is_empty());
    assert_eq!(marked(&st), before);
}

/// An update adding a port or turning `Local` must never be handed a nodePort the
/// same Service already uses (one nodePort for two port numbers, WH-13.4): with the
/// Service's own values freed for re-evaluation, the kept ones are held again.
#[test]
fn rule_13_4_an_update_never_reuses_a_node_port_the_service_keeps() {
    for seed in 0..40u64 {
        let mut st = AllocationState::new(
            AllocatorConfig::from_flags("10.0.0.0/24", "30000-30001")
                .unwrap()
                .allocators(seed)
                .unwrap(),
        );
        let spec = |ports: Value, etp: &str| {
            json!({
                "type": "LoadBalancer", "allocateLoadBalancerNodePorts": true,
                "clusterIP": "10.0.0.50", "clusterIPs": ["10.0.0.50"],
                "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                "externalTrafficPolicy": etp, "ports": ports, "selector": {"app": "x"}
            })
        };
        let old = svc(
            "web",
            spec(
                json!([{"name": "a", "port": 80, "protocol": "TCP", "nodePort": 30000}]),
                "Cluster",
            ),
        );
        hold_self(&mut st, vec![cip("10.0.0.50"), Claim::NodePort(30000)]);
        // A second port number (other protocol): gets the only other port.
        let new = svc(
            "web",
            spec(
                json!([
                    {"name": "a", "port": 80, "protocol": "TCP", "nodePort": 30000},
                    {"name": "b", "port": 81, "protocol": "UDP"}
                ]),
                "Cluster",
            ),
        );
        let req = update(new, old.clone());
        let d = mutate(&req, &mut st);
        let doc = patched(&req, &d);
        assert_eq!(doc["spec"]["ports"][1]["nodePort"], 30001, "seed {seed}");
        st.remove(&HolderKey::Pending {
            request_uid: "uid-2".into(),
        });
        // Turning Local needs a healthCheckNodePort: the only free one, never 30000.
        let local = svc(
            "web",
            spec(
                json!([{"name": "a", "port": 80, "protocol": "TCP", "nodePort": 30000}]),
                "Local",
            ),
        );
        let req = update(local, old);
        let d = mutate(&req, &mut st);
        assert_eq!(
            patched(&req, &d)["spec"]["healthCheckNodePort"],
            30001,
            "seed {seed}"
        );
    }
}
