//! Retained values (`--retain-released-values`): the state's rules.

use std::net::IpAddr;
use std::time::Duration;

use svcplane_allocator::{AllocatorConfig, Claim};

use super::super::retention::{Protocol, Role};
use super::super::{AllocationState, HolderKey, ServiceRef};
use super::{ClaimObject, ServiceObject, StoredRetention};

const HOUR: Duration = Duration::from_secs(3600);

fn state(default_retain: Duration) -> AllocationState {
    let mut s = AllocationState::new(
        AllocatorConfig::from_flags("10.0.0.0/24", "30000-30009")
            .unwrap()
            .allocators(3)
            .unwrap(),
    );
    s.set_default_retention(default_retain);
    s
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

fn claim(value: Claim, owner: ServiceRef, uid: &str) -> ClaimObject {
    ClaimObject {
        name: crate::claim::claim_name(value),
        uid: uid.into(),
        created: Some(100),
        owner,
        value: Some(value),
        resource_version: format!("rv-{uid}"),
        retained: None,
    }
}

/// `ns/name` created at 100 holding `values` (the first a ClusterIP, the next a nodePort
/// of port 80), with its own retention annotation `retain`.
fn service(
    s: &mut AllocationState,
    name: &str,
    uid: &str,
    retain: Option<Duration>,
    values: &[Claim],
) {
    let roles = values
        .iter()
        .map(|v| match v {
            Claim::Ip(_) => (*v, Role::ClusterIp(0)),
            Claim::NodePort(_) => (
                *v,
                Role::Port {
                    port: 80,
                    protocol: Protocol::Tcp,
                },
            ),
        })
        .collect();
    s.set_service(
        key(name),
        ServiceRef::named("ns", name),
        ServiceObject {
            uid: uid.into(),
            created: Some(100),
            retain,
            roles,
        },
        values.to_vec(),
    );
}

/// A Service `ns/web` holding `v` through a bound claim, deleted.
fn deleted_web(s: &mut AllocationState, v: Claim, retain: Option<Duration>) -> ClaimObject {
    let c = claim(v, ServiceRef::of_request("ns", "web", "", "req-1"), "u1");
    s.set_claim(c.clone());
    service(s, "web", "svc-1", retain, &[v]);
    assert_eq!(s.claim_binding(&c.name), Some("svc-1"));
    s.remove_service(&key("web"));
    c
}

#[test]
fn without_retention_a_deleted_services_value_is_released_as_upstream_frees_it() {
    let mut s = state(Duration::ZERO);
    let v = ip("10.0.0.7");
    let c = deleted_web(&mut s, v, None);
    assert!(!s.allocators().has(v));
    assert!(s.released_claim(&c.name, "u1").is_some());
    assert!(s.pending_retentions().is_empty());
}

#[test]
fn with_retention_a_deleted_services_value_stays_taken_for_its_name() {
    let mut s = state(HOUR);
    let v = ip("10.0.0.7");
    let c = deleted_web(&mut s, v, None);
    assert!(s.allocators().has(v), "no other request may get it");
    assert!(s.released_claim(&c.name, "u1").is_none());
    let retained = s.retained_for(&ServiceRef::named("ns", "web"));
    assert_eq!(retained.len(), 1);
    assert_eq!(retained[0].value, v);
    assert_eq!(retained[0].role, Some(Role::ClusterIp(0)));
    assert!(s.retained_for(&ServiceRef::named("ns", "other")).is_empty());
    assert!(
        s.retained_for(&ServiceRef::named("other-ns", "web"))
            .is_empty()
    );
}

#[test]
fn the_services_annotation_overrides_the_flag_both_ways() {
    let mut s = state(HOUR);
    let v = ip("10.0.0.8");
    deleted_web(&mut s, v, Some(Duration::ZERO));
    assert!(!s.allocators().has(v), "annotation 0 opts out");

    let mut s = state(Duration::ZERO);
    deleted_web(&mut s, v, Some(HOUR));
    assert!(
        s.allocators().has(v),
        "annotation opts in with the flag off"
    );
}

#[test]
fn a_retention_decided_here_is_pending_until_seen_stored() {
    let mut s = state(HOUR);
    let v = Claim::NodePort(30005);
    let c = deleted_web(&mut s, v, None);
    let pending = s.pending_retentions();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].claim, c.name);
    assert_eq!(pending[0].resource_version, "rv-u1");
    assert_eq!(pending[0].retain, HOUR);
    assert_eq!(pending[0].service_name, "web");
    assert_eq!(
        pending[0].role,
        Some(Role::Port {
            port: 80,
            protocol: Protocol::Tcp
        })
    );
    let until: jiff::Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
    s.set_claim(ClaimObject {
        retained: Some(StoredRetention {
            until,
            role: pending[0].role,
        }),
        resource_version: "rv-2".into(),
        ..c
    });
    assert!(s.pending_retentions().is_empty());
    let r = s.retained_claims();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].until, Some(until));
    assert!(s.allocators().has(v));
}

#[test]
fn a_stored_retention_survives_a_restart_with_no_service() {
    let mut s = state(Duration::ZERO);
    let v = ip("10.0.0.9");
    let until: jiff::Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
    s.set_claim(ClaimObject {
        retained: Some(StoredRetention { until, role: None }),
        ..claim(v, ServiceRef::of_request("ns", "web", "", "req-1"), "u1")
    });
    assert!(s.allocators().has(v));
    assert_eq!(s.retained_for(&ServiceRef::named("ns", "web")).len(), 1);
    assert_eq!(s.retained_claims()[0].until, Some(until));
}

#[test]
fn a_generate_name_services_value_is_retained_for_the_name_it_was_given() {
    let mut s = state(HOUR);
    let v = ip("10.0.0.10");
    let c = claim(v, ServiceRef::of_request("ns", "", "web-", "req-1"), "u1");
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
    s.remove_service(&key("web-x7k2p"));
    assert_eq!(
        s.retained_for(&ServiceRef::named("ns", "web-x7k2p")).len(),
        1
    );
    assert_eq!(s.pending_retentions()[0].service_name, "web-x7k2p");
}

#[test]
fn a_new_incarnation_holding_a_retained_value_binds_its_claim_and_ends_the_retention() {
    let mut s = state(HOUR);
    let v = ip("10.0.0.11");
    let c = deleted_web(&mut s, v, None);
    service(&mut s, "web", "svc-2", None, &[v]);
    assert_eq!(s.claim_binding(&c.name), Some("svc-2"));
    assert!(s.retained_claims().is_empty());
    assert!(s.pending_retentions().is_empty());
    // Deleted again: retained again, from then.
    s.remove_service(&key("web"));
    assert_eq!(s.pending_retentions().len(), 1);
}

#[test]
fn deleting_a_retained_claim_frees_its_value_at_once() {
    let mut s = state(HOUR);
    let v = ip("10.0.0.12");
    let c = deleted_web(&mut s, v, None);
    s.remove_claim(&c.name);
    assert!(!s.allocators().has(v));
    assert!(s.pending_retentions().is_empty());
    assert!(s.retained_claims().is_empty());
}

#[test]
fn a_value_the_living_service_gives_up_is_released_not_retained() {
    let mut s = state(HOUR);
    let v = Claim::NodePort(30003);
    let c = claim(v, ServiceRef::of_request("ns", "web", "", "req-1"), "u1");
    s.set_claim(c.clone());
    service(&mut s, "web", "svc-1", None, &[v]);
    service(&mut s, "web", "svc-1", None, &[]);
    assert!(s.released_claim(&c.name, "u1").is_some());
    assert!(s.retained_claims().is_empty());
}

#[test]
fn a_namespace_annotation_sits_between_the_services_and_the_flag() {
    use super::super::namespaces::NamespaceSettings;
    let opt_in = NamespaceSettings {
        retain: Some(HOUR),
        ..NamespaceSettings::default()
    };
    let opt_out = NamespaceSettings {
        retain: Some(Duration::ZERO),
        ..NamespaceSettings::default()
    };
    let v = ip("10.0.0.20");

    let mut s = state(Duration::ZERO);
    s.set_namespace("ns", opt_in.clone());
    deleted_web(&mut s, v, None);
    assert!(
        s.allocators().has(v),
        "the namespace opts in with the flag off"
    );

    let mut s = state(HOUR);
    s.set_namespace("ns", opt_out.clone());
    deleted_web(&mut s, v, None);
    assert!(
        !s.allocators().has(v),
        "the namespace opts out with the flag on"
    );

    let mut s = state(Duration::ZERO);
    s.set_namespace("ns", opt_out);
    deleted_web(&mut s, v, Some(HOUR));
    assert!(s.allocators().has(v), "the Service's own annotation wins");

    let mut s = state(Duration::ZERO);
    s.set_namespace("ns", opt_in);
    s.remove_namespace("ns");
    deleted_web(&mut s, v, None);
    assert!(!s.allocators().has(v), "a namespace gone says nothing");
}
