//! Which keys a change queues for the mirroring controller (MR-5.1): pure, shared by
//! `svcplane run`'s event handlers and anything that replays changes.

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::{CONTROLLER_NAME, should_mirror};
use crate::core::change::Change;
use crate::core::endpointslice::tracker::SliceTracker;
use crate::core::endpointslice::triggers;
use crate::core::keys::object_key;

fn has_selector(s: &Service) -> bool {
    s.spec
        .as_ref()
        .and_then(|sp| sp.selector.as_ref())
        .is_some()
}

/// Keys a Service change queues (MR-5.1): a selectorless Service added or deleted, or
/// a selector appearing or disappearing.
pub fn keys_for_service(change: &Change<Service>) -> Option<String> {
    let queue = match change {
        Change::Added(s) | Change::Deleted(s) => !has_selector(s),
        Change::Updated { old, new } => has_selector(old) != has_selector(new),
    };
    queue.then(|| object_key(&change.latest().metadata))
}

/// Keys an Endpoints change queues (MR-5.1): a mirrorable object added or deleted, an
/// update where the old or the new version is mirrorable.
pub fn keys_for_endpoints(change: &Change<Endpoints>) -> Option<String> {
    let mirrorable = |e: &Endpoints| should_mirror(e).is_ok();
    let queue = match change {
        Change::Added(e) | Change::Deleted(e) => mirrorable(e),
        Change::Updated { old, new } => mirrorable(old) || mirrorable(new),
    };
    queue.then(|| object_key(&change.latest().metadata))
}

/// Keys a slice change queues: the tracker rules of ES-2.1, applied to mirrored slices.
pub fn keys_for_slice(change: &Change<EndpointSlice>, tracker: &mut SliceTracker) -> Vec<String> {
    match change {
        Change::Added(s) => triggers::services_for_slice_add(s, tracker, CONTROLLER_NAME),
        Change::Updated { old, new } => {
            triggers::services_for_slice_update(old, new, tracker, CONTROLLER_NAME)
        }
        Change::Deleted(s) => triggers::services_for_slice_delete(s, tracker, CONTROLLER_NAME),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::core::fixtures::{as_stored, endpoints, svc};
    use crate::core::keys::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME, LABEL_SKIP_MIRROR};
    use std::collections::BTreeMap;

    #[test]
    fn rule_5_1_service_events_queue_selectorless_services_and_selector_flips() {
        let with = Arc::new(svc("a").build());
        let without = Arc::new(svc("a").no_selector().build());
        assert_eq!(
            keys_for_service(&Change::Added(without.clone())).as_deref(),
            Some("default/a")
        );
        assert_eq!(keys_for_service(&Change::Added(with.clone())), None);
        assert_eq!(
            keys_for_service(&Change::Deleted(without.clone())).as_deref(),
            Some("default/a")
        );
        assert_eq!(
            keys_for_service(&Change::Updated {
                old: with.clone(),
                new: without.clone()
            })
            .as_deref(),
            Some("default/a")
        );
        assert_eq!(
            keys_for_service(&Change::Updated {
                old: with.clone(),
                new: with
            }),
            None
        );
    }

    #[test]
    fn rule_5_1_endpoints_events_queue_mirrorable_objects() {
        let plain = Arc::new(endpoints("e").build());
        let mut skip = endpoints("e").build();
        skip.metadata.labels = Some(BTreeMap::from([(
            LABEL_SKIP_MIRROR.to_owned(),
            "true".to_owned(),
        )]));
        let skip = Arc::new(skip);
        assert_eq!(
            keys_for_endpoints(&Change::Added(plain.clone())).as_deref(),
            Some("default/e")
        );
        assert_eq!(keys_for_endpoints(&Change::Added(skip.clone())), None);
        // Becoming skip-mirror must still queue, so the mirrored slices go away.
        assert_eq!(
            keys_for_endpoints(&Change::Updated {
                old: plain,
                new: skip.clone()
            })
            .as_deref(),
            Some("default/e")
        );
        assert_eq!(keys_for_endpoints(&Change::Deleted(skip)), None);
    }

    fn mirrored(svc_name: &str) -> Arc<EndpointSlice> {
        let mut s = EndpointSlice::default();
        s.metadata.namespace = Some("default".into());
        s.metadata.labels = Some(BTreeMap::from([
            (LABEL_SERVICE_NAME.to_owned(), svc_name.to_owned()),
            (LABEL_MANAGED_BY.to_owned(), CONTROLLER_NAME.to_owned()),
        ]));
        Arc::new(as_stored(s, "m1"))
    }

    #[test]
    fn rule_5_1_mirrored_slice_events_follow_the_tracker() {
        let mut t = SliceTracker::default();
        let s = mirrored("e");
        assert_eq!(
            keys_for_slice(&Change::Added(s.clone()), &mut t),
            ["default/e"]
        );
        t.record_written("default/e", &s);
        assert!(keys_for_slice(&Change::Added(s.clone()), &mut t).is_empty());
        assert!(
            keys_for_slice(
                &Change::Updated {
                    old: s.clone(),
                    new: s.clone()
                },
                &mut t
            )
            .is_empty()
        );
        // Our own delete is expected once; a foreign delete re-queues.
        t.record_deleted("default/e", "uid-slice-m1");
        assert!(keys_for_slice(&Change::Deleted(s.clone()), &mut t).is_empty());
        t.record_written("default/e", &s);
        assert_eq!(keys_for_slice(&Change::Deleted(s), &mut t), ["default/e"]);
    }
}
