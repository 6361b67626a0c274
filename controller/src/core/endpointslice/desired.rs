//! Desired endpoints (ES-2.3 to ES-2.6): which address types a
//! Service needs, which Pods become endpoints of a family, their fields, and
//! their grouping by resolved ports.
//!
//! Endpoints are kept as borrowed views of the Pods and only turned into API
//! objects for slices that are actually written, so a sync that changes
//! nothing allocates little.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};

use crate::core::ip::{self, Family};
use crate::core::keys::{CLUSTER_IP_NONE, LABEL_ZONE};
use crate::core::nodes::NodeLookup;
use crate::core::pod::{self, PodView};
use crate::core::selector::selector_matches_pod;

/// Address types the Service needs, in its family order (ES-2.3). Without
/// `ipFamilies` (legacy objects) the ClusterIP decides; headless or empty
/// means both.
pub fn address_types(service: &Service) -> Vec<Family> {
    let spec = service.spec.as_ref();
    let families = spec.and_then(|s| s.ip_families.as_ref());
    if let Some(families) = families.filter(|f| !f.is_empty()) {
        let mut out = Vec::with_capacity(2);
        for f in families {
            let family = match f.as_str() {
                "IPv4" => Family::V4,
                "IPv6" => Family::V6,
                _ => continue,
            };
            if !out.contains(&family) {
                out.push(family);
            }
        }
        return out;
    }
    let cluster_ip = spec.and_then(|s| s.cluster_ip.as_deref()).unwrap_or("");
    if cluster_ip.is_empty() || cluster_ip == CLUSTER_IP_NONE {
        return vec![Family::V4, Family::V6];
    }
    match ip::family_of(cluster_ip) {
        Some(f) => vec![f],
        None => vec![Family::V4, Family::V6],
    }
}

/// One wanted endpoint, borrowing from its Pod and Node.
#[derive(Debug, Clone)]
pub struct DesiredEndpoint<'a> {
    /// Canonical addresses of the family, sorted (the identity order):
    /// the first one inline (a Pod has one address per family on a real
    /// cluster), any others after it.
    pub first_address: Cow<'a, str>,
    pub more_addresses: Vec<Cow<'a, str>>,
    pub hostname: Option<&'a str>,
    pub node_name: Option<&'a str>,
    pub zone: Option<&'a str>,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: Option<&'a str>,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

impl DesiredEndpoint<'_> {
    /// The API object for this endpoint. Hints are left to the hints policy.
    pub fn to_endpoint(&self) -> Endpoint {
        Endpoint {
            addresses: std::iter::once(&self.first_address)
                .chain(&self.more_addresses)
                .map(|a| a.to_string())
                .collect(),
            conditions: Some(EndpointConditions {
                ready: Some(self.ready),
                serving: Some(self.serving),
                terminating: Some(self.terminating),
            }),
            hostname: self.hostname.map(str::to_owned),
            node_name: self.node_name.map(str::to_owned),
            zone: self.zone.map(str::to_owned),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".to_owned()),
                namespace: Some(self.namespace.to_owned()),
                name: Some(self.name.to_owned()),
                uid: self.uid.map(str::to_owned),
                ..ObjectReference::default()
            }),
            ..Endpoint::default()
        }
    }

    pub fn key(&self) -> EndpointKey<'_> {
        EndpointKey {
            addresses: Addresses::Desired(&self.first_address, &self.more_addresses),
            hostname: self.hostname.unwrap_or(""),
            namespace: self.namespace,
            name: self.name,
        }
    }

    /// Whether an existing endpoint with the same key differs in a field the
    /// controller owns (ES-2.6): nodeName, zone, the three conditions, or
    /// targetRef (resourceVersion ignored). Hints are not compared here.
    pub fn differs_from(&self, existing: &Endpoint) -> bool {
        if existing.node_name.as_deref() != self.node_name || existing.zone.as_deref() != self.zone
        {
            return true;
        }
        let c = existing.conditions.as_ref();
        if c.and_then(|c| c.ready) != Some(self.ready)
            || c.and_then(|c| c.serving) != Some(self.serving)
            || c.and_then(|c| c.terminating) != Some(self.terminating)
        {
            return true;
        }
        let Some(r) = existing.target_ref.as_ref() else {
            return true;
        };
        r.kind.as_deref() != Some("Pod")
            || r.namespace.as_deref() != Some(self.namespace)
            || r.name.as_deref() != Some(self.name)
            || r.uid.as_deref() != self.uid
            || r.api_version.is_some()
            || r.field_path.is_some()
    }
}

/// The address part of an endpoint key, over either representation.
#[derive(Debug, Clone)]
pub enum Addresses<'x> {
    /// First address and the rest, already sorted.
    Desired(&'x Cow<'x, str>, &'x [Cow<'x, str>]),
    /// One address, or several sorted.
    Borrowed(&'x [String]),
    Sorted(Vec<&'x str>),
}

impl Addresses<'_> {
    fn get(&self, i: usize) -> Option<&str> {
        match self {
            Addresses::Desired(first, _) if i == 0 => Some(first.as_ref()),
            Addresses::Desired(_, more) => more.get(i - 1).map(|s| s.as_ref()),
            Addresses::Borrowed(a) => a.get(i).map(String::as_str),
            Addresses::Sorted(a) => a.get(i).copied(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Addresses::Desired(_, more) => 1 + more.len(),
            Addresses::Borrowed(a) => a.len(),
            Addresses::Sorted(a) => a.len(),
        }
    }

    fn first(&self) -> Option<&str> {
        self.get(0)
    }
}

/// Endpoint identity (ES-2.6): sorted addresses, hostname, target namespace
/// and name. The Pod UID is deliberately not part of it.
#[derive(Debug, Clone)]
pub struct EndpointKey<'x> {
    pub addresses: Addresses<'x>,
    pub hostname: &'x str,
    pub namespace: &'x str,
    pub name: &'x str,
}

impl<'x> EndpointKey<'x> {
    /// The key of an endpoint read from an existing slice.
    pub fn of_existing(ep: &'x Endpoint) -> Self {
        let addresses = if ep.addresses.len() <= 1 || ep.addresses.is_sorted() {
            Addresses::Borrowed(&ep.addresses)
        } else {
            let mut v: Vec<&str> = ep.addresses.iter().map(String::as_str).collect();
            v.sort_unstable();
            Addresses::Sorted(v)
        };
        let r = ep.target_ref.as_ref();
        EndpointKey {
            addresses,
            hostname: ep.hostname.as_deref().unwrap_or(""),
            namespace: r.and_then(|r| r.namespace.as_deref()).unwrap_or(""),
            name: r.and_then(|r| r.name.as_deref()).unwrap_or(""),
        }
    }
}

/// String equality that never calls `memcmp` for empty strings: on the
/// machines we measured, libc's vectorised `memcmp` of two zero-length
/// dangling pointers costs ~80 ns, and the hostname of most keys is empty.
fn str_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

impl PartialEq for EndpointKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        str_eq(self.name, other.name)
            && str_eq(self.namespace, other.namespace)
            && str_eq(self.hostname, other.hostname)
            && self.addresses.len() == other.addresses.len()
            && (0..self.addresses.len()).all(|i| {
                str_eq(
                    self.addresses.get(i).unwrap_or(""),
                    other.addresses.get(i).unwrap_or(""),
                )
            })
    }
}

impl Eq for EndpointKey<'_> {}

impl Hash for EndpointKey<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Name and first address identify nearly every endpoint; equality
        // settles the rest.
        self.name.hash(state);
        self.addresses.first().unwrap_or("").hash(state);
    }
}

/// A small, fast, non-cryptographic hasher for keys we build ourselves:
/// eight bytes at a time with a multiply-rotate step (the FxHash scheme), then
/// a final avalanche, because hashbrown tags buckets with the top bits and
/// short similar strings (`web-00001`, `web-00002`) must not share them.
#[derive(Debug, Clone, Copy, Default)]
pub struct FastHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        // MurmurHash3's fmix64.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
}

pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// Ports as resolved on one Pod: for each Service port index that resolved,
/// the number it resolved to. Pods with equal lists share a port group.
pub type PortResolution = Vec<(usize, i32)>;

/// The endpoints of one port group.
#[derive(Debug)]
pub struct PortGroup {
    pub resolution: PortResolution,
    /// The EndpointPorts every slice of this group carries, in Service port
    /// order.
    pub ports: Vec<EndpointPort>,
    /// Indices into [`Desired::endpoints`], in Pod name order.
    pub members: Vec<usize>,
}

/// Desired state of one address type.
#[derive(Debug, Default)]
pub struct Desired<'a> {
    pub endpoints: Vec<DesiredEndpoint<'a>>,
    /// Groups in a deterministic order (by resolution).
    pub groups: Vec<PortGroup>,
    /// Pods skipped because their Node is missing (ES-2.4 step 2).
    pub errors: Vec<String>,
}

/// The EndpointPorts of a group (ES-2.5): name (`""` when unnamed), resolved
/// number, protocol and appProtocol of each resolved Service port.
pub fn endpoint_ports(service: &Service, resolution: &[(usize, i32)]) -> Vec<EndpointPort> {
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    resolution
        .iter()
        .filter_map(|(idx, number)| {
            let sp = ports.get(*idx)?;
            Some(EndpointPort {
                name: Some(sp.name.clone().unwrap_or_default()),
                port: Some(*number),
                protocol: Some(pod::service_port_protocol(sp).to_owned()),
                app_protocol: sp.app_protocol.clone(),
            })
        })
        .collect()
}

/// Resolves every Service port on the Pod into `out` (cleared first).
pub fn resolve_ports<P: PodView>(service: &Service, p: &P, out: &mut PortResolution) {
    out.clear();
    let spec = service.spec.as_ref();
    let ports = spec.and_then(|s| s.ports.as_deref()).unwrap_or_default();
    out.extend(
        ports
            .iter()
            .enumerate()
            .filter_map(|(i, sp)| pod::find_port(p, sp).map(|n| (i, n))),
    );
}

/// Canonical form of an address, borrowed when the input already is.
#[inline]
fn canonical_cow(s: &str) -> Option<(Cow<'_, str>, Family)> {
    if let Some(family) = ip::canonical_family(s) {
        return Some((Cow::Borrowed(s), family));
    }
    let (canon, family) = ip::canonical(s)?;
    Some((Cow::Owned(canon), family))
}

/// What the EndpointSlice controller makes of one selected Pod for one
/// address type (ES-2.4): the rules of [`endpoint_for`], in the
/// order they are checked.
#[derive(Debug, Clone)]
pub enum EndpointDecision<'a> {
    /// Terminal or without an IP (ES-1.2): no endpoint, and no port group.
    Ineligible(pod::Ineligible),
    /// `spec.nodeName` is empty or names a Node that does not exist, and the
    /// Service does not publish not-ready addresses: the Pod is skipped and
    /// the sync fails with [`node_not_found_message`] (ES-2.4 step 3).
    NodeNotFound {
        /// `spec.nodeName`, `None` when the Pod is not scheduled.
        node: Option<&'a str>,
    },
    /// None of the Pod's IPs is of this address type.
    NoAddressOfFamily,
    /// An endpoint. `node_found` is false when the Node is missing but
    /// `publishNotReadyAddresses` keeps the Pod anyway.
    Endpoint {
        endpoint: DesiredEndpoint<'a>,
        node_found: bool,
    },
}

/// The error a Pod whose Node is missing adds to the sync (upstream's text).
pub fn node_not_found_message(service: &Service, pod: &str, node: Option<&str>) -> String {
    format!(
        "skipping Pod {} for Service {}/{}: Node {} Not Found",
        pod,
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default(),
        node.unwrap_or_default(),
    )
}

/// Decides whether the selected Pod `p` is an endpoint of `family`, and with
/// which fields (ES-2.4–ES-2.6). [`desired_endpoints`] calls it for every Pod;
/// `svcplane explain` calls it to say why.
#[inline]
pub fn endpoint_for<'a, P: PodView>(
    service: &'a Service,
    p: &'a P,
    nodes: &'a dyn NodeLookup,
    family: Family,
    publish_not_ready: bool,
) -> EndpointDecision<'a> {
    if let Some(reason) = pod::ineligibility(p, true) {
        return EndpointDecision::Ineligible(reason);
    }
    let node_name = p.node_name().filter(|n| !n.is_empty());
    let node = node_name.and_then(|n| nodes.node(n));
    if node.is_none() && !publish_not_ready {
        return EndpointDecision::NodeNotFound { node: node_name };
    }
    let mut addresses = p
        .pod_ips()
        .filter_map(canonical_cow)
        .filter(|(_, f)| *f == family)
        .map(|(a, _)| a);
    let Some(mut first_address) = addresses.next() else {
        return EndpointDecision::NoAddressOfFamily;
    };
    let mut more_addresses: Vec<Cow<'a, str>> = addresses.collect();
    if !more_addresses.is_empty() {
        more_addresses.push(first_address);
        more_addresses.sort_unstable();
        first_address = more_addresses.remove(0);
    }
    let serving = pod::is_ready(p);
    let terminating = pod::is_terminating(p);
    let zone = node
        .and_then(|n| n.metadata.labels.as_ref())
        .and_then(|l| l.get(LABEL_ZONE))
        .map(String::as_str)
        .filter(|z| !z.is_empty());
    EndpointDecision::Endpoint {
        endpoint: DesiredEndpoint {
            first_address,
            more_addresses,
            hostname: pod::published_hostname(p, service),
            node_name,
            zone,
            namespace: p.namespace(),
            name: p.name(),
            uid: p.uid().filter(|u| !u.is_empty()),
            ready: publish_not_ready || (serving && !terminating),
            serving,
            terminating,
        },
        node_found: node.is_some(),
    }
}

/// Whether the Service publishes not-ready addresses.
pub fn publishes_not_ready(service: &Service) -> bool {
    service
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false)
}

/// Builds the desired endpoints of `family` from `pods` (already filtered to
/// the Service's namespace and selector). Member order follows `pods`;
/// placement sorts what it has to place, so input order never shows.
pub fn desired_endpoints<'a, P: PodView>(
    service: &'a Service,
    pods: &[&'a P],
    nodes: &'a dyn NodeLookup,
    family: Family,
) -> Desired<'a> {
    let publish_not_ready = publishes_not_ready(service);
    let mut out = Desired {
        endpoints: Vec::with_capacity(pods.len()),
        ..Desired::default()
    };
    let mut group_index: BTreeMap<PortResolution, usize> = BTreeMap::new();
    let mut member_lists: Vec<(PortResolution, Vec<usize>)> = Vec::new();
    let mut resolution = PortResolution::new();
    let mut last_group: Option<usize> = None;

    for &p in pods {
        let decision = endpoint_for(service, p, nodes, family, publish_not_ready);
        if let EndpointDecision::Ineligible(_) = decision {
            continue;
        }
        resolve_ports(service, p, &mut resolution);
        // The group exists as soon as an eligible Pod maps to it, even if the
        // Pod is then skipped (upstream creates it before the Node lookup).
        // Consecutive Pods usually share a group, so try the last one first.
        let group = match last_group.filter(|g| member_lists[*g].0 == resolution) {
            Some(g) => g,
            None => match group_index.get(&resolution) {
                Some(g) => *g,
                None => {
                    member_lists.push((resolution.clone(), Vec::with_capacity(pods.len())));
                    group_index.insert(resolution.clone(), member_lists.len() - 1);
                    member_lists.len() - 1
                }
            },
        };
        last_group = Some(group);
        match decision {
            EndpointDecision::Endpoint { endpoint, .. } => {
                out.endpoints.push(endpoint);
                member_lists[group].1.push(out.endpoints.len() - 1);
            }
            EndpointDecision::NodeNotFound { node } => {
                out.errors
                    .push(node_not_found_message(service, p.name(), node));
            }
            EndpointDecision::Ineligible(_) | EndpointDecision::NoAddressOfFamily => {}
        }
    }

    let mut order: Vec<usize> = (0..member_lists.len()).collect();
    order.sort_by(|a, b| member_lists[*a].0.cmp(&member_lists[*b].0));
    let mut taken: Vec<Option<(PortResolution, Vec<usize>)>> =
        member_lists.into_iter().map(Some).collect();
    for i in order {
        if let Some((resolution, members)) = taken[i].take() {
            out.groups.push(PortGroup {
                ports: endpoint_ports(service, &resolution),
                resolution,
                members,
            });
        }
    }
    out
}

/// The Pods a Service selects: same namespace (unset reads as `""`),
/// selector matches.
pub fn selected_pods<'a, P: PodView>(service: &Service, pods: &'a [Arc<P>]) -> Vec<&'a P> {
    let namespace = service.metadata.namespace.as_deref().unwrap_or_default();
    let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref());
    pods.iter()
        .map(Arc::as_ref)
        .filter(|p| p.namespace() == namespace)
        .filter(|p| selector_matches_pod(selector, *p))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::hash::BuildHasher;

    #[test]
    fn fast_hasher_spreads_similar_names_over_bucket_tags() {
        let names: Vec<String> = (0..1000).map(|i| format!("web-{i:05}")).collect();
        let build = BuildHasherDefault::<FastHasher>::default();
        // hashbrown's tag is the top 7 bits: similar keys must cover nearly
        // all 128 values, or lookups degrade into full key comparisons.
        let tags: BTreeSet<u64> = names.iter().map(|n| build.hash_one(n) >> 57).collect();
        assert!(tags.len() > 120, "only {} distinct tags", tags.len());
        let low: BTreeSet<u64> = names.iter().map(|n| build.hash_one(n) & 1023).collect();
        assert!(low.len() > 550, "only {} distinct low bits", low.len());
    }

    #[test]
    fn str_eq_matches_std_equality() {
        for (a, b) in [
            ("", ""),
            ("a", ""),
            ("", "a"),
            ("abc", "abc"),
            ("abc", "abd"),
        ] {
            assert_eq!(str_eq(a, b), a == b, "{a:?} {b:?}");
        }
    }

    #[test]
    fn rule_2_6_endpoint_key_ignores_address_order_of_existing_endpoints() {
        let ep = Endpoint {
            addresses: vec!["10.0.0.2".into(), "10.0.0.1".into()],
            target_ref: Some(ObjectReference {
                namespace: Some("ns".into()),
                name: Some("p".into()),
                ..ObjectReference::default()
            }),
            ..Endpoint::default()
        };
        let first = Cow::Borrowed("10.0.0.1");
        let more = [Cow::Borrowed("10.0.0.2")];
        let desired = EndpointKey {
            addresses: Addresses::Desired(&first, &more),
            hostname: "",
            namespace: "ns",
            name: "p",
        };
        assert_eq!(EndpointKey::of_existing(&ep), desired);
    }
}
