//! Stale-informer protection (ES-2.10).
//!
//! After the controller writes a slice, its own cache may still hold the old
//! version for a while. Reconciling from that stale view would duplicate or
//! undo the write, so the tracker remembers, per Service, the generation each
//! written slice must reach (or that it must disappear) and the shell refuses
//! to sync a Service until its cache has caught up.

use std::collections::HashMap;

use k8s_openapi::api::discovery::v1::EndpointSlice;

/// What the controller expects to see for one slice UID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expectation {
    Generation(i64),
    Deleted,
}

/// Per Service key (`namespace/name`), slice UID → expectation.
#[derive(Debug, Default, Clone)]
pub struct SliceTracker {
    services: HashMap<String, HashMap<String, Expectation>>,
}

fn uid(slice: &EndpointSlice) -> Option<&str> {
    slice.metadata.uid.as_deref()
}

fn generation(slice: &EndpointSlice) -> i64 {
    slice.metadata.generation.unwrap_or(0)
}

impl SliceTracker {
    /// Records a slice the API returned from a create or update.
    pub fn record_written(&mut self, service_key: &str, written: &EndpointSlice) {
        if let Some(uid) = uid(written) {
            self.services
                .entry(service_key.to_owned())
                .or_default()
                .insert(uid.to_owned(), Expectation::Generation(generation(written)));
        }
    }

    /// Records a successful delete.
    pub fn record_deleted(&mut self, service_key: &str, slice_uid: &str) {
        self.services
            .entry(service_key.to_owned())
            .or_default()
            .insert(slice_uid.to_owned(), Expectation::Deleted);
    }

    /// Whether the listed slices of a Service are older than what we wrote:
    /// a slice tracked at a greater generation, a slice expected deleted, or a
    /// tracked slice missing from the list.
    pub fn is_stale(&self, service_key: &str, listed: &[&EndpointSlice]) -> bool {
        let Some(tracked) = self.services.get(service_key) else {
            return false;
        };
        let mut seen = 0usize;
        for slice in listed {
            let Some(expect) = uid(slice).and_then(|u| tracked.get(u)) else {
                continue;
            };
            match expect {
                Expectation::Deleted => return true,
                Expectation::Generation(g) if *g > generation(slice) => return true,
                Expectation::Generation(_) => seen += 1,
            }
        }
        let expected_present = tracked
            .values()
            .filter(|e| matches!(e, Expectation::Generation(_)))
            .count();
        seen < expected_present
    }

    /// Whether a slice event should trigger a sync of its Service: the
    /// Service or the slice is untracked, or the slice is newer than tracked.
    pub fn should_sync(&self, service_key: &str, slice: &EndpointSlice) -> bool {
        let Some(tracked) = self.services.get(service_key) else {
            return true;
        };
        match uid(slice).and_then(|u| tracked.get(u)) {
            None => true,
            Some(Expectation::Generation(g)) => generation(slice) > *g,
            Some(Expectation::Deleted) => false,
        }
    }

    /// Handles an observed slice deletion; returns true when it was expected
    /// (so the Service need not be re-queued).
    pub fn observe_deleted(&mut self, service_key: &str, slice_uid: &str) -> bool {
        let Some(tracked) = self.services.get_mut(service_key) else {
            return false;
        };
        matches!(tracked.remove(slice_uid), Some(Expectation::Deleted))
    }

    /// Whether the slice is tracked for the Service at all.
    pub fn is_tracked(&self, service_key: &str, slice_uid: &str) -> bool {
        self.services
            .get(service_key)
            .is_some_and(|t| t.contains_key(slice_uid))
    }

    /// Drops a Service observed deleted.
    pub fn forget_service(&mut self, service_key: &str) {
        self.services.remove(service_key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use rstest::rstest;

    fn slice(uid: &str, generation: i64) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                generation: Some(generation),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            ..EndpointSlice::default()
        }
    }

    #[rstest]
    #[case::informer_behind(10, 12, true)]
    #[case::informer_equal(10, 10, false)]
    #[case::informer_ahead(10, 1, false)]
    fn rule_2_10_stale_when_tracked_generation_is_greater(
        #[case] informer: i64,
        #[case] tracked: i64,
        #[case] stale: bool,
    ) {
        let mut t = SliceTracker::default();
        t.record_written("ns/svc", &slice("u1", tracked));
        assert_eq!(t.is_stale("ns/svc", &[&slice("u1", informer)]), stale);
    }

    #[test]
    fn rule_2_10_stale_when_deleted_slice_still_listed() {
        let mut t = SliceTracker::default();
        t.record_deleted("ns/svc", "u1");
        assert!(t.is_stale("ns/svc", &[&slice("u1", 1)]));
        assert!(!t.is_stale("ns/svc", &[]));
    }

    #[test]
    fn rule_2_10_stale_when_tracked_slice_missing_from_list() {
        let mut t = SliceTracker::default();
        t.record_written("ns/svc", &slice("u1", 1));
        t.record_written("ns/svc", &slice("u2", 1));
        assert!(t.is_stale("ns/svc", &[&slice("u1", 1)]));
        assert!(!t.is_stale("ns/svc", &[&slice("u1", 1), &slice("u2", 1)]));
    }

    #[test]
    fn rule_2_10_untracked_service_is_never_stale_and_always_syncs() {
        let t = SliceTracker::default();
        assert!(!t.is_stale("ns/svc", &[&slice("u1", 1)]));
        assert!(t.should_sync("ns/svc", &slice("u1", 1)));
    }

    #[test]
    fn rule_2_10_should_sync_only_for_newer_or_unknown_slices() {
        let mut t = SliceTracker::default();
        t.record_written("ns/svc", &slice("u1", 3));
        assert!(!t.should_sync("ns/svc", &slice("u1", 3)));
        assert!(!t.should_sync("ns/svc", &slice("u1", 2)));
        assert!(t.should_sync("ns/svc", &slice("u1", 4)));
        assert!(t.should_sync("ns/svc", &slice("u9", 1)));
    }

    #[test]
    fn rule_2_10_expected_deletion_is_consumed_once() {
        let mut t = SliceTracker::default();
        t.record_deleted("ns/svc", "u1");
        assert!(t.observe_deleted("ns/svc", "u1"));
        assert!(!t.observe_deleted("ns/svc", "u1"));
        t.forget_service("ns/svc");
        assert!(!t.is_tracked("ns/svc", "u1"));
    }
}
