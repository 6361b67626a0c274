//! Client-side request rate limiting (`--kube-api-qps`, `--kube-api-burst`).
//!
//! client-go limits every request a controller manager sends with one token bucket,
//! so a burst of reconciles cannot flood the API server; svcplane does the same. The
//! limiter is a tower layer under `kube::Client`: the client already puts its service
//! behind a buffer whose worker polls readiness before each request, so waiting for a
//! token in `poll_ready` holds back exactly the requests over the rate, in order. A
//! watch costs one token when it starts, as upstream. The bucket runs on the tokio
//! clock, so paused-clock tests and the simulator see the same limits.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

use crate::token_bucket::TokenBucket;

/// Limits requests to `qps` per second on average with bursts of `burst`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimitLayer {
    qps: f64,
    burst: u32,
}

impl RateLimitLayer {
    /// A limiter; `qps <= 0` turns limiting off. A burst below 1 is read as 1.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst: burst.max(1),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited::new(inner, self.qps, self.burst)
    }
}

/// A service whose requests wait for a token.
#[derive(Debug)]
pub struct RateLimited<S> {
    inner: S,
    bucket: TokenBucket,
    /// A token taken in `poll_ready` for the next `call`.
    holding: bool,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<S> RateLimited<S> {
    pub fn new(inner: S, qps: f64, burst: u32) -> Self {
        Self {
            inner,
            bucket: TokenBucket::new(qps, burst),
            holding: false,
            sleep: None,
        }
    }
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.bucket.is_limited() {
            while !self.holding {
                if let Some(sleep) = self.sleep.as_mut() {
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.sleep = None;
                }
                match self.bucket.take(Instant::now()) {
                    Ok(()) => self.holding = true,
                    Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.holding = false;
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
