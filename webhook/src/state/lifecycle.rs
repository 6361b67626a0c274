//! When a claim stops protecting its value: Services and claims coming and going.
//!
//! Upstream frees a ClusterIP or NodePort in the same request that deletes its Service
//! (or updates it without the value). svcplane's claims outlive that request, so the
//! state has to decide when a claim is dead. It does so by *binding*: a claim is bound to
//! the Service incarnation (object uid) it was taken for once this replica has seen that
//! incarnation hold the value, and it is *released* the moment that incarnation is seen
//! deleted or seen without the value. A released claim holds nothing here — the value is
//! free for the next request, which takes the claim object over (a uid-preconditioned
//! delete, then its own create) — and the repair loop deletes it without a grace period.
//!
//! A claim is never bound to an incarnation it may not belong to:
//! - a claim taken by an UPDATE records the Service's uid and binds to that uid only;
//! - a claim taken by a CREATE (no uid yet) belongs to an incarnation created after it,
//!   so it binds only to one whose `creationTimestamp` is not earlier than its own, and
//!   only when that incarnation is first seen holding the value (so an in-flight claim of
//!   a re-created Service is not bound to the previous incarnation's late updates); a
//!   claim learnt after its Service was seen binds only if it is strictly older (in the
//!   API server's whole seconds), which an in-flight claim of a re-created Service never
//!   is.
//!
//! Claims that never get bound (their Service was never stored, or a watch lagged so the
//! order could not be told) keep the repair loop's grace period.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use svcplane_allocator::Claim;

use super::retention::{Retained, Role};
use super::{AllocationState, HolderKey, ServiceRef};

/// `metadata.creationTimestamp` in whole seconds since the epoch (its precision).
pub fn created_seconds(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<i64> {
    meta.creation_timestamp.as_ref().map(|t| t.0.as_second())
}

/// A stored Service incarnation as the state needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceObject {
    /// `metadata.uid` (empty when unknown, e.g. hand-built objects in tests).
    pub uid: String,
    /// `metadata.creationTimestamp`, whole seconds since the epoch.
    pub created: Option<i64>,
    /// What its `svcplane.io/retain-released-values` annotation says (`None`: unset).
    pub retain: Option<Duration>,
    /// The field each of its values filled (to retain them for the same fields).
    pub roles: Vec<(Claim, Role)>,
}

/// A claim's stored retention: it keeps its value for a deleted Service's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredRetention {
    /// When the retention ends.
    pub until: jiff::Timestamp,
    /// The field the value filled.
    pub role: Option<Role>,
}

/// A retention this replica decided on and has not seen stored yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRetention {
    /// Claim object name.
    pub claim: String,
    /// Its resourceVersion as last seen (the write's precondition).
    pub resource_version: String,
    /// How long from now.
    pub retain: Duration,
    /// The field the value filled.
    pub role: Option<Role>,
    /// The deleted Service's name (a claim taken by a `generateName` create has none).
    pub service_name: String,
}

/// A claim retained for a deleted Service, as the repair loop and metrics see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetainedClaim {
    /// Object name.
    pub name: String,
    /// Object uid.
    pub uid: String,
    /// The value.
    pub value: Claim,
    /// The Service it is retained for.
    pub service: ServiceRef,
    /// When it ends (`None` while not stored yet).
    pub until: Option<jiff::Timestamp>,
}

/// A stored `AllocationClaim` as the state needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimObject {
    /// Object name.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.creationTimestamp`, whole seconds since the epoch.
    pub created: Option<i64>,
    /// The Service it was taken for (its `uid` is set for claims taken by an UPDATE).
    pub owner: ServiceRef,
    /// The claimed value (`None`: not a valid lock; it holds nothing).
    pub value: Option<Claim>,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// `spec.retained`: kept for a deleted Service's name until a time.
    pub retained: Option<StoredRetention>,
}

/// What the state remembers of a claim object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ClaimInfo {
    object: ClaimObject,
    /// The Service incarnation (uid) it is bound to.
    bound_to: Option<String>,
    /// Its incarnation was seen giving the value up: it holds nothing any more.
    released: bool,
    /// Its incarnation was seen deleted and the value is retained for the Service's
    /// name; until the retention is seen stored.
    pending: Option<Pending>,
}

/// A retention decided here: how long, for which field, under which Service name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    retain: Duration,
    role: Option<Role>,
    service_name: String,
}

impl ClaimInfo {
    /// Does the claim retain its value for a deleted Service (stored or decided here)?
    fn is_retained(&self) -> bool {
        !self.released
            && self.bound_to.is_none()
            && (self.pending.is_some() || self.object.retained.is_some())
    }
}

/// A claim whose Service gave its value up, as the repair loop and takeovers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleasedClaim {
    /// Object name.
    pub name: String,
    /// Object uid (the precondition of its delete).
    pub uid: String,
    /// The value it claimed.
    pub value: Claim,
}

/// Per-kind bookkeeping beside the holders.
#[derive(Debug, Clone, Default)]
pub(super) struct Lifecycle {
    /// Every stored Service incarnation by holder key.
    services: HashMap<HolderKey, ServiceObject>,
    /// Every stored claim by name.
    claims: HashMap<String, ClaimInfo>,
    /// Names of the claims with a pending retention (so the writer need not scan).
    pending: BTreeSet<String>,
    /// `--retain-released-values`: the retention of Services that do not set their own.
    default_retain: Duration,
}

impl Lifecycle {
    /// `--retain-released-values`.
    pub(super) fn default_retain(&self) -> Duration {
        self.default_retain
    }
}

impl AllocationState {
    /// Record a stored Service (a watch event or a list item): what it holds replaces
    /// what it held. Claims bound to it for values it gave up are released; claims of
    /// values it newly holds are bound to it when they may be (see the module docs). A
    /// different uid under the same key means the previous incarnation is gone.
    pub fn set_service(
        &mut self,
        key: HolderKey,
        owner: ServiceRef,
        object: ServiceObject,
        values: Vec<Claim>,
    ) {
        let same_incarnation = self
            .lifecycle
            .services
            .get(&key)
            .is_some_and(|prev| prev.uid == object.uid);
        if !same_incarnation {
            self.remove_service(&key);
        }
        let before = self.values_of(&key).to_vec();
        self.set(key.clone(), Some(owner.clone()), values);
        let after = self.values_of(&key).to_vec();
        let gone: Vec<Claim> = before
            .iter()
            .copied()
            .filter(|v| !after.contains(v))
            .collect();
        self.release_bound(&object.uid, &gone);
        for v in after.iter().filter(|v| !before.contains(v)) {
            self.bind_new_holding(*v, &owner, &object);
        }
        // A claim taken by an UPDATE names this incarnation exactly: bind it even when
        // the value was already held (the claim arrived after the Service event).
        for v in &after {
            self.bind_exact(*v, &owner, &object.uid);
        }
        self.lifecycle.services.insert(key, object);
    }

    /// Forget a stored Service (deleted, or absent from a re-list): its values are free
    /// unless someone else holds them, and the claims bound to it are released.
    ///
    /// When the Service's retention (its annotation, else its namespace's, else
    /// `--retain-released-values`) is not zero, the claims bound to it are *retained*
    /// instead: they keep their values for the Service's namespace and name (see
    /// [`super::retention`]).
    pub fn remove_service(&mut self, key: &HolderKey) {
        let values = self.values_of(key).to_vec();
        self.remove(key);
        let Some(object) = self.lifecycle.services.remove(key) else {
            return;
        };
        let HolderKey::Service { namespace, name } = key else {
            return self.release_bound(&object.uid, &values);
        };
        let retain = self.retention_of(namespace, object.retain);
        if retain.is_zero() {
            self.release_bound(&object.uid, &values);
        } else {
            self.retain_bound(name, &object, &values, retain);
        }
    }

    /// `--retain-released-values`: how long a deleted Service's values are retained
    /// when it does not say (zero: released at once, as upstream).
    pub fn set_default_retention(&mut self, retain: Duration) {
        self.lifecycle.default_retain = retain;
    }

    /// Record a stored claim. The same object seen again keeps its binding and, once
    /// released, stays released; a new object under the name starts unbound.
    pub fn set_claim(&mut self, claim: ClaimObject) {
        let key = HolderKey::Claim {
            name: claim.name.clone(),
        };
        if let Some(info) = self.lifecycle.claims.get_mut(&claim.name)
            && info.object.uid == claim.uid
            && !claim.uid.is_empty()
        {
            info.object = claim.clone();
            if info.released {
                return;
            }
            if claim.retained.is_some() && info.pending.take().is_some() {
                self.lifecycle.pending.remove(&claim.name);
            }
            let bound_to = info.bound_to.clone();
            let owner = owner_of(info);
            self.set(key, Some(owner), claim.value.into_iter().collect());
            if bound_to.is_none() {
                self.bind_arriving(&claim);
            }
            return;
        }
        self.lifecycle.claims.insert(
            claim.name.clone(),
            ClaimInfo {
                object: claim.clone(),
                bound_to: None,
                released: false,
                pending: None,
            },
        );
        self.lifecycle.pending.remove(&claim.name);
        self.set(
            key,
            Some(claim.owner.clone()),
            claim.value.into_iter().collect(),
        );
        self.bind_arriving(&claim);
    }

    /// Forget a claim object (deleted, given back, or absent from a re-list).
    pub fn remove_claim(&mut self, name: &str) {
        self.lifecycle.claims.remove(name);
        self.lifecycle.pending.remove(name);
        self.remove(&HolderKey::Claim {
            name: name.to_string(),
        });
    }

    /// The released claim named `name`, if the state holds one with uid `uid`.
    pub fn released_claim(&self, name: &str, uid: &str) -> Option<ReleasedClaim> {
        let info = self.lifecycle.claims.get(name)?;
        if info.released && info.object.uid == uid {
            released(info)
        } else {
            None
        }
    }

    /// Does the claim named `name`, with uid `uid`, retain a deleted Service's value?
    pub fn is_retained(&self, name: &str, uid: &str) -> bool {
        self.lifecycle
            .claims
            .get(name)
            .is_some_and(|i| i.object.uid == uid && i.is_retained())
    }

    /// Every released claim (for the repair loop).
    pub fn released_claims(&self) -> Vec<ReleasedClaim> {
        let mut out: Vec<ReleasedClaim> = self
            .lifecycle
            .claims
            .values()
            .filter(|i| i.released)
            .filter_map(released)
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The values retained for the Service `svc` names (its namespace and name).
    pub fn retained_for(&self, svc: &ServiceRef) -> Vec<Retained> {
        if svc.name.is_empty() {
            return Vec::new();
        }
        let index = super::OwnerIndex::Named(svc.namespace.clone(), svc.name.clone());
        let mut out: Vec<Retained> = self
            .by_owner
            .get(&index)
            .into_iter()
            .flatten()
            .filter_map(|key| match key {
                HolderKey::Claim { name } => self.lifecycle.claims.get(name),
                _ => None,
            })
            .filter(|i| i.is_retained())
            .filter_map(|i| {
                Some(Retained {
                    claim: i.object.name.clone(),
                    value: i.object.value?,
                    role: i
                        .pending
                        .as_ref()
                        .map(|p| p.role)
                        .unwrap_or_else(|| i.object.retained.and_then(|r| r.role)),
                    until: i.object.retained.map(|r| r.until),
                })
            })
            .collect();
        out.sort_by(|a, b| a.claim.cmp(&b.claim));
        out
    }

    /// Retentions decided here and not yet seen stored, for the writer.
    pub fn pending_retentions(&self) -> Vec<PendingRetention> {
        self.lifecycle
            .pending
            .iter()
            .filter_map(|name| {
                let info = self.lifecycle.claims.get(name)?;
                let p = info.pending.clone()?;
                Some(PendingRetention {
                    claim: name.clone(),
                    resource_version: info.object.resource_version.clone(),
                    retain: p.retain,
                    role: p.role,
                    service_name: p.service_name,
                })
            })
            .collect()
    }

    /// Every claim retained for a deleted Service.
    pub fn retained_claims(&self) -> Vec<RetainedClaim> {
        let mut out: Vec<RetainedClaim> = self
            .lifecycle
            .claims
            .values()
            .filter(|i| i.is_retained())
            .filter_map(|i| {
                Some(RetainedClaim {
                    name: i.object.name.clone(),
                    uid: i.object.uid.clone(),
                    value: i.object.value?,
                    service: owner_of(i),
                    until: i.object.retained.map(|r| r.until),
                })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Names of every claim object the state knows, released ones included.
    pub fn claim_names(&self) -> impl Iterator<Item = &String> {
        self.lifecycle.claims.keys()
    }

    /// The Service incarnation (uid) a claim is bound to.
    pub fn claim_binding(&self, name: &str) -> Option<&str> {
        self.lifecycle.claims.get(name)?.bound_to.as_deref()
    }

    /// Names of the claims bound to incarnation `uid` that claim one of `values`.
    fn bound_claims(&self, uid: &str, values: &[Claim]) -> Vec<String> {
        if uid.is_empty() || values.is_empty() {
            return Vec::new();
        }
        self.lifecycle
            .claims
            .iter()
            .filter(|(_, i)| !i.released && i.bound_to.as_deref() == Some(uid))
            .filter(|(_, i)| i.object.value.is_some_and(|v| values.contains(&v)))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Retain the claims bound to the deleted incarnation `service` (named `name`) that
    /// claim one of `values`: unbound, they keep holding the value, now for the name.
    fn retain_bound(
        &mut self,
        name: &str,
        service: &ServiceObject,
        values: &[Claim],
        retain: Duration,
    ) {
        for claim in self.bound_claims(&service.uid, values) {
            let Some(info) = self.lifecycle.claims.get_mut(&claim) else {
                continue;
            };
            let role = info
                .object
                .value
                .and_then(|v| service.roles.iter().find(|(r, _)| *r == v))
                .map(|(_, role)| *role);
            info.bound_to = None;
            info.pending = Some(Pending {
                retain,
                role,
                service_name: name.to_owned(),
            });
            let owner = owner_of(info);
            let value: Vec<Claim> = info.object.value.into_iter().collect();
            self.lifecycle.pending.insert(claim.clone());
            self.set(HolderKey::Claim { name: claim }, Some(owner), value);
        }
    }

    /// Release the claims bound to incarnation `uid` that claim one of `values`.
    fn release_bound(&mut self, uid: &str, values: &[Claim]) {
        let doomed = self.bound_claims(uid, values);
        for name in doomed {
            if let Some(info) = self.lifecycle.claims.get_mut(&name) {
                info.released = true;
            }
            self.remove(&HolderKey::Claim { name });
        }
    }

    /// Unbound, unreleased claims of `value` taken for `owner` (by the rules of
    /// [`ServiceRef::matches`]).
    fn unbound_claims_of(&self, value: Claim, owner: &ServiceRef) -> Vec<String> {
        self.holders(value)
            .iter()
            .filter_map(|h| match &h.key {
                HolderKey::Claim { name } => Some(name),
                _ => None,
            })
            .filter(|name| {
                self.lifecycle.claims.get(*name).is_some_and(|i| {
                    i.bound_to.is_none() && !i.released && i.object.owner.matches(owner)
                })
            })
            .cloned()
            .collect()
    }

    /// `service` was just seen holding `value` for the first time: bind the claims that
    /// were taken for it.
    fn bind_new_holding(&mut self, value: Claim, owner: &ServiceRef, service: &ServiceObject) {
        if service.uid.is_empty() {
            return;
        }
        for name in self.unbound_claims_of(value, owner) {
            let Some(info) = self.lifecycle.claims.get_mut(&name) else {
                continue;
            };
            let o = &info.object;
            let for_it = if o.owner.uid.is_empty() {
                matches!((o.created, service.created), (Some(c), Some(s)) if c <= s)
            } else {
                o.owner.uid == service.uid
            };
            if for_it {
                info.bound_to = Some(service.uid.clone());
                if info.pending.take().is_some() {
                    self.lifecycle.pending.remove(&name);
                }
            }
        }
    }

    /// Bind the claims of `value` that name incarnation `uid` exactly.
    fn bind_exact(&mut self, value: Claim, owner: &ServiceRef, uid: &str) {
        if uid.is_empty() {
            return;
        }
        for name in self.unbound_claims_of(value, owner) {
            if let Some(info) = self.lifecycle.claims.get_mut(&name)
                && info.object.owner.uid == uid
            {
                info.bound_to = Some(uid.to_string());
                if info.pending.take().is_some() {
                    self.lifecycle.pending.remove(&name);
                }
            }
        }
    }

    /// A claim arrives after its Service may already have been seen: bind it to the
    /// Service holding its value if it names that incarnation, or (taken by a CREATE)
    /// is strictly older than it.
    fn bind_arriving(&mut self, claim: &ClaimObject) {
        let Some(value) = claim.value else {
            return;
        };
        let candidates: Vec<ServiceObject> = self
            .holders(value)
            .iter()
            .filter(|h| matches!(h.key, HolderKey::Service { .. }))
            .filter(|h| h.owner.as_ref().is_some_and(|o| claim.owner.matches(o)))
            .filter_map(|h| self.lifecycle.services.get(&h.key).cloned())
            .collect();
        for service in candidates {
            if service.uid.is_empty() {
                continue;
            }
            let for_it = if claim.owner.uid.is_empty() {
                matches!((claim.created, service.created), (Some(c), Some(s)) if c < s)
            } else {
                claim.owner.uid == service.uid
            };
            if for_it {
                if let Some(info) = self.lifecycle.claims.get_mut(&claim.name) {
                    info.bound_to = Some(service.uid.clone());
                    if info.pending.take().is_some() {
                        self.lifecycle.pending.remove(&claim.name);
                    }
                }
                return;
            }
        }
    }
}

/// The Service a claim holds its value for: the one it was taken for, named by the
/// deleted Service's name while it is retained for it (a claim of a `generateName`
/// create names no Service until its retention is stored).
fn owner_of(info: &ClaimInfo) -> ServiceRef {
    let mut owner = info.object.owner.clone();
    if let Some(p) = &info.pending
        && owner.name.is_empty()
    {
        owner.name.clone_from(&p.service_name);
    }
    owner
}

fn released(info: &ClaimInfo) -> Option<ReleasedClaim> {
    Some(ReleasedClaim {
        name: info.object.name.clone(),
        uid: info.object.uid.clone(),
        value: info.object.value?,
    })
}

#[cfg(test)]
mod retention_tests;
#[cfg(test)]
mod tests;
