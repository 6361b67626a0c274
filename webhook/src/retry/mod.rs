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
//! exactly; production seeds from the process' random hash keys ([`entropy_seed`],
//! [`Backoff::from_entropy`]), so replicas — and loops within one replica — diverge.
//! The benchmark drivers' write retries (`svcplane-tests`: `sizing`, `versus`) use
//! the same type with their own first delay and cap ([`Backoff::with_bounds`]).

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
/// `[d, 2d)` with `d = min(first · 2ⁿ, cap / 2)`, and none exceeds `cap`. With the
/// defaults ([`FIRST`], [`CAP`]) the first lies in [500 ms, 1 s). `backon` adds up to
/// 100 % of the base delay as jitter, hence the base is capped at half of `cap`.
#[derive(Debug)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    seed: u64,
    /// Bumped on every reset, so each outage draws a fresh sequence.
    resets: u64,
    delays: ExponentialBackoff,
}

fn delays(first: Duration, cap: Duration, seed: u64) -> ExponentialBackoff {
    // backon returns the first delay uncapped and then clamps later ones to the
    // maximum, so a maximum under `first` would make the second delay shorter than
    // the first; holding the base at `first` keeps the sequence non-decreasing.
    ExponentialBuilder::new()
        .with_min_delay(first)
        .with_max_delay((cap / 2).max(first))
        .with_factor(2.0)
        .without_max_times()
        .with_jitter()
        .with_jitter_seed(seed)
        .build()
}

/// A seed drawn from this process' random hash keys: different in every replica,
/// and in every call within one (std bumps the keys per call). The shells pass it to
/// [`Backoff::with_bounds`]; the cores never call it, so their tests stay replayable.
pub fn entropy_seed() -> u64 {
    std::collections::hash_map::RandomState::new().hash_one(0u8)
}

impl Backoff {
    /// The API-server backoff ([`FIRST`], [`CAP`]) with jitter drawn from `seed`
    /// (tests pass a fixed one).
    pub fn new(seed: u64) -> Self {
        Self::with_bounds(FIRST, CAP, seed)
    }

    /// A backoff for a loop whose first delay and cap differ from the API-server
    /// defaults (the benchmark drivers retry single writes with shorter ones). A `cap`
    /// under `first` is raised to `first`.
    pub fn with_bounds(first: Duration, cap: Duration, seed: u64) -> Self {
        let cap = cap.max(first);
        Self {
            first,
            cap,
            seed,
            resets: 0,
            delays: delays(first, cap, seed),
        }
    }

    /// The API-server backoff seeded by [`entropy_seed`], so replicas — and loops
    /// within one replica — diverge.
    pub fn from_entropy() -> Self {
        Self::new(entropy_seed())
    }

    /// The next delay (the first after [`reset`](Self::reset) or creation is the
    /// shortest).
    pub fn next_delay(&mut self) -> Duration {
        // Without `max_times` the iterator never ends; the cap is the bound either way.
        self.delays.next().unwrap_or(self.cap).min(self.cap)
    }

    /// Starts over from the shortest delay (after a success).
    pub fn reset(&mut self) {
        self.resets += 1;
        self.delays = delays(
            self.first,
            self.cap,
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

    /// The bounds `sizing` retries its writes with: bases 400 ms, 800 ms, 1.6 s, 3.2 s.
    const BENCH_FIRST: Duration = Duration::from_millis(400);
    const BENCH_CAP: Duration = Duration::from_millis(6_400);

    fn bounded(first: Duration, cap: Duration, seed: u64, n: usize) -> Vec<Duration> {
        let mut b = Backoff::with_bounds(first, cap, seed);
        (0..n).map(|_| b.next_delay()).collect()
    }

    #[test]
    fn rule_15_1_backoff_doubles_from_first_to_cap() {
        for (first, cap) in [(FIRST, CAP), (BENCH_FIRST, BENCH_CAP)] {
            for seed in 0..200 {
                let delays = bounded(first, cap, seed, 12);
                let mut base = first;
                for (n, d) in delays.iter().enumerate() {
                    // backon scales the jitter in f32: the top may round up to 2d.
                    assert!(
                        (base..=base * 2).contains(d),
                        "{first:?}→{cap:?}, seed {seed}: delay {n} is {d:?}, base {base:?}"
                    );
                    base = (base * 2).min(cap / 2);
                }
            }
        }
    }

    #[test]
    fn rule_15_1_jitter_stays_within_bounds() {
        let firsts: Vec<Duration> = (0..200)
            .map(|seed| bounded(BENCH_FIRST, BENCH_CAP, seed, 1)[0])
            .collect();
        assert!(
            firsts
                .iter()
                .all(|d| (BENCH_FIRST..=BENCH_FIRST * 2).contains(d))
        );
        // Jitter that is always near zero would leave the loops in step: the draws
        // must reach both halves of the range.
        let middle = BENCH_FIRST * 3 / 2;
        assert!(firsts.iter().any(|d| *d < middle), "{firsts:?}");
        assert!(firsts.iter().any(|d| *d >= middle), "{firsts:?}");
        for seed in 0..200 {
            let delays = bounded(BENCH_FIRST, BENCH_CAP, seed, 40);
            assert!(delays.iter().all(|d| *d <= BENCH_CAP), "{delays:?}");
        }
    }

    #[test]
    fn rule_15_1_reset_after_success_starts_again_from_first() {
        let mut b = Backoff::with_bounds(BENCH_FIRST, BENCH_CAP, 9);
        let before: Vec<Duration> = (0..6).map(|_| b.next_delay()).collect();
        assert!(before[5] >= BENCH_CAP / 2, "{before:?}");
        b.reset();
        let after = b.next_delay();
        assert!(
            (BENCH_FIRST..=BENCH_FIRST * 2).contains(&after),
            "{after:?}"
        );
        // And doubles again from there.
        assert!((BENCH_FIRST * 2..=BENCH_FIRST * 4).contains(&b.next_delay()));
    }

    #[test]
    fn rule_15_1_a_cap_under_twice_first_still_bounds_every_delay() {
        let (first, cap) = (Duration::from_secs(1), Duration::from_millis(1_500));
        for seed in 0..200 {
            let delays = bounded(first, cap, seed, 10);
            assert!(
                delays.iter().all(|d| (first..=cap).contains(d)),
                "seed {seed}: {delays:?}"
            );
        }
        // A cap under `first` is raised to it: every delay is exactly `first`.
        let delays = bounded(first, Duration::from_millis(10), 3, 5);
        assert!(delays.iter().all(|d| *d == first), "{delays:?}");
    }

    #[test]
    fn rule_15_1_same_seed_same_bounds_replays_the_same_delays() {
        assert_eq!(
            bounded(BENCH_FIRST, BENCH_CAP, 5, 12),
            bounded(BENCH_FIRST, BENCH_CAP, 5, 12)
        );
        assert_eq!(bounded(FIRST, CAP, 5, 12), first(5, 12));
    }

    #[tokio::test(start_paused = true)]
    async fn sleep_stops_early_when_cancelled() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        assert!(!Backoff::new(1).sleep(&cancel).await);
        assert!(Backoff::new(1).sleep(&CancellationToken::new()).await);
    }
}
