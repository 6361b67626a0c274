//! Which keys the Endpoints controller syncs (endpoints-spec §4.1) and the
//! stale-cache guard (§4.7).

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

/// Remembers resourceVersions the controller has already replaced (§4.7):
/// after an update that changed the resourceVersion, a cache still returning
/// the old one is stale and the sync must be retried, not acted upon.
#[derive(Debug, Default, Clone)]
pub struct StaleEndpointsTracker {
    replaced: HashMap<String, String>,
}

impl StaleEndpointsTracker {
    /// Records a successful update of `key` from `old` to `new`.
    pub fn record_update(&mut self, key: &str, old: Option<&str>, new: Option<&str>) {
        if let Some(old) = old.filter(|o| Some(*o) != new) {
            self.replaced.insert(key.to_owned(), old.to_owned());
        }
    }

    /// Whether the cached object is one the controller already replaced.
    pub fn is_stale(&self, key: &str, cached: &Endpoints) -> bool {
        match (
            self.replaced.get(key),
            cached.metadata.resource_version.as_deref(),
        ) {
            (Some(old), Some(rv)) => old == rv,
            _ => false,
        }
    }

    /// Forgets a key whose Service was deleted.
    pub fn forget(&mut self, key: &str) {
        self.replaced.remove(key);
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
        assert!(!t.is_stale("ns/a", &ep("a", false, "5")));
        t.record_update("ns/a", Some("5"), Some("6"));
        assert!(t.is_stale("ns/a", &ep("a", false, "5")));
        assert!(!t.is_stale("ns/a", &ep("a", false, "6")));
        // A no-op update (same resourceVersion) is not remembered.
        t.record_update("ns/b", Some("7"), Some("7"));
        assert!(!t.is_stale("ns/b", &ep("b", false, "7")));
        t.forget("ns/a");
        assert!(!t.is_stale("ns/a", &ep("a", false, "5")));
    }
}
