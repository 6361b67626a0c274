//! An in-process fake Kubernetes API server for scenario tests.
//!
//! Why: the webhook and the controllers are real kube-rs code (`Api`, `watcher`,
//! reflectors). To run them end to end without a cluster, and on a paused tokio clock, they
//! need something that answers HTTP like kube-apiserver: same paths, same `Status` errors,
//! same resourceVersion/watch semantics. [`FakeApi`] is that, as a `tower::Service` handed to
//! [`kube::Client::new`]. It keeps objects as JSON, so it serves any resource in its registry
//! (built-ins below, plus CRDs tests [`register`](FakeApi::register)).
//!
//! # Usage
//!
//! ```ignore
//! use k8s_openapi::api::core::v1::Service;
//! use kube::api::{Api, PostParams};
//! use svcplane_tests::fake_api::{FakeApi, Fault, Verb};
//!
//! #[tokio::test(start_paused = true)]
//! async fn scenario() {
//!     let fake = FakeApi::new();
//!     // CRDs are registered by hand: group, version, plural, kind, namespaced, /status.
//!     fake.register("svcplane.io", "v1alpha1", "allocationclaims", "AllocationClaim", false, false);
//!     fake.insert(&pod).unwrap(); // direct write (status kept); watches see it
//!
//!     let client = fake.client(); // inside the runtime: the client spawns a task
//!     let services: Api<Service> = Api::namespaced(client.clone(), "default");
//!     fake.inject(Fault::status(500).verb(Verb::Create).resource("services").times(1));
//!     let err = services.create(&PostParams::default(), &svc).await.unwrap_err();
//!     assert!(matches!(err, kube::Error::Api(s) if s.code == 500));
//!     services.create(&PostParams::default(), &svc).await.unwrap(); // fault used up
//!
//!     assert_eq!(fake.stats().requests(Verb::Create, "services"), 2);
//!     assert_eq!(fake.writes().len(), 2); // (verb, resource, namespace, name, code) in order
//!     let stored: Vec<Service> = fake.objects_of::<Service>().unwrap();
//!     let one = fake.get_json("v1/services", Some("default"), "web");
//! }
//! ```
//!
//! # What it serves
//!
//! Built-in resources: core v1 `services`, `pods`, `nodes`, `namespaces`, `endpoints`,
//! `events`, `configmaps`, `secrets`; `discovery.k8s.io/v1` `endpointslices`;
//! `events.k8s.io/v1` `events`; `networking.k8s.io/v1` `ipaddresses`, `servicecidrs`;
//! `coordination.k8s.io/v1` `leases`. Unknown or [disabled](FakeApi::disable) resources get
//! 404. Each group/version/plural is stored separately (upstream shares storage between the
//! two Event APIs; here they are independent).
//!
//! Verbs: get, list (label/field selectors, `limit`/`continue`), watch (see `watch.rs`),
//! create (`generateName` with a seeded RNG), update (resourceVersion precondition → 409),
//! patch (merge, JSON, strategic approximated as merge; server-side apply → 415), delete
//! (preconditions, finalizers → `deletionTimestamp`), the `/status` subresource, `dryRun=All`,
//! and `PartialObjectMetadata` answers for metadata-only clients. Every successful write
//! bumps one global resourceVersion and produces one watch event. Details and deliberate
//! differences from upstream are in each file's docs: `ops.rs` (write rules), `list.rs`
//! (paging), `watch.rs`, `patch.rs`, `selector.rs`, `faults.rs`.
//!
//! Not served: discovery (`/api`, `/apis`), deletecollection, server-side apply,
//! `resourceVersion`/`resourceVersionMatch` on get and list (always the latest state),
//! legacy `/watch/` paths, admission and validation beyond required names.
//!
//! # Determinism and time
//!
//! uids are counter-based, generated names and fault probabilities come from a seeded RNG,
//! lists are sorted by namespace then name, and timestamps come from a [`Clock`] that by
//! default is 2026-01-01T00:00:00Z plus tokio time elapsed since [`FakeApi::new`]. Watch
//! timeouts and bookmarks are tokio timers, and fault latency is `tokio::time::sleep`, so
//! everything follows `#[tokio::test(start_paused = true)]`.
//!
//! # Watch channel policy
//!
//! Each watch gets an unbounded channel: writers never block and never drop events for a
//! slow reader; the cost is memory while a watcher lags. History for resuming watches is
//! bounded per resource ([`FakeApiBuilder::history_limit`], default 10 000 events); resuming
//! from an older resourceVersion yields a 410 `Expired` ERROR event, and the kube watcher
//! relists. [`FakeApi::compact`] forces that; [`FakeApi::close_watches`] ends all streams.

mod clock;
mod faults;
mod list;
mod meta;
mod ops;
mod patch;
mod registry;
mod rng;
mod router;
mod selector;
mod service;
mod stats;
mod status;
mod store;
mod watch;

#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use clock::{Clock, DEFAULT_START_SECONDS, TokioClock};
pub use faults::{Fault, FaultId};
pub use registry::{Gvr, ResourceInfo};
pub use service::{FakeBody, FakeService};
pub use stats::{Counter, Stats, Verb, WriteRecord};

use faults::FaultSet;
use store::{Store, StoreConfig, key};

/// State shared by the handle, the service and open watch streams.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Mutex<Store>,
    pub(crate) faults: Mutex<FaultSet>,
    pub(crate) stats: Mutex<Stats>,
    pub(crate) bookmark_interval: Duration,
}

/// Locks a mutex, ignoring poisoning: a panicking test thread must not turn every later
/// request into a second panic, and no critical section leaves the state half-written
/// (each write is a single `put`/`remove`).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Errors of the direct (non-HTTP) test API.
#[derive(Debug, thiserror::Error)]
pub enum FakeApiError {
    /// The object did not serialise to or deserialise from JSON.
    #[error("object does not convert to or from JSON")]
    Json(#[from] serde_json::Error),
    /// No enabled resource has this apiVersion and kind.
    #[error("no registered resource has apiVersion {api_version:?} and kind {kind:?}")]
    UnknownKind {
        /// The object's `apiVersion`.
        api_version: String,
        /// The object's `kind`.
        kind: String,
    },
    /// The store refused the object (e.g. it has neither name nor generateName).
    #[error("the fake API rejected the object: {code} {reason}: {message}")]
    Rejected {
        /// HTTP status.
        code: u16,
        /// `Status.reason`.
        reason: String,
        /// `Status.message`.
        message: String,
    },
}

impl From<status::ApiError> for FakeApiError {
    fn from(e: status::ApiError) -> Self {
        Self::Rejected {
            code: e.code,
            reason: e.reason.to_string(),
            message: e.message,
        }
    }
}

/// Settings for a [`FakeApi`]; start from [`FakeApi::builder`].
#[derive(Debug, Clone)]
pub struct FakeApiBuilder {
    history_limit: usize,
    seed: u64,
    bookmark_interval: Duration,
    clock: Option<Arc<dyn Clock>>,
    record_writes: bool,
}

impl Default for FakeApiBuilder {
    fn default() -> Self {
        Self {
            history_limit: 10_000,
            seed: 0x5eed,
            bookmark_interval: Duration::from_secs(60),
            clock: None,
            record_writes: true,
        }
    }
}

impl FakeApiBuilder {
    /// Watch events kept per resource for resuming watches (default 10 000).
    #[must_use]
    pub fn history_limit(mut self, events: usize) -> Self {
        self.history_limit = events;
        self
    }

    /// Seed for generated names and fault probabilities (default fixed).
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// How often watches with `allowWatchBookmarks` get a BOOKMARK (default 60 s, as upstream).
    #[must_use]
    pub fn bookmark_interval(mut self, every: Duration) -> Self {
        self.bookmark_interval = every;
        self
    }

    /// Where timestamps come from (default [`TokioClock::default`]).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Whether to keep the write log (default true; turn off for very long simulations).
    #[must_use]
    pub fn record_writes(mut self, on: bool) -> Self {
        self.record_writes = on;
        self
    }

    /// Builds the fake.
    pub fn build(self) -> FakeApi {
        let clock = self
            .clock
            .unwrap_or_else(|| Arc::new(TokioClock::default()));
        let store = Store::new(StoreConfig {
            history_limit: self.history_limit,
            seed: self.seed,
            clock,
            record_writes: self.record_writes,
        });
        FakeApi {
            shared: Arc::new(Shared {
                store: Mutex::new(store),
                faults: Mutex::new(FaultSet::new(self.seed)),
                stats: Mutex::new(Stats::default()),
                bookmark_interval: self.bookmark_interval,
            }),
        }
    }
}

/// Handle to one fake API server. Clones share the same state.
#[derive(Debug, Clone)]
pub struct FakeApi {
    shared: Arc<Shared>,
}

impl Default for FakeApi {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeApi {
    /// A fake with default settings.
    pub fn new() -> Self {
        FakeApiBuilder::default().build()
    }

    /// Settings for a fake.
    pub fn builder() -> FakeApiBuilder {
        FakeApiBuilder::default()
    }

    /// A kube client talking to this fake (default namespace `default`). Call it inside a
    /// tokio runtime: the client spawns its request buffer task.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.service(), "default")
    }

    /// The raw tower service, to wrap in layers (e.g. kube's retry policy) before
    /// `kube::Client::new`.
    pub fn service(&self) -> FakeService {
        FakeService {
            shared: self.shared.clone(),
        }
    }

    /// Serves a further resource (a CRD), or replaces a registration.
    pub fn register(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        status: bool,
    ) {
        let info = ResourceInfo::new(Gvr::new(group, version, plural), kind, namespaced, status);
        lock(&self.shared.store).registry.register(info);
    }

    /// Answers 404 for a resource from now on (e.g. a server without IPAddress objects).
    /// Returns false if the resource is not registered.
    pub fn disable(&self, gvr: impl Into<Gvr>) -> bool {
        lock(&self.shared.store)
            .registry
            .set_enabled(&gvr.into(), false)
    }

    /// Serves a disabled resource again (its objects were kept).
    pub fn enable(&self, gvr: impl Into<Gvr>) -> bool {
        lock(&self.shared.store)
            .registry
            .set_enabled(&gvr.into(), true)
    }

    /// Creates or unconditionally replaces an object, found by its `apiVersion` and `kind`;
    /// status is kept as given. Namespaced objects without a namespace go to `default`.
    /// Watches see ADDED or MODIFIED. Returns the stored object.
    pub fn insert(&self, obj: impl Serialize) -> Result<Value, FakeApiError> {
        let obj = serde_json::to_value(obj)?;
        let field = |k: &str| {
            obj.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let (api_version, kind) = (field("apiVersion"), field("kind"));
        let mut store = lock(&self.shared.store);
        let info = store
            .registry
            .by_kind(&api_version, &kind)
            .cloned()
            .ok_or(FakeApiError::UnknownKind { api_version, kind })?;
        Ok((*ops::upsert(&mut store, &info, obj)?).clone())
    }

    /// One stored object (`namespace` is `None` for cluster-scoped resources).
    pub fn get_json(
        &self,
        gvr: impl Into<Gvr>,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let store = lock(&self.shared.store);
        store
            .get(&gvr.into(), &key(namespace, name))
            .map(|o| (*o).clone())
    }

    /// Stored objects of a resource, sorted by namespace and name (`namespace: None`: all).
    pub fn list_json(&self, gvr: impl Into<Gvr>, namespace: Option<&str>) -> Vec<Value> {
        let store = lock(&self.shared.store);
        store
            .objects(&gvr.into())
            .map(|objects| {
                objects
                    .iter()
                    .filter(|((ns, _), _)| namespace.is_none_or(|want| want == ns))
                    .map(|(_, o)| (**o).clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Removes an object at once, ignoring finalizers (watches see DELETED). Returns it.
    pub fn delete(
        &self,
        gvr: impl Into<Gvr>,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let mut store = lock(&self.shared.store);
        store
            .remove(&gvr.into(), &key(namespace, name), None)
            .map(|o| (*o).clone())
    }

    /// All stored objects of a typed resource, in all namespaces.
    pub fn objects_of<K>(&self) -> Result<Vec<K>, FakeApiError>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
    {
        self.list_json(Gvr::of::<K>(), None)
            .into_iter()
            .map(|v| serde_json::from_value(v).map_err(FakeApiError::from))
            .collect()
    }

    /// One stored object of a typed resource.
    pub fn get_of<K>(&self, namespace: Option<&str>, name: &str) -> Result<Option<K>, FakeApiError>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
    {
        self.get_json(Gvr::of::<K>(), namespace, name)
            .map(serde_json::from_value)
            .transpose()
            .map_err(FakeApiError::from)
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).rv()
    }

    /// Adds a fault rule (checked in insertion order).
    pub fn inject(&self, fault: Fault) -> FaultId {
        lock(&self.shared.faults).add(fault)
    }

    /// Removes one fault rule.
    pub fn remove_fault(&self, id: FaultId) {
        lock(&self.shared.faults).remove(id);
    }

    /// Removes all fault rules.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }

    /// A snapshot of the request counters.
    pub fn stats(&self) -> Stats {
        lock(&self.shared.stats).clone()
    }

    /// Zeroes the request counters.
    pub fn reset_stats(&self) {
        *lock(&self.shared.stats) = Stats::default();
    }

    /// Write requests so far, in commit order (including failed and fault-injected ones).
    pub fn writes(&self) -> Vec<WriteRecord> {
        lock(&self.shared.store).writes().to_vec()
    }

    /// Empties the write log.
    pub fn clear_writes(&self) {
        lock(&self.shared.store).clear_writes();
    }

    /// Drops all watch history: resuming any watch from an older resourceVersion gets 410.
    pub fn compact(&self) {
        lock(&self.shared.store).compact();
    }

    /// Ends every open watch stream; clients reconnect from their last resourceVersion.
    pub fn close_watches(&self) {
        lock(&self.shared.store).close_watches();
    }
}
