//! Taking claims through the API server.
//!
//! [`ClaimStore`] is the seam: the admission handler asks it to create one claim and
//! learns whether it won the value or who holds it. [`KubeClaims`] is the real thing;
//! tests and the load bench use stand-ins.

use std::collections::BTreeMap;
use std::future::Future;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use tracing::debug;

use crate::claim::AllocationClaim;

/// Outcome of one claim attempt.
#[derive(Debug, Clone)]
pub enum Claimed {
    /// The claim was created: the value is ours. The stored object (with its uid).
    Won(Box<AllocationClaim>),
    /// A claim of that name exists already; here it is.
    Taken(Box<AllocationClaim>),
}

/// Why a claim could not be attempted or decided.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The API server answered with an error other than AlreadyExists.
    #[error("creating AllocationClaim {name}: {source}")]
    Api {
        /// The claim's name.
        name: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The claim kept appearing and disappearing between create and get.
    #[error(
        "creating AllocationClaim {name}: it was deleted and re-created concurrently {attempts} times"
    )]
    Unsettled {
        /// The claim's name.
        name: String,
        /// Attempts made.
        attempts: usize,
    },
}

/// Creates claims; implementations must be create-if-absent (exactly one winner).
pub trait ClaimStore: Send + Sync + 'static {
    /// Try to create `claim`.
    fn claim(
        &self,
        claim: AllocationClaim,
    ) -> impl Future<Output = Result<Claimed, ClaimError>> + Send;

    /// Give back a claim this replica just won but will not use (it lost the race for
    /// another value of the same request). Best effort: a claim left behind is
    /// released by the repair loop after its grace period.
    fn release(&self, claim: &AllocationClaim) -> impl Future<Output = ()> + Send;

    /// The labels of namespace `name`, read from the API server when the namespace
    /// watch has not delivered it yet (ServiceCIDRs select namespaces by label). `None`
    /// when it cannot be read; stand-ins without an API server keep the default.
    fn namespace_labels(
        &self,
        name: &str,
    ) -> impl Future<Output = Option<BTreeMap<String, String>>> + Send {
        let _ = name;
        std::future::ready(None)
    }
}

/// Claims stored as `AllocationClaim` objects in the API server.
#[derive(Clone)]
pub struct KubeClaims {
    api: Api<AllocationClaim>,
    namespaces: Api<Namespace>,
}

impl std::fmt::Debug for KubeClaims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeClaims").finish_non_exhaustive()
    }
}

impl KubeClaims {
    /// Claims through `client`.
    pub fn new(client: Client) -> Self {
        Self {
            api: Api::all(client.clone()),
            namespaces: Api::all(client),
        }
    }
}

/// How often a create that lost to a claim which then vanished is retried.
const ATTEMPTS: usize = 3;

impl ClaimStore for KubeClaims {
    async fn claim(&self, claim: AllocationClaim) -> Result<Claimed, ClaimError> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        for _ in 0..ATTEMPTS {
            match self.api.create(&PostParams::default(), &claim).await {
                Ok(created) => return Ok(Claimed::Won(Box::new(created))),
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(source) => return Err(ClaimError::Api { name, source }),
            }
            match self.api.get_opt(&name).await {
                Ok(Some(existing)) => return Ok(Claimed::Taken(Box::new(existing))),
                // Released by the repair loop in between: try again.
                Ok(None) => {}
                Err(source) => return Err(ClaimError::Api { name, source }),
            }
        }
        Err(ClaimError::Unsettled {
            name,
            attempts: ATTEMPTS,
        })
    }

    async fn namespace_labels(&self, name: &str) -> Option<BTreeMap<String, String>> {
        match self.namespaces.get_opt(name).await {
            Ok(ns) => Some(ns?.metadata.labels.unwrap_or_default()),
            Err(e) => {
                debug!(namespace = name, error = %e, "could not read the namespace");
                None
            }
        }
    }

    async fn release(&self, claim: &AllocationClaim) {
        let name = claim.metadata.name.clone().unwrap_or_default();
        // The uid precondition: never delete a claim someone re-created meanwhile.
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: claim.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        if let Err(e) = self.api.delete(&name, &params).await {
            debug!(claim = %name, error = %e, "could not give back a claim; the repair loop will");
        }
    }
}
