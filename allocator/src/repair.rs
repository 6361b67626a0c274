//! Repair findings: leaked, duplicated and out-of-range allocations, reported with the
//! events upstream's repair controllers raise (AL-12).
//!
//! Pure diff functions: given Services, IPAddress objects or a stored NodePort bitmap,
//! they return [`Finding`]s (event + the remedy upstream applies). The shell decides
//! whether to record the events and carry out the remedies.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::{IPAddress, ParentReference};

use crate::error::PortAllocError;
use crate::event::EventType;
use crate::node_port::{PortAllocator, PortRange};
use crate::range::{IpFamily, parse_ip_sloppy};
use crate::service::Allocators;
use crate::view::{CLUSTER_IP_NONE, SvcView};

/// `ipaddress.kubernetes.io/managed-by` value of the apiserver's allocator.
pub const MANAGED_BY_IPALLOCATOR: &str = "ipallocator.k8s.io";
/// Label naming the allocator that owns an IPAddress.
pub const LABEL_MANAGED_BY: &str = "ipaddress.kubernetes.io/managed-by";
/// Label carrying an IPAddress's family.
pub const LABEL_IP_FAMILY: &str = "ipaddress.kubernetes.io/ip-family";
/// Upstream's grace period before a parentless IPAddress counts as leaked.
pub const IPADDRESS_LEAK_GRACE_SECONDS: i64 = 60;
/// Passes a NodePort must be seen leaked before it is released.
pub const NUM_REPAIRS_BEFORE_LEAK_CLEANUP: u32 = 3;

/// What upstream does about a finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remedy {
    /// Nothing (the user must recreate the Service).
    None,
    /// Create the IPAddress for the Service.
    CreateIpAddress(IpAddr),
    /// Delete and recreate the IPAddress with a reference to the Service.
    RecreateIpAddress(IpAddr),
    /// Delete the IPAddress (named by the address string).
    DeleteIpAddress(String),
    /// Look again after this many seconds.
    RequeueAfter(i64),
    /// Release a leaked NodePort from the stored bitmap.
    ReleaseNodePort(i32),
}

/// One repair finding: an event upstream records, and its remedy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Warning; Normal (with no reason) for a silent requeue, which records no event.
    pub event_type: EventType,
    /// Event reason, e.g. `ClusterIPAlreadyAllocated`.
    pub reason: &'static str,
    /// events/v1 action (`ClusterIPAllocation`, ...); empty for the NodePort repair's core/v1 events.
    pub action: &'static str,
    /// The object the event is about: `namespace/name` for Services, the name for IPAddresses.
    pub object: String,
    /// Object kind: `Service` or `IPAddress`.
    pub kind: &'static str,
    /// Event message.
    pub message: String,
    /// What upstream does.
    pub remedy: Remedy,
}

impl Finding {
    /// The upstream repair loop that reports this finding (events' reporting
    /// component): the NodePort repair for `Port…` reasons, else the ClusterIP one.
    pub fn component(&self) -> &'static str {
        if self.reason.starts_with("Port") {
            "portallocator-repair-controller"
        } else {
            "ipallocator-repair-controller"
        }
    }

    fn on_service(
        v: &SvcView,
        reason: &'static str,
        action: &'static str,
        message: String,
        remedy: Remedy,
    ) -> Self {
        Self {
            event_type: EventType::Warning,
            reason,
            action,
            object: v.key(),
            kind: "Service",
            message,
            remedy,
        }
    }

    fn on_ip(name: &str, reason: &'static str, message: String, remedy: Remedy) -> Self {
        Self {
            event_type: EventType::Warning,
            reason,
            action: "IPAddressAllocation",
            object: name.to_string(),
            kind: "IPAddress",
            message,
            remedy,
        }
    }
}

/// `ClusterIPNotValid`; upstream prints the nil parse result, hence `<nil>`.
pub fn cluster_ip_not_valid(v: &SvcView) -> Finding {
    Finding::on_service(
        v,
        "ClusterIPNotValid",
        "ClusterIPValidation",
        "Cluster IP <nil> is not a valid IP; please recreate Service".into(),
        Remedy::None,
    )
}

/// `ClusterIPOutOfRange` (IPAddress mode wording).
pub fn cluster_ip_out_of_range(v: &SvcView, ip: IpAddr) -> Finding {
    Finding::on_service(
        v,
        "ClusterIPOutOfRange",
        "ClusterIPAllocation",
        format!(
            "Cluster IP [{}]: {ip} is not within any configured Service CIDR; please recreate service",
            IpFamily::of(&ip)
        ),
        Remedy::None,
    )
}

/// `ClusterIPAlreadyAllocated` (no space after the colon, as upstream).
pub fn cluster_ip_already_allocated(v: &SvcView, ip: IpAddr) -> Finding {
    Finding::on_service(
        v,
        "ClusterIPAlreadyAllocated",
        "ClusterIPAllocation",
        format!(
            "Cluster IP [{}]:{ip} was assigned to multiple services; please recreate service",
            IpFamily::of(&ip)
        ),
        Remedy::None,
    )
}

/// `PortAlreadyAllocated`.
pub fn port_already_allocated(v: &SvcView, port: i32) -> Finding {
    Finding::on_service(
        v,
        "PortAlreadyAllocated",
        "",
        format!("Port {port} was assigned to multiple services; please recreate service"),
        Remedy::None,
    )
}

/// `PortOutOfRange`.
pub fn port_out_of_range(v: &SvcView, port: i32, range: &PortRange) -> Finding {
    Finding::on_service(
        v,
        "PortOutOfRange",
        "",
        format!("Port {port} is not within the port range {range}; please recreate service"),
        Remedy::None,
    )
}

/// NodePorts the repair loop counts for a Service (upstream repair's
/// `collectServiceNodePorts`): the same nodePort used for different protocols counts
/// once, for the same protocol twice; the healthCheckNodePort is added unless a
/// non-TCP entry already uses that number.
pub fn repair_node_ports_of(v: &SvcView) -> Vec<i32> {
    let mut out = Vec::new();
    let mut seen: BTreeMap<i32, Vec<&str>> = BTreeMap::new();
    for p in &v.ports {
        if p.node_port == 0 {
            continue;
        }
        match seen.get_mut(&p.node_port) {
            None => {
                seen.insert(p.node_port, vec![p.protocol.as_str()]);
                out.push(p.node_port);
            }
            Some(protos) if protos.contains(&p.protocol.as_str()) => out.push(p.node_port),
            Some(protos) => protos.push(p.protocol.as_str()),
        }
    }
    let hc = v.health_check_node_port;
    if hc != 0 && seen.get(&hc).is_none_or(|s| s.contains(&"TCP")) {
        out.push(hc);
    }
    out
}

/// An IPAddress's `spec.parentRef`, `None` when it has none: the 1.37 types make
/// `spec` and `parentRef` required, so an absent one reads as the empty default.
fn parent_ref(ip: &IPAddress) -> Option<&ParentReference> {
    let r = &ip.spec.parent_ref;
    (!r.resource.is_empty() || !r.name.is_empty()).then_some(r)
}

fn parent_ref_str(ip: &IPAddress) -> String {
    match parent_ref(ip) {
        None => "nil".into(),
        Some(r) => {
            format!(
                "&{{{} {} {} {}}}",
                r.group.as_deref().unwrap_or(""),
                r.resource,
                r.namespace.as_deref().unwrap_or(""),
                r.name
            )
        }
    }
}

/// ClusterIP repair in IPAddress mode (AL-12.1): compare Services with IPAddress objects.
/// `now` and each IPAddress's creation time are Unix seconds (time is a parameter).
pub fn repair_ip_addresses(
    services: &[Service],
    ip_addresses: &[IPAddress],
    allocators: &Allocators,
    now: i64,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let views: Vec<SvcView> = services.iter().map(SvcView::from_service).collect();
    let by_name: BTreeMap<&str, &IPAddress> = ip_addresses
        .iter()
        .filter_map(|a| a.metadata.name.as_deref().map(|n| (n, a)))
        .collect();
    let find_svc =
        |ns: &str, name: &str| views.iter().find(|v| v.namespace == ns && v.name == name);
    let in_range = |ip: IpAddr| {
        allocators
            .family(IpFamily::of(&ip))
            .is_some_and(|f| f.contains(ip))
    };

    for v in &views {
        // IsServiceIPSet: not ExternalName, clusterIP set and not None.
        if v.is_external_name() || v.cluster_ip.is_empty() || v.cluster_ip == CLUSTER_IP_NONE {
            continue;
        }
        for ip_str in &v.cluster_ips {
            let Some(ip) = parse_ip_sloppy(ip_str) else {
                out.push(cluster_ip_not_valid(v));
                continue;
            };
            let fam = IpFamily::of(&ip);
            if !in_range(ip) {
                out.push(cluster_ip_out_of_range(v, ip));
                continue;
            }
            let name = ip.to_string();
            let Some(obj) = by_name.get(name.as_str()) else {
                out.push(Finding::on_service(
                    v,
                    "ClusterIPNotAllocated",
                    "ClusterIPAllocation",
                    format!("Cluster IP [{fam}]: {ip} is not allocated; repairing"),
                    Remedy::CreateIpAddress(ip),
                ));
                continue;
            };
            let wrong_ref = || {
                Finding::on_service(
                    v,
                    "ClusterIPNotAllocated",
                    "ClusterIPAllocation",
                    format!(
                        "the ClusterIP [{fam}]: {ip} for Service {} has a wrong reference; repairing",
                        v.key()
                    ),
                    Remedy::RecreateIpAddress(ip),
                )
            };
            let Some(pref) = parent_ref(obj) else {
                out.push(wrong_ref());
                continue;
            };
            if !pref.group.as_deref().unwrap_or("").is_empty() || pref.resource != "services" {
                out.push(wrong_ref());
                continue;
            }
            let pns = pref.namespace.as_deref().unwrap_or("");
            if pns != v.namespace || pref.name != v.name {
                match find_svc(pns, &pref.name) {
                    None => {
                        out.push(wrong_ref());
                        continue;
                    }
                    Some(other) => {
                        if other.cluster_ips.contains(&name) {
                            out.push(cluster_ip_already_allocated(v, ip));
                        }
                    }
                }
            }
            let labels = obj.metadata.labels.as_ref();
            let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
            if label(LABEL_IP_FAMILY) != Some(fam.as_str())
                || label(LABEL_MANAGED_BY) != Some(MANAGED_BY_IPALLOCATOR)
            {
                // Upstream silently recreates (no event).
                out.push(Finding {
                    event_type: EventType::Warning,
                    reason: "",
                    action: "",
                    object: v.key(),
                    kind: "Service",
                    message: String::new(),
                    remedy: Remedy::RecreateIpAddress(ip),
                });
            }
        }
    }

    for a in ip_addresses {
        let Some(name) = a.metadata.name.as_deref() else {
            continue;
        };
        let managed = a
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_MANAGED_BY))
            .map(String::as_str);
        if managed != Some(MANAGED_BY_IPALLOCATOR) {
            continue;
        }
        let pref = parent_ref(a);
        let Some(pref) = pref
            .filter(|p| p.group.as_deref().unwrap_or("").is_empty() && p.resource == "services")
        else {
            out.push(Finding::on_ip(
                name,
                "IPAddressNotAllocated",
                format!(
                    "IPAddress {name} appears to have been modified, not referencing a Service {}: cleaning up",
                    parent_ref_str(a)
                ),
                Remedy::DeleteIpAddress(name.into()),
            ));
            continue;
        };
        let pns = pref.namespace.as_deref().unwrap_or("");
        match find_svc(pns, &pref.name) {
            None => {
                let created = a
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(0, |t| t.0.as_second());
                let age = now - created;
                if age > IPADDRESS_LEAK_GRACE_SECONDS {
                    out.push(Finding::on_ip(
                        name,
                        "IPAddressNotAllocated",
                        format!("IPAddress: {name} for Service {pns}/{} appears to have leaked: cleaning up", pref.name),
                        Remedy::DeleteIpAddress(name.into()),
                    ));
                } else {
                    out.push(Finding {
                        event_type: EventType::Normal,
                        reason: "",
                        action: "",
                        object: name.into(),
                        kind: "IPAddress",
                        message: String::new(),
                        remedy: Remedy::RequeueAfter(IPADDRESS_LEAK_GRACE_SECONDS - age),
                    });
                }
            }
            Some(svc) => {
                if !svc.cluster_ips.iter().any(|c| c == name) {
                    out.push(Finding::on_ip(
                        name,
                        "IPAddressWrongReference",
                        format!("IPAddress: {name} for Service {pns}/{} has a wrong reference; cleaning up", pref.name),
                        Remedy::DeleteIpAddress(name.into()),
                    ));
                }
            }
        }
    }
    out
}

/// Leak counters carried between NodePort repair passes (upstream `Repair.leaks`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeakTracker {
    counts: BTreeMap<i32, u32>,
}

/// NodePort repair pass (AL-12.3): rebuild the bitmap from `services` (sorted by
/// namespace/name), compare with the `stored` bitmap and report. Ports in `stored` that
/// no Service uses are kept for [`NUM_REPAIRS_BEFORE_LEAK_CLEANUP`] passes, then
/// released. Returns the rebuilt allocator and the findings.
pub fn repair_node_ports(
    services: &[Service],
    range: PortRange,
    stored: &PortAllocator,
    leaks: &mut LeakTracker,
) -> (PortAllocator, Vec<Finding>) {
    let mut views: Vec<SvcView> = services.iter().map(SvcView::from_service).collect();
    views.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut rebuilt = PortAllocator::new(range);
    let mut stored = stored.clone();
    let mut out = Vec::new();
    for v in &views {
        for port in repair_node_ports_of(v) {
            match rebuilt.allocate(port) {
                Ok(()) => {
                    if stored.has(port) {
                        stored.release(port);
                    } else {
                        out.push(Finding::on_service(
                            v,
                            "PortNotAllocated",
                            "",
                            format!("Port {port} is not allocated; repairing"),
                            Remedy::None,
                        ));
                    }
                    leaks.counts.remove(&port);
                }
                Err(PortAllocError::Allocated) => out.push(port_already_allocated(v, port)),
                Err(PortAllocError::NotInRange { .. }) => out.push(port_out_of_range(v, port, &range)),
                Err(PortAllocError::Full | PortAllocError::MismatchedRange) => out.push(Finding::on_service(
                    v,
                    "PortRangeFull",
                    "",
                    format!("Port range {range} is full; you must widen the port range in order to create new services"),
                    Remedy::None,
                )),
            }
        }
    }
    let leaked: Vec<i32> = stored.allocated().collect();
    for port in leaked {
        let count = leaks
            .counts
            .get(&port)
            .copied()
            .unwrap_or(NUM_REPAIRS_BEFORE_LEAK_CLEANUP - 1);
        if count > 0 {
            leaks.counts.insert(port, count - 1);
            let _ = rebuilt.allocate(port);
        } else {
            leaks.counts.remove(&port);
            out.push(Finding {
                event_type: EventType::Warning,
                reason: "",
                action: "",
                object: String::new(),
                kind: "",
                message: format!("the node port {port} appears to have leaked: cleaning up"),
                remedy: Remedy::ReleaseNodePort(port),
            });
        }
    }
    (rebuilt, out)
}
