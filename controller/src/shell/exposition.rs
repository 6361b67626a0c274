//! The Prometheus text format (0.0.4) that kube-controller-manager serves, made from
//! prometheus-client's OpenMetrics output.
//!
//! prometheus-client only writes OpenMetrics, where every counter sample ends in
//! `_total`. kube-controller-manager serves the older text format, in which a counter
//! is named exactly as registered, and three of its counters were registered without
//! the suffix (`endpoint_slice_controller_changes`, `endpoint_slice_controller_syncs`,
//! `endpoint_slice_mirroring_controller_changes`). Queries written against upstream
//! use those bare names, so `/metrics` rewrites the OpenMetrics text line by line:
//! counter families get their sample name in `# HELP`/`# TYPE`, the listed counters
//! lose the suffix, info families become gauges, `# UNIT`/`# EOF` go. A line-level
//! rewrite is enough because the encoder's output is regular: one `# HELP`, one
//! `# TYPE`, optionally `# UNIT`, then that family's samples.

/// Counters kube-controller-manager registers without the `_total` suffix.
pub const COUNTERS_WITHOUT_TOTAL: [&str; 3] = [
    "endpoint_slice_controller_changes",
    "endpoint_slice_controller_syncs",
    "endpoint_slice_mirroring_controller_changes",
];

/// The Content-Type of [`to_prometheus_text`]'s output.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How one family's sample names change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rename {
    /// Samples keep their names.
    Keep,
    /// `<family>_total` samples become `<family>`.
    DropTotal,
}

/// Rewrites an OpenMetrics exposition into the Prometheus text format.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    let mut family = "";
    let mut rename = Rename::Keep;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            // Held back until the TYPE line says which name the family is shown under.
            help = Some(rest);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            family = name;
            rename = Rename::Keep;
            let (shown, kind) = match kind {
                "counter" if COUNTERS_WITHOUT_TOTAL.contains(&name) => {
                    rename = Rename::DropTotal;
                    (name.to_owned(), "counter")
                }
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_owned(), "untyped"),
                other => (name.to_owned(), other),
            };
            if let Some(h) = help.take() {
                let text = h.split_once(' ').map_or("", |(_, t)| t);
                out.push_str(&format!("# HELP {shown} {text}\n"));
            }
            out.push_str(&format!("# TYPE {shown} {kind}\n"));
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        if rename == Rename::DropTotal
            && let Some(rest) = line.strip_prefix(family)
            && let Some(after) = rest.strip_prefix("_total")
            && (after.starts_with('{') || after.starts_with(' '))
        {
            out.push_str(family);
            out.push_str(after);
            out.push('\n');
            continue;
        }
        if !family.is_empty()
            && line
                .strip_prefix(family)
                .is_some_and(|r| r.starts_with("_created"))
        {
            // Creation timestamps are an OpenMetrics notion; the text format has none.
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
# HELP endpoint_slice_controller_changes Number of EndpointSlice changes.
# TYPE endpoint_slice_controller_changes counter
endpoint_slice_controller_changes_total{operation=\"create\"} 2
# HELP svcplane_api_writes API writes.
# TYPE svcplane_api_writes counter
svcplane_api_writes_total{verb=\"create\",resource=\"endpointslices\"} 1
svcplane_api_writes_created{verb=\"create\",resource=\"endpointslices\"} 1700000000.0
# HELP workqueue_depth Current depth.
# TYPE workqueue_depth gauge
workqueue_depth{name=\"endpoint_slice\"} 0
# HELP svcplane_build Build.
# TYPE svcplane_build info
svcplane_build_info{version=\"1\"} 1
# HELP svcplane_x_seconds Seconds.
# TYPE svcplane_x_seconds histogram
# UNIT svcplane_x_seconds seconds
svcplane_x_seconds_sum 0.0
svcplane_x_seconds_count 0
svcplane_x_seconds_bucket{le=\"+Inf\"} 0
# EOF
";

    #[test]
    fn upstream_counters_without_total_keep_their_bare_name() {
        let text = to_prometheus_text(SAMPLE);
        assert!(text.contains("# TYPE endpoint_slice_controller_changes counter\n"));
        assert!(text.contains("endpoint_slice_controller_changes{operation=\"create\"} 2\n"));
        assert!(
            !text.contains("endpoint_slice_controller_changes_total"),
            "{text}"
        );
    }

    #[test]
    fn other_counters_are_named_by_their_samples() {
        let text = to_prometheus_text(SAMPLE);
        assert!(
            text.contains("# HELP svcplane_api_writes_total API writes.\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE svcplane_api_writes_total counter\n"));
        assert!(text.contains(
            "svcplane_api_writes_total{verb=\"create\",resource=\"endpointslices\"} 1\n"
        ));
        assert!(!text.contains("_created"), "{text}");
    }

    #[test]
    fn openmetrics_only_lines_and_types_are_translated() {
        let text = to_prometheus_text(SAMPLE);
        assert!(
            text.contains("# TYPE svcplane_build_info gauge\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE svcplane_x_seconds histogram\n"));
        assert!(text.contains("svcplane_x_seconds_bucket{le=\"+Inf\"} 0\n"));
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        assert!(text.contains("workqueue_depth{name=\"endpoint_slice\"} 0\n"));
    }

    #[test]
    fn the_real_registry_reads_as_kube_controller_manager_names_it() {
        let m = crate::shell::metrics::Metrics::new();
        m.endpoint_slice()
            .syncs
            .get_or_create(&crate::shell::metrics::ResultLabels { result: "success" })
            .inc();
        m.api_write("create", "endpointslices");
        let text = to_prometheus_text(&m.encode());
        assert!(
            text.contains("endpoint_slice_controller_syncs{result=\"success\"} 1\n"),
            "{text}"
        );
        assert!(text.contains(
            "svcplane_api_writes_total{verb=\"create\",resource=\"endpointslices\"} 1\n"
        ));
        // Every sample line still belongs to a family declared just above it.
        let mut declared = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.insert(rest.split(' ').next().unwrap_or_default().to_owned());
            } else if !line.starts_with('#') && !line.is_empty() {
                let name = line.split(['{', ' ']).next().unwrap_or_default();
                let family_known = declared.contains(name)
                    || ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|s| name.strip_suffix(s).is_some_and(|b| declared.contains(b)));
                assert!(family_known, "sample {line:?} without its # TYPE");
            }
        }
    }
}
