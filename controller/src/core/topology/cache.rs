//! The state the topology cache keeps across syncs (TH-3.3.5
//! step 5, TH-3.3.6): per Service, the hints allocated per zone for each
//! address type, and whether hints are populated.
//!
//! It is plain data owned by the caller (the runtime keeps one per
//! controller; `plan` starts from an empty one): no globals, no locks.

use std::collections::{BTreeMap, BTreeSet};

use super::OVERLOAD_THRESHOLD;
use super::nodes::ZoneRatios;

/// Hints allocated per zone for one Service and address type. A zone may be
/// present with zero hints (it gave all its endpoints away), as upstream.
pub type ZoneCounts = BTreeMap<String, usize>;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopologyCache {
    /// Service key (`namespace/name`) → address type → hints per zone.
    endpoints_by_service: BTreeMap<String, BTreeMap<String, ZoneCounts>>,
    /// Services whose hints were populated by the last successful
    /// allocation of any of their address types.
    hints_populated: BTreeSet<String>,
}

impl TopologyCache {
    pub fn has_populated_hints(&self, service_key: &str) -> bool {
        self.hints_populated.contains(service_key)
    }

    /// Records a successful allocation; marks the Service populated.
    pub fn set_hints(&mut self, service_key: &str, address_type: &str, hints: ZoneCounts) {
        self.endpoints_by_service
            .entry(service_key.to_owned())
            .or_default()
            .insert(address_type.to_owned(), hints);
        self.hints_populated.insert(service_key.to_owned());
    }

    /// Forgets one address type's allocation. As upstream, the Service is no
    /// longer "populated" afterwards, whatever its other address types hold.
    pub fn remove_hints(&mut self, service_key: &str, address_type: &str) {
        if let Some(by_type) = self.endpoints_by_service.get_mut(service_key) {
            by_type.remove(address_type);
            if by_type.is_empty() {
                self.endpoints_by_service.remove(service_key);
            }
        }
        self.hints_populated.remove(service_key);
    }

    /// Drops everything about a Service (to call when it is deleted; upstream
    /// keeps the entry, which only costs a re-queue of a missing Service).
    pub fn forget_service(&mut self, service_key: &str) {
        self.endpoints_by_service.remove(service_key);
        self.hints_populated.remove(service_key);
    }

    /// The stored allocation of one Service and address type.
    pub fn allocated_hints(&self, service_key: &str, address_type: &str) -> Option<&ZoneCounts> {
        self.endpoints_by_service
            .get(service_key)
            .and_then(|m| m.get(address_type))
    }

    /// Number of Services with a stored allocation.
    pub fn len(&self) -> usize {
        self.endpoints_by_service.len()
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints_by_service.is_empty()
    }

    /// The overload re-check after a Node change (TH-3.3.6): the keys, in
    /// order, of every Service with an address type whose stored allocation
    /// is overloaded under `ratios`.
    pub fn overloaded_services(&self, ratios: Option<&ZoneRatios>) -> Vec<String> {
        self.endpoints_by_service
            .iter()
            .filter(|(_, by_type)| by_type.values().any(|h| service_overloaded(h, ratios)))
            .map(|(key, _)| key.clone())
            .collect()
    }
}

/// Whether an allocation `hints` is overloaded under `ratios` (TH-3.3.6):
/// never when it is empty; always when there are no ratios; otherwise when a
/// zone with a ratio has no entry or fewer than `ceil(T·ratio/1.2)` hints,
/// `T` being the total of `hints`.
pub fn service_overloaded(hints: &ZoneCounts, ratios: Option<&ZoneRatios>) -> bool {
    if hints.is_empty() {
        return false;
    }
    let Some(ratios) = ratios.filter(|r| !r.is_empty()) else {
        return true;
    };
    let total = hints.values().sum::<usize>() as f64;
    ratios.iter().any(|(zone, ratio)| match hints.get(zone) {
        None => true,
        // Same float expression as upstream, evaluated in the same order.
        Some(&n) => (n as f64) < (total * ratio * (1.0 / (1.0 + OVERLOAD_THRESHOLD))).ceil(),
    })
}
