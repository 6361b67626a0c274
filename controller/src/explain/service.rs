//! `explain service`: one Service, as the controllers see it.
//!
//! Runs the EndpointSlice reconciler once over the snapshot exactly as `plan`
//! does (same inputs, same topology policy built from the same Nodes, same
//! trigger time), keeping the topology decision, then reads every verdict
//! off the controllers' own per-Pod decisions ([`super::verdict`]), the slices
//! off the plan ([`super::slices`]), the Endpoints object off its reconciler
//! ([`super::legacy`]) and the hints off the recorded decision
//! ([`super::hints`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use crate::core::endpoints::desired::AddressRules;
use crate::core::endpointslice::desired::{address_types, publishes_not_ready, selected_pods};
use crate::core::endpointslice::{self, Inputs, Outcome, SkipReason, is_managed_slice_of};
use crate::core::selector::selector_matches_pod;
use crate::core::topology::allocation::endpoint_ready;
use crate::core::trigger_time::TriggerTimeTracker;
use crate::dump::snapshot::{Key, Snapshot};

use super::hints::{self, HintsInputs, HintsReport, Recording};
use super::legacy::{self, CapOutcome, EndpointsReport};
use super::ports::port_label;
use super::slices::{self, FinalSlice, SlicesReport};
use super::verdict::{self, Membership, PodVerdict, Selection, ServiceRules, State, Verdict};

/// Everything `explain service` says.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceReport {
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<BTreeMap<String, String>>,
    /// `name port/protocol -> targetPort`.
    pub ports: Vec<String>,
    /// The address types the EndpointSlice controller serves.
    pub address_types: Vec<String>,
    pub publish_not_ready_addresses: bool,
    /// Selected Pods first, then near misses, each by name.
    pub pods: Vec<PodVerdict>,
    pub endpoint_slices: SlicesReport,
    pub endpoints: EndpointsReport,
    pub topology_hints: HintsReport,
}

impl ServiceReport {
    /// The verdict of Pod `name`, if the Service selects or nearly selects it.
    pub fn pod(&self, name: &str) -> Option<&PodVerdict> {
        self.pods.iter().find(|p| p.pod == name)
    }
}

fn port_line(service: &Service) -> Vec<String> {
    service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|p| {
            let target = match &p.target_port {
                Some(IntOrString::Int(n)) => n.to_string(),
                Some(IntOrString::String(s)) => s.clone(),
                None => p.port.to_string(),
            };
            format!(
                "{} -> {target}",
                port_label(p.name.as_deref(), Some(p.port), p.protocol.as_deref())
            )
        })
        .collect()
}

/// The Pods `plan` computes the trigger time over (those the selector matches).
fn trigger_pods(service: &Service, pods: &[Arc<Pod>]) -> Vec<Arc<Pod>> {
    let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref());
    pods.iter()
        .filter(|p| selector_matches_pod(selector, p.as_ref()))
        .cloned()
        .collect()
}

/// Explains Service `namespace/name`; `None` when the snapshot has no such
/// Service.
pub fn explain_service(
    snapshot: &Snapshot,
    namespace: &str,
    name: &str,
    max_endpoints_per_slice: usize,
) -> Option<ServiceReport> {
    let key = Key {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    let service: &Service = snapshot.services.get(&key)?;
    let pods = snapshot.pods_in(namespace);
    let existing = snapshot.endpoint_slices_in(namespace);

    // The EndpointSlice controller's first sync, as `plan` runs it.
    let trigger_time =
        TriggerTimeTracker::default().compute(service, &trigger_pods(service, &pods));
    let (accounting, mut policy) = hints::policy_for(snapshot.nodes.values().map(Arc::as_ref));
    let ratios = policy.ratios().cloned();
    let mut recording = Recording {
        policy: &mut policy,
        decisions: Vec::new(),
    };
    let inputs = Inputs {
        service,
        pods: &pods,
        nodes: &snapshot.nodes,
        existing: &existing,
        trigger_time,
        max_endpoints_per_slice,
    };
    let outcome = endpointslice::reconcile_with_hints(&inputs, &mut recording);
    let decisions = std::mem::take(&mut recording.decisions);
    let (slice_report, finals) = match &outcome {
        Outcome::Skipped(reason) => (
            SlicesReport::skipped(match reason {
                SkipReason::ExternalName => {
                    "an ExternalName Service has no endpoints: its slices are left alone"
                }
                SkipReason::NoSelector => {
                    "no selector: its slices are not this controller's (the mirroring controller copies a hand-written Endpoints object)"
                }
            }),
            Vec::new(),
        ),
        Outcome::Planned(plan) => slices::summarize(service, &existing, plan),
    };

    let selected = selected_pods(service, &pods);
    let (endpoints_report, cap) = legacy::explain_endpoints(
        service,
        &selected,
        &pods,
        snapshot.endpoints.get(&key).map(Arc::as_ref),
        trigger_time,
    );
    let rules = ServiceRules {
        service,
        families: address_types(service),
        publish_not_ready: publishes_not_ready(service),
        nodes: &snapshot.nodes,
        addresses: AddressRules::of(service),
    };
    let handled = matches!(outcome, Outcome::Planned(_));
    let pod_verdicts = verdicts(&rules, &pods, handled, &finals, &cap);

    let stored: Vec<&EndpointSlice> = existing
        .iter()
        .map(Arc::as_ref)
        .filter(|s| is_managed_slice_of(s, service))
        .collect();
    let hints_report = hints::explain_hints(
        &HintsInputs {
            service,
            accounting: &accounting,
            ratios: ratios.as_ref(),
            stored: &stored,
            after: &finals,
            pods_without_zone: &pods_without_zone(&finals),
        },
        decisions,
    );

    Some(ServiceReport {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        selector: service.spec.as_ref().and_then(|s| s.selector.clone()),
        ports: port_line(service),
        address_types: rules
            .families
            .iter()
            .map(|f| f.address_type().to_owned())
            .collect(),
        publish_not_ready_addresses: rules.publish_not_ready,
        pods: pod_verdicts,
        endpoint_slices: slice_report,
        endpoints: endpoints_report,
        topology_hints: hints_report,
    })
}

/// The verdict of every Pod the Service selects, then of every near miss.
fn verdicts(
    rules: &ServiceRules<'_>,
    pods: &[Arc<Pod>],
    handled: bool,
    finals: &[FinalSlice],
    cap: &CapOutcome,
) -> Vec<PodVerdict> {
    let mut selected = Vec::new();
    let mut near = Vec::new();
    for p in pods {
        match verdict::selection(rules.service, p) {
            Selection::Selected if handled => {
                selected.push(selected_verdict(rules, p, finals, cap))
            }
            Selection::Selected | Selection::Unrelated => {}
            Selection::NearMiss(reason) => near.push(PodVerdict {
                pod: p.metadata.name.clone().unwrap_or_default(),
                verdict: Verdict::Out,
                why: reason.message(),
                endpoint_slices: out(reason.clone()),
                endpoints: out(reason),
                ports: Vec::new(),
            }),
        }
    }
    selected.extend(near);
    selected
}

fn out(reason: verdict::Reason) -> Membership {
    Membership {
        state: State::Out,
        reason: Some(reason),
        ready: None,
        serving: None,
        terminating: None,
        placements: Vec::new(),
        notes: Vec::new(),
    }
}

fn selected_verdict(
    rules: &ServiceRules<'_>,
    p: &Pod,
    finals: &[FinalSlice],
    cap: &CapOutcome,
) -> PodVerdict {
    let (ports, missing) = verdict::ports_on_pod(rules.service, p);
    let slices = verdict::slice_membership(rules, p, &missing, finals);
    let endpoints = verdict::endpoints_membership(rules, p, &missing, cap);
    let (verdict, why) = verdict::summarize(&slices, &endpoints);
    PodVerdict {
        pod: p.metadata.name.clone().unwrap_or_default(),
        verdict,
        why,
        endpoint_slices: slices,
        endpoints,
        ports,
    }
}

/// Per address type, the Pods whose ready endpoints have no zone.
fn pods_without_zone(finals: &[FinalSlice]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in finals {
        for e in s.endpoints.iter().filter(|e| endpoint_ready(e)) {
            if e.zone.as_deref().is_none_or(str::is_empty) {
                let pod = e
                    .target_ref
                    .as_ref()
                    .and_then(|r| r.name.clone())
                    .unwrap_or_else(|| e.addresses.join(","));
                out.entry(s.address_type.clone()).or_default().push(pod);
            }
        }
    }
    out
}
