//! Slice metadata (ES-2.8): labels, owner reference, the shape
//! of a new slice, ownership, and the placeholder comparison (ES-2.7).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::CONTROLLER_NAME;
use crate::core::keys::{CLUSTER_IP_NONE, LABEL_HEADLESS, LABEL_MANAGED_BY, LABEL_SERVICE_NAME};
use crate::core::slice_endpoints::SliceEndpoints;

fn is_reserved(key: &str) -> bool {
    key == LABEL_SERVICE_NAME || key == LABEL_MANAGED_BY || key == LABEL_HEADLESS
}

/// A Service without a ClusterIP (`None` or empty) is headless for labels.
pub fn is_headless(service: &Service) -> bool {
    let ip = service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .unwrap_or("");
    ip.is_empty() || ip == CLUSTER_IP_NONE
}

/// Whether the slice's non-reserved labels differ from the Service's
/// (nil and empty maps are equal). Only this difference triggers a
/// label-only update; headlessness alone does not.
pub fn labels_differ(slice: &EndpointSlice, service: &Service) -> bool {
    let empty = BTreeMap::new();
    let slice_labels = slice.metadata.labels.as_ref().unwrap_or(&empty);
    let svc_labels = service.metadata.labels.as_ref().unwrap_or(&empty);
    let mut a = slice_labels.iter().filter(|(k, _)| !is_reserved(k));
    let mut b = svc_labels.iter().filter(|(k, _)| !is_reserved(k));
    loop {
        match (a.next(), b.next()) {
            (None, None) => return false,
            (Some(x), Some(y)) if x == y => continue,
            _ => return true,
        }
    }
}

/// The labels every slice of the Service carries: its own non-reserved
/// labels plus the service-name, managed-by and (when headless) headless
/// labels.
pub fn slice_labels(service: &Service) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = service
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| !is_reserved(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if is_headless(service) {
        labels.insert(LABEL_HEADLESS.to_owned(), String::new());
    }
    labels.insert(
        LABEL_SERVICE_NAME.to_owned(),
        service.metadata.name.clone().unwrap_or_default(),
    );
    labels.insert(LABEL_MANAGED_BY.to_owned(), CONTROLLER_NAME.to_owned());
    labels
}

/// The single controller owner reference every slice carries.
pub fn owner_reference(service: &Service) -> OwnerReference {
    OwnerReference {
        api_version: "v1".to_owned(),
        kind: "Service".to_owned(),
        name: service.metadata.name.clone().unwrap_or_default(),
        uid: service.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether the slice is owned by this Service (an owner reference with its
/// UID, kind Service, apiVersion v1).
pub fn owned_by(slice: &EndpointSlice, service: &Service) -> bool {
    let uid = service.metadata.uid.as_deref().unwrap_or("");
    slice
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.kind == "Service" && o.api_version == "v1")
}

/// A new, empty slice for the Service with the given ports, to be created
/// with `generateName`.
pub fn new_slice(
    service: &Service,
    labels: &BTreeMap<String, String>,
    address_type: &str,
    ports: Vec<EndpointPort>,
) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(format!(
                "{}-",
                service.metadata.name.as_deref().unwrap_or_default()
            )),
            namespace: service.metadata.namespace.clone(),
            labels: Some(labels.clone()),
            owner_references: Some(vec![owner_reference(service)]),
            ..ObjectMeta::default()
        },
        address_type: address_type.to_owned(),
        endpoints: Some(Vec::new()),
        ports: Some(ports),
    }
}

/// Whether an existing slice already is the placeholder the Service needs:
/// same namespace and label map, no ports, same address type, no endpoints.
/// Unlike kube-controller-manager through 1.37 (fixed in 1.38, kubernetes#141593)
/// the owner UID must match too, so a placeholder left by a deleted Service of
/// the same name is replaced (ES-2.14).
pub fn equals_placeholder(
    slice: &EndpointSlice,
    service: &Service,
    labels: &BTreeMap<String, String>,
    address_type: &str,
) -> bool {
    let empty = BTreeMap::new();
    slice.metadata.namespace == service.metadata.namespace
        && slice.metadata.labels.as_ref().unwrap_or(&empty) == labels
        && slice.ports.as_ref().is_none_or(Vec::is_empty)
        && slice.address_type == address_type
        && slice.endpoints().is_empty()
        && owned_by(slice, service)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ServiceSpec;

    fn svc(labels: &[(&str, &str)], cluster_ip: Option<&str>) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("uid-1".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: cluster_ip.map(Into::into),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }

    #[test]
    fn rule_2_8_labels_copy_service_labels_minus_reserved_plus_ours() {
        let s = svc(
            &[
                ("app", "web"),
                (LABEL_SERVICE_NAME, "spoof"),
                (LABEL_MANAGED_BY, "me"),
            ],
            Some("10.0.0.1"),
        );
        let labels = slice_labels(&s);
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(
            labels.get(LABEL_SERVICE_NAME).map(String::as_str),
            Some("web")
        );
        assert_eq!(
            labels.get(LABEL_MANAGED_BY).map(String::as_str),
            Some(CONTROLLER_NAME)
        );
        assert!(!labels.contains_key(LABEL_HEADLESS));
        assert_eq!(labels.len(), 3);
    }

    #[test]
    fn rule_2_8_headless_label_when_cluster_ip_none_or_empty() {
        for ip in [Some("None"), Some(""), None] {
            let labels = slice_labels(&svc(&[], ip));
            assert_eq!(labels.get(LABEL_HEADLESS).map(String::as_str), Some(""));
        }
    }

    #[test]
    fn rule_2_8_only_non_reserved_label_differences_count() {
        let s = svc(&[("app", "web")], None);
        let mut slice = new_slice(&s, &slice_labels(&s), "IPv4", vec![]);
        assert!(!labels_differ(&slice, &s));
        // A wrong headless label alone does not trigger an update.
        if let Some(l) = slice.metadata.labels.as_mut() {
            l.remove(LABEL_HEADLESS);
        }
        assert!(!labels_differ(&slice, &s));
        if let Some(l) = slice.metadata.labels.as_mut() {
            l.insert("extra".into(), "x".into());
        }
        assert!(labels_differ(&slice, &s));
    }

    #[test]
    fn rule_2_8_owner_reference_is_a_controller_reference_to_the_service() {
        let s = svc(&[], None);
        let o = owner_reference(&s);
        assert_eq!(
            (
                o.api_version.as_str(),
                o.kind.as_str(),
                o.name.as_str(),
                o.uid.as_str()
            ),
            ("v1", "Service", "web", "uid-1")
        );
        assert_eq!(
            (o.controller, o.block_owner_deletion),
            (Some(true), Some(true))
        );
        let slice = new_slice(&s, &slice_labels(&s), "IPv4", vec![]);
        assert!(owned_by(&slice, &s));
        assert_eq!(slice.metadata.generate_name.as_deref(), Some("web-"));
    }

    #[test]
    fn rule_2_14_placeholder_of_another_service_uid_is_not_kept() {
        let s = svc(&[], None);
        let labels = slice_labels(&s);
        let mut slice = new_slice(&s, &labels, "IPv4", vec![]);
        assert!(equals_placeholder(&slice, &s, &labels, "IPv4"));
        assert!(!equals_placeholder(&slice, &s, &labels, "IPv6"));
        if let Some(o) = slice.metadata.owner_references.as_mut() {
            o[0].uid = "old".into();
        }
        assert!(!equals_placeholder(&slice, &s, &labels, "IPv4"));
    }
}
