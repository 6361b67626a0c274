//! The EndpointSliceMirroring controller's shell (MR-5): EndpointSlices
//! for the hand-written Endpoints of selectorless Services, with the same stale-cache
//! guard as the EndpointSlice controller (ES-2.10) over the slices it mirrors.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::time::Instant;
use tracing::debug;

use super::{Parts, SyncError, Syncer, lock, split_key};
use crate::core::endpointslice::SliceWrite;
use crate::core::endpointslice::tracker::SliceTracker;
use crate::core::endpointslice::triggers;
use crate::core::mirroring::{
    self as core_mirroring, CONTROLLER_NAME, MirrorStats, is_mirrored_slice_of, should_mirror,
};
use crate::shell::apply::WriteErrorKind;
use crate::shell::cache::Store;
use crate::shell::events::{EventRecord, object_reference};
use crate::shell::metrics::OperationLabels;
use crate::shell::queue::WorkQueue;
use crate::shell::watch::Change;

/// `reportingController` of this controller's events.
pub const COMPONENT: &str = "endpoint-slice-mirroring-controller";
const RESOURCE: &str = "endpointslices";

/// Settings of the mirroring controller.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// `--mirroring-max-endpoints-per-subset`.
    pub max_endpoints_per_subset: usize,
    /// `--mirroring-endpointslice-updates-batch-period` (slice events only).
    pub batch_period: Duration,
}

#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    desired: i64,
    slices: i64,
    desired_slices: i64,
}

#[derive(Debug, Default)]
struct State {
    tracker: SliceTracker,
    figures: HashMap<String, Figures>,
}

fn key_of(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default()
    )
}

fn has_selector(s: &Service) -> bool {
    s.spec
        .as_ref()
        .and_then(|sp| sp.selector.as_ref())
        .is_some()
}

/// Keys a Service change queues (MR-5.1): a selectorless Service added or deleted, or
/// a selector appearing or disappearing.
pub fn keys_for_service(change: &Change<Service>) -> Option<String> {
    let queue = match change {
        Change::Added(s) | Change::Deleted(s) => !has_selector(s),
        Change::Updated { old, new } => has_selector(old) != has_selector(new),
    };
    queue.then(|| key_of(&change.latest().metadata))
}

/// Keys an Endpoints change queues (MR-5.1): a mirrorable object added or deleted, an
/// update where the old or the new version is mirrorable.
pub fn keys_for_endpoints(change: &Change<Endpoints>) -> Option<String> {
    let mirrorable = |e: &Endpoints| should_mirror(e).is_ok();
    let queue = match change {
        Change::Added(e) | Change::Deleted(e) => mirrorable(e),
        Change::Updated { old, new } => mirrorable(old) || mirrorable(new),
    };
    queue.then(|| key_of(&change.latest().metadata))
}

/// Keys a slice change queues: the tracker rules of ES-2.1, applied to mirrored slices.
pub fn keys_for_slice(change: &Change<EndpointSlice>, tracker: &mut SliceTracker) -> Vec<String> {
    match change {
        Change::Added(s) => triggers::services_for_slice_add(s, tracker, CONTROLLER_NAME),
        Change::Updated { old, new } => {
            triggers::services_for_slice_update(old, new, tracker, CONTROLLER_NAME)
        }
        Change::Deleted(s) => triggers::services_for_slice_delete(s, tracker, CONTROLLER_NAME),
    }
}

/// The controller.
#[derive(Debug)]
pub struct MirroringController {
    parts: Parts,
    config: Config,
    state: Mutex<State>,
}

impl MirroringController {
    pub fn new(parts: Parts, config: Config) -> Self {
        Self {
            parts,
            config,
            state: Mutex::new(State::default()),
        }
    }

    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.parts.queue
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    pub fn on_service(&self, change: &Change<Service>) {
        if let Some(key) = keys_for_service(change) {
            self.parts.queue.add(key);
        }
    }

    pub fn on_endpoints(&self, change: &Change<Endpoints>) {
        if let Some(key) = keys_for_endpoints(change) {
            self.parts.queue.add(key);
        }
    }

    pub fn on_slice(&self, change: &Change<EndpointSlice>) {
        let keys = keys_for_slice(change, &mut self.state().tracker);
        for key in keys {
            self.parts.queue.add_after(key, self.config.batch_period);
        }
    }

    fn record_figures(&self, key: &str, stats: &MirrorStats, slices: usize, forget: bool) {
        let to_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let new = Figures {
            desired: to_i64(stats.endpoints_desired),
            slices: to_i64(slices),
            desired_slices: to_i64(stats.slices_desired),
        };
        let old = {
            let mut st = self.state();
            if forget {
                st.figures.remove(key)
            } else {
                st.figures.insert(key.to_owned(), new)
            }
        }
        .unwrap_or_default();
        let new = if forget { Figures::default() } else { new };
        let m = self.parts.metrics.mirroring();
        m.endpoints_desired.inc_by(new.desired - old.desired);
        m.num_endpoint_slices.inc_by(new.slices - old.slices);
        m.desired_endpoint_slices
            .inc_by(new.desired_slices - old.desired_slices);
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
        let mut result = Ok(());
        for write in plan.writes() {
            let outcome = match write {
                SliceWrite::Create(slice) => {
                    match self.parts.writer.create(RESOURCE, namespace, &slice).await {
                        Ok(stored) => {
                            self.state().tracker.record_written(key, &stored);
                            self.count_change("create");
                            Ok(())
                        }
                        Err(e) if e.kind == WriteErrorKind::NamespaceTerminating => {
                            debug!(key, "namespace terminating; creates skipped");
                            break;
                        }
                        Err(e) => Err(e),
                    }
                }
                SliceWrite::Update(slice) => self
                    .parts
                    .writer
                    .replace(RESOURCE, namespace, &slice)
                    .await
                    .map(|stored| {
                        self.state().tracker.record_written(key, &stored);
                        self.count_change("update");
                    }),
                SliceWrite::Delete(r) => self
                    .parts
                    .writer
                    .delete::<EndpointSlice>(RESOURCE, &r.namespace, &r.name, r.uid.as_deref())
                    .await
                    .map(|()| {
                        if let Some(uid) = &r.uid {
                            self.state().tracker.record_deleted(key, uid);
                        }
                        self.count_change("delete");
                    }),
            };
            if let Err(e) = outcome {
                result = Err(SyncError::Write(e));
                break;
            }
        }
        let after = (slices_before + plan.creates.len()).saturating_sub(plan.deletes.len());
        let nothing_left = plan.not_mirrored.is_some() && result.is_ok();
        self.record_figures(key, &plan.stats, after, nothing_left);
        m.endpoints_sync_duration
            .observe(start.elapsed().as_secs_f64());
        result
    }
}

impl Syncer for MirroringController {
    const QUEUE: &'static str = "endpoint_slice_mirroring";

    async fn sync(&self, key: &str) -> Result<(), SyncError> {
        self.sync_key(key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::{as_stored, endpoints, svc};
    use crate::core::keys::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME, LABEL_SKIP_MIRROR};
    use std::collections::BTreeMap;

    #[test]
    fn rule_5_1_service_events_queue_selectorless_services_and_selector_flips() {
        let with = Arc::new(svc("a").build());
        let without = Arc::new(svc("a").no_selector().build());
        assert_eq!(
            keys_for_service(&Change::Added(without.clone())).as_deref(),
            Some("default/a")
        );
        assert_eq!(keys_for_service(&Change::Added(with.clone())), None);
        assert_eq!(
            keys_for_service(&Change::Deleted(without.clone())).as_deref(),
            Some("default/a")
        );
        assert_eq!(
            keys_for_service(&Change::Updated {
                old: with.clone(),
                new: without.clone()
            })
            .as_deref(),
            Some("default/a")
        );
        assert_eq!(
            keys_for_service(&Change::Updated {
                old: with.clone(),
                new: with
            }),
            None
        );
    }

    #[test]
    fn rule_5_1_endpoints_events_queue_mirrorable_objects() {
        let plain = Arc::new(endpoints("e").build());
        let mut skip = endpoints("e").build();
        skip.metadata.labels = Some(BTreeMap::from([(
            LABEL_SKIP_MIRROR.to_owned(),
            "true".to_owned(),
        )]));
        let skip = Arc::new(skip);
        assert_eq!(
            keys_for_endpoints(&Change::Added(plain.clone())).as_deref(),
            Some("default/e")
        );
        assert_eq!(keys_for_endpoints(&Change::Added(skip.clone())), None);
        // Becoming skip-mirror must still queue, so the mirrored slices go away.
        assert_eq!(
            keys_for_endpoints(&Change::Updated {
                old: plain,
                new: skip.clone()
            })
            .as_deref(),
            Some("default/e")
        );
        assert_eq!(keys_for_endpoints(&Change::Deleted(skip)), None);
    }

    fn mirrored(svc_name: &str) -> Arc<EndpointSlice> {
        let mut s = EndpointSlice::default();
        s.metadata.namespace = Some("default".into());
        s.metadata.labels = Some(BTreeMap::from([
            (LABEL_SERVICE_NAME.to_owned(), svc_name.to_owned()),
            (LABEL_MANAGED_BY.to_owned(), CONTROLLER_NAME.to_owned()),
        ]));
        Arc::new(as_stored(s, "m1"))
    }

    #[test]
    fn rule_5_1_mirrored_slice_events_follow_the_tracker() {
        let mut t = SliceTracker::default();
        let s = mirrored("e");
        assert_eq!(
            keys_for_slice(&Change::Added(s.clone()), &mut t),
            ["default/e"]
        );
        t.record_written("default/e", &s);
        assert!(keys_for_slice(&Change::Added(s.clone()), &mut t).is_empty());
        assert!(
            keys_for_slice(
                &Change::Updated {
                    old: s.clone(),
                    new: s.clone()
                },
                &mut t
            )
            .is_empty()
        );
        // Our own delete is expected once; a foreign delete re-queues.
        t.record_deleted("default/e", "uid-slice-m1");
        assert!(keys_for_slice(&Change::Deleted(s.clone()), &mut t).is_empty());
        t.record_written("default/e", &s);
        assert_eq!(keys_for_slice(&Change::Deleted(s), &mut t), ["default/e"]);
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
