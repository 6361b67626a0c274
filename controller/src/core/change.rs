//! What happened to one watched object, as the event handlers (triggers) see it.
//!
//! The decision which keys a change queues is pure and lives beside each reconciler
//! (`endpointslice::triggers`, `endpoints::triggers`, `mirroring::triggers`); the shell
//! only produces these values from its watches.

use std::sync::Arc;

/// A change to one object, with the previous version on updates (the triggers
/// decide on old versus new).
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
