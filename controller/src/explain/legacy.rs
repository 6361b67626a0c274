//! The legacy `v1.Endpoints` object of a Service: the write the Endpoints
//! controller would make, and what its 1000-address cap drops.
//!
//! The write comes from the controller's own
//! [`reconcile`](crate::core::endpoints::reconcile). The cap is read off the
//! controller's own functions too: the canonical subsets
//! ([`desired_subsets`]) cut by [`capacity::truncate`] — the same cut
//! `reconcile` makes in one pass — so every dropped address is named with the
//! subset it was dropped from and how many of that list were kept.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointSubset, Endpoints, Pod, Service};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::core::endpoints::desired::{desired_subsets, primary_family};
use crate::core::endpoints::{self as eps, EndpointsWrite, capacity};

use super::ports::port_label;

/// The Endpoints object's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointsReport {
    /// Why the controller leaves this Service alone, if it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The one family the object carries; `None`: decided per Pod
    /// (headless without `ipFamilies`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address_type: Option<String>,
    /// Addresses the Pods offer (one per Pod and port list entry), before the cap.
    pub wanted: usize,
    /// Whether the object is cut to 1000 (annotation
    /// `endpoints.kubernetes.io/over-capacity: truncated`).
    pub truncated: bool,
    /// The write the controller would make: `create`, `update`, `delete` or
    /// `none`.
    pub write: &'static str,
    /// The subsets, as written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subsets: Vec<SubsetRow>,
}

impl EndpointsReport {
    pub fn in_sync(&self) -> bool {
        self.write == "none"
    }
}

/// One subset: its ports and, per list, how many addresses it wanted and kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubsetRow {
    pub ports: Vec<String>,
    pub ready: Kept,
    pub not_ready: Kept,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Kept {
    pub wanted: usize,
    pub kept: usize,
}

/// One address cut by the 1000-address cap, and why those.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Dropped {
    pub address: String,
    /// The subset's ports.
    pub ports: Vec<String>,
    /// Which list: ready or not ready.
    pub ready: bool,
    /// Addresses of that list the subset wanted and kept.
    pub wanted: usize,
    pub kept: usize,
}

impl Dropped {
    pub fn message(&self) -> String {
        format!(
            "{} ({}) — the subset [{}] keeps {} of its {} {} addresses, the first in address order",
            self.address,
            if self.ready { "ready" } else { "not ready" },
            self.ports.join(", "),
            self.kept,
            self.wanted,
            if self.ready { "ready" } else { "not-ready" },
        )
    }
}

/// Which addresses the cap kept and dropped, per Pod.
#[derive(Debug, Clone, Default)]
pub struct CapOutcome {
    /// Pod name → (ip, subset ports) of every kept entry.
    kept: BTreeMap<String, Vec<(String, Vec<String>)>>,
    /// Pod name → every dropped entry.
    dropped: BTreeMap<String, Vec<Dropped>>,
}

impl CapOutcome {
    /// The subsets (their ports) that keep the Pod's address `ip`, and the
    /// entries dropped.
    pub fn of_pod(&self, pod: &str, ip: &str) -> (Vec<Vec<String>>, Vec<Dropped>) {
        let kept = self
            .kept
            .get(pod)
            .into_iter()
            .flatten()
            .filter(|(a, _)| a == ip)
            .map(|(_, ports)| ports.clone())
            .collect();
        let dropped = self
            .dropped
            .get(pod)
            .into_iter()
            .flatten()
            .filter(|d| d.address == ip)
            .cloned()
            .collect();
        (kept, dropped)
    }
}

fn subset_ports(s: &EndpointSubset) -> Vec<String> {
    s.ports
        .iter()
        .flatten()
        .map(|p| port_label(p.name.as_deref(), Some(p.port), p.protocol.as_deref()))
        .collect()
}

fn target_pod(a: &EndpointAddress) -> Option<&str> {
    a.target_ref.as_ref().and_then(|r| r.name.as_deref())
}

/// Compares each list of the canonical subsets with the same list after the
/// cut: the rows, and every kept and dropped entry by Pod.
fn cap(desired: &[EndpointSubset]) -> (Vec<SubsetRow>, CapOutcome, bool) {
    let mut written = desired.to_vec();
    let truncated = capacity::truncate(&mut written);
    let mut rows = Vec::with_capacity(desired.len());
    let mut outcome = CapOutcome::default();
    for (want, have) in desired.iter().zip(&written) {
        let ports = subset_ports(want);
        let mut counts = [Kept { wanted: 0, kept: 0 }; 2];
        for (i, (wanted, kept, ready)) in [
            (&want.addresses, &have.addresses, true),
            (&want.not_ready_addresses, &have.not_ready_addresses, false),
        ]
        .into_iter()
        .enumerate()
        {
            let wanted: &[EndpointAddress] = wanted.as_deref().unwrap_or_default();
            let kept: &[EndpointAddress] = kept.as_deref().unwrap_or_default();
            counts[i] = Kept {
                wanted: wanted.len(),
                kept: kept.len(),
            };
            for a in wanted {
                let Some(pod) = target_pod(a) else { continue };
                if kept.contains(a) {
                    outcome
                        .kept
                        .entry(pod.to_owned())
                        .or_default()
                        .push((a.ip.clone(), ports.clone()));
                } else {
                    outcome
                        .dropped
                        .entry(pod.to_owned())
                        .or_default()
                        .push(Dropped {
                            address: a.ip.clone(),
                            ports: ports.clone(),
                            ready,
                            wanted: wanted.len(),
                            kept: kept.len(),
                        });
                }
            }
        }
        rows.push(SubsetRow {
            ports,
            ready: counts[0],
            not_ready: counts[1],
        });
    }
    (rows, outcome, truncated)
}

/// The Endpoints controller's write for `service` (a first sync, as `plan`
/// makes it, with `plan`'s trigger time), the subsets and what the cap does.
pub fn explain_endpoints(
    service: &Service,
    selected: &[&Pod],
    pods: &[Arc<Pod>],
    existing: Option<&Endpoints>,
    trigger_time: Option<Timestamp>,
) -> (EndpointsReport, CapOutcome) {
    let namespace = service.metadata.namespace.as_deref().unwrap_or_default();
    let name = service.metadata.name.as_deref().unwrap_or_default();
    let inputs = eps::Inputs {
        namespace,
        name,
        service: Some(service),
        pods,
        existing,
        trigger_time,
    };
    let address_type = primary_family(service).map(|f| f.address_type().to_owned());
    let plan = match eps::reconcile(&inputs) {
        eps::Outcome::Skipped(reason) => {
            let why = match reason {
                eps::SkipReason::ExternalName => "an ExternalName Service has no endpoints",
                eps::SkipReason::NoSelector => {
                    "no selector: the Endpoints object is written by hand (and mirrored into slices)"
                }
                eps::SkipReason::InvalidSelector => {
                    "the selector has a key or value no label can have: no Pod can match, nothing is written"
                }
            };
            let report = EndpointsReport {
                skipped: Some(why.to_owned()),
                address_type,
                wanted: 0,
                truncated: false,
                write: "none",
                subsets: Vec::new(),
            };
            return (report, CapOutcome::default());
        }
        eps::Outcome::Planned(plan) => plan,
    };
    let write = match plan.writes.first() {
        Some(EndpointsWrite::Create(_)) => "create",
        Some(EndpointsWrite::Update(_)) => "update",
        Some(EndpointsWrite::Delete(_)) => "delete",
        None => "none",
    };
    let (desired, _) = desired_subsets(service, selected);
    let (subsets, outcome, truncated) = cap(&desired);
    let report = EndpointsReport {
        skipped: None,
        address_type,
        wanted: plan.desired_addresses,
        truncated: plan.truncated || truncated,
        write,
        subsets,
    };
    (report, outcome)
}
