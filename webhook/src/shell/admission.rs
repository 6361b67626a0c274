//! The admission handler: review, reserve, claim, answer.
//!
//! Mutation reserves values in the local state (so concurrent requests in this replica
//! never pick the same one), then claims each through the API server (so requests in
//! other replicas never do either). A lost claim race means another replica handed that
//! value out: the state learns the winner and the review runs again, picking another
//! value — or, for a value the user chose, answering "already allocated" as upstream
//! does. Dry-run requests get real free values but claim nothing. Validation only reads
//! the state: no API call is ever made on the validating path.

use std::sync::Arc;

use bytes::Bytes;
use futures::future::join_all;
use svcplane_allocator::{Claim, ServiceError};
use tracing::{info, instrument, warn};

use super::claimer::{ClaimStore, Claimed};
use super::watch::{Readiness, SharedState, lock};
use crate::claim::{AllocationClaim, claim_name};
use crate::handler::{AdmissionHandler, Answer, Endpoint};
use crate::metrics::WebhookMetrics;
use crate::review::{self, Decoded, MutateDecision, ServiceRequest, ValidateDecision};
use crate::state::namespaces::NamespaceSettings;
use crate::state::{AllocationState, HolderKey, ServiceRef};

/// How many times a mutation is re-run after losing claim races before giving up with
/// a 500 (each loss teaches the state one more taken value, so this is only reached
/// when other replicas hand out values faster than this one learns about them).
const MAX_ATTEMPTS: usize = 8;

/// svcplane's Service admission webhook.
#[derive(Debug)]
pub struct Webhook<C> {
    state: SharedState,
    claims: C,
    readiness: Arc<Readiness>,
    metrics: WebhookMetrics,
    /// This replica's name (`POD_NAME`), written into answered install probes.
    identity: String,
}

impl<C: ClaimStore> Webhook<C> {
    /// A webhook over `state` (fed by the watches), claiming through `claims`.
    pub fn new(
        state: SharedState,
        claims: C,
        readiness: Arc<Readiness>,
        metrics: WebhookMetrics,
    ) -> Self {
        Self {
            state,
            claims,
            readiness,
            metrics,
            identity: "svcplane".to_owned(),
        }
    }

    /// Name this replica in the answers to install probes ([`review::probe`]).
    pub fn with_identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }

    /// The shared allocation state.
    pub fn state(&self) -> &SharedState {
        &self.state
    }

    /// Its metrics (the server reports its certificate through them).
    pub fn metrics(&self) -> &WebhookMetrics {
        &self.metrics
    }

    /// Make sure the state knows namespace `name`'s labels when a ServiceCIDR selects
    /// namespaces: a Service created right after its namespace may be reviewed before
    /// the namespace watch delivers it, and would get an address from the wrong range.
    async fn learn_namespace(&self, name: &str) {
        let unknown = {
            let st = lock(&self.state);
            st.namespace(name).is_none() && st.allocators().selects_namespaces()
        };
        if !unknown {
            return;
        }
        if let Some(labels) = self.claims.namespace_labels(name).await {
            let mut st = lock(&self.state);
            // The watch may have delivered it meanwhile; it is as new as this read.
            if st.namespace(name).is_none() {
                st.set_namespace(
                    name,
                    NamespaceSettings {
                        labels,
                        ..NamespaceSettings::default()
                    },
                );
            }
        }
    }

    /// Why the webhook cannot answer yet (`None`: it can), for `/readyz`.
    pub fn not_ready_reason(&self) -> Option<String> {
        self.readiness.not_ready_reason()
    }

    #[instrument(skip_all, fields(uid = %req.uid, namespace = %req.namespace, name = %req.name, dry_run = req.dry_run))]
    async fn mutate(&self, req: &ServiceRequest) -> Answer {
        // Claims of an UPDATE name the Service object; a CREATE has no uid yet.
        let me = req
            .service_ref()
            .with_uid(req.service.metadata.uid.as_deref().unwrap_or(""));
        let pending = HolderKey::Pending {
            request_uid: req.uid.clone(),
        };
        self.learn_namespace(&req.namespace).await;
        // Values retained for this name, which a create may be given back.
        let retained: Vec<Claim> = if req.old_service.is_none() && !req.dry_run {
            lock(&self.state)
                .retained_for(&me)
                .iter()
                .map(|r| r.value)
                .collect()
        } else {
            Vec::new()
        };
        for _ in 0..MAX_ATTEMPTS {
            let decision = review::mutate(req, &mut lock(&self.state));
            let MutateDecision::Allow {
                patch,
                reserved,
                warnings,
            } = decision
            else {
                {
                    let mut st = lock(&self.state);
                    st.remove(&pending);
                    if let MutateDecision::Deny(e) = &decision
                        && !req.dry_run
                    {
                        let before = svcplane_allocator::SvcView::from_service(&req.service);
                        self.metrics.capacity.refused(&st, &before, &e.to_string());
                    }
                }
                return answer(review::review_response(
                    &req.uid,
                    &decision_of_mutate(decision),
                ));
            };
            if req.dry_run || reserved.is_empty() {
                lock(&self.state).remove(&pending);
                let mut patch = patch;
                patch
                    .0
                    .extend(review::probe_ops(&req.object, req.dry_run, &self.identity));
                return answer(review::review_response(
                    &req.uid,
                    &review::Verdict::Allow { patch, warnings },
                ));
            }
            match self.claim_all(&me, &reserved).await {
                Ok(true) => {
                    {
                        let mut st = lock(&self.state);
                        st.remove(&pending);
                        let before = svcplane_allocator::SvcView::from_service(&req.service);
                        self.metrics.capacity.allocated(&st, &before, &reserved);
                        self.metrics.capacity.refresh(&st);
                    }
                    info!(values = ?reserved, "assigned");
                    let given: Vec<Claim> = reserved
                        .iter()
                        .filter(|v| retained.contains(v))
                        .copied()
                        .collect();
                    if !given.is_empty() {
                        info!(values = ?given, "gave back values retained for the Service's name");
                        self.metrics.values_given_back.inc_by(given.len() as u64);
                        self.claims.given_back(&me, &given);
                    }
                    return answer(review::review_response(
                        &req.uid,
                        &review::Verdict::Allow { patch, warnings },
                    ));
                }
                Ok(false) => {}
                Err(e) => {
                    lock(&self.state).remove(&pending);
                    return answer(review::review_response(&req.uid, &review::Verdict::Deny(e)));
                }
            }
        }
        lock(&self.state).remove(&pending);
        let e = ServiceError::Internal(format!(
            "failed to reserve values for the service: lost {MAX_ATTEMPTS} races with other svcplane replicas"
        ));
        answer(review::review_response(&req.uid, &review::Verdict::Deny(e)))
    }

    /// Claim every value; `Ok(false)` if another holder won at least one (the state then
    /// knows it). When a race is lost the claims won in this attempt are given back at
    /// once, so the retry's different picks leave no unused claim behind.
    ///
    /// A claim found in the way is replaced (deleted with its uid as precondition, then
    /// created again for this request) when it is dead: left by an earlier Service of
    /// this very name, or released because the Service it was taken for was seen
    /// deleted or seen without the value — upstream frees a value the moment its Service
    /// lets go of it, and so does svcplane.
    async fn claim_all(&self, me: &ServiceRef, values: &[Claim]) -> Result<bool, ServiceError> {
        let results = join_all(
            values
                .iter()
                .map(|v| self.claims.claim(AllocationClaim::for_value(*v, me))),
        )
        .await;
        let mut all_won = true;
        let mut won_now: Vec<AllocationClaim> = Vec::new();
        let mut dead: Vec<(AllocationClaim, bool)> = Vec::new();
        let mut failure = None;
        {
            let mut st = lock(&self.state);
            for (v, r) in values.iter().zip(results) {
                match r {
                    Ok(Claimed::Won(created)) => {
                        self.metrics.claims_created.inc();
                        record(&mut st, &created);
                        won_now.push(*created);
                    }
                    Ok(Claimed::Taken(existing)) => {
                        let owner = existing.spec.owner();
                        let name = claim_name(*v);
                        let uid = existing.metadata.uid.clone().unwrap_or_default();
                        let released = st.released_claim(&name, &uid).is_some();
                        if owner.matches(me) {
                            if owner.request_uid != me.request_uid {
                                // Left by an earlier Service of this name (deleted and
                                // re-created before the repair loop ran): its age would
                                // let the repair loop release it under the new Service.
                                dead.push((*existing.clone(), false));
                            }
                        } else if released {
                            dead.push((*existing.clone(), true));
                        } else {
                            warn!(value = ?v, holder_namespace = %owner.namespace, holder_name = %owner.name, "lost a claim race; retrying");
                            self.metrics.claim_races_lost.inc();
                            all_won = false;
                        }
                        // Either our own claim from an earlier attempt or Service (still
                        // ours), a dead one, or the winner's: the state learns which.
                        record(&mut st, &existing);
                    }
                    Err(e) => {
                        warn!(error = %e, "claim failed");
                        failure.get_or_insert(ServiceError::Internal(format!(
                            "failed to reserve {}: {e}",
                            describe(*v)
                        )));
                    }
                }
            }
        }
        if all_won && failure.is_none() {
            for (old, taken_over) in dead {
                match self.replace(old, me).await {
                    Ok(Replaced::Won(created)) => {
                        if taken_over {
                            self.metrics.claims_taken_over.inc();
                        }
                        won_now.push(*created);
                    }
                    Ok(Replaced::Ours) => {}
                    Ok(Replaced::Lost) => {
                        self.metrics.claim_races_lost.inc();
                        all_won = false;
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        if all_won && failure.is_none() {
            return Ok(true);
        }
        for claim in &won_now {
            self.claims.release(claim).await;
            if let Some(name) = claim.metadata.name.as_deref() {
                lock(&self.state).remove_claim(name);
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(false),
        }
    }

    /// Replace a dead claim (a stale one of ours, or one whose Service is gone) with a
    /// fresh one for this request (new request uid, new creation time).
    async fn replace(
        &self,
        old: AllocationClaim,
        me: &ServiceRef,
    ) -> Result<Replaced, ServiceError> {
        let Some((HolderKey::Claim { name }, _, value)) = old.holding() else {
            return Ok(Replaced::Lost);
        };
        self.claims.release(&old).await;
        lock(&self.state).remove_claim(&name);
        match self
            .claims
            .claim(AllocationClaim::for_value(value, me))
            .await
        {
            Ok(Claimed::Won(created)) => {
                self.metrics.claims_created.inc();
                info!(claim = %name, "took over the claim of a Service that let the value go");
                record(&mut lock(&self.state), &created);
                Ok(Replaced::Won(created))
            }
            Ok(Claimed::Taken(winner)) => {
                let ours = winner.spec.owner().matches(me);
                record(&mut lock(&self.state), &winner);
                Ok(if ours { Replaced::Ours } else { Replaced::Lost })
            }
            Err(e) => Err(ServiceError::Internal(format!(
                "failed to reserve {}: {e}",
                describe(value)
            ))),
        }
    }

    #[instrument(skip_all, fields(uid = %req.uid, namespace = %req.namespace, name = %req.name))]
    fn validate(&self, req: &ServiceRequest) -> Answer {
        let decision = review::validate(req, &mut lock(&self.state));
        let verdict = match decision {
            ValidateDecision::Allow { warnings } => review::Verdict::Allow {
                patch: json_patch::Patch(Vec::new()),
                warnings,
            },
            ValidateDecision::Deny(e) => review::Verdict::Deny(e),
        };
        answer(review::review_response(&req.uid, &verdict))
    }
}

fn decision_of_mutate(d: MutateDecision) -> review::Verdict {
    match d {
        MutateDecision::Allow {
            patch, warnings, ..
        } => review::Verdict::Allow { patch, warnings },
        MutateDecision::Deny(e) => review::Verdict::Deny(e),
    }
}

/// Record a stored claim object in the state.
fn record(state: &mut AllocationState, claim: &AllocationClaim) {
    if let Some(object) = claim.object() {
        state.set_claim(object);
    }
}

/// Outcome of replacing a dead claim.
enum Replaced {
    /// A fresh claim was created (to give back if the request loses another race).
    Won(Box<AllocationClaim>),
    /// Someone re-created it for this same Service meanwhile: still ours.
    Ours,
    /// Another Service's request took the value in between.
    Lost,
}

fn describe(v: Claim) -> String {
    match v {
        Claim::Ip(ip) => format!("ClusterIP {ip}"),
        Claim::NodePort(p) => format!("NodePort {p}"),
    }
}

fn answer(body: Vec<u8>) -> Answer {
    Answer { status: 200, body }
}

impl<C: ClaimStore> AdmissionHandler for Webhook<C> {
    async fn handle(&self, endpoint: Endpoint, body: Bytes) -> Answer {
        let started = std::time::Instant::now();
        let (operation, answer) = self.answer(endpoint, &body).await;
        self.metrics.reviewed(
            endpoint,
            operation,
            &answer,
            started.elapsed().as_secs_f64(),
        );
        answer
    }

    fn is_ready(&self) -> bool {
        self.readiness.all()
    }
}

impl<C: ClaimStore> Webhook<C> {
    /// The answer to one review, and its operation when it was a Service review.
    async fn answer(&self, endpoint: Endpoint, body: &Bytes) -> (Option<&'static str>, Answer) {
        let req = match review::decode(body) {
            Ok(Decoded::Service(req)) => req,
            Ok(Decoded::Passthrough { uid, reason }) => {
                info!(%uid, endpoint = endpoint.label(), %reason, "not a Service review; allowed unchanged");
                return (
                    None,
                    answer(review::review_response(
                        &uid,
                        &review::Verdict::Allow {
                            patch: json_patch::Patch(Vec::new()),
                            warnings: Vec::new(),
                        },
                    )),
                );
            }
            Err(bad) => {
                warn!(endpoint = endpoint.label(), status = bad.status, error = %bad.message, "bad AdmissionReview");
                return (None, Answer::error(bad.status, &bad.message));
            }
        };
        let answer = match endpoint {
            Endpoint::Mutate => self.mutate(&req).await,
            Endpoint::Validate => self.validate(&req),
        };
        (Some(req.operation.as_str()), answer)
    }
}
