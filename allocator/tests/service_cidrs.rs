//! Ranges from ServiceCIDR objects applied to running allocators (AL-3).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::IpAddr;

use serde_json::json;
use svcplane_allocator::range::Cidr;
use svcplane_allocator::service_cidrs::{ClusterRange, ServiceCidrView, cluster_ranges};
use svcplane_allocator::{AllocatorConfig, Claim, IpFamily, ServiceError};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn range(cidr: &str, ready: bool) -> ClusterRange {
    ClusterRange {
        cidr: Cidr::parse(cidr).unwrap(),
        ready,
        objects: vec!["x".into()],
        scope: Default::default(),
    }
}

fn hand_picked(address: &str) -> k8s_openapi::api::core::v1::Service {
    common::svc(
        "ns",
        "s",
        json!({"clusterIP": address, "clusterIPs": [address], "ports": [{"port": 80}]}),
    )
}

fn message(e: &ServiceError) -> String {
    e.to_string()
}

#[test]
fn rule_3_a_range_added_at_run_time_serves_static_picks_and_keeps_old_values() {
    let mut a = common::allocators("10.0.0.0/24", "30000-30099", 1);
    let mut s = hand_picked("10.0.0.5");
    a.allocate_create(&mut s, false).unwrap();
    let refused = a.set_ranges(
        &[range("10.0.0.0/24", true), range("10.1.0.0/24", true)],
        Some(IpFamily::V4),
    );
    assert!(refused.is_empty());
    assert!(a.has(Claim::Ip(ip("10.0.0.5"))), "kept through the change");
    let mut s2 = hand_picked("10.1.0.7");
    a.allocate_create(&mut s2, false).unwrap();
    assert!(a.has(Claim::Ip(ip("10.1.0.7"))));
}

#[test]
fn rule_3_a_terminating_range_keeps_its_values_but_hands_out_nothing() {
    let mut a = common::allocators("10.0.0.0/30", "30000-30099", 1);
    a.set_ranges(
        &[range("10.0.0.0/30", true), range("10.1.0.0/24", false)],
        Some(IpFamily::V4),
    );
    let mut s = hand_picked("10.1.0.9");
    let e = a.allocate_create(&mut s, false).unwrap_err();
    assert!(
        message(&e).contains("the provided network does not match the current range"),
        "{e}"
    );
    // Dynamic picks skip it: two usable addresses in the ready /30, then full.
    for _ in 0..2 {
        let mut d = common::svc("ns", "d", json!({"ports": [{"port": 80}]}));
        a.allocate_create(&mut d, false).unwrap();
        let got = common::cluster_ips(&d)[0].clone();
        assert!(got.starts_with("10.0.0."), "{got}");
    }
    let mut d = common::svc("ns", "d", json!({"ports": [{"port": 80}]}));
    assert!(message(&a.allocate_create(&mut d, false).unwrap_err()).contains("range is full"));
}

#[test]
fn rule_3_a_removed_range_no_longer_accepts_its_addresses() {
    let mut a = common::allocators("10.0.0.0/24", "30000-30099", 1);
    a.set_ranges(
        &[range("10.0.0.0/24", true), range("10.1.0.0/24", true)],
        None,
    );
    a.set_ranges(&[range("10.0.0.0/24", true)], None);
    let mut s = hand_picked("10.1.0.7");
    assert!(a.allocate_create(&mut s, false).is_err());
}

#[test]
fn rule_3_a_second_family_appears_with_its_first_range() {
    let mut a = common::allocators("10.0.0.0/24", "30000-30099", 1);
    assert!(a.family(IpFamily::V6).is_none());
    a.set_ranges(
        &[range("10.0.0.0/24", true), range("fd00:1::/112", true)],
        Some(IpFamily::V4),
    );
    let mut s = common::svc(
        "ns",
        "dual",
        json!({"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}),
    );
    a.allocate_create(&mut s, false).unwrap();
    assert_eq!(common::cluster_ips(&s).len(), 2);
    assert_eq!(a.families().primary, IpFamily::V4);
}

#[test]
fn a_config_from_objects_orders_the_primary_family_first_and_marks_unready_ranges() {
    let flags = AllocatorConfig::from_flags("10.96.0.0/12", "30000-32767").unwrap();
    let objects = [
        ServiceCidrView {
            name: "kubernetes".into(),
            cidrs: vec!["fd00:10::/112".into(), "10.96.0.0/16".into()],
            ready_condition: true,
            deleting: false,
            namespace_selector: None,
        },
        ServiceCidrView {
            name: "going".into(),
            cidrs: vec!["10.97.0.0/16".into()],
            ready_condition: true,
            deleting: true,
            namespace_selector: None,
        },
    ];
    let c = flags.with_service_cidrs(&objects).unwrap();
    let shown: Vec<String> = c.cluster_ip_ranges.iter().map(|c| c.to_string()).collect();
    assert_eq!(shown, ["fd00:10::/112", "10.96.0.0/16", "10.97.0.0/16"]);
    assert_eq!(c.unready, [Cidr::parse("10.97.0.0/16").unwrap()]);
    assert_eq!(c.node_port_range, flags.node_port_range);
    let a = c.allocators(1).unwrap();
    assert_eq!(a.families().primary, IpFamily::V6);
    assert_eq!(cluster_ranges(&objects).len(), 3);
}
