//! What the caches keep of each object: only the fields some reconciler reads.
//!
//! Memory per cached object is the runtime's main cost on a large cluster, and most of
//! an object is never read: `managedFields` alone is often half of a Service or slice,
//! a Node's image list runs to kilobytes. Pods become [`CachedPod`]s (a compact copy of
//! the dozen fields the core reads). Objects the controllers write back (EndpointSlices,
//! Endpoints) keep everything but `managedFields`, because an update sends the cached
//! object's metadata back and annotations must survive it.

use k8s_openapi::api::core::v1::{Endpoints, Node, NodeCondition, NodeStatus, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::core::keys::ANNOTATION_LAST_APPLIED;
use crate::shell::cache::CachedPod;

fn strip_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
}

/// A Pod as the caches hold it.
pub fn pod(pod: Pod) -> CachedPod {
    CachedPod::from_pod(pod)
}

/// A watched Pod (decoded with only the fields kept) as the caches hold it.
pub fn watched_pod(pod: super::watched_pod::WatchedPod) -> CachedPod {
    CachedPod::from_pod(pod.0)
}

/// Services: spec and metadata are read (selectors, ports, families, annotations for
/// topology, ClusterIPs for the allocator repair); status is not. The last-applied
/// annotation is a copy of the spec and is never read.
pub fn service(mut svc: Service) -> Service {
    strip_meta(&mut svc.metadata);
    if let Some(a) = svc.metadata.annotations.as_mut() {
        a.remove(ANNOTATION_LAST_APPLIED);
    }
    svc.status = None;
    svc
}

/// Nodes: name, labels (zone, control-plane roles), the Ready condition and
/// allocatable CPU — what the endpoint zone and the topology ratios need.
pub fn node(node: Node) -> Node {
    let Node {
        metadata, status, ..
    } = node;
    let status = status.map(|s| NodeStatus {
        allocatable: s.allocatable.map(|mut a| {
            a.retain(|k, _| k == "cpu");
            a
        }),
        conditions: s.conditions.map(|cs| {
            cs.into_iter()
                .filter(|c| c.type_ == "Ready")
                .map(|c| NodeCondition {
                    type_: c.type_,
                    status: c.status,
                    ..NodeCondition::default()
                })
                .collect()
        }),
        ..NodeStatus::default()
    });
    Node {
        metadata: ObjectMeta {
            name: metadata.name,
            uid: metadata.uid,
            resource_version: metadata.resource_version,
            labels: metadata.labels,
            ..ObjectMeta::default()
        },
        spec: None,
        status,
    }
}

/// EndpointSlices: everything but `managedFields`.
pub fn endpoint_slice(mut slice: EndpointSlice) -> EndpointSlice {
    strip_meta(&mut slice.metadata);
    slice
}

/// Endpoints: everything but `managedFields`.
pub fn endpoints(mut endpoints: Endpoints) -> Endpoints {
    strip_meta(&mut endpoints.metadata);
    endpoints
}

/// ServiceCIDRs: everything but `managedFields` (spec, conditions, finalizers and the
/// deletion time are all read).
pub fn service_cidr(mut cidr: ServiceCIDR) -> ServiceCIDR {
    strip_meta(&mut cidr.metadata);
    cidr
}

/// IPAddresses: name, labels (family, manager) and the parent reference.
pub fn ip_address(mut ip: IPAddress) -> IPAddress {
    strip_meta(&mut ip.metadata);
    ip.metadata.annotations = None;
    ip
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{ContainerImage, NodeSpec, ServiceStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    fn managed() -> Option<Vec<ManagedFieldsEntry>> {
        Some(vec![ManagedFieldsEntry::default()])
    }

    #[test]
    fn node_keeps_zone_readiness_and_cpu_only() {
        let n = Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: Some(BTreeMap::from([(
                    "topology.kubernetes.io/zone".into(),
                    "z".into(),
                )])),
                managed_fields: managed(),
                annotations: Some(BTreeMap::from([("a".into(), "b".into())])),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                allocatable: Some(BTreeMap::from([
                    ("cpu".into(), Quantity("4".into())),
                    ("memory".into(), Quantity("8Gi".into())),
                ])),
                conditions: Some(vec![
                    NodeCondition {
                        type_: "MemoryPressure".into(),
                        status: "False".into(),
                        ..NodeCondition::default()
                    },
                    NodeCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        message: Some("kubelet is posting ready status".into()),
                        ..NodeCondition::default()
                    },
                ]),
                images: Some(vec![ContainerImage::default(); 50]),
                ..NodeStatus::default()
            }),
        };
        let s = node(n);
        // What the core reads still reads the same.
        assert!(crate::core::topology::nodes::is_ready(&s));
        assert_eq!(s.metadata.name.as_deref(), Some("n1"));
        assert!(s.metadata.labels.is_some());
        assert!(s.metadata.managed_fields.is_none() && s.metadata.annotations.is_none());
        assert!(s.spec.is_none());
        let st = s.status.unwrap_or_default();
        assert_eq!(st.allocatable.map(|a| a.len()), Some(1));
        let conds = st.conditions.unwrap_or_default();
        assert_eq!(conds.len(), 1);
        assert_eq!(
            (conds[0].type_.as_str(), conds[0].status.as_str()),
            ("Ready", "True")
        );
        assert!(conds[0].message.is_none());
        assert!(st.images.is_none());
    }

    #[test]
    fn service_drops_managed_fields_status_and_last_applied_only() {
        let svc = Service {
            metadata: ObjectMeta {
                name: Some("s".into()),
                managed_fields: managed(),
                annotations: Some(BTreeMap::from([
                    (ANNOTATION_LAST_APPLIED.into(), "{}".into()),
                    ("service.kubernetes.io/topology-mode".into(), "Auto".into()),
                ])),
                ..ObjectMeta::default()
            },
            status: Some(ServiceStatus::default()),
            ..Service::default()
        };
        let s = service(svc);
        assert!(s.metadata.managed_fields.is_none() && s.status.is_none());
        assert_eq!(
            s.metadata
                .annotations
                .map(|a| a.into_keys().collect::<Vec<_>>()),
            Some(vec!["service.kubernetes.io/topology-mode".to_owned()])
        );
    }

    #[test]
    fn written_kinds_keep_their_annotations() {
        let mut e = Endpoints::default();
        e.metadata.managed_fields = managed();
        e.metadata.annotations = Some(BTreeMap::from([(
            ANNOTATION_LAST_APPLIED.into(),
            "x".into(),
        )]));
        let e = endpoints(e);
        assert!(e.metadata.managed_fields.is_none());
        assert_eq!(e.metadata.annotations.map(|a| a.len()), Some(1));
        let mut s = EndpointSlice::default();
        s.metadata.managed_fields = managed();
        assert!(endpoint_slice(s).metadata.managed_fields.is_none());
    }
}
