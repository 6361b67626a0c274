//! `svcplane webhook`: the admission webhook as a process of its own.
//!
//! Connects to the API server, starts the webhook's watches and claim repair loop, and
//! serves HTTPS until SIGTERM or SIGINT, with `/metrics`, `/livez` and `/readyz` on the
//! admin address. `svcplane run` embeds the same pieces beside the controllers.

use std::sync::Arc;

use anyhow::Context;
use svcplane_webhook::server::{ServerConfig, bind};
use svcplane_webhook::shell::certs::{self, CertPlan};
use svcplane_webhook::shell::repair::RepairConfig;
use svcplane_webhook::shell::{WebhookOptions, start};
use svcplane_webhook::tls::CertStatus;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cli::{CertSource, WebhookArgs, WebhookServerFlags};
use crate::kube_client::{self, users};
use crate::leader;
use crate::shell::admin;
use crate::shell::metrics::Metrics;
use crate::shell::secure_metrics;

/// How long in-flight admission requests may finish after a shutdown signal.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Default namespace of namespaced objects svcplane owns (the Lease, the certificate
/// Secret) without a flag and without `POD_NAMESPACE`.
pub const DEFAULT_NAMESPACE: &str = "kube-system";

/// `flag`, else `$POD_NAMESPACE`, else [`DEFAULT_NAMESPACE`].
pub fn namespace_or_pod(flag: Option<&str>) -> String {
    flag.filter(|n| !n.is_empty())
        .map(str::to_owned)
        .or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|n| !n.is_empty())
        })
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned())
}

/// The certificate plan the flags describe.
pub fn cert_plan(flags: &WebhookServerFlags) -> Result<CertPlan, String> {
    Ok(match flags.cert_source()? {
        CertSource::Files { cert, key } => CertPlan::Files { cert, key },
        CertSource::Secret { name, namespace } => {
            let namespace = namespace_or_pod(namespace.as_deref());
            let mut hosts =
                svcplane_webhook::certs::service_hosts(&flags.webhook_service_name, &namespace);
            hosts.extend(
                flags
                    .tls_extra_hosts
                    .iter()
                    .filter(|h| !h.is_empty())
                    .cloned(),
            );
            CertPlan::SelfManaged {
                namespace,
                name,
                configuration: Some(flags.webhook_configuration_name.clone())
                    .filter(|c| !c.is_empty()),
                settings: svcplane_webhook::certs::Settings {
                    hosts,
                    ca_validity: flags.tls_ca_validity,
                    cert_validity: flags.tls_cert_validity,
                    settle: svcplane_webhook::certs::DEFAULT_SETTLE,
                },
            }
        }
    })
}

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
    let plan = cert_plan(&args.server).map_err(|e| anyhow::anyhow!(e))?;
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
    // Set once the HTTPS server is listening with a certificate.
    let serving: Arc<std::sync::OnceLock<Arc<CertStatus>>> = Arc::default();
    let ready: admin::ReadinessCheck = {
        let webhook = Arc::clone(&started.webhook);
        let serving = Arc::clone(&serving);
        let ranges = started.service_cidr_sink().clone();
        Arc::new(move || {
            if let Some(why) = webhook.not_ready_reason() {
                return Err(format!("webhook: {why}"));
            }
            match serving.get() {
                None => Err("webhook: not serving yet (no certificate)".into()),
                Some(certs) if !certs.is_loaded() => {
                    Err("webhook: no valid certificate loaded".into())
                }
                Some(_) => Ok(crate::run_cmd::range_notes(&ranges)),
            }
        })
    };
    let admin_stop = CancellationToken::new();
    let secure = match args.metrics.secure().map_err(|e| anyhow::anyhow!(e))? {
        Some(settings) => Some(
            secure_metrics::serve(
                &settings,
                metrics.clone(),
                kube_client::connect(args.kubeconfig.as_deref(), users::METRICS_AUTH).await?,
                admin_stop.clone(),
            )
            .await?,
        ),
        None => None,
    };
    let admin = admin::serve(
        args.metrics.metrics_bind_address,
        secure.as_ref().map(|s| s.local_addr),
        metrics,
        ready,
        cancel.clone(),
        admin_stop.clone(),
    )
    .await
    .with_context(|| format!("admin server on {}", args.metrics.metrics_bind_address))?;
    let prepared = certs::prepare(
        &plan,
        &client,
        args.server.tls_reload_interval,
        background.clone(),
    )
    .await;
    let result = match prepared {
        None => Ok(()),
        Some((certs, _loop)) => {
            info!(bind = %args.server.webhook_bind_address, "serving the admission webhook");
            let config = ServerConfig {
                bind_address: args.server.webhook_bind_address,
                certs,
                request_timeout: args.server.webhook_request_timeout,
                reload_interval: args.server.tls_reload_interval,
                drain: DRAIN,
            };
            match bind(Arc::clone(&started.webhook), config, cancel.clone()).await {
                Ok(running) => {
                    started.webhook.metrics().cert.serving(running.certs());
                    let _ = serving.set(running.certs());
                    running.wait().await
                }
                Err(e) => Err(e),
            }
        }
    };
    admin_stop.cancel();
    let _ = admin.task.await;
    if let Some(s) = secure {
        let _ = s.task.await;
    }
    background.cancel();
    for t in started.tasks {
        let _ = t.await;
    }
    result.context("webhook server")
}
