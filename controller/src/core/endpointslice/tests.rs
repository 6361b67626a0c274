//! Rule tests for the EndpointSlice reconciler, one per rule of
//! ES-2 (`docs/endpointslice.md`) and the worked examples of ES-2.7.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::{EndpointHints, EndpointSlice, ForZone};
use rstest::rstest;

use super::{Inputs, Outcome, SkipReason, SlicePlan, SliceWrite, reconcile};
use crate::core::fixtures::{apply_plan, as_stored, node, nodes, pod, svc};
use crate::core::keys::{ANNOTATION_TRIGGER_TIME, LABEL_HEADLESS, LABEL_SERVICE_NAME};
use crate::core::slice_endpoints::SliceEndpoints;

fn cluster_nodes() -> std::collections::BTreeMap<String, Arc<k8s_openapi::api::core::v1::Node>> {
    nodes(&[
        node("node-a", Some("zone-a")),
        node("node-b", Some("zone-b")),
    ])
}

/// Reconciles with the test cluster's Nodes.
fn outcome(
    service: &Service,
    pods: &[Arc<Pod>],
    existing: &[Arc<EndpointSlice>],
    trigger_time: Option<k8s_openapi::jiff::Timestamp>,
    max: usize,
) -> Outcome {
    let nodes = cluster_nodes();
    reconcile(&Inputs {
        service,
        pods,
        nodes: &nodes,
        existing,
        trigger_time,
        max_endpoints_per_slice: max,
    })
}

fn plan_max(
    service: &Service,
    pods: &[Arc<Pod>],
    existing: &[Arc<EndpointSlice>],
    max: usize,
) -> SlicePlan {
    let trigger_time = service.metadata.creation_timestamp.as_ref().map(|t| t.0);
    match outcome(service, pods, existing, trigger_time, max) {
        Outcome::Planned(p) => p,
        Outcome::Skipped(r) => panic!("unexpected skip {r:?}"),
    }
}

fn plan(service: &Service, pods: &[Arc<Pod>], existing: &[Arc<EndpointSlice>]) -> SlicePlan {
    plan_max(service, pods, existing, 100)
}

/// Plans from nothing and applies, returning the stored slices.
fn converge(service: &Service, pods: &[Arc<Pod>], max: usize) -> Vec<Arc<EndpointSlice>> {
    let p = plan_max(service, pods, &[], max);
    apply_plan(&[], &p)
}

fn ready_pods(app: &str, n: usize) -> Vec<Arc<Pod>> {
    (0..n)
        .map(|i| {
            pod(&format!("{app}-{i:05}"), app)
                .ip(&format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256))
                .ready()
                .arc()
        })
        .collect()
}

/// Stored slices holding exactly the given pods' endpoints, one slice per
/// chunk size.
fn slices_of(service: &Service, pods: &[Arc<Pod>], sizes: &[usize]) -> Vec<Arc<EndpointSlice>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, size) in sizes.iter().enumerate() {
        let chunk = &pods[start..start + size];
        start += size;
        let p = plan_max(service, chunk, &[], 1000);
        let created = p.passes[0].creates[0].clone();
        out.push(Arc::new(as_stored(created, &format!("existing-{i}"))));
    }
    out
}

fn sizes(slices: &[Arc<EndpointSlice>]) -> Vec<usize> {
    let mut s: Vec<usize> = slices.iter().map(|s| s.endpoints().len()).collect();
    s.sort_unstable_by(|a, b| b.cmp(a));
    s
}

fn verbs(p: &SlicePlan) -> Vec<&'static str> {
    p.writes()
        .map(|w| match w {
            SliceWrite::Create(_) => "create",
            SliceWrite::Update(_) => "update",
            SliceWrite::Delete(_) => "delete",
        })
        .collect()
}

fn only_slice(p: &SlicePlan) -> EndpointSlice {
    let writes: Vec<SliceWrite> = p.writes().collect();
    assert_eq!(writes.len(), 1, "expected one write, got {writes:?}");
    match writes.into_iter().next() {
        Some(SliceWrite::Create(s) | SliceWrite::Update(s)) => s,
        other => panic!("expected a create or update, got {other:?}"),
    }
}

// ES-2.2 which Services are handled

#[test]
fn rule_2_2_external_name_service_is_left_alone() {
    let s = svc("web").external_name().build();
    let out = outcome(&s, &ready_pods("web", 1), &[], None, 100);
    assert_eq!(out, Outcome::Skipped(SkipReason::ExternalName));
}

#[test]
fn rule_2_2_service_without_selector_is_left_alone() {
    let s = svc("web").no_selector().build();
    let out = outcome(&s, &ready_pods("web", 1), &[], None, 100);
    assert_eq!(out, Outcome::Skipped(SkipReason::NoSelector));
}

#[test]
fn rule_2_2_only_selected_pods_of_the_service_namespace_count() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = crate::core::fixtures::selection_pods();
    let slice = only_slice(&plan(&s, &pods, &[]));
    assert_eq!(slice.endpoints().len(), 1);
    assert_eq!(slice.endpoints()[0].addresses, vec!["10.0.0.1"]);
}

#[test]
fn rule_2_2_only_managed_slices_of_the_service_not_being_deleted_are_listed() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 2);
    let stored = converge(&s, &pods, 100);
    // The same slice managed by someone else, or being deleted, is invisible:
    // the controller plans a fresh create.
    let mut foreign = (*stored[0]).clone();
    if let Some(l) = foreign.metadata.labels.as_mut() {
        l.insert(
            "endpointslice.kubernetes.io/managed-by".into(),
            "someone-else".into(),
        );
    }
    assert_eq!(verbs(&plan(&s, &pods, &[Arc::new(foreign)])), ["create"]);
    let mut deleting = (*stored[0]).clone();
    deleting.metadata.deletion_timestamp = s.metadata.creation_timestamp.clone();
    assert_eq!(verbs(&plan(&s, &pods, &[Arc::new(deleting)])), ["create"]);
    assert!(plan(&s, &pods, &stored).is_noop());
}

// ES-2.3 address types

#[rstest]
#[case::ipv4_family(svc("s").families(&["IPv4"]).build(), &["IPv4"])]
#[case::ipv6_family(svc("s").families(&["IPv6"]).build(), &["IPv6"])]
#[case::dual_stack_order_kept(svc("s").families(&["IPv6", "IPv4"]).build(), &["IPv6", "IPv4"])]
#[case::legacy_v4_cluster_ip(svc("s").no_families().cluster_ip("10.0.0.1").build(), &["IPv4"])]
#[case::legacy_v6_cluster_ip(svc("s").no_families().cluster_ip("fd00::1").build(), &["IPv6"])]
#[case::legacy_headless_is_both(svc("s").no_families().headless().build(), &["IPv4", "IPv6"])]
#[case::legacy_empty_is_both(svc("s").no_families().cluster_ip("").build(), &["IPv4", "IPv6"])]
fn rule_2_3_address_types_handled(#[case] service: Service, #[case] want: &[&str]) {
    let got: Vec<&str> = super::desired::address_types(&service)
        .iter()
        .map(|f| f.address_type())
        .collect();
    assert_eq!(got, want);
}

#[test]
fn rule_2_3_dual_stack_gets_one_slice_per_family() {
    let s = svc("web")
        .families(&["IPv4", "IPv6"])
        .port("http", 80, 8080)
        .build();
    let pods = vec![pod("a", "web").ips(&["10.0.0.1", "fd00::1"]).ready().arc()];
    let p = plan(&s, &pods, &[]);
    let types: Vec<String> = p
        .writes()
        .filter_map(|w| match w {
            SliceWrite::Create(s) => Some(format!(
                "{}:{}",
                s.address_type,
                s.endpoints()[0].addresses[0]
            )),
            _ => None,
        })
        .collect();
    assert_eq!(types, ["IPv4:10.0.0.1", "IPv6:fd00::1"]);
}

#[test]
fn rule_2_3_slices_of_unsupported_address_types_are_deleted_last() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 130);
    let mut legacy = slices_of(&s, &pods, &[80, 50]);
    for (i, sl) in legacy.iter_mut().enumerate() {
        let mut copy = (**sl).clone();
        copy.address_type = "IP".into();
        copy.metadata.name = Some(format!("legacy-{i}"));
        *sl = Arc::new(copy);
    }
    let p = plan(&s, &pods, &legacy);
    assert_eq!(verbs(&p), ["create", "create", "delete", "delete"]);
    let after = apply_plan(&legacy, &p);
    assert_eq!(sizes(&after), [100, 30]);
}

// ES-2.4 desired endpoints

#[test]
fn rule_2_4_ineligible_pods_are_skipped_terminating_ones_kept() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = vec![
        pod("done", "web")
            .ip("10.0.0.1")
            .ready()
            .phase("Succeeded")
            .arc(),
        pod("failed", "web")
            .ip("10.0.0.2")
            .ready()
            .phase("Failed")
            .arc(),
        pod("no-ip", "web").ready().arc(),
        pod("stopping", "web")
            .ip("10.0.0.4")
            .ready()
            .terminating()
            .arc(),
    ];
    let slice = only_slice(&plan(&s, &pods, &[]));
    let names: Vec<_> = slice
        .endpoints()
        .iter()
        .filter_map(|e| e.target_ref.as_ref()?.name.clone())
        .collect();
    assert_eq!(names, ["stopping"]);
}

#[test]
fn rule_2_4_only_pod_ips_are_read() {
    let s = svc("web").port("http", 80, 8080).build();
    let mut p = pod("a", "web").ready().build();
    if let Some(st) = p.status.as_mut() {
        st.pod_ip = Some("10.0.0.1".into());
    }
    let slice = only_slice(&plan(&s, &[Arc::new(p)], &[]));
    assert!(
        slice.endpoints().is_empty(),
        "podIP alone must not make an endpoint"
    );
}

#[rstest]
#[case::ready(true, false, false, true, true, false)]
#[case::not_ready(false, false, false, false, false, false)]
#[case::ready_terminating(true, true, false, false, true, true)]
#[case::not_ready_terminating(false, true, false, false, false, true)]
#[case::not_ready_published(false, false, true, true, false, false)]
#[case::ready_terminating_published(true, true, true, true, true, true)]
#[case::not_ready_terminating_published(false, true, true, true, false, true)]
fn rule_2_4_condition_truth_table(
    #[case] pod_ready: bool,
    #[case] terminating: bool,
    #[case] publish_not_ready: bool,
    #[case] ready: bool,
    #[case] serving: bool,
    #[case] term: bool,
) {
    let mut b = svc("web").port("http", 80, 8080);
    if publish_not_ready {
        b = b.publish_not_ready();
    }
    let s = b.build();
    let mut p = pod("a", "web").ip("10.0.0.1");
    p = if pod_ready { p.ready() } else { p.not_ready() };
    if terminating {
        p = p.terminating();
    }
    let slice = only_slice(&plan(&s, &[p.arc()], &[]));
    let c = slice.endpoints()[0].conditions.clone().unwrap_or_default();
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(ready), Some(serving), Some(term))
    );
}

#[test]
fn rule_2_4_endpoint_fields() {
    let s = svc("db").headless().port("sql", 5432, 5432).build();
    let pods = vec![
        pod("db-0", "db")
            .ip("010.0.0.1")
            .ready()
            .hostname("db-0", "db")
            .node("node-b")
            .arc(),
        pod("db-1", "db")
            .ip("10.0.0.2")
            .ready()
            .hostname("db-1", "other")
            .arc(),
    ];
    let slice = only_slice(&plan(&s, &pods, &[]));
    let e0 = &slice.endpoints()[0];
    assert_eq!(e0.addresses, ["10.0.0.1"], "canonical address");
    assert_eq!(e0.hostname.as_deref(), Some("db-0"));
    assert_eq!(e0.node_name.as_deref(), Some("node-b"));
    assert_eq!(e0.zone.as_deref(), Some("zone-b"));
    let r = e0.target_ref.clone().unwrap_or_default();
    assert_eq!(
        (
            r.kind.as_deref(),
            r.namespace.as_deref(),
            r.name.as_deref(),
            r.uid.as_deref()
        ),
        (
            Some("Pod"),
            Some("default"),
            Some("db-0"),
            Some("uid-pod-db-0")
        )
    );
    assert_eq!((r.api_version, r.resource_version), (None, None));
    assert_eq!(
        slice.endpoints()[1].hostname,
        None,
        "subdomain must equal the Service name"
    );
    assert!(e0.hints.is_none() && e0.deprecated_topology.is_none());
}

#[test]
fn rule_2_4_pod_on_missing_node_is_withheld_and_the_sync_fails() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = vec![
        pod("a", "web").ip("10.0.0.1").ready().arc(),
        pod("lost", "web").ip("10.0.0.2").ready().node("gone").arc(),
    ];
    let p = plan(&s, &pods, &[]);
    assert_eq!(only_slice(&p).endpoints().len(), 1);
    assert_eq!(
        p.error.as_deref(),
        Some("skipping Pod lost for Service default/web: Node gone Not Found")
    );
    assert_eq!(p.events.len(), 1);
    assert_eq!(p.events[0].reason, "FailedToUpdateEndpointSlices");
    assert_eq!(
        p.events[0].message,
        "Error updating Endpoint Slices for Service default/web: skipping Pod lost for Service default/web: Node gone Not Found"
    );
}

#[test]
fn rule_2_4_missing_node_error_is_reported_once_for_dual_stack() {
    let s = svc("web")
        .families(&["IPv4", "IPv6"])
        .port("http", 80, 8080)
        .build();
    let pods = vec![
        pod("lost", "web")
            .ips(&["10.0.0.2", "fd00::2"])
            .ready()
            .node("gone")
            .arc(),
    ];
    let p = plan(&s, &pods, &[]);
    assert_eq!(
        p.error.as_deref(),
        Some("skipping Pod lost for Service default/web: Node gone Not Found")
    );
}

#[test]
fn rule_2_4_missing_node_with_publish_not_ready_keeps_pod_without_zone() {
    let s = svc("web")
        .publish_not_ready()
        .port("http", 80, 8080)
        .build();
    let pods = vec![pod("lost", "web").ip("10.0.0.2").ready().node("gone").arc()];
    let p = plan(&s, &pods, &[]);
    assert_eq!(p.error, None);
    let slice = only_slice(&p);
    assert_eq!(slice.endpoints()[0].zone, None);
    assert_eq!(slice.endpoints()[0].node_name.as_deref(), Some("gone"));
}

#[test]
fn rule_2_4_two_pods_with_the_same_ip_are_two_endpoints() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = vec![
        pod("a", "web").ip("10.0.0.1").ready().arc(),
        pod("b", "web").ip("10.0.0.1").ready().arc(),
    ];
    assert_eq!(only_slice(&plan(&s, &pods, &[])).endpoints().len(), 2);
}

// ES-2.5 ports and port-map groups

#[test]
fn rule_2_5_named_target_port_resolving_differently_splits_slices() {
    let s = svc("web").named_port("http", 80, "http").build();
    let pods = vec![
        pod("a", "web")
            .ip("10.0.0.1")
            .ready()
            .container_port("http", 8080)
            .arc(),
        pod("b", "web")
            .ip("10.0.0.2")
            .ready()
            .container_port("http", 9090)
            .arc(),
        pod("c", "web")
            .ip("10.0.0.3")
            .ready()
            .container_port("http", 8080)
            .arc(),
    ];
    let p = plan(&s, &pods, &[]);
    let mut got: Vec<(i32, usize)> = p
        .writes()
        .filter_map(|w| match w {
            SliceWrite::Create(s) => Some((s.ports.as_ref()?.first()?.port?, s.endpoints().len())),
            _ => None,
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, [(8080, 2), (9090, 1)]);
}

#[test]
fn rule_2_5_unresolvable_named_port_gives_empty_ports() {
    let s = svc("web").named_port("http", 80, "http").build();
    let pods = vec![pod("a", "web").ip("10.0.0.1").ready().arc()];
    let slice = only_slice(&plan(&s, &pods, &[]));
    assert_eq!(slice.ports, Some(vec![]));
    assert_eq!(slice.endpoints().len(), 1);
}

#[test]
fn rule_2_5_port_fields_name_protocol_app_protocol() {
    let s = svc("web")
        .port("", 80, 8080)
        .app_protocol("kubernetes.io/h2c")
        .build();
    let pods = vec![pod("a", "web").ip("10.0.0.1").ready().arc()];
    let ports = only_slice(&plan(&s, &pods, &[])).ports.unwrap_or_default();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].name.as_deref(), Some(""));
    assert_eq!(
        ports[0].port,
        Some(8080),
        "the target port, not the Service port"
    );
    assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
    assert_eq!(ports[0].app_protocol.as_deref(), Some("kubernetes.io/h2c"));
}

#[test]
fn rule_2_5_headless_without_ports_has_empty_ports_and_no_churn() {
    let s = svc("db").headless().build();
    let pods = ready_pods("db", 3);
    let stored = converge(&s, &pods, 100);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].ports, Some(vec![]));
    let mut null_ports = (*stored[0]).clone();
    null_ports.ports = None;
    assert!(
        plan(&s, &pods, &[Arc::new(null_ports)]).is_noop(),
        "null and [] ports are equal"
    );
}

// ES-2.6 identity and change detection

#[test]
fn rule_2_6_uid_is_not_identity_a_new_uid_updates_in_place() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 3);
    let stored = converge(&s, &pods, 100);
    let mut recreated = (*pods[1]).clone();
    recreated.metadata.uid = Some("uid-new".into());
    let pods2 = vec![pods[0].clone(), Arc::new(recreated), pods[2].clone()];
    let p = plan(&s, &pods2, &stored);
    assert_eq!(verbs(&p), ["update"]);
    let slice = only_slice(&p);
    assert_eq!(slice.metadata.name, stored[0].metadata.name);
    assert_eq!(
        slice.metadata.resource_version.as_deref(),
        Some("1"),
        "in-place update keeps resourceVersion"
    );
}

#[test]
fn rule_2_6_hostname_is_identity_a_change_replaces_the_endpoint() {
    let s = svc("db").headless().port("sql", 5432, 5432).build();
    let before = vec![
        pod("db-0", "db")
            .ip("10.0.0.1")
            .ready()
            .hostname("x", "db")
            .arc(),
    ];
    let stored = converge(&s, &before, 100);
    let after = vec![
        pod("db-0", "db")
            .ip("10.0.0.1")
            .ready()
            .hostname("y", "db")
            .arc(),
    ];
    let p = plan(&s, &after, &stored);
    let slice = only_slice(&p);
    assert_eq!(slice.endpoints().len(), 1);
    assert_eq!(slice.endpoints()[0].hostname.as_deref(), Some("y"));
}

#[test]
fn rule_2_6_duplicate_endpoint_is_kept_only_in_the_first_slice() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 2);
    let stored = converge(&s, &pods, 100);
    let mut dup = (*stored[0]).clone();
    dup.metadata.name = Some("zz-dup".into());
    dup.metadata.uid = Some("uid-dup".into());
    dup.endpoints_mut().truncate(1);
    let p = plan(&s, &pods, &[stored[0].clone(), Arc::new(dup)]);
    assert_eq!(verbs(&p), ["delete"]);
}

// ES-2.7 placement: its worked examples (max 100)

#[test]
fn rule_2_7_example_250_new_endpoints_make_three_creates() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 250);
    let p = plan(&s, &pods, &[]);
    assert_eq!(verbs(&p), ["create"; 3]);
    assert_eq!(sizes(&apply_plan(&[], &p)), [100, 100, 50]);
}

#[test]
fn rule_2_7_example_62_61_then_250_one_create_one_update() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 250);
    let existing = slices_of(&s, &pods, &[62, 61]);
    let p = plan(&s, &pods, &existing);
    assert_eq!(verbs(&p), ["create", "update"]);
    assert_eq!(sizes(&apply_plan(&existing, &p)), [100, 89, 61]);
}

#[test]
fn rule_2_7_example_74_74_then_300_two_creates() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 300);
    let existing = slices_of(&s, &pods, &[74, 74]);
    let p = plan(&s, &pods, &existing);
    assert_eq!(verbs(&p), ["create", "create"]);
    assert_eq!(sizes(&apply_plan(&existing, &p)), [100, 74, 74, 52]);
}

#[test]
fn rule_2_7_example_target_port_change_recycles_ten_slices_into_three() {
    let old = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 300);
    let existing = slices_of(&old, &pods, &[30; 10]);
    let new = svc("web").port("http", 80, 9090).build();
    let p = plan(&new, &pods, &existing);
    assert_eq!(verbs(&p), [vec!["update"; 3], vec!["delete"; 7]].concat());
    for w in p.writes() {
        if let SliceWrite::Update(s) = w {
            assert!(
                s.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("existing-"))
            );
            assert_eq!(
                s.metadata.resource_version, None,
                "recycled slices carry no resourceVersion"
            );
        }
    }
    assert_eq!(sizes(&apply_plan(&existing, &p)), [100, 100, 100]);
}

#[test]
fn rule_2_7_example_80_20_one_changed_each_plus_15_new_two_updates() {
    let s = svc("web").port("http", 80, 8080).build();
    let mut pods = ready_pods("web", 115);
    let existing = slices_of(&s, &pods, &[80, 20]);
    pods[0] = Arc::new(pod("web-00000", "web").ip("10.0.0.0").not_ready().build());
    pods[85] = Arc::new(pod("web-00085", "web").ip("10.0.0.85").not_ready().build());
    let p = plan(&s, &pods, &existing);
    assert_eq!(verbs(&p), ["update", "update"]);
    assert_eq!(sizes(&apply_plan(&existing, &p)), [95, 20]);
}

#[test]
fn rule_2_7_example_80_50_of_type_ip_two_creates_then_two_deletes() {
    rule_2_3_slices_of_unsupported_address_types_are_deleted_last();
}

#[test]
fn rule_2_7_leftovers_go_to_the_unchanged_slice_closest_to_full() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 100);
    let existing = slices_of(&s, &pods, &[50, 40]);
    // 10 new endpoints fit into both; 50 + 10 is closer to full than 40 + 10.
    let p = plan(&s, &pods, &existing);
    assert_eq!(verbs(&p), ["update"]);
    assert_eq!(only_slice(&p).metadata.name.as_deref(), Some("existing-0"));
    assert_eq!(sizes(&apply_plan(&existing, &p)), [60, 40]);
}

#[test]
fn rule_2_7_prefer_one_create_over_several_updates() {
    let s = svc("web").port("http", 80, 8080).build();
    // 95 + 85 stored, 10 new: they do not fit into the 95 but fit exactly
    // into the 85, so one update.
    let pods = ready_pods("web", 190);
    let existing = slices_of(&s, &pods, &[95, 85]);
    let p = plan(&s, &pods, &existing);
    assert_eq!(verbs(&p), ["update"]);
    assert_eq!(only_slice(&p).metadata.name.as_deref(), Some("existing-1"));
    let pods3 = ready_pods("web", 200);
    let existing3 = slices_of(&s, &pods3, &[95, 94]);
    // 11 new: 95+11 and 94+11 both exceed 100 → one create, not two updates.
    assert_eq!(verbs(&plan(&s, &pods3, &existing3)), ["create"]);
}

#[test]
fn rule_2_7_updated_slices_are_filled_fullest_first() {
    let s = svc("web").port("http", 80, 8080).build();
    let mut pods = ready_pods("web", 100);
    let existing = slices_of(&s, &pods, &[60, 30]);
    // Change one endpoint in each so both are updated, then add 15 new ones.
    pods[0] = Arc::new(pod("web-00000", "web").ip("10.0.0.0").not_ready().build());
    pods[60] = Arc::new(pod("web-00060", "web").ip("10.0.0.60").not_ready().build());
    pods.extend(ready_pods("new", 15).into_iter().map(|p| {
        let mut p = (*p).clone();
        p.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
        Arc::new(p)
    }));
    // 10 unplaced web pods + 15 new ones all go to the fuller slice.
    let after = apply_plan(&existing, &plan(&s, &pods, &existing));
    assert_eq!(sizes(&after), [85, 30]);
}

#[test]
fn rule_2_7_max_endpoints_per_slice_is_respected() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 25);
    assert_eq!(sizes(&converge(&s, &pods, 10)), [10, 10, 5]);
    assert_eq!(sizes(&converge(&s, &pods, 1)), vec![1; 25]);
}

#[test]
fn rule_2_7_slices_of_another_owner_are_deleted_not_recycled() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 3);
    let old = converge(
        &svc("web").uid("old-uid").port("http", 80, 8080).build(),
        &pods,
        100,
    );
    let p = plan(&s, &pods, &old);
    assert_eq!(verbs(&p), ["create", "delete"]);
}

#[test]
fn rule_2_7_writes_are_creates_then_updates_then_deletes() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 300);
    let mut existing = slices_of(&s, &pods[..160], &[80, 80]);
    let foreign = slices_of(
        &svc("web").uid("other").port("http", 80, 8080).build(),
        &pods[..1],
        &[1],
    );
    let mut f = (*foreign[0]).clone();
    f.metadata.name = Some("foreign".into());
    existing.push(Arc::new(f));
    let mut fewer = pods.clone();
    fewer.remove(0);
    let p = plan(&s, &fewer, &existing);
    let v = verbs(&p);
    let first_update = v.iter().position(|x| *x == "update");
    let last_create = v.iter().rposition(|x| *x == "create");
    let first_delete = v.iter().position(|x| *x == "delete");
    assert!(
        last_create < first_update && first_update < first_delete,
        "{v:?}"
    );
}

#[test]
fn rule_2_7_placeholder_created_for_a_service_without_endpoints() {
    let s = svc("web").port("http", 80, 8080).build();
    let slice = only_slice(&plan(&s, &[], &[]));
    assert_eq!(slice.ports, Some(vec![]));
    assert!(slice.endpoints().is_empty());
    assert_eq!(slice.metadata.generate_name.as_deref(), Some("web-"));
}

#[test]
fn rule_2_7_existing_placeholder_is_kept_without_writes() {
    let s = svc("web").port("http", 80, 8080).build();
    let stored = converge(&s, &[], 100);
    assert!(plan(&s, &[], &stored).is_noop());
}

#[test]
fn rule_2_7_placeholder_is_recycled_when_endpoints_appear() {
    let s = svc("web").port("http", 80, 8080).build();
    let stored = converge(&s, &[], 100);
    let p = plan(&s, &ready_pods("web", 2), &stored);
    assert_eq!(verbs(&p), ["update"]);
    let slice = only_slice(&p);
    assert_eq!(slice.metadata.name, stored[0].metadata.name);
    assert_eq!(slice.endpoints().len(), 2);
}

#[test]
fn rule_2_7_last_endpoint_gone_turns_slice_into_placeholder() {
    let s = svc("web").port("http", 80, 8080).build();
    let stored = converge(&s, &ready_pods("web", 2), 100);
    let p = plan(&s, &[], &stored);
    // Delete + placeholder create are recycled into one update.
    assert_eq!(verbs(&p), ["update"]);
    assert!(only_slice(&p).endpoints().is_empty());
}

#[test]
fn rule_2_9_service_being_deleted_gets_no_creates() {
    let s = svc("web").port("http", 80, 8080).deleting().build();
    assert!(plan(&s, &[], &[]).is_noop());
    assert!(plan(&s, &ready_pods("web", 3), &[]).is_noop());
    let live = svc("web").port("http", 80, 8080).build();
    let stored = converge(&live, &ready_pods("web", 3), 100);
    let p = plan(&s, &ready_pods("web", 2), &stored);
    assert_eq!(verbs(&p), ["update"], "updates still happen while deleting");
}

// ES-2.8 metadata

#[test]
fn rule_2_8_new_slice_metadata() {
    let s = svc("web").label("team", "a").port("http", 80, 8080).build();
    let slice = only_slice(&plan(&s, &ready_pods("web", 1), &[]));
    let labels = slice.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("team").map(String::as_str), Some("a"));
    assert_eq!(
        labels.get(LABEL_SERVICE_NAME).map(String::as_str),
        Some("web")
    );
    assert!(!labels.contains_key(LABEL_HEADLESS));
    assert_eq!(slice.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(slice.metadata.name, None);
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(
        slice
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_TRIGGER_TIME))
            .map(String::as_str),
        Some("2023-11-14T22:13:20Z")
    );
}

#[test]
fn rule_2_8_label_change_on_service_updates_slices_labels_only() {
    let s = svc("web").label("team", "a").port("http", 80, 8080).build();
    let pods = ready_pods("web", 2);
    let stored = converge(&s, &pods, 100);
    let relabelled = svc("web").label("team", "b").port("http", 80, 8080).build();
    let slice = only_slice(&plan(&relabelled, &pods, &stored));
    assert_eq!(
        slice
            .metadata
            .labels
            .and_then(|l| l.get("team").cloned())
            .as_deref(),
        Some("b")
    );
    assert_eq!(slice.endpoints, stored[0].endpoints);
}

#[test]
fn rule_2_8_headlessness_alone_does_not_trigger_an_update() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 2);
    let stored = converge(&s, &pods, 100);
    let headless = svc("web").headless().port("http", 80, 8080).build();
    assert!(plan(&headless, &pods, &stored).is_noop());
}

#[test]
fn rule_2_8_foreign_annotations_are_preserved_and_trigger_time_cleared() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 2);
    let mut stored = (*converge(&s, &pods, 100)[0]).clone();
    stored
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("keep".into(), "me".into());
    let Outcome::Planned(p) = outcome(&s, &pods[..1], &[Arc::new(stored)], None, 100) else {
        panic!("skipped")
    };
    let a = only_slice(&p).metadata.annotations.unwrap_or_default();
    assert_eq!(a.get("keep").map(String::as_str), Some("me"));
    assert!(!a.contains_key(ANNOTATION_TRIGGER_TIME));
}

// ES-2.11 hints off

#[test]
fn rule_2_11_hints_are_removed_from_unchanged_slices_when_hints_are_off() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 2);
    let mut stored = (*converge(&s, &pods, 100)[0]).clone();
    stored.endpoints_mut()[0].hints = Some(EndpointHints {
        for_zones: Some(vec![ForZone {
            name: "zone-a".into(),
        }]),
        for_nodes: None,
    });
    let p = plan(&s, &pods, &[Arc::new(stored)]);
    let slice = only_slice(&p);
    assert!(slice.endpoints().iter().all(|e| e.hints.is_none()));
}

// No-op detection

#[test]
fn rule_noop_matching_slices_plan_zero_writes() {
    let s = svc("web")
        .families(&["IPv4", "IPv6"])
        .named_port("http", 80, "http")
        .build();
    let mut pods: Vec<Arc<Pod>> = (0..250)
        .map(|i| {
            pod(&format!("p{i}"), "web")
                .ips(&[
                    &format!("10.1.{}.{}", i / 256, i % 256),
                    &format!("fd00::{i:x}"),
                ])
                .ready()
                .container_port("http", if i % 2 == 0 { 8080 } else { 9090 })
                .arc()
        })
        .collect();
    pods.push(pod("t", "web").ip("10.9.9.9").terminating().arc());
    let stored = converge(&s, &pods, 100);
    let again = plan(&s, &pods, &stored);
    assert!(again.is_noop(), "{:?}", verbs(&again));
}

#[test]
fn rule_2_7_plan_does_not_depend_on_input_order() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 230);
    let existing = slices_of(&s, &pods, &[40, 30]);
    let forward = plan(&s, &pods, &existing);
    let mut reversed_pods = pods.clone();
    reversed_pods.reverse();
    let mut reversed_slices = existing.clone();
    reversed_slices.reverse();
    assert_eq!(forward, plan(&s, &reversed_pods, &reversed_slices));
}

// ES-2.13 metric figures

#[test]
fn rule_2_13_pass_stats_follow_upstream_definitions() {
    let s = svc("web").port("http", 80, 8080).build();
    let pods = ready_pods("web", 250);
    let fresh = plan(&s, &pods, &[]);
    let st = fresh.passes[0].stats;
    assert_eq!(
        (
            st.endpoints_added,
            st.endpoints_removed,
            st.endpoints_desired
        ),
        (250, 0, 250)
    );
    assert_eq!((st.slices_after, st.slices_desired), (3, 3));

    let stored = apply_plan(&[], &fresh);
    let fewer = &pods[..245];
    let st = plan(&s, fewer, &stored).passes[0].stats;
    assert_eq!(
        (
            st.endpoints_added,
            st.endpoints_removed,
            st.endpoints_desired
        ),
        (0, 5, 245)
    );
    assert_eq!((st.slices_after, st.slices_desired), (3, 3));

    // A Service without endpoints counts its placeholder as one slice.
    let st = plan(&s, &[], &[]).passes[0].stats;
    assert_eq!(
        (st.endpoints_desired, st.slices_after, st.slices_desired),
        (0, 1, 1)
    );
}
