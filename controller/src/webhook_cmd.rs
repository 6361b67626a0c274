//! `svcplane webhook`: the admission webhook as a process of its own.
//!
//! Connects to the API server, starts the webhook's watches and claim repair loop, and
//! serves HTTPS until SIGTERM or SIGINT, with `/metrics`, `/livez` and `/readyz` on the
//! admin address. The serving side and the admin servers are [`crate::process`]'s,
//! the same `svcplane run` assembles beside the controllers.

use std::sync::Arc;

use anyhow::Context;
use svcplane_webhook::shell::repair::RepairConfig;
use svcplane_webhook::shell::{WebhookOptions, start};
use tokio_util::sync::CancellationToken;

use crate::cli::WebhookArgs;
use crate::kube_client::{self, users};
use crate::leader;
use crate::process::{AdminServers, Serving, ServingState, serve_webhook};
use crate::shell::admin;
use crate::shell::metrics::Metrics;

/// Run the webhook until a shutdown signal.
pub fn run(args: &WebhookArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: &WebhookArgs) -> anyhow::Result<()> {
    let allocator = args
        .ranges
        .config()
        .map_err(|e| anyhow::anyhow!("allocator ranges: {e}"))?;
    let serving = Serving::from_flags(&args.server).map_err(|e| anyhow::anyhow!(e))?;
    let secure = args.metrics.secure().map_err(|e| anyhow::anyhow!(e))?;
    let client = kube_client::connect(args.kubeconfig.as_deref(), "webhook").await?;
    // Two tokens: a signal stops the server (which drains first), and only then the
    // watches, so requests answered during the drain still see a live state.
    let cancel = CancellationToken::new();
    let background = CancellationToken::new();
    tokio::spawn(kube_client::cancel_on_signal(cancel.clone()));
    let metrics = Metrics::new();
    let started = start(
        client.clone(),
        WebhookOptions {
            allocator,
            seed: kube_client::random_seed(),
            repair: RepairConfig {
                interval: args.server.claim_repair_interval,
                grace: args.server.claim_grace_period,
            },
            retain_released_values: args.server.retain_released_values,
            metrics: metrics.webhook().clone(),
            services: Default::default(),
            explicit_ranges: args.ranges.explicit_cluster_ip_ranges(),
            follow_service_cidrs: args.ranges.follow_cluster(),
            identity: leader::identity_from_env(),
        },
        background.clone(),
    )
    .await
    .map_err(|e| anyhow::anyhow!("allocator ranges: {e}"))?;
    let state = ServingState::default();
    let ready: admin::ReadinessCheck = {
        let state = state.clone();
        Arc::new(move || state.readiness())
    };
    let auth = match &secure {
        Some(settings) => Some((
            settings,
            kube_client::connect(args.kubeconfig.as_deref(), users::METRICS_AUTH).await?,
        )),
        None => None,
    };
    let admin = AdminServers::start(
        Some(args.metrics.metrics_bind_address),
        auth,
        metrics,
        ready,
        cancel.clone(),
    )
    .await?;
    let result = serve_webhook(
        &serving,
        &client,
        Arc::clone(&started.webhook),
        started.service_cidr_sink().clone(),
        state,
        cancel,
    )
    .await;
    admin.stop().await;
    background.cancel();
    for t in started.tasks {
        let _ = t.await;
    }
    result.map_err(|e| anyhow::anyhow!("webhook server: {e}"))
}
