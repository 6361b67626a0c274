//! Retrying the API server (WH-15): one jittered backoff and one warning per outage,
//! shared by every retry loop of both crates.
//!
//! Why one type: the loops that wait for the API server (the watches, "is this
//! resource served?", the first certificate pass, `svcplane run` waiting for the API
//! server) each had their own copy of a 500 ms → 30 s doubling without jitter, so two
//! replicas restarted by the same outage retried in lock-step, and a fix had to be
//! made nine times. It lives in this crate because the controller crate depends on
//! it (never the other way round).
//!
//! The delays come from `backon`'s exponential backoff (already a dependency of
//! kube-runtime). Randomness is passed in as a seed, so a test replays a sequence
//! exactly; production seeds from the process' random hash keys
//! ([`Backoff::from_entropy`]), so replicas — and loops within one replica — diverge.

mod outage;

pub use outage::Outage;

use std::hash::BuildHasher;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio_util::sync::CancellationToken;

/// Delay before the first retry, before jitter (WH-15.1).
pub const FIRST: Duration = Duration::from_millis(500);
/// No delay is ever longer (WH-15.1). Also the bound on how long a loop may sleep
/// after the API server is back: with a 30 s cap (the old value, client-go's), the
/// fault suite saw recovery after a 35 s outage wait 25 s on the backoff alone; at
/// 8 s a replica's few loops cost the API server about one request a second while
/// it is down.
pub const CAP: Duration = Duration::from_secs(8);

/// A doubling, jittered retry delay: the n-th delay is drawn from
/// `[d, 2d)` with `d = min(FIRST · 2ⁿ, CAP / 2)`, so the first lies in [500 ms, 1 s)
/// and none exceeds [`CAP`]. `backon` adds up to 100 % of the base delay as jitter,
/// hence the base is capped at half of [`CAP`].
#[derive(Debug)]
pub struct Backoff {
    seed: u64,
    /// Bumped on every reset, so each outage draws a fresh sequence.
    resets: u64,
    delays: ExponentialBackoff,
}

fn delays(seed: u64) -> ExponentialBackoff {
    ExponentialBuilder::new()
        .with_min_delay(FIRST)
        .with_max_delay(CAP / 2)
        .with_factor(2.0)
        .without_max_times()
        .with_jitter()
        .with_jitter_seed(seed)
        .build()
}

impl Backoff {
    /// A backoff whose jitter is drawn from `seed` (tests pass a fixed one).
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            resets: 0,
            delays: delays(seed),
        }
    }

    /// A backoff seeded from this process' random hash keys: different in every
    /// replica, and in every loop of one replica (std bumps the keys per call).
    pub fn from_entropy() -> Self {
        Self::new(std::collections::hash_map::RandomState::new().hash_one(0u8))
    }

    /// The next delay (the first after [`reset`](Self::reset) or creation is the
    /// shortest).
    pub fn next_delay(&mut self) -> Duration {
        // Without `max_times` the iterator never ends; CAP is the bound either way.
        self.delays.next().unwrap_or(CAP).min(CAP)
    }

    /// Starts over from the shortest delay (after a success).
    pub fn reset(&mut self) {
        self.resets += 1;
        self.delays = delays(
            self.seed
                .wrapping_add(self.resets.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        );
    }

    /// Sleeps the next delay; `false` if `cancel` fired first.
    pub async fn sleep(&mut self, cancel: &CancellationToken) -> bool {
        wait(self.next_delay(), cancel).await
    }
}

/// Sleeps `delay`; `false` if `cancel` fired first.
pub async fn wait(delay: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        () = cancel.cancelled() => false,
        () = tokio::time::sleep(delay) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(seed: u64, n: usize) -> Vec<Duration> {
        let mut b = Backoff::new(seed);
        (0..n).map(|_| b.next_delay()).collect()
    }

    #[test]
    fn rule_15_1_two_replicas_seeded_differently_do_not_retry_in_step() {
        let (a, b) = (first(1, 12), first(2, 12));
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        assert_eq!(same, 0, "{a:?} vs {b:?}");
        // And their retry times (the running sums) drift apart rather than meet.
        let at = |d: &[Duration]| d.iter().sum::<Duration>();
        assert_ne!(at(&a), at(&b));
    }

    #[test]
    fn rule_15_1_the_same_seed_replays_the_same_delays() {
        assert_eq!(first(7, 12), first(7, 12));
    }

    #[test]
    fn rule_15_1_first_delay_in_range_and_none_above_the_cap() {
        for seed in 0..500 {
            let delays = first(seed, 40);
            assert!(
                (FIRST..FIRST * 2).contains(&delays[0]),
                "seed {seed}: first {:?}",
                delays[0]
            );
            assert!(delays.iter().all(|d| *d <= CAP), "seed {seed}: {delays:?}");
            // It grows: by the 7th retry the base delay has reached the cap's half.
            assert!(delays[7..].iter().all(|d| *d >= CAP / 2), "{delays:?}");
        }
    }

    #[test]
    fn rule_15_1_reset_starts_over_from_the_shortest_delay() {
        let mut b = Backoff::new(3);
        for _ in 0..10 {
            b.next_delay();
        }
        b.reset();
        assert!((FIRST..FIRST * 2).contains(&b.next_delay()));
    }

    #[test]
    fn rule_15_1_entropy_seeds_differ_between_backoffs() {
        let seq = |mut b: Backoff| (0..8).map(|_| b.next_delay()).collect::<Vec<_>>();
        assert_ne!(seq(Backoff::from_entropy()), seq(Backoff::from_entropy()));
    }

    #[tokio::test(start_paused = true)]
    async fn sleep_stops_early_when_cancelled() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        assert!(!Backoff::new(1).sleep(&cancel).await);
        assert!(Backoff::new(1).sleep(&CancellationToken::new()).await);
    }
}
