//! The EndpointSliceMirroring controller's shell (MR-5): EndpointSlices
//! for the hand-written Endpoints of selectorless Services, with the same stale-cache
//! guard as the EndpointSlice controller (ES-2.10) over the slices it mirrors.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::time::Instant;

use clap::ArgMatches;

use super::slice_figures::{FigureBook, Figures, SliceGauges};
use super::slice_writes::{SliceWrites, write_slices};
use super::{Controller, Parts, SyncError, Syncer, lock, spawn_workers, split_key};
use crate::core::endpointslice::tracker::SliceTracker;
use crate::core::mirroring::triggers::{keys_for_endpoints, keys_for_service, keys_for_slice};
use crate::core::mirroring::{self as core_mirroring, MirrorStats, is_mirrored_slice_of};
use crate::shell::cache::Store;
use crate::shell::events::{EventRecord, object_reference};
use crate::shell::flag_group::{ENDPOINT_UPDATES_BATCH_PERIOD, FlagGroup, Shared, duration_of};
use crate::shell::metrics::OperationLabels;
use crate::shell::queue::{RateLimit, WorkQueue};
use crate::shell::watch::Change;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// `reportingController` of this controller's events.
pub(crate) const COMPONENT: &str = "endpoint-slice-mirroring-controller";

/// The mirroring controller's flags (kube-controller-manager's
/// `EndpointSliceMirroringControllerOptions`), flattened into `run`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct MirroringFlags {
    /// Maximum number of addresses mirrored per Endpoints subset (1..=1000).
    #[arg(long, value_name = "N", env = "SVCPLANE_MIRRORING_MAX_ENDPOINTS_PER_SUBSET",
          default_value_t = 1000, value_parser = clap::value_parser!(u16).range(1..=1000),
          help_heading = super::endpoints::HEADING)]
    pub mirroring_max_endpoints_per_subset: u16,

    /// The same for mirrored EndpointSlices (slice changes); defaults to
    /// `--endpoint-updates-batch-period`.
    #[arg(long, value_name = "DURATION", env = "SVCPLANE_MIRRORING_ENDPOINTSLICE_UPDATES_BATCH_PERIOD",
          value_parser = crate::duration::parse_duration, help_heading = super::endpoints::HEADING)]
    pub mirroring_endpointslice_updates_batch_period: Option<Duration>,

    /// Endpoints objects synced at once by the mirroring controller (1..=50).
    #[arg(long, value_name = "N", env = "SVCPLANE_MIRRORING_CONCURRENT_SERVICE_ENDPOINT_SYNCS",
          default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=50),
          help_heading = super::endpoints::HEADING)]
    pub mirroring_concurrent_service_endpoint_syncs: u16,
}

impl FlagGroup for MirroringFlags {
    type Config = Config;

    /// `--endpoint-updates-batch-period` (the Endpoints controller's) is the default of
    /// this controller's own batch period.
    fn config(&self, all: &ArgMatches, _shared: &Shared) -> Result<Config, clap::Error> {
        let endpoints_batch = duration_of(all, ENDPOINT_UPDATES_BATCH_PERIOD)?;
        Ok(Config {
            max_endpoints_per_subset: usize::from(self.mirroring_max_endpoints_per_subset),
            workers: usize::from(self.mirroring_concurrent_service_endpoint_syncs),
            batch_period: self
                .mirroring_endpointslice_updates_batch_period
                .unwrap_or(endpoints_batch),
        })
    }
}

/// Settings of the mirroring controller.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// `--mirroring-max-endpoints-per-subset`.
    pub max_endpoints_per_subset: usize,
    /// `--mirroring-concurrent-service-endpoint-syncs`.
    pub workers: usize,
    /// `--mirroring-endpointslice-updates-batch-period` (slice events only).
    pub batch_period: Duration,
}

#[derive(Debug, Default)]
struct State {
    tracker: SliceTracker,
    figures: FigureBook,
}

/// The controller.
#[derive(Debug)]
pub(crate) struct MirroringController {
    parts: Parts,
    config: Config,
    state: Mutex<State>,
}

impl MirroringController {
    pub(crate) fn new(parts: Parts, config: Config) -> Self {
        Self {
            parts,
            config,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn record_figures(&self, key: &str, stats: &MirrorStats, slices: usize, forget: bool) {
        let new =
            (!forget).then(|| Figures::new(stats.endpoints_desired, slices, stats.slices_desired));
        let m = self.parts.metrics.mirroring();
        let gauges = SliceGauges {
            endpoints_desired: &m.endpoints_desired,
            slices: &m.num_endpoint_slices,
            desired_slices: &m.desired_endpoint_slices,
        };
        self.state().figures.set(key, new, &gauges);
    }

    fn count_change(&self, operation: &'static str) {
        self.parts
            .metrics
            .mirroring()
            .changes
            .get_or_create(&OperationLabels { operation })
            .inc();
    }

    async fn sync_key(&self, key: &str) -> Result<(), SyncError> {
        let start = Instant::now();
        let (namespace, name) = split_key(key);
        let endpoints = self.parts.cache.endpoints.read().get(namespace, name);
        let service = self.parts.cache.services.read().get(namespace, name);
        let (slices, plan) = {
            // Read under the state lock: the stale check and the plan see one view.
            let mut st = self.state();
            let slices = self.parts.cache.slices.read().of_service(namespace, name);
            let mirrored: Vec<&EndpointSlice> = slices
                .iter()
                .map(Arc::as_ref)
                .filter(|s| is_mirrored_slice_of(s, namespace, name))
                .filter(|s| s.metadata.deletion_timestamp.is_none())
                .collect();
            if st.tracker.is_stale(key, &mirrored) {
                return Err(SyncError::Stale("mirrored EndpointSlice"));
            }
            let plan = core_mirroring::reconcile(&core_mirroring::Inputs {
                namespace,
                name,
                endpoints: endpoints.as_deref(),
                service: service.as_deref(),
                existing: &slices,
                max_endpoints_per_subset: self.config.max_endpoints_per_subset,
            });
            if plan.not_mirrored.is_some() {
                // Forget before deleting (as upstream): the deletions recorded below
                // must survive, or a quick re-mirror acts on the deleted slices.
                st.tracker.forget_service(key);
            }
            (slices, plan)
        };
        let m = self.parts.metrics.mirroring();
        m.endpoints_added_per_sync
            .observe(plan.stats.endpoints_added as f64);
        m.endpoints_updated_per_sync
            .observe(plan.stats.endpoints_updated as f64);
        m.endpoints_removed_per_sync
            .observe(plan.stats.endpoints_removed as f64);
        m.addresses_skipped_per_sync
            .observe(plan.stats.addresses_skipped as f64);
        if let Some(e) = &endpoints {
            for planned in &plan.events {
                self.parts.events.record(EventRecord::from_planned(
                    object_reference(
                        "v1",
                        "Endpoints",
                        namespace,
                        name,
                        e.metadata.uid.as_deref(),
                    ),
                    COMPONENT,
                    "Mirror",
                    planned,
                ));
            }
        }
        let slices_before = slices
            .iter()
            .filter(|s| is_mirrored_slice_of(s, namespace, name))
            .count();
        let writes = SliceWrites {
            creates: &plan.creates,
            updates: &plan.updates,
            deletes: &plan.deletes,
        };
        let result = write_slices(&self.parts.writer, namespace, writes, |w| {
            w.record(&mut self.state().tracker, key);
            self.count_change(w.operation());
        })
        .await
        .map(|_| ())
        .map_err(SyncError::Write);
        let after = (slices_before + plan.creates.len()).saturating_sub(plan.deletes.len());
        let nothing_left = plan.not_mirrored.is_some() && result.is_ok();
        self.record_figures(key, &plan.stats, after, nothing_left);
        m.endpoints_sync_duration
            .observe(start.elapsed().as_secs_f64());
        result
    }
}

impl Controller for MirroringController {
    fn on_service(&self, change: &Change<Service>) {
        if let Some(key) = keys_for_service(change) {
            self.parts.queue.add(key);
        }
    }

    fn on_endpoints(&self, change: &Change<Endpoints>) {
        if let Some(key) = keys_for_endpoints(change) {
            self.parts.queue.add(key);
        }
    }

    fn on_slice(&self, change: &Change<EndpointSlice>) {
        let keys = keys_for_slice(change, &mut self.state().tracker);
        for key in keys {
            self.parts.queue.add_after(key, self.config.batch_period);
        }
    }

    fn start(self: Arc<Self>, _stop: &CancellationToken) -> Vec<JoinHandle<()>> {
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

impl super::Registered for MirroringController {
    type Flags = MirroringFlags;

    fn build(b: &super::Build<'_>, config: Config) -> Self {
        Self::new(b.parts(RateLimit::MIRRORING, Self::QUEUE), config)
    }
}

impl Syncer for MirroringController {
    const QUEUE: &'static str = "endpoint_slice_mirroring";

    async fn sync(&self, key: &str) -> Result<(), SyncError> {
        self.sync_key(key).await
    }
}

/// Found in review: the tracker must be forgotten *before* the deletes of a key that
/// stopped being mirrored (as upstream does), not after, or the recorded deletions are
/// lost. If the key then becomes mirrorable again before the watch delivers the deletes
/// (a selector added and removed again, skip-mirror set and unset), the next sync would
/// read the already-deleted slice from the cache, find it up to date and write
/// nothing, and the delete event would arrive for an untracked slice and queue
/// nothing: the Endpoints would stay unmirrored until some unrelated change.
#[cfg(test)]
mod remirror_tests {
    use http::{Request, Response};
    use kube::client::Body;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::core::fixtures::{as_stored, endpoints, svc};
    use crate::shell::apply::Writer;
    use crate::shell::cache::{Cache, Store};
    use crate::shell::events::EventRecorder;
    use crate::shell::metrics::Metrics;
    use crate::shell::queue::RateLimit;

    /// A client whose DELETEs succeed and every other request fails.
    fn deleting_client() -> kube::Client {
        let svc = tower::service_fn(|req: Request<Body>| async move {
            let (code, body) = if req.method() == http::Method::DELETE {
                (
                    200,
                    r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":200}"#,
                )
            } else {
                (
                    500,
                    r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"offline","reason":"InternalError","code":500}"#,
                )
            };
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(body.as_bytes().to_vec()))
                    .unwrap(),
            )
        });
        kube::Client::new(svc, "default")
    }

    #[tokio::test]
    async fn rule_5_1_a_quick_unmirror_remirror_is_not_lost() {
        let client = deleting_client();
        let metrics = Metrics::new();
        let stop = CancellationToken::new();
        let (events, _task) =
            EventRecorder::start(client.clone(), "test".into(), metrics.clone(), stop.clone());
        let cache = Arc::new(Cache::default());
        let queue = Arc::new(WorkQueue::new(RateLimit::MIRRORING, stop.clone()));
        let c = MirroringController::new(
            Parts {
                cache: cache.clone(),
                queue: queue.clone(),
                writer: Writer::new(client, metrics.clone()),
                events,
                metrics,
            },
            Config {
                workers: 1,
                max_endpoints_per_subset: 1000,
                batch_period: Duration::ZERO,
            },
        );
        let key = "default/e";
        let ep = endpoints("e")
            .subset(&["10.0.0.1"], &[], &[("http", 80)])
            .build();
        let selectorless = svc("e").no_selector().build();
        cache.endpoints.write().upsert(Arc::new(ep.clone()));
        cache
            .services
            .write()
            .upsert(Arc::new(selectorless.clone()));

        // The mirrored slice we created earlier, in the cache and tracked.
        let plan = core_mirroring::reconcile(&core_mirroring::Inputs {
            namespace: "default",
            name: "e",
            endpoints: Some(&ep),
            service: Some(&selectorless),
            existing: &[],
            max_endpoints_per_subset: 1000,
        });
        assert_eq!(plan.creates.len(), 1, "one mirrored slice");
        let stored = Arc::new(as_stored(plan.creates[0].clone(), "e-abcde"));
        cache.slices.write().upsert(stored.clone());
        c.state().tracker.record_written(key, &stored);
        assert!(c.sync_key(key).await.is_ok(), "in sync: nothing to do");

        // The Service gets a selector: the mirrored slice is deleted.
        cache.services.write().upsert(Arc::new(svc("e").build()));
        assert!(c.sync_key(key).await.is_ok());
        assert_eq!(
            c.parts.metrics.api_writes("delete", "endpointslices"),
            1,
            "the mirrored slice was deleted"
        );

        // The selector is removed again before the slice's delete event arrived.
        cache.services.write().upsert(Arc::new(selectorless));
        let resync = c.sync_key(key).await;

        // Now the watch delivers the delete.
        let gone = cache
            .slices
            .write()
            .remove("default", "e-abcde")
            .expect("cached");
        c.on_slice(&Change::Deleted(gone));

        let will_recreate = resync.is_err() || !queue.is_idle();
        assert!(
            will_recreate,
            "the re-mirror sync ({resync:?}) acted on a slice it had itself deleted, and the \
             delete event queued nothing: Endpoints default/e is left without a mirrored slice"
        );
    }
}
