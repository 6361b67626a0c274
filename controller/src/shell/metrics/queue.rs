//! client-go's workqueue metrics, which every controller's queue reports under its
//! own `name` label.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::labels::{HistogramFamily, QueueLabels, workqueue_buckets};

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

impl QueueMetrics {
    /// Creates the metrics and registers them in `r`.
    pub fn register(r: &mut Registry) -> Self {
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
        q
    }
}
