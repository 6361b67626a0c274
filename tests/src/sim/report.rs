//! What a trace measured, and its table.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::Duration;

use super::floor::Floor;
use super::harness::CpuSplit;
use super::observe::LatencySummary;
use crate::fake_api::{Stats, Verb};

/// Writes and floor of one phase of a run (S3's Node changes).
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub name: String,
    /// EndpointSlice and Endpoints writes during the phase.
    pub writes: u64,
    pub floor: Floor,
    /// Whether the trace expects the phase to move no allocation (floor 0, no write).
    pub expect_noop: bool,
    /// Runtime CPU seconds during the phase (process minus fake and simulator).
    pub runtime_cpu: f64,
}

/// One run of a trace (S2 has one per batch period).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Run {
    pub label: String,
    /// The controllers' requests (`fake.stats()` minus the observer's).
    pub stats: Stats,
    /// Whether that equals what the controllers' own client counted.
    pub stats_agree: bool,
    /// EndpointSlice and Endpoints writes.
    pub writes: u64,
    pub events: u64,
    pub floor: Floor,
    pub phases: Vec<Phase>,
    pub latency: LatencySummary,
    pub cpu: CpuSplit,
    /// Virtual time from the trace's first change to the controllers' last write.
    pub virtual_time: Duration,
    pub pods: usize,
    pub slices: usize,
    pub endpoints: usize,
    /// Syncs per controller (from the runtime's `reconcile_duration_seconds`).
    pub syncs: Vec<(String, u64)>,
    /// Failed syncs retried with backoff (`workqueue_retries`).
    pub retries: u64,
    /// Correctness findings at the end (empty: PASS).
    pub problems: Vec<String>,
}

/// S1's CPU target ("decoding 100 000 Pods plus building and encoding every object"),
/// each part measured alone on the trace's final objects.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    /// Every Pod: JSON bytes to `Pod` to the cached form.
    pub decode: f64,
    /// One pure plan from the start's slices and Endpoints to the end state.
    pub build: f64,
    /// Every planned object to JSON.
    pub encode: f64,
}

/// Process-wide memory figures.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Memory {
    /// RSS once the cluster's objects are stored, before any controller or observer.
    pub rss_before_runtime: Option<u64>,
    /// Peak RSS of the process up to the end of the measured runs.
    pub peak_rss: Option<u64>,
    /// Heap in use at the same two points (instrumented allocator only).
    pub heap_before_runtime: Option<u64>,
    pub heap_at_end: Option<u64>,
    pub bytes_per_cached_pod: Option<f64>,
    /// Heap freed by stopping the runtime: its caches, queues, client and watches.
    pub runtime_heap: Option<u64>,
}

/// The figures of one trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub title: String,
    /// One line on sizes and settings.
    pub setup: String,
    pub runs: Vec<Run>,
    pub memory: Memory,
    /// Process CPU seconds spent building the cluster (not part of any run).
    pub setup_cpu: f64,
    /// S1 only: the work the CPU target budgets, measured alone.
    pub budget: Option<Budget>,
}

impl Report {
    /// Every run converged and reflected every transition.
    pub fn passed(&self) -> bool {
        self.runs
            .iter()
            .all(|r| r.problems.is_empty() && r.latency.never_reflected == 0 && r.stats_agree)
    }

    /// The table, as printed.
    pub fn render(&self) -> String {
        let mut t = Table::new(self.runs.iter().map(|r| r.label.clone()).collect());
        let each = |f: &dyn Fn(&Run) -> String| self.runs.iter().map(f).collect::<Vec<_>>();
        t.row(
            "virtual time, first change to last write",
            each(&|r| dur(r.virtual_time)),
        );
        t.row(
            "objects at end: Pods / slices / Endpoints",
            each(&|r| format!("{} / {} / {}", r.pods, r.slices, r.endpoints)),
        );
        t.section("API requests, controllers' client: count (sent / received)");
        let keys: BTreeSet<(Verb, String)> = self
            .runs
            .iter()
            .flat_map(|r| r.stats.by_call.keys().cloned())
            .collect();
        for (verb, resource) in &keys {
            t.row(
                &format!("  {verb} {resource}"),
                each(&|r| {
                    let c = r.stats.get(*verb, resource);
                    let errors = if c.errors > 0 {
                        format!(" {} err", c.errors)
                    } else {
                        String::new()
                    };
                    format!(
                        "{}{errors} ({} / {})",
                        c.requests,
                        bytes(c.request_bytes),
                        bytes(c.response_bytes)
                    )
                }),
            );
        }
        t.row(
            "  total",
            each(&|r| {
                let c = r.stats.total();
                format!(
                    "{} ({} / {})",
                    c.requests,
                    bytes(c.request_bytes),
                    bytes(c.response_bytes)
                )
            }),
        );
        t.section("writes");
        t.row(
            "EndpointSlice + Endpoints writes",
            each(&|r| r.writes.to_string()),
        );
        t.row(
            "write floor (slices + Endpoints)",
            each(&|r| {
                format!(
                    "{} ({} + {})",
                    r.floor.total(),
                    r.floor.slices,
                    r.floor.endpoints
                )
            }),
        );
        t.row(
            "ratio to floor",
            each(&|r| ratio(r.writes, r.floor.total())),
        );
        let phase_names: Vec<String> = self
            .runs
            .first()
            .map(|r| r.phases.iter().map(|p| p.name.clone()).collect())
            .unwrap_or_default();
        for (i, name) in phase_names.iter().enumerate() {
            t.row(
                &format!("  {name}: writes / floor (runtime CPU)"),
                each(&|r| {
                    r.phases
                        .get(i)
                        .map(|p| {
                            format!(
                                "{} / {} ({:.2} s)",
                                p.writes,
                                p.floor.total(),
                                p.runtime_cpu
                            )
                        })
                        .unwrap_or_default()
                }),
            );
        }
        t.row("Event writes", each(&|r| r.events.to_string()));
        t.section("programming latency (Pod change to first slice write showing it)");
        t.row(
            "transitions / never reflected",
            each(&|r| format!("{} / {}", r.latency.transitions, r.latency.never_reflected)),
        );
        t.row(
            "p50 / p99 / max",
            each(&|r| {
                format!(
                    "{} / {} / {}",
                    dur(r.latency.p50),
                    dur(r.latency.p99),
                    dur(r.latency.max)
                )
            }),
        );
        t.section("runtime work");
        t.row(
            "syncs: endpointslice / endpoints / mirroring",
            each(&|r| {
                let get = |c: &str| r.syncs.iter().find(|(n, _)| n == c).map_or(0, |(_, v)| *v);
                format!(
                    "{} / {} / {}",
                    get("endpoint_slice"),
                    get("endpoint"),
                    get("endpoint_slice_mirroring")
                )
            }),
        );
        t.row("retried syncs", each(&|r| r.retries.to_string()));
        t.section("CPU seconds (process, measured runs)");
        t.row("total", each(&|r| format!("{:.2}", r.cpu.total)));
        t.row(
            "  fake API serving the controllers",
            each(&|r| format!("{:.2}", r.cpu.fake)),
        );
        t.row(
            "  simulator (driver, observer)",
            each(&|r| format!("{:.2}", r.cpu.sim)),
        );
        t.row(
            "  svcplane runtime (remainder)",
            each(&|r| format!("{:.2}", r.cpu.controllers())),
        );
        t.row(
            "  runtime CPU per slice/Endpoints write",
            each(&|r| {
                if r.writes == 0 {
                    "n/a".into()
                } else {
                    format!("{:.2} ms", r.cpu.controllers() * 1000.0 / r.writes as f64)
                }
            }),
        );
        if let Some(b) = &self.budget {
            t.row(
                "cold-start work alone: decode Pods / build / encode",
                vec![format!(
                    "{:.2} + {:.2} + {:.2} = {:.2}",
                    b.decode,
                    b.build,
                    b.encode,
                    b.decode + b.build + b.encode
                )],
            );
        }
        t.section("memory (process)");
        let m = &self.memory;
        let opt = |v: Option<u64>| v.map_or("n/a".to_owned(), bytes);
        t.row(
            "RSS before the runtime starts (fake + objects)",
            vec![opt(m.rss_before_runtime)],
        );
        t.row("peak RSS (VmHWM)", vec![opt(m.peak_rss)]);
        t.row(
            "  peak minus before",
            vec![match (m.peak_rss, m.rss_before_runtime) {
                (Some(p), Some(b)) => bytes(p.saturating_sub(b)),
                _ => "n/a".into(),
            }],
        );
        t.row(
            "heap in use before runtime / at end",
            vec![format!(
                "{} / {}",
                opt(m.heap_before_runtime),
                opt(m.heap_at_end)
            )],
        );
        t.row(
            "heap freed by stopping the runtime (its own state)",
            vec![opt(m.runtime_heap)],
        );
        t.row(
            "bytes per cached Pod (PodStore heap / Pods)",
            vec![
                m.bytes_per_cached_pod
                    .map_or("n/a".to_owned(), |b| format!("{b:.0} B")),
            ],
        );
        t.section("correctness");
        t.row(
            "converged, no duplicate, none over max",
            each(&|r| {
                if r.problems.is_empty() {
                    "PASS".into()
                } else {
                    format!("FAIL ({})", r.problems.len())
                }
            }),
        );
        t.row(
            "request counts agree (fake - observer = client)",
            each(&|r| if r.stats_agree { "yes" } else { "NO" }.to_owned()),
        );
        let mut out = String::new();
        let _ = writeln!(out, "== {} ==", self.title);
        let _ = writeln!(out, "{}", self.setup);
        let _ = writeln!(
            out,
            "setup CPU (building the cluster, not measured): {:.2} s",
            self.setup_cpu
        );
        out.push_str(&t.render());
        for r in &self.runs {
            for p in &r.problems {
                let _ = writeln!(out, "FAIL [{}] {p}", r.label);
            }
        }
        out
    }
}

fn ratio(writes: u64, floor: u64) -> String {
    if floor == 0 {
        if writes == 0 {
            "1.00 (0 / 0)".into()
        } else {
            "inf".into()
        }
    } else {
        format!("{:.2}", writes as f64 / floor as f64)
    }
}

/// `12.3 MB`-style sizes (powers of 1024).
pub fn bytes(n: u64) -> String {
    let n = n as f64;
    if n < 1024.0 {
        format!("{n:.0} B")
    } else if n < 1024.0 * 1024.0 {
        format!("{:.1} KiB", n / 1024.0)
    } else if n < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} MiB", n / 1024.0 / 1024.0)
    } else {
        format!("{:.2} GiB", n / 1024.0 / 1024.0 / 1024.0)
    }
}

/// `850 ms` / `12.4 s` style.
pub fn dur(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// A left label column and right-aligned value columns.
struct Table {
    header: Vec<String>,
    rows: Vec<(String, Vec<String>)>,
}

impl Table {
    fn new(columns: Vec<String>) -> Self {
        Self {
            header: columns,
            rows: Vec::new(),
        }
    }

    fn row(&mut self, label: &str, values: Vec<String>) {
        self.rows.push((label.to_owned(), values));
    }

    fn section(&mut self, label: &str) {
        self.rows.push((format!("[{label}]"), Vec::new()));
    }

    fn render(&self) -> String {
        let label_w = self
            .rows
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(l, _)| l.len())
            .max()
            .unwrap_or(0);
        let cols = self.header.len().max(1);
        let widths: Vec<usize> = (0..cols)
            .map(|i| {
                self.rows
                    .iter()
                    .filter_map(|(_, v)| v.get(i).map(String::len))
                    .chain(self.header.get(i).map(String::len))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let _ = write!(out, "{:label_w$}", "");
        for (i, h) in self.header.iter().enumerate() {
            let _ = write!(out, "  {:>w$}", h, w = widths[i]);
        }
        out.push('\n');
        for (label, values) in &self.rows {
            if values.is_empty() {
                let _ = writeln!(out, "{label}");
                continue;
            }
            let _ = write!(out, "{label:label_w$}");
            for (i, v) in values.iter().enumerate() {
                let _ = write!(out, "  {:>w$}", v, w = widths.get(i).copied().unwrap_or(0));
            }
            out.push('\n');
        }
        out
    }
}
