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

use std::fmt;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use svcplane_webhook::metrics::WebhookMetrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChangedPerSyncLabels {
    pub topology: &'static str,
    pub traffic_distribution: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TrafficDistributionLabels {
    pub traffic_distribution: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub name: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub verb: &'static str,
    pub resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteErrorLabels {
    pub verb: &'static str,
    pub resource: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    pub commit: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn per_sync_buckets() -> Histogram {
    // Upstream: exponential buckets 2, 4, ..., 32768.
    Histogram::new(exponential_buckets(2.0, 2.0, 15))
}

fn default_buckets() -> Histogram {
    // Prometheus' DefBuckets, which upstream uses for endpointslices_changed_per_sync.
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

/// client-go's workqueue buckets: 10 ns to 1000 s, ×10 each.
fn workqueue_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1e-8, 10.0, 12))
}

fn duration_buckets() -> Histogram {
    // 1 ms to ~16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// The EndpointSlice controller's upstream metrics (ES-2.13).
#[derive(Debug, Clone)]
pub struct EndpointSliceMetrics {
    pub endpoints_added_per_sync: Histogram,
    pub endpoints_removed_per_sync: Histogram,
    pub endpoints_desired: Gauge,
    pub num_endpoint_slices: Gauge,
    pub desired_endpoint_slices: Gauge,
    pub changes: Family<OperationLabels, Counter>,
    pub endpointslices_changed_per_sync: HistogramFamily<ChangedPerSyncLabels>,
    pub syncs: Family<ResultLabels, Counter>,
    pub services_count_by_traffic_distribution: Family<TrafficDistributionLabels, Gauge>,
}

/// The mirroring controller's upstream metrics (MR-5.4).
#[derive(Debug, Clone)]
pub struct MirroringMetrics {
    pub endpoints_added_per_sync: Histogram,
    pub endpoints_updated_per_sync: Histogram,
    pub endpoints_removed_per_sync: Histogram,
    pub addresses_skipped_per_sync: Histogram,
    pub endpoints_sync_duration: Histogram,
    pub endpoints_desired: Gauge,
    pub num_endpoint_slices: Gauge,
    pub desired_endpoint_slices: Gauge,
    pub changes: Family<OperationLabels, Counter>,
}

/// client-go's workqueue metrics, labelled by queue name.
#[derive(Debug, Clone)]
pub struct QueueMetrics {
    pub depth: Family<QueueLabels, Gauge>,
    pub adds: Family<QueueLabels, Counter>,
    pub retries: Family<QueueLabels, Counter>,
    pub work_duration: HistogramFamily<QueueLabels>,
    pub queue_duration: HistogramFamily<QueueLabels>,
    pub unfinished_work: Family<QueueLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub longest_running: Family<QueueLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

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
        let es = EndpointSliceMetrics {
            endpoints_added_per_sync: per_sync_buckets(),
            endpoints_removed_per_sync: per_sync_buckets(),
            endpoints_desired: Gauge::default(),
            num_endpoint_slices: Gauge::default(),
            desired_endpoint_slices: Gauge::default(),
            changes: Family::default(),
            endpointslices_changed_per_sync: Family::new_with_constructor(default_buckets),
            syncs: Family::default(),
            services_count_by_traffic_distribution: Family::default(),
        };
        let p = "endpoint_slice_controller_";
        r.register(
            format!("{p}endpoints_added_per_sync"),
            "Number of endpoints added on each Service sync",
            es.endpoints_added_per_sync.clone(),
        );
        r.register(
            format!("{p}endpoints_removed_per_sync"),
            "Number of endpoints removed on each Service sync",
            es.endpoints_removed_per_sync.clone(),
        );
        r.register(
            format!("{p}endpoints_desired"),
            "Number of endpoints desired",
            es.endpoints_desired.clone(),
        );
        r.register(
            format!("{p}num_endpoint_slices"),
            "Number of EndpointSlices",
            es.num_endpoint_slices.clone(),
        );
        r.register(
            format!("{p}desired_endpoint_slices"),
            "Number of EndpointSlices that would exist with perfect endpoint allocation",
            es.desired_endpoint_slices.clone(),
        );
        r.register(
            format!("{p}changes"),
            "Number of EndpointSlice changes",
            es.changes.clone(),
        );
        r.register(
            format!("{p}endpointslices_changed_per_sync"),
            "Number of EndpointSlices changed on each Service sync",
            es.endpointslices_changed_per_sync.clone(),
        );
        r.register(
            format!("{p}syncs"),
            "Number of EndpointSlice syncs",
            es.syncs.clone(),
        );
        r.register(
            format!("{p}services_count_by_traffic_distribution"),
            "Number of Services using a given trafficDistribution preference",
            es.services_count_by_traffic_distribution.clone(),
        );

        let m = MirroringMetrics {
            endpoints_added_per_sync: per_sync_buckets(),
            endpoints_updated_per_sync: per_sync_buckets(),
            endpoints_removed_per_sync: per_sync_buckets(),
            addresses_skipped_per_sync: per_sync_buckets(),
            endpoints_sync_duration: duration_buckets(),
            endpoints_desired: Gauge::default(),
            num_endpoint_slices: Gauge::default(),
            desired_endpoint_slices: Gauge::default(),
            changes: Family::default(),
        };
        let p = "endpoint_slice_mirroring_controller_";
        for (name, help, h) in [
            (
                "endpoints_added_per_sync",
                "Number of endpoints added on each Endpoints sync",
                &m.endpoints_added_per_sync,
            ),
            (
                "endpoints_updated_per_sync",
                "Number of endpoints updated on each Endpoints sync",
                &m.endpoints_updated_per_sync,
            ),
            (
                "endpoints_removed_per_sync",
                "Number of endpoints removed on each Endpoints sync",
                &m.endpoints_removed_per_sync,
            ),
            (
                "addresses_skipped_per_sync",
                "Number of addresses skipped on each Endpoints sync (invalid or over the maximum)",
                &m.addresses_skipped_per_sync,
            ),
            (
                "endpoints_sync_duration",
                "Duration of an Endpoints sync in seconds",
                &m.endpoints_sync_duration,
            ),
        ] {
            r.register(format!("{p}{name}"), help, h.clone());
        }
        for (name, help, g) in [
            (
                "endpoints_desired",
                "Number of endpoints desired",
                &m.endpoints_desired,
            ),
            (
                "num_endpoint_slices",
                "Number of mirrored EndpointSlices",
                &m.num_endpoint_slices,
            ),
            (
                "desired_endpoint_slices",
                "Number of mirrored EndpointSlices that would exist with perfect allocation",
                &m.desired_endpoint_slices,
            ),
        ] {
            r.register(format!("{p}{name}"), help, g.clone());
        }
        r.register(
            format!("{p}changes"),
            "Number of mirrored EndpointSlice changes",
            m.changes.clone(),
        );

        let q = QueueMetrics {
            depth: Family::default(),
            adds: Family::default(),
            retries: Family::default(),
            work_duration: Family::new_with_constructor(workqueue_buckets),
            queue_duration: Family::new_with_constructor(workqueue_buckets),
            unfinished_work: Family::default(),
            longest_running: Family::default(),
        };
        r.register(
            "workqueue_depth",
            "Current depth of the work queue",
            q.depth.clone(),
        );
        r.register(
            "workqueue_adds",
            "Adds handled by the work queue",
            q.adds.clone(),
        );
        r.register(
            "workqueue_retries",
            "Retries handled by the work queue",
            q.retries.clone(),
        );
        r.register(
            "workqueue_work_duration_seconds",
            "How long processing one item takes",
            q.work_duration.clone(),
        );
        r.register(
            "workqueue_queue_duration_seconds",
            "How long an item stays in the queue before it is handed to a worker",
            q.queue_duration.clone(),
        );
        r.register(
            "workqueue_unfinished_work_seconds",
            "Seconds of work in progress not yet observed by work_duration (large values mean stuck workers)",
            q.unfinished_work.clone(),
        );
        r.register(
            "workqueue_longest_running_processor_seconds",
            "How long the longest-running worker has been processing its item",
            q.longest_running.clone(),
        );

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
