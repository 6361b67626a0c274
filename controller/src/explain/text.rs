//! The human form of every report: aligned columns, the decisive reason
//! first. Tools read `-o json` / `-o yaml` instead, which serialise the same
//! reports.

use std::fmt::Write as _;

use super::allocation::ValueReport;
use super::hints::{HintsReport, Outcome, ZoneShare, threshold_percent};
use super::legacy::EndpointsReport;
use super::pod::PodReport;
use super::range::{RangeBands, RangesReport};
use super::service::ServiceReport;
use super::slices::SlicesReport;

/// Appends `rows` as aligned columns (two spaces apart, the last column
/// unpadded), each line starting with `indent`.
fn table(out: &mut String, indent: &str, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = indent.to_owned();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[c] - cell.chars().count();
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

fn row<const N: usize>(cells: [&str; N]) -> Vec<String> {
    cells.iter().map(|s| (*s).to_owned()).collect()
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// `explain service`.
pub fn service(r: &ServiceReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Service {}/{}", r.namespace, r.name);
    let selector = r.selector.as_ref().map_or_else(
        || "(none)".to_owned(),
        |s| {
            s.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        },
    );
    let ports = if r.ports.is_empty() {
        "(none)".to_owned()
    } else {
        r.ports.join(", ")
    };
    table(
        &mut out,
        "  ",
        &[
            row(["selector:", &selector]),
            row(["ports:", &ports]),
            row(["address types:", &r.address_types.join(", ")]),
            row([
                "publishNotReadyAddresses:",
                if r.publish_not_ready_addresses {
                    "true"
                } else {
                    "false"
                },
            ]),
        ],
    );

    let selected =
        r.pods
            .iter()
            .filter(|p| {
                p.endpoint_slices.reason.as_ref().is_none_or(|reason| {
                    !matches!(reason, super::verdict::Reason::NotSelected { .. })
                })
            })
            .count();
    let _ = writeln!(
        out,
        "\nPods: {selected} selected, {} nearly selected (all selector labels but one)",
        r.pods.len() - selected
    );
    if !r.pods.is_empty() {
        let mut rows = vec![row(["POD", "VERDICT", "WHY"])];
        rows.extend(
            r.pods
                .iter()
                .map(|p| row([&p.pod, p.verdict.as_str(), &p.why])),
        );
        table(&mut out, "  ", &rows);
    }

    slices(&mut out, &r.endpoint_slices);
    endpoints(&mut out, r);
    hints(&mut out, &r.topology_hints);
    out
}

fn slices(out: &mut String, s: &SlicesReport) {
    out.push_str("\nEndpointSlices: ");
    if let Some(why) = &s.skipped {
        let _ = writeln!(out, "not managed ({why})");
        return;
    }
    let writes = s
        .slices
        .iter()
        .filter(|r| r.write != super::slices::Write::Unchanged)
        .count();
    if s.in_sync {
        out.push_str("in sync, no write\n");
    } else {
        let _ = writeln!(
            out,
            "{writes} write{} to make (the ones `svcplane plan` prints)",
            if writes == 1 { "" } else { "s" }
        );
    }
    let mut rows = vec![row([
        "NAME",
        "ADDRESS TYPE",
        "PORTS",
        "ENDPOINTS",
        "READY",
        "HINTED",
        "WRITE",
    ])];
    for sl in &s.slices {
        let write = if sl.changes.is_empty() {
            sl.write.as_str().to_owned()
        } else {
            format!("{}: {}", sl.write.as_str(), sl.changes.join(", "))
        };
        rows.push(vec![
            match (&sl.name, sl.new_slice) {
                (Some(name), _) => name.clone(),
                (None, Some(n)) => format!("(new {n})"),
                (None, None) => "(new)".to_owned(),
            },
            sl.address_type.clone(),
            if sl.ports.is_empty() {
                "(none)".to_owned()
            } else {
                sl.ports.join(",")
            },
            sl.endpoints.to_string(),
            sl.ready.to_string(),
            sl.hinted.to_string(),
            write,
        ]);
    }
    table(out, "  ", &rows);
    if let Some(e) = &s.sync_error {
        let _ = writeln!(out, "  sync fails (retried with backoff): {e}");
    }
    for e in &s.events {
        let _ = writeln!(out, "  event: {e}");
    }
}

fn endpoints(out: &mut String, r: &ServiceReport) {
    let e: &EndpointsReport = &r.endpoints;
    let _ = write!(out, "\nEndpoints {}/{}: ", r.namespace, r.name);
    if let Some(why) = &e.skipped {
        let _ = writeln!(out, "not managed ({why})");
        return;
    }
    let kept: usize = e
        .subsets
        .iter()
        .map(|s| s.ready.kept + s.not_ready.kept)
        .sum();
    let family = match (&e.address_type, r.address_types.len()) {
        (Some(f), n) if n > 1 => format!("{f} only, the Service's primary family"),
        (Some(f), _) => f.clone(),
        (None, _) => "family of each Pod's podIP".to_owned(),
    };
    let write = match e.write {
        "none" => "in sync, no write".to_owned(),
        w => format!("would {w} it"),
    };
    let _ = writeln!(out, "{kept} addresses ({family}); {write}");
    if e.truncated {
        let ready_cut = e.subsets.iter().any(|s| s.ready.kept < s.ready.wanted);
        let _ = writeln!(
            out,
            "  over capacity: {} addresses wanted, 1000 kept (annotation endpoints.kubernetes.io/over-capacity: truncated);",
            e.wanted
        );
        let _ = writeln!(
            out,
            "  {}; each list keeps its first addresses in address order",
            if ready_cut {
                "the ready addresses alone exceed 1000: every not-ready address is dropped and the 1000 are shared over the subsets in proportion to their ready addresses"
            } else {
                "the ready addresses fit: the rest of the 1000 is shared over the subsets' not-ready addresses in proportion"
            }
        );
    }
    if !e.subsets.is_empty() {
        let mut rows = vec![row(["SUBSET PORTS", "READY", "NOT READY"])];
        for s in &e.subsets {
            let count = |k: super::legacy::Kept| {
                if k.kept == k.wanted {
                    k.kept.to_string()
                } else {
                    format!("{} of {}", k.kept, k.wanted)
                }
            };
            rows.push(vec![
                if s.ports.is_empty() {
                    "(none)".to_owned()
                } else {
                    s.ports.join(",")
                },
                count(s.ready),
                count(s.not_ready),
            ]);
        }
        table(out, "  ", &rows);
    }
}

fn zone_rows(out: &mut String, zones: &[ZoneShare], with_hints: bool) {
    let mut rows = vec![if with_hints {
        row(["ZONE", "CPU SHARE", "DESIRED", "MINIMUM", "HINTS"])
    } else {
        row(["ZONE", "CPU SHARE", "DESIRED", "MINIMUM"])
    }];
    for z in zones {
        let mut r = vec![
            z.zone.clone(),
            format!("{:.3}", z.cpu_ratio),
            format!("{:.2}", z.desired),
            z.minimum.to_string(),
        ];
        if with_hints {
            r.push(z.hints.map_or_else(String::new, |h| h.to_string()));
        }
        rows.push(r);
    }
    table(out, "    ", &rows);
}

fn hints(out: &mut String, h: &HintsReport) {
    let _ = writeln!(
        out,
        "\nTopology hints: {} ({})",
        h.mode.mode, h.mode.decided_by
    );
    for i in &h.mode.ignored {
        let _ = writeln!(out, "  ignored: {i}");
    }
    for p in &h.passes {
        let counts = format!("{} hinted now, {} after", p.hinted_before, p.hinted_after);
        match &p.outcome {
            Outcome::Allocated { zones } => {
                let _ = writeln!(
                    out,
                    "  {}: hints allocated by zone CPU share ({counts})",
                    p.address_type
                );
                zone_rows(out, zones, true);
            }
            Outcome::SafeguardTripped {
                safeguard,
                message,
                node,
                zones,
                endpoints_without_zone,
            } => {
                let _ = writeln!(
                    out,
                    "  {}: OFF, safeguard {safeguard}: {message} ({counts})",
                    p.address_type
                );
                if let Some(n) = node {
                    let _ = writeln!(
                        out,
                        "    Node {n} is ready, not control-plane, and has no zone label or no allocatable CPU"
                    );
                }
                if !zones.is_empty() {
                    let total: usize = zones.iter().map(|z| z.minimum).sum();
                    let _ = writeln!(
                        out,
                        "    every zone needs its minimum to keep overload under {}; the minimums add up to {total}:",
                        threshold_percent()
                    );
                    zone_rows(out, zones, false);
                }
                if !endpoints_without_zone.is_empty() {
                    let _ = writeln!(
                        out,
                        "    endpoints without a zone: {}",
                        endpoints_without_zone.join(", ")
                    );
                }
            }
            Outcome::SameZone { same_node } => {
                let _ = writeln!(
                    out,
                    "  {}: {} on every ready endpoint ({counts})",
                    p.address_type,
                    if *same_node {
                        "hints to its own zone and Node"
                    } else {
                        "hints to its own zone"
                    }
                );
            }
            Outcome::Off { removed } => {
                let _ = writeln!(
                    out,
                    "  {}: no hints{} ({counts})",
                    p.address_type,
                    if *removed > 0 {
                        format!("; the {removed} stored ones are removed")
                    } else {
                        String::new()
                    }
                );
            }
        }
        if let Some(zones) = &p.stored_overloaded {
            let _ = writeln!(
                out,
                "    the stored hints are overloaded (a zone has fewer than its minimum): a Node change re-syncs this Service"
            );
            zone_rows(out, zones, true);
        }
    }
}

/// `explain pod`.
pub fn pod(r: &PodReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Pod {}/{}", r.namespace, r.name);
    let ips = if r.ips.is_empty() {
        "(none)".to_owned()
    } else {
        r.ips.join(", ")
    };
    table(
        &mut out,
        "  ",
        &[
            row(["phase:", r.phase.as_deref().unwrap_or("(unset)")]),
            row([
                "ready:",
                &format!(
                    "{}{}",
                    r.ready,
                    if r.terminating { " (terminating)" } else { "" }
                ),
            ]),
            row(["IPs:", &ips]),
            row(["node:", r.node.as_deref().unwrap_or("(not scheduled)")]),
        ],
    );
    if r.services.is_empty() {
        out.push_str("\nNo Service in the namespace selects it, or nearly does.\n");
        return out;
    }
    out.push('\n');
    let mut rows = vec![row(["SERVICE", "SELECTS", "VERDICT", "WHY"])];
    for s in &r.services {
        rows.push(vec![
            s.service.clone(),
            yes_no(s.selected).to_owned(),
            s.verdict.verdict.as_str().to_owned(),
            s.verdict.why.clone(),
        ]);
    }
    table(&mut out, "", &rows);
    out
}

/// `explain ip` / `explain nodeport`.
pub fn value(r: &ValueReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} {}", r.kind, r.value);
    if r.holders.is_empty() {
        out.push_str("  held by:  nobody\n");
    } else {
        out.push_str("  held by:\n");
        let rows: Vec<Vec<String>> = r
            .holders
            .iter()
            .map(|h| {
                vec![
                    h.kind.to_owned(),
                    h.name.clone(),
                    h.service
                        .as_ref()
                        .map_or_else(String::new, |s| format!("for {s}")),
                    h.detail.clone(),
                ]
            })
            .collect();
        table(&mut out, "    ", &rows);
    }
    for h in &r.inert_claims {
        let _ = writeln!(out, "  also: {} {}: {}", h.kind, h.name, h.detail);
    }
    let _ = writeln!(
        out,
        "  range:    {}",
        match &r.range.range {
            Some(range) => format!("{range}: {}", r.range.detail),
            None => r.range.detail.clone(),
        }
    );
    let _ = writeln!(out, "  webhook:  {}", r.webhook.summary);
    if let Some(m) = &r.webhook.message {
        let _ = writeln!(out, "            {m}");
    }
    for w in &r.webhook.warnings {
        let _ = writeln!(out, "            Warning: {w}");
    }
    for n in &r.notes {
        let _ = writeln!(out, "  note:     {n}");
    }
    out
}

/// `explain range`: one block per range, its bands as a table.
pub fn ranges(r: &RangesReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "ClusterIP ranges, from {}:", r.cluster_ip_source);
    for range in &r.cluster_ip_ranges {
        range_block(&mut out, range);
    }
    out.push_str("NodePort range, from --service-node-port-range:\n");
    range_block(&mut out, &r.node_port_range);
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

fn range_block(out: &mut String, r: &RangeBands) {
    let objects = if r.service_cidrs.is_empty() {
        String::new()
    } else {
        format!(", ServiceCIDR {}", r.service_cidrs.join(", "))
    };
    let state = if r.hands_out {
        ""
    } else {
        ", hands out nothing (its ServiceCIDRs are being deleted or not ready)"
    };
    let retained = if r.retained > 0 {
        format!(" ({} retained for deleted Services)", r.retained)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "  {} ({}{objects}): {} of {} used{retained}{state}",
        r.range, r.kind, r.used, r.size
    );
    if let Some(serves) = &r.serves {
        let _ = writeln!(out, "    serves only {serves}");
    }
    if let Some(m) = &r.moving {
        let flight = if m.in_flight.is_empty() {
            "no Service between its delete and its create".to_owned()
        } else {
            format!(
                "{} Service(s) deleted and not created yet: {}",
                m.in_flight.len(),
                m.in_flight.join(", ")
            )
        };
        let _ = writeln!(
            out,
            "    svcplane migrate is moving its Services to ServiceCIDR {} (journal {}): {flight}",
            m.to, m.journal
        );
    }
    // The retained column only where values are retained, so the usual table stays.
    let mut header = vec!["band", "values", "size", "used"];
    if r.retained > 0 {
        header.push("retained");
    }
    header.push("free");
    let mut rows = vec![header.into_iter().map(str::to_owned).collect::<Vec<_>>()];
    for (name, band) in [
        ("static", r.static_band.as_ref()),
        ("dynamic", Some(&r.dynamic_band)),
    ] {
        if let Some(b) = band {
            let mut cells = vec![
                name.to_owned(),
                format!("{}-{}", b.first, b.last),
                b.size.to_string(),
                b.used.to_string(),
            ];
            if r.retained > 0 {
                cells.push(b.retained.to_string());
            }
            cells.push(b.free.to_string());
            rows.push(cells);
        }
    }
    table(out, "    ", &rows);
    let _ = writeln!(
        out,
        "    automatic picks before the static band: {}{}",
        r.picks_before_static,
        if r.static_band.is_none() {
            " (too small for a static band)"
        } else {
            ""
        }
    );
    if !r.top_namespaces.is_empty() {
        let top: Vec<String> = r
            .top_namespaces
            .iter()
            .map(|n| format!("{} {}", n.namespace, n.values))
            .collect();
        let _ = writeln!(out, "    most held by: {}", top.join(", "));
    }
}
