//! The four traces of issue 10. Each builds its cluster with direct writes, starts the
//! observer and the controllers, replays its changes on the paused clock, settles, and
//! measures (see the module docs of [`super`] for what and how).
//!
//! Simplifications, all deliberate:
//! - a deleted Pod disappears at once (no terminating phase), as with
//!   `terminationGracePeriodSeconds: 0`;
//! - the trace's own controllers (Deployment, ReplicaSet, node lifecycle, kubelet) act
//!   with no delay of their own, so every latency measured is svcplane's;
//! - every Pod has one Service, so "the slice that reflects it" is unambiguous.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::Node;
use svcplane_controller::dump::snapshot::Snapshot;
use tokio::time::Instant;

use super::cluster::{self, NodeSpec, PodFactory, PodSpec, Rng, ServiceSpec};
use super::floor;
use super::harness::{Sim, Tuning, endpoint_writes, event_writes, metric_values, same_requests};
use super::measure::{self, Heap};
use super::observe::{self, ObjKey, Want};
use super::report::{Memory, Phase, Report, Run};
use super::{Config, Trace};

/// Virtual time any settle may take before the trace fails.
const LIMIT: Duration = Duration::from_secs(48 * 3600);
/// Findings listed per run (the count is always complete).
const MAX_FINDINGS: usize = 20;
const MAX_PER_SLICE: usize =
    svcplane_controller::core::endpointslice::DEFAULT_MAX_ENDPOINTS_PER_SLICE;

/// `n × scale`, at least `min`.
pub fn scaled(n: usize, scale: f64, min: usize) -> usize {
    ((n as f64 * scale).round() as usize).max(min)
}

fn key(p: &PodSpec) -> ObjKey {
    (p.namespace.clone(), p.name.clone())
}

fn tuning(config: &Config, batch: Duration) -> Tuning {
    Tuning {
        qps: config.qps,
        burst: config.burst,
        batch_period: batch,
        coalescing: config.coalescing,
    }
}

fn settings(config: &Config) -> String {
    format!(
        "scale {}, client QPS {} / burst {}, seed {}",
        config.scale, config.qps, config.burst, config.seed
    )
}

/// Seconds of virtual time since `origin`, for object timestamps.
fn secs_since(origin: Instant) -> u64 {
    origin.elapsed().as_secs()
}

/// Nodes, Services and `per_service` ready Pods each on random Nodes.
fn build(
    sim: &Sim,
    rng: &mut Rng,
    nodes: &[NodeSpec],
    services: &[ServiceSpec],
    per_service: usize,
    factory: &mut PodFactory,
) -> anyhow::Result<Vec<PodSpec>> {
    for n in nodes {
        sim.put(&n.to_json())?;
    }
    let mut pods = Vec::with_capacity(services.len() * per_service);
    for s in services {
        sim.put(&s.to_json())?;
        for _ in 0..per_service {
            let node = &nodes[rng.below(nodes.len())].name;
            let p = factory.make(s, "7d9c8b6f5", node, true, 0);
            sim.put(&p.to_json())?;
            pods.push(p);
        }
    }
    Ok(pods)
}

fn memory_before(heap: Heap) -> Memory {
    Memory {
        rss_before_runtime: measure::rss(),
        heap_before_runtime: measure::heap_in_use(heap),
        ..Memory::default()
    }
}

/// Lets the observer list and open its watch before the measured section.
async fn start_observer(sim: &mut Sim) {
    sim.start_observer();
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// A cold start: the observer, every Pod of `pods` recorded as a "created ready"
/// transition (none can be programmed before the controllers start, so its clock
/// starts with them), then the controllers, settled. Returns when they started and
/// when they last wrote.
async fn program_existing_pods(
    sim: &mut Sim,
    pods: Vec<PodSpec>,
) -> anyhow::Result<(Instant, Instant)> {
    start_observer(sim).await;
    sim.begin();
    for p in &pods {
        sim.transition(key(p), Want::Present { ready: true });
    }
    drop(pods);
    let t0 = Instant::now();
    sim.start_controllers();
    let last_write = sim.settle(LIMIT).await?;
    Ok((t0, last_write))
}

/// Ends a run: figures, the runtime's own heap (freed when it stops), then (with
/// everything stopped) the floor from `start` and the correctness check.
async fn finish(
    sim: &mut Sim,
    label: &str,
    start: &Snapshot,
    virtual_time: Duration,
    memory: &mut Memory,
    heap: Heap,
) -> anyhow::Result<(Run, Snapshot)> {
    let cpu = sim.cpu();
    memory.peak_rss = measure::peak_rss();
    memory.heap_at_end = measure::heap_in_use(heap);
    let latency = observe::lock(&sim.tracker).take_summary();
    let stats = sim.controller_stats();
    let stats_agree = same_requests(&stats, &sim.controller_stats_counted());
    let metrics = sim.metrics_text().unwrap_or_default();
    let syncs = metric_values(&metrics, "svcplane_reconcile_duration_seconds_count")
        .into_iter()
        .map(|(c, n)| (c, n as u64))
        .collect();
    let retries = metric_values(&metrics, "workqueue_retries_total")
        .iter()
        .map(|(_, n)| *n as u64)
        .sum();
    sim.stop_controllers().await?;
    memory.runtime_heap = memory
        .heap_at_end
        .zip(measure::heap_in_use(heap))
        .map(|(before, after)| before.saturating_sub(after));
    sim.stop_observer();
    let end = floor::snapshot(&sim.fake);
    let run = Run {
        label: label.to_owned(),
        writes: endpoint_writes(&stats),
        events: event_writes(&stats),
        stats,
        stats_agree,
        floor: floor::floor(start, &end),
        phases: Vec::new(),
        latency,
        cpu,
        virtual_time,
        pods: end.pods.len(),
        slices: end.endpoint_slices.len(),
        endpoints: end.endpoints.len(),
        syncs,
        retries,
        problems: floor::check(&end, MAX_PER_SLICE, MAX_FINDINGS),
    };
    Ok((run, end))
}

/// Runs one trace on the current (paused) runtime.
pub async fn run(trace: Trace, config: &Config) -> anyhow::Result<Report> {
    match trace {
        Trace::ColdStart => cold_start(config).await,
        Trace::RollingUpdate => rolling_update(config).await,
        Trace::Topology => topology(config).await,
        Trace::NodeFailure => node_failure(config).await,
    }
}

// --- S1 ------------------------------------------------------------------------------

struct Sizes {
    services: usize,
    per_service: usize,
    nodes: usize,
}

fn s1_sizes(scale: f64) -> Sizes {
    Sizes {
        services: scaled(10_000, scale, 5),
        per_service: 10,
        nodes: scaled(5000, scale, 25),
    }
}

fn namespaces(services: usize) -> usize {
    services.div_ceil(100)
}

/// S1: everything exists, then the controllers start.
async fn cold_start(config: &Config) -> anyhow::Result<Report> {
    let sz = s1_sizes(config.scale);
    let batch = config.batch_period.unwrap_or_default();
    let mut sim = Sim::new(config.seed, tuning(config, batch));
    let mut rng = Rng::new(config.seed);
    let cpu0 = measure::cpu_seconds().unwrap_or(0.0);
    let nodes = cluster::nodes(sz.nodes, &[8000]);
    let services = cluster::services(sz.services, namespaces(sz.services), false);
    let pods = build(
        &sim,
        &mut rng,
        &nodes,
        &services,
        sz.per_service,
        &mut PodFactory::default(),
    )?;
    let setup_cpu = measure::cpu_seconds().unwrap_or(0.0) - cpu0;
    let mut memory = memory_before(config.heap);
    let start = floor::endpoint_state(&sim.fake);
    let (t0, last_write) = program_existing_pods(&mut sim, pods).await?;
    let elapsed = last_write.saturating_duration_since(t0);
    let (run, end) = finish(
        &mut sim,
        &format!("batch {}", dur(batch)),
        &start,
        elapsed,
        &mut memory,
        config.heap,
    )
    .await?;
    memory.bytes_per_cached_pod = measure::bytes_per_cached_pod(config.heap, &sim.fake);
    let budget = Some(floor::budget(&sim.fake, &start, &end));
    Ok(Report {
        title: Trace::ColdStart.title().into(),
        setup: format!(
            "{} Services x {} ready Pods ({} Pods) on {} Nodes in 5 zones, {} namespaces; {}",
            sz.services,
            sz.per_service,
            sz.services * sz.per_service,
            sz.nodes,
            namespaces(sz.services),
            settings(config)
        ),
        runs: vec![run],
        memory,
        setup_cpu,
        budget,
    })
}

fn dur(d: Duration) -> String {
    super::report::dur(d)
}

// --- S2 ------------------------------------------------------------------------------

/// S2: one Deployment rolls all its Pods, once per batch period.
async fn rolling_update(config: &Config) -> anyhow::Result<Report> {
    let periods = match config.batch_period {
        Some(p) => vec![p],
        None => vec![
            Duration::ZERO,
            Duration::from_millis(500),
            Duration::from_secs(1),
        ],
    };
    let replicas = scaled(1000, config.scale, 20);
    let mut report = Report {
        title: Trace::RollingUpdate.title().into(),
        setup: String::new(),
        ..Report::default()
    };
    let mut memory: Option<Memory> = None;
    for batch in periods {
        let (run, m, setup_cpu) = rolling_update_run(config, batch, replicas).await?;
        report.runs.push(run);
        report.setup_cpu += setup_cpu;
        memory.get_or_insert(m).peak_rss = m.peak_rss;
        if let Some(mm) = memory.as_mut() {
            mm.heap_at_end = m.heap_at_end;
            mm.bytes_per_cached_pod = m.bytes_per_cached_pod;
        }
    }
    let surge = (replicas as f64 * 0.25).ceil() as usize;
    let unavailable = (replicas as f64 * 0.25).floor() as usize;
    report.setup = format!(
        "1 Service, Deployment of {replicas} Pods (maxSurge {surge}, maxUnavailable {unavailable}), \
         readiness 2-10 s after creation, on {} Nodes; one run per batch period \
         (peak RSS is the process's over all runs); {}",
        s2_nodes(config.scale),
        settings(config)
    );
    report.memory = memory.unwrap_or_default();
    Ok(report)
}

fn s2_nodes(scale: f64) -> usize {
    scaled(100, scale, 25)
}

async fn rolling_update_run(
    config: &Config,
    batch: Duration,
    replicas: usize,
) -> anyhow::Result<(Run, Memory, f64)> {
    let origin = Instant::now();
    let mut sim = Sim::new(config.seed, tuning(config, batch));
    let mut rng = Rng::new(config.seed);
    let mut factory = PodFactory::default();
    let cpu0 = measure::cpu_seconds().unwrap_or(0.0);
    let nodes = cluster::nodes(s2_nodes(config.scale), &[8000]);
    let service = ServiceSpec {
        namespace: "ns-000".into(),
        name: "web".into(),
        index: 0,
        topology_auto: false,
    };
    let mut old = build(
        &sim,
        &mut rng,
        &nodes,
        std::slice::from_ref(&service),
        replicas,
        &mut factory,
    )?;
    let setup_cpu = measure::cpu_seconds().unwrap_or(0.0) - cpu0;
    let mut memory = memory_before(config.heap);
    start_observer(&mut sim).await;
    sim.start_controllers();
    sim.settle(LIMIT).await.context("initial convergence")?;
    let start = floor::endpoint_state(&sim.fake);
    sim.begin();
    let t0 = Instant::now();

    // The Deployment controller's rolling update: scale the new ReplicaSet up as far as
    // maxSurge allows, the old one down as far as maxUnavailable allows, again whenever
    // a new Pod becomes ready.
    let surge = (replicas as f64 * 0.25).ceil() as usize;
    let unavailable = (replicas as f64 * 0.25).floor() as usize;
    let mut new: Vec<PodSpec> = Vec::new();
    let mut new_ready = 0usize;
    let mut due: BinaryHeap<Reverse<(Instant, usize)>> = BinaryHeap::new();
    loop {
        let total = old.len() + new.len();
        let room = (replicas + surge)
            .saturating_sub(total)
            .min(replicas - new.len());
        for _ in 0..room {
            let node = &nodes[rng.below(nodes.len())].name;
            let p = factory.make(&service, "5f6b7c8d9", node, false, secs_since(origin));
            sim.put_pod(key(&p), &p.to_json(), Want::Present { ready: false })?;
            due.push(Reverse((
                Instant::now() + rng.millis(2000, 10_000),
                new.len(),
            )));
            new.push(p);
        }
        let available = old.len() + new_ready;
        let remove = available
            .saturating_sub(replicas - unavailable)
            .min(old.len());
        for _ in 0..remove {
            if let Some(p) = old.pop() {
                sim.delete_pod(key(&p));
            }
        }
        if remove > 0 {
            continue;
        }
        if old.is_empty() && new_ready == replicas {
            break;
        }
        let Some(Reverse((at, _))) = due.peek().copied() else {
            break;
        };
        tokio::time::sleep_until(at).await;
        while let Some(Reverse((t, i))) = due.peek().copied() {
            if t > Instant::now() {
                break;
            }
            due.pop();
            let p = &mut new[i];
            p.ready = true;
            p.ready_changed = secs_since(origin);
            sim.put_pod(key(p), &p.to_json(), Want::Present { ready: true })?;
            new_ready += 1;
        }
    }
    let last_write = sim.settle(LIMIT).await?;
    let elapsed = last_write.saturating_duration_since(t0);
    let (run, _) = finish(
        &mut sim,
        &format!("batch {}", dur(batch)),
        &start,
        elapsed,
        &mut memory,
        config.heap,
    )
    .await?;
    memory.bytes_per_cached_pod = measure::bytes_per_cached_pod(config.heap, &sim.fake);
    Ok((run, memory, setup_cpu))
}

// --- S3 ------------------------------------------------------------------------------

/// Allocatable CPU per zone (millicores): uneven, so hints must be redistributed.
const S3_CPU: [u64; 5] = [4000, 8000, 16_000, 8000, 4000];

/// One S3 phase as recorded during the run: name, whether it must be a no-op, the
/// slices and Endpoints at its start, the Nodes at its end, its writes
/// and the runtime's CPU seconds during it.
type PhaseMark = (
    String,
    bool,
    Snapshot,
    BTreeMap<String, Arc<Node>>,
    u64,
    f64,
);

fn typed_nodes(nodes: &[NodeSpec]) -> BTreeMap<String, Arc<Node>> {
    nodes
        .iter()
        .filter_map(|n| serde_json::from_value::<Node>(n.to_json()).ok())
        .map(|n| (n.metadata.name.clone().unwrap_or_default(), Arc::new(n)))
        .collect()
}

/// S3: topology hints on every Service; then Node changes, some of which must move
/// no allocation.
///
/// Phase 1 (+50 Nodes in zone-a) raises zone-a's share by a fifth, which at full size
/// makes every Service's stored hints fail the overload rule for zone-a (fewer hints
/// than `ceil(share × endpoints / 1.2)`): the topology pass re-queues them all, but the
/// hints they hold stay within every zone's maximum, so no allocation moves and nothing
/// should be written. Phases 2 and 3 must write nothing at any size.
async fn topology(config: &Config) -> anyhow::Result<Report> {
    let services_n = scaled(1000, config.scale, 5);
    let per = 100;
    let nodes_n = scaled(1000, config.scale, 25);
    let added_n = scaled(50, config.scale, 5);
    let batch = config.batch_period.unwrap_or_default();
    let origin = Instant::now();
    let mut sim = Sim::new(config.seed, tuning(config, batch));
    let mut rng = Rng::new(config.seed);
    let cpu0 = measure::cpu_seconds().unwrap_or(0.0);
    let mut nodes = cluster::nodes(nodes_n, &S3_CPU);
    let services = cluster::services(services_n, namespaces(services_n), true);
    let pods = build(
        &sim,
        &mut rng,
        &nodes,
        &services,
        per,
        &mut PodFactory::default(),
    )?;
    let setup_cpu = measure::cpu_seconds().unwrap_or(0.0) - cpu0;
    let mut memory = memory_before(config.heap);
    let empty = floor::endpoint_state(&sim.fake);
    let (t0, _) = program_existing_pods(&mut sim, pods).await?;

    // (name, expect no-op, endpoint state at its start, Nodes at its end, writes)
    let mut marks: Vec<PhaseMark> = Vec::new();
    let mut written = endpoint_writes(&sim.controller_stats());
    let mut cpu = sim.cpu();
    marks.push((
        "cold start with hints".into(),
        false,
        empty,
        sim.timed(|| typed_nodes(&nodes)),
        written,
        cpu.controllers(),
    ));
    let mut phase = |name: &str, noop: bool, start: Snapshot, nodes: &[NodeSpec], sim: &Sim| {
        let now = endpoint_writes(&sim.controller_stats());
        let w = now - written;
        written = now;
        let cpu_now = sim.cpu();
        let runtime = cpu_now.since(&cpu).controllers();
        cpu = cpu_now;
        let nodes = sim.timed(|| typed_nodes(nodes));
        (name.to_owned(), noop, start, nodes, w, runtime)
    };

    // 1. Add Nodes to zone-a.
    let start_state = sim.timed(|| floor::endpoint_state(&sim.fake));
    let first_new = nodes.len();
    for i in 0..added_n {
        let index = first_new + i;
        let n = NodeSpec {
            name: format!("node-{index:05}"),
            zone: cluster::ZONES[0],
            cpu_millis: S3_CPU[0],
            ready: true,
            heartbeat: secs_since(origin),
            index,
        };
        sim.put(&n.to_json())?;
        nodes.push(n);
    }
    sim.settle(LIMIT).await?;
    let name = format!("+{added_n} Nodes in zone-a");
    marks.push(phase(&name, false, start_state, &nodes, &sim));

    // 2. One Node's CPU changes a little: no zone's ratio moves enough to matter.
    let start_state = sim.timed(|| floor::endpoint_state(&sim.fake));
    if let Some(n) = nodes.get_mut(1) {
        n.cpu_millis += 250;
        sim.put(&n.to_json())?;
    }
    sim.settle(LIMIT).await?;
    marks.push(phase(
        "one Node's CPU +250m",
        true,
        start_state,
        &nodes,
        &sim,
    ));

    // 3. Every Node's kubelet heartbeat (status churn that changes nothing read).
    let start_state = sim.timed(|| floor::endpoint_state(&sim.fake));
    let now = secs_since(origin);
    for n in &mut nodes {
        n.heartbeat = now;
        sim.put(&n.to_json())?;
    }
    sim.settle(LIMIT).await?;
    marks.push(phase(
        "heartbeat on every Node",
        true,
        start_state,
        &nodes,
        &sim,
    ));

    // 4. A pool of big Nodes joins zone-e (twice its Node count, 16 cores each): its
    //    CPU share jumps, its Services' stored hints fail the overload rule by far and
    //    zone-c's hints exceed what zone-c may keep, so allocations must move. (A
    //    change of allocatable CPU alone would not do: upstream, and svcplane, do not
    //    recompute topology on it, see the report.)
    let start_state = sim.timed(|| floor::endpoint_state(&sim.fake));
    let first_new = nodes.len();
    for i in 0..2 * (nodes_n / cluster::ZONES.len()) {
        let index = first_new + i;
        let n = NodeSpec {
            name: format!("node-{index:05}"),
            zone: cluster::ZONES[4],
            cpu_millis: 16_000,
            ready: true,
            heartbeat: secs_since(origin),
            index,
        };
        sim.put(&n.to_json())?;
        nodes.push(n);
    }
    let last_write = sim.settle(LIMIT).await?;
    let name = format!(
        "+{} 16-core Nodes in zone-e (overload rule)",
        nodes.len() - first_new
    );
    marks.push(phase(&name, false, start_state, &nodes, &sim));

    let elapsed = last_write.saturating_duration_since(t0);
    let empty = Snapshot::default();
    let (mut run, end) = finish(
        &mut sim,
        &format!("batch {}", dur(batch)),
        &empty,
        elapsed,
        &mut memory,
        config.heap,
    )
    .await?;
    // Each phase's floor: from its start's slices to the desired state of the final
    // Services and Pods (unchanged by the Node phases) on the Nodes as the phase left them.
    run.phases = marks
        .into_iter()
        .map(|(name, expect_noop, state, nodes, writes, runtime_cpu)| {
            let phase_end = Snapshot {
                services: end.services.clone(),
                pods: end.pods.clone(),
                nodes,
                ..Snapshot::default()
            };
            Phase {
                name,
                writes,
                floor: floor::floor(&state, &phase_end),
                expect_noop,
                runtime_cpu,
            }
        })
        .collect();
    memory.bytes_per_cached_pod = measure::bytes_per_cached_pod(config.heap, &sim.fake);
    // The cold start's share of the work, measured alone (on the final Nodes).
    let budget = Some(floor::budget(&sim.fake, &Snapshot::default(), &end));
    Ok(Report {
        title: Trace::Topology.title().into(),
        setup: format!(
            "{services_n} Services x {per} ready Pods ({} Pods), topology-mode Auto, on {nodes_n} Nodes; \
             zone CPU per Node a/b/c/d/e = 4/8/16/8/4 cores; {}",
            services_n * per,
            settings(config)
        ),
        runs: vec![run],
        memory,
        setup_cpu,
        budget,
    })
}

// --- S4 ------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    /// The node lifecycle controller marks a Pod on a failed Node not ready.
    NotReady(usize),
    /// Eviction: the Pod is deleted and its ReplicaSet creates a replacement.
    Evict(usize),
    /// A replacement's readiness probe passes.
    Ready(usize),
}

/// When the node lifecycle controller marks Pods not ready (node-monitor-grace-period)
/// and when it evicts them (the default `not-ready:NoExecute` toleration).
const NOT_READY_AFTER: Duration = Duration::from_secs(40);
const EVICT_AFTER: Duration = Duration::from_secs(300);

/// S4: S1's cluster; 20 % of the Nodes fail.
async fn node_failure(config: &Config) -> anyhow::Result<Report> {
    let sz = s1_sizes(config.scale);
    let batch = config.batch_period.unwrap_or_default();
    let origin = Instant::now();
    let mut sim = Sim::new(config.seed, tuning(config, batch));
    let mut rng = Rng::new(config.seed);
    let mut factory = PodFactory::default();
    let cpu0 = measure::cpu_seconds().unwrap_or(0.0);
    let mut nodes = cluster::nodes(sz.nodes, &[8000]);
    let services = cluster::services(sz.services, namespaces(sz.services), false);
    let mut pods = build(
        &sim,
        &mut rng,
        &nodes,
        &services,
        sz.per_service,
        &mut factory,
    )?;
    let setup_cpu = measure::cpu_seconds().unwrap_or(0.0) - cpu0;
    let mut memory = memory_before(config.heap);
    start_observer(&mut sim).await;
    sim.start_controllers();
    sim.settle(LIMIT).await.context("initial convergence")?;
    let start = floor::endpoint_state(&sim.fake);
    sim.begin();
    let t0 = Instant::now();

    // Fail a seeded 20 % of the Nodes.
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let failed_n = nodes.len() / 5;
    let mut failed = vec![false; nodes.len()];
    for &i in &order[..failed_n] {
        failed[i] = true;
        nodes[i].ready = false;
        nodes[i].heartbeat = secs_since(origin);
        sim.put(&nodes[i].to_json())?;
    }
    let healthy: Vec<usize> = (0..nodes.len()).filter(|i| !failed[*i]).collect();
    let index_of: BTreeMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    let by_app: BTreeMap<&str, &ServiceSpec> =
        services.iter().map(|s| (s.name.as_str(), s)).collect();
    let mut due: BinaryHeap<Reverse<(Instant, Step)>> = BinaryHeap::new();
    let mut affected = 0usize;
    for (i, p) in pods.iter().enumerate() {
        if index_of.get(p.node.as_str()).is_some_and(|n| failed[*n]) {
            affected += 1;
            due.push(Reverse((
                t0 + NOT_READY_AFTER + rng.millis(0, 5000),
                Step::NotReady(i),
            )));
            due.push(Reverse((
                t0 + EVICT_AFTER + rng.millis(0, 60_000),
                Step::Evict(i),
            )));
        }
    }
    while let Some(Reverse((at, step))) = due.pop() {
        tokio::time::sleep_until(at).await;
        let now = secs_since(origin);
        match step {
            Step::NotReady(i) => {
                let p = &mut pods[i];
                p.ready = false;
                p.ready_changed = now;
                sim.put_pod(key(p), &p.to_json(), Want::Present { ready: false })?;
            }
            Step::Evict(i) => {
                sim.delete_pod(key(&pods[i]));
                let service = by_app
                    .get(pods[i].app.as_str())
                    .copied()
                    .context("a Pod's Service")?;
                let node = &nodes[healthy[rng.below(healthy.len())]].name;
                let p = factory.make(service, "7d9c8b6f5", node, false, now);
                sim.put_pod(key(&p), &p.to_json(), Want::Present { ready: false })?;
                due.push(Reverse((
                    Instant::now() + rng.millis(2000, 10_000),
                    Step::Ready(pods.len()),
                )));
                pods.push(p);
            }
            Step::Ready(i) => {
                let p = &mut pods[i];
                p.ready = true;
                p.ready_changed = now;
                sim.put_pod(key(p), &p.to_json(), Want::Present { ready: true })?;
            }
        }
    }
    let last_write = sim.settle(LIMIT).await?;
    let elapsed = last_write.saturating_duration_since(t0);
    let (run, _) = finish(
        &mut sim,
        &format!("batch {}", dur(batch)),
        &start,
        elapsed,
        &mut memory,
        config.heap,
    )
    .await?;
    memory.bytes_per_cached_pod = measure::bytes_per_cached_pod(config.heap, &sim.fake);
    Ok(Report {
        title: Trace::NodeFailure.title().into(),
        setup: format!(
            "S1's cluster ({} Pods on {} Nodes) converged; {failed_n} Nodes NotReady at t=0, their {affected} Pods \
             not ready at 40-45 s, evicted and recreated elsewhere at 300-360 s (ready 2-10 s later); {}",
            sz.services * sz.per_service,
            sz.nodes,
            settings(config)
        ),
        runs: vec![run],
        memory,
        setup_cpu,
        budget: None,
    })
}
