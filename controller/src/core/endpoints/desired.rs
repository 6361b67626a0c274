//! Subsets from the Pods a Service selects (EP-4.2 steps 1–5),
//! repacked (step 6).

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointSubset, ObjectReference, Service};

use super::capacity;
use super::repack::{self, Entry, PortKey};
use crate::core::ip::{self, Family};
use crate::core::keys::CLUSTER_IP_NONE;
use crate::core::pod::{self, PodView};

/// The single family an Endpoints object carries (EP-4.2 step 2): the
/// Service's primary family; without `ipFamilies` the ClusterIP's family, or
/// for a headless Service the family of the Pod's `podIP`. `None` means
/// "decide per Pod".
pub fn primary_family(service: &Service) -> Option<Family> {
    let spec = service.spec.as_ref();
    if let Some(first) = spec
        .and_then(|s| s.ip_families.as_ref())
        .and_then(|f| f.first())
    {
        return Some(if first == "IPv6" {
            Family::V6
        } else {
            Family::V4
        });
    }
    let cluster_ip = spec.and_then(|s| s.cluster_ip.as_deref()).unwrap_or("");
    if cluster_ip.is_empty() || cluster_ip == CLUSTER_IP_NONE {
        return None;
    }
    Some(match ip::family_of(cluster_ip) {
        Some(Family::V6) => Family::V6,
        _ => Family::V4,
    })
}

/// The Pod's address for the Service: the first `status.podIPs` entry of the
/// family, canonical. Unparseable IPs are skipped (ES-1.4).
pub fn pod_address<P: PodView>(family: Option<Family>, p: &P) -> Option<String> {
    let family = family.unwrap_or_else(|| match p.pod_ip().and_then(ip::family_of) {
        Some(Family::V6) => Family::V6,
        _ => Family::V4,
    });
    p.pod_ips()
        .filter_map(ip::canonical)
        .find(|(_, f)| *f == family)
        .map(|(s, _)| s)
}

/// The address of an eligible Pod (EP-4.2 step 3). `nodeName` is omitted when
/// empty (svcplane deviation: upstream writes `""`, which the API rejects).
fn address_of<P: PodView>(service: &Service, p: &P, ip: String) -> EndpointAddress {
    let node_name = p.node_name().filter(|n| !n.is_empty()).map(str::to_owned);
    // `PodView` reads an unset namespace or name as "": write "" back as
    // unset, which is what copying the field gave for an unset one. (An
    // explicit "" now also becomes unset; the API server never stores one.)
    let set = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    EndpointAddress {
        ip,
        hostname: pod::published_hostname(p, service).map(str::to_owned),
        node_name,
        target_ref: Some(ObjectReference {
            kind: Some("Pod".to_owned()),
            namespace: set(p.namespace()),
            name: set(p.name()),
            uid: p.uid().map(str::to_owned),
            ..ObjectReference::default()
        }),
    }
}

/// Counts of what went into the subsets, before truncation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DesiredCounts {
    /// Ready address entries (one per Pod and port, as upstream logs them).
    pub ready: usize,
    pub not_ready: usize,
}

/// The canonical (untruncated) subsets for `pods`, which must be the Pods
/// the Service selects.
pub fn desired_subsets<P: PodView>(
    service: &Service,
    pods: &[&P],
) -> (Vec<EndpointSubset>, DesiredCounts) {
    with_entries(service, pods, repack::repack)
}

/// The canonical subsets for `pods` cut to the 1000-address cap (EP-4.3),
/// with the number of addresses before the cut and whether anything was
/// cut. Same result as [`desired_subsets`] followed by
/// [`capacity::truncate`], without sorting or copying the addresses that
/// the cut drops (which, for an over-capacity Service, is most of them).
pub fn capped_subsets<P: PodView>(
    service: &Service,
    pods: &[&P],
) -> (Vec<EndpointSubset>, usize, bool) {
    let mut truncated = false;
    let ((subsets, total), _counts) = with_entries(service, pods, |entries| {
        repack::repack_with(entries, |lens| {
            let keep = capacity::keep_counts(lens);
            truncated = keep.is_some();
            keep
        })
    });
    (subsets, total, truncated)
}

/// Builds the repack entries for `pods` and hands them to `f`.
fn with_entries<P: PodView, R>(
    service: &Service,
    pods: &[&P],
    f: impl FnOnce(&[Entry<'_>]) -> R,
) -> (R, DesiredCounts) {
    let spec = service.spec.as_ref();
    let pnr = spec
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let service_ports = spec.and_then(|s| s.ports.as_deref()).unwrap_or_default();
    let headless = spec.and_then(|s| s.cluster_ip.as_deref()) == Some(CLUSTER_IP_NONE);
    let family = primary_family(service);

    // Owned addresses and ports first; the repack entries borrow them.
    let mut built: Vec<(EndpointAddress, bool, Vec<PortKey<'_>>)> = Vec::with_capacity(pods.len());
    for &p in pods {
        if !pod::is_eligible(p, pnr) {
            continue;
        }
        let Some(ip) = pod_address(family, p) else {
            continue;
        };
        let address = address_of(service, p, ip);
        let ready = pnr || pod::is_ready(p);
        if service_ports.is_empty() {
            if headless {
                built.push((address, ready, Vec::new()));
            }
            continue;
        }
        // Ports as keys borrowing the Service's strings: the same value
        // `PortKey::of` gives for the `EndpointPort` upstream builds, without
        // allocating strings per Pod.
        let ports: Vec<PortKey<'_>> = service_ports
            .iter()
            .filter_map(|sp| {
                pod::find_port(p, sp).map(|n| PortKey {
                    name: sp.name.as_deref().unwrap_or(""),
                    port: n,
                    protocol: pod::service_port_protocol(sp),
                    app_protocol: sp.app_protocol.as_deref(),
                })
            })
            .collect();
        if !ports.is_empty() {
            built.push((address, ready, ports));
        }
    }
    let mut counts = DesiredCounts::default();
    let mut entries: Vec<Entry<'_>> = Vec::with_capacity(built.len());
    for (address, ready, ports) in &built {
        let n = ports.len().max(1);
        if *ready {
            counts.ready += n;
        } else {
            counts.not_ready += n;
        }
        if ports.is_empty() {
            entries.push(Entry {
                address,
                ready: *ready,
                port: PortKey::SENTINEL,
            });
        }
        for port in ports {
            entries.push(Entry {
                address,
                ready: *ready,
                port: *port,
            });
        }
    }
    (f(&entries), counts)
}
