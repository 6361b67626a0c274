//! The legacy Endpoints controller (EP-4): from a Service, its
//! Pods and the Endpoints object that exists, to the one create, update or
//! delete upstream's endpoint-controller would issue — and none when the
//! object already matches.
//!
//! Layout: `desired` builds the subsets from Pods, `repack` is upstream's
//! canonical form (shared with mirroring), `capacity` the 1000-address cap,
//! `reconcile` the write decision and object, `triggers` the keys to sync
//! and the stale-cache guard.

pub mod capacity;
pub mod desired;
mod reconcile;
pub mod repack;
pub mod triggers;

#[cfg(test)]
mod tests;

pub use capacity::MAX_CAPACITY;
pub use reconcile::{Inputs, endpoints_labels, reconcile};

use k8s_openapi::api::core::v1::Endpoints;

use crate::core::event::PlannedEvent;

/// Value of `endpoints.kubernetes.io/managed-by` (1.33+).
pub const CONTROLLER_NAME: &str = "endpoint-controller";
/// Value of `endpoints.kubernetes.io/over-capacity` when truncated.
pub const OVER_CAPACITY_TRUNCATED: &str = "truncated";

/// Why a Service was left alone (EP-4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// `spec.type: ExternalName`.
    ExternalName,
    /// No `spec.selector`: the Endpoints object is managed by hand.
    NoSelector,
    /// `spec.selector` can match no Pod (reported by the EndpointSlice controller's
    /// `InvalidSelector` event); the object is left as it is.
    InvalidSelector,
}

/// A reference to an Endpoints object that will be deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointsRef {
    pub namespace: String,
    pub name: String,
    /// The UID of the object in the cache, if one was there.
    pub uid: Option<String>,
}

/// One API write.
#[derive(Debug, Clone, PartialEq)]
pub enum EndpointsWrite {
    /// POST of the complete object.
    Create(Endpoints),
    /// PUT of the complete object, carrying the cached resourceVersion.
    Update(Endpoints),
    /// DELETE; NotFound counts as success.
    Delete(EndpointsRef),
}

/// What one sync of one key wants done.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EndpointsPlan {
    /// At most one write, in issue order.
    pub writes: Vec<EndpointsWrite>,
    /// Events to record on the Endpoints object. The core plans none: the
    /// controller's only events report failed writes (EP-4.6), which the shell
    /// raises.
    pub events: Vec<PlannedEvent>,
    /// Addresses (ready + not ready) the Pods offer, before the cap.
    pub desired_addresses: usize,
    /// Whether the written (or kept) object is truncated to 1000.
    pub truncated: bool,
}

impl EndpointsPlan {
    pub fn is_noop(&self) -> bool {
        self.writes.is_empty()
    }
}

/// The result of syncing one key.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Skipped(SkipReason),
    Planned(EndpointsPlan),
}
