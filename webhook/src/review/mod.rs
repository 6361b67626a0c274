//! The pure admission-review core: decode an AdmissionReview, decide, answer.
//!
//! Everything here is a function of the request bytes and the [`AllocationState`]; no
//! I/O, no clocks, no async. The shell ([`crate::shell`]) owns locking, claims and
//! logging, so every decision below can be tested with plain values:
//!
//! - [`decode`] turns the body into a [`ServiceRequest`] (or a pass-through for other
//!   resources, or a [`BadRequest`] for malformed reviews). It keeps the raw object,
//!   because k8s-openapi drops fields it does not know and a patch must never lose them.
//! - [`mutate`] assigns ClusterIPs and NodePorts the way kube-apiserver's own allocator
//!   would, reserves them in the state and returns a JSONPatch that only adds the values
//!   it picked ([`patch`]), plus warnings for hand-picked values in the dynamic band
//!   ([`warnings`]).
//! - [`validate`] re-checks the final object (after the API server allocated) against
//!   upstream's rules and the values other holders own, leaving no trace in the state.
//! - [`review_response`] renders the AdmissionReview answer, with denials shaped like
//!   kube-apiserver's own `Status` so clients see native-looking errors.
//!
//! [`AllocationState`]: crate::state::AllocationState

mod decode;
mod mutate;
mod patch;
pub mod probe;
pub mod requested;
mod response;
pub mod retained;
mod update_rules;
mod validate;
mod warnings;

#[cfg(test)]
mod tests;

pub use decode::{BadRequest, Decoded, Operation, ServiceRequest, decode};
pub use mutate::mutate;
pub use probe::{PROBE_ANSWERED_BY, PROBE_LABEL, probe_ops};
pub use response::review_response;
pub use update_rules::validate_update;
pub use validate::{service_rules, validate};
pub use warnings::{cluster_ip_band_warning, node_port_band_warning};

use svcplane_allocator::{Claim, ServiceError};

/// What the mutating endpoint decided for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MutateDecision {
    /// Admit, applying `patch` to the object.
    Allow {
        /// JSON Patch ops for the values this request was assigned (empty: unchanged).
        patch: json_patch::Patch,
        /// Values reserved for the request under its `Pending` holder; the shell claims
        /// them (or drops the reservation for a dry run or a failed claim).
        reserved: Vec<Claim>,
        /// Warnings for the client (HTTP `Warning` headers).
        warnings: Vec<String>,
    },
    /// Refuse with upstream's status (422 Invalid or 500).
    Deny(ServiceError),
}

/// What the validating endpoint decided for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValidateDecision {
    /// Admit.
    Allow {
        /// Warnings for the client.
        warnings: Vec<String>,
    },
    /// Refuse with upstream's status.
    Deny(ServiceError),
}

/// The answer the response envelope is built from (mutating or validating).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Admit; a non-empty `patch` is sent as a base64 JSONPatch.
    Allow {
        /// The patch (always empty for validation).
        patch: json_patch::Patch,
        /// Warnings for the client.
        warnings: Vec<String>,
    },
    /// Refuse.
    Deny(ServiceError),
}

impl From<MutateDecision> for Verdict {
    fn from(d: MutateDecision) -> Self {
        match d {
            MutateDecision::Allow {
                patch, warnings, ..
            } => Self::Allow { patch, warnings },
            MutateDecision::Deny(e) => Self::Deny(e),
        }
    }
}

impl From<ValidateDecision> for Verdict {
    fn from(d: ValidateDecision) -> Self {
        match d {
            ValidateDecision::Allow { warnings } => Self::Allow {
                patch: json_patch::Patch(Vec::new()),
                warnings,
            },
            ValidateDecision::Deny(e) => Self::Deny(e),
        }
    }
}
