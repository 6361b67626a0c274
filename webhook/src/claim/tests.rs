use std::net::IpAddr;

use kube::CustomResourceExt;
use svcplane_allocator::Claim;

use super::*;

fn ip(s: &str) -> Claim {
    Claim::Ip(s.parse::<IpAddr>().unwrap())
}

/// DNS-1123 subdomain, as the API server checks object names.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[test]
fn claim_names_are_valid_object_names_and_unique_per_value() {
    let values = [
        ip("10.96.0.10"),
        ip("fd00:10:96::a"),
        ip("fd00:10:96::"),
        ip("::1"),
        ip("2001:db8::ffff:0:1"),
        Claim::NodePort(30080),
        Claim::NodePort(1),
    ];
    let names: Vec<String> = values.iter().map(|v| claim_name(*v)).collect();
    for n in &names {
        assert!(is_dns_subdomain(n), "{n} is not a valid object name");
    }
    let mut dedup = names.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), names.len());
    assert_eq!(names[0], "ip-10.96.0.10");
    assert_eq!(names[1], "ip-fd00-0010-0096-0000-0000-0000-0000-000a");
    assert_eq!(names[5], "nodeport-30080");
}

#[test]
fn equal_addresses_in_different_spellings_share_one_claim() {
    assert_eq!(claim_name(ip("fd00:0:0::1")), claim_name(ip("fd00::1")));
}

#[test]
fn a_claim_round_trips_its_value_and_owner() {
    let owner = ServiceRef::of_request("shop", "", "web-", "uid-9");
    let c = AllocationClaim::for_value(ip("fd00::5"), &owner);
    let (key, o, v) = c.holding().unwrap();
    assert_eq!(v, ip("fd00::5"));
    assert_eq!(o, owner);
    assert_eq!(
        key,
        HolderKey::Claim {
            name: claim_name(ip("fd00::5"))
        }
    );
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["spec"]["kind"], "ClusterIP");
    assert_eq!(json["spec"]["service"]["generateName"], "web-");
    assert_eq!(json["spec"]["requestUid"], "uid-9");
}

#[test]
fn a_claim_whose_name_is_not_its_values_is_no_lock() {
    let mut c = AllocationClaim::for_value(Claim::NodePort(30001), &ServiceRef::named("a", "b"));
    c.metadata.name = Some("nodeport-30002".into());
    assert!(c.holding().is_none());
    c.metadata.name = Some("nodeport-30001".into());
    c.spec.value = "not-a-port".into();
    assert!(c.holding().is_none());
}

#[test]
fn the_crd_is_cluster_scoped_with_a_schema() {
    let crd = AllocationClaim::crd();
    assert_eq!(crd.spec.group, GROUP);
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!(crd.spec.names.plural, "allocationclaims");
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1alpha1");
    let schema = serde_json::to_value(v.schema.as_ref().unwrap()).unwrap();
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(
        spec["properties"]["kind"]["enum"],
        serde_json::json!(["ClusterIP", "NodePort"])
    );
    assert!(
        spec["required"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("value"))
    );
}

#[test]
fn a_retention_is_stored_with_its_end_its_field_the_service_name_and_a_precondition() {
    use crate::state::PendingRetention;
    use crate::state::retention::Role;
    let p = PendingRetention {
        claim: "ip-10.0.0.1".into(),
        resource_version: "42".into(),
        retain: std::time::Duration::from_secs(90),
        role: Some(Role::ClusterIp(0)),
        service_name: "web-x7k2p".into(),
    };
    let wall: jiff::Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
    let (until, body) = super::retention_patch(&p, wall);
    assert_eq!(until.to_string(), "2026-11-29T12:01:30Z");
    assert_eq!(
        body,
        serde_json::json!({
            "metadata": {"resourceVersion": "42"},
            "spec": {
                "service": {"name": "web-x7k2p"},
                "retained": {"until": "2026-11-29T12:01:30Z", "field": "clusterIPs[0]"},
            },
        })
    );
    // What the patch stores reads back as the state's retention.
    let stored: super::ClaimRetention =
        serde_json::from_value(body["spec"]["retained"].clone()).unwrap();
    let r = stored.stored().unwrap();
    assert_eq!((r.until, r.role), (until, Some(Role::ClusterIp(0))));
}
