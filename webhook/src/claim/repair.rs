//! Which claims the repair loop releases (pure).
//!
//! A claim retaining a deleted Service's value (`--retain-released-values`) is kept
//! until its stored retention ends, then released at once. Two other kinds of claims
//! are released:
//! - a claim whose Service this replica saw give the value up (deleted, or updated
//!   without it) is *released* in the state already (see `state::lifecycle`): it is
//!   deleted at the next pass, with no grace period, as upstream frees a value in the
//!   request that deletes its Service;
//! - a claim whose Service was never seen: the webhook never learns whether the Service
//!   it answered for was stored (the request may be denied by a later admission step,
//!   time out, or fail validation). Such a claim is kept while some stored Service holds
//!   its value, and released once this replica has seen it unused for a grace period —
//!   long enough for any admission request still in flight (the API server's webhook
//!   timeout is at most 30 s) to have finished, as upstream's IPAddress leak cleanup
//!   waits 60 s (AL-12.1).
//!
//! The age is measured by this replica's own monotonic clock from the first pass that
//! saw the claim unused, not from `creationTimestamp`: that is the API server's clock,
//! and a replica whose clock runs ahead of it (or an API server with an odd clock)
//! would otherwise release claims of requests still in flight. A replica that starts
//! waits one grace period before releasing anything, which costs nothing but time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use svcplane_allocator::Claim;

use super::AllocationClaim;

/// Default grace period before an unused claim is released.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);

/// What the repair loop needs to know about one stored claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRecord {
    /// Object name.
    pub name: String,
    /// Object uid (a delete precondition: never delete a claim re-created meanwhile).
    pub uid: String,
    /// The claimed value; `None` when the object is no valid lock.
    pub value: Option<Claim>,
    /// When its stored retention ends, if it has one.
    pub retained_until: Option<jiff::Timestamp>,
}

impl ClaimRecord {
    /// The record of a stored claim object.
    pub fn of(claim: &AllocationClaim) -> Self {
        Self {
            name: claim.metadata.name.clone().unwrap_or_default(),
            uid: claim.metadata.uid.clone().unwrap_or_default(),
            value: claim.holding().map(|(_, _, v)| v),
            retained_until: claim
                .spec
                .retained
                .as_ref()
                .and_then(|r| r.stored())
                .map(|r| r.until),
        }
    }
}

/// Why a claim is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReason {
    /// The Service it was taken for was seen deleted, or seen without the value.
    ServiceGone,
    /// No Service has held the value for the whole grace period.
    Unused,
    /// The object does not name a parseable value matching its name.
    Malformed,
    /// It retained a deleted Service's value, and the retention has ended.
    RetentionEnded,
}

impl ReleaseReason {
    /// Stable label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::ServiceGone => "service_gone",
            Self::Unused => "unused",
            Self::Malformed => "malformed",
            Self::RetentionEnded => "retention_ended",
        }
    }
}

/// What the state says of each claim, for one repair pass.
pub trait ClaimStatus {
    /// Its Service was seen giving the value up.
    fn released(&self, claim: &ClaimRecord) -> bool;
    /// It retains a deleted Service's value (stored, or decided by this replica).
    fn retained(&self, claim: &ClaimRecord) -> bool;
    /// Some stored Service holds `value`.
    fn held_by_service(&self, value: Claim) -> bool;
}

/// When each unused claim (by uid) was first seen unused.
#[derive(Debug, Clone, Default)]
pub struct UnusedClaims {
    first_seen: HashMap<String, Instant>,
}

impl UnusedClaims {
    /// One repair pass over every stored claim at `now`: the claims to delete are the
    /// released ones at once, the retained ones whose stored retention ended by `wall`
    /// (the others are kept, whether stored yet or not), and those seen unused (no
    /// Service holds the value, or malformed) on every pass for at least `grace`.
    /// Claims in use or gone are forgotten, so a value used again restarts its clock.
    pub fn claims_to_release<'a>(
        &mut self,
        claims: &'a [ClaimRecord],
        status: &impl ClaimStatus,
        now: Instant,
        grace: Duration,
        wall: jiff::Timestamp,
    ) -> Vec<(&'a ClaimRecord, ReleaseReason)> {
        let mut still_unused = HashMap::with_capacity(self.first_seen.len());
        let mut out = Vec::new();
        for c in claims {
            if c.value.is_some() && status.retained(c) {
                if c.retained_until.is_some_and(|until| until <= wall) {
                    out.push((c, ReleaseReason::RetentionEnded));
                }
                continue;
            }
            if c.value.is_some() && status.released(c) {
                out.push((c, ReleaseReason::ServiceGone));
                continue;
            }
            let reason = match c.value {
                None => ReleaseReason::Malformed,
                Some(v) if !status.held_by_service(v) => ReleaseReason::Unused,
                Some(_) => continue,
            };
            let first = self.first_seen.get(&c.uid).copied().unwrap_or(now);
            still_unused.insert(c.uid.clone(), first);
            if now.saturating_duration_since(first) >= grace {
                out.push((c, reason));
            }
        }
        self.first_seen = still_unused;
        out
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn rec(name: &str, value: Option<Claim>) -> ClaimRecord {
        ClaimRecord {
            name: name.into(),
            uid: format!("uid-{name}"),
            value,
            retained_until: None,
        }
    }

    /// The state's say: released by `.0`, a Service holds the value by `.1`, nothing
    /// retained.
    struct Seen<R, H>(R, H);

    impl<R: Fn(&ClaimRecord) -> bool, H: Fn(Claim) -> bool> ClaimStatus for Seen<R, H> {
        fn released(&self, c: &ClaimRecord) -> bool {
            (self.0)(c)
        }
        fn retained(&self, _: &ClaimRecord) -> bool {
            false
        }
        fn held_by_service(&self, v: Claim) -> bool {
            (self.1)(v)
        }
    }

    fn wall() -> jiff::Timestamp {
        "2026-11-29T12:00:00Z".parse().unwrap()
    }

    fn ip(s: &str) -> Claim {
        Claim::Ip(s.parse::<IpAddr>().unwrap())
    }

    fn none(_: &ClaimRecord) -> bool {
        false
    }

    fn names(out: &[(&ClaimRecord, ReleaseReason)]) -> Vec<String> {
        out.iter().map(|(c, _)| c.name.clone()).collect()
    }

    #[test]
    fn an_unused_claim_is_released_once_seen_unused_for_the_grace_period() {
        let t0 = Instant::now();
        let claims = vec![rec("a", Some(ip("10.0.0.1")))];
        let mut u = UnusedClaims::default();
        let free = |_| false;
        assert!(
            u.claims_to_release(&claims, &Seen(none, free), t0, DEFAULT_GRACE, wall())
                .is_empty(),
            "first sighting"
        );
        let at = |s| t0 + Duration::from_secs(s);
        assert!(
            u.claims_to_release(&claims, &Seen(none, free), at(59), DEFAULT_GRACE, wall())
                .is_empty()
        );
        let out = u.claims_to_release(&claims, &Seen(none, free), at(60), DEFAULT_GRACE, wall());
        assert_eq!(names(&out), ["a"]);
        assert_eq!(out[0].1, ReleaseReason::Unused);
    }

    #[test]
    fn a_claim_whose_value_a_service_holds_is_kept_and_its_clock_restarts() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let claims = vec![rec("a", Some(Claim::NodePort(30001)))];
        let mut u = UnusedClaims::default();
        u.claims_to_release(&claims, &Seen(none, |_| false), t0, DEFAULT_GRACE, wall());
        // The Service shows up: kept, and forgotten as unused.
        assert!(
            u.claims_to_release(
                &claims,
                &Seen(none, |_| true),
                at(50),
                DEFAULT_GRACE,
                wall()
            )
            .is_empty()
        );
        // Unused again later: a fresh grace period starts.
        assert!(
            u.claims_to_release(
                &claims,
                &Seen(none, |_| false),
                at(100),
                DEFAULT_GRACE,
                wall()
            )
            .is_empty()
        );
        assert!(
            u.claims_to_release(
                &claims,
                &Seen(none, |_| false),
                at(159),
                DEFAULT_GRACE,
                wall()
            )
            .is_empty()
        );
        assert_eq!(
            names(&u.claims_to_release(
                &claims,
                &Seen(none, |_| false),
                at(160),
                DEFAULT_GRACE,
                wall()
            )),
            ["a"]
        );
    }

    #[test]
    fn a_re_created_claim_has_a_clock_of_its_own() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let mut u = UnusedClaims::default();
        u.claims_to_release(
            &[rec("a", Some(ip("10.0.0.2")))],
            &Seen(none, |_| false),
            t0,
            DEFAULT_GRACE,
            wall(),
        );
        let mut again = rec("a", Some(ip("10.0.0.2")));
        again.uid = "uid-a-2".into();
        let claims = vec![again];
        assert!(
            u.claims_to_release(
                &claims,
                &Seen(none, |_| false),
                at(70),
                DEFAULT_GRACE,
                wall()
            )
            .is_empty()
        );
        assert_eq!(
            names(&u.claims_to_release(
                &claims,
                &Seen(none, |_| false),
                at(130),
                DEFAULT_GRACE,
                wall()
            )),
            ["a"]
        );
    }

    #[test]
    fn a_claim_whose_service_is_gone_is_released_at_once_even_if_another_holds_the_value() {
        let t0 = Instant::now();
        let claims = vec![
            rec("gone", Some(ip("10.0.0.1"))),
            rec("young", Some(ip("10.0.0.2"))),
        ];
        let mut u = UnusedClaims::default();
        let gone = |c: &ClaimRecord| c.name == "gone";
        let out = u.claims_to_release(&claims, &Seen(gone, |_| false), t0, DEFAULT_GRACE, wall());
        assert_eq!(
            out.iter()
                .map(|(c, r)| (c.name.as_str(), *r))
                .collect::<Vec<_>>(),
            [("gone", ReleaseReason::ServiceGone)],
            "no grace for a claim of a deleted Service; the other waits"
        );
        // A released claim is released whatever else holds its value (a new Service
        // that took it over in-tree, say); the Service holding it keeps its own claim.
        let out = u.claims_to_release(&claims, &Seen(gone, |_| true), t0, DEFAULT_GRACE, wall());
        assert_eq!(names(&out), ["gone"]);
    }

    /// Everything named in `.0` is retained; nothing else is known.
    struct Retaining(&'static [&'static str]);

    impl ClaimStatus for Retaining {
        fn released(&self, _: &ClaimRecord) -> bool {
            false
        }
        fn retained(&self, c: &ClaimRecord) -> bool {
            self.0.contains(&c.name.as_str())
        }
        fn held_by_service(&self, _: Claim) -> bool {
            false
        }
    }

    #[test]
    fn a_retained_claim_is_kept_until_its_stored_retention_ends_then_released_at_once() {
        let t0 = Instant::now();
        let ends = |s: &str| Some(s.parse::<jiff::Timestamp>().unwrap());
        let claims = vec![
            ClaimRecord {
                retained_until: ends("2026-11-29T12:00:00Z"),
                ..rec("ends-now", Some(ip("10.0.0.1")))
            },
            ClaimRecord {
                retained_until: ends("2026-11-29T12:00:01Z"),
                ..rec("ends-later", Some(ip("10.0.0.2")))
            },
            // Decided by a replica, not stored yet: kept, whatever the clocks say.
            rec("pending", Some(ip("10.0.0.3"))),
            // A stored retention the state no longer honours (bound again): the
            // usual rules, so unused for a grace period first.
            ClaimRecord {
                retained_until: ends("2026-11-29T11:00:00Z"),
                ..rec("bound-again", Some(ip("10.0.0.4")))
            },
        ];
        let mut u = UnusedClaims::default();
        let status = Retaining(&["ends-now", "ends-later", "pending"]);
        let long_after = t0 + DEFAULT_GRACE * 100;
        u.claims_to_release(&claims, &status, t0, DEFAULT_GRACE, wall());
        let out = u.claims_to_release(&claims, &status, long_after, DEFAULT_GRACE, wall());
        assert_eq!(
            out.iter()
                .map(|(c, r)| (c.name.as_str(), *r))
                .collect::<Vec<_>>(),
            [
                ("ends-now", ReleaseReason::RetentionEnded),
                ("bound-again", ReleaseReason::Unused)
            ]
        );
    }

    #[test]
    fn malformed_claims_are_released_after_the_grace_period() {
        let t0 = Instant::now();
        let claims = vec![rec("bad", None)];
        let mut u = UnusedClaims::default();
        assert!(
            u.claims_to_release(&claims, &Seen(none, |_| true), t0, DEFAULT_GRACE, wall())
                .is_empty()
        );
        let out = u.claims_to_release(
            &claims,
            &Seen(none, |_| true),
            t0 + DEFAULT_GRACE,
            DEFAULT_GRACE,
            wall(),
        );
        assert_eq!(
            out.iter()
                .map(|(c, r)| (c.name.as_str(), *r))
                .collect::<Vec<_>>(),
            [("bad", ReleaseReason::Malformed)]
        );
    }

    #[test]
    fn a_record_reads_value_and_uid_from_the_object() {
        let mut c =
            AllocationClaim::for_value(ip("10.0.0.4"), &crate::state::ServiceRef::named("a", "b"));
        c.metadata.uid = Some("u1".into());
        let r = ClaimRecord::of(&c);
        assert_eq!(r.name, "ip-10.0.0.4");
        assert_eq!(r.uid, "u1");
        assert_eq!(r.value, Some(ip("10.0.0.4")));
    }
}
