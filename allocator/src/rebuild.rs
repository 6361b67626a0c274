//! Rebuild allocation state from the Services that exist (and, optionally, IPAddress
//! objects), as upstream's repair loops do at start-up (AL-12).
//!
//! Services are visited in (namespace, name) order; the first Service to claim a value
//! owns it, later ones get a `...AlreadyAllocated` finding; values outside every range
//! get an `...OutOfRange` finding. The result tells which values each Service owns, so
//! callers can re-run allocation for one Service without tripping over its own claims.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::IPAddress;

use crate::error::{IpAllocError, PortAllocError};
use crate::range::{IpFamily, parse_ip_sloppy};
use crate::repair::{
    Finding, cluster_ip_already_allocated, cluster_ip_not_valid, cluster_ip_out_of_range,
    port_already_allocated, port_out_of_range, repair_node_ports_of,
};
use crate::service::{Allocators, Claim};
use crate::view::{CLUSTER_IP_NONE, SvcView};

/// Outcome of [`rebuild`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// Values each Service owns, keyed by (namespace, name).
    pub owned: BTreeMap<(String, String), Vec<Claim>>,
    /// Duplicated, out-of-range and invalid values.
    pub findings: Vec<Finding>,
}

/// Services sorted by (namespace, name).
pub fn sorted_services(services: &[Service]) -> Vec<&Service> {
    let mut v: Vec<&Service> = services.iter().collect();
    let key = |s: &Service| {
        (
            s.metadata.namespace.clone().unwrap_or_default(),
            s.metadata.name.clone().unwrap_or_default(),
        )
    };
    v.sort_by_key(|s| key(s));
    v
}

/// Claim every value held by `services` in `allocators`.
pub fn rebuild(allocators: &mut Allocators, services: &[Service]) -> Rebuilt {
    let mut out = Rebuilt::default();
    for svc in sorted_services(services) {
        let v = SvcView::from_service(svc);
        let owned = claim_service(allocators, &v, &mut out.findings);
        out.owned
            .insert((v.namespace.clone(), v.name.clone()), owned);
    }
    out
}

/// Also claim addresses held by IPAddress objects that no Service claimed (so a
/// following dynamic allocation never returns them). Returns the addresses added.
pub fn rebuild_ip_addresses(
    allocators: &mut Allocators,
    ip_addresses: &[IPAddress],
) -> Vec<IpAddr> {
    let mut added = Vec::new();
    for a in ip_addresses {
        let Some(ip) = a.metadata.name.as_deref().and_then(parse_ip_sloppy) else {
            continue;
        };
        if let Some(f) = allocators.family_mut(IpFamily::of(&ip))
            && f.restore(ip).is_ok()
        {
            added.push(ip);
        }
    }
    added
}

fn claim_service(al: &mut Allocators, v: &SvcView, findings: &mut Vec<Finding>) -> Vec<Claim> {
    let mut owned = Vec::new();
    let has_ip =
        !v.is_external_name() && !v.cluster_ip.is_empty() && v.cluster_ip != CLUSTER_IP_NONE;
    if has_ip {
        let ips: Vec<&String> = if v.cluster_ips.is_empty() {
            vec![&v.cluster_ip]
        } else {
            v.cluster_ips.iter().collect()
        };
        for s in ips {
            let Some(ip) = parse_ip_sloppy(s) else {
                findings.push(cluster_ip_not_valid(v));
                continue;
            };
            let res = match al.family_mut(IpFamily::of(&ip)) {
                Some(f) => f.restore(ip),
                None => Err(IpAllocError::MismatchedNetwork),
            };
            match res {
                Ok(()) => owned.push(Claim::Ip(ip)),
                Err(IpAllocError::Allocated) => findings.push(cluster_ip_already_allocated(v, ip)),
                Err(_) => findings.push(cluster_ip_out_of_range(v, ip)),
            }
        }
    }
    let range = al.node_ports().range();
    for port in repair_node_ports_of(v) {
        match al.node_ports_mut().allocate(port) {
            Ok(()) => owned.push(Claim::NodePort(port)),
            Err(PortAllocError::NotInRange { .. }) => {
                findings.push(port_out_of_range(v, port, &range))
            }
            // Includes a Service repeating a nodePort for the same protocol, as upstream.
            Err(_) => findings.push(port_already_allocated(v, port)),
        }
    }
    owned
}
