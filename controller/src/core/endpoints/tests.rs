//! Rule tests for the Endpoints controller, one per rule of EP-4
//! (`docs/endpoints.md`) and its examples.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{EndpointSubset, Endpoints, Pod, Service};
use k8s_openapi::jiff::Timestamp;
use rstest::rstest;

use super::repack::{Entry, PortKey, entries_of, repack};
use super::{
    CONTROLLER_NAME, EndpointsPlan, EndpointsWrite, Inputs, OVER_CAPACITY_TRUNCATED, Outcome,
    SkipReason, reconcile,
};
use crate::core::fixtures::{endpoint_address, endpoints, epoch, ipv4_nth, pod, svc};
use crate::core::keys::{
    ANNOTATION_OVER_CAPACITY, ANNOTATION_TRIGGER_TIME, LABEL_ENDPOINTS_MANAGED_BY, LABEL_HEADLESS,
};

fn run(service: &Service, pods: &[Arc<Pod>], existing: Option<&Endpoints>) -> EndpointsPlan {
    run_at(service, pods, existing, Some(epoch()))
}

fn run_at(
    service: &Service,
    pods: &[Arc<Pod>],
    existing: Option<&Endpoints>,
    trigger_time: Option<Timestamp>,
) -> EndpointsPlan {
    let inputs = Inputs {
        namespace: service.metadata.namespace.as_deref().unwrap_or("default"),
        name: service.metadata.name.as_deref().unwrap_or_default(),
        service: Some(service),
        pods,
        existing,
        trigger_time,
    };
    match reconcile(&inputs) {
        Outcome::Planned(p) => p,
        Outcome::Skipped(r) => panic!("unexpected skip {r:?}"),
    }
}

/// The object of the single create or update.
fn written(plan: &EndpointsPlan) -> Endpoints {
    match plan.writes.as_slice() {
        [EndpointsWrite::Create(e) | EndpointsWrite::Update(e)] => e.clone(),
        other => panic!("expected one create or update, got {other:?}"),
    }
}

/// Stores a plan's write as the API server would (resourceVersion bumped).
fn stored(plan: &EndpointsPlan) -> Endpoints {
    let mut e = written(plan);
    e.metadata.resource_version = Some("2".into());
    e.metadata.uid.get_or_insert_with(|| "uid-ep".into());
    e
}

fn subsets(e: &Endpoints) -> &[EndpointSubset] {
    e.subsets.as_deref().unwrap_or_default()
}

fn ips(list: &Option<Vec<k8s_openapi::api::core::v1::EndpointAddress>>) -> Vec<&str> {
    list.iter().flatten().map(|a| a.ip.as_str()).collect()
}

fn counts(e: &Endpoints) -> (usize, usize) {
    subsets(e).iter().fold((0, 0), |(r, n), s| {
        (
            r + s.addresses.as_ref().map_or(0, Vec::len),
            n + s.not_ready_addresses.as_ref().map_or(0, Vec::len),
        )
    })
}

fn annotation<'e>(e: &'e Endpoints, k: &str) -> Option<&'e str> {
    e.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(k))
        .map(String::as_str)
}

fn web() -> Service {
    svc("web").port("http", 80, 8080).build()
}

fn ready_pods(n: usize) -> Vec<Arc<Pod>> {
    (0..n)
        .map(|i| {
            pod(&format!("web-{i:05}"), "web")
                .ip(&ipv4_nth(i))
                .ready()
                .arc()
        })
        .collect()
}

// ------------------------------------------------------------- EP-4.1

#[test]
fn rule_4_1_service_missing_deletes_the_endpoints() {
    let existing = endpoints("gone").build();
    // No Pods: the annotation picks the Pod type (`Inputs`'s default).
    let inputs: Inputs<'_> = Inputs {
        namespace: "default",
        name: "gone",
        service: None,
        pods: &[],
        existing: Some(&existing),
        trigger_time: None,
    };
    let Outcome::Planned(plan) = reconcile(&inputs) else {
        panic!("planned")
    };
    match plan.writes.as_slice() {
        [EndpointsWrite::Delete(r)] => {
            assert_eq!((r.namespace.as_str(), r.name.as_str()), ("default", "gone"));
            assert_eq!(r.uid.as_deref(), Some("uid-ep-gone"));
        }
        other => panic!("expected a delete, got {other:?}"),
    }
    let nothing = Inputs {
        existing: None,
        ..inputs
    };
    assert_eq!(
        reconcile(&nothing),
        Outcome::Planned(EndpointsPlan::default())
    );
}

#[test]
fn rule_4_1_external_name_and_selectorless_services_are_left_alone() {
    let existing = endpoints("web")
        .subset(&["1.2.3.4"], &[], &[("", 80)])
        .build();
    for (service, reason) in [
        (svc("web").external_name().build(), SkipReason::ExternalName),
        (svc("web").no_selector().build(), SkipReason::NoSelector),
    ] {
        let inputs = Inputs {
            namespace: "default",
            name: "web",
            service: Some(&service),
            pods: &ready_pods(3),
            existing: Some(&existing),
            trigger_time: None,
        };
        assert_eq!(reconcile(&inputs), Outcome::Skipped(reason));
    }
}

#[test]
fn rule_4_1_only_selected_pods_in_the_namespace_count() {
    let pods = crate::core::fixtures::selection_pods();
    let e = written(&run(&web(), &pods, None));
    assert_eq!(ips(&subsets(&e)[0].addresses), vec!["10.0.0.1"]);
    assert_eq!(subsets(&e).len(), 1);
}

// ------------------------------------------------------------- EP-4.2

#[rstest]
#[case::running_ready("Running", true, false, false, 1, 0)]
#[case::running_ready_deleting("Running", true, true, false, 0, 0)]
#[case::unknown_ready("Unknown", true, false, false, 1, 0)]
#[case::pending_ready("Pending", true, false, false, 1, 0)]
#[case::pending_ready_deleting("Pending", true, true, false, 0, 0)]
#[case::unknown_not_ready("Unknown", false, false, false, 0, 1)]
#[case::pending_not_ready("Pending", false, false, false, 0, 1)]
#[case::failed("Failed", false, false, false, 0, 0)]
#[case::succeeded_pnr("Succeeded", false, false, true, 0, 0)]
#[case::running_not_ready_pnr("Running", false, false, true, 1, 0)]
#[case::running_not_ready_deleting_pnr("Running", false, true, true, 1, 0)]
#[case::pending_not_ready_deleting_pnr("Pending", false, true, true, 1, 0)]
fn rule_4_2_readiness_and_phase_matrix(
    #[case] phase: &str,
    #[case] ready: bool,
    #[case] deleting: bool,
    #[case] pnr: bool,
    #[case] want_ready: usize,
    #[case] want_not_ready: usize,
) {
    let mut b = svc("web").port("http", 80, 8080);
    if pnr {
        b = b.publish_not_ready();
    }
    let mut p = pod("p", "web").ip("10.0.0.1").phase(phase);
    p = if ready { p.ready() } else { p.not_ready() };
    if deleting {
        p = p.terminating();
    }
    let e = written(&run(&b.build(), &[p.arc()], None));
    assert_eq!(counts(&e), (want_ready, want_not_ready));
}

#[test]
fn rule_4_2_example_three_ready_pods_two_ports_make_one_subset() {
    let service = svc("web")
        .port("port0", 80, 8080)
        .port("port1", 88, 8088)
        .build();
    let e = written(&run(&service, &ready_pods(3), None));
    let s = subsets(&e);
    assert_eq!(s.len(), 1);
    assert_eq!(
        ips(&s[0].addresses),
        vec!["10.0.0.0", "10.0.0.1", "10.0.0.2"]
    );
    let ports: Vec<(Option<&str>, i32)> = s[0]
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.as_deref(), p.port))
        .collect();
    assert_eq!(ports, vec![(Some("port0"), 8080), (Some("port1"), 8088)]);
}

#[test]
fn rule_4_2_example_ready_and_not_ready_share_one_subset() {
    let pods = vec![
        pod("a", "web").ip("10.0.0.1").ready().arc(),
        pod("b", "web").ip("10.0.0.2").not_ready().arc(),
    ];
    let e = written(&run(&web(), &pods, None));
    let s = subsets(&e);
    assert_eq!(s.len(), 1);
    assert_eq!(ips(&s[0].addresses), vec!["10.0.0.1"]);
    assert_eq!(ips(&s[0].not_ready_addresses), vec!["10.0.0.2"]);
}

#[test]
fn rule_4_2_address_carries_node_target_ref_and_hostname() {
    let service = svc("db").headless().port("sql", 5432, 5432).build();
    let pods = vec![
        pod("db-0", "db")
            .ip("10.0.0.1")
            .ready()
            .node("node-b")
            .hostname("db-0", "db")
            .arc(),
        pod("db-1", "db")
            .ip("10.0.0.2")
            .ready()
            .hostname("db-1", "elsewhere")
            .arc(),
    ];
    let e = written(&run(&service, &pods, None));
    let a = &subsets(&e)[0].addresses.clone().unwrap_or_default();
    assert_eq!(a[0].hostname.as_deref(), Some("db-0"));
    assert_eq!(a[0].node_name.as_deref(), Some("node-b"));
    let r = a[0].target_ref.clone().unwrap_or_default();
    assert_eq!(r.kind.as_deref(), Some("Pod"));
    assert_eq!(r.namespace.as_deref(), Some("default"));
    assert_eq!(r.name.as_deref(), Some("db-0"));
    assert_eq!(r.uid.as_deref(), Some("uid-pod-db-0"));
    assert_eq!(r.resource_version, None);
    assert_eq!(a[1].hostname, None, "subdomain names another Service");
}

#[test]
fn rule_4_2_empty_node_name_is_omitted() {
    let p = pod("a", "web").ip("10.0.0.1").ready().node("").arc();
    let e = written(&run(&web(), &[p], None));
    let a = subsets(&e)[0].addresses.clone().unwrap_or_default();
    assert_eq!(a[0].node_name, None);
}

#[rstest]
#[case::v4_primary(&["IPv4", "IPv6"], "10.0.0.1")]
#[case::v6_primary(&["IPv6", "IPv4"], "fd00::1")]
fn rule_4_2_one_address_of_the_primary_family(#[case] families: &[&str], #[case] want: &str) {
    let service = svc("web").families(families).port("http", 80, 8080).build();
    let p = pod("a", "web")
        .ips(&["10.0.0.1", "fd00:0:0:0::1"])
        .ready()
        .arc();
    let e = written(&run(&service, &[p], None));
    assert_eq!(ips(&subsets(&e)[0].addresses), vec![want]);
}

#[rstest]
#[case::cluster_ip_v6("fd00::10", "fd00::1")]
#[case::cluster_ip_v4("10.96.0.10", "10.0.0.1")]
fn rule_4_2_legacy_family_from_cluster_ip(#[case] cluster_ip: &str, #[case] want: &str) {
    let service = svc("web")
        .no_families()
        .cluster_ip(cluster_ip)
        .port("http", 80, 8080)
        .build();
    let p = pod("a", "web").ips(&["10.0.0.1", "fd00::1"]).ready().arc();
    let e = written(&run(&service, &[p], None));
    assert_eq!(ips(&subsets(&e)[0].addresses), vec![want]);
}

#[test]
fn rule_4_2_legacy_headless_family_from_pod_ip() {
    let service = svc("web")
        .no_families()
        .headless()
        .port("http", 80, 8080)
        .build();
    let p = pod("a", "web").ips(&["fd00::1", "10.0.0.1"]).ready().arc();
    let e = written(&run(&service, &[p], None));
    assert_eq!(ips(&subsets(&e)[0].addresses), vec!["fd00::1"]);
}

#[test]
fn rule_4_2_pod_without_ip_of_the_family_is_skipped() {
    let service = svc("web")
        .families(&["IPv6"])
        .port("http", 80, 8080)
        .build();
    let p = pod("a", "web").ip("10.0.0.1").ready().arc();
    assert_eq!(subsets(&written(&run(&service, &[p], None))).len(), 0);
}

#[test]
fn rule_4_2_ips_are_canonical() {
    let service = svc("web")
        .families(&["IPv6"])
        .port("http", 80, 8080)
        .build();
    let p = pod("a", "web")
        .ip("1234::5678:0000:0000:9abc:def0")
        .ready()
        .arc();
    let e = written(&run(&service, &[p], None));
    assert_eq!(
        ips(&subsets(&e)[0].addresses),
        vec!["1234::5678:0:0:9abc:def0"]
    );
}

#[test]
fn rule_4_2_headless_without_ports_gets_a_portless_subset() {
    let service = svc("db").headless().build();
    let pods = ready_pods_for("db", 2);
    let e = written(&run(&service, &pods, None));
    assert_eq!(subsets(&e).len(), 1);
    assert_eq!(subsets(&e)[0].ports, None);
    assert_eq!(counts(&e), (2, 0));
}

fn ready_pods_for(app: &str, n: usize) -> Vec<Arc<Pod>> {
    (0..n)
        .map(|i| {
            pod(&format!("{app}-{i}"), app)
                .ip(&ipv4_nth(i))
                .ready()
                .arc()
        })
        .collect()
}

#[test]
fn rule_4_2_cluster_ip_service_without_ports_gets_nothing() {
    let service = svc("web").build();
    let e = written(&run(&service, &ready_pods(2), None));
    assert_eq!(e.subsets, None);
}

#[test]
fn rule_4_2_named_target_port_resolves_per_pod_and_unresolvable_ports_are_skipped() {
    let service = svc("web")
        .named_port("http", 80, "http")
        .named_port("metrics", 9090, "metrics")
        .build();
    let pods = vec![
        pod("a", "web")
            .ip("10.0.0.1")
            .ready()
            .container_port("http", 8080)
            .container_port("metrics", 9100)
            .arc(),
        pod("b", "web")
            .ip("10.0.0.2")
            .ready()
            .container_port("http", 8081)
            .arc(),
        pod("c", "web").ip("10.0.0.3").ready().arc(),
    ];
    let e = written(&run(&service, &pods, None));
    type Row<'a> = (Vec<&'a str>, Vec<(Option<&'a str>, i32)>);
    let mut got: Vec<Row<'_>> = subsets(&e)
        .iter()
        .map(|s| {
            (
                ips(&s.addresses),
                s.ports
                    .iter()
                    .flatten()
                    .map(|p| (p.name.as_deref(), p.port))
                    .collect(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                vec!["10.0.0.1"],
                vec![(Some("http"), 8080), (Some("metrics"), 9100)]
            ),
            (vec!["10.0.0.2"], vec![(Some("http"), 8081)]),
        ],
        "pod c resolves no port and contributes nothing"
    );
}

#[test]
fn rule_4_2_ports_carry_protocol_and_app_protocol() {
    let service = svc("web").port("", 80, 8080).app_protocol("http").build();
    let e = written(&run(&service, &ready_pods(1), None));
    let p = subsets(&e)[0].ports.clone().unwrap_or_default();
    assert_eq!(
        p[0].name, None,
        "unnamed port is omitted, as Go's omitempty"
    );
    assert_eq!(p[0].protocol.as_deref(), Some("TCP"));
    assert_eq!(p[0].app_protocol.as_deref(), Some("http"));
}

#[test]
fn rule_4_2_repack_not_ready_wins_dedups_and_sorts_by_ip_bytes() {
    let a = endpoint_address("10.0.0.10");
    let b = endpoint_address("10.0.0.9");
    let port = k8s_openapi::api::core::v1::EndpointPort {
        name: Some("p".into()),
        port: 80,
        protocol: Some("TCP".into()),
        app_protocol: None,
    };
    let entries = [
        Entry {
            address: &a,
            ready: true,
            port: PortKey::of(&port),
        },
        Entry {
            address: &a,
            ready: false,
            port: PortKey::of(&port),
        },
        Entry {
            address: &b,
            ready: true,
            port: PortKey::of(&port),
        },
        Entry {
            address: &b,
            ready: true,
            port: PortKey::of(&port),
        },
    ];
    let s = repack(&entries);
    assert_eq!(s.len(), 1);
    assert_eq!(ips(&s[0].addresses), vec!["10.0.0.9"]);
    assert_eq!(ips(&s[0].not_ready_addresses), vec!["10.0.0.10"]);
    // IP string bytes: "10.0.0.10" < "10.0.0.9".
    let both = [
        Entry {
            address: &b,
            ready: true,
            port: PortKey::of(&port),
        },
        Entry {
            address: &a,
            ready: true,
            port: PortKey::of(&port),
        },
    ];
    assert_eq!(
        ips(&repack(&both)[0].addresses),
        vec!["10.0.0.10", "10.0.0.9"]
    );
}

#[test]
fn rule_4_2_repack_merges_subsets_with_identical_address_sets_and_keeps_portless_ones() {
    let e = endpoints("x")
        .subset(&["1.1.1.1", "2.2.2.2"], &[], &[("a", 80)])
        .subset(&["2.2.2.2", "1.1.1.1"], &[], &[("b", 81)])
        .subset(&["3.3.3.3"], &[], &[])
        .build();
    let s = repack(&entries_of(subsets(&e)));
    assert_eq!(s.len(), 2);
    let with_ports = s
        .iter()
        .find(|s| s.ports.is_some())
        .cloned()
        .unwrap_or_default();
    assert_eq!(ips(&with_ports.addresses), vec!["1.1.1.1", "2.2.2.2"]);
    assert_eq!(with_ports.ports.map_or(0, |p| p.len()), 2);
    let portless = s
        .iter()
        .find(|s| s.ports.is_none())
        .cloned()
        .unwrap_or_default();
    assert_eq!(ips(&portless.addresses), vec!["3.3.3.3"]);
}

// ------------------------------------------------------------- EP-4.3

#[test]
fn rule_4_3_over_capacity_is_truncated_and_annotated() {
    let e = written(&run(&web(), &ready_pods(1001), None));
    assert_eq!(counts(&e), (1000, 0));
    assert_eq!(
        annotation(&e, ANNOTATION_OVER_CAPACITY),
        Some(OVER_CAPACITY_TRUNCATED)
    );
    let under = written(&run(&web(), &ready_pods(1000), None));
    assert_eq!(counts(&under), (1000, 0));
    assert_eq!(annotation(&under, ANNOTATION_OVER_CAPACITY), None);
}

#[test]
fn rule_4_3_annotation_removed_when_back_to_1000() {
    let big = stored(&run(&web(), &ready_pods(1001), None));
    let plan = run(&web(), &ready_pods(1000), Some(&big));
    let e = written(&plan);
    assert!(matches!(plan.writes[0], EndpointsWrite::Update(_)));
    assert_eq!(annotation(&e, ANNOTATION_OVER_CAPACITY), None);
    assert_eq!(counts(&e), (1000, 0));
}

#[rstest]
#[case::leftover_warning_over(1001, "warning", true)]
#[case::leftover_warning_under(10, "warning", false)]
fn rule_4_3_leftover_annotation_values_are_corrected(
    #[case] n: usize,
    #[case] value: &str,
    #[case] truncated: bool,
) {
    let mut existing = stored(&run(&web(), &ready_pods(n), None));
    existing
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(ANNOTATION_OVER_CAPACITY.into(), value.into());
    let e = written(&run(&web(), &ready_pods(n), Some(&existing)));
    let want = truncated.then_some(OVER_CAPACITY_TRUNCATED);
    assert_eq!(annotation(&e, ANNOTATION_OVER_CAPACITY), want);
}

#[test]
fn rule_4_3_ready_addresses_are_kept_before_not_ready() {
    let mut pods = ready_pods(997);
    pods.extend((997..1001).map(|i| {
        pod(&format!("web-{i:05}"), "web")
            .ip(&ipv4_nth(i))
            .not_ready()
            .arc()
    }));
    let e = written(&run(&web(), &pods, None));
    assert_eq!(counts(&e), (997, 3));
}

// ------------------------------------------------------------- EP-4.4

#[test]
fn rule_4_4_labels_copy_the_service_and_add_managed_by_and_headless() {
    let service = svc("web")
        .headless()
        .label("team", "a")
        .port("http", 80, 8080)
        .build();
    let existing = endpoints("web")
        .label("stale", "x")
        .annotation("keep", "me")
        .build();
    let e = written(&run(&service, &ready_pods(1), Some(&existing)));
    let labels = e.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("team").map(String::as_str), Some("a"));
    assert_eq!(labels.get(LABEL_HEADLESS).map(String::as_str), Some(""));
    assert_eq!(
        labels.get(LABEL_ENDPOINTS_MANAGED_BY).map(String::as_str),
        Some(CONTROLLER_NAME)
    );
    assert_eq!(labels.get("stale"), None, "other labels are discarded");
    assert_eq!(labels.len(), 3);
    assert_eq!(annotation(&e, "keep"), Some("me"), "annotations are kept");
    assert_eq!(e.metadata.name.as_deref(), Some("web"));
    assert_eq!(e.metadata.owner_references, None);
}

#[test]
fn rule_4_4_headless_label_removed_when_the_service_has_a_cluster_ip() {
    let existing = endpoints("web").label(LABEL_HEADLESS, "").build();
    let e = written(&run(&web(), &ready_pods(1), Some(&existing)));
    assert_eq!(
        e.metadata.labels.unwrap_or_default().get(LABEL_HEADLESS),
        None
    );
}

#[test]
fn rule_4_4_trigger_time_is_set_or_removed_on_write() {
    let e = written(&run(&web(), &ready_pods(1), None));
    assert_eq!(
        annotation(&e, ANNOTATION_TRIGGER_TIME),
        Some("2023-11-14T22:13:20Z")
    );
    let existing = endpoints("web")
        .annotation(ANNOTATION_TRIGGER_TIME, "2020-01-01T00:00:00Z")
        .build();
    let e = written(&run_at(&web(), &ready_pods(1), Some(&existing), None));
    assert_eq!(annotation(&e, ANNOTATION_TRIGGER_TIME), None);
}

// ------------------------------------------------------------- EP-4.5

#[test]
fn rule_4_5_nothing_written_when_in_sync() {
    let first = stored(&run(&web(), &ready_pods(5), None));
    let again = run(&web(), &ready_pods(5), Some(&first));
    assert!(again.is_noop(), "{again:?}");
    // The trigger-time annotation alone never causes a write.
    let later = run_at(&web(), &ready_pods(5), Some(&first), None);
    assert!(later.is_noop());
}

#[test]
fn rule_4_5_missing_managed_by_label_rewrites_once() {
    let mut old = stored(&run(&web(), &ready_pods(2), None));
    if let Some(l) = old.metadata.labels.as_mut() {
        l.remove(LABEL_ENDPOINTS_MANAGED_BY);
    }
    let plan = run(&web(), &ready_pods(2), Some(&old));
    assert_eq!(plan.writes.len(), 1);
    let fixed = stored(&plan);
    assert!(run(&web(), &ready_pods(2), Some(&fixed)).is_noop());
}

#[test]
fn rule_4_5_headless_label_alone_does_not_write() {
    let mut e = stored(&run(&web(), &ready_pods(2), None));
    e.metadata
        .labels
        .get_or_insert_default()
        .insert(LABEL_HEADLESS.into(), String::new());
    assert!(run(&web(), &ready_pods(2), Some(&e)).is_noop());
}

#[test]
fn rule_4_5_target_ref_resource_version_and_order_are_ignored() {
    let mut e = stored(&run(&web(), &ready_pods(3), None));
    if let Some(s) = e.subsets.as_mut() {
        for a in s[0].addresses.iter_mut().flatten() {
            if let Some(r) = a.target_ref.as_mut() {
                r.resource_version = Some("99".into());
            }
        }
        if let Some(a) = s[0].addresses.as_mut() {
            a.reverse();
        }
    }
    assert!(run(&web(), &ready_pods(3), Some(&e)).is_noop());
}

#[test]
fn rule_4_5_changed_subsets_or_labels_write() {
    let e = stored(&run(&web(), &ready_pods(3), None));
    assert_eq!(run(&web(), &ready_pods(4), Some(&e)).writes.len(), 1);
    let relabelled = svc("web").label("x", "y").port("http", 80, 8080).build();
    assert_eq!(run(&relabelled, &ready_pods(3), Some(&e)).writes.len(), 1);
}

#[test]
fn rule_4_5_over_capacity_with_unchanged_truncated_content_plans_zero_writes() {
    let e = stored(&run(&web(), &ready_pods(1500), None));
    let again = run(&web(), &ready_pods(1500), Some(&e));
    assert!(
        again.is_noop(),
        "svcplane does not rewrite an unchanged truncated object"
    );
    assert!(again.truncated);
    // A change inside the kept 1000 is written.
    let mut pods = ready_pods(1500);
    pods[0] = pod("web-00000", "web").ip(&ipv4_nth(0)).not_ready().arc();
    let changed = run(&web(), &pods, Some(&e));
    assert_eq!(changed.writes.len(), 1);
    // A missing annotation is written even if the content matches.
    let mut bare = e.clone();
    if let Some(a) = bare.metadata.annotations.as_mut() {
        a.remove(ANNOTATION_OVER_CAPACITY);
    }
    assert_eq!(run(&web(), &ready_pods(1500), Some(&bare)).writes.len(), 1);
}

// ------------------------------------------------------------- EP-4.6

#[test]
fn rule_4_6_create_when_missing_update_with_cached_resource_version() {
    let plan = run(&web(), &ready_pods(1), None);
    assert!(matches!(plan.writes[0], EndpointsWrite::Create(_)));
    let created = written(&plan);
    assert_eq!(created.metadata.resource_version, None);
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
    let existing = endpoints("web").build();
    let plan = run(&web(), &ready_pods(1), Some(&existing));
    let EndpointsWrite::Update(u) = &plan.writes[0] else {
        panic!("update expected")
    };
    assert_eq!(u.metadata.resource_version.as_deref(), Some("1"));
    assert_eq!(u.metadata.uid.as_deref(), Some("uid-ep-web"));
}

/// The one-pass cut (`capped_subsets`) gives exactly what repacking in full
/// and then truncating gives, for ready and not-ready over-capacity mixes
/// spread over several subsets.
#[rstest]
#[case::ready_over(3000, 7)]
#[case::not_ready_share(900, 3)]
#[case::under(400, 2)]
fn rule_4_3_one_pass_cut_equals_repack_then_truncate(#[case] n: usize, #[case] every: usize) {
    let service = svc("web")
        .named_port("http", 80, "http")
        .named_port("metrics", 9090, "metrics")
        .build();
    let pods: Vec<Arc<Pod>> = (0..n)
        .rev()
        .map(|i| {
            let mut p = pod(&format!("web-{i:05}"), "web")
                .ip(&ipv4_nth(i))
                .container_port("http", 8080);
            if i % 3 == 0 {
                p = p.container_port("metrics", 9090);
            }
            p = if i % every == 0 {
                p.not_ready()
            } else {
                p.ready()
            };
            p.arc()
        })
        .collect();
    let selected: Vec<&Pod> = pods.iter().map(Arc::as_ref).collect();
    let (mut full, _) = super::desired::desired_subsets(&service, &selected);
    let total = super::repack::address_count(&full);
    let truncated = super::capacity::truncate(&mut full);
    let (cut, cut_total, cut_truncated) = super::desired::capped_subsets(&service, &selected);
    assert_eq!((cut, cut_total, cut_truncated), (full, total, truncated));
}
