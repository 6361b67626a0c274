//! A flat, defaulted view of the Service fields allocation reads and writes.
//!
//! k8s-openapi models every field as an `Option`; upstream's internal API works on
//! zero values (`""`, `0`, nil slices). Converting once into this view keeps the
//! family and allocation rules readable and 1:1 with upstream, and [`SvcView::write_to`]
//! puts back only the fields allocation owns.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};

/// `spec.type` values.
pub const TYPE_CLUSTER_IP: &str = "ClusterIP";
/// `NodePort`.
pub const TYPE_NODE_PORT: &str = "NodePort";
/// `LoadBalancer`.
pub const TYPE_LOAD_BALANCER: &str = "LoadBalancer";
/// `ExternalName`.
pub const TYPE_EXTERNAL_NAME: &str = "ExternalName";
/// Headless marker.
pub const CLUSTER_IP_NONE: &str = "None";
/// `SingleStack`.
pub const SINGLE_STACK: &str = "SingleStack";
/// `PreferDualStack`.
pub const PREFER_DUAL_STACK: &str = "PreferDualStack";
/// `RequireDualStack`.
pub const REQUIRE_DUAL_STACK: &str = "RequireDualStack";

/// One `spec.ports[i]` entry, defaulted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortView {
    /// `name` (`""` if unset).
    pub name: String,
    /// `protocol` (scheme default `TCP`).
    pub protocol: String,
    /// `port`.
    pub port: i32,
    /// `nodePort` (`0` if unset).
    pub node_port: i32,
}

/// The allocation-relevant part of a Service, with scheme defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SvcView {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `spec.type` (scheme default `ClusterIP`).
    pub type_: String,
    /// `spec.clusterIP`.
    pub cluster_ip: String,
    /// `spec.clusterIPs`.
    pub cluster_ips: Vec<String>,
    /// `spec.ipFamilies`.
    pub ip_families: Vec<String>,
    /// `spec.ipFamilyPolicy` (nil stays `None`; the registry defaults it).
    pub ip_family_policy: Option<String>,
    /// `spec.selector` is empty or unset.
    pub selectorless: bool,
    /// `spec.ports`.
    pub ports: Vec<PortView>,
    /// `spec.healthCheckNodePort`.
    pub health_check_node_port: i32,
    /// `spec.externalTrafficPolicy` (`""` if unset).
    pub external_traffic_policy: String,
    /// `spec.allocateLoadBalancerNodePorts` (scheme default `true` for LoadBalancer).
    pub allocate_lb_node_ports: Option<bool>,
}

impl SvcView {
    /// Read a Service, applying the scheme defaults allocation depends on (WH-8.6).
    pub fn from_service(svc: &Service) -> Self {
        let default_spec = ServiceSpec::default();
        let spec = svc.spec.as_ref().unwrap_or(&default_spec);
        let type_ = spec
            .type_
            .clone()
            .unwrap_or_else(|| TYPE_CLUSTER_IP.to_string());
        let allocate_lb_node_ports = match spec.allocate_load_balancer_node_ports {
            None if type_ == TYPE_LOAD_BALANCER => Some(true),
            v => v,
        };
        Self {
            name: svc.metadata.name.clone().unwrap_or_default(),
            namespace: svc.metadata.namespace.clone().unwrap_or_default(),
            cluster_ip: spec.cluster_ip.clone().unwrap_or_default(),
            cluster_ips: spec.cluster_ips.clone().unwrap_or_default(),
            ip_families: spec.ip_families.clone().unwrap_or_default(),
            ip_family_policy: spec.ip_family_policy.clone(),
            selectorless: spec.selector.as_ref().is_none_or(|s| s.is_empty()),
            ports: spec
                .ports
                .iter()
                .flatten()
                .map(|p: &ServicePort| PortView {
                    name: p.name.clone().unwrap_or_default(),
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_string()),
                    port: p.port,
                    node_port: p.node_port.unwrap_or(0),
                })
                .collect(),
            health_check_node_port: spec.health_check_node_port.unwrap_or(0),
            external_traffic_policy: spec.external_traffic_policy.clone().unwrap_or_default(),
            allocate_lb_node_ports,
            type_,
        }
    }

    /// Write the allocation-owned fields back: clusterIP(s), ipFamilies, ipFamilyPolicy,
    /// nodePorts and healthCheckNodePort. Other fields are left as they were.
    pub fn write_to(&self, svc: &mut Service) {
        let spec = svc.spec.get_or_insert_with(ServiceSpec::default);
        let opt_s = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let opt_v = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        spec.cluster_ip = opt_s(&self.cluster_ip);
        spec.cluster_ips = opt_v(&self.cluster_ips);
        spec.ip_families = opt_v(&self.ip_families);
        spec.ip_family_policy = self.ip_family_policy.clone();
        if let Some(ports) = spec.ports.as_mut() {
            for (p, v) in ports.iter_mut().zip(&self.ports) {
                p.node_port = (v.node_port != 0).then_some(v.node_port);
            }
        }
        spec.health_check_node_port =
            (self.health_check_node_port != 0).then_some(self.health_check_node_port);
    }

    /// `type: ExternalName`.
    pub fn is_external_name(&self) -> bool {
        self.type_ == TYPE_EXTERNAL_NAME
    }

    /// `clusterIPs == ["None"]` (validation's `isHeadlessService`).
    pub fn is_headless(&self) -> bool {
        self.cluster_ips.len() == 1 && self.cluster_ips[0] == CLUSTER_IP_NONE
    }

    /// Upstream `needsClusterIP`: every type but ExternalName.
    pub fn needs_cluster_ip(&self) -> bool {
        !self.is_external_name()
    }

    /// Upstream `needsNodePort`: NodePort or LoadBalancer.
    pub fn needs_node_port(&self) -> bool {
        self.type_ == TYPE_NODE_PORT || self.type_ == TYPE_LOAD_BALANCER
    }

    /// Upstream `NeedsHealthCheck`: LoadBalancer with `externalTrafficPolicy: Local`.
    pub fn needs_health_check(&self) -> bool {
        self.type_ == TYPE_LOAD_BALANCER && self.external_traffic_policy == "Local"
    }

    /// Upstream `shouldAllocateNodePorts`.
    pub fn should_allocate_node_ports(&self) -> bool {
        match self.type_.as_str() {
            TYPE_NODE_PORT => true,
            TYPE_LOAD_BALANCER => self.allocate_lb_node_ports.unwrap_or(true),
            _ => false,
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Non-zero nodePorts in port order (upstream `collectServiceNodePorts` of alloc.go).
    pub fn node_ports(&self) -> Vec<i32> {
        self.ports
            .iter()
            .filter(|p| p.node_port != 0)
            .map(|p| p.node_port)
            .collect()
    }
}
