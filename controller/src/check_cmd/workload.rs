//! What `svcplane check` reads besides the probe: svcplane's own Pods and its Lease.
//!
//! Why: the probe alone says "no answer yet" for minutes when the real cause is already
//! in the cluster — an image that cannot be pulled, a container that crashes on start —
//! and an install whose webhook answers may still have no replica leading the
//! controllers (a Lease left to a Pod that is gone). These judges turn what the API
//! server shows into either "wait" or a failure that names the Pod, the container and
//! the kubelet's own reason, so a broken release fails in seconds with the cause in the
//! hook's output. Pure functions; `mod.rs` reads the objects and passes the time in.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// Waiting reasons that no retry will cure: fail at once.
const HOPELESS: &[&str] = &[
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
];

/// Waiting reasons the kubelet retries (a registry hiccup, a dependency not up yet):
/// fail once they have lasted [`Judge::patience`].
const RETRIED: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "CrashLoopBackOff",
    "CreateContainerError",
    "RunContainerError",
];

/// One container that cannot run, as the kubelet reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stuck {
    pub(super) pod: String,
    pub(super) container: String,
    pub(super) reason: String,
    /// The kubelet's message, plus the last exit for a crash loop.
    pub(super) detail: String,
    hopeless: bool,
}

impl std::fmt::Display for Stuck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pod {} container {}: {}",
            self.pod, self.container, self.reason
        )?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

fn stuck_container(pod: &str, status: &ContainerStatus) -> Option<Stuck> {
    let waiting = status.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref()?;
    let hopeless = HOPELESS.contains(&reason);
    if !hopeless && !RETRIED.contains(&reason) {
        return None;
    }
    let mut detail = waiting.message.clone().unwrap_or_default();
    // A crash loop's cause is in the last run: its exit code and termination message
    // (the chart sets FallbackToLogsOnError, so that is the log tail).
    if let Some(last) = status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
    {
        let said = last.message.as_deref().map(str::trim).unwrap_or_default();
        let exit = format!("last exit code {}", last.exit_code);
        let last_run = if said.is_empty() {
            exit
        } else {
            format!("{exit}, saying: {said}")
        };
        detail = if detail.is_empty() {
            last_run
        } else {
            format!("{detail}; {last_run}")
        };
    }
    Some(Stuck {
        pod: pod.to_owned(),
        container: status.name.clone(),
        reason: reason.to_owned(),
        detail,
        hopeless,
    })
}

/// The containers of `pod` (init containers first) that cannot run.
pub(super) fn stuck_in(pod: &Pod) -> Vec<Stuck> {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let Some(status) = pod.status.as_ref() else {
        return Vec::new();
    };
    let init = status.init_container_statuses.iter().flatten();
    let main = status.container_statuses.iter().flatten();
    init.chain(main)
        .filter_map(|c| stuck_container(name, c))
        .collect()
}

/// Remembers since when each Pod has been stuck, to tell a hiccup from a broken release.
#[derive(Debug)]
pub(super) struct Judge {
    patience: Duration,
    since: BTreeMap<String, Instant>,
}

impl Judge {
    /// A judge that fails a retried reason after `patience`.
    pub(super) fn new(patience: Duration) -> Self {
        Self {
            patience,
            since: BTreeMap::new(),
        }
    }

    /// Given svcplane's Pods as listed at `now`: the reasons to give up, when every Pod
    /// not being deleted is stuck (at least one, each hopeless or stuck for the whole
    /// patience).
    /// Empty: keep waiting (some Pod may yet answer).
    pub(super) fn give_up(&mut self, pods: &[Pod], now: Instant) -> Vec<Stuck> {
        let mut verdict = Vec::new();
        let mut all_stuck = pods.iter().any(|p| p.metadata.deletion_timestamp.is_none());
        let mut seen = BTreeMap::new();
        // A Pod being deleted (a replica of the release being replaced, draining) is
        // on its way out whatever its state: it neither proves nor disproves anything.
        for pod in pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let stuck = stuck_in(pod);
            if stuck.is_empty() {
                all_stuck = false;
                continue;
            }
            let since = *self.since.get(&name).unwrap_or(&now);
            seen.insert(name, since);
            let ripe = stuck.iter().any(|s| s.hopeless)
                || now.saturating_duration_since(since) >= self.patience;
            all_stuck &= ripe;
            verdict.extend(stuck);
        }
        // A Pod that recovered or went away starts over if it is stuck again.
        self.since = seen;
        if all_stuck { verdict } else { Vec::new() }
    }
}

/// Whether a replica is leading: the Lease names a holder whose renewal this check saw
/// happen (its `renewTime` moved since `first`, the record read when the check began,
/// or the Lease appeared). A holder that does not renew is a Pod that is gone or cut
/// off, and nobody writes EndpointSlices meanwhile.
pub(super) fn leader_renewing(first: Option<&Lease>, latest: Option<&Lease>) -> Option<String> {
    let spec = |l: Option<&Lease>| l.and_then(|l| l.spec.clone()).unwrap_or_default();
    let (before, now) = (spec(first), spec(latest));
    let holder = now.holder_identity.filter(|h| !h.is_empty())?;
    let renewed = latest.is_some()
        && (first.is_none() || now.renew_time.is_some() && now.renew_time != before.renew_time);
    renewed.then_some(holder)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStateWaiting, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::jiff::Timestamp;
    use kube::api::ObjectMeta;

    fn pod(name: &str, reason: Option<&str>, message: &str) -> Pod {
        let state = reason.map(|r| ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(r.into()),
                message: Some(message.into()),
            }),
            ..ContainerState::default()
        });
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "svcplane".into(),
                    state,
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn an_image_that_cannot_be_named_fails_at_once_with_the_kubelets_words() {
        let mut judge = Judge::new(Duration::from_secs(30));
        let pods = [pod(
            "svcplane-a",
            Some("InvalidImageName"),
            "couldn't parse image name \"svcplane:\"",
        )];
        let verdict = judge.give_up(&pods, Instant::now());
        assert_eq!(verdict.len(), 1);
        assert_eq!(
            verdict[0].to_string(),
            "pod svcplane-a container svcplane: InvalidImageName: couldn't parse image name \"svcplane:\""
        );
    }

    #[test]
    fn a_pull_back_off_fails_only_after_the_patience_and_only_when_every_pod_is_stuck() {
        let mut judge = Judge::new(Duration::from_secs(30));
        let t0 = Instant::now();
        let stuck = pod(
            "svcplane-a",
            Some("ImagePullBackOff"),
            "Back-off pulling image \"svcplane:nope\"",
        );
        let fine = pod("svcplane-b", None, "");
        assert!(judge.give_up(std::slice::from_ref(&stuck), t0).is_empty());
        assert!(
            judge
                .give_up(std::slice::from_ref(&stuck), t0 + Duration::from_secs(29))
                .is_empty()
        );
        assert!(
            judge
                .give_up(&[stuck.clone(), fine], t0 + Duration::from_secs(40))
                .is_empty()
        );
        let verdict = judge.give_up(std::slice::from_ref(&stuck), t0 + Duration::from_secs(41));
        assert_eq!(verdict.len(), 1, "{verdict:?}");
        assert!(verdict[0].to_string().contains("Back-off pulling image"));
    }

    #[test]
    fn a_pod_that_recovers_starts_its_patience_over() {
        let mut judge = Judge::new(Duration::from_secs(30));
        let t0 = Instant::now();
        let stuck = pod("svcplane-a", Some("ErrImagePull"), "pull failed");
        assert!(judge.give_up(std::slice::from_ref(&stuck), t0).is_empty());
        assert!(
            judge
                .give_up(&[pod("svcplane-a", None, "")], t0 + Duration::from_secs(20))
                .is_empty()
        );
        assert!(
            judge
                .give_up(std::slice::from_ref(&stuck), t0 + Duration::from_secs(40))
                .is_empty()
        );
    }

    #[test]
    fn a_draining_pod_neither_saves_nor_fails_the_release() {
        let mut judge = Judge::new(Duration::ZERO);
        let mut draining = pod("svcplane-old-a", None, "");
        draining.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        );
        let stuck = pod("svcplane-new-b", Some("InvalidImageName"), "bad");
        assert_eq!(
            judge
                .give_up(&[draining.clone(), stuck], Instant::now())
                .len(),
            1
        );
        assert!(judge.give_up(&[draining], Instant::now()).is_empty());
    }

    #[test]
    fn no_pods_is_no_verdict() {
        assert!(
            Judge::new(Duration::ZERO)
                .give_up(&[], Instant::now())
                .is_empty()
        );
    }

    #[test]
    fn a_crash_loop_names_the_last_exit_and_what_the_process_said() {
        let mut p = pod(
            "svcplane-a",
            Some("CrashLoopBackOff"),
            "back-off 10s restarting failed container",
        );
        if let Some(c) = p
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
        {
            c[0].last_state = Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 2,
                    message: Some("error: unexpected argument '--bogus'\n".into()),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            });
        }
        let stuck = stuck_in(&p);
        assert_eq!(
            stuck[0].to_string(),
            "pod svcplane-a container svcplane: CrashLoopBackOff: back-off 10s restarting failed container; \
             last exit code 2, saying: error: unexpected argument '--bogus'"
        );
    }

    fn lease(holder: &str, renewed_secs: i64) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(
                    Timestamp::from_second(1_700_000_000 + renewed_secs).unwrap(),
                )),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_leader_counts_only_once_it_is_seen_renewing() {
        let stale = lease("svcplane-old-x", 0);
        assert_eq!(leader_renewing(Some(&stale), Some(&stale)), None);
        let renewed = lease("svcplane-new-y", 5);
        assert_eq!(
            leader_renewing(Some(&stale), Some(&renewed)).as_deref(),
            Some("svcplane-new-y")
        );
        // Created during the check.
        assert_eq!(
            leader_renewing(None, Some(&renewed)).as_deref(),
            Some("svcplane-new-y")
        );
        assert_eq!(leader_renewing(None, None), None);
        // Released: no holder.
        assert_eq!(leader_renewing(Some(&stale), Some(&lease("", 9))), None);
    }
}
