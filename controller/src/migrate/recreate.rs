//! What `migrate --apply` writes for one Service, and how it reads its own journal
//! (pure).
//!
//! A moved Service is the same object under the same name with new ClusterIPs: its
//! labels, annotations, finalizers, owner references and the rest of its spec (its
//! nodePorts included) are kept; what the API server owns (uid, resourceVersion,
//! timestamps, managed fields, status) is dropped. Between the delete of the old object
//! and the create of the new one the Service exists nowhere but in the journal: a
//! ConfigMap entry written before the delete, holding the object to create, so that an
//! interrupted run is finished by the next one ([`Resume`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use serde::{Deserialize, Serialize};

/// The annotation a moved Service gets (the controllers sync such a Service first).
pub use crate::core::migrated::MIGRATED_FROM;

pub use crate::core::migrated::{JOURNAL_FROM, JOURNAL_LABEL, JOURNAL_TO, journal_key};

/// One Service between its delete and its create.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JournalEntry {
    /// The uid of the object being replaced (deleted with it as precondition).
    pub old_uid: String,
    /// The object to create.
    pub service: Service,
}

/// The journal ConfigMap's name for a move from `from` to `to` (ServiceCIDR names).
pub fn journal_name(from: &str, to: &str) -> String {
    format!("svcplane-migrate-{from}-to-{to}")
}

/// The object that replaces `old`: the same but its ClusterIPs, which become `new_ips`.
pub fn recreated(old: &Service, new_ips: &[String]) -> Service {
    let mut svc = Service::default();
    let m = &old.metadata;
    svc.metadata.name.clone_from(&m.name);
    svc.metadata.namespace.clone_from(&m.namespace);
    svc.metadata.labels.clone_from(&m.labels);
    svc.metadata.finalizers.clone_from(&m.finalizers);
    svc.metadata
        .owner_references
        .clone_from(&m.owner_references);
    let mut annotations: BTreeMap<String, String> = m.annotations.clone().unwrap_or_default();
    // kubectl's record of the last apply names the old address: keep it, it is the
    // user's, but say where the Service came from.
    let old_ips = old
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ips.clone())
        .unwrap_or_default();
    annotations.insert(MIGRATED_FROM.to_owned(), old_ips.join(","));
    svc.metadata.annotations = Some(annotations);
    let mut spec = old.spec.clone().unwrap_or_default();
    spec.cluster_ip = new_ips.first().cloned();
    spec.cluster_ips = Some(new_ips.to_vec());
    svc.spec = Some(spec);
    svc
}

/// What to do with a journal entry, given what the cluster holds under its name now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// The old object is still there: the move starts over (delete, then create).
    Redo,
    /// Nothing is there: the delete happened, the create did not; create it.
    Create,
    /// Another object is there: the create happened (or someone recreated it); only
    /// the journal entry is left to remove.
    Done,
}

/// The step that finishes `entry`, when the object under its name has uid `current`
/// (`None`: no object).
pub fn resume(entry: &JournalEntry, current: Option<&str>) -> Resume {
    match current {
        None => Resume::Create,
        Some(uid) if uid == entry.old_uid => Resume::Redo,
        Some(_) => Resume::Done,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn stored() -> Service {
        serde_json::from_value(json!({
            "metadata": {
                "name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                "creationTimestamp": "2026-11-01T00:00:00Z", "generation": 1,
                "labels": {"app": "web"}, "annotations": {"team": "a"},
                "finalizers": ["example.com/keep"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "x"}],
                "managedFields": [{"manager": "kubectl"}]
            },
            "spec": {
                "type": "NodePort", "clusterIP": "10.202.0.40", "clusterIPs": ["10.202.0.40"],
                "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                "selector": {"app": "web"},
                "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": 30080}]
            },
            "status": {"loadBalancer": {}}
        }))
        .unwrap()
    }

    #[test]
    fn a_recreated_service_keeps_everything_but_its_cluster_ips_and_what_the_server_owns() {
        let new = recreated(&stored(), &["10.204.0.77".to_owned()]);
        let v = serde_json::to_value(&new).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {
                    "name": "web", "namespace": "shop",
                    "labels": {"app": "web"},
                    "annotations": {"team": "a", MIGRATED_FROM: "10.202.0.40"},
                    "finalizers": ["example.com/keep"],
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "x"}]
                },
                "spec": {
                    "type": "NodePort", "clusterIP": "10.204.0.77", "clusterIPs": ["10.204.0.77"],
                    "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                    "selector": {"app": "web"},
                    "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": 30080}]
                }
            })
        );
    }

    #[test]
    fn a_journal_entry_resumes_by_what_holds_the_name_now() {
        let entry = JournalEntry {
            old_uid: "u1".into(),
            service: recreated(&stored(), &["10.204.0.77".to_owned()]),
        };
        assert_eq!(resume(&entry, Some("u1")), Resume::Redo);
        assert_eq!(resume(&entry, None), Resume::Create);
        assert_eq!(resume(&entry, Some("u2")), Resume::Done);
        let text = serde_json::to_string(&entry).unwrap();
        assert_eq!(serde_json::from_str::<JournalEntry>(&text).unwrap(), entry);
        assert_eq!(journal_key("shop", "web"), "shop.web");
    }
}
