//! Values a Service asks for by annotation instead of setting them (beyond upstream):
//! `svcplane.io/requested-cluster-ips` and `svcplane.io/requested-node-ports`.
//!
//! A restore blanks a Service's `clusterIP` (Velero does; so do GitOps re-creates and
//! `kubectl replace --force` of an edited manifest), and the Service comes back with new
//! values. Saved into these annotations, which survive such a restore, the old values
//! are asked for again when the Service is created: each group (the ClusterIPs, then
//! the nodePorts) is given when the allocator would give it to a client that set it
//! itself, else left to automatic allocation with a warning that names the value and
//! why. Only a CREATE reads the annotations, and only for fields the request leaves
//! unset: a Service that sets a value keeps upstream's rules for it.

use k8s_openapi::api::core::v1::Service;
use svcplane_allocator::range::parse_ip_sloppy;
use svcplane_allocator::view::SvcView;
use svcplane_allocator::{Allocators, ServiceError};

/// ClusterIPs to ask for, comma-separated, primary family first (`spec.clusterIPs`).
pub const REQUESTED_CLUSTER_IPS: &str = "svcplane.io/requested-cluster-ips";

/// nodePorts to ask for, comma-separated `PORT[/PROTOCOL]=NODEPORT` (the protocol
/// defaults to TCP), and `healthCheckNodePort=NODEPORT`.
pub const REQUESTED_NODE_PORTS: &str = "svcplane.io/requested-node-ports";

/// What a Service's annotations ask for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requested {
    /// `spec.clusterIPs`, as written.
    pub cluster_ips: Vec<String>,
    /// `(port, protocol, nodePort)`.
    pub node_ports: Vec<(i32, String, i32)>,
    pub health_check_node_port: Option<i32>,
    /// Where the request comes from (how warnings name it).
    pub origin: Origin,
}

/// Who asks for the values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Origin {
    /// The Service's own annotations.
    #[default]
    Annotations,
    /// svcplane: the values retained for `namespace/name` since it was deleted.
    Retained(String),
}

impl Origin {
    /// How a warning names the ClusterIPs (`true`) or nodePorts asked for.
    fn names(&self, cluster_ips: bool) -> String {
        match (self, cluster_ips) {
            (Self::Annotations, true) => format!("{REQUESTED_CLUSTER_IPS}:"),
            (Self::Annotations, false) => format!("{REQUESTED_NODE_PORTS}:"),
            (Self::Retained(service), true) => format!("ClusterIPs retained for {service}"),
            (Self::Retained(service), false) => format!("nodePorts retained for {service}"),
        }
    }
}

impl Requested {
    /// The nodePorts asked for, as the annotation writes them.
    fn node_ports_text(&self) -> String {
        self.node_ports
            .iter()
            .map(|(port, protocol, node_port)| format!("{port}/{protocol}={node_port}"))
            .chain(
                self.health_check_node_port
                    .map(|hc| format!("healthCheckNodePort={hc}")),
            )
            .collect::<Vec<_>>()
            .join(",")
    }

    fn is_empty(&self) -> bool {
        self.cluster_ips.is_empty()
            && self.node_ports.is_empty()
            && self.health_check_node_port.is_none()
    }
}

/// The request the annotations of `svc` make; `Ok(None)` without them. A malformed
/// annotation is an error naming it and the part that does not parse.
pub fn read(svc: &Service) -> Result<Option<Requested>, String> {
    let Some(annotations) = svc.metadata.annotations.as_ref() else {
        return Ok(None);
    };
    let mut r = Requested::default();
    if let Some(ips) = annotations.get(REQUESTED_CLUSTER_IPS) {
        for part in items(ips) {
            if parse_ip_sloppy(part).is_none() {
                return Err(format!(
                    "{REQUESTED_CLUSTER_IPS}: {part:?} is not an IP address; the annotation is ignored"
                ));
            }
            r.cluster_ips.push(part.to_owned());
        }
        if r.cluster_ips.len() > 2 {
            return Err(format!(
                "{REQUESTED_CLUSTER_IPS}: {ips:?} names more than two addresses; the annotation is ignored"
            ));
        }
    }
    if let Some(ports) = annotations.get(REQUESTED_NODE_PORTS) {
        for part in items(ports) {
            let bad = || {
                format!(
                    "{REQUESTED_NODE_PORTS}: {part:?} is not PORT[/PROTOCOL]=NODEPORT or healthCheckNodePort=NODEPORT; the annotation is ignored"
                )
            };
            let (key, value) = part.split_once('=').ok_or_else(bad)?;
            let node_port: i32 = value.trim().parse().map_err(|_| bad())?;
            let key = key.trim();
            if key == "healthCheckNodePort" {
                r.health_check_node_port = Some(node_port);
                continue;
            }
            let (port, protocol) = key.split_once('/').unwrap_or((key, "TCP"));
            let port: i32 = port.parse().map_err(|_| bad())?;
            r.node_ports.push((port, protocol.to_owned(), node_port));
        }
    }
    Ok((!r.is_empty()).then_some(r))
}

fn items(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// `svc` with the requested values filled into the fields it leaves for automatic
/// allocation, each group only where the allocator in `a` would give it now; one
/// warning for each group it would not give, and (values retained by svcplane, which
/// the client did not ask for) one for each group it gives back. `a` is left as it was.
pub fn fill(a: &mut Allocators, svc: &Service, r: &Requested) -> (Service, Vec<String>) {
    let mut out = svc.clone();
    let mut warnings = Vec::new();
    let retained = matches!(r.origin, Origin::Retained(_));
    if let Some(candidate) = with_cluster_ips(&out, r) {
        let names = r.origin.names(true);
        match try_create(a, &candidate) {
            Ok(()) => {
                out = candidate;
                if retained {
                    warnings.push(format!("{names} given back: {}", r.cluster_ips.join(",")));
                }
            }
            Err(e) => warnings.push(format!(
                "{names} {} not given ({}); the Service gets automatic ClusterIPs",
                r.cluster_ips.join(","),
                why(&e)
            )),
        }
    }
    if let Some(candidate) = with_node_ports(&out, r) {
        let names = r.origin.names(false);
        match try_create(a, &candidate) {
            Ok(()) => {
                out = candidate;
                if retained {
                    warnings.push(format!("{names} given back: {}", r.node_ports_text()));
                }
            }
            Err(e) => warnings.push(format!(
                "{names} {} not given ({}); the Service gets automatic nodePorts",
                r.node_ports_text(),
                why(&e)
            )),
        }
    }
    (out, warnings)
}

/// The allocator's reason, without the `Service "x" is invalid` frame a refusal
/// carries: the first cause's detail, naming the value.
fn why(e: &ServiceError) -> String {
    e.causes()
        .first()
        .map(|c| c.detail.clone())
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| e.to_string())
}

/// Whether the allocator would admit `svc` as a create, taking nothing.
fn try_create(a: &mut Allocators, svc: &Service) -> Result<(), ServiceError> {
    let mut probe = svc.clone();
    let txn = a.allocate_create(&mut probe, false)?;
    a.revert(txn);
    Ok(())
}

/// `svc` with the requested ClusterIPs, when it asks for automatic ones (no
/// `clusterIP`, no `clusterIPs`; headless and ExternalName Services never do).
fn with_cluster_ips(svc: &Service, r: &Requested) -> Option<Service> {
    if r.cluster_ips.is_empty() {
        return None;
    }
    let view = SvcView::from_service(svc);
    if view.is_external_name() || !view.cluster_ip.is_empty() || !view.cluster_ips.is_empty() {
        return None;
    }
    let mut out = svc.clone();
    let spec = out.spec.get_or_insert_with(Default::default);
    spec.cluster_ip = r.cluster_ips.first().cloned();
    spec.cluster_ips = Some(r.cluster_ips.clone());
    Some(out)
}

/// `svc` with the requested nodePorts in the ports (and healthCheckNodePort) it leaves
/// unset; `None` when that changes nothing.
fn with_node_ports(svc: &Service, r: &Requested) -> Option<Service> {
    let view = SvcView::from_service(svc);
    let wants_ports = view.needs_node_port() && view.should_allocate_node_ports();
    let wants_hc = view.needs_health_check();
    if !wants_ports && !wants_hc {
        return None;
    }
    let mut out = svc.clone();
    let spec = out.spec.as_mut()?;
    let mut changed = false;
    for p in spec.ports.iter_mut().flatten().filter(|_| wants_ports) {
        if p.node_port.unwrap_or(0) != 0 {
            continue;
        }
        let protocol = p.protocol.as_deref().unwrap_or("TCP");
        if let Some((_, _, node_port)) = r
            .node_ports
            .iter()
            .find(|(port, proto, _)| *port == p.port && proto.eq_ignore_ascii_case(protocol))
        {
            p.node_port = Some(*node_port);
            changed = true;
        }
    }
    if let Some(hc) = r.health_check_node_port
        && wants_hc
        && spec.health_check_node_port.unwrap_or(0) == 0
    {
        spec.health_check_node_port = Some(hc);
        changed = true;
    }
    changed.then_some(out)
}
