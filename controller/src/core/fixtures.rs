//! Builders for Services, Pods, Nodes and EndpointSlices.
//!
//! Used by unit tests, property tests and benches (which cannot see
//! `cfg(test)` items), so they live in the library. They build objects the
//! way an API server would store them (defaults filled in).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Node, NodeCondition, NodeStatus, Pod, PodCondition, PodIP, PodSpec,
    PodStatus, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use crate::core::keys::LABEL_ZONE;

/// A fixed instant used as every fixture's creation time.
pub fn epoch() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn put(map: &mut Option<BTreeMap<String, String>>, k: &str, v: &str) {
    map.get_or_insert_with(BTreeMap::new)
        .insert(k.into(), v.into());
}

/// The metadata setters every builder shares (`namespace`, `uid`, `label`,
/// `annotation`), for a builder wrapping its object in field `0`.
macro_rules! metadata_setters {
    ($builder:ty) => {
        impl $builder {
            pub fn namespace(mut self, ns: &str) -> Self {
                self.0.metadata.namespace = Some(ns.into());
                self
            }

            pub fn uid(mut self, uid: &str) -> Self {
                self.0.metadata.uid = Some(uid.into());
                self
            }

            pub fn label(mut self, k: &str, v: &str) -> Self {
                put(&mut self.0.metadata.labels, k, v);
                self
            }

            pub fn annotation(mut self, k: &str, v: &str) -> Self {
                put(&mut self.0.metadata.annotations, k, v);
                self
            }
        }
    };
}

metadata_setters!(SvcBuilder);
metadata_setters!(PodBuilder);
metadata_setters!(EndpointsBuilder);

/// Builder for a Service (ClusterIP, IPv4, selector `app: <name>`).
#[derive(Debug, Clone)]
pub struct SvcBuilder(pub Service);

pub fn svc(name: &str) -> SvcBuilder {
    SvcBuilder(Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-svc-{name}")),
            creation_timestamp: Some(Time(epoch())),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("10.96.0.10".into()),
            ip_families: Some(vec!["IPv4".into()]),
            selector: Some(BTreeMap::from([("app".to_owned(), name.to_owned())])),
            type_: Some("ClusterIP".into()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

impl SvcBuilder {
    fn spec(&mut self) -> &mut ServiceSpec {
        self.0.spec.get_or_insert_with(ServiceSpec::default)
    }

    fn push_port(mut self, name: &str, port: i32, target: IntOrString) -> Self {
        self.spec()
            .ports
            .get_or_insert_with(Vec::new)
            .push(ServicePort {
                name: Some(name.into()),
                port,
                target_port: Some(target),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            });
        self
    }

    /// A TCP port whose targetPort is a number.
    pub fn port(self, name: &str, port: i32, target: i32) -> Self {
        self.push_port(name, port, IntOrString::Int(target))
    }

    /// A TCP port whose targetPort is a container port name.
    pub fn named_port(self, name: &str, port: i32, target: &str) -> Self {
        self.push_port(name, port, IntOrString::String(target.into()))
    }

    pub fn app_protocol(mut self, value: &str) -> Self {
        if let Some(p) = self.spec().ports.as_mut().and_then(|p| p.last_mut()) {
            p.app_protocol = Some(value.into());
        }
        self
    }

    pub fn headless(mut self) -> Self {
        self.spec().cluster_ip = Some("None".into());
        self
    }

    pub fn cluster_ip(mut self, ip: &str) -> Self {
        self.spec().cluster_ip = Some(ip.into());
        self
    }

    pub fn families(mut self, families: &[&str]) -> Self {
        self.spec().ip_families = Some(families.iter().map(|f| f.to_string()).collect());
        self
    }

    pub fn no_families(mut self) -> Self {
        self.spec().ip_families = None;
        self
    }

    pub fn no_selector(mut self) -> Self {
        self.spec().selector = None;
        self
    }

    pub fn selector(mut self, k: &str, v: &str) -> Self {
        self.spec().selector = Some(BTreeMap::from([(k.to_owned(), v.to_owned())]));
        self
    }

    pub fn external_name(mut self) -> Self {
        self.spec().type_ = Some("ExternalName".into());
        self
    }

    pub fn publish_not_ready(mut self) -> Self {
        self.spec().publish_not_ready_addresses = Some(true);
        self
    }

    pub fn deleting(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(epoch()));
        self
    }

    pub fn build(self) -> Service {
        self.0
    }
}

/// Builder for a running Pod on `node-a` labelled `app: <app>`.
#[derive(Debug, Clone)]
pub struct PodBuilder(pub Pod);

pub fn pod(name: &str, app: &str) -> PodBuilder {
    PodBuilder(Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-pod-{name}")),
            labels: Some(BTreeMap::from([("app".to_owned(), app.to_owned())])),
            creation_timestamp: Some(Time(epoch())),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-a".into()),
            containers: vec![Container {
                name: "main".into(),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        }),
    })
}

impl PodBuilder {
    fn status(&mut self) -> &mut PodStatus {
        self.0.status.get_or_insert_with(PodStatus::default)
    }

    fn spec(&mut self) -> &mut PodSpec {
        self.0.spec.get_or_insert_with(PodSpec::default)
    }

    /// Sets `podIP` and `podIPs` (first address is `podIP`).
    pub fn ips(mut self, ips: &[&str]) -> Self {
        let status = self.status();
        status.pod_ip = ips.first().map(|s| s.to_string());
        status.pod_ips = Some(ips.iter().map(|ip| PodIP { ip: ip.to_string() }).collect());
        self
    }

    pub fn ip(self, ip: &str) -> Self {
        self.ips(&[ip])
    }

    fn ready_condition(mut self, status: &str, at: Timestamp) -> Self {
        let conditions = self.status().conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != "Ready");
        conditions.push(PodCondition {
            type_: "Ready".into(),
            status: status.into(),
            last_transition_time: Some(Time(at)),
            ..PodCondition::default()
        });
        self
    }

    pub fn ready(self) -> Self {
        self.ready_condition("True", epoch())
    }

    pub fn not_ready(self) -> Self {
        self.ready_condition("False", epoch())
    }

    pub fn ready_at(self, at: Timestamp) -> Self {
        self.ready_condition("True", at)
    }

    pub fn terminating(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(epoch()));
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.status().phase = Some(phase.into());
        self
    }

    pub fn node(mut self, node: &str) -> Self {
        self.spec().node_name = Some(node.into());
        self
    }

    pub fn hostname(mut self, hostname: &str, subdomain: &str) -> Self {
        let spec = self.spec();
        spec.hostname = Some(hostname.into());
        spec.subdomain = Some(subdomain.into());
        self
    }

    /// Adds a named TCP container port to the first container.
    pub fn container_port(mut self, name: &str, number: i32) -> Self {
        let spec = self.spec();
        if spec.containers.is_empty() {
            spec.containers.push(Container {
                name: "main".into(),
                ..Container::default()
            });
        }
        spec.containers[0]
            .ports
            .get_or_insert_with(Vec::new)
            .push(ContainerPort {
                name: Some(name.into()),
                container_port: number,
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            });
        self
    }

    pub fn build(self) -> Pod {
        self.0
    }

    pub fn arc(self) -> Arc<Pod> {
        Arc::new(self.0)
    }
}

/// A bare Pod with just these containers and initContainers (for port lookups).
pub fn pod_with_containers(containers: Vec<Container>, init: Vec<Container>) -> Pod {
    Pod {
        spec: Some(PodSpec {
            containers,
            init_containers: Some(init),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// A ready Node in `zone` with `cpu` allocatable.
pub fn node(name: &str, zone: Option<&str>) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-node-{name}")),
            labels: zone.map(|z| BTreeMap::from([(LABEL_ZONE.to_owned(), z.to_owned())])),
            ..ObjectMeta::default()
        },
        status: Some(NodeStatus {
            allocatable: Some(BTreeMap::from([(
                "cpu".to_owned(),
                Quantity("4".to_owned()),
            )])),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        }),
        ..Node::default()
    }
}

/// Nodes keyed by name, as the reconciler looks them up.
pub fn nodes(list: &[Node]) -> BTreeMap<String, Arc<Node>> {
    list.iter()
        .map(|n| {
            (
                n.metadata.name.clone().unwrap_or_default(),
                Arc::new(n.clone()),
            )
        })
        .collect()
}

/// Gives a slice that a create would produce the identity the API server
/// would assign: a name, a UID, a resourceVersion and generation 1.
pub fn as_stored(mut slice: EndpointSlice, name: &str) -> EndpointSlice {
    if slice.metadata.name.is_none() {
        slice.metadata.name = Some(name.into());
    }
    slice
        .metadata
        .uid
        .get_or_insert_with(|| format!("uid-slice-{name}"));
    slice.metadata.resource_version = Some("1".into());
    slice.metadata.generation = Some(1);
    slice
}

/// Applies a plan's writes to a set of stored slices the way an API server
/// would (creates get a generated name, updates replace by name and bump the
/// generation, deletes remove), returning the new stored set.
pub fn apply_plan(
    stored: &[Arc<EndpointSlice>],
    plan: &crate::core::endpointslice::SlicePlan,
) -> Vec<Arc<EndpointSlice>> {
    use crate::core::endpointslice::SliceWrite;
    let mut by_name: BTreeMap<String, EndpointSlice> = stored
        .iter()
        .map(|s| (s.metadata.name.clone().unwrap_or_default(), (**s).clone()))
        .collect();
    let mut counter = by_name.len();
    for write in plan.writes() {
        match write {
            SliceWrite::Create(slice) => {
                let name = loop {
                    counter += 1;
                    let prefix = slice.metadata.generate_name.clone().unwrap_or_default();
                    let candidate = format!("{prefix}{counter:05}");
                    if !by_name.contains_key(&candidate) {
                        break candidate;
                    }
                };
                let mut stored = as_stored(slice, &name);
                stored.metadata.name = Some(name.clone());
                by_name.insert(name, stored);
            }
            SliceWrite::Update(mut slice) => {
                let name = slice.metadata.name.clone().unwrap_or_default();
                let previous = by_name.get(&name);
                let generation = previous.and_then(|p| p.metadata.generation).unwrap_or(0) + 1;
                slice.metadata.uid = previous.and_then(|p| p.metadata.uid.clone());
                slice.metadata.generation = Some(generation);
                slice.metadata.resource_version = Some(generation.to_string());
                by_name.insert(name, slice);
            }
            SliceWrite::Delete(r) => {
                by_name.remove(&r.name);
            }
        }
    }
    by_name.into_values().map(Arc::new).collect()
}

/// Builder for a hand-written or controller-written `v1.Endpoints` object in
/// `default`.
#[derive(Debug, Clone)]
pub struct EndpointsBuilder(pub k8s_openapi::api::core::v1::Endpoints);

pub fn endpoints(name: &str) -> EndpointsBuilder {
    EndpointsBuilder(k8s_openapi::api::core::v1::Endpoints {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-ep-{name}")),
            resource_version: Some("1".into()),
            creation_timestamp: Some(Time(epoch())),
            ..ObjectMeta::default()
        },
        subsets: None,
    })
}

/// An EndpointAddress with only an IP.
pub fn endpoint_address(ip: &str) -> k8s_openapi::api::core::v1::EndpointAddress {
    k8s_openapi::api::core::v1::EndpointAddress {
        ip: ip.into(),
        ..Default::default()
    }
}

impl EndpointsBuilder {
    pub fn deleting(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(epoch()));
        self
    }

    /// Adds a subset of bare addresses (IP only) with named TCP ports.
    pub fn subset(self, ready: &[&str], not_ready: &[&str], ports: &[(&str, i32)]) -> Self {
        self.subset_of(
            ready.iter().map(|ip| endpoint_address(ip)).collect(),
            not_ready.iter().map(|ip| endpoint_address(ip)).collect(),
            ports,
        )
    }

    /// Adds a subset of the given addresses with named TCP ports.
    pub fn subset_of(
        mut self,
        ready: Vec<k8s_openapi::api::core::v1::EndpointAddress>,
        not_ready: Vec<k8s_openapi::api::core::v1::EndpointAddress>,
        ports: &[(&str, i32)],
    ) -> Self {
        let subset = k8s_openapi::api::core::v1::EndpointSubset {
            addresses: (!ready.is_empty()).then_some(ready),
            not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
            ports: (!ports.is_empty()).then(|| {
                ports
                    .iter()
                    .map(|(name, port)| k8s_openapi::api::core::v1::EndpointPort {
                        name: (!name.is_empty()).then(|| name.to_string()),
                        port: *port,
                        protocol: Some("TCP".into()),
                        app_protocol: None,
                    })
                    .collect()
            }),
        };
        self.0.subsets.get_or_insert_with(Vec::new).push(subset);
        self
    }

    pub fn build(self) -> k8s_openapi::api::core::v1::Endpoints {
        self.0
    }
}

/// The `i`-th distinct IPv4 address `10.x.y.z`.
pub fn ipv4_nth(i: usize) -> String {
    format!("10.{}.{}.{}", (i / 65536) % 256, (i / 256) % 256, i % 256)
}

/// Distinct IPv6 addresses `fd00::<hex>`.
pub fn ipv6_nth(i: usize) -> String {
    format!("fd00::{:x}", i + 1)
}

/// Three ready Pods of which only `a` is selected by a Service `web` in
/// `default`: `b` has another app label, `c` lives in another namespace.
pub fn selection_pods() -> Vec<Arc<Pod>> {
    vec![
        pod("a", "web").ip("10.0.0.1").ready().arc(),
        pod("b", "other").ip("10.0.0.2").ready().arc(),
        pod("c", "web")
            .namespace("elsewhere")
            .ip("10.0.0.3")
            .ready()
            .arc(),
    ]
}
