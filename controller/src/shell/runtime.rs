//! The leader's half of `svcplane run`: controllers, watches, workers.
//!
//! [`Controllers::start`] builds the controllers `--controllers` enables from the
//! registry ([`super::registry`]), watches what they read (each resource once, in the
//! process-wide [`Cache`]), hands the changes to them through one dispatcher, and once
//! every one of those caches has finished its first list (ES-1.7:
//! workers never act on a partial picture) starts each controller.
//! [`Controllers::shutdown`] stops taking work, lets the syncs in flight finish their
//! writes, then flushes queued events.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::watcher;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::cache::{Cache, Resource};
use super::controllers::dispatch::Dispatch;
use super::controllers::{Build, Controller};
use super::events::EventRecorder;
use super::metrics::Metrics;
use super::queue::WorkQueue;
use super::registry::{CONTROLLERS, Descriptor};
use crate::kube_client::{Clients, users};

pub use super::options::ControllerOptions;

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
    metrics: Metrics,
    queues: Vec<Arc<WorkQueue<String>>>,
    stop: CancellationToken,
    stop_events: CancellationToken,
    /// The watches this start began and the starter; then workers and loops (filled
    /// once synced); then the event writer.
    tasks: TaskSet,
    workers: Arc<TaskSet>,
    events_task: TaskSet,
    started: Arc<std::sync::atomic::AtomicBool>,
}

/// The watch options of every list and watch: streaming lists first (one watch
/// instead of pages; the watch falls back to paginated lists of `page_size` where
/// the API server refuses them, see `watch::driver`), bookmarks on.
pub(crate) fn watch_config(page_size: u32) -> watcher::Config {
    let c = watcher::Config::default().streaming_lists();
    if page_size > 0 {
        c.page_size(page_size)
    } else {
        c
    }
}

/// Starts the watch of `resource` into `cache` unless one runs already (the Service
/// watch, shared with the webhook, may); the task, when this call started it.
pub(crate) fn watch(
    cache: &Arc<Cache>,
    resource: Resource,
    client: &kube::Client,
    page_size: u32,
    stop: &CancellationToken,
) -> Option<JoinHandle<()>> {
    let kind = resource.ops();
    kind.claim_watch(cache).then(|| {
        kind.spawn_watch(
            cache.clone(),
            client.clone(),
            watch_config(page_size),
            stop.clone(),
        )
    })
}

impl Controllers {
    /// Builds the enabled controllers from the registry, watches what they read
    /// (in `cache`, which the process may share with the webhook), and starts their
    /// workers once every one of those caches has listed. Returns at once.
    pub fn start(
        clients: &Clients,
        cache: Arc<Cache>,
        options: ControllerOptions,
        metrics: Metrics,
    ) -> Self {
        let client = clients.get(users::INFORMERS);
        let stop = CancellationToken::new();
        let stop_events = CancellationToken::new();
        let (events, events_task) = EventRecorder::start(
            clients.get(users::EVENTS),
            options.identity.clone(),
            metrics.clone(),
            stop_events.clone(),
        );
        let enabled: Vec<&Descriptor> = CONTROLLERS
            .iter()
            .filter(|d| options.enabled.contains(d.name))
            .collect();
        let built: Vec<(&Descriptor, Arc<dyn Controller>)> = enabled
            .iter()
            .filter_map(|d| {
                let build = Build {
                    cache: &cache,
                    client: clients.get(d.client_user),
                    budget: clients.budget(d.client_user),
                    events: &events,
                    metrics: &metrics,
                    options: &options,
                    stop: &stop,
                };
                let built = (d.make.build)(&build);
                if built.is_none() {
                    // Cannot happen with options made by `registry::settings`, which
                    // holds every registered controller's settings.
                    error!(
                        controller = d.name,
                        "no settings for this controller; not started"
                    );
                }
                built.map(|c| (*d, c))
            })
            .collect();
        let reads: BTreeSet<Resource> = enabled
            .iter()
            .flat_map(|d| d.reads.iter().copied())
            .collect();
        let dispatch = Arc::new(Dispatch::new(
            cache.clone(),
            built.iter().map(|(_, c)| c.clone()).collect(),
            built
                .iter()
                .filter(|(d, _)| d.reads.contains(&Resource::Pods))
                .map(|(_, c)| c.clone())
                .collect(),
            events.clone(),
        ));
        let tasks = TaskSet::default();
        for &r in &reads {
            r.ops().attach(&cache, &dispatch);
            if let Some(t) = watch(&cache, r, &client, options.list_page_size, &stop) {
                tasks.push(t);
            }
        }
        let queues: Vec<Arc<WorkQueue<String>>> = built
            .iter()
            .filter_map(|(_, c)| c.queue().cloned())
            .collect();

        let workers: Arc<TaskSet> = Arc::default();
        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        {
            let (workers, started, stop) = (workers.clone(), started.clone(), stop.clone());
            let (metrics, cache) = (metrics.clone(), cache.clone());
            let controllers: Vec<Arc<dyn Controller>> = built.into_iter().map(|(_, c)| c).collect();
            tasks.push(tokio::spawn(async move {
                // Workers never act on a partial picture (ES-1.7): every cache the
                // enabled controllers read has listed first. The caches raise the
                // signal themselves.
                let listed =
                    futures::future::join_all(reads.iter().map(|r| r.ops().wait_synced(&cache)));
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = listed => {}
                }
                info!("caches synced; starting workers");
                for c in controllers {
                    for t in c.start(&stop) {
                        workers.push(t);
                    }
                }
                workers.push(tokio::spawn(cache_size_metrics(
                    cache,
                    metrics,
                    stop.clone(),
                )));
                started.store(true, std::sync::atomic::Ordering::Release);
            }));
        }
        let events_tasks = TaskSet::default();
        events_tasks.push(events_task);
        Self {
            metrics,
            queues,
            stop,
            stop_events,
            tasks,
            workers,
            events_task: events_tasks,
            started,
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Whether the workers have started (every needed cache listed).
    pub fn is_started(&self) -> bool {
        self.started.load(std::sync::atomic::Ordering::Acquire)
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
        for resource in Resource::ALL {
            metrics.set_cache_objects(resource.plural(), resource.ops().len(&cache));
        }
    }
}
