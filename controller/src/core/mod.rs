//! Pure reconcilers and the small Kubernetes predicates they share.
//!
//! Nothing here performs I/O or reads a clock: callers pass snapshots and the
//! current trigger time, and get back plans describing the writes to make.

pub mod change;
pub mod endpoints;
pub mod endpointslice;
pub mod event;
#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
pub mod ip;
pub mod keys;
pub mod label_syntax;
pub mod migrated;
pub mod mirroring;
pub mod nodes;
pub mod pod;
pub mod selector;
pub mod service_values;
pub mod servicecidr;
pub mod slice_endpoints;
pub mod topology;
pub mod trigger_time;
