//! Reflecting Services, claims and IPAddress objects into the allocation state.
//!
//! One watch per source (kube-runtime's `watcher`; failures wait the shared jittered
//! backoff and log once per outage, WH-15). A (re-)list
//! replaces everything that source held before, so objects deleted while the watch was
//! down do not leave values taken forever. The webhook is ready once every source has
//! finished its first list; until then it would answer from a partial picture.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::networking::v1::IPAddress;
use kube::api::{Api, ListParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::holders::{HolderSource, SourceKind};
use crate::claim::AllocationClaim;
use crate::retry::{Backoff, Outage, wait};
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

/// Which sources have completed their first list (the webhook may answer), and which
/// are in sync right now: listed since their last failure. Only the watch loop
/// ([`feed`]) writes these, from what the watch itself reports, so production and
/// tests see the same signals.
#[derive(Debug, Default)]
pub struct Readiness {
    listed: [AtomicBool; 5],
    in_sync: [AtomicBool; 5],
    /// The AllocationClaim CRD is not served (the claims watch waits for it).
    crd_missing: AtomicBool,
}

/// What `/readyz` says while the AllocationClaim CRD is missing: what is wrong and the
/// one command that fixes it.
pub const CRD_MISSING: &str = "the AllocationClaim CustomResourceDefinition \
(allocationclaims.svcplane.io) is not installed: apply it with \
`svcplane crd | kubectl apply -f -`, or install the Helm chart with crds.install=true";

fn slot(kind: SourceKind) -> usize {
    match kind {
        SourceKind::Services => 0,
        SourceKind::Claims => 1,
        SourceKind::IpAddresses => 2,
        SourceKind::ServiceCidrs => 3,
        SourceKind::Namespaces => 4,
    }
}

const ALL_SOURCES: [SourceKind; 5] = [
    SourceKind::Services,
    SourceKind::Claims,
    SourceKind::IpAddresses,
    SourceKind::ServiceCidrs,
    SourceKind::Namespaces,
];

impl Readiness {
    /// `kind` finished a (re-)list: it is ready, and in sync until its next failure.
    pub fn listed(&self, kind: SourceKind) {
        self.listed[slot(kind)].store(true, Ordering::Release);
        self.in_sync[slot(kind)].store(true, Ordering::Release);
    }

    /// `kind`'s watch failed or started a re-list: what it shows may be missing changes
    /// until the next list completes.
    pub fn out_of_sync(&self, kind: SourceKind) {
        self.in_sync[slot(kind)].store(false, Ordering::Release);
    }

    /// Has `kind` completed a list?
    pub fn is_synced(&self, kind: SourceKind) -> bool {
        self.listed[slot(kind)].load(Ordering::Acquire)
    }

    /// Is `kind` listed and not failing since?
    pub fn is_in_sync(&self, kind: SourceKind) -> bool {
        self.in_sync[slot(kind)].load(Ordering::Acquire)
    }

    /// Are the Service and claim watches both in sync right now? While one fails (or
    /// re-lists) "no Service holds this value" may just mean "not seen yet".
    pub fn repair_safe(&self) -> bool {
        self.all() && self.is_in_sync(SourceKind::Services) && self.is_in_sync(SourceKind::Claims)
    }

    /// Every source has completed a list.
    pub fn all(&self) -> bool {
        ALL_SOURCES.into_iter().all(|k| self.is_synced(k))
    }

    /// Record whether the AllocationClaim CRD is missing.
    pub fn set_crd_missing(&self, missing: bool) {
        self.crd_missing.store(missing, Ordering::Release);
    }

    /// Is the AllocationClaim CRD missing?
    pub fn crd_missing(&self) -> bool {
        self.crd_missing.load(Ordering::Acquire)
    }

    /// Why the webhook cannot answer yet, for `/readyz` (`None`: it can).
    pub fn not_ready_reason(&self) -> Option<String> {
        if self.crd_missing() {
            return Some(CRD_MISSING.to_owned());
        }
        let waiting: Vec<&str> = ALL_SOURCES
            .into_iter()
            .filter(|k| !self.is_synced(*k))
            .map(SourceKind::label)
            .collect();
        (!waiting.is_empty()).then(|| {
            format!(
                "allocation watches have not listed yet (waiting for: {})",
                waiting.join(", ")
            )
        })
    }
}

/// What one watch event did to a source's sync state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// A (re-)list started: the source is out of sync until it completes.
    Relisting,
    /// A (re-)list completed: the source holds exactly what is stored.
    Listed,
    /// An object changed.
    Changed,
}

/// Apply one watch event to the state. `seen` collects the keys of a list in progress.
pub fn apply_event<K: HolderSource>(
    state: &mut AllocationState,
    event: Event<K>,
    seen: &mut Option<HashSet<HolderKey>>,
) -> Applied {
    match event {
        Event::Init => {
            *seen = Some(HashSet::new());
            Applied::Relisting
        }
        Event::InitApply(obj) => {
            if let Some(key) = obj.record(state)
                && let Some(s) = seen.as_mut()
            {
                s.insert(key);
            }
            Applied::Changed
        }
        Event::InitDone => {
            let keep = seen.take().unwrap_or_default();
            for key in K::known(state) {
                if !keep.contains(&key) {
                    K::forget(state, &key);
                }
            }
            Applied::Listed
        }
        Event::Apply(obj) => {
            obj.record(state);
            Applied::Changed
        }
        Event::Delete(obj) => {
            if let Some(k) = obj.key() {
                K::forget(state, &k);
            }
            Applied::Changed
        }
    }
}

/// Watch `api` until `cancel`, feeding `state` and `readiness`.
///
/// Any watch failure drops the stream and lists again (after a backoff): kube's watcher
/// would otherwise resume some failures silently from its last resourceVersion, and a
/// resumed watch says nothing when it is healthy again, so "in sync" could never be
/// set back without a list. A list is the one event that proves the source complete.
pub async fn feed<K>(
    api: Api<K>,
    state: SharedState,
    readiness: Arc<Readiness>,
    cancel: CancellationToken,
) where
    K: HolderSource + Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let kind = K::KIND;
    let mut backoff = Backoff::from_entropy();
    let mut outage = Outage::default();
    loop {
        let stream = watcher::watcher(api.clone(), watcher::Config::default());
        futures::pin_mut!(stream);
        let mut seen = None;
        let retry_in = loop {
            let next = tokio::select! {
                () = cancel.cancelled() => return,
                next = stream.try_next() => next,
            };
            match next {
                Ok(Some(event)) => match apply_event(&mut lock(&state), event, &mut seen) {
                    Applied::Relisting => readiness.out_of_sync(kind),
                    Applied::Listed => {
                        if !readiness.is_synced(kind) {
                            info!(source = kind.label(), "initial list loaded");
                        } else if !readiness.is_in_sync(kind) {
                            info!(source = kind.label(), "re-listed; in sync again");
                        }
                        readiness.listed(kind);
                        backoff.reset();
                        outage.recovered(kind.label(), "watch");
                    }
                    Applied::Changed => {}
                },
                Ok(None) => {
                    readiness.out_of_sync(kind);
                    info!(source = kind.label(), "watch ended; listing again");
                    break backoff.next_delay();
                }
                Err(e) => {
                    readiness.out_of_sync(kind);
                    let delay = backoff.next_delay();
                    outage.failed(kind.label(), "watch failed; listing again", &e, delay);
                    break delay;
                }
            }
        };
        if !wait(retry_in, &cancel).await {
            return;
        }
    }
}

/// Who watches Services for the webhook.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ServiceSource {
    /// The webhook's own watch (`svcplane webhook`).
    #[default]
    OwnWatch,
    /// The embedding process watches Services once for everyone and feeds them in
    /// through `Started::service_sink` (`svcplane run`).
    External,
}

/// Services fed in by an embedding process that watches them itself (`svcplane run`
/// watches Services once for its controllers and the webhook). It applies the same
/// state updates as the webhook's own watch, and its sync signal drives readiness and
/// the repair loop's gate the same way.
#[derive(Debug, Clone)]
pub struct ServiceSink {
    state: SharedState,
    readiness: Arc<Readiness>,
}

impl ServiceSink {
    pub(crate) fn new(state: SharedState, readiness: Arc<Readiness>) -> Self {
        Self { state, readiness }
    }

    /// A Service was added or updated.
    pub fn apply(&self, svc: &Service) {
        svc.record(&mut lock(&self.state));
    }

    /// A Service was deleted.
    pub fn delete(&self, svc: &Service) {
        if let Some(key) = svc.key() {
            <Service as HolderSource>::forget(&mut lock(&self.state), &key);
        }
    }

    /// The feeding watch listed (`true`), or failed or started listing again.
    pub fn sync_changed(&self, in_sync: bool) {
        if in_sync {
            if !self.readiness.is_synced(SourceKind::Services) {
                info!(source = "services", "initial list loaded");
            }
            self.readiness.listed(SourceKind::Services);
        } else {
            self.readiness.out_of_sync(SourceKind::Services);
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

/// How often a missing AllocationClaim CRD is looked for again.
pub const CRD_POLL: Duration = Duration::from_secs(5);

/// Waits until AllocationClaims are served; `false` if `cancel` fired first. While the
/// CRD is missing, `readiness` says so (for `/readyz`) and one error line names the
/// fix — instead of a watch failing with 404 forever, a warning per retry.
pub async fn wait_for_claims_crd(
    client: &Client,
    readiness: &Readiness,
    cancel: &CancellationToken,
    poll: Duration,
) -> bool {
    let api: Api<AllocationClaim> = Api::all(client.clone());
    let mut reported_missing = false;
    let mut last_error: Option<String> = None;
    loop {
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => {
                readiness.set_crd_missing(false);
                if reported_missing {
                    info!("the AllocationClaim CRD is installed now; watching claims");
                }
                return true;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                readiness.set_crd_missing(true);
                if !reported_missing {
                    error!("{CRD_MISSING}; the webhook stays unready until it is");
                    reported_missing = true;
                }
            }
            Err(e) => {
                let msg = e.to_string();
                if last_error.as_deref() != Some(msg.as_str()) {
                    warn!(error = %msg, "cannot tell whether the AllocationClaim CRD is installed; retrying");
                    last_error = Some(msg);
                }
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return false,
            () = tokio::time::sleep(poll) => {}
        }
    }
}

/// Start every watch the webhook needs. The claim watch starts once the
/// AllocationClaim CRD is served ([`wait_for_claims_crd`]); IPAddress objects are
/// watched when the API server has them, otherwise that source is ready at once.
pub async fn spawn_all(
    client: Client,
    state: SharedState,
    readiness: Arc<Readiness>,
    services: ServiceSource,
    cancel: CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let claims = {
        let (client, state, readiness, cancel) = (
            client.clone(),
            state.clone(),
            readiness.clone(),
            cancel.clone(),
        );
        async move {
            if wait_for_claims_crd(&client, &readiness, &cancel, CRD_POLL).await {
                feed(
                    Api::<AllocationClaim>::all(client),
                    state,
                    readiness,
                    cancel,
                )
                .await;
            }
        }
    };
    let mut tasks = vec![
        tokio::spawn(claims),
        tokio::spawn(feed(
            Api::<Namespace>::all(client.clone()),
            state.clone(),
            readiness.clone(),
            cancel.clone(),
        )),
    ];
    if services == ServiceSource::OwnWatch {
        tasks.push(tokio::spawn(feed(
            Api::<Service>::all(client.clone()),
            state.clone(),
            readiness.clone(),
            cancel.clone(),
        )));
    }
    let mut backoff = Backoff::from_entropy();
    let mut outage = Outage::default();
    loop {
        let served = has_ip_addresses(&client).await;
        if served.is_ok() {
            outage.recovered("ipaddresses", "asking whether IPAddress objects exist");
        }
        match served {
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
                readiness.listed(SourceKind::IpAddresses);
                break;
            }
            Err(e) => {
                let delay = backoff.next_delay();
                outage.failed(
                    "ipaddresses",
                    "cannot tell whether IPAddress objects exist",
                    &e,
                    delay,
                );
                if !wait(delay, &cancel).await {
                    break;
                }
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
        let phases: Vec<Applied> = [
            Event::Init,
            Event::InitApply(claim("10.0.0.2")),
            Event::InitDone,
        ]
        .into_iter()
        .map(|e| apply_event(&mut s, e, &mut seen))
        .collect();
        assert_eq!(
            phases,
            [Applied::Relisting, Applied::Changed, Applied::Listed]
        );
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
        for k in ALL_SOURCES {
            r.listed(k);
        }
        assert!(r.repair_safe());
        r.out_of_sync(SourceKind::Services);
        assert!(!r.repair_safe(), "a failing Service watch");
        assert!(r.all(), "readiness to answer survives a failure");
        r.listed(SourceKind::Services);
        assert!(r.repair_safe(), "a completed re-list");
        r.out_of_sync(SourceKind::IpAddresses);
        assert!(r.repair_safe(), "IPAddresses do not gate the repair");
    }

    #[test]
    fn readyz_names_the_missing_crd_and_the_command_that_fixes_it() {
        let r = Readiness::default();
        let why = r.not_ready_reason().unwrap();
        assert!(
            why.contains("services, allocationclaims, ipaddresses"),
            "{why}"
        );
        r.set_crd_missing(true);
        let why = r.not_ready_reason().unwrap();
        assert!(why.contains("allocationclaims.svcplane.io"), "{why}");
        assert!(why.contains("svcplane crd | kubectl apply -f -"), "{why}");
        for k in ALL_SOURCES {
            r.listed(k);
        }
        assert!(r.not_ready_reason().is_some(), "a missing CRD wins");
        r.set_crd_missing(false);
        assert_eq!(r.not_ready_reason(), None);
    }

    #[test]
    fn readiness_needs_every_source() {
        let r = Readiness::default();
        r.listed(SourceKind::Services);
        r.listed(SourceKind::Claims);
        assert!(!r.all());
        assert!(!r.repair_safe());
        r.listed(SourceKind::IpAddresses);
        assert!(!r.all(), "the ranges too");
        r.listed(SourceKind::ServiceCidrs);
        assert!(!r.all(), "the namespaces too");
        r.listed(SourceKind::Namespaces);
        assert!(r.all());
    }
}
