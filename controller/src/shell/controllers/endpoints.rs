//! The Endpoints controller's shell (EP-4.1, EP-4.6, EP-4.7): one legacy
//! `v1.Endpoints` object per Service with a selector, written with create or update
//! (resourceVersion precondition) or deleted when its Service is gone, never based on
//! a cached object the controller has already replaced.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use tracing::debug;

use clap::ArgMatches;

use super::{Controller, Parts, SyncError, Syncer, lock, queue_pod_keys, spawn_workers, split_key};
use crate::core::endpoints::triggers::{StaleEndpointsTracker, startup_keys};
use crate::core::endpoints::{self as core_endpoints, EndpointsWrite, Outcome};
use crate::core::event::PlannedEvent;
use crate::core::keys::object_key;
use crate::core::trigger_time::TriggerTimeTracker;
use crate::shell::apply::{WriteError, WriteErrorKind};
use crate::shell::cache::Store;
use crate::shell::coalescing::Coalescing;
use crate::shell::events::{EventRecord, object_reference};
use crate::shell::flag_group::{
    ENDPOINT_UPDATES_BATCH_PERIOD, FlagGroup, Shared, WRITE_COALESCING_WINDOW, duration_of,
};
use crate::shell::queue::{HoldPerSync, RateLimit, WorkQueue};
use crate::shell::watch::Change;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// `reportingController` of this controller's events.
pub(crate) const COMPONENT: &str = "endpoint-controller";
const RESOURCE: &str = "endpoints";
pub(crate) const REASON_FAILED_TO_CREATE: &str = "FailedToCreateEndpoint";
pub(crate) const REASON_FAILED_TO_UPDATE: &str = "FailedToUpdateEndpoint";

/// A Service in a burst is held once its last Endpoints sync (write coalescing):
/// upstream's Endpoints syncs are quick, so its Endpoints latency is the tighter
/// bound, and one sync's duration is what it takes too.
const ENDPOINTS_HOLD_PER_SYNC: HoldPerSync = HoldPerSync(1);

/// The `--help` heading of this controller's flags and the mirroring controller's.
pub(crate) const HEADING: &str = "Endpoints & mirroring";

/// The Endpoints controller's flags (kube-controller-manager's
/// `EndpointControllerOptions`), flattened into `run`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EndpointsFlags {
    /// Delay before a Pod change is synced into the Endpoints object, batching the
    /// changes that arrive meanwhile. Also the default of the two batch periods below.
    #[arg(long, id = ENDPOINT_UPDATES_BATCH_PERIOD, value_name = "DURATION", env = "SVCPLANE_ENDPOINT_UPDATES_BATCH_PERIOD",
          default_value = "0s", value_parser = crate::duration::parse_duration,
          help_heading = HEADING)]
    pub endpoint_updates_batch_period: Duration,

    /// Services synced at once by the Endpoints controller (1..=50).
    #[arg(long, value_name = "N", env = "SVCPLANE_CONCURRENT_ENDPOINT_SYNCS",
          default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=50),
          help_heading = HEADING)]
    pub concurrent_endpoint_syncs: u16,
}

impl FlagGroup for EndpointsFlags {
    type Config = Config;

    /// Write coalescing is `--write-coalescing-window`'s (the EndpointSlice
    /// controller's flag).
    fn config(&self, all: &ArgMatches, _shared: &Shared) -> Result<Config, clap::Error> {
        Ok(Config {
            batch_period: self.endpoint_updates_batch_period,
            workers: usize::from(self.concurrent_endpoint_syncs),
            coalescing: Coalescing::from_window(duration_of(all, WRITE_COALESCING_WINDOW)?),
        })
    }
}

/// Settings of the Endpoints controller.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// `--endpoint-updates-batch-period`.
    pub batch_period: Duration,
    /// `--concurrent-endpoint-syncs`.
    pub workers: usize,
    /// `--write-coalescing-window` (used while the batch period is zero).
    pub coalescing: crate::shell::coalescing::Coalescing,
}

#[derive(Debug, Default)]
struct State {
    stale: StaleEndpointsTracker,
    trigger_times: TriggerTimeTracker,
}

/// The controller.
#[derive(Debug)]
pub(crate) struct EndpointsController {
    parts: Parts,
    config: Config,
    state: Mutex<State>,
}

impl EndpointsController {
    pub(crate) fn new(parts: Parts, config: Config) -> Self {
        parts
            .queue
            .set_coalescing(config.coalescing.burst_gap(), ENDPOINTS_HOLD_PER_SYNC);
        Self {
            parts,
            config,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn add(&self, key: String) {
        self.parts.queue.add(key);
    }

    // --- event handlers (EP-4.1) ----------------------------------------------------

    /// Once the caches are synced: every Endpoints object but leader-election
    /// records, so leftovers of Services deleted while nobody watched are removed.
    fn queue_startup_keys(&self) {
        let endpoints = self.parts.cache.endpoints.read().all();
        for key in startup_keys(endpoints.iter().map(Arc::as_ref)) {
            self.add(key);
        }
    }

    // --- sync ----------------------------------------------------------------------

    fn event(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        reason: &'static str,
        message: String,
    ) {
        self.parts.events.record(EventRecord::from_planned(
            object_reference("v1", "Endpoints", namespace, name, uid),
            COMPONENT,
            "Reconcile",
            &PlannedEvent::warning(reason, message),
        ));
    }

    async fn sync_key(&self, key: &str) -> Result<(), SyncError> {
        let (namespace, name) = split_key(key);
        let service = self.parts.cache.services.read().get(namespace, name);
        let existing = self.parts.cache.endpoints.read().get(namespace, name);
        if self.state().stale.is_stale(key, existing.as_deref()) {
            return Err(SyncError::Stale("Endpoints"));
        }
        let selector = service
            .as_ref()
            .and_then(|s| s.spec.as_ref())
            .and_then(|s| s.selector.as_ref());
        let pods = self.parts.cache.pods.read().selected(namespace, selector);
        let plan = {
            let mut st = self.state();
            let trigger_time = match &service {
                Some(s) if selector.is_some() => st.trigger_times.compute(s, &pods),
                _ => None,
            };
            if service.is_none() {
                st.trigger_times.forget(namespace, name);
                st.stale.forget(key);
            }
            core_endpoints::reconcile(&core_endpoints::Inputs {
                namespace,
                name,
                service: service.as_deref(),
                pods: &pods,
                existing: existing.as_deref(),
                trigger_time,
            })
        };
        let plan = match plan {
            Outcome::Skipped(reason) => {
                debug!(key, ?reason, "not handled");
                return Ok(());
            }
            Outcome::Planned(plan) => plan,
        };
        for write in plan.writes {
            match write {
                EndpointsWrite::Create(obj) => {
                    match self.parts.writer.create(RESOURCE, namespace, &obj).await {
                        Ok(_) => self.state().stale.record_create(key),
                        Err(e) if e.kind == WriteErrorKind::NamespaceTerminating => return Ok(()),
                        Err(e) => {
                            self.event(
                                namespace,
                                name,
                                None,
                                REASON_FAILED_TO_CREATE,
                                format!("Failed to create endpoint for service {key}: {e}"),
                            );
                            return Err(e.into());
                        }
                    }
                }
                EndpointsWrite::Update(obj) => {
                    let old_rv = obj.metadata.resource_version.clone();
                    match self.parts.writer.replace(RESOURCE, namespace, &obj).await {
                        Ok(stored) => self.state().stale.record_update(
                            key,
                            old_rv.as_deref(),
                            stored.metadata.resource_version.as_deref(),
                        ),
                        Err(e) => {
                            self.update_failed(namespace, name, &obj, &e);
                            return Err(e.into());
                        }
                    }
                }
                EndpointsWrite::Delete(r) => {
                    self.parts
                        .writer
                        .delete::<Endpoints>(RESOURCE, &r.namespace, &r.name, r.uid.as_deref())
                        .await?;
                    self.state().stale.record_delete(key, r.uid.as_deref());
                }
            }
        }
        Ok(())
    }

    fn update_failed(&self, namespace: &str, name: &str, obj: &Endpoints, e: &WriteError) {
        self.event(
            namespace,
            name,
            obj.metadata.uid.as_deref(),
            REASON_FAILED_TO_UPDATE,
            format!("Failed to update endpoint {namespace}/{name}: {e}"),
        );
    }
}

impl Controller for EndpointsController {
    fn on_service(&self, change: &Change<Service>) {
        super::queue_service(&self.parts, Self::QUEUE, change);
    }

    fn on_pod_keys(&self, keys: &[String], withdraws: bool) {
        queue_pod_keys(
            &self.parts.queue,
            keys,
            withdraws,
            self.config.batch_period,
            self.config.coalescing,
        );
    }

    /// Only deletes are watched: a hand edit persists until the next sync.
    fn on_endpoints(&self, change: &Change<Endpoints>) {
        if let Change::Deleted(e) = change {
            let m = &e.metadata;
            self.add(object_key(m));
        }
    }

    fn start(self: Arc<Self>, _stop: &CancellationToken) -> Vec<JoinHandle<()>> {
        self.queue_startup_keys();
        spawn_workers(
            &self,
            &self.parts.queue,
            &self.parts.metrics,
            self.config.workers,
        )
    }

    fn queue(&self) -> Option<&Arc<WorkQueue<String>>> {
        Some(&self.parts.queue)
    }
}

impl super::Registered for EndpointsController {
    type Flags = EndpointsFlags;

    fn build(b: &super::Build<'_>, config: Config) -> Self {
        Self::new(b.parts(RateLimit::ENDPOINTS, Self::QUEUE), config)
    }
}

impl Syncer for EndpointsController {
    const QUEUE: &'static str = "endpoint";

    async fn sync(&self, key: &str) -> Result<(), SyncError> {
        self.sync_key(key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::{endpoints as endpoints_fixture, svc};
    use crate::shell::coalescing::Coalescing;
    use crate::shell::controllers::test_support::{
        hold_in_a_burst, order_after_a_migrated_arrival, parts, write_attempts,
    };
    use crate::shell::queue::RateLimit;

    #[tokio::test]
    async fn coalescing_holds_a_service_in_a_burst_once_its_last_endpoints_sync() {
        let p = parts(RateLimit::ENDPOINTS);
        let window = Duration::from_millis(250);
        let _c = EndpointsController::new(
            p.clone(),
            Config {
                workers: 1,
                batch_period: Duration::ZERO,
                coalescing: Coalescing::from_window(window),
            },
        );
        let took = Duration::from_millis(40);
        assert_eq!(hold_in_a_burst(&p.queue, took, window), took);
        assert_eq!(
            hold_in_a_burst(&p.queue, Duration::from_millis(300), window),
            window,
            "300 ms capped by --write-coalescing-window"
        );
    }

    /// One worker, no batch period, no coalescing.
    fn controller(p: &Parts) -> EndpointsController {
        EndpointsController::new(
            p.clone(),
            Config {
                workers: 1,
                batch_period: Duration::ZERO,
                coalescing: Coalescing::OFF,
            },
        )
    }

    #[tokio::test]
    async fn a_service_migrate_just_recreated_is_synced_before_queued_ones() {
        let p = parts(RateLimit::ENDPOINTS);
        let c = controller(&p);
        let (order, count) = order_after_a_migrated_arrival(&c, &p, "endpoint");
        assert_eq!(
            order,
            ["default/moved", "default/a", "default/b", "default/c"]
        );
        assert!(count.ends_with(" 1"), "{count:?}");
    }

    #[tokio::test]
    async fn rule_4_7_no_sync_while_the_cache_shows_the_version_we_replaced() {
        let p = parts(RateLimit::ENDPOINTS);
        let c = controller(&p);
        let mut cached = endpoints_fixture("web").build();
        cached.metadata.resource_version = Some("5".into());
        p.cache
            .services
            .write()
            .upsert(Arc::new(svc("web").build()));
        p.cache.endpoints.write().upsert(Arc::new(cached.clone()));
        c.state()
            .stale
            .record_update("default/web", Some("5"), Some("6"));
        let r = c.sync_key("default/web").await;
        assert!(matches!(r, Err(SyncError::Stale(_))), "{r:?}");
        assert_eq!(write_attempts(&p.metrics), 0);
        // The cache moves on: the sync runs (and, offline, fails to write).
        cached.metadata.resource_version = Some("6".into());
        p.cache.endpoints.write().upsert(Arc::new(cached));
        let r = c.sync_key("default/web").await;
        assert!(matches!(r, Err(SyncError::Write(_))), "{r:?}");
        assert_eq!(write_attempts(&p.metrics), 1);
    }
}
