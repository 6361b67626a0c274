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

use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use kube::Api;
use kube::runtime::watcher;
use svcplane_webhook::retry::{Backoff, Outage, wait};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::cache::watched_pod::WatchedPod;
use super::cache::{Cache, Resource, strip};
use super::controllers::dispatch::Dispatch;
use super::controllers::{Build, Controller};
use super::events::EventRecorder;
use super::metrics::Metrics;
use super::queue::WorkQueue;
use super::registry::{CONTROLLERS, Descriptor};
use super::watch::reflect;
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
    let config = watch_config(page_size);
    let (cache, client, stop) = (cache.clone(), client.clone(), stop.clone());
    let claimed = match resource {
        Resource::Services => cache.services.claim_watch(),
        Resource::Pods => cache.pods.claim_watch(),
        Resource::Nodes => cache.nodes.claim_watch(),
        Resource::EndpointSlices => cache.slices.claim_watch(),
        Resource::Endpoints => cache.endpoints.claim_watch(),
        Resource::ServiceCidrs => cache.service_cidrs.claim_watch(),
        Resource::IpAddresses => cache.ip_addresses.claim_watch(),
    };
    if !claimed {
        return None;
    }
    let name = resource.plural();
    Some(match resource {
        Resource::Services => tokio::spawn(reflect(
            name,
            Api::<Service>::all(client),
            config,
            cache,
            |c| &c.services,
            strip::service,
            stop,
        )),
        // Decoded straight into the kept fields (see `watched_pod`).
        Resource::Pods => tokio::spawn(reflect(
            name,
            Api::<WatchedPod>::all(client),
            config,
            cache,
            |c| &c.pods,
            strip::watched_pod,
            stop,
        )),
        Resource::Nodes => tokio::spawn(reflect(
            name,
            Api::<Node>::all(client),
            config,
            cache,
            |c| &c.nodes,
            strip::node,
            stop,
        )),
        Resource::EndpointSlices => tokio::spawn(reflect(
            name,
            Api::<EndpointSlice>::all(client),
            config,
            cache,
            |c| &c.slices,
            strip::endpoint_slice,
            stop,
        )),
        Resource::Endpoints => tokio::spawn(reflect(
            name,
            Api::<Endpoints>::all(client),
            config,
            cache,
            |c| &c.endpoints,
            strip::endpoints,
            stop,
        )),
        Resource::ServiceCidrs => tokio::spawn(watch_if_served(
            cache.clone(),
            resource,
            client.clone(),
            stop.clone(),
            reflect(
                name,
                Api::<ServiceCIDR>::all(client),
                config,
                cache,
                |c| &c.service_cidrs,
                strip::service_cidr,
                stop,
            ),
        )),
        Resource::IpAddresses => tokio::spawn(watch_if_served(
            cache.clone(),
            resource,
            client.clone(),
            stop.clone(),
            reflect(
                name,
                Api::<IPAddress>::all(client),
                config,
                cache,
                |c| &c.ip_addresses,
                strip::ip_address,
                stop,
            ),
        )),
    })
}

/// Runs `watch` when the API server serves `resource` (networking.k8s.io/v1 objects
/// exist from Kubernetes 1.33); otherwise the store is empty and counts as listed, so
/// nothing waits for it. An unreachable API server is asked again with backoff.
async fn watch_if_served(
    cache: Arc<Cache>,
    resource: Resource,
    client: kube::Client,
    stop: CancellationToken,
    watch: impl std::future::Future<Output = ()>,
) {
    let mut backoff = Backoff::from_entropy();
    let mut outage = Outage::default();
    loop {
        let served = match resource {
            Resource::ServiceCidrs => served::<ServiceCIDR>(&client).await,
            _ => served::<IPAddress>(&client).await,
        };
        if served.is_ok() {
            outage.recovered(resource.plural(), "asking whether the API server serves it");
        }
        match served {
            Ok(true) => return watch.await,
            Ok(false) => {
                info!(
                    resource = resource.plural(),
                    "not served by this API server; treated as none"
                );
                match resource {
                    Resource::ServiceCidrs => cache.service_cidrs.mark_listed(),
                    _ => cache.ip_addresses.mark_listed(),
                }
                return;
            }
            Err(e) => {
                let delay = backoff.next_delay();
                outage.failed(
                    resource.plural(),
                    "cannot tell whether the API server serves it",
                    &e,
                    delay,
                );
                if !wait(delay, &stop).await {
                    return;
                }
            }
        }
    }
}

/// Does the API server serve `K`? `Ok(false)` on 404.
async fn served<K>(client: &kube::Client) -> Result<bool, kube::Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match Api::<K>::all(client.clone())
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Hands `resource`'s changes to `dispatch` (from the objects already stored on).
fn attach(cache: &Cache, resource: Resource, dispatch: &Arc<Dispatch>) {
    match resource {
        Resource::Services => cache.services.attach(dispatch.clone()),
        Resource::Pods => cache.pods.attach(dispatch.clone()),
        Resource::Nodes => cache.nodes.attach(dispatch.clone()),
        Resource::EndpointSlices => cache.slices.attach(dispatch.clone()),
        Resource::Endpoints => cache.endpoints.attach(dispatch.clone()),
        Resource::ServiceCidrs => cache.service_cidrs.attach(dispatch.clone()),
        Resource::IpAddresses => cache.ip_addresses.attach(dispatch.clone()),
    }
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
            .map(|d| {
                let build = Build {
                    cache: &cache,
                    client: clients.get(d.client_user),
                    budget: clients.budget(d.client_user),
                    events: &events,
                    metrics: &metrics,
                    options: &options,
                    stop: &stop,
                };
                (*d, (d.build)(&build))
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
            attach(&cache, r, &dispatch);
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
                let listed = futures::future::join_all(reads.iter().map(|r| cache.wait_synced(*r)));
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
        for (resource, n) in cache.sizes() {
            metrics.set_cache_objects(resource.plural(), n);
        }
    }
}
