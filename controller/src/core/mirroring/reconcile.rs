//! What is mirrored (MR-5.1), the slice shape (MR-5.3) and the
//! per-group reconcile with recycling (MR-5.4).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::desired::{self, EndpointKey, Group, PortsKey, ports_key};
use super::validate;
use super::{
    CONTROLLER_NAME, MirrorPlan, MirrorStats, NotMirrored, REASON_INVALID_IP, REASON_TOO_MANY,
};
use crate::core::endpoints::repack::NormRef;
use crate::core::endpointslice::SliceRef;
use crate::core::event::PlannedEvent;
use crate::core::keys::{
    ANNOTATION_LAST_APPLIED, ANNOTATION_LEADER, ANNOTATION_TRIGGER_TIME, LABEL_MANAGED_BY,
    LABEL_SERVICE_NAME, LABEL_SKIP_MIRROR,
};
use crate::core::slice_endpoints::SliceEndpoints;

/// A snapshot of everything one sync of key `namespace/name` reads.
pub struct Inputs<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// The Endpoints object `namespace/name`, if it exists.
    pub endpoints: Option<&'a Endpoints>,
    /// The Service `namespace/name`, if it exists.
    pub service: Option<&'a Service>,
    /// Candidate slices; only this key's mirrored slices count.
    pub existing: &'a [Arc<EndpointSlice>],
    /// `--mirroring-max-endpoints-per-subset`, 1..=1000.
    pub max_endpoints_per_subset: usize,
}

impl std::fmt::Debug for Inputs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inputs")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("endpoints", &self.endpoints.is_some())
            .field("service", &self.service.is_some())
            .field("existing", &self.existing.len())
            .field("max_endpoints_per_subset", &self.max_endpoints_per_subset)
            .finish()
    }
}

/// Why an existing Endpoints object is not mirrored, if it is not (MR-5.1):
/// label `endpointslice.kubernetes.io/skip-mirror: "true"` or the
/// leader-election annotation.
pub fn should_mirror(endpoints: &Endpoints) -> Result<(), NotMirrored> {
    let skip = endpoints
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SKIP_MIRROR))
        .is_some_and(|v| v == "true");
    if skip {
        return Err(NotMirrored::SkipMirrorLabel);
    }
    let leader = endpoints
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION_LEADER));
    if leader {
        return Err(NotMirrored::LeaderAnnotation);
    }
    Ok(())
}

/// Whether `slice` is one of the mirrored slices of key `namespace/name`.
pub fn is_mirrored_slice_of(slice: &EndpointSlice, namespace: &str, name: &str) -> bool {
    let labels = slice.metadata.labels.as_ref();
    slice.metadata.namespace.as_deref() == Some(namespace)
        && labels
            .and_then(|l| l.get(LABEL_SERVICE_NAME))
            .map(String::as_str)
            == Some(name)
        && labels
            .and_then(|l| l.get(LABEL_MANAGED_BY))
            .map(String::as_str)
            == Some(CONTROLLER_NAME)
}

fn slice_ref(s: &EndpointSlice, namespace: &str) -> SliceRef {
    SliceRef {
        namespace: s
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| namespace.to_owned()),
        name: s.metadata.name.clone().unwrap_or_default(),
        uid: s.metadata.uid.clone(),
        address_type: s.address_type.clone(),
    }
}

fn mirrored_slices<'e>(inputs: &Inputs<'e>) -> Vec<&'e EndpointSlice> {
    let mut out: Vec<&EndpointSlice> = inputs
        .existing
        .iter()
        .map(Arc::as_ref)
        .filter(|s| is_mirrored_slice_of(s, inputs.namespace, inputs.name))
        .collect();
    out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    out
}

fn not_mirrored(inputs: &Inputs<'_>) -> Option<NotMirrored> {
    let Some(service) = inputs.service else {
        return Some(NotMirrored::ServiceMissing);
    };
    if service
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some()
    {
        return Some(NotMirrored::ServiceHasSelector);
    }
    let Some(endpoints) = inputs.endpoints else {
        return Some(NotMirrored::EndpointsMissing);
    };
    should_mirror(endpoints).err()
}

/// Labels of a mirrored slice (MR-5.3): the Endpoints labels, then the two
/// reserved keys overwritten.
fn slice_labels(endpoints: &Endpoints, name: &str) -> BTreeMap<String, String> {
    let mut labels = endpoints.metadata.labels.clone().unwrap_or_default();
    labels.insert(LABEL_SERVICE_NAME.to_owned(), name.to_owned());
    labels.insert(LABEL_MANAGED_BY.to_owned(), CONTROLLER_NAME.to_owned());
    labels
}

/// Annotations of a mirrored slice: the Endpoints annotations minus the
/// trigger time and kubectl's last-applied configuration.
fn slice_annotations(endpoints: &Endpoints) -> BTreeMap<String, String> {
    let mut a = endpoints.metadata.annotations.clone().unwrap_or_default();
    a.remove(ANNOTATION_TRIGGER_TIME);
    a.remove(ANNOTATION_LAST_APPLIED);
    a
}

fn owner_reference(endpoints: &Endpoints) -> OwnerReference {
    OwnerReference {
        api_version: "v1".to_owned(),
        kind: "Endpoints".to_owned(),
        name: endpoints.metadata.name.clone().unwrap_or_default(),
        uid: endpoints.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A freshly built slice: `generateName` for a create, or the existing
/// slice's `name` (and no `generateName`, as upstream: a rewrite therefore
/// clears it) for an update. A recycled create keeps its `generateName`.
fn new_slice(
    inputs: &Inputs<'_>,
    endpoints: &Endpoints,
    group: &Group,
    name: Option<String>,
    max: usize,
) -> EndpointSlice {
    let annotations = slice_annotations(endpoints);
    EndpointSlice {
        metadata: ObjectMeta {
            generate_name: name.is_none().then(|| format!("{}-", inputs.name)),
            name,
            namespace: Some(inputs.namespace.to_owned()),
            labels: Some(slice_labels(endpoints, inputs.name)),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![owner_reference(endpoints)]),
            ..ObjectMeta::default()
        },
        address_type: group.family.address_type().to_owned(),
        endpoints: Some(group.endpoints.iter().take(max).cloned().collect()),
        ports: Some(group.ports.clone()),
    }
}

/// Whether a desired endpoint differs from the stored one beyond identity
/// (upstream `EndpointsEqualBeyondHash`): nodeName, zone, the three
/// conditions, targetRef (resourceVersion ignored).
fn differs(want: &Endpoint, have: &Endpoint) -> bool {
    let cond = |e: &Endpoint| {
        let c = e.conditions.as_ref();
        (
            c.and_then(|c| c.ready),
            c.and_then(|c| c.serving),
            c.and_then(|c| c.terminating),
        )
    };
    want.node_name != have.node_name
        || want.zone != have.zone
        || cond(want) != cond(have)
        || want.target_ref.as_ref().map(NormRef::of) != have.target_ref.as_ref().map(NormRef::of)
}

#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    added: usize,
    updated: usize,
    removed: usize,
}

fn totals(slice: &EndpointSlice, group: &Group) -> Totals {
    let mut t = Totals::default();
    let mut matched = 0;
    for e in slice.endpoints() {
        match group.get(&EndpointKey::of(e)) {
            None => t.removed += 1,
            Some(want) => {
                matched += 1;
                if differs(want, e) {
                    t.updated += 1;
                }
            }
        }
    }
    t.added = group.endpoints.len().saturating_sub(matched);
    t
}

fn map_eq(a: Option<&BTreeMap<String, String>>, b: &BTreeMap<String, String>) -> bool {
    a.map_or(b.is_empty(), |a| a == b)
}

/// Whether the first existing slice of a group can stay as it is (MR-5.4).
fn unchanged(slice: &EndpointSlice, endpoints: &Endpoints, t: Totals) -> bool {
    if t.added + t.updated + t.removed > 0 {
        return false;
    }
    let mut labels = slice.metadata.labels.clone().unwrap_or_default();
    labels.remove(LABEL_MANAGED_BY);
    labels.remove(LABEL_SERVICE_NAME);
    let endpoints_labels = endpoints.metadata.labels.clone().unwrap_or_default();
    if labels != endpoints_labels {
        return false;
    }
    if !map_eq(
        slice.metadata.annotations.as_ref(),
        &slice_annotations(endpoints),
    ) {
        return false;
    }
    // Rewritten when it names another Endpoints object (re-created with the
    // same name); slices without owner references are accepted.
    let uid = endpoints.metadata.uid.as_deref().unwrap_or("");
    !slice
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.kind == "Endpoints" && r.uid != uid)
}

fn group_key(s: &EndpointSlice) -> (String, PortsKey) {
    (
        s.address_type.clone(),
        ports_key(s.ports.as_deref().unwrap_or_default()),
    )
}

fn events(d: &desired::Desired, endpoints: &Endpoints, max: usize) -> Vec<PlannedEvent> {
    let mut out = Vec::new();
    if d.invalid > 0 {
        out.push(PlannedEvent::warning(
            REASON_INVALID_IP,
            format!(
                "Skipped {} invalid IP addresses when mirroring to EndpointSlices",
                d.invalid
            ),
        ));
    }
    if d.skipped > d.invalid {
        out.push(PlannedEvent::warning(
            REASON_TOO_MANY,
            format!(
                "A max of {max} addresses can be mirrored to EndpointSlices per Endpoints subset. {} addresses were skipped",
                d.skipped
            ),
        ));
    }
    out.extend(validate::event(endpoints));
    out
}

/// Syncs one key: deletes the mirrored slices when nothing is to be
/// mirrored, otherwise plans one slice per (subset, family) — and no write
/// when they already match.
pub fn reconcile(inputs: &Inputs<'_>) -> MirrorPlan {
    let existing = mirrored_slices(inputs);
    if let Some(reason) = not_mirrored(inputs) {
        return MirrorPlan {
            not_mirrored: Some(reason),
            deletes: existing
                .iter()
                .map(|s| slice_ref(s, inputs.namespace))
                .collect(),
            stats: MirrorStats {
                endpoints_removed: existing.iter().map(|s| s.endpoints().len()).sum(),
                ..MirrorStats::default()
            },
            ..MirrorPlan::default()
        };
    }
    let Some(endpoints) = inputs.endpoints else {
        return MirrorPlan::default();
    };
    let max = inputs.max_endpoints_per_subset.max(1);
    let desired = desired::desired(endpoints, max);
    let live: Vec<&EndpointSlice> = existing
        .into_iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .collect();
    let mut by_key: BTreeMap<(String, PortsKey), Vec<&EndpointSlice>> = BTreeMap::new();
    for s in &live {
        by_key.entry(group_key(s)).or_default().push(s);
    }

    let mut plan = MirrorPlan {
        events: events(&desired, endpoints, max),
        ..MirrorPlan::default()
    };
    plan.stats.invalid_addresses = desired.invalid;
    plan.stats.addresses_skipped = desired.skipped;
    for group in &desired.groups {
        plan.stats.endpoints_desired += group.endpoints.len();
        plan.stats.slices_desired += group.endpoints.len().div_ceil(max);
        let key = (group.family.address_type().to_owned(), group.key.clone());
        let have = by_key.remove(&key).unwrap_or_default();
        if group.endpoints.is_empty() {
            plan.stats.endpoints_removed += have.iter().map(|s| s.endpoints().len()).sum::<usize>();
            plan.deletes
                .extend(have.iter().map(|s| slice_ref(s, inputs.namespace)));
            continue;
        }
        let Some((first, rest)) = have.split_first() else {
            plan.stats.endpoints_added += group.endpoints.len();
            plan.creates
                .push(new_slice(inputs, endpoints, group, None, max));
            continue;
        };
        plan.deletes
            .extend(rest.iter().map(|s| slice_ref(s, inputs.namespace)));
        let t = totals(first, group);
        plan.stats.endpoints_added += t.added;
        plan.stats.endpoints_updated += t.updated;
        plan.stats.endpoints_removed += t.removed;
        if !unchanged(first, endpoints, t) {
            plan.updates.push(new_slice(
                inputs,
                endpoints,
                group,
                first.metadata.name.clone(),
                max,
            ));
        }
    }
    // Groups no longer desired (old ports, unsupported address types).
    for slices in by_key.into_values() {
        plan.stats.endpoints_removed += slices.iter().map(|s| s.endpoints().len()).sum::<usize>();
        plan.deletes
            .extend(slices.iter().map(|s| slice_ref(s, inputs.namespace)));
    }
    recycle(&mut plan);
    if endpoints.metadata.deletion_timestamp.is_some() {
        plan.creates.clear();
    }
    plan
}

/// Turns creates into updates of slices about to be deleted, pairing each
/// delete (last first) with the last pending create of the same address
/// type; the rewrite borrows the deleted slice's name.
fn recycle(plan: &mut MirrorPlan) {
    let mut i = plan.deletes.len();
    while i > 0 {
        i -= 1;
        let Some(d) = plan.deletes.get(i) else { break };
        let family = d.address_type.clone();
        let Some(c) = plan.creates.iter().rposition(|s| s.address_type == family) else {
            continue;
        };
        let mut slice = plan.creates.remove(c);
        let deleted = plan.deletes.remove(i);
        slice.metadata.name = Some(deleted.name);
        plan.updates.push(slice);
    }
}
