//! Bad input in a hand-written Endpoints object (issue 4): mirrored as
//! upstream does — an invalid IP is skipped, a port without a number is
//! dropped from the slice's ports (its addresses are kept), a subset without
//! addresses yields nothing — and reported, naming each field, in one
//! Warning event so the owner can fix the object. Upstream only counts
//! invalid IPs; the field names are a svcplane addition.

use k8s_openapi::api::core::v1::Endpoints;

use super::REASON_INVALID_FIELDS;
use crate::core::event::PlannedEvent;
use crate::core::ip;

/// Most problems listed in one event message; the rest are counted.
pub const MAX_LISTED: usize = 10;

/// Every malformed field, as `path: problem`, in object order.
pub fn problems(endpoints: &Endpoints) -> Vec<String> {
    let mut out = Vec::new();
    for (i, s) in endpoints.subsets.iter().flatten().enumerate() {
        let ready = s.addresses.as_deref().unwrap_or_default();
        let not_ready = s.not_ready_addresses.as_deref().unwrap_or_default();
        if ready.is_empty() && not_ready.is_empty() {
            out.push(format!("subsets[{i}]: subset has no addresses"));
        }
        for (field, list) in [("addresses", ready), ("notReadyAddresses", not_ready)] {
            for (j, a) in list.iter().enumerate() {
                if ip::parse_sloppy(&a.ip).is_none() {
                    out.push(format!(
                        "subsets[{i}].{field}[{j}].ip: {:?} is not a valid IP address",
                        a.ip
                    ));
                }
            }
        }
        for (k, p) in s.ports.iter().flatten().enumerate() {
            if p.port <= 0 {
                out.push(format!(
                    "subsets[{i}].ports[{k}].port: a port number is required (got {})",
                    p.port
                ));
            }
        }
    }
    out
}

/// The Warning event for `problems`, if any.
pub fn event(endpoints: &Endpoints) -> Option<PlannedEvent> {
    let all = problems(endpoints);
    if all.is_empty() {
        return None;
    }
    let mut message = format!(
        "Skipped invalid fields when mirroring to EndpointSlices: {}",
        all.iter()
            .take(MAX_LISTED)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("; ")
    );
    if all.len() > MAX_LISTED {
        message.push_str(&format!(" (and {} more)", all.len() - MAX_LISTED));
    }
    Some(PlannedEvent::warning(REASON_INVALID_FIELDS, message))
}
