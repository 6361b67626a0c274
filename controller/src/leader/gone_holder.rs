//! Taking over a Lease whose holder Pod no longer exists.
//!
//! Why: client-go waits out a whole lease duration (15 s by default) before taking over
//! from a holder that stopped renewing. That wait is right when the holder may still be
//! running somewhere (a partitioned node), but after `helm uninstall` + `helm install`,
//! or `kubectl delete deployment` + re-create, the holder is a Pod that is gone: the
//! uninstall removed the Lease's RBAC before the leader could release it, and the new
//! replicas would otherwise spend 15 s with nobody writing EndpointSlices while the
//! install already reported success.
//!
//! A Pod object disappears only after the kubelet has confirmed its containers
//! stopped (or after a forced delete, which Kubernetes documents as unsafe for exactly
//! this reason), so "the holder's Pod is not found" means the holder is not renewing.
//! The rule is narrow on purpose:
//! - only for a holder named like a sibling replica (same Deployment name prefix as our
//!   own Pod name), looked up in our own namespace: a holder that is a developer's laptop
//!   or another workload is never judged by Pod lookups;
//! - only after the record has stayed unchanged for two retry periods (a live holder
//!   renews every retry period), and once per unchanged record, so a healthy leader
//!   costs its followers no reads.

use std::time::{Duration, Instant};

use super::decide::{LeaseRecord, Params};

/// The Deployment part of a Deployment's Pod name (`<deployment>-<pod-template-hash>-
/// <suffix>`), or `None` for a name without both parts.
fn workload_of(pod: &str) -> Option<&str> {
    let (rest, suffix) = pod.rsplit_once('-')?;
    let (workload, hash) = rest.rsplit_once('-')?;
    (!workload.is_empty() && !hash.is_empty() && !suffix.is_empty()).then_some(workload)
}

/// Whether `holder` names a replica of the same Deployment as `me` (another Pod).
pub(super) fn sibling_replica(me: &str, holder: &str) -> bool {
    me != holder && workload_of(me).is_some_and(|w| workload_of(holder) == Some(w))
}

/// The holder Pod worth looking up: the Lease names a sibling replica whose record has
/// not changed for two retry periods (it missed a renewal), and this record was not
/// looked up in the last two retry periods (`asked`: the record last looked up, and
/// when). A holder found is looked up again later: a replica of an uninstalled
/// release may still be draining when we first look, and be gone a few seconds on.
pub(super) fn holder_to_look_up<'r>(
    record: Option<&'r LeaseRecord>,
    observed_at: Instant,
    asked: Option<(&LeaseRecord, Instant)>,
    me: &str,
    now: Instant,
    params: &Params,
) -> Option<&'r str> {
    let record = record?;
    let holder = record.holder()?;
    let pause = params.retry_period * 2;
    let recently_asked =
        asked.is_some_and(|(r, at)| r == record && now.saturating_duration_since(at) < pause);
    if !sibling_replica(me, holder) || recently_asked {
        return None;
    }
    let quiet: Duration = now.saturating_duration_since(observed_at);
    (quiet >= pause).then_some(holder)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: &str) -> LeaseRecord {
        LeaseRecord {
            holder: Some(holder.to_string()),
            lease_duration: Duration::from_secs(15),
            acquire_time: None,
            renew_time: None,
            transitions: 0,
        }
    }

    const ME: &str = "svcplane-7d9f8c6b5-abcde";

    #[test]
    fn rule_siblings_share_the_deployment_prefix_across_template_hashes() {
        assert!(sibling_replica(ME, "svcplane-7d9f8c6b5-zzzzz"));
        // A previous install or rollout: another ReplicaSet of the same Deployment.
        assert!(sibling_replica(ME, "svcplane-5c4b3a291-qwert"));
        assert!(!sibling_replica(ME, ME));
        assert!(!sibling_replica(ME, "other-7d9f8c6b5-zzzzz"));
        assert!(!sibling_replica(ME, "laptop"));
        assert!(!sibling_replica(ME, "svcplane-1234"));
        assert!(!sibling_replica("laptop", "svcplane-7d9f8c6b5-zzzzz"));
    }

    #[test]
    fn rule_a_holder_is_looked_up_only_after_missing_two_renewals() {
        let params = Params::default();
        let t0 = Instant::now();
        let record = held_by("svcplane-5c4b3a291-qwert");
        let at = |secs| t0 + Duration::from_secs(secs);
        assert_eq!(
            holder_to_look_up(Some(&record), t0, None, ME, at(3), &params),
            None
        );
        assert_eq!(
            holder_to_look_up(Some(&record), t0, None, ME, at(4), &params),
            Some("svcplane-5c4b3a291-qwert")
        );
    }

    #[test]
    fn rule_an_unchanged_record_is_looked_up_again_only_after_two_retry_periods() {
        let params = Params::default();
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(10);
        let record = held_by("svcplane-5c4b3a291-qwert");
        let asked_at = |secs| Some((&record, later - Duration::from_secs(secs)));
        assert_eq!(
            holder_to_look_up(Some(&record), t0, asked_at(1), ME, later, &params),
            None
        );
        // The holder was still there (draining): ask again once two periods passed.
        assert!(holder_to_look_up(Some(&record), t0, asked_at(4), ME, later, &params).is_some());
        let mut renewed = record.clone();
        renewed.transitions = 1;
        assert!(holder_to_look_up(Some(&renewed), t0, asked_at(1), ME, later, &params).is_some());
    }

    #[test]
    fn rule_no_lookup_for_free_leases_foreign_holders_or_ourselves() {
        let params = Params::default();
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(60);
        assert_eq!(holder_to_look_up(None, t0, None, ME, later, &params), None);
        let mut free = held_by("x");
        free.holder = None;
        assert_eq!(
            holder_to_look_up(Some(&free), t0, None, ME, later, &params),
            None
        );
        for holder in ["laptop", ME, "kube-controller-manager"] {
            assert_eq!(
                holder_to_look_up(Some(&held_by(holder)), t0, None, ME, later, &params),
                None,
                "{holder}"
            );
        }
    }
}
