//! Rule tests for topology hints, one per rule of ES-2.11 and
//! TH-3 (`docs/topology.md`), its worked examples as tables, and property tests.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::{EndpointHints, EndpointSlice, ForNode, ForZone};
use proptest::prelude::*;
use rstest::rstest;

use super::allocation::{Failure, allocations, endpoint_ready, giving_and_receiving};
use super::cache::{TopologyCache, ZoneCounts, service_overloaded};
use super::fixtures::{cpu_node, endpoint, slice, with_label, with_ready, zoned_endpoints};
use super::nodes::{
    NodeAccounting, ZoneRatios, account, parse_quantity_nanos, update_needs_topology_sync,
    zone_ratios,
};
use super::traffic_distribution::TrafficDistribution;
use super::*;
use crate::core::endpointslice::hints::PassSlices;
use crate::core::endpointslice::{Inputs, Outcome, SlicePlan, reconcile_with_hints};
use crate::core::event::{EventType, PlannedEvent};
use crate::core::fixtures::{apply_plan, pod, svc};
use crate::core::slice_endpoints::SliceEndpoints;

// ---------------------------------------------------------------- helpers

fn ratios(pairs: &[(&str, f64)]) -> ZoneRatios {
    ZoneRatios::from_ratios(pairs.iter().copied()).expect("two zones or more")
}

fn equal3() -> ZoneRatios {
    ratios(&[
        ("zone-a", 1.0 / 3.0),
        ("zone-b", 1.0 / 3.0),
        ("zone-c", 1.0 / 3.0),
    ])
}

fn auto_svc() -> Service {
    svc("web")
        .annotation(ANNOTATION_TOPOLOGY_MODE, "Auto")
        .port("http", 80, 8080)
        .build()
}

fn td_svc(value: &str) -> Service {
    let mut s = svc("web").port("http", 80, 8080).build();
    if let Some(spec) = s.spec.as_mut() {
        spec.traffic_distribution = Some(value.to_owned());
    }
    s
}

fn pass<'e>(
    creates: Vec<EndpointSlice>,
    updates: Vec<EndpointSlice>,
    unchanged: Vec<&'e EndpointSlice>,
) -> PassSlices<'e> {
    PassSlices {
        address_type: "IPv4".to_owned(),
        creates,
        updates,
        unchanged,
    }
}

fn policy(r: Option<ZoneRatios>) -> TopologyPolicy {
    TopologyPolicy::new(TopologyCache::default(), r)
}

fn apply(p: &mut TopologyPolicy, service: &Service, ps: &mut PassSlices<'_>) -> Vec<PlannedEvent> {
    let mut events = Vec::new();
    p.apply(service, ps, &mut events);
    events
}

fn zone_hints(e: &k8s_openapi::api::discovery::v1::Endpoint) -> Vec<&str> {
    e.hints
        .iter()
        .flat_map(|h| h.for_zones.iter().flatten())
        .map(|z| z.name.as_str())
        .collect()
}

/// Hints per zone over every slice of the pass.
fn hint_counts(ps: &PassSlices<'_>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for s in ps
        .creates
        .iter()
        .chain(ps.updates.iter())
        .chain(ps.unchanged.iter().copied())
    {
        for e in s.endpoints() {
            for z in zone_hints(e) {
                *out.entry(z.to_owned()).or_default() += 1;
            }
        }
    }
    out
}

fn all_endpoints<'p>(
    ps: &'p PassSlices<'_>,
) -> impl Iterator<Item = &'p k8s_openapi::api::discovery::v1::Endpoint> {
    ps.creates
        .iter()
        .chain(ps.updates.iter())
        .chain(ps.unchanged.iter().copied())
        .flat_map(|s| s.endpoints().iter())
}

fn no_hints(ps: &PassSlices<'_>) -> bool {
    all_endpoints(ps).all(|e| e.hints.is_none())
}

fn counts(pairs: &[(&str, usize)]) -> ZoneCounts {
    pairs.iter().map(|(z, n)| ((*z).to_owned(), *n)).collect()
}

fn warning(message: &str) -> PlannedEvent {
    PlannedEvent::warning(REASON_DISABLED, message)
}

fn enabled_event() -> PlannedEvent {
    PlannedEvent::normal(
        REASON_ENABLED,
        "Topology Aware Hints has been enabled, addressType: IPv4",
    )
}

// Reconciler-level helpers: three zones of equal CPU, one Node each.

fn zone_nodes(cpus: &[(&str, &str)]) -> BTreeMap<String, Arc<Node>> {
    cpus.iter()
        .map(|(zone, cpu)| {
            let name = format!("node-{zone}");
            (
                name.clone(),
                Arc::new(cpu_node(&name, Some(zone), Some(cpu))),
            )
        })
        .collect()
}

fn three_zones() -> BTreeMap<String, Arc<Node>> {
    zone_nodes(&[("zone-a", "4"), ("zone-b", "4"), ("zone-c", "4")])
}

fn zoned_pods(per_zone: &[(&str, usize)]) -> Vec<Arc<Pod>> {
    let mut out = Vec::new();
    let mut i = 0usize;
    for (zone, n) in per_zone {
        for _ in 0..*n {
            out.push(
                pod(&format!("web-{i:04}"), "web")
                    .ip(&format!("10.1.{}.{}", i / 256, i % 256))
                    .node(&format!("node-{zone}"))
                    .ready()
                    .arc(),
            );
            i += 1;
        }
    }
    out
}

fn sync(
    p: &mut TopologyPolicy,
    service: &Service,
    pods: &[Arc<Pod>],
    nodes: &BTreeMap<String, Arc<Node>>,
    existing: &[Arc<EndpointSlice>],
) -> SlicePlan {
    let inputs = Inputs {
        service,
        pods,
        nodes,
        existing,
        trigger_time: None,
        max_endpoints_per_slice: 100,
    };
    match reconcile_with_hints(&inputs, p) {
        Outcome::Planned(plan) => plan,
        Outcome::Skipped(r) => panic!("unexpected skip {r:?}"),
    }
}

fn stored_hint_counts(slices: &[Arc<EndpointSlice>]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for s in slices {
        for e in s.endpoints() {
            for z in zone_hints(e) {
                *out.entry(z.to_owned()).or_default() += 1;
            }
        }
    }
    out
}

// ---------------------------------------------------------------- TH-3.1

#[rstest]
#[case::nothing(&[], false)]
#[case::mode_auto(&[(ANNOTATION_TOPOLOGY_MODE, "Auto")], true)]
#[case::mode_lower_auto(&[(ANNOTATION_TOPOLOGY_MODE, "auto")], true)]
#[case::mode_upper(&[(ANNOTATION_TOPOLOGY_MODE, "AUTO")], false)]
#[case::mode_mixed(&[(ANNOTATION_TOPOLOGY_MODE, "aUto")], false)]
#[case::mode_enabled(&[(ANNOTATION_TOPOLOGY_MODE, "enabled")], false)]
#[case::legacy_auto(&[(ANNOTATION_TOPOLOGY_AWARE_HINTS, "Auto")], true)]
#[case::legacy_lower(&[(ANNOTATION_TOPOLOGY_AWARE_HINTS, "auto")], true)]
#[case::legacy_empty_wins(&[(ANNOTATION_TOPOLOGY_AWARE_HINTS, ""), (ANNOTATION_TOPOLOGY_MODE, "Auto")], false)]
#[case::legacy_disabled_wins(&[(ANNOTATION_TOPOLOGY_AWARE_HINTS, "Disabled"), (ANNOTATION_TOPOLOGY_MODE, "Auto")], false)]
#[case::legacy_auto_wins(&[(ANNOTATION_TOPOLOGY_AWARE_HINTS, "Auto"), (ANNOTATION_TOPOLOGY_MODE, "Disabled")], true)]
fn rule_3_1_enabling_annotations(#[case] annotations: &[(&str, &str)], #[case] want: bool) {
    let mut b = svc("web");
    for (k, v) in annotations {
        b = b.annotation(k, v);
    }
    assert_eq!(hints_enabled(&b.build()), want);
}

#[rstest]
#[case::annotation_beats_traffic_distribution(Some("Auto"), Some("PreferClose"), HintsMode::Auto)]
#[case::traffic_distribution(
    None,
    Some("PreferSameNode"),
    HintsMode::TrafficDistribution(TrafficDistribution::PreferSameNode)
)]
#[case::disabled_annotation_falls_back(
    Some("Disabled"),
    Some("PreferSameZone"),
    HintsMode::TrafficDistribution(TrafficDistribution::PreferSameZone)
)]
#[case::unknown_value_is_unset(None, Some("PreferFar"), HintsMode::Disabled)]
#[case::lower_case_value_is_unknown(None, Some("preferClose"), HintsMode::Disabled)]
#[case::nothing(None, None, HintsMode::Disabled)]
fn rule_3_1_precedence(
    #[case] mode: Option<&str>,
    #[case] td: Option<&str>,
    #[case] want: HintsMode,
) {
    let mut s = td.map_or_else(|| svc("web").build(), td_svc);
    if let Some(m) = mode {
        s.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(ANNOTATION_TOPOLOGY_MODE.to_owned(), m.to_owned());
    }
    assert_eq!(HintsMode::of_service(&s), want);
}

// ---------------------------------------------------------------- TH-3.3.1

#[test]
fn rule_3_3_1_ratios_example() {
    let nodes = [
        cpu_node("a1", Some("zone-a"), Some("1000m")),
        cpu_node("a2", Some("zone-a"), Some("1000m")),
        cpu_node("a3", Some("zone-a"), Some("1000m")),
        cpu_node("a4", Some("zone-a"), Some("2000m")),
        cpu_node("b1", Some("zone-b"), Some("3000m")),
        cpu_node("b2", Some("zone-b"), Some("1500m")),
        cpu_node("c1", Some("zone-c"), Some("500m")),
    ];
    let r = zone_ratios(&nodes).expect("ratios");
    let got: Vec<(&str, f64)> = r.iter().collect();
    assert_eq!(
        got,
        vec![("zone-a", 0.5), ("zone-b", 0.45), ("zone-c", 0.05)]
    );
}

#[rstest]
#[case::control_plane_excluded(
    with_label(cpu_node("x", None, None), "node-role.kubernetes.io/control-plane", ""),
    true
)]
#[case::master_excluded(
    with_label(cpu_node("x", None, None), "node-role.kubernetes.io/master", "true"),
    true
)]
#[case::not_ready_excluded(with_ready(cpu_node("x", None, None), Some("False")), true)]
#[case::unknown_excluded(with_ready(cpu_node("x", None, None), Some("Unknown")), true)]
#[case::no_condition_excluded(with_ready(cpu_node("x", None, None), None), true)]
#[case::no_zone_insufficient(cpu_node("x", None, Some("4")), false)]
#[case::empty_zone_insufficient(cpu_node("x", Some(""), Some("4")), false)]
#[case::no_cpu_insufficient(cpu_node("x", Some("zone-a"), None), false)]
#[case::zero_cpu_insufficient(cpu_node("x", Some("zone-a"), Some("0")), false)]
#[case::other_role_counts(
    with_label(
        cpu_node("x", Some("zone-c"), Some("4")),
        "node-role.kubernetes.io/worker",
        ""
    ),
    true
)]
fn rule_3_3_1_node_accounting(#[case] extra: Node, #[case] ratios_exist: bool) {
    let nodes = [
        cpu_node("a", Some("zone-a"), Some("4")),
        cpu_node("b", Some("zone-b"), Some("4")),
        extra,
    ];
    assert_eq!(zone_ratios(&nodes).is_some(), ratios_exist);
    if !ratios_exist {
        assert_eq!(
            account(&nodes),
            NodeAccounting::Insufficient { node: "x".into() }
        );
    }
}

#[test]
fn rule_3_3_1_excluded_nodes_do_not_count_towards_ratios() {
    let nodes = [
        cpu_node("a", Some("zone-a"), Some("4")),
        cpu_node("b", Some("zone-b"), Some("4")),
        with_label(
            cpu_node("cp", Some("zone-a"), Some("8")),
            "node-role.kubernetes.io/control-plane",
            "",
        ),
        with_ready(cpu_node("nr", Some("zone-a"), Some("8")), Some("False")),
    ];
    let r = zone_ratios(&nodes).expect("ratios");
    assert_eq!(r.get("zone-a"), Some(0.5));
}

#[rstest]
#[case::one_zone(&[("zone-a", "4"), ("zone-a", "2")])]
#[case::no_nodes(&[])]
fn rule_3_3_1_fewer_than_two_zones_gives_no_ratios(#[case] spec: &[(&str, &str)]) {
    let nodes: Vec<Node> = spec
        .iter()
        .enumerate()
        .map(|(i, (z, c))| cpu_node(&format!("n{i}"), Some(z), Some(c)))
        .collect();
    assert_eq!(zone_ratios(&nodes), None);
}

#[rstest]
#[case("4", Some(4_000_000_000))]
#[case("3920m", Some(3_920_000_000))]
#[case("1.5", Some(1_500_000_000))]
#[case("250u", Some(250_000))]
#[case("7n", Some(7))]
#[case("2k", Some(2_000_000_000_000))]
#[case("1Ki", Some(1_024_000_000_000))]
#[case("5e3", Some(5_000_000_000_000))]
#[case("1e-10", Some(1))]
#[case("+2", Some(2_000_000_000))]
#[case("", None)]
#[case("m", None)]
#[case("4x", None)]
#[case("1.2.3", None)]
fn rule_3_3_1_cpu_quantities(#[case] text: &str, #[case] nanos: Option<i128>) {
    assert_eq!(parse_quantity_nanos(text), nanos);
}

#[test]
fn rule_3_3_1_cpu_sums_are_rounded_up_to_millicores_per_zone() {
    // 1n + 1n in zone-a is 1m after rounding up; zone-b is 1m.
    let nodes = [
        cpu_node("a1", Some("zone-a"), Some("1n")),
        cpu_node("a2", Some("zone-a"), Some("1n")),
        cpu_node("b1", Some("zone-b"), Some("1m")),
    ];
    let acc = account(&nodes);
    assert_eq!(
        acc.milli_by_zone(),
        BTreeMap::from([("zone-a".to_owned(), 1), ("zone-b".to_owned(), 1)])
    );
    let r = acc.ratios().expect("ratios");
    // Total is ceil(1_000_002n) = 2m, so each zone holds half.
    assert_eq!((r.get("zone-a"), r.get("zone-b")), (Some(0.5), Some(0.5)));
}

#[rstest]
#[case::cpu_change_is_ignored(cpu_node("n", Some("zone-a"), Some("8")), false)]
#[case::other_label_is_ignored(
    with_label(cpu_node("n", Some("zone-a"), Some("4")), "team", "x"),
    false
)]
#[case::role_label_is_ignored(
    with_label(
        cpu_node("n", Some("zone-a"), Some("4")),
        "node-role.kubernetes.io/control-plane",
        ""
    ),
    false
)]
#[case::zone_change(cpu_node("n", Some("zone-b"), Some("4")), true)]
#[case::zone_removed(cpu_node("n", None, Some("4")), true)]
#[case::readiness_change(
    with_ready(cpu_node("n", Some("zone-a"), Some("4")), Some("False")),
    true
)]
fn rule_2_1_node_updates_that_trigger_the_topology_item(#[case] new: Node, #[case] want: bool) {
    let old = cpu_node("n", Some("zone-a"), Some("4"));
    assert_eq!(update_needs_topology_sync(&old, &new), want);
}

// ---------------------------------------------------------------- TH-3.3.2

#[rstest]
#[case::no_ratios(
    None,
    10,
    Failure::InsufficientNodeInfo,
    "Insufficient Node information: allocatable CPU or zone not specified on one or more nodes"
)]
#[case::more_zones_than_endpoints(Some(equal3()), 2, Failure::InsufficientEndpoints { endpoints: 2, zones: 3 },
    "Insufficient number of endpoints (2 endpoints, 3 zones)")]
#[case::minimums_exceed(Some(equal3()), 4, Failure::MinAllocationExceedsThreshold { endpoints: 4, zones: 3 },
    "Unable to allocate minimum required endpoints to each zone without exceeding overload threshold (4 endpoints, 3 zones)")]
fn rule_3_3_2_allocation_safeguards(
    #[case] r: Option<ZoneRatios>,
    #[case] n: usize,
    #[case] failure: Failure,
    #[case] message: &str,
) {
    assert_eq!(allocations(r.as_ref(), n), Err(failure));
    assert_eq!(failure.message(), message);
}

#[test]
fn rule_3_3_2_one_zone_message_exists_but_is_unreachable() {
    assert_eq!(
        Failure::NodesReadyInOneZoneOnly.message(),
        "Nodes only ready in one zone"
    );
    assert!(ZoneRatios::from_ratios([("zone-a", 1.0)]).is_none());
}

#[test]
fn rule_3_3_2_minimum_maximum_desired() {
    let r = ratios(&[("zone-a", 0.5), ("zone-b", 0.45), ("zone-c", 0.05)]);
    let a = allocations(Some(&r), 20).expect("allocations");
    // desired 10 / 9 / 1; minimum ceil(d/1.2) = 9 / 8 / 1; spare 20-18 = 2.
    let got: Vec<(usize, usize, f64)> = a
        .values()
        .map(|x| (x.minimum, x.maximum, x.desired))
        .collect();
    assert_eq!(got, vec![(9, 11, 10.0), (8, 10, 9.0), (1, 3, 1.0)]);
}

#[test]
fn rule_3_3_2_minimum_uses_upstream_float_expression() {
    // In exact arithmetic the minimums of .1/.1/.8 over 12 endpoints are
    // 1/1/8; upstream computes ceil(desired * (1/1.2)) in floats, which
    // gives 2/2/9 = 13 > 12 and disables hints. We match upstream.
    let r = ratios(&[("zone-a", 0.1), ("zone-b", 0.1), ("zone-c", 0.8)]);
    assert_eq!(
        allocations(Some(&r), 12),
        Err(Failure::MinAllocationExceedsThreshold {
            endpoints: 12,
            zones: 3
        })
    );
}

#[test]
fn rule_3_3_2_desired_is_raised_to_the_minimum() {
    let r = ratios(&[("zone-a", 0.95), ("zone-b", 0.05)]);
    let a = allocations(Some(&r), 10).expect("allocations");
    // zone-b: desired 0.5 < minimum 1 ⇒ desired 1.
    assert_eq!((a["zone-b"].minimum, a["zone-b"].desired), (1, 1.0));
}

#[test]
fn rule_3_3_2_ready_endpoints_of_every_slice_are_counted() {
    // 2 ready in creates + 1 ready in unchanged + 2 not ready = 3 ready,
    // enough for three zones.
    let unchanged = slice(
        "old",
        vec![endpoint("10.0.0.9", Some("zone-c"), true, Some("zone-c"))],
    );
    let mut creates = zoned_endpoints(0, &[("zone-a", 1), ("zone-b", 1)]);
    creates.push(endpoint("10.0.1.1", Some("zone-a"), false, None));
    creates.push(endpoint("10.0.1.2", Some("zone-b"), false, None));
    let mut ps = pass(vec![slice("new", creates)], vec![], vec![&unchanged]);
    let mut p = policy(Some(equal3()));
    let events = apply(&mut p, &auto_svc(), &mut ps);
    assert_eq!(events, vec![enabled_event()]);
    assert_eq!(
        hint_counts(&ps),
        BTreeMap::from([
            ("zone-a".into(), 1),
            ("zone-b".into(), 1),
            ("zone-c".into(), 1)
        ])
    );
}

#[rstest]
#[case::insufficient_node_info(
    None,
    6,
    "Insufficient Node information: allocatable CPU or zone not specified on one or more nodes, addressType: IPv4"
)]
#[case::too_few_endpoints(
    Some(equal3()),
    2,
    "Insufficient number of endpoints (2 endpoints, 3 zones), addressType: IPv4"
)]
#[case::overload(
    Some(equal3()),
    4,
    "Unable to allocate minimum required endpoints to each zone without exceeding overload threshold (4 endpoints, 3 zones), addressType: IPv4"
)]
fn rule_3_3_2_safeguard_removes_hints_everywhere_and_warns(
    #[case] r: Option<ZoneRatios>,
    #[case] n: usize,
    #[case] message: &str,
) {
    // An unchanged slice with hints, and one without: only the former is
    // rewritten.
    let hinted = slice(
        "hinted",
        vec![endpoint("10.9.0.1", Some("zone-a"), true, Some("zone-a"))],
    );
    let bare = slice(
        "bare",
        vec![endpoint("10.9.0.2", Some("zone-b"), false, None)],
    );
    let mut creates = zoned_endpoints(0, &[("zone-a", n - 1)]);
    creates[0].hints = Some(EndpointHints::default());
    let mut ps = pass(vec![slice("new", creates)], vec![], vec![&hinted, &bare]);
    let mut p = policy(r);
    p.cache_mut()
        .set_hints("default/web", "IPv4", counts(&[("zone-a", 1)]));
    let events = apply(&mut p, &auto_svc(), &mut ps);
    assert_eq!(events, vec![warning(message)]);
    assert!(no_hints(&ps));
    assert_eq!(ps.updates.len(), 1);
    assert_eq!(ps.updates[0].metadata.name.as_deref(), Some("hinted"));
    assert_eq!(ps.unchanged.len(), 1);
    assert_eq!(p.cache().allocated_hints("default/web", "IPv4"), None);
    assert!(!p.cache().has_populated_hints("default/web"));
}

// ---------------------------------------------------------------- TH-3.3.3

#[rstest]
#[case::valid_hints_kept(vec![endpoint("10.9.0.1", Some("zone-a"), true, Some("zone-a"))], true)]
#[case::not_ready_without_hints_kept(vec![endpoint("10.9.0.1", Some("zone-a"), false, None)], true)]
#[case::empty_slice_kept(vec![], true)]
#[case::cross_zone_hint_kept(vec![endpoint("10.9.0.1", Some("zone-a"), true, Some("zone-b"))], true)]
#[case::missing_hints_rewritten(vec![endpoint("10.9.0.1", Some("zone-a"), true, None)], false)]
#[case::empty_hints_rewritten(vec![{
    let mut e = endpoint("10.9.0.1", Some("zone-a"), true, None);
    e.hints = Some(EndpointHints { for_zones: Some(vec![]), for_nodes: None });
    e
}], false)]
#[case::unknown_zone_rewritten(vec![endpoint("10.9.0.1", Some("zone-a"), true, Some("zone-x"))], false)]
fn rule_3_3_3_unchanged_slice_kept_iff_hints_valid(
    #[case] endpoints: Vec<k8s_openapi::api::discovery::v1::Endpoint>,
    #[case] kept: bool,
) {
    let old = slice("old", endpoints);
    let creates = zoned_endpoints(0, &[("zone-a", 3), ("zone-b", 3), ("zone-c", 3)]);
    let mut ps = pass(vec![slice("new", creates)], vec![], vec![&old]);
    apply(&mut policy(Some(equal3())), &auto_svc(), &mut ps);
    assert_eq!(ps.unchanged.len() == 1, kept, "{ps:#?}");
}

#[test]
fn rule_3_3_3_slices_over_a_zone_maximum_are_rewritten_in_order() {
    // Three zones, 6 ready endpoints ⇒ minimum 2, maximum 2 per zone. Two
    // unchanged slices each hinting two endpoints to zone-a: the first is
    // accepted, the second would push zone-a to 4 > 2 and is rewritten.
    let first = slice(
        "s1",
        vec![
            endpoint("10.9.0.1", Some("zone-a"), true, Some("zone-a")),
            endpoint("10.9.0.2", Some("zone-b"), true, Some("zone-a")),
        ],
    );
    let second = slice(
        "s2",
        vec![
            endpoint("10.9.0.3", Some("zone-b"), true, Some("zone-a")),
            endpoint("10.9.0.4", Some("zone-c"), true, Some("zone-a")),
        ],
    );
    let creates = zoned_endpoints(0, &[("zone-c", 2)]);
    let mut ps = pass(vec![slice("new", creates)], vec![], vec![&first, &second]);
    let mut p = policy(Some(equal3()));
    apply(&mut p, &auto_svc(), &mut ps);
    assert_eq!(ps.unchanged.len(), 1);
    assert_eq!(ps.unchanged[0].metadata.name.as_deref(), Some("s1"));
    assert_eq!(ps.updates[0].metadata.name.as_deref(), Some("s2"));
    assert_eq!(
        hint_counts(&ps),
        BTreeMap::from([
            ("zone-a".into(), 2),
            ("zone-b".into(), 2),
            ("zone-c".into(), 2)
        ])
    );
    assert_eq!(
        p.cache().allocated_hints("default/web", "IPv4"),
        Some(&counts(&[("zone-a", 2), ("zone-b", 2), ("zone-c", 2)]))
    );
}

// ---------------------------------------------------------------- TH-3.3.4

#[test]
fn rule_3_3_4_same_zone_hints_and_not_ready_endpoints_get_none() {
    let mut creates = zoned_endpoints(0, &[("zone-a", 2), ("zone-b", 2), ("zone-c", 2)]);
    // Upstream clears hints of not-ready endpoints it writes.
    creates.push(endpoint("10.0.9.9", Some("zone-a"), false, Some("zone-a")));
    let mut ps = pass(vec![slice("new", creates)], vec![], vec![]);
    apply(&mut policy(Some(equal3())), &auto_svc(), &mut ps);
    for e in ps.creates[0].endpoints() {
        if endpoint_ready(e) {
            assert_eq!(zone_hints(e), vec![e.zone.as_deref().unwrap_or_default()]);
            assert!(e.hints.as_ref().is_some_and(|h| h.for_nodes.is_none()));
        } else {
            assert_eq!(e.hints, None);
        }
    }
}

#[rstest]
#[case::no_zone(None)]
#[case::empty_zone(Some(""))]
fn rule_3_3_4_ready_endpoint_without_zone_disables(#[case] zone: Option<&str>) {
    let mut creates = zoned_endpoints(0, &[("zone-a", 2), ("zone-b", 2), ("zone-c", 2)]);
    creates.push(endpoint("10.0.9.9", zone, true, None));
    let mut ps = pass(vec![slice("new", creates)], vec![], vec![]);
    let mut p = policy(Some(equal3()));
    let events = apply(&mut p, &auto_svc(), &mut ps);
    assert_eq!(
        events,
        vec![warning(
            "One or more endpoints do not have a zone specified, addressType: IPv4"
        )]
    );
    assert!(no_hints(&ps));
    assert!(p.cache().is_empty());
}

#[test]
fn rule_3_3_4_not_ready_endpoint_without_zone_is_fine() {
    let mut creates = zoned_endpoints(0, &[("zone-a", 1), ("zone-b", 1), ("zone-c", 1)]);
    creates.push(endpoint("10.0.9.9", None, false, None));
    let mut ps = pass(vec![slice("new", creates)], vec![], vec![]);
    let events = apply(&mut policy(Some(equal3())), &auto_svc(), &mut ps);
    assert_eq!(events, vec![enabled_event()]);
}

// ---------------------------------------------------------------- TH-3.3.5

#[rstest]
#[case::all_in_one_zone(equal3(), &[("zone-c", 3)], Some(&[("zone-a", 1), ("zone-b", 1), ("zone-c", 1)][..]), 2)]
#[case::four_endpoints_two_zones(equal3(), &[("zone-a", 2), ("zone-c", 2)], None, 0)]
#[case::nine_endpoints(equal3(), &[("zone-a", 4), ("zone-b", 3), ("zone-c", 2)], Some(&[("zone-a", 3), ("zone-b", 3), ("zone-c", 3)][..]), 1)]
#[case::uneven_ratios(ratios(&[("zone-a", 0.35), ("zone-b", 0.35), ("zone-c", 0.30)]),
    &[("zone-a", 5), ("zone-b", 2), ("zone-c", 3)], Some(&[("zone-a", 4), ("zone-b", 3), ("zone-c", 3)][..]), 1)]
#[case::two_zones_one_each(ratios(&[("zone-a", 0.45), ("zone-b", 0.55)]), &[("zone-a", 1), ("zone-b", 1)],
    Some(&[("zone-a", 1), ("zone-b", 1)][..]), 0)]
fn rule_3_3_5_worked_examples(
    #[case] r: ZoneRatios,
    #[case] endpoints: &[(&str, usize)],
    #[case] want: Option<&[(&str, usize)]>,
    #[case] cross_zone: usize,
) {
    let mut ps = pass(
        vec![slice("new", zoned_endpoints(0, endpoints))],
        vec![],
        vec![],
    );
    let mut p = policy(Some(r));
    let events = apply(&mut p, &auto_svc(), &mut ps);
    match want {
        Some(want) => {
            assert_eq!(events, vec![enabled_event()]);
            assert_eq!(
                hint_counts(&ps),
                counts(want).into_iter().collect::<BTreeMap<_, _>>()
            );
            assert_eq!(
                p.cache().allocated_hints("default/web", "IPv4"),
                Some(&counts(want))
            );
            let moved = all_endpoints(&ps)
                .filter(|e| zone_hints(e) != vec![e.zone.as_deref().unwrap_or_default()])
                .count();
            assert_eq!(moved, cross_zone);
        }
        None => {
            assert_eq!(events.len(), 1);
            assert_eq!(events[0].event_type, EventType::Warning);
            assert!(no_hints(&ps));
        }
    }
}

#[test]
fn rule_3_3_5_redistribution_can_leave_a_zone_one_short() {
    // Found by the property test. CPU 24:9 over 9 ready endpoints (8 in
    // zone-a, 1 in zone-b): zone-b's minimum is ceil(2.45/1.2) = 3, so its
    // desired is raised to 3; zone-a gives 1.45. After one unit zone-a has
    // 0.45 < 0.5 left and upstream stops: zone-b ends with 2 < 3, and the
    // TH-3.3.6 re-check reports the Service overloaded. We match upstream.
    let cpu = BTreeMap::from([("zone-a".to_owned(), 24_000), ("zone-b".to_owned(), 9_000)]);
    let r = ZoneRatios::from_cpu(&cpu).expect("ratios");
    let mut ps = pass(
        vec![slice(
            "new",
            zoned_endpoints(0, &[("zone-a", 8), ("zone-b", 1)]),
        )],
        vec![],
        vec![],
    );
    let mut p = policy(Some(r.clone()));
    assert_eq!(apply(&mut p, &auto_svc(), &mut ps), vec![enabled_event()]);
    assert_eq!(
        hint_counts(&ps),
        BTreeMap::from([("zone-a".into(), 7), ("zone-b".into(), 2)])
    );
    assert_eq!(p.set_ratios(Some(r)), vec!["default/web".to_owned()]);
}

#[test]
fn rule_3_3_5_giving_and_receiving_stop_below_half_an_endpoint() {
    let r = ratios(&[("zone-a", 0.35), ("zone-b", 0.35), ("zone-c", 0.30)]);
    let a = allocations(Some(&r), 10).expect("allocations");
    let (give, receive) =
        giving_and_receiving(&a, &counts(&[("zone-a", 5), ("zone-b", 2), ("zone-c", 3)]));
    // a has 1.5 extra, b needs 1.5: one unit moves, then 0.5/0.5 stops.
    assert_eq!(give, BTreeMap::from([("zone-a".into(), 1)]));
    assert_eq!(receive, BTreeMap::from([("zone-b".into(), 1)]));
}

#[test]
fn rule_3_3_5_enabled_event_only_when_not_yet_populated() {
    let s = auto_svc();
    let mut p = policy(Some(equal3()));
    let mk = || {
        pass(
            vec![slice(
                "new",
                zoned_endpoints(0, &[("zone-a", 1), ("zone-b", 1), ("zone-c", 1)]),
            )],
            vec![],
            vec![],
        )
    };
    assert_eq!(apply(&mut p, &s, &mut mk()), vec![enabled_event()]);
    assert_eq!(apply(&mut p, &s, &mut mk()), vec![]);
    assert!(p.cache().has_populated_hints("default/web"));
}

#[test]
fn rule_3_3_5_populated_flag_is_per_service_not_per_family() {
    let s = svc("web")
        .annotation(ANNOTATION_TOPOLOGY_MODE, "Auto")
        .families(&["IPv4", "IPv6"])
        .build();
    let mut p = policy(Some(equal3()));
    let eps = zoned_endpoints(0, &[("zone-a", 1), ("zone-b", 1), ("zone-c", 1)]);
    let mut v4 = pass(vec![slice("v4", eps.clone())], vec![], vec![]);
    let mut v6 = pass(vec![slice("v6", eps)], vec![], vec![]);
    v6.address_type = "IPv6".into();
    let mut events = Vec::new();
    p.apply(&s, &mut v4, &mut events);
    p.apply(&s, &mut v6, &mut events);
    assert_eq!(events, vec![enabled_event()]);
    assert!(p.cache().allocated_hints("default/web", "IPv6").is_some());
}

// ---------------------------------------------------------------- TH-3.3.6

#[rstest]
#[case::empty_never(counts(&[]), None, false)]
#[case::no_ratios(counts(&[("zone-a", 1)]), None, true)]
#[case::balanced(counts(&[("zone-a", 3), ("zone-b", 3), ("zone-c", 3)]), Some(equal3()), false)]
#[case::zone_missing(counts(&[("zone-a", 3), ("zone-b", 3)]), Some(equal3()), true)]
// T = 9, ratio 1/3 ⇒ minimum ceil(2.5) = 3: 2 is overloaded.
#[case::below_minimum(counts(&[("zone-a", 4), ("zone-b", 3), ("zone-c", 2)]), Some(equal3()), true)]
// T = 10, ratio .3 ⇒ minimum ceil(2.5) = 3.
#[case::at_minimum(counts(&[("zone-a", 4), ("zone-b", 3), ("zone-c", 3)]),
    Some(ratios(&[("zone-a", 0.35), ("zone-b", 0.35), ("zone-c", 0.30)])), false)]
#[case::extra_zone_without_ratio_ignored(counts(&[("zone-a", 3), ("zone-b", 3), ("zone-c", 3), ("zone-d", 0)]), Some(equal3()), false)]
fn rule_3_3_6_overload_check(
    #[case] hints: ZoneCounts,
    #[case] r: Option<ZoneRatios>,
    #[case] overloaded: bool,
) {
    assert_eq!(service_overloaded(&hints, r.as_ref()), overloaded);
}

#[test]
fn rule_3_3_6_overloaded_services_are_requeued_in_order() {
    let mut p = policy(Some(equal3()));
    let balanced = counts(&[("zone-a", 3), ("zone-b", 3), ("zone-c", 3)]);
    p.cache_mut().set_hints("ns/b", "IPv4", balanced.clone());
    p.cache_mut().set_hints("ns/a", "IPv4", balanced.clone());
    // Overloaded only in its IPv6 family.
    p.cache_mut().set_hints("ns/c", "IPv4", balanced.clone());
    p.cache_mut().set_hints(
        "ns/c",
        "IPv6",
        counts(&[("zone-a", 9), ("zone-b", 1), ("zone-c", 1)]),
    );
    assert_eq!(p.set_ratios(Some(equal3())), vec!["ns/c".to_owned()]);
    // zone-c loses most of its CPU: a and b now need more than 3 of 9.
    let shifted = [
        cpu_node("a", Some("zone-a"), Some("8")),
        cpu_node("b", Some("zone-b"), Some("8")),
        cpu_node("c", Some("zone-c"), Some("1")),
    ];
    assert_eq!(p.set_nodes(&shifted), vec!["ns/a", "ns/b", "ns/c"]);
    // No ratios at all: every Service with hints.
    assert_eq!(p.set_ratios(None), vec!["ns/a", "ns/b", "ns/c"]);
}

// ---------------------------------------------------------------- ES-2.11

#[test]
fn rule_2_11_hints_disabled_after_being_populated_warns_and_clears_the_cache() {
    let mut p = policy(Some(equal3()));
    p.cache_mut().set_hints(
        "default/web",
        "IPv4",
        counts(&[("zone-a", 1), ("zone-b", 1)]),
    );
    let hinted = slice(
        "old",
        vec![endpoint("10.9.0.1", Some("zone-a"), true, Some("zone-a"))],
    );
    let plain = svc("web").build();
    let mut ps = pass(vec![], vec![], vec![&hinted]);
    let events = apply(&mut p, &plain, &mut ps);
    assert_eq!(
        events,
        vec![warning(
            "Topology Aware Hints has been disabled, addressType: IPv4"
        )]
    );
    assert!(no_hints(&ps));
    assert_eq!(ps.updates.len(), 1);
    assert!(p.cache().is_empty());
    // The next sync finds nothing populated: no event again.
    let mut ps = pass(vec![], vec![], vec![]);
    assert_eq!(apply(&mut p, &plain, &mut ps), vec![]);
}

#[test]
fn rule_2_11_switch_from_auto_to_traffic_distribution_keeps_same_zone_hints() {
    let mut p = policy(Some(equal3()));
    p.cache_mut()
        .set_hints("default/web", "IPv4", counts(&[("zone-a", 1)]));
    // A cross-zone hint from the topology cache is corrected to same-zone.
    let hinted = slice(
        "old",
        vec![endpoint("10.9.0.1", Some("zone-a"), true, Some("zone-b"))],
    );
    let mut ps = pass(vec![], vec![], vec![&hinted]);
    let events = apply(&mut p, &td_svc("PreferClose"), &mut ps);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason, REASON_DISABLED);
    assert_eq!(zone_hints(&ps.updates[0].endpoints()[0]), vec!["zone-a"]);
    assert!(p.cache().is_empty());
}

#[test]
fn rule_2_11_auto_ignores_traffic_distribution() {
    let mut s = td_svc("PreferSameNode");
    s.metadata.annotations = Some(BTreeMap::from([(
        ANNOTATION_TOPOLOGY_AWARE_HINTS.to_owned(),
        "auto".to_owned(),
    )]));
    let mut ps = pass(
        vec![slice("new", zoned_endpoints(0, &[("zone-c", 3)]))],
        vec![],
        vec![],
    );
    apply(&mut policy(Some(equal3())), &s, &mut ps);
    // Cache allocation (cross-zone), and no node hints.
    assert_eq!(hint_counts(&ps).len(), 3);
    assert!(all_endpoints(&ps).all(|e| e.hints.as_ref().is_some_and(|h| h.for_nodes.is_none())));
}

#[rstest]
#[case::unset(None)]
#[case::unknown(Some("PreferFar"))]
fn rule_2_11_without_annotation_or_valid_td_hints_are_stripped(#[case] td: Option<&str>) {
    let s = td.map_or_else(|| svc("web").build(), td_svc);
    let hinted = slice(
        "old",
        vec![endpoint("10.9.0.1", Some("zone-a"), false, Some("zone-a"))],
    );
    let clean = slice(
        "clean",
        vec![endpoint("10.9.0.2", Some("zone-a"), true, None)],
    );
    let mut created = zoned_endpoints(0, &[("zone-a", 1)]);
    created[0].hints = Some(EndpointHints::default());
    let mut ps = pass(vec![slice("new", created)], vec![], vec![&hinted, &clean]);
    let events = apply(&mut policy(Some(equal3())), &s, &mut ps);
    assert_eq!(events, vec![]);
    assert!(no_hints(&ps));
    assert_eq!(ps.updates.len(), 1);
    assert_eq!(ps.unchanged.len(), 1);
}

// ---------------------------------------------------------------- TH-3.2

fn hints_of(zone: Option<&str>, node: Option<&str>) -> Option<EndpointHints> {
    Some(EndpointHints {
        for_zones: zone.map(|z| vec![ForZone { name: z.into() }]),
        for_nodes: node.map(|n| vec![ForNode { name: n.into() }]),
    })
}

#[rstest]
#[case::close_zone(
    "PreferClose",
    Some("zone-a"),
    Some("n1"),
    hints_of(Some("zone-a"), None)
)]
#[case::same_zone(
    "PreferSameZone",
    Some("zone-a"),
    Some("n1"),
    hints_of(Some("zone-a"), None)
)]
#[case::same_node(
    "PreferSameNode",
    Some("zone-a"),
    Some("n1"),
    hints_of(Some("zone-a"), Some("n1"))
)]
#[case::same_node_no_zone("PreferSameNode", None, Some("n1"), hints_of(None, Some("n1")))]
#[case::same_node_no_node("PreferSameNode", Some("zone-a"), None, hints_of(Some("zone-a"), None))]
#[case::close_no_zone("PreferClose", None, Some("n1"), None)]
#[case::same_node_nothing("PreferSameNode", None, None, None)]
fn rule_3_2_heuristic_hints(
    #[case] td: &str,
    #[case] zone: Option<&str>,
    #[case] node: Option<&str>,
    #[case] want: Option<EndpointHints>,
) {
    let mut e = endpoint("10.0.0.1", zone, true, Some("stale"));
    e.node_name = node.map(str::to_owned);
    let mut ps = pass(vec![slice("new", vec![e])], vec![], vec![]);
    let events = apply(&mut policy(None), &td_svc(td), &mut ps);
    assert_eq!(events, vec![]);
    assert_eq!(ps.creates[0].endpoints()[0].hints, want);
}

#[rstest]
#[case::close("PreferClose")]
#[case::same_node("PreferSameNode")]
fn rule_3_2_not_ready_endpoints_are_left_alone(#[case] td: &str) {
    let stale = endpoint("10.0.0.1", Some("zone-a"), false, Some("zone-x"));
    let bare = endpoint("10.0.0.2", Some("zone-a"), false, None);
    let mut ps = pass(
        vec![slice("new", vec![stale.clone(), bare.clone()])],
        vec![],
        vec![],
    );
    apply(&mut policy(None), &td_svc(td), &mut ps);
    assert_eq!(ps.creates[0].endpoints(), [stale, bare]);
}

#[rstest]
#[case::correct_zone("PreferClose", Some("zone-a"), hints_of(Some("zone-a"), None), false)]
#[case::missing_zone("PreferClose", Some("zone-a"), None, true)]
#[case::wrong_zone("PreferClose", Some("zone-a"), hints_of(Some("zone-b"), None), true)]
#[case::two_zones("PreferClose", Some("zone-a"), Some(EndpointHints {
    for_zones: Some(vec![ForZone { name: "zone-a".into() }, ForZone { name: "zone-b".into() }]),
    for_nodes: None }), true)]
#[case::zone_hint_without_zone("PreferClose", None, hints_of(Some("zone-a"), None), true)]
#[case::stale_node_hint(
    "PreferSameZone",
    Some("zone-a"),
    hints_of(Some("zone-a"), Some("node-zone-a")),
    true
)]
#[case::node_hint_missing("PreferSameNode", Some("zone-a"), hints_of(Some("zone-a"), None), true)]
#[case::node_hint_wrong(
    "PreferSameNode",
    Some("zone-a"),
    hints_of(Some("zone-a"), Some("other")),
    true
)]
#[case::node_hint_correct(
    "PreferSameNode",
    Some("zone-a"),
    hints_of(Some("zone-a"), Some("node-zone-a")),
    false
)]
fn rule_3_2_unchanged_slice_needs_update(
    #[case] td: &str,
    #[case] zone: Option<&str>,
    #[case] hints: Option<EndpointHints>,
    #[case] needs: bool,
) {
    let mut e = endpoint("10.0.0.1", zone, true, None);
    e.node_name = Some("node-zone-a".into());
    e.hints = hints;
    let old = slice("old", vec![e]);
    let t = TrafficDistribution::parse(td).expect("valid");
    assert_eq!(t.needs_update(&old), needs);
    let mut ps = pass(vec![], vec![], vec![&old]);
    apply(&mut policy(None), &td_svc(td), &mut ps);
    assert_eq!(ps.updates.len(), usize::from(needs));
    if needs {
        assert!(!t.needs_update(&ps.updates[0]));
    }
}

#[test]
fn rule_3_2_not_ready_endpoints_never_trigger_an_update() {
    let old = slice(
        "old",
        vec![endpoint("10.0.0.1", Some("zone-a"), false, Some("zone-x"))],
    );
    let mut ps = pass(vec![], vec![], vec![&old]);
    apply(&mut policy(None), &td_svc("PreferSameNode"), &mut ps);
    assert_eq!((ps.updates.len(), ps.unchanged.len()), (0, 1));
}

// ------------------------------------------------- through the reconciler

#[test]
fn rule_3_3_first_sync_hints_then_steady_state_writes_nothing() {
    let s = auto_svc();
    let nodes = three_zones();
    let pods = zoned_pods(&[("zone-a", 4), ("zone-b", 3), ("zone-c", 2)]);
    let mut p = TopologyPolicy::from_nodes(nodes.values().map(Arc::as_ref));
    let first = sync(&mut p, &s, &pods, &nodes, &[]);
    assert_eq!(first.events, vec![enabled_event()]);
    let stored = apply_plan(&[], &first);
    assert_eq!(
        stored_hint_counts(&stored),
        BTreeMap::from([
            ("zone-a".into(), 3),
            ("zone-b".into(), 3),
            ("zone-c".into(), 3)
        ])
    );
    let second = sync(&mut p, &s, &pods, &nodes, &stored);
    assert!(second.is_noop(), "{second:#?}");
    assert_eq!(second.events, vec![]);
}

#[test]
fn rule_3_3_6_node_change_that_moves_no_allocation_writes_nothing() {
    let s = auto_svc();
    let nodes = three_zones();
    let pods = zoned_pods(&[("zone-a", 3), ("zone-b", 3), ("zone-c", 3)]);
    let mut p = TopologyPolicy::from_nodes(nodes.values().map(Arc::as_ref));
    let stored = apply_plan(&[], &sync(&mut p, &s, &pods, &nodes, &[]));
    // zone-a grows a little: minimums stay 3/3/3 (ceil(9·0.36/1.2) = 3).
    let changed = zone_nodes(&[("zone-a", "4500m"), ("zone-b", "4"), ("zone-c", "4")]);
    assert_eq!(
        p.set_nodes(changed.values().map(Arc::as_ref)),
        Vec::<String>::new()
    );
    let again = sync(&mut p, &s, &pods, &changed, &stored);
    assert!(again.is_noop(), "{again:#?}");
}

#[test]
fn rule_3_3_6_requeued_service_keeps_hints_still_within_maximum() {
    // Upstream quirk: the re-check re-queues the Service, but TH-3.3.3 only
    // rejects existing hints above a zone's maximum, so nothing is written
    // and the stored allocation stays overloaded.
    let s = auto_svc();
    let nodes = three_zones();
    let pods = zoned_pods(&[("zone-a", 4), ("zone-b", 4), ("zone-c", 4)]);
    let mut p = TopologyPolicy::from_nodes(nodes.values().map(Arc::as_ref));
    let stored = apply_plan(&[], &sync(&mut p, &s, &pods, &nodes, &[]));
    // zone-a now has half the CPU: it needs ceil(12·0.5/1.2) = 5 > 4 hints,
    // but its maximum is 6 and the others' 4.
    let changed = zone_nodes(&[("zone-a", "8"), ("zone-b", "4"), ("zone-c", "4")]);
    assert_eq!(
        p.set_nodes(changed.values().map(Arc::as_ref)),
        vec!["default/web".to_owned()]
    );
    let again = sync(&mut p, &s, &pods, &changed, &stored);
    assert!(again.is_noop(), "{again:#?}");
    assert!(service_overloaded(
        p.cache()
            .allocated_hints("default/web", "IPv4")
            .expect("stored"),
        p.ratios()
    ));
}

#[test]
fn rule_3_3_6_node_change_over_the_maximum_requeues_and_rewrites() {
    let s = auto_svc();
    let nodes = three_zones();
    let pods = zoned_pods(&[("zone-a", 4), ("zone-b", 4), ("zone-c", 4)]);
    let mut p = TopologyPolicy::from_nodes(nodes.values().map(Arc::as_ref));
    let stored = apply_plan(&[], &sync(&mut p, &s, &pods, &nodes, &[]));
    // Ratios .125/.125/.75: minimums 2/2/8 = 12, so maximums 2/2/8; 4
    // zone-a hints are over the maximum and the slice is recomputed.
    let changed = zone_nodes(&[("zone-a", "1"), ("zone-b", "1"), ("zone-c", "6")]);
    assert_eq!(
        p.set_nodes(changed.values().map(Arc::as_ref)),
        vec!["default/web".to_owned()]
    );
    let again = sync(&mut p, &s, &pods, &changed, &stored);
    assert_eq!(again.write_count(), 1);
    assert_eq!(again.events, vec![]);
    let restored = apply_plan(&stored, &again);
    // Desired 2/2/9: zone-a and zone-b each give two to zone-c.
    assert_eq!(
        stored_hint_counts(&restored),
        BTreeMap::from([
            ("zone-a".into(), 2),
            ("zone-b".into(), 2),
            ("zone-c".into(), 8)
        ])
    );
    assert!(!service_overloaded(
        p.cache()
            .allocated_hints("default/web", "IPv4")
            .expect("stored"),
        p.ratios()
    ));
    assert_eq!(
        p.set_nodes(changed.values().map(Arc::as_ref)),
        Vec::<String>::new()
    );
}

#[test]
fn rule_3_3_no_zone_safeguard_is_stable_and_rewrites_nothing_twice() {
    // A Pod on a Node without zone: the safeguard trips every sync, and the
    // slices, once stripped, are not rewritten again (upstream re-PUTs them).
    let s = auto_svc();
    let mut nodes = three_zones();
    nodes.insert(
        "node-x".into(),
        Arc::new(cpu_node("node-x", None, Some("4"))),
    );
    let mut pods = zoned_pods(&[("zone-a", 2), ("zone-b", 2), ("zone-c", 2)]);
    pods.push(
        pod("web-x", "web")
            .ip("10.2.0.1")
            .node("node-x")
            .ready()
            .arc(),
    );
    // Ratios from zoned Nodes only, so the allocation succeeds and the zone
    // check is what trips.
    let mut p = TopologyPolicy::from_nodes(three_zones().values().map(Arc::as_ref));
    let first = sync(&mut p, &s, &pods, &nodes, &[]);
    let msg = "One or more endpoints do not have a zone specified, addressType: IPv4";
    assert_eq!(first.events, vec![warning(msg)]);
    let stored = apply_plan(&[], &first);
    let second = sync(&mut p, &s, &pods, &nodes, &stored);
    assert_eq!(second.events, vec![warning(msg)]);
    assert!(second.is_noop(), "{second:#?}");
}

#[test]
fn rule_2_11_reconcile_without_policy_keeps_stripping_hints() {
    // `reconcile` (NoTopology) ignores the annotation: existing hints go.
    let s = auto_svc();
    let nodes = three_zones();
    let pods = zoned_pods(&[("zone-a", 1), ("zone-b", 1), ("zone-c", 1)]);
    let mut p = TopologyPolicy::from_nodes(nodes.values().map(Arc::as_ref));
    let stored = apply_plan(&[], &sync(&mut p, &s, &pods, &nodes, &[]));
    let inputs = Inputs {
        service: &s,
        pods: &pods,
        nodes: &nodes,
        existing: &stored,
        trigger_time: None,
        max_endpoints_per_slice: 100,
    };
    let Outcome::Planned(plan) = crate::core::endpointslice::reconcile(&inputs) else {
        panic!("skipped");
    };
    assert_eq!(plan.write_count(), 1);
    assert_eq!(stored_hint_counts(&apply_plan(&stored, &plan)).len(), 0);
}

// ---------------------------------------------------------------- properties

fn arb_case() -> impl Strategy<Value = (Vec<u32>, Vec<usize>, Vec<usize>)> {
    (2usize..=5).prop_flat_map(|zones| {
        (
            prop::collection::vec(1u32..=64, zones),
            prop::collection::vec(0usize..=40, zones),
            prop::collection::vec(0usize..=3, zones),
        )
    })
}

fn zone_name(i: usize) -> String {
    format!("zone-{}", (b'a' + i as u8) as char)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// With hints on, each zone's hinted share is within the overload
    /// threshold of its CPU share (no zone below ceil(N·ratio/1.2)); every
    /// ready endpoint has exactly one zone hint when hints are on and none
    /// when off; not-ready endpoints never do.
    #[test]
    fn prop_hints_proportional_and_exactly_one_per_ready_endpoint(
        (cpus, ready, not_ready) in arb_case(),
        auto in any::<bool>(),
    ) {
        let cpu: BTreeMap<String, i128> = cpus
            .iter()
            .enumerate()
            .map(|(i, c)| (zone_name(i), i128::from(*c) * 1000))
            .collect();
        let r = ZoneRatios::from_cpu(&cpu);
        let mut endpoints = Vec::new();
        let mut k = 0usize;
        for (i, (&n, &nr)) in ready.iter().zip(&not_ready).enumerate() {
            let z = zone_name(i);
            for j in 0..n + nr {
                endpoints.push(endpoint(&format!("10.0.{}.{}", k / 256, k % 256), Some(&z), j < n, None));
                k += 1;
            }
        }
        let half = endpoints.len() / 2;
        let rest = endpoints.split_off(half);
        let mut ps = pass(vec![slice("s1", endpoints), slice("s2", rest)], vec![], vec![]);
        let s = if auto { auto_svc() } else { svc("web").build() };
        let mut p = policy(r.clone());
        let events = apply(&mut p, &s, &mut ps);
        let total: usize = ready.iter().sum();
        let on = auto && events.iter().all(|e| e.event_type == EventType::Normal);
        for e in all_endpoints(&ps) {
            let n = zone_hints(e).len();
            if on && endpoint_ready(e) {
                prop_assert_eq!(n, 1);
            } else {
                prop_assert!(e.hints.is_none());
            }
        }
        if on {
            let r = r.as_ref().expect("hints on needs ratios");
            let got = hint_counts(&ps);
            prop_assert_eq!(got.values().sum::<usize>(), total);
            // Upstream's redistribution stops once a side has less than
            // half an endpoint left, so a zone can end one endpoint short of
            // its overload minimum (see
            // `rule_3_3_5_redistribution_can_leave_a_zone_one_short`); never
            // more than one.
            for (zone, ratio) in r.iter() {
                let have = got.get(zone).copied().unwrap_or(0) as f64;
                let floor = (total as f64 * ratio * (1.0 / (1.0 + OVERLOAD_THRESHOLD))).ceil();
                prop_assert!(have + 1.0 >= floor, "{zone}: {have} + 1 < {floor} ({got:?})");
            }
            // The cache records exactly the hints written, so TH-3.3.6 flags
            // precisely the zones left short.
            let stored = p.cache().allocated_hints("default/web", "IPv4").expect("stored");
            let written: ZoneCounts = got.clone().into_iter().collect();
            prop_assert_eq!(
                stored.iter().filter(|(_, n)| **n > 0).map(|(z, n)| (z.clone(), *n)).collect::<ZoneCounts>(),
                written
            );
            let short = r.iter().any(|(zone, ratio)| {
                (got.get(zone).copied().unwrap_or(0) as f64)
                    < (total as f64 * ratio * (1.0 / (1.0 + OVERLOAD_THRESHOLD))).ceil()
            });
            prop_assert_eq!(service_overloaded(stored, Some(r)), short);
        } else {
            prop_assert!(p.cache().is_empty());
        }
    }

    /// Re-running the policy on its own output writes nothing and keeps the
    /// allocation (hints are part of slice equality).
    #[test]
    fn prop_second_pass_is_a_noop(
        (cpus, ready, _nr) in arb_case(),
    ) {
        let cpu: BTreeMap<String, i128> = cpus
            .iter()
            .enumerate()
            .map(|(i, c)| (zone_name(i), i128::from(*c) * 1000))
            .collect();
        let r = ZoneRatios::from_cpu(&cpu);
        let per_zone: Vec<(String, usize)> =
            ready.iter().enumerate().map(|(i, n)| (zone_name(i), *n)).collect();
        let refs: Vec<(&str, usize)> = per_zone.iter().map(|(z, n)| (z.as_str(), *n)).collect();
        let mut ps = pass(vec![slice("s1", zoned_endpoints(0, &refs))], vec![], vec![]);
        let mut p = policy(r);
        apply(&mut p, &auto_svc(), &mut ps);
        let written = ps.creates.clone();
        let before = p.cache().clone();
        let mut again = pass(vec![], vec![], written.iter().collect());
        apply(&mut p, &auto_svc(), &mut again);
        prop_assert!(again.updates.is_empty(), "{:#?}", again.updates);
        prop_assert_eq!(p.cache().allocated_hints("default/web", "IPv4"),
            before.allocated_hints("default/web", "IPv4"));
    }
}
