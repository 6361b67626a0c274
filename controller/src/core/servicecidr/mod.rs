//! The ServiceCIDR controller (kube-controller-manager's `service-cidr-controller`,
//! AL-6): protects a ServiceCIDR with a finalizer while addresses only
//! it covers are in use, and tells allocators whether it is ready.
//!
//! Per object, once the caches have listed:
//! - not being deleted: the finalizer `networking.k8s.io/service-cidr-finalizer` is
//!   added if missing, and the `Ready` condition set to `True` ("Kubernetes Service CIDR
//!   is ready") unless already so;
//! - being deleted: if some IPAddress managed by the ClusterIP allocator lies in this
//!   object's ranges and in no other ServiceCIDR's (and no other object contains each
//!   of its CIDRs entirely), `Ready` turns `False` with reason `Terminating` and the
//!   finalizer stays; otherwise, once ten seconds have passed since the deletion
//!   started (for allocations still in flight), the finalizer is removed.
//!
//! Everything here is pure: the shell passes the objects and the time and carries the
//! writes out (a strategic merge patch of the finalizers, a server-side apply of the
//! status, as upstream does), and [`triggers`] says which objects a change queues.

pub mod triggers;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use svcplane_allocator::range::{Cidr, IpFamily, parse_ip_sloppy};

#[cfg(test)]
mod tests;

/// `reportingController` / field manager of the writes.
pub const CONTROLLER_NAME: &str = "service-cidr-controller";
/// The finalizer that keeps a ServiceCIDR while addresses depend on it.
pub const FINALIZER: &str = "networking.k8s.io/service-cidr-finalizer";
/// How long a ServiceCIDR being deleted keeps its finalizer once nothing needs it, so
/// allocations in flight land first.
pub const DELETION_GRACE: Duration = Duration::from_secs(10);
/// The condition type.
pub const CONDITION_READY: &str = "Ready";
/// Message of `Ready=True`.
pub const MSG_READY: &str = "Kubernetes Service CIDR is ready";
/// Reason of `Ready=False` while addresses keep a ServiceCIDR being deleted.
pub const REASON_TERMINATING: &str = "Terminating";
/// Message of `Ready=False` while addresses keep a ServiceCIDR being deleted.
pub const MSG_TERMINATING: &str = "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR";
/// Event reason when the status cannot be written.
pub const REASON_ERROR: &str = "KubernetesServiceCIDRError";
/// Event message when the status cannot be written.
pub const MSG_ERROR: &str = "The ServiceCIDR Status can not be set to Ready=True";
/// The manager label and value of the ClusterIP allocator's IPAddress objects.
pub const LABEL_MANAGED_BY: &str = "ipaddress.kubernetes.io/managed-by";
pub const ALLOCATOR_MANAGER: &str = "ipallocator.k8s.io";
/// The family label of IPAddress objects.
pub const LABEL_FAMILY: &str = "ipaddress.kubernetes.io/ip-family";

/// The `Ready` condition the controller wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyCondition {
    /// `True` or `False`.
    pub status: &'static str,
    /// `""` when ready (as upstream writes it), else `Terminating`.
    pub reason: &'static str,
    pub message: &'static str,
}

/// One write, in the order upstream makes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Patch the finalizer in.
    AddFinalizer,
    /// Patch the finalizer out.
    RemoveFinalizer,
    /// Apply this `Ready` condition to the status (with the current time as its
    /// transition time).
    SetReady(ReadyCondition),
}

/// How a [`Write`] is sent: a strategic merge patch of the object, or a server-side
/// apply of its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    StrategicMerge,
    ApplyStatus,
}

impl Write {
    /// How this write is sent.
    pub fn sent(&self) -> Sent {
        match self {
            Write::AddFinalizer | Write::RemoveFinalizer => Sent::StrategicMerge,
            Write::SetReady(_) => Sent::ApplyStatus,
        }
    }

    /// The body sent for the ServiceCIDR `name`, `now` being the condition's
    /// transition time; shared by the controller and `plan`, so `plan` prints what
    /// `run` sends.
    pub fn body(&self, name: &str, now: Timestamp) -> serde_json::Value {
        match self {
            Write::AddFinalizer => json!({"metadata": {"finalizers": [FINALIZER]}}),
            Write::RemoveFinalizer => {
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}})
            }
            Write::SetReady(c) => json!({
                "apiVersion": "networking.k8s.io/v1",
                "kind": "ServiceCIDR",
                "metadata": {"name": name},
                "status": {"conditions": [{
                    "type": CONDITION_READY,
                    "status": c.status,
                    "reason": c.reason,
                    "message": c.message,
                    "lastTransitionTime": now.to_string(),
                }]},
            }),
        }
    }
}

/// What one sync of one ServiceCIDR wants done.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub writes: Vec<Write>,
    /// Sync again after this long (the deletion grace still running).
    pub requeue_after: Option<Duration>,
}

/// Everything one sync reads.
#[derive(Debug)]
pub struct Inputs<'a> {
    pub cidr: &'a ServiceCIDR,
    /// Every ServiceCIDR (this one included).
    pub all: &'a [Arc<ServiceCIDR>],
    /// Every IPAddress.
    pub ip_addresses: &'a [Arc<IPAddress>],
    pub now: Timestamp,
}

/// The CIDRs of a ServiceCIDR that parse.
fn cidrs_of(obj: &ServiceCIDR) -> Vec<Cidr> {
    obj.spec
        .as_ref()
        .and_then(|s| s.cidrs.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| Cidr::parse(c).ok())
        .collect()
}

fn name_of(obj: &ServiceCIDR) -> &str {
    obj.metadata.name.as_deref().unwrap_or_default()
}

/// Whether `prefix` lies inside `outer` (overlapping and not longer).
fn contains_prefix(outer: &Cidr, prefix: &Cidr) -> bool {
    outer.family() == prefix.family()
        && outer.prefix() <= prefix.prefix()
        && outer.contains_network_of(prefix)
}

/// Whether two prefixes overlap.
pub fn overlaps(a: &Cidr, b: &Cidr) -> bool {
    a.family() == b.family() && (a.contains_network_of(b) || b.contains_network_of(a))
}

/// Whether `ip` is an address of `prefix` other than its network address (and, for
/// IPv4, its broadcast address): upstream's rule for which ServiceCIDR covers an IP.
pub fn covers(prefix: &Cidr, ip: IpAddr) -> bool {
    prefix.contains(ip) && ip != prefix.network() && prefix.broadcast() != Some(ip)
}

/// The ServiceCIDRs covering `ip` (by [`covers`]), by name.
pub fn covering(all: &[Arc<ServiceCIDR>], ip: IpAddr) -> Vec<&str> {
    all.iter()
        .filter(|o| cidrs_of(o).iter().any(|c| covers(c, ip)))
        .map(|o| name_of(o))
        .collect()
}

/// The ServiceCIDRs with a CIDR overlapping one of `obj`'s, by name (itself included).
pub fn overlapping<'a>(all: &'a [Arc<ServiceCIDR>], obj: &ServiceCIDR) -> Vec<&'a str> {
    let mine = cidrs_of(obj);
    all.iter()
        .filter(|o| {
            cidrs_of(o)
                .iter()
                .any(|c| mine.iter().any(|m| overlaps(c, m)))
        })
        .map(|o| name_of(o))
        .collect()
}

/// Whether the IPAddress is one of the ClusterIP allocator's, and its address.
pub fn allocator_address(ip: &IPAddress) -> Option<IpAddr> {
    let labels = ip.metadata.labels.as_ref()?;
    (labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(ALLOCATOR_MANAGER)).then_some(())?;
    parse_ip_sloppy(ip.metadata.name.as_deref()?)
}

/// Whether a ServiceCIDR being deleted may go: every one of its CIDRs lies inside
/// another object's, or no allocator address depends on it alone.
fn can_delete(cidr: &ServiceCIDR, all: &[Arc<ServiceCIDR>], ips: &[Arc<IPAddress>]) -> bool {
    let me = name_of(cidr);
    let mine = cidrs_of(cidr);
    let has_parent = mine.iter().all(|prefix| {
        let containing: Vec<&str> = all
            .iter()
            .filter(|o| cidrs_of(o).iter().any(|c| contains_prefix(c, prefix)))
            .map(|o| name_of(o))
            .collect();
        !(containing.is_empty() || containing == [me])
    });
    if has_parent {
        return true;
    }
    for prefix in &mine {
        let family = match prefix.family() {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        };
        for ip in ips {
            let labelled = ip
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_FAMILY))
                .is_some_and(|f| f == family);
            let Some(address) = allocator_address(ip).filter(|_| labelled) else {
                continue;
            };
            if covering(all, address) == [me] {
                return false;
            }
        }
    }
    true
}

fn ready_condition(cidr: &ServiceCIDR) -> Option<(&str, &str, &str)> {
    cidr.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION_READY)
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

fn set_if_needed(cidr: &ServiceCIDR, want: ReadyCondition, writes: &mut Vec<Write>) {
    if ready_condition(cidr) != Some((want.status, want.reason, want.message)) {
        writes.push(Write::SetReady(want));
    }
}

fn has_finalizer(cidr: &ServiceCIDR) -> bool {
    cidr.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

/// One sync of one ServiceCIDR.
pub fn reconcile(inputs: &Inputs<'_>) -> Plan {
    let cidr = inputs.cidr;
    let mut plan = Plan::default();
    if let Some(deleted_at) = cidr.metadata.deletion_timestamp.as_ref() {
        if !can_delete(cidr, inputs.all, inputs.ip_addresses) {
            set_if_needed(
                cidr,
                ReadyCondition {
                    status: "False",
                    reason: REASON_TERMINATING,
                    message: MSG_TERMINATING,
                },
                &mut plan.writes,
            );
            return plan;
        }
        let since = inputs
            .now
            .duration_since(deleted_at.0)
            .try_into()
            .unwrap_or(Duration::ZERO);
        if since < DELETION_GRACE {
            plan.requeue_after = Some(DELETION_GRACE - since);
            return plan;
        }
        if has_finalizer(cidr) {
            plan.writes.push(Write::RemoveFinalizer);
        }
        return plan;
    }
    if !has_finalizer(cidr) {
        plan.writes.push(Write::AddFinalizer);
    }
    set_if_needed(
        cidr,
        ReadyCondition {
            status: "True",
            reason: "",
            message: MSG_READY,
        },
        &mut plan.writes,
    );
    plan
}
