//! Which Services an object event affects (ES-2.1).
//!
//! Pure decisions the runtime's event handlers call: they keep watch events
//! from queueing Services whose slices cannot have changed, and they encode
//! upstream's quirks (a hostname-only Pod change queues nothing).

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::tracker::SliceTracker;
use crate::core::keys::object_key;
use crate::core::keys::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME, LABEL_ZONE};
use crate::core::pod::{self, PodView};
use crate::core::selector::selector_matches_pod;

/// The Services in the Pod's namespace (unset reads as `""`) whose
/// selector is set and matches the Pod's labels.
fn matching<'s, P: PodView>(pod: &P, services: &'s [&'s Service]) -> Vec<&'s Service> {
    services
        .iter()
        .copied()
        .filter(|s| s.metadata.namespace.as_deref().unwrap_or_default() == pod.namespace())
        .filter(|s| {
            let selector = s.spec.as_ref().and_then(|sp| sp.selector.as_ref());
            selector.is_some() && selector_matches_pod(selector, pod)
        })
        .collect()
}

/// Services to queue for a Pod add or delete: those whose selector matches.
pub fn services_for_pod<P: PodView>(pod: &P, services: &[&Service]) -> Vec<String> {
    matching(pod, services)
        .into_iter()
        .map(|s| object_key(&s.metadata))
        .collect()
}

/// Services to queue for a Pod update (ES-2.1): nothing for a resync; for an
/// endpoint-relevant change only, the Services matching the new labels; for
/// a label change with an endpoint change, old ∪ new; for a label change
/// alone, the symmetric difference. Hostname/subdomain count as labels.
///
/// `old` and `new` may be different representations, e.g. the cached Pod
/// and the Pod a watch event just delivered.
pub fn services_for_pod_update<A: PodView, B: PodView>(
    old: &A,
    new: &B,
    services: &[&Service],
) -> Vec<String> {
    if old.resource_version().is_some() && old.resource_version() == new.resource_version() {
        return Vec::new();
    }
    let pod_changed = old.deletion_timestamp() != new.deletion_timestamp()
        || pod::is_ready(old) != pod::is_ready(new)
        || !old.pod_ips().eq(new.pod_ips());
    let labels_changed = !old.labels().eq(new.labels())
        || old.hostname() != new.hostname()
        || old.subdomain() != new.subdomain();
    if !pod_changed && !labels_changed {
        return Vec::new();
    }
    let new_set: Vec<String> = matching(new, services)
        .into_iter()
        .map(|s| object_key(&s.metadata))
        .collect();
    if !labels_changed {
        return new_set;
    }
    let old_set: Vec<String> = matching(old, services)
        .into_iter()
        .map(|s| object_key(&s.metadata))
        .collect();
    let mut out: Vec<String> = if pod_changed {
        old_set.iter().chain(&new_set).cloned().collect()
    } else {
        old_set
            .iter()
            .filter(|k| !new_set.contains(k))
            .chain(new_set.iter().filter(|k| !old_set.contains(k)))
            .cloned()
            .collect()
    };
    out.sort();
    out.dedup();
    out
}

/// Whether `slice` is managed by `manager` (this controller's
/// [`CONTROLLER_NAME`], or the mirroring controller's, which follows the same
/// slice-event rules).
fn managed_by(slice: &EndpointSlice, manager: &str) -> bool {
    slice
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_MANAGED_BY))
        .is_some_and(|v| v == manager)
}

/// The owning Service key of a slice (`<namespace>/<service-name label>`),
/// or `None` when the label is missing.
pub fn slice_service_key(slice: &EndpointSlice) -> Option<String> {
    let name = slice.metadata.labels.as_ref()?.get(LABEL_SERVICE_NAME)?;
    Some(format!(
        "{}/{}",
        slice.metadata.namespace.as_deref().unwrap_or_default(),
        name
    ))
}

/// Services to queue (after `max(1s, batch period)`) for a slice add;
/// `manager` is the managed-by value of the controller asking.
pub fn services_for_slice_add(
    slice: &EndpointSlice,
    tracker: &SliceTracker,
    manager: &str,
) -> Vec<String> {
    match slice_service_key(slice) {
        Some(key) if managed_by(slice, manager) && tracker.should_sync(&key, slice) => vec![key],
        _ => Vec::new(),
    }
}

/// Services to queue for a slice update: both Services when the
/// service-name label moved; the Service when management moved to or from
/// us, or when the slice is ours and newer than tracked.
pub fn services_for_slice_update(
    old: &EndpointSlice,
    new: &EndpointSlice,
    tracker: &SliceTracker,
    manager: &str,
) -> Vec<String> {
    let (old_key, new_key) = (slice_service_key(old), slice_service_key(new));
    if old_key != new_key {
        return old_key.into_iter().chain(new_key).collect();
    }
    let Some(key) = new_key else {
        return Vec::new();
    };
    let moved = managed_by(old, manager) != managed_by(new, manager);
    if moved || (managed_by(new, manager) && tracker.should_sync(&key, new)) {
        vec![key]
    } else {
        Vec::new()
    }
}

/// Services to queue for a slice delete: ours, tracked, and not a deletion
/// we made ourselves. Consumes the tracker's expectation.
pub fn services_for_slice_delete(
    slice: &EndpointSlice,
    tracker: &mut SliceTracker,
    manager: &str,
) -> Vec<String> {
    let (Some(key), Some(uid)) = (slice_service_key(slice), slice.metadata.uid.as_deref()) else {
        return Vec::new();
    };
    if !managed_by(slice, manager) || !tracker.is_tracked(&key, uid) {
        return Vec::new();
    }
    if tracker.observe_deleted(&key, uid) {
        Vec::new()
    } else {
        vec![key]
    }
}

fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// Whether a Node update should recompute topology: only a change of
/// readiness or of the zone label (CPU and other labels do not).
pub fn node_update_affects_topology(old: &Node, new: &Node) -> bool {
    let zone = |n: &Node| {
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_ZONE))
            .cloned()
    };
    node_ready(old) != node_ready(new) || zone(old) != zone(new)
}

#[cfg(test)]
mod tests {
    use super::super::CONTROLLER_NAME;
    use super::*;
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::Pod;

    use crate::core::fixtures::{as_stored, node, pod, svc};

    fn services() -> Vec<Service> {
        vec![
            svc("a").selector("app", "a").build(),
            svc("b").selector("app", "b").build(),
            svc("nil").no_selector().build(),
            svc("other-ns").namespace("x").selector("app", "a").build(),
        ]
    }

    fn with_rv(mut p: Pod, rv: &str) -> Pod {
        p.metadata.resource_version = Some(rv.into());
        p
    }

    #[test]
    fn rule_2_1_pod_add_queues_matching_services_in_namespace() {
        let s = services();
        let refs: Vec<&Service> = s.iter().collect();
        assert_eq!(
            services_for_pod(&pod("p", "a").build(), &refs),
            ["default/a"]
        );
    }

    #[test]
    fn rule_2_1_resync_queues_nothing() {
        let s = services();
        let refs: Vec<&Service> = s.iter().collect();
        let p = with_rv(pod("p", "a").ready().build(), "5");
        let q = with_rv(pod("p", "b").build(), "5");
        assert!(services_for_pod_update(&p, &q, &refs).is_empty());
    }

    #[test]
    fn rule_2_1_pod_change_only_queues_new_label_matches() {
        let s = services();
        let refs: Vec<&Service> = s.iter().collect();
        let old = with_rv(pod("p", "a").ip("10.0.0.1").build(), "1");
        let new = with_rv(pod("p", "a").ip("10.0.0.1").ready().build(), "2");
        assert_eq!(services_for_pod_update(&old, &new, &refs), ["default/a"]);
    }

    #[test]
    fn rule_2_1_label_and_pod_change_queue_the_union() {
        let s = services();
        let refs: Vec<&Service> = s.iter().collect();
        let old = with_rv(pod("p", "a").build(), "1");
        let new = with_rv(pod("p", "b").ready().build(), "2");
        assert_eq!(
            services_for_pod_update(&old, &new, &refs),
            ["default/a", "default/b"]
        );
    }

    #[test]
    fn rule_2_1_label_change_only_queues_the_symmetric_difference() {
        let s = services();
        let refs: Vec<&Service> = s.iter().collect();
        let old = with_rv(pod("p", "a").build(), "1");
        let new = with_rv(pod("p", "a").label("extra", "1").build(), "2");
        assert!(services_for_pod_update(&old, &new, &refs).is_empty());
        let moved = with_rv(pod("p", "b").build(), "2");
        assert_eq!(
            services_for_pod_update(&old, &moved, &refs),
            ["default/a", "default/b"]
        );
    }

    #[test]
    fn rule_2_1_hostname_only_change_queues_nothing() {
        let s = services();
        let refs: Vec<&Service> = s.iter().collect();
        let old = with_rv(pod("p", "a").build(), "1");
        let new = with_rv(pod("p", "a").hostname("h", "a").build(), "2");
        assert!(services_for_pod_update(&old, &new, &refs).is_empty());
    }

    #[test]
    fn rule_2_1_unrelated_pod_change_queues_nothing() {
        let s = services();
        let refs: Vec<&Service> = s.iter().collect();
        let old = with_rv(pod("p", "a").build(), "1");
        let new = with_rv(pod("p", "a").phase("Pending").build(), "2");
        assert!(services_for_pod_update(&old, &new, &refs).is_empty());
    }

    fn our_slice(service: &str) -> EndpointSlice {
        let mut s = EndpointSlice::default();
        s.metadata.namespace = Some("default".into());
        s.metadata.labels = Some(BTreeMap::from([
            (LABEL_SERVICE_NAME.to_owned(), service.to_owned()),
            (LABEL_MANAGED_BY.to_owned(), CONTROLLER_NAME.to_owned()),
        ]));
        as_stored(s, "s1")
    }

    #[test]
    fn rule_2_1_slice_events_respect_the_tracker() {
        let mut tracker = SliceTracker::default();
        let slice = our_slice("web");
        assert_eq!(
            services_for_slice_add(&slice, &tracker, CONTROLLER_NAME),
            ["default/web"]
        );
        tracker.record_written("default/web", &slice);
        assert!(services_for_slice_add(&slice, &tracker, CONTROLLER_NAME).is_empty());
        assert!(services_for_slice_update(&slice, &slice, &tracker, CONTROLLER_NAME).is_empty());
        let mut foreign = slice.clone();
        if let Some(l) = foreign.metadata.labels.as_mut() {
            l.insert(LABEL_MANAGED_BY.into(), "other".into());
        }
        assert!(services_for_slice_add(&foreign, &tracker, CONTROLLER_NAME).is_empty());
        assert_eq!(
            services_for_slice_update(&slice, &foreign, &tracker, CONTROLLER_NAME),
            ["default/web"]
        );
    }

    #[test]
    fn rule_2_1_slice_moved_between_services_queues_both() {
        let tracker = SliceTracker::default();
        assert_eq!(
            services_for_slice_update(&our_slice("a"), &our_slice("b"), &tracker, CONTROLLER_NAME),
            ["default/a", "default/b"]
        );
    }

    #[test]
    fn rule_2_1_expected_slice_delete_queues_nothing_unexpected_queues() {
        let mut tracker = SliceTracker::default();
        let slice = our_slice("web");
        assert!(
            services_for_slice_delete(&slice, &mut tracker, CONTROLLER_NAME).is_empty(),
            "untracked"
        );
        tracker.record_deleted("default/web", "uid-slice-s1");
        assert!(services_for_slice_delete(&slice, &mut tracker, CONTROLLER_NAME).is_empty());
        tracker.record_written("default/web", &slice);
        assert_eq!(
            services_for_slice_delete(&slice, &mut tracker, CONTROLLER_NAME),
            ["default/web"]
        );
    }

    #[test]
    fn rule_2_1_node_update_matters_only_for_readiness_or_zone() {
        let a = node("n", Some("z1"));
        let mut cpu = a.clone();
        if let Some(s) = cpu.status.as_mut() {
            s.allocatable = None;
        }
        assert!(!node_update_affects_topology(&a, &cpu));
        assert!(node_update_affects_topology(&a, &node("n", Some("z2"))));
        let mut not_ready = a.clone();
        if let Some(s) = not_ready.status.as_mut() {
            s.conditions = None;
        }
        assert!(node_update_affects_topology(&a, &not_ready));
    }
}
