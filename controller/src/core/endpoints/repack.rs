//! Canonical Endpoints subsets (EP-4.2 step 6), shared with the
//! mirroring controller (MR-5.2 step 1).
//!
//! Upstream's `RepackSubsets`: every distinct port collects the set of
//! addresses offering it (deduplicated by IP and targetRef UID; an address
//! both ready and not ready for one port is not ready); ports with identical
//! address sets share a subset; subsets without ports use a sentinel port
//! (number -1) so their addresses survive. Ports whose number is not positive
//! (the sentinel, or a port written without a number) are dropped from the
//! result but keep their addresses. Upstream orders ports and subsets by an
//! internal hash; svcplane uses the total order of [`NormSubset`] instead, so
//! the same input always gives the same bytes.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset, ObjectReference};

/// A port as a repack key: the value of upstream's `v1.EndpointPort`
/// (`None` and `""` are the same string).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortKey<'a> {
    pub name: &'a str,
    pub port: i32,
    pub protocol: &'a str,
    pub app_protocol: Option<&'a str>,
}

impl<'a> PortKey<'a> {
    /// The sentinel upstream uses for subsets without ports.
    pub const SENTINEL: PortKey<'static> = PortKey {
        name: "",
        port: -1,
        protocol: "",
        app_protocol: None,
    };

    pub fn of(p: &'a EndpointPort) -> Self {
        PortKey {
            name: p.name.as_deref().unwrap_or(""),
            port: p.port,
            protocol: p.protocol.as_deref().unwrap_or(""),
            app_protocol: p.app_protocol.as_deref(),
        }
    }

    /// The API object for this port (empty strings omitted, as Go's
    /// `omitempty` would).
    pub fn to_port(self) -> EndpointPort {
        EndpointPort {
            name: (!self.name.is_empty()).then(|| self.name.to_owned()),
            port: self.port,
            protocol: (!self.protocol.is_empty()).then(|| self.protocol.to_owned()),
            app_protocol: self.app_protocol.map(str::to_owned),
        }
    }
}

/// One address offered on one port (or on no port), as fed to [`repack`].
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub address: &'a EndpointAddress,
    pub ready: bool,
    /// `PortKey::SENTINEL` for a subset without ports.
    pub port: PortKey<'a>,
}

/// The entries of existing subsets: every address on every port of its
/// subset, or on the sentinel when the subset has no ports.
pub fn entries_of(subsets: &[EndpointSubset]) -> Vec<Entry<'_>> {
    let mut out = Vec::new();
    for s in subsets {
        let ports: Vec<PortKey<'_>> = match s.ports.as_deref() {
            None | Some([]) => vec![PortKey::SENTINEL],
            Some(ports) => ports.iter().map(PortKey::of).collect(),
        };
        for port in ports {
            for a in s.addresses.iter().flatten() {
                out.push(Entry {
                    address: a,
                    ready: true,
                    port,
                });
            }
            for a in s.not_ready_addresses.iter().flatten() {
                out.push(Entry {
                    address: a,
                    ready: false,
                    port,
                });
            }
        }
    }
    out
}

/// Upstream's address identity: IP and targetRef UID (`""` without one).
fn address_key(a: &EndpointAddress) -> (&str, &str) {
    (
        a.ip.as_str(),
        a.target_ref
            .as_ref()
            .and_then(|r| r.uid.as_deref())
            .unwrap_or(""),
    )
}

/// Repacks entries into canonical subsets, sorted by [`NormSubset`] order.
pub fn repack(entries: &[Entry<'_>]) -> Vec<EndpointSubset> {
    repack_with(entries, |_| None).0
}

/// [`repack`], then cut to at most `keep(lens)` entries per list, where
/// `lens` are the `(ready, not_ready)` lengths of the canonical subsets in
/// order (see [`super::capacity::keep_counts`]). Returns the cut subsets and
/// the number of addresses before the cut.
///
/// Equal to repacking and then truncating each list to its first entries,
/// but faster: the cut depends only on list lengths and subset order, so it
/// is decided before the addresses are sorted or copied. A list that loses
/// entries is only partially sorted (select the kept prefix, then sort it)
/// and only kept addresses are cloned. This is exact because no two
/// distinct addresses compare equal: addresses are deduplicated by IP and
/// UID, both part of [`NormAddress`], so the kept prefix is unique.
pub fn repack_with(
    entries: &[Entry<'_>],
    keep: impl FnOnce(&[(usize, usize)]) -> Option<Vec<(usize, usize)>>,
) -> (Vec<EndpointSubset>, usize) {
    // Distinct addresses, first occurrence kept (upstream copies the first).
    let mut index: HashMap<(&str, &str), usize> = HashMap::with_capacity(entries.len());
    let mut addresses: Vec<&EndpointAddress> = Vec::new();
    // Port -> address index -> ready.
    let mut by_port: BTreeMap<PortKey<'_>, BTreeMap<usize, bool>> = BTreeMap::new();
    for e in entries {
        let next = addresses.len();
        let i = *index.entry(address_key(e.address)).or_insert(next);
        if i == next {
            addresses.push(e.address);
        }
        let set = by_port.entry(e.port).or_default();
        let slot = set.entry(i).or_insert(e.ready);
        // Not ready wins over ready for the same port.
        *slot = *slot && e.ready;
    }
    // Address set -> the real ports offering exactly that set.
    let mut by_set: BTreeMap<Vec<(usize, bool)>, Vec<PortKey<'_>>> = BTreeMap::new();
    for (port, set) in by_port {
        let key: Vec<(usize, bool)> = set.into_iter().collect();
        let ports = by_set.entry(key).or_default();
        if port.port > 0 {
            ports.push(port);
        }
    }
    // Comparison keys, computed once per address rather than per comparison.
    let norm: Vec<NormAddress<'_>> = addresses.iter().map(|a| NormAddress::of(a)).collect();
    let by_norm = |x: &usize, y: &usize| norm[*x].cmp(&norm[*y]);

    // Subsets as index lists, not yet sorted; ports come sorted from
    // `by_port`, whose order is the `PortKey` order.
    let mut packed: Vec<Packed<'_>> = by_set
        .into_iter()
        .map(|(set, ports)| {
            let (ready, not_ready): (Vec<_>, Vec<_>) = set.into_iter().partition(|(_, r)| *r);
            Packed {
                ready: ready.into_iter().map(|(i, _)| i).collect(),
                not_ready: not_ready.into_iter().map(|(i, _)| i).collect(),
                ports,
                sorted: false,
            }
        })
        .collect();
    // Subset order compares ports first. Real ports belong to exactly one
    // address set, so subsets with ports never tie on them; only several
    // port-less subsets can, and then their (sorted) addresses decide. Sort
    // exactly those lists up front so the comparison below is well defined.
    if packed.iter().filter(|p| p.ports.is_empty()).count() > 1 {
        for p in packed.iter_mut().filter(|p| p.ports.is_empty()) {
            p.ready.sort_unstable_by(by_norm);
            p.not_ready.sort_unstable_by(by_norm);
            p.sorted = true;
        }
    }
    packed.sort_unstable_by(|x, y| {
        x.ports.cmp(&y.ports).then_with(|| {
            let list = |v: &[usize]| v.iter().map(|i| &norm[*i]).collect::<Vec<_>>();
            debug_assert!(x.sorted && y.sorted);
            list(&x.ready)
                .cmp(&list(&y.ready))
                .then_with(|| list(&x.not_ready).cmp(&list(&y.not_ready)))
        })
    });

    let lens: Vec<(usize, usize)> = packed
        .iter()
        .map(|p| (p.ready.len(), p.not_ready.len()))
        .collect();
    let total = lens.iter().map(|(r, n)| r + n).sum();
    let takes = keep(&lens).unwrap_or(lens);
    // Sorts the kept prefix of one list and clones it.
    let cut = |mut list: Vec<usize>, take: usize| -> Option<Vec<EndpointAddress>> {
        if take == 0 {
            return None;
        }
        if take < list.len() {
            list.select_nth_unstable_by(take - 1, by_norm);
            list.truncate(take);
        }
        list.sort_unstable_by(by_norm);
        Some(list.into_iter().map(|i| addresses[i].clone()).collect())
    };
    let subsets = packed
        .into_iter()
        .zip(takes)
        .map(|(p, (take_ready, take_not_ready))| EndpointSubset {
            addresses: cut(p.ready, take_ready),
            not_ready_addresses: cut(p.not_ready, take_not_ready),
            ports: (!p.ports.is_empty())
                .then(|| p.ports.into_iter().map(PortKey::to_port).collect()),
        })
        .collect();
    (subsets, total)
}

/// One repacked subset as indices into the distinct addresses.
struct Packed<'a> {
    ready: Vec<usize>,
    not_ready: Vec<usize>,
    ports: Vec<PortKey<'a>>,
    /// Whether both lists are already in [`NormAddress`] order.
    sorted: bool,
}

/// Sorts addresses (IP bytes, then UID), ports and subsets into the canonical
/// order. Content is not changed.
pub fn sort_subsets(subsets: &mut [EndpointSubset]) {
    for s in subsets.iter_mut() {
        if let Some(a) = s.addresses.as_mut() {
            a.sort_by(|x, y| NormAddress::of(x).cmp(&NormAddress::of(y)));
        }
        if let Some(a) = s.not_ready_addresses.as_mut() {
            a.sort_by(|x, y| NormAddress::of(x).cmp(&NormAddress::of(y)));
        }
        if let Some(p) = s.ports.as_mut() {
            p.sort_by(|x, y| PortKey::of(x).cmp(&PortKey::of(y)));
        }
    }
    subsets.sort_by(|x, y| NormSubset::of(x).cmp(&NormSubset::of(y)));
}

/// An ObjectReference compared as Go compares it (strings; `None` = `""`),
/// ignoring `resourceVersion` (ES-1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NormRef<'a> {
    pub uid: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub api_version: &'a str,
    pub field_path: &'a str,
}

impl<'a> NormRef<'a> {
    pub fn of(r: &'a ObjectReference) -> Self {
        let s = |v: &'a Option<String>| v.as_deref().unwrap_or("");
        NormRef {
            uid: s(&r.uid),
            kind: s(&r.kind),
            namespace: s(&r.namespace),
            name: s(&r.name),
            api_version: s(&r.api_version),
            field_path: s(&r.field_path),
        }
    }
}

/// An address in comparison form. The derived order starts with IP bytes,
/// then targetRef UID (no targetRef first), as upstream sorts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NormAddress<'a> {
    pub ip: &'a str,
    pub target_ref: Option<NormRef<'a>>,
    pub hostname: &'a str,
    pub node_name: Option<&'a str>,
}

impl<'a> NormAddress<'a> {
    pub fn of(a: &'a EndpointAddress) -> Self {
        NormAddress {
            ip: &a.ip,
            target_ref: a.target_ref.as_ref().map(NormRef::of),
            hostname: a.hostname.as_deref().unwrap_or(""),
            node_name: a.node_name.as_deref(),
        }
    }
}

/// A subset in comparison form: nil lists equal empty ones, each list sorted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NormSubset<'a> {
    pub ports: Vec<PortKey<'a>>,
    pub addresses: Vec<NormAddress<'a>>,
    pub not_ready: Vec<NormAddress<'a>>,
}

impl<'a> NormSubset<'a> {
    pub fn of(s: &'a EndpointSubset) -> Self {
        let addrs = |v: &'a Option<Vec<EndpointAddress>>| {
            let mut out: Vec<NormAddress<'a>> = v.iter().flatten().map(NormAddress::of).collect();
            out.sort_unstable();
            out
        };
        let mut ports: Vec<PortKey<'a>> = s.ports.iter().flatten().map(PortKey::of).collect();
        ports.sort_unstable();
        NormSubset {
            ports,
            addresses: addrs(&s.addresses),
            not_ready: addrs(&s.not_ready_addresses),
        }
    }
}

/// Whether two subset lists hold the same content, in any order (ES-1.5):
/// nil equals empty, `targetRef.resourceVersion` is ignored.
pub fn subsets_equivalent(a: &[EndpointSubset], b: &[EndpointSubset]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    fn norm(v: &[EndpointSubset]) -> Vec<NormSubset<'_>> {
        let mut out: Vec<NormSubset<'_>> = v.iter().map(NormSubset::of).collect();
        out.sort_unstable();
        out
    }
    norm(a) == norm(b)
}

/// Ready plus not-ready addresses over all subsets.
pub fn address_count(subsets: &[EndpointSubset]) -> usize {
    subsets
        .iter()
        .map(|s| {
            s.addresses.as_ref().map_or(0, Vec::len)
                + s.not_ready_addresses.as_ref().map_or(0, Vec::len)
        })
        .sum()
}
