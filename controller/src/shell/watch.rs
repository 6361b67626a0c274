//! Watches that keep the [`Cache`] current and tell its consumers what changed.
//!
//! Each watched resource runs kube-runtime's `watcher` (list, then watch from the
//! list's resourceVersion), once per process however many consumers read it, and
//! lists again after any failure. kube-runtime's
//! reflector store is not used: the controllers need the *previous* version of an
//! updated object (ES-2.1 decides on old versus new), label indexes the
//! reflector store cannot keep, and objects stripped before they are stored. So every
//! event is stripped, written to our own store, and handed on as a [`Change`] carrying
//! both versions. A re-list is buffered and, once complete, diffed against the store:
//! objects that vanished while the watch was down become `Deleted` changes, unchanged
//! ones (same resourceVersion) produce nothing.

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::cache::{Cache, Keyed, Shared, Store};

pub(crate) use crate::core::change::Change;

/// Turns an event stream into store writes and [`Change`]s.
struct Reflector<'a, S: Store> {
    shared: &'a Shared<S>,
    /// During a re-list: the (namespace, name) of every object listed so far.
    relist: Option<HashSet<(String, String)>>,
}

fn same_version<T: Keyed>(a: &T, b: &T) -> bool {
    a.resource_version().is_some() && a.resource_version() == b.resource_version()
}

impl<S: Store> Reflector<'_, S> {
    fn apply(&self, obj: Arc<S::Item>, out: &mut Vec<Change<S::Item>>) {
        let old = self.shared.write().upsert(obj.clone());
        match old {
            None => out.push(Change::Added(obj)),
            Some(old) if same_version(&*old, &*obj) => {}
            Some(old) => out.push(Change::Updated { old, new: obj }),
        }
    }

    fn delete(&self, obj: Arc<S::Item>, out: &mut Vec<Change<S::Item>>) {
        let old = self.shared.write().remove(obj.namespace(), obj.name());
        // The last state we knew, or the tombstone the watch sent.
        out.push(Change::Deleted(old.unwrap_or(obj)));
    }

    /// One object of a re-list: stored at once (a list of 100 000 objects is never
    /// held twice), and remembered so the end of the list knows what is gone.
    fn listed(&mut self, obj: Arc<S::Item>, out: &mut Vec<Change<S::Item>>) {
        if let Some(keys) = self.relist.as_mut() {
            keys.insert((obj.namespace().to_owned(), obj.name().to_owned()));
        }
        self.apply(obj, out);
    }

    /// Ends a re-list: deletes for the stored objects it did not list.
    fn finish_relist(&mut self, out: &mut Vec<Change<S::Item>>) {
        let listed = self.relist.take().unwrap_or_default();
        let gone: Vec<(String, String)> = self
            .shared
            .read()
            .keys()
            .into_iter()
            .filter(|key| !listed.contains(key))
            .collect();
        for (namespace, name) in gone {
            let old = self.shared.write().remove(&namespace, &name);
            out.extend(old.map(Change::Deleted));
        }
    }
}

/// Delay before a failed watch lists again: doubles from 500 ms to 30 s, and starts
/// over once a list completes.
#[derive(Debug, Clone, Copy)]
struct RelistBackoff {
    next: Duration,
}

impl RelistBackoff {
    const FIRST: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(30);

    fn new() -> Self {
        Self { next: Self::FIRST }
    }

    fn take(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        d
    }
}

/// Watches `api` into `select(cache)` until `cancel`, handing every change to the
/// store's consumers after the store holds it.
///
/// Any failure drops the stream and lists again after a backoff (as client-go's
/// reflector does): kube's watcher would resume some failures silently from its last
/// resourceVersion, and a resumed watch never says when it is healthy again, so the
/// store's "in sync" signal could not be raised again without a list. The list is
/// diffed against the store, so nothing is lost and unchanged objects cost nothing.
pub(crate) async fn reflect<K, S>(
    resource: &'static str,
    api: Api<K>,
    config: watcher::Config,
    cache: Arc<Cache>,
    select: fn(&Cache) -> &Shared<S>,
    strip: fn(K) -> S::Item,
    cancel: CancellationToken,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
    S: Store,
{
    let shared = select(&cache);
    let mut backoff = RelistBackoff::new();
    let mut changes = Vec::new();
    loop {
        let mut stream = watcher::watcher(api.clone(), config.clone()).boxed();
        let mut reflector = Reflector {
            shared,
            relist: None,
        };
        loop {
            let next = tokio::select! {
                () = cancel.cancelled() => return,
                next = stream.next() => next,
            };
            match next {
                Some(Ok(Event::Apply(obj))) => reflector.apply(Arc::new(strip(obj)), &mut changes),
                Some(Ok(Event::Delete(obj))) => {
                    reflector.delete(Arc::new(strip(obj)), &mut changes)
                }
                Some(Ok(Event::Init)) => {
                    shared.mark_out_of_sync();
                    reflector.relist = Some(HashSet::new());
                }
                Some(Ok(Event::InitApply(obj))) => {
                    reflector.listed(Arc::new(strip(obj)), &mut changes);
                }
                Some(Ok(Event::InitDone)) => {
                    reflector.finish_relist(&mut changes);
                    let first = !shared.is_synced();
                    if first {
                        info!(resource, objects = shared.read().len(), "cache synced");
                    } else {
                        debug!(resource, changes = changes.len(), "re-listed");
                    }
                    for change in changes.drain(..) {
                        shared.dispatch(&change);
                    }
                    shared.mark_listed();
                    backoff = RelistBackoff::new();
                    continue;
                }
                Some(Err(e)) => {
                    shared.mark_out_of_sync();
                    warn!(resource, error = %e, "watch failed; listing again after a backoff");
                    break;
                }
                None => {
                    shared.mark_out_of_sync();
                    warn!(resource, "watch stream ended; listing again");
                    break;
                }
            }
            for change in changes.drain(..) {
                shared.dispatch(&change);
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(backoff.take()) => {}
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relist_backoff_doubles_to_a_cap() {
        let mut b = RelistBackoff::new();
        let seq: Vec<u128> = (0..8).map(|_| b.take().as_millis()).collect();
        assert_eq!(seq, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
    }
}
