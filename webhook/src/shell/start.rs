//! Assembling a running webhook from a client and settings.
//!
//! Shared by `svcplane webhook`, `svcplane run` and the tests, so every one of them runs
//! exactly the same watches, repair loop and handler.

use std::sync::{Arc, Mutex};

use kube::Client;
use svcplane_allocator::AllocatorConfig;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::admission::Webhook;
use super::claimer::KubeClaims;
use super::ranges::{
    ServiceCidrSink, check_kubernetes_service, feed_service_cidrs, has_service_cidrs,
};
use super::repair::{self, RepairConfig};
pub use super::watch::ServiceSource;
use super::watch::{self, Readiness, ServiceSink, SharedState};
use crate::metrics::WebhookMetrics;
use crate::retry::{Backoff, Outage, wait};
use crate::state::AllocationState;

/// Settings of the webhook's allocation side.
#[derive(Debug, Clone)]
pub struct WebhookOptions {
    /// ClusterIP and NodePort ranges.
    pub allocator: AllocatorConfig,
    /// Seed of the allocator's random picks (the shell passes real randomness; tests
    /// pass a constant).
    pub seed: u64,
    /// Claim repair loop settings.
    pub repair: RepairConfig,
    /// `--retain-released-values`: how long a deleted Service's values stay retained
    /// for its name (zero: released at once).
    pub retain_released_values: std::time::Duration,
    /// Where the webhook counts what it does (registered by the caller's `/metrics`).
    pub metrics: WebhookMetrics,
    /// Who watches Services and ServiceCIDRs.
    pub services: ServiceSource,
    /// `--service-cluster-ip-range` when the operator gave it: the ranges then come
    /// from the cluster's ServiceCIDRs all the same, and a difference is reported.
    pub explicit_ranges: Option<Vec<svcplane_allocator::Cidr>>,
    /// Follow the cluster's ServiceCIDR objects (`false`: the configured ranges
    /// always, `--service-ranges-from=flags`).
    pub follow_service_cidrs: bool,
    /// This replica's name (`POD_NAME`), shown in answered install probes.
    pub identity: String,
}

/// A started webhook: the handler for the HTTPS server and its background tasks.
pub struct Started {
    /// The admission handler.
    pub webhook: Arc<Webhook<KubeClaims>>,
    /// Watches (and, from [`start`], the repair loop); they end when the cancellation
    /// token fires.
    pub tasks: Vec<JoinHandle<()>>,
    client: Client,
    state: SharedState,
    readiness: Arc<Readiness>,
    repair: RepairConfig,
    metrics: WebhookMetrics,
    ranges: Arc<ServiceCidrSink>,
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("tasks", &self.tasks.len())
            .field("repair", &self.repair)
            .finish_non_exhaustive()
    }
}

impl Started {
    /// Whether every watch has listed and the certificate side is not considered here
    /// (the server adds that).
    pub fn readiness(&self) -> &Arc<Readiness> {
        &self.readiness
    }

    /// Where an embedding process that watches Services itself
    /// ([`ServiceSource::External`]) hands them to the webhook.
    pub fn service_sink(&self) -> ServiceSink {
        ServiceSink::new(self.state.clone(), self.readiness.clone())
    }

    /// Where ServiceCIDR objects reach the webhook's ranges (an embedding process
    /// that watches them itself feeds this; it also says how the ranges stand).
    pub fn service_cidr_sink(&self) -> &Arc<ServiceCidrSink> {
        &self.ranges
    }

    /// The claim repair loop, for the caller to spawn where it should run (`svcplane
    /// run` runs it on the leader only).
    pub fn repair_loop(
        &self,
        cancel: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        repair::run(
            self.client.clone(),
            self.state.clone(),
            self.readiness.clone(),
            self.repair,
            self.metrics.clone(),
            cancel,
        )
    }
}

/// Start the watches and the repair loop and build the handler.
pub async fn start(
    client: Client,
    options: WebhookOptions,
    cancel: CancellationToken,
) -> Result<Started, String> {
    let mut started = start_watches(client, options, cancel.clone()).await?;
    let repair = started.repair_loop(cancel);
    started.tasks.push(tokio::spawn(repair));
    Ok(started)
}

/// Start the watches and build the handler, without the repair loop.
pub async fn start_watches(
    client: Client,
    options: WebhookOptions,
    cancel: CancellationToken,
) -> Result<Started, String> {
    let allocators = options.allocator.allocators(options.seed)?;
    let mut state = AllocationState::new(allocators);
    state.set_default_retention(options.retain_released_values);
    let state = Arc::new(Mutex::new(state));
    let readiness = Arc::new(Readiness::default());
    let ranges = Arc::new(ServiceCidrSink::new(
        state.clone(),
        readiness.clone(),
        options.explicit_ranges.clone(),
        options.follow_service_cidrs,
    ));
    let mut tasks = watch::spawn_all(
        client.clone(),
        state.clone(),
        readiness.clone(),
        options.services,
        cancel.clone(),
    )
    .await;
    tasks.push(tokio::spawn(refresh_capacity(
        state.clone(),
        readiness.clone(),
        options.metrics.clone(),
        cancel.clone(),
    )));
    tasks.push(tokio::spawn(check_kubernetes_service(
        state.clone(),
        readiness.clone(),
        ranges.clone(),
        cancel.clone(),
    )));
    if !options.follow_service_cidrs {
        ranges.not_followed();
    } else if options.services == ServiceSource::OwnWatch {
        tasks.push(tokio::spawn(watch_service_cidrs(
            client.clone(),
            ranges.clone(),
            cancel.clone(),
        )));
    }
    let webhook = Arc::new(
        Webhook::new(
            state.clone(),
            KubeClaims::new(client.clone()).with_identity(&options.identity),
            readiness.clone(),
            options.metrics.clone(),
        )
        .with_identity(options.identity.clone()),
    );
    Ok(Started {
        webhook,
        tasks,
        client,
        state,
        readiness,
        repair: options.repair,
        metrics: options.metrics,
        ranges,
    })
}

/// How often the capacity gauges are recomputed (they also follow each allocation).
const CAPACITY_REFRESH: std::time::Duration = std::time::Duration::from_secs(5);

/// Keeps the capacity gauges current: first once every source has listed (so they are
/// there from the start), then every few seconds (deletes and range changes move
/// them without any admission request).
async fn refresh_capacity(
    state: SharedState,
    readiness: Arc<Readiness>,
    metrics: WebhookMetrics,
    cancel: CancellationToken,
) {
    while !readiness.all() {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
        }
    }
    loop {
        metrics.capacity.refresh(&watch::lock(&state));
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(CAPACITY_REFRESH) => {}
        }
    }
}

/// The ServiceCIDR watch of `svcplane webhook`: where the API server serves them (it
/// may be unreachable at first: retried with backoff), else the flags stand.
async fn watch_service_cidrs(
    client: Client,
    sink: Arc<ServiceCidrSink>,
    cancel: CancellationToken,
) {
    let mut backoff = Backoff::from_entropy();
    let mut outage = Outage::default();
    loop {
        let served = has_service_cidrs(&client).await;
        if served.is_ok() {
            outage.recovered("servicecidrs", "asking whether ServiceCIDR objects exist");
        }
        match served {
            Ok(true) => {
                return feed_service_cidrs(kube::Api::all(client), sink, cancel).await;
            }
            Ok(false) => return sink.not_served(),
            Err(e) => {
                let delay = backoff.next_delay();
                outage.failed(
                    "servicecidrs",
                    "cannot tell whether ServiceCIDR objects exist",
                    &e,
                    delay,
                );
                if !wait(delay, &cancel).await {
                    return;
                }
            }
        }
    }
}
