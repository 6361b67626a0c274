//! Allocation hot paths (issue 5 targets: ClusterIP p50 <= 100 ns, <= 1 us on a nearly
//! full /12; NodePort <= 200 ns; no heap allocation per call).
//!
//! Each dynamic iteration is `allocate_next` followed by `release` of the result, so the
//! fill level stays where the benchmark put it; the alloc columns (AllocProfiler) show
//! that neither call touches the heap.

#![allow(clippy::expect_used)] // bench setup: a panic means a broken fixture

use std::cell::RefCell;
use std::hint::black_box;
use std::net::IpAddr;

use svcplane_allocator::{CidrAllocator, PortAllocator, PortRange, Rng};

#[global_allocator]
static ALLOC: divan::AllocProfiler = divan::AllocProfiler::system();

fn main() {
    divan::main();
}

/// A range filled to `fill_per_10k` / 10000 of its usable addresses by dynamic picks.
fn filled(cidr: &str, fill_per_10k: u64) -> CidrAllocator {
    let mut r = CidrAllocator::parse(cidr).expect("bench cidr");
    let n = (u128::from(r.size()) * u128::from(fill_per_10k) / 10_000) as u64;
    let mut rng = Rng::new(1);
    for _ in 0..n.min(50_000_000) {
        r.allocate_next(&mut rng).expect("filling below capacity");
    }
    r
}

const FILLS: [u64; 3] = [0, 5_000, 9_999];

#[divan::bench(args = FILLS, sample_count = 200, sample_size = 512)]
fn cluster_ip_next_v4_12(bencher: divan::Bencher, fill_per_10k: u64) {
    let mut r = filled("10.96.0.0/12", fill_per_10k);
    let mut rng = Rng::new(7);
    bencher.bench_local(|| {
        let ip = r.allocate_next(&mut rng).expect("free addresses remain");
        r.release(black_box(ip));
    });
}

#[divan::bench(args = FILLS, sample_count = 200, sample_size = 512)]
fn cluster_ip_next_v4_16(bencher: divan::Bencher, fill_per_10k: u64) {
    let mut r = filled("10.0.0.0/16", fill_per_10k);
    let mut rng = Rng::new(7);
    bencher.bench_local(|| {
        let ip = r.allocate_next(&mut rng).expect("free addresses remain");
        r.release(black_box(ip));
    });
}

#[divan::bench(sample_count = 200, sample_size = 512)]
fn cluster_ip_next_v6_64(bencher: divan::Bencher) {
    let mut r = CidrAllocator::parse("fd00::/64").expect("bench cidr");
    let mut rng = Rng::new(1);
    for _ in 0..100_000 {
        r.allocate_next(&mut rng).expect("huge range");
    }
    bencher.bench_local(|| {
        let ip = r.allocate_next(&mut rng).expect("huge range");
        r.release(black_box(ip));
    });
}

/// Static (specific) allocation of a free address in a half-full /12, then release.
#[divan::bench(sample_count = 200, sample_size = 512)]
fn cluster_ip_allocate_specific_v4_12(bencher: divan::Bencher) {
    let mut r = filled("10.96.0.0/12", 5_000);
    let mut rng = Rng::new(3);
    let free: Vec<IpAddr> = (0..4096)
        .map(|_| r.allocate_next(&mut rng).expect("half full"))
        .collect();
    for ip in &free {
        r.release(*ip);
    }
    let mut i = 0usize;
    bencher.bench_local(|| {
        let ip = free[i % free.len()];
        i = i.wrapping_add(1);
        r.allocate(black_box(ip)).expect("free");
        r.release(ip);
    });
}

/// Release alone: inputs are allocated untimed, only `release` is timed.
#[divan::bench(sample_count = 200, sample_size = 512)]
fn cluster_ip_release_v4_12(bencher: divan::Bencher) {
    let r = RefCell::new(filled("10.96.0.0/12", 5_000));
    let rng = RefCell::new(Rng::new(9));
    bencher
        .with_inputs(|| {
            r.borrow_mut()
                .allocate_next(&mut rng.borrow_mut())
                .expect("half full")
        })
        .bench_local_values(|ip| r.borrow_mut().release(ip));
}

#[divan::bench(args = FILLS, sample_count = 200, sample_size = 512)]
fn node_port_next_default(bencher: divan::Bencher, fill_per_10k: u64) {
    let mut a = PortAllocator::new(PortRange::parse("30000-32767").expect("range"));
    let mut rng = Rng::new(1);
    let n = 2768 * fill_per_10k / 10_000;
    for _ in 0..n {
        a.allocate_next(&mut rng).expect("filling");
    }
    bencher.bench_local(|| {
        let p = a.allocate_next(&mut rng).expect("free ports remain");
        a.release(black_box(p));
    });
}
