//! The plan for people: what moves, in order, then what is left to the operator.

use std::fmt::Write as _;

use super::apply::ApplyReport;
use super::plan::{Manual, MigrationPlan, Side};

fn side(s: &Side) -> String {
    match &s.service_cidr {
        Some(name) => format!("{} (ServiceCIDR {name})", s.cidrs.join(",")),
        None => s.cidrs.join(","),
    }
}

/// The Services left to the operator, each with why and what to do.
fn left_to_you(out: &mut String, manual: &[Manual]) {
    if manual.is_empty() {
        return;
    }
    out.push_str("Left to you:\n");
    for m in manual {
        let _ = writeln!(
            out,
            "  {} ({}): {}",
            m.service,
            m.cluster_ips.join(","),
            m.reason
        );
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
    left_to_you(&mut out, &p.manual);
    let d = &p.expected_disruption;
    let secs = |ms: u64| format!("{:.1} s", ms as f64 / 1000.0);
    let _ = writeln!(
        out,
        "Expected for each recreated Service (measured, see docs/reference/migrate.md): no Service \
         object for {} (at most {}) between its delete and its create; its EndpointSlices back \
         {} after the delete (at most {}); clients calling it by name failed for {} (the cluster \
         DNS's TTL on the old address, then kube-proxy), and clients that cache the address \
         longer until they resolve the name again. A NodePort Service keeps its nodePorts but \
         they too answer only once kube-proxy has the new object. `--apply` recreates them.",
        secs(d.gap_ms_median),
        secs(d.gap_ms_max),
        secs(d.slices_ms_median),
        secs(d.slices_ms_max),
        secs(d.by_name_ms),
    );
    out
}

/// What `--apply` did; ends with a newline.
pub fn render_applied(r: &ApplyReport) -> String {
    let mut out = String::new();
    let resumed = r.moved.iter().filter(|m| m.resumed).count();
    let _ = writeln!(
        out,
        "Moved {} Service(s) from ServiceCIDR {} to {}{}",
        r.moved.len(),
        r.from,
        r.to,
        if resumed > 0 {
            format!(" ({resumed} finished from an interrupted run)")
        } else {
            String::new()
        }
    );
    for (what, mut times) in [
        (
            "without a Service between delete and create",
            r.moved.iter().map(|m| m.gap_ms).collect::<Vec<u64>>(),
        ),
        (
            "EndpointSlices back after the delete",
            r.moved.iter().filter_map(|m| m.slices_ms).collect(),
        ),
    ] {
        times.sort_unstable();
        if let (Some(median), Some(max)) = (times.get(times.len() / 2), times.last()) {
            let _ = writeln!(out, "  {what}: median {median} ms, max {max} ms");
        }
    }
    if !r.slow_slices.is_empty() {
        let _ = writeln!(
            out,
            "  no EndpointSlice within --slice-timeout for: {} (is an EndpointSlice controller running?)",
            r.slow_slices.join(", ")
        );
    }
    left_to_you(&mut out, &r.manual);
    let _ = writeln!(out, "{}", r.old_range);
    out
}

#[cfg(test)]
mod tests {
    use super::super::apply::{ApplyReport, Moved};
    use super::*;

    #[test]
    fn the_report_gives_the_count_the_gaps_and_what_is_left() {
        let moved = |name: &str, gap, slices, resumed| Moved {
            service: name.to_owned(),
            cluster_ips: vec!["10.210.0.40".into()],
            new_cluster_ips: vec!["10.212.0.40".into()],
            gap_ms: gap,
            slices_ms: slices,
            slices_missing: slices.is_none(),
            resumed,
        };
        let r = ApplyReport {
            from: "old".into(),
            to: "new".into(),
            moved: vec![
                moved("a/x", 80, Some(200), true),
                moved("a/y", 100, Some(300), false),
                moved("a/z", 120, None, false),
            ],
            manual: Vec::new(),
            slow_slices: vec!["a/z".into()],
            old_range: "ServiceCIDR old is gone".into(),
        };
        assert_eq!(
            render_applied(&r),
            "Moved 3 Service(s) from ServiceCIDR old to new (1 finished from an interrupted run)\n\
             \x20 without a Service between delete and create: median 100 ms, max 120 ms\n\
             \x20 EndpointSlices back after the delete: median 300 ms, max 300 ms\n\
             \x20 no EndpointSlice within --slice-timeout for: a/z (is an EndpointSlice controller running?)\n\
             ServiceCIDR old is gone\n"
        );
    }
}
