//! A re-created Service asks, without knowing it, for the values retained for its name.
//!
//! When a Service is deleted under `--retain-released-values` its values stay claimed
//! for its namespace and name ([`crate::state::retention`]). A create under that name
//! that leaves its values to the allocator is then reviewed as if it had asked for them
//! by annotation ([`super::requested`]): each group is given back where the allocator
//! would give it, with a warning that says so, else left to automatic allocation with a
//! warning naming why. A create that asks by annotation, or sets values itself, keeps
//! what it asked for.

use k8s_openapi::api::core::v1::Service;

use svcplane_allocator::Claim;

use super::requested::{Origin, Requested};
use crate::state::ServiceRef;
use crate::state::retention::{Retained, Role};

/// The request the retained values make for `svc` (`None` when nothing is retained).
///
/// ClusterIPs go in the order of the fields they filled; a Service that does not ask
/// for both families gets back only the one that was its primary. nodePorts go back to
/// the port (number and protocol) that had them; a value whose field is not known is
/// left alone.
pub fn request(svc: &Service, me: &ServiceRef, retained: &[Retained]) -> Option<Requested> {
    let mut ips: Vec<(u8, String)> = Vec::new();
    let mut r = Requested::default();
    for v in retained {
        match (v.value, v.role) {
            (Claim::Ip(ip), Some(Role::ClusterIp(i))) => {
                ips.push((i, ip.to_string()));
            }
            (Claim::NodePort(np), Some(Role::Port { port, protocol })) => {
                r.node_ports.push((port, protocol.as_str().to_owned(), np));
            }
            (Claim::NodePort(np), Some(Role::HealthCheck)) => {
                r.health_check_node_port = Some(np);
            }
            _ => {}
        }
    }
    ips.sort();
    let dual = svc
        .spec
        .as_ref()
        .and_then(|s| s.ip_family_policy.as_deref())
        .is_some_and(|p| p != "SingleStack");
    if !dual {
        ips.retain(|(i, _)| *i == 0);
    }
    r.cluster_ips = ips.into_iter().map(|(_, ip)| ip).collect();
    r.origin = Origin::Retained(format!("{}/{}", me.namespace, me.name));
    let empty =
        r.cluster_ips.is_empty() && r.node_ports.is_empty() && r.health_check_node_port.is_none();
    (!empty).then_some(r)
}
