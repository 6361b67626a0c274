//! The controllers `svcplane run` runs, each a queue of keys and workers that sync one
//! key at a time through a pure reconciler and carry its plan out.
//!
//! - [`endpointslice`], [`endpoints`], [`mirroring`]: kube-controller-manager's three
//!   endpoint controllers (ES-2, EP-4, MR-5);
//! - [`allocator_repair`]: periodic ClusterIP/NodePort findings;
//! - [`dispatch`]: one consumer per watched resource that hands its changes to every
//!   controller (Pod changes are mapped to Service keys once, for all of them);
//! - [`slice_writes`]: carrying EndpointSlice writes out;
//! - this module: the [`Controller`] trait the runtime drives, what building one
//!   takes ([`Build`]), the worker loop and the sync error shared by all of them.

pub(crate) mod allocator_repair;
pub(crate) mod dispatch;
pub(crate) mod endpoints;
pub(crate) mod endpointslice;
pub(crate) mod mirroring;
pub(crate) mod servicecidr;
pub(crate) mod slice_figures;
pub(crate) mod slice_writes;

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use kube::Client;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use tokio::time::Instant;
use tracing::{Instrument, debug, info_span, warn};

use super::apply::{WriteError, Writer};
use super::cache::Cache;
use super::events::EventRecorder;
use super::flag_group::FlagGroup;
use super::metrics::{Metrics, QueueLabels};
use super::options::ControllerOptions;
use super::queue::{RateLimit, WorkQueue};
use super::watch::Change;

/// Failed syncs are retried this many times, then dropped until the next event
/// (client-go controllers' `maxRetries`).
pub(crate) const MAX_RETRIES: u32 = 15;

/// Why a sync failed; the key is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SyncError {
    /// Our cache has not caught up with our own last write (ES-2.10,
    /// EP-4.7); acting on it could duplicate or undo that write.
    #[error("{0} informer cache is out of date")]
    Stale(&'static str),
    /// An API write failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The reconciler planned the writes but reported a failure (e.g. a Pod on a
    /// Node missing from the cache).
    #[error("{0}")]
    Plan(String),
}

impl SyncError {
    /// A short, stable label for metrics.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            SyncError::Stale(_) => "stale",
            SyncError::Write(w) => w.kind.label(),
            SyncError::Plan(_) => "plan",
        }
    }
}

/// One controller's sync of one key.
pub(crate) trait Syncer: Send + Sync + 'static {
    /// Queue name (`workqueue_*{name=...}`) and log field.
    const QUEUE: &'static str;
    fn sync(&self, key: &str) -> impl Future<Output = Result<(), SyncError>> + Send;
}

/// `namespace/name` split at the first `/`.
pub(crate) fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

/// Runs one worker until the queue shuts down: take a key, sync it, forget it on
/// success, retry it with backoff on failure (at most [`MAX_RETRIES`] times).
pub(crate) async fn worker<S: Syncer>(
    syncer: Arc<S>,
    queue: Arc<WorkQueue<String>>,
    metrics: Metrics,
) {
    let labels = QueueLabels { name: S::QUEUE };
    while let Some(key) = queue.next().await {
        let start = Instant::now();
        let span = info_span!("sync", controller = S::QUEUE, key = %key);
        let result = syncer.sync(&key).instrument(span).await;
        let elapsed = start.elapsed().as_secs_f64();
        metrics
            .queue()
            .work_duration
            .get_or_create(&labels)
            .observe(elapsed);
        metrics.reconcile_duration(S::QUEUE, elapsed);
        match result {
            Ok(()) => queue.forget(&key),
            Err(e) => {
                let retries = queue.num_requeues(&key);
                if retries < MAX_RETRIES {
                    let delay = queue.add_rate_limited(key.clone());
                    metrics.queue().retries.get_or_create(&labels).inc();
                    match &e {
                        SyncError::Stale(_) => {
                            debug!(
                                controller = S::QUEUE,
                                key,
                                ?delay,
                                "cache behind our last write; retrying"
                            )
                        }
                        _ => {
                            warn!(controller = S::QUEUE, key, reason = e.reason(), error = %e, ?delay, "sync failed; retrying")
                        }
                    }
                } else {
                    queue.forget(&key);
                    warn!(controller = S::QUEUE, key, error = %e, retries, "sync failed too often; dropped until the next change");
                }
            }
        }
        queue.done(&key);
    }
}

/// A controller as the runtime drives it: change handlers that queue keys (each
/// controller implements those of the resources its descriptor reads), and a start
/// once every cache it reads has listed.
pub(crate) trait Controller: Send + Sync + std::fmt::Debug + 'static {
    fn on_service(&self, _change: &Change<Service>) {}
    /// The Service keys a Pod change affects (mapped once for every controller).
    /// Services whose Pods changed; `withdraws`: the change took an endpoint away
    /// (`core::pod::update_withdraws`), so it must not wait.
    fn on_pod_keys(&self, _keys: &[String], _withdraws: bool) {}
    fn on_node(&self, _change: &Change<Node>) {}
    fn on_slice(&self, _change: &Change<EndpointSlice>) {}
    fn on_endpoints(&self, _change: &Change<Endpoints>) {}
    fn on_service_cidr(&self, _change: &Change<ServiceCIDR>) {}
    fn on_ip_address(&self, _change: &Change<IPAddress>) {}
    /// Queue start-up keys and spawn the workers and loops; called once, after every
    /// cache the controller reads has completed its first list.
    fn start(self: Arc<Self>, stop: &CancellationToken) -> Vec<JoinHandle<()>>;
    /// The work queue, if the controller has one (idle checks).
    fn queue(&self) -> Option<&Arc<WorkQueue<String>>> {
        None
    }
}

/// A controller the registry builds: its flag group, and how it is built from the
/// settings that group made.
pub(crate) trait Registered: Controller + Sized + 'static {
    type Flags: FlagGroup;

    fn build(b: &Build<'_>, config: <Self::Flags as FlagGroup>::Config) -> Self;
}

/// Everything building a controller takes.
pub(crate) struct Build<'a> {
    pub(crate) cache: &'a Arc<Cache>,
    /// The controller's own API client (its own QPS budget, as in
    /// kube-controller-manager).
    pub(crate) client: Client,
    /// That client's request budget, when it is rate-limited.
    pub(crate) budget: Option<crate::kube_client::ratelimit::ClientBudget>,
    pub(crate) events: &'a EventRecorder,
    pub(crate) metrics: &'a Metrics,
    pub(crate) options: &'a ControllerOptions,
    pub(crate) stop: &'a CancellationToken,
}

impl Build<'_> {
    /// A queued controller's parts: a queue named `queue` (`workqueue_*{name}`) with
    /// upstream's `limit`, and a writer on the controller's client.
    pub(crate) fn parts(&self, limit: RateLimit, queue: &'static str) -> Parts {
        Parts {
            cache: self.cache.clone(),
            queue: {
                let q = Arc::new(
                    WorkQueue::new(limit, self.stop.clone())
                        .with_gauges(queue_gauges(self.metrics, queue))
                        .with_budget(self.budget.clone()),
                );
                let weak = Arc::downgrade(&q);
                self.metrics.before_scrape(move || {
                    if let Some(q) = weak.upgrade() {
                        q.refresh_metrics();
                    }
                });
                q
            },
            writer: Writer::new(self.client.clone(), self.metrics.clone()),
            events: self.events.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

/// Spawns `n` (at least one) workers draining `syncer`'s queue.
pub(crate) fn spawn_workers<S: Syncer>(
    syncer: &Arc<S>,
    queue: &Arc<WorkQueue<String>>,
    metrics: &Metrics,
    n: usize,
) -> Vec<JoinHandle<()>> {
    (0..n.max(1))
        .map(|_| tokio::spawn(worker(syncer.clone(), queue.clone(), metrics.clone())))
        .collect()
}

/// What every controller holds: the cache it reads, its queue, and its ways out
/// (API writes, events, metrics).
#[derive(Debug, Clone)]
pub(crate) struct Parts {
    pub cache: Arc<Cache>,
    pub queue: Arc<WorkQueue<String>>,
    pub writer: Writer,
    pub events: EventRecorder,
    pub metrics: Metrics,
}

/// Locks a controller's state. It is only touched between awaits, never across one,
/// and a poisoned lock still holds complete entries (every update is one map write).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The metrics a controller's queue reports into.
pub(crate) fn queue_gauges(metrics: &Metrics, name: &'static str) -> super::queue::QueueGauges {
    let labels = QueueLabels { name };
    let q = metrics.queue();
    // client-go creates every series of a named queue with the queue, so a queue that
    // never retried still shows `workqueue_retries_total 0`.
    let _ = q.retries.get_or_create(&labels);
    let _ = q.work_duration.get_or_create(&labels);
    super::queue::QueueGauges {
        depth: q.depth.get_or_create(&labels).clone(),
        adds: q.adds.get_or_create(&labels).clone(),
        queue_duration: q.queue_duration.get_or_create(&labels).clone(),
        unfinished: q.unfinished_work.get_or_create(&labels).clone(),
        longest: q.longest_running.get_or_create(&labels).clone(),
    }
}

/// Queues the Service of a Service change: ahead of every queued key when `svcplane
/// migrate` has just recreated it ([`crate::core::migrated`]), counted by `queue`.
pub(crate) fn queue_service(parts: &Parts, queue: &'static str, change: &Change<Service>) {
    let key = crate::core::keys::object_key(&change.latest().metadata);
    if crate::core::migrated::goes_first(change, k8s_openapi::jiff::Timestamp::now()) {
        debug!(service = %key, queue, "just migrated: queued first");
        parts.metrics.migrated_first(queue);
        parts.queue.add_first(key);
    } else {
        parts.queue.add(key);
    }
}

/// Queues the Services of a Pod change: after the batch period when one is set (every
/// change waits, as upstream); else coalesced, with the withdrawals' short window or
/// the additions' (`queue` module docs, write coalescing).
pub(crate) fn queue_pod_keys(
    queue: &WorkQueue<String>,
    keys: &[String],
    withdraws: bool,
    batch_period: std::time::Duration,
    coalescing: crate::shell::coalescing::Coalescing,
) {
    let window = if withdraws {
        coalescing.withdrawals
    } else {
        coalescing.additions
    };
    for key in keys {
        if batch_period.is_zero() {
            queue.add_coalesced(key.clone(), window);
        } else {
            queue.add_after(key.clone(), batch_period);
        }
    }
}

/// Building blocks for the controllers' unit tests: a client that fails every
/// request (so a test sees any write attempt as an error, and can count them in the
/// metrics), and an event recorder on it.
#[cfg(test)]
pub(crate) mod test_support {
    use std::sync::Arc;

    use http::{Request, Response};
    use kube::client::Body;
    use tokio_util::sync::CancellationToken;

    use super::Parts;
    use crate::shell::apply::Writer;
    use crate::shell::cache::Cache;
    use crate::shell::events::EventRecorder;
    use crate::shell::metrics::Metrics;
    use crate::shell::queue::{RateLimit, WorkQueue};

    pub(crate) fn offline_client() -> kube::Client {
        let svc = tower::service_fn(|_req: Request<Body>| async {
            Err::<Response<Body>, std::io::Error>(std::io::Error::other(
                "no API server in unit tests",
            ))
        });
        kube::Client::new(svc, "default")
    }

    /// A controller's parts over an offline client, with a queue using `limit`.
    pub(crate) fn parts(limit: RateLimit) -> Parts {
        let client = offline_client();
        let metrics = Metrics::new();
        let stop = CancellationToken::new();
        let (events, _task) =
            EventRecorder::start(client.clone(), "test".into(), metrics.clone(), stop.clone());
        Parts {
            cache: Arc::new(Cache::default()),
            queue: Arc::new(WorkQueue::new(limit, stop)),
            writer: Writer::new(client, metrics.clone()),
            events,
            metrics,
        }
    }

    /// The order `c`'s queue hands out three Service arrivals followed by one that
    /// `svcplane migrate` has just recreated (`default/moved`), and the queue's count of
    /// Services taken first as the metrics show it.
    pub(crate) fn order_after_a_migrated_arrival(
        c: &dyn super::Controller,
        p: &Parts,
        queue: &str,
    ) -> (Vec<String>, String) {
        use k8s_openapi::api::core::v1::Service;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

        use crate::core::change::Change;
        use crate::core::migrated::MIGRATED_FROM;

        let service = |name: &str, migrated: bool| {
            let mut s = Service::default();
            s.metadata.namespace = Some("default".into());
            s.metadata.name = Some(name.into());
            s.metadata.creation_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
            if migrated {
                s.metadata.annotations =
                    Some([(MIGRATED_FROM.to_owned(), "10.96.0.7".to_owned())].into());
            }
            Change::Added(Arc::new(s))
        };
        for name in ["a", "b", "c"] {
            c.on_service(&service(name, false));
        }
        c.on_service(&service("moved", true));
        let now = tokio::time::Instant::now();
        let mut q = p.queue.lock();
        let order = std::iter::from_fn(|| q.pop(now)).collect();
        let line = format!("svcplane_migrated_services_first_total{{name=\"{queue}\"}} ");
        let count = p
            .metrics
            .encode()
            .lines()
            .find(|l| l.starts_with(&line))
            .unwrap_or_default()
            .to_owned();
        (order, count)
    }

    /// How long a Service in a burst whose syncs each took `took` is held before its
    /// next sync, as the controller set up `queue` (write coalescing; `window` is
    /// `--write-coalescing-window`).
    pub(crate) fn hold_in_a_burst(
        queue: &WorkQueue<String>,
        took: std::time::Duration,
        window: std::time::Duration,
    ) -> std::time::Duration {
        // A Service of its own per call: an earlier call's Service is still held.
        let key = format!("default/web-{}", took.as_nanos());
        let mut q = queue.lock();
        let mut at = tokio::time::Instant::now();
        for _ in 0..2 {
            q.add(key.clone());
            assert_eq!(q.pop(at).as_ref(), Some(&key));
            at += took;
            q.done(&key, at);
        }
        if q.add_coalesced(key.clone(), window, at) {
            return std::time::Duration::ZERO;
        }
        let Some(due) = q.next_due() else {
            return std::time::Duration::MAX;
        };
        // Sync it, so the next call starts from an empty queue.
        assert_eq!(q.pop(due).as_ref(), Some(&key));
        q.done(&key, due);
        due - at
    }

    /// Writes attempted so far, any verb, any resource.
    pub(crate) fn write_attempts(m: &Metrics) -> u64 {
        ["create", "update", "delete"]
            .iter()
            .flat_map(|v| ["endpointslices", "endpoints"].map(|r| m.api_writes(v, r)))
            .sum()
    }
}
