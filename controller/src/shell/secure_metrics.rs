//! The secure metrics port: `/metrics` over HTTPS, readable only by those the
//! cluster's RBAC allows (docs/reference/metrics.md), the way
//! kube-controller-manager serves its `--secure-port`.
//!
//! The certificate comes from `--metrics-tls-cert-file`/`--metrics-tls-private-key-file`
//! (re-read when they change, as the webhook's are), or is generated in memory at start
//! (self-signed, as upstream does without files: scrapers of a secure port skip the
//! chain check and rely on the bearer token). Who may read is decided by
//! [`super::metrics_auth`]. Probes are not served here: the kubelet cannot present a
//! token, so they stay on the plain admin port.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kube::Client;
use svcplane_webhook::tls::{CertReloader, DEFAULT_RELOAD_INTERVAL};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::exposition;
use super::metrics::Metrics;
use super::metrics_auth::{Credentials, Delegated, Verdict};

/// Lifetime of a generated certificate; a process lives far shorter.
const GENERATED_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// Names in a generated certificate (upstream's choice for its secure port).
const GENERATED_HOSTS: [&str; 2] = ["localhost", "127.0.0.1"];

/// Settings of the secure metrics port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecureMetrics {
    /// Where to listen (`--secure-metrics-bind-address`).
    pub bind: SocketAddr,
    /// PEM certificate and key files; `None` generates a self-signed pair.
    pub cert_files: Option<(PathBuf, PathBuf)>,
}

/// Why the secure metrics port could not start.
#[derive(Debug, thiserror::Error)]
pub enum SecureMetricsError {
    #[error("secure metrics port: cannot load the serving certificate: {0}")]
    Certificate(#[from] svcplane_webhook::tls::TlsError),
    #[error("secure metrics port: cannot generate a self-signed certificate: {0}")]
    Generate(#[from] svcplane_webhook::certs::CertError),
    #[error("secure metrics port: cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Clone)]
struct Secure {
    metrics: Metrics,
    auth: Arc<Delegated>,
}

fn router(state: Secure) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "only /metrics is served on this port\n",
            )
        })
        .with_state(state)
}

async fn metrics(State(s): State<Secure>, headers: HeaderMap) -> Response {
    let credentials =
        Credentials::from_header(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()));
    match s.auth.check(credentials, "/metrics").await {
        Verdict::Allowed => (
            [(header::CONTENT_TYPE, exposition::PROMETHEUS_TEXT)],
            exposition::to_prometheus_text(&s.metrics.encode()),
        )
            .into_response(),
        denied => {
            let code =
                StatusCode::from_u16(denied.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let text = match denied {
                Verdict::Unauthorized(why) => format!("Unauthorized: {why}"),
                Verdict::Unavailable(why) => {
                    warn!(error = %why, "cannot decide who may read /metrics");
                    format!("Internal Server Error: {why}")
                }
                Verdict::Forbidden(why) => why,
                Verdict::Allowed => String::new(),
            };
            debug!(status = code.as_u16(), reason = %text, "metrics scrape refused");
            (code, format!("{text}\n")).into_response()
        }
    }
}

/// A listening secure metrics server.
#[derive(Debug)]
pub struct SecureServer {
    /// The address actually bound.
    pub local_addr: SocketAddr,
    pub task: JoinHandle<()>,
}

/// Loads or generates the certificate, binds, and serves until `stop` fires.
pub async fn serve(
    settings: &SecureMetrics,
    metrics: Metrics,
    client: Client,
    stop: CancellationToken,
) -> Result<SecureServer, SecureMetricsError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let reloader = match &settings.cert_files {
        Some((cert, key)) => CertReloader::load(cert, key, DEFAULT_RELOAD_INTERVAL).await?,
        None => {
            let hosts: Vec<String> = GENERATED_HOSTS.iter().map(|h| (*h).to_owned()).collect();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            let (cert, key) =
                svcplane_webhook::certs::self_signed(&hosts, GENERATED_VALIDITY, now)?;
            CertReloader::from_pem("generated self-signed", cert.as_bytes(), key.as_bytes())?
        }
    };
    let address = settings.bind;
    let (local_addr, server, handle) =
        svcplane_webhook::server::listen_tls(address, reloader.rustls_config())
            .await
            .map_err(|source| SecureMetricsError::Bind { address, source })?;
    let app = router(Secure {
        metrics,
        auth: Arc::new(Delegated::new(client)),
    });
    let from_files = settings.cert_files.is_some();
    if from_files {
        tokio::spawn(reloader.run(stop.clone()));
    }
    tokio::spawn(async move {
        stop.cancelled().await;
        handle.graceful_shutdown(Some(Duration::from_secs(1)));
    });
    info!(address = %local_addr, self_signed = !from_files,
          "secure metrics port listening (HTTPS /metrics, delegated authentication and authorization)");
    let task = tokio::spawn(async move {
        if let Err(e) = server.serve(app.into_make_service()).await {
            warn!(error = %e, "secure metrics port failed");
        }
    });
    Ok(SecureServer { local_addr, task })
}
