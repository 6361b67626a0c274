//! Taking claims through the API server.
//!
//! [`ClaimStore`] is the seam between the admission handler and the API server: it
//! creates one claim and learns whether it won the value or who holds it; it also reads
//! a namespace the watch has not delivered yet and records the Event of values given
//! back. [`KubeClaims`] is the real thing; tests and the load bench use stand-ins.

use std::collections::BTreeMap;
use std::future::Future;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use svcplane_allocator::Claim;
use tracing::debug;

use crate::claim::AllocationClaim;
use crate::state::ServiceRef;

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

    /// Tell the owner of Service `service` (created again under the name of a deleted
    /// one) that `values`, retained since the delete, were given back: a Normal Event.
    /// Must not delay the answer; stand-ins without an API server record nothing.
    fn given_back(&self, service: &ServiceRef, values: &[Claim]) {
        let _ = (service, values);
    }

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
    events: Client,
    /// This replica's name, as the Events it records report it.
    identity: String,
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
            namespaces: Api::all(client.clone()),
            events: client,
            identity: String::new(),
        }
    }

    /// The same store, recording Events as replica `identity`.
    pub fn with_identity(mut self, identity: &str) -> Self {
        self.identity = identity.to_owned();
        self
    }
}

/// The Event telling that `values` were given back to `service`.
fn given_back_event(service: &ServiceRef, values: &[Claim], identity: &str) -> Event {
    let listed: Vec<String> = values
        .iter()
        .map(|v| match v {
            Claim::Ip(ip) => format!("ClusterIP {ip}"),
            Claim::NodePort(p) => format!("nodePort {p}"),
        })
        .collect();
    let note = format!(
        "{} retained since {}/{} was deleted (--retain-released-values) given back to the Service created again under its name",
        listed.join(", "),
        service.namespace,
        service.name
    );
    let instance = if identity.is_empty() {
        "svcplane-webhook"
    } else {
        identity
    };
    crate::service_event::normal_service_event(
        &service.namespace,
        &service.name,
        crate::service_event::Happened {
            reason: "RetainedValuesGivenBack",
            action: "Allocate",
            note: &note,
        },
        crate::service_event::Reporter {
            controller: "svcplane.io/webhook",
            instance,
        },
        jiff::Timestamp::now(),
    )
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

    fn given_back(&self, service: &ServiceRef, values: &[Claim]) {
        let event = given_back_event(service, values, &self.identity);
        let api: Api<Event> = Api::namespaced(self.events.clone(), &service.namespace);
        // Written in the background: the answer to the API server never waits for it.
        tokio::spawn(async move {
            if let Err(e) = api.create(&PostParams::default(), &event).await {
                debug!(error = %e, "could not record the RetainedValuesGivenBack event");
            }
        });
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
