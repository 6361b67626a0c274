//! `explain pod`: every Service of the Pod's namespace that selects it (or
//! nearly does), and what each does with it.
//!
//! Each Service is explained in full by [`explain_service`] — the same run
//! `explain service` makes — and the Pod's verdict is taken from it, so the
//! two forms can never disagree.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use crate::core::pod::{self, PodView};
use crate::dump::snapshot::{Key, Snapshot};

use super::service::explain_service;
use super::verdict::{PodVerdict, Selection, selection};

/// Everything `explain pod` says.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The Ready condition is exactly `True`.
    pub ready: bool,
    pub terminating: bool,
    pub ips: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// One entry per Service that selects the Pod, then per near miss.
    pub services: Vec<ServiceVerdict>,
}

/// What one Service does with the Pod.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceVerdict {
    pub service: String,
    pub selected: bool,
    #[serde(flatten)]
    pub verdict: PodVerdict,
}

/// Explains Pod `namespace/name`; `None` when the snapshot has no such Pod.
pub fn explain_pod(
    snapshot: &Snapshot,
    namespace: &str,
    name: &str,
    max_endpoints_per_slice: usize,
) -> Option<PodReport> {
    let key = Key {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    let p: &Arc<Pod> = snapshot.pods.get(&key)?;
    let mut services = Vec::new();
    for (skey, service) in snapshot
        .services
        .range(
            Key {
                namespace: namespace.to_owned(),
                name: String::new(),
            }..,
        )
        .take_while(|(k, _)| k.namespace == namespace)
    {
        let selected = match selection(service, p) {
            Selection::Selected => true,
            Selection::NearMiss(_) => false,
            Selection::Unrelated => continue,
        };
        let verdict = explain_service(snapshot, namespace, &skey.name, max_endpoints_per_slice)
            .and_then(|report| report.pod(name).cloned());
        // A selected Pod without a verdict belongs to a Service the
        // controllers do not handle (ExternalName): nothing to say.
        if let Some(verdict) = verdict {
            services.push(ServiceVerdict {
                service: skey.to_string(),
                selected,
                verdict,
            });
        }
    }
    // Selecting Services first, each group by name (the map's order).
    services.sort_by_key(|s| !s.selected);
    Some(PodReport {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        phase: p.phase().map(str::to_owned),
        ready: pod::is_ready(p.as_ref()),
        terminating: pod::is_terminating(p.as_ref()),
        ips: p.pod_ips().map(str::to_owned).collect(),
        node: p.node_name().map(str::to_owned),
        services,
    })
}
