//! Reflecting Services, claims and IPAddress objects into the allocation state.
//!
//! One watch per source (kube-runtime's `watcher`, with its backoff). A (re-)list
//! replaces everything that source held before, so objects deleted while the watch was
//! down do not leave values taken forever. The webhook is ready once every source has
//! finished its first list; until then it would answer from a partial picture.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::IPAddress;
use kube::api::{Api, ListParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::holders::{HolderSource, SourceKind};
use crate::claim::AllocationClaim;
use crate::state::{AllocationState, HolderKey};

/// The allocation state shared by the watches and the admission handler. A std mutex:
/// it is never held across an await, and every critical section is a few microseconds.
pub type SharedState = Arc<Mutex<AllocationState>>;

/// Lock the shared state. A panic while holding the lock cannot leave the state
/// half-updated in a way later calls would misread (every mutation is a complete
/// holder replacement), so a poisoned lock is recovered rather than propagated.
pub fn lock(state: &SharedState) -> MutexGuard<'_, AllocationState> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Which sources have completed their first list, and which are currently in sync
/// (not failing, not in the middle of a re-list).
#[derive(Debug, Default)]
pub struct Readiness {
    services: AtomicBool,
    claims: AtomicBool,
    ip_addresses: AtomicBool,
    services_in_sync: AtomicBool,
    claims_in_sync: AtomicBool,
}

impl Readiness {
    fn flag(&self, kind: SourceKind) -> &AtomicBool {
        match kind {
            SourceKind::Services => &self.services,
            SourceKind::Claims => &self.claims,
            SourceKind::IpAddresses => &self.ip_addresses,
        }
    }

    /// Mark `kind` synced.
    pub fn set(&self, kind: SourceKind) {
        self.flag(kind).store(true, Ordering::Release);
    }

    /// Has `kind` completed a list?
    pub fn is_synced(&self, kind: SourceKind) -> bool {
        self.flag(kind).load(Ordering::Acquire)
    }

    /// Record whether `kind`'s watch is currently in sync. Only Services and claims
    /// are tracked: they are what the repair loop's decisions rest on.
    pub fn set_in_sync(&self, kind: SourceKind, in_sync: bool) {
        let flag = match kind {
            SourceKind::Services => &self.services_in_sync,
            SourceKind::Claims => &self.claims_in_sync,
            SourceKind::IpAddresses => return,
        };
        flag.store(in_sync, Ordering::Release);
    }

    /// Are the Service and claim watches both in sync right now? While one fails (or
    /// re-lists) "no Service holds this value" may just mean "not seen yet".
    pub fn repair_safe(&self) -> bool {
        self.all()
            && self.services_in_sync.load(Ordering::Acquire)
            && self.claims_in_sync.load(Ordering::Acquire)
    }

    /// Every source synced.
    pub fn all(&self) -> bool {
        [
            SourceKind::Services,
            SourceKind::Claims,
            SourceKind::IpAddresses,
        ]
        .into_iter()
        .all(|k| self.is_synced(k))
    }
}

/// Apply one watch event to the state. `seen` collects the keys of a list in progress.
pub fn apply_event<K: HolderSource>(
    state: &mut AllocationState,
    event: Event<K>,
    seen: &mut Option<HashSet<HolderKey>>,
) -> bool {
    match event {
        Event::Init => {
            *seen = Some(HashSet::new());
            false
        }
        Event::InitApply(obj) => {
            if let Some(h) = obj.holding() {
                if let Some(s) = seen.as_mut() {
                    s.insert(h.key.clone());
                }
                state.set(h.key, h.owner, h.values);
            }
            false
        }
        Event::InitDone => {
            let keep = seen.take().unwrap_or_default();
            state.retain(|k| !K::KIND.owns(k) || keep.contains(k));
            true
        }
        Event::Apply(obj) => {
            if let Some(h) = obj.holding() {
                state.set(h.key, h.owner, h.values);
            }
            false
        }
        Event::Delete(obj) => {
            if let Some(k) = obj.key() {
                state.remove(&k);
            }
            false
        }
    }
}

/// Watch `api` until `cancel`, feeding `state`.
pub async fn feed<K>(
    api: Api<K>,
    state: SharedState,
    readiness: Arc<Readiness>,
    cancel: CancellationToken,
) where
    K: HolderSource + Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let kind = K::KIND;
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut seen = None;
    loop {
        let next = tokio::select! {
            () = cancel.cancelled() => return,
            next = stream.try_next() => next,
        };
        match next {
            Ok(Some(event)) => {
                let synced = apply_event(&mut lock(&state), event, &mut seen);
                if synced && !readiness.is_synced(kind) {
                    info!(source = kind.label(), "initial list loaded");
                    readiness.set(kind);
                }
            }
            Ok(None) => return,
            Err(e) => {
                warn!(source = kind.label(), error = %e, "watch failed; retrying with backoff")
            }
        }
    }
}

/// Does the API server serve networking.k8s.io/v1 IPAddress objects? `Ok(false)` on
/// 404 (older servers, or the MultiCIDRServiceAllocator gate off).
pub async fn has_ip_addresses(client: &Client) -> Result<bool, kube::Error> {
    let api: Api<IPAddress> = Api::all(client.clone());
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Start every watch the webhook needs. IPAddress objects are watched when the API
/// server has them; otherwise that source is ready at once.
pub async fn spawn_all(
    client: Client,
    state: SharedState,
    readiness: Arc<Readiness>,
    cancel: CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = vec![
        tokio::spawn(feed(
            Api::<Service>::all(client.clone()),
            state.clone(),
            readiness.clone(),
            cancel.clone(),
        )),
        tokio::spawn(feed(
            Api::<AllocationClaim>::all(client.clone()),
            state.clone(),
            readiness.clone(),
            cancel.clone(),
        )),
    ];
    let mut delay = std::time::Duration::from_millis(500);
    loop {
        match has_ip_addresses(&client).await {
            Ok(true) => {
                tasks.push(tokio::spawn(feed(
                    Api::<IPAddress>::all(client.clone()),
                    state.clone(),
                    readiness.clone(),
                    cancel.clone(),
                )));
                break;
            }
            Ok(false) => {
                info!(
                    "API server has no IPAddress objects; allocations are learned from Services and claims"
                );
                readiness.set(SourceKind::IpAddresses);
                break;
            }
            Err(e) => {
                warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "cannot tell whether IPAddress objects exist; retrying");
                tokio::select! {
                    () = cancel.cancelled() => break,
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(std::time::Duration::from_secs(30));
            }
        }
    }
    tasks
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use svcplane_allocator::{AllocatorConfig, Claim};

    use super::*;
    use crate::state::ServiceRef;

    fn state() -> AllocationState {
        AllocationState::new(
            AllocatorConfig::from_flags("10.0.0.0/24", "30000-30099")
                .unwrap()
                .allocators(1)
                .unwrap(),
        )
    }

    fn claim(ip: &str) -> AllocationClaim {
        let v = Claim::Ip(ip.parse::<IpAddr>().unwrap());
        AllocationClaim::for_value(v, &ServiceRef::named("ns", "a"))
    }

    fn has(s: &AllocationState, ip: &str) -> bool {
        s.allocators().has(Claim::Ip(ip.parse().unwrap()))
    }

    #[test]
    fn a_relist_drops_objects_deleted_while_the_watch_was_down() {
        let mut s = state();
        let mut seen = None;
        for e in [
            Event::Init,
            Event::InitApply(claim("10.0.0.1")),
            Event::InitApply(claim("10.0.0.2")),
            Event::InitDone,
        ] {
            apply_event(&mut s, e, &mut seen);
        }
        assert!(has(&s, "10.0.0.1") && has(&s, "10.0.0.2"));
        // Other sources' holders survive a claims re-list.
        s.set(
            HolderKey::Service {
                namespace: "ns".into(),
                name: "x".into(),
            },
            None,
            vec![Claim::NodePort(30001)],
        );
        let mut synced = false;
        for e in [
            Event::Init,
            Event::InitApply(claim("10.0.0.2")),
            Event::InitDone,
        ] {
            synced = apply_event(&mut s, e, &mut seen);
        }
        assert!(synced);
        assert!(!has(&s, "10.0.0.1"));
        assert!(has(&s, "10.0.0.2"));
        assert!(s.allocators().has(Claim::NodePort(30001)));
    }

    #[test]
    fn apply_and_delete_events_update_the_state() {
        let mut s = state();
        let mut seen = None;
        apply_event(&mut s, Event::Apply(claim("10.0.0.3")), &mut seen);
        assert!(has(&s, "10.0.0.3"));
        apply_event(&mut s, Event::Delete(claim("10.0.0.3")), &mut seen);
        assert!(!has(&s, "10.0.0.3"));
    }

    #[test]
    fn repair_waits_for_services_and_claims_to_be_in_sync() {
        let r = Readiness::default();
        for k in [
            SourceKind::Services,
            SourceKind::Claims,
            SourceKind::IpAddresses,
        ] {
            r.set(k);
        }
        assert!(!r.repair_safe());
        r.set_in_sync(SourceKind::Services, true);
        r.set_in_sync(SourceKind::Claims, true);
        assert!(r.repair_safe());
        r.set_in_sync(SourceKind::Services, false);
        assert!(!r.repair_safe(), "a failing Service watch");
    }

    #[test]
    fn readiness_needs_every_source() {
        let r = Readiness::default();
        r.set(SourceKind::Services);
        r.set(SourceKind::Claims);
        assert!(!r.all());
        r.set(SourceKind::IpAddresses);
        assert!(r.all());
    }
}
