//! Ranges by namespace (`svcplane.io/namespace-selector` on ServiceCIDRs): a namespace a
//! ready ServiceCIDR selects gets ClusterIPs only from the ServiceCIDRs selecting it,
//! and a 422 for an address elsewhere; other namespaces keep the ranges without a
//! selector.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use svcplane_allocator::Cidr;
use svcplane_allocator::namespace_selector::NamespaceSelector;
use svcplane_allocator::range::IpFamily;
use svcplane_allocator::range_scope::RangeScope;
use svcplane_allocator::service_cidrs::ClusterRange;

use super::*;
use crate::review::mutate;
use crate::state::namespaces::NamespaceSettings;

/// `shared` (10.0.0.0/24, every namespace) and `team-a` (10.1.0.0/24, namespaces
/// labelled team=a; ready as given); namespace `ns` labelled `labels`.
fn cluster(team_ready: bool, labels: &[(&str, &str)]) -> AllocationState {
    let mut st = small();
    let selector = NamespaceSelector::parse("team=a").unwrap();
    let refused = st.set_ranges(
        &[
            ClusterRange {
                cidr: Cidr::parse("10.0.0.0/24").unwrap(),
                ready: true,
                objects: vec!["shared".into()],
                scope: RangeScope::Everyone,
            },
            ClusterRange {
                cidr: Cidr::parse("10.1.0.0/24").unwrap(),
                ready: team_ready,
                objects: vec!["team-a".into()],
                scope: RangeScope::of_object("team-a", Some(Some(&selector))),
            },
        ],
        Some(IpFamily::V4),
    );
    assert!(refused.is_empty(), "{refused:?}");
    st.set_namespace(
        "ns",
        NamespaceSettings {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
            ..NamespaceSettings::default()
        },
    );
    st
}

fn asking_for(ip: &str) -> Value {
    svc(
        "web",
        json!({"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip],
               "ports": [{"port": 80, "protocol": "TCP"}]}),
    )
}

fn automatic_ip(st: &mut AllocationState) -> String {
    let req = create(svc("web", cluster_ip_spec()));
    let out = patched(&req, &mutate(&req, st));
    out["spec"]["clusterIP"].as_str().unwrap().to_owned()
}

#[test]
fn a_selected_namespace_gets_automatic_addresses_only_from_its_servicecidr() {
    for _ in 0..20 {
        let ip = automatic_ip(&mut cluster(true, &[("team", "a")]));
        assert!(ip.starts_with("10.1.0."), "{ip}");
    }
}

#[test]
fn a_namespace_no_selector_picks_keeps_the_ranges_without_one() {
    for _ in 0..20 {
        let ip = automatic_ip(&mut cluster(true, &[("team", "b")]));
        assert!(ip.starts_with("10.0.0."), "{ip}");
    }
}

#[test]
fn an_address_outside_the_namespaces_servicecidrs_is_refused_naming_the_policy() {
    let d = mutate(
        &create(asking_for("10.0.0.7")),
        &mut cluster(true, &[("team", "a")]),
    );
    let MutateDecision::Deny(e) = d else {
        panic!("allowed: {d:?}");
    };
    let text = e.to_string();
    assert!(text.contains("spec.clusterIPs"), "{text}");
    assert!(
        text.contains("not in a ServiceCIDR serving namespace \"ns\" (serving it: 10.1.0.0/24 (ServiceCIDR team-a)"),
        "{text}"
    );
    assert!(text.contains("svcplane.io/namespace-selector"), "{text}");
    assert_eq!(
        e.code(),
        422,
        "an invalid field, as kube-apiserver words a refused address"
    );

    let d = mutate(&create(asking_for("10.1.0.7")), &mut cluster(true, &[]));
    assert!(
        matches!(d, MutateDecision::Deny(_)),
        "the selected range is not for others: {d:?}"
    );
    let d = mutate(
        &create(asking_for("10.1.0.7")),
        &mut cluster(true, &[("team", "a")]),
    );
    assert!(matches!(d, MutateDecision::Allow { .. }), "{d:?}");
}

#[test]
fn a_terminating_selected_servicecidr_binds_no_namespace() {
    let ip = automatic_ip(&mut cluster(false, &[("team", "a")]));
    assert!(ip.starts_with("10.0.0."), "{ip}");
}
