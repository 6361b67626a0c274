//! client-go's REST client metrics for svcplane's API clients.
//!
//! kube-controller-manager exports `rest_client_requests_total{code,host,method}`,
//! `rest_client_request_duration_seconds{host,verb}` and
//! `rest_client_rate_limiter_duration_seconds{host,verb}`; the last is the one that
//! shows a controller held back by `--kube-api-qps` rather than by a slow API server.
//! svcplane exports the same names, labels and buckets. As in client-go, they are
//! process-wide ([`global`]): every client adds to the same families, and the metrics
//! registry of the process registers them once ([`register`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{Request, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use tower::{Layer, Service};

/// client-go's latency buckets for both histograms (seconds).
const BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Labels of `rest_client_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The HTTP status, or `<error>` when no response came back (client-go's text).
    pub code: String,
    pub host: String,
    pub method: String,
}

/// Labels of the two histograms.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub host: String,
    pub verb: String,
}

/// The three families.
#[derive(Debug)]
pub struct ClientMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub request_duration: HistogramFamily<VerbLabels>,
    pub rate_limiter_duration: HistogramFamily<VerbLabels>,
}

/// The process' client metrics.
pub fn global() -> &'static ClientMetrics {
    static METRICS: OnceLock<ClientMetrics> = OnceLock::new();
    METRICS.get_or_init(|| ClientMetrics {
        requests: Family::default(),
        request_duration: Family::new_with_constructor(histogram),
        rate_limiter_duration: Family::new_with_constructor(histogram),
    })
}

/// Register the families at the root of `registry` (upstream's names carry no prefix).
pub fn register(registry: &mut Registry) {
    let m = global();
    registry.register(
        "rest_client_requests",
        "Number of HTTP requests, partitioned by status code, method, and host",
        m.requests.clone(),
    );
    registry.register(
        "rest_client_request_duration_seconds",
        "Request latency in seconds, broken down by verb and host (rate-limiter wait excluded)",
        m.request_duration.clone(),
    );
    registry.register(
        "rest_client_rate_limiter_duration_seconds",
        "Client-side rate limiter latency in seconds, broken down by verb and host",
        m.rate_limiter_duration.clone(),
    );
}

/// Note how long a request of `verb` waited for the rate limiter.
pub fn rate_limited(host: &str, verb: &str, waited: Duration) {
    global()
        .rate_limiter_duration
        .get_or_create(&VerbLabels {
            host: host.to_owned(),
            verb: verb.to_owned(),
        })
        .observe(waited.as_secs_f64());
}

/// Counts and times every request through the service under it, for the API server
/// at `host` (the layer sits above kube's base-URL layer, so requests carry only a
/// path).
#[derive(Debug, Clone)]
pub struct MeteredLayer {
    host: String,
}

impl MeteredLayer {
    pub fn new(host: impl Into<String>) -> Self {
        Self { host: host.into() }
    }
}

impl<S> Layer<S> for MeteredLayer {
    type Service = Metered<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Metered {
            inner,
            host: self.host.clone(),
        }
    }
}

/// See [`MeteredLayer`].
#[derive(Debug, Clone)]
pub struct Metered<S> {
    inner: S,
    host: String,
}

impl<S, B, RB> Service<Request<B>> for Metered<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let method = request.method().as_str().to_owned();
        let host = self.host.clone();
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let m = global();
            m.request_duration
                .get_or_create(&VerbLabels {
                    host: host.clone(),
                    verb: method.clone(),
                })
                .observe(started.elapsed().as_secs_f64());
            let code = match &result {
                Ok(r) => r.status().as_u16().to_string(),
                Err(_) => "<error>".to_owned(),
            };
            m.requests
                .get_or_create(&RequestLabels { code, host, method })
                .inc();
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::ServiceExt;

    #[derive(Clone)]
    struct Status(u16);

    impl Service<Request<()>> for Status {
        type Response = Response<()>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Response<()>, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            let mut r = Response::new(());
            *r.status_mut() = axum::http::StatusCode::from_u16(self.0).unwrap();
            std::future::ready(Ok(r))
        }
    }

    fn count(code: &str, method: &str, host: &str) -> u64 {
        global()
            .requests
            .get_or_create(&RequestLabels {
                code: code.into(),
                host: host.into(),
                method: method.into(),
            })
            .get()
    }

    #[tokio::test]
    async fn requests_are_counted_by_code_method_and_host_and_timed_by_verb() {
        let host = "metered.test:6443";
        let svc = MeteredLayer::new(host).layer(Status(201));
        for _ in 0..2 {
            let req = Request::post("/api/v1/namespaces/x/pods").body(()).unwrap();
            svc.clone().oneshot(req).await.unwrap();
        }
        let get = MeteredLayer::new(host).layer(Status(404));
        get.oneshot(Request::get("/x").body(()).unwrap())
            .await
            .unwrap();
        assert_eq!(count("201", "POST", host), 2);
        assert_eq!(count("404", "GET", host), 1);
        let mut text = String::new();
        let mut r = Registry::default();
        register(&mut r);
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(
            text.contains(&format!(
                "rest_client_request_duration_seconds_count{{host=\"{host}\",verb=\"POST\"}} 2"
            )),
            "{text}"
        );
        rate_limited(host, "GET", Duration::from_millis(30));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(
            text.contains(&format!(
                "rest_client_rate_limiter_duration_seconds_bucket{{le=\"0.1\",host=\"{host}\",verb=\"GET\"}} 1"
            )),
            "{text}"
        );
    }
}
