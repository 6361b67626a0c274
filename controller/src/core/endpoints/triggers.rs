//! Which keys the Endpoints controller syncs (EP-4.1) and the
//! stale-cache guard (EP-4.7).

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{Endpoints, Service};

use crate::core::keys::ANNOTATION_LEADER;

fn key(namespace: Option<&str>, name: Option<&str>) -> String {
    format!(
        "{}/{}",
        namespace.unwrap_or_default(),
        name.unwrap_or_default()
    )
}

/// Whether an Endpoints object is a leader-election record (annotation
/// `control-plane.alpha.kubernetes.io/leader`, any value).
pub fn is_leader_record(e: &Endpoints) -> bool {
    e.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION_LEADER))
}

/// The keys queued once at start-up: every Endpoints object except
/// leader-election records, so leftovers of deleted Services get deleted.
pub fn startup_keys<'e>(endpoints: impl IntoIterator<Item = &'e Endpoints>) -> Vec<String> {
    endpoints
        .into_iter()
        .filter(|e| !is_leader_record(e))
        .map(|e| key(e.metadata.namespace.as_deref(), e.metadata.name.as_deref()))
        .collect()
}

/// The keys a first sync processes: every Service plus the start-up scan,
/// sorted and deduplicated.
pub fn first_sync_keys<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    endpoints: impl IntoIterator<Item = &'a Endpoints>,
) -> Vec<String> {
    let mut keys: BTreeSet<String> = services
        .into_iter()
        .map(|s| key(s.metadata.namespace.as_deref(), s.metadata.name.as_deref()))
        .collect();
    keys.extend(startup_keys(endpoints));
    keys.into_iter().collect()
}

/// What the controller last did to one Endpoints object.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Last {
    /// Updated it away from this resourceVersion (EP-4.7).
    Replaced(String),
    /// Created it: a cache without it is behind.
    Created,
    /// Deleted the object with this uid: a cache still holding it is behind.
    Deleted(Option<String>),
}

/// Remembers the controller's own last write per key, so a sync never acts on a
/// cache that has not seen it yet. Upstream keeps only the update case (EP-4.7: after
/// an update that changed the resourceVersion, a cache still returning the old one
/// is stale); svcplane adds creates and deletes, where a lagging cache would
/// otherwise make it create twice (409 AlreadyExists and a spurious
/// `FailedToCreateEndpoint` event) or delete twice.
#[derive(Debug, Default, Clone)]
pub struct StaleEndpointsTracker {
    last: HashMap<String, Last>,
}

impl StaleEndpointsTracker {
    /// Records a successful update of `key` from `old` to `new`.
    pub fn record_update(&mut self, key: &str, old: Option<&str>, new: Option<&str>) {
        match old.filter(|o| Some(*o) != new) {
            Some(old) => {
                self.last
                    .insert(key.to_owned(), Last::Replaced(old.to_owned()));
            }
            None => {
                self.last.remove(key);
            }
        }
    }

    /// Records a successful create of `key`.
    pub fn record_create(&mut self, key: &str) {
        self.last.insert(key.to_owned(), Last::Created);
    }

    /// Records a successful delete of `key` (the object had `uid`).
    pub fn record_delete(&mut self, key: &str, uid: Option<&str>) {
        self.last
            .insert(key.to_owned(), Last::Deleted(uid.map(str::to_owned)));
    }

    /// Whether the cache (`cached`, the object or its absence) has not yet seen
    /// the controller's last write of `key`.
    pub fn is_stale(&self, key: &str, cached: Option<&Endpoints>) -> bool {
        match (self.last.get(key), cached) {
            (Some(Last::Replaced(old)), Some(e)) => {
                e.metadata.resource_version.as_deref() == Some(old.as_str())
            }
            (Some(Last::Created), None) => true,
            (Some(Last::Deleted(uid)), Some(e)) => {
                uid.is_none() || e.metadata.uid.as_deref() == uid.as_deref()
            }
            _ => false,
        }
    }

    /// Forgets a key whose Service was deleted.
    pub fn forget(&mut self, key: &str) {
        self.last.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn ep(name: &str, leader: bool, rv: &str) -> Endpoints {
        Endpoints {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                annotations: leader
                    .then(|| BTreeMap::from([(ANNOTATION_LEADER.to_owned(), "{}".to_owned())])),
                ..ObjectMeta::default()
            },
            ..Endpoints::default()
        }
    }

    #[test]
    fn rule_4_1_startup_queues_every_endpoints_but_leader_records() {
        let list = [
            ep("a", false, "1"),
            ep("kcm", true, "1"),
            ep("b", false, "1"),
        ];
        assert_eq!(startup_keys(&list), vec!["ns/a", "ns/b"]);
        let svc = crate::core::fixtures::svc("c").namespace("ns").build();
        assert_eq!(first_sync_keys([&svc], &list), vec!["ns/a", "ns/b", "ns/c"]);
    }

    #[test]
    fn rule_4_7_stale_guard_flags_the_replaced_resource_version() {
        let mut t = StaleEndpointsTracker::default();
        assert!(!t.is_stale("ns/a", Some(&ep("a", false, "5"))));
        t.record_update("ns/a", Some("5"), Some("6"));
        assert!(t.is_stale("ns/a", Some(&ep("a", false, "5"))));
        assert!(!t.is_stale("ns/a", Some(&ep("a", false, "6"))));
        // A no-op update (same resourceVersion) is not remembered.
        t.record_update("ns/b", Some("7"), Some("7"));
        assert!(!t.is_stale("ns/b", Some(&ep("b", false, "7"))));
        t.forget("ns/a");
        assert!(!t.is_stale("ns/a", Some(&ep("a", false, "5"))));
    }

    #[test]
    fn stale_guard_also_covers_our_creates_and_deletes() {
        let mut t = StaleEndpointsTracker::default();
        assert!(!t.is_stale("ns/a", None));
        t.record_create("ns/a");
        assert!(t.is_stale("ns/a", None), "created, not yet seen");
        assert!(!t.is_stale("ns/a", Some(&ep("a", false, "1"))));
        let mut gone = ep("a", false, "1");
        gone.metadata.uid = Some("u1".into());
        t.record_delete("ns/a", Some("u1"));
        assert!(t.is_stale("ns/a", Some(&gone)), "deleted, still cached");
        assert!(!t.is_stale("ns/a", None));
        let mut recreated = gone.clone();
        recreated.metadata.uid = Some("u2".into());
        assert!(
            !t.is_stale("ns/a", Some(&recreated)),
            "someone else re-created it"
        );
    }
}
