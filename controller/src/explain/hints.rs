//! Topology hints: which mode applies to a Service, and for each address type
//! what the controller decided — hints per zone, same-zone hints, hints
//! removed, or the safeguard that switched them off, with its numbers.
//!
//! The decision is the one the reconciler makes: [`Recording`] passes every
//! pass through [`TopologyPolicy::apply_and_decide`] (the policy `plan` and
//! `run` use) and keeps what it returns. The numbers come from the same
//! functions: [`nodes::account`] (the Node walk that can find a Node without
//! zone or CPU), [`allocation::zone_share`] (each zone's desired and minimum
//! share) and [`cache::service_overloaded`] (the overload re-check of stored
//! hints).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use serde::Serialize;

use super::slices::FinalSlice;
use crate::core::endpointslice::hints::{HintsPolicy, PassSlices};
use crate::core::event::PlannedEvent;
use crate::core::slice_endpoints::SliceEndpoints;
use crate::core::topology::allocation::{self, Failure, endpoint_ready};
use crate::core::topology::cache::{self, ZoneCounts};
use crate::core::topology::nodes::{self, NodeAccounting, ZoneRatios};
use crate::core::topology::traffic_distribution::TrafficDistribution;
use crate::core::topology::{
    HintsDecision, OVERLOAD_THRESHOLD, TopologyPolicy, hints_annotation, hints_enabled,
};

/// A [`HintsPolicy`] that runs the real policy and keeps its decision per
/// address type.
#[derive(Debug)]
pub struct Recording<'p> {
    pub policy: &'p mut TopologyPolicy,
    pub decisions: Vec<(String, HintsDecision)>,
}

impl HintsPolicy for Recording<'_> {
    fn apply(
        &mut self,
        service: &Service,
        pass: &mut PassSlices<'_>,
        events: &mut Vec<PlannedEvent>,
    ) {
        let decision = self.policy.apply_and_decide(service, pass, events);
        self.decisions.push((pass.address_type.clone(), decision));
    }
}

/// Which hints mode applies, and what decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mode {
    /// `Auto`, `PreferClose`, `PreferSameZone`, `PreferSameNode` or `None`.
    pub mode: String,
    /// What decided it, in words.
    pub decided_by: String,
    /// Settings that exist but do not count, in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<String>,
}

/// A zone's share of the endpoints, as the safeguards compute it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ZoneShare {
    pub zone: String,
    /// Share of allocatable CPU on ready worker Nodes.
    pub cpu_ratio: f64,
    /// `cpuRatio × endpoints`.
    pub desired: f64,
    /// The fewest endpoints it may get without its endpoints seeing more than
    /// 20 % overload.
    pub minimum: usize,
    /// Hints it got (or, for the overload re-check, has).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hints: Option<usize>,
}

/// The outcome for one address type.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all_fields = "camelCase")]
pub enum Outcome {
    /// Annotation `Auto`, and every safeguard passed.
    Allocated { zones: Vec<ZoneShare> },
    /// Annotation `Auto`, and a safeguard tripped: no hints, and a
    /// `TopologyAwareHintsDisabled` Warning.
    SafeguardTripped {
        safeguard: String,
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        node: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        zones: Vec<ZoneShare>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        endpoints_without_zone: Vec<String>,
    },
    /// trafficDistribution: hints to the endpoint's own zone (and Node).
    SameZone { same_node: bool },
    /// No mode: hints are removed (`removed` of them are stored today).
    Off { removed: usize },
}

/// One address type's hints.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pass {
    pub address_type: String,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Endpoints hinted in the stored slices, and after the sync.
    pub hinted_before: usize,
    pub hinted_after: usize,
    /// The stored hints fail the overload re-check (a zone has fewer than its
    /// minimum): the runtime re-syncs the Service when Nodes change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored_overloaded: Option<Vec<ZoneShare>>,
}

/// The hints part of a Service's explanation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HintsReport {
    pub mode: Mode,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub passes: Vec<Pass>,
}

/// Which mode applies (TH-3.1 precedence) and why.
pub fn mode(service: &Service) -> Mode {
    let annotation = hints_annotation(service);
    let td = service
        .spec
        .as_ref()
        .and_then(|s| s.traffic_distribution.as_deref());
    let valid_td = TrafficDistribution::of_service(service);
    let mut ignored = Vec::new();
    if hints_enabled(service) {
        let (key, value) = annotation.unwrap_or_default();
        if let Some(td) = td {
            ignored.push(format!(
                "spec.trafficDistribution={td} (the annotation wins)"
            ));
        }
        return Mode {
            mode: "Auto".to_owned(),
            decided_by: format!("annotation {key}={value}"),
            ignored,
        };
    }
    if let Some((key, value)) = annotation {
        ignored.push(format!(
            "annotation {key}={value:?} (only Auto or auto enables hints)"
        ));
    }
    match (valid_td, td) {
        (Some(v), _) => Mode {
            mode: v.as_str().to_owned(),
            decided_by: format!("spec.trafficDistribution={}", v.as_str()),
            ignored,
        },
        (None, Some(other)) => {
            ignored.push(format!(
                "spec.trafficDistribution={other} (not a value the controller knows)"
            ));
            Mode {
                mode: "None".to_owned(),
                decided_by:
                    "no topology-mode annotation set to Auto and no known trafficDistribution"
                        .to_owned(),
                ignored,
            }
        }
        (None, None) => Mode {
            mode: "None".to_owned(),
            decided_by: "no topology-mode annotation and no trafficDistribution".to_owned(),
            ignored,
        },
    }
}

fn shares(ratios: &ZoneRatios, endpoints: usize, hints: Option<&ZoneCounts>) -> Vec<ZoneShare> {
    ratios
        .iter()
        .map(|(zone, ratio)| {
            let (desired, minimum) = allocation::zone_share(ratio, endpoints);
            ZoneShare {
                zone: zone.to_owned(),
                cpu_ratio: ratio,
                desired,
                minimum,
                hints: hints.map(|h| h.get(zone).copied().unwrap_or(0)),
            }
        })
        .collect()
}

fn ready_endpoints<'s>(endpoints: impl Iterator<Item = &'s Endpoint>) -> usize {
    endpoints.filter(|e| endpoint_ready(e)).count()
}

/// Zone hints per zone in stored slices, counted as the topology cache
/// counts them (ready endpoints' `forZones`).
fn stored_zone_hints<'s>(endpoints: impl Iterator<Item = &'s Endpoint>) -> ZoneCounts {
    let mut out = ZoneCounts::new();
    for e in endpoints.filter(|e| endpoint_ready(e)) {
        for z in e
            .hints
            .as_ref()
            .and_then(|h| h.for_zones.as_ref())
            .into_iter()
            .flatten()
        {
            *out.entry(z.name.clone()).or_default() += 1;
        }
    }
    out
}

fn hinted<'s>(endpoints: impl Iterator<Item = &'s Endpoint>) -> usize {
    endpoints.filter(|e| e.hints.is_some()).count()
}

/// Inputs of [`explain_hints`] besides the decisions.
#[derive(Debug)]
pub struct HintsInputs<'a> {
    pub service: &'a Service,
    pub accounting: &'a NodeAccounting,
    pub ratios: Option<&'a ZoneRatios>,
    /// The Service's managed slices, as stored.
    pub stored: &'a [&'a EndpointSlice],
    /// The Service's slices after the sync (stored ones unchanged, updates,
    /// creates), with their endpoints.
    pub after: &'a [FinalSlice],
    /// Pods whose endpoints have no zone (their Node has no zone label).
    pub pods_without_zone: &'a BTreeMap<String, Vec<String>>,
}

/// The hints report from the recorded decisions.
pub fn explain_hints(
    inputs: &HintsInputs<'_>,
    decisions: Vec<(String, HintsDecision)>,
) -> HintsReport {
    let mut passes = Vec::with_capacity(decisions.len());
    for (address_type, decision) in decisions {
        let stored = || {
            inputs
                .stored
                .iter()
                .filter(|s| s.address_type == address_type)
                .flat_map(|s| s.endpoints().iter())
        };
        let after = || {
            inputs
                .after
                .iter()
                .filter(|s| s.address_type == address_type)
                .flat_map(|s| s.endpoints.iter())
        };
        let hinted_before = hinted(stored());
        let outcome = match decision {
            HintsDecision::Auto(Ok(allocated)) => Outcome::Allocated {
                zones: inputs
                    .ratios
                    .map(|r| shares(r, ready_endpoints(after()), Some(&allocated)))
                    .unwrap_or_default(),
            },
            HintsDecision::Auto(Err(failure)) => safeguard(inputs, &address_type, failure),
            HintsDecision::TrafficDistribution(td) => Outcome::SameZone {
                same_node: td == TrafficDistribution::PreferSameNode,
            },
            HintsDecision::Disabled => Outcome::Off {
                removed: hinted_before,
            },
        };
        let stored_hints = stored_zone_hints(stored());
        let stored_overloaded = (!stored_hints.is_empty()
            && cache::service_overloaded(&stored_hints, inputs.ratios))
        .then(|| {
            inputs
                .ratios
                .map(|r| shares(r, stored_hints.values().sum(), Some(&stored_hints)))
                .unwrap_or_default()
        });
        passes.push(Pass {
            hinted_before,
            hinted_after: hinted(after()),
            address_type,
            outcome,
            stored_overloaded,
        });
    }
    HintsReport {
        mode: mode(inputs.service),
        passes,
    }
}

fn safeguard(inputs: &HintsInputs<'_>, address_type: &str, failure: Failure) -> Outcome {
    let message = failure.message();
    let (name, node, zones, endpoints_without_zone) = match failure {
        Failure::InsufficientNodeInfo => {
            let node = match inputs.accounting {
                NodeAccounting::Insufficient { node } => Some(node.clone()),
                NodeAccounting::CpuByZone(_) => None,
            };
            let zones = inputs.accounting.milli_by_zone();
            let message = match (&node, zones.len()) {
                (Some(_), _) => None,
                (None, n) => Some(format!(
                    "ready worker Nodes with allocatable CPU are in {n} zone{} (hints need at least 2)",
                    if n == 1 { "" } else { "s" }
                )),
            };
            return Outcome::SafeguardTripped {
                safeguard: "InsufficientNodeInfo".to_owned(),
                message: match message {
                    Some(m) => format!("{} ({m})", failure.message()),
                    None => failure.message(),
                },
                node,
                zones: Vec::new(),
                endpoints_without_zone: Vec::new(),
            };
        }
        Failure::NodesReadyInOneZoneOnly => {
            ("NodesReadyInOneZoneOnly", None, Vec::new(), Vec::new())
        }
        Failure::InsufficientEndpoints { .. } => {
            ("InsufficientEndpoints", None, Vec::new(), Vec::new())
        }
        Failure::MinAllocationExceedsThreshold { endpoints, .. } => (
            "MinAllocationExceedsThreshold",
            None,
            inputs
                .ratios
                .map(|r| shares(r, endpoints, None))
                .unwrap_or_default(),
            Vec::new(),
        ),
        Failure::NoZoneSpecified => (
            "NoZoneSpecified",
            None,
            Vec::new(),
            inputs
                .pods_without_zone
                .get(address_type)
                .cloned()
                .unwrap_or_default(),
        ),
        Failure::NoAllocatedHints => ("NoAllocatedHints", None, Vec::new(), Vec::new()),
    };
    Outcome::SafeguardTripped {
        safeguard: name.to_owned(),
        message,
        node,
        zones,
        endpoints_without_zone,
    }
}

/// The threshold as people read it (`20%`).
pub fn threshold_percent() -> String {
    format!("{:.0}%", OVERLOAD_THRESHOLD * 100.0)
}

/// The Node walk and ratios for a snapshot's Nodes: what
/// [`TopologyPolicy::from_nodes`] computes, kept so the safeguards can name
/// the Node.
pub fn policy_for<'n>(
    nodes: impl IntoIterator<Item = &'n k8s_openapi::api::core::v1::Node>,
) -> (NodeAccounting, TopologyPolicy) {
    let accounting = nodes::account(nodes);
    let policy = TopologyPolicy::new(Default::default(), accounting.ratios());
    (accounting, policy)
}
