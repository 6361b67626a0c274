//! AL-2.1 (flags), AL-12 (rebuild/repair events) and the `plan` integration.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;

use common::{allocators, cluster_ips, node_ports, spec, svc};
use k8s_openapi::api::networking::v1::IPAddress;
use rstest::rstest;
use serde_json::json;
use svcplane_allocator::node_port::PortAllocator;
use svcplane_allocator::repair::{LeakTracker, repair_ip_addresses, repair_node_ports};
use svcplane_allocator::{
    AllocatorConfig, ConfigError, PortRange, Remedy, plan_allocations, rebuild,
};

/// AL-2.1 flag parsing: good values.
#[rstest]
#[case::default("10.96.0.0/12", "30000-32767", 1)]
#[case::dual("10.96.0.0/12,fd00::/108", "30000-32767", 2)]
#[case::dual_v6_primary("fd00::/108, 10.96.0.0/12", "30000+2767", 2)]
#[case::v6_64("fd00::/64", "30000-32767", 1)]
fn flags_accepted(#[case] cidrs: &str, #[case] ports: &str, #[case] n: usize) {
    let c = AllocatorConfig::from_flags(cidrs, ports).unwrap();
    assert_eq!(c.cluster_ip_ranges.len(), n);
    assert_eq!(c.node_port_range.to_string(), "30000-32767");
}

/// AL-2.1 flag errors name the flag and the value.
#[rstest]
#[case::bad_cidr(
    "10.96.0.0/33",
    "30000-32767",
    "invalid --service-cluster-ip-range value \"10.96.0.0/33\": prefix length 33 is longer than 32 bits"
)]
#[case::not_cidr(
    "banana",
    "30000-32767",
    "invalid --service-cluster-ip-range value \"banana\": missing '/' prefix length"
)]
#[case::same_family(
    "10.96.0.0/12,10.0.0.0/16",
    "30000-32767",
    "invalid --service-cluster-ip-range value \"10.96.0.0/12,10.0.0.0/16\": --service-cluster-ip-range[0] and --service-cluster-ip-range[1] must be of different IP family"
)]
#[case::three(
    "10.96.0.0/12,fd00::/108,fd01::/108",
    "30000-32767",
    "invalid --service-cluster-ip-range value \"10.96.0.0/12,fd00::/108,fd01::/108\": may only hold up to 2 values"
)]
#[case::v6_too_large(
    "fd00::/48",
    "30000-32767",
    "invalid --service-cluster-ip-range value \"fd00::/48\": shortest allowed prefix length for service CIDR is 64, got 48"
)]
#[case::too_small(
    "10.0.0.0/31",
    "30000-32767",
    "invalid --service-cluster-ip-range value \"10.0.0.0/31\": range 10.0.0.0/31 has no usable addresses"
)]
#[case::empty(
    "",
    "30000-32767",
    "invalid --service-cluster-ip-range value \"\": at least one CIDR required"
)]
#[case::bad_ports(
    "10.96.0.0/12",
    "30000-x",
    "invalid --service-node-port-range value \"30000-x\": unable to parse port range: 30000-x"
)]
#[case::reversed_ports(
    "10.96.0.0/12",
    "32767-30000",
    "invalid --service-node-port-range value \"32767-30000\": end port cannot be less than start port: 32767-30000"
)]
#[case::big_ports(
    "10.96.0.0/12",
    "30000-70000",
    "invalid --service-node-port-range value \"30000-70000\": the port range cannot be greater than 65535: 30000-70000"
)]
fn flags_rejected(#[case] cidrs: &str, #[case] ports: &str, #[case] msg: &str) {
    let e: ConfigError = AllocatorConfig::from_flags(cidrs, ports).unwrap_err();
    assert_eq!(e.to_string(), msg);
}

/// AL-12.2/AL-12.3 rebuild: first Service owns, duplicates and out-of-range values are events.
#[test]
fn rebuild_reports_duplicates_and_out_of_range() {
    let services = vec![
        svc(
            "a",
            "first",
            json!({"clusterIP": "10.0.0.7", "clusterIPs": ["10.0.0.7"], "type": "NodePort",
            "ports": [{"port": 80, "nodePort": 30001}]}),
        ),
        svc(
            "b",
            "second",
            json!({"clusterIP": "10.0.0.7", "clusterIPs": ["10.0.0.7"], "type": "NodePort",
            "ports": [{"port": 80, "nodePort": 30001}]}),
        ),
        svc(
            "c",
            "outside",
            json!({"clusterIP": "1.2.3.4", "clusterIPs": ["1.2.3.4"], "type": "NodePort",
            "ports": [{"port": 80, "nodePort": 30000}]}),
        ),
        svc(
            "d",
            "broken",
            json!({"clusterIP": "nonsense", "clusterIPs": ["nonsense"]}),
        ),
    ];
    let mut al = allocators("10.0.0.0/16", "31000-32000", 1);
    let r = rebuild(&mut al, &services);
    let got: Vec<(String, &str, String)> = r
        .findings
        .iter()
        .map(|f| (f.object.clone(), f.reason, f.message.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("a/first".into(), "PortOutOfRange", "Port 30001 is not within the port range 31000-32000; please recreate service".into()),
            ("b/second".into(), "ClusterIPAlreadyAllocated", "Cluster IP [IPv4]:10.0.0.7 was assigned to multiple services; please recreate service".into()),
            ("b/second".into(), "PortOutOfRange", "Port 30001 is not within the port range 31000-32000; please recreate service".into()),
            ("c/outside".into(), "ClusterIPOutOfRange", "Cluster IP [IPv4]: 1.2.3.4 is not within any configured Service CIDR; please recreate service".into()),
            ("c/outside".into(), "PortOutOfRange", "Port 30000 is not within the port range 31000-32000; please recreate service".into()),
            ("d/broken".into(), "ClusterIPNotValid", "Cluster IP <nil> is not a valid IP; please recreate Service".into()),
        ]
    );
    assert_eq!(r.owned[&("a".into(), "first".into())].len(), 1);
}

/// AL-12.3 the same nodePort for TCP and UDP counts once; a duplicate across Services is reported.
#[test]
fn rebuild_node_port_sharing() {
    let services = vec![
        svc(
            "a",
            "dns",
            json!({"type": "NodePort", "ports": [
            {"name": "t", "port": 53, "protocol": "TCP", "nodePort": 30053}, {"name": "u", "port": 53, "protocol": "UDP", "nodePort": 30053}]}),
        ),
        svc(
            "b",
            "dup",
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30053}]}),
        ),
    ];
    let mut al = allocators("10.0.0.0/16", "30000-32767", 1);
    let r = rebuild(&mut al, &services);
    assert_eq!(r.findings.len(), 1);
    assert_eq!(r.findings[0].reason, "PortAlreadyAllocated");
    assert_eq!(
        r.findings[0].message,
        "Port 30053 was assigned to multiple services; please recreate service"
    );
    assert_eq!(r.findings[0].object, "b/dup");
}

fn ip_address(name: &str, ns: &str, svc_name: &str, created: &str, labels: bool) -> IPAddress {
    let fam = if name.contains(':') { "IPv6" } else { "IPv4" };
    let mut v = json!({
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": ns, "name": svc_name}},
    });
    if labels {
        v["metadata"]["labels"] = json!({"ipaddress.kubernetes.io/ip-family": fam, "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"});
    }
    serde_json::from_value(v).unwrap()
}

/// AL-12.1 ClusterIP repair against IPAddress objects.
#[test]
fn repair_ip_address_findings() {
    let services = vec![
        svc(
            "ns",
            "ok",
            json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"]}),
        ),
        svc(
            "ns",
            "missing",
            json!({"clusterIP": "10.0.0.2", "clusterIPs": ["10.0.0.2"]}),
        ),
        svc(
            "ns",
            "dup",
            json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"]}),
        ),
        svc(
            "ns",
            "wrongref",
            json!({"clusterIP": "10.0.0.3", "clusterIPs": ["10.0.0.3"]}),
        ),
    ];
    let t0 = "2026-01-01T00:00:00Z";
    let ips = vec![
        ip_address("10.0.0.1", "ns", "ok", t0, true),
        ip_address("10.0.0.3", "ns", "gone", t0, true),
        ip_address("10.0.0.50", "ns", "gone", t0, true),
        ip_address("10.0.0.51", "ns", "ok", t0, true),
        ip_address("10.0.0.52", "ns", "gone", "2026-01-01T00:00:30Z", true),
        ip_address("10.0.0.53", "ns", "gone", t0, false),
    ];
    let al = allocators("10.0.0.0/16", "30000-32767", 1);
    let now = 1_767_225_600 + 60 + 1; // 61 s after t0
    let f = repair_ip_addresses(&services, &ips, &al, now);
    let got: Vec<(&str, &str, &str, &Remedy)> = f
        .iter()
        .map(|f| (f.object.as_str(), f.reason, f.message.as_str(), &f.remedy))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "ns/missing",
                "ClusterIPNotAllocated",
                "Cluster IP [IPv4]: 10.0.0.2 is not allocated; repairing",
                &Remedy::CreateIpAddress("10.0.0.2".parse().unwrap())
            ),
            (
                "ns/dup",
                "ClusterIPAlreadyAllocated",
                "Cluster IP [IPv4]:10.0.0.1 was assigned to multiple services; please recreate service",
                &Remedy::None
            ),
            (
                "ns/wrongref",
                "ClusterIPNotAllocated",
                "the ClusterIP [IPv4]: 10.0.0.3 for Service ns/wrongref has a wrong reference; repairing",
                &Remedy::RecreateIpAddress("10.0.0.3".parse().unwrap())
            ),
            (
                "10.0.0.3",
                "IPAddressNotAllocated",
                "IPAddress: 10.0.0.3 for Service ns/gone appears to have leaked: cleaning up",
                &Remedy::DeleteIpAddress("10.0.0.3".into())
            ),
            (
                "10.0.0.50",
                "IPAddressNotAllocated",
                "IPAddress: 10.0.0.50 for Service ns/gone appears to have leaked: cleaning up",
                &Remedy::DeleteIpAddress("10.0.0.50".into())
            ),
            (
                "10.0.0.51",
                "IPAddressWrongReference",
                "IPAddress: 10.0.0.51 for Service ns/ok has a wrong reference; cleaning up",
                &Remedy::DeleteIpAddress("10.0.0.51".into())
            ),
            ("10.0.0.52", "", "", &Remedy::RequeueAfter(29)),
        ]
    );
}

/// AL-12.3 leaked NodePorts are released only after 3 passes.
#[test]
fn node_port_leak_released_after_three_passes() {
    let range = PortRange::parse("30000-32767").unwrap();
    let services = vec![svc(
        "a",
        "x",
        json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30010}]}),
    )];
    let mut stored = PortAllocator::new(range);
    stored.allocate(30500).unwrap();
    let mut leaks = LeakTracker::default();
    for pass in 1..=3 {
        let (rebuilt, findings) = repair_node_ports(&services, range, &stored, &mut leaks);
        if pass == 1 {
            assert_eq!(findings[0].reason, "PortNotAllocated");
            assert_eq!(
                findings[0].message,
                "Port 30010 is not allocated; repairing"
            );
        }
        let released = findings
            .iter()
            .any(|f| f.remedy == Remedy::ReleaseNodePort(30500));
        assert_eq!(released, pass == 3, "pass {pass}");
        assert_eq!(rebuilt.has(30500), pass < 3);
        stored = rebuilt;
    }
}

/// plan: fills missing values only, keeps existing ones, never reuses a taken value.
#[test]
fn plan_fills_only_missing_values() {
    let services = vec![
        svc(
            "z",
            "new",
            json!({"type": "NodePort", "selector": {"a": "b"}, "ports": [{"port": 80}]}),
        ),
        svc(
            "a",
            "existing",
            json!({"type": "NodePort", "clusterIP": "10.96.1.10", "clusterIPs": ["10.96.1.10"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "ports": [{"port": 80, "nodePort": 30500}]}),
        ),
        svc(
            "a",
            "half",
            json!({"type": "NodePort", "clusterIP": "10.96.1.11", "clusterIPs": ["10.96.1.11"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "a", "port": 80, "nodePort": 30501}, {"name": "b", "port": 81}]}),
        ),
        svc(
            "b",
            "ext",
            json!({"type": "ExternalName", "externalName": "example.com"}),
        ),
        svc(
            "b",
            "headless",
            json!({"clusterIP": "None", "selector": {"a": "b"}}),
        ),
    ];
    let cfg = AllocatorConfig::from_flags("10.96.0.0/12", "30000-32767").unwrap();
    let plan = plan_allocations(&services, &cfg, 42);
    assert!(plan.events.is_empty(), "{:?}", plan.events);
    assert!(plan.findings.is_empty(), "{:?}", plan.findings);
    let names: Vec<&str> = plan.updates.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["half", "new"], "(namespace, name) order");
    let half = &plan.updates[0].service;
    assert_eq!(cluster_ips(half), ["10.96.1.11"]);
    let np = node_ports(half);
    assert_eq!(np[0], 30501);
    assert!(np[1] != 0 && np[1] != 30500 && np[1] != 30501);
    let new = &plan.updates[1].service;
    assert_eq!(cluster_ips(new).len(), 1);
    assert_eq!(spec(new).ip_family_policy.as_deref(), Some("SingleStack"));
    assert_eq!(
        spec(new).ip_families.as_deref(),
        Some(&["IPv4".to_string()][..])
    );
    assert!(!["10.96.1.10", "10.96.1.11"].contains(&cluster_ips(new)[0].as_str()));
    // Reproducible with the same seed, different with another.
    assert_eq!(plan_allocations(&services, &cfg, 42), plan);
    assert_ne!(
        plan_allocations(&services, &cfg, 43).updates[1].service,
        *new
    );
}

/// plan: repair findings are reported apart; a Service that cannot be filled gets a warning.
#[test]
fn plan_reports_findings_and_failures() {
    let services = vec![
        svc(
            "a",
            "one",
            json!({"clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5"], "ports": [{"port": 80}]}),
        ),
        svc(
            "a",
            "two",
            json!({"type": "NodePort", "clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5"], "ports": [{"port": 80}]}),
        ),
    ];
    let cfg = AllocatorConfig::from_flags("10.96.0.0/12", "30000-32767").unwrap();
    let plan = plan_allocations(&services, &cfg, 1);
    assert!(plan.updates.is_empty());
    assert_eq!(plan.findings.len(), 1, "{:?}", plan.findings);
    assert_eq!(plan.findings[0].reason, "ClusterIPAlreadyAllocated");
    assert_eq!(plan.findings[0].object, "a/two");
    assert_eq!(plan.events.len(), 1, "{:?}", plan.events);
    assert_eq!(plan.events[0].reason, "AllocationFailed");
    assert_eq!(
        plan.events[0].event_type,
        svcplane_allocator::EventType::Warning
    );
    assert!(
        plan.events[0]
            .message
            .contains("provided IP is already allocated"),
        "{}",
        plan.events[0].message
    );
}

/// plan: RequireDualStack Service with only its primary IP gets the secondary on a dual cluster.
#[test]
fn plan_fills_secondary_family() {
    let services = vec![svc(
        "a",
        "dual",
        json!({"clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5"],
        "ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}),
    )];
    let cfg = AllocatorConfig::from_flags("10.96.0.0/12,fd00::/108", "30000-32767").unwrap();
    let plan = plan_allocations(&services, &cfg, 1);
    assert_eq!(plan.updates.len(), 1);
    let ips = cluster_ips(&plan.updates[0].service);
    assert_eq!(ips[0], "10.96.0.5");
    assert!(ips[1].starts_with("fd00::"));
}
