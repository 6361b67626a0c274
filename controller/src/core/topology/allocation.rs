//! The topology-cache algorithm for one address type of one Service
//! (TH-3.3.2 to TH-3.3.5): allocations per zone, keeping valid
//! existing hints, same-zone hints, redistribution, and the safeguards that
//! switch hints off.

use std::collections::BTreeMap;

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointHints, EndpointSlice, ForZone};

use super::OVERLOAD_THRESHOLD;
use super::cache::{TopologyCache, ZoneCounts};
use super::nodes::ZoneRatios;
use super::{
    MSG_ENABLED, MSG_INSUFFICIENT_ENDPOINTS, MSG_INSUFFICIENT_NODE_INFO, MSG_MIN_ALLOCATION,
    MSG_NO_ALLOCATED_HINTS, MSG_NO_ZONE, MSG_ONE_ZONE, REASON_DISABLED, REASON_ENABLED,
    with_address_type,
};
use crate::core::endpointslice::hints::{PassSlices, remove_hints};
use crate::core::event::PlannedEvent;
use crate::core::slice_endpoints::SliceEndpoints;

/// How many endpoints a zone should get (TH-3.3.2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Allocation {
    pub minimum: usize,
    pub maximum: usize,
    pub desired: f64,
}

/// Why hints could not be allocated; each is a `TopologyAwareHintsDisabled`
/// Warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    InsufficientNodeInfo,
    /// Unreachable through [`ZoneRatios`] (which needs two zones); kept for
    /// parity with upstream's messages.
    NodesReadyInOneZoneOnly,
    InsufficientEndpoints {
        endpoints: usize,
        zones: usize,
    },
    MinAllocationExceedsThreshold {
        endpoints: usize,
        zones: usize,
    },
    NoZoneSpecified,
    NoAllocatedHints,
}

impl Failure {
    /// The event message without the address-type suffix.
    pub fn message(&self) -> String {
        match self {
            Failure::InsufficientNodeInfo => MSG_INSUFFICIENT_NODE_INFO.to_owned(),
            Failure::NodesReadyInOneZoneOnly => MSG_ONE_ZONE.to_owned(),
            Failure::InsufficientEndpoints { endpoints, zones } => {
                format!("{MSG_INSUFFICIENT_ENDPOINTS} ({endpoints} endpoints, {zones} zones)")
            }
            Failure::MinAllocationExceedsThreshold { endpoints, zones } => {
                format!("{MSG_MIN_ALLOCATION} ({endpoints} endpoints, {zones} zones)")
            }
            Failure::NoZoneSpecified => MSG_NO_ZONE.to_owned(),
            Failure::NoAllocatedHints => MSG_NO_ALLOCATED_HINTS.to_owned(),
        }
    }
}

/// A zone's share of `endpoints` ready endpoints (TH-3.3.2): the desired
/// (fractional) number, `ratio · endpoints`, and the minimum it must get to
/// stay under the overload threshold.
pub fn zone_share(ratio: f64, endpoints: usize) -> (f64, usize) {
    let desired = ratio * endpoints as f64;
    // Upstream's exact float expression (not `desired / 1.2`).
    let minimum = (desired * (1.0 / (1.0 + OVERLOAD_THRESHOLD))).ceil() as usize;
    (desired, minimum)
}

/// The allocation per zone for `endpoints` ready endpoints (TH-3.3.2), or the
/// safeguard that trips.
pub fn allocations(
    ratios: Option<&ZoneRatios>,
    endpoints: usize,
) -> Result<BTreeMap<String, Allocation>, Failure> {
    let Some(ratios) = ratios else {
        return Err(Failure::InsufficientNodeInfo);
    };
    let zones = ratios.len();
    if zones < 2 {
        return Err(Failure::NodesReadyInOneZoneOnly);
    }
    if zones > endpoints {
        return Err(Failure::InsufficientEndpoints { endpoints, zones });
    }
    let mut min_total = 0usize;
    let mut out = BTreeMap::new();
    for (zone, ratio) in ratios.iter() {
        let (desired, minimum) = zone_share(ratio, endpoints);
        min_total += minimum;
        if min_total > endpoints {
            return Err(Failure::MinAllocationExceedsThreshold { endpoints, zones });
        }
        out.insert(
            zone.to_owned(),
            Allocation {
                minimum,
                maximum: 0,
                desired: desired.max(minimum as f64),
            },
        );
    }
    for a in out.values_mut() {
        a.maximum = a.minimum + endpoints - min_total;
    }
    Ok(out)
}

/// `conditions.ready == true`.
pub fn endpoint_ready(endpoint: &Endpoint) -> bool {
    endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(true)
}

fn ready_count(slice: &EndpointSlice) -> usize {
    slice
        .endpoints()
        .iter()
        .filter(|e| endpoint_ready(e))
        .count()
}

/// The hints per zone an unchanged slice contributes, or `None` when it must
/// be rewritten (TH-3.3.3): a ready endpoint without zone hints, a hint for a
/// zone without allocation, or a zone pushed over its maximum.
pub fn hints_by_zone(
    slice: &EndpointSlice,
    allocated: &ZoneCounts,
    allocations: &BTreeMap<String, Allocation>,
) -> Option<ZoneCounts> {
    let mut by_zone = ZoneCounts::new();
    for endpoint in slice.endpoints().iter().filter(|e| endpoint_ready(e)) {
        let zones = endpoint
            .hints
            .as_ref()
            .and_then(|h| h.for_zones.as_ref())
            .filter(|z| !z.is_empty())?;
        for zone in zones {
            if !allocations.contains_key(&zone.name) {
                return None;
            }
            *by_zone.entry(zone.name.clone()).or_default() += 1;
        }
    }
    for (zone, n) in &by_zone {
        let already = allocated.get(zone).copied().unwrap_or(0);
        match allocations.get(zone) {
            Some(a) if n + already <= a.maximum => {}
            _ => return None,
        }
    }
    Some(by_zone)
}

/// The zone with the largest value, ties to the first in name order; `None`
/// when no value is positive (upstream's `getMost`).
fn most(values: &BTreeMap<String, f64>) -> Option<(&str, f64)> {
    let mut best: Option<(&str, f64)> = None;
    for (zone, &v) in values {
        if v > best.map_or(0.0, |(_, b)| b) {
            best = Some((zone, v));
        }
    }
    best
}

/// How many endpoints each zone gives and receives (TH-3.3.5 steps 1–2).
pub fn giving_and_receiving(
    allocations: &BTreeMap<String, Allocation>,
    allocated: &ZoneCounts,
) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let mut excess: BTreeMap<String, f64> = BTreeMap::new();
    let mut need: BTreeMap<String, f64> = BTreeMap::new();
    for (zone, a) in allocations {
        let have = allocated.get(zone).copied().unwrap_or(0) as f64;
        if have > a.desired {
            excess.insert(zone.clone(), have - a.desired);
        } else if have < a.desired {
            need.insert(zone.clone(), a.desired - have);
        }
    }
    let mut giving: BTreeMap<String, usize> = BTreeMap::new();
    let mut receiving: BTreeMap<String, usize> = BTreeMap::new();
    while let (Some((g, to_give)), Some((r, to_receive))) = (most(&excess), most(&need)) {
        if (to_give < 1.0 && to_receive < 1.0) || to_give < 0.5 || to_receive < 0.5 {
            break;
        }
        let (g, r) = (g.to_owned(), r.to_owned());
        *giving.entry(g.clone()).or_default() += 1;
        *receiving.entry(r.clone()).or_default() += 1;
        if let Some(v) = excess.get_mut(&g) {
            *v -= 1.0;
        }
        if let Some(v) = need.get_mut(&r) {
            *v -= 1.0;
        }
    }
    (giving, receiving)
}

fn zone_hint(zone: &str) -> Option<EndpointHints> {
    Some(EndpointHints {
        for_zones: Some(vec![ForZone {
            name: zone.to_owned(),
        }]),
        for_nodes: None,
    })
}

/// Re-hints endpoints of giving zones to receiving zones (TH-3.3.5 step 3),
/// walking creates then updates. Returns the change per zone. The receiving
/// zone is the first in name order that still needs endpoints (upstream
/// picks one in map order).
fn redistribute(
    pass: &mut PassSlices<'_>,
    mut giving: BTreeMap<String, usize>,
    mut receiving: BTreeMap<String, usize>,
) -> BTreeMap<String, i64> {
    let mut diff: BTreeMap<String, i64> = BTreeMap::new();
    for slice in pass.creates.iter_mut().chain(pass.updates.iter_mut()) {
        for endpoint in slice.endpoints_mut() {
            if !endpoint_ready(endpoint) {
                endpoint.hints = None;
                continue;
            }
            if giving.is_empty() || receiving.is_empty() {
                return diff;
            }
            let Some(zone) = endpoint.zone.as_deref().filter(|z| !z.is_empty()) else {
                continue;
            };
            let Some(to_give) = giving.get_mut(zone) else {
                continue;
            };
            let Some((to_zone, to_receive)) = receiving.iter_mut().next() else {
                continue;
            };
            let to_zone = to_zone.clone();
            endpoint.hints = zone_hint(&to_zone);
            *to_give -= 1;
            if *to_give == 0 {
                giving.remove(zone);
            }
            *to_receive -= 1;
            if *to_receive == 0 {
                receiving.remove(&to_zone);
            }
            *diff.entry(to_zone).or_default() += 1;
            *diff.entry(zone.to_owned()).or_default() -= 1;
        }
    }
    diff
}

/// Runs the topology-cache algorithm over one pass (TH-3.3.2 to TH-3.3.5): assigns
/// zone hints to creates and updates, keeps valid hints on unchanged slices,
/// records the allocation in `cache` and reports events. On a safeguard,
/// hints are removed everywhere and the cache entry is cleared. Returns the
/// hints allocated per zone, or the safeguard that tripped.
pub fn add_hints<'e>(
    cache: &mut TopologyCache,
    ratios: Option<&ZoneRatios>,
    service_key: &str,
    pass: &mut PassSlices<'e>,
    events: &mut Vec<PlannedEvent>,
) -> Result<ZoneCounts, Failure> {
    let first_moved = pass.updates.len();
    let mut moved: Vec<&'e EndpointSlice> = Vec::new();
    let outcome = allocate(ratios, pass, &mut moved);
    match &outcome {
        Ok(allocated) => {
            let was_populated = cache.has_populated_hints(service_key);
            cache.set_hints(service_key, &pass.address_type, allocated.clone());
            if !was_populated {
                events.push(PlannedEvent::normal(
                    REASON_ENABLED,
                    with_address_type(MSG_ENABLED, &pass.address_type),
                ));
            }
        }
        Err(failure) => {
            events.push(PlannedEvent::warning(
                REASON_DISABLED,
                with_address_type(&failure.message(), &pass.address_type),
            ));
            cache.remove_hints(service_key, &pass.address_type);
            remove_hints(pass);
        }
    }
    restore_noop_updates(pass, first_moved, &moved);
    outcome
}

fn allocate<'e>(
    ratios: Option<&ZoneRatios>,
    pass: &mut PassSlices<'e>,
    moved: &mut Vec<&'e EndpointSlice>,
) -> Result<ZoneCounts, Failure> {
    let total: usize = pass
        .creates
        .iter()
        .chain(pass.updates.iter())
        .chain(pass.unchanged.iter().copied())
        .map(ready_count)
        .sum();
    let allocations = allocations(ratios, total)?;

    // TH-3.3.3: unchanged slices keep valid hints and seed the counts.
    let mut allocated = ZoneCounts::new();
    for slice in std::mem::take(&mut pass.unchanged) {
        match hints_by_zone(slice, &allocated, &allocations) {
            Some(by_zone) => {
                for (zone, n) in by_zone {
                    *allocated.entry(zone).or_default() += n;
                }
                pass.unchanged.push(slice);
            }
            None => {
                pass.updates.push(slice.clone());
                moved.push(slice);
            }
        }
    }

    // TH-3.3.4: same-zone hints on everything being written.
    for slice in pass.creates.iter_mut().chain(pass.updates.iter_mut()) {
        for endpoint in slice.endpoints_mut() {
            if !endpoint_ready(endpoint) {
                endpoint.hints = None;
                continue;
            }
            let Some(zone) = endpoint.zone.as_deref().filter(|z| !z.is_empty()) else {
                return Err(Failure::NoZoneSpecified);
            };
            *allocated.entry(zone.to_owned()).or_default() += 1;
            endpoint.hints = zone_hint(zone);
        }
    }

    // TH-3.3.5: move the excess of over-served zones to under-served ones.
    let (giving, receiving) = giving_and_receiving(&allocations, &allocated);
    for (zone, change) in redistribute(pass, giving, receiving) {
        let count = allocated.entry(zone).or_default();
        *count = count.saturating_add_signed(change as isize);
    }
    if allocated.is_empty() {
        return Err(Failure::NoAllocatedHints);
    }
    Ok(allocated)
}

/// Upstream rewrites every unchanged slice it had to re-check, even when its
/// hints come out as they were (a PUT the API server treats as a no-op).
/// Those slices go back to unchanged here, so recomputing hints to the same
/// values never writes.
fn restore_noop_updates<'e>(
    pass: &mut PassSlices<'e>,
    first_moved: usize,
    moved: &[&'e EndpointSlice],
) {
    let mut restored = Vec::new();
    for (i, original) in moved.iter().enumerate().rev() {
        let at = first_moved + i;
        if pass.updates.get(at) == Some(*original) {
            pass.updates.remove(at);
            restored.push(*original);
        }
    }
    restored.reverse();
    pass.unchanged.extend(restored);
}
