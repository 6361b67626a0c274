//! Writes and latency as the API server shows them: the bench's own watch of every
//! EndpointSlice and Endpoints object.
//!
//! Counting at the API server rather than asking each controller keeps the two sides
//! comparable (kube-controller-manager has no write counter by verb, and a no-op update
//! that the server drops never reaches a watcher): every ADDED, MODIFIED or DELETED event
//! is one create, update or delete. Its size is the JSON of the object without
//! `managedFields`, about what the controller sent. The watch starts, from a list,
//! before the controller does, and is resumed from the last resourceVersion when the
//! server ends it; a `410 Gone` (history compacted) relists and is reported as a resync,
//! since events may have been missed.
//!
//! Latency reuses the simulator's bookkeeping ([`crate::sim::observe::Tracker`]) on the
//! wall clock (tokio's `Instant` on a runtime that is not paused): the driver records
//! each Pod change just before it sends it, and a watch event resolves every pending
//! change of a Pod it shows as last changed, timed at the event's arrival. Endpoints get
//! a second tracker, fed with each Endpoints object turned into a slice-shaped list of
//! its Pods ([`endpoints_as_slice`]), so the same rule applies to both. The
//! `default/kubernetes` Service (no selector) and anything of its are left out.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, ObjectReference};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use svcplane_controller::core::keys::LABEL_SERVICE_NAME;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::sim::observe::{LatencySummary, ObjKey, Tracker, Want};

/// A write as its watch event shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    Create,
    Update,
    Delete,
}

impl Verb {
    pub const ALL: [Verb; 3] = [Verb::Create, Verb::Update, Verb::Delete];

    pub fn name(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Delete => "delete",
        }
    }
}

/// The two resources written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    EndpointSlices,
    Endpoints,
}

impl Kind {
    pub const ALL: [Kind; 2] = [Kind::EndpointSlices, Kind::Endpoints];

    pub fn name(self) -> &'static str {
        match self {
            Kind::EndpointSlices => "endpointslices",
            Kind::Endpoints => "endpoints",
        }
    }
}

/// Write counts so far (cumulative: subtract an earlier reading with [`Writes::since`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Writes {
    counts: BTreeMap<(Kind, Verb), u64>,
    /// JSON bytes of the objects created and updated.
    pub bytes: u64,
}

impl Writes {
    pub fn get(&self, kind: Kind, verb: Verb) -> u64 {
        self.counts.get(&(kind, verb)).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// What happened after `earlier`.
    pub fn since(&self, earlier: &Writes) -> Writes {
        Writes {
            counts: self
                .counts
                .iter()
                .map(|(k, n)| {
                    (
                        *k,
                        n.saturating_sub(earlier.counts.get(k).copied().unwrap_or(0)),
                    )
                })
                .collect(),
            bytes: self.bytes.saturating_sub(earlier.bytes),
        }
    }

    fn add(&mut self, kind: Kind, verb: Verb, bytes: u64) {
        *self.counts.entry((kind, verb)).or_default() += 1;
        if verb != Verb::Delete {
            self.bytes += bytes;
        }
    }
}

/// A change the driver makes to a Pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodChange {
    /// Status written: it has an IP and this readiness (not terminating).
    Status { ready: bool },
    /// Deleted with a grace period: it stays, terminating. Slices keep it, not ready;
    /// Endpoints drop it.
    Terminating,
    /// Deleted for good.
    Gone,
}

impl PodChange {
    fn in_slices(self) -> Want {
        match self {
            PodChange::Status { ready } => Want::Present { ready },
            PodChange::Terminating => Want::Present { ready: false },
            PodChange::Gone => Want::Absent,
        }
    }

    fn in_endpoints(self) -> Want {
        match self {
            PodChange::Status { ready } => Want::Present { ready },
            PodChange::Terminating | PodChange::Gone => Want::Absent,
        }
    }
}

/// Whether an object is (or belongs to) the `default/kubernetes` Service: left out
/// of every count and check, as the API server itself writes its Endpoints.
pub(super) fn excluded(meta: &ObjectMeta) -> bool {
    meta.namespace.as_deref() == Some("default")
        && (meta.name.as_deref() == Some("kubernetes")
            || meta
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_SERVICE_NAME))
                .map(String::as_str)
                == Some("kubernetes"))
}

fn key_of(meta: &ObjectMeta) -> ObjKey {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// An Endpoints object as a slice of its Pods (ready for `addresses`, not ready for
/// `notReadyAddresses`), for the latency tracker. A Pod listed in several subsets
/// counts once, ready if it is ready in any.
pub fn endpoints_as_slice(ep: &Endpoints) -> EndpointSlice {
    let ns = ep.metadata.namespace.clone().unwrap_or_default();
    let mut pods: BTreeMap<ObjKey, bool> = BTreeMap::new();
    for subset in ep.subsets.iter().flatten() {
        let lists = [
            (&subset.addresses, true),
            (&subset.not_ready_addresses, false),
        ];
        for (list, ready) in lists {
            for a in list.iter().flatten() {
                let Some(r) = a.target_ref.as_ref() else {
                    continue;
                };
                if r.kind.as_deref() != Some("Pod") {
                    continue;
                }
                let key = (
                    r.namespace.clone().unwrap_or_else(|| ns.clone()),
                    r.name.clone().unwrap_or_default(),
                );
                *pods.entry(key).or_insert(ready) |= ready;
            }
        }
    }
    let mut slice = EndpointSlice::default();
    slice.metadata.namespace = ep.metadata.namespace.clone();
    slice.metadata.name = ep.metadata.name.clone();
    slice.endpoints = Some(
        pods.into_iter()
            .map(|((namespace, name), ready)| Endpoint {
                conditions: Some(EndpointConditions {
                    ready: Some(ready),
                    ..EndpointConditions::default()
                }),
                target_ref: Some(ObjectReference {
                    kind: Some("Pod".into()),
                    namespace: Some(namespace),
                    name: Some(name),
                    ..ObjectReference::default()
                }),
                ..Endpoint::default()
            })
            .collect(),
    );
    slice
}

/// Everything the watches and the driver share.
#[derive(Debug, Default)]
struct State {
    slices: Tracker,
    endpoints: Tracker,
    writes: Writes,
    last_write: Option<Instant>,
    /// Slice → the Service it belongs to (by its service-name label).
    slice_service: HashMap<ObjKey, ObjKey>,
    endpoints_objects: HashSet<ObjKey>,
    resyncs: u64,
}

/// A watched resource: how a seen object updates the [`State`].
trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug + Send + 'static
{
    const KIND: Kind;
    /// `obj` is now stored (`Some`) or gone (`None`) under `key`.
    fn seen(state: &mut State, key: ObjKey, obj: Option<&Self>, now: Instant);
    /// The keys the state holds for this resource (for a relist).
    fn known(state: &State) -> Vec<ObjKey>;
}

impl Watched for EndpointSlice {
    const KIND: Kind = Kind::EndpointSlices;

    fn seen(state: &mut State, key: ObjKey, obj: Option<&Self>, now: Instant) {
        match obj {
            Some(s) => {
                let service = s.labels().get(LABEL_SERVICE_NAME).cloned();
                if let Some(service) = service {
                    state
                        .slice_service
                        .insert(key.clone(), (key.0.clone(), service));
                }
            }
            None => {
                state.slice_service.remove(&key);
            }
        }
        state.slices.slice_event(key, obj, now);
    }

    fn known(state: &State) -> Vec<ObjKey> {
        state.slice_service.keys().cloned().collect()
    }
}

impl Watched for Endpoints {
    const KIND: Kind = Kind::Endpoints;

    fn seen(state: &mut State, key: ObjKey, obj: Option<&Self>, now: Instant) {
        match obj {
            Some(e) => {
                state.endpoints_objects.insert(key.clone());
                state
                    .endpoints
                    .slice_event(key, Some(&endpoints_as_slice(e)), now);
            }
            None => {
                state.endpoints_objects.remove(&key);
                state.endpoints.slice_event(key, None, now);
            }
        }
    }

    fn known(state: &State) -> Vec<ObjKey> {
        state.endpoints_objects.iter().cloned().collect()
    }
}

/// The JSON size of `obj` without its managedFields.
fn size_of<K: Watched>(obj: &K) -> u64 {
    let mut o = obj.clone();
    o.meta_mut().managed_fields = None;
    serde_json::to_vec(&o).map_or(0, |b| b.len() as u64)
}

/// When the figures settled (see [`Observer::settle`]), measured from its `start`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Settled {
    /// Every change reflected and every Service covered, as of the write that did it;
    /// `None`: not within the deadline.
    pub converged: Option<Duration>,
    /// The last write seen (`None`: none since `start`).
    pub last_write: Option<Duration>,
}

/// The running watches.
#[derive(Debug)]
pub struct Observer {
    state: Arc<Mutex<State>>,
    tasks: Vec<JoinHandle<()>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // Each update is complete under the lock, so a panic elsewhere leaves it usable.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Observer {
    /// Lists both resources and watches them from there, on `client` (unthrottled).
    pub async fn start(client: Client) -> anyhow::Result<Self> {
        let state = Arc::new(Mutex::new(State::default()));
        let slices: Api<EndpointSlice> = Api::all(client.clone());
        let endpoints: Api<Endpoints> = Api::all(client);
        let rv_slices = relist(&slices, &state, false).await?;
        let rv_endpoints = relist(&endpoints, &state, false).await?;
        let tasks = vec![
            tokio::spawn(watch(slices, rv_slices, state.clone())),
            tokio::spawn(watch(endpoints, rv_endpoints, state.clone())),
        ];
        Ok(Self { state, tasks })
    }

    /// The driver is about to make `change` to each of `pods`, at `at`.
    pub fn change<'a>(&self, pods: impl IntoIterator<Item = &'a ObjKey>, change: PodChange) {
        let at = Instant::now();
        let mut s = lock(&self.state);
        for pod in pods {
            s.slices.transition(pod.clone(), change.in_slices(), at);
            s.endpoints
                .transition(pod.clone(), change.in_endpoints(), at);
        }
    }

    /// Writes so far.
    pub fn writes(&self) -> Writes {
        lock(&self.state).writes.clone()
    }

    /// Latency of slices and of Endpoints since the last call; what is pending now
    /// counts as never reflected and is forgotten.
    pub fn take_latency(&self) -> (LatencySummary, LatencySummary) {
        let mut s = lock(&self.state);
        (s.slices.take_summary(), s.endpoints.take_summary())
    }

    /// Watch restarts that relisted (events may have been missed).
    pub fn resyncs(&self) -> u64 {
        lock(&self.state).resyncs
    }

    /// Every change reflected in the slices, all but `endpoints_capped` in Endpoints
    /// (Pods beyond an Endpoints object's 1000 addresses are never shown), and every
    /// Service of `services` with a slice and an Endpoints object.
    fn converged(&self, services: &[ObjKey], endpoints_capped: u64) -> bool {
        let s = lock(&self.state);
        if s.slices.pending() > 0 || s.endpoints.pending() > endpoints_capped {
            return false;
        }
        let with_slices: HashSet<&ObjKey> = s.slice_service.values().collect();
        services
            .iter()
            .all(|svc| with_slices.contains(svc) && s.endpoints_objects.contains(svc))
    }

    /// Waits until [`Self::converged`] and no write for `quiet`, or until `deadline`.
    /// `alive` is asked every poll; a dead controller is an error.
    pub async fn settle(
        &self,
        services: &[ObjKey],
        endpoints_capped: u64,
        start: Instant,
        quiet: Duration,
        deadline: Instant,
        mut alive: impl FnMut() -> bool,
    ) -> anyhow::Result<Settled> {
        let since = |t: Option<Instant>| t.filter(|t| *t >= start).map(|t| t - start);
        let mut converged = None;
        loop {
            anyhow::ensure!(alive(), "the controller exited");
            let last = lock(&self.state).last_write;
            if self.converged(services, endpoints_capped) {
                converged.get_or_insert(since(last).unwrap_or_default());
                if last.is_none_or(|t| t.elapsed() >= quiet) {
                    break;
                }
            } else {
                converged = None;
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Settled {
            converged,
            last_write: since(lock(&self.state).last_write),
        })
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Lists `api` into the state (no writes counted); forgets what is gone when
/// `resync`. Returns the list's resourceVersion.
async fn relist<K: Watched>(
    api: &Api<K>,
    state: &Mutex<State>,
    resync: bool,
) -> anyhow::Result<String> {
    let list = api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing {}", K::KIND.name()))?;
    let now = Instant::now();
    let mut s = lock(state);
    let mut listed = HashSet::new();
    for o in &list.items {
        if excluded(o.meta()) {
            continue;
        }
        let key = key_of(o.meta());
        listed.insert(key.clone());
        K::seen(&mut s, key, Some(o), now);
    }
    if resync {
        s.resyncs += 1;
        for key in K::known(&s) {
            if !listed.contains(&key) {
                K::seen(&mut s, key, None, now);
            }
        }
    }
    Ok(list.metadata.resource_version.unwrap_or_default())
}

/// Watches `api` from `rv` until aborted.
async fn watch<K: Watched>(api: Api<K>, mut rv: String, state: Arc<Mutex<State>>) {
    loop {
        let stream = match api.watch(&WatchParams::default().timeout(290), &rv).await {
            Ok(s) => s,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let mut stream = std::pin::pin!(stream);
        let mut gone = false;
        while let Some(event) = stream.next().await {
            let now = Instant::now();
            let (verb, obj) = match event {
                Ok(WatchEvent::Added(o)) => (Verb::Create, o),
                Ok(WatchEvent::Modified(o)) => (Verb::Update, o),
                Ok(WatchEvent::Deleted(o)) => (Verb::Delete, o),
                Ok(WatchEvent::Bookmark(b)) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                Ok(WatchEvent::Error(e)) => {
                    gone = e.code == 410;
                    break;
                }
                Err(_) => break,
            };
            if let Some(v) = obj.meta().resource_version.clone() {
                rv = v;
            }
            if excluded(obj.meta()) {
                continue;
            }
            let bytes = if verb == Verb::Delete {
                0
            } else {
                size_of(&obj)
            };
            let key = key_of(obj.meta());
            let mut s = lock(&state);
            s.writes.add(K::KIND, verb, bytes);
            s.last_write = Some(now);
            let stored = (verb != Verb::Delete).then_some(&obj);
            K::seen(&mut s, key, stored, now);
        }
        if gone {
            match relist(&api, &state, true).await {
                Ok(v) => rv = v,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svcplane_controller::core::slice_endpoints::SliceEndpoints;

    fn endpoints(ready: &[&str], not_ready: &[&str]) -> Endpoints {
        let addr = |p: &&str| serde_json::json!({"ip": "10.0.0.1", "targetRef": {"kind": "Pod", "name": p}});
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "ns", "name": "svc"},
            "subsets": [{
                "addresses": ready.iter().map(addr).collect::<Vec<_>>(),
                "notReadyAddresses": not_ready.iter().map(addr).collect::<Vec<_>>(),
                "ports": [{"port": 80}],
            }, {
                "addresses": ready.iter().map(addr).collect::<Vec<_>>(),
                "ports": [{"port": 9090}],
            }],
        }))
        .unwrap()
    }

    fn key(n: &str) -> ObjKey {
        ("ns".into(), n.into())
    }

    #[test]
    fn endpoints_become_one_member_per_pod() {
        let s = endpoints_as_slice(&endpoints(&["a", "b"], &["c"]));
        let members: Vec<(String, bool)> = s
            .endpoints()
            .iter()
            .map(|e| {
                (
                    e.target_ref.as_ref().unwrap().name.clone().unwrap(),
                    e.conditions.as_ref().unwrap().ready.unwrap(),
                )
            })
            .collect();
        assert_eq!(
            members,
            [("a".into(), true), ("b".into(), true), ("c".into(), false)]
        );
        assert_eq!(s.metadata.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn a_terminating_pod_is_reflected_when_endpoints_drop_it_and_slices_unready_it() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut st = State::default();
        Endpoints::seen(&mut st, key("svc"), Some(&endpoints(&["a"], &[])), t0);
        st.endpoints
            .transition(key("a"), PodChange::Terminating.in_endpoints(), t0);
        st.slices
            .transition(key("a"), PodChange::Terminating.in_slices(), t0);
        // Still listed as ready: nothing reflected.
        Endpoints::seen(
            &mut st,
            key("svc"),
            Some(&endpoints(&["a"], &[])),
            t0 + ms(5),
        );
        assert_eq!(st.endpoints.pending(), 1);
        Endpoints::seen(&mut st, key("svc"), Some(&endpoints(&[], &[])), t0 + ms(40));
        let e = st.endpoints.take_summary();
        assert_eq!((e.reflected, e.never_reflected, e.max), (1, 0, ms(40)));
        assert_eq!(st.slices.pending(), 1, "no slice written yet");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        for i in 1..=200u64 {
            let pod = format!("p{i}");
            t.transition(key(&pod), Want::Present { ready: true }, t0);
            let mut e = endpoints(&[&pod], &[]);
            e.metadata.name = Some(format!("s{i}"));
            t.slice_event(
                key(&format!("s{i}")),
                Some(&endpoints_as_slice(&e)),
                t0 + Duration::from_millis(i),
            );
        }
        let s = t.take_summary();
        assert_eq!(s.reflected, 200);
        assert_eq!(s.p50, Duration::from_millis(100));
        assert_eq!(s.p99, Duration::from_millis(198));
        assert_eq!(s.max, Duration::from_millis(200));
    }

    #[test]
    fn writes_subtract_and_skip_delete_bytes() {
        let mut w = Writes::default();
        w.add(Kind::Endpoints, Verb::Create, 100);
        let before = w.clone();
        w.add(Kind::Endpoints, Verb::Update, 50);
        w.add(Kind::EndpointSlices, Verb::Delete, 70);
        let d = w.since(&before);
        assert_eq!(d.total(), 2);
        assert_eq!(d.get(Kind::Endpoints, Verb::Create), 0);
        assert_eq!(d.get(Kind::Endpoints, Verb::Update), 1);
        assert_eq!(d.bytes, 50);
    }

    #[test]
    fn the_kubernetes_service_is_left_out() {
        let mut m = ObjectMeta {
            namespace: Some("default".into()),
            name: Some("kubernetes".into()),
            ..ObjectMeta::default()
        };
        assert!(excluded(&m));
        m.name = Some("kubernetes-abcde".into());
        m.labels = Some([(LABEL_SERVICE_NAME.to_owned(), "kubernetes".to_owned())].into());
        assert!(excluded(&m));
        m.namespace = Some("ns".into());
        assert!(!excluded(&m));
    }
}
