//! What `svcplane migrate` leaves in the cluster for others to read: the annotation on
//! each Service it recreated, and its journal ConfigMaps (read back by `explain range`
//! to show a move in progress).
//!
//! Services that `svcplane migrate` just recreated go to the front of the controllers'
//! queues (svcplane's own rule; upstream queues every Service alike).
//!
//! Between the delete of a migrated Service and its EndpointSlices being written again,
//! its clients have nothing to reach: every other queued key can wait a few
//! milliseconds more, this one cannot. `migrate` marks what it creates with the
//! [`MIGRATED_FROM`] annotation; a Service that *appears* with it, created moments ago,
//! is such a recreate. The annotation stays on the object, so a controller starting
//! later (whose first list adds every Service) must not count old ones: only a Service
//! created within [`RECENT`] of the watch event goes first.

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use super::change::Change;

/// Annotation on a Service recreated by `svcplane migrate`: the ClusterIPs it had
/// before (comma-separated).
pub const MIGRATED_FROM: &str = "svcplane.io/migrated-from";

/// How recently a Service must have been created to count as just recreated.
/// `creationTimestamp` has whole seconds and the API server's clock is not ours, so
/// this is generous; a controller restarted within it merely syncs a few migrated
/// Services first once more.
pub const RECENT: SignedDuration = SignedDuration::from_secs(120);

/// Whether `change` is a Service `migrate` has just recreated, which the controllers
/// sync before anything else already queued. `now` is the controller's clock.
pub fn goes_first(change: &Change<Service>, now: Timestamp) -> bool {
    let Change::Added(svc) = change else {
        return false;
    };
    let m = &svc.metadata;
    if !m
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIGRATED_FROM))
    {
        return false;
    }
    let Some(created) = m.creation_timestamp.as_ref() else {
        return false;
    };
    // Negative when the API server's clock is ahead of ours: just created too.
    now.duration_since(created.0) <= RECENT
}

/// Whether `svc` has a ClusterIP but no selector: no controller derives its endpoints,
/// so any it has are kept by someone else, and deleting it takes them along (the
/// Endpoints controller deletes its Endpoints object, the garbage collector the
/// EndpointSlices it owns). `migrate` must look at those before recreating it.
pub fn endpoints_kept_by_others(svc: &Service) -> bool {
    use super::keys::{CLUSTER_IP_NONE, SERVICE_TYPE_EXTERNAL_NAME};
    svc.spec.as_ref().is_some_and(|s| {
        s.selector.as_ref().is_none_or(|m| m.is_empty())
            && s.type_.as_deref() != Some(SERVICE_TYPE_EXTERNAL_NAME)
            && s.cluster_ip.as_deref() != Some(CLUSTER_IP_NONE)
    })
}

/// Label on a journal ConfigMap of `migrate --apply`.
pub const JOURNAL_LABEL: &str = "svcplane.io/migrate-journal";

/// Annotations on a journal ConfigMap: the ServiceCIDRs it moves Services from and to.
pub const JOURNAL_FROM: &str = "svcplane.io/migrate-from";
pub const JOURNAL_TO: &str = "svcplane.io/migrate-to";

/// A move in progress, as its journal shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MoveInProgress {
    /// The journal ConfigMap, `namespace/name`.
    pub journal: String,
    /// The ServiceCIDR it leaves, and the one it moves to.
    pub from: String,
    pub to: String,
    /// Services deleted and not created yet (`namespace/name`): they exist nowhere but
    /// in the journal until `migrate` (or its rerun) creates them.
    pub in_flight: Vec<String>,
}

/// The journal key of Service `namespace/name` (a ConfigMap data key:
/// `[-._a-zA-Z0-9]+`; a namespace has no dot, so the first one splits it).
pub fn journal_key(namespace: &str, name: &str) -> String {
    format!("{namespace}.{name}")
}

/// The move `cm` journals; `None` when it is not a journal (label or annotations
/// missing).
pub fn move_in_progress(cm: &ConfigMap) -> Option<MoveInProgress> {
    let m = &cm.metadata;
    m.labels.as_ref()?.get(JOURNAL_LABEL)?;
    let annotations = m.annotations.as_ref()?;
    let in_flight = cm
        .data
        .iter()
        .flat_map(|d| d.keys())
        .map(|k| match k.split_once('.') {
            Some((ns, name)) => format!("{ns}/{name}"),
            None => k.clone(),
        })
        .collect();
    Some(MoveInProgress {
        journal: format!(
            "{}/{}",
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default()
        ),
        from: annotations.get(JOURNAL_FROM)?.clone(),
        to: annotations.get(JOURNAL_TO)?.clone(),
        in_flight,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn service(annotated: bool, created: Option<Timestamp>) -> Arc<Service> {
        let mut s = Service::default();
        s.metadata.name = Some("web".into());
        if annotated {
            s.metadata.annotations =
                Some([(MIGRATED_FROM.to_owned(), "10.0.0.7".to_owned())].into());
        }
        s.metadata.creation_timestamp = created.map(Time);
        Arc::new(s)
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    #[test]
    fn a_service_migrate_just_recreated_goes_first() {
        let now = at(100);
        assert!(goes_first(&Change::Added(service(true, Some(at(99)))), now));
        assert!(goes_first(
            &Change::Added(service(true, Some(at(-20)))),
            now
        ));
    }

    #[test]
    fn a_service_created_ahead_of_the_controllers_clock_still_goes_first() {
        assert!(goes_first(
            &Change::Added(service(true, Some(at(103)))),
            at(100)
        ));
    }

    #[test]
    fn an_old_migrated_service_seen_by_a_starting_controller_does_not_go_first() {
        let now = at(1000);
        assert!(!goes_first(
            &Change::Added(service(true, Some(at(10)))),
            now
        ));
        assert!(!goes_first(&Change::Added(service(true, None)), now));
    }

    #[test]
    fn a_journal_names_its_move_and_the_services_between_delete_and_create() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "kube-system", "name": "svcplane-migrate-a-to-b",
                         "labels": {JOURNAL_LABEL: "true"},
                         "annotations": {JOURNAL_FROM: "a", JOURNAL_TO: "b"}},
            "data": {journal_key("shop", "web.v2"): "{}", journal_key("db", "pg"): "{}"}
        }))
        .unwrap();
        assert_eq!(
            move_in_progress(&cm),
            Some(MoveInProgress {
                journal: "kube-system/svcplane-migrate-a-to-b".into(),
                from: "a".into(),
                to: "b".into(),
                in_flight: vec!["db/pg".into(), "shop/web.v2".into()],
            })
        );
        let mut other = cm.clone();
        other.metadata.labels = None;
        assert_eq!(move_in_progress(&other), None, "not a journal");
        let mut other = cm;
        other.metadata.annotations = None;
        assert_eq!(move_in_progress(&other), None, "no from/to");
    }

    #[test]
    fn only_a_service_with_a_cluster_ip_and_no_selector_has_endpoints_kept_by_others() {
        let svc = |spec: serde_json::Value| -> Service {
            serde_json::from_value(serde_json::json!({"spec": spec})).unwrap()
        };
        assert!(endpoints_kept_by_others(&svc(
            serde_json::json!({"clusterIP": "10.0.0.1"})
        )));
        assert!(endpoints_kept_by_others(&svc(
            serde_json::json!({"clusterIP": "10.0.0.1", "selector": {}})
        )));
        for spec in [
            serde_json::json!({"clusterIP": "10.0.0.1", "selector": {"app": "web"}}),
            serde_json::json!({"clusterIP": "None"}),
            serde_json::json!({"type": "ExternalName", "externalName": "db.example.com"}),
        ] {
            assert!(!endpoints_kept_by_others(&svc(spec.clone())), "{spec}");
        }
    }

    #[test]
    fn only_the_arrival_of_a_migrated_service_goes_first() {
        let now = at(100);
        assert!(!goes_first(
            &Change::Added(service(false, Some(at(99)))),
            now
        ));
        let s = service(true, Some(at(99)));
        let update = Change::Updated {
            old: s.clone(),
            new: s.clone(),
        };
        assert!(!goes_first(&update, now));
        assert!(!goes_first(&Change::Deleted(s), now));
    }
}
