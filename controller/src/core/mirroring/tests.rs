//! Rule tests for the mirroring controller, one per rule of MR-5.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, ObjectReference, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rstest::rstest;

use super::{
    CONTROLLER_NAME, Inputs, MirrorPlan, NotMirrored, REASON_INVALID_FIELDS, REASON_INVALID_IP,
    REASON_TOO_MANY, reconcile,
};
use crate::core::fixtures::{as_stored, endpoint_address, endpoints, ipv4_nth, svc};
use crate::core::keys::{
    ANNOTATION_LAST_APPLIED, ANNOTATION_LEADER, ANNOTATION_TRIGGER_TIME, LABEL_MANAGED_BY,
    LABEL_SERVICE_NAME, LABEL_SKIP_MIRROR,
};
use crate::core::slice_endpoints::SliceEndpoints;

fn selectorless() -> Service {
    svc("ext").no_selector().build()
}

fn run_max(
    service: Option<&Service>,
    ep: Option<&Endpoints>,
    existing: &[Arc<EndpointSlice>],
    max: usize,
) -> MirrorPlan {
    reconcile(&Inputs {
        namespace: "default",
        name: "ext",
        endpoints: ep,
        service,
        existing,
        max_endpoints_per_subset: max,
    })
}

fn run(ep: &Endpoints, existing: &[Arc<EndpointSlice>]) -> MirrorPlan {
    run_max(Some(&selectorless()), Some(ep), existing, 1000)
}

/// Applies a plan as the API server would; returns the stored slices.
fn apply(stored: &[Arc<EndpointSlice>], plan: &MirrorPlan) -> Vec<Arc<EndpointSlice>> {
    let mut by_name: BTreeMap<String, EndpointSlice> = stored
        .iter()
        .map(|s| (s.metadata.name.clone().unwrap_or_default(), (**s).clone()))
        .collect();
    let mut n = by_name.len();
    for c in &plan.creates {
        n += 1;
        let name = format!("ext-{n:05}");
        by_name.insert(name.clone(), as_stored(c.clone(), &name));
    }
    for u in &plan.updates {
        let name = u.metadata.name.clone().unwrap_or_default();
        by_name.insert(name.clone(), as_stored(u.clone(), &name));
    }
    for d in &plan.deletes {
        by_name.remove(&d.name);
    }
    by_name.into_values().map(Arc::new).collect()
}

fn ext() -> crate::core::fixtures::EndpointsBuilder {
    endpoints("ext")
}

fn simple() -> Endpoints {
    ext()
        .subset(&["10.0.0.1", "10.0.0.2"], &["10.0.0.3"], &[("http", 80)])
        .build()
}

fn converged(ep: &Endpoints) -> Vec<Arc<EndpointSlice>> {
    apply(&[], &run(ep, &[]))
}

fn addresses(s: &EndpointSlice) -> Vec<&str> {
    s.endpoints()
        .iter()
        .flat_map(|e| e.addresses.iter().map(String::as_str))
        .collect()
}

// ------------------------------------------------------------- MR-5.1

#[rstest]
#[case::skip_true("true", false)]
#[case::skip_false("false", true)]
#[case::skip_upper("TRUE", true)]
#[case::skip_empty("", true)]
fn rule_5_1_skip_mirror_label_only_with_value_true(#[case] value: &str, #[case] mirrored: bool) {
    let stored = converged(&simple());
    let ep = ext()
        .label(LABEL_SKIP_MIRROR, value)
        .subset(&["10.0.0.1", "10.0.0.2"], &["10.0.0.3"], &[("http", 80)])
        .build();
    let plan = run(&ep, &stored);
    if mirrored {
        assert_eq!(plan.not_mirrored, None);
        assert_eq!(plan.updates.len(), 1, "labels changed: rewritten");
    } else {
        assert_eq!(plan.not_mirrored, Some(NotMirrored::SkipMirrorLabel));
        assert_eq!(plan.deletes.len(), 1);
        assert!(plan.creates.is_empty() && plan.updates.is_empty());
    }
}

#[test]
fn rule_5_1_leader_annotation_is_not_mirrored() {
    let stored = converged(&simple());
    let ep = ext()
        .annotation(ANNOTATION_LEADER, "{\"holderIdentity\":\"x\"}")
        .subset(&["10.0.0.1"], &[], &[("http", 80)])
        .build();
    let plan = run(&ep, &stored);
    assert_eq!(plan.not_mirrored, Some(NotMirrored::LeaderAnnotation));
    assert_eq!(plan.deletes.len(), 1);
    assert!(run(&ep, &[]).is_noop());
}

#[rstest]
#[case::service_missing(None, true, NotMirrored::ServiceMissing)]
#[case::service_has_selector(Some(svc("ext").build()), true, NotMirrored::ServiceHasSelector)]
#[case::endpoints_missing(Some(selectorless()), false, NotMirrored::EndpointsMissing)]
fn rule_5_1_source_gone_deletes_every_mirrored_slice(
    #[case] service: Option<Service>,
    #[case] with_endpoints: bool,
    #[case] reason: NotMirrored,
) {
    let ep = ext()
        .subset(&["10.0.0.1"], &[], &[("a", 80)])
        .subset(&["10.0.0.2"], &[], &[("b", 81)])
        .build();
    let mut stored = converged(&ep);
    assert_eq!(stored.len(), 2);
    // A controller-managed slice and another key's mirrored slice stay.
    let mut other = (*stored[0]).clone();
    other.metadata.name = Some("other-1".into());
    other
        .metadata
        .labels
        .get_or_insert_default()
        .insert(LABEL_SERVICE_NAME.into(), "other".into());
    let mut controller = (*stored[0]).clone();
    controller.metadata.name = Some("ext-ctrl".into());
    controller.metadata.labels.get_or_insert_default().insert(
        LABEL_MANAGED_BY.into(),
        "endpointslice-controller.k8s.io".into(),
    );
    stored.push(Arc::new(other));
    stored.push(Arc::new(controller));
    let plan = run_max(
        service.as_ref(),
        with_endpoints.then_some(&ep),
        &stored,
        1000,
    );
    assert_eq!(plan.not_mirrored, Some(reason));
    let mut deleted: Vec<&str> = plan.deletes.iter().map(|d| d.name.as_str()).collect();
    deleted.sort_unstable();
    assert_eq!(deleted, vec!["ext-00001", "ext-00002"]);
    assert!(plan.creates.is_empty() && plan.updates.is_empty());
}

// ------------------------------------------------------------- MR-5.2

#[test]
fn rule_5_2_subsets_are_repacked_before_mirroring() {
    let ep = ext()
        .subset(&["10.0.0.2", "10.0.0.1"], &[], &[("a", 80)])
        .subset(&["10.0.0.1", "10.0.0.2"], &[], &[("b", 81)])
        .subset(&["10.0.0.1"], &[], &[("a", 80)])
        .build();
    let plan = run(&ep, &[]);
    assert_eq!(
        plan.creates.len(),
        1,
        "identical address sets merge their ports"
    );
    let s = &plan.creates[0];
    assert_eq!(addresses(s), vec!["10.0.0.1", "10.0.0.2"]);
    assert_eq!(s.ports.as_ref().map_or(0, Vec::len), 2);
}

#[test]
fn rule_5_2_one_slice_per_subset_and_family() {
    let ep = ext()
        .subset(&["10.0.0.1", "fd00::1"], &[], &[("http", 80)])
        .subset(&["10.0.0.9"], &["fd00::9"], &[("dns", 53)])
        .build();
    let plan = run(&ep, &[]);
    let mut got: Vec<(String, Vec<&str>)> = plan
        .creates
        .iter()
        .map(|s| (s.address_type.clone(), addresses(s)))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("IPv4".to_owned(), vec!["10.0.0.1"]),
            ("IPv4".to_owned(), vec!["10.0.0.9"]),
            ("IPv6".to_owned(), vec!["fd00::1"]),
            ("IPv6".to_owned(), vec!["fd00::9"]),
        ]
    );
    // MR-5.4 metric: desired slices summed per group (four groups of one endpoint),
    // not one ceiling over the total.
    assert_eq!(plan.stats.endpoints_desired, 4);
    assert_eq!(plan.stats.slices_desired, 4);
}

#[test]
fn rule_5_2_ports_are_converted_one_to_one_with_name_always_set() {
    let mut ep = ext().subset(&["10.0.0.1"], &[], &[("", 80)]).build();
    if let Some(p) = ep.subsets.as_mut().and_then(|s| s[0].ports.as_mut()) {
        p[0].app_protocol = Some("h2c".into());
    }
    let plan = run(&ep, &[]);
    let ports = plan.creates[0].ports.clone().unwrap_or_default();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].name.as_deref(), Some(""));
    assert_eq!(ports[0].port, Some(80));
    assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
    assert_eq!(ports[0].app_protocol.as_deref(), Some("h2c"));
}

#[test]
fn rule_5_2_endpoint_fields() {
    let target = ObjectReference {
        kind: Some("Pod".into()),
        namespace: Some("default".into()),
        name: Some("p".into()),
        uid: Some("u".into()),
        resource_version: Some("7".into()),
        ..ObjectReference::default()
    };
    let ready = EndpointAddress {
        ip: "1234::5678:0000:0000:9abc:def0".into(),
        hostname: Some("h".into()),
        node_name: Some("node-a".into()),
        target_ref: Some(target.clone()),
    };
    let ep = ext()
        .subset_of(
            vec![ready, endpoint_address("::ffff:1.2.3.4")],
            vec![EndpointAddress {
                hostname: Some(String::new()),
                ..endpoint_address("010.0.0.1")
            }],
            &[("http", 80)],
        )
        .build();
    let plan = run(&ep, &[]);
    let v6 = plan
        .creates
        .iter()
        .find(|s| s.address_type == "IPv6")
        .cloned()
        .unwrap_or_default();
    let e = &v6.endpoints()[0];
    assert_eq!(e.addresses, vec!["1234::5678:0:0:9abc:def0"]);
    let c = e.conditions.clone().unwrap_or_default();
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(true), None, None)
    );
    assert_eq!(e.hostname.as_deref(), Some("h"));
    assert_eq!(e.node_name.as_deref(), Some("node-a"));
    assert_eq!(e.target_ref.as_ref(), Some(&target), "copied verbatim");
    assert_eq!((e.zone.as_ref(), e.hints.as_ref()), (None, None));
    let v4 = plan
        .creates
        .iter()
        .find(|s| s.address_type == "IPv4")
        .cloned()
        .unwrap_or_default();
    assert_eq!(addresses(&v4), vec!["1.2.3.4", "10.0.0.1"]);
    let not_ready = &v4.endpoints()[1];
    assert_eq!(
        not_ready.conditions.as_ref().and_then(|c| c.ready),
        Some(false)
    );
    assert_eq!(not_ready.hostname, None, "empty hostname is not copied");
}

#[rstest]
#[case::at_max(1000, 1000, None)]
#[case::over_max(
    1001,
    1000,
    Some(
        "A max of 1000 addresses can be mirrored to EndpointSlices per Endpoints subset. 1 addresses were skipped"
    )
)]
#[case::far_over(
    1500,
    1000,
    Some(
        "A max of 1000 addresses can be mirrored to EndpointSlices per Endpoints subset. 500 addresses were skipped"
    )
)]
fn rule_5_2_at_most_max_addresses_per_subset_with_a_warning(
    #[case] n: usize,
    #[case] kept: usize,
    #[case] message: Option<&str>,
) {
    let ips: Vec<String> = (0..n).map(ipv4_nth).collect();
    let refs: Vec<&str> = ips.iter().map(String::as_str).collect();
    let ep = ext().subset(&refs, &[], &[("http", 80)]).build();
    let plan = run(&ep, &[]);
    assert_eq!(plan.creates.len(), 1);
    assert_eq!(plan.creates[0].endpoints().len(), kept);
    let got: Vec<&str> = plan
        .events
        .iter()
        .filter(|e| e.reason == REASON_TOO_MANY)
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(got, message.into_iter().collect::<Vec<_>>());
    assert_eq!(plan.stats.addresses_skipped, n - kept);
}

#[test]
fn rule_5_2_max_counts_ready_then_not_ready_valid_addresses_per_subset() {
    let ep = ext()
        .subset(
            &["10.0.0.1", "0bad", "10.0.0.2"],
            &["10.0.0.3"],
            &[("http", 80)],
        )
        .build();
    // Repacked order is by IP bytes: "0bad" (invalid) comes first and does
    // not count towards the maximum.
    let plan = run_max(Some(&selectorless()), Some(&ep), &[], 2);
    assert_eq!(addresses(&plan.creates[0]), vec!["10.0.0.1", "10.0.0.2"]);
    // skipped = 4 total - 2 taken = 2, of which 1 invalid.
    assert_eq!(plan.stats.addresses_skipped, 2);
    assert_eq!(plan.stats.invalid_addresses, 1);
    let reasons: Vec<&str> = plan.events.iter().map(|e| e.reason).collect();
    assert_eq!(
        reasons,
        vec![REASON_INVALID_IP, REASON_TOO_MANY, REASON_INVALID_FIELDS]
    );
}

#[test]
fn rule_5_2_invalid_ips_are_skipped_and_reported_naming_the_field() {
    let ep = ext()
        .subset(&["10.0.0.1", "not-an-ip"], &["300.1.1.1"], &[("http", 80)])
        .build();
    let plan = run(&ep, &[]);
    assert_eq!(addresses(&plan.creates[0]), vec!["10.0.0.1"]);
    let messages: Vec<(&str, &str)> = plan
        .events
        .iter()
        .map(|e| (e.reason, e.message.as_str()))
        .collect();
    assert_eq!(
        messages,
        vec![
            (
                REASON_INVALID_IP,
                "Skipped 2 invalid IP addresses when mirroring to EndpointSlices"
            ),
            (
                REASON_INVALID_FIELDS,
                "Skipped invalid fields when mirroring to EndpointSlices: \
                 subsets[0].addresses[1].ip: \"not-an-ip\" is not a valid IP address; \
                 subsets[0].notReadyAddresses[0].ip: \"300.1.1.1\" is not a valid IP address"
            ),
        ],
        "only invalid addresses skipped: no TooManyAddressesToMirror"
    );
}

#[test]
fn rule_5_2_port_without_number_and_subset_without_addresses_are_reported() {
    let ep = ext()
        .subset(&["10.0.0.1"], &[], &[("http", 0)])
        .subset(&[], &[], &[("dns", 53)])
        .build();
    let plan = run(&ep, &[]);
    // Upstream's repack drops the numberless port and keeps its addresses;
    // the empty subset yields nothing.
    assert_eq!(plan.creates.len(), 1);
    assert_eq!(plan.creates[0].ports, Some(vec![]));
    assert_eq!(addresses(&plan.creates[0]), vec!["10.0.0.1"]);
    let fields: Vec<&str> = plan
        .events
        .iter()
        .filter(|e| e.reason == REASON_INVALID_FIELDS)
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(
        fields,
        vec![
            "Skipped invalid fields when mirroring to EndpointSlices: \
             subsets[0].ports[0].port: a port number is required (got 0); \
             subsets[1]: subset has no addresses"
        ]
    );
}

// ------------------------------------------------------------- MR-5.3

#[test]
fn rule_5_3_slice_shape() {
    let ep = ext()
        .label("team", "a")
        .label(LABEL_SERVICE_NAME, "spoofed")
        .annotation("note", "kept")
        .annotation(ANNOTATION_TRIGGER_TIME, "2020-01-01T00:00:00Z")
        .annotation(ANNOTATION_LAST_APPLIED, "{}")
        .subset(&["10.0.0.1"], &[], &[("http", 80)])
        .build();
    let plan = run(&ep, &[]);
    let s = &plan.creates[0];
    assert_eq!(s.metadata.generate_name.as_deref(), Some("ext-"));
    assert_eq!(s.metadata.name, None);
    assert_eq!(s.metadata.namespace.as_deref(), Some("default"));
    let owners = s.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (
            owners[0].api_version.as_str(),
            owners[0].kind.as_str(),
            owners[0].name.as_str(),
            owners[0].uid.as_str(),
            owners[0].controller,
            owners[0].block_owner_deletion
        ),
        (
            "v1",
            "Endpoints",
            "ext",
            "uid-ep-ext",
            Some(true),
            Some(true)
        )
    );
    let labels = s.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels,
        BTreeMap::from([
            ("team".to_owned(), "a".to_owned()),
            (LABEL_SERVICE_NAME.to_owned(), "ext".to_owned()),
            (LABEL_MANAGED_BY.to_owned(), CONTROLLER_NAME.to_owned()),
        ])
    );
    assert_eq!(
        s.metadata.annotations,
        Some(BTreeMap::from([("note".to_owned(), "kept".to_owned())]))
    );
}

// ------------------------------------------------------------- MR-5.4

#[test]
fn rule_5_4_zero_writes_when_in_sync() {
    let ep = ext()
        .label("team", "a")
        .annotation(ANNOTATION_TRIGGER_TIME, "x")
        .subset(&["10.0.0.1", "fd00::1"], &["10.0.0.2"], &[("http", 80)])
        .subset(&["10.0.0.9"], &[], &[("dns", 53)])
        .build();
    let stored = converged(&ep);
    assert_eq!(stored.len(), 3);
    let again = run(&ep, &stored);
    assert!(again.is_noop(), "{again:?}");
    assert!(again.events.is_empty());
}

#[test]
fn rule_5_4_changed_endpoint_rewrites_the_first_slice_and_deletes_the_rest() {
    let stored = converged(&simple());
    let mut dup = (*stored[0]).clone();
    dup.metadata.name = Some("ext-zzz".into());
    let mut with_dup = stored.clone();
    with_dup.push(Arc::new(dup));
    let ep = ext()
        .subset(&["10.0.0.1", "10.0.0.2", "10.0.0.3"], &[], &[("http", 80)])
        .build();
    let plan = run(&ep, &with_dup);
    assert!(plan.creates.is_empty());
    assert_eq!(plan.updates.len(), 1);
    let u = &plan.updates[0];
    assert_eq!(u.metadata.name, stored[0].metadata.name);
    assert_eq!(u.metadata.resource_version, None, "rewritten from scratch");
    assert_eq!(addresses(u), vec!["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    assert_eq!(plan.deletes.len(), 1);
    assert_eq!(plan.deletes[0].name, "ext-zzz");
    assert_eq!(plan.stats.endpoints_updated, 1);
}

#[rstest]
#[case::label(true, false)]
#[case::annotation(false, true)]
fn rule_5_4_label_or_annotation_change_rewrites(#[case] label: bool, #[case] ann: bool) {
    let stored = converged(&simple());
    let mut b = ext().subset(&["10.0.0.1", "10.0.0.2"], &["10.0.0.3"], &[("http", 80)]);
    if label {
        b = b.label("x", "y");
    }
    if ann {
        b = b.annotation("x", "y");
    }
    let plan = run(&b.build(), &stored);
    assert_eq!(plan.updates.len(), 1);
    // The stripped annotations never cause a write.
    let stripped = ext()
        .annotation(ANNOTATION_LAST_APPLIED, "{}")
        .annotation(ANNOTATION_TRIGGER_TIME, "t")
        .subset(&["10.0.0.1", "10.0.0.2"], &["10.0.0.3"], &[("http", 80)])
        .build();
    assert!(run(&stripped, &stored).is_noop());
}

#[rstest]
#[case::same_uid(Some("uid-ep-ext"), false)]
#[case::other_uid(Some("uid-old"), true)]
#[case::no_owner(None, false)]
fn rule_5_4_owner_reference_uid(#[case] uid: Option<&str>, #[case] write: bool) {
    let mut slice = (*converged(&simple())[0]).clone();
    slice.metadata.owner_references = uid.map(|u| {
        let mut r = slice
            .metadata
            .owner_references
            .clone()
            .unwrap_or_default()
            .remove(0);
        r.uid = u.to_owned();
        vec![r]
    });
    let plan = run(&simple(), &[Arc::new(slice)]);
    assert_eq!(plan.updates.len(), usize::from(write));
    assert_eq!(plan.write_count(), usize::from(write));
}

#[test]
fn rule_5_4_port_change_recycles_the_old_slice() {
    let stored = converged(&simple());
    let ep = ext()
        .subset(&["10.0.0.1", "10.0.0.2"], &["10.0.0.3"], &[("http", 8080)])
        .build();
    let plan = run(&ep, &stored);
    assert!(
        plan.creates.is_empty() && plan.deletes.is_empty(),
        "{plan:?}"
    );
    assert_eq!(plan.updates.len(), 1);
    assert_eq!(plan.updates[0].metadata.name, stored[0].metadata.name);
    // Upstream keeps generateName on the recycled object (the differential
    // suite caught us dropping it).
    assert_eq!(
        plan.updates[0].metadata.generate_name.as_deref(),
        Some("ext-")
    );
    let ports = plan.updates[0].ports.clone().unwrap_or_default();
    assert_eq!(ports[0].port, Some(8080));
}

#[test]
fn rule_5_4_groups_no_longer_desired_are_deleted() {
    let ep = ext()
        .subset(&["10.0.0.1", "fd00::1"], &[], &[("http", 80)])
        .build();
    let stored = converged(&ep);
    assert_eq!(stored.len(), 2);
    let v4_only = ext().subset(&["10.0.0.1"], &[], &[("http", 80)]).build();
    let plan = run(&v4_only, &stored);
    assert!(plan.creates.is_empty() && plan.updates.is_empty());
    assert_eq!(plan.deletes.len(), 1);
    assert_eq!(plan.deletes[0].address_type, "IPv6");
    // No placeholder is ever created.
    let empty = ext().build();
    let plan = run(&empty, &stored);
    assert_eq!(plan.deletes.len(), 2);
    assert!(plan.creates.is_empty());
    assert!(run(&empty, &[]).is_noop());
}

#[test]
fn rule_5_4_creates_are_skipped_while_the_endpoints_is_being_deleted() {
    let ep = ext()
        .deleting()
        .subset(&["10.0.0.1"], &[], &[("http", 80)])
        .build();
    assert!(run(&ep, &[]).is_noop());
    // Updates still happen.
    let stored = converged(&simple());
    let changed = ext()
        .deleting()
        .subset(&["10.0.0.1"], &[], &[("http", 80)])
        .build();
    assert_eq!(run(&changed, &stored).updates.len(), 1);
}

#[test]
fn rule_5_4_slices_being_deleted_are_ignored() {
    let mut slice = (*converged(&simple())[0]).clone();
    slice.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        crate::core::fixtures::epoch(),
    ));
    let plan = run(&simple(), &[Arc::new(slice)]);
    assert_eq!(plan.creates.len(), 1);
    assert!(plan.deletes.is_empty());
}

#[test]
fn rule_5_4_in_place_rewrite_names_the_slice_and_drops_generate_name() {
    // Upstream builds the rewrite with the existing name and no
    // generateName, so the PUT clears it (checked against kube-controller-
    // manager by the differential suite); recycled creates keep it.
    let stored = converged(&simple());
    assert_eq!(stored[0].metadata.generate_name.as_deref(), Some("ext-"));
    let ep = ext()
        .subset(&["10.0.0.1", "10.0.0.4"], &["10.0.0.3"], &[("http", 80)])
        .build();
    let plan = run(&ep, &stored);
    assert_eq!(plan.updates.len(), 1, "{plan:?}");
    assert_eq!(plan.updates[0].metadata.name, stored[0].metadata.name);
    assert_eq!(plan.updates[0].metadata.generate_name, None);
}
