//! Leader election against the in-process fake API server, on the paused tokio clock:
//! acquisition, one leader among two, release on cancel, takeover after a crash within the
//! lease-duration bound, loss of leadership when renewals fail or hang, and 409 handling.
//!
//! Timing used throughout: lease duration 15 s, renew deadline 10 s, retry period 2 s
//! (kube-controller-manager's defaults).

// Test helpers outside #[test] functions: a failed fixture should panic loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;
use svcplane_controller::leader::{
    Config, LeaderElector, LeaderError, Leadership, LostCause, Params,
};
use svcplane_tests::fake_api::{FakeApi, Fault, Gvr, Verb};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;

const NS: &str = "kube-system";
const NAME: &str = "svcplane";
const LEASE: Duration = Duration::from_secs(15);
const DEADLINE: Duration = Duration::from_secs(10);
const RETRY: Duration = Duration::from_secs(2);

fn params() -> Params {
    Params::new(LEASE, DEADLINE, RETRY).unwrap()
}

/// One elector running in its own task, with its own client (as a separate process would).
struct Replica {
    rx: watch::Receiver<Leadership>,
    cancel: CancellationToken,
    task: JoinHandle<Result<(), LeaderError>>,
}

impl Replica {
    fn start(fake: &FakeApi, identity: &str) -> Self {
        Self::start_as(fake, identity, false)
    }

    /// `holder_pods`: this replica is a Pod whose name is `identity` (the chart's setup).
    fn start_as(fake: &FakeApi, identity: &str, holder_pods: bool) -> Self {
        let elector = LeaderElector::new(Config {
            client: fake.client(),
            namespace: NS.into(),
            name: NAME.into(),
            identity: identity.into(),
            params: params(),
            holder_pods,
        })
        .unwrap();
        let rx = elector.subscribe();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(elector.run(cancel.clone()));
        Self { rx, cancel, task }
    }

    fn now(&self) -> Leadership {
        self.rx.borrow().clone()
    }

    fn leading(&self) -> bool {
        self.rx.borrow().is_leader
    }

    /// Waits (tokio time) until this replica leads; returns when.
    async fn until_leader(&mut self, within: Duration) -> Instant {
        timeout(within, self.rx.wait_for(|l| l.is_leader))
            .await
            .expect("did not become leader in time")
            .expect("elector ended");
        Instant::now()
    }

    /// Waits until this replica follows `holder`.
    async fn until_following(&mut self, holder: &str, within: Duration) {
        timeout(
            within,
            self.rx
                .wait_for(|l| !l.is_leader && l.holder.as_deref() == Some(holder)),
        )
        .await
        .expect("did not follow in time")
        .expect("elector ended");
    }
}

fn lease(fake: &FakeApi) -> LeaseSpec {
    fake.get_of::<Lease>(Some(NS), NAME)
        .unwrap()
        .expect("the Lease exists")
        .spec
        .expect("the Lease has a spec")
}

/// Waits for the next write to the fake (a renewal here), sampling every millisecond.
/// Returns the last sample before it and the first sample after it: the write happened in
/// `(before, after]`.
async fn next_write(fake: &FakeApi) -> (Instant, Instant) {
    let rv = fake.resource_version();
    let mut before = Instant::now();
    loop {
        sleep(Duration::from_millis(1)).await;
        if fake.resource_version() != rv {
            return (before, Instant::now());
        }
        before = Instant::now();
    }
}

#[tokio::test(start_paused = true)]
async fn acquires_an_absent_lease() {
    let fake = FakeApi::new();
    let mut a = Replica::start(&fake, "a");
    a.until_leader(Duration::from_millis(100)).await;

    let spec = lease(&fake);
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_duration_seconds, Some(15));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(spec.acquire_time.is_some());
    assert_eq!(spec.acquire_time, spec.renew_time);
    assert_eq!(
        a.now(),
        Leadership {
            is_leader: true,
            holder: Some("a".into())
        }
    );

    // It keeps renewing: the Lease is rewritten every retry period, acquireTime stays.
    let rv = fake.resource_version();
    sleep(RETRY * 3 + Duration::from_millis(10)).await;
    assert!(fake.resource_version() >= rv + 3);
    let renewed = lease(&fake);
    assert_eq!(renewed.acquire_time, spec.acquire_time);
    assert!(renewed.renew_time >= spec.renew_time);
    assert_eq!(renewed.lease_transitions, Some(0));
    assert!(a.leading());
    assert!(!a.task.is_finished());
}

#[tokio::test(start_paused = true)]
async fn two_replicas_one_leader_at_every_moment() {
    let fake = FakeApi::new();
    // Started together: both find no Lease and race to create it (one gets AlreadyExists).
    let a = Replica::start(&fake, "a");
    let b = Replica::start(&fake, "b");

    let start = Instant::now();
    let mut leaders_seen = Vec::new();
    while start.elapsed() < Duration::from_secs(60) {
        sleep(Duration::from_millis(50)).await;
        let (la, lb) = (a.now(), b.now());
        assert!(
            !(la.is_leader && lb.is_leader),
            "two leaders at {:?}",
            start.elapsed()
        );
        if start.elapsed() >= Duration::from_millis(100) {
            let (leader, follower) = if la.is_leader { (&la, &lb) } else { (&lb, &la) };
            assert!(leader.is_leader, "no leader at {:?}", start.elapsed());
            assert_eq!(
                follower.holder, leader.holder,
                "the follower names the leader"
            );
            leaders_seen.push(leader.holder.clone());
        }
    }
    // Without faults, leadership never moves.
    leaders_seen.dedup();
    assert_eq!(leaders_seen.len(), 1, "{leaders_seen:?}");
    assert_eq!(lease(&fake).holder_identity, leaders_seen[0]);
    let creates = fake
        .writes()
        .iter()
        .filter(|w| w.verb == Verb::Create && w.code < 300)
        .count();
    assert_eq!(creates, 1);
    assert!(
        fake.writes()
            .iter()
            .any(|w| w.verb == Verb::Create && w.code == 409),
        "no create race"
    );
}

#[tokio::test(start_paused = true)]
async fn cancelled_leader_releases_and_follower_leads_within_one_retry_period() {
    let fake = FakeApi::new();
    let mut a = Replica::start(&fake, "a");
    a.until_leader(Duration::from_millis(100)).await;
    let mut b = Replica::start(&fake, "b");
    b.until_following("a", Duration::from_millis(100)).await;
    // Land somewhere between b's polls.
    sleep(Duration::from_millis(700)).await;

    let cancelled_at = Instant::now();
    a.cancel.cancel();
    let result = timeout(Duration::from_millis(100), &mut a.task)
        .await
        .expect("run returns promptly on cancel")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert!(!a.leading());

    let took_over_at = b.until_leader(RETRY * 2).await;
    assert!(
        took_over_at - cancelled_at <= RETRY,
        "follower took {:?} to lead after the release",
        took_over_at - cancelled_at
    );
    let spec = lease(&fake);
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    // a created (0), released (still 0), b acquired (1).
    assert_eq!(spec.lease_transitions, Some(1));
}

#[tokio::test(start_paused = true)]
async fn release_writes_empty_holder_and_short_duration() {
    let fake = FakeApi::new();
    let mut a = Replica::start(&fake, "a");
    a.until_leader(Duration::from_millis(100)).await;
    sleep(RETRY + Duration::from_millis(500)).await;
    a.cancel.cancel();
    (&mut a.task).await.unwrap().unwrap();

    let spec = lease(&fake);
    assert_eq!(spec.holder_identity.unwrap_or_default(), "");
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert_eq!(spec.lease_transitions, Some(0));
    assert_eq!(
        a.now(),
        Leadership {
            is_leader: false,
            holder: None
        }
    );
}

#[tokio::test(start_paused = true)]
async fn cancelled_follower_returns_at_once_and_writes_nothing() {
    let fake = FakeApi::new();
    let mut a = Replica::start(&fake, "a");
    a.until_leader(Duration::from_millis(100)).await;
    let mut b = Replica::start(&fake, "b");
    b.until_following("a", Duration::from_millis(100)).await;

    let writes_before = fake.writes().len();
    b.cancel.cancel();
    let result = timeout(Duration::from_millis(1), &mut b.task)
        .await
        .expect("a follower returns at once")
        .unwrap();
    assert!(result.is_ok());
    // The leader may renew meanwhile; the follower wrote nothing.
    assert!(
        fake.writes()[writes_before..]
            .iter()
            .all(|w| w.verb == Verb::Update && w.code < 300)
    );
    assert_eq!(lease(&fake).holder_identity.as_deref(), Some("a"));
    assert!(a.leading());
}

#[tokio::test(start_paused = true)]
async fn crashed_leader_is_replaced_after_lease_duration() {
    let fake = FakeApi::new();
    let mut a = Replica::start(&fake, "a");
    a.until_leader(Duration::from_millis(100)).await;
    let mut b = Replica::start(&fake, "b");
    b.until_following("a", Duration::from_millis(100)).await;
    sleep(Duration::from_millis(3300)).await;

    // Kill a right after one of its renewals: no release.
    let (before, after) = next_write(&fake).await;
    a.task.abort();
    assert!(a.task.await.unwrap_err().is_cancelled());
    assert_eq!(lease(&fake).holder_identity.as_deref(), Some("a"));

    let took_over_at = b.until_leader(LEASE + RETRY * 3).await;
    assert!(
        took_over_at - before >= LEASE,
        "took over {:?} after the last renewal, before the lease ran out",
        took_over_at - before
    );
    assert!(
        took_over_at - after < LEASE + RETRY * 2,
        "took over {:?} after the last renewal",
        took_over_at - after
    );
    let spec = lease(&fake);
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
}

/// Lets a lead, then breaks its renewals with `fault` right after a successful one, and
/// checks that `run` ends with `Lost` within renew deadline + retry period of that renewal,
/// and that `a` never claims leadership afterwards.
async fn leader_with_failing_renewals(fault: Fault) -> FakeApi {
    let fake = FakeApi::new();
    let mut a = Replica::start(&fake, "a");
    a.until_leader(Duration::from_millis(100)).await;
    sleep(Duration::from_millis(2500)).await;

    let (before, after) = next_write(&fake).await;
    fake.inject(fault);

    // Sample while it retries: it still leads until its deadline, not a moment after.
    let limit = after + DEADLINE + RETRY;
    let mut last_leading = after;
    while !a.task.is_finished() {
        assert!(Instant::now() <= limit, "still running at the limit");
        if a.leading() {
            last_leading = Instant::now();
        }
        sleep(Duration::from_millis(10)).await;
    }
    let ended_at = Instant::now();
    let result = (&mut a.task).await.unwrap();
    assert!(
        matches!(
            &result,
            Err(LeaderError::Lost {
                cause: LostCause::DeadlinePassed,
                ..
            })
        ),
        "{result:?}"
    );
    assert!(
        ended_at <= limit,
        "lost {:?} after the last renewal",
        ended_at - after
    );
    // It kept trying until the deadline rather than giving up on the first error.
    assert!(
        ended_at - before >= DEADLINE,
        "gave up after {:?}",
        ended_at - before
    );
    assert!(last_leading < after + DEADLINE);

    // Never leading afterwards: the last published value says so and no more can come.
    assert!(!a.leading());
    sleep(LEASE).await;
    assert!(!a.leading());
    assert!(a.rx.has_changed().is_err(), "the elector is gone");
    fake
}

#[tokio::test(start_paused = true)]
async fn leader_loses_leadership_when_renewals_fail() {
    let fake =
        leader_with_failing_renewals(Fault::status(500).verb(Verb::Update).resource("leases"))
            .await;
    // Renewed every retry period until the deadline: 4 failed PUTs in 10 s.
    let failed = fake
        .writes()
        .iter()
        .filter(|w| w.verb == Verb::Update && w.code == 500)
        .count();
    assert_eq!(failed, 4);
}

#[tokio::test(start_paused = true)]
async fn leader_loses_leadership_when_renewals_hang() {
    let fake = leader_with_failing_renewals(
        Fault::latency(Duration::from_secs(3600))
            .verb(Verb::Update)
            .resource("leases"),
    )
    .await;
    // One renewal hung until the deadline cut it off; none was answered.
    assert!(fake.writes().iter().all(|w| w.code < 300));
    assert_eq!(fake.stats().requests(Verb::Get, "leases"), 4);
}

#[tokio::test(start_paused = true)]
async fn leader_survives_renewal_errors_shorter_than_the_deadline() {
    let fake = FakeApi::new();
    let mut a = Replica::start(&fake, "a");
    a.until_leader(Duration::from_millis(100)).await;
    // Three failed renewals (6 s without success) stay inside the 10 s deadline.
    fake.inject(
        Fault::status(503)
            .verb(Verb::Update)
            .resource("leases")
            .times(3),
    );
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        sleep(Duration::from_millis(100)).await;
        assert!(a.leading(), "lost at {:?}", start.elapsed());
    }
    assert!(!a.task.is_finished());
    assert_eq!(lease(&fake).lease_transitions, Some(0));
}

#[tokio::test(start_paused = true)]
async fn leader_whose_lease_is_taken_stops_at_the_next_renewal() {
    let fake = FakeApi::new();
    let mut a = Replica::start(&fake, "a");
    a.until_leader(Duration::from_millis(100)).await;
    // Someone else overwrites the Lease (a split brain we must not prolong).
    let mut taken = fake.get_of::<Lease>(Some(NS), NAME).unwrap().unwrap();
    if let Some(spec) = taken.spec.as_mut() {
        spec.holder_identity = Some("intruder".into());
    }
    taken.metadata.resource_version = None;
    fake.insert(&taken).unwrap();

    let result = timeout(RETRY + Duration::from_millis(10), &mut a.task)
        .await
        .expect("stops at the next renewal")
        .unwrap();
    assert!(
        matches!(
            &result,
            Err(LeaderError::Lost { cause: LostCause::TakenOver { holder }, .. }) if holder == "intruder"
        ),
        "{result:?}"
    );
    assert_eq!(
        a.now(),
        Leadership {
            is_leader: false,
            holder: Some("intruder".into())
        }
    );
    assert_eq!(lease(&fake).holder_identity.as_deref(), Some("intruder"));
}

#[tokio::test(start_paused = true)]
async fn conflict_on_acquire_put_is_reread_not_an_error() {
    let fake = FakeApi::new();
    // A released Lease: acquiring it is a PUT, not a create.
    fake.insert(Lease {
        metadata: ObjectMeta {
            name: Some(NAME.into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            lease_transitions: Some(4),
            ..LeaseSpec::default()
        }),
    })
    .unwrap();
    fake.inject(
        Fault::status(409)
            .verb(Verb::Update)
            .resource("leases")
            .times(1),
    );

    let mut a = Replica::start(&fake, "a");
    let acquired_at = a.until_leader(Duration::from_millis(100)).await;
    assert!(
        acquired_at.elapsed() < RETRY,
        "re-read at once, not a retry period later"
    );
    assert!(!a.task.is_finished());
    let conflicts = fake
        .writes()
        .iter()
        .filter(|w| w.verb == Verb::Update && w.code == 409)
        .count();
    assert_eq!(conflicts, 1);
    assert_eq!(fake.stats().requests(Verb::Get, "leases"), 2);
    let spec = lease(&fake);
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_transitions, Some(5));
}

#[tokio::test(start_paused = true)]
async fn invalid_params_are_rejected_before_any_request() {
    let fake = FakeApi::new();
    let err = LeaderElector::new(Config {
        client: fake.client(),
        namespace: NS.into(),
        name: NAME.into(),
        identity: "a".into(),
        params: Params {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(15),
            retry_period: Duration::from_secs(2),
        },
        holder_pods: false,
    })
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "--leader-elect-renew-deadline (15s) must be shorter than --leader-elect-lease-duration (15s)"
    );
    assert_eq!(fake.stats().requests(Verb::Get, "leases"), 0);
}

/// A Lease left behind by a replica of an uninstalled release: held, unexpired, and
/// never renewed again.
fn stale_lease(fake: &FakeApi, holder: &str) {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Timestamp::now());
    fake.insert(Lease {
        metadata: ObjectMeta {
            name: Some(NAME.into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }),
    })
    .unwrap();
}

const OLD_LEADER: &str = "svcplane-5c4b3a291-qwert";
const NEW_REPLICA: &str = "svcplane-7d9f8c6b5-abcde";

#[tokio::test(start_paused = true)]
async fn a_lease_held_by_a_replica_pod_that_no_longer_exists_is_taken_over_at_once() {
    let fake = FakeApi::new();
    stale_lease(&fake, OLD_LEADER);
    let started = Instant::now();
    let mut b = Replica::start_as(&fake, NEW_REPLICA, true);
    let took_over_at = b.until_leader(LEASE).await;
    // Two quiet retry periods, then the lookup and the takeover at the next attempt.
    assert!(
        took_over_at - started <= RETRY * 3,
        "took over after {:?}; the holder's Pod is gone",
        took_over_at - started
    );
    let spec = lease(&fake);
    assert_eq!(spec.holder_identity.as_deref(), Some(NEW_REPLICA));
    assert_eq!(spec.lease_transitions, Some(4));
}

#[tokio::test(start_paused = true)]
async fn a_lease_held_by_a_replica_pod_that_exists_runs_out_as_usual() {
    let fake = FakeApi::new();
    stale_lease(&fake, OLD_LEADER);
    fake.insert(Pod {
        metadata: ObjectMeta {
            name: Some(OLD_LEADER.into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    })
    .unwrap();
    let started = Instant::now();
    let mut b = Replica::start_as(&fake, NEW_REPLICA, true);
    let took_over_at = b.until_leader(LEASE + RETRY * 3).await;
    assert!(
        took_over_at - started >= LEASE,
        "took over after {:?}, before the lease of a live holder ran out",
        took_over_at - started
    );
}

#[tokio::test(start_paused = true)]
async fn without_pod_identities_a_stale_lease_runs_out_as_in_client_go() {
    let fake = FakeApi::new();
    stale_lease(&fake, OLD_LEADER);
    let started = Instant::now();
    let mut b = Replica::start_as(&fake, NEW_REPLICA, false);
    let took_over_at = b.until_leader(LEASE + RETRY * 3).await;
    assert!(took_over_at - started >= LEASE);
    // Nothing looked the holder up.
    assert_eq!(fake.stats().requests(Verb::Get, "pods"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_foreign_holder_is_never_looked_up() {
    let fake = FakeApi::new();
    stale_lease(&fake, "laptop");
    let started = Instant::now();
    let mut b = Replica::start_as(&fake, NEW_REPLICA, true);
    let took_over_at = b.until_leader(LEASE + RETRY * 3).await;
    assert!(took_over_at - started >= LEASE);
    assert_eq!(fake.stats().requests(Verb::Get, "pods"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_holder_pod_still_draining_is_taken_over_once_it_is_gone() {
    let fake = FakeApi::new();
    stale_lease(&fake, OLD_LEADER);
    fake.insert(Pod {
        metadata: ObjectMeta {
            name: Some(OLD_LEADER.into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    })
    .unwrap();
    let started = Instant::now();
    let mut b = Replica::start_as(&fake, NEW_REPLICA, true);
    // The uninstalled release's Pod finishes draining 6 s in.
    sleep(Duration::from_secs(6)).await;
    assert!(!b.leading());
    fake.delete(Gvr::of::<Pod>(), Some(NS), OLD_LEADER)
        .expect("the Pod existed");
    let took_over_at = b.until_leader(LEASE).await;
    assert!(
        took_over_at - started <= Duration::from_secs(6) + RETRY * 3,
        "took over {:?} after start; the holder's Pod went at 6 s",
        took_over_at - started
    );
}
