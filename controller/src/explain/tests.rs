//! Unit tests of `explain`: one per verdict reason and hints outcome, each
//! named after the spec rule it checks (`rule_<section>_...`), plus checks
//! that the verdicts agree with the writes the reconcilers plan.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{IPAddress, IPAddressSpec, ParentReference};
use svcplane_allocator::{AllocatorConfig, Claim};
use svcplane_webhook::claim::AllocationClaim;
use svcplane_webhook::state::ServiceRef;

use super::allocation::{explain_ip, explain_node_port};
use super::hints::Outcome;
use super::pod::explain_pod;
use super::service::{ServiceReport, explain_service};
use super::slices::Write;
use super::verdict::{MissingPort, Note, PodVerdict, Reason, State, Verdict};
use super::world::{Source, World};
use crate::core::endpoints::{self as eps, EndpointsWrite};
use crate::core::endpointslice::{self, Inputs, Outcome as SliceOutcome};
use crate::core::fixtures::{apply_plan, ipv4_nth, node, pod, svc};
use crate::core::keys::{ANNOTATION_TOPOLOGY_AWARE_HINTS, ANNOTATION_TOPOLOGY_MODE};
use crate::core::slice_endpoints::SliceEndpoints;
use crate::core::topology::TopologyPolicy;
use crate::core::topology::fixtures::{cpu_node, with_ready};
use crate::dump::snapshot::{Key, Snapshot};

fn key_of(ns: Option<&String>, name: Option<&String>) -> Key {
    Key {
        namespace: ns.cloned().unwrap_or_default(),
        name: name.cloned().unwrap_or_default(),
    }
}

fn snapshot(services: Vec<Service>, pods: Vec<Pod>, nodes: Vec<Node>) -> Snapshot {
    let mut s = Snapshot::default();
    for v in services {
        s.services.insert(
            key_of(v.metadata.namespace.as_ref(), v.metadata.name.as_ref()),
            Arc::new(v),
        );
    }
    for p in pods {
        s.pods.insert(
            key_of(p.metadata.namespace.as_ref(), p.metadata.name.as_ref()),
            Arc::new(p),
        );
    }
    for n in nodes {
        s.nodes
            .insert(n.metadata.name.clone().unwrap_or_default(), Arc::new(n));
    }
    s
}

fn with_slices(mut s: Snapshot, slices: Vec<Arc<EndpointSlice>>) -> Snapshot {
    s.endpoint_slices.clear();
    for sl in slices {
        s.endpoint_slices.insert(
            key_of(sl.metadata.namespace.as_ref(), sl.metadata.name.as_ref()),
            sl,
        );
    }
    s
}

fn explain(s: &Snapshot, service: &str) -> ServiceReport {
    explain_service(s, "default", service, 100).expect("the Service exists")
}

fn verdict<'r>(r: &'r ServiceReport, p: &str) -> &'r PodVerdict {
    r.pod(p)
        .unwrap_or_else(|| panic!("no verdict for {p}: {:#?}", r.pods))
}

/// The usual Service: `web`, one TCP port 80 → 8080.
fn web() -> crate::core::fixtures::SvcBuilder {
    svc("web").port("http", 80, 8080)
}

fn slices_out(v: &PodVerdict) -> &Reason {
    assert_eq!(v.endpoint_slices.state, State::Out, "{v:#?}");
    v.endpoint_slices.reason.as_ref().expect("a reason")
}

fn endpoints_out(v: &PodVerdict) -> &Reason {
    assert_eq!(v.endpoints.state, State::Out, "{v:#?}");
    v.endpoints.reason.as_ref().expect("a reason")
}

// --- selection --------------------------------------------------------------

#[test]
fn rule_2_1_near_miss_names_the_label_that_differs() {
    let s = snapshot(
        vec![web().build()],
        vec![
            pod("a", "web").ip("10.0.0.1").ready().build(),
            pod("b", "api").ip("10.0.0.2").ready().build(),
            pod("c", "web")
                .namespace("elsewhere")
                .ip("10.0.0.3")
                .build(),
        ],
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain(&s, "web");
    assert_eq!(verdict(&r, "a").verdict, Verdict::Ready);
    let b = verdict(&r, "b");
    assert_eq!(b.verdict, Verdict::Out);
    let want = Reason::NotSelected {
        label: "app".into(),
        wanted: "web".into(),
        found: Some("api".into()),
    };
    assert_eq!(slices_out(b), &want);
    assert_eq!(endpoints_out(b), &want);
    assert_eq!(
        b.why,
        r#"not selected: label app="api", the selector wants "web""#
    );
    assert!(r.pod("c").is_none(), "another namespace is unrelated");
}

#[test]
fn rule_2_1_near_miss_of_a_two_label_selector_names_the_missing_label() {
    let mut service = web().build();
    if let Some(spec) = service.spec.as_mut() {
        spec.selector = Some(BTreeMap::from([
            ("app".to_owned(), "web".to_owned()),
            ("tier".to_owned(), "front".to_owned()),
        ]));
    }
    let s = snapshot(
        vec![service],
        vec![
            pod("a", "web").ip("10.0.0.1").build(),
            pod("b", "api").ip("10.0.0.2").build(),
        ],
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain(&s, "web");
    assert_eq!(
        slices_out(verdict(&r, "a")),
        &Reason::NotSelected {
            label: "tier".into(),
            wanted: "front".into(),
            found: None
        }
    );
    assert!(r.pod("b").is_none(), "two labels differ: not a near miss");
}

#[test]
fn rule_2_1_one_label_selector_near_miss_needs_the_key() {
    let mut other = pod("b", "x").ip("10.0.0.2").build();
    other.metadata.labels = Some(BTreeMap::from([("team".to_owned(), "a".to_owned())]));
    let s = snapshot(vec![web().build()], vec![other], vec![node("node-a", None)]);
    assert!(explain(&s, "web").pods.is_empty());
}

// --- eligibility ------------------------------------------------------------

#[test]
fn rule_1_2_terminal_pod_is_out() {
    let s = snapshot(
        vec![web().build()],
        vec![pod("done", "web").ip("10.0.0.1").phase("Succeeded").build()],
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain(&s, "web");
    let v = verdict(&r, "done");
    let want = Reason::TerminalPhase {
        phase: "Succeeded".into(),
    };
    assert_eq!(slices_out(v), &want);
    assert_eq!(endpoints_out(v), &want);
    assert_eq!(v.verdict, Verdict::Out);
}

#[test]
fn rule_1_2_pod_without_ip_is_out() {
    let s = snapshot(
        vec![web().build()],
        vec![pod("pending", "web").phase("Pending").build()],
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain(&s, "web");
    let v = verdict(&r, "pending");
    assert_eq!(slices_out(v), &Reason::NoIp);
    assert_eq!(endpoints_out(v), &Reason::NoIp);
}

#[test]
fn rule_2_4_pod_on_a_missing_node_is_out_and_fails_the_sync() {
    let s = snapshot(
        vec![web().build()],
        vec![
            pod("lost", "web")
                .ip("10.0.0.1")
                .ready()
                .node("gone")
                .build(),
        ],
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain(&s, "web");
    let v = verdict(&r, "lost");
    assert_eq!(
        slices_out(v),
        &Reason::NodeNotFound {
            node: "gone".into()
        }
    );
    // The Endpoints controller does not look at Nodes.
    assert_eq!(v.endpoints.state, State::In);
    let err = r.endpoint_slices.sync_error.as_deref().unwrap_or_default();
    assert!(err.contains("Node gone Not Found"), "{err}");
    assert!(
        r.endpoint_slices
            .events
            .iter()
            .any(|e| e.starts_with("Warning FailedToUpdateEndpointSlices")),
        "{:?}",
        r.endpoint_slices.events
    );
}

#[test]
fn rule_2_4_unscheduled_pod_is_out() {
    let mut p = pod("floating", "web").ip("10.0.0.1").ready().build();
    if let Some(spec) = p.spec.as_mut() {
        spec.node_name = None;
    }
    let s = snapshot(vec![web().build()], vec![p], vec![node("node-a", None)]);
    let r = explain(&s, "web");
    assert_eq!(slices_out(verdict(&r, "floating")), &Reason::Unscheduled);
}

#[test]
fn rule_2_3_pod_without_an_address_the_service_serves_is_out() {
    let s = snapshot(
        vec![web().build()],
        vec![pod("v6", "web").ip("fd00::1").ready().build()],
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain(&s, "web");
    let v = verdict(&r, "v6");
    let want = Reason::FamilyNotServed {
        pod_ips: vec!["fd00::1".into()],
        served: vec!["IPv4".into()],
    };
    assert_eq!(slices_out(v), &want);
    assert_eq!(endpoints_out(v), &want);
}

#[test]
fn rule_2_3_dual_stack_pod_missing_one_family_is_noted() {
    let s = snapshot(
        vec![web().families(&["IPv4", "IPv6"]).build()],
        vec![pod("v4", "web").ip("10.0.0.1").ready().build()],
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain(&s, "web");
    let v = verdict(&r, "v4");
    assert_eq!(v.verdict, Verdict::Ready);
    assert!(
        v.endpoint_slices.notes.contains(&Note::NoAddressOf {
            address_type: "IPv6".into()
        }),
        "{v:#?}"
    );
}

// --- conditions and placement -----------------------------------------------

#[test]
fn rule_2_4_ready_not_ready_and_terminating_endpoints() {
    let s = snapshot(
        vec![web().build()],
        vec![
            pod("up", "web").ip("10.0.0.1").ready().build(),
            pod("warming", "web").ip("10.0.0.2").not_ready().build(),
            pod("leaving", "web")
                .ip("10.0.0.3")
                .ready()
                .terminating()
                .build(),
        ],
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain(&s, "web");
    let up = verdict(&r, "up");
    assert_eq!(up.verdict, Verdict::Ready);
    assert_eq!(
        (
            up.endpoint_slices.ready,
            up.endpoint_slices.serving,
            up.endpoint_slices.terminating
        ),
        (Some(true), Some(true), Some(false))
    );
    let placement = &up.endpoint_slices.placements[0];
    assert_eq!(placement.address, "10.0.0.1");
    assert_eq!(
        (placement.slice.as_deref(), placement.new_slice),
        (None, Some(1))
    );
    assert_eq!(placement.ports, vec!["http:8080/TCP".to_owned()]);
    assert_eq!(verdict(&r, "warming").verdict, Verdict::NotReady);
    assert_eq!(verdict(&r, "warming").endpoints.ready, Some(false));
    let leaving = verdict(&r, "leaving");
    assert_eq!(leaving.verdict, Verdict::Terminating);
    assert_eq!(leaving.endpoint_slices.serving, Some(true));
    assert!(
        leaving.why.starts_with("being deleted, still serving"),
        "{}",
        leaving.why
    );
}

#[test]
fn rule_4_2_endpoints_leave_terminating_pods_out() {
    let s = snapshot(
        vec![web().build()],
        vec![
            pod("leaving", "web")
                .ip("10.0.0.3")
                .ready()
                .terminating()
                .build(),
        ],
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain(&s, "web");
    let v = verdict(&r, "leaving");
    assert_eq!(v.endpoint_slices.state, State::In);
    assert_eq!(endpoints_out(v), &Reason::Terminating);
    assert!(v.why.contains("Endpoints: being deleted"), "{}", v.why);
}

#[test]
fn rule_1_3_named_target_port_not_declared() {
    let s = snapshot(
        vec![svc("web").named_port("http", 80, "http").build()],
        vec![
            pod("good", "web")
                .ip("10.0.0.1")
                .ready()
                .container_port("http", 8080)
                .build(),
            pod("bad", "web")
                .ip("10.0.0.2")
                .ready()
                .container_port("web", 9090)
                .build(),
        ],
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain(&s, "web");
    assert_eq!(verdict(&r, "good").ports[0].resolved, Some(8080));
    let bad = verdict(&r, "bad");
    let missing = vec![MissingPort {
        service_port: "http".into(),
        target_port: "http".into(),
        protocol: "TCP".into(),
        container_ports: vec!["web:9090/TCP".into()],
    }];
    // EndpointSlices keep it, in a slice without the port; Endpoints drop it.
    assert_eq!(bad.endpoint_slices.state, State::In);
    assert!(bad.endpoint_slices.placements[0].ports.is_empty());
    assert!(
        bad.endpoint_slices.notes.contains(&Note::MissingPorts {
            missing: missing.clone()
        }),
        "{bad:#?}"
    );
    assert_eq!(endpoints_out(bad), &Reason::NoPortResolved { missing });
    assert!(bad.why.contains("declares web:9090/TCP"), "{}", bad.why);
}

#[test]
fn rule_4_2_service_without_ports_publishes_no_endpoints_address() {
    let s = snapshot(
        vec![svc("web").build()],
        vec![pod("a", "web").ip("10.0.0.1").ready().build()],
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain(&s, "web");
    let v = verdict(&r, "a");
    assert_eq!(v.endpoint_slices.state, State::In);
    assert_eq!(endpoints_out(v), &Reason::ServiceHasNoPorts);
}

#[test]
fn rule_2_4_publish_not_ready_addresses_effects() {
    let s = snapshot(
        vec![web().publish_not_ready().build()],
        vec![
            pod("warming", "web").ip("10.0.0.1").not_ready().build(),
            pod("lost", "web")
                .ip("10.0.0.2")
                .ready()
                .node("gone")
                .build(),
            pod("leaving", "web")
                .ip("10.0.0.3")
                .ready()
                .terminating()
                .build(),
        ],
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain(&s, "web");
    assert!(r.publish_not_ready_addresses);
    let warming = verdict(&r, "warming");
    assert_eq!(warming.verdict, Verdict::Ready);
    assert_eq!(warming.endpoint_slices.serving, Some(false));
    assert!(
        warming
            .endpoint_slices
            .notes
            .contains(&Note::PublishedNotReady)
    );
    assert!(warming.endpoints.notes.contains(&Note::PublishedNotReady));
    assert_eq!(warming.endpoints.ready, Some(true));
    let lost = verdict(&r, "lost");
    assert_eq!(lost.endpoint_slices.state, State::In);
    assert!(
        lost.endpoint_slices
            .notes
            .contains(&Note::NodeMissingTolerated {
                node: "gone".into()
            }),
        "{lost:#?}"
    );
    assert_eq!(r.endpoint_slices.sync_error, None);
    let leaving = verdict(&r, "leaving");
    assert_eq!(leaving.endpoints.state, State::In);
    assert!(
        leaving
            .endpoints
            .notes
            .contains(&Note::PublishedTerminating)
    );
}

// --- the 1000-address cap ---------------------------------------------------

fn many(ready: usize, not_ready: usize) -> Vec<Pod> {
    (0..ready + not_ready)
        .map(|i| {
            let b = pod(&format!("p{i:04}"), "web").ip(&ipv4_nth(i + 1));
            if i < ready { b.ready() } else { b.not_ready() }.build()
        })
        .collect()
}

#[test]
fn rule_4_3_cap_drops_not_ready_addresses_first() {
    let s = snapshot(
        vec![web().build()],
        many(998, 5),
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain(&s, "web");
    assert!(r.endpoints.truncated);
    assert_eq!(r.endpoints.wanted, 1003);
    let row = &r.endpoints.subsets[0];
    assert_eq!((row.ready.kept, row.ready.wanted), (998, 998));
    assert_eq!((row.not_ready.kept, row.not_ready.wanted), (2, 5));
    let dropped: Vec<&PodVerdict> = r
        .pods
        .iter()
        .filter(|p| matches!(p.endpoints.reason, Some(Reason::OverCapacity { .. })))
        .collect();
    assert_eq!(dropped.len(), 3);
    for p in &dropped {
        let Some(Reason::OverCapacity { dropped }) = &p.endpoints.reason else {
            unreachable!("filtered above");
        };
        assert!(!dropped[0].ready && dropped[0].kept == 2 && dropped[0].wanted == 5);
        // The slices have no cap.
        assert_eq!(p.endpoint_slices.state, State::In);
    }
}

#[test]
fn rule_4_3_cap_shares_1000_over_ready_addresses_when_they_exceed_it() {
    let s = snapshot(
        vec![web().build()],
        many(1002, 1),
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain(&s, "web");
    let out: Vec<&Reason> = r
        .pods
        .iter()
        .filter_map(|p| p.endpoints.reason.as_ref())
        .collect();
    assert_eq!(out.len(), 3, "two ready and the not-ready one");
    assert!(
        out.iter()
            .all(|reason| matches!(reason, Reason::OverCapacity { .. }))
    );
    assert_eq!(r.endpoints.subsets[0].ready.kept, 1000);
    assert_eq!(r.endpoints.subsets[0].not_ready.kept, 0);
}

// --- slices and agreement with the plan --------------------------------------

/// A bit of everything, for the agreement checks.
fn mixed() -> Snapshot {
    snapshot(
        vec![svc("web").named_port("http", 80, "http").build()],
        vec![
            pod("a", "web")
                .ip("10.0.0.1")
                .ready()
                .container_port("http", 8080)
                .build(),
            pod("b", "web")
                .ip("10.0.0.2")
                .not_ready()
                .container_port("http", 8081)
                .build(),
            pod("c", "web")
                .ip("10.0.0.3")
                .ready()
                .terminating()
                .container_port("http", 8080)
                .build(),
            pod("d", "web").ip("10.0.0.4").ready().build(),
            pod("e", "web")
                .ip("fd00::5")
                .ready()
                .container_port("http", 8080)
                .build(),
            pod("f", "web").ready().container_port("http", 8080).build(),
            pod("g", "web")
                .ip("10.0.0.7")
                .phase("Failed")
                .container_port("http", 8080)
                .build(),
            pod("h", "web")
                .ip("10.0.0.8")
                .ready()
                .node("gone")
                .container_port("http", 8080)
                .build(),
            pod("i", "api").ip("10.0.0.9").ready().build(),
        ],
        vec![node("node-a", Some("zone-a"))],
    )
}

fn slice_targets(slices: &[Arc<EndpointSlice>]) -> Vec<String> {
    let mut out: Vec<String> = slices
        .iter()
        .flat_map(|s| s.endpoints().iter())
        .filter_map(|e| e.target_ref.as_ref()?.name.clone())
        .collect();
    out.sort();
    out
}

#[test]
fn verdicts_agree_with_the_slices_the_plan_writes() {
    let s = mixed();
    let r = explain(&s, "web");
    let key = Key {
        namespace: "default".into(),
        name: "web".into(),
    };
    let service = Arc::clone(&s.services[&key]);
    let pods = s.pods_in("default");
    let SliceOutcome::Planned(plan) = endpointslice::reconcile(&Inputs {
        service: &service,
        pods: &pods,
        nodes: &s.nodes,
        existing: &[],
        trigger_time: None,
        max_endpoints_per_slice: 100,
    }) else {
        panic!("skipped")
    };
    let written = apply_plan(&[], &plan);
    let mut explained_in: Vec<String> = r
        .pods
        .iter()
        .filter(|p| p.endpoint_slices.is_in())
        .map(|p| p.pod.clone())
        .collect();
    explained_in.sort();
    assert_eq!(explained_in, slice_targets(&written));

    // Re-explained over the written slices: in sync, each Pod in a named slice.
    let again = explain(&with_slices(s, written.clone()), "web");
    assert!(
        again.endpoint_slices.in_sync,
        "{:#?}",
        again.endpoint_slices
    );
    assert!(
        again
            .endpoint_slices
            .slices
            .iter()
            .all(|row| row.write == Write::Unchanged)
    );
    let a = verdict(&again, "a");
    let name = a.endpoint_slices.placements[0]
        .slice
        .clone()
        .expect("named");
    assert!(
        written
            .iter()
            .any(|w| w.metadata.name.as_ref() == Some(&name))
    );
}

#[test]
fn verdicts_agree_with_the_endpoints_object_the_plan_writes() {
    let s = mixed();
    let r = explain(&s, "web");
    let key = Key {
        namespace: "default".into(),
        name: "web".into(),
    };
    let pods = s.pods_in("default");
    let eps::Outcome::Planned(plan) = eps::reconcile(&eps::Inputs {
        namespace: "default",
        name: "web",
        service: Some(&s.services[&key]),
        pods: &pods,
        existing: None,
        trigger_time: None,
    }) else {
        panic!("skipped")
    };
    let Some(EndpointsWrite::Create(object)) = plan.writes.first() else {
        panic!("no create: {plan:?}")
    };
    let mut listed: Vec<(String, bool)> = Vec::new();
    for subset in object.subsets.iter().flatten() {
        for (list, ready) in [
            (&subset.addresses, true),
            (&subset.not_ready_addresses, false),
        ] {
            for a in list.iter().flatten() {
                let name = a
                    .target_ref
                    .as_ref()
                    .and_then(|t| t.name.clone())
                    .unwrap_or_default();
                listed.push((name, ready));
            }
        }
    }
    listed.sort();
    listed.dedup();
    let mut explained: Vec<(String, bool)> = r
        .pods
        .iter()
        .filter(|p| p.endpoints.is_in())
        .map(|p| (p.pod.clone(), p.endpoints.ready == Some(true)))
        .collect();
    explained.sort();
    assert_eq!(explained, listed);
    assert_eq!(r.endpoints.write, "create");
}

// --- topology hints ---------------------------------------------------------

fn zoned_nodes(zones: &[(&str, &str)]) -> Vec<Node> {
    zones
        .iter()
        .map(|(zone, cpu)| cpu_node(&format!("node-{zone}"), Some(zone), Some(cpu)))
        .collect()
}

/// `n` ready Pods spread over `zones` in turn.
fn spread(n: usize, zones: &[&str]) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            pod(&format!("p{i:03}"), "web")
                .ip(&ipv4_nth(i + 1))
                .ready()
                .node(&format!("node-{}", zones[i % zones.len()]))
                .build()
        })
        .collect()
}

fn auto() -> crate::core::fixtures::SvcBuilder {
    web().annotation(ANNOTATION_TOPOLOGY_MODE, "Auto")
}

#[test]
fn rule_3_1_topology_mode_annotation_decides_and_wins_over_traffic_distribution() {
    let mut service = auto().build();
    if let Some(spec) = service.spec.as_mut() {
        spec.traffic_distribution = Some("PreferClose".into());
    }
    let s = snapshot(vec![service], vec![], vec![]);
    let m = explain(&s, "web").topology_hints.mode;
    assert_eq!(m.mode, "Auto");
    assert_eq!(
        m.decided_by,
        format!("annotation {ANNOTATION_TOPOLOGY_MODE}=Auto")
    );
    assert!(
        m.ignored[0].contains("trafficDistribution=PreferClose"),
        "{m:?}"
    );
}

#[test]
fn rule_3_1_legacy_annotation_wins_even_when_it_disables() {
    let s = snapshot(
        vec![
            auto()
                .annotation(ANNOTATION_TOPOLOGY_AWARE_HINTS, "Disabled")
                .build(),
        ],
        vec![],
        vec![],
    );
    let m = explain(&s, "web").topology_hints.mode;
    assert_eq!(m.mode, "None");
    assert!(
        m.ignored[0].contains(ANNOTATION_TOPOLOGY_AWARE_HINTS) && m.ignored[0].contains("Disabled"),
        "{m:?}"
    );
}

#[test]
fn rule_3_2_traffic_distribution_gives_same_zone_hints() {
    let mut service = web().build();
    if let Some(spec) = service.spec.as_mut() {
        spec.traffic_distribution = Some("PreferSameNode".into());
    }
    let s = snapshot(
        vec![service],
        spread(3, &["a", "b"]),
        zoned_nodes(&[("a", "4"), ("b", "4")]),
    );
    let h = explain(&s, "web").topology_hints;
    assert_eq!(h.mode.mode, "PreferSameNode");
    assert_eq!(h.passes[0].outcome, Outcome::SameZone { same_node: true });
    assert_eq!(h.passes[0].hinted_after, 3);
}

#[test]
fn rule_3_3_2_too_few_endpoints_switch_hints_off() {
    let s = snapshot(
        vec![auto().build()],
        spread(1, &["a"]),
        zoned_nodes(&[("a", "4"), ("b", "4")]),
    );
    let r = explain(&s, "web");
    let Outcome::SafeguardTripped {
        safeguard, message, ..
    } = &r.topology_hints.passes[0].outcome
    else {
        panic!("{:?}", r.topology_hints)
    };
    assert_eq!(safeguard, "InsufficientEndpoints");
    assert_eq!(
        message,
        "Insufficient number of endpoints (1 endpoints, 2 zones)"
    );
    assert!(
        r.endpoint_slices
            .events
            .iter()
            .any(|e| e.contains("TopologyAwareHintsDisabled")),
        "{:?}",
        r.endpoint_slices.events
    );
}

#[test]
fn rule_3_3_2_overload_threshold_with_the_numbers() {
    let s = snapshot(
        vec![auto().build()],
        spread(4, &["a", "b", "c"]),
        zoned_nodes(&[("a", "4"), ("b", "4"), ("c", "4")]),
    );
    let r = explain(&s, "web");
    let Outcome::SafeguardTripped {
        safeguard, zones, ..
    } = &r.topology_hints.passes[0].outcome
    else {
        panic!("{:?}", r.topology_hints)
    };
    assert_eq!(safeguard, "MinAllocationExceedsThreshold");
    assert_eq!(zones.len(), 3);
    for z in zones {
        assert!((z.desired - 4.0 / 3.0).abs() < 1e-9, "{z:?}");
        assert_eq!(z.minimum, 2);
    }
}

#[test]
fn rule_3_3_1_node_without_zone_or_cpu_is_named() {
    let mut nodes = zoned_nodes(&[("a", "4"), ("b", "4")]);
    nodes.push(cpu_node("node-c", None, Some("4")));
    let s = snapshot(vec![auto().build()], spread(6, &["a", "b"]), nodes);
    let r = explain(&s, "web");
    let Outcome::SafeguardTripped {
        safeguard, node, ..
    } = &r.topology_hints.passes[0].outcome
    else {
        panic!("{:?}", r.topology_hints)
    };
    assert_eq!(safeguard, "InsufficientNodeInfo");
    assert_eq!(node.as_deref(), Some("node-c"));
}

#[test]
fn rule_3_3_4_endpoint_without_zone_switches_hints_off() {
    let mut nodes = zoned_nodes(&[("a", "4"), ("b", "4")]);
    // Not ready: left out of the CPU accounting, but its Pod is an endpoint.
    nodes.push(with_ready(
        cpu_node("node-x", None, Some("4")),
        Some("False"),
    ));
    let mut pods = spread(9, &["a", "b"]);
    pods.push(
        pod("zoneless", "web")
            .ip("10.9.9.9")
            .ready()
            .node("node-x")
            .build(),
    );
    let s = snapshot(vec![auto().build()], pods, nodes);
    let r = explain(&s, "web");
    let Outcome::SafeguardTripped {
        safeguard,
        endpoints_without_zone,
        ..
    } = &r.topology_hints.passes[0].outcome
    else {
        panic!("{:?}", r.topology_hints)
    };
    assert_eq!(safeguard, "NoZoneSpecified");
    assert_eq!(endpoints_without_zone, &vec!["zoneless".to_owned()]);
}

#[test]
fn rule_3_3_hints_allocated_per_zone() {
    let s = snapshot(
        vec![auto().build()],
        spread(10, &["a", "b"]),
        zoned_nodes(&[("a", "4"), ("b", "4")]),
    );
    let h = explain(&s, "web").topology_hints;
    let Outcome::Allocated { zones } = &h.passes[0].outcome else {
        panic!("{h:?}")
    };
    assert_eq!(
        zones
            .iter()
            .map(|z| (z.zone.as_str(), z.hints))
            .collect::<Vec<_>>(),
        vec![("a", Some(5)), ("b", Some(5))]
    );
    assert_eq!(h.passes[0].hinted_after, 10);
}

/// The slices a first sync writes, with hints as `policy` assigns them.
fn hinted_slices(s: &Snapshot) -> Vec<Arc<EndpointSlice>> {
    let key = Key {
        namespace: "default".into(),
        name: "web".into(),
    };
    let pods = s.pods_in("default");
    let mut policy = TopologyPolicy::from_nodes(s.nodes.values().map(Arc::as_ref));
    let SliceOutcome::Planned(plan) = endpointslice::reconcile_with_hints(
        &Inputs {
            service: &s.services[&key],
            pods: &pods,
            nodes: &s.nodes,
            existing: &[],
            trigger_time: None,
            max_endpoints_per_slice: 100,
        },
        &mut policy,
    ) else {
        panic!("skipped")
    };
    apply_plan(&[], &plan)
}

#[test]
fn rule_2_11_hints_are_removed_without_a_mode() {
    let nodes = zoned_nodes(&[("a", "4"), ("b", "4")]);
    let hinted = snapshot(vec![auto().build()], spread(10, &["a", "b"]), nodes.clone());
    let stored = hinted_slices(&hinted);
    let s = with_slices(
        snapshot(vec![web().build()], spread(10, &["a", "b"]), nodes),
        stored,
    );
    let r = explain(&s, "web");
    let pass = &r.topology_hints.passes[0];
    assert_eq!(pass.outcome, Outcome::Off { removed: 10 });
    assert_eq!((pass.hinted_before, pass.hinted_after), (10, 0));
    let row = &r.endpoint_slices.slices[0];
    assert_eq!(row.write, Write::Update);
    assert!(
        row.changes
            .iter()
            .any(|c| c == "hints changed on 10 endpoints"),
        "{row:?}"
    );
}

#[test]
fn rule_3_3_6_stored_hints_over_the_threshold_are_reported_with_the_numbers() {
    // Hints made for equal zones, then zone a gets nine times the CPU.
    let hinted = snapshot(
        vec![auto().build()],
        spread(10, &["a", "b"]),
        zoned_nodes(&[("a", "4"), ("b", "4")]),
    );
    let stored = hinted_slices(&hinted);
    let s = with_slices(
        snapshot(
            vec![auto().build()],
            spread(10, &["a", "b"]),
            zoned_nodes(&[("a", "36"), ("b", "4")]),
        ),
        stored,
    );
    let h = explain(&s, "web").topology_hints;
    let zones = h.passes[0].stored_overloaded.as_ref().expect("overloaded");
    let a = zones.iter().find(|z| z.zone == "a").expect("zone a");
    assert_eq!((a.hints, a.minimum), (Some(5), 8));
}

// --- explain pod --------------------------------------------------------------

#[test]
fn explain_pod_lists_selecting_services_then_near_misses() {
    let s = snapshot(
        vec![
            web().build(),
            svc("api").port("grpc", 9000, 9000).build(),
            svc("db").build(),
        ],
        vec![pod("w", "web").ip("10.0.0.1").not_ready().build()],
        vec![node("node-a", Some("zone-a"))],
    );
    let r = explain_pod(&s, "default", "w", 100).expect("the Pod exists");
    let listed: Vec<(&str, bool, Verdict)> = r
        .services
        .iter()
        .map(|v| (v.service.as_str(), v.selected, v.verdict.verdict))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("default/web", true, Verdict::NotReady),
            ("default/api", false, Verdict::Out),
            ("default/db", false, Verdict::Out),
        ]
    );
    // The same verdict `explain service` gives.
    assert_eq!(&r.services[0].verdict, verdict(&explain(&s, "web"), "w"));
    assert!(explain_pod(&s, "default", "nope", 100).is_none());
}

// --- explain ip / nodeport ----------------------------------------------------

fn config() -> AllocatorConfig {
    AllocatorConfig::from_flags("10.96.0.0/16", "30000-30999").expect("valid ranges")
}

fn world(services: Vec<Service>) -> World {
    let mut w = World::empty(Source::Dump(vec!["t.yaml".into()]));
    w.snapshot = snapshot(services, vec![], vec![]);
    w
}

fn node_port_svc(name: &str, port: i32) -> Service {
    let mut s = svc(name)
        .cluster_ip("10.96.0.20")
        .port("http", 80, 8080)
        .build();
    if let Some(spec) = s.spec.as_mut() {
        spec.type_ = Some("NodePort".into());
        spec.cluster_ips = Some(vec!["10.96.0.20".into()]);
        if let Some(p) = spec.ports.as_mut().and_then(|p| p.first_mut()) {
            p.node_port = Some(port);
        }
    }
    s
}

#[test]
fn ip_held_by_a_service_is_refused_with_upstreams_message() {
    let mut w = world(vec![web().cluster_ip("10.96.0.10").build()]);
    let mut address = IPAddress::default();
    address.metadata.name = Some("10.96.0.10".into());
    address.spec = IPAddressSpec {
        parent_ref: ParentReference {
            group: Some(String::new()),
            resource: "services".into(),
            namespace: Some("default".into()),
            name: "web".into(),
        },
    };
    w.snapshot
        .ip_addresses
        .insert("10.96.0.10".into(), std::sync::Arc::new(address));
    let r = explain_ip(&w, &config(), "10.96.0.10".parse().expect("ip")).expect("ranges");
    let holders: Vec<(&str, &str)> = r
        .holders
        .iter()
        .map(|h| (h.kind, h.name.as_str()))
        .collect();
    assert_eq!(
        holders,
        vec![("IPAddress", "10.96.0.10"), ("Service", "default/web")]
    );
    assert!(!r.webhook.allowed);
    assert_eq!(r.webhook.code, Some(422));
    assert_eq!(
        r.webhook.message.as_deref(),
        Some(
            "Service \"explain-probe\" is invalid: spec.clusterIPs: Invalid value: [\"10.96.0.10\"]: failed to allocate IP 10.96.0.10: provided IP is already allocated"
        )
    );
    assert_eq!(
        (r.range.range.as_deref(), r.range.band),
        (Some("10.96.0.0/16"), "static")
    );
}

#[test]
fn free_ip_in_the_dynamic_band_is_admitted_with_the_band_warning() {
    let r =
        explain_ip(&world(vec![]), &config(), "10.96.50.5".parse().expect("ip")).expect("ranges");
    assert!(r.holders.is_empty());
    assert_eq!(r.range.band, "dynamic");
    assert!(r.webhook.allowed, "{:?}", r.webhook);
    assert!(
        r.webhook.warnings[0].contains("is in the dynamic band of 10.96.0.0/16"),
        "{:?}",
        r.webhook
    );
}

#[test]
fn ip_outside_every_range_and_network_address_are_refused() {
    let r = explain_ip(&world(vec![]), &config(), "10.1.0.1".parse().expect("ip")).expect("ranges");
    assert_eq!(r.range.band, "none");
    assert!(!r.webhook.allowed);
    let m = r.webhook.message.unwrap_or_default();
    assert!(m.contains("failed to allocate IP 10.1.0.1"), "{m}");
    let r =
        explain_ip(&world(vec![]), &config(), "10.96.0.0".parse().expect("ip")).expect("ranges");
    assert!(
        r.range
            .detail
            .starts_with("the network address of 10.96.0.0/16"),
        "{:?}",
        r.range
    );
    assert!(!r.webhook.allowed);
}

#[test]
fn nodeport_held_by_a_service_and_its_bound_claim() {
    let service = node_port_svc("web", 30080);
    let mut w = world(vec![service]);
    let mut claim =
        AllocationClaim::for_value(Claim::NodePort(30080), &ServiceRef::named("default", "web"));
    claim.metadata.uid = Some("claim-uid".into());
    claim.metadata.creation_timestamp = w
        .snapshot
        .services
        .values()
        .next()
        .and_then(|s| s.metadata.creation_timestamp.clone());
    w.claims.insert("nodeport-30080".into(), claim);
    let r = explain_node_port(&w, &config(), 30080).expect("ranges");
    let holders: Vec<(&str, &str)> = r
        .holders
        .iter()
        .map(|h| (h.kind, h.name.as_str()))
        .collect();
    assert_eq!(
        holders,
        vec![
            ("AllocationClaim", "nodeport-30080"),
            ("Service", "default/web")
        ]
    );
    assert!(
        r.holders[0]
            .detail
            .contains("bound to the Service object with uid uid-svc-web"),
        "{:?}",
        r.holders
    );
    assert!(r.holders[1].detail.contains("spec.ports[0].nodePort"));
    // A 1000-port range keeps 31 ports (30000-30030) for hand picks.
    assert_eq!(r.range.band, "dynamic");
    assert_eq!(
        r.webhook.message.as_deref(),
        Some(
            "Service \"explain-probe\" is invalid: spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated"
        )
    );
}

#[test]
fn nodeport_claimed_without_a_service_is_in_flight() {
    let mut w = world(vec![]);
    let claim = AllocationClaim::for_value(
        Claim::NodePort(30500),
        &ServiceRef::named("default", "soon"),
    );
    w.claims.insert("nodeport-30500".into(), claim);
    let r = explain_node_port(&w, &config(), 30500).expect("ranges");
    assert_eq!(r.holders.len(), 1);
    assert_eq!(r.holders[0].service.as_deref(), Some("default/soon"));
    assert!(
        r.holders[0]
            .detail
            .contains("not bound to a stored Service"),
        "{:?}",
        r.holders
    );
    assert!(!r.webhook.allowed);
}

#[test]
fn nodeport_outside_the_range_is_refused() {
    let r = explain_node_port(&world(vec![]), &config(), 31000).expect("ranges");
    assert_eq!(r.range.band, "none");
    let m = r.webhook.message.unwrap_or_default();
    assert!(
        m.contains(
            "provided port is not in the valid range. The range of valid ports is 30000-30999"
        ),
        "{m}"
    );
}

// --- rendering ------------------------------------------------------------------

#[test]
fn every_form_renders_in_every_format() {
    use crate::cli::ExplainFormat;
    let s = mixed();
    let reports = [
        super::Report::Service(Box::new(explain(&s, "web"))),
        super::Report::Pod(Box::new(explain_pod(&s, "default", "a", 100).expect("pod"))),
        super::Report::Value(Box::new(
            explain_node_port(&world(vec![]), &config(), 30001).expect("ranges"),
        )),
    ];
    for r in &reports {
        for f in [
            ExplainFormat::Text,
            ExplainFormat::Json,
            ExplainFormat::Yaml,
        ] {
            let out = r.render(f).expect("renders");
            assert!(!out.is_empty());
        }
        let json: serde_json::Value =
            serde_json::from_str(&r.render(ExplainFormat::Json).expect("json"))
                .expect("valid JSON");
        let yaml: serde_json::Value =
            serde_saphyr::from_str(&r.render(ExplainFormat::Yaml).expect("yaml"))
                .expect("valid YAML");
        assert_eq!(json, yaml, "YAML and JSON say the same");
    }
}
