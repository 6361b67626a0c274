//! AL-5 (create/update/delete of ClusterIPs) and AL-7.2 to AL-7.4 (NodePorts,
//! healthCheckNodePort), one table per rule.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;

use common::{allocators, cluster_ips, families, node_ports, spec, svc};
use k8s_openapi::api::core::v1::Service;
use rstest::rstest;
use serde_json::{Value, json};
use svcplane_allocator::{Allocators, Claim};

const V4: &str = "10.0.0.0/16";
const DUAL: &str = "10.0.0.0/16,fd00::/108";

fn al(cidrs: &str) -> Allocators {
    allocators(cidrs, "30000-32767", 7)
}

fn create_ok(al: &mut Allocators, name: &str, spec_json: Value) -> Service {
    let mut s = svc("default", name, spec_json);
    let txn = al.allocate_create(&mut s, false).unwrap();
    al.commit(txn);
    s
}

fn update(
    al: &mut Allocators,
    old: &Service,
    spec_json: Value,
) -> Result<Service, svcplane_allocator::ServiceError> {
    let mut new = svc("default", old.metadata.name.as_deref().unwrap(), spec_json);
    let txn = al.allocate_update(&mut new, old, false)?;
    al.commit(txn);
    Ok(new)
}

/// AL-5.2 static IP failures: 422 on `spec.clusterIPs` with the whole list as value.
#[rstest]
#[case::already_allocated(
    "10.0.0.5",
    true,
    "Service \"web\" is invalid: spec.clusterIPs: Invalid value: [\"10.0.0.5\"]: failed to allocate IP 10.0.0.5: provided IP is already allocated"
)]
#[case::out_of_range(
    "192.168.0.5",
    false,
    "Service \"web\" is invalid: spec.clusterIPs: Invalid value: [\"192.168.0.5\"]: failed to allocate IP 192.168.0.5: the provided network does not match the current range"
)]
#[case::network_address(
    "10.0.0.0",
    false,
    "Service \"web\" is invalid: spec.clusterIPs: Invalid value: [\"10.0.0.0\"]: failed to allocate IP 10.0.0.0: the provided network does not match the current range"
)]
#[case::broadcast_address(
    "10.0.255.255",
    false,
    "Service \"web\" is invalid: spec.clusterIPs: Invalid value: [\"10.0.255.255\"]: failed to allocate IP 10.0.255.255: the provided network does not match the current range"
)]
fn static_ip_failure_is_422(#[case] ip: &str, #[case] pre_taken: bool, #[case] msg: &str) {
    let mut a = al(V4);
    if pre_taken {
        create_ok(
            &mut a,
            "first",
            json!({"clusterIP": ip, "ports": [{"port": 80}]}),
        );
    }
    let mut s = svc(
        "default",
        "web",
        json!({"clusterIP": ip, "ports": [{"port": 80}]}),
    );
    let e = a.allocate_create(&mut s, false).unwrap_err();
    assert_eq!(e.code(), 422);
    assert_eq!(e.reason(), "Invalid");
    assert_eq!(e.to_string(), msg);
}

/// AL-5.2 dynamic failure: 500 `failed to allocate a serviceIP: range is full`.
#[test]
fn dynamic_ip_failure_is_500() {
    let mut a = allocators("10.0.0.0/30", "30000-32767", 1);
    create_ok(&mut a, "a", json!({"ports": [{"port": 80}]}));
    create_ok(&mut a, "b", json!({"ports": [{"port": 80}]}));
    let mut s = svc("default", "c", json!({"ports": [{"port": 80}]}));
    let e = a.allocate_create(&mut s, false).unwrap_err();
    assert_eq!(e.code(), 500);
    assert_eq!(e.reason(), "InternalError");
    assert_eq!(
        e.to_string(),
        "Internal error occurred: failed to allocate a serviceIP: range is full"
    );
}

/// AL-5.2 allocation is transactional: a later failure releases the IPs already taken.
#[test]
fn create_failure_rolls_back() {
    let mut a = al(DUAL);
    create_ok(
        &mut a,
        "holder",
        json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}),
    );
    let used_v4 = a
        .family(svcplane_allocator::IpFamily::V4)
        .unwrap()
        .allocated()
        .len();
    let mut s = svc(
        "default",
        "web",
        json!({"type": "NodePort", "ipFamilyPolicy": "RequireDualStack",
        "ports": [{"port": 80, "nodePort": 30080}]}),
    );
    let e = a.allocate_create(&mut s, false).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Service \"web\" is invalid: spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated"
    );
    assert_eq!(
        a.family(svcplane_allocator::IpFamily::V4)
            .unwrap()
            .allocated()
            .len(),
        used_v4
    );
    assert!(
        a.family(svcplane_allocator::IpFamily::V6)
            .unwrap()
            .allocated()
            .is_empty()
    );
}

/// AL-7.2 which ports get a nodePort, and TCP/UDP sharing.
#[rstest]
#[case::cluster_ip_gets_none(json!({"ports": [{"port": 80}]}), &[0][..])]
#[case::explicit_kept(json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}), &[30080][..])]
#[case::tcp_udp_same_port_share_requested(json!({"type": "NodePort", "ports": [
    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "nodePort": 30053},
    {"name": "dns-udp", "port": 53, "protocol": "UDP"}]}), &[30053, 30053][..])]
#[case::later_entry_request_used_for_earlier(json!({"type": "NodePort", "ports": [
    {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
    {"name": "dns-udp", "port": 53, "protocol": "UDP", "nodePort": 30053}]}), &[30053, 30053][..])]
#[case::lb_no_alloc_leaves_zero(json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}]}), &[0][..])]
#[case::lb_no_alloc_honours_explicit(json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [
    {"name": "a", "port": 80}, {"name": "b", "port": 81, "nodePort": 30081}]}), &[0, 30081][..])]
fn node_port_assignment(#[case] spec_json: Value, #[case] expect: &[i32]) {
    let mut a = al(V4);
    let s = create_ok(&mut a, "web", spec_json);
    assert_eq!(node_ports(&s), expect);
}

/// AL-7.2 dynamic nodePorts: same `port` number shares one nodePort, different numbers never do.
#[test]
fn dynamic_node_port_sharing() {
    let mut a = al(V4);
    let s = create_ok(
        &mut a,
        "web",
        json!({"type": "NodePort", "ports": [
        {"name": "a", "port": 53, "protocol": "TCP"}, {"name": "b", "port": 53, "protocol": "UDP"},
        {"name": "c", "port": 80, "protocol": "TCP"}]}),
    );
    let np = node_ports(&s);
    assert_eq!(np[0], np[1]);
    assert_ne!(np[0], np[2]);
    assert!(np.iter().all(|p| (30086..=32767).contains(p)), "{np:?}");
    assert_eq!(a.node_ports().used(), 2);
}

/// AL-7.2 failures: same nodePort for different `port` numbers, out of range, full.
#[rstest]
#[case::different_port_numbers(json!({"type": "NodePort", "ports": [
    {"name": "a", "port": 80, "protocol": "TCP", "nodePort": 30093}, {"name": "b", "port": 81, "protocol": "UDP", "nodePort": 30093}]}),
    422, "Service \"web\" is invalid: spec.ports[1].nodePort: Invalid value: 30093: provided port is already allocated")]
#[case::out_of_range(json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 8080}]}),
    422, "Service \"web\" is invalid: spec.ports[0].nodePort: Invalid value: 8080: provided port is not in the valid range. The range of valid ports is 30000-32767")]
fn node_port_errors(#[case] spec_json: Value, #[case] code: u16, #[case] msg: &str) {
    let mut a = al(V4);
    let mut s = svc("default", "web", spec_json);
    let e = a.allocate_create(&mut s, false).unwrap_err();
    assert_eq!(e.code(), code);
    assert_eq!(e.to_string(), msg);
    assert_eq!(a.node_ports().used(), 0, "rolled back");
}

/// AL-7.2 dynamic nodePort failure is a 500.
#[test]
fn node_port_full_is_500() {
    let mut a = allocators(V4, "30000-30000", 1);
    create_ok(
        &mut a,
        "a",
        json!({"type": "NodePort", "ports": [{"port": 80}]}),
    );
    let mut s = svc(
        "default",
        "b",
        json!({"type": "NodePort", "ports": [{"port": 80}]}),
    );
    let e = a.allocate_create(&mut s, false).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Internal error occurred: failed to allocate a nodePort: range is full"
    );
    assert_eq!(e.code(), 500);
}

/// AL-7.3 healthCheckNodePort allocated iff LoadBalancer + Local, independent of allocateLoadBalancerNodePorts.
#[rstest]
#[case::lb_local(json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [{"port": 80}]}), true)]
#[case::lb_local_no_node_ports(json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}]}), true)]
#[case::lb_cluster(json!({"type": "LoadBalancer", "externalTrafficPolicy": "Cluster", "ports": [{"port": 80}]}), false)]
#[case::node_port_local(json!({"type": "NodePort", "externalTrafficPolicy": "Local", "ports": [{"port": 80}]}), false)]
fn health_check_node_port_needed(#[case] spec_json: Value, #[case] needed: bool) {
    let mut a = al(V4);
    let s = create_ok(&mut a, "web", spec_json);
    let hc = spec(&s).health_check_node_port.unwrap_or(0);
    assert_eq!(hc != 0, needed);
    if needed {
        assert!(!node_ports(&s).contains(&hc));
        assert!(a.node_ports().has(hc));
    }
}

/// AL-7.3 healthCheckNodePort failures are 500s with upstream's texts.
#[rstest]
#[case::requested_taken(json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 30080,
    "ports": [{"port": 80, "nodePort": 30080}]}),
    "Internal error occurred: failed to allocate requested HealthCheck NodePort 30080: provided port is already allocated")]
#[case::requested_out_of_range(json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 80,
    "ports": [{"port": 80}]}),
    "Internal error occurred: failed to allocate requested HealthCheck NodePort 80: provided port is not in the valid range. The range of valid ports is 30000-32767")]
fn health_check_node_port_errors(#[case] spec_json: Value, #[case] msg: &str) {
    let mut a = al(V4);
    let mut s = svc("default", "web", spec_json);
    let e = a.allocate_create(&mut s, false).unwrap_err();
    assert_eq!(e.code(), 500);
    assert_eq!(e.to_string(), msg);
}

/// AL-5.3 type transitions and dual-stack upgrades/downgrades.
#[test]
fn to_external_name_releases_ips_and_node_ports() {
    let mut a = al(DUAL);
    let old = create_ok(
        &mut a,
        "web",
        json!({"type": "NodePort", "ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}),
    );
    let ips = cluster_ips(&old);
    let mut new = old.clone();
    let sp = new.spec.as_mut().unwrap();
    sp.type_ = Some("ExternalName".into());
    sp.external_name = Some("example.com".into());
    let txn = a.allocate_update(&mut new, &old, false).unwrap();
    assert_eq!(txn.to_release().len(), 3, "{txn:?}");
    assert!(
        a.has(Claim::Ip(ips[0].parse().unwrap())),
        "release is deferred until commit"
    );
    a.commit(txn);
    assert!(!a.has(Claim::Ip(ips[0].parse().unwrap())));
    assert!(!a.has(Claim::Ip(ips[1].parse().unwrap())));
    assert_eq!(a.node_ports().used(), 0);
    assert!(
        cluster_ips(&new).is_empty(),
        "unchanged clusterIPs are cleared"
    );
    assert!(families(&new).is_empty());
    assert_eq!(spec(&new).ip_family_policy, None);
}

#[test]
fn from_external_name_allocates_like_create() {
    let mut a = al(V4);
    let old = create_ok(
        &mut a,
        "web",
        json!({"type": "ExternalName", "externalName": "example.com"}),
    );
    let new = update(
        &mut a,
        &old,
        json!({"type": "ClusterIP", "ports": [{"port": 80}]}),
    )
    .unwrap();
    assert_eq!(cluster_ips(&new).len(), 1);
    assert_eq!(families(&new), ["IPv4"]);
    assert_eq!(spec(&new).ip_family_policy.as_deref(), Some("SingleStack"));
}

#[test]
fn upgrade_single_to_dual_allocates_secondary() {
    let mut a = al(DUAL);
    let old = create_ok(&mut a, "web", json!({"ports": [{"port": 80}]}));
    let ip0 = cluster_ips(&old)[0].clone();
    let new = update(
        &mut a,
        &old,
        json!({"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}),
    )
    .unwrap();
    let ips = cluster_ips(&new);
    assert_eq!(ips.len(), 2);
    assert_eq!(ips[0], ip0, "primary kept");
    assert!(ips[1].contains(':'));
    assert_eq!(families(&new), ["IPv4", "IPv6"]);
}

#[test]
fn downgrade_requires_single_stack_and_releases_secondary() {
    let mut a = al(DUAL);
    let old = create_ok(
        &mut a,
        "web",
        json!({"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}),
    );
    let ips = cluster_ips(&old);
    let mut reduced = old.clone();
    reduced.spec.as_mut().unwrap().cluster_ips = Some(vec![ips[0].clone()]);
    let e = a
        .allocate_update(&mut reduced.clone(), &old, false)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "Service \"web\" is invalid: spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": must be 'SingleStack' to release the secondary cluster IP"
    );
    let mut single = old.clone();
    single.spec.as_mut().unwrap().ip_family_policy = Some("SingleStack".into());
    let txn = a.allocate_update(&mut single, &old, false).unwrap();
    assert_eq!(
        cluster_ips(&single),
        [ips[0].clone()],
        "truncated to the primary"
    );
    assert_eq!(families(&single), ["IPv4"]);
    a.commit(txn);
    assert!(!a.has(Claim::Ip(ips[1].parse().unwrap())));
    assert!(a.has(Claim::Ip(ips[0].parse().unwrap())));
}

/// AL-4 step 1: PreferDualStack is never auto-upgraded on update.
#[test]
fn prefer_dual_stack_not_auto_upgraded() {
    let mut single = allocators(V4, "30000-32767", 1);
    let old = create_ok(
        &mut single,
        "web",
        json!({"ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]}),
    );
    let mut dual = al(DUAL);
    dual.family_mut(svcplane_allocator::IpFamily::V4)
        .unwrap()
        .restore(cluster_ips(&old)[0].parse().unwrap())
        .unwrap();
    let mut new = old.clone();
    let txn = dual.allocate_update(&mut new, &old, false).unwrap();
    assert!(txn.allocated().is_empty());
    assert_eq!(cluster_ips(&new).len(), 1);
}

/// AL-5.1 patchAllocatedValues: a resubmitted manifest keeps the allocated values.
#[test]
fn update_omitting_values_keeps_them() {
    let mut a = al(V4);
    let old = create_ok(
        &mut a,
        "web",
        json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local",
        "ports": [{"name": "http", "port": 80}]}),
    );
    let new = update(
        &mut a,
        &old,
        json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local",
        "ports": [{"name": "http", "port": 80}]}),
    )
    .unwrap();
    assert_eq!(cluster_ips(&new), cluster_ips(&old));
    assert_eq!(node_ports(&new), node_ports(&old));
    assert_eq!(
        spec(&new).health_check_node_port,
        spec(&old).health_check_node_port
    );
    assert_eq!(a.node_ports().used(), 2);
}

/// AL-7.4 NodePort/LoadBalancer → ClusterIP releases nodePorts and the healthCheckNodePort.
#[test]
fn to_cluster_ip_releases_node_ports() {
    let mut a = al(V4);
    let old = create_ok(
        &mut a,
        "web",
        json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local",
        "ports": [{"name": "http", "port": 80}]}),
    );
    let mut new = old.clone();
    let sp = new.spec.as_mut().unwrap();
    sp.type_ = Some("ClusterIP".into());
    sp.external_traffic_policy = None;
    let txn = a.allocate_update(&mut new, &old, false).unwrap();
    a.commit(txn);
    assert_eq!(node_ports(&new), [0]);
    assert_eq!(spec(&new).health_check_node_port, None);
    assert_eq!(a.node_ports().used(), 0);
}

/// AL-7.4 new explicit values allocated, dropped ones released, zeros allocated.
#[test]
fn node_port_update_diff() {
    let mut a = al(V4);
    let old = create_ok(
        &mut a,
        "web",
        json!({"type": "NodePort", "ports": [{"name": "a", "port": 80, "nodePort": 30080}]}),
    );
    let new = update(
        &mut a,
        &old,
        json!({"type": "NodePort", "ports": [
        {"name": "b", "port": 81, "nodePort": 30081}, {"name": "c", "port": 82}]}),
    )
    .unwrap();
    let np = node_ports(&new);
    assert_eq!(np[0], 30081);
    assert_ne!(np[1], 0);
    assert!(!a.node_ports().has(30080));
    assert!(a.node_ports().has(30081));
    assert_eq!(a.node_ports().used(), 2);
}

/// AL-7.4 duplicate (protocol, nodePort) in an update is a 500 `Unknown` error.
#[test]
fn duplicate_node_port_in_update_is_unknown() {
    let mut a = al(V4);
    let old = create_ok(
        &mut a,
        "web",
        json!({"type": "NodePort", "ports": [{"name": "a", "port": 80, "nodePort": 30001}]}),
    );
    let e = update(&mut a, &old, json!({"type": "NodePort", "ports": [
        {"name": "a", "port": 80, "nodePort": 30001}, {"name": "b", "port": 81, "nodePort": 30001}]})).unwrap_err();
    assert_eq!(e.to_string(), "duplicate nodePort: {TCP 30001}");
    assert_eq!(e.reason(), "Unknown");
    assert_eq!(e.code(), 500);
}

/// AL-7.4 allocateLoadBalancerNodePorts false → true allocates the missing ones; true → false keeps them.
#[test]
fn allocate_lb_node_ports_flip() {
    let mut a = al(V4);
    let old = create_ok(
        &mut a,
        "web",
        json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [{"name": "a", "port": 80}]}),
    );
    assert_eq!(node_ports(&old), [0]);
    let on = update(&mut a, &old, json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": true, "ports": [{"name": "a", "port": 80}]})).unwrap();
    assert_ne!(node_ports(&on)[0], 0);
    let off = update(&mut a, &on, json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [{"name": "a", "port": 80}]})).unwrap();
    assert_eq!(
        node_ports(&off),
        node_ports(&on),
        "existing nodePorts are kept"
    );
    assert_eq!(a.node_ports().used(), 1);
}

/// AL-7.3 update: externalTrafficPolicy Cluster → Local allocates, Local → Cluster releases.
#[test]
fn health_check_node_port_on_policy_change() {
    let mut a = al(V4);
    let old = create_ok(
        &mut a,
        "web",
        json!({"type": "LoadBalancer", "externalTrafficPolicy": "Cluster", "ports": [{"name": "a", "port": 80}]}),
    );
    let local = update(&mut a, &old, json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [{"name": "a", "port": 80}]})).unwrap();
    let hc = spec(&local).health_check_node_port.unwrap();
    assert!(a.node_ports().has(hc));
    let back = update(&mut a, &local, json!({"type": "LoadBalancer", "externalTrafficPolicy": "Cluster", "ports": [{"name": "a", "port": 80}]})).unwrap();
    assert_eq!(spec(&back).health_check_node_port, None);
    assert!(!a.node_ports().has(hc));
}

/// AL-5.3 a failed update rolls back new allocations and keeps the old ones.
#[test]
fn failed_update_reverts() {
    let mut a = al(V4);
    create_ok(
        &mut a,
        "other",
        json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30999}]}),
    );
    let old = create_ok(
        &mut a,
        "web",
        json!({"type": "NodePort", "ports": [{"name": "a", "port": 80, "nodePort": 30080}]}),
    );
    let used = a.node_ports().used();
    let e = update(&mut a, &old, json!({"type": "NodePort", "ports": [
        {"name": "a", "port": 80, "nodePort": 30080}, {"name": "b", "port": 81}, {"name": "c", "port": 82, "nodePort": 30999}]})).unwrap_err();
    assert_eq!(e.code(), 422);
    assert_eq!(a.node_ports().used(), used);
    assert!(a.node_ports().has(30080));
}

/// AL-5.4 delete releases everything the Service holds.
#[test]
fn delete_releases_all() {
    let mut a = al(DUAL);
    let s = create_ok(
        &mut a,
        "web",
        json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ipFamilyPolicy": "RequireDualStack",
        "ports": [{"name": "a", "port": 53, "protocol": "TCP"}, {"name": "b", "port": 53, "protocol": "UDP"}]}),
    );
    let released = a.release_service(&s);
    assert_eq!(released.len(), 4, "{released:?}");
    assert_eq!(a.node_ports().used(), 0);
}

/// AL-5.5 dry-run: nothing reserved, network address for dynamic IPs, 32769+ for nodePorts,
/// "already allocated" not checked for static IPs.
#[test]
fn dry_run_reserves_nothing() {
    let mut a = al(V4);
    create_ok(
        &mut a,
        "taken",
        json!({"clusterIP": "10.0.0.9", "ports": [{"port": 80}]}),
    );
    let mut s = svc(
        "default",
        "web",
        json!({"type": "NodePort", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}),
    );
    let txn = a.allocate_create(&mut s, true).unwrap();
    assert!(txn.is_dry_run());
    assert_eq!(cluster_ips(&s), ["10.0.0.0"]);
    assert_eq!(node_ports(&s), [32769, 32770]);
    a.revert(txn);
    assert_eq!(a.node_ports().used(), 0);
    let mut again = svc(
        "default",
        "web2",
        json!({"clusterIP": "10.0.0.9", "ports": [{"port": 80}]}),
    );
    a.allocate_create(&mut again, true).unwrap();
    let mut outside = svc(
        "default",
        "web3",
        json!({"clusterIP": "10.9.0.9", "ports": [{"port": 80}]}),
    );
    let refused = a.allocate_create(&mut outside, true).unwrap_err();
    assert_eq!(refused.code(), 422);
    // AL-5.5: worded as the range's ErrNotInRange, as kube-apiserver's dry run does.
    assert!(
        refused.to_string().ends_with(
            "failed to allocate IP 10.9.0.9: the provided IP (10.9.0.9) is not in the valid range. The range of valid IPs is 10.0.0.0/16"
        ),
        "{refused}"
    );
}
