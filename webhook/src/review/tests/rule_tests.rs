//! Rule tables of WH-8.2 (ClusterIP/NodePort part), WH-8.3 and WH-8.4, each
//! row checked against the exact rendered `field: body` texts upstream produces.

use k8s_openapi::api::core::v1::Service;
use rstest::rstest;
use serde_json::{Value, json};
use svcplane_allocator::view::SvcView;

use crate::review::{service_rules, validate_update};

fn service(spec: Value) -> Service {
    serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": spec})).unwrap()
}

fn rendered(errs: &[svcplane_allocator::FieldError]) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

fn rules(spec: Value) -> Vec<String> {
    rendered(&service_rules(&SvcView::from_service(&service(spec)), None))
}

#[rstest]
#[case::cluster_ip_without_ips(
    json!({"clusterIP": "10.0.0.1"}),
    &["spec.clusterIPs: Required value"])]
#[case::first_must_match(
    json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.2"]}),
    &["spec.clusterIPs: Invalid value: [\"10.0.0.2\"]: first value must match `clusterIP`"])]
#[case::ips_without_cluster_ip(
    json!({"clusterIPs": ["10.0.0.2"]}),
    &["spec.clusterIPs: Invalid value: [\"10.0.0.2\"]: must be empty when `clusterIP` is not specified"])]
#[case::family_not_supported(
    json!({"ipFamilies": ["IPv5"]}),
    &["spec.ipFamilies[0]: Unsupported value: \"IPv5\": supported values: \"IPv4\", \"IPv6\""])]
#[case::family_duplicate(
    json!({"ipFamilies": ["IPv4", "IPv4"]}),
    &["spec.ipFamilies[1]: Duplicate value: \"IPv4\""])]
#[case::policy_not_supported(
    json!({"ipFamilyPolicy": "MaybeDualStack"}),
    &["spec.ipFamilyPolicy: Unsupported value: \"MaybeDualStack\": supported values: \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\""])]
#[case::none_not_alone(
    json!({"clusterIP": "None", "clusterIPs": ["None", "10.0.0.1"]}),
    &["spec.clusterIPs: Invalid value: [\"None\",\"10.0.0.1\"]: 'None' must be the first and only value"])]
#[case::entry_not_an_ip(
    json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", "garbage"]}),
    &["spec.clusterIPs[1]: Invalid value: \"garbage\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"])]
#[case::empty_entry(
    json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", ""]}),
    &["spec.clusterIPs[1]: Invalid value: \"\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"])]
#[case::more_than_two(
    json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", "fd00::1", "10.0.0.2"]}),
    &["spec.clusterIPs: Invalid value: [\"10.0.0.1\",\"fd00::1\",\"10.0.0.2\"]: may only hold up to 2 values",
      "spec.clusterIPs: Invalid value: [\"10.0.0.1\",\"fd00::1\",\"10.0.0.2\"]: may specify no more than one IP for each IP family"])]
#[case::same_family_twice(
    json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", "10.0.0.2"]}),
    &["spec.clusterIPs: Invalid value: [\"10.0.0.1\",\"10.0.0.2\"]: may specify no more than one IP for each IP family"])]
#[case::family_mismatch_v4(
    json!({"clusterIP": "fd00::5", "clusterIPs": ["fd00::5"], "ipFamilies": ["IPv4"]}),
    &["spec.clusterIPs[0]: Invalid value: \"fd00::5\": expected an IPv4 value as indicated by `ipFamilies[0]`"])]
#[case::family_mismatch_v6(
    json!({"clusterIP": "fd00::5", "clusterIPs": ["fd00::5", "10.0.0.1"], "ipFamilies": ["IPv6", "IPv6"]}),
    &["spec.ipFamilies[1]: Duplicate value: \"IPv6\"",
      "spec.clusterIPs[1]: Invalid value: \"10.0.0.1\": expected an IPv6 value as indicated by `ipFamilies[1]`"])]
#[case::malformed_skips_family_checks(
    json!({"clusterIP": "x", "clusterIPs": ["x"], "ipFamilies": ["IPv6"]}),
    &["spec.clusterIPs[0]: Invalid value: \"x\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"])]
#[case::nil_policy_is_fine(
    json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"]}),
    &[])]
#[case::dual_stack_ok(
    json!({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", "fd00::1"], "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "RequireDualStack"}),
    &[])]
fn rule_8_3_cluster_ip_related_fields(#[case] spec: Value, #[case] want: &[&str]) {
    let mut spec = spec;
    spec["type"] = json!("ClusterIP");
    spec["ports"] = json!([{"port": 80}]);
    assert_eq!(rules(spec), want);
}

#[test]
fn rule_8_3_skipped_for_external_name() {
    assert!(rules(json!({"type": "ExternalName", "externalName": "a.example"})).is_empty());
}

#[rstest]
#[case::headless_node_port(
    json!({"type": "NodePort", "clusterIP": "None", "clusterIPs": ["None"], "ports": [{"port": 80, "nodePort": 30001}]}),
    &["spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services"])]
#[case::headless_load_balancer(
    json!({"type": "LoadBalancer", "clusterIP": "None", "clusterIPs": ["None"], "ports": [{"port": 80}]}),
    &["spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for LoadBalancer services"])]
#[case::external_name_with_ip_fields(
    json!({"type": "ExternalName", "externalName": "a.example", "clusterIPs": ["10.0.0.1"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"}),
    &["spec.clusterIPs: Forbidden: may not be set for ExternalName services",
      "spec.ipFamilies: Forbidden: may not be set for ExternalName services",
      "spec.ipFamilyPolicy: Forbidden: may not be set for ExternalName services"])]
#[case::node_port_on_cluster_ip(
    json!({"type": "ClusterIP", "ports": [{"port": 80}, {"port": 81, "nodePort": 30001}]}),
    &["spec.ports[1].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"])]
#[case::duplicate_node_port(
    json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30093}, {"port": 81, "nodePort": 30093}]}),
    &["spec.ports[1].nodePort: Duplicate value: 30093"])]
#[case::tcp_and_udp_share(
    json!({"type": "NodePort", "ports": [{"port": 53, "protocol": "TCP", "nodePort": 30053}, {"port": 53, "protocol": "UDP", "nodePort": 30053}]}),
    &[])]
#[case::hcnp_not_needed(
    json!({"type": "NodePort", "healthCheckNodePort": 30005, "ports": [{"port": 80, "nodePort": 30001}]}),
    &["spec.healthCheckNodePort: Invalid value: 30005: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"])]
#[case::hcnp_missing(
    json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [{"port": 80, "nodePort": 30001}]}),
    &["spec.healthCheckNodePort: Required value"])]
#[case::hcnp_not_a_port(
    json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 70000, "ports": [{"port": 80, "nodePort": 30001}]}),
    &["spec.healthCheckNodePort: Invalid value: 70000: must be between 1 and 65535, inclusive"])]
fn rule_8_2_node_port_and_cluster_ip_rules(#[case] spec: Value, #[case] want: &[&str]) {
    assert_eq!(rules(spec), want);
}

fn old_single() -> Value {
    json!({"type": "ClusterIP", "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "ports": [{"port": 80}]})
}

fn old_dual() -> Value {
    json!({"type": "ClusterIP", "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", "fd00::1"], "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]})
}

fn patch(base: Value, changes: Value) -> Value {
    let mut v = base;
    for (k, val) in changes.as_object().unwrap() {
        if val.is_null() {
            v.as_object_mut().unwrap().remove(k);
        } else {
            v[k] = val.clone();
        }
    }
    v
}

#[rstest]
#[case::cluster_ip_changed(old_single(),
    json!({"clusterIP": "10.0.0.9", "clusterIPs": ["10.0.0.9"]}),
    &["spec.clusterIPs[0]: Invalid value: [\"10.0.0.9\"]: may not change once set"])]
#[case::secondary_changed(old_dual(),
    json!({"clusterIPs": ["10.0.0.1", "fd00::2"]}),
    &["spec.clusterIPs[1]: Invalid value: [\"10.0.0.1\",\"fd00::2\"]: may not change once set"])]
#[case::primary_changed_on_upgrade(old_single(),
    json!({"clusterIP": "10.0.0.2", "clusterIPs": ["10.0.0.2", "fd00::1"], "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "RequireDualStack"}),
    &["spec.clusterIPs[0]: Invalid value: [\"10.0.0.2\",\"fd00::1\"]: may not change once set"])]
#[case::primary_changed_on_downgrade(old_dual(),
    json!({"clusterIP": "10.0.0.2", "clusterIPs": ["10.0.0.2"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"}),
    &["spec.clusterIPs[0]: Invalid value: [\"10.0.0.2\"]: may not change once set"])]
#[case::all_removed(old_single(),
    json!({"clusterIP": null, "clusterIPs": null}),
    &["spec.clusterIPs[0]: Invalid value: null: primary clusterIP can not be unset"])]
#[case::secondary_removed_without_single_stack(old_dual(),
    json!({"clusterIPs": ["10.0.0.1"], "ipFamilies": ["IPv4"]}),
    &["spec.ipFamilyPolicy: Invalid value: \"PreferDualStack\": must be set to 'SingleStack' when releasing the secondary clusterIP",
      "spec.ipFamilyPolicy: Invalid value: \"PreferDualStack\": must be set to 'SingleStack' when releasing the secondary ipFamily"])]
#[case::downgrade_ok(old_dual(),
    json!({"clusterIPs": ["10.0.0.1"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"}),
    &[])]
#[case::upgrade_ok(old_single(),
    json!({"clusterIPs": ["10.0.0.1", "fd00::1"], "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "PreferDualStack"}),
    &[])]
#[case::families_changed(old_single(),
    json!({"ipFamilies": ["IPv6"]}),
    &["spec.ipFamilies[0]: Invalid value: [\"IPv6\"]: may not change once set"])]
#[case::both_families_swapped(old_dual(),
    json!({"ipFamilies": ["IPv6", "IPv4"]}),
    &["spec.ipFamilies[0]: Invalid value: [\"IPv6\",\"IPv4\"]: may not change once set",
      "spec.ipFamilies[0]: Invalid value: [\"IPv6\",\"IPv4\"]: may not change once set"])]
#[case::primary_family_changed_on_upgrade(old_single(),
    json!({"clusterIPs": ["10.0.0.1", "fd00::1"], "ipFamilies": ["IPv6", "IPv4"], "ipFamilyPolicy": "PreferDualStack"}),
    &["spec.ipFamilies[0]: Invalid value: [\"10.0.0.1\",\"fd00::1\"]: may not change once set"])]
#[case::primary_family_unset(old_dual(),
    json!({"clusterIP": null, "clusterIPs": null, "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"}),
    &["spec.clusterIPs[0]: Invalid value: null: primary clusterIP can not be unset",
      "spec.ipFamilies[0]: Invalid value: [\"IPv4\"]: primary ipFamily can not be unset"])]
#[case::headless_to_headless_changes_families(
    json!({"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"], "ipFamilies": ["IPv4"], "ports": [{"port": 80}]}),
    json!({"ipFamilies": ["IPv6"]}),
    &[])]
#[case::to_external_name(old_single(),
    json!({"type": "ExternalName", "externalName": "a.example", "clusterIP": null, "clusterIPs": null, "ipFamilies": null, "ipFamilyPolicy": null}),
    &[])]
#[case::lb_class_changed(
    json!({"type": "LoadBalancer", "loadBalancerClass": "a.example/one", "ports": [{"port": 80}]}),
    json!({"loadBalancerClass": "a.example/two"}),
    &["spec.loadBalancerClass: Invalid value: \"a.example/two\": may not change once set"])]
#[case::lb_class_removed(
    json!({"type": "LoadBalancer", "loadBalancerClass": "a.example/one", "ports": [{"port": 80}]}),
    json!({"loadBalancerClass": null}),
    &["spec.loadBalancerClass: Invalid value: null: may not change once set"])]
#[case::hcnp_changed(
    json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 30005, "ports": [{"port": 80}]}),
    json!({"healthCheckNodePort": 30006}),
    &["spec.healthCheckNodePort: Forbidden: field is immutable"])]
#[case::hcnp_dropped_with_local(
    json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 30005, "ports": [{"port": 80}]}),
    json!({"externalTrafficPolicy": "Cluster", "healthCheckNodePort": null}),
    &[])]
fn rule_8_4_update_rules(#[case] old: Value, #[case] changes: Value, #[case] want: &[&str]) {
    let new = patch(old.clone(), changes);
    assert_eq!(
        rendered(&validate_update(&service(new), &service(old))),
        want
    );
}

// WH-8.8 strict IP validation (StrictIPCIDRValidation, on in 1.37)

#[rstest]
#[case::leading_zeros(
    json!({"clusterIP": "010.0.0.1", "clusterIPs": ["010.0.0.1"]}),
    &["spec.clusterIPs[0]: Invalid value: \"010.0.0.1\": must not have leading 0s"])]
#[case::leading_zeros_in_the_secondary(
    json!({"clusterIP": "fd00::1", "clusterIPs": ["fd00::1", "10.0.0.01"]}),
    &["spec.clusterIPs[1]: Invalid value: \"10.0.0.01\": must not have leading 0s"])]
#[case::ipv4_mapped(
    json!({"clusterIP": "::ffff:10.0.0.1", "clusterIPs": ["::ffff:10.0.0.1"]}),
    &["spec.clusterIPs[0]: Invalid value: \"::ffff:10.0.0.1\": must not be an IPv4-mapped IPv6 address"])]
#[case::upper_case_ipv6_is_valid(
    json!({"clusterIP": "FD00::1", "clusterIPs": ["FD00::1"]}),
    &[])]
#[case::long_form_ipv6_is_valid(
    json!({"clusterIP": "fd00:0:0:0:0:0:0:1", "clusterIPs": ["fd00:0:0:0:0:0:0:1"]}),
    &[])]
fn rule_8_8_strict_ip_forms_are_refused_on_create(#[case] spec: Value, #[case] want: &[&str]) {
    let mut spec = spec;
    spec["type"] = json!("ClusterIP");
    spec["ports"] = json!([{"port": 80}]);
    assert_eq!(rules(spec), want);
}

#[test]
fn rule_8_8_a_stored_non_strict_cluster_ip_is_kept_on_update() {
    let spec = json!({"type": "ClusterIP", "ports": [{"port": 80}],
        "clusterIP": "010.0.0.1", "clusterIPs": ["010.0.0.1"]});
    let old = SvcView::from_service(&service(spec.clone()));
    let new = SvcView::from_service(&service(spec));
    assert_eq!(
        rendered(&service_rules(&new, Some(&old))),
        Vec::<String>::new()
    );
    // Only what the old object held is exempt.
    let other = json!({"type": "ClusterIP", "ports": [{"port": 80}],
        "clusterIP": "010.0.0.2", "clusterIPs": ["010.0.0.2"]});
    let new = SvcView::from_service(&service(other));
    assert_eq!(
        rendered(&service_rules(&new, Some(&old))),
        ["spec.clusterIPs[0]: Invalid value: \"010.0.0.2\": must not have leading 0s"]
    );
}
