//! The `spec.trafficDistribution` heuristic (TH-3.2): same-zone
//! hints for `PreferClose`/`PreferSameZone`, plus same-node hints for
//! `PreferSameNode`.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{EndpointHints, EndpointSlice, ForNode, ForZone};

use super::allocation::endpoint_ready;
use crate::core::endpointslice::hints::PassSlices;
use crate::core::slice_endpoints::SliceEndpoints;

/// The values of `spec.trafficDistribution` the controller acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrafficDistribution {
    PreferClose,
    PreferSameZone,
    PreferSameNode,
}

impl TrafficDistribution {
    /// The exact API strings; anything else is treated as unset.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "PreferClose" => Some(Self::PreferClose),
            "PreferSameZone" => Some(Self::PreferSameZone),
            "PreferSameNode" => Some(Self::PreferSameNode),
            _ => None,
        }
    }

    /// The Service's valid trafficDistribution, if any (a valid one per ES-2.11;
    /// the PreferSame gate is GA, so always on).
    pub fn of_service(service: &Service) -> Option<Self> {
        service
            .spec
            .as_ref()
            .and_then(|s| s.traffic_distribution.as_deref())
            .and_then(Self::parse)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PreferClose => "PreferClose",
            Self::PreferSameZone => "PreferSameZone",
            Self::PreferSameNode => "PreferSameNode",
        }
    }

    fn node_hints(self) -> bool {
        self == Self::PreferSameNode
    }

    /// Whether an existing slice has a ready endpoint whose hints are missing
    /// or wrong (TH-3.2). Not-ready endpoints never count.
    pub fn needs_update(self, slice: &EndpointSlice) -> bool {
        slice
            .endpoints()
            .iter()
            .filter(|e| endpoint_ready(e))
            .any(|e| {
                let zones = e.hints.as_ref().and_then(|h| h.for_zones.as_deref());
                let nodes = e.hints.as_ref().and_then(|h| h.for_nodes.as_deref());
                let zone_wrong = match e.zone.as_deref() {
                    Some(zone) => !matches!(zones, Some([only]) if only.name == zone),
                    None => zones.is_some_and(|z| !z.is_empty()),
                };
                let node_wrong = match e.node_name.as_deref().filter(|_| self.node_hints()) {
                    Some(node) => !matches!(nodes, Some([only]) if only.name == node),
                    None => nodes.is_some_and(|n| !n.is_empty()),
                };
                zone_wrong || node_wrong
            })
    }

    /// Sets the wanted hints on every ready endpoint; not-ready endpoints
    /// are left exactly as they are.
    pub fn update(self, slice: &mut EndpointSlice) {
        for e in slice
            .endpoints_mut()
            .iter_mut()
            .filter(|e| endpoint_ready(e))
        {
            let for_zones = e.zone.as_ref().map(|z| vec![ForZone { name: z.clone() }]);
            let for_nodes = e
                .node_name
                .as_ref()
                .filter(|_| self.node_hints())
                .map(|n| vec![ForNode { name: n.clone() }]);
            e.hints = (for_zones.is_some() || for_nodes.is_some()).then_some(EndpointHints {
                for_zones,
                for_nodes,
            });
        }
    }

    /// Applies the heuristic to a pass: unchanged slices that need it are
    /// copied into updates, then creates and updates get their hints.
    pub fn reconcile_hints(self, pass: &mut PassSlices<'_>) {
        let mut kept = Vec::with_capacity(pass.unchanged.len());
        for slice in std::mem::take(&mut pass.unchanged) {
            if self.needs_update(slice) {
                pass.updates.push(slice.clone());
            } else {
                kept.push(slice);
            }
        }
        pass.unchanged = kept;
        for slice in pass.creates.iter_mut().chain(pass.updates.iter_mut()) {
            self.update(slice);
        }
    }
}
