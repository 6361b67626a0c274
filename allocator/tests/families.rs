//! AL-4 (IP-family resolution) and AL-5.1 (normalisation), one table per rule.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;

use common::{allocators, cluster_ips, families, spec, svc};
use rstest::rstest;
use serde_json::json;
use svcplane_allocator::ServiceError;

const V4: &str = "10.0.0.0/16";
const DUAL: &str = "10.0.0.0/16,fd00::/108";
const DUAL6: &str = "fd00::/108,10.0.0.0/16";

fn create(
    cidrs: &str,
    spec_json: serde_json::Value,
) -> Result<k8s_openapi::api::core::v1::Service, ServiceError> {
    let mut al = allocators(cidrs, "30000-32767", 1);
    let mut s = svc("default", "web", spec_json);
    al.allocate_create(&mut s, false).map(|_| s)
}

/// AL-4 steps 2, 10, 11: policy and family defaulting on create.
#[rstest]
#[case::nil_policy_is_single_stack(V4, json!({"selector": {"a": "b"}, "ports": [{"port": 80}]}), "SingleStack", &["IPv4"][..])]
#[case::nil_policy_dual_cluster_single(DUAL, json!({"selector": {"a": "b"}, "ports": [{"port": 80}]}), "SingleStack", &["IPv4"][..])]
#[case::primary_family_is_first_flag(DUAL6, json!({"selector": {"a": "b"}, "ports": [{"port": 80}]}), "SingleStack", &["IPv6"][..])]
#[case::prefer_dual_on_dual_cluster(DUAL, json!({"ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]}), "PreferDualStack", &["IPv4", "IPv6"][..])]
#[case::prefer_dual_on_single_cluster_stays_single(V4, json!({"ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]}), "PreferDualStack", &["IPv4"][..])]
#[case::require_dual_appends_other(DUAL, json!({"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6"], "ports": [{"port": 80}]}), "RequireDualStack", &["IPv6", "IPv4"][..])]
#[case::headless_selectorless_is_require_dual(V4, json!({"clusterIP": "None"}), "RequireDualStack", &["IPv4", "IPv6"][..])]
#[case::headless_with_selector_is_single(V4, json!({"clusterIP": "None", "selector": {"a": "b"}}), "SingleStack", &["IPv4"][..])]
#[case::families_inferred_from_ips(DUAL, json!({"ipFamilyPolicy": "PreferDualStack", "clusterIP": "fd00::10", "clusterIPs": ["fd00::10", "10.0.5.5"]}), "PreferDualStack", &["IPv6", "IPv4"][..])]
fn family_defaulting(
    #[case] cidrs: &str,
    #[case] spec_json: serde_json::Value,
    #[case] policy: &str,
    #[case] fams: &[&str],
) {
    let s = create(cidrs, spec_json).unwrap();
    assert_eq!(spec(&s).ip_family_policy.as_deref(), Some(policy));
    assert_eq!(families(&s), fams);
}

/// AL-4 steps 3, 5, 6, 8, 9: rejected combinations, with upstream's field paths and texts.
#[rstest]
#[case::require_dual_on_single_cluster(V4, json!({"ipFamilyPolicy": "RequireDualStack"}),
    "spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services")]
#[case::family_not_configured(V4, json!({"ipFamilies": ["IPv6"]}),
    "spec.ipFamilies[0]: Invalid value: \"IPv6\": not configured on this cluster")]
#[case::ip_family_not_configured(V4, json!({"clusterIP": "fd00::1", "clusterIPs": ["fd00::1"]}),
    "spec.clusterIPs[0]: Invalid value: [\"fd00::1\"]: IPv6 is not configured on this cluster")]
#[case::single_stack_two_ips(DUAL, json!({"ipFamilyPolicy": "SingleStack", "clusterIP": "10.0.5.5", "clusterIPs": ["10.0.5.5", "fd00::5"]}),
    "spec.ipFamilyPolicy: Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified")]
#[case::single_stack_two_families(DUAL, json!({"ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4", "IPv6"]}),
    "spec.ipFamilyPolicy: Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified")]
#[case::cluster_ips_without_cluster_ip(V4, json!({"clusterIPs": ["10.0.5.5"]}),
    "spec.clusterIPs: Invalid value: [\"10.0.5.5\"]: must be empty when `clusterIP` is not specified")]
#[case::first_must_match(V4, json!({"clusterIP": "10.0.5.5", "clusterIPs": ["10.0.5.6"]}),
    "spec.clusterIPs: Invalid value: [\"10.0.5.6\"]: first value must match `clusterIP`")]
#[case::bad_family_name(V4, json!({"ipFamilies": ["IPv5"]}),
    "spec.ipFamilies[0]: Unsupported value: \"IPv5\": supported values: \"IPv4\", \"IPv6\"")]
#[case::duplicate_family(DUAL, json!({"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv4", "IPv4"]}),
    "spec.ipFamilies[1]: Duplicate value: \"IPv4\"")]
#[case::bad_policy(V4, json!({"ipFamilyPolicy": "Sometimes"}),
    "spec.ipFamilyPolicy: Unsupported value: \"Sometimes\": supported values: \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\"")]
#[case::none_not_alone(DUAL, json!({"clusterIP": "None", "clusterIPs": ["None", "10.0.5.5"]}),
    "spec.clusterIPs: Invalid value: [\"None\",\"10.0.5.5\"]: 'None' must be the first and only value")]
#[case::not_an_ip(V4, json!({"clusterIP": "garbage", "clusterIPs": ["garbage"]}),
    "spec.clusterIPs[0]: Invalid value: \"garbage\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")]
#[case::same_family_twice(DUAL, json!({"ipFamilyPolicy": "PreferDualStack", "clusterIP": "10.0.5.5", "clusterIPs": ["10.0.5.5", "10.0.5.6"]}),
    "spec.clusterIPs: Invalid value: [\"10.0.5.5\",\"10.0.5.6\"]: may specify no more than one IP for each IP family")]
#[case::ip_family_mismatch(DUAL, json!({"ipFamilies": ["IPv6"], "clusterIP": "10.0.5.5", "clusterIPs": ["10.0.5.5"]}),
    "spec.clusterIPs[0]: Invalid value: \"10.0.5.5\": expected an IPv6 value as indicated by `ipFamilies[0]`")]
fn family_errors(#[case] cidrs: &str, #[case] spec_json: serde_json::Value, #[case] cause: &str) {
    let e = create(cidrs, spec_json).unwrap_err();
    assert_eq!(e.code(), 422, "{e}");
    assert!(e.causes().iter().any(|c| c.to_string() == cause), "{e}");
    assert_eq!(
        e.to_string(),
        format!("Service \"web\" is invalid: {cause}")
    );
}

/// AL-4 "more than two" is reported together with the per-IP checks.
#[test]
fn more_than_two_cluster_ips() {
    let e = create(
        DUAL,
        json!({"clusterIP": "10.0.5.5", "clusterIPs": ["10.0.5.5", "fd00::1", "10.0.5.6"]}),
    )
    .unwrap_err();
    assert!(e.to_string().contains("spec.clusterIPs: Invalid value: [\"10.0.5.5\",\"fd00::1\",\"10.0.5.6\"]: may only hold up to 2 values"), "{e}");
}

/// AL-5.1 create normalisation: clusterIP alone fills clusterIPs.
#[test]
fn create_copies_cluster_ip_into_cluster_ips() {
    let s = create(
        V4,
        json!({"clusterIP": "10.0.3.3", "ports": [{"port": 80}]}),
    )
    .unwrap();
    assert_eq!(cluster_ips(&s), ["10.0.3.3"]);
}

/// AL-4 headless Services never receive IPs.
#[rstest]
#[case::selector(json!({"clusterIP": "None", "selector": {"a": "b"}}))]
#[case::selectorless(json!({"clusterIP": "None"}))]
fn headless_gets_no_ip(#[case] spec_json: serde_json::Value) {
    let s = create(DUAL, spec_json).unwrap();
    assert_eq!(cluster_ips(&s), ["None"]);
    assert_eq!(spec(&s).cluster_ip.as_deref(), Some("None"));
}

/// AL-4 ExternalName skips family resolution and allocation.
#[test]
fn external_name_untouched() {
    let s = create(
        DUAL,
        json!({"type": "ExternalName", "externalName": "example.com"}),
    )
    .unwrap();
    assert!(cluster_ips(&s).is_empty());
    assert!(families(&s).is_empty());
    assert_eq!(spec(&s).ip_family_policy, None);
}

/// AL-4 dual-stack Service: IP order follows ipFamilies.
#[rstest]
#[case::v4_first(DUAL, "IPv4")]
#[case::v6_first(DUAL6, "IPv6")]
fn dual_stack_ip_order(#[case] cidrs: &str, #[case] first: &str) {
    let s = create(
        cidrs,
        json!({"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}),
    )
    .unwrap();
    let ips = cluster_ips(&s);
    assert_eq!(ips.len(), 2);
    assert_eq!(ips[0].contains(':'), first == "IPv6");
    assert_eq!(ips[1].contains(':'), first != "IPv6");
    assert_eq!(spec(&s).cluster_ip.as_deref(), Some(ips[0].as_str()));
}
