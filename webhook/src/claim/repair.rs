//! Which claims the repair loop releases (pure).
//!
//! The webhook never learns whether the Service it answered for was stored: the request
//! may be denied by a later admission step, time out, or fail validation. Its claims
//! would then block their values forever. A claim is therefore kept exactly while some
//! stored Service holds its value, and released once nobody does and it is older than a
//! grace period — long enough for any admission request still in flight (the API
//! server's webhook timeout is at most 30 s) to have finished. This mirrors upstream's
//! IPAddress leak cleanup, which waits 60 s (allocation-spec §12.1).

use std::time::Duration;

use jiff::Timestamp;
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
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
}

impl ClaimRecord {
    /// The record of a stored claim object.
    pub fn of(claim: &AllocationClaim) -> Self {
        Self {
            name: claim.metadata.name.clone().unwrap_or_default(),
            uid: claim.metadata.uid.clone().unwrap_or_default(),
            value: claim.holding().map(|(_, _, v)| v),
            created: claim.metadata.creation_timestamp.as_ref().map(|t| t.0),
        }
    }
}

/// Why a claim is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReason {
    /// No Service holds the value and the grace period has passed.
    Unused,
    /// The object does not name a parseable value matching its name.
    Malformed,
}

impl ReleaseReason {
    /// Stable label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::Unused => "unused",
            Self::Malformed => "malformed",
        }
    }
}

/// Claims to delete now: those whose value no stored Service holds (`held_by_service`)
/// and that are older than `grace` at `now`. A claim without a creation time counts as
/// old. Claims still inside the grace period are kept (the next pass looks again).
pub fn claims_to_release(
    claims: &[ClaimRecord],
    held_by_service: impl Fn(Claim) -> bool,
    now: Timestamp,
    grace: Duration,
) -> Vec<(&ClaimRecord, ReleaseReason)> {
    let grace = jiff::SignedDuration::try_from(grace).unwrap_or(jiff::SignedDuration::MAX);
    let old_enough = |c: &ClaimRecord| c.created.is_none_or(|t| now.duration_since(t) >= grace);
    claims
        .iter()
        .filter_map(|c| match c.value {
            None if old_enough(c) => Some((c, ReleaseReason::Malformed)),
            Some(v) if !held_by_service(v) && old_enough(c) => Some((c, ReleaseReason::Unused)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn rec(name: &str, value: Option<Claim>, age_s: i64, now: Timestamp) -> ClaimRecord {
        ClaimRecord {
            name: name.into(),
            uid: format!("uid-{name}"),
            value,
            created: Some(now - jiff::SignedDuration::from_secs(age_s)),
        }
    }

    fn ip(s: &str) -> Claim {
        Claim::Ip(s.parse::<IpAddr>().unwrap())
    }

    #[test]
    fn an_unused_claim_is_released_only_after_the_grace_period() {
        let now: Timestamp = "2026-11-21T12:00:00Z".parse().unwrap();
        let claims = vec![
            rec("young", Some(ip("10.0.0.1")), 59, now),
            rec("exactly", Some(ip("10.0.0.2")), 60, now),
            rec("old", Some(ip("10.0.0.3")), 3600, now),
        ];
        let out = claims_to_release(&claims, |_| false, now, DEFAULT_GRACE);
        let names: Vec<&str> = out.iter().map(|(c, _)| c.name.as_str()).collect();
        assert_eq!(names, ["exactly", "old"]);
        assert!(out.iter().all(|(_, r)| *r == ReleaseReason::Unused));
    }

    #[test]
    fn a_claim_whose_value_a_service_holds_is_kept_however_old() {
        let now: Timestamp = "2026-11-21T12:00:00Z".parse().unwrap();
        let claims = vec![
            rec("held", Some(Claim::NodePort(30001)), 86_400, now),
            rec("free", Some(Claim::NodePort(30002)), 86_400, now),
        ];
        let out = claims_to_release(&claims, |v| v == Claim::NodePort(30001), now, DEFAULT_GRACE);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0.name, "free");
    }

    #[test]
    fn malformed_claims_are_released_after_the_grace_period_and_untimed_ones_count_as_old() {
        let now: Timestamp = "2026-11-21T12:00:00Z".parse().unwrap();
        let mut untimed = rec("untimed", Some(ip("10.0.0.9")), 0, now);
        untimed.created = None;
        let claims = vec![
            rec("bad-young", None, 5, now),
            rec("bad-old", None, 120, now),
            untimed,
        ];
        let out = claims_to_release(&claims, |_| false, now, DEFAULT_GRACE);
        assert_eq!(
            out.iter()
                .map(|(c, r)| (c.name.as_str(), *r))
                .collect::<Vec<_>>(),
            [
                ("bad-old", ReleaseReason::Malformed),
                ("untimed", ReleaseReason::Unused)
            ]
        );
    }

    #[test]
    fn a_record_reads_value_uid_and_creation_time_from_the_object() {
        let mut c =
            AllocationClaim::for_value(ip("10.0.0.4"), &crate::state::ServiceRef::named("a", "b"));
        c.metadata.uid = Some("u1".into());
        let r = ClaimRecord::of(&c);
        assert_eq!(r.name, "ip-10.0.0.4");
        assert_eq!(r.uid, "u1");
        assert_eq!(r.value, Some(ip("10.0.0.4")));
        assert_eq!(r.created, None);
    }
}
