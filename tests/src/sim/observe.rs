//! Programming latency: from each Pod transition to the first EndpointSlice write that
//! reflects it.
//!
//! The trace driver records every transition it makes ([`Tracker::transition`]: the
//! Pod should now be in a slice with a given readiness, or in none). An observer task
//! watches EndpointSlices through its own unthrottled client and feeds every write to
//! [`Tracker::slice_event`], timestamped with the paused tokio clock: the fake delivers
//! a watch event as the write commits and the observer is runnable at once, so virtual
//! time cannot move in between.
//!
//! A write reflects a Pod's transitions when it shows the Pod as last changed (present
//! with that readiness; or, for a delete, in no slice any more). All transitions still
//! pending for that Pod are resolved by it: a Pod created not ready and flipped to ready
//! before any write is reflected by the first write showing it ready, and both waits
//! are measured to that write. A transition already shown when it is made (no write
//! needed) counts with latency zero. What is still pending at the end was never
//! reflected.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use svcplane_controller::core::slice_endpoints::SliceEndpoints;

/// `(namespace, name)` of a Pod or slice.
pub type ObjKey = (String, String);

/// What the driver made a Pod look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// In a slice, with `ready` as its `conditions.ready`.
    Present { ready: bool },
    /// In no slice.
    Absent,
}

#[derive(Debug)]
struct PodTrack {
    want: Want,
    pending: Vec<Instant>,
    /// Slices currently holding the Pod.
    slices: u32,
    /// Its readiness in the last slice written with it.
    shown: Option<bool>,
}

/// Latency figures for a set of transitions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencySummary {
    pub transitions: u64,
    pub reflected: u64,
    pub never_reflected: u64,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

/// Pending transitions and the slices' contents as the observer last saw them.
#[derive(Debug, Default)]
pub struct Tracker {
    pods: HashMap<ObjKey, PodTrack>,
    /// Slice → the Pods it holds, with their readiness.
    slices: HashMap<ObjKey, Vec<(ObjKey, bool)>>,
    latencies: Vec<Duration>,
    transitions: u64,
}

fn members(slice: &EndpointSlice) -> Vec<(ObjKey, bool)> {
    let ns = slice.metadata.namespace.clone().unwrap_or_default();
    slice
        .endpoints()
        .iter()
        .filter_map(|e| {
            let r = e.target_ref.as_ref()?;
            if r.kind.as_deref() != Some("Pod") {
                return None;
            }
            let key = (
                r.namespace.clone().unwrap_or_else(|| ns.clone()),
                r.name.clone()?,
            );
            let ready = e.conditions.as_ref().and_then(|c| c.ready) == Some(true);
            Some((key, ready))
        })
        .collect()
}

impl Tracker {
    /// The driver changed a Pod at `now`.
    pub fn transition(&mut self, pod: ObjKey, want: Want, now: Instant) {
        self.transitions += 1;
        let track = self.pods.entry(pod.clone()).or_insert(PodTrack {
            want,
            pending: Vec::new(),
            slices: 0,
            shown: None,
        });
        track.want = want;
        track.pending.push(now);
        self.check(&pod, None, now);
    }

    /// Resolves `pod`'s pending transitions if the slices now show what was wanted.
    /// `written`: its readiness in the slice just written, if that slice holds it.
    fn check(&mut self, pod: &ObjKey, written: Option<bool>, now: Instant) {
        let Some(track) = self.pods.get_mut(pod) else {
            return;
        };
        let done = match track.want {
            Want::Absent => track.slices == 0,
            Want::Present { ready } => match written {
                Some(r) => r == ready,
                // Not written now: only already true when made (see the module docs).
                None => track.slices > 0 && track.shown == Some(ready),
            },
        };
        if done {
            self.latencies
                .extend(track.pending.drain(..).map(|t| now.duration_since(t)));
            if track.want == Want::Absent && track.slices == 0 {
                self.pods.remove(pod);
            }
        }
    }

    /// A slice was written (`Some`) or deleted (`None`) at `now`.
    pub fn slice_event(&mut self, key: ObjKey, slice: Option<&EndpointSlice>, now: Instant) {
        let new = slice.map(members).unwrap_or_default();
        let old = match slice {
            Some(_) => self.slices.insert(key, new.clone()).unwrap_or_default(),
            None => self.slices.remove(&key).unwrap_or_default(),
        };
        let old_keys: HashSet<&ObjKey> = old.iter().map(|(k, _)| k).collect();
        let new_keys: HashSet<&ObjKey> = new.iter().map(|(k, _)| k).collect();
        for (pod, _) in &old {
            if !new_keys.contains(pod)
                && let Some(t) = self.pods.get_mut(pod)
            {
                t.slices = t.slices.saturating_sub(1);
            }
        }
        for (pod, ready) in &new {
            let t = self.pods.entry(pod.clone()).or_insert(PodTrack {
                want: Want::Present { ready: *ready },
                pending: Vec::new(),
                slices: 0,
                shown: None,
            });
            if !old_keys.contains(pod) {
                t.slices += 1;
            }
            t.shown = Some(*ready);
        }
        for (pod, _) in &old {
            if !new_keys.contains(pod) {
                self.check(pod, None, now);
            }
        }
        for (pod, ready) in &new {
            self.check(pod, Some(*ready), now);
        }
    }

    /// Transitions not reflected yet.
    pub fn pending(&self) -> u64 {
        self.pods.values().map(|t| t.pending.len() as u64).sum()
    }

    /// The figures since the last call; transitions still pending count as never
    /// reflected (call it once the trace has settled).
    pub fn take_summary(&mut self) -> LatencySummary {
        let mut l = std::mem::take(&mut self.latencies);
        l.sort_unstable();
        let pending = self.pending();
        let pct = |p: f64| -> Duration {
            if l.is_empty() {
                return Duration::ZERO;
            }
            let rank = ((p * l.len() as f64).ceil() as usize).clamp(1, l.len());
            l[rank - 1]
        };
        let summary = LatencySummary {
            transitions: std::mem::take(&mut self.transitions),
            reflected: l.len() as u64,
            never_reflected: pending,
            p50: pct(0.50),
            p99: pct(0.99),
            max: l.last().copied().unwrap_or_default(),
        };
        for t in self.pods.values_mut() {
            t.pending.clear();
        }
        summary
    }
}

/// Shared handle to a [`Tracker`].
pub type SharedTracker = Arc<Mutex<Tracker>>;

/// Locks the tracker (a panic elsewhere leaves it usable: each update is complete).
pub fn lock(t: &SharedTracker) -> std::sync::MutexGuard<'_, Tracker> {
    t.lock().unwrap_or_else(PoisonError::into_inner)
}

fn key_of(s: &EndpointSlice) -> ObjKey {
    (
        s.metadata.namespace.clone().unwrap_or_default(),
        s.metadata.name.clone().unwrap_or_default(),
    )
}

/// Watches EndpointSlices into `tracker` until aborted. `busy` accumulates the time
/// this task spends (decoding and bookkeeping, plus the fake's encoding for it), so the
/// CPU figure can leave the observer out.
pub fn spawn(client: Client, tracker: SharedTracker, busy: Arc<AtomicU64>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<EndpointSlice> = Api::all(client);
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        let mut relisted: Option<HashSet<ObjKey>> = None;
        loop {
            let next = futures::future::poll_fn(|cx| {
                let start = std::time::Instant::now();
                let r = stream.poll_next_unpin(cx);
                add(&busy, start.elapsed());
                r
            })
            .await;
            let Some(event) = next else { return };
            let start = std::time::Instant::now();
            let now = Instant::now();
            let mut t = lock(&tracker);
            match event {
                Ok(Event::Apply(s)) => t.slice_event(key_of(&s), Some(&s), now),
                Ok(Event::Delete(s)) => t.slice_event(key_of(&s), None, now),
                Ok(Event::Init) => relisted = Some(HashSet::new()),
                Ok(Event::InitApply(s)) => {
                    relisted.get_or_insert_default().insert(key_of(&s));
                    t.slice_event(key_of(&s), Some(&s), now);
                }
                Ok(Event::InitDone) => {
                    let seen = relisted.take().unwrap_or_default();
                    let gone: Vec<ObjKey> = t
                        .slices
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for k in gone {
                        t.slice_event(k, None, now);
                    }
                }
                Err(_) => {}
            }
            drop(t);
            add(&busy, start.elapsed());
        }
    })
}

fn add(busy: &AtomicU64, d: Duration) {
    busy.fetch_add(
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};

    fn slice(name: &str, pods: &[(&str, bool)]) -> EndpointSlice {
        let mut s = EndpointSlice::default();
        s.metadata.namespace = Some("ns".into());
        s.metadata.name = Some(name.into());
        s.endpoints = Some(
            pods.iter()
                .map(|(p, ready)| Endpoint {
                    addresses: vec!["10.0.0.1".into()],
                    conditions: Some(EndpointConditions {
                        ready: Some(*ready),
                        ..EndpointConditions::default()
                    }),
                    target_ref: Some(ObjectReference {
                        kind: Some("Pod".into()),
                        namespace: Some("ns".into()),
                        name: Some((*p).into()),
                        ..ObjectReference::default()
                    }),
                    ..Endpoint::default()
                })
                .collect(),
        );
        s
    }

    fn key(n: &str) -> ObjKey {
        ("ns".into(), n.into())
    }

    #[tokio::test(start_paused = true)]
    async fn transitions_resolve_at_the_write_that_shows_the_latest_state() {
        let mut t = Tracker::default();
        let t0 = Instant::now();
        t.transition(key("a"), Want::Present { ready: false }, t0);
        tokio::time::advance(Duration::from_secs(2)).await;
        t.transition(key("a"), Want::Present { ready: true }, Instant::now());
        tokio::time::advance(Duration::from_secs(1)).await;
        // A write still showing it not ready reflects nothing.
        t.slice_event(
            key("s1"),
            Some(&slice("s1", &[("a", false)])),
            Instant::now(),
        );
        assert_eq!(t.latencies.len(), 0);
        tokio::time::advance(Duration::from_secs(1)).await;
        t.slice_event(
            key("s1"),
            Some(&slice("s1", &[("a", true)])),
            Instant::now(),
        );
        let mut l = t.latencies.clone();
        l.sort();
        assert_eq!(l, [Duration::from_secs(2), Duration::from_secs(4)]);

        // Deletion: reflected once no slice holds it.
        t.slice_event(
            key("s2"),
            Some(&slice("s2", &[("a", true), ("b", true)])),
            Instant::now(),
        );
        t.transition(key("a"), Want::Absent, Instant::now());
        tokio::time::advance(Duration::from_secs(3)).await;
        t.slice_event(key("s1"), Some(&slice("s1", &[])), Instant::now());
        assert_eq!(t.take_summary().never_reflected, 1, "still in s2");
        t.transition(key("a"), Want::Absent, Instant::now());
        tokio::time::advance(Duration::from_secs(1)).await;
        t.slice_event(key("s2"), None, Instant::now());
        let s = t.take_summary();
        assert_eq!((s.reflected, s.never_reflected), (1, 0));
        assert_eq!(s.max, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_transition_already_shown_needs_no_write() {
        let mut t = Tracker::default();
        t.slice_event(
            key("s1"),
            Some(&slice("s1", &[("a", true)])),
            Instant::now(),
        );
        t.transition(key("a"), Want::Present { ready: true }, Instant::now());
        t.transition(key("gone"), Want::Absent, Instant::now());
        let s = t.take_summary();
        assert_eq!((s.transitions, s.reflected, s.max), (2, 2, Duration::ZERO));
    }
}
