//! The EndpointSlices a Service would have after the controller's next sync,
//! and the writes that take the stored ones there.
//!
//! Read off the plan of the controller's own
//! [`reconcile_with_hints`](crate::core::endpointslice::reconcile_with_hints):
//! stored slices the plan neither updates nor deletes stay as they are,
//! updates replace them, creates are added. Each update says what changes.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use serde::Serialize;

use crate::core::endpointslice::{SlicePlan, is_managed_slice_of};
use crate::core::slice_endpoints::SliceEndpoints;
use crate::core::topology::allocation::endpoint_ready;

use super::ports::port_label;

/// A slice after the sync.
#[derive(Debug, Clone)]
pub struct FinalSlice {
    /// `None` for a slice to be created (the API server names it).
    pub name: Option<String>,
    /// For a slice to be created: its number among the creates, from 1.
    pub new_index: Option<usize>,
    pub address_type: String,
    /// `name:number/protocol` of each port.
    pub ports: Vec<String>,
    pub endpoints: Vec<Endpoint>,
}

impl FinalSlice {
    fn of(slice: &EndpointSlice) -> Self {
        FinalSlice {
            name: slice.metadata.name.clone(),
            new_index: None,
            address_type: slice.address_type.clone(),
            ports: slice
                .ports
                .iter()
                .flatten()
                .map(|p| port_label(p.name.as_deref(), p.port, p.protocol.as_deref()))
                .collect(),
            endpoints: slice.endpoints().to_vec(),
        }
    }

    /// Whether an endpoint of this slice targets Pod `namespace/name`.
    pub fn holds(&self, namespace: &str, name: &str) -> bool {
        self.endpoints.iter().any(|e| {
            e.target_ref.as_ref().is_some_and(|r| {
                r.name.as_deref() == Some(name) && r.namespace.as_deref() == Some(namespace)
            })
        })
    }
}

/// What the sync does to one slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Write {
    Unchanged,
    Create,
    Update,
    Delete,
}

impl Write {
    pub fn as_str(self) -> &'static str {
        match self {
            Write::Unchanged => "unchanged",
            Write::Create => "create",
            Write::Update => "update",
            Write::Delete => "delete",
        }
    }
}

/// One slice row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SliceRow {
    /// Absent for a slice to be created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// For a slice to be created: its number among the creates, from 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_slice: Option<usize>,
    pub address_type: String,
    pub ports: Vec<String>,
    /// Endpoints after the write (before it, for a delete).
    pub endpoints: usize,
    pub ready: usize,
    /// Endpoints carrying topology hints.
    pub hinted: usize,
    pub write: Write,
    /// For an update: what changes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
}

/// The EndpointSlice controller's outcome for a Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlicesReport {
    /// Why the controller leaves this Service alone, if it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    pub slices: Vec<SliceRow>,
    /// No write needed: the stored slices already match.
    pub in_sync: bool,
    /// Why the sync fails (and is retried), e.g. a Pod whose Node is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_error: Option<String>,
    /// The events the sync records on the Service, `Type Reason: message`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
}

impl SlicesReport {
    pub fn skipped(why: &str) -> Self {
        SlicesReport {
            skipped: Some(why.to_owned()),
            slices: Vec::new(),
            in_sync: true,
            sync_error: None,
            events: Vec::new(),
        }
    }
}

fn ready_count(endpoints: &[Endpoint]) -> usize {
    endpoints.iter().filter(|e| endpoint_ready(e)).count()
}

fn hinted_count(endpoints: &[Endpoint]) -> usize {
    endpoints.iter().filter(|e| e.hints.is_some()).count()
}

fn endpoint_id(e: &Endpoint) -> (Option<&str>, Vec<&str>) {
    let mut addresses: Vec<&str> = e.addresses.iter().map(String::as_str).collect();
    addresses.sort_unstable();
    (
        e.target_ref.as_ref().and_then(|r| r.name.as_deref()),
        addresses,
    )
}

/// `1 endpoint`, `2 endpoints`.
fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// What an update changes, in words.
fn changes(before: &EndpointSlice, after: &EndpointSlice) -> Vec<String> {
    let ids = |s: &EndpointSlice| -> BTreeSet<(Option<String>, Vec<String>)> {
        s.endpoints()
            .iter()
            .map(|e| {
                let (n, a) = endpoint_id(e);
                (
                    n.map(str::to_owned),
                    a.into_iter().map(str::to_owned).collect(),
                )
            })
            .collect()
    };
    let (old, new) = (ids(before), ids(after));
    let mut out = Vec::new();
    let added = new.difference(&old).count();
    let removed = old.difference(&new).count();
    if added > 0 {
        out.push(format!("+{}", plural(added, "endpoint")));
    }
    if removed > 0 {
        out.push(format!("-{}", plural(removed, "endpoint")));
    }
    let strip = |e: &Endpoint| {
        let mut e = e.clone();
        e.hints = None;
        e
    };
    let mut changed = 0;
    let mut rehinted = 0;
    for a in after.endpoints() {
        let Some(b) = before
            .endpoints()
            .iter()
            .find(|b| endpoint_id(b) == endpoint_id(a))
        else {
            continue;
        };
        if strip(a) != strip(b) {
            changed += 1;
        }
        if a.hints != b.hints {
            rehinted += 1;
        }
    }
    if changed > 0 {
        out.push(format!("{} changed", plural(changed, "endpoint")));
    }
    if rehinted > 0 {
        out.push(format!("hints changed on {}", plural(rehinted, "endpoint")));
    }
    if before.ports != after.ports {
        out.push("ports changed (slice reused for another port set)".to_owned());
    }
    if before.metadata.labels != after.metadata.labels {
        out.push("labels changed".to_owned());
    }
    if out.is_empty() {
        out.push("metadata only".to_owned());
    }
    out
}

fn row(slice: &EndpointSlice, write: Write, changes: Vec<String>) -> SliceRow {
    let f = FinalSlice::of(slice);
    SliceRow {
        name: if write == Write::Create { None } else { f.name },
        new_slice: None,
        address_type: f.address_type,
        ports: f.ports,
        endpoints: slice.endpoints().len(),
        ready: ready_count(slice.endpoints()),
        hinted: hinted_count(slice.endpoints()),
        write,
        changes,
    }
}

/// The slices after `plan`, and the rows describing each write. `existing`
/// are the candidate slices of the Service's namespace, as given to the
/// reconciler.
pub fn summarize(
    service: &Service,
    existing: &[Arc<EndpointSlice>],
    plan: &SlicePlan,
) -> (SlicesReport, Vec<FinalSlice>) {
    let managed: Vec<&EndpointSlice> = existing
        .iter()
        .map(Arc::as_ref)
        .filter(|s| is_managed_slice_of(s, service))
        .collect();
    let find = |name: &Option<String>| managed.iter().copied().find(|s| &s.metadata.name == name);
    let mut rows = Vec::new();
    let mut finals = Vec::new();
    let mut touched: BTreeSet<Option<String>> = BTreeSet::new();
    let mut created = 0;
    for pass in &plan.passes {
        for slice in &pass.updates {
            touched.insert(slice.metadata.name.clone());
            let before = find(&slice.metadata.name);
            let what = before.map(|b| changes(b, slice)).unwrap_or_default();
            rows.push(row(slice, Write::Update, what));
            finals.push(FinalSlice::of(slice));
        }
        for slice in &pass.creates {
            created += 1;
            let mut r = row(slice, Write::Create, Vec::new());
            r.new_slice = Some(created);
            rows.push(r);
            let mut f = FinalSlice::of(slice);
            f.name = None;
            f.new_index = Some(created);
            finals.push(f);
        }
        for d in &pass.deletes {
            touched.insert(Some(d.name.clone()));
            if let Some(before) = find(&Some(d.name.clone())) {
                rows.push(row(before, Write::Delete, Vec::new()));
            }
        }
    }
    for d in &plan.unsupported_deletes {
        touched.insert(Some(d.name.clone()));
        if let Some(before) = find(&Some(d.name.clone())) {
            rows.push(row(
                before,
                Write::Delete,
                vec![format!(
                    "address type {} no longer served",
                    before.address_type
                )],
            ));
        }
    }
    for slice in &managed {
        if !touched.contains(&slice.metadata.name) {
            rows.push(row(slice, Write::Unchanged, Vec::new()));
            finals.push(FinalSlice::of(slice));
        }
    }
    rows.sort_by(|a, b| {
        (&a.address_type, a.name.is_none(), &a.name, a.new_slice).cmp(&(
            &b.address_type,
            b.name.is_none(),
            &b.name,
            b.new_slice,
        ))
    });
    let report = SlicesReport {
        skipped: None,
        slices: rows,
        in_sync: plan.is_noop(),
        sync_error: plan.error.clone(),
        events: plan
            .events
            .iter()
            .map(|e| format!("{:?} {}: {}", e.event_type, e.reason, e.message))
            .collect(),
    };
    (report, finals)
}
