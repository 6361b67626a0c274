//! Watches that keep the [`Cache`] current and tell its consumers what changed.
//!
//! Each watched resource runs one watch loop ([`driver`]), once per process however
//! many consumers read it: list, then watch from the list's resourceVersion with
//! bookmarks. Every event is stripped, written to our own store ([`reflector`]) and
//! handed on as a [`Change`] carrying both versions.
//!
//! Recovery (ES-1.8), as client-go's reflector does it: a connection error, a
//! timeout, 429 or a 5xx *resumes* the watch from the last resourceVersion seen (an
//! object's or a bookmark's), so an API-server restart costs the events missed, not
//! a list of every object; a clean end of a watch (the server's timeout) resumes at
//! once. Only 410 Gone (or an `Expired` / "too old resource version" error) lists
//! again, whether the watch or the resume attempt gets it. Lists are streaming lists
//! (`sendInitialEvents`) where the API server serves them and paginated lists
//! otherwise. Waits between attempts use the shared jittered backoff, and an outage
//! logs one warning per resource ([`svcplane_webhook::retry`]).
//!
//! Why the sync signal stays right:
//! - a resumed watch receives every event after its resourceVersion, so the store
//!   never loses a change and stays *listed* (synced): the controllers keep working
//!   from it. While the connection is down it may miss changes, so it is *not in
//!   sync* until the resumed watch delivers its first event or bookmark (which proves
//!   the server still had the history; an expired version is answered with an error
//!   first);
//! - a re-list re-establishes the full state: each listed object is written, and
//!   once the list is complete, every stored object it did not contain becomes a
//!   `Deleted` change, so deletions that happened while the watch was down are not
//!   lost; unchanged objects (same resourceVersion) produce nothing. The store is in
//!   sync again when the list is complete.

mod driver;
mod recovery;
mod reflector;
mod source;

#[cfg(test)]
mod tests;

use std::fmt::Debug;
use std::sync::Arc;

use kube::runtime::watcher::{self, InitialListStrategy};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use svcplane_webhook::retry::Backoff;
use tokio_util::sync::CancellationToken;

use super::cache::{Cache, Shared, Store};

pub(crate) use crate::core::change::Change;

/// Watches `api` into `select(cache)` until `cancel`, handing every change to the
/// store's consumers after the store holds it. `config` gives the selectors, the
/// watch timeout, the list page size and whether to try streaming lists first.
pub(crate) async fn reflect<K, S>(
    resource: &'static str,
    api: Api<K>,
    config: watcher::Config,
    cache: Arc<Cache>,
    select: fn(&Cache) -> &Shared<S>,
    strip: fn(K) -> S::Item,
    cancel: CancellationToken,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
    S: Store,
{
    let shared = select(&cache);
    let streaming = config.initial_list_strategy == InitialListStrategy::StreamingList;
    let source = source::KubeSource { api, config };
    driver::Driver::new(
        resource,
        &source,
        shared,
        strip,
        streaming,
        Backoff::from_entropy(),
    )
    .run(&cancel)
    .await;
}

/// The webhook's allocation state is one more consumer of the Service watch (`svcplane
/// run` watches Services once for the controllers and the webhook).
impl super::cache::Consumer<k8s_openapi::api::core::v1::Service>
    for svcplane_webhook::shell::ServiceSink
{
    fn changed(&self, change: &Change<k8s_openapi::api::core::v1::Service>) {
        match change {
            Change::Added(s) | Change::Updated { new: s, .. } => self.apply(s),
            Change::Deleted(s) => self.delete(s),
        }
    }

    fn sync_changed(&self, in_sync: bool) {
        svcplane_webhook::shell::ServiceSink::sync_changed(self, in_sync);
    }
}

/// The webhook's ranges follow the ServiceCIDR watch the same way.
impl super::cache::Consumer<k8s_openapi::api::networking::v1::ServiceCIDR>
    for svcplane_webhook::shell::ranges::ServiceCidrSink
{
    fn changed(&self, change: &Change<k8s_openapi::api::networking::v1::ServiceCIDR>) {
        match change {
            Change::Added(s) | Change::Updated { new: s, .. } => self.apply(s),
            Change::Deleted(s) => self.delete(s),
        }
    }

    fn sync_changed(&self, in_sync: bool) {
        svcplane_webhook::shell::ranges::ServiceCidrSink::sync_changed(self, in_sync);
    }
}
