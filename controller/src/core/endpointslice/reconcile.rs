//! Entry point of the EndpointSlice reconciler (ES-2.2 to ES-2.9): decides whether
//! a Service is handled, splits the work per address type and port group,
//! and assembles the plan.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::{EndpointPort, EndpointSlice};
use k8s_openapi::jiff::Timestamp;

use super::desired::{self, FastMap};
use super::finalize::{self, PassDecision, slice_ref};
use super::hints::{HintsPolicy, NoTopology, PassSlices};
use super::metadata;
use super::packing::{self, GroupContext};
use super::{CONTROLLER_NAME, Outcome, PassStats, SkipReason, SlicePlan};
use crate::core::event::PlannedEvent;
use crate::core::ip::Family;
use crate::core::keys::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME, SERVICE_TYPE_EXTERNAL_NAME};
use crate::core::nodes::NodeLookup;
use crate::core::pod::PodView;

/// Event reason when a sync fails.
pub const REASON_FAILED_TO_UPDATE: &str = "FailedToUpdateEndpointSlices";
/// Event reason for a Service whose selector cannot be valid (svcplane's own).
pub const REASON_INVALID_SELECTOR: &str = "InvalidSelector";

/// A snapshot of everything one sync of one Service reads. `P` is the Pod
/// representation: the API object, or the runtime's
/// [`CachedPod`](crate::shell::cache::CachedPod).
pub struct Inputs<'a, P = Pod> {
    pub service: &'a Service,
    /// Candidate Pods. The reconciler keeps only those in the Service's
    /// namespace that its selector matches, so passing more is harmless.
    pub pods: &'a [Arc<P>],
    pub nodes: &'a dyn NodeLookup,
    /// Candidate slices. Only those in the Service's namespace, labelled with
    /// its name and managed by this controller, and not being deleted, count.
    pub existing: &'a [Arc<EndpointSlice>],
    /// The trigger time for this sync (see `trigger_time`); `None` clears the
    /// annotation on written slices.
    pub trigger_time: Option<Timestamp>,
    /// Capacity of a slice, 1..=1000.
    pub max_endpoints_per_slice: usize,
}

impl<P> std::fmt::Debug for Inputs<'_, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inputs")
            .field("service", &self.service.metadata.name)
            .field("pods", &self.pods.len())
            .field("existing", &self.existing.len())
            .field("trigger_time", &self.trigger_time)
            .field("max_endpoints_per_slice", &self.max_endpoints_per_slice)
            .finish()
    }
}

/// Reconciles one Service without topology hints.
pub fn reconcile<P: PodView>(inputs: &Inputs<'_, P>) -> Outcome {
    reconcile_with_hints(inputs, &mut NoTopology)
}

/// Whether the controller handles this Service at all (ES-2.2 steps 2–3).
pub(super) fn skip_reason(service: &Service) -> Option<SkipReason> {
    let spec = service.spec.as_ref();
    if spec.and_then(|s| s.type_.as_deref()) == Some(SERVICE_TYPE_EXTERNAL_NAME) {
        return Some(SkipReason::ExternalName);
    }
    if spec.and_then(|s| s.selector.as_ref()).is_none() {
        return Some(SkipReason::NoSelector);
    }
    None
}

/// The Warning for a Service whose selector no label can satisfy, if it has one
/// (svcplane addition: an API server with full validation never stores one).
pub fn invalid_selector_event(service: &Service) -> Option<PlannedEvent> {
    let selector = service.spec.as_ref()?.selector.as_ref()?;
    let errors = crate::core::label_syntax::selector_errors(selector);
    (!errors.is_empty()).then(|| {
        PlannedEvent::warning(
            REASON_INVALID_SELECTOR,
            format!("spec.selector is invalid: {}", errors.join("; ")),
        )
    })
}

/// Whether a slice is one of this Service's controller-managed slices (the
/// list of ES-2.2 step 3).
pub fn is_managed_slice_of(slice: &EndpointSlice, service: &Service) -> bool {
    let labels = slice.metadata.labels.as_ref();
    slice.metadata.namespace == service.metadata.namespace
        && slice.metadata.deletion_timestamp.is_none()
        && labels.and_then(|l| l.get(LABEL_SERVICE_NAME)) == service.metadata.name.as_ref()
        && labels
            .and_then(|l| l.get(LABEL_MANAGED_BY))
            .map(String::as_str)
            == Some(CONTROLLER_NAME)
}

/// Reconciles one Service, letting `hints` assign or strip topology hints on
/// each address type's slices before the writes are finalised.
pub fn reconcile_with_hints<P: PodView>(
    inputs: &Inputs<'_, P>,
    hints: &mut dyn HintsPolicy,
) -> Outcome {
    let service = inputs.service;
    if let Some(reason) = skip_reason(service) {
        return Outcome::Skipped(reason);
    }
    if let Some(event) = invalid_selector_event(service) {
        // No Pod can carry an invalid label, so nothing can be selected; say so on
        // the Service instead of writing an empty placeholder.
        return Outcome::Planned(SlicePlan {
            passes: Vec::new(),
            unsupported_deletes: Vec::new(),
            events: vec![event],
            error: None,
        });
    }
    // Only the desired state reads Pods, so only it is generic. The rest is
    // one non-generic function, compiled once in this crate: a generic body
    // is compiled in each crate that calls it (the benches, for one), where
    // without LTO this crate's helpers are not inlined into it.
    let pods = desired::selected_pods(service, inputs.pods);
    let families = desired::address_types(service);
    let desired: Vec<desired::Desired<'_>> = families
        .iter()
        .map(|&family| desired::desired_endpoints(service, &pods, inputs.nodes, family))
        .collect();
    let snapshot = Snapshot {
        service,
        existing: inputs.existing,
        trigger_time: inputs.trigger_time,
        max_endpoints_per_slice: inputs.max_endpoints_per_slice,
    };
    Outcome::Planned(plan_slices(&snapshot, &families, &desired, hints))
}

/// What [`plan_slices`] reads besides the desired endpoints: the inputs
/// without the Pods.
struct Snapshot<'a> {
    service: &'a Service,
    existing: &'a [Arc<EndpointSlice>],
    trigger_time: Option<Timestamp>,
    max_endpoints_per_slice: usize,
}

/// The plan for the desired endpoints of each of `families` (same order).
fn plan_slices(
    inputs: &Snapshot<'_>,
    families: &[Family],
    desired: &[desired::Desired<'_>],
    hints: &mut dyn HintsPolicy,
) -> SlicePlan {
    let service = inputs.service;
    let mut existing: Vec<&EndpointSlice> = inputs
        .existing
        .iter()
        .map(Arc::as_ref)
        .filter(|s| is_managed_slice_of(s, service))
        .collect();
    existing.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));

    let labels = metadata::slice_labels(service);
    let mut plan = SlicePlan::default();
    let mut errors: Vec<String> = Vec::new();

    for (&family, desired) in families.iter().zip(desired) {
        let of_type: Vec<&EndpointSlice> = existing
            .iter()
            .copied()
            .filter(|s| s.address_type == family.address_type())
            .collect();
        errors.extend(desired.errors.iter().cloned());
        let decision = plan_pass(
            inputs,
            &labels,
            family,
            &of_type,
            desired,
            hints,
            &mut plan.events,
        );
        plan.passes
            .push(finalize::finalize(service, decision, inputs.trigger_time));
    }

    plan.unsupported_deletes = existing
        .iter()
        .filter(|s| !families.iter().any(|f| f.address_type() == s.address_type))
        .map(|s| slice_ref(s))
        .collect();

    if let Some(message) = aggregate(&errors) {
        plan.events.push(PlannedEvent::warning(
            REASON_FAILED_TO_UPDATE,
            format!(
                "Error updating Endpoint Slices for Service {}/{}: {message}",
                service.metadata.namespace.as_deref().unwrap_or_default(),
                service.metadata.name.as_deref().unwrap_or_default(),
            ),
        ));
        plan.error = Some(message);
    }
    plan
}

/// Formats errors as upstream's aggregate does: one message as is, several
/// (deduplicated, in order) as `[a, b]`.
fn aggregate(errors: &[String]) -> Option<String> {
    // Sorted so the message does not depend on the order Pods were listed.
    let mut errors: Vec<&String> = errors.iter().collect();
    errors.sort();
    let mut unique: Vec<&str> = Vec::new();
    for e in errors {
        if !unique.contains(&e.as_str()) {
            unique.push(e);
        }
    }
    match unique.as_slice() {
        [] => None,
        [one] => Some((*one).to_owned()),
        many => Some(format!("[{}]", many.join(", "))),
    }
}

/// Port-map identity of a list of EndpointPorts: the multiset of ports,
/// order-insensitive, `null` equal to `[]` (ES-2.5).
type PortsKey<'p> = Vec<(
    Option<&'p str>,
    Option<i32>,
    Option<&'p str>,
    Option<&'p str>,
)>;

fn ports_key(ports: Option<&[EndpointPort]>) -> PortsKey<'_> {
    let mut key: PortsKey<'_> = ports
        .unwrap_or_default()
        .iter()
        .map(|p| {
            (
                p.name.as_deref(),
                p.port,
                p.protocol.as_deref(),
                p.app_protocol.as_deref(),
            )
        })
        .collect();
    key.sort_unstable();
    key
}

/// Placement, placeholder and hints for one address type (ES-2.7, ES-2.11).
fn plan_pass<'e>(
    inputs: &Snapshot<'_>,
    labels: &BTreeMap<String, String>,
    family: Family,
    of_type: &[&'e EndpointSlice],
    desired: &desired::Desired<'_>,
    hints: &mut dyn HintsPolicy,
    events: &mut Vec<PlannedEvent>,
) -> PassDecision<'e> {
    let service = inputs.service;
    let address_type = family.address_type();
    let mut deletes: Vec<&'e EndpointSlice> = Vec::new();
    let mut creates = Vec::new();
    let mut updates = Vec::new();
    let mut unchanged: Vec<&'e EndpointSlice> = Vec::new();
    let mut stats = PassStats::default();

    let mut group_of: FastMap<PortsKey<'_>, usize> = FastMap::default();
    for (i, g) in desired.groups.iter().enumerate() {
        group_of.insert(ports_key(Some(&g.ports)), i);
    }
    let mut existing_by_group: Vec<Vec<&'e EndpointSlice>> = vec![Vec::new(); desired.groups.len()];
    let mut undesired: Vec<&'e EndpointSlice> = Vec::new();
    for &slice in of_type {
        if !metadata::owned_by(slice, service) {
            deletes.push(slice);
            continue;
        }
        match group_of.get(&ports_key(slice.ports.as_deref())) {
            Some(&g) => existing_by_group[g].push(slice),
            None => undesired.push(slice),
        }
    }

    let max = inputs.max_endpoints_per_slice.max(1);
    for (group, existing) in desired.groups.iter().zip(&existing_by_group) {
        let ctx = GroupContext {
            service,
            labels,
            address_type,
            ports: &group.ports,
            desired: &desired.endpoints,
            members: &group.members,
            max_per_slice: max,
        };
        let placed = packing::place(&ctx, existing);
        stats.endpoints_added += placed.endpoints_added;
        stats.endpoints_removed += placed.endpoints_removed;
        stats.endpoints_desired += group.members.len();
        stats.slices_after += existing.len() + placed.creates.len() - placed.deletes.len();
        stats.slices_desired += group.members.len().div_ceil(max);
        creates.extend(placed.creates);
        updates.extend(placed.updates);
        deletes.extend(placed.deletes);
        unchanged.extend(placed.unchanged);
    }
    deletes.extend(undesired);

    // Placeholder: a Service whose slices of this type would all go away
    // keeps (or gets) one empty slice.
    if of_type.len() == deletes.len() && creates.is_empty() {
        match deletes.as_slice() {
            [only] if metadata::equals_placeholder(only, service, labels, address_type) => {
                unchanged.push(*only);
                deletes.clear();
            }
            _ => creates.push(metadata::new_slice(
                service,
                labels,
                address_type,
                Vec::new(),
            )),
        }
        stats.slices_after = 1;
    }
    stats.slices_desired = stats.slices_desired.max(1);

    updates.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut pass = PassSlices {
        address_type: address_type.to_owned(),
        creates,
        updates,
        unchanged,
    };
    hints.apply(service, &mut pass, events);
    PassDecision {
        address_type: pass.address_type,
        creates: pass.creates,
        updates: pass.updates,
        deletes,
        stats,
    }
}
