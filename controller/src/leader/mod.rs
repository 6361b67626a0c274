//! Leader election on a `coordination.k8s.io/v1` Lease.
//!
//! Why: both replicas watch and compute, but only one may write EndpointSlices and
//! Endpoints at a time. This module decides which one, and tells the
//! rest of the process through a `watch` channel of [`Leadership`].
//!
//! Layout, following the crate's pure-core/thin-shell split: `decide` holds the rules
//! (client-go semantics, no I/O, no clock reads), `elector` the loop that reads and writes
//! the Lease around them, `gone_holder` when a holder Pod that no longer exists frees the
//! Lease early, `identity` the `holderIdentity` this replica uses.
//!
//! Contract with the caller: act as leader only while the latest [`Leadership`] says
//! `is_leader` and the channel is open; when [`LeaderElector::run`] returns
//! [`LeaderError::Lost`], exit the process (as kube-controller-manager does), because a
//! replica that was cut off cannot tell what another leader did meanwhile. Metrics (`leader_election_master_status`) are wired by the
//! caller from the same channel, so this module needs no metrics crate.

mod decide;
mod elector;
mod gone_holder;
mod identity;

pub use decide::{
    Action, Decision, LeaseRecord, Observed, Params, ParamsError, RELEASED_LEASE_DURATION, decide,
    next_record,
};
pub use elector::{Config, LeaderElector, LeaderError, Leadership, LostCause};
pub use identity::{identity_from_env, pods_hold_the_lease};
