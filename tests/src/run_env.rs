//! Running `svcplane run`'s machinery in-process against the fake API server (or any
//! client), and checking that what it left behind is exactly the desired state.
//!
//! [`Instance`] is one process' worth of runtime (controllers, optional leader
//! election) on a tokio task; [`settle`] advances the (usually paused) clock until the
//! leader's queues are empty and no write has happened for a quiet period;
//! [`assert_converged`] re-plans the fake's stored objects with the pure reconcilers
//! (`svcplane plan`'s code path) and fails on any write they would still make, and on
//! duplicate endpoints, over-full slices or over-full Endpoints.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use svcplane_allocator::AllocatorConfig;
use svcplane_controller::core::endpointslice::DEFAULT_MAX_ENDPOINTS_PER_SLICE;
use svcplane_controller::dump::snapshot::{Key, Snapshot};
use svcplane_controller::kube_client::Clients;
use svcplane_controller::run_cmd::{RunError, RunHandle, RunOptions, run_with_handle};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::fake_api::FakeApi;

/// The service range the scenarios use.
pub const SERVICE_RANGE: &str = "10.96.0.0/16";

/// Options for one in-process `svcplane run` (every controller, no webhook, no
/// leader election, no admin server).
pub fn options() -> RunOptions {
    RunOptions::for_tests(allocator())
}

pub fn allocator() -> AllocatorConfig {
    AllocatorConfig::from_flags(SERVICE_RANGE, "30000-32767")
        .unwrap_or_else(|e| panic!("test ranges do not parse: {e}"))
}

/// One running process.
#[derive(Debug)]
pub struct Instance {
    pub handle: Arc<RunHandle>,
    pub shutdown: CancellationToken,
    pub task: JoinHandle<Result<(), RunError>>,
}

impl Instance {
    /// Starts `svcplane run` on `clients` (one `kube::Client` for every user, or
    /// [`Clients::per_user`]).
    pub fn start(clients: impl Into<Clients>, options: RunOptions) -> Self {
        let handle = Arc::new(RunHandle::default());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run_with_handle(
            clients.into(),
            options,
            shutdown.clone(),
            handle.clone(),
        ));
        Self {
            handle,
            shutdown,
            task,
        }
    }

    /// SIGTERM: stop and wait for the process to end.
    pub async fn stop(self) -> Result<(), RunError> {
        self.shutdown.cancel();
        match self.task.await {
            Ok(r) => r,
            Err(e) => panic!("run task failed: {e}"),
        }
    }

    /// Whether this instance runs controllers (leads).
    pub async fn is_leading(&self) -> bool {
        self.handle.controllers().await.is_some()
    }

    /// Leading, started and nothing queued.
    pub async fn is_idle(&self) -> bool {
        match self.handle.controllers().await {
            Some(c) => c.is_idle(),
            None => false,
        }
    }
}

/// Writes to anything but Leases (leader election renews every few seconds).
fn object_writes(fake: &FakeApi) -> u64 {
    fake.stats()
        .by_call
        .iter()
        .filter(|((verb, resource), _)| verb.is_write() && resource != "leases")
        .map(|(_, c)| c.requests)
        .sum()
}

/// Advances time until some instance leads with empty queues and the fake has seen no
/// object write (Lease renewals aside) for a quiet period; panics after `limit` of
/// virtual time. Returns the time taken.
pub async fn settle(fake: &FakeApi, instances: &[&Instance], limit: Duration) -> Duration {
    let quiet = Duration::from_secs(3);
    let start = Instant::now();
    let mut last_writes = object_writes(fake);
    let mut quiet_since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let writes = object_writes(fake);
        if writes != last_writes {
            last_writes = writes;
            quiet_since = Instant::now();
        }
        let mut idle = false;
        for i in instances {
            idle |= i.is_idle().await;
        }
        if idle && quiet_since.elapsed() >= quiet {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "not settled after {limit:?}: {} writes so far",
            fake.stats().writes()
        );
    }
}

/// The fake's stored objects as a `plan` snapshot.
pub fn snapshot(fake: &FakeApi) -> Snapshot {
    fn keyed<
        T: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
    >(
        items: Vec<T>,
    ) -> BTreeMap<Key, Arc<T>> {
        items
            .into_iter()
            .map(|o| {
                let m = o.metadata();
                (
                    Key {
                        namespace: m.namespace.clone().unwrap_or_default(),
                        name: m.name.clone().unwrap_or_default(),
                    },
                    Arc::new(o),
                )
            })
            .collect()
    }
    let nodes: Vec<Node> = fake.objects_of().unwrap_or_default();
    Snapshot {
        services: keyed(fake.objects_of::<Service>().unwrap_or_default()),
        pods: keyed(fake.objects_of::<Pod>().unwrap_or_default()),
        nodes: nodes
            .into_iter()
            .map(|n| (n.metadata.name.clone().unwrap_or_default(), Arc::new(n)))
            .collect(),
        endpoint_slices: keyed(fake.objects_of::<EndpointSlice>().unwrap_or_default()),
        endpoints: keyed(fake.objects_of::<Endpoints>().unwrap_or_default()),
        service_cidrs: Default::default(),
        ip_addresses: Default::default(),
    }
}

/// Fails unless the stored state is exactly what the pure reconcilers want: a re-plan
/// writes nothing, no endpoint is in two slices of one Service, address type and port
/// group, no slice holds more than `max_per_slice`, no Endpoints more than 1000.
pub fn assert_converged(fake: &FakeApi, max_per_slice: usize) {
    let problems = crate::sim::floor::check(&snapshot(fake), max_per_slice, 20);
    assert!(problems.is_empty(), "not converged: {problems:#?}");
}

/// `assert_converged` at the default slice size.
pub fn assert_converged_default(fake: &FakeApi) {
    assert_converged(fake, DEFAULT_MAX_ENDPOINTS_PER_SLICE);
}
