//! What one side measured, and the side-by-side table of a workload.
//!
//! Every row shows upstream, svcplane and their ratio (svcplane / upstream; empty where
//! a side did not run or upstream's figure is zero), so a reader compares without
//! arithmetic. Findings of the correctness checks follow the table.

use std::fmt::Write as _;
use std::time::Duration;

use super::Side;
use super::observer::{Kind, Verb, Writes};
use crate::sim::floor::Floor;
use crate::sim::observe::LatencySummary;

/// The figures of one side of one workload.
#[derive(Debug, Clone, Default)]
pub struct SideResult {
    pub writes: Writes,
    /// What a pure plan from the measured start to the end state writes.
    pub floor: Floor,
    pub slice_latency: LatencySummary,
    pub endpoints_latency: LatencySummary,
    /// Controller CPU seconds over the measured span.
    pub cpu_seconds: f64,
    /// Controller peak RSS (bytes) at the end.
    pub peak_rss: u64,
    /// How long the driver took to make its changes.
    pub driver: Duration,
    /// From the measured start (controller spawn for `cold`, the driver's first change
    /// otherwise) to every change reflected; `None`: timed out.
    pub converged: Option<Duration>,
    /// From the measured start to the last write seen.
    pub last_write: Option<Duration>,
    /// Findings of [`super::state::check`] (empty: PASS).
    pub problems: Vec<String>,
    /// What a fresh pure plan of the end state would still write (svcplane's view).
    pub replan: Vec<String>,
    /// Watch restarts that relisted (figures may be short).
    pub resyncs: u64,
}

impl SideResult {
    pub fn passed(&self) -> bool {
        self.problems.is_empty() && self.converged.is_some()
    }
}

/// One cell of the table.
#[derive(Debug, Clone)]
enum Cell {
    Count(u64),
    Number(f64, usize),
    Text(String),
}

impl Cell {
    /// The value as shown (rounded), so a ratio never divides by a hidden remainder.
    fn value(&self) -> Option<f64> {
        match self {
            Cell::Count(n) => Some(*n as f64),
            Cell::Number(x, p) => {
                let unit = 10f64.powi(i32::try_from(*p).unwrap_or(0));
                Some((x * unit).round() / unit)
            }
            Cell::Text(_) => None,
        }
    }

    fn render(&self) -> String {
        match self {
            Cell::Count(n) => n.to_string(),
            Cell::Number(x, p) => format!("{x:.p$}"),
            Cell::Text(t) => t.clone(),
        }
    }
}

/// svcplane / upstream, when both are numbers and upstream's is not zero.
pub fn ratio(upstream: Option<f64>, svcplane: Option<f64>) -> String {
    match (upstream, svcplane) {
        (Some(u), Some(s)) if u > 0.0 => format!("{:.2}", s / u),
        _ => String::new(),
    }
}

fn secs(d: Duration) -> Cell {
    Cell::Number(d.as_secs_f64(), 3)
}

fn opt_secs(d: Option<Duration>, missing: &str) -> Cell {
    d.map_or_else(|| Cell::Text(missing.into()), secs)
}

type Row = (String, fn(&SideResult) -> Cell);

fn rows() -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    macro_rules! write_row {
        ($kind:expr, $verb:expr) => {
            rows.push((format!("writes {} {}", $kind.name(), $verb.name()), |r| {
                Cell::Count(r.writes.get($kind, $verb))
            }));
        };
    }
    write_row!(Kind::EndpointSlices, Verb::Create);
    write_row!(Kind::EndpointSlices, Verb::Update);
    write_row!(Kind::EndpointSlices, Verb::Delete);
    write_row!(Kind::Endpoints, Verb::Create);
    write_row!(Kind::Endpoints, Verb::Update);
    write_row!(Kind::Endpoints, Verb::Delete);
    let more: [Row; 20] = [
        ("writes total".into(), |r| Cell::Count(r.writes.total())),
        ("write floor (pure plan)".into(), |r| {
            Cell::Count(r.floor.total())
        }),
        ("write bytes (MiB, JSON)".into(), |r| {
            Cell::Number(r.writes.bytes as f64 / 1_048_576.0, 2)
        }),
        ("slice latency p50 (s)".into(), |r| {
            secs(r.slice_latency.p50)
        }),
        ("slice latency p99 (s)".into(), |r| {
            secs(r.slice_latency.p99)
        }),
        ("slice latency max (s)".into(), |r| {
            secs(r.slice_latency.max)
        }),
        ("slice changes tracked".into(), |r| {
            Cell::Count(r.slice_latency.transitions)
        }),
        ("slice changes never reflected".into(), |r| {
            Cell::Count(r.slice_latency.never_reflected)
        }),
        ("Endpoints latency p50 (s)".into(), |r| {
            secs(r.endpoints_latency.p50)
        }),
        ("Endpoints latency p99 (s)".into(), |r| {
            secs(r.endpoints_latency.p99)
        }),
        ("Endpoints latency max (s)".into(), |r| {
            secs(r.endpoints_latency.max)
        }),
        ("Endpoints changes never reflected".into(), |r| {
            Cell::Count(r.endpoints_latency.never_reflected)
        }),
        ("controller CPU (s)".into(), |r| {
            Cell::Number(r.cpu_seconds, 2)
        }),
        ("controller peak RSS (MiB)".into(), |r| {
            Cell::Number(r.peak_rss as f64 / 1_048_576.0, 0)
        }),
        ("driver time (s)".into(), |r| secs(r.driver)),
        ("converged after (s)".into(), |r| {
            opt_secs(r.converged, "timeout")
        }),
        ("last write after (s)".into(), |r| {
            opt_secs(r.last_write, "-")
        }),
        ("watch resyncs".into(), |r| Cell::Count(r.resyncs)),
        ("final state check".into(), |r| {
            Cell::Text(if r.passed() { "PASS" } else { "FAIL" }.into())
        }),
        ("re-plan writes (pure plan)".into(), |r| {
            Cell::Count(r.replan.len() as u64)
        }),
    ];
    rows.extend(more);
    rows
}

/// The table of one workload: `title`, a description line, then one row per figure.
pub fn render(
    title: &str,
    description: &str,
    upstream: Option<&SideResult>,
    svcplane: Option<&SideResult>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "== {title}: {description}");
    let _ = writeln!(
        out,
        "{:<36} {:>12} {:>12} {:>8}",
        "", "upstream", "svcplane", "ratio"
    );
    for (label, get) in rows() {
        let u = upstream.map(get);
        let s = svcplane.map(get);
        let cell = |c: &Option<Cell>| c.as_ref().map_or_else(|| "-".to_owned(), Cell::render);
        let _ = writeln!(
            out,
            "{label:<36} {:>12} {:>12} {:>8}",
            cell(&u),
            cell(&s),
            ratio(u.and_then(|c| c.value()), s.and_then(|c| c.value()))
        );
    }
    for (side, r) in [(Side::Upstream, upstream), (Side::Svcplane, svcplane)] {
        let Some(r) = r else { continue };
        if r.converged.is_none() {
            let _ = writeln!(out, "{}: did not converge before the timeout", side.name());
        }
        for p in &r.problems {
            let _ = writeln!(out, "{} FAIL: {p}", side.name());
        }
        for p in r.replan.iter().take(3) {
            let _ = writeln!(out, "{} re-plan: {p}", side.name());
        }
    }
    out
}

/// The machine: processors, CPU model and memory, from `/proc`.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, m)| m.trim())
        })
        .unwrap_or("unknown CPU");
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem = crate::sim::measure::parse_status_bytes(&meminfo, "MemTotal").unwrap_or(0);
    format!(
        "{cpus} CPUs ({model}), {:.1} GiB memory",
        mem as f64 / 1_073_741_824.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_need_both_sides_and_a_nonzero_upstream() {
        assert_eq!(ratio(Some(901.0), Some(1185.0)), "1.32");
        assert_eq!(ratio(Some(0.0), Some(3.0)), "");
        assert_eq!(ratio(None, Some(3.0)), "");
        assert_eq!(Cell::Number(0.0004, 3).value(), Some(0.0));
        assert_eq!(Cell::Number(1.2345, 2).value(), Some(1.23));
    }

    #[test]
    fn a_table_has_every_row_and_the_findings() {
        let up = SideResult {
            converged: Some(Duration::from_secs(2)),
            ..SideResult::default()
        };
        let sp = SideResult {
            problems: vec!["ns/svc: no Endpoints object".into()],
            ..up.clone()
        };
        let t = render("cold", "x", Some(&up), Some(&sp));
        assert!(t.contains("writes endpointslices create"));
        assert!(t.contains("final state check"));
        assert!(t.contains("PASS") && t.contains("FAIL"));
        assert!(t.contains("svcplane FAIL: ns/svc: no Endpoints object"));
        assert_eq!(t.lines().count(), 2 + rows().len() + 1);
        assert!(machine().contains("CPUs"));
    }
}
