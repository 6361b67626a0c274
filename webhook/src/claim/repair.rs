//! Which claims the repair loop releases (pure).
//!
//! Two kinds of claims are released:
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
}

impl ClaimRecord {
    /// The record of a stored claim object.
    pub fn of(claim: &AllocationClaim) -> Self {
        Self {
            name: claim.metadata.name.clone().unwrap_or_default(),
            uid: claim.metadata.uid.clone().unwrap_or_default(),
            value: claim.holding().map(|(_, _, v)| v),
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
}

impl ReleaseReason {
    /// Stable label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::ServiceGone => "service_gone",
            Self::Unused => "unused",
            Self::Malformed => "malformed",
        }
    }
}

/// When each unused claim (by uid) was first seen unused.
#[derive(Debug, Clone, Default)]
pub struct UnusedClaims {
    first_seen: HashMap<String, Instant>,
}

impl UnusedClaims {
    /// One repair pass over every stored claim at `now`: the claims to delete are the
    /// `released` ones at once, and those seen unused (`held_by_service` false, or
    /// malformed) on every pass for at least `grace`. Claims in use or gone are
    /// forgotten, so a value used again restarts its clock.
    pub fn claims_to_release<'a>(
        &mut self,
        claims: &'a [ClaimRecord],
        released: impl Fn(&ClaimRecord) -> bool,
        held_by_service: impl Fn(Claim) -> bool,
        now: Instant,
        grace: Duration,
    ) -> Vec<(&'a ClaimRecord, ReleaseReason)> {
        let mut still_unused = HashMap::with_capacity(self.first_seen.len());
        let mut out = Vec::new();
        for c in claims {
            if c.value.is_some() && released(c) {
                out.push((c, ReleaseReason::ServiceGone));
                continue;
            }
            let reason = match c.value {
                None => ReleaseReason::Malformed,
                Some(v) if !held_by_service(v) => ReleaseReason::Unused,
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
        }
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
            u.claims_to_release(&claims, none, free, t0, DEFAULT_GRACE)
                .is_empty(),
            "first sighting"
        );
        let at = |s| t0 + Duration::from_secs(s);
        assert!(
            u.claims_to_release(&claims, none, free, at(59), DEFAULT_GRACE)
                .is_empty()
        );
        let out = u.claims_to_release(&claims, none, free, at(60), DEFAULT_GRACE);
        assert_eq!(names(&out), ["a"]);
        assert_eq!(out[0].1, ReleaseReason::Unused);
    }

    #[test]
    fn a_claim_whose_value_a_service_holds_is_kept_and_its_clock_restarts() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let claims = vec![rec("a", Some(Claim::NodePort(30001)))];
        let mut u = UnusedClaims::default();
        u.claims_to_release(&claims, none, |_| false, t0, DEFAULT_GRACE);
        // The Service shows up: kept, and forgotten as unused.
        assert!(
            u.claims_to_release(&claims, none, |_| true, at(50), DEFAULT_GRACE)
                .is_empty()
        );
        // Unused again later: a fresh grace period starts.
        assert!(
            u.claims_to_release(&claims, none, |_| false, at(100), DEFAULT_GRACE)
                .is_empty()
        );
        assert!(
            u.claims_to_release(&claims, none, |_| false, at(159), DEFAULT_GRACE)
                .is_empty()
        );
        assert_eq!(
            names(&u.claims_to_release(&claims, none, |_| false, at(160), DEFAULT_GRACE)),
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
            none,
            |_| false,
            t0,
            DEFAULT_GRACE,
        );
        let mut again = rec("a", Some(ip("10.0.0.2")));
        again.uid = "uid-a-2".into();
        let claims = vec![again];
        assert!(
            u.claims_to_release(&claims, none, |_| false, at(70), DEFAULT_GRACE)
                .is_empty()
        );
        assert_eq!(
            names(&u.claims_to_release(&claims, none, |_| false, at(130), DEFAULT_GRACE)),
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
        let out = u.claims_to_release(&claims, gone, |_| false, t0, DEFAULT_GRACE);
        assert_eq!(
            out.iter()
                .map(|(c, r)| (c.name.as_str(), *r))
                .collect::<Vec<_>>(),
            [("gone", ReleaseReason::ServiceGone)],
            "no grace for a claim of a deleted Service; the other waits"
        );
        // A released claim is released whatever else holds its value (a new Service
        // that took it over in-tree, say); the Service holding it keeps its own claim.
        let out = u.claims_to_release(&claims, gone, |_| true, t0, DEFAULT_GRACE);
        assert_eq!(names(&out), ["gone"]);
    }

    #[test]
    fn malformed_claims_are_released_after_the_grace_period() {
        let t0 = Instant::now();
        let claims = vec![rec("bad", None)];
        let mut u = UnusedClaims::default();
        assert!(
            u.claims_to_release(&claims, none, |_| true, t0, DEFAULT_GRACE)
                .is_empty()
        );
        let out = u.claims_to_release(&claims, none, |_| true, t0 + DEFAULT_GRACE, DEFAULT_GRACE);
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
