//! The kinds the controllers watch, each described once: its API type, its store in
//! the [`Cache`], how its objects are stripped, and whether every API server serves
//! it. Starting a watch, handing its changes to the controllers and waiting for its
//! first list are written once, generically, over that description; the runtime
//! asks [`Resource::ops`] and never matches on the kind itself.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use kube::Api;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use svcplane_webhook::retry::{Backoff, Outage, wait};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::cache::watched_pod::WatchedPod;
use super::cache::{
    Cache, ClusterStore, Consumer, EndpointsStore, NodeStore, PodStore, Resource, ServiceStore,
    Shared, SliceStore, Store, strip,
};
use super::controllers::dispatch::Dispatch;
use super::watch::reflect;

/// One watched kind.
pub(crate) trait WatchedKind: Send + Sync + 'static {
    /// What the API server sends (for Pods, only the fields kept).
    type Api: kube::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static;
    /// Its store in the cache.
    type Store: Store;
    /// The plural name (logs, metrics and RBAC rules).
    const PLURAL: &'static str;
    /// The API group (`""` for the core group).
    const GROUP: &'static str;
    /// Served only by some API servers (`networking.k8s.io/v1`, Kubernetes 1.33+):
    /// asked first, and an unserved kind counts as listed and empty.
    const OPTIONAL: bool;
    fn store(cache: &Cache) -> &Shared<Self::Store>;
    fn strip(object: Self::Api) -> <Self::Store as Store>::Item;
}

/// One kind per line: `Type => Store, cache field, "plural", "group", optional,
/// strip function;` becomes that kind's `WatchedKind` impl.
macro_rules! watched_kinds {
    ($($api:ty => $store:ty, $field:ident, $plural:literal, $group:literal, $optional:literal, $strip:path;)*) => {$(
        impl WatchedKind for $api {
            type Api = $api;
            type Store = $store;
            const PLURAL: &'static str = $plural;
            const GROUP: &'static str = $group;
            const OPTIONAL: bool = $optional;
            fn store(cache: &Cache) -> &Shared<$store> {
                &cache.$field
            }
            fn strip(object: $api) -> <$store as Store>::Item {
                $strip(object)
            }
        }
    )*};
}

// Pods are decoded straight into the kept fields (see `watched_pod`).
watched_kinds! {
    Service => ServiceStore, services, "services", "", false, strip::service;
    WatchedPod => PodStore, pods, "pods", "", false, strip::watched_pod;
    Node => NodeStore, nodes, "nodes", "", false, strip::node;
    EndpointSlice => SliceStore, slices, "endpointslices", "discovery.k8s.io", false, strip::endpoint_slice;
    Endpoints => EndpointsStore, endpoints, "endpoints", "", false, strip::endpoints;
    ServiceCIDR => ClusterStore<ServiceCIDR>, service_cidrs, "servicecidrs", "networking.k8s.io", true, strip::service_cidr;
    IPAddress => ClusterStore<IPAddress>, ip_addresses, "ipaddresses", "networking.k8s.io", true, strip::ip_address;
}

/// What the runtime does with a kind, whichever it is.
pub(crate) trait KindOps: Sync {
    /// Claims the kind's one watch in `cache`; false when one runs already (the
    /// Service watch, shared with the webhook, may).
    fn claim_watch(&self, cache: &Cache) -> bool;
    /// Runs the watch into `cache` until `stop`.
    fn spawn_watch(
        &self,
        cache: Arc<Cache>,
        client: kube::Client,
        config: watcher::Config,
        stop: CancellationToken,
    ) -> JoinHandle<()>;
    /// Hands the kind's changes to the controllers (from the objects already stored on).
    fn attach(&self, cache: &Cache, dispatch: &Arc<Dispatch>);
    /// Waits until the kind's store has completed a list.
    fn wait_synced<'a>(&self, cache: &'a Cache) -> BoxFuture<'a, ()>;
    /// Objects its store holds.
    fn len(&self, cache: &Cache) -> usize;
    fn plural(&self) -> &'static str;
    fn group(&self) -> &'static str;
}

struct Kind<K>(PhantomData<fn() -> K>);

impl<K> KindOps for Kind<K>
where
    K: WatchedKind,
    Dispatch: Consumer<<K::Store as Store>::Item>,
{
    fn claim_watch(&self, cache: &Cache) -> bool {
        K::store(cache).claim_watch()
    }

    fn spawn_watch(
        &self,
        cache: Arc<Cache>,
        client: kube::Client,
        config: watcher::Config,
        stop: CancellationToken,
    ) -> JoinHandle<()> {
        let watch = reflect(
            K::PLURAL,
            Api::<K::Api>::all(client.clone()),
            config,
            cache.clone(),
            K::store,
            K::strip,
            stop.clone(),
        );
        if K::OPTIONAL {
            tokio::spawn(watch_if_served::<K>(cache, client, stop, watch))
        } else {
            tokio::spawn(watch)
        }
    }

    fn attach(&self, cache: &Cache, dispatch: &Arc<Dispatch>) {
        K::store(cache).attach(dispatch.clone());
    }

    fn wait_synced<'a>(&self, cache: &'a Cache) -> BoxFuture<'a, ()> {
        Box::pin(K::store(cache).wait_synced())
    }

    fn len(&self, cache: &Cache) -> usize {
        K::store(cache).read().len()
    }

    fn plural(&self) -> &'static str {
        K::PLURAL
    }

    fn group(&self) -> &'static str {
        K::GROUP
    }
}

impl Resource {
    /// The runtime's handle on this kind.
    pub(crate) fn ops(self) -> &'static dyn KindOps {
        match self {
            Resource::Services => &Kind::<Service>(PhantomData),
            Resource::Pods => &Kind::<WatchedPod>(PhantomData),
            Resource::Nodes => &Kind::<Node>(PhantomData),
            Resource::EndpointSlices => &Kind::<EndpointSlice>(PhantomData),
            Resource::Endpoints => &Kind::<Endpoints>(PhantomData),
            Resource::ServiceCidrs => &Kind::<ServiceCIDR>(PhantomData),
            Resource::IpAddresses => &Kind::<IPAddress>(PhantomData),
        }
    }
}

/// Runs `watch` when the API server serves `K` (networking.k8s.io/v1 objects exist
/// from Kubernetes 1.33); otherwise the store is empty and counts as listed, so
/// nothing waits for it. An unreachable API server is asked again with backoff.
async fn watch_if_served<K: WatchedKind>(
    cache: Arc<Cache>,
    client: kube::Client,
    stop: CancellationToken,
    watch: impl std::future::Future<Output = ()>,
) {
    let resource = K::PLURAL;
    let mut backoff = Backoff::from_entropy();
    let mut outage = Outage::default();
    loop {
        let served = served::<K::Api>(&client).await;
        if served.is_ok() {
            outage.recovered(resource, "asking whether the API server serves it");
        }
        match served {
            Ok(true) => return watch.await,
            Ok(false) => {
                info!(resource, "not served by this API server; treated as none");
                K::store(&cache).mark_listed();
                return;
            }
            Err(e) => {
                let delay = backoff.next_delay();
                outage.failed(
                    resource,
                    "cannot tell whether the API server serves it",
                    &e,
                    delay,
                );
                if !wait(delay, &stop).await {
                    return;
                }
            }
        }
    }
}

/// Does the API server serve `K`? `Ok(false)` on 404.
async fn served<K>(client: &kube::Client) -> Result<bool, kube::Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    match Api::<K>::all(client.clone())
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_resource_is_described_by_its_own_kind() {
        // Each arm of `Resource::ops` names its own kind: the names follow the variants.
        let names: Vec<(&str, &str)> = Resource::ALL
            .iter()
            .map(|r| (r.plural(), r.group()))
            .collect();
        assert_eq!(
            names,
            [
                ("services", ""),
                ("pods", ""),
                ("nodes", ""),
                ("endpointslices", "discovery.k8s.io"),
                ("endpoints", ""),
                ("servicecidrs", "networking.k8s.io"),
                ("ipaddresses", "networking.k8s.io"),
            ]
        );
    }

    #[test]
    fn only_the_networking_kinds_are_asked_whether_they_are_served() {
        let optional = [
            <Service as WatchedKind>::OPTIONAL,
            <WatchedPod as WatchedKind>::OPTIONAL,
            <Node as WatchedKind>::OPTIONAL,
            <EndpointSlice as WatchedKind>::OPTIONAL,
            <Endpoints as WatchedKind>::OPTIONAL,
            <ServiceCIDR as WatchedKind>::OPTIONAL,
            <IPAddress as WatchedKind>::OPTIONAL,
        ];
        assert_eq!(optional, [false, false, false, false, false, true, true]);
    }
}
