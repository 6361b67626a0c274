//! Node lookup used by reconcilers that need a Pod's Node (zone, readiness).
//!
//! A trait keeps the core independent of where Nodes live: a map in `plan`
//! and tests, a reflector store in the runtime.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

/// Finds a Node by name.
pub trait NodeLookup {
    fn node(&self, name: &str) -> Option<&Node>;
}

impl NodeLookup for HashMap<String, Arc<Node>> {
    fn node(&self, name: &str) -> Option<&Node> {
        self.get(name).map(Arc::as_ref)
    }
}

impl NodeLookup for BTreeMap<String, Arc<Node>> {
    fn node(&self, name: &str) -> Option<&Node> {
        self.get(name).map(Arc::as_ref)
    }
}

impl NodeLookup for HashMap<String, Node> {
    fn node(&self, name: &str) -> Option<&Node> {
        self.get(name)
    }
}

impl NodeLookup for BTreeMap<String, Node> {
    fn node(&self, name: &str) -> Option<&Node> {
        self.get(name)
    }
}
