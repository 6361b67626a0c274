//! Client-side request rate limiting (`--kube-api-qps`, `--kube-api-burst`).
//!
//! client-go limits every request a controller manager sends with one token bucket,
//! so a burst of reconciles cannot flood the API server; svcplane does the same. The
//! limiter is a tower layer under `kube::Client`: the client already puts its service
//! behind a buffer whose worker polls readiness before each request, so waiting for a
//! token in `poll_ready` holds back exactly the requests over the rate, in order. A
//! watch costs one token when it starts, as upstream. The bucket runs on the tokio
//! clock, so paused-clock tests and the simulator see the same limits. Each request's
//! wait for its token is reported as `rest_client_rate_limiter_duration_seconds`
//! ([`super::client_metrics`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

use crate::token_bucket::TokenBucket;

/// Limits requests to `qps` per second on average with bursts of `burst`. The
/// services made from one layer share its bucket, which [`RateLimitLayer::budget`]
/// shows to whoever schedules the requests (the work queues pace themselves by it).
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    budget: ClientBudget,
    /// The API server's `host:port`, for the limiter-wait metric.
    host: String,
}

impl RateLimitLayer {
    /// A limiter; `qps <= 0` turns limiting off. A burst below 1 is read as 1.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            budget: ClientBudget(Arc::new(Mutex::new(TokenBucket::new(qps, burst.max(1))))),
            host: String::new(),
        }
    }

    /// The bucket this layer's requests draw from.
    pub fn budget(&self) -> ClientBudget {
        self.budget.clone()
    }

    /// Report waits under this API server `host`.
    #[must_use]
    pub fn for_host(mut self, host: impl Into<String>) -> Self {
        self.host = host.into();
        self
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            budget: self.budget.clone(),
            holding: false,
            sleep: None,
            waiting_since: None,
            waited: std::time::Duration::ZERO,
            host: self.host.clone(),
        }
    }
}

/// A client's request budget, shared with its limiter. A work queue reads it to keep
/// keys queued (where further changes merge into them) while the client has no token
/// for their writes, instead of computing writes that would only wait in the limiter
/// and be outdated when sent (`shell::queue`, write coalescing).
#[derive(Debug, Clone)]
pub struct ClientBudget(Arc<Mutex<TokenBucket>>);

impl ClientBudget {
    fn bucket(&self) -> MutexGuard<'_, TokenBucket> {
        // Every bucket operation completes its updates before anything can panic.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long until the client could send a request (zero: now).
    pub fn until_token(&self) -> std::time::Duration {
        self.bucket().until_token(Instant::now())
    }

    /// How much of the client's burst is spent, from 0 (idle) to 1 (no token).
    pub fn spent(&self) -> f64 {
        self.bucket().spent(Instant::now())
    }

    /// Spends `n` tokens as `n` requests would (tests of what reads the budget).
    #[cfg(test)]
    pub(crate) fn spend(&self, n: u32) {
        let mut bucket = self.bucket();
        for _ in 0..n {
            bucket.reserve(Instant::now());
        }
    }
}

/// The HTTP method of a request, for the limiter-wait metric (`None`: not reported).
pub trait RequestVerb {
    fn verb(&self) -> Option<&str>;
}

impl<B> RequestVerb for axum::http::Request<B> {
    fn verb(&self) -> Option<&str> {
        Some(self.method().as_str())
    }
}

/// A service whose requests wait for a token.
#[derive(Debug)]
pub struct RateLimited<S> {
    inner: S,
    budget: ClientBudget,
    /// A token taken in `poll_ready` for the next `call`.
    holding: bool,
    sleep: Option<Pin<Box<Sleep>>>,
    /// When the wait for the held token began (`None`: it was there at once).
    waiting_since: Option<Instant>,
    /// How long the held token took.
    waited: std::time::Duration,
    host: String,
}

impl<S> RateLimited<S> {
    pub fn new(inner: S, qps: f64, burst: u32) -> Self {
        RateLimitLayer::new(qps, burst).layer(inner)
    }
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
    R: RequestVerb,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.budget.bucket().is_limited() {
            while !self.holding {
                if let Some(sleep) = self.sleep.as_mut() {
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.sleep = None;
                }
                let now = Instant::now();
                let taken = self.budget.bucket().take(now);
                match taken {
                    Ok(()) => {
                        self.holding = true;
                        self.waited = self
                            .waiting_since
                            .take()
                            .map_or(std::time::Duration::ZERO, |t| now - t);
                    }
                    Err(wait) => {
                        self.waiting_since.get_or_insert(now);
                        self.sleep = Some(Box::pin(tokio::time::sleep(wait)));
                    }
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        if self.budget.bucket().is_limited()
            && let Some(verb) = request.verb()
        {
            super::client_metrics::rate_limited(&self.host, verb, self.waited);
        }
        self.holding = false;
        self.waited = std::time::Duration::ZERO;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::ServiceExt;

    #[derive(Clone)]
    struct Echo;

    impl RequestVerb for u32 {
        fn verb(&self) -> Option<&str> {
            None
        }
    }

    impl Service<u32> for Echo {
        type Response = u32;
        type Error = Infallible;
        type Future = std::future::Ready<Result<u32, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, r: u32) -> Self::Future {
            std::future::ready(Ok(r))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn burst_passes_at_once_then_requests_follow_the_rate() {
        let mut svc = RateLimitLayer::new(20.0, 30).layer(Echo);
        let start = Instant::now();
        let mut times = Vec::new();
        for i in 0..50 {
            svc.ready().await.unwrap();
            svc.call(i).await.unwrap();
            times.push(Instant::now().duration_since(start));
        }
        assert!(times[29].is_zero(), "the first 30 are the burst");
        // 20 more at 20 qps take one second.
        let last = times[49].as_secs_f64();
        assert!((0.95..=1.05).contains(&last), "last request at {last}s");
    }

    #[tokio::test(start_paused = true)]
    async fn long_runs_at_odd_rates_neither_spin_nor_drift() {
        for qps in [1.0, 3.0, 7.0, 20.0] {
            let mut svc = RateLimitLayer::new(qps, 1).layer(Echo);
            let start = Instant::now();
            for i in 0..200 {
                svc.ready().await.unwrap();
                svc.call(i).await.unwrap();
            }
            let took = Instant::now().duration_since(start).as_secs_f64();
            let want = 199.0 / qps;
            assert!(
                (took - want).abs() < want * 0.02 + 0.01,
                "qps {qps}: {took}s for {want}s"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn zero_qps_disables_limiting() {
        let mut svc = RateLimitLayer::new(0.0, 1).layer(Echo);
        let start = Instant::now();
        for i in 0..1000 {
            svc.ready().await.unwrap();
            svc.call(i).await.unwrap();
        }
        assert!(Instant::now().duration_since(start).is_zero());
    }
}
