//! The leader-election decision, free of I/O and of clock reads.
//!
//! Why a separate pure module: the rules that decide who may lead (when a Lease counts as
//! expired, what a takeover writes, when `leaseTransitions` moves) are where a leader
//! election goes wrong, and they are easiest to get right as plain functions of their
//! inputs. The elector (`elector.rs`) only reads the Lease, passes in the local monotonic
//! time and the wall time, and writes what [`next_record`] returns.
//!
//! Semantics follow client-go's `leaderelection` package:
//! - expiry is judged on the **local monotonic clock**: the time this replica last saw the
//!   record *change* ([`Observed`]) plus the holder's lease duration. The timestamps in the
//!   Lease are written for humans and other tools; comparing them with our own wall clock
//!   would make the election depend on clock skew between nodes;
//! - a Lease with no holder (released) is free at once;
//! - a Lease that names us is ours to renew, even if this process never acquired it (a
//!   restarted container keeps its pod name);
//! - acquiring sets `acquireTime` and `renewTime` to now and bumps `leaseTransitions` when
//!   the holder changes; renewing keeps `acquireTime`; releasing clears the holder and
//!   shortens the duration to 1 s, as client-go's `ReleaseOnCancel` does.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

/// The lease duration written on release: short, so tools that judge by `renewTime` also
/// see the Lease as free almost at once (our own rule needs only the empty holder).
pub const RELEASED_LEASE_DURATION: Duration = Duration::from_secs(1);

/// The leader-election fields of a Lease (`spec` of `coordination.k8s.io/v1` `Lease`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// `holderIdentity`; an empty string is read as `None` (released).
    pub holder: Option<String>,
    /// `leaseDurationSeconds`; zero when absent or not positive.
    pub lease_duration: Duration,
    /// `acquireTime`.
    pub acquire_time: Option<Timestamp>,
    /// `renewTime`.
    pub renew_time: Option<Timestamp>,
    /// `leaseTransitions` (0 when absent).
    pub transitions: i32,
}

impl LeaseRecord {
    /// Reads the record from a Lease's spec.
    pub fn from_spec(spec: &LeaseSpec) -> Self {
        Self {
            holder: spec.holder_identity.clone().filter(|h| !h.is_empty()),
            lease_duration: spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(Duration::ZERO, Duration::from_secs),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }

    /// Writes the record into `spec`, keeping the fields leader election does not own
    /// (`strategy`, `preferredHolder`) as they were.
    pub fn write_to(&self, spec: &mut LeaseSpec) {
        spec.holder_identity.clone_from(&self.holder);
        spec.lease_duration_seconds = whole_seconds_up(self.lease_duration);
        spec.acquire_time = self.acquire_time.map(MicroTime);
        spec.renew_time = self.renew_time.map(MicroTime);
        spec.lease_transitions = Some(self.transitions);
    }

    /// The holder, if any.
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref()
    }
}

/// `leaseDurationSeconds` is whole seconds: round up, so a sub-second duration never
/// becomes 0 (which the API server rejects) and other replicas never wait less than we
/// meant.
fn whole_seconds_up(d: Duration) -> Option<i32> {
    if d.is_zero() {
        return None;
    }
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    Some(i32::try_from(secs).unwrap_or(i32::MAX))
}

/// The last record this replica saw, and when (local monotonic time) it last changed.
///
/// Only a *change* moves the time: a holder that stops renewing leaves the same record in
/// the Lease, and its lease runs out `lease_duration` after we first saw that record.
#[derive(Debug, Clone)]
pub struct Observed {
    record: Option<LeaseRecord>,
    at: Instant,
}

impl Observed {
    /// Nothing seen yet; `now` is the starting time.
    pub fn new(now: Instant) -> Self {
        Self {
            record: None,
            at: now,
        }
    }

    /// Records what a read (or our own write) returned at `now`. Returns whether it differs
    /// from what was seen before.
    pub fn observe(&mut self, record: Option<LeaseRecord>, now: Instant) -> bool {
        if self.record == record {
            return false;
        }
        self.record = record;
        self.at = now;
        true
    }

    /// The record last seen (`None`: no Lease exists).
    pub fn record(&self) -> Option<&LeaseRecord> {
        self.record.as_ref()
    }

    /// When the record last changed, on the local clock.
    pub fn at(&self) -> Instant {
        self.at
    }
}

/// What to do with the Lease as last observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No Lease exists: create it naming us.
    Create,
    /// The Lease is free (released, or its holder's lease ran out on our clock): take it.
    Acquire,
    /// The Lease names us: renew it.
    Renew,
    /// Someone else holds a lease that has not run out on our clock.
    Follow {
        /// The current holder.
        holder: String,
        /// How long until it runs out, if not renewed.
        expires_in: Duration,
    },
}

/// The record write that a decision leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Become the holder (create, take over a free or expired Lease).
    Acquire,
    /// Stay the holder.
    Renew,
    /// Give the Lease up so another replica can take it at once.
    Release,
}

/// Decides what to do with `current` (the record last observed, `None` when no Lease
/// exists), which last changed at `observed_at`, as replica `me` at local time `now`.
///
/// A holder that wrote no lease duration is given ours (`params.lease_duration`) rather
/// than none: taking over such a Lease at once could make two leaders.
pub fn decide(
    current: Option<&LeaseRecord>,
    observed_at: Instant,
    me: &str,
    now: Instant,
    params: &Params,
) -> Decision {
    let Some(record) = current else {
        return Decision::Create;
    };
    let holder = match record.holder() {
        None => return Decision::Acquire,
        Some(h) if h == me => return Decision::Renew,
        Some(h) => h,
    };
    let duration = if record.lease_duration.is_zero() {
        params.lease_duration
    } else {
        record.lease_duration
    };
    // An instant too far ahead to represent never comes: the lease never runs out.
    let Some(expires_at) = observed_at.checked_add(duration) else {
        return follow(holder, Duration::MAX);
    };
    if expires_at <= now {
        Decision::Acquire
    } else {
        follow(holder, expires_at.duration_since(now))
    }
}

fn follow(holder: &str, expires_in: Duration) -> Decision {
    Decision::Follow {
        holder: holder.to_string(),
        expires_in,
    }
}

/// The record to write for `action`, from the record last read (`None`: creating the
/// Lease), as replica `me`, with `wall_now` as the wall-clock time for the timestamps.
///
/// `Renew` of a record that does not name us is an acquisition (new `acquireTime`,
/// transition counted): the caller should not ask for it, and if it does, the written
/// record must still tell the truth.
pub fn next_record(
    current: Option<&LeaseRecord>,
    action: Action,
    me: &str,
    wall_now: Timestamp,
    params: &Params,
) -> LeaseRecord {
    let transitions = current.map_or(0, |c| c.transitions);
    let ours = current.is_some_and(|c| c.holder() == Some(me));
    match action {
        Action::Release => LeaseRecord {
            holder: None,
            lease_duration: RELEASED_LEASE_DURATION,
            acquire_time: Some(wall_now),
            renew_time: Some(wall_now),
            transitions,
        },
        Action::Renew if ours => LeaseRecord {
            holder: Some(me.to_string()),
            lease_duration: params.lease_duration,
            acquire_time: current.and_then(|c| c.acquire_time).or(Some(wall_now)),
            renew_time: Some(wall_now),
            transitions,
        },
        Action::Acquire | Action::Renew => LeaseRecord {
            holder: Some(me.to_string()),
            lease_duration: params.lease_duration,
            acquire_time: Some(wall_now),
            renew_time: Some(wall_now),
            // A new Lease starts at 0; any change of holder (from another replica, or from
            // released) is one transition.
            transitions: match current {
                None => 0,
                Some(_) if ours => transitions,
                Some(_) => transitions.saturating_add(1),
            },
        },
    }
}

/// Timing of the election, with kube-controller-manager's flag names and defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// `--leader-elect-lease-duration`: how long followers wait, after last seeing the
    /// Lease change, before taking it over.
    pub lease_duration: Duration,
    /// `--leader-elect-renew-deadline`: how long the leader keeps leading without a
    /// successful renewal.
    pub renew_deadline: Duration,
    /// `--leader-elect-retry-period`: the interval between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl Default for Params {
    /// 15 s / 10 s / 2 s, kube-controller-manager's defaults.
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// client-go's `JitterFactor`, as a fraction: the renew deadline must leave room for one
/// retry period stretched by 20 %.
const JITTER_NUMERATOR: u128 = 6;
const JITTER_DENOMINATOR: u128 = 5;

impl Params {
    /// Validated parameters.
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, ParamsError> {
        let params = Self {
            lease_duration,
            renew_deadline,
            retry_period,
        };
        params.validate()?;
        Ok(params)
    }

    /// Checks lease_duration > renew_deadline > 1.2 × retry_period > 0.
    ///
    /// Why: followers take over `lease_duration` after the leader's last renewal, and the
    /// leader stops leading `renew_deadline` after it, so the deadline must come first; and
    /// the deadline must leave room for at least one retry.
    pub fn validate(&self) -> Result<(), ParamsError> {
        for (flag, value) in [
            (LEASE_DURATION_FLAG, self.lease_duration),
            (RENEW_DEADLINE_FLAG, self.renew_deadline),
            (RETRY_PERIOD_FLAG, self.retry_period),
        ] {
            if value.is_zero() {
                return Err(ParamsError::NotPositive { flag, value });
            }
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(ParamsError::DeadlineNotBeforeLeaseEnd {
                renew_deadline: self.renew_deadline,
                lease_duration: self.lease_duration,
            });
        }
        if self.renew_deadline.as_nanos() * JITTER_DENOMINATOR
            <= self.retry_period.as_nanos() * JITTER_NUMERATOR
        {
            return Err(ParamsError::NoRoomToRetry {
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
        Ok(())
    }
}

const LEASE_DURATION_FLAG: &str = "--leader-elect-lease-duration";
const RENEW_DEADLINE_FLAG: &str = "--leader-elect-renew-deadline";
const RETRY_PERIOD_FLAG: &str = "--leader-elect-retry-period";

/// Leader-election timing that cannot work, named by its flags.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    /// A duration is zero.
    #[error("{flag} ({value:?}) must be greater than zero")]
    NotPositive {
        /// The flag.
        flag: &'static str,
        /// Its value.
        value: Duration,
    },
    /// The leader would still lead after followers may take over.
    #[error(
        "--leader-elect-renew-deadline ({renew_deadline:?}) must be shorter than --leader-elect-lease-duration ({lease_duration:?})"
    )]
    DeadlineNotBeforeLeaseEnd {
        /// `--leader-elect-renew-deadline`.
        renew_deadline: Duration,
        /// `--leader-elect-lease-duration`.
        lease_duration: Duration,
    },
    /// Not even one (jittered) retry fits before the deadline.
    #[error(
        "--leader-elect-renew-deadline ({renew_deadline:?}) must be longer than 1.2 x --leader-elect-retry-period ({retry_period:?})"
    )]
    NoRoomToRetry {
        /// `--leader-elect-renew-deadline`.
        renew_deadline: Duration,
        /// `--leader-elect-retry-period`.
        retry_period: Duration,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const ME: &str = "me";
    const OTHER: &str = "other";

    fn params() -> Params {
        Params::default()
    }

    fn wall(second: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + second).unwrap()
    }

    fn held_by(holder: &str) -> LeaseRecord {
        LeaseRecord {
            holder: Some(holder.to_string()),
            lease_duration: Duration::from_secs(15),
            acquire_time: Some(wall(0)),
            renew_time: Some(wall(5)),
            transitions: 3,
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn rule_acquire_when_no_lease() {
        let t0 = Instant::now();
        assert_eq!(decide(None, t0, ME, t0, &params()), Decision::Create);
        let created = next_record(None, Action::Acquire, ME, wall(0), &params());
        assert_eq!(created.holder(), Some(ME));
        assert_eq!(created.lease_duration, secs(15));
        assert_eq!(created.acquire_time, Some(wall(0)));
        assert_eq!(created.renew_time, Some(wall(0)));
        assert_eq!(created.transitions, 0);
    }

    #[test]
    fn rule_follow_while_other_holder_unexpired() {
        let t0 = Instant::now();
        let rec = held_by(OTHER);
        assert_eq!(
            decide(Some(&rec), t0, ME, t0 + secs(14), &params()),
            Decision::Follow {
                holder: OTHER.into(),
                expires_in: secs(1)
            }
        );
    }

    #[test]
    fn rule_take_over_after_lease_duration_on_local_clock() {
        let t0 = Instant::now();
        let mut rec = held_by(OTHER);
        // The Lease's own timestamps are far in the past (or future): they do not matter.
        rec.renew_time = Some(wall(-3600));
        let at = |d| decide(Some(&rec), t0, ME, t0 + d, &params());
        assert!(matches!(at(secs(1)), Decision::Follow { .. }));
        assert!(matches!(
            at(secs(15) - Duration::from_nanos(1)),
            Decision::Follow { .. }
        ));
        assert_eq!(at(secs(15)), Decision::Acquire);
        rec.renew_time = Some(wall(3600));
        assert_eq!(
            decide(Some(&rec), t0, ME, t0 + secs(15), &params()),
            Decision::Acquire
        );
    }

    #[test]
    fn rule_expiry_uses_holders_duration_not_ours() {
        let t0 = Instant::now();
        let mut rec = held_by(OTHER);
        rec.lease_duration = secs(60);
        assert!(matches!(
            decide(Some(&rec), t0, ME, t0 + secs(59), &params()),
            Decision::Follow { .. }
        ));
        assert_eq!(
            decide(Some(&rec), t0, ME, t0 + secs(60), &params()),
            Decision::Acquire
        );
    }

    #[test]
    fn rule_missing_duration_counts_as_ours() {
        let t0 = Instant::now();
        let mut rec = held_by(OTHER);
        rec.lease_duration = Duration::ZERO;
        assert!(matches!(
            decide(Some(&rec), t0, ME, t0 + secs(14), &params()),
            Decision::Follow { .. }
        ));
        assert_eq!(
            decide(Some(&rec), t0, ME, t0 + secs(15), &params()),
            Decision::Acquire
        );
    }

    #[test]
    fn rule_observed_time_moves_only_when_record_changes() {
        let t0 = Instant::now();
        let mut seen = Observed::new(t0);
        assert!(seen.observe(Some(held_by(OTHER)), t0 + secs(1)));
        assert!(!seen.observe(Some(held_by(OTHER)), t0 + secs(10)));
        assert_eq!(seen.at(), t0 + secs(1));
        // The holder stopped renewing: the lease runs out 15 s after we first saw it.
        assert_eq!(
            decide(seen.record(), seen.at(), ME, t0 + secs(16), &params()),
            Decision::Acquire
        );
        // A renewal is a change, and restarts the wait.
        let mut renewed = held_by(OTHER);
        renewed.renew_time = Some(wall(7));
        assert!(seen.observe(Some(renewed), t0 + secs(12)));
        assert!(matches!(
            decide(seen.record(), seen.at(), ME, t0 + secs(16), &params()),
            Decision::Follow { .. }
        ));
    }

    #[test]
    fn rule_renew_own_lease() {
        let t0 = Instant::now();
        // Even long after we last saw it change: it names us.
        assert_eq!(
            decide(Some(&held_by(ME)), t0, ME, t0 + secs(3600), &params()),
            Decision::Renew
        );
    }

    #[test]
    fn rule_renew_keeps_acquire_time() {
        let cur = held_by(ME);
        let next = next_record(Some(&cur), Action::Renew, ME, wall(9), &params());
        assert_eq!(next.acquire_time, Some(wall(0)));
        assert_eq!(next.renew_time, Some(wall(9)));
        assert_eq!(next.transitions, 3);
        assert_eq!(next.holder(), Some(ME));
        assert_eq!(next.lease_duration, secs(15));
    }

    #[test]
    fn rule_transitions_increment_on_holder_change() {
        let p = params();
        let taken = next_record(Some(&held_by(OTHER)), Action::Acquire, ME, wall(20), &p);
        assert_eq!(taken.transitions, 4);
        assert_eq!(taken.holder(), Some(ME));
        assert_eq!(taken.acquire_time, Some(wall(20)));
        assert_eq!(taken.renew_time, Some(wall(20)));
        // Re-acquiring our own record is not a transition.
        let same = next_record(Some(&held_by(ME)), Action::Acquire, ME, wall(20), &p);
        assert_eq!(same.transitions, 3);
        // A "renewal" of someone else's record is a takeover and says so.
        let odd = next_record(Some(&held_by(OTHER)), Action::Renew, ME, wall(20), &p);
        assert_eq!(odd.transitions, 4);
        assert_eq!(odd.acquire_time, Some(wall(20)));
    }

    #[test]
    fn rule_release_clears_holder_and_shortens_duration() {
        let rel = next_record(Some(&held_by(ME)), Action::Release, ME, wall(30), &params());
        assert_eq!(rel.holder(), None);
        assert_eq!(rel.lease_duration, secs(1));
        assert_eq!(rel.renew_time, Some(wall(30)));
        assert_eq!(rel.acquire_time, Some(wall(30)));
        assert_eq!(rel.transitions, 3);
    }

    #[test]
    fn rule_released_lease_is_free_at_once() {
        let t0 = Instant::now();
        let rel = next_record(
            Some(&held_by(OTHER)),
            Action::Release,
            OTHER,
            wall(30),
            &params(),
        );
        assert_eq!(decide(Some(&rel), t0, ME, t0, &params()), Decision::Acquire);
        let taken = next_record(Some(&rel), Action::Acquire, ME, wall(30), &params());
        assert_eq!(taken.transitions, 4);
    }

    #[test]
    fn rule_empty_holder_reads_as_released() {
        let spec = LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            ..LeaseSpec::default()
        };
        let rec = LeaseRecord::from_spec(&spec);
        assert_eq!(rec.holder(), None);
        let t0 = Instant::now();
        assert_eq!(decide(Some(&rec), t0, ME, t0, &params()), Decision::Acquire);
    }

    #[test]
    fn spec_round_trip_keeps_foreign_fields() {
        let mut spec = LeaseSpec {
            strategy: Some("OldestEmulationVersion".into()),
            preferred_holder: Some("x".into()),
            ..LeaseSpec::default()
        };
        let rec = held_by(ME);
        rec.write_to(&mut spec);
        assert_eq!(spec.holder_identity.as_deref(), Some(ME));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(3));
        assert_eq!(spec.strategy.as_deref(), Some("OldestEmulationVersion"));
        assert_eq!(spec.preferred_holder.as_deref(), Some("x"));
        assert_eq!(LeaseRecord::from_spec(&spec), rec);
    }

    #[rstest]
    #[case(Duration::from_millis(1), Some(1))]
    #[case(Duration::from_millis(1500), Some(2))]
    #[case(Duration::from_secs(15), Some(15))]
    #[case(Duration::ZERO, None)]
    fn lease_duration_is_written_in_whole_seconds_rounded_up(
        #[case] d: Duration,
        #[case] want: Option<i32>,
    ) {
        assert_eq!(whole_seconds_up(d), want);
    }

    #[test]
    fn params_defaults_are_valid() {
        assert_eq!(Params::default().validate(), Ok(()));
        assert!(Params::new(secs(15), secs(10), secs(2)).is_ok());
    }

    #[rstest]
    #[case(
        secs(15),
        secs(15),
        secs(2),
        "--leader-elect-renew-deadline (15s) must be shorter than --leader-elect-lease-duration (15s)"
    )]
    #[case(
        secs(10),
        secs(15),
        secs(2),
        "--leader-elect-renew-deadline (15s) must be shorter than --leader-elect-lease-duration (10s)"
    )]
    #[case(
        secs(15),
        Duration::from_millis(2400),
        secs(2),
        "--leader-elect-renew-deadline (2.4s) must be longer than 1.2 x --leader-elect-retry-period (2s)"
    )]
    #[case(
        Duration::ZERO,
        secs(10),
        secs(2),
        "--leader-elect-lease-duration (0ns) must be greater than zero"
    )]
    #[case(
        secs(15),
        secs(10),
        Duration::ZERO,
        "--leader-elect-retry-period (0ns) must be greater than zero"
    )]
    fn params_validation_names_the_flag(
        #[case] lease: Duration,
        #[case] renew: Duration,
        #[case] retry: Duration,
        #[case] message: &str,
    ) {
        let err = Params::new(lease, renew, retry).unwrap_err();
        assert_eq!(err.to_string(), message);
    }

    #[test]
    fn params_jitter_rule_boundary() {
        // 2.4 s is exactly 1.2 x 2 s: rejected; just above is accepted.
        assert!(Params::new(secs(15), Duration::from_millis(2401), secs(2)).is_ok());
    }
}
