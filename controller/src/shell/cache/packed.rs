//! Cached objects kept as compressed JSON and decoded when read.
//!
//! EndpointSlices, Endpoints and Services are cached whole (an update sends every field
//! back), but a sync reads the objects of one Service only. Decoded into k8s-openapi
//! types a slice of ten endpoints takes about 10 KB of heap (an allocation per string,
//! a wide struct per endpoint, a B-tree node per map); its JSON about 3.4 KB, and that
//! JSON compressed with LZ4 about a third of that again, because an object repeats its
//! own field names, namespace and name prefixes. Packing costs a few microseconds
//! per watch event and unpacking under twenty per object a sync reads; at 10 000 Services the
//! cache keeps some 160 MB less (`cargo bench -p svcplane-tests --bench
//! cache_memory` prints both sides).

use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// One object as LZ4-compressed JSON (the uncompressed length first).
pub struct Packed<T> {
    lz4: Box<[u8]>,
    _object: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for Packed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packed")
            .field("bytes", &self.lz4.len())
            .finish()
    }
}

impl<T: Serialize + DeserializeOwned> Packed<T> {
    /// Encodes `obj`.
    pub fn new(obj: &T) -> Self {
        // Invariant: the k8s-openapi types encode without error — they are maps with
        // string keys and plain values, which `serde_json` always writes (the round
        // trip test below covers every type packed).
        #[allow(clippy::expect_used)]
        let json = serde_json::to_vec(obj).expect("a k8s-openapi object always encodes");
        Self {
            lz4: lz4_flex::compress_prepend_size(&json).into_boxed_slice(),
            _object: PhantomData,
        }
    }

    /// Decodes the object.
    pub fn unpack(&self) -> T {
        // Invariant: the bytes are what `new` compressed for this very type (never
        // shared or written elsewhere), and the k8s-openapi types decode what they
        // encode (the round trip tests below).
        #[allow(clippy::expect_used)]
        let json = lz4_flex::decompress_size_prepended(&self.lz4)
            .expect("packed bytes are always what `new` compressed");
        #[allow(clippy::expect_used)]
        serde_json::from_slice(&json).expect("a packed object decodes as it was encoded")
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.lz4.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lz4.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{
        EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Service,
        ServicePort, ServiceSpec,
    };
    use k8s_openapi::api::discovery::v1::{
        Endpoint, EndpointConditions, EndpointHints, EndpointSlice, ForZone,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;

    fn meta(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some("0b8e7c1a-1111-2222-3333-444455556666".into()),
            resource_version: Some("42".into()),
            generation: Some(3),
            // `metav1.Time` is whole seconds on the wire (k8s-openapi writes no
            // fraction), and the API server only ever sends whole seconds.
            creation_timestamp: Some(Time("2026-11-01T10:00:00Z".parse().unwrap_or_default())),
            labels: Some(BTreeMap::from([("a".into(), "b".into())])),
            annotations: Some(BTreeMap::from([(
                "endpoints.kubernetes.io/last-change-trigger-time".into(),
                "2026-11-01T10:00:00Z".into(),
            )])),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name: "web".into(),
                uid: "u".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        }
    }

    fn target(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some("6f1c2a0e-4b7d".into()),
            ..ObjectReference::default()
        }
    }

    #[test]
    fn an_endpoint_slice_unpacks_to_what_was_packed() {
        let slice = EndpointSlice {
            metadata: meta("web-abc"),
            address_type: "IPv6".into(),
            endpoints: Some(vec![
                Endpoint {
                    addresses: vec!["fd00::1".into()],
                    conditions: Some(EndpointConditions {
                        ready: Some(false),
                        serving: Some(true),
                        terminating: Some(true),
                    }),
                    hostname: Some("h".into()),
                    node_name: Some("node-a".into()),
                    zone: Some("z1".into()),
                    hints: Some(EndpointHints {
                        for_zones: Some(vec![ForZone { name: "z1".into() }]),
                        ..EndpointHints::default()
                    }),
                    target_ref: Some(target("p")),
                    deprecated_topology: None,
                },
                // Empty and absent lists stay as they were.
                Endpoint {
                    addresses: vec![],
                    conditions: Some(EndpointConditions::default()),
                    ..Endpoint::default()
                },
            ]),
            ports: Some(vec![]),
        };
        assert_eq!(Packed::new(&slice).unpack(), slice);
        let bare = EndpointSlice::default();
        assert_eq!(Packed::new(&bare).unpack(), bare);
    }

    #[test]
    fn a_slice_of_ten_endpoints_packs_to_under_half_its_json() {
        let endpoints = (0..10)
            .map(|i| Endpoint {
                addresses: vec![format!("10.0.3.{i}")],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    serving: Some(true),
                    terminating: Some(false),
                }),
                node_name: Some(format!("node-{}", 40 + i)),
                zone: Some("zone-b".into()),
                target_ref: Some(ObjectReference {
                    uid: Some(format!("6f1c2a0e-4b7d-4c1e-9f3a-0000000012{i:02}")),
                    ..target(&format!("web-7d9c8b6f5-x{i:04}"))
                }),
                ..Endpoint::default()
            })
            .collect();
        let slice = EndpointSlice {
            metadata: meta("web-abc"),
            address_type: "IPv4".into(),
            endpoints: Some(endpoints),
            ports: None,
        };
        let json = serde_json::to_vec(&slice).unwrap_or_default().len();
        let packed = Packed::new(&slice);
        assert!(packed.len() * 2 < json, "{} of {json} bytes", packed.len());
        assert_eq!(packed.unpack(), slice);
    }

    #[test]
    fn endpoints_unpack_to_what_was_packed() {
        let endpoints = Endpoints {
            metadata: meta("web"),
            subsets: Some(vec![EndpointSubset {
                addresses: Some(vec![EndpointAddress {
                    ip: "10.0.0.1".into(),
                    hostname: Some("h".into()),
                    node_name: Some("node-a".into()),
                    target_ref: Some(target("p")),
                }]),
                not_ready_addresses: Some(vec![]),
                ports: Some(vec![EndpointPort {
                    name: Some("http".into()),
                    port: 80,
                    protocol: Some("TCP".into()),
                    app_protocol: None,
                }]),
            }]),
        };
        assert_eq!(Packed::new(&endpoints).unpack(), endpoints);
    }

    #[test]
    fn a_service_unpacks_to_what_was_packed() {
        let service = Service {
            metadata: meta("web"),
            spec: Some(ServiceSpec {
                selector: Some(BTreeMap::new()),
                cluster_ip: Some("10.96.0.10".into()),
                cluster_ips: Some(vec!["10.96.0.10".into(), "fd00::a".into()]),
                ip_families: Some(vec!["IPv4".into(), "IPv6".into()]),
                publish_not_ready_addresses: Some(true),
                traffic_distribution: Some("PreferClose".into()),
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    target_port: Some(IntOrString::String("web".into())),
                    node_port: Some(30080),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: None,
        };
        let packed = Packed::new(&service);
        assert_eq!(packed.unpack(), service);
        assert!(!packed.is_empty());
    }
}
