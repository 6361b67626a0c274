//! From watch changes to queued keys, for every enabled controller.
//!
//! One watch per resource feeds all controllers that read it, so a Pod change is
//! mapped to Services once (through the Service store's selector index, never a scan
//! of the namespace) and the keys go to the EndpointSlice and Endpoints controllers
//! alike. Pods whose IPs cannot be parsed get a Warning event here, once per change,
//! because the reconcilers skip such addresses silently (ES-1.4).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::endpoints::EndpointsController;
use super::endpointslice::EndpointSliceController;
use super::mirroring::MirroringController;
use crate::core::cached_pod::CachedPod;
use crate::core::endpointslice::triggers;
use crate::core::event::PlannedEvent;
use crate::core::ip;
use crate::core::pod::PodView;
use crate::shell::cache::Cache;
use crate::shell::events::{EventRecord, EventRecorder, object_reference};
use crate::shell::watch::Change;

/// Reason of the event on a Pod with an unparseable IP (svcplane's own).
pub const REASON_INVALID_POD_IP: &str = "InvalidPodIP";

/// The enabled controllers' event handlers.
#[derive(Debug, Clone)]
pub struct Dispatch {
    pub cache: Arc<Cache>,
    pub endpoint_slice: Option<Arc<EndpointSliceController>>,
    pub endpoints: Option<Arc<EndpointsController>>,
    pub mirroring: Option<Arc<MirroringController>>,
    pub events: EventRecorder,
}

impl Dispatch {
    pub fn service(&self, change: &Change<Service>) {
        if let Some(c) = &self.endpoint_slice {
            c.on_service(change);
        }
        if let Some(c) = &self.endpoints {
            c.on_service(change);
        }
        if let Some(c) = &self.mirroring {
            c.on_service(change);
        }
    }

    /// The Services a Pod change affects (ES-2.1), from the selector index.
    pub fn services_for_pod(&self, change: &Change<CachedPod>) -> Vec<String> {
        let services = self.cache.services.read();
        match change {
            Change::Added(p) | Change::Deleted(p) => services
                .matching(&**p)
                .iter()
                .map(|s| triggers::service_key(s))
                .collect(),
            Change::Updated { old, new } => {
                let mut candidates = services.matching(&**old);
                candidates.extend(services.matching(&**new));
                let refs: Vec<&Service> = candidates.iter().map(Arc::as_ref).collect();
                triggers::services_for_pod_update(&**old, &**new, &refs)
            }
        }
    }

    pub fn pod(&self, change: &Change<CachedPod>) {
        if self.endpoint_slice.is_none() && self.endpoints.is_none() {
            return;
        }
        self.check_pod_ips(change);
        let keys = self.services_for_pod(change);
        if keys.is_empty() {
            return;
        }
        if let Some(c) = &self.endpoints {
            c.on_pod_keys(keys.clone());
        }
        if let Some(c) = &self.endpoint_slice {
            c.on_pod_keys(keys);
        }
    }

    fn check_pod_ips(&self, change: &Change<CachedPod>) {
        let pod = match change {
            Change::Added(p) => p,
            Change::Updated { old, new } if !old.pod_ips().eq(new.pod_ips()) => new,
            _ => return,
        };
        let bad: Vec<&str> = pod
            .pod_ips()
            .filter(|a| ip::parse_sloppy(a).is_none())
            .collect();
        if bad.is_empty() {
            return;
        }
        self.events.record(EventRecord::from_planned(
            object_reference("v1", "Pod", pod.namespace(), pod.name(), pod.uid()),
            super::endpointslice::COMPONENT,
            "Reconcile",
            &PlannedEvent::warning(
                REASON_INVALID_POD_IP,
                format!(
                    "status.podIPs has unparseable address(es) {}; left out of EndpointSlices and Endpoints",
                    bad.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ")
                ),
            ),
        ));
    }

    pub fn node(&self, change: &Change<Node>) {
        let Some(c) = &self.endpoint_slice else {
            return;
        };
        c.on_node(change);
        // svcplane addition: endpoints carry their Node's zone, so a Node that appears
        // (Pods on it were skipped as "Node Not Found") or changes zone re-syncs the
        // Services with Pods on it. Upstream waits for the next unrelated event.
        let zone = |n: &Node| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::core::keys::LABEL_ZONE))
                .cloned()
        };
        let node = match change {
            Change::Added(n) => n,
            Change::Updated { old, new } if zone(old) != zone(new) => new,
            _ => return,
        };
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let pods = self.cache.pods.read().on_node(name);
        if pods.is_empty() {
            return;
        }
        let mut keys: Vec<String> = {
            let services = self.cache.services.read();
            pods.iter()
                .flat_map(|p| services.matching(&**p))
                .map(|s| triggers::service_key(&s))
                .collect()
        };
        keys.sort();
        keys.dedup();
        c.on_pod_keys(keys);
    }

    pub fn slice(&self, change: &Change<EndpointSlice>) {
        if let Some(c) = &self.endpoint_slice {
            c.on_slice(change);
        }
        if let Some(c) = &self.mirroring {
            c.on_slice(change);
        }
    }

    pub fn endpoints(&self, change: &Change<Endpoints>) {
        if let Some(c) = &self.endpoints {
            c.on_endpoints(change);
        }
        if let Some(c) = &self.mirroring {
            c.on_endpoints(change);
        }
    }
}
