//! Whole-Service allocation: create, update and delete, as the Service REST storage
//! does it (AL-5, AL-7.2 to AL-7.4; upstream `storage/alloc.go`).
//!
//! [`Allocators`] bundles the per-family ClusterIP allocators, the NodePort allocator and
//! the seeded RNG. Every operation returns a [`Transaction`]: values it allocated (to roll
//! back with [`Allocators::revert`] if a later step such as the API write fails) and
//! values to release only once the write succeeded ([`Allocators::commit`]). A failed
//! operation has already rolled back its own partial allocations.

use crate::range_scope::NamespaceView;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;

use crate::error::{FieldError, FieldValue, IpAllocError, PortAllocError, ServiceError};
use crate::families::{
    ClusterFamilies, drop_type_dependent_fields, init_ip_family_fields,
    is_matching_prefer_dual_stack, normalize_cluster_ips, patch_allocated_values,
};
use crate::ip_allocator::{CidrAllocator, FamilyAllocator};
use crate::node_port::PortAllocator;
use crate::range::{Cidr, IpFamily, parse_ip_sloppy};
use crate::rng::Rng;
use crate::view::{CLUSTER_IP_NONE, SvcView, TYPE_CLUSTER_IP, TYPE_EXTERNAL_NAME};

/// One allocated value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Claim {
    /// A ClusterIP.
    Ip(IpAddr),
    /// A NodePort or healthCheckNodePort.
    NodePort(i32),
}

/// What an operation allocated and what it will release on commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transaction {
    allocated: Vec<Claim>,
    release: Vec<Claim>,
    dry_run: bool,
}

impl Transaction {
    fn new(dry_run: bool) -> Self {
        Self {
            dry_run,
            ..Self::default()
        }
    }

    /// Values newly allocated (released again by [`Allocators::revert`]).
    pub fn allocated(&self) -> &[Claim] {
        &self.allocated
    }

    /// Values released by [`Allocators::commit`].
    pub fn to_release(&self) -> &[Claim] {
        &self.release
    }

    /// Was this a dry run (nothing reserved)?
    pub fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    fn dry_run_next_port(&mut self) -> i32 {
        let last = self
            .allocated
            .iter()
            .filter_map(|c| match c {
                Claim::NodePort(p) => Some(*p),
                Claim::Ip(_) => None,
            })
            .max()
            .unwrap_or(32768);
        self.allocated.push(Claim::NodePort(last + 1));
        last + 1
    }
}

/// All allocators of a cluster plus the RNG that drives dynamic picks.
#[derive(Debug, Clone)]
pub struct Allocators {
    v4: Option<FamilyAllocator>,
    v6: Option<FamilyAllocator>,
    primary: IpFamily,
    node_ports: PortAllocator,
    rng: Rng,
}

impl Allocators {
    /// Build from the primary family's allocator, an optional secondary of the other
    /// family, the NodePort allocator and an RNG seed.
    pub fn new(
        primary: FamilyAllocator,
        secondary: Option<FamilyAllocator>,
        node_ports: PortAllocator,
        seed: u64,
    ) -> Result<Self, String> {
        let fam = primary.family();
        if secondary.as_ref().is_some_and(|s| s.family() == fam) {
            return Err("primary and secondary ranges must be of different IP family".into());
        }
        let (mut v4, mut v6) = (None, None);
        for f in std::iter::once(primary).chain(secondary) {
            match f.family() {
                IpFamily::V4 => v4 = Some(f),
                IpFamily::V6 => v6 = Some(f),
            }
        }
        Ok(Self {
            v4,
            v6,
            primary: fam,
            node_ports,
            rng: Rng::new(seed),
        })
    }

    /// Configured families and the primary one.
    pub fn families(&self) -> ClusterFamilies {
        ClusterFamilies {
            primary: self.primary,
            has_v4: self.v4.is_some(),
            has_v6: self.v6.is_some(),
        }
    }

    /// The allocator of family `f`.
    pub fn family(&self, f: IpFamily) -> Option<&FamilyAllocator> {
        match f {
            IpFamily::V4 => self.v4.as_ref(),
            IpFamily::V6 => self.v6.as_ref(),
        }
    }

    /// Mutable allocator of family `f` (to add ServiceCIDRs or change readiness).
    pub fn family_mut(&mut self, f: IpFamily) -> Option<&mut FamilyAllocator> {
        match f {
            IpFamily::V4 => self.v4.as_mut(),
            IpFamily::V6 => self.v6.as_mut(),
        }
    }

    /// Make the ClusterIP ranges exactly `ranges` (the cluster's ServiceCIDRs, see
    /// [`crate::service_cidrs`]): ranges still declared keep what they hold and take
    /// the new readiness, new ones start empty, ranges no longer declared go. A family
    /// left without ranges hands out nothing (the primary family's allocator stays, so
    /// requests get upstream's errors); `primary` becomes the primary family when it has
    /// ranges. The caller marks again every value it knows to be held, so a new range
    /// learns the addresses inside it that are taken. Returns the CIDRs that could not
    /// be used (an IPv6 prefix shorter than /64, as upstream refuses).
    pub fn set_ranges(
        &mut self,
        ranges: &[crate::service_cidrs::ClusterRange],
        primary: Option<IpFamily>,
    ) -> Vec<(Cidr, String)> {
        let mut refused = Vec::new();
        for fam in [IpFamily::V4, IpFamily::V6] {
            let wanted: Vec<&crate::service_cidrs::ClusterRange> =
                ranges.iter().filter(|r| r.cidr.family() == fam).collect();
            let slot = match fam {
                IpFamily::V4 => &mut self.v4,
                IpFamily::V6 => &mut self.v6,
            };
            if wanted.is_empty() && fam != self.primary {
                *slot = None;
                continue;
            }
            let f = slot.get_or_insert_with(|| FamilyAllocator::new(fam));
            let gone: Vec<Cidr> = f
                .ranges()
                .iter()
                .map(|r| *r.cidr())
                .filter(|c| !wanted.iter().any(|w| w.cidr == *c))
                .collect();
            for c in gone {
                f.remove_range(&c);
            }
            for w in wanted {
                if !f.ranges().iter().any(|r| *r.cidr() == w.cidr) {
                    match CidrAllocator::new(w.cidr) {
                        Ok(r) => {
                            if let Err(e) = f.add_range(r) {
                                refused.push((w.cidr, e));
                                continue;
                            }
                        }
                        Err(e) => {
                            refused.push((w.cidr, e.to_string()));
                            continue;
                        }
                    }
                }
                f.set_ready(&w.cidr, w.ready);
                f.set_scope(&w.cidr, w.scope.clone(), &w.objects);
            }
        }
        if let Some(p) = primary
            && self.family(p).is_some_and(|f| !f.ranges().is_empty())
        {
            self.primary = p;
        }
        refused
    }

    /// Does some range serve only the namespaces a ServiceCIDR selector picks?
    pub fn selects_namespaces(&self) -> bool {
        [&self.v4, &self.v6].into_iter().flatten().any(|f| {
            f.ranges()
                .iter()
                .any(|r| *r.scope() != crate::range_scope::RangeScope::Everyone)
        })
    }

    /// Run `f` allocating for a Service in `namespace`: ClusterIPs come only from the
    /// ranges serving it ([`crate::range_scope`]). Every range serves outside `f`.
    pub fn for_namespace<T>(
        &mut self,
        namespace: &NamespaceView,
        f: impl FnOnce(&mut Self) -> T,
    ) -> T {
        // Without a selecting range every range serves everyone: nothing to scope.
        if !self.selects_namespaces() {
            return f(self);
        }
        for fam in [&mut self.v4, &mut self.v6].into_iter().flatten() {
            fam.set_namespace(Some(namespace.clone()));
        }
        let out = f(self);
        for fam in [&mut self.v4, &mut self.v6].into_iter().flatten() {
            fam.set_namespace(None);
        }
        out
    }

    /// The NodePort allocator.
    pub fn node_ports(&self) -> &PortAllocator {
        &self.node_ports
    }

    /// Mutable NodePort allocator.
    pub fn node_ports_mut(&mut self) -> &mut PortAllocator {
        &mut self.node_ports
    }

    /// The RNG.
    pub fn rng_mut(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// Is this value currently allocated?
    pub fn has(&self, c: Claim) -> bool {
        match c {
            Claim::Ip(ip) => self.family(IpFamily::of(&ip)).is_some_and(|f| f.has(ip)),
            Claim::NodePort(p) => self.node_ports.has(p),
        }
    }

    /// Release one value; `false` if it was not allocated.
    pub fn release_claim(&mut self, c: Claim) -> bool {
        match c {
            Claim::Ip(ip) => self
                .family_mut(IpFamily::of(&ip))
                .is_some_and(|f| f.release(ip)),
            Claim::NodePort(p) => self.node_ports.release(p),
        }
    }

    /// Apply the deferred releases of a successful operation.
    pub fn commit(&mut self, txn: Transaction) {
        if txn.dry_run {
            return;
        }
        for c in txn.release {
            self.release_claim(c);
        }
    }

    /// Roll back what a (later failed) operation allocated.
    pub fn revert(&mut self, txn: Transaction) {
        if txn.dry_run {
            return;
        }
        for c in txn.allocated {
            self.release_claim(c);
        }
    }

    // ---- ClusterIPs -------------------------------------------------------------

    fn alloc_ip(
        &mut self,
        fam: IpFamily,
        ip: &str,
        txn: &mut Transaction,
    ) -> Result<IpAddr, AllocIpFailure> {
        let dry = txn.dry_run;
        let Self { v4, v6, rng, .. } = self;
        let alloc = match fam {
            IpFamily::V4 => v4.as_mut(),
            IpFamily::V6 => v6.as_mut(),
        };
        // initIPFamilyFields has checked the family is configured; if a caller skipped it
        // this reports the same as a range that does not contain the address.
        let Some(alloc) = alloc else {
            return Err(if ip.is_empty() {
                AllocIpFailure::Dynamic(IpAllocError::Full)
            } else {
                AllocIpFailure::Static(IpAllocError::MismatchedNetwork)
            });
        };
        if ip.is_empty() {
            if dry {
                return alloc
                    .dry_run_address()
                    .ok_or(AllocIpFailure::Dynamic(IpAllocError::Full));
            }
            let a = alloc.allocate_next(rng).map_err(AllocIpFailure::Dynamic)?;
            txn.allocated.push(Claim::Ip(a));
            return Ok(a);
        }
        let Some(a) = parse_ip_sloppy(ip) else {
            return Err(AllocIpFailure::Static(IpAllocError::MismatchedNetwork));
        };
        if dry {
            // AL-5.5: upstream checks a dry run against one of the family's ranges (any
            // one; with a single range, that range) and words a miss as that range's
            // `ErrNotInRange`. An address in any ready range passes, as a real create
            // would; a miss names the family's first range.
            let serving = alloc.serving();
            return if alloc
                .ranges()
                .iter()
                .zip(&serving)
                .any(|(r, s)| *s && r.is_ready() && r.offset_of(a).is_some())
            {
                Ok(a)
            } else {
                Err(AllocIpFailure::Static(match alloc.ranges().first() {
                    Some(r) => IpAllocError::NotInRange {
                        ip: a,
                        valid_range: r.cidr().to_string(),
                    },
                    None => IpAllocError::MismatchedNetwork,
                }))
            };
        }
        alloc.allocate(a).map_err(AllocIpFailure::Static)?;
        txn.allocated.push(Claim::Ip(a));
        Ok(a)
    }

    /// upstream `allocIPs`: allocate `(index, family, requested)` entries; on failure the
    /// entries allocated so far stay in `txn` for the caller to revert.
    fn alloc_ips(
        &mut self,
        v: &mut SvcView,
        todo: &[(usize, IpFamily)],
        txn: &mut Transaction,
    ) -> Result<(), ServiceError> {
        let mut results = Vec::with_capacity(todo.len());
        for &(i, fam) in todo {
            let requested = v.cluster_ips[i].clone();
            match self.alloc_ip(fam, &requested, txn) {
                Ok(a) => results.push((i, a)),
                Err(AllocIpFailure::Dynamic(e)) => {
                    return Err(ServiceError::Internal(format!(
                        "failed to allocate a serviceIP: {e}"
                    )));
                }
                Err(AllocIpFailure::Static(e)) => {
                    return Err(ServiceError::invalid(
                        &v.name,
                        FieldError::invalid(
                            "spec.clusterIPs",
                            FieldValue::StrList(Some(v.cluster_ips.clone())),
                            format!("failed to allocate IP {requested}: {e}"),
                        ),
                    ));
                }
            }
        }
        for (i, a) in results {
            if v.cluster_ips[i].is_empty() {
                v.cluster_ips[i] = a.to_string();
            }
            if i == 0 {
                v.cluster_ip = v.cluster_ips[0].clone();
            }
        }
        Ok(())
    }

    /// upstream `allocClusterIPs`.
    fn alloc_cluster_ips(
        &mut self,
        v: &mut SvcView,
        txn: &mut Transaction,
    ) -> Result<(), ServiceError> {
        if v.is_external_name()
            || v.cluster_ips
                .first()
                .is_some_and(|ip| ip == CLUSTER_IP_NONE)
        {
            return Ok(());
        }
        let fams: Vec<IpFamily> = v
            .ip_families
            .iter()
            .filter_map(|f| IpFamily::parse(f))
            .collect();
        while v.cluster_ips.len() < fams.len() {
            v.cluster_ips.push(String::new());
        }
        let todo: Vec<(usize, IpFamily)> = fams.into_iter().enumerate().collect();
        self.alloc_ips(v, &todo, txn)
    }

    // ---- NodePorts ---------------------------------------------------------------

    fn alloc_port(&mut self, port: i32, txn: &mut Transaction) -> Result<(), PortAllocError> {
        if txn.dry_run {
            if !self.node_ports.range().contains(port) {
                return Err(PortAllocError::NotInRange {
                    valid_ports: self.node_ports.range().to_string(),
                });
            }
            if self.node_ports.has(port) || txn.allocated.contains(&Claim::NodePort(port)) {
                return Err(PortAllocError::Allocated);
            }
        } else {
            self.node_ports.allocate(port)?;
        }
        txn.allocated.push(Claim::NodePort(port));
        Ok(())
    }

    fn alloc_next_port(&mut self, txn: &mut Transaction) -> Result<i32, PortAllocError> {
        if txn.dry_run {
            return Ok(txn.dry_run_next_port());
        }
        let p = self.node_ports.allocate_next(&mut self.rng)?;
        txn.allocated.push(Claim::NodePort(p));
        Ok(p)
    }

    /// upstream `initNodePorts` (AL-7.2).
    fn init_node_ports(
        &mut self,
        v: &mut SvcView,
        txn: &mut Transaction,
    ) -> Result<(), ServiceError> {
        let mut by_port: Vec<(i32, i32)> = Vec::new();
        let should = v.should_allocate_node_ports();
        for i in 0..v.ports.len() {
            let (port, node_port) = (v.ports[i].port, v.ports[i].node_port);
            if node_port == 0 && !should {
                continue;
            }
            let allocated = by_port
                .iter()
                .find(|(p, _)| *p == port)
                .map_or(0, |(_, np)| *np);
            if allocated == 0 {
                let requested = v
                    .ports
                    .iter()
                    .find(|p| p.port == port && p.node_port != 0)
                    .map_or(0, |p| p.node_port);
                if requested != 0 {
                    self.alloc_port(requested, txn)
                        .map_err(|e| node_port_invalid(v, i, requested, &e))?;
                    v.ports[i].node_port = requested;
                    by_port.push((port, requested));
                } else {
                    let np = self.alloc_next_port(txn).map_err(|e| {
                        ServiceError::Internal(format!("failed to allocate a nodePort: {e}"))
                    })?;
                    v.ports[i].node_port = np;
                    by_port.push((port, np));
                }
            } else if node_port != allocated {
                if node_port == 0 {
                    v.ports[i].node_port = allocated;
                } else {
                    self.alloc_port(node_port, txn)
                        .map_err(|e| node_port_invalid(v, i, node_port, &e))?;
                }
            }
        }
        Ok(())
    }

    /// upstream `allocHealthCheckNodePort` (AL-7.3); failures are 500s.
    fn alloc_health_check_node_port(
        &mut self,
        v: &mut SvcView,
        txn: &mut Transaction,
    ) -> Result<(), ServiceError> {
        let hc = v.health_check_node_port;
        if hc != 0 {
            self.alloc_port(hc, txn).map_err(|e| {
                ServiceError::Internal(format!(
                    "failed to allocate requested HealthCheck NodePort {hc}: {e}"
                ))
            })?;
        } else {
            let p = self.alloc_next_port(txn).map_err(|e| {
                ServiceError::Internal(format!("failed to allocate a HealthCheck NodePort 0: {e}"))
            })?;
            v.health_check_node_port = p;
        }
        Ok(())
    }

    // ---- create / update / delete ------------------------------------------------

    /// Create (`BeginCreate`): normalise, resolve families, allocate ClusterIPs, NodePorts
    /// and the healthCheckNodePort. Fields are filled in `v`.
    pub fn create_view(
        &mut self,
        v: &mut SvcView,
        dry_run: bool,
    ) -> Result<Transaction, ServiceError> {
        normalize_cluster_ips(v, None);
        let fams = self.families();
        init_ip_family_fields(v, None, &fams).map_err(|errors| ServiceError::Invalid {
            name: v.name.clone(),
            errors,
        })?;
        let mut txn = Transaction::new(dry_run);
        let res = self.create_allocations(v, &mut txn);
        match res {
            Ok(()) => Ok(txn),
            Err(e) => {
                self.revert(txn);
                Err(e)
            }
        }
    }

    fn create_allocations(
        &mut self,
        v: &mut SvcView,
        txn: &mut Transaction,
    ) -> Result<(), ServiceError> {
        self.alloc_cluster_ips(v, txn)?;
        if v.needs_node_port() {
            self.init_node_ports(v, txn)?;
        }
        if v.needs_health_check() {
            self.alloc_health_check_node_port(v, txn)?;
        }
        Ok(())
    }

    /// [`Self::create_view`] on a k8s Service; the allocated fields are written into `svc`.
    pub fn allocate_create(
        &mut self,
        svc: &mut Service,
        dry_run: bool,
    ) -> Result<Transaction, ServiceError> {
        let mut v = SvcView::from_service(svc);
        let txn = self.create_view(&mut v, dry_run)?;
        v.write_to(svc);
        Ok(txn)
    }

    /// Update (`BeginUpdate` plus the allocation part of `PrepareForUpdate`):
    /// keep omitted allocated values, normalise, resolve families, then allocate/release
    /// for type changes, dual-stack upgrades/downgrades, nodePort and
    /// healthCheckNodePort changes. Releases are deferred to [`Self::commit`].
    pub fn update_view(
        &mut self,
        new: &mut SvcView,
        old: &SvcView,
        dry_run: bool,
    ) -> Result<Transaction, ServiceError> {
        patch_allocated_values(new, old);
        normalize_cluster_ips(new, Some(old));
        drop_type_dependent_fields(new, old);
        let fams = self.families();
        init_ip_family_fields(new, Some(old), &fams).map_err(|errors| ServiceError::Invalid {
            name: new.name.clone(),
            errors,
        })?;
        let mut txn = Transaction::new(dry_run);
        match self.update_allocations(new, old, &mut txn) {
            Ok(()) => Ok(txn),
            Err(e) => {
                self.revert(txn);
                Err(e)
            }
        }
    }

    /// [`Self::update_view`] on k8s Services; allocated fields are written into `new`.
    pub fn allocate_update(
        &mut self,
        new: &mut Service,
        old: &Service,
        dry_run: bool,
    ) -> Result<Transaction, ServiceError> {
        let mut v = SvcView::from_service(new);
        let o = SvcView::from_service(old);
        let txn = self.update_view(&mut v, &o, dry_run)?;
        v.write_to(new);
        Ok(txn)
    }

    fn update_allocations(
        &mut self,
        new: &mut SvcView,
        old: &SvcView,
        txn: &mut Transaction,
    ) -> Result<(), ServiceError> {
        self.update_cluster_ips(new, old, txn)?;
        self.update_node_ports(new, old, txn)?;
        // updateHealthCheckNodePort
        match (old.needs_health_check(), new.needs_health_check()) {
            (false, true) => self.alloc_health_check_node_port(new, txn)?,
            (true, false) => txn
                .release
                .push(Claim::NodePort(old.health_check_node_port)),
            _ => {}
        }
        Ok(())
    }

    /// upstream `updateClusterIPs`.
    fn update_cluster_ips(
        &mut self,
        new: &mut SvcView,
        old: &SvcView,
        txn: &mut Transaction,
    ) -> Result<(), ServiceError> {
        if is_matching_prefer_dual_stack(new, Some(old)) {
            return Ok(());
        }
        if old.type_ == TYPE_EXTERNAL_NAME && !new.is_external_name() {
            return self.alloc_cluster_ips(new, txn);
        }
        if old
            .cluster_ips
            .first()
            .is_some_and(|ip| ip == CLUSTER_IP_NONE)
        {
            return Ok(());
        }
        if !old.is_external_name() && new.is_external_name() {
            for ip in old.cluster_ips.iter().take(old.ip_families.len()) {
                if let Some(a) = parse_ip_sloppy(ip) {
                    txn.release.push(Claim::Ip(a));
                }
            }
            return Ok(());
        }
        let (o, n) = (old.ip_families.len(), new.ip_families.len());
        if o == 1 && n == 2 {
            if new.cluster_ips.len() < 2 {
                new.cluster_ips.resize(2, String::new());
            }
            let Some(fam) = IpFamily::parse(&new.ip_families[1]) else {
                return Ok(());
            };
            return self.alloc_ips(new, &[(1, fam)], txn);
        }
        if o == 2
            && n == 1
            && let Some(a) = old.cluster_ips.get(1).and_then(|ip| parse_ip_sloppy(ip))
        {
            txn.release.push(Claim::Ip(a));
        }
        Ok(())
    }

    /// upstream `txnUpdateNodePorts` / `updateNodePorts`.
    fn update_node_ports(
        &mut self,
        new: &mut SvcView,
        old: &SvcView,
        txn: &mut Transaction,
    ) -> Result<(), ServiceError> {
        if old.needs_node_port() && (new.is_external_name() || new.type_ == TYPE_CLUSTER_IP) {
            for p in old.node_ports() {
                txn.release.push(Claim::NodePort(p));
            }
        }
        if !new.needs_node_port() {
            return Ok(());
        }
        let old_numbers = old.node_ports();
        let should = new.should_allocate_node_ports();
        let mut seen: Vec<(String, i32)> = Vec::new();
        let mut port_allocated: Vec<i32> = Vec::new();
        for i in 0..new.ports.len() {
            let np = new.ports[i].node_port;
            if np == 0 && !should {
                continue;
            }
            let value = if np != 0 {
                if !old_numbers.contains(&np) && !port_allocated.contains(&np) {
                    self.alloc_port(np, txn)
                        .map_err(|e| node_port_invalid(new, i, np, &e))?;
                    port_allocated.push(np);
                }
                np
            } else {
                let p = self.alloc_next_port(txn).map_err(|e| {
                    ServiceError::Internal(format!("failed to allocate a nodePort: {e}"))
                })?;
                new.ports[i].node_port = p;
                p
            };
            let key = (new.ports[i].protocol.clone(), value);
            if seen.contains(&key) {
                return Err(ServiceError::Unknown(format!(
                    "duplicate nodePort: {{{} {}}}",
                    key.0, key.1
                )));
            }
            seen.push(key);
        }
        let new_numbers = new.node_ports();
        for p in old_numbers {
            if !new_numbers.contains(&p) {
                txn.release.push(Claim::NodePort(p));
            }
        }
        Ok(())
    }

    /// Delete: release every value the Service holds (upstream `releaseAllocatedResources`).
    /// Returns what was actually released.
    pub fn release_view(&mut self, v: &SvcView) -> Vec<Claim> {
        let mut out = Vec::new();
        for c in claims_of(v) {
            if self.release_claim(c) {
                out.push(c);
            }
        }
        out
    }

    /// [`Self::release_view`] on a k8s Service.
    pub fn release_service(&mut self, svc: &Service) -> Vec<Claim> {
        self.release_view(&SvcView::from_service(svc))
    }
}

/// Values a stored Service holds: its ClusterIPs (unless ExternalName or headless), its
/// nodePorts, and its healthCheckNodePort when it needs one. Unparsable IPs are skipped.
pub fn claims_of(v: &SvcView) -> Vec<Claim> {
    let mut out = Vec::new();
    if !v.is_external_name() && v.cluster_ips.first().is_none_or(|ip| ip != CLUSTER_IP_NONE) {
        let ips: &[String] = if v.cluster_ips.is_empty() {
            std::slice::from_ref(&v.cluster_ip)
        } else {
            &v.cluster_ips
        };
        for ip in ips {
            if let Some(a) = parse_ip_sloppy(ip) {
                out.push(Claim::Ip(a));
            }
        }
    }
    for p in v.node_ports() {
        if !out.contains(&Claim::NodePort(p)) {
            out.push(Claim::NodePort(p));
        }
    }
    if v.needs_health_check() && v.health_check_node_port > 0 {
        out.push(Claim::NodePort(v.health_check_node_port));
    }
    out
}

enum AllocIpFailure {
    Static(IpAllocError),
    Dynamic(IpAllocError),
}

fn node_port_invalid(v: &SvcView, i: usize, port: i32, e: &PortAllocError) -> ServiceError {
    ServiceError::invalid(
        &v.name,
        FieldError::invalid(
            format!("spec.ports[{i}].nodePort"),
            FieldValue::Int(i64::from(port)),
            e.to_string(),
        ),
    )
}
