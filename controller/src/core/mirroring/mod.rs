//! The EndpointSliceMirroring controller (MR-5): EndpointSlices
//! for Services without a selector, mirroring their hand-written Endpoints.
//!
//! Layout: `desired` repacks the Endpoints and builds one endpoint group per
//! (subset, address family); `reconcile` decides what is mirrored and plans
//! one slice per group; `validate` names the fields of bad input in an event.

mod desired;
mod reconcile;
pub mod triggers;
pub mod validate;

#[cfg(test)]
mod tests;

pub use reconcile::{Inputs, is_mirrored_slice_of, reconcile, should_mirror};

use crate::core::endpointslice::{SliceRef, SliceWrite};
use crate::core::event::PlannedEvent;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// Value of `endpointslice.kubernetes.io/managed-by` on mirrored slices.
pub const CONTROLLER_NAME: &str = "endpointslicemirroring-controller.k8s.io";
/// Default and upper bound of `--mirroring-max-endpoints-per-subset`.
pub const DEFAULT_MAX_ENDPOINTS_PER_SUBSET: usize = 1000;

/// Event reasons (component `endpoint-slice-mirroring-controller`, object =
/// the Endpoints).
pub const REASON_INVALID_IP: &str = "InvalidIPAddress";
pub const REASON_TOO_MANY: &str = "TooManyAddressesToMirror";
/// svcplane addition: names each malformed field of the Endpoints object.
pub const REASON_INVALID_FIELDS: &str = "InvalidEndpointsFields";

/// Why nothing is mirrored for a key; every reason deletes the key's
/// mirrored slices (MR-5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotMirrored {
    ServiceMissing,
    ServiceHasSelector,
    EndpointsMissing,
    SkipMirrorLabel,
    LeaderAnnotation,
}

/// Figures for the upstream mirroring metrics (MR-5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MirrorStats {
    pub endpoints_added: usize,
    pub endpoints_updated: usize,
    pub endpoints_removed: usize,
    /// Addresses not mirrored: over the per-subset maximum, or invalid.
    pub addresses_skipped: usize,
    pub invalid_addresses: usize,
    /// Endpoints in the desired groups.
    pub endpoints_desired: usize,
    /// Sum over the desired groups of ceil(endpoints / max per subset): the
    /// slices perfect packing would need (no minimum of one).
    pub slices_desired: usize,
}

/// Everything one sync of one key wants done.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MirrorPlan {
    /// Set when nothing is mirrored (the deletes below remove what was).
    pub not_mirrored: Option<NotMirrored>,
    /// POSTs with `generateName`.
    pub creates: Vec<EndpointSlice>,
    /// PUTs of freshly built slices that keep an existing name.
    pub updates: Vec<EndpointSlice>,
    pub deletes: Vec<SliceRef>,
    /// Events on the Endpoints object.
    pub events: Vec<PlannedEvent>,
    pub stats: MirrorStats,
}

impl MirrorPlan {
    /// All writes in issue order: creates, updates, deletes.
    pub fn writes(&self) -> impl Iterator<Item = SliceWrite> + '_ {
        self.creates
            .iter()
            .cloned()
            .map(SliceWrite::Create)
            .chain(self.updates.iter().cloned().map(SliceWrite::Update))
            .chain(self.deletes.iter().cloned().map(SliceWrite::Delete))
    }

    pub fn write_count(&self) -> usize {
        self.creates.len() + self.updates.len() + self.deletes.len()
    }

    pub fn is_noop(&self) -> bool {
        self.write_count() == 0
    }
}
