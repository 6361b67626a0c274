//! The webhook's own metrics, registered into the process registry by whoever serves
//! `/metrics` (`svcplane run` and `svcplane webhook` both do).
//!
//! They say what the API server's `apiserver_admission_webhook_*` metrics cannot: how
//! claims come and go, so a range that stops shrinking back after deletes is visible
//! before it is exhausted; and how full each range is, under kube-apiserver's own
//! allocator metric names and labels (`kube_apiserver_clusterip_allocator_*` per CIDR,
//! `kube_apiserver_nodeport_allocator_*`), so dashboards written for those keep
//! working when svcplane allocates.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use svcplane_allocator::view::SvcView;
use svcplane_allocator::{Claim, IpFamily};
use tracing::warn;

use crate::state::AllocationState;

/// A range counts as nearly full from this share of used addresses on.
pub const NEARLY_FULL: f64 = 0.9;

/// Label of the per-CIDR ClusterIP gauges (upstream's `cidr`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CidrLabels {
    pub cidr: String,
}

/// Labels of the per-CIDR ClusterIP counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CidrScopeLabels {
    pub cidr: String,
    /// `static` (the user chose the value) or `dynamic`.
    pub scope: &'static str,
}

/// Label of the NodePort counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopeLabels {
    pub scope: &'static str,
}

/// Range capacity and allocations, as kube-apiserver's allocators report them.
#[derive(Clone, Debug, Default)]
pub struct CapacityMetrics {
    pub ip_allocated: Family<CidrLabels, Gauge>,
    pub ip_available: Family<CidrLabels, Gauge>,
    pub ip_allocations: Family<CidrScopeLabels, Counter>,
    pub ip_errors: Family<CidrScopeLabels, Counter>,
    pub port_allocated: Gauge,
    pub port_available: Gauge,
    pub port_allocations: Family<ScopeLabels, Counter>,
    pub port_errors: Family<ScopeLabels, Counter>,
    /// Ranges (CIDR, or `nodeports`) last seen nearly full, for the crossing notice.
    nearly_full: Arc<Mutex<HashMap<String, bool>>>,
}

/// Label of [`WebhookMetrics::claims_released`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReleaseLabels {
    /// Why: `service_gone` (its Service was deleted or dropped the value),
    /// `unused` (no Service took it within the grace period), `malformed`.
    pub reason: &'static str,
}

/// Counters of one webhook; cheap to clone (the counters are shared).
#[derive(Clone, Debug, Default)]
pub struct WebhookMetrics {
    /// Range capacity (upstream's allocator metrics).
    pub capacity: CapacityMetrics,
    /// Claims deleted by the repair loop, by reason.
    pub claims_released: Family<ReleaseLabels, Counter>,
    /// Claims of deleted Services taken over by a request that wanted their value.
    pub claims_taken_over: Counter,
    /// Repair passes that ran (skipped ones are not counted).
    pub repair_passes: Counter,
}

impl WebhookMetrics {
    /// Register every metric under `registry` (names are prefixed `webhook_`).
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("webhook");
        r.register(
            "claims_released",
            "AllocationClaims deleted by the claim repair loop, by reason",
            self.claims_released.clone(),
        );
        r.register(
            "claims_taken_over",
            "AllocationClaims of deleted Services replaced by a request that wanted their value",
            self.claims_taken_over.clone(),
        );
        r.register(
            "claim_repair_passes",
            "Claim repair passes run (a pass is skipped while the Service or claim watch is out of sync)",
            self.repair_passes.clone(),
        );
    }

    /// Register the capacity metrics under upstream's names, at the root of `root`.
    pub fn register_capacity(&self, root: &mut Registry) {
        let c = &self.capacity;
        let ip = root
            .sub_registry_with_prefix("kube_apiserver")
            .sub_registry_with_prefix("clusterip_allocator");
        ip.register(
            "allocated_ips",
            "Gauge measuring the number of allocated IPs for Services",
            c.ip_allocated.clone(),
        );
        ip.register(
            "available_ips",
            "Gauge measuring the number of available IPs for Services",
            c.ip_available.clone(),
        );
        ip.register(
            "allocation",
            "Number of Cluster IPs allocations",
            c.ip_allocations.clone(),
        );
        ip.register(
            "allocation_errors",
            "Number of errors trying to allocate Cluster IPs",
            c.ip_errors.clone(),
        );
        let port = root
            .sub_registry_with_prefix("kube_apiserver")
            .sub_registry_with_prefix("nodeport_allocator");
        port.register(
            "allocated_ports",
            "Gauge measuring the number of allocated NodePorts for Services",
            c.port_allocated.clone(),
        );
        port.register(
            "available_ports",
            "Gauge measuring the number of available NodePorts for Services",
            c.port_available.clone(),
        );
        port.register(
            "allocation",
            "Number of NodePort allocations",
            c.port_allocations.clone(),
        );
        port.register(
            "allocation_errors",
            "Number of errors trying to allocate NodePort",
            c.port_errors.clone(),
        );
    }

    /// Count one released claim.
    pub fn released(&self, reason: &'static str) {
        self.claims_released
            .get_or_create(&ReleaseLabels { reason })
            .inc();
    }
}

impl CapacityMetrics {
    /// Set the gauges from `state` (every range, ready or not), and log once when a
    /// range passes [`NEARLY_FULL`].
    pub fn refresh(&self, state: &AllocationState) {
        let a = state.allocators();
        for fam in [IpFamily::V4, IpFamily::V6] {
            for r in a.family(fam).map(|f| f.ranges()).into_iter().flatten() {
                let cidr = r.cidr().to_string();
                let labels = CidrLabels { cidr: cidr.clone() };
                self.ip_allocated
                    .get_or_create(&labels)
                    .set(i64::try_from(r.used()).unwrap_or(i64::MAX));
                self.ip_available
                    .get_or_create(&labels)
                    .set(i64::try_from(r.free()).unwrap_or(i64::MAX));
                self.note_fill(&cidr, r.used(), r.size());
            }
        }
        let p = a.node_ports();
        self.port_allocated
            .set(i64::try_from(p.used()).unwrap_or(i64::MAX));
        self.port_available
            .set(i64::try_from(p.free()).unwrap_or(i64::MAX));
        self.note_fill("nodeports", p.used(), p.used() + p.free());
    }

    fn note_fill(&self, range: &str, used: u64, size: u64) {
        let full = size > 0 && used as f64 >= NEARLY_FULL * size as f64;
        let mut seen = self
            .nearly_full
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let was = seen.insert(range.to_owned(), full).unwrap_or(false);
        if full && !was {
            warn!(range, used, size, "range is over 90% full");
        }
    }

    /// Count the values a successful (not dry-run) mutation took: `static` when the
    /// request named the value, else `dynamic`; ClusterIPs per CIDR holding them.
    pub fn allocated(&self, state: &AllocationState, before: &SvcView, values: &[Claim]) {
        for v in values {
            let scope = if named_by(before, *v) {
                "static"
            } else {
                "dynamic"
            };
            match v {
                Claim::Ip(ip) => {
                    if let Some(cidr) = cidr_of(state, *ip) {
                        self.ip_allocations
                            .get_or_create(&CidrScopeLabels { cidr, scope })
                            .inc();
                    }
                }
                Claim::NodePort(_) => {
                    self.port_allocations
                        .get_or_create(&ScopeLabels { scope })
                        .inc();
                }
            }
        }
    }

    /// Count an allocation the webhook refused: a taken value the request named (on
    /// the range holding it), or a full range (on every ready range of the family,
    /// as each of upstream's allocators counts its own failure).
    pub fn refused(&self, state: &AllocationState, before: &SvcView, message: &str) {
        if message.contains("failed to allocate a serviceIP: range is full") {
            let a = state.allocators();
            for fam in [IpFamily::V4, IpFamily::V6] {
                let Some(f) = a.family(fam) else { continue };
                let ready: Vec<_> = f.ranges().iter().filter(|r| r.is_ready()).collect();
                if !ready.is_empty() && ready.iter().all(|r| r.free() == 0) {
                    for r in ready {
                        self.ip_errors
                            .get_or_create(&CidrScopeLabels {
                                cidr: r.cidr().to_string(),
                                scope: "dynamic",
                            })
                            .inc();
                    }
                }
            }
            return;
        }
        if message.contains("failed to allocate a nodePort: range is full") {
            self.port_errors
                .get_or_create(&ScopeLabels { scope: "dynamic" })
                .inc();
            return;
        }
        if !message.contains("already allocated") {
            return;
        }
        for v in claims_named_by(before) {
            if !state.allocators().has(v) {
                continue;
            }
            match v {
                Claim::Ip(ip) => {
                    if let Some(cidr) = cidr_of(state, ip) {
                        self.ip_errors
                            .get_or_create(&CidrScopeLabels {
                                cidr,
                                scope: "static",
                            })
                            .inc();
                    }
                }
                Claim::NodePort(_) => {
                    self.port_errors
                        .get_or_create(&ScopeLabels { scope: "static" })
                        .inc();
                }
            }
        }
    }
}

/// The first range holding `ip` (upstream's `metricLabel` of its allocator).
fn cidr_of(state: &AllocationState, ip: std::net::IpAddr) -> Option<String> {
    state
        .allocators()
        .family(IpFamily::of(&ip))?
        .ranges()
        .iter()
        .find(|r| r.offset_of(ip).is_some())
        .map(|r| r.cidr().to_string())
}

/// The values the request itself names.
fn claims_named_by(v: &SvcView) -> Vec<Claim> {
    svcplane_allocator::service::claims_of(v)
}

fn named_by(v: &SvcView, c: Claim) -> bool {
    claims_named_by(v).contains(&c)
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    fn state() -> AllocationState {
        AllocationState::new(
            svcplane_allocator::AllocatorConfig::from_flags("10.0.0.0/29", "30000-30001")
                .unwrap()
                .allocators(1)
                .unwrap(),
        )
    }

    fn text(m: &WebhookMetrics) -> String {
        let mut r = Registry::default();
        m.register_capacity(&mut r);
        let mut out = String::new();
        encode(&mut out, &r).unwrap();
        out
    }

    fn view(spec: serde_json::Value) -> SvcView {
        let svc: k8s_openapi::api::core::v1::Service =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "s"}, "spec": spec}))
                .unwrap();
        SvcView::from_service(&svc)
    }

    #[test]
    fn capacity_uses_upstreams_names_and_labels() {
        let m = WebhookMetrics::default();
        let mut st = state();
        let ip = Claim::Ip("10.0.0.3".parse().unwrap());
        st.set(
            crate::state::HolderKey::Service {
                namespace: "ns".into(),
                name: "a".into(),
            },
            None,
            vec![ip, Claim::NodePort(30000)],
        );
        m.capacity.refresh(&st);
        m.capacity.allocated(
            &st,
            &view(serde_json::json!({"clusterIP": "10.0.0.3", "ports": [{"port": 80}]})),
            &[ip, Claim::NodePort(30000)],
        );
        let t = text(&m);
        for needle in [
            "kube_apiserver_clusterip_allocator_allocated_ips{cidr=\"10.0.0.0/29\"} 1",
            "kube_apiserver_clusterip_allocator_available_ips{cidr=\"10.0.0.0/29\"} 5",
            "kube_apiserver_clusterip_allocator_allocation_total{cidr=\"10.0.0.0/29\",scope=\"static\"} 1",
            "kube_apiserver_nodeport_allocator_allocated_ports 1",
            "kube_apiserver_nodeport_allocator_available_ports 1",
            "kube_apiserver_nodeport_allocator_allocation_total{scope=\"dynamic\"} 1",
        ] {
            assert!(t.contains(needle), "missing {needle:?} in\n{t}");
        }
    }

    #[test]
    fn a_full_range_counts_an_error_on_every_ready_range_of_the_family() {
        let m = WebhookMetrics::default();
        let mut st = state();
        let all: Vec<Claim> = (1..=6)
            .map(|i| Claim::Ip(format!("10.0.0.{i}").parse().unwrap()))
            .collect();
        st.set(
            crate::state::HolderKey::Service {
                namespace: "ns".into(),
                name: "a".into(),
            },
            None,
            all,
        );
        m.capacity.refused(
            &st,
            &view(serde_json::json!({"ports": [{"port": 80}]})),
            "Internal error occurred: failed to allocate a serviceIP: range is full",
        );
        m.capacity.refresh(&st);
        let t = text(&m);
        assert!(
            t.contains("kube_apiserver_clusterip_allocator_allocation_errors_total{cidr=\"10.0.0.0/29\",scope=\"dynamic\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("kube_apiserver_clusterip_allocator_available_ips{cidr=\"10.0.0.0/29\"} 0")
        );
    }
}
