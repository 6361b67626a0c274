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
use super::watch::{self, Readiness};
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
}

/// A started webhook: the handler for the HTTPS server and its background tasks.
#[derive(Debug)]
pub struct Started {
    /// The admission handler.
    pub webhook: Arc<Webhook<KubeClaims>>,
    /// Watches and the repair loop; they end when the cancellation token fires.
    pub tasks: Vec<JoinHandle<()>>,
}

/// Start the watches and the repair loop and build the handler.
pub async fn start(
    client: Client,
    options: WebhookOptions,
    cancel: CancellationToken,
) -> Result<Started, String> {
    let allocators = options.allocator.allocators(options.seed)?;
    let state = Arc::new(Mutex::new(AllocationState::new(allocators)));
    let readiness = Arc::new(Readiness::default());
    let mut tasks = watch::spawn_all(
        client.clone(),
        state.clone(),
        readiness.clone(),
        cancel.clone(),
    )
    .await;
    tasks.push(tokio::spawn(repair::run(
        client.clone(),
        state.clone(),
        readiness.clone(),
        options.repair,
        cancel,
    )));
    let webhook = Arc::new(Webhook::new(state, KubeClaims::new(client), readiness));
    Ok(Started { webhook, tasks })
}
