//! Decoding watched Pods straight into what the cache keeps.
//!
//! A Pod as the API server sends it is 3–10 KB of JSON, most of it container specs,
//! volumes, managedFields and container statuses that no reconciler reads. Decoding it
//! into a k8s-openapi `Pod` first builds all of that (several hundred allocations) only
//! to drop it when the Pod is stripped into a [`CachedPod`]. [`WatchedPod`] is the type
//! the Pod watch decodes instead: its serde shape names only the fields
//! [`CachedPod::from_pod`] reads, so serde skips everything else without allocating,
//! and the small `Pod` it hands on holds just those fields. A property test checks
//! that a Pod decoded this way caches exactly like the full `Pod`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Pod, PodCondition, PodIP, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::{NamespaceResourceScope, Resource as _};
use serde::{Deserialize, Deserializer};

/// A Pod with only the fields the reconcilers read, as decoded from the API.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchedPod(pub Pod);

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    deletion_timestamp: Option<Time>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Spec {
    node_name: Option<String>,
    hostname: Option<String>,
    subdomain: Option<String>,
    containers: Vec<ContainerPorts>,
    init_containers: Option<Vec<ContainerPorts>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ContainerPorts {
    restart_policy: Option<String>,
    ports: Option<Vec<Port>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Port {
    name: Option<String>,
    container_port: i32,
    protocol: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Status {
    phase: Option<String>,
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
    #[serde(rename = "podIPs")]
    pod_ips: Option<Vec<Ip>>,
    conditions: Option<Vec<Condition>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Ip {
    ip: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Condition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    #[serde(rename = "lastTransitionTime")]
    last_transition_time: Option<Time>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Shape {
    metadata: Meta,
    spec: Option<Spec>,
    status: Option<Status>,
}

fn container(c: ContainerPorts) -> Container {
    Container {
        restart_policy: c.restart_policy,
        ports: c.ports.map(|ps| {
            ps.into_iter()
                .map(|p| ContainerPort {
                    name: p.name,
                    container_port: p.container_port,
                    protocol: p.protocol,
                    ..ContainerPort::default()
                })
                .collect()
        }),
        ..Container::default()
    }
}

impl<'de> Deserialize<'de> for WatchedPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Shape::deserialize(d)?;
        let m = s.metadata;
        Ok(WatchedPod(Pod {
            metadata: ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                labels: m.labels,
                deletion_timestamp: m.deletion_timestamp,
                ..ObjectMeta::default()
            },
            spec: s.spec.map(|sp| PodSpec {
                node_name: sp.node_name,
                hostname: sp.hostname,
                subdomain: sp.subdomain,
                containers: sp.containers.into_iter().map(container).collect(),
                init_containers: sp
                    .init_containers
                    .map(|cs| cs.into_iter().map(container).collect()),
                ..PodSpec::default()
            }),
            status: s.status.map(|st| PodStatus {
                phase: st.phase,
                pod_ip: st.pod_ip,
                pod_ips: st
                    .pod_ips
                    .map(|ips| ips.into_iter().map(|i| PodIP { ip: i.ip }).collect()),
                conditions: st.conditions.map(|cs| {
                    cs.into_iter()
                        .map(|c| PodCondition {
                            type_: c.type_,
                            status: c.status,
                            last_transition_time: c.last_transition_time,
                            ..PodCondition::default()
                        })
                        .collect()
                }),
                ..PodStatus::default()
            }),
        }))
    }
}

/// The watch needs the object's kind and metadata (for resourceVersions); they are
/// the Pod's.
impl kube::Resource for WatchedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(Pod::KIND)
    }

    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(Pod::GROUP)
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(Pod::VERSION)
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(Pod::URL_PATH_SEGMENT)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::pod;
    use crate::shell::cache::CachedPod;

    fn via_watch(p: &Pod) -> CachedPod {
        let json = serde_json::to_string(p).unwrap();
        CachedPod::from_pod(serde_json::from_str::<WatchedPod>(&json).unwrap().0)
    }

    #[test]
    fn a_watched_pod_caches_exactly_like_the_full_pod() {
        let mut sidecar = pod("web-0", "web")
            .ip("10.0.0.1")
            .ready()
            .hostname("h", "web")
            .container_port("http", 8080)
            .terminating()
            .build();
        if let Some(spec) = sidecar.spec.as_mut() {
            spec.init_containers = Some(vec![
                Container {
                    name: "proxy".into(),
                    restart_policy: Some("Always".into()),
                    ports: Some(vec![ContainerPort {
                        name: Some("http".into()),
                        container_port: 15001,
                        protocol: Some("UDP".into()),
                        ..ContainerPort::default()
                    }]),
                    ..Container::default()
                },
                Container {
                    name: "init".into(),
                    ..Container::default()
                },
            ]);
        }
        for p in [
            sidecar,
            pod("a", "a").build(),
            pod("b", "b")
                .ips(&["10.0.0.2", "fd00::2"])
                .not_ready()
                .phase("Pending")
                .build(),
            Pod::default(),
        ] {
            assert_eq!(via_watch(&p), CachedPod::from_pod(p.clone()), "{p:?}");
        }
    }

    #[test]
    fn fields_no_reconciler_reads_are_skipped_not_decoded() {
        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns",
            "managedFields":[{"manager":"x","fieldsV1":{"f:spec":{}}}],"annotations":{"a":"b"}},
            "spec":{"containers":[{"name":"c","image":"i","env":[{"name":"A","value":"1"}],
            "ports":[{"name":"http","containerPort":80}]}],"volumes":[{"name":"v"}]},
            "status":{"phase":"Running","containerStatuses":[{"name":"c","ready":true}],
            "podIP":"10.0.0.1","podIPs":[{"ip":"10.0.0.1"}],
            "conditions":[{"type":"Ready","status":"True","reason":"x"}]}}"#;
        let w: WatchedPod = serde_json::from_str(json).unwrap();
        assert!(w.0.metadata.managed_fields.is_none() && w.0.metadata.annotations.is_none());
        let spec = w.0.spec.clone().unwrap();
        assert!(spec.volumes.is_none() && spec.containers[0].image.is_none());
        assert_eq!(
            spec.containers[0].ports.as_ref().unwrap()[0].container_port,
            80
        );
        assert_eq!(kube::ResourceExt::resource_version(&w), None);
        let full: Pod = serde_json::from_str(json).unwrap();
        assert_eq!(CachedPod::from_pod(w.0), CachedPod::from_pod(full));
    }
}
