//! The plan for people: what moves, in order, then what is left to the operator.

use std::fmt::Write as _;

use super::plan::{MigrationPlan, Side};

fn side(s: &Side) -> String {
    match &s.service_cidr {
        Some(name) => format!("{} (ServiceCIDR {name})", s.cidrs.join(",")),
        None => s.cidrs.join(","),
    }
}

/// The whole plan; ends with a newline.
pub fn render(p: &MigrationPlan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Move from {} to {}", side(&p.from), side(&p.to));
    let _ = writeln!(
        out,
        "  {} Service(s) to recreate, {} left to you, {} headless (nothing to move)",
        p.moves.len(),
        p.manual.len(),
        p.headless
    );
    if !p.moves.is_empty() {
        out.push_str("Recreate, one at a time, in this order (same spec but the ClusterIPs):\n");
        let width = p.moves.iter().map(|m| m.service.len()).max().unwrap_or(0);
        for (i, m) in p.moves.iter().enumerate() {
            let ports = if m.node_ports.is_empty() {
                String::new()
            } else {
                let list: Vec<String> = m.node_ports.iter().map(ToString::to_string).collect();
                format!("  nodePorts {} kept", list.join(","))
            };
            let _ = writeln!(
                out,
                "  {:>3}  {:width$}  {} -> {}{ports}",
                i + 1,
                m.service,
                m.cluster_ips.join(","),
                m.new_cluster_ips.join(","),
            );
        }
    }
    if !p.manual.is_empty() {
        out.push_str("Left to you:\n");
        for m in &p.manual {
            let _ = writeln!(
                out,
                "  {} ({}): {}",
                m.service,
                m.cluster_ips.join(","),
                m.reason
            );
        }
    }
    out.push_str(
        "Each recreated Service is unreachable at its ClusterIP from its delete until kube-proxy \
         has programmed the new address, and its clients that cached the old address (DNS TTL) \
         until they resolve its name again. `svcplane migrate` only plans: recreating (--apply) \
         is not built yet.\n",
    );
    out
}
