//! The EndpointSlice reconciler (ES-2): from a Service, its Pods,
//! the Nodes and the slices that exist, to the exact creates, updates and
//! deletes upstream's endpointslice-controller would issue — and none when the
//! slices already match.
//!
//! Layout: `desired` builds the wanted endpoints per address type and port
//! group, `packing` places them into slices with minimal churn, `metadata`
//! owns labels/owner references/the placeholder, `hints` is the seam for
//! topology hints, `finalize` recycles deletes into updates and orders the
//! writes, `reconcile` ties it together.

pub mod desired;
mod finalize;
pub mod hints;
pub mod metadata;
mod packing;
mod reconcile;
pub mod tracker;
pub mod triggers;

#[cfg(test)]
mod tests;

pub use reconcile::{
    Inputs, REASON_FAILED_TO_UPDATE, REASON_INVALID_SELECTOR, invalid_selector_event,
    is_managed_slice_of, reconcile, reconcile_with_hints,
};

use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::core::event::PlannedEvent;

/// Name of this controller in `endpointslice.kubernetes.io/managed-by`.
pub const CONTROLLER_NAME: &str = "endpointslice-controller.k8s.io";
/// Default and bounds of `--max-endpoints-per-slice`.
pub const DEFAULT_MAX_ENDPOINTS_PER_SLICE: usize = 100;
pub const MAX_ENDPOINTS_PER_SLICE_LIMIT: usize = 1000;

/// Why a Service was left alone (ES-2.2 step 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// `spec.type: ExternalName`: existing slices are left as they are.
    ExternalName,
    /// No `spec.selector`: the Service's endpoints are managed by someone else.
    NoSelector,
}

/// The result of reconciling one Service.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Skipped(SkipReason),
    Planned(SlicePlan),
}

/// A reference to a slice that will be deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceRef {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub address_type: String,
}

/// One API write, in the order it must be issued.
#[derive(Debug, Clone, PartialEq)]
pub enum SliceWrite {
    /// POST with `metadata.generateName`.
    Create(EndpointSlice),
    /// PUT of the full object. Carries a resourceVersion when updated in
    /// place; a recycled slice (a create given a deleted slice's name) has none.
    Update(EndpointSlice),
    Delete(SliceRef),
}

/// The writes for one address type (ES-2.7 finalize): creates, then updates,
/// then deletes. The shell stops a pass at its first failed write.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AddressTypePass {
    pub address_type: String,
    pub creates: Vec<EndpointSlice>,
    pub updates: Vec<EndpointSlice>,
    pub deletes: Vec<SliceRef>,
    pub stats: PassStats,
}

/// Figures for the upstream-compatible metrics (ES-2.13), per address-type pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PassStats {
    /// Endpoints not found in any existing slice.
    pub endpoints_added: usize,
    /// Endpoints dropped from existing slices.
    pub endpoints_removed: usize,
    /// Desired endpoints over all port groups.
    pub endpoints_desired: usize,
    /// Slices after the pass (existing + creates - deletes; placeholder counts 1).
    pub slices_after: usize,
    /// Sum over port groups of ceil(endpoints / max), at least 1.
    pub slices_desired: usize,
}

/// Everything one sync of one Service wants done.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SlicePlan {
    /// One pass per address type the Service supports, in the Service's
    /// family order.
    pub passes: Vec<AddressTypePass>,
    /// Slices of address types the Service no longer supports; deleted after
    /// every pass.
    pub unsupported_deletes: Vec<SliceRef>,
    /// Events to record on the Service.
    pub events: Vec<PlannedEvent>,
    /// Set when the sync must be reported as failed (and retried) even though
    /// the writes above should still be made, e.g. a Pod whose Node is missing.
    pub error: Option<String>,
}

impl SlicePlan {
    /// All writes in issue order.
    pub fn writes(&self) -> impl Iterator<Item = SliceWrite> + '_ {
        self.passes
            .iter()
            .flat_map(|p| {
                p.creates
                    .iter()
                    .cloned()
                    .map(SliceWrite::Create)
                    .chain(p.updates.iter().cloned().map(SliceWrite::Update))
                    .chain(p.deletes.iter().cloned().map(SliceWrite::Delete))
            })
            .chain(
                self.unsupported_deletes
                    .iter()
                    .cloned()
                    .map(SliceWrite::Delete),
            )
    }

    /// Number of API writes the plan makes.
    pub fn write_count(&self) -> usize {
        self.passes
            .iter()
            .map(|p| p.creates.len() + p.updates.len() + p.deletes.len())
            .sum::<usize>()
            + self.unsupported_deletes.len()
    }

    pub fn is_noop(&self) -> bool {
        self.write_count() == 0
    }
}
