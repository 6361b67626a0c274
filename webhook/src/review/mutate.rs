//! The mutating endpoint: assign ClusterIPs and NodePorts like kube-apiserver would.
//!
//! The request is run through svcplane's port of upstream's create/update allocation
//! (`BeginCreate`/`BeginUpdate`) inside [`AllocationState::reserve`], so the values it
//! takes stay reserved for this request until the shell has claimed them. The result is
//! handed to the API server as a *static* allocation (WH-13.1): a patch
//! that sets exactly the values picked here. Upstream's answers are kept:
//!
//! - a client-chosen value is still allocated statically, so an out-of-range, malformed
//!   or taken value is refused with the 422 the API server would give;
//! - a full range is upstream's 500 `InternalError`;
//! - family-resolution failures are upstream's 422 pre-validation errors.
//!
//! A create may ask for values by annotation instead of setting them (a restored
//! Service; [`super::requested`]): they are given where free, else the Service gets
//! automatic ones and the answer carries a warning saying why. A create under the name
//! of a deleted Service whose values are retained asks for those the same way
//! ([`super::retained`]).
//!
//! ClusterIPs come only from the ranges serving the Service's namespace when a
//! ServiceCIDR selects namespaces (`svcplane_allocator::range_scope`).
//!
//! A request that upstream's validation will reject anyway (e.g. a headless NodePort
//! Service) is admitted unchanged with nothing reserved: the API server then answers
//! with its complete native error list, and no value is held for a write that cannot
//! succeed.
//!
//! [`AllocationState::reserve`]: crate::state::AllocationState::reserve

use svcplane_allocator::range::parse_ip_sloppy;
use svcplane_allocator::view::SvcView;
use svcplane_allocator::{Allocators, Claim, ServiceError, Transaction};

use super::MutateDecision;
use super::decode::{Operation, ServiceRequest};
use super::patch::{Mode, allocation_patch};
use super::validate::structural_errors;
use super::warnings::{cluster_ip_band_warning, node_port_band_warning};
use super::{requested, retained};
use crate::state::hold_kept_values;
use crate::state::retention;
use crate::state::{AllocationState, ServiceRef};

/// Why the allocation closure did not produce a transaction.
enum Refusal {
    /// Upstream's allocation error: deny with it.
    Deny(ServiceError),
    /// Upstream validation will reject the write; leave it to the API server.
    Doomed,
}

/// Assign the values `req` needs, reserving them in `state` under the request's
/// `Pending` holder (the shell claims them, or removes the holder).
pub fn mutate(req: &ServiceRequest, state: &mut AllocationState) -> MutateDecision {
    let before = SvcView::from_service(&req.service);
    // ExternalName Services get nothing; a change *to* ExternalName releases values,
    // which the state learns from the Service watch once the write is stored.
    if before.is_external_name() {
        return unchanged();
    }
    let old = match req.operation {
        Operation::Update => req.old_service.as_ref(),
        Operation::Create => None,
    };
    let me = req.service_ref();
    // Decide which client-chosen values are fresh picks before reserving: afterwards
    // this request's own reservation holds them all.
    let fresh = fresh_hand_picks(state, &me, &before);
    let mut svc = req.service.clone();
    // A create may ask for values by annotation (a restore); a bad annotation is
    // reported and ignored, never a refusal.
    let (mut requested, mut notes) = match old {
        None => match requested::read(&req.service) {
            Ok(r) => (r, Vec::new()),
            Err(e) => (None, vec![e]),
        },
        Some(_) => (None, Vec::new()),
    };
    // A create under the name of a deleted Service whose values are retained asks for
    // them back, unless it asks for values by annotation itself.
    if old.is_none() && requested.is_none() {
        requested = retained::request(&req.service, &me, &state.retained_for(&me));
    }
    if let Err(e) = retention::annotated(req.service.metadata.annotations.as_ref()) {
        notes.push(e);
    }
    let namespace = state.namespace_view(&me.namespace);
    let outcome = state.reserve(&me, |a| {
        a.for_namespace(&namespace, |a| {
            // Dry runs are allocated for real too: the answer must carry values that are
            // actually free, and the shell drops the reservation afterwards.
            let txn = match old {
                Some(old) => {
                    hold_kept_values(a, old);
                    a.allocate_update(&mut svc, old, false)
                }
                None => {
                    if let Some(r) = &requested {
                        let (filled, why_not) = requested::fill(a, &svc, r);
                        svc = filled;
                        notes.extend(why_not);
                    }
                    a.allocate_create(&mut svc, false)
                }
            }
            .map_err(Refusal::Deny)?;
            if !structural_errors(&svc, old).is_empty() {
                a.revert(txn);
                return Err(Refusal::Doomed);
            }
            Ok(txn)
        })
    });
    let txn = match outcome {
        Ok(txn) => txn,
        Err(Refusal::Deny(e)) if req.dry_run => {
            return MutateDecision::Deny(dry_run_wording(req, state, e));
        }
        Err(Refusal::Deny(e)) => return MutateDecision::Deny(e),
        Err(Refusal::Doomed) => return unchanged(),
    };
    let after = SvcView::from_service(&svc);
    let mode = match old {
        Some(_) => Mode::Update,
        None => Mode::Create,
    };
    let mut warnings = band_warnings(state.allocators(), &fresh, &txn);
    warnings.extend(notes);
    MutateDecision::Allow {
        patch: allocation_patch(&req.object, &before, &after, txn.allocated(), mode),
        warnings,
        reserved: txn.allocated().to_vec(),
    }
}

/// WH-8.7: a dry run svcplane refuses is worded as kube-apiserver words its own dry
/// run, whenever upstream's dry-run mode (AL-5.5) refuses it too; kube-apiserver checks
/// a dry run against one range, so an address outside every range reads
/// `the provided IP (…) is not in the valid range…` there, not the real create's
/// `the provided network does not match…`. Where upstream's dry run would pass (a
/// taken address), svcplane's stricter refusal stands.
fn dry_run_wording(
    req: &ServiceRequest,
    state: &mut AllocationState,
    refusal: ServiceError,
) -> ServiceError {
    let mut svc = req.service.clone();
    let namespace = state.namespace_view(&req.service_ref().namespace);
    let upstream = state.evaluate(&req.service_ref(), |a| {
        a.for_namespace(&namespace, |a| match req.old_service.as_ref() {
            Some(old) if req.operation == Operation::Update => {
                hold_kept_values(a, old);
                a.allocate_update(&mut svc, old, true)
            }
            _ => a.allocate_create(&mut svc, true),
        })
    });
    match upstream {
        Err(e) => e,
        Ok(_) => refusal,
    }
}

fn unchanged() -> MutateDecision {
    MutateDecision::Allow {
        patch: json_patch::Patch(Vec::new()),
        reserved: Vec::new(),
        warnings: Vec::new(),
    }
}

/// A value the client set, with the field it was set in.
struct HandPick {
    field: String,
    index: usize,
    value: Claim,
}

/// The values the client set that this Service did not already hold: a value kept from
/// the old object, or set by our own earlier answer to a reinvoked request (the
/// reinvocation echoes our patch back), is not a new choice by a person. Holdings of
/// this very request (an earlier attempt that lost a claim race) do not count, so a
/// retry reports the same warnings as the first attempt.
fn fresh_hand_picks(state: &AllocationState, me: &ServiceRef, before: &SvcView) -> Vec<HandPick> {
    let mut picks = Vec::new();
    let ips: &[String] = if before.cluster_ips.is_empty() {
        std::slice::from_ref(&before.cluster_ip)
    } else {
        &before.cluster_ips
    };
    for (i, s) in ips.iter().enumerate() {
        if let Some(ip) = parse_ip_sloppy(s) {
            picks.push(HandPick {
                field: format!("spec.clusterIPs[{i}]"),
                index: i,
                value: Claim::Ip(ip),
            });
        }
    }
    for (i, p) in before.ports.iter().enumerate() {
        if p.node_port != 0 {
            picks.push(HandPick {
                field: format!("spec.ports[{i}].nodePort"),
                index: i,
                value: Claim::NodePort(p.node_port),
            });
        }
    }
    if before.health_check_node_port != 0 {
        picks.push(HandPick {
            field: "spec.healthCheckNodePort".into(),
            index: 0,
            value: Claim::NodePort(before.health_check_node_port),
        });
    }
    picks.retain(|p| {
        !state.holders(p.value).iter().any(|h| {
            h.owner
                .as_ref()
                .is_some_and(|o| o.request_uid != me.request_uid && o.matches(me))
        })
    });
    picks
}

/// Band warnings for the fresh hand picks this request actually took.
fn band_warnings(a: &Allocators, fresh: &[HandPick], txn: &Transaction) -> Vec<String> {
    fresh
        .iter()
        .filter(|p| txn.allocated().contains(&p.value))
        .filter_map(|p| match p.value {
            Claim::Ip(ip) => cluster_ip_band_warning(a, p.index, ip),
            Claim::NodePort(port) => node_port_band_warning(a.node_ports(), &p.field, port),
        })
        .collect()
}
