//! Mutation on CREATE (AL-5.2, AL-7.2, AL-7.3, WH-13.1, WH-13.4).

use serde_json::json;
use svcplane_allocator::Claim;
use svcplane_allocator::range::IpFamily;

use super::*;
use crate::review::mutate;

fn in_range_upper_band(st: &AllocationState, s: &str) -> bool {
    let a = ip(s);
    st.allocators()
        .family(IpFamily::of(&a))
        .unwrap()
        .ranges()
        .iter()
        .any(|r| r.in_upper_band(a))
}

#[test]
fn rule_13_1_create_sets_cluster_ip_ips_families_and_policy() {
    let mut st = small();
    let req = create(svc("web", cluster_ip_spec()));
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);
    let picked = out["spec"]["clusterIP"].as_str().unwrap().to_string();
    assert_eq!(out["spec"]["clusterIPs"], json!([picked]));
    assert_eq!(out["spec"]["ipFamilies"], json!(["IPv4"]));
    assert_eq!(out["spec"]["ipFamilyPolicy"], json!("SingleStack"));
    // KEP-3070: automatic picks come from the dynamic (upper) band.
    assert!(in_range_upper_band(&st, &picked), "{picked}");
    assert_eq!(reserved(&d), vec![cip(&picked)]);
    assert!(warnings(&d).is_empty());
    // Reserved under the request's Pending holder.
    let holders = st.holders(cip(&picked));
    assert_eq!(
        holders[0].key,
        HolderKey::Pending {
            request_uid: "uid-1".into()
        }
    );
    // Exactly four ops, all `add`.
    let ops = ops(&d);
    let paths: Vec<&str> = ops
        .as_array()
        .unwrap()
        .iter()
        .inspect(|o| assert_eq!(o["op"], "add"))
        .map(|o| o["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "/spec/clusterIP",
            "/spec/clusterIPs",
            "/spec/ipFamilies",
            "/spec/ipFamilyPolicy"
        ]
    );
}

#[test]
fn rule_13_1_patch_keeps_fields_unknown_to_k8s_openapi() {
    let mut st = state("10.0.0.0/24", "30000-30099");
    let mut obj = svc(
        "web",
        json!({
            "type": "NodePort",
            "ports": [{"port": 80, "protocol": "TCP", "futurePortField": "x"}],
            "futureSpecField": {"a": [1, {"b": null}]},
            "clusterIP": ""
        }),
    );
    obj["metadata"]["futureMetaField"] = json!("keep");
    obj["futureTopLevel"] = json!({"deep": true});
    let req = create(obj.clone());
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);

    // The result is the raw object plus exactly the assigned members.
    let mut expected = obj;
    let spec = &out["spec"];
    expected["spec"]["clusterIP"] = spec["clusterIP"].clone();
    expected["spec"]["clusterIPs"] = spec["clusterIPs"].clone();
    expected["spec"]["ipFamilies"] = json!(["IPv4"]);
    expected["spec"]["ipFamilyPolicy"] = json!("SingleStack");
    expected["spec"]["ports"][0]["nodePort"] = spec["ports"][0]["nodePort"].clone();
    assert_eq!(out, expected);
    assert!(spec["clusterIP"].as_str().unwrap().starts_with("10.0.0."));
    let np = spec["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=30099).contains(&np));
    assert_eq!(
        out["spec"]["futureSpecField"],
        json!({"a": [1, {"b": null}]})
    );
    assert_eq!(out["spec"]["ports"][0]["futurePortField"], "x");
}

#[test]
fn rule_7_2_node_port_create_gets_one_port_per_port_number() {
    let mut st = small();
    let req = create(svc(
        "dns",
        json!({
            "type": "NodePort",
            "ports": [
                {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                {"name": "dns-udp", "port": 53, "protocol": "UDP"},
                {"name": "http", "port": 80, "protocol": "TCP"}
            ]
        }),
    ));
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);
    let np = |i: usize| out["spec"]["ports"][i]["nodePort"].as_i64().unwrap();
    assert_eq!(np(0), np(1), "53/TCP and 53/UDP share a nodePort");
    assert_ne!(np(0), np(2));
    let ports: Vec<Claim> = reserved(&d)
        .into_iter()
        .filter(|c| matches!(c, Claim::NodePort(_)))
        .collect();
    assert_eq!(ports.len(), 2);
}

#[test]
fn rule_7_2_user_node_port_is_shared_by_the_other_protocol() {
    let mut st = small();
    let req = create(svc(
        "dns",
        json!({
            "type": "NodePort",
            "ports": [
                {"name": "tcp", "port": 53, "protocol": "TCP", "nodePort": 30053},
                {"name": "udp", "port": 53, "protocol": "UDP"}
            ]
        }),
    ));
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);
    assert_eq!(out["spec"]["ports"][1]["nodePort"], 30053);
    let ops = ops(&d);
    assert!(
        !ops.as_array()
            .unwrap()
            .iter()
            .any(|o| o["path"] == "/spec/ports/0/nodePort"),
        "the user's own value is not rewritten: {ops}"
    );
}

#[test]
fn rule_7_3_load_balancer_local_gets_health_check_node_port() {
    let mut st = small();
    let req = create(svc(
        "lb",
        json!({
            "type": "LoadBalancer",
            "externalTrafficPolicy": "Local",
            "allocateLoadBalancerNodePorts": false,
            "ports": [{"port": 443, "protocol": "TCP"}]
        }),
    ));
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);
    let hc = out["spec"]["healthCheckNodePort"].as_i64().unwrap();
    assert!((30000..=30099).contains(&hc));
    assert!(
        out["spec"]["ports"][0].get("nodePort").is_none(),
        "allocateLoadBalancerNodePorts: false skips nodePorts"
    );
}

#[test]
fn rule_13_1_external_name_is_not_touched() {
    let mut st = small();
    let before = marked(&st);
    let req = create(svc(
        "ext",
        json!({"type": "ExternalName", "externalName": "example.com"}),
    ));
    let d = mutate(&req, &mut st);
    assert_eq!(ops(&d), json!([]));
    assert!(reserved(&d).is_empty());
    assert_eq!(marked(&st), before);
}

#[test]
fn rule_13_1_headless_gets_no_patch() {
    let mut st = small();
    let req = create(svc(
        "h",
        json!({"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"], "ports": [{"port": 80}]}),
    ));
    let d = mutate(&req, &mut st);
    assert_eq!(ops(&d), json!([]));
    assert!(reserved(&d).is_empty());
}

#[test]
fn rule_13_1_user_cluster_ip_is_kept_and_reserved() {
    let mut st = small();
    let req = create(svc(
        "web",
        json!({"type": "ClusterIP", "clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"], "ports": [{"port": 80}]}),
    ));
    let d = mutate(&req, &mut st);
    assert_eq!(ops(&d), json!([]));
    assert_eq!(reserved(&d), vec![cip("10.0.0.5")]);
}

#[test]
fn rule_5_1_old_client_cluster_ip_only_is_not_rewritten() {
    let mut st = small();
    let req = create(svc(
        "web",
        json!({"type": "ClusterIP", "clusterIP": "10.0.0.5", "ports": [{"port": 80}]}),
    ));
    let d = mutate(&req, &mut st);
    assert_eq!(
        ops(&d),
        json!([]),
        "the API server normalises clusterIPs itself"
    );
    assert_eq!(reserved(&d), vec![cip("10.0.0.5")]);
}

#[test]
fn rule_5_2_user_ip_outside_the_range_is_denied() {
    let mut st = small();
    let req = create(svc(
        "web",
        json!({"type": "ClusterIP", "clusterIP": "10.200.0.5", "clusterIPs": ["10.200.0.5"], "ports": [{"port": 80}]}),
    ));
    let d = mutate(&req, &mut st);
    assert_eq!(
        denial(&d),
        "Service \"web\" is invalid: spec.clusterIPs: Invalid value: [\"10.200.0.5\"]: failed to allocate IP 10.200.0.5: the provided network does not match the current range"
    );
}

/// WH-8.7: kube-apiserver 1.36 checks a dry run against one range and words a miss
/// as that range's `ErrNotInRange` (measured: `kubectl create --dry-run=server` of
/// 10.97.0.5 on a 10.96.0.0/16 cluster); a real create says the network does not match.
#[test]
fn rule_wh_8_7_a_dry_run_outside_every_range_is_worded_as_upstreams_dry_run() {
    let mut st = small();
    let object = svc(
        "web",
        json!({"type": "ClusterIP", "clusterIP": "10.200.0.5", "clusterIPs": ["10.200.0.5"], "ports": [{"port": 80}]}),
    );
    let dry = decoded(&review_json("CREATE", "uid-d", &object, None, true));
    assert_eq!(
        denial(&mutate(&dry, &mut st)),
        "Service \"web\" is invalid: spec.clusterIPs: Invalid value: [\"10.200.0.5\"]: failed to allocate IP 10.200.0.5: the provided IP (10.200.0.5) is not in the valid range. The range of valid IPs is 10.0.0.0/24"
    );
    // The network address is outside the usable range too, in a dry run as upstream.
    let object = svc(
        "net",
        json!({"type": "ClusterIP", "clusterIP": "10.0.0.0", "clusterIPs": ["10.0.0.0"], "ports": [{"port": 80}]}),
    );
    let dry = decoded(&review_json("CREATE", "uid-n", &object, None, true));
    assert!(
        denial(&mutate(&dry, &mut st))
            .ends_with("the provided IP (10.0.0.0) is not in the valid range. The range of valid IPs is 10.0.0.0/24")
    );
}

#[test]
fn rule_wh_8_7_a_dry_run_of_a_taken_address_keeps_svcplanes_stricter_refusal() {
    // Upstream's dry run does not look at what is taken; svcplane refuses as the real
    // create would be refused, with the real create's words.
    let mut st = small();
    hold_other(&mut st, "other", vec![cip("10.0.0.5")]);
    let object = svc(
        "web",
        json!({"type": "ClusterIP", "clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"], "ports": [{"port": 80}]}),
    );
    let dry = decoded(&review_json("CREATE", "uid-d", &object, None, true));
    assert!(denial(&mutate(&dry, &mut st)).ends_with("provided IP is already allocated"));
}

#[test]
fn rule_5_2_user_ip_held_by_another_service_is_denied() {
    let mut st = small();
    hold_other(&mut st, "other", vec![cip("10.0.0.5")]);
    let before = marked(&st);
    let req = create(svc(
        "web",
        json!({"type": "ClusterIP", "clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"], "ports": [{"port": 80}]}),
    ));
    let d = mutate(&req, &mut st);
    assert_eq!(
        denial(&d),
        "Service \"web\" is invalid: spec.clusterIPs: Invalid value: [\"10.0.0.5\"]: failed to allocate IP 10.0.0.5: provided IP is already allocated"
    );
    assert_eq!(marked(&st), before, "a denial leaves no trace");
    assert!(
        st.holders(cip("10.0.0.5"))
            .iter()
            .all(|h| !matches!(h.key, HolderKey::Pending { .. }))
    );
}

#[test]
fn rule_8_3_malformed_user_ip_is_denied_at_its_index() {
    let mut st = small();
    let req = create(svc(
        "web",
        json!({"type": "ClusterIP", "clusterIP": "garbage", "clusterIPs": ["garbage"], "ports": [{"port": 80}]}),
    ));
    assert_eq!(
        denial(&mutate(&req, &mut st)),
        "Service \"web\" is invalid: spec.clusterIPs[0]: Invalid value: \"garbage\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
    );
}

#[test]
fn rule_7_2_user_node_port_taken_or_out_of_range_is_denied() {
    let mut st = small();
    hold_other(&mut st, "other", vec![Claim::NodePort(30093)]);
    let spec = |np: i64| json!({"type": "NodePort", "ports": [{"name": "a", "port": 80, "nodePort": 30001}, {"name": "b", "port": 81, "nodePort": np}]});
    assert_eq!(
        denial(&mutate(&create(svc("web", spec(30093))), &mut st)),
        "Service \"web\" is invalid: spec.ports[1].nodePort: Invalid value: 30093: provided port is already allocated"
    );
    assert_eq!(
        denial(&mutate(&create(svc("web", spec(40000))), &mut st)),
        "Service \"web\" is invalid: spec.ports[1].nodePort: Invalid value: 40000: provided port is not in the valid range. The range of valid ports is 30000-30099"
    );
    assert!(!st.allocators().has(Claim::NodePort(30001)), "rolled back");
}

#[test]
fn rule_5_2_full_range_is_internal_error() {
    let mut st = state("10.0.0.0/30", "30000-30099");
    hold_other(&mut st, "a", vec![cip("10.0.0.1"), cip("10.0.0.2")]);
    let d = mutate(&create(svc("web", cluster_ip_spec())), &mut st);
    let MutateDecision::Deny(e) = &d else {
        panic!("{d:?}")
    };
    assert_eq!(e.code(), 500);
    assert_eq!(e.reason(), "InternalError");
    assert_eq!(
        e.to_string(),
        "Internal error occurred: failed to allocate a serviceIP: range is full"
    );
}

#[test]
fn rule_7_2_full_node_port_range_is_internal_error() {
    let mut st = state("10.0.0.0/24", "30000-30001");
    hold_other(
        &mut st,
        "a",
        vec![Claim::NodePort(30000), Claim::NodePort(30001)],
    );
    let before = marked(&st);
    let d = mutate(
        &create(svc(
            "web",
            json!({"type": "NodePort", "ports": [{"port": 80}]}),
        )),
        &mut st,
    );
    assert_eq!(
        denial(&d),
        "Internal error occurred: failed to allocate a nodePort: range is full"
    );
    assert_eq!(
        marked(&st),
        before,
        "the ClusterIP taken first is rolled back"
    );
}

#[test]
fn rule_4_dual_stack_prefer_gets_both_families() {
    let mut st = state("10.0.0.0/24,fd00::/112", "30000-30099");
    let mut spec = cluster_ip_spec();
    spec["ipFamilyPolicy"] = json!("PreferDualStack");
    let req = create(svc("web", spec));
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);
    let ips = out["spec"]["clusterIPs"].as_array().unwrap();
    assert_eq!(ips.len(), 2);
    assert_eq!(out["spec"]["clusterIP"], ips[0]);
    assert!(ips[0].as_str().unwrap().starts_with("10.0.0."));
    assert!(ips[1].as_str().unwrap().starts_with("fd00::"));
    assert_eq!(out["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    assert_eq!(out["spec"]["ipFamilyPolicy"], "PreferDualStack");
    assert!(
        !ops(&d)
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["path"] == "/spec/ipFamilyPolicy"),
        "the client's policy is not rewritten"
    );
}

#[test]
fn rule_13_1_user_primary_with_picked_secondary_sets_both() {
    let mut st = state("10.0.0.0/24,fd00::/112", "30000-30099");
    let req = create(svc(
        "web",
        json!({"type": "ClusterIP", "ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.0.0.7", "clusterIPs": ["10.0.0.7"], "ports": [{"port": 80}]}),
    ));
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);
    assert_eq!(out["spec"]["clusterIPs"][0], "10.0.0.7");
    assert!(
        out["spec"]["clusterIPs"][1]
            .as_str()
            .unwrap()
            .starts_with("fd00::")
    );
    let paths: Vec<String> = ops(&d)
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(paths, ["/spec/clusterIPs", "/spec/ipFamilies"]);
}

#[test]
fn rule_13_1_reinvocation_is_idempotent() {
    let mut st = small();
    let first = create(svc(
        "web",
        json!({"type": "NodePort", "ports": [{"port": 80}]}),
    ));
    let d1 = mutate(&first, &mut st);
    let out = patched(&first, &d1);
    // The reinvoked request (a new uid) carries our own patch back.
    let again = decoded(&review_json("CREATE", "uid-again", &out, None, false));
    let d2 = mutate(&again, &mut st);
    assert_eq!(ops(&d2), json!([]));
    assert!(warnings(&d2).is_empty(), "our own picks are not hand picks");
}

#[test]
fn rule_8_2_doomed_request_is_left_to_the_api_server() {
    let mut st = small();
    let before = marked(&st);
    // Headless NodePort: upstream allocates, then validation rejects it.
    let req = create(svc(
        "h",
        json!({"type": "NodePort", "clusterIP": "None", "clusterIPs": ["None"], "ports": [{"port": 80}]}),
    ));
    let d = mutate(&req, &mut st);
    assert_eq!(ops(&d), json!([]));
    assert!(reserved(&d).is_empty());
    assert_eq!(marked(&st), before);
    assert!(st.holders(Claim::NodePort(30000)).is_empty());
}

#[test]
fn rule_5_5_dry_run_still_gets_real_free_values() {
    let mut st = small();
    let req = decoded(&review_json(
        "CREATE",
        "dry",
        &svc("web", json!({"type": "NodePort", "ports": [{"port": 80}]})),
        None,
        true,
    ));
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);
    assert_ne!(
        out["spec"]["clusterIP"], "10.0.0.0",
        "not upstream's placeholder"
    );
    let np = out["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=30099).contains(&np), "{np}");
}

#[test]
fn rule_13_3_picks_skip_values_held_by_others() {
    // A /29 has 6 usable addresses; the others hold five of them.
    let mut st = state("10.0.0.0/29", "30000-30099");
    let taken = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.5", "10.0.0.6"];
    hold_other(&mut st, "other", taken.iter().map(|s| cip(s)).collect());
    let d = mutate(&create(svc("web", cluster_ip_spec())), &mut st);
    assert_eq!(reserved(&d), vec![cip("10.0.0.4")]);
}

#[test]
fn rule_13_1_missing_spec_is_created_before_member_ops() {
    let mut st = small();
    let mut req = create(svc("web", cluster_ip_spec()));
    // Same typed Service, raw object without a spec (never sent by a real API server).
    req.object.as_object_mut().unwrap().remove("spec");
    let d = mutate(&req, &mut st);
    let first = &ops(&d)[0];
    assert_eq!(first["path"], "/spec");
    let out = patched(&req, &d);
    assert!(out["spec"]["clusterIP"].is_string());
}

/// RelaxedServiceNameValidation (GA in 1.37): a Service whose name starts with a
/// digit is admitted and allocated like any other; the webhook never judges names.
#[test]
fn rule_13_1_a_service_name_may_start_with_a_digit() {
    let mut st = state("10.0.0.0/24", "30000-30099");
    let req = create(svc(
        "0web",
        json!({"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP"}]}),
    ));
    let d = mutate(&req, &mut st);
    let out = patched(&req, &d);
    assert!(out["spec"]["clusterIP"].as_str().is_some(), "{out}");
    assert!(
        out["spec"]["ports"][0]["nodePort"].as_i64().is_some(),
        "{out}"
    );
    assert_eq!(reserved(&d).len(), 2);
}
