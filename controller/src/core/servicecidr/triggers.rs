//! Which ServiceCIDRs a change queues (pure).
//!
//! As upstream: a ServiceCIDR added queues itself and every ServiceCIDR overlapping it
//! (one of them may now be deletable); updated or deleted, itself. An IPAddress of the
//! ClusterIP allocator added or deleted queues the ServiceCIDRs covering it.

use std::sync::Arc;

use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};

use super::{allocator_address, covering, overlapping};
use crate::core::change::Change;

/// Keys (names) a ServiceCIDR change queues.
pub fn keys_for_service_cidr(
    change: &Change<ServiceCIDR>,
    all: &[Arc<ServiceCIDR>],
) -> Vec<String> {
    let own = change.latest().metadata.name.clone().unwrap_or_default();
    let mut keys = vec![own];
    if let Change::Added(obj) = change {
        keys.extend(overlapping(all, obj).into_iter().map(str::to_owned));
    }
    keys.sort();
    keys.dedup();
    keys
}

/// Keys (names) an IPAddress change queues: adds and deletes of the ClusterIP
/// allocator's objects, for the ServiceCIDRs covering the address.
pub fn keys_for_ip_address(change: &Change<IPAddress>, all: &[Arc<ServiceCIDR>]) -> Vec<String> {
    let ip = match change {
        Change::Added(ip) | Change::Deleted(ip) => ip,
        Change::Updated { .. } => return Vec::new(),
    };
    let Some(address) = allocator_address(ip) else {
        return Vec::new();
    };
    let mut keys: Vec<String> = covering(all, address)
        .into_iter()
        .map(str::to_owned)
        .collect();
    keys.sort();
    keys.dedup();
    keys
}
