use std::net::IpAddr;

use svcplane_allocator::{AllocatorConfig, Claim};

use super::super::{AllocationState, HolderKey, ServiceRef};
use super::{ClaimObject, ServiceObject};

fn state() -> AllocationState {
    AllocationState::new(
        AllocatorConfig::from_flags("10.0.0.0/24", "30000-30009")
            .unwrap()
            .allocators(3)
            .unwrap(),
    )
}

fn ip(s: &str) -> Claim {
    Claim::Ip(s.parse::<IpAddr>().unwrap())
}

fn key(name: &str) -> HolderKey {
    HolderKey::Service {
        namespace: "ns".into(),
        name: name.into(),
    }
}

fn service(s: &mut AllocationState, name: &str, uid: &str, created: i64, values: &[Claim]) {
    s.set_service(
        key(name),
        ServiceRef::named("ns", name),
        ServiceObject {
            uid: uid.into(),
            created: Some(created),
            retain: None,
            roles: Vec::new(),
        },
        values.to_vec(),
    );
}

/// A claim taken by a CREATE of `ns/for_name` at `created`.
fn claim(value: Claim, for_name: &str, uid: &str, created: i64) -> ClaimObject {
    ClaimObject {
        name: format!("c-{uid}"),
        uid: uid.into(),
        created: Some(created),
        owner: ServiceRef::of_request("ns", for_name, "", &format!("req-{uid}")),
        value: Some(value),
        resource_version: format!("rv-{uid}"),
        retained: None,
    }
}

fn claim_name_of(value: Claim) -> String {
    crate::claim::claim_name(value)
}

/// A claim named as the webhook names it.
fn real_claim(value: Claim, for_name: &str, uid: &str, created: i64) -> ClaimObject {
    ClaimObject {
        name: claim_name_of(value),
        ..claim(value, for_name, uid, created)
    }
}

#[test]
fn a_deleted_services_claim_is_released_and_its_value_free_at_once() {
    let mut s = state();
    let v = ip("10.0.0.7");
    let c = real_claim(v, "a", "u1", 100);
    s.set_claim(c.clone());
    service(&mut s, "a", "svc-a", 100, &[v]);
    assert_eq!(s.claim_binding(&c.name), Some("svc-a"));
    assert!(s.allocators().has(v));
    s.remove_service(&key("a"));
    assert!(!s.allocators().has(v), "free as soon as the delete is seen");
    assert!(s.holders(v).is_empty());
    let released = s.released_claim(&c.name, "u1").expect("released");
    assert_eq!(released.value, v);
    assert_eq!(s.released_claims(), vec![released]);
}

#[test]
fn a_released_claim_seen_again_by_a_relist_stays_released() {
    let mut s = state();
    let v = Claim::NodePort(30003);
    let c = real_claim(v, "a", "u1", 100);
    s.set_claim(c.clone());
    service(&mut s, "a", "svc-a", 101, &[v]);
    s.remove_service(&key("a"));
    s.set_claim(c.clone());
    assert!(!s.allocators().has(v));
    assert!(s.released_claim(&c.name, "u1").is_some());
    // A new object under the same name (someone took the value) is a live holder.
    s.set_claim(ClaimObject {
        uid: "u2".into(),
        ..real_claim(v, "b", "u2", 200)
    });
    assert!(s.allocators().has(v));
    assert!(s.released_claim(&c.name, "u1").is_none());
    assert!(s.released_claims().is_empty());
}

#[test]
fn an_update_that_drops_a_value_releases_its_claim_only() {
    let mut s = state();
    let (ipv, port) = (ip("10.0.0.8"), Claim::NodePort(30001));
    let ci = real_claim(ipv, "a", "u1", 100);
    let cp = real_claim(port, "a", "u2", 100);
    s.set_claim(ci.clone());
    s.set_claim(cp.clone());
    service(&mut s, "a", "svc-a", 100, &[ipv, port]);
    // NodePort -> ClusterIP: the nodePort goes.
    service(&mut s, "a", "svc-a", 100, &[ipv]);
    assert!(s.released_claim(&cp.name, "u2").is_some());
    assert!(s.released_claim(&ci.name, "u1").is_none());
    assert!(!s.allocators().has(port));
    assert!(s.allocators().has(ipv));
}

#[test]
fn a_claim_of_a_service_never_stored_is_never_released_by_another_services_delete() {
    let mut s = state();
    let v = ip("10.0.0.9");
    // "b" holds v (its IPAddress-less in-tree allocation, say); a claim for "a" exists.
    service(&mut s, "b", "svc-b", 100, &[v]);
    let c = real_claim(v, "a", "u1", 120);
    s.set_claim(c.clone());
    s.remove_service(&key("b"));
    assert!(s.released_claim(&c.name, "u1").is_none());
    assert!(s.allocators().has(v), "the claim for a still holds it");
}

#[test]
fn a_claim_taken_for_a_recreated_service_is_not_bound_to_the_previous_one() {
    // The old incarnation is seen, then a CREATE of the same name takes a fresh claim
    // before the watch has delivered the old one's delete.
    let mut s = state();
    let v = Claim::NodePort(30005);
    service(&mut s, "a", "old", 100, &[v]);
    let fresh = real_claim(v, "a", "u2", 100); // same second as the old creation
    s.set_claim(fresh.clone());
    assert_eq!(s.claim_binding(&fresh.name), None, "not strictly older");
    // Late update events of the old incarnation do not bind it either.
    service(&mut s, "a", "old", 100, &[v]);
    assert_eq!(s.claim_binding(&fresh.name), None);
    s.remove_service(&key("a"));
    assert!(s.released_claim(&fresh.name, "u2").is_none());
    assert!(
        s.allocators().has(v),
        "the in-flight create keeps its value"
    );
    // The new incarnation appears: the claim binds to it.
    service(&mut s, "a", "new", 101, &[v]);
    assert_eq!(s.claim_binding(&fresh.name), Some("new"));
}

#[test]
fn a_claim_learnt_after_its_service_binds_only_when_strictly_older() {
    let mut s = state();
    let v = ip("10.0.0.10");
    service(&mut s, "a", "svc-a", 105, &[v]);
    let older = real_claim(v, "a", "u1", 104);
    s.set_claim(older.clone());
    assert_eq!(s.claim_binding(&older.name), Some("svc-a"));
    let mut s = state();
    service(&mut s, "a", "svc-a", 105, &[v]);
    let same_second = real_claim(v, "a", "u1", 105);
    s.set_claim(same_second.clone());
    assert_eq!(s.claim_binding(&same_second.name), None);
}

#[test]
fn a_claim_taken_by_an_update_binds_to_that_service_object_exactly() {
    let mut s = state();
    let v = Claim::NodePort(30002);
    service(&mut s, "a", "svc-a", 100, &[]);
    let mut c = real_claim(v, "a", "u1", 500);
    c.owner = c.owner.clone().with_uid("svc-a");
    s.set_claim(c.clone());
    service(&mut s, "a", "svc-a", 100, &[v]);
    assert_eq!(s.claim_binding(&c.name), Some("svc-a"));
    // A claim naming another object of that name never binds to this one.
    let mut s = state();
    let mut other = real_claim(v, "a", "u2", 50);
    other.owner = other.owner.clone().with_uid("svc-older");
    s.set_claim(other.clone());
    service(&mut s, "a", "svc-a", 100, &[v]);
    assert_eq!(s.claim_binding(&other.name), None);
}

#[test]
fn a_new_uid_under_the_same_key_ends_the_previous_incarnation() {
    let mut s = state();
    let v = ip("10.0.0.11");
    let c = real_claim(v, "a", "u1", 100);
    s.set_claim(c.clone());
    service(&mut s, "a", "old", 100, &[v]);
    // Deleted and re-created with another value while the watch was down: the re-list
    // shows a new uid under the same name.
    let w = ip("10.0.0.12");
    service(&mut s, "a", "new", 200, &[w]);
    assert!(s.released_claim(&c.name, "u1").is_some());
    assert!(!s.allocators().has(v));
}

#[test]
fn a_generated_name_service_binds_the_claim_of_its_nameless_create() {
    let mut s = state();
    let v = ip("10.0.0.13");
    let c = ClaimObject {
        owner: ServiceRef::of_request("ns", "", "web-", "req-1"),
        ..real_claim(v, "", "u1", 100)
    };
    s.set_claim(c.clone());
    s.set_service(
        key("web-x7k2p"),
        ServiceRef::of_request("ns", "web-x7k2p", "web-", ""),
        ServiceObject {
            uid: "svc".into(),
            created: Some(100),
            retain: None,
            roles: Vec::new(),
        },
        vec![v],
    );
    assert_eq!(s.claim_binding(&c.name), Some("svc"));
    s.remove_service(&key("web-x7k2p"));
    assert!(s.released_claim(&c.name, "u1").is_some());
}

#[test]
fn removing_a_claim_forgets_it_entirely() {
    let mut s = state();
    let v = ip("10.0.0.14");
    let c = real_claim(v, "a", "u1", 100);
    s.set_claim(c.clone());
    service(&mut s, "a", "svc-a", 100, &[v]);
    s.remove_service(&key("a"));
    s.remove_claim(&c.name);
    assert!(s.released_claims().is_empty());
    assert_eq!(s.claim_names().count(), 0);
}
