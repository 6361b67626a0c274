//! The webhook's own metrics, registered into the process registry by whoever serves
//! `/metrics` (`svcplane run` and `svcplane webhook` both do).
//!
//! They say what the API server's `apiserver_admission_webhook_*` metrics cannot: how
//! claims come and go, so a range that stops shrinking back after deletes is visible
//! before it is exhausted.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Label of [`WebhookMetrics::claims_released`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReleaseLabels {
    /// Why: `service_gone` (its Service was deleted or dropped the value),
    /// `unused` (no Service took it within the grace period), `malformed`.
    pub reason: &'static str,
}

/// Counters of one webhook; cheap to clone (the counters are shared).
#[derive(Clone, Debug, Default)]
pub struct WebhookMetrics {
    /// Claims deleted by the repair loop, by reason.
    pub claims_released: Family<ReleaseLabels, Counter>,
    /// Claims of deleted Services taken over by a request that wanted their value.
    pub claims_taken_over: Counter,
    /// Repair passes that ran (skipped ones are not counted).
    pub repair_passes: Counter,
}

impl WebhookMetrics {
    /// Register every metric under `registry` (names are prefixed `webhook_`).
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("webhook");
        r.register(
            "claims_released",
            "AllocationClaims deleted by the claim repair loop, by reason",
            self.claims_released.clone(),
        );
        r.register(
            "claims_taken_over",
            "AllocationClaims of deleted Services replaced by a request that wanted their value",
            self.claims_taken_over.clone(),
        );
        r.register(
            "claim_repair_passes",
            "Claim repair passes run (a pass is skipped while the Service or claim watch is out of sync)",
            self.repair_passes.clone(),
        );
    }

    /// Count one released claim.
    pub fn released(&self, reason: &'static str) {
        self.claims_released
            .get_or_create(&ReleaseLabels { reason })
            .inc();
    }
}
