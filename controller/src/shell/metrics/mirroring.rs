//! The EndpointSlice mirroring controller's own metrics, kube-controller-manager's
//! names, types, labels and buckets (MR-5.4).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::labels::{OperationLabels, duration_buckets, per_sync_buckets};

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

impl MirroringMetrics {
    /// Creates the metrics and registers them in `r`.
    pub fn register(r: &mut Registry) -> Self {
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
        m
    }
}
