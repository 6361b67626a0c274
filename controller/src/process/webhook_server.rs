//! The webhook's serving side: the certificate the flags describe (files or a
//! self-managed Secret), the HTTPS server with its drain, and what `/readyz` says
//! about them. A server that cannot start stops the whole process, as a bad flag
//! would.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kube::Client;
use svcplane_webhook::server::{ServerConfig, bind};
use svcplane_webhook::shell::certs::{self, CertPlan};
use svcplane_webhook::shell::ranges::ServiceCidrSink;
use svcplane_webhook::shell::{KubeClaims, Webhook};
use svcplane_webhook::tls::CertStatus;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::namespace_or_pod;
use crate::cli::{CertSource, WebhookServerFlags};

/// How long in-flight admission requests may finish after a shutdown signal.
pub const WEBHOOK_DRAIN: Duration = Duration::from_secs(5);

/// Where and how the webhook serves HTTPS.
#[derive(Debug, Clone)]
pub struct Serving {
    pub bind_address: SocketAddr,
    /// Where the serving certificate comes from.
    pub certs: CertPlan,
    pub request_timeout: Duration,
    /// How often the certificate (files or Secret) is looked at again.
    pub reload_interval: Duration,
}

impl Serving {
    /// From the webhook server flags both commands share.
    pub fn from_flags(flags: &WebhookServerFlags) -> Result<Self, String> {
        Ok(Self {
            bind_address: flags.webhook_bind_address,
            certs: cert_plan(flags)?,
            request_timeout: flags.webhook_request_timeout,
            reload_interval: flags.tls_reload_interval,
        })
    }
}

/// What a serving webhook reports on: its certificate, its state, its ranges.
type Serves = (
    Arc<CertStatus>,
    Arc<Webhook<KubeClaims>>,
    Arc<ServiceCidrSink>,
);

/// The webhook's readiness inputs, set once its server listens with a certificate.
#[derive(Debug, Clone, Default)]
pub struct ServingState(Arc<OnceLock<Serves>>);

impl ServingState {
    /// What `/readyz` says of the webhook: an error until it serves with a valid
    /// certificate and its state is ready, then the Service ranges in force.
    pub fn readiness(&self) -> Result<Vec<String>, String> {
        match self.0.get() {
            None => Err("webhook not serving yet (no serving certificate)".into()),
            Some((_, webhook, _)) if webhook.not_ready_reason().is_some() => Err(format!(
                "webhook: {}",
                webhook.not_ready_reason().unwrap_or_default()
            )),
            Some((certs, _, _)) if !certs.is_loaded() => {
                Err("webhook: no valid certificate loaded".into())
            }
            Some((_, _, ranges)) => Ok(range_notes(ranges)),
        }
    }
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

/// What `/readyz` says about the Service ranges: those in force, and any disagreement
/// between the flags and the cluster's ServiceCIDRs.
pub fn range_notes(ranges: &ServiceCidrSink) -> Vec<String> {
    let mut notes = Vec::new();
    let in_force = ranges.ranges();
    if !in_force.is_empty() {
        notes.push(format!(
            "service ranges (ServiceCIDR objects): {}",
            in_force.join(", ")
        ));
    }
    notes.extend(ranges.notice());
    notes
}

/// The webhook's HTTPS server: its certificate (self-managed: the first pass over the
/// Secret, retried until it works or shutdown), then serving until `shutdown` and the
/// drain. A server that cannot start cancels `shutdown` and returns the error.
pub async fn serve_webhook(
    serving: &Serving,
    client: &Client,
    webhook: Arc<Webhook<KubeClaims>>,
    ranges: Arc<ServiceCidrSink>,
    state: ServingState,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let prepared = certs::prepare(
        &serving.certs,
        client,
        serving.reload_interval,
        shutdown.clone(),
    )
    .await;
    let Some((certs, cert_loop)) = prepared else {
        return Ok(());
    };
    info!(bind = %serving.bind_address, "serving the admission webhook");
    let server = ServerConfig {
        bind_address: serving.bind_address,
        certs,
        request_timeout: serving.request_timeout,
        reload_interval: serving.reload_interval,
        drain: WEBHOOK_DRAIN,
    };
    let result = match bind(webhook.clone(), server, shutdown.clone()).await {
        Ok(running) => {
            webhook.metrics().cert.serving(running.certs());
            let _ = state.0.set((running.certs(), webhook, ranges));
            running.wait().await.map_err(|e| format!("{e:#}"))
        }
        Err(e) => {
            let msg = format!("{e:#}");
            error!(error = %msg, "the webhook server cannot start; stopping");
            shutdown.cancel();
            Err(msg)
        }
    };
    if let Some(t) = cert_loop {
        t.abort();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_it_serves_the_webhook_is_unready_for_want_of_a_serving_certificate() {
        // `e2e_install` and operators' probes read these words.
        assert_eq!(
            ServingState::default().readiness(),
            Err("webhook not serving yet (no serving certificate)".to_owned())
        );
    }
}
