//! Write floors and the correctness check, both from the pure planner.
//!
//! The **floor** of a trace (or of one phase) is what one pure plan writes to get from
//! the EndpointSlices and Endpoints stored when it starts to the state the Services,
//! Pods and Nodes at its end call for: what a controller that saw only the end state
//! would have to write. No correct controller can do with less; one that programs every
//! intermediate state (to keep latency low) writes more, so the ratio to the floor says
//! how much of the write traffic is owed to the trace's churn.
//!
//! The **check** is `run_env::assert_converged` returning its findings instead of
//! panicking: a re-plan of the stored objects writes nothing, no endpoint is in two
//! slices, no slice is over the maximum, no Endpoints over 1000 addresses.
//!
//! `plan` gathers each Service's Pods with a scan from the first namespace, which is
//! quadratic at 10 000 Services; planning each namespace on its own snapshot is
//! equivalent (every controller reads one namespace per key; Nodes are shared) and
//! linear.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use svcplane_controller::cli::Controller;
use svcplane_controller::core::endpoints::MAX_CAPACITY;
use svcplane_controller::core::endpointslice::CONTROLLER_NAME;
use svcplane_controller::core::keys::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME};
use svcplane_controller::core::slice_endpoints::SliceEndpoints;
use svcplane_controller::dump::snapshot::{Key, Snapshot};
use svcplane_controller::plan::output::Action;
use svcplane_controller::plan::{PlanOptions, plan};

use super::report::Budget;
use crate::fake_api::FakeApi;
use crate::run_env;

/// Writes of a plan, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Floor {
    pub slices: u64,
    pub endpoints: u64,
}

impl Floor {
    pub fn total(&self) -> u64 {
        self.slices + self.endpoints
    }
}

/// The stored objects now.
pub fn snapshot(fake: &FakeApi) -> Snapshot {
    run_env::snapshot(fake)
}

fn namespace_of<T>(map: &BTreeMap<Key, Arc<T>>, ns: &str) -> BTreeMap<Key, Arc<T>> {
    let from = Key {
        namespace: ns.to_owned(),
        name: String::new(),
    };
    map.range(from..)
        .take_while(|(k, _)| k.namespace == ns)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// `plan` over `snapshot`, one namespace at a time (see the module docs).
/// `plan`'s controllers of these names (registry names; a typo fails the run).
fn controllers(names: &[&str]) -> Vec<Controller> {
    names
        .iter()
        .map(|n| Controller::named(n).unwrap_or_else(|| panic!("no controller {n:?}")))
        .collect()
}

pub fn plan_actions(snapshot: &Snapshot, controllers: Vec<Controller>) -> Vec<Action> {
    let namespaces: BTreeSet<&str> = snapshot
        .services
        .keys()
        .chain(snapshot.pods.keys())
        .chain(snapshot.endpoint_slices.keys())
        .chain(snapshot.endpoints.keys())
        .map(|k| k.namespace.as_str())
        .collect();
    let options = PlanOptions {
        controllers,
        max_endpoints_per_slice:
            svcplane_controller::core::endpointslice::DEFAULT_MAX_ENDPOINTS_PER_SLICE,
        allocator: run_env::allocator(),
        follow_service_cidrs: false,
        now: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    };
    let mut actions = Vec::new();
    for ns in namespaces {
        let part = Snapshot {
            services: namespace_of(&snapshot.services, ns),
            pods: namespace_of(&snapshot.pods, ns),
            nodes: snapshot.nodes.clone(),
            endpoint_slices: namespace_of(&snapshot.endpoint_slices, ns),
            endpoints: namespace_of(&snapshot.endpoints, ns),
            service_cidrs: snapshot.service_cidrs.clone(),
            ip_addresses: snapshot.ip_addresses.clone(),
        };
        actions.extend(plan(&part, &options).actions);
    }
    actions
}

/// The floor from the slices and Endpoints of `start` to the desired state of `end`'s
/// Services, Pods and Nodes (EndpointSlice and Endpoints controllers).
pub fn floor(start: &Snapshot, end: &Snapshot) -> Floor {
    let combined = Snapshot {
        services: end.services.clone(),
        pods: end.pods.clone(),
        nodes: end.nodes.clone(),
        endpoint_slices: start.endpoint_slices.clone(),
        endpoints: start.endpoints.clone(),
        service_cidrs: end.service_cidrs.clone(),
        ip_addresses: end.ip_addresses.clone(),
    };
    let mut f = Floor::default();
    for a in plan_actions(&combined, controllers(&["endpointslice", "endpoints"])) {
        match a.kind {
            "EndpointSlice" => f.slices += 1,
            _ => f.endpoints += 1,
        }
    }
    f
}

/// What is wrong with the stored state (empty: converged), at most `limit` findings.
pub fn check(snap: &Snapshot, max_per_slice: usize, limit: usize) -> Vec<String> {
    let mut problems: Vec<String> = plan_actions(
        snap,
        controllers(&["endpointslice", "endpoints", "endpointslicemirroring"]),
    )
    .iter()
    .map(|a| {
        format!(
            "re-plan still writes: {} {:?} {} {}/{}",
            a.controller,
            a.verb,
            a.kind,
            a.namespace,
            a.name.as_deref().unwrap_or("<generated>")
        )
    })
    .collect();
    let mut seen: BTreeSet<(String, String, String, String)> = BTreeSet::new();
    for s in snap.endpoint_slices.values() {
        let labels = s.metadata.labels.clone().unwrap_or_default();
        if labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(CONTROLLER_NAME) {
            continue;
        }
        let name = s.metadata.name.clone().unwrap_or_default();
        if s.endpoints().len() > max_per_slice {
            problems.push(format!(
                "slice {name} holds {} endpoints (max {max_per_slice})",
                s.endpoints().len()
            ));
        }
        let ports = serde_json::to_string(&s.ports).unwrap_or_default();
        for e in s.endpoints() {
            let id = (
                s.metadata.namespace.clone().unwrap_or_default(),
                labels.get(LABEL_SERVICE_NAME).cloned().unwrap_or_default(),
                format!("{}{ports}", s.address_type),
                e.addresses.join(","),
            );
            if !seen.insert(id.clone()) {
                problems.push(format!("duplicate endpoint {id:?} (slice {name})"));
            }
        }
    }
    for e in snap.endpoints.values() {
        let n: usize = e
            .subsets
            .iter()
            .flatten()
            .map(|s| {
                s.addresses.as_ref().map_or(0, Vec::len)
                    + s.not_ready_addresses.as_ref().map_or(0, Vec::len)
            })
            .sum();
        if n > MAX_CAPACITY {
            problems.push(format!(
                "Endpoints {:?} holds {n} addresses",
                e.metadata.name
            ));
        }
    }
    let total = problems.len();
    if total > limit {
        problems.truncate(limit);
        problems.push(format!("... and {} more", total - limit));
    }
    problems
}

/// The stored EndpointSlices and Endpoints only (the start of a floor).
pub fn endpoint_state(fake: &FakeApi) -> Snapshot {
    let mut s = Snapshot::default();
    for v in fake.list_json("discovery.k8s.io/v1/endpointslices", None) {
        if let Ok(o) = serde_json::from_value::<k8s_openapi::api::discovery::v1::EndpointSlice>(v) {
            s.endpoint_slices.insert(key_of(&o.metadata), Arc::new(o));
        }
    }
    for v in fake.list_json("v1/endpoints", None) {
        if let Ok(o) = serde_json::from_value::<k8s_openapi::api::core::v1::Endpoints>(v) {
            s.endpoints.insert(key_of(&o.metadata), Arc::new(o));
        }
    }
    s
}

fn key_of(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Key {
    Key {
        namespace: m.namespace.clone().unwrap_or_default(),
        name: m.name.clone().unwrap_or_default(),
    }
}

/// S1's CPU target, part by part (see [`Budget`]), done the runtime's way on this
/// one thread: every Pod decoded from its JSON bytes, stripped and inserted into an
/// indexed `PodStore` (what the Pod watch does); for every Service of `end`, its Pods
/// from the label index and the EndpointSlice (with topology hints where enabled) and
/// Endpoints reconcilers against the
/// slices and Endpoints of `start` (what the two controllers' syncs do); every write's
/// object encoded to JSON (what the client sends).
pub fn budget(fake: &FakeApi, start: &Snapshot, end: &Snapshot) -> Budget {
    use svcplane_controller::core::endpoints::{self as eps, EndpointsWrite};
    use svcplane_controller::core::endpointslice::{self as es, Outcome, SliceWrite};
    use svcplane_controller::core::topology::TopologyPolicy;
    use svcplane_controller::shell::cache::watched_pod::WatchedPod;
    use svcplane_controller::shell::cache::{PodStore, Store, strip};
    let docs: Vec<Vec<u8>> = fake
        .list_json("v1/pods", None)
        .iter()
        .filter_map(|v| serde_json::to_vec(v).ok())
        .collect();
    let t = std::time::Instant::now();
    let mut store = PodStore::default();
    for d in &docs {
        if let Ok(pod) = serde_json::from_slice::<WatchedPod>(d) {
            store.upsert(Arc::new(strip::watched_pod(pod)));
        }
    }
    let decode = t.elapsed().as_secs_f64();
    drop(docs);

    let t = std::time::Instant::now();
    let mut topology = TopologyPolicy::from_nodes(end.nodes.values().map(Arc::as_ref));
    let mut slices = Vec::new();
    let mut endpoints = Vec::new();
    for (key, service) in &end.services {
        let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref());
        let pods = store.selected(&key.namespace, selector);
        let existing: Vec<_> = namespace_of(&start.endpoint_slices, &key.namespace)
            .into_values()
            .collect();
        let inputs = es::Inputs {
            service,
            pods: &pods,
            nodes: &end.nodes,
            existing: &existing,
            trigger_time: None,
            max_endpoints_per_slice:
                svcplane_controller::core::endpointslice::DEFAULT_MAX_ENDPOINTS_PER_SLICE,
        };
        if let Outcome::Planned(plan) = es::reconcile_with_hints(&inputs, &mut topology) {
            slices.extend(plan.writes().filter_map(|w| match w {
                SliceWrite::Create(s) | SliceWrite::Update(s) => Some(s),
                SliceWrite::Delete(_) => None,
            }));
        }
        let inputs = eps::Inputs {
            namespace: &key.namespace,
            name: &key.name,
            service: Some(service),
            pods: &pods,
            existing: start.endpoints.get(key).map(Arc::as_ref),
            trigger_time: None,
        };
        if let eps::Outcome::Planned(plan) = eps::reconcile(&inputs) {
            endpoints.extend(plan.writes.into_iter().filter_map(|w| match w {
                EndpointsWrite::Create(e) | EndpointsWrite::Update(e) => Some(e),
                EndpointsWrite::Delete(_) => None,
            }));
        }
    }
    let build = t.elapsed().as_secs_f64();

    let t = std::time::Instant::now();
    let bytes: usize = slices
        .iter()
        .filter_map(|s| serde_json::to_vec(s).ok())
        .chain(endpoints.iter().filter_map(|e| serde_json::to_vec(e).ok()))
        .map(|b| b.len())
        .sum();
    let encode = t.elapsed().as_secs_f64();
    std::hint::black_box(bytes);
    Budget {
        decode,
        build,
        encode,
    }
}
