//! Topology-aware routing hints (ES-2.11, TH-3), as a
//! [`HintsPolicy`] for the EndpointSlice reconciler.
//!
//! - `nodes`: allocatable CPU per zone and the zone ratios (TH-3.3.1);
//! - `allocation`: the topology-cache algorithm for one pass (TH-3.3.2 to TH-3.3.5);
//! - `cache`: the state kept across syncs and the overload re-check (TH-3.3.6);
//! - `traffic_distribution`: the `spec.trafficDistribution` heuristic (TH-3.2);
//! - this module: enabling (TH-3.1) and the dispatch of ES-2.11.
//!
//! Everything is pure: the caller owns the [`TopologyPolicy`] (cache and
//! ratios), feeds it Node snapshots and passes it to
//! `reconcile_with_hints` for each sync.

pub mod allocation;
pub mod cache;
#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
pub mod nodes;
pub mod traffic_distribution;

#[cfg(test)]
mod tests;

use k8s_openapi::api::core::v1::{Node, Service};

use self::allocation::Failure;
use self::cache::{TopologyCache, ZoneCounts};
use self::nodes::ZoneRatios;
use self::traffic_distribution::TrafficDistribution;
use crate::core::endpointslice::hints::{HintsPolicy, PassSlices, remove_hints};
use crate::core::event::PlannedEvent;
use crate::core::keys::object_key;
use crate::core::keys::{ANNOTATION_TOPOLOGY_AWARE_HINTS, ANNOTATION_TOPOLOGY_MODE};

/// The maximum overload any zone's endpoints should see (upstream constant).
pub const OVERLOAD_THRESHOLD: f64 = 0.2;

pub const REASON_ENABLED: &str = "TopologyAwareHintsEnabled";
pub const REASON_DISABLED: &str = "TopologyAwareHintsDisabled";

pub const MSG_ENABLED: &str = "Topology Aware Hints has been enabled";
pub const MSG_DISABLED: &str = "Topology Aware Hints has been disabled";
pub const MSG_INSUFFICIENT_NODE_INFO: &str =
    "Insufficient Node information: allocatable CPU or zone not specified on one or more nodes";
pub const MSG_ONE_ZONE: &str = "Nodes only ready in one zone";
pub const MSG_INSUFFICIENT_ENDPOINTS: &str = "Insufficient number of endpoints";
pub const MSG_MIN_ALLOCATION: &str = "Unable to allocate minimum required endpoints to each zone without exceeding overload threshold";
pub const MSG_NO_ZONE: &str = "One or more endpoints do not have a zone specified";
pub const MSG_NO_ALLOCATED_HINTS: &str = "No hints allocated for zones";

/// `<message>, addressType: <type>`, the form of every topology event.
pub fn with_address_type(message: &str, address_type: &str) -> String {
    format!("{message}, addressType: {address_type}")
}

/// TH-3.1: the annotation that decides whether hints are enabled, as `(key,
/// value)`: the legacy `topology-aware-hints` whenever present (even empty),
/// else `topology-mode`.
pub fn hints_annotation(service: &Service) -> Option<(&'static str, &str)> {
    let annotations = service.metadata.annotations.as_ref()?;
    annotations
        .get(ANNOTATION_TOPOLOGY_AWARE_HINTS)
        .map(|v| (ANNOTATION_TOPOLOGY_AWARE_HINTS, v.as_str()))
        .or_else(|| {
            annotations
                .get(ANNOTATION_TOPOLOGY_MODE)
                .map(|v| (ANNOTATION_TOPOLOGY_MODE, v.as_str()))
        })
}

/// TH-3.1: only `Auto` and `auto` in the deciding annotation
/// ([`hints_annotation`]) enable hints.
pub fn hints_enabled(service: &Service) -> bool {
    matches!(hints_annotation(service), Some((_, "Auto" | "auto")))
}

/// Which hints a Service gets (ES-2.11, TH-3.1 precedence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HintsMode {
    /// Annotation `Auto`: the topology cache (trafficDistribution ignored).
    Auto,
    /// A valid `spec.trafficDistribution`.
    TrafficDistribution(TrafficDistribution),
    /// Neither: hints are removed.
    Disabled,
}

impl HintsMode {
    pub fn of_service(service: &Service) -> Self {
        if hints_enabled(service) {
            HintsMode::Auto
        } else {
            TrafficDistribution::of_service(service)
                .map_or(HintsMode::Disabled, HintsMode::TrafficDistribution)
        }
    }
}

/// The full hints policy: ES-2.11 dispatch, the topology cache (TH-3.3) and the
/// trafficDistribution heuristic (TH-3.2).
///
/// The runtime keeps one for the controller's lifetime: it rebuilds the
/// ratios with [`TopologyPolicy::set_nodes`] on every topology work item and
/// re-queues the Services that returns; each sync passes it to
/// `reconcile_with_hints`. `plan` builds a fresh one from the snapshot's
/// Nodes (an offline plan is a first sync).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopologyPolicy {
    cache: TopologyCache,
    ratios: Option<ZoneRatios>,
}

impl TopologyPolicy {
    /// A policy from an existing cache and ratios.
    pub fn new(cache: TopologyCache, ratios: Option<ZoneRatios>) -> Self {
        Self { cache, ratios }
    }

    /// A fresh cache and the ratios of `nodes`.
    pub fn from_nodes<'n>(nodes: impl IntoIterator<Item = &'n Node>) -> Self {
        Self::new(TopologyCache::default(), nodes::zone_ratios(nodes))
    }

    /// The topology work item (ES-2.1, TH-3.3.1, TH-3.3.6): recomputes the ratios
    /// from all Nodes and returns the keys of the Services to re-queue, in
    /// order.
    pub fn set_nodes<'n>(&mut self, nodes: impl IntoIterator<Item = &'n Node>) -> Vec<String> {
        self.set_ratios(nodes::zone_ratios(nodes))
    }

    /// As [`TopologyPolicy::set_nodes`], with ratios already computed.
    pub fn set_ratios(&mut self, ratios: Option<ZoneRatios>) -> Vec<String> {
        self.ratios = ratios;
        self.cache.overloaded_services(self.ratios.as_ref())
    }

    pub fn ratios(&self) -> Option<&ZoneRatios> {
        self.ratios.as_ref()
    }

    pub fn cache(&self) -> &TopologyCache {
        &self.cache
    }

    /// For the runtime to forget a deleted Service.
    pub fn cache_mut(&mut self) -> &mut TopologyCache {
        &mut self.cache
    }
}

/// What [`TopologyPolicy`] decided for one address type of one Service.
#[derive(Debug, Clone, PartialEq)]
pub enum HintsDecision {
    /// Annotation `Auto`: the hints allocated per zone, or the safeguard that
    /// switched hints off.
    Auto(Result<ZoneCounts, Failure>),
    /// `spec.trafficDistribution`: same-zone (and for `PreferSameNode`
    /// same-node) hints on ready endpoints.
    TrafficDistribution(TrafficDistribution),
    /// Neither: every hint is removed.
    Disabled,
}

impl TopologyPolicy {
    /// The ES-2.11 dispatch for one pass: assigns or removes hints and reports
    /// events, returning what was decided. [`HintsPolicy::apply`] is this
    /// without the answer; `svcplane explain` keeps it.
    pub fn apply_and_decide(
        &mut self,
        service: &Service,
        pass: &mut PassSlices<'_>,
        events: &mut Vec<PlannedEvent>,
    ) -> HintsDecision {
        let key = object_key(&service.metadata);
        let mode = HintsMode::of_service(service);
        if mode == HintsMode::Auto {
            return HintsDecision::Auto(allocation::add_hints(
                &mut self.cache,
                self.ratios.as_ref(),
                &key,
                pass,
                events,
            ));
        }
        if self.cache.has_populated_hints(&key) {
            events.push(PlannedEvent::warning(
                REASON_DISABLED,
                with_address_type(MSG_DISABLED, &pass.address_type),
            ));
        }
        self.cache.remove_hints(&key, &pass.address_type);
        match mode {
            HintsMode::TrafficDistribution(td) => {
                td.reconcile_hints(pass);
                HintsDecision::TrafficDistribution(td)
            }
            HintsMode::Auto | HintsMode::Disabled => {
                remove_hints(pass);
                HintsDecision::Disabled
            }
        }
    }
}

impl HintsPolicy for TopologyPolicy {
    fn apply(
        &mut self,
        service: &Service,
        pass: &mut PassSlices<'_>,
        events: &mut Vec<PlannedEvent>,
    ) {
        self.apply_and_decide(service, pass, events);
    }
}
