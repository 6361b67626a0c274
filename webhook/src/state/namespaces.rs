//! What each namespace says about allocation: the state keeps a namespace's retention
//! annotation (and its labels, which range selectors read) beside the holders.
//!
//! A namespace holds no value; it only changes how values of its Services are handled,
//! so it is recorded here rather than as a holder.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use svcplane_allocator::range_scope::NamespaceView;

use super::AllocationState;

/// A namespace as the state needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceSettings {
    /// Its `svcplane.io/retain-released-values` annotation (`None`: unset).
    pub retain: Option<Duration>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

/// Every namespace seen, by name.
pub(super) type Namespaces = HashMap<String, NamespaceSettings>;

impl AllocationState {
    /// Record a namespace (a watch event or a list item).
    pub fn set_namespace(&mut self, name: &str, settings: NamespaceSettings) {
        self.namespaces.insert(name.to_owned(), settings);
    }

    /// Forget a namespace (deleted, or absent from a re-list).
    pub fn remove_namespace(&mut self, name: &str) {
        self.namespaces.remove(name);
    }

    /// Names of every namespace the state knows.
    pub fn namespace_names(&self) -> impl Iterator<Item = &String> {
        self.namespaces.keys()
    }

    /// Namespace `name` as range scopes need it (no labels when not seen).
    pub fn namespace_view(&self, name: &str) -> NamespaceView {
        NamespaceView {
            name: name.to_owned(),
            labels: self
                .namespace(name)
                .map(|n| n.labels.clone())
                .unwrap_or_default(),
        }
    }

    /// What namespace `name` says (`None` when not seen).
    pub fn namespace(&self, name: &str) -> Option<&NamespaceSettings> {
        self.namespaces.get(name)
    }

    /// How long the values of a Service in `namespace` are retained after its delete:
    /// the Service's own annotation `service`, else its namespace's, else the flag.
    pub(super) fn retention_of(&self, namespace: &str, service: Option<Duration>) -> Duration {
        service
            .or_else(|| self.namespace(namespace).and_then(|n| n.retain))
            .unwrap_or(self.lifecycle.default_retain())
    }
}
