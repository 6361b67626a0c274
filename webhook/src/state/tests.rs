use std::net::IpAddr;

use svcplane_allocator::{AllocatorConfig, Allocators, Claim, ServiceError, Transaction};

use super::*;

fn allocators() -> Allocators {
    AllocatorConfig::from_flags("10.0.0.0/24", "30000-30009")
        .unwrap()
        .allocators(7)
        .unwrap()
}

fn ip(s: &str) -> Claim {
    Claim::Ip(s.parse::<IpAddr>().unwrap())
}

fn svc_key(name: &str) -> HolderKey {
    HolderKey::Service {
        namespace: "ns".into(),
        name: name.into(),
    }
}

/// A Service asking for ClusterIP `s` by hand, run through the real create path.
fn static_ip(a: &mut Allocators, s: &str) -> Result<Transaction, ServiceError> {
    use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
    let mut svc = Service::default();
    svc.metadata.name = Some("probe".into());
    svc.spec = Some(ServiceSpec {
        cluster_ip: Some(s.into()),
        cluster_ips: Some(vec![s.into()]),
        ports: Some(vec![ServicePort {
            port: 80,
            ..Default::default()
        }]),
        ..Default::default()
    });
    a.allocate_create(&mut svc, false)
}

#[test]
fn a_value_stays_marked_while_any_holder_has_it() {
    let mut s = AllocationState::new(allocators());
    let v = ip("10.0.0.5");
    s.set(svc_key("a"), Some(ServiceRef::named("ns", "a")), vec![v]);
    s.set(
        HolderKey::Claim { name: "c".into() },
        Some(ServiceRef::named("ns", "a")),
        vec![v],
    );
    assert!(s.allocators().has(v));
    s.remove(&svc_key("a"));
    assert!(s.allocators().has(v), "the claim still holds it");
    s.remove(&HolderKey::Claim { name: "c".into() });
    assert!(!s.allocators().has(v));
    assert!(s.holders(v).is_empty());
}

#[test]
fn set_replaces_what_a_holder_held() {
    let mut s = AllocationState::new(allocators());
    s.set(
        svc_key("a"),
        None,
        vec![ip("10.0.0.5"), Claim::NodePort(30001)],
    );
    s.set(svc_key("a"), None, vec![ip("10.0.0.6")]);
    assert!(!s.allocators().has(ip("10.0.0.5")));
    assert!(!s.allocators().has(Claim::NodePort(30001)));
    assert!(s.allocators().has(ip("10.0.0.6")));
    s.set(svc_key("a"), None, vec![]);
    assert!(!s.allocators().has(ip("10.0.0.6")));
    assert_eq!(s.holder_keys().count(), 0);
}

#[test]
fn out_of_range_values_are_tracked_but_not_marked() {
    let mut s = AllocationState::new(allocators());
    let v = ip("192.168.0.1");
    s.set(svc_key("a"), Some(ServiceRef::named("ns", "a")), vec![v]);
    assert_eq!(s.holders(v).len(), 1);
    assert!(!s.allocators().has(v));
    assert!(s.held_by_other(v, &ServiceRef::named("ns", "b")).is_some());
    s.remove(&svc_key("a"));
    assert!(s.holders(v).is_empty());
}

#[test]
fn held_by_other_ignores_the_services_own_holders() {
    let mut s = AllocationState::new(allocators());
    let v = ip("10.0.0.5");
    s.set(svc_key("a"), Some(ServiceRef::named("ns", "a")), vec![v]);
    assert!(s.held_by_other(v, &ServiceRef::named("ns", "a")).is_none());
    assert!(s.held_by_other(v, &ServiceRef::named("ns", "b")).is_some());
    assert!(
        s.held_by_other(v, &ServiceRef::named("other", "a"))
            .is_some()
    );
    // A holder with no known owner is always someone else's.
    s.set(
        HolderKey::IpAddress {
            name: "10.0.0.5".into(),
        },
        None,
        vec![v],
    );
    assert!(s.held_by_other(v, &ServiceRef::named("ns", "a")).is_some());
}

#[test]
fn generate_name_reservations_match_their_request_and_generated_names_only() {
    let owner = ServiceRef::of_request("ns", "", "web-", "uid-1");
    assert!(owner.matches(&ServiceRef::of_request("ns", "", "web-", "uid-1")));
    assert!(!owner.matches(&ServiceRef::of_request("ns", "", "web-", "uid-2")));
    // The validating call of the same create sees the generated name.
    let generated = |ns: &str, name: &str| ServiceRef::of_request(ns, name, "web-", "uid-9");
    assert!(owner.matches(&generated("ns", "web-x7k2p")));
    assert!(!owner.matches(&generated("other", "web-x7k2p")));
    // Not a name the API server generates from "web-": wrong length or alphabet.
    assert!(!owner.matches(&generated("ns", "web-api")));
    assert!(!owner.matches(&generated("ns", "web-x7k2a")));
    // A Service named by hand never matches, even with the prefix.
    assert!(!owner.matches(&ServiceRef::named("ns", "web-x7k2p")));
    assert!(!owner.matches(&ServiceRef::of_request("ns", "web-x7k2p", "", "uid-10")));
    let named = ServiceRef::of_request("ns", "web", "", "uid-3");
    assert!(named.matches(&ServiceRef::named("ns", "web")));
    assert!(!named.matches(&ServiceRef::named("ns", "webx")));
}

#[test]
fn evaluate_frees_own_values_and_leaves_no_trace() {
    let mut s = AllocationState::new(allocators());
    let v = ip("10.0.0.5");
    s.set(svc_key("a"), Some(ServiceRef::named("ns", "a")), vec![v]);
    let before = format!("{:?}", s.allocators());
    // Re-evaluating Service a with its own address succeeds...
    let r = s.evaluate(&ServiceRef::named("ns", "a"), |a| static_ip(a, "10.0.0.5"));
    assert!(r.is_ok());
    // ...another Service asking for it is refused...
    let r = s.evaluate(&ServiceRef::named("ns", "b"), |a| static_ip(a, "10.0.0.5"));
    assert!(r.is_err());
    // ...and a successful what-if of a free address does not keep it.
    let r = s.evaluate(&ServiceRef::named("ns", "b"), |a| static_ip(a, "10.0.0.9"));
    assert!(r.is_ok());
    assert_eq!(format!("{:?}", s.allocators()), before);
    assert!(s.allocators().has(v));
}

#[test]
fn reserve_records_a_pending_holder_until_removed() {
    let mut s = AllocationState::new(allocators());
    let req = ServiceRef::of_request("ns", "web", "", "uid-1");
    let txn = s.reserve(&req, |a| static_ip(a, "10.0.0.7")).unwrap();
    assert_eq!(txn.allocated(), &[ip("10.0.0.7")]);
    let pending = HolderKey::Pending {
        request_uid: "uid-1".into(),
    };
    assert_eq!(s.values_of(&pending), &[ip("10.0.0.7")]);
    assert!(s.allocators().has(ip("10.0.0.7")));
    // Another request cannot take it while it is pending.
    let other = ServiceRef::of_request("ns", "api", "", "uid-2");
    assert!(s.reserve(&other, |a| static_ip(a, "10.0.0.7")).is_err());
    s.remove(&pending);
    assert!(!s.allocators().has(ip("10.0.0.7")));
}

#[test]
fn a_retried_reservation_replaces_the_earlier_one() {
    let mut s = AllocationState::new(allocators());
    let req = ServiceRef::of_request("ns", "web", "", "uid-1");
    s.reserve(&req, |a| static_ip(a, "10.0.0.7")).unwrap();
    s.reserve(&req, |a| static_ip(a, "10.0.0.8")).unwrap();
    assert!(!s.allocators().has(ip("10.0.0.7")));
    assert!(s.allocators().has(ip("10.0.0.8")));
    // Re-reserving the same value is idempotent.
    s.reserve(&req, |a| static_ip(a, "10.0.0.8")).unwrap();
    assert!(s.allocators().has(ip("10.0.0.8")));
    assert_eq!(
        s.values_of(&HolderKey::Pending {
            request_uid: "uid-1".into()
        }),
        &[ip("10.0.0.8")]
    );
}

#[test]
fn retain_drops_holders_a_relist_no_longer_shows() {
    let mut s = AllocationState::new(allocators());
    s.set(svc_key("a"), None, vec![ip("10.0.0.5")]);
    s.set(svc_key("b"), None, vec![ip("10.0.0.6")]);
    s.set(
        HolderKey::Claim { name: "c".into() },
        None,
        vec![ip("10.0.0.7")],
    );
    s.retain(|k| !matches!(k, HolderKey::Service { name, .. } if name == "a"));
    assert!(!s.allocators().has(ip("10.0.0.5")));
    assert!(s.allocators().has(ip("10.0.0.6")));
    assert!(s.allocators().has(ip("10.0.0.7")));
}

#[test]
fn own_values_are_found_through_every_kind_of_owner() {
    let mut s = AllocationState::new(allocators());
    // Held by the Service, by its generateName reservation, and by a claim of the
    // same request: all three count as its own when it is re-evaluated.
    s.set(
        svc_key("web-x7k2p"),
        Some(ServiceRef::named("ns", "web-x7k2p")),
        vec![ip("10.0.0.5")],
    );
    s.set(
        HolderKey::Claim { name: "c".into() },
        Some(ServiceRef::of_request("ns", "", "web-", "uid-1")),
        vec![ip("10.0.0.6")],
    );
    s.set(
        HolderKey::Pending {
            request_uid: "uid-2".into(),
        },
        Some(ServiceRef::of_request("ns", "web-x7k2p", "", "uid-2")),
        vec![ip("10.0.0.7")],
    );
    let me = ServiceRef::of_request("ns", "web-x7k2p", "web-", "uid-3");
    for a in ["10.0.0.5", "10.0.0.6", "10.0.0.7"] {
        assert!(
            s.evaluate(&me, |al| static_ip(al, a)).is_ok(),
            "{a} should count as web-x7k2p's own"
        );
    }
    // Someone else's Service sees all three as taken.
    let other = ServiceRef::of_request("ns", "api", "", "uid-4");
    for a in ["10.0.0.5", "10.0.0.6", "10.0.0.7"] {
        assert!(s.evaluate(&other, |al| static_ip(al, a)).is_err(), "{a}");
    }
    // Removing holders keeps the index consistent.
    s.remove(&HolderKey::Claim { name: "c".into() });
    assert!(s.evaluate(&other, |al| static_ip(al, "10.0.0.6")).is_ok());
}

#[test]
fn a_named_service_sharing_a_generate_name_prefix_cannot_take_a_pending_value() {
    let mut s = AllocationState::new(allocators());
    // Request A: an in-flight generateName create holding 10.0.0.5.
    let a = ServiceRef::of_request("ns", "", "web-", "uid-a");
    s.reserve(&a, |al| static_ip(al, "10.0.0.5")).unwrap();
    // Request B: a Service named web-abcde by hand.
    let b = ServiceRef::of_request("ns", "web-bcdfg", "", "uid-b");
    assert!(s.reserve(&b, |al| static_ip(al, "10.0.0.5")).is_err());
    assert!(s.held_by_other(ip("10.0.0.5"), &b).is_some());
}

#[test]
fn generated_names_follow_the_api_servers_rules() {
    let long = "a".repeat(70);
    let owner = ServiceRef::of_request("ns", "", &long, "u");
    let name = format!("{}{}", "a".repeat(58), "bcd2f");
    assert!(owner.matches(&ServiceRef::of_request("ns", &name, &long, "v")));
    let too_long = format!("{}{}", "a".repeat(59), "bcd2f");
    assert!(!owner.matches(&ServiceRef::of_request("ns", &too_long, &long, "v")));
}
