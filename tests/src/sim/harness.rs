//! One simulated cluster: the fake API, the controllers on a rate-limited client, the
//! latency observer on an unthrottled one, and the trace driver's writes.
//!
//! Three parties talk to the fake, and only the controllers' traffic is reported:
//! - the **driver** (the trace: kubelets, the Deployment controller, the node lifecycle
//!   controller) writes with `FakeApi::insert`/`delete`, which bypass HTTP and the
//!   request counters;
//! - the **observer** watches EndpointSlices over HTTP; its requests are counted by its
//!   own [`CountLayer`] and subtracted;
//! - the **controllers** run `svcplane run`'s machinery ([`Instance`]) behind
//!   `RateLimitLayer` (QPS/burst, as `--kube-api-qps/--kube-api-burst`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;
use svcplane_controller::kube_client::Clients;
use svcplane_controller::kube_client::ratelimit::RateLimitLayer;
use svcplane_controller::run_cmd::RunOptions;
use svcplane_controller::shell::options::{EndpointSliceConfig, EndpointsConfig, MirroringConfig};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::observe::{self, ObjKey, SharedTracker, Want};
use super::traffic::{CountLayer, Traffic, subtract};
use crate::fake_api::{FakeApi, Stats, Verb};
use crate::run_env::{self, Instance};

/// Client rate limit and batching of the controllers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    pub qps: f64,
    pub burst: u32,
    pub batch_period: Duration,
    /// Write coalescing; `None`: `svcplane run`'s default.
    pub coalescing: Option<svcplane_controller::shell::coalescing::Coalescing>,
}

/// CPU seconds and where they went, over one measured section.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuSplit {
    /// The whole process (from `/proc`).
    pub total: f64,
    /// The fake API server serving the controllers' requests and watches.
    pub fake: f64,
    /// The trace driver's writes and the observer (its decoding, and the fake serving it).
    pub sim: f64,
}

impl CpuSplit {
    /// The CPU between `earlier` and `self`.
    pub fn since(&self, earlier: &CpuSplit) -> CpuSplit {
        CpuSplit {
            total: self.total - earlier.total,
            fake: self.fake - earlier.fake,
            sim: self.sim - earlier.sim,
        }
    }

    /// What is left for the runtime (controllers, caches, client).
    pub fn controllers(&self) -> f64 {
        (self.total - self.fake - self.sim).max(0.0)
    }
}

/// A simulated cluster (see the module docs).
#[derive(Debug)]
pub struct Sim {
    pub fake: FakeApi,
    pub tuning: Tuning,
    pub tracker: SharedTracker,
    controller_traffic: Arc<Traffic>,
    observer_traffic: Arc<Traffic>,
    observer_busy: Arc<AtomicU64>,
    driver_nanos: AtomicU64,
    observer: Option<JoinHandle<()>>,
    instance: Option<Instance>,
    /// Counters at the start of the measured section.
    cpu_mark: f64,
    /// Whether driver transitions are timed (off during setup).
    recording: bool,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn secs(n: u64) -> f64 {
    Duration::from_nanos(n).as_secs_f64()
}

impl Sim {
    pub fn new(seed: u64, tuning: Tuning) -> Self {
        // No write log: it would grow by one record per write for the whole trace.
        let fake = FakeApi::builder().seed(seed).record_writes(false).build();
        Self {
            fake,
            tuning,
            tracker: SharedTracker::default(),
            controller_traffic: Arc::default(),
            observer_traffic: Arc::default(),
            observer_busy: Arc::default(),
            driver_nanos: AtomicU64::new(0),
            observer: None,
            instance: None,
            cpu_mark: 0.0,
            recording: false,
        }
    }

    /// Runs simulator work (driver writes, mid-trace snapshots), timed so the CPU
    /// figures leave it out of the runtime's share.
    pub fn timed<R>(&self, f: impl FnOnce() -> R) -> R {
        let start = std::time::Instant::now();
        let r = f();
        self.driver_nanos
            .fetch_add(nanos(start.elapsed()), Ordering::Relaxed);
        r
    }

    /// A driver write (create or replace).
    pub fn put(&self, obj: &Value) -> anyhow::Result<()> {
        self.timed(|| self.fake.insert(obj))
            .map(|_| ())
            .context("driver write")
    }

    /// A driver write that changes a Pod, recorded as a transition to `want`.
    pub fn put_pod(&self, key: ObjKey, obj: &Value, want: Want) -> anyhow::Result<()> {
        self.put(obj)?;
        self.transition(key, want);
        Ok(())
    }

    /// Removes a Pod at once (no graceful termination), recorded as a transition.
    pub fn delete_pod(&self, key: ObjKey) {
        self.timed(|| self.fake.delete("v1/pods", Some(&key.0), &key.1));
        self.transition(key, Want::Absent);
    }

    /// Records a Pod transition for the latency figures (only once measuring).
    pub fn transition(&self, key: ObjKey, want: Want) {
        if self.recording {
            observe::lock(&self.tracker).transition(key, want, Instant::now());
        }
    }

    /// Starts the latency observer (its own unthrottled, counted client).
    pub fn start_observer(&mut self) {
        let service = tower::ServiceBuilder::new()
            .layer(CountLayer(self.observer_traffic.clone()))
            .service(self.fake.service());
        let client = kube::Client::new(service, "default");
        self.observer = Some(observe::spawn(
            client,
            self.tracker.clone(),
            self.observer_busy.clone(),
        ));
    }

    /// Starts the controllers: every controller, no webhook, no leader election, the
    /// tuning's batch period, behind the QPS limit.
    pub fn start_controllers(&mut self) {
        // One client per user, each with its own QPS bucket (as svcplane run and
        // kube-controller-manager build them), all counted together.
        let (fake, traffic, tuning) = (
            self.fake.clone(),
            self.controller_traffic.clone(),
            self.tuning,
        );
        let clients = Clients::per_user_limited(move |_user| {
            let limiter = RateLimitLayer::new(tuning.qps, tuning.burst);
            let budget = limiter.budget();
            let service = tower::ServiceBuilder::new()
                .layer(limiter)
                .layer(CountLayer(traffic.clone()))
                .service(fake.service());
            (kube::Client::new(service, "default"), budget)
        });
        let mut options: RunOptions = run_env::options();
        // The simulator tunes what no flag reaches (a withdrawal window of its own).
        let s = &mut options.controllers.settings;
        let Some(slices) = s.get_mut::<EndpointSliceConfig>() else {
            panic!("run's options lack the EndpointSlice controller's settings");
        };
        slices.batch_period = self.tuning.batch_period;
        if let Some(w) = self.tuning.coalescing {
            slices.coalescing = w;
        }
        let Some(endpoints) = s.get_mut::<EndpointsConfig>() else {
            panic!("run's options lack the Endpoints controller's settings");
        };
        endpoints.batch_period = self.tuning.batch_period;
        if let Some(w) = self.tuning.coalescing {
            endpoints.coalescing = w;
        }
        let Some(mirroring) = s.get_mut::<MirroringConfig>() else {
            panic!("run's options lack the mirroring controller's settings");
        };
        mirroring.batch_period = self.tuning.batch_period;
        self.instance = Some(Instance::start(clients, options));
    }

    /// Object writes by the controllers so far (Events included).
    fn controller_writes(&self) -> u64 {
        self.controller_traffic.stats().writes()
    }

    /// Advances virtual time until the controllers are idle (started, nothing queued,
    /// waiting or in flight) and have not written for a quiet period. Fails after
    /// `limit` of virtual time. Returns when the controllers last wrote (the call's
    /// start if they did not).
    pub async fn settle(&self, limit: Duration) -> anyhow::Result<Instant> {
        let quiet = Duration::from_secs(3);
        let start = Instant::now();
        let mut last = self.controller_writes();
        let mut quiet_since = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let writes = self.controller_writes();
            if writes != last {
                last = writes;
                quiet_since = Instant::now();
            }
            let idle = match &self.instance {
                Some(i) => i.is_idle().await,
                None => true,
            };
            if idle && quiet_since.elapsed() >= quiet {
                return Ok(quiet_since);
            }
            if start.elapsed() > limit {
                bail!("not settled after {limit:?} of virtual time ({writes} controller writes)");
            }
        }
    }

    /// Starts the measured section: zeroes the request counters, the CPU and time
    /// accounting, and starts timing transitions.
    pub fn begin(&mut self) {
        self.fake.reset_stats();
        self.controller_traffic.reset();
        self.observer_traffic.reset();
        self.observer_busy.store(0, Ordering::Relaxed);
        self.driver_nanos.store(0, Ordering::Relaxed);
        let _ = observe::lock(&self.tracker).take_summary();
        self.cpu_mark = super::measure::cpu_seconds().unwrap_or(0.0);
        self.recording = true;
    }

    /// CPU since [`Sim::begin`].
    pub fn cpu(&self) -> CpuSplit {
        CpuSplit {
            total: super::measure::cpu_seconds().unwrap_or(0.0) - self.cpu_mark,
            fake: self.controller_traffic.fake_time().as_secs_f64(),
            sim: secs(self.driver_nanos.load(Ordering::Relaxed))
                + secs(self.observer_busy.load(Ordering::Relaxed)),
        }
    }

    /// The controllers' requests since [`Sim::begin`]: everything the fake served minus
    /// the observer's.
    pub fn controller_stats(&self) -> Stats {
        subtract(&self.fake.stats(), &self.observer_traffic.stats())
    }

    /// The same, as counted on the controllers' own client (for the cross-check).
    pub fn controller_stats_counted(&self) -> Stats {
        self.controller_traffic.stats()
    }

    /// The runtime's metrics (OpenMetrics text), while it runs.
    pub fn metrics_text(&self) -> Option<String> {
        self.instance.as_ref().map(|i| i.handle.metrics().encode())
    }

    /// Stops the controllers (SIGTERM) and drops everything they hold.
    pub async fn stop_controllers(&mut self) -> anyhow::Result<()> {
        if let Some(i) = self.instance.take() {
            i.stop().await.context("svcplane run ended with an error")?;
        }
        // Let the tasks they leave (the clients' buffer workers) see their channels
        // close and end.
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(())
    }

    /// Stops the observer.
    pub fn stop_observer(&mut self) {
        if let Some(o) = self.observer.take() {
            o.abort();
        }
    }
}

/// EndpointSlice and Endpoints writes in `stats` (create, update, patch, delete).
pub fn endpoint_writes(stats: &Stats) -> u64 {
    stats
        .by_call
        .iter()
        .filter(|((v, r), _)| v.is_write() && (r == "endpointslices" || r == "endpoints"))
        .map(|(_, c)| c.requests)
        .sum()
}

/// Event writes in `stats` (both Event APIs).
pub fn event_writes(stats: &Stats) -> u64 {
    stats
        .by_call
        .iter()
        .filter(|((v, r), _)| v.is_write() && r == "events")
        .map(|(_, c)| c.requests)
        .sum()
}

/// Values of one metric family by its single label (`name{label="v"} 12`), from
/// OpenMetrics text.
pub fn metric_values(text: &str, metric: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(metric)?.strip_prefix('{')?;
            let (labels, value) = rest.split_once("} ")?;
            let label = labels.split_once('"')?.1.split('"').next()?.to_owned();
            Some((label, value.trim().parse().ok()?))
        })
        .collect()
}

/// Whether two stats agree on request counts per verb and resource.
pub fn same_requests(a: &Stats, b: &Stats) -> bool {
    let counts = |s: &Stats| -> Vec<((Verb, String), u64)> {
        s.by_call
            .iter()
            .filter(|(_, c)| c.requests > 0)
            .map(|(k, c)| (k.clone(), c.requests))
            .collect()
    };
    counts(a) == counts(b)
}
