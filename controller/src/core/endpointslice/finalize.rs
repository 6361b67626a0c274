//! The write phase of one address type (ES-2.7 "Finalize"):
//! recycle deletes into updates, stamp the trigger time, drop creates for a
//! Service being deleted, and order the writes creates → updates → deletes.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;

use super::metadata::owned_by;
use super::{AddressTypePass, PassStats, SliceRef};
use crate::core::keys::ANNOTATION_TRIGGER_TIME;
use crate::core::trigger_time::format_rfc3339_nano;

/// What placement and hints decided for one address type.
#[derive(Debug)]
pub(super) struct PassDecision<'e> {
    pub address_type: String,
    pub creates: Vec<EndpointSlice>,
    pub updates: Vec<EndpointSlice>,
    pub deletes: Vec<&'e EndpointSlice>,
    pub stats: PassStats,
}

/// Reference to an existing slice for a delete.
pub(super) fn slice_ref(slice: &EndpointSlice) -> SliceRef {
    SliceRef {
        namespace: slice.metadata.namespace.clone().unwrap_or_default(),
        name: slice.metadata.name.clone().unwrap_or_default(),
        uid: slice.metadata.uid.clone(),
        address_type: slice.address_type.clone(),
    }
}

fn stamp_trigger_time(slice: &mut EndpointSlice, trigger_time: Option<Timestamp>) {
    let annotations = slice
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    match trigger_time {
        Some(t) => {
            annotations.insert(ANNOTATION_TRIGGER_TIME.to_owned(), format_rfc3339_nano(t));
        }
        None => {
            annotations.remove(ANNOTATION_TRIGGER_TIME);
        }
    }
    if annotations.is_empty() {
        slice.metadata.annotations = None;
    }
}

/// Turns a pass decision into the writes to issue.
pub(super) fn finalize(
    service: &Service,
    decision: PassDecision<'_>,
    trigger_time: Option<Timestamp>,
) -> AddressTypePass {
    let PassDecision {
        address_type,
        mut creates,
        mut updates,
        deletes,
        stats,
    } = decision;

    // Recycling: a slice about to be deleted lends its name to the last
    // pending create, which becomes an unconditional update. Only slices
    // owned by this Service (and of the same type) are recycled, so slices of
    // a deleted Service of the same name go to the garbage collector.
    let mut remaining_deletes = Vec::with_capacity(deletes.len());
    for old in deletes {
        let recyclable = old.address_type == address_type && owned_by(old, service);
        match creates.pop() {
            Some(mut fresh) if recyclable => {
                fresh.metadata.name = old.metadata.name.clone();
                updates.push(fresh);
            }
            popped => {
                if let Some(fresh) = popped {
                    creates.push(fresh);
                }
                remaining_deletes.push(slice_ref(old));
            }
        }
    }

    if service.metadata.deletion_timestamp.is_some() {
        creates.clear();
    }
    for slice in creates.iter_mut().chain(updates.iter_mut()) {
        stamp_trigger_time(slice, trigger_time);
    }
    AddressTypePass {
        address_type,
        creates,
        updates,
        deletes: remaining_deletes,
        stats,
    }
}
