//! The leader's half of `svcplane run`: caches, watches, queues, workers.
//!
//! [`Controllers::start`] watches what the enabled controllers read, and once every one
//! of those caches has finished its first list (ES-1.7: workers never act
//! on a partial picture) queues the start-up keys and starts the workers.
//! [`Controllers::shutdown`] stops taking work, lets the syncs in flight finish their
//! writes, then flushes queued events.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::runtime::watcher;

use crate::kube_client::{Clients, users};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::apply::Writer;
use super::cache::watched_pod::WatchedPod;
use super::cache::{Cache, Store, strip};
use super::controllers::dispatch::Dispatch;
use super::controllers::endpoints::{self as ep, EndpointsController};
use super::controllers::endpointslice::{self as es, EndpointSliceController};
use super::controllers::mirroring::{self as mirror, MirroringController};
use super::controllers::{Parts, Syncer, allocator_repair, queue_gauges, worker};
use super::events::EventRecorder;
use super::metrics::Metrics;
use super::queue::{RateLimit, WorkQueue};
use super::watch::reflect;

/// Which controllers run (`--controllers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enabled {
    pub endpoint_slice: bool,
    pub endpoints: bool,
    pub mirroring: bool,
    pub allocator_repair: bool,
}

/// Everything the controllers need to know.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    pub enabled: Enabled,
    pub endpoint_slice: es::Config,
    pub endpoints: ep::Config,
    pub mirroring: mirror::Config,
    /// Workers per controller: EndpointSlice, Endpoints, mirroring.
    pub workers: (usize, usize, usize),
    pub allocator_repair: allocator_repair::Config,
    /// `reportingInstance` of events.
    pub identity: String,
    /// Page size of the initial lists (0: no paging).
    pub list_page_size: u32,
}

/// Spawned tasks that are aborted when the set is dropped, so dropping the runtime (a
/// crash simulated in tests, or a panic unwinding `run`) never leaves a headless
/// controller writing.
#[derive(Debug, Default)]
pub struct TaskSet {
    handles: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

impl TaskSet {
    pub fn push(&self, handle: JoinHandle<()>) {
        self.lock().push(handle);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.handles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the handles out (to await them).
    pub fn take(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut *self.lock())
    }
}

impl Drop for TaskSet {
    fn drop(&mut self) {
        for h in self.lock().iter() {
            h.abort();
        }
    }
}

/// Running controllers.
#[derive(Debug)]
pub struct Controllers {
    cache: Arc<Cache>,
    metrics: Metrics,
    queues: Vec<Arc<WorkQueue<String>>>,
    stop: CancellationToken,
    stop_events: CancellationToken,
    /// Watches and the starter; then workers and loops (filled once synced); then the
    /// event writer.
    tasks: TaskSet,
    workers: Arc<TaskSet>,
    events_task: TaskSet,
    ready: Arc<tokio::sync::Notify>,
    started: Arc<std::sync::atomic::AtomicBool>,
}

fn watch_config(page_size: u32) -> watcher::Config {
    let c = watcher::Config::default();
    if page_size > 0 {
        c.page_size(page_size)
    } else {
        c
    }
}

impl Controllers {
    /// Starts watches, and workers once the caches are synced. Returns at once.
    pub fn start(clients: &Clients, options: ControllerOptions, metrics: Metrics) -> Self {
        let client = clients.get(users::INFORMERS);
        let cache = Arc::new(Cache::default());
        let stop = CancellationToken::new();
        let stop_events = CancellationToken::new();
        let (events, events_task) = EventRecorder::start(
            clients.get(users::EVENTS),
            options.identity.clone(),
            metrics.clone(),
            stop_events.clone(),
        );
        let on = options.enabled;
        // Every controller writes through its own client (its own QPS budget), as in
        // kube-controller-manager.
        let parts = |limit, name, user| Parts {
            cache: cache.clone(),
            queue: Arc::new(
                WorkQueue::new(limit, stop.clone()).with_gauges(queue_gauges(&metrics, name)),
            ),
            writer: Writer::new(clients.get(user), metrics.clone()),
            events: events.clone(),
            metrics: metrics.clone(),
        };

        let endpoint_slice = on.endpoint_slice.then(|| {
            Arc::new(EndpointSliceController::new(
                parts(
                    RateLimit::ENDPOINT_SLICE,
                    EndpointSliceController::QUEUE,
                    users::ENDPOINTSLICE,
                ),
                options.endpoint_slice,
            ))
        });
        let endpoints = on.endpoints.then(|| {
            Arc::new(EndpointsController::new(
                parts(
                    RateLimit::ENDPOINTS,
                    EndpointsController::QUEUE,
                    users::ENDPOINTS,
                ),
                options.endpoints,
            ))
        });
        let mirroring = on.mirroring.then(|| {
            Arc::new(MirroringController::new(
                parts(
                    RateLimit::MIRRORING,
                    MirroringController::QUEUE,
                    users::MIRRORING,
                ),
                options.mirroring,
            ))
        });
        let dispatch = Dispatch {
            cache: cache.clone(),
            endpoint_slice: endpoint_slice.clone(),
            endpoints: endpoints.clone(),
            mirroring: mirroring.clone(),
            events: events.clone(),
        };

        let needs_pods = on.endpoint_slice || on.endpoints;
        let needs_slices = on.endpoint_slice || on.mirroring;
        let needs_endpoints = on.endpoints || on.mirroring;
        let needs_services = needs_pods || needs_slices || needs_endpoints || on.allocator_repair;
        let tasks = TaskSet::default();
        let cfg = || watch_config(options.list_page_size);
        macro_rules! watch {
            ($name:literal, $api:expr, $field:ident, $strip:path, $handler:ident) => {{
                let d = dispatch.clone();
                tasks.push(tokio::spawn(reflect(
                    $name,
                    $api,
                    cfg(),
                    cache.clone(),
                    |c: &Cache| &c.$field,
                    $strip,
                    move |change| d.$handler(&change),
                    stop.clone(),
                )));
            }};
        }
        if needs_services {
            watch!(
                "services",
                Api::<Service>::all(client.clone()),
                services,
                strip::service,
                service
            );
        }
        if needs_pods {
            // Decoded straight into the kept fields (see `watched_pod`).
            watch!(
                "pods",
                Api::<WatchedPod>::all(client.clone()),
                pods,
                strip::watched_pod,
                pod
            );
        }
        if on.endpoint_slice {
            watch!(
                "nodes",
                Api::<Node>::all(client.clone()),
                nodes,
                strip::node,
                node
            );
        }
        if needs_slices {
            watch!(
                "endpointslices",
                Api::<EndpointSlice>::all(client.clone()),
                slices,
                strip::endpoint_slice,
                slice
            );
        }
        if needs_endpoints {
            watch!(
                "endpoints",
                Api::<Endpoints>::all(client.clone()),
                endpoints,
                strip::endpoints,
                endpoints
            );
        }

        let synced = {
            let cache = cache.clone();
            move || {
                (!needs_services || cache.services.is_synced())
                    && (!needs_pods || cache.pods.is_synced())
                    && (!on.endpoint_slice || cache.nodes.is_synced())
                    && (!needs_slices || cache.slices.is_synced())
                    && (!needs_endpoints || cache.endpoints.is_synced())
            }
        };
        let mut queues = Vec::new();
        queues.extend(endpoint_slice.as_ref().map(|c| c.queue().clone()));
        queues.extend(endpoints.as_ref().map(|c| c.queue().clone()));
        queues.extend(mirroring.as_ref().map(|c| c.queue().clone()));

        let workers: Arc<TaskSet> = Arc::default();
        let ready = Arc::new(tokio::sync::Notify::new());
        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        {
            let (workers, ready, started, stop) = (
                workers.clone(),
                ready.clone(),
                started.clone(),
                stop.clone(),
            );
            let (metrics, cache, events) = (metrics.clone(), cache.clone(), events.clone());
            let repair = options.allocator_repair.clone();
            let counts = options.workers;
            tasks.push(tokio::spawn(async move {
                while !synced() {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
                info!("caches synced; starting workers");
                let w = &workers;
                if let Some(c) = &endpoint_slice {
                    // The zone ratios before the first sync, so no Service is first
                    // synced without them (and rewritten once they arrive).
                    c.refresh_topology();
                    w.push(tokio::spawn(c.clone().topology_loop(stop.clone())));
                    for _ in 0..counts.0.max(1) {
                        w.push(tokio::spawn(worker(
                            c.clone(),
                            c.queue().clone(),
                            metrics.clone(),
                        )));
                    }
                }
                if let Some(c) = &endpoints {
                    c.queue_startup_keys();
                    for _ in 0..counts.1.max(1) {
                        w.push(tokio::spawn(worker(
                            c.clone(),
                            c.queue().clone(),
                            metrics.clone(),
                        )));
                    }
                }
                if let Some(c) = &mirroring {
                    for _ in 0..counts.2.max(1) {
                        w.push(tokio::spawn(worker(
                            c.clone(),
                            c.queue().clone(),
                            metrics.clone(),
                        )));
                    }
                }
                if on.allocator_repair {
                    w.push(tokio::spawn(allocator_repair::run(
                        cache.clone(),
                        events.clone(),
                        repair,
                        stop.clone(),
                    )));
                }
                w.push(tokio::spawn(cache_size_metrics(
                    cache,
                    metrics,
                    stop.clone(),
                )));
                started.store(true, std::sync::atomic::Ordering::Release);
                ready.notify_waiters();
            }));
        }
        let events_tasks = TaskSet::default();
        events_tasks.push(events_task);
        Self {
            cache,
            metrics,
            queues,
            stop,
            stop_events,
            tasks,
            workers,
            events_task: events_tasks,
            ready,
            started,
        }
    }

    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Whether the workers have started (every needed cache listed).
    pub fn is_started(&self) -> bool {
        self.started.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until the workers have started.
    pub async fn wait_started(&self) {
        loop {
            let notified = self.ready.notified();
            if self.is_started() {
                return;
            }
            notified.await;
        }
    }

    /// Started, and no key queued, waiting or being processed.
    pub fn is_idle(&self) -> bool {
        self.is_started() && self.queues.iter().all(|q| q.is_idle())
    }

    /// Stops taking work, waits up to `grace` for syncs in flight (their writes
    /// finish), aborts whatever is still running, then flushes events.
    pub async fn shutdown(&self, grace: Duration) {
        self.stop.cancel();
        let handles: Vec<JoinHandle<()>> = self
            .workers
            .take()
            .into_iter()
            .chain(self.tasks.take())
            .collect();
        let aborts: Vec<tokio::task::AbortHandle> =
            handles.iter().map(JoinHandle::abort_handle).collect();
        if tokio::time::timeout(grace, futures::future::join_all(handles))
            .await
            .is_err()
        {
            warn!(
                grace_ms = grace.as_millis(),
                "syncs still running at the end of the grace period; aborted"
            );
            for a in aborts {
                a.abort();
            }
        }
        self.stop_events.cancel();
        let events = futures::future::join_all(self.events_task.take());
        let _ = tokio::time::timeout(Duration::from_secs(2), events).await;
    }

    /// Stops at once: every sync is aborted where it is (a leader that lost its Lease
    /// must not write once another replica may lead). Queued events are dropped.
    pub fn abort(&self) {
        self.stop.cancel();
        self.stop_events.cancel();
        for h in self
            .workers
            .take()
            .into_iter()
            .chain(self.tasks.take())
            .chain(self.events_task.take())
        {
            h.abort();
        }
    }
}

/// Publishes the cache sizes every few seconds.
async fn cache_size_metrics(cache: Arc<Cache>, metrics: Metrics, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        metrics.set_cache_objects("services", cache.services.read().len());
        metrics.set_cache_objects("pods", cache.pods.read().len());
        metrics.set_cache_objects("nodes", cache.nodes.read().len());
        metrics.set_cache_objects("endpointslices", cache.slices.read().len());
        metrics.set_cache_objects("endpoints", cache.endpoints.read().len());
    }
}
