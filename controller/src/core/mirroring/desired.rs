//! Desired mirrored endpoints (MR-5.2): repack the Endpoints,
//! then one group per (address family, ports) holding at most
//! `max_per_subset` valid addresses of each subset.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointSubset, Endpoints};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};

use crate::core::endpoints::repack::{entries_of, repack};
use crate::core::ip::{self, Family};

/// Port-map identity of a slice: its ports as a sorted multiset.
pub(super) type PortsKey = Vec<(Option<String>, Option<i32>, Option<String>, Option<String>)>;

pub(super) fn ports_key(ports: &[EndpointPort]) -> PortsKey {
    let mut key: PortsKey = ports
        .iter()
        .map(|p| {
            (
                p.name.clone(),
                p.port,
                p.protocol.clone(),
                p.app_protocol.clone(),
            )
        })
        .collect();
    key.sort_unstable();
    key
}

/// Endpoint identity (ES-2.6): sorted addresses, hostname, targetRef
/// namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct EndpointKey {
    pub addresses: Vec<String>,
    pub hostname: String,
    pub namespace: String,
    pub name: String,
}

impl EndpointKey {
    pub(super) fn of(e: &Endpoint) -> Self {
        let mut addresses = e.addresses.clone();
        addresses.sort_unstable();
        let r = e.target_ref.as_ref();
        EndpointKey {
            addresses,
            hostname: e.hostname.clone().unwrap_or_default(),
            namespace: r.and_then(|r| r.namespace.clone()).unwrap_or_default(),
            name: r.and_then(|r| r.name.clone()).unwrap_or_default(),
        }
    }
}

/// The endpoints of one (family, ports) group, in insertion order.
#[derive(Debug, Clone)]
pub(super) struct Group {
    pub family: Family,
    pub ports: Vec<EndpointPort>,
    pub key: PortsKey,
    pub endpoints: Vec<Endpoint>,
    index: HashMap<EndpointKey, usize>,
}

impl Group {
    fn insert(&mut self, e: Endpoint) {
        let key = EndpointKey::of(&e);
        match self.index.get(&key) {
            // A later duplicate replaces the earlier one, as a Go set insert.
            Some(&i) => {
                if let Some(slot) = self.endpoints.get_mut(i) {
                    *slot = e;
                }
            }
            None => {
                self.index.insert(key, self.endpoints.len());
                self.endpoints.push(e);
            }
        }
    }

    pub(super) fn get(&self, key: &EndpointKey) -> Option<&Endpoint> {
        self.index.get(key).and_then(|&i| self.endpoints.get(i))
    }
}

/// The desired groups and the address counts the events report.
#[derive(Debug, Clone, Default)]
pub(super) struct Desired {
    /// In order of first appearance: repacked subset order, IPv4 before IPv6.
    pub groups: Vec<Group>,
    pub invalid: usize,
    pub skipped: usize,
}

/// The mirrored form of an address (MR-5.2 step 3).
fn to_endpoint(a: &EndpointAddress, ip: String, ready: bool) -> Endpoint {
    Endpoint {
        addresses: vec![ip],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: None,
            terminating: None,
        }),
        hostname: a.hostname.clone().filter(|h| !h.is_empty()),
        node_name: a.node_name.clone(),
        target_ref: a.target_ref.clone(),
        ..Endpoint::default()
    }
}

/// Converts Endpoints ports 1:1 (`name` always set, `""` when unnamed).
fn to_slice_ports(subset: &EndpointSubset) -> Vec<EndpointPort> {
    subset
        .ports
        .iter()
        .flatten()
        .map(|p| EndpointPort {
            name: Some(p.name.clone().unwrap_or_default()),
            port: Some(p.port),
            protocol: Some(p.protocol.clone().unwrap_or_default()),
            app_protocol: p.app_protocol.clone(),
        })
        .collect()
}

pub(super) fn desired(endpoints: &Endpoints, max_per_subset: usize) -> Desired {
    let subsets = repack(&entries_of(
        endpoints.subsets.as_deref().unwrap_or_default(),
    ));
    let mut out = Desired::default();
    for subset in &subsets {
        let ports = to_slice_ports(subset);
        let key = ports_key(&ports);
        // Both families' groups exist for every subset, even if empty.
        let mut slot = [0usize; 2];
        for (n, family) in [Family::V4, Family::V6].into_iter().enumerate() {
            let found = out
                .groups
                .iter()
                .position(|g| g.family == family && g.key == key);
            slot[n] = found.unwrap_or_else(|| {
                out.groups.push(Group {
                    family,
                    ports: ports.clone(),
                    key: key.clone(),
                    endpoints: Vec::new(),
                    index: HashMap::new(),
                });
                out.groups.len() - 1
            });
        }
        let ready = subset.addresses.iter().flatten().map(|a| (a, true));
        let not_ready = subset
            .not_ready_addresses
            .iter()
            .flatten()
            .map(|a| (a, false));
        let total = subset.addresses.as_ref().map_or(0, Vec::len)
            + subset.not_ready_addresses.as_ref().map_or(0, Vec::len);
        let mut taken = 0usize;
        for (a, r) in ready.chain(not_ready) {
            if taken >= max_per_subset {
                break;
            }
            match ip::canonical(&a.ip) {
                Some((ip, family)) => {
                    let n = usize::from(family == Family::V6);
                    if let Some(g) = out.groups.get_mut(slot[n]) {
                        g.insert(to_endpoint(a, ip, r));
                    }
                    taken += 1;
                }
                None => out.invalid += 1,
            }
        }
        out.skipped += total - taken;
    }
    out
}
