//! The claim repair loop: periodically release claims no Service uses.
//!
//! Every replica may run it: deletes carry the claim's uid as a precondition, so a claim
//! released and re-taken in between is never deleted by a stale decision, and a claim
//! already gone counts as released. A pass is skipped (and the unused-time record
//! cleared) while the Service or claim watch is not in sync — before the first list, while
//! it fails, while it re-lists — because "no Service holds it" then means nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use svcplane_allocator::Claim;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::watch::{Readiness, SharedState, lock};
use crate::claim::AllocationClaim;
use crate::claim::repair::{ClaimRecord, UnusedClaims};
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

/// One pass at `now`: list claims, release those `unused` has seen unused for `grace`.
/// Returns how many were deleted.
pub async fn repair_once(
    client: &Client,
    state: &SharedState,
    unused: &mut UnusedClaims,
    grace: Duration,
    now: Instant,
) -> Result<usize, kube::Error> {
    let api: Api<AllocationClaim> = Api::all(client.clone());
    let claims = api.list(&ListParams::default()).await?;
    let records: Vec<ClaimRecord> = claims.items.iter().map(ClaimRecord::of).collect();
    let doomed: Vec<(ClaimRecord, &'static str)> = {
        let st = lock(state);
        unused
            .claims_to_release(&records, |v| held_by_service(&st, v), now, grace)
            .into_iter()
            .map(|(c, why)| (c.clone(), why.label()))
            .collect()
    };
    let mut deleted = 0;
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
                info!(claim = %c.name, reason = why, "released allocation claim");
                lock(state).remove(&HolderKey::Claim {
                    name: c.name.clone(),
                });
                deleted += 1;
            }
            // Already released, or re-taken by another request since the list.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                debug!(claim = %c.name, code = s.code, "claim changed since the list; left alone");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

/// Run passes every `config.interval` until `cancel`.
pub async fn run(
    client: Client,
    state: SharedState,
    readiness: Arc<Readiness>,
    config: RepairConfig,
    cancel: CancellationToken,
) {
    let mut unused = UnusedClaims::default();
    let mut tick = tokio::time::interval(config.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !readiness.repair_safe() {
            // What was seen unused before the outage proves nothing about now.
            unused = UnusedClaims::default();
            debug!("claim repair skipped: the Service or claim watch is not in sync");
            continue;
        }
        if let Err(e) =
            repair_once(&client, &state, &mut unused, config.grace, Instant::now()).await
        {
            warn!(error = %e, "claim repair pass failed; retrying next interval");
        }
    }
}
