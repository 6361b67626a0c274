//! Well-known label and annotation keys and values (ES-1.1).
//!
//! Kept in one place because a typo in any of them silently breaks interop
//! with kube-proxy and the upstream controllers.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The `namespace/name` key of an object (an unset namespace reads as `""`): how
/// Services, Endpoints and their slices are queued and tracked.
pub fn object_key(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
pub const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";
pub const LABEL_SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";
pub const LABEL_ENDPOINTS_MANAGED_BY: &str = "endpoints.kubernetes.io/managed-by";
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

pub const ANNOTATION_LEADER: &str = "control-plane.alpha.kubernetes.io/leader";
pub const ANNOTATION_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
pub const ANNOTATION_OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";
pub const ANNOTATION_LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
pub const ANNOTATION_TOPOLOGY_MODE: &str = "service.kubernetes.io/topology-mode";
pub const ANNOTATION_TOPOLOGY_AWARE_HINTS: &str = "service.kubernetes.io/topology-aware-hints";

pub const ADDRESS_TYPE_IPV4: &str = "IPv4";
pub const ADDRESS_TYPE_IPV6: &str = "IPv6";

pub const CLUSTER_IP_NONE: &str = "None";
pub const SERVICE_TYPE_EXTERNAL_NAME: &str = "ExternalName";
