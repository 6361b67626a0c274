//! Store writes for one watch: every event becomes a store update and a [`Change`]
//! carrying both versions, and a re-list is diffed against the store.
//!
//! Why not kube-runtime's reflector store: the controllers need the *previous*
//! version of an updated object (ES-2.1 decides on old versus new), label indexes,
//! and objects stripped before they are stored.

use std::collections::HashSet;
use std::sync::Arc;

use super::super::cache::{Keyed, Shared, Store};
use super::Change;

/// Turns events into store writes and [`Change`]s.
pub(super) struct Reflector<'a, S: Store> {
    shared: &'a Shared<S>,
    /// During a re-list: the (namespace, name) of every object listed so far.
    relist: Option<HashSet<(String, String)>>,
}

fn same_version<T: Keyed>(a: &T, b: &T) -> bool {
    a.resource_version().is_some() && a.resource_version() == b.resource_version()
}

impl<'a, S: Store> Reflector<'a, S> {
    pub(super) fn new(shared: &'a Shared<S>) -> Self {
        Self {
            shared,
            relist: None,
        }
    }

    pub(super) fn apply(&self, obj: Arc<S::Item>, out: &mut Vec<Change<S::Item>>) {
        let old = self.shared.write().upsert(obj.clone());
        match old {
            None => out.push(Change::Added(obj)),
            Some(old) if same_version(&*old, &*obj) => {}
            Some(old) => out.push(Change::Updated { old, new: obj }),
        }
    }

    pub(super) fn delete(&self, obj: Arc<S::Item>, out: &mut Vec<Change<S::Item>>) {
        let old = self.shared.write().remove(obj.namespace(), obj.name());
        // The last state we knew, or the tombstone the watch sent.
        out.push(Change::Deleted(old.unwrap_or(obj)));
    }

    /// Starts a re-list (forgetting a partial one that failed: its objects are
    /// stored, and the diff at the end of this one removes those it does not list).
    pub(super) fn start_relist(&mut self) {
        self.relist = Some(HashSet::new());
    }

    /// One object of a re-list: stored at once (a list of 100 000 objects is never
    /// held twice), and remembered so the end of the list knows what is gone.
    pub(super) fn listed(&mut self, obj: Arc<S::Item>, out: &mut Vec<Change<S::Item>>) {
        if let Some(keys) = self.relist.as_mut() {
            keys.insert((obj.namespace().to_owned(), obj.name().to_owned()));
        }
        self.apply(obj, out);
    }

    /// Ends a re-list: deletes for the stored objects it did not list.
    pub(super) fn finish_relist(&mut self, out: &mut Vec<Change<S::Item>>) {
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
