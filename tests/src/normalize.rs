//! Normalising stored EndpointSlices so two clusters' results can be compared.
//!
//! Removed: names, uids (also in owner and target references),
//! resourceVersions, generations, timestamps, managed fields and the
//! `endpoints.kubernetes.io/last-change-trigger-time` annotation (its value is a
//! time, and whether it is set depends on how the syncs were batched).
//!
//! Port order (inside a slice, inside an Endpoints subset) and subset order
//! are sorted here: upstream orders them by an internal hash, and
//! ES-2.5 and EP-4.2 leave them unspecified (ES-7: compare them
//! order-insensitively). Endpoints addresses keep their stored order (sorted
//! by IP, then UID, on both sides).
//!
//! Upstream fills new slices from a Go map, so *which* slice an endpoint lands
//! in is not deterministic. The comparison therefore keeps, per slice, its
//! metadata, address type, ports and endpoint count (the "shape"), and, per
//! address type and port list, the sorted union of the endpoints.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Endpoints;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};
use svcplane_controller::core::keys::ANNOTATION_TRIGGER_TIME;

fn sort_array(value: Option<&mut Value>) {
    if let Some(items) = value.and_then(Value::as_array_mut) {
        items.sort_by_key(|v| v.to_string());
    }
}

fn strip(value: &mut Value, keys: &[&str]) {
    if let Some(obj) = value.as_object_mut() {
        for k in keys {
            obj.remove(*k);
        }
    }
}

/// Removes from `metadata` what the API server assigns (uid, versions,
/// timestamps, managedFields) and the trigger-time annotation.
fn strip_identity(meta: &mut Value) {
    strip(
        meta,
        &[
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "managedFields",
            "selfLink",
        ],
    );
    if let Some(ann) = meta.get_mut("annotations") {
        strip(ann, &[ANNOTATION_TRIGGER_TIME]);
        if ann.as_object().is_some_and(|a| a.is_empty()) {
            strip(meta, &["annotations"]);
        }
    }
}

/// One slice without its identity; endpoints sorted.
pub fn normalize_slice(slice: &EndpointSlice) -> Value {
    let mut v = serde_json::to_value(slice).unwrap_or(Value::Null);
    if let Some(meta) = v.get_mut("metadata") {
        strip_identity(meta);
        // Slice names are generated, so they differ between the two clusters.
        strip(meta, &["name"]);
        if let Some(owners) = meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            for o in owners {
                strip(o, &["uid"]);
            }
        }
    }
    if let Some(eps) = v.get_mut("endpoints").and_then(Value::as_array_mut) {
        for ep in eps.iter_mut() {
            if let Some(t) = ep.get_mut("targetRef") {
                strip(t, &["uid", "resourceVersion"]);
            }
        }
        eps.sort_by_key(|e| e.to_string());
    }
    sort_array(v.get_mut("ports"));
    v
}

/// An Endpoints object without its identity. Subsets and their addresses are
/// kept in stored order: both controllers write upstream's canonical
/// (sorted) form.
pub fn normalize_endpoints(endpoints: Option<&Endpoints>) -> Value {
    let Some(endpoints) = endpoints else {
        return Value::Null;
    };
    let mut v = serde_json::to_value(endpoints).unwrap_or(Value::Null);
    if let Some(meta) = v.get_mut("metadata") {
        strip_identity(meta);
    }
    if let Some(subsets) = v.get_mut("subsets").and_then(Value::as_array_mut) {
        for subset in subsets.iter_mut() {
            sort_array(subset.get_mut("ports"));
            for key in ["addresses", "notReadyAddresses"] {
                if let Some(addrs) = subset.get_mut(key).and_then(Value::as_array_mut) {
                    for a in addrs {
                        if let Some(t) = a.get_mut("targetRef") {
                            strip(t, &["uid", "resourceVersion"]);
                        }
                    }
                }
            }
        }
        subsets.sort_by_key(|s| s.to_string());
    }
    v
}

/// The comparable form of a Service's slices: `{"slices": [shape...],
/// "endpoints": {"<addressType> <ports>": [endpoint...]}}`.
pub fn normalize(slices: &[EndpointSlice]) -> Value {
    let mut shapes = Vec::new();
    let mut endpoints: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for slice in slices {
        let mut v = normalize_slice(slice);
        let eps = match v.as_object_mut().and_then(|o| o.remove("endpoints")) {
            Some(Value::Array(eps)) => eps,
            _ => Vec::new(),
        };
        let key = format!(
            "{} {}",
            v.get("addressType").cloned().unwrap_or(Value::Null),
            v.get("ports").cloned().unwrap_or(Value::Null)
        );
        if let Some(o) = v.as_object_mut() {
            o.insert("endpointCount".into(), json!(eps.len()));
        }
        shapes.push(v);
        endpoints.entry(key).or_default().extend(eps);
    }
    shapes.sort_by_key(|s| s.to_string());
    for eps in endpoints.values_mut() {
        eps.sort_by_key(|e| e.to_string());
    }
    json!({ "slices": shapes, "endpoints": endpoints })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::discovery::v1::Endpoint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use svcplane_controller::core::slice_endpoints::SliceEndpoints;

    fn slice(name: &str, uid: &str, ips: &[&str]) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                generate_name: Some("web-".into()),
                uid: Some(uid.into()),
                resource_version: Some(uid.into()),
                annotations: Some([(ANNOTATION_TRIGGER_TIME.to_owned(), uid.to_owned())].into()),
                owner_references: Some(vec![OwnerReference {
                    uid: uid.into(),
                    name: "web".into(),
                    kind: "Service".into(),
                    api_version: "v1".into(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            endpoints: Some(
                ips.iter()
                    .map(|ip| Endpoint {
                        addresses: vec![(*ip).into()],
                        target_ref: Some(ObjectReference {
                            uid: Some(format!("{uid}-{ip}")),
                            name: Some((*ip).into()),
                            ..ObjectReference::default()
                        }),
                        ..Endpoint::default()
                    })
                    .collect(),
            ),
            ports: None,
        }
    }

    #[test]
    fn identity_and_order_do_not_matter() {
        let a = [
            slice("web-abc", "1", &["10.0.0.1", "10.0.0.2"]),
            slice("web-x", "2", &["10.0.0.3"]),
        ];
        let b = [
            slice("web-zzz", "9", &["10.0.0.3"]),
            slice("web-q", "8", &["10.0.0.2", "10.0.0.1"]),
        ];
        assert_eq!(normalize(&a), normalize(&b));
    }

    #[test]
    fn which_slice_holds_an_endpoint_does_not_matter_but_sizes_do() {
        let a = [
            slice("a", "1", &["10.0.0.1", "10.0.0.2"]),
            slice("b", "1", &["10.0.0.3"]),
        ];
        let b = [
            slice("a", "1", &["10.0.0.1"]),
            slice("b", "1", &["10.0.0.2", "10.0.0.3"]),
        ];
        assert_eq!(normalize(&a), normalize(&b));
        let c = [slice("a", "1", &["10.0.0.1", "10.0.0.2", "10.0.0.3"])];
        assert_ne!(normalize(&a), normalize(&c));
    }

    #[test]
    fn content_differences_show() {
        let a = [slice("a", "1", &["10.0.0.1"])];
        let mut b = a.clone();
        b[0].endpoints_mut()[0].node_name = Some("n".into());
        assert_ne!(normalize(&a), normalize(&b));
        let mut c = a.clone();
        c[0].metadata.labels = Some([("x".to_owned(), "y".to_owned())].into());
        assert_ne!(normalize(&a), normalize(&c));
    }
}
