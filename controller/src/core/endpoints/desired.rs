//! Subsets from the Pods a Service selects (EP-4.2 steps 1–5),
//! repacked (step 6).

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointSubset, ObjectReference, Service, ServicePort,
};

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
    let family = family.unwrap_or_else(|| pod_family(p));
    p.pod_ips()
        .filter_map(ip::canonical)
        .find(|(_, f)| *f == family)
        .map(|(s, _)| s)
}

/// The family a headless Service without `ipFamilies` takes from a Pod: its
/// `podIP`'s (IPv4 when unset or unparseable).
pub fn pod_family<P: PodView>(p: &P) -> Family {
    match p.pod_ip().and_then(ip::family_of) {
        Some(Family::V6) => Family::V6,
        _ => Family::V4,
    }
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

/// What the Endpoints controller makes of one selected Pod (EP-4.2
/// steps 1–5): the rules of [`AddressRules::decide`], in the order they
/// are checked.
// The address is returned by value and moved straight into the entry list:
// boxing it would cost an allocation per Pod on every sync.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum AddressDecision<'s> {
    /// Terminal, without an IP, or (without `publishNotReadyAddresses`)
    /// terminating (ES-1.2).
    Ineligible(pod::Ineligible),
    /// No IP of the family the object carries.
    NoAddressOfFamily(Family),
    /// The Service has no ports and is not headless: nothing is published.
    ServiceHasNoPorts,
    /// No Service port resolves on the Pod (a named `targetPort` it does not
    /// declare): the address is left out.
    NoPortResolved,
    /// An address, ready or not, offered on these ports (none for a headless
    /// Service without ports).
    Address {
        address: EndpointAddress,
        ready: bool,
        ports: Vec<PortKey<'s>>,
    },
}

/// The per-Service facts the per-Pod decision reads, computed once per sync.
#[derive(Debug, Clone)]
pub struct AddressRules<'s> {
    service: &'s Service,
    /// `publishNotReadyAddresses`.
    pub publish_not_ready: bool,
    service_ports: &'s [ServicePort],
    headless: bool,
    /// The family of the object ([`primary_family`]); `None`: per Pod.
    pub family: Option<Family>,
}

impl<'s> AddressRules<'s> {
    pub fn of(service: &'s Service) -> Self {
        let spec = service.spec.as_ref();
        AddressRules {
            service,
            publish_not_ready: spec
                .and_then(|s| s.publish_not_ready_addresses)
                .unwrap_or(false),
            service_ports: spec.and_then(|s| s.ports.as_deref()).unwrap_or_default(),
            headless: spec.and_then(|s| s.cluster_ip.as_deref()) == Some(CLUSTER_IP_NONE),
            family: primary_family(service),
        }
    }

    /// Decides whether the selected Pod `p` gets an address in the Endpoints
    /// object, ready or not, and on which ports. [`desired_subsets`] calls it
    /// for every Pod; `svcplane explain` calls it to say why.
    #[inline]
    pub fn decide<P: PodView>(&self, p: &P) -> AddressDecision<'s> {
        let pnr = self.publish_not_ready;
        if let Some(reason) = pod::ineligibility(p, pnr) {
            return AddressDecision::Ineligible(reason);
        }
        let Some(ip) = pod_address(self.family, p) else {
            let family = self.family.unwrap_or_else(|| pod_family(p));
            return AddressDecision::NoAddressOfFamily(family);
        };
        let address = address_of(self.service, p, ip);
        let ready = pnr || pod::is_ready(p);
        if self.service_ports.is_empty() {
            return if self.headless {
                AddressDecision::Address {
                    address,
                    ready,
                    ports: Vec::new(),
                }
            } else {
                AddressDecision::ServiceHasNoPorts
            };
        }
        // Ports as keys borrowing the Service's strings: the same value
        // `PortKey::of` gives for the `EndpointPort` upstream builds, without
        // allocating strings per Pod.
        let ports: Vec<PortKey<'s>> = self
            .service_ports
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
        if ports.is_empty() {
            return AddressDecision::NoPortResolved;
        }
        AddressDecision::Address {
            address,
            ready,
            ports,
        }
    }
}

/// Builds the repack entries for `pods` and hands them to `f`.
fn with_entries<P: PodView, R>(
    service: &Service,
    pods: &[&P],
    f: impl FnOnce(&[Entry<'_>]) -> R,
) -> (R, DesiredCounts) {
    let rules = AddressRules::of(service);
    // Owned addresses and ports first; the repack entries borrow them.
    let mut built: Vec<(EndpointAddress, bool, Vec<PortKey<'_>>)> = Vec::with_capacity(pods.len());
    for &p in pods {
        if let AddressDecision::Address {
            address,
            ready,
            ports,
        } = rules.decide(p)
        {
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
