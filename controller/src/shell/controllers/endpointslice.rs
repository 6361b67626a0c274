//! The EndpointSlice controller's shell (ES-2.2, ES-2.9, ES-2.10, ES-2.12,
//! ES-2.13): read one Service's world from the cache, refuse to act on a cache older
//! than our own last write, call the pure reconciler, carry the plan out pass by pass,
//! and keep the tracker, the trigger times, the topology cache and the metrics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use clap::ArgMatches;

use super::slice_figures::{FigureBook, Figures, SliceGauges};
use super::slice_writes::{SliceWrites, write_slices};
use super::{Controller, Parts, SyncError, Syncer, lock, queue_pod_keys, spawn_workers, split_key};
use crate::core::endpointslice::tracker::SliceTracker;
use crate::core::endpointslice::triggers;
use crate::core::endpointslice::{
    AddressTypePass, CONTROLLER_NAME, Inputs, Outcome, is_managed_slice_of, reconcile_with_hints,
};
use crate::core::event::PlannedEvent;
use crate::core::keys::object_key;
use crate::core::topology::{HintsMode, TopologyPolicy, hints_enabled};
use crate::core::trigger_time::TriggerTimeTracker;
use crate::shell::apply::WriteError;
use crate::shell::cache::CachedPod;
use crate::shell::cache::Store;
use crate::shell::events::{EventRecord, object_reference};
use crate::shell::flag_group::{
    ENDPOINT_UPDATES_BATCH_PERIOD, FlagGroup, Shared, WRITE_COALESCING_WINDOW, duration_of,
};
use crate::shell::metrics::{
    ChangedPerSyncLabels, OperationLabels, ResultLabels, TrafficDistributionLabels,
};
use crate::shell::queue::{HoldPerSync, RateLimit, WorkQueue};
use crate::shell::watch::Change;

/// `reportingController` of this controller's events.
pub(crate) const COMPONENT: &str = "endpoint-slice-controller";
/// Slice events are batched at least this long (ES-2.1).
const MIN_SLICE_EVENT_DELAY: Duration = Duration::from_secs(1);

/// The `--help` heading of this controller's flags.
pub(crate) const HEADING: &str = "EndpointSlice";

/// The EndpointSlice controller's flags (kube-controller-manager's
/// `EndpointSliceControllerOptions`, plus write coalescing), flattened into `run`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EndpointSliceFlags {
    /// Maximum number of endpoints in one EndpointSlice (1..=1000).
    #[arg(long, value_name = "N", env = "SVCPLANE_MAX_ENDPOINTS_PER_SLICE",
          default_value_t = crate::core::endpointslice::DEFAULT_MAX_ENDPOINTS_PER_SLICE as u16,
          value_parser = clap::value_parser!(u16)
              .range(1..=(crate::core::endpointslice::MAX_ENDPOINTS_PER_SLICE_LIMIT as i64)),
          help_heading = HEADING)]
    pub max_endpoints_per_slice: u16,

    /// The same for EndpointSlices (Pod and slice changes); defaults to
    /// `--endpoint-updates-batch-period`.
    #[arg(long, value_name = "DURATION", env = "SVCPLANE_ENDPOINTSLICE_UPDATES_BATCH_PERIOD",
          value_parser = crate::duration::parse_duration, help_heading = HEADING)]
    pub endpointslice_updates_batch_period: Option<Duration>,

    /// With batch periods of 0, the most a change waits for others to share its write:
    /// a Service in a burst (synced twice within four windows) is held after each sync
    /// for three (slices) or one (Endpoints) times how long that sync's turn took, or
    /// longer as the controller's client spends its QPS burst (the whole window once
    /// half of it is spent), so the wait follows pressure, never more than this window
    /// (a quarter of it for Pods withdrawn, never behind additions). A Service not
    /// synced recently is synced at once. 0 syncs every change at once, as upstream.
    #[arg(long, id = WRITE_COALESCING_WINDOW, value_name = "DURATION", env = "SVCPLANE_WRITE_COALESCING_WINDOW",
          default_value = "250ms", value_parser = crate::duration::parse_duration,
          help_heading = HEADING)]
    pub write_coalescing_window: Duration,

    /// Services synced at once by the EndpointSlice controller (1..=50).
    #[arg(long, value_name = "N", env = "SVCPLANE_CONCURRENT_SERVICE_ENDPOINT_SYNCS",
          default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=50),
          help_heading = HEADING)]
    pub concurrent_service_endpoint_syncs: u16,
}

impl EndpointSliceFlags {
    /// The coalescing `--write-coalescing-window` asks for (the Endpoints controller
    /// reads it too).
    pub(crate) fn coalescing(&self) -> crate::shell::coalescing::Coalescing {
        crate::shell::coalescing::Coalescing::from_window(self.write_coalescing_window)
    }
}

impl FlagGroup for EndpointSliceFlags {
    type Config = Config;

    /// `--endpoint-updates-batch-period` (the Endpoints controller's) is the default of
    /// this controller's own batch period.
    fn config(&self, all: &ArgMatches, _shared: &Shared) -> Result<Config, clap::Error> {
        let endpoints_batch = duration_of(all, ENDPOINT_UPDATES_BATCH_PERIOD)?;
        Ok(Config {
            max_endpoints_per_slice: usize::from(self.max_endpoints_per_slice),
            workers: usize::from(self.concurrent_service_endpoint_syncs),
            batch_period: self
                .endpointslice_updates_batch_period
                .unwrap_or(endpoints_batch),
            coalescing: self.coalescing(),
        })
    }
}

/// Settings of the EndpointSlice controller.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub max_endpoints_per_slice: usize,
    /// `--concurrent-service-endpoint-syncs`.
    pub workers: usize,
    /// `--endpointslice-updates-batch-period`.
    pub batch_period: Duration,
    /// `--write-coalescing-window` (used while the batch period is zero).
    pub coalescing: crate::shell::coalescing::Coalescing,
}

#[derive(Debug, Default)]
struct State {
    tracker: SliceTracker,
    trigger_times: TriggerTimeTracker,
    /// The per-Service figures behind the three gauges (ES-2.13): replaced on every
    /// pass, so a dual-stack Service counts as its last family, as upstream.
    figures: FigureBook,
    traffic_distribution: HashMap<String, &'static str>,
}

/// The controller.
#[derive(Debug)]
pub(crate) struct EndpointSliceController {
    parts: Parts,
    config: Config,
    /// Tracker, trigger times, per-Service metric figures: held only for map updates.
    state: Mutex<State>,
    /// The topology cache and zone ratios. Held for a whole reconcile, but only by
    /// Services whose hints depend on it (annotation `Auto`, or cached hints to clear),
    /// so other syncs plan in parallel. Lock order: Node store, then this; `state` is
    /// never held together with either.
    topology: Mutex<TopologyPolicy>,
    /// Wakes the topology task (Node changes are coalesced into one recomputation).
    topology_dirty: Notify,
}

impl super::Registered for EndpointSliceController {
    type Flags = EndpointSliceFlags;

    fn build(b: &super::Build<'_>, config: Config) -> Self {
        Self::new(b.parts(RateLimit::ENDPOINT_SLICE, Self::QUEUE), config)
    }
}

/// A Service in a burst is held three times its last slice sync (write coalescing):
/// upstream's slice syncs are slow (its slice p99 in a rollout is several times its
/// Endpoints'), so waiting that long is still within what its own sync takes.
const SLICE_HOLD_PER_SYNC: HoldPerSync = HoldPerSync(3);

impl EndpointSliceController {
    pub(crate) fn new(parts: Parts, config: Config) -> Self {
        parts
            .queue
            .set_coalescing(config.coalescing.burst_gap(), SLICE_HOLD_PER_SYNC);
        Self {
            parts,
            config,
            state: Mutex::new(State::default()),
            topology: Mutex::new(TopologyPolicy::default()),
            topology_dirty: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn add(&self, key: String) {
        self.parts.queue.add(key);
    }

    // --- event handlers (ES-2.1) --------------------------------------------------

    /// The topology work item (ES-2.1, TH-3.3.1, TH-3.3.6): recompute the zone ratios
    /// from the cached Nodes and queue the Services whose hints they overload.
    pub(crate) fn refresh_topology(&self) {
        let keys = {
            let nodes = self.parts.cache.nodes.read();
            lock(&self.topology).set_nodes(nodes.iter().map(Arc::as_ref))
        };
        debug!(overloaded = keys.len(), "topology recomputed");
        for key in keys {
            self.add(key);
        }
    }

    /// Runs the topology work item whenever Nodes changed in a way that matters
    /// (changes in between are coalesced), until `cancel`.
    pub(crate) async fn topology_loop(
        self: Arc<Self>,
        cancel: tokio_util::sync::CancellationToken,
    ) {
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.topology_dirty.notified() => {}
            }
            self.refresh_topology();
        }
    }

    // --- sync (ES-2.2) ---------------------------------------------------------------

    fn forget(&self, key: &str) {
        lock(&self.topology).cache_mut().forget_service(key);
        let mut st = self.state();
        st.tracker.forget_service(key);
        let (namespace, name) = split_key(key);
        st.trigger_times.forget(namespace, name);
        st.figures.set(key, None, &self.slice_gauges());
        if let Some(td) = st.traffic_distribution.remove(key) {
            self.td_gauge(td).dec();
        }
    }

    /// Whether this Service's sync reads or writes the shared topology cache: hints
    /// `Auto`, or hints cached from an earlier `Auto` that must now be cleared (with
    /// the `TopologyAwareHintsDisabled` event).
    fn needs_topology_cache(&self, key: &str, service: &Service) -> bool {
        HintsMode::of_service(service) == HintsMode::Auto
            || lock(&self.topology).cache().has_populated_hints(key)
    }

    fn td_gauge(&self, td: &'static str) -> prometheus_client::metrics::gauge::Gauge {
        self.parts
            .metrics
            .endpoint_slice()
            .services_count_by_traffic_distribution
            .get_or_create(&TrafficDistributionLabels {
                traffic_distribution: td.to_owned(),
            })
            .clone()
    }

    fn slice_gauges(&self) -> SliceGauges<'_> {
        let m = self.parts.metrics.endpoint_slice();
        SliceGauges {
            endpoints_desired: &m.endpoints_desired,
            slices: &m.num_endpoint_slices,
            desired_slices: &m.desired_endpoint_slices,
        }
    }

    fn record_figures(&self, key: &str, pass: &AddressTypePass) {
        let new = Figures::new(
            pass.stats.endpoints_desired,
            pass.stats.slices_after,
            pass.stats.slices_desired,
        );
        self.state()
            .figures
            .set(key, Some(new), &self.slice_gauges());
    }

    fn record_traffic_distribution(&self, key: &str, service: &Service) {
        let td = match HintsMode::of_service(service) {
            HintsMode::TrafficDistribution(td) => Some(td.as_str()),
            HintsMode::Auto | HintsMode::Disabled => None,
        };
        let old = {
            let mut st = self.state();
            match td {
                Some(td) => st.traffic_distribution.insert(key.to_owned(), td),
                None => st.traffic_distribution.remove(key),
            }
        };
        if old != td {
            if let Some(o) = old {
                self.td_gauge(o).dec();
            }
            if let Some(n) = td {
                self.td_gauge(n).inc();
            }
        }
    }

    fn event(&self, service: &Service, action: &'static str, planned: &PlannedEvent) {
        let m = &service.metadata;
        self.parts.events.record(EventRecord::from_planned(
            object_reference(
                "v1",
                "Service",
                m.namespace.as_deref().unwrap_or_default(),
                m.name.as_deref().unwrap_or_default(),
                m.uid.as_deref(),
            ),
            COMPONENT,
            action,
            planned,
        ));
    }

    fn count_sync(&self, result: &'static str) {
        self.parts
            .metrics
            .endpoint_slice()
            .syncs
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    fn count_change(&self, operation: &'static str) {
        self.parts
            .metrics
            .endpoint_slice()
            .changes
            .get_or_create(&OperationLabels { operation })
            .inc();
    }

    /// Carries one pass out in order, stopping at the first failed write (ES-2.9).
    /// Returns the writes made.
    async fn apply_pass(
        &self,
        key: &str,
        namespace: &str,
        writes: SliceWrites<'_>,
    ) -> Result<usize, WriteError> {
        write_slices(&self.parts.writer, namespace, writes, |w| {
            w.record(&mut self.state().tracker, key);
            self.count_change(w.operation());
        })
        .await
    }

    async fn sync_service(&self, key: &str) -> Result<(), SyncError> {
        let (namespace, name) = split_key(key);
        let Some(service) = self.parts.cache.services.read().get(namespace, name) else {
            self.forget(key);
            return Ok(());
        };
        let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref());
        let pods: Vec<Arc<CachedPod>> = self.parts.cache.pods.read().selected(namespace, selector);
        // The slices are read under the state lock, so the stale check and the
        // snapshot the plan is built from are the same view (a delete event consuming
        // an expectation in between cannot slip a slice we deleted past the check).
        let (slices, trigger_time) = {
            let mut st = self.state();
            let slices = self.parts.cache.slices.read().of_service(namespace, name);
            let managed: Vec<&EndpointSlice> = slices
                .iter()
                .map(Arc::as_ref)
                .filter(|s| is_managed_slice_of(s, &service))
                .collect();
            if st.tracker.is_stale(key, &managed) {
                drop(st);
                self.count_sync("stale");
                return Err(SyncError::Stale("EndpointSlice"));
            }
            let trigger_time = st.trigger_times.compute(&service, &pods);
            (slices, trigger_time)
        };
        let outcome = {
            let nodes = self.parts.cache.nodes.read();
            let inputs = Inputs {
                service: &service,
                pods: &pods,
                nodes: &*nodes,
                existing: &slices,
                trigger_time,
                max_endpoints_per_slice: self.config.max_endpoints_per_slice,
            };
            if self.needs_topology_cache(key, &service) {
                reconcile_with_hints(&inputs, &mut *lock(&self.topology))
            } else {
                // Same answers as the shared policy for a Service with no cached hints
                // and no `Auto` annotation: nothing of the cache is read or written.
                reconcile_with_hints(&inputs, &mut TopologyPolicy::default())
            }
        };
        let plan = match outcome {
            Outcome::Skipped(reason) => {
                debug!(key, ?reason, "not handled");
                return Ok(());
            }
            Outcome::Planned(plan) => plan,
        };

        let topology = if hints_enabled(&service) {
            "Auto"
        } else {
            "Disabled"
        };
        let traffic_distribution = match HintsMode::of_service(&service) {
            HintsMode::TrafficDistribution(td) => td.as_str().to_owned(),
            _ => String::new(),
        };
        self.record_traffic_distribution(key, &service);
        let mut failure: Option<WriteError> = None;
        for pass in &plan.passes {
            let es = self.parts.metrics.endpoint_slice();
            es.endpoints_added_per_sync
                .observe(pass.stats.endpoints_added as f64);
            es.endpoints_removed_per_sync
                .observe(pass.stats.endpoints_removed as f64);
            self.record_figures(key, pass);
            let writes = SliceWrites {
                creates: &pass.creates,
                updates: &pass.updates,
                deletes: &pass.deletes,
            };
            let result = self.apply_pass(key, namespace, writes).await;
            let written = result.unwrap_or_else(|e| {
                warn!(key, address_type = pass.address_type, error = %e, "writing EndpointSlices failed");
                failure.get_or_insert(e);
                0
            });
            es.endpointslices_changed_per_sync
                .get_or_create(&ChangedPerSyncLabels {
                    topology,
                    traffic_distribution: traffic_distribution.clone(),
                })
                .observe(written as f64);
        }
        if failure.is_none()
            && !plan.unsupported_deletes.is_empty()
            && let Err(e) = self
                .apply_pass(
                    key,
                    namespace,
                    SliceWrites {
                        creates: &[],
                        updates: &[],
                        deletes: &plan.unsupported_deletes,
                    },
                )
                .await
        {
            failure = Some(e);
        }
        for planned in &plan.events {
            self.event(&service, "Reconcile", planned);
        }
        if let Some(e) = failure {
            self.event(
                &service,
                "Reconcile",
                &PlannedEvent::warning(
                    crate::core::endpointslice::REASON_FAILED_TO_UPDATE,
                    format!("Error updating Endpoint Slices for Service {key}: {e}"),
                ),
            );
            self.count_sync("error");
            return Err(SyncError::Write(e));
        }
        if let Some(message) = plan.error {
            self.count_sync("error");
            return Err(SyncError::Plan(message));
        }
        self.count_sync("success");
        Ok(())
    }
}

impl Controller for EndpointSliceController {
    fn on_service(&self, change: &Change<Service>) {
        super::queue_service(&self.parts, Self::QUEUE, change);
    }

    /// Services a Pod event affects, already computed by the dispatcher.
    fn on_pod_keys(&self, keys: &[String], withdraws: bool) {
        queue_pod_keys(
            &self.parts.queue,
            keys,
            withdraws,
            self.config.batch_period,
            self.config.coalescing,
        );
    }

    fn on_slice(&self, change: &Change<EndpointSlice>) {
        let keys = {
            let mut st = self.state();
            match change {
                Change::Added(s) => {
                    triggers::services_for_slice_add(s, &st.tracker, CONTROLLER_NAME)
                }
                Change::Updated { old, new } => {
                    triggers::services_for_slice_update(old, new, &st.tracker, CONTROLLER_NAME)
                }
                Change::Deleted(s) => {
                    triggers::services_for_slice_delete(s, &mut st.tracker, CONTROLLER_NAME)
                }
            }
        };
        let delay = self.config.batch_period.max(MIN_SLICE_EVENT_DELAY);
        for key in keys {
            self.parts.queue.add_after(key, delay);
        }
    }

    fn on_node(&self, change: &Change<Node>) {
        let relevant = match change {
            Change::Added(_) | Change::Deleted(_) => true,
            Change::Updated { old, new } => triggers::node_update_affects_topology(old, new),
        };
        if relevant {
            self.topology_dirty.notify_one();
        }
        // svcplane addition: endpoints carry their Node's zone, so a Node that appears
        // (Pods on it were skipped as "Node Not Found") or changes zone re-syncs the
        // Services with Pods on it. Upstream waits for the next unrelated event.
        let zone = |n: &Node| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::core::keys::LABEL_ZONE))
                .cloned()
        };
        let node = match change {
            Change::Added(n) => n,
            Change::Updated { old, new } if zone(old) != zone(new) => new,
            _ => return,
        };
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let pods = self.parts.cache.pods.read().on_node(name);
        if pods.is_empty() {
            return;
        }
        let mut keys: Vec<String> = {
            let services = self.parts.cache.services.read();
            pods.iter()
                .flat_map(|p| services.matching(&**p))
                .map(|s| object_key(&s.metadata))
                .collect()
        };
        keys.sort();
        keys.dedup();
        // Rare, and it moves hints between zones: not held back.
        self.on_pod_keys(&keys, true);
    }

    /// The zone ratios first, so no Service is first synced without them (and
    /// rewritten once they arrive); then the topology task and the workers.
    fn start(self: Arc<Self>, stop: &CancellationToken) -> Vec<JoinHandle<()>> {
        self.refresh_topology();
        let mut tasks = vec![tokio::spawn(self.clone().topology_loop(stop.clone()))];
        tasks.extend(spawn_workers(
            &self,
            &self.parts.queue,
            &self.parts.metrics,
            self.config.workers,
        ));
        tasks
    }

    fn queue(&self) -> Option<&Arc<WorkQueue<String>>> {
        Some(&self.parts.queue)
    }
}

impl Syncer for EndpointSliceController {
    const QUEUE: &'static str = "endpoint_slice";

    async fn sync(&self, key: &str) -> Result<(), SyncError> {
        self.sync_service(key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::endpointslice::reconcile;
    use crate::core::fixtures::{as_stored, node, pod, svc};
    use crate::shell::apply::WriteErrorKind;
    use crate::shell::cache::Store;
    use crate::shell::coalescing::Coalescing;
    use crate::shell::controllers::test_support::{
        hold_in_a_burst, order_after_a_migrated_arrival, parts, write_attempts,
    };
    use crate::shell::queue::RateLimit;

    #[tokio::test]
    async fn coalescing_holds_a_service_in_a_burst_three_times_its_last_slice_sync() {
        let p = parts(RateLimit::ENDPOINT_SLICE);
        let window = Duration::from_millis(250);
        let _c = EndpointSliceController::new(
            p.clone(),
            Config {
                workers: 1,
                max_endpoints_per_slice: 100,
                batch_period: Duration::ZERO,
                coalescing: Coalescing::from_window(window),
            },
        );
        let took = Duration::from_millis(40);
        assert_eq!(hold_in_a_burst(&p.queue, took, window), took * 3);
        assert_eq!(
            hold_in_a_burst(&p.queue, Duration::from_millis(100), window),
            window,
            "300 ms capped by --write-coalescing-window"
        );
    }

    #[tokio::test]
    async fn a_service_migrate_just_recreated_is_synced_before_queued_ones() {
        let p = parts(RateLimit::ENDPOINT_SLICE);
        let c = controller(&p);
        let (order, count) = order_after_a_migrated_arrival(&c, &p, "endpoint_slice");
        assert_eq!(
            order,
            ["default/moved", "default/a", "default/b", "default/c"]
        );
        assert!(count.ends_with(" 1"), "{count:?}");
    }

    #[tokio::test]
    async fn coalescing_off_holds_nothing_even_in_a_burst() {
        let p = parts(RateLimit::ENDPOINT_SLICE);
        let _c = controller(&p);
        let window = Duration::from_millis(250);
        let hold = hold_in_a_burst(&p.queue, Duration::from_millis(40), window);
        assert_eq!(hold, Duration::ZERO);
    }

    fn controller(p: &Parts) -> EndpointSliceController {
        EndpointSliceController::new(
            p.clone(),
            Config {
                workers: 1,
                max_endpoints_per_slice: 100,
                batch_period: Duration::ZERO,
                coalescing: crate::shell::coalescing::Coalescing::OFF,
            },
        )
    }

    #[tokio::test]
    async fn rule_2_10_no_sync_from_a_cache_older_than_our_last_write() {
        let p = parts(RateLimit::ENDPOINT_SLICE);
        let c = controller(&p);
        let service = svc("web").port("http", 80, 8080).build();
        let web0 = pod("web-0", "web").ip("10.0.0.1").ready().build();
        let nodes = crate::core::fixtures::nodes(&[node("node-a", Some("z"))]);
        // The slice a first sync would create, as the API server stored it.
        let Outcome::Planned(plan) = reconcile(&Inputs {
            service: &service,
            pods: &[Arc::new(web0.clone())],
            nodes: &nodes,
            existing: &[],
            trigger_time: None,
            max_endpoints_per_slice: 100,
        }) else {
            panic!("planned");
        };
        let stored = as_stored(plan.passes[0].creates[0].clone(), "web-abcde");
        p.cache.services.write().upsert(Arc::new(service));
        p.cache
            .pods
            .write()
            .upsert(Arc::new(CachedPod::from_pod(web0)));
        p.cache
            .nodes
            .write()
            .upsert(Arc::new(node("node-a", Some("z"))));
        p.cache.slices.write().upsert(Arc::new(stored.clone()));

        // We wrote generation 2; the cache still shows generation 1.
        let mut ours = stored.clone();
        ours.metadata.generation = Some(2);
        c.state().tracker.record_written("default/web", &ours);
        let r = c.sync_service("default/web").await;
        assert!(matches!(r, Err(SyncError::Stale(_))), "{r:?}");
        assert_eq!(
            write_attempts(&p.metrics),
            0,
            "nothing written from the stale view"
        );

        // Caught up: the sync runs, and the stored slice is already right.
        p.cache.slices.write().upsert(Arc::new(ours));
        let r = c.sync_service("default/web").await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(write_attempts(&p.metrics), 0);
    }

    /// Lock order (a review found a deadlock in an earlier one): a sync holds the state
    /// mutex only for its stale check and trigger time, without the Node store; it then
    /// takes the Node store's read lock and, for hinted Services, the topology mutex —
    /// the order `refresh_topology` uses. std's RwLock makes new readers wait behind a
    /// waiting writer (a Node watch update), so any state→nodes nesting would close a
    /// cycle with the topology task. Here a worker playing both phases, the topology
    /// task and a Node writer run against each other and must all finish.
    #[test]
    fn lock_order_lets_sync_topology_refresh_and_node_watch_all_finish() {
        use std::sync::mpsc;
        use std::time::Duration as StdDuration;

        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let p = parts(RateLimit::ENDPOINT_SLICE);
        let c = Arc::new(controller(&p));
        p.cache
            .nodes
            .write()
            .upsert(Arc::new(node("node-a", Some("z"))));

        let (locked_tx, locked_rx) = mpsc::channel::<()>();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let worker = {
            let c = c.clone();
            std::thread::spawn(move || {
                // Phase 1 (stale check): the state mutex alone.
                let st = c.state();
                locked_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                drop(st);
                // Phase 2 (reconcile): Node store, then topology.
                let nodes = c.parts.cache.nodes.read();
                let topology = lock(&c.topology);
                drop(topology);
                drop(nodes);
                let _ = done_tx.send(());
            })
        };
        locked_rx.recv().unwrap();
        let topo = {
            let c = c.clone();
            std::thread::spawn(move || c.refresh_topology())
        };
        std::thread::sleep(StdDuration::from_millis(100));
        let watch = {
            let cache = p.cache.clone();
            std::thread::spawn(move || {
                cache
                    .nodes
                    .write()
                    .upsert(Arc::new(node("node-a", Some("other-zone"))));
            })
        };
        std::thread::sleep(StdDuration::from_millis(100));
        go_tx.send(()).unwrap();
        assert!(
            done_rx.recv_timeout(StdDuration::from_secs(5)).is_ok(),
            "deadlock between the sync, the topology task and a Node update"
        );
        worker.join().unwrap();
        topo.join().unwrap();
        watch.join().unwrap();
    }

    #[tokio::test]
    async fn a_failed_write_is_a_sync_error_with_an_event() {
        let p = parts(RateLimit::ENDPOINT_SLICE);
        let c = controller(&p);
        p.cache
            .services
            .write()
            .upsert(Arc::new(svc("web").port("http", 80, 8080).build()));
        let r = c.sync_service("default/web").await;
        let Err(SyncError::Write(e)) = r else {
            panic!("expected a write error, got {r:?}");
        };
        assert_eq!(e.kind, WriteErrorKind::Transient);
        assert_eq!((e.verb, e.resource), ("create", "endpointslices"));
        assert_eq!(
            write_attempts(&p.metrics),
            1,
            "the placeholder create, once"
        );
    }
}
