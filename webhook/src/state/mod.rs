//! Who holds which ClusterIP and NodePort, as the webhook currently knows it.
//!
//! The allocator's bitmaps answer "is this value taken?" but not "by whom?", and the
//! webhook needs both: a value may be held at once by a Service, by svcplane's own claim
//! for it, by kube-apiserver's IPAddress object and by an in-flight admission request,
//! and re-evaluating a Service must not trip over the values that Service itself holds.
//! [`AllocationState`] therefore keeps, per value, the list of [`Holding`]s, and keeps a
//! value marked in the allocators exactly while at least one holder has it. Everything
//! here is pure: the watches in [`crate::shell`] feed it, the review in
//! [`crate::review`] queries and reserves through it.

use std::collections::HashMap;

use lifecycle::Lifecycle;
pub use lifecycle::{
    ClaimObject, PendingRetention, ReleasedClaim, RetainedClaim, ServiceObject, StoredRetention,
    created_seconds,
};
use svcplane_allocator::range::IpFamily;
use svcplane_allocator::{Allocators, Claim, Transaction};

/// The Service a holder stands for, as far as the webhook can tell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ServiceRef {
    /// Namespace of the Service.
    pub namespace: String,
    /// Name; empty for a create with `generateName` (the API server names it later).
    pub name: String,
    /// `metadata.generateName` of the create, if any.
    pub generate_name: String,
    /// The admission request that reserved or claimed the value (empty when unknown).
    pub request_uid: String,
    /// `metadata.uid` of the Service when the request knew it (an UPDATE); a CREATE
    /// is reviewed before the API server assigns one. Not part of [`Self::matches`].
    pub uid: String,
}

impl ServiceRef {
    /// The identity of the Service under review in one admission request.
    pub fn of_request(namespace: &str, name: &str, generate_name: &str, request_uid: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
            generate_name: generate_name.to_string(),
            request_uid: request_uid.to_string(),
            uid: String::new(),
        }
    }

    /// The same reference, naming the Service's uid.
    pub fn with_uid(mut self, uid: &str) -> Self {
        self.uid = uid.to_string();
        self
    }

    /// A stored Service, known by namespace and name.
    pub fn named(namespace: &str, name: &str) -> Self {
        Self::of_request(namespace, name, "", "")
    }

    /// Does a holder owned by `self` belong to the Service `candidate`?
    ///
    /// Same namespace, and: both named and the names are equal; or the same admission
    /// request; or `self` is a name-less (generateName) reservation and the candidate
    /// is a Service the API server named from that same `generateName` (the validating
    /// call of the create, or a later update of it): its name is the prefix plus a
    /// five-character suffix from the API server's alphabet. A Service someone named by
    /// hand never matches a name-less reservation, even if its name shares the prefix,
    /// and two name-less creates never match each other.
    pub fn matches(&self, candidate: &ServiceRef) -> bool {
        if self.namespace != candidate.namespace {
            return false;
        }
        if !self.name.is_empty() && !candidate.name.is_empty() {
            return self.name == candidate.name;
        }
        if !self.request_uid.is_empty() && self.request_uid == candidate.request_uid {
            return true;
        }
        self.name.is_empty()
            && !self.generate_name.is_empty()
            && candidate.generate_name == self.generate_name
            && is_generated_from(&candidate.name, &self.generate_name)
    }
}

/// Could the API server have named an object `name` from `generate_name`? It keeps at
/// most 58 characters of the prefix and appends 5 from a fixed alphabet.
fn is_generated_from(name: &str, generate_name: &str) -> bool {
    const MAX_PREFIX: usize = 63 - SUFFIX_LEN;
    const SUFFIX_LEN: usize = 5;
    const ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";
    let prefix = match generate_name.char_indices().nth(MAX_PREFIX) {
        Some((i, _)) => &generate_name[..i],
        None => generate_name,
    };
    name.len() == prefix.len() + SUFFIX_LEN
        && name.starts_with(prefix)
        && name[prefix.len()..].chars().all(|c| ALPHABET.contains(c))
}

/// Identity of one holder of values.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HolderKey {
    /// A stored Service.
    Service {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// A svcplane `AllocationClaim` object.
    Claim {
        /// Object name.
        name: String,
    },
    /// A kube-apiserver `IPAddress` object.
    IpAddress {
        /// Object name (the address).
        name: String,
    },
    /// Values reserved by an admission request whose claim is not confirmed yet.
    Pending {
        /// The AdmissionReview request uid.
        request_uid: String,
    },
    /// A Namespace: it holds no value, and is a key only so that a re-list can tell
    /// which namespaces are gone.
    Namespace {
        /// Its name.
        name: String,
    },
}

/// One holder of a value and the Service it stands for (`None`: foreign or unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// Who holds the value.
    pub key: HolderKey,
    /// The Service the holder belongs to.
    pub owner: Option<ServiceRef>,
}

/// Allocators plus the holders of every value they have marked.
#[derive(Debug, Clone)]
pub struct AllocationState {
    allocators: Allocators,
    by_value: HashMap<Claim, Vec<Holding>>,
    by_holder: HashMap<HolderKey, (Option<ServiceRef>, Vec<Claim>)>,
    /// Holders by the owner fields [`ServiceRef::matches`] looks at, so finding a
    /// Service's own values costs its own holders, not a scan of every value.
    by_owner: HashMap<OwnerIndex, Vec<HolderKey>>,
    /// Service incarnations and claim bindings (see [`lifecycle`]).
    lifecycle: Lifecycle,
    /// What each namespace says (see [`namespaces`]).
    namespaces: namespaces::Namespaces,
}

/// Where a holder is found from the Service it may belong to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum OwnerIndex {
    /// A named owner: namespace and name.
    Named(String, String),
    /// The admission request that reserved or claimed it.
    Request(String),
    /// A name-less (generateName) owner in this namespace.
    Nameless(String),
}

impl OwnerIndex {
    /// Index entries of a holder owned by `o`.
    fn of_owner(o: &ServiceRef) -> Vec<Self> {
        let mut out = Vec::with_capacity(2);
        if o.name.is_empty() {
            out.push(Self::Nameless(o.namespace.clone()));
        } else {
            out.push(Self::Named(o.namespace.clone(), o.name.clone()));
        }
        if !o.request_uid.is_empty() {
            out.push(Self::Request(o.request_uid.clone()));
        }
        out
    }

    /// Index entries under which holders matching `svc` can be found.
    fn candidates(svc: &ServiceRef) -> Vec<Self> {
        let mut out = Vec::with_capacity(3);
        if !svc.name.is_empty() {
            out.push(Self::Named(svc.namespace.clone(), svc.name.clone()));
            out.push(Self::Nameless(svc.namespace.clone()));
        }
        if !svc.request_uid.is_empty() {
            out.push(Self::Request(svc.request_uid.clone()));
        }
        out
    }
}

impl AllocationState {
    /// An empty state over fresh allocators.
    pub fn new(allocators: Allocators) -> Self {
        Self {
            allocators,
            by_value: HashMap::new(),
            by_holder: HashMap::new(),
            by_owner: HashMap::new(),
            lifecycle: Lifecycle::default(),
            namespaces: namespaces::Namespaces::default(),
        }
    }

    /// The allocators (for range and band information).
    pub fn allocators(&self) -> &Allocators {
        &self.allocators
    }

    /// Make the ClusterIP ranges exactly `ranges` (the cluster's ServiceCIDRs): every
    /// value some holder has is marked again, so a range that appears knows which of
    /// its addresses are taken. Returns the CIDRs the allocator could not use.
    pub fn set_ranges(
        &mut self,
        ranges: &[svcplane_allocator::service_cidrs::ClusterRange],
        primary: Option<IpFamily>,
    ) -> Vec<(svcplane_allocator::Cidr, String)> {
        let refused = self.allocators.set_ranges(ranges, primary);
        let held: Vec<Claim> = self.by_value.keys().copied().collect();
        for v in held {
            mark(&mut self.allocators, v);
        }
        refused
    }

    /// Replace everything `key` holds with `values` (duplicates ignored). An empty list
    /// removes the holder.
    pub fn set(&mut self, key: HolderKey, owner: Option<ServiceRef>, values: Vec<Claim>) {
        self.remove(&key);
        if values.is_empty() {
            return;
        }
        let mut kept: Vec<Claim> = Vec::with_capacity(values.len());
        for v in values {
            if kept.contains(&v) {
                continue;
            }
            let holders = self.by_value.entry(v).or_default();
            if holders.is_empty() {
                mark(&mut self.allocators, v);
            }
            holders.push(Holding {
                key: key.clone(),
                owner: owner.clone(),
            });
            kept.push(v);
        }
        if let Some(o) = &owner {
            for idx in OwnerIndex::of_owner(o) {
                self.by_owner.entry(idx).or_default().push(key.clone());
            }
        }
        self.by_holder.insert(key, (owner, kept));
    }

    /// Drop a holder; values nobody else holds become free.
    pub fn remove(&mut self, key: &HolderKey) {
        let Some((owner, values)) = self.by_holder.remove(key) else {
            return;
        };
        if let Some(o) = &owner {
            for idx in OwnerIndex::of_owner(o) {
                if let Some(keys) = self.by_owner.get_mut(&idx) {
                    keys.retain(|k| k != key);
                    if keys.is_empty() {
                        self.by_owner.remove(&idx);
                    }
                }
            }
        }
        for v in values {
            let now_free = match self.by_value.get_mut(&v) {
                Some(holders) => {
                    holders.retain(|h| &h.key != key);
                    holders.is_empty()
                }
                None => false,
            };
            if now_free {
                self.by_value.remove(&v);
                self.allocators.release_claim(v);
            }
        }
    }

    /// Keep only the holders for which `keep` is true (used when a watch re-lists).
    pub fn retain(&mut self, keep: impl Fn(&HolderKey) -> bool) {
        let gone: Vec<HolderKey> = self
            .by_holder
            .keys()
            .filter(|k| !keep(k))
            .cloned()
            .collect();
        for k in gone {
            self.remove(&k);
        }
    }

    /// What `key` holds (empty when unknown).
    pub fn values_of(&self, key: &HolderKey) -> &[Claim] {
        self.by_holder.get(key).map_or(&[], |(_, v)| v.as_slice())
    }

    /// Every holder key currently known.
    pub fn holder_keys(&self) -> impl Iterator<Item = &HolderKey> {
        self.by_holder.keys()
    }

    /// The holders of `value` (empty when free).
    pub fn holders(&self, value: Claim) -> &[Holding] {
        self.by_value.get(&value).map_or(&[], Vec::as_slice)
    }

    /// First holder of `value` that does not belong to `svc` (a holder without an owner
    /// always counts as another).
    pub fn held_by_other(&self, value: Claim, svc: &ServiceRef) -> Option<&Holding> {
        self.holders(value)
            .iter()
            .find(|h| !h.owner.as_ref().is_some_and(|o| o.matches(svc)))
    }

    /// Run `f` with the values held only by `svc` temporarily free, then undo whatever
    /// `f` allocated and re-mark `svc`'s values: a what-if that leaves no trace.
    pub fn evaluate<E>(
        &mut self,
        svc: &ServiceRef,
        f: impl FnOnce(&mut Allocators) -> Result<Transaction, E>,
    ) -> Result<Transaction, E> {
        let own = self.free_own_values(svc);
        let res = f(&mut self.allocators);
        if let Ok(txn) = &res {
            self.allocators.revert(txn.clone());
        }
        self.remark(&own);
        res
    }

    /// Like [`Self::evaluate`], but what `f` allocated stays allocated and is recorded
    /// under `HolderKey::Pending { request_uid: svc.request_uid }`, replacing what that
    /// request reserved before (a retry after a lost claim race).
    pub fn reserve<E>(
        &mut self,
        svc: &ServiceRef,
        f: impl FnOnce(&mut Allocators) -> Result<Transaction, E>,
    ) -> Result<Transaction, E> {
        let own = self.free_own_values(svc);
        let res = f(&mut self.allocators);
        self.remark(&own);
        if let Ok(txn) = &res {
            let key = HolderKey::Pending {
                request_uid: svc.request_uid.clone(),
            };
            // `set` first drops the request's earlier reservation, which may free a value
            // this transaction just took again; mark the new values before recording them
            // so they are never left unmarked.
            let allocated = txn.allocated().to_vec();
            self.set(key, Some(svc.clone()), allocated.clone());
            for v in allocated {
                mark(&mut self.allocators, v);
            }
        }
        res
    }

    /// Unmark values whose every holder belongs to `svc`; returns them.
    fn free_own_values(&mut self, svc: &ServiceRef) -> Vec<Claim> {
        let mut own: Vec<Claim> = Vec::new();
        for idx in OwnerIndex::candidates(svc) {
            for key in self.by_owner.get(&idx).into_iter().flatten() {
                let Some((Some(owner), values)) = self.by_holder.get(key) else {
                    continue;
                };
                if !owner.matches(svc) {
                    continue;
                }
                for v in values {
                    let all_own = self
                        .holders(*v)
                        .iter()
                        .all(|h| h.owner.as_ref().is_some_and(|o| o.matches(svc)));
                    if all_own && !own.contains(v) {
                        own.push(*v);
                    }
                }
            }
        }
        for v in &own {
            self.allocators.release_claim(*v);
        }
        own
    }

    fn remark(&mut self, values: &[Claim]) {
        for v in values {
            mark(&mut self.allocators, *v);
        }
    }
}

/// Before an update is re-allocated with the Service's own values freed: mark again
/// the values the stored (old) Service keeps. The update path never re-allocates kept
/// values, so without this a dynamic pick for a new port or healthCheckNodePort could
/// return one the Service already uses (one nodePort for two port numbers).
pub fn hold_kept_values(allocators: &mut Allocators, old: &k8s_openapi::api::core::v1::Service) {
    let view = svcplane_allocator::SvcView::from_service(old);
    for v in svcplane_allocator::service::claims_of(&view) {
        mark(allocators, v);
    }
}

/// Mark `value` taken. Values outside every configured range cannot be marked and are
/// only tracked in the holder map (a static allocation of them fails on the range
/// check anyway); a value already marked stays marked.
fn mark(allocators: &mut Allocators, value: Claim) {
    match value {
        Claim::Ip(ip) => {
            if let Some(f) = allocators.family_mut(IpFamily::of(&ip)) {
                let _ = f.restore(ip);
            }
        }
        Claim::NodePort(p) => {
            let _ = allocators.node_ports_mut().allocate(p);
        }
    }
}

mod lifecycle;
pub mod namespaces;
pub mod retention;

#[cfg(test)]
mod tests;
