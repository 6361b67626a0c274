//! The ClusterIPs and nodePorts a Service holds, as addresses and numbers (a value
//! that does not parse is left out: the API server validates them, a dump may not).

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use svcplane_allocator::range::parse_ip_sloppy;

/// `spec.clusterIPs`, else `spec.clusterIP`; `None` (headless) is not an address.
pub fn cluster_ips(svc: &Service) -> Vec<IpAddr> {
    let Some(spec) = svc.spec.as_ref() else {
        return Vec::new();
    };
    spec.cluster_ips
        .clone()
        .filter(|v| !v.is_empty())
        .or_else(|| spec.cluster_ip.clone().map(|c| vec![c]))
        .unwrap_or_default()
        .iter()
        .filter_map(|s| parse_ip_sloppy(s))
        .collect()
}

/// Every `spec.ports[].nodePort`, then `spec.healthCheckNodePort`.
pub fn node_ports(svc: &Service) -> Vec<i32> {
    let Some(spec) = svc.spec.as_ref() else {
        return Vec::new();
    };
    spec.ports
        .iter()
        .flatten()
        .filter_map(|p| p.node_port)
        .chain(spec.health_check_node_port)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_of_a_dual_stack_node_port_service_and_a_headless_one() {
        let svc: Service = serde_json::from_value(json!({
            "spec": {"clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5", "fd00::5"],
                     "ports": [{"port": 80, "nodePort": 30080}, {"port": 81}],
                     "healthCheckNodePort": 32000}
        }))
        .unwrap();
        assert_eq!(cluster_ips(&svc).len(), 2);
        assert_eq!(node_ports(&svc), [30080, 32000]);
        let headless: Service =
            serde_json::from_value(json!({"spec": {"clusterIP": "None"}})).unwrap();
        assert!(cluster_ips(&headless).is_empty());
    }
}
