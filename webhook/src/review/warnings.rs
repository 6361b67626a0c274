//! Warnings for hand-picked values in a range's dynamic band (beyond upstream).
//!
//! KEP-3070/KEP-3668 split every range into a low static band, meant for values people
//! choose by hand, and a high dynamic band that automatic allocation searches first.
//! A hand-picked value in the dynamic band works today but may be taken by an automatic
//! pick before the next Service asking for it is created (e.g. when a cluster is rebuilt
//! from manifests), so the client is told which band to pick from instead. Ranges too
//! small to have a static band get no warning: there is nothing better to suggest.

use std::net::IpAddr;

use svcplane_allocator::range::IpFamily;
use svcplane_allocator::{Allocators, PortAllocator};

/// Warning for a hand-picked `spec.clusterIPs[index]` in the dynamic band of a range
/// containing it; `None` when it is in a static band, outside every range, or the
/// range has no static band.
pub fn cluster_ip_band_warning(
    allocators: &Allocators,
    index: usize,
    ip: IpAddr,
) -> Option<String> {
    let family = allocators.family(IpFamily::of(&ip))?;
    // With overlapping ServiceCIDRs an address may sit in the static band of a small
    // range and the dynamic band of a larger one; the larger one's automatic picks can
    // still reach it, so any range that puts it in its dynamic band warrants a warning.
    let range = family
        .ranges()
        .iter()
        .find(|r| r.band_offset() > 0 && r.in_upper_band(ip))?;
    let first = range.ip_at(0);
    let last = range.ip_at(range.band_offset() - 1);
    Some(format!(
        "spec.clusterIPs[{index}]: {ip} is in the dynamic band of {} and may collide with automatic allocation; pick from the static band {first}-{last}",
        range.cidr()
    ))
}

/// Warning for a hand-picked NodePort (`field` is its path, e.g. `spec.ports[0].nodePort`
/// or `spec.healthCheckNodePort`) in the dynamic band of the NodePort range.
pub fn node_port_band_warning(ports: &PortAllocator, field: &str, port: i32) -> Option<String> {
    let offset = ports.band_offset();
    if offset == 0 || !ports.in_upper_band(port) {
        return None;
    }
    let range = ports.range();
    let base = u64::from(range.base());
    let last_static = base + offset - 1;
    Some(format!(
        "{field}: {port} is in the dynamic band of {range} and may collide with automatic allocation; pick from the static band {base}-{last_static}"
    ))
}
