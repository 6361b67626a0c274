//! From watch changes to queued keys, for every running controller.
//!
//! One consumer per watched resource hands each change to every controller, so a
//! resource is watched once however many controllers read it. A Pod change is mapped
//! to Services once (through the Service store's selector index, never a scan of the
//! namespace) and the keys go to every controller that reads Pods. Pods whose IPs
//! cannot be parsed get a Warning event here, once per change (the reconcilers skip
//! such addresses; the rule is `core::pod::invalid_pod_ip_event`, shared with `plan`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};

use super::Controller;
use crate::core::endpointslice::triggers;
use crate::core::keys::object_key;
use crate::core::pod::{PodView, invalid_pod_ip_event, update_withdraws};
use crate::shell::cache::{Cache, CachedPod, Consumer};
use crate::shell::events::{EventRecord, EventRecorder, object_reference};
use crate::shell::watch::Change;

/// `reportingController` of the Pod IP warning (the EndpointSlice controller's, as
/// the address is left out of its slices).
const POD_IP_COMPONENT: &str = super::endpointslice::COMPONENT;

/// The running controllers' event handlers, as one consumer per resource.
#[derive(Debug)]
pub(crate) struct Dispatch {
    cache: Arc<Cache>,
    /// Every running controller.
    all: Vec<Arc<dyn Controller>>,
    /// Those reading Pods (they get the Service keys of Pod changes).
    pod_readers: Vec<Arc<dyn Controller>>,
    events: EventRecorder,
}

impl Dispatch {
    pub(crate) fn new(
        cache: Arc<Cache>,
        all: Vec<Arc<dyn Controller>>,
        pod_readers: Vec<Arc<dyn Controller>>,
        events: EventRecorder,
    ) -> Self {
        Self {
            cache,
            all,
            pod_readers,
            events,
        }
    }

    /// The Services a Pod change affects (ES-2.1), from the selector index.
    fn services_for_pod(&self, change: &Change<CachedPod>) -> Vec<String> {
        let services = self.cache.services.read();
        match change {
            Change::Added(p) | Change::Deleted(p) => services
                .matching(&**p)
                .iter()
                .map(|s| object_key(&s.metadata))
                .collect(),
            Change::Updated { old, new } => {
                let mut candidates = services.matching(&**old);
                candidates.extend(services.matching(&**new));
                let refs: Vec<&Service> = candidates.iter().map(Arc::as_ref).collect();
                triggers::services_for_pod_update(&**old, &**new, &refs)
            }
        }
    }

    fn check_pod_ips(&self, change: &Change<CachedPod>) {
        let pod = match change {
            Change::Added(p) => p,
            Change::Updated { old, new } if !old.pod_ips().eq(new.pod_ips()) => new,
            _ => return,
        };
        let Some(event) = invalid_pod_ip_event(&**pod) else {
            return;
        };
        self.events.record(EventRecord::from_planned(
            object_reference("v1", "Pod", pod.namespace(), pod.name(), pod.uid()),
            POD_IP_COMPONENT,
            "Reconcile",
            &event,
        ));
    }
}

impl Consumer<Service> for Dispatch {
    fn changed(&self, change: &Change<Service>) {
        for c in &self.all {
            c.on_service(change);
        }
    }
}

impl Consumer<CachedPod> for Dispatch {
    fn changed(&self, change: &Change<CachedPod>) {
        if self.pod_readers.is_empty() {
            return;
        }
        self.check_pod_ips(change);
        let keys = self.services_for_pod(change);
        if keys.is_empty() {
            return;
        }
        let withdraws = match change {
            Change::Added(_) => false,
            Change::Deleted(_) => true,
            Change::Updated { old, new } => update_withdraws(&**old, &**new),
        };
        for c in &self.pod_readers {
            c.on_pod_keys(&keys, withdraws);
        }
    }
}

impl Consumer<Node> for Dispatch {
    fn changed(&self, change: &Change<Node>) {
        for c in &self.all {
            c.on_node(change);
        }
    }
}

impl Consumer<EndpointSlice> for Dispatch {
    fn changed(&self, change: &Change<EndpointSlice>) {
        for c in &self.all {
            c.on_slice(change);
        }
    }
}

impl Consumer<ServiceCIDR> for Dispatch {
    fn changed(&self, change: &Change<ServiceCIDR>) {
        for c in &self.all {
            c.on_service_cidr(change);
        }
    }
}

impl Consumer<IPAddress> for Dispatch {
    fn changed(&self, change: &Change<IPAddress>) {
        for c in &self.all {
            c.on_ip_address(change);
        }
    }
}

impl Consumer<Endpoints> for Dispatch {
    fn changed(&self, change: &Change<Endpoints>) {
        for c in &self.all {
            c.on_endpoints(change);
        }
    }
}
