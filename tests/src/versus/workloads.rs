//! The four workloads: the objects each starts from and the Pod changes it makes.
//!
//! Objects are the simulator's realistic documents ([`crate::sim::cluster`]: 3.4 KB
//! Pods with two containers, probes and full status; Nodes with zones), so both
//! controllers decode and cache what a real cluster would send them. Everything is a
//! function of the seed and the scale, so both sides get the same objects and the same
//! changes in the same order; only the timing of the API server differs.
//!
//! There is no kubelet and no scheduler: a Pod is created with its `nodeName`, then its
//! status (IP, readiness) is written through the status subresource, and a deletion
//! with a grace period leaves it terminating until the driver deletes it again with
//! grace period 0. Each change is announced to the [`Observer`] just before it is sent.

use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use svcplane_webhook::retry::{Backoff, entropy_seed};

use super::observer::{Observer, PodChange};
use crate::sim::cluster::{
    NodeSpec, PodFactory, PodSpec, Rng, ServiceSpec, for_create, nodes, services,
};
use crate::sim::observe::ObjKey;

/// The workloads, in the order they run by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workload {
    /// Services and ready Pods exist; then the controller starts.
    Cold,
    /// Every Service's Pods replaced in batches, as a Deployment with maxSurge 25 %.
    Rolling,
    /// Random readiness flips at a steady rate.
    Churn,
    /// One Service gains thousands of ready Pods.
    Large,
}

impl Workload {
    pub const ALL: [Workload; 4] = [
        Workload::Cold,
        Workload::Rolling,
        Workload::Churn,
        Workload::Large,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Cold => "cold",
            Workload::Rolling => "rolling",
            Workload::Churn => "churn",
            Workload::Large => "large",
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Workload {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown workload {s:?} (want cold, rolling, churn or large)"))
    }
}

/// The size of `rolling`: Services, and Pods per Service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollingSize {
    pub services: usize,
    pub pods: usize,
}

impl RollingSize {
    /// 10 Services x 50 Pods; the Service count follows `--scale`.
    pub const DEFAULT: RollingSize = RollingSize {
        services: 10,
        pods: 50,
    };
}

impl fmt::Display for RollingSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.services, self.pods)
    }
}

impl FromStr for RollingSize {
    type Err = String;

    /// `SERVICESxPODS`, e.g. `1x150`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("rolling size {s:?}: want SERVICESxPODS, e.g. 1x150");
        let (services, pods) = s.split_once('x').ok_or_else(bad)?;
        let (services, pods) = (
            services.parse().map_err(|_| bad())?,
            pods.parse().map_err(|_| bad())?,
        );
        if services == 0 || pods == 0 {
            return Err(bad());
        }
        Ok(RollingSize { services, pods })
    }
}

/// New-Pod batch size and pacing of the rolling update.
const ROLLING_SURGE: f64 = 0.25;
/// Pause between the steps of a batch (create, ready, terminate, delete): four steps
/// and their requests make a batch take 1-2 s.
const STEP_PAUSE: Duration = Duration::from_millis(250);
/// Readiness flips per second in `churn`, and its length at scale 1.
const CHURN_RATE: u32 = 20;
const CHURN_SECONDS: f64 = 30.0;
/// Concurrent requests while setting up, and while `large` creates its Pods.
const SETUP_CONCURRENCY: usize = 16;
const LARGE_CONCURRENCY: usize = 8;
/// Pods per Node.
const PODS_PER_NODE: usize = 30;
/// Attempts per request: a loaded API server closes a connection now and then.
const ATTEMPTS: u32 = 5;
/// Bounds of the wait between attempts: the base doubles 200 ms → 1.6 s over the four
/// retries and jitter adds up to as much again, so requests failed together by one
/// dropped connection do not all come back at the same instant.
const RETRY_FIRST: Duration = Duration::from_millis(200);
const RETRY_CAP: Duration = Duration::from_millis(3_200);
const HASH_OLD: &str = "7d9f8c6b5";
const HASH_NEW: &str = "5c4b8d7f9";

/// What a workload starts from.
#[derive(Debug)]
pub struct Shape {
    pub workload: Workload,
    /// Pods per Service `rolling` replaces.
    pub rolling_pods: usize,
    pub services: Vec<ServiceSpec>,
    pub nodes: Vec<NodeSpec>,
    /// Pods stored before the controller starts.
    pub initial: Vec<PodSpec>,
    /// Pods `large` adds.
    pub large_pods: usize,
    /// How long `churn` flips readiness.
    pub churn_for: Duration,
    /// Pods of the workload's end state beyond 1000 in one Service: never in its
    /// Endpoints (both controllers truncate), so never reflected there.
    pub endpoints_capped: u64,
    factory: PodFactory,
    rng: Rng,
}

fn scaled(n: usize, scale: f64) -> usize {
    ((n as f64 * scale).round() as usize).max(1)
}

impl Shape {
    /// The objects of `workload` at `scale`, from `seed` (`rolling` at its default
    /// size).
    pub fn new(workload: Workload, scale: f64, seed: u64) -> Self {
        Self::sized(workload, scale, seed, RollingSize::DEFAULT)
    }

    /// [`Shape::new`] with `rolling` at `rolling` (its Service count times `scale`).
    pub fn sized(workload: Workload, scale: f64, seed: u64, rolling: RollingSize) -> Self {
        let (n_services, pods_per_service) = match workload {
            Workload::Cold => (scaled(1000, scale), 10),
            Workload::Rolling => (scaled(rolling.services, scale), rolling.pods),
            Workload::Churn => (scaled(100, scale), 10),
            Workload::Large => (1, 0),
        };
        let large_pods = if workload == Workload::Large {
            scaled(3000, scale)
        } else {
            0
        };
        let most_pods = (n_services * pods_per_service).max(large_pods);
        // A rolling update holds up to a quarter more Pods at once.
        let nodes = nodes((most_pods * 5 / 4).div_ceil(PODS_PER_NODE).max(3), &[8000]);
        let services = services(n_services, n_services.min(10), false);
        let mut rng = Rng::new(seed);
        let mut factory = PodFactory::default();
        let initial = services
            .iter()
            .flat_map(|s| std::iter::repeat_n(s, pods_per_service))
            .map(|s| {
                let node = &nodes[rng.below(nodes.len())].name;
                factory.make(s, HASH_OLD, node, true, 0)
            })
            .collect();
        Self {
            workload,
            rolling_pods: rolling.pods,
            services,
            nodes,
            initial,
            large_pods,
            churn_for: Duration::from_secs_f64((CHURN_SECONDS * scale).max(1.0)),
            endpoints_capped: large_pods.saturating_sub(1000) as u64,
            factory,
            rng,
        }
    }

    /// Initial Pods beyond the 1000 addresses an Endpoints object holds, summed over
    /// the Services: never shown in Endpoints, so never reflected there.
    pub fn initial_endpoints_capped(&self) -> u64 {
        self.services
            .iter()
            .map(|s| {
                let pods = self.initial.iter().filter(|p| p.app == s.name).count();
                pods.saturating_sub(1000) as u64
            })
            .sum()
    }

    /// `(namespace, name)` of every Service.
    pub fn service_keys(&self) -> Vec<ObjKey> {
        self.services
            .iter()
            .map(|s| (s.namespace.clone(), s.name.clone()))
            .collect()
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        let pods = self.initial.len();
        let svcs = self.services.len();
        match self.workload {
            Workload::Cold => format!(
                "{svcs} Services x {} ready Pods ({pods} Pods, {} Nodes) stored before the controller starts",
                pods / svcs.max(1),
                self.nodes.len()
            ),
            Workload::Rolling => format!(
                "{svcs} Services x {} Pods replaced in {} batches of {} (maxSurge 25 %)",
                self.rolling_pods,
                rolling_batches(self.rolling_pods).len(),
                surge(self.rolling_pods)
            ),
            Workload::Churn => format!(
                "{svcs} Services x {} Pods; {CHURN_RATE} readiness flips/s for {:.0} s",
                pods / svcs.max(1),
                self.churn_for.as_secs_f64()
            ),
            Workload::Large => format!(
                "1 Service gains {} ready Pods ({LARGE_CONCURRENCY} creates at a time)",
                self.large_pods
            ),
        }
    }
}

fn surge(pods: usize) -> usize {
    (pods as f64 * ROLLING_SURGE).ceil() as usize
}

/// The batch sizes of a rolling update of `pods` Pods.
fn rolling_batches(pods: usize) -> Vec<usize> {
    let mut left = pods;
    let mut out = Vec::new();
    while left > 0 {
        let n = surge(pods).min(left);
        out.push(n);
        left -= n;
    }
    out
}

/// Runs `op` until it succeeds (`ok` errors count as success), [`ATTEMPTS`] times.
async fn retry<F, Fut, T>(what: &str, ok: &[u16], mut op: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 0;
    let mut backoff = Backoff::with_bounds(RETRY_FIRST, RETRY_CAP, entropy_seed());
    loop {
        match op().await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if ok.contains(&s.code) => return Ok(()),
            Err(e) if attempt + 1 >= ATTEMPTS => {
                return Err(e).with_context(|| what.to_owned());
            }
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(backoff.next_delay()).await;
            }
        }
    }
}

/// Runs `op` on every item, `concurrency` at a time.
async fn for_all<T, F, Fut>(items: Vec<T>, concurrency: usize, op: F) -> anyhow::Result<()>
where
    F: FnMut(T) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    futures::stream::iter(items)
        .map(op)
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await
        .map(|_| ())
}

fn key(p: &PodSpec) -> ObjKey {
    (p.namespace.clone(), p.name.clone())
}

/// Creates a Pod (no status yet: no IP, in no endpoints).
async fn create_pod(client: &Client, pod: &PodSpec) -> anyhow::Result<()> {
    let api = Api::<Pod>::namespaced(client.clone(), &pod.namespace);
    let body: Pod = serde_json::from_value(for_create(pod.to_json()))?;
    let pp = PostParams::default();
    retry(&format!("creating pod {}", pod.name), &[409], || {
        api.create(&pp, &body)
    })
    .await
}

/// Writes a Pod's whole status (IP and readiness), announced to `observer` if any.
async fn write_status(
    client: &Client,
    observer: Option<&Observer>,
    pod: &PodSpec,
) -> anyhow::Result<()> {
    let api = Api::<Pod>::namespaced(client.clone(), &pod.namespace);
    let patch = Patch::Merge(json!({"status": pod.to_json()["status"]}));
    if let Some(o) = observer {
        o.change([&key(pod)], PodChange::Status { ready: pod.ready });
    }
    let ps = PatchParams::default();
    retry(&format!("writing status of pod {}", pod.name), &[], || {
        api.patch_status(&pod.name, &ps, &patch)
    })
    .await
}

/// Deletes a Pod with `grace` seconds (30: it stays, terminating; 0: it is gone).
async fn delete_pod(
    client: &Client,
    observer: &Observer,
    pod: &PodSpec,
    grace: u32,
) -> anyhow::Result<()> {
    let api = Api::<Pod>::namespaced(client.clone(), &pod.namespace);
    let change = if grace == 0 {
        PodChange::Gone
    } else {
        PodChange::Terminating
    };
    observer.change([&key(pod)], change);
    let dp = DeleteParams::default().grace_period(grace);
    retry(&format!("deleting pod {}", pod.name), &[404], || {
        api.delete(&pod.name, &dp)
    })
    .await
}

/// Stores the namespaces, Nodes, Services and initial Pods (nothing announced).
pub async fn setup(client: &Client, shape: &Shape) -> anyhow::Result<()> {
    let mut namespaces: Vec<&str> = shape
        .services
        .iter()
        .map(|s| s.namespace.as_str())
        .collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    for ns in namespaces {
        let body: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        let api = Api::<Namespace>::all(client.clone());
        let pp = PostParams::default();
        retry(&format!("creating namespace {ns}"), &[409], || {
            api.create(&pp, &body)
        })
        .await?;
    }
    for_all(
        shape.nodes.iter().collect(),
        SETUP_CONCURRENCY,
        |n| async move {
            let api = Api::<Node>::all(client.clone());
            let doc = n.to_json();
            let body: Node = serde_json::from_value(for_create(doc.clone()))?;
            let pp = PostParams::default();
            retry(&format!("creating node {}", n.name), &[409], || {
                api.create(&pp, &body)
            })
            .await?;
            let status = Patch::Merge(json!({"status": doc["status"]}));
            let ps = PatchParams::default();
            retry(&format!("writing status of node {}", n.name), &[], || {
                api.patch_status(&n.name, &ps, &status)
            })
            .await
        },
    )
    .await?;
    for_all(
        shape.services.iter().collect(),
        SETUP_CONCURRENCY,
        |s| async move {
            let api = Api::<Service>::namespaced(client.clone(), &s.namespace);
            let body: Service = serde_json::from_value(for_create(s.to_json()))?;
            let pp = PostParams::default();
            retry(&format!("creating service {}", s.name), &[409], || {
                api.create(&pp, &body)
            })
            .await
        },
    )
    .await?;
    for_all(
        shape.initial.iter().collect(),
        SETUP_CONCURRENCY,
        |p| async move {
            create_pod(client, p).await?;
            write_status(client, None, p).await
        },
    )
    .await
}

/// Makes the workload's changes (none for `cold`). Progress goes to stderr.
pub async fn drive(client: &Client, observer: &Observer, shape: &mut Shape) -> anyhow::Result<()> {
    match shape.workload {
        Workload::Cold => Ok(()),
        Workload::Rolling => rolling(client, observer, shape).await,
        Workload::Churn => churn(client, observer, shape).await,
        Workload::Large => large(client, observer, shape).await,
    }
}

async fn rolling(client: &Client, observer: &Observer, shape: &mut Shape) -> anyhow::Result<()> {
    // The old Pods of each Service, in the seeded order they will be deleted.
    let mut old: Vec<Vec<PodSpec>> = shape
        .services
        .iter()
        .map(|s| {
            shape
                .initial
                .iter()
                .filter(|p| p.app == s.name)
                .cloned()
                .collect()
        })
        .collect();
    for pods in &mut old {
        for i in (1..pods.len()).rev() {
            pods.swap(i, shape.rng.below(i + 1));
        }
    }
    for (batch, n) in rolling_batches(shape.rolling_pods).into_iter().enumerate() {
        let started = Instant::now();
        let mut new = Vec::new();
        for s in &shape.services {
            for _ in 0..n {
                let node = &shape.nodes[shape.rng.below(shape.nodes.len())].name;
                new.push(shape.factory.make(s, HASH_NEW, node, false, 0));
            }
        }
        for_all(new.iter().collect(), SETUP_CONCURRENCY, |p| async move {
            create_pod(client, p).await?;
            write_status(client, Some(observer), p).await
        })
        .await?;
        tokio::time::sleep(STEP_PAUSE).await;
        for p in &mut new {
            p.ready = true;
            p.ready_changed = 1;
        }
        for_all(new.iter().collect(), SETUP_CONCURRENCY, |p| {
            write_status(client, Some(observer), p)
        })
        .await?;
        tokio::time::sleep(STEP_PAUSE).await;
        let leaving: Vec<PodSpec> = old
            .iter_mut()
            .flat_map(|pods| pods.drain(..n.min(pods.len())).collect::<Vec<_>>())
            .collect();
        for_all(leaving.iter().collect(), SETUP_CONCURRENCY, |p| {
            delete_pod(client, observer, p, 30)
        })
        .await?;
        tokio::time::sleep(STEP_PAUSE).await;
        for_all(leaving.iter().collect(), SETUP_CONCURRENCY, |p| {
            delete_pod(client, observer, p, 0)
        })
        .await?;
        tokio::time::sleep(STEP_PAUSE).await;
        super::progress(&format!(
            "rolling batch {}: {} new, {} old Pods in {:.1} s",
            batch + 1,
            new.len(),
            leaving.len(),
            started.elapsed().as_secs_f64()
        ));
    }
    Ok(())
}

async fn churn(client: &Client, observer: &Observer, shape: &mut Shape) -> anyhow::Result<()> {
    let mut pods = shape.initial.clone();
    if pods.is_empty() {
        return Ok(());
    }
    let flips = (shape.churn_for.as_secs_f64() * f64::from(CHURN_RATE)).round() as u64;
    let mut tick = tokio::time::interval(Duration::from_secs(1) / CHURN_RATE);
    let started = Instant::now();
    for _ in 0..flips {
        tick.tick().await;
        let i = shape.rng.below(pods.len());
        let p = &mut pods[i];
        p.ready = !p.ready;
        p.ready_changed += 1;
        write_status(client, Some(observer), p).await?;
    }
    super::progress(&format!(
        "churn: {flips} flips in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

async fn large(client: &Client, observer: &Observer, shape: &mut Shape) -> anyhow::Result<()> {
    let Some(service) = shape.services.first() else {
        return Ok(());
    };
    let pods: Vec<PodSpec> = (0..shape.large_pods)
        .map(|_| {
            let node = &shape.nodes[shape.rng.below(shape.nodes.len())].name;
            shape.factory.make(service, HASH_OLD, node, true, 0)
        })
        .collect();
    let started = Instant::now();
    for_all(pods.iter().collect(), LARGE_CONCURRENCY, |p| async move {
        create_pod(client, p).await?;
        write_status(client, Some(observer), p).await
    })
    .await?;
    super::progress(&format!(
        "large: {} Pods in {:.1} s",
        pods.len(),
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rolling_batches_follow_max_surge() {
        assert_eq!(rolling_batches(50), [13, 13, 13, 11]);
        assert_eq!(rolling_batches(150), [38, 38, 38, 36]);
    }

    #[test]
    fn shapes_scale_and_are_seeded() {
        let a = Shape::new(Workload::Cold, 0.01, 7);
        assert_eq!((a.services.len(), a.initial.len()), (10, 100));
        let b = Shape::new(Workload::Cold, 0.01, 7);
        assert_eq!(a.initial, b.initial);
        let l = Shape::new(Workload::Large, 1.0, 1);
        assert_eq!(
            (l.large_pods, l.endpoints_capped, l.initial.len()),
            (3000, 2000, 0)
        );
        assert_eq!(
            Shape::new(Workload::Churn, 0.1, 1).churn_for,
            Duration::from_secs(3)
        );
        assert_eq!("Rolling".parse(), Ok(Workload::Rolling));
        assert_eq!(
            "1x150".parse(),
            Ok(RollingSize {
                services: 1,
                pods: 150
            })
        );
        assert!("1x0".parse::<RollingSize>().is_err());
        assert!("150".parse::<RollingSize>().is_err());
        let shape = Shape::sized(Workload::Rolling, 1.0, 1, "1x150".parse().unwrap());
        assert_eq!((shape.services.len(), shape.initial.len()), (1, 150));
    }
}
