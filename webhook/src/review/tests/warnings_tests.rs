//! Dynamic-band warnings (beyond upstream; KEP-3070 / KEP-3668 bands of AL-2.3, AL-7.1).

use rstest::rstest;
use serde_json::json;
use svcplane_allocator::Claim;

use super::*;
use crate::review::{cluster_ip_band_warning, mutate, node_port_band_warning};

#[rstest]
// /16: offset clamps to 256, so the static band is .0.1-.1.0.
#[case::v4_16("10.96.0.0/16", "10.96.200.5", Some("10.96.0.1-10.96.1.0"))]
#[case::v4_16_first_dynamic("10.96.0.0/16", "10.96.1.1", Some("10.96.0.1-10.96.1.0"))]
#[case::v4_16_last_static("10.96.0.0/16", "10.96.1.0", None)]
// kubeadm's /12 (the example of AL-2.3).
#[case::v4_12("10.96.0.0/12", "10.100.0.1", Some("10.96.0.1-10.96.1.0"))]
#[case::v4_22("10.0.0.0/22", "10.0.0.65", Some("10.0.0.1-10.0.0.64"))]
#[case::v4_22_static("10.0.0.0/22", "10.0.0.64", None)]
#[case::v4_24("192.168.1.0/24", "192.168.1.17", Some("192.168.1.1-192.168.1.16"))]
#[case::v4_24_static("192.168.1.0/24", "192.168.1.16", None)]
#[case::v4_27("10.0.0.32/27", "10.0.0.49", Some("10.0.0.33-10.0.0.48"))]
// S <= 16: one band only, nothing better to suggest.
#[case::v4_28("10.0.0.0/28", "10.0.0.14", None)]
#[case::v6_112("fd00::/112", "fd00::101", Some("fd00::1-fd00::100"))]
#[case::v6_112_static("fd00::/112", "fd00::100", None)]
#[case::v6_64(
    "fd00:1:2:3::/64",
    "fd00:1:2:3:ffff::1",
    Some("fd00:1:2:3::1-fd00:1:2:3::100")
)]
#[case::v6_122("fd00::/122", "fd00::3f", Some("fd00::1-fd00::10"))]
#[case::v6_124("fd00::/124", "fd00::f", None)]
#[case::outside("10.0.0.0/24", "10.9.9.9", None)]
fn cluster_ip_band(#[case] cidr: &str, #[case] addr: &str, #[case] static_band: Option<&str>) {
    let st = state(cidr, "30000-32767");
    let got = cluster_ip_band_warning(st.allocators(), 1, ip(addr));
    let want = static_band.map(|band| {
        let canonical = svcplane_allocator::Cidr::parse(cidr).unwrap();
        format!(
            "spec.clusterIPs[1]: {addr} is in the dynamic band of {canonical} and may collide with automatic allocation; pick from the static band {band}"
        )
    });
    assert_eq!(got, want);
}

#[test]
fn cluster_ip_band_warning_exact_text() {
    let st = state("10.96.0.0/16", "30000-32767");
    assert_eq!(
        cluster_ip_band_warning(st.allocators(), 0, ip("10.96.200.5")).unwrap(),
        "spec.clusterIPs[0]: 10.96.200.5 is in the dynamic band of 10.96.0.0/16 and may collide with automatic allocation; pick from the static band 10.96.0.1-10.96.1.0"
    );
}

#[rstest]
#[case::default_dynamic("30000-32767", 32000, Some("30000-30085"))]
#[case::default_first_dynamic("30000-32767", 30086, Some("30000-30085"))]
#[case::default_last_static("30000-32767", 30085, None)]
#[case::size_129("30000-30128", 30016, Some("30000-30015"))]
#[case::size_4096("30000-34095", 31000, Some("30000-30127"))]
#[case::size_16("30000-30015", 30015, None)]
#[case::size_10("30000-30009", 30009, None)]
#[case::outside("30000-32767", 29999, None)]
fn node_port_band(#[case] range: &str, #[case] port: i32, #[case] static_band: Option<&str>) {
    let st = state("10.0.0.0/24", range);
    let got = node_port_band_warning(st.allocators().node_ports(), "spec.ports[2].nodePort", port);
    let want = static_band.map(|band| {
        format!(
            "spec.ports[2].nodePort: {port} is in the dynamic band of {range} and may collide with automatic allocation; pick from the static band {band}"
        )
    });
    assert_eq!(got, want);
}

#[test]
fn hand_picked_values_in_the_dynamic_band_warn_on_create() {
    let mut st = state("10.96.0.0/16", "30000-32767");
    let req = create(svc(
        "web",
        json!({
            "type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 31999,
            "clusterIP": "10.96.200.5", "clusterIPs": ["10.96.200.5"],
            "ports": [
                {"name": "a", "port": 80, "nodePort": 32000},
                {"name": "b", "port": 81, "nodePort": 30010},
                {"name": "c", "port": 82}
            ]
        }),
    ));
    let d = mutate(&req, &mut st);
    assert_eq!(
        warnings(&d),
        [
            "spec.clusterIPs[0]: 10.96.200.5 is in the dynamic band of 10.96.0.0/16 and may collide with automatic allocation; pick from the static band 10.96.0.1-10.96.1.0",
            "spec.ports[0].nodePort: 32000 is in the dynamic band of 30000-32767 and may collide with automatic allocation; pick from the static band 30000-30085",
            "spec.healthCheckNodePort: 31999 is in the dynamic band of 30000-32767 and may collide with automatic allocation; pick from the static band 30000-30085",
        ]
    );
}

#[test]
fn assigned_values_do_not_warn() {
    let mut st = state("10.96.0.0/16", "30000-32767");
    let d = mutate(
        &create(svc(
            "web",
            json!({"type": "NodePort", "ports": [{"port": 80}]}),
        )),
        &mut st,
    );
    assert!(reserved(&d).len() == 2);
    assert!(warnings(&d).is_empty());
}

#[test]
fn update_warns_only_for_new_hand_picks() {
    let mut st = state("10.96.0.0/16", "30000-32767");
    let old = svc(
        "web",
        json!({
            "type": "NodePort", "externalTrafficPolicy": "Cluster",
            "clusterIP": "10.96.200.5", "clusterIPs": ["10.96.200.5"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "a", "port": 80, "nodePort": 32000}]
        }),
    );
    st.set(
        HolderKey::Service {
            namespace: "ns".into(),
            name: "web".into(),
        },
        Some(ServiceRef::named("ns", "web")),
        vec![cip("10.96.200.5"), Claim::NodePort(32000)],
    );
    let mut new = old.clone();
    new["spec"]["ports"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "b", "port": 81, "nodePort": 32001}));
    let d = mutate(&update(new, old), &mut st);
    assert_eq!(
        warnings(&d),
        [
            "spec.ports[1].nodePort: 32001 is in the dynamic band of 30000-32767 and may collide with automatic allocation; pick from the static band 30000-30085"
        ]
    );
}

#[test]
fn a_retry_of_the_same_request_repeats_the_warning() {
    let mut st = state("10.96.0.0/16", "30000-32767");
    let req = create(svc(
        "web",
        json!({"type": "ClusterIP", "clusterIP": "10.96.200.5", "clusterIPs": ["10.96.200.5"], "ports": [{"port": 80}]}),
    ));
    let first = warnings(&mutate(&req, &mut st));
    // The shell re-runs the same request after losing a claim race; the first
    // attempt's reservation is still in place.
    let second = warnings(&mutate(&req, &mut st));
    assert_eq!(first.len(), 1);
    assert_eq!(first, second);
}
