//! The admin server: plain HTTP with `/metrics`, `/livez` and `/readyz`, on
//! `--metrics-bind-address` (docs/reference/metrics.md). With the secure metrics
//! port on, `/metrics` is served there only and this port answers probes alone, so
//! nobody who merely reaches the pod reads the metrics.
//!
//! `/readyz` answers what the kubelet needs to route webhook traffic: whether this
//! replica can serve admission reviews (certificate loaded, allocation watches
//! listed), never whether it leads, because every replica serves the webhook. Without
//! the webhook it turns ready once the API server has answered. `/livez` fails only if
//! the async runtime stopped making progress (a heartbeat task is late), so a slow
//! API server never gets the pod restarted.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::exposition;
use super::metrics::Metrics;

/// How often the liveness heartbeat ticks, and how late it may be.
const HEARTBEAT: Duration = Duration::from_secs(1);
const WEDGED_AFTER: Duration = Duration::from_secs(30);

/// Why the process is not ready, or `Ok`.
/// `Ok` with notes worth showing (e.g. the ranges in force), or why not ready.
pub(crate) type ReadinessCheck = Arc<dyn Fn() -> Result<Vec<String>, String> + Send + Sync>;

#[derive(Clone)]
struct Admin {
    metrics: Metrics,
    ready: ReadinessCheck,
    started: Instant,
    /// Milliseconds since `started` at the last heartbeat.
    heartbeat: Arc<AtomicU64>,
    shutdown: CancellationToken,
    /// Where `/metrics` is served instead, if not here.
    metrics_elsewhere: Option<SocketAddr>,
}

/// The admin routes (for tests through `tower::ServiceExt::oneshot`).
fn router(admin: Admin) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .with_state(admin)
}

async fn metrics(State(a): State<Admin>) -> Response {
    if let Some(secure) = a.metrics_elsewhere {
        return (
            StatusCode::NOT_FOUND,
            format!("/metrics is served on the secure port {secure} (HTTPS, bearer token)\n"),
        )
            .into_response();
    }
    (
        [(header::CONTENT_TYPE, exposition::PROMETHEUS_TEXT)],
        exposition::to_prometheus_text(&a.metrics.encode()),
    )
        .into_response()
}

async fn livez(State(a): State<Admin>) -> Response {
    let now = a.started.elapsed().as_millis() as u64;
    let last = a.heartbeat.load(Ordering::Acquire);
    let late = Duration::from_millis(now.saturating_sub(last));
    if late > WEDGED_AFTER {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("runtime heartbeat late by {}s\n", late.as_secs()),
        )
            .into_response();
    }
    (StatusCode::OK, "ok\n").into_response()
}

async fn readyz(State(a): State<Admin>) -> Response {
    if a.shutdown.is_cancelled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    match (a.ready)() {
        Ok(notes) => {
            let mut body = String::from("ok\n");
            for n in notes {
                body.push_str(&n);
                body.push('\n');
            }
            (StatusCode::OK, body).into_response()
        }
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

/// A listening admin server.
#[derive(Debug)]
pub(crate) struct AdminServer {
    pub task: JoinHandle<()>,
}

/// Binds and serves until `shutdown` has fired and `stop` fires (the admin server
/// outlives the drain, so `/readyz` reports "shutting down" meanwhile).
/// `metrics_elsewhere`: the secure metrics port's address when it serves `/metrics`.
pub(crate) async fn serve(
    bind: SocketAddr,
    metrics_elsewhere: Option<SocketAddr>,
    metrics: Metrics,
    ready: ReadinessCheck,
    shutdown: CancellationToken,
    stop: CancellationToken,
) -> std::io::Result<AdminServer> {
    let listener = tokio::net::TcpListener::bind(bind).await?;
    let local_addr = listener.local_addr()?;
    let admin = Admin {
        metrics,
        ready,
        started: Instant::now(),
        heartbeat: Arc::new(AtomicU64::new(0)),
        shutdown,
        metrics_elsewhere,
    };
    let beat = admin.heartbeat.clone();
    let started = admin.started;
    let beat_stop = stop.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(HEARTBEAT);
        loop {
            tokio::select! {
                () = beat_stop.cancelled() => return,
                _ = tick.tick() => beat.store(started.elapsed().as_millis() as u64, Ordering::Release),
            }
        }
    });
    let app = router(admin);
    match metrics_elsewhere {
        None => info!(address = %local_addr, "admin server listening (/metrics, /livez, /readyz)"),
        Some(_) => info!(address = %local_addr, "admin server listening (/livez, /readyz)"),
    }
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
        if let Err(e) = served {
            warn!(error = %e, "admin server failed");
        }
    });
    Ok(AdminServer { task })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use std::sync::atomic::AtomicBool;
    use tower::ServiceExt;

    async fn get(app: &Router, path: &str) -> (StatusCode, String) {
        let res = app
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn probes_and_metrics() {
        let ready = Arc::new(AtomicBool::new(false));
        let r = ready.clone();
        let shutdown = CancellationToken::new();
        let admin = Admin {
            metrics: Metrics::new(),
            ready: Arc::new(move || {
                if r.load(Ordering::Acquire) {
                    Ok(Vec::new())
                } else {
                    Err("webhook: certificate not loaded".into())
                }
            }),
            started: Instant::now(),
            heartbeat: Arc::new(AtomicU64::new(0)),
            shutdown: shutdown.clone(),
            metrics_elsewhere: None,
        };
        let app = router(admin);
        assert_eq!(get(&app, "/livez").await.0, StatusCode::OK);
        let (code, body) = get(&app, "/readyz").await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("certificate not loaded"), "{body}");
        ready.store(true, Ordering::Release);
        assert_eq!(get(&app, "/readyz").await.0, StatusCode::OK);
        let (code, body) = get(&app, "/metrics").await;
        assert_eq!(code, StatusCode::OK);
        assert!(
            body.contains("endpoint_slice_controller_endpoints_added_per_sync"),
            "{body}"
        );
        assert!(
            body.contains("# TYPE svcplane_events_dropped_total counter\n")
                && !body.contains("# EOF"),
            "kube-controller-manager's text format: {body}"
        );
        shutdown.cancel();
        assert_eq!(
            get(&app, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(get(&app, "/nope").await.0, StatusCode::NOT_FOUND);
    }

    #[tokio::test(start_paused = true)]
    async fn livez_fails_when_the_heartbeat_stops() {
        let admin = Admin {
            metrics: Metrics::new(),
            ready: Arc::new(|| Ok(Vec::new())),
            started: Instant::now(),
            heartbeat: Arc::new(AtomicU64::new(0)),
            shutdown: CancellationToken::new(),
            metrics_elsewhere: None,
        };
        let app = router(admin);
        tokio::time::advance(Duration::from_secs(31)).await;
        let (code, body) = get(&app, "/livez").await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("late"), "{body}");
    }

    #[tokio::test]
    async fn with_the_secure_port_on_the_plain_port_serves_probes_only() {
        let secure: SocketAddr = "127.0.0.1:10257".parse().unwrap();
        let admin = Admin {
            metrics: Metrics::new(),
            ready: Arc::new(|| Ok(Vec::new())),
            started: Instant::now(),
            heartbeat: Arc::new(AtomicU64::new(0)),
            shutdown: CancellationToken::new(),
            metrics_elsewhere: Some(secure),
        };
        let app = router(admin);
        let (code, body) = get(&app, "/metrics").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert!(body.contains("127.0.0.1:10257"), "{body}");
        assert!(!body.contains("workqueue"), "{body}");
        assert_eq!(get(&app, "/readyz").await.0, StatusCode::OK);
        assert_eq!(get(&app, "/livez").await.0, StatusCode::OK);
    }
}
