//! The seam where topology hints (ES-2.11, TH-3) plug into the
//! EndpointSlice reconciler.
//!
//! The reconciler hands each address type's slices — those to create, to
//! update and those left unchanged — to a [`HintsPolicy`] after placement and
//! before finalising. [`NoTopology`] implements the "hints off" branch of
//! ES-2.11: strip hints everywhere and rewrite unchanged slices that still carry
//! some. The topology-aware policy (annotation `Auto`, trafficDistribution) is
//! `crate::core::topology::TopologyPolicy`, which implements the same trait.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::core::event::PlannedEvent;
use crate::core::slice_endpoints::SliceEndpoints;

/// The slices of one address type after placement.
#[derive(Debug, Default)]
pub struct PassSlices<'e> {
    pub address_type: String,
    pub creates: Vec<EndpointSlice>,
    pub updates: Vec<EndpointSlice>,
    /// Existing slices neither updated nor deleted (borrowed from the cache;
    /// clone one into `updates` to change it).
    pub unchanged: Vec<&'e EndpointSlice>,
}

/// Assigns or removes hints on a pass's slices, moving unchanged slices into
/// `updates` when their hints must change, and reports events.
pub trait HintsPolicy {
    fn apply(
        &mut self,
        service: &Service,
        pass: &mut PassSlices<'_>,
        events: &mut Vec<PlannedEvent>,
    );
}

/// No topology awareness: every hint is removed (ES-2.11 step 2, the branch
/// taken when neither the annotation nor a valid trafficDistribution is set).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTopology;

impl HintsPolicy for NoTopology {
    fn apply(
        &mut self,
        _service: &Service,
        pass: &mut PassSlices<'_>,
        _events: &mut Vec<PlannedEvent>,
    ) {
        remove_hints(pass);
    }
}

/// Strips hints from creates and updates, and moves every unchanged slice
/// that has a hinted endpoint into updates with its hints removed.
pub fn remove_hints(pass: &mut PassSlices<'_>) {
    for slice in pass.creates.iter_mut().chain(pass.updates.iter_mut()) {
        for endpoint in slice.endpoints_mut() {
            endpoint.hints = None;
        }
    }
    pass.unchanged.retain(|slice| {
        if slice.endpoints().iter().all(|e| e.hints.is_none()) {
            return true;
        }
        let mut copy = (*slice).clone();
        for endpoint in copy.endpoints_mut() {
            endpoint.hints = None;
        }
        pass.updates.push(copy);
        false
    });
}
