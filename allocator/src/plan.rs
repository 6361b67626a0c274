//! `svcplane plan --controllers allocator`: the offline answer to "which fields would
//! the webhook set for these Services, and what would repair report?".
//!
//! Flags are parsed into an [`AllocatorConfig`]; [`plan_allocations`] rebuilds state from
//! the given Services (existing allocations first, repair findings kept apart), then
//! fills in every Service still lacking ClusterIP(s) or nodePort(s), in
//! (namespace, name) order, with a seeded RNG so the plan is reproducible.

use k8s_openapi::api::core::v1::Service;

use crate::error::ConfigError;
use crate::event::EventType;
use crate::ip_allocator::{CidrAllocator, FamilyAllocator};
use crate::node_port::{PortAllocator, PortRange};
use crate::range::{Cidr, IpFamily};
use crate::rebuild::{rebuild, sorted_services};
use crate::service::Allocators;
use crate::view::{CLUSTER_IP_NONE, REQUIRE_DUAL_STACK, SvcView};

/// Default `--service-cluster-ip-range` (kubeadm's value).
pub const DEFAULT_SERVICE_CLUSTER_IP_RANGE: &str = "10.96.0.0/12";
/// Default `--service-node-port-range`.
pub const DEFAULT_SERVICE_NODE_PORT_RANGE: &str = "30000-32767";

const CIDR_FLAG: &str = "--service-cluster-ip-range";
const PORT_FLAG: &str = "--service-node-port-range";

/// Cluster IP ranges (one or two families, primary first) and the NodePort range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatorConfig {
    /// Service CIDRs; the first one's family is the cluster's primary family. From the
    /// flags at most one per family; from ServiceCIDR objects any number.
    pub cluster_ip_ranges: Vec<Cidr>,
    /// Ranges that hand out nothing (all their ServiceCIDRs terminating or not ready).
    pub unready: Vec<Cidr>,
    /// NodePort range.
    pub node_port_range: PortRange,
}

impl AllocatorConfig {
    /// Parse `--service-cluster-ip-range` value, e.g. "10.96.0.0/12" or "10.96.0.0/12,fd00::/108".
    /// and `--service-node-port-range` value e.g. "30000-32767". Errors name the flag and the value.
    pub fn from_flags(cluster_ip_ranges: &str, node_port_range: &str) -> Result<Self, ConfigError> {
        let list_err = |reason: String| ConfigError::InvalidCidrList {
            flag: CIDR_FLAG,
            value: cluster_ip_ranges.to_string(),
            reason,
        };
        if cluster_ip_ranges.trim().is_empty() {
            return Err(list_err("at least one CIDR required".into()));
        }
        let parts: Vec<&str> = cluster_ip_ranges.split(',').map(str::trim).collect();
        if parts.len() > 2 {
            return Err(list_err("may only hold up to 2 values".into()));
        }
        let mut cidrs = Vec::with_capacity(parts.len());
        for p in parts {
            let bad = |reason: String| ConfigError::InvalidCidr {
                flag: CIDR_FLAG,
                value: p.to_string(),
                reason,
            };
            let c = Cidr::parse(p).map_err(bad)?;
            let r = CidrAllocator::new(c).map_err(|e| bad(e.to_string()))?;
            if r.size() == 0 {
                return Err(bad(format!("range {c} has no usable addresses")));
            }
            cidrs.push(c);
        }
        if cidrs.len() == 2 && cidrs[0].family() == cidrs[1].family() {
            return Err(list_err(format!(
                "{CIDR_FLAG}[0] and {CIDR_FLAG}[1] must be of different IP family"
            )));
        }
        let node_port_range =
            PortRange::parse(node_port_range).map_err(|reason| ConfigError::InvalidPortRange {
                flag: PORT_FLAG,
                value: node_port_range.to_string(),
                reason,
            })?;
        Ok(Self {
            cluster_ip_ranges: cidrs,
            unready: Vec::new(),
            node_port_range,
        })
    }

    /// This configuration with the ClusterIP ranges the cluster's ServiceCIDR objects
    /// declare instead of the flags' (the NodePort range stays). `None` when the
    /// objects declare no usable range.
    pub fn with_service_cidrs(
        &self,
        objects: &[crate::service_cidrs::ServiceCidrView],
    ) -> Option<Self> {
        let ranges = crate::service_cidrs::cluster_ranges(objects);
        let primary = crate::service_cidrs::primary_family(objects, &ranges)?;
        let mut cidrs: Vec<Cidr> = ranges
            .iter()
            .filter(|r| r.cidr.family() == primary)
            .map(|r| r.cidr)
            .collect();
        cidrs.extend(
            ranges
                .iter()
                .filter(|r| r.cidr.family() != primary)
                .map(|r| r.cidr),
        );
        (!cidrs.is_empty()).then(|| Self {
            cluster_ip_ranges: cidrs,
            unready: ranges.iter().filter(|r| !r.ready).map(|r| r.cidr).collect(),
            node_port_range: self.node_port_range,
        })
    }

    /// The primary family.
    pub fn primary_family(&self) -> Option<IpFamily> {
        self.cluster_ip_ranges.first().map(Cidr::family)
    }

    /// Fresh, empty allocators for this configuration.
    pub fn allocators(&self, seed: u64) -> Result<Allocators, String> {
        let mut fams: Vec<FamilyAllocator> = Vec::new();
        for c in &self.cluster_ip_ranges {
            let range = CidrAllocator::new(*c).map_err(|e| e.to_string())?;
            match fams.iter_mut().find(|f| f.family() == c.family()) {
                Some(f) => f.add_range(range)?,
                None => {
                    let mut f = FamilyAllocator::new(c.family());
                    f.add_range(range)?;
                    fams.push(f);
                }
            }
        }
        for c in &self.unready {
            if let Some(f) = fams.iter_mut().find(|f| f.family() == c.family()) {
                f.set_ready(c, false);
            }
        }
        let mut it = fams.into_iter();
        let primary = it
            .next()
            .ok_or_else(|| "no service cluster IP range".to_string())?;
        Allocators::new(
            primary,
            it.next(),
            PortAllocator::new(self.node_port_range),
            seed,
        )
    }
}

/// The plan: Service updates and events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AllocationPlan {
    /// One per Service that gets new values.
    pub updates: Vec<ServiceUpdate>,
    /// Allocation failures: what the webhook would refuse.
    pub events: Vec<AllocatorEvent>,
    /// What the repair loops report about the existing values (duplicates,
    /// out-of-range and invalid ones), before anything is allocated.
    pub findings: Vec<AllocatorEvent>,
}

/// A Service with the fields the webhook would set filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceUpdate {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The complete object with the fields the webhook would set.
    pub service: Service,
}

/// An event the allocator (or upstream's repair loop) would record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatorEvent {
    /// Normal or Warning.
    pub event_type: EventType,
    /// Reason, e.g. `ClusterIPAlreadyAllocated`.
    pub reason: String,
    /// `namespace/name`.
    pub object: String,
    /// Message.
    pub message: String,
}

/// Reason of the event svcplane records when it cannot fill a Service (svcplane's own;
/// upstream rejects the request instead).
pub const REASON_ALLOCATION_FAILED: &str = "AllocationFailed";

/// Does this stored Service still lack ClusterIP(s) or nodePort(s)?
pub fn lacks_allocation(v: &SvcView, dual_stack_cluster: bool) -> bool {
    let needs_ip = !v.is_external_name()
        && (v.cluster_ip.is_empty()
            || (dual_stack_cluster
                && v.cluster_ip != CLUSTER_IP_NONE
                && v.ip_family_policy.as_deref() == Some(REQUIRE_DUAL_STACK)
                && v.cluster_ips.len() < 2));
    let needs_ports = v.needs_node_port()
        && v.should_allocate_node_ports()
        && v.ports.iter().any(|p| p.node_port == 0);
    let needs_hc = v.needs_health_check() && v.health_check_node_port == 0;
    needs_ip || needs_ports || needs_hc
}

/// What the repair loops would report about `services` (duplicates, out-of-range and
/// invalid values), from a fresh rebuild over `config`'s ranges; shared by
/// `svcplane run`'s allocator-repair controller and [`plan_allocations`].
pub fn repair_findings(
    services: &[Service],
    config: &AllocatorConfig,
    seed: u64,
) -> Result<Vec<crate::repair::Finding>, String> {
    let mut allocators = config.allocators(seed)?;
    Ok(rebuild(&mut allocators, services).findings)
}

/// Rebuild state from all Services (existing allocations first, repair findings as events),
/// then allocate for every Service still lacking ClusterIP(s) or nodePort(s), in (namespace, name) order.
pub fn plan_allocations(
    services: &[Service],
    config: &AllocatorConfig,
    seed: u64,
) -> AllocationPlan {
    let mut plan = AllocationPlan::default();
    let mut al = match config.allocators(seed) {
        Ok(a) => a,
        Err(e) => {
            // from_flags already refused every configuration that could fail here.
            plan.events.push(AllocatorEvent {
                event_type: EventType::Warning,
                reason: REASON_ALLOCATION_FAILED.into(),
                object: String::new(),
                message: e,
            });
            return plan;
        }
    };
    let rebuilt = rebuild(&mut al, services);
    for f in &rebuilt.findings {
        plan.findings.push(AllocatorEvent {
            event_type: f.event_type,
            reason: f.reason.to_string(),
            object: f.object.clone(),
            message: f.message.clone(),
        });
    }
    let dual = al.families().is_dual_stack();
    for svc in sorted_services(services) {
        let v = SvcView::from_service(svc);
        if !lacks_allocation(&v, dual) {
            continue;
        }
        let key = (v.namespace.clone(), v.name.clone());
        let owned = rebuilt.owned.get(&key).cloned().unwrap_or_default();
        // Let the Service re-claim its own values as static requests.
        for c in &owned {
            al.release_claim(*c);
        }
        let mut updated = svc.clone();
        match al.allocate_create(&mut updated, false) {
            Ok(txn) => {
                al.commit(txn);
                plan.updates.push(ServiceUpdate {
                    namespace: key.0,
                    name: key.1,
                    service: updated,
                });
            }
            Err(e) => {
                for c in &owned {
                    restore_claim(&mut al, *c);
                }
                plan.events.push(AllocatorEvent {
                    event_type: EventType::Warning,
                    reason: REASON_ALLOCATION_FAILED.into(),
                    object: v.key(),
                    message: e.to_string(),
                });
            }
        }
    }
    plan
}

fn restore_claim(al: &mut Allocators, c: crate::service::Claim) {
    match c {
        crate::service::Claim::Ip(ip) => {
            if let Some(f) = al.family_mut(IpFamily::of(&ip)) {
                let _ = f.restore(ip);
            }
        }
        crate::service::Claim::NodePort(p) => {
            let _ = al.node_ports_mut().allocate(p);
        }
    }
}
