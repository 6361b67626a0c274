//! ClusterIP allocation: one range ([`CidrAllocator`]) and one family's set of ranges
//! ([`FamilyAllocator`], upstream's `MetaAllocator`), AL-2.3 to AL-3.
//!
//! A range hands out addresses by offset from its first usable address. Dynamic picks
//! start at a random offset in the upper (dynamic) band and wrap within it; only when it
//! is full do they search the lower (static) band the same way. Static requests may use
//! any usable address. The family allocator keeps ranges in the order they were added,
//! mirrors every claim into each range containing the address (so overlapping
//! ServiceCIDRs can never hand out one address twice) and implements upstream's error
//! choices: static outside every ready range → `ErrMismatchedNetwork`, all ranges full →
//! `ErrFull`.

use std::net::IpAddr;

use crate::bitmap::Slots;
use crate::error::{IpAllocError, RangeError};
use crate::range::{Cidr, IpFamily, cidr_band_offset, ip_to_u128, u128_to_ip, usable_size};
use crate::range_scope::{self, NamespaceView, RangeScope};
use crate::rng::Rng;

/// A range as a refusal names it: its CIDR and ServiceCIDRs.
fn describe_range(r: &CidrAllocator) -> String {
    if r.objects().is_empty() {
        r.cidr().to_string()
    } else {
        format!("{} (ServiceCIDR {})", r.cidr(), r.objects().join(", "))
    }
}

/// Allocation state of one Service CIDR.
#[derive(Debug, Clone)]
pub struct CidrAllocator {
    cidr: Cidr,
    first: u128,
    size: u64,
    band_offset: u64,
    slots: Slots,
    ready: bool,
    /// The namespaces it serves, and the ServiceCIDRs naming it (for refusals).
    scope: RangeScope,
    objects: Vec<String>,
}

impl CidrAllocator {
    /// A range over `cidr`. IPv6 prefixes shorter than /64 are refused like upstream's
    /// `NewIPAllocator`; every other CIDR is accepted (a /31, /32 or /128 has no usable
    /// address and answers `range is full`).
    pub fn new(cidr: Cidr) -> Result<Self, RangeError> {
        if cidr.family() == IpFamily::V6 && cidr.prefix() < 64 {
            return Err(RangeError::PrefixTooShort(cidr.prefix()));
        }
        let size = usable_size(&cidr);
        // The offset never exceeds the usable size for prefixes that have a band, but
        // clamp anyway so the band arithmetic below cannot underflow.
        let band_offset = cidr_band_offset(&cidr).min(size);
        Ok(Self {
            cidr,
            first: cidr.network_u128() + 1,
            size,
            band_offset,
            slots: Slots::new(size),
            ready: true,
            scope: RangeScope::Everyone,
            objects: Vec::new(),
        })
    }

    /// Parse and build.
    pub fn parse(cidr: &str) -> Result<Self, String> {
        let c = Cidr::parse(cidr)?;
        Self::new(c).map_err(|e| e.to_string())
    }

    /// The namespaces it serves.
    pub fn scope(&self) -> &RangeScope {
        &self.scope
    }

    /// The ServiceCIDR objects naming it (empty in flags mode).
    pub fn objects(&self) -> &[String] {
        &self.objects
    }

    /// The CIDR.
    pub fn cidr(&self) -> &Cidr {
        &self.cidr
    }

    /// The family.
    pub fn family(&self) -> IpFamily {
        self.cidr.family()
    }

    /// Usable addresses.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Size of the lower (static) band.
    pub fn band_offset(&self) -> u64 {
        self.band_offset
    }

    /// Addresses allocated.
    pub fn used(&self) -> u64 {
        self.slots.used()
    }

    /// Addresses free.
    pub fn free(&self) -> u64 {
        self.size - self.used()
    }

    /// Ready ranges serve allocations; a not-ready (or terminating) ServiceCIDR does not.
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Mark the range ready or not ready.
    pub fn set_ready(&mut self, ready: bool) {
        self.ready = ready;
    }

    /// First usable address (network + 1).
    pub fn first_address(&self) -> IpAddr {
        u128_to_ip(self.family(), self.first)
    }

    /// Last usable address (broadcast − 1 for IPv4, broadcast for IPv6), if any.
    pub fn last_address(&self) -> Option<IpAddr> {
        (self.size > 0).then(|| self.ip_at(self.size - 1))
    }

    /// Address at `offset` from the first usable address.
    pub fn ip_at(&self, offset: u64) -> IpAddr {
        u128_to_ip(self.family(), self.first + u128::from(offset))
    }

    /// Offset of `ip` if it is a usable address of this range (upstream "contains":
    /// network address and IPv4 broadcast excluded).
    pub fn offset_of(&self, ip: IpAddr) -> Option<u64> {
        if IpFamily::of(&ip) != self.family() {
            return None;
        }
        let v = ip_to_u128(ip);
        if v < self.first {
            return None;
        }
        let off = v - self.first;
        (off < u128::from(self.size)).then_some(off as u64)
    }

    /// Is `ip` allocated here?
    pub fn has(&self, ip: IpAddr) -> bool {
        self.offset_of(ip).is_some_and(|o| self.slots.has(o))
    }

    /// Static allocation of `ip`.
    pub fn allocate(&mut self, ip: IpAddr) -> Result<(), IpAllocError> {
        if !self.ready {
            return Err(IpAllocError::NotReady);
        }
        let off = self.offset_of(ip).ok_or_else(|| IpAllocError::NotInRange {
            ip,
            valid_range: self.cidr.to_string(),
        })?;
        if self.slots.set(off) {
            Ok(())
        } else {
            Err(IpAllocError::Allocated)
        }
    }

    /// Dynamic allocation: upper band from a random start, then the lower band.
    pub fn allocate_next(&mut self, rng: &mut Rng) -> Result<IpAddr, IpAllocError> {
        if !self.ready {
            return Err(IpAllocError::NotReady);
        }
        let off = self.pick_free(rng).ok_or(IpAllocError::Full)?;
        self.slots.set(off);
        Ok(self.ip_at(off))
    }

    /// The offset `allocate_next` would take, without taking it.
    fn pick_free(&self, rng: &mut Rng) -> Option<u64> {
        let (lo, hi) = (self.band_offset, self.size);
        if hi > lo {
            let start = lo + rng.below(hi - lo);
            if let Some(o) = self.slots.first_free_wrapping(lo, hi, start) {
                return Some(o);
            }
        }
        if lo > 0 {
            let start = rng.below(lo);
            return self.slots.first_free_wrapping(0, lo, start);
        }
        None
    }

    /// Release `ip`; releasing a free or foreign address is a no-op (returns `false`).
    pub fn release(&mut self, ip: IpAddr) -> bool {
        self.offset_of(ip).is_some_and(|o| self.slots.clear(o))
    }

    /// Mark `ip` taken without any checks (used to mirror claims of overlapping ranges).
    fn mark(&mut self, ip: IpAddr) {
        if let Some(o) = self.offset_of(ip) {
            self.slots.set(o);
        }
    }

    /// Allocated addresses in ascending order.
    pub fn allocated(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.slots.taken().map(|o| self.ip_at(o))
    }

    /// Is `ip` in the upper (dynamic) band?
    pub fn in_upper_band(&self, ip: IpAddr) -> bool {
        self.offset_of(ip).is_some_and(|o| o >= self.band_offset)
    }
}

/// All ranges of one family: upstream's `MetaAllocator`.
#[derive(Debug, Clone)]
pub struct FamilyAllocator {
    family: IpFamily,
    ranges: Vec<CidrAllocator>,
    /// The namespace of the request being allocated for, while one is (see
    /// [`crate::range_scope`]); `None`: every range serves.
    namespace: Option<NamespaceView>,
}

impl FamilyAllocator {
    /// A family with no ranges yet.
    pub fn new(family: IpFamily) -> Self {
        Self {
            family,
            ranges: Vec::new(),
            namespace: None,
        }
    }

    /// The family.
    pub fn family(&self) -> IpFamily {
        self.family
    }

    /// The ranges, in the order added.
    pub fn ranges(&self) -> &[CidrAllocator] {
        &self.ranges
    }

    /// Add a range (a ServiceCIDR). The same CIDR twice shares one allocator. Addresses
    /// already held by overlapping ranges are mirrored into the new one.
    pub fn add_range(&mut self, mut range: CidrAllocator) -> Result<(), String> {
        if range.family() != self.family {
            return Err(format!("{} is not an {} range", range.cidr(), self.family));
        }
        if self.ranges.iter().any(|r| r.cidr() == range.cidr()) {
            return Ok(());
        }
        for r in &self.ranges {
            for ip in r.allocated() {
                range.mark(ip);
            }
        }
        self.ranges.push(range);
        Ok(())
    }

    /// Remove the range with this CIDR (its ServiceCIDR objects are all gone); the
    /// addresses it held stay held by any other range containing them.
    pub fn remove_range(&mut self, cidr: &Cidr) -> bool {
        let before = self.ranges.len();
        self.ranges.retain(|r| r.cidr() != cidr);
        self.ranges.len() != before
    }

    /// Set which namespaces the range with this CIDR serves, and the ServiceCIDRs
    /// naming it; `false` if there is none.
    pub fn set_scope(&mut self, cidr: &Cidr, scope: RangeScope, objects: &[String]) -> bool {
        self.ranges
            .iter_mut()
            .find(|r| r.cidr() == cidr)
            .map(|r| {
                r.scope = scope;
                r.objects = objects.to_vec();
            })
            .is_some()
    }

    /// Allocate for Services of `namespace` from now on (`None`: for anyone).
    pub fn set_namespace(&mut self, namespace: Option<NamespaceView>) {
        self.namespace = namespace;
    }

    /// Which ranges serve the current namespace (all of them without one).
    pub fn serving(&self) -> Vec<bool> {
        match &self.namespace {
            None => vec![true; self.ranges.len()],
            Some(ns) => {
                let scopes: Vec<(&RangeScope, bool)> = self
                    .ranges
                    .iter()
                    .map(|r| (&r.scope, r.is_ready()))
                    .collect();
                range_scope::serving(&scopes, ns)
            }
        }
    }

    /// Why `ip`, in some ready range, is refused to the current namespace.
    fn not_served(&self, ip: IpAddr) -> Option<IpAllocError> {
        let ns = self.namespace.as_ref()?;
        let serving = self.serving();
        let served = self
            .ranges
            .iter()
            .zip(&serving)
            .any(|(r, s)| *s && r.is_ready() && r.offset_of(ip).is_some());
        if served {
            return None;
        }
        let own: Vec<String> = self
            .ranges
            .iter()
            .zip(&serving)
            .filter(|(r, s)| **s && r.is_ready())
            .map(|(r, _)| describe_range(r))
            .collect();
        Some(IpAllocError::NotServed {
            namespace: ns.name.clone(),
            serving: if own.is_empty() {
                "none".to_owned()
            } else {
                own.join(", ")
            },
        })
    }

    /// Set readiness of the range with this CIDR; `false` if there is none.
    pub fn set_ready(&mut self, cidr: &Cidr, ready: bool) -> bool {
        self.ranges
            .iter_mut()
            .find(|r| r.cidr() == cidr)
            .map(|r| r.set_ready(ready))
            .is_some()
    }

    /// Is `ip` a usable address of any range, ready or not?
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|r| r.offset_of(ip).is_some())
    }

    /// Is `ip` allocated?
    pub fn has(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|r| r.has(ip))
    }

    /// Static allocation: some *ready* range must contain `ip`
    /// (else `ErrMismatchedNetwork`); any range holding it → `ErrAllocated`.
    pub fn allocate(&mut self, ip: IpAddr) -> Result<(), IpAllocError> {
        if !self
            .ranges
            .iter()
            .any(|r| r.is_ready() && r.offset_of(ip).is_some())
        {
            return Err(IpAllocError::MismatchedNetwork);
        }
        if let Some(refusal) = self.not_served(ip) {
            return Err(refusal);
        }
        if self.has(ip) {
            return Err(IpAllocError::Allocated);
        }
        for r in &mut self.ranges {
            r.mark(ip);
        }
        Ok(())
    }

    /// Record an address an existing Service already holds (rebuild/repair): like
    /// [`Self::allocate`] but readiness is ignored, since a terminating ServiceCIDR
    /// still owns the addresses inside it.
    pub fn restore(&mut self, ip: IpAddr) -> Result<(), IpAllocError> {
        if !self.contains(ip) {
            return Err(IpAllocError::MismatchedNetwork);
        }
        if self.has(ip) {
            return Err(IpAllocError::Allocated);
        }
        for r in &mut self.ranges {
            r.mark(ip);
        }
        Ok(())
    }

    /// Dynamic allocation: ranges in order; full or not-ready ranges are skipped;
    /// all exhausted → `ErrFull`.
    pub fn allocate_next(&mut self, rng: &mut Rng) -> Result<IpAddr, IpAllocError> {
        // Without a namespace every range serves: no scope to compute on this path.
        let serving = self.namespace.as_ref().map(|_| self.serving());
        if let (Some(ns), Some(serving)) = (&self.namespace, &serving)
            && !serving.iter().any(|s| *s)
        {
            return Err(IpAllocError::NoneServes {
                namespace: ns.name.clone(),
            });
        }
        for i in 0..self.ranges.len() {
            if serving
                .as_ref()
                .is_some_and(|s| !s.get(i).copied().unwrap_or(false))
            {
                continue;
            }
            match self.ranges[i].allocate_next(rng) {
                Ok(ip) => {
                    if self.ranges.len() > 1 {
                        for (j, r) in self.ranges.iter_mut().enumerate() {
                            if j != i {
                                r.mark(ip);
                            }
                        }
                    }
                    return Ok(ip);
                }
                Err(IpAllocError::Full | IpAllocError::NotReady) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(IpAllocError::Full)
    }

    /// Release `ip` from every range containing it, ready or not; `false` if it was free.
    pub fn release(&mut self, ip: IpAddr) -> bool {
        let mut any = false;
        for r in &mut self.ranges {
            any |= r.release(ip);
        }
        any
    }

    /// The network address of the first range: upstream's dry-run answer for a dynamic pick.
    pub fn dry_run_address(&self) -> Option<IpAddr> {
        self.ranges.first().map(|r| r.cidr().network())
    }

    /// All allocated addresses (deduplicated across overlapping ranges).
    pub fn allocated(&self) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self.ranges.iter().flat_map(|r| r.allocated()).collect();
        v.sort();
        v.dedup();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn lower_band_used_only_when_upper_full() {
        let mut r = CidrAllocator::parse("192.168.1.0/24").unwrap();
        let mut rng = Rng::new(1);
        for _ in 0..(254 - 16) {
            let a = r.allocate_next(&mut rng).unwrap();
            assert!(r.in_upper_band(a), "{a}");
        }
        let a = r.allocate_next(&mut rng).unwrap();
        assert!(!r.in_upper_band(a));
        for _ in 0..15 {
            r.allocate_next(&mut rng).unwrap();
        }
        assert_eq!(r.allocate_next(&mut rng), Err(IpAllocError::Full));
    }

    #[test]
    fn overlapping_ranges_share_claims() {
        let mut f = FamilyAllocator::new(IpFamily::V4);
        f.add_range(CidrAllocator::parse("10.0.1.0/24").unwrap())
            .unwrap();
        f.add_range(CidrAllocator::parse("10.0.0.0/16").unwrap())
            .unwrap();
        f.allocate(ip("10.0.1.5")).unwrap();
        assert_eq!(f.allocate(ip("10.0.1.5")), Err(IpAllocError::Allocated));
        // network address of the /24 is usable through the /16
        f.allocate(ip("10.0.1.0")).unwrap();
        assert!(f.ranges()[0].has(ip("10.0.1.5")) && f.ranges()[1].has(ip("10.0.1.5")));
        assert_eq!(
            f.allocate(ip("10.1.0.0")),
            Err(IpAllocError::MismatchedNetwork)
        );
        assert!(f.release(ip("10.0.1.5")));
        assert!(!f.has(ip("10.0.1.5")));
    }

    #[test]
    fn not_ready_range_refuses() {
        let mut f = FamilyAllocator::new(IpFamily::V4);
        f.add_range(CidrAllocator::parse("10.0.0.0/24").unwrap())
            .unwrap();
        f.set_ready(&Cidr::parse("10.0.0.0/24").unwrap(), false);
        assert_eq!(
            f.allocate(ip("10.0.0.5")),
            Err(IpAllocError::MismatchedNetwork)
        );
        assert_eq!(f.allocate_next(&mut Rng::new(0)), Err(IpAllocError::Full));
    }
}
