//! Property tests: no duplicates, round-trips, band preference, rebuild exclusion.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;

use common::{allocators, svc};
use proptest::prelude::*;
use serde_json::json;
use svcplane_allocator::range::u128_to_ip;
use svcplane_allocator::{
    Cidr, CidrAllocator, FamilyAllocator, IpAllocError, IpFamily, PortAllocator, PortRange, Rng,
    rebuild,
};

#[derive(Debug, Clone)]
enum Op {
    Next(bool),
    Static(bool, u16),
    Release(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => any::<bool>().prop_map(Op::Next),
        2 => (any::<bool>(), any::<u16>()).prop_map(|(f, o)| Op::Static(f, o)),
        2 => any::<usize>().prop_map(Op::Release),
    ]
}

fn family(fam: IpFamily, cidrs: &[&str]) -> FamilyAllocator {
    let mut f = FamilyAllocator::new(fam);
    for c in cidrs {
        f.add_range(CidrAllocator::parse(c).unwrap()).unwrap();
    }
    f
}

/// An address near the ranges (some inside, some outside).
fn candidate(fam: IpFamily, o: u16) -> IpAddr {
    match fam {
        IpFamily::V4 => u128_to_ip(
            fam,
            u128::from(u32::from(std::net::Ipv4Addr::new(10, 0, 0, 0))) + u128::from(o % 600),
        ),
        IpFamily::V6 => u128_to_ip(
            fam,
            u128::from("fd00::".parse::<std::net::Ipv6Addr>().unwrap()) + u128::from(o % 400),
        ),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Random allocate/release interleavings across overlapping and disjoint ranges of
    /// both families never hand out a held address twice, and agree with a model.
    #[test]
    fn never_a_duplicate(seed in any::<u64>(), ops in proptest::collection::vec(op(), 1..400)) {
        let mut fams = [
            family(IpFamily::V4, &["10.0.0.0/26", "10.0.0.0/24", "10.0.1.0/28"]),
            family(IpFamily::V6, &["fd00::/122", "fd00::/120"]),
        ];
        let mut held: Vec<IpAddr> = Vec::new();
        let mut rng = Rng::new(seed);
        for op in ops {
            match op {
                Op::Next(v6) => {
                    let f = &mut fams[usize::from(v6)];
                    match f.allocate_next(&mut rng) {
                        Ok(ip) => {
                            prop_assert!(!held.contains(&ip), "duplicate {}", ip);
                            prop_assert!(f.contains(ip));
                            held.push(ip);
                        }
                        Err(e) => {
                            prop_assert_eq!(e, IpAllocError::Full);
                            let cap: usize = if v6 { 255 } else { 254 + 14 };
                            let n = held.iter().filter(|ip| ip.is_ipv6() == v6).count();
                            prop_assert_eq!(n, cap);
                        }
                    }
                }
                Op::Static(v6, o) => {
                    let fam = if v6 { IpFamily::V6 } else { IpFamily::V4 };
                    let ip = candidate(fam, o);
                    let f = &mut fams[usize::from(v6)];
                    let expect = if !f.contains(ip) {
                        Err(IpAllocError::MismatchedNetwork)
                    } else if held.contains(&ip) {
                        Err(IpAllocError::Allocated)
                    } else {
                        Ok(())
                    };
                    prop_assert_eq!(f.allocate(ip), expect.clone());
                    if expect.is_ok() {
                        held.push(ip);
                    }
                }
                Op::Release(i) => {
                    if !held.is_empty() {
                        let ip = held.swap_remove(i % held.len());
                        let f = &mut fams[usize::from(ip.is_ipv6())];
                        prop_assert!(f.release(ip));
                        prop_assert!(!f.has(ip));
                    }
                }
            }
        }
        let mut all: Vec<IpAddr> = fams.iter().flat_map(|f| f.allocated()).collect();
        all.sort();
        let mut model = held.clone();
        model.sort();
        prop_assert_eq!(all, model);
    }

    /// allocate → release → allocate round-trips, statically and dynamically.
    #[test]
    fn allocate_release_allocate(seed in any::<u64>(), prefix in 20u8..=28, n in 1usize..50) {
        let mut r = CidrAllocator::new(Cidr::parse(&format!("10.0.0.0/{prefix}")).unwrap()).unwrap();
        let mut rng = Rng::new(seed);
        let n = n.min(r.size() as usize);
        let ips: Vec<IpAddr> = (0..n).map(|_| r.allocate_next(&mut rng).unwrap()).collect();
        let used = r.used();
        for ip in &ips {
            prop_assert!(r.release(*ip));
            prop_assert!(!r.release(*ip), "double release is a no-op");
        }
        prop_assert_eq!(r.used(), 0);
        for ip in &ips {
            r.allocate(*ip).unwrap();
        }
        prop_assert_eq!(r.used(), used);
        for ip in &ips {
            prop_assert_eq!(r.allocate(*ip), Err(IpAllocError::Allocated));
        }
    }

    /// Dynamic picks stay in the upper band until it is full, whatever the static
    /// allocations made before.
    #[test]
    fn dynamic_upper_band_until_full(
        seed in any::<u64>(),
        v6 in any::<bool>(),
        host_bits in 5u8..=11,
        statics in proptest::collection::vec(any::<u16>(), 0..40),
    ) {
        let cidr = if v6 { format!("fd00::/{}", 128 - host_bits) } else { format!("10.0.0.0/{}", 32 - host_bits) };
        let mut r = CidrAllocator::parse(&cidr).unwrap();
        for s in statics {
            let off = u64::from(s) % r.size();
            let _ = r.allocate(r.ip_at(off));
        }
        let upper_free = (r.band_offset()..r.size()).filter(|o| !r.has(r.ip_at(*o))).count();
        let mut rng = Rng::new(seed);
        for _ in 0..upper_free {
            let ip = r.allocate_next(&mut rng).unwrap();
            prop_assert!(r.in_upper_band(ip), "{} not in upper band", ip);
        }
        if r.free() > 0 {
            let ip = r.allocate_next(&mut rng).unwrap();
            prop_assert!(!r.in_upper_band(ip));
        }
    }

    /// After rebuilding from a list of Services, dynamic allocation never returns an
    /// address (or nodePort) that one of them holds.
    #[test]
    fn rebuild_then_allocate_avoids_list(
        seed in any::<u64>(),
        offs in proptest::collection::btree_set(0u32..62, 0..62),
        ports in proptest::collection::btree_set(30000i32..30064, 0..64),
    ) {
        let ports: Vec<i32> = ports.into_iter().collect();
        let services: Vec<_> = offs.iter().enumerate().map(|(i, o)| {
            let ip = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 0, 0, 1)) + o);
            let np = ports.get(i).copied().unwrap_or(0);
            let mut spec = json!({"clusterIP": ip.to_string(), "clusterIPs": [ip.to_string()], "type": "NodePort",
                "ports": [{"port": 80}]});
            if np != 0 {
                spec["ports"][0]["nodePort"] = json!(np);
            }
            svc("ns", &format!("s{i}"), spec)
        }).collect();
        let mut al = allocators("10.0.0.0/26", "30000-30063", seed);
        let r = rebuild(&mut al, &services);
        prop_assert!(r.findings.is_empty());
        let taken: BTreeSet<IpAddr> = offs.iter()
            .map(|o| IpAddr::V4(std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 0, 0, 1)) + o)))
            .collect();
        let mut rng = Rng::new(seed);
        let fam = al.family_mut(IpFamily::V4).unwrap();
        let mut got = 0;
        while let Ok(ip) = fam.allocate_next(&mut rng) {
            prop_assert!(!taken.contains(&ip), "{} was in the list", ip);
            got += 1;
        }
        prop_assert_eq!(got, 62 - taken.len());
        let used_ports: BTreeSet<i32> = ports.iter().take(offs.len()).copied().collect();
        let np = al.node_ports_mut();
        let mut rng = Rng::new(seed);
        while let Ok(p) = np.allocate_next(&mut rng) {
            prop_assert!(!used_ports.contains(&p), "port {} was in the list", p);
        }
    }

    /// NodePorts: no duplicates under random allocate/release.
    #[test]
    fn node_ports_never_duplicate(seed in any::<u64>(), ops in proptest::collection::vec((any::<bool>(), any::<u16>()), 1..300)) {
        let mut a = PortAllocator::new(PortRange::parse("30000-30199").unwrap());
        let mut rng = Rng::new(seed);
        let mut held: Vec<i32> = Vec::new();
        for (alloc, x) in ops {
            if alloc {
                if let Ok(p) = a.allocate_next(&mut rng) {
                    prop_assert!(!held.contains(&p));
                    held.push(p);
                } else {
                    prop_assert_eq!(held.len(), 200);
                }
            } else if !held.is_empty() {
                let p = held.swap_remove(usize::from(x) % held.len());
                prop_assert!(a.release(p));
            }
        }
        prop_assert_eq!(a.used() as usize, held.len());
    }
}

proptest! {
    /// The sparse set (IPv6 up to /64) and the bitmap agree on every query.
    #[test]
    fn sparse_and_dense_agree(
        ops in proptest::collection::vec((any::<bool>(), 0u64..300), 1..400),
        queries in proptest::collection::vec((0u64..300, 0u64..300), 1..50),
    ) {
        use svcplane_allocator::bitmap::{HierBitmap, SparseSet, Slots};
        let mut d = Slots::Dense(HierBitmap::new(300));
        let mut s = Slots::Sparse(SparseSet::new(300));
        for (set, i) in ops {
            if set {
                prop_assert_eq!(d.set(i), s.set(i));
            } else {
                prop_assert_eq!(d.clear(i), s.clear(i));
            }
        }
        prop_assert_eq!(d.used(), s.used());
        prop_assert_eq!(d.taken().collect::<Vec<_>>(), s.taken().collect::<Vec<_>>());
        for (a, b) in queries {
            prop_assert_eq!(d.first_free(a, b), s.first_free(a, b), "[{}, {})", a, b);
            if a < b {
                let start = a + (b - a) / 2;
                prop_assert_eq!(d.first_free_wrapping(a, b, start), s.first_free_wrapping(a, b, start));
            }
        }
    }
}
