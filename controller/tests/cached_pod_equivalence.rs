//! `CachedPod` is a drop-in for `Pod`: over random Pods that exercise every
//! field the reconcilers read (odd phases, several or no Ready conditions,
//! podIP without podIPs, invalid and non-canonical IPs, named ports in
//! regular containers, sidecars and plain init containers, protocols,
//! hostnames, terminating Pods, missing Nodes), the EndpointSlice plan (with
//! and without topology hints), the Endpoints plan, the trigger time and the
//! Services a Pod event queues are the same whichever representation the
//! core is given.
//!
//! The generators are wider than those of `reconcile_properties.rs`, which
//! only vary what the packing properties need.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Endpoints, Pod, PodCondition, PodIP, PodSpec, PodStatus, Service,
    ServicePort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use svcplane_controller::core::endpoints::{self, EndpointsWrite};
use svcplane_controller::core::endpointslice::triggers::{
    services_for_pod, services_for_pod_update,
};
use svcplane_controller::core::endpointslice::{self, Outcome, reconcile, reconcile_with_hints};
use svcplane_controller::core::fixtures::{apply_plan, node, nodes, svc};
use svcplane_controller::core::keys::ANNOTATION_TOPOLOGY_MODE;
use svcplane_controller::core::pod::{PodView, find_port};
use svcplane_controller::core::topology::TopologyPolicy;
use svcplane_controller::core::trigger_time::TriggerTimeTracker;
use svcplane_controller::shell::cache::CachedPod;
use svcplane_controller::shell::cache::watched_pod::WatchedPod;

const LABEL_KEYS: &[&str] = &["app", "tier", "pod-template-hash"];
const LABEL_VALUES: &[&str] = &["web", "fe", "x", ""];
const PORT_NAMES: &[&str] = &["http", "metrics", "dns", ""];
const PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP", "tcp"];
const PHASES: &[&str] = &[
    "Running",
    "Pending",
    "Succeeded",
    "Failed",
    "Unknown",
    "Odd",
];
const CONDITION_TYPES: &[&str] = &["Ready", "ContainersReady"];
const CONDITION_STATUSES: &[&str] = &["True", "False", "Unknown"];
const NODES: &[&str] = &["node-a", "node-b", "node-c", "gone", ""];
const RESTART_POLICIES: &[&str] = &["Always", "OnFailure"];

fn at(second: u8) -> Time {
    Time(Timestamp::from_second(1_700_000_000 + i64::from(second)).unwrap())
}

/// One container port: name (index into `PORT_NAMES`, `None` unnamed),
/// number, protocol (index into `PROTOCOLS`, `None` unset).
type PortGen = (Option<usize>, u16, Option<usize>);

#[derive(Debug, Clone)]
struct PodGen {
    other_namespace: bool,
    /// `app: web`, which the Service selects, before `labels`.
    app_web: bool,
    labels: Vec<(usize, usize)>,
    /// 0: unset, 1: "", 2: set.
    uid: u8,
    resource_version: Option<u8>,
    deleting: Option<u8>,
    no_spec: bool,
    node: Option<usize>,
    /// Hostname (`h` or ""), subdomain (`web`, `other` or "").
    hostname: Option<bool>,
    subdomain: Option<usize>,
    containers: Vec<Vec<PortGen>>,
    /// Init containers with a restart policy (index into `RESTART_POLICIES`).
    init: Vec<(Option<usize>, Vec<PortGen>)>,
    no_status: bool,
    phase: Option<usize>,
    /// (type, status, lastTransitionTime).
    conditions: Vec<(usize, usize, Option<u8>)>,
    /// Address kinds, see `address`.
    pod_ip: Option<u8>,
    pod_ips: Option<Vec<u8>>,
}

/// An address of kind `kind` for Pod `i`: canonical IPv4, canonical IPv6,
/// non-canonical IPv6, IPv4 with a leading zero, garbage, empty.
fn address(kind: u8, i: usize) -> String {
    match kind % 6 {
        0 => format!("10.0.{}.{}", i / 256, i % 256),
        1 => format!("fd00::{i:x}"),
        2 => format!("FD00:0:0::{i:x}"),
        3 => format!("10.1.0.0{}", i % 10),
        4 => "not-an-ip".to_owned(),
        _ => String::new(),
    }
}

fn port_gen() -> impl Strategy<Value = PortGen> {
    (
        prop::option::weighted(0.8, prop::sample::select(vec![0usize, 0, 0, 1, 2, 3])),
        prop::sample::select(vec![80u16, 8080, 9090]),
        prop::option::weighted(0.5, prop::sample::select(vec![0usize, 0, 1, 2, 3])),
    )
}

fn pod_gen() -> impl Strategy<Value = PodGen> {
    let meta = (
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.85),
        prop::collection::vec((0..LABEL_KEYS.len(), 0..LABEL_VALUES.len()), 0..3),
        prop::sample::select(vec![0u8, 1, 2, 2, 2]),
        prop::option::of(0u8..3),
        prop::option::weighted(0.15, 0u8..4),
    );
    let spec = (
        prop::bool::weighted(0.05),
        prop::option::weighted(
            0.95,
            prop::sample::select(vec![0usize, 0, 0, 1, 1, 1, 2, 2, 2, 3, 4]),
        ),
        prop::option::weighted(0.2, any::<bool>()),
        prop::option::weighted(0.2, 0usize..3),
        prop::collection::vec(prop::collection::vec(port_gen(), 0..3), 1..3),
        prop::collection::vec(
            (
                prop::option::weighted(0.7, 0..RESTART_POLICIES.len()),
                prop::collection::vec(port_gen(), 0..3),
            ),
            0..3,
        ),
    );
    let status = (
        prop::bool::weighted(0.05),
        prop::option::weighted(
            0.9,
            prop::sample::select(vec![0usize, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5]),
        ),
        prop::collection::vec(
            (
                prop::sample::select(vec![0usize, 0, 0, 1]),
                prop::sample::select(vec![0usize, 0, 0, 1, 2]),
                prop::option::weighted(0.9, 0u8..4),
            ),
            0..3,
        ),
        prop::option::weighted(0.8, prop::sample::select(vec![0u8, 0, 1, 2, 3, 4, 5])),
        prop::option::weighted(
            0.9,
            prop::collection::vec(
                prop::sample::select(vec![0u8, 0, 0, 0, 1, 1, 1, 2, 3, 4, 5]),
                0..4,
            ),
        ),
    );
    (meta, spec, status).prop_map(
        |(
            (other_namespace, app_web, labels, uid, resource_version, deleting),
            (no_spec, node, hostname, subdomain, containers, init),
            (no_status, phase, conditions, pod_ip, pod_ips),
        )| PodGen {
            other_namespace,
            app_web,
            labels,
            uid,
            resource_version,
            deleting,
            no_spec,
            node,
            hostname,
            subdomain,
            containers,
            init,
            no_status,
            phase,
            conditions,
            pod_ip,
            pod_ips,
        },
    )
}

fn container(ports: &[PortGen], restart: Option<usize>) -> Container {
    Container {
        name: "c".into(),
        restart_policy: restart.map(|r| RESTART_POLICIES[r].into()),
        ports: Some(
            ports
                .iter()
                .map(|(name, number, protocol)| ContainerPort {
                    name: name.map(|n| PORT_NAMES[n].into()),
                    container_port: i32::from(*number),
                    protocol: protocol.map(|p| PROTOCOLS[p].into()),
                    ..ContainerPort::default()
                })
                .collect(),
        ),
        ..Container::default()
    }
}

fn build_pod(i: usize, g: &PodGen) -> Pod {
    let metadata = ObjectMeta {
        name: Some(format!("p{i:03}")),
        namespace: Some(
            if g.other_namespace {
                "other"
            } else {
                "default"
            }
            .into(),
        ),
        uid: match g.uid {
            0 => None,
            1 => Some(String::new()),
            _ => Some(format!("uid-{i}")),
        },
        resource_version: g.resource_version.map(|v| v.to_string()),
        deletion_timestamp: g.deleting.map(at),
        labels: (g.app_web || !g.labels.is_empty()).then(|| {
            g.app_web
                .then_some(("app", "web"))
                .into_iter()
                .chain(
                    g.labels
                        .iter()
                        .map(|(k, v)| (LABEL_KEYS[*k], LABEL_VALUES[*v])),
                )
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect::<BTreeMap<_, _>>()
        }),
        ..ObjectMeta::default()
    };
    let spec = (!g.no_spec).then(|| PodSpec {
        node_name: g.node.map(|n| NODES[n].into()),
        hostname: g
            .hostname
            .map(|h| if h { "h".into() } else { String::new() }),
        subdomain: g.subdomain.map(|s| ["web", "other", ""][s].into()),
        containers: g.containers.iter().map(|c| container(c, None)).collect(),
        init_containers: Some(g.init.iter().map(|(r, c)| container(c, *r)).collect()),
        ..PodSpec::default()
    });
    let status = (!g.no_status).then(|| PodStatus {
        phase: g.phase.map(|p| PHASES[p].into()),
        conditions: Some(
            g.conditions
                .iter()
                .map(|(t, s, time)| PodCondition {
                    type_: CONDITION_TYPES[*t].into(),
                    status: CONDITION_STATUSES[*s].into(),
                    last_transition_time: time.map(at),
                    ..PodCondition::default()
                })
                .collect(),
        ),
        pod_ip: g.pod_ip.map(|k| address(k, i)),
        pod_ips: g
            .pod_ips
            .as_ref()
            .map(|ips| ips.iter().map(|k| PodIP { ip: address(*k, i) }).collect()),
        ..PodStatus::default()
    });
    Pod {
        metadata,
        spec,
        status,
    }
}

#[derive(Debug, Clone)]
struct SvcGen {
    /// 0: app=web, 1: app=web + tier=fe, 2: empty (selects every Pod).
    selector: u8,
    /// (target: name index, or 4 = number, 5 = unset; protocol index).
    ports: Vec<(usize, usize)>,
    families: u8,
    headless: bool,
    publish_not_ready: bool,
    /// 0: none, 1: topology-mode Auto, 2: PreferClose, 3: PreferSameNode.
    hints: u8,
}

fn svc_gen() -> impl Strategy<Value = SvcGen> {
    (
        prop::sample::select(vec![0u8, 0, 0, 1, 2]),
        prop::collection::vec(
            (
                prop::sample::select(vec![0usize, 0, 0, 1, 2, 3, 4, 5]),
                prop::sample::select(vec![0usize, 0, 0, 1, 2]),
            ),
            0..4,
        ),
        0u8..4,
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.3),
        0u8..4,
    )
        .prop_map(
            |(selector, ports, families, headless, publish_not_ready, hints)| SvcGen {
                selector,
                ports,
                families,
                headless,
                publish_not_ready,
                hints,
            },
        )
}

fn build_service(g: &SvcGen) -> Service {
    let mut b = svc("web");
    b = match g.families {
        0 => b.families(&["IPv4"]),
        1 => b.families(&["IPv6"]).cluster_ip("fd00:96::10"),
        2 => b.families(&["IPv4", "IPv6"]),
        _ => b.no_families(),
    };
    if g.headless {
        b = b.headless();
    }
    if g.publish_not_ready {
        b = b.publish_not_ready();
    }
    if g.hints == 1 {
        b = b.annotation(ANNOTATION_TOPOLOGY_MODE, "Auto");
    }
    let mut s = b.build();
    let spec = s.spec.get_or_insert_with(Default::default);
    spec.selector = Some(match g.selector {
        0 => BTreeMap::from([("app".to_owned(), "web".to_owned())]),
        1 => BTreeMap::from([
            ("app".to_owned(), "web".to_owned()),
            ("tier".to_owned(), "fe".to_owned()),
        ]),
        _ => BTreeMap::new(),
    });
    spec.traffic_distribution = match g.hints {
        2 => Some("PreferClose".into()),
        3 => Some("PreferSameNode".into()),
        _ => None,
    };
    spec.ports = Some(
        g.ports
            .iter()
            .enumerate()
            .map(|(k, (target, protocol))| ServicePort {
                name: Some(format!("p{k}")),
                port: 1000 + i32::try_from(k).unwrap(),
                target_port: match target {
                    0..4 => Some(IntOrString::String(PORT_NAMES[*target].into())),
                    4 => Some(IntOrString::Int(8080)),
                    _ => None,
                },
                protocol: Some(PROTOCOLS[*protocol].into()),
                ..ServicePort::default()
            })
            .collect(),
    );
    s
}

/// Every `PodView` read as text, so two representations can be compared.
fn reads<P: PodView>(p: &P) -> String {
    let ports: Vec<Option<i32>> = PORT_NAMES
        .iter()
        .flat_map(|n| {
            PROTOCOLS
                .iter()
                .map(move |proto| p.find_named_port(n, proto))
        })
        .collect();
    let labels: Vec<Option<&str>> = LABEL_KEYS.iter().map(|k| p.label(k)).collect();
    format!(
        "{:?}",
        (
            (p.namespace(), p.name(), p.uid(), p.resource_version()),
            (p.labels().collect::<Vec<_>>(), labels),
            p.deletion_timestamp(),
            (p.node_name(), p.hostname(), p.subdomain()),
            (p.phase(), p.is_ready(), p.ready_transition_time()),
            (p.pod_ip(), p.pod_ips().collect::<Vec<_>>()),
            ports,
        )
    )
}

fn both(pods: &[Pod]) -> (Vec<Arc<Pod>>, Vec<Arc<CachedPod>>) {
    (
        pods.iter().cloned().map(Arc::new).collect(),
        pods.iter()
            .cloned()
            .map(|p| Arc::new(CachedPod::from_pod(p)))
            .collect(),
    )
}

fn slice_outcome<P: PodView>(
    service: &Service,
    pods: &[Arc<P>],
    existing: &[Arc<k8s_openapi::api::discovery::v1::EndpointSlice>],
    max: usize,
    topology: Option<&mut TopologyPolicy>,
) -> Outcome {
    let nodes = nodes(&[
        node("node-a", Some("zone-a")),
        node("node-b", Some("zone-b")),
        node("node-c", Some("zone-c")),
    ]);
    let inputs = endpointslice::Inputs {
        service,
        pods,
        nodes: &nodes,
        existing,
        trigger_time: None,
        max_endpoints_per_slice: max,
    };
    match topology {
        Some(policy) => reconcile_with_hints(&inputs, policy),
        None => reconcile(&inputs),
    }
}

fn topology() -> TopologyPolicy {
    TopologyPolicy::from_nodes(&[
        node("node-a", Some("zone-a")),
        node("node-b", Some("zone-b")),
        node("node-c", Some("zone-c")),
    ])
}

fn endpoints_outcome<P: PodView>(
    service: &Service,
    pods: &[Arc<P>],
    existing: Option<&Endpoints>,
) -> endpoints::Outcome {
    endpoints::reconcile(&endpoints::Inputs {
        namespace: "default",
        name: "web",
        service: Some(service),
        pods,
        existing,
        trigger_time: Some(at(9).0),
    })
}

fn written_endpoints(outcome: &endpoints::Outcome) -> Option<Endpoints> {
    match outcome {
        endpoints::Outcome::Planned(p) => p.writes.iter().find_map(|w| match w {
            EndpointsWrite::Create(e) | EndpointsWrite::Update(e) => {
                let mut e = e.clone();
                e.metadata.resource_version = Some("1".into());
                Some(e)
            }
            EndpointsWrite::Delete(_) => None,
        }),
        endpoints::Outcome::Skipped(_) => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn cached_pods_plan_exactly_like_pods(
        before in prop::collection::vec(pod_gen(), 0..30),
        after in prop::collection::vec(pod_gen(), 0..30),
        service in svc_gen(),
        max in prop::sample::select(vec![1usize, 3, 100]),
    ) {
        let service = build_service(&service);
        let before: Vec<Pod> = before.iter().enumerate().map(|(i, g)| build_pod(i, g)).collect();
        let after: Vec<Pod> = after.iter().enumerate().map(|(i, g)| build_pod(i, g)).collect();
        let (pods_before, cached_before) = both(&before);
        let (pods_after, cached_after) = both(&after);

        // The runtime decodes watched Pods with only the fields it keeps: the same
        // CachedPod as from the full Pod.
        for (p, c) in after.iter().zip(&cached_after) {
            let json = serde_json::to_string(p).unwrap();
            let watched: WatchedPod = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(&CachedPod::from_pod(watched.0), c.as_ref());
        }

        // The raw reads, and the Service ports each Pod resolves.
        for (p, c) in pods_after.iter().zip(&cached_after) {
            prop_assert_eq!(reads(p.as_ref()), reads(c.as_ref()));
            for sp in service.spec.iter().flat_map(|s| s.ports.iter().flatten()) {
                prop_assert_eq!(find_port(p.as_ref(), sp), find_port(c.as_ref(), sp));
            }
        }

        // EndpointSlices: a first sync, then a sync of the changed Pods
        // against what the first one stored; without and with hints.
        let first = slice_outcome(&service, &pods_before, &[], max, None);
        prop_assert_eq!(&first, &slice_outcome(&service, &cached_before, &[], max, None));
        let stored = match &first {
            Outcome::Planned(plan) => apply_plan(&[], plan),
            Outcome::Skipped(_) => Vec::new(),
        };
        prop_assert_eq!(
            slice_outcome(&service, &pods_after, &stored, max, None),
            slice_outcome(&service, &cached_after, &stored, max, None)
        );
        let (mut with_pods, mut with_cached) = (topology(), topology());
        for (p, c, existing) in [
            (&pods_before, &cached_before, &[][..]),
            (&pods_after, &cached_after, &stored[..]),
        ] {
            prop_assert_eq!(
                slice_outcome(&service, p, existing, max, Some(&mut with_pods)),
                slice_outcome(&service, c, existing, max, Some(&mut with_cached))
            );
        }
        prop_assert_eq!(with_pods, with_cached);

        // Endpoints: create, then resync against the written object.
        let created = endpoints_outcome(&service, &pods_before, None);
        prop_assert_eq!(&created, &endpoints_outcome(&service, &cached_before, None));
        let existing = written_endpoints(&created);
        prop_assert_eq!(
            endpoints_outcome(&service, &pods_after, existing.as_ref()),
            endpoints_outcome(&service, &cached_after, existing.as_ref())
        );

        // Trigger times over two syncs.
        let (mut tracker_pods, mut tracker_cached) =
            (TriggerTimeTracker::default(), TriggerTimeTracker::default());
        for (p, c) in [(&pods_before, &cached_before), (&pods_after, &cached_after)] {
            prop_assert_eq!(tracker_pods.compute(&service, p), tracker_cached.compute(&service, c));
        }

        // Pod events: add/delete, and update of Pod i from before to after,
        // including a cached old Pod against a fresh new one.
        let others = [
            svc("tier").selector("tier", "fe").build(),
            svc("other").namespace("other").selector("app", "web").build(),
        ];
        let services: Vec<&Service> = std::iter::once(&service).chain(&others).collect();
        for (p, c) in pods_after.iter().zip(&cached_after) {
            prop_assert_eq!(
                services_for_pod(p.as_ref(), &services),
                services_for_pod(c.as_ref(), &services)
            );
        }
        for i in 0..before.len().min(after.len()) {
            let want = services_for_pod_update(
                pods_before[i].as_ref(),
                pods_after[i].as_ref(),
                &services,
            );
            prop_assert_eq!(
                &want,
                &services_for_pod_update(
                    cached_before[i].as_ref(),
                    cached_after[i].as_ref(),
                    &services
                )
            );
            prop_assert_eq!(
                &want,
                &services_for_pod_update(
                    cached_before[i].as_ref(),
                    pods_after[i].as_ref(),
                    &services
                )
            );
        }
    }
}
