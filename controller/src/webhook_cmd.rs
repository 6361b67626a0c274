//! `svcplane webhook`: the admission webhook as a process of its own.
//!
//! Connects to the API server, starts the webhook's watches and claim repair loop, and
//! serves HTTPS until SIGTERM or SIGINT, with `/metrics`, `/livez` and `/readyz` on the
//! admin address. `svcplane run` embeds the same pieces beside the controllers.

use std::sync::Arc;

use anyhow::Context;
use svcplane_webhook::claim::AllocationClaim;
use svcplane_webhook::server::{ServerConfig, serve};
use svcplane_webhook::shell::repair::RepairConfig;
use svcplane_webhook::shell::{WebhookOptions, start};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use svcplane_webhook::handler::AdmissionHandler;

use crate::cli::WebhookArgs;
use crate::kube_client;
use crate::shell::admin;
use crate::shell::metrics::Metrics;

/// How long in-flight admission requests may finish after a shutdown signal.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Run the webhook until a shutdown signal.
pub fn run(args: &WebhookArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve_webhook(args))
}

async fn serve_webhook(args: &WebhookArgs) -> anyhow::Result<()> {
    let allocator = args
        .ranges
        .config()
        .map_err(|e| anyhow::anyhow!("allocator ranges: {e}"))?;
    let client = kube_client::connect(args.kubeconfig.as_deref()).await?;
    // Two tokens: a signal stops the server (which drains first), and only then the
    // watches, so requests answered during the drain still see a live state.
    let cancel = CancellationToken::new();
    let background = CancellationToken::new();
    tokio::spawn(kube_client::cancel_on_signal(cancel.clone()));
    if let Err(e) = kube_client::check_crd::<AllocationClaim>(&client).await {
        warn!(error = %e, "AllocationClaim CRD not usable yet; the webhook stays unready until it is");
    }
    let metrics = Metrics::new();
    let started = start(
        client,
        WebhookOptions {
            allocator,
            seed: kube_client::random_seed(),
            repair: RepairConfig {
                interval: args.server.claim_repair_interval,
                grace: args.server.claim_grace_period,
            },
            metrics: metrics.webhook().clone(),
            services: Default::default(),
            explicit_ranges: args.ranges.explicit_cluster_ip_ranges(),
            follow_service_cidrs: args.ranges.follow_cluster(),
        },
        background.clone(),
    )
    .await
    .map_err(|e| anyhow::anyhow!("allocator ranges: {e}"))?;
    let ready: admin::ReadinessCheck = {
        let webhook = Arc::clone(&started.webhook);
        let ranges = started.service_cidr_sink().clone();
        Arc::new(move || {
            if webhook.is_ready() {
                Ok(crate::run_cmd::range_notes(&ranges))
            } else {
                Err("webhook: allocation watches have not listed yet".into())
            }
        })
    };
    let admin_stop = CancellationToken::new();
    let admin = admin::serve(
        args.metrics_bind_address,
        metrics,
        ready,
        cancel.clone(),
        admin_stop.clone(),
    )
    .await
    .with_context(|| format!("admin server on {}", args.metrics_bind_address))?;
    let (cert_file, key_file) = args.server.cert_files().map_err(|e| anyhow::anyhow!(e))?;
    info!(bind = %args.server.webhook_bind_address, "serving the admission webhook");
    let config = ServerConfig {
        bind_address: args.server.webhook_bind_address,
        cert_file,
        key_file,
        request_timeout: args.server.webhook_request_timeout,
        reload_interval: args.server.tls_reload_interval,
        drain: DRAIN,
    };
    let result = serve(Arc::clone(&started.webhook), config, cancel.clone()).await;
    admin_stop.cancel();
    let _ = admin.task.await;
    background.cancel();
    for t in started.tasks {
        let _ = t.await;
    }
    result.context("webhook server")
}
