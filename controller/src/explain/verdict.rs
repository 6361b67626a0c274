//! One Pod's verdict for one Service: is it an endpoint, in which slice and
//! with which conditions, and if not, which rule kept it out.
//!
//! Nothing here decides anything: every verdict is read off the decision the
//! controllers' own per-Pod functions return —
//! [`endpoint_for`](crate::core::endpointslice::desired::endpoint_for) for the
//! EndpointSlice controller, [`AddressRules::decide`] for the Endpoints
//! controller, [`selector_matches_pod`] for selection and
//! [`pod::find_port`] for ports — and translated into a [`Reason`] or
//! [`Note`] with a sentence for people and a stable `code` for tools.

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use crate::core::endpoints::desired::{AddressDecision, AddressRules};
use crate::core::endpointslice::desired::{EndpointDecision, endpoint_for};
use crate::core::ip::Family;
use crate::core::nodes::NodeLookup;
use crate::core::pod::{self, Ineligible, PodView};
use crate::core::selector::selector_matches_pod;

use super::legacy::{CapOutcome, Dropped};
use super::ports::port_label;
use super::slices::FinalSlice;

/// Why a Pod is not an endpoint (of the slices, or of the Endpoints object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "code", rename_all_fields = "camelCase")]
pub enum Reason {
    /// The selector does not match: one pair differs.
    NotSelected {
        label: String,
        wanted: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        found: Option<String>,
    },
    /// `status.phase` Succeeded or Failed.
    TerminalPhase { phase: String },
    /// No `status.podIP(s)` yet.
    #[serde(rename = "NoIP")]
    NoIp,
    /// Being deleted (Endpoints controller without publishNotReadyAddresses).
    Terminating,
    /// `spec.nodeName` empty.
    Unscheduled,
    /// `spec.nodeName` names a Node that does not exist.
    NodeNotFound { node: String },
    /// No IP of a family the Service serves.
    FamilyNotServed {
        pod_ips: Vec<String>,
        served: Vec<String>,
    },
    /// No Service port resolves on the Pod (Endpoints controller).
    NoPortResolved { missing: Vec<MissingPort> },
    /// A Service without ports that is not headless (Endpoints controller).
    ServiceHasNoPorts,
    /// Cut by the Endpoints controller's 1000-address cap.
    OverCapacity { dropped: Vec<Dropped> },
}

impl Reason {
    /// The sentence people read.
    pub fn message(&self) -> String {
        match self {
            Reason::NotSelected {
                label,
                wanted,
                found: Some(found),
            } => format!("not selected: label {label}={found:?}, the selector wants {wanted:?}"),
            Reason::NotSelected {
                label,
                wanted,
                found: None,
            } => format!("not selected: no label {label}, the selector wants {label}={wanted:?}"),
            Reason::TerminalPhase { phase } => {
                format!("phase {phase}: a finished Pod is never an endpoint")
            }
            Reason::NoIp => "no IP yet (status.podIPs is empty)".to_owned(),
            Reason::Terminating => "being deleted: the Endpoints controller leaves terminating Pods out (publishNotReadyAddresses would keep them)".to_owned(),
            Reason::Unscheduled => "not scheduled (spec.nodeName is empty): skipped, and every sync of the Service fails until it is".to_owned(),
            Reason::NodeNotFound { node } => format!(
                "Node {node} not found: skipped, and every sync of the Service fails (FailedToUpdateEndpointSlices) until the Node exists"
            ),
            Reason::FamilyNotServed { pod_ips, served } => format!(
                "no {} address (the Pod has {}), and the Service serves only {}",
                served.join("/"),
                if pod_ips.is_empty() {
                    "none that parses".to_owned()
                } else {
                    pod_ips.join(", ")
                },
                served.join(" and ")
            ),
            Reason::NoPortResolved { missing } => format!(
                "no Service port resolves on the Pod: {}",
                missing
                    .iter()
                    .map(MissingPort::message)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            Reason::ServiceHasNoPorts => {
                "the Service has no ports and is not headless: the Endpoints object lists no address"
                    .to_owned()
            }
            Reason::OverCapacity { dropped } => format!(
                "dropped by the Endpoints 1000-address cap: {}",
                dropped
                    .iter()
                    .map(Dropped::message)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }
    }
}

/// A remark on a Pod that is an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "code", rename_all_fields = "camelCase")]
pub enum Note {
    /// Not ready, but published as ready (publishNotReadyAddresses).
    PublishedNotReady,
    /// Terminating, but kept by the Endpoints controller (publishNotReadyAddresses).
    PublishedTerminating,
    /// Node missing, kept anyway (publishNotReadyAddresses).
    NodeMissingTolerated { node: String },
    /// Some Service ports do not resolve: the Pod lands in a slice (or
    /// subset) without them.
    MissingPorts { missing: Vec<MissingPort> },
    /// A family the Service serves that the Pod has no address of.
    NoAddressOf { address_type: String },
    /// Dropped from some subsets by the 1000-address cap, kept in others.
    PartlyDropped { dropped: Vec<Dropped> },
}

impl Note {
    pub fn message(&self) -> String {
        match self {
            Note::PublishedNotReady => {
                "not ready, but published as ready: publishNotReadyAddresses".to_owned()
            }
            Note::PublishedTerminating => {
                "being deleted, but kept: publishNotReadyAddresses".to_owned()
            }
            Note::NodeMissingTolerated { node } => format!(
                "Node {node} not found, kept anyway (publishNotReadyAddresses), without a zone"
            ),
            Note::MissingPorts { missing } => format!(
                "{}: it lands in a slice without that port",
                missing
                    .iter()
                    .map(MissingPort::message)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            Note::NoAddressOf { address_type } => {
                format!("no {address_type} address: not in the {address_type} slices")
            }
            Note::PartlyDropped { dropped } => format!(
                "partly dropped by the 1000-address cap: {}",
                dropped
                    .iter()
                    .map(Dropped::message)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }
    }
}

/// A Service port whose `targetPort` the Pod does not declare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MissingPort {
    /// The Service port: its name, else its number.
    pub service_port: String,
    /// The `targetPort` name looked up.
    pub target_port: String,
    pub protocol: String,
    /// What the Pod declares: `name:number/protocol` of every container port
    /// (containers, then sidecars).
    pub container_ports: Vec<String>,
}

impl MissingPort {
    pub fn message(&self) -> String {
        let have = if self.container_ports.is_empty() {
            "it declares no container ports".to_owned()
        } else {
            format!("it declares {}", self.container_ports.join(", "))
        };
        format!(
            "Service port {} wants targetPort {:?}/{}, which the Pod does not declare ({have})",
            self.service_port, self.target_port, self.protocol
        )
    }
}

/// Where an endpoint address ends up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// `IPv4` or `IPv6` (EndpointSlices only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address_type: Option<String>,
    pub address: String,
    /// The slice's name; `None` for a slice the controller would create
    /// (EndpointSlices only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slice: Option<String>,
    /// For a slice to be created: its number among the Service's creates,
    /// from 1, as the slice table numbers them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_slice: Option<usize>,
    /// The slice's (or subset's) ports, `name:number/protocol`.
    pub ports: Vec<String>,
}

/// In or out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    In,
    Out,
}

/// What one controller does with one Pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Membership {
    pub state: State,
    /// Why not (state `out`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// The conditions written (state `in`). For the Endpoints controller,
    /// `ready` says which list (`addresses` or `notReadyAddresses`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminating: Option<bool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<Placement>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Note>,
}

impl Membership {
    fn out(reason: Reason) -> Self {
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

    pub fn is_in(&self) -> bool {
        self.state == State::In
    }
}

/// A Service port as the Pod resolves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortOnPod {
    /// The Service port: its name, else its number.
    pub service_port: String,
    /// The container port number it resolves to; `None` when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved: Option<i32>,
}

/// The one-word verdict, decided by the EndpointSlice controller (what
/// kube-proxy reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// An endpoint with `ready: true`.
    Ready,
    /// An endpoint with `ready: false`, not being deleted.
    NotReady,
    /// An endpoint of a Pod being deleted.
    Terminating,
    /// Not an endpoint.
    Out,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ready => "ready",
            Verdict::NotReady => "not ready",
            Verdict::Terminating => "terminating",
            Verdict::Out => "out",
        }
    }
}

/// One Pod's verdict for one Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodVerdict {
    pub pod: String,
    pub verdict: Verdict,
    /// The decisive reason first, then anything else worth knowing.
    pub why: String,
    pub endpoint_slices: Membership,
    pub endpoints: Membership,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PortOnPod>,
}

/// What the per-Pod rules read about a Service, computed once.
pub struct ServiceRules<'a> {
    pub service: &'a Service,
    pub families: Vec<Family>,
    pub publish_not_ready: bool,
    pub nodes: &'a dyn NodeLookup,
    pub addresses: AddressRules<'a>,
}

impl std::fmt::Debug for ServiceRules<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceRules")
            .field("service", &self.service.metadata.name)
            .field("families", &self.families)
            .field("publish_not_ready", &self.publish_not_ready)
            .finish_non_exhaustive()
    }
}

/// How a selector relates to a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    Selected,
    /// All but one selector pair match (for a one-pair selector: the Pod
    /// carries the key, with another value).
    NearMiss(Reason),
    Unrelated,
}

/// Whether `service` selects `pod` — by the controllers' own matcher — and,
/// when it does not, whether it nearly does.
pub fn selection(service: &Service, pod: &Pod) -> Selection {
    let namespace = service.metadata.namespace.as_deref().unwrap_or_default();
    let Some(selector) = service.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return Selection::Unrelated;
    };
    if pod.namespace() != namespace {
        return Selection::Unrelated;
    }
    if selector_matches_pod(Some(selector), pod) {
        return Selection::Selected;
    }
    let mut differing = selector
        .iter()
        .filter(|(k, v)| pod.label(k) != Some(v.as_str()));
    let (Some((label, wanted)), None) = (differing.next(), differing.next()) else {
        return Selection::Unrelated;
    };
    let found = pod.label(label).map(str::to_owned);
    if selector.len() < 2 && found.is_none() {
        return Selection::Unrelated;
    }
    Selection::NearMiss(Reason::NotSelected {
        label: label.clone(),
        wanted: wanted.clone(),
        found,
    })
}

fn service_port_name(sp: &ServicePort) -> String {
    sp.name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| sp.port.to_string())
}

/// Every container port the Pod declares, where named-port lookup reads
/// them (containers, then sidecars), for messages.
fn container_ports(p: &Pod) -> Vec<String> {
    let Some(spec) = p.spec.as_ref() else {
        return Vec::new();
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| pod::is_sidecar(c));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .map(|cp| {
            port_label(
                cp.name.as_deref(),
                Some(cp.container_port),
                cp.protocol.as_deref(),
            )
        })
        .collect()
}

/// Each Service port as the Pod resolves it, and the ones that do not.
pub fn ports_on_pod(service: &Service, p: &Pod) -> (Vec<PortOnPod>, Vec<MissingPort>) {
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    let mut resolved = Vec::with_capacity(ports.len());
    let mut missing = Vec::new();
    for sp in ports {
        let number = pod::find_port(p, sp);
        resolved.push(PortOnPod {
            service_port: service_port_name(sp),
            resolved: number,
        });
        if number.is_none() {
            let target = match &sp.target_port {
                Some(IntOrString::String(name)) => name.clone(),
                Some(IntOrString::Int(n)) => n.to_string(),
                None => sp.port.to_string(),
            };
            missing.push(MissingPort {
                service_port: service_port_name(sp),
                target_port: target,
                protocol: pod::service_port_protocol(sp).to_owned(),
                container_ports: container_ports(p),
            });
        }
    }
    (resolved, missing)
}

fn ineligible_reason(reason: Ineligible, p: &Pod) -> Reason {
    match reason {
        Ineligible::Terminal => Reason::TerminalPhase {
            phase: p.phase().unwrap_or_default().to_owned(),
        },
        Ineligible::NoIp => Reason::NoIp,
        Ineligible::Terminating => Reason::Terminating,
    }
}

fn family_names(families: &[Family]) -> Vec<String> {
    families
        .iter()
        .map(|f| f.address_type().to_owned())
        .collect()
}

/// What the EndpointSlice controller does with a selected Pod: the decision
/// of [`endpoint_for`] for each address type, and the slice each address
/// lands in (from the planned slices).
pub fn slice_membership(
    rules: &ServiceRules<'_>,
    p: &Pod,
    missing: &[MissingPort],
    slices: &[FinalSlice],
) -> Membership {
    let mut included: Option<Membership> = None;
    let mut first_out: Option<Reason> = None;
    let mut no_address: Vec<Family> = Vec::new();
    for &family in &rules.families {
        match endpoint_for(
            rules.service,
            p,
            rules.nodes,
            family,
            rules.publish_not_ready,
        ) {
            EndpointDecision::Ineligible(reason) => {
                first_out.get_or_insert_with(|| ineligible_reason(reason, p));
            }
            EndpointDecision::NodeNotFound { node } => {
                first_out.get_or_insert_with(|| match node {
                    Some(n) => Reason::NodeNotFound { node: n.to_owned() },
                    None => Reason::Unscheduled,
                });
            }
            EndpointDecision::NoAddressOfFamily => no_address.push(family),
            EndpointDecision::Endpoint {
                endpoint,
                node_found,
            } => {
                let m = included.get_or_insert_with(|| Membership {
                    state: State::In,
                    reason: None,
                    ready: Some(endpoint.ready),
                    serving: Some(endpoint.serving),
                    terminating: Some(endpoint.terminating),
                    placements: Vec::new(),
                    notes: Vec::new(),
                });
                let address_type = family.address_type();
                let slice = slices
                    .iter()
                    .find(|s| s.address_type == address_type && s.holds(p.namespace(), p.name()));
                for address in
                    std::iter::once(&endpoint.first_address).chain(&endpoint.more_addresses)
                {
                    m.placements.push(Placement {
                        address_type: Some(address_type.to_owned()),
                        address: address.to_string(),
                        slice: slice.and_then(|s| s.name.clone()),
                        new_slice: slice.and_then(|s| s.new_index),
                        ports: slice.map(|s| s.ports.clone()).unwrap_or_default(),
                    });
                }
                if !node_found
                    && !m
                        .notes
                        .iter()
                        .any(|n| matches!(n, Note::NodeMissingTolerated { .. }))
                {
                    m.notes.push(Note::NodeMissingTolerated {
                        node: endpoint.node_name.unwrap_or_default().to_owned(),
                    });
                }
            }
        }
    }
    if let Some(reason) = first_out {
        return Membership::out(reason);
    }
    let Some(mut m) = included else {
        return Membership::out(Reason::FamilyNotServed {
            pod_ips: p.pod_ips().map(str::to_owned).collect(),
            served: family_names(&rules.families),
        });
    };
    if m.ready == Some(true) && (m.serving == Some(false) || m.terminating == Some(true)) {
        m.notes.insert(0, Note::PublishedNotReady);
    }
    for family in no_address {
        m.notes.push(Note::NoAddressOf {
            address_type: family.address_type().to_owned(),
        });
    }
    if !missing.is_empty() {
        m.notes.push(Note::MissingPorts {
            missing: missing.to_vec(),
        });
    }
    m
}

/// What the Endpoints controller does with a selected Pod: the decision of
/// [`AddressRules::decide`], then the 1000-address cap.
pub fn endpoints_membership(
    rules: &ServiceRules<'_>,
    p: &Pod,
    missing: &[MissingPort],
    cap: &CapOutcome,
) -> Membership {
    match rules.addresses.decide(p) {
        AddressDecision::Ineligible(reason) => Membership::out(ineligible_reason(reason, p)),
        AddressDecision::NoAddressOfFamily(family) => Membership::out(Reason::FamilyNotServed {
            pod_ips: p.pod_ips().map(str::to_owned).collect(),
            served: vec![family.address_type().to_owned()],
        }),
        AddressDecision::ServiceHasNoPorts => Membership::out(Reason::ServiceHasNoPorts),
        AddressDecision::NoPortResolved => Membership::out(Reason::NoPortResolved {
            missing: missing.to_vec(),
        }),
        AddressDecision::Address { address, ready, .. } => {
            let (kept, dropped) = cap.of_pod(p.name(), &address.ip);
            if kept.is_empty() && !dropped.is_empty() {
                return Membership::out(Reason::OverCapacity { dropped });
            }
            let mut notes = Vec::new();
            if rules.publish_not_ready && !pod::is_ready(p) {
                notes.push(Note::PublishedNotReady);
            }
            if rules.publish_not_ready && pod::is_terminating(p) {
                notes.push(Note::PublishedTerminating);
            }
            if !missing.is_empty() {
                notes.push(Note::MissingPorts {
                    missing: missing.to_vec(),
                });
            }
            if !dropped.is_empty() {
                notes.push(Note::PartlyDropped { dropped });
            }
            Membership {
                state: State::In,
                reason: None,
                ready: Some(ready),
                serving: None,
                terminating: None,
                placements: kept
                    .into_iter()
                    .map(|ports| Placement {
                        address_type: None,
                        address: address.ip.clone(),
                        slice: None,
                        new_slice: None,
                        ports,
                    })
                    .collect(),
                notes,
            }
        }
    }
}

/// The one-word verdict and the sentence that explains it, decisive reason
/// first.
pub fn summarize(slices: &Membership, endpoints: &Membership) -> (Verdict, String) {
    let mut parts: Vec<String> = Vec::new();
    let verdict = match (&slices.reason, slices.state) {
        (Some(reason), _) => {
            parts.push(reason.message());
            Verdict::Out
        }
        (None, _) => {
            let ready = slices.ready == Some(true);
            let serving = slices.serving == Some(true);
            let terminating = slices.terminating == Some(true);
            let verdict = if terminating {
                parts.push(if serving {
                    "being deleted, still serving: kube-proxy uses it only while no endpoint is ready".to_owned()
                } else {
                    "being deleted and not serving: no traffic".to_owned()
                });
                Verdict::Terminating
            } else if ready {
                parts.push(if serving {
                    "Ready condition True".to_owned()
                } else {
                    "Ready condition not True".to_owned()
                });
                Verdict::Ready
            } else {
                parts.push("Ready condition not True: no traffic until it is".to_owned());
                Verdict::NotReady
            };
            let placed: Vec<String> = slices
                .placements
                .iter()
                .map(|pl| {
                    let slice = match (&pl.slice, pl.new_slice) {
                        (Some(name), _) => name.clone(),
                        (None, Some(n)) => format!("new slice {n}"),
                        (None, None) => "no slice".to_owned(),
                    };
                    let ports = if pl.ports.is_empty() {
                        "no ports".to_owned()
                    } else {
                        pl.ports.join(", ")
                    };
                    format!("{} in {slice} [{ports}]", pl.address)
                })
                .collect();
            if !placed.is_empty() {
                parts.push(placed.join(", "));
            }
            verdict
        }
    };
    parts.extend(slices.notes.iter().map(Note::message));
    match (&endpoints.reason, &slices.reason) {
        (Some(e), Some(s)) if e == s => {}
        (Some(e), _) => parts.push(format!("Endpoints: {}", e.message())),
        (None, Some(_)) => parts.push(format!(
            "Endpoints: in {}",
            if endpoints.ready == Some(true) {
                "addresses"
            } else {
                "notReadyAddresses"
            }
        )),
        (None, None) => {
            if endpoints.ready != slices.ready {
                parts.push(format!(
                    "Endpoints: in {}",
                    if endpoints.ready == Some(true) {
                        "addresses"
                    } else {
                        "notReadyAddresses"
                    }
                ));
            }
            for note in &endpoints.notes {
                if !slices.notes.contains(note) {
                    parts.push(format!("Endpoints: {}", note.message()));
                }
            }
        }
    }
    (verdict, parts.join("; "))
}
