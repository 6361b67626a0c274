//! One token bucket for both of svcplane's client-side limits: the API client's
//! QPS/burst (`kube_client::ratelimit`) and the work queues' overall rate
//! (`shell::queue`). Pure: the caller passes the time.
//!
//! Two ways to spend a token, as golang.org/x/time/rate offers them: [`TokenBucket::take`]
//! waits for a whole token (the API client holds a request back until it has one), and
//! [`TokenBucket::reserve`] takes it at once, going into debt, and says how long until
//! the debt is paid (the queue schedules the key for then).

use std::time::Duration;

use tokio::time::Instant;

/// Float rounding slack when refilling: waiting exactly the time a token takes can
/// refill to 0.9999999999999999, whose remaining wait rounds to 0 ns; on a paused clock
/// time would then never move and a caller retrying would spin.
const TOKEN_EPSILON: f64 = 1e-9;

/// `qps` tokens per second, at most `burst` saved up; starts full.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    tokens: f64,
    last: Option<Instant>,
    qps: f64,
    burst: f64,
}

impl TokenBucket {
    /// A bucket; `qps <= 0` never limits. A burst below 1 is read as 1.
    pub(crate) fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            tokens: burst,
            last: None,
            qps,
            burst,
        }
    }

    /// Whether the bucket limits at all.
    pub(crate) fn is_limited(&self) -> bool {
        self.qps > 0.0
    }

    fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let refill = now.saturating_duration_since(last).as_secs_f64() * self.qps;
            self.tokens = (self.tokens + refill).min(self.burst);
        }
        self.last = Some(now);
    }

    /// Take a whole token if there is one; otherwise how long until there is (at
    /// least a millisecond, so a retry on a paused clock makes time move).
    pub(crate) fn take(&mut self, now: Instant) -> Result<(), Duration> {
        if !self.is_limited() {
            return Ok(());
        }
        self.refill(now);
        if self.tokens >= 1.0 - TOKEN_EPSILON {
            self.tokens = (self.tokens - 1.0).max(0.0);
            Ok(())
        } else {
            let wait = Duration::from_secs_f64((1.0 - self.tokens) / self.qps);
            Err(wait.max(Duration::from_millis(1)))
        }
    }

    /// How long until a whole token is there, without taking one (zero: one is there
    /// now, or the bucket does not limit).
    pub(crate) fn until_token(&self, now: Instant) -> Duration {
        if !self.is_limited() {
            return Duration::ZERO;
        }
        let tokens = self.tokens_at(now);
        if tokens >= 1.0 - TOKEN_EPSILON {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - tokens) / self.qps).max(Duration::from_millis(1))
        }
    }

    /// How much of the burst is spent at `now`, from 0 (full, or not limiting) to 1
    /// (empty or in debt).
    pub(crate) fn spent(&self, now: Instant) -> f64 {
        if !self.is_limited() {
            return 0.0;
        }
        (1.0 - self.tokens_at(now) / self.burst).clamp(0.0, 1.0)
    }

    /// The tokens there would be at `now`, without refilling (possibly in debt).
    fn tokens_at(&self, now: Instant) -> f64 {
        let refill = self.last.map_or(0.0, |last| {
            now.saturating_duration_since(last).as_secs_f64() * self.qps
        });
        (self.tokens + refill).min(self.burst)
    }

    /// Take a token now, into debt if need be; how long until it would have existed.
    pub(crate) fn reserve(&mut self, now: Instant) -> Duration {
        if !self.is_limited() {
            return Duration::ZERO;
        }
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn until_token_looks_without_taking() {
        let mut b = TokenBucket::new(10.0, 1);
        let t0 = Instant::now();
        assert_eq!(b.until_token(t0), Duration::ZERO);
        assert_eq!(b.until_token(t0), Duration::ZERO, "looking took nothing");
        assert_eq!(b.take(t0), Ok(()));
        assert_eq!(b.until_token(t0), Duration::from_millis(100));
        assert_eq!(
            b.until_token(t0 + Duration::from_millis(100)),
            Duration::ZERO
        );
        assert_eq!(TokenBucket::new(0.0, 1).until_token(t0), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn take_spends_the_burst_then_waits_for_whole_tokens() {
        let mut b = TokenBucket::new(10.0, 2);
        let t0 = Instant::now();
        assert_eq!(b.take(t0), Ok(()));
        assert_eq!(b.take(t0), Ok(()));
        assert_eq!(b.take(t0), Err(Duration::from_millis(100)));
        assert_eq!(b.take(t0 + Duration::from_millis(100)), Ok(()));
    }

    /// Refilling for exactly the wait a fractional token needs can fall short of a
    /// whole token by rounding; `take` must hand it out rather than ask for a 0 ns
    /// wait, which a paused clock never satisfies (the API client spun forever).
    #[tokio::test(start_paused = true)]
    async fn a_token_short_by_rounding_counts_as_whole() {
        let mut b = TokenBucket::new(20.0, 30);
        let now = Instant::now();
        b.tokens = 0.00008;
        b.last = Some(now);
        let wait = Duration::from_secs_f64((1.0 - b.tokens) / b.qps);
        assert_eq!(b.take(now + wait), Ok(()));
        assert!(b.tokens >= 0.0);
    }

    #[tokio::test(start_paused = true)]
    async fn reserve_goes_into_debt_and_says_when_it_is_paid() {
        let mut b = TokenBucket::new(10.0, 1);
        let t0 = Instant::now();
        assert_eq!(b.reserve(t0), Duration::ZERO);
        assert_eq!(b.reserve(t0), Duration::from_millis(100));
        assert_eq!(b.reserve(t0), Duration::from_millis(200));
    }

    #[tokio::test(start_paused = true)]
    async fn spent_goes_from_nothing_when_full_to_all_when_empty_and_back_with_time() {
        let mut b = TokenBucket::new(10.0, 4);
        let now = Instant::now();
        assert_eq!(b.spent(now), 0.0);
        b.take(now).unwrap();
        assert!((b.spent(now) - 0.25).abs() < 1e-9);
        b.reserve(now);
        b.reserve(now);
        b.reserve(now);
        b.reserve(now);
        assert_eq!(b.spent(now), 1.0, "in debt counts as all spent");
        let later = now + Duration::from_millis(300);
        assert!(
            (b.spent(later) - 0.5).abs() < 1e-9,
            "3 tokens refilled from -1"
        );
        assert_eq!(
            TokenBucket::new(0.0, 4).spent(now),
            0.0,
            "no limit, nothing spent"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn zero_qps_never_limits() {
        let mut b = TokenBucket::new(0.0, 1);
        let t0 = Instant::now();
        for _ in 0..100 {
            assert_eq!(b.take(t0), Ok(()));
            assert_eq!(b.reserve(t0), Duration::ZERO);
        }
    }
}
