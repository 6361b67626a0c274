//! Prometheus metrics of `svcplane run`, served at `/metrics` in the text format
//! kube-controller-manager serves ([`super::exposition`]).
//!
//! Where kube-controller-manager has a metric, svcplane exposes the same name, type,
//! labels and buckets (ES-2.13, MR-5.4; client-go's `workqueue_*`;
//! `leader_election_master_status`), so dashboards and alerts written for upstream keep
//! working. prometheus-client encodes OpenMetrics, which appends `_total` to every
//! counter; the exposition step takes it off again for upstream's counters registered
//! without it (`endpoint_slice_controller_changes`, ...). svcplane's own figures carry
//! the `svcplane_` prefix. Label values are bounded (verbs, resources, results), never
//! object names.
//!
//! A controller's own metrics are a type of their own in this directory
//! (`endpointslice`, `mirroring`; client-go's queue metrics in `queue`) that creates
//! and registers them; [`Metrics::new`] calls each once, so a follower exports the
//! same families as the leader, at zero (kube-controller-manager registers a
//! controller's metrics when it starts the controller, so only on its leader).

use std::fmt;
use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use svcplane_webhook::metrics::WebhookMetrics;

mod endpointslice;
mod labels;
mod mirroring;
mod queue;

pub use endpointslice::EndpointSliceMetrics;
pub use labels::*;
pub use mirroring::MirroringMetrics;
pub use queue::QueueMetrics;

/// Run before every scrape, to bring values computed from live state up to date.
type ScrapeHook = Box<dyn Fn() + Send + Sync>;

struct Inner {
    registry: Registry,
    before_scrape: std::sync::Mutex<Vec<ScrapeHook>>,
    endpoint_slice: EndpointSliceMetrics,
    mirroring: MirroringMetrics,
    queue: QueueMetrics,
    reconcile_duration: HistogramFamily<ControllerLabels>,
    api_writes: Family<WriteLabels, Counter>,
    api_write_errors: Family<WriteErrorLabels, Counter>,
    cache_objects: Family<ResourceLabels, Gauge>,
    leader: Family<LeaseLabels, Gauge>,
    events_dropped: Counter,
    migrated_first: Family<QueueLabels, Counter>,
    webhook: WebhookMetrics,
}

/// All metrics of one process; cheap to clone.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut r = Registry::default();
        let es = EndpointSliceMetrics::register(&mut r);
        let m = MirroringMetrics::register(&mut r);
        let q = QueueMetrics::register(&mut r);

        let leader: Family<LeaseLabels, Gauge> = Family::default();
        r.register(
            "leader_election_master_status",
            "1 while this process holds the leader Lease, else 0",
            leader.clone(),
        );

        let reconcile_duration: HistogramFamily<ControllerLabels> =
            Family::new_with_constructor(duration_buckets);
        let api_writes: Family<WriteLabels, Counter> = Family::default();
        let api_write_errors: Family<WriteErrorLabels, Counter> = Family::default();
        let cache_objects: Family<ResourceLabels, Gauge> = Family::default();
        let events_dropped = Counter::default();
        let migrated_first: Family<QueueLabels, Counter> = Family::default();
        let webhook = WebhookMetrics::default();
        webhook.register_capacity(&mut r);
        crate::kube_client::client_metrics::register(&mut r);
        let s = r.sub_registry_with_prefix("svcplane");
        webhook.register(s);
        s.register(
            "reconcile_duration_seconds",
            "Time one sync of one key takes, API writes included",
            reconcile_duration.clone(),
        );
        s.register(
            "api_writes",
            "API writes made by the controllers, by verb and resource",
            api_writes.clone(),
        );
        s.register(
            "api_write_errors",
            "API writes that failed, by verb, resource and reason",
            api_write_errors.clone(),
        );
        s.register(
            "cache_objects",
            "Objects held in the watch caches, by resource",
            cache_objects.clone(),
        );
        s.register(
            "events_dropped",
            "Events not recorded because the event queue was full",
            events_dropped.clone(),
        );
        s.register(
            "migrated_services_first",
            "Services `svcplane migrate` had just recreated that a controller queued ahead of every other key, by queue",
            migrated_first.clone(),
        );
        // kubernetes_build_info's shape: a constant 1 labelled with what was built.
        let build_info: Family<BuildLabels, Gauge> = Family::default();
        build_info
            .get_or_create(&BuildLabels {
                version: crate::build_info::VERSION,
                commit: crate::build_info::COMMIT,
            })
            .set(1);
        s.register(
            "build_info",
            "1, labelled with the version and git commit of the running binary",
            build_info,
        );

        Metrics(Arc::new(Inner {
            registry: r,
            before_scrape: std::sync::Mutex::default(),
            endpoint_slice: es,
            mirroring: m,
            queue: q,
            reconcile_duration,
            api_writes,
            api_write_errors,
            cache_objects,
            leader,
            events_dropped,
            migrated_first,
            webhook,
        }))
    }

    pub fn endpoint_slice(&self) -> &EndpointSliceMetrics {
        &self.0.endpoint_slice
    }

    pub fn mirroring(&self) -> &MirroringMetrics {
        &self.0.mirroring
    }

    pub fn queue(&self) -> &QueueMetrics {
        &self.0.queue
    }

    pub fn reconcile_duration(&self, controller: &'static str, seconds: f64) {
        self.0
            .reconcile_duration
            .get_or_create(&ControllerLabels { controller })
            .observe(seconds);
    }

    pub fn api_write(&self, verb: &'static str, resource: &'static str) {
        self.0
            .api_writes
            .get_or_create(&WriteLabels { verb, resource })
            .inc();
    }

    pub fn api_write_error(
        &self,
        verb: &'static str,
        resource: &'static str,
        reason: &'static str,
    ) {
        self.0
            .api_write_errors
            .get_or_create(&WriteErrorLabels {
                verb,
                resource,
                reason,
            })
            .inc();
    }

    /// Writes made so far with `verb` on `resource`.
    pub fn api_writes(&self, verb: &'static str, resource: &'static str) -> u64 {
        self.0
            .api_writes
            .get_or_create(&WriteLabels { verb, resource })
            .get()
    }

    pub fn set_cache_objects(&self, resource: &'static str, n: usize) {
        self.0
            .cache_objects
            .get_or_create(&ResourceLabels { resource })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    pub fn set_leader(&self, lease: &str, leading: bool) {
        self.0
            .leader
            .get_or_create(&LeaseLabels {
                name: lease.to_owned(),
            })
            .set(i64::from(leading));
    }

    /// The admission webhook's counters (registered as `svcplane_webhook_*`).
    pub fn webhook(&self) -> &WebhookMetrics {
        &self.0.webhook
    }

    /// A Service `migrate` just recreated went to the front of `queue`.
    pub fn migrated_first(&self, queue: &'static str) {
        self.0
            .migrated_first
            .get_or_create(&QueueLabels { name: queue })
            .inc();
    }

    pub fn event_dropped(&self) {
        self.0.events_dropped.inc();
    }

    /// Run `hook` before every scrape (gauges computed from live state, such as how
    /// long workers have been busy).
    pub(crate) fn before_scrape(&self, hook: impl Fn() + Send + Sync + 'static) {
        self.0
            .before_scrape
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Box::new(hook));
    }

    /// The OpenMetrics text exposition (`/metrics` serves it rewritten by
    /// [`super::exposition::to_prometheus_text`]).
    pub fn encode(&self) -> String {
        for hook in self
            .0
            .before_scrape
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            hook();
        }
        let mut out = String::new();
        // Writing into a String cannot fail; an error would only come from a
        // metric's own Display, none of which fail.
        let _ = encode(&mut out, &self.0.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_client_go_workqueue_metric_with_client_gos_buckets() {
        let m = Metrics::new();
        let g = crate::shell::controllers::queue_gauges(&m, "endpoint_slice");
        g.queue_duration.observe(0.5);
        let labels = QueueLabels {
            name: "endpoint_slice",
        };
        m.queue().retries.get_or_create(&labels).inc();
        m.queue().work_duration.get_or_create(&labels).observe(0.1);
        let text = m.encode();
        for name in [
            "workqueue_depth",
            "workqueue_adds_total",
            "workqueue_retries_total",
            "workqueue_work_duration_seconds",
            "workqueue_queue_duration_seconds",
            "workqueue_unfinished_work_seconds",
            "workqueue_longest_running_processor_seconds",
        ] {
            assert!(
                text.contains(&format!("# TYPE {}", name.trim_end_matches("_total"))),
                "{name}: {text}"
            );
        }
        // 1e-8 ... 1e3, as client-go's ExponentialBuckets(10e-9, 10, 12).
        assert!(text.contains(r#"workqueue_queue_duration_seconds_bucket{le="1e-8",name="endpoint_slice"} 0"#)
            || text.contains(r#"workqueue_queue_duration_seconds_bucket{le="0.00000001",name="endpoint_slice"} 0"#),
            "{text}");
        assert!(
            text.contains(
                r#"workqueue_queue_duration_seconds_bucket{le="1000.0",name="endpoint_slice"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn a_scrape_brings_the_in_progress_gauges_up_to_date() {
        let m = Metrics::new();
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let h = hits.clone();
        m.before_scrape(move || {
            h.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let _ = m.encode();
        let _ = m.encode();
        assert_eq!(hits.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    #[test]
    fn upstream_names_are_exposed() {
        let m = Metrics::new();
        m.endpoint_slice()
            .changes
            .get_or_create(&OperationLabels {
                operation: "create",
            })
            .inc();
        m.endpoint_slice()
            .syncs
            .get_or_create(&ResultLabels { result: "success" })
            .inc();
        m.endpoint_slice().endpoints_added_per_sync.observe(3.0);
        m.api_write("create", "endpointslices");
        m.set_leader("svcplane", true);
        m.webhook().released("service_gone");
        let text = m.encode();
        for needle in [
            "endpoint_slice_controller_changes_total{operation=\"create\"} 1",
            "endpoint_slice_controller_syncs_total{result=\"success\"} 1",
            "endpoint_slice_controller_endpoints_added_per_sync_bucket{le=\"4.0\"} 1",
            "endpoint_slice_controller_endpoints_added_per_sync_bucket{le=\"32768.0\"} 1",
            "endpoint_slice_mirroring_controller_endpoints_sync_duration_count 0",
            "svcplane_api_writes_total{verb=\"create\",resource=\"endpointslices\"} 1",
            "leader_election_master_status{name=\"svcplane\"} 1",
            "svcplane_webhook_claims_released_total{reason=\"service_gone\"} 1",
            "svcplane_webhook_claim_repair_passes_total 0",
            &format!(
                "svcplane_build_info{{version=\"{}\",commit=\"{}\"}} 1",
                crate::build_info::VERSION,
                crate::build_info::COMMIT
            ),
            "# EOF",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        assert_eq!(m.api_writes("create", "endpointslices"), 1);
    }
}

#[cfg(test)]
mod upstream_names {
    use super::{Metrics, OperationLabels};

    /// ES-2.13, MR-5.4: the families kube-controller-manager's two slice controllers
    /// export are exported under its names, whichever type registers them (a labelled
    /// family shows once it has a sample, as in client_golang).
    #[test]
    fn every_upstream_slice_controller_family_is_exported() {
        let m = Metrics::new();
        let create = OperationLabels {
            operation: "create",
        };
        m.endpoint_slice().changes.get_or_create(&create).inc();
        m.mirroring().changes.get_or_create(&create).inc();
        // As `/metrics` serves it (upstream's counters without `_total`).
        let text = crate::shell::exposition::to_prometheus_text(&m.encode());
        let es = "endpoint_slice_controller_";
        let mr = "endpoint_slice_mirroring_controller_";
        let both = [
            "endpoints_added_per_sync",
            "endpoints_removed_per_sync",
            "endpoints_desired",
            "num_endpoint_slices",
            "desired_endpoint_slices",
            "changes",
        ];
        let mirroring_only = [
            "endpoints_updated_per_sync",
            "addresses_skipped_per_sync",
            "endpoints_sync_duration",
        ];
        let want = both
            .iter()
            .flat_map(|f| [format!("{es}{f}"), format!("{mr}{f}")])
            .chain(mirroring_only.iter().map(|f| format!("{mr}{f}")));
        for name in want {
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "{name} is not exported"
            );
        }
    }
}
