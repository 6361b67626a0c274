//! The elector: the loop that reads and writes the Lease around the pure decision.
//!
//! Why its own loop rather than a crate: we need the renew-deadline guard (a leader that
//! cannot renew stops leading *before* a follower may take over, and the process exits),
//! which the available crates either lack or hide.
//!
//! Shape, as client-go's `LeaderElector`:
//! - **acquire**: every retry period, GET the Lease, [`decide`], and create it or PUT the
//!   new record with the resourceVersion just read. A 409 (someone else wrote, or created
//!   it first) is not an error: the Lease is read again at once;
//! - **lead**: every retry period, renew the same way. The last renewal's start time plus
//!   the renew deadline is the end of leadership; a renewal that has not succeeded by then
//!   means leadership is lost: [`Leadership::is_leader`] turns false and [`run`] returns
//!   [`LeaderError::Lost`]. Every attempt is bounded by that deadline, so a hung request
//!   cannot keep a cut-off replica leading;
//! - **cancel**: a follower returns at once; a leader publishes that it no longer leads,
//!   then releases the Lease (empty holder), so another replica takes over within one
//!   retry period instead of a whole lease duration.
//!
//! All waiting uses tokio time, so the loop runs under a paused test clock. Timestamps
//! written into the Lease use the wall clock; expiry never looks at them (see `decide.rs`).
//!
//! There is no jitter on the retry period: with the two replicas we run, simultaneous
//! attempts are settled by the resourceVersion precondition, and a fixed period keeps the
//! takeover bound (lease duration + 2 retry periods) tight.
//!
//! [`run`]: LeaderElector::run

use std::fmt;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tokio::time::{Instant, sleep, sleep_until, timeout, timeout_at};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::decide::{Action, Decision, LeaseRecord, Observed, Params, ParamsError};
use super::decide::{decide, next_record};
use super::gone_holder::holder_to_look_up;

/// What the elector needs to run.
#[derive(Clone)]
pub struct Config {
    /// The API client.
    pub client: kube::Client,
    /// Namespace of the Lease (the release namespace).
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's `holderIdentity` (see [`identity_from_env`](super::identity_from_env)).
    pub identity: String,
    /// Timing.
    pub params: Params,
    /// This replica runs as a Pod in the Lease's namespace and its identity is its Pod
    /// name (see [`pods_hold_the_lease`](super::pods_hold_the_lease)): then a Lease held
    /// by a sibling replica whose Pod no longer exists is taken over at once
    /// (`gone_holder.rs`). `false`: always wait out the lease duration, as client-go does.
    pub holder_pods: bool,
}

impl fmt::Debug for Config {
    // `kube::Client` has no Debug; everything else is worth printing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("identity", &self.identity)
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

/// Who leads, as this replica last knew it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leadership {
    /// Whether this replica leads now. True only between a successful acquisition and the
    /// end of its renew deadline (or a release).
    pub is_leader: bool,
    /// The holder last seen in the Lease (`None`: no Lease, released, or not read yet).
    pub holder: Option<String>,
}

/// Why leadership ended without a release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LostCause {
    /// No renewal succeeded within the renew deadline.
    DeadlinePassed,
    /// A renewal found the Lease held by another replica.
    TakenOver {
        /// The new holder.
        holder: String,
    },
}

impl fmt::Display for LostCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DeadlinePassed => f.write_str("no renewal succeeded within the renew deadline"),
            Self::TakenOver { holder } => write!(f, "the Lease is now held by {holder:?}"),
        }
    }
}

/// Leader-election errors.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The timing parameters are inconsistent.
    #[error(transparent)]
    Params(#[from] ParamsError),
    /// The identity or Lease name is empty.
    #[error("leader election needs a non-empty {what}")]
    Empty {
        /// `identity` or `lease name`.
        what: &'static str,
    },
    /// Leadership ended without a release; the process should exit, since it may no
    /// longer act as leader and cannot know what it missed.
    #[error("lost leadership of Lease {lease} as {identity:?}: {cause}")]
    Lost {
        /// `namespace/name` of the Lease.
        lease: String,
        /// This replica's identity.
        identity: String,
        /// Why.
        cause: LostCause,
    },
}

impl LeaderError {
    /// A short, stable label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Params(_) => "invalid_params",
            Self::Empty { .. } => "invalid_config",
            Self::Lost { .. } => "lost",
        }
    }
}

/// The result of one read-decide-write round.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Attempt {
    /// We hold the Lease: it was created, taken over or renewed.
    Holding,
    /// Someone else holds it.
    Following { holder: String },
    /// The write got a 409: the Lease changed between our read and our write.
    Conflict,
}

/// Leader election on one `coordination.k8s.io/v1` Lease. Build with [`LeaderElector::new`],
/// [`subscribe`](Self::subscribe) as often as needed, then [`run`](Self::run).
#[derive(Debug)]
pub struct LeaderElector {
    api: Api<Lease>,
    lease: String,
    name: String,
    identity: String,
    params: Params,
    observed: Observed,
    /// Where sibling replicas' Pods are looked up (see [`Config::holder_pods`]).
    pods: Option<Api<Pod>>,
    /// The record whose holder Pod was last looked up, whether it was gone, and when.
    looked_up: Option<(LeaseRecord, bool, std::time::Instant)>,
    /// The Lease as our last successful write returned it, for the release; `None` when a
    /// later write may have landed without our knowing (then release reads it first).
    last_written: Option<Lease>,
    tx: watch::Sender<Leadership>,
}

impl LeaderElector {
    /// Checks the config; nothing is sent to the API server yet.
    pub fn new(config: Config) -> Result<Self, LeaderError> {
        config.params.validate()?;
        if config.identity.is_empty() {
            return Err(LeaderError::Empty { what: "identity" });
        }
        if config.name.is_empty() {
            return Err(LeaderError::Empty { what: "lease name" });
        }
        let (tx, _) = watch::channel(Leadership::default());
        Ok(Self {
            pods: config
                .holder_pods
                .then(|| Api::namespaced(config.client.clone(), &config.namespace)),
            looked_up: None,
            api: Api::namespaced(config.client, &config.namespace),
            lease: format!("{}/{}", config.namespace, config.name),
            name: config.name,
            identity: config.identity,
            params: config.params,
            observed: Observed::new(Instant::now().into_std()),
            last_written: None,
            tx,
        })
    }

    /// Leadership as it changes. This is also the hook for metrics (a
    /// `leader_election_master_status`-style gauge follows `is_leader`): the module itself
    /// stays free of metric crates.
    ///
    /// If the elector is dropped without returning (its task aborted or panicked), the
    /// channel closes with whatever it said last, possibly `is_leader: true`: treat a
    /// closed channel (`changed()` or `has_changed()` returning `Err`) as not leading.
    pub fn subscribe(&self) -> watch::Receiver<Leadership> {
        self.tx.subscribe()
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Campaigns until `cancel`, then leads until `cancel` or until leadership is lost.
    ///
    /// `Ok(())` after `cancel` (a leader releases the Lease first). `Err(Lost)` when a
    /// leader could not renew in time or found the Lease taken; the caller should exit.
    pub async fn run(mut self, cancel: CancellationToken) -> Result<(), LeaderError> {
        info!(lease = %self.lease, identity = %self.identity, "starting leader election");
        let Some(renewed_at) = self.acquire(&cancel).await else {
            info!(lease = %self.lease, identity = %self.identity, "leader election stopped while following");
            return Ok(());
        };
        self.lead(&cancel, renewed_at).await
    }

    /// Retries until we hold the Lease (returns when the successful attempt started) or
    /// `cancel` (returns `None`).
    async fn acquire(&mut self, cancel: &CancellationToken) -> Option<Instant> {
        loop {
            let started = Instant::now();
            // Not leading yet, so there is no deadline to protect; the renew deadline only
            // keeps a hung request from stalling the campaign for good.
            let outcome = tokio::select! {
                biased;
                () = cancel.cancelled() => None,
                r = timeout(self.params.renew_deadline, self.attempt()) => Some(r),
            };
            match outcome? {
                Ok(Ok(Attempt::Holding)) => {
                    let transitions = self.observed.record().map_or(0, |r| r.transitions);
                    info!(
                        lease = %self.lease,
                        identity = %self.identity,
                        holder = %self.identity,
                        transitions,
                        "acquired leadership"
                    );
                    return Some(started);
                }
                Ok(Ok(Attempt::Following { holder })) => self.publish(false, Some(holder)),
                Ok(Ok(Attempt::Conflict)) => {
                    debug!(lease = %self.lease, "lost a race for the Lease; retrying");
                }
                Ok(Err(e)) => {
                    warn!(lease = %self.lease, error = %e, "reading or writing the Lease failed; retrying");
                }
                Err(_) => warn!(lease = %self.lease, "Lease request timed out; retrying"),
            }
            tokio::select! {
                biased;
                () = cancel.cancelled() => return None,
                () = sleep(self.params.retry_period) => {}
            }
        }
    }

    /// Leads from `renewed_at` (start of the acquiring attempt) until cancel or loss.
    async fn lead(
        &mut self,
        cancel: &CancellationToken,
        mut renewed_at: Instant,
    ) -> Result<(), LeaderError> {
        self.publish(true, Some(self.identity.clone()));
        loop {
            // Followers take over no earlier than lease_duration after they see our write,
            // which is after `renewed_at`; we stop at renewed_at + renew_deadline, sooner.
            let deadline = renewed_at + self.params.renew_deadline;
            let next = (Instant::now() + self.params.retry_period).min(deadline);
            tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    self.release().await;
                    return Ok(());
                }
                () = sleep_until(next) => {}
            }
            if Instant::now() >= deadline {
                return Err(self.lost(LostCause::DeadlinePassed));
            }
            let started = Instant::now();
            let outcome = tokio::select! {
                biased;
                () = cancel.cancelled() => None,
                r = timeout_at(deadline, self.attempt()) => Some(r),
            };
            let Some(outcome) = outcome else {
                // The interrupted write may have landed: release reads the Lease first.
                self.last_written = None;
                self.release().await;
                return Ok(());
            };
            match outcome {
                Ok(Ok(Attempt::Holding)) => renewed_at = started,
                Ok(Ok(Attempt::Following { holder })) => {
                    return Err(self.lost(LostCause::TakenOver { holder }));
                }
                Ok(Ok(Attempt::Conflict)) => {
                    warn!(lease = %self.lease, "renewal conflicted twice; retrying until the renew deadline");
                }
                Ok(Err(e)) => {
                    warn!(lease = %self.lease, error = %e, "renewal failed; retrying until the renew deadline");
                }
                Err(_) => {
                    warn!(lease = %self.lease, "renewal did not finish before the renew deadline");
                }
            }
        }
    }

    /// One round, plus one immediate re-read after a 409: the conflict means the Lease just
    /// changed, and the fresh copy says who holds it now.
    async fn attempt(&mut self) -> Result<Attempt, kube::Error> {
        match self.try_once().await? {
            Attempt::Conflict => self.try_once().await,
            other => Ok(other),
        }
    }

    /// GET, decide, and create or PUT (with the resourceVersion read).
    async fn try_once(&mut self) -> Result<Attempt, kube::Error> {
        let lease = self.api.get_opt(&self.name).await?;
        let now = Instant::now().into_std();
        self.observe(lease.as_ref().map(record_of), now);
        let action = match decide(
            self.observed.record(),
            self.observed.at(),
            &self.identity,
            now,
            &self.params,
        ) {
            Decision::Follow { holder, .. } if self.holder_pod_gone(now).await => {
                info!(
                    lease = %self.lease,
                    holder = %holder,
                    "the Lease holder's Pod no longer exists; taking the Lease over without waiting for it to expire"
                );
                Action::Acquire
            }
            Decision::Follow { holder, expires_in } => {
                debug!(lease = %self.lease, holder = %holder, ?expires_in, "following");
                return Ok(Attempt::Following { holder });
            }
            Decision::Create | Decision::Acquire => Action::Acquire,
            Decision::Renew => Action::Renew,
        };
        let record = next_record(
            self.observed.record(),
            action,
            &self.identity,
            Timestamp::now(),
            &self.params,
        );
        // From here until the answer, the Lease may change without our knowing.
        self.last_written = None;
        let pp = PostParams::default();
        let written = match lease {
            None => {
                let mut fresh = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(Default::default()),
                };
                if let Some(spec) = fresh.spec.as_mut() {
                    record.write_to(spec);
                }
                self.api.create(&pp, &fresh).await
            }
            Some(mut current) => {
                // `current` carries the resourceVersion we read: the PUT is conditional.
                record.write_to(current.spec.get_or_insert_with(Default::default));
                self.api.replace(&self.name, &pp, &current).await
            }
        };
        match written {
            Ok(lease) => {
                self.observe(Some(record_of(&lease)), Instant::now().into_std());
                self.last_written = Some(lease);
                Ok(Attempt::Holding)
            }
            // 409 Conflict on PUT, 409 AlreadyExists on create: someone else wrote first.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                debug!(lease = %self.lease, reason = %status.reason, "Lease changed under us");
                Ok(Attempt::Conflict)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the holder of the record last read is a sibling replica whose Pod is gone
    /// (looked up at most once per unchanged record; see `gone_holder.rs`). A failed
    /// lookup (403 from an older chart's RBAC, a timeout) counts as "not gone": the
    /// Lease then runs out as it would without this rule.
    async fn holder_pod_gone(&mut self, now: std::time::Instant) -> bool {
        let Some(pods) = &self.pods else {
            return false;
        };
        let record = self.observed.record();
        if let (Some((asked, true, _)), Some(record)) = (&self.looked_up, record)
            && asked == record
        {
            return true;
        }
        let asked = self.looked_up.as_ref().map(|(r, _, at)| (r, *at));
        let Some(holder) = holder_to_look_up(
            record,
            self.observed.at(),
            asked,
            &self.identity,
            now,
            &self.params,
        ) else {
            return false;
        };
        let gone = match pods.get_opt(holder).await {
            Ok(found) => found.is_none(),
            Err(e) => {
                debug!(lease = %self.lease, holder = %holder, error = %e, "could not look up the Lease holder's Pod; waiting for the Lease to expire");
                false
            }
        };
        if let Some(record) = record {
            self.looked_up = Some((record.clone(), gone, now));
        }
        gone
    }

    /// Remembers what was read or written, and logs a change of holder.
    fn observe(&mut self, record: Option<LeaseRecord>, now: std::time::Instant) {
        let before = self.observed.record().and_then(|r| r.holder.clone());
        let after = record.as_ref().and_then(|r| r.holder.clone());
        if self.observed.observe(record, now) && before != after {
            info!(
                lease = %self.lease,
                identity = %self.identity,
                holder = after.as_deref().unwrap_or(""),
                "Lease holder changed"
            );
        }
    }

    /// Stops leading, then gives the Lease up. Errors are logged, not returned: the other
    /// replica still takes over when the lease runs out.
    async fn release(&mut self) {
        self.publish(false, None);
        match timeout(self.params.renew_deadline, self.write_release()).await {
            Ok(Ok(true)) => {
                info!(lease = %self.lease, identity = %self.identity, "released the Lease")
            }
            Ok(Ok(false)) => {
                info!(lease = %self.lease, identity = %self.identity, "nothing to release: the Lease does not name us");
            }
            Ok(Err(e)) => {
                warn!(lease = %self.lease, error = %e, "releasing the Lease failed; it will run out instead");
            }
            Err(_) => {
                warn!(lease = %self.lease, "releasing the Lease timed out; it will run out instead");
            }
        }
    }

    async fn write_release(&mut self) -> Result<bool, kube::Error> {
        let lease = match self.last_written.take() {
            Some(lease) => lease,
            None => match self.api.get_opt(&self.name).await? {
                Some(lease) => lease,
                None => return Ok(false),
            },
        };
        let current = record_of(&lease);
        if current.holder() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        let record = next_record(
            Some(&current),
            Action::Release,
            &self.identity,
            Timestamp::now(),
            &self.params,
        );
        let mut lease = lease;
        record.write_to(lease.spec.get_or_insert_with(Default::default));
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        Ok(true)
    }

    /// Publishes loss and builds the error.
    fn lost(&self, cause: LostCause) -> LeaderError {
        let holder = match &cause {
            LostCause::TakenOver { holder } => Some(holder.clone()),
            LostCause::DeadlinePassed => None,
        };
        self.publish(false, holder);
        error!(lease = %self.lease, identity = %self.identity, cause = %cause, "lost leadership");
        LeaderError::Lost {
            lease: self.lease.clone(),
            identity: self.identity.clone(),
            cause,
        }
    }

    /// Sends only real changes, so subscribers are not woken on every renewal.
    fn publish(&self, is_leader: bool, holder: Option<String>) {
        let next = Leadership { is_leader, holder };
        self.tx.send_if_modified(|cur| {
            if *cur == next {
                false
            } else {
                *cur = next;
                true
            }
        });
    }
}

fn record_of(lease: &Lease) -> LeaseRecord {
    lease
        .spec
        .as_ref()
        .map(LeaseRecord::from_spec)
        .unwrap_or_else(|| LeaseRecord::from_spec(&Default::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_well() {
        let lost = LeaderError::Lost {
            lease: "kube-system/svcplane".into(),
            identity: "a".into(),
            cause: LostCause::DeadlinePassed,
        };
        assert_eq!(
            lost.to_string(),
            r#"lost leadership of Lease kube-system/svcplane as "a": no renewal succeeded within the renew deadline"#
        );
        assert_eq!(lost.reason(), "lost");
        let taken = LostCause::TakenOver { holder: "b".into() };
        assert_eq!(taken.to_string(), r#"the Lease is now held by "b""#);
    }

    #[test]
    fn record_of_lease_without_spec_is_free() {
        let rec = record_of(&Lease::default());
        assert_eq!(rec.holder(), None);
        assert_eq!(rec.transitions, 0);
    }
}
