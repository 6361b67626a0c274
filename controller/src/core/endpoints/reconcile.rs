//! The write decision and the written object (EP-4.1, EP-4.4 to EP-4.6).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use super::capacity::MAX_CAPACITY;
use super::desired::capped_subsets;
use super::repack::{address_count, subsets_equivalent};
use super::{
    CONTROLLER_NAME, EndpointsPlan, EndpointsRef, EndpointsWrite, OVER_CAPACITY_TRUNCATED, Outcome,
    SkipReason,
};
use crate::core::endpointslice::desired::selected_pods;
use crate::core::keys::{
    ANNOTATION_OVER_CAPACITY, ANNOTATION_TRIGGER_TIME, LABEL_ENDPOINTS_MANAGED_BY, LABEL_HEADLESS,
    SERVICE_TYPE_EXTERNAL_NAME,
};
use crate::core::pod::PodView;
use crate::core::trigger_time::format_rfc3339_nano;

/// A snapshot of everything one sync of key `namespace/name` reads. `P` is
/// the Pod representation (see [`PodView`]).
pub struct Inputs<'a, P = Pod> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// The Service `namespace/name`, if it exists.
    pub service: Option<&'a Service>,
    /// Candidate Pods; only those in the namespace that the selector matches
    /// count, so passing more is harmless.
    pub pods: &'a [Arc<P>],
    /// The Endpoints object `namespace/name` in the cache, if any.
    pub existing: Option<&'a Endpoints>,
    /// This sync's trigger time (ES-1.6); `None` clears the annotation on write.
    pub trigger_time: Option<Timestamp>,
}

impl<P> std::fmt::Debug for Inputs<'_, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inputs")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("service", &self.service.is_some())
            .field("pods", &self.pods.len())
            .field("existing", &self.existing.is_some())
            .field("trigger_time", &self.trigger_time)
            .finish()
    }
}

use crate::core::endpointslice::metadata::is_headless;

/// The labels a written Endpoints object carries (EP-4.4): the Service's
/// labels, the managed-by label, and the headless label when the Service has
/// no ClusterIP.
pub fn endpoints_labels(service: &Service) -> BTreeMap<String, String> {
    let mut labels = service.metadata.labels.clone().unwrap_or_default();
    labels.insert(
        LABEL_ENDPOINTS_MANAGED_BY.to_owned(),
        CONTROLLER_NAME.to_owned(),
    );
    if is_headless(service) {
        labels.insert(LABEL_HEADLESS.to_owned(), String::new());
    } else {
        labels.remove(LABEL_HEADLESS);
    }
    labels
}

/// Whether the stored labels need no write (EP-4.5 rule 3): equal to the
/// wanted ones once the headless label is ignored on both sides.
fn labels_match(existing: &Endpoints, wanted: &BTreeMap<String, String>) -> bool {
    let empty = BTreeMap::new();
    let have = existing.metadata.labels.as_ref().unwrap_or(&empty);
    fn without(m: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
        m.iter()
            .filter(|(k, _)| k.as_str() != LABEL_HEADLESS)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
    without(have) == without(wanted)
}

fn annotation<'e>(e: &'e Endpoints, key: &str) -> Option<&'e str> {
    e.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Syncs one key (EP-4.1): deletes the Endpoints of a missing Service, leaves
/// ExternalName and selectorless Services alone, otherwise plans the create
/// or update that makes the object match the Pods — or nothing.
pub fn reconcile<P: PodView>(inputs: &Inputs<'_, P>) -> Outcome {
    let Some(service) = inputs.service else {
        // Service gone: delete the Endpoints object of that name. Nothing is
        // planned when none is cached (upstream would get a 404).
        let writes = inputs
            .existing
            .map(|e| {
                EndpointsWrite::Delete(EndpointsRef {
                    namespace: inputs.namespace.to_owned(),
                    name: inputs.name.to_owned(),
                    uid: e.metadata.uid.clone(),
                })
            })
            .into_iter()
            .collect();
        return Outcome::Planned(EndpointsPlan {
            writes,
            ..EndpointsPlan::default()
        });
    };
    let spec = service.spec.as_ref();
    if spec.and_then(|s| s.type_.as_deref()) == Some(SERVICE_TYPE_EXTERNAL_NAME) {
        return Outcome::Skipped(SkipReason::ExternalName);
    }
    let Some(selector) = spec.and_then(|s| s.selector.as_ref()) else {
        return Outcome::Skipped(SkipReason::NoSelector);
    };
    if !crate::core::label_syntax::selector_errors(selector).is_empty() {
        return Outcome::Skipped(SkipReason::InvalidSelector);
    }
    let pods = selected_pods(service, inputs.pods);
    // The subsets cut to the cap in one pass: an over-capacity Service's
    // untruncated subsets are only needed for their size, so they are never
    // sorted or copied in full. Not truncated ⇒ `written` is the untruncated
    // desired content.
    let (written, desired_addresses, truncated) = capped_subsets(service, &pods);
    let labels = endpoints_labels(service);

    if let Some(existing) = inputs.existing {
        let have = existing.subsets.as_deref().unwrap_or_default();
        let in_sync = labels_match(existing, &labels)
            && if truncated {
                // svcplane improvement over upstream (EP-4.5): an
                // over-capacity object whose truncated content and annotation
                // are already right is not rewritten on every sync.
                annotation(existing, ANNOTATION_OVER_CAPACITY) == Some(OVER_CAPACITY_TRUNCATED)
                    && subsets_equivalent(have, &written)
            } else {
                address_count(have) <= MAX_CAPACITY
                    && annotation(existing, ANNOTATION_OVER_CAPACITY).is_none()
                    && subsets_equivalent(have, &written)
            };
        if in_sync {
            return Outcome::Planned(EndpointsPlan {
                desired_addresses,
                truncated,
                ..EndpointsPlan::default()
            });
        }
    }

    let mut object = match inputs.existing {
        Some(e) => e.clone(),
        None => Endpoints {
            metadata: ObjectMeta {
                name: Some(inputs.name.to_owned()),
                namespace: Some(inputs.namespace.to_owned()),
                ..ObjectMeta::default()
            },
            ..Endpoints::default()
        },
    };
    object.subsets = (!written.is_empty()).then_some(written);
    object.metadata.labels = Some(labels);
    let mut annotations = object.metadata.annotations.take().unwrap_or_default();
    match inputs.trigger_time {
        Some(t) => {
            annotations.insert(ANNOTATION_TRIGGER_TIME.to_owned(), format_rfc3339_nano(t));
        }
        None => {
            annotations.remove(ANNOTATION_TRIGGER_TIME);
        }
    }
    if truncated {
        annotations.insert(
            ANNOTATION_OVER_CAPACITY.to_owned(),
            OVER_CAPACITY_TRUNCATED.to_owned(),
        );
    } else {
        annotations.remove(ANNOTATION_OVER_CAPACITY);
    }
    object.metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    let write = if inputs.existing.is_some() {
        EndpointsWrite::Update(object)
    } else {
        EndpointsWrite::Create(object)
    };
    Outcome::Planned(EndpointsPlan {
        writes: vec![write],
        events: Vec::new(),
        desired_addresses,
        truncated,
    })
}
