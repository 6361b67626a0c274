//! The placement algorithm (ES-2.7 steps 1–3) for one port
//! group of one address type: keep what is already placed, update slices in
//! place, fill the slices already being changed, then fit the rest into one
//! unchanged slice or create new ones.
//!
//! Minimal churn is the point: an endpoint already in a slice stays there,
//! and a remainder smaller than a slice is never spread across several
//! existing slices (one create beats several updates).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};

use super::desired::{DesiredEndpoint, EndpointKey, FastMap};
use super::metadata;

use crate::core::slice_endpoints::SliceEndpoints;

/// An endpoint of a slice being written: copied from the existing slice, or
/// a desired endpoint by index.
#[derive(Debug, Clone, Copy)]
enum Member<'e> {
    Existing(&'e Endpoint),
    Desired(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Unchanged,
    Update,
    Delete,
}

#[derive(Debug)]
struct Working<'e> {
    base: &'e EndpointSlice,
    state: State,
    /// Set when the slice is updated: its new endpoint list.
    members: Vec<Member<'e>>,
    /// Whether the update also rewrites labels (step 1 updates do; a slice
    /// filled in step 3 keeps its labels).
    relabel: bool,
}

impl Working<'_> {
    fn len(&self) -> usize {
        match self.state {
            State::Update => self.members.len(),
            _ => self.base.endpoints().len(),
        }
    }
}

/// The outcome of placing one port group.
#[derive(Debug, Default)]
pub(super) struct GroupPlacement<'e> {
    pub creates: Vec<EndpointSlice>,
    pub updates: Vec<EndpointSlice>,
    pub deletes: Vec<&'e EndpointSlice>,
    pub unchanged: Vec<&'e EndpointSlice>,
    pub endpoints_added: usize,
    pub endpoints_removed: usize,
}

/// Everything placement needs that is fixed for a pass.
#[derive(Debug)]
pub(super) struct GroupContext<'c, 'd> {
    pub service: &'c Service,
    pub labels: &'c BTreeMap<String, String>,
    pub address_type: &'c str,
    pub ports: &'c [EndpointPort],
    pub desired: &'c [DesiredEndpoint<'d>],
    /// Indices into `desired` of this group's endpoints, in order.
    pub members: &'c [usize],
    pub max_per_slice: usize,
}

/// Places a group's desired endpoints into its existing slices (given in a
/// stable order) and new ones.
pub(super) fn place<'e>(
    ctx: &GroupContext<'_, '_>,
    existing: &[&'e EndpointSlice],
) -> GroupPlacement<'e> {
    let max = ctx.max_per_slice.max(1);
    let mut index: FastMap<EndpointKey<'_>, usize> =
        FastMap::with_capacity_and_hasher(ctx.members.len(), Default::default());
    for (pos, &idx) in ctx.members.iter().enumerate() {
        index.entry(ctx.desired[idx].key()).or_insert(pos);
    }
    let mut placed = vec![false; ctx.members.len()];
    let mut out = GroupPlacement::default();

    // Step 1: walk the existing slices.
    let mut working: Vec<Working<'e>> = Vec::with_capacity(existing.len());
    let mut kept: Vec<Member<'e>> = Vec::new();
    for &slice in existing {
        kept.clear();
        let mut changed = false;
        for ep in slice.endpoints() {
            let Some(&pos) = index.get(&EndpointKey::of_existing(ep)) else {
                continue;
            };
            if placed[pos] {
                continue;
            }
            placed[pos] = true;
            let idx = ctx.members[pos];
            if ctx.desired[idx].differs_from(ep) {
                changed = true;
            }
            kept.push(Member::Desired(idx));
        }
        let removed = slice.endpoints().len() - kept.len();
        let w = if changed || removed > 0 {
            out.endpoints_removed += removed;
            if kept.is_empty() {
                Working {
                    base: slice,
                    state: State::Delete,
                    members: Vec::new(),
                    relabel: false,
                }
            } else {
                Working {
                    base: slice,
                    state: State::Update,
                    members: std::mem::take(&mut kept),
                    relabel: true,
                }
            }
        } else if metadata::labels_differ(slice, ctx.service) {
            Working {
                base: slice,
                state: State::Update,
                members: slice.endpoints().iter().map(Member::Existing).collect(),
                relabel: true,
            }
        } else {
            Working {
                base: slice,
                state: State::Unchanged,
                members: Vec::new(),
                relabel: false,
            }
        };
        working.push(w);
    }

    let mut leftovers: Vec<usize> = ctx
        .members
        .iter()
        .zip(&placed)
        .filter(|(_, p)| !**p)
        .map(|(idx, _)| *idx)
        .collect();
    // Which endpoint lands in which slice is unspecified upstream; a stable
    // order (by Pod) keeps plans independent of the order of the inputs.
    leftovers.sort_by(|a, b| {
        let (a, b) = (&ctx.desired[*a], &ctx.desired[*b]);
        (a.namespace, a.name).cmp(&(b.namespace, b.name))
    });
    let mut remaining = leftovers.into_iter().peekable();
    out.endpoints_added = remaining.len();

    // Step 2: fill the slices already being updated, fullest first.
    if remaining.peek().is_some() {
        let mut updating: Vec<usize> = (0..working.len())
            .filter(|i| working[*i].state == State::Update)
            .collect();
        updating.sort_by_key(|i| std::cmp::Reverse(working[*i].len()));
        for i in updating {
            while working[i].members.len() < max {
                let Some(idx) = remaining.next() else { break };
                working[i].members.push(Member::Desired(idx));
            }
        }
    }

    // Step 3: fit what is left into one unchanged slice, or create slices.
    let mut creates: Vec<Vec<usize>> = Vec::new();
    while remaining.len() > 0 {
        let left = remaining.len();
        let target = if left < max {
            slice_to_fill(&working, left, max)
        } else {
            None
        };
        match target {
            Some(i) => {
                let w = &mut working[i];
                w.members = w.base.endpoints().iter().map(Member::Existing).collect();
                w.members.extend(remaining.by_ref().map(Member::Desired));
                w.state = State::Update;
            }
            None => creates.push(remaining.by_ref().take(max).collect()),
        }
    }

    for members in creates {
        let mut slice = metadata::new_slice(
            ctx.service,
            ctx.labels,
            ctx.address_type,
            ctx.ports.to_vec(),
        );
        slice.endpoints = Some(
            members
                .into_iter()
                .map(|idx| ctx.desired[idx].to_endpoint())
                .collect(),
        );
        out.creates.push(slice);
    }
    for w in working {
        match w.state {
            State::Unchanged => out.unchanged.push(w.base),
            State::Delete => out.deletes.push(w.base),
            State::Update => out.updates.push(materialize(&w, ctx)),
        }
    }
    out
}

/// The unchanged slice that would be closest to full after taking all `n`
/// remaining endpoints; the first exact fit wins.
fn slice_to_fill(working: &[Working<'_>], n: usize, max: usize) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (i, w) in working.iter().enumerate() {
        if w.state != State::Unchanged {
            continue;
        }
        let Some(diff) = max.checked_sub(n + w.base.endpoints().len()) else {
            continue;
        };
        if best.is_none_or(|(_, d)| diff < d) {
            best = Some((i, diff));
            if diff == 0 {
                break;
            }
        }
    }
    best.map(|(i, _)| i)
}

fn materialize(w: &Working<'_>, ctx: &GroupContext<'_, '_>) -> EndpointSlice {
    let mut metadata = w.base.metadata.clone();
    if w.relabel {
        metadata.labels = Some(ctx.labels.clone());
    }
    EndpointSlice {
        metadata,
        address_type: w.base.address_type.clone(),
        ports: w.base.ports.clone(),
        endpoints: Some(
            w.members
                .iter()
                .map(|m| match m {
                    Member::Existing(ep) => (*ep).clone(),
                    Member::Desired(idx) => ctx.desired[*idx].to_endpoint(),
                })
                .collect(),
        ),
    }
}
