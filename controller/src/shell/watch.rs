//! Watches that keep the [`Cache`] current and tell the controllers what changed.
//!
//! Each watched resource runs kube-runtime's `watcher` (list, then watch from the
//! list's resourceVersion, re-list on 410 Gone, backoff on errors). kube-runtime's
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

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::cache::{Cache, Keyed, Shared, Store};

/// What happened to one cached object.
#[derive(Debug)]
pub enum Change<T> {
    Added(Arc<T>),
    Updated { old: Arc<T>, new: Arc<T> },
    Deleted(Arc<T>),
}

impl<T> Change<T> {
    /// The object as it is now (or was, for a delete).
    pub fn latest(&self) -> &Arc<T> {
        match self {
            Change::Added(n) | Change::Updated { new: n, .. } | Change::Deleted(n) => n,
        }
    }
}

/// Turns an event stream into store writes and [`Change`]s.
struct Reflector<'a, S: Store> {
    shared: &'a Shared<S>,
    relist: Option<Vec<Arc<S::Item>>>,
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

    /// Applies a completed re-list: every listed object, then deletes for those no
    /// longer there.
    fn finish_relist(&mut self, out: &mut Vec<Change<S::Item>>) {
        let listed = self.relist.take().unwrap_or_default();
        let keep: HashSet<(&str, &str)> =
            listed.iter().map(|o| (o.namespace(), o.name())).collect();
        let gone: Vec<Arc<S::Item>> = self
            .shared
            .read()
            .all()
            .into_iter()
            .filter(|o| !keep.contains(&(o.namespace(), o.name())))
            .collect();
        for obj in &listed {
            self.apply(obj.clone(), out);
        }
        for obj in gone {
            self.delete(obj, out);
        }
    }
}

/// Watches `api` into `select(cache)` until `cancel`, calling `on_change` for every
/// change after the store holds it.
#[allow(clippy::too_many_arguments)]
pub async fn reflect<K, S>(
    resource: &'static str,
    api: Api<K>,
    config: watcher::Config,
    cache: Arc<Cache>,
    select: fn(&Cache) -> &Shared<S>,
    strip: fn(K) -> S::Item,
    on_change: impl Fn(Change<S::Item>) + Send,
    cancel: CancellationToken,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
    S: Store,
{
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut reflector = Reflector {
        shared: select(&cache),
        relist: None,
    };
    let mut changes = Vec::new();
    loop {
        let next = tokio::select! {
            () = cancel.cancelled() => return,
            next = stream.next() => next,
        };
        let Some(event) = next else {
            warn!(resource, "watch stream ended");
            return;
        };
        match event {
            Ok(Event::Apply(obj)) => reflector.apply(Arc::new(strip(obj)), &mut changes),
            Ok(Event::Delete(obj)) => reflector.delete(Arc::new(strip(obj)), &mut changes),
            Ok(Event::Init) => {
                reflector.relist = Some(Vec::new());
            }
            Ok(Event::InitApply(obj)) => {
                if let Some(buf) = reflector.relist.as_mut() {
                    buf.push(Arc::new(strip(obj)));
                }
            }
            Ok(Event::InitDone) => {
                reflector.finish_relist(&mut changes);
                let first = !reflector.shared.is_synced();
                reflector.shared.set_synced();
                if first {
                    info!(
                        resource,
                        objects = reflector.shared.read().len(),
                        "cache synced"
                    );
                } else {
                    debug!(resource, changes = changes.len(), "re-listed");
                }
            }
            Err(e) => {
                warn!(resource, error = %e, "watch failed; retrying with backoff");
            }
        }
        for change in changes.drain(..) {
            on_change(change);
        }
    }
}
