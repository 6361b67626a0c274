//! The runtime's in-memory view of the cluster: one store per watched resource,
//! with the indexes the event handlers and reconcilers need.
//!
//! - [`strip`]: what each store keeps of an object;
//! - [`nsmap`]: namespaced objects sorted by name;
//! - [`index`]: label indexes (Pods by label, Services by one selector pair);
//! - [`cached_pod`]: the compact Pod the store keeps (what the reconcilers read);
//! - [`watched_pod`]: decoding watched Pods straight into the fields kept;
//! - [`packed`]: Services, EndpointSlices and Endpoints kept as JSON, decoded when read;
//! - this module: the stores and [`Cache`], which the watches fill and the
//!   controllers read.
//!
//! Each store sits behind its own `RwLock`: watches write one object at a time and
//! reconcilers take short read locks to copy out `Arc`s, so neither waits long for the
//! other. No lock is ever held across an `.await`.

pub mod cached_pod;
pub mod index;
pub mod nsmap;
pub mod packed;
pub mod strip;
pub mod watched_pod;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use self::cached_pod::CachedPod;
use self::index::NamespacedLabelIndex;
use self::nsmap::NsMap;
use self::packed::Packed;
use crate::core::change::Change;
use crate::core::keys::LABEL_SERVICE_NAME;
use crate::core::nodes::NodeLookup;
use crate::core::pod::PodView;
use crate::core::selector::selector_matches_pod;

/// Namespace, name and resourceVersion of a cached object.
pub trait Keyed {
    fn namespace(&self) -> &str;
    fn name(&self) -> &str;
    fn resource_version(&self) -> Option<&str>;
}

fn meta_ns(m: &ObjectMeta) -> &str {
    m.namespace.as_deref().unwrap_or_default()
}

fn meta_name(m: &ObjectMeta) -> &str {
    m.name.as_deref().unwrap_or_default()
}

macro_rules! keyed_by_metadata {
    ($($t:ty),*) => {$(
        impl Keyed for $t {
            fn namespace(&self) -> &str {
                meta_ns(&self.metadata)
            }
            fn name(&self) -> &str {
                meta_name(&self.metadata)
            }
            fn resource_version(&self) -> Option<&str> {
                self.metadata.resource_version.as_deref()
            }
        }
    )*};
}

keyed_by_metadata!(
    Service,
    EndpointSlice,
    Endpoints,
    Node,
    ServiceCIDR,
    IPAddress
);

impl Keyed for CachedPod {
    fn namespace(&self) -> &str {
        PodView::namespace(self)
    }
    fn name(&self) -> &str {
        PodView::name(self)
    }
    fn resource_version(&self) -> Option<&str> {
        PodView::resource_version(self)
    }
}

/// What a watch needs of a store.
pub trait Store: Send + Sync + 'static {
    type Item: Keyed + Send + Sync + 'static;
    /// Stores the object; returns the previous version.
    fn upsert(&mut self, obj: Arc<Self::Item>) -> Option<Arc<Self::Item>>;
    fn remove(&mut self, namespace: &str, name: &str) -> Option<Arc<Self::Item>>;
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<Self::Item>>;
    /// Every object (for a consumer attached late).
    fn all(&self) -> Vec<Arc<Self::Item>>;
    /// (namespace, name) of every object (for the re-list diff).
    fn keys(&self) -> Vec<(String, String)>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// (namespace, name) of a Pod in the Node index.
type PodKey = (Box<str>, Arc<str>);

/// Pods, indexed by label and by Node.
#[derive(Debug, Default)]
pub struct PodStore {
    pods: NsMap<CachedPod>,
    labels: NamespacedLabelIndex,
    /// Node name → (namespace, name) of the Pods bound to it.
    by_node: HashMap<Box<str>, BTreeSet<PodKey>>,
}

impl PodStore {
    /// The Pods of `namespace` that `selector` matches, sorted by name. `None`
    /// matches nothing; an empty selector matches every Pod of the namespace.
    pub fn selected(
        &self,
        namespace: &str,
        selector: Option<&BTreeMap<String, String>>,
    ) -> Vec<Arc<CachedPod>> {
        let Some(selector) = selector else {
            return Vec::new();
        };
        if selector.is_empty() {
            return self
                .pods
                .in_namespace(namespace)
                .map(|(_, p)| p.clone())
                .collect();
        }
        // The rarest pair bounds the candidates; a pair nobody carries means none.
        let mut smallest: Option<&BTreeSet<Arc<str>>> = None;
        for (k, v) in selector {
            match self.labels.get(namespace, k, v) {
                None => return Vec::new(),
                Some(set) if smallest.is_none_or(|s| set.len() < s.len()) => smallest = Some(set),
                Some(_) => {}
            }
        }
        smallest
            .into_iter()
            .flatten()
            .filter_map(|name| self.pods.get(namespace, name))
            .filter(|p| selector_matches_pod(Some(selector), p.as_ref()))
            .cloned()
            .collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<CachedPod>> {
        self.pods.iter().map(|(_, _, p)| p)
    }

    /// The Pods bound to Node `node`.
    pub fn on_node(&self, node: &str) -> Vec<Arc<CachedPod>> {
        self.by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|(ns, name)| self.pods.get(ns, name))
            .cloned()
            .collect()
    }

    fn index(&mut self, pod: &CachedPod, name: &Arc<str>) {
        let ns = PodView::namespace(pod);
        for (k, v) in pod.labels() {
            self.labels.add(ns, k, v, name);
        }
    }

    fn unindex(&mut self, pod: &CachedPod) {
        let (ns, name) = (PodView::namespace(pod), PodView::name(pod));
        for (k, v) in pod.labels() {
            self.labels.remove(ns, k, v, name);
        }
    }

    fn index_node(&mut self, pod: &CachedPod, name: &Arc<str>) {
        if let Some(node) = pod.node_name().filter(|n| !n.is_empty()) {
            let entry = (Box::from(PodView::namespace(pod)), name.clone());
            match self.by_node.get_mut(node) {
                Some(set) => {
                    set.insert(entry);
                }
                None => {
                    self.by_node
                        .insert(Box::from(node), BTreeSet::from([entry]));
                }
            }
        }
    }

    fn unindex_node(&mut self, pod: &CachedPod) {
        let Some(node) = pod.node_name().filter(|n| !n.is_empty()) else {
            return;
        };
        if let Some(set) = self.by_node.get_mut(node) {
            set.retain(|(ns, n)| !(&**ns == PodView::namespace(pod) && &**n == PodView::name(pod)));
            if set.is_empty() {
                self.by_node.remove(node);
            }
        }
    }
}

impl Store for PodStore {
    type Item = CachedPod;

    fn upsert(&mut self, pod: Arc<CachedPod>) -> Option<Arc<CachedPod>> {
        let (old, name) =
            self.pods
                .insert(PodView::namespace(&*pod), PodView::name(&*pod), pod.clone());
        let labels_same = old.as_ref().is_some_and(|o| o.labels().eq(pod.labels()));
        if !labels_same {
            if let Some(o) = &old {
                self.unindex(o);
            }
            self.index(&pod, &name);
        }
        let node_same = old
            .as_ref()
            .is_some_and(|o| o.node_name() == pod.node_name());
        if !node_same {
            if let Some(o) = &old {
                self.unindex_node(o);
            }
            self.index_node(&pod, &name);
        }
        old
    }

    fn remove(&mut self, namespace: &str, name: &str) -> Option<Arc<CachedPod>> {
        let old = self.pods.remove(namespace, name)?;
        self.unindex(&old);
        self.unindex_node(&old);
        Some(old)
    }

    fn get(&self, namespace: &str, name: &str) -> Option<Arc<CachedPod>> {
        self.pods.get(namespace, name).cloned()
    }

    fn all(&self) -> Vec<Arc<CachedPod>> {
        self.iter().cloned().collect()
    }

    fn keys(&self) -> Vec<(String, String)> {
        self.pods.keys()
    }

    fn len(&self) -> usize {
        self.pods.len()
    }
}

/// Services, indexed by the first pair of their selector (a Pod can only match a
/// selector whose every pair it carries, so the first one is as good as any). Each is
/// kept packed with its selector beside it, so matching a Pod decodes only the
/// Services it matches.
#[derive(Debug, Default)]
pub struct ServiceStore {
    services: NsMap<PackedService>,
    by_selector_pair: NamespacedLabelIndex,
    /// Services with an empty (non-nil) selector: they match every Pod.
    match_all: HashMap<Arc<str>, BTreeSet<Arc<str>>>,
}

/// A cached Service: its selector, and the whole object packed.
#[derive(Debug)]
struct PackedService {
    selector: Option<BTreeMap<String, String>>,
    service: Packed<Service>,
}

impl PackedService {
    fn unpack(&self) -> Arc<Service> {
        Arc::new(self.service.unpack())
    }
}

fn selector_of(s: &Service) -> Option<&BTreeMap<String, String>> {
    s.spec.as_ref().and_then(|sp| sp.selector.as_ref())
}

impl ServiceStore {
    /// Services of the Pod's namespace whose selector matches the Pod's labels,
    /// sorted by name.
    pub fn matching<P: PodView>(&self, pod: &P) -> Vec<Arc<Service>> {
        let ns = pod.namespace();
        let mut names: BTreeSet<&Arc<str>> = BTreeSet::new();
        for (k, v) in pod.labels() {
            if let Some(set) = self.by_selector_pair.get(ns, k, v) {
                names.extend(set);
            }
        }
        if let Some(all) = self.match_all.get(ns) {
            names.extend(all);
        }
        names
            .into_iter()
            .filter_map(|n| self.services.get(ns, n))
            .filter(|s| selector_matches_pod(s.selector.as_ref(), pod))
            .map(|s| s.unpack())
            .collect()
    }

    /// Every Service, decoded one at a time.
    pub fn iter(&self) -> impl Iterator<Item = Arc<Service>> + '_ {
        self.services.iter().map(|(_, _, s)| s.unpack())
    }

    fn index(&mut self, svc: &Service, name: &Arc<str>) {
        let ns = meta_ns(&svc.metadata);
        match selector_of(svc).map(|s| s.iter().next()) {
            None => {}
            Some(None) => {
                self.match_all
                    .entry(Arc::from(ns))
                    .or_default()
                    .insert(name.clone());
            }
            Some(Some((k, v))) => self.by_selector_pair.add(ns, k, v, name),
        }
    }

    fn unindex(&mut self, ns: &str, name: &str, selector: Option<&BTreeMap<String, String>>) {
        match selector.map(|s| s.iter().next()) {
            None => {}
            Some(None) => {
                if let Some(set) = self.match_all.get_mut(ns) {
                    set.remove(name);
                    if set.is_empty() {
                        self.match_all.remove(ns);
                    }
                }
            }
            Some(Some((k, v))) => self.by_selector_pair.remove(ns, k, v, name),
        }
    }
}

impl Store for ServiceStore {
    type Item = Service;

    fn upsert(&mut self, svc: Arc<Service>) -> Option<Arc<Service>> {
        let (ns, name) = (meta_ns(&svc.metadata), meta_name(&svc.metadata));
        let packed = PackedService {
            selector: selector_of(&svc).cloned(),
            service: Packed::new(&*svc),
        };
        let (old, shared) = self.services.insert(ns, name, Arc::new(packed));
        if let Some(o) = &old {
            self.unindex(ns, name, o.selector.as_ref());
        }
        self.index(&svc, &shared);
        old.map(|o| o.unpack())
    }

    fn remove(&mut self, namespace: &str, name: &str) -> Option<Arc<Service>> {
        let old = self.services.remove(namespace, name)?;
        self.unindex(namespace, name, old.selector.as_ref());
        Some(old.unpack())
    }

    fn get(&self, namespace: &str, name: &str) -> Option<Arc<Service>> {
        self.services.get(namespace, name).map(|s| s.unpack())
    }

    fn all(&self) -> Vec<Arc<Service>> {
        self.iter().collect()
    }

    fn keys(&self) -> Vec<(String, String)> {
        self.services.keys()
    }

    fn len(&self) -> usize {
        self.services.len()
    }
}

/// EndpointSlices, packed, indexed by their `kubernetes.io/service-name` label.
#[derive(Debug, Default)]
pub struct SliceStore {
    slices: NsMap<PackedSlice>,
    /// Namespace → service-name label → slice names.
    by_service: HashMap<Arc<str>, HashMap<Box<str>, index::Names>>,
}

/// A cached slice: the Service it is labelled with, and the whole object packed.
#[derive(Debug)]
struct PackedSlice {
    service: Option<Box<str>>,
    slice: Packed<EndpointSlice>,
}

impl PackedSlice {
    fn unpack(&self) -> Arc<EndpointSlice> {
        Arc::new(self.slice.unpack())
    }
}

fn service_label(s: &EndpointSlice) -> Option<&str> {
    s.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SERVICE_NAME))
        .map(String::as_str)
}

impl SliceStore {
    /// Every slice labelled with this Service's name (any manager), by name.
    pub fn of_service(&self, namespace: &str, service: &str) -> Vec<Arc<EndpointSlice>> {
        self.by_service
            .get(namespace)
            .and_then(|m| m.get(service))
            .into_iter()
            .flatten()
            .filter_map(|n| self.slices.get(namespace, n))
            .map(|s| s.unpack())
            .collect()
    }

    /// Every slice, decoded one at a time.
    pub fn iter(&self) -> impl Iterator<Item = Arc<EndpointSlice>> + '_ {
        self.slices.iter().map(|(_, _, s)| s.unpack())
    }

    fn unindex(&mut self, ns: &str, name: &str, service: Option<&str>) {
        let Some(svc) = service else {
            return;
        };
        if let Some(m) = self.by_service.get_mut(ns) {
            if let Some(set) = m.get_mut(svc) {
                set.remove(name);
                if set.is_empty() {
                    m.remove(svc);
                }
            }
            if m.is_empty() {
                self.by_service.remove(ns);
            }
        }
    }
}

impl Store for SliceStore {
    type Item = EndpointSlice;

    fn upsert(&mut self, slice: Arc<EndpointSlice>) -> Option<Arc<EndpointSlice>> {
        let (ns, name) = (meta_ns(&slice.metadata), meta_name(&slice.metadata));
        let service = service_label(&slice);
        let packed = PackedSlice {
            service: service.map(Box::from),
            slice: Packed::new(&*slice),
        };
        let (old, shared) = self.slices.insert(ns, name, Arc::new(packed));
        if let Some(o) = &old {
            self.unindex(ns, name, o.service.as_deref());
        }
        if let Some(svc) = service {
            self.by_service
                .entry(Arc::from(ns))
                .or_default()
                .entry(Box::from(svc))
                .or_default()
                .insert(shared);
        }
        old.map(|o| o.unpack())
    }

    fn remove(&mut self, namespace: &str, name: &str) -> Option<Arc<EndpointSlice>> {
        let old = self.slices.remove(namespace, name)?;
        self.unindex(namespace, name, old.service.as_deref());
        Some(old.unpack())
    }

    fn get(&self, namespace: &str, name: &str) -> Option<Arc<EndpointSlice>> {
        self.slices.get(namespace, name).map(|s| s.unpack())
    }

    fn all(&self) -> Vec<Arc<EndpointSlice>> {
        self.iter().collect()
    }

    fn keys(&self) -> Vec<(String, String)> {
        self.slices.keys()
    }

    fn len(&self) -> usize {
        self.slices.len()
    }
}

/// Endpoints objects, packed.
#[derive(Debug, Default)]
pub struct EndpointsStore {
    endpoints: NsMap<Packed<Endpoints>>,
}

impl EndpointsStore {
    /// Every Endpoints object, decoded one at a time.
    pub fn iter(&self) -> impl Iterator<Item = Arc<Endpoints>> + '_ {
        self.endpoints.iter().map(|(_, _, e)| Arc::new(e.unpack()))
    }
}

impl Store for EndpointsStore {
    type Item = Endpoints;

    fn upsert(&mut self, e: Arc<Endpoints>) -> Option<Arc<Endpoints>> {
        let (old, _) = self.endpoints.insert(
            meta_ns(&e.metadata),
            meta_name(&e.metadata),
            Arc::new(Packed::new(&*e)),
        );
        old.map(|o| Arc::new(o.unpack()))
    }

    fn remove(&mut self, namespace: &str, name: &str) -> Option<Arc<Endpoints>> {
        self.endpoints
            .remove(namespace, name)
            .map(|o| Arc::new(o.unpack()))
    }

    fn get(&self, namespace: &str, name: &str) -> Option<Arc<Endpoints>> {
        self.endpoints
            .get(namespace, name)
            .map(|o| Arc::new(o.unpack()))
    }

    fn all(&self) -> Vec<Arc<Endpoints>> {
        self.iter().collect()
    }

    fn keys(&self) -> Vec<(String, String)> {
        self.endpoints.keys()
    }

    fn len(&self) -> usize {
        self.endpoints.len()
    }
}

/// Nodes by name.
#[derive(Debug, Default)]
pub struct NodeStore {
    nodes: BTreeMap<String, Arc<Node>>,
}

impl NodeStore {
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Node>> {
        self.nodes.values()
    }
}

impl NodeLookup for NodeStore {
    fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name).map(Arc::as_ref)
    }
}

impl Store for NodeStore {
    type Item = Node;

    fn upsert(&mut self, n: Arc<Node>) -> Option<Arc<Node>> {
        self.nodes.insert(meta_name(&n.metadata).to_owned(), n)
    }

    fn remove(&mut self, _namespace: &str, name: &str) -> Option<Arc<Node>> {
        self.nodes.remove(name)
    }

    fn get(&self, _namespace: &str, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(name).cloned()
    }

    fn all(&self) -> Vec<Arc<Node>> {
        self.nodes.values().cloned().collect()
    }

    fn keys(&self) -> Vec<(String, String)> {
        self.nodes
            .keys()
            .map(|n| (String::new(), n.clone()))
            .collect()
    }

    fn len(&self) -> usize {
        self.nodes.len()
    }
}

/// Cluster-scoped objects kept whole, by name (ServiceCIDRs, IPAddresses).
#[derive(Debug)]
pub struct ClusterStore<T> {
    objects: BTreeMap<String, Arc<T>>,
}

impl<T> Default for ClusterStore<T> {
    fn default() -> Self {
        Self {
            objects: BTreeMap::new(),
        }
    }
}

impl<T> ClusterStore<T> {
    pub fn iter(&self) -> impl Iterator<Item = &Arc<T>> {
        self.objects.values()
    }
}

impl<T: Keyed + Send + Sync + 'static> Store for ClusterStore<T> {
    type Item = T;

    fn upsert(&mut self, o: Arc<T>) -> Option<Arc<T>> {
        self.objects.insert(o.name().to_owned(), o)
    }

    fn remove(&mut self, _namespace: &str, name: &str) -> Option<Arc<T>> {
        self.objects.remove(name)
    }

    fn get(&self, _namespace: &str, name: &str) -> Option<Arc<T>> {
        self.objects.get(name).cloned()
    }

    fn all(&self) -> Vec<Arc<T>> {
        self.objects.values().cloned().collect()
    }

    fn keys(&self) -> Vec<(String, String)> {
        self.objects
            .keys()
            .map(|n| (String::new(), n.clone()))
            .collect()
    }

    fn len(&self) -> usize {
        self.objects.len()
    }
}

/// Whether a watched store can be trusted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SyncState {
    /// A list has completed since the process started watching.
    pub(crate) listed: bool,
    /// Listed, and not failed since: the store holds what the API server holds
    /// (up to the watch's own delay).
    pub(crate) in_sync: bool,
}

/// Something that wants every change of one resource once the store holds it: the
/// controllers' event handlers, the webhook's allocation state. One watch per
/// resource feeds them all.
pub(crate) trait Consumer<T>: Send + Sync {
    /// One change, after the store applied it.
    fn changed(&self, change: &Change<T>);

    /// The watch listed (`true`) or failed / started listing again (`false`).
    fn sync_changed(&self, _in_sync: bool) {}
}

/// A store behind its lock, with the watch's sync signal and the consumers its
/// changes go to. The watch is its only writer ([`crate::shell::watch`]); readers
/// take short read locks to copy `Arc`s out.
pub struct Shared<S: Store> {
    store: RwLock<S>,
    sync: tokio::sync::watch::Sender<SyncState>,
    consumers: RwLock<Vec<Arc<dyn Consumer<S::Item>>>>,
    /// A watch has been started for this store (at most one ever is).
    watched: AtomicBool,
}

impl<S: Store + Default> Default for Shared<S> {
    fn default() -> Self {
        Self {
            store: RwLock::new(S::default()),
            sync: tokio::sync::watch::Sender::new(SyncState::default()),
            consumers: RwLock::new(Vec::new()),
            watched: AtomicBool::new(false),
        }
    }
}

impl<S: Store> std::fmt::Debug for Shared<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("sync", &*self.sync.borrow())
            .field("objects", &self.read().len())
            .finish_non_exhaustive()
    }
}

impl<S: Store> Shared<S> {
    /// Readers copy `Arc`s out and let go; a poisoned lock still holds a consistent
    /// store (every store method completes its map updates before returning).
    pub fn read(&self) -> RwLockReadGuard<'_, S> {
        self.store
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, S> {
        self.store
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a list has completed.
    pub fn is_synced(&self) -> bool {
        self.sync.borrow().listed
    }

    /// Whether the store is listed and its watch has not failed since.
    pub(crate) fn is_in_sync(&self) -> bool {
        self.sync.borrow().in_sync
    }

    /// Waits until a list has completed (at once if one has): the signal the
    /// controllers start on, raised by the watch itself.
    pub(crate) async fn wait_synced(&self) {
        let mut rx = self.sync.subscribe();
        // The sender lives as long as `self`, which outlives this borrow.
        let _ = rx.wait_for(|s| s.listed).await;
    }

    /// The watch completed a list: the store is complete.
    pub(crate) fn mark_listed(&self) {
        self.sync.send_replace(SyncState {
            listed: true,
            in_sync: true,
        });
        for c in self.consumers_now() {
            c.sync_changed(true);
        }
    }

    /// The watch failed or started a re-list: changes may be missing until it lists.
    pub(crate) fn mark_out_of_sync(&self) {
        let was = self.sync.send_replace(SyncState {
            listed: self.is_synced(),
            in_sync: false,
        });
        if was.in_sync {
            for c in self.consumers_now() {
                c.sync_changed(false);
            }
        }
    }

    /// Claims the right to start this store's watch: `true` once, for the first caller.
    pub(crate) fn claim_watch(&self) -> bool {
        !self.watched.swap(true, Ordering::AcqRel)
    }

    fn consumers_now(&self) -> Vec<Arc<dyn Consumer<S::Item>>> {
        self.consumers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Hands `change` to every consumer.
    pub(crate) fn dispatch(&self, change: &Change<S::Item>) {
        let consumers = self
            .consumers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for c in consumers.iter() {
            c.changed(change);
        }
    }

    /// Adds a consumer. It first gets every object the store holds as `Added` (and
    /// the current sync state), so a consumer attached to a running watch starts
    /// from the same picture as one attached before the first list. A change the
    /// watch makes meanwhile may reach it twice, never not at all.
    pub(crate) fn attach(&self, consumer: Arc<dyn Consumer<S::Item>>) {
        let mut consumers = self
            .consumers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let existing = self.read().all();
        for obj in existing {
            consumer.changed(&Change::Added(obj));
        }
        if self.is_in_sync() {
            consumer.sync_changed(true);
        }
        consumers.push(consumer);
    }
}

/// The resources the runtime watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Resource {
    Services,
    Pods,
    Nodes,
    EndpointSlices,
    Endpoints,
    /// `networking.k8s.io/v1` ServiceCIDRs (absent before Kubernetes 1.33).
    ServiceCidrs,
    /// `networking.k8s.io/v1` IPAddresses (absent before Kubernetes 1.33).
    IpAddresses,
}

impl Resource {
    /// Every kind, in a fixed order.
    pub(crate) const ALL: [Resource; 7] = [
        Resource::Services,
        Resource::Pods,
        Resource::Nodes,
        Resource::EndpointSlices,
        Resource::Endpoints,
        Resource::ServiceCidrs,
        Resource::IpAddresses,
    ];

    /// The plural name (logs, metrics and RBAC rules).
    pub(crate) fn plural(self) -> &'static str {
        self.ops().plural()
    }

    /// The API group (`""` for the core group).
    pub(crate) fn group(self) -> &'static str {
        self.ops().group()
    }
}

/// Every store of the process. Stores of resources nothing reads stay empty and
/// unwatched; a resource read by several consumers (Services: the controllers and
/// the webhook) is watched once.
#[derive(Debug, Default)]
pub struct Cache {
    pub services: Shared<ServiceStore>,
    pub pods: Shared<PodStore>,
    pub nodes: Shared<NodeStore>,
    pub slices: Shared<SliceStore>,
    pub endpoints: Shared<EndpointsStore>,
    pub service_cidrs: Shared<ClusterStore<ServiceCIDR>>,
    pub ip_addresses: Shared<ClusterStore<IPAddress>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::{pod, svc};

    fn cached(p: k8s_openapi::api::core::v1::Pod) -> Arc<CachedPod> {
        Arc::new(CachedPod::from_pod(p))
    }

    #[test]
    fn each_resource_names_the_group_and_plural_of_its_api_type() {
        // RBAC rules are built from these (shell::access): a typo would grant
        // something the watch never uses.
        fn of<K: k8s_openapi::Resource>() -> (&'static str, &'static str) {
            (K::GROUP, K::URL_PATH_SEGMENT)
        }
        use k8s_openapi::api::{
            core::v1 as core, discovery::v1 as discovery, networking::v1 as net,
        };
        for (r, want) in [
            (Resource::Services, of::<core::Service>()),
            (Resource::Pods, of::<core::Pod>()),
            (Resource::Nodes, of::<core::Node>()),
            (Resource::Endpoints, of::<core::Endpoints>()),
            (Resource::EndpointSlices, of::<discovery::EndpointSlice>()),
            (Resource::ServiceCidrs, of::<net::ServiceCIDR>()),
            (Resource::IpAddresses, of::<net::IPAddress>()),
        ] {
            assert_eq!((r.group(), r.plural()), want, "{r:?}");
        }
    }

    #[test]
    fn selected_pods_use_the_rarest_pair_and_match_exactly() {
        let mut s = PodStore::default();
        for i in 0..5 {
            s.upsert(cached(
                pod(&format!("web-{i}"), "web").label("tier", "a").build(),
            ));
        }
        s.upsert(cached(pod("web-x", "web").label("tier", "b").build()));
        s.upsert(cached(pod("db-0", "db").label("tier", "a").build()));
        let sel = BTreeMap::from([
            ("app".to_owned(), "web".to_owned()),
            ("tier".to_owned(), "b".to_owned()),
        ]);
        let names: Vec<String> = s
            .selected("default", Some(&sel))
            .iter()
            .map(|p| PodView::name(&**p).to_owned())
            .collect();
        assert_eq!(names, ["web-x"]);
        assert!(s.selected("default", None).is_empty());
        assert_eq!(s.selected("default", Some(&BTreeMap::new())).len(), 7);
        let missing = BTreeMap::from([("app".to_owned(), "nope".to_owned())]);
        assert!(s.selected("default", Some(&missing)).is_empty());
        assert!(s.selected("other", Some(&sel)).is_empty());
    }

    #[test]
    fn relabelled_pods_move_in_the_index() {
        let mut s = PodStore::default();
        s.upsert(cached(pod("p", "a").build()));
        let old = s.upsert(cached(pod("p", "b").build()));
        assert!(old.is_some());
        let a = BTreeMap::from([("app".to_owned(), "a".to_owned())]);
        let b = BTreeMap::from([("app".to_owned(), "b".to_owned())]);
        assert!(s.selected("default", Some(&a)).is_empty());
        assert_eq!(s.selected("default", Some(&b)).len(), 1);
        assert_eq!(s.on_node("node-a").len(), 1);
        s.upsert(cached(pod("p", "b").node("node-b").build()));
        assert!(s.on_node("node-a").is_empty());
        assert_eq!(s.on_node("node-b").len(), 1);
        s.remove("default", "p");
        assert!(s.selected("default", Some(&b)).is_empty());
        assert!(s.on_node("node-b").is_empty());
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn rule_2_1_service_index_finds_matching_services_without_a_scan() {
        let mut s = ServiceStore::default();
        s.upsert(Arc::new(svc("web").selector("app", "web").build()));
        s.upsert(Arc::new(
            svc("web-a")
                .selector("app", "web")
                .selector("tier", "a")
                .build(),
        ));
        s.upsert(Arc::new(svc("db").selector("app", "db").build()));
        s.upsert(Arc::new(svc("none").no_selector().build()));
        let mut all = svc("all").build();
        if let Some(sp) = all.spec.as_mut() {
            sp.selector = Some(BTreeMap::new());
        }
        s.upsert(Arc::new(all));
        let p = pod("p", "web").label("tier", "b").build();
        let names: Vec<String> = s
            .matching(&p)
            .iter()
            .map(|x| x.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["all", "web"]);
        // A selector change moves the Service in the index.
        s.upsert(Arc::new(svc("web").selector("app", "db").build()));
        let names: Vec<String> = s
            .matching(&p)
            .iter()
            .map(|x| x.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["all"]);
    }

    #[test]
    fn slices_are_found_by_service_label() {
        let mut s = SliceStore::default();
        let mk = |name: &str, svc: &str| {
            let mut sl = EndpointSlice::default();
            sl.metadata.namespace = Some("ns".into());
            sl.metadata.name = Some(name.into());
            sl.metadata.labels = Some(BTreeMap::from([(
                LABEL_SERVICE_NAME.to_owned(),
                svc.to_owned(),
            )]));
            Arc::new(sl)
        };
        s.upsert(mk("a-1", "a"));
        s.upsert(mk("a-2", "a"));
        s.upsert(mk("b-1", "b"));
        assert_eq!(s.of_service("ns", "a").len(), 2);
        // Relabelled to another Service.
        s.upsert(mk("a-2", "b"));
        assert_eq!(s.of_service("ns", "a").len(), 1);
        assert_eq!(s.of_service("ns", "b").len(), 2);
        s.remove("ns", "b-1");
        assert_eq!(s.of_service("ns", "b").len(), 1);
        assert!(s.of_service("other", "b").is_empty());
    }
}
