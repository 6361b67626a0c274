//! The EndpointSlice controller's own metrics, kube-controller-manager's names,
//! types, labels and buckets (ES-2.13): the controller holds this type and records
//! into it; the process registry exports it.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::labels::{
    ChangedPerSyncLabels, HistogramFamily, OperationLabels, ResultLabels,
    TrafficDistributionLabels, default_buckets, per_sync_buckets,
};

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

impl EndpointSliceMetrics {
    /// Creates the metrics and registers them in `r`.
    pub fn register(r: &mut Registry) -> Self {
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
        for (name, help, h) in [
            (
                "endpoints_added_per_sync",
                "Number of endpoints added on each Service sync",
                &es.endpoints_added_per_sync,
            ),
            (
                "endpoints_removed_per_sync",
                "Number of endpoints removed on each Service sync",
                &es.endpoints_removed_per_sync,
            ),
        ] {
            r.register(format!("{p}{name}"), help, h.clone());
        }
        for (name, help, g) in [
            (
                "endpoints_desired",
                "Number of endpoints desired",
                &es.endpoints_desired,
            ),
            (
                "num_endpoint_slices",
                "Number of EndpointSlices",
                &es.num_endpoint_slices,
            ),
            (
                "desired_endpoint_slices",
                "Number of EndpointSlices that would exist with perfect endpoint allocation",
                &es.desired_endpoint_slices,
            ),
        ] {
            r.register(format!("{p}{name}"), help, g.clone());
        }
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
        es
    }
}
