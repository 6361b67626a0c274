//! The cluster's Service ranges, from its ServiceCIDR objects (KEP-1880).
//!
//! Since Kubernetes 1.33 a cluster's ClusterIP ranges are `networking.k8s.io/v1`
//! ServiceCIDR objects, added and removed at run time. Where the API server serves them,
//! the webhook takes its ranges from them, and follows every change without a restart:
//! a range added starts handing out addresses once ready, a range being deleted keeps
//! its addresses valid but hands out nothing, a range removed is gone
//! (`svcplane_allocator::service_cidrs` has the rules). The range flags are the
//! fallback for API servers without the API; when both exist and disagree the objects
//! win, and the difference is logged once and shown in `/readyz`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::TryStreamExt;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::watcher::{self, Event};
use svcplane_allocator::Cidr;
use svcplane_allocator::service_cidrs::{ServiceCidrView, cluster_ranges, differ, primary_family};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::holders::SourceKind;
use super::watch::{Readiness, SharedState, lock};
use crate::retry::{Backoff, Outage, wait};
use crate::state::{AllocationState, HolderKey};
use svcplane_allocator::Claim;

/// Where ServiceCIDR objects reach the webhook: from its own watch (`svcplane
/// webhook`) or from the process' shared one (`svcplane run`).
#[derive(Debug)]
pub struct ServiceCidrSink {
    state: SharedState,
    readiness: Arc<Readiness>,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    objects: BTreeMap<String, ServiceCidrView>,
    /// A list has completed: the objects are the cluster's.
    listed: bool,
    /// The ranges in force (CIDR, ready), to apply only real changes.
    applied: Vec<(String, bool)>,
    /// `--service-cluster-ip-range`, when the operator set it.
    flags: Option<Vec<Cidr>>,
    /// Flags and objects disagree (said once).
    notice: Option<String>,
    /// The objects decide (`false`: the configured ranges stand whatever they say).
    follow: bool,
}

/// The allocator's view of a ServiceCIDR; a namespace selector that does not parse
/// is logged (its range then serves no namespace).
fn viewed(obj: &ServiceCIDR) -> ServiceCidrView {
    let view = ServiceCidrView::of(obj);
    if let Some(Err(e)) = &view.namespace_selector {
        warn!(servicecidr = %view.name, error = %e, "the ServiceCIDR's range serves no namespace until its selector is fixed");
    }
    view
}

impl ServiceCidrSink {
    /// A sink feeding `state`; `flags` are the ranges the operator gave, if any.
    pub fn new(
        state: SharedState,
        readiness: Arc<Readiness>,
        flags: Option<Vec<Cidr>>,
        follow: bool,
    ) -> Self {
        Self {
            state,
            readiness,
            inner: Mutex::new(Inner {
                flags,
                follow,
                ..Inner::default()
            }),
        }
    }

    /// `--service-ranges-from=flags`: the configured ranges stand.
    pub fn not_followed(&self) {
        info!("Service ranges from --service-cluster-ip-range (--service-ranges-from=flags)");
        self.readiness.listed(SourceKind::ServiceCidrs);
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An object was added or changed.
    pub fn apply(&self, obj: &ServiceCIDR) {
        let view = viewed(obj);
        let mut inner = self.inner();
        inner.objects.insert(view.name.clone(), view);
        if inner.listed {
            self.recompute(&mut inner);
        }
    }

    /// An object is gone.
    pub fn delete(&self, obj: &ServiceCIDR) {
        let name = obj.metadata.name.clone().unwrap_or_default();
        let mut inner = self.inner();
        inner.objects.remove(&name);
        if inner.listed {
            self.recompute(&mut inner);
        }
    }

    /// A (re-)list completed with exactly `objects`.
    pub fn replace_all(&self, objects: &[ServiceCIDR]) {
        let mut inner = self.inner();
        inner.objects = objects
            .iter()
            .map(viewed)
            .map(|v| (v.name.clone(), v))
            .collect();
        inner.listed = true;
        self.recompute(&mut inner);
        drop(inner);
        self.readiness.listed(SourceKind::ServiceCidrs);
    }

    /// The feeding watch listed (`true`), or failed or started listing again.
    pub fn sync_changed(&self, in_sync: bool) {
        if in_sync {
            let mut inner = self.inner();
            inner.listed = true;
            self.recompute(&mut inner);
            drop(inner);
            self.readiness.listed(SourceKind::ServiceCidrs);
        } else {
            self.readiness.out_of_sync(SourceKind::ServiceCidrs);
        }
    }

    /// The API server serves no ServiceCIDRs: the flags' ranges stand.
    pub fn not_served(&self) {
        info!(
            "API server has no ServiceCIDR objects; Service ranges come from --service-cluster-ip-range"
        );
        self.readiness.listed(SourceKind::ServiceCidrs);
    }

    /// How the flags and the objects disagree, if they do.
    pub fn notice(&self) -> Option<String> {
        self.inner().notice.clone()
    }

    /// The ranges in force, as `CIDR` (ready) or `CIDR (not ready)`.
    pub fn ranges(&self) -> Vec<String> {
        self.inner()
            .applied
            .iter()
            .map(|(c, ready)| {
                if *ready {
                    c.clone()
                } else {
                    format!("{c} (not ready)")
                }
            })
            .collect()
    }

    fn recompute(&self, inner: &mut Inner) {
        if !inner.follow {
            return;
        }
        let views: Vec<ServiceCidrView> = inner.objects.values().cloned().collect();
        let ranges = cluster_ranges(&views);
        if ranges.is_empty() {
            // None declared (or none usable): keep what is in force.
            return;
        }
        let shown: Vec<(String, bool)> = ranges
            .iter()
            .map(|r| (r.cidr.to_string(), r.ready))
            .collect();
        if shown == inner.applied {
            return;
        }
        let primary = primary_family(&views, &ranges);
        let refused = lock(&self.state).set_ranges(&ranges, primary);
        for (cidr, why) in &refused {
            warn!(%cidr, reason = %why, "ServiceCIDR range cannot be used");
        }
        info!(
            ranges = %shown
                .iter()
                .map(|(c, r)| if *r { c.clone() } else { format!("{c} (not ready)") })
                .collect::<Vec<_>>()
                .join(", "),
            "Service ranges from the cluster's ServiceCIDR objects"
        );
        inner.applied = shown;
        if let Some(flags) = &inner.flags {
            let cidrs: Vec<Cidr> = ranges.iter().map(|r| r.cidr).collect();
            if inner.notice.is_none() && differ(flags, &cidrs) {
                let notice = format!(
                    "--service-cluster-ip-range {} differs from the cluster's ServiceCIDR objects ({}); following the objects",
                    flags
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                    cidrs
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                );
                warn!("{notice}");
                inner.notice = Some(notice);
            }
        }
    }
}

/// The `default/kubernetes` Service's ClusterIPs that lie outside every range in
/// force (pure: a wrong range makes every hand-picked address in the real one fail).
pub fn kubernetes_service_outside(state: &AllocationState) -> Vec<std::net::IpAddr> {
    let key = HolderKey::Service {
        namespace: "default".into(),
        name: "kubernetes".into(),
    };
    state
        .values_of(&key)
        .iter()
        .filter_map(|v| match v {
            Claim::Ip(ip) => Some(*ip),
            Claim::NodePort(_) => None,
        })
        .filter(|ip| {
            !state
                .allocators()
                .family(svcplane_allocator::IpFamily::of(ip))
                .is_some_and(|f| f.contains(*ip))
        })
        .collect()
}

/// Once every source has listed, check the `default/kubernetes` Service against the
/// ranges and log an error naming both if it lies outside them.
pub async fn check_kubernetes_service(
    state: SharedState,
    readiness: Arc<Readiness>,
    sink: Arc<ServiceCidrSink>,
    cancel: CancellationToken,
) {
    while !readiness.all() {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
        }
    }
    let outside = kubernetes_service_outside(&lock(&state));
    if !outside.is_empty() {
        let ranges = {
            let in_force = sink.ranges();
            if in_force.is_empty() {
                "--service-cluster-ip-range".to_owned()
            } else {
                in_force.join(", ")
            }
        };
        error!(
            service = "default/kubernetes",
            cluster_ips = %outside.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
            ranges = %ranges,
            "the kubernetes Service's ClusterIP is outside every range svcplane uses: the ranges do not match the cluster (set --service-cluster-ip-range to kube-apiserver's, or use an API server with ServiceCIDR objects)"
        );
    }
}

/// Does the API server serve networking.k8s.io/v1 ServiceCIDR objects? `Ok(false)` on
/// 404 (before 1.33, or the API turned off).
pub async fn has_service_cidrs(client: &Client) -> Result<bool, kube::Error> {
    let api: Api<ServiceCIDR> = Api::all(client.clone());
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// The webhook's own ServiceCIDR watch (`svcplane webhook`), until `cancel`: lists again
/// after any failure, as the other watches do.
pub async fn feed_service_cidrs(
    api: Api<ServiceCIDR>,
    sink: Arc<ServiceCidrSink>,
    cancel: CancellationToken,
) {
    let mut backoff = Backoff::from_entropy();
    let mut outage = Outage::default();
    loop {
        let stream = watcher::watcher(api.clone(), watcher::Config::default());
        futures::pin_mut!(stream);
        let mut listing: Option<Vec<ServiceCIDR>> = None;
        let retry_in = loop {
            let next = tokio::select! {
                () = cancel.cancelled() => return,
                next = stream.try_next() => next,
            };
            match next {
                Ok(Some(Event::Init)) => {
                    sink.sync_changed(false);
                    listing = Some(Vec::new());
                }
                Ok(Some(Event::InitApply(obj))) => {
                    if let Some(l) = listing.as_mut() {
                        l.push(obj);
                    }
                }
                Ok(Some(Event::InitDone)) => {
                    sink.replace_all(&listing.take().unwrap_or_default());
                    backoff.reset();
                    outage.recovered("servicecidrs", "watch");
                }
                Ok(Some(Event::Apply(obj))) => sink.apply(&obj),
                Ok(Some(Event::Delete(obj))) => sink.delete(&obj),
                Ok(None) => break backoff.next_delay(),
                Err(e) => {
                    let delay = backoff.next_delay();
                    outage.failed("servicecidrs", "watch failed; listing again", &e, delay);
                    break delay;
                }
            }
        };
        sink.sync_changed(false);
        if !wait(retry_in, &cancel).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use k8s_openapi::api::networking::v1::ServiceCIDRSpec;
    use svcplane_allocator::{AllocatorConfig, Claim};

    use super::*;
    use crate::state::AllocationState;

    fn cidr(name: &str, cidrs: &[&str]) -> ServiceCIDR {
        let mut o = ServiceCIDR::default();
        o.metadata.name = Some(name.into());
        o.spec = Some(ServiceCIDRSpec {
            cidrs: Some(cidrs.iter().map(|s| s.to_string()).collect()),
        });
        o
    }

    fn sink(flags: Option<&str>) -> (ServiceCidrSink, SharedState) {
        let state = Arc::new(StdMutex::new(AllocationState::new(
            AllocatorConfig::from_flags("10.0.0.0/24", "30000-30099")
                .unwrap()
                .allocators(1)
                .unwrap(),
        )));
        let flags = flags.map(|f| vec![Cidr::parse(f).unwrap()]);
        (
            ServiceCidrSink::new(state.clone(), Arc::new(Readiness::default()), flags, true),
            state,
        )
    }

    fn contains(state: &SharedState, ip: &str) -> bool {
        let ip: std::net::IpAddr = ip.parse().unwrap();
        lock(state)
            .allocators()
            .family(svcplane_allocator::IpFamily::of(&ip))
            .is_some_and(|f| f.contains(ip))
    }

    #[test]
    fn the_objects_replace_the_flags_and_follow_every_change() {
        let (s, state) = sink(Some("10.0.0.0/24"));
        // Before the first list, nothing changes.
        s.apply(&cidr("kubernetes", &["10.96.0.0/16"]));
        assert!(contains(&state, "10.0.0.5"));
        s.replace_all(&[cidr("kubernetes", &["10.96.0.0/16"])]);
        assert!(contains(&state, "10.96.1.1"));
        assert!(!contains(&state, "10.0.0.5"));
        assert!(s.notice().unwrap().contains("differs"));
        s.apply(&cidr("extra", &["10.97.0.0/16"]));
        assert!(contains(&state, "10.97.0.9"));
        s.delete(&cidr("extra", &["10.97.0.0/16"]));
        assert!(!contains(&state, "10.97.0.9"));
    }

    #[test]
    fn the_kubernetes_service_outside_the_ranges_is_found() {
        let (_, state) = sink(None);
        let key = crate::state::HolderKey::Service {
            namespace: "default".into(),
            name: "kubernetes".into(),
        };
        lock(&state).set(
            key.clone(),
            None,
            vec![Claim::Ip("10.96.0.1".parse().unwrap())],
        );
        assert_eq!(
            kubernetes_service_outside(&lock(&state)),
            ["10.96.0.1".parse::<std::net::IpAddr>().unwrap()]
        );
        lock(&state).set(key, None, vec![Claim::Ip("10.0.0.1".parse().unwrap())]);
        assert!(kubernetes_service_outside(&lock(&state)).is_empty());
    }

    #[test]
    fn values_held_stay_held_when_a_range_appears() {
        let (s, state) = sink(None);
        lock(&state).set(
            crate::state::HolderKey::Service {
                namespace: "ns".into(),
                name: "a".into(),
            },
            None,
            vec![Claim::Ip("10.97.0.9".parse().unwrap())],
        );
        s.replace_all(&[
            cidr("kubernetes", &["10.0.0.0/24"]),
            cidr("extra", &["10.97.0.0/16"]),
        ]);
        assert!(
            lock(&state)
                .allocators()
                .has(Claim::Ip("10.97.0.9".parse().unwrap()))
        );
        assert_eq!(s.notice(), None, "no flags given: nothing to disagree with");
    }
}
