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
use super::repair::{self, RepairConfig};
use super::watch::{self, Readiness, SharedState};
use crate::metrics::WebhookMetrics;
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
    /// Where the webhook counts what it does (registered by the caller's `/metrics`).
    pub metrics: WebhookMetrics,
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
    let state = Arc::new(Mutex::new(AllocationState::new(allocators)));
    let readiness = Arc::new(Readiness::default());
    let tasks = watch::spawn_all(
        client.clone(),
        state.clone(),
        readiness.clone(),
        cancel.clone(),
    )
    .await;
    let webhook = Arc::new(
        Webhook::new(
            state.clone(),
            KubeClaims::new(client.clone()),
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
    })
}
