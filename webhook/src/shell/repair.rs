//! The claim repair loop: periodically delete claims no Service uses, and store the
//! retentions this replica decided (`--retain-released-values`) soon after the delete.
//!
//! Every replica may run it: deletes carry the claim's uid as a precondition, so a claim
//! released and re-taken in between is never deleted by a stale decision, and a claim
//! already gone counts as released. A pass is skipped (and the unused-time record
//! cleared) while the Service or claim watch is not in sync — before the first list,
//! after a failure until the watch has listed again — because "no Service holds it" then
//! means nothing. The watches themselves raise and clear that signal ([`super::watch`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use svcplane_allocator::Claim;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::watch::{Readiness, SharedState, lock};
use crate::claim::repair::{ClaimRecord, ClaimStatus, ReleaseReason, UnusedClaims};
use crate::claim::{AllocationClaim, retention_patch};
use crate::metrics::WebhookMetrics;
use crate::state::{AllocationState, HolderKey};

/// Settings of the repair loop.
#[derive(Debug, Clone, Copy)]
pub struct RepairConfig {
    /// Time between passes.
    pub interval: Duration,
    /// How old an unused claim must be before it is released.
    pub grace: Duration,
}

/// Does a stored Service hold `value` (per the state)?
pub fn held_by_service(state: &AllocationState, value: Claim) -> bool {
    state
        .holders(value)
        .iter()
        .any(|h| matches!(h.key, HolderKey::Service { .. }))
}

impl ClaimStatus for AllocationState {
    fn released(&self, c: &ClaimRecord) -> bool {
        self.released_claim(&c.name, &c.uid).is_some()
    }

    fn retained(&self, c: &ClaimRecord) -> bool {
        self.is_retained(&c.name, &c.uid)
    }

    fn held_by_service(&self, value: Claim) -> bool {
        held_by_service(self, value)
    }
}

/// What one repair pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairPass {
    /// Claims deleted, with why.
    pub released: Vec<(String, ReleaseReason)>,
}

/// One pass at `now`: list claims; delete the ones whose Service the state saw give
/// them up, and those `unused` has seen unused for `grace`.
pub async fn repair_once(
    client: &Client,
    state: &SharedState,
    unused: &mut UnusedClaims,
    grace: Duration,
    now: Instant,
) -> Result<RepairPass, kube::Error> {
    let api: Api<AllocationClaim> = Api::all(client.clone());
    let claims = api.list(&ListParams::default()).await?;
    let records: Vec<ClaimRecord> = claims.items.iter().map(ClaimRecord::of).collect();
    let doomed: Vec<(ClaimRecord, ReleaseReason)> = {
        let st = lock(state);
        unused
            .claims_to_release(&records, &*st, now, grace, jiff::Timestamp::now())
            .into_iter()
            .map(|(c, why)| (c.clone(), why))
            .collect()
    };
    let mut pass = RepairPass::default();
    for (c, why) in doomed {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(c.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&c.name, &params).await {
            Ok(_) => {
                debug!(claim = %c.name, reason = why.label(), "released allocation claim");
                lock(state).remove_claim(&c.name);
                pass.released.push((c.name, why));
            }
            // Already released, or re-taken by another request since the list.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                debug!(claim = %c.name, code = s.code, "claim changed since the list; left alone");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(pass)
}

/// How often retentions decided by this replica are looked for and stored: soon after a
/// Service's delete, so that a restart right after it loses as little as possible.
const STORE_RETENTIONS_EVERY: Duration = Duration::from_secs(1);

/// Store every retention this replica decided and has not seen stored: a merge patch
/// of `spec.retained` (ending `retain` after `wall`) and of the Service's name, with
/// the claim's resourceVersion as precondition, so that of two replicas storing the
/// same retention one wins and the other learns it from the watch. Returns how many
/// were stored.
pub async fn store_retentions(
    client: &Client,
    state: &SharedState,
    wall: jiff::Timestamp,
) -> usize {
    let api: Api<AllocationClaim> = Api::all(client.clone());
    let pending = lock(state).pending_retentions();
    let mut stored = 0;
    for p in pending {
        let (until, body) = retention_patch(&p, wall);
        match api
            .patch(&p.claim, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(claim) => {
                info!(claim = %p.claim, service = %p.service_name, %until, "retained a deleted Service's value");
                if let Some(object) = claim.object() {
                    lock(state).set_claim(object);
                }
                stored += 1;
            }
            // Stored by another replica, changed, or gone since: the watch says which.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                debug!(claim = %p.claim, code = s.code, "retention not stored: the claim changed");
            }
            Err(e) => {
                warn!(claim = %p.claim, error = %e, "storing a retention failed; retrying");
            }
        }
    }
    stored
}

/// Run passes every `config.interval` until `cancel`.
pub async fn run(
    client: Client,
    state: SharedState,
    readiness: Arc<Readiness>,
    config: RepairConfig,
    metrics: WebhookMetrics,
    cancel: CancellationToken,
) {
    let mut unused = UnusedClaims::default();
    let mut tick = tokio::time::interval(config.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut store_tick = tokio::time::interval(STORE_RETENTIONS_EVERY);
    store_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut skipping = false;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
            _ = store_tick.tick() => {
                // Only what a watch in sync decided: the same condition as a pass.
                if readiness.repair_safe() {
                    store_retentions(&client, &state, jiff::Timestamp::now()).await;
                }
                continue;
            }
        }
        if !readiness.repair_safe() {
            // What was seen unused before the outage proves nothing about now.
            unused = UnusedClaims::default();
            if !skipping {
                info!("claim repair paused: the Service or claim watch is not in sync");
                skipping = true;
            }
            continue;
        }
        if skipping {
            info!("claim repair resumed: the Service and claim watches are in sync");
            skipping = false;
        }
        match repair_once(&client, &state, &mut unused, config.grace, Instant::now()).await {
            Ok(pass) => {
                metrics.repair_passes.inc();
                for (_, why) in &pass.released {
                    metrics.released(why.label());
                }
                if !pass.released.is_empty() {
                    let claims: Vec<String> = pass
                        .released
                        .iter()
                        .map(|(name, why)| format!("{name} ({})", why.label()))
                        .collect();
                    info!(
                        released = pass.released.len(),
                        claims = %claims.join(", "),
                        "released allocation claims"
                    );
                }
            }
            Err(e) => warn!(error = %e, "claim repair pass failed; retrying next interval"),
        }
    }
}
